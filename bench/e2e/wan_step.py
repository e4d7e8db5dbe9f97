"""Seconds per denoising step of diffusers' WanTransformer3DModel at the Wan
2.1 T2V-1.3B architecture (30 blocks, 12 heads of 128, width 1536, FFN 8960;
random weights: nothing is downloaded), with diffusers' SDPA and with stsa
(dense, svg, svg2 through stsa.diffusers.enable), interleaved.

    python bench/e2e/wan_step.py --frames 5 --height 30 --width 52 --blocks 2 --rounds 2

The 480p geometry, both dtypes in one process, 1 thread, no warm-up call for
the modes that keep no state between calls (a dense 480p call is minutes):

    python bench/e2e/wan_step.py --frames 21 --height 30 --width 52 --blocks 1 \
        --rounds 1 --dtypes f32,bf16 --modes sdpa,stsa-dense,svg,svg2 \
        --warmup svg2 --threads 1 --clock cpu

One transformer call per step and mode (a CFG pipeline makes two; the
extrapolation counts them), after one untimed call of the same mode (a
warm-up: SVG2's k-means seeds its clusters there; --warmup names the modes
that get one). Every round runs every dtype and mode once, interleaved; a
progress line per timed call goes to stderr. The self-attention time
of each call is measured inside it (stsa: handle.stats(); SDPA: a
TorchFunctionMode timing the calls whose q and k have the same length),
so the attention share of the step is measured, not assumed. Each time is
taken twice: wall-clock and the process's CPU time (time.process_time, all
its threads). With 1 thread on cores other processes share, the CPU time is
the work itself and the wall time adds the waits for a core; --clock picks
the one the table and the extrapolation use (the JSON lines hold both).

The extrapolation to a whole generation assumes: the non-attention work of
a block (projections, FFN, cross-attention with 512 text tokens, norms)
grows linearly with the video tokens; dense self-attention quadratically;
a sparse step costs its measured ratio to the dense one at the measured
geometry (an SVG call's density and profile share hold at the larger
one); 50 steps with CFG (two calls each); the preset's dense steps and
layers (wan21-480p: 10 dense steps of 50, 1 dense layer of 30) run dense;
the text encoder and the VAE are not counted. Prints a table and, with
--json, one JSON line per figure.
"""

import argparse
import json
import statistics
import sys
import time

import torch
from torch.overrides import TorchFunctionMode

WAN_1_3B = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128,
                in_channels=16, out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960,
                num_layers=30, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                eps=1e-6, rope_max_seq_len=1024)
GENERATIONS = {"480p, 81 frames": (21, 30, 52), "720p, 81 frames": (21, 45, 80)}
STEPS, CFG, DENSE_STEPS, DENSE_LAYERS = 50, 2, 10, 1


def _arg(args, kwargs, i, name):
    return args[i] if len(args) > i else kwargs[name]


def clocks():
    """(wall, CPU) now, in ms."""
    return time.perf_counter() * 1e3, time.process_time() * 1e3


def since(start):
    """(wall, CPU) ms since start = clocks()."""
    return tuple(now - then for now, then in zip(clocks(), start))


class SelfAttentionTimer(TorchFunctionMode):
    """Times SDPA calls whose q and k have the same length (self-attention)."""

    def __init__(self):
        super().__init__()
        self.ms = self.cpu_ms = 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention and \
                _arg(args, kwargs, 0, "query").shape[-2] == _arg(args, kwargs, 1, "key").shape[-2]:
            start = clocks()
            out = func(*args, **kwargs)
            wall, cpu = since(start)
            self.ms, self.cpu_ms = self.ms + wall, self.cpu_ms + cpu
            return out
        return func(*args, **kwargs)


def model_and_inputs(args, dtype_name):
    from diffusers import WanTransformer3DModel
    torch.manual_seed(0)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    model = WanTransformer3DModel(**{**WAN_1_3B, "num_layers": args.blocks}).eval().to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    latents = torch.randn(1, 16, args.frames, 2 * args.height, 2 * args.width, dtype=dtype)
    text = torch.randn(1, 512, 4096, dtype=dtype)
    return model, latents, text


def one_step(model, latents, text, timestep):
    with torch.no_grad():
        model(hidden_states=latents, timestep=torch.tensor([timestep]),
              encoder_hidden_states=text, return_dict=False)


