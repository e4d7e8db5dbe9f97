/*
 * test_error_bound.c — the error budget's bound (svg/bound.h, svg/strata.h)
 * and what the session reports with it.
 *
 *  - the bound of a census (every row read) is the exact relative error;
 *    no error gives 0; an unsampled stratum counts as the worst sampled one;
 *  - coverage: over many draws from a fixed population of heavy-tailed row
 *    errors (a few rows of a stratum hold most of its error), the bound is
 *    at least the population's true error in >= 95% of the draws;
 *  - SVG2's strata: the rows drawn are distinct, ascending, of the stratum
 *    their group names, and every stratum gets min(size, 2) of them; the
 *    geometric strata of a score; on a rare tail (6 of 1,680 rows hold
 *    half the error) with a noisy estimate of each row's error, strata of
 *    equal runs under-cover and geometric strata on the estimate cover;
 *  - SVG2's automatic cluster counts keep a floor per frame;
 *  - the session: on heads whose error sits in few rows (moving objects at
 *    a user's first small dump, 5 x 12 x 16 tokens, the case),
 *    SVG2 and SVG under budgets 0.05 and 0.1 report for every head and step
 *    an error at least its true relative L2 error, measured over every row
 *    against dense attention in double (tests/attention_oracle.h). The
 *    estimate of a few uniform rows read 0.003 where the error was 0.16;
 *  - SVG2's bound deferred to the call's own output rows (a warm call whose
 *    heads met the budget at the last one) equals the profiled one of the
 *    same candidate, and a head past the budget runs again with its
 *    ladder's choice.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_oracle.h"
#include "svg/bound.h"
#include "svg/splitmix.h"
#include "svg/strata.h"
#include "svg/svg2.h"
#include "svg/svg2_internal.h"
#include "testutil.h"

#define EXPECT(cond) CHECK(cond, "%s", #cond)

static double uniform(uint64_t *s) {
  return ((double)(stsa_splitmix64(s) >> 11) + 0.5) * 0x1.0p-53;
}

static void test_census_and_edges(void) {
  enum { R = 6, G = 3 };
  const int64_t group[R] = {0, 0, 1, 1, 2, 2}, pop[G] = {2, 2, 2};
  const double err[R] = {1, 3, 0, 0, 2, 2}, energy[R] = {10, 10, 20, 20, 5, 5};
  double scratch[5 * G], point = -1;
  const stsa_err_sample s = {R, group, pop, G};
  const double b = stsa_err_bound(&s, err, energy, scratch, &point);
  const double exact = sqrt(8.0 / 70.0);
  EXPECT(fabs(b - exact) < 1e-12 && fabs(point - exact) < 1e-12);
  const double zero[R] = {0};
  EXPECT(stsa_err_bound(&s, zero, energy, scratch, NULL) == 0.0);
  /* stratum 2 unsampled (rows 0-3 only): it holds the worst mean error (2 per
   * row) and the least mean energy (10) of the sampled ones */
  const stsa_err_sample part = {4, group, pop, G};
  stsa_err_bound(&part, err, energy, scratch, &point);
  EXPECT(fabs(point - sqrt((4.0 + 0.0 + 2 * 2.0) / (20.0 + 40.0 + 2 * 10.0))) < 1e-12);
}

/* A population of G strata of M rows whose errors are mostly tiny, with a
 * few large ones per stratum (a small object inside a cluster); draws of n
 * rows a stratum. */
static void test_coverage(void) {
  enum { G = 24, M = 60, n = 2, TRIALS = 2000 };
  static double e[G * M], E[G * M];
  uint64_t s = 12345;
  double te = 0, tE = 0;
  for (int i = 0; i < G * M; i++) {
    const double u = uniform(&s);
    e[i] = u < 0.08 ? 1.0 + uniform(&s) : 1e-3 * uniform(&s);
    E[i] = 1.0 + 0.3 * uniform(&s);
    te += e[i];
    tE += E[i];
  }
  const double truth = sqrt(te / tE);
  int64_t group[G * n], pop[G];
  double err[G * n], energy[G * n], scratch[5 * G];
  for (int g = 0; g < G; g++)
    pop[g] = M;
  int covered = 0;
  for (int t = 0; t < TRIALS; t++) {
    for (int g = 0; g < G; g++) {
      int a = (int)(uniform(&s) * M), b = (int)(uniform(&s) * (M - 1));
      b += b >= a; /* distinct */
      const int rows[n] = {a, b};
      for (int j = 0; j < n; j++) {
        group[g * n + j] = g;
        err[g * n + j] = e[g * M + rows[j]];
        energy[g * n + j] = E[g * M + rows[j]];
      }
    }
    const stsa_err_sample smp = {G * n, group, pop, G};
    covered += stsa_err_bound(&smp, err, energy, scratch, NULL) >= truth;
  }
  if (covered < TRIALS * 95 / 100)
    printf("coverage %d of %d draws\n", covered, TRIALS);
  fflush(stdout);
  EXPECT(covered >= TRIALS * 95 / 100);
}

