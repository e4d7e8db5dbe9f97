#!/usr/bin/env python3
"""A projection, not a measurement: sequence-parallel SVG attention of one
Wan 2.1 720p layer (S = 75,600 tokens, 40 heads, D = 128, bf16 q/k/v/out) on
8 and 64 nodes, from two things measured on this machine:

  * per-head compute: the SVG call of one head (`stsa bench svg --preset
    wan21-720p --heads H --json`: svg_ms / H), and dense (dense_ms / H);
  * the network: MPI_Alltoall latency and bandwidth per rank on loopback TCP
    (`mpirun -np 2 --mca btl tcp,self build/stsa_bench_alltoall`).

The model (stated in docs/benchmarks.md):
  Ulysses, P <= H nodes: compute = ceil(H / P) heads x t_head (whole heads:
  the rank with the most heads sets the pace); communication = 4 all-to-alls
  (q, k, v out; the output back), each rank sending (P-1)/P of its shard of
  one tensor, S/P x H x D x 2 bytes: T_a2a = (P-1) alpha + bytes / beta;
  no overlap (the exchanges are blocking).
  Hybrid U x R = P (when P > H): Ulysses inside groups of U (as above with the
  shard S/P), then R ring steps per layer, each computing (S/R)^2 pairs of
  H/U heads (t_head x (H/U) / R^2 at uniform density; skipped empty pairs
  would only help) while the next K/V chunk, 2 x S/R x H/U x D x 2 bytes,
  travels: step = max(compute, alpha + bytes / beta).
Every node is assumed to be this machine (2 cores) and the network to keep
the measured per-rank bandwidth at any size (a non-blocking fabric).

  bench/dist_projection.py --svg-ms-per-head X --dense-ms-per-head Y \
      --alpha-us A --beta-gbs B [--json]
"""
import argparse
import json
import math

S, H, D, ELEM = 75600, 40, 128, 2  # Wan 2.1 720p, bf16


def a2a_ms(P, bytes_per_rank, alpha_us, beta_gbs):
    if P == 1:
        return 0.0
    return ((P - 1) * alpha_us * 1e-3) + bytes_per_rank / (beta_gbs * 1e9) * 1e3


def ulysses(P, t_head, alpha_us, beta_gbs, shard_tokens=None):
    shard = shard_tokens if shard_tokens else S / P
    tensor_bytes = shard * H * D * ELEM * (P - 1) / P
    comm = 4 * a2a_ms(P, tensor_bytes, alpha_us, beta_gbs)
    compute = math.ceil(H / P) * t_head
    return compute, comm


def hybrid(U, R, t_head, alpha_us, beta_gbs):
    P = U * R
    shard = S / P
    tensor_bytes = shard * H * D * ELEM * (U - 1) / U
    comm = 4 * a2a_ms(U, tensor_bytes, alpha_us, beta_gbs)
    heads = math.ceil(H / U)
    step_compute = heads * t_head / (R * R)
    chunk_bytes = 2 * (S / R) * heads * D * ELEM
    step_comm = alpha_us * 1e-3 + chunk_bytes / (beta_gbs * 1e9) * 1e3
    compute = R * step_compute
    exposed = (R - 1) * max(0.0, step_comm - step_compute)  # the last step sends nothing
    return compute, comm + exposed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--svg-ms-per-head", type=float, required=True)
    ap.add_argument("--dense-ms-per-head", type=float, required=True)
    ap.add_argument("--alpha-us", type=float, required=True, help="all-to-all latency")
    ap.add_argument("--beta-gbs", type=float, required=True, help="GB/s per rank")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for kind, t_head in (("svg", a.svg_ms_per_head), ("dense", a.dense_ms_per_head)):
        one = H * t_head
        cases = [("1 node", 1, 1), ("ulysses 8", 8, 1), ("ulysses 40", 40, 1),
                 ("hybrid 8x8", 8, 8)]
        for name, U, R in cases:
            P = U * R
            compute, comm = (ulysses(P, t_head, a.alpha_us, a.beta_gbs) if R == 1 else
                             hybrid(U, R, t_head, a.alpha_us, a.beta_gbs))
            total = compute + comm
            rows.append({"attention": kind, "layout": name, "nodes": P,
                         "compute_ms": round(compute, 1), "comm_ms": round(comm, 1),
                         "layer_ms": round(total, 1), "comm_share": round(comm / total, 4),
                         "speedup": round(one / total, 2),
                         "efficiency": round(one / total / P, 3)})
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return
    print("PROJECTION (model in bench/dist_projection.py), Wan 2.1 720p, one layer, bf16")
    print(f"{'attention':9} {'layout':12} {'nodes':>5} {'compute ms':>11} {'comm ms':>9} "
          f"{'layer ms':>9} {'comm %':>7} {'speed-up':>9} {'efficiency':>10}")
    for r in rows:
        print(f"{r['attention']:9} {r['layout']:12} {r['nodes']:5d} {r['compute_ms']:11.1f} "
              f"{r['comm_ms']:9.1f} {r['layer_ms']:9.1f} {100 * r['comm_share']:6.2f}% "
              f"{r['speedup']:9.2f} {r['efficiency']:10.3f}")


if __name__ == "__main__":
    main()
