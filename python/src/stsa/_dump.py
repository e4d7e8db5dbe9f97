"""stsa.diffusers.dump: one layer's q, k and v at one step, written to a
safetensors file that `stsa run` reads."""

import os
import shlex

import torch

from ._enable import _SDPA, Handle, _key_prefix


class DumpHandle(Handle):
    """Hooks like enable()'s, but every call runs diffusers' own SDPA
    unchanged; the one chosen is also written to `path`. After it, `flags`
    are `stsa run`'s input and geometry flags for the file, and `command` an
    `stsa run --mode svg` line with them and the layer and step (before it,
    both are None)."""

    def __init__(self, transformers, path, layer, step, batch):
        super().__init__(transformers, "dense", None, None, {})
        self.path, self.target = os.fspath(path), (int(layer), int(step))
        self.batch = int(batch)
        self.flags = self.command = None

    def _attention(self, layer, query, key, value, attn_mask=None, **kwargs):
        if self.command is None and (layer, self._steps.step) == self.target:
            self._write(query, key, value, attn_mask)
        return _SDPA(query, key, value, attn_mask=attn_mask, **kwargs)

    def _write(self, query, key, value, attn_mask):
        from safetensors.torch import save_file
        b = self.batch
        if not 0 <= b < query.shape[0]:
            raise ValueError(f"stsa.diffusers.dump: batch={b} but the call has "
                             f"{query.shape[0]} batch entries")
        n = query.shape[2]
        if attn_mask is not None:
            real, why = _key_prefix(attn_mask, key.shape[2])
            if why is not None:
                raise ValueError(f"stsa.diffusers.dump: layer {self.target[0]} holds {why}")
            n = real[b]
        # [B, H, S, D] (SDPA's) -> one entry in diffusers' [1, S, H, D], real tokens only
        q, k, v = (x[b:b + 1, :, :n].transpose(1, 2).contiguous() for x in (query, key, value))
        geometry = self._geometry(n, n)
        meta = {"layer": str(self.target[0]), "step": str(self.target[1]), "layout": "bshd"}
        flags = ["--layout", "bshd"]
        if geometry is not None:
            meta.update(frames=str(geometry.frames), height=str(geometry.height),
                        width=str(geometry.width), text=str(geometry.text),
                        text_pos=geometry.text_pos)
            flags += ["--frames", str(geometry.frames), "--height", str(geometry.height),
                      "--width", str(geometry.width)]
            if geometry.text:
                flags += ["--text", str(geometry.text), "--text-pos", geometry.text_pos]
        save_file({"q": q, "k": k, "v": v}, self.path, metadata=meta)
        self.flags = ["--in", self.path] + flags
        self.command = " ".join(["stsa", "run"] + [shlex.quote(f) for f in self.flags] + [
            "--mode", "svg", "--layer", str(self.target[0]), "--step", str(self.target[1])])
