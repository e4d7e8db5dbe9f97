/*
 * svg_heads.c — SVG's and method auto's heads of a call: the profile that
 * routes each head to its kind, the rows its error bound is taken on (the
 * routing rows; under a budget and for auto, rows drawn where the kinds
 * lose mass), and the choice. The error budget's wider levels are
 * svg_levels.c's.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "mask/geometry.h"
#include "svg/auto_pick.h"
#include "svg/bound.h"
#include "svg/profile.h"
#include "svg/session_internal.h"
#include "svg/strata.h"
#include "svg/svg_levels.h"
#include "svg/svg_strata.h"
#include "svg/windows.h"

/* Fixed rows a profile takes, one in each of R equal runs of the video
 * tokens (stsa_svg_sample_rows), and their strata (stsa_svg_strata). */
typedef struct svg_rows {
  int64_t R;
  const int64_t *rows, *group, *pop;
  int64_t groups;
  /* their profile: head h's energy at sq[h * stride ..], kind i's errors
   * at sq[((1 + i) * H + h) * stride ..], R each */
  const double *sq;
  int64_t stride;
} svg_rows;

/* The call's routing rows: sample_rows of them, profiled into sq. */
static svg_rows routing_rows(const stsa_svg *svg, const int64_t *rows, const double *sq) {
  return (svg_rows){svg->cfg.sample_rows, rows, svg->row_group,      svg->row_pop,
                    svg->row_groups,      sq,   svg->cfg.sample_rows};
}

/* The bound of kind i (0 spatial, 1 temporal) of head h on rows s. */
static double rows_bound(const svg_rows *s, int64_t H, int64_t h, int i,
                         double *scratch) {
  const stsa_err_sample smp = {s->R, s->group, s->pop, s->groups};
  return stsa_err_bound(&smp, s->sq + ((1 + i) * H + h) * s->stride,
                        s->sq + h * s->stride, scratch, NULL);
}

static void draw_free(svg_draw *d) {
  free(d->rows);
  free(d->sq);
}

/* Head h's estimates at every level (est[2][levels][L] in d->est) and
 * its level-0 rows drawn from both kinds' strata (got). 0, or -1 when out
 * of memory. */
static int draw_head(const stsa_svg_keep *keep, const stsa_kernels *kern,
                     const stsa_tensor *q, const stsa_tensor *k, int64_t b, int64_t h,
                     const svg_draw *d, stsa_strata *got) {
  const int64_t L = d->L, n = keep->levels * L;
  stsa_geo geo;
  stsa_geo_init(&geo, keep->g);
  double *est = d->est + h * 2 * n;
  int st = stsa_svg_dropped_mass(keep, kern, q, k, b, h, est, est + n);
  if (st == 0)
    st = stsa_svg_draw_rows(est, est + n, L, geo.v0, STSA_SVG_STRATA_BOTH, d->R,
                            stsa_hash_mix(d->seed, SVG_DRAW_SEED + (uint64_t)h), got);
  return st;
}

/* A call's draw before it is taken: its rows a head, and the levels its
 * estimate covers: the wider levels only where a budget may climb to them
 * (method auto without one compares the configured level's bounds alone). */
static svg_draw draw_start(const stsa_svg *svg, double budget) {
  return (svg_draw){.R = stsa_svg_draw_count(svg),
                    .levels = svg->cfg.density < 1 && budget > 0 ? SVG_LEVELS : 1};
}

/* Draws each head's rows of batch entry b from the strata of both kinds'
 * estimates (STSA_SVG_STRATA_BOTH: methods svg and auto draw the same rows,
 * so their bounds of a kind agree), and its wider levels' (draw_head), and
 * profiles the level-0 rows under both kinds: one pass over each head's
 * K/V serves both. */
