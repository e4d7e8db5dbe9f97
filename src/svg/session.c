/*
 * session.c — the SVG session: window widths and plans built once, then per
 * call the step/layer policy, per-batch-entry profiling and one block-sparse
 * call in which every head follows its kind's plan.
 */
#define STSA_EXPERIMENTAL /* defines stsa_svg_kind_mask and stsa_svg_sampled_rows */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/context.h"
#include "core/sized.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "mask/mask.h"
#include "mask/plan.h"
#include "mask/sparse_call.h"
#include "svg/auto_pick.h"
#include "svg/bound.h"
#include "svg/compat.h"
#include "svg/profile.h"
#include "svg/session_internal.h"
#include "svg/strata.h"
#include "svg/svg2.h"
#include "svg/windows.h"

/* SVG2's automatic tiles (measured at Wan 480p, 130 x 433 clusters: 4-5%
 * faster than 195 x 260 frame tiles). */
#define SVG2_Q_TILE 256
#define SVG2_KV_TILE 512

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

double *stsa_svg_draw_estimates(stsa_svg *svg, size_t count) {
  if (count > svg->draw_est_count) {
    free(svg->draw_est);
    svg->draw_est = malloc(sizeof(double) * count);
    svg->draw_est_count = svg->draw_est ? count : 0;
  }
  return svg->draw_est;
}

void stsa_svg_free(stsa_svg *svg) {
  if (!svg)
    return;
  for (int l = 1; l < SVG_LEVELS; l++)
    for (int i = 0; i < 2; i++) {
      stsa_plan_free(svg->level_plan[l][i]);
      stsa_mask_free(svg->level_mask[l][i]);
    }
  stsa_svg2_free(svg->svg2);
  free(svg->draw_est);
  free(svg->row_group);
  free(svg->row_pop);
  stsa_plan_free(svg->plan_dense);
  stsa_plan_free(svg->plan_spatial);
  stsa_plan_free(svg->plan_temporal);
  stsa_mask_free(svg->mask_dense);
  stsa_mask_free(svg->mask_spatial);
  stsa_mask_free(svg->mask_temporal);
  free(svg);
}

/* kind OR sink OR text, on true coordinates; consumes `kind`. */
static stsa_status with_sink_and_text(const stsa_geometry *g, int64_t sink_frames,
                                      stsa_mask *kind, stsa_mask **out) {
  stsa_mask *text = NULL, *sink = NULL, *video = kind;
  stsa_status st = stsa_mask_text(g, &text);
  if (st == STSA_OK && sink_frames > 0) {
    st = stsa_mask_sink_frames(g, sink_frames, &sink);
    if (st == STSA_OK)
      st = stsa_mask_or(kind, sink, &video);
  }
  if (st == STSA_OK)
    st = stsa_mask_or(video, text, out);
  if (video != kind)
    stsa_mask_free(video);
  stsa_mask_free(sink);
  stsa_mask_free(text);
  stsa_mask_free(kind);
  return st;
}

static stsa_status build_plan(stsa_svg *svg, const stsa_mask *mask, stsa_order q_order,
                              stsa_order kv_order, stsa_plan **out, double *density) {
  const stsa_mask *masks[1] = {mask};
  stsa_plan_desc desc = {sizeof desc,
                         svg->tokens,
                         svg->tokens,
                         1,
                         masks,
                         &svg->cfg.geometry,
                         q_order,
                         kv_order,
                         svg->windows.q_tile,
                         svg->windows.kv_tile,
                         STSA_PLAN_DEFAULT,
                         NULL,
                         NULL};
  STSA_TRY(stsa_plan_build(svg->ctx, &desc, out));
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  stsa_plan_get_stats(*out, &st);
  *density = (double)st.pairs_kept / (double)st.pairs_total;
  return STSA_OK;
}

/* The spatial (i = 0) or temporal (i = 1) mask and plan of a density (above
 * 1: 1). Temporal heads walk queries position-major and keys sink-first, so
 * both the band and the first-frame sink are contiguous blocks of full
 * tiles. */
stsa_status stsa_svg_build_kind(stsa_svg *svg, double density, int i, stsa_mask **mask,
                                stsa_plan **plan, double *kept) {
  const stsa_geometry *g = &svg->cfg.geometry;
  const int64_t sink = svg->cfg.sink_frames;
  const double video = stsa_svg_video_density(g, density < 1 ? density : 1);
  stsa_mask *m = NULL;
  STSA_TRY(i ? stsa_mask_position_band(g, stsa_svg_band_halfwidth(g, sink, video), &m)
             : stsa_mask_frame_window(g, stsa_svg_frame_window(g, sink, video), &m));
  STSA_TRY(with_sink_and_text(g, sink, m, mask));
  return build_plan(svg, *mask, i ? STSA_ORDER_POSITION_MAJOR : STSA_ORDER_NATIVE,
                    i ? STSA_ORDER_SINK_FIRST : STSA_ORDER_NATIVE, plan, kept);
}

