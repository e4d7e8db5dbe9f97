/*
 * svg2_bound.c — step 3 of an svg2 call, the error bound: the rows it is
 * taken on (risky tokens, strata drawn over the query clusters), the bound
 * of every head's candidates from one profiling pass before the run, the
 * dense rows alone when the bound is deferred, and stsa_svg2_settle, which
 * takes it on the call's own output after the run and climbs the ladder of
 * a head past the budget.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/per_isa.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "svg/bound.h"
#include "svg/lanes.h"
#include "svg/profile.h"
#include "svg/strata.h"
#include "svg/svg2_internal.h"

/* Head h's rows in cluster order (stable), so that a register tile of rows
 * keeps the same key clusters in the profiling pass's masked sums. */
static void cluster_order(const call_work *w, int64_t h, int64_t QC, int32_t *order,
                          int64_t *count) {
  const int64_t R = w->R, *rows = w->rows + h * R;
  const int32_t *label = w->q_label + h * w->N; /* the rows are video tokens */
  memset(count, 0, sizeof(int64_t) * (size_t)(QC + 1));
  for (int64_t r = 0; r < R; r++)
    count[label[rows[r]] + 1]++;
  for (int64_t c = 0; c < QC; c++)
    count[c + 1] += count[c];
  for (int64_t r = 0; r < R; r++)
    order[count[label[rows[r]]]++] = (int32_t)r;
}

/* The log of each video query's estimated dropped mass under head h's
 * first candidate (svg2_select.c, dropped_tilt), lean[L]; row[D] scratch
 * (rows that are not contiguous f32 are converted by kern's load_row).
 * The mass is 1 / (1 + e^-z) for a logit z, whose log is min(z, 0) within
 * log 2 (within 5% of z for a mass of a tenth or less): no transcendental a
 * query, and the few queries that lose most of their mass (z > 0) do not
 * stretch the strata's scale. A warm call whose k-means gathered q read
 * them there under the layer's last tilts instead (svg2_cluster.c,
 * lean_rows; call_work's lean). */
STSA_PER_ISA static void dropped_logit(const stsa_svg2 *s, const call_work *w,
                                       const stsa_kernels *kern, int64_t b,
                                       const stsa_tensor *q, const stsa_geo *geo,
                                       int64_t h, float *row, double *lean) {
  const int32_t *ql = w->q_label + h * w->N + geo->v0;
  const float *tilt = w->q_tilt + h * s->QC * s->D;
  const double *at = w->q_tilt_at + h * s->QC;
  const int in_place = q->dtype == STSA_F32 && q->stride[3] == 1;
  for (int64_t i = 0; i < s->L; i++) {
    if (i % STSA_ROWS_AHEAD == 0)
      stsa_tensor_prefetch_rows(q, b, geo->v0 + i + STSA_ROWS_AHEAD, STSA_ROWS_AHEAD, h);
    const void *src = stsa_tensor_row(q, b, geo->v0 + i, h);
    if (!in_place)
      kern->load_row(src, (int)q->dtype, q->stride[3], s->D, row);
    const double z = at[ql[i]] + (double)lanes_dot(in_place ? src : row,
                                                   tilt + (int64_t)ql[i] * s->D, s->D);
    lean[i] = z < 0 ? z : 0;
  }
}

/* own[L]: how many of head h's n ladder candidates drop, for a video
 * query's cluster, the key cluster of its own key (a local head loses its
 * nearest keys there). The candidates keep ever more key clusters, so a
 * query whose own key's cluster candidate i drops loses it to candidates
 * 0 .. i - 1 too. */
static void own_key_dropped(const stsa_svg2 *s, const call_work *w, const stsa_geo *geo,
                            int64_t h, int n, uint8_t *own) {
  const int32_t *ql = w->q_label + h * w->N + geo->v0,
                *kl = w->k_label + h * w->N + geo->v0;
  for (int c = 0; c < n; c++) { /* n >= 1: the first candidate sets own */
    const uint8_t *keep = stsa_svg2_keep_of(w, h, c);
    for (int64_t i = 0; i < s->L; i++)
      own[i] = (uint8_t)((c ? own[i] : 0) + !keep[ql[i] * s->KC + kl[i]]);
  }
}