static stsa_status draw_and_profile(stsa_svg *svg, const stsa_tensor *q,
                                    const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                    uint64_t row_seed, svg_draw *d) {
  const int64_t H = svg->cfg.heads, R = d->R;
  const int64_t PS = stsa_svg_bound_strata(R); /* strata a head: 2 where R = 1 */
  const stsa_geometry *g = &svg->cfg.geometry;
  d->seed = row_seed;
  d->L = g->frames * g->height * g->width;
  d->rows = malloc(sizeof(int64_t) * (size_t)(H * R + H * R + H * PS + H));
  d->sq = malloc(sizeof(double) * (size_t)(3 * H * R + 5 * PS));
  d->est = stsa_svg_draw_estimates(svg, (size_t)(H * 2 * d->levels * d->L));
  svg->draw_levels = d->levels;
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)(3 * H));
  int *failed = calloc((size_t)H, sizeof *failed);
  stsa_status st =
      d->rows && d->sq && d->est && masks && failed
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  if (st == STSA_OK) {
    d->group = d->rows + H * R;
    d->pop = d->group + H * R;
    d->groups = d->pop + H * PS;
    d->scratch = d->sq + 3 * H * R;
    const stsa_svg_keep keep = stsa_svg_keep_levels(svg, d->levels);
    const int threads = svg->ctx->threads > 0 ? svg->ctx->threads : 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t h = 0; h < H; h++) {
      stsa_strata got = {d->rows + h * R, d->group + h * R, d->pop + h * PS, 0};
      failed[h] = draw_head(&keep, &svg->ctx->run->kern, q, k, b, h, d, &got) != 0;
      d->groups[h] = got.groups;
    }
    for (int64_t h = 0; h < H; h++)
      if (failed[h] && st == STSA_OK)
        st = stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  }
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    masks[h] = svg->mask_dense;
    masks[H + h] = svg->mask_spatial;
    masks[2 * H + h] = svg->mask_temporal;
  }
  if (st == STSA_OK)
    st = stsa_svg_profile_heads(svg->ctx, &svg->cfg.geometry, masks, 3, d->rows, 1, R,
                                NULL, NULL, q, k, v, b, d->sq);
  free(masks);
  free(failed);
  return st;
}

/* The bound of head h's drawn rows (err and energy [R] each) for the kind
 * they route it to. The rows choose between two kinds, and the one chosen
 * is the likelier to have read low: each kind's bound is taken at 99.5%,
 * so that the chosen one's holds with 99% whichever it is (a union over
 * the two; docs/architecture.md, "The error bound"). */
static double draw_bound(const svg_draw *d, int64_t h, const double *err,
                         const double *energy) {
  const stsa_err_sample smp = {d->R, d->group + h * d->R,
                               d->pop + h * stsa_svg_bound_strata(d->R), d->groups[h]};
  return stsa_err_bound_z(&smp, err, energy, d->scratch, NULL, STSA_BOUND_Z_HALF);
}

/* Every wanted kind i of every head h (want[h * 2 + i]; e[h * 2 + i]): the
 * configured level's bound from the profile of the drawn rows (d->sq, under
 * a budget and always for method auto), else of the routing rows
 * (`routing`); then, under a budget, the wider levels of those that missed
 * it (stsa_svg_wider_levels). scratch: the bound's. */
static stsa_status eval_kinds(stsa_svg *svg, const svg_rows *routing,
                              const stsa_tensor *q, const stsa_tensor *k,
                              const stsa_tensor *v, int64_t b, double budget,
                              double *scratch, const svg_draw *d, const uint8_t *want,
                              const double *cap, kind_eval *e) {
  const int64_t H = svg->cfg.heads, R = d->R;
  for (int64_t h = 0; h < H; h++)
    for (int i = 0; i < 2; i++) {
      kind_eval *x = &e[h * 2 + i];
      if (!want[h * 2 + i])
        continue;
      x->rel[0] = d->rows ? draw_bound(d, h, d->sq + ((1 + i) * H + h) * R, d->sq + h * R)
                          : rows_bound(routing, H, h, i, scratch);
      x->half[0] = d->rows ? x->rel[0] : NAN; /* draw_bound's is at 99.5% */
      const stsa_mask *mask;
      STSA_TRY(stsa_svg_level_plan(svg, 0, i, &x->plan[0], &mask, &x->density[0]));
      x->levels = 1;
    }
  /* levels past 0 only under a budget, which draws the rows (d->levels) */
  if (budget > 0 && d->levels > 1)
    STSA_TRY(stsa_svg_wider_levels(svg, q, k, v, b, budget, d, want, cap, e));
  for (int64_t h = 0; h < 2 * H; h++) {
    kind_eval *x = &e[h];
    x->pick = 0;
    while (want[h] && x->pick < x->levels && budget > 0 && x->rel[x->pick] > budget)
      x->pick++;
  }
  return STSA_OK;
}

