/*
 * sparse.h — the block-sparse kernel (the Splash kernel on CPU): every head
 * follows a stsa_sparse_head (block_sparse.h). Each (batch, head, q tile)
 * unit walks its compact list of active kv tiles: FULL tiles run exactly the
 * dense body, PARTIAL tiles additionally apply their mask, and nothing else
 * is packed, loaded or computed. Arguments must be validated by the caller
 * (src/mask/sparse_call.c, src/svg); nothing here knows masks or plans.
 */
#ifndef STSA_KERNEL_SPARSE_H
#define STSA_KERNEL_SPARSE_H

#include "kernel/block_sparse.h"
#include "kernel/schedule.h"

/* The state a sparse work reads; lives as long as the work. */
typedef struct stsa_sparse_run {
  const stsa_attn_problem *pb;
  const stsa_sparse_head *heads; /* [pb->H]: every batch entry follows the same */
} stsa_sparse_run;

/* The work of block-sparse attention of pb, head h following heads[h].
 * Every bs must have pb's tile sizes (variable tiles at most that big), a
 * fixed-tile bs also pb's q tile count, and pb must be fit to the heads'
 * layouts (stsa_problem_fit_layouts). */
stsa_work stsa_sparse_work(stsa_sparse_run *run, const stsa_attn_problem *pb,
                           const stsa_sparse_head *heads, int ref);

/* Profiling: a few sampled query rows (one q tile: pb[i]->q_tile >= rows)
 * against several structures at once. Head h's K/V is packed once and q
 * tile 0 is run against each bs[i], writing pb[i]'s output. */
enum { STSA_ROWS_MAX = 4 };
typedef struct stsa_rows_run {
  const stsa_attn_problem *pb[STSA_ROWS_MAX];
  const stsa_block_sparse *bs[STSA_ROWS_MAX];
  /* optional per head: head h runs against bs_of_head[i][h] instead of bs[i]
   * (SVG2 profiles every head under its own clusters in one pass) */
  const stsa_block_sparse *const *bs_of_head[STSA_ROWS_MAX];
  int n;
} stsa_rows_run;
stsa_work stsa_rows_work(const stsa_rows_run *run, int ref);

#endif
