/*
 * microkernels_body.h — the micro-kernels (contracts in kernels.h) written
 * once on the SIMD vocabulary (kernel/simd/simd.h), so that every mapping
 * of the vocabulary compiles the same source.
 *
 * Included once by each kernel file, after it has chosen the mapping
 * (STSA_SIMD_NEON, STSA_SIMD_AVX2 or none) and defined MK_SUFFIX; it defines the static
 * functions qk_<suffix>, softmax_<suffix> and pv_<suffix>, and
 * fill_<suffix>(t), which sets mr, nr and those three entries of a table.
 *
 * The register tile is the portable one, STSA_PORTABLE_MR x STSA_PORTABLE_NR
 * (6 x 16). qk and pv run it in blocks of MK_ROWS rows, as many as the
 * mapping's registers hold with one panel row and a broadcast beside the
 * accumulators: with 4 lanes, 6 rows (24 accumulators) on the 32 registers
 * of NEON, 2 rows on the 16 of SSE2, where 6 would spill; with the 8 lanes
 * of AVX2, 6 rows (12 accumulators) on its 16. The loops over
 * the rows and vectors of a block have constant counts, and the unroll
 * pragmas (clang reads them too) unroll them completely: the accumulators
 * are then registers, not memory.
 */
#ifndef MK_SUFFIX
#error                                                                                   \
    "define MK_SUFFIX (the name suffix of the kernels) before including microkernels_body.h"
#endif

#include "kernel/exp2_poly.h"
#include "kernel/kernels.h"
#include "kernel/simd/simd.h"

#define MK_CAT2(a, b) a##_##b
#define MK_CAT(a, b) MK_CAT2(a, b)
#define MK_FN(name) MK_CAT(name, MK_SUFFIX)

#define MK_NR STSA_PORTABLE_NR
#define MK_NV (MK_NR / VF32_LANES) /* vectors in one row of the tile */
#define MK_FITS(rows) ((rows)*MK_NV + MK_NV + 1 <= SIMD_REGS)
#define MK_ROWS (MK_FITS(6) ? 6 : MK_FITS(3) ? 3 : MK_FITS(2) ? 2 : 1)
#define MK_STEP (SIMD_CHAINS * VF32_LANES) /* columns of one softmax step */
_Static_assert(MK_NR % VF32_LANES == 0, "the panel width must be whole vectors");
_Static_assert(MK_NR % MK_STEP == 0, "the softmax's chains must tile a panel's width");
_Static_assert(STSA_PORTABLE_MR % MK_ROWS == 0, "row blocks must tile mr");

/* The row blocks' helpers must inline: block_update's accumulators are
 * registers only once its caller's loops and its own are one piece of code
 * (clang keeps a shared block_update out of line, its accumulators in
 * memory: half the speed). */
#if defined(__GNUC__)
#define MK_INLINE inline __attribute__((always_inline))
#else
#define MK_INLINE inline
#endif

/* #pragma GCC unroll n, n a macro of the mapping (SIMD_K_UNROLL) */
#define MK_PRAGMA(text) _Pragma(#text)
#define MK_UNROLL(n) MK_PRAGMA(GCC unroll n)

/* acc[r] += sum_{k < kdim} a[r lda + k] * panel[k][0..NR) for r < MK_ROWS:
 * a block's rank-kdim update, which is all of qk (a = q, panel = K^T) and
 * pv (a = p, panel = V) but for how acc starts and ends. */
static MK_INLINE void block_update(vf32 acc[MK_ROWS][MK_NV], const float *a, int64_t lda,
                                   int kdim, const float *panel) {
#if SIMD_K_UNROLL > 0
  MK_UNROLL(SIMD_K_UNROLL)
#endif
  for (int k = 0; k < kdim; k++) {
    vf32 b[MK_NV];
#pragma GCC unroll 32
    for (int j = 0; j < MK_NV; j++)
      b[j] = vf32_load(panel + k * MK_NR + j * VF32_LANES);
#pragma GCC unroll 32
    for (int r = 0; r < MK_ROWS; r++) {
      vf32 x = vf32_set1(a[r * lda + k]);
#pragma GCC unroll 32
      for (int j = 0; j < MK_NV; j++)
        acc[r][j] = vf32_fma(x, b[j], acc[r][j]);
    }
  }
}

