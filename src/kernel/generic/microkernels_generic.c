/*
 * microkernels_generic.c — portable micro-kernels (see kernels.h for the
 * contracts): no ISA-specific code, 128-bit vectors through the compiler's
 * generic vector type where it has one, plain loops elsewhere.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/convert.h"
#include "kernel/exp2_poly.h"
#include "kernel/kernels.h"

/* Two rows at a time: 8 four-float accumulators, 4 panel vectors and 2
 * broadcasts fit the 16 registers of SSE2 and NEON, so nothing spills. */
#if defined(__GNUC__) && !defined(STSA_PLAIN_LOOPS) /* the define checks the fallback */
/* Four floats as one value: gcc and clang map it to the target's 128-bit
 * vectors (SSE2 on every x86-64, NEON on arm64) with no ISA-specific code.
 * Written as plain loops, the accumulators stay in memory (~10x slower). */
typedef float f4 __attribute__((vector_size(16)));

static inline f4 load4(const float *p) {
  f4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void store4(float *p, f4 v) { memcpy(p, &v, sizeof v); }

static inline f4 splat4(float x) { return (f4){x, x, x, x}; }

/* s0/s1[0..16) = q0/q1 . panel (D x 16); returns the rows' maxima folded in. */
static void qk_row_pair(const float *q0, const float *q1, int D, const float *panel,
                        float *s0, float *s1, float *max0, float *max1) {
  f4 a[2][4] = {{{0}}};
  for (int d = 0; d < D; d++) {
    const float *pd = panel + d * STSA_PORTABLE_NR;
    f4 b0 = load4(pd), b1 = load4(pd + 4), b2 = load4(pd + 8), b3 = load4(pd + 12);
    f4 x0 = splat4(q0[d]), x1 = splat4(q1[d]);
    a[0][0] += x0 * b0, a[0][1] += x0 * b1, a[0][2] += x0 * b2, a[0][3] += x0 * b3;
    a[1][0] += x1 * b0, a[1][1] += x1 * b1, a[1][2] += x1 * b2, a[1][3] += x1 * b3;
  }
  float *dst[2] = {s0, s1}, *mx[2] = {max0, max1};
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 4; j++) {
      store4(dst[r] + 4 * j, a[r][j]);
      for (int c = 0; c < 4; c++)
        *mx[r] = a[r][j][c] > *mx[r] ? a[r][j][c] : *mx[r];
    }
}

/* o0/o1[0..16) = alpha * o + p0/p1[0..n) . panel (n x 16) */
static void pv_row_pair(const float *p0, const float *p1, int n, const float *panel,
                        float *o0, float *o1, float alpha0, float alpha1) {
  f4 a[2][4];
  for (int j = 0; j < 4; j++) {
    a[0][j] = splat4(alpha0) * load4(o0 + 4 * j);
    a[1][j] = splat4(alpha1) * load4(o1 + 4 * j);
  }
  for (int t = 0; t < n; t++) {
    const float *pt = panel + t * STSA_PORTABLE_NR;
    f4 b0 = load4(pt), b1 = load4(pt + 4), b2 = load4(pt + 8), b3 = load4(pt + 12);
    f4 x0 = splat4(p0[t]), x1 = splat4(p1[t]);
    a[0][0] += x0 * b0, a[0][1] += x0 * b1, a[0][2] += x0 * b2, a[0][3] += x0 * b3;
    a[1][0] += x1 * b0, a[1][1] += x1 * b1, a[1][2] += x1 * b2, a[1][3] += x1 * b3;
  }
  for (int j = 0; j < 4; j++) {
    store4(o0 + 4 * j, a[0][j]);
    store4(o1 + 4 * j, a[1][j]);
  }
}
#else
static void qk_row_pair(const float *q0, const float *q1, int D, const float *panel,
                        float *s0, float *s1, float *max0, float *max1) {
  float a[2][STSA_PORTABLE_NR] = {{0}};
  for (int d = 0; d < D; d++)
    for (int c = 0; c < STSA_PORTABLE_NR; c++) {
      a[0][c] += q0[d] * panel[d * STSA_PORTABLE_NR + c];
      a[1][c] += q1[d] * panel[d * STSA_PORTABLE_NR + c];
    }
  for (int c = 0; c < STSA_PORTABLE_NR; c++) {
    s0[c] = a[0][c], s1[c] = a[1][c];
    *max0 = a[0][c] > *max0 ? a[0][c] : *max0;
    *max1 = a[1][c] > *max1 ? a[1][c] : *max1;
  }
}

