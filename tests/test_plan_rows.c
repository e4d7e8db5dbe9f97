/*
 * test_plan_rows.c — plans over a subset of query rows (stsa_plan_desc.q_rows).
 *
 * Contract (stsa.h): for such a plan q, out and lse hold the s_q sampled rows
 * only, row i being the query of native token q_rows[i]; k and v hold every
 * key. Every buffer here is malloc'ed exactly as large as its descriptor
 * claims, so an ASan build reports any read or write past it, and outputs are
 * compared with a brute-force double-precision softmax over the kept keys.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask_util.h"
#include "testutil.h"

enum { SENTINEL = 0x7b };

/* A contiguous [B, S, H, D] tensor in exactly B*S*H*D elements. */
static stsa_tensor exact_tensor(stsa_dtype dt, int64_t B, int64_t S, int64_t H,
                                int64_t D) {
  size_t bytes = (size_t)(B * S * H * D) * stsa_dtype_size(dt);
  void *p = malloc(bytes);
  if (!p)
    abort();
  memset(p, SENTINEL, bytes);
  return stsa_tensor_bshd(p, dt, B, S, H, D);
}

static stsa_tensor random_tensor(tu_rng *rng, stsa_dtype dt, int64_t B, int64_t S,
                                 int64_t H, int64_t D) {
  stsa_tensor t = exact_tensor(dt, B, S, H, D);
  for (size_t i = 0; i < (size_t)(B * S * H * D); i++)
    tu_store(t.data, dt, i, tu_rng_normal(rng));
  return t;
}

static int untouched(const stsa_tensor *t) { return tu_is_sentinel(t); }

/* Max abs difference of out (and lse) from the reference over every row. */
static double worst_error(const stsa_tensor *q, const stsa_tensor *k,
                          const stsa_tensor *v, const stsa_tensor *out, const float *lse,
                          const stsa_mask *const *masks, const int64_t *rows,
                          const int64_t *kv_native) {
  const int64_t B = q->shape[0], Sq = q->shape[1], H = q->shape[2], D = q->shape[3];
  double worst = 0, ref[512], ref_lse;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < Sq; i++)
      for (int64_t h = 0; h < H; h++) {
        tu_masked_reference_row(q, k, v, masks[h], b, i, rows[i], h, kv_native, ref,
                                &ref_lse);
        for (int64_t d = 0; d < D; d++) {
          double got = tu_load(out->data, out->dtype, tu_offset(out, b, i, h, d));
          double e = isfinite(got) ? fabs(got - ref[d]) : INFINITY;
          worst = e > worst ? e : worst;
        }
        if (lse) {
          double got = lse[(b * H + h) * Sq + i];
          double e = got == ref_lse ? 0 : fabs(got - ref_lse);
          if (!isfinite(e))
            e = INFINITY;
          worst = e > worst ? e : worst;
        }
      }
  return worst;
}

/* Every backend of the table but AUTO, which is one of the others. */
#define FIRST_BACKEND (STSA_BACKEND_AUTO + 1)

/* The shape: 4 rows {0, 10, 20, 31} of a 2 x 4 x 4 video (N = 32),
 * in every backend, mode, key order and with or without PREPERMUTED. */