/* s[r][0..NR) = q_r . panel (D x NR) for r < MK_ROWS, q rows D apart and
 * s rows ld_s apart; folds each row's maximum into rowmax[r]. */
static MK_INLINE void qk_rows(const float *q, int D, const float *panel, float *s,
                              int ld_s, float *rowmax) {
  vf32 acc[MK_ROWS][MK_NV];
#pragma GCC unroll 32
  for (int r = 0; r < MK_ROWS; r++)
#pragma GCC unroll 32
    for (int j = 0; j < MK_NV; j++)
      acc[r][j] = vf32_zero();
  block_update(acc, q, D, D, panel);
#pragma GCC unroll 32
  for (int r = 0; r < MK_ROWS; r++) {
    vf32 mx = acc[r][0];
#pragma GCC unroll 32
    for (int j = 0; j < MK_NV; j++) {
      vf32_store(s + (int64_t)r * ld_s + j * VF32_LANES, acc[r][j]);
      mx = vf32_max(mx, acc[r][j]);
    }
    float m = vf32_hmax(mx);
    rowmax[r] = m > rowmax[r] ? m : rowmax[r];
  }
}

/* o[r][0..NR) = alpha[r] * o[r] + p_r[0..n) . panel (n x NR) for
 * r < MK_ROWS, p rows ld_p apart and o rows ld_o apart. The tile's sum
 * starts from 0 and joins o at the end (kernels.h: a chain per tile). */
static MK_INLINE void pv_rows(const float *p, int ld_p, int n, const float *panel,
                              float *o, int ld_o, const float *alpha) {
  vf32 acc[MK_ROWS][MK_NV];
#pragma GCC unroll 32
  for (int r = 0; r < MK_ROWS; r++)
#pragma GCC unroll 32
    for (int j = 0; j < MK_NV; j++)
      acc[r][j] = vf32_zero();
  block_update(acc, p, ld_p, n, panel);
#pragma GCC unroll 32
  for (int r = 0; r < MK_ROWS; r++) {
    vf32 a = vf32_set1(alpha[r]);
#pragma GCC unroll 32
    for (int j = 0; j < MK_NV; j++) {
      float *at = o + (int64_t)r * ld_o + j * VF32_LANES;
      vf32_store(at, vf32_fma(a, vf32_load(at), acc[r][j]));
    }
  }
}

/* 2^(x - n) * 2^n, n = x rounded: the polynomial of exp2_poly.h, for x in
 * [STSA_EXP2_MIN, 0] (and NaN, on the mappings that carry it). */
static inline vf32 exp2_in_range(vf32 x) {
  vf32 n = vf32_round(x);
  vf32 f = vf32_sub(x, n);
  vf32 p = vf32_set1(STSA_EXP2_C5);
  p = vf32_fma(p, f, vf32_set1(STSA_EXP2_C4));
  p = vf32_fma(p, f, vf32_set1(STSA_EXP2_C3));
  p = vf32_fma(p, f, vf32_set1(STSA_EXP2_C2));
  p = vf32_fma(p, f, vf32_set1(STSA_EXP2_C1));
  p = vf32_fma(p, f, vf32_set1(1.0f));
  return vf32_mul_pow2(p, n);
}

/* 2^x for x <= 0 (a score minus its row's maximum; exp2_poly.h): x below
 * STSA_EXP2_MIN, -inf included, gives exactly 0 and NaN gives NaN. */
static inline vf32 exp2_vf32(vf32 x) {
  const vf32 lo = vf32_set1(STSA_EXP2_MIN);
#if SIMD_NAN_FLOWS
  /* NaN lanes go through the clamp and the polynomial as NaN, and the lanes
   * below range are cleared at the end: 3 operations around the polynomial */
  return vf32_keep(exp2_in_range(vf32_max(lo, x)), vf32_nlt(x, lo));
#else
  /* NaN lanes are clamped before the polynomial and selected at the end, so
   * that the mapping need not carry NaN through its rounding or integer
   * conversion: 5 operations */
  vmask in_range = vf32_ge(x, lo); /* false for NaN */
  vf32 p = exp2_in_range(vf32_select(in_range, x, lo));
  return vf32_select(in_range, p, vf32_select(vf32_lt(x, lo), vf32_zero(), x));
#endif
}

