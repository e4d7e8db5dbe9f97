#!/usr/bin/env bash
# Installs stsa into a temporary prefix and builds the C program from README.md
# (its first ```c block, taken from the README itself so the two cannot drift)
# against the install, four ways, running each program built:
#   1. pkg-config --cflags --libs stsa            (shared library)
#   2. pkg-config --static --libs stsa            (libstsa.a, its private deps)
#   3. a CMake project: find_package(stsa), stsa::stsa
#   4. the same project with stsa::stsa_static
#   5. libstsa_io: a program that writes and reads back a .npy and a
#      safetensors file (and names libstsa's version), built with
#      pkg-config stsa_io (shared and --static) and with stsa::stsa_io and
#      stsa::stsa_io_static
#   6. when the build has libstsa_mpi: a CMake project with stsa::stsa_mpi,
#      a one-rank distributed call against stsa_attention
# Also checks that the CLI, the headers and the docs were installed, and that
# the installed libstsa.so needs no jansson (scripts/check_lib_deps.sh).
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
         "$prefix/include/stsa_io.h" "$libdir/libstsa_io.a" "$libdir/libstsa_io.so" \
         "$libdir/pkgconfig/stsa_io.pc" \
         "$libdir/cmake/stsa/stsaConfig.cmake" "$libdir/cmake/stsa/stsaConfigVersion.cmake" \
         "$prefix/share/doc/stsa/cli.md" "$prefix/share/doc/stsa/README.md" \
         "$prefix/share/doc/stsa/LICENSE"; do
  [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
for doc in "$root"/docs/*.md; do
  [ -e "$prefix/share/doc/stsa/$(basename "$doc")" ] || fail "doc not installed: $(basename "$doc")"
done
"$prefix/bin/stsa" version >/dev/null || fail "the installed CLI does not run"
"$root/scripts/check_lib_deps.sh" "$libdir/libstsa.so" >/dev/null ||
  fail "the installed libstsa.so needs jansson"

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
cmake_pair() { # folder, source, shared target, static target: a CMake project
  # against the install that builds <folder>/build/shared and .../static
  cat >"$1/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(stsa_consumer LANGUAGES C)
find_package(stsa 0.1 REQUIRED)
add_executable(shared $2)
target_link_libraries(shared PRIVATE $3)
add_executable(static $2)
target_link_libraries(static PRIVATE $4)
CMAKE
  cmake_consumer "$1" "$3"
}
cmake_consumer() { # folder (its CMakeLists.txt against the install), what it is
  CC=$cc cmake -S "$1" -B "$1/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$1.log" 2>&1 ||
    { cat "$1.log" >&2; fail "find_package(stsa) for $2 failed"; }
  cmake --build "$1/build" -- --no-print-directory >"$1-build.log" 2>&1 ||
    { cat "$1-build.log" >&2; fail "the $2 CMake consumer did not build"; }
}

# 1. shared, pkg-config
# shellcheck disable=SC2046  # pkg-config output is meant to be split
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/ex_shared" "$work/example.c" \
  $(pkg-config --cflags --libs stsa)
[ "$(needed "$work/ex_shared")" = 1 ] || fail "pkg-config shared: not linked to libstsa.so"
LD_LIBRARY_PATH=$libdir run pkgconfig-shared "$work/ex_shared"

# 2. static, pkg-config: the archive in place of -lstsa, plus Libs.private
# (OpenMP, libm) — what a static link needs beyond libstsa.a; no jansson,
# which is libstsa_io's.
static_libs=$(pkg-config --static --libs stsa)
case " $static_libs " in *" -lstsa "*) ;; *) fail "pkg-config --static: no -lstsa in '$static_libs'" ;; esac
case " $static_libs " in *" -lm "*) ;; *) fail "pkg-config --static --libs stsa lacks -lm" ;; esac
case " $static_libs " in *" -ljansson "*) fail "pkg-config --static --libs stsa names jansson" ;; esac
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/ex_static" "$work/example.c" \
  $(pkg-config --cflags stsa) ${static_libs/-lstsa /-l:libstsa.a }
[ "$(needed "$work/ex_static")" = 0 ] || fail "pkg-config static: linked to libstsa.so"
run pkgconfig-static "$work/ex_static"

# 3, 4. CMake package
mkdir -p "$work/consumer"
cp "$work/example.c" "$work/consumer/example.c"
cmake_pair "$work/consumer" example.c stsa::stsa stsa::stsa_static
[ "$(needed "$work/consumer/build/shared")" = 1 ] || fail "stsa::stsa: not linked to libstsa.so"
[ "$(needed "$work/consumer/build/static")" = 0 ] || fail "stsa::stsa_static: linked to libstsa.so"
run cmake-shared "$work/consumer/build/shared" # the build RPATH finds libstsa.so
run cmake-static "$work/consumer/build/static"

for name in pkgconfig-static cmake-shared cmake-static; do
  cmp -s "$work/pkgconfig-shared.out" "$work/$name.out" || fail "$name printed something else"
done
say "ok: shared and static, pkg-config and find_package"

# 5. libstsa_io: pkg-config (shared, static) and CMake (stsa::stsa_io,
# stsa::stsa_io_static); each program writes files into its own folder.
mkdir -p "$work/io"
cat >"$work/io/files.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <stsa_io.h>
int main(int argc, char **argv) {
  char npy[4096], st[4096], err[512];
  snprintf(npy, sizeof npy, "%s/x.npy", argc > 1 ? argv[1] : ".");
  snprintf(st, sizeof st, "%s/x.safetensors", argc > 1 ? argv[1] : ".");
  float x[6] = {1, -2, 3.5f, 0, 5, 6}, y[6] = {0};
  int64_t shape[2] = {2, 3};
  stsa_npy_array a = {0};
  stsa_io_tensor t = {"x", STSA_F32, 2, {2, 3}, x, sizeof x};
  stsa_st_file *f = NULL;
  int ok = stsa_npy_write(npy, STSA_F32, 2, shape, x, err, sizeof err) == STSA_OK &&
           stsa_npy_read(npy, &a, err, sizeof err) == STSA_OK && a.nbytes == sizeof x &&
           memcmp(a.data, x, sizeof x) == 0 &&
           stsa_st_write(st, &t, 1, err, sizeof err) == STSA_OK &&
           stsa_st_open(st, &f, err, sizeof err) == STSA_OK && stsa_st_find(f, "x") &&
           (memcpy(y, stsa_st_find(f, "x")->data, sizeof y), memcmp(x, y, sizeof x) == 0);
  printf("libstsa_io with libstsa %s: .npy and safetensors %s%s\n", stsa_version_string(),
         ok ? "round-trip" : "FAILED: ", ok ? "" : err);
  stsa_npy_free(&a);
  stsa_st_close(f);
  return !ok;
}
C
io_run() { # name, program: runs it in a fresh folder of its own
  mkdir -p "$work/io/$1.d"
  "$2" "$work/io/$1.d" >"$work/io/$1.out" || fail "$1: $(cat "$work/io/$1.out")"
  say "$1: $(cat "$work/io/$1.out")"
}
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/io/io_shared" "$work/io/files.c" \
  $(pkg-config --cflags --libs stsa_io)
[ "$(needed "$work/io/io_shared")" = 2 ] || fail "pkg-config stsa_io: not linked to libstsa_io.so and libstsa.so"
LD_LIBRARY_PATH=$libdir io_run io-pkgconfig-shared "$work/io/io_shared"
# The workload is experimental: declared only with STSA_EXPERIMENTAL.
printf '%s\n' '#include <stsa_io.h>' \
  'int main(void) { return stsa_workload_generate(0, 0, 0, 0, 0) != STSA_ERR_NULL_ARG; }' \
  >"$work/io/workload.c"
# shellcheck disable=SC2046
if "$cc" -std=c11 -Werror -o "$work/io/wl" "$work/io/workload.c" $(pkg-config --cflags --libs stsa_io) \
  2>/dev/null; then
  fail "stsa_workload_generate is declared without STSA_EXPERIMENTAL"
fi
# shellcheck disable=SC2046
"$cc" -std=c11 -Werror -DSTSA_EXPERIMENTAL -o "$work/io/wl" "$work/io/workload.c" \
  $(pkg-config --cflags --libs stsa_io) || fail "the experimental workload does not build"
LD_LIBRARY_PATH=$libdir "$work/io/wl" || fail "stsa_workload_generate(NULL ...) is not NULL_ARG"
say "io: stsa_workload_generate only with STSA_EXPERIMENTAL"
io_static=$(pkg-config --static --libs stsa_io)
for need in -lstsa_io -lstsa -ljansson -lm; do
  case " $io_static " in *" $need "*) ;; *) fail "pkg-config --static --libs stsa_io lacks $need" ;; esac
done
io_static=${io_static/-lstsa_io /-l:libstsa_io.a }
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -o "$work/io/io_static" "$work/io/files.c" \
  $(pkg-config --cflags stsa_io) ${io_static/-lstsa /-l:libstsa.a }
[ "$(needed "$work/io/io_static")" = 0 ] || fail "pkg-config stsa_io static: linked to a shared libstsa"
io_run io-pkgconfig-static "$work/io/io_static"
cmake_pair "$work/io" files.c stsa::stsa_io stsa::stsa_io_static
[ "$(needed "$work/io/build/shared")" = 2 ] || fail "stsa::stsa_io: not linked to libstsa_io.so and libstsa.so"
[ "$(needed "$work/io/build/static")" = 0 ] || fail "stsa::stsa_io_static: linked to a shared libstsa"
io_run io-cmake-shared "$work/io/build/shared"
io_run io-cmake-static "$work/io/build/static"
say "ok: libstsa_io, shared and static, pkg-config and find_package"

# 6. libstsa_mpi, when this build has it: find_package(stsa) then gives
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
  cmake_consumer "$work/mpi" stsa::stsa_mpi
  # a singleton MPI process: no mpirun needed
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 run cmake-mpi "$work/mpi/build/dist"
fi
