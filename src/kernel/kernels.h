/*
 * kernels.h — the micro-kernel contracts and the dispatch table.
 *
 * Framework code (tile_loop.c) owns the loops, packing, tails and threads;
 * each ISA contributes these few functions. The table is filled with the
 * portable versions first and then overridden by the AVX2 ones when the CPU
 * has them (dispatch.c).
 *
 * Packed layouts (f32, 32-byte aligned):
 *   K^T panels  kt[p][d][c]   = K[16 p + c][d]          p < S_kv_pad/16, c < 16
 *   V panels    vp[j][r][c]   = V[r][16 j + c]          j < D_pad/16, r < S_kv_pad
 * Rows beyond S_kv and columns beyond D are zero.
 * Scores are in log2 units: Q is pre-multiplied by scale * log2(e), so the
 * softmax uses exp2.
 */
#ifndef STSA_KERNEL_KERNELS_H
#define STSA_KERNEL_KERNELS_H

#include <stdint.h>

/* Rows handled by one micro-kernel call; q tiles are padded to a multiple. */
#define STSA_MR 6
/* Columns of a K^T or V panel. */
#define STSA_NR 16

typedef struct stsa_kernels {
  /* s[r][c] = sum_d q[r][d] * panel[d][c] for r < STSA_MR, c < 16: one K^T
   * panel. q rows are D apart, s rows ld_s apart. Also folds the row maxima
   * while the scores are in registers: rowmax[r] = max(rowmax[r], s[r][..]). */
  void (*qk)(const float *q, int D, const float *panel, float *s, int ld_s,
             float *rowmax);
  /* Online-softmax update of `rows` score rows holding n valid columns
   * (columns n..roundup(n,16) are ignored and written as 0):
   *   m_new = max(m, max_c s), s = exp2(s - m_new), alpha = exp2(m - m_new),
   *   l = alpha * l + sum_c s, m = m_new.
   * Rows with every score -inf keep m = -inf and give p = 0, alpha = 0.
   * exp2 must give NaN for NaN and 0 for -inf: a NaN or +inf score then
   * leaves l NaN (p = exp2(NaN) or exp2(inf - inf)) whether or not the max
   * reduction kept the NaN, and l stays NaN (alpha * NaN); the tile loop
   * reads that. A NaN row never touches another row.
   * tile_max, when not NULL, holds each row's maximum over the n valid
   * columns (folded by qk), which saves a pass over the scores. */
  void (*softmax)(float *s, int ld_s, int rows, int n, float *m, float *l, float *alpha,
                  const float *tile_max);
  /* o[r][c] = alpha[r] * o[r][c] + sum_{t<n} p[r][t] * panel[t][c] for
   * r < STSA_MR, c < 16: one V panel (n rows of 16). */
  void (*pv)(const float *p, int ld_p, int n, const float *panel, float *o, int ld_o,
             const float *alpha);
  /* dst[i] = src[i * stride] as f32 for i < n (stride in elements): what
   * packing and q tile loads convert f16/bf16 with. */
  void (*load_row)(const void *src, int dtype, int64_t stride, int64_t n, float *dst);
} stsa_kernels;

/* Portable C versions (always available). */
extern const stsa_kernels stsa_kernels_generic;
#if defined(__x86_64__) || defined(__i386__)
/* AVX2+FMA versions; call only when stsa_cpu_has_avx2(). */
extern const stsa_kernels stsa_kernels_avx2;
#endif

/* Kernels for a resolved backend (PORTABLE or AVX2). */
const stsa_kernels *stsa_kernels_for(int backend);

#endif
