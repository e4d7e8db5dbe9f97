/*
 * kv_pack.h — K and V of one (batch, head) packed for the tile engines: f32
 * panels or bf16 blocks, what packing learns about each kv tile, and the
 * power-of-two scalings (v_exp, k_exp) that keep sums and logits in range.
 */
#ifndef STSA_KERNEL_KV_PACK_H
#define STSA_KERNEL_KV_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/problem.h"

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
 * most kv_stride a tile on the lazy bf16 path, so again at most one a
 * packed row) times V: no partial sum passes S_kv_pad max|V|, and below V_SUM_LIMIT
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

#endif
