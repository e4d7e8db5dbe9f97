/*
 * session_internal.h — what the parts of an SVG session share: session.c
 * (creation, the masks and plans, the flow of a call, SVG2's heads),
 * svg_heads.c (SVG's and method auto's heads: their profile and the
 * bound's rows), svg_levels.c (the error-budget levels) and recheck.c.
 * Internal to svg/.
 */
#ifndef STSA_SVG_SESSION_INTERNAL_H
#define STSA_SVG_SESSION_INTERNAL_H

#include <stdint.h>

#include "core/context.h"
#include "mask/mask.h"
#include "mask/plan.h"
#include "stsa.h"
#include "svg/svg2.h"

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
  /* the drawn rows' estimates (svg_heads.c), kept between calls: a
   * buffer allocated per call faulted in its pages every call (~2 Mcycles
   * of a Wan-480p head's ~27); grow-only */
  double *draw_est;
  size_t draw_est_count;
  int draw_levels; /* the levels draw_est holds for a kind of a head */
  stsa_svg2 *svg2; /* methods SVG2 and auto */
  int64_t svg2_q_clusters, svg2_kv_clusters;
  int svg2_q_tile, svg2_kv_tile; /* the cluster plans' tiles (auto: SVG's) */
};

/* What a head of method auto's choosing call has of the layer's memory
 * (head_run.recall; auto_kept.c, stsa_svg_auto_recall). */
enum {
  RECALL_NONE = 0, /* nothing remembered at this budget: the recheck's 1% */
  RECALL_OTHER,    /* the layer's last call ran another candidate or level,
                      or the same one's bound at 99.5% misses the budget:
                      the recheck takes 0.5%, the other 0.5% is what a
                      confirmed choice takes */
  RECALL_CONFIRMED /* what it ran, and its bound at 99.5% meets the budget:
                      no recheck */
};

/* What one head runs with, and why. */
typedef struct head_run {
  const stsa_plan *plan;
  stsa_plan *owned; /* SVG2's plan reference, freed after the call */
  double density;
  float est_error, top_p;
  float est_half; /* est_error's bound at 99.5% where taken before the run */
  uint8_t budget;
  uint8_t choice, reason; /* stsa_auto_candidate, stsa_auto_reason */
  uint8_t level;          /* SVG's kinds: the budget level; SVG2: the ladder's step */
  uint8_t recall;         /* RECALL_*: method auto's choosing call */
} head_run;

/* The spatial (i = 0) or temporal (i = 1) mask and plan of a density (above
 * 1: 1), *kept its kept fraction (session.c). */
stsa_status stsa_svg_build_kind(stsa_svg *svg, double density, int i, stsa_mask **mask,
                                stsa_plan **plan, double *kept);

/* The session's buffer for count doubles of drawn rows' estimates, grown
 * to hold them (NULL when out of memory); its contents are the last
 * call's (session.c). */
double *stsa_svg_draw_estimates(stsa_svg *svg, size_t count);

/* A head run dense, with its budget action (session.c). */
head_run stsa_svg_dense_run(const stsa_svg *svg, uint8_t budget);

/* SVG2's outcome of batch entry b per head (res[H]; the caller frees the
 * plans); estimate: bound each head before the run (session.c). */
stsa_status stsa_svg_svg2_batch(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                uint64_t row_seed, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v, double budget,
                                int video_unchecked, int estimate, stsa_svg2_head *res,
                                double *cluster_ms, int *cold);

/* Runs head h of batch entry b alone with plan into out (session.c). */
stsa_status stsa_svg_run_head(stsa_svg *svg, int64_t b, int64_t h, const stsa_plan *plan,
                              const stsa_tensor *q, const stsa_tensor *k,
                              const stsa_tensor *v, const stsa_tensor *out);

/* Method auto's climb for one head: the candidates after its choice whose
 * pre-run bound met the budget, in stsa_auto_order's order (the next
 * denser first); next: the first not yet taken. Steps own their plans
 * (SVG2's) until taken; stsa_svg_climb_free frees what is left. */
typedef struct auto_climb {
  head_run step[STSA_AUTO_CANDIDATE_COUNT_];
  int steps, next;
  uint8_t tried[2]; /* bit l: SVG's kind i (0 spatial, 1 temporal) profiled at level l */
} auto_climb;

void stsa_svg_climb_free(auto_climb *climb);

/* Method auto's climb of head h of batch entry b when it has no step left
 * after a failed check (ran: what the head ran): SVG's levels not yet
 * tried (climb->tried), denser than what ran and cheaper than dense, are
 * tried in order of density, each on rows of a stream of its own drawn
 * from that level's estimate, up to the first whose bound meets the
 * budget, which becomes the climb's next step; none: no step added. Before
 * the run auto profiles no level denser than a candidate within the budget
 * (svg_levels.c, level_cap), so a climb from that candidate finds its
 * levels here, only when it needs them. */
