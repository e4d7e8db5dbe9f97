/*
 * driver.h — runs an attention problem on the library's own threads: packs
 * K/V per head (only the kv tiles some q tile uses), then hands out
 * (batch, head, q tile) units, the most expensive first, to whichever thread
 * is free. Each unit's rows are computed in a fixed order, so the output does
 * not depend on which thread ran what.
 */
#ifndef STSA_KERNEL_DRIVER_H
#define STSA_KERNEL_DRIVER_H

#include "core/workspace.h"
#include "kernel/tile_loop.h"

/* Per-thread room for one unit's kv list, filled by a work source. */
typedef struct stsa_unit_buf {
  int32_t *tiles; /* [kv_tiles] */
  uint8_t *kinds; /* [kv_tiles] */
  int32_t *ids;   /* [kv_tiles] a per-entry id for the source's mask function */
  const void *ud; /* the work source's user data */
  int64_t head;   /* b * H + h of the unit */
  int64_t qt;     /* q tile of the unit */
} stsa_unit_buf;

/* Where the units' kv lists come from. NULL everywhere means dense. */
typedef struct stsa_work_source {
  /* Fills `list` (it may point into `buf`) for q tile qt of `head`. */
  void (*unit)(const void *ud, int64_t head, int64_t qt, stsa_unit_buf *buf,
               stsa_kv_list *list);
  /* Relative cost of a unit (its visited tile count). */
  int64_t (*cost)(const void *ud, int64_t head, int64_t qt);
  /* [kv_tiles] flags of the kv tiles a head needs packed; NULL means all. */
  const uint8_t *(*used_tiles)(const void *ud, int64_t head);
  /* kv position -> token row for a head (NULL: identity), see stsa_pack_kv_tile. */
  const int64_t *(*kv_rows)(const void *ud, int64_t head);
  const void *ud;
} stsa_work_source;

/* Runs the problem with `threads` threads; src NULL runs dense attention.
 * Packed K/V live in `ws` (kept by the caller across calls). Allocates
 * everything before writing any output; returns STSA_ERR_OUT_OF_MEMORY (and
 * writes nothing) when that fails. */
stsa_status stsa_drive(const stsa_attn_problem *pb, int threads,
                       const stsa_work_source *src, stsa_workspace *ws);

#endif
