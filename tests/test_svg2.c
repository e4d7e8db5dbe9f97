/*
 * test_svg2.c — Sparse VideoGen 2 and the error budget: the top-p rule on
 * hand-made centroid scores, cluster plans against the double-precision
 * reference under the same mask (text none, prefix, suffix with padding;
 * batch 2; clusters cut into several tiles; lengths that are not tile
 * multiples), the session end to end (cold then warm calls, determinism
 * across thread counts, the report), the error budget of SVG and SVG2
 * against dense attention on the built-in workload, bad configurations and
 * a config of the first release's size.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/problem.h"
#include "mask/cluster_plan.h"
#include "mask/sparse_call.h"
#include "mask_util.h"
#include "svg/select.h"
#include "testutil.h"

static stsa_ctx *make_ctx(stsa_backend backend, int threads) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backend);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, threads);
  return ctx;
}

/* ---- the top-p rule ------------------------------------------------------ */
static void keep_of(stsa_select_args *a, uint8_t *keep) {
  double prob[2 * 5];
  CHECK(stsa_select_probs(a, prob) == 0, "probs");
  CHECK(stsa_select_keep(a, prob, keep) == 0, "keep");
}

static int row_is(const uint8_t *row, const char *want) {
  for (int j = 0; want[j]; j++)
    if ((row[j] != 0) != (want[j] == '1'))
      return 0;
  return 1;
}

static void test_topp_rule(void) {
  /* d = 1, scale 1. Query cluster 0 sits at 0: every score is ln |kc|, so
   * the probabilities are the sizes' shares 0.5, 0.3, 0.15, 0.05 (cluster 4
   * is empty). Query cluster 1 at 1 sees key cluster 3 at 3: logit 3 + ln 5
   * = 4.61 > ln 50, probability 100.4 / 195.4 = 0.514. */
  const float qc[2] = {0.0f, 1.0f}, kc[5] = {0, 0, 0, 3, 9};
  const int64_t sizes[5] = {50, 30, 15, 5, 0};
  stsa_select_args a = {2, 5, 1, qc, kc, sizes, 1.0, 0.9, 0, 0};
  uint8_t keep[10];
  keep_of(&a, keep);
  CHECK(row_is(keep, "11100"), "p 0.9: the crossing cluster is kept");
  CHECK(row_is(keep + 5, "11010"),
        "p 0.9, row 1: clusters 3, 0, 1 (0.514 + 0.256 + 0.154)");
  a.top_p = 0.5;
  keep_of(&a, keep);
  CHECK(row_is(keep, "10000"), "p 0.5: the top one reaches it");
  CHECK(row_is(keep + 5, "00010"), "p 0.5, row 1: cluster 3 alone");
  a.top_p = 0.01;
  keep_of(&a, keep);
  CHECK(row_is(keep, "10000") && row_is(keep + 5, "00010"), "the top one always");
  a.min_keep = 4;
  keep_of(&a, keep);
  CHECK(row_is(keep, "11110") && row_is(keep + 5, "11110"),
        "at least 4 kept, the empty cluster never");
  a.min_keep = 0;
  a.top_p = 0;
  a.key_budget = 60; /* density mode: keys until 60 are kept */
  keep_of(&a, keep);
  CHECK(row_is(keep, "11000"), "key budget 60: 50 + 30 keys");
  CHECK(row_is(keep + 5, "11010"), "key budget 60, row 1: 5 + 50 + 30 keys");
  /* ties go to the lower index */
  const float kt[5] = {0, 0, 0, 0, 0};
  const int64_t even[5] = {10, 10, 10, 10, 10};
  stsa_select_args t = {2, 5, 1, qc, kt, even, 1.0, 0.35, 0, 0};
  keep_of(&t, keep);
  CHECK(row_is(keep, "11000"), "ties: lower indices first");
}

