/*
 * auto_kept.c — method auto's kept choice: a warm call at the budget of the
 * layer's last call runs what each head ran there again without profiling
 * a candidate, and bounds it after the run on
 * rows of its own output (SVG2's deferred bound, stsa_svg2_settle), drawn
 * from the strata of what the head runs. Nothing in the call chose what a
 * head runs, so the bound is an ordinary one, at 99.5%; the other 0.5% is
 * the recheck's, which a head past the budget takes after it climbs
 * (docs/architecture.md, "Method auto's kept choice"). A call that
 * chooses afresh confirms a head's choice that is what the head ran at the
 * layer's last call by its bound at 99.5%, without a recheck
 * (stsa_svg_auto_recall; "Method auto's confirmed choice").
 */
#include <math.h>
#include <stdlib.h>

#include "core/context.h"
#include "kernel/dispatch.h"
#include "mask/geometry.h"
#include "svg/session_internal.h"
#include "svg/splitmix.h"
#include "svg/svg_levels.h"
#include "svg/svg_strata.h"

/* Calls a batch entry keeps its choices in a row before it chooses afresh:
 * a kept choice never sees a candidate become cheaper, so a layer profiles
 * its candidates at least every (1 + KEEP_CALLS)th call. */
enum { KEEP_CALLS = 3 };

/* A head's memory of what it ran (r) in a call that chose (kept 0) or kept
 * its choices: 0 none, else 1 + its candidate x SVG_LEVELS + level (SVG's
 * kinds: the budget level; SVG2: the ladder's step; dense: 1 where the
 * budget sent it dense). What a choosing call's head climbed to after a
 * failed check is remembered too: it met the budget on rows of its own. A
 * kept head that missed is not: the inputs moved away from the choice. */
static uint8_t memory_code(const head_run *r, int kept) {
  const int ran = r->reason == STSA_AUTO_CHEAPEST || r->reason == STSA_AUTO_NONE_MET ||
                  r->reason == STSA_AUTO_KEPT || r->reason == STSA_AUTO_CONFIRMED ||
                  (r->reason == STSA_AUTO_RECHECK && !kept);
  if (!ran) /* no budget, or a kept head's miss */
    return 0;
  const int level =
      r->choice == STSA_AUTO_DENSE ? r->budget == STSA_BUDGET_DENSE : r->level;
  return level < SVG_LEVELS ? (uint8_t)(1 + r->choice * SVG_LEVELS + level) : 0;
}

static int code_choice(uint8_t code) { return (code - 1) / SVG_LEVELS; }
static int code_level(uint8_t code) { return (code - 1) % SVG_LEVELS; }

/* Batch entry b's memory ([H] codes) when the layer is warm and its last
 * call was at this budget, and *age its kept calls in a row; else NULL. */
static const uint8_t *memory_at(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                double budget, uint8_t *age) {
  int warm = 0;
  double *last = NULL;
  const uint8_t *mem =
      budget > 0 ? stsa_svg2_auto_memory(svg->svg2, layer, B, &warm, &last) : NULL;
  if (!mem || !warm || last[b] != budget) /* another budget chooses afresh */
    return NULL;
  *age = mem[B * svg->cfg.heads + b];
  return mem + b * svg->cfg.heads;
}

int stsa_svg_auto_keeps(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                        double budget) {
  uint8_t age = 0;
  const uint8_t *mem = memory_at(svg, layer, B, b, budget, &age);
  if (!mem || age >= KEEP_CALLS)
    return 0;
  for (int64_t h = 0; h < svg->cfg.heads; h++)
    if (!mem[h])
      return 0;
  return 1;
}

const uint8_t *stsa_svg_auto_remembered(stsa_svg *svg, int64_t layer, int64_t B,
                                        int64_t b, double budget) {
  uint8_t age = 0;
  return memory_at(svg, layer, B, b, budget, &age);
}

uint8_t stsa_svg_auto_recall(const uint8_t *remembered, int64_t h, const head_run *r,
                             double budget) {
  if (!remembered || !remembered[h])
    return RECALL_NONE;
  const int same = r->choice != STSA_AUTO_DENSE && remembered[h] == memory_code(r, 0);
  return same && r->est_half <= budget ? RECALL_CONFIRMED : RECALL_OTHER;
}

void stsa_svg_auto_remember(stsa_svg *svg, int64_t layer, int64_t B, int64_t b, int kept,
                            double budget, const head_run *hr) {
  const int64_t H = svg->cfg.heads;
  int warm = 0;
  double *last = NULL;
  uint8_t *mem = stsa_svg2_auto_memory(svg->svg2, layer, B, &warm, &last);
  if (!mem) /* out of memory: the layer starts cold */
    return;
  for (int64_t h = 0; h < H; h++)
    mem[b * H + h] = budget > 0 ? memory_code(&hr[h], kept) : 0;
  mem[B * H + b] = kept ? (uint8_t)(mem[B * H + b] + 1) : 0;
  last[b] = budget;
}

/* What SVG2's draw hands a kept call's SVG heads (kept_rows). */
typedef struct kept_draw {
  const stsa_svg *svg;
  const stsa_tensor *q, *k;
  int64_t b;
  uint64_t seed;
  const uint8_t *code; /* [H] each head's memory */
  double *est;         /* [H][2][SVG_LEVELS][L] */
} kept_draw;

