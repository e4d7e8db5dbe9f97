"""Masks, plans and stsa.sparse_attention against numpy definitions."""

import numpy as np
import pytest

import reference as ref
import stsa
from stsa import masks

# 3 frames of 4 x 5 tokens plus 6 text tokens (4 real): N = 66, no tile multiple
GEOS = {
    "suffix": dict(frames=3, height=4, width=5, text=6, text_real=4, text_pos="suffix"),
    "prefix": dict(frames=3, height=4, width=5, text=6, text_real=6, text_pos="prefix"),
    "video": dict(frames=4, height=3, width=4),
}


def geo(name):
    return stsa.Geometry(**GEOS[name]), ref.tokens(**GEOS[name])


@pytest.mark.parametrize("name", sorted(GEOS))
def test_video_masks_match_their_definitions(name):
    g, t = geo(name)
    n = g.tokens
    cases = [
        (masks.frame_window(g, 1), ref.frame_window(t, 1)),
        (masks.spatial_window(g, 1, 2), ref.spatial_window(t, 1, 2)),
        (masks.position_band(g, 5), ref.position_band(t, 5)),
        (masks.sink_frames(g, 1), ref.sink_frames(t, 1)),
        (masks.text(g), ref.text(t)),
    ]
    for mask, want in cases:
        assert np.array_equal(mask.to_dense(n), want), mask


def test_index_masks_and_combinators():
    s_q, s_kv = 23, 31
    assert np.array_equal(masks.causal(3).to_dense(s_q, s_kv), ref.causal(s_q, s_kv, 3))
    assert np.array_equal(masks.local(2, None).to_dense(s_q, s_kv),
                          ref.local(s_q, s_kv, 2, None))
    assert np.array_equal(masks.local(4, 1).to_dense(s_q, s_kv), ref.local(s_q, s_kv, 4, 1))
    assert np.array_equal(masks.chunked_causal(5).to_dense(s_q, s_kv),
                          ref.chunked_causal(s_q, s_kv, 5))
    both = masks.causal() & masks.local(3, 0)
    either = masks.causal(-4) | masks.local(0, 2)
    assert np.array_equal(both.to_dense(s_q, s_kv),
                          ref.causal(s_q, s_kv) & ref.local(s_q, s_kv, 3, 0))
    assert np.array_equal(either.to_dense(s_q, s_kv),
                          ref.causal(s_q, s_kv, -4) | ref.local(s_q, s_kv, 0, 2))
    assert masks.full().to_dense(3, 4).all()
    assert masks.causal(1).equals(masks.causal(1)) and not masks.causal(1).equals(
        masks.causal(2))


def test_segments_and_dense_masks():
    rng = np.random.default_rng(0)
    q_seg = rng.integers(0, 3, 17)
    k_seg = rng.integers(0, 3, 29)
    seg = masks.segments(q_seg, k_seg)
    assert np.array_equal(seg.to_dense(17, 29), q_seg[:, None] == k_seg[None, :])
    keep = rng.random((17, 29)) < 0.3
    assert np.array_equal(masks.dense(keep).to_dense(17, 29), keep)


def _cluster_case(s_q=37, s_kv=41, qc=4, kc=6, seed=1):
    """Labels with some -1 (tokens in no cluster) and a random keep map."""
    rng = np.random.default_rng(seed)
    q_lab = rng.integers(-1, qc, s_q).astype(np.int32)
    k_lab = rng.integers(-1, kc, s_kv).astype(np.int32)
    keep = rng.random((qc, kc)) < 0.5
    want = (q_lab[:, None] >= 0) & (k_lab[None, :] >= 0) & keep[q_lab[:, None], k_lab[None, :]]
    return q_lab, k_lab, keep, want


def test_cluster_mask_matches_its_definition():
    q_lab, k_lab, keep, want = _cluster_case()
    m = masks.clusters(q_lab, 4, k_lab, 6, keep)
    assert np.array_equal(m.to_dense(37, 41), want)
    assert m.shape == (37, 41)
    assert (q_lab < 0).any() and (k_lab < 0).any()
    i, j = np.argwhere(want)[0]
    assert m.keep(i, j) and not m.keep(int(np.argmax(q_lab < 0)), j)  # -1: never kept
    # uint8 keep and int64 labels give the same (structurally equal) mask
    same = masks.clusters(q_lab.astype(np.int64), 4, k_lab, 6, keep.astype(np.uint8) * 7)
    assert same.equals(m)
    with pytest.raises(ValueError, match=r"keep must be \[q_clusters, kv_clusters\]"):
        masks.clusters(q_lab, 4, k_lab, 6, keep.T)
    with pytest.raises(ValueError, match=r"q_labels must lie in \[-1, 3\)"):
        masks.clusters(q_lab, 3, k_lab, 6, keep[:3])
    with pytest.raises(ValueError, match="k_labels must be 1-D"):
        masks.clusters(q_lab, 4, k_lab[None], 6, keep)


