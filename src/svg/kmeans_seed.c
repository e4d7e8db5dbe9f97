/* kmeans_seed.c — k-means++ seeding of stsa_kmeans (see kmeans.h): D^2
 * sampling by rejection from the distances of the last refresh, refreshed
 * for a batch of new centres at once on the GEMM path. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "svg/kmeans_internal.h"
#include "svg/splitmix.h"

#define SAMPLE_CHUNK STSA_KM_SAMPLE_CHUNK
#define PENDING_MAX STSA_KM_PENDING_MAX
/* Below this fraction of ||x||^2 + ||c||^2 the GEMM form of a squared
 * distance has lost too many bits to cancellation (its error is about
 * d eps (||x||^2 + ||c||^2)); such pairs are recomputed as sum (x - c)^2,
 * which gives duplicates exactly 0. */
#define CANCEL_FRACTION (1.0f / 1024.0f)

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
        d2 = sq_dist(stsa_km_row(m, i), stsa_km_row(m, m->pending[c0 + c]), m->d);
      best = d2 < best ? d2 : best;
    }
    m->row_val[i] = best;
  }
}

/* Folds the pending centres into the D^2 of every point and rebuilds the
 * chunk sums. Returns their total (sums in double, in a fixed order). */
static double refresh(km *m, int64_t npending) {
  stsa_km_pack_centres(m, m->x, m->ld, m->pending, npending, 0);
  stsa_km_gemm_pass(m, NULL, m->n, 0, npending, NULL, refresh_visit, NULL);
  const int64_t nchunks = (m->n + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
#pragma omp parallel for num_threads(stsa_km_threads_for(m, nchunks / 16))               \
    schedule(static)
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
    const float d2 = sq_dist(stsa_km_row(m, i), stsa_km_row(m, m->pending[p]), m->d);
    cur = d2 < cur ? d2 : cur;
  }
  return uniform01(rng) * (double)bound < (double)cur;
}

void stsa_km_seed(km *m, uint64_t seed, float *centroids) {
  const int d = m->d;
  uint64_t rng = seed;
#pragma omp parallel for num_threads(stsa_km_threads_for(m, m->n / 4096)) schedule(static)
  for (int64_t i = 0; i < m->n; i++) {
    m->xnorm[i] = stsa_km_dot(stsa_km_row(m, i), stsa_km_row(m, i), d);
    m->row_val[i] = INFINITY;
  }
  int64_t first = uniform_index(&rng, m->n);
  memcpy(centroids, stsa_km_row(m, first), sizeof(float) * (size_t)d);
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
      memcpy(centroids + chosen * d, stsa_km_row(m, i), sizeof(float) * (size_t)d);
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
