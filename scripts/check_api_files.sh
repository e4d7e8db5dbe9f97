#!/bin/sh
# Each public function is defined in the file of its header section: every
# `STSA_API ... name(` of include/stsa.h belongs to the section it is
# declared in (the `/* Title */` line between two rules of dashes), and each
# section has one or a few clearly named source files, mapped below; the
# function must be defined in exactly one of its section's files. So a
# reader finds a public function from its section, and a new function goes
# into its section's file (or the map names a new file, on purpose).
# include/stsa_mpi.h and include/stsa_io.h have no sections: their functions
# live in src/dist's three public files and in libstsa_io's files. See docs/architecture.md, "Where the public functions
# live".
#
#   scripts/check_api_files.sh [repository root]
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

section_files() { # header section -> the source files of its functions
  case $1 in
    "Version" | "Status codes"* | "Element types") echo "src/core/status.c" ;;
    "Tensor descriptor") echo "src/core/tensor.c" ;;
    # the context's lifetime, errors and run record; creation and
    # parameters (which resolve the backend); the backend table
    "Context and parameters") echo "src/core/context.c src/kernel/context.c src/kernel/dispatch.c" ;;
    "Dense attention") echo "src/kernel/dense.c" ;;
    "Video geometry and token orders") echo "src/mask/geometry.c" ;;
    "Masks:"*) echo "src/mask/mask.c" ;;
    "Plans:"*) echo "src/mask/plan_build.c" ;;
    "Block-sparse attention") echo "src/mask/sparse_call.c" ;;
    "Sparse VideoGen: head kinds") echo "src/svg/head_kind.c" ;;
    "Sparse VideoGen: the session") echo "src/svg/session.c src/svg/presets.c src/svg/auto_pick.c src/svg/permute.c" ;;
    # each next to the stable functions it extends
    "Experimental:"*) echo "src/core/tensor_copy.c src/mask/plan_build.c src/svg/session.c" ;;
    "stsa_mpi.h") echo "src/dist/dist.c src/dist/dist_attention.c src/dist/dist_svg.c" ;;
    # libstsa_io: the file formats, their shared helpers, the workload
    "stsa_io.h") echo "src/io/safetensors_read.c src/io/safetensors_write.c src/io/npy.c src/io/io_common.c src/workload/workload.c" ;;
    *) echo "?" ;;
  esac
}

# "section|function" for every public function, in header order
declared() {
  awk '
    /^\/\* -+ \*\/$/ { if (NR == title_nr + 1) section = title; rule = NR; next }
    NR == rule + 1 && /^\/\* [A-Z]/ { title = $0; title_nr = NR; sub(/^\/\* /, "", title); sub(/ *\*\/$/, "", title) }
    /^STSA_API/ && match($0, /stsa_[a-z0-9_]+\(/) { print section "|" substr($0, RSTART, RLENGTH - 1) }
  ' include/stsa.h
  for h in stsa_mpi.h stsa_io.h; do
    sed -n 's/^STSA_API[^(]*[ *]\(stsa_[a-z0-9_]*\)(.*/'"$h"'|\1/p' include/$h
  done
}

# The .c files under src that define `name`: a line at column 0 that names
# it before its parameters, whose signature reaches a `{` before a `;`.
defined_in() {
  # shellcheck disable=SC2046 # one argument per file
  awk -v name="$1" '
    FNR == 1 { sig = 0 }
    !sig && $0 ~ ("^[a-z][a-z0-9_ ]*[ *]" name "[(]") { sig = 1 }
    sig && /[{]/ { print FILENAME; sig = 0; next }
    sig && /;[ \t]*$/ { sig = 0 }
  ' $(find src -name '*.c' | sort)
}

status=0
n=0
fail() {
  echo "check_api_files: $1" >&2
  status=1
}
pairs=$(declared)
while IFS='|' read -r section name; do
  n=$((n + 1))
  files=$(section_files "$section")
  if [ "$files" = "?" ]; then
    fail "$name: its header section '$section' has no files in scripts/check_api_files.sh"
    continue
  fi
  where=$(defined_in "$name" | tr '\n' ' ' | sed 's/ $//')
  case $where in
    "") fail "$name ($section) is defined in no file under src/" ;;
    *" "*) fail "$name ($section) is defined in several files: $where" ;;
    *) case " $files " in
         *" $where "*) ;;
         *) fail "$name is defined in $where, but its header section '$section' has: $files" ;;
       esac ;;
  esac
done <<EOF_PAIRS
$pairs
EOF_PAIRS
[ $status = 0 ] && echo "check_api_files: $n public functions, each in a file of its header section"
exit $status