/* A ladder of rules at once (stsa_select_keep_rules) keeps bitwise what
 * each rule keeps alone, on random probabilities with ties and an empty
 * key cluster, for top-p and key-budget ladders whose rules stop in any
 * order (min_keep differs). */
static void test_rules_at_once(void) {
  enum { QC = 23, KC = 61, N = 4 };
  static double prob[QC * KC];
  static uint8_t alone[N][QC * KC], many[N][QC * KC];
  int64_t sizes[KC];
  tu_rng rng = {4242};
  for (int j = 0; j < KC; j++)
    sizes[j] = j == 7 ? 0 : tu_rnd(&rng, 1, 40);
  for (int i = 0; i < QC; i++) {
    double sum = 0;
    for (int j = 0; j < KC; j++) {
      const double u = 0.5 * (1 + tu_rng_uniform(&rng)); /* [0, 1) */
      prob[i * KC + j] = sizes[j] == 0 ? 0 : j % 9 == 0 ? 0.02 : u * u * u;
      sum += prob[i * KC + j];
    }
    for (int j = 0; j < KC; j++)
      prob[i * KC + j] /= sum;
  }
  for (int ladder = 0; ladder < 2; ladder++) {
    stsa_select_args a[N];
    uint8_t *keep[N];
    for (int c = 0; c < N; c++) {
      a[c] = (stsa_select_args){QC, KC, 1, NULL, NULL, sizes, 1.0, 0, 0, 0};
      if (ladder == 0)
        a[c].top_p = (double[]){0.9, 0.95, 0.98, 0.995}[c];
      else
        a[c].key_budget = 100 << c;
      a[c].min_keep = (int64_t[]){12, 3, 0, 20}[c];
      keep[c] = many[c];
      CHECK(stsa_select_keep(&a[c], prob, alone[c]) == 0, "keep");
    }
    CHECK(stsa_select_keep_rules(a, N, prob, keep) == 0, "keep_rules");
    for (int c = 0; c < N; c++)
      CHECK(memcmp(alone[c], many[c], sizeof alone[c]) == 0,
            "%s ladder, rule %d: at once differs from alone", ladder ? "key" : "top-p",
            c);
  }
}

/* ---- cluster plans against the reference -------------------------------- */
/* Random labels (one empty query and key cluster) and a random keep map in
 * which every query cluster keeps something. */
static void random_layout(tu_rng *rng, const stsa_geometry *g, int64_t QC, int64_t KC,
                          int32_t *ql, int32_t *kl, uint8_t *keep) {
  const int64_t N = tu_tokens(g), L = g->frames * g->height * g->width;
  const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  for (int64_t i = 0; i < N; i++) {
    int video = i >= v0 && i < v0 + L;
    ql[i] = video ? (int32_t)tu_rnd(rng, 0, QC - 2) : -1; /* QC-1 stays empty */
    kl[i] = video ? (int32_t)tu_rnd(rng, 1, KC - 1) : -1; /* 0 stays empty */
  }
  for (int64_t c = 0; c < QC; c++) {
    for (int64_t j = 0; j < KC; j++)
      keep[c * KC + j] = tu_rng_uniform(rng) < 0.35;
    keep[c * KC + 1 + c % (KC - 1)] = 1;
  }
}

/* kv_panels: the kv tile in panels (1: clusters of ~13 keys never share a
 * tile; 4: a few side by side in merged runs, their tails sharing panels).
 * shift > 0 sets q[.][0] = -shift and k[.][0] = +shift: every logit lies
 * near -shift^2 scale log2(e) (hundreds below 0), where a softmax that took
 * a maximum of 0 (a padding column's score) would see exp2 underflow. */
