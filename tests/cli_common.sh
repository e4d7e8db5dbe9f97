# cli_common.sh — sourced by the CLI test scripts (tests/test_cli_*.sh):
#   . "$(dirname "$0")/cli_common.sh" NAME "$@"
# Sets STSA (the tool's absolute path, from the first argument), SRC (the
# source tree; its tests/ goes on PYTHONPATH for tensor_dumps.py), a scratch folder TMP that becomes the current directory and is
# removed on exit (with bg_pid, a background run to kill, if the script sets
# it), and the pass/fail counting: ok, bad MESSAGE, expect_ok NAME CMD...,
# finish (prints "NAME: N passed, M failed" and fails when anything failed).
cli_test_name=$1
STSA=${2:?usage: $cli_test_name.sh path/to/stsa}
STSA=$(cd "$(dirname "$STSA")" && pwd)/$(basename "$STSA")
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
bg_pid=
cli_cleanup() {
  [ -n "$bg_pid" ] && kill "$bg_pid" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cli_cleanup EXIT
cd "$TMP"
export OMP_NUM_THREADS=2
export PYTHONPATH="$SRC/tests${PYTHONPATH:+:$PYTHONPATH}" # tensor_dumps.py

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}
finish() {
  echo "$cli_test_name: $passed passed, $failed failed"
  [ "$failed" = 0 ]
}
# expect_ok NAME CMD...: the command succeeds (its output in NAME.stdout
# and NAME.stderr).
expect_ok() {
  local name=$1
  shift
  if "$@" >"$name.stdout" 2>"$name.stderr"; then ok; else
    bad "$name: exit $? ($(head -c 600 "$name.stderr"))"
  fi
}
