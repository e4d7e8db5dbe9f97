/*
 * test_amx.c — the bf16 tiles (kernels.h: full_tile_bf16) of the amx and
 * avx512bf16 backends (one engine, two multiply units) on
 * dense and sparse calls with bf16 q, k and v, against the double-precision
 * reference
 * and against the f32 path of the avx512 backend, for each number of bf16
 * terms per probability (STSA_PARAM_PV_PRECISION): three terms must give the
 * f32 path's accuracy, one term PyTorch's bf16 rounding of p. Shapes are
 * not tile multiples, D is not always a multiple of 32, q tiles leave
 * passes of fewer than 32 rows; outputs sit between guard bytes; results
 * are bitwise the same on 1, 2 and 3 threads. On a machine without AMX the
 * test checks only that the backend is refused there.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/dispatch.h"
#include "kernel/kernels.h"
#include "kernel/problem.h"
#include "mask/cluster_plan.h"
#include "mask/mask.h"
#include "mask_util.h"
#include "testutil.h"

/* The backend with bf16 tiles under test (main runs every case on amx and
 * on avx512bf16, where this machine runs them). */
static stsa_backend TILES = STSA_BACKEND_AMX;

typedef struct amx_case {
  int64_t B, Sq, Skv, H, D;
  int q_tile, kv_tile;
  double input_scale; /* of q and k: larger gives peakier softmax rows */
} amx_case;

static stsa_ctx *ctx_with(stsa_backend backend, int threads, const amx_case *c,
                          int terms) {
  stsa_ctx *ctx = tu_make_ctx(backend, threads, c->q_tile, c->kv_tile);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, terms), STSA_OK);
  return ctx;
}

/* Every call on a backend with bf16 tiles here has bf16 q, k and v: it must say it ran
 * the bf16 tiles (stsa_run_info), whatever its kv tiles (fixed ones of any
 * multiple of 16 keys pad to 32-key blocks). */
static void check_ran_bf16_tiles(stsa_backend backend, const stsa_ctx *ctx,
                                 const char *what) {
  stsa_run_info info = STSA_INIT(stsa_run_info);
  CHECK_STATUS(stsa_ctx_last_run(ctx, &info), STSA_OK);
  if (tu_has_bf16_tiles(backend))
    CHECK(info.arith == STSA_ARITH_BF16_TILES && info.why[0] == 0,
          "%s: ran %s, why = \"%s\"", what, stsa_arith_name(info.arith), info.why);
}

/* out = attention on `backend` with `terms` terms and `threads` threads. */
static void run(stsa_backend backend, int threads, const amx_case *c, int terms,
                const stsa_tensor *q, const stsa_tensor *k, const stsa_tensor *v,
                const stsa_tensor *out, float *lse) {
  stsa_ctx *ctx = ctx_with(backend, threads, c, terms);
  stsa_attn_opts opts = {sizeof opts, 0.0f, lse};
  CHECK_STATUS(stsa_attention(ctx, q, k, v, out, &opts), STSA_OK);
  check_ran_bf16_tiles(backend, ctx, "dense");
  stsa_ctx_free(ctx);
}

/* max |lse - ref| / (1 + |ref|) over n rows. */
static double lse_error(const float *lse, const float *ref, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double e =
        isfinite(lse[i]) ? fabs(lse[i] - ref[i]) / (1 + fabs(ref[i])) : INFINITY;
    worst = e > worst ? e : worst;
  }
  return worst;
}

