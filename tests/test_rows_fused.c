/*
 * test_rows_fused.c — profiling's fused pass (kernel/rows_fused.h, through
 * mask/rows_call.h) against the per-mask passes it replaces
 * (stsa_sparse_rows_multi): the same rows within f32 rounding (on the bf16
 * unit, plus the two bf16 terms of each probability) for every tiled backend, K/V dtype,
 * row order and thread count; rows a mask keeps nothing of are zero in both; the outputs
 * are bitwise the same on 1, 2 and 3 threads; guard bytes stay intact; and inputs the
 * pass declines (NaN in V, logits that could overflow, the reference backend) give the
 * per-mask passes' bytes exactly. With bf16 K and V the rows are gathered in bf16, as
 * profiling hands them over, and the amx backend's pass runs on its bf16 unit
 * (rows_fused_bf16.h). Awkward sizes on purpose: D 24 and 80 (padded panels), 64 and 128,
 * a ragged last kv tile, R below one register tile. The masks' rows keep whole tiles,
 * parts of tiles and nothing side by side in one register tile of rows (the pass adds a
 * whole tile's dense sums and runs a P.V only for the parts); masks per head take the
 * same checks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask/plan.h"
#include "mask/rows_call.h"
#include "mask/sparse_call.h"
#include "testutil.h"

enum { MASKS = 4 }; /* dense, then three */

typedef struct fixture {
  stsa_geometry g;
  int64_t N, H, D, R;
  int kv_tile;
  stsa_dtype kv_dtype;
} fixture;

/* Uniform in [0, 1). */
static double unit(tu_rng *rng) { return 0.5 * (tu_rng_uniform(rng) + 1.0); }

/* R rows ascending, distinct, spread over the video. */
static void sample(tu_rng *rng, int64_t N, int64_t R, int64_t *rows) {
  for (int64_t r = 0; r < R; r++)
    rows[r] = r * N / R + (int64_t)(unit(rng) * (double)(N / R));
}

/* The four masks: dense, a frame window (whole frames: tiles kept whole
 * and tiles across a frame's edge), a position band (width w), and an
 * explicit mask whose rows mix in every register tile of rows: every third
 * keeps nothing, the next a run of half the keys from a place set by
 * `shift` (whole tiles inside, part of one at each end), the next random
 * pairs. */
static void make_masks(tu_rng *rng, const fixture *fx, int64_t frames, int64_t w,
                       int64_t shift, stsa_mask *m[MASKS]) {
  CHECK_STATUS(stsa_mask_full(&m[0]), STSA_OK);
  CHECK_STATUS(stsa_mask_frame_window(&fx->g, frames, &m[1]), STSA_OK);
  CHECK_STATUS(stsa_mask_position_band(&fx->g, w, &m[2]), STSA_OK);
  uint8_t *keep = malloc((size_t)(fx->N * fx->N));
  for (int64_t i = 0; i < fx->N; i++) {
    const int64_t run0 = (i * 7 + shift) % fx->N;
    for (int64_t j = 0; j < fx->N; j++)
      keep[i * fx->N + j] = i % 3 == 1   ? j >= run0 && j < run0 + fx->N / 2
                            : i % 3 == 2 ? unit(rng) < 0.2
                                         : 0;
  }
  CHECK_STATUS(stsa_mask_dense(keep, fx->N, fx->N, &m[3]), STSA_OK);
  free(keep);
}

static stsa_ctx *make_ctx(stsa_backend backend, int threads) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backend), STSA_OK);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_THREADS, threads), STSA_OK);
  return ctx;
}

/* The plan of one mask over fx's R rows (one q tile of them). */
static stsa_plan *build_plan(stsa_ctx *ctx, const fixture *fx, const stsa_mask *mask,
                             const int64_t *rows) {
  const stsa_mask *one[1] = {mask};
  stsa_plan_desc desc = {sizeof desc,
                         fx->R,
                         fx->N,
                         1,
                         one,
                         &fx->g,
                         STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,
                         (int)fx->R,
                         fx->kv_tile,
                         STSA_PLAN_ALLOW_EMPTY_ROWS,
                         rows,
                         NULL};
  stsa_plan *plan = NULL;
  const stsa_status st = stsa_plan_build(ctx, &desc, &plan);
  CHECK(st == STSA_OK, "plan: %s", stsa_ctx_last_error(ctx));
  return plan;
}

static void build_plans(stsa_ctx *ctx, const fixture *fx, stsa_mask *const m[MASKS],
                        const int64_t *rows, stsa_plan *plans[MASKS]) {
  for (int i = 0; i < MASKS; i++)
    plans[i] = build_plan(ctx, fx, m[i], rows);
}

