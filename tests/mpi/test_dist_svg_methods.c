/*
 * test_dist_svg_methods.c — methods svg2 and auto over ranks, with and
 * without an error budget, under Ulysses layouts (ULYSSES, and HYBRID with
 * U = P: no ring). These methods keep each head on one rank for good, in
 * the contiguous split (head h on member h * U / H), so each rank's local
 * session sees the same heads every call and its SVG2 centroids stay its
 * own. The reference is therefore one process's sessions, one per member,
 * each created over just that member's block of heads and called on the
 * same data in the same sequence (two layers x two steps: step 1 runs the
 * SVG2 warm path from step 0's centroids). Each rank's output shard must
 * be bitwise those sessions' outputs, and the gathered report (every field
 * of stsa_svg_report but the times) the concatenation of their reports:
 * per-head arrays bitwise, in head order, cold and cluster counts their
 * maxima, density their mean within rounding. The report's arrays start
 * full of a sentinel, so a field left unwritten shows. With H = 3 on four
 * ranks one rank holds no head. Had the heads been balanced by cost (or
 * placed otherwise), a head would meet another session's centroids and
 * its output and report would differ (tried: see the commit message).
 * Ring layouts refuse these methods: test_dist_errors.c.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate (dist_testutil.h)  \
                           */
#include "dist_testutil.h"

enum { LAYERS = 2, STEPS = 2, MAX_BH = 16, C = STSA_AUTO_CANDIDATE_COUNT_ };

typedef struct method_case {
  stsa_svg_method method;
  double budget, top_p;
  int64_t B, H;
} method_case;

/* One report's arrays, for B * H heads. */
typedef struct report_arrays {
  stsa_head_kind kinds[MAX_BH];
  float mse_s[MAX_BH], mse_t[MAX_BH], est[MAX_BH], density[MAX_BH], top_p[MAX_BH];
  uint8_t budget[MAX_BH], choice[MAX_BH], reason[MAX_BH];
  float cand_density[MAX_BH * C], cand_bound[MAX_BH * C];
} report_arrays;

/* A report over arrays a, every entry a sentinel no session writes. */
static stsa_svg_report report_on(report_arrays *a) {
  memset(a, 0xEE, sizeof *a); /* floats -3.7e28, bytes 238 */
  for (int i = 0; i < MAX_BH; i++)
    a->kinds[i] = (stsa_head_kind)77;
  stsa_svg_report r = STSA_INIT(stsa_svg_report);
  r.kinds = a->kinds, r.mse_spatial = a->mse_s, r.mse_temporal = a->mse_t;
  r.est_error = a->est, r.head_density = a->density, r.head_top_p = a->top_p;
  r.budget = a->budget, r.choice = a->choice, r.choice_reason = a->reason;
  r.cand_density = a->cand_density, r.cand_bound = a->cand_bound;
  r.cold = -1, r.q_clusters = r.kv_clusters = -1;
  return r;
}

static stsa_svg_config method_config(const method_case *c, int64_t heads) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = dt_geometry(DT_GEOM_SUFFIX);
  cfg.heads = heads;
  cfg.head_dim = 16;
  cfg.density = 0.35;
  cfg.sample_rows = 16;
  cfg.sink_frames = 1;
  cfg.seed = 5;
  cfg.steps = STEPS;
  cfg.layers = LAYERS;
  cfg.method = c->method;
  cfg.max_rel_error = c->budget;
  cfg.svg2.top_p = c->top_p;
  return cfg;
}

/* Heads [lo, hi) of t, as a view. */
static stsa_tensor head_block(const stsa_tensor *t, int64_t lo, int64_t hi) {
  stsa_tensor v = *t;
  v.data = (char *)t->data + (size_t)(lo * t->stride[2]) * stsa_dtype_size(t->dtype);
  v.shape[2] = hi - lo;
  return v;
}

/* Member m's block of heads in the contiguous split: h with h * U / H == m. */
static void block_of(int m, int U, int64_t H, int64_t *lo, int64_t *hi) {
  *lo = H, *hi = 0;
  for (int64_t h = 0; h < H; h++)
    if (h * U / H == m) {
      *lo = h < *lo ? h : *lo;
      *hi = h + 1;
    }
  if (*lo > *hi)
    *lo = *hi = 0;
}

/* Float arrays equal bit for bit (NaN where NaN). */
static int64_t float_diffs(const float *a, const float *b, int64_t n, int64_t *first) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof *a) != 0 && d++ == 0)
      *first = i;
  return d;
}

#define CHECK_FLOATS(name, got, want, n)                                                 \
  do {                                                                                   \
    int64_t at_ = -1, d_ = float_diffs(got, want, n, &at_);                              \
    DT_CHECK(d_ == 0,                                                                    \
             "report %s: %lld of %lld differ from the blocks' sessions; first "          \
             "[%lld] %.9g, expected %.9g",                                               \
             name, (long long)d_, (long long)(n), (long long)at_,                        \
             d_ ? (double)(got)[at_] : 0.0, d_ ? (double)(want)[at_] : 0.0);             \
  } while (0)

