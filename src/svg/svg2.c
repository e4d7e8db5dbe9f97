/*
 * svg2.c — see svg2.h: the cluster counts, the config's checks, the
 * session's life, and the flow of a call. Per (batch, head) of a call:
 *   1. gather the video queries and keys (f32) and run k-means on each:
 *      k-means++ and cfg.kmeans_iters_cold iterations on a layer's first
 *      call, cfg.kmeans_iters_warm from that layer's previous centroids after
 *      (svg2_cluster.c; the layer's centroids, labels, plans and the tilts
 *      of step 3's strata are kept in the layer store, svg2_layers.c);
 *   2. score the centroid pairs (select.h) and keep, per query cluster, the
 *      key clusters of the top-p (or key-budget) rule, and of the larger
 *      candidates of the ladder under a budget (svg2_select.c);
 *   3. under an error budget, bound the head's relative error from rows
 *      drawn in every query cluster (strata.h, bound.h) against the dense
 *      rows, for the planned selection and the larger ones of the ladder
 *      (one pass over the heads' K/V serves all); take the first whose
 *      bound is within the budget, else run the head dense. A warm call
 *      whose heads all met the budget with their first candidate at the
 *      layer's last call profiles the dense rows only: its heads run their
 *      first candidates and the bound is taken on their output rows after
 *      the run (stsa_svg2_settle; a head that misses then climbs its ladder
 *      and runs again). The rows, the bounds before the run and the settling
 *      after it: svg2_bound.c.
 *      Without a budget nothing is profiled (the estimate is NaN);
 *   4. build (or reuse, when labels and selection are unchanged) the head's
 *      cluster plan (svg2_select.c).
 * The call's buffers live in svg2_work.c; what the files share, in
 * svg2_internal.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "svg/svg2.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/context.h"
#include "kernel/dispatch.h"
#include "kernel/problem.h"
#include "mask/geometry.h"
#include "mask/mask.h"
#include "svg/strata.h"
#include "svg/svg2_internal.h"

/* Published counts (Wan 2.1 at 720p, 75,600 video tokens): 300 query and
 * 1000 key clusters; other sizes scale them, down to the floors below. */
#define REF_TOKENS 75600.0
#define REF_Q_CLUSTERS 300.0
#define REF_KV_CLUSTERS 1000.0
/* Clusters of fewer tokens than this make rectangles too small to pay. */
#define MIN_CLUSTER_TOKENS 8
/* Automatic counts stay at least this many per frame: scaled down to a
 * small input (4 / 13 at 5 x 12 x 16 tokens), a cluster merges a small
 * object with its background and every query of it loses the object's keys
 * (the quality zoo's mean error 0.17 -> 0.08 at the same budget). Below the
 * published counts at Wan 480p and 720p (126 / 420 at 21 frames). */
#define Q_PER_FRAME 6
#define KV_PER_FRAME 20
/* The profiled rows are one q tile of at most 4096 rows, a multiple of the
 * kernels' register-tile rows (12 or 6). */
#define MAX_PROFILE_ROWS 4092

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Largest a with a * b <= cap (b >= 1), at least 1. */
static int64_t fit_under(int64_t b, int64_t cap) { return cap / b > 0 ? cap / b : 1; }

