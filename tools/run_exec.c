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

#include "cli_util.h"
#include "core/convert.h"
#include "core/tensor.h"
#include "progress.h"
#include "run_report.h"
#include "run_state.h"

/* Head h of a [B, S, H, D] tensor as a [B, S, 1, D] view. */
static stsa_tensor head_view(const stsa_tensor *t, int64_t h) {
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
  return (head_views){head_view(&t[0], h), head_view(&t[1], h), head_view(&t[2], h),
                      head_view(out, h)};
}

/* The first non-finite value of head h of q, k or v, as "<tensor> holds NaN
 * or Inf at b=.., s=.., h=.., d=.." in the caller's coordinates; 0 if none. */
static int find_nonfinite(const run_state *s, int64_t h, char *msg, size_t len) {
  float *row = malloc(sizeof *row * (size_t)s->D);
  if (!row)
    return 0;
  for (int t = 0; t < 3; t++) {
    const stsa_tensor *x = &s->qkv.t[t];
    for (int64_t b = 0; b < s->B; b++)
      for (int64_t i = 0; i < s->N; i++) {
        stsa_load_row_f32(stsa_tensor_row(x, b, i, h), x->dtype, x->stride[3], s->D, row);
        for (int64_t d = 0; d < s->D; d++)
          if (!isfinite(row[d])) {
            snprintf(msg, len, "%s holds %s at b=%lld, s=%lld, h=%lld, d=%lld",
                     s->qkv.label[t], isnan(row[d]) ? "NaN" : "Inf", (long long)b,
                     (long long)i, (long long)h, (long long)d);
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
  if (st == STSA_ERR_NONFINITE && find_nonfinite(s, h, msg, sizeof msg))
    cli_die("%s failed: %s", what, msg);
  cli_check(st, s->ctx, what);
}

/* The bar appears only once a run has lasted a second: short runs stay quiet. */
static void tick(run_state *s) {
  s->units_done++;
  if (cli_now() - s->bar.t0 >= 1.0)
    progress_update(&s->bar, s->units_done);
}

/* An output buffer like q: same dtype, layout and shape, contiguous. */
static void alloc_out(run_state *s) {
  const stsa_tensor *q = &s->qkv.t[0];
  size_t es = stsa_dtype_size(q->dtype);
  s->out_bytes = (size_t)(s->B * s->N * s->H * s->D) * es;
  s->out_data = aligned_alloc(64, (s->out_bytes + 63) / 64 * 64);
  if (!s->out_data)
    cli_die("out of memory for the output (%zu bytes)", s->out_bytes);
  s->out = *q; /* q's strides describe a contiguous tensor in its layout */
  s->out.data = s->out_data;
}

/* Dense attention head by head into out; returns the timed total in ms.
 * One untimed warm-up call on head 0 first (threads started, caches warm). */
static double run_dense_heads(run_state *s, const stsa_tensor *out, double *ms) {
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
    tick(s);
  }
  return total;
}

static void run_mode_dense(run_state *s) {
  double *ms = malloc(sizeof *ms * (size_t)s->H);
  if (!ms)
    cli_die("out of memory");
  s->compute_ms = run_dense_heads(s, &s->out, ms);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++)
      s->res[b * s->H + h] =
          (head_result){.kind = RUN_KIND_DENSE, .density = 1.0, .ms = ms[h]};
  free(ms);
}

static void run_mode_sparse(run_state *s) {
  double t0 = cli_now();
  run_session_windows(s->ctx, &s->cfg, &s->win);
  s->have_windows = 1;
  stsa_order qo, ko;
  stsa_mask *mask =
      run_kind_mask(s->ctx, &s->cfg, (stsa_head_kind)s->o.head_kind, &qo, &ko);
  const stsa_mask *masks[1] = {mask};
  /* the session's tile sizes, so the plan is the session's plan */
  stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                         s->N,
                         s->N,
                         1,
                         masks,
                         &s->cfg.geometry,
                         qo,
                         ko,
                         s->win.q_tile,
                         s->win.kv_tile,
                         STSA_PLAN_DEFAULT,
                         NULL,
                         NULL};
  stsa_plan *plan;
  cli_check(stsa_plan_build(s->ctx, &desc, &plan), s->ctx, "building the plan");
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  cli_check(stsa_plan_get_stats(plan, &st), NULL, "plan statistics");
  const double density = (double)st.pairs_kept / (double)st.pairs_total;
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
    for (int64_t b = 0; b < s->B; b++)
      s->res[b * s->H + h] =
          (head_result){.kind = s->o.head_kind, .density = density, .ms = ms};
    tick(s);
  }
  stsa_plan_free(plan);
  stsa_mask_free(mask);
}

/* One SVG call per head on a one-head session: the session's per-head work
 * (profiling on rows drawn from layer, step and batch entry; one plan per
 * kind) is the same as in an H-head call. */