static void check_case(const amx_case *c) {
  char name[160];
  snprintf(name, sizeof name, "B=%lld Sq=%lld Skv=%lld H=%lld D=%lld tiles %d/%d x%g",
           (long long)c->B, (long long)c->Sq, (long long)c->Skv, (long long)c->H,
           (long long)c->D, c->q_tile, c->kv_tile, c->input_scale);
  tu_rng rng = {(uint64_t)(c->Sq * 31 + c->Skv * 977 + c->D)};
  stsa_tensor q =
      tu_random_tensor(&rng, STSA_BF16, TU_BSHD, c->B, c->Sq, c->H, c->D, c->input_scale);
  stsa_tensor k = tu_random_tensor(&rng, STSA_BF16, TU_BHSD, c->B, c->Skv, c->H, c->D,
                                   c->input_scale);
  stsa_tensor v =
      tu_random_tensor(&rng, STSA_BF16, TU_BSHD, c->B, c->Skv, c->H, c->D, 1.0);
  const size_t nlse = (size_t)(c->B * c->H * c->Sq);
  stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, c->B, c->Sq, c->H, c->D);
  stsa_tensor f32 = tu_sentinel_tensor(STSA_F32, TU_BSHD, c->B, c->Sq, c->H, c->D);
  float *ref_lse = tu_guarded_alloc(nlse * sizeof(float));
  run(STSA_BACKEND_REF, 2, c, 0, &q, &k, &v, &ref, ref_lse);
  run(STSA_BACKEND_AVX512, 2, c, 0, &q, &k, &v, &f32, NULL);
  double scale, f32_err = tu_max_abs_diff(&f32, &ref, &scale);
  scale = scale > 1e-3 ? scale : 1e-3;

  /* each number of terms: its error against the reference */
  stsa_tensor out[4];
  for (int terms = 1; terms <= 3; terms++) {
    out[terms] = tu_sentinel_tensor(STSA_F32, TU_BSHD, c->B, c->Sq, c->H, c->D);
    float *lse = tu_guarded_alloc(nlse * sizeof(float));
    run(TILES, 2, c, terms, &q, &k, &v, &out[terms], lse);
    const double err = tu_max_abs_diff(&out[terms], &ref, NULL);
    /* one term: each p off by up to 2^-9 of itself, so out by 2^-9 max|v|
     * (|v| <= ~5 here); two: 2^-18 of p, under the f32 path's 1e-5; three:
     * no further from the reference than the f32 path (measured: closer,
     * the unscaled bf16 products being exact) */
    const double tol = terms == 1   ? 0x1p-9 * 5.0 + 1e-5 * scale
                       : terms == 2 ? 1e-5 * scale
                                    : f32_err + 1e-7 * scale;
    CHECK(err <= tol, "%s: %d terms, max abs err %.3g > %.3g (f32 path %.3g)", name,
          terms, err, tol, f32_err);
    /* one term: the row sum adds the rounded weights (each within 2^-9) */
    CHECK(lse_error(lse, ref_lse, nlse) < (terms == 1 ? 0x1p-9 : 2e-5),
          "%s: %d terms, lse err %.3g", name, terms, lse_error(lse, ref_lse, nlse));
    CHECK(tu_guard_ok(out[terms].data) && tu_guard_ok(lse), "%s: %d terms: guard bytes",
          name, terms);
    tu_guarded_free(lse);
  }
  /* the terms reach P.V: one bf16 term must move a result somewhere (were
   * the f32 path running instead, the three would be the same) */
  CHECK(c->Skv == 1 || !tu_same_bytes(&out[1], &out[3]),
        "%s: 1 and 3 terms gave the same bytes: were the bf16 tiles used?", name);

  /* thread counts, and the default (0: three terms for an f32 output) */
  for (int threads = 1; threads <= 3; threads += 2) {
    stsa_tensor again = tu_sentinel_tensor(STSA_F32, TU_BSHD, c->B, c->Sq, c->H, c->D);
    run(TILES, threads, c, 0, &q, &k, &v, &again, NULL);
    CHECK(tu_same_bytes(&again, &out[3]),
          "%s: %d threads (default terms) differ from 2 "
          "threads (3 terms)",
          name, threads);
    tu_free_tensor(&again);
  }
  /* a bf16 output: two terms by default, within its rounding of the reference */
  stsa_tensor low = tu_sentinel_tensor(STSA_BF16, TU_BHSD, c->B, c->Sq, c->H, c->D);
  run(TILES, 2, c, 0, &q, &k, &v, &low, NULL);
  const double low_err = tu_max_abs_diff(&low, &ref, NULL);
  CHECK(low_err <= 1e-5 * scale + 0.5 * 0x1p-7 * scale * 1.01,
        "%s: bf16 output off by %.3g (scale %.3g)", name, low_err, scale);
  CHECK(tu_guard_ok(low.data), "%s: bf16 output guard bytes", name);
  tu_free_tensor(&low);
  for (int terms = 1; terms <= 3; terms++)
    tu_free_tensor(&out[terms]);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
  tu_free_tensor(&ref), tu_free_tensor(&f32);
  tu_guarded_free(ref_lse);
}

/* Scores that climb (or fall) steeply along the keys: q[.][0] = 16 and k's
 * first element a ramp over [-60, 60], some 11 log2 units a 32-key tile
 * and 350 over the row. Climbing, every tile's weights against the row's
 * earlier maximum sum past the lazy rescale's bound and the rows are done
 * again against their new maxima (kept against the first tile's, they
 * would overflow f32); falling, every tile keeps the earlier maximum. Both
 * against the reference, as close as the f32 path. */