/* The largest multiple of `step` in [lo, hi] that divides n, or 0. */
static int largest_divisor(int64_t n, int step, int lo, int hi) {
  for (int t = hi / step * step; t >= lo; t -= step)
    if (n % t == 0)
      return t;
  return 0;
}

/* Tile sizes: explicit ones from the config, else frame-aligned ones when
 * they exist (a frame window then has no partial tile at all), else the
 * context's. Text tokens shift frame boundaries off the tile grid unless
 * they are a suffix or absent. */
static void choose_tiles(const stsa_svg_config *cfg, stsa_svg_method method,
                         const stsa_ctx *ctx, int *q_tile, int *kv_tile) {
  const stsa_geometry *g = &cfg->geometry;
  int64_t P = g->height * g->width;
  int aligned_q = 0, aligned_kv = 0;
  if (g->text_pos != STSA_TEXT_PREFIX || g->text == 0) {
    /* multiples of the kernels' register tile */
    aligned_q = largest_divisor(P, ctx->run->kern.mr, 96, 240);
    aligned_kv = largest_divisor(P, ctx->run->kern.nr, 128, 320);
  }
  int auto_ok = aligned_q && aligned_kv;
  if (method == STSA_SVG_METHOD_SVG2) {
    /* SVG2's tiles follow clusters, not frames: a query cluster of up to
     * SVG2_Q_TILE rows stays one tile (its K/V streamed once), and up to
     * SVG2_KV_TILE columns of consecutive clusters run as one tile */
    auto_ok = 1;
    aligned_q = SVG2_Q_TILE / ctx->run->kern.mr * ctx->run->kern.mr;
    aligned_kv = SVG2_KV_TILE / ctx->run->kern.nr * ctx->run->kern.nr;
  }
  *q_tile = cfg->q_tile ? cfg->q_tile : auto_ok ? aligned_q : ctx->q_tile;
  *kv_tile = cfg->kv_tile ? cfg->kv_tile : auto_ok ? aligned_kv : ctx->kv_tile;
}

/* Every size is checked before anything is derived from it: the geometry
 * first (its token count cannot overflow once it passes), then the rest
 * against it. */
static stsa_status check_config(const stsa_svg_config *c, int mr, int nr,
                                stsa_errbuf *err) {
  const stsa_geometry *g = &c->geometry;
  STSA_RETURN_IF(g->frames < 1 || g->height < 1 || g->width < 1, err, STSA_ERR_BAD_PARAM,
                 "svg: geometry %lld x %lld x %lld needs at least one video token",
                 (long long)g->frames, (long long)g->height, (long long)g->width);
  const char *why = stsa_geo_check(g);
  STSA_RETURN_IF(why, err, STSA_ERR_BAD_PARAM, "svg: geometry %lld x %lld x %lld: %s",
                 (long long)g->frames, (long long)g->height, (long long)g->width, why);
  stsa_geo geo;
  stsa_geo_init(&geo, g);
  STSA_RETURN_IF(c->heads < 1 || c->heads > STSA_MAX_TOKENS, err, STSA_ERR_BAD_PARAM,
                 "svg: heads = %lld, expected 1..2^40", (long long)c->heads);
  STSA_RETURN_IF(c->head_dim < 1 || c->head_dim > STSA_MAX_HEAD_DIM, err,
                 STSA_ERR_BAD_PARAM,
                 "svg: head_dim = %lld, expected 1..%d (the kernel's limit)",
                 (long long)c->head_dim, STSA_MAX_HEAD_DIM);
  STSA_RETURN_IF(!(c->density > 0 && c->density <= 1), err, STSA_ERR_BAD_PARAM,
                 "svg: density = %s is the KEPT fraction and must be in (0, 1]",
                 stsa_real_str(c->density, 0).s);
  STSA_RETURN_IF(c->dense_steps < 0 || c->dense_layers < 0, err, STSA_ERR_BAD_PARAM,
                 "svg: dense_steps = %lld and dense_layers = %lld, expected >= 0",
                 (long long)c->dense_steps, (long long)c->dense_layers);
  /* the sampled rows are one q tile: at most 4096 rows, a multiple of mr */
  const int64_t max_rows = 4096 / mr * mr;
  STSA_RETURN_IF(
      c->sample_rows < 1 || c->sample_rows > geo.L || c->sample_rows > max_rows, err,
      STSA_ERR_BAD_PARAM,
      "svg: sample_rows = %lld, expected 1..%lld (the smaller of the %lld "
      "video tokens and %lld, one q tile)",
      (long long)c->sample_rows, (long long)(geo.L < max_rows ? geo.L : max_rows),
      (long long)geo.L, (long long)max_rows);
  STSA_RETURN_IF(c->sink_frames < 0 || c->sink_frames > g->frames, err,
                 STSA_ERR_BAD_PARAM,
                 "svg: sink_frames = %lld, expected 0..%lld (the frames)",
                 (long long)c->sink_frames, (long long)g->frames);
  STSA_RETURN_IF(
      c->q_tile < 0 || c->q_tile > 4096 || c->kv_tile < 0 || c->kv_tile > 4096 ||
          c->kv_tile % nr != 0,
      err, STSA_ERR_BAD_PARAM,
      "svg: q_tile = %d, kv_tile = %d: 0 (automatic) or at most 4096, kv_tile a "
      "multiple of %d (the kernels' panel width)",
      c->q_tile, c->kv_tile, nr);
  const int method = (int)c->method; /* any int a caller stored */
  STSA_RETURN_IF(method < 0 || method >= STSA_SVG_METHOD_COUNT_, err, STSA_ERR_BAD_PARAM,
                 "svg: method = %d, expected 0 (svg), 1 (svg2) or 2 (auto)", method);
  STSA_RETURN_IF(!(c->max_rel_error >= 0 && c->max_rel_error < INFINITY), err,
                 STSA_ERR_BAD_PARAM,
                 "svg: max_rel_error = %s, expected 0 (no budget) or a positive bound",
                 stsa_real_str(c->max_rel_error, 0).s);
  if (c->method != STSA_SVG_METHOD_SVG)
    STSA_TRY(stsa_svg2_check(c, err));
  return STSA_OK;
}

