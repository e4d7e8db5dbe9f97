/* svg_strata.c — see svg_strata.h. */
#include "svg/svg_strata.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "core/per_isa.h"
#include "core/prefetch.h"
#include "core/tensor.h"
#include "kernel/exp2_poly.h"
#include "mask/geometry.h"

/* The pooled keys a query is scored against: every query costs one dot
 * product a cell, so the cells stay near CELL_BUDGET (at Wan 480p, 21
 * frame cells and 16 bands: 37 dot products a query, about 0.2% of the
 * call's attention at density 0.3). A frame is cut into up to four parts
 * (a small object moves between them) while that stays within the budget. */
enum { CELL_BUDGET = 32, BANDS = 16 };

/* The score of an empty half, and of the panels' padding columns: far
 * below any real one (exp2_nonpositive takes it to 0), and finite, so that
 * a padding query row (zeros) scores 0 against it rather than NaN. */
#define EMPTY_SCORE (-FLT_MAX)

/* The cells: frame f part s is spatial cell f * parts + s; band t (over
 * the frames past the sinks) is cell F * parts + t; the real text tokens
 * are the last. A cell's keys are pooled in two halves, cut across the
 * direction of its key farthest from their mean (halfway to it): a few keys that stand
 * out (an object, a sink) keep a centroid of their own instead of a tenth of one, and a
 * query that matches them sees it. */
typedef struct cells {
  int64_t parts, bands, count;
  int64_t stride; /* 2 count, rounded up to the kernel table's nr */
  int64_t depth;  /* D + 1 */
  /* The halves as the qk kernel's K^T panels ([stride / nr][depth][nr],
   * 64-byte aligned; half h of cell j in column h count + j): rows d < D
   * the centroid scaled by the softmax scale and log2(e), row D log2 of
   * its members (EMPTY_SCORE for an empty half and past 2 count). A query
   * row with a 1 at D then scores ln n + x . centre in one product. */
  float *centre;
  double edge[BANDS + 1];  /* band t spans positions [edge[t], edge[t + 1]) */
  double inv_width[BANDS]; /* 1 / (edge[t + 1] - edge[t]) */
  int32_t *band_of;        /* [P] the band holding each position (the edges
                              are whole positions: so is x's, floor(x)'s) */
} cells;

/* Row d of column col of the halves' panels. */
static float *centre_at(const cells *c, int64_t nr, int64_t col, int64_t d) {
  return c->centre + (col / nr) * c->depth * nr + d * nr + col % nr;
}

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* The cell layout of geometry geo for head dim D and panels nr wide. */
static cells cell_layout(const stsa_geo *geo, int64_t D, int64_t nr) {
  cells c = {0};
  c.parts = clamp64(CELL_BUDGET / geo->F, 1, 4);
  c.parts = c.parts < geo->P ? c.parts : geo->P;
  c.bands = BANDS < geo->P ? BANDS : geo->P;
  c.count = geo->F * c.parts + c.bands + 1;
  c.stride = (2 * c.count + nr - 1) / nr * nr;
  c.depth = D + 1;
  for (int64_t t = 0; t <= c.bands; t++)
    c.edge[t] = (double)(t * geo->P / c.bands);
  for (int64_t t = 0; t < c.bands; t++)
    c.inv_width[t] = 1 / (c.edge[t + 1] - c.edge[t]);
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
  int64_t D, C;
  double *sum;       /* [C][D] the cells' sums, then [2C][D] the halves' */
  float *pend;       /* [3C][D] the f32 sums of the keys not yet in sum */
  int64_t *pending;  /* [3C] their counts */
  float *mean;       /* [C][D] */
  float *axis;       /* [C][D] the farthest key - mean */
  float *far;        /* [C] that key's squared distance */
  float *offset;     /* [C] mean . axis */
  int64_t *n, *half; /* [C], [2C] members */
} pool;

/* Independent partial sums of a dot product, which the compiler keeps in
 * vector lanes (the result does not depend on the vector width). */
enum { LANES = 16 };

