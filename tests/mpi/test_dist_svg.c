/*
 * test_dist_svg.c — the SVG session over ranks against one process's
 * session: two layers x two steps (dense_steps = dense_layers = 0, so every
 * call profiles and the head balancing of layer l, step 1 follows the kinds
 * of layer l, step 0), each on a fresh workload. Under Ulysses the output
 * shard, every head's kind and its profiling errors are bitwise those of
 * one process; under ring and hybrid layouts the kinds are equal and the
 * output within 1e-6 of the largest |out|. Report kinds, dense flag and
 * density are compared too, and every per-head field of the budget and of
 * method auto (bitwise under Ulysses; on rings, no bound), and one session
 * also runs the policy's dense calls (dense_layers = 1).
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate (dist_testutil.h)  \
                           */
#include "dist_testutil.h"

typedef struct svg_case {
  const char *name;
  int geom;
  int64_t B, H, D;
  stsa_dtype q_dtype, kv_dtype, out_dtype;
  tu_layout layout;
  dt_split split;
  int64_t dense_layers;
} svg_case;

enum { LAYERS = 2, STEPS = 2, MAX_BH = 64 };

static stsa_svg_config svg_config(const svg_case *c) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = dt_geometry(c->geom);
  cfg.heads = c->H;
  cfg.head_dim = c->D;
  cfg.density = 0.35;
  cfg.dense_steps = 0;
  cfg.dense_layers = c->dense_layers;
  cfg.sample_rows = 16;
  cfg.sink_frames = 1;
  cfg.seed = 7;
  cfg.steps = STEPS;
  cfg.layers = LAYERS;
  return cfg;
}

/* The report's arrays of the budget and of method auto. */
typedef struct report_extra {
  float est[MAX_BH], density[MAX_BH], top_p[MAX_BH];
  uint8_t budget[MAX_BH], choice[MAX_BH], reason[MAX_BH];
  float cand[2][MAX_BH * STSA_AUTO_CANDIDATE_COUNT_];
} report_extra;

/* A report over x's arrays, full of a sentinel (0xEE bytes) that no session
 * writes. */
static stsa_svg_report report_with(report_extra *x) {
  memset(x, 0xEE, sizeof *x);
  stsa_svg_report r = STSA_INIT(stsa_svg_report);
  r.est_error = x->est, r.head_density = x->density, r.head_top_p = x->top_p;
  r.budget = x->budget, r.choice = x->choice, r.choice_reason = x->reason;
  r.cand_density = x->cand[0], r.cand_bound = x->cand[1];
  return r;
}