/* Outputs of one call: MASKS tensors of [1, R, H, D] f32, guarded. */
typedef struct outs {
  stsa_tensor t[MASKS];
} outs;

static outs make_outs(const fixture *fx) {
  outs o;
  for (int i = 0; i < MASKS; i++)
    o.t[i] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, fx->R, fx->H, fx->D);
  return o;
}

static void free_outs(outs *o) {
  for (int i = 0; i < MASKS; i++) {
    CHECK(tu_guard_ok(o->t[i].data), "guard bytes of output %d", i);
    tu_free_tensor(&o->t[i]);
  }
}

/* Runs the per-mask passes (fused 0) or the fused entry on ctx. */
static void run(stsa_ctx *ctx, stsa_plan *const plans[MASKS],
                const int32_t *const *orders, const stsa_tensor *q, const stsa_tensor *k,
                const stsa_tensor *v, int fused, outs *o) {
  const stsa_plan *const p[MASKS] = {plans[0], plans[1], plans[2], plans[3]};
  stsa_status st = fused
                       ? stsa_sparse_rows_dense_and(ctx, p, MASKS, orders, q, k, v, o->t)
                       : stsa_sparse_rows_multi(ctx, p, MASKS, q, k, v, o->t);
  CHECK_STATUS(st, STSA_OK);
}

/* Within f32 rounding, plus `slack` (unit_slack). */
static void check_close(const outs *got, const outs *want, double slack,
                        const char *what) {
  for (int i = 0; i < MASKS; i++) {
    double scale = 0;
    const double diff = tu_max_abs_diff(&got->t[i], &want->t[i], &scale);
    CHECK(diff <= 2e-6 * (scale > 1 ? scale : 1) + slack,
          "%s: output %d differs by %.3g (scale %.3g)", what, i, diff, scale);
  }
}

/* What the fused pass may add to f32 rounding: on the bf16 unit (the amx
 * backend, bf16 K and V) each probability enters P.V as two bf16 terms
 * within 2^-16 of it (rows_fused_bf16.h), so an output row, a mean of V's
 * rows, moves by at most 2^-16 max |V|; else nothing. */
static double unit_slack(stsa_backend be, const fixture *fx, const stsa_tensor *v) {
  if (be != STSA_BACKEND_AMX || fx->kv_dtype != STSA_BF16)
    return 0;
  double most = 0;
  for (int64_t j = 0; j < fx->N; j++)
    for (int64_t h = 0; h < fx->H; h++)
      for (int64_t d = 0; d < fx->D; d++)
        most = fmax(most, fabs(tu_load(v->data, v->dtype, tu_offset(v, 0, j, h, d))));
  return ldexp(most, -16);
}

static void check_same(const outs *got, const outs *want, const char *what) {
  for (int i = 0; i < MASKS; i++)
    CHECK(tu_same_bytes(&got->t[i], &want->t[i]), "%s: output %d not bitwise", what, i);
}

/* The rows of q (all N tokens) gathered, as profiling hands them over: in
 * f32, or in bf16 with bf16 K and V (where the amx backend's fused pass
 * runs on its bf16 unit: rows_fused_bf16.h). */
static stsa_tensor gather(const stsa_tensor *q, const fixture *fx, const int64_t *rows) {
  const stsa_dtype dt = fx->kv_dtype == STSA_BF16 ? STSA_BF16 : STSA_F32;
  stsa_tensor g = tu_sentinel_tensor(dt, TU_BSHD, 1, fx->R, fx->H, fx->D);
  for (int64_t r = 0; r < fx->R; r++)
    for (int64_t h = 0; h < fx->H; h++)
      for (int64_t d = 0; d < fx->D; d++)
        tu_store(g.data, dt, tu_offset(&g, 0, r, h, d),
                 tu_load(q->data, q->dtype, tu_offset(q, 0, rows[r], h, d)));
  return g;
}

/* The dense rows alone (one plan, as the recheck and SVG2's deferred bound
 * profile them; on the amx backend with bf16 K and V the pass runs them on
 * the bf16 engine, rows_fused.c: dense_tile_engine): against the per-mask
 * pass's dense rows (want), bitwise on 1, 2 and 3 threads, and each row
 * bitwise what a pass of the first half of the rows gives it (the
 * recheck's rows take the same bits alone or after other rows). */
