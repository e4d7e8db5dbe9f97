/*
 * test_svg_auto.c — method auto: the per-head choice on hand-made
 * candidates (the cheapest within a budget, dense when none meets it, the
 * lowest bound without one, candidates not evaluated never chosen), and
 * the session end to end on the built-in workload's spatial, temporal and
 * semantic heads: without a budget each kind of head runs its kind's
 * candidate and auto's bound is never above SVG's nor SVG2's at that
 * density; under budgets every head's bound is within the budget (or it
 * runs dense), its density is at most that of whichever of SVG and SVG2
 * met the budget, its SVG kinds try no wider level above the density of
 * SVG2 within it, and its true error against dense stays near the budget.
 * A head whose check fails climbs to its next candidate, or to an SVG level
 * it had not tried, or runs dense.
 * The recheck leaves the heads it is told to exempt untouched; SVG2's ladder profiled in
 * the bound's first pass gives what two passes give, bitwise. A warm call at the last
 * call's budget keeps what the heads ran there, at most three calls in a row, and a kept
 * head that misses climbs.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/dispatch.h"
#include "mask_util.h"
#include "svg/auto_pick.h"
#include "svg/profile.h"
#include "svg/session_internal.h"
#include "svg/svg2_internal.h"
#include "testutil.h"

enum { SP = STSA_AUTO_SPATIAL, TE = STSA_AUTO_TEMPORAL, S2 = STSA_AUTO_SVG2 };

/* ---- the choice ----------------------------------------------------------- */
static void check_pick(const char *what, double sp_d, double sp_b, double te_d,
                       double te_b, double s2_d, double s2_b, double budget, int want,
                       int want_reason) {
  const double density[STSA_AUTO_CANDIDATE_COUNT_] = {sp_d, te_d, s2_d, 0.97};
  const double bound[STSA_AUTO_CANDIDATE_COUNT_] = {sp_b, te_b, s2_b, 0};
  uint8_t reason = 255;
  const int got = stsa_auto_pick(density, bound, budget, &reason);
  CHECK(got == want && reason == want_reason, "%s: picked %s (%s), expected %s (%s)",
        what, stsa_auto_candidate_name(got), stsa_auto_reason_name(reason),
        stsa_auto_candidate_name(want), stsa_auto_reason_name(want_reason));
}

/* The climb's order: what met the budget, cheapest first, dense never. */
static void test_order(void) {
  const double density[STSA_AUTO_CANDIDATE_COUNT_] = {0.3, 0.1, 0.2, 0.05};
  const double bound[STSA_AUTO_CANDIDATE_COUNT_] = {0.04, 0.06, 0.01, 0};
  int order[STSA_AUTO_CANDIDATE_COUNT_] = {-1, -1, -1, -1};
  CHECK(stsa_auto_order(density, bound, 0.05, order) == 2 && order[0] == S2 &&
            order[1] == SP,
        "order at 0.05: %d %d", order[0], order[1]);
  const double nan_bound[STSA_AUTO_CANDIDATE_COUNT_] = {NAN, 0.01, 0.01, 0};
  CHECK(stsa_auto_order(density, nan_bound, 0.05, order) == 2 && order[0] == TE &&
            order[1] == S2,
        "order with a NaN: %d %d", order[0], order[1]);
}

static void test_pick(void) {
  check_pick("cheapest within", 0.2, 0.04, 0.1, 0.06, 0.3, 0.01, 0.05, SP,
             STSA_AUTO_CHEAPEST);
  check_pick("cheaper svg2", 0.2, 0.04, 0.1, 0.06, 0.15, 0.05, 0.05, S2,
             STSA_AUTO_CHEAPEST);
  check_pick("density tie: lower bound", 0.2, 0.04, 0.2, 0.03, 0.5, 0.5, 0.05, TE,
             STSA_AUTO_CHEAPEST);
  check_pick("none met", 0.2, 0.4, 0.2, 0.3, 0.5, 0.5, 0.05, STSA_AUTO_DENSE,
             STSA_AUTO_NONE_MET);
  check_pick("NaN never chosen", 0.2, NAN, NAN, NAN, 0.3, 0.02, 0.05, S2,
             STSA_AUTO_CHEAPEST);
  check_pick("no budget: lowest bound", 0.2, 0.4, 0.2, 0.3, 0.25, 0.1, 0, S2,
             STSA_AUTO_LOWEST);
  check_pick("no budget: dense is no candidate", 0.2, 0.4, 0.2, 0.3, 0.25, 0.5, 0, TE,
             STSA_AUTO_LOWEST);
  check_pick("no budget, bound tie: lower density", 0.2, 0.3, 0.1, 0.3, 0.25, 0.5, 0, TE,
             STSA_AUTO_LOWEST);
  check_pick("no budget, nothing evaluated", 0.2, NAN, 0.2, NAN, 0.25, NAN, 0,
             STSA_AUTO_DENSE, STSA_AUTO_LOWEST);
  CHECK(!strcmp(stsa_svg_method_name(STSA_SVG_METHOD_AUTO), "auto") &&
            !strcmp(stsa_auto_candidate_name(STSA_AUTO_CANDIDATE_COUNT_), "unknown") &&
            !strcmp(stsa_auto_reason_name(STSA_AUTO_REASON_COUNT_), "unknown"),
        "names");
}

