/* tile_spans.c — see tile_spans.h. */
#include "kernel/tile_spans.h"

#include <math.h>

static void fill_neg_inf(float *row, int from, int to) {
  for (int c = from; c < to; c++)
    row[c] = -INFINITY;
}

void stsa_apply_tile_pattern_cols(const stsa_tile_pattern *pat, int r0, int rows, int c0,
                                  int c1, float *s, int ld_s) {
  for (int r = 0; r < rows; r++) {
    float *row = s + (int64_t)r * ld_s;
    int c = c0;
    for (int32_t i = pat->row_ptr[r0 + r]; i < pat->row_ptr[r0 + r + 1]; i++) {
      const int lo = pat->iv[2 * i], hi = pat->iv[2 * i + 1];
      fill_neg_inf(row, c, lo < c1 ? lo : c1);
      c = hi > c ? hi : c; /* intervals left of c0 move nothing */
    }
    fill_neg_inf(row, c, c1);
  }
}

void stsa_apply_tile_pattern(const stsa_tile_pattern *pat, int r0, int rows, int n,
                             float *s, int ld_s) {
  stsa_apply_tile_pattern_cols(pat, r0, rows, 0, n, s, ld_s);
}

void stsa_tile_row_spans(const stsa_tile_pattern *pat, int rows, int rows_pad, int block,
                         int n, int32_t *span) {
  for (int r0 = 0; r0 < rows_pad; r0 += block) {
    int lo = n, hi = 0;
    const int end = r0 + block < rows ? r0 + block : rows;
    for (int r = r0; r < end; r++) {
      const int32_t i0 = pat->row_ptr[r], i1 = pat->row_ptr[r + 1];
      if (i0 == i1)
        continue;
      lo = pat->iv[2 * i0] < lo ? pat->iv[2 * i0] : lo;
      hi = pat->iv[2 * i1 - 1] > hi ? pat->iv[2 * i1 - 1] : hi;
    }
    span[2 * (r0 / block)] = lo;
    span[2 * (r0 / block) + 1] = hi;
  }
}

void stsa_run_pattern_tile(const stsa_attn_problem *pb, const stsa_tile_pattern *pat,
                           const float *kt, const float *vp, int64_t ld_panel, int rows,
                           int rows_pad, int n, int ld_s, stsa_tile_scratch *sc) {
  const stsa_kernels *kern = pb->kern;
  const int D = pb->D, D_pad = pb->D_pad, mr = pb->mr, nr = pb->nr;
  const int blocks = rows_pad / mr, npanels = (n + nr - 1) / nr;
  int32_t *span = sc->span;
  stsa_tile_row_spans(pat, rows, rows_pad, mr, n, span);
  /* Panel outer, row block inner, as on the whole-tile path (the K^T panel
   * stays in L1). The maxima qk folds are not used: partial tiles find
   * theirs again. */
  for (int r = 0; r < rows_pad; r++)
    sc->tile_max[r] = -INFINITY;
  for (int p = 0, take; p < npanels; p += take) {
    take = stsa_panel_step(kern->qk2 != NULL, npanels - p);
    for (int i = 0; i < blocks; i++) {
      /* the panels of the step that the block's span reaches */
      int first = p, last = p + take;
      while (first < last && !(span[2 * i] < (first + 1) * nr))
        first++;
      while (last > first && !(span[2 * i + 1] > (last - 1) * nr))
        last--;
      stsa_qk_panels(kern, sc->q + (int64_t)i * mr * D, D, kt + (int64_t)first * D * nr,
                     last - first, sc->s + (int64_t)i * mr * ld_s + first * nr, ld_s,
                     sc->tile_max + i * mr);
    }
  }
  for (int i = 0; i < blocks; i++) {
    const int lo = span[2 * i], hi = span[2 * i + 1];
    if (lo >= hi)
      continue; /* nothing kept: m, l and o stay as they are (alpha would be 1) */
    const int r0 = i * mr, c0 = lo / nr * nr, c1 = (hi + nr - 1) / nr * nr;
    const int c_end = c1 < n ? c1 : n, real = rows - r0 < mr ? rows - r0 : mr;
    float *s = sc->s + (int64_t)r0 * ld_s;
    stsa_apply_tile_pattern_cols(pat, r0, real, c0, c_end, s, ld_s);
    kern->softmax(s + c0, ld_s, mr, c_end - c0, sc->m + r0, sc->l + r0, sc->alpha + r0,
                  NULL);
  }
  for (int j = 0, take; j < D_pad / nr; j += take) {
    take = stsa_panel_step(kern->pv2 != NULL, D_pad / nr - j);
    for (int i = 0; i < blocks; i++) {
      const int lo = span[2 * i], hi = span[2 * i + 1];
      if (lo < hi)
        stsa_pv_panels(kern, sc->s + (int64_t)i * mr * ld_s + lo, ld_s, hi - lo,
                       vp + (j * ld_panel + lo) * nr, ld_panel * nr, take,
                       sc->o + (int64_t)i * mr * D_pad + j * nr, D_pad,
                       sc->alpha + i * mr);
    }
  }
}