/* The call's profile of batch entry b on the fixed rows s ([3][H][s->R]
 * into sq) and each head's profiling error per kind (mse_s, mse_t [H]). */
static stsa_status profile_svg(stsa_svg *svg, const svg_rows *s, const stsa_tensor *q,
                               const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                               double *sq, float *mse_s, float *mse_t) {
  const int64_t H = svg->cfg.heads, R = s->R, D = svg->cfg.head_dim;
  stsa_svg_masks masks = {svg->mask_dense, svg->mask_spatial, svg->mask_temporal};
  STSA_TRY(
      stsa_svg_profile(svg->ctx, &svg->cfg.geometry, &masks, s->rows, R, q, k, v, b, sq));
  for (int64_t h = 0; h < H; h++) {
    double sum[2] = {0, 0};
    for (int i = 0; i < 2; i++)
      for (int64_t r = 0; r < R; r++)
        sum[i] += sq[((1 + i) * H + h) * R + r];
    mse_s[h] = (float)(sum[0] / (double)(R * D));
    mse_t[h] = (float)(sum[1] / (double)(R * D));
  }
  return STSA_OK;
}

/* Head h's mean squared error per element under each kind (err[2]) from
 * its drawn rows: each row weighs its stratum's members over the
 * rows drawn from it (stsa_strata_draw draws uniformly within a stratum),
 * an unbiased estimate of the mean over the video rows. */
static void drawn_mse(const svg_draw *d, int64_t H, int64_t h, int64_t D, double err[2]) {
  const int64_t R = d->R, *group = d->group + h * R,
                *pop = d->pop + h * stsa_svg_bound_strata(R);
  double members = 0;
  for (int64_t g = 0; g < d->groups[h]; g++)
    members += (double)pop[g];
  err[0] = err[1] = 0;
  for (int64_t r = 0; r < R; r++) {
    int64_t drawn = 0;
    for (int64_t j = 0; j < R; j++)
      drawn += group[j] == group[r];
    const double w = (double)pop[group[r]] / (double)drawn;
    for (int i = 0; i < 2; i++)
      err[i] += w * d->sq[((1 + i) * H + h) * R + r];
  }
  for (int i = 0; i < 2; i++)
    err[i] /= members > 0 ? members * (double)D : 1;
}

/* Under a budget, and for method auto: rows drawn per head where the
 * kinds' errors arise, profiled under both kinds (d); the heads' profiling
 * errors (mse_s, mse_t) are the drawn rows' estimates: they route the
 * heads, in place of the routing rows, which such a call does not
 * profile. */
static stsa_status profile_drawn(stsa_svg *svg, uint64_t row_seed, const stsa_tensor *q,
                                 const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                 svg_draw *d, float *mse_s, float *mse_t) {
  STSA_TRY(draw_and_profile(svg, q, k, v, b, row_seed, d));
  for (int64_t h = 0; h < svg->cfg.heads; h++) {
    double err[2];
    drawn_mse(d, svg->cfg.heads, h, svg->cfg.head_dim, err);
    mse_s[h] = (float)err[0];
    mse_t[h] = (float)err[1];
  }
  return STSA_OK;
}

/* The profile's scratch: [3][H][R], then the bound's 5 x R (R strata at
 * most). */
static double *svg_scratch(const stsa_svg *svg, double **scratch) {
  const int64_t H = svg->cfg.heads, R = svg->cfg.sample_rows;
  double *sq = malloc(sizeof(double) * (size_t)(3 * H * R + 5 * R));
  if (sq)
    *scratch = sq + 3 * H * R;
  return sq;
}

/* SVG's heads of batch entry b: the kind with the smaller profiled error,
 * then, under a budget, the first level whose error bound meets it (the
 * bound also on rows drawn where the kinds' errors arise; without a
 * budget, the routing rows' alone). */
