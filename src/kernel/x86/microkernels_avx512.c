/*
 * microkernels_avx512.c — AVX-512F micro-kernels (contracts in kernels.h).
 * Compiled with -mavx512f (and the AVX2 file's -mfma -mf16c); only reached
 * after a run-time CPU check (stsa_cpu_runs_avx512).
 *
 * Both GEMM kernels are 12 rows x 16 columns: one zmm per row of the tile,
 * so the panel width stays the AVX2 backend's 16 (SVG2's cluster padding,
 * k-means packing and every plan keep their granularity) and the register
 * tile grows in rows instead. Per inner step: 1 panel load and 12 FMAs whose
 * broadcast operand is a memory load ({1to16}), 12 accumulators, which
 * covers the FMA latency x throughput of two 512-bit FMA pipes. 12 rows and
 * not 16: q tiles that align to frames must divide the frame's positions
 * (Wan 480p has 1560 = 2^3 * 3 * 5 * 13, which 16 never divides).
 *
 * x86 only: CMake compiles this file only for x86 targets, and the guard
 * keeps it empty anywhere else (dispatch.c registers it on x86 only).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/convert.h"
#include "exp2_avx512.h" /* this folder */
#include "kernel/kernels.h"
#include "max_avx512.h"       /* this folder */
#include "transpose_avx512.h" /* this folder */

/* The register tile: 12 rows x 16 columns (one zmm per row). The GEMM
 * kernels also come HALF rows high (the table's `half`, kernels.h): every
 * helper below takes the rows it handles as a constant that inlining
 * resolves, so both heights are one piece of code. */
#define MR 12
#define HALF (MR / 2)
#define NR 16
#define ALWAYS_INLINE inline __attribute__((always_inline))
_Static_assert(NR <= STSA_MAX_NR, "a panel's keys fit stsa_panel_rows");

/* max(a, b) of 4-float lanes taken from two vectors by the imm8 of
 * shuffle_f32x4 (lo picks one half of each pair, hi the other). */
#define MAX_X4(a, b, lo, hi)                                                             \
  _mm512_max_ps(_mm512_shuffle_f32x4(a, b, lo), _mm512_shuffle_f32x4(a, b, hi))
#define MAX_X1(a, b, lo, hi)                                                             \
  _mm512_max_ps(_mm512_shuffle_ps(a, b, lo), _mm512_shuffle_ps(a, b, hi))

/* rowmax[r] = max(rowmax[r], lanes of c[r]) for r < 12, by a reduction tree
 * that halves the lanes per row at each level (about 40 operations where a
 * reduction per row takes about 100). After the levels, lane 4 j + i holds
 * row j + 4 i (row 8 + j again in the slot of the missing row 12 + j, whose
 * lanes are never stored). */
static ALWAYS_INLINE void fold_rowmax_tree(const __m512 c[MR], float *rowmax,
                                           const int rows) {
  /* 16 -> 8 lanes: [row a: 8 | row b: 8] */
  __m512 w01 = MAX_X4(c[0], c[1], 0x44, 0xEE), w23 = MAX_X4(c[2], c[3], 0x44, 0xEE);
  __m512 w45 = MAX_X4(c[4], c[5], 0x44, 0xEE), w67 = MAX_X4(c[6], c[7], 0x44, 0xEE);
  __m512 w89 = MAX_X4(c[8], c[9], 0x44, 0xEE), wab = MAX_X4(c[10], c[11], 0x44, 0xEE);
  /* 8 -> 4 lanes: 128-bit chunk i holds row i of the four */
  __m512 x0 = MAX_X4(w01, w23, 0x88, 0xDD), x1 = MAX_X4(w45, w67, 0x88, 0xDD);
  __m512 x2 = MAX_X4(w89, wab, 0x88, 0xDD);
  /* 4 -> 2 lanes, within chunks: chunk i = [row i: 2 | row i + 4: 2] */
  __m512 y0 = MAX_X1(x0, x1, 0x44, 0xEE), y1 = MAX_X1(x2, x2, 0x44, 0xEE);
  /* 2 -> 1 lane: chunk i = rows i, i + 4, i + 8, i + 12 */
  __m512 z = MAX_X1(y0, y1, 0x88, 0xDD);
  /* lane r <- row r: row r sits at lane 4 (r % 4) + r / 4 */
  const __m512i to_rows =
      _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  __m512 lanes = _mm512_permutexvar_ps(to_rows, z);
  const __mmask16 live = (__mmask16)((1u << rows) - 1);
  __m512 old = _mm512_maskz_loadu_ps(live, rowmax);
  /* max_ps returns its second operand where one is NaN: a NaN score stays
   * out of rowmax, as in the AVX2 kernel's scalar compare */
  _mm512_mask_storeu_ps(rowmax, live, _mm512_max_ps(lanes, old));
}

