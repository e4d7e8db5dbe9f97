/*
 * test_sparse.c — block-sparse attention against the reference with the same
 * mask applied densely, for every mask kind, awkward lengths, S_q != S_kv,
 * all dtypes and layouts, permuted orders; plus the bitwise properties: a
 * full plan equals dense, naive equals exact, thread counts agree.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/tile_loop.h"
#include "kernel_util.h"
#include "testutil.h"

typedef struct sparse_case {
  const char *name;
  int64_t B, Sq, Skv, H, D;
  const stsa_geometry *geom;
  stsa_order q_order, kv_order;
  stsa_mask *masks[4]; /* per head (H <= 4) */
  stsa_dtype q_dtype, kv_dtype, out_dtype;
  tu_layout layout;
  int q_tile, kv_tile;
  unsigned flags;
} sparse_case;

/* Runs a case on every backend and mode and checks it against the
 * reference backend (which applies the mask pair by pair). */
static void run_case(sparse_case *c) {
  tu_rng rng = {(uint64_t)(c->Sq * 31 + c->Skv * 17 + c->D + c->q_order * 5)};
  stsa_tensor q =
      tu_random_tensor(&rng, c->q_dtype, c->layout, c->B, c->Sq, c->H, c->D, 1);
  stsa_tensor k =
      tu_random_tensor(&rng, c->kv_dtype, c->layout, c->B, c->Skv, c->H, c->D, 1);
  stsa_tensor v =
      tu_random_tensor(&rng, c->kv_dtype, c->layout, c->B, c->Skv, c->H, c->D, 1);
  stsa_ctx *rctx = tu_make_ctx(STSA_BACKEND_REF, 2, c->q_tile, c->kv_tile);
  const stsa_mask *masks[4];
  for (int h = 0; h < c->H; h++)
    masks[h] = c->masks[h];
  stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                         c->Sq,
                         c->Skv,
                         c->H,
                         masks,
                         c->geom,
                         c->q_order,
                         c->kv_order,
                         0,
                         0,
                         c->flags,
                         NULL,
                         NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(rctx, &desc, &plan), STSA_OK);
  if (!plan) {
    fprintf(stderr, "  (%s: %s)\n", c->name, stsa_ctx_last_error(rctx));
    stsa_ctx_free(rctx);
    tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
    return;
  }
  size_t nlse = (size_t)(c->B * c->H * c->Sq);
  stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, c->B, c->Sq, c->H, c->D);
  float *ref_lse = tu_guarded_alloc(nlse * sizeof(float));
  stsa_sparse_opts ropts = {sizeof(stsa_sparse_opts), 0.0f, ref_lse,
                            STSA_SPARSE_EXACT,        NULL, 0};
  CHECK_STATUS(stsa_sparse_attention(rctx, plan, &q, &k, &v, &ref, &ropts), STSA_OK);

  stsa_backend backends[TU_MAX_BACKENDS];
  int nb = tu_tiled_backends(backends);
  for (int bi = 0; bi < nb; bi++) {
    stsa_ctx *ctx = tu_make_ctx(backends[bi], 2, c->q_tile, c->kv_tile);
    stsa_tensor exact =
        tu_sentinel_tensor(c->out_dtype, c->layout, c->B, c->Sq, c->H, c->D);
    stsa_tensor naive =
        tu_sentinel_tensor(c->out_dtype, c->layout, c->B, c->Sq, c->H, c->D);
    float *lse = tu_guarded_alloc(nlse * sizeof(float));
    stsa_sparse_opts eo = {sizeof(stsa_sparse_opts), 0.0f, lse,
                           STSA_SPARSE_EXACT,        NULL, 0};
    stsa_sparse_opts no = {sizeof(stsa_sparse_opts), 0.0f, NULL,
                           STSA_SPARSE_NAIVE,        NULL, 0};
    CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &exact, &eo), STSA_OK);
    CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &naive, &no), STSA_OK);
    double scale, err = tu_max_abs_diff(&exact, &ref, &scale);
    double tol = 1e-5 * (scale > 1e-3 ? scale : 1e-3);
    if (c->out_dtype != STSA_F32)
      tol += 0.5 * (c->out_dtype == STSA_F16 ? 0x1p-10 : 0x1p-7) * scale * 1.01;
    CHECK(err <= tol, "%s [%s]: err %.3g > tol %.3g", c->name,
          stsa_backend_name(backends[bi]), err, tol);
    CHECK(tu_same_bytes(&exact, &naive), "%s [%s]: naive differs from exact", c->name,
          stsa_backend_name(backends[bi]));
    double lse_err = 0;
    for (size_t i = 0; i < nlse; i++) {
      double e =
          lse[i] == ref_lse[i] ? 0 : fabs(lse[i] - ref_lse[i]) / (1 + fabs(ref_lse[i]));
      lse_err = isnan(e) ? INFINITY : (e > lse_err ? e : lse_err);
    }
    CHECK(lse_err < 2e-5, "%s [%s]: lse err %.3g", c->name,
          stsa_backend_name(backends[bi]), lse_err);
    CHECK(tu_guard_ok(exact.data) && tu_guard_ok(naive.data) && tu_guard_ok(lse),
          "%s: guard bytes", c->name);
    /* one thread gives the same bytes as two */
    stsa_ctx *one = tu_make_ctx(backends[bi], 1, c->q_tile, c->kv_tile);
    stsa_tensor o1 = tu_sentinel_tensor(c->out_dtype, c->layout, c->B, c->Sq, c->H, c->D);
    CHECK_STATUS(stsa_sparse_attention(one, plan, &q, &k, &v, &o1, &eo), STSA_OK);
    CHECK(tu_same_bytes(&o1, &exact), "%s [%s]: 1 thread differs from 2", c->name,
          stsa_backend_name(backends[bi]));
    stsa_ctx_free(one);
    tu_free_tensor(&o1);
    tu_guarded_free(lse);
    tu_free_tensor(&exact);
    tu_free_tensor(&naive);
    stsa_ctx_free(ctx);
  }
  tu_guarded_free(ref_lse);
  tu_free_tensor(&ref);
  stsa_plan_free(plan);
  stsa_ctx_free(rctx);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
}

