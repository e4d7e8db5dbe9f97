"""stsa.diffusers on a tiny randomly initialised WanTransformer3DModel.

Nothing is downloaded: the model is built from a config. Skipped when torch
or diffusers is not installed (`make test-diffusers` installs them)."""

import copy

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import stsa  # noqa: E402
import stsa.diffusers  # noqa: E402

# 3 latent frames of 8 x 12 latents, patch (1, 2, 2): 3 x 4 x 6 = 72 tokens.
# In pixels (Wan 2.1 VAE: 4x temporal, 8x spatial): 9 frames of 64 x 96.
LATENT = (3, 8, 12)
VIDEO = dict(height=64, width=96, num_frames=9)
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32,
              in_channels=4, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=64,
              num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
              eps=1e-6, rope_max_seq_len=32)


def make_model(seed=0, **extra):
    from diffusers import WanTransformer3DModel
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**{**CONFIG, **extra}).eval()
    # diffusers initialises some output projections to zero; random weights
    # everywhere make every attention matter for the output
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def inputs(seed=1, text_tokens=20, image_tokens=0, image_dim=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, CONFIG["in_channels"], *LATENT, generator=g)
    text = torch.randn(1, text_tokens, CONFIG["text_dim"], generator=g)
    kw = dict(hidden_states=x, timestep=torch.tensor([500]), encoder_hidden_states=text,
              return_dict=False)
    if image_tokens:
        kw["encoder_hidden_states_image"] = torch.randn(1, image_tokens, image_dim,
                                                        generator=g)
    return kw


def run(model, kw):
    with torch.no_grad():
        return model(**kw)[0]


