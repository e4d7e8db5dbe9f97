/* kmeans.c — see kmeans.h. */
#include "svg/kmeans.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/kernels.h"
#include "svg/splitmix.h"

/* Row blocks of mr rows that one thread takes at a time: every K^T panel
 * (d nr floats, 8 KiB at d = 128) then serves this many qk calls from L1. */
#define CHUNK_BLOCKS 8
/* Points per chunk of the k-means++ sampling sums: the draw searches the
 * chunk sums, then scans one chunk. Fixed, so the sums do not depend on the
 * thread count. */
#define SAMPLE_CHUNK 1024
/* New k-means++ centres whose distances are refreshed together (one GEMM of
 * n x PENDING_MAX x d); each draw checks its candidate against them. */
#define PENDING_MAX 128
/* Below this fraction of ||x||^2 + ||c||^2 the GEMM form of a squared
 * distance has lost too many bits to cancellation (its error is about
 * d eps (||x||^2 + ||c||^2)); such pairs are recomputed as sum (x - c)^2,
 * which gives duplicates exactly 0. */
#define CANCEL_FRACTION (1.0f / 1024.0f)
/* Bound of the error of a squared distance in GEMM form, per (d, unit of
 * ||x||^2 + 2 max ||c||^2), u = 2^-24. With gamma_d = d u / (1 - d u), the
 * f32 sums of any order (FMA or not) give |xn^ - xn| <= gamma_d xn,
 * |cn^ - cn| <= gamma_d cn, |(x.c)^ - x.c| <= gamma_d (xn + cn) / 2, and
 * the score cn^ - 2 (x.c)^ rounds once more (u (xn + 2 cn)): the score is
 * within (gamma_d + u)(xn + 2 cn) and xn^ + score within
 * (2 gamma_d + u)(xn + 2 cn) of the exact values. (2 d + 8) u covers both
 * with room for gamma_d > d u and for max ||c||^2 itself rounded. */
#define GEMM_ERR(d) ((2.0 * (d) + 8.0) * 0x1p-24)
/* Relative slack of the bound arithmetic in double (sqrt, sums, the
 * shifts' own rounding): far above its 1e-16 error, far below GEMM_ERR. */
#define BOUND_SLACK 1e-9

/* ---- problem and scratch --------------------------------------------------- */

typedef struct km {
  const float *x;
  int64_t n, ld, k;
  int d, mr, nr, threads;
  const stsa_kernels *kern;
  int depth;        /* rows of each panel: d, or d + 1 for the assignment's -||c||^2/2 */
  float *panels;    /* K^T panels of the centres being compared [ceil(k/nr)][depth][nr] */
  float *cnorm;     /* ||c||^2 of those centres, padded to the panels */
  float *row_val;   /* per point: best ||c||^2 - 2 x.c (Lloyd), or D^2 (k-means++) */
  float *row_val2;  /* per point: the runner-up ||c||^2 - 2 x.c (Lloyd) */
  float *xnorm;     /* ||x_i||^2 */
  double *upper;    /* per point: >= its exact distance to its centroid */
  double *lower;    /* per point: <= its exact distance to any other centroid */
  double *shift;    /* [k] distance each centroid moved in the last update */
  double max_shift; /* the largest of them (NaN if any is) */
  float cnorm_max;  /* max ||c||^2 of the centroids of the last assignment */
  int32_t *todo;    /* [n] the points a pruned assignment recomputes */
  double *chunk_cum; /* inclusive prefix of the D^2 chunk sums (k-means++) */
  int64_t *counts;   /* [k] members per cluster */
  int64_t *start;    /* [k + 1] members of the clusters before each (prefix of counts) */
  double *sums;      /* [k][d] the members' sums of each centroid (update) */
  int32_t *pending;  /* [PENDING_MAX] k-means++ centres not yet refreshed */
  char *thread_mem;  /* threads x thread_bytes */
  size_t thread_bytes;
} km;

/* One thread's scratch. */
typedef struct km_thread {
  float *q;      /* [CHUNK_BLOCKS mr][d + 1] rows of x (and 1), zero padded */
  float *s;      /* [mr][nr] one qk result */
  float *rowmax; /* [mr] what qk folds its maxima into (unused) */
} km_thread;

static size_t floats64(size_t floats) { return (floats + 15) / 16 * 16; }

