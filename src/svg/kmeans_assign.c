/* kmeans_assign.c — Lloyd's assignments: full, and pruned by per-group
 * distance bounds (Yinyang k-means: Ding et al., ICML 2015), with labels
 * always those of a full f32 assignment (see kmeans.h). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "svg/kmeans.h"
#include "svg/kmeans_internal.h"

/* Iterations of the k-means of the centroids that forms the groups: a
 * coarse grouping serves (the bounds only need nearby centroids together). */
#define GROUP_ITERS 5
/* Groups from which the first assignment of a call prunes by centroid
 * distances (measured at Wan 480p, one thread: k 433 in 14 groups,
 * 45 -> 21-28 ms; k 130 in 5 groups of two panels no gain, in 9 of one
 * 18-20 -> 15 ms). */
#define FIRST_MIN_GROUPS 8

/* ---- groups ----------------------------------------------------------------- */

static int group_of_column(const km *m, int64_t col) {
  return (int)(col / m->nr / m->gp);
}

/* Columns of group g: [first, first + count). */
static int64_t group_first(const km *m, int g) { return (int64_t)g * m->gp * m->nr; }

static int64_t group_count(const km *m, int g) {
  const int64_t first = group_first(m, g), end = first + (int64_t)m->gp * m->nr;
  return (end < m->k ? end : m->k) - first;
}

void stsa_km_group(stsa_ctx *ctx, km *m, const float *centroids, uint64_t seed) {
  for (int64_t c = 0; c < m->k; c++)
    m->perm[c] = (int32_t)c;
  if (m->groups > 1) {
    /* the centroids of one coarse cluster together, in index order */
    stsa_kmeans_args a = {.x = centroids,
                          .n = m->k,
                          .d = m->d,
                          .ld = m->d,
                          .k = m->groups,
                          .iters = GROUP_ITERS,
                          .seed = seed,
                          .finite_checked = 1,
                          .threads = m->threads,
                          .err = m->err};
    m->coarse_ok = stsa_kmeans(ctx, &a, m->gcent, m->glabel, NULL, NULL) == STSA_OK;
    if (m->coarse_ok) {
      int64_t at = 0;
      for (int g = 0; g < m->groups; g++) {
        m->cstart[g] = at;
        for (int64_t c = 0; c < m->k; c++)
          if (m->glabel[c] == g)
            m->perm[at++] = (int32_t)c;
      }
      m->cstart[m->groups] = at;
    } else {
      stsa_err_clear(m->err); /* out of memory: index order serves too */
    }
  }
  for (int64_t v = 0; v < m->k; v++) {
    m->pos[m->perm[v]] = (int32_t)v;
    m->cgroup[m->perm[v]] = group_of_column(m, v);
  }
  /* the full pass's panel order: strided by about sqrt(panels), so that
   * panels of similar centroids (neighbours in the packed order) are far
   * apart in the visit */
  const int64_t npan = (m->k + m->nr - 1) / m->nr;
  int64_t stride = (int64_t)ceil(sqrt((double)npan)), at = 0;
  stride = stride < 1 ? 1 : stride;
  for (int64_t j = 0; j < stride; j++)
    for (int64_t p = j; p < npan; p += stride)
      m->spread[at++] = (int32_t)p;
}

/* ---- the visit -------------------------------------------------------------- */

/* The minimum of the scores -2 s[c] of one block row (c < cols, c !=
 * skip; INFINITY if none; NaN never wins), in 8 elementwise partial minima
 * so that it vectorises (a float min reduction alone does not without
 * -ffast-math). */
static inline float block_min(const float *s, int cols, int skip) {
  float part[8];
  for (int l = 0; l < 8; l++)
    part[l] = INFINITY;
  int c = 0;
  for (; c + 8 <= cols; c += 8)
    for (int l = 0; l < 8; l++) {
      const float v = c + l == skip ? INFINITY : -2.0f * s[c + l];
      part[l] = v < part[l] ? v : part[l];
    }
  for (int l = 0; c < cols; c++, l++) {
    const float v = c == skip ? INFINITY : -2.0f * s[c];
    part[l] = v < part[l] ? v : part[l];
  }
  float mn = INFINITY;
  for (int l = 0; l < 8; l++)
    mn = part[l] < mn ? part[l] : mn;
  return mn;
}