stsa_status stsa_svg_plan_svg_heads(stsa_svg *svg, const int64_t *rows, uint64_t row_seed,
                                    const stsa_tensor *q, const stsa_tensor *k,
                                    const stsa_tensor *v, int64_t b, double budget,
                                    float *mse_s, float *mse_t, stsa_head_kind *kinds,
                                    head_run *run) {
  const int64_t H = svg->cfg.heads;
  double *scratch = NULL, *sq = svg_scratch(svg, &scratch);
  svg_rows routing = routing_rows(svg, rows, sq);
  svg_draw d = draw_start(svg, budget);
  stsa_status st =
      sq ? STSA_OK
         : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  /* without a budget nothing depends on the bound: the routing rows route
   * and the call reports their bound (docs/architecture.md, "SVG's cost");
   * under one the drawn rows route and bound */
  if (st == STSA_OK && budget > 0)
    st = profile_drawn(svg, row_seed, q, k, v, b, &d, mse_s, mse_t);
  else if (st == STSA_OK)
    st = profile_svg(svg, &routing, q, k, v, b, sq, mse_s, mse_t);
  kind_eval *e = calloc((size_t)(2 * H), sizeof *e);
  uint8_t *want = calloc((size_t)(2 * H), 1); /* each head's kind */
  if (st == STSA_OK && (!e || !want))
    st = stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    const int i = mse_s[h] <= mse_t[h] ? 0 : 1;
    kinds[h] = i ? STSA_HEAD_TEMPORAL : STSA_HEAD_SPATIAL;
    want[h * 2 + i] = 1;
  }
  if (st == STSA_OK)
    st = eval_kinds(svg, &routing, q, k, v, b, budget, scratch, &d, want, NULL, e);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    const int i = kinds[h] == STSA_HEAD_TEMPORAL;
    run[h] = stsa_svg_kind_run(svg, &e[h * 2 + i], i);
  }
  free(e);
  free(want);
  draw_free(&d);
  free(sq);
  return st;
}

/* Method auto's heads of batch entry b: SVG's profile and each kind's
 * levels, SVG2's clusters and ladder, then per head the candidate
 * stsa_auto_pick chooses; cand[H][STSA_AUTO_CANDIDATE_COUNT_][2] gets each
 * candidate's density and bound. */
