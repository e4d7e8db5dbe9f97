"""Method auto against svg, svg2 and dense at Wan 480p on the built-in
workload (a semantic and a spatial head, D 128, f32): warm calls of one
layer, every method interleaved with a dense call in each round, medians.

    PYTHONPATH=python/src python bench/methods_wan.py [threads] [rounds]
"""
import statistics
import sys
import time

import numpy as np

import stsa

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
kinds = ["semantic", "spatial"]
q, k, v, _ = stsa.workload("wan21-480p", heads=len(kinds), head_dim=128, seed=1,
                               kinds=kinds)
sessions = {}
for budget in (None, 0.05):
    tag = "" if budget is None else f" b={budget}"
    sessions["svg" + tag] = stsa.SVG("wan21-480p", max_error=budget, threads=threads)
    sessions["svg2" + tag] = stsa.SVG2("wan21-480p", max_error=budget, threads=threads)
    sessions["auto" + tag] = stsa.Auto("wan21-480p", max_error=budget, threads=threads)

times = {name: [] for name in ["dense", *sessions]}
info_of = {}
step0 = 30  # past every preset's dense steps
for r in range(rounds + 1):  # round 0: the cold calls (k-means seeding), not counted
    t0 = time.perf_counter()
    dense = stsa.attention(q, k, v, layout="bshd", threads=threads)
    if r:
        times["dense"].append(time.perf_counter() - t0)
    for name, s in sessions.items():
        t0 = time.perf_counter()
        out, info = s(q, k, v, layer=5, step=step0 + r, layout="bshd")
        dt = time.perf_counter() - t0
        if r:
            times[name].append(dt)
            rel = float(np.linalg.norm(out - dense) / np.linalg.norm(dense))
            info_of[name] = (info, rel)

d = statistics.median(times["dense"])
print(f"wan21-480p, {len(kinds)} heads {kinds}, D 128, f32, {threads} threads, "
      f"{rounds} warm rounds (medians); dense {1e3 * d:.1f} ms")
print(f"{'method':12s} {'ms':>8s} {'speed-up':>9s} {'density':>8s} {'prof ms':>8s} "
      f"{'rel L2':>8s}  per head (choice / est)")
for name in sessions:
    m = statistics.median(times[name])
    info, rel = info_of[name]
    heads = []
    for h in range(len(kinds)):
        ch = info.choice[0][h] if getattr(info, "choice", None) is not None else info.kind[0][h]
        est = info.est_error[0][h]
        heads.append(f"{ch}/{est:.3f}")
    print(f"{name:12s} {1e3 * m:8.1f} {d / m:8.2f}x {info.density:8.3f} "
          f"{info.profile_ms:8.1f} {rel:8.4f}  {' '.join(heads)}")
