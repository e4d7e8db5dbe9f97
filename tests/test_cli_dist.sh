#!/usr/bin/env bash
# test_cli_dist.sh STSA_BINARY — `stsa run --dist` under mpirun.
#
# On a small dump (made here, python3 standard library only): --dist
# ulysses on 1, 2 and 3 ranks writes the single-process output file byte
# for byte (cmp) in dense, sparse and svg mode; ring and hybrid:2 on 2 to 4
# ranks agree with it to 1e-6 of its largest |value|; the report gains its
# "dist" object. Failures on one rank (mpirun's MPMD form: a missing input,
# a different --density, an option value out of range) stop every rank with
# that rank's message, a non-zero exit and no file written; so does one
# rank given a dump of other shapes. --mode svg2 and auto, with and without
# --max-error, run under --dist ulysses (on 3 ranks, one head each: the
# single-process file and per-head report); --max-error and --mode svg2 and
# auto are usage errors with ring and hybrid layouts, and so is bench svg's
# --dtype with --dist. The report and the
# summary say what each rank ran (a rank without heads named, its entry
# null), and the distributed bench what every rank and one process ran. Skips (exit 0,
# a "skipped" line) when the binary was built without MPI or there is no
# mpirun. Prints "test_cli_dist: N passed, M failed".
set -euo pipefail

. "$(dirname "$0")/cli_common.sh" test_cli_dist "$@"

skip() {
  echo "test_cli_dist: skipped: $*"
  exit 0
}
probe=$("$STSA" run --dist ulysses 2>&1 || true)
case "$probe" in
*"built without MPI"*) skip "this stsa was built without MPI (no --dist)" ;;
esac
command -v mpirun >/dev/null 2>&1 || skip "no mpirun on PATH"
# CI runs as root; the ranks share the machine's cores (OMP_NUM_THREADS from
# cli_common.sh is split between the ranks of a node), more ranks than cores
# included: Open MPI wants to be told both
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(timeout 120 mpirun)
if mpirun --version 2>&1 | grep -qi "open mpi\|openrte"; then
  MPIRUN+=(--oversubscribe --bind-to none)
fi

# ---------------------------------------------------------------- helper
cat >helper.py <<'PY'
"""Dumps and output checks for test_cli_dist.sh."""
import json, random, struct, sys

from tensor_dumps import write_st


def cmd_gen(args):
    """gen FILE LAYOUT B F Hp Wp C H D SEED: q, k, v of B x (C + F*Hp*Wp)
    tokens (C text tokens first), noise plus a code shared by the tokens of
    a frame (even heads) or of a position (odd heads), so SVG has kinds to
    find."""
    path, layout = args[0], args[1]
    B, F, Hp, Wp, C, H, D, seed = map(int, args[2:10])
    rnd = random.Random(seed)
    S = C + F * Hp * Wp
    codes = {}
    t = {n: [[[[rnd.gauss(0, 0.5) for _ in range(D)] for _ in range(H)] for _ in range(S)]
             for _ in range(B)] for n in 'qkv'}
    for b in range(B):
        for s in range(C, S):
            f, p = divmod(s - C, Hp * Wp)
            for h in range(H):
                key = (b, h, f if h % 2 == 0 else -1 - p)
                code = codes.setdefault(key, [rnd.gauss(0, 1.3) for _ in range(D)])
                for n in 'qk':
                    t[n][b][s][h] = [x + y for x, y in zip(t[n][b][s][h], code)]
    tensors = {}
    for n, x in t.items():
        if layout == 'bhsd':
            flat = [v for b in range(B) for h in range(H) for s in range(S) for v in x[b][s][h]]
            tensors[n] = (flat, [B, H, S, D])
        else:
            flat = [v for b in range(B) for s in range(S) for h in range(H) for v in x[b][s][h]]
            tensors[n] = (flat, [B, S, H, D])
    write_st(path, tensors, 'F32')