static void check_lazy_rescale(void) {
  for (int climb = 0; climb <= 1; climb++) {
    const amx_case c = {1, 50, 1000, 1, 64, 48, 32, 1.0};
    tu_rng rng = {(uint64_t)(9 + climb)};
    stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, c.Sq, 1, c.D, 0.3);
    stsa_tensor k = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, c.Skv, 1, c.D, 0.3);
    stsa_tensor v = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, c.Skv, 1, c.D, 1.0);
    for (int64_t i = 0; i < c.Sq; i++)
      tu_store(q.data, STSA_BF16, tu_offset(&q, 0, i, 0, 0), 16.0);
    for (int64_t j = 0; j < c.Skv; j++) {
      const double ramp = -60.0 + 120.0 * (double)j / (double)(c.Skv - 1);
      tu_store(k.data, STSA_BF16, tu_offset(&k, 0, j, 0, 0), climb ? ramp : -ramp);
    }
    stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, c.Sq, 1, c.D);
    stsa_tensor f32 = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, c.Sq, 1, c.D);
    stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, c.Sq, 1, c.D);
    run(STSA_BACKEND_REF, 1, &c, 0, &q, &k, &v, &ref, NULL);
    run(STSA_BACKEND_AVX512, 1, &c, 0, &q, &k, &v, &f32, NULL);
    run(TILES, 2, &c, 3, &q, &k, &v, &out, NULL);
    double scale, f32_err = tu_max_abs_diff(&f32, &ref, &scale);
    const double err = tu_max_abs_diff(&out, &ref, NULL);
    CHECK(err <= f32_err + 1e-7 * scale,
          "scores %s: max abs err %.3g, the f32 path's %.3g",
          climb ? "climbing" : "falling", err, f32_err);
    CHECK(tu_guard_ok(out.data), "scores %s: guard bytes",
          climb ? "climbing" : "falling");
    tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
    tu_free_tensor(&ref), tu_free_tensor(&f32), tu_free_tensor(&out);
  }
}

/* out = sparse attention under `plan` on `backend` in `mode`. */
static void run_sparse(stsa_backend backend, int terms, const stsa_plan *plan,
                       stsa_sparse_mode mode, const stsa_tensor *q, const stsa_tensor *k,
                       const stsa_tensor *v, const stsa_tensor *out) {
  stsa_ctx *ctx = tu_make_ctx(backend, 2, 36, 64);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, terms), STSA_OK);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 0), STSA_OK);
  stsa_sparse_opts opts = {sizeof opts, 0.0f, NULL, mode, NULL, 0};
  CHECK_STATUS(stsa_sparse_attention(ctx, plan, q, k, v, out, &opts), STSA_OK);
  check_ran_bf16_tiles(backend, ctx, "sparse");
  stsa_ctx_free(ctx);
}

/* Sparse calls on bf16 q, k, v under `plan` (HS heads, `mask` on each):
 * every tile (FULL and PARTIAL, with the mask applied after the tile
 * multiply) runs the bf16 tiles. As close to the reference as the f32
 * path, naive mode (every tile PARTIAL) bitwise the exact mode (`merged`:
 * within rounding, for plans whose FULL variable tiles run side by side
 * with one softmax in exact mode, one at a time in naive mode), and a NaN
 * in V reaching only the rows that keep its key. */
