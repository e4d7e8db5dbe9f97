/*
 * plan.h — the internal form of an stsa_plan, shared by the plan builder
 * (src/mask/) and the block-sparse kernel (src/kernel/sparse.c).
 *
 * Positions: q rows and kv rows are numbered in memory order (the plan's
 * q_order / kv_order); tile qt covers q positions [qt*q_tile, ...), tile kt
 * covers kv positions [kt*kv_tile, ...).
 */
#ifndef STSA_MASK_PLAN_H
#define STSA_MASK_PLAN_H

#include <stdatomic.h>
#include <stdint.h>

#include "stsa.h"

/* The kept columns of one partial tile, row by row, as half-open intervals
 * of tile-local columns [lo, hi), sorted and disjoint, 0 <= lo < hi <= n
 * (n = the tile's valid column count). */
typedef struct stsa_tile_pattern {
  int32_t rows;           /* q rows in this tile (the last q tile may be short) */
  const int32_t *row_ptr; /* [rows + 1], counted in INTERVALS: row r owns intervals
                            row_ptr[r] .. row_ptr[r+1]-1 */
  const uint16_t *iv;     /* interval i is [iv[2*i], iv[2*i+1]) */
} stsa_tile_pattern;

/* The block structure of one distinct mask (shared by every head that has it). */
typedef struct stsa_plan_part {
  const stsa_mask *mask; /* a reference, for NAIVE mode's per-pair evaluation */
  int64_t *tile_ptr;     /* [q_tiles + 1]: q tile qt's entries are [tile_ptr[qt],
                            tile_ptr[qt+1]) */
  int32_t *kv_tile;      /* [entries] kv tile index, ascending within a q tile */
  uint8_t *kind;         /* [entries] STSA_TILE_FULL (2) or STSA_TILE_PARTIAL (1) */
  int32_t *pattern;      /* [entries] pattern id for PARTIAL, -1 for FULL */
  int64_t entries;
  int64_t partial_entries;
  int64_t kept_pairs;              /* exact count of kept pairs */
  int64_t *rounded_kept;           /* [entries] kept pairs per entry (for TILE_ROUNDED) */
  int32_t patterns;                /* distinct partial patterns */
  stsa_tile_pattern *pattern_list; /* [patterns] */
} stsa_plan_part;

struct stsa_plan {
  /* plans are shared by the context's cache; references are taken under the
   * context (cache hits) and dropped from any thread (stsa_plan_free) */
  atomic_int refcount;
  int64_t s_q, s_kv, heads;
  int q_tile, kv_tile; /* q_tile is a multiple of 6 (STSA_MR), kv_tile of 16 */
  int64_t q_tiles, kv_tiles;
  stsa_order q_order, kv_order;
  stsa_geometry geometry; /* frames = 0 when none was given */
  int has_geometry;
  unsigned flags;
  int q_sampled;      /* built from q_rows: q/out/lse hold the s_q sampled rows,
                         in plan order, whatever the call's flags */
  int64_t *q_native;  /* [s_q] native index of q position (NULL: identity) */
  int64_t *kv_native; /* [s_kv] native index of kv position (NULL: identity) */
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
