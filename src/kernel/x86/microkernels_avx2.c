/*
 * microkernels_avx2.c — AVX2+FMA micro-kernels (contracts in kernels.h).
 * Compiled with -mavx2 -mfma -mf16c; only reached after a run-time CPU check.
 *
 * Both GEMM kernels are 6 rows x 16 columns: 12 ymm accumulators, and per
 * inner step 2 vector loads + 6 broadcasts for 12 FMAs, which stays within
 * Zen 3's two loads per cycle (cpu-kernel-notes.md: 96-98% of peak in L1).
 * The two panel vectors are loaded into named registers on purpose: folding
 * them into FMA memory operands makes the loop load-bound.
 *
 * x86 only: CMake compiles this file only for x86 targets, and the guard
 * keeps it empty anywhere else (dispatch.c registers it on x86 only).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/convert.h"
#include "kernel/exp2_poly.h"
#include "kernel/kernels.h"

/* The register tile: 6 rows x 16 columns (two ymm). */
#define MR 6
#define NR 16
_Static_assert(NR <= STSA_MAX_NR, "a panel's keys fit stsa_panel_rows");

static inline float hmax8(__m256 v);

/* rowmax[r] = max(rowmax[r], lanes of a and b). */
static inline void fold_max(float *rowmax, __m256 a, __m256 b) {
  float m = hmax8(_mm256_max_ps(a, b));
  *rowmax = m > *rowmax ? m : *rowmax;
}

static void qk_avx2(const float *q, int D, const float *panel, float *s, int ld_s,
                    float *rowmax) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  const float *q0 = q, *q1 = q + D, *q2 = q + 2 * D, *q3 = q + 3 * D, *q4 = q + 4 * D,
              *q5 = q + 5 * D;
#pragma GCC unroll 4
  for (int d = 0; d < D; d++) {
    __m256 k0 = _mm256_load_ps(panel + d * NR);
    __m256 k1 = _mm256_load_ps(panel + d * NR + 8);
    __m256 a;
    a = _mm256_broadcast_ss(q0 + d);
    c00 = _mm256_fmadd_ps(a, k0, c00);
    c01 = _mm256_fmadd_ps(a, k1, c01);
    a = _mm256_broadcast_ss(q1 + d);
    c10 = _mm256_fmadd_ps(a, k0, c10);
    c11 = _mm256_fmadd_ps(a, k1, c11);
    a = _mm256_broadcast_ss(q2 + d);
    c20 = _mm256_fmadd_ps(a, k0, c20);
    c21 = _mm256_fmadd_ps(a, k1, c21);
    a = _mm256_broadcast_ss(q3 + d);
    c30 = _mm256_fmadd_ps(a, k0, c30);
    c31 = _mm256_fmadd_ps(a, k1, c31);
    a = _mm256_broadcast_ss(q4 + d);
    c40 = _mm256_fmadd_ps(a, k0, c40);
    c41 = _mm256_fmadd_ps(a, k1, c41);
    a = _mm256_broadcast_ss(q5 + d);
    c50 = _mm256_fmadd_ps(a, k0, c50);
    c51 = _mm256_fmadd_ps(a, k1, c51);
  }
  float *o = s;
  _mm256_storeu_ps(o, c00);
  _mm256_storeu_ps(o + 8, c01);
  o += ld_s;
  _mm256_storeu_ps(o, c10);
  _mm256_storeu_ps(o + 8, c11);
  o += ld_s;
  _mm256_storeu_ps(o, c20);
  _mm256_storeu_ps(o + 8, c21);
  o += ld_s;
  _mm256_storeu_ps(o, c30);
  _mm256_storeu_ps(o + 8, c31);
  o += ld_s;
  _mm256_storeu_ps(o, c40);
  _mm256_storeu_ps(o + 8, c41);
  o += ld_s;
  _mm256_storeu_ps(o, c50);
  _mm256_storeu_ps(o + 8, c51);
  fold_max(rowmax, c00, c01);
  fold_max(rowmax + 1, c10, c11);
  fold_max(rowmax + 2, c20, c21);
  fold_max(rowmax + 3, c30, c31);
  fold_max(rowmax + 4, c40, c41);
  fold_max(rowmax + 5, c50, c51);
}

