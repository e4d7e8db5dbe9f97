/*
 * tile_bf16.h — the bf16 tile engine: kv tiles of a problem with bf16 tiles
 * (stsa_problem_use_bf16_tiles) through the table's full_tile_bf16 and
 * full_run_bf16 (kernels.h: stsa_bf16_tile), on the bf16 K and V blocks of
 * the pack and the q tile's bf16 rows (tile_rows.h). Every tile of such a
 * problem comes here, FULL or PARTIAL; a PARTIAL tile whose V holds NaN/Inf
 * has its V blocks screened first (0 * NaN must not reach a dropped pair).
 */
#ifndef STSA_KERNEL_TILE_BF16_H
#define STSA_KERNEL_TILE_BF16_H

#include <stdint.h>

#include "kernel/kv_pack.h"
#include "kernel/problem.h"
#include "kernel/tile_list.h"
#include "kernel/tile_scratch.h"

/* One visit through full_tile_bf16: FULL (v->list NULL) or PARTIAL, with
 * the columns each 32-row pass keeps when a stored pattern is the mask
 * (v->pattern; NULL: every column). */
void stsa_run_tile_bf16(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                        const stsa_tile_visit *v, stsa_tile_scratch *sc);

/* A merged run of FULL, safe variable tiles, list entries [i0, i1), through
 * full_run_bf16: one softmax and one P.V sum for them all, as
 * stsa_run_merged_f32 does on the f32 kernels. */
void stsa_run_merged_bf16(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          const stsa_kv_list *list, const int64_t *kv_start,
                          const int64_t *kv_pack, int64_t i0, int64_t i1, int rows,
                          int rows_pad, stsa_tile_scratch *sc);

#endif
