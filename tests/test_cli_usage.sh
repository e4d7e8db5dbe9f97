#!/usr/bin/env bash
# test_cli_usage.sh STSA_BINARY — what a new user sees.
#
# Every command answers -h/--help (exit 0, a usage text on stdout) and
# -V/--version; every option takes --opt=value as well as --opt value (same
# output, byte for byte); a flag without a value says so when given one;
# `stsa run --help` names every option the code accepts (read from the
# sources next to this script) and accepts every option it names; `stsa plot
# pareto --help` is its own, with a line per option of its source; `stsa demo
# --quick` explains its table, gives the worst error of the whole trace and
# says that the problem is too small to speed up.
# Prints "test_cli_usage: N passed, M failed".
set -euo pipefail

. "$(dirname "$0")/cli_common.sh" test_cli_usage "$@"

# ------------------------------------------------ item 21: help and version
VERSION=$("$STSA" version)
case "$VERSION" in stsa\ [0-9]*.[0-9]*) ok ;; *) bad "version prints '$VERSION'" ;; esac
commands=("" "peak" "bench" "bench dense" "bench sparse" "bench svg" "bench svg2" "demo" "run" "plot"
  "plot plan" "plot attention" "plot kinds" "plot speedup" "plot pareto")
for c in "${commands[@]}"; do
  for flag in -h --help; do
    # shellcheck disable=SC2086 # $c is words on purpose
    rc=0
    timeout 60 "$STSA" $c $flag >help.out 2>help.err || rc=$?
    if [ "$rc" != 0 ]; then
      bad "stsa $c $flag: exit $rc ($(head -c 200 help.err))"
    elif ! grep -qi usage help.out; then
      bad "stsa $c $flag: no usage text on stdout"
    else
      ok
    fi
  done
  for flag in -V --version; do
    rc=0
    # shellcheck disable=SC2086
    out=$(timeout 60 "$STSA" $c $flag 2>&1) || rc=$?
    if [ "$rc" = 0 ] && [ "$out" = "$VERSION" ]; then ok; else
      bad "stsa $c $flag: exit $rc, printed '$out' (expected '$VERSION')"
    fi
  done
done

