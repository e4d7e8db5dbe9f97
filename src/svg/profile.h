/*
 * profile.h — SVG's online profiling: a few sampled query rows are computed
 * densely and under each head kind's mask; per head, the kind whose output is
 * closest (mean squared error) wins.
 */
#ifndef STSA_SVG_PROFILE_H
#define STSA_SVG_PROFILE_H

#include <stdint.h>

#include "stsa.h"

/* The seed of a call's row draws, from the session's seed and the call. */
uint64_t stsa_svg_row_seed(uint64_t seed, int64_t layer, int64_t step, int64_t batch);

/* Draws `rows` video query rows spread over the whole video (one uniform
 * draw in each of `rows` equal strata), as native token indices, ascending.
 * Deterministic in (seed, layer, step, batch). */
void stsa_svg_sample_rows(const stsa_geometry *g, int64_t rows, uint64_t seed,
                          int64_t layer, int64_t step, int64_t batch, int64_t *out);

/* The masks a profile compares, as single-head masks on true coordinates. */
typedef struct stsa_svg_masks {
  const stsa_mask *dense, *spatial, *temporal;
} stsa_svg_masks;

/* Profiles batch entry `b` on the sampled rows: row_sq[(i * H + h) * nrows
 * + r] is, for i = 0, the energy ||o_dense||^2 of head h's dense row r, and
 * for i = 1 (spatial) and 2 (temporal) the squared difference ||o - o_dense||^2
 * of that row under the kind's mask. q, k, v are the full [B, N, H, D]
 * tensors. One pass over each head's K/V computes the rows' scores once and
 * feeds all three (mask/rows_call.h); the temporal rows are summed in order
 * of position in the frame. */
stsa_status stsa_svg_profile(stsa_ctx *ctx, const stsa_geometry *g,
                             const stsa_svg_masks *masks, const int64_t *rows,
                             int64_t nrows, const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, int64_t b, double *row_sq);

/* Every head of batch entry b at once, each under its own masks: masks[i * H
 * + h] is mask i of head h (i = 0 the reference, nmasks <= 4). The rows are
 * rows[nrows], or with per_head rows[h * nrows ..] for head h; orders[h]
 * (orders may be NULL) the order in which head h's masked rows are best
 * summed (rows that keep the same keys together, mask/rows_call.h). row_sq[(i * H
 * + h) * nrows + r]: i = 0 the energy of the reference's row, i >= 1 the
 * squared difference of mask i's row to it. One pass over each head's K/V
 * serves all of its masks, and the heads share the threads. heads_on (or
 * NULL: every head): the heads to profile; the others' row_sq may be
 * anything (their rows and masks must still be valid). */
stsa_status stsa_svg_profile_heads(stsa_ctx *ctx, const stsa_geometry *g,
                                   const stsa_mask *const *masks, int nmasks,
                                   const int64_t *rows, int per_head, int64_t nrows,
                                   const int32_t *const *orders, const uint8_t *heads_on,
                                   const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, int64_t b, double *row_sq);

/* The reference rows alone, each head on its own rows (rows[h * nrows ..]):
 * masks[h] head h's reference mask; dense_rows[(r * H + h) * D ..] gets
 * the rows (f32) and energy[h * nrows + r] their squared norms. What a
 * bound taken on the call's own output rows compares them with
 * (svg2.c, stsa_svg2_settle). heads_on (or NULL: every head): the heads
 * to profile; the rows of the others may be zeros (rows_call.h). */
stsa_status stsa_svg_profile_dense_rows(stsa_ctx *ctx, const stsa_geometry *g,
                                        const stsa_mask *const *masks,
                                        const int64_t *rows, int64_t nrows,
                                        const uint8_t *heads_on, const stsa_tensor *q,
                                        const stsa_tensor *k, const stsa_tensor *v,
                                        int64_t b, float *dense_rows, double *energy);

/* The squared errors err[R] of head h's rows rows[R] of out (batch entry
 * b, H heads of D) against its reference rows dense[(r * H + h) * D ..] of
 * stsa_svg_profile_dense_rows: a bound on a call's own output rows;
 * row[D] scratch. */
void stsa_svg_output_errors(const stsa_tensor *out, int64_t b, int64_t h, int64_t H,
                            int64_t D, const int64_t *rows, int64_t R, const float *dense,
                            float *row, double *err);

/* The same for head h of batch entry b alone (masks[0..nmasks-1] its masks,
 * its rows in `order` or NULL, row_sq[i * nrows + r]); q, k, v are the full
 * tensors. */
stsa_status stsa_svg_profile_head(stsa_ctx *ctx, const stsa_geometry *g,
                                  const stsa_mask *const *masks, int nmasks,
                                  const int64_t *rows, int64_t nrows,
                                  const int32_t *order, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                  int64_t h, double *row_sq);

/* A view of batch entry b of a [B, S, H, D] tensor (B = 1). */
stsa_tensor stsa_batch_view(const stsa_tensor *t, int64_t b);

/* A view of head h of batch entry b (B = H = 1). */
stsa_tensor stsa_head_view(const stsa_tensor *t, int64_t b, int64_t h);

#endif
