/*
 * test_mask_clusters.c — the cluster mask of Sparse VideoGen 2
 * (stsa_mask_clusters): the predicate against its definition, plans of it
 * alone and OR'ed with the text rules (kept counts and tiles against brute
 * force, attention against a double-precision reference), sharing of equal
 * masks, and rejected arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask_util.h"
#include "plan_oracle.h"
#include "testutil.h"

/* A cluster mask's arrays, kept here to evaluate the definition directly. */
typedef struct clusters {
  int64_t s_q, s_kv, qc, kc;
  int32_t *q_label, *k_label;
  uint8_t *keep; /* [qc * kc], any nonzero value = keep */
} clusters;

/* Random labels (about one in six -1) and a random keep map (about 40% of
 * pairs kept, with values other than 1 to exercise "nonzero"). Tokens below
 * no_lo or at and above no_hi (text) get -1. */
static clusters random_clusters(tu_rng *r, int64_t s_q, int64_t s_kv, int64_t qc,
                                int64_t kc, int64_t no_lo, int64_t no_hi) {
  clusters c = {s_q,
                s_kv,
                qc,
                kc,
                malloc(sizeof(int32_t) * (size_t)s_q),
                malloc(sizeof(int32_t) * (size_t)s_kv),
                malloc((size_t)(qc * kc))};
  for (int64_t i = 0; i < s_q; i++)
    c.q_label[i] = i < no_lo || i >= no_hi || tu_rnd(r, 0, 5) == 0
                       ? -1
                       : (int32_t)tu_rnd(r, 0, qc - 1);
  for (int64_t j = 0; j < s_kv; j++)
    c.k_label[j] = j < no_lo || j >= no_hi || tu_rnd(r, 0, 5) == 0
                       ? -1
                       : (int32_t)tu_rnd(r, 0, kc - 1);
  for (int64_t x = 0; x < qc * kc; x++)
    c.keep[x] = tu_rnd(r, 0, 9) < 4 ? (uint8_t)tu_rnd(r, 1, 255) : 0;
  return c;
}

static void clusters_free(clusters *c) {
  free(c->q_label);
  free(c->k_label);
  free(c->keep);
}

/* The definition (stsa.h), written out independently of the library. */
static int def_keep(const clusters *c, int64_t i, int64_t j) {
  if (i < 0 || j < 0 || i >= c->s_q || j >= c->s_kv)
    return 0;
  const int32_t a = c->q_label[i], b = c->k_label[j];
  return a >= 0 && b >= 0 && c->keep[a * c->kc + b] != 0;
}

static stsa_mask *make_mask(const clusters *c) {
  stsa_mask *m;
  NEW_MASK(m, stsa_mask_clusters(c->q_label, c->s_q, c->qc, c->k_label, c->s_kv, c->kc,
                                 c->keep, &m));
  return m;
}

/* ---- the predicate --------------------------------------------------------- */
static void test_keep(void) {
  tu_rng r = {41};
  for (int trial = 0; trial < 6; trial++) {
    const int64_t s_q = tu_rnd(&r, 1, 60), s_kv = tu_rnd(&r, 1, 60);
    clusters c =
        random_clusters(&r, s_q, s_kv, tu_rnd(&r, 1, 9), tu_rnd(&r, 1, 9), 0, INT64_MAX);
    stsa_mask *m = make_mask(&c);
    long bad = 0;
    for (int64_t i = -1; m && i <= s_q; i++)
      for (int64_t j = -1; j <= s_kv; j++)
        bad += stsa_mask_keep(m, i, j) != def_keep(&c, i, j);
    CHECK(bad == 0, "trial %d: %ld pairs differ from the definition", trial, bad);
    stsa_mask_free(m);
    clusters_free(&c);
  }
}

/* ---- plans and attention ---------------------------------------------------- */
/* Pairs the mask (and, with text, the text rules) keeps over the rows. */
static int64_t brute_pairs(const clusters *c, const stsa_mask *text, const int64_t *rows,
                           int64_t n_rows, int64_t N) {
  int64_t n = 0;
  for (int64_t r = 0; r < n_rows; r++) {
    const int64_t i = rows ? rows[r] : r;
    for (int64_t j = 0; j < N; j++)
      n += def_keep(c, i, j) || (text && stsa_mask_keep(text, i, j));
  }
  return n;
}