/* svg2_internal.h. A query that loses its own key may lose most of
 * its mass where the estimate, linear in the query over its cluster, reads
 * a tenth: one such row held 29-31% of a head's error (docs/architecture.md,
 * "The error bound"). The queries the candidates from c on still drop it
 * for, for the least c where they are at most R / 4, are read whole (a
 * stratum of one each: counted exactly, no sampling error); the others
 * that lose it (to candidates before c) are split off as their own halves
 * of the geometric strata. So the few queries a later candidate still
 * drops their own key for are read whole when the first candidate's are
 * too many: on a head from outside the repository whose error sat 85% in
 * one position of each of 6 frames, reading only the first candidate's
 * census left the second candidate's bound and its recheck at 0.043
 * against a true 0.088. */
int64_t stsa_svg2_own_key_strata(const double *lean, const uint8_t *own, int n, int64_t L,
                                 int64_t R, int64_t G, int32_t *label, int64_t *size,
                                 uint8_t *split) {
  int64_t still[STSA_SVG2_LADDER_MAX] = {0}; /* still[c]: queries with own[] > c */
  for (int64_t i = 0; i < L; i++)
    for (int c = 0; c < own[i]; c++)
      still[c]++;
  int from = 0; /* the least candidate whose census is read whole */
  while (from < n && still[from] > R / 4)
    from++;
  if (still[0] == 0 || from == n) { /* none, or too many to read whole */
    stsa_strata_geometric(lean, own, L, G, label, size);
    return 2 * G;
  }
  /* G geometric strata, as without the census: (R - owned) / 4 of them let
   * the rest's bound read tighter on local heads than their heavy tail
   * warrants (docs/benchmarks.md); with no split their upper halves stay
   * empty. Split, they are G / 2, so that two rows a stratum and the rows
   * read whole stay within R. */
  for (int64_t i = 0; i < L; i++)
    split[i] = own[i] > 0 && own[i] <= from;
  const int64_t Gs = from == 0 ? G : G / 2 > 1 ? G / 2 : 1;
  stsa_strata_geometric(lean, from > 0 ? split : NULL, L, Gs, label, size);
  int64_t next = from > 0 ? 2 * Gs : G;
  for (int64_t i = 0; i < L; i++)
    if (own[i] > from) {
      size[label[i]]--;
      label[i] = (int32_t)next;
      size[next++] = 1;
    }
  return next;
}

/* Phase 2 under a budget: the rows the heads' bounds are taken on. As many
 * as keep their dense rows near STSA_BOUND_ROW_SHARE of the call's
 * attention at the heads' mean planned density (the same count for every
 * head: one pass profiles them), drawn per head from geometric strata of
 * each query's estimated dropped mass (stsa_strata_geometric) in w->lean
 * (the gather's, else dropped_logit's here), the queries whose selection
 * drops their own key's cluster read whole or split off
 * (stsa_svg2_own_key_strata); a head env->draw_head draws is the caller's. */