static void test_video_rows(void) {
  const stsa_geometry g = {2, 4, 4, 0, 0, STSA_TEXT_NONE};
  const int64_t N = 32, R = 4, B = 2, H = 2, D = 20;
  const int64_t rows[4] = {0, 10, 20, 31};
  tu_rng rng = {11};
  stsa_mask *fw = NULL, *band = NULL;
  CHECK_STATUS(stsa_mask_frame_window(&g, 0, &fw), STSA_OK);
  CHECK_STATUS(stsa_mask_position_band(&g, 3, &band), STSA_OK);
  const stsa_mask *masks[2] = {fw, band};
  stsa_tensor q = random_tensor(&rng, STSA_F32, B, R, H, D);
  stsa_tensor k = random_tensor(&rng, STSA_F16, B, N, H, D);
  stsa_tensor v = random_tensor(&rng, STSA_F32, B, N, H, D);
  /* K and V already in sink-first order, for PREPERMUTED calls */
  stsa_tensor kp = exact_tensor(STSA_F16, B, N, H, D),
              vp = exact_tensor(STSA_F32, B, N, H, D);
  CHECK_STATUS(stsa_permute_tokens(&g, STSA_ORDER_SINK_FIRST, 0, &k, &kp), STSA_OK);
  CHECK_STATUS(stsa_permute_tokens(&g, STSA_ORDER_SINK_FIRST, 0, &v, &vp), STSA_OK);
  int64_t sink_first[32];
  CHECK_STATUS(stsa_order_permutation(&g, STSA_ORDER_SINK_FIRST, sink_first), STSA_OK);

  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  for (int order = 0; order < 2; order++) {
    stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                           R,
                           N,
                           H,
                           masks,
                           &g,
                           STSA_ORDER_NATIVE,
                           order ? STSA_ORDER_SINK_FIRST : STSA_ORDER_NATIVE,
                           0,
                           16,
                           STSA_PLAN_DEFAULT,
                           rows,
                           NULL};
    stsa_plan *plan = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
    if (!plan)
      continue;
    for (int be = FIRST_BACKEND; be < stsa_backend_count(); be++) {
      if (!stsa_backend_available((stsa_backend)be))
        continue;
      CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, (stsa_backend)be), STSA_OK);
      for (int mode = 0; mode < STSA_SPARSE_MODE_COUNT_; mode++)
        for (int pre = 0; pre < 2; pre++) {
          stsa_tensor out = exact_tensor(STSA_F32, B, R, H, D);
          float *lse = malloc(sizeof(float) * (size_t)(B * H * R));
          stsa_sparse_opts opts = {
              sizeof(stsa_sparse_opts), 0.0f, lse,
              (stsa_sparse_mode)mode,   NULL, pre ? STSA_SPARSE_PREPERMUTED : 0};
          const int permuted_kv = pre && order;
          const stsa_tensor *kk = permuted_kv ? &kp : &k, *vv = permuted_kv ? &vp : &v;
          stsa_status st = stsa_sparse_attention(ctx, plan, &q, kk, vv, &out, &opts);
          CHECK(st == STSA_OK, "%s order %d mode %d pre %d: %s (%s)",
                stsa_backend_name((stsa_backend)be), order, mode, pre,
                stsa_status_str(st), stsa_ctx_last_error(ctx));
          if (st == STSA_OK && mode != STSA_SPARSE_TILE_ROUNDED) {
            double e = worst_error(&q, kk, vv, &out, lse, masks, rows,
                                   permuted_kv ? sink_first : NULL);
            CHECK(e < 2e-5, "%s order %d mode %d pre %d: error %g",
                  stsa_backend_name((stsa_backend)be), order, mode, pre, e);
          } else if (st == STSA_OK) { /* lossy, but every row written and finite */
            double e = worst_error(&q, kk, vv, &out, NULL, masks, rows,
                                   permuted_kv ? sink_first : NULL);
            CHECK(e < 10, "%s order %d tile-rounded pre %d: error %g",
                  stsa_backend_name((stsa_backend)be), order, pre, e);
          }
          free(out.data);
          free(lse);
        }
    }
    stsa_plan_free(plan);
  }

  /* Rejected shapes: all N rows in native order, and mixed row counts. The
   * output must stay untouched. */
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_AUTO);
  stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                         R,
                         N,
                         H,
                         masks,
                         &g,
                         STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,
                         0,
                         0,
                         STSA_PLAN_DEFAULT,
                         rows,
                         NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  stsa_tensor q_all = random_tensor(&rng, STSA_F32, B, N, H, D);
  stsa_tensor out_all = exact_tensor(STSA_F32, B, N, H, D);
  stsa_tensor out_r = exact_tensor(STSA_F32, B, R, H, D);
  stsa_tensor k_r = random_tensor(&rng, STSA_F32, B, R, H, D);
  struct {
    const stsa_tensor *q, *k, *out;
    const char *what, *msg;
  } bad[] = {
      {&q_all, &k, &out_all, "q and out with all N rows", "q_rows"},
      {&q, &k, &out_all, "out with all N rows", "out has 32 tokens"},
      {&q_all, &k, &out_r, "q with all N rows", "out has 4 tokens"},
      {&q, &k_r, &out_r, "k with the sampled rows only", "S_kv = 32"},
  };
  for (size_t i = 0; plan && i < sizeof bad / sizeof *bad; i++) {
    const stsa_tensor *vv = bad[i].k == &k ? &v : bad[i].k;
    stsa_status st =
        stsa_sparse_attention(ctx, plan, bad[i].q, bad[i].k, vv, bad[i].out, NULL);
    CHECK(st == STSA_ERR_BAD_SHAPE, "%s: got %s", bad[i].what, stsa_status_str(st));
    CHECK(strstr(stsa_ctx_last_error(ctx), bad[i].msg) != NULL,
          "%s: message '%s' lacks '%s'", bad[i].what, stsa_ctx_last_error(ctx),
          bad[i].msg);
    CHECK(untouched(bad[i].out), "%s: output touched", bad[i].what);
  }
  stsa_plan_free(plan);
  stsa_tensor *all[] = {&q, &k, &v, &kp, &vp, &q_all, &out_all, &out_r, &k_r};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    free(all[i]->data);
  stsa_mask_free(fw);
  stsa_mask_free(band);
  stsa_ctx_free(ctx);
}

