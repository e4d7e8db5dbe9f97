#!/usr/bin/env bash
# test_cli_svg2.sh STSA_BINARY — the CLI faces of Sparse VideoGen 2 and of
# the error budget: `stsa run --mode svg2` on the built-in workload (the
# report's new fields, the per-head table; a preset on a smaller video gets
# automatic cluster counts), --max-error for svg and svg2 (a tiny budget
# makes every head dense), the usage errors (--density with
# --top-p, svg2-only flags elsewhere: exit 2, nothing written), `stsa bench
# svg2 --json` on a tiny geometry and `stsa plot pareto` (a PNG and its JSON
# table). Prints "test_cli_svg2: N passed, M failed".
set -euo pipefail

. "$(dirname "$0")/cli_common.sh" test_cli_svg2 "$@"

# check FILE EXPR...: every python expression holds for r = the JSON in FILE
check() {
  local file=$1
  shift
  python3 - "$file" "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
h = r.get('per_head') if isinstance(r, dict) else None
for e in sys.argv[2:]:
    if not eval(e):
        sys.exit('check failed: %s (in %s)' % (e, sys.argv[1]))
PY
}
# expect_usage NAME MESSAGE OUTPUT CMD...: exit 2, MESSAGE on stderr, OUTPUT not written
expect_usage() {
  local name=$1 msg=$2 out=$3
  shift 3
  local rc=0
  "$@" >"$name.stdout" 2>"$name.stderr" || rc=$?
  if [ "$rc" = 2 ] && grep -q -- "$msg" "$name.stderr" && [ ! -e "$out" ]; then ok; else
    bad "$name: exit $rc, $(head -c 300 "$name.stderr")"
  fi
}

geo=(--workload --frames 4 --height 8 --width 8 --heads 3 --head-dim 32 --threads 2)

# ------------------------------------------- run --mode svg2: the report
expect_ok svg2 "$STSA" run "${geo[@]}" --mode svg2 --compare-dense --report svg2.json \
  --out svg2.safetensors
expect_ok svg2.fields check svg2.json "r['mode'] == 'svg2' and r['svg']['method'] == 'svg2'" \
  "r['svg']['top_p'] == 0.9 and r['svg']['budget_of_keys'] == 'top_p'" \
  "r['density_target'] is None" \
  "r['svg']['q_clusters'] >= 1 and r['svg']['kv_clusters'] >= 1" \
  "r['cold'] is True and r['timing']['cluster_ms'] >= 0" \
  "r['timing']['cluster_ms'] <= r['timing']['profile_ms']" \
  "[x['truth'] for x in h] == ['spatial', 'temporal', 'semantic']" \
  "all(x['kind'] == 'semantic' for x in h)" \
  "all(0 < x['density'] <= 1 and x['est_error'] is None for x in h)" \
  "all(x['budget'] == 'none' and abs(x['top_p'] - 0.9) < 1e-6 for x in h)" \
  "all(x['rel_l2'] >= 0 for x in h) and 0 < r['density'] <= 1" \
  "r['ran']['backend'] == r['dense_ran']['backend'] == r['backend']" \
  "r['ran']['arithmetic'] == r['dense_ran']['arithmetic'] == 'f32'" \
  "set(r['ran']) == {'backend', 'arithmetic', 'bf16_terms', 'pv_precision', 'why'}"
if grep -q "^  ran: [a-z0-9]*, f32" svg2.stdout &&
  grep -q "^  dense reference ran: [a-z0-9]*, f32" svg2.stdout; then ok; else
  bad "svg2: the summary does not say what ran: $(head -c 600 svg2.stdout)"
fi
if grep -q "est_err *rel_l2 budget *top_p" svg2.stdout &&
  grep -q "query x .* key clusters per head" svg2.stdout; then ok; else
  bad "svg2: the summary lacks the per-head table or the clusters: $(head -c 600 svg2.stdout)"
fi

# plot kinds reads the semantic kind back
expect_ok kinds "$STSA" plot kinds --report svg2.json --out kinds.png

