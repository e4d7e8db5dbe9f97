"""Sparse VideoGen 2: the SVG session with method SVG2 (stsa.SVG2), and method
auto (stsa.Auto), per head the best of SVG, SVG2 and dense."""

from . import _core
from ._lib import lib
from .svg import SVG, _no_zero, _real_in

__all__ = ["SVG2", "Auto"]

class _TopP:
    """The default of top_p=: the published 0.9 (or the preset's), unless
    density= alone asks for a key budget."""

    def __repr__(self):
        return "0.9"


_UNSET = _TopP()

_SVG2_INT_FIELDS = {"q_clusters": _core.INT64, "kv_clusters": _core.INT64,
                    "kmeans_iters_cold": _core.INT64, "kmeans_iters_warm": _core.INT64}

# what the C config makes of a 0 (refused here: None asks for it)
_CLUSTERS_DEFAULT = "automatic: 300 / 1000 at 75,600 video tokens, scaled with the video's"
_ZERO_MEANS = {"q_clusters": _CLUSTERS_DEFAULT, "kv_clusters": _CLUSTERS_DEFAULT,
               "kmeans_iters_cold": "50 iterations", "kmeans_iters_warm": "2 iterations",
               "min_kv_fraction": "0.10; the top key cluster is always kept"}


def _top_p(top_p, density):
    """cfg.svg2.top_p of a top_p= given as a number (or None: 0, the key budget)."""
    who = "stsa.SVG2"
    if top_p is None:
        return 0.0
    value = _core.as_real(top_p, f"{who}: top_p")
    if value == 0:  # the C config reads top_p = 0 as "use density": never silently
        raise _core.StsaValueError(
            f"{who}: top_p = {_core.given(top_p)} is not accepted: the library reads top_p = 0 "
            f"as no top-p and keeps a key budget instead; for that pass density=D (the kept "
            f"fraction of the keys) with top_p=None or left out, else a top_p in (0, 1]",
            lib.STSA_ERR_BAD_PARAM)
    if density is not None:
        raise _core.StsaValueError(
            f"{who}: top_p = {_core.given(top_p)} and density = {_core.given(density)} both "
            f"given; SVG2 keeps key clusters by probability (top_p) or by a key budget "
            f"(density, with top_p=None)", lib.STSA_ERR_BAD_PARAM)
    return _real_in(top_p, "top_p", who, ", expected a probability in (0, 1] (a key budget: "
                    "top_p=None and density=)")