static void check_sparse_plan(const char *name, const stsa_plan *plan,
                              const stsa_mask *mask, int64_t S, int64_t HS, int64_t D,
                              int merged) {
  tu_rng rng = {(uint64_t)(S * 3 + D)};
  stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HS, D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HS, D, 1.0);
  stsa_tensor v = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HS, D, 1.0);
  stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HS, D);
  stsa_tensor f32 = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HS, D);
  stsa_tensor exact = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HS, D);
  stsa_tensor naive = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HS, D);
  stsa_tensor one = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HS, D);
  run_sparse(STSA_BACKEND_REF, 0, plan, STSA_SPARSE_EXACT, &q, &k, &v, &ref);
  run_sparse(STSA_BACKEND_AVX512, 0, plan, STSA_SPARSE_EXACT, &q, &k, &v, &f32);
  run_sparse(TILES, 0, plan, STSA_SPARSE_EXACT, &q, &k, &v, &exact);
  run_sparse(TILES, 0, plan, STSA_SPARSE_NAIVE, &q, &k, &v, &naive);
  run_sparse(TILES, 1, plan, STSA_SPARSE_EXACT, &q, &k, &v, &one);
  double scale, f32_err = tu_max_abs_diff(&f32, &ref, &scale);
  const double err = tu_max_abs_diff(&exact, &ref, NULL);
  CHECK(err <= f32_err + 1e-7 * scale, "%s: max abs err %.3g, the f32 path's %.3g", name,
        err, f32_err);
  if (merged)
    CHECK(tu_max_abs_diff(&exact, &naive, NULL) <= 1e-6 * scale,
          "%s: naive mode differs from exact mode by %.3g", name,
          tu_max_abs_diff(&exact, &naive, NULL));
  else
    CHECK(tu_same_bytes(&exact, &naive), "%s: naive mode differs from exact mode", name);
  CHECK(!tu_same_bytes(&exact, &one), "%s: 1 and 3 terms gave the same bytes", name);
  CHECK(tu_guard_ok(exact.data) && tu_guard_ok(naive.data), "%s: guard bytes", name);

  /* NaN in V at one key of the last head: the rows that keep it turn NaN in
   * that column, every other element keeps its bytes */
  const int64_t bad = S / 3;
  stsa_tensor v_nan = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HS, D, 1.0);
  memcpy(v_nan.data, v.data, tu_span(&v) * stsa_dtype_size(STSA_BF16));
  tu_store(v_nan.data, STSA_BF16, tu_offset(&v_nan, 0, bad, HS - 1, 0), NAN);
  stsa_tensor poisoned = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HS, D);
  run_sparse(TILES, 0, plan, STSA_SPARSE_EXACT, &q, &k, &v_nan, &poisoned);
  int64_t wrong = 0, reached = 0;
  for (int64_t i = 0; i < S; i++)
    for (int64_t h = 0; h < HS; h++)
      for (int64_t d = 0; d < D; d++) {
        const size_t at = tu_offset(&exact, 0, i, h, d);
        const double got = tu_load(poisoned.data, STSA_F32, at),
                     clean = tu_load(exact.data, STSA_F32, at);
        const int hit = h == HS - 1 && d == 0 && stsa_mask_keep(mask, i, bad);
        reached += hit;
        wrong += hit ? !isnan(got) : got != clean;
      }
  CHECK(wrong == 0 && reached > 0 && reached < S,
        "%s: %lld elements wrong after a NaN in V (key %lld reaches %lld rows)", name,
        (long long)wrong, (long long)bad, (long long)reached);
  tu_free_tensor(&v_nan), tu_free_tensor(&poisoned);
  tu_free_tensor(&ref), tu_free_tensor(&f32), tu_free_tensor(&exact);
  tu_free_tensor(&naive), tu_free_tensor(&one);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
}

/* One mask on both heads, in `order` on geometry g (position-major order
 * fuses a token permutation into packing and the gathers, as for temporal
 * heads). */
static void check_sparse(const char *what, const stsa_geometry *g, int64_t S, int64_t D,
                         int kv_tile, const stsa_mask *mask, stsa_order order) {
  char name[96];
  snprintf(name, sizeof name, "sparse %s S=%lld D=%lld kv tiles %d", what, (long long)S,
           (long long)D, kv_tile);
  const stsa_mask *masks[2] = {mask, mask};
  stsa_ctx *pctx = tu_make_ctx(TILES, 1, 36, kv_tile);
  stsa_plan_desc desc = {
      sizeof desc, S,   S, 2, masks, g, order, order, 0, 0, STSA_PLAN_ALLOW_EMPTY_ROWS,
      NULL,        NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(pctx, &desc, &plan), STSA_OK);
  stsa_ctx_free(pctx);
  check_sparse_plan(name, plan, mask, S, 2, D, 0);
  stsa_plan_free(plan);
}

/* SVG2's cluster plans (variable tiles: each cluster its own tiles, text
 * tokens in groups of their own) on the bf16 tiles: random labels and a
 * random keep map with every query cluster keeping something; key
 * clusters of 1 to ~3 kv tiles of at most kv_tile keys (any multiple of
 * 16: 48, 80 and 240 pack up to 64, 96 and 256 rows), whose packed spans
 * start where the kernels ask (stsa_kv_pack_align: the bf16 key blocks). */