/* The lowest centroid index perm[c] of the columns whose score -2 s[c] is
 * `score` (INT32_MAX if none), in 8 partial minima (vectorises). */
static inline int32_t lowest_with(const float *s, int cols, float score,
                                  const int32_t *perm) {
  int32_t part[8];
  for (int l = 0; l < 8; l++)
    part[l] = INT32_MAX;
  int c = 0;
  for (; c + 8 <= cols; c += 8)
    for (int l = 0; l < 8; l++) {
      const int32_t key = -2.0f * s[c + l] == score ? perm[c + l] : INT32_MAX;
      part[l] = key < part[l] ? key : part[l];
    }
  for (int l = 0; c < cols; c++, l++) {
    const int32_t key = -2.0f * s[c] == score ? perm[c] : INT32_MAX;
    part[l] = key < part[l] ? key : part[l];
  }
  int32_t lowest = INT32_MAX;
  for (int l = 0; l < 8; l++)
    lowest = part[l] < lowest ? part[l] : lowest;
  return lowest;
}

/* The rows of one assignment pass: points idx[pos] (pos itself when NULL). */
typedef struct assign_rows {
  int32_t *labels;
  const int32_t *idx;
} assign_rows;

/* Keeps each row's best score ||c||^2 - 2 x.c (label: ties to the lower
 * centroid index, NaN never wins) and runner-up, the scores being -2 s of
 * the augmented GEMM, and each group's lowest score. The row maximum qk
 * folded is the block's lowest score m1 (-2 x; padding holds -FLT_MAX, so
 * only real columns count): a block that cannot beat the runner-up is left
 * on one compare, one between best and runner-up only moves the runner-up,
 * and only a block that beats or ties the best is scanned: for the lowest
 * centroid index o1 with score m1 and the smallest of its other scores, m2.
 * That gives what a sequential argmin gives in any order of the centres:
 * (m1, o1, min(b1, m2)) when m1 < b1, or m1 = b1 and o1 < lab; else (b1,
 * lab, min(b2, m1)). A NaN maximum (the kernel's max may keep a NaN score)
 * takes the minimum from the scores instead. */
static void assign_visit(km *m, void *ud, int64_t i0, int rows, int64_t c0, int cols,
                         float *s, const float *rowmax) {
  const assign_rows *ar = ud;
  const int g = group_of_column(m, c0);
  for (int r = 0; r < rows; r++) {
    const int64_t i = ar->idx ? ar->idx[i0 + r] : i0 + r;
    const float lo = -2.0f * rowmax[r];
    float *gmin = m->gmin + i * m->groups + g;
    *gmin = lo < *gmin || isnan(lo) ? lo : *gmin; /* NaN sticks: no bound */
    const float b1 = m->row_val[i], b2 = m->row_val2[i];
    if (lo >= b2)
      continue; /* no score of the block below b2 */
    const float *v = s + r * m->nr;
    const float m1 = isnan(lo) ? block_min(v, cols, -1) : lo;
    if (!(m1 <= b1)) {
      m->row_val2[i] = m1 < b2 ? m1 : b2;
      continue;
    }
    int c1 = 0; /* the first column with score m1, if any */
    while (c1 < cols && !(-2.0f * v[c1] == m1))
      c1++;
    if (c1 == cols)
      continue; /* m1 = b1 = INFINITY and no score is: every one NaN */
    if (m1 < b1) {
      const float m2 = block_min(v, cols, c1);
      m->row_val[i] = m1;
      m->row_val2[i] = b1 < m2 ? b1 : m2;
      /* m2 = m1: a tie within the block, the lowest index of those wins */
      ar->labels[i] =
          m2 == m1 ? lowest_with(v, cols, m1, m->perm + c0) : m->perm[c0 + c1];
    } else {
      /* a tie with the best: the lower index wins, the other is runner-up */
      const int32_t o1 = lowest_with(v, cols, m1, m->perm + c0);
      m->row_val2[i] = b1;
      ar->labels[i] = o1 < ar->labels[i] ? o1 : ar->labels[i];
    }
  }
}

