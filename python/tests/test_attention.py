"""stsa.attention on numpy arrays: dtypes, layouts, strides, out=, errors."""

import sys
import threading
import time

import numpy as np
import pytest

import reference as ref
import stsa
from stsa import _core

LAYOUTS = ["bshd", "bhsd", "shd"]
# awkward sizes on purpose: nothing is a tile multiple
B, SQ, SKV, H, D = 2, 37, 53, 3, 40


def shapes(layout, s_q=SQ, s_kv=SKV, b=B, h=H, d=D):
    return {"bshd": ((b, s_q, h, d), (b, s_kv, h, d)),
            "bhsd": ((b, h, s_q, d), (b, h, s_kv, d)),
            "shd": ((s_q, h, d), (s_kv, h, d))}[layout]


def qkv(layout, dtype, seed=0, **kw):
    sq, skv = shapes(layout, **kw)
    return ref.rand(sq, dtype, seed), ref.rand(skv, dtype, seed + 1), ref.rand(skv, dtype,
                                                                               seed + 2)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_reference(layout, dtype, threads):
    q, k, v = qkv(layout, dtype)
    out = stsa.attention(q, k, v, layout=layout, threads=threads)
    assert type(out) is np.ndarray and out.dtype == q.dtype and out.shape == q.shape
    want, _ = ref.attention(q, k, v, layout)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=ref.TOL[dtype], rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bfloat16_numpy(layout, threads):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy has no bfloat16 without it")
    q, k, v = (a.astype(ml_dtypes.bfloat16) for a in qkv(layout, np.float32))
    out = stsa.attention(q, k, v, layout=layout, threads=threads)
    assert out.dtype == q.dtype
    want, _ = ref.attention(q, k, v, layout)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=ref.TOL["bfloat16"])


def test_mixed_dtypes_and_scale_and_lse(threads):
    q, k, v = qkv("bshd", np.float32)
    k16, v16 = k.astype(np.float16), v.astype(np.float16)
    out, lse = stsa.attention(q, k16, v16, layout="bshd", scale=0.3, return_lse=True,
                              threads=threads)
    assert out.dtype == np.float32 and lse.dtype == np.float32 and lse.shape == (B, H, SQ)
    want, want_lse = ref.attention(q, k16, v16, scale=0.3)
    np.testing.assert_allclose(out, want, atol=2e-5)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5)


def test_lse_shape_of_shd():
    q, k, v = qkv("shd", np.float32)
    _, lse = stsa.attention(q, k, v, layout="shd", return_lse=True)
    assert lse.shape == (H, SQ)


def test_strided_views_without_copies(threads):
    rng = np.random.default_rng(3)
    # q: a [B,H,S,D] buffer seen as [B,S,H,D] (transposed view)
    q_base = rng.standard_normal((B, H, SQ, D)).astype(np.float32)
    q = q_base.transpose(0, 2, 1, 3)
    # k: every other token of a longer sequence (sliced view)
    k = rng.standard_normal((B, 2 * SKV, H, D)).astype(np.float32)[:, ::2]
    # v: the first D channels of wider rows
    v = rng.standard_normal((B, SKV, H, D + 24)).astype(np.float32)[..., :D]
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        assert not x.flags.c_contiguous
        view = _core.view(x, name, "bshd")
        assert not view.copied and stsa._lib.address(view.tensor.data) == x.ctypes.data
    out = stsa.attention(q, k, v, threads=threads, layout="bshd")
    want, _ = ref.attention(q, k, v)
    np.testing.assert_allclose(out, want, atol=2e-5)


def test_negative_and_zero_strides_are_copied_for_inputs():
    q, k, v = qkv("bshd", np.float32)
    q_rev = q[:, ::-1]                                   # negative stride on S
    v_b = np.broadcast_to(v[:, :1], v.shape)             # zero stride on S
    assert _core.view(q_rev, "q", "bshd").copied
    assert _core.view(v_b, "v", "bshd").copied
    out = stsa.attention(q_rev, k, v_b, layout="bshd")
    want, _ = ref.attention(q_rev, k, v_b)
    np.testing.assert_allclose(out, want, atol=2e-5)


