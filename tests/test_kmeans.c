/*
 * test_kmeans.c — the SVG2 k-means (src/svg/kmeans.c): planted blobs
 * recovered exactly, k-means++ leaving no cluster empty, a cost that never
 * rises, warm starts, determinism across threads / runs / seeds, scratch
 * kept between calls, pruned
 * (Hamerly) assignments equal to full ones, edge cases,
 * bad arguments writing nothing, and one assignment against a
 * double-precision brute force.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg/kmeans.h"
#include "testutil.h"

static stsa_ctx *make_ctx(int threads) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  if (ctx && threads > 0)
    CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_THREADS, threads), STSA_OK);
  return ctx;
}

static stsa_kmeans_args make_args(const float *x, int64_t n, int d, int64_t ld, int64_t k,
                                  int warm, int iters, double tol, uint64_t seed) {
  stsa_kmeans_args a;
  memset(&a, 0, sizeof a);
  a.x = x;
  a.n = n;
  a.d = d;
  a.ld = ld;
  a.k = k;
  a.warm = warm;
  a.iters = iters;
  a.tol = tol;
  a.seed = seed;
  return a;
}

/* One k-means result. */
typedef struct result {
  float *cent;
  int32_t *labels;
  int64_t *sizes;
  int iters_done;
  stsa_status st;
} result;

static result result_alloc(int64_t n, int d, int64_t k) {
  result r;
  r.cent = calloc((size_t)(k * d), sizeof(float));
  r.labels = calloc((size_t)n, sizeof(int32_t));
  r.sizes = calloc((size_t)k, sizeof(int64_t));
  r.iters_done = -1;
  r.st = STSA_OK;
  return r;
}

static void result_free(result *r) {
  free(r->cent);
  free(r->labels);
  free(r->sizes);
}

/* Runs k-means into r (r->cent is the warm start when warm). */
static void run(stsa_ctx *ctx, const stsa_kmeans_args *a, result *r) {
  r->st = stsa_kmeans(ctx, a, r->cent, r->labels, r->sizes, &r->iters_done);
  CHECK(r->st == STSA_OK, "stsa_kmeans n %lld d %d k %lld: %s (%s)", (long long)a->n,
        a->d, (long long)a->k, stsa_status_str(r->st), stsa_ctx_last_error(ctx));
}

static double sq_dist_d(const float *a, const float *b, int d) {
  double s = 0.0;
  for (int j = 0; j < d; j++) {
    double t = (double)a[j] - (double)b[j];
    s += t * t;
  }
  return s;
}

/* Sum of squared distances of the points to their centroids. */
static double cost(const float *x, int64_t n, int d, int64_t ld, const float *cent,
                   const int32_t *labels) {
  double c = 0.0;
  for (int64_t i = 0; i < n; i++)
    c += sq_dist_d(x + i * ld, cent + (int64_t)labels[i] * d, d);
  return c;
}

/* ---- data -------------------------------------------------------------------- */

/* n Gaussian points N(0, 1) in rows ld apart. */
static float *random_points(tu_rng *rng, int64_t n, int d, int64_t ld) {
  float *x = calloc((size_t)(n * ld), sizeof(float));
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < d; j++)
      x[i * ld + j] = (float)tu_rng_normal(rng);
  return x;
}

/* `blobs` blobs, centres uniform in [-scale, scale]^d, points at spread
 * sigma around them, sizes uniform in 5..400, shuffled. Returns x and each
 * point's blob in *truth, the count in *n. */
static float *planted(tu_rng *rng, int blobs, int d, int64_t ld, double scale,
                      double sigma, int64_t *n, int32_t **truth) {
  int64_t sizes[64], total = 0;
  for (int b = 0; b < blobs; b++) {
    sizes[b] = 5 + (int64_t)(tu_rng_next(rng) % 396);
    total += sizes[b];
  }
  float *centres = malloc(sizeof(float) * (size_t)(blobs * d));
  for (int64_t e = 0; e < (int64_t)blobs * d; e++)
    centres[e] = (float)(scale * tu_rng_uniform(rng));
  int32_t *t = malloc(sizeof(int32_t) * (size_t)total);
  int64_t i = 0;
  for (int b = 0; b < blobs; b++)
    for (int64_t s = 0; s < sizes[b]; s++)
      t[i++] = b;
  for (int64_t e = total - 1; e > 0; e--) { /* Fisher-Yates */
    int64_t f = (int64_t)(tu_rng_next(rng) % (uint64_t)(e + 1));
    int32_t tmp = t[e];
    t[e] = t[f];
    t[f] = tmp;
  }
  float *x = calloc((size_t)(total * ld), sizeof(float));
  for (i = 0; i < total; i++)
    for (int j = 0; j < d; j++)
      x[i * ld + j] = centres[t[i] * d + j] + (float)(sigma * tu_rng_normal(rng));
  free(centres);
  *n = total;
  *truth = t;
  return x;
}