/* Checks a draw: R distinct ascending rows in [v0, v0 + L), each in its
 * stratum, the strata's populations their sizes, and every non-empty
 * stratum holding min(size, 2) rows or more. */
static void check_draw(const int32_t *labels, int64_t L, int64_t v0, const int64_t *sizes,
                       int64_t G, int64_t R, const stsa_strata *d) {
  int64_t per[64] = {0};
  EXPECT(d->groups == G && G <= 64);
  for (int64_t g = 0; g < G; g++)
    EXPECT(d->pop[g] == sizes[g]);
  for (int64_t r = 0; r < R; r++) {
    EXPECT(d->rows[r] >= v0 && d->rows[r] < v0 + L);
    EXPECT(r == 0 || d->rows[r] > d->rows[r - 1]); /* ascending, so distinct */
    EXPECT(labels[d->rows[r] - v0] == d->group[r]);
    per[d->group[r]]++;
  }
  for (int64_t g = 0; g < G; g++)
    EXPECT(per[g] >= (sizes[g] < 2 ? sizes[g] : 2) && per[g] <= sizes[g]);
}

static void test_strata_draw(void) {
  enum { L = 500, QC = 7, R = 40 };
  int32_t labels[L];
  int64_t sizes[QC] = {0}, rows[R], group[R], pop[QC];
  uint64_t s = 99;
  for (int i = 0; i < L; i++) { /* cluster 6 has one member, cluster 5 none */
    labels[i] = i == 17 ? 6 : (int32_t)(stsa_splitmix64(&s) % 5);
    sizes[labels[i]]++;
  }
  stsa_strata d = {rows, group, pop, 0};
  EXPECT(stsa_strata_draw(labels, L, 100, QC, sizes, R, 5, &d) == 0);
  check_draw(labels, L, 100, sizes, QC, R, &d);
  EXPECT(stsa_strata_rows(64, 30, 960, 4092) == 64);
  EXPECT(stsa_strata_rows(64, 100, 960, 4092) == 200);
  EXPECT(stsa_strata_rows(64, 100, 150, 4092) == 150);
}

/* The rows a call draws follow its density. */
static void test_call_rows(void) {
  /* 1.5% of a call at density 0.1 over 75,600 tokens (Wan 720p): 114 rows;
   * at least the sampled rows (Wan 480p's 32,760 at 0.1: 50 of them), at
   * most the session's, even */
  EXPECT(stsa_strata_call_rows(600, 64, 0.1, 75600) == 114);
  EXPECT(stsa_strata_call_rows(260, 64, 0.1, 32760) == 64);
  EXPECT(stsa_strata_call_rows(260, 64, 0.01, 32760) == 64);
  EXPECT(stsa_strata_call_rows(260, 64, 1.0, 32760) == 260);
  EXPECT(stsa_strata_call_rows(260, 1, 0.0, 32760) == 2);
  EXPECT(stsa_strata_call_rows(600, 64, 0.105, 75600) == 120);
  EXPECT(stsa_strata_call_rows(600, 1, 0.1, 32760) == 50);
}

/* Geometric strata: labels in range, sizes their members, the largest
 * score in stratum 0, scores below STSA_STRATA_DECADES decades of it (and
 * zeros) in the last one, a split row G strata further. */
static void test_strata_geometric(void) {
  enum { L = 9, G = 4 };
  const double score[L] = {1.0, 0.5, 0.09, 0.011, 0.0009, 0, 0.2, 1.0, 0.5};
  const uint8_t split[L] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
  double log_score[L];
  int32_t label[L];
  int64_t size[2 * G], total = 0;
  for (int i = 0; i < L; i++)
    log_score[i] = log(score[i]); /* log(0) = -inf */
  stsa_strata_geometric(log_score, split, L, G, label, size);
  /* 3 decades in G - 1 = 3 steps of 10x: [1, 0.1), [0.1, 0.01), [0.01, 0.001) */
  const int32_t want[L] = {0, 0, 1, 1, 3, 3, 0, 4, 4};
  for (int i = 0; i < L; i++)
    EXPECT(label[i] == want[i]);
  for (int g = 0; g < 2 * G; g++)
    total += size[g];
  EXPECT(total == L && size[0] == 3 && size[4] == 2 && size[2] == 0);
  for (int i = 0; i < L; i++)
    log_score[i] = -INFINITY;
  stsa_strata_geometric(log_score, NULL, L, G, label, size);
  EXPECT(size[G - 1] == L);
}