def test_out_negative_strides_refused():
    q, k, v = qkv("bshd", np.float32)
    out = np.empty_like(q)[:, ::-1]
    with pytest.raises(ValueError, match="cannot be written in place"):
        stsa.attention(q, k, v, out=out, layout="bshd")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_out_is_written_in_place(layout, threads):
    q, k, v = qkv(layout, np.float32)
    out = np.full(q.shape, np.nan, dtype=np.float32)
    got = stsa.attention(q, k, v, layout=layout, out=out, threads=threads)
    assert got is out and np.shares_memory(got, out)
    want, _ = ref.attention(q, k, v, layout)
    np.testing.assert_allclose(out, want, atol=2e-5)


def test_out_strided_view_of_a_bigger_buffer_and_another_dtype():
    q, k, v = qkv("bshd", np.float32)
    buf = np.zeros((B, H, SQ, D), dtype=np.float16)      # out in [B,H,S,D] memory
    out = buf.transpose(0, 2, 1, 3)                       # ... passed as bshd
    got = stsa.attention(q, k, v, out=out, layout="bshd")
    assert got is out and np.shares_memory(got, buf)
    want, _ = ref.attention(q, k, v)
    np.testing.assert_allclose(buf.transpose(0, 2, 1, 3), want, atol=2e-3)


def test_bitwise_identical_for_any_thread_count():
    q, k, v = qkv("bshd", np.float32, s_q=300, s_kv=300)
    one = stsa.attention(q, k, v, threads=1, layout="bshd")
    two = stsa.attention(q, k, v, threads=2, layout="bshd")
    assert np.array_equal(one, two)


def test_reference_backend_through_a_context():
    q, k, v = qkv("bshd", np.float32)
    ctx = stsa.Context(backend="ref", threads=1)
    assert ctx.backend == "ref"
    out = stsa.attention(q, k, v, ctx=ctx, layout="bshd")
    want, _ = ref.attention(q, k, v)
    np.testing.assert_allclose(out, want, atol=1e-6)


@pytest.mark.parametrize("name, runs_here", [("avx2", stsa.cpu_has_avx2),
                                              ("avx512", stsa.cpu_has_avx512),
                                              ("amx", stsa.cpu_has_amx)])
def test_x86_backends_by_name_run_where_the_cpu_has_them(name, runs_here):
    q, k, v = qkv("bshd", np.float32, s_q=77, s_kv=130)
    if not runs_here():
        with pytest.raises(stsa.Error, match=f"backend {name} does not run on this machine"):
            stsa.Context(backend=name)
        return
    ctx = stsa.Context(backend=name, threads=2)
    assert ctx.backend == name
    out = stsa.attention(q, k, v, ctx=ctx, layout="bshd")
    want, _ = ref.attention(q, k, v)
    np.testing.assert_allclose(out, want, atol=2e-6)


