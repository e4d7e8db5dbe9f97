"""stsa: spatio-temporal sparse attention (Sparse VideoGen 1 and 2) on the CPU.

    import stsa
    out = stsa.attention(q, k, v, layout="bshd")      # numpy or CPU torch
    out, info = stsa.SVG("wan21-480p")(q, k, v, layer=5, step=20, layout="bshd")
    out, info = stsa.SVG2("wan21-480p", max_error=0.1)(q, k, v, layer=5, step=20,
                                                       layout="bshd")

layout= is required wherever arrays go in ("bshd", "bhsd" or "shd"): there
is no default to silently misread SDPA's [B, H, S, D] as [B, S, H, D].

A cffi (ABI mode) binding of libstsa, declared from the include/stsa.h it
ships with. See docs/python.md.
"""

from . import masks
from ._core import (Context, Error, StsaMemoryError, StsaNotImplementedError, StsaOSError,
                    StsaTypeError, StsaValueError, default_context)
from ._lib import path as library_path
from ._lib import version as library_version
from .attention import Plan, PlanStats, attention, permute_tokens, sparse_attention
from .geometry import Geometry
from .masks import Mask
from .svg import SVG, SVGInfo, SVGWindows, preset_config, presets, workload
from .svg2 import SVG2, Auto
from ._lib import AUTO_CANDIDATES
from ._wait_policy import ThreadingInfo

__version__ = "0.1.0"

__all__ = [
    "attention", "sparse_attention", "permute_tokens", "Plan", "PlanStats", "Mask", "masks",
    "Geometry", "SVG", "SVG2", "Auto", "AUTO_CANDIDATES", "SVGInfo", "SVGWindows", "presets", "preset_config", "workload",
    "Context",
    "Error", "StsaValueError", "StsaTypeError", "StsaMemoryError",
    "StsaNotImplementedError", "StsaOSError", "default_context", "library_path",
    "library_version", "backends", "cpu_has_avx2", "cpu_has_avx512", "cpu_has_amx", "threading_info",
    "ThreadingInfo",
]


def threading_info():
    """Which OpenMP runtime stsa's threads run on and how idle ones wait (a
    ThreadingInfo): wait_policy "passive" where stsa set it for the
    runtime's load, the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT where they
    set one, "unknown" where the runtime was loaded before stsa (e.g. by
    torch imported first) and the lever could not apply; detail says why.
    See docs/python.md, "Threads and the GIL"."""
    from ._lib import threading_info as info
    return info


def backends(here=False):
    """The library's backends, name -> one line on what each is, in the
    library's order: every one (the names Context(backend=...) and
    STSA_BACKEND accept), or with here=True those this machine runs."""
    from ._lib import BACKENDS, lib, string
    return {name: string(lib.stsa_backend_about(b)) for name, b in BACKENDS.items()
            if not here or lib.stsa_backend_available(b)}


def _backend_available(name):
    from ._lib import BACKENDS, lib
    return bool(lib.stsa_backend_available(BACKENDS[name]))


def cpu_has_avx2():
    """True if this CPU can run the AVX2 backend (backends(here=True) lists
    every backend this machine runs)."""
    return _backend_available("avx2")


def cpu_has_avx512():
    """True if this CPU (and its OS) can run the AVX-512 backend."""
    return _backend_available("avx512")


def cpu_has_amx():
    """True if this CPU (and its OS) can run the amx backend: AVX-512 plus
    the AMX bf16 tile multiply for dense calls on bf16 q, k and v."""
    return _backend_available("amx")
