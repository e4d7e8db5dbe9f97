#!/usr/bin/env python3
"""stsa against PyTorch on the CPU, in one process, interleaved.

    python bench/peers/peers.py --threads 2 > peers.jsonl

Three parts, each a list of comparisons printed as JSON lines (stdout):

  dense   torch.nn.functional.scaled_dot_product_attention (SDPA), f32 and
          bf16, against stsa.attention on the same tensors ([B, H, S, D],
          SDPA's layout, which stsa reads in place); bf16 twice, stsa's
          default and bf16_terms=1 (case "... bf16 1 term": the
          probabilities rounded to bf16 as SDPA rounds them);
  flex    FlexAttention (flex_attention under torch.compile, block masks from
          create_block_mask) against stsa.sparse_attention on the same masks
          at a video geometry (Wan 2.1 480p: 21 x 30 x 52 = 32,760 tokens):
          a band of 39% density, SVG's spatial mask (frame window + sink
          frame) and its temporal mask (position band + sink frame), and a
          whole stsa.SVG call (profiling, then each head's mask) against
          FlexAttention running the masks that call chose;
  gemm    (opt-in) a ceiling, not a rival: PyTorch's f32 GEMM (torch.matmul,
          its BLAS) on a 4096^3 product and on one head's Q.K^T shape
          (S x D times D x S), against stsa.attention (dense, f32) on
          --gemm-shape, in GFLOP/s. What the vendor's GEMM reaches on the
          machine bounds what an attention kernel, which adds a softmax and
          K = D-deep products, can hope for (docs/benchmarks.md).

Why interleaved: the machines are shared and their speed moves by 2x within
minutes, so each round runs every contender once, and only ratios taken in
the same rounds mean anything. ratio_best = peer best / stsa best and
ratio_median = peer median / stsa median (above 1: stsa is faster).

FlexAttention sees temporal heads in the order stsa's kernel walks them
(queries position-major, keys sink-first): in native order their band
touches every block and FlexAttention would run them nearly dense. The
gathers into that order and back are timed apart (permute_ms) and are not
in its ratio, which makes the ratio the one most favourable to the peer.
FlexAttention's compile time (first call minus a warm call) and its
create_block_mask time are reported apart too (flex_compile lines).

Accuracy: max_abs_diff between the two outputs, and each one's max-abs
error against a float64 reference on --ref-rows sampled query rows
(err_stsa, err_peer).
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

# ------------------------------------------------------------------ options


def parse_shape(text):
    """'S x H x D' (e.g. 8192x4x128) as a tuple of ints."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"shape {text!r} is not SxHxD (e.g. 8192x4x128)")
    return tuple(int(p) for p in parts)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="stsa against PyTorch SDPA and FlexAttention (CPU), interleaved in one "
        "process; JSON lines on stdout, a summary on stderr.")
    p.add_argument("--threads", type=int, default=2, help="threads for torch and stsa (2)")
    p.add_argument("--reps", type=int, default=3, help="timed rounds per comparison (3)")
    p.add_argument("--parts", default="dense,flex",
                   help="comma list of dense, flex, gemm (default dense,flex)")
    p.add_argument("--gemm-shape", type=parse_shape, default=(8192, 4, 128),
                   help="stsa attention shape SxHxD of the gemm part (8192x4x128)")
    p.add_argument("--gemm-n", type=int, default=4096,
                   help="the square GEMM's size n (4096: n x n times n x n)")
    p.add_argument("--dense-shapes", type=lambda s: [parse_shape(x) for x in s.split(",")],
                   default=[(8192, 4, 128), (8192, 8, 64), (4096, 12, 80)],
                   help="dense shapes SxHxD, comma separated (8192x4x128,8192x8x64,4096x12x80)")
    p.add_argument("--no-video-dense", action="store_true",
                   help="skip the dense comparison at the video geometry")
    p.add_argument("--frames", type=int, default=21, help="video frames F (21: Wan 480p)")
    p.add_argument("--height", type=int, default=30, help="tokens per frame column Hp (30)")
    p.add_argument("--width", type=int, default=52, help="tokens per frame row Wp (52)")
    p.add_argument("--heads", type=int, default=2, help="heads at the video geometry (2)")
    p.add_argument("--dim", type=int, default=128, help="head dim at the video geometry (128)")
    p.add_argument("--density", type=float, default=0.39, help="band mask density (0.39)")
    p.add_argument("--svg-density", type=float, default=0.3,
                   help="SVG session density (0.3, the wan21 presets')")
    p.add_argument("--masks", default="band,spatial,temporal,svg",
                   help="comma list of band, spatial, temporal, svg")
    p.add_argument("--ref-rows", type=int, default=32,
                   help="query rows of the float64 reference (0: none)")
    p.add_argument("--cold-compile", action="store_true",
                   help="a fresh inductor cache, so compile times are cold ones")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.parts = [x for x in args.parts.split(",") if x]
    args.masks = [x for x in args.masks.split(",") if x]
    for what, got, known in (("--parts", args.parts, ("dense", "flex", "gemm")),
                             ("--masks", args.masks, ("band", "spatial", "temporal", "svg"))):
        bad = [x for x in got if x not in known]
        if bad:
            p.error(f"{what}: unknown {', '.join(bad)} (known: {', '.join(known)})")
    if args.threads < 1 or args.reps < 1 or args.gemm_n < 1:
        p.error("--threads, --reps and --gemm-n must be >= 1")
    return args


