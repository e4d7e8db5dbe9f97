/*
 * svg2_internal.h — what the parts of an svg2 session share: svg2.c (the
 * entry points and the flow of a call), svg2_layers.c (the layer store),
 * svg2_work.c (the call's buffers), svg2_cluster.c (k-means per head),
 * svg2_select.c (selection, ladder and plans) and svg2_bound.c (the error
 * bound, before the run and settled after it). Internal to svg/svg2*.
 */
#ifndef STSA_SVG_SVG2_INTERNAL_H
#define STSA_SVG_SVG2_INTERNAL_H

#include <stdint.h>

#include "core/context.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/workspace.h"
#include "mask/geometry.h"
#include "mask/mask.h"
#include "mask/plan.h"
#include "svg/select.h"
#include "svg/svg2.h"

/* Candidates per head: the profiling pass takes 4 masks (dense and 3). */
#define STSA_SVG2_LADDER_MAX 3

typedef struct layer_state {
  int64_t layer; /* the key; -1: an empty slot of the store */
  int valid;
  int64_t B;
  float *qc, *kc;    /* [B*H][QC][D], [B*H][KC][D] */
  int32_t *lq, *lk;  /* [B*H][L] the video tokens' query and key labels of the
                      * last call: a warm call's k-means starts from them */
  uint64_t *sig;     /* [B*H] signature of the cached plan's labels and selection */
  stsa_plan **plans; /* [B*H] the cached plans */
  /* [B*H] 1: the head's first candidate met the budget at the layer's last
   * call under one. A batch entry whose heads all did defers its bound to
   * its output (stsa_svg2_settle): a head that then misses runs twice. */
  uint8_t *first_met;
  /* [B*H + B] and [B] method auto's memory of the layer
   * (stsa_svg2_auto_memory) */
  uint8_t *auto_memory;
  double *auto_budget;
  /* [B*H][QC][D], [B*H][QC] and [B*H], allocated by the first call that
   * bounds: the tilt of each query cluster's dropped mass (call_work's
   * q_tilt) at the layer's last call, tilt_valid[i] 1 where that call
   * bounded head i. A warm call reads its queries' leans from them while
   * k-means gathers q (svg2_cluster.c), not in a pass over q of its own. */
  float *tilt;
  double *tilt_at;
  uint8_t *tilt_valid;
} layer_state;

struct stsa_svg2 {
  int64_t QC, KC, H, D, L;
  int64_t R; /* rows profiled per head under a budget (strata.h) */
  /* The layers called so far, by layer: open addressing with linear
   * probing, a power-of-two number of slots at most half full. Memory
   * follows the distinct layers called, not the largest one: any layer in
   * [0, INT64_MAX] is a key (an array indexed by the layer took 6.4 GB at
   * layer 1e8, and its size wrapped at 2^58). */
  layer_state *layers;
  int64_t layer_slots, layer_count;
  /* Kept between calls (each call needs the same sizes): the k-means'
   * scratch, one per k-means running at once, and the video rows gathered
   * as f32 for them. Allocated per call, they were mapped and zeroed by the
   * kernel again each time: a warm Wan-480p call 0.5% slower (its k-means
   * 2.5%), a few calls far more. */
  stsa_workspace *km_scratch;
  int km_slots;
  stsa_workspace xbuf;
  struct settle_state *pending; /* a planned batch entry whose bound waits for
                                 * its output (stsa_svg2_settle); NULL: none */
};

/* Scratch of one call: every head's clusters, and what each head's
 * selection leaves for the profiling pass and its plan. */
typedef struct call_work {
  int64_t H, N, L, QK;
  float *xbuf;                /* [threads][L][D] video rows gathered as f32, if needed
                               * (the session's workspace) */
  int64_t *q_sizes, *k_sizes; /* [H][QC], [H][KC] */
  stsa_errbuf *job_err;       /* [2 H] each k-means' message */
  stsa_status *job_status;    /* [2 H] */
  double *prob;               /* [planning threads][QC][KC] */
  int plan_threads;           /* threads over the heads' selections and plans */
  int32_t *q_label, *k_label; /* [H][N] labels by native token, -1 for text */
  uint8_t *keep;              /* [H][STSA_SVG2_LADDER_MAX][QC][KC] per candidate */
  uint64_t row_seed;          /* of the call's profiled rows */
  int64_t R;                  /* profiled rows per head this call (<= the session's) */
  int64_t *rows, *row_group;  /* [H][R] each head's rows and their strata */
  /* [H][pop_stride] the strata's rows, [H] how many strata */
  int64_t *row_pop, *groups;
  /* row_pop's entries a head: the session's R, and at least the 2 halves of
   * one geometric stratum (stsa_svg2_draw_rows: 2 G strata, G >= 1, where a
   * one-token head has R = 1) */
  int64_t pop_stride;
  float *q_tilt; /* [H][QC][D] and [H][QC], when the call bounds its
                  * error: the logit of the mass a query's selection
                  * drops is q_tilt_at + q . q_tilt (svg2_select.c) */
  double *q_tilt_at;
  /* [H][L] and [H], when the call bounds its heads: each video query's lean
   * (svg2_bound.c, dropped_logit), read by k-means' gather of q from the
   * layer's last tilt (lean_ready[h] = 1), else written by the draw */
  double *lean;
  uint8_t *lean_ready;
  double *q_drop;   /* [H][QC] the mass each query cluster's selection drops */
  double *planned;  /* [H] the first candidate's density (video pairs) */
  stsa_mask **mask; /* [(1 + STSA_SVG2_LADDER_MAX) * H]: dense, then the candidates */
  int pack_align;   /* the plans' (stsa_cluster_layout) */
} call_work;