# --density instead of --top-p: the key budget
expect_ok svg2.density "$STSA" run "${geo[@]}" --mode svg2 --density 0.3 --q-clusters 4 \
  --kv-clusters 8 --report svg2d.json --quiet
expect_ok svg2.density.fields check svg2d.json "r['svg']['top_p'] == 0" \
  "r['svg']['budget_of_keys'] == 'density' and r['density_target'] == 0.3" \
  "r['svg']['q_clusters'] == 4 and r['svg']['kv_clusters'] == 8" \
  "all(x['top_p'] == 0 for x in h)"

# a preset's cluster counts (300 / 1000 at 720p) give way to the automatic
# ones when the flags make the video smaller; --q-clusters still applies
small=(--workload --preset wan21-720p --frames 4 --height 12 --width 16 --heads 2 --head-dim 32
  --threads 2 --mode svg2 --quiet)
expect_ok preset.small "$STSA" run "${small[@]}" --report small.json
expect_ok preset.small.fields check small.json \
  "0 < r['svg']['q_clusters'] < 300 and 0 < r['svg']['kv_clusters'] < 1000"
expect_ok preset.small.q "$STSA" run "${small[@]}" --q-clusters 5 --report small5.json
expect_ok preset.small.q.fields check small5.json "r['svg']['q_clusters'] == 5" \
  "r['svg']['kv_clusters'] < 1000"

# ------------------------------------------- any layer and any q tile (issue 30)
# the largest --layer (the session's per-layer state grew with the index:
# out of memory here), and a q tile the backend's register tile (6 or 12
# rows) rounds up, as SVG and block-sparse plans do (each call failed)
tiny=(--workload --frames 2 --height 4 --width 8 --heads 1 --head-dim 16 --threads 2
  --mode svg2 --compare-dense --quiet)
expect_ok layer.huge "$STSA" run "${tiny[@]}" --layer 2147483647 --report layer.json
expect_ok layer.huge.fields check layer.json "r['cold'] is True" \
  "all(x['rel_l2'] >= 0 for x in h)"
expect_ok layer.int64 "$STSA" run "${tiny[@]}" --layer 9223372036854775807 \
  --step 9223372036854775807 --report layer64.json
expect_ok layer.int64.fields check layer64.json "r['layer'] == 9223372036854775807"
expect_ok q-tile.6 "$STSA" run "${tiny[@]}" --q-tile 6 --report qtile.json
expect_ok q-tile.6.fields check qtile.json "r['svg']['q_tile'] in (6, 12)" \
  "all(x['rel_l2'] >= 0 for x in h)"

# ------------------------------------------- --max-error: a tiny budget runs every head dense
# (6 frames: the sparse plans keep less than everything there)
tight=(--workload --frames 6 --height 8 --width 8 --heads 3 --head-dim 32 --threads 2)
for mode in svg svg2 auto; do
  extra=(--density 0.1)
  [ $mode != svg ] && extra=(--q-clusters 4 --kv-clusters 16)
  expect_ok "budget.$mode" "$STSA" run "${tight[@]}" --mode $mode "${extra[@]}" \
    --max-error 1e-9 --compare-dense --report "budget.$mode.json" --quiet
  expect_ok "budget.$mode.fields" check "budget.$mode.json" \
    "r['svg']['max_error'] == 1e-9" \
    "all(x['budget'] == 'dense' and x['density'] == 1 for x in h)" \
    "all(x['rel_l2'] < 1e-5 for x in h)"
done
expect_ok budget.none check svg2.json "r['svg']['max_error'] == 0"
# (spatial keeps every pair at 6 frames: its profiled rows take the dense
# rows' sums, so its bound can be 0 and meet the budget; the recheck then
# sends it dense)
expect_ok budget.auto.why check budget.auto.json \
  "all(x['auto']['choice'] == 'dense' for x in h)" \
  "all(x['auto']['reason'] in ('none-met', 'recheck') for x in h)"

# ------------------------------------------- --mode auto: per head the cheapest within the budget
expect_ok auto "$STSA" run "${tight[@]}" --mode auto --density 0.2 --q-clusters 4 \
  --kv-clusters 16 --max-error 0.1 --compare-dense --report auto.json --quiet
