# Cross-compiling for 64-bit Arm Linux with Debian's cross toolchain
# (gcc-aarch64-linux-gnu) and arm64 multiarch libraries (libjansson-dev:arm64,
# libpng-dev:arm64). Used by scripts/check_cross.sh:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Libraries and headers of the target only; programs (cmake, pkg-config) of the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# Multiarch packages install into /usr/lib/aarch64-linux-gnu, outside the root
# path, so libraries and headers are searched in both.
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config must read the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# Tests run under user-mode QEMU when it is there (Debian: qemu-user-static);
# it uses the arm64 multiarch loader and libraries (libc6:arm64, libgomp1:arm64).
find_program(STSA_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(STSA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${STSA_QEMU_AARCH64})
endif()
