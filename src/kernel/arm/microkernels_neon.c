/*
 * microkernels_neon.c — AArch64 NEON micro-kernels (contracts in kernels.h):
 * the portable kernels' source (generic/microkernels_body.h) on the NEON
 * mapping of the SIMD vocabulary (simd/simd_neon.h). With 32 vector
 * registers the whole 6 x 16 tile is one block of 24 accumulators, and the
 * multiply-adds are fused. Contiguous f16 rows convert with FCVTL and bf16
 * rows with a widening shift; the rest of load_row is the portable one.
 *
 * AArch64 only: CMake compiles src/kernel/arm only for AArch64 targets
 * (NEON is in the base ISA: no flags), and the guard keeps this file empty
 * anywhere else (dispatch.c registers it on AArch64 only).
 */
#if defined(__aarch64__)
#if defined(__GNUC__) && !defined(__clang__)
/* gcc's first scheduling pass hoists the loads of a whole inner step (six
 * broadcasts, four panel vectors) above its multiply-adds: with the 24
 * accumulators that is more than 32 registers, and accumulators spill.
 * Unscheduled, 24 accumulators + 4 panel vectors + 1 broadcast fit (gcc 12:
 * no stack access in the inner loops of qk and pv). */
#pragma GCC optimize("no-schedule-insns")
#endif
#define STSA_SIMD_NEON 1
#define MK_SUFFIX neon
#include "kernel/generic/microkernels_body.h"

#include "core/convert.h"

static void load_row_neon(const void *src, int dtype, int64_t stride, int64_t n,
                          float *dst) {
  const uint16_t *s = src;
  int64_t i = 0;
  if (stride == 1 && dtype == STSA_F16) {
    for (; i + 8 <= n; i += 8) {
      float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(s + i));
      vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
      vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
  } else if (stride == 1 && dtype == STSA_BF16) {
    /* a bf16 is the high half of an f32 */
    for (; i + 8 <= n; i += 8) {
      uint16x8_t w = vld1q_u16(s + i);
      vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w), 16)));
      vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(w, 16)));
    }
  }
  stsa_load_row_rest(src, dtype, stride, i, n, dst);
}

void stsa_kernels_override_neon(stsa_kernels *t) {
  t->name = "neon";
  fill_neon(t);
  t->load_row = load_row_neon;
}
#endif /* AArch64 */
