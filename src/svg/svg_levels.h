/*
 * svg_levels.h — SVG's error-budget levels under methods svg and auto
 * (svg_levels.c): a kind's wider windows (x2, x4 the density), each tried
 * on rows drawn from its own estimate when the level below missed the
 * budget, and method auto's climb to a level it had not tried. What
 * svg_heads.c (the heads' profile and choice) shares with it.
 */
#ifndef STSA_SVG_SVG_LEVELS_H
#define STSA_SVG_SVG_LEVELS_H

#include <stdint.h>

#include "svg/session_internal.h"
#include "svg/svg_strata.h"

/* The rows of a call's bound drawn per head where its error arises
 * (svg_strata.h), and their profile under both kinds. The same pass
 * estimates each kind's wider levels; a level's rows are drawn from them
 * only when the level before it misses the budget (stsa_svg_wider_levels). */
typedef struct svg_draw {
  int64_t R;       /* drawn rows a head */
  uint64_t seed;   /* the call's row seed */
  int levels;      /* levels estimated: SVG_LEVELS, or 1 (density 1, no budget) */
  int64_t L;       /* video tokens */
  int64_t *rows;   /* [H][R] */
  int64_t *group;  /* [H][R] */
  int64_t *pop;    /* [H][stsa_svg_bound_strata(R)] */
  int64_t *groups; /* [H] */
  double *est;     /* [H][2][levels][L], each head's log_sp, log_tm
                      (stsa_svg_dropped_mass: shares past level 0); the
                      session's (stsa_svg_draw_estimates) */
  double *sq;      /* [3][H][R]: energy, then spatial, temporal errors */
  double *scratch; /* the bound's: 5 a stratum */
} svg_draw;

/* Mixed with the call's row seed for the draws' streams. */
#define SVG_DRAW_SEED 0x5356470000ull

/* One SVG kind of one head under the budget: its levels' plans, densities
 * and bounds (rel; half: at 99.5%, what confirms a choice method auto
 * remembers, NaN where not taken), and the first level within the budget
 * (pick = levels: none). */
typedef struct kind_eval {
  int levels, pick;
  double rel[SVG_LEVELS], half[SVG_LEVELS], density[SVG_LEVELS];
  const stsa_plan *plan[SVG_LEVELS];
} kind_eval;

/* The spatial (i = 0) or temporal (i = 1) plan, mask and kept fraction
 * of budget level l, built on first use (level 0: the session's). */
stsa_status stsa_svg_level_plan(stsa_svg *svg, int l, int i, const stsa_plan **plan,
                                const stsa_mask **mask, double *density);

/* Rows a head's drawn bound takes: sample_rows (at most L, even where
 * more than one): as many as the routing rows, so that the bound's rows
 * cost about twice the routing profile's. */
int64_t stsa_svg_draw_count(const stsa_svg *svg);

/* The wider levels of every wanted kind (want[h * 2 + i]) whose level
 * below missed the budget, level by level, up to the first that meets it,
 * and for method auto (cap[H], NULL for method svg) only below the density
 * of a candidate already within it; each level's heads in one pass over
 * their K/V, its bound into e[h * 2 + i]. */
stsa_status stsa_svg_wider_levels(stsa_svg *svg, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                  double budget, const svg_draw *d, const uint8_t *want,
                                  const double *cap, kind_eval *e);

/* What SVG's masks keep at levels 0..levels-1: the session's windows, and
 * the windows of the wider levels' densities (stsa_svg_level_plan's). */
stsa_svg_keep stsa_svg_keep_levels(const stsa_svg *svg, int levels);

/* What kind i's evaluation runs: its picked level, else dense. */
head_run stsa_svg_kind_run(const stsa_svg *svg, const kind_eval *e, int i);

#endif