/* SVG2's own-key census over the ladder: the queries whose own key's
 * cluster the first candidate drops are too many to read whole (14 > R /
 * 4), those the second still drops are not (4): those are read whole, a
 * stratum each, the rest that lose it split off; with the first
 * candidate's census alone (n = 1) none is read whole. A census that fits
 * is read whole at the first candidate, as before the ladder's. */
static void test_own_key_ladder(void) {
  enum { L = 40, R = 16, G = R / 4 };
  double lean[L];
  uint8_t own[L], split[L];
  int32_t label[L];
  int64_t size[2 * G + 1];
  for (int i = 0; i < L; i++) {
    lean[i] = -0.3 * i;
    own[i] = i < 10 ? 1 : i < 13 ? 2 : i == 13 ? 3 : 0;
  }
  int64_t n = stsa_svg2_own_key_strata(lean, own, 3, L, R, G, label, size, split);
  int64_t total = 0, whole = 0, bad = 0;
  for (int64_t g = 0; g < n; g++)
    total += size[g];
  for (int i = 0; i < L; i++) {
    const int single = label[i] >= G && size[label[i]] == 1;
    whole += single;
    bad += single != (i >= 10 && i < 14) ||
           (i < 10 && (label[i] < G / 2 || label[i] >= G)) ||
           (i >= 14 && label[i] >= G / 2);
  }
  CHECK(n == G + 4 && total == L && whole == 4 && bad == 0,
        "ladder census: %lld strata, %lld rows read whole, %lld misplaced", (long long)n,
        (long long)whole, (long long)bad);
  for (int i = 0; i < L; i++)
    own[i] = own[i] > 0;
  n = stsa_svg2_own_key_strata(lean, own, 1, L, R, G, label, size, split);
  whole = 0;
  for (int i = 0; i < L; i++)
    whole += label[i] >= G && size[label[i]] == 1;
  CHECK(n == 2 * G && whole == 0, "first census alone: %lld strata, %lld read whole",
        (long long)n, (long long)whole);
  for (int i = 0; i < L; i++)
    own[i] = i < 3 ? 2 : 0;
  n = stsa_svg2_own_key_strata(lean, own, 3, L, R, G, label, size, split);
  CHECK(n == G + 3 && size[G] == 1 && label[0] == G && label[2] == G + 2,
        "a census that fits: %lld strata", (long long)n);
}

/* Bound coverage of a head whose error sits in 6 rows of 1,680 (half of
 * it: a few queries that lose keys their cluster keeps), R = 64 rows.
 * Each row's score, its estimated dropped mass, is the square root of its
 * error up to a lognormal factor (sigma 0.7, about 2x either way): a
 * row's error goes as the square of the mass it loses. Strata of equal
 * runs of the rows (what the draw had without a score) miss the 6 rows in
 * most draws and under-read there; geometric strata on the score hold the
 * bound above the true error in >= 95% of the draws. */
static double tail_bound(const double *e, const double *E, const int32_t *label,
                         const int64_t *size, int64_t L, int64_t G, int64_t R,
                         uint64_t seed) {
  int64_t rows[64], group[64], pop[64];
  double err[64], energy[64], scratch[5 * 64];
  stsa_strata d = {rows, group, pop, 0};
  EXPECT(stsa_strata_draw(label, L, 0, G, size, R, seed, &d) == 0);
  for (int64_t r = 0; r < R; r++) {
    err[r] = e[rows[r]];
    energy[r] = E[rows[r]];
  }
  const stsa_err_sample smp = {R, group, pop, d.groups};
  return stsa_err_bound(&smp, err, energy, scratch, NULL);
}

