/*
 * block_sparse.h — the block-sparse kernel's input, as plain data. The
 * layers above build it (src/mask turns a mask into it, one per distinct
 * mask, inside a plan) and the kernel only reads it: it never sees a mask,
 * a plan or a sparse mode. Kept apart from the tile loop's headers so that a builder
 * needs nothing of the kernel's loop, packing or scratch.
 *
 * Positions: q and kv positions are numbered in the order the structure was
 * built for (tile qt covers q positions [qt*q_tile, ...), tile kt kv
 * positions [kt*kv_tile, ...)); the token maps of a stsa_sparse_head say
 * which tensor row each position is.
 *
 * Variable tiles (SVG2's cluster rectangles): a structure may instead give
 * its own tile bounds, so that tiles follow cluster boundaries and every
 * visited tile is FULL, only with fewer rows or columns than q_tile x
 * kv_tile. Each kv tile is then packed at a panel boundary of its own
 * (kv_pack), so a ragged tile still needs no mask: its padding columns are
 * zero keys the softmax ignores.
 */
#ifndef STSA_KERNEL_BLOCK_SPARSE_H
#define STSA_KERNEL_BLOCK_SPARSE_H

#include <stdint.h>

#include "stsa.h"

/* A visited kv tile is STSA_TILE_FULL or STSA_TILE_PARTIAL (stsa.h's
 * stsa_tile_kind; empty tiles are never listed). */

/* The kept columns of one partial tile, row by row, as half-open intervals
 * of tile-local columns [lo, hi), sorted and disjoint, 0 <= lo < hi <= n
 * (n = the tile's valid column count). */
typedef struct stsa_tile_pattern {
  int32_t rows;           /* q rows in this tile (the last q tile may be short) */
  const int32_t *row_ptr; /* [rows + 1], counted in INTERVALS: row r owns intervals
                            row_ptr[r] .. row_ptr[r+1]-1 */
  const uint16_t *iv;     /* interval i is [iv[2*i], iv[2*i+1]) */
} stsa_tile_pattern;

/* The block structure of one mask: per q tile, its active kv tiles. */
typedef struct stsa_block_sparse {
  int64_t q_tiles;
  int64_t entries;
  int64_t *tile_ptr; /* [q_tiles + 1]: q tile qt's entries are [tile_ptr[qt],
                        tile_ptr[qt+1]) */
  int32_t *kv_tile;  /* [entries] kv tile index, ascending within a q tile */
  uint8_t *kind;     /* [entries] STSA_TILE_FULL or STSA_TILE_PARTIAL */
  int32_t *pattern;  /* [entries] index into pattern_list for PARTIAL, -1 for FULL */
  int32_t patterns;
  stsa_tile_pattern *pattern_list; /* [patterns] */
  /* Variable tiles; NULL / 0: the problem's fixed q_tile x kv_tile tiles.
   * Either layout may be variable alone. Tiles are never empty. */
  const int64_t *q_start;  /* [q_tiles + 1]: q tile qt covers q positions
                              [q_start[qt], q_start[qt+1]), 1..q_tile rows;
                              q_start[0] = 0, q_start[q_tiles] = S_q */
  int64_t kv_tiles;        /* kv tiles of kv_start (with kv_start only) */
  const int64_t *kv_start; /* [kv_tiles + 1]: kv tile kt covers kv positions
                              [kv_start[kt], kv_start[kt+1]), 1..kv_tile of them;
                              kv_start[0] = 0, kv_start[kv_tiles] = S_kv */
  const int64_t *kv_pack;  /* [kv_tiles + 1], with kv_start: kv tile kt's first
                              row in the packed K/V, a multiple of nr, and
                              kv_pack[kt+1] - kv_pack[kt] = its length rounded
                              up to nr or to the planner's alignment
                              (problem.h: stsa_kv_pack_align);
                              kv_pack[kv_tiles] = the packed length */
} stsa_block_sparse;

/* A partial tile's mask: sets s[r][c] = -inf for every dropped pair of query
 * rows r0..r0+rows-1 of the q tile that starts at position q0 (row r of s
 * is the tile's row r0 + r) and key positions k0..k0+n-1; `entry` is the
 * tile's index in its q tile's list (entry tile_ptr[qt] + entry of the
 * structure). The tile loop asks for a whole tile (r0 = 0), the reference
 * for one row at a time. */
typedef void (*stsa_mask_fn)(const void *mask_ctx, int64_t entry, int64_t q0, int r0,
                             int rows, int64_t k0, int n, float *s, int ld_s);

/* What one head of a block-sparse call follows. */
typedef struct stsa_sparse_head {
  const stsa_block_sparse *bs;
  const int64_t *q_rows;  /* q position -> row of q/out/lse (NULL: identity) */
  const int64_t *kv_rows; /* kv position -> row of k/v (NULL: identity) */
  /* The mask of PARTIAL tiles: NULL applies bs's stored patterns (exact);
   * a layer above may decide the pairs itself (e.g. a per-pair predicate). */
  stsa_mask_fn mask;
  const void *mask_ctx;
  int all_partial; /* treat every listed tile as PARTIAL (mask decides all) */
} stsa_sparse_head;

#endif