/* ||row - mean||^2, in lanes. */
STSA_PER_ISA static float square_distance(const float *restrict row,
                                          const float *restrict mean, int64_t D) {
  float a[LANES] = {0};
  int64_t d = 0;
  for (; d + LANES <= D; d += LANES)
    for (int j = 0; j < LANES; j++)
      a[j] += (row[d + j] - mean[d + j]) * (row[d + j] - mean[d + j]);
  for (; d < D; d++)
    a[0] += (row[d] - mean[d]) * (row[d] - mean[d]);
  float sum = 0;
  for (int j = 0; j < LANES; j++)
    sum += a[j];
  return sum;
}

/* row . v, in lanes. */
STSA_PER_ISA static float dot(const float *restrict row, const float *restrict v,
                              int64_t D) {
  float a[LANES] = {0};
  int64_t d = 0;
  for (; d + LANES <= D; d += LANES)
    for (int j = 0; j < LANES; j++)
      a[j] += row[d + j] * v[d + j];
  for (; d < D; d++)
    a[0] += row[d] * v[d];
  float sum = 0;
  for (int j = 0; j < LANES; j++)
    sum += a[j];
  return sum;
}

/* Keys a sum takes in f32 before they go to its double sum: a key's f32
 * adds are half the work of double ones (about a third of a pooling pass),
 * and 64 keys' f32 sum rounds far below what the estimate reads. */
enum { PENDING_KEYS = 64 };

STSA_PER_ISA static void add_pending(float *restrict sum, const float *restrict row,
                                     int64_t D) {
  for (int64_t d = 0; d < D; d++)
    sum[d] += row[d];
}

/* Sum `slot` (a cell < C, else C + a half) takes its pending keys. */
STSA_PER_ISA static void flush_sum(pool *w, int64_t slot) {
  double *restrict sum = w->sum + slot * w->D;
  float *restrict pend = w->pend + slot * w->D;
  for (int64_t d = 0; d < w->D; d++) {
    sum[d] += pend[d];
    pend[d] = 0;
  }
  w->pending[slot] = 0;
}

/* Adds key row[D] to sum `slot`. */
static void accumulate(pool *w, int64_t slot, const float *row) {
  add_pending(w->pend + slot * w->D, row, w->D);
  if (++w->pending[slot] == PENDING_KEYS)
    flush_sum(w, slot);
}

/* One key (row[D]) of cell x in pass 0 (sums), 1 (the farthest key) or 2
 * (the halves' sums: a key goes with the farthest one when it lies past
 * the middle between it and the mean, along the line through them). */
static void pool_key(int pass, const float *row, int64_t x, pool *w) {
  const int64_t D = w->D;
  float *mean = w->mean + x * D, *axis = w->axis + x * D;
  if (pass == 0) {
    w->n[x]++;
    accumulate(w, x, row);
  } else if (pass == 1) {
    const float dist = square_distance(row, mean, D);
    if (dist > w->far[x]) {
      w->far[x] = dist;
      for (int64_t d = 0; d < D; d++)
        axis[d] = row[d] - mean[d];
    }
  } else {
    const float along = dot(row, axis, D) - w->offset[x];
    const int64_t half = 2 * x + (along > 0.5f * w->far[x]);
    w->half[half]++;
    accumulate(w, w->C + half, row);
  }
}

/* Row s of head h of batch entry b of t as f32: in place where t holds
 * contiguous f32 rows, else converted into buf[D]. */
static const float *load_row(const stsa_tensor *t, int64_t b, int64_t s, int64_t h,
                             float *buf) {
  const void *src = stsa_tensor_row(t, b, s, h);
  if (t->dtype == STSA_F32 && t->stride[3] == 1)
    return src;
  stsa_load_row_f32(src, t->dtype, t->stride[3], t->shape[3], buf);
  return buf;
}

/* Rows of one head lie H x D elements apart in a [B, N, H, D] tensor: a
 * stride past a page, which the hardware prefetcher does not follow, so
 * the passes over a head's rows fetch this many rows ahead themselves. */
enum { ROWS_AHEAD = 8 };

/* Prefetches row s of head h of batch entry b of t (s past the tensor:
 * nothing). */
static void prefetch_row(const stsa_tensor *t, int64_t b, int64_t s, int64_t h) {
  if (s >= t->shape[1])
    return;
  const char *row = stsa_tensor_row(t, b, s, h);
  const int64_t bytes = t->shape[3] * t->stride[3] * (int64_t)stsa_dtype_size(t->dtype);
  for (int64_t at = 0; at < bytes; at += 64) /* a cache line */
    STSA_PREFETCH(row + at);
}

