"""Sparse VideoGen: the session (stsa.SVG), presets and the built-in workload.

stsa.SVG2 (svg2.py) is the same session with method SVG2; both share the
configuration, the call and the report written here."""

import dataclasses
import threading
import weakref

import numpy as np

from . import _core, _lib
from ._core import check
from ._lib import ffi, lib
from .attention import _out_and_lse
from .geometry import Geometry

__all__ = ["SVG", "SVGInfo", "SVGWindows", "presets", "preset_config", "workload"]


def presets():
    """Names of the published SVG settings ("wan21-480p", ...)."""
    names, i = [], 0
    while True:
        name = _lib.string(lib.stsa_svg_preset_name(i))
        if name is None:
            return names
        names.append(name)
        i += 1


def preset_config(name):
    """The stsa_svg_config of a preset (an `stsa_svg_config *` of cffi:
    cfg.density, cfg.geometry.frames, ...)."""
    if not isinstance(name, str):
        raise TypeError(f"a preset name must be a str, got {type(name).__name__}")
    cfg = _lib.new("stsa_svg_config")
    # a NUL would end the C string early: "wan21-480p\0x" is no preset either
    status = lib.stsa_svg_preset(name.encode(), cfg) if "\0" not in name else -1
    if status != lib.STSA_OK:
        raise ValueError(f"unknown SVG preset {name!r}; known: {', '.join(presets())}")
    return cfg


@dataclasses.dataclass(frozen=True)
class SVGWindows:
    """What a session derived from its density (stsa_svg_windows)."""
    q_tile: int
    kv_tile: int
    frame_window: int       # w_f of spatial heads, in frames
    band: int               # half-width of temporal heads, in tokens
    density_spatial: float  # realised kept fraction of a spatial head
    density_temporal: float


@dataclasses.dataclass
class SVGInfo:
    """Report of one SVG or SVG2 call (stsa_svg_report).

    kinds: numpy str array [B, H]: "spatial" or "temporal" per head (SVG),
    "semantic" (SVG2), or "dense" for every head when the policy ran the
    call dense (the kind the CLI reports too). mse_spatial, mse_temporal:
    float32 [B, H], SVG's profiling error of each mask on the sampled rows
    (0 when the call ran dense, and for SVG2; NaN where method auto kept
    its choices, "kept"). dense: the policy ran this
    call dense (step < dense_steps or layer < dense_layers). profile_ms,
    attention_ms: time spent. density: realised kept fraction over all heads.

    The error budget (max_error) and SVG2, all [B, H] arrays:
    est_error (float32): each head's estimated relative L2 error against
    dense attention on the profiled rows (0 for a head that ran dense);
    head_density (float32): the kept fraction it ran with; budget (str):
    what the budget did, "none" (no budget, or the planned density met it),
    "raised" (a wider window or a larger top-p met it), "dense" (nothing
    sparse met it) or "policy" (a dense step or layer); top_p (float32): the
    top-p each SVG2 head finally used (0 for SVG). q_clusters, kv_clusters:
    SVG2's k-means clusters per head (0 for SVG and dense calls); cluster_ms:
    time in k-means (inside profile_ms); cold: this call seeded its layer's
    clusters (SVG2's first call of a layer).

    ran: what the call's attention ran (stsa_ctx_last_run, as
    stsa.Context.last_run gives it): {"backend", "arithmetic", "bf16_terms",
    "pv_precision", "why"}, one for every head of the call; its profiling and k-means run in
    f32 on gathered rows.

    Method auto (stsa.Auto): choice (str [B, H]): the candidate each head
    ran, "spatial", "temporal", "svg2" or "dense" (for SVG and SVG2 what
    their method ran); choice_reason (str [B, H]): "cheapest" (the lowest
    density whose bound met the budget), "none-met" (no sparse candidate
    met it: dense), "lowest-bound" (no budget: the lowest bound at the
    density), "policy" (a dense step or layer), "recheck" (under a
    budget, the chosen sparse candidate's bound on rows drawn after the
    choice exceeded it: the head ran again with its next denser candidate
    that met the budget, checked again, or dense; svg2's heads take the
    same recheck, but for a head on its first step in a warm call whose
    heads all met it at the layer's last call, and run dense when it
    fails), "kept" (a warm call at the budget of the layer's last call:
    what the head ran there run again, bounded on the call's own output
    rows, no candidate profiled; at most three calls in a row, and not after
    a kept head's miss), "confirmed" (a call that chose afresh chose what
    the head ran at the layer's last call at this budget, and its bound at
    99.5% met the budget: no recheck), "method" (not auto);
    cand_density, cand_bound (float32 [B, H, 4], candidates in the order of
    stsa.AUTO_CANDIDATES): each candidate's kept fraction and error bound,
    NaN where not evaluated."""
    kinds: np.ndarray
    mse_spatial: np.ndarray
    mse_temporal: np.ndarray
    dense: bool
    profile_ms: float
    attention_ms: float
    density: float
    layer: int
    step: int
    est_error: np.ndarray
    head_density: np.ndarray
    budget: np.ndarray
    top_p: np.ndarray
    q_clusters: int
    kv_clusters: int
    cluster_ms: float
    cold: bool
    ran: dict = None
    choice: np.ndarray = None
    choice_reason: np.ndarray = None
    cand_density: np.ndarray = None
    cand_bound: np.ndarray = None


