/*
 * svg_strata.h — the rows of SVG's error bound, drawn where its error
 * arises (docs/architecture.md, "The error bound"). A spatial head drops the
 * frames outside its window, a temporal head the positions outside its band;
 * a row's error goes as the attention mass it loses there. Each video
 * query's lost mass is estimated to first order from pooled keys (their
 * centroids by frame and part of the frame, and by band of positions over
 * the frames), and the rows are drawn from geometric strata of that estimate
 * (stsa_strata_geometric), two a stratum at least, so the few queries that
 * lose the most sit in small strata drawn at a far higher rate than the
 * rest. The estimate only chooses the strata: a poor one widens the bound,
 * never invalidates it.
 */
#ifndef STSA_SVG_SVG_STRATA_H
#define STSA_SVG_SVG_STRATA_H

#include <stdint.h>

#include "kernel/kernels.h"
#include "stsa.h"
#include "svg/strata.h"

/* Levels an estimate covers: the configured windows and the error
 * budget's wider ones (session_internal.h's SVG_LEVELS). */
enum { STSA_SVG_KEEP_LEVELS = 3 };

/* What SVG's masks keep at each of `levels` levels (level 0 the configured
 * widths, level l the budget's l-th wider ones). */
typedef struct stsa_svg_keep {
  const stsa_geometry *g;
  int64_t sink_frames;                        /* frames every query sees */
  int levels;                                 /* 1..STSA_SVG_KEEP_LEVELS */
  int64_t frame_window[STSA_SVG_KEEP_LEVELS]; /* spatial: frames within +-window */
  int64_t band[STSA_SVG_KEEP_LEVELS]; /* temporal: position-major indices within +-band */
} stsa_svg_keep;

/* Which estimate a head's strata follow. */
enum {
  STSA_SVG_STRATA_SPATIAL = 0,
  STSA_SVG_STRATA_TEMPORAL = 1,
  STSA_SVG_STRATA_BOTH = 2 /* the larger of the two, split by which */
};

/* Each video query's estimated share of attention mass lost to the
 * spatial mask (log_sp[l * L + i]) and to the temporal mask (log_tm[l * L
 * + i]) of each level l < keep->levels, for head h of batch entry b: its
 * log at level 0 (-inf where a mask drops nothing), the share itself at the
 * wider levels, whose logs (stsa_svg_share_logs) are taken only where a
 * level is drawn from (a head whose level 0 misses the budget). One pass
 * over the pooled keys serves every level: a level keeps a superset of the
 * cells of the one before, so its loss is read off the same cell masses. q and k are the
 * full [B, N, H, D] tensors. The keys are pooled by svg_pool.h; the queries' scores
 * against the pooled halves run on kern's qk micro-kernel (a GEMM of L x (D + 1) x 2
 * cells), or for bf16 queries on its bf16 unit where it has one (svg_unit_scores.h).
 * 0, or -1 when out of memory. */
int stsa_svg_dropped_mass(const stsa_svg_keep *keep, const stsa_kernels *kern,
                          const stsa_tensor *q, const stsa_tensor *k, int64_t b,
                          int64_t h, double *log_sp, double *log_tm);

/* x[n] = ln x[n] for shares x in [0, 1] (stsa_svg_dropped_mass's), within
 * 1e-7, -inf for 0; in place. */
void stsa_svg_share_logs(double *x, int64_t n);

/* Strata a head's R drawn rows fall in at most (out->pop's entries). */
static inline int64_t stsa_svg_bound_strata(int64_t R) { return R > 2 ? R : 2; }

/* Draws R rows (R even, at most L) of a head's L video tokens (the first
 * at native index v0) from geometric strata of its estimates log_sp[L] and
 * log_tm[L] (one level's logs, from stsa_svg_dropped_mass) as `which`
 * (STSA_SVG_STRATA_*) follows them (SPATIAL reads log_sp only, TEMPORAL
 * log_tm only): out->rows[R], out->group[R],
 * out->pop[stsa_svg_bound_strata(R)], out->groups. Deterministic in seed.
 * 0, or -1 when out of memory. */
int stsa_svg_draw_rows(const double *log_sp, const double *log_tm, int64_t L, int64_t v0,
                       int which, int64_t R, uint64_t seed, stsa_strata *out);

/* Head h's level-0 estimates (stsa_svg_dropped_mass) and R rows drawn from
 * them (stsa_svg_draw_rows). 0, or -1 when out of memory. */
int stsa_svg_bound_draw(const stsa_svg_keep *keep, const stsa_kernels *kern,
                        const stsa_tensor *q, const stsa_tensor *k, int64_t b, int64_t h,
                        int which, int64_t R, uint64_t seed, stsa_strata *out);

#endif
