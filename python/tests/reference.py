"""Test oracles in plain numpy (float64): attention and every mask, written
from the definitions in include/stsa.h, independently of the library."""

import numpy as np

# tolerances on outputs of magnitude ~1, by output dtype: f32 accumulation
# error, or the rounding of the output to the dtype's mantissa
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def to_bshd(x, layout):
    x = np.asarray(x, dtype=np.float64)
    if layout == "bhsd":
        return x.transpose(0, 2, 1, 3)
    if layout == "shd":
        return x[None]
    return x


def from_bshd(x, layout):
    if layout == "bhsd":
        return x.transpose(0, 2, 1, 3)
    if layout == "shd":
        return x[0]
    return x


def attention(q, k, v, layout="bshd", scale=None, keep=None):
    """Softmax attention in float64. keep: optional bool mask [S_q, S_kv] or
    [H, S_q, S_kv]. Returns (out in `layout`, lse [B, H, S_q])."""
    q, k, v = (to_bshd(a, layout) for a in (q, k, v))
    D = q.shape[-1]
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if keep is not None:
        keep = np.asarray(keep, dtype=bool)
        if keep.ndim == 2:
            keep = keep[None]
        s = np.where(keep[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    denom = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = (np.log(denom) + m)[..., 0]
        out = np.einsum("bhqk,bkhd->bqhd", np.where(denom > 0, p / denom, 0.0), v)
    return from_bshd(out, layout), lse


def rand(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------ masks
def tokens(frames, height, width, text=0, text_real=None, text_pos="none"):
    """Per native token: kind (0 video, 1 real text, 2 padding text), f, y,
    x, p (numpy int arrays)."""
    text_real = text if text_real is None else text_real
    P = height * width
    L = frames * P
    N = text + L
    v0 = text if text_pos == "prefix" else 0
    t0 = 0 if text_pos == "prefix" else L
    i = np.arange(N)
    video = (i >= v0) & (i < v0 + L)
    vi = np.where(video, i - v0, 0)
    kind = np.where(video, 0, np.where(i - t0 < text_real, 1, 2))
    p = vi % P if P else vi
    return dict(kind=kind, f=vi // P if P else vi, p=p, y=p // width if width else p,
                x=p % width if width else p, F=frames)


def _pairs(t):
    vv = (t["kind"][:, None] == 0) & (t["kind"][None, :] == 0)
    return vv, lambda a: a[:, None], lambda a: a[None, :]


def frame_window(t, w):
    vv, r, c = _pairs(t)
    return vv & (np.abs(r(t["f"]) - c(t["f"])) <= w)


def spatial_window(t, a, b):
    vv, r, c = _pairs(t)
    return vv & (np.abs(r(t["y"]) - c(t["y"])) <= a) & (np.abs(r(t["x"]) - c(t["x"])) <= b)


def position_band(t, w):
    vv, r, c = _pairs(t)
    j = t["p"] * t["F"] + t["f"]
    return vv & (np.abs(r(j) - c(j)) <= w)


def sink_frames(t, n):
    real_row = (t["kind"] == 0) | (t["kind"] == 1)
    video_col = t["kind"] == 0
    return real_row[:, None] & (video_col & (t["f"] < n))[None, :]


def text(t):
    k = t["kind"]
    real = (k == 0) | (k == 1)
    return ((k == 1)[:, None] & real[None, :]) | (real[:, None] & (k == 1)[None, :]) | \
        ((k == 2)[:, None] & (k == 2)[None, :])


def causal(s_q, s_kv, offset=0):
    return np.arange(s_kv)[None, :] <= np.arange(s_q)[:, None] + offset


def local(s_q, s_kv, left, right):
    i, j = np.arange(s_q)[:, None], np.arange(s_kv)[None, :]
    keep = np.ones((s_q, s_kv), dtype=bool)
    if left is not None:
        keep &= j >= i - left
    if right is not None:
        keep &= j <= i + right
    return keep


def chunked_causal(s_q, s_kv, chunk):
    i, j = np.arange(s_q)[:, None], np.arange(s_kv)[None, :]
    return (j <= i) & (i // chunk == j // chunk)
