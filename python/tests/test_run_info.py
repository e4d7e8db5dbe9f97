"""What a call ran (stsa_ctx_last_run): stsa.Context.last_run and the "ran"
of SVG and SVG2 reports name the backend, the arithmetic, the bf16 terms and
why a call did not take its backend's fastest arithmetic (the bf16 tiles of
the amx and avx512bf16 backends: checked where this build runs them, amx
emulated or not)."""

import numpy as np
import pytest

import stsa

KEYS = {"backend", "arithmetic", "bf16_terms", "pv_precision", "why"}
TILES = ("amx", "avx512bf16")  # the backends with bf16 tiles
TILED_HERE = [b for b in TILES if b in stsa.backends(here=True)]
BACKENDS = [b for b in stsa.backends(here=True) if b != "auto"]


def rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def qkv(shape, dtype=np.float32):
    return [rand(shape, seed, dtype) for seed in range(3)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_run_of_dense_and_sparse_calls(backend, threads):
    ctx = stsa.Context(backend=backend, threads=threads)
    assert ctx.last_run is None  # no call yet
    q, k, v = qkv((1, 40, 2, 16))
    stsa.attention(q, k, v, layout="bshd", ctx=ctx)
    ran = ctx.last_run
    assert set(ran) == KEYS and ran["backend"] == backend == ctx.backend
    assert ran["arithmetic"] == ("f64" if backend == "ref" else "f32")
    assert ran["bf16_terms"] == 0
    if backend in TILES:  # f32 inputs cannot take the bf16 tiles
        assert "bf16 only" in ran["why"], ran
    else:
        assert ran["why"] == "", ran
    # a failing call leaves the record of the last one that ran
    with pytest.raises(stsa.Error):
        stsa.attention(q, k[:, :, :1], v, layout="bshd", ctx=ctx)
    assert ctx.last_run == ran
    g = stsa.Geometry(2, 4, 5)
    mask = stsa.masks.frame_window(g, 0)
    q, k, v = qkv((1, g.tokens, 2, 16), np.float16)
    stsa.sparse_attention(q, k, v, layout="bshd", mask=mask, geometry=g, ctx=ctx)
    sparse = ctx.last_run
    assert sparse["backend"] == backend
    assert sparse["arithmetic"] == ("f64" if backend == "ref" else "f32")
    if backend in TILES:
        assert "f16, f16 and f16" in sparse["why"], sparse


def test_svg_and_svg2_reports_say_what_ran(threads):
    g = stsa.Geometry(3, 6, 8)
    q, k, v, _ = stsa.workload(g, 2, 32, seed=2)
    for session in (stsa.SVG(g, density=0.5, sample_rows=16, threads=threads),
                    stsa.SVG2(g, sample_rows=16, threads=threads)):
        with session:
            _, info = session(q, k, v, layout="bshd")
            assert set(info.ran) == KEYS and info.ran == session.context.last_run
            assert info.ran["backend"] == session.context.backend
            assert info.ran["arithmetic"] in ("f32", "bf16-tiles")
            # the report is a plain value: ran is a dict, not a view of C memory
            assert isinstance(info.ran["why"], str)


@pytest.mark.parametrize("backend", ["ref", "portable"])
def test_svg_report_on_a_forced_backend(backend, threads):
    g = stsa.Geometry(2, 4, 6)
    q, k, v, _ = stsa.workload(g, 2, 16, seed=3)
    with stsa.SVG(g, density=0.5, sample_rows=8, backend=backend, threads=threads) as svg:
        _, info = svg(q, k, v, layout="bshd")
    assert info.ran == {"backend": backend,
                        "arithmetic": "f64" if backend == "ref" else "f32",
                        "bf16_terms": 0, "pv_precision": "f32", "why": ""}


@pytest.mark.parametrize("backend", TILED_HERE)
def test_bf16_tiles_and_why_not(backend, threads):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy has no bfloat16 without it")
    bf16 = ml_dtypes.bfloat16
    ctx = stsa.Context(backend=backend, threads=threads)
    q, k, v = qkv((1, 64, 2, 64), bf16)
    stsa.attention(q, k, v, layout="bshd", ctx=ctx)  # bf16 out: two terms
    assert ctx.last_run == {"backend": backend, "arithmetic": "bf16-tiles", "bf16_terms": 2,
                            "pv_precision": "near-f32", "why": ""}
    ctx.set("kv_tile", 48)  # a multiple of the panel, not of the bf16 blocks: padded
    stsa.attention(q, k, v, layout="bshd", ctx=ctx)
    assert ctx.last_run == {"backend": backend, "arithmetic": "bf16-tiles", "bf16_terms": 2,
                            "pv_precision": "near-f32", "why": ""}
    ctx.set("kv_tile", 64)
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    stsa.attention(q16, k16, v16, layout="bshd", ctx=ctx)
    ran = ctx.last_run
    assert ran["arithmetic"] == "f32" and "the bf16 tiles take bf16 only" in ran["why"], ran
    # frames of 12 x 20 tokens: the session's frame-aligned tiles are 240 keys
    # (Wan 720p's case), which the bf16 tiles take as they take 96 x 128
    g = stsa.Geometry(2, 12, 20)
    q, k, v = qkv((1, g.tokens, 2, 64), bf16)
    with stsa.SVG(g, density=0.5, sample_rows=16, backend=backend, threads=threads) as svg:
        assert svg.windows.kv_tile == 240
        _, info = svg(q, k, v, layout="bshd")
    assert info.ran == {"backend": backend, "arithmetic": "bf16-tiles", "bf16_terms": 2,
                        "pv_precision": "near-f32", "why": ""}
    with stsa.SVG(g, density=0.5, sample_rows=16, q_tile=96, kv_tile=128, backend=backend,
                  threads=threads) as svg:
        _, info = svg(q, k, v, layout="bshd")
    assert info.ran == {"backend": backend, "arithmetic": "bf16-tiles", "bf16_terms": 2,
                        "pv_precision": "near-f32", "why": ""}
