/*
 * transpose_avx512.h — a 16 x 16 transpose of 32-bit elements in zmm
 * registers, for the packers of the AVX-512 kernels (f32 K^T panels in
 * microkernels_avx512.c) and the amx backend (bf16 pairs of K blocks in
 * microkernels_amx.c). Include only from files compiled with -mavx512f.
 */
#ifndef STSA_KERNEL_X86_TRANSPOSE_AVX512_H
#define STSA_KERNEL_X86_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* r[c] lane e -> r[e] lane c: pairs of rows interleaved, then groups of
 * four within 128-bit lanes (t[4 g + i] lane L: element 4 L + i of rows
 * 4 g .. 4 g + 3), then the 128-bit lanes of the four groups. */
static inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int g = 0; g < 4; g++) {
    const __m512 a = r[4 * g], b = r[4 * g + 1], c = r[4 * g + 2], d = r[4 * g + 3];
    const __m512 lo_ab = _mm512_unpacklo_ps(a, b), hi_ab = _mm512_unpackhi_ps(a, b);
    const __m512 lo_cd = _mm512_unpacklo_ps(c, d), hi_cd = _mm512_unpackhi_ps(c, d);
    t[4 * g] = _mm512_shuffle_ps(lo_ab, lo_cd, 0x44);
    t[4 * g + 1] = _mm512_shuffle_ps(lo_ab, lo_cd, 0xEE);
    t[4 * g + 2] = _mm512_shuffle_ps(hi_ab, hi_cd, 0x44);
    t[4 * g + 3] = _mm512_shuffle_ps(hi_ab, hi_cd, 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    const __m512 a01 = _mm512_shuffle_f32x4(t[i], t[4 + i], 0x44),
                 a23 = _mm512_shuffle_f32x4(t[i], t[4 + i], 0xEE),
                 b01 = _mm512_shuffle_f32x4(t[8 + i], t[12 + i], 0x44),
                 b23 = _mm512_shuffle_f32x4(t[8 + i], t[12 + i], 0xEE);
    r[i] = _mm512_shuffle_f32x4(a01, b01, 0x88);
    r[4 + i] = _mm512_shuffle_f32x4(a01, b01, 0xDD);
    r[8 + i] = _mm512_shuffle_f32x4(a23, b23, 0x88);
    r[12 + i] = _mm512_shuffle_f32x4(a23, b23, 0xDD);
  }
}

#endif