/* ---- the session ---------------------------------------------------------- */
#define H 4
static const stsa_geometry GEO = {6, 12, 16, 0, 0, STSA_TEXT_NONE};
static const stsa_head_kind KINDS[H] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SPATIAL,
                                        STSA_HEAD_TEMPORAL, STSA_HEAD_SEMANTIC};

typedef struct inputs {
  stsa_tensor q, k, v, dense;
  int64_t N;
} inputs;

/* One call's per-head outcome. */
typedef struct outcome {
  float est[H], dens[H], cand_d[H * STSA_AUTO_CANDIDATE_COUNT_],
      cand_b[H * STSA_AUTO_CANDIDATE_COUNT_];
  uint8_t budget[H], choice[H], reason[H];
  double rel[H];   /* true relative L2 error against dense */
  float level0[2]; /* the session's spatial and temporal densities (level 0) */
} outcome;

static stsa_svg_config config(int method) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = GEO;
  c.heads = H;
  c.head_dim = 64;
  c.density = 0.2;
  c.sample_rows = 48;
  c.sink_frames = 1;
  c.seed = 7;
  c.method = method;
  c.svg2.q_clusters = 16;
  c.svg2.kv_clusters = 40;
  c.svg2.top_p = 0; /* SVG2 keeps `density` of the keys: candidates at one density */
  return c;
}

/* One call of svg at (layer 0, step) on in under budget into *res, with
 * each head's true error against in->dense. */
static void call(stsa_svg *svg, const inputs *in, int64_t step, double budget,
                 outcome *res) {
  stsa_ctx *ctx = svg->ctx;
  const int method = svg->cfg.method;
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in->N, H, 64);
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.est_error = res->est;
  rep.head_density = res->dens;
  rep.budget = res->budget;
  rep.cand_density = res->cand_d;
  rep.cand_bound = res->cand_b;
  rep.choice = res->choice;
  rep.choice_reason = res->reason;
  const stsa_svg_call opts = {sizeof opts, budget};
  CHECK_STATUS(
      stsa_svg_attention_ex(svg, 0, step, &in->q, &in->k, &in->v, &o, &opts, &rep),
      STSA_OK);
  CHECK(!stsa_ctx_last_error(ctx)[0], "%s: %s", stsa_svg_method_name(method),
        stsa_ctx_last_error(ctx));
  res->level0[0] = (float)svg->windows.density_spatial;
  res->level0[1] = (float)svg->windows.density_temporal;
  for (int h = 0; h < H; h++) {
    double e = 0, e0 = 0;
    for (int64_t i = 0; i < in->N; i++)
      for (int64_t d = 0; d < 64; d++) {
        double x = tu_load(o.data, STSA_F32, tu_offset(&o, 0, i, h, d));
        double y = tu_load(in->dense.data, STSA_F32, tu_offset(&in->dense, 0, i, h, d));
        e += (x - y) * (x - y);
        e0 += y * y;
      }
    res->rel[h] = sqrt(e / e0);
  }
  tu_free_tensor(&o);
}

/* One cold call of a session of method under budget. */
static void run(stsa_ctx *ctx, const inputs *in, int method, double budget,
                outcome *res) {
  stsa_svg_config cfg = config(method);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  call(svg, in, 0, budget, res);
  stsa_svg_free(svg);
}

/* No budget: each kind of head runs its kind's candidate, and auto's bound
 * is the lowest of the candidates' (SVG's and SVG2's as a budget they
 * cannot miss makes them bound: method svg under it routes on the drawn
 * rows as auto does, so its head runs what it runs without a budget,
 * where the routing rows route, and bounds it exactly as auto bounds that
 * kind: both draw the same rows and bound them alike). */
