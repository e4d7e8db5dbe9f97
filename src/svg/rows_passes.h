/*
 * rows_passes.h — the sampled query rows of a profile under several masks in
 * one kernel call. Each pass walks the rows in its own order and q tile
 * size (the dense reference as one tile that streams every key once, a
 * kind's rows in small tiles of neighbouring rows that visit only their
 * window's kv tiles), and every head's K/V is packed once for all passes:
 * packing a head costs about as much as computing 64 rows against it.
 */
#ifndef STSA_SVG_ROWS_PASSES_H
#define STSA_SVG_ROWS_PASSES_H

#include <stdint.h>

#include "core/context.h"

/* One pass: `mask` (single-head, true coordinates) for the rows rows[0..R)
 * (native tokens, in this pass's order), q tiles of q_tile rows. */
typedef struct stsa_rows_pass {
  const stsa_mask *mask;
  const int64_t *rows;
  int q_tile;
} stsa_rows_pass;

enum { STSA_ROWS_PASSES_MAX = 4 };

/* Runs every head of batch entry 0 of k, v (all N tokens, native order)
 * under each pass: q and out are f32 [1, npasses * R, H, D], rows
 * [i * R, (i + 1) * R) holding pass i's rows in its order. Keys are walked
 * in native order by every pass. */
stsa_status stsa_svg_rows_passes(stsa_ctx *ctx, const stsa_geometry *g,
                                 const stsa_rows_pass *passes, int npasses, int64_t R,
                                 const stsa_tensor *q, const stsa_tensor *k,
                                 const stsa_tensor *v, const stsa_tensor *out);

#endif