stsa_status stsa_svg2_draw_rows(stsa_ctx *ctx, const stsa_svg2 *s,
                                const stsa_svg2_env *env, int64_t b, int n,
                                const stsa_tensor *q, call_work *w) {
  /* the call's work is the sum over its heads: R rows a head keep to the
   * share of it at the heads' mean density */
  double mean = 0;
  for (int64_t h = 0; h < s->H; h++)
    mean += w->planned[h] / (double)s->H;
  w->R = stsa_strata_call_rows(s->R, env->cfg->sample_rows, mean, s->L);
  const int64_t G = w->R / 4 > 1 ? w->R / 4 : 1;
  stsa_geo geo;
  stsa_geo_init(&geo, &env->cfg->geometry);
#pragma omp parallel for num_threads(w->plan_threads) schedule(dynamic, 1)
  for (int64_t h = 0; h < s->H; h++) {
    double *lean = w->lean + h * s->L; /* the gather's, or dropped_logit's */
    int32_t *label = malloc(sizeof(int32_t) * (size_t)s->L);
    int64_t *size = malloc(sizeof(int64_t) * (size_t)(2 * G + 1)); /* G = 1: 3 */
    uint8_t *own = malloc(2 * (size_t)s->L); /* and own_key_strata's split */
    float *row = malloc(sizeof(float) * (size_t)s->D);
    stsa_strata got = {w->rows + h * w->R, w->row_group + h * w->R,
                       w->row_pop + h * w->pop_stride, 0};
    const int theirs = env->draw_head ? env->draw_head(env->draw_arg, h, w->R, &got) : 0;
    int failed = theirs < 0 || !label || !size || !row || !own;
    if (!failed && !theirs) {
      if (!w->lean_ready[h])
        dropped_logit(s, w, &ctx->run->kern, b, q, &geo, h, row, lean);
      own_key_dropped(s, w, &geo, h, n, own);
      const int64_t strata =
          stsa_svg2_own_key_strata(lean, own, n, s->L, w->R, G, label, size, own + s->L);
      failed = stsa_strata_draw(label, s->L, geo.v0, strata, size, w->R,
                                stsa_hash_mix(w->row_seed, (uint64_t)h), &got) != 0;
    }
    w->job_status[h] = failed ? STSA_ERR_OUT_OF_MEMORY : STSA_OK;
    if (failed)
      stsa_fail(&w->job_err[h], STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
    w->groups[h] = got.groups;
    free(label);
    free(size);
    free(row);
    free(own);
  }
  return stsa_svg2_first_failure(ctx, w, s->H);
}

/* The bound of head h's candidate from its rows' squared errors and dense
 * energies ([R] each), at z standard errors. */
static double candidate_bound(const call_work *w, int64_t h, const double *err,
                              const double *energy, double *scratch, double z) {
  const stsa_err_sample smp = {w->R, w->row_group + h * w->R,
                               w->row_pop + h * w->pop_stride, w->groups[h]};
  return stsa_err_bound_z(&smp, err, energy, scratch, NULL, z);
}

/* The z of a head's first candidate's bound. Method svg2 under a budget
 * runs that candidate without a recheck in a deferred call (session.c,
 * recheck_heads) when its bound meets the budget: nothing was chosen on
 * the rows it was taken on, so it is an ordinary bound, at 99.5%; the
 * other 0.5% is the recheck's, which a head that climbs its ladder takes
 * (docs/architecture.md, "Method auto's recheck"). Method auto rechecks
 * every choice: 99%. */
static double first_z(const stsa_svg2_env *env, double budget) {
  return budget > 0 && !env->estimate ? STSA_BOUND_Z_HALF : STSA_BOUND_Z;
}

/* The masks of the first pass, nm a head (masks[i * H + h]): dense and the
 * configured candidate, and with nm > 2 the ladder's other steps for the
 * heads of ladder_now, a mask that keeps nothing (none) for the rest. */
static void first_pass_masks(const call_work *w, int64_t H, int nm,
                             const uint8_t *ladder_now, const stsa_mask *none,
                             const stsa_mask **masks) {
  for (int i = 0; i < nm; i++)
    for (int64_t h = 0; h < H; h++)
      masks[i * H + h] = i < 2 || ladder_now[h] ? w->mask[i * H + h] : none;
}

/* Under a budget, rel[i * H + h] = the error bound of head h's candidate i.
 * First every head's configured candidate in one pass over the heads' K/V,
 * with the rest of the ladder for the heads of ladder_now (their first
 * candidate missed the budget last time, and likely will again: one pass
 * then computes their dense rows once); then, for the other heads whose
 * bound exceeds the budget, the rest of the ladder (a head at its
 * configured rule, the common case, profiles one mask besides dense). */
stsa_status stsa_svg2_bound_heads(stsa_ctx *ctx, const stsa_svg2 *s,
                                  const stsa_svg2_env *env, const call_work *w, int n,
                                  double budget, const uint8_t *ladder_now,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, int64_t b, double *rel,
                                  double *half) {
  const int64_t H = s->H, R = w->R;
  /* the rows' squares, then the bound's scratch: 5 a stratum, pop_stride strata at most
   */
  double *sq = malloc(sizeof(double) *
                      (size_t)((1 + STSA_SVG2_LADDER_MAX) * H * R + 5 * w->pop_stride));
  int32_t *order = malloc(sizeof(int32_t) * (size_t)(H * R));
  const int32_t **orders = malloc(sizeof *orders * (size_t)H);
  int64_t *count = malloc(sizeof(int64_t) * (size_t)(s->QC + 1));
  const stsa_mask **first = malloc(sizeof *first * (size_t)((1 + n) * H));
  int whole = 0; /* some head's ladder goes in the first pass */
  for (int64_t h = 0; n > 1 && ladder_now && h < H; h++)
    whole |= ladder_now[h] != 0;
  const int nm = whole ? 1 + n : 2;
  stsa_mask *none = NULL; /* keeps no pair (j <= i - N - 1): costs the pass nothing */
  stsa_status st =
      sq && order && orders && count && first &&
              (!whole || stsa_mask_causal(-w->N - 1, &none) == STSA_OK)
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  double *scratch = sq ? sq + (1 + STSA_SVG2_LADDER_MAX) * H * R : NULL;
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    cluster_order(w, h, s->QC, order + h * R, count);
    orders[h] = order + h * R;
  }
  const stsa_mask *const *masks = (const stsa_mask *const *)w->mask;
  const stsa_geometry *g = &env->cfg->geometry;
  for (int64_t h = 0; st == STSA_OK && h < H; h++)
    for (int i = 0; st == STSA_OK && i < (whole && ladder_now[h] ? n : 1); i++)
      st = stsa_svg2_candidate_mask(s, g, w, h, i, &ctx->err);
  if (st == STSA_OK) { /* dense, the first candidates, the ladders: masks[0 .. nm H) */
    first_pass_masks(w, H, nm, ladder_now, none, first);
    st = stsa_svg_profile_heads(ctx, g, first, nm, w->rows, 1, R, orders, NULL, q, k, v,
                                b, sq);
  }
  for (int64_t h = 0; st == STSA_OK && h < H; h++)
    for (int i = 0; i < (whole && ladder_now[h] ? n : 1); i++) {
      const double *err = sq + ((1 + i) * H + h) * R, *energy = sq + h * R;
      const double z = i == 0 ? first_z(env, budget) : STSA_BOUND_Z;
      rel[i * H + h] = candidate_bound(w, h, err, energy, scratch, z);
      half[i * H + h] =
          z == STSA_BOUND_Z_HALF
              ? rel[i * H + h]
              : candidate_bound(w, h, err, energy, scratch, STSA_BOUND_Z_HALF);
    }
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    if (n < 2 || rel[h] <= budget || (whole && ladder_now[h]))
      continue;
    const stsa_mask *pm[1 + STSA_SVG2_LADDER_MAX];
    for (int i = 1; st == STSA_OK && i < n; i++)
      st = stsa_svg2_candidate_mask(s, g, w, h, i, &ctx->err);
    if (st != STSA_OK)
      break;
    pm[0] = masks[h];
    for (int i = 1; i < n; i++)
      pm[i] = masks[(1 + i) * H + h];
    st = stsa_svg_profile_head(ctx, g, pm, n, w->rows + h * R, R, orders[h], q, k, v, b,
                               h, sq);
    for (int i = 1; st == STSA_OK && i < n; i++) {
      rel[i * H + h] = candidate_bound(w, h, sq + i * R, sq, scratch, STSA_BOUND_Z);
      half[i * H + h] = candidate_bound(w, h, sq + i * R, sq, scratch, STSA_BOUND_Z_HALF);
    }
  }
  stsa_mask_free(none);
  free(first);
  free(count);
  free(orders);
  free(order);
  free(sq);
  return st;
}

