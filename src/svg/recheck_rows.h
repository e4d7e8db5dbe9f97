/*
 * recheck_rows.h — the rows of the recheck (recheck.c): how many a check
 * takes, which, and their dense rows when they were computed ahead of the
 * heads' run. Method svg2's deferred bound (svg2_bound.c) profiles the first
 * check's rows in its own pass over each head's K and V: the rows depend
 * only on the call's seed, not on any choice, so drawing them early changes
 * nothing the recheck's argument needs (docs/architecture.md, "Method auto's
 * recheck"), and one pass packs each head's K and V once, not twice.
 */
#ifndef STSA_SVG_RECHECK_ROWS_H
#define STSA_SVG_RECHECK_ROWS_H

#include <stdint.h>

#include "core/context.h"
#include "core/tensor.h"
#include "mask/geometry.h"
#include "mask/mask.h"

/* A check's rows and their dense reference, computed ahead. */
typedef struct stsa_recheck_rows {
  int64_t R;         /* rows; 0: none were computed */
  uint64_t row_seed; /* the call's stream they were drawn from */
  int64_t *rows;     /* [R] video tokens, every head's */
  float *dense;      /* [R][H][D] their dense rows */
  double *energy;    /* [H][R] their squared norms */
} stsa_recheck_rows;

/* Rows a check takes: a multiple of sample_rows, at most the video rows
 * and one q tile of the profile (4096 rounded down to the kernels' mr). */
int64_t stsa_recheck_count(const stsa_geometry *g, int64_t sample_rows, int mr);

void stsa_recheck_rows_free(stsa_recheck_rows *r);

/* The dense rows of each head's R rows own[H][R] of batch entry b
 * (dense[R][H][D], energy[H][R]; masks[H] the heads' dense masks) and, in
 * the same pass over each head's K and V, those of the recheck's first
 * rows for the call's row_seed (*first; where both sets do not fit one q
 * tile of the pass, first->R is 0 and the recheck profiles its own). */
stsa_status stsa_recheck_profile_with(stsa_ctx *ctx, const stsa_geometry *g,
                                      int64_t sample_rows, uint64_t row_seed,
                                      const stsa_mask *const *masks, const int64_t *own,
                                      int64_t R, const stsa_tensor *q,
                                      const stsa_tensor *k, const stsa_tensor *v,
                                      int64_t b, float *dense, double *energy,
                                      stsa_recheck_rows *first);

#endif
