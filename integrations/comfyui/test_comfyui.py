"""The ComfyUI adapter on real torch tensors in ComfyUI's calling convention
(ComfyUI is not installed: `func` below is a plain SDPA attention with its
signature, and the MODEL a stand-in with clone() and model_options)."""

import copy
import os
import sys

import pytest

torch = pytest.importorskip("torch")

# the node package's modules, as ComfyUI's loader would find them beside each other
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stsa  # noqa: E402
import stsa_nodes  # noqa: E402
from stsa_override import StsaAttention, step_of  # noqa: E402

GRID = (3, 4, 6)  # 72 tokens
HEADS, D = 2, 32
SCHEDULE = torch.tensor([1.0, 0.8, 0.6, 0.4, 0.0])


def comfy_sdpa(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
               skip_output_reshape=False, **kwargs):
    """ComfyUI's PyTorch attention, as its convention defines it."""
    if not skip_reshape:
        q, k, v = (x.unflatten(-1, (heads, -1)).transpose(1, 2) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out if skip_output_reshape else out.transpose(1, 2).flatten(-2)


def qkv(seed=0, s_kv=None, bhsd=False):
    g = torch.Generator().manual_seed(seed)
    n = GRID[0] * GRID[1] * GRID[2]
    shapes = [(1, n, HEADS * D)] + [(1, s_kv or n, HEADS * D)] * 2
    q, k, v = (torch.randn(*s, generator=g) for s in shapes)
    if bhsd:
        q, k, v = (x.unflatten(-1, (HEADS, -1)).transpose(1, 2) for x in (q, k, v))
    return q, k, v


def options(step=0, block=0):
    return {"grid_sizes": GRID, "block_index": block, "sigmas": SCHEDULE[step:step + 1],
            "sample_sigmas": SCHEDULE}


def call(override, q, k, v, **kw):
    return override(comfy_sdpa, q, k, v, HEADS, transformer_options=kw.pop("opts"), **kw)


def rel_max(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("skip_reshape", [False, True])
@pytest.mark.parametrize("skip_output_reshape", [False, True])
def test_dense_equals_sdpa_in_every_layout(skip_reshape, skip_output_reshape):
    q, k, v = qkv(bhsd=skip_reshape)
    kw = dict(skip_reshape=skip_reshape, skip_output_reshape=skip_output_reshape)
    want = comfy_sdpa(q, k, v, HEADS, **kw)
    override = StsaAttention(method="dense")
    got = call(override, q, k, v, opts=options(), **kw)
    assert got.shape == want.shape
    assert rel_max(got, want) <= 1e-5
    assert override.stats[0] == {"dense": 1}


def test_steps_and_layers_from_sigmas_and_blocks():
    assert step_of(options(step=2)) == 2 and step_of({}) is None
    override = StsaAttention(method="svg", density=0.4, dense_steps=1, dense_layers=1)
    q, k, v = qkv()
    want = comfy_sdpa(q, k, v, HEADS)
    got = {(step, block): call(override, q, k, v, opts=options(step, block))
           for step in (0, 1) for block in (0, 1)}
    for key in ((0, 0), (0, 1), (1, 0)):  # the dense step, the dense layer
        assert rel_max(got[key], want) <= 1e-5
    # block 1 at step 1 is sparse: what an SVG session gives at layer 1, step 1
    session = stsa.SVG(stsa.Geometry(*GRID), density=0.4, dense_steps=1, dense_layers=1,
                       sample_rows=64, sink_frames=1)
    direct, info = session(*(x.unflatten(-1, (HEADS, -1)) for x in (q, k, v)), layer=1,
                           step=1, layout="bshd")
    assert not info.dense and torch.equal(got[(1, 1)], direct.flatten(-2))
    assert override.stats[0] == {"dense": 2}
    assert override.stats[1] == {"dense": 1, "sparse": 1}


@pytest.mark.parametrize("method", ["svg2", "auto"])
def test_clustered_methods_run_sparse(method):
    override = StsaAttention(method=method, dense_steps=0, dense_layers=0)
    q, k, v = qkv()
    call(override, q, k, v, opts=options(1))
    assert override.stats[1] == {"sparse": 1}


def test_other_calls_go_to_comfyui():
    override = StsaAttention(method="dense")
    q, k, v = qkv(s_kv=10)  # cross-attention
    got = call(override, q, k, v, opts=options())
    assert torch.equal(got, comfy_sdpa(q, k, v, HEADS))
    q, k, v = qkv()
    mask = torch.ones(72, 72, dtype=torch.bool)
    got = call(override, q, k, v, mask=mask, opts=options())
    assert torch.equal(got, comfy_sdpa(q, k, v, HEADS, mask=mask))
    call(override, q, k, v, opts={**options(), "grid_sizes": (2, 4, 6)})
    assert override.stats[0] == {"comfyui: not self-attention": 1, "comfyui: a mask": 1,
                                 "comfyui: tokens the grid does not explain": 1}


class FakeModelPatcher:
    """What the patch node uses of ComfyUI's ModelPatcher."""

    def __init__(self):
        self.model_options = {"transformer_options": {}}

    def clone(self):
        other = FakeModelPatcher()
        other.model_options = copy.deepcopy(self.model_options)
        return other


def test_nodes_patch_a_copy_of_the_model():
    (settings,) = stsa_nodes.StsaSettings().settings("svg", 0.0, 0.1, 10, 1)
    assert settings == dict(method="svg", density=None, max_error=0.1, dense_steps=10,
                            dense_layers=1)
    model = FakeModelPatcher()
    (patched,) = stsa_nodes.StsaPatchModel().patch(model, settings)
    override = patched.model_options["transformer_options"]["optimized_attention_override"]
    assert isinstance(override, StsaAttention) and override.method == "svg"
    assert "optimized_attention_override" not in model.model_options["transformer_options"]
    assert set(stsa_nodes.NODE_CLASS_MAPPINGS) == {"StsaSettings", "StsaPatchModel"}


def test_bad_method():
    with pytest.raises(ValueError, match="method"):
        StsaAttention(method="flash")