/* Whether labels equal truth up to a relabelling (a bijection of k). */
static int same_partition(const int32_t *labels, const int32_t *truth, int64_t n,
                          int64_t k) {
  int32_t *to = malloc(sizeof(int32_t) * (size_t)k),
          *from = malloc(sizeof(int32_t) * (size_t)k);
  for (int64_t c = 0; c < k; c++)
    to[c] = from[c] = -1;
  int ok = 1;
  for (int64_t i = 0; i < n && ok; i++) {
    int32_t l = labels[i], t = truth[i];
    if (l < 0 || l >= k || (to[l] >= 0 && to[l] != t) || (from[t] >= 0 && from[t] != l))
      ok = 0;
    else
      to[l] = t, from[t] = l;
  }
  free(to);
  free(from);
  return ok;
}

/* ---- tests -------------------------------------------------------------------- */

static void test_planted(stsa_ctx *ctx, int d, int64_t ld, uint64_t seed) {
  tu_rng rng = {seed};
  const int blobs = 12;
  int64_t n;
  int32_t *truth;
  float *x = planted(&rng, blobs, d, ld, 10.0, 0.01, &n, &truth);
  stsa_kmeans_args a = make_args(x, n, d, ld, blobs, 0, 50, 1e-4, seed + 1);
  result r = result_alloc(n, d, blobs);
  run(ctx, &a, &r);
  CHECK(same_partition(r.labels, truth, n, blobs),
        "planted d %d ld %lld: 12 blobs not recovered", d, (long long)ld);
  int64_t total = 0;
  for (int c = 0; c < blobs; c++)
    total += r.sizes[c];
  CHECK(total == n, "planted: sizes sum to %lld, expected %lld", (long long)total,
        (long long)n);
  CHECK(r.iters_done >= 1 && r.iters_done <= 50, "planted: %d iterations", r.iters_done);
  /* rows ld apart give the same bits as the same rows packed */
  if (ld != d) {
    float *packed = malloc(sizeof(float) * (size_t)(n * d));
    for (int64_t i = 0; i < n; i++)
      memcpy(packed + i * d, x + i * ld, sizeof(float) * (size_t)d);
    stsa_kmeans_args b = make_args(packed, n, d, d, blobs, 0, 50, 1e-4, seed + 1);
    result q = result_alloc(n, d, blobs);
    run(ctx, &b, &q);
    CHECK(!memcmp(q.labels, r.labels, sizeof(int32_t) * (size_t)n) &&
              !memcmp(q.cent, r.cent, sizeof(float) * (size_t)(blobs * d)),
          "planted d %d: ld %lld and ld d differ", d, (long long)ld);
    result_free(&q);
    free(packed);
  }
  result_free(&r);
  free(x);
  free(truth);
}

/* Seeding alone (iters 0): k distinct data points, every cluster non-empty. */
static void test_seeding_no_empty(stsa_ctx *ctx) {
  tu_rng rng = {7};
  const int64_t n = 400, k = 50;
  const int d = 8;
  float *x = random_points(&rng, n, d, d);
  stsa_kmeans_args a = make_args(x, n, d, d, k, 0, 0, 0.0, 3);
  result r = result_alloc(n, d, k);
  run(ctx, &a, &r);
  CHECK(r.iters_done == 0, "seeding: iters_done %d, expected 0", r.iters_done);
  int empty = 0, not_point = 0, dup = 0;
  for (int64_t c = 0; c < k; c++) {
    empty += r.sizes[c] == 0;
    int found = 0;
    for (int64_t i = 0; i < n && !found; i++)
      found = !memcmp(x + i * d, r.cent + c * d, sizeof(float) * d);
    not_point += !found;
    for (int64_t e = 0; e < c; e++)
      dup += !memcmp(r.cent + e * d, r.cent + c * d, sizeof(float) * d);
  }
  CHECK(empty == 0, "seeding: %d empty clusters", empty);
  CHECK(not_point == 0, "seeding: %d centres are not data points", not_point);
  CHECK(dup == 0, "seeding: %d duplicated centres", dup);
  result_free(&r);
  free(x);
}

/* cost(labels_t, centroids_t+1) never rises, one warm iteration at a time. */
static void test_cost_monotone(stsa_ctx *ctx) {
  tu_rng rng = {11};
  const int64_t n = 2000, k = 20;
  const int d = 16;
  float *x = random_points(&rng, n, d, d);
  stsa_kmeans_args a = make_args(x, n, d, d, k, 0, 1, 0.0, 5);
  result r = result_alloc(n, d, k);
  run(ctx, &a, &r);
  double prev = cost(x, n, d, d, r.cent, r.labels);
  a.warm = 1;
  int rises = 0;
  for (int it = 0; it < 15; it++) {
    run(ctx, &a, &r);
    double c = cost(x, n, d, d, r.cent, r.labels);
    rises += c > prev * (1.0 + 1e-6);
    prev = c;
  }
  CHECK(rises == 0, "cost rose in %d of 15 iterations", rises);
  result_free(&r);
  free(x);
}

/* After many iterations on Gaussian noise (points change clusters in every
 * one, so the updates after the first move sums incrementally), every
 * non-empty centroid is the mean of its members, as a sum from scratch in
 * double gives it; an empty one did not move. 2 threads and 1. */