def alone(model, latents, blocks):
    """ms of the step's self-attention calls outside the step: stsa dense on
    random q, k, v of the same shape and strides (SDPA's [B, H, S, D] views
    of diffusers' [B, S, H, D]), one per block (dense costs the same for any
    values)."""
    import stsa
    cfg = model.config
    n = latents.shape[2] * latents.shape[3] * latents.shape[4] // 4
    shape = (1, n, cfg.num_attention_heads, cfg.attention_head_dim)
    q, k, v = (torch.randn(shape, dtype=latents.dtype).transpose(1, 2) for _ in range(3))
    stsa.attention(q, k, v, layout="bhsd", threads=torch.get_num_threads())  # warm
    start = clocks()
    for _ in range(blocks):
        stsa.attention(q, k, v, layout="bhsd", threads=torch.get_num_threads())
    return since(start)


def sample(step, attn, dense_calls, sparse_calls, density=1.0):
    """One timed call: step and self-attention (wall, CPU) ms, the calls and
    the sparse calls' mean density."""
    return dict(step_ms=step[0], attn_ms=attn[0], step_cpu_ms=step[1], attn_cpu_ms=attn[1],
                dense_calls=dense_calls, sparse_calls=sparse_calls, density=density)


def timed(mode, model, latents, text, warm):
    """sample() of one call, after an untimed one when warm; for
    "stsa-alone", the self-attention calls' ms outside a step."""
    import stsa.diffusers
    if mode == "stsa-alone":
        blocks = model.config.num_layers
        return sample((0.0, 0.0), alone(model, latents, blocks), blocks, 0)
    if mode == "sdpa":
        if warm:
            one_step(model, latents, text, 900)
        timer = SelfAttentionTimer()
        start = clocks()
        with timer:
            one_step(model, latents, text, 800)
        return sample(since(start), (timer.ms, timer.cpu_ms), 0, 0)
    method = "dense" if mode == "stsa-dense" else mode
    handle = stsa.diffusers.enable(model, method=method, dense_steps=0, dense_layers=0)
    try:
        if warm:
            one_step(model, latents, text, 900)
        start = clocks()
        one_step(model, latents, text, 800)
        step = since(start)
        stat = handle.stats()[-1]
        return sample(step, (stat.ms, stat.cpu_ms), stat.dense_calls, stat.sparse_calls,
                      stat.density if stat.sparse_calls else 1.0)
    finally:
        handle.disable()


def extrapolate(rows, grid, blocks):
    """Seconds of a whole generation at grid (F, H, W) per mode."""
    n0 = grid[0] * grid[1] * grid[2]
    sdpa = rows["sdpa"]
    other_per_block_token = (sdpa["step_ms"] - sdpa["attn_ms"]) / (blocks * n0)
    dense_attn = {m: rows[m]["attn_ms"] / blocks for m in rows if m in ("sdpa", "stsa-dense")}
    out = {}
    for name, (f, h, w) in GENERATIONS.items():
        n = f * h * w
        other = other_per_block_token * n
        per_block = {m: other + a * (n / n0) ** 2 for m, a in dense_attn.items()}
        for m in ("svg", "svg2"):
            if m in rows and "stsa-dense" in rows:
                ratio = rows[m]["attn_ms"] / rows["stsa-dense"]["attn_ms"]
                dense_part = dense_attn["stsa-dense"] * (n / n0) ** 2
                layer = other + dense_part * ratio
                sparse_steps = STEPS - DENSE_STEPS
                per_step = {"dense": 30 * (other + dense_part),
                            "sparse": DENSE_LAYERS * (other + dense_part) +
                            (30 - DENSE_LAYERS) * layer}
                out[(name, m)] = CFG * (DENSE_STEPS * per_step["dense"] +
                                        sparse_steps * per_step["sparse"]) / 1e3
        for m, block in per_block.items():
            out[(name, m)] = CFG * STEPS * 30 * block / 1e3
    return out