stsa_status stsa_svg_plan_auto_heads(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                     uint64_t row_seed, const stsa_tensor *q,
                                     const stsa_tensor *k, const stsa_tensor *v,
                                     double budget, int video_unchecked, float *mse_s,
                                     float *mse_t, stsa_head_kind *kinds, head_run *run,
                                     double *cand, auto_climb *climb, double *cluster_ms,
                                     int *cold) {
  const int64_t H = svg->cfg.heads;
  double *scratch = NULL, *sq = svg_scratch(svg, &scratch);
  stsa_svg2_head *res = calloc((size_t)H, sizeof *res);
  kind_eval *eval = calloc((size_t)(2 * H), sizeof *eval);
  uint8_t *want = malloc((size_t)(2 * H)); /* both kinds of every head */
  double *cap = malloc(sizeof(double) * (size_t)H);
  svg_draw d = draw_start(svg, budget);
  stsa_status st =
      sq && res && eval && want && cap
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  if (st == STSA_OK)
    st = profile_drawn(svg, row_seed, q, k, v, b, &d, mse_s, mse_t);
  if (st == STSA_OK)
    st = stsa_svg_svg2_batch(svg, layer, B, b, row_seed, q, k, v, budget, video_unchecked,
                             1, res, cluster_ms, cold);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) /* SVG's levels' level_cap */
    cap[h] = res[h].plan && res[h].est_error <= budget
                 ? fmin(res[h].density, svg->density_dense)
                 : svg->density_dense;
  if (st == STSA_OK) {
    memset(want, 1, (size_t)(2 * H));
    st = eval_kinds(svg, NULL, q, k, v, b, budget, scratch, &d, want, cap, eval);
  }
  /* what the layer's last call ran at this budget (after SVG2's call,
   * which may have moved the layer's state) */
  const uint8_t *remembered =
      st == STSA_OK ? stsa_svg_auto_remembered(svg, layer, B, b, budget) : NULL;
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    head_run options[STSA_AUTO_CANDIDATE_COUNT_];
    double density[STSA_AUTO_CANDIDATE_COUNT_], bound[STSA_AUTO_CANDIDATE_COUNT_];
    for (int i = 0; i < 2; i++) {
      const kind_eval *e = &eval[h * 2 + i];
      /* a kind that met nothing offers its widest level, never chosen */
      const int l = e->pick < e->levels ? e->pick : e->levels - 1;
      density[i] = e->density[l];
      bound[i] = e->pick < e->levels ? e->rel[l] : NAN;
      options[i] = stsa_svg_kind_run(svg, e, i);
      cand[(h * STSA_AUTO_CANDIDATE_COUNT_ + i) * 2 + 1] = e->rel[l];
    }
    options[STSA_AUTO_SVG2] = stsa_svg_svg2_run(svg, &res[h]);
    density[STSA_AUTO_SVG2] = res[h].plan ? res[h].density : NAN;
    bound[STSA_AUTO_SVG2] = res[h].plan ? res[h].est_error : NAN;
    cand[(h * STSA_AUTO_CANDIDATE_COUNT_ + STSA_AUTO_SVG2) * 2 + 1] = res[h].est_error;
    options[STSA_AUTO_DENSE] = stsa_svg_dense_run(svg, STSA_BUDGET_DENSE);
    density[STSA_AUTO_DENSE] = svg->density_dense;
    bound[STSA_AUTO_DENSE] = 0;
    cand[(h * STSA_AUTO_CANDIDATE_COUNT_ + STSA_AUTO_DENSE) * 2 + 1] = 0;
    for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++)
      cand[(h * STSA_AUTO_CANDIDATE_COUNT_ + c) * 2] = density[c];
    if (st != STSA_OK)
      break;
    uint8_t reason = 0;
    const int pick = stsa_auto_pick(density, bound, budget, &reason);
    run[h] = options[pick];
    run[h].reason = reason;
    run[h].recall = stsa_svg_auto_recall(remembered, h, &run[h], budget);
    if (run[h].recall == RECALL_CONFIRMED) { /* the bound that guards it */
      run[h].est_error = run[h].est_half;
      run[h].reason = STSA_AUTO_CONFIRMED;
    }
    if (pick == STSA_AUTO_DENSE && reason == STSA_AUTO_CHEAPEST)
      run[h].budget = STSA_BUDGET_NONE; /* dense was the cheapest within it */
    /* the climb: what met the budget after the choice, the next denser first */
    int order[STSA_AUTO_CANDIDATE_COUNT_], kept_svg2 = pick == STSA_AUTO_SVG2;
    const int met = budget > 0 ? stsa_auto_order(density, bound, budget, order) : 0;
    climb[h] = (auto_climb){.steps = 0};
    for (int i = 0; i < 2; i++) /* what stsa_svg_extend_climb need not try again */
      climb[h].tried[i] = (uint8_t)((1u << eval[h * 2 + i].levels) - 1);
    for (int j = 0; j < met; j++) {
      if (order[j] == pick)
        continue;
      kept_svg2 |= order[j] == STSA_AUTO_SVG2;
      climb[h].step[climb[h].steps] = options[order[j]];
      climb[h].step[climb[h].steps++].reason = STSA_AUTO_RECHECK;
    }
    if (!kept_svg2)
      stsa_plan_free(res[h].plan);
    res[h].plan = NULL; /* owned by run[h] or climb[h] now, or freed */
    kinds[h] = pick == STSA_AUTO_SVG2       ? STSA_HEAD_SEMANTIC
               : pick == STSA_AUTO_TEMPORAL ? STSA_HEAD_TEMPORAL
               : pick == STSA_AUTO_SPATIAL  ? STSA_HEAD_SPATIAL
               : mse_s[h] <= mse_t[h]       ? STSA_HEAD_SPATIAL
                                            : STSA_HEAD_TEMPORAL;
  }
  for (int64_t h = 0; res && h < H; h++)
    stsa_plan_free(res[h].plan);
  free(eval);
  free(want);
  free(cap);
  draw_free(&d);
  free(res);
  free(sq);
  return st;
}
