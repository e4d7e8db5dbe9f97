#!/usr/bin/env bash
# test_cli_bench.sh STSA_BINARY — `stsa bench` and `stsa demo` say what each
# timed call ran.
#
# bench dense, sparse, svg and svg2 (tiny sizes) give every timed call's
# backend, arithmetic, bf16 terms and why (the JSON's "ran", "dense_ran",
# "cold_ran"; the text's "ran" lines): the automatic backend, and
# STSA_BACKEND=portable and ref. Where this stsa runs the amx backend (an AMX
# CPU, or the emulating test build), bf16 calls that cannot take its bf16
# tiles say why (kv tiles of 48 keys; SVG's frame-aligned tiles of 240 keys,
# Wan 720p's case) and the peak caveat follows the tiles that ran.
# Prints "test_cli_bench: N passed, M failed".
set -euo pipefail

. "$(dirname "$0")/cli_common.sh" test_cli_bench "$@"

# check NAME FILE EXPR...: every Python expression holds for r = the JSON of
# every line of FILE.
cat >check.py <<'PY'
import json, sys
lines = [json.loads(x) for x in open(sys.argv[1]) if x.startswith('{')]
assert lines, 'no JSON line in %s' % sys.argv[1]
KEYS = {'backend', 'arithmetic', 'bf16_terms', 'pv_precision', 'why'}
for r in lines:
    for e in sys.argv[2:]:
        if not eval(e, {'KEYS': KEYS}, {'r': r}):
            print('check failed: %s (in %s)' % (e, json.dumps(r)), file=sys.stderr)
            sys.exit(1)
PY
check() {
  local name=$1
  shift
  if python3 check.py "$@" 2>"$name.check"; then ok; else bad "$name: $(cat "$name.check")"; fi
}
# expect_grep NAME FILE PATTERN: FILE holds PATTERN
expect_grep() {
  if grep -q -- "$3" "$2"; then ok; else bad "$1: $2 lacks '$3': $(head -c 600 "$2")"; fi
}

small=(--seq 64 --heads 1 --dim 32 --reps 1 --threads 1)
svg_small=(--preset wan21-720p --frames 2 --height 12 --width 20 --heads 1 --threads 1)
svg2_small=(--preset wan21-480p --frames 3 --height 8 --width 8 --heads 1 --reps 1
  --threads 1)

# ------------------------------------------------ the automatic backend
expect_ok dense "$STSA" bench dense "${small[@]}" --json
check dense.json dense.stdout "set(r['ran']) == KEYS and r['ran']['backend'] == r['backend']" \
  "r['ran']['arithmetic'] == 'f32' and r['ran']['bf16_terms'] == 0" \
  "r['bf16_tiles'] is False and (r['ran']['why'] == '') == (r['backend'] not in ('amx', 'avx512bf16'))"
# the tool's OpenMP threads wait passive unless the user chose a policy
case "$STSA" in
*-qemu) passive="('passive', 'default')" ;; # restarting may not reach QEMU
*) passive="('passive',)" ;;
esac
no_policy=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u STSA_CLI_WAIT_POLICY_SET)
expect_ok dense-wait "${no_policy[@]}" "$STSA" bench dense "${small[@]}" --json
check dense-wait.json dense-wait.stdout "r['omp_wait_policy'] in $passive"
expect_ok dense-active "${no_policy[@]}" OMP_WAIT_POLICY=active "$STSA" bench dense \
  "${small[@]}" --json
check dense-active.json dense-active.stdout "r['omp_wait_policy'] == 'active'"
expect_ok dense-spin "${no_policy[@]}" GOMP_SPINCOUNT=1000 "$STSA" bench dense "${small[@]}" \
  --json
check dense-spin.json dense-spin.stdout "r['omp_wait_policy'] == 'default'"
expect_ok dense-text "$STSA" bench dense "${small[@]}"
expect_grep dense-text dense-text.stdout "^  ran: [a-z0-9]*, f32"
expect_ok sparse "$STSA" bench sparse "${small[@]}" --mode all --json
check sparse.json sparse.stdout "set(r['ran']) == KEYS and r['dense_ran'] == r['ran']" \
  "r['ran']['arithmetic'] == 'f32'"
expect_ok sparse-nodense "$STSA" bench sparse "${small[@]}" --no-dense --json
check sparse-nodense.json sparse-nodense.stdout "r['dense_ran'] is None" \
  "r['ran']['arithmetic'] == 'f32'"
expect_ok sparse-text "$STSA" bench sparse "${small[@]}"
expect_grep sparse-text-dense sparse-text.stdout "^  dense: median .*; ran [a-z0-9]*, f32"
expect_grep sparse-text-mode sparse-text.stdout "^  exact  .*; ran [a-z0-9]*, f32"
expect_ok svg "$STSA" bench svg "${svg_small[@]}" --json
check svg.json svg.stdout "r['tokens'] == 480 and r['kv_tile'] == 240" \
  "set(r['ran']) == KEYS and r['ran']['backend'] == r['dense_ran']['backend']" \
  "r['ran']['arithmetic'] == r['dense_ran']['arithmetic'] == 'f32'"
