/*
 * run_exec.c — `stsa run`'s computation (run_state.h): dense, block-sparse
 * or SVG attention head by head on one-head views of the tensors, with an
 * untimed warm-up call per kernel, and the comparison against dense.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_convert.h"
#include "cli_ran.h"
#include "cli_util.h"
#include "progress.h"
#include "run_report.h"
#include "run_state.h"

stsa_tensor run_head_view(const stsa_tensor *t, int64_t h) {
  stsa_tensor v = *t;
  v.data = (char *)t->data + (size_t)(h * t->stride[2]) * stsa_dtype_size(t->dtype);
  v.shape[2] = 1;
  return v;
}

/* The one-head views of q, k, v and out of head h. */
typedef struct head_views {
  stsa_tensor q, k, v, o;
} head_views;

static head_views views_of(const run_state *s, const stsa_tensor *out, int64_t h) {
  const stsa_tensor *t = s->qkv.t;
  return (head_views){run_head_view(&t[0], h), run_head_view(&t[1], h),
                      run_head_view(&t[2], h), run_head_view(out, h)};
}

int run_find_nonfinite(const stsa_tensor *t, const char *const *label, int64_t h0,
                       int64_t h1, int64_t s0, char *msg, size_t len) {
  const int64_t B = t[0].shape[0], S = t[0].shape[1], D = t[0].shape[3];
  float *row = malloc(sizeof *row * (size_t)D);
  if (!row)
    return 0;
  for (int i = 0; i < 3; i++) {
    const stsa_tensor *x = &t[i];
    for (int64_t b = 0; b < B; b++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t h = h0; h < h1; h++) {
          cli_load_row_f32(x, b, s, h, row);
          for (int64_t d = 0; d < D; d++)
            if (!isfinite(row[d])) {
              snprintf(msg, len, "%s holds %s at b=%lld, s=%lld, h=%lld, d=%lld",
                       label[i], isnan(row[d]) ? "NaN" : "Inf", (long long)b,
                       (long long)(s0 + s), (long long)h, (long long)d);
              free(row);
              return 1;
            }
        }
  }
  free(row);
  return 0;
}

/* cli_check for a call on the one-head views of head h: the library names a
 * non-finite input by its position in the view (always h=0), so the tool
 * names it in the tensors as given. */
static void check_head(const run_state *s, stsa_status st, int64_t h, const char *what) {
  char msg[256];
  if (st == STSA_ERR_NONFINITE &&
      run_find_nonfinite(s->qkv.t, s->qkv.label, h, h + 1, 0, msg, sizeof msg))
    cli_die("%s failed: %s", what, msg);
  cli_check(st, s->ctx, what);
}

/* The bar appears only once a run has lasted a second: short runs stay quiet. */
void run_tick(run_state *s) {
  s->units_done++;
  if (cli_now() - s->bar.t0 >= 1.0)
    progress_update(&s->bar, s->units_done);
}

void run_alloc_out(run_state *s) {
  const stsa_tensor *q = &s->qkv.t[0];
  size_t es = stsa_dtype_size(q->dtype);
  s->out_bytes = (size_t)(s->B * s->N * s->H * s->D) * es;
  s->out_data = aligned_alloc(64, (s->out_bytes + 63) / 64 * 64);
  if (!s->out_data)
    cli_die("out of memory for the output (%zu bytes)", s->out_bytes);
  s->out = *q; /* q's strides describe a contiguous tensor in its layout */
  s->out.data = s->out_data;
}

void run_ran_alloc(run_ran *r, int64_t n) {
  r->n = n;
  r->info = calloc((size_t)n, sizeof *r->info);
  r->known = calloc((size_t)n, 1);
  if (!r->info || !r->known)
    cli_die("out of memory");
}

void run_ran_free(run_ran *r) {
  free(r->info);
  free(r->known);
  *r = (run_ran){0};
}

/* What the call of head h that just succeeded ran, into ran's entry h. */
static void record_head(run_state *s, run_ran *ran, int64_t h, const char *what) {
  ran->info[h] = cli_ran(s->ctx, what);
  ran->known[h] = CLI_RAN_KNOWN;
}

