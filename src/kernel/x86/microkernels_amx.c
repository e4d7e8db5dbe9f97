/*
 * microkernels_amx.c — the amx backend: the AVX-512 table plus
 * full_tile_bf16 (kernels.h), which runs a FULL kv tile of bf16 Q, K and V
 * through the AMX tile-multiply unit. Compiled with -mamx-tile -mamx-bf16
 * -mavx512bf16 (and the AVX-512 file's flags); only reached after
 * stsa_cpu_has_amx(), which also asks Linux for the tile state.
 *
 * Per row block of MR = 12 q rows (the AVX-512 register tile's rows, so
 * plans move freely between the avx512 and amx backends):
 *   1. S = Q K^T: C tiles of 12 x 16 f32 scores (one K panel each), two at
 *      a time, summed over depth chunks of 32 bf16 (A: 12 q rows x 32,
 *      B: one 1 KB K block). Products of bf16 are exact in f32.
 *   2. Online softmax on S in f32 (AVX-512): scores times score_scale, exp2
 *      as the AVX-512 kernels compute it; each p is written as three bf16
 *      terms, hi = bf16(p), mid = bf16(p - hi), lo = p - hi - mid, whose sum
 *      is p exactly (but where lo would be a denormal, p < ~2^-100, which
 *      the tile unit flushes to 0).
 *   3. O = alpha O + P V: C tiles of 12 x 16 outputs, two V column panels
 *      at a time, summed over key chunks of 32: hi V, mid V, lo V. So P.V
 *      multiplies the f32 probabilities, as the f32 path does; one bf16
 *      term would lose 2^-9 of each.
 * One tile multiply is 12 x 16 x 32 multiply-adds, 6144 where an AVX-512
 * FMA does 16: at Wan's shapes the softmax, not the multiplies, is now
 * the larger part of the time.
 *
 * x86 only: CMake compiles this file only for x86 targets.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernel/kernels.h"
#include "exp2_avx512.h" /* this folder */

#define MR 12
#define NR 16

/* Tile registers, by number (the intrinsics paste it into the instruction,
 * so it must be a literal): tmm0 and tmm1 accumulate, tmm2, tmm3 and tmm6
 * hold A operands (a q chunk, or p's hi, mid and lo), tmm4 and tmm5 B
 * operands (K or V blocks). */

/* The LDTILECFG memory operand (palette 1). */
typedef struct tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* Every tile holds 64-byte rows: C and A have MR rows, B 16 (32 bf16 of
 * depth as 16 pairs). Loaded per kv tile, released after it: the tile state
 * is the calling thread's, and a released state is not saved on context
 * switches. */
static void configure_tiles(void) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  const int rows[7] = {MR, MR, MR, MR, 16, 16, MR};
  for (int i = 0; i < 7; i++) {
    cfg.rows[i] = (uint8_t)rows[i];
    cfg.colsb[i] = 64;
  }
  _tile_loadconfig(&cfg);
}

/* Raw scores q.k of row block r0 against the tile's npanels K panels, into
 * t->s (MR rows, ld_s apart). */
static void block_scores(const stsa_bf16_tile *t, int r0, int npanels) {
  const int nch = t->D32 / 32;
  const uint16_t *q = t->q + (int64_t)r0 * t->D32;
  const int q_bytes = t->D32 * 2, s_bytes = t->ld_s * 4;
  for (int p = 0; p < npanels; p += 2) {
    const uint16_t *k0 = t->kb + (int64_t)p * nch * 512, *k1 = k0 + (int64_t)nch * 512;
    if (p + 1 < npanels) {
      _tile_zero(0);
      _tile_zero(1);
      for (int c = 0; c < nch; c++) {
        _tile_loadd(2, q + c * 32, q_bytes);
        _tile_loadd(4, k0 + c * 512, 64);
        _tile_loadd(5, k1 + c * 512, 64);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(1, 2, 5);
      }
      _tile_stored(0, t->s + p * NR, s_bytes);
      _tile_stored(1, t->s + (p + 1) * NR, s_bytes);
    } else {
      _tile_zero(0);
      for (int c = 0; c < nch; c++) {
        _tile_loadd(2, q + c * 32, q_bytes);
        _tile_loadd(4, k0 + c * 512, 64);
        _tile_dpbf16ps(0, 2, 4);
      }
      _tile_stored(0, t->s + p * NR, s_bytes);
    }
  }
}

