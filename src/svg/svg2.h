/*
 * svg2.h — Sparse VideoGen 2 inside the session: per (batch, head) k-means
 * of the video queries and keys (warm-started per layer), top-p selection of
 * cluster rectangles, the error budget on the profiled rows, and one cluster
 * plan per head (mask/cluster_plan.h). The session runs the plans.
 */
#ifndef STSA_SVG_SVG2_H
#define STSA_SVG_SVG2_H

#include <stdint.h>

#include "core/error.h"
#include "stsa.h"
#include "svg/strata.h"

typedef struct stsa_svg2 stsa_svg2;

/* What the session lends a call. */
typedef struct stsa_svg2_env {
  stsa_ctx *ctx;
  const stsa_svg_config *cfg;
  const stsa_mask *mask_dense; /* the policy's dense mask (text rules) */
  int q_tile, kv_tile;         /* the session's tiles (stsa_svg2_tiles rounds them) */
  /* 1: the video rows of q and k are not yet checked for NaN/Inf (v and the
   * text rows are): the k-means checks them (session.c: scan_inputs) */
  int video_unchecked;
  /* 1: bound every head's configured candidate even without a budget
   * (method auto compares the bounds); 0: only under a budget */
  int estimate;
  /* 1 (method svg2 under a budget, estimate 0): the call's bound is taken
   * after the heads ran, on their own output rows (stsa_svg2_settle), so
   * planning profiles the dense rows only and no candidate */
  int settle;
  /* 1 (with settle; method auto's kept call): the bound waits for the
   * output whatever the heads' first candidates did at the layer's last
   * call, the caller having fixed each head's choice before the call */
  int settle_all;
  /* NULL, or (a deferred call) head h's R rows drawn by the caller from the
   * strata of what the head runs, in place of SVG2's draw: 1 drawn into
   * *got, 0 SVG2's draw, -1 out of memory. Called for several heads at
   * once, from the planning threads. */
  int (*draw_head)(void *arg, int64_t h, int64_t R, stsa_strata *got);
  void *draw_arg;
  /* NULL, or (a deferred call) the ladder's candidate each head plans
   * ([H]; method auto's kept step), else its first */
  const uint8_t *first_step;
} stsa_svg2_env;

/* One head's outcome of a call. */
typedef struct stsa_svg2_head {
  stsa_plan *plan; /* a reference the caller frees; NULL: run dense */
  float est_error; /* upper bound of the relative L2 error of what runs; when
                      nothing sparse met the budget, the last candidate's */
  float est_half;  /* est_error's bound at 99.5% (STSA_BOUND_Z_HALF) where it
                      was taken before the run, else NaN: what confirms a
                      choice method auto remembers (auto_kept.c) */
  float density;   /* kept fraction of what runs (1 or the dense plan's if dense) */
  float top_p;     /* top-p finally used (0 in density mode or dense) */
  uint8_t budget;  /* stsa_budget_action */
  uint8_t step;    /* the ladder's candidate that runs (0: the configured) */
} stsa_svg2_head;

/* The most (query cluster, key cluster) pairs a session takes. A call's
 * scratch holds per pair a probability per planning thread (8 bytes) and,
 * per head, a keep flag and a mask byte per candidate of the budget ladder
 * (1 to 3): 12,288 x 12,288 clusters took 2.2 GB and 22 s a call; this cap
 * (2048 x 2048, 10x the published 400 x 1000) bounds it to 64 MiB at two
 * planning threads plus 8-24 MiB a head. Automatic counts shrink to fit
 * it; explicit ones past it are refused at create. */
#define STSA_SVG2_MAX_CLUSTER_PAIRS ((int64_t)1 << 22)

/* Cluster counts a config resolves to (automatic ones scaled with the
 * video tokens, and shrunk to the cap on the pairs). */
void stsa_svg2_clusters(const stsa_svg_config *cfg, int64_t *q_clusters,
                        int64_t *kv_clusters);