static void check_cluster_plan(const char *what, const stsa_geometry *g, int64_t QC,
                               int64_t KC, int64_t D, int kv_tile) {
  char name[96];
  snprintf(name, sizeof name, "cluster plan %s, %lld x %lld clusters, D=%lld, kv %d",
           what, (long long)QC, (long long)KC, (long long)D, kv_tile);
  const int64_t N = stsa_geometry_tokens(g),
                v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0,
                L = g->frames * g->height * g->width;
  tu_rng rng = {(uint64_t)(N * 7 + QC * 31 + KC)};
  int32_t *ql = malloc(sizeof(int32_t) * (size_t)N),
          *kl = malloc(sizeof(int32_t) * (size_t)N);
  uint8_t *keep = malloc((size_t)(QC * KC));
  CHECK(ql && kl && keep, "out of memory");
  for (int64_t i = 0; i < N; i++) {
    const int video = i >= v0 && i < v0 + L;
    ql[i] = video ? (int32_t)tu_rnd(&rng, 0, QC - 1) : -1;
    kl[i] = video ? (int32_t)tu_rnd(&rng, 0, KC - 1) : -1;
  }
  for (int64_t c = 0; c < QC * KC; c++)
    keep[c] = tu_rng_uniform(&rng) < -0.2; /* uniform on [-1, 1): 40% */
  for (int64_t c = 0; c < QC; c++)
    keep[c * KC + c % KC] = 1;
  stsa_mask *rect = NULL, *text = NULL, *mask = NULL;
  CHECK_STATUS(stsa_mask_clusters(ql, N, QC, kl, N, KC, keep, &rect), STSA_OK);
  CHECK_STATUS(stsa_mask_text(g, &text), STSA_OK);
  CHECK_STATUS(stsa_mask_or(rect, text, &mask), STSA_OK);
  stsa_ctx *pctx = tu_make_ctx(TILES, 1, 36, kv_tile);
  const int align = stsa_kv_pack_align(&pctx->run->kern, STSA_BF16, STSA_BF16, STSA_BF16);
  CHECK(align == STSA_BF16_KEY_BLOCK, "%s: the %s backend asks spans on %d keys", name,
        stsa_backend_name(TILES), align);
  const stsa_cluster_layout lay = {g, QC, KC, ql, kl, keep, 36, kv_tile, align};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_cluster_plan_build(pctx, &lay, mask, &plan, &pctx->err), STSA_OK);
  stsa_ctx_free(pctx);
  if (plan)
    check_sparse_plan(name, plan, mask, N, 1, D, 1);
  stsa_plan_free(plan);
  stsa_mask_free(rect), stsa_mask_free(text), stsa_mask_free(mask);
  free(ql), free(kl), free(keep);
}

/* An SVG or SVG2 session on bf16 inputs, head dim D, on geometry g (kv_tile:
 * the SVG windows' kv tiles it must choose, SVG2's cluster kv tiles it is
 * configured with; 0: automatic): SVG2's cluster plans
 * put their spans on the bf16 key blocks, SVG's fixed tiles pad to them, so
 * the backend under test runs them on the bf16 tiles (one term and three give
 * different bytes), as close to the f32 path of the avx512 backend as the
 * f32 path is to itself across tiles (k-means runs on the same kernels on
 * both backends: the same clusters). */
static void check_svg_session(const char *what, stsa_svg_method method,
                              const stsa_geometry g, int64_t D, int kv_tile) {
  enum { H = 2 };
  const int64_t N = stsa_geometry_tokens(&g);
  stsa_tensor q32 = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  stsa_tensor k32 = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  stsa_tensor v32 = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  stsa_workload_desc wd = STSA_INIT(stsa_workload_desc);
  wd.geometry = g, wd.batch = 1, wd.heads = H, wd.head_dim = D, wd.seed = 5;
  CHECK_STATUS(stsa_workload_generate(&wd, &q32, &k32, &v32, NULL), STSA_OK);
  stsa_tensor q = tu_sentinel_tensor(STSA_BF16, TU_BSHD, 1, N, H, D);
  stsa_tensor k = tu_sentinel_tensor(STSA_BF16, TU_BSHD, 1, N, H, D);
  stsa_tensor v = tu_sentinel_tensor(STSA_BF16, TU_BSHD, 1, N, H, D);
  CHECK_STATUS(stsa_tensor_copy(&q32, &q), STSA_OK);
  CHECK_STATUS(stsa_tensor_copy(&k32, &k), STSA_OK);
  CHECK_STATUS(stsa_tensor_copy(&v32, &v), STSA_OK);
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = g, cfg.heads = H, cfg.head_dim = D, cfg.sample_rows = 32;
  cfg.sink_frames = 1, cfg.seed = 3, cfg.method = method;
  cfg.svg2.q_clusters = 8, cfg.svg2.kv_clusters = 20, cfg.svg2.top_p = 0.9,
  cfg.density = 0.25;
  cfg.kv_tile = method == STSA_SVG_METHOD_SVG2 ? kv_tile : 0;
  const stsa_backend backends[3] = {STSA_BACKEND_AVX512, TILES, TILES};
  const int terms[3] = {0, 3, 1};
  stsa_tensor out[3];
  for (int i = 0; i < 3; i++) {
    stsa_ctx *ctx = tu_make_ctx(backends[i], 2, 192, 256);
    CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, terms[i]), STSA_OK);
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
    out[i] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
    stsa_run_info ran = STSA_INIT(stsa_run_info);
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    rep.run = &ran;
    CHECK_STATUS(stsa_svg_attention(svg, 0, 0, &q, &k, &v, &out[i], &rep), STSA_OK);
    stsa_svg_windows win = STSA_INIT(stsa_svg_windows);
    CHECK_STATUS(stsa_svg_get_windows(svg, &win), STSA_OK);
    CHECK(!kv_tile || win.kv_tile == kv_tile, "%s session: kv tiles %d", what,
          win.kv_tile);
    CHECK(!tu_has_bf16_tiles(backends[i]) ||
              (ran.arith == STSA_ARITH_BF16_TILES && ran.why[0] == 0),
          "%s session: %s ran %s, why = \"%s\"", what, stsa_backend_name(TILES),
          stsa_arith_name(ran.arith), ran.why);
    stsa_svg_free(svg);
    stsa_ctx_free(ctx);
  }
  double scale;
  const double diff = tu_max_abs_diff(&out[1], &out[0], &scale);
  CHECK(diff <= 2e-5 * (scale > 1 ? scale : 1),
        "%s session bf16: %s (3 terms) and avx512 differ by %.3g (scale %.3g)", what,
        stsa_backend_name(TILES), diff, scale);
  CHECK(!tu_same_bytes(&out[1], &out[2]),
        "%s session bf16: 1 and 3 terms gave the same bytes: were the bf16 tiles used?",
        what);
  for (int i = 0; i < 3; i++)
    tu_free_tensor(&out[i]);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
  tu_free_tensor(&q32), tu_free_tensor(&k32), tu_free_tensor(&v32);
}

