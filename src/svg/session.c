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
#include "svg/strata.h"
#include "svg/svg2.h"
#include "svg/svg_strata.h"
#include "svg/windows.h"

/* SVG2's automatic tiles (measured at Wan 480p, 130 x 433 clusters: 4-5%
 * faster than 195 x 260 frame tiles). */
#define SVG2_Q_TILE 256
#define SVG2_KV_TILE 512

/* Error-budget levels of SVG heads: the configured density, then x2, x4. */
#define SVG_LEVELS 3

struct stsa_svg {
  stsa_ctx *ctx;
  stsa_svg_config cfg;
  int64_t tokens; /* N */
  stsa_svg_windows windows;
  stsa_mask *mask_dense, *mask_spatial, *mask_temporal;
  /* single-head plans over the whole sequence */
  stsa_plan *plan_dense, *plan_spatial, *plan_temporal;
  double density_dense; /* kept fraction of the dense plan (< 1 with padding text) */
  /* wider windows for the error budget, built on first use: level l keeps
   * about density * 2^l (level 0 is mask_spatial / plan_spatial above) */
  stsa_mask *level_mask[SVG_LEVELS][2];
  stsa_plan *level_plan[SVG_LEVELS][2];
  double level_density[SVG_LEVELS][2];
  /* the strata of the sampled rows (svg_strata) */
  int64_t *row_group, *row_pop, row_groups;
  stsa_svg2 *svg2; /* methods SVG2 and auto */
  int64_t svg2_q_clusters, svg2_kv_clusters;
  int svg2_q_tile, svg2_kv_tile; /* the cluster plans' tiles (auto: SVG's) */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
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
static stsa_status build_kind(stsa_svg *svg, double density, int i, stsa_mask **mask,
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
    st = build_kind(svg, cfg->density, 0, &svg->mask_spatial, &svg->plan_spatial,
                    &svg->windows.density_spatial);
  if (st == STSA_OK)
    st = build_kind(svg, cfg->density, 1, &svg->mask_temporal, &svg->plan_temporal,
                    &svg->windows.density_temporal);
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

/* The spatial (i = 0) or temporal (i = 1) plan of budget level l, built on
 * first use. */
static stsa_status level_plan(stsa_svg *svg, int l, int i, const stsa_plan **plan,
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
    STSA_TRY(build_kind(svg, svg->cfg.density * (double)(1 << l), i,
                        &svg->level_mask[l][i], &svg->level_plan[l][i],
                        &svg->level_density[l][i]));
  }
  *plan = svg->level_plan[l][i];
  *mask = svg->level_mask[l][i];
  *density = svg->level_density[l][i];
  return STSA_OK;
}

/* What one head runs with, and why. */
typedef struct head_run {
  const stsa_plan *plan;
  stsa_plan *owned; /* SVG2's plan reference, freed after the call */
  double density;
  float est_error, top_p;
  uint8_t budget;
  uint8_t choice, reason; /* stsa_auto_candidate, stsa_auto_reason */
} head_run;

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

/* The bound of the routing rows' err and energy [R] each. */
static double svg_bound(const stsa_svg *svg, const double *err, const double *energy,
                        double *scratch) {
  const stsa_err_sample smp = {svg->cfg.sample_rows, svg->row_group, svg->row_pop,
                               svg->row_groups};
  return stsa_err_bound(&smp, err, energy, scratch, NULL);
}

/* Fixed rows kept beside the drawn ones where those route the heads
 * (under a budget, and method auto): their bound is independent of the
 * routing choice and covers what the drawn rows' strata miss
 * (docs/architecture.md, "The error bound"). Half the routing rows,
 * profiled in the drawn rows' pass over K and V instead of a pass of
 * their own. */
enum { FLOOR_ROWS = 32 };

/* Mixed with the call's row seed for the floor rows' draw. */
#define FLOOR_SEED 0x464c4f4f52ull

/* Draws the call's floor rows into buf[3 * FLOOR_ROWS] (rows, group, pop):
 * one in each of min(FLOOR_ROWS, sample_rows) equal runs of the video,
 * from their own stream (profiled with the drawn rows: draw_and_profile). */
static svg_rows floor_rows(const stsa_svg *svg, uint64_t row_seed, int64_t *buf) {
  const int64_t R = svg->cfg.sample_rows < FLOOR_ROWS ? svg->cfg.sample_rows : FLOOR_ROWS;
  svg_rows s = {R, buf, buf + R, buf + 2 * R, 0, NULL, 0};
  /* stsa_svg_row_seed(x, 0, 0, 0) = x: the stream is the mixed seed's */
  stsa_svg_sample_rows(&svg->cfg.geometry, R, stsa_hash_mix(row_seed, FLOOR_SEED), 0, 0,
                       0, buf);
  stsa_svg_strata(&svg->cfg.geometry, R, buf + R, buf + 2 * R, &s.groups);
  return s;
}

/* The rows of a call's bound drawn per head where its error arises
 * (svg_strata.h), and their profile under both kinds, the floor rows'
 * with it: the bound is the larger of the two. */
typedef struct svg_draw {
  int64_t R;                  /* drawn rows a head */
  int64_t stride;             /* rows a head profiles: R, then the floor rows */
  uint64_t seed;              /* the call's row seed */
  int64_t *rows;              /* [H][stride] */
  int64_t *group;             /* [H][R] */
  int64_t *pop;               /* [H][stsa_svg_bound_strata(R)] */
  int64_t *groups;            /* [H] */
  double *sq;                 /* [3][H][stride]: energy, then spatial, temporal errors */
  double *level_sq, *scratch; /* [SVG_LEVELS][R], the bound's 5 a stratum */
} svg_draw;

/* Mixed with the call's row seed for the draws' streams. */
#define DRAW_SEED 0x5356470000ull

static void draw_free(svg_draw *d) {
  free(d->rows);
  free(d->sq);
}

/* Rows a head's drawn bound takes: sample_rows (at most L, even where
 * more than one): as many as the routing rows, so that the bound's rows
 * cost about twice the routing profile's. */
static int64_t draw_rows(const stsa_svg *svg) {
  const stsa_geometry *g = &svg->cfg.geometry;
  const int64_t L = g->frames * g->height * g->width;
  const int64_t r = svg->cfg.sample_rows < L ? svg->cfg.sample_rows : L;
  return r > 1 ? r - (r & 1) : r;
}

/* Draws each head's rows of batch entry b from the strata of both kinds'
 * estimates (STSA_SVG_STRATA_BOTH: methods svg and auto draw the same rows,
 * so their bounds of a kind agree) and profiles them under both kinds,
 * each head's followed by the floor rows (*floor; its profile set to
 * theirs): one pass over each head's K/V serves both. */
static stsa_status draw_and_profile(stsa_svg *svg, const stsa_tensor *q,
                                    const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                    uint64_t row_seed, svg_rows *floor, svg_draw *d) {
  const int64_t H = svg->cfg.heads, R = d->R, S = R + floor->R;
  const int64_t PS = stsa_svg_bound_strata(R); /* strata a head: 2 where R = 1 */
  d->seed = row_seed;
  d->stride = S;
  d->rows = malloc(sizeof(int64_t) * (size_t)(H * S + H * R + H * PS + H));
  d->sq = malloc(sizeof(double) * (size_t)(3 * H * S + SVG_LEVELS * R + 5 * PS));
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)(3 * H));
  int *failed = calloc((size_t)H, sizeof *failed);
  stsa_status st =
      d->rows && d->sq && masks && failed
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  if (st == STSA_OK) {
    d->group = d->rows + H * S;
    d->pop = d->group + H * R;
    d->groups = d->pop + H * PS;
    d->level_sq = d->sq + 3 * H * S;
    d->scratch = d->level_sq + SVG_LEVELS * R;
    const stsa_svg_keep keep = {&svg->cfg.geometry, svg->cfg.sink_frames,
                                svg->windows.frame_window, svg->windows.band};
    const int threads = svg->ctx->threads > 0 ? svg->ctx->threads : 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t h = 0; h < H; h++) {
      stsa_strata got = {d->rows + h * S, d->group + h * R, d->pop + h * PS, 0};
      failed[h] = stsa_svg_bound_draw(&keep, q, k, b, h, STSA_SVG_STRATA_BOTH, R,
                                      stsa_hash_mix(row_seed, DRAW_SEED + (uint64_t)h),
                                      &got) != 0;
      d->groups[h] = got.groups;
      memcpy(d->rows + h * S + R, floor->rows, sizeof(int64_t) * (size_t)floor->R);
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
    st = stsa_svg_profile_heads(svg->ctx, &svg->cfg.geometry, masks, 3, d->rows, 1, S,
                                NULL, q, k, v, b, d->sq);
  floor->sq = d->sq ? d->sq + R : NULL;
  floor->stride = S;
  free(masks);
  free(failed);
  return st;
}

