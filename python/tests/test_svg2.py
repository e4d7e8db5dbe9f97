"""stsa.SVG2 and the error budget (max_error) of SVG and SVG2, on the
built-in workload's semantic heads (moving objects over a static background)."""

import numpy as np
import pytest

import reference as ref
import stsa

GEO = dict(frames=6, height=8, width=12)  # 576 video tokens
H, D = 4, 32
# clusters of a few dozen tokens: the automatic count (300 / 1000 at 75,600
# tokens) would be 2 / 8 here
CLUSTERS = dict(q_clusters=16, kv_clusters=40, sample_rows=32)
REPORT_FIELDS = ("kinds", "mse_spatial", "mse_temporal", "est_error", "head_density",
                 "budget", "top_p")


@pytest.fixture(scope="module")
def data():
    g = stsa.Geometry(**GEO)
    q, k, v, kinds = stsa.workload(g, H, D, seed=3, kinds=["semantic"] * H)
    dense = stsa.attention(q, k, v, layout="bshd")
    return g, q, k, v, kinds, dense


def rel(out, dense):
    return float(np.linalg.norm(out - dense) / np.linalg.norm(dense))


def test_workload_semantic_heads(data):
    g, q, k, v, kinds, _ = data
    assert kinds == ["semantic"] * H and q.shape == (1, g.tokens, H, D)
    _, _, _, mixed = stsa.workload(g, 3, D, kinds=["spatial", "semantic", "temporal"])
    assert mixed == ["spatial", "semantic", "temporal"]
    with pytest.raises(ValueError, match="kinds must be 2 names of"):
        stsa.workload(g, 2, D, kinds=["semantic", "cluster"])


def test_svg2_output_report_and_error_against_dense(data, threads):
    g, q, k, v, _, dense = data
    svg2 = stsa.SVG2(g, heads=H, head_dim=D, threads=threads, **CLUSTERS)
    assert svg2.config.method == stsa._lib.SVG_METHODS["svg2"] and svg2.config.svg2.top_p == 0.9
    out, info = svg2(q, k, v, layer=1, step=3, layout="bshd")
    assert out.shape == q.shape and out.dtype == q.dtype and np.isfinite(out).all()
    for name in REPORT_FIELDS:
        assert getattr(info, name).shape == (1, H), name
    assert (info.kinds == "semantic").all() and not info.dense
    assert (info.budget == "none").all()  # no budget given
    assert np.allclose(info.top_p, 0.9)
    assert (info.q_clusters, info.kv_clusters) == (16, 40)
    assert info.cold and 0 <= info.cluster_ms <= info.profile_ms
    assert ((info.head_density > 0) & (info.head_density < 1)).all()
    assert info.density == pytest.approx(info.head_density.mean(), rel=1e-5)
    assert np.isnan(info.est_error).all()  # no budget: nothing profiled
    err = rel(out, dense)
    print(f"SVG2 top-p 0.9, density {info.density:.3f}: relative L2 error {err:.4f}, "
          f"not estimated {info.est_error.ravel()}")
    assert err < 0.2
    # the next call of the layer starts from its clusters
    _, warm = svg2(q, k, v, layer=1, step=4, layout="bshd")
    assert not warm.cold


def test_svg2_is_deterministic(data):
    g, q, k, v, _, _ = data
    runs = []
    for threads in (1, 2):
        with stsa.SVG2(g, threads=threads, **CLUSTERS) as svg2:
            runs.append([svg2(q, k, v, layer=2, step=s, layout="bshd") for s in (5, 6)])
    for (a, ia), (b, ib) in zip(*runs):
        assert np.array_equal(a, b)
        assert np.array_equal(ia.head_density, ib.head_density)
        assert np.array_equal(ia.est_error, ib.est_error, equal_nan=True)


def test_svg2_density_is_a_key_budget(data):
    g, q, k, v, _, dense = data
    svg2 = stsa.SVG2(g, density=0.3, **CLUSTERS)
    assert svg2.config.svg2.top_p == 0 and "density=0.3" in repr(svg2)
    out, info = svg2(q, k, v, layer=1, step=1, layout="bshd")
    assert (info.top_p == 0).all()
    assert 0.2 < info.density < 0.45
    assert rel(out, dense) < 0.2


def test_svg2_policy_steps_are_dense(data):
    g, q, k, v, _, dense = data
    svg2 = stsa.SVG2(g, dense_steps=2, **CLUSTERS)
    out, info = svg2(q, k, v, layer=3, step=1, layout="bshd")
    assert info.dense and (info.kinds == "dense").all() and (info.budget == "policy").all()
    assert (info.q_clusters, info.kv_clusters) == (0, 0)
    # dense attention at the session's tiles (SVG2's own, 256 x 512 by default):
    # bitwise the full plan's call at those tiles, and as close to float64 as
    # stsa.attention at its tiles (the semantic heads' logits are large: both
    # are about 1e-6 of the largest output away)
    w = svg2.windows
    full = stsa.Plan(stsa.masks.full(), g.tokens, heads=H, q_tile=w.q_tile, kv_tile=w.kv_tile)
    assert np.array_equal(out, stsa.sparse_attention(q, k, v, plan=full, layout="bshd"))
    want, _ = ref.attention(q, k, v)
    bound = 3e-6 * np.abs(want).max()
    assert np.abs(dense - want).max() < bound
    np.testing.assert_allclose(out, want, rtol=0, atol=bound)


