"""stsa's OpenMP threads beside other work, from Python: the wait policy the
binding sets for libgomp's load (passive) against libgomp's default
(spinning), interleaved.

    PYTHONPATH=python/src python bench/e2e/threads.py --rounds 5   # in a checkout

Each configuration is a fresh Python process (libgomp reads its wait policy
once, when it is loaded, so a policy is a process); each round runs every
configuration once, in turn, and the table gives the median over rounds.

busy:  a busy loop pinned to CPU 1 (taskset, started and stopped here);
       stsa.attention on [1, 960, 4, 64] f32 with 2 threads and with 1,
       --calls timed calls after 3 untimed ones, their median.
       "default" is the binding as it was: libgomp loaded (ctypes) before
       stsa, so its default policy runs and stsa.threading_info() says the
       lever could not apply; "passive" is a plain `import stsa`.
torch: torch imported, with torch.get_num_threads() threads for torch and
       stsa; --calls times: an stsa call "alone" (after the previous stsa
       call), a torch matmul [512, 512] x [512, 512], an stsa call "in a
       step" (right after the matmul); the cost is the median of the
       in-step calls over the median of the alone ones, both from the same
       process, in alternation (no pauses: the cost of torch's work and its
       pool's wait policy right before a call, as inside a step). "torch first"
       imports torch before stsa (torch's wheel ships a libgomp.so.1 of the
       same name, which libstsa then shares, initialised already: the
       lever cannot apply); "torch first, user passive" the same with
       OMP_WAIT_POLICY=passive in the process's environment (what a user
       can do by hand); "stsa first" imports stsa before torch (torch then
       shares stsa's libgomp, passive).
The wait-policy variables are removed from every other configuration's
environment. Needs numpy and taskset; the torch experiment needs torch
(skipped without). Prints a table, and with --json one JSON line per
configuration with every round's figures.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SHAPE = (1, 960, 4, 64)
MATMUL = 512
WARMUP = 3
POLICY_VARIABLES = ("OMP_WAIT_POLICY", "OMP_WAIT_POLICY_ALL", "GOMP_SPINCOUNT")


def child(cfg):
    """One configuration, in this process: prints a JSON line."""
    if cfg["order"] == "default":
        import ctypes
        ctypes.CDLL("libgomp.so.1")  # initialised before stsa: the default policy
    if cfg["order"].startswith("torch first"):
        import torch  # noqa: F401  (loads torch's libgomp first)
    import numpy as np
    import stsa
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(SHAPE, dtype=np.float32) for _ in range(3))

    def timed(fn):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    result = dict(cfg)
    if cfg["experiment"] == "busy":
        calls = [timed(lambda: stsa.attention(q, k, v, layout="bshd", threads=cfg["threads"]))
                 for _ in range(cfg["calls"] + WARMUP)][WARMUP:]
        result.update(ms=statistics.median(calls))
    else:
        import torch
        threads = torch.get_num_threads()
        a = torch.randn(MATMUL, MATMUL)
        call = lambda: stsa.attention(q, k, v, layout="bshd", threads=threads)  # noqa: E731
        alone, in_step, torch_ms = [], [], []
        for _ in range(cfg["calls"] + WARMUP):
            alone.append(timed(call))
            torch_ms.append(timed(lambda: a @ a))
            in_step.append(timed(call))
        result.update(threads=threads, alone=statistics.median(alone[WARMUP:]),
                      in_step=statistics.median(in_step[WARMUP:]),
                      torch_ms=statistics.median(torch_ms[WARMUP:]))
    info = stsa.threading_info()
    result.update(wait_policy=info.wait_policy, set_by=info.set_by, runtime=info.runtime)
    print(json.dumps(result))


def run_child(cfg):
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARIABLES}
    if cfg["order"].endswith("user passive"):
        env["OMP_WAIT_POLICY"] = "passive"
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def rounds(configs, n):
    """Every configuration once per round, in turn; per configuration its
    rounds' results."""
    results = [[] for _ in configs]
    for _ in range(n):
        for i, cfg in enumerate(configs):
            results[i].append(run_child(cfg))
    return results


def busy_loop():
    """A busy Python loop pinned to CPU 1, or None without taskset."""
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return None
    return subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    try:
        import torch  # noqa: F401
        has_torch = True
    except ImportError:
        has_torch = False
    busy_cfgs = [dict(experiment="busy", order=order, threads=threads, calls=args.calls)
                 for order in ("default", "passive") for threads in (2, 1)]
    torch_cfgs = [dict(experiment="torch", order=order, calls=args.calls)
                  for order in ("torch first", "torch first, user passive", "stsa first")]
    loop = busy_loop()
    if loop is None:
        sys.exit("threads.py: needs taskset and 2 CPUs for the busy loop")
    try:
        time.sleep(0.5)
        busy = rounds(busy_cfgs, args.rounds)
    finally:
        loop.kill()
        loop.wait()
    with_torch = rounds(torch_cfgs, args.rounds) if has_torch else []
    print(f"stsa.attention {list(SHAPE)} f32: medians of {args.rounds} rounds, each the "
          f"median of {args.calls} calls")
    print("\n| busy loop on CPU 1 | threads | ms | policy that ran (set by) |")
    print("|---|---|---|---|")
    for runs in busy:
        r = runs[0]
        print(f"| {r['order']} | {r['threads']} | {median_of(runs, 'ms'):.2f} | "
              f"{r['wait_policy']} ({r['set_by']}) |")
    if with_torch:
        print("\n| torch process | threads | alone ms | in a step ms | in a step / alone | "
              "torch matmul ms | policy that ran (set by) |")
        print("|---|---|---|---|---|---|---|")
    for runs in with_torch:
        r = runs[0]
        ratio = statistics.median(x["in_step"] / x["alone"] for x in runs)
        print(f"| {r['order']} | {r['threads']} | {median_of(runs, 'alone'):.2f} | "
              f"{median_of(runs, 'in_step'):.2f} | {ratio:.3f} | "
              f"{median_of(runs, 'torch_ms'):.2f} | {r['wait_policy']} ({r['set_by']}) |")
    if args.json:
        for runs in busy + with_torch:
            print(json.dumps(runs))


if __name__ == "__main__":
    main()