/* The enums are compared as int: a caller may pass any value, and an enum
 * without negative constants may be unsigned. */
const char *stsa_svg_method_name(stsa_svg_method method) {
  static const char *const names[STSA_SVG_METHOD_COUNT_] = {"svg", "svg2", "auto"};
  const int i = (int)method;
  return i >= 0 && i < STSA_SVG_METHOD_COUNT_ ? names[i] : "unknown";
}

const char *stsa_budget_action_name(stsa_budget_action action) {
  static const char *const names[STSA_BUDGET_ACTION_COUNT_] = {"none", "raised", "dense",
                                                               "policy"};
  const int i = (int)action;
  return i >= 0 && i < STSA_BUDGET_ACTION_COUNT_ ? names[i] : "unknown";
}

stsa_status stsa_svg_create(stsa_ctx *ctx, const stsa_svg_config *cfg, stsa_svg **out) {
  if (!ctx || !cfg || !out)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  stsa_svg_config local;
  STSA_TRY(stsa_svg_config_read(cfg, &local, &ctx->err));
  cfg = &local;
  STSA_TRY(check_config(cfg, ctx->run->kern.mr, ctx->run->kern.nr, &ctx->err));
  stsa_svg *svg = calloc(1, sizeof *svg);
  if (!svg)
    return stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  svg->ctx = ctx;
  svg->cfg = *cfg;
  const stsa_geometry *g = &svg->cfg.geometry;
  svg->tokens = stsa_geometry_tokens(g); /* > 0: check_config passed */
  stsa_status st = STSA_OK;
  choose_tiles(cfg, cfg->method, ctx, &svg->windows.q_tile, &svg->windows.kv_tile);
  /* method auto runs its heads in one sparse call, on one tile size: SVG's
   * (frame-aligned), which SVG2's cluster plans take too */
  choose_tiles(cfg,
               cfg->method == STSA_SVG_METHOD_AUTO ? cfg->method : STSA_SVG_METHOD_SVG2,
               ctx, &svg->svg2_q_tile, &svg->svg2_kv_tile);
  double video = stsa_svg_video_density(g, cfg->density);
  svg->windows.frame_window = stsa_svg_frame_window(g, cfg->sink_frames, video);
  svg->windows.band = stsa_svg_band_halfwidth(g, cfg->sink_frames, video);
  svg->row_group = malloc(sizeof(int64_t) * (size_t)cfg->sample_rows);
  svg->row_pop = malloc(sizeof(int64_t) * (size_t)cfg->sample_rows);
  if (svg->row_group && svg->row_pop)
    stsa_svg_strata(g, cfg->sample_rows, svg->row_group, svg->row_pop, &svg->row_groups);
  else
    st = stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  stsa_mask *m = NULL;
  if (st == STSA_OK)
    st = stsa_mask_frame_window(g, g->frames, &m);
  if (st == STSA_OK)
    st = with_sink_and_text(g, 0, m, &svg->mask_dense);
  if (st == STSA_OK)
    st = build_plan(svg, svg->mask_dense, STSA_ORDER_NATIVE, STSA_ORDER_NATIVE,
                    &svg->plan_dense, &svg->density_dense);
  if (st == STSA_OK)
    st = stsa_svg_build_kind(svg, cfg->density, 0, &svg->mask_spatial, &svg->plan_spatial,
                             &svg->windows.density_spatial);
  if (st == STSA_OK)
    st = stsa_svg_build_kind(svg, cfg->density, 1, &svg->mask_temporal,
                             &svg->plan_temporal, &svg->windows.density_temporal);
  if (st == STSA_OK && cfg->method != STSA_SVG_METHOD_SVG &&
      stsa_svg2_create(cfg, &svg->svg2) != STSA_OK)
    st = stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  if (st == STSA_OK && svg->svg2)
    stsa_svg2_clusters(cfg, &svg->svg2_q_clusters, &svg->svg2_kv_clusters);
  if (st != STSA_OK) {
    stsa_svg_free(svg);
    return st;
  }
  *out = svg;
  return STSA_OK;
}