static void check_no_budget(stsa_ctx *ctx, const inputs *in) {
  outcome a, svg, svg_routing, s2;
  run(ctx, in, STSA_SVG_METHOD_AUTO, 0, &a);
  run(ctx, in, STSA_SVG_METHOD_SVG, 1e3, &svg);
  run(ctx, in, STSA_SVG_METHOD_SVG, 0, &svg_routing);
  run(ctx, in, STSA_SVG_METHOD_SVG2, 1e3, &s2);
  for (int h = 0; h < H; h++)
    CHECK(svg_routing.choice[h] == svg.choice[h] && svg_routing.dens[h] == svg.dens[h] &&
              svg.est[h] == a.cand_b[h * STSA_AUTO_CANDIDATE_COUNT_ + svg.choice[h]],
          "head %d: svg ran %s at %.3f (no budget: %s at %.3f) with bound %.4f, auto's "
          "bound of that kind %.4f",
          h, stsa_auto_candidate_name(svg.choice[h]), (double)svg.dens[h],
          stsa_auto_candidate_name(svg_routing.choice[h]), (double)svg_routing.dens[h],
          (double)svg.est[h],
          (double)a.cand_b[h * STSA_AUTO_CANDIDATE_COUNT_ + svg.choice[h]]);
  const int want[H] = {S2, SP, TE, S2};
  for (int h = 0; h < H; h++) {
    const float *cb = a.cand_b + h * STSA_AUTO_CANDIDATE_COUNT_;
    const float *cd = a.cand_d + h * STSA_AUTO_CANDIDATE_COUNT_;
    printf("no budget head %d (%s): spatial %.3f/%.4f temporal %.3f/%.4f svg2 "
           "%.3f/%.4f -> %s (%s), true %.4f\n",
           h, stsa_head_kind_name(KINDS[h]), (double)cd[0], (double)cb[0], (double)cd[1],
           (double)cb[1], (double)cd[2], (double)cb[2],
           stsa_auto_candidate_name(a.choice[h]), stsa_auto_reason_name(a.reason[h]),
           a.rel[h]);
    CHECK(a.choice[h] == want[h] && a.reason[h] == STSA_AUTO_LOWEST,
          "head %d (%s): auto chose %s, expected %s", h, stsa_head_kind_name(KINDS[h]),
          stsa_auto_candidate_name(a.choice[h]), stsa_auto_candidate_name(want[h]));
    CHECK(a.est[h] == cb[a.choice[h]] && a.dens[h] == cd[a.choice[h]],
          "head %d: reported %.4f at %.3f is the chosen candidate's", h, (double)a.est[h],
          (double)a.dens[h]);
    CHECK(a.est[h] <= svg.est[h] && a.est[h] <= s2.est[h],
          "head %d: auto's bound %.4f above svg's %.4f or svg2's %.4f", h,
          (double)a.est[h], (double)svg.est[h], (double)s2.est[h]);
    CHECK(cd[STSA_AUTO_DENSE] > 0.99f && cb[STSA_AUTO_DENSE] == 0,
          "head %d: dense candidate %.3f / %.3f", h, (double)cd[3], (double)cb[3]);
  }
}

/* Under a budget: within it at the lowest density of those that met it,
 * SVG's wider levels tried only below what met it. How many of the heads'
 * SVG kinds missed at level 0 and tried no wider level, SVG2 within it. */
static int check_budget(stsa_ctx *ctx, const inputs *in, double budget) {
  int capped = 0;
  outcome a, svg, s2;
  run(ctx, in, STSA_SVG_METHOD_AUTO, budget, &a);
  run(ctx, in, STSA_SVG_METHOD_SVG, budget, &svg);
  run(ctx, in, STSA_SVG_METHOD_SVG2, budget, &s2);
  for (int h = 0; h < H; h++) {
    printf("budget %.3g head %d (%s): auto %s %.3f/%.4f true %.4f | svg %.3f/%.4f | "
           "svg2 %.3f/%.4f\n",
           budget, h, stsa_head_kind_name(KINDS[h]),
           stsa_auto_candidate_name(a.choice[h]), (double)a.dens[h], (double)a.est[h],
           a.rel[h], (double)svg.dens[h], (double)svg.est[h], (double)s2.dens[h],
           (double)s2.est[h]);
    const int dense = a.choice[h] == STSA_AUTO_DENSE;
    /* recheck: the choice's bound on rows drawn after it missed: the head
     * climbed to its next candidate (checked again) or ran dense */
    const int rechecked = a.reason[h] == STSA_AUTO_RECHECK;
    CHECK(dense ? a.reason[h] == STSA_AUTO_NONE_MET ||
                      a.reason[h] == STSA_AUTO_CHEAPEST || rechecked
                : a.est[h] <= budget && (a.reason[h] == STSA_AUTO_CHEAPEST || rechecked),
          "budget %.3g head %d: %s with bound %.4f (%s)", budget, h,
          stsa_auto_candidate_name(a.choice[h]), (double)a.est[h],
          stsa_auto_reason_name(a.reason[h]));
    for (int m = 0; m < 2; m++) {
      const outcome *o = m ? &s2 : &svg;
      if (o->budget[h] != STSA_BUDGET_DENSE && !rechecked)
        CHECK(a.dens[h] <= o->dens[h] + 1e-6f,
              "budget %.3g head %d: auto's density %.3f above %s's %.3f within it",
              budget, h, (double)a.dens[h], m ? "svg2" : "svg", (double)o->dens[h]);
    }
    CHECK(a.rel[h] <= 2 * budget + 1e-6, "budget %.3g head %d: true error %.4f", budget,
          h, a.rel[h]);
    /* an SVG kind tries a wider level only below the density of SVG2 and
     * dense where they met the budget (level_cap): such a level would
     * never be chosen. Its candidate reports the widest level it tried. */
    const float *cd = a.cand_d + h * STSA_AUTO_CANDIDATE_COUNT_,
                *cb = a.cand_b + h * STSA_AUTO_CANDIDATE_COUNT_;
    const float cap =
        cb[S2] <= budget ? fminf(cd[S2], cd[STSA_AUTO_DENSE]) : cd[STSA_AUTO_DENSE];
    for (int i = 0; i < 2; i++) {
      capped += cd[i] == a.level0[i] && cb[i] > budget && cb[S2] <= budget;
      CHECK(cd[i] == a.level0[i] || cd[i] <= cap,
            "budget %.3g head %d: %s tried a level at %.3f, above svg2's or dense's "
            "%.3f within it",
            budget, h, stsa_auto_candidate_name(i), (double)cd[i], (double)cap);
    }
  }
  return capped;
}

