/*
 * profile.h — SVG's online profiling: a few sampled query rows are computed
 * densely and under each head kind's mask; per head, the kind whose output is
 * closest (mean squared error) wins.
 */
#ifndef STSA_SVG_PROFILE_H
#define STSA_SVG_PROFILE_H

#include <stdint.h>

#include "stsa.h"

/* Draws `rows` video query rows spread over the whole video (one uniform
 * draw in each of `rows` equal strata), as native token indices, ascending.
 * Deterministic in (seed, layer, step, batch). */
void stsa_svg_sample_rows(const stsa_geometry *g, int64_t rows, uint64_t seed,
                          int64_t layer, int64_t step, int64_t batch, int64_t *out);

/* The masks a profile compares, as single-head masks on true coordinates. */
typedef struct stsa_svg_masks {
  const stsa_mask *dense, *spatial, *temporal;
} stsa_svg_masks;

/* Profiles batch entry `b`: fills mse_spatial[h], mse_temporal[h] (per head,
 * mean over rows and D of the squared difference to dense attention) for the
 * sampled rows, and energy[h] (if not NULL) = the sum of squares of the dense
 * rows, so that sqrt(mse * rows * D / energy) is a relative L2 error. q, k, v
 * are the full [B, N, H, D] tensors. One pass over each head's K/V computes
 * the rows' scores once and feeds all three (mask/rows_call.h); the
 * temporal rows are summed in order of position in the frame. */
stsa_status stsa_svg_profile(stsa_ctx *ctx, const stsa_geometry *g,
                             const stsa_svg_masks *masks, const int64_t *rows,
                             int64_t nrows, const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, int64_t b, float *mse_spatial,
                             float *mse_temporal, double *energy);

/* Relative L2 errors of one head on the sampled rows: rel[i] =
 * ||o_i - o_0|| / ||o_0|| over the rows, o_i the rows under masks[i] (masks[0]
 * the reference, usually the dense mask), for i = 1..nmasks-1 (nmasks <= 4).
 * Head h of batch entry b only; q, k, v are the full tensors. */
stsa_status stsa_svg_profile_head(stsa_ctx *ctx, const stsa_geometry *g,
                                  const stsa_mask *const *masks, int nmasks,
                                  const int64_t *rows, int64_t nrows,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, int64_t b, int64_t h,
                                  double *rel);

/* The same for every head of batch entry b at once, each under its own
 * masks: masks[i * H + h] is mask i of head h (i = 0 the reference), and
 * rel[(i - 1) * H + h] its error. One pass over each head's K/V serves all
 * of its masks, and the heads share the threads. */
stsa_status stsa_svg_profile_heads(stsa_ctx *ctx, const stsa_geometry *g,
                                   const stsa_mask *const *masks, int nmasks,
                                   const int64_t *rows, int64_t nrows,
                                   const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, int64_t b, double *rel);

/* A view of batch entry b of a [B, S, H, D] tensor (B = 1). */
stsa_tensor stsa_batch_view(const stsa_tensor *t, int64_t b);

#endif
