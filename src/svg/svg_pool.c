/* svg_pool.c — see svg_pool.h. */
#include "svg/svg_pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/per_isa.h"
#include "core/prefetch.h"
#include "core/tensor.h"
#include "svg/lanes.h"

int stsa_pool_layout(const stsa_geo *geo, int64_t D, int64_t nr, stsa_pool_cells *c) {
  memset(c, 0, sizeof *c);
  c->parts = stsa_clamp64(STSA_POOL_CELL_BUDGET / geo->F, 1, 4);
  c->parts = c->parts < geo->P ? c->parts : geo->P;
  c->bands = STSA_POOL_BANDS < geo->P ? STSA_POOL_BANDS : geo->P;
  c->count = geo->F * c->parts + c->bands + 1;
  c->stride = (2 * c->count + nr - 1) / nr * nr;
  c->depth = D + 1;
  c->nr = nr;
  for (int64_t t = 0; t <= c->bands; t++)
    c->edge[t] = (double)(t * geo->P / c->bands);
  for (int64_t t = 0; t < c->bands; t++)
    c->inv_width[t] = 1 / (c->edge[t + 1] - c->edge[t]);
  c->band_of = malloc(sizeof(int32_t) * (size_t)geo->P);
  for (int64_t t = 0; c->band_of && t < c->bands; t++)
    for (int64_t at = (int64_t)c->edge[t]; at < (int64_t)c->edge[t + 1]; at++)
      c->band_of[at] = (int32_t)t;
  return c->band_of ? 0 : -1;
}

void stsa_pool_cells_free(stsa_pool_cells *c) {
  free(c->centre);
  free(c->band_of);
  c->centre = NULL;
  c->band_of = NULL;
}

/* The running state of the pooling over C cells. */
typedef struct pool {
  int64_t D, C;
  double *sum;       /* [C][D] the cells' sums, then [C][D] the far halves' */
  float *pend;       /* [2C][D] the f32 sums of the keys not yet in sum */
  int64_t *pending;  /* [2C] their counts */
  float *mean;       /* [C][D] */
  float *axis;       /* [C][D] the farthest key - mean */
  float *far;        /* [C] that key's squared distance */
  float *offset;     /* [C] mean . axis */
  int64_t *n, *half; /* [C] members, [C] the far halves' */
} pool;

/* ||row - m0||^2 and ||row - m1||^2 (out[0], out[1]) in one pass over row:
 * a key's two cells (its frame's, its band's) read it once. */
STSA_PER_ISA static void square_distances(const float *restrict row,
                                          const float *restrict m0,
                                          const float *restrict m1, int64_t D,
                                          float out[2]) {
  lanes_f32 a = {0}, c = {0};
  float ta = 0, tc = 0;
  int64_t d = 0;
  for (; d + LANES <= D; d += LANES) {
    const lanes_f32 x = LANES_AT(row + d), x0 = x - LANES_AT(m0 + d),
                    x1 = x - LANES_AT(m1 + d);
    a += x0 * x0;
    c += x1 * x1;
  }
  for (; d < D; d++) {
    ta += (row[d] - m0[d]) * (row[d] - m0[d]);
    tc += (row[d] - m1[d]) * (row[d] - m1[d]);
  }
  out[0] = lanes_total(&a) + ta;
  out[1] = lanes_total(&c) + tc;
}

/* row . v0 and row . v1 (out[0], out[1]) in one pass over row. */
STSA_PER_ISA static void dots(const float *restrict row, const float *restrict v0,
                              const float *restrict v1, int64_t D, float out[2]) {
  lanes_f32 a = {0}, c = {0};
  float ta = 0, tc = 0;
  int64_t d = 0;
  for (; d + LANES <= D; d += LANES) {
    const lanes_f32 x = LANES_AT(row + d);
    a += x * LANES_AT(v0 + d);
    c += x * LANES_AT(v1 + d);
  }
  for (; d < D; d++) {
    ta += row[d] * v0[d];
    tc += row[d] * v1[d];
  }
  out[0] = lanes_total(&a) + ta;
  out[1] = lanes_total(&c) + tc;
}

/* s0 += row, and s1 += row where s1 is not NULL, in one pass over row.
 * Named for this file: clang makes a per-ISA function's resolver a global
 * symbol by its name, and kmeans.c has an add_row. */
STSA_PER_ISA static void pool_add_row(float *restrict s0, float *restrict s1,
                                      const float *restrict row, int64_t D) {
  int64_t d = 0;
  for (; d + LANES <= D; d += LANES) {
    const lanes_f32 x = LANES_AT(row + d);
    LANES_OUT(s0 + d) += x;
    if (s1)
      LANES_OUT(s1 + d) += x;
  }
  for (; d < D; d++) {
    s0[d] += row[d];
    if (s1)
      s1[d] += row[d];
  }
}

