/*
 * quality_eval.h — one head of the quality zoo (quality_zoo.h) judged under
 * each method and error budget: what `stsa bench quality` tabulates and
 * `stsa plot pareto --zoo` draws, measured once here (quality_eval.c).
 *
 * Every head runs under SVG, SVG2 and auto, without a budget and at budgets
 * 0.02, 0.05 and 0.1, one session per (method, budget) with the CLI's
 * settings; its TRUE relative L2 error ||o - o_dense|| / ||o_dense|| over all
 * rows is measured against dense attention of the same inputs, beside the
 * estimate the session reported and the density it realised.
 */
#ifndef STSA_TOOLS_QUALITY_EVAL_H
#define STSA_TOOLS_QUALITY_EVAL_H

#include <stdint.h>

#include "cli_options.h"
#include "quality_zoo.h"
#include "stsa.h"

/* The options that choose the zoo's heads, into the fields `wan` (int),
 * `family` and `size` (const char *) of T: the same for every command that
 * runs the zoo. */
#define QUALITY_WAN_OPTION(T)                                                            \
  {                                                                                      \
    .name = "--wan", CLI_FLAG(T, wan),                                                   \
    .help = "add the Wan-480p cases (minutes of dense reference)"                        \
  }
#define QUALITY_FAMILY_OPTION(T)                                                         \
  {                                                                                      \
    .name = "--family", .metavar = "NAME", CLI_STR(T, family),                           \
    .help = "only the cases of one family (e.g. objects)"                                \
  }
#define QUALITY_SIZE_OPTION(T)                                                           \
  {                                                                                      \
    .name = "--size", .metavar = "NAME", CLI_STR(T, size),                               \
    .help = "only the cases of one size: small, medium or wan480p"                       \
  }

/* Budget 0 runs each method at its defaults without a guard (the quality it
 * starts from). */
enum { QUALITY_N_BUDGETS = 4, QUALITY_N_METHODS = 3 };
extern const double QUALITY_BUDGETS[QUALITY_N_BUDGETS]; /* 0, 0.02, 0.05, 0.1 */
extern const int QUALITY_METHODS[QUALITY_N_METHODS];    /* svg, svg2, auto */

/* One head under one method and budget. */
typedef struct quality_head {
  int case_index; /* into the cases the run was given */
  int64_t head;
  double true_err, est_err, density;
  int choice, reason; /* stsa_auto_candidate the head ran, stsa_auto_reason */
  /* method auto's candidates: each one's density and bound (NaN otherwise) */
  float cand_density[STSA_AUTO_CANDIDATE_COUNT_], cand_bound[STSA_AUTO_CANDIDATE_COUNT_];
} quality_head;

/* Every head's results of one (method, budget), and its timings: warm calls,
 * each after a dense call of the same case (interleaved). */
typedef struct quality_set {
  quality_head *r;
  int64_t n;
  double dense_ms, method_ms;
} quality_set;

/* The set of method index m and budget index b in an array of
 * QUALITY_N_METHODS * QUALITY_N_BUDGETS sets. */
static inline int quality_set_index(int m, int b) { return m * QUALITY_N_BUDGETS + b; }

/* The zoo's cases (quality_zoo.h) of family `family` and size `size` (NULL:
 * any), the Wan-480p ones when `wan` is set or `size` names them, into a new
 * array (free it) of *n cases; dies naming `what` ("bench quality") when
 * none is left. */
zoo_case *quality_select_cases(const char *what, int wan, uint64_t seed,
                               const char *family, const char *size, int *n);

/* Runs every head of cases[0..n) under every method and budget on the
 * context's threads into sets[QUALITY_N_METHODS * QUALITY_N_BUDGETS] (new
 * buffers: quality_sets_free). */
void quality_run(stsa_ctx *ctx, const zoo_case *cases, int n, quality_set *sets);
void quality_sets_free(quality_set *sets);

/* The heads of cases[0..n). */
int64_t quality_heads(const zoo_case *cases, int n);

#endif