static size_t thread_floats(int mr, int nr, int d, size_t slot[3]) {
  slot[0] = floats64((size_t)CHUNK_BLOCKS * (size_t)mr * (size_t)(d + 1));
  slot[1] = floats64((size_t)mr * (size_t)nr);
  slot[2] = floats64((size_t)mr);
  return slot[0] + slot[1] + slot[2];
}

static km_thread thread_view(const km *m, int t) {
  size_t slot[3];
  thread_floats(m->mr, m->nr, m->d, slot);
  float *p = (float *)(void *)(m->thread_mem + m->thread_bytes * (size_t)t);
  km_thread v;
  v.q = p;
  v.s = v.q + slot[0];
  v.rowmax = v.s + slot[1];
  return v;
}

/* Carves every scratch array out of one 64-byte aligned block (*block, to
 * free). Returns 0, or -1 when it cannot be allocated. */
static int km_alloc(km *m, void **block) {
  const size_t n = (size_t)m->n, k = (size_t)m->k, d = (size_t)m->d;
  const size_t npan = (k + (size_t)m->nr - 1) / (size_t)m->nr;
  const size_t nchunks = (n + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
  size_t slot[3];
  m->thread_bytes = thread_floats(m->mr, m->nr, m->d, slot) * sizeof(float);
  /* sizes in floats (4 bytes), each rounded to 64 bytes */
  const size_t sizes[] = {floats64(npan * (size_t)m->nr * (d + 1)),
                          floats64(npan * (size_t)m->nr),
                          floats64(n),
                          floats64(n),
                          floats64(n),
                          floats64(2 * n),
                          floats64(2 * n),
                          floats64(2 * k),
                          floats64(n),
                          floats64(2 * nchunks),
                          floats64(2 * k),
                          floats64(2 * (k + 1)),
                          floats64(2 * k * d),
                          floats64(PENDING_MAX),
                          floats64(m->thread_bytes / sizeof(float) * (size_t)m->threads)};
  enum { NSLOTS = sizeof sizes / sizeof sizes[0] };
  size_t total = 0;
  for (int i = 0; i < NSLOTS; i++)
    total += sizes[i];
  float *p = aligned_alloc(64, total * sizeof(float));
  if (!p)
    return -1;
  void *at[NSLOTS];
  float *q = p;
  for (int i = 0; i < NSLOTS; i++) {
    at[i] = q;
    q += sizes[i];
  }
  m->panels = at[0];
  m->cnorm = at[1];
  m->row_val = at[2];
  m->row_val2 = at[3];
  m->xnorm = at[4];
  m->upper = at[5];
  m->lower = at[6];
  m->shift = at[7];
  m->todo = at[8];
  m->chunk_cum = at[9];
  m->counts = at[10];
  m->start = at[11];
  m->sums = at[12];
  m->pending = at[13];
  m->thread_mem = at[14];
  *block = p;
  return 0;
}

static const float *x_row(const km *m, int64_t i) { return m->x + i * m->ld; }

/* Threads for `items` independent pieces of work. */
static int threads_for(const km *m, int64_t items) {
  return items < m->threads ? (int)(items > 0 ? items : 1) : m->threads;
}

/* ---- small vector loops (fixed order, written so that gcc vectorises) ---- */

/* sum_j a_j b_j in 8 interleaved partial sums. */
static float dot(const float *a, const float *b, int d) {
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

/* sum_j (a_j - b_j)^2, the same way. */
static float sq_dist(const float *a, const float *b, int d) {
  float part[8] = {0};
  int j = 0;
  for (; j + 8 <= d; j += 8)
    for (int l = 0; l < 8; l++) {
      float t = a[j + l] - b[j + l];
      part[l] += t * t;
    }
  for (int l = 0; j < d; j++, l++) {
    float t = a[j] - b[j];
    part[l] += t * t;
  }
  return ((part[0] + part[1]) + (part[2] + part[3])) +
         ((part[4] + part[5]) + (part[6] + part[7]));
}

/* ---- distances as a GEMM on the qk micro-kernel ---------------------------- */

/* Packs `count` centres, row c at base + (idx ? idx[c] : c) * stride, into
 * K^T panels (zero padded to whole panels) and their squared norms. With
 * `augment`, each centre gains a coordinate -||c||^2 / 2 (and each point
 * of the pass a 1): qk then gives x.c - ||c||^2 / 2 = -score / 2 directly,
 * and the row maxima it folds in registers are each block's best score. */
static void pack_centres(km *m, const float *base, int64_t stride, const int32_t *idx,
                         int64_t count, int augment) {
  const int d = m->d, nr = m->nr, depth = d + (augment != 0);
  const int64_t padded = (count + nr - 1) / nr * nr;
  m->depth = depth;
  for (int64_t c = 0; c < padded; c++) {
    float *dst = m->panels + (c / nr) * depth * nr + c % nr;
    if (c < count) {
      const float *row = base + (idx ? idx[c] : c) * stride;
      for (int j = 0; j < d; j++)
        dst[j * nr] = row[j];
      m->cnorm[c] = dot(row, row, d);
    } else {
      for (int j = 0; j < d; j++)
        dst[j * nr] = 0.0f;
      m->cnorm[c] = 0.0f;
    }
    if (augment)
      dst[d * nr] = -0.5f * m->cnorm[c];
  }
}

/* What a pass does with one qk block: rows i0.. i0+rows-1 of x against
 * packed centres c0.. c0+cols-1, s[r][c] = x'_{i0+r} . c'_{c0+c} (rows nr
 * apart; the visit may overwrite them), rowmax[r] >= max_c s[r][c] (over
 * the panel's padding too). Each row belongs to one thread. */
typedef void (*block_visit)(km *m, void *ud, int64_t i0, int rows, int64_t c0, int cols,
                            float *s, const float *rowmax);

/* Over the scores -2 s[c] of one block row (c < cols, c != skip): their
 * minimum (INFINITY if none; NaN never wins) and, in *below, how many are
 * below `bound`. In 8 elementwise partial minima and counts, so that it
 * vectorises (a float min reduction alone does not without -ffast-math). */
static inline float block_min(const float *s, int cols, int skip, float bound,
                              int *below) {
  float part[8];
  int count[8];
  for (int l = 0; l < 8; l++) {
    part[l] = INFINITY;
    count[l] = 0;
  }
  int c = 0;
  for (; c + 8 <= cols; c += 8)
    for (int l = 0; l < 8; l++) {
      const float v = c + l == skip ? INFINITY : -2.0f * s[c + l];
      part[l] = v < part[l] ? v : part[l];
      count[l] += v < bound;
    }
  for (int l = 0; c < cols; c++, l++) {
    const float v = c == skip ? INFINITY : -2.0f * s[c];
    part[l] = v < part[l] ? v : part[l];
    count[l] += v < bound;
  }
  float m = INFINITY;
  int n = 0;
  for (int l = 0; l < 8; l++) {
    m = part[l] < m ? part[l] : m;
    n += count[l];
  }
  *below = n;
  return m;
}

/* Runs qk over every (row block, panel) of the points idx[0.. nrows-1] (of
 * 0.. nrows-1 when idx is NULL) against the `count` packed centres,
 * parallel over chunks of row blocks; a visit's rows are positions in that
 * list. The order of the visits within a row is by panel, the same on any
 * thread count, and a row's scores do not depend on its block. */
static void gemm_pass(km *m, const int32_t *idx, int64_t nrows, int64_t count,
                      block_visit visit, void *ud) {
  const int mr = m->mr, nr = m->nr, d = m->d, depth = m->depth;
  const int64_t chunk_rows = (int64_t)CHUNK_BLOCKS * mr;
  const int64_t nchunks = (nrows + chunk_rows - 1) / chunk_rows;
  const int64_t npan = (count + nr - 1) / nr;
#pragma omp parallel num_threads(threads_for(m, nchunks))
  {
    km_thread t = thread_view(m, omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t ch = 0; ch < nchunks; ch++) {
      const int64_t i0 = ch * chunk_rows;
      const int64_t rows = nrows - i0 < chunk_rows ? nrows - i0 : chunk_rows;
      const int64_t nblocks = (rows + mr - 1) / mr;
      const float *q[CHUNK_BLOCKS]; /* each block's mr rows, depth apart */
      for (int64_t b = 0; b < nblocks; b++) {
        const int64_t brows = rows - b * mr < mr ? rows - b * mr : mr;
        if (!idx && depth == d && m->ld == d && brows == mr) {
          q[b] = x_row(m, i0 + b * mr); /* packed rows serve as they are */
          continue;
        }
        float *dst = t.q + b * mr * depth;
        for (int64_t r = 0; r < mr; r++) {
          if (r < brows) {
            const int64_t pos = i0 + b * mr + r;
            memcpy(dst + r * depth, x_row(m, idx ? idx[pos] : pos),
                   sizeof(float) * (size_t)d);
            if (depth > d)
              dst[r * depth + d] = 1.0f;
          } else
            memset(dst + r * depth, 0, sizeof(float) * (size_t)depth);
        }
        q[b] = dst;
      }
      for (int64_t p = 0; p < npan; p++) {
        const float *panel = m->panels + p * depth * nr;
        const int cols = (int)(count - p * nr < nr ? count - p * nr : nr);
        for (int64_t b = 0; b < nblocks; b++) {
          for (int r = 0; r < mr; r++)
            t.rowmax[r] = -INFINITY;
          m->kern->qk(q[b], depth, panel, t.s, nr, t.rowmax);
          const int brows = (int)(rows - b * mr < mr ? rows - b * mr : mr);
          visit(m, ud, i0 + b * mr, brows, p * nr, cols, t.s, t.rowmax);
        }
      }
    }
  }
}

/* ---- Lloyd: assignment ------------------------------------------------------ */

/* The rows of one assignment pass: points idx[pos] (pos itself when NULL). */
typedef struct assign_rows {
  int32_t *labels;
  const int32_t *idx;
} assign_rows;

/* Keeps each row's best score ||c||^2 - 2 x.c (label: ties to the lower
 * index, NaN never wins) and runner-up, the scores being -2 s of the
 * augmented GEMM. A block whose row maximum cannot beat the runner-up is
 * skipped on that one compare: most blocks, once a row has two near
 * centroids. Else it is merged through its own two smallest scores, found
 * by vectorised minima: the block's best m1 at c1 (its first occurrence)
 * and m2, the smallest of the rest. Every earlier centre has a lower index,
 * so this gives what a sequential argmin over the centres in index order
 * gives: best, label and runner-up (m1, c1, min(b1, m2)) when m1 < b1, else
 * (b1, lab, min(b2, m1)). */
static void assign_visit(km *m, void *ud, int64_t i0, int rows, int64_t c0, int cols,
                         float *s, const float *rowmax) {
  const assign_rows *ar = ud;
  for (int r = 0; r < rows; r++) {
    const int64_t i = ar->idx ? ar->idx[i0 + r] : i0 + r;
    const float b1 = m->row_val[i], b2 = m->row_val2[i];
    if (-2.0f * rowmax[r] >= b2)
      continue; /* no score of the block below b2 (a NaN maximum is merged) */
    const float *v = s + r * m->nr;
    int below_b1;
    const float m1 = block_min(v, cols, -1, b1, &below_b1);
    if (m1 < b1) {
      int c1 = 0;
      while (c1 < cols - 1 && !(-2.0f * v[c1] == m1))
        c1++;
      /* the block's runner-up matters only when below b1 (rarely) */
      int unused;
      const float m2 = below_b1 > 1 ? block_min(v, cols, c1, b1, &unused) : b1;
      m->row_val[i] = m1;
      m->row_val2[i] = b1 < m2 ? b1 : m2;
      ar->labels[i] = (int32_t)(c0 + c1);
    } else {
      m->row_val2[i] = m1 < b2 ? m1 : b2;
    }
  }
}

/* The bound of the GEMM-form error of point i's squared distances to the
 * centroids last packed (see GEMM_ERR). */
static double gemm_err(const km *m, int64_t i) {
  return GEMM_ERR(m->d) * ((double)m->xnorm[i] + 2.0 * (double)m->cnorm_max);
}

/* Scores of the points idx[0.. nrows-1] (0.. nrows-1 when NULL) against the
 * packed centroids: label = argmin, and the distance bounds from the best
 * and runner-up scores widened by the GEMM error. A NaN score gives a NaN
 * upper bound or a 0 lower one, which never prune. */
static void assign_rows_pass(km *m, const int32_t *idx, int64_t nrows, int32_t *labels) {
  for (int64_t p = 0; p < nrows; p++) {
    const int64_t i = idx ? idx[p] : p;
    m->row_val[i] = INFINITY;
    m->row_val2[i] = INFINITY;
    labels[i] = 0;
  }
  assign_rows ar = {labels, idx};
  if (nrows > 0)
    gemm_pass(m, idx, nrows, m->k, assign_visit, &ar);
  for (int64_t p = 0; p < nrows; p++) {
    const int64_t i = idx ? idx[p] : p;
    const double e = gemm_err(m, i), xn = (double)m->xnorm[i];
    const double lo2 = xn + (double)m->row_val2[i] - e;
    m->upper[i] = sqrt(xn + (double)m->row_val[i] + e) * (1.0 + BOUND_SLACK);
    m->lower[i] = lo2 > 0.0 ? sqrt(lo2) * (1.0 - BOUND_SLACK) : 0.0;
  }
}

/* Packs the centroids and their largest squared norm. */
static void pack_centroids(km *m, const float *centroids) {
  pack_centres(m, centroids, m->d, NULL, m->k, 1);
  float cmax = 0.0f;
  for (int64_t c = 0; c < m->k; c++)
    cmax = m->cnorm[c] > cmax || isnan(m->cnorm[c]) ? m->cnorm[c] : cmax;
  m->cnorm_max = cmax;
}

/* labels[i] = argmin_c ||c||^2 - 2 x_i . c over the k centroids, for every
 * point. Returns n. */
static int64_t assign_full(km *m, const float *centroids, int32_t *labels) {
#pragma omp parallel for num_threads(threads_for(m, m->n / 4096)) schedule(static)
  for (int64_t i = 0; i < m->n; i++)
    m->xnorm[i] = dot(x_row(m, i), x_row(m, i), m->d);
  pack_centroids(m, centroids);
  assign_rows_pass(m, NULL, m->n, labels);
  return m->n;
}

/* The same labels as assign_full after update() moved the centroids of the
 * last assign_full / assign_pruned: the bounds move with the shifts
 * (triangle inequality), and a point keeps its label unrecomputed when
 * u^2 + e < l^2 - e, i.e. when its centroid's f32 score is provably below
 * every other's (each within e of the exact score). The decision is per
 * point, so the recomputed set does not depend on the threads. Returns how
 * many points were recomputed. */
static int64_t assign_pruned(km *m, const float *centroids, int32_t *labels) {
  pack_centroids(m, centroids);
  const double grow = 1.0 + BOUND_SLACK;
  const double max_shift = m->max_shift * grow;
  int64_t ntodo = 0;
  for (int64_t i = 0; i < m->n; i++) {
    const double u = m->upper[i] + m->shift[labels[i]] * grow;
    const double l = m->lower[i] - max_shift;
    const double e = gemm_err(m, i);
    if (l > 0.0 && u * u * grow + 2.0 * e < l * l * (1.0 - BOUND_SLACK)) {
      m->upper[i] = u;
      m->lower[i] = l;
    } else {
      m->todo[ntodo++] = (int32_t)i;
    }
  }
  assign_rows_pass(m, m->todo, ntodo, labels);
  return ntodo;
}

/* ---- Lloyd: update ---------------------------------------------------------- */

/* Counts the members of each cluster and their prefix sums. */
static void count_labels(km *m, const int32_t *labels) {
  memset(m->counts, 0, sizeof(int64_t) * (size_t)m->k);
  for (int64_t i = 0; i < m->n; i++)
    m->counts[labels[i]]++;
  m->start[0] = 0;
  for (int64_t c = 0; c < m->k; c++)
    m->start[c + 1] = m->start[c] + m->counts[c];
}

/* The first centroid of part `part` of `parts`: parts of about equal
 * membership (start[] is the prefix of the counts), so equal work. */
static int64_t part_begin(const km *m, int part, int parts) {
  const int64_t target = m->n * part / parts;
  int64_t lo = 0, hi = m->k; /* first c with start[c] >= target */
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (m->start[mid] >= target)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Moves every non-empty centroid to the mean of its members (sums in
 * double, members in index order; empty ones stay), each one's shift in
 * m->shift and the largest in m->max_shift (NaN if any is, so that a NaN
 * centroid prunes nothing). Returns the largest shift, squared. Each
 * thread owns a range of centroids and streams through the points in index
 * order, adding those of its range: x is read in order (a gather by label
 * waits on memory), and a centroid's sum is the same on any thread count. */
static double update(km *m, const int32_t *labels, float *centroids) {
  const int d = m->d;
  const int parts = threads_for(m, m->k / 16);
  double max_shift2 = 0.0;
#pragma omp parallel num_threads(parts) reduction(max : max_shift2)
  {
    const int part = omp_get_thread_num(), nparts = omp_get_num_threads();
    const int64_t c_lo = part_begin(m, part, nparts);
    const int64_t c_end = part + 1 == nparts ? m->k : part_begin(m, part + 1, nparts);
    memset(m->sums + c_lo * d, 0, sizeof(double) * (size_t)((c_end - c_lo) * d));
    for (int64_t i = 0; i < m->n; i++) {
      const int64_t c = labels[i];
      if (c < c_lo || c >= c_end)
        continue;
      const float *row = x_row(m, i);
      double *acc = m->sums + c * d;
      for (int j = 0; j < d; j++)
        acc[j] += row[j];
    }
    for (int64_t c = c_lo; c < c_end; c++) {
      const int64_t cnt = m->counts[c];
      m->shift[c] = 0.0;
      if (cnt == 0)
        continue;
      const double *acc = m->sums + c * d;
      float *cen = centroids + c * d;
      double shift2 = 0.0;
      for (int j = 0; j < d; j++) {
        const float v = (float)(acc[j] / (double)cnt);
        const double delta = (double)v - (double)cen[j];
        shift2 += delta * delta;
        cen[j] = v;
      }
      m->shift[c] = sqrt(shift2);
      max_shift2 = shift2 > max_shift2 ? shift2 : max_shift2;
    }
  }
  double ms = 0.0;
  for (int64_t c = 0; c < m->k; c++)
    ms = m->shift[c] > ms || isnan(m->shift[c]) ? m->shift[c] : ms;
  m->max_shift = ms;
  return max_shift2;
}

/* ---- k-means++ seeding ------------------------------------------------------ */

/* Uniform in [0, 1). */
static double uniform01(uint64_t *state) {
  return (double)(stsa_splitmix64(state) >> 11) * 0x1p-53;
}

static int64_t uniform_index(uint64_t *state, int64_t n) {
  const int64_t i = (int64_t)(uniform01(state) * (double)n);
  return i < n ? i : n - 1;
}

/* row_val[i] = min(row_val[i], ||x_i - p||^2) over the packed pending
 * centres; every pair near cancellation is recomputed directly, so that a
 * point on a centre weighs exactly 0 and is never drawn. */
static void refresh_visit(km *m, void *ud, int64_t i0, int rows, int64_t c0, int cols,
                          float *s, const float *rowmax) {
  (void)ud;
  (void)rowmax;
  const float *cn = m->cnorm + c0;
  for (int r = 0; r < rows; r++) {
    const int64_t i = i0 + r;
    float *v = s + r * m->nr;
    const float xn = m->xnorm[i];
    float best = m->row_val[i];
    int hit = 0; /* a lower D^2, or a pair to recompute (vectorises) */
    for (int c = 0; c < cols; c++) {
      v[c] = xn + cn[c] - 2.0f * v[c];
      hit |= (v[c] < best) | (v[c] <= CANCEL_FRACTION * (xn + cn[c]));
    }
    if (!hit)
      continue;
    for (int c = 0; c < cols; c++) {
      float d2 = v[c];
      if (d2 <= CANCEL_FRACTION * (xn + cn[c]))
        d2 = sq_dist(x_row(m, i), x_row(m, m->pending[c0 + c]), m->d);
      best = d2 < best ? d2 : best;
    }
    m->row_val[i] = best;
  }
}

/* Folds the pending centres into the D^2 of every point and rebuilds the
 * chunk sums. Returns their total (sums in double, in a fixed order). */
static double refresh(km *m, int64_t npending) {
  pack_centres(m, m->x, m->ld, m->pending, npending, 0);
  gemm_pass(m, NULL, m->n, npending, refresh_visit, NULL);
  const int64_t nchunks = (m->n + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
#pragma omp parallel for num_threads(threads_for(m, nchunks / 16)) schedule(static)
  for (int64_t ch = 0; ch < nchunks; ch++) {
    const int64_t end = (ch + 1) * SAMPLE_CHUNK < m->n ? (ch + 1) * SAMPLE_CHUNK : m->n;
    double sum = 0.0;
    for (int64_t i = ch * SAMPLE_CHUNK; i < end; i++)
      sum += m->row_val[i];
    m->chunk_cum[ch] = sum;
  }
  for (int64_t ch = 1; ch < nchunks; ch++)
    m->chunk_cum[ch] += m->chunk_cum[ch - 1];
  return m->chunk_cum[nchunks - 1];
}

/* A point drawn with probability row_val[i] / total (total > 0, finite):
 * the chunk by binary search of the prefix sums, then the point by scanning
 * it. Never a point of weight 0. */
static int64_t draw_weighted(const km *m, double total, uint64_t *rng) {
  const int64_t nchunks = (m->n + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
  const double u = uniform01(rng) * total;
  int64_t lo = 0, hi = nchunks - 1; /* first chunk with cum > u (the last if none) */
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (m->chunk_cum[mid] > u)
      hi = mid;
    else
      lo = mid + 1;
  }
  while (lo > 0 && m->chunk_cum[lo] <= m->chunk_cum[lo - 1])
    lo--; /* rounding put u past the end: the last chunk of positive weight */
  const double r = u - (lo > 0 ? m->chunk_cum[lo - 1] : 0.0);
  const int64_t end = (lo + 1) * SAMPLE_CHUNK < m->n ? (lo + 1) * SAMPLE_CHUNK : m->n;
  double acc = 0.0;
  int64_t last = lo * SAMPLE_CHUNK;
  for (int64_t i = lo * SAMPLE_CHUNK; i < end; i++) {
    if (m->row_val[i] > 0.0f) {
      acc += m->row_val[i];
      last = i;
      if (acc > r)
        return i;
    }
  }
  return last;
}

/* Whether the draw i (weight row_val[i] from the last refresh, an upper
 * bound of its current D^2) is kept: with probability current / bound. */
static int accept_draw(const km *m, int64_t i, int64_t npending, uint64_t *rng) {
  const float bound = m->row_val[i];
  float cur = bound;
  for (int64_t p = 0; p < npending && cur > 0.0f; p++) {
    const float d2 = sq_dist(x_row(m, i), x_row(m, m->pending[p]), m->d);
    cur = d2 < cur ? d2 : cur;
  }
  return uniform01(rng) * (double)bound < (double)cur;
}

/* Writes k centres drawn by k-means++ into centroids. */
static void seed_plus_plus(km *m, uint64_t seed, float *centroids) {
  const int d = m->d;
  uint64_t rng = seed;
#pragma omp parallel for num_threads(threads_for(m, m->n / 4096)) schedule(static)
  for (int64_t i = 0; i < m->n; i++) {
    m->xnorm[i] = dot(x_row(m, i), x_row(m, i), d);
    m->row_val[i] = INFINITY;
  }
  int64_t first = uniform_index(&rng, m->n);
  memcpy(centroids, x_row(m, first), sizeof(float) * (size_t)d);
  m->pending[0] = (int32_t)first;
  double total = refresh(m, 1);
  int64_t npending = 0, rejected = 0;
  for (int64_t chosen = 1; chosen < m->k;) {
    int64_t i;
    if (!(total > 0.0) || !isfinite(total)) {
      /* every point sits on a centre (or x is not finite): any point */
      i = uniform_index(&rng, m->n);
    } else {
      i = draw_weighted(m, total, &rng);
      if (!accept_draw(m, i, npending, &rng)) {
        i = -1;
        rejected++;
      }
    }
    if (i >= 0) {
      memcpy(centroids + chosen * d, x_row(m, i), sizeof(float) * (size_t)d);
      m->pending[npending++] = (int32_t)i;
      chosen++;
    }
    /* Refresh when the batch is full or the bound has gone loose (about
     * half the draws rejected): the refresh costs n d per centre whenever
     * it runs, a rejected draw d per pending centre. */
    if (chosen < m->k && npending > 0 &&
        (npending == PENDING_MAX || rejected > npending + 16)) {
      total = refresh(m, npending);
      npending = 0;
      rejected = 0;
    }
  }
}

/* ---- entry point ------------------------------------------------------------ */

/* Whether a row holds NaN or Inf (exponent bits all ones): integer compares,
 * which vectorise. */
static int row_nonfinite(const float *row, int d) {
  int bad = 0;
  for (int j = 0; j < d; j++) {
    uint32_t u;
    memcpy(&u, &row[j], sizeof u);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
  }
  return bad;
}

/* The first row of x with NaN or Inf, or -1. */
static int64_t first_nonfinite_row(const stsa_kmeans_args *a, int threads) {
  int bad = 0;
#pragma omp parallel for num_threads(threads) if (a->n * a->d > (1 << 16))               \
    reduction(|                                                                          \
              : bad) schedule(static)
  for (int64_t i = 0; i < a->n; i++)
    bad |= row_nonfinite(a->x + i * a->ld, a->d);
  for (int64_t i = 0; bad && i < a->n; i++)
    if (row_nonfinite(a->x + i * a->ld, a->d))
      return i;
  return -1;
}

static stsa_status check_args(const stsa_ctx *ctx, const stsa_kmeans_args *a,
                              const float *centroids, const int32_t *labels,
                              stsa_errbuf *err) {
  STSA_RETURN_IF(!a || !a->x || !centroids || !labels, err, STSA_ERR_NULL_ARG,
                 "stsa_kmeans: %s is NULL",
                 !a           ? "args"
                 : !a->x      ? "x"
                 : !centroids ? "centroids"
                              : "labels");
  STSA_RETURN_IF(a->n < 1 || a->n > ((int64_t)1 << 31), err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: n = %lld, expected 1..2^31", (long long)a->n);
  STSA_RETURN_IF(a->d < 1 || a->d > STSA_MAX_HEAD_DIM, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: d = %d, expected 1..%d", a->d, STSA_MAX_HEAD_DIM);
  STSA_RETURN_IF(a->ld < a->d || a->ld > INT64_MAX / a->n, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: ld = %lld, expected d (%d) .. INT64_MAX / n",
                 (long long)a->ld, a->d);
  STSA_RETURN_IF(a->k < 1 || a->k > a->n, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: k = %lld, expected 1..n (%lld)", (long long)a->k,
                 (long long)a->n);
  STSA_RETURN_IF(a->iters < 0, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: iters = %d, expected >= 0", a->iters);
  STSA_RETURN_IF(!(a->tol >= 0.0) || !isfinite(a->tol), err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: tol = %g, expected finite and >= 0", a->tol);
  STSA_RETURN_IF(a->warm != 0 && a->warm != 1, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: warm = %d, expected 0 or 1", a->warm);
  if (ctx->check_finite && !a->finite_checked) {
    const int64_t bad = first_nonfinite_row(a, ctx->threads);
    STSA_RETURN_IF(bad >= 0, err, STSA_ERR_NONFINITE,
                   "stsa_kmeans: point %lld of x is not finite", (long long)bad);
  }
  return STSA_OK;
}

stsa_status stsa_kmeans(stsa_ctx *ctx, const stsa_kmeans_args *a, float *centroids,
                        int32_t *labels, int64_t *sizes, int *iters_done) {
  return stsa_kmeans_probed(ctx, a, NULL, centroids, labels, sizes, iters_done);
}

stsa_status stsa_kmeans_probed(stsa_ctx *ctx, const stsa_kmeans_args *a,
                               const stsa_kmeans_probe *probe, float *centroids,
                               int32_t *labels, int64_t *sizes, int *iters_done) {
  const stsa_kmeans_probe none = {0, NULL};
  if (!probe)
    probe = &none;
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  STSA_TRY(check_args(ctx, a, centroids, labels, &ctx->err));
  km m;
  memset(&m, 0, sizeof m);
  m.x = a->x;
  m.n = a->n;
  m.ld = a->ld;
  m.k = a->k;
  m.d = a->d;
  m.kern = &ctx->run->kern;
  m.mr = m.kern->mr;
  m.nr = m.kern->nr;
  /* no region has more pieces than gemm_pass's chunks: more threads would
   * only add scratch */
  const int64_t chunks =
      (m.n + (int64_t)CHUNK_BLOCKS * m.mr - 1) / ((int64_t)CHUNK_BLOCKS * m.mr);
  m.threads = ctx->threads < chunks ? (ctx->threads > 0 ? ctx->threads : 1) : (int)chunks;
  void *block;
  STSA_RETURN_IF(km_alloc(&m, &block) != 0, &ctx->err, STSA_ERR_OUT_OF_MEMORY,
                 "stsa_kmeans: no memory for the scratch of n = %lld, k = %lld, d = %d",
                 (long long)m.n, (long long)m.k, m.d);
  if (!a->warm)
    seed_plus_plus(&m, a->seed, centroids);
  const double tol2 = a->tol * a->tol;
  int done = 0;
  for (;;) {
    const int64_t computed = done == 0 || probe->no_prune
                                 ? assign_full(&m, centroids, labels)
                                 : assign_pruned(&m, centroids, labels);
    if (probe->recomputed)
      probe->recomputed[done] = computed;
    count_labels(&m, labels);
    if (done == a->iters)
      break;
    const double shift2 = update(&m, labels, centroids);
    done++;
    if (done == a->iters || shift2 <= tol2)
      break;
  }
  if (sizes)
    memcpy(sizes, m.counts, sizeof(int64_t) * (size_t)m.k);
  if (iters_done)
    *iters_done = done;
  free(block);
  return STSA_OK;
}
