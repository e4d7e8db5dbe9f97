"""Video geometry: F frames of Hp x Wp tokens plus optional text tokens."""

import operator

from . import _lib
from ._lib import lib


class Geometry:
    """A self-attention sequence of N = text + frames*height*width tokens.

    frames, height, width are in TOKENS (F, Hp, Wp: latent frames and the
    patchified latent grid), not pixels; see Geometry.from_video for a
    video's size. Video tokens sit frame-major: i = f*Hp*Wp + y*Wp + x.
    text_pos is "none", "prefix" (CogVideoX) or "suffix" (HunyuanVideo); in
    a suffix the first text_real text tokens are real and the rest padding.
    frames = 0 describes a plain sequence (index masks only).
    """

    __slots__ = ("frames", "height", "width", "text", "text_real", "text_pos")

    def __init__(self, frames, height, width, text=0, text_real=None, text_pos="none"):
        from ._core import as_int, choice
        self.frames = as_int(frames, "frames")
        self.height, self.width = as_int(height, "height"), as_int(width, "width")
        self.text = as_int(text, "text")
        self.text_real = self.text if text_real is None else as_int(text_real, "text_real")
        choice(text_pos, _lib.TEXT_POS, "text_pos")
        self.text_pos = text_pos
        why = self._problem()
        if why:
            raise ValueError(f"invalid geometry {self!r}: {why}")

    @classmethod
    def from_video(cls, height, width, num_frames, vae_scale_spatial=8,
                   vae_scale_temporal=4, patch_size=(1, 2, 2), **text):
        """The token geometry of a video of height x width pixels and
        num_frames frames: latent frames (num_frames - 1) // vae_scale_temporal
        + 1, latent grid height / vae_scale_spatial, then the patch size.
        Defaults are Wan 2.1's (VAE 4x8x8, patch 1x2x2): 832x480, 81 frames
        gives 21 x 30 x 52."""
        from ._core import INT64, as_int
        positive = (1, INT64[1])
        height, width = as_int(height, "height", positive), as_int(width, "width", positive)
        num_frames = as_int(num_frames, "num_frames", positive)
        vae_scale_spatial = as_int(vae_scale_spatial, "vae_scale_spatial", positive)
        vae_scale_temporal = as_int(vae_scale_temporal, "vae_scale_temporal", positive)
        try:
            patch = tuple(operator.index(n) for n in patch_size)
        except TypeError:  # not iterable, or not integers
            patch = ()
        if len(patch) != 3:
            raise ValueError(f"patch_size = {patch_size!r}: expected three integers (frames, "
                             f"height, width)")
        if min(patch) < 1:
            raise ValueError(f"patch_size = {patch_size!r}: every patch size must be >= 1")
        pt, ph, pw = patch
        latent_f = (num_frames - 1) // vae_scale_temporal + 1
        latent_h, latent_w = height // vae_scale_spatial, width // vae_scale_spatial
        return cls(latent_f // pt, latent_h // ph, latent_w // pw, **text)

    @classmethod
    def preset(cls, name):
        """The geometry of an SVG preset ("wan21-480p", ...)."""
        from .svg import preset_config
        return cls.from_c(preset_config(name).geometry)

    def _problem(self):
        if self.frames < 0 or self.height < 0 or self.width < 0:
            return "frames, height and width must be >= 0"
        if self.frames > 0 and (self.height < 1 or self.width < 1):
            return "a geometry with frames needs height >= 1 and width >= 1"
        if self.text < 0 or self.text_real < 0 or self.text_real > self.text:
            return "text tokens must satisfy 0 <= text_real <= text"
        if self.text > 0 and self.text_pos == "none":
            return "text > 0 needs text_pos 'prefix' or 'suffix'"
        if lib.stsa_geometry_tokens(self.c()) < 0:
            return "rejected by the library (too many tokens?)"
        return None

    def c(self):
        """A new stsa_geometry (an `stsa_geometry *`)."""
        return _lib.new("stsa_geometry", frames=self.frames, height=self.height,
                        width=self.width, text=self.text, text_real=self.text_real,
                        text_pos=_lib.TEXT_POS[self.text_pos])

    @classmethod
    def from_c(cls, g):
        pos = {v: k for k, v in _lib.TEXT_POS.items()}[g.text_pos]
        return cls(g.frames, g.height, g.width, g.text, g.text_real, pos)

    @property
    def tokens_per_frame(self):
        """P = Hp * Wp."""
        return self.height * self.width

    @property
    def video_tokens(self):
        """L = F * Hp * Wp."""
        return self.frames * self.height * self.width

    @property
    def tokens(self):
        """N = text + F * Hp * Wp (stsa_geometry_tokens)."""
        return int(lib.stsa_geometry_tokens(self.c()))

    def permutation(self, order):
        """perm[pos] = native index of the token at position pos of `order`
        ("native", "position_major", "sink_first"), as a numpy int64 array."""
        import numpy as np

        from ._core import check, pointer
        if order not in _lib.ORDERS:
            raise ValueError(f"order {order!r} is not one of {', '.join(_lib.ORDERS)}")
        perm = np.empty(self.tokens, dtype=np.int64)
        check(lib.stsa_order_permutation(self.c(), _lib.ORDERS[order],
                                         pointer(perm, "int64_t")),
              what="stsa_order_permutation")
        return perm

    def _key(self):
        return (self.frames, self.height, self.width, self.text, self.text_real,
                self.text_pos)

    def __eq__(self, other):
        return isinstance(other, Geometry) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        extra = ""
        if self.text:
            extra = f", text={self.text}, text_real={self.text_real}, " \
                    f"text_pos={self.text_pos!r}"
        return f"stsa.Geometry({self.frames}, {self.height}, {self.width}{extra})"
