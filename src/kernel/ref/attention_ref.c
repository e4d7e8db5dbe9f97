/* attention_ref.c — see attention_ref.h. Deliberately naive. */
#include "kernel/ref/attention_ref.h"

#include <math.h>
#include <stdlib.h>

#include "core/convert.h"

static double load(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d) {
  size_t off =
      (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + d * t->stride[3]);
  switch (t->dtype) {
  case STSA_F16:
    return stsa_f16_to_f32(((const uint16_t *)t->data)[off]);
  case STSA_BF16:
    return stsa_bf16_to_f32(((const uint16_t *)t->data)[off]);
  default:
    return ((const float *)t->data)[off];
  }
}

int stsa_attention_ref_rows(const stsa_tensor *q, const stsa_tensor *k,
                            const stsa_tensor *v, const stsa_tensor *out,
                            const stsa_attn_opts *opts, stsa_pair_pred keep,
                            const void *keep_ctx, int64_t row0, int64_t row1) {
  const int64_t Sq = q->shape[1], H = q->shape[2], D = q->shape[3], Skv = k->shape[1];
  double scale = opts && opts->scale > 0 ? opts->scale : 1.0 / sqrt((double)D);
  double *score = malloc(sizeof(double) * (size_t)(Skv + 2 * D));
  unsigned char *kept = malloc((size_t)Skv);
  float *orow = malloc(sizeof(float) * (size_t)D);
  if (!score || !kept || !orow) {
    free(score);
    free(kept);
    free(orow);
    return -1;
  }
  double *qrow = score + Skv, *acc = qrow + D;
  for (int64_t row = row0; row < row1; row++) {
    int64_t i = row % Sq, h = (row / Sq) % H, b = row / (Sq * H);
    for (int64_t d = 0; d < D; d++)
      qrow[d] = load(q, b, i, h, d);
    /* The scores of the kept keys; a NaN or +inf one makes the row NaN. */
    int64_t nkept = 0;
    int nan_row = 0;
    double mx = -INFINITY;
    for (int64_t j = 0; j < Skv; j++) {
      kept[j] = !keep || keep(keep_ctx, h, i, j);
      if (!kept[j])
        continue;
      nkept++;
      double dot = 0;
      for (int64_t d = 0; d < D; d++)
        dot += qrow[d] * load(k, b, j, h, d);
      score[j] = dot * scale;
      if (isnan(score[j]) || score[j] == INFINITY)
        nan_row = 1;
      else if (score[j] > mx)
        mx = score[j];
    }
    double sum = 0, lse;
    if (nkept == 0) { /* nothing kept: 0, lse -inf */
      for (int64_t d = 0; d < D; d++)
        orow[d] = 0.0f;
      lse = -INFINITY;
    } else if (nan_row || mx == -INFINITY) { /* or every kept score -inf */
      for (int64_t d = 0; d < D; d++)
        orow[d] = NAN;
      lse = NAN;
    } else {
      /* Every kept key contributes, even with weight exp(-inf) = 0: a NaN
       * in its V reaches the row (0 * NaN), as in SDPA. */
      for (int64_t d = 0; d < D; d++)
        acc[d] = 0;
      for (int64_t j = 0; j < Skv; j++) {
        if (!kept[j])
          continue;
        double p = exp(score[j] - mx);
        sum += p;
        for (int64_t d = 0; d < D; d++)
          acc[d] += p * load(v, b, j, h, d);
      }
      for (int64_t d = 0; d < D; d++)
        orow[d] = (float)(acc[d] / sum);
      lse = mx + log(sum);
    }
    size_t off = (size_t)(b * out->stride[0] + i * out->stride[1] + h * out->stride[2]);
    stsa_store_row(orow, D, (char *)out->data + off * stsa_dtype_size(out->dtype),
                   out->dtype, out->stride[3]);
    if (opts && opts->lse)
      opts->lse[row] = (float)lse;
  }
  free(orow);
  free(kept);
  free(score);
  return 0;
}

int stsa_attention_ref_parallel(const stsa_tensor *q, const stsa_tensor *k,
                                const stsa_tensor *v, const stsa_tensor *out,
                                const stsa_attn_opts *opts, stsa_pair_pred keep,
                                const void *keep_ctx, int64_t row0, int64_t row1,
                                int threads) {
  const int64_t chunk = 16;
  int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t r = row0; r < row1; r += chunk) {
    int64_t end = r + chunk < row1 ? r + chunk : row1;
    if (stsa_attention_ref_rows(q, k, v, out, opts, keep, keep_ctx, r, end) != 0) {
#pragma omp atomic write
      failed = 1;
    }
  }
  return failed ? -1 : 0;
}