/* Checks the SVG2 fields of a config, the cap on the cluster pairs
 * included (message into err). */
stsa_status stsa_svg2_check(const stsa_svg_config *cfg, stsa_errbuf *err);

stsa_status stsa_svg2_create(const stsa_svg_config *cfg, stsa_svg2 **out);
void stsa_svg2_free(stsa_svg2 *s);

/* The tiles a call on ctx runs for the session's q_tile x kv_tile: each
 * rounded up to the backend's register tile (mr x nr), as block-sparse
 * plans round theirs. Asked at the call: the context's backend may change
 * after the session is created. */
void stsa_svg2_tiles(const stsa_ctx *ctx, int q_tile, int kv_tile, int *q_run,
                     int *kv_run);

/* Plans every head of batch entry b (of B) of call (layer, step): clusters
 * (cold on a layer's first call, warm after), selects, bounds the error on
 * rows drawn per query cluster (from row_seed) and applies the budget
 * (max_rel_error > 0). heads[H] out;
 * *cluster_ms adds the k-means time, *cold is set to 1 if this call seeded
 * the layer. On failure no plan is left in heads. */
stsa_status stsa_svg2_plan_batch(stsa_svg2 *s, const stsa_svg2_env *env, int64_t layer,
                                 int64_t B, int64_t b, uint64_t row_seed,
                                 const stsa_tensor *q, const stsa_tensor *k,
                                 const stsa_tensor *v, double max_rel_error,
                                 stsa_svg2_head *heads, double *cluster_ms, int *cold);

/* Whether batch entry b's bound waits for its output: plan_batch defers it
 * in a warm call under env->settle and a budget when the entry's heads all
 * met the budget with their first candidate at the layer's last call, or
 * under env->settle_all (a head that misses then runs twice: planned on its
 * first candidate, then on its ladder's). */
int stsa_svg2_deferred(const stsa_svg2 *s, int64_t b);

/* Method auto's memory of `layer` for B batch entries, kept with the
 * layer's clusters: B * H bytes, a head's each, then B, a batch entry's, and
 * *budget B doubles (auto_kept.c's; zero on a new layer or batch size), or
 * NULL when out of memory. *warm: the layer's clusters are warm, so a call
 * under a budget may defer its bound (env->settle_all). */
uint8_t *stsa_svg2_auto_memory(stsa_svg2 *s, int64_t layer, int64_t B, int *warm,
                               double **budget);

/* Head h of batch entry b (of B) failed the recheck at `layer`'s call: its
 * first candidate counts as missed, so the layer's next call bounds it
 * before the run, with its whole ladder, and rechecks it. */
void stsa_svg2_first_missed(stsa_svg2 *s, int64_t layer, int64_t B, int64_t b, int64_t h);

/* When stsa_svg2_deferred, after the heads' run of batch entry b into out: bounds each
 * head on its drawn rows of out against the dense rows planning kept (the candidate's
 * rows are the call's own: nothing is profiled for them). heads[h].est_error gets each
 * head's bound; a head past max_rel_error climbs its ladder (its other candidates
 * profiled on its rows, as plan_batch does without settle): redo[h] = 1 and
 * heads[h] is its new outcome (a plan the caller frees, or NULL: dense),
 * which the caller runs again. first[h] (NULL: every head) 1 where head h
 * ran its first candidate: only those heads' misses count as the first
 * candidate's (method auto's kept call runs SVG's candidates too). Without
 * a pending entry for b:
 * STSA_ERR_BAD_PARAM. The pending entry is gone after the call. */
stsa_status stsa_svg2_settle(stsa_svg2 *s, const stsa_svg2_env *env, int64_t b,
                             const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const stsa_tensor *out,
                             double max_rel_error, const uint8_t *first,
                             stsa_svg2_head *heads, uint8_t *redo);

#endif
