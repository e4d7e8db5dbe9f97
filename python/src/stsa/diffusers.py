"""stsa inside diffusers pipelines.

    import stsa.diffusers
    handle = stsa.diffusers.enable(pipe)          # Wan 2.1/2.2, HunyuanVideo, CogVideoX
    video = pipe(prompt, height=480, width=832, num_frames=81).frames
    handle.stats()                                 # per step: dense/sparse calls, density, ms
    handle.disable()

enable() needs no geometry and no callback (see its docstring and
docs/python.md). The older install_svg below (Wan only, geometry and steps
given by hand) keeps working.

install_svg: a drop-in attention processor for diffusers' Wan transformer.

    import stsa.diffusers
    ctl = stsa.diffusers.install_svg(pipe.transformer, height=480, width=832,
                                     num_frames=81, density=0.3, dense_steps=10,
                                     dense_layers=1)
    video = pipe(prompt, height=480, width=832, num_frames=81,
                 callback_on_step_end=ctl.callback_on_step_end).frames
    # or, in a hand-written loop: ctl.set_step(i) before each transformer call

SVGAttnProcessor has the call signature of diffusers' WanAttnProcessor
(diffusers 0.42, models/transformers/transformer_wan.py) and computes the same
thing: q/k/v projections (fused or not), RMS norm of q and k across heads,
the rotary embedding of interleaved pairs, the image-conditioning branch of
I2V models, the output projection. Self-attention runs through an stsa SVG
session (mode "svg"), an SVG2 session (mode "svg2") or dense stsa attention
(mode "dense"); cross-attention runs dense
through stsa.attention. The denoising step is set explicitly
(controller.set_step(i), or processor.step = i); nothing in the scheduler or
pipeline is patched. Inference only: no gradients flow through stsa.

Needs torch (CPU tensors); diffusers itself is not imported here.
"""

import torch

from . import _core
from .attention import attention
from .geometry import Geometry
from .svg import SVG
from .svg2 import SVG2
from ._enable import Handle, StepStats
from ._enable import enable as _enable
from ._enable import transformers_of

__all__ = ["enable", "dump", "Handle", "StepStats", "SVGAttnProcessor", "SVGController",
           "install_svg", "apply_rotary"]


def enable(pipe_or_transformer, preset=None, method="svg", max_error=None, **overrides):
    """Runs the self-attention of a diffusers video pipeline (or of one
    transformer) through stsa. Returns a Handle: handle.stats() (one
    StepStats per step), handle.disable().

    pipe_or_transformer: a pipeline (its .transformer, and Wan 2.2's
    .transformer_2, which share the step count and number their layers on
    from the first's), or a WanTransformer3DModel,
    HunyuanVideoTransformer3DModel or CogVideoXTransformer3DModel.
    preset: an SVG preset name whose density, dense_steps, dense_layers and
    sample_rows are the defaults; None picks the model family's preset
    nearest the call's resolution (wan21-480p / wan21-720p, hunyuan-480p /
    hunyuan-720p, cogvideox15 for CogVideoX 1.0 and 1.5). method: "svg", "svg2", "auto" (stsa.Auto: per head the
    best of SVG, SVG2 and dense; SVG2's settings, top-p 0.9 unless
    overridden) or "dense" (every self-attention call dense through stsa: a
    reference). max_error: the error budget (stsa.SVG, stsa.SVG2,
    stsa.Auto; a ValueError with "dense"). overrides: any other setting of
    stsa.SVG / stsa.SVG2 (density, dense_steps, dense_layers, sample_rows,
    sink_frames, seed, top_p, q_clusters, kv_clusters, threads, ...);
    threads follows torch.get_num_threads() at every call unless given.

    stats() per step: dense, sparse and SDPA calls, calls the budget sent
    dense in every head, the heads it widened or sent dense, the mean
    density and largest estimated error of the sparse calls, auto's heads
    per candidate (choices), ms (see StepStats).

    The token grid is read at every transformer call from the latents'
    shape and the model's patch size (CogVideoX 1.5's patch_size_t=2: two
    latent frames a token frame); the step advances when a transformer
    call brings a new (smaller) timestep, and a larger one starts a new
    generation at step 0 (the two calls of a CFG pair share a step). Layers
    are numbered by block. Calls stsa cannot take (dropout, a causal or
    non-prefix mask, tensors off the CPU, gradients) run PyTorch's SDPA and
    are counted in stats() with the reason; a RuntimeWarning says when a
    generation reaches its first sparse step with no sparse call, and
    (once a process) when stsa's OpenMP threads spin because torch started
    the runtime first with no wait policy set (stsa.threading_info())."""
    return _enable(pipe_or_transformer, preset=preset, method=method, max_error=max_error,
                   **overrides)