# Sessions kept per (heads, head_dim) pair, least recently used dropped first.
_MAX_SESSIONS = 4


def _no_zero(value, name, who, default):
    """Refuses 0 where the C config reads 0 as its default rather than as
    zero (the CLI refuses 0 for these): None asks for the default."""
    if value is not None and not isinstance(value, bool) and _is_zero(value):
        raise _core.StsaValueError(
            f"{who}: {name} = {_core.given(value)} is not accepted: the library reads 0 as "
            f"its default ({default}), not as zero; pass {name}=None for the default (a "
            f"preset's value where it has one)", lib.STSA_ERR_BAD_PARAM)


def _is_zero(value):
    if isinstance(value, (str, bytes)):
        return False  # not a number: the conversion that follows says so
    try:
        return float(value) == 0
    except (TypeError, ValueError, OverflowError):
        return False  # not a number: the conversion that follows says so


def _real_in(value, name, who, expected):
    """A float setting in (0, 1] as a double, or an stsa.Error naming the
    value as given (the library's message would print it rounded to 6
    digits: 1.0000001 as 1, "must be in (0, 1]")."""
    x = _core.as_real(value, f"{who}: {name}")
    if not 0 < x <= 1:  # NaN fails too
        raise _core.StsaValueError(f"{who}: {name} = {_core.given(value)}{expected}",
                                   lib.STSA_ERR_BAD_PARAM)
    return x


def _budget(value, who):
    """The config's max_rel_error of max_error= (None is not passed here)."""
    x = _core.as_real(value, f"{who}: max_error")
    if not (x >= 0 and x != float("inf")):  # NaN fails too
        raise _core.StsaValueError(
            f"{who}: max_error = {_core.given(value)}, expected 0 (no budget) or a positive "
            f"finite bound", lib.STSA_ERR_BAD_PARAM)
    return x


_TILE_DEFAULT = "automatic: tiles aligned to the frames where they exist, else the context's"

_INT_FIELDS = {"dense_steps": _core.INT64, "dense_layers": _core.INT64,
               "sample_rows": _core.INT64, "sink_frames": _core.INT64,
               "seed": _core.UINT64, "q_tile": _core.INT32, "kv_tile": _core.INT32}


