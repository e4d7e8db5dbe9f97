/*
 * test_sparse_spans.c — PARTIAL tiles computed on their row blocks' kept
 * column ranges (kernel/tile_spans.c), which exact mode runs whenever a
 * partial tile's pattern is stored and its logits and V are finite.
 *
 * Held to, on every tiled backend:
 *   - the double-precision reference (REF applies the mask pair by pair),
 *     out and lse, for bands narrower and wider than a tile, one-sided and
 *     causal bands, and random multi-interval masks with empty rows; lengths
 *     that are not tile multiples, S_q != S_kv, D 64/80/128, f32/f16/bf16;
 *   - bitwise the whole-tile path (naive mode masks every tile whole), and
 *     one thread bitwise two;
 *   - guard bytes after every output;
 *   - NaN in V at a key of a partial tile: the whole-tile path takes that
 *     tile, NaN reaches exactly the rows that keep the key (as REF), and
 *     every other element is bitwise the clean run's.
 * And at the tile loop: with the patterns it calls qk only on the
 * (row block, panel) micro-tiles a band keeps something of, and gives the
 * bytes of the same list without them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/tile_loop.h"
#include "kernel/tile_spans.h"
#include "kernel_util.h"
#include "mask/plan.h"
#include "testutil.h"

static stsa_ctx *make_ctx(stsa_backend backend, int threads, int q_tile, int kv_tile) {
  stsa_ctx *ctx = tu_make_ctx(backend, threads, q_tile, kv_tile);
  stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 0);
  return ctx;
}

typedef struct span_case {
  const char *name;
  int64_t Sq, Skv, D;
  stsa_mask *mask; /* both heads */
  stsa_dtype dtype;
  int q_tile, kv_tile;
  int64_t nan_key; /* >= 0: V[nan_key][.] of head 1 is NaN */
} span_case;

enum { H = 2 };

static stsa_plan *build_plan(stsa_ctx *ctx, const span_case *c) {
  const stsa_mask *masks[H] = {c->mask, c->mask};
  stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                         c->Sq,
                         c->Skv,
                         H,
                         masks,
                         NULL,
                         STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,
                         0,
                         0,
                         STSA_PLAN_ALLOW_EMPTY_ROWS,
                         NULL,
                         NULL};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  return plan;
}

static stsa_status run(stsa_ctx *ctx, const stsa_plan *plan, const stsa_tensor *q,
                       const stsa_tensor *k, const stsa_tensor *v, stsa_tensor *out,
                       float *lse, stsa_sparse_mode mode) {
  stsa_sparse_opts o = {sizeof(stsa_sparse_opts), 0.0f, lse, mode, NULL, 0};
  return stsa_sparse_attention(ctx, plan, q, k, v, out, &o);
}

/* max |a - b| over finite pairs; +inf when one is NaN and the other not. */
static double diff_nan_aware(const stsa_tensor *a, const stsa_tensor *b, double *scale) {
  double worst = 0, top = 0;
  const int64_t n = a->shape[1] * a->shape[2] * a->shape[3];
  for (int64_t i = 0; i < n; i++) {
    const int64_t s = i / (a->shape[2] * a->shape[3]),
                  h = (i / a->shape[3]) % a->shape[2], d = i % a->shape[3];
    const double x = tu_load(a->data, a->dtype, tu_offset(a, 0, s, h, d)),
                 y = tu_load(b->data, b->dtype, tu_offset(b, 0, s, h, d));
    if (isnan(x) || isnan(y)) {
      worst = isnan(x) && isnan(y) ? worst : INFINITY;
      continue;
    }
    worst = fabs(x - y) > worst ? fabs(x - y) : worst;
    top = fabs(y) > top ? fabs(y) : top;
  }
  *scale = top;
  return worst;
}

/* Elements equal bit for bit, or both NaN (NaN payloads may differ). */
static int64_t elements_differing(const stsa_tensor *a, const stsa_tensor *b,
                                  int nan_any) {
  int64_t bad = 0;
  const size_t es = stsa_dtype_size(a->dtype), n = tu_span(a);
  for (size_t i = 0; i < n; i++) {
    const char *x = (const char *)a->data + i * es, *y = (const char *)b->data + i * es;
    if (memcmp(x, y, es) == 0)
      continue;
    if (nan_any && isnan(tu_load(a->data, a->dtype, i)) &&
        isnan(tu_load(b->data, b->dtype, i)))
      continue;
    bad++;
  }
  return bad;
}