stsa_status stsa_svg_get_windows(const stsa_svg *svg, stsa_svg_windows *out) {
  if (!svg || !out)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  STSA_TRY(STSA_SIZED_CHECK_OUT(out, stsa_svg_windows, &err));
  stsa_svg_windows w = svg->windows;
  if (svg->cfg.method == STSA_SVG_METHOD_SVG2) /* the tiles its calls run on the
                                                  context's backend now */
    stsa_svg2_tiles(svg->ctx, w.q_tile, w.kv_tile, &w.q_tile, &w.kv_tile);
  stsa_sized_write(out, &w, sizeof *out);
  return STSA_OK;
}

stsa_status stsa_svg_kind_mask(const stsa_svg *svg, stsa_head_kind kind, stsa_mask **mask,
                               stsa_order *q_order, stsa_order *kv_order) {
  if (!svg || !mask)
    return STSA_ERR_NULL_ARG;
  if ((unsigned)kind >= STSA_HEAD_KIND_COUNT_ || kind == STSA_HEAD_SEMANTIC)
    return STSA_ERR_BAD_PARAM; /* SVG2's masks are per head and call */
  const stsa_mask *m = kind == STSA_HEAD_SPATIAL    ? svg->mask_spatial
                       : kind == STSA_HEAD_TEMPORAL ? svg->mask_temporal
                                                    : svg->mask_dense;
  const stsa_plan *p = kind == STSA_HEAD_SPATIAL    ? svg->plan_spatial
                       : kind == STSA_HEAD_TEMPORAL ? svg->plan_temporal
                                                    : svg->plan_dense;
  *mask = (stsa_mask *)stsa_mask_ref(m);
  if (q_order)
    *q_order = p->q_order;
  if (kv_order)
    *kv_order = p->kv_order;
  return STSA_OK;
}

stsa_status stsa_svg_sampled_rows(const stsa_svg *svg, int64_t layer, int64_t step,
                                  int64_t batch, int64_t *rows) {
  if (!svg || !rows)
    return STSA_ERR_NULL_ARG;
  if (layer < 0 || step < 0 || batch < 0)
    return STSA_ERR_BAD_PARAM;
  stsa_svg_sample_rows(&svg->cfg.geometry, svg->cfg.sample_rows, svg->cfg.seed, layer,
                       step, batch, rows);
  return STSA_OK;
}

/* A head run dense, with its budget action (session_internal.h). */
head_run stsa_svg_dense_run(const stsa_svg *svg, uint8_t budget) {
  return (head_run){.plan = svg->plan_dense,
                    .density = svg->density_dense,
                    .budget = budget,
                    .choice = STSA_AUTO_DENSE,
                    .reason = STSA_AUTO_METHOD};
}

/* The call's NaN/Inf scan (a pass over q, k and v, ~1.5% of a Wan-480p
 * SVG2 call). An SVG2 call of one batch entry past the dense steps leaves
 * the video rows of q and k to its k-means, which reads them anyway and
 * checks them on the way (their norms, stsa_kmeans_args.finite_checked)
 * before anything is written: *video_unchecked says so. With more batch
 * entries the first one's output would be written before the next one's
 * k-means. Whatever is found gets the full scan's message (the first bad
 * row of q, then k, then v). */
static stsa_status scan_inputs(const stsa_svg *svg, const stsa_tensor *q,
                               const stsa_tensor *k, const stsa_tensor *v, int defer,
                               int *video_unchecked) {
  stsa_ctx *ctx = svg->ctx;
  const int threads = stsa_finite_threads(ctx);
  if (threads == 0)
    return STSA_OK;
  stsa_geo geo;
  stsa_geo_init(&geo, &svg->cfg.geometry);
  const stsa_tensor *all[3] = {q, k, v};
  const char *names[3] = {"q", "k", "v"};
  stsa_status st = STSA_OK;
  if (defer) {
    st = stsa_check_finite_tokens(v, "v", 0, geo.N, threads, &ctx->err);
    for (int i = 0; i < 2 && st == STSA_OK; i++) { /* the text rows */
      st = stsa_check_finite_tokens(all[i], names[i], 0, geo.v0, threads, &ctx->err);
      if (st == STSA_OK)
        st = stsa_check_finite_tokens(all[i], names[i], geo.v0 + geo.L, geo.N, threads,
                                      &ctx->err);
    }
    if (st == STSA_OK) {
      *video_unchecked = 1;
      return STSA_OK;
    }
  }
  for (int i = 0; i < 3; i++) /* every row: the full scan's order and message */
    STSA_TRY(stsa_check_finite_tokens(all[i], names[i], 0, geo.N, threads, &ctx->err));
  return STSA_OK;
}