def test_pv_precision_parameter():
    """By name ('auto', 'bf16', 'near-f32', 'f32') or number, also as
    bf16_terms (its earlier name). An f32 path runs 'f32' whatever is asked
    and says so; on the bf16 tiles (amx, avx512bf16) 'bf16' (p rounded to
    bf16, as SDPA's bf16 path) moves a float32 output, 'f32' does not."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy has no bfloat16 without it")
    ctx = stsa.Context(pv_precision="near-f32")
    assert ctx.get("pv_precision") == ctx.get("bf16_terms") == 2
    assert stsa.Context(bf16_terms=1).get("pv_precision") == 1
    with pytest.raises(ValueError, match=r"^pv_precision = 4 is out of range \[0, 3\]$"):
        stsa.Context(bf16_terms=4)
    with pytest.raises(ValueError, match=r"^unknown pv_precision 'exact'; expected one of "
                                         r"auto, bf16, near-f32, f32$"):
        stsa.Context(pv_precision="exact")
    q, k, v = (a.astype(ml_dtypes.bfloat16) for a in qkv("bshd", np.float32, s_q=77, s_kv=130))
    f32_path = stsa.Context(backend="portable", threads=2, pv_precision="bf16")
    stsa.attention(q, k, v, layout="bshd", ctx=f32_path)
    assert f32_path.last_run["pv_precision"] == "f32"
    want, _ = ref.attention(*(a.astype(np.float64) for a in (q, k, v)), "bshd")
    for backend in ("amx", "avx512bf16"):
        if backend not in stsa.backends(here=True):
            continue
        outs = {}
        for precision in ("bf16", "f32"):
            out = np.zeros(q.shape, np.float32)
            ctx = stsa.Context(backend=backend, threads=2, pv_precision=precision)
            stsa.attention(q, k, v, layout="bshd", out=out, ctx=ctx)
            assert ctx.last_run["pv_precision"] == precision
            outs[precision] = out
        np.testing.assert_allclose(outs["f32"], want, atol=2e-6)
        np.testing.assert_allclose(outs["bf16"], want, atol=2e-2)
        assert not np.array_equal(outs["bf16"], outs["f32"])


# ------------------------------------------------------------------ errors
def test_heads_mismatch_carries_the_c_message():
    q, k, v = qkv("bshd", np.float32)
    with pytest.raises(ValueError) as e:
        stsa.attention(q, k[:, :, :2], v, layout="bshd")
    assert str(e.value) == "k has 2 heads but q has 3"
    assert isinstance(e.value, stsa.Error) and e.value.status == 2
    assert e.value.status_name == stsa._lib.status_name(2)


def test_token_mismatch_of_k_and_v():
    q, k, v = qkv("bshd", np.float32)
    with pytest.raises(ValueError, match="^v has 52 tokens but k has 53$"):
        stsa.attention(q, k, v[:, :52], layout="bshd")


def test_head_dim_limit():
    q = np.zeros((1, 4, 1, 600), dtype=np.float32)
    with pytest.raises(ValueError, match=r"^q: head dim D = 600 exceeds the supported "
                                         r"maximum 512$"):
        stsa.attention(q, q, q, layout="bshd")


def test_empty_sequence_and_zero_head_dim_are_named():
    q, k, v = qkv("bshd", np.float32)
    with pytest.raises(ValueError, match=r"^q is empty \(shape \(2, 0, 3, 40\), layout "
                                         r"'bshd'\): every dimension must be >= 1$") as e:
        stsa.attention(q[:, :0], k, v, layout="bshd")
    assert e.value.status_name == stsa._lib.status_name(stsa._lib.lib.STSA_ERR_BAD_SHAPE)
    with pytest.raises(ValueError, match=r"^k is empty \(shape \(0, 53, 3, 40\)"):
        stsa.attention(q, k[:0], v, layout="bshd")
    # D = 0 used to be reported as "stride of S is 0"
    with pytest.raises(ValueError, match=r"^q: head dim is 0 \(shape \(2, 37, 3, 0\), "
                                         r"layout 'bshd'\)$"):
        stsa.attention(q[..., :0], k[..., :0], v, layout="bshd")


def test_layout_is_required_everywhere():
    """[B, S, H, D] and [B, H, S, D] arrays of equal sizes look alike: there
    is no default layout, and omitting it names the choices."""
    q, k, v = qkv("bshd", np.float32)
    g = stsa.Geometry(2, 2, 3)
    x = np.zeros((1, g.tokens, 2, 8), np.float32)
    svg = stsa.SVG(g, sample_rows=4)
    calls = {
        "stsa.attention": lambda: stsa.attention(q, k, v),
        "stsa.sparse_attention": lambda: stsa.sparse_attention(q, k, v, mask=stsa.masks.full()),
        "stsa.SVG": lambda: svg(x, x, x, layer=1, step=1),
        "stsa.permute_tokens": lambda: stsa.permute_tokens(x, g, "position_major"),
    }
    for who, call in calls.items():
        with pytest.raises(TypeError, match=rf"^{who}: layout= is required: .*'bshd' "
                                            rf"\(\[B, S, H, D\].*'bhsd' \(\[B, H, S, D\].*"
                                            rf"'shd' \(\[S, H, D\]"):
            call()
    with pytest.raises(TypeError):  # keyword only: a positional layout is not taken
        stsa.attention(q, k, v, "bshd")
    # the SDPA layout by mistake is caught when the sizes differ, and never
    # guessed: with the explicit layout the same arrays give the right result
    qb, kb, vb = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (q, k, v))
    out = stsa.attention(qb, kb, vb, layout="bhsd")
    np.testing.assert_allclose(out.transpose(0, 2, 1, 3),
                               stsa.attention(q, k, v, layout="bshd"), atol=1e-6)


def test_integers_out_of_range_are_refused_not_wrapped():
    q, k, v = qkv("bshd", np.float32)
    # 10**20 threads used to reach the library as 7766279631452241920
    with pytest.raises(ValueError, match=r"^threads = 100000000000000000000 is out of "
                                         r"range \[1, 1024\]$"):
        stsa.attention(q, k, v, layout="bshd", threads=10**20)
    with pytest.raises(ValueError, match=r"^threads = 100000000000000000000 is out of range"):
        stsa.Context(threads=10**20)
    with pytest.raises(TypeError, match="threads must be an integer, got float"):
        stsa.attention(q, k, v, layout="bshd", threads=2.5)
    g = stsa.Geometry(2, 2, 3)
    with pytest.raises(ValueError, match=r"^w = 18446744073709551618 is out of range"):
        stsa.masks.frame_window(g, 2**64 + 2)  # would have wrapped to a window of 2
    with pytest.raises(ValueError, match=r"^step = 18446744073709551616 is out of range"):
        x = np.zeros((1, g.tokens, 1, 8), np.float32)
        stsa.SVG(g, sample_rows=4)(x, x, x, layer=1, step=2**64, layout="bshd")


def test_non_finite_input():
    q, k, v = qkv("bshd", np.float32)
    q[1, 5, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"^q\[b=1, s=5, h=2\] holds NaN or Inf$"):
        stsa.attention(q, k, v, layout="bshd")


def test_out_overlapping_an_input():
    q, k, v = qkv("bshd", np.float32)
    with pytest.raises(ValueError, match="^out overlaps q in memory$"):
        stsa.attention(q, k, v, out=q, layout="bshd")


def test_negative_scale():
    q, k, v = qkv("bshd", np.float32)
    with pytest.raises(ValueError, match=r"^scale = -1\.0 must be a positive finite number "
                                         r"\(None: 1/sqrt\(D\)\)"):
        stsa.attention(q, k, v, scale=-1.0, layout="bshd")


def test_bad_dtype_is_a_type_error():
    q, k, v = qkv("bshd", np.float64)
    with pytest.raises(TypeError, match="q: dtype float64 is not supported"):
        stsa.attention(q, k, v, layout="bshd")
    with pytest.raises(TypeError, match="must be a numpy array"):
        stsa.attention(q.tolist(), k, v, layout="bshd")


def test_bad_rank_and_layout():
    q, k, v = qkv("bshd", np.float32)
    with pytest.raises(ValueError, match="q has 4 dimensions .* layout 'shd' needs 3"):
        stsa.attention(q, k, v, layout="shd")
    with pytest.raises(ValueError, match="layout 'sbhd' is not one of"):
        stsa.attention(q, k, v, layout="sbhd")


def test_out_of_wrong_shape_and_read_only():
    q, k, v = qkv("bshd", np.float32)
    with pytest.raises(ValueError, match="out has shape"):
        stsa.attention(q, k, v, out=np.empty((B, SQ, H, D + 1), np.float32), layout="bshd")
    out = np.empty_like(q)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        stsa.attention(q, k, v, out=out, layout="bshd")


def test_error_leaves_out_untouched():
    q, k, v = qkv("bshd", np.float32)
    out = np.full(q.shape, 7.0, dtype=np.float32)
    with pytest.raises(ValueError):
        stsa.attention(q, k[:, :, :2], v[:, :, :2], out=out, layout="bshd")
    assert (out == 7.0).all()


# ------------------------------------------------------------------ GIL
def test_gil_is_released_during_the_call():
    """A Python thread spins while the main thread is inside libstsa. With
    the switch interval at 0.5 s, the spinner could only run during a
    sub-second call if the call released the GIL."""
    q, k, v = qkv("bshd", np.float32, s_q=2048, s_kv=2048, b=1, h=2, d=64)
    stsa.attention(q, k, v, threads=1, layout="bshd")  # warm up
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    old = sys.getswitchinterval()
    t = threading.Thread(target=spin)
    try:
        t.start()
        time.sleep(0.01)
        sys.setswitchinterval(0.5)
        before = count[0]
        t0 = time.perf_counter()
        stsa.attention(q, k, v, threads=1, layout="bshd")
        elapsed = time.perf_counter() - t0
        during = count[0] - before
    finally:
        sys.setswitchinterval(old)
        stop.set()
        t.join()
    assert during > 0, f"no Python progress during a {elapsed * 1e3:.0f} ms call"


def test_unknown_backend_in_the_environment_names_the_choices(monkeypatch):
    # read by stsa_ctx_create; its message reaches Python through stsa_ctx_create_msg
    monkeypatch.setenv("STSA_BACKEND", "gpu")
    names = ", ".join(stsa.backends())
    assert names.startswith("auto, ref, portable, ")
    with pytest.raises(stsa.Error, match=f"STSA_BACKEND=gpu is not one of {names} "):
        stsa.Context()
