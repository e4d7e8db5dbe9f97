/* convert.c — f16/bf16 <-> f32, row loads and stores for any dtype/stride. */
#include "core/convert.h"

#include <string.h>

#include "core/per_isa.h"
#include "core/tensor.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#define STSA_STREAM_STORES 1 /* x86-64: SSE2's non-temporal stores */
#endif

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float stsa_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) /* Inf / NaN */
    return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0)
      return bits_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t stsa_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) /* Inf or NaN (keep NaN quiet and non-zero) */
    return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow */
    return (uint16_t)(sign | 0x7c00u);
  if (abs < 0x38800000u) { /* below the smallest normal f16: subnormal or 0 */
    /* 2^-24 units; adding 0.5 (as float) rounds to nearest even */
    float v = bits_f32(abs) * 16777216.0f;
    uint32_t m = (uint32_t)v;
    float frac = v - (float)m;
    if (frac > 0.5f || (frac == 0.5f && (m & 1u)))
      m++;
    return (uint16_t)(sign | m);
  }
  /* normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even */
  uint32_t r = abs - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

float stsa_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* Round to nearest even; a NaN stays a quiet NaN. Branch-free (both
 * results, then a select), so that the row loops over it vectorise. */
static inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t nan = (u >> 16) | 0x40u,
                 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

uint16_t stsa_f32_to_bf16(float f) { return f32_to_bf16(f); }

void stsa_load_row_rest(const void *src, int dtype, int64_t stride, int64_t from,
                        int64_t n, float *dst) {
  if (from < n)
    stsa_load_row_f32((const char *)src +
                          (size_t)(from * stride) * stsa_dtype_size((stsa_dtype)dtype),
                      (stsa_dtype)dtype, stride, n - from, dst + from);
}

void stsa_load_row_f32(const void *src, stsa_dtype dtype, int64_t stride, int64_t n,
                       float *dst) {
  if (dtype == STSA_F32) {
    const float *s = src;
    if (stride == 1)
      memcpy(dst, s, (size_t)n * sizeof *dst);
    else
      for (int64_t i = 0; i < n; i++)
        dst[i] = s[i * stride];
  } else {
    const uint16_t *s = src;
    if (dtype == STSA_F16)
      for (int64_t i = 0; i < n; i++)
        dst[i] = stsa_f16_to_f32(s[i * stride]);
    else
      for (int64_t i = 0; i < n; i++)
        dst[i] = stsa_bf16_to_f32(s[i * stride]);
  }
}

void stsa_store_row(const float *src, int64_t n, void *dst, stsa_dtype dtype,
                    int64_t stride) {
  if (dtype == STSA_F32) {
    float *d = dst;
    for (int64_t i = 0; i < n; i++)
      d[i * stride] = src[i];
  } else {
    uint16_t *d = dst;
    if (dtype == STSA_F16)
      for (int64_t i = 0; i < n; i++)
        d[i * stride] = stsa_f32_to_f16(src[i]);
    else if (stride == 1)
      for (int64_t i = 0; i < n; i++)
        d[i] = f32_to_bf16(src[i]);
    else
      for (int64_t i = 0; i < n; i++)
        d[i * stride] = f32_to_bf16(src[i]);
  }
}

/* A non-temporal store writes whole lines without reading them first: a row
 * scattered to a place the hardware prefetcher cannot guess (an SVG2 call's
 * output, in token order from a cluster-ordered tile) otherwise costs a
 * read from memory before its write (an f32 Wan-480p SVG2 call ~1% slower,
 * paired). Rows of 16-byte multiples at 16-byte aligned addresses only; the
 * others take stsa_store_row. */
void stsa_store_row_streaming(const float *src, int64_t n, void *dst, stsa_dtype dtype,
                              int64_t stride) {
#ifdef STSA_STREAM_STORES
  const int64_t bytes = n * (int64_t)stsa_dtype_size(dtype);
  if (stride == 1 && bytes % 16 == 0 && ((uintptr_t)dst & 15) == 0 &&
      n <= STSA_MAX_HEAD_DIM) {
    if (dtype == STSA_F32) {
      for (int64_t i = 0; i < n; i += 4)
        _mm_stream_ps((float *)dst + i, _mm_loadu_ps(src + i));
      return;
    }
    __m128i half[STSA_MAX_HEAD_DIM / 8]; /* the row converted, 16-byte aligned */
    stsa_store_row(src, n, half, dtype, 1);
    for (int64_t i = 0; i < n / 8; i++)
      _mm_stream_si128((__m128i *)dst + i, half[i]);
    return;
  }
#endif
  stsa_store_row(src, n, dst, dtype, stride);
}

void stsa_store_fence(void) {
#ifdef STSA_STREAM_STORES
  _mm_sfence();
#endif
}

/* The scans OR a flag over the whole row instead of returning at the first
 * NaN/Inf: rows are short (a head dim), finite inputs are the case to make
 * fast, and the loops then vectorise (in the CPU's widest vectors: a scan
 * of every V row in SSE2 was ~0.5% of a Wan-480p SVG2 call). */
STSA_PER_ISA static int row_is_finite(const void *src, stsa_dtype dtype, int64_t stride,
                                      int64_t n) {
  unsigned bad = 0;
  if (dtype == STSA_F32) {
    const float *s = src; /* exponent all ones: NaN or Inf */
    if (stride == 1)
      for (int64_t i = 0; i < n; i++)
        bad |= (f32_bits(s[i]) & 0x7f800000u) == 0x7f800000u;
    else
      for (int64_t i = 0; i < n; i++)
        bad |= (f32_bits(s[i * stride]) & 0x7f800000u) == 0x7f800000u;
    return !bad;
  }
  /* f16 exponent field is bits 10-14, bf16's is bits 7-14 */
  const uint16_t *s = src;
  const uint16_t mask = dtype == STSA_F16 ? 0x7c00u : 0x7f80u;
  if (stride == 1)
    for (int64_t i = 0; i < n; i++)
      bad |= (s[i] & mask) == mask;
  else
    for (int64_t i = 0; i < n; i++)
      bad |= (s[i * stride] & mask) == mask;
  return !bad;
}

/* The clones behind a static function: clang resolves those of an external
 * one only where every caller's declaration carries the attribute. */
int stsa_row_is_finite(const void *src, stsa_dtype dtype, int64_t stride, int64_t n) {
  return row_is_finite(src, dtype, stride, n);
}
