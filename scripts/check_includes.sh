#!/bin/sh
# The library's layers include one way only:
#
#   core  <-  kernel  <-  mask  <-  svg
#
# A file of a layer may include its own layer and the ones to its left (and
# the public headers of include/); nothing else. libstsa_io's layers (src/io:
# files, src/workload: the synthetic workload, which may use io's) and the distributed layer (src/dist, libstsa_mpi) are clients
# of the library: each includes only its own headers and the public ones
# (stsa.h, stsa_io.h, stsa_mpi.h), so it links against libstsa's exported
# API alone. The CLI (tools/) is a client too: it includes public headers
# and its own (same-folder) headers only. Micro-kernels (src/kernel/generic, x86,
# arm) include only their contract (kernel/kernels.h), the SIMD vocabulary
# (kernel/simd/), the exp2 constants and the f16/bf16 conversions: they know
# nothing of tiles, plans or contexts. See docs/architecture.md.
#
#   scripts/check_includes.sh [repository root]
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

allowed() { # layer -> the layers its files may include
  case $1 in
    core) echo "core" ;;
    kernel) echo "core kernel" ;;
    mask) echo "core kernel mask" ;;
    svg) echo "core kernel mask svg" ;;
    io) echo "io" ;;
    workload) echo "io workload" ;;
    dist) echo "dist" ;;
    *) echo "?" ;;
  esac
}

microkernel_ok() { # the headers a micro-kernel file may include
  case $1 in
    kernel/kernels.h | kernel/exp2_poly.h | kernel/simd/* | kernel/generic/* | core/convert.h) return 0 ;;
    *) return 1 ;;
  esac
}

status=0
n=0
for f in $(find src -name '*.[ch]' | sort); do
  layer=$(echo "$f" | cut -d/ -f2)
  ok=$(allowed "$layer")
  if [ "$ok" = "?" ]; then
    echo "check_includes: $f is in no known layer (core, kernel, mask, svg, io, workload, dist)" >&2
    status=1
    continue
  fi
  case $f in src/kernel/generic/* | src/kernel/x86/* | src/kernel/arm/*) micro=1 ;; *) micro=0 ;; esac
  for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
    n=$((n + 1))
    case $inc in */*) ;; *) continue ;; esac # stsa.h and same-folder headers
    if [ $micro = 1 ] && ! microkernel_ok "$inc"; then
      echo "check_includes: micro-kernel $f includes \"$inc\": micro-kernels may include only kernel/kernels.h, kernel/simd/, kernel/generic/, kernel/exp2_poly.h, core/convert.h" >&2
      status=1
    fi
    target=${inc%%/*}
    case " $ok " in *" $target "*) continue ;; esac
    echo "check_includes: $f includes \"$inc\": the $layer layer may include only: $ok" >&2
    status=1
  done
done
# tools/: public headers and tools/ headers only (no folder in the name).
for f in $(find tools -name '*.[ch]' | sort); do
  for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
    n=$((n + 1))
    if [ -e "include/$inc" ] || [ -e "tools/$inc" ]; then
      continue
    fi
    echo "check_includes: $f includes \"$inc\": tools/ may include only the public headers (include/) and its own" >&2
    status=1
  done
done

[ $status = 0 ] && echo "check_includes: $n includes, all in the layers' one direction"
exit $status
