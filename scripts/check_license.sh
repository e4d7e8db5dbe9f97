#!/bin/sh
# The licence is stated once and agreed on everywhere: LICENSE is the MIT
# licence of "The stsa authors", the README names it, and the Python
# package's metadata declares it (the built wheel's License-Expression is
# checked by `make test-python`).
#
#   scripts/check_license.sh [repository root]
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
status=0
fail() {
  echo "check_license: $1" >&2
  status=1
}
lic=$root/LICENSE
if [ ! -f "$lic" ]; then
  fail "no LICENSE file"
else
  head -n1 "$lic" | grep -qx 'MIT License' || fail "LICENSE is not the MIT licence"
  grep -qx 'Copyright (c) 2026 The stsa authors' "$lic" || fail "LICENSE: no 'Copyright (c) 2026 The stsa authors'"
  grep -q 'Permission is hereby granted, free of charge' "$lic" || fail "LICENSE: no MIT permission notice"
fi
grep -qE '^MIT \(see `LICENSE`\)' "$root/README.md" || fail "README.md does not name the licence (MIT, see LICENSE)"
grep -qx 'license = "MIT".*' "$root/python/pyproject.toml" || fail 'python/pyproject.toml: no license = "MIT"'
[ $status = 0 ] && echo "check_license: MIT in LICENSE, README.md and python/pyproject.toml"
exit $status