class SVG(_core.NativeHandle):
    """A Sparse VideoGen session for one geometry (one model, one video size).

        svg = stsa.SVG("wan21-480p")                       # a preset
        svg = stsa.SVG(stsa.Geometry(21, 30, 52), density=0.3, dense_steps=10,
                       dense_layers=1)
        out, info = svg(q, k, v, layer=3, step=12, layout="bshd")

    Each call profiles sample_rows query rows against dense attention, picks
    per head the spatial or temporal mask that reproduces them best and runs
    block-sparse attention; dense for steps < dense_steps and layers <
    dense_layers. Arguments left None keep the preset's value (with a
    Geometry: density 0.3, no dense steps or layers, 64 sampled rows, a
    one-frame sink).

    Heads and head dim come from the tensors of each call, as in the CLI: a
    preset's head count and head dim are NOT applied. heads= / head_dim=,
    when given, are enforced: a call with other tensors raises ValueError.
    The C session (stsa_svg) depends on (H, D) only through its shape check,
    so one is created for each (H, D) the calls use (the first at
    construction, with the given or a placeholder H and D, to validate the
    settings); they share windows and plans (the context's plan cache), and
    the session holds no step or layer state: every call is decided by its
    own layer= and step=.

    max_error: the error budget, the bound on each head's estimated
    relative L2 error ||o - o_dense|| / ||o_dense|| over the profiled rows;
    a head above it runs with twice, then four times the density, and at
    last dense (info.budget says which). None keeps the preset's (none),
    0 is no budget; a call's max_error= overrides it for that call.

    The session owns its own stsa context (threads=, backend=) for as long
    as it lives and serialises calls from several Python threads; close()
    (or leaving `with stsa.SVG(...) as svg:`) waits for a call in flight,
    then frees both.
    """

    def __init__(self, geometry, heads=None, head_dim=None, density=None, dense_steps=None,
                 dense_layers=None, sample_rows=None, sink_frames=None, seed=None,
                 q_tile=None, kv_tile=None, max_error=None, threads=None, backend=None):
        cfg = self._config(geometry, heads, head_dim, density, dense_steps, dense_layers,
                           sample_rows, sink_frames, seed, q_tile, kv_tile, max_error)
        self._start(cfg, threads, backend)

    def _config(self, geometry, heads, head_dim, density, dense_steps, dense_layers,
                sample_rows, sink_frames, seed, q_tile, kv_tile, max_error):
        """The stsa_svg_config of the settings both methods share (sets
        preset, heads and head_dim)."""
        who = f"stsa.{type(self).__name__}"
        if isinstance(geometry, str):
            cfg = preset_config(geometry)
            self.preset = geometry
        elif isinstance(geometry, Geometry):
            cfg = _lib.new("stsa_svg_config")
            cfg.geometry = geometry.c()[0]
            cfg.density = 0.3
            cfg.sample_rows = min(64, geometry.video_tokens) or 64
            cfg.sink_frames = 1 if geometry.frames > 0 else 0
            self.preset = None
        else:
            raise TypeError(f"{type(self).__name__}: geometry must be an stsa.Geometry or a "
                            f"preset name "
                            f"({', '.join(presets())}), got {type(geometry).__name__}")
        positive = (1, _core.INT64[1])
        self.heads = None if heads is None else _core.as_int(heads, "heads", positive)
        self.head_dim = None if head_dim is None else _core.as_int(head_dim, "head_dim",
                                                                    positive)
        # the rule shared with the CLI: heads and head dim come from the tensors
        cfg.heads = self.heads or 0
        cfg.head_dim = self.head_dim or 0
        _no_zero(q_tile, "q_tile", who, _TILE_DEFAULT)
        _no_zero(kv_tile, "kv_tile", who, _TILE_DEFAULT)
        for name, value in (("dense_steps", dense_steps), ("dense_layers", dense_layers),
                            ("sample_rows", sample_rows), ("sink_frames", sink_frames),
                            ("seed", seed), ("q_tile", q_tile), ("kv_tile", kv_tile)):
            if value is not None:
                setattr(cfg, name, _core.as_int(value, name, _INT_FIELDS[name]))
        # floats are checked here, where the message can name them as given
        if density is not None:
            cfg.density = _real_in(density, "density", who,
                                   " is the KEPT fraction and must be in (0, 1]")
        if max_error is not None:
            cfg.max_rel_error = _budget(max_error, who)
        return cfg

    def _start(self, cfg, threads, backend):
        """Owns cfg, makes the context and validates cfg with a first session."""
        self.config = cfg
        self.geometry = Geometry.from_c(cfg.geometry)
        self._lock = threading.Lock()
        self._sessions = {}  # (H, D) -> stsa_svg handle, most recently used last
        # The sessions keep using the context: it lives as long as they do
        # (the finalizer holds it and frees the sessions first, under both
        # locks), and Context.close() refuses while this SVG exists.
        self.context = _core.Context(threads=threads, backend=backend)
        self.context._owner = weakref.ref(self)
        self._finalizer = weakref.finalize(self, _free_sessions, self._sessions,
                                           self.context, self._lock)
        # validate the settings now, with a placeholder (H, D) where not given
        with self._lock, self.context.lock:
            self._session(self.heads or 1, self.head_dim or 64)

    def _session(self, H, D):
        """The C session for H heads of dimension D (caller holds both locks)."""
        key = (H, D)
        handle = self._sessions.pop(key, None)
        if handle is None:
            cfg = _lib.copy(self.config)
            cfg.heads, cfg.head_dim = H, D
            handle = ffi.new("stsa_svg **")
            c = self.context.handle
            check(lib.stsa_svg_create(c, cfg, handle), c, "stsa_svg_create")
            handle = handle[0]
            while len(self._sessions) >= _MAX_SESSIONS:
                lib.stsa_svg_free(self._sessions.pop(next(iter(self._sessions))))
        self._sessions[key] = handle
        return handle

    def _open(self):
        if not self._finalizer.alive:
            raise ValueError("stsa.SVG session is closed")

    @property
    def closed(self):
        return not self._finalizer.alive

    @property
    def windows(self):
        """What the session derived from its density (the same for every H, D)."""
        w = _lib.new("stsa_svg_windows")
        with self._lock:
            self._open()
            handle = next(reversed(self._sessions.values()))
            check(lib.stsa_svg_get_windows(handle, w), what="stsa_svg_get_windows")
        return SVGWindows(w.q_tile, w.kv_tile, w.frame_window, w.band, w.density_spatial,
                          w.density_temporal)

    @property
    def tokens(self):
        return self.geometry.tokens

    def __call__(self, q, k, v, layer=0, step=0, *, layout=_core.REQUIRED, out=None,
                 max_error=None):
        """SVG attention of one layer at one denoising step.

        q, k, v: [B, N, H, D] ("bshd"), [B, H, N, D] ("bhsd") or [N, H, D]
        ("shd"), as layout= (required) says; tokens in the model's native
        order, N = geometry.tokens, any H and D (unless heads= / head_dim=
        were given). max_error: this call's error budget (None: the
        session's; 0: none). Returns (out, info): out of q's kind, dtype and
        layout, and an SVGInfo."""
        who = f"stsa.{type(self).__name__}"
        _core.check_layout(layout, who)
        # indices from 0 to what int64_t holds: 2**63 and above cannot reach the library
        layer = _core.as_int(layer, "layer", (0, _core.INT64[1]))
        step = _core.as_int(step, "step", (0, _core.INT64[1]))
        call = _lib.new("stsa_svg_call", max_rel_error=_call_budget(max_error, who))
        self._open()
        qv = _core.view(q, "q", layout)
        kv = _core.view(k, "k", layout)
        vv = _core.view(v, "v", layout)
        B, H, D = qv.tensor.shape[0], qv.tensor.shape[2], qv.tensor.shape[3]
        for what, want, got, dim in (("heads", self.heads, H, "H"),
                                     ("head_dim", self.head_dim, D, "D")):
            if want is not None and got != want:
                raise _core.StsaValueError(
                    f"{who} was created with {what}={want} but q has {dim} = {got} "
                    f"(shape {tuple(q.shape)}, layout {layout!r}); leave {what}= out to "
                    f"take it from the tensors", lib.STSA_ERR_BAD_SHAPE)
        out, ov, _ = _out_and_lse(qv, vv, layout, out, False)
        # an stsa_head_kind per head: small non-negative values, sized as the header's enum
        kinds = np.zeros(B * H, dtype=f"i{ffi.sizeof('stsa_head_kind')}")
        f32 = {name: np.zeros(B * H, dtype=np.float32)
               for name in ("mse_spatial", "mse_temporal", "est_error", "head_density",
                            "head_top_p")}
        budget = np.zeros(B * H, dtype=np.uint8)
        choice = np.zeros((2, B * H), dtype=np.uint8)  # candidate, reason
        ncand = len(_lib.AUTO_CANDIDATES)
        cand = np.zeros((2, B * H * ncand), dtype=np.float32)  # densities, bounds
        ran = _lib.new("stsa_run_info")  # referenced here while report points to it
        report = _lib.new("stsa_svg_report", kinds=_core.pointer(kinds, "stsa_head_kind"),
                          budget=_core.pointer(budget, "uint8_t"), run=ran,
                          choice=_core.pointer(choice[0], "uint8_t"),
                          choice_reason=_core.pointer(choice[1], "uint8_t"),
                          cand_density=_core.pointer(cand[0]),
                          cand_bound=_core.pointer(cand[1]),
                          **{name: _core.pointer(a) for name, a in f32.items()})
        ctx = self.context
        with self._lock, ctx.lock:
            self._open()  # close() may have run while this call waited
            c = ctx.handle
            handle = self._session(H, D)
            status = lib.stsa_svg_attention_ex(handle, layer, step, qv.tensor, kv.tensor,
                                               vv.tensor, ov.tensor, call, report)
            check(status, c, "stsa_svg_attention_ex")
        if report.dense:
            names = np.full((B, H), "dense")
        else:
            names = np.array(_lib.HEAD_KINDS)[kinds].reshape(B, H)
        f32 = {name: a.reshape(B, H) for name, a in f32.items()}
        info = SVGInfo(kinds=names, mse_spatial=f32["mse_spatial"],
                       mse_temporal=f32["mse_temporal"], dense=bool(report.dense),
                       profile_ms=report.profile_ms, attention_ms=report.attention_ms,
                       density=report.density, layer=layer, step=step,
                       est_error=f32["est_error"], head_density=f32["head_density"],
                       budget=np.array(_lib.BUDGET_ACTIONS)[budget].reshape(B, H),
                       top_p=f32["head_top_p"], q_clusters=int(report.q_clusters),
                       kv_clusters=int(report.kv_clusters), cluster_ms=report.cluster_ms,
                       cold=bool(report.cold), ran=_core.run_info(ran),
                       choice=np.array(_lib.AUTO_CANDIDATES)[choice[0]].reshape(B, H),
                       choice_reason=np.array(_lib.AUTO_REASONS)[choice[1]].reshape(B, H),
                       cand_density=cand[0].reshape(B, H, ncand),
                       cand_bound=cand[1].reshape(B, H, ncand))
        return out, info

    def close(self):
        """Frees the session and its context now (otherwise when it is
        garbage collected). Waits for a call in flight on another thread;
        later calls raise ValueError."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _repr_settings(self):
        return f"density={self.config.density}"

    def __repr__(self):
        c = self.config
        return (f"stsa.{type(self).__name__}({self.preset or self.geometry!r}, "
                f"heads={self.heads}, head_dim={self.head_dim}, {self._repr_settings()}, "
                f"dense_steps={c.dense_steps}, dense_layers={c.dense_layers}, "
                f"sample_rows={c.sample_rows}, max_error={c.max_rel_error})")


def _call_budget(max_error, who):
    """stsa_svg_call.max_rel_error of a call's max_error= (None: the
    session's, which the C API spells as any negative value)."""
    if max_error is None:
        return -1.0
    value = _core.as_real(max_error, f"{who}: max_error")
    # negative: the C API would read it as "the session's"; NaN, inf: named as given
    if not (value >= 0 and value != float("inf")):
        raise _core.StsaValueError(
            f"{who}: max_error = {_core.given(max_error)}, expected >= 0 and finite (0: no "
            f"budget) or None (the session's)", lib.STSA_ERR_BAD_PARAM)
    return value


