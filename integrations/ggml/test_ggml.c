/*
 * test_ggml.c — the ggml integration against ggml itself, on Wan's
 * self-attention graph as stable-diffusion.cpp builds it:
 *   - stsa dense in place of ggml_flash_attn_ext: <= 1e-5 relative L2 error
 *     (both read the same f16 K/V; sd.cpp's K/V padding and mask included);
 *   - stsa SVG as three ggml nodes: the SVG session's result
 *     (stsa_svg_attention on the graph's own q, k, v) and kinds, and within
 *     a stated error of dense on the built-in workload, whose heads are
 *     spatial or temporal (the masks hold the mass); policy-dense steps are
 *     dense;
 *   - inputs ggml accepts and stsa does not: a status and a message after
 *     ggml_graph_compute, a zeroed result, no crash.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "stsa_ggml_internal.h"
#include "wan_attn.h"

static int failures;

#define CHECK(cond, ...)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      failures++;                                                                        \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                        \
      printf(__VA_ARGS__);                                                               \
      printf("\n");                                                                      \
    }                                                                                    \
  } while (0)

static struct ggml_context *new_ctx(size_t bytes) {
  struct ggml_init_params p = {bytes, NULL, false};
  return ggml_init(p);
}

static void compute(struct ggml_context *ctx, struct ggml_tensor *out, int threads) {
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  enum ggml_status st = ggml_graph_compute_with_ctx(ctx, gf, threads);
  CHECK(st == GGML_STATUS_SUCCESS, "ggml_graph_compute: %d", (int)st);
}

static void workload(struct ggml_context *ctx, const stsa_geometry *g, int64_t H,
                     int64_t D, const stsa_head_kind *kinds, struct ggml_tensor **qkv) {
  stsa_status st = wan_workload(ctx, g, H, D, kinds, 11, qkv);
  CHECK(st == STSA_OK, "workload: %s", stsa_status_str(st));
}

/* ||a - b|| / ||b|| over n floats, and the largest |a - b|. */
static double rel_l2(const float *a, const float *b, int64_t n, double *max_abs) {
  double e = 0, r = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    e += d * d;
    r += (double)b[i] * b[i];
    m = fabs(d) > m ? fabs(d) : m;
  }
  if (max_abs)
    *max_abs = m;
  return r > 0 ? sqrt(e / r) : sqrt(e);
}

static int all_zero(const struct ggml_tensor *t) {
  const float *x = t->data;
  for (int64_t i = 0; i < ggml_nelements(t); i++)
    if (x[i] != 0.0f)
      return 0;
  return 1;
}

/* One Wan attention of `mode` on fresh inputs; copies the result to out. */
static void run_wan(const stsa_geometry *g, int64_t H, int64_t D, wan_attn *a,
                    int threads, float *out) {
  const int64_t L = stsa_geometry_tokens(g);
  struct ggml_context *ctx = new_ctx(wan_ctx_bytes(L, H * D, 0));
  struct ggml_tensor *qkv[3];
  workload(ctx, g, H, D, NULL, qkv);
  struct ggml_tensor *o = wan_self_attention(ctx, qkv[0], qkv[1], qkv[2], H, a);
  compute(ctx, o, threads);
  memcpy(out, o->data, sizeof(float) * (size_t)(L * H * D));
  ggml_free(ctx);
}

static void test_dense(const stsa_geometry *g, int64_t H, int64_t D, int threads) {
  const int64_t L = stsa_geometry_tokens(g), n = L * H * D;
  stsa_ggml *sg = NULL;
  char msg[256];
  CHECK(stsa_ggml_create(NULL, &sg, msg, sizeof msg) == STSA_OK, "create: %s", msg);
  float *ref = malloc(sizeof(float) * (size_t)n),
        *got = malloc(sizeof(float) * (size_t)n);
  wan_attn flash = {.mode = WAN_FLASH}, dense = {.mode = WAN_STSA_DENSE, .sg = sg};
  run_wan(g, H, D, &flash, threads, ref);
  run_wan(g, H, D, &dense, threads, got);
  const char *why;
  CHECK(stsa_ggml_status(sg, &why) == STSA_OK, "status: %s", why);
  double max_abs, rel = rel_l2(got, ref, n, &max_abs);
  printf("dense vs ggml_flash_attn_ext: L=%lld H=%lld D=%lld threads=%d%s: rel L2 %.2e, "
         "max abs %.2e\n",
         (long long)L, (long long)H, (long long)D, threads,
         L % 256 ? " (flash padded K/V)" : "", rel, max_abs);
  CHECK(rel <= 1e-5, "dense vs flash: rel L2 %.3e > 1e-5", rel);
  free(ref);
  free(got);
  stsa_ggml_free(sg);
}