/* The bound of head h's drawn rows: err and energy [R] each. */
static double draw_bound(const svg_draw *d, int64_t h, const double *err,
                         const double *energy) {
  const stsa_err_sample smp = {d->R, d->group + h * d->R,
                               d->pop + h * stsa_svg_bound_strata(d->R), d->groups[h]};
  return stsa_err_bound(&smp, err, energy, d->scratch, NULL);
}

/* Raises *rel to the bound of kind i's level l (mask) of head h on rows
 * drawn from the strata of that level's own estimate: a wider window loses
 * its mass elsewhere than the configured one. */
static stsa_status level_draw_bound(stsa_svg *svg, const stsa_tensor *q,
                                    const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                    int64_t h, int i, int l, const stsa_mask *mask,
                                    const svg_draw *d, double *rel) {
  const stsa_geometry *g = &svg->cfg.geometry;
  const int64_t R = d->R, sink = svg->cfg.sink_frames;
  const double video =
      stsa_svg_video_density(g, fmin(1.0, svg->cfg.density * (double)(1 << l)));
  const stsa_svg_keep keep = {g, sink, stsa_svg_frame_window(g, sink, video),
                              stsa_svg_band_halfwidth(g, sink, video)};
  int64_t *buf = malloc(sizeof(int64_t) * (size_t)(2 * R + stsa_svg_bound_strata(R)));
  STSA_RETURN_IF(!buf, &svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  stsa_strata s = {buf, buf + R, buf + 2 * R, 0};
  const uint64_t seed =
      stsa_hash_mix(d->seed, DRAW_SEED + (uint64_t)(l * svg->cfg.heads + h));
  stsa_status st =
      stsa_svg_bound_draw(&keep, q, k, b, h, i, R, seed, &s) == 0
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  const stsa_mask *pm[2] = {svg->mask_dense, mask};
  if (st == STSA_OK)
    st = stsa_svg_profile_head(svg->ctx, g, pm, 2, s.rows, R, NULL, q, k, v, b, h,
                               d->level_sq);
  if (st == STSA_OK) {
    const stsa_err_sample smp = {R, s.group, s.pop, s.groups};
    *rel =
        fmax(*rel, stsa_err_bound(&smp, d->level_sq + R, d->level_sq, d->scratch, NULL));
  }
  free(buf);
  return st;
}

/* One SVG kind of one head under the budget: its levels' plans, densities
 * and bounds, and the first level within the budget (pick = levels: none). */
typedef struct kind_eval {
  int levels, pick;
  double rel[SVG_LEVELS], density[SVG_LEVELS];
  const stsa_plan *plan[SVG_LEVELS];
} kind_eval;

/* Kind i (0 spatial, 1 temporal) of head h from the profile of the fixed
 * rows (the routing rows, or the floor rows where the drawn ones route)
 * and the drawn rows' (d->sq, where drawn): the larger of the two bounds;
 * the wider levels are profiled on the routing rows `rows` when the
 * configured one misses the budget, each also on rows drawn for it.
 * level_sq [SVG_LEVELS][R], scratch the bound's. */
static stsa_status eval_kind(stsa_svg *svg, const int64_t *rows, const svg_rows *fixed,
                             const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, int64_t b, int64_t h, int i,
                             double budget, double *level_sq, double *scratch,
                             const svg_draw *d, kind_eval *e) {
  const int64_t H = svg->cfg.heads, R = svg->cfg.sample_rows, S = d->stride;
  e->rel[0] = rows_bound(fixed, H, h, i, scratch);
  if (d->rows) /* drawn: under a budget, and always for method auto */
    e->rel[0] =
        fmax(e->rel[0], draw_bound(d, h, d->sq + ((1 + i) * H + h) * S, d->sq + h * S));
  const stsa_mask *lm[SVG_LEVELS];
  e->levels = budget > 0 && e->rel[0] > budget && svg->cfg.density < 1 ? SVG_LEVELS : 1;
  for (int l = 0; l < e->levels; l++)
    STSA_TRY(level_plan(svg, l, i, &e->plan[l], &lm[l], &e->density[l]));
  if (e->levels > 1) {
    const stsa_mask *pm[SVG_LEVELS] = {svg->mask_dense, lm[1], lm[2]};
    STSA_TRY(stsa_svg_profile_head(svg->ctx, &svg->cfg.geometry, pm, SVG_LEVELS, rows, R,
                                   NULL, q, k, v, b, h, level_sq));
    for (int l = 1; l < SVG_LEVELS; l++)
      e->rel[l] = svg_bound(svg, level_sq + l * R, level_sq, scratch);
    for (int l = 1; l < SVG_LEVELS; l++)
      STSA_TRY(level_draw_bound(svg, q, k, v, b, h, i, l, lm[l], d, &e->rel[l]));
  }
  e->pick = 0;
  while (e->pick < e->levels && budget > 0 && e->rel[e->pick] > budget)
    e->pick++;
  return STSA_OK;
}

static head_run dense_run(const stsa_svg *svg, uint8_t budget) {
  return (head_run){
      svg->plan_dense, NULL, svg->density_dense, 0, 0, budget, STSA_AUTO_DENSE,
      STSA_AUTO_METHOD};
}

/* What kind i's evaluation runs: its picked level, else dense. */
static head_run kind_run(const stsa_svg *svg, const kind_eval *e, int i) {
  if (e->pick >= e->levels)
    return dense_run(svg, STSA_BUDGET_DENSE);
  return (head_run){e->plan[e->pick],
                    NULL,
                    e->density[e->pick],
                    (float)e->rel[e->pick],
                    0,
                    e->pick ? STSA_BUDGET_RAISED : STSA_BUDGET_NONE,
                    (uint8_t)(i ? STSA_AUTO_TEMPORAL : STSA_AUTO_SPATIAL),
                    STSA_AUTO_METHOD};
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
  const int64_t R = d->R, S = d->stride, *group = d->group + h * R,
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
      err[i] += w * d->sq[((1 + i) * H + h) * S + r];
  }
  for (int i = 0; i < 2; i++)
    err[i] /= members > 0 ? members * (double)D : 1;
}