/* 2^x for x <= 0 (see exp2_poly.h); x < -126 (and -inf) gives exactly 0 and
 * NaN gives NaN: `keep` is true for unordered lanes, and max_ps returns its
 * second operand when one is NaN, so NaN flows through the polynomial (its
 * exponent term converts to 0x80000000, which the shift clears). */
static inline __m256 exp2_avx2(__m256 x) {
  __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(STSA_EXP2_MIN), _CMP_NLT_UQ);
  x = _mm256_max_ps(_mm256_set1_ps(STSA_EXP2_MIN), x);
  __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(STSA_EXP2_C5);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(STSA_EXP2_C4));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(STSA_EXP2_C3));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(STSA_EXP2_C2));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(STSA_EXP2_C1));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  return _mm256_and_ps(p, keep);
}

static inline float hmax8(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

static inline float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

static void softmax_avx2(float *s, int ld_s, int rows, int n, float *m, float *l,
                         float *alpha, const float *tile_max) {
  int n_pad = (n + NR - 1) / NR * NR;
  for (int r = 0; r < rows; r++) {
    float *row = s + (int64_t)r * ld_s;
    for (int c = n; c < n_pad; c++)
      row[c] = -INFINITY;
    float mx;
    if (tile_max) {
      mx = tile_max[r] > m[r] ? tile_max[r] : m[r];
    } else {
      __m256 vmax0 = _mm256_set1_ps(m[r]), vmax1 = vmax0;
      for (int c = 0; c < n_pad; c += 16) {
        vmax0 = _mm256_max_ps(vmax0, _mm256_loadu_ps(row + c));
        vmax1 = _mm256_max_ps(vmax1, _mm256_loadu_ps(row + c + 8));
      }
      mx = hmax8(_mm256_max_ps(vmax0, vmax1));
    }
    /* Nothing kept so far: subtract 0 so that p = exp2(-inf) = 0, no NaN. */
    float base = mx == -INFINITY ? 0.0f : mx;
    __m256 vb = _mm256_set1_ps(base);
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    for (int c = 0; c < n_pad; c += 16) {
      __m256 p0 = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(row + c), vb));
      __m256 p1 = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(row + c + 8), vb));
      _mm256_storeu_ps(row + c, p0);
      _mm256_storeu_ps(row + c + 8, p1);
      sum0 = _mm256_add_ps(sum0, p0);
      sum1 = _mm256_add_ps(sum1, p1);
    }
    /* padding lanes give exp2(-inf - base) = 0, or NaN in a row that NaN has
     * already reached; either way the contract says 0 */
    for (int c = n; c < n_pad; c++)
      row[c] = 0.0f;
    float a = _mm256_cvtss_f32(exp2_avx2(_mm256_set1_ps(m[r] - base)));
    alpha[r] = a;
    l[r] = a * l[r] + hsum8(_mm256_add_ps(sum0, sum1));
    m[r] = mx;
  }
}