/* rowmax[r] = max(rowmax[r], lanes of c[r]) for r < rows (MR or HALF; a
 * half tile's rows fill the tree twice, and only its own lanes are
 * stored). */
static ALWAYS_INLINE void fold_rowmax(const __m512 c[MR], float *rowmax, const int rows) {
  if (rows == MR) {
    fold_rowmax_tree(c, rowmax, MR);
    return;
  }
  __m512 twice[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; r++)
    twice[r] = c[r % HALF];
  fold_rowmax_tree(twice, rowmax, HALF);
}

/* c[r] += sum_{k < kdim} a[r][k] * panel[k][0..16) for r < 12, a rows lda
 * apart: all of qk (a = q, panel = K^T) and pv (a = p, panel = V) but for
 * how c starts and ends. The rows are read as base + {0, 1, 2} * lda from
 * four bases, which x86 addressing expresses directly: twelve row pointers
 * would not fit the general registers and spill inside the loop. */
static ALWAYS_INLINE void block_update(__m512 c[MR], const float *a, int64_t lda,
                                       int kdim, const float *panel, const int rows) {
  const float *a0 = a, *a3 = a + 3 * lda, *a6 = a + 6 * lda, *a9 = a + 9 * lda;
#pragma GCC unroll 2
  for (int k = 0; k < kdim; k++) {
    const __m512 b = _mm512_load_ps(panel + k * NR);
    c[0] = _mm512_fmadd_ps(_mm512_set1_ps(a0[k]), b, c[0]);
    c[1] = _mm512_fmadd_ps(_mm512_set1_ps(a0[k + lda]), b, c[1]);
    c[2] = _mm512_fmadd_ps(_mm512_set1_ps(a0[k + 2 * lda]), b, c[2]);
    c[3] = _mm512_fmadd_ps(_mm512_set1_ps(a3[k]), b, c[3]);
    c[4] = _mm512_fmadd_ps(_mm512_set1_ps(a3[k + lda]), b, c[4]);
    c[5] = _mm512_fmadd_ps(_mm512_set1_ps(a3[k + 2 * lda]), b, c[5]);
    if (rows == HALF)
      continue;
    c[6] = _mm512_fmadd_ps(_mm512_set1_ps(a6[k]), b, c[6]);
    c[7] = _mm512_fmadd_ps(_mm512_set1_ps(a6[k + lda]), b, c[7]);
    c[8] = _mm512_fmadd_ps(_mm512_set1_ps(a6[k + 2 * lda]), b, c[8]);
    c[9] = _mm512_fmadd_ps(_mm512_set1_ps(a9[k]), b, c[9]);
    c[10] = _mm512_fmadd_ps(_mm512_set1_ps(a9[k + lda]), b, c[10]);
    c[11] = _mm512_fmadd_ps(_mm512_set1_ps(a9[k + 2 * lda]), b, c[11]);
  }
}

/* The same update on two panels at once (the 12 x 32 tile of qk2 and pv2):
 * one broadcast feeds two FMAs, so an inner step is 2 panel loads and 12
 * broadcasts for 24 FMAs. block_update's 13 loads per 12 FMAs are more than
 * two load ports give two FMA pipes (at most 12/13 of the peak, less once
 * the loop's own instructions are counted); here the loads take 7 of the 12
 * cycles. 24 accumulators, 2 panel vectors and the broadcast fit the 32
 * zmm registers. Each column's arithmetic is block_update's, in the same
 * order, so results are bitwise those of two single-panel calls. */
