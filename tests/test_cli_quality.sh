#!/usr/bin/env bash
# test_cli_quality.sh STSA_BINARY — `stsa bench quality` on one small family
# of the zoo: a line per head, method and budget in its CSV, every error
# finite and the budgets' estimates present; a family it lacks is refused.
# Prints "test_cli_quality: N passed, M failed".
set -euo pipefail

. "$(dirname "$0")/cli_common.sh" test_cli_quality "$@"

expect_ok mix "$STSA" bench quality --family mix-region --size small --threads 1 \
  --csv heads.csv
# 4 heads x 3 methods x 4 budgets (none, 0.02, 0.05, 0.1), and the header
if [ "$(wc -l <heads.csv)" = 49 ]; then ok; else bad "mix: $(wc -l <heads.csv) CSV lines"; fi
if python3 - heads.csv <<'PY'; then ok; else bad "mix: CSV figures"; fi
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert {r['method'] for r in rows} == {'svg', 'svg2', 'auto'}
for r in rows:
    t, e, d, b = (float(r[k]) for k in ('true_err', 'est_err', 'density', 'budget'))
    assert math.isfinite(t) and t >= 0, r
    assert 0 < d <= 1, r
    if b > 0:  # under a budget every head is estimated
        assert math.isfinite(e) and e >= 0, r
# auto under a budget: no denser than whichever of svg and svg2 met it
by = {(r['method'], r['budget'], r['head']): r for r in rows}
for (m, b, h), r in by.items():
    if m != 'auto' or float(b) == 0:
        continue
    for other in ('svg', 'svg2'):
        o = by[(other, b, h)]
        if float(o['est_err']) <= float(b) and float(o['density']) < 0.999:
            assert float(r['density']) <= float(o['density']) + 1e-5, (r, o)
PY
if grep -q "^svg2 *0.05 *4 " mix.stdout; then ok; else bad "mix: no svg2 row: $(cat mix.stdout)"; fi

# another seed draws other heads of the family
expect_ok seed "$STSA" bench quality --family mix-region --size small --threads 1 --seed 5 \
  --csv seed.csv
if ! cmp -s heads.csv seed.csv && [ "$(wc -l <seed.csv)" = 49 ]; then ok; else
  bad "seed: the same heads as the zoo's, or $(wc -l <seed.csv) lines"
fi

if "$STSA" bench quality --family no-such >none.stdout 2>none.stderr; then
  bad "an unknown family ran"
elif grep -q "no case of family 'no-such'" none.stderr; then ok; else
  bad "unknown family: $(cat none.stderr)"
fi
finish