static sparse_case plain(const char *name, int64_t Sq, int64_t Skv, stsa_mask *m) {
  sparse_case c = {name,
                   1,
                   Sq,
                   Skv,
                   2,
                   64,
                   NULL,
                   STSA_ORDER_NATIVE,
                   STSA_ORDER_NATIVE,
                   {m, m},
                   STSA_F32,
                   STSA_F32,
                   STSA_F32,
                   TU_BSHD,
                   48,
                   32,
                   0};
  return c;
}

static void test_index_masks(void) {
  stsa_mask *m;
  stsa_mask_causal(0, &m);
  sparse_case c = plain("causal 1000", 1000, 1000, m);
  run_case(&c);
  c = plain("causal wide 129x300", 129, 300, m);
  c.D = 80;
  run_case(&c);
  stsa_mask_free(m);

  stsa_mask_local(37, 11, &m);
  c = plain("local(37,11) 777", 777, 777, m);
  run_case(&c);
  stsa_mask_free(m);

  stsa_mask_local(STSA_UNBOUNDED, 5, &m);
  c = plain("local(inf,5) 300", 300, 300, m);
  c.D = 128;
  run_case(&c);
  stsa_mask_free(m);

  stsa_mask_chunked_causal(50, &m);
  c = plain("chunked causal 50", 333, 333, m);
  run_case(&c);
  stsa_mask_free(m);

  /* a random dense mask with column 0 forced on (as in the JAX tests) */
  const int64_t S = 211;
  uint8_t *bits = malloc((size_t)(S * S));
  tu_rng rng = {99};
  for (int64_t i = 0; i < S * S; i++)
    bits[i] = (i % S == 0) || (tu_rng_next(&rng) % 4 == 0);
  stsa_mask_dense(bits, S, S, &m);
  c = plain("dense random 211", S, S, m);
  run_case(&c);
  stsa_mask_free(m);
  free(bits);

  /* segments: padding (segment 1) only sees padding */
  int32_t seg[150];
  for (int i = 0; i < 150; i++)
    seg[i] = i < 120 ? 0 : 1;
  stsa_mask_segments(seg, 150, seg, 150, &m);
  c = plain("segments", 150, 150, m);
  run_case(&c);
  stsa_mask_free(m);

  /* per-head masks: causal and local in one call */
  stsa_mask *a, *b;
  stsa_mask_causal(0, &a);
  stsa_mask_local(20, 20, &b);
  c = plain("per-head causal/local", 260, 260, a);
  c.masks[1] = b;
  run_case(&c);
  /* AND / OR */
  stsa_mask *both, *either;
  stsa_mask_and(a, b, &both);
  stsa_mask_or(a, b, &either);
  c = plain("and/or", 260, 260, both);
  c.masks[1] = either;
  run_case(&c);
  stsa_mask_free(both);
  stsa_mask_free(either);
  stsa_mask_free(a);
  stsa_mask_free(b);
}