def _free_sessions(sessions, context, lock):
    # The finalizer of an SVG (close(), garbage collection, interpreter
    # exit): takes the locks of a call, so never frees under one.
    with lock, context.lock:
        while sessions:
            lib.stsa_svg_free(sessions.popitem()[1])
        context._owner = None
        context.close()


def workload(geometry, heads, head_dim, seed=0, batch=1, kinds=None, dtype=np.float32,
             layout="bshd"):
    """stsa's built-in video-DiT-like workload (libstsa_io's experimental
    stsa_workload_generate).

    Returns (q, k, v, kinds): numpy arrays [B, N, H, D] in `layout` and dtype,
    and the ground-truth kind of each head ("spatial", "temporal", "mixed",
    "semantic"). kinds: None for the default mix (no semantic heads), or a
    list of kind names, one per head; "semantic" heads attend by content
    (moving objects and static background), the case of SVG2."""
    if isinstance(geometry, str):
        geometry = Geometry.preset(geometry)
    elif not isinstance(geometry, Geometry):
        raise TypeError(f"stsa.workload: geometry must be an stsa.Geometry or a preset name, "
                        f"got {type(geometry).__name__}")
    positive = (1, _core.INT64[1])
    batch, heads = _core.as_int(batch, "batch", positive), _core.as_int(heads, "heads", positive)
    # the library's limit, named here: stsa_workload_generate has no context
    # to carry a message ("invalid shape")
    head_dim = _core.as_int(head_dim, "head_dim", (1, lib.STSA_MAX_HEAD_DIM))
    desc = _lib.new("stsa_workload_desc", geometry=geometry.c()[0], batch=batch, heads=heads,
                    head_dim=head_dim, seed=_core.as_int(seed, "seed", _core.UINT64))
    if kinds is not None:
        kinds = list(kinds)
        if len(kinds) != heads or any(kd not in _lib.HEAD_KINDS for kd in kinds):
            raise ValueError(f"kinds must be {heads} names of {_lib.HEAD_KINDS}")
        # referenced here while desc points to it
        kinds_in = ffi.new("stsa_head_kind[]", [_lib.HEAD_KINDS.index(kd) for kd in kinds])
        desc.kinds = kinds_in
    N = geometry.tokens
    shape = {"bshd": (batch, N, heads, head_dim), "bhsd": (batch, heads, N, head_dim),
             "shd": (N, heads, head_dim)}
    _core.check_layout(layout)
    if layout == "shd" and batch != 1:
        raise ValueError("layout 'shd' holds one sequence: batch must be 1")
    try:
        arrays = [np.empty(shape[layout], dtype=dtype) for _ in range(3)]
    except (MemoryError, ValueError):  # numpy: "array is too big", "Unable to allocate"
        raise MemoryError(f"stsa.workload: q, k and v of shape {shape[layout]} and dtype "
                          f"{np.dtype(dtype)} do not fit in memory") from None
    views = [_core.view(a, n, layout, output=True) for a, n in zip(arrays, "qkv")]
    kinds_out = ffi.new("stsa_head_kind[]", heads)
    status = _lib.io_lib.stsa_workload_generate(desc, views[0].tensor, views[1].tensor,
                                                views[2].tensor, kinds_out)
    check(status, what="stsa_workload_generate")
    return (*arrays, [_lib.HEAD_KINDS[i] for i in kinds_out])
