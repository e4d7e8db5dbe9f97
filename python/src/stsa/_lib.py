"""ctypes binding of libstsa: the library, its structs and every entry point.

This module mirrors include/stsa.h one to one and nothing more: no array
handling, no defaults. Everything above it (stsa.attention, stsa.Plan, ...)
goes through the objects defined here.

Which libstsa is loaded (first match wins):
  1. $STSA_LIBRARY, a path to libstsa.so (an error if it cannot be loaded);
  2. the copy shipped inside the package, stsa/_lib/libstsa.so (pip install);
  3. <source checkout>/build/libstsa.so, when the package is imported from
     python/src of a checkout (development: `make build`, then
     PYTHONPATH=python/src).

The library is opened with ctypes.CDLL, never PyDLL: every call releases the
GIL while C runs, so other Python threads go on during an attention call.
"""

import ctypes
import os
import pathlib

# The ABI this binding was written against (include/stsa.h): major.minor.
ABI_MAJOR = 0
ABI_MINOR = 1

# ------------------------------------------------------------------ enums
# Numeric values are pinned in stsa.h (append-only).
STSA_OK = 0
STATUS_NAMES = (
    "STSA_OK", "STSA_ERR_NULL_ARG", "STSA_ERR_BAD_SHAPE", "STSA_ERR_BAD_DTYPE",
    "STSA_ERR_BAD_STRIDE", "STSA_ERR_MISALIGNED", "STSA_ERR_OVERLAP",
    "STSA_ERR_NONFINITE", "STSA_ERR_OUT_OF_MEMORY", "STSA_ERR_BAD_PARAM",
    "STSA_ERR_UNSUPPORTED", "STSA_ERR_EMPTY_ROW", "STSA_ERR_IO", "STSA_ERR_FORMAT",
    "STSA_ERR_BAD_MASK",
)
for _code, _name in enumerate(STATUS_NAMES):
    globals()[_name] = _code

STSA_F32, STSA_F16, STSA_BF16 = 0, 1, 2

BACKENDS = {"auto": 0, "ref": 1, "portable": 2, "avx2": 3}
PARAMS = {"threads": 0, "backend": 1, "q_tile": 2, "kv_tile": 3, "check_finite": 4}
TEXT_POS = {"none": 0, "prefix": 1, "suffix": 2}
ORDERS = {"native": 0, "position_major": 1, "sink_first": 2}
SPARSE_MODES = {"exact": 0, "naive": 1, "tile-rounded": 2}
HEAD_KINDS = ("spatial", "temporal", "mixed")

STSA_PLAN_ALLOW_EMPTY_ROWS = 1
STSA_SPARSE_PREPERMUTED = 1
STSA_UNBOUNDED = -(2**63)  # INT64_MIN

c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_float_p = ctypes.POINTER(ctypes.c_float)
c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_uint8_p = ctypes.POINTER(ctypes.c_uint8)


