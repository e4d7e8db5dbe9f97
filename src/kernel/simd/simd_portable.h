/*
 * simd_portable.h — the portable mapping of the SIMD vocabulary (simd.h):
 * no ISA-specific code, for any C11 compiler.
 *
 * With GCC or clang the vector is the compiler's generic vector type, which
 * it maps to the target's own vectors (SSE2 on every x86-64, NEON on arm64,
 * ...) or splits into what the target has; written as plain loops, the
 * accumulators would stay in memory (~10x slower). Other compilers, and
 * STSA_SIMD_PLAIN (defined to check this path), get plain arrays of lanes.
 * The generic vectors also need float arithmetic without excess precision
 * (vf32_round relies on it), which rules out x87 (i386 without SSE math).
 *
 * STSA_SIMD_PORTABLE_LANES sets the width (4, 8 or 16 floats; default 4,
 * the 128-bit vectors every 64-bit target has). SIMD_REGS is 16, the vector
 * registers of SSE2 on x86-64, the smallest file of the targets in view.
 */
#ifndef STSA_KERNEL_SIMD_SIMD_PORTABLE_H
#define STSA_KERNEL_SIMD_SIMD_PORTABLE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef STSA_SIMD_PORTABLE_LANES
#define STSA_SIMD_PORTABLE_LANES 4
#endif
#define VF32_LANES STSA_SIMD_PORTABLE_LANES
#define SIMD_REGS 16

#if defined(__GNUC__) && !defined(STSA_SIMD_PLAIN) && __FLT_EVAL_METHOD__ == 0
/* ------------------------------------------------ generic vector types */
#if VF32_LANES > 4 && !defined(__clang__)
/* wider than the target's vectors: gcc warns that passing them changes the
 * ABI, which no static function of a kernel file crosses */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float vf32 __attribute__((vector_size(4 * VF32_LANES)));
typedef int32_t vmask __attribute__((vector_size(4 * VF32_LANES))); /* 0 or -1 */
typedef uint32_t simd_u32 __attribute__((vector_size(4 * VF32_LANES)));