# ------------------------------------------------------------------ machine


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return platform.processor() or "unknown", []
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                  if ln.startswith("model name")), "unknown")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                  if ln.startswith("flags")), [])
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16")
    return model, [f for f in wanted if f in flags]


def flex_unavailable():
    """Why FlexAttention under torch.compile cannot run here, or None."""
    import shutil

    try:
        import torch
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError as e:
        return f"no FlexAttention in this torch ({e})"
    if not hasattr(torch, "compile"):
        return "torch.compile is missing"
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        return "torch.compile's CPU backend needs a C++ compiler (none on PATH)"
    # A compiler can be there and still fail (no Python headers, an old
    # gcc): one tiny compiled function tells, before minutes of benchmark.
    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(4))
    except Exception as e:  # any failure here is the toolchain's, not a mask's
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return f"torch.compile fails on this machine ({type(e).__name__}: {first})"
    return None


# ------------------------------------------------------------------ timing


def interleaved(fns, reps):
    """Each callable once untimed (its result kept), then `reps` rounds of one
    timed call each, the order reversed every other round so no contender
    always runs right after the same one. Returns (results, seconds lists)."""
    results = {name: fn() for name, fn in fns.items()}
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(reps):
        for name in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return results, times


def summary(seconds):
    return min(seconds) * 1e3, statistics.median(seconds) * 1e3


def sig(x, digits=4):
    """x to `digits` significant digits: a rate on a loaded machine can be
    far below 1 GFLOP/s, where a fixed number of decimals reads 0."""
    return float(f"{x:.{digits}g}")


def comparison(kind, case, times, a, b, flops, extra):
    """One JSON line: contender a (stsa) against b (the peer)."""
    a_best, a_med = summary(times[a])
    b_best, b_med = summary(times[b])
    line = {"bench": kind, "case": case, "stsa": a, "peer": b,
            "stsa_best_ms": round(a_best, 3), "stsa_median_ms": round(a_med, 3),
            "peer_best_ms": round(b_best, 3), "peer_median_ms": round(b_med, 3),
            "stsa_gflops": sig(flops / a_best * 1e-6),
            "peer_gflops": sig(flops / b_best * 1e-6),
            "ratio_best": round(b_best / a_best, 3), "ratio_median": round(b_med / a_med, 3)}
    line.update(extra)
    return line


def emit(line):
    print(json.dumps(line), flush=True)
    if "ratio_best" in line:
        print(f"{line['bench']:6s} {line['case']:28s} {line['peer']:12s} stsa "
              f"{line['stsa_best_ms']:9.1f} ms  peer {line['peer_best_ms']:9.1f} ms  "
              f"ratio best {line['ratio_best']:.2f} median {line['ratio_median']:.2f}  "
              f"diff {line.get('max_abs_diff', float('nan')):.1e}", file=sys.stderr)


# ------------------------------------------------------------------ accuracy


def max_abs(a, b):
    return float((a.float() - b.float()).abs().max())


