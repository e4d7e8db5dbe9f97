/*
 * simd_neon.h — the AArch64 NEON mapping of the SIMD vocabulary (simd.h):
 * 128-bit vectors of 4 floats, fused multiply-add, and the 32 vector
 * registers of AArch64, which hold the whole 6 x 16 register tile.
 * NEON is part of the AArch64 base ISA: no compiler flags, no CPU check.
 */
#ifndef STSA_KERNEL_SIMD_SIMD_NEON_H
#define STSA_KERNEL_SIMD_SIMD_NEON_H

#if !defined(__aarch64__)
#error "simd_neon.h: the NEON mapping is for AArch64 targets"
#endif

#include <arm_neon.h>

#define VF32_LANES 4
#define SIMD_REGS 32

typedef float32x4_t vf32;
typedef uint32x4_t vmask;

static inline vf32 vf32_load(const float *p) { return vld1q_f32(p); }
static inline void vf32_store(float *p, vf32 v) { vst1q_f32(p, v); }
static inline vf32 vf32_zero(void) { return vdupq_n_f32(0.0f); }
static inline vf32 vf32_set1(float x) { return vdupq_n_f32(x); }
static inline vf32 vf32_add(vf32 a, vf32 b) { return vaddq_f32(a, b); }
static inline vf32 vf32_sub(vf32 a, vf32 b) { return vsubq_f32(a, b); }
static inline vf32 vf32_mul(vf32 a, vf32 b) { return vmulq_f32(a, b); }
static inline vf32 vf32_fma(vf32 a, vf32 b, vf32 c) { return vfmaq_f32(c, a, b); }
/* FMAX gives NaN when either lane is NaN */
static inline vf32 vf32_max(vf32 a, vf32 b) { return vmaxq_f32(a, b); }
static inline float vf32_hmax(vf32 v) { return vmaxvq_f32(v); }
static inline float vf32_hsum(vf32 v) { return vaddvq_f32(v); }
/* FRINTN: to nearest, ties to even, whatever the rounding mode */
static inline vf32 vf32_round(vf32 v) { return vrndnq_f32(v); }
static inline vmask vf32_lt(vf32 a, vf32 b) { return vcltq_f32(a, b); }
static inline vmask vf32_ge(vf32 a, vf32 b) { return vcgeq_f32(a, b); }
static inline vf32 vf32_select(vmask m, vf32 a, vf32 b) { return vbslq_f32(m, a, b); }

static inline vf32 vf32_mul_pow2(vf32 v, vf32 n) {
  int32x4_t e = vshlq_n_s32(vcvtq_s32_f32(n), 23);
  return vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(v), e));
}

#endif