/* ---- bounds ----------------------------------------------------------------- */

/* The bound of the GEMM-form error of point i's squared distances to the
 * centroids last packed (see STSA_KM_GEMM_ERR). */
static double gemm_err(const km *m, int64_t i) {
  return STSA_KM_GEMM_ERR(m->d) * ((double)m->xnorm[i] + 2.0 * (double)m->cnorm_max);
}

/* A lower bound of the exact distance whose f32 score is `score` (0 for
 * NaN, which never prunes). */
static double lower_of(double xn, float score, double e) {
  const double lo2 = xn + (double)score - e;
  return lo2 > 0.0 ? sqrt(lo2) * (1.0 - STSA_KM_BOUND_SLACK) : 0.0;
}

/* Whether a group whose centroids are all at least `low` away (exact) can
 * hold a centroid whose f32 score beats that of the centroid within `up`:
 * not when up^2 + 2 e < low^2 (each score is within e of the exact one). */
static int may_beat(double up, double low, double e) {
  const double grow = 1.0 + STSA_KM_BOUND_SLACK;
  return !(low > 0.0 &&
           up * up * grow + 2.0 * e < low * low * (1.0 - STSA_KM_BOUND_SLACK));
}

/* ---- passes ----------------------------------------------------------------- */

/* Starts the best, runner-up and group minima of the points idx[0..
 * nrows-1] (0.. nrows-1 when NULL) afresh. */
static void rows_reset(km *m, const int32_t *idx, int64_t nrows, int32_t *labels) {
  const int G = m->groups;
  for (int64_t p = 0; p < nrows; p++) {
    const int64_t i = idx ? idx[p] : p;
    m->row_val[i] = INFINITY;
    m->row_val2[i] = INFINITY;
    labels[i] = 0;
    for (int g = 0; g < G; g++)
      m->gmin[i * G + g] = INFINITY;
  }
}

/* Merges into those the scores of each point against the groups its gmask
 * names, in one pass per group (points gathered in index order). */
static void rows_groups(km *m, const int32_t *idx, int64_t nrows, int32_t *labels) {
  const int G = m->groups;
  memset(m->gcount, 0, sizeof(int64_t) * (size_t)G);
  for (int64_t p = 0; p < nrows; p++) {
    const int64_t i = idx ? idx[p] : p;
    for (int g = 0; g < G; g++)
      if (m->gmask[i] >> g & 1)
        m->glist[(int64_t)g * m->n + m->gcount[g]++] = (int32_t)i;
  }
  assign_rows ar = {labels, NULL};
  for (int g = 0; g < G; g++) {
    if (m->gcount[g] == 0)
      continue;
    ar.idx = m->glist + (int64_t)g * m->n;
    stsa_km_gemm_pass(m, ar.idx, m->gcount[g], group_first(m, g), group_count(m, g), NULL,
                      assign_visit, &ar);
  }
}

/* The bounds from the best and runner-up scores and each computed group's
 * lowest (the groups of done[i], or gmask when done is NULL), widened by the
 * GEMM error. The group of the label is computed (its own centroid's score
 * is needed), so the runner-up bounds the rest of it. A NaN score gives a
 * NaN upper bound or a 0 lower one, which never prune. */
static void rows_bounds(km *m, const int32_t *idx, int64_t nrows, const int32_t *labels,
                        const uint64_t *done) {
  const int G = m->groups;
  for (int64_t p = 0; p < nrows; p++) {
    const int64_t i = idx ? idx[p] : p;
    const double e = gemm_err(m, i), xn = (double)m->xnorm[i];
    const double runner_up = lower_of(xn, m->row_val2[i], e);
    m->upper[i] = sqrt(xn + (double)m->row_val[i] + e) * (1.0 + STSA_KM_BOUND_SLACK);
    const int own = m->cgroup[labels[i]];
    const uint64_t computed = done ? done[i] : m->gmask[i];
    for (int g = 0; g < G; g++)
      if (computed >> g & 1)
        m->glow[i * G + g] = g == own ? runner_up : lower_of(xn, m->gmin[i * G + g], e);
  }
}

