/*
 * tile_loop.h — the flash-attention framework shared by the dense and the
 * block-sparse kernels: a validated problem, K/V packing, per-thread scratch,
 * and the loop over one q tile's kv tiles (online softmax).
 */
#ifndef STSA_KERNEL_TILE_LOOP_H
#define STSA_KERNEL_TILE_LOOP_H

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
  int D;           /* head dim */
  int mr, nr;      /* the kernel table's register tile (kernels.h) */
  int D_pad;       /* D rounded up to a multiple of nr */
  int q_tile;      /* rows per q tile (a multiple of mr) */
  int kv_tile;     /* rows per kv tile (a multiple of nr) */
  int64_t Skv_pad; /* packed K/V rows: S_kv rounded up to a multiple of kv_tile,
                      or the longest packed layout (stsa_problem_fit_layouts) */
  /* Variable tiles (block_sparse.h): the most q / kv tiles a head of the
   * call has, which size the units and the per-tile arrays; 0 when every
   * head has the fixed tiles. */
  int64_t q_tiles_max, kv_tiles_max;
  /* Variable tiles whose packed spans all start on multiples of
   * STSA_BF16_KEY_BLOCK (plans built for a backend with bf16 tiles): they
   * may take bf16 tiles. */
  int spans_bf16_aligned;
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

/* Every tile of pb, FULL or PARTIAL, goes through kern->full_tile_bf16
 * where the table has it, Q, K and V are bf16, kv tiles are multiples of 32
 * keys and fixed (variable tiles run the f32 path), with `terms` bf16 terms
 * per probability (STSA_PARAM_BF16_TERMS; 0: by the output's dtype). All of
 * a call's tiles or none: so no call mixes the f32 and the bf16
 * arithmetic, a mask that keeps a whole tile gives the FULL tile's bytes,
 * and every row's result stays independent of the other rows' values.
 * Call after stsa_problem_fit_layouts, before sizing packs and scratch. */
void stsa_problem_use_bf16_tiles(stsa_attn_problem *pb, int terms);

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
 * pb's fixed tiles, packed at their positions, kv_tile rows each). */
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
    sp.k0 = sp.pack0 = kt * pb->kv_tile;
    sp.n = (int)(pb->Skv - sp.k0 < pb->kv_tile ? pb->Skv - sp.k0 : pb->kv_tile);
    sp.len = pb->kv_tile;
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

/* K and V of one (batch, head), packed (layouts in kernels.h), and what
 * packing learnt about each kv tile's values (see stsa_run_q_tile). */
typedef struct stsa_kv_packed {
  float *kt;            /* [Skv_pad/nr][D][nr]; NULL with pb->bf16_tiles */
  float *vp;            /* [D_pad/nr][Skv_pad][nr]; NULL with pb->bf16_tiles */
  float *k_max;         /* [kv tiles] max |K element| of the tile; +inf if NaN/Inf */
  float *v_max;         /* [kv tiles] max |V element| of the tile; +inf if NaN/Inf */
  uint8_t *v_nonfinite; /* [kv tiles] 1 if a V row of the tile holds NaN or Inf */
  /* V is packed times 2^-v_exp and the rows stored times 2^v_exp
   * (stsa_kv_fit_v_range); 0 for every V whose P.V sums cannot overflow */
  int v_exp;
  /* q rows of this head are loaded times 2^-k_exp and K packed times
   * 2^k_exp (stsa_kv_k_exp); 0 unless pb->k_fit */
  int k_exp;
  /* Only with pb->bf16_tiles (else NULL), in 1 KB blocks of 16 x 32 bf16
   * (kernels.h: stsa_bf16_tile):
   *   kb[(r / 16) D32 / 32 + d / 32][(d % 32) / 2][r % 16][d % 2] = K[r][d]
   *   vb[j][r / 32][(r % 32) / 2][c][r % 2] = V[r][16 j + c], j < D_pad / 16 */
  uint16_t *kb, *vb;
} stsa_kv_packed;

/* Floats needed by one packed (batch, head). */
size_t stsa_kv_packed_floats(const stsa_attn_problem *pb);
/* Points a packed view at `mem` (64-byte aligned, stsa_kv_packed_floats long). */
stsa_kv_packed stsa_kv_packed_at(const stsa_attn_problem *pb, float *mem);
/* Packs kv tile `tile` of (b, h), a fixed tile; rows past S_kv become zeros.
 * Position r of the tile order holds token kv_rows[r] of the tensors (NULL:
 * token r), which fuses a token permutation into packing. */
void stsa_pack_kv_tile(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t tile,
                       const int64_t *kv_rows, stsa_kv_packed *dst);
/* The same for kv tile `tile` lying at `sp` (stsa_kv_span_of): positions
 * [k0, k0 + n) at packed rows pack0.., zeros up to pack0 + len. */
void stsa_pack_kv_span(const stsa_attn_problem *pb, int64_t b, int64_t h, int64_t tile,
                       const stsa_kv_span *sp, const int64_t *kv_rows,
                       stsa_kv_packed *dst);

/* The finite range of V. A row's P.V sum adds weights of at most 1 (of at
 * most kv_tile a tile on the lazy bf16 path, so again at most one a key)
 * times V: no partial sum passes S_kv_pad max|V|, and below V_SUM_LIMIT
 * none overflows f32. A head whose V reaches further (values near FLT_MAX,
 * which the output itself holds: it is a weighted mean of V) has its packed
 * V scaled down by a power of two, exactly, and its rows scaled back at the
 * store. */
