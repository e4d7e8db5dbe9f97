/*
 * plan.h — the internal form of an stsa_plan, built and read by the mask
 * layer (src/mask) and SVG (src/svg). The kernel reads only the block
 * structure each part embeds (part->bs, kernel/block_sparse.h).
 *
 * Positions: q rows and kv rows are numbered in memory order (the plan's
 * q_order / kv_order); tile qt covers q positions [qt*q_tile, ...), tile kt
 * covers kv positions [kt*kv_tile, ...).
 */
#ifndef STSA_MASK_PLAN_H
#define STSA_MASK_PLAN_H

#include <stdatomic.h>
#include <stdint.h>

#include "kernel/block_sparse.h"
#include "stsa.h"

/* The block structure of one distinct mask (shared by every head that has it). */
typedef struct stsa_plan_part {
  const stsa_mask *mask; /* a reference, for NAIVE mode's per-pair evaluation */
  stsa_block_sparse bs;  /* what the kernel reads */
  int64_t partial_entries;
  int64_t kept_pairs;    /* exact count of kept pairs */
  int64_t *rounded_kept; /* [bs.entries] kept pairs per entry (for TILE_ROUNDED) */
} stsa_plan_part;

struct stsa_plan {
  /* plans are shared by the context's cache; references are taken under the
   * context (cache hits) and dropped from any thread (stsa_plan_free) */
  atomic_int refcount;
  int64_t s_q, s_kv, heads;
  int q_tile, kv_tile; /* multiples of the building context's kernel mr and nr */
  int64_t q_tiles, kv_tiles;
  stsa_order q_order, kv_order;
  stsa_geometry geometry; /* frames = 0 when none was given */
  int has_geometry;
  unsigned flags;
  int q_sampled;     /* built from q_rows: q/out/lse hold the s_q sampled rows,
                        in plan order, whatever the call's flags */
  int64_t *q_native; /* [s_q] native index of q position (NULL: identity) */
  /* [s_kv] row of k/v that kv position holds (NULL: identity), what the
   * kernel gathers: the native index for a plan over every key, the index
   * into kv_rows for a plan over a subset (stsa_plan_desc.kv_rows) */
  int64_t *kv_native;
  /* [s_kv] native token of kv position (NULL: identity), what the mask is
   * asked about; the same array as kv_native but for subset plans */
  int64_t *kv_token;
  int kv_subset; /* built from kv_rows: k/v hold the s_kv subset rows only */
  int32_t parts_count;
  stsa_plan_part *parts; /* [parts_count] distinct masks */
  int32_t *head_part;    /* [heads] index into parts */
  void *arena_;          /* builder-owned storage */
};

/* Plan cache held by a context: plans keyed by a canonical signature of their
 * description (mask structure and parameters, lengths, orders, tiles, flags). */
typedef struct stsa_plan_cache stsa_plan_cache;
void stsa_plan_cache_destroy(stsa_plan_cache *cache);

/* Takes one more reference. */
static inline stsa_plan *stsa_plan_ref(stsa_plan *plan) {
  atomic_fetch_add_explicit(&plan->refcount, 1, memory_order_relaxed);
  return plan;
}

#endif