def report(args, dtype, samples):
    """Prints one dtype's table (medians over the rounds) and extrapolation."""
    grid = (args.frames, args.height, args.width)
    n = grid[0] * grid[1] * grid[2]
    rows = {}
    clock = "" if args.clock == "wall" else "_cpu"
    print(f"Wan 1.3B architecture, {args.blocks} blocks, {n} tokens "
          f"({args.frames} x {args.height} x {args.width}), {dtype}, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds interleaved (medians), "
          f"{args.clock} time")
    print(f"{'mode':12s} {'step ms':>10s} {'self-attn ms':>13s} {'share':>6s} "
          f"{'vs sdpa':>8s} calls")
    for m, runs in samples.items():
        # step_ms / attn_ms: the chosen clock's medians (the table's and the
        # extrapolation's); the other clock's and every sample in the JSON
        rows[m] = dict(mode=m, step_ms=statistics.median(s["step" + clock + "_ms"] for s in runs),
                       attn_ms=statistics.median(s["attn" + clock + "_ms"] for s in runs),
                       dense_calls=runs[-1]["dense_calls"],
                       sparse_calls=runs[-1]["sparse_calls"],
                       density=statistics.median(s["density"] for s in runs), clock=args.clock,
                       samples=runs)
    inside = rows.pop("stsa-alone", None)
    if inside and "stsa-dense" in rows:
        print(f"stsa dense self-attention inside the step / alone: "
              f"{rows['stsa-dense']['attn_ms']:.0f} / {inside['attn_ms']:.0f} ms = "
              f"{rows['stsa-dense']['attn_ms'] / inside['attn_ms']:.3f}")
    for m, row in rows.items():
        speed = rows["sdpa"]["step_ms"] / row["step_ms"] if "sdpa" in rows else float("nan")
        print(f"{m:12s} {row['step_ms']:10.0f} {row['attn_ms']:13.0f} "
              f"{row['attn_ms'] / row['step_ms']:6.0%} {speed:7.2f}x "
              f"{row['dense_calls']} dense, {row['sparse_calls']} sparse "
              f"(density {row['density']:.2f})")
        if args.json:
            print(json.dumps({**row, "tokens": n, "blocks": args.blocks, "dtype": dtype,
                              "threads": torch.get_num_threads()}))
    if "sdpa" in rows:
        print("extrapolated whole generation (50 steps, CFG, 30 blocks; see the docstring):")
        for (name, m), seconds in sorted(extrapolate(rows, grid, args.blocks).items()):
            print(f"  {name:18s} {m:12s} {seconds / 3600:8.1f} h")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=5, help="latent frames (tokens)")
    ap.add_argument("--height", type=int, default=30, help="token rows (latent / 2)")
    ap.add_argument("--width", type=int, default=52, help="token columns (latent / 2)")
    ap.add_argument("--blocks", type=int, default=2, help="transformer blocks (Wan: 30)")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                    help="one dtype (--dtypes overrides it)")
    ap.add_argument("--dtypes", help="several, interleaved in each round: f32,bf16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="sdpa,stsa-dense,stsa-alone,svg,svg2",
                    help="stsa-alone: the self-attention calls of stsa-dense outside a step")
    ap.add_argument("--warmup", default="all",
                    help="the modes that get an untimed call first: all, none or a list")
    ap.add_argument("--threads", type=int,
                    help="torch.set_num_threads (stsa follows torch's count)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="the time the table and the extrapolation use (cpu: the process's "
                         "CPU time, for 1 thread on shared cores)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtypes = (args.dtypes or args.dtype).split(",")
    modes = args.modes.split(",")
    warm = set(modes if args.warmup == "all" else
               [] if args.warmup == "none" else args.warmup.split(","))
    setups = {d: model_and_inputs(args, d) for d in dtypes}
    samples = {d: {m: [] for m in modes} for d in dtypes}
    for r in range(args.rounds):
        for d in dtypes:  # interleaved: every dtype and mode once per round
            for m in modes:
                s = timed(m, *setups[d], m in warm)
                samples[d][m].append(s)
                print(f"{time.strftime('%H:%M:%S')} round {r + 1} {d} {m}: step "
                      f"{s['step_ms'] / 1e3:.1f} s (CPU {s['step_cpu_ms'] / 1e3:.1f} s), "
                      f"self-attention {s['attn_ms'] / 1e3:.1f} s "
                      f"(CPU {s['attn_cpu_ms'] / 1e3:.1f} s), density {s['density']:.2f}",
                      file=sys.stderr, flush=True)
    for d in dtypes:
        report(args, d, samples[d])


if __name__ == "__main__":
    main()