static void test_rare_tail_coverage(void) {
  enum { L = 1680, R = 64, TAIL = 6, TRIALS = 400 };
  static double e[L], E[L], score[L]; /* score: its log */
  static int32_t runs[L], geo[L];
  int64_t run_size[R / 2] = {0}, geo_size[R / 2];
  uint64_t s = 2718;
  double te = 0, tE = 0;
  for (int i = 0; i < L; i++) {
    const double u = uniform(&s);
    e[i] = -0.02 * log(uniform(&s)); /* exponential background, mean 0.02 */
    if (i % (L / TAIL) == 101)
      e[i] = 5.6; /* the 6 rows: about half the error */
    E[i] = 1.0 + 0.3 * u;
    const double z = sqrt(-2 * log(uniform(&s))) * cos(6.283185307179586 * uniform(&s));
    score[i] = 0.5 * log(e[i]) + 0.7 * z; /* the log of sqrt(e) x lognormal */
    te += e[i];
    tE += E[i];
    runs[i] = (int32_t)(i * (R / 2) / L);
    run_size[runs[i]]++;
  }
  const double truth = sqrt(te / tE);
  stsa_strata_geometric(score, NULL, L, R / 4, geo, geo_size);
  int by_runs = 0, by_score = 0;
  for (uint64_t t = 1; t <= TRIALS; t++) {
    by_runs += tail_bound(e, E, runs, run_size, L, R / 2, R, t) >= truth;
    by_score += tail_bound(e, E, geo, geo_size, L, R / 2, R, t) >= truth;
  }
  printf("rare tail: bound >= truth in %d (equal runs) and %d (geometric) of %d draws\n",
         by_runs, by_score, TRIALS);
  EXPECT(by_runs < TRIALS / 2); /* the population defeats the old strata */
  EXPECT(by_score >= TRIALS * 95 / 100);
}

/* SVG2's automatic cluster counts: at least 6 query and 20 key clusters
 * a frame on small inputs (at most one a cluster per 8 tokens), the
 * published scaling where it gives more (Wan 480p: 130 / 433). */
static void test_cluster_floor(void) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  int64_t qc = 0, kc = 0;
  c.geometry = (stsa_geometry){5, 12, 16, 0, 0, STSA_TEXT_NONE};
  stsa_svg2_clusters(&c, &qc, &kc);
  EXPECT(qc == 30 && kc == 100);
  c.geometry =
      (stsa_geometry){4, 4, 4, 0, 0, STSA_TEXT_NONE}; /* 64 tokens: 8 a cluster */
  stsa_svg2_clusters(&c, &qc, &kc);
  EXPECT(qc == 8 && kc == 8);
  c.geometry = (stsa_geometry){21, 30, 52, 0, 0, STSA_TEXT_NONE};
  stsa_svg2_clusters(&c, &qc, &kc);
  EXPECT(qc == 130 && kc == 433);
  c.svg2.q_clusters = 3; /* explicit counts stand */
  stsa_svg2_clusters(&c, &qc, &kc);
  EXPECT(qc == 3 && kc == 433);
}

/* Relative L2 error of head h of out ([1, N, H, D] f32) against ref (the
 * oracle's [H][N][D] in double). */
static double head_error(const stsa_tensor *out, const double *ref, int64_t h) {
  const int64_t N = out->shape[1], H = out->shape[2], D = out->shape[3];
  const float *o = out->data;
  double diff = 0, energy = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) {
      const double r = ref[(h * N + n) * D + d], x = o[(n * H + h) * D + d];
      diff += (x - r) * (x - r);
      energy += r * r;
    }
  return sqrt(diff / energy);
}

/* The small dump (a user's first, 5 x 12 x 16 tokens) of H heads of one
 * kind, its output tensor, and its dense reference in double. */
typedef struct small_dump {
  stsa_ctx *ctx;
  stsa_tensor q, k, v, o;
  double *ref; /* [H][N][D] */
} small_dump;

static small_dump small_dump_make(const stsa_geometry *g, int64_t H, int64_t D,
                                  stsa_head_kind kind, uint64_t seed) {
  enum { MAX_HEADS = 8 };
  const int64_t N = stsa_geometry_tokens(g);
  small_dump d = {.ctx = NULL};
  CHECK_STATUS(stsa_ctx_create(&d.ctx), STSA_OK);
  stsa_ctx_set(d.ctx, STSA_PARAM_THREADS, 2);
  d.q = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  d.k = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  d.v = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  d.o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  stsa_head_kind kinds[MAX_HEADS];
  for (int64_t h = 0; h < H && h < MAX_HEADS; h++)
    kinds[h] = kind;
  stsa_workload_desc wd = {sizeof wd, *g, 1, H, D, seed, kinds};
  CHECK_STATUS(stsa_workload_generate(&wd, &d.q, &d.k, &d.v, NULL), STSA_OK);
  d.ref = malloc(sizeof(double) * (size_t)(N * H * D));
  double *lse = malloc(sizeof(double) * (size_t)(N * H));
  tu_oracle_attention(&d.q, &d.k, &d.v, NULL, 1.0 / sqrt((double)D), d.ref, lse);
  free(lse);
  return d;
}