static void check_case(const span_case *c) {
  tu_rng rng = {(uint64_t)(c->Sq * 131 + c->Skv * 7 + c->D + c->q_tile)};
  stsa_tensor q = tu_random_tensor(&rng, c->dtype, TU_BSHD, 1, c->Sq, H, c->D, 1);
  stsa_tensor k = tu_random_tensor(&rng, c->dtype, TU_BSHD, 1, c->Skv, H, c->D, 1);
  stsa_tensor v = tu_random_tensor(&rng, c->dtype, TU_BSHD, 1, c->Skv, H, c->D, 1);
  stsa_tensor v_nan = v;
  if (c->nan_key >= 0) {
    v_nan = tu_random_tensor(&rng, c->dtype, TU_BSHD, 1, c->Skv, H, c->D, 1);
    memcpy(v_nan.data, v.data, tu_span(&v) * stsa_dtype_size(c->dtype));
    for (int64_t d = 0; d < c->D; d++)
      tu_store(v_nan.data, c->dtype, tu_offset(&v_nan, 0, c->nan_key, 1, d), NAN);
  }
  const size_t nlse = (size_t)(H * c->Sq);
  stsa_ctx *rctx = make_ctx(STSA_BACKEND_REF, 2, c->q_tile, c->kv_tile);
  stsa_plan *plan = build_plan(rctx, c);
  stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, c->Sq, H, c->D);
  float *ref_lse = tu_guarded_alloc(nlse * sizeof(float));
  CHECK_STATUS(run(rctx, plan, &q, &k, &v_nan, &ref, ref_lse, STSA_SPARSE_EXACT),
               STSA_OK);
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    const char *bn = stsa_backend_name(backends[bi]);
    stsa_ctx *ctx = make_ctx(backends[bi], 2, c->q_tile, c->kv_tile);
    stsa_ctx *one = make_ctx(backends[bi], 1, c->q_tile, c->kv_tile);
    /* each backend's own plan: its q tiles round to its register tile */
    stsa_plan *bplan = build_plan(ctx, c);
    stsa_tensor exact = tu_sentinel_tensor(c->dtype, TU_BSHD, 1, c->Sq, H, c->D);
    stsa_tensor whole = tu_sentinel_tensor(c->dtype, TU_BSHD, 1, c->Sq, H, c->D);
    stsa_tensor single = tu_sentinel_tensor(c->dtype, TU_BSHD, 1, c->Sq, H, c->D);
    float *lse = tu_guarded_alloc(nlse * sizeof(float));
    CHECK_STATUS(run(ctx, bplan, &q, &k, &v_nan, &exact, lse, STSA_SPARSE_EXACT),
                 STSA_OK);
    CHECK_STATUS(run(ctx, bplan, &q, &k, &v_nan, &whole, NULL, STSA_SPARSE_NAIVE),
                 STSA_OK);
    CHECK_STATUS(run(one, bplan, &q, &k, &v_nan, &single, NULL, STSA_SPARSE_EXACT),
                 STSA_OK);
    double scale, err = diff_nan_aware(&exact, &ref, &scale);
    double tol = 1e-5 * (scale > 1e-3 ? scale : 1e-3);
    if (c->dtype != STSA_F32)
      tol += 0.5 * (c->dtype == STSA_F16 ? 0x1p-10 : 0x1p-7) * scale * 1.01;
    CHECK(err <= tol, "%s [%s]: err %.3g > tol %.3g", c->name, bn, err, tol);
    double lse_err = 0;
    for (size_t i = 0; i < nlse; i++) {
      const double a = lse[i], b = ref_lse[i];
      const double e = a == b || (isnan(a) && isnan(b)) ? 0 : fabs(a - b) / (1 + fabs(b));
      lse_err = isnan(e) ? INFINITY : (e > lse_err ? e : lse_err);
    }
    CHECK(lse_err < 2e-5, "%s [%s]: lse err %.3g", c->name, bn, lse_err);
    const int64_t vs_whole = elements_differing(&exact, &whole, c->nan_key >= 0),
                  vs_one = elements_differing(&exact, &single, 0);
    CHECK(vs_whole == 0, "%s [%s]: %lld elements differ from the whole-tile path",
          c->name, bn, (long long)vs_whole);
    CHECK(vs_one == 0, "%s [%s]: 1 thread differs from 2 in %lld elements", c->name, bn,
          (long long)vs_one);
    if (c->nan_key >= 0) { /* the poison reaches the rows that keep the key only */
      stsa_tensor clean = tu_sentinel_tensor(c->dtype, TU_BSHD, 1, c->Sq, H, c->D);
      CHECK_STATUS(run(ctx, bplan, &q, &k, &v, &clean, NULL, STSA_SPARSE_EXACT), STSA_OK);
      int64_t wrong = 0, reached = 0;
      for (int64_t i = 0; i < c->Sq; i++) {
        const int keeps = stsa_mask_keep(c->mask, i, c->nan_key);
        reached += keeps;
        for (int64_t h = 0; h < H; h++)
          for (int64_t d = 0; d < c->D; d++) {
            const size_t at = tu_offset(&exact, 0, i, h, d);
            const double x = tu_load(exact.data, c->dtype, at),
                         y = tu_load(clean.data, c->dtype, at);
            wrong += h == 1 && keeps ? !isnan(x) : memcmp(&x, &y, sizeof x) != 0;
          }
      }
      CHECK(reached > 0 && reached < c->Sq, "%s: the NaN key is kept by some rows only",
            c->name);
      CHECK(wrong == 0, "%s [%s]: %lld elements wrong around a NaN in V", c->name, bn,
            (long long)wrong);
      CHECK(tu_guard_ok(clean.data), "%s: guard bytes", c->name);
      tu_free_tensor(&clean);
    }
    CHECK(tu_guard_ok(exact.data) && tu_guard_ok(whole.data) &&
              tu_guard_ok(single.data) && tu_guard_ok(lse),
          "%s [%s]: guard bytes", c->name, bn);
    tu_guarded_free(lse);
    tu_free_tensor(&exact), tu_free_tensor(&whole), tu_free_tensor(&single);
    stsa_plan_free(bplan);
    stsa_ctx_free(one);
    stsa_ctx_free(ctx);
  }
  tu_guarded_free(ref_lse);
  tu_free_tensor(&ref);
  stsa_plan_free(plan);
  stsa_ctx_free(rctx);
  if (c->nan_key >= 0)
    tu_free_tensor(&v_nan);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
}