def test_cluster_plan_and_sparse_attention_equal_the_dense_mask(threads):
    n = 53
    q_lab, k_lab, keep, _ = _cluster_case(n, n, 5, 7, seed=4)
    # every query in a cluster and key 0 in cluster 0, kept by all: no empty rows
    q_lab[q_lab < 0] = 1
    k_lab[0] = 0
    keep[:, 0] = True
    want = (k_lab[None, :] >= 0) & keep[q_lab[:, None], k_lab[None, :]]
    m = masks.clusters(q_lab, 5, k_lab, 7, keep)
    q, k, v = _qkv(n, h=2, d=16, seed=9)
    plan = stsa.Plan(m, n, heads=2, q_tile=16, kv_tile=16)
    assert plan.stats.pairs_kept == 2 * want.sum()
    got = stsa.sparse_attention(q, k, v, plan=plan, layout="bshd", threads=threads)
    same = stsa.sparse_attention(q, k, v, mask=masks.dense(want), layout="bshd",
                                 threads=threads)
    np.testing.assert_allclose(got, same, atol=1e-6)
    ref_out, _ = ref.attention(q, k, v, keep=want)
    np.testing.assert_allclose(got, ref_out, atol=2e-5)


def _qkv(n, h=3, d=32, seed=0, dtype=np.float32):
    return (ref.rand((2, n, h, d), dtype, seed), ref.rand((2, n, h, d), dtype, seed + 1),
            ref.rand((2, n, h, d), dtype, seed + 2))


@pytest.mark.parametrize("mode", ["exact", "naive"])
@pytest.mark.parametrize("name", ["suffix", "prefix"])
def test_sparse_attention_matches_masked_reference(mode, name, threads):
    g, t = geo(name)
    spatial = (masks.frame_window(g, 0) | masks.sink_frames(g, 1)) | masks.text(g)
    temporal = (masks.position_band(g, 4) | masks.sink_frames(g, 1)) | masks.text(g)
    keep = ref.frame_window(t, 0) | ref.sink_frames(t, 1) | ref.text(t)
    keep_t = ref.position_band(t, 4) | ref.sink_frames(t, 1) | ref.text(t)
    # padding text keeps padding only; the geometry has rows for all of them
    q, k, v = _qkv(g.tokens)
    out, lse = stsa.sparse_attention(q, k, v, mask=[spatial, temporal, spatial], mode=mode,
                                     return_lse=True, threads=threads, layout="bshd")
    want, want_lse = ref.attention(q, k, v, keep=np.stack([keep, keep_t, keep]))
    np.testing.assert_allclose(out, want, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5)


def test_exact_and_naive_are_bitwise_equal_and_orders_do_not_change_pairs():
    g, t = geo("video")
    band = masks.position_band(g, 3) | masks.sink_frames(g, 1)
    q, k, v = _qkv(g.tokens, h=2, d=24)
    exact = stsa.sparse_attention(q, k, v, mask=band, mode="exact", layout="bshd")
    naive = stsa.sparse_attention(q, k, v, mask=band, mode="naive", layout="bshd")
    assert np.array_equal(exact, naive)
    plan = stsa.Plan(band, g.tokens, heads=2, q_order="position_major",
                     kv_order="sink_first")
    permuted = stsa.sparse_attention(q, k, v, plan=plan, layout="bshd")
    np.testing.assert_allclose(permuted, exact, atol=2e-6)
    want, _ = ref.attention(q, k, v, keep=ref.position_band(t, 3) | ref.sink_frames(t, 1))
    np.testing.assert_allclose(exact, want, atol=2e-5)


def test_plan_is_reused_and_reports_stats(threads):
    g, t = geo("video")
    window = masks.frame_window(g, 1)
    # 24 query rows: a multiple of every backend's register tile (6 or 12 rows),
    # which would round other sizes up
    plan = stsa.Plan([window, window, masks.full()], g.tokens, q_tile=24, kv_tile=16)
    st = plan.stats
    keep = ref.frame_window(t, 1)
    assert st.pairs_total == 3 * g.tokens ** 2
    assert st.pairs_kept == 2 * keep.sum() + g.tokens ** 2
    assert st.distinct_masks == 2
    assert st.q_tiles == -(-g.tokens // 24) and st.kv_tiles == -(-g.tokens // 16)
    assert 0 < st.tiles_active <= st.tiles_total
    assert plan.tile_kind(2, 0, 0) == "full"
    assert plan.geometry == g  # taken from the masks
    out_bshd = None
    for layout in ("bshd", "bhsd"):
        q, k, v = _qkv(g.tokens, d=16, seed=5)
        if layout == "bhsd":
            q, k, v = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (q, k, v))
        out = stsa.sparse_attention(q, k, v, plan=plan, layout=layout, threads=threads)
        if layout == "bhsd":
            assert np.array_equal(out.transpose(0, 2, 1, 3), out_bshd)
        else:
            out_bshd = out
    want, _ = ref.attention(*_qkv(g.tokens, d=16, seed=5),
                            keep=np.stack([keep, keep, np.ones_like(keep)]))
    np.testing.assert_allclose(out_bshd, want, atol=2e-5)


