"""Dense and block-sparse attention on numpy arrays and CPU torch tensors.

Both functions take q, k, v in one of three layouts, named by the required
keyword layout= (there is no default: [B, S, H, D] and [B, H, S, D] arrays
of equal sizes look alike, and a guessed layout would give a wrong result
without an error), and return an array of q's kind (numpy or torch), q's
dtype and the same layout:

    "bshd"  [B, S, H, D]   diffusers, the C API's logical order
    "bhsd"  [B, H, S, D]   torch.nn.functional.scaled_dot_product_attention
    "shd"   [S, H, D]      one sequence (FlashInfer)

Nothing is copied for arrays the C API can describe: any positive strides,
so transposed and sliced views go in as they are. q, k and v may have
different dtypes (float32, float16, bfloat16). The GIL is released while the
library computes.
"""

import dataclasses
import weakref

from . import _core, _lib
from ._core import check
from ._lib import ffi, lib
from .geometry import Geometry
from .masks import Mask

__all__ = ["attention", "sparse_attention", "Plan", "PlanStats", "permute_tokens"]


def _out_and_lse(qv, vv, layout, out, return_lse):
    """The output view (allocated in q's kind, dtype and layout unless given)
    and the optional lse array ([B, H, S_q]; [H, S_q] for "shd")."""
    B, S, H = qv.tensor.shape[0], qv.tensor.shape[1], qv.tensor.shape[2]
    D = vv.tensor.shape[3]
    shape = {"bshd": (B, S, H, D), "bhsd": (B, H, S, D), "shd": (S, H, D)}[layout]
    if out is None:
        out = _core.empty_like_layout(qv.array, shape)
    else:
        _core.check_array(out, "out")
    if tuple(out.shape) != shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {shape} "
                         f"({layout} of q's tokens and heads, v's head dim)")
    ov = _core.view(out, "out", layout, output=True)
    lse = None
    if return_lse:
        lse = _core.empty_f32(qv.array, (H, S) if layout == "shd" else (B, H, S))
    return out, ov, lse


def _result(out, lse, return_lse):
    return (out, lse) if return_lse else out


def attention(q, k, v, *, layout=_core.REQUIRED, scale=None, return_lse=False, out=None,
              threads=None, ctx=None):
    """Dense attention: softmax(scale * q k^T) v per batch and head.

    layout (required keyword): "bshd" ([B, S, H, D]), "bhsd" ([B, H, S, D],
    SDPA's) or "shd" ([S, H, D]); q: S_q tokens, k and v: S_kv tokens.
    scale: None for 1/sqrt(D). out: an array to write into (any supported
    dtype, any positive strides), returned as is. return_lse: also return the
    natural-log log-sum-exp of each row, float32 [B, H, S_q]. threads: worker
    threads for this call (default: all CPUs). ctx: an stsa.Context.
    Errors raise stsa.Error (a ValueError / TypeError) with the library's
    message."""
    _core.check_layout(layout, "stsa.attention")
    qv = _core.view(q, "q", layout)
    kv = _core.view(k, "k", layout)
    vv = _core.view(v, "v", layout)
    out, ov, lse = _out_and_lse(qv, vv, layout, out, return_lse)
    opts = _lib.new("stsa_attn_opts", scale=_core.scale_value(scale),
                    lse=_core.pointer(lse) if lse is not None else ffi.NULL)
    ctx = _core.context(ctx)
    with _core.threads_set(ctx, threads) as handle:
        status = lib.stsa_attention(handle, qv.tensor, kv.tensor, vv.tensor, ov.tensor, opts)
        check(status, handle, "stsa_attention")
    return _result(out, lse, return_lse)


# ------------------------------------------------------------------ plans


@dataclasses.dataclass(frozen=True)
class PlanStats:
    """stsa_plan_stats: tile grid, visited tiles and kept pairs of a plan."""
    q_tiles: int
    kv_tiles: int
    tiles_total: int
    tiles_active: int
    tiles_partial: int
    pairs_total: int
    pairs_kept: int
    distinct_masks: int
    distinct_partials: int

    @property
    def density(self):
        """Kept fraction of pairs."""
        return self.pairs_kept / self.pairs_total if self.pairs_total else 0.0

    @property
    def tile_density(self):
        """Visited fraction of tiles."""
        return self.tiles_active / self.tiles_total if self.tiles_total else 0.0


