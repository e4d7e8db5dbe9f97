/* attention_oracle.c — see attention_oracle.h. */
#include "attention_oracle.h"

#include <math.h>
#include <stdlib.h>

#include "testutil.h"

/* Rows [S][D] of head h, batch entry b of t, in double. */
static void load_head(const stsa_tensor *t, int64_t b, int64_t h, double *dst) {
  const int64_t S = t->shape[1], D = t->shape[3];
  for (int64_t j = 0; j < S * D; j++)
    dst[j] = tu_load(t->data, t->dtype, tu_offset(t, b, j / D, h, j % D));
}

/* One row: the logits s of the kept keys, then the rules of the header. */
static void oracle_row(const double *qi, const double *kd, const double *vd,
                       const uint8_t *keep, int64_t Skv, int64_t D, double scale,
                       double *s, double *o, double *lse) {
  int64_t kept = 0;
  int nan_row = 0;
  double mx = -INFINITY;
  for (int64_t j = 0; j < Skv; j++) {
    if (keep && !keep[j])
      continue;
    kept++;
    double dot = 0;
    for (int64_t d = 0; d < D; d++)
      dot += qi[d] * kd[j * D + d];
    s[j] = dot * scale;
    if (isnan(s[j]) || s[j] == INFINITY)
      nan_row = 1;
    else if (s[j] > mx)
      mx = s[j];
  }
  for (int64_t d = 0; d < D; d++)
    o[d] = kept && (nan_row || mx == -INFINITY) ? NAN : 0;
  if (kept == 0 || nan_row || mx == -INFINITY) {
    *lse = kept == 0 ? -INFINITY : NAN;
    return;
  }
  double sum = 0;
  for (int64_t j = 0; j < Skv; j++) {
    if (keep && !keep[j])
      continue;
    const double p = exp(s[j] - mx);
    sum += p;
    for (int64_t d = 0; d < D; d++)
      o[d] += p * vd[j * D + d];
  }
  for (int64_t d = 0; d < D; d++)
    o[d] /= sum;
  *lse = mx + log(sum);
}

void tu_oracle_attention(const stsa_tensor *q, const stsa_tensor *k, const stsa_tensor *v,
                         const uint8_t *const *keep, double scale, double *out,
                         double *lse) {
  const int64_t B = q->shape[0], Sq = q->shape[1], Skv = k->shape[1], H = q->shape[2],
                D = q->shape[3];
  double *s = malloc(sizeof(double) * (size_t)Skv);
  double *qd = malloc(sizeof(double) * (size_t)(Sq * D));
  double *kd = malloc(sizeof(double) * (size_t)(Skv * D));
  double *vd = malloc(sizeof(double) * (size_t)(Skv * D));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      load_head(q, b, h, qd);
      load_head(k, b, h, kd);
      load_head(v, b, h, vd);
      const uint8_t *head_keep = keep ? keep[h] : NULL;
      for (int64_t i = 0; i < Sq; i++) {
        const int64_t row = (b * H + h) * Sq + i;
        oracle_row(qd + i * D, kd, vd, head_keep ? head_keep + i * Skv : NULL, Skv, D,
                   scale, s, out + row * D, lse + row);
      }
    }
  free(s), free(qd), free(kd), free(vd);
}
