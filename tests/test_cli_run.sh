#!/usr/bin/env bash
# test_cli_run.sh STSA_BINARY — `stsa run` and `stsa plot` end to end.
#
# Generates small Q/K/V dumps (safetensors and .npy, python3 standard library
# only), runs `stsa run` in every layout and compares the output with plain
# softmax attention computed here in float64; checks the SVG report, the error
# paths (non-zero exit, a message on stderr, no output file) and that the
# plots are valid PNGs; and that the summary and the report say what each
# call ran (backend, arithmetic, bf16 terms, why): the automatic backend,
# STSA_BACKEND=portable and ref, and bf16 inputs whose SVG tiles of 240 keys
# the bf16 tiles of amx and avx512bf16 take (checked where this stsa runs
# them). Prints "test_cli_run: N passed, M failed".
set -euo pipefail

. "$(dirname "$0")/cli_common.sh" test_cli_run "$@"

# ---------------------------------------------------------------- helper
cat >helper.py <<'PY'
"""Dumps, reference attention and file checks for test_cli_run.sh."""
import json, math, random, struct, sys

from tensor_dumps import FMT, write_npy, write_st


def video_start(C, pos):
    return C if pos == 'prefix' else 0


def make_qkv(F, Hp, Wp, C, pos, H, D, seed, amp=1.3):
    """Q, K, V as [S][H][D] lists: noise plus a random code shared by the
    tokens of one frame (even heads: spatial) or of one position (odd heads:
    temporal), added to q and k so that those tokens attend to each other."""
    rnd = random.Random(seed)
    N = C + F * Hp * Wp
    v0 = video_start(C, pos)
    qkv = [[[[rnd.gauss(0, 0.5) for _ in range(D)] for _ in range(H)] for _ in range(N)]
           for _ in range(3)]
    codes = {}
    for s in range(v0, v0 + F * Hp * Wp):
        f, p = divmod(s - v0, Hp * Wp)
        for h in range(H):
            key = (h, f if h % 2 == 0 else -1 - p)
            if key not in codes:
                codes[key] = [rnd.gauss(0, amp) for _ in range(D)]
            for t in qkv[:2]:
                t[s][h] = [a + b for a, b in zip(t[s][h], codes[key])]
    return qkv


def rounded(t, dt):
    """Values as stored in dtype dt (F16 rounds)."""
    if dt == 'F32':
        return [[[struct.unpack('<f', struct.pack('<f', x))[0] for x in r] for r in h]
                for h in t]
    return [[[struct.unpack('<e', struct.pack('<e', x))[0] for x in r] for r in h]
            for h in t]


def to_layout(t, layout):
    """[S][H][D] -> flat list and shape in the layout (B = 1)."""
    S, H, D = len(t), len(t[0]), len(t[0][0])
    if layout == 'bhsd':
        flat = [t[s][h][d] for h in range(H) for s in range(S) for d in range(D)]
        return flat, [1, H, S, D]
    flat = [t[s][h][d] for s in range(S) for h in range(H) for d in range(D)]
    return flat, ([1, S, H, D] if layout == 'bshd' else [S, H, D])


def from_layout(flat, shape, layout):
    if layout == 'bhsd':
        _, H, S, D = shape
        return [[flat[(h * S + s) * D:(h * S + s + 1) * D] for h in range(H)]
                for s in range(S)]
    S, H, D = shape[-3:]
    return [[flat[(s * H + h) * D:(s * H + h + 1) * D] for h in range(H)]
            for s in range(S)]


def attention(q, k, v):
    S, H, D = len(q), len(q[0]), len(q[0][0])
    out = [[[0.0] * D for _ in range(H)] for _ in range(S)]
    sc = 1.0 / math.sqrt(D)
    for h in range(H):
        for i in range(S):
            qi = q[i][h]
            z = [sc * sum(a * b for a, b in zip(qi, k[j][h])) for j in range(S)]
            m = max(z)
            e = [math.exp(x - m) for x in z]
            tot = sum(e)
            o = out[i][h]
            for j in range(S):
                w = e[j] / tot
                vj = v[j][h]
                for d in range(D):
                    o[d] += w * vj[d]
    return out