static void small_dump_free(small_dump *d) {
  free(d->ref);
  tu_free_tensor(&d->q);
  tu_free_tensor(&d->k);
  tu_free_tensor(&d->v);
  tu_free_tensor(&d->o);
  stsa_ctx_free(d->ctx);
}

/* A session of method `method` on the small dump, under `budget`. */
static stsa_svg *small_session_at(stsa_ctx *ctx, const stsa_geometry *g, int64_t H,
                                  int64_t D, int method, double budget, uint64_t seed,
                                  double density) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = *g;
  cfg.heads = H;
  cfg.head_dim = D;
  cfg.density = density;
  const int64_t L = stsa_geometry_tokens(g);
  cfg.sample_rows = L < 64 ? L : 64; /* at most the video tokens */
  cfg.sink_frames = 1;
  cfg.seed = seed;
  cfg.method = method;
  cfg.svg2.top_p = 0.9;
  cfg.svg2.min_kv_fraction = 0.1;
  cfg.max_rel_error = budget;
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  return svg;
}

static stsa_svg *small_session(stsa_ctx *ctx, const stsa_geometry *g, int64_t H,
                               int64_t D, int method, double budget, uint64_t seed) {
  return small_session_at(ctx, g, H, D, method, budget, seed, 0.3);
}

static void test_session(int method, stsa_head_kind kind) {
  const stsa_geometry g = {5, 12, 16, 0, 0, STSA_TEXT_NONE};
  enum { H = 4, D = 64, STEPS = 4 };
  small_dump d = small_dump_make(&g, H, D, kind, 1008);
  stsa_ctx *ctx = d.ctx;
  const double budgets[2] = {0.05, 0.1};
  int calls = 0, covered = 0;
  for (int bi = 0; bi < 2; bi++) {
    stsa_svg *svg = small_session(ctx, &g, H, D, method, budgets[bi], 1008);
    float est[H];
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    rep.est_error = est;
    for (int64_t step = 0; step < STEPS; step++) {
      CHECK_STATUS(stsa_svg_attention(svg, 0, step, &d.q, &d.k, &d.v, &d.o, &rep),
                   STSA_OK);
      for (int64_t h = 0; h < H; h++) {
        const double truth = head_error(&d.o, d.ref, h);
        /* f32 rounding (dense heads report 0) */
        const double slack = 1e-3 * truth + 1e-5;
        calls++;
        covered += est[h] + slack >= truth;
        /* a bound at 99% may miss, never by much; the budget holds */
        CHECK(est[h] + slack >= 0.75 * truth && truth <= 1.5 * budgets[bi],
              "%s budget %g step %lld head %lld: bound %.4g, true %.4g",
              stsa_svg_method_name(method), budgets[bi], (long long)step, (long long)h,
              est[h], truth);
      }
    }
    stsa_svg_free(svg);
  }
  CHECK(covered >= calls * 9 / 10, "%s: the bound covered %d of %d heads",
        stsa_svg_method_name(method), covered, calls);
  small_dump_free(&d);
}

/* A copy of t in dtype. */
static stsa_tensor cast_tensor(const stsa_tensor *t, stsa_dtype dtype) {
  const int64_t *n = t->shape;
  stsa_tensor c = tu_sentinel_tensor(dtype, TU_BSHD, n[0], n[1], n[2], n[3]);
  for (int64_t s = 0; s < n[1]; s++)
    for (int64_t h = 0; h < n[2]; h++)
      for (int64_t j = 0; j < n[3]; j++)
        tu_store(c.data, dtype, tu_offset(&c, 0, s, h, j),
                 tu_load(t->data, t->dtype, tu_offset(t, 0, s, h, j)));
  return c;
}

/* A warm call reads its queries' leans while k-means gathers q
 * (svg2_cluster.c): for a bf16 q, head h's query i leans min(0, at[c] +
 * q_i . tilt[c]) under the layer's last tilt (tilt_valid) at the query's
 * last label c; a head without a last tilt, a cold call, and an f32 q that
 * k-means reads in place leave them to the draw (lean_ready 0). */