static void test_dtypes_layouts(void) {
  stsa_mask *m;
  stsa_mask_local(40, 40, &m);
  const stsa_dtype dts[] = {STSA_F32, STSA_F16, STSA_BF16};
  for (int d = 0; d < 3; d++)
    for (int L = 0; L < TU_LAYOUT_COUNT; L++) {
      char name[64];
      snprintf(name, sizeof name, "local %s/%s", stsa_dtype_name(dts[d]),
               tu_layout_name((tu_layout)L));
      sparse_case c = plain(name, 300, 300, m);
      c.q_dtype = c.out_dtype = dts[d];
      c.kv_dtype = dts[(d + 1) % 3];
      c.layout = (tu_layout)L;
      c.B = L == TU_SHD ? 1 : 2;
      run_case(&c);
    }
  stsa_mask_free(m);
}

/* Video masks on true coordinates, in every order, with text. */
static void test_video_masks(void) {
  const stsa_geometry geoms[] = {
      {5, 6, 7, 0, 0, STSA_TEXT_NONE},
      {4, 5, 6, 9, 9, STSA_TEXT_PREFIX},
      {3, 4, 9, 12, 7, STSA_TEXT_SUFFIX},
  };
  for (int gi = 0; gi < 3; gi++) {
    const stsa_geometry *g = &geoms[gi];
    int64_t N = stsa_geometry_tokens(g);
    stsa_mask *frame, *band, *sink, *text, *tmp, *spatial, *temporal;
    stsa_mask_frame_window(g, 1, &frame);
    stsa_mask_position_band(g, 2 * g->frames + 1, &band);
    stsa_mask_sink_frames(g, 1, &sink);
    stsa_mask_text(g, &text);
    stsa_mask_or(frame, sink, &tmp);
    stsa_mask_or(tmp, text, &spatial);
    stsa_mask_free(tmp);
    stsa_mask_or(band, sink, &tmp);
    stsa_mask_or(tmp, text, &temporal);
    stsa_mask_free(tmp);
    const stsa_order orders[][2] = {
        {STSA_ORDER_NATIVE, STSA_ORDER_NATIVE},
        {STSA_ORDER_POSITION_MAJOR, STSA_ORDER_POSITION_MAJOR},
        {STSA_ORDER_POSITION_MAJOR, STSA_ORDER_SINK_FIRST}};
    for (int oi = 0; oi < 3; oi++) {
      char name[96];
      snprintf(name, sizeof name, "video geom %d order %d/%d", gi, orders[oi][0],
               orders[oi][1]);
      sparse_case c = {name,
                       1,
                       N,
                       N,
                       2,
                       64,
                       g,
                       orders[oi][0],
                       orders[oi][1],
                       {spatial, temporal},
                       STSA_F32,
                       STSA_F16,
                       STSA_F32,
                       TU_BSHD,
                       24,
                       16,
                       0};
      run_case(&c);
    }
    stsa_mask_free(frame);
    stsa_mask_free(band);
    stsa_mask_free(sink);
    stsa_mask_free(text);
    stsa_mask_free(spatial);
    stsa_mask_free(temporal);
  }
}