/* The tile's sum starts from 0 and joins alpha * o at the end (kernels.h). */
static void pv_avx2(const float *p, int ld_p, int n, const float *panel, float *o,
                    int ld_o, const float *alpha) {
  const float *p0 = p, *p1 = p + ld_p, *p2 = p + 2 * ld_p, *p3 = p + 3 * ld_p,
              *p4 = p + 4 * ld_p, *p5 = p + 5 * ld_p;
  __m256 a0 = _mm256_set1_ps(alpha[0]), a1 = _mm256_set1_ps(alpha[1]),
         a2 = _mm256_set1_ps(alpha[2]), a3 = _mm256_set1_ps(alpha[3]),
         a4 = _mm256_set1_ps(alpha[4]), a5 = _mm256_set1_ps(alpha[5]);
  float *o0 = o, *o1 = o0 + ld_o, *o2 = o1 + ld_o, *o3 = o2 + ld_o, *o4 = o3 + ld_o,
        *o5 = o4 + ld_o;
  __m256 c00 = _mm256_setzero_ps();
  __m256 c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps();
  __m256 c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps();
  __m256 c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps();
  __m256 c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps();
  __m256 c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps();
  __m256 c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int t = 0; t < n; t++) {
    __m256 v0 = _mm256_load_ps(panel + t * NR);
    __m256 v1 = _mm256_load_ps(panel + t * NR + 8);
    __m256 b;
    b = _mm256_broadcast_ss(p0 + t);
    c00 = _mm256_fmadd_ps(b, v0, c00);
    c01 = _mm256_fmadd_ps(b, v1, c01);
    b = _mm256_broadcast_ss(p1 + t);
    c10 = _mm256_fmadd_ps(b, v0, c10);
    c11 = _mm256_fmadd_ps(b, v1, c11);
    b = _mm256_broadcast_ss(p2 + t);
    c20 = _mm256_fmadd_ps(b, v0, c20);
    c21 = _mm256_fmadd_ps(b, v1, c21);
    b = _mm256_broadcast_ss(p3 + t);
    c30 = _mm256_fmadd_ps(b, v0, c30);
    c31 = _mm256_fmadd_ps(b, v1, c31);
    b = _mm256_broadcast_ss(p4 + t);
    c40 = _mm256_fmadd_ps(b, v0, c40);
    c41 = _mm256_fmadd_ps(b, v1, c41);
    b = _mm256_broadcast_ss(p5 + t);
    c50 = _mm256_fmadd_ps(b, v0, c50);
    c51 = _mm256_fmadd_ps(b, v1, c51);
  }
  _mm256_storeu_ps(o0, _mm256_fmadd_ps(a0, _mm256_loadu_ps(o0), c00));
  _mm256_storeu_ps(o0 + 8, _mm256_fmadd_ps(a0, _mm256_loadu_ps(o0 + 8), c01));
  _mm256_storeu_ps(o1, _mm256_fmadd_ps(a1, _mm256_loadu_ps(o1), c10));
  _mm256_storeu_ps(o1 + 8, _mm256_fmadd_ps(a1, _mm256_loadu_ps(o1 + 8), c11));
  _mm256_storeu_ps(o2, _mm256_fmadd_ps(a2, _mm256_loadu_ps(o2), c20));
  _mm256_storeu_ps(o2 + 8, _mm256_fmadd_ps(a2, _mm256_loadu_ps(o2 + 8), c21));
  _mm256_storeu_ps(o3, _mm256_fmadd_ps(a3, _mm256_loadu_ps(o3), c30));
  _mm256_storeu_ps(o3 + 8, _mm256_fmadd_ps(a3, _mm256_loadu_ps(o3 + 8), c31));
  _mm256_storeu_ps(o4, _mm256_fmadd_ps(a4, _mm256_loadu_ps(o4), c40));
  _mm256_storeu_ps(o4 + 8, _mm256_fmadd_ps(a4, _mm256_loadu_ps(o4 + 8), c41));
  _mm256_storeu_ps(o5, _mm256_fmadd_ps(a5, _mm256_loadu_ps(o5), c50));
  _mm256_storeu_ps(o5 + 8, _mm256_fmadd_ps(a5, _mm256_loadu_ps(o5 + 8), c51));
}

/* Contiguous f16 rows go through F16C and bf16 rows through a 16-bit shift,
 * eight at a time; strided rows and f32 take the portable path. */