def _mask_list(masks, heads, who):
    if heads is not None:
        heads = _core.as_int(heads, "heads", (1, _core.INT64[1]))
    if isinstance(masks, Mask):
        if heads is None:
            raise ValueError(f"{who}: one mask for all heads needs heads=")
        return [masks] * heads
    try:
        masks = list(masks)
    except TypeError:  # not iterable
        masks = []
    if not masks or not all(isinstance(m, Mask) for m in masks):
        raise TypeError(f"{who}: masks must be a Mask or a non-empty list of Masks "
                        f"(one per head)")
    if heads is not None and heads != len(masks):
        raise ValueError(f"{who}: {len(masks)} masks for {heads} heads")
    return masks


def _geometry(geometry, who):
    """A Geometry of a Geometry or a preset name."""
    if isinstance(geometry, str):
        return Geometry.preset(geometry)
    if not isinstance(geometry, Geometry):
        raise TypeError(f"{who}: geometry must be an stsa.Geometry or a preset name, got "
                        f"{type(geometry).__name__}")
    return geometry


def _tile(value, name, who):
    """A plan's q_tile / kv_tile: None is the context's (0 in the C API,
    which is why 0 itself is refused rather than silently the default)."""
    if value is None:
        return 0
    n = _core.as_int(value, name, _core.INT32)
    if n == 0:
        raise _core.StsaValueError(
            f"{who}: {name} = 0 is not a tile size: the library reads 0 as the default "
            f"(the context's tile); pass {name}=None for that", lib.STSA_ERR_BAD_PARAM)
    return n


class Plan(_core.NativeHandle):
    """The block structure of per-head masks, built once and reused.

    masks: a Mask (with heads=) or a list of one Mask per head.
    s_q, s_kv: query and key lengths (both N = geometry.tokens for video).
    geometry: needed by video masks; taken from the masks when None.
    q_order, kv_order: the token order the kernel walks ("native",
    "position_major"; keys also "sink_first"); tokens stay in native order
    in memory, the permutation is fused into the kernel's gathers.
    q_tile, kv_tile: tile sizes (None: the context's).
    allow_empty_rows: rows that keep nothing give 0 and lse -inf instead of
    an error.
    ctx: the context that builds the plan (None: this thread's default). The
    context's plan cache shares the plan, so the Plan keeps the context
    alive and its finalizer releases the plan under the context's lock (the
    same lock as every call on that context).
    """

    def __init__(self, masks, s_q, s_kv=None, geometry=None, q_order="native",
                 kv_order="native", heads=None, q_tile=None, kv_tile=None,
                 allow_empty_rows=False, ctx=None):
        self.masks = _mask_list(masks, heads, "Plan")
        self.heads = len(self.masks)
        self.s_q = _core.as_int(s_q, "s_q")
        self.s_kv = self.s_q if s_kv is None else _core.as_int(s_kv, "s_kv")
        if geometry is None:
            geometry = next((m.geometry for m in self.masks if m.geometry), None)
        else:
            geometry = _geometry(geometry, "Plan")
        self.geometry = geometry
        for name, order in (("q_order", q_order), ("kv_order", kv_order)):
            _core.choice(order, _lib.ORDERS, name)
        self.q_order, self.kv_order = q_order, kv_order
        # handles and g stay referenced here while desc points to them
        handles = ffi.new("stsa_mask *[]", [m.handle for m in self.masks])
        g = geometry.c() if geometry is not None else ffi.NULL
        desc = _lib.new(
            "stsa_plan_desc", s_q=self.s_q, s_kv=self.s_kv, heads=self.heads, masks=handles,
            geometry=g, q_order=_lib.ORDERS[q_order], kv_order=_lib.ORDERS[kv_order],
            q_tile=_tile(q_tile, "q_tile", "stsa.Plan"),
            kv_tile=_tile(kv_tile, "kv_tile", "stsa.Plan"),
            flags=lib.STSA_PLAN_ALLOW_EMPTY_ROWS if allow_empty_rows else 0)
        ctx = _core.context(ctx)
        handle = ffi.new("stsa_plan **")
        with ctx.lock:
            c = ctx.handle
            check(lib.stsa_plan_build(c, desc, handle), c, "stsa_plan_build")
        handle = handle[0]
        self._handle = handle
        self.context = ctx
        # The finalizer holds the context (so it outlives the plan) and frees
        # under its lock: the context's cache holds a reference to the same
        # plan and updates the count during builds on that context.
        self._finalizer = weakref.finalize(self, _free_plan, handle, ctx)

    @property
    def handle(self):
        return self._handle

    @property
    def stats(self):
        s = _lib.new("stsa_plan_stats")
        check(lib.stsa_plan_get_stats(self._handle, s), what="stsa_plan_get_stats")
        return PlanStats(**{f.name: getattr(s, f.name) for f in dataclasses.fields(PlanStats)})

    def tile_kind(self, head, q_tile, kv_tile):
        """'empty', 'partial' or 'full' for tile (q_tile, kv_tile) of a head."""
        kind = lib.stsa_plan_tile_kind(self._handle, _core.as_int(head, "head"),
                                       _core.as_int(q_tile, "q_tile"),
                                       _core.as_int(kv_tile, "kv_tile"))
        return ("empty", "partial", "full")[kind] if 0 <= kind <= 2 else "empty"

    def __repr__(self):
        st = self.stats
        return (f"<stsa.Plan heads={self.heads} s_q={self.s_q} s_kv={self.s_kv} "
                f"tiles {st.tiles_active}/{st.tiles_total} active, "
                f"density {st.density:.3f}>")


