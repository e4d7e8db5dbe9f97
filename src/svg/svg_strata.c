/* svg_strata.c — see svg_strata.h. */
#include "svg/svg_strata.h"

#include <math.h>
#include <stdlib.h>

#include "core/convert.h"
#include "core/tensor.h"
#include "mask/geometry.h"

/* The pooled keys a query is scored against: every query costs one dot
 * product a cell, so the cells stay near CELL_BUDGET (at Wan 480p, 21
 * frame cells and 16 bands: 37 dot products a query, about 0.2% of the
 * call's attention at density 0.3). A frame is cut into up to four parts
 * (a small object moves between them) while that stays within the budget. */
enum { CELL_BUDGET = 32, BANDS = 16 };

/* The cells: frame f part s is spatial cell f * parts + s; band t (over
 * the frames past the sinks) is cell F * parts + t; the real text tokens
 * are the last. A cell's keys are pooled in two halves, cut across the
 * direction of its key farthest from their mean (at the middle of their
 * range along it): a few keys that stand out (an object, a sink) keep a
 * centroid of their own instead of a tenth of one, and a query that
 * matches them sees it. Half h of cell j is pooled centroid 2 j + h. */
typedef struct cells {
  int64_t parts, bands, count;
  float *centre; /* [D][2 count], scaled by the softmax scale */
  float *log_n;  /* [2 count] ln(members), -inf for an empty half */
} cells;

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* The cell layout of geometry geo. */
static cells cell_layout(const stsa_geo *geo) {
  cells c = {0};
  c.parts = clamp64(CELL_BUDGET / geo->F, 1, 4);
  c.parts = c.parts < geo->P ? c.parts : geo->P;
  c.bands = BANDS < geo->P ? BANDS : geo->P;
  c.count = geo->F * c.parts + c.bands + 1;
  return c;
}

/* Key i's cells (video i < L, else text token i - L): cell[1] -1 when it
 * is in one only. */
static void key_cells(const stsa_svg_keep *keep, const stsa_geo *geo, const cells *c,
                      int64_t i, int64_t cell[2]) {
  cell[0] = c->count - 1;
  cell[1] = -1;
  if (i < geo->L) {
    const int64_t f = i / geo->P, p = i % geo->P;
    cell[0] = f * c->parts + p * c->parts / geo->P;
    cell[1] = f >= keep->sink_frames ? geo->F * c->parts + p * c->bands / geo->P : -1;
  }
}

/* The running state of pool_keys over C cells. */
typedef struct pool {
  int64_t D;
  double *mean;      /* [C][D] the cell's sum, then its mean */
  double *axis;      /* [C][D] its farthest key - mean */
  double *far;       /* [C] that key's squared distance */
  double *lo, *hi;   /* [C] the range of its keys along axis */
  double *half_sum;  /* [2C][D] */
  int64_t *n, *half; /* [C], [2C] members */
} pool;

/* One key (row[D]) of cell x in pass 0 (sums), 1 (the farthest key), 2
 * (the range along it) or 3 (the halves' sums). */
static void pool_key(int pass, const float *row, int64_t x, pool *w) {
  const int64_t D = w->D;
  double *mean = w->mean + x * D, *axis = w->axis + x * D;
  if (pass == 0) {
    w->n[x]++;
    for (int64_t d = 0; d < D; d++)
      mean[d] += row[d];
    return;
  }
  double along = 0, dist = 0;
  for (int64_t d = 0; d < D; d++) {
    const double y = row[d] - mean[d];
    dist += y * y;
    along += y * axis[d];
  }
  if (pass == 1 && dist > w->far[x]) {
    w->far[x] = dist;
    for (int64_t d = 0; d < D; d++)
      axis[d] = row[d] - mean[d];
  } else if (pass == 2) {
    w->lo[x] = fmin(w->lo[x], along);
    w->hi[x] = fmax(w->hi[x], along);
  } else if (pass == 3) {
    const int64_t half = 2 * x + (along > 0.5 * (w->lo[x] + w->hi[x]));
    w->half[half]++;
    for (int64_t d = 0; d < D; d++)
      w->half_sum[half * D + d] += row[d];
  }
}