static void test_centroids_are_means(void) {
  tu_rng rng = {21};
  const int64_t n = 3000, k = 40;
  const int d = 24;
  float *x = random_points(&rng, n, d, d);
  double *mean = malloc(sizeof(double) * (size_t)(k * d));
  int64_t *cnt = malloc(sizeof(int64_t) * (size_t)k);
  for (int threads = 1; threads <= 2; threads++) {
    stsa_ctx *ctx = make_ctx(threads);
    stsa_kmeans_args a = make_args(x, n, d, d, k, 0, 25, 0.0, 3);
    result r = result_alloc(n, d, k);
    run(ctx, &a, &r);
    memset(mean, 0, sizeof(double) * (size_t)(k * d));
    memset(cnt, 0, sizeof(int64_t) * (size_t)k);
    for (int64_t i = 0; i < n; i++) {
      cnt[r.labels[i]]++;
      for (int j = 0; j < d; j++)
        mean[r.labels[i] * d + j] += x[i * d + j];
    }
    double worst = 0.0;
    int64_t empty = 0;
    for (int64_t c = 0; c < k; c++) {
      empty += cnt[c] == 0;
      for (int j = 0; cnt[c] > 0 && j < d; j++) {
        const double want = mean[c * d + j] / (double)cnt[c];
        const double e = fabs(r.cent[c * d + j] - want) / (1.0 + fabs(want));
        worst = e > worst ? e : worst;
      }
    }
    CHECK(r.iters_done == 25, "%d threads: %d iterations, not 25", threads, r.iters_done);
    CHECK(worst < 1e-6, "%d threads: a centroid is %.3g from its members' mean", threads,
          worst);
    CHECK(empty == 0, "%d threads: %lld empty clusters", threads, (long long)empty);
    result_free(&r);
    stsa_ctx_free(ctx);
  }
  free(mean);
  free(cnt);
  free(x);
}

/* 50 cold iterations on 20 overlapping blobs (centres about 14 apart, each
 * about 3 wide), then points moved by 1e-3: the warm run converges in at
 * most 3 iterations and keeps almost every label. */
static void test_warm_start(stsa_ctx *ctx) {
  tu_rng rng = {13};
  const int d = 32, blobs = 20;
  int64_t n;
  int32_t *truth;
  float *x = planted(&rng, blobs, d, d, 3.0, 0.5, &n, &truth);
  const int64_t k = blobs;
  stsa_kmeans_args a = make_args(x, n, d, d, k, 0, 50, 1e-4, 17);
  result r = result_alloc(n, d, k);
  run(ctx, &a, &r);
  int32_t *before = malloc(sizeof(int32_t) * (size_t)n);
  memcpy(before, r.labels, sizeof(int32_t) * (size_t)n);
  for (int64_t e = 0; e < n * d; e++)
    x[e] += (float)(1e-3 * tu_rng_normal(&rng));
  a.warm = 1;
  run(ctx, &a, &r);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; i++)
    kept += r.labels[i] == before[i];
  CHECK(r.iters_done <= 3, "warm start: %d iterations, expected <= 3", r.iters_done);
  CHECK(kept >= n - n / 100, "warm start: %lld of %lld labels kept", (long long)kept,
        (long long)n);
  free(before);
  result_free(&r);
  free(x);
  free(truth);
}

static int same_result(const result *p, const result *q, int64_t n, int d, int64_t k) {
  return !memcmp(p->labels, q->labels, sizeof(int32_t) * (size_t)n) &&
         !memcmp(p->cent, q->cent, sizeof(float) * (size_t)(k * d)) &&
         !memcmp(p->sizes, q->sizes, sizeof(int64_t) * (size_t)k) &&
         p->iters_done == q->iters_done;
}

/* Bitwise equal for 1, 2, 3 threads and across runs; another seed differs. */
static void test_determinism(void) {
  tu_rng rng = {19};
  const int64_t n = 9000, k = 150;
  const int d = 40;
  float *x = random_points(&rng, n, d, d);
  stsa_kmeans_args a = make_args(x, n, d, d, k, 0, 8, 0.0, 23);
  result r[4];
  for (int t = 0; t < 3; t++) {
    stsa_ctx *ctx = make_ctx(t + 1);
    r[t] = result_alloc(n, d, k);
    run(ctx, &a, &r[t]);
    stsa_ctx_free(ctx);
  }
  CHECK(same_result(&r[0], &r[1], n, d, k), "determinism: 1 and 2 threads differ");
  CHECK(same_result(&r[0], &r[2], n, d, k), "determinism: 1 and 3 threads differ");
  stsa_ctx *ctx = make_ctx(2);
  r[3] = result_alloc(n, d, k);
  run(ctx, &a, &r[3]);
  CHECK(same_result(&r[1], &r[3], n, d, k), "determinism: two runs differ");
  a.seed = 24;
  run(ctx, &a, &r[3]);
  CHECK(!same_result(&r[1], &r[3], n, d, k), "determinism: seeds 23 and 24 agree");
  stsa_ctx_free(ctx);
  for (int t = 0; t < 4; t++)
    result_free(&r[t]);
  free(x);
}

/* A scratch workspace (stsa_kmeans_args.scratch) kept between calls gives
 * bitwise the results of per-call scratch: first grown by a larger call,
 * then reused, cold and warm (with a hint, the first assignment's coarse
 * path: 300 centroids in 10 groups), also after its bytes are overwritten
 * with NaN patterns, as memory a caller reuses may hold. */
