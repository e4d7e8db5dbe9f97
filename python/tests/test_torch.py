"""CPU torch tensors: torch in, torch out, bfloat16, zero copy."""

import numpy as np
import pytest

import reference as ref
import stsa
from stsa import _core

torch = pytest.importorskip("torch")

B, S, H, D = 2, 45, 3, 32
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def tensors(dtype, layout="bshd", seed=0, s_kv=S):
    g = torch.Generator().manual_seed(seed)
    shape = {"bshd": (B, S, H, D), "bhsd": (B, H, S, D), "shd": (S, H, D)}[layout]
    kv_shape = list(shape)
    kv_shape[{"bshd": 1, "bhsd": 2, "shd": 0}[layout]] = s_kv
    return (torch.randn(shape, generator=g).to(dtype),
            torch.randn(kv_shape, generator=g).to(dtype),
            torch.randn(kv_shape, generator=g).to(dtype))


def sdpa64(q, k, v, layout):
    """torch's own attention in float64, returned in `layout`."""
    to_bhsd = {"bshd": lambda a: a.transpose(1, 2), "bhsd": lambda a: a,
               "shd": lambda a: a.transpose(0, 1)[None]}[layout]
    out = torch.nn.functional.scaled_dot_product_attention(
        *(to_bhsd(a.double()) for a in (q, k, v)))
    return {"bshd": lambda a: a.transpose(1, 2), "bhsd": lambda a: a,
            "shd": lambda a: a[0].transpose(0, 1)}[layout](out)


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "shd"])
@pytest.mark.parametrize("name", sorted(DTYPES))
def test_torch_in_torch_out(name, layout, threads):
    q, k, v = tensors(DTYPES[name], layout)
    out = stsa.attention(q, k, v, layout=layout, threads=threads)
    assert isinstance(out, torch.Tensor) and out.dtype == q.dtype and out.shape == q.shape
    assert out.device.type == "cpu"
    err = (out.double() - sdpa64(q, k, v, layout)).abs().max().item()
    assert err < ref.TOL[name], err


def test_lse_is_a_tensor():
    q, k, v = tensors(torch.float32)
    out, lse = stsa.attention(q, k, v, return_lse=True, layout="bshd")
    assert isinstance(lse, torch.Tensor) and lse.shape == (B, H, S)
    want = torch.logsumexp(torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double())
                           / D ** 0.5, dim=-1)
    assert (lse.double() - want).abs().max().item() < 2e-5


def test_zero_copy_views_and_out():
    base = torch.randn(B, H, S, D)
    q = base.transpose(1, 2)                        # [B,S,H,D] view of [B,H,S,D] memory
    k = torch.randn(B, 2 * S, H, D)[:, ::2]          # sliced
    v = torch.randn(B, S, H, D + 8)[..., :D]         # narrowed rows
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        view = _core.view(x, name, "bshd")
        assert not view.copied and stsa._lib.address(view.tensor.data) == x.data_ptr()
    out_buf = torch.empty(B, H, S, D, dtype=torch.bfloat16)
    out = out_buf.transpose(1, 2)
    got = stsa.attention(q, k, v, out=out, layout="bshd")
    assert got is out and got.data_ptr() == out_buf.data_ptr()
    err = (out_buf.transpose(1, 2).double() - sdpa64(q, k, v, "bshd")).abs().max().item()
    assert err < ref.TOL["bfloat16"]


def test_expanded_inputs_are_copied_and_expanded_out_refused():
    q, k, v = tensors(torch.float32)
    v_exp = v[:, :1].expand(B, S, H, D)              # stride 0 on S
    assert _core.view(v_exp, "v", "bshd").copied
    out = stsa.attention(q, k, v_exp, layout="bshd")
    assert (out.double() - sdpa64(q, k, v_exp, "bshd")).abs().max().item() < 2e-5
    with pytest.raises(ValueError, match="cannot be written in place"):
        stsa.attention(q, k, v, out=torch.empty(B, 1, H, D).expand(B, S, H, D), layout="bshd")


