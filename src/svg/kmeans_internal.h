/*
 * kmeans_internal.h — the state shared by the parts of stsa_kmeans:
 * kmeans.c (entry, scratch, update), kmeans_gemm.c (distances as a GEMM on
 * the qk micro-kernel), kmeans_assign.c (full and pruned assignments) and
 * kmeans_seed.c (k-means++). Internal to svg/kmeans*.
 */
#ifndef STSA_SVG_KMEANS_INTERNAL_H
#define STSA_SVG_KMEANS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"
#include "core/prefetch.h"
#include "kernel/kernels.h"

/* Row blocks of mr rows that one thread takes at a time: every K^T panel
 * (d nr floats, 8 KiB at d = 128) then serves this many qk calls from L1. */
#define STSA_KM_CHUNK_BLOCKS 8
/* Bound of the error of a squared distance in GEMM form, per (d, unit of
 * ||x||^2 + 2 max ||c||^2), u = 2^-24. With gamma_d = d u / (1 - d u), the
 * f32 sums of any order (FMA or not) give |xn^ - xn| <= gamma_d xn,
 * |cn^ - cn| <= gamma_d cn, |(x.c)^ - x.c| <= gamma_d (xn + cn) / 2, and
 * the score cn^ - 2 (x.c)^ rounds once more (u (xn + 2 cn)): the score is
 * within (gamma_d + u)(xn + 2 cn) and xn^ + score within
 * (2 gamma_d + u)(xn + 2 cn) of the exact values. The assignment's
 * augmented GEMM (x.c - cn^/2 in one sum of d + 1 terms) stays within
 * gamma_{d+1} (xn + 2 cn) of the exact score / -2 the same way. (2 d + 8) u
 * covers both with room for gamma_d > d u and for max ||c||^2 itself
 * rounded. */
#define STSA_KM_GEMM_ERR(d) ((2.0 * (d) + 8.0) * 0x1p-24)
/* Relative slack of the bound arithmetic in double (sqrt, sums, the
 * shifts' own rounding): far above its 1e-16 error, far below GEMM_ERR. */
#define STSA_KM_BOUND_SLACK 1e-9
/* Points per chunk of the k-means++ sampling sums: the draw searches the
 * chunk sums, then scans one chunk. Fixed, so the sums do not depend on the
 * thread count. */
#define STSA_KM_SAMPLE_CHUNK 1024
/* New k-means++ centres whose distances are refreshed together (one GEMM of
 * n x PENDING_MAX x d); each draw checks its candidate against them. */
#define STSA_KM_PENDING_MAX 128
/* Most centroid groups of the pruned assignments (a bit each in a mask). */
#define STSA_KM_MAX_GROUPS 16

