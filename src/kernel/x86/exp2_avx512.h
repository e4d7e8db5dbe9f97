/*
 * exp2_avx512.h — exp2 on 16 lanes for the AVX-512 kernels (microkernels_
 * avx512.c, microkernels_amx.c), so that both compute the same
 * probabilities. Include only from files compiled with -mavx512f -mavx512dq.
 */
#ifndef STSA_KERNEL_X86_EXP2_AVX512_H
#define STSA_KERNEL_X86_EXP2_AVX512_H

#include <immintrin.h>

#include "kernel/exp2_poly.h"

/* 2^x for x <= 0 and for moderate positive x (exp2_poly.h, the floor
 * reduction): x < -126 (and -inf) gives exactly 0, NaN gives NaN (`keep`
 * is true for unordered lanes and NaN flows through vreduceps, the
 * polynomial and vscalefps). vscalefps multiplies by 2^floor(x) itself,
 * without the AVX2 kernel's clamp and integer add: the lanes it would get
 * wrong are the masked ones. 10 operations on the FMA ports per vector
 * with the subtraction before it, where rounding to nearest took 12. */
static inline __m512 exp2_avx512(__m512 x) {
  const __mmask16 keep =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(STSA_EXP2_MIN), _CMP_NLT_UQ);
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(STSA_EXP2_FLOOR_C5);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(STSA_EXP2_FLOOR_C4));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(STSA_EXP2_FLOOR_C3));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(STSA_EXP2_FLOOR_C2));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(STSA_EXP2_FLOOR_C1));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, x);
}

#endif