/* Token i's native index (video i < L, else text token i - L). */
static int64_t native_token(const stsa_geo *geo, int64_t i) {
  return i < geo->L ? geo->v0 + i : geo->t0 + (i - geo->L);
}

/* Pools head h's keys of batch entry b into the cells' halves' scaled
 * centroids (c->centre, panels nr wide). */
static int pool_keys(const stsa_svg_keep *keep, const stsa_geo *geo, const stsa_tensor *k,
                     int64_t b, int64_t h, int64_t nr, cells *c) {
  const int64_t D = k->shape[3], C = c->count;
  pool w = {D, C, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  w.sum = calloc((size_t)(3 * C * D), sizeof(double));
  w.mean = calloc((size_t)(5 * C * D + 2 * C), sizeof(float));
  w.n = calloc((size_t)(6 * C), sizeof(int64_t));
  float *row = malloc(sizeof(float) * (size_t)D);
  const size_t panel_bytes = sizeof(float) * (size_t)(c->stride * c->depth);
  c->centre = aligned_alloc(64, (panel_bytes + 63) / 64 * 64);
  const int ok = w.sum && w.mean && w.n && row && c->centre;
  if (ok) {
    w.axis = w.mean + C * D;
    w.far = w.axis + C * D;
    w.offset = w.far + C;
    w.half = w.n + C;
    w.pend = w.offset + C;
    w.pending = w.half + 2 * C;
  }
  for (int pass = 0; ok && pass < 3; pass++) {
    for (int64_t i = 0; i < geo->L + geo->R; i++) {
      int64_t cell[2];
      key_cells(keep, geo, c, i, cell);
      if (i + ROWS_AHEAD < geo->L + geo->R)
        prefetch_row(k, b, native_token(geo, i + ROWS_AHEAD), h);
      const float *key = load_row(k, b, native_token(geo, i), h, row);
      for (int j = 0; j < 2 && cell[j] >= 0; j++)
        pool_key(pass, key, cell[j], &w);
    }
    for (int64_t x = 0; pass != 1 && x < 3 * C; x++)
      flush_sum(&w, x);
    for (int64_t x = 0; pass == 0 && x < C * D; x++)
      w.mean[x] = (float)(w.sum[x] / (w.n[x / D] > 0 ? (double)w.n[x / D] : 1));
    for (int64_t x = 0; pass == 1 && x < C; x++)
      w.offset[x] = dot(w.mean + x * D, w.axis + x * D, D);
  }
  /* base 2: the masses are exp2 of the scores (cell_masses) */
  const double scale = 1.4426950408889634 / sqrt((double)D), *half_sum = w.sum + C * D;
  if (ok)
    memset(c->centre, 0, panel_bytes);
  for (int64_t col = 0; ok && col < c->stride; col++) /* half j / 2 + (j & 1) C */
    centre_at(c, nr, col, D)[0] = EMPTY_SCORE;
  for (int64_t j = 0; ok && j < 2 * C; j++) {
    const int64_t n = w.half[j];
    float *at = centre_at(c, nr, (j & 1) * C + j / 2, 0);
    for (int64_t d = 0; n > 0 && d < D; d++)
      at[d * nr] = (float)(scale * half_sum[j * D + d] / (double)n);
    at[D * nr] = n > 0 ? (float)log2((double)n) : EMPTY_SCORE;
  }
  free(w.sum);
  free(w.mean);
  free(w.n);
  free(row);
  return ok ? 0 : -1;
}

/* A block of n queries' cell masses summed along the frames (frame[f *
 * n + r], f <= F: query r's masses of the frames below f) and
 * along the bands (band[t * n + r], t <= bands): a window's kept
 * or lost mass is then a difference of two sums, for every level alike.
 * Sums of non-negative terms only grow, so an empty range reads exactly 0.
 * The queries' sums run side by side: one query's are a chain of
 * dependent additions. */
typedef struct sums {
  int64_t n;     /* queries of a block: the kernel table's mr */
  double *frame; /* [(F + 1) * n], the caller's */
  double *band;  /* [(bands + 1) * n], the caller's */
} sums;

/* The sums of queries whose cell masses are m[n][C]. */
static void block_sums(const cells *c, int64_t F, const double *m, sums *u) {
  const int64_t C = c->count, S = F * c->parts, n = u->n;
  for (int64_t r = 0; r < n; r++)
    u->frame[r] = u->band[r] = 0;
  for (int64_t f = 0; f < F; f++)
    for (int64_t r = 0; r < n; r++) {
      double frame = 0;
      for (int64_t s = 0; s < c->parts; s++)
        frame += m[r * C + f * c->parts + s];
      u->frame[(f + 1) * n + r] = u->frame[f * n + r] + frame;
    }
  for (int64_t t = 0; t < c->bands; t++)
    for (int64_t r = 0; r < n; r++)
      u->band[(t + 1) * n + r] = u->band[t * n + r] + m[r * C + S + t];
}

/* The mass of the bands below position x (0 <= x <= P) of the query whose
 * band sums are band[t * n]: whole bands, and the share of the band
 * holding x left of it. */
static double bands_below(const cells *c, const double *band, int64_t n, int64_t P,
                          double x) {
  if (x <= 0)
    return 0;
  if (x >= (double)P)
    return band[c->bands * n];
  const int64_t t = c->band_of[(int64_t)x];
  const double part = (x - c->edge[t]) * c->inv_width[t];
  const double below = band[t * n], next = band[(t + 1) * n];
  return below + (next - below) * part;
}

/* Query i's estimated shares of its mass lost at every level
 * (share_sp[l * L], share_tm[l * L]; their logs are taken after) from its
 * sums (row r of u, block_sums) and its text key's mass. A temporal band
 * of +-w position-major indices around index j keeps positions (j - w) /
 * F to (j + w) / F + 1, each position spanning F. */
static void query_estimate(const stsa_svg_keep *keep, const stsa_geo *geo, const cells *c,
                           const sums *u, int r, double text, int64_t i, double *share_sp,
                           double *share_tm) {
  const int64_t f = i / geo->P, p = i % geo->P, F = geo->F, sink = keep->sink_frames;
  const int64_t n = u->n;
  const double *frame = u->frame + r, *band = u->band + r;
  const double sinks = frame[(sink < F ? sink : F) * n];
  const double sp_total = frame[F * n] + text,
               tm_total = band[c->bands * n] + sinks + text;
  const int64_t j = p * F + f;
  const double per_sp = 1 / sp_total, per_tm = 1 / tm_total, per_frame = 1 / (double)F;
  for (int l = 0; l < keep->levels; l++) {
    const int64_t w = keep->frame_window[l];
    const int64_t below = clamp64(f - w, sink, F), above = clamp64(f + w + 1, sink, F);
    const double lost_sp =
        (frame[below * n] - frame[sink * n]) + (frame[F * n] - frame[above * n]);
    const double lo = (double)(j - keep->band[l]) * per_frame,
                 hi = (double)(j + keep->band[l]) * per_frame + 1;
    const double lost_tm = bands_below(c, band, n, geo->P, lo) +
                           (band[c->bands * n] - bands_below(c, band, n, geo->P, hi));
    share_sp[l * geo->L] = lost_sp * per_sp;
    share_tm[l * geo->L] = lost_tm * per_tm;
  }
}

/* ln x for x > 0, within 1e-7 (a series in s = (m - 1) / (m + 1) of the
 * mantissa m in [sqrt(1/2), sqrt(2))), -inf for x = 0: the strata need no
 * more, and unlike log() the loop over a head's shares vectorizes. */
static inline double share_log(double x) {
  typedef union {
    double value;
    uint64_t bits;
  } word;
  word w = {x};
  /* x >= 0 (no sign bit) and normal: a share is 0 or at least the least
   * mass exp2_nonpositive gives, 2^-126, over its cells' */
  int64_t e = (int64_t)(w.bits >> 52) - 1023;
  w.bits = (w.bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  const int high = w.value > 1.4142135623730951;
  const double m = high ? 0.5 * w.value : w.value;
  e += high;
  const double s = (m - 1) / (m + 1), s2 = s * s;
  const double series = 2 * s * (1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7))));
  return x > 0 ? (double)e * 0.6931471805599453 + series : -INFINITY;
}

