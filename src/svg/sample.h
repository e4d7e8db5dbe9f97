/*
 * sample.h — which query rows SVG profiles, and the orders its passes walk
 * them in. The rows are drawn once per call; each profiling pass may visit
 * them in its own order so that rows sharing a q tile also share their kv
 * tiles (rows of one frame under a frame window, rows of one position under
 * a position band).
 */
#ifndef STSA_SVG_SAMPLE_H
#define STSA_SVG_SAMPLE_H

#include <stdint.h>

#include "stsa.h"

/* Draws `rows` video query rows spread over the whole video (one uniform
 * draw in each of `rows` equal strata), as native token indices, ascending.
 * Deterministic in (seed, layer, step, batch). */
void stsa_svg_sample_rows(const stsa_geometry *g, int64_t rows, uint64_t seed,
                          int64_t layer, int64_t step, int64_t batch, int64_t *out);

/* perm[i] = the index into rows (n video tokens, native indices) of the i-th
 * row in position-major order (j = p*F + f; ties keep their order), the
 * order in which a temporal head's rows are neighbours. */
void stsa_svg_position_order(const stsa_geometry *g, const int64_t *rows, int64_t n,
                             int64_t *perm);

#endif