def read_st(path):
    data = open(path, 'rb').read()
    n = struct.unpack('<Q', data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        if name == '__metadata__':
            continue
        a, b = t['data_offsets']
        fmt, size = FMT[t['dtype']]
        out[name] = (list(struct.unpack('<%d%s' % ((b - a) // size, fmt),
                                        data[base + a:base + b])), t['shape'], t['dtype'])
    return out


def cmd_gen(args):
    """gen PREFIX LAYOUT F Hp Wp C POS H D DTYPE SEED: PREFIX.safetensors,
    PREFIX.{q,k,v}.npy (F32 only) and PREFIX.ref.json (reference output)."""
    prefix, layout = args[0], args[1]
    F, Hp, Wp, C = map(int, args[2:6])
    pos = args[6]
    H, D = int(args[7]), int(args[8])
    dt, seed = args[9], int(args[10])
    q, k, v = (rounded(t, dt) for t in make_qkv(F, Hp, Wp, C, pos, H, D, seed))
    tensors = {n: to_layout(t, layout) for n, t in zip('qkv', (q, k, v))}
    write_st(prefix + '.safetensors', tensors, dt)
    if dt == 'F32':
        for n in 'qkv':
            write_npy('%s.%s.npy' % (prefix, n), *tensors[n])
    json.dump(attention(q, k, v), open(prefix + '.ref.json', 'w'))


def cmd_check_out(args):
    """check-out OUT REF LAYOUT DTYPE TOL: out matches the reference."""
    path, ref, layout, dt, tol = args[0], args[1], args[2], args[3], float(args[4])
    ref = json.load(open(ref))
    flat, shape, got_dt = read_st(path)['out']
    assert got_dt == dt, 'out dtype %s, expected %s' % (got_dt, dt)
    want_shape = to_layout(ref, layout)[1]
    assert shape == want_shape, 'out shape %s, expected %s' % (shape, want_shape)
    out = from_layout(flat, shape, layout)
    err = max(abs(a - b) for s, rs in zip(out, ref) for h, rh in zip(s, rs)
              for a, b in zip(h, rh))
    assert err <= tol, 'max abs error %g > %g' % (err, tol)


def cmd_check_report(args):
    """check-report REPORT MODE HEADS: keys and values of a run report; the
    generated heads alternate spatial, temporal (see make_qkv)."""
    r = json.load(open(args[0]))
    mode, heads = args[1], int(args[2])
    for key in ('mode', 'geometry', 'layer', 'step', 'density_target', 'density',
                'per_head', 'timing', 'svg', 'input'):
        assert key in r, 'report lacks "%s"' % key
    assert r['mode'] == mode, r['mode']
    assert r['dense_call'] is False, 'expected a sparse SVG call'
    assert len(r['per_head']) == heads, len(r['per_head'])
    for h in r['per_head']:
        for key in ('head', 'kind', 'mse_spatial', 'mse_temporal', 'density', 'time_ms',
                    'rel_l2', 'cosine'):
            assert key in h, 'per_head entry lacks "%s"' % key
        want = 'spatial' if h['head'] % 2 == 0 else 'temporal'
        assert h['kind'] == want, 'head %d chose %s' % (h['head'], h['kind'])
        assert h['mse_spatial'] >= 0 and h['mse_temporal'] >= 0
        rel = h['rel_l2']
        assert isinstance(rel, float) and math.isfinite(rel) and 0 <= rel < 1, rel
        assert 0 < h['density'] <= 1, h['density']
        assert -1 <= h['cosine'] <= 1.000001, h['cosine']
    assert 'compute_ms' in r['timing']


def cmd_png(args):
    """png FILE MINW MINH: a PNG signature and an IHDR at least that big."""
    data = open(args[0], 'rb').read()
    assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG signature'
    assert data[12:16] == b'IHDR', 'first chunk is not IHDR'
    w, h = struct.unpack('>II', data[16:24])
    assert w >= int(args[1]) and h >= int(args[2]), 'PNG is only %dx%d' % (w, h)
    assert data[-8:-4] == b'IEND', 'no IEND chunk at the end'


def cmd_truncate(args):
    data = open(args[0], 'rb').read()
    open(args[1], 'wb').write(data[:len(data) - int(args[2])])


def cmd_bench(args):
    with open(args[0], 'w') as f:
        f.write('plain text line\n')
        for mode in ('exact', 'naive'):
            for d in (0.1, 0.2, 0.4, 0.8):
                sp = 0.8 / d if mode == 'exact' else 0.6 / d
                f.write(json.dumps({'bench': 'sparse', 'mode': mode, 'density': d,
                                    'speedup': sp}) + '\n')


def cmd_poison(args):
    """poison IN OUT LAYOUT S H D: IN with q at token S, head H, element D set
    to NaN, written to OUT."""
    t = read_st(args[0])
    layout = args[2]
    s, h, d = map(int, args[3:6])
    flat, shape, dt = t['q']
    if layout == 'bhsd':
        _, H, S, D = shape
        flat[(h * S + s) * D + d] = float('nan')
    else:
        S, H, D = shape[-3:]
        flat[(s * H + h) * D + d] = float('nan')
    write_st(args[1], {n: (t[n][0], t[n][1]) for n in 'qkv'}, dt)


def cmd_gen_bf16(args):
    """gen-bf16 FILE S H D SEED: q, k, v of [1, S, H, D] random bf16 values."""
    path, (S, H, D, seed) = args[0], map(int, args[1:5])
    rnd = random.Random(seed)
    hdr, blobs, off = {}, [], 0
    for name in 'qkv':
        bits = [struct.unpack('<I', struct.pack('<f', rnd.gauss(0, 1)))[0] >> 16
                for _ in range(S * H * D)]
        b = struct.pack('<%dH' % len(bits), *bits)
        hdr[name] = {'dtype': 'BF16', 'shape': [1, S, H, D],
                     'data_offsets': [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


def cmd_check_json(args):
    """check-json FILE EXPR...: every Python expression holds for r = the JSON."""
    r = json.load(open(args[0]))
    for e in args[1:]:
        assert eval(e, {'math': math}, {'r': r}), '%s (in %s)' % (e, args[0])


if __name__ == '__main__':
    cmds = {'gen': cmd_gen, 'check-out': cmd_check_out, 'check-report': cmd_check_report,
            'png': cmd_png, 'truncate': cmd_truncate, 'bench': cmd_bench,
            'poison': cmd_poison, 'check-json': cmd_check_json, 'gen-bf16': cmd_gen_bf16}
    try:
        cmds[sys.argv[1]](sys.argv[2:])
    except AssertionError as e:
        print('check failed: %s' % e, file=sys.stderr)
        sys.exit(1)
PY

# ------------------------------------------------------------- run it

# expect_fail NAME PATTERN OUT CMD...: non-zero exit, PATTERN on stderr and
# no file OUT.
expect_fail() {
  local name=$1 pattern=$2 out=$3
  shift 3
  rm -f "$out"
  if "$@" >"$name.stdout" 2>"$name.stderr"; then
    bad "$name: succeeded but should fail"
  elif ! grep -q -- "$pattern" "$name.stderr"; then
    bad "$name: stderr lacks '$pattern': $(head -c 400 "$name.stderr")"
  elif [ -e "$out" ] || ls "$out".tmp.* >/dev/null 2>&1; then
    bad "$name: $out was created"
  else
    ok
  fi
}

F=3 HP=4 WP=5 H=2 D=16
for layout in bshd bhsd shd; do
  for text in 0 8; do
    pos=$([ "$text" = 0 ] && echo none || echo prefix)
    tag=$layout.t$text
    seed=$((text + ${#layout}))
    python3 helper.py gen "$tag" "$layout" $F $HP $WP "$text" "$pos" $H $D F32 "$seed"
    geo=(--layout "$layout" --frames $F --height $HP --width $WP --text "$text")
    [ "$text" = 0 ] || geo+=(--text-pos prefix)
    expect_ok "dense.$tag" "$STSA" run --in "$tag.safetensors" "${geo[@]}" --mode dense \
      --out "$tag.dense.safetensors" --quiet
    expect_ok "dense-check.$tag" python3 helper.py check-out "$tag.dense.safetensors" \
      "$tag.ref.json" "$layout" F32 1e-4
    # density 0.6: with 3 frames the first-frame sink alone keeps a third of
    # the video, and a temporal band needs room beyond it
    expect_ok "svg.$tag" "$STSA" run --in "$tag.safetensors" "${geo[@]}" --mode svg \
      --density 0.6 --compare-dense --out "$tag.svg.safetensors" --report "$tag.report.json" --quiet
    expect_ok "svg-report.$tag" python3 helper.py check-report "$tag.report.json" svg $H
  done
done

# .npy inputs, renamed safetensors tensors, sparse mode, f16 and a suffix
expect_ok npy "$STSA" run --in-q bshd.t0.q.npy --in-k bshd.t0.k.npy --in-v bshd.t0.v.npy \
  --layout bshd --frames $F --height $HP --width $WP --mode dense --out npy.safetensors --quiet
expect_ok npy-check python3 helper.py check-out npy.safetensors bshd.t0.ref.json bshd F32 1e-4
for kind in spatial temporal; do
  expect_ok "sparse.$kind" "$STSA" run --in bshd.t8.safetensors --layout bshd --frames $F \
    --height $HP --width $WP --text 8 --text-pos prefix --mode sparse --head-kind "$kind" \
    --compare-dense --report "sparse.$kind.json" --out "sparse.$kind.safetensors" --quiet
done
python3 helper.py gen f16 bhsd $F $HP $WP 6 suffix $H $D F16 7
expect_ok f16 "$STSA" run --in f16.safetensors --layout bhsd --frames $F --height $HP \
  --width $WP --text 6 --text-pos suffix --mode dense --out f16.out.safetensors --quiet
expect_ok f16-check python3 helper.py check-out f16.out.safetensors f16.ref.json bhsd F16 4e-3

# errors: a clear message, non-zero exit, nothing written
base=(--layout bshd --frames $F --height $HP --width $WP --mode dense)
expect_fail missing-name "no tensor named 'query'" err.safetensors \
  "$STSA" run --in bshd.t0.safetensors --q query "${base[@]}" --out err.safetensors
expect_fail wrong-frames "tokens" err.safetensors \
  "$STSA" run --in bshd.t0.safetensors --layout bshd --frames 4 --height $HP --width $WP \
  --out err.safetensors
python3 helper.py truncate bshd.t0.safetensors trunc.safetensors 10
expect_fail truncated "trunc.safetensors" err.safetensors \
  "$STSA" run --in trunc.safetensors "${base[@]}" --out err.safetensors
expect_fail bad-layout "layout expects bshd, bhsd or shd" err.safetensors \
  "$STSA" run --in bshd.t0.safetensors --layout bsdh --frames $F --height $HP --width $WP \
  --out err.safetensors
expect_fail wrong-rank "rank-3" err.safetensors \
  "$STSA" run --in bshd.t0.safetensors --layout shd --frames $F --height $HP --width $WP \
  --out err.safetensors
expect_fail report-unwritable "no-such-dir" err.safetensors \
  "$STSA" run --in bshd.t0.safetensors "${base[@]}" --out err.safetensors \
  --report no-such-dir/r.json
expect_fail layer-in-dense "apply to --mode svg, svg2 and auto only" err.safetensors \
  "$STSA" run --in bshd.t0.safetensors "${base[@]}" --layer 3 --out err.safetensors
# a head dim past the kernels' limit is named with the limit
python3 helper.py gen d513 bshd 1 2 2 0 none 1 513 F32 3
for mode in dense svg; do
  expect_fail "d513.$mode" "513.*512" err.safetensors "$STSA" run --in d513.safetensors \
    --layout bshd --frames 1 --height 2 --width 2 --mode "$mode" --out err.safetensors
done
# an existing --out stays as it was when the run fails late (report unwritable)
echo previous >kept.safetensors
if "$STSA" run --in bshd.t0.safetensors "${base[@]}" --out kept.safetensors \
  --report no-such-dir/r.json 2>/dev/null; then
  bad "kept: succeeded"
elif [ "$(cat kept.safetensors)" = previous ] && ! ls kept.safetensors.* >/dev/null 2>&1; then
  ok
else
  bad "kept: the existing --out was changed or a staging file was left"
fi

# expect_grep NAME FILE PATTERN: FILE holds PATTERN
expect_grep() {
  if grep -q -- "$3" "$2"; then ok; else bad "$1: $2 lacks '$3': $(head -c 600 "$2")"; fi
}

# a NaN is named at the caller's (b, s, h), not the one-head view's h=0
python3 helper.py poison bshd.t0.safetensors nan.bshd.safetensors bshd 5 1 3
python3 helper.py poison bhsd.t0.safetensors nan.bhsd.safetensors bhsd 7 1 2
for mode in dense sparse svg; do
  expect_fail "nan.bshd.$mode" "b=0, s=5, h=1, d=3" err.safetensors "$STSA" run \
    --in nan.bshd.safetensors "${base[@]}" --mode "$mode" --density 0.6 --out err.safetensors
  expect_fail "nan.bhsd.$mode" "b=0, s=7, h=1, d=2" err.safetensors "$STSA" run \
    --in nan.bhsd.safetensors --layout bhsd --frames $F --height $HP --width $WP \
    --mode "$mode" --density 0.6 --out err.safetensors
done

# --compare-dense warns about heads above --warn-rel-l2 (stderr and report),
# labels the speed-up and keeps the warm-up call out of the timing
expect_ok warn "$STSA" run --in bshd.t0.safetensors "${base[@]}" --mode svg --density 0.6 \
  --compare-dense --warn-rel-l2 0 --report warn.json --quiet
expect_grep warn-stderr warn.stderr "warning: batch 0 head 1 (temporal): relative L2"
expect_ok warn-report python3 helper.py check-json warn.json "r['warn_rel_l2'] == 0" \
  "len(r['warnings']) == 2" "all(h['warning'] for h in r['per_head'])"
expect_ok nowarn "$STSA" run --in bshd.t0.safetensors "${base[@]}" --mode sparse \
  --density 0.6 --compare-dense --warn-rel-l2 1e9 --report nowarn.json
expect_ok nowarn-report python3 helper.py check-json nowarn.json "r['warnings'] == []" \
  "not any(h['warning'] for h in r['per_head'])" "r['warn_rel_l2'] == 1e9"
if grep -q warning nowarn.stderr; then bad "nowarn: a warning on stderr"; else ok; fi
expect_grep nowarn-label nowarn.stdout "sparse [0-9.]*x \(faster\|slower\) than dense"
# the threshold as given, not rounded to the 0.1 it is not
expect_ok warn-digits "$STSA" run --in bshd.t0.safetensors "${base[@]}" --mode sparse \
  --density 0.6 --compare-dense --warn-rel-l2 0.10000001 --report warn-digits.json
expect_grep warn-digits-stdout warn-digits.stdout "above --warn-rel-l2 0.10000001$"
expect_ok default-warn "$STSA" run --in bshd.t0.safetensors "${base[@]}" --compare-dense \
  --report default-warn.json --quiet
# dense mode, B = 1: compute_ms is exactly the timed heads (the warm-up apart)
expect_ok default-warn-report python3 helper.py check-json default-warn.json \
  "r['warn_rel_l2'] == 0.1" "r['timing']['warmup_ms'] > 0" \
  "abs(r['timing']['compute_ms'] - sum(h['time_ms'] for h in r['per_head'])) <= 1e-9 * r['timing']['compute_ms']"
expect_fail warn-needs-compare "needs --compare-dense" err.safetensors "$STSA" run \
  --in bshd.t0.safetensors "${base[@]}" --warn-rel-l2 0.2 --out err.safetensors

# a dense call reports kind dense (report and summary), by --mode dense and by
# the policy's dense steps; heads come from the tensors, not the preset
expect_ok kind-dense "$STSA" run --in bshd.t0.safetensors "${base[@]}" --report kd.json
expect_grep kind-dense-stdout kind-dense.stdout "0 spatial, 0 temporal, 2 dense"
expect_ok kind-dense-report python3 helper.py check-json kd.json "r['dense_call'] is True" \
  "[h['kind'] for h in r['per_head']] == ['dense', 'dense']"
expect_ok kind-policy "$STSA" run --in bshd.t0.safetensors --layout bshd --preset wan21-480p \
  --frames $F --height $HP --width $WP --layer 0 --step 0 --report kp.json
expect_grep kind-policy-stdout kind-policy.stdout "0 spatial, 0 temporal, 2 dense"
expect_grep kind-policy-call kind-policy.stdout "dense (by policy)"
expect_ok kind-policy-report python3 helper.py check-json kp.json "r['dense_call'] is True" \
  "[h['kind'] for h in r['per_head']] == ['dense', 'dense']" "r['geometry']['heads'] == 2" \
  "r['preset'] == 'wan21-480p'"
expect_ok kind-sparse "$STSA" run --in bshd.t0.safetensors "${base[@]}" --mode sparse \
  --head-kind temporal --density 0.6 --report ks.json
expect_grep kind-sparse-stdout kind-sparse.stdout "0 spatial, 2 temporal, 0 dense"
"$STSA" run --help >run-help.txt
expect_grep run-help-heads run-help.txt "a preset's head count is"

# ------------------------------------------------------------- what ran
# the report's "ran" (and "dense_ran" of --compare-dense) and the summary's
# "ran:" lines name the backend and the arithmetic of the calls; f32 inputs
# run f32 on every tiled backend (amx and avx512bf16 say why not their bf16 tiles)
KEYS="{'backend', 'arithmetic', 'bf16_terms', 'pv_precision', 'why'}"
expect_ok ran-auto "$STSA" run --in bshd.t0.safetensors "${base[@]}" --mode svg \
  --density 0.6 --compare-dense --report ran-auto.json
expect_ok ran-auto-report python3 helper.py check-json ran-auto.json \
  "set(r['ran']) == $KEYS and set(r['dense_ran']) == $KEYS" \
  "r['ran']['backend'] == r['dense_ran']['backend'] == r['backend']" \
  "r['ran']['arithmetic'] == 'f32' and r['ran']['bf16_terms'] == 0" \
  "(r['ran']['why'] == '') == (r['backend'] not in ('amx', 'avx512bf16'))" \
  "'ran_note' not in r and all('ran' not in h for h in r['per_head'])"
expect_grep ran-auto-text ran-auto.stdout "^  ran: [a-z0-9]*, f32"
expect_grep ran-auto-dense-text ran-auto.stdout "^  dense reference ran: [a-z0-9]*, f32"
for want in portable:f32 ref:f64; do
  backend=${want%:*} arith=${want#*:}
  for mode in dense sparse svg; do
    name=ran-$backend-$mode
    expect_ok "$name" env STSA_BACKEND="$backend" "$STSA" run --in bshd.t0.safetensors \
      "${base[@]}" --mode "$mode" --density 0.6 --compare-dense --report "$name.json"
    expect_ok "$name-report" python3 helper.py check-json "$name.json" \
      "r['ran'] == r['dense_ran'] == {'backend': '$backend', 'arithmetic': '$arith', 'bf16_terms': 0, 'pv_precision': 'f32', 'why': ''}"
    expect_grep "$name-text" "$name.stdout" "^  ran: $backend, $arith$"
    expect_grep "$name-dense-text" "$name.stdout" "^  dense reference ran: $backend, $arith$"
  done
done
# bf16 inputs in frames of 12 x 20 tokens: the session's frame-aligned tiles
# are 240 keys (Wan 720p's case). The bf16 tiles (amx, avx512bf16) take them
# (padded to 256-key blocks) with 2 bf16 terms (bf16 out), the dense
# reference (f32 out, 256-key tiles) with 3. Elsewhere f32, no why.
python3 helper.py gen-bf16 bf16.safetensors 480 2 64 11
bf16_geo=(--in bf16.safetensors --layout bshd --frames 2 --height 12 --width 20
  --density 0.5 --compare-dense)
tiled=0
for tb in amx avx512bf16; do
  "$STSA" --help | grep -q "this machine runs:.* $tb\b" || continue
  tiled=1
  expect_ok ran-"$tb" env STSA_BACKEND="$tb" "$STSA" run "${bf16_geo[@]}" \
    --report ran-"$tb".json
  expect_ok ran-"$tb"-report python3 helper.py check-json ran-"$tb".json \
    "r['svg']['kv_tile'] == 240 and r['ran']['backend'] == '$tb'" \
    "r['ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 2, 'pv_precision': 'near-f32', 'why': ''}" \
    "r['dense_ran'] == {'backend': '$tb', 'arithmetic': 'bf16-tiles', 'bf16_terms': 3, 'pv_precision': 'f32', 'why': ''}"
  expect_grep ran-"$tb"-text ran-"$tb".stdout \
    "^  ran: $tb, bf16-tiles (P.V near-f32: 2 bf16 terms a probability)$"
  expect_grep ran-"$tb"-dense-text ran-"$tb".stdout \
    "^  dense reference ran: $tb, bf16-tiles (P.V f32: 3 bf16 terms a probability)$"
done
if [ "$tiled" = 0 ]; then
  expect_ok ran-bf16 "$STSA" run "${bf16_geo[@]}" --report ran-bf16.json
  expect_ok ran-bf16-report python3 helper.py check-json ran-bf16.json \
    "r['ran'] == r['dense_ran'] == {'backend': r['backend'], 'arithmetic': 'f64' if r['backend'] == 'ref' else 'f32', 'bf16_terms': 0, 'pv_precision': 'f32', 'why': ''}"
fi

# ------------------------------------------------------------- pictures
expect_ok plot-plan "$STSA" plot plan --frames 5 --height 6 --width 8 --text 16 \
  --text-pos prefix --density 0.3 --kind temporal --tile 32 --out plan.png
expect_ok plot-plan-png python3 helper.py png plan.png 600 400
expect_ok plot-kinds "$STSA" plot kinds --report bshd.t0.report.json \
  --report bhsd.t8.report.json --out kinds.png
expect_ok plot-kinds-png python3 helper.py png kinds.png 300 200
expect_ok plot-attention "$STSA" plot attention --in bhsd.t8.safetensors --layout bhsd \
  --frames $F --height $HP --width $WP --text 8 --text-pos prefix --head 1 --query 1,2,3 \
  --out attn.png
expect_ok plot-attention-png python3 helper.py png attn.png 300 200
python3 helper.py bench bench.jsonl
expect_ok plot-speedup "$STSA" plot speedup --bench bench.jsonl --out speedup.png
expect_ok plot-speedup-png python3 helper.py png speedup.png 300 200
echo '{"mode": "svg"}' >not-a-report.json
expect_fail plot-kinds-bad "per_head" err.png "$STSA" plot kinds --report not-a-report.json \
  --out err.png

finish