/* Compares one call's reports (every rank has every head's kind). */
static void compare_reports(const stsa_svg_report *ref, const stsa_svg_report *got,
                            int64_t BH, int exact) {
  DT_CHECK(got->dense == ref->dense, "report dense %d, one process %d", got->dense,
           ref->dense);
  DT_CHECK(fabs(got->density - ref->density) <= 1e-12,
           "report density %.17g, one process %.17g", got->density, ref->density);
  int64_t kinds = 0, mse = 0, first = -1;
  for (int64_t i = 0; i < BH; i++) {
    if (got->kinds[i] != ref->kinds[i] && kinds++ == 0)
      first = i;
    const double ds = fabs(got->mse_spatial[i] - ref->mse_spatial[i]);
    const double dtm = fabs(got->mse_temporal[i] - ref->mse_temporal[i]);
    const double tol = exact ? 0 : 1e-4 * (ref->mse_spatial[i] + ref->mse_temporal[i]);
    mse += !(ds <= tol && dtm <= tol);
  }
  DT_CHECK(kinds == 0,
           "%lld of %lld head kinds differ from one process; first: (b*H+h) %lld "
           "is %s, one process %s (mse spatial %g / temporal %g)",
           (long long)kinds, (long long)BH, (long long)first,
           first >= 0 ? stsa_head_kind_name(got->kinds[first]) : "-",
           first >= 0 ? stsa_head_kind_name(ref->kinds[first]) : "-",
           first >= 0 ? ref->mse_spatial[first] : 0.0,
           first >= 0 ? ref->mse_temporal[first] : 0.0);
  if (!ref->dense)
    DT_CHECK(mse == 0, "%lld of %lld heads' profiling errors differ from one process%s",
             (long long)mse, (long long)BH, exact ? " (bitwise)" : " (beyond 1e-4)");
  /* the budget's and auto's fields, each written (they start as 0xEE):
   * bitwise one process's under Ulysses; rings profile no bound (NaN, 0 for
   * a dense call) and report what one process's session reports otherwise */
  int64_t fields = 0;
  for (int64_t i = 0; i < BH; i++) {
    fields += got->budget[i] != ref->budget[i] || got->choice[i] != ref->choice[i] ||
              got->choice_reason[i] != ref->choice_reason[i] ||
              memcmp(&got->head_top_p[i], &ref->head_top_p[i], sizeof(float)) != 0;
    for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) {
      const int64_t j = i * STSA_AUTO_CANDIDATE_COUNT_ + c;
      fields += !isnan(got->cand_density[j]) || !isnan(got->cand_bound[j]) ||
                !isnan(ref->cand_density[j]) || !isnan(ref->cand_bound[j]);
    }
    if (exact)
      fields += memcmp(&got->est_error[i], &ref->est_error[i], sizeof(float)) != 0 ||
                memcmp(&got->head_density[i], &ref->head_density[i], sizeof(float)) != 0;
    else
      fields += ref->dense ? got->est_error[i] != 0.0f : !isnan(got->est_error[i]);
  }
  DT_CHECK(
      fields == 0,
      "%lld fields of the budget (est_error, head_density, budget, head_top_p) and of "
      "auto (choice, choice_reason, candidates) differ from one process",
      (long long)fields);
}

/* Runs a case on one layout; returns 0 when the library refused the layout
 * as unsupported on every rank (counted as a skip, printed once). */
static int run_case(stsa_dist *dist, stsa_dist_scheme scheme, int ulysses_degree,
                    const svg_case *c) {
  const int U = dt_expected_u(scheme, ulysses_degree, c->H);
  const int exact = U == dt_size; /* one ring group: whole heads, bitwise */
  const stsa_svg_config cfg = svg_config(c);
  dt_set_case("svg %s %s U=%d np%d (create)", c->name, stsa_dist_scheme_name(scheme), U,
              dt_size);
  stsa_svg *svg = NULL;
  stsa_status st = stsa_svg_create(dt_ctx, &cfg, &svg);
  DT_CHECK(st == STSA_OK, "single-process stsa_svg_create: %s",
           stsa_ctx_last_error(dt_ctx));
  stsa_dist_svg *dsvg = NULL;
  st = stsa_dist_svg_create(dist, &cfg, &dsvg);
  DT_CHECK_STATUS(st, STSA_OK, dist);
  int supported = 1;
  const int64_t BH = c->B * c->H;
  for (int64_t step = 0; svg && dsvg && supported && step < STEPS; step++)
    for (int64_t layer = 0; supported && layer < LAYERS; layer++) {
      dt_set_case(
          "svg %s %s U=%d np%d layer %lld step %lld: B %lld H %lld D %lld, q %s kv %s "
          "out %s, %s, %s split",
          c->name, stsa_dist_scheme_name(scheme), U, dt_size, (long long)layer,
          (long long)step, (long long)c->B, (long long)c->H, (long long)c->D,
          stsa_dtype_name(c->q_dtype), stsa_dtype_name(c->kv_dtype),
          stsa_dtype_name(c->out_dtype), tu_layout_name(c->layout),
          dt_split_name(c->split));
      dt_problem p;
      dt_problem_make(&p, &cfg.geometry, 0, c->B, c->H, c->D, c->q_dtype, c->kv_dtype,
                      100 + 10 * (uint64_t)step + (uint64_t)layer);
      stsa_tensor ref = tu_sentinel_tensor(c->out_dtype, TU_BSHD, p.B, p.S, p.H, p.D);
      stsa_head_kind rk[MAX_BH], gk[MAX_BH];
      float rms[MAX_BH], rmt[MAX_BH], gms[MAX_BH], gmt[MAX_BH];
      report_extra rx, gx;
      stsa_svg_report rrep = report_with(&rx), grep = report_with(&gx);
      rrep.kinds = rk, rrep.mse_spatial = rms, rrep.mse_temporal = rmt;
      grep.kinds = gk, grep.mse_spatial = gms, grep.mse_temporal = gmt;
      st = stsa_svg_attention(svg, layer, step, &p.q, &p.k, &p.v, &ref, &rrep);
      DT_CHECK(st == STSA_OK, "single-process stsa_svg_attention: %s",
               stsa_ctx_last_error(dt_ctx));
      DT_CHECK(rrep.dense == (layer < c->dense_layers), "single-process dense flag %d",
               rrep.dense);
      dt_local l;
      dt_local_make(&l, &p, c->split, c->layout, c->out_dtype);
      int32_t head_rank[MAX_BH];
      stsa_dist_report drep = STSA_INIT(stsa_dist_report);
      drep.head_rank = head_rank;
      st = stsa_dist_svg_attention(dsvg, layer, step, &l.q, &l.k, &l.v, &l.out, &grep,
                                   &drep);
      /* a layout with one ring group is Ulysses and must never be refused */
      if (exact || !dt_all(st == STSA_ERR_UNSUPPORTED)) {
        DT_CHECK_STATUS(st, STSA_OK, dist);
        if (st == STSA_OK) {
          dt_compare(&ref, &l, exact);
          compare_reports(&rrep, &grep, BH, exact);
          dt_check_report(&drep, head_rank, c->H, U, 0);
        }
      } else {
        supported = 0;
        if (dt_rank == 0)
          printf("SKIP svg %s on %s U=%d np%d: %s\n", c->name,
                 stsa_dist_scheme_name(scheme), U, dt_size, stsa_dist_last_error(dist));
      }
      dt_local_free(&l);
      tu_free_tensor(&ref);
      dt_problem_free(&p);
    }
  stsa_dist_svg_free(dsvg);
  stsa_svg_free(svg);
  return supported;
}

