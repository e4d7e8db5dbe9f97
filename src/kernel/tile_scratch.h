/*
 * tile_scratch.h — the per-thread working memory of one q tile, planned from
 * the problem up front (the caller owns it; nothing is allocated per tile).
 */
#ifndef STSA_KERNEL_TILE_SCRATCH_H
#define STSA_KERNEL_TILE_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/problem.h"

/* Per-thread working memory for one q tile. */
typedef struct stsa_tile_scratch {
  float *q;             /* [q_tile][D], pre-scaled */
  float *s;             /* [q_tile][kv_stride] scores, then probabilities */
  float *o;             /* [q_tile][D_pad] unnormalised output */
  float *m, *l, *alpha; /* [q_tile] row max (log2 units), row sum, rescale */
  float *tile_max;      /* [q_tile] row max of the current kv tile's scores */
  float *row;           /* [D_pad] output row staging */
  float *ones;          /* [mr] 1: the pv rescale of a merged run's later tiles */
  /* Variable tiles only: a merged run's tails side by side (tile_f32.c:
   * merged_cols), as K^T panels [kv_tile / nr][D][nr] and V panels
   * [D_pad / nr][kv_tile][nr] */
  float *kt_tails, *vp_tails;
  /* ... and with pb->bf16_tiles (the f32 ones then NULL), as K panels
   * [kv_tile / 16][D32 / 32][512] and V blocks [D_pad / 16][kv_tile / 32][512]
   * (kernels.h: stsa_bf16_tile) */
  uint16_t *kb_tails, *vb_tails;
  float q_max; /* max |element| of the scaled q tile; +inf if NaN/Inf */
  /* Only for a PARTIAL tile whose V holds NaN/Inf: */
  float *v_safe;     /* [D_pad/nr][kv_tile][nr] its V panels, NaN/Inf -> 0 */
  int32_t *bad_keys; /* [kv_tile] its keys with a NaN/Inf in V */
  uint8_t *kept;     /* [q_tile][kv_tile] row r keeps bad_keys[b] */
  /* Only for a PARTIAL tile with a stored pattern (tile_spans.h): */
  int32_t *span; /* [2 q_tile / mr] row block i keeps columns [span[2i], span[2i+1]) */
  /* Only with pb->bf16_tiles (kernels.h: stsa_bf16_tile): */
  uint16_t *qb;      /* [q_tile][D32] the q tile's bf16 rows, unscaled */
  uint16_t *pbf;     /* [3][32][kv_stride] a pass's probabilities, hi, mid, lo */
  float *cbuf;       /* [32][D_pad] tile multiplies' sums (32: STSA_BF16_PASS_ROWS) */
  uint16_t *vb_safe; /* [D_pad/16][kv_stride/32][512] a PARTIAL tile's V blocks,
                        NaN/Inf -> 0 */
  void *block_;      /* the allocation of stsa_tile_scratch_alloc, else NULL */
} stsa_tile_scratch;

/* Bytes of one scratch (a multiple of 64), and a scratch laid out in `mem`
 * (64-byte aligned, that long). */
size_t stsa_tile_scratch_bytes(const stsa_attn_problem *pb);
void stsa_tile_scratch_at(const stsa_attn_problem *pb, void *mem, stsa_tile_scratch *sc);
/* The same in its own allocation: 0 on success, -1 when out of memory. */
int stsa_tile_scratch_alloc(const stsa_attn_problem *pb, stsa_tile_scratch *sc);
void stsa_tile_scratch_free(stsa_tile_scratch *sc);

#endif
