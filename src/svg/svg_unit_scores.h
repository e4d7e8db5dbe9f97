/*
 * svg_unit_scores.h — the scores of SVG's estimate (svg_strata.c) on the
 * kernel table's bf16 unit (kernels.h: bf16_scores, where bf16_rows_unit
 * says it outpaces the f32 micro-kernels: AMX), for bf16 queries: read as
 * they lie in the tensor (no conversion to f32 rows), 32 a call, against
 * the pooled halves (svg_pool.h) held as two bf16 terms a centre, hi =
 * bf16(c) and lo = bf16(c - hi), whose sum is within 2^-16 |c| of c. The
 * products of bf16 are exact and the sums f32. At Wan 480p the queries'
 * log shares differ from the f32 kernel's by 2.6e-5 at most (1.0e-5 with
 * a third term, the f32 sums' rounding), far below what cuts a stratum,
 * and the estimate takes 7.7 ms of one core a head against 10.4 with the
 * conversion and the f32 kernel (docs/benchmarks.md, "SVG's estimate at
 * memory speed").
 * No prefetch: the unit's tile loads wait on memory either way, and
 * fetching a block's rows ahead gained nothing.
 */
#ifndef STSA_SVG_SVG_UNIT_SCORES_H
#define STSA_SVG_SVG_UNIT_SCORES_H

#include <stdint.h>

#include "kernel/kernels.h"
#include "stsa.h"
#include "svg/svg_pool.h"

/* Queries a call scores at most (the unit's two row blocks). */
enum { STSA_UNIT_ROWS = 32 };

/* The halves as the unit's K panels. */
typedef struct stsa_unit_halves {
  int nch;      /* depth chunks of 32 */
  int npanels;  /* panels of 16 columns a term */
  int64_t cols; /* 16 npanels: the columns a score row holds */
  uint16_t *kb; /* [2 npanels][nch][16 depth pairs][16 columns][2]: hi, then lo */
  float *bias;  /* [cols] log2 of each half's members (the f32 panels' row D) */
  uint16_t *qb; /* [STSA_UNIT_ROWS][32 nch]: rows that cannot be read in place */
  float *s;     /* [STSA_UNIT_ROWS][2 cols]: the hi and lo scores */
} stsa_unit_halves;

/* Whether kern scores bf16 queries on its unit. */
static inline int stsa_unit_scores_take(const stsa_kernels *kern, stsa_dtype q) {
  return q == STSA_BF16 && kern->bf16_rows_unit && kern->bf16_scores;
}

/* The unit's halves from c's pooled panels. 0, or -1 when out of memory
 * (u freed either way by stsa_unit_halves_free). */
int stsa_unit_halves_make(const stsa_pool_cells *c, int64_t D, stsa_unit_halves *u);
void stsa_unit_halves_free(stsa_unit_halves *u);

/* The base-2 scores a[r * u->cols + j] (j < 2 count of the cells; the rest
 * of a row far below them) and each row's largest, top[r], of rows r <
 * rows (1..STSA_UNIT_ROWS) of the video queries from i0 on (native index
 * v0 + i0) of head h of batch entry b of q (bf16, [B, N, H, D]). */
void stsa_unit_scores(const stsa_kernels *kern, stsa_unit_halves *u, const stsa_tensor *q,
                      int64_t b, int64_t h, int64_t v0, int64_t i0, int rows, float *a,
                      float *top);

#endif
