#!/bin/sh
# The library's layers include one way only:
#
#   core  <-  kernel  <-  mask  <-  svg        io: core only
#
# A file of a layer may include its own layer and the ones to its left (and
# the public stsa.h); nothing else. KNOWN lists the inclusions against that
# direction that are still to be removed (the block-sparse kernel still reads
# the mask layer's plan structure): a new one fails, and so does a listed one
# that is gone, so the list can only shrink.
#
#   scripts/check_includes.sh [repository root]
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

KNOWN="src/kernel/sparse.c:mask/plan.h
src/kernel/sparse.h:mask/plan.h"

allowed() { # layer -> the layers its files may include
  case $1 in
    core) echo "core" ;;
    kernel) echo "core kernel" ;;
    mask) echo "core kernel mask" ;;
    svg) echo "core kernel mask svg" ;;
    io) echo "core io" ;;
    *) echo "?" ;;
  esac
}

status=0
found=""
for f in $(find src -name '*.[ch]' | sort); do
  layer=$(echo "$f" | cut -d/ -f2)
  ok=$(allowed "$layer")
  if [ "$ok" = "?" ]; then
    echo "check_includes: $f is in no known layer (core, kernel, mask, svg, io)" >&2
    status=1
    continue
  fi
  for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
    case $inc in */*) ;; *) continue ;; esac # stsa.h and same-folder headers
    target=${inc%%/*}
    case " $ok " in *" $target "*) continue ;; esac
    found="$found$f:$inc
"
    if ! printf '%s\n' "$KNOWN" | grep -qx "$f:$inc"; then
      echo "check_includes: $f includes \"$inc\": the $layer layer may include only: $ok" >&2
      status=1
    fi
  done
done
for k in $KNOWN; do
  if ! printf '%s' "$found" | grep -qx "$k"; then
    echo "check_includes: $k is gone: remove it from KNOWN in $0" >&2
    status=1
  fi
done
n=$(printf '%s' "$found" | grep -c . || true)
[ $status = 0 ] && echo "check_includes: the layers include one way ($n known exceptions left)"
exit $status