/* exp2 of one float: every lane holds it; lane 0 is read (compilers make
 * the store and load one lane move). */
static inline float exp2_f32(float x) {
  float lanes[VF32_LANES];
  vf32_store(lanes, exp2_vf32(vf32_set1(x)));
  return lanes[0];
}

static void MK_FN(qk)(const float *q, int D, const float *panel, float *s, int ld_s,
                      float *rowmax) {
  for (int r = 0; r < STSA_PORTABLE_MR; r += MK_ROWS)
    qk_rows(q + r * D, D, panel, s + (int64_t)r * ld_s, ld_s, rowmax + r);
}

static void MK_FN(softmax)(float *s, int ld_s, int rows, int n, float *m, float *l,
                           float *alpha, const float *tile_max) {
  const int n_pad = (n + MK_NR - 1) / MK_NR * MK_NR;
  for (int r = 0; r < rows; r++) {
    float *row = s + (int64_t)r * ld_s;
    /* whole vectors up to n_pad: padding columns as -inf change no maximum
     * and give p = 0 */
    for (int c = n; c < n_pad; c++)
      row[c] = -INFINITY;
    float mx = m[r];
    if (tile_max) {
      mx = tile_max[r] > mx ? tile_max[r] : mx;
    } else {
      vf32 vmax[SIMD_CHAINS];
#pragma GCC unroll 32
      for (int k = 0; k < SIMD_CHAINS; k++)
        vmax[k] = vf32_set1(mx);
      for (int c = 0; c < n_pad; c += MK_STEP)
#pragma GCC unroll 32
        for (int k = 0; k < SIMD_CHAINS; k++)
          vmax[k] = vf32_max(vmax[k], vf32_load(row + c + k * VF32_LANES));
#pragma GCC unroll 32
      for (int k = 1; k < SIMD_CHAINS; k++)
        vmax[0] = vf32_max(vmax[0], vmax[k]);
      mx = vf32_hmax(vmax[0]);
    }
    /* A row with nothing kept so far keeps m = -inf; subtracting 0 instead
     * makes every p exp2(-inf) = 0 and avoids -inf - -inf = NaN. */
    const float base = mx == -INFINITY ? 0.0f : mx;
    const vf32 vbase = vf32_set1(base);
    vf32 sum[SIMD_CHAINS];
#pragma GCC unroll 32
    for (int k = 0; k < SIMD_CHAINS; k++)
      sum[k] = vf32_zero();
    for (int c = 0; c < n_pad; c += MK_STEP)
#pragma GCC unroll 32
      for (int k = 0; k < SIMD_CHAINS; k++) {
        float *at = row + c + k * VF32_LANES;
        vf32 pc = exp2_vf32(vf32_sub(vf32_load(at), vbase));
        vf32_store(at, pc);
        sum[k] = vf32_add(sum[k], pc);
      }
#pragma GCC unroll 32
    for (int k = 1; k < SIMD_CHAINS; k++)
      sum[0] = vf32_add(sum[0], sum[k]);
    /* padding gave 0, or NaN in a row NaN has reached; the contract says 0 */
    for (int c = n; c < n_pad; c++)
      row[c] = 0.0f;
    alpha[r] = exp2_f32(m[r] - base);
    l[r] = alpha[r] * l[r] + vf32_hsum(sum[0]);
    m[r] = mx;
  }
}

static void MK_FN(pv)(const float *p, int ld_p, int n, const float *panel, float *o,
                      int ld_o, const float *alpha) {
  for (int r = 0; r < STSA_PORTABLE_MR; r += MK_ROWS)
    pv_rows(p + (int64_t)r * ld_p, ld_p, n, panel, o + (int64_t)r * ld_o, ld_o,
            alpha + r);
}

static void MK_FN(fill)(stsa_kernels *t) {
  t->mr = STSA_PORTABLE_MR;
  t->nr = MK_NR;
  t->qk = MK_FN(qk);
  t->softmax = MK_FN(softmax);
  t->pv = MK_FN(pv);
}