/* Keys a sum takes in f32 before they go to its double sum: a key's f32
 * adds are half the work of double ones, and 64 keys' f32 sum rounds far
 * below what the estimate reads. */
enum { PENDING_KEYS = 64 };

/* Sum `slot` (a cell < C, else C + a cell's far half) takes its pending
 * keys. */
static void flush_sum(pool *w, int64_t slot) {
  double *restrict sum = w->sum + slot * w->D;
  float *restrict pend = w->pend + slot * w->D;
  for (int64_t d = 0; d < w->D; d++) {
    sum[d] += pend[d];
    pend[d] = 0;
  }
  w->pending[slot] = 0;
}

/* Sum `slot` has taken one more key into its pending sum. */
static void counted(pool *w, int64_t slot) {
  if (++w->pending[slot] == PENDING_KEYS)
    flush_sum(w, slot);
}

/* Pass 1 for key row of cell x at squared distance dist from its mean:
 * the farthest key so far sets the axis. */
static void note_far(pool *w, int64_t x, float dist, const float *row) {
  if (dist > w->far[x]) {
    const int64_t D = w->D;
    const float *mean = w->mean + x * D;
    float *axis = w->axis + x * D;
    w->far[x] = dist;
    for (int64_t d = 0; d < D; d++)
      axis[d] = row[d] - mean[d];
  }
}

/* Pass 2 for key row of cell x whose dot product with the axis is proj: it
 * goes with the farthest key when it lies past the middle between it and
 * the mean, along the line through them. Only that half is summed (the few
 * keys that stand out, as a rule): the other is the cell less it. The far
 * half holds at most two thirds of the cell (every key lies within the
 * farthest one's distance of the mean, which balances them), so the near
 * half's sum keeps its precision. */
static void note_half(pool *w, int64_t x, float proj, const float *row) {
  if (proj - w->offset[x] > 0.5f * w->far[x]) {
    w->half[x]++;
    pool_add_row(w->pend + (w->C + x) * w->D, NULL, row, w->D);
    counted(w, w->C + x);
  }
}

/* One key (row[D]) of cells x0 and x1 (x1 < 0: of x0 alone, a text key or
 * a sink frame's) in pass 0 (sums), 1 (the farthest key) or 2 (the far
 * halves' sums). */
static void pool_key(int pass, const float *row, int64_t x0, int64_t x1, pool *w) {
  const int64_t D = w->D, y = x1 < 0 ? x0 : x1;
  float got[2];
  if (pass == 0) {
    pool_add_row(w->pend + x0 * D, x1 < 0 ? NULL : w->pend + x1 * D, row, D);
    w->n[x0]++;
    counted(w, x0);
  } else if (pass == 1) {
    square_distances(row, w->mean + x0 * D, w->mean + y * D, D, got);
    note_far(w, x0, got[0], row);
  } else {
    dots(row, w->axis + x0 * D, w->axis + y * D, D, got);
    note_half(w, x0, got[0], row);
  }
  if (x1 < 0)
    return;
  if (pass == 0) {
    w->n[x1]++;
    counted(w, x1);
  } else if (pass == 1) {
    note_far(w, x1, got[1], row);
  } else {
    note_half(w, x1, got[1], row);
  }
}

/* A head's keys as the passes read them: video key i (frame f, position
 * p) at vrow + i step bytes, text key t at trow + t step; `part` and
 * `band` the cells of each position ([P] each: its part of its frame, its
 * band). */
typedef struct key_walk {
  const char *vrow, *trow;
  int64_t step, bytes; /* between tokens; a row's span */
  const stsa_tensor *k;
  void (*load)(const void *, int, int64_t, int64_t, float *);
  const int32_t *part, *band;
} key_walk;

/* The key at src as f32: in place where the tensor holds contiguous f32
 * rows, else converted into buf[D]. */
static const float *walk_row(const key_walk *kw, const char *src, float *buf) {
  const stsa_tensor *k = kw->k;
  if (k->dtype == STSA_F32 && k->stride[3] == 1)
    return (const float *)(const void *)src;
  kw->load(src, (int)k->dtype, k->stride[3], k->shape[3], buf);
  return buf;
}

/* One pass of pool_key over every key, its cells from tables (not three
 * integer divisions a key a pass, as before). */