/* Max |out - reference| (and lse) over every row; native q, k, v. */
static double worst_error(const stsa_tensor *q, const stsa_tensor *k,
                          const stsa_tensor *v, const stsa_tensor *out, const float *lse,
                          const stsa_mask *m, const int64_t *rows) {
  const int64_t Sq = q->shape[1], H = q->shape[2], D = q->shape[3];
  double worst = 0, ref[64], ref_lse;
  for (int64_t i = 0; i < Sq; i++)
    for (int64_t h = 0; h < H; h++) {
      tu_masked_reference_row(q, k, v, m, 0, i, rows ? rows[i] : i, h, NULL, ref,
                              &ref_lse);
      for (int64_t d = 0; d < D; d++) {
        const double got = tu_load(out->data, out->dtype, tu_offset(out, 0, i, h, d));
        const double e = isfinite(got) ? fabs(got - ref[d]) : INFINITY;
        worst = e > worst ? e : worst;
      }
      const double got = lse[h * Sq + i];
      double e = got == ref_lse ? 0 : fabs(got - ref_lse);
      if (!isfinite(e))
        e = INFINITY;
      worst = e > worst ? e : worst;
    }
  return worst;
}

/* One plan of mask m (two heads) over rows (NULL: all N), checked for its
 * kept count, its tiles, and the attention it runs. */