/* A batch entry planned with its bound deferred (env->settle): what
 * stsa_svg2_settle needs to bound each head on the call's own output rows
 * and, for a head past the budget, to climb its ladder. */
typedef struct settle_state {
  call_work w;
  layer_state *ls;
  int64_t b;
  int n; /* candidates of the ladder */
  stsa_select_args cand[STSA_SVG2_LADDER_MAX];
  float *dense_rows; /* [R][H][D] the sampled rows' dense outputs */
  double *energy;    /* [H][R] their squared norms */
} settle_state;

/* Head h's keep map of candidate i ([QC][KC]). */
static inline uint8_t *stsa_svg2_keep_of(const call_work *w, int64_t h, int i) {
  return w->keep + (h * STSA_SVG2_LADDER_MAX + i) * w->QK;
}

/* The layer store (svg2_layers.c). */

/* The state of `layer` (>= 0) for B batch entries; a new layer or batch
 * size starts cold. NULL: out of memory. */
layer_state *stsa_svg2_layer_for(stsa_svg2 *s, int64_t layer, int64_t B);
/* Frees every layer's state and the store. */
void stsa_svg2_layers_free(stsa_svg2 *s);

/* The call's buffers (svg2_work.c). */

/* 0, or -1 when out of memory (what was allocated is freed by stsa_svg2_work_free). */
int stsa_svg2_work_alloc(call_work *w, const stsa_svg2 *s, int64_t N, int threads);
void stsa_svg2_work_free(call_work *w);
void stsa_svg2_settle_state_free(settle_state *p, int owns_work);
/* Frees the session's pending settle_state, if any. */
void stsa_svg2_pending_free(stsa_svg2 *s);
stsa_status stsa_svg2_first_failure(stsa_ctx *ctx, const call_work *w, int64_t count);

/* The env of the call (svg2.c). */
stsa_svg2_env stsa_svg2_call_env(const stsa_svg2_env *session_env);

/* Step 1, k-means per head (svg2_cluster.c). */
stsa_status stsa_svg2_cluster_heads(stsa_ctx *ctx, stsa_svg2 *s,
                                    const stsa_svg_config *cfg, call_work *w,
                                    const stsa_geo *geo, const stsa_tensor *q,
                                    const stsa_tensor *k, int64_t b, layer_state *ls,
                                    int warm, int64_t layer, int video_unchecked);

/* Steps 2 and 4, selection and plans (svg2_select.c). */
int stsa_svg2_ladder(int64_t L, double budget, const stsa_select_args *base,
                     stsa_select_args *cand);
stsa_select_args stsa_svg2_base_rule(const stsa_svg2 *s, const stsa_svg_config *cfg);
stsa_status stsa_svg2_select_head(const stsa_svg2 *s, const stsa_svg2_env *env,
                                  const layer_state *ls, int64_t b, int64_t h,
                                  double budget, call_work *w, double *prob,
                                  stsa_errbuf *err);
/* half (or NULL): the candidates' bounds at 99.5% (res->est_half) */
stsa_status stsa_svg2_pick_head(const stsa_svg2 *s, const stsa_svg2_env *env,
                                layer_state *ls, int64_t b, int64_t h, const call_work *w,
                                const stsa_select_args *cand, int n, const double *rel,
                                const double *half, double budget, stsa_svg2_head *res,
                                stsa_errbuf *err);

/* Step 3, the error bound (svg2_bound.c; stsa_svg2_settle is svg2.h's). */
/* The strata of a head's rows (labels[L], size[] of at most 2 G + 1, their
 * count returned; G >= 1 geometric strata as stsa_strata_geometric's) from
 * the log of each query's estimated dropped mass lean[L] and how many of
 * its n ladder candidates drop its own key's cluster own[L]: the queries
 * that candidates from some c on still drop it for, for the least c where
 * they are at most R / 4, each a stratum of its own (read whole), those
 * that lose it to candidates before c split off as halves of the geometric
 * strata (svg2_bound.c). split[L] scratch. */
int64_t stsa_svg2_own_key_strata(const double *lean, const uint8_t *own, int n, int64_t L,
                                 int64_t R, int64_t G, int32_t *label, int64_t *size,
                                 uint8_t *split);

/* Head h's mask of candidate i (w->mask[(1 + i) H + h], from its keep map
 * OR the text rules), built where it is first needed: a call whose heads
 * reuse their plans and climb no ladder builds none (the ladder's three
 * took about 0.3 ms a Wan-480p head each call). Failures go to err. */
stsa_status stsa_svg2_candidate_mask(const stsa_svg2 *s, const stsa_geometry *g,
                                     const call_work *w, int64_t h, int i,
                                     stsa_errbuf *err);

/* n: the ladder's candidates (their keep maps in w) */
stsa_status stsa_svg2_draw_rows(stsa_ctx *ctx, const stsa_svg2 *s,
                                const stsa_svg2_env *env, int64_t b, int n,
                                const stsa_tensor *q, call_work *w);
/* ladder_now (or NULL): the heads whose whole ladder the first pass profiles
 * (those whose first candidate missed the budget at the layer's last call).
 * half[i * H + h]: rel's bound at 99.5%, for each rel taken. */
stsa_status stsa_svg2_bound_heads(stsa_ctx *ctx, const stsa_svg2 *s,
                                  const stsa_svg2_env *env, const call_work *w, int n,
                                  double budget, const uint8_t *ladder_now,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, int64_t b, double *rel,
                                  double *half);
stsa_status stsa_svg2_dense_rows_heads(stsa_ctx *ctx, const stsa_svg2 *s,
                                       const stsa_svg2_env *env, const call_work *w,
                                       const stsa_tensor *q, const stsa_tensor *k,
                                       const stsa_tensor *v, int64_t b,
                                       settle_state **out);

#endif
