/*
 * block_sparse.h — the vocabulary of the block-sparse kernel that the layers
 * above it (the plan builder in src/mask) build for it: how an active kv tile
 * of a q tile is treated. Kept apart from tile_loop.h so that a plan builder
 * needs nothing of the kernel's loop, packing or scratch.
 */
#ifndef STSA_KERNEL_BLOCK_SPARSE_H
#define STSA_KERNEL_BLOCK_SPARSE_H

/* How a visited kv tile is treated (empty tiles are never listed). */
typedef enum stsa_tile_kind {
  STSA_TILE_FULL = 2,    /* every pair kept: mask-free body */
  STSA_TILE_PARTIAL = 1, /* some pairs kept: the mask callback runs */
} stsa_tile_kind;

#endif
