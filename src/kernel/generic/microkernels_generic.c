/*
 * microkernels_generic.c — portable C micro-kernels (see kernels.h for the
 * contracts). Written as simple fixed-size loops so compilers can vectorise
 * them for whatever ISA they target.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/convert.h"
#include "kernel/exp2_poly.h"
#include "kernel/kernels.h"

static void qk_generic(const float *q, int D, const float *kt, int npanels, float *s,
                       int ld_s, float *rowmax) {
  for (int p = 0; p < npanels; p++) {
    const float *panel = kt + (int64_t)p * D * STSA_NR;
    float acc[STSA_MR][STSA_NR] = {{0}};
    for (int d = 0; d < D; d++)
      for (int r = 0; r < STSA_MR; r++) {
        float qv = q[r * D + d];
        for (int c = 0; c < STSA_NR; c++)
          acc[r][c] += qv * panel[d * STSA_NR + c];
      }
    for (int r = 0; r < STSA_MR; r++) {
      memcpy(s + (int64_t)r * ld_s + p * STSA_NR, acc[r], sizeof acc[r]);
      for (int c = 0; c < STSA_NR; c++)
        rowmax[r] = acc[r][c] > rowmax[r] ? acc[r][c] : rowmax[r];
    }
  }
}

static float exp2_generic(float x) {
  if (!(x >= STSA_EXP2_MIN)) /* also catches -inf */
    return 0.0f;
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
  int n_pad = (n + STSA_NR - 1) / STSA_NR * STSA_NR;
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

static void pv_generic(const float *p, int ld_p, int n, const float *vp,
                       int64_t panel_stride, int npanels, float *o, int ld_o,
                       const float *alpha) {
  for (int j = 0; j < npanels; j++) {
    const float *panel = vp + j * panel_stride;
    float acc[STSA_MR][STSA_NR];
    for (int r = 0; r < STSA_MR; r++)
      for (int c = 0; c < STSA_NR; c++)
        acc[r][c] = alpha[r] * o[(int64_t)r * ld_o + j * STSA_NR + c];
    for (int t = 0; t < n; t++)
      for (int r = 0; r < STSA_MR; r++) {
        float pr = p[(int64_t)r * ld_p + t];
        for (int c = 0; c < STSA_NR; c++)
          acc[r][c] += pr * panel[t * STSA_NR + c];
      }
    for (int r = 0; r < STSA_MR; r++)
      memcpy(o + (int64_t)r * ld_o + j * STSA_NR, acc[r], sizeof acc[r]);
  }
}

static void load_row_generic(const void *src, int dtype, int64_t stride, int64_t n,
                             float *dst) {
  stsa_load_row_f32(src, (stsa_dtype)dtype, stride, n, dst);
}

const stsa_kernels stsa_kernels_generic = {qk_generic, softmax_generic, pv_generic,
                                           load_row_generic};