void stsa_svg2_clusters(const stsa_svg_config *cfg, int64_t *q_clusters,
                        int64_t *kv_clusters) {
  const stsa_geometry *g = &cfg->geometry;
  const int64_t L = g->frames * g->height * g->width;
  const int64_t cap = STSA_SVG2_MAX_CLUSTER_PAIRS;
  int64_t most = L / MIN_CLUSTER_TOKENS > 0 ? L / MIN_CLUSTER_TOKENS : 1;
  int64_t qc = cfg->svg2.q_clusters, kc = cfg->svg2.kv_clusters;
  if (!qc)
    qc = (int64_t)llround(REF_Q_CLUSTERS * (double)L / REF_TOKENS);
  if (!kc)
    kc = (int64_t)llround(REF_KV_CLUSTERS * (double)L / REF_TOKENS);
  if (!cfg->svg2.q_clusters && qc < Q_PER_FRAME * g->frames)
    qc = Q_PER_FRAME * g->frames;
  if (!cfg->svg2.kv_clusters && kc < KV_PER_FRAME * g->frames)
    kc = KV_PER_FRAME * g->frames;
  qc = cfg->svg2.q_clusters ? qc : qc < 1 ? 1 : qc > most ? most : qc;
  kc = cfg->svg2.kv_clusters ? kc : kc < 1 ? 1 : kc > most ? most : kc;
  /* Automatic counts give way to the cap on the pairs (from ~280,000 video
   * tokens on): both shrink by the same factor, or the automatic one alone
   * next to an explicit one. Explicit counts past it are the check's. */
  if (qc > cap / kc) {
    if (!cfg->svg2.q_clusters && !cfg->svg2.kv_clusters) {
      const double f = sqrt((double)cap / ((double)qc * (double)kc));
      qc = (int64_t)((double)qc * f) > 1 ? (int64_t)((double)qc * f) : 1;
      kc = fit_under(qc, cap) < kc ? fit_under(qc, cap) : kc;
    } else if (!cfg->svg2.q_clusters) {
      qc = fit_under(kc, cap);
    } else if (!cfg->svg2.kv_clusters) {
      kc = fit_under(qc, cap);
    }
  }
  *q_clusters = qc;
  *kv_clusters = kc;
}

stsa_status stsa_svg2_check(const stsa_svg_config *c, stsa_errbuf *err) {
  const int64_t L = c->geometry.frames * c->geometry.height * c->geometry.width;
  STSA_RETURN_IF(c->svg2.q_clusters < 0 || c->svg2.q_clusters > L ||
                     c->svg2.kv_clusters < 0 || c->svg2.kv_clusters > L,
                 err, STSA_ERR_BAD_PARAM,
                 "svg2: %lld query and %lld key clusters, expected 0 (automatic) or "
                 "1..%lld (the video tokens)",
                 (long long)c->svg2.q_clusters, (long long)c->svg2.kv_clusters,
                 (long long)L);
  int64_t qc = 0, kc = 0;
  stsa_svg2_clusters(c, &qc, &kc);
  STSA_RETURN_IF(qc > STSA_SVG2_MAX_CLUSTER_PAIRS / kc, err, STSA_ERR_BAD_PARAM,
                 "svg2: %lld query x %lld key clusters, expected at most %lld cluster "
                 "pairs (2^22, e.g. 2048 x 2048; each call's scratch grows with them)",
                 (long long)qc, (long long)kc, (long long)STSA_SVG2_MAX_CLUSTER_PAIRS);
  STSA_RETURN_IF(!(c->svg2.top_p >= 0 && c->svg2.top_p <= 1), err, STSA_ERR_BAD_PARAM,
                 "svg2: top_p = %s, expected 0 (use density) or (0, 1]",
                 stsa_real_str(c->svg2.top_p, 0).s);
  STSA_RETURN_IF(!(c->svg2.min_kv_fraction >= 0 && c->svg2.min_kv_fraction <= 1), err,
                 STSA_ERR_BAD_PARAM, "svg2: min_kv_fraction = %s, expected [0, 1]",
                 stsa_real_str(c->svg2.min_kv_fraction, 0).s);
  STSA_RETURN_IF(c->svg2.kmeans_iters_cold < 0 || c->svg2.kmeans_iters_cold > 10000 ||
                     c->svg2.kmeans_iters_warm < 0 || c->svg2.kmeans_iters_warm > 10000,
                 err, STSA_ERR_BAD_PARAM,
                 "svg2: k-means iterations %lld (cold) and %lld (warm), expected "
                 "0 (default) to 10000",
                 (long long)c->svg2.kmeans_iters_cold,
                 (long long)c->svg2.kmeans_iters_warm);
  return STSA_OK;
}

