#!/bin/sh
# The documentation stands on its own: no link or path that leaves the
# repository, no relative link to a file that does not exist, and no
# references to the project's issue tracker ("issue 12", "#12").
#
#   tests/check_docs.sh [repository root]
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
status=0
docs="README.md python/README.md $(ls docs/*.md)"

fail() {
  echo "check_docs: $1" >&2
  status=1
}

for f in $docs; do
  # Paths that climb out of the repository (../shared/..., ../../x).
  if grep -nE '(^|[^.])\.\./' "$f" >/dev/null; then
    fail "$f names a path outside the repository:"
    grep -nE '(^|[^.])\.\./' "$f" >&2
  fi
  # Issue-tracker references.
  if grep -niE '\bissues? #?[0-9]+|(^|[ (])#[0-9]+\b' "$f" >/dev/null; then
    fail "$f refers to the issue tracker:"
    grep -niE '\bissues? #?[0-9]+|(^|[ (])#[0-9]+\b' "$f" >&2
  fi
  # Relative markdown links must name files of the repository.
  dir=$(dirname "$f")
  for target in $(grep -oE '\]\([^)#[:space:]]+' "$f" | sed 's/^](//' | grep -vE '^[a-z]+:'); do
    [ -e "$dir/$target" ] || fail "$f links to $target, which does not exist"
  done
done
[ $status = 0 ] && echo "check_docs: $(echo $docs | wc -w) documents stand on their own"
exit $status
