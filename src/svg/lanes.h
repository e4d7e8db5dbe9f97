/*
 * lanes.h — LANES independent float sums as one vector (GCC and clang
 * vector extensions: one AVX-512 register, two AVX2 ones, four SSE or NEON
 * ones), for the estimates' loops over a row (svg_pool.c, svg_strata.c,
 * svg_unit_scores.c, svg2_bound.c).
 * The same lanes in the same order whatever the vector width, so a result
 * does not depend on which ISA ran it. Arrays of LANES partial sums left
 * the compiler to find the vectors, and with two sums in a loop (a key's
 * two cells) or a running maximum GCC 12 went scalar.
 *
 * Only lanes by value inside a function and pointers across calls: a
 * 64-byte vector passed or returned by value changes the ABI between the
 * per-ISA clones (-Wpsabi).
 */
#ifndef STSA_SVG_LANES_H
#define STSA_SVG_LANES_H

#include <stdint.h>
#include <string.h>

enum { LANES = 16 };

typedef float lanes_f32 __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t lanes_i32 __attribute__((vector_size(LANES * sizeof(int32_t))));
/* lanes at any float's address: an unaligned load or store */
typedef float lanes_any
    __attribute__((vector_size(LANES * sizeof(float)), aligned(4), may_alias));
typedef float half_lanes __attribute__((vector_size(LANES / 2 * sizeof(float))));
typedef float quarter_lanes __attribute__((vector_size(LANES / 4 * sizeof(float))));

/* The LANES floats from p (any float's address), as lanes. */
#define LANES_AT(p) (*(const lanes_any *)(p))
/* The LANES floats from p as an lvalue. */
#define LANES_OUT(p) (*(lanes_any *)(p))

/* The sum of v's lanes as a tree of halves: a few vector adds, not a chain
 * of LANES dependent ones. */
static inline float lanes_total(const lanes_f32 *v) {
  half_lanes h[2];
  memcpy(h, v, sizeof h);
  const half_lanes x = h[0] + h[1];
  quarter_lanes q[2];
  memcpy(q, &x, sizeof q);
  const quarter_lanes y = q[0] + q[1];
  return (y[0] + y[2]) + (y[1] + y[3]);
}

/* a . b over n floats: LANES partial sums, the rest added after. */
static inline float lanes_dot(const float *restrict a, const float *restrict b,
                              int64_t n) {
  lanes_f32 acc = {0};
  float tail = 0;
  int64_t d = 0;
  for (; d + LANES <= n; d += LANES)
    acc += LANES_AT(a + d) * LANES_AT(b + d);
  for (; d < n; d++)
    tail += a[d] * b[d];
  return lanes_total(&acc) + tail;
}

/* *top = the larger of *top and x, lane by lane (a NaN in x never wins). */
static inline void lanes_raise(lanes_f32 *top, const lanes_f32 *x) {
  const lanes_i32 more = *x > *top;
  *top = (lanes_f32)(((lanes_i32)*x & more) | ((lanes_i32)*top & ~more));
}

/* The largest of v's lanes. */
static inline float lanes_max(const lanes_f32 *v) {
  float t[LANES];
  memcpy(t, v, sizeof t);
  for (int w = LANES / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++)
      t[l] = t[l + w] > t[l] ? t[l + w] : t[l];
  return t[0];
}

#endif
