/* svg_unit_scores.c — see svg_unit_scores.h. */
#include "svg/svg_unit_scores.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "core/per_isa.h"
#include "core/tensor.h"
#include "svg/lanes.h"

/* The unit's tiles: panels of 16 columns, depth in chunks of 32 (kernels.h:
 * bf16_scores). */
enum { UNIT_COLS = 16, UNIT_DEPTH = 32, UNIT_CHUNK = UNIT_COLS * UNIT_DEPTH };

/* The bf16 terms a centre is split into: hi = bf16(c), then lo, the
 * rounding of what hi leaves: their sum is within 2^-16 |c| of c. A third
 * term would hold every bit of the f32 centre, for 1.5x the unit's work
 * (about 1 ms of a Wan-480p call's profiling); the strata need no more than
 * two give (svg_unit_scores.h). */
enum { TERMS = 2 };

void stsa_unit_halves_free(stsa_unit_halves *u) {
  free(u->kb);
  free(u->bias);
  free(u->qb);
  free(u->s);
  u->kb = u->qb = NULL;
  u->bias = u->s = NULL;
}

int stsa_unit_halves_make(const stsa_pool_cells *c, int64_t D, stsa_unit_halves *u) {
  u->nch = (int)((D + UNIT_DEPTH - 1) / UNIT_DEPTH);
  u->npanels = (int)((2 * c->count + UNIT_COLS - 1) / UNIT_COLS);
  u->cols = (int64_t)UNIT_COLS * u->npanels;
  const size_t term = (size_t)u->npanels * (size_t)u->nch * UNIT_CHUNK;
  u->kb = aligned_alloc(64, (TERMS * term * sizeof(uint16_t) + 63) / 64 * 64);
  u->bias = malloc(sizeof(float) * (size_t)u->cols);
  u->qb = calloc((size_t)STSA_UNIT_ROWS * (size_t)u->nch * UNIT_DEPTH, sizeof(uint16_t));
  u->s = malloc(sizeof(float) * (size_t)(STSA_UNIT_ROWS * TERMS * u->cols));
  if (!u->kb || !u->bias || !u->qb || !u->s)
    return -1;
  memset(u->kb, 0, TERMS * term * sizeof(uint16_t));
  for (int64_t col = 0; col < u->cols; col++) {
    const int real = col < c->stride;
    u->bias[col] = real ? stsa_pool_centre_at(c, col, D)[0] : STSA_POOL_EMPTY_SCORE;
    uint16_t *panel = u->kb + (size_t)(col / UNIT_COLS) * (size_t)u->nch * UNIT_CHUNK;
    for (int64_t d = 0; real && d < D; d++) {
      /* depth pair d / 2 of chunk d / 32, column col % 16, d's half of it */
      const int64_t at = (d / UNIT_DEPTH) * UNIT_CHUNK +
                         (d % UNIT_DEPTH) / 2 * 2 * UNIT_COLS + (col % UNIT_COLS) * 2 +
                         d % 2;
      float left = stsa_pool_centre_at(c, col, d)[0];
      for (int t = 0; t < TERMS; t++) {
        const uint16_t part = stsa_f32_to_bf16(left);
        panel[(size_t)t * term + (size_t)at] = part;
        left -= stsa_bf16_to_f32(part);
      }
    }
  }
  return 0;
}

/* a[n] = the sum of the terms' scores s[t * n + j] and bias[j] (n a
 * multiple of LANES), and the largest of a (lane by lane, then across the
 * lanes: one running maximum is a chain of n dependent compares). */
STSA_PER_ISA static float sum_terms(const float *restrict s, const float *restrict bias,
                                    int64_t n, float *restrict a) {
  lanes_f32 top = LANES_AT(bias);
  for (int64_t j = 0; j < n; j += LANES) {
    lanes_f32 x = LANES_AT(bias + j);
    for (int t = 0; t < TERMS; t++)
      x += LANES_AT(s + t * n + j);
    LANES_OUT(a + j) = x;
    lanes_raise(&top, &x);
  }
  return lanes_max(&top);
}

void stsa_unit_scores(const stsa_kernels *kern, stsa_unit_halves *u, const stsa_tensor *q,
                      int64_t b, int64_t h, int64_t v0, int64_t i0, int rows, float *a,
                      float *top) {
  const int64_t D = q->shape[3], depth = (int64_t)UNIT_DEPTH * u->nch;
  const uint16_t *rows_at = stsa_tensor_row(q, b, v0 + i0, h);
  int64_t ld_q = q->stride[1];
  /* in place where a row is whole chunks of contiguous bf16: else past D
   * the unit would read the next head's (or past the tensor) */
  if (depth != D || q->stride[3] != 1 || ld_q > INT_MAX) {
    for (int r = 0; r < rows; r++) {
      const uint16_t *src = stsa_tensor_row(q, b, v0 + i0 + r, h);
      for (int64_t d = 0; d < D; d++)
        u->qb[r * depth + d] = src[d * q->stride[3]];
    }
    rows_at = u->qb;
    ld_q = depth;
  }
  const int64_t n = u->cols;
  kern->bf16_scores(rows_at, (int)ld_q, rows, u->kb, u->nch, TERMS * u->npanels, u->s,
                    (int)(TERMS * n));
  for (int r = 0; r < rows; r++)
    top[r] = sum_terms(u->s + r * TERMS * n, u->bias, n, a + r * n);
}