def _free_plan(handle, ctx):
    with ctx.lock:
        lib.stsa_plan_free(handle)


def sparse_attention(q, k, v, *, layout=_core.REQUIRED, mask=None, plan=None, mode="exact",
                     scale=None, return_lse=False, out=None, threads=None, geometry=None,
                     q_order="native", kv_order="native", allow_empty_rows=False,
                     ctx=None):
    """Block-sparse attention under a mask (or a prebuilt Plan).

    mask: a Mask for every head or a list of one Mask per head; a Plan is
    built for this call (pass plan= to build once and reuse it).
    plan: an stsa.Plan; S_q, S_kv and H of q, k, v must match it.
    mode: "exact" (mask only on boundary tiles), "naive" (mask evaluated on
    every visited tile; same result) or "tile-rounded" (lossy: partial tiles
    kept whole or dropped).
    layout (required) and the other arguments as for stsa.attention. Tokens
    are in native order."""
    _core.check_layout(layout, "stsa.sparse_attention")
    if (mask is None) == (plan is None):
        raise ValueError("sparse_attention: pass exactly one of mask= and plan=")
    _core.choice(mode, _lib.SPARSE_MODES, "mode")
    qv = _core.view(q, "q", layout)
    kv = _core.view(k, "k", layout)
    vv = _core.view(v, "v", layout)
    ctx = _core.context(ctx)
    if plan is None:
        plan = Plan(mask, qv.tensor.shape[1], kv.tensor.shape[1], geometry=geometry,
                    q_order=q_order, kv_order=kv_order,
                    heads=qv.tensor.shape[2] if isinstance(mask, Mask) else None,
                    allow_empty_rows=allow_empty_rows, ctx=ctx)
    elif not isinstance(plan, Plan):
        raise TypeError(f"plan must be an stsa.Plan, got {type(plan).__name__}")
    out, ov, lse = _out_and_lse(qv, vv, layout, out, return_lse)
    opts = _lib.new("stsa_sparse_opts", scale=_core.scale_value(scale),
                    lse=_core.pointer(lse) if lse is not None else ffi.NULL,
                    mode=_lib.SPARSE_MODES[mode])
    with _core.threads_set(ctx, threads) as handle:
        status = lib.stsa_sparse_attention(handle, plan.handle, qv.tensor, kv.tensor,
                                           vv.tensor, ov.tensor, opts)
        check(status, handle, "stsa_sparse_attention")
    return _result(out, lse, return_lse)


def permute_tokens(x, geometry, order, inverse=False, *, layout=_core.REQUIRED, out=None):
    """Tokens of x reordered from native order to `order` ("native",
    "position_major", "sink_first"), or back with inverse=True
    (stsa_permute_tokens). x: [B, N, H, D] in `layout` (required: "bshd",
    "bhsd" or "shd"), N = geometry.tokens;
    the result has x's kind, dtype and layout (or is `out`). The sparse
    kernels fuse this permutation into their gathers; this copy is for
    inspection and for callers that want permuted tensors."""
    geometry = _geometry(geometry, "stsa.permute_tokens")
    _core.check_layout(layout, "stsa.permute_tokens")
    _core.choice(order, _lib.ORDERS, "order")
    xv = _core.view(x, "x", layout)
    if out is None:
        out = _core.empty_like_layout(xv.array, tuple(x.shape))
    ov = _core.view(out, "out", layout, output=True)
    status = lib.stsa_permute_tokens(geometry.c(), _lib.ORDERS[order],
                                     1 if inverse else 0, xv.tensor, ov.tensor)
    check(status, what="stsa_permute_tokens")
    return out