# ------------------------------------------------------------------ structs
# Field for field the structs of stsa.h; C enums are ints. tests/test_abi.py
# checks sizes and offsets against the header (compiled when a C compiler is
# present) and against the LP64 layout written out by hand.
class Tensor(ctypes.Structure):
    """stsa_tensor: logical shape [B, S, H, D], strides in elements."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("stride", ctypes.c_int64 * 4),
    ]


class AttnOpts(ctypes.Structure):
    """stsa_attn_opts."""
    _fields_ = [("scale", ctypes.c_float), ("lse", c_float_p)]


class Geometry(ctypes.Structure):
    """stsa_geometry: F, Hp, Wp in tokens, text tokens and their position."""
    _fields_ = [
        ("frames", ctypes.c_int64),
        ("height", ctypes.c_int64),
        ("width", ctypes.c_int64),
        ("text", ctypes.c_int64),
        ("text_real", ctypes.c_int64),
        ("text_pos", ctypes.c_int),
    ]


class Mask(ctypes.Structure):
    """stsa_mask (opaque)."""


class Plan(ctypes.Structure):
    """stsa_plan (opaque)."""


class Ctx(ctypes.Structure):
    """stsa_ctx (opaque)."""


class Svg(ctypes.Structure):
    """stsa_svg (opaque)."""


MaskP = ctypes.POINTER(Mask)
PlanP = ctypes.POINTER(Plan)
CtxP = ctypes.POINTER(Ctx)
SvgP = ctypes.POINTER(Svg)


class PlanDesc(ctypes.Structure):
    """stsa_plan_desc."""
    _fields_ = [
        ("s_q", ctypes.c_int64),
        ("s_kv", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("masks", ctypes.POINTER(MaskP)),
        ("geometry", ctypes.POINTER(Geometry)),
        ("q_order", ctypes.c_int),
        ("kv_order", ctypes.c_int),
        ("q_tile", ctypes.c_int),
        ("kv_tile", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("q_rows", c_int64_p),
    ]


class PlanStats(ctypes.Structure):
    """stsa_plan_stats."""
    _fields_ = [
        ("q_tiles", ctypes.c_int64),
        ("kv_tiles", ctypes.c_int64),
        ("tiles_total", ctypes.c_int64),
        ("tiles_active", ctypes.c_int64),
        ("tiles_partial", ctypes.c_int64),
        ("pairs_total", ctypes.c_int64),
        ("pairs_kept", ctypes.c_int64),
        ("distinct_masks", ctypes.c_int64),
        ("distinct_partials", ctypes.c_int64),
    ]


class SparseOpts(ctypes.Structure):
    """stsa_sparse_opts."""
    _fields_ = [
        ("scale", ctypes.c_float),
        ("lse", c_float_p),
        ("mode", ctypes.c_int),
        ("pairs_changed", c_int64_p),
        ("flags", ctypes.c_uint),
    ]


class WorkloadDesc(ctypes.Structure):
    """stsa_workload_desc."""
    _fields_ = [
        ("geometry", Geometry),
        ("batch", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("seed", ctypes.c_uint64),
        ("kinds", ctypes.POINTER(ctypes.c_int)),
    ]


class SvgConfig(ctypes.Structure):
    """stsa_svg_config."""
    _fields_ = [
        ("geometry", Geometry),
        ("heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("density", ctypes.c_double),
        ("dense_steps", ctypes.c_int64),
        ("dense_layers", ctypes.c_int64),
        ("sample_rows", ctypes.c_int64),
        ("sink_frames", ctypes.c_int64),
        ("seed", ctypes.c_uint64),
        ("steps", ctypes.c_int64),
        ("layers", ctypes.c_int64),
        ("q_tile", ctypes.c_int),
        ("kv_tile", ctypes.c_int),
    ]


class SvgWindows(ctypes.Structure):
    """stsa_svg_windows."""
    _fields_ = [
        ("q_tile", ctypes.c_int),
        ("kv_tile", ctypes.c_int),
        ("frame_window", ctypes.c_int64),
        ("band", ctypes.c_int64),
        ("density_spatial", ctypes.c_double),
        ("density_temporal", ctypes.c_double),
    ]


class SvgReport(ctypes.Structure):
    """stsa_svg_report."""
    _fields_ = [
        ("dense", ctypes.c_int),
        ("kinds", ctypes.POINTER(ctypes.c_int)),
        ("mse_spatial", c_float_p),
        ("mse_temporal", c_float_p),
        ("profile_ms", ctypes.c_double),
        ("attention_ms", ctypes.c_double),
        ("density", ctypes.c_double),
    ]


TensorP = ctypes.POINTER(Tensor)
GeometryP = ctypes.POINTER(Geometry)
_int = ctypes.c_int
_i64 = ctypes.c_int64
_str = ctypes.c_char_p

# name: (restype, argtypes). Every function of stsa.h, in header order.
SIGNATURES = {
    "stsa_version_number": (ctypes.c_uint, []),
    "stsa_version_string": (_str, []),
    "stsa_status_str": (_str, [_int]),
    "stsa_dtype_size": (ctypes.c_size_t, [_int]),
    "stsa_dtype_name": (_str, [_int]),
    "stsa_tensor_bshd": (Tensor, [ctypes.c_void_p, _int, _i64, _i64, _i64, _i64]),
    "stsa_tensor_bhsd": (Tensor, [ctypes.c_void_p, _int, _i64, _i64, _i64, _i64]),
    "stsa_tensor_shd": (Tensor, [ctypes.c_void_p, _int, _i64, _i64, _i64]),
    "stsa_ctx_create": (_int, [ctypes.POINTER(CtxP)]),
    "stsa_ctx_create_msg": (_int, [ctypes.POINTER(CtxP), ctypes.c_char_p, ctypes.c_size_t]),
    "stsa_ctx_free": (None, [CtxP]),
    "stsa_ctx_last_error": (_str, [CtxP]),
    "stsa_backend_name": (_str, [_int]),
    "stsa_ctx_set": (_int, [CtxP, _int, _i64]),
    "stsa_ctx_get": (_int, [CtxP, _int, c_int64_p]),
    "stsa_param_bounds": (_int, [_int, c_int64_p, c_int64_p]),
    "stsa_ctx_backend": (_int, [CtxP]),
    "stsa_cpu_has_avx2": (_int, []),
    "stsa_attention": (_int, [CtxP, TensorP, TensorP, TensorP, TensorP,
                              ctypes.POINTER(AttnOpts)]),
    "stsa_attention_part": (_int, [CtxP, TensorP, TensorP, TensorP, TensorP,
                                   ctypes.POINTER(AttnOpts), _int, _int]),
    "stsa_attention_check": (_int, [CtxP, TensorP, TensorP, TensorP, TensorP,
                                    ctypes.POINTER(AttnOpts)]),
    "stsa_geometry_tokens": (_i64, [GeometryP]),
    "stsa_order_permutation": (_int, [GeometryP, _int, c_int64_p]),
    "stsa_mask_full": (_int, [ctypes.POINTER(MaskP)]),
    "stsa_mask_causal": (_int, [_i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_local": (_int, [_i64, _i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_chunked_causal": (_int, [_i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_frame_window": (_int, [GeometryP, _i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_spatial_window": (_int, [GeometryP, _i64, _i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_position_band": (_int, [GeometryP, _i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_sink_frames": (_int, [GeometryP, _i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_text": (_int, [GeometryP, ctypes.POINTER(MaskP)]),
    "stsa_mask_segments": (_int, [c_int32_p, _i64, c_int32_p, _i64,
                                  ctypes.POINTER(MaskP)]),
    "stsa_mask_dense": (_int, [c_uint8_p, _i64, _i64, ctypes.POINTER(MaskP)]),
    "stsa_mask_and": (_int, [MaskP, MaskP, ctypes.POINTER(MaskP)]),
    "stsa_mask_or": (_int, [MaskP, MaskP, ctypes.POINTER(MaskP)]),
    "stsa_mask_free": (None, [MaskP]),
    "stsa_mask_keep": (_int, [MaskP, _i64, _i64]),
    "stsa_mask_equal": (_int, [MaskP, MaskP]),
    "stsa_plan_build": (_int, [CtxP, ctypes.POINTER(PlanDesc), ctypes.POINTER(PlanP)]),
    "stsa_plan_free": (None, [PlanP]),
    "stsa_plan_get_stats": (_int, [PlanP, ctypes.POINTER(PlanStats)]),
    "stsa_plan_tile_kind": (_int, [PlanP, _i64, _i64, _i64]),
    "stsa_sparse_mode_name": (_str, [_int]),
    "stsa_sparse_attention": (_int, [CtxP, PlanP, TensorP, TensorP, TensorP, TensorP,
                                     ctypes.POINTER(SparseOpts)]),
    "stsa_head_kind_name": (_str, [_int]),
    "stsa_workload_generate": (_int, [ctypes.POINTER(WorkloadDesc), TensorP, TensorP,
                                      TensorP, ctypes.POINTER(ctypes.c_int)]),
    "stsa_svg_preset": (_int, [_str, ctypes.POINTER(SvgConfig)]),
    "stsa_svg_preset_name": (_str, [_int]),
    "stsa_svg_create": (_int, [CtxP, ctypes.POINTER(SvgConfig), ctypes.POINTER(SvgP)]),
    "stsa_svg_free": (None, [SvgP]),
    "stsa_svg_get_windows": (_int, [SvgP, ctypes.POINTER(SvgWindows)]),
    "stsa_svg_kind_mask": (_int, [SvgP, _int, ctypes.POINTER(MaskP), ctypes.POINTER(_int),
                                  ctypes.POINTER(_int)]),
    "stsa_svg_attention": (_int, [SvgP, _i64, _i64, TensorP, TensorP, TensorP, TensorP,
                                  ctypes.POINTER(SvgReport)]),
    "stsa_permute_tokens": (_int, [GeometryP, _int, _int, TensorP, TensorP]),
}


# ------------------------------------------------------------------ loading
def _candidates():
    """(path, origin) pairs in the order they are tried."""
    env = os.environ.get("STSA_LIBRARY")
    if env:
        return [(pathlib.Path(env), "$STSA_LIBRARY")]
    here = pathlib.Path(__file__).resolve().parent
    found = [(here / "_lib" / "libstsa.so", "package")]
    # python/src/stsa/_lib.py -> repository root is three levels up
    root = here.parents[2]
    if (root / "include" / "stsa.h").is_file():
        found.append((root / "build" / "libstsa.so", "source checkout"))
    return found


def _load():
    tried = []
    for path, origin in _candidates():
        if origin != "$STSA_LIBRARY" and not path.is_file():
            tried.append(f"{path} ({origin}: not there)")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            if origin == "$STSA_LIBRARY":
                raise ImportError(f"stsa: cannot load $STSA_LIBRARY={path}: {e}") from e
            tried.append(f"{path} ({origin}: {e})")
            continue
        return lib, str(path)
    raise ImportError(
        "stsa: libstsa.so not found. Install the package with `pip install ./python` "
        "(it builds the library), set STSA_LIBRARY=/path/to/libstsa.so, or run "
        "`make build` in the source checkout. Tried: " + "; ".join(tried))


def _declare(lib):
    missing = []
    for name, (restype, argtypes) in SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError(f"stsa: {lib._name} lacks {', '.join(missing)}; "
                          "it is older than this binding")


lib, path = _load()
_declare(lib)

version = lib.stsa_version_string().decode()
_vnum = lib.stsa_version_number()
if _vnum // 10000 != ABI_MAJOR or (_vnum // 100) % 100 < ABI_MINOR:
    raise ImportError(f"stsa: {path} is version {version}; this binding needs "
                      f"{ABI_MAJOR}.{ABI_MINOR}.x or a later minor version")


def status_name(code):
    """The library's name of a status code, e.g. 'invalid shape'."""
    return lib.stsa_status_str(code).decode()