static void check_dense_alone(stsa_ctx *const ctx[3], const fixture *fx,
                              const stsa_mask *dense, const int64_t *rows,
                              const stsa_tensor *q, const stsa_tensor *k,
                              const stsa_tensor *v, const stsa_tensor *want, double slack,
                              const char *what) {
  stsa_plan *plan = build_plan(ctx[0], fx, dense, rows);
  const stsa_plan *const p[1] = {plan};
  stsa_tensor got[3];
  for (int t = 0; t < 3; t++) {
    got[t] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, fx->R, fx->H, fx->D);
    CHECK_STATUS(stsa_sparse_rows_dense_and(ctx[t], p, 1, NULL, q, k, v, &got[t]),
                 STSA_OK);
  }
  double scale = 0;
  const double diff = tu_max_abs_diff(&got[0], want, &scale);
  CHECK(diff <= 2e-6 * (scale > 1 ? scale : 1) + slack,
        "%s: dense alone differs by %.3g (scale %.3g)", what, diff, scale);
  for (int t = 1; t < 3; t++)
    CHECK(tu_same_bytes(&got[t], &got[0]), "%s: dense alone not bitwise on %d threads",
          what, t == 1 ? 1 : 3);
  /* the first half of the rows, q's first rows (BSHD, R outermost) */
  fixture half = *fx;
  half.R = fx->R / 2;
  stsa_tensor hq = *q,
              hout = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, half.R, fx->H, fx->D);
  hq.shape[1] = half.R;
  stsa_plan *hplan = build_plan(ctx[0], &half, dense, rows);
  const stsa_plan *const hp[1] = {hplan};
  CHECK_STATUS(stsa_sparse_rows_dense_and(ctx[0], hp, 1, NULL, &hq, k, v, &hout),
               STSA_OK);
  const size_t bytes = sizeof(float) * (size_t)(half.R * fx->H * fx->D);
  CHECK(memcmp(hout.data, got[0].data, bytes) == 0,
        "%s: dense alone, the first %lld rows not bitwise in a pass of their own", what,
        (long long)half.R);
  CHECK(tu_guard_ok(hout.data), "%s: guard bytes of the half pass", what);
  tu_free_tensor(&hout);
  stsa_plan_free(hplan);
  for (int t = 0; t < 3; t++) {
    CHECK(tu_guard_ok(got[t].data), "%s: guard bytes of dense alone", what);
    tu_free_tensor(&got[t]);
  }
  stsa_plan_free(plan);
}

/* Only the odd heads on (heads_on): their rows of every output are
 * bitwise those of the run of every head (all), the even heads' zeros. */
static void check_heads_on(stsa_ctx *ctx, const fixture *fx, const stsa_plan *const *p,
                           const int32_t *const *orders, const stsa_tensor *q,
                           const stsa_tensor *k, const stsa_tensor *v, const outs *all,
                           const char *what) {
  uint8_t on[8];
  CHECK(fx->H <= 8, "fixture heads");
  for (int64_t h = 0; h < fx->H; h++)
    on[h] = (uint8_t)(h % 2);
  outs part = make_outs(fx);
  CHECK_STATUS(
      stsa_sparse_rows_dense_and_heads(ctx, p, MASKS, orders, on, q, k, v, part.t),
      STSA_OK);
  int64_t wrong = 0;
  for (int i = 0; i < MASKS; i++)
    for (int64_t r = 0; r < fx->R; r++)
      for (int64_t h = 0; h < fx->H; h++)
        for (int64_t d = 0; d < fx->D; d++) {
          const size_t at = tu_offset(&part.t[i], 0, r, h, d);
          const double got = tu_load(part.t[i].data, STSA_F32, at),
                       want = on[h] ? tu_load(all->t[i].data, STSA_F32, at) : 0.0;
          wrong += !(got == want);
        }
  CHECK(wrong == 0, "%s: odd heads on: %lld values differ", what, (long long)wrong);
  free_outs(&part);
}

/* Masks per head (SVG2's form, stsa_sparse_rows_dense_and_heads): head h
 * has its own frame window, band and mixed mask, and its own row order
 * (none, reversed, shuffled); against the per-head passes, and bitwise on
 * 1 and 2 threads. */