/* A FULL-only plan must give exactly the dense kernel's bytes. */
static void test_full_equals_dense(void) {
  tu_rng rng = {5};
  const int64_t S = 1000, Skv = 777, H = 3, D = 64;
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 2, S, H, D, 1);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F16, TU_BSHD, 2, Skv, H, D, 1);
  stsa_tensor v = tu_random_tensor(&rng, STSA_F16, TU_BSHD, 2, Skv, H, D, 1);
  stsa_mask *full;
  stsa_mask_full(&full);
  const stsa_mask *masks[3] = {full, full, full};
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    stsa_ctx *ctx = tu_make_ctx(backends[bi], 2, 192, 256);
    stsa_plan_desc desc = {
        sizeof(stsa_plan_desc), S, Skv, H, masks, NULL, STSA_ORDER_NATIVE,
        STSA_ORDER_NATIVE,      0, 0,   0, NULL,  NULL};
    stsa_plan *plan = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
    stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
    stsa_plan_get_stats(plan, &st);
    CHECK(st.tiles_partial == 0 && st.tiles_active == st.tiles_total &&
              st.distinct_masks == 1,
          "full plan: %lld partial, %lld/%lld active, %lld distinct",
          (long long)st.tiles_partial, (long long)st.tiles_active,
          (long long)st.tiles_total, (long long)st.distinct_masks);
    stsa_tensor dense = tu_sentinel_tensor(STSA_F32, TU_BSHD, 2, S, H, D);
    stsa_tensor sparse = tu_sentinel_tensor(STSA_F32, TU_BSHD, 2, S, H, D);
    CHECK_STATUS(stsa_attention(ctx, &q, &k, &v, &dense, NULL), STSA_OK);
    CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &sparse, NULL), STSA_OK);
    CHECK(tu_same_bytes(&dense, &sparse), "[%s] full plan differs from dense",
          stsa_backend_name(backends[bi]));
    stsa_plan_free(plan);
    stsa_ctx_free(ctx);
    tu_free_tensor(&dense);
    tu_free_tensor(&sparse);
  }
  stsa_mask_free(full);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
}

/* TILE_ROUNDED against the reference under the rounded tile structure, and
 * the count of flipped pairs against a direct count. */
static void test_tile_rounded(void) {
  tu_rng rng = {8};
  const int64_t S = 500, H = 1, D = 32;
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, H, D, 1);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, H, D, 1);
  stsa_tensor v = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, H, D, 1);
  stsa_mask *band;
  stsa_mask_local(70, 70, &band);
  const stsa_mask *masks[1] = {band};
  stsa_ctx *ref = tu_make_ctx(STSA_BACKEND_REF, 2, 48, 32);
  stsa_ctx *ctx = tu_make_ctx(STSA_BACKEND_AUTO, 2, 48, 32);
  stsa_plan_desc desc = {sizeof(stsa_plan_desc), S, S, H, masks, NULL, STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,      0, 0, 0, NULL,  NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  stsa_tensor o_ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, H, D);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, H, D);
  stsa_tensor o_exact = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, H, D);
  int64_t changed = -1, changed_ref = -1;
  stsa_sparse_opts ro = {sizeof(stsa_sparse_opts), 0.0f,     NULL,
                         STSA_SPARSE_TILE_ROUNDED, &changed, 0};
  stsa_sparse_opts rr = {sizeof(stsa_sparse_opts), 0.0f,         NULL,
                         STSA_SPARSE_TILE_ROUNDED, &changed_ref, 0};
  CHECK_STATUS(stsa_sparse_attention(ref, plan, &q, &k, &v, &o_ref, &rr), STSA_OK);
  CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &o, &ro), STSA_OK);
  CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &o_exact, NULL), STSA_OK);
  double scale, err = tu_max_abs_diff(&o, &o_ref, &scale);
  CHECK(err <= 1e-5 * scale, "tile-rounded vs its reference: err %.3g", err);
  /* count flips directly, tile by tile: a tile is kept whole when at least
   * half its pairs are kept, else dropped */
  int64_t flips = 0;
  for (int64_t qt = 0; qt * 48 < S; qt++)
    for (int64_t kt = 0; kt * 32 < S; kt++) {
      int64_t kept = 0, pairs = 0;
      for (int64_t a = qt * 48; a < (qt + 1) * 48 && a < S; a++)
        for (int64_t b = kt * 32; b < (kt + 1) * 32 && b < S; b++) {
          pairs++;
          kept += stsa_mask_keep(band, a, b);
        }
      flips += (kept > 0 && 2 * kept >= pairs) ? pairs - kept : kept;
    }
  CHECK(changed == flips && changed_ref == flips,
        "pairs changed %lld / %lld, direct %lld", (long long)changed,
        (long long)changed_ref, (long long)flips);
  double e2 = tu_max_abs_diff(&o, &o_exact, &scale);
  CHECK(e2 > 1e-4, "tile-rounded should differ from exact (lossy), diff %.3g", e2);
  stsa_plan_free(plan);
  stsa_mask_free(band);
  stsa_ctx_free(ref);
  stsa_ctx_free(ctx);
  tu_free_tensor(&o_ref), tu_free_tensor(&o), tu_free_tensor(&o_exact);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
}