/* Dense attention head by head into out; returns the timed total in ms, and
 * what each head's call ran in ran. One untimed warm-up call on head 0
 * first (threads started, caches warm). */
static double run_dense_heads(run_state *s, const stsa_tensor *out, double *ms,
                              run_ran *ran) {
  double total = 0;
  for (int64_t h = -1; h < s->H; h++) {
    const int64_t hh = h < 0 ? 0 : h;
    const head_views x = views_of(s, out, hh);
    double t0 = cli_now();
    check_head(s, stsa_attention(s->ctx, &x.q, &x.k, &x.v, &x.o, NULL), hh,
               "dense attention");
    double dt = (cli_now() - t0) * 1e3;
    if (h < 0) {
      s->warmup_ms += dt;
      continue;
    }
    ms[h] = dt;
    total += dt;
    record_head(s, ran, h, "dense attention");
    run_tick(s);
  }
  return total;
}

static void run_mode_dense(run_state *s) {
  double *ms = malloc(sizeof *ms * (size_t)s->H);
  if (!ms)
    cli_die("out of memory");
  s->compute_ms = run_dense_heads(s, &s->out, ms, &s->ran);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++)
      s->res[b * s->H + h] =
          (head_result){.kind = RUN_KIND_DENSE, .density = 1.0, .ms = ms[h]};
  free(ms);
}

stsa_mask *run_sparse_plan(run_state *s, const stsa_mask **mask1, stsa_plan_desc *desc,
                           stsa_plan **plan, double *density) {
  run_session_windows(s->ctx, &s->cfg, &s->win);
  s->have_windows = 1;
  stsa_order qo, ko;
  stsa_mask *mask =
      run_kind_mask(s->ctx, &s->cfg, (stsa_head_kind)s->o.head_kind, &qo, &ko);
  mask1[0] = mask;
  /* the session's tile sizes, so the plan is the session's plan */
  *desc = (stsa_plan_desc){.size = sizeof(stsa_plan_desc),
                           .s_q = s->N,
                           .s_kv = s->N,
                           .heads = 1,
                           .masks = mask1,
                           .geometry = &s->cfg.geometry,
                           .q_order = qo,
                           .kv_order = ko,
                           .q_tile = s->win.q_tile,
                           .kv_tile = s->win.kv_tile,
                           .flags = STSA_PLAN_DEFAULT};
  cli_check(stsa_plan_build(s->ctx, desc, plan), s->ctx, "building the plan");
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  cli_check(stsa_plan_get_stats(*plan, &st), NULL, "plan statistics");
  *density = (double)st.pairs_kept / (double)st.pairs_total;
  return mask;
}

static void run_mode_sparse(run_state *s) {
  double t0 = cli_now();
  const stsa_mask *masks[1];
  stsa_plan_desc desc;
  stsa_plan *plan;
  double density;
  stsa_mask *mask = run_sparse_plan(s, masks, &desc, &plan, &density);
  s->setup_ms = (cli_now() - t0) * 1e3;
  for (int64_t h = -1; h < s->H; h++) { /* h = -1: untimed warm-up on head 0 */
    const int64_t hh = h < 0 ? 0 : h;
    const head_views x = views_of(s, &s->out, hh);
    double t1 = cli_now();
    check_head(s, stsa_sparse_attention(s->ctx, plan, &x.q, &x.k, &x.v, &x.o, NULL), hh,
               "block-sparse attention");
    double ms = (cli_now() - t1) * 1e3;
    if (h < 0) {
      s->warmup_ms += ms;
      continue;
    }
    s->compute_ms += ms;
    record_head(s, &s->ran, h, "block-sparse attention");
    for (int64_t b = 0; b < s->B; b++)
      s->res[b * s->H + h] =
          (head_result){.kind = s->o.head_kind, .density = density, .ms = ms};
    run_tick(s);
  }
  stsa_plan_free(plan);
  stsa_mask_free(mask);
}

