/* svg_strata.c — see svg_strata.h. */
#include "svg/svg_strata.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/per_isa.h"
#include "core/tensor.h"
#include "kernel/exp2_poly.h"
#include "mask/geometry.h"
#include "svg/lanes.h"
#include "svg/svg_pool.h"
#include "svg/svg_unit_scores.h"

/* A block of n queries' cell masses summed along the frames (frame[f *
 * n + r], f <= F: query r's masses of the frames below f) and
 * along the bands (band[t * n + r], t <= bands): a window's kept
 * or lost mass is then a difference of two sums, for every level alike.
 * Sums of non-negative terms only grow, so an empty range reads exactly 0.
 * The queries' sums run side by side: one query's are a chain of
 * dependent additions. */
typedef struct sums {
  int64_t n;     /* queries of a block (block_scorer: mr) */
  double *frame; /* [(F + 1) * n], the caller's */
  double *band;  /* [(bands + 1) * n], the caller's */
} sums;

/* The sums of queries whose cell masses are m[C][n] (cell-major: every
 * loop runs the queries side by side, in vector lanes). */
STSA_PER_ISA static void block_sums(const stsa_pool_cells *c, int64_t F,
                                    const double *restrict m, sums *u) {
  const int64_t S = F * c->parts, n = u->n;
  double *restrict frame = u->frame, *restrict band = u->band;
  for (int64_t r = 0; r < n; r++)
    frame[r] = band[r] = 0;
  for (int64_t f = 0; f < F; f++) {
    double *restrict next = frame + (f + 1) * n;
    const double *restrict part = m + f * c->parts * n;
    for (int64_t r = 0; r < n; r++)
      next[r] = part[r];
    for (int64_t s = 1; s < c->parts; s++)
      for (int64_t r = 0; r < n; r++)
        next[r] += part[s * n + r];
    for (int64_t r = 0; r < n; r++)
      next[r] += frame[f * n + r];
  }
  for (int64_t t = 0; t < c->bands; t++)
    for (int64_t r = 0; r < n; r++)
      band[(t + 1) * n + r] = band[t * n + r] + m[(S + t) * n + r];
}

/* The mass of the bands below position x (0 <= x <= P) of the query whose
 * band sums are band[t * n]: whole bands, and the share of the band
 * holding x left of it. */
