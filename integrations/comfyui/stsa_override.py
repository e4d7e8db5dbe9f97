"""stsa as ComfyUI's attention override (transformer_options
["optimized_attention_override"]).

ComfyUI calls an override as override(func, q, k, v, heads, mask=None,
attn_precision=None, skip_reshape=False, skip_output_reshape=False,
transformer_options=..., **kwargs), where func is the attention function it
would have run with the same arguments. q, k, v are [B, S, heads * D], or
[B, heads, S, D] with skip_reshape; the result is [B, S_q, heads * D], or
[B, heads, S_q, D] with skip_output_reshape. Its Wan model puts the token
grid (frames, height, width after the patch) in transformer_options
["grid_sizes"] and the block in ["block_index"]; the sampler puts the
current sigma in ["sigmas"] and the schedule in ["sample_sigmas"]: the layer
is the block index, the step the sigma's index in the schedule.

Only video self-attention runs through stsa: any call with a mask, with
other q and k lengths (cross-attention), off the CPU, or whose tokens the
grid does not explain goes to func unchanged, counted in `stats` with the
reason. Needs torch and the stsa package; ComfyUI itself is not imported.
"""

import collections

import torch

import stsa

METHODS = ("svg", "svg2", "auto", "dense")


def step_of(transformer_options):
    """The index of the current sigma in the sampler's schedule, or None."""
    sigmas = transformer_options.get("sigmas")
    schedule = transformer_options.get("sample_sigmas")
    if sigmas is None or schedule is None:
        return None
    current = sigmas.flatten()[0].to(schedule.dtype)
    hits = torch.nonzero(torch.isclose(schedule.flatten(), current)).flatten()
    return int(hits[0]) if len(hits) else None


class StsaAttention:
    """The override. method: "svg", "svg2", "auto" or "dense"; density (None: the
    method's default), max_error (None: no budget), dense_steps,
    dense_layers: as stsa.SVG / stsa.SVG2 take them. stats counts, per
    step, the calls stsa ran dense and sparse and those left to ComfyUI
    (by reason)."""

    def __init__(self, method="svg", density=None, max_error=None, dense_steps=0,
                 dense_layers=0):
        if method not in METHODS:
            raise ValueError(f"method {method!r} is not one of {', '.join(METHODS)}")
        self.method = method
        self.settings = dict(density=density, max_error=max_error, dense_steps=dense_steps,
                             dense_layers=dense_layers)
        self.sessions = {}
        self.stats = collections.defaultdict(collections.Counter)

    def __call__(self, func, q, k, v, heads, mask=None, attn_precision=None,
                 skip_reshape=False, skip_output_reshape=False, **kwargs):
        options = kwargs.get("transformer_options") or {}
        step = step_of(options)
        why = self._refused(q, k, mask, options, skip_reshape, heads)
        if why:
            self.stats[step][f"comfyui: {why}"] += 1
            return func(q, k, v, heads, mask=mask, attn_precision=attn_precision,
                        skip_reshape=skip_reshape, skip_output_reshape=skip_output_reshape,
                        **kwargs)
        layout = "bhsd" if skip_reshape else "bshd"
        if not skip_reshape:  # [B, S, heads * D] -> [B, S, heads, D], a view
            q, k, v = (x.unflatten(-1, (heads, -1)) for x in (q, k, v))
        out = self._attention(q, k, v, layout, options, step)
        if skip_output_reshape:
            return out if skip_reshape else out.transpose(1, 2)
        if skip_reshape:
            out = out.transpose(1, 2)
        return out.flatten(-2)

    def _refused(self, q, k, mask, options, skip_reshape, heads):
        if mask is not None:
            return "a mask"
        if q.device.type != "cpu":
            return f"tensors on {q.device.type}"
        seq = 2 if skip_reshape else 1
        if q.shape[seq] != k.shape[seq]:
            return "not self-attention"
        grid = options.get("grid_sizes")
        if grid is None or int(torch.tensor(list(grid)).prod()) != q.shape[seq]:
            return "tokens the grid does not explain"
        if not skip_reshape and q.shape[-1] % heads:
            return "a width that is not heads x D"
        return None

    def _attention(self, q, k, v, layout, options, step):
        threads = torch.get_num_threads()
        if self.method == "dense":
            self.stats[step]["dense"] += 1
            return stsa.attention(q, k, v, layout=layout, threads=threads)
        f, h, w = (int(n) for n in options["grid_sizes"])
        geometry = stsa.Geometry(f, h, w)
        svg = self.sessions.get(geometry)
        if svg is None:
            cls = {"svg": stsa.SVG, "svg2": stsa.SVG2, "auto": stsa.Auto}[self.method]
            given = {name: value for name, value in self.settings.items() if value is not None}
            svg = cls(geometry, sample_rows=min(64, geometry.video_tokens),
                      sink_frames=min(1, f), threads=threads, **given)
            self.sessions[geometry] = svg
        layer = int(options.get("block_index", 0))
        out, info = svg(q, k, v, layer=layer, step=step or 0, layout=layout)
        self.stats[step]["dense" if info.dense else "sparse"] += 1
        return out