typedef struct km {
  const float *x;
  int64_t n, ld, k;
  int d, mr, nr, threads;
  const stsa_kernels *kern;
  stsa_errbuf *err; /* the call's (for the k-means of the centroids) */
  int depth;        /* rows of each panel: d, or d + 1 for the assignment's -||c||^2/2 */
  float *panels;    /* K^T panels of the centres being compared [ceil(k/nr)][depth][nr] */
  float *cnorm;     /* ||c||^2 of those centres, padded to the panels */
  float *row_val;   /* per point: best ||c||^2 - 2 x.c (Lloyd), or D^2 (k-means++) */
  float *row_val2;  /* per point: the runner-up ||c||^2 - 2 x.c (Lloyd) */
  float *xnorm;     /* ||x_i||^2 */
  /* set: a gemm pass also writes the xnorm of the points it reads, from
   * each row while the pass has it in cache (a pass of its own over x,
   * which is larger than the caches, cost a warm k-means ~5%) */
  int norms_in_pass;
  double *upper;     /* per point: >= its exact distance to its centroid */
  double *shift;     /* [k] distance each centroid moved in the last update */
  double max_shift;  /* the largest of them (NaN if any is) */
  float cnorm_max;   /* max ||c||^2 of the centroids of the last assignment */
  int32_t *todo;     /* [n] the points a pruned assignment recomputes */
  double *chunk_cum; /* inclusive prefix of the D^2 chunk sums (k-means++) */
  int64_t *counts;   /* [k] members per cluster */
  int64_t *start;    /* [k + 1] members of the clusters before each (prefix of counts) */
  double *sums;      /* [k][d] the members' sums of each centroid (update) */
  int32_t *summed;   /* [n] the labels sums[] holds the members of, once sums_ok */
  int32_t *members;  /* [n] the points of each cluster, in index order, from start[c] */
  int64_t *cursor;   /* [k] filling members */
  int sums_ok;       /* sums[] and summed[] are those of an earlier update */
  int32_t *pending;  /* [PENDING_MAX] k-means++ centres not yet refreshed */
  /* Centroid groups (Yinyang): the assignment packs the centroids in the
   * order perm (similar centroids together), and group g is the packed
   * columns of panels [g gp, (g + 1) gp). */
  int gp, groups;
  int32_t *perm;   /* [k] packed position -> centroid */
  int32_t *pos;    /* [k] centroid -> packed position */
  int32_t *cgroup; /* [k] centroid -> its group (no divisions per point) */
  double *glow;    /* [n][groups] per point: <= its exact distance to every
                    * centroid of the group but its own */
  float *gmin;     /* [n][groups] a pass's lower bound of each group's scores */
  uint64_t *gmask; /* [n] the groups a pass computes for the point */
  int32_t *glist;  /* [groups][n] the points of each group's pass */
  int64_t *gcount; /* [groups] */
  double *gshift;  /* [groups] the largest shift of each group's centroids */
  float *gcent;    /* [groups][d] centroids of the centroids (grouping) */
  int32_t *glabel; /* [k] their labels */
  int32_t *spread; /* [panels] the full assignment's panel order, strided:
                    * a row meets near and far centroids early, not a run of
                    * similar ones, and improves its best and runner-up
                    * (the visit's slow path) less often */
  /* The first assignment of a call (Elkan's lemma: no centroid c with
   * d(a, c) >= 2 d(x, a) beats a for x): */
  int coarse_ok;       /* gcent, glabel hold the k-means of the centroids */
  double *cd_low;      /* [k][groups] by packed position: <= the exact distance
                        * from that centroid to every other one of each group */
  int32_t *coarse;     /* [n] each point's coarse cluster: the nearest centroid
                        * of the centroids, or that of its hinted label */
  const int32_t *hint; /* stsa_kmeans_args.hint (warm calls), else NULL */
  int64_t *cstart;     /* [groups + 1] packed columns of each coarse cluster */
  float *cpanels;      /* gcent packed as augmented panels */
  uint64_t *gdone;     /* [n] the groups the first assignment computed */
  /* set: the first assignment checks x for NaN/Inf through xnorm (its
   * first pass reads every point) and leaves the first bad point in
   * bad_row (else -1) before it writes a label */
  int check_rows;
  int64_t bad_row;
  char *thread_mem; /* threads x thread_bytes */
  size_t thread_bytes;
} km;

/* One thread's scratch. */
typedef struct km_thread {
  float *q;      /* [CHUNK_BLOCKS mr][d + 1] rows of x (and 1), zero padded */
  float *s;      /* [2][mr][nr] one qk result, or the two of a qk2 */
  float *rowmax; /* [2][mr] each row's maximum of each s, folded by qk */
} km_thread;

/* Floats of one thread's scratch (slot: the three arrays' sizes). */
size_t stsa_km_thread_floats(int mr, int nr, int d, size_t slot[3]);
km_thread stsa_km_thread_view(const km *m, int t);

static inline size_t stsa_km_floats64(size_t floats) { return (floats + 15) / 16 * 16; }

static inline const float *stsa_km_row(const km *m, int64_t i) {
  return m->x + i * m->ld;
}

/* Prefetches point i's row, for passes that gather rows in an order the
 * hardware prefetcher cannot follow (by label, by coarse cluster). */
static inline void stsa_km_prefetch_row(const km *m, int64_t i) {
  const float *row = stsa_km_row(m, i);
  for (int e = 0; e < m->d; e += 16) /* a 64-byte line */
    STSA_PREFETCH(row + e);
}

/* Prefetches what an assignment's visit reads and writes of point i: its
 * group minima, best and runner-up scores (scattered, as the points of a
 * gathered pass are). */
static inline void stsa_km_prefetch_assign_state(const km *m, int64_t i) {
  STSA_PREFETCH(m->gmin + i * m->groups);
  STSA_PREFETCH(m->row_val + i);
  STSA_PREFETCH(m->row_val2 + i);
}

/* Whether a row holds NaN or Inf (exponent bits all ones): integer compares,
 * which vectorise. */