static void check_plan(stsa_ctx *ctx, const char *what, const stsa_geometry *g,
                       const clusters *c, const stsa_mask *text, const stsa_mask *m,
                       stsa_order order, const int64_t *rows, int64_t n_rows,
                       tu_rng *rng) {
  const int64_t N = tu_tokens(g), H = 2, D = 24;
  const stsa_mask *masks[2] = {m, m};
  stsa_plan_desc d =
      tu_plan_desc(rows ? n_rows : N, N, H, masks, g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  d.q_order = rows ? STSA_ORDER_NATIVE : order;
  d.kv_order = order;
  d.kv_tile = 16; /* N is no multiple of it */
  d.q_rows = rows;
  stsa_plan *plan = NULL;
  stsa_status st = stsa_plan_build(ctx, &d, &plan);
  CHECK(st == STSA_OK && plan, "%s: plan -> %s (%s)", what, stsa_status_str(st),
        stsa_ctx_last_error(ctx));
  if (!plan)
    return;
  stsa_plan_stats ps = STSA_INIT(stsa_plan_stats);
  CHECK_STATUS(stsa_plan_get_stats(plan, &ps), STSA_OK);
  const int64_t want = H * brute_pairs(c, text, rows, rows ? n_rows : N, N);
  CHECK(ps.pairs_kept == want, "%s: pairs_kept %lld, brute force %lld", what,
        (long long)ps.pairs_kept, (long long)want);

  /* the tiles themselves, against the mask's keep over every pair */
  int64_t *q_native = NULL, *kv_native = malloc(sizeof(int64_t) * (size_t)N);
  CHECK_STATUS(stsa_order_permutation(g, order, kv_native), STSA_OK);
  if (!rows) {
    q_native = malloc(sizeof(int64_t) * (size_t)N);
    CHECK_STATUS(stsa_order_permutation(g, order, q_native), STSA_OK);
  }
  plan_oracle o = {0};
  for (int64_t h = 0; h < H; h++)
    plan_oracle_head(&o, plan, h, m, rows ? rows : q_native, kv_native);
  CHECK(plan_oracle_bad(&o) == 0, "%s: %ld tile mismatches, first: %s", what,
        plan_oracle_bad(&o), o.first);
  free(q_native);
  free(kv_native);

  const int64_t Sq = rows ? n_rows : N;
  stsa_tensor q = tu_random_tensor(rng, STSA_F32, TU_BSHD, 1, Sq, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, Sq, H, D);
  float *lse = malloc(sizeof(float) * (size_t)(H * Sq));
  for (int mode = 0; mode < 2; mode++) { /* EXACT and NAIVE are both exact */
    stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
    opts.lse = lse;
    opts.mode = mode ? STSA_SPARSE_NAIVE : STSA_SPARSE_EXACT;
    st = stsa_sparse_attention(ctx, plan, &q, &k, &v, &out, &opts);
    CHECK(st == STSA_OK, "%s mode %d: attention -> %s (%s)", what, mode,
          stsa_status_str(st), stsa_ctx_last_error(ctx));
    if (st == STSA_OK) {
      const double e = worst_error(&q, &k, &v, &out, lse, m, rows);
      CHECK(e < 2e-5, "%s mode %d: error %g", what, mode, e);
    }
    CHECK(tu_guard_ok(out.data), "%s: guard bytes overwritten", what);
  }
  free(lse);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  tu_free_tensor(&out);
  stsa_plan_free(plan);
}

static void test_plans(void) {
  const stsa_geometry geos[3] = {{2, 3, 5, 0, 0, STSA_TEXT_NONE},
                                 {2, 3, 5, 8, 5, STSA_TEXT_PREFIX},
                                 {3, 2, 3, 7, 4, STSA_TEXT_SUFFIX}};
  const char *names[3] = {"text none", "text prefix", "text suffix"};
  const stsa_order orders[2] = {STSA_ORDER_NATIVE, STSA_ORDER_POSITION_MAJOR};
  const int64_t rows[5] = {3, 0, 17, 3, 24}; /* unsorted, repeated: any subset */
  tu_rng rng = {7};
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  for (int gi = 0; ctx && gi < 3; gi++) {
    const stsa_geometry *g = &geos[gi];
    const int64_t N = tu_tokens(g), L = g->frames * g->height * g->width;
    /* video tokens sit after a prefix or before a suffix; text is in no cluster */
    const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
    clusters c = random_clusters(&rng, N, N, 4, 5, v0, v0 + L);
    stsa_mask *alone = make_mask(&c), *text = NULL, *with_text = NULL;
    NEW_MASK(text, stsa_mask_text(g, &text));
    NEW_MASK(with_text, stsa_mask_or(alone, text, &with_text));
    for (int oi = 0; oi < 2; oi++)
      for (int sampled = 0; sampled < 2; sampled++)
        for (int wt = 0; wt < 2; wt++) {
          char what[96];
          snprintf(what, sizeof what, "%s, order %d, %s, %s", names[gi], (int)orders[oi],
                   sampled ? "q_rows" : "all rows", wt ? "or text" : "alone");
          check_plan(ctx, what, g, &c, wt ? text : NULL, wt ? with_text : alone,
                     orders[oi], sampled ? rows : NULL, 5, &rng);
        }
    stsa_mask_free(with_text);
    stsa_mask_free(text);
    stsa_mask_free(alone);
    clusters_free(&c);
  }
  stsa_ctx_free(ctx);
}

/* Profiling's case, at a length where a per-pair plan would show: 64 sampled
 * rows of 2^17 keys with scattered labels (about as many runs as keys). */
static void test_sampled_rows_long(void) {
  const int64_t N = (int64_t)1 << 17, R = 64;
  tu_rng rng = {5};
  clusters c = random_clusters(&rng, N, N, 16, 16, 0, INT64_MAX);
  stsa_mask *m = make_mask(&c);
  int64_t rows[64];
  for (int64_t i = 0; i < R; i++)
    rows[i] = tu_rnd(&rng, 0, N - 1);
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  const stsa_mask *masks[1] = {m};
  stsa_plan_desc d = tu_plan_desc(R, N, 1, masks, NULL, STSA_PLAN_ALLOW_EMPTY_ROWS);
  d.q_rows = rows;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_OK);
  stsa_plan_stats ps = STSA_INIT(stsa_plan_stats);
  if (plan && stsa_plan_get_stats(plan, &ps) == STSA_OK) {
    const int64_t want = brute_pairs(&c, NULL, rows, R, N);
    CHECK(ps.pairs_kept == want, "long rows: pairs_kept %lld, brute force %lld",
          (long long)ps.pairs_kept, (long long)want);
  }
  stsa_plan_free(plan);
  stsa_ctx_free(ctx);
  stsa_mask_free(m);
  clusters_free(&c);
}

