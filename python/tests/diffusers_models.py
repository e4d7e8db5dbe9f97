"""Tiny randomly initialised diffusers video transformers (nothing is
downloaded) and inputs for them: Wan 2.1, HunyuanVideo, CogVideoX 1.0 and
1.5. Each latent video is 3 frames of 8 x 12 latents, patch 2 x 2: 3 x 4 x 6
= 72 video tokens; CogVideoX 1.5 patches 2 latent frames into one token frame
(patch_size_t=2), so its video is 6 latent frames for the same 72 tokens (its
pipelines pad an odd latent frame count to an even one before the
transformer sees it)."""

import torch

LATENT = (3, 8, 12)
WAN = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32,
           in_channels=4, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=64,
           num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
           rope_max_seq_len=32)
HUNYUAN = dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16,
               num_layers=1, num_single_layers=1, num_refiner_layers=1, patch_size=2,
               patch_size_t=1, text_embed_dim=16, pooled_projection_dim=8,
               rope_axes_dim=(4, 6, 6), guidance_embeds=True)
COGVIDEOX = dict(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
                 time_embed_dim=8, text_embed_dim=16, num_layers=2, sample_width=12,
                 sample_height=8, sample_frames=9, patch_size=2, temporal_compression_ratio=4,
                 max_text_seq_length=8)
# 1.5: frames patched in pairs, rotary embeddings (computed by the pipeline,
# passed to the transformer) instead of learned or sin-cos positions, and the
# I2V model's ofs embedding (as wide as the time embedding, which it is added
# to); sample_height/width bound the rotary grid (base size = sample // patch)
COGVIDEOX15 = dict(COGVIDEOX, patch_size_t=2, use_rotary_positional_embeddings=True,
                   use_learned_positional_embeddings=False, ofs_embed_dim=8,
                   sample_height=16, sample_width=16)
CONFIGS = {"wan": WAN, "hunyuan": HUNYUAN, "cogvideox": COGVIDEOX, "cogvideox15": COGVIDEOX15}
# the latent video (frames, height, width) of 3 x 4 x 6 tokens, per model
LATENTS = {kind: LATENT for kind in CONFIGS} | {"cogvideox15": (6, 8, 12)}


def make(kind, seed=0, **extra):
    import diffusers
    cls = {"wan": diffusers.WanTransformer3DModel,
           "hunyuan": diffusers.HunyuanVideoTransformer3DModel,
           "cogvideox": diffusers.CogVideoXTransformer3DModel,
           "cogvideox15": diffusers.CogVideoXTransformer3DModel}[kind]
    torch.manual_seed(seed)
    model = cls(**{**CONFIGS[kind], **extra}).eval()
    # diffusers initialises some projections to zero; random weights
    # everywhere make every attention matter for the output
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def inputs(kind, timestep=500, latent=None, seed=1, batch=1, text_real=None):
    """The transformer's keyword arguments for one call (latent: LATENTS[kind]
    unless given). text_real (HunyuanVideo): real text tokens per batch entry
    of 6 (the rest padding)."""
    g = torch.Generator().manual_seed(seed)
    f, h, w = latent or LATENTS[kind]
    t = torch.full((batch,), float(timestep))
    if kind == "wan":
        return dict(hidden_states=torch.randn(batch, 4, f, h, w, generator=g), timestep=t,
                    encoder_hidden_states=torch.randn(batch, 10, 16, generator=g),
                    return_dict=False)
    if kind == "hunyuan":
        mask = torch.zeros(batch, 6, dtype=torch.long)
        for b, n in enumerate(text_real or [6] * batch):
            mask[b, :n] = 1
        return dict(hidden_states=torch.randn(batch, 4, f, h, w, generator=g), timestep=t,
                    encoder_hidden_states=torch.randn(batch, 6, 16, generator=g),
                    encoder_attention_mask=mask,
                    pooled_projections=torch.randn(batch, 8, generator=g),
                    guidance=torch.full((batch,), 6000.0), return_dict=False)
    kw = dict(hidden_states=torch.randn(batch, f, 4, h, w, generator=g),
              encoder_hidden_states=torch.randn(batch, 8, 16, generator=g), timestep=t,
              return_dict=False)
    if kind == "cogvideox15":
        kw.update(image_rotary_emb=cogvideox15_rotary(latent or LATENTS[kind]),
                  ofs=torch.full((1,), 2.0))
    return kw


def cogvideox15_rotary(latent):
    """The rotary embeddings CogVideoXPipeline computes for a 1.5 transformer
    (_prepare_rotary_positional_embeddings: one position per token frame,
    a "slice" of the grid of the config's sample size)."""
    from diffusers.models.embeddings import get_3d_rotary_pos_embed
    c = COGVIDEOX15
    f, h, w = latent
    p, p_t = c["patch_size"], c["patch_size_t"]
    return get_3d_rotary_pos_embed(
        embed_dim=c["attention_head_dim"], crops_coords=None, grid_size=(h // p, w // p),
        temporal_size=(f + p_t - 1) // p_t, grid_type="slice",
        max_size=(c["sample_height"] // p, c["sample_width"] // p))


def run(model, kw):
    with torch.no_grad():
        return model(**kw)[0]
