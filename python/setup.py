"""Build glue: builds libstsa.so with CMake and ships it inside the package.

`pip install ./python` (from the repository root) configures the repository
(python/..) with CMake in python/build/cmake, builds the target stsa_shared
only, and copies libstsa.so to stsa/_lib/ in the wheel. Needs what the C
build needs: cmake, a C compiler, pkg-config, libjansson-dev, libpng-dev
(Debian: apt-get install build-essential cmake pkg-config libjansson-dev
libpng-dev).

Environment, all optional:
  STSA_LIBRARY=/path/libstsa.so   ship this library instead of building one
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


def _source_dir():
    root = pathlib.Path(os.environ.get("STSA_SOURCE_DIR") or HERE.parent).resolve()
    if not (root / "CMakeLists.txt").is_file() or not (root / "include" / "stsa.h").is_file():
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
    _run([cmake, "--build", build_dir, "--target", "stsa_shared", "-j", jobs])
    lib = build_dir / "libstsa.so"
    if not lib.exists():
        raise SystemExit(f"stsa: the build finished but {lib} is missing")
    return lib


class BuildPyWithLibrary(build_py):
    """build_py, then libstsa.so into stsa/_lib/ (of the wheel, or of the
    source tree for an editable install)."""

    def run(self):
        super().run()
        lib = build_library()
        if getattr(self, "editable_mode", False):
            dest = HERE / "src" / "stsa" / "_lib"
        else:
            dest = pathlib.Path(self.build_lib) / "stsa" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        # copyfile follows the libstsa.so -> .so.0 -> .so.0.1.0 links: one real file
        shutil.copyfile(lib, dest / "libstsa.so")
        print(f"stsa build: shipped {lib} as {dest / 'libstsa.so'}", flush=True)


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
        """libstsa is loaded with ctypes, not built against Python: one wheel
        serves every Python 3 on the platform (py3-none-<platform>)."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = BdistWheelAnyPython

setup(cmdclass=cmdclass, distclass=PlatformDistribution)