static void check_plan(const char *what, const stsa_geometry *g, int64_t B, int64_t H,
                       int64_t D, stsa_dtype dtype, int kv_panels, double shift,
                       tu_rng *rng) {
  stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 2);
  const int64_t N = tu_tokens(g), QC = 6, KC = 9;
  int32_t *ql = malloc(sizeof(int32_t) * (size_t)(N * H));
  int32_t *kl = malloc(sizeof(int32_t) * (size_t)(N * H));
  uint8_t *keep = malloc((size_t)(QC * KC * H));
  stsa_mask **masks = calloc((size_t)H, sizeof *masks);
  stsa_plan **plans = calloc((size_t)H, sizeof *plans);
  const int mr = ctx->run->kern.mr, nr = ctx->run->kern.nr;
  for (int64_t h = 0; h < H; h++) {
    random_layout(rng, g, QC, KC, ql + h * N, kl + h * N, keep + h * QC * KC);
    stsa_mask *rect = NULL, *text = NULL;
    CHECK_STATUS(stsa_mask_clusters(ql + h * N, N, QC, kl + h * N, N, KC,
                                    keep + h * QC * KC, &rect),
                 STSA_OK);
    CHECK_STATUS(stsa_mask_text(g, &text), STSA_OK);
    masks[h] = tu_or_free(rect, text);
    /* small tiles, so that clusters span several tiles of both kinds */
    /* spans where the kernels ask, as the session packs them: on 32-key
     * blocks for bf16 calls on the bf16 tiles (amx), which take them */
    stsa_cluster_layout lay = {g,
                               QC,
                               KC,
                               ql + h * N,
                               kl + h * N,
                               keep + h * QC * KC,
                               2 * mr,
                               kv_panels * nr,
                               stsa_kv_pack_align(&ctx->run->kern, dtype, dtype, dtype)};
    CHECK_STATUS(stsa_cluster_plan_build(ctx, &lay, masks[h], &plans[h], &ctx->err),
                 STSA_OK);
    stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
    stsa_plan_get_stats(plans[h], &st);
    int64_t kept = 0;
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < N; j++)
        kept += stsa_mask_keep(masks[h], i, j);
    CHECK(st.pairs_kept == kept && st.tiles_partial == 0,
          "%s head %lld: %lld pairs kept, brute force %lld; %lld partial tiles", what,
          (long long)h, (long long)st.pairs_kept, (long long)kept,
          (long long)st.tiles_partial);
  }
  stsa_tensor q = tu_random_tensor(rng, dtype, TU_BSHD, B, N, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(rng, dtype, TU_BHSD, B, N, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(rng, dtype, TU_BSHD, B, N, H, D, 1.0);
  for (int64_t b = 0; shift > 0 && b < B; b++)
    for (int64_t i = 0; i < N; i++)
      for (int64_t h = 0; h < H; h++) {
        tu_store(q.data, dtype, tu_offset(&q, b, i, h, 0), -shift);
        tu_store(k.data, dtype, tu_offset(&k, b, i, h, 0), shift);
      }
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  stsa_tensor o2 = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  int64_t *plan_heads = calloc((size_t)H, sizeof *plan_heads);
  const stsa_plan **cp = (const stsa_plan **)plans;
  CHECK_STATUS(stsa_sparse_attention_heads(ctx, cp, plan_heads, &q, &k, &v, &o, NULL, 1),
               STSA_OK);
  stsa_sparse_opts naive = STSA_INIT(stsa_sparse_opts);
  naive.mode = STSA_SPARSE_NAIVE;
  CHECK_STATUS(
      stsa_sparse_attention_heads(ctx, cp, plan_heads, &q, &k, &v, &o2, &naive, 1),
      STSA_OK);
  /* NAIVE takes the tiles one at a time; EXACT merges them into runs (f32:
   * a tile alone too, its tail run with the q tile's other tails), the same
   * pairs summed in another order */
  const double naive_diff = tu_max_abs_diff(&o, &o2, NULL);
  /* FULL tiles only: tile rounding changes nothing */
  int64_t changed = -1;
  stsa_sparse_opts rounded = STSA_INIT(stsa_sparse_opts);
  rounded.mode = STSA_SPARSE_TILE_ROUNDED;
  rounded.pairs_changed = &changed;
  CHECK_STATUS(
      stsa_sparse_attention_heads(ctx, cp, plan_heads, &q, &k, &v, &o2, &rounded, 1),
      STSA_OK);
  CHECK(tu_same_bytes(&o, &o2) && changed == 0,
        "%s: TILE_ROUNDED equals EXACT bitwise (%lld pairs changed)", what,
        (long long)changed);
  double *ref = malloc(sizeof(double) * (size_t)D), worst = 0, scale = 0;
  int finite = 1;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < N; i++) {
        double lse;
        tu_masked_reference_row(&q, &k, &v, masks[h], b, i, i, h, NULL, ref, &lse);
        for (int64_t d = 0; d < D; d++) {
          double got = tu_load(o.data, STSA_F32, tu_offset(&o, b, i, h, d));
          finite &= isfinite(got) != 0;
          worst = fmax(worst, fabs(got - ref[d]));
          scale = fmax(scale, fabs(ref[d]));
        }
      }
  /* shifted logits: f32 rounds q.k ~ shift^2 to ~1e-4 */
  const double tol = shift > 0 ? 2e-4 : dtype == STSA_F32 ? 2e-6 : 1e-5;
  CHECK(finite && worst <= tol * fmax(scale, 1.0),
        "%s: max |out - ref| = %.3g (scale %.3g)", what, worst, scale);
  CHECK(naive_diff <= tol * fmax(scale, 1.0), "%s: NAIVE differs from EXACT by %.3g",
        what, naive_diff);
  /* the reference backend walks the same variable tiles */
  stsa_ctx *rctx = make_ctx(STSA_BACKEND_REF, 1);
  stsa_tensor o3 = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  CHECK_STATUS(
      stsa_sparse_attention_heads(rctx, cp, plan_heads, &q, &k, &v, &o3, NULL, 1),
      STSA_OK);
  double diff = tu_max_abs_diff(&o, &o3, NULL);
  CHECK(diff <= tol * fmax(scale, 1.0), "%s: REF backend differs by %.3g", what, diff);
  for (int64_t h = 0; h < H; h++) {
    stsa_plan_free(plans[h]);
    stsa_mask_free(masks[h]);
  }
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  tu_free_tensor(&o);
  tu_free_tensor(&o2);
  tu_free_tensor(&o3);
  free(ref);
  free(plan_heads);
  free(plans);
  free(masks);
  free(keep);
  free(kl);
  free(ql);
  stsa_ctx_free(rctx);
  stsa_ctx_free(ctx);
}