expect_ok svg-text "$STSA" bench svg "${svg_small[@]}"
# --max-error reaches the call: the worst bound covers the worst true error
# and is within the budget unless a head was widened or ran dense
expect_ok svg-budget "$STSA" bench svg "${svg_small[@]}" --max-error 0.05 --json
check svg-budget.json svg-budget.stdout "r['max_error'] == 0.05" \
  "r['worst_rel_l2'] <= max(r['worst_bound'], 1e-6)" \
  "r['worst_bound'] <= 0.05 or r['widened_heads'] + r['dense_heads'] > 0"
expect_ok svg-budget-text "$STSA" bench svg "${svg_small[@]}" --max-error 0.05
expect_grep svg-budget-text svg-budget-text.stdout "^  budget 0.05: worst bound "
expect_grep svg-text svg-text.stdout "^  ran: SVG [a-z0-9]*, f32.*; dense [a-z0-9]*, f32"
expect_ok svg2 "$STSA" bench svg2 "${svg2_small[@]}" --json
check svg2.json svg2.stdout "set(r['ran']) == KEYS and r['cold_ran'] == r['ran']" \
  "r['ran']['arithmetic'] == r['dense_ran']['arithmetic'] == 'f32'"
expect_ok svg2-text "$STSA" bench svg2 "${svg2_small[@]}"
expect_grep svg2-text svg2-text.stdout "^  ran: SVG2 [a-z0-9]*, f32.*; dense [a-z0-9]*, f32"
expect_ok demo "$STSA" demo --quick --quiet --threads 1
expect_grep demo demo.stdout "^ran: dense calls [a-z0-9]*, f32.*; sparse SVG calls [a-z0-9]*, f32"
# a partial geometry is refused, not completed from the preset
if "$STSA" bench svg --preset wan21-480p --frames 2 >partial.out 2>partial.err; then
  bad "bench svg --frames alone: succeeded"
else
  expect_grep partial partial.err "give all of --frames, --height and --width, or none"
fi