static double bands_below(const stsa_pool_cells *c, const double *band, int64_t n,
                          int64_t P, double x) {
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
static void query_estimate(const stsa_svg_keep *keep, const stsa_geo *geo,
                           const stsa_pool_cells *c, const sums *u, int r, double text,
                           int64_t i, double *share_sp, double *share_tm) {
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
    const int64_t below = stsa_clamp64(f - w, sink, F),
                  above = stsa_clamp64(f + w + 1, sink, F);
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

/* 2 C rounded up to whole lanes: the halves' scores cell_masses reads of
 * a row (those past 2 C are computed and not used). */
static int64_t halves_padded(int64_t C) { return (2 * C + LANES - 1) / LANES * LANES; }

/* One query's cell masses m[j ld_m] (j < C), relative to its largest half
 * (top), from its halves' base-2 scores a[halves_padded(C)] (half h of
 * cell j at h C + j); e[halves_padded(C)] scratch. Cell-major, so that
 * block_sums runs the queries side by side. */
STSA_PER_ISA static void cell_masses(const float *restrict a, float top, int64_t C,
                                     float *restrict e, double *restrict m,
                                     int64_t ld_m) {
  for (int64_t j = 0; j < halves_padded(C); j++)
    e[j] = exp2_nonpositive(a[j] - top);
  for (int64_t j = 0; j < C; j++)
    m[j * ld_m] = (double)e[j] + (double)e[C + j];
}

/* Head h's video queries of batch entry b as rows of x ([mr][depth], a 1
 * at D: the halves' panels' log2 members), rows [i0, i0 + mr) (zeros past
 * L), prefetching the block after. */
static void load_queries(const stsa_geo *geo, const stsa_kernels *kern,
                         const stsa_tensor *q, int64_t b, int64_t h, int64_t i0,
                         int64_t mr, int64_t depth, float *x) {
  const int64_t D = depth - 1;
  const int64_t ahead = i0 + STSA_ROWS_AHEAD, count = geo->L - ahead;
  stsa_tensor_prefetch_rows(q, b, geo->v0 + ahead, count < mr ? count : mr, h);
  for (int64_t r = 0; r < mr; r++) {
    float *dst = x + r * depth;
    if (i0 + r >= geo->L) {
      memset(dst, 0, sizeof(float) * (size_t)D);
      continue;
    }
    const void *src = stsa_tensor_row(q, b, geo->v0 + i0 + r, h);
    if (q->dtype == STSA_F32 && q->stride[3] == 1)
      memcpy(dst, src, sizeof(float) * (size_t)D);
    else
      kern->load_row(src, (int)q->dtype, q->stride[3], D, dst);
  }
}

/* Where a block's scores come from: the f32 qk kernel on the pooled
 * panels (the queries converted to f32 rows of x), or the bf16 unit on
 * the queries as they lie (svg_unit_scores.h). */
typedef struct block_scorer {
  const stsa_kernels *kern;
  const stsa_pool_cells *c;
  stsa_unit_halves unit; /* kb NULL: the f32 kernel */
  int64_t mr;            /* rows a block */
  int64_t ld;            /* floats between rows of scores */
  float *x, *s, *top;    /* [mr][depth] query rows, [mr][ld] scores and zeros
                            past them (cell_masses reads to halves_padded), [mr] */
} block_scorer;

/* The scorer of q's queries for kern over pooled cells c. 0, or -1 when
 * out of memory (freed either way by scorer_free). */
static int scorer_make(const stsa_kernels *kern, const stsa_tensor *q,
                       const stsa_pool_cells *c, block_scorer *sc) {
  memset(sc, 0, sizeof *sc);
  sc->kern = kern;
  sc->c = c;
  const int unit = stsa_unit_scores_take(kern, q->dtype);
  if (unit && stsa_unit_halves_make(c, q->shape[3], &sc->unit) != 0)
    return -1;
  sc->mr = unit ? STSA_UNIT_ROWS : kern->mr;
  sc->ld = unit ? sc->unit.cols : c->stride;
  const int64_t overread = halves_padded(c->count) - 2 * c->count;
  sc->x = calloc((size_t)(sc->mr * (c->depth + sc->ld + 1) + overread), sizeof(float));
  if (!sc->x)
    return -1;
  sc->s = sc->x + sc->mr * c->depth;
  sc->top = sc->s + sc->mr * sc->ld + overread;
  for (int64_t r = 0; r < sc->mr; r++)
    sc->x[r * c->depth + c->depth - 1] = 1;
  return 0;
}

static void scorer_free(block_scorer *sc) {
  stsa_unit_halves_free(&sc->unit);
  free(sc->x);
}

/* The base-2 scores (sc->s, sc->ld apart) and each row's largest
 * (sc->top) of the rows video queries from i0 on (rows <= sc->mr; the f32
 * kernel also scores zero rows past them). */
static void block_scores(block_scorer *sc, const stsa_geo *geo, const stsa_tensor *q,
                         int64_t b, int64_t h, int64_t i0, int64_t rows) {
  if (sc->unit.kb) {
    stsa_unit_scores(sc->kern, &sc->unit, q, b, h, geo->v0, i0, (int)rows, sc->s,
                     sc->top);
    return;
  }
  const stsa_pool_cells *c = sc->c;
  load_queries(geo, sc->kern, q, b, h, i0, sc->mr, c->depth, sc->x);
  for (int64_t r = 0; r < sc->mr; r++)
    sc->top[r] = -INFINITY;
  stsa_qk_panels(sc->kern, sc->x, (int)c->depth, c->centre, (int)(c->stride / c->nr),
                 sc->s, (int)c->stride, sc->top);
}

int stsa_svg_dropped_mass(const stsa_svg_keep *keep, const stsa_kernels *kern,
                          const stsa_tensor *q, const stsa_tensor *k, int64_t b,
                          int64_t h, double *log_sp, double *log_tm) {
  stsa_geo geo;
  stsa_geo_init(&geo, keep->g);
  stsa_pool_cells c;
  block_scorer sc = {0};
  int st = stsa_pool_layout(&geo, q->shape[3], kern->nr, &c);
  st = st == 0 ? stsa_pool_keys(keep, &geo, k, b, h, kern->load_row, &c) : -1;
  st = st == 0 ? scorer_make(kern, q, &c, &sc) : -1;
  const int64_t C = c.count, mr = sc.mr;
  float *e = malloc(sizeof(float) * (size_t)halves_padded(C));
  double *m = malloc(sizeof(double) * (size_t)(mr * (C + geo.F + 1 + c.bands + 1)));
  sums u = {mr, m ? m + mr * C : NULL, m ? m + mr * (C + geo.F + 1) : NULL};
  st = st == 0 && e && m ? 0 : -1;
  for (int64_t i0 = 0; st == 0 && i0 < geo.L; i0 += mr) {
    const int64_t rows = geo.L - i0 < mr ? geo.L - i0 : mr;
    block_scores(&sc, &geo, q, b, h, i0, rows);
    for (int64_t r = 0; r < rows; r++)
      cell_masses(sc.s + r * sc.ld, sc.top[r], C, e, m + r, mr);
    for (int64_t j = 0; j < C; j++) /* past the rows: no mass */
      for (int64_t r = rows; r < mr; r++)
        m[j * mr + r] = 0;
    block_sums(&c, geo.F, m, &u);
    for (int64_t r = 0; r < rows; r++)
      query_estimate(keep, &geo, &c, &u, (int)r, m[(C - 1) * mr + r], i0 + r,
                     &log_sp[i0 + r], &log_tm[i0 + r]);
  }
  if (st == 0) { /* the wider levels' when they are drawn from (level_bound) */
    share_logs(log_sp, geo.L);
    share_logs(log_tm, geo.L);
  }
  scorer_free(&sc);
  stsa_pool_cells_free(&c);
  free(e);
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