/* session_internal.h */
stsa_svg2_env stsa_svg_svg2_env(const stsa_svg *svg, int video_unchecked, int estimate) {
  /* method svg2 bounds its heads on their own output rows, after the run
   * (settle_heads); auto compares the bounds before it: estimate */
  const stsa_svg2_env env = {.ctx = svg->ctx,
                             .cfg = &svg->cfg,
                             .mask_dense = svg->mask_dense,
                             .q_tile = svg->svg2_q_tile,
                             .kv_tile = svg->svg2_kv_tile,
                             .video_unchecked = video_unchecked,
                             .estimate = estimate,
                             .settle = !estimate};
  return env;
}

stsa_status stsa_svg_svg2_batch(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                uint64_t row_seed, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v, double budget,
                                int video_unchecked, int estimate, stsa_svg2_head *res,
                                double *cluster_ms, int *cold) {
  const stsa_svg2_env env = stsa_svg_svg2_env(svg, video_unchecked, estimate);
  return stsa_svg2_plan_batch(svg->svg2, &env, layer, B, b, row_seed, q, k, v, budget,
                              res, cluster_ms, cold);
}

/* What SVG2's outcome for a head runs. */
head_run stsa_svg_svg2_run(const stsa_svg *svg, const stsa_svg2_head *r) {
  if (!r->plan)
    return stsa_svg_dense_run(svg, r->budget);
  return (head_run){.plan = r->plan,
                    .owned = r->plan,
                    .density = r->density,
                    .est_error = r->est_error,
                    .top_p = r->top_p,
                    .est_half = r->est_half,
                    .budget = r->budget,
                    .choice = STSA_AUTO_SVG2,
                    .reason = STSA_AUTO_METHOD,
                    .level = r->step};
}

/* SVG2's heads of batch entry b. */
static stsa_status plan_svg2_heads(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                   uint64_t row_seed, const stsa_tensor *q,
                                   const stsa_tensor *k, const stsa_tensor *v,
                                   double budget, int video_unchecked,
                                   stsa_head_kind *kinds, head_run *run,
                                   double *cluster_ms, int *cold) {
  const int64_t H = svg->cfg.heads;
  stsa_svg2_head *res = malloc(sizeof *res * (size_t)H);
  STSA_RETURN_IF(!res, &svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  stsa_status st = stsa_svg_svg2_batch(svg, layer, B, b, row_seed, q, k, v, budget,
                                       video_unchecked, 0, res, cluster_ms, cold);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    kinds[h] = STSA_HEAD_SEMANTIC;
    run[h] = stsa_svg_svg2_run(svg, &res[h]);
  }
  free(res);
  return st;
}

/* Runs every head of batch entry b with its plan. */
static stsa_status run_heads(stsa_svg *svg, const head_run *run, const stsa_tensor *q,
                             const stsa_tensor *k, const stsa_tensor *v,
                             const stsa_tensor *out, int64_t b, const stsa_plan **plans,
                             int64_t *plan_heads) {
  for (int64_t h = 0; h < svg->cfg.heads; h++) {
    plan_heads[h] = 0;
    plans[h] = run[h].plan;
  }
  stsa_tensor qb = stsa_batch_view(q, b), kb = stsa_batch_view(k, b),
              vb = stsa_batch_view(v, b), ob = stsa_batch_view(out, b);
  /* stsa_svg_attention scanned the inputs for NaN/Inf already */
  return stsa_sparse_attention_heads(svg->ctx, plans, plan_heads, &qb, &kb, &vb, &ob,
                                     NULL, 0);
}

stsa_status stsa_svg_run_head(stsa_svg *svg, int64_t b, int64_t h, const stsa_plan *plan,
                              const stsa_tensor *q, const stsa_tensor *k,
                              const stsa_tensor *v, const stsa_tensor *out) {
  int64_t plan_head = 0;
  stsa_tensor qh = stsa_head_view(q, b, h), kh = stsa_head_view(k, b, h),
              vh = stsa_head_view(v, b, h), oh = stsa_head_view(out, b, h);
  return stsa_sparse_attention_heads(svg->ctx, &plan, &plan_head, &qh, &kh, &vh, &oh,
                                     NULL, 0);
}

/* Method svg2 under a budget, and method auto's kept call, after the heads
 * of batch entry b ran into out: each head's bound from its own output rows
 * (stsa_svg2_settle); a head past the budget takes its SVG2 ladder's choice
 * and runs again alone (auto's: reason recheck, and kinds[h] follows). */
