#!/usr/bin/env python3
"""A PROJECTION, not a measurement: sequence-parallel SVG (and dense) attention
of one Wan 2.1 720p layer (F = 21 frames of 45 x 80 tokens, S = 75,600, 40 heads,
D = 128, bf16 q/k/v/out) on 8 and 64 nodes, built from what was measured on
this machine:

  * compute: the time per kept (query, key) pair, from one SVG call
    (`stsa bench svg --preset wan21-720p --heads 2 --json`: svg_ms over the
    kept pairs, density x heads x S^2) and from dense (dense_ms over heads x S^2);
  * the network: MPI_Alltoall latency alpha and bandwidth beta per rank
    (`mpirun -np 2 --mca btl tcp,self build/stsa_bench_alltoall`; beta at the
    largest block, the size of Wan 720p's per-peer blocks).

The model:
  * Heads: a third spatial, two thirds temporal (13 + 27, the workload's
    default mix). A spatial head keeps keys within +-w_f frames plus frame 0
    (w_f = 2 at the preset's density); a temporal head keeps a band of
    positions in every frame (uniform over frames, fraction x chosen so the
    head's density is the session's) plus frame 0. Work is proportional to
    kept pairs at the measured cost per pair.
  * Ulysses: heads to ranks (P > H: ranks past the head count compute
    nothing and only relay their shard) longest first to the least loaded (as
    the library does); compute = the most loaded rank. Communication: four
    all-to-alls (q, k, v, out), each rank sending (P-1)/P of its shard of
    one tensor (S/P x H x D x 2 bytes): (P-1) alpha + bytes / beta each, not
    overlapped.
  * Hybrid U x R (P > H): Ulysses inside groups of U, then R ring steps;
    step t has rank g compute its heads' pairs of (chunk g, chunk g-t). As
    the library runs it (transfers moving during compute, two K/V buffers),
    rank g may start step t+1 once it has finished step t, its predecessor
    started step t plus one K/V transfer (2 x S/R x H/U x D x 2 bytes), and
    its successor started step t. "compute" is the busiest rank's own work,
    "comm" the rest of the layer: waits on the ring and the all-to-alls.
Every node is this machine (2 cores); the fabric keeps the measured per-rank
bandwidth for any number of nodes (non-blocking).

  bench/dist_projection.py --svg-ms 7528.7 --svg-heads 2 --svg-density 0.27664 \\
      --dense-ms 26954.5 --dense-heads 2 --alpha-us 7.7 --beta-gbs 2.07 [--json]
"""
import argparse
import json
import math

F, HP, WP = 21, 45, 80
P_FRAME = HP * WP
S = F * P_FRAME
H, D, ELEM = 40, 128, 2
W_F = 2                      # the session's frame window at wan21-720p
DENS_SPATIAL, DENS_TEMPORAL = 0.265306, 0.287982  # the session's realised densities
N_SPATIAL = 13


def frame_counts(lo, hi):
    """Tokens of each frame in the native token range [lo, hi)."""
    n = [0] * F
    for f in range(F):
        a, b = max(lo, f * P_FRAME), min(hi, (f + 1) * P_FRAME)
        n[f] = max(0, b - a)
    return n


def kept(kind, nq, nk):
    """Kept pairs between queries with frame counts nq and keys nk."""
    if kind == "dense":
        return sum(nq) * sum(nk)
    if kind == "spatial":
        return sum(nq[a] * nk[b] for a in range(F) for b in range(F)
                   if abs(a - b) <= W_F or b == 0)
    # temporal: frame 0 whole, a band of positions x in the other frames
    x = (DENS_TEMPORAL - 1 / F) / (1 - 1 / F)
    return sum(nq) * (nk[0] + x * sum(nk[1:]))


def kinds(attention):
    return ["dense"] * H if attention == "dense" else \
        ["spatial"] * N_SPATIAL + ["temporal"] * (H - N_SPATIAL)


def balance(costs, members):
    load = [0.0] * members
    owner = [0] * len(costs)
    for h in sorted(range(len(costs)), key=lambda h: (-costs[h], h)):
        best = min(range(members), key=lambda m: (load[m], m))
        load[best] += costs[h]
        owner[h] = best
    return owner


def a2a_ms(P, bytes_per_rank, alpha_us, beta_gbs):
    return 0.0 if P == 1 else (P - 1) * alpha_us * 1e-3 + bytes_per_rank / (beta_gbs * 1e9) * 1e3