stsa_status stsa_svg2_create(const stsa_svg_config *cfg, stsa_svg2 **out) {
  stsa_svg2 *s = calloc(1, sizeof *s);
  if (!s)
    return STSA_ERR_OUT_OF_MEMORY;
  stsa_svg2_clusters(cfg, &s->QC, &s->KC);
  s->H = cfg->heads;
  s->D = cfg->head_dim;
  s->L = cfg->geometry.frames * cfg->geometry.height * cfg->geometry.width;
  s->R = stsa_strata_rows(cfg->sample_rows, s->QC, s->L, MAX_PROFILE_ROWS);
  *out = s;
  return STSA_OK;
}

void stsa_svg2_free(stsa_svg2 *s) {
  if (!s)
    return;
  stsa_svg2_pending_free(s);
  stsa_svg2_layers_free(s);
  for (int i = 0; i < s->km_slots; i++)
    stsa_workspace_release(&s->km_scratch[i]);
  free(s->km_scratch);
  stsa_workspace_release(&s->xbuf);
  free(s);
}

void stsa_svg2_tiles(const stsa_ctx *ctx, int q_tile, int kv_tile, int *q_run,
                     int *kv_run) {
  const int mr = ctx->run->kern.mr, nr = ctx->run->kern.nr;
  *q_run = (q_tile + mr - 1) / mr * mr;
  *kv_run = (kv_tile + nr - 1) / nr * nr;
}

/* The session's env with its tiles on the backend the context has now. */
stsa_svg2_env stsa_svg2_call_env(const stsa_svg2_env *session_env) {
  stsa_svg2_env run_env = *session_env;
  stsa_svg2_tiles(session_env->ctx, session_env->q_tile, session_env->kv_tile,
                  &run_env.q_tile, &run_env.kv_tile);
  return run_env;
}

void stsa_svg2_first_missed(stsa_svg2 *s, int64_t layer, int64_t B, int64_t b,
                            int64_t h) {
  layer_state *ls = stsa_svg2_layer_for(s, layer, B);
  if (ls) /* NULL: out of memory, and the layer starts cold */
    ls->first_met[b * s->H + h] = 0;
}

/* The layer's store of its last tilt (layer_state), at the first call that
 * bounds; 0, or -1 out of memory. */
static int keep_tilt_alloc(const stsa_svg2 *s, layer_state *ls) {
  if (ls->tilt)
    return 0;
  const size_t heads = (size_t)(ls->B * s->H);
  ls->tilt = malloc(sizeof(float) * heads * (size_t)(s->QC * s->D));
  ls->tilt_at = malloc(sizeof(double) * heads * (size_t)s->QC);
  ls->tilt_valid = calloc(heads, 1);
  if (ls->tilt && ls->tilt_at && ls->tilt_valid)
    return 0;
  free(ls->tilt);
  free(ls->tilt_at);
  free(ls->tilt_valid);
  ls->tilt = NULL;
  ls->tilt_at = NULL;
  ls->tilt_valid = NULL;
  return -1;
}

/* Keeps batch entry b's tilts of w (NULL: the call has none) for the
 * layer's next call. */
static void keep_tilt(const stsa_svg2 *s, layer_state *ls, int64_t b,
                      const call_work *w) {
  if (!ls->tilt)
    return;
  const int64_t H = s->H, QD = s->QC * s->D;
  for (int64_t h = 0; h < H; h++)
    ls->tilt_valid[b * H + h] = w != NULL;
  if (!w)
    return;
  memcpy(ls->tilt + b * H * QD, w->q_tilt, sizeof(float) * (size_t)(H * QD));
  memcpy(ls->tilt_at + b * H * s->QC, w->q_tilt_at, sizeof(double) * (size_t)(H * s->QC));
}