/* x[n] = ln x[n] (share_log), in place, in the widest vectors the CPU has.
 * Static: clang resolves a function's clones only within its own file. */
STSA_PER_ISA static void share_logs(double *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = share_log(x[i]);
}

void stsa_svg_share_logs(double *x, int64_t n) { share_logs(x, n); }

/* 2^x for x <= 0 (exp2_poly.h's polynomial, x = n + f, |f| <= 1/2); 0
 * below STSA_EXP2_MIN, -inf included. Plain C the compiler vectorizes:
 * selects, no branches, and the power of two from its bits. */
static inline float exp2_nonpositive(float x) {
  /* x compared and clamped by its bits (for x <= 0, the larger the bits,
   * the more negative): float selects leave the compiler a branch */
  typedef union {
    float value;
    uint32_t bits;
  } word;
  const word arg = {x}, lo = {STSA_EXP2_MIN};
  const uint32_t keep = arg.bits > lo.bits ? 0 : ~0u; /* 0 below the range */
  const word in = {.bits = (arg.bits & keep) | (lo.bits & ~keep)};
  const int32_t n = (int32_t)(in.value - 0.5f); /* rounds: in <= 0 */
  const float f = in.value - (float)n;
  float p = STSA_EXP2_C5;
  p = p * f + STSA_EXP2_C4;
  p = p * f + STSA_EXP2_C3;
  p = p * f + STSA_EXP2_C2;
  p = p * f + STSA_EXP2_C1;
  p = p * f + 1.0f;
  const word pow2 = {.bits = ((uint32_t)(n + 127) << 23) & keep};
  return p * pow2.value;
}

