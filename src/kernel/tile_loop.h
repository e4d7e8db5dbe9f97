/*
 * tile_loop.h — the flash-attention loop shared by the dense and the
 * block-sparse kernels: one q tile over its list of kv tiles (online
 * softmax), each kv tile handed to the engine that computes it (tile_f32.h,
 * tile_bf16.h, tile_spans.h). The problem, the packed K/V and the scratch
 * it runs on are in problem.h, kv_pack.h and tile_scratch.h.
 */
#ifndef STSA_KERNEL_TILE_LOOP_H
#define STSA_KERNEL_TILE_LOOP_H

#include <stdint.h>

#include "kernel/kv_pack.h"
#include "kernel/problem.h"
#include "kernel/tile_list.h"
#include "kernel/tile_scratch.h"

/* Computes q tile `qt` of (b, h) over the listed kv tiles and writes its
 * output rows (and lse), with the non-finite semantics of stsa.h: a NaN or
 * +inf logit leaves the row sum NaN (the micro-kernels' exp2 propagates NaN),
 * which stsa_store_q_tile turns into a NaN row. Two cases need the tile loop's help,
 * and only they, so the finite fast path is unchanged: on a tile where a kept
 * logit may be -inf (non-finite q or K, or magnitudes near f32 overflow) the
 * -inf scores are marked kept before the mask runs, and on a PARTIAL tile
 * whose V holds NaN/Inf, dropped keys' V is kept out of P.V (0 * NaN). */
void stsa_run_q_tile(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                     int64_t h, int64_t qt, const stsa_kv_list *list,
                     stsa_tile_scratch *sc);
/* The same on variable tiles: q tile qt and the listed kv tiles of `lay`
 * (NULL: fixed), kv tiles packed at lay->kv_pack. */
void stsa_run_q_tile_in(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                        int64_t h, int64_t qt, const stsa_kv_list *list,
                        const stsa_tile_layout *lay, stsa_tile_scratch *sc);

#endif