/* Empty rows: rejected at plan time by default; zeros and lse -inf if allowed. */
static void test_empty_rows(void) {
  const int64_t S = 64;
  uint8_t bits[64 * 64];
  for (int i = 0; i < S * S; i++)
    bits[i] = (i / S) != 14;
  stsa_mask *m;
  stsa_mask_dense(bits, S, S, &m);
  const stsa_mask *masks[1] = {m};
  stsa_ctx *ctx = tu_make_ctx(STSA_BACKEND_AUTO, 2, 24, 16);
  stsa_plan_desc desc = {sizeof(stsa_plan_desc), S, S, 1, masks, NULL, STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,      0, 0, 0, NULL,  NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_ERR_EMPTY_ROW);
  CHECK(plan == NULL, "no plan on error");
  CHECK(strstr(stsa_ctx_last_error(ctx), "14") != NULL, "message names row 14: '%s'",
        stsa_ctx_last_error(ctx));
  desc.flags = STSA_PLAN_ALLOW_EMPTY_ROWS;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  tu_rng rng = {4};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, 32, 1);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, 1, 32);
  float lse[64];
  stsa_sparse_opts o = {sizeof(stsa_sparse_opts), 0.0f, lse, STSA_SPARSE_EXACT, NULL, 0};
  CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &q, &q, &out, &o), STSA_OK);
  int zero = 1;
  for (int d = 0; d < 32; d++)
    zero &= ((float *)out.data)[14 * 32 + d] == 0.0f;
  CHECK(zero && isinf(lse[14]) && lse[14] < 0, "empty row 14 gives 0 and lse -inf");
  CHECK(isfinite(lse[13]) && isfinite(lse[15]), "neighbours of the empty row are normal");
  stsa_plan_free(plan);
  stsa_mask_free(m);
  stsa_ctx_free(ctx);
  tu_free_tensor(&q);
  tu_free_tensor(&out);
}

/* Bad calls leave the output untouched. */
static void test_invalid(void) {
  tu_rng rng = {6};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, 100, 2, 32, 1);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, 100, 2, 32);
  stsa_mask *m;
  stsa_mask_causal(0, &m);
  const stsa_mask *masks[2] = {m, m};
  stsa_ctx *ctx = tu_make_ctx(STSA_BACKEND_AUTO, 2, 24, 16);
  stsa_plan_desc desc = {
      sizeof(stsa_plan_desc), 100, 100, 2, masks, NULL, STSA_ORDER_NATIVE,
      STSA_ORDER_NATIVE,      0,   0,   0, NULL,  NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  stsa_tensor short_q = q, short_out = out;
  short_q.shape[1] = short_out.shape[1] = 90;
  CHECK_STATUS(
      stsa_sparse_attention(ctx, plan, &short_q, &short_q, &short_q, &short_out, NULL),
      STSA_ERR_BAD_SHAPE);
  CHECK(strstr(stsa_ctx_last_error(ctx), "plan is for") != NULL, "message: %s",
        stsa_ctx_last_error(ctx));
  stsa_tensor one_head = q, one_head_out = out;
  one_head.shape[2] = one_head_out.shape[2] = 1;
  CHECK_STATUS(stsa_sparse_attention(ctx, plan, &one_head, &one_head, &one_head,
                                     &one_head_out, NULL),
               STSA_ERR_BAD_SHAPE);
  CHECK_STATUS(stsa_sparse_attention(ctx, NULL, &q, &q, &q, &out, NULL),
               STSA_ERR_NULL_ARG);
  stsa_sparse_opts bad = {sizeof(stsa_sparse_opts), 0.0f, NULL,
                          (stsa_sparse_mode)7,      NULL, 0};
  CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &q, &q, &out, &bad),
               STSA_ERR_BAD_PARAM);
  /* unknown flag bits are refused, as stsa_plan_build refuses its own */
  int64_t changed = -7;
  for (unsigned flags = 2; flags; flags <<= 1) {
    stsa_sparse_opts unknown = {
        sizeof(stsa_sparse_opts), 0.0f,     NULL,
        STSA_SPARSE_EXACT,        &changed, flags | STSA_SPARSE_PREPERMUTED};
    CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &q, &q, &out, &unknown),
                 STSA_ERR_BAD_PARAM);
    CHECK(strstr(stsa_ctx_last_error(ctx), "unknown flags") != NULL,
          "flags 0x%x: message '%s'", flags, stsa_ctx_last_error(ctx));
  }
  CHECK(changed == -7, "pairs_changed written by a refused call");
  CHECK(tu_is_sentinel(&out) && tu_guard_ok(out.data),
        "output untouched by invalid calls");
  stsa_plan_free(plan);
  stsa_mask_free(m);
  stsa_ctx_free(ctx);
  tu_free_tensor(&q);
  tu_free_tensor(&out);
}