def test_tiny_budget_runs_every_head_dense(data):
    g, q, k, v, _, dense = data
    for session in (stsa.SVG2(g, max_error=1e-9, **CLUSTERS),
                    stsa.SVG(g, density=0.3, max_error=1e-9, sample_rows=32)):
        out, info = session(q, k, v, layer=1, step=1, layout="bshd")
        assert (info.budget == "dense").all(), info.budget
        assert (info.est_error == 0).all() and np.allclose(info.head_density, 1)
        np.testing.assert_allclose(out, dense, atol=1e-5)


def test_budget_per_call_overrides_the_sessions(data):
    g, q, k, v, _, dense = data
    svg2 = stsa.SVG2(g, max_error=1e-9, **CLUSTERS)
    _, unbudgeted = svg2(q, k, v, layer=1, step=1, layout="bshd", max_error=0)
    assert (unbudgeted.budget == "none").all()
    out, info = svg2(q, k, v, layer=1, step=2, layout="bshd", max_error=0.05)
    assert set(info.budget.ravel()) <= {"none", "raised", "dense"}
    assert "none" not in info.budget or (info.est_error[info.budget == "none"] <= 0.05).all()
    raised = info.budget == "raised"
    assert (info.est_error[raised] <= 0.05).all() and (info.top_p[raised] > 0.9).all()
    print(f"SVG2 max_error 0.05: {info.budget.ravel()}, top-p {info.top_p.ravel()}, "
          f"relative L2 error {rel(out, dense):.4f}")
    assert rel(out, dense) < 0.1
    svg = stsa.SVG(g, density=0.3, sample_rows=32)
    _, loose = svg(q, k, v, layer=1, step=2, layout="bshd")
    out, info = svg(q, k, v, layer=1, step=2, layout="bshd", max_error=0.05)
    assert (info.est_error <= 0.05).all() and (info.top_p == 0).all()
    assert (info.head_density >= loose.head_density).all()
    assert (info.kinds != "semantic").all()


def test_bad_arguments_raise_messages_that_name_them(data):
    # float settings are checked in Python, named as given (the library's
    # message would round them to 6 digits); the rest by the library
    g, q, k, v, _, _ = data
    with pytest.raises(stsa.StsaValueError, match=r"^stsa\.SVG2: top_p = 1\.5, expected a "
                                                  r"probability in \(0, 1\]"):
        stsa.SVG2(g, top_p=1.5)
    with pytest.raises(stsa.StsaValueError, match=r"^svg2: 0 query and 577 key clusters"):
        stsa.SVG2(g, kv_clusters=577)
    with pytest.raises(stsa.StsaValueError, match=r"^stsa\.SVG2: min_kv_fraction = 2, "
                                                  r"expected"):
        stsa.SVG2(g, min_kv_fraction=2)
    with pytest.raises(stsa.StsaValueError, match=r"^stsa\.SVG2: max_error = -1, expected 0 "):
        stsa.SVG2(g, max_error=-1)
    with pytest.raises(stsa.StsaValueError, match=r"^stsa\.SVG: max_error = -1, expected 0 "):
        stsa.SVG(g, max_error=-1)
    with pytest.raises(stsa.StsaValueError, match=r"top_p = 0\.8 and density = 0\.3 both"):
        stsa.SVG2(g, top_p=0.8, density=0.3)
    svg2 = stsa.SVG2(g, **CLUSTERS)
    with pytest.raises(stsa.StsaValueError, match=r"^stsa\.SVG2: max_error = nan, expected "
                                                  r">= 0 and finite"):
        svg2(q, k, v, layout="bshd", max_error=float("nan"))
    with pytest.raises(stsa.StsaValueError, match=r"^stsa\.SVG2: max_error = -0\.5, expected"):
        svg2(q, k, v, layout="bshd", max_error=-0.5)
    with pytest.raises(ValueError, match=r"^stsa\.SVG2 was created with heads=2 but q has H"):
        stsa.SVG2(g, heads=2, **CLUSTERS)(q, k, v, layout="bshd")


def test_svg2_presets_hold_the_published_settings():
    svg2 = stsa.SVG2("wan21-720p", heads=2)
    c = svg2.config
    assert c.method == stsa._lib.SVG_METHODS["svg2"] and c.svg2.top_p == pytest.approx(0.9)
    assert (c.svg2.q_clusters, c.svg2.kv_clusters) == (300, 1000)
    assert repr(svg2).startswith("stsa.SVG2('wan21-720p', heads=2")
    assert stsa.SVG("wan21-720p").config.method == stsa._lib.SVG_METHODS["svg"]