int main(int argc, char **argv) {
  dt_init(&argc, &argv);
  const svg_case cases[] = {
      {"no-text", DT_GEOM_NONE, 1, 5, 32, STSA_F32, STSA_F32, STSA_F32, TU_BSHD,
       DT_SPLIT_EVEN, 0},
      {"prefix", DT_GEOM_PREFIX, 2, 12, 16, STSA_BF16, STSA_BF16, STSA_BF16, TU_BHSD,
       DT_SPLIT_RAMP, 0},
      {"suffix", DT_GEOM_SUFFIX, 1, 12, 32, STSA_F32, STSA_BF16, STSA_F32, TU_BHSD,
       DT_SPLIT_ONE, 0},
      {"suffix-dense-layer", DT_GEOM_SUFFIX, 2, 5, 16, STSA_BF16, STSA_BF16, STSA_F32,
       TU_BSHD, DT_SPLIT_RAMP, 1},
  };
  const struct {
    stsa_dist_scheme scheme;
    int u;
  } layouts[] = {{STSA_DIST_ULYSSES, 0},
                 {STSA_DIST_RING, 0},
                 {STSA_DIST_HYBRID, 2},
                 {STSA_DIST_HYBRID, 0}};
  int skipped = 0;
  for (size_t li = 0; li < sizeof layouts / sizeof layouts[0]; li++) {
    if (layouts[li].u && dt_size % layouts[li].u != 0)
      continue;
    stsa_dist *dist = dt_dist(layouts[li].scheme, layouts[li].u, 0);
    for (size_t i = 0; dist && i < sizeof cases / sizeof cases[0]; i++)
      skipped += !run_case(dist, layouts[li].scheme, layouts[li].u, &cases[i]);
    stsa_dist_free(dist);
  }
  if (dt_rank == 0 && skipped)
    printf("test_dist_svg: %d case(s) skipped as unsupported\n", skipped);
  return dt_finish("test_dist_svg");
}
