/* rows_fused_bf16.c — see rows_fused_bf16.h. */
#include "kernel/rows_fused_bf16.h"

#include <math.h>
#include <string.h>

#include "core/per_isa.h"
#include "kernel/kernels.h"

enum { PASS_ROWS = STSA_BF16_PASS_ROWS, KEYS = STSA_BF16_KEY_BLOCK };

/* Scales a score row's n columns to log2 units (pb->bf16_score_scale). */
STSA_PER_ISA static void scale_row(float *restrict s, int n, float scale) {
  for (int c = 0; c < n; c++)
    s[c] *= scale;
}

void stsa_rows_bf16_scores(const stsa_attn_problem *pb, const uint16_t *qb, int rows_pad,
                           const uint16_t *kb, int n, float *s, int ld_s) {
  const stsa_kernels *kern = pb->kern;
  for (int r0 = 0; r0 < rows_pad; r0 += PASS_ROWS) {
    const int rows = rows_pad - r0 < PASS_ROWS ? rows_pad - r0 : PASS_ROWS;
    kern->bf16_scores(qb + (int64_t)r0 * pb->D32, pb->D32, rows, kb, pb->D32 / 32,
                      (n + 15) / 16, s + (int64_t)r0 * ld_s, ld_s);
  }
  for (int r = 0; r < rows_pad; r++)
    scale_row(s + (int64_t)r * ld_s, n, pb->bf16_score_scale);
}

/* Probabilities p[0, n) (p >= 0) as two bf16 terms (t0, t1): t0 the
 * truncation of p, t1 what it leaves (less than one bf16 unit of p)
 * rounded to nearest, so t0 + t1 is within 2^-16 p of p. */
STSA_PER_ISA static void split_terms(const float *restrict p, int n,
                                     uint16_t *restrict t0, uint16_t *restrict t1) {
  for (int c = 0; c < n; c++) {
    uint32_t u, v;
    float a;
    memcpy(&u, &p[c], sizeof u);
    const uint32_t hi = u & 0xffff0000u;
    memcpy(&a, &hi, sizeof a);
    const float r = p[c] - a;
    memcpy(&v, &r, sizeof v);
    t0[c] = (uint16_t)(u >> 16);
    t1[c] = (uint16_t)((v + 0x7fffu + ((v >> 16) & 1u)) >> 16);
  }
}

/* Columns [c0, c1) of a probability row as its terms (split_terms), those
 * outside [lo, hi) zeros. */
static void split_row(const float *p, int c0, int c1, int lo, int hi, uint16_t *t0,
                      uint16_t *t1) {
  uint16_t *t[STSA_ROWS_BF16_TERMS] = {t0, t1};
  for (int i = 0; i < STSA_ROWS_BF16_TERMS; i++) {
    memset(t[i], 0, sizeof(uint16_t) * (size_t)(lo - c0));
    memset(t[i] + (hi - c0), 0, sizeof(uint16_t) * (size_t)(c1 - hi));
  }
  split_terms(p + lo, hi - lo, t0 + (lo - c0), t1 + (lo - c0));
}

void stsa_rows_bf16_pv(const stsa_attn_problem *pb, const float *p, int ld_p, int rows,
                       int lo, int hi, const uint16_t *vb, int64_t v_panel,
                       uint16_t *terms, float *c, int ld_c) {
  const int b0 = lo / KEYS, b1 = (hi + KEYS - 1) / KEYS, width = (b1 - b0) * KEYS;
  const int64_t ld_term = (int64_t)PASS_ROWS * width;
  stsa_bf16_vblock vblk[4096 / KEYS];
  for (int b = b0; b < b1; b++)
    vblk[b - b0] = (stsa_bf16_vblock){vb + (int64_t)b * 512, v_panel};
  for (int r0 = 0; r0 < rows; r0 += PASS_ROWS) {
    const int n = rows - r0 < PASS_ROWS ? rows - r0 : PASS_ROWS;
    for (int r = 0; r < n; r++) {
      uint16_t *t0 = terms + (int64_t)r * width;
      split_row(p + (int64_t)(r0 + r) * ld_p, b0 * KEYS, b1 * KEYS, lo, hi, t0,
                t0 + ld_term);
    }
    pb->kern->bf16_pv(terms, width, ld_term, STSA_ROWS_BF16_TERMS, vblk, b1 - b0,
                      pb->D_pad / 16, c + (int64_t)r0 * ld_c, ld_c, n);
  }
}
