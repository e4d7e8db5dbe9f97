"""stsa.diffusers.enable: stsa attention inside a diffusers pipeline, with no
callback and no geometry to pass.

How it works, per transformer (Wan 2.1/2.2, HunyuanVideo, CogVideoX):
  - a forward pre-hook on the transformer reads the latents' shape (the token
    grid, so a new resolution just works) and the timestep (a new timestep is
    the next step, a larger one a new generation at step 0; the two calls of
    a CFG pair share a timestep, and so one step);
  - forward hooks on each block's self-attention module put a
    torch TorchFunctionMode around that module's own processor, which
    catches its torch.nn.functional.scaled_dot_product_attention call and
    runs it through stsa. Everything else (projections, norms, rotary
    embeddings, masks' construction) is diffusers' own code; nothing in
    diffusers is patched, and disable() removes the hooks.
"""

import dataclasses
import time
import warnings

import torch
from torch.overrides import TorchFunctionMode

from .attention import attention
from .geometry import Geometry
from .svg import SVG, preset_config
from .svg2 import SVG2, Auto
from ._families import call_arguments, family_of
from . import _lib, _wait_policy

METHODS = {"svg": SVG, "svg2": SVG2, "auto": Auto, "dense": None}
# methods that take SVG2's settings (a top-p, not SVG's window density)
_TOP_P_METHODS = ("svg2", "auto")
_SDPA = torch.nn.functional.scaled_dot_product_attention


@dataclasses.dataclass
class StepStats:
    """What one denoising step's self-attention calls ran (all layers, all
    transformer calls of the step, CFG pairs included)."""
    generation: int
    step: int
    dense_calls: int = 0    # stsa dense: the policy's dense steps and layers, or method "dense"
    sparse_calls: int = 0   # stsa SVG / SVG2 / auto calls that ran sparse (in some head)
    budget_dense_calls: int = 0  # session calls the error budget sent dense in every head
    sdpa_calls: int = 0     # left to PyTorch's SDPA, each with its reason in `why`
    density: float = 0.0    # mean kept fraction of the sparse calls
    est_error: float = 0.0  # largest estimated relative error of a sparse call's heads
    ms: float = 0.0         # time in stsa's attention calls
    # CPU time of the process in those calls (all its threads): on cores
    # other processes share, the work itself, where ms also counts the waits
    cpu_ms: float = 0.0
    why: tuple = ()
    # heads of the session's calls (batch entries x heads, policy-dense calls
    # not counted) whose budget widened the mask (raised) or sent them dense
    budget_raised_heads: int = 0
    budget_dense_heads: int = 0
    # method auto: what the session's heads ran, candidate -> heads
    # ("spatial", "temporal", "svg2", "dense"); empty for the other methods
    choices: dict = dataclasses.field(default_factory=dict)
    # method auto: heads that ran their layer's last call's choice again,
    # bounded on the call's own output, with no candidate profiled ("kept")
    kept_heads: int = 0

    def _add_session_call(self, info, auto):
        """One call the session ran (not dense by the policy)."""
        budget = info.budget.ravel()
        self.budget_raised_heads += int((budget == "raised").sum())
        dense_heads = int((budget == "dense").sum())
        self.budget_dense_heads += dense_heads
        if auto:
            for choice in info.choice.ravel():
                self.choices[str(choice)] = self.choices.get(str(choice), 0) + 1
            self.kept_heads += int((info.choice_reason == "kept").sum())
        if dense_heads == budget.size:
            self.budget_dense_calls += 1
            return
        n = self.sparse_calls
        self.density = (self.density * n + info.density) / (n + 1)
        self.est_error = max(self.est_error, float(info.est_error.max(initial=0.0)))
        self.sparse_calls = n + 1


class _Steps:
    """The denoising step, advanced by the timesteps the transformers see."""

    def __init__(self):
        self.generation, self.step, self.timestep = 0, 0, None

    def observe(self, timestep):
        if timestep is None:
            return
        t = float(timestep.max()) if torch.is_tensor(timestep) else float(timestep)
        if self.timestep is not None:
            if t > self.timestep:      # the noise went up again: a new generation
                self.generation, self.step = self.generation + 1, 0
            elif t < self.timestep:
                self.step += 1
        self.timestep = t