/* Compaction (Splash's rule: the compacted grid gives bitwise the output of
 * the uncompacted one): walking every kv tile, with the empty ones masked
 * entirely, gives the same bytes as walking only the active ones, because a
 * fully masked tile leaves m, l and o exactly as they were (alpha = 1, p = 0). */
typedef struct band_ctx {
  int64_t w;
} band_ctx;

static void band_mask(const void *ctx, int64_t entry, int64_t q0, int r0, int rows,
                      int64_t k0, int n, float *s, int ld_s) {
  (void)entry;
  const band_ctx *b = ctx;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < n; c++)
      if (llabs((q0 + r0 + r) - (k0 + c)) > b->w)
        s[(int64_t)r * ld_s + c] = -INFINITY;
}

static void test_compaction(void) {
  tu_rng rng = {77};
  const int64_t S = 700, D = 64;
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, D, 1);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, D, 1);
  stsa_tensor v = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, D, 1);
  stsa_tensor o_all = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, 1, D);
  stsa_tensor o_compact = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, 1, D);
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    stsa_attn_problem pb_all, pb_compact;
    const stsa_backend_choice choice = tu_choose_backend(backends[bi]);
    stsa_problem_init(&pb_all, &q, &k, &v, &o_all, NULL, 48, 64, &choice.kern);
    stsa_problem_init(&pb_compact, &q, &k, &v, &o_compact, NULL, 48, 64, &choice.kern);
    float *mem = aligned_alloc(64, stsa_kv_packed_floats(&pb_all) * sizeof(float));
    stsa_kv_packed kv = stsa_kv_packed_at(&pb_all, mem);
    for (int64_t t = 0; t < stsa_kv_tiles(&pb_all); t++)
      stsa_pack_kv_tile(&pb_all, 0, 0, t, NULL, &kv);
    stsa_tile_scratch sc;
    CHECK(stsa_tile_scratch_alloc(&pb_all, &sc) == 0, "scratch");
    band_ctx band = {90};
    const int64_t nkt = stsa_kv_tiles(&pb_all);
    int32_t tiles[64], active[64];
    uint8_t kinds[64];
    for (int64_t qt = 0; qt < stsa_q_tiles(&pb_all); qt++) {
      int32_t n_active = 0;
      for (int64_t t = 0; t < nkt; t++) {
        tiles[t] = (int32_t)t;
        kinds[t] = STSA_TILE_PARTIAL;
        /* active when the band reaches the tile from some row of the q tile */
        int64_t q_lo = qt * 48, q_hi = q_lo + 47, k_lo = t * 64, k_hi = k_lo + 63;
        if (k_hi >= q_lo - band.w && k_lo <= q_hi + band.w)
          active[n_active++] = (int32_t)t;
      }
      stsa_kv_list all = {tiles, kinds, (int32_t)nkt, band_mask, &band, NULL, NULL};
      stsa_kv_list compact = {active, kinds, n_active, band_mask, &band, NULL, NULL};
      stsa_run_q_tile(&pb_all, &kv, 0, 0, qt, &all, &sc);
      stsa_run_q_tile(&pb_compact, &kv, 0, 0, qt, &compact, &sc);
    }
    CHECK(tu_same_bytes(&o_all, &o_compact),
          "[%s] the compacted walk differs from the full one",
          stsa_backend_name((stsa_backend)backends[bi]));
    stsa_tile_scratch_free(&sc);
    free(mem);
  }
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
  tu_free_tensor(&o_all), tu_free_tensor(&o_compact);
}

/* The partitioned entry point: every nth, parts run in any order on one
 * shared, misaligned buffer, give stsa_sparse_attention's bytes (out and
 * lse) on every backend and mode, with the permutation of a temporal plan;
 * a buffer one byte short is refused before anything is written. */
