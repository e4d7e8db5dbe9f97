"""stsa.SVG and stsa.workload on a small geometry."""

import numpy as np
import pytest

import reference as ref
import stsa

GEO = dict(frames=6, height=6, width=8)  # P = 48, N = 288
H, D = 4, 32


@pytest.fixture(scope="module")
def data():
    g = stsa.Geometry(**GEO)
    q, k, v, kinds = stsa.workload(g, H, D, seed=1)
    return g, q, k, v, kinds


def test_workload(data):
    g, q, k, v, kinds = data
    assert q.shape == k.shape == v.shape == (1, g.tokens, H, D) and q.dtype == np.float32
    assert len(kinds) == H and set(kinds) <= {"spatial", "temporal", "mixed"}
    q2, _, _, kinds2 = stsa.workload(g, H, D, seed=1)
    assert np.array_equal(q, q2) and kinds == kinds2  # deterministic
    qb, _, _, _ = stsa.workload(g, H, D, seed=1, layout="bhsd", dtype=np.float16)
    assert qb.shape == (1, H, g.tokens, D) and qb.dtype == np.float16
    np.testing.assert_allclose(qb.transpose(0, 2, 1, 3), q, atol=2e-3 * np.abs(q).max())
    _, _, _, forced = stsa.workload(g, 2, D, kinds=["spatial", "temporal"])
    assert forced == ["spatial", "temporal"]


def test_svg_output_info_and_error_against_dense(data, threads):
    g, q, k, v, kinds = data
    svg = stsa.SVG(g, heads=H, head_dim=D, density=0.5, sample_rows=32, dense_steps=2,
                   dense_layers=1, threads=threads)
    out, info = svg(q, k, v, layer=1, step=3, layout="bshd")
    assert out.shape == q.shape and out.dtype == q.dtype
    assert not info.dense and (info.layer, info.step) == (1, 3)
    assert info.kinds.shape == (1, H) and set(info.kinds.ravel()) <= {"spatial", "temporal"}
    assert info.mse_spatial.shape == info.mse_temporal.shape == (1, H)
    assert (info.mse_spatial >= 0).all() and (info.mse_temporal >= 0).all()
    assert info.profile_ms >= 0 and info.attention_ms >= 0
    assert 0 < info.density < 1
    # the profiling picks the kind the workload built, for the pure heads
    for h, truth in enumerate(kinds):
        if truth != "mixed":
            assert info.kinds[0, h] == truth
        chosen_mse = min(info.mse_spatial[0, h], info.mse_temporal[0, h])
        mse = {"spatial": info.mse_spatial[0, h], "temporal": info.mse_temporal[0, h]}
        assert mse[info.kinds[0, h]] == chosen_mse
    dense = stsa.attention(q, k, v, layout="bshd")
    rel = np.linalg.norm(out - dense) / np.linalg.norm(dense)
    print(f"SVG density {info.density:.3f}: relative L2 error vs dense {rel:.4f}")
    assert rel < 0.05


@pytest.mark.parametrize("text", [{}, dict(text=10, text_real=7, text_pos="suffix"),
                                  dict(text=5, text_pos="prefix")])
def test_svg_computes_exactly_the_masks_it_reports(text):
    geo = dict(GEO, **text)
    g = stsa.Geometry(**geo)
    q, k, v, _ = stsa.workload(g, H, D, seed=2)
    svg = stsa.SVG(g, heads=H, head_dim=D, density=0.4, sample_rows=16)
    out, info = svg(q, k, v, layer=2, step=5, layout="bshd")
    w = svg.windows
    t = ref.tokens(**geo)
    extra = ref.sink_frames(t, 1) | ref.text(t)
    keep = {"spatial": ref.frame_window(t, w.frame_window) | extra,
            "temporal": ref.position_band(t, w.band) | extra}
    want, _ = ref.attention(q, k, v, keep=np.stack([keep[kd] for kd in info.kinds[0]]))
    np.testing.assert_allclose(out, want, atol=2e-5)


def test_dense_policy_is_bitwise_dense(data):
    g, q, k, v, _ = data
    svg = stsa.SVG(g, heads=H, head_dim=D, dense_steps=2, dense_layers=1, sample_rows=8)
    dense = stsa.attention(q, k, v, layout="bshd")
    for layer, step in ((0, 10), (5, 1)):
        out, info = svg(q, k, v, layer=layer, step=step, layout="bshd")
        assert info.dense and info.density == 1.0
        assert np.array_equal(out, dense)