static void test_gather_leans(void) {
  const stsa_geometry g = {3, 6, 8, 0, 0, STSA_TEXT_NONE};
  enum { H = 2, D = 64 };
  small_dump d = small_dump_make(&g, H, D, STSA_HEAD_SEMANTIC, 77);
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = g;
  cfg.heads = H;
  cfg.head_dim = D;
  cfg.sample_rows = 16;
  stsa_svg2 *s = NULL;
  CHECK_STATUS(stsa_svg2_create(&cfg, &s), STSA_OK);
  stsa_geo geo;
  stsa_geo_init(&geo, &g);
  const int64_t L = s->L, QC = s->QC;
  uint64_t rng = 5;
  for (int bf16 = 0; bf16 < 2; bf16++) {
    stsa_tensor q = cast_tensor(&d.q, bf16 ? STSA_BF16 : STSA_F32),
                k = cast_tensor(&d.k, bf16 ? STSA_BF16 : STSA_F32);
    call_work w;
    EXPECT(stsa_svg2_work_alloc(&w, s, L, 2) == 0);
    w.lean = malloc(sizeof(double) * (size_t)(H * L));
    w.lean_ready = calloc(H, 1);
    layer_state *ls = stsa_svg2_layer_for(s, bf16, 1);
    ls->tilt = malloc(sizeof(float) * (size_t)(H * QC * D));
    ls->tilt_at = malloc(sizeof(double) * (size_t)(H * QC));
    ls->tilt_valid = calloc(H, 1);
    for (int64_t i = 0; i < H * QC * D; i++)
      ls->tilt[i] = (float)(uniform(&rng) - 0.5);
    for (int64_t i = 0; i < H * QC; i++)
      ls->tilt_at[i] = 4 * uniform(&rng) - 3; /* some queries lean past 0 */
    ls->tilt_valid[0] = 1;                    /* head 1 has no last tilt */
    CHECK_STATUS(
        stsa_svg2_cluster_heads(d.ctx, s, &cfg, &w, &geo, &q, &k, 0, ls, 0, bf16, 0),
        STSA_OK);
    EXPECT(!w.lean_ready[0] && !w.lean_ready[1]); /* cold */
    int32_t *last = malloc(sizeof(int32_t) * (size_t)L);
    memcpy(last, ls->lq, sizeof(int32_t) * (size_t)L);
    CHECK_STATUS(
        stsa_svg2_cluster_heads(d.ctx, s, &cfg, &w, &geo, &q, &k, 0, ls, 1, bf16, 0),
        STSA_OK);
    CHECK(w.lean_ready[0] == bf16 && !w.lean_ready[1], "bf16 %d: leant %d %d", bf16,
          w.lean_ready[0], w.lean_ready[1]);
    double worst = 0;
    int past = 0;
    for (int64_t i = 0; bf16 && i < L; i++) {
      const int32_t c = last[i];
      double z = ls->tilt_at[c];
      for (int64_t j = 0; j < D; j++)
        z += tu_load(q.data, q.dtype, tu_offset(&q, 0, i, 0, j)) *
             (double)ls->tilt[c * D + j];
      past += z > 0;
      const double want = z < 0 ? z : 0, e = fabs(w.lean[i] - want);
      worst = e > worst ? e : worst;
    }
    CHECK(worst < 1e-4 && (!bf16 || (past > 0 && past < L)),
          "bf16 %d: leans off by %.3g (%d of %lld past 0)", bf16, worst, past,
          (long long)L);
    free(last);
    stsa_svg2_work_free(&w);
    tu_free_tensor(&q);
    tu_free_tensor(&k);
  }
  stsa_svg2_free(s);
  small_dump_free(&d);
}

/* SVG2 under a budget bounds each head on the call's own output rows, after
 * the run (svg2.h, stsa_svg2_settle):
 *  - the bound is the one the profiling pass takes of the same candidate on
 *    the same rows (method auto's SVG2 candidate, which profiles it before
 *    the run), at svg2's 99.5% in place of auto's 99%: both compare the
 *    candidate's rows with the same dense rows;
 *  - a head whose bound misses the budget climbs its ladder and runs again:
 *    at a budget no candidate meets, every head ends raised or dense and
 *    its output is within the budget (not the first candidate's). */
