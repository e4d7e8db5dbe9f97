/*
 * tile_f32.h — the f32 tile engine: kv tiles on the table's f32
 * micro-kernels (qk, softmax, pv and their pairs), on the f32 K^T and V
 * panels of the pack and the q tile's scaled rows (tile_rows.h). A FULL
 * tile runs one block of mr rows at a time; a PARTIAL one under a stored
 * pattern only where the pattern keeps keys (tile_spans.h), else tile-wide
 * with its mask, and with the help non-finite values need (an unsafe
 * tile's -inf logits marked kept, a NaN/Inf V kept out of dropped pairs);
 * runs of short variable tiles share one score buffer (merged runs) and
 * their tails are computed together at the q tile's end.
 */
#ifndef STSA_KERNEL_TILE_F32_H
#define STSA_KERNEL_TILE_F32_H

#include <stdint.h>

#include "kernel/kv_pack.h"
#include "kernel/problem.h"
#include "kernel/tile_list.h"
#include "kernel/tile_scratch.h"

/* One visit: FULL (v->list NULL) or PARTIAL. */
void stsa_run_tile_f32(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                       const stsa_tile_visit *v, stsa_tile_scratch *sc);

/* The tile-wide steps of a PARTIAL tile, which the fused profiling pass
 * (rows_fused.c) takes too. Q.K^T of npanels K^T panels (kt) for q rows
 * [0, rows_pad) (q, D apart) into s (ld_s apart), panel outer and row block
 * inner: the K^T panel (D x nr) stays in L1 while the q rows stream from
 * L2. tile_max (rows_pad) starts at -inf and takes the folded row maxima. */
void stsa_tile_qk_f32(const stsa_attn_problem *pb, const float *q, const float *kt,
                      int npanels, int rows_pad, float *s, int ld_s, float *tile_max);
/* o (rows_pad x D_pad) = alpha o + P.V of the probabilities s over n keys,
 * V panels at vp, ld_panel rows apart. */
void stsa_tile_pv_f32(const stsa_attn_problem *pb, const float *s, int ld_s, int n,
                      const float *vp, int64_t ld_panel, int rows_pad, float *o,
                      const float *alpha);

/* The tails (the keys past a tile's whole panels) of a q tile's merged
 * runs, kept across the runs and computed as runs of their own when they
 * fill kv_tile columns or STSA_MAX_RUN_TILES tiles, and at the q tile's end:
 * they pad once per ~kv_tile tail keys. A run that took its own tails
 * padded once per run (~4 a q tile at Wan 480p, 1.7% of the pairs
 * computed). */
typedef struct stsa_tail_spans {
  stsa_kv_span sp[STSA_MAX_RUN_TILES];
  int64_t count;
  int keys;
} stsa_tail_spans;

/* Variable tiles: the whole panels of a run of listed FULL, safe tiles,
 * entries [i0, i1) (one tile too), computed as one tile of their columns
 * (one softmax, one P.V sum); their tails go to ts. */
void stsa_run_merged_f32(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                         const stsa_kv_list *list, const int64_t *kv_start,
                         const int64_t *kv_pack, int64_t i0, int64_t i1, int rows,
                         int rows_pad, stsa_tail_spans *ts, stsa_tile_scratch *sc);
/* The tails held in ts as one run; ts is then empty. */
void stsa_run_tails_f32(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                        stsa_tail_spans *ts, int rows, int rows_pad,
                        stsa_tile_scratch *sc);

#endif