static void test_cluster_plans(void) {
  tu_rng rng = {42};
  const stsa_geometry none = {3, 5, 7, 0, 0, STSA_TEXT_NONE};
  const stsa_geometry prefix = {2, 6, 5, 9, 9, STSA_TEXT_PREFIX};
  const stsa_geometry suffix = {3, 4, 5, 13, 8, STSA_TEXT_SUFFIX}; /* 5 padding */
  check_plan("no text", &none, 1, 1, 64, STSA_F32, 1, 0, &rng);
  check_plan("prefix text, 2 heads, D 80", &prefix, 1, 2, 80, STSA_F32, 1, 0, &rng);
  check_plan("suffix with padding, batch 2, bf16", &suffix, 2, 2, 128, STSA_BF16, 1, 0,
             &rng);
  check_plan("suffix with padding, f16", &suffix, 1, 1, 64, STSA_F16, 1, 0, &rng);
  check_plan("merged runs, prefix text", &prefix, 1, 2, 128, STSA_F32, 4, 0, &rng);
  /* every logit far below 0: the maxima of ragged spans must be exact */
  check_plan("merged runs, logits near -300 (log2)", &prefix, 1, 2, 128, STSA_F32, 4, 48,
             &rng);
  check_plan("single tiles, logits near -400 (log2)", &none, 1, 1, 64, STSA_F32, 1, 48,
             &rng);
  /* bf16 runs: clusters of ~33 keys (whole 32-key blocks and a rest) and of
   * ~8 (rests only), whose rests share gathered blocks on amx */
  const stsa_geometry wide = {3, 8, 12, 9, 9, STSA_TEXT_PREFIX};
  check_plan("merged runs, bf16, D 80", &wide, 1, 2, 80, STSA_BF16, 8, 0, &rng);
  check_plan("merged runs, bf16, small clusters, batch 2", &prefix, 2, 1, 128, STSA_BF16,
             8, 0, &rng);
}