/* Under a budget, and for method auto: rows drawn per head where the
 * kinds' errors arise and the floor rows (*fixed, drawn into
 * floor_buf[3 * FLOOR_ROWS]), profiled together under both kinds (d); the
 * heads' profiling errors (mse_s, mse_t) are the drawn rows' estimates:
 * they route the heads, in place of the routing rows, which such a call
 * does not profile. */
static stsa_status profile_drawn(stsa_svg *svg, uint64_t row_seed, const stsa_tensor *q,
                                 const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                 int64_t *floor_buf, svg_rows *fixed, svg_draw *d,
                                 float *mse_s, float *mse_t) {
  *fixed = floor_rows(svg, row_seed, floor_buf);
  STSA_TRY(draw_and_profile(svg, q, k, v, b, row_seed, fixed, d));
  for (int64_t h = 0; h < svg->cfg.heads; h++) {
    double err[2];
    drawn_mse(d, svg->cfg.heads, h, svg->cfg.head_dim, err);
    mse_s[h] = (float)err[0];
    mse_t[h] = (float)err[1];
  }
  return STSA_OK;
}

/* The profile's scratch: [3][H][R], [SVG_LEVELS][R] for a head's levels,
 * the bound's 5 x R (R strata at most). */
static double *svg_scratch(const stsa_svg *svg, double **level_sq, double **scratch) {
  const int64_t H = svg->cfg.heads, R = svg->cfg.sample_rows;
  double *sq = malloc(sizeof(double) * (size_t)((3 * H + SVG_LEVELS) * R + 5 * R));
  if (sq) {
    *level_sq = sq + 3 * H * R;
    *scratch = *level_sq + SVG_LEVELS * R;
  }
  return sq;
}

