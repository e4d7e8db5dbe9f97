/*
 * svg_levels.c — SVG's error-budget levels (svg_levels.h): each kind's
 * wider windows tried level by level on rows drawn from their own
 * estimates, below what method auto already has within the budget, and
 * auto's climb to a level after a failed check (stsa_svg_extend_climb).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "mask/geometry.h"
#include "svg/bound.h"
#include "svg/profile.h"
#include "svg/strata.h"
#include "svg/svg_levels.h"
#include "svg/svg_strata.h"
#include "svg/windows.h"

/* svg_levels.h */
stsa_status stsa_svg_level_plan(stsa_svg *svg, int l, int i, const stsa_plan **plan,
                                const stsa_mask **mask, double *density) {
  if (l == 0) {
    *plan = i ? svg->plan_temporal : svg->plan_spatial;
    *mask = i ? svg->mask_temporal : svg->mask_spatial;
    *density = i ? svg->windows.density_temporal : svg->windows.density_spatial;
    return STSA_OK;
  }
  if (!svg->level_plan[l][i]) {
    stsa_mask_free(svg->level_mask[l][i]); /* of an earlier try that failed */
    svg->level_mask[l][i] = NULL;
    STSA_TRY(stsa_svg_build_kind(svg, svg->cfg.density * (double)(1 << l), i,
                                 &svg->level_mask[l][i], &svg->level_plan[l][i],
                                 &svg->level_density[l][i]));
  }
  *plan = svg->level_plan[l][i];
  *mask = svg->level_mask[l][i];
  *density = svg->level_density[l][i];
  return STSA_OK;
}

/* svg_levels.h */
stsa_svg_keep stsa_svg_keep_levels(const stsa_svg *svg, int levels) {
  const stsa_geometry *g = &svg->cfg.geometry;
  const int64_t sink = svg->cfg.sink_frames;
  stsa_svg_keep keep = {
      g, sink, levels, {svg->windows.frame_window}, {svg->windows.band}};
  for (int l = 1; l < levels; l++) {
    const double video =
        stsa_svg_video_density(g, fmin(1.0, svg->cfg.density * (double)(1 << l)));
    keep.frame_window[l] = stsa_svg_frame_window(g, sink, video);
    keep.band[l] = stsa_svg_band_halfwidth(g, sink, video);
  }
  return keep;
}

/* svg_levels.h */
int64_t stsa_svg_draw_count(const stsa_svg *svg) {
  const stsa_geometry *g = &svg->cfg.geometry;
  const int64_t L = g->frames * g->height * g->width;
  const int64_t r = svg->cfg.sample_rows < L ? svg->cfg.sample_rows : L;
  return r > 1 ? r - (r & 1) : r;
}

/* The rows of kind i's level l >= 1 of head h (into s): drawn from that
 * kind's strata of the level's own estimate (a wider window loses its mass
 * elsewhere than the configured one). The level is tried because the one
 * below it missed the budget, on other rows: these rows choose nothing,
 * and their bound is the ordinary 99% one. 0, or -1 when out of memory. */
static int draw_level_rows(const stsa_svg *svg, const svg_draw *d, int64_t h, int i,
                           int l, stsa_strata *s) {
  const int64_t L = d->L, n = d->levels * L;
  stsa_geo geo;
  stsa_geo_init(&geo, &svg->cfg.geometry);
  const uint64_t seed =
      stsa_hash_mix(d->seed, SVG_DRAW_SEED + (uint64_t)(l * svg->cfg.heads + h));
  /* the kind's shares at level l, as logs (stsa_svg_dropped_mass takes
   * only level 0's): kind i's draw reads its own kind's alone */
  double *logs = malloc(sizeof(double) * (size_t)L);
  if (!logs)
    return -1;
  memcpy(logs, d->est + h * 2 * n + i * n + l * L, sizeof(double) * (size_t)L);
  stsa_svg_share_logs(logs, L);
  const int drew = stsa_svg_draw_rows(logs, logs, L, geo.v0, i, d->R, seed, s);
  free(logs);
  return drew;
}

/* A pass of wider levels: memory for every head's rows and profile. */
typedef struct level_pass {
  int64_t *rows, *group, *pop, *groups; /* [H][R], [H][R], [H][PS], [H] */
  double *sq;                           /* [2][H][R] */
  const stsa_mask **masks;              /* [2][H] */
  uint8_t *on;                          /* [H] */
} level_pass;

static void level_pass_free(level_pass *lp) {
  free(lp->rows);
  free(lp->sq);
  free(lp->masks);
  free(lp->on);
}

/* A pass's memory for every head's R rows. 0, or -1 when out of memory
 * (lp freed and emptied). */