static ALWAYS_INLINE void block_update2(__m512 c0[MR], __m512 c1[MR], const float *a,
                                        int64_t lda, int kdim, const float *panel0,
                                        const float *panel1, const int rows) {
  const float *a0 = a, *a3 = a + 3 * lda, *a6 = a + 6 * lda, *a9 = a + 9 * lda;
#pragma GCC unroll 2
  for (int k = 0; k < kdim; k++) {
    const __m512 b0 = _mm512_load_ps(panel0 + k * NR),
                 b1 = _mm512_load_ps(panel1 + k * NR);
    __m512 x;
#define STSA_ROW2(r, ptr)                                                                \
  x = _mm512_set1_ps(ptr);                                                               \
  c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);                                                 \
  c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
    STSA_ROW2(0, a0[k])
    STSA_ROW2(1, a0[k + lda])
    STSA_ROW2(2, a0[k + 2 * lda])
    STSA_ROW2(3, a3[k])
    STSA_ROW2(4, a3[k + lda])
    STSA_ROW2(5, a3[k + 2 * lda])
    if (rows == HALF)
      continue;
    STSA_ROW2(6, a6[k])
    STSA_ROW2(7, a6[k + lda])
    STSA_ROW2(8, a6[k + 2 * lda])
    STSA_ROW2(9, a9[k])
    STSA_ROW2(10, a9[k + lda])
    STSA_ROW2(11, a9[k + 2 * lda])
#undef STSA_ROW2
  }
}

static ALWAYS_INLINE void qk_rows(const float *q, int D, const float *panel, float *s,
                                  int ld_s, float *rowmax, const int rows) {
  __m512 c[MR];
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++)
    c[r] = _mm512_setzero_ps();
  block_update(c, q, D, D, panel, rows);
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++)
    _mm512_storeu_ps(s + (int64_t)r * ld_s, c[r]);
  fold_rowmax(c, rowmax, rows);
}

static void qk_avx512(const float *q, int D, const float *panel, float *s, int ld_s,
                      float *rowmax) {
  qk_rows(q, D, panel, s, ld_s, rowmax, MR);
}

static void qk_half_avx512(const float *q, int D, const float *panel, float *s, int ld_s,
                           float *rowmax) {
  qk_rows(q, D, panel, s, ld_s, rowmax, HALF);
}

/* qk on two K^T panels (kernels.h: qk2). */
static ALWAYS_INLINE void qk2_rows(const float *q, int D, const float *panel0,
                                   const float *panel1, float *s0, float *s1, int ld_s,
                                   float *rowmax0, float *rowmax1, const int rows) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++)
    c0[r] = c1[r] = _mm512_setzero_ps();
  block_update2(c0, c1, q, D, D, panel0, panel1, rows);
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++) { /* s0 before s1 in each row (kernels.h) */
    _mm512_storeu_ps(s0 + (int64_t)r * ld_s, c0[r]);
    _mm512_storeu_ps(s1 + (int64_t)r * ld_s, c1[r]);
  }
  if (rowmax1 != rowmax0) {
    fold_rowmax(c0, rowmax0, rows);
    fold_rowmax(c1, rowmax1, rows);
    return;
  }
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++)
    c0[r] = _mm512_max_ps(c0[r], c1[r]);
  fold_rowmax(c0, rowmax0, rows);
}

static void qk2_avx512(const float *q, int D, const float *panel0, const float *panel1,
                       float *s0, float *s1, int ld_s, float *rowmax0, float *rowmax1) {
  qk2_rows(q, D, panel0, panel1, s0, s1, ld_s, rowmax0, rowmax1, MR);
}

static void qk2_half_avx512(const float *q, int D, const float *panel0,
                            const float *panel1, float *s0, float *s1, int ld_s,
                            float *rowmax0, float *rowmax1) {
  qk2_rows(q, D, panel0, panel1, s0, s1, ld_s, rowmax0, rowmax1, HALF);
}

