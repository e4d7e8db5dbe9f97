#!/usr/bin/env bash
# Installs stsa into a temporary prefix and builds the C program from README.md
# (its first ```c block, taken from the README itself so the two cannot drift)
# against the install, four ways, running each program built:
#   1. pkg-config --cflags --libs stsa            (shared library)
#   2. pkg-config --static --libs stsa            (libstsa.a, its private deps)
#   3. a CMake project: find_package(stsa), stsa::stsa
#   4. the same project with stsa::stsa_static
#   5. when the build has libstsa_mpi: a CMake project with stsa::stsa_mpi,
#      a one-rank distributed call against stsa_attention
# Also checks that the CLI, the header and the docs were installed.
#
#   scripts/check_install.sh [build-dir (default build-install)]
#
# The build dir is configured and built here when it has no build yet.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-install}
case $build in /*) ;; *) build=$root/$build ;; esac
cc=${CC:-cc}

work=$(mktemp -d "${TMPDIR:-/tmp}/stsa-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

say() { echo "check_install: $*"; }
fail() { echo "check_install: FAILED: $*" >&2; exit 1; }

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_RULE_MESSAGES=OFF >/dev/null
fi
cmake --build "$build" -j"$(nproc)" -- --no-print-directory
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
say "installed into a temporary prefix: $(grep -cE -- '-- (Installing|Up-to-date):' "$work/install.log" || true) files"

# Where things went (GNUInstallDirs: lib, or lib/<multiarch> on Debian with prefix /usr).
pc=$(find "$prefix" -name stsa.pc -path '*/pkgconfig/*' 2>/dev/null | head -n1 || true)
[ -n "$pc" ] || fail "no stsa.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$prefix/include/stsa.h" "$libdir/libstsa.a" "$libdir/libstsa.so" \
         "$libdir/cmake/stsa/stsaConfig.cmake" "$libdir/cmake/stsa/stsaConfigVersion.cmake" \
         "$prefix/share/doc/stsa/cli.md" "$prefix/share/doc/stsa/README.md" \
         "$prefix/share/doc/stsa/LICENSE"; do
  [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
for doc in "$root"/docs/*.md; do
  [ -e "$prefix/share/doc/stsa/$(basename "$doc")" ] || fail "doc not installed: $(basename "$doc")"
done
"$prefix/bin/stsa" version >/dev/null || fail "the installed CLI does not run"

# The README's C program.
awk '/^```c$/ {on = 1; next} on && /^```/ {exit} on {print}' "$root/README.md" >"$work/example.c"
grep -q 'int main' "$work/example.c" || fail "README.md has no \`\`\`c block with a main()"
say "README.md's C program: $(wc -l <"$work/example.c") lines"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
run() { # name, program: runs it and keeps its output for the comparison below
  local name=$1 exe=$2
  "$exe" >"$work/$name.out" || fail "$name: the program failed"
  say "$name: $(cat "$work/$name.out")"
}
needed() { readelf -d "$1" | grep -c 'NEEDED.*libstsa' || true; }

# 1. shared, pkg-config
# shellcheck disable=SC2046  # pkg-config output is meant to be split
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/ex_shared" "$work/example.c" \
  $(pkg-config --cflags --libs stsa)
[ "$(needed "$work/ex_shared")" = 1 ] || fail "pkg-config shared: not linked to libstsa.so"
LD_LIBRARY_PATH=$libdir run pkgconfig-shared "$work/ex_shared"

# 2. static, pkg-config: the archive in place of -lstsa, plus Libs.private and
# Requires.private (jansson) — what a static link needs beyond libstsa.a.
static_libs=$(pkg-config --static --libs stsa)
case " $static_libs " in *" -lstsa "*) ;; *) fail "pkg-config --static: no -lstsa in '$static_libs'" ;; esac
for need in -ljansson -lm; do
  case " $static_libs " in *" $need "*) ;; *) fail "pkg-config --static --libs stsa lacks $need" ;; esac
done
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/ex_static" "$work/example.c" \
  $(pkg-config --cflags stsa) ${static_libs/-lstsa /-l:libstsa.a }
[ "$(needed "$work/ex_static")" = 0 ] || fail "pkg-config static: linked to libstsa.so"
run pkgconfig-static "$work/ex_static"

# 3, 4. CMake package
mkdir -p "$work/consumer"
cp "$work/example.c" "$work/consumer/example.c"
cat >"$work/consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(stsa_consumer LANGUAGES C)
find_package(stsa 0.1 REQUIRED)
add_executable(ex_shared example.c)
target_link_libraries(ex_shared PRIVATE stsa::stsa)
add_executable(ex_static example.c)
target_link_libraries(ex_static PRIVATE stsa::stsa_static)
CMAKE
CC=$cc cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log" >&2; fail "find_package(stsa) failed"; }
cmake --build "$work/consumer/build" -- --no-print-directory >"$work/consumer-build.log" 2>&1 ||
  { cat "$work/consumer-build.log" >&2; fail "the CMake consumer did not build"; }
[ "$(needed "$work/consumer/build/ex_shared")" = 1 ] || fail "stsa::stsa: not linked to libstsa.so"
[ "$(needed "$work/consumer/build/ex_static")" = 0 ] || fail "stsa::stsa_static: linked to libstsa.so"
run cmake-shared "$work/consumer/build/ex_shared" # the build RPATH finds libstsa.so
run cmake-static "$work/consumer/build/ex_static"

for name in pkgconfig-static cmake-shared cmake-static; do
  cmp -s "$work/pkgconfig-shared.out" "$work/$name.out" || fail "$name printed something else"
done
say "ok: shared and static, pkg-config and find_package"

# 5. libstsa_mpi, when this build has it: find_package(stsa) then gives
# stsa::stsa_mpi; a one-rank distributed call must equal stsa_attention.
if [ -e "$libdir/libstsa_mpi.so" ]; then
  [ -e "$prefix/include/stsa_mpi.h" ] || fail "not installed: include/stsa_mpi.h"
  mkdir -p "$work/mpi"
  cat >"$work/mpi/dist.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <stsa_mpi.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  enum { S = 96, H = 3, D = 16 };
  static float q[S * H * D], o1[S * H * D], o2[S * H * D];
  for (int i = 0; i < S * H * D; i++)
    q[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
  stsa_tensor t = stsa_tensor_shd(q, STSA_F32, S, H, D);
  stsa_tensor a = stsa_tensor_shd(o1, STSA_F32, S, H, D), b = stsa_tensor_shd(o2, STSA_F32, S, H, D);
  stsa_ctx *ctx;
  stsa_dist *dist;
  stsa_dist_config cfg = STSA_INIT(stsa_dist_config);
  int ok = stsa_ctx_create(&ctx) == STSA_OK && stsa_attention(ctx, &t, &t, &t, &a, NULL) == STSA_OK &&
           stsa_dist_create(ctx, MPI_COMM_WORLD, &cfg, &dist) == STSA_OK &&
           stsa_dist_attention(dist, &t, &t, &t, &b, NULL, NULL) == STSA_OK &&
           memcmp(o1, o2, sizeof o1) == 0;
  printf("libstsa_mpi: one rank %s stsa_attention\n", ok ? "equals" : "DIFFERS FROM");
  MPI_Finalize();
  return !ok;
}
C
  cat >"$work/mpi/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(stsa_mpi_consumer LANGUAGES C)
find_package(stsa 0.1 REQUIRED)
if(NOT TARGET stsa::stsa_mpi)
  message(FATAL_ERROR "find_package(stsa) gave no stsa::stsa_mpi")
endif()
add_executable(dist dist.c)
target_link_libraries(dist PRIVATE stsa::stsa_mpi)
CMAKE
  CC=$cc cmake -S "$work/mpi" -B "$work/mpi/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$work/mpi.log" 2>&1 ||
    { cat "$work/mpi.log" >&2; fail "find_package(stsa) with MPI failed"; }
  cmake --build "$work/mpi/build" -- --no-print-directory >"$work/mpi-build.log" 2>&1 ||
    { cat "$work/mpi-build.log" >&2; fail "the libstsa_mpi consumer did not build"; }
  # a singleton MPI process: no mpirun needed
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 run cmake-mpi "$work/mpi/build/dist"
fi
