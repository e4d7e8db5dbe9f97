/*
 * max_avx512.h — row maxima on 16 lanes for the AVX-512 kernels
 * (microkernels_avx512.c's softmax, microkernels_amx.c's passes), in four
 * dependency chains: with one, every vector waits out the max latency (16%
 * of the softmax's time in SVG2's merged runs). Include only from files
 * compiled with -mavx512f.
 */
#ifndef STSA_KERNEL_X86_MAX_AVX512_H
#define STSA_KERNEL_X86_MAX_AVX512_H

#include <immintrin.h>

/* v[i] = max(v[i], the vectors of x[0..n) it takes), n a multiple of 16;
 * max_ps keeps v's operand first, as a single chain would. */
static inline void max_chains_avx512(__m512 v[4], const float *x, int n) {
  int c = 0;
  for (; c + 64 <= n; c += 64)
    for (int i = 0; i < 4; i++)
      v[i] = _mm512_max_ps(v[i], _mm512_loadu_ps(x + c + 16 * i));
  for (; c < n; c += 16)
    v[0] = _mm512_max_ps(v[0], _mm512_loadu_ps(x + c));
}

/* The largest lane of the four chains. */
static inline float max_of_chains_avx512(const __m512 v[4]) {
  return _mm512_reduce_max_ps(
      _mm512_max_ps(_mm512_max_ps(v[0], v[1]), _mm512_max_ps(v[2], v[3])));
}

#endif