#define STSA_V_SUM_LIMIT 0x1p126
/* The exponent v_exp for V values up to v_max (+inf: NaN/Inf, which follow
 * stsa.h's rules unscaled: 0). */
int stsa_v_exp_for(const stsa_attn_problem *pb, float v_max);
/* After every kv tile a head visits is packed (used[t] != 0, or all when
 * used is NULL): the head's v_exp from the tiles' v_max. The caller then
 * scales each visited tile (stsa_kv_scale_v_span) when it is not 0. */
int stsa_kv_v_exp(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                  const uint8_t *used);
/* After every kv tile (b, h) visits is packed, with pb->k_fit: the head's
 * k_exp, the power of two of the scale its K takes over from q so that no q
 * of the head leaves f32's range, as far as its K stays inside it (a row
 * that still overflows is outside the documented range with the head's
 * largest key). 0 without pb->k_fit. The caller then scales each visited
 * tile (stsa_kv_scale_k_span) when it is not 0. */
int stsa_kv_k_exp(const stsa_attn_problem *pb, const stsa_kv_packed *kv, int64_t b,
                  int64_t h, const uint8_t *used);
/* Multiplies the packed K rows of tile `tile` at sp, and its k_max, by
 * 2^kv->k_exp. */
void stsa_kv_scale_k_span(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          int64_t tile, const stsa_kv_span *sp);
/* Multiplies the packed V rows of the tile at sp by 2^-kv->v_exp. */
void stsa_kv_scale_v_span(const stsa_attn_problem *pb, const stsa_kv_packed *kv,
                          const stsa_kv_span *sp);

/* Per-thread working memory for one q tile. */
typedef struct stsa_tile_scratch {
  float *q;             /* [q_tile][D], pre-scaled */
  float *s;             /* [q_tile][kv_tile] scores, then probabilities */
  float *o;             /* [q_tile][D_pad] unnormalised output */
  float *m, *l, *alpha; /* [q_tile] row max (log2 units), row sum, rescale */
  float *tile_max;      /* [q_tile] row max of the current kv tile's scores */
  float *row;           /* [D_pad] output row staging */
  float *ones;          /* [mr] 1: the pv rescale of a merged run's later tiles */
  /* Variable tiles only: a merged run's tails side by side (tile_loop.c:
   * merged_cols), as K^T panels [kv_tile / nr][D][nr] and V panels
   * [D_pad / nr][kv_tile][nr] */
  float *kt_tails, *vp_tails;
  /* ... and with pb->bf16_tiles (the f32 ones then NULL), as K panels
   * [kv_tile / 16][D32 / 32][512] and V blocks [D_pad / 16][kv_tile / 32][512]
   * (kernels.h: stsa_bf16_tile) */
  uint16_t *kb_tails, *vb_tails;
  float q_max; /* max |element| of the scaled q tile; +inf if NaN/Inf */
  /* Only for a PARTIAL tile whose V holds NaN/Inf: */
  float *v_safe;     /* [D_pad/nr][kv_tile][nr] its V panels, NaN/Inf -> 0 */
  int32_t *bad_keys; /* [kv_tile] its keys with a NaN/Inf in V */
  uint8_t *kept;     /* [q_tile][kv_tile] row r keeps bad_keys[b] */
  /* Only for a PARTIAL tile with a stored pattern (tile_spans.h): */
  int32_t *span; /* [2 q_tile / mr] row block i keeps columns [span[2i], span[2i+1]) */
  /* Only with pb->bf16_tiles (kernels.h: stsa_bf16_tile): */
  uint16_t *qb;      /* [q_tile][D32] the q tile's bf16 rows, unscaled */
  uint16_t *pbf;     /* [3][32][kv_tile] a pass's probabilities, hi, mid, lo */
  float *cbuf;       /* [32][D_pad] tile multiplies' sums (32: STSA_BF16_PASS_ROWS) */
  uint16_t *vb_safe; /* [D_pad/16][kv_tile/32][512] a PARTIAL tile's V blocks,
                        NaN/Inf -> 0 */
  void *block_;      /* the allocation of stsa_tile_scratch_alloc, else NULL */
} stsa_tile_scratch;

/* Bytes of one scratch (a multiple of 64), and a scratch laid out in `mem`
 * (64-byte aligned, that long). */
size_t stsa_tile_scratch_bytes(const stsa_attn_problem *pb);
void stsa_tile_scratch_at(const stsa_attn_problem *pb, void *mem, stsa_tile_scratch *sc);
/* The same in its own allocation: 0 on success, -1 when out of memory. */
int stsa_tile_scratch_alloc(const stsa_attn_problem *pb, stsa_tile_scratch *sc);
void stsa_tile_scratch_free(stsa_tile_scratch *sc);

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

/* Computes q tile `qt` of (b, h) over the listed kv tiles and writes its
 * output rows (and lse), with the non-finite semantics of stsa.h: a NaN or
 * +inf logit leaves the row sum NaN (the micro-kernels' exp2 propagates NaN),
 * which store_rows turns into a NaN row. Two cases need the tile loop's help,
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
