/* mask_util.c — helpers of the mask and plan tests (see mask_util.h). */
#include "mask_util.h"

#include <math.h>
#include <stdlib.h>

stsa_mask *tu_or_free(stsa_mask *a, stsa_mask *b) {
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_or(a, b, &m), STSA_OK);
  stsa_mask_free(a);
  stsa_mask_free(b);
  return m;
}

stsa_mask *tu_and_free(stsa_mask *a, stsa_mask *b) {
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_and(a, b, &m), STSA_OK);
  stsa_mask_free(b);
  stsa_mask_free(a);
  return m;
}

stsa_plan_desc tu_plan_desc(int64_t s_q, int64_t s_kv, int64_t heads,
                            const stsa_mask *const *masks, const stsa_geometry *g,
                            unsigned flags) {
  return (stsa_plan_desc){.size = sizeof(stsa_plan_desc),
                          .s_q = s_q,
                          .s_kv = s_kv,
                          .heads = heads,
                          .masks = masks,
                          .geometry = g,
                          .flags = flags};
}

int64_t tu_tokens(const stsa_geometry *g) {
  return g->text + g->frames * g->height * g->width;
}

int64_t tu_rnd(tu_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(tu_rng_next(r) % (uint64_t)(hi - lo + 1));
}

void tu_masked_reference_row(const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const stsa_mask *mask, int64_t b,
                             int64_t i, int64_t qi, int64_t h, const int64_t *kv_native,
                             double *out, double *lse) {
  const int64_t S = k->shape[1], D = q->shape[3];
  const double scale = 1.0 / sqrt((double)D);
  double m = -INFINITY, l = 0;
  double *s = malloc(sizeof(double) * (size_t)S);
  for (int64_t j = 0; j < S; j++) {
    int64_t kj = kv_native ? kv_native[j] : j; /* native token at tensor row j */
    s[j] = -INFINITY;
    if (!stsa_mask_keep(mask, qi, kj))
      continue;
    double dot = 0;
    for (int64_t d = 0; d < D; d++)
      dot += tu_load(q->data, q->dtype, tu_offset(q, b, i, h, d)) *
             tu_load(k->data, k->dtype, tu_offset(k, b, j, h, d));
    s[j] = dot * scale;
    m = s[j] > m ? s[j] : m;
  }
  for (int64_t d = 0; d < D; d++)
    out[d] = 0;
  for (int64_t j = 0; j < S; j++) {
    if (s[j] == -INFINITY)
      continue;
    double p = exp(s[j] - m);
    l += p;
    for (int64_t d = 0; d < D; d++)
      out[d] += p * tu_load(v->data, v->dtype, tu_offset(v, b, j, h, d));
  }
  for (int64_t d = 0; d < D; d++)
    out[d] = l > 0 ? out[d] / l : 0;
  *lse = l > 0 ? m + log(l) : -INFINITY;
  free(s);
}
