#!/usr/bin/env bash
# Makes sure the Debian packages the build needs are present: installs them
# when run as root, otherwise prints the exact apt-get line and fails.
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in build-essential cmake pkg-config libjansson-dev libpng-dev python3 python3-venv; do
  have_pkg "$pkg" || need+=("$pkg")
done
if [ "${STSA_WITH_FUZZ:-0}" = 1 ]; then
  for pkg in clang clang-format libclang-rt-14-dev libomp-14-dev; do have_pkg "$pkg" || need+=("$pkg"); done
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
  echo "deps: missing packages; run:" >&2
  echo "  sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
