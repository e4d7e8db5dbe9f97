/*
 * tile_list.h — what one q tile visits: its list of kv tiles (with their
 * kinds, the mask of PARTIAL ones and the token orders) and the layout of
 * variable tiles beside it.
 */
#ifndef STSA_KERNEL_TILE_LIST_H
#define STSA_KERNEL_TILE_LIST_H

#include <stdint.h>

#include "kernel/block_sparse.h"
#include "kernel/problem.h"

/* A q tile's list of kv tiles to visit, in order. NULL tiles = all, FULL. */
typedef struct stsa_kv_list {
  const int32_t *tiles; /* kv tile indices */
  const uint8_t *kinds; /* stsa_tile_kind per entry */
  int32_t count;
  stsa_mask_fn mask; /* called for PARTIAL tiles */
  const void *mask_ctx;
  const int64_t *q_rows;  /* q position -> token row of q/out/lse (NULL: identity) */
  const int64_t *kv_rows; /* kv position -> row of k/v (NULL: identity); packing has
                             applied it, the reference reads it */
} stsa_kv_list;

/* What a head's structure says beside its list (block_sparse.h): its
 * variable tiles (NULL: pb's fixed ones), and the stored patterns of its
 * PARTIAL entries when they are the list's mask (NULL: only the mask is
 * known), list entry i keeping patterns[pattern[i]]; with them the tile
 * loop skips what a pattern drops whole (tile_spans.h), while the reference
 * asks the mask, which must say the same. Apart from stsa_kv_list, which
 * callers fill positionally. */
typedef struct stsa_tile_layout {
  const int64_t *q_start, *kv_start, *kv_pack;
  const int32_t *pattern;
  const stsa_tile_pattern *patterns;
} stsa_tile_layout;

/* One visit of a kv tile by a q tile, as a tile engine takes it (tile_f32.h,
 * tile_bf16.h): where the kv tile lies, the q tile's rows, and for a
 * PARTIAL tile the mask that decides its pairs. */
typedef struct stsa_tile_visit {
  stsa_kv_span sp;
  int64_t tile; /* the kv tile's index in the packed head (k_max, v_max, ...) */
  int variable; /* sp is a variable tile (its head's layout has kv_start) */
  int rows;     /* the q tile's rows, */
  int rows_pad; /* and rounded up to a multiple of mr */
  /* 1 when no logit of the (q tile, kv tile) pair can be NaN or +-inf
   * (tile_values.h: LOGIT_SAFE) */
  int safe;
  /* PARTIAL tiles only (list NULL for a FULL one): list entry `entry` of
   * the q tile starting at position q0 decides the pairs through
   * list->mask; pattern, when set, is that mask as a stored pattern
   * (tile_spans.h) */
  const stsa_kv_list *list;
  int64_t entry, q0;
  const stsa_tile_pattern *pattern;
} stsa_tile_visit;

#endif
