/*
 * problem.h — one attention call after validation (the problem every kernel
 * trusts), how it is built and fit to a plan's layouts, what it records as
 * having run, and the tile arithmetic of its q and kv tiles.
 */
#ifndef STSA_KERNEL_PROBLEM_H
#define STSA_KERNEL_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/block_sparse.h"
#include "kernel/kernels.h"
#include "stsa.h"

/* One attention call after validation; every field is trusted by kernels. */
typedef struct stsa_attn_problem {
  const stsa_tensor *q, *k, *v, *out;
  float *lse;   /* optional [B, H, S_q] */
  double scale; /* the softmax scale */
  /* scale * log2(e): q rows are loaded times it (times 2^-k_exp of their
   * head, stsa_kv_packed), so scores come out in log2 units. */
  float qscale;
  /* 1 where scale * log2(e) > 1 would carry some q of the call past f32's
   * range: each head then moves 2^k_exp of the scale from q to its K
   * (stsa_kv_k_exp); 0 for every other call (stsa_problem_init). */
  int k_fit;
  int64_t B, H, Sq, Skv;
  int D;       /* head dim */
  int mr, nr;  /* the kernel table's register tile (kernels.h) */
  int D_pad;   /* D rounded up to a multiple of nr */
  int q_tile;  /* rows per q tile (a multiple of mr) */
  int kv_tile; /* rows per kv tile (a multiple of nr) */
  /* Packed rows of a fixed kv tile, and the key width of the tile scratch
   * (scores, probabilities, a merged run's columns): kv_tile, or with bf16
   * tiles kv_tile rounded up to STSA_BF16_KEY_BLOCK (a 240-key tile packs as
   * 256, its last block's 16 keys zeros: P.V reduces over whole 32-key
   * blocks; a variable tile of up to 48 keys spans up to 64 packed rows) */
  int kv_stride;
  int64_t Skv_pad; /* packed K/V rows: the fixed tiles times kv_stride, or the
                      longest packed layout (stsa_problem_fit_layouts) */
  /* Variable tiles (block_sparse.h): the most q / kv tiles a head of the
   * call has, which size the units and the per-tile arrays; 0 when every
   * head has the fixed tiles. */
  int64_t q_tiles_max, kv_tiles_max;
  /* Variable tiles whose packed spans all start on multiples of
   * STSA_BF16_KEY_BLOCK (plans built with stsa_kv_pack_align for a call the
   * bf16 tiles take): they may take bf16 tiles. */
  int spans_bf16_aligned;
  /* With variable tiles: 1 when some head has the fixed kv tiles (q tiles
   * only variable), whose packed rows kv_stride also sizes. */
  int fixed_kv_heads;
  const stsa_kernels *kern;
  /* Every kv tile goes through kern->full_tile_bf16 (stsa_problem_use_
   * bf16_tiles): K and V are then packed as bf16 blocks only, no f32
   * panels (stsa_kv_packed), and q tiles also kept as bf16 rows D32 long
   * (D rounded up to 32). */
  int bf16_tiles, D32;
  int bf16_terms; /* kernels.h: stsa_bf16_tile.terms */
  /* qscale = bf16_q_pow2 * bf16_score_scale: the largest power of two not
   * above qscale, which the bf16 q rows carry (exact in bf16), and the rest,
   * applied to the scores (kernels.h: stsa_bf16_tile) */
  float bf16_q_pow2, bf16_score_scale;
} stsa_attn_problem;

/* Fills a problem from validated arguments and context settings; q_tile is
 * rounded up to a multiple of kern->mr, kv_tile must be one of kern->nr. */
void stsa_problem_init(stsa_attn_problem *pb, const stsa_tensor *q, const stsa_tensor *k,
                       const stsa_tensor *v, const stsa_tensor *out,
                       const stsa_attn_opts *opts, int q_tile, int kv_tile,
                       const stsa_kernels *kern);

/* The power of two of qscale that head (b, h) of q must move onto K so
 * that none of its q times qscale leaves f32's range (stsa_kv_k_exp); 0
 * where it fits, and for a head holding NaN or Inf. */
int stsa_head_q_exp(const stsa_tensor *q, const stsa_kernels *kern, int64_t b, int64_t h,
                    double qscale);

/* The multiple of keys at which a plan of variable kv tiles must start
 * each tile's packed span (block_sparse.h: kv_pack) for a call on q, k and
 * v of these dtypes on kern: STSA_BF16_KEY_BLOCK where the bf16 tiles take
 * the call, else the panel width nr. Planners ask it and know no kernel's
 * blocks. */
int stsa_kv_pack_align(const stsa_kernels *kern, stsa_dtype q, stsa_dtype k,
                       stsa_dtype v);