/* ---- the session ----------------------------------------------------------- */
static const stsa_geometry WORK_GEO = {6, 12, 16, 0, 0, STSA_TEXT_NONE};

static stsa_svg_config svg2_config(int64_t H, int64_t D) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = WORK_GEO;
  c.heads = H;
  c.head_dim = D;
  c.density = 0.25;
  c.sample_rows = 48;
  c.sink_frames = 1;
  c.seed = 7;
  c.method = STSA_SVG_METHOD_SVG2;
  c.svg2.q_clusters = 16;
  c.svg2.kv_clusters = 40;
  c.svg2.top_p = 0.9;
  return c;
}

typedef struct workload {
  stsa_tensor q, k, v;
  int64_t B, H, N, D;
} workload;

static workload make_workload_on(const stsa_geometry *g, int64_t B,
                                 const stsa_head_kind *kinds, int64_t H, int64_t D,
                                 uint64_t seed) {
  workload w = {.B = B, .H = H, .N = tu_tokens(g), .D = D};
  w.q = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, w.N, H, D);
  w.k = tu_sentinel_tensor(STSA_F32, TU_BHSD, B, w.N, H, D);
  w.v = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, w.N, H, D);
  stsa_workload_desc d = STSA_INIT(stsa_workload_desc);
  d.geometry = *g;
  d.batch = B;
  d.heads = H;
  d.head_dim = D;
  d.seed = seed;
  d.kinds = kinds;
  CHECK_STATUS(stsa_workload_generate(&d, &w.q, &w.k, &w.v, NULL), STSA_OK);
  return w;
}

static workload make_workload(int64_t B, const stsa_head_kind *kinds, int64_t H,
                              int64_t D, uint64_t seed) {
  return make_workload_on(&WORK_GEO, B, kinds, H, D, seed);
}

static void free_workload(workload *w) {
  tu_free_tensor(&w->q);
  tu_free_tensor(&w->k);
  tu_free_tensor(&w->v);
}

/* Per (b, h): ||o - ref|| / ||ref|| over every row. */
static void rel_errors(const stsa_tensor *o, const stsa_tensor *ref, const workload *w,
                       double *rel) {
  for (int64_t b = 0; b < w->B; b++)
    for (int64_t h = 0; h < w->H; h++) {
      double e = 0, e0 = 0;
      for (int64_t i = 0; i < w->N; i++)
        for (int64_t d = 0; d < w->D; d++) {
          double x = tu_load(o->data, STSA_F32, tu_offset(o, b, i, h, d));
          double y = tu_load(ref->data, STSA_F32, tu_offset(ref, b, i, h, d));
          e += (x - y) * (x - y);
          e0 += y * y;
        }
      rel[b * w->H + h] = sqrt(e / e0);
    }
}