/* Rows of 0..3 random intervals, some rows empty: spans with gaps, row
 * blocks whose rows keep nothing of a tile. */
static stsa_mask *random_intervals(int64_t Sq, int64_t Skv, uint64_t seed) {
  tu_rng rng = {seed};
  uint8_t *keep = calloc((size_t)(Sq * Skv), 1);
  for (int64_t i = 0; i < Sq; i++) {
    const int n = (int)(tu_rng_next(&rng) % 4);
    for (int j = 0; j < n; j++) {
      const int64_t lo = (int64_t)(tu_rng_next(&rng) % (uint64_t)Skv),
                    len = 1 + (int64_t)(tu_rng_next(&rng) % 90);
      for (int64_t c = lo; c < lo + len && c < Skv; c++)
        keep[i * Skv + c] = 1;
    }
  }
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_dense(keep, Sq, Skv, &m), STSA_OK);
  free(keep);
  return m;
}

static void test_against_reference(void) {
  static const int64_t dims[] = {64, 80, 128};
  static const stsa_dtype dtypes[] = {STSA_F32, STSA_F16, STSA_BF16};
  stsa_mask *narrow, *wide, *one_sided, *causal;
  stsa_mask_local(9, 9, &narrow);     /* thinner than a tile: no FULL tile */
  stsa_mask_local(150, 150, &wide);   /* FULL tiles between two partial edges */
  stsa_mask_local(70, 0, &one_sided); /* a triangle per partial tile */
  stsa_mask_causal(0, &causal);
  stsa_mask *random = random_intervals(333, 517, 5);
  struct {
    const char *name;
    int64_t Sq, Skv;
    stsa_mask *m;
    int q_tile, kv_tile;
  } shapes[] = {
      {"band 9, 997", 997, 997, narrow, 48, 32},
      {"band 150, 1025 x 1000", 1025, 1000, wide, 30, 64},
      {"band 70/0, 701", 701, 701, one_sided, 42, 48},
      {"causal 611", 611, 611, causal, 54, 80},
      {"random intervals 333 x 517", 333, 517, random, 36, 64},
      {"band 150, 1000, default-like tiles", 1000, 1000, wide, 192, 256},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (size_t di = 0; di < 3; di++)
      for (size_t ti = 0; ti < 3; ti++) {
        /* every shape at D 64 and f32; the dims and dtypes on the first two */
        if (s >= 2 && (di || ti))
          continue;
        span_case c = {shapes[s].name,   shapes[s].Sq,      shapes[s].Skv,
                       dims[di],         shapes[s].m,       dtypes[ti],
                       shapes[s].q_tile, shapes[s].kv_tile, -1};
        check_case(&c);
      }
  /* a NaN in V of keys at a partial tile's edge and inside a FULL tile */
  span_case c1 = {"band 150 NaN V", 1000, 1000, 64, wide, STSA_F32, 48, 64, 517};
  check_case(&c1);
  span_case c2 = {"band 9 NaN V (bf16)", 997, 997, 80, narrow, STSA_BF16, 48, 32, 400};
  check_case(&c2);
  stsa_mask_free(narrow), stsa_mask_free(wide), stsa_mask_free(one_sided);
  stsa_mask_free(causal), stsa_mask_free(random);
}

/* ---- the tile loop: which micro-tiles qk computes ------------------------ */
static const stsa_kernels *inner;
static int64_t qk_calls;

static void counting_qk(const float *q, int D, const float *panel, float *s, int ld_s,
                        float *rowmax) {
  qk_calls++;
  inner->qk(q, D, panel, s, ld_s, rowmax);
}

/* A two-panel call computes two micro-tiles. */
static void counting_qk2(const float *q, int D, const float *panel0, const float *panel1,
                         float *s0, float *s1, int ld_s, float *rowmax0, float *rowmax1) {
  qk_calls += 2;
  inner->qk2(q, D, panel0, panel1, s0, s1, ld_s, rowmax0, rowmax1);
}

/* The list's mask for the whole-tile path: q tile qt's stored patterns. */
typedef struct part_ctx {
  const stsa_block_sparse *bs;
  int64_t qt;
} part_ctx;

static void apply_part_pattern(const void *ctx, int64_t entry, int64_t q0, int r0,
                               int rows, int64_t k0, int n, float *s, int ld_s) {
  (void)q0, (void)k0;
  const part_ctx *p = ctx;
  const int64_t e = p->bs->tile_ptr[p->qt] + entry;
  stsa_apply_tile_pattern(&p->bs->pattern_list[p->bs->pattern[e]], r0, rows, n, s, ld_s);
}

static void test_micro_tiles(void) {
  const int64_t S = 613, D = 64, w = 40;
  const int q_tile = 48, kv_tile = 64;
  tu_rng rng = {99};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, D, 1);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, D, 1);
  stsa_tensor v = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, S, 1, D, 1);
  stsa_tensor o_span = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, 1, D);
  stsa_tensor o_whole = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, 1, D);
  stsa_mask *band;
  stsa_mask_local(w, w, &band);
  stsa_backend backends[TU_MAX_BACKENDS];
  for (int bi = 0, nb = tu_tiled_backends(backends); bi < nb; bi++) {
    stsa_ctx *ctx = make_ctx(backends[bi], 1, q_tile, kv_tile);
    const stsa_mask *masks[1] = {band};
    stsa_plan_desc desc = {
        sizeof(stsa_plan_desc), S, S, 1, masks, NULL, STSA_ORDER_NATIVE,
        STSA_ORDER_NATIVE,      0, 0, 0, NULL,  NULL};
    stsa_plan *plan = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
    const stsa_block_sparse *bs = &plan->parts[0].bs;
    const stsa_backend_choice choice = tu_choose_backend(backends[bi]);
    stsa_kernels counted = choice.kern;
    inner = &choice.kern;
    counted.qk = counting_qk;
    if (counted.qk2)
      counted.qk2 = counting_qk2;
    counted.half = NULL; /* every block through the counted kernels */
    const int mr = counted.mr, nr = counted.nr;
    stsa_attn_problem pb_span, pb_whole;
    stsa_problem_init(&pb_span, &q, &k, &v, &o_span, NULL, q_tile, kv_tile, &counted);
    stsa_problem_init(&pb_whole, &q, &k, &v, &o_whole, NULL, q_tile, kv_tile, &counted);
    float *mem = aligned_alloc(64, stsa_kv_packed_floats(&pb_span) * sizeof(float));
    stsa_kv_packed kv = stsa_kv_packed_at(&pb_span, mem);
    for (int64_t t = 0; t < stsa_kv_tiles(&pb_span); t++)
      stsa_pack_kv_tile(&pb_span, 0, 0, t, NULL, &kv);
    stsa_tile_scratch sc;
    CHECK(stsa_tile_scratch_alloc(&pb_span, &sc) == 0, "scratch");
    int64_t span_calls = 0, whole_calls = 0, touched = 0;
    for (int64_t qt = 0; qt < bs->q_tiles; qt++) {
      const int64_t e0 = bs->tile_ptr[qt], e1 = bs->tile_ptr[qt + 1];
      const part_ctx pctx = {bs, qt};
      stsa_kv_list list = {bs->kv_tile + e0,
                           bs->kind + e0,
                           (int32_t)(e1 - e0),
                           apply_part_pattern,
                           &pctx,
                           NULL,
                           NULL};
      stsa_tile_layout lay = {NULL, NULL, NULL, bs->pattern + e0, bs->pattern_list};
      qk_calls = 0;
      stsa_run_q_tile_in(&pb_span, &kv, 0, 0, qt, &list, &lay, &sc);
      span_calls += qk_calls;
      qk_calls = 0;
      stsa_run_q_tile_in(&pb_whole, &kv, 0, 0, qt, &list, NULL, &sc);
      whole_calls += qk_calls;
      /* the micro-tiles of the visited tiles a row of the block keeps a pair of */
      const int64_t q0 = qt * q_tile, rows = S - q0 < q_tile ? S - q0 : q_tile;
      for (int64_t e = e0; e < e1; e++)
        for (int64_t r0 = 0; r0 < rows; r0 += mr)
          for (int64_t c0 = 0; c0 < kv_tile; c0 += nr) {
            int any = 0;
            for (int64_t r = r0; r < r0 + mr && r < rows && !any; r++)
              for (int64_t c = c0; c < c0 + nr && !any; c++) {
                const int64_t key = bs->kv_tile[e] * (int64_t)kv_tile + c;
                any = key < S && stsa_mask_keep(band, q0 + r, key);
              }
            touched += any;
          }
    }
    CHECK(span_calls == touched,
          "[%s] qk and qk2 ran on %lld micro-tiles, the band touches %lld",
          stsa_backend_name(backends[bi]), (long long)span_calls, (long long)touched);
    CHECK(span_calls < whole_calls * 3 / 4, "[%s] %lld qk calls, whole tiles %lld",
          stsa_backend_name(backends[bi]), (long long)span_calls, (long long)whole_calls);
    CHECK(tu_same_bytes(&o_span, &o_whole), "[%s] spans differ from whole tiles",
          stsa_backend_name(backends[bi]));
    stsa_tile_scratch_free(&sc);
    free(mem);
    stsa_plan_free(plan);
    stsa_ctx_free(ctx);
  }
  stsa_mask_free(band);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
  tu_free_tensor(&o_span), tu_free_tensor(&o_whole);
}

int main(void) {
  test_against_reference();
  test_micro_tiles();
  return tu_finish("test_sparse_spans");
}
