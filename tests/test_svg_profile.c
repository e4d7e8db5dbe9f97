/*
 * test_svg_profile.c — SVG's profiling estimate against its definition: for
 * the rows the session says it samples, the per-head mean squared
 * difference between each kind's masked attention and dense attention,
 * computed here in double precision with the session's own masks (asked
 * pair by pair). Whatever order or tiles the profiling passes use, the
 * report's mse_spatial / mse_temporal must be this number (text prefix,
 * suffix and none; batch 2; a head count that is not a thread multiple).
 * A pass over the heads with only some on gives each what its own pass
 * gives, bitwise.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate, stsa_svg_kind_mask,                 \
                             stsa_svg_sampled_rows */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg/profile.h"
#include "testutil.h"

/* Row `tok` of head h of batch b under `mask`, in double: out[D]. */
static void ref_row(const stsa_tensor *q, const stsa_tensor *k, const stsa_tensor *v,
                    const stsa_mask *mask, int64_t N, int64_t b, int64_t h, int64_t tok,
                    double *w, double *out) {
  const int64_t H = q->shape[2], D = q->shape[3];
  const float *qf = q->data, *kf = k->data, *vf = v->data;
  const float *qr = qf + ((b * N + tok) * H + h) * D;
  double m = -INFINITY, sum = 0;
  for (int64_t j = 0; j < N; j++) {
    w[j] = -INFINITY;
    if (!stsa_mask_keep(mask, tok, j))
      continue;
    const float *kr = kf + ((b * N + j) * H + h) * D;
    double s = 0;
    for (int64_t d = 0; d < D; d++)
      s += (double)qr[d] * kr[d];
    w[j] = s / sqrt((double)D);
    m = fmax(m, w[j]);
  }
  for (int64_t d = 0; d < D; d++)
    out[d] = 0;
  for (int64_t j = 0; j < N; j++) {
    if (w[j] == -INFINITY)
      continue;
    const double e = exp(w[j] - m);
    const float *vr = vf + ((b * N + j) * H + h) * D;
    sum += e;
    for (int64_t d = 0; d < D; d++)
      out[d] += e * vr[d];
  }
  for (int64_t d = 0; sum > 0 && d < D; d++)
    out[d] /= sum;
}

static void check_geometry(stsa_geometry g, int64_t B, int64_t H, int64_t D,
                           int64_t rows) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  const int64_t N = stsa_geometry_tokens(&g);
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = g;
  cfg.heads = H;
  cfg.head_dim = D;
  cfg.density = 0.3;
  cfg.sample_rows = rows;
  cfg.sink_frames = 1;
  cfg.seed = 7;
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_mask *masks[3] = {NULL, NULL, NULL}; /* dense, spatial, temporal */
  const stsa_head_kind kinds[3] = {STSA_HEAD_MIXED, STSA_HEAD_SPATIAL,
                                   STSA_HEAD_TEMPORAL};
  for (int i = 0; i < 3; i++)
    CHECK_STATUS(stsa_svg_kind_mask(svg, kinds[i], &masks[i], NULL, NULL), STSA_OK);
  stsa_tensor q = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  stsa_tensor k = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  stsa_tensor v = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  stsa_workload_desc wd = {sizeof wd, g, B, H, D, 3, NULL};
  CHECK_STATUS(stsa_workload_generate(&wd, &q, &k, &v, NULL), STSA_OK);
  float *mse_s = malloc(sizeof(float) * (size_t)(B * H));
  float *mse_t = malloc(sizeof(float) * (size_t)(B * H));
  int64_t *sampled = malloc(sizeof(int64_t) * (size_t)rows);
  double *w = malloc(sizeof(double) * (size_t)N), *o3 = malloc(sizeof(double) * 3 * D);
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.mse_spatial = mse_s;
  rep.mse_temporal = mse_t;
  const int64_t layer = 2, step = 5;
  CHECK_STATUS(stsa_svg_attention(svg, layer, step, &q, &k, &v, &o, &rep), STSA_OK);
  double worst = 0;
  for (int64_t b = 0; b < B; b++) {
    CHECK_STATUS(stsa_svg_sampled_rows(svg, layer, step, b, sampled), STSA_OK);
    for (int64_t h = 0; h < H; h++) {
      double e[2] = {0, 0};
      for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < 3; i++)
          ref_row(&q, &k, &v, masks[i], N, b, h, sampled[r], w, o3 + i * D);
        for (int i = 1; i < 3; i++)
          for (int64_t d = 0; d < D; d++)
            e[i - 1] += (o3[i * D + d] - o3[d]) * (o3[i * D + d] - o3[d]);
      }
      const double got[2] = {mse_s[b * H + h], mse_t[b * H + h]};
      for (int i = 0; i < 2; i++) {
        const double want = e[i] / (double)(rows * D);
        /* f32 outputs: each differs from the double one by ~1e-7 of |o| */
        const double err = fabs(got[i] - want) / (want + 1e-9);
        worst = fmax(worst, err);
        CHECK(err < 1e-3,
              "%lld x %lld x %lld text %lld: b %lld h %lld %s mse %.6g, want %.6g",
              (long long)g.frames, (long long)g.height, (long long)g.width,
              (long long)g.text, (long long)b, (long long)h, i ? "temporal" : "spatial",
              got[i], want);
      }
    }
  }
  printf("%lld x %lld x %lld, text %lld, B %lld, H %lld: worst relative mse error %.2e\n",
         (long long)g.frames, (long long)g.height, (long long)g.width, (long long)g.text,
         (long long)B, (long long)H, worst);
  for (int i = 0; i < 3; i++)
    stsa_mask_free(masks[i]);
  free(mse_s);
  free(mse_t);
  free(sampled);
  free(w);
  free(o3);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  tu_free_tensor(&o);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
}