class SVG2(SVG):
    """A Sparse VideoGen 2 session for one geometry.

        svg2 = stsa.SVG2("wan21-720p")                      # a preset
        svg2 = stsa.SVG2(stsa.Geometry(21, 30, 52), top_p=0.9, q_clusters=100,
                         kv_clusters=300, dense_steps=10, max_error=0.1)
        out, info = svg2(q, k, v, layer=3, step=12, layout="bshd")

    Per call and head, the video queries and keys are clustered by k-means
    (warm-started from the layer's previous centroids), and each query
    cluster keeps the key clusters of highest centroid probability until
    their cumulative probability reaches top_p (always the top one, and at
    least min_kv_fraction of them); the text rules are added as in SVG,
    and there is no first-frame sink (a head's mask is its cluster
    rectangles plus the text rules; sink_frames does not change it). Every
    head reports kind "semantic".

    top_p: the probability mass kept, in (0, 1] (default 0.9, or the
    preset's). density: instead of top_p (top_p=None or left out), a key
    budget: key clusters are kept until they hold density x the video
    tokens; giving both is an error. q_clusters, kv_clusters: clusters per
    head (None: the preset's, else the published 300 / 1000 at Wan 2.1
    720p's 75,600 video tokens, scaled with the video's). min_kv_fraction
    (None: 0.10); kmeans_iters_cold / _warm: Lloyd iterations of a layer's
    first call and of later ones (None: 50 / 2). A 0 for any of these is
    refused (the library reads 0 as its default, top_p = 0 as "use
    density"): pass None for the default.
    max_error: the error budget, as for stsa.SVG; a head above it runs with
    a larger top-p (0.95, 0.98, 0.995) and at last dense. The other
    arguments, the call and its report (an stsa.SVGInfo) are stsa.SVG's.

    The clusters carry over from call to call per layer: a session's output
    depends on the calls before it (the same sequence of calls gives the
    same results). Its heads= / head_dim= rule is SVG's, but the clusters
    live in the C session of each (H, D).
    """

    _METHOD = lib.STSA_SVG_METHOD_SVG2

    def __init__(self, geometry, heads=None, head_dim=None, top_p=_UNSET, density=None,
                 q_clusters=None, kv_clusters=None, min_kv_fraction=None,
                 kmeans_iters_cold=None, kmeans_iters_warm=None, dense_steps=None,
                 dense_layers=None, sample_rows=None, sink_frames=None, seed=None,
                 q_tile=None, kv_tile=None, max_error=None, threads=None, backend=None):
        top_p_value = None if top_p is _UNSET else _top_p(top_p, density)
        for name, value in (("q_clusters", q_clusters), ("kv_clusters", kv_clusters),
                            ("kmeans_iters_cold", kmeans_iters_cold),
                            ("kmeans_iters_warm", kmeans_iters_warm),
                            ("min_kv_fraction", min_kv_fraction)):
            _no_zero(value, name, "stsa.SVG2", _ZERO_MEANS[name])
        cfg = self._config(geometry, heads, head_dim, density, dense_steps, dense_layers,
                           sample_rows, sink_frames, seed, q_tile, kv_tile, max_error)
        cfg.method = self._METHOD
        svg2 = cfg.svg2  # SVG2's own settings (stsa_svg2_config)
        if top_p is _UNSET:
            # a density alone is the key budget; otherwise the preset's or 0.9
            svg2.top_p = 0.0 if density is not None else (svg2.top_p or 0.9)
        else:
            svg2.top_p = top_p_value
        for name, value in (("q_clusters", q_clusters), ("kv_clusters", kv_clusters),
                            ("kmeans_iters_cold", kmeans_iters_cold),
                            ("kmeans_iters_warm", kmeans_iters_warm)):
            if value is not None:
                setattr(svg2, name, _core.as_int(value, name, _SVG2_INT_FIELDS[name]))
        if min_kv_fraction is not None:
            svg2.min_kv_fraction = _real_in(min_kv_fraction, "min_kv_fraction", "stsa.SVG2",
                                           ", expected a fraction in (0, 1]")
        self._start(cfg, threads, backend)

    def _repr_settings(self):
        c = self.config
        budget = f"top_p={c.svg2.top_p}" if c.svg2.top_p else f"density={c.density}"
        return f"{budget}, q_clusters={c.svg2.q_clusters}, kv_clusters={c.svg2.kv_clusters}"


class Auto(SVG2):
    """Method auto: per call and head, the best of SVG's spatial and
    temporal masks, SVG2's clusters and dense.

        auto = stsa.Auto(stsa.Geometry(21, 30, 52), max_error=0.05)
        out, info = auto(q, k, v, layer=3, step=12, layout="bshd")
        info.choice, info.choice_reason, info.cand_density, info.cand_bound

    SVG's profile and SVG2's k-means run once each per call, and every
    candidate is bounded (an upper confidence bound of its relative L2
    error, as SVGInfo.est_error). With a budget (max_error, the session's or
    the call's) each head runs the candidate of lowest density whose bound
    meets it (SVG's windows widen and SVG2's top-p rises as their methods
    do), else dense; without one, the candidate of lowest bound at the
    configured density and SVG2's top-p (dense is then no candidate). The
    arguments and their defaults are SVG2's (top_p 0.9, or density= alone
    for a key budget). The report adds choice, choice_reason, cand_density
    and cand_bound (stsa.SVGInfo).
    """

    _METHOD = lib.STSA_SVG_METHOD_AUTO