/* SVG's heads of batch entry b: the kind with the smaller profiled error,
 * then, under a budget, the first level whose error bound meets it (the
 * bound also on rows drawn where the kinds' errors arise; without a
 * budget, the routing rows' alone). */
static stsa_status plan_svg_heads(stsa_svg *svg, const int64_t *rows, uint64_t row_seed,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, int64_t b, double budget,
                                  float *mse_s, float *mse_t, stsa_head_kind *kinds,
                                  head_run *run) {
  const int64_t H = svg->cfg.heads;
  double *level_sq = NULL, *scratch = NULL, *sq = svg_scratch(svg, &level_sq, &scratch);
  int64_t floor_buf[3 * FLOOR_ROWS];
  svg_rows fixed = routing_rows(svg, rows, sq);
  svg_draw d = {.R = draw_rows(svg)};
  stsa_status st =
      sq ? STSA_OK
         : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  /* without a budget nothing depends on the bound: the routing rows route
   * and the call reports their bound (docs/architecture.md, "SVG's cost");
   * under one the drawn rows route, beside the floor rows */
  if (st == STSA_OK && budget > 0)
    st = profile_drawn(svg, row_seed, q, k, v, b, floor_buf, &fixed, &d, mse_s, mse_t);
  else if (st == STSA_OK)
    st = profile_svg(svg, &fixed, q, k, v, b, sq, mse_s, mse_t);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    const int i = mse_s[h] <= mse_t[h] ? 0 : 1;
    kinds[h] = i ? STSA_HEAD_TEMPORAL : STSA_HEAD_SPATIAL;
    kind_eval e;
    st =
        eval_kind(svg, rows, &fixed, q, k, v, b, h, i, budget, level_sq, scratch, &d, &e);
    if (st == STSA_OK)
      run[h] = kind_run(svg, &e, i);
  }
  draw_free(&d);
  free(sq);
  return st;
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