/* A pass over several heads, each on its own rows, with only some heads
 * on (stsa_svg_profile_heads with heads_on: SVG's wider levels of a call,
 * svg_heads.c) gives each head on the row squares a pass of that head alone
 * gives (stsa_svg_profile_head), bitwise, in f32 and bf16 (the amx
 * backend's pass on its bf16 unit where it has one). */
static void check_heads_on(stsa_dtype dtype) {
  enum { H = 3, D = 64, R = 11 };
  const stsa_geometry g = {4, 6, 8, 0, 0, STSA_TEXT_NONE};
  const int64_t N = stsa_geometry_tokens(&g);
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = g;
  cfg.heads = H;
  cfg.head_dim = D;
  cfg.density = 0.3;
  cfg.sink_frames = 1;
  cfg.sample_rows = R;
  stsa_svg *svg = NULL;
  const stsa_status made = stsa_svg_create(ctx, &cfg, &svg);
  CHECK(made == STSA_OK, "svg: %s", stsa_ctx_last_error(ctx));
  stsa_mask *kind[3] = {NULL, NULL, NULL}; /* dense, spatial, temporal */
  const stsa_head_kind kinds[3] = {STSA_HEAD_MIXED, STSA_HEAD_SPATIAL,
                                   STSA_HEAD_TEMPORAL};
  for (int i = 0; i < 3; i++)
    CHECK_STATUS(stsa_svg_kind_mask(svg, kinds[i], &kind[i], NULL, NULL), STSA_OK);
  tu_rng rng = {99};
  stsa_tensor q = tu_random_tensor(&rng, dtype, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, dtype, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(&rng, dtype, TU_BSHD, 1, N, H, D, 1.0);
  int64_t rows[H * R];
  const stsa_mask *masks[2 * H];
  const uint8_t on[H] = {1, 0, 1};
  for (int64_t h = 0; h < H; h++) {
    for (int64_t r = 0; r < R; r++)
      rows[h * R + r] = (r * 17 + h * 5) % N;
    masks[h] = kind[0];
    masks[H + h] = kind[1 + h % 2];
  }
  double all[2 * H * R], one[2 * R];
  CHECK_STATUS(
      stsa_svg_profile_heads(ctx, &g, masks, 2, rows, 1, R, NULL, on, &q, &k, &v, 0, all),
      STSA_OK);
  for (int64_t h = 0; h < H; h += 2) {
    const stsa_mask *pm[2] = {masks[h], masks[H + h]};
    CHECK_STATUS(stsa_svg_profile_head(ctx, &g, pm, 2, rows + h * R, R, NULL, &q, &k, &v,
                                       0, h, one),
                 STSA_OK);
    CHECK(!memcmp(all + h * R, one, sizeof(double) * R) &&
              !memcmp(all + (H + h) * R, one + R, sizeof(double) * R),
          "%s: head %lld in the heads' pass is not its own pass's, bitwise",
          dtype == STSA_F32 ? "f32" : "bf16", (long long)h);
  }
  for (int i = 0; i < 3; i++)
    stsa_mask_free(kind[i]);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
}

int main(void) {
  check_heads_on(STSA_F32);
  check_heads_on(STSA_BF16);
  check_geometry((stsa_geometry){7, 6, 10, 0, 0, STSA_TEXT_NONE}, 1, 3, 32, 30);
  check_geometry((stsa_geometry){5, 8, 9, 13, 13, STSA_TEXT_PREFIX}, 2, 2, 24, 19);
  check_geometry((stsa_geometry){6, 5, 7, 11, 6, STSA_TEXT_SUFFIX}, 1, 5, 16, 12);
  return tu_finish("test_svg_profile");
}