@pytest.mark.parametrize("layout", ["bhsd", "shd"])
def test_svg_layouts_and_out(data, layout):
    g, q, k, v, _ = data
    svg = stsa.SVG(g, heads=H, head_dim=D, density=0.4, sample_rows=16)
    want, _ = svg(q, k, v, layer=1, step=1, layout="bshd")
    conv = {"bhsd": lambda a: a.transpose(0, 2, 1, 3), "shd": lambda a: a[0]}[layout]
    out = np.zeros(conv(q).shape, dtype=np.float16)
    got, _ = svg(conv(q), conv(k), conv(v), layer=1, step=1, layout=layout, out=out)
    assert got is out
    np.testing.assert_allclose(out.astype(np.float32), conv(want), atol=2e-3)


def test_presets_and_errors(data):
    g, q, k, v, _ = data
    assert "wan21-480p" in stsa.presets()
    svg = stsa.SVG("wan21-480p", heads=2)
    assert svg.heads == 2 and svg.head_dim is None and svg.geometry == stsa.Geometry(21, 30, 52)
    assert svg.config.dense_steps == 10 and svg.config.density == pytest.approx(0.3)
    with pytest.raises(ValueError, match=r"^stsa\.SVG was created with heads=2 but q has "
                                         r"H = 4 \(shape \(1, 288, 4, 32\), layout 'bshd'\)"):
        svg(q, k, v, layout="bshd")
    svg.close()
    with pytest.raises(ValueError, match="unknown SVG preset"):
        stsa.SVG("wan99")
    with pytest.raises(ValueError, match=r"^stsa\.SVG: density = 1\.5 is the KEPT fraction"):
        stsa.SVG(g, heads=H, head_dim=D, density=1.5)
    with pytest.raises(ValueError, match=r"^stsa\.SVG: density = 1\.5 is the KEPT fraction"):
        stsa.SVG(g, density=1.5)  # settings are checked at construction, heads or not


def test_preset_head_count_is_not_applied(data):
    """As in the CLI, heads and head dim come from the tensors: the preset's
    12 heads of 128 are not imposed (the session the call ran was for the
    tensors' H = 4, D = 32; only the token count differs here)."""
    g, q, k, v, _ = data
    with stsa.SVG("wan21-480p") as svg:
        assert svg.heads is None and svg.head_dim is None
        with pytest.raises(ValueError, match=r"^svg: session is for N = 32760, H = 4, "
                                             r"D = 32 but q is \[1, 288, 4, 32\]"):
            svg(q, k, v, layout="bshd")


def test_heads_and_head_dim_come_from_the_tensors(data):
    g, q, k, v, _ = data
    svg = stsa.SVG(g, density=0.4, sample_rows=16)  # neither heads= nor head_dim=
    for h, d in ((H, D), (2, D), (3, 16), (H, D)):
        qs, ks, vs = (np.ascontiguousarray(a[..., :h, :d]) for a in (q, k, v))
        got, info = svg(qs, ks, vs, layer=2, step=4, layout="bshd")
        assert info.kinds.shape == (1, h)
        with stsa.SVG(g, heads=h, head_dim=d, density=0.4, sample_rows=16) as fixed:
            want, want_info = fixed(qs, ks, vs, layer=2, step=4, layout="bshd")
        assert np.array_equal(got, want) and np.array_equal(info.kinds, want_info.kinds)
    fixed = stsa.SVG(g, head_dim=D, sample_rows=16)
    with pytest.raises(ValueError, match=r"^stsa\.SVG was created with head_dim=32 but q has "
                                         r"D = 16"):
        fixed(q[..., :16], k[..., :16], v[..., :16], layout="bshd")
    with pytest.raises(ValueError, match=r"^heads = 0 is out of range \[1, "):
        stsa.SVG(g, heads=0)


def test_dense_calls_report_kind_dense(data):
    g, q, k, v, _ = data
    svg = stsa.SVG(g, heads=H, head_dim=D, dense_steps=2, dense_layers=1, sample_rows=8)
    _, dense = svg(q, k, v, layer=0, step=5, layout="bshd")
    assert dense.dense and dense.kinds.shape == (1, H) and (dense.kinds == "dense").all()
    _, sparse = svg(q, k, v, layer=1, step=5, layout="bshd")
    assert not sparse.dense and set(sparse.kinds.ravel()) <= {"spatial", "temporal"}


def test_session_outlives_the_callers_references(data):
    g, q, k, v, _ = data
    svg = stsa.SVG(g, heads=H, head_dim=D, sample_rows=8)
    ctx = svg.context
    del ctx  # the session keeps its context; it is freed with the session
    out, _ = svg(q, k, v, layer=3, step=3, layout="bshd")
    assert np.isfinite(out).all()
    with svg:
        pass
    with pytest.raises(ValueError, match="closed"):
        svg(q, k, v, layout="bshd")
