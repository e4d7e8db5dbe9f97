/*
 * checked.h — products and sums of caller-given sizes that cannot overflow
 * silently. Signed overflow is undefined behaviour in C, so every product of
 * sizes that no check has bounded yet goes through these.
 */
#ifndef STSA_CORE_CHECKED_H
#define STSA_CORE_CHECKED_H

#include <stddef.h>
#include <stdint.h>

/* *out = a * b; returns 0, or 1 (and *out unspecified) when it overflows. */
static inline int stsa_mul_overflow(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

/* *out = a + b; returns 0, or 1 when it overflows. */
static inline int stsa_add_overflow(int64_t a, int64_t b, int64_t *out) {
  return __builtin_add_overflow(a, b, out);
}

/* a * b, or INT64_MAX when the product overflows or either is negative:
 * for sizes that only bound or report something. */
static inline int64_t stsa_mul_sat(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    return INT64_MAX;
  return r;
}

/* a + b for sizes >= 0, or INT64_MAX when the sum overflows. */
static inline int64_t stsa_add_sat(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return INT64_MAX;
  return r;
}

/* n * size in bytes, or 0 with *overflow set when it does not fit a size_t. */
static inline size_t stsa_bytes(size_t n, size_t size, int *overflow) {
  size_t r;
  if (__builtin_mul_overflow(n, size, &r)) {
    *overflow = 1;
    return 0;
  }
  return r;
}

#endif