static void load_row_avx2(const void *src, int dtype, int64_t stride, int64_t n,
                          float *dst) {
  int64_t i = 0;
  if (stride == 1 && dtype == STSA_F16) {
    const uint16_t *s = src;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                    (const __m128i *)(const void *)(s + i))));
  } else if (stride == 1 && dtype == STSA_BF16) {
    const uint16_t *s = src;
    for (; i + 8 <= n; i += 8) {
      __m256i w =
          _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(s + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
  }
  stsa_load_row_rest(src, dtype, stride, i, n, dst);
}

/* Elements [d0, d0 + dn) of a contiguous f32, f16 or bf16 row as f32, zeros
 * past dn (dn <= 8) or for no row. */
static inline __m256 load8(const void *row, int dtype, int d0, int dn) {
  if (!row)
    return _mm256_setzero_ps();
  const size_t size = dtype == STSA_F32 ? 4 : 2;
  const char *x = (const char *)row + (size_t)d0 * size;
  uint32_t tail[8]; /* 32 bytes: eight f32 or sixteen 16-bit values */
  if (dn < 8) {     /* zeroed here only: whole blocks store nothing */
    memset(tail, 0, sizeof tail);
    memcpy(tail, x, size * (size_t)dn);
    x = (const char *)tail;
  }
  if (dtype == STSA_F32)
    return _mm256_loadu_ps((const float *)(const void *)x);
  const __m128i w = _mm_loadu_si128((const __m128i *)(const void *)x);
  if (dtype == STSA_F16)
    return _mm256_cvtph_ps(w);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
}

/* r[c] lane e -> r[e] lane c for an 8 x 8 block: pairs of rows
 * interleaved, groups of four within 128-bit lanes, then the lanes. */
static inline void transpose8(__m256 r[8]) {
  __m256 u[8];
  for (int g = 0; g < 2; g++) {
    const __m256 *x = r + 4 * g;
    const __m256 lo01 = _mm256_unpacklo_ps(x[0], x[1]),
                 hi01 = _mm256_unpackhi_ps(x[0], x[1]);
    const __m256 lo23 = _mm256_unpacklo_ps(x[2], x[3]),
                 hi23 = _mm256_unpackhi_ps(x[2], x[3]);
    u[4 * g] = _mm256_shuffle_ps(lo01, lo23, 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(lo01, lo23, 0xEE);
    u[4 * g + 2] = _mm256_shuffle_ps(hi01, hi23, 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(hi01, hi23, 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

static inline __m256i abs_bits_max8(__m256i m, __m256 x) {
  return _mm256_max_epu32(
      m, _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
}

static uint32_t hmax_epu32(__m256i m) {
  uint32_t lanes[8], mx = 0;
  _mm256_storeu_si256((__m256i *)(void *)lanes, m);
  for (int i = 0; i < 8; i++)
    mx = lanes[i] > mx ? lanes[i] : mx;
  return mx;
}

/* Contiguous f32/f16/bf16 rows: K^T as 8 x 8 blocks transposed in
 * registers (each half of the panel's keys apart); strided rows go the
 * portable way. */
static void pack_panel_avx2(const stsa_panel_rows *pr, float *kt, float *vp,
                            int64_t vp_stride, uint32_t abs_bits[2]) {
  const int D = pr->D;
  if (pr->k_stride != 1 || pr->v_stride != 1) {
    stsa_pack_panel_rows(pr, kt, vp, vp_stride, abs_bits);
    return;
  }
  __m256i k_max = _mm256_setzero_si256(), v_max = _mm256_setzero_si256();
  for (int d0 = 0; d0 < D; d0 += 8) {
    const int dn = D - d0 < 8 ? D - d0 : 8;
    for (int half = 0; half < 2; half++) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) {
        r[c] = load8(pr->k[8 * half + c], pr->k_dtype, d0, dn);
        k_max = abs_bits_max8(k_max, r[c]);
      }
      transpose8(r);
      /* fixed indices keep r in registers */
      float *at = kt + (int64_t)d0 * NR + 8 * half, tail[8 * NR];
      float *to = dn == 8 ? at : tail;
#pragma GCC unroll 8
      for (int e = 0; e < 8; e++)
        _mm256_storeu_ps(to + e * NR, r[e]);
      for (int e = 0; dn < 8 && e < dn; e++)
        memcpy(at + e * NR, tail + e * NR, sizeof(float) * 8);
    }
  }
  for (int c = 0; c < NR; c++)
    for (int d0 = 0; d0 < pr->D_pad; d0 += 8) {
      const __m256 x = d0 < D ? load8(pr->k[c] ? pr->v[c] : NULL, pr->v_dtype, d0,
                                      D - d0 < 8 ? D - d0 : 8)
                              : _mm256_setzero_ps();
      v_max = abs_bits_max8(v_max, x);
      _mm256_store_ps(vp + (d0 / NR) * vp_stride + c * NR + d0 % NR, x);
    }
  stsa_fold_abs_bits(abs_bits, hmax_epu32(k_max), hmax_epu32(v_max));
}

void stsa_kernels_override_avx2(stsa_kernels *t) {
  t->name = "avx2";
  t->mr = MR;
  t->nr = NR;
  t->qk = qk_avx2;
  t->softmax = softmax_avx2;
  t->pv = pv_avx2;
  t->load_row = load_row_avx2;
  t->pack_panel = pack_panel_avx2;
}
#endif /* x86 */
