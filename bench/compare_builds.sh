#!/usr/bin/env bash
# Two builds of stsa side by side, interleaved (A B A B ...), on the dense,
# sparse and SVG benchmarks: what a change did to speed. The machine is
# shared and noisy, so each case runs `rounds` times per build, alternating,
# and the table gives the medians, their ratio B/A in time, and the spread of
# A against itself (the noise floor: a ratio inside it is no change).
#
#   bench/compare_builds.sh A/stsa B/stsa [rounds (default 5)] [threads (default 2)]
#
# Prints one JSON line per case and a markdown table at the end.
set -euo pipefail
a=$1 b=$2
rounds=${3:-5}
t=${4:-2}
cases=(
  "dense --seq 8192 --heads 4 --dim 128 --reps 3"
  "dense --seq 8192 --heads 4 --dim 64 --kv-dtype f16 --reps 3"
  "sparse --seq 32768 --heads 2 --dim 128 --density 0.12 --no-dense --reps 2"
  "sparse --seq 16384 --heads 2 --dim 128 --density 0.39 --mode naive --no-dense --reps 2"
  "svg --preset wan21-480p --heads 2 --reps 1"
)
ms_of() { # the bench's time field: ms (dense, sparse) or svg_ms (svg)
  python3 -c 'import json,sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
print(d.get("svg_ms", d.get("ms")))'
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in "${!cases[@]}"; do
  c=${cases[$i]}
  for r in $(seq "$rounds"); do
    for side in a b; do
      bin=$a
      [ $side = b ] && bin=$b
      # shellcheck disable=SC2086
      "$bin" bench $c --threads "$t" --json 2>/dev/null | ms_of >>"$tmp/$i.$side"
    done
  done
  python3 - "$tmp/$i.a" "$tmp/$i.b" "$c" <<'PY'
import json, statistics, sys
a = [float(x) for x in open(sys.argv[1])]
b = [float(x) for x in open(sys.argv[2])]
ma, mb = statistics.median(a), statistics.median(b)
noise = (max(a) - min(a)) / ma
print(json.dumps({"case": sys.argv[3], "a_ms": round(ma, 2), "b_ms": round(mb, 2),
                  "b_over_a": round(mb / ma, 3), "a_spread": round(noise, 3),
                  "a_runs": a, "b_runs": b}))
PY
done | tee "$tmp/all.jsonl"
echo
echo "| case | A ms (median) | B ms (median) | B/A | spread of A |"
echo "|---|---|---|---|---|"
python3 - "$tmp/all.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(f"| {d['case']} | {d['a_ms']} | {d['b_ms']} | {d['b_over_a']} | {d['a_spread']:.1%} |")
PY