/* Lanes [c, c + 16) of a row that are below n. */
static inline __mmask16 valid_lanes(int c, int n) {
  return c + 16 <= n ? (__mmask16)0xFFFF : c < n ? (__mmask16)((1u << (n - c)) - 1) : 0;
}

/* 16 f32 lanes as bf16, rounded to nearest even, and back to f32. */
static inline __m256i to_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }
static inline __m512 from_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Writes p's three bf16 terms (step 2 above) at column c of each. */
static inline void store_terms(__m512 p, uint16_t *hi, uint16_t *mid, uint16_t *lo, int c) {
  const __m256i h = to_bf16(p);
  const __m512 r1 = _mm512_sub_ps(p, from_bf16(h));
  const __m256i m = to_bf16(r1);
  _mm256_storeu_si256((__m256i *)(void *)(hi + c), h);
  _mm256_storeu_si256((__m256i *)(void *)(mid + c), m);
  _mm256_storeu_si256((__m256i *)(void *)(lo + c), to_bf16(_mm512_sub_ps(r1, from_bf16(m))));
}

/* The row's maximum logit over its n scores, in log2 units. Safe tiles:
 * taken on the raw scores and scaled once (score_scale > 0 and rounding is
 * monotonic, so it is the maximum of the scaled scores). Otherwise the
 * scores are scaled in place first and a -inf logit becomes -FLT_MAX, kept
 * apart from weight-0 keys as the f32 path keeps it (a row of only -inf
 * logits then ends with that maximum, which stores as NaN). */
static float row_max(const stsa_bf16_tile *t, float *row) {
  const int n = t->n;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 vmax = neg_inf;
  if (t->safe) {
    for (int c = 0; c < n; c += 16)
      vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, valid_lanes(c, n), row + c));
    return _mm512_reduce_max_ps(vmax) * t->score_scale;
  }
  const __m512 vscale = _mm512_set1_ps(t->score_scale), kept = _mm512_set1_ps(-FLT_MAX);
  for (int c = 0; c < n; c += 16) {
    const __mmask16 live = valid_lanes(c, n);
    __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, row + c), vscale);
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, neg_inf, _CMP_EQ_OQ), kept);
    _mm512_mask_storeu_ps(row + c, live, x);
    vmax = _mm512_max_ps(vmax, _mm512_mask_mov_ps(neg_inf, live, x));
  }
  return _mm512_reduce_max_ps(vmax);
}

/* Online softmax of row block r0 (kernels.h: softmax): p = exp2(logit -
 * m_new) for the n keys, 0 past them up to the next multiple of 32 (the
 * key chunk P.V reads), written to t->p as three bf16 terms. NaN and +inf
 * logits make l NaN as in the f32 path (exp2 keeps NaN; inf - inf). */
static void block_softmax(const stsa_bf16_tile *t, int r0) {
  const int n = t->n, n32 = (n + 31) / 32 * 32;
  const __m512 vscale = _mm512_set1_ps(t->safe ? t->score_scale : 1.0f);
  for (int r = 0; r < MR; r++) {
    float *row = t->s + (int64_t)r * t->ld_s;
    uint16_t *hi = t->p + (int64_t)r * t->ld_s, *mid = hi + (int64_t)MR * t->ld_s,
             *lo = mid + (int64_t)MR * t->ld_s;
    const float tile_max = row_max(t, row), m = t->m[r0 + r];
    const float mx = tile_max > m ? tile_max : m;
    /* nothing kept so far: subtract 0 so that p = exp2(-inf) = 0, no NaN */
    const float base = mx == -INFINITY ? 0.0f : mx;
    const __m512 vb = _mm512_set1_ps(base);
    __m512 sum = _mm512_setzero_ps();
    for (int c = 0; c < n32; c += 16) {
      const __mmask16 live = valid_lanes(c, n);
      /* scaled, then shifted, in two roundings on either path (a fused
       * multiply-add on safe tiles only would make a row's result depend on
       * whether another row's poison made its tile unsafe) */
      const __m512 x = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(live, row + c), vscale), vb);
      const __m512 p = _mm512_maskz_mov_ps(live, exp2_avx512(x));
      sum = _mm512_add_ps(sum, p);
      store_terms(p, hi, mid, lo, c);
    }
    const float a = _mm512_cvtss_f32(exp2_avx512(_mm512_set1_ps(m - base)));
    t->alpha[r0 + r] = a;
    t->l[r0 + r] = a * t->l[r0 + r] + _mm512_reduce_add_ps(sum);
    t->m[r0 + r] = mx;
  }
}

