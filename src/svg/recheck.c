/*
 * recheck.c — methods auto and svg2 under a budget, after their heads ran:
 * each sparse head's error bound taken again on rows drawn after the
 * choice, and a head that fails it climbed to its next candidate (auto's;
 * SVG2's ladder was climbed before: dense), checked on rows of its own
 * (session_internal.h, stsa_svg_recheck_heads; the argument is in
 * docs/architecture.md, "The recheck").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "kernel/dispatch.h"
#include "mask/mask.h"
#include "svg/bound.h"
#include "svg/profile.h"
#include "svg/session_internal.h"
#include "svg/strata.h"

/* Rows of the recheck, as a multiple of sample_rows (at most the video
 * rows): they are drawn in equal runs of the video, blind to where a head's
 * error sits, so its few erring rows are found by numbers. On the quality
 * zoo (seed 7, budget 0.05) 1 x 64 rows raised auto's mean density from
 * 0.454 to 0.517 (SVG2's: 0.484; auto may spend 0.02 over it), 2 x 64 to
 * 0.493 and let one head through at 1.22 x the budget, 4 x 64 to 0.486
 * with none past it (docs/benchmarks.md, "Method auto's recheck"). */
enum { RECHECK_ROWS_X = 4 };

/* Checks one head may take: its choice's, then up to two climbs'. With
 * each check on rows of its own, P(a head ends on a candidate past the
 * budget) <= the sum of the checks' miss chances: the 1% is split, 0.5% to
 * the first check and 0.25% to each climb's (docs/architecture.md,
 * "Method auto's recheck"). A head whose layer remembers another choice
 * (RECALL_OTHER) splits half of it, 0.5%: the other half is what a
 * confirmed choice would have taken (docs/architecture.md, "Method auto's
 * confirmed choice"). */
enum { RECHECK_CHECKS = 3 };
static const double check_z[2][RECHECK_CHECKS] = {
    {STSA_BOUND_Z_HALF, 2.8070, 2.8070}, /* 99.5%, 99.75%, 99.75% */
    {2.8070, 3.0233, 3.0233},            /* 99.75%, 99.875%, 99.875% */
};

/* Mixed with the call's row seed (plus the check's index) for a check's
 * rows: a stream of its own, apart from every row the choice or an earlier
 * check saw. */
#define RECHECK_SEED 0x52454348454bull

/* Rows a check takes: a multiple of sample_rows, at most the video rows
 * and one q tile of the profile (4096 rounded down to the kernels' mr). */
static int64_t recheck_count(const stsa_geometry *g, int64_t sample_rows, int mr) {
  const int64_t L = g->frames * g->height * g->width, cap = 4096 / mr * mr;
  const int64_t want = RECHECK_ROWS_X * sample_rows, most = L < cap ? L : cap;
  return want < most ? want : most;
}

/* Check `check`'s rows: one in each of R equal runs of the video, from a
 * stream of the call's row_seed of the check's own, the same for every
 * head (rows[H][R]: the pass takes each head's rows). */
static void draw_rows(const stsa_geometry *g, int64_t R, uint64_t row_seed, int check,
                      int64_t H, int64_t *rows) {
  stsa_svg_sample_rows(g, R, stsa_hash_mix(row_seed, RECHECK_SEED + (uint64_t)check), 0,
                       0, 0, rows);
  for (int64_t h = 1; h < H; h++)
    memcpy(rows + h * R, rows, sizeof(int64_t) * (size_t)R);
}

void stsa_svg_climb_free(auto_climb *climb) {
  for (int j = climb->next; j < climb->steps; j++) /* the taken ones moved on */
    stsa_plan_free(climb->step[j].owned);
  climb->steps = climb->next = 0;
}

/* Whether head h's choice takes the recheck: a sparse one not exempt nor
 * confirmed. */
static int rechecked(const head_run *hr, const uint8_t *exempt, int64_t h) {
  return hr[h].choice != STSA_AUTO_DENSE && hr[h].recall != RECALL_CONFIRMED &&
         !(exempt && exempt[h]);
}

/* A head's failed check, and what it may climb to. */
typedef struct climb_args {
  const stsa_tensor *q, *k, *v;
  int64_t b;
  double budget;
  uint64_t row_seed;
} climb_args;

/* Head h failed check `check`: its next candidate if a check is left for
 * it and it has one (method auto's climb; when that is spent, SVG's levels
 * it did not profile before the run, stsa_svg_extend_climb), the climb's
 * step now owned by hr, else dense. *again 1 if it is to be checked again. */