def reference_rows(torch, q, k, v, rows, keep=None):
    """softmax(q k^T / sqrt(D)) v in float64 for query rows `rows` (native
    indices) of [B, H, S, D] tensors; keep(q_idx, kv_idx) -> bool tensor, a
    mask predicate on native indices (None: dense). Returns [B, H, R, D]."""
    qd, kd, vd = q[:, :, rows].double(), k.double(), v.double()
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if keep is not None:
        kv = torch.arange(k.shape[2])
        s = s.masked_fill(~keep(rows[:, None], kv[None, :]), float("-inf"))
    return torch.softmax(s, dim=-1) @ vd


def row_errors(torch, rows, ref, outs):
    return {name: (float((o[:, :, rows].double() - ref).abs().max())
                   if ref is not None else None) for name, o in outs.items()}


# ------------------------------------------------------------------ dense


def dense_part(args, torch, stsa, shapes):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    g = torch.Generator().manual_seed(args.seed)
    # bf16 twice: stsa's default (on the amx backend each probability enters
    # P.V as two bf16 terms for a bf16 output, within 2^-18 of it) and one
    # term, p rounded to bf16 as SDPA's bf16 path rounds it
    one_term = stsa.Context(threads=args.threads, bf16_terms=1)
    for S, H, D in shapes:
        q, k, v = (torch.randn(1, H, S, D, generator=g) for _ in range(3))
        qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
        fns = {
            "stsa_f32": lambda: stsa.attention(q, k, v, layout="bhsd", threads=args.threads),
            "sdpa_f32": lambda: sdpa(q, k, v),
            "stsa_bf16": lambda: stsa.attention(qb, kb, vb, layout="bhsd",
                                                threads=args.threads),
            "stsa_bf16_1": lambda: stsa.attention(qb, kb, vb, layout="bhsd", ctx=one_term),
            "sdpa_bf16": lambda: sdpa(qb, kb, vb),
        }
        outs, times = interleaved(fns, args.reps)
        rows = torch.randperm(S, generator=g)[:args.ref_rows]
        ref = reference_rows(torch, q, k, v, rows) if args.ref_rows else None
        refb = reference_rows(torch, qb, kb, vb, rows) if args.ref_rows else None
        errs = row_errors(torch, rows, ref, {n: outs[n] for n in ("stsa_f32", "sdpa_f32")})
        errs.update(row_errors(torch, rows, refb,
                               {n: outs[n] for n in ("stsa_bf16", "stsa_bf16_1", "sdpa_bf16")}))
        flops = 4.0 * S * S * D * H
        for dt, a, b in (("f32", "stsa_f32", "sdpa_f32"), ("bf16", "stsa_bf16", "sdpa_bf16"),
                         ("bf16", "stsa_bf16_1", "sdpa_bf16")):
            case = f"S={S} H={H} D={D} {dt}" + (" 1 term" if a == "stsa_bf16_1" else "")
            emit(comparison("dense", case, times, a, b, flops, {
                "S": S, "H": H, "D": D, "dtype": dt, "threads": args.threads,
                "max_abs_diff": max_abs(outs[a], outs[b]),
                "err_stsa": errs[a], "err_peer": errs[b]}))


# ------------------------------------------------------------------ gemm


def gemm_part(args, torch, stsa):
    """torch.matmul (f32) on an n^3 product and on S x D times D x S against
    stsa.attention on [1, H, S, D], interleaved; best-of-reps GFLOP/s each
    and stsa's as a fraction of each GEMM's (gflops_ratio)."""
    g = torch.Generator().manual_seed(args.seed)
    S, H, D = args.gemm_shape
    n = args.gemm_n
    q, k, v = (torch.randn(1, H, S, D, generator=g) for _ in range(3))
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    qa, kb = torch.randn(S, D, generator=g), torch.randn(D, S, generator=g)
    fns = {"stsa_f32": lambda: stsa.attention(q, k, v, layout="bhsd", threads=args.threads),
           "matmul_square": lambda: a @ b,
           "matmul_qk": lambda: qa @ kb}
    flops = {"stsa_f32": 4.0 * S * S * D * H, "matmul_square": 2.0 * n ** 3,
             "matmul_qk": 2.0 * S * S * D}
    _, times = interleaved(fns, args.reps)
    gflops = {name: flops[name] / min(t) * 1e-9 for name, t in times.items()}
    for peer, case in (("matmul_square", f"{n}x{n}x{n}"), ("matmul_qk", f"{S}x{D}x{S}")):
        line = {"bench": "gemm", "case": case, "stsa": "stsa_f32", "peer": peer,
                "S": S, "H": H, "D": D, "threads": args.threads,
                "stsa_gflops": sig(gflops["stsa_f32"]),
                "peer_gflops": sig(gflops[peer]),
                "gflops_ratio": sig(gflops["stsa_f32"] / gflops[peer])}
        emit(line)
        print(f"gemm   {case:28s} {peer:12s} stsa attention {line['stsa_gflops']:8.1f} "
              f"GFLOP/s  torch.matmul {line['peer_gflops']:8.1f} GFLOP/s  "
              f"ratio {line['gflops_ratio']:.2f}", file=sys.stderr)


