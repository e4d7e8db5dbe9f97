/*
 * exp2_avx512.h — exp2 on 16 lanes for the AVX-512 kernels (microkernels_
 * avx512.c and the bf16 engine), so that they compute the same
 * probabilities; and a cheaper one for probabilities that are rounded to
 * bf16 next. Include only from files compiled with -mavx512f -mavx512dq.
 */
#ifndef STSA_KERNEL_X86_EXP2_AVX512_H
#define STSA_KERNEL_X86_EXP2_AVX512_H

#include <immintrin.h>

#include "kernel/exp2_poly.h"

/* 2^x = 2^floor(x) 2^f, f = x - floor(x) in [0, 1), with 2^f by Horner's
 * rule on c[0..degree), the coefficients of f^1..f^degree, and the constant
 * term 1. x < -126 (and -inf) gives exactly 0, NaN gives NaN (`keep` is
 * true for unordered lanes and NaN flows through vreduceps, the polynomial
 * and vscalefps). vscalefps multiplies by 2^floor(x) itself, without the
 * AVX2 kernel's clamp and integer add: the lanes it would get wrong are the
 * masked ones. */
static inline __attribute__((always_inline)) __m512
exp2_poly_avx512(__m512 x, const float *c, const int degree) {
  const __mmask16 keep =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(STSA_EXP2_MIN), _CMP_NLT_UQ);
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(c[degree - 1]);
  for (int k = degree - 2; k >= 0; k--)
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[k]));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, x);
}

/* 2^x for x <= 0 and for moderate positive x (exp2_poly.h, the floor
 * reduction, degree 5): 10 operations on the FMA ports per vector with the
 * subtraction before it, where rounding to nearest took 12. */
static inline __m512 exp2_avx512(__m512 x) {
  static const float c[5] = {STSA_EXP2_FLOOR_C1, STSA_EXP2_FLOOR_C2, STSA_EXP2_FLOOR_C3,
                             STSA_EXP2_FLOOR_C4, STSA_EXP2_FLOOR_C5};
  return exp2_poly_avx512(x, c, 5);
}

/* For probabilities that one bf16 term holds (8 significant bits: rounding
 * moves them by up to 2^-9), 2^f by degree 3 with the constant term 1:
 * minimax relative error by Remez exchange, 8.56e-5 (2^-13.5) in exact
 * arithmetic and 8.57e-5 in f32 (2 million points on [-30, 20] against
 * exp2 in double), some 23 times below that rounding. The same range,
 * zeros and NaN as exp2_avx512, 2^0 = 1 exactly, two FMAs fewer. */
static inline __m512 exp2_bf16_avx512(__m512 x) {
  static const float c[3] = {0.69511679f, 0.22764499f, 0.07706704f};
  return exp2_poly_avx512(x, c, 3);
}

#endif