static void run_mode_svg(run_state *s) {
  double t0 = cli_now();
  stsa_svg_config one = s->cfg;
  one.heads = 1;
  stsa_svg *svg;
  cli_check(stsa_svg_create(s->ctx, &one, &svg), s->ctx, "creating the SVG session");
  s->win.size = sizeof s->win;
  cli_check(stsa_svg_get_windows(svg, &s->win), NULL, "SVG windows");
  s->have_windows = 1;
  s->setup_ms = (cli_now() - t0) * 1e3;
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)s->B);
  float *mse = malloc(sizeof *mse * (size_t)(2 * s->B));
  if (!kinds || !mse)
    cli_die("out of memory");
  for (int64_t h = -1; h < s->H; h++) { /* h = -1: untimed warm-up on head 0 */
    const int64_t hh = h < 0 ? 0 : h;
    const head_views x = views_of(s, &s->out, hh);
    stsa_svg_report rep = {.size = sizeof(stsa_svg_report)};
    rep.kinds = kinds, rep.mse_spatial = mse, rep.mse_temporal = mse + s->B;
    double t1 = cli_now();
    check_head(s,
               stsa_svg_attention(svg, s->layer, s->step, &x.q, &x.k, &x.v, &x.o, &rep),
               hh, "SVG attention");
    double ms = (cli_now() - t1) * 1e3;
    if (h < 0) {
      s->warmup_ms += ms;
      continue;
    }
    s->compute_ms += ms;
    s->svg_dense_call = rep.dense;
    s->profile_ms += rep.profile_ms;
    s->attention_ms += rep.attention_ms;
    for (int64_t b = 0; b < s->B; b++) {
      head_result *r = &s->res[b * s->H + h];
      int spatial = kinds[b] == STSA_HEAD_SPATIAL;
      *r = (head_result){.kind = rep.dense ? RUN_KIND_DENSE : (int)kinds[b],
                         .has_mse = !rep.dense,
                         .mse_spatial = mse[b],
                         .mse_temporal = mse[s->B + b],
                         .density = rep.dense ? rep.density
                                    : spatial ? s->win.density_spatial
                                              : s->win.density_temporal,
                         .ms = ms};
    }
    tick(s);
  }
  free(kinds);
  free(mse);
  stsa_svg_free(svg);
}

/* Relative L2 and cosine of head (b, h) of out against dense, over S x D. */
static void compare_head(const stsa_tensor *out, const stsa_tensor *ref, int64_t b,
                         int64_t h, float *row_o, float *row_r, head_result *r) {
  const int64_t S = out->shape[1], D = out->shape[3];
  double diff = 0, nr = 0, no = 0, dot = 0;
  for (int64_t i = 0; i < S; i++) {
    stsa_load_row_f32(stsa_tensor_row(out, b, i, h), out->dtype, 1, D, row_o);
    stsa_load_row_f32(stsa_tensor_row(ref, b, i, h), ref->dtype, 1, D, row_r);
    for (int64_t d = 0; d < D; d++) {
      double x = row_o[d], y = row_r[d];
      diff += (x - y) * (x - y);
      nr += y * y;
      no += x * x;
      dot += x * y;
    }
  }
  r->rel_l2 = nr > 0 ? sqrt(diff / nr) : (diff > 0 ? INFINITY : 0.0);
  r->cosine = no > 0 && nr > 0 ? dot / sqrt(no * nr) : (no == nr ? 1.0 : 0.0);
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
  s->dense_ms = run_dense_heads(s, &ref, ms);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++) {
      head_result *r = &s->res[b * s->H + h];
      compare_head(&s->out, &ref, b, h, rows, rows + s->D, r);
      r->warn = !(r->rel_l2 <= s->o.warn_rel_l2); /* NaN warns too */
      s->n_warn += r->warn;
    }
  free(ref_data);
  free(rows);
  free(ms);
}

void run_setup(run_state *s) {
  const stsa_tensor *q = &s->qkv.t[0];
  s->B = q->shape[0], s->N = q->shape[1], s->H = q->shape[2], s->D = q->shape[3];
  run_resolve_config(&s->o.geo, s->H, s->D, &s->cfg, s->cfg_note, sizeof s->cfg_note);
  run_check_tokens(&s->cfg, &s->qkv, s->o.in.layout);
  s->layer = s->o.mode == RUN_MODE_SVG
                 ? (s->o.layer >= 0 ? s->o.layer : s->cfg.dense_layers)
                 : -1;
  s->step =
      s->o.mode == RUN_MODE_SVG ? (s->o.step >= 0 ? s->o.step : s->cfg.dense_steps) : -1;
  s->res = calloc((size_t)(s->B * s->H), sizeof *s->res);
  if (!s->res)
    cli_die("out of memory");
  alloc_out(s);
}

void run_compute(run_state *s) {
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