/* o[r][c] = alpha[r] o[r][c] + the C tile's sums, for `cols` columns (16
 * or 32) of row block r0 starting at output column c0. */
static void add_to_output(const stsa_bf16_tile *t, int r0, int c0, int cols) {
  for (int r = 0; r < MR; r++) {
    float *o = t->o + (int64_t)(r0 + r) * t->D_pad + c0;
    const __m512 a = _mm512_set1_ps(t->alpha[r0 + r]);
    for (int c = 0; c < cols; c += NR)
      _mm512_storeu_ps(o + c, _mm512_fmadd_ps(a, _mm512_loadu_ps(o + c),
                                              _mm512_loadu_ps(t->c + r * 2 * NR + c)));
  }
}

/* o = alpha o + (hi + mid + lo) V for row block r0. */
static void block_pv(const stsa_bf16_tile *t, int r0) {
  const int nchunks = (t->n + 31) / 32, npanels = t->D_pad / NR;
  const uint16_t *hi = t->p, *mid = hi + (int64_t)MR * t->ld_s,
                 *lo = mid + (int64_t)MR * t->ld_s;
  const int p_bytes = t->ld_s * 2, c_bytes = 2 * NR * 4;
  for (int j = 0; j < npanels; j += 2) {
    const uint16_t *v0 = t->vb + j * t->v_panel, *v1 = v0 + t->v_panel;
    if (j + 1 < npanels) {
      _tile_zero(0);
      _tile_zero(1);
      for (int k = 0; k < nchunks; k++) {
        _tile_loadd(2, hi + k * 32, p_bytes);
        _tile_loadd(3, mid + k * 32, p_bytes);
        _tile_loadd(6, lo + k * 32, p_bytes);
        _tile_loadd(4, v0 + k * 512, 64);
        _tile_loadd(5, v1 + k * 512, 64);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(1, 2, 5);
        _tile_dpbf16ps(0, 3, 4);
        _tile_dpbf16ps(1, 3, 5);
        _tile_dpbf16ps(0, 6, 4);
        _tile_dpbf16ps(1, 6, 5);
      }
      _tile_stored(0, t->c, c_bytes);
      _tile_stored(1, t->c + NR, c_bytes);
      add_to_output(t, r0, j * NR, 2 * NR);
    } else {
      _tile_zero(0);
      for (int k = 0; k < nchunks; k++) {
        _tile_loadd(2, hi + k * 32, p_bytes);
        _tile_loadd(3, mid + k * 32, p_bytes);
        _tile_loadd(6, lo + k * 32, p_bytes);
        _tile_loadd(4, v0 + k * 512, 64);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(0, 3, 4);
        _tile_dpbf16ps(0, 6, 4);
      }
      _tile_stored(0, t->c, c_bytes);
      add_to_output(t, r0, j * NR, NR);
    }
  }
}

static void full_tile_amx(const stsa_bf16_tile *t) {
  configure_tiles();
  const int npanels = (t->n + NR - 1) / NR;
  for (int r0 = 0; r0 < t->rows_pad; r0 += MR) {
    block_scores(t, r0, npanels);
    block_softmax(t, r0);
    block_pv(t, r0);
  }
  _tile_release();
}

void stsa_kernels_override_amx(stsa_kernels *t) {
  stsa_kernels_override_avx512(t);
  t->name = "amx";
  t->full_tile_bf16 = full_tile_amx;
}
#endif /* x86-64 */