/* The heads whose first candidate missed the budget at the layer's last
 * call (ladder[H]); NULL on a cold call, without a budget, or without the
 * buffer. */
static const uint8_t *missed_last(const layer_state *ls, int warm, double budget,
                                  int64_t b, int64_t H, uint8_t *ladder) {
  if (!warm || !(budget > 0) || !ladder)
    return NULL;
  for (int64_t h = 0; h < H; h++)
    ladder[h] = !ls->first_met[b * H + h];
  return ladder;
}

stsa_status stsa_svg2_plan_batch(stsa_svg2 *s, const stsa_svg2_env *session_env,
                                 int64_t layer, int64_t B, int64_t b, uint64_t row_seed,
                                 const stsa_tensor *q, const stsa_tensor *k,
                                 const stsa_tensor *v, double max_rel_error,
                                 stsa_svg2_head *heads, double *cluster_ms, int *cold) {
  stsa_ctx *ctx = session_env->ctx;
  const stsa_svg2_env run_env = stsa_svg2_call_env(session_env);
  const stsa_svg2_env *env = &run_env;
  const int64_t H = s->H;
  stsa_svg2_pending_free(
      s); /* a planned entry the session never settled (its call failed) */
  layer_state *ls = stsa_svg2_layer_for(s, layer, B);
  STSA_RETURN_IF(!ls, &ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  const int warm = ls->valid;
  call_work w;
  /* the candidates' bounds, then the same at 99.5% (half) */
  double *rel = malloc(sizeof(double) * (size_t)(2 * STSA_SVG2_LADDER_MAX * H));
  double *half = rel ? rel + STSA_SVG2_LADDER_MAX * H : NULL;
  uint8_t *ladder = malloc((size_t)H); /* missed_last's */
  stsa_status st =
      stsa_svg2_work_alloc(&w, s, stsa_geometry_tokens(&env->cfg->geometry),
                           ctx->threads > 0 ? ctx->threads : 1) == 0 &&
              rel
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  for (int64_t h = 0; h < H; h++)
    heads[h] = (stsa_svg2_head){0};
  w.row_seed = row_seed;
  /* the kv spans' alignment the kernels ask for a call of these dtypes */
  w.pack_align = stsa_kv_pack_align(&ctx->run->kern, q->dtype, k->dtype, v->dtype);
  /* the candidates' rules (stsa_svg2_pick_head reads their top_p) are every head's */
  const stsa_select_args rule = stsa_svg2_base_rule(s, env->cfg);
  stsa_select_args cand[STSA_SVG2_LADDER_MAX];
  const int n = stsa_svg2_ladder(s->L, max_rel_error, &rule, cand);
  const int bounds = max_rel_error > 0 || env->estimate;
  if (st == STSA_OK && bounds) { /* what the strata are drawn by */
    w.q_tilt = malloc(sizeof(float) * (size_t)(H * s->QC * s->D));
    w.q_tilt_at = malloc(sizeof(double) * (size_t)(H * s->QC));
    w.lean = malloc(sizeof(double) * (size_t)(H * s->L));
    w.lean_ready = calloc((size_t)H, 1);
    if (!w.q_tilt || !w.q_tilt_at || !w.lean || !w.lean_ready ||
        keep_tilt_alloc(s, ls) != 0)
      st = stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  }
  if (st == STSA_OK) {
    stsa_geo geo;
    stsa_geo_init(&geo, &env->cfg->geometry);
    const double t0 = now_ms();
    st = stsa_svg2_cluster_heads(ctx, s, env->cfg, &w, &geo, q, k, b, ls, warm, layer,
                                 env->video_unchecked);
    *cluster_ms += now_ms() - t0;
  }
  if (st == STSA_OK) {
    for (int64_t h = 0; h < H; h++) {
      w.mask[h] = (stsa_mask *)env->mask_dense; /* borrowed: never freed here */
      w.job_err[h].text[0] = '\0';
    }
#pragma omp parallel for num_threads(w.plan_threads) schedule(dynamic, 1)
    for (int64_t h = 0; h < H; h++)
      w.job_status[h] = stsa_svg2_select_head(
          s, env, ls, b, h, max_rel_error, &w,
          w.prob + (size_t)omp_get_thread_num() * (size_t)w.QK, &w.job_err[h]);
    st = stsa_svg2_first_failure(ctx, &w, H);
  }
  keep_tilt(s, ls, b, bounds && st == STSA_OK ? &w : NULL);
  /* Under a budget, every head's candidates in one pass over the heads' K/V.
   * Without one nothing needs the estimate (SVG2 itself does not profile)
   * unless method auto asks for it: the pass is skipped, and the report
   * says not estimated (NaN). */
  for (int64_t i = 0; rel && i < 2 * STSA_SVG2_LADDER_MAX * H; i++)
    rel[i] = NAN;
  /* Deferred (env->settle): the bound is taken on the call's own output
   * rows after it ran, so no candidate is profiled here; every head plans
   * its first candidate (rel NaN picks it), or env->first_step's, and
   * stsa_svg2_settle climbs the ladder for a head past the budget. */
  int defer = max_rel_error > 0 && env->settle && !env->estimate && warm;
  for (int64_t h = 0; defer && !env->settle_all && h < H; h++)
    defer = ls->first_met[b * H + h];
  /* a deferred head plans env->first_step's candidate: the ones before it
   * read as missed */
  for (int64_t h = 0; rel && defer && env->first_step && h < H; h++)
    for (int i = 0; i < env->first_step[h] && i < n; i++)
      rel[i * H + h] = INFINITY;
  settle_state *pending = NULL;
  if (st == STSA_OK && (max_rel_error > 0 || env->estimate))
    st = stsa_svg2_draw_rows(ctx, s, env, b, n, q, &w);
  if (st == STSA_OK && defer)
    st = stsa_svg2_dense_rows_heads(ctx, s, env, &w, q, k, v, b, &pending);
  else if (st == STSA_OK && (max_rel_error > 0 || env->estimate))
    st = stsa_svg2_bound_heads(ctx, s, env, &w, n, max_rel_error,
                               missed_last(ls, warm, max_rel_error, b, H, ladder), q, k,
                               v, b, rel, half);
  for (int64_t h = 0; st == STSA_OK && max_rel_error > 0 && !defer && h < H; h++)
    ls->first_met[b * H + h] = rel[h] <= max_rel_error;
  if (st == STSA_OK) {
#pragma omp parallel for num_threads(w.plan_threads) schedule(dynamic, 1)
    for (int64_t h = 0; h < H; h++)
      w.job_status[h] = stsa_svg2_pick_head(s, env, ls, b, h, &w, cand, n, rel, half,
                                            max_rel_error, &heads[h], &w.job_err[h]);
    st = stsa_svg2_first_failure(ctx, &w, H);
  }
  if (st == STSA_OK && pending) { /* the work waits for stsa_svg2_settle */
    pending->w = w;
    pending->ls = ls;
    pending->n = n;
    memcpy(pending->cand, cand, sizeof cand);
    s->pending = pending;
  } else {
    stsa_svg2_work_free(&w);
    stsa_svg2_settle_state_free(pending, 0);
  }
  free(rel);
  free(ladder);
  if (st != STSA_OK) {
    for (int64_t h = 0; h < H; h++) {
      stsa_plan_free(heads[h].plan);
      heads[h].plan = NULL;
    }
    ls->valid = 0; /* centroids may be half updated: the next call starts cold */
    return st;
  }
  if (b == B - 1) {
    if (!warm)
      *cold = 1;
    ls->valid = 1;
  }
  return STSA_OK;
}