/* The gathered report against the blocks' reports, concatenated into want
 * (its scalars: the blocks' maxima, density their mean). */
static void compare_reports(const stsa_svg_report *want, const report_arrays *w,
                            const stsa_svg_report *got, const report_arrays *g,
                            int64_t BH) {
  DT_CHECK(got->dense == want->dense && got->method == want->method &&
               got->heads == want->heads,
           "report dense %d method %d heads %lld; expected %d, %d, %lld", got->dense,
           got->method, (long long)got->heads, want->dense, want->method,
           (long long)want->heads);
  DT_CHECK(fabs(got->density - want->density) <= 1e-12,
           "report density %.17g, the blocks' %.17g", got->density, want->density);
  DT_CHECK(got->cold == want->cold && got->q_clusters == want->q_clusters &&
               got->kv_clusters == want->kv_clusters,
           "report cold %d, clusters %lld x %lld; expected %d, %lld x %lld", got->cold,
           (long long)got->q_clusters, (long long)got->kv_clusters, want->cold,
           (long long)want->q_clusters, (long long)want->kv_clusters);
  int64_t kinds = 0, bytes = 0;
  for (int64_t i = 0; i < BH; i++) {
    kinds += g->kinds[i] != w->kinds[i];
    bytes += g->budget[i] != w->budget[i] || g->choice[i] != w->choice[i] ||
             g->reason[i] != w->reason[i];
  }
  DT_CHECK(kinds == 0, "report: %lld of %lld kinds differ", (long long)kinds,
           (long long)BH);
  DT_CHECK(bytes == 0, "report: %lld of %lld heads' budget, choice or reason differ",
           (long long)bytes, (long long)BH);
  CHECK_FLOATS("mse_spatial", g->mse_s, w->mse_s, BH);
  CHECK_FLOATS("mse_temporal", g->mse_t, w->mse_t, BH);
  CHECK_FLOATS("est_error", g->est, w->est, BH);
  CHECK_FLOATS("head_density", g->density, w->density, BH);
  CHECK_FLOATS("head_top_p", g->top_p, w->top_p, BH);
  CHECK_FLOATS("cand_density", g->cand_density, w->cand_density, BH * C);
  CHECK_FLOATS("cand_bound", g->cand_bound, w->cand_bound, BH * C);
}

/* Entry i_blk of a block's report r as entry i of the whole one, w. */
static void place_entry(const report_arrays *r, int64_t i_blk, report_arrays *w,
                        int64_t i) {
  w->kinds[i] = r->kinds[i_blk];
  w->mse_s[i] = r->mse_s[i_blk], w->mse_t[i] = r->mse_t[i_blk];
  w->est[i] = r->est[i_blk], w->density[i] = r->density[i_blk];
  w->top_p[i] = r->top_p[i_blk];
  w->budget[i] = r->budget[i_blk], w->choice[i] = r->choice[i_blk];
  w->reason[i] = r->reason[i_blk];
  memcpy(w->cand_density + i * C, r->cand_density + i_blk * C, sizeof(float) * C);
  memcpy(w->cand_bound + i * C, r->cand_bound + i_blk * C, sizeof(float) * C);
}