static void test_scratch_reuse(void) {
  tu_rng rng = {53};
  const int64_t n = 4000, k = 300, big_n = 6000;
  const int d = 48;
  float *x = random_points(&rng, big_n, d, d);
  stsa_ctx *ctx = make_ctx(2);
  stsa_workspace ws = {NULL, 0};
  stsa_kmeans_args a = make_args(x, n, d, d, k, 0, 6, 0.0, 61);
  result ref = result_alloc(n, d, k), warm_ref = result_alloc(n, d, k);
  result r = result_alloc(n, d, k), big = result_alloc(big_n, d, k);
  run(ctx, &a, &ref);
  memcpy(warm_ref.cent, ref.cent, sizeof(float) * (size_t)(k * d));
  memcpy(warm_ref.labels, ref.labels, sizeof(int32_t) * (size_t)n);
  stsa_kmeans_args w = a;
  w.warm = 1;
  w.iters = 2;
  w.hint = warm_ref.labels;
  run(ctx, &w, &warm_ref);
  stsa_kmeans_args b = make_args(x, big_n, d, d, k, 0, 3, 0.0, 62);
  b.scratch = &ws;
  run(ctx, &b, &big);
  const size_t grown = ws.bytes;
  CHECK(ws.mem && grown > 0, "scratch: the workspace was not used");
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1)
      memset(ws.mem, 0xff, ws.bytes); /* NaN in every float, -1 in every int */
    a.scratch = &ws;
    run(ctx, &a, &r);
    CHECK(same_result(&r, &ref, n, d, k), "scratch: a reused workspace (pass %d) differs",
          pass);
    memcpy(r.labels, ref.labels, sizeof(int32_t) * (size_t)n);
    w.scratch = &ws;
    w.hint = r.labels;
    run(ctx, &w, &r);
    CHECK(same_result(&r, &warm_ref, n, d, k),
          "scratch: a warm call on a reused workspace (pass %d) differs", pass);
  }
  CHECK(ws.bytes == grown, "scratch: a smaller call grew the workspace (%zu -> %zu)",
        grown, ws.bytes);
  stsa_workspace_release(&ws);
  result_free(&ref);
  result_free(&warm_ref);
  result_free(&r);
  result_free(&big);
  stsa_ctx_free(ctx);
  free(x);
}

/* Runs a warm k-means with the probe's switches on `threads` threads. */
static void run_probed(int threads, const stsa_kmeans_args *a,
                       const stsa_kmeans_probe *probe, const float *warm_from,
                       result *r) {
  stsa_ctx *ctx = make_ctx(threads);
  memcpy(r->cent, warm_from, sizeof(float) * (size_t)(a->k * a->d));
  r->st = stsa_kmeans_probed(ctx, a, probe, r->cent, r->labels, r->sizes, &r->iters_done);
  CHECK(r->st == STSA_OK, "stsa_kmeans_probed: %s (%s)", stsa_status_str(r->st),
        stsa_ctx_last_error(ctx));
  stsa_ctx_free(ctx);
}

/* Centroids of x (cold, 10 iterations), then warm runs of iters 2..5 on x
 * moved by noise N(0, noise^2): the pruned assignments give bitwise the
 * result of full ones, on 1, 2 and 3 threads, and so do they with a hint
 * (stsa_kmeans_args.hint): the cold run's labels, or labels unrelated to
 * the points, each in the labels array itself as the SVG session passes
 * them. Returns the points the second assignment recomputed (iters 2, 1
 * thread, no hint). */
static int64_t check_pruned(const char *what, float *x, int64_t n, int d, int64_t ld,
                            int64_t k, double noise, tu_rng *rng) {
  stsa_ctx *ctx = make_ctx(2);
  stsa_kmeans_args a = make_args(x, n, d, ld, k, 0, 10, 0.0, 31);
  result seed = result_alloc(n, d, k);
  run(ctx, &a, &seed);
  stsa_ctx_free(ctx);
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < d; j++)
      x[i * ld + j] += (float)(noise * tu_rng_normal(rng));
  a.warm = 1;
  int64_t second = -1;
  for (int iters = 2; iters <= 5; iters++) {
    a.iters = iters;
    int64_t recomputed[5];
    const stsa_kmeans_probe full = {1, NULL}, pruned = {0, recomputed};
    result ref = result_alloc(n, d, k), r = result_alloc(n, d, k);
    run_probed(1, &a, &full, seed.cent, &ref);
    for (int t = 1; t <= 3; t++) {
      for (int e = 0; e < 5; e++)
        recomputed[e] = -1;
      run_probed(t, &a, &pruned, seed.cent, &r);
      CHECK(same_result(&r, &ref, n, d, k),
            "pruned %s: iters %d, %d threads differ from full assignments", what, iters,
            t);
      CHECK(recomputed[0] == n, "pruned %s: first assignment computed %lld of %lld", what,
            (long long)recomputed[0], (long long)n);
      for (int e = 1; e < r.iters_done; e++)
        CHECK(recomputed[e] >= 0 && recomputed[e] <= n,
              "pruned %s: assignment %d computed %lld", what, e,
              (long long)recomputed[e]);
      if (iters == 2 && t == 1)
        second = recomputed[1];
    }
    for (int h = 0; h < 2; h++) {
      for (int64_t i = 0; i < n; i++)
        r.labels[i] = h == 0 ? seed.labels[i] : (int32_t)((i * 7 + 3) % k);
      a.hint = r.labels;
      run_probed(2, &a, &pruned, seed.cent, &r);
      a.hint = NULL;
      CHECK(same_result(&r, &ref, n, d, k),
            "pruned %s: iters %d, %s hint: differs from full assignments", what, iters,
            h == 0 ? "the last labels as" : "an unrelated");
    }
    result_free(&ref);
    result_free(&r);
  }
  printf("test_kmeans: pruned %s (n %lld, d %d, k %lld, noise %g): 2nd assignment "
         "recomputed %lld of %lld points\n",
         what, (long long)n, d, (long long)k, noise, (long long)second, (long long)n);
  result_free(&seed);
  return second;
}