stsa_status stsa_svg_extend_climb(stsa_svg *svg, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                  double budget, uint64_t row_seed, int64_t h,
                                  const head_run *ran, auto_climb *climb);

/* Methods auto and svg2 under a budget, after the heads of batch entry b
 * ran into out (hr[H] what they ran): each sparse head's bound taken again
 * on rows drawn from a stream of their own (row_seed, the call's), apart
 * from every row its choice saw: its est_error the larger of the two
 * bounds. A head whose recheck exceeds the budget climbs: it runs again
 * with its next candidate (climb[h]; SVG2's: none), checked on rows of a
 * further stream, up to a few checks, then dense (reason
 * STSA_AUTO_RECHECK; kinds[h] follows the candidate) (recheck.c). A head
 * with exempt[h] set (NULL: none), or whose choice auto confirmed
 * (RECALL_CONFIRMED), takes none; one that recalls another choice
 * (RECALL_OTHER) is checked at half the miss chance. */
stsa_status stsa_svg_recheck_heads(stsa_svg *svg, uint64_t row_seed, int64_t b,
                                   const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, const stsa_tensor *out,
                                   double budget, const uint8_t *exempt, head_run *hr,
                                   auto_climb *climb, stsa_head_kind *kinds);

/* The environment a call lends SVG2 (session.c); estimate: bound each head
 * before the run even without a budget (method auto), else a budget's bound
 * waits for the output where SVG2 may defer it. */
stsa_svg2_env stsa_svg_svg2_env(const stsa_svg *svg, int video_unchecked, int estimate);

/* Method auto's kept choice (auto_kept.c; docs/architecture.md, "Method
 * auto's kept choice"). Whether batch entry b of a call of `layer` (of B)
 * under budget keeps what its heads ran at the layer's last call: a warm
 * layer at the same budget, within a few calls of its last choice, where no
 * head kept there missed it. */
int stsa_svg_auto_keeps(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                        double budget);

/* A kept call's heads of batch entry b: SVG2's clusters and deferred bound
 * (stsa_svg2_plan_batch under settle_all), each head's rows drawn from the
 * strata of what it runs, and run[h] the head's kept candidate and level
 * (reason STSA_AUTO_KEPT); climb[h] none (a miss climbs SVG2's ladder). */
stsa_status stsa_svg_plan_kept_heads(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                     uint64_t row_seed, const stsa_tensor *q,
                                     const stsa_tensor *k, const stsa_tensor *v,
                                     double budget, int video_unchecked,
                                     stsa_head_kind *kinds, head_run *run,
                                     auto_climb *climb, double *cluster_ms, int *cold);

/* A choosing call's head h under budget (r: its choice; remembered: the
 * layer's memory of batch entry b, stsa_svg_auto_remembered): RECALL_*. A
 * remembered choice was fixed before the call drew a row, so its bound on
 * the call's rows is an ordinary one; at 99.5% within the budget it needs
 * no recheck (docs/architecture.md, "Method auto's confirmed choice"). */
uint8_t stsa_svg_auto_recall(const uint8_t *remembered, int64_t h, const head_run *r,
                             double budget);
/* What batch entry b's heads ran at the layer's last call ([H]), if that
 * call was at this budget; else NULL. */
const uint8_t *stsa_svg_auto_remembered(stsa_svg *svg, int64_t layer, int64_t B,
                                        int64_t b, double budget);

/* After batch entry b's heads ran and were checked (hr[H]: what they ran):
 * what the layer's next call may keep; kept: this call kept its choices. */
void stsa_svg_auto_remember(stsa_svg *svg, int64_t layer, int64_t B, int64_t b, int kept,
                            double budget, const head_run *hr);

/* What SVG2's outcome for a head runs (session.c). */
head_run stsa_svg_svg2_run(const stsa_svg *svg, const stsa_svg2_head *r);

/* SVG's heads of batch entry b: the kind with the smaller profiled error,
 * then, under a budget, the first level whose error bound meets it
 * (svg_heads.c). rows: the call's routing rows. */
stsa_status stsa_svg_plan_svg_heads(stsa_svg *svg, const int64_t *rows, uint64_t row_seed,
                                    const stsa_tensor *q, const stsa_tensor *k,
                                    const stsa_tensor *v, int64_t b, double budget,
                                    float *mse_s, float *mse_t, stsa_head_kind *kinds,
                                    head_run *run);

/* Method auto's heads of batch entry b (svg_heads.c); cand[H][candidates][2]
 * gets each candidate's density and bound, climb[H] each head's climb. */
stsa_status stsa_svg_plan_auto_heads(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                     uint64_t row_seed, const stsa_tensor *q,
                                     const stsa_tensor *k, const stsa_tensor *v,
                                     double budget, int video_unchecked, float *mse_s,
                                     float *mse_t, stsa_head_kind *kinds, head_run *run,
                                     double *cand, auto_climb *climb, double *cluster_ms,
                                     int *cold);

#endif