/* A key shard (kv_rows) with the mask alone, and lengths a plan must match. */
static void test_shard_and_lengths(void) {
  tu_rng rng = {9};
  const int64_t N = 50, K0 = 10, K1 = 35;
  clusters c = random_clusters(&rng, N, N, 3, 3, 0, INT64_MAX);
  stsa_mask *m = make_mask(&c);
  const stsa_mask *masks[1] = {m};
  int64_t shard[25];
  for (int64_t j = K0; j < K1; j++)
    shard[j - K0] = j;
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_plan_desc d = tu_plan_desc(N, K1 - K0, 1, masks, NULL, STSA_PLAN_ALLOW_EMPTY_ROWS);
  d.kv_rows = shard;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_OK);
  stsa_plan_stats ps = STSA_INIT(stsa_plan_stats);
  if (plan && stsa_plan_get_stats(plan, &ps) == STSA_OK) {
    int64_t want = 0;
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = K0; j < K1; j++)
        want += def_keep(&c, i, j);
    CHECK(ps.pairs_kept == want, "shard: pairs_kept %lld, brute force %lld",
          (long long)ps.pairs_kept, (long long)want);
  }
  stsa_plan_free(plan);
  /* a plan one token longer than the labels is refused */
  d = tu_plan_desc(N + 1, N + 1, 1, masks, NULL, STSA_PLAN_ALLOW_EMPTY_ROWS);
  plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_ERR_BAD_MASK);
  CHECK(!plan, "a refused plan was written");
  stsa_ctx_free(ctx);
  stsa_mask_free(m);
  clusters_free(&c);
}

/* ---- equality and the plan cache -------------------------------------------- */
static void test_sharing(void) {
  tu_rng rng = {3};
  const int64_t N = 45;
  clusters c = random_clusters(&rng, N, N, 3, 4, 0, INT64_MAX);
  stsa_mask *a = make_mask(&c);
  for (int64_t x = 0; x < c.qc * c.kc; x++) /* other nonzero values, same meaning */
    c.keep[x] = c.keep[x] ? (uint8_t)(c.keep[x] % 7 + 1) : 0;
  stsa_mask *b = make_mask(&c);
  c.keep[5] = !c.keep[5];
  stsa_mask *diff = make_mask(&c);
  c.keep[5] = !c.keep[5];
  c.k_label[10] = c.k_label[10] == 2 ? 1 : 2;
  stsa_mask *diff_label = make_mask(&c);
  CHECK(stsa_mask_equal(a, b), "equal contents compare unequal");
  CHECK(!stsa_mask_equal(a, diff), "different keep maps compare equal");
  CHECK(!stsa_mask_equal(a, diff_label), "different labels compare equal");

  stsa_mask *seg = NULL; /* the same arrays as segments: another kind */
  NEW_MASK(seg, stsa_mask_segments(c.q_label, N, c.k_label, N, &seg));
  CHECK(!stsa_mask_equal(diff_label, seg), "a segment mask equals a cluster mask");
  stsa_mask_free(seg);

  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  const stsa_mask *ma[1] = {a}, *mb[1] = {b}, *md[1] = {diff};
  stsa_plan_desc d = tu_plan_desc(N, N, 1, ma, NULL, STSA_PLAN_ALLOW_EMPTY_ROWS);
  stsa_plan *pa = NULL, *pb = NULL, *pd = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &pa), STSA_OK);
  d.masks = mb;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &pb), STSA_OK);
  CHECK(pa && pa == pb, "equal cluster masks gave two plans");
  d.masks = md;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &pd), STSA_OK);
  CHECK(pd && pd != pa, "a different keep map gave the cached plan");
  /* two heads with equal masks share one stored plan */
  const stsa_mask *two[2] = {a, b};
  d.masks = two;
  d.heads = 2;
  stsa_plan *p2 = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p2), STSA_OK);
  stsa_plan_stats ps = STSA_INIT(stsa_plan_stats);
  if (p2 && stsa_plan_get_stats(p2, &ps) == STSA_OK)
    CHECK(ps.distinct_masks == 1, "equal heads stored %lld plans",
          (long long)ps.distinct_masks);
  stsa_plan_free(p2);
  stsa_plan_free(pa);
  stsa_plan_free(pb);
  stsa_plan_free(pd);
  stsa_ctx_free(ctx);
  stsa_mask_free(a);
  stsa_mask_free(b);
  stsa_mask_free(diff);
  stsa_mask_free(diff_label);
  clusters_free(&c);
}