static void test_sparse_parts(void) {
  const stsa_geometry g = {5, 6, 7, 9, 6, STSA_TEXT_SUFFIX};
  const int64_t N = stsa_geometry_tokens(&g), B = 2, H = 3, D = 40;
  tu_rng rng = {31};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, N, H, D, 1);
  stsa_tensor k = tu_random_tensor(&rng, STSA_BF16, TU_BHSD, B, N, H, D, 1);
  stsa_tensor v = tu_random_tensor(&rng, STSA_F16, TU_BSHD, B, N, H, D, 1);
  stsa_mask *frame, *band, *text, *spatial, *temporal;
  stsa_mask_frame_window(&g, 1, &frame);
  stsa_mask_position_band(&g, 2 * g.frames + 1, &band);
  stsa_mask_text(&g, &text);
  stsa_mask_or(frame, text, &spatial);
  stsa_mask_or(band, text, &temporal);
  const stsa_mask *masks[3] = {spatial, temporal, spatial};
  const stsa_order orders[2] = {STSA_ORDER_NATIVE, STSA_ORDER_POSITION_MAJOR};
  stsa_backend backends[1 + TU_MAX_BACKENDS] = {STSA_BACKEND_REF};
  const int nb = 1 + tu_tiled_backends(backends + 1);
  const size_t nlse = (size_t)(B * H * N);
  float *lse_all = malloc(sizeof(float) * nlse), *lse_part = malloc(sizeof(float) * nlse);
  for (int bi = 0; bi < nb; bi++)
    for (int oi = 0; oi < 2; oi++)
      for (int mode = 0; mode < STSA_SPARSE_MODE_COUNT_; mode++) {
        stsa_ctx *ctx = tu_make_ctx(backends[bi], 2, 30, 32);
        stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                               N,
                               N,
                               H,
                               masks,
                               &g,
                               orders[oi],
                               orders[oi],
                               0,
                               0,
                               0,
                               NULL,
                               NULL};
        stsa_plan *plan = NULL;
        CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
        int64_t changed_all = -1, changed_part = -1;
        stsa_sparse_opts opts = {sizeof(stsa_sparse_opts), 0.0f,         lse_all,
                                 (stsa_sparse_mode)mode,   &changed_all, 0};
        stsa_tensor all = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
        CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &all, &opts), STSA_OK);
        opts.lse = lse_part;
        opts.pairs_changed = &changed_part;
        const int parts[] = {1, 2, 3, 7, 50};
        for (size_t pi = 0; pi < sizeof parts / sizeof *parts; pi++) {
          const int nth = parts[pi];
          stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
          size_t wsize = 0;
          CHECK_STATUS(stsa_sparse_attention_part_wsize(ctx, plan, &q, &k, &v, &o, &opts,
                                                        nth, &wsize),
                       STSA_OK);
          char *work = malloc(wsize + 3);
          CHECK_STATUS(stsa_sparse_attention_part(ctx, plan, &q, &k, &v, &o, &opts, 0,
                                                  nth, work + 3, wsize - 1),
                       STSA_ERR_BAD_PARAM);
          CHECK(tu_is_sentinel(&o), "a short work buffer wrote output");
          for (int ith = nth - 1; ith >= 0; ith--)
            CHECK_STATUS(stsa_sparse_attention_part(ctx, plan, &q, &k, &v, &o, &opts, ith,
                                                    nth, work + 3, wsize),
                         STSA_OK);
          CHECK(tu_same_bytes(&o, &all) &&
                    !memcmp(lse_all, lse_part, sizeof(float) * nlse),
                "[%s] order %d mode %d: %d parts differ from one call",
                stsa_backend_name(backends[bi]), oi, mode, nth);
          CHECK(changed_part == changed_all, "pairs_changed %lld from parts, %lld",
                (long long)changed_part, (long long)changed_all);
          free(work);
          tu_free_tensor(&o);
        }
        tu_free_tensor(&all);
        stsa_plan_free(plan);
        stsa_ctx_free(ctx);
      }
  free(lse_all);
  free(lse_part);
  stsa_mask_free(frame);
  stsa_mask_free(band);
  stsa_mask_free(text);
  stsa_mask_free(spatial);
  stsa_mask_free(temporal);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
}

int main(void) {
  test_index_masks();
  test_dtypes_layouts();
  test_video_masks();
  test_full_equals_dense();
  test_tile_rounded();
  test_empty_rows();
  test_invalid();
  test_compaction();
  test_sparse_parts();
  return tu_finish("test_sparse");
}