static inline vf32 vf32_load(const float *p) {
  vf32 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void vf32_store(float *p, vf32 v) { memcpy(p, &v, sizeof v); }

static inline vf32 vf32_zero(void) { return (vf32){0}; }

/* The scalar operand is broadcast, and x - (+0) is x for every x (-0 and
 * NaN included): gcc and clang emit one shuffle, where lane stores would
 * build the vector lane by lane. */
static inline vf32 vf32_set1(float x) { return x - vf32_zero(); }

static inline vf32 vf32_add(vf32 a, vf32 b) { return a + b; }
static inline vf32 vf32_sub(vf32 a, vf32 b) { return a - b; }
static inline vf32 vf32_mul(vf32 a, vf32 b) { return a * b; }
static inline vf32 vf32_fma(vf32 a, vf32 b, vf32 c) { return a * b + c; }
static inline vmask vf32_lt(vf32 a, vf32 b) { return a < b; }
static inline vmask vf32_ge(vf32 a, vf32 b) { return a >= b; }

static inline vf32 vf32_select(vmask m, vf32 a, vf32 b) {
  return (vf32)((m & (vmask)a) | (~m & (vmask)b));
}

/* a > b ? a : b lane by lane, which compilers see as SSE's maxps or NEON's
 * fmax (vector ?: is C++ only, and the masks of vf32_select they do not) */
static inline vf32 vf32_max(vf32 a, vf32 b) {
  for (int i = 0; i < VF32_LANES; i++)
    a[i] = a[i] > b[i] ? a[i] : b[i];
  return a;
}

static inline float vf32_hmax(vf32 v) {
  float m = v[0];
  for (int i = 1; i < VF32_LANES; i++)
    m = v[i] > m ? v[i] : m;
  return m;
}

static inline float vf32_hsum(vf32 v) {
  float s = v[0];
  for (int i = 1; i < VF32_LANES; i++)
    s += v[i];
  return s;
}

/* Adding 1.5 * 2^23 leaves no fraction bits, so the sum is rounded to an
 * integer in the current (nearest-even) mode; subtracting it is exact. */
static inline vf32 vf32_round(vf32 v) {
  const vf32 magic = vf32_set1(0x1.8p23f);
  return (v + magic) - magic;
}

static inline vf32 vf32_mul_pow2(vf32 v, vf32 n) {
  simd_u32 e = (simd_u32) __builtin_convertvector(n, vmask) << 23;
  return (vf32)((simd_u32)v + e);
}

#else
/* ------------------------------------------------ plain arrays of lanes */
typedef struct {
  float lane[VF32_LANES];
} vf32;
typedef struct {
  int lane[VF32_LANES]; /* 0 or 1 */
} vmask;

static inline vf32 vf32_load(const float *p) {
  vf32 v;
  memcpy(v.lane, p, sizeof v.lane);
  return v;
}

static inline void vf32_store(float *p, vf32 v) { memcpy(p, v.lane, sizeof v.lane); }

static inline vf32 vf32_set1(float x) {
  vf32 v;
  for (int i = 0; i < VF32_LANES; i++)
    v.lane[i] = x;
  return v;
}

static inline vf32 vf32_zero(void) { return vf32_set1(0.0f); }

static inline vf32 vf32_add(vf32 a, vf32 b) {
  for (int i = 0; i < VF32_LANES; i++)
    a.lane[i] += b.lane[i];
  return a;
}

static inline vf32 vf32_sub(vf32 a, vf32 b) {
  for (int i = 0; i < VF32_LANES; i++)
    a.lane[i] -= b.lane[i];
  return a;
}

static inline vf32 vf32_mul(vf32 a, vf32 b) {
  for (int i = 0; i < VF32_LANES; i++)
    a.lane[i] *= b.lane[i];
  return a;
}

static inline vf32 vf32_fma(vf32 a, vf32 b, vf32 c) {
  for (int i = 0; i < VF32_LANES; i++)
    c.lane[i] += a.lane[i] * b.lane[i];
  return c;
}

static inline vmask vf32_lt(vf32 a, vf32 b) {
  vmask m;
  for (int i = 0; i < VF32_LANES; i++)
    m.lane[i] = a.lane[i] < b.lane[i];
  return m;
}

static inline vmask vf32_ge(vf32 a, vf32 b) {
  vmask m;
  for (int i = 0; i < VF32_LANES; i++)
    m.lane[i] = a.lane[i] >= b.lane[i];
  return m;
}

static inline vf32 vf32_select(vmask m, vf32 a, vf32 b) {
  for (int i = 0; i < VF32_LANES; i++)
    a.lane[i] = m.lane[i] ? a.lane[i] : b.lane[i];
  return a;
}

static inline vf32 vf32_max(vf32 a, vf32 b) {
  for (int i = 0; i < VF32_LANES; i++)
    a.lane[i] = a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i];
  return a;
}

static inline float vf32_hmax(vf32 v) {
  float m = v.lane[0];
  for (int i = 1; i < VF32_LANES; i++)
    m = v.lane[i] > m ? v.lane[i] : m;
  return m;
}

static inline float vf32_hsum(vf32 v) {
  float s = v.lane[0];
  for (int i = 1; i < VF32_LANES; i++)
    s += v.lane[i];
  return s;
}

static inline vf32 vf32_round(vf32 v) {
  for (int i = 0; i < VF32_LANES; i++)
    v.lane[i] = nearbyintf(v.lane[i]);
  return v;
}

static inline vf32 vf32_mul_pow2(vf32 v, vf32 n) {
  for (int i = 0; i < VF32_LANES; i++) {
    uint32_t bits;
    memcpy(&bits, &v.lane[i], sizeof bits);
    bits += (uint32_t)(int32_t)n.lane[i] << 23;
    memcpy(&v.lane[i], &bits, sizeof bits);
  }
  return v;
}
#endif

#endif