/* Under a deferred bound: every head's dense rows on its drawn rows, kept
 * with the call's work in a settle_state (*out) for stsa_svg2_settle. */
stsa_status stsa_svg2_dense_rows_heads(stsa_ctx *ctx, const stsa_svg2 *s,
                                       const stsa_svg2_env *env, const call_work *w,
                                       const stsa_tensor *q, const stsa_tensor *k,
                                       const stsa_tensor *v, int64_t b,
                                       settle_state **out) {
  const int64_t H = s->H, R = w->R;
  settle_state *p = calloc(1, sizeof *p);
  float *dense_rows = malloc(sizeof(float) * (size_t)(R * H * s->D));
  double *energy = malloc(sizeof(double) * (size_t)(H * R));
  stsa_status st =
      p && dense_rows && energy
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  if (st == STSA_OK)
    st = stsa_svg_profile_dense_rows(ctx, &env->cfg->geometry,
                                     (const stsa_mask *const *)w->mask, w->rows, R, NULL,
                                     q, k, v, b, dense_rows, energy);
  if (st != STSA_OK) {
    stsa_svg2_settle_state_free(p, 0);
    free(dense_rows);
    free(energy);
    return st;
  }
  p->b = b;
  p->dense_rows = dense_rows;
  p->energy = energy;
  *out = p;
  return STSA_OK;
}

/* The squared errors err[R] of head h's rows in `out` (the call's output of
 * batch entry b) against the dense rows the plan kept. */
static void output_errors(const stsa_svg2 *s, const settle_state *p, int64_t h,
                          const stsa_tensor *out, float *row, double *err) {
  const int64_t R = p->w.R;
  stsa_svg_output_errors(out, p->b, h, s->H, s->D, p->w.rows + h * R, R, p->dense_rows,
                         row, err);
}

