#!/usr/bin/env bash
# Outputs of a build that a restructuring must leave bitwise unchanged.
#
#   scripts/check_bitwise.sh save DIR [BUILD [AMX_BUILD]]
#   scripts/check_bitwise.sh compare REF_DIR NEW_DIR
#
# save: `stsa run` on the same inputs (D 64, 80, 128; f32, f16, bf16; 397
# tokens, no tile's multiple) in the modes dense, svg, svg2, auto, sparse
# (spatial and temporal), svg on kv tiles of 64 and of 48 keys (a 16-key
# multiple the bf16 tiles pad) and svg/svg2 with an error budget (the profiling
# rows paths: their estimates are in the report), on the backends portable,
# avx2, avx512 and (where this CPU runs it) avx512bf16 of BUILD (default
# build) and amx of AMX_BUILD (default
# build-amxemu: `make test-amx-emulated`; skipped when it is missing), at
# one thread; the reports without their timings; and the bf16-terms cases
# (1, 2, 3) through the Python binding, which needs numpy and ml_dtypes
# (PYTHON, default the diffusers venv's). compare: cmp of every file.
set -euo pipefail
PYTHON=${PYTHON:-/var/tmp/stsa-venv-diffusers/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")

compare() {
  local ref=$1 new=$2 n=0 bad=0
  for f in "$ref"/out/*; do
    n=$((n + 1))
    cmp -s "$f" "$new/out/$(basename "$f")" || { echo "DIFFERS: $(basename "$f")"; bad=$((bad + 1)); }
  done
  [ "$(ls "$ref/out" | wc -l)" = "$(ls "$new/out" | wc -l)" ] || { echo "file counts differ"; bad=$((bad + 1)); }
  echo "compared $n files: $bad differ"
  [ "$bad" = 0 ]
}

# The report without what varies from run to run.
strip_report() {
  "$PYTHON" - "$1" "$2" <<'PY'
import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items()
                if k not in ("timing", "time_ms", "speedup_vs_dense", "input", "threads")
                and not k.endswith("_ms")}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
json.dump(strip(json.load(open(sys.argv[1]))), open(sys.argv[2], "w"), indent=1, sort_keys=True)
PY
}

save() {
  local dir=$1 build=${2:-$ROOT/build} amx=${3:-$ROOT/build-amxemu}
  mkdir -p "$dir/in" "$dir/out" "$dir/tmp"
  "$PYTHON" "$HERE/check_bitwise.py" inputs "$dir/in"
  local geo=(--layout bshd --frames 3 --height 10 --width 13 --text 7 --text-pos suffix)
  local modes=("dense:--mode dense" "svg:--mode svg" "svg2:--mode svg2"
               "auto:--mode auto" "spatial:--mode sparse --head-kind spatial"
               "temporal:--mode sparse --head-kind temporal"
               "svgerr:--mode svg --max-error 0.05" "svg2err:--mode svg2 --max-error 0.05"
               "tile64:--mode svg --tile 64" "tile48:--mode svg --tile 48")
  local runs=("portable:$build/stsa" "avx2:$build/stsa" "avx512:$build/stsa")
  "$build/stsa" --help | grep -q 'this machine runs:.* avx512bf16' &&
    runs+=("avx512bf16:$build/stsa")
  [ -x "$amx/stsa" ] && runs+=("amx:$amx/stsa")
  for run in "${runs[@]}"; do
    local backend=${run%%:*} stsa=${run#*:}
    for input in "$dir"/in/*.safetensors; do
      local name
      name=$(basename "$input" .safetensors)
      for m in "${modes[@]}"; do
        local tag=${m%%:*} args=${m#*:} case="${backend}_${name}_${m%%:*}"
        # shellcheck disable=SC2086 # args is a list of flags
        STSA_BACKEND=$backend "$stsa" run --in "$input" "${geo[@]}" $args --threads 1 \
          --quiet --out "$dir/out/$case.safetensors" --report "$dir/tmp/$case.json"
        strip_report "$dir/tmp/$case.json" "$dir/out/$case.report.json"
        : "$tag"
      done
    done
    [ "$backend" = avx512 ] || [ "$backend" = avx512bf16 ] || [ "$backend" = amx ] &&
      STSA_LIBRARY=$(dirname "$stsa")/libstsa.so PYTHONPATH=$ROOT/python/src \
        "$PYTHON" "$HERE/check_bitwise.py" terms "$dir/out" "$backend"
  done
  rm -rf "$dir/tmp"
  echo "saved $(ls "$dir/out" | wc -l) files in $dir/out"
}

case ${1:-} in
  save) shift; save "$@" ;;
  compare) shift; compare "$@" ;;
  *) sed -n 2,17p "$0"; exit 2 ;;
esac