/* Head h's true relative L2 error in o against dense. */
static double true_rel(const inputs *in, const stsa_tensor *o, int h) {
  double e = 0, e0 = 0;
  for (int64_t i = 0; i < in->N; i++)
    for (int64_t d = 0; d < 64; d++) {
      double x = tu_load(o->data, STSA_F32, tu_offset(o, 0, i, h, d));
      double y = tu_load(in->dense.data, STSA_F32, tu_offset(&in->dense, 0, i, h, d));
      e += (x - y) * (x - y);
      e0 += y * y;
    }
  return sqrt(e / e0);
}

/* The recheck's climb: the spatial head (1) made to run the temporal band,
 * which its recheck fails. Case 1: with spatial as the next candidate up
 * it climbs there, is checked again and kept, within the budget. Case 0:
 * with no step, but SVG's wider levels untried, it climbs to the first of
 * them that meets the budget on rows of its own (stsa_svg_extend_climb),
 * checked again and kept. Case 2: with no step and every level tried, it
 * runs dense. */
static void test_climb(stsa_ctx *ctx, const inputs *in) {
  const double budget = 0.2; /* the spatial head's level 0 meets it (check_budget) */
  for (int c = 0; c < 3; c++) {
    const int steps = c == 1;
    stsa_svg_config cfg = config(STSA_SVG_METHOD_AUTO);
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
    stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in->N, H, 64);
    const stsa_svg_call call = {sizeof call, budget};
    CHECK_STATUS(
        stsa_svg_attention_ex(svg, 0, 0, &in->q, &in->k, &in->v, &o, &call, NULL),
        STSA_OK);
    head_run hr[H];
    auto_climb climb[H];
    memset(climb, 0, sizeof climb);
    stsa_head_kind kinds[H];
    for (int h = 0; h < H; h++) {
      hr[h] = stsa_svg_dense_run(svg, STSA_BUDGET_DENSE);
      kinds[h] = KINDS[h];
    }
    hr[1] = (head_run){.plan = svg->plan_temporal,
                       .density = 0.2,
                       .budget = STSA_BUDGET_NONE,
                       .choice = STSA_AUTO_TEMPORAL,
                       .reason = STSA_AUTO_CHEAPEST};
    kinds[1] = STSA_HEAD_TEMPORAL;
    climb[1].steps = steps;
    climb[1].tried[0] = climb[1].tried[1] = c == 2 ? 0xff : 1; /* level 0 only */
    climb[1].step[0] = (head_run){.plan = svg->plan_spatial,
                                  .density = 0.2,
                                  .budget = STSA_BUDGET_NONE,
                                  .choice = STSA_AUTO_SPATIAL,
                                  .reason = STSA_AUTO_RECHECK};
    CHECK_STATUS(stsa_svg_run_head(svg, 0, 1, hr[1].plan, &in->q, &in->k, &in->v, &o),
                 STSA_OK);
    const double first = true_rel(in, &o, 1);
    CHECK_STATUS(stsa_svg_recheck_heads(svg, 99, 0, &in->q, &in->k, &in->v, &o, budget,
                                        NULL, hr, climb, kinds),
                 STSA_OK);
    const double rel = true_rel(in, &o, 1);
    printf("climb, case %d: temporal on the spatial head %.4f -> %s (%s) at %.3f, bound "
           "%.4f true %.4f\n",
           c, first, stsa_auto_candidate_name(hr[1].choice),
           stsa_auto_reason_name(hr[1].reason), hr[1].density, (double)hr[1].est_error,
           rel);
    const int want = c < 2 ? STSA_AUTO_SPATIAL : STSA_AUTO_DENSE;
    CHECK(first > budget && hr[1].choice == want && hr[1].reason == STSA_AUTO_RECHECK &&
              hr[1].est_error <= budget && rel <= budget &&
              kinds[1] == (c < 2 ? STSA_HEAD_SPATIAL : STSA_HEAD_TEMPORAL),
          "climb, case %d: %s (%s), bound %.4f, true %.4f (first %.4f)", c,
          stsa_auto_candidate_name(hr[1].choice), stsa_auto_reason_name(hr[1].reason),
          (double)hr[1].est_error, rel, first);
    /* case 0: a wider level, raised, denser than what failed */
    CHECK(c != 0 || (hr[1].budget == STSA_BUDGET_RAISED && hr[1].density > 0.2 &&
                     climb[1].tried[0] != 1),
          "climb, case 0: %s at %.3f (budget action %d) is no wider level tried after "
          "the check",
          stsa_auto_candidate_name(hr[1].choice), hr[1].density, hr[1].budget);
    for (int h = 0; h < H; h++)
      stsa_svg_climb_free(&climb[h]);
    tu_free_tensor(&o);
    stsa_svg_free(svg);
  }
}