# ------------------------------------------------ forced backends
for want in portable:f32 ref:f64; do
  backend=${want%:*} arith=${want#*:}
  RAN="{'backend': '$backend', 'arithmetic': '$arith', 'bf16_terms': 0, 'pv_precision': 'f32', 'why': ''}"
  expect_ok "dense-$backend" env STSA_BACKEND="$backend" "$STSA" bench dense "${small[@]}" \
    --json
  check "dense-$backend.json" "dense-$backend.stdout" "r['ran'] == $RAN"
  expect_ok "dense-$backend-text" env STSA_BACKEND="$backend" "$STSA" bench dense \
    "${small[@]}"
  expect_grep "dense-$backend-text" "dense-$backend-text.stdout" "^  ran: $backend, $arith$"
  expect_ok "sparse-$backend" env STSA_BACKEND="$backend" "$STSA" bench sparse \
    "${small[@]}" --json
  check "sparse-$backend.json" "sparse-$backend.stdout" "r['ran'] == r['dense_ran'] == $RAN"
  expect_ok "svg-$backend" env STSA_BACKEND="$backend" "$STSA" bench svg "${svg_small[@]}" \
    --json
  check "svg-$backend.json" "svg-$backend.stdout" "r['ran'] == r['dense_ran'] == $RAN"
  expect_ok "svg2-$backend" env STSA_BACKEND="$backend" "$STSA" bench svg2 \
    "${svg2_small[@]}" --json
  check "svg2-$backend.json" "svg2-$backend.stdout" \
    "r['ran'] == r['cold_ran'] == r['dense_ran'] == $RAN"
done

# ------------------------------------------------ the bf16 tiles (amx, avx512bf16)
for tb in amx avx512bf16; do
  if ! "$STSA" --help | grep -q "this machine runs:.* $tb\b"; then
    echo "test_cli_bench: the $tb checks skipped: this stsa does not run the $tb backend"
    continue
  fi
  caveat="bf16 on the AMX tile multiply"
  [ "$tb" = amx ] || caveat="bf16 on vdpbf16ps"
  tiles=(--backend "$tb" --dtype bf16 --seq 64 --heads 1 --dim 64 --reps 1 --threads 1)
  expect_ok "$tb"-tiles "$STSA" bench dense "${tiles[@]}" --json
  check "$tb"-tiles.json "$tb"-tiles.stdout "r['bf16_tiles'] is True" \
    "r['ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 2, 'pv_precision': 'near-f32', 'why': ''}"
  expect_ok "$tb"-tiles-text "$STSA" bench dense "${tiles[@]}"
  expect_grep "$tb"-tiles-text "$tb"-tiles-text.stdout \
    "^  ran: $tb, bf16-tiles (P.V near-f32: 2 bf16 terms a probability)$"
  expect_grep "$tb"-tiles-caveat "$tb"-tiles-text.stdout "$caveat"
  # f32 inputs on the same backend run the f32 kernels: no bf16 caveat
  expect_ok "$tb"-f32-text "$STSA" bench dense --backend "$tb" --dtype f32 --seq 64 --heads 1 \
    --dim 64 --reps 1 --threads 1
  expect_grep "$tb"-f32-text "$tb"-f32-text.stdout "^  ran: $tb, f32 (q, k and v are f32"
  if grep -q -- "$caveat" "$tb"-f32-text.stdout; then
    bad "$tb-f32-caveat: an f32 run printed '$caveat'"
  else ok; fi
  # kv tiles of 48 keys (a 16-key multiple, not 32): the bf16 tiles too
  expect_ok "$tb"-48 "$STSA" bench dense "${tiles[@]}" --kv-tile 48 --json
  check "$tb"-48.json "$tb"-48.stdout "r['bf16_tiles'] is True" \
    "r['ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 2, 'pv_precision': 'near-f32', 'why': ''}"
  expect_ok "$tb"-48-text "$STSA" bench dense "${tiles[@]}" --kv-tile 48
  expect_grep "$tb"-48-text "$tb"-48-text.stdout \
    "^  ran: $tb, bf16-tiles (P.V near-f32: 2 bf16 terms a probability)$"
  # SVG on frames of 12 x 20 tokens: frame-aligned tiles of 240 keys take them
  expect_ok "$tb"-svg env STSA_BACKEND="$tb" "$STSA" bench svg "${svg_small[@]}" --dtype bf16 \
    --json
  check "$tb"-svg.json "$tb"-svg.stdout "r['kv_tile'] == 240" \
    "r['ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 3, 'pv_precision': 'f32', 'why': ''}" \
    "r['dense_ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 3, 'pv_precision': 'f32', 'why': ''}"
  expect_ok "$tb"-svg-text env STSA_BACKEND="$tb" "$STSA" bench svg "${svg_small[@]}" --dtype bf16
  expect_grep "$tb"-svg-text "$tb"-svg-text.stdout \
    "^  ran: SVG $tb, bf16-tiles (P.V f32: 3 bf16 terms a probability); dense $tb, bf16-tiles (P.V f32: 3 bf16 terms a probability)$"
  # tiles of 96 x 128: the SVG call takes the bf16 tiles
  expect_ok "$tb"-svg-fit env STSA_BACKEND="$tb" "$STSA" bench svg "${svg_small[@]}" --dtype bf16 \
    --q-tile 96 --kv-tile 128 --json
  check "$tb"-svg-fit.json "$tb"-svg-fit.stdout \
    "r['ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 3, 'pv_precision': 'f32', 'why': ''}"
  # --pv-precision (and its numeric alias --bf16-terms) reaches the SVG and dense calls
  expect_ok "$tb"-svg-one env STSA_BACKEND="$tb" "$STSA" bench svg "${svg_small[@]}" \
    --dtype bf16 --pv-precision bf16 --json
  check "$tb"-svg-one.json "$tb"-svg-one.stdout \
    "r['ran'] == r['dense_ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 1, 'pv_precision': 'bf16', 'why': ''}"
  expect_ok "$tb"-svg-terms env STSA_BACKEND="$tb" "$STSA" bench svg "${svg_small[@]}" \
    --dtype bf16 --bf16-terms 2 --json
  check "$tb"-svg-terms.json "$tb"-svg-terms.stdout \
    "r['ran'] == r['dense_ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 2, 'pv_precision': 'near-f32', 'why': ''}"
  expect_ok "$tb"-near "$STSA" bench dense "${tiles[@]}" --pv-precision near-f32 --out-dtype f32 \
    --json
  check "$tb"-near.json "$tb"-near.stdout \
    "r['ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 2, 'pv_precision': 'near-f32', 'why': ''}"
done

# a precision asked of an f32 path runs f32, and says so; a bad name is refused
expect_ok f32-asked-bf16 "$STSA" bench dense --backend portable --dtype bf16 --seq 64 --heads 1 \
  --dim 64 --reps 1 --threads 1 --pv-precision bf16 --json
check f32-asked-bf16.json f32-asked-bf16.stdout \
  "r['ran'] == {'backend': 'portable', 'arithmetic': 'f32', 'bf16_terms': 0, 'pv_precision': 'f32', 'why': ''}"
if "$STSA" bench dense --pv-precision exact >pv-bad.stdout 2>pv-bad.stderr; then
  bad "pv-bad: --pv-precision exact was accepted"
else
  expect_grep pv-bad pv-bad.stderr "expects auto, bf16, near-f32 or f32"
fi

finish