static void softmax_avx512(float *s, int ld_s, int rows, int n, float *m, float *l,
                           float *alpha, const float *tile_max) {
  const int n_pad = (n + NR - 1) / NR * NR;
  for (int r = 0; r < rows; r++) {
    float *row = s + (int64_t)r * ld_s;
    for (int c = n; c < n_pad; c++)
      row[c] = -INFINITY;
    float mx;
    if (tile_max) {
      mx = tile_max[r] > m[r] ? tile_max[r] : m[r];
    } else {
      const __m512 init = _mm512_set1_ps(m[r]);
      __m512 v[4] = {init, init, init, init};
      max_chains_avx512(v, row, n_pad);
      mx = max_of_chains_avx512(v);
    }
    /* Nothing kept so far: subtract 0 so that p = exp2(-inf) = 0, no NaN. */
    const float base = mx == -INFINITY ? 0.0f : mx;
    const __m512 vb = _mm512_set1_ps(base);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    int c = 0;
    for (; c + 2 * NR <= n_pad; c += 2 * NR) {
      __m512 p0 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(row + c), vb));
      __m512 p1 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(row + c + NR), vb));
      _mm512_storeu_ps(row + c, p0);
      _mm512_storeu_ps(row + c + NR, p1);
      sum0 = _mm512_add_ps(sum0, p0);
      sum1 = _mm512_add_ps(sum1, p1);
    }
    if (c < n_pad) {
      __m512 p0 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(row + c), vb));
      _mm512_storeu_ps(row + c, p0);
      sum0 = _mm512_add_ps(sum0, p0);
    }
    /* padding lanes give exp2(-inf - base) = 0, or NaN in a row that NaN has
     * already reached; either way the contract says 0 */
    for (int t = n; t < n_pad; t++)
      row[t] = 0.0f;
    const float a = _mm512_cvtss_f32(exp2_avx512(_mm512_set1_ps(m[r] - base)));
    alpha[r] = a;
    l[r] = a * l[r] + _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
    m[r] = mx;
  }
}

static ALWAYS_INLINE void pv_rows(const float *p, int ld_p, int n, const float *panel,
                                  float *o, int ld_o, const float *alpha,
                                  const int rows) {
  __m512 c[MR];
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++)
    c[r] = _mm512_setzero_ps();
  block_update(c, p, ld_p, n, panel, rows);
  /* the tile's sum joins o at the end (kernels.h) */
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++) {
    float *at = o + (int64_t)r * ld_o;
    _mm512_storeu_ps(
        at, _mm512_fmadd_ps(_mm512_set1_ps(alpha[r]), _mm512_loadu_ps(at), c[r]));
  }
}

static void pv_avx512(const float *p, int ld_p, int n, const float *panel, float *o,
                      int ld_o, const float *alpha) {
  pv_rows(p, ld_p, n, panel, o, ld_o, alpha, MR);
}

static void pv_half_avx512(const float *p, int ld_p, int n, const float *panel, float *o,
                           int ld_o, const float *alpha) {
  pv_rows(p, ld_p, n, panel, o, ld_o, alpha, HALF);
}

/* The end of pv2 and pv2_segs: o = alpha o + the sums. */
static ALWAYS_INLINE void pv2_store(const __m512 c0[MR], const __m512 c1[MR], float *o,
                                    int ld_o, const float *alpha, const int rows) {
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++) {
    float *at = o + (int64_t)r * ld_o;
    const __m512 a = _mm512_set1_ps(alpha[r]);
    _mm512_storeu_ps(at, _mm512_fmadd_ps(a, _mm512_loadu_ps(at), c0[r]));
    _mm512_storeu_ps(at + NR, _mm512_fmadd_ps(a, _mm512_loadu_ps(at + NR), c1[r]));
  }
}

/* pv2 over a merged run's segments as one sum (kernels.h: pv2_segs). */
static ALWAYS_INLINE void pv2_segs_rows(const stsa_pv_seg *seg, int nseg, int ld_p,
                                        int64_t panel_stride, float *o, int ld_o,
                                        const float *alpha, const int rows) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < rows; r++)
    c0[r] = c1[r] = _mm512_setzero_ps();
  for (int i = 0; i < nseg; i++)
    block_update2(c0, c1, seg[i].p, ld_p, seg[i].n, seg[i].panel,
                  seg[i].panel + panel_stride, rows);
  pv2_store(c0, c1, o, ld_o, alpha, rows);
}

static void pv2_segs_avx512(const stsa_pv_seg *seg, int nseg, int ld_p,
                            int64_t panel_stride, float *o, int ld_o,
                            const float *alpha) {
  pv2_segs_rows(seg, nseg, ld_p, panel_stride, o, ld_o, alpha, MR);
}

static void pv2_segs_half_avx512(const stsa_pv_seg *seg, int nseg, int ld_p,
                                 int64_t panel_stride, float *o, int ld_o,
                                 const float *alpha) {
  pv2_segs_rows(seg, nseg, ld_p, panel_stride, o, ld_o, alpha, HALF);
}

/* pv on two V panels, `panel` and `panel + panel_stride` (kernels.h: pv2):
 * pv2_segs on one segment. */
static void pv2_avx512(const float *p, int ld_p, int n, const float *panel,
                       int64_t panel_stride, float *o, int ld_o, const float *alpha) {
  const stsa_pv_seg seg = {p, panel, n};
  pv2_segs_rows(&seg, 1, ld_p, panel_stride, o, ld_o, alpha, MR);
}

