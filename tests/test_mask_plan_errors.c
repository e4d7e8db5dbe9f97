/*
 * test_mask_plan_errors.c — plan descriptions the builder refuses (each
 * with its status, a message, and the output untouched), tile kinds and
 * stats of NULL, sparse mode names, and statistics that saturate instead
 * of overflowing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mask/plan.h"
#include "mask_util.h"

static void expect_fail(stsa_ctx *ctx, const stsa_plan_desc *d, stsa_status want,
                        const char *what) {
  stsa_plan sentinel, *p = &sentinel; /* must stay untouched */
  stsa_status st = stsa_plan_build(ctx, d, &p);
  CHECK(st == want && p == &sentinel && stsa_ctx_last_error(ctx)[0],
        "%s: %s, expected %s (message '%s')", what, stsa_status_str(st),
        stsa_status_str(want), stsa_ctx_last_error(ctx));
}

static void test_plan_errors(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  const stsa_geometry g = {2, 2, 3, 2, 2, STSA_TEXT_SUFFIX};
  const int64_t N = tu_tokens(&g);
  stsa_mask *fw, *causal, *dense, *other;
  uint8_t bits[5 * 5];
  memset(bits, 1, sizeof bits);
  NEW_MASK(fw, stsa_mask_frame_window(&g, 1, &fw));
  NEW_MASK(causal, stsa_mask_causal(0, &causal));
  NEW_MASK(dense, stsa_mask_dense(bits, 5, 5, &dense));
  const stsa_geometry g2 = {2, 3, 2, 2, 2, STSA_TEXT_SUFFIX};
  NEW_MASK(other, stsa_mask_frame_window(&g2, 1, &other));
  const stsa_mask *mf[1] = {fw}, *mc[1] = {causal}, *md[1] = {dense}, *mo[1] = {other};
  const stsa_mask *mnull[1] = {NULL};
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build(NULL, NULL, &p), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_plan_build(ctx, NULL, &p), STSA_ERR_NULL_ARG);
  const stsa_plan_desc base = tu_plan_desc(N, N, 1, mf, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  stsa_plan_desc d = base;
  CHECK_STATUS(stsa_plan_build(ctx, &d, NULL), STSA_ERR_NULL_ARG);
  d.heads = 0;
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "heads 0");
  d.heads = INT64_MAX; /* refused before masks[1..] is read */
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "heads INT64_MAX");
  d.heads = ((int64_t)1 << 40) + 1;
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "heads 2^40 + 1");
  d = base;
  d.masks = NULL;
  expect_fail(ctx, &d, STSA_ERR_NULL_ARG, "masks NULL");
  d.masks = mnull;
  expect_fail(ctx, &d, STSA_ERR_NULL_ARG, "masks[0] NULL");
  d = base;
  d.s_q = N - 1;
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "s_q != tokens");
  d = base;
  d.q_order = STSA_ORDER_SINK_FIRST;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "q_order SINK_FIRST");
  d.q_order = (stsa_order)9;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "q_order 9");
  d = base;
  d.kv_tile = 40;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "kv_tile 40");
  d.kv_tile = 0;
  d.q_tile = -6;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "q_tile -6");
  d = base;
  d.flags = 8;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "unknown flag");
  d = base;
  d.masks = mo;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "mask of another geometry");
  d = base;
  d.geometry = NULL;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "video mask without geometry");
  d.masks = mc;
  d.kv_order = STSA_ORDER_POSITION_MAJOR;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "permuted order without geometry");
  d = base;
  d.masks = md;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "dense 5 x 5 on a 14-token plan");
  d.geometry = NULL;
  d.s_q = d.s_kv = 5;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  stsa_plan_free(p);
  d.s_q = 4;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "dense 5 x 5 on a 4 x 5 plan");
  int64_t rows[2] = {1, 5};
  d.q_rows = rows;
  d.s_q = 2;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "q_rows past the dense mask");
  rows[1] = -1;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "negative q_rows");
  rows[1] = 4;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  stsa_plan_free(p);
  CHECK(stsa_plan_tile_kind(NULL, 0, 0, 0) == -1, "tile kind of NULL");
  CHECK_STATUS(stsa_plan_get_stats(NULL, NULL), STSA_ERR_NULL_ARG);
  CHECK(!strcmp(stsa_sparse_mode_name(STSA_SPARSE_EXACT), "exact") &&
            !strcmp(stsa_sparse_mode_name(STSA_SPARSE_NAIVE), "naive") &&
            !strcmp(stsa_sparse_mode_name(STSA_SPARSE_TILE_ROUNDED), "tile-rounded") &&
            !strcmp(stsa_sparse_mode_name(STSA_SPARSE_MODE_COUNT_), "unknown") &&
            !strcmp(stsa_sparse_mode_name((stsa_sparse_mode)-1), "unknown"),
        "sparse mode names");
  stsa_mask_free(fw);
  stsa_mask_free(causal);
  stsa_mask_free(dense);
  stsa_mask_free(other);
  stsa_ctx_free(ctx);
}

/* Plan statistics saturate at INT64_MAX instead of overflowing: 2^22 heads
 * of 2^21 x 2^21 pairs are 2^64 pairs. */
static void test_stats_saturate(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_mask *diag;
  NEW_MASK(diag, stsa_mask_local(0, 0, &diag));
  const int64_t H = (int64_t)1 << 22, S = (int64_t)1 << 21;
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)H);
  for (int64_t h = 0; masks && h < H; h++)
    masks[h] = diag;
  stsa_plan_desc d = tu_plan_desc(S, S, H, masks, NULL, STSA_PLAN_DEFAULT);
  d.kv_tile = 4096;
  d.q_tile = 4096;
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  CHECK_STATUS(stsa_plan_get_stats(p, &st), STSA_OK);
  CHECK(st.pairs_total == INT64_MAX, "pairs_total %lld, expected INT64_MAX (saturated)",
        (long long)st.pairs_total);
  CHECK(st.tiles_total == H * (S / 4096) * (S / 4096), "tiles_total %lld",
        (long long)st.tiles_total);
  CHECK(st.pairs_kept == H * S, "pairs_kept %lld", (long long)st.pairs_kept);
  stsa_plan_free(p);
  free(masks);
  stsa_mask_free(diag);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_plan_errors();
  test_stats_saturate();
  return tu_finish("test_mask_plan_errors");
}
