/*
 * kmeans.h — Euclidean Lloyd k-means of one (batch, head)'s query or key
 * vectors, for Sparse VideoGen 2's semantic-aware permutation (reference:
 * shared/reference/svg2.md). Internal to the library.
 *
 * Seeding (warm = 0): k-means++ D^2 sampling, deterministic from the seed.
 * Each centre is drawn by rejection from the distances of the last full
 * refresh (an upper bound of the current ones, so the draw is exact D^2
 * sampling), and the distances are refreshed for a batch of new centres at
 * once as a GEMM on the context's qk micro-kernel: the n k d multiply-adds of
 * k-means++ run at GEMM speed instead of one pass over x per centre.
 * When every point is at distance 0 from a centre (fewer distinct points
 * than k), the remaining centres are points drawn uniformly: duplicated
 * centroids, whose clusters stay empty.
 *
 * Lloyd iteration: assignment, argmin_c ||c||^2 - 2 x.c on the qk kernel
 * (ties to the lower index; a row with NaN keeps label 0), then update, each
 * centroid the mean of its members summed in double in index order. An
 * empty cluster keeps its old centroid. Labels are those of the last
 * assignment and centroids the means of those clusters, so sizes[c] counts
 * the members of centroid c.
 *
 * The first assignment of a call (with 8 groups or more, below) computes
 * each point against the groups of its nearest centroid of the centroids,
 * then only against the groups that Elkan's lemma (a centroid c with
 * d(a, c) >= 2 d(x, a) cannot beat a) does not rule out, from the
 * centroids' distances to each other (their GEMM, with its error bound):
 * at Wan 480p's 433 key clusters about half the work of a full pass.
 *
 * Pruned assignments (Yinyang: Ding et al., ICML 2015): at the start of a
 * call the centroids are grouped by a k-means of the centroids (16 groups
 * at most, each of whole panels of the packed order). The first assignment
 * of a call keeps, for every point, an upper bound u of its
 * distance to its centroid and, per group, a lower bound of its distance to
 * every centroid of the group but its own. Each later assignment first
 * moves them (u += shift of its centroid, a group's bound -= the group's
 * largest shift) and skips a point when no group may beat its centroid
 * (u^2 + 2 e < bound^2, e a bound of the f32 error of a GEMM-form score);
 * else it recomputes the point against its own group and the groups that
 * may, on the same GEMM path, so labels equal a full assignment's.
 *
 * Deterministic: labels, centroids and sizes are bitwise identical for any
 * thread count (ctx->threads) and any run with the same arguments.
 */
#ifndef STSA_SVG_KMEANS_H
#define STSA_SVG_KMEANS_H

#include <stdint.h>

#include "core/context.h"
#include "core/workspace.h"
#include "stsa.h"

/* Points: x[i * ld + j] for i < n, j < d (f32). */
typedef struct stsa_kmeans_args {
  const float *x;
  int64_t n;  /* 1..2^31 */
  int d;      /* 1..STSA_MAX_HEAD_DIM */
  int64_t ld; /* >= d */
  int64_t k;  /* 1..n */
  int warm;   /* 1: centroids hold a previous solution to start from; 0: k-means++ */
  int iters;  /* max Lloyd iterations (>= 0; 0: seeding (if cold) + one assignment) */
  /* Stop after the iteration whose largest centroid shift (Euclidean
   * distance, in the units of x: an absolute value, as in the published
   * method, which uses 1e-4) is <= tol. tol >= 0 and finite; 0 stops at an
   * exact fixpoint only. */
  double tol;
  uint64_t seed; /* of the k-means++ draws (unused when warm) */
  /* 1: the caller has already checked x for NaN/Inf, so the context's
   * check_finite scan is not repeated. 0: the call checks x before it
   * writes anything: cold, with a scan ahead of the seeding; warm, through
   * the norms of the first assignment's pass over every point where that
   * pass exists (a scan ahead otherwise), which spares a pass over x (the
   * SVG session leaves the video rows of q and k to its k-means so). */
  int finite_checked;
  int threads;      /* threads of this call (0: the context's) */
  stsa_errbuf *err; /* where a failure's message goes (NULL: the context's).
                     * With threads and err set, calls may run concurrently
                     * on one context: it is only read then. */
  /* Warm calls only (NULL: none): hint[i], in 0..k-1, point i's label of
   * the previous call (may be the labels array itself). The first
   * assignment then starts each point at its hinted cluster's group of
   * centroids rather than at the nearest group centre, which spares it a
   * pass over x that found those. The labels are the same either way (the
   * bounds decide them); only the work depends on the hint. */
  const int32_t *hint;
  /* NULL: the scratch is allocated and freed by each call. Else it is kept
   * in this workspace between calls (grown when a call needs more), for a
   * caller whose calls repeat the same sizes: the scratch (megabytes at
   * video token counts) is then not mapped and zeroed by the kernel again
   * on every call. One call at a time uses a workspace. */
  stsa_workspace *scratch;
} stsa_kmeans_args;

/* centroids [k][d] (rows d apart) in when warm, out always; labels [n] out;
 * sizes [k] out (may be NULL); *iters_done out (may be NULL): the Lloyd
 * iterations run. Returns STSA_OK, or STSA_ERR_NULL_ARG / STSA_ERR_BAD_PARAM
 * (nothing written) / STSA_ERR_OUT_OF_MEMORY (nothing written) with a
 * message in ctx->err. Scratch: O(n + k d) floats plus O(d) per thread,
 * per call or in a->scratch. */
stsa_status stsa_kmeans(stsa_ctx *ctx, const stsa_kmeans_args *a, float *centroids,
                        int32_t *labels, int64_t *sizes, int *iters_done);

/* Test and measurement switches of stsa_kmeans_probed. */
typedef struct stsa_kmeans_probe {
  int no_prune; /* 1: every assignment in full (the reference of the pruned ones) */
  /* when not NULL, [max(iters, 1)] out: for each assignment run, the points
   * whose distances it computed (n for a full one) */
  int64_t *recomputed;
} stsa_kmeans_probe;

/* stsa_kmeans with the probe's switches (probe may be NULL: stsa_kmeans). */
stsa_status stsa_kmeans_probed(stsa_ctx *ctx, const stsa_kmeans_args *a,
                               const stsa_kmeans_probe *probe, float *centroids,
                               int32_t *labels, int64_t *sizes, int *iters_done);

#endif
