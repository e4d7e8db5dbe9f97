#!/usr/bin/env bash
# Cross-compiles stsa for aarch64 (library, CLI and C tests, warnings as
# errors) and runs a few C tests under user-mode QEMU, which exercises the
# portable kernels on a non-x86 target. Proves the build applies x86 ISA flags
# only on x86 and that a non-x86 build links without the AVX2 kernels.
#
#   scripts/check_cross.sh [build-dir (default build-aarch64)]
#
# Needs: STSA_WITH_CROSS=1 scripts/deps.sh (gcc-aarch64-linux-gnu,
# qemu-user-static and the arm64 jansson/libpng/libgomp packages).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-aarch64}
case $build in /*) ;; *) build=$root/$build ;; esac
# The portable path under emulation, on the tests that run in seconds there.
tests='^(test_api|test_mask|test_io|test_workload|test_sparse)$'

fail() { echo "check_cross: FAILED: $*" >&2; exit 1; }
command -v aarch64-linux-gnu-gcc >/dev/null ||
  fail "no aarch64-linux-gnu-gcc; run: STSA_WITH_CROSS=1 scripts/deps.sh"

cmake -S "$root" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DSTSA_WERROR=ON \
  -DCMAKE_RULE_MESSAGES=OFF -DCMAKE_TARGET_MESSAGES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" -- --no-print-directory
readelf -h "$build/libstsa.so" | grep -q 'Machine:.*AArch64' || fail "libstsa.so is not an AArch64 library"
if aarch64-linux-gnu-nm "$build/libstsa.a" | grep -q avx2; then
  fail "the AVX2 kernels were compiled into an aarch64 library"
fi
echo "check_cross: built for aarch64 (library, CLI, tests)"

command -v qemu-aarch64-static >/dev/null || command -v qemu-aarch64 >/dev/null ||
  fail "no qemu-aarch64; run: STSA_WITH_CROSS=1 scripts/deps.sh"
(cd "$build" && ctest --output-on-failure -j"$(nproc)" -R "$tests" --output-junit "$build/results-c.xml")
echo "check_cross: ok"