/* The recheck leaves a head it is told to exempt untouched (method svg2's
 * heads on their first step in a deferred call, session.c), and one whose
 * choice auto confirmed (RECALL_CONFIRMED), and checks the others. Every
 * head runs the temporal band, which the spatial and semantic heads fail:
 * checked, they run dense. A head whose layer remembers another choice
 * (RECALL_OTHER) is checked at half the miss chance: on the same rows its
 * bound reads higher. */
static void test_recheck_exempt(stsa_ctx *ctx, const inputs *in) {
  enum { D = 64, NONE, EXEMPT, CONFIRMED, OTHER, CASES };
  static const char *const name[CASES] = {[NONE] = "none exempt",
                                          [EXEMPT] = "every head exempt",
                                          [CONFIRMED] = "every head confirmed",
                                          [OTHER] = "every head recalls another"};
  const double budget = 0.05;
  stsa_svg_config cfg = config(STSA_SVG_METHOD_SVG2);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in->N, H, D);
  float passed[CASES][H];
  for (int c = NONE; c < CASES; c++) {
    const int exempting = c == EXEMPT || c == CONFIRMED;
    head_run hr[H];
    auto_climb climb[H];
    stsa_head_kind kinds[H];
    uint8_t exempt[H];
    memset(climb, 0, sizeof climb);
    for (int h = 0; h < H; h++) {
      hr[h] = (head_run){.plan = svg->plan_temporal,
                         .budget = STSA_BUDGET_NONE,
                         .choice = STSA_AUTO_SVG2,
                         .reason = STSA_AUTO_METHOD,
                         .recall = c == CONFIRMED ? RECALL_CONFIRMED
                                   : c == OTHER   ? RECALL_OTHER
                                                  : RECALL_NONE};
      kinds[h] = STSA_HEAD_SEMANTIC;
      exempt[h] = (uint8_t)(c == EXEMPT);
      CHECK_STATUS(stsa_svg_run_head(svg, 0, h, hr[h].plan, &in->q, &in->k, &in->v, &o),
                   STSA_OK);
    }
    CHECK_STATUS(stsa_svg_recheck_heads(svg, 77, 0, &in->q, &in->k, &in->v, &o, budget,
                                        c == EXEMPT ? exempt : NULL, hr, climb, kinds),
                 STSA_OK);
    int dense = 0, checked = 0;
    for (int h = 0; h < H; h++) {
      dense += hr[h].choice == STSA_AUTO_DENSE;
      checked += hr[h].est_error > 0;
      passed[c][h] = hr[h].choice == STSA_AUTO_DENSE ? NAN : hr[h].est_error;
    }
    CHECK(exempting ? dense == 0 && checked == 0
                    : dense > 0 && dense < H && checked == H - dense,
          "%s: %d of %d heads rechecked, %d went dense", name[c], checked + dense, H,
          dense);
  }
  int higher = 0; /* heads that passed both, on the same rows */
  for (int h = 0; h < H; h++) {
    higher += passed[OTHER][h] > passed[NONE][h];
    CHECK(!(passed[OTHER][h] <= passed[NONE][h]),
          "head %d: its check at half the miss chance read %.5f, at the full %.5f", h,
          (double)passed[OTHER][h], (double)passed[NONE][h]);
  }
  CHECK(higher > 0, "no head passed both checks: the halved chance is untested");
  tu_free_tensor(&o);
  stsa_svg_free(svg);
}