static void test_session(void) {
  const stsa_head_kind kinds[3] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SPATIAL,
                                   STSA_HEAD_TEMPORAL};
  workload w = make_workload(2, kinds, 3, 64, 11);
  stsa_tensor out[2];
  for (int t = 0; t < 2; t++) {
    stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, t + 1);
    stsa_svg_config cfg = svg2_config(3, 64);
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
    out[t] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 2, w.N, 3, 64);
    for (int64_t step = 0; step < 3; step++) {
      stsa_head_kind got[6];
      float est[6], dens[6], topp[6];
      uint8_t budget[6];
      stsa_svg_report rep = STSA_INIT(stsa_svg_report);
      rep.kinds = got;
      rep.est_error = est;
      rep.head_density = dens;
      rep.head_top_p = topp;
      rep.budget = budget;
      CHECK_STATUS(stsa_svg_attention(svg, 0, step, &w.q, &w.k, &w.v, &out[t], &rep),
                   STSA_OK);
      CHECK(rep.cold == (step == 0), "step %lld: cold %d", (long long)step, rep.cold);
      CHECK(rep.q_clusters == 16 && rep.kv_clusters == 40 && !rep.dense,
            "report clusters %lld / %lld", (long long)rep.q_clusters,
            (long long)rep.kv_clusters);
      CHECK(rep.cluster_ms > 0 && rep.cluster_ms <= rep.profile_ms,
            "cluster %.3f ms inside profiling %.3f ms", rep.cluster_ms, rep.profile_ms);
      for (int i = 0; i < 6; i++)
        CHECK(got[i] == STSA_HEAD_SEMANTIC && dens[i] > 0 && dens[i] < 1 &&
                  isnan(est[i]) && budget[i] == STSA_BUDGET_NONE &&
                  fabsf(topp[i] - 0.9f) < 1e-6f,
              "head %d: kind %d density %.3f est %.3g budget %d top-p %.3f", i, got[i],
              (double)dens[i], (double)est[i], budget[i], (double)topp[i]);
    }
    stsa_svg_free(svg);
    stsa_ctx_free(ctx);
  }
  CHECK(tu_same_bytes(&out[0], &out[1]), "1 and 2 threads: bitwise equal outputs");
  tu_free_tensor(&out[0]);
  tu_free_tensor(&out[1]);
  free_workload(&w);
}

/* A clean SVG2 call at `step`, then one with an element of the rows at[i]
 * = {tensor (q 0, k 1, v 2), b, s, h} set to x, restored after: it fails
 * with STSA_ERR_NONFINITE and the message of the full scan (`want`: the
 * first bad row of q, then k, then v) and leaves the output as it was. */
static void expect_nonfinite(stsa_svg *svg, stsa_ctx *ctx, workload *w, int64_t step,
                             const int64_t (*at)[4], int nat, float x, stsa_tensor *out,
                             const char *want) {
  stsa_tensor *t[3] = {&w->q, &w->k, &w->v};
  float old[4];
  /* a clean call first: the layer is warm (a failed k-means leaves it cold) */
  CHECK_STATUS(stsa_svg_attention(svg, 0, step, &w->q, &w->k, &w->v, out, NULL), STSA_OK);
  const size_t bytes = sizeof(float) * (size_t)(w->B * w->N * w->H * w->D);
  float *before = malloc(bytes);
  memcpy(before, out->data, bytes);
  for (int i = 0; i < nat; i++) {
    float *e = (float *)stsa_tensor_row(t[at[i][0]], at[i][1], at[i][2], at[i][3]);
    old[i] = e[3], e[3] = x;
  }
  CHECK_STATUS(stsa_svg_attention(svg, 0, step, &w->q, &w->k, &w->v, out, NULL),
               STSA_ERR_NONFINITE);
  CHECK(strstr(stsa_ctx_last_error(ctx), want) != NULL, "%s: the error reads \"%s\"",
        want, stsa_ctx_last_error(ctx));
  CHECK(memcmp(before, out->data, bytes) == 0, "%s: the output was written", want);
  for (int i = nat - 1; i >= 0; i--)
    ((float *)stsa_tensor_row(t[at[i][0]], at[i][1], at[i][2], at[i][3]))[3] = old[i];
  free(before);
}

/* NaN/Inf in a warm SVG2 call. With one batch entry the session leaves the
 * video rows of q and k to the k-means (its first pass over every point;
 * 136 and 144 clusters give it the coarse pass that checks them), and scans v
 * and the text rows itself; with two it scans everything first, as the
 * first entry's output is written before the second's k-means. Either way
 * the error is the full scan's and nothing is written, and the session
 * runs the clean inputs after. */