/* One query's cell masses m[C], relative to its largest half (top, the
 * qk kernel's row maximum), from its halves' base-2 scores a[2 C] (half h
 * of cell j at h C + j); e[2 C] scratch. */
STSA_PER_ISA static void cell_masses(const float *restrict a, float top, int64_t C,
                                     float *restrict e, double *restrict m) {
  for (int64_t j = 0; j < 2 * C; j++)
    e[j] = exp2_nonpositive(a[j] - top);
  for (int64_t j = 0; j < C; j++)
    m[j] = (double)e[j] + (double)e[C + j];
}

/* Head h's video queries of batch entry b as rows of x ([mr][depth], a 1
 * at D: the halves' panels' log2 members), rows [i0, i0 + mr) (zeros past
 * L), prefetching the block after. */
static void load_queries(const stsa_geo *geo, const stsa_tensor *q, int64_t b, int64_t h,
                         int64_t i0, int64_t mr, int64_t depth, float *x) {
  const int64_t D = depth - 1;
  for (int64_t r = 0; r < mr && i0 + ROWS_AHEAD + r < geo->L; r++)
    prefetch_row(q, b, geo->v0 + i0 + ROWS_AHEAD + r, h);
  for (int64_t r = 0; r < mr; r++) {
    float *dst = x + r * depth;
    if (i0 + r >= geo->L) {
      memset(dst, 0, sizeof(float) * (size_t)D);
      continue;
    }
    const float *row = load_row(q, b, geo->v0 + i0 + r, h, dst);
    if (row != dst)
      memcpy(dst, row, sizeof(float) * (size_t)D);
  }
}