/* A warm call profiles the whole SVG2 ladder of a head whose first
 * candidate missed the budget at the layer's last call in its first pass
 * (svg2_bound.c: ladder_now). Its bounds, choices and output bytes are
 * those of the two passes a head takes when its first candidate met the
 * budget last time (a first call at a budget every head meets). Method
 * auto choosing afresh: it defers SVG2's bound only when it keeps its
 * choices. */
static void test_ladder_first(stsa_ctx *ctx, const inputs *in) {
  const double budget = 0.05;
  outcome out[2];
  stsa_tensor o[2];
  int missed = 0;
  for (int a = 0; a < 2; a++) {
    stsa_svg_config cfg = config(STSA_SVG_METHOD_AUTO);
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
    o[a] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in->N, H, 64);
    /* the first call's budget differs from the second's in both: a call at
     * the budget of the layer's last one may keep its choices (auto_kept.c) */
    const stsa_svg_call last = {sizeof last, a ? 1e3 : 0.049},
                        call = {sizeof call, budget};
    CHECK_STATUS(
        stsa_svg_attention_ex(svg, 0, 0, &in->q, &in->k, &in->v, &o[a], &last, NULL),
        STSA_OK);
    const uint8_t *met = stsa_svg2_layer_for(svg->svg2, 0, 1)->first_met;
    for (int h = 0; h < H; h++) {
      missed += a == 0 && !met[h];
      CHECK(a == 0 || met[h], "head %d missed a budget of 1e3", h);
    }
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    rep.est_error = out[a].est;
    rep.cand_density = out[a].cand_d;
    rep.cand_bound = out[a].cand_b;
    rep.choice = out[a].choice;
    CHECK_STATUS(
        stsa_svg_attention_ex(svg, 0, 1, &in->q, &in->k, &in->v, &o[a], &call, &rep),
        STSA_OK);
    stsa_svg_free(svg);
  }
  CHECK(missed > 0, "no head's first SVG2 candidate missed %.2f: the test tests nothing",
        budget);
  CHECK(!memcmp(out[0].est, out[1].est, sizeof out[0].est) &&
            !memcmp(out[0].cand_d, out[1].cand_d, sizeof out[0].cand_d) &&
            !memcmp(out[0].cand_b, out[1].cand_b, sizeof out[0].cand_b) &&
            !memcmp(out[0].choice, out[1].choice, sizeof out[0].choice) &&
            tu_same_bytes(&o[0], &o[1]),
        "the ladder in the first pass: not what two passes give (%d heads missed)",
        missed);
  printf("ladder in the first pass: %d head(s) missed %.2f at the last call\n", missed,
         budget);
  for (int a = 0; a < 2; a++)
    tu_free_tensor(&o[a]);
}

/* Whether every head of o kept its choice (a kept call: reason kept, or
 * recheck where the kept choice missed and climbed). */
static int kept_call(const outcome *o) {
  int kept = 0;
  for (int h = 0; h < H; h++) {
    if (o->reason[h] != STSA_AUTO_KEPT && o->reason[h] != STSA_AUTO_RECHECK)
      return 0;
    kept |= o->reason[h] == STSA_AUTO_KEPT;
  }
  return kept;
}

/* A kept call's heads (o) against the layer's call before it (last): what
 * ran is last's choice at last's density, within the budget by its bound
 * on the call's own rows (its only candidate reported; the others NaN), or
 * a climb after a miss; the true error near the budget either way. */
static void check_kept(const outcome *last, const outcome *o, double budget,
                       const char *what) {
  for (int h = 0; h < H; h++) {
    const float *cb = o->cand_b + h * STSA_AUTO_CANDIDATE_COUNT_;
    printf("%s head %d: %s (%s) at %.3f, bound %.4f true %.4f\n", what, h,
           stsa_auto_candidate_name(o->choice[h]), stsa_auto_reason_name(o->reason[h]),
           (double)o->dens[h], (double)o->est[h], o->rel[h]);
    CHECK(o->rel[h] <= 2 * budget + 1e-6, "%s head %d: true error %.4f", what, h,
          o->rel[h]);
    if (o->reason[h] != STSA_AUTO_KEPT)
      continue;
    int others = 0;
    for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++)
      others += c != o->choice[h] && !isnan(cb[c]);
    CHECK(o->choice[h] == last->choice[h] && o->dens[h] == last->dens[h] &&
              (o->choice[h] == STSA_AUTO_DENSE || o->est[h] <= budget) &&
              cb[o->choice[h]] == o->est[h] && others == 0,
          "%s head %d: kept %s at %.3f (bound %.4f, %d others reported) after %s at "
          "%.3f",
          what, h, stsa_auto_candidate_name(o->choice[h]), (double)o->dens[h],
          (double)o->est[h], others, stsa_auto_candidate_name(last->choice[h]),
          (double)last->dens[h]);
  }
}