/* Packs the centroids in group order and their largest squared norm. */
static void pack_centroids(km *m, const float *centroids) {
  stsa_km_pack_centres(m, centroids, m->d, m->perm, m->k, 1);
  float cmax = 0.0f;
  for (int64_t c = 0; c < m->k; c++)
    cmax = m->cnorm[c] > cmax || isnan(m->cnorm[c]) ? m->cnorm[c] : cmax;
  m->cnorm_max = cmax;
}

int64_t stsa_km_assign_full(km *m, const float *centroids, int32_t *labels) {
  pack_centroids(m, centroids);
  const uint64_t all = m->groups == 64 ? ~(uint64_t)0 : ((uint64_t)1 << m->groups) - 1;
  for (int64_t i = 0; i < m->n; i++)
    m->gmask[i] = all;
  rows_reset(m, NULL, m->n, labels);
  assign_rows ar = {labels, NULL}; /* one pass over every column: each row copied once */
  m->norms_in_pass = 1;            /* the visits do not read xnorm; rows_bounds does */
  stsa_km_gemm_pass(m, NULL, m->n, 0, m->k, m->spread, assign_visit, &ar);
  m->norms_in_pass = 0;
  rows_bounds(m, NULL, m->n, labels, NULL);
  return m->n;
}

/* ---- the first assignment of a call --------------------------------------- */

/* cd_low[v][g], v a packed position: a lower bound of the exact distance
 * from centroid perm[v] to every other centroid of group g (+inf if none),
 * from the augmented GEMM of the centroids against their panels (rows in
 * packed order, single-threaded: k^2 d, small). */
static void centroid_distances(km *m, const float *centroids) {
  const int mr = m->mr, nr = m->nr, d = m->d, depth = m->depth, G = m->groups;
  const int64_t npan = (m->k + nr - 1) / nr;
  km_thread t = stsa_km_thread_view(m, 0);
  for (int64_t e = 0; e < m->k * G; e++)
    m->cd_low[e] = INFINITY;
  for (int64_t v0 = 0; v0 < m->k; v0 += mr) {
    const int rows = (int)(m->k - v0 < mr ? m->k - v0 : mr);
    for (int r = 0; r < mr; r++) {
      float *dst = t.q + r * depth;
      if (r < rows) {
        memcpy(dst, centroids + (int64_t)m->perm[v0 + r] * d, sizeof(float) * (size_t)d);
        dst[d] = 1.0f;
      } else {
        memset(dst, 0, sizeof(float) * (size_t)depth);
      }
    }
    for (int64_t p = 0; p < npan; p++) {
      const int64_t c0 = p * nr;
      const int cols = (int)(m->k - c0 < nr ? m->k - c0 : nr);
      const int g = group_of_column(m, c0);
      for (int r = 0; r < mr; r++)
        t.rowmax[r] = -INFINITY;
      m->kern->qk(t.q, depth, m->panels + p * depth * nr, t.s, nr, t.rowmax);
      for (int r = 0; r < rows; r++) {
        const int64_t v = v0 + r;
        const float lo = v >= c0 && v < c0 + cols
                             ? block_min(t.s + r * nr, cols, (int)(v - c0))
                             : -2.0f * t.rowmax[r];
        const double xn = (double)m->cnorm[v];
        const double e = STSA_KM_GEMM_ERR(d) * (xn + 2.0 * (double)m->cnorm_max);
        const double low = isnan(lo)        ? 0.0
                           : lo == INFINITY ? INFINITY
                                            : lower_of(xn, lo, e);
        double *cd = m->cd_low + v * G + g;
        *cd = low < *cd ? low : *cd;
      }
    }
  }
}

/* Each point's nearest centroid of the centroids (the grouping's coarse
 * clusters), from their packed panels: the rows' maximum of x.g - |g|^2/2. */
static void coarse_visit(km *m, void *ud, int64_t i0, int rows, int64_t c0, int cols,
                         float *s, const float *rowmax) {
  (void)ud;
  (void)c0;
  for (int r = 0; r < rows; r++) {
    const float *v = s + r * m->nr;
    int best = 0;
    while (best < cols - 1 && !(v[best] == rowmax[r]))
      best++; /* the first column holding the maximum (0 when NaN) */
    m->coarse[i0 + r] = best;
  }
}