# --------------------------------------------- item 21: --opt=value forms
cat >gen.py <<'PY'
import json, random, struct, sys
path, S, H, D = sys.argv[1], *map(int, sys.argv[2:5])
rnd = random.Random(3)
hdr, blobs, off = {}, [], 0
for name in 'qkv':
    b = struct.pack('<%df' % (S * H * D), *[rnd.gauss(0, 1) for _ in range(S * H * D)])
    hdr[name] = {'dtype': 'F32', 'shape': [1, S, H, D], 'data_offsets': [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
h += b' ' * (-len(h) % 8)
open(path, 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
PY
python3 gen.py in.safetensors 60 2 16
if "$STSA" run --in in.safetensors --layout bshd --frames 3 --height 4 --width 5 --mode sparse \
  --density 0.6 --head-kind temporal --out a.safetensors --quiet 2>a.err &&
  "$STSA" run --in=in.safetensors --layout=bshd --frames=3 --height=4 --width=5 --mode=sparse \
    --density=0.6 --head-kind=temporal --out=b.safetensors --quiet 2>b.err &&
  cmp -s a.safetensors b.safetensors; then ok; else
  bad "run --opt=value: $(cat a.err b.err)"
fi
if "$STSA" plot plan --frames=5 --height=6 --width=8 --kind=temporal --tile=32 --out=p.png \
  2>p.err && [ -s p.png ]; then ok; else bad "plot plan --opt=value: $(cat p.err)"; fi
if "$STSA" bench dense --seq=64 --heads=1 --dim=16 --reps=1 --threads=1 --json >bench.out \
  2>bench.err && grep -q '"seq": 64' bench.out; then ok; else
  bad "bench dense --opt=value: $(cat bench.err) $(head -c 300 bench.out)"
fi
# an empty value is a value, and a flag without one says so
rc=0
"$STSA" run --in in.safetensors --layout bshd --frames 3 --height 4 --width 5 --quiet=yes \
  --out c.safetensors 2>quiet.err || rc=$?
if [ "$rc" = 2 ] && grep -q -- "--quiet takes no value" quiet.err && [ ! -e c.safetensors ]; then
  ok
else
  bad "--quiet=yes: exit $rc, $(cat quiet.err)"
fi
rc=0
"$STSA" run --in= --layout bshd --frames 3 --height 4 --width 5 --out c.safetensors \
  2>empty.err || rc=$?
if [ "$rc" = 2 ] && grep -q -- "--in" empty.err; then ok; else bad "--in=: exit $rc"; fi

# ------------------------ item 21: run --help lists every option it takes
"$STSA" run --help >run-help.txt
# options the code compares against: exact string literals "--name"
opts=$(grep -ho '"--[a-z0-9-]*"' "$SRC/tools/cmd_run.c" "$SRC/tools/run_input.c" |
  tr -d '"' | sort -u)
[ "$(echo "$opts" | wc -l)" -ge 25 ] && ok || bad "found only $(echo "$opts" | wc -l) options in the sources"
for o in $opts; do
  if grep -q -- "$o\\b" run-help.txt; then ok; else bad "run --help does not list $o"; fi
done
# and every option the help names is one the tool accepts
for o in $(grep -o -- '--[a-z][a-z0-9-]*' run-help.txt | sort -u); do
  rc=0
  "$STSA" run "$o" 2>opt.err >/dev/null || rc=$?
  if grep -q "unknown option" opt.err; then bad "run --help names $o, which run rejects"; else ok; fi
done

# plot pareto --help is its own: a line for every option of plot_pareto.c,
# not the text of every picture
"$STSA" plot pareto --help >pareto-help.txt
popts=$(grep -ho '"--[a-z0-9-]*"' "$SRC/tools/plot_pareto.c" | tr -d '"' | sort -u)
[ "$(echo "$popts" | wc -l)" -ge 9 ] && ok || bad "found only $(echo "$popts" | wc -l) plot pareto options"
for o in $popts --threads; do
  if grep -qE -- "^  (.*, )?$o\\b" pareto-help.txt; then ok; else bad "plot pareto --help has no line for $o"; fi
done
if grep -q "usage: stsa plot pareto" pareto-help.txt && ! grep -q "plot plan" pareto-help.txt; then
  ok
else
  bad "plot pareto --help is not its own: $(head -c 300 pareto-help.txt)"
fi

# --------------------------------------------------- item 19: the demo
if "$STSA" demo --quick --threads 2 >demo.out 2>demo.err; then
  for want in "truth .*planted" "chosen .*picked by profiling" "mse_spatial" "mse_temporal" \
    "rel_L2 .*dense" "cosine .*cosine similarity" "whole trace, every sparse call: worst relative L2" \
    "lowest cosine" "too small to speed up" "SVG [0-9.]*x \(faster\|slower\) than dense"; do
    if grep -q -- "$want" demo.out; then ok; else bad "demo --quick output lacks '$want'"; fi
  done
else
  bad "demo --quick failed: $(head -c 400 demo.err)"
fi

# ------------ a refused value is shown as typed, a size with its limit
# expect_refused NAME PATTERN CMD...: exit status 2 and PATTERN (fixed) on stderr
expect_refused() {
  local name=$1 pattern=$2 rc=0
  shift 2
  "$@" >/dev/null 2>"$name.err" || rc=$?
  if [ "$rc" = 2 ] && grep -qF -- "$pattern" "$name.err"; then ok; else
    bad "$name: exit $rc, stderr lacks '$pattern': $(head -c 300 "$name.err")"
  fi
}
wl=(run --workload --frames 2 --height 4 --width 4 --heads 1 --report w.json --quiet)
expect_refused top-p "--top-p = 1.0000001 is out of range [1e-06, 1]" \
  "$STSA" "${wl[@]}" --mode svg2 --top-p 1.0000001
expect_refused density "--density = 1.0000000000000002 is out of range" \
  "$STSA" "${wl[@]}" --density 1.0000000000000002
expect_refused density-typed "--density = 1e-7 is out of range [1e-06, 1]" \
  "$STSA" "${wl[@]}" --density=1e-7
expect_refused max-error "--max-error = -0.0000001 is out of range [0, 1e+300]" \
  "$STSA" "${wl[@]}" --max-error -0.0000001
expect_refused densities "--densities = 1.00000001 is out of range [1e-06, 1]" \
  "$STSA" plot pareto --densities 0.5,1.00000001
expect_refused drift "--drift = 1.0000000001 is out of range [0, 1]" \
  "$STSA" bench svg2 --preset wan21-480p --drift 1.0000000001
expect_refused head-dim "--head-dim = 513 is out of range [1, 512]" \
  "$STSA" "${wl[@]}" --head-dim 513
expect_refused too-many-tokens "more than 2^40 tokens" \
  "$STSA" run --workload --frames 100000000 --height 100000 --width 100000 --report w.json

# ------------- item 12: an unknown STSA_BACKEND fails with the library's message
rc=0
STSA_BACKEND=gpu "$STSA" demo --quick >/dev/null 2>backend.err || rc=$?
if [ "$rc" = 2 ] && grep -q "STSA_BACKEND=gpu is not one of auto, ref, portable, avx2" backend.err; then
  ok
else
  bad "STSA_BACKEND=gpu: exit $rc, message: $(head -c 300 backend.err)"
fi

# ---------- the backends' texts list exactly the library's table of backends
# The library's own list (its message for an unknown STSA_BACKEND) is the
# table; `stsa --help`, `stsa bench --help` and --backend's message must list
# the same names in the same order, and every name must reach the library:
# a backend this machine runs runs, any other is refused as not running here.
table=$(sed -n 's/.*is not one of \(.*\) (this machine runs.*/\1/p' backend.err | tr -d ,)
"$STSA" --help >main.help
listed=$(sed -n '/^environment: STSA_BACKEND=/,/(this machine runs/p' main.help |
  sed -n 's/^  *\([a-z0-9_]*\)  .*/\1/p' | xargs)
"$STSA" bench --help >bench.help
bench_listed=$(sed -n '/^backends (--backend/,$p' bench.help | sed -n 's/^  \([a-z0-9_]*\)  .*/\1/p' |
  xargs)
rc=0
"$STSA" bench dense --backend gpu 2>bench_backend.err || rc=$?
bench_msg=$(sed -n "s/.*--backend expects one of \(.*\), got 'gpu'.*/\1/p" bench_backend.err | tr -d ,)
if [ -n "$table" ] && [ "$listed" = "$table" ] && [ "$bench_listed" = "$table" ] &&
  [ "$bench_msg" = "$table" ] && [ "$rc" = 2 ]; then ok; else
  bad "backends: library '$table', stsa --help '$listed', bench --help '$bench_listed'," \
    "--backend gpu (exit $rc) '$bench_msg'"
fi
here=$(sed -n 's/.*(this machine runs: \([^;)]*\).*/\1/p' main.help)
for b in $table; do
  rc=0
  STSA_BACKEND=$b "$STSA" bench dense --seq 32 --heads 1 --dim 16 --reps 1 --threads 1 \
    --json >backend.out 2>backend.err || rc=$?
  case " $here " in
    *" $b "*) if [ "$rc" = 0 ]; then ok; else bad "STSA_BACKEND=$b: exit $rc $(head -c 300 backend.err)"; fi ;;
    *) if [ "$rc" = 2 ] && grep -q "STSA_BACKEND=$b but this machine does not run it" backend.err; then
      ok
    else bad "STSA_BACKEND=$b (not here): exit $rc $(head -c 300 backend.err)"; fi ;;
  esac
done

finish