/* SVG2's outcome of batch entry b per head (res[H]; the caller frees the
 * plans); estimate: bound each head even without a budget. */
static stsa_svg2_env svg2_env(const stsa_svg *svg, int video_unchecked, int estimate) {
  /* method svg2 bounds its heads on their own output rows, after the run
   * (settle_svg2_heads); auto compares the bounds before it: estimate */
  const stsa_svg2_env env = {svg->ctx,         &svg->cfg,         svg->mask_dense,
                             svg->svg2_q_tile, svg->svg2_kv_tile, video_unchecked,
                             estimate,         !estimate};
  return env;
}

static stsa_status svg2_batch(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                              uint64_t row_seed, const stsa_tensor *q,
                              const stsa_tensor *k, const stsa_tensor *v, double budget,
                              int video_unchecked, int estimate, stsa_svg2_head *res,
                              double *cluster_ms, int *cold) {
  const stsa_svg2_env env = svg2_env(svg, video_unchecked, estimate);
  return stsa_svg2_plan_batch(svg->svg2, &env, layer, B, b, row_seed, q, k, v, budget,
                              res, cluster_ms, cold);
}

/* What SVG2's outcome for a head runs. */
static head_run svg2_run(const stsa_svg *svg, const stsa_svg2_head *r) {
  if (!r->plan)
    return dense_run(svg, r->budget);
  return (head_run){r->plan,  r->plan,   r->density,     r->est_error,
                    r->top_p, r->budget, STSA_AUTO_SVG2, STSA_AUTO_METHOD};
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
  stsa_status st = svg2_batch(svg, layer, B, b, row_seed, q, k, v, budget,
                              video_unchecked, 0, res, cluster_ms, cold);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    kinds[h] = STSA_HEAD_SEMANTIC;
    run[h] = svg2_run(svg, &res[h]);
  }
  free(res);
  return st;
}

/* Method auto's heads of batch entry b: SVG's profile and each kind's
 * levels, SVG2's clusters and ladder, then per head the candidate
 * stsa_auto_pick chooses; cand[H][STSA_AUTO_CANDIDATE_COUNT_][2] gets each
 * candidate's density and bound. */