static void check_per_head(const fixture *fx, tu_rng *rng, const int64_t *rows,
                           const stsa_tensor *q, const stsa_tensor *k,
                           const stsa_tensor *v, const int32_t *rev,
                           const int32_t *shuf) {
  enum { HMAX = 4 };
  const int64_t H = fx->H;
  CHECK(H <= HMAX, "fixture heads");
  stsa_mask *m[HMAX][MASKS];
  const int32_t *orders[HMAX];
  for (int64_t h = 0; h < H; h++) {
    make_masks(rng, fx, 1 + h % 2, 2 + 3 * h, 5 * h, m[h]);
    orders[h] = h % 3 == 0 ? NULL : h % 3 == 1 ? rev : shuf;
  }
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    char what[160];
    snprintf(what, sizeof what, "per head: %s D %lld R %lld kv tile %d",
             stsa_backend_name(backends[bi]), (long long)fx->D, (long long)fx->R,
             fx->kv_tile);
    stsa_ctx *ctx[2] = {make_ctx(backends[bi], 2), make_ctx(backends[bi], 1)};
    stsa_plan *plans[MASKS * HMAX];
    for (int64_t h = 0; h < H; h++) {
      stsa_plan *one[MASKS];
      build_plans(ctx[0], fx, m[h], rows, one);
      for (int i = 0; i < MASKS; i++)
        plans[i * H + h] = one[i];
    }
    const stsa_plan *const *p = (const stsa_plan *const *)plans;
    outs want = make_outs(fx), got[2] = {make_outs(fx), make_outs(fx)};
    CHECK_STATUS(stsa_sparse_rows_per_head(ctx[0], p, MASKS, q, k, v, want.t), STSA_OK);
    for (int t = 0; t < 2; t++)
      CHECK_STATUS(stsa_sparse_rows_dense_and_heads(ctx[t], p, MASKS, orders, NULL, q, k,
                                                    v, got[t].t),
                   STSA_OK);
    check_close(&got[0], &want, unit_slack(backends[bi], fx, v), what);
    check_same(&got[1], &got[0], what);
    check_heads_on(ctx[0], fx, p, orders, q, k, v, &got[0], what);
    free_outs(&want);
    for (int t = 0; t < 2; t++) {
      free_outs(&got[t]);
      stsa_ctx_free(ctx[t]);
    }
    for (int64_t i = 0; i < MASKS * H; i++)
      stsa_plan_free(plans[i]);
  }
  for (int64_t h = 0; h < H; h++)
    for (int i = 0; i < MASKS; i++)
      stsa_mask_free(m[h][i]);
}

