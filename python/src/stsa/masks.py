"""Masks: predicates on (query i, key j) token pairs, in native token order.

Each constructor mirrors one stsa_mask_* function of the C API; `a & b` and
`a | b` combine masks (stsa_mask_and / stsa_mask_or). Masks are immutable.
Video masks (frame_window, spatial_window, position_band, sink_frames, text)
take a Geometry and remember it, so a Plan built from them knows its
geometry without being told.

    from stsa import masks, Geometry
    g = Geometry(21, 30, 52)
    spatial = (masks.frame_window(g, 2) | masks.sink_frames(g, 1)) & masks.full()
"""

import weakref

import numpy as np

from . import _lib
from ._core import INT32, INT64, NativeHandle, as_int, pointer, raise_status
from ._lib import ffi, lib
from .geometry import Geometry

__all__ = ["Mask", "full", "causal", "local", "chunked_causal", "frame_window",
           "spatial_window", "position_band", "sink_frames", "text", "segments", "dense",
           "clusters"]


def _make(fn_name, description, *args, geometry=None, shape=None):
    handle = ffi.new("stsa_mask **")
    status = getattr(lib, fn_name)(*args, handle)
    if status != lib.STSA_OK:
        raise_status(status, f"{description}: {_lib.status_name(status)}")
    return Mask(handle[0], description, geometry, shape)


class Mask(NativeHandle):
    """An stsa_mask. Build one with the functions of stsa.masks.

    A mask belongs to no context, and its reference count in the library is
    atomic (plans on any thread hold references to it), so the finalizer
    releases it without a lock: a plan that uses the mask keeps its own
    reference, and a Plan object keeps its Mask objects too."""

    __slots__ = ("_handle", "_finalizer", "description", "geometry", "shape",
                 "__weakref__")

    def __init__(self, handle, description, geometry=None, shape=None):
        self._handle = handle
        self._finalizer = weakref.finalize(self, lib.stsa_mask_free, handle)
        self.description = description
        self.geometry = geometry  # a Geometry for video masks, else None
        self.shape = shape        # (s_q, s_kv) for masks of fixed size, else None

    @property
    def handle(self):
        return self._handle

    def keep(self, i, j):
        """True if the pair (query i, key j), native indices, is kept."""
        return bool(lib.stsa_mask_keep(self._handle, as_int(i, "i"), as_int(j, "j")))

    def to_dense(self, s_q, s_kv=None):
        """The mask as a numpy bool array [s_q, s_kv] (one C call per pair:
        for inspection and tests on small sizes)."""
        s_q = as_int(s_q, "s_q", (0, INT64[1]))
        s_kv = s_q if s_kv is None else as_int(s_kv, "s_kv", (0, INT64[1]))
        keep = lib.stsa_mask_keep
        h = self._handle
        return np.array([[keep(h, i, j) for j in range(s_kv)] for i in range(s_q)],
                        dtype=bool).reshape(s_q, s_kv)

    def equals(self, other):
        """Structural equality (equal masks share plans)."""
        if not isinstance(other, Mask):
            raise TypeError(f"equals: other must be an stsa.Mask, got {type(other).__name__}")
        return bool(lib.stsa_mask_equal(self._handle, other._handle))

    def _combine(self, other, fn_name, op):
        if not isinstance(other, Mask):
            return NotImplemented
        geometry = self.geometry or other.geometry
        if self.geometry and other.geometry and self.geometry != other.geometry:
            raise ValueError(f"cannot combine masks of different geometries: "
                             f"{self.geometry} and {other.geometry}")
        shape = self.shape or other.shape
        if self.shape and other.shape and self.shape != other.shape:
            raise ValueError(f"cannot combine masks of shapes {self.shape} and {other.shape}")
        return _make(fn_name, f"({self.description} {op} {other.description})",
                     self._handle, other._handle, geometry=geometry, shape=shape)

    def __and__(self, other):
        return self._combine(other, "stsa_mask_and", "&")

    def __or__(self, other):
        return self._combine(other, "stsa_mask_or", "|")

    def __repr__(self):
        return f"<stsa.Mask {self.description}>"


def _geometry(g, who):
    if isinstance(g, str):
        g = Geometry.preset(g)
    if not isinstance(g, Geometry):
        raise TypeError(f"{who}: geometry must be an stsa.Geometry or a preset name, got "
                        f"{type(g).__name__}")
    return g


def full():
    """Every pair."""
    return _make("stsa_mask_full", "full()")


def causal(offset=0):
    """j <= i + offset."""
    return _make("stsa_mask_causal", f"causal({offset})", as_int(offset, "offset"))


def local(left=None, right=None):
    """i - left <= j <= i + right; None leaves a side unbounded."""
    lo = lib.STSA_UNBOUNDED if left is None else as_int(left, "left")
    hi = lib.STSA_UNBOUNDED if right is None else as_int(right, "right")
    return _make("stsa_mask_local", f"local({left}, {right})", lo, hi)


def chunked_causal(chunk):
    """j <= i and i // chunk == j // chunk."""
    return _make("stsa_mask_chunked_causal", f"chunked_causal({chunk})",
                 as_int(chunk, "chunk"))