class _Catch(TorchFunctionMode):
    """Routes one module's SDPA call to its handle, as layer `layer`."""

    def __init__(self, handle, layer):
        super().__init__()
        self.handle, self.layer = handle, layer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _SDPA:
            return self.handle._attention(self.layer, *args, **kwargs)
        return func(*args, **kwargs)


class Handle:
    """What stsa.diffusers.enable returns. stats() per step; disable()
    removes every hook (the transformers are as they were)."""

    def __init__(self, transformers, method, preset, max_error, overrides):
        self.method = method
        self.max_error = max_error
        self.transformers = transformers
        self._preset_given = preset
        self._overrides = dict(overrides)
        self._steps = _Steps()
        self._stats = {}
        self._sessions = {}    # (Geometry, preset) -> SVG / SVG2 session
        self._warned = set()   # generations already warned about
        self._hooks = []
        self._grid = None      # (family, token grid) of the running transformer call
        self.preset = None
        layer = 0
        for transformer in transformers:
            family = family_of(transformer)
            self._hooks.append(transformer.register_forward_pre_hook(
                self._before_call(family), with_kwargs=True))
            self._hooks.append(transformer.register_forward_hook(self._after_call,
                                                                 always_call=True))
            for module in family.attention_modules(transformer):
                self._hook_attention(module, layer)
                layer += 1
            transformer._stsa_handle = self
        self.layers = layer

    # ------------------------------------------------------------ hooks
    def _before_call(self, family):
        def hook(transformer, args, kwargs):
            latents, timestep = call_arguments(transformer, args, kwargs)
            self._steps.observe(timestep)
            f, h, w = family.latent_grid(latents)
            pt, ph, pw = family.patch(transformer)
            self._grid = (family, ((f + pt - 1) // pt, h // ph, w // pw))
            # the preset of this resolution (sessions are per geometry)
            self.preset = self._preset_given or family.preset(self._grid[1])
        return hook

    def _after_call(self, transformer, args, kwargs_or_out, out=None):
        self._grid = None
        self._warn_if_never_sparse()

    def _hook_attention(self, module, layer):
        catch = _Catch(self, layer)

        # a hook's return value would replace the module's inputs or output
        def enter(module, args):
            catch.__enter__()

        def leave(module, args, out):
            catch.__exit__(None, None, None)

        self._hooks.append(module.register_forward_pre_hook(enter))
        self._hooks.append(module.register_forward_hook(leave, always_call=True))

    # ------------------------------------------------------------ policy
    def _config(self):
        """Density, dense steps and layers, sampled rows, sink frames: the
        preset's (CogVideoX's profile samples 32 rows, the others 64), then
        the overrides."""
        cfg = preset_config(self.preset)
        settings = dict(density=cfg.density, dense_steps=cfg.dense_steps,
                        dense_layers=cfg.dense_layers, sample_rows=cfg.sample_rows,
                        sink_frames=cfg.sink_frames)
        if self.method in _TOP_P_METHODS:
            # SVG2 and auto keep a top-p (0.9), not SVG's window density
            # (density= among the overrides asks for SVG2's key budget)
            settings.pop("density")
        settings.update(self._overrides)
        return settings

    @property
    def dense_steps(self):
        return int(self._config()["dense_steps"]) if self.preset else None

    def _session(self, geometry):
        svg = self._sessions.get((geometry, self.preset))
        if svg is None:
            settings = self._config()
            settings["sample_rows"] = min(int(settings["sample_rows"]), geometry.video_tokens)
            settings["sink_frames"] = min(int(settings["sink_frames"]), geometry.frames)
            settings.setdefault("threads", torch.get_num_threads())
            svg = METHODS[self.method](geometry, max_error=self.max_error, **settings)
            self._sessions[(geometry, self.preset)] = svg
        elif "threads" not in self._overrides:
            # torch's count, as it is now (torch.set_num_threads between calls)
            threads = torch.get_num_threads()
            if svg.context.get("threads") != threads:
                svg.context.set("threads", threads)
        return svg

    def _stat(self):
        key = (self._steps.generation, self._steps.step)
        if key not in self._stats:
            self._stats[key] = StepStats(*key)
        return self._stats[key]

    # ------------------------------------------------------------ the call
    def _attention(self, layer, query, key, value, attn_mask=None, dropout_p=0.0,
                   is_causal=False, scale=None, enable_gqa=False):
        stat = self._stat()
        why = self._unsupported(query, key, value, dropout_p, is_causal, enable_gqa)
        real = None
        if why is None and attn_mask is not None:
            real, why = _key_prefix(attn_mask, key.shape[2])
        if why is not None:
            stat.sdpa_calls += 1
            stat.why = tuple(sorted(set(stat.why) | {why}))
            return _SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                         is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        start, cpu_start = time.perf_counter(), time.process_time()
        if real is None:
            out = self._run(layer, query, key, value, scale, stat)
        else:
            out = torch.empty_like(query)
            for b in range(query.shape[0]):  # each entry's own count of real keys
                n = real[b]
                k, v = key[b:b + 1, :, :n], value[b:b + 1, :, :n]
                out[b:b + 1, :, :n] = self._run(layer, query[b:b + 1, :, :n], k, v, scale,
                                                stat)
                if n < query.shape[2]:  # padding rows: over the real keys, as SDPA
                    out[b:b + 1, :, n:] = attention(query[b:b + 1, :, n:], k, v,
                                                    layout="bhsd", scale=scale,
                                                    threads=torch.get_num_threads())
        stat.ms += (time.perf_counter() - start) * 1e3
        stat.cpu_ms += (time.process_time() - cpu_start) * 1e3
        return out

    def _unsupported(self, query, key, value, dropout_p, is_causal, enable_gqa):
        if dropout_p or is_causal or enable_gqa:
            return "dropout, causal or GQA attention"
        if query.dim() != 4 or query.requires_grad and torch.is_grad_enabled():
            return "not a 4-d inference call"
        if query.device.type != "cpu":
            return f"tensors on {query.device.type}"
        if key.shape != value.shape or key.shape[:2] != query.shape[:2]:
            return "q, k, v of other heads or lengths"
        return None

    def _run(self, layer, q, k, v, scale, stat):
        geometry = self._geometry(q.shape[2], k.shape[2])
        d = q.shape[-1]
        if (self.method == "dense" or geometry is None
                or (scale is not None and abs(scale * d ** 0.5 - 1) > 1e-6)):
            stat.dense_calls += 1
            return attention(q, k, v, layout="bhsd", scale=scale,
                             threads=torch.get_num_threads())
        out, info = self._session(geometry)(q, k, v, layer=layer, step=self._steps.step,
                                            layout="bhsd")
        if info.dense:
            stat.dense_calls += 1
        else:
            stat._add_session_call(info, self.method == "auto")
        return out

    def _geometry(self, n_q, n_kv):
        """The self-attention geometry of this call, or None where it is not
        the video's (cross-attention, or tokens the grid does not explain)."""
        if self._grid is None or n_q != n_kv:
            return None
        family, (f, h, w) = self._grid
        text = n_q - f * h * w
        if text < 0 or (text and family.text_pos == "none"):
            return None
        return Geometry(f, h, w, text=text, text_pos=family.text_pos if text else "none")

    def _warn_if_never_sparse(self):
        if self.method == "dense" or self.preset is None:
            return
        gen, step = self._steps.generation, self._steps.step
        if gen in self._warned or step < self.dense_steps:
            return
        if self.layers <= int(self._config()["dense_layers"]):
            return  # the policy keeps every layer dense: nothing should be sparse
        if any(s.sparse_calls for (g, _), s in self._stats.items() if g == gen):
            return
        self._warned.add(gen)
        why = sorted({w for (g, _), s in self._stats.items() if g == gen for w in s.why})
        budget = sum(s.budget_dense_calls for (g, _), s in self._stats.items() if g == gen)
        warnings.warn(
            f"stsa.diffusers: step {step} of this generation has run and no attention call "
            f"was sparse, although the policy ({self.method}, preset {self.preset}, "
            f"dense_steps={self.dense_steps}) makes them sparse from step {self.dense_steps}"
            + (f"; calls left to SDPA: {', '.join(why)}" if why else "")
            + (f"; the error budget max_error={self.max_error} sent {budget} calls dense in "
               "every head" if budget else "")
            + " (see handle.stats())", RuntimeWarning, stacklevel=2)

    # ------------------------------------------------------------ public
    def stats(self):
        """One StepStats per (generation, step) that ran, in order."""
        return [self._stats[key] for key in sorted(self._stats)]

    @property
    def step(self):
        return self._steps.step

    def disable(self):
        """Removes every hook; later calls run diffusers' own attention."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        for transformer in self.transformers:
            if getattr(transformer, "_stsa_handle", None) is self:
                del transformer._stsa_handle
        for svg in self._sessions.values():
            svg.close()
        self._sessions = {}

    def __repr__(self):
        return (f"stsa.diffusers.Handle(method={self.method!r}, preset={self.preset!r}, "
                f"layers={self.layers}, step={self.step})")


def _key_prefix(mask, n_kv):
    """For a boolean key-padding mask ([B, 1, 1, N] or broadcastable, True =
    kept) whose kept keys are a prefix in every batch entry: ([count per
    entry], None); else (None, the reason it stays with SDPA)."""
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != 1:
        return None, "an attention mask that is not a boolean key-padding mask"
    keep = mask[:, 0, 0, :].expand(-1, n_kv)
    counts = keep.sum(dim=1)
    positions = torch.arange(n_kv, device=mask.device)
    if not torch.equal(keep, positions[None, :] < counts[:, None]) or int(counts.min()) < 1:
        return None, "an attention mask whose kept keys are not a prefix"
    return [int(c) for c in counts], None


def enable(pipe_or_transformer, preset=None, method="svg", max_error=None, **overrides):
    """See stsa.diffusers.enable."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {', '.join(METHODS)}")
    if max_error is not None and method == "dense":
        raise ValueError(f"max_error = {max_error} is a setting of methods 'svg', 'svg2' and "
                         f"'auto', not 'dense'")
    if preset is not None:
        preset_config(preset)  # an unknown name raises here, not at the first step
    handle = Handle(transformers_of(pipe_or_transformer), method, preset, max_error, overrides)
    _warn_if_threads_spin()
    return handle


_spin_warned = False


def _warn_if_threads_spin():
    """Once a process: a RuntimeWarning when stsa's OpenMP threads spin
    beside torch's (the runtime was started before stsa, by torch imported
    first, and no wait policy was set): each call then costs several times
    what it costs alone when anything else wants the cores."""
    global _spin_warned
    info = _lib.threading_info
    if _spin_warned or info.set_by != "loaded before stsa" or _wait_policy._user_settings():
        return
    _spin_warned = True
    warnings.warn(
        f"stsa: OpenMP threads spin while idle: {info.detail}. Inside a diffusers step that "
        "costs stsa and torch time whenever they share the cores (docs/integration.md, "
        "\"Sharing the cores\")", RuntimeWarning, stacklevel=4)


def transformers_of(pipe_or_transformer):
    """A pipeline's transformer (and Wan 2.2's transformer_2), or the
    transformer given; each one stsa knows and is not already hooked."""
    obj = pipe_or_transformer
    if hasattr(obj, "transformer") and not isinstance(obj, torch.nn.Module):
        transformers = [t for t in (obj.transformer, getattr(obj, "transformer_2", None))
                        if t is not None]
    else:
        transformers = [obj]
    for t in transformers:
        family_of(t)
        if getattr(t, "_stsa_handle", None) is not None:
            raise ValueError(f"stsa is already enabled on this {type(t).__name__}: call "
                             f"disable() on its handle first")
    return transformers