def read_out(path):
    data = open(path, 'rb').read()
    n = struct.unpack('<Q', data[:8])[0]
    t = json.loads(data[8:8 + n])['out']
    assert t['dtype'] == 'F32', t['dtype']
    a, b = t['data_offsets']
    return struct.unpack('<%df' % ((b - a) // 4), data[8 + n + a:8 + n + b])


def cmd_close(args):
    """close REF OUT...: every OUT within 1e-6 of max |REF| of REF."""
    ref = read_out(args[0])
    top = max(abs(x) for x in ref)
    bad = 0
    for path in args[1:]:
        out = read_out(path)
        diff = max(abs(x - y) for x, y in zip(ref, out)) if len(out) == len(ref) else 1e300
        if not diff <= 1e-6 * top:
            print('%s: max |diff| %g > 1e-6 x %g' % (path, diff, top), file=sys.stderr)
            bad += 1
    sys.exit(1 if bad else 0)


def cmd_check_json(args):
    """check-json FILE EXPR...: every Python expression holds for r = the JSON
    (and s = the JSON of the file after '--single', when given)."""
    r = json.load(open(args[0]))
    env = {'r': r}
    if len(args) > 2 and args[1] == '--single':
        env['s'] = json.load(open(args[2]))
        args = args[2:]
    for e in args[1:]:
        assert eval(e, {}, env), '%s (in %s)' % (e, args[0])


if __name__ == '__main__':
    cmds = {'gen': cmd_gen, 'close': cmd_close, 'check-json': cmd_check_json}
    try:
        cmds[sys.argv[1]](sys.argv[2:])
    except AssertionError as e:
        print('check failed: %s' % e, file=sys.stderr)
        sys.exit(1)
PY


# expect_same NAME A B: files A and B are equal byte for byte.
expect_same() {
  if cmp -s "$2" "$3"; then ok; else bad "$1: $3 differs from $2"; fi
}

# ------------------------------------------------------------- run it
F=3 HP=4 WP=5 C=8 H=3 D=16
python3 helper.py gen in.safetensors bshd 1 $F $HP $WP $C $H $D 5
geo=(--in in.safetensors --layout bshd --frames $F --height $HP --width $WP --text $C
  --text-pos prefix --density 0.6 --quiet)
for mode in dense sparse svg; do
  expect_ok "one.$mode" "$STSA" run "${geo[@]}" --mode "$mode" --out "one.$mode.safetensors" \
    --report "one.$mode.json"
done

# ulysses: the single-process file, byte for byte (1 rank: no mpirun too)
expect_ok "singleton.dense" "$STSA" run "${geo[@]}" --mode dense --dist ulysses \
  --out singleton.dense.safetensors
expect_same singleton.dense one.dense.safetensors singleton.dense.safetensors
for mode in dense sparse svg; do
  for np in 1 2 3; do
    out=ulysses.$np.$mode
    expect_ok "$out" "${MPIRUN[@]}" -np $np "$STSA" run "${geo[@]}" --mode "$mode" \
      --dist ulysses --out "$out.safetensors" --report "$out.json"
    expect_same "$out" "one.$mode.safetensors" "$out.safetensors"
  done
done

# the error budget under ulysses: each rank bounds its own heads and the
# report gathers them, equal to one process's (the same rows, whole heads)
expect_ok one.budget "$STSA" run "${geo[@]}" --mode svg --max-error 0.05 \
  --out one.budget.safetensors --report one.budget.json
expect_ok ulysses.budget "${MPIRUN[@]}" -np 2 "$STSA" run "${geo[@]}" --mode svg \
  --max-error 0.05 --dist ulysses --out ulysses.budget.safetensors --report ulysses.budget.json
expect_same ulysses.budget one.budget.safetensors ulysses.budget.safetensors
expect_ok report.budget python3 helper.py check-json ulysses.budget.json \
  --single one.budget.json \
  "[h['est_error'] for h in r['per_head']] == [h['est_error'] for h in s['per_head']]" \
  "[h['budget'] for h in r['per_head']] == [h['budget'] for h in s['per_head']]" \
  "all(h['est_error'] is not None and h['est_error'] >= 0 for h in r['per_head'])" \
  "r['density'] == s['density']"

# SVG2 and auto under ulysses: each rank keeps its block of heads from call
# to call (its session's SVG2 centroids stay its own). With 3 heads on 3
# ranks a block is one head, whose session is the one-head session one
# process runs per head: the same file byte for byte and the same per-head
# report (kinds, bounds, budget actions, top-p, auto's candidates and
# choice); on 2 ranks (blocks of 2 and 1) every head keeps the budget
for mode in svg2 auto; do
  for budget in none 0.05; do
    extra=()
    [ "$budget" = none ] || extra=(--max-error "$budget")
    expect_ok "one.$mode.$budget" "$STSA" run "${geo[@]}" --mode $mode \
      ${extra[@]+"${extra[@]}"} --out "one.$mode.$budget.safetensors" \
      --report "one.$mode.$budget.json"
    out=ulysses.3.$mode.$budget
    expect_ok "$out" "${MPIRUN[@]}" -np 3 "$STSA" run "${geo[@]}" --mode $mode \
      ${extra[@]+"${extra[@]}"} --dist ulysses --out "$out.safetensors" --report "$out.json"
    expect_same "$out" "one.$mode.$budget.safetensors" "$out.safetensors"
    expect_ok "report.$out" python3 helper.py check-json "$out.json" \
      --single "one.$mode.$budget.json" \
      "[{k: v for k, v in h.items() if k != 'time_ms'} for h in r['per_head']] == \
       [{k: v for k, v in h.items() if k != 'time_ms'} for h in s['per_head']]" \
      "r['density'] == s['density'] and r['cold'] == s['cold'] == True" \
      "r['svg']['q_clusters'] == s['svg']['q_clusters'] > 0" \
      "r['svg']['kv_clusters'] == s['svg']['kv_clusters'] > 0"
  done
  out=ulysses.2.$mode.budget
  expect_ok "$out" "${MPIRUN[@]}" -np 2 "$STSA" run "${geo[@]}" --mode $mode \
    --max-error 0.05 --dist ulysses --out "$out.safetensors" --report "$out.json"
  expect_ok "report.$out" python3 helper.py check-json "$out.json" \
    "r['dist']['local_heads'] == [2, 1] and len(r['per_head']) == $H" \
    "all(h['est_error'] is not None and 0 <= h['est_error'] <= 0.05 for h in r['per_head'])"
done

# the report: the single-process one plus "dist"
expect_ok report.dist python3 helper.py check-json ulysses.3.svg.json --single one.svg.json \
  "r['dist']['scheme'] == 'ulysses' and r['dist']['ranks'] == 3" \
  "r['dist']['ulysses_degree'] == 3 and r['dist']['ring_degree'] == 1" \
  "r['dist']['tokens'] == [22, 23, 23] and sum(r['dist']['local_heads']) == $H" \
  "len(r['dist']['compute_ms']) == 3 and len(r['dist']['comm_ms']) == 3" \
  "r['dist']['imbalance'] >= 0" \
  "set(r) - set(s) == {'dist'} and set(s) <= set(r)" \
  "[h['kind'] for h in r['per_head']] == [h['kind'] for h in s['per_head']]" \
  "r['density'] == s['density'] and r['dense_call'] == s['dense_call']" \
  "r['ran'] == s['ran'] and r['dist']['ran'] == [s['ran']] * 3 and 'ran_note' not in r"

# what ran, per rank: 2 heads over 3 ranks leave one rank without heads,
# which the report and the summary name (its entry null), rather than a guess
python3 helper.py gen heads2.safetensors bshd 1 $F $HP $WP $C 2 $D 5
expect_ok ran.np3 "${MPIRUN[@]}" -np 3 "$STSA" run --in heads2.safetensors --layout bshd \
  --frames $F --height $HP --width $WP --text $C --text-pos prefix --mode dense \
  --compare-dense --dist ulysses --report ran.np3.json
expect_ok ran.np3.report python3 helper.py check-json ran.np3.json --single one.dense.json \
  "r['ran'] == r['dense_ran'] == s['ran']" \
  "r['ran_note'] == r['dense_ran_note'] and 'computed no heads of the call' in r['ran_note']" \
  "[x is None for x in r['dist']['ran']] == [n == 0 for n in r['dist']['local_heads']]" \
  "r['dist']['dense_ran'] == r['dist']['ran'] and r['dist']['ran'].count(None) == 1"
# (a backend with bf16 tiles says why these f32 inputs did not take them)
if grep -Eq "^  ran: [a-z0-9]*, f32( \(.*\))? on every rank with heads; rank [0-9] computed no heads" \
  ran.np3.stdout; then ok; else bad "ran.np3: the summary: $(head -c 600 ran.np3.stdout)"; fi
# the distributed bench: every rank's and the one-process call's
expect_ok bench.ran "${MPIRUN[@]}" -np 2 "$STSA" bench svg --preset wan21-480p --frames 2 \
  --height 6 --width 8 --heads 2 --threads 1 --dist ulysses --json
head -n1 bench.ran.stdout >bench.ran.json
expect_ok bench.ran.fields python3 helper.py check-json bench.ran.json \
  "r['bench'] == 'svg_dist' and r['tokens'] == 96" \
  "r['ran'] == r['ran_1rank'] and r['ran_ranks'] == [r['ran']] * 2" \
  "r['ran']['arithmetic'] == 'f32' and 'ran_note' not in r"

# ring and hybrid:2: close to it
for mode in dense sparse svg; do
  outs=()
  for run in ring:2 ring:3 ring:4 hybrid:2:2 hybrid:2:4; do
    scheme=${run%:*} np=${run##*:}
    out=$(echo "$scheme" | tr : _).$np.$mode
    expect_ok "$out" "${MPIRUN[@]}" -np "$np" "$STSA" run "${geo[@]}" --mode "$mode" \
      --dist "$scheme" --out "$out.safetensors"
    outs+=("$out.safetensors")
  done
  expect_ok "close.$mode" python3 helper.py close "one.$mode.safetensors" "${outs[@]}"
done

# a batch of 2 in [B,H,S,D]: shards are not contiguous in the output
python3 helper.py gen b2.safetensors bhsd 2 $F $HP $WP $C $H $D 6
geo2=(--in b2.safetensors --layout bhsd --frames $F --height $HP --width $WP --text $C
  --text-pos prefix --density 0.6 --quiet)
expect_ok b2.one "$STSA" run "${geo2[@]}" --mode svg --out b2.one.safetensors
expect_ok b2.dist "${MPIRUN[@]}" -np 2 "$STSA" run "${geo2[@]}" --mode svg --dist ulysses \
  --out b2.dist.safetensors
expect_same b2 b2.one.safetensors b2.dist.safetensors

# ------------------------------------------------------------- failures
# expect_fail_all NAME PATTERN CMD...: non-zero exit, PATTERN on stderr from
# every one of the 2 ranks, and neither err.safetensors nor err.json (nor a
# staging file) written.
expect_fail_all() {
  local name=$1 pattern=$2
  shift 2
  rm -f err.*
  if "$@" >"$name.stdout" 2>"$name.stderr"; then
    bad "$name: succeeded but should fail"
  elif [ "$(grep -c -- "$pattern" "$name.stderr")" -lt 2 ]; then
    bad "$name: stderr lacks '$pattern' from both ranks: $(head -c 600 "$name.stderr")"
  elif ls err.* >/dev/null 2>&1; then
    bad "$name: wrote $(ls err.*)"
  else
    ok
  fi
}

base=(--layout bshd --frames $F --height $HP --width $WP --text $C --text-pos prefix
  --mode svg --dist ulysses --out err.safetensors --report err.json)
expect_fail_all missing-input "rank 1: --in missing.safetensors: cannot open it" \
  "${MPIRUN[@]}" -np 1 "$STSA" run --in in.safetensors "${base[@]}" --density 0.6 : \
  -np 1 "$STSA" run --in missing.safetensors "${base[@]}" --density 0.6
expect_fail_all other-density "rank 1: the ranks were given different options: '--density 0.5' here, '--density 0.6' on rank 0" \
  "${MPIRUN[@]}" -np 1 "$STSA" run --in in.safetensors "${base[@]}" --density 0.6 : \
  -np 1 "$STSA" run --in in.safetensors "${base[@]}" --density 0.5
python3 helper.py gen h2.safetensors bshd 1 $F $HP $WP $C 2 $D 5
expect_fail_all other-input "rank 1: the ranks were given different inputs: 'q: f32 \[B,S,H,D\] = \[1, 68, 2, 16\]' here" \
  "${MPIRUN[@]}" -np 1 "$STSA" run --in in.safetensors "${base[@]}" --density 0.6 : \
  -np 1 "$STSA" run --in h2.safetensors "${base[@]}" --density 0.6
expect_fail_all bad-value "rank 1: --density = 2 is out of range" \
  "${MPIRUN[@]}" -np 1 "$STSA" run --in in.safetensors "${base[@]}" --density 0.6 : \
  -np 1 "$STSA" run --in in.safetensors "${base[@]}" --density 2
expect_fail_all hybrid-degree "the Ulysses degree 3 does not divide the 2 ranks" \
  "${MPIRUN[@]}" -np 2 "$STSA" run --in in.safetensors "${base[@]}" --dist hybrid:3
# what the distributed call cannot do is a usage error (exit 2, nothing
# written), not an option dropped: an error budget, SVG2 (1 rank, no mpirun)
expect_usage() {
  local name=$1 msg=$2
  shift 2
  rm -f err.*
  local rc=0
  "$@" >"$name.stdout" 2>"$name.stderr" || rc=$?
  if [ "$rc" = 2 ] && grep -q -- "$msg" "$name.stderr" && ! ls err.* >/dev/null 2>&1; then
    ok
  else
    bad "$name: exit $rc, $(head -c 300 "$name.stderr")"
  fi
}
expect_usage max-error "--max-error runs with --dist ulysses only" \
  "$STSA" run --in in.safetensors "${base[@]}" --density 0.6 --max-error 0.1 --dist ring
expect_usage svg2-ring "--mode svg2 runs with --dist ulysses only" \
  "$STSA" run --in in.safetensors "${base[@]}" --mode svg2 --dist ring
expect_usage auto-hybrid "--mode auto runs with --dist ulysses only" \
  "$STSA" run --in in.safetensors "${base[@]}" --mode auto --dist hybrid:2

expect_fail_all bench-permute "does not apply with --dist" \
  "${MPIRUN[@]}" -np 2 "$STSA" bench svg --preset wan21-480p --dist ring --compare-permute
expect_fail_all bench-dtype "does not run with --dist yet" \
  "${MPIRUN[@]}" -np 2 "$STSA" bench svg --preset wan21-480p --dist ring --dtype bf16

finish