static stsa_status settle_heads(stsa_svg *svg, int64_t b, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v,
                                const stsa_tensor *out, double budget, head_run *hr,
                                stsa_head_kind *kinds) {
  const int64_t H = svg->cfg.heads;
  const int kept = svg->cfg.method == STSA_SVG_METHOD_AUTO;
  stsa_svg2_head *res = calloc((size_t)H, sizeof *res);
  uint8_t *redo = calloc((size_t)H, 1), *first = malloc((size_t)H);
  stsa_status st =
      res && redo && first
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  for (int64_t h = 0; first && h < H; h++) /* ran SVG2's first step */
    first[h] = hr[h].choice == STSA_AUTO_SVG2 && hr[h].level == 0;
  const stsa_svg2_env env = stsa_svg_svg2_env(svg, 0, 0);
  if (st == STSA_OK)
    st = stsa_svg2_settle(svg->svg2, &env, b, q, k, v, out, budget, kept ? first : NULL,
                          res, redo);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    if (!redo[h]) {
      hr[h].est_error = res[h].est_error;
      continue;
    }
    stsa_plan_free(hr[h].owned);
    hr[h] = stsa_svg_svg2_run(svg, &res[h]);
    res[h].plan = NULL; /* hr[h] owns it */
    if (kept) {
      hr[h].reason = STSA_AUTO_RECHECK;
      if (hr[h].choice == STSA_AUTO_SVG2)
        kinds[h] = STSA_HEAD_SEMANTIC;
    }
    st = stsa_svg_run_head(svg, b, h, hr[h].plan, q, k, v, out);
  }
  for (int64_t h = 0; res && h < H; h++)
    stsa_plan_free(res[h].plan);
  free(first);
  free(redo);
  free(res);
  return st;
}

/* The recheck of batch entry b's heads (recheck.c), but for method svg2's
 * heads that ran their ladder's first step in a deferred call: their step
 * was fixed before the call, their bound (at 99.5%) taken on rows that
 * chose nothing, and their first step met the budget at the layer's last
 * call, recheck included. A head of method svg2 whose recheck fails is
 * rechecked at its next call again (stsa_svg2_first_missed). */
static stsa_status recheck_heads(stsa_svg *svg, int64_t layer, int64_t step, int64_t B,
                                 int64_t b, int deferred, const stsa_tensor *q,
                                 const stsa_tensor *k, const stsa_tensor *v,
                                 const stsa_tensor *out, double budget, head_run *hr,
                                 auto_climb *climb, stsa_head_kind *kinds) {
  const int64_t H = svg->cfg.heads;
  uint8_t *exempt = calloc((size_t)H, 1);
  if (!exempt)
    return stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  for (int64_t h = 0; h < H; h++) /* auto's kept heads at a raised level too */
    exempt[h] =
        deferred && (hr[h].budget == STSA_BUDGET_NONE || hr[h].reason == STSA_AUTO_KEPT);
  stsa_status st =
      stsa_svg_recheck_heads(svg, stsa_svg_row_seed(svg->cfg.seed, layer, step, b), b, q,
                             k, v, out, budget, exempt, hr, climb, kinds);
  for (int64_t h = 0; st == STSA_OK && h < H; h++)
    if (svg->cfg.method == STSA_SVG_METHOD_SVG2 && hr[h].reason == STSA_AUTO_RECHECK)
      stsa_svg2_first_missed(svg->svg2, layer, B, b, h);
  free(exempt);
  return st;
}

/* What a kept call reports of its heads (hr[H]): no profile (mse [2][H]
 * NaN), and each head's bound for its candidate alone (cand [H][C][2]). */
static void kept_report(const head_run *hr, int64_t H, float *mse, double *cand) {
  for (int64_t h = 0; h < H; h++) {
    mse[h] = mse[H + h] = NAN;
    double *c = cand + (h * STSA_AUTO_CANDIDATE_COUNT_ + hr[h].choice) * 2;
    c[0] = hr[h].density;
    c[1] = hr[h].est_error;
  }
}

static void report_write(stsa_svg_report *dst, stsa_svg_report *r, int64_t BH,
                         const stsa_head_kind *kinds, const float *mse, int64_t H,
                         const head_run *run, const double *cand) {
  for (int64_t i = 0; i < BH; i++) {
    for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) {
      const double *dc = cand + (i * STSA_AUTO_CANDIDATE_COUNT_ + c) * 2;
      if (r->cand_density)
        r->cand_density[i * STSA_AUTO_CANDIDATE_COUNT_ + c] = (float)dc[0];
      if (r->cand_bound)
        r->cand_bound[i * STSA_AUTO_CANDIDATE_COUNT_ + c] = (float)dc[1];
    }
    if (r->choice)
      r->choice[i] = run[i].choice;
    if (r->choice_reason)
      r->choice_reason[i] = run[i].reason;
    int64_t b = i / H, h = i % H;
    if (r->kinds)
      r->kinds[i] = kinds[i];
    if (r->mse_spatial)
      r->mse_spatial[i] = mse[2 * b * H + h];
    if (r->mse_temporal)
      r->mse_temporal[i] = mse[2 * b * H + H + h];
    if (r->est_error)
      r->est_error[i] = run[i].est_error;
    if (r->head_density)
      r->head_density[i] = (float)run[i].density;
    if (r->budget)
      r->budget[i] = run[i].budget;
    if (r->head_top_p)
      r->head_top_p[i] = run[i].top_p;
  }
  stsa_svg_report_write(dst, r);
}