def test_autograd_and_device_rules():
    q, k, v = tensors(torch.float32)
    q.requires_grad_(True)
    out = stsa.attention(q, k, v, layout="bshd")     # no backward: inputs are detached
    assert not out.requires_grad
    with pytest.raises(ValueError, match="requires grad"):
        stsa.attention(q.detach(), k, v, layout="bshd",
                       out=torch.empty(B, S, H, D, requires_grad=True))
    with pytest.raises(ValueError, match="is on meta"):
        stsa.attention(q.detach().to("meta"), k, v, layout="bshd")
    with pytest.raises(TypeError, match="torch.float64 is not supported"):
        stsa.attention(q.detach().double(), k, v, layout="bshd")


def test_shape_error_message_from_c():
    q, k, v = tensors(torch.float16)
    with pytest.raises(ValueError, match="^k has head dim 16 but q has 32$"):
        stsa.attention(q, k[..., :16], v, layout="bshd")


def test_sparse_and_svg_with_tensors(threads):
    g = stsa.Geometry(4, 4, 6)
    qn, kn, vn, _ = stsa.workload(g, 2, 16, seed=3)
    q, k, v = (torch.from_numpy(a).to(torch.bfloat16) for a in (qn, kn, vn))
    mask = stsa.masks.frame_window(g, 1) | stsa.masks.sink_frames(g, 1)
    out = stsa.sparse_attention(q, k, v, mask=mask, threads=threads, layout="bshd")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    keep = mask.to_dense(g.tokens)
    want, _ = ref.attention(q.float().numpy(), k.float().numpy(), v.float().numpy(), keep=keep)
    assert np.abs(out.float().numpy() - want).max() < ref.TOL["bfloat16"]
    svg = stsa.SVG(g, heads=2, head_dim=16, sample_rows=16, threads=threads)
    out, info = svg(q, k, v, layer=1, step=1, layout="bshd")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert info.kinds.shape == (1, 2)


def test_negative_bit_views_are_resolved_for_inputs_and_refused_for_out():
    q, k, v = tensors(torch.float32)
    qn, vn = torch._neg_view(q), torch._neg_view(v)  # lazily negated: memory holds q, v
    assert qn.is_neg() and vn.is_neg()
    assert _core.view(qn, "q", "bshd").copied
    out = stsa.attention(qn, k, vn, layout="bshd")
    want = sdpa64(-q, k, -v, "bshd")  # computed as if the bit were not set before
    assert (out.double() - want).abs().max().item() < 2e-5
    with pytest.raises(ValueError, match="^out has the negative bit set"):
        stsa.attention(q, k, v, layout="bshd", out=torch._neg_view(torch.empty(B, S, H, D)))
    assert not torch.ones(2).conj().is_conj()  # real tensors never carry the conj bit
    with pytest.raises(TypeError, match="torch.complex64 is not supported"):
        stsa.attention(q.to(torch.complex64).conj(), k, v, layout="bshd")


def test_sparse_and_empty_tensors_are_named():
    q, k, v = tensors(torch.float32)
    with pytest.raises(TypeError, match=r"^k is a torch.sparse_coo torch tensor; stsa takes "
                                        r"dense \(strided\) tensors only: pass k.to_dense\(\)$"):
        stsa.attention(q, k.to_sparse(), v, layout="bshd")
    # a 0-size tensor used to be reported as "data pointer is NULL"
    with pytest.raises(ValueError, match=r"^q is empty \(shape \(2, 0, 3, 32\), layout 'bshd'\)"):
        stsa.attention(q[:, :0], k, v, layout="bshd")
    with pytest.raises(ValueError, match=r"^v: head dim is 0 \(shape \(2, 45, 3, 0\)"):
        stsa.attention(q, k, v[..., :0], layout="bshd")