static void pv2_half_avx512(const float *p, int ld_p, int n, const float *panel,
                            int64_t panel_stride, float *o, int ld_o,
                            const float *alpha) {
  const stsa_pv_seg seg = {p, panel, n};
  pv2_segs_rows(&seg, 1, ld_p, panel_stride, o, ld_o, alpha, HALF);
}

/* Contiguous f16 rows go through vcvtph2ps and bf16 rows through a 16-bit
 * shift, sixteen at a time; strided rows and f32 take the portable path. */
static void load_row_avx512(const void *src, int dtype, int64_t stride, int64_t n,
                            float *dst) {
  int64_t i = 0;
  if (stride == 1 && dtype == STSA_F16) {
    const uint16_t *s = src;
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                    (const __m256i *)(const void *)(s + i))));
  } else if (stride == 1 && dtype == STSA_BF16) {
    const uint16_t *s = src;
    for (; i + 16 <= n; i += 16) {
      __m512i w = _mm512_cvtepu16_epi32(
          _mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
      _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
  }
  stsa_load_row_rest(src, dtype, stride, i, n, dst);
}

/* Elements [d0, d0 + dn) of a contiguous f32, f16 or bf16 row as f32, zeros
 * past dn (dn <= 16) or for no row. */
static inline __m512 load16(const void *row, int dtype, int d0, int dn) {
  if (!row)
    return _mm512_setzero_ps();
  if (dtype == STSA_F32)
    return _mm512_maskz_loadu_ps((__mmask16)((1u << dn) - 1), (const float *)row + d0);
  const uint16_t *x = (const uint16_t *)row + d0;
  __m256i w;
  if (dn == NR) {
    w = _mm256_loadu_si256((const __m256i *)(const void *)x);
  } else { /* 16-bit masked loads need AVX512BW */
    uint16_t tail[NR] = {0};
    memcpy(tail, x, sizeof(uint16_t) * (size_t)dn);
    w = _mm256_loadu_si256((const __m256i *)(const void *)tail);
  }
  if (dtype == STSA_F16)
    return _mm512_cvtph_ps(w);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(w), 16));
}

