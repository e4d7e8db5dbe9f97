#!/bin/sh
# Builds the libFuzzer targets and runs each for a bounded time.
#
#   fuzz/run.sh [build-dir (default build-fuzz)] [seconds per target (default 60)]
#
# FUZZ_TARGETS picks targets (default: safetensors npy plan attention
# svg2_session). FUZZ_RUNS=N runs each for N executions instead of a time
# (a long run of one target: FUZZ_TARGETS=svg2_session FUZZ_RUNS=1000000),
# with a 60 s limit per input (a loaded machine stretches a slow one).
# FUZZ_FAST_LIB=1 builds the library without comparison tracing
# (-fno-sanitize-coverage=trace-cmp; the target's own code keeps it): about
# twice the executions a second, for long runs; ASan and UBSan stay on.
#
# Each target runs on a copy of its seed corpus (fuzz/corpus/<name>), so the
# committed seeds never change; crash/leak/timeout inputs land in
# <build-dir>/artifacts_<name>/. Exits non-zero if any target fails.
# CC may name the compiler (default clang-14, else clang).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-build-fuzz}
secs=${2:-60}
case $out in /*) ;; *) out=$root/$out ;; esac

cc=${CC:-}
if [ -z "$cc" ]; then
  if command -v clang-14 >/dev/null 2>&1; then cc=clang-14; else cc=clang; fi
fi

mkdir -p "$out"
# The file-format targets fuzz libstsa_io through stsa_io.h; of libstsa they
# need only the dtype names and sizes (src/core/status.c).
io_srcs="$(ls "$root"/src/io/*.c) $root/src/core/status.c"
# The plan, attention and svg2_session targets link the whole library (the
# mask layer calls the kernels) but not libstsa_mpi (src/dist) or libstsa_io (src/io); the AVX2,
# AVX-512, AMX and AVX512-BF16 micro-kernels are compiled on their own with their ISA
# flags (x86 only), as CMake does.
lib_srcs="$(find "$root/src" -name '*.c' ! -path '*/x86/*' ! -path '*/dist/*' ! -path '*/io/*' | sort)"
san="-fsanitize=address,undefined -fno-sanitize-recover=all"
lib_cov=-fsanitize=fuzzer-no-link
if [ "${FUZZ_FAST_LIB:-0}" = 1 ]; then
  lib_cov="$lib_cov -fno-sanitize-coverage=trace-cmp"
  objs=
  mkdir -p "$out/lib"
  for src in $lib_srcs; do
    obj=$out/lib/$(echo "${src#"$root"/src/}" | tr / _ | sed 's/\.c$/.o/')
    "$cc" -std=c11 $lib_cov $san -g -O1 -fopenmp -I"$root/include" -I"$root/src" \
      -c "$src" -o "$obj"
    objs="$objs $obj"
  done
  lib_srcs=$objs
fi
case $(uname -m) in
  x86_64 | i?86)
    for isa in avx2 avx512 amx avx512bf16; do
      flags="-mavx2 -mfma -mf16c"
      [ "$isa" = avx512 ] && flags="$flags -mavx512f -mavx512dq"
      [ "$isa" = avx512bf16 ] && flags="$flags -mavx512f -mavx512dq -mavx512bw -mavx512bf16"
      [ "$isa" = amx ] && flags="$flags -mavx512f -mavx512dq -mavx512bw -mavx512bf16 -mamx-tile -mamx-bf16"
      "$cc" -std=c11 $lib_cov $san -g -O1 -fopenmp $flags \
        -I"$root/include" -I"$root/src" \
        -c "$root/src/kernel/x86/microkernels_$isa.c" -o "$out/microkernels_$isa.o"
      lib_srcs="$lib_srcs $out/microkernels_$isa.o"
    done ;;
esac

# Dictionaries: the tokens a mutator would otherwise need many tries to hit.
cat >"$out/safetensors.dict" <<'DICT'
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"F16\""
"\"BF16\""
"\"F64\""
"\"U8\""
"[0,0]"
"4294967296"
"9223372036854775807"
"-1"
"1.5"
"\\u0000"
"\xff"
DICT
cat >"$out/npy.dict" <<'DICT'
"\x93NUMPY"
"'descr'"
"'fortran_order'"
"'shape'"
"'<f4'"
"'<f2'"
"'>f4'"
"'|O'"
"True"
"False"
"(2, 3)"
"(0,)"
"()"
"4294967296"
"-1"
DICT

# The library's OpenMP threads sleep between parallel regions rather than
# spin: a fuzz target calls thousands of small problems a second.
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMP_WAIT_POLICY

status=0
limit="-max_total_time=$secs -timeout=10"
[ -n "${FUZZ_RUNS:-}" ] && limit="-runs=$FUZZ_RUNS -timeout=60"
for t in ${FUZZ_TARGETS:-safetensors npy plan attention svg2_session}; do
  bin=$out/fuzz_$t
  extra=
  case $t in
    # plan: checked with the plan tests' brute-force oracle
    plan) srcs="$lib_srcs $root/tests/plan_oracle.c" dict= extra="-fopenmp -I$root/tests" ;;
    attention | svg2_session) srcs=$lib_srcs dict= extra=-fopenmp ;;
    *) srcs=$io_srcs dict="-dict=$out/$t.dict" ;;
  esac
  echo "== building $bin"
  # -fno-sanitize-recover makes UBSan findings fatal, so they count as crashes.
  "$cc" -std=c11 -fsanitize=fuzzer $san $extra \
    -g -O1 -I"$root/include" -I"$root/src" "$root/fuzz/fuzz_$t.c" $srcs \
    -ljansson -lm -o "$bin"

  corpus=$out/corpus_$t
  rm -rf "$corpus"
  mkdir -p "$corpus" "$out/artifacts_$t"
  if [ -d "$root/fuzz/corpus/$t" ]; then cp "$root/fuzz/corpus/$t/"* "$corpus/"; fi

  echo "== running $t ($limit)"
  if ! (cd "$out" && "$bin" $limit \
          $dict -artifact_prefix="$out/artifacts_$t/" \
          -print_final_stats=1 "$corpus" 2>"$out/fuzz_$t.log"); then
    echo "!! $t FAILED; see $out/fuzz_$t.log and $out/artifacts_$t/" >&2
    tail -n 40 "$out/fuzz_$t.log" >&2
    status=1
  else
    grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' \
      "$out/fuzz_$t.log" || true
  fi
done
exit $status