/* Hamerly pruning is exact: random points (little to prune), planted blobs
 * (most pruned), rows apart (gathered copies), odd d, far moves. */
static void test_pruned_equals_full(void) {
  tu_rng rng = {41};
  float *x = random_points(&rng, 3000, 128, 131);
  check_pruned("random", x, 3000, 128, 131, 60, 0.05, &rng);
  free(x);
  x = random_points(&rng, 2000, 33, 33);
  check_pruned("random far", x, 2000, 33, 33, 97, 0.5, &rng);
  free(x);
  int64_t n;
  int32_t *truth;
  x = planted(&rng, 40, 64, 64, 3.0, 0.5, &n, &truth);
  const int64_t second = check_pruned("clustered", x, n, 64, 64, 40, 0.05, &rng);
  CHECK(second >= 0 && second < n / 4, "pruned clustered: %lld of %lld recomputed",
        (long long)second, (long long)n);
  free(x);
  free(truth);
  x = planted(&rng, 30, 40, 45, 3.0, 1.0, &n, &truth);
  check_pruned("clustered, k > blobs", x, n, 40, 45, 90, 0.2, &rng);
  free(x);
  free(truth);
  /* many centroid groups (k 500: 32 panels of 16, 16 groups of 2 panels,
   * the last panel short) */
  x = planted(&rng, 30, 16, 16, 3.0, 0.8, &n, &truth);
  const int64_t many =
      check_pruned("clustered, many groups", x, n, 16, 16, 500, 0.1, &rng);
  CHECK(many >= 0 && many < n, "pruned, many groups: %lld of %lld recomputed",
        (long long)many, (long long)n);
  free(x);
  free(truth);
}

static int all_finite(const float *v, int64_t count) {
  for (int64_t e = 0; e < count; e++)
    if (!isfinite(v[e]))
      return 0;
  return 1;
}

/* gcc 12's AArch64 vectoriser stops with an internal compiler error
 * (vect_transform_reduction) on this function's reductions at -O3 */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void