def project(attention, U, R, cost_ms, alpha_us, beta_gbs):
    P = U * R
    ks = kinds(attention)
    full = frame_counts(0, S)
    head_cost = [kept(k, full, full) * cost_ms for k in ks]
    owner = balance(head_cost, U)
    shard_bytes = (S / P) * H * D * ELEM * (U - 1) / U
    comm = 4 * a2a_ms(U, shard_bytes, alpha_us, beta_gbs)
    if R == 1:
        compute = max(sum(c for h, c in enumerate(head_cost) if owner[h] == m) for m in range(U))
        return compute, comm
    chunks = [frame_counts(g * S // R, (g + 1) * S // R) for g in range(R)]
    heads_of = [[h for h in range(H) if owner[h] == m] for m in range(U)]
    step_bytes = 2 * (S / R) * max(len(x) for x in heads_of) * D * ELEM
    transfer = alpha_us * 1e-3 + step_bytes / (beta_gbs * 1e9) * 1e3
    # Every Ulysses member m runs its own ring; simulate each. Rank g's step
    # t computes pair (g, g - t). The chunk of step t + 1 comes from g - 1,
    # which sends it when it starts step t (transfers move during compute);
    # a send buffer is received into again one step later, so g may not
    # start step t + 1 before g + 1 has started step t.
    worst = 0.0
    for m in range(U):
        work = [[sum(kept(ks[h], chunks[g], chunks[(g - t) % R]) * cost_ms
                     for h in heads_of[m]) for t in range(R)] for g in range(R)]
        start = [[0.0] * R for _ in range(R)]
        end = [[0.0] * R for _ in range(R)]
        for t in range(R):
            for g in range(R):
                if t > 0:
                    start[g][t] = max(end[g][t - 1], start[(g - 1) % R][t - 1] + transfer,
                                      start[(g + 1) % R][t - 1])
                end[g][t] = start[g][t] + work[g][t]
        worst = max(worst, max(end[g][R - 1] for g in range(R)))
    own = max(sum(kept(ks[h], chunks[g], chunks[j]) * cost_ms for h in heads_of[m]
                  for j in range(R)) for m in range(U) for g in range(R))
    return own, comm + (worst - own)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--svg-ms", type=float, required=True)
    ap.add_argument("--svg-heads", type=int, required=True)
    ap.add_argument("--svg-density", type=float, required=True)
    ap.add_argument("--dense-ms", type=float, required=True)
    ap.add_argument("--dense-heads", type=int, required=True)
    ap.add_argument("--alpha-us", type=float, required=True, help="all-to-all latency")
    ap.add_argument("--beta-gbs", type=float, required=True, help="GB/s per rank")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cost = {"svg": a.svg_ms / (a.svg_density * a.svg_heads * S * S),
            "dense": a.dense_ms / (a.dense_heads * S * S)}
    rows = []
    for attention in ("svg", "dense"):
        one = project(attention, 1, 1, cost[attention], a.alpha_us, a.beta_gbs)[0]
        for name, U, R in (("1 node", 1, 1), ("ulysses 8", 8, 1), ("ulysses 40", 40, 1),
                           ("ulysses 64", 64, 1), ("hybrid 8x8", 8, 8), ("hybrid 32x2", 32, 2)):
            compute, comm = project(attention, U, R, cost[attention], a.alpha_us, a.beta_gbs)
            total = compute + comm
            P = U * R
            rows.append({"attention": attention, "layout": name, "nodes": P,
                         "compute_ms": round(compute, 1), "comm_ms": round(comm, 1),
                         "layer_ms": round(total, 1), "comm_share": round(comm / total, 4),
                         "speedup": round(one / total, 2),
                         "efficiency": round(one / total / P, 3)})
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return
    print("PROJECTION (model: bench/dist_projection.py), Wan 2.1 720p, one layer, 40 heads, bf16")
    print(f"{'attention':9} {'layout':12} {'nodes':>5} {'compute ms':>11} {'comm ms':>9} "
          f"{'layer ms':>9} {'comm %':>7} {'speed-up':>9} {'efficiency':>10}")
    for r in rows:
        print(f"{r['attention']:9} {r['layout']:12} {r['nodes']:5d} {r['compute_ms']:11.1f} "
              f"{r['comm_ms']:9.1f} {r['layer_ms']:9.1f} {100 * r['comm_share']:6.2f}% "
              f"{r['speedup']:9.2f} {r['efficiency']:10.3f}")


if __name__ == "__main__":
    main()