/* A new auto session's first two calls at budget (o[2]): the first chooses,
 * and where the second keeps, what each head kept is checked (check_kept). */
static void choose_then_keep(stsa_ctx *ctx, const inputs *in, double budget, outcome *o,
                             const char *what) {
  stsa_svg_config cfg = config(STSA_SVG_METHOD_AUTO);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  call(svg, in, 0, budget, &o[0]);
  call(svg, in, 1, budget, &o[1]);
  check_kept(&o[0], &o[1], budget, what);
  stsa_svg_free(svg);
}

/* Method auto's kept choice: a warm call at the budget of the layer's last
 * call runs what its heads ran there again (SVG2 on the ladder step it met
 * the budget on, a head whose check failed on what it climbed to), bounded
 * on its own output rows; at most three calls in a row keep, a call at
 * another budget chooses afresh, and a kept head that misses climbs (the
 * temporal head's inputs made near uniform, where its band loses most of
 * the mass), after which the layer chooses afresh. */
static void test_kept(stsa_ctx *ctx, const inputs *in) {
  const double budget = 0.05;
  stsa_svg_config cfg = config(STSA_SVG_METHOD_AUTO);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  outcome o[8];
  int kept[8], run_len = 0, longest = 0, any = 0;
  for (int s = 0; s < 8; s++) {
    call(svg, in, s, budget, &o[s]);
    kept[s] = kept_call(&o[s]);
    run_len = kept[s] ? run_len + 1 : 0;
    longest = run_len > longest ? run_len : longest;
    any |= kept[s];
    if (kept[s])
      check_kept(&o[s - 1], &o[s], budget, "kept");
  }
  CHECK(!kept[0] && any && longest == 3,
        "kept calls: %d %d %d %d %d %d %d %d (expected some, at most 3 in a row)",
        kept[0], kept[1], kept[2], kept[3], kept[4], kept[5], kept[6], kept[7]);
  /* a call that chose afresh after a kept one: the inputs are the same, so
   * heads choose what they ran, and their bounds confirm it (no recheck) */
  int confirmed = 0;
  for (int s = 1; s < 8; s++)
    for (int h = 0; h < H; h++) {
      if (o[s].reason[h] != STSA_AUTO_CONFIRMED)
        continue;
      confirmed++;
      CHECK(!kept[s] && kept[s - 1] && o[s].choice[h] == o[s - 1].choice[h] &&
                o[s].dens[h] == o[s - 1].dens[h] && o[s].est[h] <= budget &&
                o[s].rel[h] <= 2 * budget,
            "call %d head %d confirmed %s at %.3f (bound %.4f, true %.4f) after %s at "
            "%.3f",
            s, h, stsa_auto_candidate_name(o[s].choice[h]), (double)o[s].dens[h],
            (double)o[s].est[h], o[s].rel[h],
            stsa_auto_candidate_name(o[s - 1].choice[h]), (double)o[s - 1].dens[h]);
    }
  CHECK(confirmed > 0, "no head's choice was confirmed: the confirmation is untested");
  outcome other;
  call(svg, in, 8, 0.2, &other);
  CHECK(!kept_call(&other), "a call at another budget kept its choices");

  /* at 0.02 the semantic heads' SVG2 meets the budget on its ladder's second
   * step: the kept call plans that step (stsa_svg2_env.first_step) */
  outcome r[2];
  choose_then_keep(ctx, in, 0.02, r, "raised");
  int steps = 0;
  for (int h = 0; h < H; h++)
    steps += r[1].reason[h] == STSA_AUTO_KEPT && r[1].choice[h] == STSA_AUTO_SVG2 &&
             r[1].budget[h] == STSA_BUDGET_RAISED;
  CHECK(steps > 0, "no head kept SVG2's raised step: the step's planning is untested");

  /* at 0.015 a head's choice fails its check and climbs: the climb met the
   * budget on rows of its own, and the next call keeps it */
  outcome c[2];
  choose_then_keep(ctx, in, 0.015, c, "climbed");
  int climbs = 0;
  for (int h = 0; h < H; h++)
    climbs += c[0].reason[h] == STSA_AUTO_RECHECK;
  CHECK(climbs > 0, "no head climbed at 0.015: the climb's memory is untested");
  CHECK(kept_call(&c[1]), "the call after a choosing call's climb chose afresh");

  /* a miss: the temporal head's inputs near uniform at a kept call */
  stsa_svg *miss = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &miss), STSA_OK);
  outcome m[3];
  call(miss, in, 0, budget, &m[0]);
  call(miss, in, 1, budget, &m[1]);
  CHECK(kept_call(&m[1]) && m[1].choice[2] == STSA_AUTO_TEMPORAL,
        "the miss's setting: the second call keeps the temporal head on its band");
  inputs flat = *in;
  flat.q = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in->N, H, 64);
  flat.k = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in->N, H, 64);
  flat.dense = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in->N, H, 64);
  tu_rng rng = {99};
  for (int64_t i = 0; i < in->N; i++)
    for (int h = 0; h < H; h++)
      for (int64_t d = 0; d < 64; d++) {
        const int64_t at = tu_offset(&in->q, 0, i, h, d);
        const double x =
            h == 2 ? 0.05 * tu_rng_normal(&rng) : tu_load(in->q.data, STSA_F32, at);
        const double y =
            h == 2 ? 0.05 * tu_rng_normal(&rng) : tu_load(in->k.data, STSA_F32, at);
        tu_store(flat.q.data, STSA_F32, at, x);
        tu_store(flat.k.data, STSA_F32, at, y);
      }
  CHECK_STATUS(stsa_attention(ctx, &flat.q, &flat.k, &flat.v, &flat.dense, NULL),
               STSA_OK);
  call(miss, &flat, 2, budget, &m[2]);
  check_kept(&m[1], &m[2], budget, "miss");
  CHECK(kept_call(&m[2]) && m[2].reason[2] == STSA_AUTO_RECHECK &&
            m[2].choice[2] != STSA_AUTO_TEMPORAL,
        "the near-uniform head kept on its band: %s (%s)",
        stsa_auto_candidate_name(m[2].choice[2]), stsa_auto_reason_name(m[2].reason[2]));
  outcome after;
  call(miss, &flat, 3, budget, &after);
  CHECK(!kept_call(&after), "the call after a miss kept its choices");
  tu_free_tensor(&flat.q);
  tu_free_tensor(&flat.k);
  tu_free_tensor(&flat.dense);
  stsa_svg_free(miss);
  stsa_svg_free(svg);
}

