/*
 * test_dist_ulysses.c — Ulysses sequence parallelism, dense and block-sparse:
 * every rank's output shard is bitwise the single-process output (heads are
 * computed whole, in one process's tile order), for any rank count, head
 * count (fewer heads than ranks too), split, dtype and layout; with heads
 * balanced by cost and in contiguous groups (STSA_DIST_CONTIGUOUS_HEADS).
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate (dist_testutil.h)  \
                           */
#include "dist_testutil.h"

/* Every call of the matrix with each split (even, ramp, one token). */
static void dense_matrix(stsa_dist *dist, unsigned flags) {
  dt_call calls[8];
  const int n = dt_dense_calls(calls);
  for (int i = 0; i < n; i++)
    for (int split = 0; split < 3; split++) {
      calls[i].split = (dt_split)split;
      dt_run_dense(dist, STSA_DIST_ULYSSES, 0, flags, &calls[i], 1000 + (uint64_t)i);
    }
}

/* Sparse calls on the video cases: native orders, then temporal heads'
 * orders (queries position-major, keys sink-first), which the shards do not
 * follow (they are native) so every rank gathers across the whole sequence. */
static void sparse_matrix(stsa_dist *dist, unsigned flags) {
  dt_call calls[8];
  const int n = dt_dense_calls(calls);
  for (int i = 0; i < n; i++) {
    if (!calls[i].g.frames)
      continue;
    calls[i].split = (dt_split)(i % 3);
    dt_run_sparse(dist, STSA_DIST_ULYSSES, 0, flags, &calls[i], STSA_ORDER_NATIVE,
                  STSA_ORDER_NATIVE, STSA_SPARSE_EXACT, 2000 + (uint64_t)i);
    calls[i].split = (dt_split)((i + 1) % 3);
    dt_run_sparse(dist, STSA_DIST_ULYSSES, 0, flags, &calls[i], STSA_ORDER_POSITION_MAJOR,
                  STSA_ORDER_SINK_FIRST, i == 1 ? STSA_SPARSE_NAIVE : STSA_SPARSE_EXACT,
                  3000 + (uint64_t)i);
  }
}

/* The same dist serves calls of other shapes and head counts one after the
 * other (its sub-communicators and layouts are per call). */
int main(int argc, char **argv) {
  dt_init(&argc, &argv);
  stsa_dist *dist = dt_dist(STSA_DIST_ULYSSES, 0, 0);
  if (dist) {
    dense_matrix(dist, 0);
    sparse_matrix(dist, 0);
  }
  stsa_dist_free(dist);
  dist = dt_dist(STSA_DIST_ULYSSES, 0, STSA_DIST_CONTIGUOUS_HEADS);
  if (dist) {
    dense_matrix(dist, STSA_DIST_CONTIGUOUS_HEADS);
    sparse_matrix(dist, STSA_DIST_CONTIGUOUS_HEADS);
  }
  stsa_dist_free(dist);
  return dt_finish("test_dist_ulysses");
}