/* The sparse cases: bands wider and narrower than a tile, and a temporal
 * mask (position band) in position-major order on a small video. */
static void check_sparse_cases(void) {
  stsa_mask *wide = NULL, *narrow = NULL, *temporal = NULL;
  CHECK_STATUS(stsa_mask_local(100, 100, &wide), STSA_OK);
  CHECK_STATUS(stsa_mask_local(9, 9, &narrow), STSA_OK);
  const stsa_geometry g = {5, 6, 14, 0, 0, STSA_TEXT_NONE}; /* 420 tokens */
  CHECK_STATUS(stsa_mask_position_band(&g, 10, &temporal), STSA_OK);
  check_sparse("band 100", NULL, 500, 64, 64, wide, STSA_ORDER_NATIVE);
  check_sparse("band 9", NULL, 333, 80, 64, narrow, STSA_ORDER_NATIVE);
  check_sparse("temporal, position-major", &g, stsa_geometry_tokens(&g), 128, 64,
               temporal, STSA_ORDER_POSITION_MAJOR);
  /* kv tiles of 16-key multiples, not 32: each packed with a zero half block */
  check_sparse("band 100", NULL, 500, 64, 240, wide, STSA_ORDER_NATIVE);
  check_sparse("band 9", NULL, 333, 80, 48, narrow, STSA_ORDER_NATIVE);
  check_sparse("temporal, position-major", &g, stsa_geometry_tokens(&g), 128, 80,
               temporal, STSA_ORDER_POSITION_MAJOR);
  const stsa_geometry suffix = {4, 6, 11, 21, 13, STSA_TEXT_SUFFIX}; /* 285 tokens */
  check_cluster_plan("no text", &g, 5, 7, 64, 64);
  check_cluster_plan("text suffix with padding", &suffix, 4, 3, 128, 64);
  check_cluster_plan("text suffix, small clusters", &suffix, 9, 23, 80, 64);
  /* kv tiles of 16-key multiples, not 32: spans up to kv_tile rounded up */
  check_cluster_plan("text suffix", &suffix, 6, 11, 64, 48);
  check_cluster_plan("no text", &g, 4, 6, 80, 80);
  check_cluster_plan("few clusters", &suffix, 2, 2, 128, 240);
  check_cluster_plan("no text, small clusters", &g, 7, 19, 128, 48);
  stsa_mask_free(wide), stsa_mask_free(narrow), stsa_mask_free(temporal);
}

/* Dense bf16 calls with -inf logits (check_finite off), against the
 * reference backend's rules (stsa.h), in two calls: the q side (row `all`
 * gets only -inf logits: q -inf in column 0, every key's column 0
 * positive; the row turns NaN, out and lse) and the K side (key `dead` gets
 * a -inf logit in every row: its column 0 +inf, every q's column 0
 * negative; weight 0). Either makes the tiles unsafe, so -inf logits are
 * marked kept before the softmax. */
