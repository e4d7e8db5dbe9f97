"""Build glue: builds libstsa.so and libstsa_io.so with CMake and ships them
inside the package, with the headers they were built from.

`pip install ./python` (from the repository root) configures the repository
(python/..) with CMake in python/build/cmake, builds the targets stsa_shared
and stsa_io_shared only, and copies libstsa.so, libstsa_io.so,
include/stsa.h and include/stsa_io.h to stsa/_lib/ in the wheel: the binding
declares the C API from those headers at import (cffi, ABI mode), so the
headers are the one description of the ABI. Needs what the C build
needs: cmake, a C compiler, pkg-config, libjansson-dev, libpng-dev (Debian:
apt-get install build-essential cmake pkg-config libjansson-dev libpng-dev).

Environment, all optional:
  STSA_LIBRARY=/path/libstsa.so   ship this library (and the libstsa_io.so next
                                  to it) instead of building them; their
                                  headers are include/ of the source
                                  tree (below), else of the tree its CMake
                                  build directory was configured from
  STSA_SOURCE_DIR=/path/to/stsa   the C source tree when python/.. is not it
  STSA_BUILD_JOBS=N               parallel build jobs (default 2)
  STSA_CMAKE_ARGS="-D..."         extra arguments for the CMake configure step
"""

import os
import pathlib
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = pathlib.Path(__file__).resolve().parent
DEBIAN_DEPS = "build-essential cmake pkg-config libjansson-dev libpng-dev"


def _is_source_dir(root):
    return (root / "CMakeLists.txt").is_file() and (root / "include" / "stsa.h").is_file()


def _source_dir():
    root = pathlib.Path(os.environ.get("STSA_SOURCE_DIR") or HERE.parent).resolve()
    if not _is_source_dir(root):
        raise SystemExit(
            f"stsa: the C sources are not at {root} (no CMakeLists.txt / include/stsa.h). "
            "Install from a checkout (`pip install ./python`), set STSA_SOURCE_DIR to the "
            "stsa source tree, or STSA_LIBRARY to an existing libstsa.so.")
    return root


def _run(cmd):
    print("stsa build:", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    try:
        subprocess.run([str(c) for c in cmd], check=True)
    except subprocess.CalledProcessError as e:
        raise SystemExit(
            f"stsa: `{' '.join(map(str, cmd))}` failed with status {e.returncode}. The C "
            f"build needs: apt-get install {DEBIAN_DEPS}") from e


def build_library():
    """Path of the libstsa.so to ship: $STSA_LIBRARY, or one built now."""
    prebuilt = os.environ.get("STSA_LIBRARY")
    if prebuilt:
        path = pathlib.Path(prebuilt)
        if not path.is_file():
            raise SystemExit(f"stsa: STSA_LIBRARY={prebuilt} is not a file")
        return path
    cmake = shutil.which("cmake")
    if cmake is None:
        raise SystemExit(f"stsa: cmake not found. The C build needs: apt-get install "
                         f"{DEBIAN_DEPS}")
    root = _source_dir()
    build_dir = HERE / "build" / "cmake"
    jobs = os.environ.get("STSA_BUILD_JOBS", "2")
    extra = shlex.split(os.environ.get("STSA_CMAKE_ARGS", ""))
    _run([cmake, "-S", root, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", *extra])
    _run([cmake, "--build", build_dir, "--target", "stsa_shared", "stsa_io_shared", "-j", jobs])
    lib = build_dir / "libstsa.so"
    if not lib.exists():
        raise SystemExit(f"stsa: the build finished but {lib} is missing")
    return lib


def _configured_source_dir(lib):
    """The source tree that the CMake build directory holding `lib` was
    configured from (its CMakeCache.txt), or None."""
    cache = pathlib.Path(lib).resolve().parent / "CMakeCache.txt"
    if not cache.is_file():
        return None
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith("CMAKE_HOME_DIRECTORY:"):
            root = pathlib.Path(line.split("=", 1)[1])
            return root if _is_source_dir(root) else None
    return None


def find_header(lib):
    """The stsa.h that goes with `lib`: of $STSA_SOURCE_DIR or python/..,
    else (a prebuilt $STSA_LIBRARY given from a copy of python/) of the
    source tree its build directory was configured from."""
    if os.environ.get("STSA_SOURCE_DIR") or _is_source_dir(HERE.parent):
        return _source_dir() / "include" / "stsa.h"
    root = _configured_source_dir(lib)
    if root is None:
        raise SystemExit(
            f"stsa: no include/stsa.h for {lib}: python/.. is not the stsa source tree and "
            f"{pathlib.Path(lib).parent} is not a CMake build directory of one. Set "
            "STSA_SOURCE_DIR to the source tree the library was built from.")
    return root / "include" / "stsa.h"


class BuildPyWithLibrary(build_py):
    """build_py, then libstsa.so and its stsa.h into stsa/_lib/ (of the
    wheel, or of the source tree for an editable install)."""

    def run(self):
        super().run()
        lib = build_library()
        header = find_header(lib)
        if getattr(self, "editable_mode", False):
            dest = HERE / "src" / "stsa" / "_lib"
        else:
            dest = pathlib.Path(self.build_lib) / "stsa" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        io_lib = lib.with_name("libstsa_io.so")
        if not io_lib.exists():
            raise SystemExit(f"stsa: no libstsa_io.so next to {lib}: build both libraries")
        # copyfile follows the libstsa.so -> .so.0 -> .so.0.1.0 links: one real file
        shutil.copyfile(lib, dest / "libstsa.so")
        shutil.copyfile(io_lib, dest / "libstsa_io.so")
        shutil.copyfile(header, dest / "stsa.h")
        shutil.copyfile(header.with_name("stsa_io.h"), dest / "stsa_io.h")
        print(f"stsa build: shipped {lib}, {io_lib} and their headers ({header.parent}) in "
              f"{dest}", flush=True)


class PlatformDistribution(Distribution):
    """The wheel holds a native library: tag it for the platform, not 'any'."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithLibrary}
try:  # setuptools >= 70.1 has its own bdist_wheel; older ones use wheel's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

if bdist_wheel is not None:
    class BdistWheelAnyPython(bdist_wheel):
        """libstsa is loaded with cffi in ABI mode, not built against Python:
        one wheel serves every Python 3 on the platform (py3-none-<platform>)."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = BdistWheelAnyPython

setup(cmdclass=cmdclass, distclass=PlatformDistribution)
