#!/bin/sh
# The experimental API compiles only with its macro: every function and type
# declared between `#ifdef STSA_EXPERIMENTAL` and its `#endif` in
# include/stsa.h is undeclared for a file that includes stsa.h without
# defining STSA_EXPERIMENTAL (the compiler must reject a use of it, naming
# it) and declared for one that defines it first; every function outside
# the section compiles without the macro.
#
#   scripts/check_experimental.sh CC [repository root]
set -eu
cc=$1
root=${2:-$(cd "$(dirname "$0")/.." && pwd)}
header=$root/include/stsa.h
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() {
  echo "check_experimental: $1" >&2
  status=1
}

# names declared by `STSA_API type name(` lines and `} name;` typedef ends
api_names() { sed -n 's/^STSA_API[^(]*[ *]\(stsa_[a-z0-9_]*\)(.*/\1/p'; }
type_names() { sed -n 's/^} \(stsa_[a-z0-9_]*\);$/\1/p'; }
section() { sed -n '/^#ifdef STSA_EXPERIMENTAL$/,/^#endif \/\* STSA_EXPERIMENTAL \*\/$/p' "$header"; }
outside() { sed '/^#ifdef STSA_EXPERIMENTAL$/,/^#endif \/\* STSA_EXPERIMENTAL \*\/$/d' "$header"; }

exp_funcs=$(section | api_names)
exp_types=$(section | type_names)
stable_funcs=$(outside | api_names)
[ -n "$exp_funcs" ] || fail "no function between '#ifdef STSA_EXPERIMENTAL' and '#endif /* STSA_EXPERIMENTAL */' in $header"
[ -n "$stable_funcs" ] || fail "no stable function in $header"

# compiles DEFINE_MACRO USE...: a C file that uses each name (as an
# expression, `sizeof` for a type) after including stsa.h; stderr in $tmp/err
compiles() {
  define=$1
  shift
  {
    [ "$define" = 1 ] && echo "#define STSA_EXPERIMENTAL"
    echo "#include <stsa.h>"
    echo "void stsa_uses(void);"
    echo "void stsa_uses(void) {"
    for use in "$@"; do echo "  (void)$use;"; done
    echo "}"
  } >"$tmp/use.c"
  "$cc" -std=c11 -Werror -fsyntax-only -I"$root/include" "$tmp/use.c" 2>"$tmp/err"
}

# shellcheck disable=SC2086 # word splitting: one argument per name
compiles 0 $stable_funcs || fail "the stable API does not compile without STSA_EXPERIMENTAL: $(cat "$tmp/err")"
n=0
for name in $exp_funcs; do
  n=$((n + 1))
  if compiles 0 "$name"; then
    fail "$name compiles without STSA_EXPERIMENTAL"
  elif ! grep -q "$name" "$tmp/err"; then
    fail "$name without STSA_EXPERIMENTAL: the compiler's error does not name it: $(cat "$tmp/err")"
  fi
  compiles 1 "$name" || fail "$name does not compile with STSA_EXPERIMENTAL: $(cat "$tmp/err")"
done
for type in $exp_types; do
  n=$((n + 1))
  compiles 0 "sizeof($type)" && fail "$type compiles without STSA_EXPERIMENTAL"
  compiles 1 "sizeof($type)" || fail "$type does not compile with STSA_EXPERIMENTAL: $(cat "$tmp/err")"
done
[ $status = 0 ] &&
  echo "check_experimental: $n experimental names compile only with STSA_EXPERIMENTAL; $(echo "$stable_funcs" | wc -w) stable functions without it"
exit $status
