/* svg_eval.c — see svg_eval.h. */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate */
#include "svg_eval.h"

#include <math.h>
#include <stdlib.h>

#include "cli_util.h"

stsa_tensor svg_f32_tensor(int64_t B, int64_t N, int64_t H, int64_t D) {
  size_t n = (size_t)(B * N * H * D);
  void *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (!p)
    cli_die("out of memory for a [%lld, %lld, %lld, %lld] tensor", (long long)B,
            (long long)N, (long long)H, (long long)D);
  return stsa_tensor_bshd(p, STSA_F32, B, N, H, D);
}

void svg_workload_make(svg_workload *w, const stsa_svg_config *cfg, int64_t batch,
                       uint64_t seed) {
  svg_workload_make_kinds(w, cfg, batch, seed, NULL);
}

void svg_workload_make_kinds(svg_workload *w, const stsa_svg_config *cfg, int64_t batch,
                             uint64_t seed, const stsa_head_kind *kinds) {
  const int64_t N = stsa_geometry_tokens(&cfg->geometry), H = cfg->heads,
                D = cfg->head_dim;
  w->q = svg_f32_tensor(batch, N, H, D);
  w->k = svg_f32_tensor(batch, N, H, D);
  w->v = svg_f32_tensor(batch, N, H, D);
  w->out = svg_f32_tensor(batch, N, H, D);
  w->ref = svg_f32_tensor(batch, N, H, D);
  w->truth = malloc(sizeof *w->truth * (size_t)H);
  if (!w->truth)
    cli_die("out of memory");
  stsa_workload_desc desc = {
      sizeof(stsa_workload_desc), cfg->geometry, batch, H, D, seed, kinds};
  cli_check(stsa_workload_generate(&desc, &w->q, &w->k, &w->v, w->truth), NULL,
            "generating the workload");
}

stsa_tensor svg_tensor_cast(const stsa_tensor *t, stsa_dtype dtype) {
  const size_t n = (size_t)(t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3]);
  void *p = aligned_alloc(64, (n * stsa_dtype_size(dtype) + 63) / 64 * 64);
  if (!p)
    cli_die("out of memory converting the workload");
  const stsa_tensor to =
      stsa_tensor_bshd(p, dtype, t->shape[0], t->shape[1], t->shape[2], t->shape[3]);
  cli_check(stsa_tensor_copy(t, &to), NULL, "converting the workload");
  return to;
}

void svg_workload_cast(svg_workload *w, stsa_dtype dtype) {
  stsa_tensor *in[3] = {&w->q, &w->k, &w->v};
  for (int i = 0; i < 3; i++) {
    const stsa_tensor to = svg_tensor_cast(in[i], dtype);
    free(in[i]->data);
    *in[i] = to;
  }
}

void svg_workload_free(svg_workload *w) {
  free(w->q.data);
  free(w->k.data);
  free(w->v.data);
  free(w->out.data);
  free(w->ref.data);
  free(w->truth);
}

void svg_head_errors(const stsa_tensor *out, const stsa_tensor *ref, double *rel_l2,
                     double *cosine) {
  const int64_t B = out->shape[0], N = out->shape[1], H = out->shape[2],
                D = out->shape[3];
  const float *o = out->data, *r = ref->data;
  for (int64_t h = 0; h < H; h++) {
    double diff = 0, rr = 0, oo = 0, dot = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t s = 0; s < N; s++)
        for (int64_t d = 0; d < D; d++) {
          size_t i = (size_t)(((b * N + s) * H + h) * D + d);
          double x = o[i], y = r[i];
          diff += (x - y) * (x - y);
          rr += y * y;
          oo += x * x;
          dot += x * y;
        }
    rel_l2[h] = rr > 0 ? sqrt(diff / rr) : sqrt(diff);
    cosine[h] = rr > 0 && oo > 0 ? dot / sqrt(rr * oo) : 0.0;
  }
}