static inline __m512i abs_bits_max(__m512i m, __m512 x) {
  return _mm512_max_epu32(
      m, _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

/* Contiguous f32/f16/bf16 rows: K^T in 16 x 16 blocks transposed in
 * registers; strided rows go the portable way. */
static void pack_panel_avx512(const stsa_panel_rows *pr, float *kt, float *vp,
                              int64_t vp_stride, uint32_t abs_bits[2]) {
  const int D = pr->D;
  if (pr->k_stride != 1 || pr->v_stride != 1) {
    stsa_pack_panel_rows(pr, kt, vp, vp_stride, abs_bits);
    return;
  }
  __m512i k_max = _mm512_setzero_si512(), v_max = _mm512_setzero_si512();
  for (int d0 = 0; d0 < D; d0 += NR) {
    const int dn = D - d0 < NR ? D - d0 : NR;
    __m512 r[NR];
#pragma GCC unroll 16
    for (int c = 0; c < NR; c++) {
      r[c] = load16(pr->k[c], pr->k_dtype, d0, dn);
      k_max = abs_bits_max(k_max, r[c]);
    }
    transpose16(r);
    /* fixed indices keep r in registers (a loop to dn spilled it) */
    float *at = kt + (int64_t)d0 * NR, tail[NR * NR];
    float *to = dn == NR ? at : tail;
#pragma GCC unroll 16
    for (int e = 0; e < NR; e++)
      _mm512_storeu_ps(to + e * NR, r[e]);
    if (dn < NR)
      memcpy(at, tail, sizeof(float) * (size_t)(dn * NR));
  }
  for (int c = 0; c < NR; c++)
    for (int d0 = 0; d0 < pr->D_pad; d0 += NR) {
      const __m512 x = d0 < D ? load16(pr->k[c] ? pr->v[c] : NULL, pr->v_dtype, d0,
                                       D - d0 < NR ? D - d0 : NR)
                              : _mm512_setzero_ps();
      v_max = abs_bits_max(v_max, x);
      _mm512_store_ps(vp + (d0 / NR) * vp_stride + c * NR, x);
    }
  stsa_fold_abs_bits(abs_bits, _mm512_reduce_max_epu32(k_max),
                     _mm512_reduce_max_epu32(v_max));
}

/* kernels.h: gather_tails. Row d of every output panel is put together in
 * a register (each tail's lanes expanded into place, the part that spills
 * into the next panel compressed down) and stored whole: masked stores of
 * each tail's columns left partly written lines that the next Q.K^T
 * loaded. Every row takes the same steps, so the masks are worked out once
 * and GATHER_ROWS rows go at a time, each its own chain of expands. */
#define GATHER_ROWS 8

typedef struct tail_step {
  const float *src;
  __mmask16 expand, spill; /* lanes placed in this panel; lanes of the next */
  int ends;                /* the panel is full after this tail */
} tail_step;

static void gather_tails_avx512(const float *const *src, const int *n, int count,
                                int depth, int nr, float *dst) {
  (void)nr; /* NR */
  tail_step st[STSA_MAX_RUN_TILES];
  int steps = 0, fill = 0;
  for (int i = 0; i < count; i++) {
    const int r = n[i];
    if (r == 0)
      continue;
    const int first = r < NR - fill ? r : NR - fill;
    st[steps].src = src[i];
    st[steps].expand = (__mmask16)(((1u << first) - 1) << fill);
    st[steps].spill = (__mmask16)(((1u << r) - 1) & ~((1u << first) - 1));
    st[steps].ends = fill + first == NR;
    fill = st[steps].ends ? r - first : fill + first;
    steps++;
  }
  const int64_t step = (int64_t)depth * NR;
  int d = 0;
  for (; d + GATHER_ROWS <= depth; d += GATHER_ROWS) {
    __m512 acc[GATHER_ROWS];
    float *row = dst + (int64_t)d * NR;
    for (int u = 0; u < GATHER_ROWS; u++)
      acc[u] = _mm512_setzero_ps();
    for (int t = 0; t < steps; t++) {
      const float *from = st[t].src + (int64_t)d * NR;
#pragma GCC unroll 8
      for (int u = 0; u < GATHER_ROWS; u++)
        acc[u] =
            _mm512_mask_expand_ps(acc[u], st[t].expand, _mm512_load_ps(from + u * NR));
      if (st[t].ends) {
#pragma GCC unroll 8
        for (int u = 0; u < GATHER_ROWS; u++) {
          _mm512_store_ps(row + u * NR, acc[u]);
          acc[u] = _mm512_maskz_compress_ps(st[t].spill, _mm512_load_ps(from + u * NR));
        }
        row += step;
      }
    }
    if (fill > 0)
      for (int u = 0; u < GATHER_ROWS; u++)
        _mm512_store_ps(row + u * NR, acc[u]);
  }
  for (; d < depth; d++) {
    __m512 acc = _mm512_setzero_ps();
    float *row = dst + (int64_t)d * NR;
    for (int t = 0; t < steps; t++) {
      const __m512 v = _mm512_load_ps(st[t].src + (int64_t)d * NR);
      acc = _mm512_mask_expand_ps(acc, st[t].expand, v);
      if (st[t].ends) {
        _mm512_store_ps(row, acc);
        acc = _mm512_maskz_compress_ps(st[t].spill, v);
        row += step;
      }
    }
    if (fill > 0)
      _mm512_store_ps(row, acc);
  }
}

/* The GEMM kernels HALF rows high (kernels.h: half). */
static const stsa_kernels half_avx512 = {.name = "avx512",
                                         .mr = HALF,
                                         .nr = NR,
                                         .qk = qk_half_avx512,
                                         .softmax = softmax_avx512,
                                         .pv = pv_half_avx512,
                                         .qk2 = qk2_half_avx512,
                                         .pv2 = pv2_half_avx512,
                                         .pv2_segs = pv2_segs_half_avx512};

void stsa_kernels_override_avx512(stsa_kernels *t) {
  t->name = "avx512";
  t->mr = MR;
  t->nr = NR;
  t->qk = qk_avx512;
  t->softmax = softmax_avx512;
  t->pv = pv_avx512;
  t->qk2 = qk2_avx512;
  t->pv2 = pv2_avx512;
  t->pv2_segs = pv2_segs_avx512;
  t->load_row = load_row_avx512;
  t->pack_panel = pack_panel_avx512;
  t->gather_tails = gather_tails_avx512;
  t->half = &half_avx512;
}
#endif /* x86 */