/* ---- rejected arguments ------------------------------------------------------ */
static void expect_rejected(const char *what, stsa_status want, const int32_t *ql,
                            int64_t s_q, int64_t qc, const int32_t *kl, int64_t s_kv,
                            int64_t kc, const uint8_t *keep) {
  stsa_mask *sentinel = (stsa_mask *)(uintptr_t)0x1234, *m = sentinel;
  stsa_status st = stsa_mask_clusters(ql, s_q, qc, kl, s_kv, kc, keep, &m);
  CHECK(st == want, "%s: got %s, expected %s", what, stsa_status_str(st),
        stsa_status_str(want));
  CHECK(m == sentinel, "%s: *out was written", what);
  if (st == STSA_OK)
    stsa_mask_free(m);
}

static void test_bad_args(void) {
  const int32_t ql[4] = {0, 1, -1, 2}, kl[3] = {1, -1, 0};
  const int32_t ql_low[4] = {0, 1, -2, 2}, kl_high[3] = {1, 2, 0};
  const uint8_t keep[6] = {1, 0, 1, 1, 0, 1};
  const int64_t big = (int64_t)1 << 40, c31 = (int64_t)1 << 31;
  const stsa_status NUL = STSA_ERR_NULL_ARG, PAR = STSA_ERR_BAD_PARAM,
                    MSK = STSA_ERR_BAD_MASK;
  expect_rejected("q_label NULL", NUL, NULL, 4, 3, kl, 3, 2, keep);
  expect_rejected("k_label NULL", NUL, ql, 4, 3, NULL, 3, 2, keep);
  expect_rejected("keep NULL", NUL, ql, 4, 3, kl, 3, 2, NULL);
  CHECK_STATUS(stsa_mask_clusters(ql, 4, 3, kl, 3, 2, keep, NULL), NUL);
  expect_rejected("s_q 0", PAR, ql, 0, 3, kl, 3, 2, keep);
  expect_rejected("s_kv -1", PAR, ql, 4, 3, kl, -1, 2, keep);
  expect_rejected("s_q 2^40 + 1", PAR, ql, big + 1, 3, kl, 3, 2, keep);
  expect_rejected("s_kv 2^40 + 1", PAR, ql, 4, 3, kl, big + 1, 2, keep);
  expect_rejected("q_clusters 0", PAR, ql, 4, 0, kl, 3, 2, keep);
  expect_rejected("kv_clusters -3", PAR, ql, 4, 3, kl, 3, -3, keep);
  expect_rejected("q_clusters 2^31 + 1", PAR, ql, 4, c31 + 1, kl, 3, 1, keep);
  expect_rejected("kv_clusters 2^31 + 1", PAR, ql, 4, 1, kl, 3, c31 + 1, keep);
  expect_rejected("2^31 x 2 pairs", PAR, ql, 4, c31, kl, 3, 2, keep);
  expect_rejected("2^31 x 2^31 pairs", PAR, ql, 4, c31, kl, 3, c31, keep);
  expect_rejected("q label -2", MSK, ql_low, 4, 3, kl, 3, 2, keep);
  expect_rejected("q label 2 of 2 clusters", MSK, ql, 4, 2, kl, 3, 3, keep);
  expect_rejected("k label 2 of 2 clusters", MSK, ql, 4, 3, kl_high, 3, 2, keep);

  /* and the same arrays with valid sizes pass */
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_clusters(ql, 4, 3, kl, 3, 2, keep, &m), STSA_OK);
  stsa_mask_free(m);
}

int main(void) {
  test_keep();
  test_plans();
  test_sampled_rows_long();
  test_shard_and_lengths();
  test_sharing();
  test_bad_args();
  return tu_finish("test_mask_clusters");
}
