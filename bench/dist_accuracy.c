/*
 * dist_accuracy.c — how far ring attention lies from one process and from
 * the exact result, as the sequence grows: docs/distributed.md's table.
 *
 * Dense attention of a plain sequence of N tokens (2 heads, D = 64; q and
 * k uniform in [-a, a], v in [-1, 1]) three ways: one process (f32, the
 * machine's kernels), the ring over all ranks (f32), and the reference
 * backend (double accumulation: "exact"). Each rank checks its own shard;
 * rank 0 prints the largest differences over all ranks, relative to the
 * largest |out|, as one JSON line.
 *
 *   mpirun -np 2 build/stsa_bench_dist_accuracy N [a]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "stsa_mpi.h"

static void fill(float *x, size_t n, uint64_t seed, float a) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = a * ((float)(seed >> 40) / (float)(1u << 23) - 1.0f);
  }
}

int main(int argc, char **argv) {
  int provided, rank, P;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const int64_t N = argc > 1 ? atoll(argv[1]) : 2048, H = 2, D = 64;
  const float a = argc > 2 ? (float)atof(argv[2]) : 1.0f;
  if (N < P) {
    if (rank == 0)
      fprintf(stderr, "usage: dist_accuracy N [a] with N >= ranks\n");
    MPI_Finalize();
    return 2;
  }
  const size_t n = (size_t)(N * H * D);
  float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4);
  float *one = malloc(n * 4), *ring = malloc(n * 4), *exact = malloc(n * 4);
  if (!q || !k || !v || !one || !ring || !exact)
    MPI_Abort(MPI_COMM_WORLD, 1);
  fill(q, n, 1, a);
  fill(k, n, 2, a);
  fill(v, n, 3, 1.0f);
  const int64_t off = rank * N / P, len = (rank + 1) * N / P - off;
  stsa_ctx *ctx, *ref;
  stsa_dist *dist;
  stsa_dist_config cfg = STSA_INIT(stsa_dist_config);
  cfg.scheme = STSA_DIST_RING;
  stsa_tensor tq = stsa_tensor_shd(q + off * H * D, STSA_F32, len, H, D);
  stsa_tensor tk = stsa_tensor_shd(k, STSA_F32, N, H, D);
  stsa_tensor tv = stsa_tensor_shd(v, STSA_F32, N, H, D);
  stsa_tensor t1 = stsa_tensor_shd(one, STSA_F32, len, H, D);
  stsa_tensor te = stsa_tensor_shd(exact, STSA_F32, len, H, D);
  stsa_tensor sk = stsa_tensor_shd(k + off * H * D, STSA_F32, len, H, D);
  stsa_tensor sv = stsa_tensor_shd(v + off * H * D, STSA_F32, len, H, D);
  stsa_tensor tr = stsa_tensor_shd(ring, STSA_F32, len, H, D);
  int ok = stsa_ctx_create(&ctx) == STSA_OK && stsa_ctx_create(&ref) == STSA_OK &&
           stsa_ctx_set(ref, STSA_PARAM_BACKEND, STSA_BACKEND_REF) == STSA_OK &&
           /* this rank's queries against every key: one process, and exact */
           stsa_attention(ctx, &tq, &tk, &tv, &t1, NULL) == STSA_OK &&
           stsa_attention(ref, &tq, &tk, &tv, &te, NULL) == STSA_OK &&
           stsa_dist_create(ctx, MPI_COMM_WORLD, &cfg, &dist) == STSA_OK &&
           stsa_dist_attention(dist, &tq, &sk, &sv, &tr, NULL, NULL) == STSA_OK;
  if (!ok)
    MPI_Abort(MPI_COMM_WORLD, 1);
  double e[4] = {0, 0, 0, 0}; /* ring-one, one-exact, ring-exact, max|out| */
  for (size_t i = 0; i < (size_t)(len * H * D); i++) {
    e[0] = fmax(e[0], fabs((double)ring[i] - one[i]));
    e[1] = fmax(e[1], fabs((double)one[i] - exact[i]));
    e[2] = fmax(e[2], fabs((double)ring[i] - exact[i]));
    e[3] = fmax(e[3], fabs((double)exact[i]));
  }
  double g[4];
  MPI_Reduce(e, g, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("{\"tokens\": %lld, \"ranks\": %d, \"qk_range\": %g, \"ring_vs_one\": %.3g, "
           "\"one_vs_exact\": %.3g, \"ring_vs_exact\": %.3g, \"max_out\": %.4g}\n",
           (long long)N, P, a, g[0] / g[3], g[1] / g[3], g[2] / g[3], g[3]);
  stsa_dist_free(dist);
  stsa_ctx_free(ref);
  stsa_ctx_free(ctx);
  MPI_Finalize();
  return 0;
}