def dump(pipe_or_transformer, path, layer=0, step=0, batch=0):
    """Writes one layer's self-attention q, k and v at one denoising step
    to the safetensors file `path` (tensors "q", "k", "v", [1, S, H, D]:
    batch entry `batch`, HunyuanVideo's text padding cut off), so that
    `stsa run` works on a real model's tensors. Layers and steps are
    counted as enable() counts them; the model's output is unchanged
    (every call runs diffusers' own SDPA). Returns a handle: after the
    step has run, handle.flags are `stsa run`'s input and geometry flags
    for the file (the geometry is also in the file's metadata) and
    handle.command an `stsa run --mode svg` line with them, the layer and
    the step (add --out and/or --report); disable() removes the hooks. Cannot be combined with enable() on the same transformer."""
    from ._dump import DumpHandle
    return DumpHandle(transformers_of(pipe_or_transformer), path, layer, step, batch)

# Wan's text encoder context length: in I2V models the encoder states are
# [image tokens, 512 text tokens] (diffusers hard-codes the same number).
WAN_TEXT_TOKENS = 512


def apply_rotary(x, freqs_cos, freqs_sin):
    """Rotates the interleaved pairs (x[2i], x[2i+1]) of each head by the
    angles of Wan's rotary table. x: [B, S, H, D]; freqs_*: [1, S, 1, D] with
    every angle's cos/sin written twice (pair-interleaved). Computed in the
    table's precision (float64 on CPU), returned in x's dtype."""
    pairs = x.unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = freqs_cos[..., 0::2], freqs_sin[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def _projections(attn, hidden_states, context):
    """q from hidden_states, k and v from context (hidden_states for
    self-attention), through the fused linears when the module has them."""
    fused = getattr(attn, "fused_projections", False)
    if fused and context is hidden_states and hasattr(attn, "to_qkv"):
        return attn.to_qkv(hidden_states).chunk(3, dim=-1)
    query = attn.to_q(hidden_states)
    if fused and hasattr(attn, "to_kv"):
        key, value = attn.to_kv(context).chunk(2, dim=-1)
    else:
        key, value = attn.to_k(context), attn.to_v(context)
    return query, key, value


def _image_projections(attn, image_states):
    if getattr(attn, "fused_projections", False) and hasattr(attn, "to_added_kv"):
        return attn.to_added_kv(image_states).chunk(2, dim=-1)
    return attn.add_k_proj(image_states), attn.add_v_proj(image_states)


class SVGAttnProcessor:
    """Wan attention through stsa.

    svg: an stsa.SVG or stsa.SVG2 session for the self-attention geometry,
    or None to run self-attention dense through stsa.attention. layer: this block's index
    (SVG's dense_layers and profiling depend on it). step: the denoising step
    index, set by the caller before each transformer call. threads: worker
    threads of the dense stsa calls (None: all CPUs). After a self-attention
    call in SVG mode, last_info holds its stsa.SVGInfo. After one in any
    mode, last_ran holds what its attention ran, as stsa.Context.last_run
    gives it ({"backend", "arithmetic", "bf16_terms", "pv_precision", "why"}; in SVG mode
    last_info.ran).
    """

    # diffusers sets these on processors (attention backends, context
    # parallelism); stsa ignores them but keeps them settable.
    _attention_backend = None
    _parallel_config = None

    def __init__(self, svg=None, layer=0, step=0, threads=None):
        self.svg = svg
        self.layer = int(layer)
        self.step = int(step)
        self.threads = threads
        self.last_info = None
        self.last_ran = None

    def set_step(self, step):
        self.step = int(step)

    def _dense(self, q, k, v):
        return attention(q, k, v, layout="bshd", threads=self.threads)

    def _self_attention(self, q, k, v):
        if self.svg is None:
            out = self._dense(q, k, v)
            # stsa.attention ran on this thread's default context
            self.last_ran = _core.default_context().last_run
            return out
        n, expected = q.shape[1], self.svg.tokens
        if n != expected:
            raise ValueError(
                f"stsa SVG session of layer {self.layer} is for {expected} tokens "
                f"({self.svg.geometry}) but self-attention got {n}; install the processor "
                f"with the video's height, width and num_frames")
        out, self.last_info = self.svg(q, k, v, layer=self.layer, step=self.step,
                                       layout="bshd")
        self.last_ran = self.last_info.ran
        return out

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        if attention_mask is not None:
            raise NotImplementedError("stsa.diffusers.SVGAttnProcessor: attention_mask is "
                                      "not supported (Wan passes none)")
        self_attention = encoder_hidden_states is None
        image_states = None
        if not self_attention and attn.add_k_proj is not None:
            n_image = encoder_hidden_states.shape[1] - WAN_TEXT_TOKENS
            image_states = encoder_hidden_states[:, :n_image]
            encoder_hidden_states = encoder_hidden_states[:, n_image:]
        context = hidden_states if self_attention else encoder_hidden_states

        query, key, value = _projections(attn, hidden_states, context)
        query = attn.norm_q(query)
        key = attn.norm_k(key)
        heads = attn.heads
        query = query.unflatten(2, (heads, -1))  # [B, S, H, D]: stsa's "bshd"
        key = key.unflatten(2, (heads, -1))
        value = value.unflatten(2, (heads, -1))
        if rotary_emb is not None:
            query = apply_rotary(query, *rotary_emb)
            key = apply_rotary(key, *rotary_emb)

        image_out = None
        if image_states is not None:
            key_img, value_img = _image_projections(attn, image_states)
            key_img = attn.norm_added_k(key_img).unflatten(2, (heads, -1))
            value_img = value_img.unflatten(2, (heads, -1))
            image_out = self._dense(query, key_img, value_img).flatten(2, 3).type_as(query)

        if self_attention:
            out = self._self_attention(query, key, value)
        else:
            out = self._dense(query, key, value)
        out = out.flatten(2, 3).type_as(query)
        if image_out is not None:
            out = out + image_out
        out = attn.to_out[0](out)
        return attn.to_out[1](out)

    def __repr__(self):
        mode = "dense" if self.svg is None else "svg2" if isinstance(self.svg, SVG2) else "svg"
        return f"SVGAttnProcessor(layer={self.layer}, step={self.step}, mode={mode!r})"


class SVGController:
    """What install_svg returns: the processors it installed and the shared
    SVG session. set_step(i) before each transformer call (or pass
    callback_on_step_end to a diffusers pipeline); remove() puts the
    original processors back."""

    def __init__(self, transformer, processors, originals, svg, geometry, mode):
        self.transformer = transformer
        self.processors = processors  # self-attention processors, by layer
        self._originals = originals   # (module, processor) pairs to restore
        self.svg = svg
        self.geometry = geometry
        self.mode = mode
        self.step = 0

    def set_step(self, step):
        """The denoising step index (0-based) of the next transformer call."""
        self.step = int(step)
        for p in self._all():
            p.step = self.step

    def callback_on_step_end(self, pipe, i, t, callback_kwargs):
        """For a diffusers pipeline's callback_on_step_end: step i is done,
        the next transformer call is step i + 1."""
        self.set_step(i + 1)
        return callback_kwargs

    @property
    def infos(self):
        """The last stsa.SVGInfo of every layer that ran in SVG or SVG2 mode."""
        return {p.layer: p.last_info for p in self.processors if p.last_info is not None}

    @property
    def ran(self):
        """What the last self-attention call of every layer ran (the
        processors' last_ran), by layer."""
        return {p.layer: p.last_ran for p in self.processors if p.last_ran is not None}

    def _all(self):
        return [module.processor for module, _ in self._originals]

    def remove(self):
        """Restores the processors that were there before install_svg."""
        for module, original in self._originals:
            module.set_processor(original)
        self._originals = []

    def __repr__(self):
        return (f"SVGController(mode={self.mode!r}, layers={len(self.processors)}, "
                f"geometry={self.geometry}, step={self.step})")


def install_svg(transformer, height, width, num_frames, density=None, dense_steps=0,
                dense_layers=0, mode="svg", sample_rows=64, sink_frames=1, seed=0,
                threads=None, cross_attention=True, vae_scale_spatial=8,
                vae_scale_temporal=4, geometry=None, top_p=None, max_error=None,
                q_clusters=None, kv_clusters=None):
    """Sets SVGAttnProcessor on every block of a diffusers WanTransformer3DModel.

    height, width, num_frames: the video's size in pixels and frames (what the
    pipeline is called with). The token geometry is latent frames
    (num_frames - 1) // vae_scale_temporal + 1 by height / vae_scale_spatial x
    width / vae_scale_spatial, divided by the transformer's patch size: Wan 2.1
    at 832x480, 81 frames is 21 x 30 x 52. Wan 2.2 TI2V-5B's VAE is 16x
    spatially: pass vae_scale_spatial=16. geometry= (an stsa.Geometry) overrides
    all of this.
    density, dense_steps, dense_layers, sample_rows, sink_frames, seed: the SVG
    session's settings (density is the KEPT fraction; None: 0.3). mode: "svg",
    "svg2" (Sparse VideoGen 2: semantic clusters kept up to top_p of the
    probability, None: 0.9; or, given density and no top_p, up to that key
    budget), or "dense" to run every attention dense through stsa (a
    reference for comparisons). max_error: the error budget of "svg" and
    "svg2" (see stsa.SVG; None: none; an error in mode "dense"). q_clusters, kv_clusters: SVG2's
    k-means clusters per head (None: scaled from the published 300 / 1000
    at Wan 2.1 720p).
    cross_attention: also run the cross-attention blocks (attn2) through stsa.
    Returns an SVGController; call set_step(i) before each transformer call.
    """
    if mode not in ("svg", "svg2", "dense"):
        raise ValueError(f"mode {mode!r} is not 'svg', 'svg2' or 'dense'")
    svg2_only = dict(top_p=top_p, q_clusters=q_clusters, kv_clusters=kv_clusters)
    for name, value in svg2_only.items():
        if value is not None and mode != "svg2":
            raise ValueError(f"{name} = {value} is a setting of mode 'svg2', not {mode!r}")
    if max_error is not None and mode == "dense":
        # dense attention has no estimate to hold to a budget: refused, not dropped
        raise ValueError(f"max_error = {max_error} is a setting of modes 'svg' and 'svg2', "
                         f"not 'dense'")
    blocks = getattr(transformer, "blocks", None)
    if blocks is None or not len(blocks):
        raise TypeError("install_svg needs a diffusers WanTransformer3DModel (a module with "
                        ".blocks whose .attn1 / .attn2 are WanAttention)")
    config = getattr(transformer, "config", None)
    heads = int(getattr(config, "num_attention_heads", blocks[0].attn1.heads))
    head_dim = int(getattr(config, "attention_head_dim", 0)
                   or blocks[0].attn1.inner_dim // heads)
    if geometry is None:
        patch = tuple(getattr(config, "patch_size", (1, 2, 2)))
        geometry = Geometry.from_video(height, width, num_frames,
                                       vae_scale_spatial=vae_scale_spatial,
                                       vae_scale_temporal=vae_scale_temporal, patch_size=patch)
    svg = None
    common = dict(heads=heads, head_dim=head_dim, dense_steps=dense_steps,
                  dense_layers=dense_layers,
                  sample_rows=min(int(sample_rows), geometry.video_tokens),
                  sink_frames=min(int(sink_frames), geometry.frames), seed=seed,
                  max_error=max_error, threads=threads)
    if mode == "svg":
        svg = SVG(geometry, density=0.3 if density is None else density, **common)
    elif mode == "svg2":
        given = {name: value for name, value in svg2_only.items() if value is not None}
        svg = SVG2(geometry, density=density, **given, **common)
    processors, originals = [], []
    for layer, block in enumerate(blocks):
        proc = SVGAttnProcessor(svg=svg, layer=layer, threads=threads)
        originals.append((block.attn1, block.attn1.processor))
        block.attn1.set_processor(proc)
        processors.append(proc)
        if cross_attention and hasattr(block, "attn2"):
            originals.append((block.attn2, block.attn2.processor))
            block.attn2.set_processor(SVGAttnProcessor(svg=None, layer=layer,
                                                       threads=threads))
    return SVGController(transformer, processors, originals, svg, geometry, mode)