static void pv_row_pair(const float *p0, const float *p1, int n, const float *panel,
                        float *o0, float *o1, float alpha0, float alpha1) {
  float a[2][STSA_PORTABLE_NR];
  for (int c = 0; c < STSA_PORTABLE_NR; c++)
    a[0][c] = alpha0 * o0[c], a[1][c] = alpha1 * o1[c];
  for (int t = 0; t < n; t++)
    for (int c = 0; c < STSA_PORTABLE_NR; c++) {
      a[0][c] += p0[t] * panel[t * STSA_PORTABLE_NR + c];
      a[1][c] += p1[t] * panel[t * STSA_PORTABLE_NR + c];
    }
  memcpy(o0, a[0], sizeof a[0]);
  memcpy(o1, a[1], sizeof a[1]);
}
#endif

static void qk_generic(const float *q, int D, const float *panel, float *s, int ld_s,
                       float *rowmax) {
  for (int r = 0; r < STSA_PORTABLE_MR; r += 2)
    qk_row_pair(q + r * D, q + (r + 1) * D, D, panel, s + (int64_t)r * ld_s,
                s + (int64_t)(r + 1) * ld_s, rowmax + r, rowmax + r + 1);
}

static float exp2_generic(float x) {
  if (!(x >= STSA_EXP2_MIN)) /* -inf gives 0, NaN stays NaN */
    return x < STSA_EXP2_MIN ? 0.0f : x;
  float n = nearbyintf(x);
  float f = x - n;
  float p = STSA_EXP2_C6;
  p = p * f + STSA_EXP2_C5;
  p = p * f + STSA_EXP2_C4;
  p = p * f + STSA_EXP2_C3;
  p = p * f + STSA_EXP2_C2;
  p = p * f + STSA_EXP2_C1;
  p = p * f + 1.0f;
  uint32_t bits;
  memcpy(&bits, &p, sizeof bits);
  bits += (uint32_t)((int32_t)n * (1 << 23));
  memcpy(&p, &bits, sizeof p);
  return p;
}

static void softmax_generic(float *s, int ld_s, int rows, int n, float *m, float *l,
                            float *alpha, const float *tile_max) {
  int n_pad = (n + STSA_PORTABLE_NR - 1) / STSA_PORTABLE_NR * STSA_PORTABLE_NR;
  for (int r = 0; r < rows; r++) {
    float *row = s + (int64_t)r * ld_s;
    float mx = m[r];
    if (tile_max)
      mx = tile_max[r] > mx ? tile_max[r] : mx;
    else
      for (int c = 0; c < n; c++)
        mx = row[c] > mx ? row[c] : mx;
    /* A row with nothing kept so far keeps m = -inf; subtracting 0 instead
     * makes every p exp2(-inf) = 0 and avoids -inf - -inf = NaN. */
    float base = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
    for (int c = 0; c < n; c++) {
      row[c] = exp2_generic(row[c] - base);
      sum += row[c];
    }
    for (int c = n; c < n_pad; c++)
      row[c] = 0.0f;
    alpha[r] = exp2_generic(m[r] - base);
    l[r] = alpha[r] * l[r] + sum;
    m[r] = mx;
  }
}

static void pv_generic(const float *p, int ld_p, int n, const float *panel, float *o,
                       int ld_o, const float *alpha) {
  for (int r = 0; r < STSA_PORTABLE_MR; r += 2)
    pv_row_pair(p + (int64_t)r * ld_p, p + (int64_t)(r + 1) * ld_p, n, panel,
                o + (int64_t)r * ld_o, o + (int64_t)(r + 1) * ld_o, alpha[r],
                alpha[r + 1]);
}

static void load_row_generic(const void *src, int dtype, int64_t stride, int64_t n,
                             float *dst) {
  stsa_load_row_f32(src, (stsa_dtype)dtype, stride, n, dst);
}

void stsa_kernels_init_portable(stsa_kernels *t) {
  t->name = "portable";
  t->mr = STSA_PORTABLE_MR;
  t->nr = STSA_PORTABLE_NR;
  t->qk = qk_generic;
  t->softmax = softmax_generic;
  t->pv = pv_generic;
  t->load_row = load_row_generic;
}