test_edges(stsa_ctx *ctx) {
  tu_rng rng = {29};
  /* k = 1: the mean */
  {
    const int64_t n = 333;
    const int d = 7;
    float *x = random_points(&rng, n, d, d);
    stsa_kmeans_args a = make_args(x, n, d, d, 1, 0, 5, 0.0, 1);
    result r = result_alloc(n, d, 1);
    run(ctx, &a, &r);
    double err = 0.0;
    for (int j = 0; j < d; j++) {
      double mean = 0.0;
      for (int64_t i = 0; i < n; i++)
        mean += x[i * d + j];
      err = fmax(err, fabs(mean / (double)n - r.cent[j]));
    }
    CHECK(err < 1e-6 && r.sizes[0] == n, "k = 1: mean off by %g, size %lld", err,
          (long long)r.sizes[0]);
    result_free(&r);
    free(x);
  }
  /* k = n: every point its own cluster */
  {
    const int64_t n = 97;
    const int d = 3;
    float *x = random_points(&rng, n, d, d);
    stsa_kmeans_args a = make_args(x, n, d, d, n, 0, 3, 0.0, 2);
    result r = result_alloc(n, d, n);
    run(ctx, &a, &r);
    int bad = 0;
    for (int64_t c = 0; c < n; c++)
      bad += r.sizes[c] != 1;
    for (int64_t i = 0; i < n; i++)
      bad += memcmp(x + i * d, r.cent + (int64_t)r.labels[i] * d, sizeof(float) * d) != 0;
    CHECK(bad == 0, "k = n: %d clusters or points wrong", bad);
    result_free(&r);
    free(x);
  }
  /* n = 1 */
  {
    float x[5] = {1, 2, 3, 4, 5};
    stsa_kmeans_args a = make_args(x, 1, 5, 5, 1, 0, 10, 1e-4, 3);
    result r = result_alloc(1, 5, 1);
    run(ctx, &a, &r);
    CHECK(!memcmp(r.cent, x, sizeof x) && r.labels[0] == 0 && r.sizes[0] == 1,
          "n = 1: centroid or label wrong");
    result_free(&r);
  }
  /* duplicated points: 10 distinct values, 6 copies each */
  {
    const int64_t distinct = 10, n = 60;
    const int d = 4;
    float *x = malloc(sizeof(float) * (size_t)(n * d));
    float *vals = random_points(&rng, distinct, d, d);
    for (int64_t i = 0; i < n; i++)
      memcpy(x + i * d, vals + (i % distinct) * d, sizeof(float) * d);
    int32_t truth[60];
    for (int64_t i = 0; i < n; i++)
      truth[i] = (int32_t)(i % distinct);
    stsa_kmeans_args a = make_args(x, n, d, d, distinct, 0, 20, 0.0, 4);
    result r = result_alloc(n, d, distinct);
    run(ctx, &a, &r);
    CHECK(same_partition(r.labels, truth, n, distinct),
          "duplicates, k = distinct: copies not grouped");
    result_free(&r);
    /* more clusters than distinct points: centres repeat, no NaN */
    for (int64_t k = 11; k <= n; k += 49) {
      a.k = k;
      r = result_alloc(n, d, k);
      run(ctx, &a, &r);
      int64_t total = 0, nonempty = 0, bad_label = 0;
      for (int64_t c = 0; c < k; c++) {
        total += r.sizes[c];
        nonempty += r.sizes[c] > 0;
      }
      for (int64_t i = 0; i < n; i++)
        bad_label += r.labels[i] < 0 || r.labels[i] >= k;
      CHECK(
          all_finite(r.cent, k * d) && total == n && nonempty == distinct && !bad_label,
          "duplicates, k = %lld: finite %d, total %lld, non-empty %lld, bad labels %lld",
          (long long)k, all_finite(r.cent, k * d), (long long)total, (long long)nonempty,
          (long long)bad_label);
      CHECK(cost(x, n, d, d, r.cent, r.labels) == 0.0, "duplicates, k = %lld: cost not 0",
            (long long)k);
      result_free(&r);
    }
    free(vals);
    free(x);
  }
  /* a centroid nearest to no point keeps its place; a huge tol stops after
   * one iteration */
  {
    const int64_t n = 200, k = 5;
    const int d = 6;
    float *x = random_points(&rng, n, d, d);
    result r = result_alloc(n, d, k);
    for (int64_t e = 0; e < k * d; e++)
      r.cent[e] = (float)tu_rng_normal(&rng);
    for (int j = 0; j < d; j++)
      r.cent[2 * d + j] = 1e3f;
    stsa_kmeans_args a = make_args(x, n, d, d, k, 1, 10, 0.0, 0);
    run(ctx, &a, &r);
    int moved = 0;
    for (int j = 0; j < d; j++)
      moved += r.cent[2 * d + j] != 1e3f;
    CHECK(r.sizes[2] == 0 && moved == 0, "empty cluster: size %lld, %d coordinates moved",
          (long long)r.sizes[2], moved);
    a.tol = 1e30;
    run(ctx, &a, &r);
    CHECK(r.iters_done == 1, "tol 1e30: %d iterations, expected 1", r.iters_done);
    result_free(&r);
    free(x);
  }
  /* d = 1: two groups on a line */
  {
    float x[9] = {0.0f, 10.0f, 0.1f, 10.2f, -0.1f, 9.9f, 0.05f, 10.1f, 0.0f};
    int32_t truth[9] = {0, 1, 0, 1, 0, 1, 0, 1, 0};
    stsa_kmeans_args a = make_args(x, 9, 1, 1, 2, 0, 10, 0.0, 5);
    result r = result_alloc(9, 1, 2);
    run(ctx, &a, &r);
    CHECK(same_partition(r.labels, truth, 9, 2), "d = 1: groups not found");
    result_free(&r);
  }
}

