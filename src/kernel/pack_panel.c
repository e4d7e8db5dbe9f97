/* pack_panel.c — the portable packing of K^T / V panels (kernels.h):
 * pack_panel, and gather_tails between packed panels. */
#include <string.h>

#include "core/tensor.h"
#include "kernel/kernels.h"

uint32_t stsa_abs_max_bits(const float *x, int n) {
  uint32_t mx = 0;
  for (int i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    u &= 0x7fffffffu;
    mx = u > mx ? u : mx;
  }
  return mx;
}

void stsa_pack_panel_rows(const stsa_panel_rows *pr, float *kt, float *vp,
                          int64_t vp_stride, uint32_t abs_bits[2]) {
  const int D = pr->D, D_pad = pr->D_pad, nr = pr->nr;
  float krow[STSA_MAX_HEAD_DIM], vrow[STSA_MAX_HEAD_DIM];
  for (int c = 0; c < nr; c++) {
    if (pr->k[c]) {
      pr->load_row(pr->k[c], pr->k_dtype, pr->k_stride, D, krow);
      pr->load_row(pr->v[c], pr->v_dtype, pr->v_stride, D, vrow);
      stsa_fold_abs_bits(abs_bits, stsa_abs_max_bits(krow, D),
                         stsa_abs_max_bits(vrow, D));
    } else {
      memset(krow, 0, sizeof(float) * (size_t)D);
      memset(vrow, 0, sizeof(float) * (size_t)D);
    }
    for (int d = D; d < D_pad; d++)
      vrow[d] = 0.0f;
    for (int d = 0; d < D; d++)
      kt[(int64_t)d * nr + c] = krow[d];
    /* A loop, not memcpy: nr is a run-time value, so memcpy was a libc call
     * per 64 bytes; the loop vectorises. */
    for (int j = 0; j < D_pad / nr; j++) {
      float *dst = vp + j * vp_stride + (int64_t)c * nr;
      const float *src = vrow + j * nr;
      for (int e = 0; e < nr; e++)
        dst[e] = src[e];
    }
  }
}

void stsa_gather_tails(const float *const *src, const int *n, int count, int depth,
                       int nr, float *dst) {
  const int64_t step = (int64_t)depth * nr;
  int c = 0; /* the next tail column */
  for (int i = 0; i < count; i++)
    for (int j = 0; j < n[i]; j++, c++) {
      float *to = dst + c / nr * step + c % nr;
      for (int d = 0; d < depth; d++)
        to[(int64_t)d * nr] = src[i][(int64_t)d * nr + j];
    }
  for (; c % nr != 0; c++) {
    float *to = dst + c / nr * step + c % nr;
    for (int d = 0; d < depth; d++)
      to[(int64_t)d * nr] = 0.0f;
  }
}