/* dense step 0 (the policy), density 0.25 */
static stsa_svg_config svg_config(const stsa_geometry *g, int64_t H, int64_t D) {
  stsa_svg_config c = wan_svg_config(g, H, D, 0.25, 64);
  c.dense_steps = 1;
  return c;
}

/* Stated tolerance of SVG against dense on the workload (spatial and
 * temporal heads, density 0.25): the mass outside the masks; 0.1 is also
 * the CLI's --warn-rel-l2 default. */
#define SVG_TOL 0.10

static void test_svg(const stsa_geometry *g, int64_t H, int64_t D, int threads) {
  const int64_t L = stsa_geometry_tokens(g), n = L * H * D;
  stsa_svg_config cfg = svg_config(g, H, D);
  stsa_ggml *sg = NULL;
  char msg[256];
  CHECK(stsa_ggml_create(&cfg, &sg, msg, sizeof msg) == STSA_OK, "create: %s", msg);
  if (!sg)
    return;
  stsa_head_kind truth[8] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL, STSA_HEAD_TEMPORAL,
                             STSA_HEAD_SPATIAL, STSA_HEAD_SPATIAL,  STSA_HEAD_TEMPORAL,
                             STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL};
  struct ggml_context *ctx = new_ctx(3 * wan_ctx_bytes(L, H * D, 0));
  struct ggml_tensor *qkv[3];
  workload(ctx, g, H, D, truth, qkv);
  stsa_head_kind kinds[8], dense_kinds[8];
  wan_attn svg = {.mode = WAN_STSA_SVG, .sg = sg, .layer = 3, .step = 4, .kinds = kinds};
  wan_attn pol = {
      .mode = WAN_STSA_SVG, .sg = sg, .layer = 3, .step = 0, .kinds = dense_kinds};
  wan_attn dense = {.mode = WAN_STSA_DENSE, .sg = sg};
  struct ggml_tensor *o_svg = wan_self_attention(ctx, qkv[0], qkv[1], qkv[2], H, &svg);
  struct ggml_tensor *o_pol = wan_self_attention(ctx, qkv[0], qkv[1], qkv[2], H, &pol);
  struct ggml_tensor *o_dense =
      wan_self_attention(ctx, qkv[0], qkv[1], qkv[2], H, &dense);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, o_svg);
  ggml_build_forward_expand(gf, o_pol);
  ggml_build_forward_expand(gf, o_dense);
  CHECK(ggml_graph_compute_with_ctx(ctx, gf, threads) == GGML_STATUS_SUCCESS, "compute");
  const char *why;
  CHECK(stsa_ggml_status(sg, &why) == STSA_OK, "status: %s", why);

  /* the session itself on the graph's q, k, v (f32 Q, f16 K/V) */
  stsa_tensor q, k, v, o;
  char m2[512];
  stsa_ggml_tensor(svg.q, 0, "q", &q, m2);
  stsa_ggml_tensor(svg.k, 0, "k", &k, m2);
  stsa_ggml_tensor(svg.v, 0, "v", &v, m2);
  float *ses = malloc(sizeof(float) * (size_t)n);
  o = stsa_tensor_bshd(ses, STSA_F32, 1, L, H, D);
  stsa_ctx *c = NULL;
  stsa_svg *s = NULL;
  stsa_head_kind skinds[8];
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.kinds = skinds;
  CHECK(stsa_ctx_create(&c) == STSA_OK && stsa_svg_create(c, &cfg, &s) == STSA_OK,
        "session");
  stsa_status st = stsa_svg_attention(s, 3, 4, &q, &k, &v, &o, &rep);
  CHECK(st == STSA_OK, "stsa_svg_attention: %s", stsa_ctx_last_error(c));
  double max_abs, rel = rel_l2(o_svg->data, ses, n, &max_abs);
  int same_kinds = 1, true_kinds = 1;
  for (int64_t h = 0; h < H; h++) {
    same_kinds &= kinds[h] == skinds[h];
    true_kinds &= kinds[h] == truth[h];
  }
  printf("svg nodes vs stsa_svg_attention: L=%lld H=%lld D=%lld threads=%d: %s (max abs "
         "%.2e), kinds %s the session's, %s the workload's\n",
         (long long)L, (long long)H, (long long)D, threads,
         max_abs == 0 ? "bitwise equal" : "differ", max_abs, same_kinds ? "equal" : "NOT",
         true_kinds ? "equal" : "not");
  CHECK(max_abs == 0, "svg nodes vs session: max abs %.3e", max_abs);
  CHECK(same_kinds, "kinds differ from the session's");
  rel = rel_l2(o_svg->data, o_dense->data, n, &max_abs);
  printf(
      "svg vs stsa dense (density %.2f, workload heads): rel L2 %.3e (tolerance %.2f), "
      "session density %.3f\n",
      cfg.density, rel, SVG_TOL, rep.density);
  CHECK(rel <= SVG_TOL, "svg vs dense: rel L2 %.3e > %.2f", rel, SVG_TOL);
  rel = rel_l2(o_pol->data, o_dense->data, n, &max_abs);
  CHECK(max_abs <= 1e-6, "policy-dense step vs dense: max abs %.3e", max_abs);
  for (int64_t h = 0; h < H; h++)
    CHECK(dense_kinds[h] == STSA_HEAD_MIXED, "policy-dense kind %d", (int)dense_kinds[h]);
  printf("svg policy-dense step vs dense: max abs %.2e\n", max_abs);
  stsa_svg_free(s);
  stsa_ctx_free(c);
  free(ses);
  ggml_free(ctx);
  stsa_ggml_free(sg);
}