static void test_nonfinite(void) {
  const stsa_geometry g = {6, 12, 16, 8, 5, STSA_TEXT_PREFIX}; /* video from 8 */
  const stsa_head_kind kinds[2] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SPATIAL};
  for (int64_t B = 1; B <= 2; B++) {
    workload w = make_workload_on(&g, B, kinds, 2, 64, 17);
    stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 2);
    stsa_svg_config cfg = svg2_config(2, 64);
    cfg.geometry = g;
    cfg.svg2.q_clusters = 136;
    cfg.svg2.kv_clusters = 144;
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
    stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, w.N, 2, 64);
    CHECK_STATUS(stsa_svg_attention(svg, 0, 0, &w.q, &w.k, &w.v, &out, NULL), STSA_OK);
    const int64_t b = B - 1; /* the last entry: with two, the first is clean */
    char want[64];
    const int64_t q_video[1][4] = {{0, b, 308, 1}};
    snprintf(want, sizeof want, "q[b=%lld, s=308, h=1] holds NaN or Inf", (long long)b);
    expect_nonfinite(svg, ctx, &w, 1, q_video, 1, NAN, &out, want);
    const int64_t k_video[2][4] = {{1, b, 500, 0}, {1, b, 48, 1}};
    snprintf(want, sizeof want, "k[b=%lld, s=48, h=1] holds NaN or Inf", (long long)b);
    expect_nonfinite(svg, ctx, &w, 1, k_video, 2, INFINITY, &out, want);
    const int64_t q_text[1][4] = {{0, b, 2, 0}};
    snprintf(want, sizeof want, "q[b=%lld, s=2, h=0] holds NaN or Inf", (long long)b);
    expect_nonfinite(svg, ctx, &w, 1, q_text, 1, -INFINITY, &out, want);
    const int64_t v_and_q[2][4] = {{2, b, 9, 0}, {0, b, 1000, 1}};
    snprintf(want, sizeof want, "q[b=%lld, s=1000, h=1] holds NaN or Inf", (long long)b);
    expect_nonfinite(svg, ctx, &w, 1, v_and_q, 2, NAN, &out, want);
    CHECK_STATUS(stsa_svg_attention(svg, 0, 1, &w.q, &w.k, &w.v, &out, NULL), STSA_OK);
    stsa_svg_free(svg);
    stsa_ctx_free(ctx);
    tu_free_tensor(&out);
    free_workload(&w);
  }
}

/* The realised error of every head stays within BUDGET_FACTOR of the budget
 * (the estimate sees the profiled rows only). */
#define BUDGET_FACTOR 2.0

static void check_budget(int method, double budget) {
  const stsa_head_kind kinds[4] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SPATIAL,
                                   STSA_HEAD_TEMPORAL, STSA_HEAD_SEMANTIC};
  workload w = make_workload(1, kinds, 4, 64, 5);
  stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 2);
  stsa_svg_config cfg = svg2_config(4, 64);
  cfg.method = method;
  cfg.density = 0.12;
  cfg.svg2.top_p = method == STSA_SVG_METHOD_SVG2 ? 0.7 : 0;
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, w.N, 4, 64);
  stsa_tensor dense = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, w.N, 4, 64);
  CHECK_STATUS(stsa_attention(ctx, &w.q, &w.k, &w.v, &dense, NULL), STSA_OK);
  float est[4], dens[4];
  uint8_t act[4];
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.est_error = est;
  rep.head_density = dens;
  rep.budget = act;
  stsa_svg_call call = {sizeof call, budget};
  for (int64_t step = 0; step < 2; step++)
    CHECK_STATUS(stsa_svg_attention_ex(svg, 0, step, &w.q, &w.k, &w.v, &o, &call, &rep),
                 STSA_OK);
  double rel[4];
  rel_errors(&o, &dense, &w, rel);
  for (int h = 0; h < 4; h++) {
    /* 1e-6: f32 rounding, for budgets below it */
    CHECK(rel[h] <= BUDGET_FACTOR * budget + 1e-6,
          "%s budget %.3g head %d (%s): realised %.4f, estimated %.4f, density %.3f",
          stsa_svg_method_name(method), budget, h, stsa_head_kind_name(kinds[h]), rel[h],
          (double)est[h], (double)dens[h]);
    CHECK(act[h] == STSA_BUDGET_DENSE ? dens[h] == 1.0f : est[h] <= budget,
          "%s head %d: action %s with estimate %.4f", stsa_svg_method_name(method), h,
          stsa_budget_action_name(act[h]), (double)est[h]);
  }
  if (budget < 1e-6)
    for (int h = 0; h < 4; h++)
      CHECK(act[h] == STSA_BUDGET_DENSE || dens[h] > 0.99f,
            "budget %.1g: head %d runs dense (%s) or keeps every key (density %.3f)",
            budget, h, stsa_budget_action_name(act[h]), (double)dens[h]);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  tu_free_tensor(&o);
  tu_free_tensor(&dense);
  free_workload(&w);
}