static void pool_pass(int pass, const stsa_svg_keep *keep, const stsa_geo *geo,
                      const stsa_pool_cells *c, const key_walk *kw, pool *w, float *buf) {
  const int64_t P = geo->P, L = geo->L, text = c->count - 1;
  const int64_t bands_at = geo->F * c->parts;
  for (int64_t f = 0, i = 0; f < geo->F; f++)
    for (int64_t p = 0; p < P; p++, i++) {
      if (i + STSA_ROWS_AHEAD < L)
        stsa_prefetch_span(kw->vrow + (i + STSA_ROWS_AHEAD) * kw->step, kw->bytes);
      const float *key = walk_row(kw, kw->vrow + i * kw->step, buf);
      pool_key(pass, key, f * c->parts + kw->part[p],
               f >= keep->sink_frames ? bands_at + kw->band[p] : -1, w);
    }
  for (int64_t t = 0; t < geo->R; t++)
    pool_key(pass, walk_row(kw, kw->trow + t * kw->step, buf), text, -1, w);
}

/* The halves' panels (c->centre) from the pooled sums: a cell's near half
 * is the cell less its far half. */
static void write_panels(const pool *w, stsa_pool_cells *c, size_t panel_bytes) {
  const int64_t D = w->D, C = w->C;
  /* base 2: the masses are exp2 of the scores */
  const double scale = 1.4426950408889634 / sqrt((double)D), *far_sum = w->sum + C * D;
  memset(c->centre, 0, panel_bytes);
  for (int64_t col = 0; col < c->stride; col++)
    stsa_pool_centre_at(c, col, D)[0] = STSA_POOL_EMPTY_SCORE;
  for (int64_t x = 0; x < C; x++)
    for (int far = 0; far < 2; far++) {
      const int64_t n = far ? w->half[x] : w->n[x] - w->half[x];
      float *at = stsa_pool_centre_at(c, far * C + x, 0);
      for (int64_t d = 0; n > 0 && d < D; d++) {
        const double sum =
            far ? far_sum[x * D + d] : w->sum[x * D + d] - far_sum[x * D + d];
        at[d * c->nr] = (float)(scale * sum / (double)n);
      }
      at[D * c->nr] = n > 0 ? (float)log2((double)n) : STSA_POOL_EMPTY_SCORE;
    }
}

int stsa_pool_keys(const stsa_svg_keep *keep, const stsa_geo *geo, const stsa_tensor *k,
                   int64_t b, int64_t h,
                   void (*load)(const void *, int, int64_t, int64_t, float *),
                   stsa_pool_cells *c) {
  const int64_t D = k->shape[3], C = c->count, P = geo->P;
  pool w = {D, C, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  w.sum = calloc((size_t)(2 * C * D), sizeof(double));
  w.mean = calloc((size_t)(4 * C * D + 2 * C), sizeof(float));
  w.n = calloc((size_t)(4 * C), sizeof(int64_t));
  float *row = malloc(sizeof(float) * (size_t)D);
  int32_t *cell_of = malloc(sizeof(int32_t) * (size_t)(2 * P));
  const size_t panel_bytes = sizeof(float) * (size_t)(c->stride * c->depth);
  c->centre = aligned_alloc(64, (panel_bytes + 63) / 64 * 64);
  const int ok = w.sum && w.mean && w.n && row && cell_of && c->centre;
  const int64_t esize = (int64_t)stsa_dtype_size(k->dtype);
  const key_walk kw = {stsa_tensor_row(k, b, geo->v0, h),
                       geo->R > 0 ? stsa_tensor_row(k, b, geo->t0, h) : NULL,
                       k->stride[1] * esize,
                       D * k->stride[3] * esize,
                       k,
                       load,
                       cell_of,
                       cell_of + P};
  if (ok) {
    w.axis = w.mean + C * D;
    w.far = w.axis + C * D;
    w.offset = w.far + C;
    w.pend = w.offset + C;
    w.half = w.n + C;
    w.pending = w.half + C;
    for (int64_t p = 0; p < P; p++) {
      cell_of[p] = (int32_t)(p * c->parts / P);
      cell_of[P + p] = (int32_t)(p * c->bands / P);
    }
  }
  for (int pass = 0; ok && pass < 3; pass++) {
    pool_pass(pass, keep, geo, c, &kw, &w, row);
    for (int64_t x = 0; pass != 1 && x < 2 * C; x++)
      flush_sum(&w, x);
    for (int64_t x = 0; pass == 0 && x < C * D; x++)
      w.mean[x] = (float)(w.sum[x] / (w.n[x / D] > 0 ? (double)w.n[x / D] : 1));
    for (int64_t x = 0; pass == 1 && x < C; x++)
      w.offset[x] = lanes_dot(w.mean + x * D, w.axis + x * D, D);
  }
  if (ok)
    write_panels(&w, c, panel_bytes);
  free(w.sum);
  free(w.mean);
  free(w.n);
  free(row);
  free(cell_of);
  return ok ? 0 : -1;
}
