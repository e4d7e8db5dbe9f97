/* pack_panel.c — the portable packing of K^T / V panels (kernels.h):
 * pack_panel and pack_bf16, and gather_tails between packed panels. */
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

/* Element d of a bf16 row of stride `stride` (0 past D or for no row). */
static uint32_t bf16_at(const uint16_t *row, int64_t stride, int d, int D) {
  return row && d < D ? row[d * stride] : 0u;
}

/* m with the magnitudes (bits without the sign) of the two bf16 values of
 * a 32-bit word folded in. */
static uint32_t fold_abs_bf16_pair(uint32_t m, uint32_t w) {
  const uint32_t lo = w & 0x7fffu, hi = (w >> 16) & 0x7fffu;
  m = lo > m ? lo : m;
  return hi > m ? hi : m;
}

/* The blocks hold bf16 pairs, so the keys are written in 32-bit words: K's
 * pair (d, d + 1) of a key is one word, V's column of keys (2 i, 2 i + 1)
 * another. */
void stsa_pack_bf16_rows(const stsa_bf16_rows *rows, uint16_t *kb_u16, uint16_t *vb_u16,
                         int64_t v_panel, uint32_t abs_bits[2]) {
  const int D = rows->D, D32 = rows->D32, D_pad = rows->D_pad;
  uint32_t *kb = (uint32_t *)(void *)kb_u16, *vb = (uint32_t *)(void *)vb_u16;
  uint32_t k_max = abs_bits[0], v_max = abs_bits[1];
  for (int c = 0; c < 16; c++)
    for (int d = 0; d < D32; d += 2) {
      const uint16_t *k = rows->k[c];
      const uint32_t w =
          bf16_at(k, rows->k_stride, d, D) | bf16_at(k, rows->k_stride, d + 1, D) << 16;
      k_max = fold_abs_bf16_pair(k_max, w);
      kb[(d / 32) * 256 + (d % 32) / 2 * 16 + c] = w;
    }
  for (int i = 0; i < 8; i++) {
    const uint16_t *v0 = rows->k[2 * i] ? rows->v[2 * i] : NULL,
                   *v1 = rows->k[2 * i + 1] ? rows->v[2 * i + 1] : NULL;
    for (int c = 0; c < D_pad; c++) {
      const uint32_t w =
          bf16_at(v0, rows->v_stride, c, D) | bf16_at(v1, rows->v_stride, c, D) << 16;
      v_max = fold_abs_bf16_pair(v_max, w);
      vb[(c / 16) * (v_panel / 2) + i * 16 + c % 16] = w;
    }
  }
  abs_bits[0] = k_max;
  abs_bits[1] = v_max;
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
