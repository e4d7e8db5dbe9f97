/*
 * test_limit_messages.c — a refused size or value is named in the message,
 * with the limit it broke: the head dim of 513 and the 512 it exceeds, a
 * tensor's byte span, a plan's tile grid, a geometry's sizes; and a floating
 * value is written so that it cannot be mistaken for its bound (-1.0000001
 * is not -1).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg/kmeans.h"
#include "testutil.h"

/* The context's last message holds every one of the NULL-terminated parts. */
static void expect_message(const stsa_ctx *ctx, const char *what,
                           const char *const *parts) {
  const char *msg = stsa_ctx_last_error(ctx);
  for (int i = 0; parts[i]; i++)
    CHECK(strstr(msg, parts[i]) != NULL, "%s: message '%s' lacks '%s'", what, msg,
          parts[i]);
}

/* D = 513 through stsa_attention: the value and the limit 512. */
static void test_head_dim(stsa_ctx *ctx) {
  const int64_t S = 4, H = 1, D = 513;
  float *buf = calloc((size_t)(4 * S * H * D), sizeof *buf);
  stsa_tensor q = stsa_tensor_bshd(buf, STSA_F32, 1, S, H, D);
  stsa_tensor k = stsa_tensor_bshd(buf + S * H * D, STSA_F32, 1, S, H, D);
  stsa_tensor v = stsa_tensor_bshd(buf + 2 * S * H * D, STSA_F32, 1, S, H, D);
  stsa_tensor out = stsa_tensor_bshd(buf + 3 * S * H * D, STSA_F32, 1, S, H, D);
  CHECK_STATUS(stsa_attention(ctx, &q, &k, &v, &out, NULL), STSA_ERR_BAD_SHAPE);
  expect_message(ctx, "D = 513", (const char *const[]){"513", "512", NULL});
  free(buf);
}

/* A tensor whose elements span more than 2^52 bytes: its span and the limit. */
static void test_span(stsa_ctx *ctx) {
  float x[64] = {0};
  const int64_t M = (int64_t)1 << 26;
  /* S steps over all of H: 2^26 x 2^26 = 2^52 elements */
  stsa_tensor q = {x, STSA_F32, {1, M, M, 1}, {1, M, 1, 1}};
  stsa_tensor kv = stsa_tensor_bshd(x, STSA_F32, 1, 4, M, 1);
  CHECK_STATUS(stsa_attention_check(ctx, &q, &kv, &kv, &q, NULL), STSA_ERR_BAD_SHAPE);
  /* 2^52 elements of 4 bytes */
  expect_message(ctx, "span", (const char *const[]){"18014398509481984", "2^52", NULL});
}

/* A plan of more than 2^31 tiles on a side: the count and the limit. */
static void test_tile_grid(stsa_ctx *ctx) {
  stsa_mask *causal = NULL;
  CHECK_STATUS(stsa_mask_causal(0, &causal), STSA_OK);
  const stsa_mask *masks[1] = {causal};
  stsa_plan_desc d = STSA_INIT(stsa_plan_desc);
  d.s_q = d.s_kv = (int64_t)1 << 40;
  d.heads = 1;
  d.masks = masks;
  d.kv_tile = 16;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_ERR_BAD_SHAPE);
  CHECK(plan == NULL, "a plan was built");
  /* 2^40 / 16 = 2^36 kv tiles */
  expect_message(ctx, "tile grid", (const char *const[]){"68719476736", "2^31", NULL});
  stsa_mask_free(causal);
}

/* An invalid geometry: the plan's message gives its sizes. */
static void test_geometry(stsa_ctx *ctx) {
  stsa_mask *causal = NULL;
  CHECK_STATUS(stsa_mask_causal(0, &causal), STSA_OK);
  const stsa_mask *masks[1] = {causal};
  stsa_geometry g = {3, -7, 5, 0, 0, STSA_TEXT_NONE};
  stsa_plan_desc d = STSA_INIT(stsa_plan_desc);
  d.s_q = d.s_kv = 15;
  d.heads = 1;
  d.masks = masks;
  d.geometry = &g;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_ERR_BAD_SHAPE);
  expect_message(ctx, "height -7", (const char *const[]){"-7", ">= 0", NULL});
  /* 2^21 x 2^10 x 2^10 = 2^41 video tokens */
  g = (stsa_geometry){(int64_t)1 << 21, 1024, 1024, 0, 0, STSA_TEXT_NONE};
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_ERR_BAD_SHAPE);
  expect_message(ctx, "2^41 tokens",
                 (const char *const[]){"2097152 x 1024 x 1024", "2^40", NULL});
  stsa_mask_free(causal);
}

/* A refused scale and k-means tolerance are written in full. */
static void test_float_values(stsa_ctx *ctx) {
  float x[4 * 8] = {0}, o[4 * 8];
  stsa_tensor t = stsa_tensor_bshd(x, STSA_F32, 1, 4, 1, 8);
  stsa_tensor out = stsa_tensor_bshd(o, STSA_F32, 1, 4, 1, 8);
  stsa_attn_opts opts = STSA_INIT(stsa_attn_opts);
  opts.scale = nextafterf(-1.0f, -2.0f); /* -1.0000001 as a float */
  CHECK_STATUS(stsa_attention(ctx, &t, &t, &t, &out, &opts), STSA_ERR_BAD_PARAM);
  expect_message(ctx, "scale", (const char *const[]){"scale = -1.0000001", NULL});

  float pts[4 * 2] = {0, 0, 1, 1, 2, 2, 3, 3}, cent[2 * 2];
  int32_t labels[4];
  stsa_kmeans_args a = {.x = pts, .n = 4, .d = 2, .ld = 2, .k = 2, .iters = 3};
  a.tol = -1e-300;
  CHECK_STATUS(stsa_kmeans(ctx, &a, cent, labels, NULL, NULL), STSA_ERR_BAD_PARAM);
  expect_message(ctx, "tol", (const char *const[]){"tol = -1e-300", NULL});
  a.tol = -0.1000000000001;
  CHECK_STATUS(stsa_kmeans(ctx, &a, cent, labels, NULL, NULL), STSA_ERR_BAD_PARAM);
  expect_message(ctx, "tol", (const char *const[]){"tol = -0.1000000000001", NULL});
}

int main(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  test_head_dim(ctx);
  test_span(ctx);
  test_tile_grid(ctx);
  test_geometry(ctx);
  test_float_values(ctx);
  stsa_ctx_free(ctx);
  return tu_finish("test_limit_messages");
}