void run_svg_arrays_alloc(run_svg_arrays *a, int64_t n) {
  const size_t m = (size_t)n;
  a->kinds = malloc(sizeof *a->kinds * m);
  a->mse = malloc(sizeof *a->mse * 2 * m);
  a->est = malloc(sizeof *a->est * m);
  a->density = malloc(sizeof *a->density * m);
  a->top_p = malloc(sizeof *a->top_p * m);
  a->budget = malloc(m);
  a->choice = malloc(m);
  a->reason = malloc(m);
  a->cand = malloc(sizeof *a->cand * 2 * STSA_AUTO_CANDIDATE_COUNT_ * m);
  if (!a->kinds || !a->mse || !a->est || !a->density || !a->top_p || !a->budget ||
      !a->choice || !a->reason || !a->cand)
    cli_die("out of memory");
}

void run_svg_arrays_free(run_svg_arrays *a) {
  free(a->kinds);
  free(a->mse);
  free(a->est);
  free(a->density);
  free(a->top_p);
  free(a->budget);
  free(a->choice);
  free(a->reason);
  free(a->cand);
}

stsa_svg_report run_svg_report_of(const run_svg_arrays *a, int64_t n) {
  stsa_svg_report r = {.size = sizeof(stsa_svg_report)};
  r.kinds = a->kinds, r.mse_spatial = a->mse, r.mse_temporal = a->mse + n;
  r.est_error = a->est, r.head_density = a->density, r.budget = a->budget;
  r.head_top_p = a->top_p;
  r.choice = a->choice, r.choice_reason = a->reason;
  r.cand_density = a->cand, r.cand_bound = a->cand + n * STSA_AUTO_CANDIDATE_COUNT_;
  return r;
}

head_result run_svg_result(const stsa_svg_report *rep, int64_t i,
                           const stsa_svg_windows *win, double ms) {
  const stsa_head_kind kind = rep->kinds[i];
  /* SVG2 does not profile the two SVG masks: it has no such errors */
  const int has_mse = !rep->dense && kind != STSA_HEAD_SEMANTIC;
  const double kind_density = rep->dense                  ? rep->density
                              : kind == STSA_HEAD_SPATIAL ? win->density_spatial
                                                          : win->density_temporal;
  /* the windows' densities are exact (double); the report's per-head ones
   * (float) only for what they alone know: SVG2 and raised budgets */
  const int budget = rep->budget ? rep->budget[i] : STSA_BUDGET_NONE;
  const int chose_dense = rep->choice && rep->choice[i] == STSA_AUTO_DENSE;
  const int per_head = rep->head_density && (kind == STSA_HEAD_SEMANTIC || chose_dense ||
                                             (budget != STSA_BUDGET_NONE && !rep->dense));
  head_result r = {.kind = rep->dense ? RUN_KIND_DENSE : (int)kind,
                   .has_mse = has_mse,
                   .mse_spatial = has_mse ? rep->mse_spatial[i] : 0,
                   .mse_temporal = has_mse ? rep->mse_temporal[i] : 0,
                   .density = per_head ? rep->head_density[i] : kind_density,
                   .ms = ms,
                   .est_error = rep->est_error ? rep->est_error[i] : NAN,
                   .top_p = rep->head_top_p ? rep->head_top_p[i] : 0,
                   .budget = budget,
                   .choice = rep->choice ? rep->choice[i] : -1,
                   .reason = rep->choice_reason ? rep->choice_reason[i] : -1};
  for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) {
    r.cand_density[c] =
        rep->cand_density ? rep->cand_density[i * STSA_AUTO_CANDIDATE_COUNT_ + c] : NAN;
    r.cand_bound[c] =
        rep->cand_bound ? rep->cand_bound[i * STSA_AUTO_CANDIDATE_COUNT_ + c] : NAN;
  }
  return r;
}

/* A one-head session of the run's configuration. */
static stsa_svg *one_head_session(run_state *s) {
  stsa_svg_config one = s->cfg;
  one.heads = 1;
  stsa_svg *svg;
  cli_check(stsa_svg_create(s->ctx, &one, &svg), s->ctx, "creating the SVG session");
  return svg;
}

