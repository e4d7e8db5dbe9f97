/*
 * tile_spans.h — the stored patterns of PARTIAL tiles (block_sparse.h)
 * applied to a tile's scores, and a PARTIAL tile computed only where its
 * pattern keeps keys.
 *
 * At a band's edge a partial tile keeps about half of its pairs, and what
 * it drops is a triangle: most of its micro-tiles (mr rows x nr columns)
 * are dropped whole, yet the whole-tile path computes them and masks them
 * afterwards, so a partial tile costs a little more than a full one. Here
 * each row block of mr rows takes the range of columns its rows keep,
 * [lo, hi), from the pattern: qk runs on the panels that range touches, the
 * mask and the softmax on those panels' columns, pv on [lo, hi).
 *
 * The result is bitwise that of the whole tile: what is skipped are scores
 * the mask would set to -inf, whose probabilities are exactly +0, and
 * adding +0 (to a softmax row sum, or 0 * v for finite v to a P.V
 * accumulator, which is never -0) changes nothing; the softmax keeps its
 * vector lanes because the range starts on a panel boundary. The two cases
 * where that argument fails (a kept logit may be -inf; the tile's V holds
 * NaN/Inf, and 0 * NaN would matter) stay on the whole-tile path.
 */
#ifndef STSA_KERNEL_TILE_SPANS_H
#define STSA_KERNEL_TILE_SPANS_H

#include "kernel/problem.h"
#include "kernel/tile_scratch.h"

/* Sets s[r][c] = -inf outside the kept intervals of the pattern's row r0 + r,
 * r < rows, c < n. */
void stsa_apply_tile_pattern(const stsa_tile_pattern *pat, int r0, int rows, int n,
                             float *s, int ld_s);
/* The same on columns c0 <= c < c1 only (s still points at column 0). */
void stsa_apply_tile_pattern_cols(const stsa_tile_pattern *pat, int r0, int rows, int c0,
                                  int c1, float *s, int ld_s);

/* span[2 i], span[2 i + 1] = the columns [lo, hi) that the real rows of
 * block i (rows [i block, (i + 1) block) of rows_pad) keep under pat;
 * lo >= hi: none (padding rows keep nothing). The pattern tiles take it per
 * mr-row block, full_tile_bf16 per 32-row pass. */
void stsa_tile_row_spans(const stsa_tile_pattern *pat, int rows, int rows_pad, int block,
                         int n, int32_t *span);

/* One PARTIAL kv tile of n valid columns (K^T panels at kt, V panels at vp,
 * ld_panel rows apart) for the q tile's rows (rows_pad of them with the
 * padding) in sc, masked by pat; scores rows are ld_s apart. Updates the
 * tile's online-softmax state and output as the whole-tile path does. */
void stsa_run_pattern_tile(const stsa_attn_problem *pb, const stsa_tile_pattern *pat,
                           const float *kt, const float *vp, int64_t ld_panel, int rows,
                           int rows_pad, int n, int ld_s, stsa_tile_scratch *sc);

#endif
