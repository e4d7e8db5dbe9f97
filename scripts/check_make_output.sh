#!/bin/sh
# Checks the output of `make test` (saved to a file) for what a person should
# see: no build noise (one line per object file, sub-make "Entering directory"
# lines), the bf16 tests run (ml_dtypes installed, not skipped), and a summary
# at the end whose last line is exactly "N passed, N failed, N skipped".
#
#   make test 2>&1 | tee log; scripts/check_make_output.sh log
set -eu
log=${1:?usage: check_make_output.sh make-test-log}
status=0
fail() {
  echo "check_make_output: $1" >&2
  status=1
}
noise=$(grep -cE 'Entering directory|Leaving directory|Building C object|^\[ *[0-9]+%\]' "$log" || true)
[ "$noise" = 0 ] || fail "$noise lines of build noise (object files, progress, 'Entering directory')"
if grep -iE '^SKIPPED.*(ml_dtypes|bfloat16|bf16)' "$log" >/dev/null; then
  fail "bf16 tests were skipped (is ml_dtypes installed?):"
  grep -iE '^SKIPPED.*(ml_dtypes|bfloat16|bf16)' "$log" >&2
fi
last=$(tail -n1 "$log")
echo "$last" | grep -qxE '[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' ||
  fail "the last line is not 'N passed, N failed, N skipped': '$last'"
tail -n2 "$log" | head -n1 | grep -qE '^C: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped; Python: [0-9]+ passed' ||
  fail "no 'C: ... ; Python: ...' summary before the last line"
[ $status = 0 ] && echo "check_make_output: quiet build, bf16 tests ran, summary: $last"
exit $status