static void check_neg_inf_logits(void) {
  enum { S = 70, HN = 1, DN = 64 };
  for (int side = 0; side < 2; side++) {
    const int64_t all = side == 0 ? 5 : -1, dead = side == 1 ? 9 : -1;
    tu_rng rng = {77};
    stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HN, DN, 1.0);
    stsa_tensor k = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HN, DN, 1.0);
    stsa_tensor v = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HN, DN, 1.0);
    for (int64_t i = 0; i < S; i++) {
      tu_store(q.data, STSA_BF16, tu_offset(&q, 0, i, 0, 0),
               i == all ? -INFINITY : -0.5 - fabs(tu_rng_uniform(&rng)));
      tu_store(k.data, STSA_BF16, tu_offset(&k, 0, i, 0, 0),
               i == dead ? INFINITY : 0.5 + fabs(tu_rng_uniform(&rng)));
    }
    const amx_case c = {1, S, S, HN, DN, 36, 64, 1.0};
    stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HN, DN);
    stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HN, DN);
    float *ref_lse = tu_guarded_alloc(S * sizeof(float)),
          *lse = tu_guarded_alloc(S * sizeof(float));
    for (int i = 0; i < 2; i++) {
      stsa_ctx *ctx = ctx_with(i ? TILES : STSA_BACKEND_REF, 2, &c, 0);
      CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 0), STSA_OK);
      stsa_attn_opts opts = {sizeof opts, 0.0f, i ? lse : ref_lse};
      CHECK_STATUS(stsa_attention(ctx, &q, &k, &v, i ? &out : &ref, &opts), STSA_OK);
      stsa_ctx_free(ctx);
    }
    int64_t wrong = 0;
    double worst = 0;
    for (int64_t r = 0; r < S; r++) {
      wrong += r == all ? !isnan(lse[r]) : !(fabs(lse[r] - ref_lse[r]) < 1e-5);
      for (int64_t d = 0; d < DN; d++) {
        const size_t at = tu_offset(&out, 0, r, 0, d);
        const double got = tu_load(out.data, STSA_F32, at),
                     want = tu_load(ref.data, STSA_F32, at);
        if (r == all)
          wrong += !isnan(got);
        else
          worst = fabs(got - want) > worst ? fabs(got - want) : worst;
      }
    }
    CHECK(wrong == 0 && (all < 0 || isnan(ref_lse[all])),
          "-inf logits (%s side): %lld values off the rules", side ? "k" : "q",
          (long long)wrong);
    CHECK(worst < 1e-5, "-inf logits (%s side): finite rows off the reference by %.3g",
          side ? "k" : "q", worst);
    tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
    tu_free_tensor(&ref), tu_free_tensor(&out);
    tu_guarded_free(ref_lse), tu_guarded_free(lse);
  }
}

/* NaN logits with a bf16 output (one and two terms: the first term comes
 * from integer rounding there, which a NaN p may turn into any value): a
 * NaN in q makes its row's logits NaN and the row's output NaN; a NaN in k
 * makes one key's logits NaN in every row, and every row NaN. Rows without
 * a NaN logit stay within the bf16 output's rounding of the reference.
 * Both NaN encodings whose integer rounding carries out of the mantissa
 * (0x7fff, 0xffff as bf16) are among them. */
static void check_nan_logits(void) {
  enum { S = 75, HN = 1, DN = 64, ROW = 33, KEY = 41 };
  const uint16_t nans[] = {0x7fc0u, 0x7fffu, 0xffffu};
  for (int terms = 1; terms <= 2; terms++)
    for (size_t ni = 0; ni < sizeof nans / sizeof nans[0]; ni++)
      for (int side = 0; side < 2; side++) {
        tu_rng rng = {91};
        stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HN, DN, 1.0);
        stsa_tensor k = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HN, DN, 1.0);
        stsa_tensor v = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, S, HN, DN, 1.0);
        const amx_case c = {1, S, S, HN, DN, 36, 64, 1.0};
        stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, HN, DN);
        stsa_tensor out = tu_sentinel_tensor(STSA_BF16, TU_BSHD, 1, S, HN, DN);
        run(STSA_BACKEND_REF, 1, &c, 0, &q, &k, &v, &ref, NULL);
        stsa_tensor *bad = side ? &k : &q;
        uint16_t *at = (uint16_t *)bad->data + tu_offset(bad, 0, side ? KEY : ROW, 0, 5);
        *at = nans[ni];
        stsa_ctx *ctx = ctx_with(TILES, 2, &c, terms);
        CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 0), STSA_OK);
        CHECK_STATUS(stsa_attention(ctx, &q, &k, &v, &out, NULL), STSA_OK);
        stsa_ctx_free(ctx);
        int64_t wrong = 0;
        for (int64_t r = 0; r < S; r++)
          for (int64_t d = 0; d < DN; d++) {
            const double got = tu_load(out.data, STSA_BF16, tu_offset(&out, 0, r, 0, d));
            const double want = tu_load(ref.data, STSA_F32, tu_offset(&ref, 0, r, 0, d));
            if (side || r == ROW)
              wrong += !isnan(got);
            else
              wrong += !(fabs(got - want) <= 0x1p-7 * fabs(want) + 0x1p-9 * 5.0);
          }
        CHECK(wrong == 0 && tu_guard_ok(out.data),
              "NaN logits (%s side, bf16 0x%04x, %d terms): %lld values off",
              side ? "k" : "q", nans[ni], terms, (long long)wrong);
        tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
        tu_free_tensor(&ref), tu_free_tensor(&out);
      }
}