/* A plain sequence with unsorted rows, one of which keeps none (ALLOW_EMPTY_ROWS: 0
 * output, lse = -inf). */
static void test_plain_rows(void) {
  const int64_t S = 40, R = 4, H = 1, D = 8;
  const int64_t rows[4] = {39, 0, 17, 5};
  tu_rng rng = {5};
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_causal(-1, &m), STSA_OK); /* j <= i - 1 */
  const stsa_mask *masks[1] = {m};
  stsa_tensor q = random_tensor(&rng, STSA_F32, 1, R, H, D);
  stsa_tensor k = random_tensor(&rng, STSA_BF16, 1, S, H, D);
  stsa_tensor v = random_tensor(&rng, STSA_F16, 1, S, H, D);
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                         R,
                         S,
                         H,
                         masks,
                         NULL,
                         STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,
                         6,
                         16,
                         STSA_PLAN_DEFAULT,
                         rows,
                         NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_ERR_EMPTY_ROW);
  desc.flags = STSA_PLAN_ALLOW_EMPTY_ROWS;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  for (int be = FIRST_BACKEND; plan && be < stsa_backend_count(); be++) {
    if (!stsa_backend_available((stsa_backend)be))
      continue;
    stsa_ctx_set(ctx, STSA_PARAM_BACKEND, (stsa_backend)be);
    stsa_tensor out = exact_tensor(STSA_F16, 1, R, H, D);
    float *lse = malloc(sizeof(float) * (size_t)(H * R));
    stsa_sparse_opts opts = {sizeof(stsa_sparse_opts), 0.0f, lse,
                             STSA_SPARSE_EXACT,        NULL, 0};
    CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &out, &opts), STSA_OK);
    double e = worst_error(&q, &k, &v, &out, lse, masks, rows, NULL);
    CHECK(e < 2e-3, "plain rows, %s: error %g", stsa_backend_name((stsa_backend)be), e);
    CHECK(lse[1] == -INFINITY, "row of token 0 keeps nothing: lse %g", (double)lse[1]);
    free(out.data);
    free(lse);
  }
  stsa_plan_free(plan);
  free(q.data);
  free(k.data);
  free(v.data);
  stsa_mask_free(m);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_video_rows();
  test_plain_rows();
  return tu_finish("test_plan_rows");
}
