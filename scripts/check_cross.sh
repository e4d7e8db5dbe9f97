#!/usr/bin/env bash
# Cross-compiles stsa for aarch64 (library, CLI and C tests, warnings as
# errors), checks what was built, and runs the tests under user-mode QEMU:
#   - the library and the CLI are AArch64 binaries that carry the NEON
#     kernels (stsa_kernels_override_neon) and none of the AVX2 ones: x86
#     sources and ISA flags stay on x86;
#   - every C test program (ctest); the tiled-backend tests of test_dense,
#     test_sparse and test_nonfinite loop over every available backend, so
#     on aarch64 they hold portable and neon to the double-precision reference;
#   - the CLI test scripts, handed the CLI through QEMU (ctest hands them the
#     aarch64 binary itself, which the host cannot execute);
#   - STSA_BACKEND=neon `stsa demo --quick` and `stsa bench dense` run and
#     report backend neon.
# Emulation is slow (test_dense takes minutes) and its timings mean nothing:
# this checks correctness only.
#
#   scripts/check_cross.sh [--build-only] [build-dir (default build-aarch64)]
#
# --build-only stops after the checks of the binaries (make build-aarch64;
# make test-aarch64 runs everything). Needs: STSA_WITH_CROSS=1
# scripts/deps.sh (gcc-aarch64-linux-gnu, qemu-user-static and the arm64
# jansson/libpng/libgomp packages). QEMU runs the binaries with the arm64
# multiarch libraries, as ctest's emulator does (cmake/aarch64-linux-gnu.cmake):
# with -L /usr/aarch64-linux-gnu, the cross toolchain's own libc, any OpenMP
# program of two threads never finishes under QEMU 7.2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_only=0
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
build=${1:-build-aarch64}
case $build in /*) ;; *) build=$root/$build ;; esac

fail() { echo "check_cross: FAILED: $*" >&2; exit 1; }
command -v aarch64-linux-gnu-gcc >/dev/null ||
  fail "no aarch64-linux-gnu-gcc; run: STSA_WITH_CROSS=1 scripts/deps.sh"

# ------------------------------------------------------------ build
cmake -S "$root" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DSTSA_WERROR=ON \
  -DCMAKE_RULE_MESSAGES=OFF -DCMAKE_TARGET_MESSAGES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" -- --no-print-directory
for bin in libstsa.so libstsa_io.so stsa; do
  readelf -h "$build/$bin" | grep -q 'Machine:.*AArch64' || fail "$bin is not an AArch64 binary"
done
symbols=$(aarch64-linux-gnu-nm -A "$build/libstsa.a" "$build/stsa")
for bin in libstsa.a stsa; do
  grep -q "^$build/$bin:.* T stsa_kernels_override_neon$" <<<"$symbols" ||
    fail "$bin has no NEON kernels (stsa_kernels_override_neon)"
done
# no avx2 name at all: the CPU checks (src/core/cpu.h) exist on x86 only
if avx2=$(grep -i avx2 <<<"$symbols"); then
  fail "AVX2 code in an aarch64 build: $avx2"
fi
echo "check_cross: built for aarch64 (libraries, CLI, tests): NEON kernels, no AVX2"
[ "$build_only" = 1 ] && exit 0

# ------------------------------------------------------------ run under QEMU
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64) ||
  fail "no qemu-aarch64; run: STSA_WITH_CROSS=1 scripts/deps.sh"
(cd "$build" && ctest --output-on-failure -j"$(nproc)" -E '^test_cli_' \
  --output-junit "$build/results-c.xml")

# The CLI as the host can run it, for the CLI test scripts.
cli=$build/stsa-qemu
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$qemu" "$build/stsa" >"$cli"
chmod +x "$cli"
for script in "$root"/tests/test_cli_*.sh; do
  "$script" "$cli" >"$build/$(basename "$script" .sh).log" 2>&1 ||
    fail "$(basename "$script") under QEMU (log: $build/$(basename "$script" .sh).log)"
  echo "check_cross: $(tail -n 1 "$build/$(basename "$script" .sh).log")"
done

out=$(STSA_BACKEND=neon "$cli" demo --quick --quiet) || fail "STSA_BACKEND=neon stsa demo --quick"
grep -q 'backend neon' <<<"$out" || fail "stsa demo did not run backend neon: $(head -n 1 <<<"$out")"
out=$(STSA_BACKEND=neon "$cli" bench dense --seq 300 --heads 2 --dim 72 --reps 1) ||
  fail "STSA_BACKEND=neon stsa bench dense"
grep -q '^dense neon:' <<<"$out" || fail "stsa bench dense did not run backend neon: $out"
echo "check_cross: STSA_BACKEND=neon stsa demo --quick and bench dense run backend neon"
echo "check_cross: ok"
