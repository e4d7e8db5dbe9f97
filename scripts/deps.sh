#!/usr/bin/env bash
# Makes sure the Debian packages the build needs are present: installs them
# when run as root, otherwise prints the exact apt-get line and fails.
# Optional extras, only when asked:
#   STSA_WITH_FUZZ=1   clang, clang-format, libFuzzer and OpenMP for clang
#   STSA_WITH_CROSS=1  an aarch64 cross toolchain, QEMU user mode and the arm64
#                      libraries the build links (scripts/check_cross.sh)
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# jansson: libstsa_io (safetensors; libstsa itself needs none), which the CLI
# and the tests link. libpng: the CLI's plots. Open MPI: libstsa_mpi and
# `stsa run --dist` (sequence parallelism) are part of the default build, and
# the tests run it on 1-4 ranks.
for pkg in build-essential cmake pkg-config libjansson-dev libpng-dev python3 python3-venv \
  openmpi-bin libopenmpi-dev; do
  have_pkg "$pkg" || need+=("$pkg")
done
if [ "${STSA_WITH_FUZZ:-0}" = 1 ]; then
  for pkg in clang clang-format libclang-rt-14-dev libomp-14-dev; do have_pkg "$pkg" || need+=("$pkg"); done
fi
add_arm64=0
if [ "${STSA_WITH_CROSS:-0}" = 1 ]; then
  for pkg in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static; do
    have_pkg "$pkg" || need+=("$pkg")
  done
  # arm64 multiarch packages: what the build links, and what QEMU runs it with.
  for pkg in libjansson-dev libpng-dev libgomp1; do
    have_pkg "$pkg:arm64" || need+=("$pkg:arm64")
  done
  dpkg --print-foreign-architectures | grep -qx arm64 || add_arm64=1
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  [ "$add_arm64" = 1 ] && dpkg --add-architecture arm64
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "deps: missing packages; run:" >&2
  [ "$add_arm64" = 1 ] && echo "  sudo dpkg --add-architecture arm64 && sudo apt-get update" >&2
  echo "  sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