/* stsa_svg2_env.draw_head: a head kept on SVG's kind i at level l takes its
 * rows from that kind's strata of the level's own estimate (as the level's
 * bound before a run does, svg_levels.c); SVG2's and dense heads SVG2's. */
static int kept_rows(void *arg, int64_t h, int64_t R, stsa_strata *got) {
  const kept_draw *a = arg;
  const int c = code_choice(a->code[h]), l = code_level(a->code[h]);
  if (c != STSA_AUTO_SPATIAL && c != STSA_AUTO_TEMPORAL)
    return 0;
  const stsa_svg *svg = a->svg;
  stsa_geo geo;
  stsa_geo_init(&geo, &svg->cfg.geometry);
  const int64_t L = geo.L, n = (l + 1) * L;
  double *sp = a->est + h * 2 * SVG_LEVELS * L, *tm = sp + n;
  const stsa_svg_keep keep = stsa_svg_keep_levels(svg, l + 1);
  if (stsa_svg_dropped_mass(&keep, &svg->ctx->run->kern, a->q, a->k, a->b, h, sp, tm) !=
      0)
    return -1;
  double *logs = (c == STSA_AUTO_SPATIAL ? sp : tm) + l * L;
  if (l > 0) /* the wider levels' shares, as logs */
    stsa_svg_share_logs(logs, L);
  const uint64_t seed = stsa_hash_mix(a->seed, SVG_DRAW_SEED + (uint64_t)h);
  return stsa_svg_draw_rows(logs, logs, L, geo.v0, c, R, seed, got) == 0 ? 1 : -1;
}

/* What head h kept on code runs. */
static stsa_status kept_run(stsa_svg *svg, uint8_t code, stsa_svg2_head *res,
                            head_run *run, stsa_head_kind *kind) {
  const int c = code_choice(code), l = code_level(code);
  if (c == STSA_AUTO_SVG2) {
    *run = stsa_svg_svg2_run(svg, res);
    res->plan = NULL; /* run owns it */
    *kind = STSA_HEAD_SEMANTIC;
  } else if (c == STSA_AUTO_DENSE) {
    *run = stsa_svg_dense_run(svg, l ? STSA_BUDGET_DENSE : STSA_BUDGET_NONE);
    *kind = STSA_HEAD_SPATIAL;
  } else {
    const stsa_plan *plan;
    const stsa_mask *mask;
    double density;
    STSA_TRY(
        stsa_svg_level_plan(svg, l, c == STSA_AUTO_TEMPORAL, &plan, &mask, &density));
    *run = (head_run){.plan = plan,
                      .density = density,
                      .est_error = NAN,
                      .budget = l ? STSA_BUDGET_RAISED : STSA_BUDGET_NONE,
                      .choice = (uint8_t)c,
                      .level = (uint8_t)l};
    *kind = c == STSA_AUTO_TEMPORAL ? STSA_HEAD_TEMPORAL : STSA_HEAD_SPATIAL;
  }
  run->reason = STSA_AUTO_KEPT;
  return STSA_OK;
}

stsa_status stsa_svg_plan_kept_heads(stsa_svg *svg, int64_t layer, int64_t B, int64_t b,
                                     uint64_t row_seed, const stsa_tensor *q,
                                     const stsa_tensor *k, const stsa_tensor *v,
                                     double budget, int video_unchecked,
                                     stsa_head_kind *kinds, head_run *run,
                                     auto_climb *climb, double *cluster_ms, int *cold) {
  const int64_t H = svg->cfg.heads;
  const stsa_geometry *g = &svg->cfg.geometry;
  int warm = 0;
  double *last = NULL;
  const uint8_t *mem = stsa_svg2_auto_memory(svg->svg2, layer, B, &warm, &last);
  stsa_svg2_head *res = calloc((size_t)H, sizeof *res);
  double *est = stsa_svg_draw_estimates(
      svg, (size_t)(H * 2 * SVG_LEVELS * g->frames * g->height * g->width));
  svg->draw_levels = 0; /* no estimate of this call's a climb may read */
  stsa_status st = res && est && mem ? STSA_OK
                                     : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY,
                                                 "svg: out of memory");
  uint8_t *step = malloc((size_t)H); /* SVG2's kept steps */
  if (st == STSA_OK && !step)
    st = stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  for (int64_t h = 0; st == STSA_OK && h < H; h++)
    step[h] = code_choice(mem[b * H + h]) == STSA_AUTO_SVG2
                  ? (uint8_t)code_level(mem[b * H + h])
                  : 0;
  kept_draw draw = {svg, q, k, b, row_seed, mem ? mem + b * H : NULL, est};
  stsa_svg2_env env = stsa_svg_svg2_env(svg, video_unchecked, 0);
  env.settle_all = 1;
  env.draw_head = kept_rows;
  env.draw_arg = &draw;
  env.first_step = step;
  if (st == STSA_OK)
    st = stsa_svg2_plan_batch(svg->svg2, &env, layer, B, b, row_seed, q, k, v, budget,
                              res, cluster_ms, cold);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    st = kept_run(svg, mem[b * H + h], &res[h], &run[h], &kinds[h]);
    /* the climb after a miss is SVG2's ladder's, then dense: the call
     * estimated no SVG level to climb to */
    climb[h] = (auto_climb){.tried = {0xff, 0xff}};
  }
  for (int64_t h = 0; res && h < H; h++)
    stsa_plan_free(res[h].plan);
  free(step);
  free(res);
  return st;
}
