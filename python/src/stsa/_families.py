"""The diffusers video transformers stsa.diffusers.enable knows: where their
self-attention modules are, how their latents map to tokens, where their
text tokens sit, and which SVG preset fits them.

Recognised by class name, so that diffusers is not imported here."""

import dataclasses
import inspect

from .svg import preset_config


@dataclasses.dataclass(frozen=True)
class Family:
    name: str               # the transformer's class name
    text_pos: str           # where text tokens sit in self-attention: none, prefix, suffix
    channels_first: bool    # latents [B, C, F, H, W] (else [B, F, C, H, W])
    presets: tuple          # SVG presets of this family, by resolution

    def attention_modules(self, transformer):
        """The self-attention modules, numbered by block (dual-stream blocks
        first, then single-stream ones)."""
        if self.name == "WanTransformer3DModel":
            return [block.attn1 for block in transformer.blocks]
        if self.name == "HunyuanVideoTransformer3DModel":
            blocks = list(transformer.transformer_blocks)
            blocks += list(getattr(transformer, "single_transformer_blocks", []))
            return [block.attn for block in blocks]
        return [block.attn1 for block in transformer.transformer_blocks]

    def patch(self, transformer):
        """(frames, height, width) of a patch, in latents."""
        config = transformer.config
        if self.name == "WanTransformer3DModel":
            return tuple(int(n) for n in config.patch_size)
        spatial = int(config.patch_size)
        temporal = getattr(config, "patch_size_t", None)
        return (int(temporal or 1), spatial, spatial)

    def latent_grid(self, latents):
        """(frames, height, width) of a latent tensor."""
        if latents.dim() != 5:
            raise ValueError(f"stsa.diffusers: latents of shape {tuple(latents.shape)}, "
                             f"expected 5 dimensions")
        if self.channels_first:
            return tuple(int(n) for n in latents.shape[2:])
        return (int(latents.shape[1]), int(latents.shape[3]), int(latents.shape[4]))

    def preset(self, grid):
        """The preset whose token grid is nearest this one's (by tokens per
        frame)."""
        area = grid[1] * grid[2]

        def distance(name):
            g = preset_config(name).geometry
            return abs(g.height * g.width - area)

        return min(self.presets, key=distance)


FAMILIES = {
    f.name: f for f in (
        Family("WanTransformer3DModel", "none", True, ("wan21-480p", "wan21-720p")),
        Family("HunyuanVideoTransformer3DModel", "suffix", True,
               ("hunyuan-480p", "hunyuan-720p")),
        # CogVideoX 1.0 and 1.5 (patch_size_t=2); SVG publishes settings for 1.5 alone
        Family("CogVideoXTransformer3DModel", "prefix", False, ("cogvideox15",)),
    )
}


def family_of(transformer):
    """The Family of a diffusers transformer; TypeError for any other module."""
    name = type(transformer).__name__
    family = FAMILIES.get(name)
    if family is None:
        raise TypeError(f"stsa.diffusers.enable: {name} is not a transformer stsa knows; "
                        f"expected one of {', '.join(sorted(FAMILIES))} (or a pipeline "
                        f"holding one as .transformer)")
    return family


def call_arguments(transformer, args, kwargs):
    """(latents, timestep) of a call to transformer.forward."""
    bound = inspect.signature(transformer.forward).bind_partial(*args, **kwargs)
    return bound.arguments.get("hidden_states"), bound.arguments.get("timestep")