def test_out_and_plain_sequence_masks(threads):
    s = 45
    q, k, v = _qkv(s, h=2, d=16)
    out = np.empty_like(q)
    got = stsa.sparse_attention(q, k, v, mask=masks.causal() & masks.local(7, 0), out=out,
                                threads=threads, layout="bshd")
    assert got is out
    want, _ = ref.attention(q, k, v, keep=ref.causal(s, s) & ref.local(s, s, 7, 0))
    np.testing.assert_allclose(out, want, atol=2e-5)


def test_tile_rounded_is_lossy_but_close():
    g, t = geo("video")
    q, k, v = _qkv(g.tokens, h=2, d=16)
    mask = masks.frame_window(g, 1)
    exact = stsa.sparse_attention(q, k, v, mask=mask, layout="bshd")
    rounded = stsa.sparse_attention(q, k, v, mask=mask, mode="tile-rounded", layout="bshd")
    assert np.isfinite(rounded).all() and rounded.shape == exact.shape


def test_empty_rows():
    s = 20
    q, k, v = _qkv(s, h=1, d=8)
    keep = np.ones((s, s), dtype=bool)
    keep[3] = False
    with pytest.raises(ValueError) as e:
        stsa.sparse_attention(q, k, v, mask=masks.dense(keep), layout="bshd")
    assert e.value.status_name == stsa._lib.status_name(stsa._lib.lib.STSA_ERR_EMPTY_ROW)
    out, lse = stsa.sparse_attention(q, k, v, mask=masks.dense(keep), allow_empty_rows=True,
                                     return_lse=True, layout="bshd")
    assert (out[:, 3] == 0).all() and np.isneginf(lse[:, :, 3]).all()


def test_plan_errors_carry_the_c_message():
    g, _ = geo("video")
    q, k, v = _qkv(g.tokens + 1, h=2, d=8)
    with pytest.raises(ValueError, match=r"^plan: s_q = 49 and s_kv = 49, but the geometry "
                                         r"has 48 tokens$"):
        stsa.sparse_attention(q, k, v, mask=masks.frame_window(g, 1), layout="bshd")
    with pytest.raises(ValueError, match="exactly one of mask= and plan="):
        stsa.sparse_attention(q, k, v, layout="bshd")
    with pytest.raises(ValueError, match="mode 'fast' is not one of"):
        stsa.sparse_attention(q, k, v, mask=masks.full(), mode="fast", layout="bshd")
    with pytest.raises(ValueError, match=r"^frame_window\(-1\): "):
        masks.frame_window(g, -1)
    with pytest.raises(ValueError, match="2 masks for 3 heads"):
        stsa.Plan([masks.full()] * 2, 10, heads=3)


def test_geometry_helpers():
    g = stsa.Geometry.from_video(480, 832, 81)
    assert (g.frames, g.height, g.width, g.tokens) == (21, 30, 52, 32760)
    assert stsa.Geometry.preset("wan21-480p") == g
    small = stsa.Geometry(2, 2, 3)
    perm = small.permutation("position_major")
    assert list(perm[:4]) == [0, 6, 1, 7]  # j = p*F + f -> native f*P + p
    with pytest.raises(ValueError, match="text > 0 needs text_pos"):
        stsa.Geometry(2, 2, 2, text=3, text_pos="none")


@pytest.mark.parametrize("order", ["position_major", "sink_first"])
def test_permute_tokens_matches_the_permutation(order):
    g = stsa.Geometry(3, 2, 4, text=2, text_pos="prefix")
    x = ref.rand((2, g.tokens, 3, 8), np.float32, 0)
    perm = g.permutation(order)
    moved = stsa.permute_tokens(x, g, order, layout="bshd")
    assert np.array_equal(moved, x[:, perm])
    back = stsa.permute_tokens(moved, g, order, inverse=True, layout="bshd")
    assert np.array_equal(back, x)
    xb = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    assert np.array_equal(stsa.permute_tokens(xb, g, order, layout="bhsd"),
                          xb[:, :, perm])