cand="[c for c in x['auto']['candidates'].values() if c['bound'] is not None and c['bound'] <= 0.1]"
expect_ok auto.fields check auto.json "r['mode'] == 'auto'" \
  "all(len(x['auto']['candidates']) == 4 for x in h)" \
  "all(x['auto']['reason'] == 'cheapest' for x in h)" \
  "all(x['est_error'] <= 0.1 for x in h)" \
  "all(abs(x['density'] - min(c['density'] for c in $cand)) < 1e-6 for x in h)"
expect_ok auto.nobudget "$STSA" run "${tight[@]}" --mode auto --density 0.2 \
  --q-clusters 4 --kv-clusters 16 --report auto0.json --quiet
sparse="[c['bound'] for k, c in x['auto']['candidates'].items() if k != 'dense']"
expect_ok auto.nobudget.fields check auto0.json \
  "all(x['auto']['reason'] == 'lowest-bound' for x in h)" \
  "all(x['est_error'] == min($sparse) for x in h)"

# ------------------------------------------- usage errors write nothing
expect_usage both "two budgets" both.json "$STSA" run "${geo[@]}" --mode svg2 \
  --density 0.2 --top-p 0.9 --report both.json
expect_usage top-p-svg "apply to --mode svg2 and auto only" topp.json "$STSA" run "${geo[@]}" \
  --mode svg --top-p 0.9 --report topp.json
expect_usage budget-dense "applies to --mode svg, svg2 and auto only" bd.json "$STSA" run \
  "${geo[@]}" --mode dense --max-error 0.1 --report bd.json
expect_usage workload-in "not both" wi.json "$STSA" run "${geo[@]}" --in x.safetensors \
  --report wi.json
expect_usage bench-both "two budgets" /nonexistent "$STSA" bench svg2 \
  --preset wan21-480p --top-p 0.9 --density 0.2

# ------------------------------------------- bench svg2 on a tiny geometry
expect_ok bench "$STSA" bench svg2 --preset wan21-480p --frames 3 --height 8 --width 8 \
  --heads 2 --reps 2 --threads 2 --json
head -n1 bench.stdout >bench.json
expect_ok bench.fields check bench.json "r['bench'] == 'svg2' and r['tokens'] == 192" \
  "r['cold_ms'] > 0 and r['warm_ms'] > 0 and r['dense_ms'] > 0" \
  "0 <= r['warm_cluster_ms'] <= r['profile_ms'] and r['cold_cluster_ms'] >= 0" \
  "0 < r['density'] <= 1 and abs(r['ideal_speedup'] - 1 / r['density']) < 0.01 * r['ideal_speedup']" \
  "abs(r['speedup'] - r['dense_ms'] / r['warm_ms']) < 0.01 * r['speedup'] + 1e-3" \
  "abs(r['efficiency'] - r['speedup'] / r['ideal_speedup']) < 0.01" \
  "0 <= r['cluster_share'] <= 1 and r['kinds'] == 'semantic'" \
  "r['ran'] == r['cold_ran'] and r['ran']['arithmetic'] == r['dense_ran']['arithmetic'] == 'f32'"

# ------------------------------------------- plot pareto on a tiny geometry
expect_ok pareto "$STSA" plot pareto --frames 4 --height 8 --width 16 --heads-per-kind 1 \
  --head-dim 32 --densities 0.1,0.3 --threads 2 --out pareto.png --json pareto.json
if [ "$(head -c 8 pareto.png | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then ok; else
  bad "pareto.png is not a PNG"
fi
expect_ok pareto.fields check pareto.json "len(r['points']) == 3 * 2 * 3" \
  "{p['method'] for p in r['points']} == {'svg', 'svg2', 'oracle'}" \
  "{p['kind'] for p in r['points']} == {'semantic', 'spatial', 'temporal'}" \
  "all(0 < p['density'] <= 1 and p['rel_l2'] >= 0 for p in r['points'])"
if grep -q "oracle .*0.100" pareto.stdout; then ok; else bad "pareto: no table on stdout"; fi

finish