def rel_max(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def test_dense_mode_matches_diffusers_attention():
    model = make_model()
    kw = inputs()
    want = run(model, kw)
    ctl = stsa.diffusers.install_svg(model, mode="dense", **VIDEO)
    assert ctl.geometry == stsa.Geometry(3, 4, 6)
    assert all(isinstance(b.attn1.processor, stsa.diffusers.SVGAttnProcessor)
               for b in model.blocks)
    got = run(model, kw)
    err = rel_max(got, want)
    print(f"dense stsa vs diffusers: max abs diff / max abs = {err:.2e}")
    assert err < 1e-4
    # what each layer's self-attention ran (this thread's default context)
    backend = stsa.default_context().backend
    assert sorted(ctl.ran) == [0, 1]
    assert all(r["backend"] == backend and r["arithmetic"] in ("f64", "f32")
               for r in ctl.ran.values()), ctl.ran
    ctl.remove()
    assert not isinstance(model.blocks[0].attn1.processor, stsa.diffusers.SVGAttnProcessor)
    assert torch.equal(run(model, kw), want)


def test_dense_mode_with_fused_projections():
    model = make_model(seed=2)
    kw = inputs(seed=3)
    want = run(model, kw)
    model.fuse_qkv_projections()
    assert model.blocks[0].attn1.fused_projections
    stsa.diffusers.install_svg(model, mode="dense", **VIDEO)
    assert rel_max(run(model, kw), want) < 1e-4


def test_dense_mode_image_to_video_branch():
    # I2V: encoder states are [image tokens, 512 text tokens]; attn2 has add_k/v
    inner = CONFIG["num_attention_heads"] * CONFIG["attention_head_dim"]
    model = make_model(seed=4, image_dim=24, added_kv_proj_dim=inner)
    assert model.blocks[0].attn2.add_k_proj is not None
    kw = inputs(seed=5, text_tokens=512, image_tokens=7, image_dim=24)
    want = run(model, kw)
    stsa.diffusers.install_svg(model, mode="dense", **VIDEO)
    err = rel_max(run(model, kw), want)
    print(f"I2V dense stsa vs diffusers: {err:.2e}")
    assert err < 1e-4


def test_svg_mode_steps_and_error():
    model = make_model()
    kw = inputs()
    want = run(model, kw)
    ctl = stsa.diffusers.install_svg(model, density=0.5, dense_steps=1, dense_layers=1,
                                     sample_rows=16, **VIDEO)
    assert ctl.svg is not None and ctl.svg.heads == 2 and ctl.svg.head_dim == 32
    ctl.set_step(0)  # a dense step: same as dense attention
    assert rel_max(run(model, kw), want) < 1e-4
    assert ctl.infos[1].dense and ctl.infos[1].step == 0
    ctl.set_step(5)
    got = run(model, kw)
    err = rel_max(got, want)
    infos = ctl.infos
    print(f"SVG density 0.5, step 5: max abs diff / max abs = {err:.3e}; "
          f"layer 1 kinds {infos[1].kinds.tolist()} density {infos[1].density:.3f}")
    assert torch.isfinite(got).all()
    assert infos[0].dense and not infos[1].dense and infos[1].step == 5
    assert 0 < err < 0.5
    # what each layer's self-attention ran, in its info and on the processor
    assert ctl.ran == {layer: info.ran for layer, info in infos.items()}
    assert ctl.ran[1]["backend"] == ctl.svg.context.backend
    # the pipeline callback advances the step
    assert ctl.callback_on_step_end(None, 7, None, {"x": 1}) == {"x": 1}
    assert ctl.step == 8 and all(p.step == 8 for p in ctl.processors)


def test_svg2_mode_budget_and_defaults():
    model = make_model()
    kw = inputs()
    want = run(model, kw)
    ctl = stsa.diffusers.install_svg(model, mode="svg2", dense_layers=1, sample_rows=16,
                                     q_clusters=4, kv_clusters=8, **VIDEO)
    assert isinstance(ctl.svg, stsa.SVG2) and ctl.svg.config.svg2.top_p == 0.9
    assert "mode='svg2'" in repr(model.blocks[1].attn1.processor)
    ctl.set_step(3)
    got = run(model, kw)
    info = ctl.infos[1]
    err = rel_max(got, want)
    print(f"SVG2 top-p 0.9: max abs diff / max abs = {err:.3e}; layer 1 density "
          f"{info.density:.3f}, clusters {info.q_clusters} / {info.kv_clusters}")
    assert torch.isfinite(got).all() and 0 < err < 0.5 and info.density < 1
    assert ctl.infos[0].dense and (info.kinds == "semantic").all() and info.cold
    assert (info.q_clusters, info.kv_clusters) == (4, 8)
    ctl.remove()
    # a tiny budget: every head runs dense or keeps every key (72 tokens make
    # one automatic key cluster)
    ctl = stsa.diffusers.install_svg(model, mode="svg2", top_p=0.5, max_error=1e-9,
                                     sample_rows=16, **VIDEO)
    assert ctl.svg.config.svg2.top_p == 0.5 and ctl.svg.config.max_rel_error == 1e-9
    assert rel_max(run(model, kw), want) < 1e-4
    for i in ctl.infos.values():
        assert ((i.budget == "dense") | (i.est_error == 0)).all(), (i.budget, i.est_error)
    ctl.remove()
    ctl = stsa.diffusers.install_svg(model, mode="svg2", density=0.4, sample_rows=16,
                                     **VIDEO)
    assert ctl.svg.config.svg2.top_p == 0 and ctl.svg.config.density == 0.4
    # SVG keeps its default density, and top_p is SVG2's alone
    assert stsa.diffusers.install_svg(model, **VIDEO).svg.config.density == 0.3
    with pytest.raises(ValueError, match="top_p = 0.9 is a setting of mode 'svg2'"):
        stsa.diffusers.install_svg(model, top_p=0.9, **VIDEO)
    with pytest.raises(ValueError, match="kv_clusters = 8 is a setting of mode 'svg2', not "
                                         "'dense'"):
        stsa.diffusers.install_svg(model, mode="dense", kv_clusters=8, **VIDEO)
    with pytest.raises(ValueError, match="max_error = 0.1 is a setting of modes 'svg' and "
                                         "'svg2', not 'dense'"):
        stsa.diffusers.install_svg(model, mode="dense", max_error=0.1, **VIDEO)
    with pytest.raises(ValueError, match="is not 'svg', 'svg2' or 'dense'"):
        stsa.diffusers.install_svg(model, mode="svg3", **VIDEO)


def test_bfloat16_model_runs():
    model = make_model().to(torch.bfloat16)
    kw = inputs()
    kw["hidden_states"] = kw["hidden_states"].to(torch.bfloat16)
    kw["encoder_hidden_states"] = kw["encoder_hidden_states"].to(torch.bfloat16)
    want = run(model, kw).float()
    stsa.diffusers.install_svg(model, mode="dense", **VIDEO)
    got = run(model, kw)
    assert got.dtype == torch.bfloat16
    assert rel_max(got.float(), want) < 0.05


def test_wrong_video_size_is_reported():
    model = make_model()
    stsa.diffusers.install_svg(model, height=64, width=64, num_frames=9)
    with pytest.raises(ValueError, match="is for 48 tokens .* but self-attention got 72"):
        run(model, inputs())


def test_processor_is_a_copyable_plain_object():
    proc = stsa.diffusers.SVGAttnProcessor(layer=3)
    proc.set_step(4)
    assert copy.copy(proc).step == 4 and "layer=3" in repr(proc)
