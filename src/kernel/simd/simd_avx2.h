/*
 * simd_avx2.h — the AVX2+FMA mapping of the SIMD vocabulary (simd.h): ymm
 * vectors of 8 floats, fused multiply-add, and the 16 ymm registers of
 * x86-64, which hold the 6 x 16 register tile (12 accumulators) beside two
 * panel vectors and a broadcast. Compiled with -mavx2 -mfma; the kernels
 * that include it run only after stsa_cpu_runs_avx2.
 *
 * The softmax keeps two accumulators (SIMD_CHAINS) for its maximum and sum,
 * one per vector of a 16-wide tile row: an add's latency is then hidden, and
 * the sum's order is the one the AVX2 kernels have always had. The GEMM
 * kernels' inner loop is unrolled 4 times (SIMD_K_UNROLL), as the
 * hand-written AVX2 kernels were: one loop branch per 48 FMAs. NaN flows
 * through vmaxps (its second operand), vroundps and the exponent addition,
 * so exp2 clamps with a max and masks (SIMD_NAN_FLOWS), as they did.
 */
#ifndef STSA_KERNEL_SIMD_SIMD_AVX2_H
#define STSA_KERNEL_SIMD_SIMD_AVX2_H

#if !defined(__AVX2__) || !defined(__FMA__)
#error "simd_avx2.h: compile with -mavx2 -mfma"
#endif

#include <immintrin.h>

#define VF32_LANES 8
#define SIMD_REGS 16
#define SIMD_CHAINS 2
#define SIMD_K_UNROLL 4
#define SIMD_NAN_FLOWS 1

typedef __m256 vf32;
typedef __m256 vmask; /* all ones or all zeros per lane, as vcmpps gives */

static inline vf32 vf32_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf32_store(float *p, vf32 v) { _mm256_storeu_ps(p, v); }
static inline vf32 vf32_zero(void) { return _mm256_setzero_ps(); }
static inline vf32 vf32_set1(float x) { return _mm256_set1_ps(x); }
static inline vf32 vf32_add(vf32 a, vf32 b) { return _mm256_add_ps(a, b); }
static inline vf32 vf32_sub(vf32 a, vf32 b) { return _mm256_sub_ps(a, b); }
static inline vf32 vf32_mul(vf32 a, vf32 b) { return _mm256_mul_ps(a, b); }
static inline vf32 vf32_fma(vf32 a, vf32 b, vf32 c) { return _mm256_fmadd_ps(a, b, c); }
/* vmaxps: a > b ? a : b, so the second operand where a lane is NaN */
static inline vf32 vf32_max(vf32 a, vf32 b) { return _mm256_max_ps(a, b); }
static inline vmask vf32_lt(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vmask vf32_ge(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline vmask vf32_nlt(vf32 a, vf32 b) { return _mm256_cmp_ps(a, b, _CMP_NLT_UQ); }
static inline vf32 vf32_keep(vf32 v, vmask m) { return _mm256_and_ps(v, m); }
static inline vf32 vf32_select(vmask m, vf32 a, vf32 b) {
  return _mm256_blendv_ps(b, a, m);
}
static inline vf32 vf32_round(vf32 v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* the halves, then pairs, then the last two lanes */
static inline float vf32_hmax(vf32 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

static inline float vf32_hsum(vf32 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

/* a NaN lane of n converts to 0x80000000, which the shift clears: v stays */
static inline vf32 vf32_mul_pow2(vf32 v, vf32 n) {
  __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(v), e));
}

#endif
