/*
 * microkernels_avx2.c — AVX2+FMA micro-kernels (contracts in kernels.h).
 * Compiled with -mavx2 -mfma -mf16c; only reached after a run-time CPU check.
 *
 * qk, softmax and pv are the portable kernels' source
 * (generic/microkernels_body.h) on the AVX2 mapping of the SIMD vocabulary
 * (simd/simd_avx2.h): a 6 x 16 register tile of 12 ymm accumulators, and
 * per inner step 2 panel loads + 6 broadcasts for 12 FMAs, which stays
 * within Zen 3's two loads per cycle (cpu-kernel-notes.md: 96-98% of peak
 * in L1). The row loads and K/V packing below are AVX2's own: F16C and
 * 8 x 8 transposes in registers.
 *
 * x86 only: CMake compiles this file only for x86 targets, and the guard
 * keeps it empty anywhere else (dispatch.c registers it on x86 only).
 */
#if defined(__x86_64__) || defined(__i386__)
#define STSA_SIMD_AVX2 1
#define MK_SUFFIX avx2
#include "kernel/generic/microkernels_body.h"

#include <string.h>

#include "core/convert.h"

/* The panel width: the register tile's columns (two ymm). */
#define NR MK_NR
_Static_assert(NR <= STSA_MAX_NR, "a panel's keys fit stsa_panel_rows");

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
  fill_avx2(t);
  t->load_row = load_row_avx2;
  t->pack_panel = pack_panel_avx2;
}
#endif /* x86 */