/* Head h past the budget: its ladder's other candidates profiled on its
 * rows (rel[i * H + h], i >= 1), then stsa_svg2_pick_head's choice in *res. */
static stsa_status climb_ladder(const stsa_svg2 *s, const stsa_svg2_env *env,
                                const settle_state *p, int64_t h, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v, double budget,
                                double *rel, double *sq, double *scratch, int32_t *order,
                                int64_t *count, stsa_svg2_head *res) {
  const int64_t H = s->H, R = p->w.R;
  const call_work *w = &p->w;
  if (p->n > 1) {
    const stsa_mask *pm[1 + STSA_SVG2_LADDER_MAX];
    for (int i = 1; i < p->n; i++)
      STSA_TRY(stsa_svg2_candidate_mask(s, &env->cfg->geometry, w, h, i, &env->ctx->err));
    pm[0] = w->mask[h];
    for (int i = 1; i < p->n; i++)
      pm[i] = w->mask[(1 + i) * H + h];
    cluster_order(w, h, s->QC, order, count);
    STSA_TRY(stsa_svg_profile_head(env->ctx, &env->cfg->geometry, pm, p->n,
                                   w->rows + h * R, R, order, q, k, v, p->b, h, sq));
    for (int i = 1; i < p->n; i++)
      rel[i * H + h] = candidate_bound(w, h, sq + i * R, sq, scratch, STSA_BOUND_Z);
  }
  return stsa_svg2_pick_head(s, env, p->ls, p->b, h, w, p->cand, p->n, rel, NULL, budget,
                             res, &env->ctx->err);
}

int stsa_svg2_deferred(const stsa_svg2 *s, int64_t b) {
  return s->pending && s->pending->b == b;
}

stsa_status stsa_svg2_settle(stsa_svg2 *s, const stsa_svg2_env *session_env, int64_t b,
                             const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const stsa_tensor *out,
                             double max_rel_error, const uint8_t *first,
                             stsa_svg2_head *heads, uint8_t *redo) {
  stsa_ctx *ctx = session_env->ctx;
  settle_state *p = s->pending;
  STSA_RETURN_IF(!p || p->b != b, &ctx->err, STSA_ERR_BAD_PARAM,
                 "svg2: batch entry %lld has no deferred bound to settle", (long long)b);
  const stsa_svg2_env env = stsa_svg2_call_env(session_env);
  const int64_t H = s->H, R = p->w.R;
  /* each row's error, the ladder's squares, the bound's scratch (5 a
   * stratum, pop_stride strata at most) */
  double *err = malloc(sizeof(double) *
                       (size_t)((2 + STSA_SVG2_LADDER_MAX) * R + 5 * p->w.pop_stride));
  double *rel = malloc(sizeof(double) * (size_t)(STSA_SVG2_LADDER_MAX * H));
  float *row = malloc(sizeof(float) * (size_t)s->D);
  int32_t *order = malloc(sizeof(int32_t) * (size_t)R);
  int64_t *count = malloc(sizeof(int64_t) * (size_t)(s->QC + 1));
  stsa_status st =
      err && rel && row && order && count
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  double *sq = err ? err + R : NULL,
         *scratch = err ? err + (2 + STSA_SVG2_LADDER_MAX) * R : NULL;
  for (int64_t i = 0; rel && i < STSA_SVG2_LADDER_MAX * H; i++)
    rel[i] = INFINITY;
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    output_errors(s, p, h, out, row, err);
    rel[h] = candidate_bound(&p->w, h, err, p->energy + h * R, scratch,
                             first_z(&env, max_rel_error));
    heads[h] = (stsa_svg2_head){.est_error = (float)rel[h]};
    redo[h] = !(rel[h] <= max_rel_error);
    if (!first || first[h])
      p->ls->first_met[b * H + h] = !redo[h];
    if (redo[h])
      st = climb_ladder(s, &env, p, h, q, k, v, max_rel_error, rel, sq, scratch, order,
                        count, &heads[h]);
  }
  if (st != STSA_OK)
    for (int64_t h = 0; h < H; h++) {
      stsa_plan_free(heads[h].plan);
      heads[h].plan = NULL;
      redo[h] = 0;
    }
  free(count);
  free(order);
  free(row);
  free(rel);
  free(err);
  stsa_svg2_pending_free(s);
  return st;
}