# ------------------------------------------------------------------ masks
# Each mask is a predicate on native token indices, written with tensor ops
# only, so the same function is FlexAttention's mask_mod (on scalars), the
# reference's mask (on index grids) and, through the orders, the stsa plan's.


class Video:
    """F frames of Hp x Wp tokens, native order i = f * P + y * Wp + x."""

    def __init__(self, frames, height, width, sink=1):
        self.F, self.P, self.sink = frames, height * width, sink
        self.N = frames * self.P

    def band(self, w):
        return lambda i, j: (i - j).abs() <= w

    def spatial(self, wf):
        """|f_i - f_j| <= wf, or j in the sink frames."""
        P, sink = self.P, self.sink
        return lambda i, j: ((i // P - j // P).abs() <= wf) | (j < sink * P)

    def temporal(self, band):
        """|(p_i F + f_i) - (p_j F + f_j)| <= band with p = y Wp + x, or j in the
        sink frames."""
        P, F, sink = self.P, self.F, self.sink

        def keep(i, j):
            pi, pj = (i % P) * F + i // P, (j % P) * F + j // P
            return ((pi - pj).abs() <= band) | (j < sink * P)
        return keep


def band_halfwidth(S, density):
    """Half-width w of |i - j| <= w over S tokens keeping `density` of the
    pairs: S (2w + 1) - w (w + 1) = density S^2 (as `stsa bench sparse`)."""
    b, c = 2.0 * S - 1, density * S * S - S
    disc = b * b - 4 * c
    return max(0, round((b - math.sqrt(disc)) / 2)) if disc > 0 else S


class Flex:
    """FlexAttention under torch.compile, with its compile and block-mask
    times kept for the flex_compile lines."""

    def __init__(self, torch, threads):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        self.torch, self.threads = torch, threads
        # compiled, as torch advises: eager at 32k tokens evaluates 10^9 pairs
        self.create_block_mask = torch.compile(create_block_mask)
        self.fn = torch.compile(flex_attention, dynamic=False)

    def block_mask(self, mask_mod, H, S):
        t0 = time.perf_counter()
        bm = self.create_block_mask(mask_mod, None, H, S, S, device="cpu")
        return bm, (time.perf_counter() - t0) * 1e3

    def first_call(self, case, q, k, v, bm, bm_ms):
        """Compiles (first call) and reports how long that took beyond a warm call."""
        t0 = time.perf_counter()
        self.fn(q, k, v, block_mask=bm)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.fn(q, k, v, block_mask=bm)
        warm = time.perf_counter() - t0
        emit({"bench": "flex_compile", "case": case, "compile_s": round(first - warm, 2),
              "first_call_s": round(first, 2), "block_mask_ms": round(bm_ms, 1),
              "block_density": round(1.0 - bm.sparsity() / 100.0, 4),
              "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "default")})


def gather(x, perm):
    """Tokens of [B, H, S, D] x in the order perm (perm[pos] = native index)."""
    return x.index_select(2, perm)


def scatter(x, perm):
    """The inverse of gather: native order again."""
    out = x.new_empty(x.shape)
    out[:, :, perm] = x
    return out


def flex_part(args, torch, stsa):
    video = Video(args.frames, args.height, args.width)
    N, H, D = video.N, args.heads, args.dim
    geo = stsa.Geometry(args.frames, args.height, args.width)
    svg = stsa.SVG(geo, density=args.svg_density, sink_frames=video.sink, dense_steps=0,
                   dense_layers=0, threads=args.threads)
    win = svg.windows
    perm_q = torch.from_numpy(geo.permutation("position_major"))
    perm_k = torch.from_numpy(geo.permutation("sink_first"))
    flex = Flex(torch, args.threads)
    g = torch.Generator().manual_seed(args.seed + 1)
    q, k, v = (torch.randn(1, H, N, D, generator=g) for _ in range(3))
    rows = torch.randperm(N, generator=g)[:args.ref_rows]
    ms = stsa.masks
    w = band_halfwidth(N, args.density)
    # case -> (predicate, stsa mask, plan orders and tiles, flex sees permuted tensors)
    cases = {
        "band": (video.band(w), ms.local(w, w), {}, False),
        "spatial": (video.spatial(win.frame_window),
                    ms.frame_window(geo, win.frame_window) | ms.sink_frames(geo, video.sink),
                    {"q_tile": win.q_tile, "kv_tile": win.kv_tile}, False),
        "temporal": (video.temporal(win.band),
                     ms.position_band(geo, win.band) | ms.sink_frames(geo, video.sink),
                     {"q_order": "position_major", "kv_order": "sink_first",
                      "q_tile": win.q_tile, "kv_tile": win.kv_tile}, True),
    }
    for case in [c for c in args.masks if c in cases]:
        keep, mask, plan_args, permuted = cases[case]
        t0 = time.perf_counter()
        plan = stsa.Plan(mask, N, heads=H, geometry=geo, **plan_args)
        plan_ms = (time.perf_counter() - t0) * 1e3
        if permuted:
            def mask_mod(b, h, i, j, keep=keep):
                return keep(perm_q[i], perm_k[j])
            fq, fk, fv = gather(q, perm_q), gather(k, perm_k), gather(v, perm_k)
        else:
            def mask_mod(b, h, i, j, keep=keep):
                return keep(i, j)
            fq, fk, fv = q, k, v
        bm, bm_ms = flex.block_mask(mask_mod, None, N)
        flex.first_call(case, fq, fk, fv, bm, bm_ms)
        fns = {"stsa_sparse": lambda: stsa.sparse_attention(
                   q, k, v, layout="bhsd", plan=plan, threads=args.threads),
               "flex": lambda: flex.fn(fq, fk, fv, block_mask=bm)}
        outs, times = interleaved(fns, args.reps)
        permute_ms = None
        if permuted:
            t0 = time.perf_counter()
            gather(q, perm_q), gather(k, perm_k), gather(v, perm_k)
            outs["flex"] = scatter(outs["flex"], perm_q)
            permute_ms = round((time.perf_counter() - t0) * 1e3, 2)
        ref = reference_rows(torch, q, k, v, rows, keep) if args.ref_rows else None
        errs = row_errors(torch, rows, ref, outs)
        st = plan.stats
        emit(comparison("flex", case, times, "stsa_sparse", "flex", 4.0 * D * st.pairs_kept, {
                            "S": N, "H": H, "D": D, "dtype": "f32", "threads": args.threads,
                            "density": round(st.density, 4),
                            "tiles_visited": round(st.tile_density, 4),
                            "plan_ms": round(plan_ms, 2), "permute_ms": permute_ms,
                            "max_abs_diff": max_abs(outs["stsa_sparse"], outs["flex"]),
                            "err_stsa": errs["stsa_sparse"], "err_peer": errs["flex"]}))
    if "svg" in args.masks:
        svg_case(args, torch, stsa, svg, video, geo, flex, perm_q, perm_k, rows)
    svg.close()


def svg_case(args, torch, stsa, svg, video, geo, flex, perm_q, perm_k, rows):
    """A whole stsa.SVG call (profiling, then each head's mask) on the built-in
    workload (spatial and temporal heads alternating) against FlexAttention
    with the kinds that call chose: one call, temporal heads permuted."""
    H, D, win = args.heads, args.dim, svg.windows
    kinds = ["spatial", "temporal"] * (H // 2) + ["spatial"] * (H % 2)
    qn, kn, vn, _ = stsa.workload(geo, H, D, seed=args.seed, kinds=kinds, layout="bhsd")
    q, k, v = (torch.from_numpy(x) for x in (qn, kn, vn))
    _, info = svg(q, k, v, layer=1, step=1, layout="bhsd")
    temporal = torch.tensor([kd == "temporal" for kd in info.kinds[0]])
    spatial_keep, temporal_keep = video.spatial(win.frame_window), video.temporal(win.band)

    def mask_mod(b, h, i, j):
        t = temporal[h]
        ni, nj = torch.where(t, perm_q[i], i), torch.where(t, perm_k[j], j)
        return torch.where(t, temporal_keep(ni, nj), spatial_keep(ni, nj))

    def to_flex(x, perm):
        return torch.stack([gather(x[:, h:h + 1], perm)[:, 0] if temporal[h] else x[:, h]
                            for h in range(H)], dim=1)

    t0 = time.perf_counter()
    fq, fk, fv = to_flex(q, perm_q), to_flex(k, perm_k), to_flex(v, perm_k)
    permute_ms = (time.perf_counter() - t0) * 1e3
    bm, bm_ms = flex.block_mask(mask_mod, H, video.N)
    flex.first_call("svg", fq, fk, fv, bm, bm_ms)
    infos = []

    def run_svg():
        out, i = svg(q, k, v, layer=1, step=1, layout="bhsd")
        infos.append(i)
        return out
    fns = {"stsa_svg": run_svg, "flex": lambda: flex.fn(fq, fk, fv, block_mask=bm)}
    outs, times = interleaved(fns, args.reps)
    t0 = time.perf_counter()
    fo = outs["flex"]
    outs["flex"] = torch.stack([scatter(fo[:, h:h + 1], perm_q)[:, 0] if temporal[h]
                                else fo[:, h] for h in range(H)], dim=1)
    permute_ms += (time.perf_counter() - t0) * 1e3
    ref = None
    if args.ref_rows:
        ref = torch.cat([reference_rows(torch, q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1],
                                        rows, temporal_keep if temporal[h] else spatial_keep)
                         for h in range(H)], dim=1)
    errs = row_errors(torch, rows, ref, outs)
    timed = infos[1:]
    profile = statistics.median(i.profile_ms / (i.profile_ms + i.attention_ms) for i in timed)
    density = info.density
    emit(comparison("flex", "svg", times, "stsa_svg", "flex",
                    4.0 * D * density * video.N * video.N * H, {
                        "S": video.N, "H": H, "D": D, "dtype": "f32", "threads": args.threads,
                        "kinds": list(info.kinds[0]), "density": round(density, 4),
                        "profile_share": round(profile, 4),
                        "permute_ms": round(permute_ms, 2),
                        "max_abs_diff": max_abs(outs["stsa_svg"], outs["flex"]),
                        "err_stsa": errs["stsa_svg"], "err_peer": errs["flex"]}))


# ------------------------------------------------------------------ main


def main(argv=None):
    args = parse_args(argv)
    if args.cold_compile:
        import tempfile
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="peers-inductor-")
    import torch

    import stsa
    torch.set_num_threads(args.threads)
    model, flags = cpu_model()
    no_flex = flex_unavailable() if "flex" in args.parts else None
    emit({"bench": "machine", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
          "cpu": model, "flags": flags, "threads": args.threads, "reps": args.reps,
          "torch": torch.__version__, "torch_cpu_capability":
          torch.backends.cpu.get_cpu_capability(), "stsa": stsa.__version__,
          "libstsa": stsa.library_version, "stsa_backend": stsa.default_context().backend,
          "flex_skipped": no_flex})
    if "dense" in args.parts:
        shapes = list(args.dense_shapes)
        if not args.no_video_dense:
            shapes.append((args.frames * args.height * args.width, args.heads, args.dim))
        dense_part(args, torch, stsa, shapes)
    if "gemm" in args.parts:
        gemm_part(args, torch, stsa)
    if "flex" in args.parts:
        if no_flex:
            print(f"peers: FlexAttention skipped: {no_flex}", file=sys.stderr)
        else:
            flex_part(args, torch, stsa)
    return 0


if __name__ == "__main__":
    sys.exit(main())