stsa_status stsa_svg_attention(stsa_svg *svg, int64_t layer, int64_t step,
                               const stsa_tensor *q, const stsa_tensor *k,
                               const stsa_tensor *v, const stsa_tensor *out,
                               stsa_svg_report *report) {
  return stsa_svg_attention_ex(svg, layer, step, q, k, v, out, NULL, report);
}

stsa_status stsa_svg_attention_ex(stsa_svg *svg, int64_t layer, int64_t step,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, const stsa_tensor *out,
                                  const stsa_svg_call *call, stsa_svg_report *report) {
  if (!svg)
    return STSA_ERR_NULL_ARG;
  stsa_ctx *ctx = svg->ctx;
  stsa_errbuf *err = &ctx->err;
  stsa_err_clear(err);
  const int64_t H = svg->cfg.heads, R = svg->cfg.sample_rows;
  STSA_TRY(stsa_check_attention(q, k, v, out, NULL, 0, err)); /* NaN/Inf: scan_inputs */
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  if (report)
    STSA_TRY(stsa_svg_report_read(report, &rep, err));
  if (rep.run)
    STSA_TRY(STSA_SIZED_CHECK_OUT(rep.run, stsa_run_info, err));
  stsa_svg_call opts = {sizeof opts, -1.0};
  if (call)
    STSA_TRY(
        stsa_sized_read(&opts, call, sizeof opts, sizeof opts, "stsa_svg_call", err));
  const double budget =
      opts.max_rel_error < 0 ? svg->cfg.max_rel_error : opts.max_rel_error;
  STSA_RETURN_IF(!(budget < INFINITY), err, STSA_ERR_BAD_PARAM,
                 "svg: max_rel_error = %s, expected a finite bound (0: none)",
                 stsa_real_str(budget, 0).s);
  STSA_RETURN_IF(q->shape[1] != svg->tokens || k->shape[1] != svg->tokens ||
                     q->shape[2] != H || q->shape[3] != svg->cfg.head_dim,
                 err, STSA_ERR_BAD_SHAPE,
                 "svg: session is for N = %lld, H = %lld, D = %lld but q is "
                 "[%lld, %lld, %lld, %lld] and k has %lld tokens",
                 (long long)svg->tokens, (long long)H, (long long)svg->cfg.head_dim,
                 (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                 (long long)q->shape[3], (long long)k->shape[1]);
  STSA_RETURN_IF(layer < 0 || step < 0, err, STSA_ERR_BAD_PARAM,
                 "svg: layer = %lld and step = %lld must be >= 0", (long long)layer,
                 (long long)step);
  const int64_t B = q->shape[0];
  const int dense = step < svg->cfg.dense_steps || layer < svg->cfg.dense_layers;
  int video_unchecked = 0;
  /* method auto profiles SVG's rows before the k-means: no deferred scan */
  const int defer = svg->cfg.method == STSA_SVG_METHOD_SVG2 && !dense && B == 1;
  STSA_TRY(scan_inputs(svg, q, k, v, defer, &video_unchecked));
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)(B * H));
  float *mse = calloc((size_t)(2 * B * H), sizeof *mse);
  int64_t *rows = malloc(sizeof *rows * (size_t)R);
  const stsa_plan **plans = malloc(sizeof *plans * (size_t)H);
  int64_t *plan_heads = malloc(sizeof *plan_heads * (size_t)H);
  head_run *run = calloc((size_t)(B * H), sizeof *run);
  /* [B][H] method auto's climbs after a failed recheck */
  auto_climb *climb = calloc((size_t)(B * H), sizeof *climb);
  /* [B][H][STSA_AUTO_CANDIDATE_COUNT_] density and bound: method auto's */
  double *cand =
      malloc(sizeof(double) * (size_t)(B * H * STSA_AUTO_CANDIDATE_COUNT_ * 2));
  for (int64_t i = 0; cand && i < B * H * STSA_AUTO_CANDIDATE_COUNT_ * 2; i++)
    cand[i] = NAN;
  stsa_status st = kinds && mse && rows && plans && plan_heads && run && cand && climb
                       ? STSA_OK
                       : stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  double profile_ms = 0, attention_ms = 0, cluster_ms = 0, kept = 0;
  int cold = 0;
  for (int64_t b = 0; st == STSA_OK && b < B; b++) {
    float *mse_s = mse + 2 * b * H, *mse_t = mse_s + H;
    head_run *hr = run + b * H;
    const int keeps = !dense && svg->cfg.method == STSA_SVG_METHOD_AUTO &&
                      stsa_svg_auto_keeps(svg, layer, B, b, budget);
    if (!dense) {
      double t0 = now_ms();
      stsa_svg_sample_rows(&svg->cfg.geometry, R, svg->cfg.seed, layer, step, b, rows);
      const uint64_t row_seed = stsa_svg_row_seed(svg->cfg.seed, layer, step, b);
      if (keeps)
        st = stsa_svg_plan_kept_heads(svg, layer, B, b, row_seed, q, k, v, budget,
                                      video_unchecked, kinds + b * H, hr, climb + b * H,
                                      &cluster_ms, &cold);
      else if (svg->cfg.method == STSA_SVG_METHOD_AUTO)
        st = stsa_svg_plan_auto_heads(svg, layer, B, b, row_seed, q, k, v, budget,
                                      video_unchecked, mse_s, mse_t, kinds + b * H, hr,
                                      cand + b * H * STSA_AUTO_CANDIDATE_COUNT_ * 2,
                                      climb + b * H, &cluster_ms, &cold);
      else if (svg->svg2)
        st = plan_svg2_heads(svg, layer, B, b, row_seed, q, k, v, budget, video_unchecked,
                             kinds + b * H, hr, &cluster_ms, &cold);
      else
        st = stsa_svg_plan_svg_heads(svg, rows, row_seed, q, k, v, b, budget, mse_s,
                                     mse_t, kinds + b * H, hr);
      profile_ms += now_ms() - t0;
    } else {
      for (int64_t h = 0; h < H; h++) {
        kinds[b * H + h] = STSA_HEAD_SPATIAL;
        hr[h] = stsa_svg_dense_run(svg, STSA_BUDGET_POLICY);
        hr[h].reason = STSA_AUTO_POLICY;
      }
    }
    if (st != STSA_OK)
      break;
    double t0 = now_ms();
    st = run_heads(svg, hr, q, k, v, out, b, plans, plan_heads);
    attention_ms += now_ms() - t0;
    const int deferred = !dense && (svg->cfg.method == STSA_SVG_METHOD_SVG2 || keeps) &&
                         stsa_svg2_deferred(svg->svg2, b);
    if (st == STSA_OK && deferred) {
      t0 = now_ms();
      st = settle_heads(svg, b, q, k, v, out, budget, hr, kinds + b * H);
      profile_ms += now_ms() - t0;
    }
    /* auto's choice and SVG2's ladder under a budget, rechecked on rows
     * drawn after them (auto's climbed from where the recheck fails; SVG2's
     * climb list is empty: dense) */
    if (st == STSA_OK && !dense && budget > 0 && svg->cfg.method != STSA_SVG_METHOD_SVG) {
      t0 = now_ms();
      st = recheck_heads(svg, layer, step, B, b, deferred, q, k, v, out, budget, hr,
                         climb + b * H, kinds + b * H);
      profile_ms += now_ms() - t0;
    }
    if (st == STSA_OK && !dense && svg->cfg.method == STSA_SVG_METHOD_AUTO) {
      stsa_svg_auto_remember(svg, layer, B, b, keeps, budget, hr);
      if (keeps)
        kept_report(hr, H, mse + 2 * b * H,
                    cand + b * H * STSA_AUTO_CANDIDATE_COUNT_ * 2);
    }
    for (int64_t h = 0; h < H; h++)
      kept += hr[h].density;
  }
  if (st == STSA_OK && report) {
    rep.dense = dense;
    rep.method = svg->cfg.method;
    rep.heads = B * H;
    rep.profile_ms = profile_ms;
    rep.attention_ms = attention_ms;
    rep.cluster_ms = cluster_ms;
    rep.cold = cold;
    rep.density = kept / (double)(B * H);
    if (svg->svg2) {
      rep.q_clusters = dense ? 0 : svg->svg2_q_clusters;
      rep.kv_clusters = dense ? 0 : svg->svg2_kv_clusters;
    }
    if (rep.run) /* what run_heads' attention recorded */
      stsa_sized_write(rep.run, &ctx->last_run, sizeof ctx->last_run);
    report_write(report, &rep, B * H, kinds, mse, H, run, cand);
  }
  for (int64_t i = 0; run && i < B * H; i++)
    stsa_plan_free(run[i].owned);
  for (int64_t i = 0; climb && i < B * H; i++)
    stsa_svg_climb_free(&climb[i]);
  free(kinds);
  free(mse);
  free(rows);
  free(plans);
  free(plan_heads);
  free(run);
  free(climb);
  free(cand);
  return st;
}
