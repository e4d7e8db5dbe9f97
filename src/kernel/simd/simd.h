/*
 * simd.h — the SIMD vocabulary the micro-kernels are written in (ggml's
 * GGML_F32_VEC idea): one f32 vector type and the few operations the
 * kernels use, so that another vector width or ISA is one more mapping
 * header, not a rewrite of the kernels (kernel/generic/microkernels_body.h).
 *
 * Every mapping provides, with the same meaning:
 *   vf32                  VF32_LANES floats, passed and returned by value
 *   vmask                 a lane mask, what a comparison gives
 *   VF32_LANES            lanes per vector; divides STSA_PORTABLE_NR
 *   SIMD_REGS             vector registers the kernels may keep live at once
 *                         (the row blocking of qk and pv is planned with it)
 *   vf32_load(p)          VF32_LANES floats from p (any alignment)
 *   vf32_store(p, v)      the same, stored
 *   vf32_zero()           every lane 0
 *   vf32_set1(x)          every lane x (broadcast)
 *   vf32_add/sub/mul(a,b) lane by lane
 *   vf32_fma(a, b, c)     a * b + c, fused where the mapping's ISA has it
 *   vf32_max(a, b)        lane by lane; a NaN lane gives either operand
 *   vf32_hmax(v)          the largest lane, as a float (NaN as vf32_max)
 *   vf32_hsum(v)          the sum of the lanes, as a float
 *   vf32_round(v)         to the nearest integer, ties to even, |v| < 2^22
 *   vf32_mul_pow2(v, n)   v * 2^n for integral n, by adding n to the exponent
 *                         bits: no overflow, underflow or NaN handling (exp2)
 *   vf32_lt/ge(a, b)      ordered comparisons: false where a lane is NaN
 *   vf32_select(m, a, b)  m ? a : b, lane by lane
 * and may define
 *   SIMD_CHAINS           accumulators the softmax's maximum and sum loops
 *                         keep, to hide an add's latency (default 1); the
 *                         sum's rounding depends on it, so a mapping keeps
 *                         the value its kernels' results were checked with
 *   SIMD_NAN_FLOWS        1 where vf32_max(lo, NaN), vf32_round and
 *                         vf32_mul_pow2 give NaN for a NaN lane; the mapping
 *                         then also provides vf32_nlt(a, b) (a >= b or
 *                         unordered) and vf32_keep(v, m) (v where m, else 0),
 *                         and exp2 clamps with a max and clears the lanes
 *                         below range with a mask (default 0: it selects)
 *   SIMD_K_UNROLL         how far the GEMM kernels' loop over the inner
 *                         dimension is unrolled (default 0: as the
 *                         compiler chooses); changes no result
 * and brings <math.h> and <stdint.h>, which the scalar side of the kernels
 * uses (INFINITY, int64_t): the kernel sources include nothing else.
 *
 * The mapping: a file defines STSA_SIMD_NEON before including this header
 * for AArch64 NEON intrinsics, or STSA_SIMD_AVX2 for x86 AVX2+FMA ones;
 * every other file gets the portable mapping (any C11 compiler: GCC/clang
 * vector extensions where they exist, plain arrays of lanes otherwise; its
 * own header says how to choose its width).
 */
#ifndef STSA_KERNEL_SIMD_SIMD_H
#define STSA_KERNEL_SIMD_SIMD_H

#include <math.h>
#include <stdint.h>

#if defined(STSA_SIMD_NEON)
#include "kernel/simd/simd_neon.h"
#elif defined(STSA_SIMD_AVX2)
#include "kernel/simd/simd_avx2.h"
#else
#include "kernel/simd/simd_portable.h"
#endif

#ifndef SIMD_CHAINS
#define SIMD_CHAINS 1
#endif
#ifndef SIMD_NAN_FLOWS
#define SIMD_NAN_FLOWS 0
#endif
#ifndef SIMD_K_UNROLL
#define SIMD_K_UNROLL 0
#endif

#endif