static inline int stsa_km_row_nonfinite(const float *row, int d) {
  int bad = 0;
  for (int j = 0; j < d; j++) {
    uint32_t u;
    memcpy(&u, &row[j], sizeof u);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
  }
  return bad;
}

/* Threads for `items` independent pieces of work. */
static inline int stsa_km_threads_for(const km *m, int64_t items) {
  return items < m->threads ? (int)(items > 0 ? items : 1) : m->threads;
}

/* sum_j a_j b_j in 8 interleaved partial sums (a fixed order that gcc
 * vectorises). */
static inline float stsa_km_dot(const float *a, const float *b, int d) {
  float part[8] = {0};
  int j = 0;
  for (; j + 8 <= d; j += 8)
    for (int l = 0; l < 8; l++)
      part[l] += a[j + l] * b[j + l];
  for (int l = 0; j < d; j++, l++)
    part[l] += a[j] * b[j];
  return ((part[0] + part[1]) + (part[2] + part[3])) +
         ((part[4] + part[5]) + (part[6] + part[7]));
}

/* Packs `count` centres, row c at base + (idx ? idx[c] : c) * stride, into
 * K^T panels (zero padded to whole panels) and their squared norms. With
 * `augment`, each centre gains a coordinate -||c||^2 / 2 (the padding
 * -FLT_MAX) and each point of the pass a 1: qk then gives
 * x.c - ||c||^2 / 2 = -score / 2 directly, and the row maxima it folds in
 * registers bound each block's scores from below. */
void stsa_km_pack_centres(km *m, const float *base, int64_t stride, const int32_t *idx,
                          int64_t count, int augment);

/* What a pass does with one qk block: rows i0.. i0+rows-1 of the pass
 * against packed columns c0.. c0+cols-1, s[r][c] = x'_{i0+r} . c'_{c0+c}
 * (rows nr apart; the visit may overwrite them), rowmax[r] = max_c s[r][c]
 * over the panel. Each row belongs to one thread. */
typedef void (*stsa_km_visit)(km *m, void *ud, int64_t i0, int rows, int64_t c0, int cols,
                              float *s, const float *rowmax);

/* Runs qk over every (row block, panel) of the points idx[0.. nrows-1] (of
 * 0.. nrows-1 when idx is NULL) against the packed columns [col0, col0 +
 * ncols) (col0 a multiple of nr), parallel over chunks of row blocks; a
 * visit's rows are positions in that list. A row visits the panels in the
 * order order[] (panel indices from col0; NULL: in order), the same on any
 * thread count, and a score does not depend on its block or on the panel's
 * other columns. */
void stsa_km_gemm_pass(km *m, const int32_t *idx, int64_t nrows, int64_t col0,
                       int64_t ncols, const int32_t *order, stsa_km_visit visit,
                       void *ud);

/* Groups of centroids and the packing order of the assignments, from the
 * centroids of the call's first assignment (a k-means of the centroids;
 * index order if that finds no memory). Labels do not depend on it. */
void stsa_km_group(stsa_ctx *ctx, km *m, const float *centroids, uint64_t seed);

/* labels[i] = argmin_c ||c||^2 - 2 x_i . c over the k centroids (ties to
 * the lower index), for every point, and the bounds of the pruned
 * assignments. Returns n. */
int64_t stsa_km_assign_full(km *m, const float *centroids, int32_t *labels);

/* Whether the first assignment starts from coarse clusters, with a pass
 * over every point (the coarse pass, or with a hint the first pass of the
 * assignment itself) that computes the norms: check_rows then works (it
 * needs the grouping of stsa_km_group). */
int stsa_km_first_checks_rows(const km *m);

/* The same labels as stsa_km_assign_full (and its bounds) for a call's
 * first assignment, computing each point only against the groups of its
 * coarse cluster and those that Elkan's lemma cannot rule out (centroid
 * distances from the GEMM, with its error bound). Returns n; with
 * check_rows and a NaN/Inf point, 0 with bad_row set and no label written. */
int64_t stsa_km_assign_first(km *m, const float *centroids, int32_t *labels);

/* The same labels after the update moved the centroids of the last
 * assignment, recomputing only what the bounds cannot rule out. Returns
 * how many points were recomputed. */
int64_t stsa_km_assign_pruned(km *m, const float *centroids, int32_t *labels);

/* Writes k centres drawn by k-means++ into centroids. */
void stsa_km_seed(km *m, uint64_t seed, float *centroids);

#endif