int stsa_svg_dropped_mass(const stsa_svg_keep *keep, const stsa_kernels *kern,
                          const stsa_tensor *q, const stsa_tensor *k, int64_t b,
                          int64_t h, double *log_sp, double *log_tm) {
  stsa_geo geo;
  stsa_geo_init(&geo, keep->g);
  const int64_t D = q->shape[3], mr = kern->mr, nr = kern->nr;
  cells c = cell_layout(&geo, D, nr);
  c.band_of = malloc(sizeof(int32_t) * (size_t)geo.P);
  for (int64_t t = 0; c.band_of && t < c.bands; t++)
    for (int64_t at = (int64_t)c.edge[t]; at < (int64_t)c.edge[t + 1]; at++)
      c.band_of[at] = (int32_t)t;
  const int64_t C = c.count, S = c.stride, depth = c.depth;
  float *x = malloc(sizeof(float) * (size_t)(mr * (depth + S + 1) + 2 * C));
  float *s = x ? x + mr * depth : NULL, *top = s ? s + mr * S : NULL,
        *e = top ? top + mr : NULL;
  double *m = malloc(sizeof(double) * (size_t)(mr * (C + geo.F + 1 + c.bands + 1)));
  sums u = {mr, m ? m + mr * C : NULL, m ? m + mr * (C + geo.F + 1) : NULL};
  int st = x && m && c.band_of ? pool_keys(keep, &geo, k, b, h, nr, &c) : -1;
  for (int64_t r = 0; st == 0 && r < mr; r++)
    x[r * depth + D] = 1;
  for (int64_t i0 = 0; st == 0 && i0 < geo.L; i0 += mr) {
    const int64_t rows = geo.L - i0 < mr ? geo.L - i0 : mr;
    load_queries(&geo, q, b, h, i0, mr, depth, x);
    for (int64_t r = 0; r < mr; r++)
      top[r] = -INFINITY;
    stsa_qk_panels(kern, x, (int)depth, c.centre, (int)(S / nr), s, (int)S, top);
    for (int64_t r = 0; r < mr; r++) /* past the rows: zeros' masses */
      cell_masses(s + r * S, top[r], C, e, m + r * C);
    block_sums(&c, geo.F, m, &u);
    for (int64_t r = 0; r < rows; r++)
      query_estimate(keep, &geo, &c, &u, (int)r, m[r * C + C - 1], i0 + r,
                     &log_sp[i0 + r], &log_tm[i0 + r]);
  }
  if (st == 0) { /* the wider levels' when they are drawn from (level_bound) */
    share_logs(log_sp, geo.L);
    share_logs(log_tm, geo.L);
  }
  free(c.centre);
  free(c.band_of);
  free(x);
  free(m);
  return st;
}

int stsa_svg_draw_rows(const double *log_sp, const double *log_tm, int64_t L, int64_t v0,
                       int which, int64_t R, uint64_t seed, stsa_strata *out) {
  /* two rows a stratum; split in two when both estimates are followed */
  const int64_t G =
      which == STSA_SVG_STRATA_BOTH ? (R / 4 > 1 ? R / 4 : 1) : (R / 2 > 1 ? R / 2 : 1);
  int32_t *label = malloc(sizeof(int32_t) * (size_t)L);
  int64_t *size = malloc(sizeof(int64_t) * (size_t)(2 * G));
  uint8_t *split = which == STSA_SVG_STRATA_BOTH ? malloc((size_t)L) : NULL;
  double *score =
      which == STSA_SVG_STRATA_BOTH ? malloc(sizeof(double) * (size_t)L) : NULL;
  int st = label && size && (which != STSA_SVG_STRATA_BOTH || (split && score)) ? 0 : -1;
  if (st == 0) {
    const double *by = which == STSA_SVG_STRATA_TEMPORAL ? log_tm : log_sp;
    for (int64_t i = 0; score && i < L; i++) {
      split[i] = log_tm[i] > log_sp[i]; /* the temporal mask loses more */
      score[i] = split[i] ? log_tm[i] : log_sp[i];
    }
    stsa_strata_geometric(score ? score : by, split, L, G, label, size);
    st = stsa_strata_draw(label, L, v0, 2 * G, size, R, seed, out);
  }
  free(label);
  free(size);
  free(split);
  free(score);
  return st;
}

int stsa_svg_bound_draw(const stsa_svg_keep *keep, const stsa_kernels *kern,
                        const stsa_tensor *q, const stsa_tensor *k, int64_t b, int64_t h,
                        int which, int64_t R, uint64_t seed, stsa_strata *out) {
  stsa_geo geo;
  stsa_geo_init(&geo, keep->g);
  const int64_t L = geo.L, levels = keep->levels;
  double *est = malloc(sizeof(double) * (size_t)(2 * levels * L));
  int st =
      est ? stsa_svg_dropped_mass(keep, kern, q, k, b, h, est, est + levels * L) : -1;
  if (st == 0)
    st = stsa_svg_draw_rows(est, est + levels * L, L, geo.v0, which, R, seed, out);
  free(est);
  return st;
}