static void test_settle(void) {
  const stsa_geometry g = {5, 12, 16, 0, 0, STSA_TEXT_NONE};
  enum { H = 4, D = 64 };
  small_dump d = small_dump_make(&g, H, D, STSA_HEAD_SEMANTIC, 1009);
  stsa_ctx *ctx = d.ctx;

  /* a budget every first candidate meets: both methods bound candidate 0 */
  float est[H], cand[H * STSA_AUTO_CANDIDATE_COUNT_];
  uint8_t action[H];
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.est_error = est;
  rep.budget = action;
  /* step 0 (cold) bounds before the run; its heads all met the budget, so
   * step 1 (warm) defers its bound to the output */
  stsa_svg *svg2 = small_session(ctx, &g, H, D, STSA_SVG_METHOD_SVG2, 1.0, 1009);
  CHECK_STATUS(stsa_svg_attention(svg2, 0, 0, &d.q, &d.k, &d.v, &d.o, NULL), STSA_OK);
  CHECK_STATUS(stsa_svg_attention(svg2, 0, 1, &d.q, &d.k, &d.v, &d.o, &rep), STSA_OK);
  stsa_svg_report rep_auto = STSA_INIT(stsa_svg_report);
  rep_auto.cand_bound = cand;
  stsa_svg *aut = small_session(ctx, &g, H, D, STSA_SVG_METHOD_AUTO, 1.0, 1009);
  /* step 0 at another budget: step 1 chooses afresh, not keeping step 0's
   * choices (auto_kept.c), so it profiles its candidates before the run */
  const stsa_svg_call other = {sizeof other, 0.9};
  CHECK_STATUS(stsa_svg_attention_ex(aut, 0, 0, &d.q, &d.k, &d.v, &d.o, &other, NULL),
               STSA_OK);
  CHECK_STATUS(stsa_svg_attention(aut, 0, 1, &d.q, &d.k, &d.v, &d.o, &rep_auto), STSA_OK);
  stsa_svg_free(aut);
  for (int64_t h = 0; h < H; h++) {
    const float profiled = cand[h * STSA_AUTO_CANDIDATE_COUNT_ + STSA_AUTO_SVG2];
    /* the same squares at z = 2.576 (svg2's first step under a budget)
     * against 2.326 (auto): wider, by the few percent the variance term
     * adds (2.4-2.6% on these heads) */
    CHECK(action[h] == STSA_BUDGET_NONE && profiled > 0 && est[h] > profiled &&
              est[h] <= 1.06f * profiled,
          "head %lld: bound %.6g on the call's rows, %.6g profiled (action %d)",
          (long long)h, est[h], profiled, action[h]);
  }

  /* then a budget no first candidate meets (step 2, still deferred: step 1
   * met its budget): each head climbs its ladder and runs again */
  const double tight = 1e-3;
  const stsa_svg_call call = {sizeof call, tight};
  CHECK_STATUS(stsa_svg_attention_ex(svg2, 0, 2, &d.q, &d.k, &d.v, &d.o, &call, &rep),
               STSA_OK);
  stsa_svg_free(svg2);
  for (int64_t h = 0; h < H; h++) {
    const double truth = head_error(&d.o, d.ref, h);
    CHECK((action[h] == STSA_BUDGET_RAISED || action[h] == STSA_BUDGET_DENSE) &&
              truth <= 1.5 * tight,
          "head %lld at budget %g: action %d, true error %.4g", (long long)h, tight,
          action[h], truth);
  }
  small_dump_free(&d);
}

/* SVG's wider levels under budgets its configured windows miss: a head
 * that widens profiles each level on rows drawn from that level's own
 * estimate, one level at a time, up to the first
 * that meets the budget. Over a sweep of budgets some head widens; a
 * widened head's bound is within the budget, every head's true error
 * within 1.5 x it, and the bound covers the true error. */
static void test_svg_levels(stsa_head_kind kind) {
  const stsa_geometry g = {5, 12, 16, 0, 0, STSA_TEXT_NONE};
  enum { H = 4, D = 64 };
  small_dump d = small_dump_make(&g, H, D, kind, 1011);
  enum { BUDGETS = 5 };
  const double budgets[BUDGETS] = {0.05, 0.15, 0.2, 0.25, 0.4};
  int raised = 0;
  for (int bi = 0; bi < BUDGETS; bi++) {
    /* density 0.15: at 5 frames its levels keep 0.36 and 0.64 of the pairs
     * (from 0.3 the widest kept every pair: dense, not a level) */
    stsa_svg *svg =
        small_session_at(d.ctx, &g, H, D, STSA_SVG_METHOD_SVG, budgets[bi], 1011, 0.15);
    float est[H];
    uint8_t action[H];
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    rep.est_error = est;
    rep.budget = action;
    CHECK_STATUS(stsa_svg_attention(svg, 0, 0, &d.q, &d.k, &d.v, &d.o, &rep), STSA_OK);
    for (int64_t h = 0; h < H; h++) {
      const double truth = head_error(&d.o, d.ref, h), slack = 1e-3 * truth + 1e-5;
      raised += action[h] == STSA_BUDGET_RAISED;
      CHECK(truth <= 1.5 * budgets[bi] && est[h] + slack >= 0.75 * truth &&
                (action[h] != STSA_BUDGET_RAISED || est[h] <= budgets[bi]),
            "budget %g head %lld: action %d, bound %.4g, true %.4g", budgets[bi],
            (long long)h, action[h], est[h], truth);
    }
    stsa_svg_free(svg);
  }
  CHECK(raised > 0, "no head widened over the budgets");
  small_dump_free(&d);
}