/* A node of bad inputs: its status and message after compute, a zeroed
 * result (the result is first filled with NaN). */
static void expect_error(stsa_ggml *sg, struct ggml_context *ctx, struct ggml_tensor *out,
                         stsa_status want, const char *needle, const char *what) {
  float *x = out->data;
  for (int64_t i = 0; i < ggml_nelements(out); i++)
    x[i] = NAN;
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  CHECK(ggml_graph_compute_with_ctx(ctx, gf, 2) == GGML_STATUS_SUCCESS, "%s", what);
  const char *why = NULL;
  stsa_status st = stsa_ggml_status(sg, &why);
  printf("bad input, %s: %s: %s\n", what, stsa_status_str(st), why);
  CHECK(st == want, "%s: status %s, expected %s", what, stsa_status_str(st),
        stsa_status_str(want));
  CHECK(strstr(why, needle) != NULL, "%s: message '%s' lacks '%s'", what, why, needle);
  CHECK(all_zero(out), "%s: the result is not zeroed", what);
  stsa_ggml_clear(sg);
}

static struct ggml_tensor *filled(struct ggml_context *ctx, enum ggml_type type,
                                  int64_t d, int64_t s, int64_t h, int64_t b) {
  struct ggml_tensor *t = ggml_new_tensor_4d(ctx, type, d, s, h, b);
  memset(t->data, 0, ggml_nbytes(t));
  return t;
}