static stsa_status plan_auto_heads(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                   uint64_t row_seed, const int64_t *rows,
                                   const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, double budget,
                                   int video_unchecked, float *mse_s, float *mse_t,
                                   stsa_head_kind *kinds, head_run *run, double *cand,
                                   double *cluster_ms, int *cold) {
  const int64_t H = svg->cfg.heads;
  double *level_sq = NULL, *scratch = NULL, *sq = svg_scratch(svg, &level_sq, &scratch);
  stsa_svg2_head *res = calloc((size_t)H, sizeof *res);
  int64_t floor_buf[3 * FLOOR_ROWS];
  svg_rows fixed = {0}; /* the floor rows, once drawn */
  svg_draw d = {.R = draw_rows(svg)};
  stsa_status st =
      sq && res ? STSA_OK
                : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  if (st == STSA_OK)
    st = profile_drawn(svg, row_seed, q, k, v, b, floor_buf, &fixed, &d, mse_s, mse_t);
  if (st == STSA_OK)
    st = svg2_batch(svg, layer, B, b, row_seed, q, k, v, budget, video_unchecked, 1, res,
                    cluster_ms, cold);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    head_run options[STSA_AUTO_CANDIDATE_COUNT_];
    double density[STSA_AUTO_CANDIDATE_COUNT_], bound[STSA_AUTO_CANDIDATE_COUNT_];
    for (int i = 0; i < 2 && st == STSA_OK; i++) {
      kind_eval e;
      st = eval_kind(svg, rows, &fixed, q, k, v, b, h, i, budget, level_sq, scratch, &d,
                     &e);
      if (st != STSA_OK)
        break;
      /* a kind that met nothing offers its widest level, never chosen */
      const int l = e.pick < e.levels ? e.pick : e.levels - 1;
      density[i] = e.density[l];
      bound[i] = e.pick < e.levels ? e.rel[l] : NAN;
      options[i] = kind_run(svg, &e, i);
      cand[(h * STSA_AUTO_CANDIDATE_COUNT_ + i) * 2 + 1] = e.rel[l];
    }
    options[STSA_AUTO_SVG2] = svg2_run(svg, &res[h]);
    density[STSA_AUTO_SVG2] = res[h].plan ? res[h].density : NAN;
    bound[STSA_AUTO_SVG2] = res[h].plan ? res[h].est_error : NAN;
    cand[(h * STSA_AUTO_CANDIDATE_COUNT_ + STSA_AUTO_SVG2) * 2 + 1] = res[h].est_error;
    options[STSA_AUTO_DENSE] = dense_run(svg, STSA_BUDGET_DENSE);
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
    if (pick == STSA_AUTO_DENSE && reason == STSA_AUTO_CHEAPEST)
      run[h].budget = STSA_BUDGET_NONE; /* dense was the cheapest within it */
    if (pick != STSA_AUTO_SVG2)
      stsa_plan_free(res[h].plan);
    res[h].plan = NULL; /* owned by run[h] now, or freed */
    kinds[h] = pick == STSA_AUTO_SVG2       ? STSA_HEAD_SEMANTIC
               : pick == STSA_AUTO_TEMPORAL ? STSA_HEAD_TEMPORAL
               : pick == STSA_AUTO_SPATIAL  ? STSA_HEAD_SPATIAL
               : mse_s[h] <= mse_t[h]       ? STSA_HEAD_SPATIAL
                                            : STSA_HEAD_TEMPORAL;
  }
  for (int64_t h = 0; res && h < H; h++)
    stsa_plan_free(res[h].plan);
  draw_free(&d);
  free(res);
  free(sq);
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

/* Method svg2 under a budget, after its heads of batch entry b ran into
 * out: each head's bound from its own output rows (stsa_svg2_settle); a
 * head past the budget takes its ladder's choice and runs again alone. */