/* Every case on the backend TILES. */
static void check_backend(void) {
  const amx_case cases[] = {
      {1, 1, 1, 1, 64, 192, 256, 1.0},
      {1, 77, 130, 2, 80, 192, 256, 1.0},
      {1, 300, 513, 2, 128, 192, 256, 1.0},
      {2, 257, 1000, 1, 24, 36, 64, 1.0},
      {1, 100, 333, 3, 64, 12, 32, 3.0},
      {1, 40, 2000, 1, 128, 24, 96, 2.0},
      /* kv tiles of 16-key multiples, not 32 (240: SVG's frame-aligned
       * tiles at Wan 720p), S no multiple of them */
      {1, 300, 601, 2, 128, 192, 240, 1.0},
      {1, 100, 333, 2, 80, 36, 48, 2.0},
      {2, 77, 250, 1, 64, 24, 80, 1.0},
      {1, 50, 16, 1, 64, 36, 16, 1.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i]);
  check_sparse_cases();
  check_svg_session("svg2", STSA_SVG_METHOD_SVG2, (stsa_geometry){4, 10, 12, 0, 0, 0}, 64,
                    0);
  /* cluster kv tiles of 16-key multiples, not 32 (240: method auto's SVG2
   * heads on SVG's frame-aligned tiles at Wan 720p) */
  check_svg_session("svg2", STSA_SVG_METHOD_SVG2, (stsa_geometry){4, 10, 12, 0, 0, 0}, 80,
                    48);
  check_svg_session("svg2", STSA_SVG_METHOD_SVG2, (stsa_geometry){4, 10, 12, 0, 0, 0},
                    128, 240);
  /* frames of 12 x 20: SVG's frame-aligned kv tiles of 240 keys (Wan 720p's
   * case), 480 tokens */
  check_svg_session("svg", STSA_SVG_METHOD_SVG, (stsa_geometry){2, 12, 20, 0, 0, 0}, 80,
                    240);
  check_neg_inf_logits();
  check_nan_logits();
  check_lazy_rescale();
}

int main(void) {
  /* the amx backend runs the avx512bf16 backend's ISA besides its tiles */
  CHECK(!stsa_backend_available(STSA_BACKEND_AMX) ||
            stsa_backend_available(STSA_BACKEND_AVX512BF16),
        "amx available without avx512bf16");
  int64_t lo, hi;
  CHECK_STATUS(stsa_param_bounds(STSA_PARAM_PV_PRECISION, &lo, &hi), STSA_OK);
  CHECK(lo == 0 && hi == 3, "pv_precision bounds [%lld, %lld]", (long long)lo,
        (long long)hi);
  stsa_ctx *ctx = tu_make_ctx(STSA_BACKEND_PORTABLE, 1, 192, 256);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, 4), STSA_ERR_BAD_PARAM);
  int64_t got = -1;
  CHECK_STATUS(stsa_ctx_get(ctx, STSA_PARAM_PV_PRECISION, &got), STSA_OK);
  CHECK(got == 0, "pv_precision defaults to %lld", (long long)got);
  stsa_ctx_free(ctx);
  const stsa_backend tiled[2] = {STSA_BACKEND_AMX, STSA_BACKEND_AVX512BF16};
  for (int i = 0; i < 2; i++) {
    TILES = tiled[i];
    if (!stsa_backend_available(TILES)) {
      printf("test_amx: this machine does not run %s; its bf16 tiles are not exercised\n",
             stsa_backend_name(TILES));
      continue;
    }
    check_backend();
  }
  return tu_finish("test_amx");
}
