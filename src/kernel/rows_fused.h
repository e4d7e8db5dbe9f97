/*
 * rows_fused.h — profiling rows in one pass: a few sampled query rows (one q
 * tile) against every key densely and under a few masks at once.
 *
 * Per kv tile, the tile is packed, Q.K^T is computed once and exponentiated
 * once against the dense row maximum, and those probabilities feed the
 * dense sums and every mask's sums (a mask's p are the dense ones on its
 * kept pairs, zeros elsewhere; its own row sum normalises them). K/V are
 * read once, tile by tile, while they sit in L2 (no packed head is written
 * out and read back per pass).
 *
 * The dense P.V of each tile is formed on its own first (the tile's sums,
 * then added to the dense rows), so a mask's row that keeps the whole tile
 * takes those sums with one add, and a P.V runs only for the rows that keep
 * part of it, a register tile of them at a time over the union of their
 * kept columns. Most pairs SVG's masks keep lie in tiles a row keeps whole
 * (the spatial one keeps whole frames, the temporal one runs of positions).
 *
 * A pass with no mask (dense rows alone) on bf16 tiles runs each kv tile as
 * the attention's bf16 engine runs a FULL one (kernels.h: full_tile_bf16).
 *
 * Shared maximum: a mask's weights are exp2(s - m) with m the dense row
 * maximum, not the mask's own. That is exact unless every logit the mask
 * keeps of a row lies more than 126 log2 units below m, where the weights
 * fall out of f32's range: the row then counts as keeping nothing (a zero
 * row) — a mask that far from dense attention loses to any other anyway.
 *
 * Non-finite values: the pass assumes finite logits and V (a kv tile whose
 * magnitudes could reach +-inf, or whose V holds NaN/Inf, or a q tile with
 * NaN/Inf). On such a tile it stops and says so; the caller then runs the
 * per-mask passes (sparse.h, stsa_rows_work), which carry stsa.h's rules.
 */
#ifndef STSA_KERNEL_ROWS_FUSED_H
#define STSA_KERNEL_ROWS_FUSED_H

#include "core/workspace.h"
#include "kernel/block_sparse.h"
#include "kernel/tile_loop.h"

enum { STSA_FUSED_MASKS_MAX = 3 };

/* A fused profiling call. pb: q holds the R sampled rows [1, R, H, D]
 * (q_tile >= R), k and v every key, out the dense rows [1, R, H, D]; its
 * kv_tile is the masks' structures' tile (fixed tiles, one q tile each). */
typedef struct stsa_rows_fused {
  const stsa_attn_problem *pb;
  int n;                                             /* masks, 0..MAX */
  const stsa_block_sparse *bs[STSA_FUSED_MASKS_MAX]; /* mask i's structure */
  /* Row order of mask i's P.V (NULL: q order): rows that keep similar
   * columns should sit together, as a register tile of rows computes the
   * union of its rows' kept columns. */
  const int32_t *order[STSA_FUSED_MASKS_MAX];
  const stsa_tensor *out[STSA_FUSED_MASKS_MAX]; /* mask i's rows, like pb->out */
  /* Masks per head (SVG2's): mask i of head h is bs_head[i][h] when
   * bs_head[i] is set (bs[i] then unused), and every mask of head h takes
   * the row order head_order[h] when head_order is set (order[] unused). */
  const stsa_block_sparse *const *bs_head[STSA_FUSED_MASKS_MAX];
  const int32_t *const *head_order;
  /* NULL: every head; else only the heads h with heads_on[h] run, the
   * others' rows (dense and every mask's) are stored as zeros: a recheck
   * profiles only the heads it still checks. */
  const uint8_t *heads_on;
} stsa_rows_fused;

/* Runs every head, threads taking whole heads, memory from ws. Returns
 * STSA_OK, or STSA_ERR_OUT_OF_MEMORY; *finite_ok is 0 when some head met a
 * tile outside the pass's assumptions (NaN/Inf, a V or K the tile loop
 * scales: then the outputs are incomplete and the caller must compute them
 * another way). */
stsa_status stsa_rows_fused_run(const stsa_rows_fused *f, int threads, stsa_workspace *ws,
                                int *finite_ok);

#endif