/* One SVG call per head on a one-head session: the session's per-head work
 * (profiling on rows drawn from layer, step and batch entry; one plan per
 * kind) is the same as in an H-head call. SVG2 keeps k-means centroids per
 * layer and head: one session for every head would warm-start head h from
 * head h-1's clusters, so each head (and the warm-up) gets a fresh session
 * and every call is its layer's first (cold), as in an H-head call. */
static void run_mode_svg(run_state *s) {
  const int svg2 = run_mode_has_svg2(s->o.mode);
  double t0 = cli_now();
  stsa_svg *svg = one_head_session(s);
  s->win.size = sizeof s->win;
  cli_check(stsa_svg_get_windows(svg, &s->win), NULL, "SVG windows");
  s->have_windows = 1;
  s->setup_ms = (cli_now() - t0) * 1e3;
  run_svg_arrays a;
  run_svg_arrays_alloc(&a, s->B);
  const stsa_svg_call call = {sizeof(stsa_svg_call),
                              s->o.max_error >= 0 ? s->o.max_error : -1};
  for (int64_t h = -1; h < s->H; h++) { /* h = -1: untimed warm-up on head 0 */
    const int64_t hh = h < 0 ? 0 : h;
    if (svg2 && h >= 0) {
      t0 = cli_now();
      stsa_svg_free(svg);
      svg = one_head_session(s);
      s->setup_ms += (cli_now() - t0) * 1e3;
    }
    const head_views x = views_of(s, &s->out, hh);
    stsa_svg_report rep = run_svg_report_of(&a, s->B);
    stsa_run_info ran = {.size = sizeof ran};
    rep.run = &ran; /* what the call's attention ran */
    double t1 = cli_now();
    check_head(s,
               stsa_svg_attention_ex(svg, s->layer, s->step, &x.q, &x.k, &x.v, &x.o,
                                     &call, &rep),
               hh, "SVG attention");
    double ms = (cli_now() - t1) * 1e3;
    if (h < 0) {
      s->warmup_ms += ms;
      continue;
    }
    s->compute_ms += ms;
    s->ran.info[h] = ran;
    s->ran.known[h] = CLI_RAN_KNOWN;
    s->svg_dense_call = rep.dense;
    s->profile_ms += rep.profile_ms;
    s->attention_ms += rep.attention_ms;
    s->cluster_ms += rep.cluster_ms;
    s->cold_calls += rep.cold;
    s->q_clusters = rep.q_clusters, s->kv_clusters = rep.kv_clusters;
    for (int64_t b = 0; b < s->B; b++)
      s->res[b * s->H + h] = run_svg_result(&rep, b, &s->win, ms);
    run_tick(s);
  }
  run_svg_arrays_free(&a);
  stsa_svg_free(svg);
}

void run_compare_sums(const stsa_tensor *out, const stsa_tensor *ref, int64_t b,
                      int64_t h, float *row_o, float *row_r, double *sums) {
  const int64_t S = out->shape[1], D = out->shape[3];
  double diff = 0, nr = 0, no = 0, dot = 0;
  for (int64_t i = 0; i < S; i++) {
    cli_load_row_f32(out, b, i, h, row_o);
    cli_load_row_f32(ref, b, i, h, row_r);
    for (int64_t d = 0; d < D; d++) {
      double x = row_o[d], y = row_r[d];
      diff += (x - y) * (x - y);
      nr += y * y;
      no += x * x;
      dot += x * y;
    }
  }
  sums[0] = diff, sums[1] = nr, sums[2] = no, sums[3] = dot;
}

void run_compare_finish(const double *sums, double warn_rel_l2, head_result *r) {
  const double diff = sums[0], nr = sums[1], no = sums[2], dot = sums[3];
  r->rel_l2 = nr > 0 ? sqrt(diff / nr) : (diff > 0 ? INFINITY : 0.0);
  r->cosine = no > 0 && nr > 0 ? dot / sqrt(no * nr) : (no == nr ? 1.0 : 0.0);
  r->warn = !(r->rel_l2 <= warn_rel_l2); /* NaN warns too */
}