static void test_bad_inputs(void) {
  const stsa_geometry g = {2, 4, 8, 0, 0, STSA_TEXT_NONE};
  const int64_t L = 64, D = 32, H = 4;
  stsa_svg_config cfg = svg_config(&g, H, D);
  cfg.sample_rows = 12;
  stsa_ggml *sg = NULL;
  char msg[256];
  CHECK(stsa_ggml_create(&cfg, &sg, msg, sizeof msg) == STSA_OK, "create: %s", msg);
  if (!sg)
    return;
  struct ggml_context *ctx = new_ctx((size_t)64 << 20);
  const enum ggml_type F16 = GGML_TYPE_F16, F32 = GGML_TYPE_F32;
  struct ggml_tensor *q = filled(ctx, F32, D, L, H, 1);
  struct ggml_tensor *k = filled(ctx, F16, D, L, H, 1), *v = filled(ctx, F16, D, L, H, 1);

  /* GQA: ggml broadcasts 2 K/V heads over 4 query heads */
  struct ggml_tensor *k2 = filled(ctx, F16, D, L, 2, 1),
                     *v2 = filled(ctx, F16, D, L, 2, 1);
  expect_error(sg, ctx, stsa_ggml_attn(sg, ctx, q, k2, v2, 0), STSA_ERR_BAD_SHAPE, "GQA",
               "GQA 4:2");
  /* DV != DK (ggml's flash attention takes v of another head dim) */
  struct ggml_tensor *v64 = filled(ctx, F16, 2 * D, L, H, 1);
  expect_error(sg, ctx, stsa_ggml_attn(sg, ctx, q, k, v64, 0), STSA_ERR_BAD_SHAPE,
               "head dims", "DV != DK");
  /* quantised K/V */
  struct ggml_tensor *kq = filled(ctx, GGML_TYPE_Q8_0, D, L, H, 1);
  expect_error(sg, ctx, stsa_ggml_attn(sg, ctx, q, kq, v, 0), STSA_ERR_BAD_DTYPE, "q8_0",
               "q8_0 K");
  /* K/V broadcast over the batch */
  struct ggml_tensor *q2 = filled(ctx, F32, D, L, H, 2);
  expect_error(sg, ctx, stsa_ggml_attn(sg, ctx, q2, k, v, 0), STSA_ERR_BAD_SHAPE,
               "no broadcast", "batch broadcast");
  /* a zero head stride (every head one K row set): stsa refuses aliasing */
  struct ggml_tensor *kz = ggml_view_4d(ctx, k, D, L, H, 1, k->nb[1], 0, k->nb[3], 0);
  expect_error(sg, ctx, stsa_ggml_attn(sg, ctx, q, kz, v, 0), STSA_ERR_BAD_STRIDE, "k",
               "aliased heads");
  /* SVG on a sequence that is not the session's video */
  struct ggml_tensor *qs = filled(ctx, F32, D, L - 8, H, 1);
  struct ggml_tensor *ks = filled(ctx, F16, D, L - 8, H, 1);
  struct ggml_tensor *vs = filled(ctx, F16, D, L - 8, H, 1);
  expect_error(sg, ctx, stsa_ggml_svg_attn(sg, ctx, qs, ks, vs, 0, 2, 3, NULL),
               STSA_ERR_BAD_SHAPE, "session is for 64 tokens", "svg, wrong length");
  /* SVG without a session */
  stsa_ggml *plain = NULL;
  CHECK(stsa_ggml_create(NULL, &plain, msg, sizeof msg) == STSA_OK, "create");
  expect_error(plain, ctx, stsa_ggml_svg_attn(plain, ctx, q, k, v, 0, 2, 3, NULL),
               STSA_ERR_UNSUPPORTED, "no SVG session", "svg without a session");
  /* NaN in K with the finite check on */
  stsa_ctx_set(stsa_ggml_ctx(plain), STSA_PARAM_CHECK_FINITE, 1);
  struct ggml_tensor *kn = filled(ctx, F16, D, L, H, 1);
  ((ggml_fp16_t *)kn->data)[77] = ggml_fp32_to_fp16(NAN);
  expect_error(plain, ctx, stsa_ggml_attn(plain, ctx, q, kn, v, 0), STSA_ERR_NONFINITE,
               "dense attention", "NaN in K, finite check on");
  /* SVG2 and error budgets are not ggml nodes */
  stsa_svg_config c2 = cfg;
  c2.max_rel_error = 0.1;
  stsa_ggml *none = NULL;
  CHECK(stsa_ggml_create(&c2, &none, msg, sizeof msg) == STSA_ERR_UNSUPPORTED && !none,
        "a budget must be refused");
  printf("bad input, svg config with a budget: %s\n", msg);
  stsa_ggml_free(plain);
  ggml_free(ctx);
  stsa_ggml_free(sg);
}

int main(void) {
  ggml_cpu_init();
  const stsa_geometry g1 = {4, 12, 16, 0, 0, STSA_TEXT_NONE}; /* 768 tokens */
  const stsa_geometry g2 = {3, 10, 13, 0, 0, STSA_TEXT_NONE}; /* 390: sd.cpp pads */
  const stsa_geometry g3 = {8, 16, 16, 0, 0, STSA_TEXT_NONE}; /* 2048 */
  test_dense(&g1, 4, 64, 2);
  test_dense(&g2, 2, 128, 3);
  test_dense(&g2, 3, 80, 1);
  test_svg(&g3, 4, 64, 2);
  test_svg(&g3, 8, 32, 3);
  test_bad_inputs();
  printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