/* Every tile of pb, FULL or PARTIAL, goes through kern->full_tile_bf16
 * where the table has it, Q, K and V are bf16, and the kv tiles are fixed
 * or variable of any multiple of nr (kv_stride pads the scratch, and fixed
 * tiles' packing, to 32-key blocks), a variable plan's spans on 32-key
 * blocks (stsa_kv_pack_align), with `terms` bf16 terms per probability
 * (STSA_PARAM_PV_PRECISION: its number, AUTO by the output's dtype). All of a call's
 * tiles or none: so no call mixes the f32 and the bf16 arithmetic, a mask that keeps a
 * whole tile gives the FULL tile's bytes, and every row's result stays independent of the
 * other rows' values. Call after stsa_problem_fit_layouts, before sizing packs and
 * scratch. */
void stsa_problem_use_bf16_tiles(stsa_attn_problem *pb, stsa_pv_precision precision);

/* What pb's tiles run, after stsa_problem_use_bf16_tiles: the arithmetic
 * (f64 when `ref`), the bf16 terms, and why not the bf16 tiles when the
 * table has them (stsa.h: stsa_run_info; backend left to the caller). */
void stsa_problem_run_info(const stsa_attn_problem *pb, int ref, stsa_run_info *info);
/* Records that on ctx (stsa_ctx_last_run): after a call of pb succeeded. */
void stsa_problem_record_run(const stsa_attn_problem *pb, const struct stsa_ctx *ctx);

/* Sizes pb for the heads' layouts: with some variable tiles, the unit count,
 * the per-tile arrays and the pack become the maximum over the heads (every
 * head of a call packs into the same slice). Nothing changes when every
 * head has the fixed tiles. Call after stsa_problem_init. */
void stsa_problem_fit_layouts(stsa_attn_problem *pb, const stsa_sparse_head *heads,
                              int64_t H);

/* What a call's problem is built from (stsa_problem_build). */
typedef struct stsa_problem_args {
  const stsa_tensor *q, *k, *v, *out; /* validated */
  const stsa_attn_opts *opts;         /* scale and lse; NULL: 1/sqrt(D), no lse */
  int q_tile, kv_tile;                /* as stsa_problem_init takes them */
  /* [q->shape[2]] the heads' structures, whose variable tiles size the
   * problem (stsa_problem_fit_layouts); NULL: every head has fixed tiles */
  const stsa_sparse_head *heads;
  /* 1: f32 tiles whatever the table and the dtypes, for the profiling
   * rows (the fused pass reads f32 panels); 0: bf16 tiles where they apply
   * (stsa_problem_use_bf16_tiles, with the context's pv_precision) */
  int f32_tiles;
} stsa_problem_args;

/* The problem of a call on ctx's backend: stsa_problem_init, then
 * stsa_problem_fit_layouts and stsa_problem_use_bf16_tiles as args ask, in
 * that order. */
void stsa_problem_build(stsa_attn_problem *pb, const struct stsa_ctx *ctx,
                        const stsa_problem_args *args);

/* q tiles (units per head) and kv tiles of the problem: fixed, or the most
 * of any head (stsa_problem_fit_layouts). */
static inline int64_t stsa_q_tiles(const stsa_attn_problem *pb) {
  return pb->q_tiles_max ? pb->q_tiles_max : (pb->Sq + pb->q_tile - 1) / pb->q_tile;
}
static inline int64_t stsa_kv_tiles(const stsa_attn_problem *pb) {
  return pb->kv_tiles_max ? pb->kv_tiles_max : (pb->Skv + pb->kv_tile - 1) / pb->kv_tile;
}

/* Where one kv tile lies: positions [k0, k0 + n), packed rows [pack0,
 * pack0 + len) (len >= n; rows past n are zeros). */
typedef struct stsa_kv_span {
  int64_t k0, pack0;
  int n, len;
} stsa_kv_span;

/* kv tile kt of a layout (kv_start, kv_pack as in block_sparse.h; NULL:
 * pb's fixed tiles, kv_tile positions each, packed kv_stride rows apart). */
static inline stsa_kv_span stsa_kv_span_of(const stsa_attn_problem *pb,
                                           const int64_t *kv_start,
                                           const int64_t *kv_pack, int64_t kt) {
  stsa_kv_span sp;
  if (kv_start) {
    sp.k0 = kv_start[kt];
    sp.pack0 = kv_pack[kt];
    sp.n = (int)(kv_start[kt + 1] - sp.k0);
    sp.len = (int)(kv_pack[kt + 1] - sp.pack0);
  } else {
    sp.k0 = kt * pb->kv_tile;
    sp.pack0 = kt * pb->kv_stride;
    sp.n = (int)(pb->Skv - sp.k0 < pb->kv_tile ? pb->Skv - sp.k0 : pb->kv_tile);
    sp.len = pb->kv_stride;
  }
  return sp;
}

/* q tile qt's first position and rows (q_start as in block_sparse.h; NULL:
 * pb's fixed tiles). */
static inline int stsa_q_rows_of(const stsa_attn_problem *pb, const int64_t *q_start,
                                 int64_t qt, int64_t *q0) {
  if (q_start) {
    *q0 = q_start[qt];
    return (int)(q_start[qt + 1] - q_start[qt]);
  }
  *q0 = qt * pb->q_tile;
  return (int)(pb->Sq - *q0 < pb->q_tile ? pb->Sq - *q0 : pb->q_tile);
}

#endif