/* Dense attention into an f32 [B, N, H, D] buffer, then per-head errors of
 * the output as written (in q's dtype) against it. */
static void compare_dense(run_state *s) {
  size_t n = (size_t)(s->B * s->N * s->H * s->D);
  float *ref_data = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  float *rows = malloc(sizeof *rows * (size_t)(2 * s->D));
  double *ms = malloc(sizeof *ms * (size_t)s->H);
  if (!ref_data || !rows || !ms)
    cli_die("out of memory for the dense reference (%zu floats)", n);
  stsa_tensor ref = stsa_tensor_bshd(ref_data, STSA_F32, s->B, s->N, s->H, s->D);
  s->dense_ms = run_dense_heads(s, &ref, ms, &s->dense_ran);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++) {
      head_result *r = &s->res[b * s->H + h];
      double sums[4];
      run_compare_sums(&s->out, &ref, b, h, rows, rows + s->D, sums);
      run_compare_finish(sums, s->o.warn_rel_l2, r);
      s->n_warn += r->warn;
    }
  free(ref_data);
  free(rows);
  free(ms);
}

/* --mode svg2 and auto over the resolved configuration: SVG2's published
 * top-p 0.9 (a preset's, if it carries one) unless --density asks for a key
 * budget. (Inside auto a key budget at the density was measured worse than
 * top-p 0.9 on the quality zoo: docs/benchmarks.md.) */
static void run_svg2_config(const run_opts *o, stsa_svg_config *c) {
  c->method = o->mode == RUN_MODE_AUTO ? STSA_SVG_METHOD_AUTO : STSA_SVG_METHOD_SVG2;
  if (o->top_p >= 0)
    c->svg2.top_p = o->top_p;
  else if (o->geo.density > 0)
    c->svg2.top_p = 0; /* the density is each query cluster's key budget */
  else if (!(c->svg2.top_p > 0))
    c->svg2.top_p = 0.9;
  if (o->q_clusters >= 0)
    c->svg2.q_clusters = o->q_clusters;
  if (o->kv_clusters >= 0)
    c->svg2.kv_clusters = o->kv_clusters;
}

void run_setup_config(run_state *s) {
  const stsa_tensor *q = &s->qkv.t[0];
  s->B = q->shape[0], s->N = q->shape[1], s->H = q->shape[2], s->D = q->shape[3];
  run_resolve_config(&s->o.geo, s->H, s->D, &s->cfg, s->cfg_note, sizeof s->cfg_note);
  run_check_tokens(&s->cfg, &s->qkv, s->o.in.layout);
  if (run_mode_has_svg2(s->o.mode))
    run_svg2_config(&s->o, &s->cfg);
  const int svg = run_mode_is_svg(s->o.mode);
  s->layer = svg ? (s->o.layer >= 0 ? s->o.layer : s->cfg.dense_layers) : -1;
  s->step = svg ? (s->o.step >= 0 ? s->o.step : s->cfg.dense_steps) : -1;
  s->res = calloc((size_t)(s->B * s->H), sizeof *s->res);
  if (!s->res)
    cli_die("out of memory");
}

void run_setup(run_state *s) {
  run_setup_config(s);
  run_alloc_out(s);
}

void run_compute(run_state *s) {
  run_ran_alloc(&s->ran, s->H);
  if (s->o.compare_dense)
    run_ran_alloc(&s->dense_ran, s->H);
  progress_start(&s->bar, "stsa run", s->H * (s->o.compare_dense ? 2 : 1), s->o.quiet);
  if (s->o.mode == RUN_MODE_DENSE)
    run_mode_dense(s);
  else if (s->o.mode == RUN_MODE_SPARSE)
    run_mode_sparse(s);
  else
    run_mode_svg(s);
  if (s->o.compare_dense)
    compare_dense(s);
  progress_finish(&s->bar);
}