static stsa_status settle_svg2_heads(stsa_svg *svg, int64_t b, const stsa_tensor *q,
                                     const stsa_tensor *k, const stsa_tensor *v,
                                     const stsa_tensor *out, double budget,
                                     head_run *hr) {
  const int64_t H = svg->cfg.heads;
  stsa_svg2_head *res = calloc((size_t)H, sizeof *res);
  uint8_t *redo = calloc((size_t)H, 1);
  stsa_status st = res && redo ? STSA_OK
                               : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY,
                                           "svg: out of memory");
  const stsa_svg2_env env = svg2_env(svg, 0, 0);
  if (st == STSA_OK)
    st = stsa_svg2_settle(svg->svg2, &env, b, q, k, v, out, budget, res, redo);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    if (!redo[h]) {
      hr[h].est_error = res[h].est_error;
      continue;
    }
    stsa_plan_free(hr[h].owned);
    hr[h] = svg2_run(svg, &res[h]);
    res[h].plan = NULL; /* hr[h] owns it */
    const stsa_plan *plan = hr[h].plan;
    int64_t plan_head = 0;
    stsa_tensor qh = stsa_head_view(q, b, h), kh = stsa_head_view(k, b, h),
                vh = stsa_head_view(v, b, h), oh = stsa_head_view(out, b, h);
    st = stsa_sparse_attention_heads(svg->ctx, &plan, &plan_head, &qh, &kh, &vh, &oh,
                                     NULL, 0);
  }
  for (int64_t h = 0; res && h < H; h++)
    stsa_plan_free(res[h].plan);
  free(redo);
  free(res);
  return st;
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
  /* [B][H][STSA_AUTO_CANDIDATE_COUNT_] density and bound: method auto's */
  double *cand =
      malloc(sizeof(double) * (size_t)(B * H * STSA_AUTO_CANDIDATE_COUNT_ * 2));
  for (int64_t i = 0; cand && i < B * H * STSA_AUTO_CANDIDATE_COUNT_ * 2; i++)
    cand[i] = NAN;
  stsa_status st = kinds && mse && rows && plans && plan_heads && run && cand
                       ? STSA_OK
                       : stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  double profile_ms = 0, attention_ms = 0, cluster_ms = 0, kept = 0;
  int cold = 0;
  for (int64_t b = 0; st == STSA_OK && b < B; b++) {
    float *mse_s = mse + 2 * b * H, *mse_t = mse_s + H;
    head_run *hr = run + b * H;
    if (!dense) {
      double t0 = now_ms();
      stsa_svg_sample_rows(&svg->cfg.geometry, R, svg->cfg.seed, layer, step, b, rows);
      const uint64_t row_seed = stsa_svg_row_seed(svg->cfg.seed, layer, step, b);
      if (svg->cfg.method == STSA_SVG_METHOD_AUTO)
        st = plan_auto_heads(svg, layer, B, b, row_seed, rows, q, k, v, budget,
                             video_unchecked, mse_s, mse_t, kinds + b * H, hr,
                             cand + b * H * STSA_AUTO_CANDIDATE_COUNT_ * 2, &cluster_ms,
                             &cold);
      else if (svg->svg2)
        st = plan_svg2_heads(svg, layer, B, b, row_seed, q, k, v, budget, video_unchecked,
                             kinds + b * H, hr, &cluster_ms, &cold);
      else
        st = plan_svg_heads(svg, rows, row_seed, q, k, v, b, budget, mse_s, mse_t,
                            kinds + b * H, hr);
      profile_ms += now_ms() - t0;
    } else {
      for (int64_t h = 0; h < H; h++) {
        kinds[b * H + h] = STSA_HEAD_SPATIAL;
        hr[h] = dense_run(svg, STSA_BUDGET_POLICY);
        hr[h].reason = STSA_AUTO_POLICY;
      }
    }
    if (st != STSA_OK)
      break;
    double t0 = now_ms();
    st = run_heads(svg, hr, q, k, v, out, b, plans, plan_heads);
    attention_ms += now_ms() - t0;
    if (st == STSA_OK && !dense && svg->cfg.method == STSA_SVG_METHOD_SVG2 &&
        stsa_svg2_deferred(svg->svg2, b)) {
      t0 = now_ms();
      st = settle_svg2_heads(svg, b, q, k, v, out, budget, hr);
      profile_ms += now_ms() - t0;
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
  free(kinds);
  free(mse);
  free(rows);
  free(plans);
  free(plan_heads);
  free(run);
  free(cand);
  return st;
}