/* The groups [*g0, *g1] that coarse cluster c's centroids lie in; 0 when
 * it has none. */
static int coarse_groups(const km *m, int c, int *g0, int *g1) {
  if (m->cstart[c + 1] == m->cstart[c])
    return 0;
  *g0 = group_of_column(m, m->cstart[c]);
  *g1 = group_of_column(m, m->cstart[c + 1] - 1);
  return 1;
}

/* Step 2 of the first assignment: every point against the groups its
 * coarse cluster's centroids lie in (gmask, set by the caller; none for an
 * empty coarse cluster). The points of one coarse cluster need the same
 * groups, a contiguous range of columns: one pass per coarse cluster over
 * its points, in index order, copies each point's row once and takes the
 * centroid panels in pairs, where a pass per group copied a point once for
 * each of its groups (2.1 on average at Wan 480p), one panel at a time when
 * a group is one panel. Each point meets the same panels in the same order
 * either way, so the results are the same. */
static void rows_by_coarse(km *m, int32_t *labels) {
  const int G = m->groups;
  int64_t first[STSA_KM_MAX_GROUPS + 1] = {0}, fill[STSA_KM_MAX_GROUPS];
  for (int64_t i = 0; i < m->n; i++)
    first[m->coarse[i] + 1]++;
  for (int c = 0; c < G; c++) {
    first[c + 1] += first[c];
    fill[c] = first[c];
  }
  for (int64_t i = 0; i < m->n; i++) /* a counting sort: index order kept */
    m->todo[fill[m->coarse[i]]++] = (int32_t)i;
  assign_rows ar = {labels, NULL};
  for (int c = 0; c < G; c++) {
    int g0, g1;
    if (first[c + 1] == first[c] || !coarse_groups(m, c, &g0, &g1))
      continue;
    const int64_t col0 = group_first(m, g0);
    ar.idx = m->todo + first[c];
    stsa_km_gemm_pass(m, ar.idx, first[c + 1] - first[c], col0,
                      group_first(m, g1) + group_count(m, g1) - col0, NULL, assign_visit,
                      &ar);
  }
}

/* The first point whose row holds NaN/Inf, or -1: its squared norm, from
 * a pass over every point, is then not finite (a finite row whose norm
 * overflows is told apart by the row itself). */
static int64_t first_bad_row(const km *m) {
  for (int64_t i = 0; i < m->n; i++)
    if (!isfinite(m->xnorm[i]) && stsa_km_row_nonfinite(stsa_km_row(m, i), m->d))
      return i;
  return -1;
}

int stsa_km_first_checks_rows(const km *m) {
  return m->groups >= FIRST_MIN_GROUPS && m->coarse_ok;
}