def frame_window(geometry, w):
    """Video pairs with |f_i - f_j| <= w (a spatial head)."""
    g = _geometry(geometry, "frame_window")
    return _make("stsa_mask_frame_window", f"frame_window({w})", g.c(), as_int(w, "w"),
                 geometry=g)


def spatial_window(geometry, a, b):
    """Video pairs with |y_i - y_j| <= a and |x_i - x_j| <= b, any frames."""
    g = _geometry(geometry, "spatial_window")
    return _make("stsa_mask_spatial_window", f"spatial_window({a}, {b})",
                 g.c(), as_int(a, "a"), as_int(b, "b"), geometry=g)


def position_band(geometry, w):
    """Video pairs within w of each other in position-major order (a temporal
    head): |(p_i*F + f_i) - (p_j*F + f_j)| <= w."""
    g = _geometry(geometry, "position_band")
    return _make("stsa_mask_position_band", f"position_band({w})", g.c(), as_int(w, "w"),
                 geometry=g)


def sink_frames(geometry, n=1):
    """Every real query sees the video keys of frames < n."""
    g = _geometry(geometry, "sink_frames")
    return _make("stsa_mask_sink_frames", f"sink_frames({n})", g.c(), as_int(n, "n"),
                 geometry=g)


def text(geometry):
    """Text rules: real text rows see every real token, every real row sees
    the real text columns, padding text sees only padding."""
    g = _geometry(geometry, "text")
    return _make("stsa_mask_text", "text()", g.c(), geometry=g)


def _segment_ids(ids, name):
    """1-D integer ids as int32, checked before the cast (which would wrap
    an id outside int32 and truncate a float)."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError("segments: q_seg and k_seg must be 1-D")
    if arr.size == 0:
        raise ValueError(f"segments: {name} is empty: a mask needs at least one token")
    if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise TypeError(f"segments: {name} must be integers, got {arr.dtype}")
    for bad in (arr.min(), arr.max()):
        if not INT32[0] <= bad <= INT32[1]:
            raise ValueError(f"segments: {name} holds {bad}, outside int32")
    return np.ascontiguousarray(arr, dtype=np.int32)


def segments(q_seg, k_seg=None):
    """q_seg[i] == k_seg[j] (k_seg defaults to q_seg); int32 ids, copied."""
    q = _segment_ids(q_seg, "q_seg")
    k = q if k_seg is None else _segment_ids(k_seg, "k_seg")
    return _make("stsa_mask_segments", f"segments([{q.size}], [{k.size}])",
                 pointer(q, "int32_t"), q.size, pointer(k, "int32_t"), k.size,
                 shape=(q.size, k.size))


def dense(keep):
    """An explicit boolean mask [s_q, s_kv] (True = keep), copied."""
    arr = np.asarray(keep)
    if arr.ndim != 2:
        raise ValueError(f"dense: mask must be 2-D [s_q, s_kv], got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"dense: the mask is empty (shape {arr.shape}): it needs at least "
                         f"one query and one key")
    arr = np.ascontiguousarray(arr != 0, dtype=np.uint8)
    return _make("stsa_mask_dense", f"dense([{arr.shape[0]}, {arr.shape[1]}])",
                 pointer(arr, "uint8_t"), arr.shape[0], arr.shape[1],
                 shape=arr.shape)


def _labels(labels, clusters, who):
    """1-D int32 labels in [-1, clusters): checked before the cast, so a
    label outside int32 is an error, not a wrapped value."""
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"clusters: {who} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"clusters: {who} must be integers, got {arr.dtype}")
    if arr.size and (arr.min() < -1 or arr.max() >= clusters):
        raise ValueError(f"clusters: {who} must lie in [-1, {clusters}) (-1: no cluster), "
                         f"got [{arr.min()}, {arr.max()}]")
    return np.ascontiguousarray(arr, dtype=np.int32)


def clusters(q_labels, q_clusters, k_labels, kv_clusters, keep):
    """Cluster rectangles (Sparse VideoGen 2): (i, j) is kept iff
    keep[q_labels[i], k_labels[j]]. Labels are int32 in [0, q_clusters) and
    [0, kv_clusters), or -1 for a token no cluster holds (text: combine with
    masks.text), which this mask never keeps; keep is a bool/uint8 array
    [q_clusters, kv_clusters] (nonzero = keep). Arrays copied
    (stsa_mask_clusters)."""
    qc = as_int(q_clusters, "q_clusters")
    kc = as_int(kv_clusters, "kv_clusters")
    q = _labels(q_labels, qc, "q_labels")
    k = _labels(k_labels, kc, "k_labels")
    arr = np.asarray(keep)
    if arr.shape != (qc, kc):
        raise ValueError(f"clusters: keep must be [q_clusters, kv_clusters] = [{qc}, {kc}], "
                         f"got shape {arr.shape}")
    arr = np.ascontiguousarray(arr != 0, dtype=np.uint8)
    return _make("stsa_mask_clusters",
                 f"clusters([{q.size}], {qc}, [{k.size}], {kc})",
                 pointer(q, "int32_t"), q.size, qc, pointer(k, "int32_t"), k.size, kc,
                 pointer(arr, "uint8_t"), shape=(q.size, k.size))