static void run_case(stsa_dist_scheme scheme, int ulysses_degree, const method_case *c) {
  const int U = dt_size; /* Ulysses layouts only */
  const int64_t B = c->B, H = c->H, BH = B * H;
  stsa_dist *dist = dt_dist(scheme, ulysses_degree, 0);
  const stsa_svg_config cfg = method_config(c, H);
  stsa_dist_svg *dsvg = NULL;
  dt_set_case("%s budget %g on %s np%d (create)", stsa_svg_method_name(c->method),
              c->budget, stsa_dist_scheme_name(scheme), dt_size);
  stsa_status st = dist ? stsa_dist_svg_create(dist, &cfg, &dsvg) : STSA_ERR_NULL_ARG;
  DT_CHECK_STATUS(st, STSA_OK, dist);
  /* one process: a session per member over its block of heads */
  stsa_svg *blocks[64] = {NULL};
  int64_t lo[64], hi[64];
  for (int m = 0; m < U; m++) {
    block_of(m, U, H, &lo[m], &hi[m]);
    const stsa_svg_config bc = method_config(c, hi[m] - lo[m]);
    if (hi[m] > lo[m])
      DT_CHECK(stsa_svg_create(dt_ctx, &bc, &blocks[m]) == STSA_OK,
               "stsa_svg_create over heads [%lld, %lld): %s", (long long)lo[m],
               (long long)hi[m], stsa_ctx_last_error(dt_ctx));
  }
  for (int64_t step = 0; dsvg && step < STEPS; step++)
    for (int64_t layer = 0; layer < LAYERS; layer++) {
      dt_set_case("%s budget %g top-p %g B %lld H %lld on %s np%d, layer %lld step %lld",
                  stsa_svg_method_name(c->method), c->budget, c->top_p, (long long)B,
                  (long long)H, stsa_dist_scheme_name(scheme), dt_size, (long long)layer,
                  (long long)step);
      dt_problem p;
      dt_problem_make(&p, &cfg.geometry, 0, B, H, cfg.head_dim, STSA_F32, STSA_F32,
                      300 + 10 * (uint64_t)step + (uint64_t)layer);
      stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, p.S, H, p.D);
      report_arrays want_a, got_a;
      stsa_svg_report want = report_on(&want_a), got = report_on(&got_a);
      double kept = 0;
      want.cold = 0, want.q_clusters = want.kv_clusters = 0;
      for (int m = 0; m < U; m++) {
        if (!blocks[m])
          continue;
        const int64_t n = hi[m] - lo[m];
        const stsa_tensor q = head_block(&p.q, lo[m], hi[m]),
                          k = head_block(&p.k, lo[m], hi[m]),
                          v = head_block(&p.v, lo[m], hi[m]),
                          o = head_block(&ref, lo[m], hi[m]);
        report_arrays ba;
        stsa_svg_report br = report_on(&ba);
        st = stsa_svg_attention(blocks[m], layer, step, &q, &k, &v, &o, &br);
        DT_CHECK(st == STSA_OK, "one process, heads [%lld, %lld): %s", (long long)lo[m],
                 (long long)hi[m], stsa_ctx_last_error(dt_ctx));
        for (int64_t b = 0; b < B; b++)
          for (int64_t i = 0; i < n; i++)
            place_entry(&ba, b * n + i, &want_a, b * H + lo[m] + i);
        want.dense = br.dense, want.method = br.method;
        kept += br.density * (double)(B * n);
        want.cold = br.cold > want.cold ? br.cold : want.cold;
        want.q_clusters =
            br.q_clusters > want.q_clusters ? br.q_clusters : want.q_clusters;
        want.kv_clusters =
            br.kv_clusters > want.kv_clusters ? br.kv_clusters : want.kv_clusters;
      }
      want.heads = BH;
      want.density = kept / (double)BH;
      dt_local l;
      dt_local_make(&l, &p, DT_SPLIT_RAMP, TU_BHSD, STSA_F32);
      int32_t head_rank[MAX_BH];
      stsa_dist_report drep = STSA_INIT(stsa_dist_report);
      drep.head_rank = head_rank;
      stsa_run_info ran = STSA_INIT(stsa_run_info);
      ran.arith = (stsa_arith)99; /* a sentinel: written by a rank with heads */
      got.run = &ran;
      st = stsa_dist_svg_attention(dsvg, layer, step, &l.q, &l.k, &l.v, &l.out, &got,
                                   &drep);
      DT_CHECK_STATUS(st, STSA_OK, dist);
      if (st == STSA_OK) {
        dt_compare(&ref, &l, 1);
        compare_reports(&want, &want_a, &got, &got_a, BH);
        dt_check_report(&drep, head_rank, H, U, 1);
        DT_CHECK((ran.arith != (stsa_arith)99) == (drep.local_heads > 0),
                 "report run written %d, local heads %lld", ran.arith != (stsa_arith)99,
                 (long long)drep.local_heads);
        for (int64_t h = 0; h < H; h++)
          DT_CHECK(head_rank[h] == h * U / H,
                   "head %lld ran on member %d, expected %lld (the contiguous split)",
                   (long long)h, head_rank[h], (long long)(h * U / H));
      }
      dt_local_free(&l);
      tu_free_tensor(&ref);
      dt_problem_free(&p);
    }
  for (int m = 0; m < U; m++)
    stsa_svg_free(blocks[m]);
  stsa_dist_svg_free(dsvg);
  stsa_dist_free(dist);
}

int main(int argc, char **argv) {
  dt_init(&argc, &argv);
  const method_case cases[] = {
      {STSA_SVG_METHOD_SVG2, 0, 0.9, 1, 5}, {STSA_SVG_METHOD_SVG2, 0.05, 0.9, 1, 5},
      {STSA_SVG_METHOD_AUTO, 0, 0.9, 1, 5}, {STSA_SVG_METHOD_AUTO, 0.05, 0.9, 1, 5},
      {STSA_SVG_METHOD_SVG2, 0.1, 0, 2, 3}, {STSA_SVG_METHOD_AUTO, 0, 0, 2, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(STSA_DIST_ULYSSES, 0, &cases[i]);
    if (dt_size > 1 && i % 2 == 0) /* one ring group: a Ulysses layout too */
      run_case(STSA_DIST_HYBRID, dt_size, &cases[i]);
  }
  return dt_finish("test_dist_svg_methods");
}