static void test_budget(void) {
  for (int m = 0; m < 2; m++) {
    check_budget(m, 0.05);
    check_budget(m, 0.2);
    check_budget(m, 1e-9);
  }
}

/* ---- bad input ------------------------------------------------------------ */
static void test_bad_config(void) {
  stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 1);
  stsa_svg *svg = NULL;
  stsa_svg_config c = svg2_config(1, 32);
  c.method = STSA_SVG_METHOD_COUNT_;
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_ERR_BAD_PARAM);
  c = svg2_config(1, 32);
  c.svg2.top_p = 1.5;
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_ERR_BAD_PARAM);
  c = svg2_config(1, 32);
  c.svg2.kv_clusters = 6 * 12 * 16 + 1;
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_ERR_BAD_PARAM);
  c = svg2_config(1, 32);
  c.max_rel_error = -1;
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_ERR_BAD_PARAM);
  CHECK(svg == NULL, "nothing created");
  CHECK(strstr(stsa_ctx_last_error(ctx), "max_rel_error") != NULL, "message: %s",
        stsa_ctx_last_error(ctx));
  /* a per-call budget that is not finite; the output stays untouched */
  c = svg2_config(1, 32);
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_OK);
  tu_rng rng = {3};
  const int64_t N = tu_tokens(&WORK_GEO);
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, 1, 32, 1.0);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, 1, 32);
  stsa_svg_call call = {sizeof call, INFINITY};
  CHECK_STATUS(stsa_svg_attention_ex(svg, 0, 0, &q, &q, &q, &o, &call, NULL),
               STSA_ERR_BAD_PARAM);
  CHECK(tu_is_sentinel(&o), "output untouched");
  stsa_svg_free(svg);
  /* the earlier layouts of the config and the report: test_svg_layouts */
  stsa_svg_config first = STSA_INIT(stsa_svg_config);
  CHECK_STATUS(stsa_svg_preset("wan21-480p", &first), STSA_OK);
  CHECK(first.svg2.kv_clusters == 433 && first.svg2.top_p == 0.9 && first.method == 0,
        "preset's SVG2 fields: %lld key clusters, top-p %g",
        (long long)first.svg2.kv_clusters, first.svg2.top_p);
  first = svg2_config(1, 32);
  first.method = STSA_SVG_METHOD_SVG;
  first.size = offsetof(stsa_svg_config, method);
  CHECK_STATUS(stsa_svg_create(ctx, &first, &svg), STSA_OK);
  stsa_svg_free(svg);
  tu_free_tensor(&q);
  tu_free_tensor(&o);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_topp_rule();
  test_rules_at_once();
  test_cluster_plans();
  test_session();
  test_budget();
  test_bad_config();
  test_nonfinite();
  return tu_finish("test_svg2");
}