/* Pools head h's keys of batch entry b into the cells' halves' scaled
 * centroids (c->centre, c->log_n). */
static int pool_keys(const stsa_svg_keep *keep, const stsa_geo *geo, const stsa_tensor *k,
                     int64_t b, int64_t h, cells *c) {
  const int64_t D = k->shape[3], C = c->count;
  pool w = {D, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  w.mean = calloc((size_t)(C * D * 4 + C * 3), sizeof(double));
  w.n = calloc((size_t)(3 * C), sizeof(int64_t));
  float *row = malloc(sizeof(float) * (size_t)D);
  c->centre = malloc(sizeof(float) * (size_t)(2 * C * D));
  c->log_n = malloc(sizeof(float) * (size_t)(2 * C));
  const int ok = w.mean && w.n && row && c->centre && c->log_n;
  if (ok) {
    w.axis = w.mean + C * D;
    w.half_sum = w.axis + C * D;
    w.far = w.half_sum + 2 * C * D;
    w.lo = w.far + C;
    w.hi = w.lo + C;
    w.half = w.n + C;
    for (int64_t x = 0; x < C; x++) {
      w.lo[x] = INFINITY;
      w.hi[x] = -INFINITY;
    }
  }
  for (int pass = 0; ok && pass < 4; pass++) {
    for (int64_t i = 0; i < geo->L + geo->R; i++) {
      int64_t cell[2];
      key_cells(keep, geo, c, i, cell);
      const int64_t native = i < geo->L ? geo->v0 + i : geo->t0 + (i - geo->L);
      stsa_load_row_f32(stsa_tensor_row(k, b, native, h), k->dtype, k->stride[3], D, row);
      for (int j = 0; j < 2 && cell[j] >= 0; j++)
        pool_key(pass, row, cell[j], &w);
    }
    for (int64_t x = 0; pass == 0 && x < C * D; x++)
      w.mean[x] /= w.n[x / D] > 0 ? (double)w.n[x / D] : 1;
  }
  const double scale = 1.0 / sqrt((double)D);
  for (int64_t j = 0; ok && j < 2 * C; j++) {
    c->log_n[j] = w.half[j] > 0 ? (float)log((double)w.half[j]) : -INFINITY;
    for (int64_t d = 0; d < D; d++)
      c->centre[d * 2 * C + j] =
          w.half[j] > 0 ? (float)(scale * w.half_sum[j * D + d] / (double)w.half[j]) : 0;
  }
  free(w.mean);
  free(w.n);
  free(row);
  return ok ? 0 : -1;
}

/* The share of band t's positions [p0, p1) a query at position-major index
 * j keeps under a band of +-w indices: the positions within w / F of its
 * own (each spans F indices). */
static double band_kept(int64_t t, const cells *c, const stsa_geo *geo, int64_t j,
                        int64_t w) {
  const double p0 = (double)(t * geo->P / c->bands),
               p1 = (double)((t + 1) * geo->P / c->bands);
  const double lo = (double)(j - w) / (double)geo->F,
               hi = (double)(j + w) / (double)geo->F + 1;
  const double in = fmin(hi, p1) - fmax(lo, p0);
  return in > 0 ? in / (p1 - p0) : 0;
}

/* One query's two estimates from its cells' masses m[count] (any common
 * factor). */
static void query_estimate(const stsa_svg_keep *keep, const stsa_geo *geo, const cells *c,
                           const double *m, int64_t i, double *sp, double *tm) {
  const int64_t f = i / geo->P, p = i % geo->P, S = geo->F * c->parts;
  const double text = m[c->count - 1];
  double frames = 0, lost_sp = 0, sinks = 0;
  for (int64_t j = 0; j < S; j++) {
    const int64_t fj = j / c->parts;
    frames += m[j];
    if (fj < keep->sink_frames)
      sinks += m[j];
    else if (fj < f - keep->frame_window || fj > f + keep->frame_window)
      lost_sp += m[j];
  }
  double bands = 0, lost_tm = 0;
  for (int64_t t = 0; t < c->bands; t++) {
    bands += m[S + t];
    lost_tm += m[S + t] * (1 - band_kept(t, c, geo, p * geo->F + f, keep->band));
  }
  *sp = lost_sp > 0 ? log(lost_sp / (frames + text)) : -INFINITY;
  *tm = lost_tm > 0 ? log(lost_tm / (bands + sinks + text)) : -INFINITY;
}

int stsa_svg_dropped_mass(const stsa_svg_keep *keep, const stsa_tensor *q,
                          const stsa_tensor *k, int64_t b, int64_t h, double *log_sp,
                          double *log_tm) {
  stsa_geo geo;
  stsa_geo_init(&geo, keep->g);
  cells c = cell_layout(&geo);
  const int64_t D = q->shape[3], C = c.count, C2 = 2 * C;
  float *row = malloc(sizeof(float) * (size_t)(D + C2));
  double *m = malloc(sizeof(double) * (size_t)C);
  int st = row && m ? pool_keys(keep, &geo, k, b, h, &c) : -1;
  for (int64_t i = 0; st == 0 && i < geo.L; i++) {
    float *x = row, *a = row + D;
    stsa_load_row_f32(stsa_tensor_row(q, b, geo.v0 + i, h), q->dtype, q->stride[3], D, x);
    for (int64_t j = 0; j < C2; j++)
      a[j] = c.log_n[j];
    for (int64_t d = 0; d < D; d++) { /* over the centroids: it vectorises */
      const float qd = x[d], *centre = c.centre + d * C2;
      for (int64_t j = 0; j < C2; j++)
        a[j] += qd * centre[j];
    }
    float top = -INFINITY;
    for (int64_t j = 0; j < C2; j++)
      top = a[j] > top ? a[j] : top;
    for (int64_t j = 0; j < C; j++)
      m[j] = exp((double)(a[2 * j] - top)) + exp((double)(a[2 * j + 1] - top));
    query_estimate(keep, &geo, &c, m, i, &log_sp[i], &log_tm[i]);
  }
  free(c.centre);
  free(c.log_n);
  free(row);
  free(m);
  return st;
}

int stsa_svg_bound_draw(const stsa_svg_keep *keep, const stsa_tensor *q,
                        const stsa_tensor *k, int64_t b, int64_t h, int which, int64_t R,
                        uint64_t seed, stsa_strata *out) {
  stsa_geo geo;
  stsa_geo_init(&geo, keep->g);
  const int64_t L = geo.L;
  /* two rows a stratum; split in two when both estimates are followed */
  const int64_t G =
      which == STSA_SVG_STRATA_BOTH ? (R / 4 > 1 ? R / 4 : 1) : (R / 2 > 1 ? R / 2 : 1);
  double *est = malloc(sizeof(double) * (size_t)(2 * L));
  int32_t *label = malloc(sizeof(int32_t) * (size_t)L);
  int64_t *size = malloc(sizeof(int64_t) * (size_t)(2 * G));
  uint8_t *split = which == STSA_SVG_STRATA_BOTH ? malloc((size_t)L) : NULL;
  int st = est && label && size && (split || which != STSA_SVG_STRATA_BOTH) ? 0 : -1;
  if (st == 0)
    st = stsa_svg_dropped_mass(keep, q, k, b, h, est, est + L);
  if (st == 0) {
    double *score = which == STSA_SVG_STRATA_TEMPORAL ? est + L : est;
    for (int64_t i = 0; split && i < L; i++) {
      split[i] = est[L + i] > est[i]; /* the temporal mask loses more */
      score[i] = split[i] ? est[L + i] : est[i];
    }
    stsa_strata_geometric(score, split, L, G, label, size);
    st = stsa_strata_draw(label, L, geo.v0, 2 * G, size, R, seed, out);
  }
  free(est);
  free(label);
  free(size);
  free(split);
  return st;
}