static void check_fixture(const fixture *fx, uint64_t seed) {
  tu_rng rng = {seed};
  int64_t *rows = malloc(sizeof *rows * (size_t)fx->R);
  sample(&rng, fx->N, fx->R, rows);
  stsa_mask *m[MASKS];
  make_masks(&rng, fx, 1, 5, 0, m);
  stsa_tensor qf = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, fx->N, fx->H, fx->D, 1.0);
  stsa_tensor k =
      tu_random_tensor(&rng, fx->kv_dtype, TU_BSHD, 1, fx->N, fx->H, fx->D, 1.0);
  stsa_tensor v =
      tu_random_tensor(&rng, fx->kv_dtype, TU_BSHD, 1, fx->N, fx->H, fx->D, 1.0);
  stsa_tensor q = gather(&qf, fx, rows);
  /* orders: none, reversed, and a shuffle */
  int32_t *rev = malloc(sizeof(int32_t) * (size_t)fx->R);
  int32_t *shuf = malloc(sizeof(int32_t) * (size_t)fx->R);
  for (int64_t r = 0; r < fx->R; r++)
    rev[r] = shuf[r] = (int32_t)(fx->R - 1 - r);
  for (int64_t r = fx->R - 1; r > 0; r--) {
    const int64_t j = (int64_t)(unit(&rng) * (double)(r + 1));
    const int32_t t = shuf[r];
    shuf[r] = shuf[j];
    shuf[j] = t;
  }
  const int32_t *const none[3] = {NULL, NULL, NULL};
  const int32_t *const mixed[3] = {rev, shuf, NULL};
  const int32_t *const all[3] = {shuf, rev, shuf};
  const int32_t *const *orders[3] = {none, mixed, all};

  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    char what[160];
    snprintf(what, sizeof what, "%s D %lld R %lld kv tile %d %s",
             stsa_backend_name(backends[bi]), (long long)fx->D, (long long)fx->R,
             fx->kv_tile, fx->kv_dtype == STSA_F32 ? "f32" : "f16/bf16");
    stsa_ctx *ctx[3] = {make_ctx(backends[bi], 2), make_ctx(backends[bi], 1),
                        make_ctx(backends[bi], 3)};
    stsa_plan *plans[MASKS];
    build_plans(ctx[0], fx, m, rows, plans);
    outs want = make_outs(fx);
    run(ctx[0], plans, NULL, &q, &k, &v, 0, &want);
    for (int oi = 0; oi < 3; oi++) {
      outs got[3];
      for (int t = 0; t < 3; t++) {
        got[t] = make_outs(fx);
        run(ctx[t], plans, orders[oi], &q, &k, &v, 1, &got[t]);
      }
      check_close(&got[0], &want, unit_slack(backends[bi], fx, &v), what);
      check_same(&got[1], &got[0], what);
      check_same(&got[2], &got[0], what);
      /* mask 3 keeps nothing of every third token: those rows are zeros */
      for (int64_t r = 0; r < fx->R; r++)
        if (rows[r] % 3 == 0)
          for (int64_t h = 0; h < fx->H; h++)
            CHECK(tu_load(got[0].t[3].data, STSA_F32,
                          tu_offset(&got[0].t[3], 0, r, h, 0)) == 0.0,
                  "%s: row %lld keeps nothing but is not zero", what, (long long)r);
      for (int t = 0; t < 3; t++)
        free_outs(&got[t]);
    }
    check_dense_alone(ctx, fx, m[0], rows, &q, &k, &v, &want.t[0],
                      unit_slack(backends[bi], fx, &v), what);
    /* declined inputs: NaN in one V row, then K that could overflow a logit */
    const size_t vi = tu_offset(&v, 0, rows[fx->R / 2], 1 % fx->H, 3);
    const double v_old = tu_load(v.data, v.dtype, vi);
    tu_store(v.data, v.dtype, vi, NAN);
    outs nan_want = make_outs(fx), nan_got = make_outs(fx);
    run(ctx[0], plans, NULL, &q, &k, &v, 0, &nan_want);
    run(ctx[0], plans, mixed, &q, &k, &v, 1, &nan_got);
    check_same(&nan_got, &nan_want, "NaN in V");
    tu_store(v.data, v.dtype, vi, v_old);
    free_outs(&nan_want);
    free_outs(&nan_got);
    if (fx->kv_dtype == STSA_F32) {
      const size_t ki = tu_offset(&k, 0, fx->N - 1, 0, 0);
      const double k_old = tu_load(k.data, k.dtype, ki);
      tu_store(k.data, k.dtype, ki, 1e37);
      outs big_want = make_outs(fx), big_got = make_outs(fx);
      run(ctx[0], plans, NULL, &q, &k, &v, 0, &big_want);
      run(ctx[0], plans, mixed, &q, &k, &v, 1, &big_got);
      check_same(&big_got, &big_want, "K near overflow");
      tu_store(k.data, k.dtype, ki, k_old);
      free_outs(&big_want);
      free_outs(&big_got);
    }
    free_outs(&want);
    for (int i = 0; i < MASKS; i++)
      stsa_plan_free(plans[i]);
    for (int t = 0; t < 3; t++)
      stsa_ctx_free(ctx[t]);
  }
  /* the reference backend computes the per-mask passes in double */
  stsa_ctx *ref = make_ctx(STSA_BACKEND_REF, 2);
  stsa_plan *plans[MASKS];
  build_plans(ref, fx, m, rows, plans);
  outs want = make_outs(fx), got = make_outs(fx);
  run(ref, plans, NULL, &q, &k, &v, 0, &want);
  run(ref, plans, mixed, &q, &k, &v, 1, &got);
  check_same(&got, &want, "reference backend");
  free_outs(&want);
  free_outs(&got);
  for (int i = 0; i < MASKS; i++) {
    stsa_plan_free(plans[i]);
    stsa_mask_free(m[i]);
  }
  stsa_ctx_free(ref);
  check_per_head(fx, &rng, rows, &q, &k, &v, rev, shuf);
  free(rev);
  free(shuf);
  free(rows);
  tu_free_tensor(&qf);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
}

int main(void) {
  const stsa_geometry plain = {5, 6, 7, 0, 0, STSA_TEXT_NONE};
  const stsa_geometry prefix = {4, 5, 9, 11, 7, STSA_TEXT_PREFIX};
  const fixture fx[] = {
      {plain, 210, 3, 24, 23, 32, STSA_F32},    {plain, 210, 2, 80, 5, 16, STSA_F32},
      {plain, 210, 3, 24, 41, 48, STSA_F16},    {prefix, 191, 2, 24, 17, 32, STSA_BF16},
      {prefix, 191, 1, 80, 30, 64, STSA_F32},   {plain, 210, 3, 64, 37, 32, STSA_F32},
      {prefix, 191, 2, 128, 29, 48, STSA_BF16}, {plain, 210, 2, 80, 23, 16, STSA_BF16},
  };
  for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++)
    check_fixture(&fx[i], 11 + i);
  return tu_finish("test_rows_fused");
}