static stsa_status climb_or_dense(stsa_svg *svg, const climb_args *a, int64_t h,
                                  int check, head_run *hr, auto_climb *climb,
                                  stsa_head_kind *kind, uint8_t *again) {
  stsa_plan_free(hr->owned);
  hr->owned = NULL;
  const int left = check + 1 < RECHECK_CHECKS;
  if (left && climb->next == climb->steps && svg->cfg.method == STSA_SVG_METHOD_AUTO)
    STSA_TRY(stsa_svg_extend_climb(svg, a->q, a->k, a->v, a->b, a->budget, a->row_seed, h,
                                   hr, climb));
  *again = left && climb->next < climb->steps;
  if (*again) {
    *hr = climb->step[climb->next];
    climb->step[climb->next++].owned = NULL;
    *kind = hr->choice == STSA_AUTO_SVG2       ? STSA_HEAD_SEMANTIC
            : hr->choice == STSA_AUTO_TEMPORAL ? STSA_HEAD_TEMPORAL
                                               : STSA_HEAD_SPATIAL;
    return STSA_OK;
  }
  *hr = stsa_svg_dense_run(svg, STSA_BUDGET_DENSE);
  hr->reason = STSA_AUTO_RECHECK;
  return STSA_OK;
}

stsa_status stsa_svg_recheck_heads(stsa_svg *svg, uint64_t row_seed, int64_t b,
                                   const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, const stsa_tensor *out,
                                   double budget, const uint8_t *exempt, head_run *hr,
                                   auto_climb *climb, stsa_head_kind *kinds) {
  const stsa_geometry *g = &svg->cfg.geometry;
  const int64_t H = svg->cfg.heads, D = svg->cfg.head_dim,
                R = recheck_count(g, svg->cfg.sample_rows, svg->ctx->run->kern.mr);
  int some = 0;
  for (int64_t h = 0; h < H; h++)
    some |= rechecked(hr, exempt, h);
  if (!some)
    return STSA_OK;
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)(H * R));
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)H);
  float *dense = malloc(sizeof(float) * (size_t)(R * H * D + D));
  double *energy = malloc(sizeof(double) * (size_t)(H * R + R + 5 * R));
  int64_t *group = malloc(sizeof(int64_t) * (size_t)(2 * R)), groups = 0;
  uint8_t *pending = malloc((size_t)(2 * H)), *halved = pending ? pending + H : NULL;
  stsa_status st =
      rows && masks && dense && energy && group && pending
          ? STSA_OK
          : stsa_fail(&svg->ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg: out of memory");
  if (st == STSA_OK) {
    stsa_svg_strata(g, R, group, group + R, &groups);
    for (int64_t h = 0; h < H; h++) {
      masks[h] = svg->mask_dense;
      pending[h] = (uint8_t)rechecked(hr, exempt, h);
      halved[h] = hr[h].recall == RECALL_OTHER; /* a climb's step recalls nothing */
    }
  }
  double *err = energy ? energy + H * R : NULL, *scratch = err ? err + R : NULL;
  float *row = dense ? dense + R * H * D : NULL;
  const stsa_err_sample smp = {R, group, group ? group + R : NULL, groups};
  const climb_args args = {q, k, v, b, budget, row_seed};
  for (int check = 0; st == STSA_OK && check < RECHECK_CHECKS; check++) {
    int any = 0;
    for (int64_t h = 0; h < H; h++)
      any |= pending[h];
    if (!any)
      break;
    /* one row in each of R equal runs of the video, every head the same
     * rows */
    draw_rows(g, R, row_seed, check, H, rows);
    st = stsa_svg_profile_dense_rows(svg->ctx, g, masks, rows, R, pending, q, k, v, b,
                                     dense, energy);
    for (int64_t h = 0; st == STSA_OK && h < H; h++) {
      if (!pending[h])
        continue;
      stsa_svg_output_errors(out, b, h, H, D, rows, R, dense, row, err);
      const double rel = stsa_err_bound_z(&smp, err, energy + h * R, scratch, NULL,
                                          check_z[halved[h]][check]);
      hr[h].est_error = (float)fmax(hr[h].est_error, rel);
      if (rel <= budget) {
        pending[h] = 0;
        continue;
      }
      st =
          climb_or_dense(svg, &args, h, check, &hr[h], &climb[h], &kinds[h], &pending[h]);
      if (st == STSA_OK)
        st = stsa_svg_run_head(svg, b, h, hr[h].plan, q, k, v, out);
    }
  }
  free(rows);
  free(masks);
  free(dense);
  free(energy);
  free(group);
  free(pending);
  return st;
}