/* Every bad argument fails and leaves the outputs as they were. */
static void test_bad_args(stsa_ctx *ctx) {
  enum { N = 20, D = 4, K = 3 };
  float x[N * D];
  for (int e = 0; e < N * D; e++)
    x[e] = (float)e;
  float cent[K * D];
  int32_t labels[N];
  int64_t sizes[K];
  int done = 77;
  memset(cent, 0x5a, sizeof cent);
  memset(labels, 0x5a, sizeof labels);
  memset(sizes, 0x5a, sizeof sizes);
  float cent0[K * D];
  memcpy(cent0, cent, sizeof cent);
  struct {
    const char *what;
    stsa_kmeans_args a;
    stsa_status expect;
  } cases[] = {
      {"k = 0", make_args(x, N, D, D, 0, 0, 5, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"k > n", make_args(x, N, D, D, N + 1, 0, 5, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"n = 0", make_args(x, 0, D, D, 1, 0, 5, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"d = 0", make_args(x, N, 0, D, K, 0, 5, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"d = 513", make_args(x, N, 513, 513, K, 0, 5, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"ld < d", make_args(x, N, D, D - 1, K, 0, 5, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"iters < 0", make_args(x, N, D, D, K, 0, -1, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"tol < 0", make_args(x, N, D, D, K, 0, 5, -1.0, 1), STSA_ERR_BAD_PARAM},
      {"tol NaN", make_args(x, N, D, D, K, 0, 5, NAN, 1), STSA_ERR_BAD_PARAM},
      {"warm = 2", make_args(x, N, D, D, K, 2, 5, 0.0, 1), STSA_ERR_BAD_PARAM},
      {"x NULL", make_args(NULL, N, D, D, K, 0, 5, 0.0, 1), STSA_ERR_NULL_ARG},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    stsa_status st = stsa_kmeans(ctx, &cases[c].a, cent, labels, sizes, &done);
    CHECK(st == cases[c].expect && stsa_ctx_last_error(ctx)[0] != '\0',
          "bad args %s: %s, expected %s", cases[c].what, stsa_status_str(st),
          stsa_status_str(cases[c].expect));
  }
  stsa_kmeans_args ok = make_args(x, N, D, D, K, 0, 5, 0.0, 1);
  CHECK_STATUS(stsa_kmeans(ctx, NULL, cent, labels, sizes, &done), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_kmeans(ctx, &ok, NULL, labels, sizes, &done), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_kmeans(ctx, &ok, cent, NULL, sizes, &done), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_kmeans(NULL, &ok, cent, labels, sizes, &done), STSA_ERR_NULL_ARG);
  /* a NaN point with the finiteness check on (the default) */
  x[5] = NAN; /* point 1 */
  CHECK_STATUS(stsa_kmeans(ctx, &ok, cent, labels, sizes, &done), STSA_ERR_NONFINITE);
  int32_t labels0[N];
  int64_t sizes0[K];
  memset(labels0, 0x5a, sizeof labels0);
  memset(sizes0, 0x5a, sizeof sizes0);
  CHECK(!memcmp(cent, cent0, sizeof cent) && !memcmp(labels, labels0, sizeof labels) &&
            !memcmp(sizes, sizes0, sizeof sizes) && done == 77,
        "bad args: an output was written");
  /* NULL sizes and iters_done are allowed */
  x[5] = 5.0f;
  CHECK_STATUS(stsa_kmeans(ctx, &ok, cent, labels, NULL, NULL), STSA_OK);
}

/* A warm call with k = 300 (19 panels of 16 in 10 groups: the first
 * assignment's coarse pass reads every point) checks x there: a NaN or Inf
 * point fails the call before anything is written, naming the first bad
 * point; a finite point whose squared norm overflows does not. */
enum { NF_N = 3000, NF_D = 16, NF_K = 300 };

/* Outputs and their state before a call that must not write them. */
typedef struct nf_outputs {
  float cent[NF_K * NF_D], cent0[NF_K * NF_D];
  int32_t labels[NF_N], labels0[NF_N];
  int64_t sizes[NF_K], sizes0[NF_K];
  int done;
} nf_outputs;

/* x with a NaN at point 2000 and an Inf at point 7 fails a warm call whose
 * labels start as `label0` (a hint, or a pattern no call writes): status
 * and message name point 7, and no output is written. */
static void check_nonfinite_call(stsa_ctx *ctx, stsa_kmeans_args *a, float *x,
                                 nf_outputs *o, const char *what) {
  memcpy(o->cent, o->cent0, sizeof o->cent);
  memcpy(o->labels, o->labels0, sizeof o->labels);
  memcpy(o->sizes, o->sizes0, sizeof o->sizes);
  o->done = 77;
  x[2000 * NF_D + 5] = NAN;
  x[7 * NF_D + 3] = INFINITY;
  CHECK_STATUS(stsa_kmeans(ctx, a, o->cent, o->labels, o->sizes, &o->done),
               STSA_ERR_NONFINITE);
  CHECK(strstr(stsa_ctx_last_error(ctx), "point 7 of x") != NULL,
        "%s: the error reads \"%s\"", what, stsa_ctx_last_error(ctx));
  CHECK(!memcmp(o->cent, o->cent0, sizeof o->cent) &&
            !memcmp(o->labels, o->labels0, sizeof o->labels) &&
            !memcmp(o->sizes, o->sizes0, sizeof o->sizes) && o->done == 77,
        "%s: an output was written", what);
  x[2000 * NF_D + 5] = 0.5f;
  x[7 * NF_D + 3] = 0.5f;
}

static void test_warm_nonfinite(stsa_ctx *ctx) {
  tu_rng rng = {77};
  float *x = random_points(&rng, NF_N, NF_D, NF_D);
  nf_outputs *o = malloc(sizeof *o);
  for (int64_t e = 0; e < (int64_t)NF_K * NF_D; e++)
    o->cent0[e] = (float)tu_rng_normal(&rng);
  memset(o->labels0, 0x5a, sizeof o->labels0);
  memset(o->sizes0, 0x5a, sizeof o->sizes0);
  stsa_kmeans_args a = make_args(x, NF_N, NF_D, NF_D, NF_K, 1, 2, 0.0, 0);
  check_nonfinite_call(ctx, &a, x, o, "warm NaN/Inf");
  /* with a hint in the labels array (the NaN is then found in the
   * assignment's own first pass): the same. A clean call first, so that
   * norms left from it (in scratch that the next call may get again) would
   * miss the NaN if that pass did not compute them afresh. */
  CHECK_STATUS(stsa_kmeans(ctx, &a, o->cent, o->labels, o->sizes, &o->done), STSA_OK);
  for (int64_t i = 0; i < NF_N; i++)
    o->labels0[i] = (int32_t)(i % NF_K);
  a.hint = o->labels;
  check_nonfinite_call(ctx, &a, x, o, "warm NaN/Inf, hinted");
  /* a hint out of range: refused before anything is read or written */
  o->labels[123] = NF_K;
  CHECK_STATUS(stsa_kmeans(ctx, &a, o->cent, o->labels, o->sizes, &o->done),
               STSA_ERR_BAD_PARAM);
  CHECK(strstr(stsa_ctx_last_error(ctx), "hint[123]") != NULL,
        "bad hint: the error reads \"%s\"", stsa_ctx_last_error(ctx));
  a.hint = NULL;
  x[11 * NF_D] = 3e19f; /* finite; its squared norm is not */
  CHECK_STATUS(stsa_kmeans(ctx, &a, o->cent, o->labels, o->sizes, &o->done), STSA_OK);
  free(x), free(o);
}

/* One assignment (warm, iters 0) against argmin ||x - c||^2 in double:
 * equal labels except near ties (within the f32 rounding of the GEMM form). */
static void test_against_brute_force(stsa_ctx *ctx, int d, int64_t k) {
  tu_rng rng = {31};
  const int64_t n = 1500;
  float *x = random_points(&rng, n, d, d);
  result r = result_alloc(n, d, k);
  for (int64_t e = 0; e < k * d; e++)
    r.cent[e] = (float)tu_rng_normal(&rng);
  float *cent0 = malloc(sizeof(float) * (size_t)(k * d));
  memcpy(cent0, r.cent, sizeof(float) * (size_t)(k * d));
  stsa_kmeans_args a = make_args(x, n, d, d, k, 1, 0, 0.0, 0);
  run(ctx, &a, &r);
  CHECK(!memcmp(cent0, r.cent, sizeof(float) * (size_t)(k * d)),
        "assignment only: centroids changed");
  int64_t differ = 0, wrong = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t best = 0;
    double bd = INFINITY;
    for (int64_t c = 0; c < k; c++) {
      double dc = sq_dist_d(x + i * d, cent0 + c * d, d);
      if (dc < bd)
        bd = dc, best = c;
    }
    if (r.labels[i] != best) {
      differ++;
      double got = sq_dist_d(x + i * d, cent0 + (int64_t)r.labels[i] * d, d);
      double scale = 0.0; /* ||x||^2 + ||c||^2: what the f32 error scales with */
      for (int j = 0; j < d; j++)
        scale += (double)x[i * d + j] * x[i * d + j] +
                 (double)cent0[best * d + j] * cent0[best * d + j];
      wrong += got - bd > 1e-5 * scale;
    }
  }
  CHECK(wrong == 0, "brute force d %d: %lld of %lld labels wrong (%lld differ)", d,
        (long long)wrong, (long long)n, (long long)differ);
  free(cent0);
  result_free(&r);
  free(x);
}

/* Equal centroids in one panel and in different panels: the lowest index
 * wins, as in a sequential argmin; one assignment (warm, iters 0). */
static void test_ties(stsa_ctx *ctx) {
  tu_rng rng = {47};
  const int64_t n = 300, k = 40;
  const int d = 24;
  float *x = random_points(&rng, n, d, d);
  result r = result_alloc(n, d, k);
  for (int64_t e = 0; e < k * d; e++)
    r.cent[e] = (float)tu_rng_normal(&rng);
  const int64_t copies[] = {5, 20, 37}; /* copies of centroid 3 */
  for (size_t c = 0; c < sizeof copies / sizeof copies[0]; c++)
    memcpy(r.cent + copies[c] * d, r.cent + 3 * d, sizeof(float) * d);
  for (int64_t i = 0; i < n; i += 3) /* every third point on centroid 3 */
    memcpy(x + i * d, r.cent + 3 * d, sizeof(float) * d);
  stsa_kmeans_args a = make_args(x, n, d, d, k, 1, 0, 0.0, 0);
  run(ctx, &a, &r);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += r.labels[i] == 5 || r.labels[i] == 20 || r.labels[i] == 37 ||
           (i % 3 == 0 && r.labels[i] != 3);
  CHECK(bad == 0, "ties: %lld points not on the lowest of equal centroids",
        (long long)bad);
  result_free(&r);
  free(x);
}

int main(void) {
  stsa_ctx *ctx = make_ctx(2);
  test_planted(ctx, 64, 64, 101);
  test_planted(ctx, 128, 131, 102);
  test_planted(ctx, 5, 5, 103);
  test_planted(ctx, 80, 80, 104);
  test_seeding_no_empty(ctx);
  test_cost_monotone(ctx);
  test_centroids_are_means();
  test_warm_start(ctx);
  test_determinism();
  test_scratch_reuse();
  test_pruned_equals_full();
  test_edges(ctx);
  test_bad_args(ctx);
  test_warm_nonfinite(ctx);
  test_against_brute_force(ctx, 33, 70);
  test_against_brute_force(ctx, 128, 70);
  test_against_brute_force(ctx, 512, 70);
  test_against_brute_force(ctx, 1, 70);
  /* 19 panels of 16 in 10 groups: the first assignment prunes by centroid
   * distances */
  test_against_brute_force(ctx, 33, 300);
  test_against_brute_force(ctx, 128, 300);
  test_ties(ctx);
  /* the portable micro-kernels give the same partition of planted blobs */
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_PORTABLE), STSA_OK);
  test_planted(ctx, 64, 64, 101);
  test_against_brute_force(ctx, 33, 70);
  test_against_brute_force(ctx, 33, 300);
  test_ties(ctx);
  stsa_ctx_free(ctx);
  return tu_finish("test_kmeans");
}