static int level_pass_alloc(const stsa_svg *svg, int64_t R, level_pass *lp) {
  const int64_t H = svg->cfg.heads, PS = stsa_svg_bound_strata(R);
  *lp = (level_pass){malloc(sizeof(int64_t) * (size_t)(H * (2 * R + PS + 1))),
                     NULL,
                     NULL,
                     NULL,
                     malloc(sizeof(double) * (size_t)(2 * H * R)),
                     malloc(sizeof(stsa_mask *) * (size_t)(2 * H)),
                     malloc((size_t)H)};
  if (!lp->rows || !lp->sq || !lp->masks || !lp->on) {
    level_pass_free(lp);
    *lp = (level_pass){NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    return -1;
  }
  lp->group = lp->rows + H * R;
  lp->pop = lp->group + H * R;
  lp->groups = lp->pop + H * PS;
  return 0;
}

/* Level l of kind[h] (-1: none) for each head h, in one pass over those
 * heads' K/V (they share the threads; the rest take no rows), each on rows
 * drawn for it; then each one's bound (e[h * 2 + kind[h]]). */
static stsa_status run_level_pass(stsa_svg *svg, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                  int l, const int *kind, const svg_draw *d,
                                  const level_pass *lp, kind_eval *e) {
  const int64_t H = svg->cfg.heads, R = d->R, PS = stsa_svg_bound_strata(R);
  for (int64_t h = 0; h < H; h++) {
    lp->on[h] = kind[h] >= 0;
    lp->masks[h] = lp->masks[H + h] = svg->mask_dense;
    memcpy(lp->rows + h * R, d->rows + h * R, sizeof(int64_t) * (size_t)R); /* valid */
    if (!lp->on[h])
      continue;
    stsa_strata s = {lp->rows + h * R, lp->group + h * R, lp->pop + h * PS, 0};
    STSA_RETURN_IF(draw_level_rows(svg, d, h, kind[h], l, &s) != 0, &svg->ctx->err,
                   STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
    lp->groups[h] = s.groups;
    const stsa_plan *plan;
    double density;
    STSA_TRY(stsa_svg_level_plan(svg, l, kind[h], &plan, &lp->masks[H + h], &density));
  }
  STSA_TRY(stsa_svg_profile_heads(svg->ctx, &svg->cfg.geometry, lp->masks, 2, lp->rows, 1,
                                  R, NULL, lp->on, q, k, v, b, lp->sq));
  for (int64_t h = 0; h < H; h++) {
    if (!lp->on[h])
      continue;
    kind_eval *x = &e[h * 2 + kind[h]];
    const stsa_err_sample drawn = {R, lp->group + h * R, lp->pop + h * PS, lp->groups[h]};
    const double *err = lp->sq + (H + h) * R, *energy = lp->sq + h * R;
    x->half[x->levels] =
        stsa_err_bound_z(&drawn, err, energy, d->scratch, NULL, STSA_BOUND_Z_HALF);
    x->rel[x->levels++] = stsa_err_bound(&drawn, err, energy, d->scratch, NULL);
  }
  return STSA_OK;
}

/* The density below which head h may still try a wider level (method
 * auto: cap[h], the cheapest of its other candidates within the budget,
 * and either kind's level that met it; NULL, method svg: any). A level
 * denser than a candidate already within the budget would never be chosen
 * over it: at Wan 480p such passes took 35-41 ms of a ~330 ms bf16 call
 * of two semantic heads, where SVG2 met the budget at half their density
 * (docs/benchmarks.md, "Method auto's wider levels"). */
static double level_cap(const kind_eval *e, int64_t h, double budget, const double *cap) {
  if (!cap)
    return INFINITY;
  double most = cap[h];
  for (int i = 0; i < 2; i++) {
    const kind_eval *x = &e[h * 2 + i];
    if (x->levels > 0 && x->rel[x->levels - 1] <= budget)
      most = fmin(most, x->density[x->levels - 1]);
  }
  return most;
}

/* svg_levels.h. Each level's heads in one pass, a head that needs both
 * kinds there in two. A wider level that keeps every pair is dense
 * attention, not a level: the budget sends the head dense (and says so)
 * instead of raising it to a mask that drops nothing, whose bound the
 * fused pass reads as exactly 0. */
stsa_status stsa_svg_wider_levels(stsa_svg *svg, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                  double budget, const svg_draw *d, const uint8_t *want,
                                  const double *cap, kind_eval *e) {
  const int64_t H = svg->cfg.heads;
  level_pass lp;
  int *kind = malloc(sizeof(int) * (size_t)(2 * H)); /* a round's, then the pending */
  stsa_status st =
      level_pass_alloc(svg, d->R, &lp) == 0 && kind
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  for (int l = 1; st == STSA_OK && l < d->levels; l++) {
    int *pending = kind + H; /* per head: bit i, kind i tries level l */
    for (int64_t h = 0; st == STSA_OK && h < H; h++) {
      pending[h] = 0;
      for (int i = 0; st == STSA_OK && i < 2; i++) {
        kind_eval *x = &e[h * 2 + i];
        if (!want[h * 2 + i] || x->levels != l || !(x->rel[l - 1] > budget))
          continue;
        const stsa_mask *mask;
        st = stsa_svg_level_plan(svg, l, i, &x->plan[l], &mask, &x->density[l]);
        if (st == STSA_OK && x->density[l] < 1 &&
            x->density[l] <= level_cap(e, h, budget, cap))
          pending[h] |= 1 << i;
      }
    }
    for (int round = 0; st == STSA_OK && round < 2; round++) {
      int any = 0;
      for (int64_t h = 0; h < H; h++) {
        const int first = pending[h] & 1 ? 0 : pending[h] & 2 ? 1 : -1;
        kind[h] = round == 0 ? first : (pending[h] == 3 ? 1 : -1);
        /* the second kind's level, unless the first's now caps it */
        if (round == 1 && kind[h] == 1 &&
            !(e[h * 2 + 1].density[l] <= level_cap(e, h, budget, cap)))
          kind[h] = -1;
        any |= kind[h] >= 0;
      }
      if (any)
        st = run_level_pass(svg, q, k, v, b, l, kind, d, &lp, e);
    }
  }
  free(kind);
  level_pass_free(&lp);
  return st;
}

/* svg_levels.h */
head_run stsa_svg_kind_run(const stsa_svg *svg, const kind_eval *e, int i) {
  if (e->pick >= e->levels)
    return stsa_svg_dense_run(svg, STSA_BUDGET_DENSE);
  return (head_run){.plan = e->plan[e->pick],
                    .density = e->density[e->pick],
                    .est_error = (float)e->rel[e->pick],
                    .est_half = (float)e->half[e->pick],
                    .budget = e->pick ? STSA_BUDGET_RAISED : STSA_BUDGET_NONE,
                    .choice = (uint8_t)(i ? STSA_AUTO_TEMPORAL : STSA_AUTO_SPATIAL),
                    .reason = STSA_AUTO_METHOD,
                    .level = (uint8_t)e->pick};
}

/* Mixed with the call's row seed for the rows of the levels a climb tries
 * after the run (stsa_svg_extend_climb): a stream no row before it came
 * from. */
#define CLIMB_SEED 0x434c494d42ull

/* session_internal.h */
stsa_status stsa_svg_extend_climb(stsa_svg *svg, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                  double budget, uint64_t row_seed, int64_t h,
                                  const head_run *ran, auto_climb *climb) {
  const int64_t H = svg->cfg.heads;
  const stsa_geometry *g = &svg->cfg.geometry;
  svg_draw d = {.R = stsa_svg_draw_count(svg),
                .seed = stsa_hash_mix(row_seed, CLIMB_SEED),
                .levels = svg->draw_levels,
                .L = g->frames * g->height * g->width,
                .est = svg->draw_est};
  const int64_t PS = stsa_svg_bound_strata(d.R);
  d.rows = calloc((size_t)(H * d.R), sizeof(int64_t)); /* the heads not tried: row 0 */
  d.sq = malloc(sizeof(double) * (size_t)(5 * PS));
  d.scratch = d.sq;
  kind_eval *e = calloc((size_t)(2 * H), sizeof *e);
  int *kind = malloc(sizeof(int) * (size_t)H);
  level_pass lp = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  stsa_status st =
      d.rows && d.sq && e && kind && d.est && level_pass_alloc(svg, d.R, &lp) == 0
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  for (int64_t j = 0; kind && j < H; j++)
    kind[j] = -1;
  while (st == STSA_OK) {
    /* the cheapest level not tried, denser than what the head ran and
     * cheaper than dense */
    int best_i = -1, best_l = 0;
    double best = svg->density_dense;
    for (int i = 0; st == STSA_OK && i < 2; i++)
      for (int l = 1; st == STSA_OK && l < d.levels; l++) {
        const stsa_plan *plan;
        const stsa_mask *mask;
        double density;
        if (climb->tried[i] >> l & 1)
          continue;
        st = stsa_svg_level_plan(svg, l, i, &plan, &mask, &density);
        if (st == STSA_OK && density > ran->density && density < best && density < 1) {
          best = density;
          best_i = i;
          best_l = l;
        }
      }
    if (st != STSA_OK || best_i < 0)
      break;
    climb->tried[best_i] |= (uint8_t)(1u << best_l);
    kind_eval *x = &e[h * 2 + best_i];
    x->levels = best_l; /* run_level_pass's bound goes to rel[best_l] */
    const stsa_mask *mask;
    st = stsa_svg_level_plan(svg, best_l, best_i, &x->plan[best_l], &mask,
                             &x->density[best_l]);
    kind[h] = best_i;
    if (st == STSA_OK)
      st = run_level_pass(svg, q, k, v, b, best_l, kind, &d, &lp, e);
    if (st == STSA_OK && x->rel[best_l] <= budget) {
      x->pick = best_l;
      climb->step[climb->steps] = stsa_svg_kind_run(svg, x, best_i);
      climb->step[climb->steps++].reason = STSA_AUTO_RECHECK;
      break;
    }
  }
  level_pass_free(&lp);
  free(d.rows);
  free(d.sq);
  free(e);
  free(kind);
  return st;
}