/* A budget no sparse mask meets: at 5 frames and density 0.3 SVG's widest
 * level (x4) keeps every pair, and the fused pass reads such a mask's rows
 * as the dense ones exactly (bound 0). That level is dense attention, so
 * the budget must send the heads dense and say so (budget action dense),
 * not raise them to it; method auto must not offer it as a candidate. */
static void test_no_level_keeps_everything(void) {
  const stsa_geometry g = {5, 12, 16, 0, 0, STSA_TEXT_NONE};
  enum { H = 4, D = 64 };
  small_dump d = small_dump_make(&g, H, D, STSA_HEAD_SPATIAL, 1012);
  const int methods[2] = {STSA_SVG_METHOD_SVG, STSA_SVG_METHOD_AUTO};
  for (int m = 0; m < 2; m++) {
    stsa_svg *svg = small_session(d.ctx, &g, H, D, methods[m], 1e-9, 1012);
    uint8_t action[H], choice[H];
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    rep.budget = action;
    rep.choice = choice;
    CHECK_STATUS(stsa_svg_attention(svg, 0, 0, &d.q, &d.k, &d.v, &d.o, &rep), STSA_OK);
    for (int64_t h = 0; h < H; h++)
      CHECK(action[h] == STSA_BUDGET_DENSE && choice[h] == STSA_AUTO_DENSE,
            "%s head %lld: budget action %d, choice %s (a mask that keeps every pair is "
            "not a sparse level)",
            stsa_svg_method_name(methods[m]), (long long)h, action[h],
            stsa_auto_candidate_name(choice[h]));
    stsa_svg_free(svg);
  }
  small_dump_free(&d);
}

/* A head of one video token under a budget: its call draws its one row
 * from the two halves of one geometric stratum, which the per-head strata
 * storage must hold (fuzz_svg2_session found them sized by the rows, 1;
 * ASan caught the overflow; SVG's drawn rows, methods svg and auto, the
 * same). Cold (bound before the run) and warm (the bound settled on the
 * output) calls; the output is v's row. */
static void test_one_token(void) {
  const stsa_geometry g = {1, 1, 1, 0, 0, STSA_TEXT_NONE};
  enum { H = 2, D = 64 };
  small_dump d = small_dump_make(&g, H, D, STSA_HEAD_SEMANTIC, 1010);
  const int methods[3] = {STSA_SVG_METHOD_SVG2, STSA_SVG_METHOD_AUTO,
                          STSA_SVG_METHOD_SVG};
  for (int m = 0; m < 3; m++) {
    stsa_svg *svg = small_session(d.ctx, &g, H, D, methods[m], 0.05, 1010);
    for (int64_t step = 0; step < 3; step++) {
      CHECK_STATUS(stsa_svg_attention(svg, 0, step, &d.q, &d.k, &d.v, &d.o, NULL),
                   STSA_OK);
      for (int64_t h = 0; h < H; h++)
        CHECK(head_error(&d.o, d.ref, h) <= 1e-6, "%s step %lld head %lld: error %.3g",
              stsa_svg_method_name(methods[m]), (long long)step, (long long)h,
              head_error(&d.o, d.ref, h));
    }
    stsa_svg_free(svg);
  }
  small_dump_free(&d);
}

int main(void) {
  test_census_and_edges();
  test_coverage();
  test_strata_draw();
  test_call_rows();
  test_strata_geometric();
  test_own_key_ladder();
  test_rare_tail_coverage();
  test_cluster_floor();
  test_session(STSA_SVG_METHOD_SVG2, STSA_HEAD_SEMANTIC);
  test_session(STSA_SVG_METHOD_SVG, STSA_HEAD_SEMANTIC);
  test_session(STSA_SVG_METHOD_SVG2, STSA_HEAD_TEMPORAL);
  test_settle();
  test_gather_leans();
  test_svg_levels(STSA_HEAD_SPATIAL);
  test_svg_levels(STSA_HEAD_TEMPORAL);
  test_no_level_keeps_everything();
  test_one_token();
  return tu_finish("test_error_bound");
}