/* Head h made sharply temporal: q and k of a token are its position's
 * random direction, scaled so a query's weight sits on the keys of its own
 * position in every frame (the workload's temporal heads are milder: at
 * this small geometry SVG2's clusters bound them lower than SVG's band). */
static void make_temporal(const inputs *in, int64_t h) {
  const int64_t P = GEO.height * GEO.width, D = 64;
  tu_rng rng = {12345};
  double *u = malloc(sizeof(double) * (size_t)(P * D));
  if (!u)
    exit(1);
  for (int64_t i = 0; i < P * D; i++)
    u[i] = tu_rng_normal(&rng) * 10.0 / sqrt((double)D); /* own position: 12.5 */
  for (int64_t i = 0; i < in->N; i++)
    for (int64_t d = 0; d < D; d++) {
      tu_store(in->q.data, STSA_F32, tu_offset(&in->q, 0, i, h, d), u[(i % P) * D + d]);
      tu_store(in->k.data, STSA_F32, tu_offset(&in->k, 0, i, h, d), u[(i % P) * D + d]);
    }
  free(u);
}

static void test_session(void) {
  inputs in = {.N = tu_tokens(&GEO)};
  in.q = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in.N, H, 64);
  in.k = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in.N, H, 64);
  in.v = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in.N, H, 64);
  in.dense = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, in.N, H, 64);
  stsa_workload_desc d = STSA_INIT(stsa_workload_desc);
  d.geometry = GEO;
  d.batch = 1;
  d.heads = H;
  d.head_dim = 64;
  d.seed = 5;
  d.kinds = KINDS;
  CHECK_STATUS(stsa_workload_generate(&d, &in.q, &in.k, &in.v, NULL), STSA_OK);
  make_temporal(&in, 2);
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  CHECK_STATUS(stsa_attention(ctx, &in.q, &in.k, &in.v, &in.dense, NULL), STSA_OK);
  check_no_budget(ctx, &in);
  const int capped = check_budget(ctx, &in, 0.05) + check_budget(ctx, &in, 0.2);
  CHECK(capped > 0, "no SVG kind left its wider levels to SVG2: the cap is untested");
  test_climb(ctx, &in);
  test_recheck_exempt(ctx, &in);
  test_ladder_first(ctx, &in);
  test_kept(ctx, &in);
  stsa_ctx_free(ctx);
  tu_free_tensor(&in.q);
  tu_free_tensor(&in.k);
  tu_free_tensor(&in.v);
  tu_free_tensor(&in.dense);
}

int main(void) {
  test_order();
  test_pick();
  test_session();
  return tu_finish("test_svg_auto");
}