int64_t stsa_km_assign_first(km *m, const float *centroids, int32_t *labels) {
  const int G = m->groups;
  /* with few groups, a point's coarse cluster alone spans a good part of
   * them: the full pass is as cheap */
  if (!stsa_km_first_checks_rows(m))
    return stsa_km_assign_full(m, centroids, labels);
  /* 1. the coarse cluster of every point: its hinted label's, or (a GEMM
   * against G <= 16 centres) the nearest centre's, with the points' norms
   * (step 3 reads them). A hint spares that pass: step 2, which reads
   * every point once, takes the norms, and writes its labels to the
   * scratch `summed` (free until the first update) so that none reaches
   * `labels`, which may be the hint, before the NaN/Inf check. */
  int32_t *lab = m->hint ? m->summed : labels;
  if (m->hint) {
    for (int64_t i = 0; i < m->n; i++)
      m->coarse[i] = m->glabel[m->hint[i]];
  } else {
    float *panels = m->panels;
    m->panels = m->cpanels;
    stsa_km_pack_centres(m, m->gcent, m->d, NULL, G, 1);
    m->norms_in_pass = 1;
    stsa_km_gemm_pass(m, NULL, m->n, 0, G, NULL, coarse_visit, NULL);
    m->norms_in_pass = 0;
    m->panels = panels;
    if (m->check_rows && (m->bad_row = first_bad_row(m)) >= 0)
      return 0; /* no label written */
  }
  pack_centroids(m, centroids);
  centroid_distances(m, centroids);
  /* 2. every point against the groups its coarse cluster's centroids lie in
   * (none for an empty coarse cluster: then every group, below) */
  uint64_t cmask[STSA_KM_MAX_GROUPS] = {0};
  for (int c = 0; c < G; c++) {
    int g0, g1;
    if (coarse_groups(m, c, &g0, &g1))
      for (int g = g0; g <= g1; g++)
        cmask[c] |= (uint64_t)1 << g;
  }
  for (int64_t i = 0; i < m->n; i++) {
    m->gmask[i] = cmask[m->coarse[i]];
    m->gdone[i] = cmask[m->coarse[i]];
  }
  rows_reset(m, NULL, m->n, lab);
  /* with a hint, the norms here: this pass copies every point once (a
   * hinted label's coarse cluster is never empty) */
  m->norms_in_pass = m->hint != NULL;
  rows_by_coarse(m, lab);
  m->norms_in_pass = 0;
  if (m->hint && m->check_rows && (m->bad_row = first_bad_row(m)) >= 0)
    return 0; /* no label written */
  /* 3. the other groups, but those whose every centroid c is provably no
   * closer to x than the best a so far: d(x, c) >= d(a, c) - d(x, a) */
  int64_t ntodo = 0;
  for (int64_t i = 0; i < m->n; i++) {
    const double e = gemm_err(m, i), xn = (double)m->xnorm[i];
    const double u = sqrt(xn + (double)m->row_val[i] + e) * (1.0 + STSA_KM_BOUND_SLACK);
    const double *cd = m->cd_low + (int64_t)m->pos[lab[i]] * G;
    uint64_t need = 0;
    for (int g = 0; g < G; g++) {
      if (m->gdone[i] >> g & 1)
        continue;
      const double low = cd[g] - u;
      if (!(u < INFINITY) || may_beat(u, low, e))
        need |= (uint64_t)1 << g;
      else
        m->glow[i * G + g] = low;
    }
    m->gmask[i] = need;
    m->gdone[i] |= need;
    if (need)
      m->todo[ntodo++] = (int32_t)i;
  }
  rows_groups(m, m->todo, ntodo, lab);
  rows_bounds(m, NULL, m->n, lab, m->gdone);
  if (lab != labels)
    memcpy(labels, lab, sizeof(int32_t) * (size_t)m->n);
  return m->n;
}

/* The bounds move with the shifts (triangle inequality): u by the shift of
 * the point's centroid, each group's lower bound by the group's largest
 * shift. A point keeps its label unrecomputed when no group may beat its
 * centroid; else only the groups that may, and its own, are recomputed.
 * The decisions are per point, so they do not depend on the threads. */
int64_t stsa_km_assign_pruned(km *m, const float *centroids, int32_t *labels) {
  const int G = m->groups;
  const double grow = 1.0 + STSA_KM_BOUND_SLACK;
  for (int g = 0; g < G; g++) {
    double gs = 0.0;
    for (int64_t v = group_first(m, g); v < group_first(m, g) + group_count(m, g); v++) {
      const double sh = m->shift[m->perm[v]];
      gs = sh > gs || isnan(sh) ? sh : gs;
    }
    m->gshift[g] = gs * grow;
  }
  pack_centroids(m, centroids);
  int64_t ntodo = 0;
  for (int64_t i = 0; i < m->n; i++) {
    const double u = m->upper[i] + m->shift[labels[i]] * grow;
    const double e = gemm_err(m, i);
    const int own = m->cgroup[labels[i]];
    uint64_t need = (uint64_t)1 << own;
    for (int g = 0; g < G; g++) {
      double *low = m->glow + i * G + g;
      *low -= m->gshift[g];
      if (may_beat(u, *low, e))
        need |= (uint64_t)1 << g;
    }
    m->upper[i] = u;
    if (need == (uint64_t)1 << own && !may_beat(u, m->glow[i * G + own], e))
      continue; /* provably keeps its label */
    m->gmask[i] = need;
    m->todo[ntodo++] = (int32_t)i;
  }
  rows_reset(m, m->todo, ntodo, labels);
  rows_groups(m, m->todo, ntodo, labels);
  rows_bounds(m, m->todo, ntodo, labels, NULL);
  return ntodo;
}
