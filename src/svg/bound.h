/*
 * bound.h — an upper confidence bound of a head's relative L2 error from
 * sampled rows (docs/architecture.md, "The error bound", gives the
 * argument).
 *
 * The head's squared relative error is a ratio of two totals over its video
 * rows: rho^2 = sum_i e_i / sum_i E_i, e_i = ||o_i - o*_i||^2 the row's
 * squared error and E_i = ||o*_i||^2 its dense output's energy. The rows
 * are sampled stratified: each stratum (a query cluster, a band of a frame)
 * holds pop rows of which n are drawn without replacement. Each total is
 * estimated per stratum (pop x the sample mean) and bounded one-sided at
 * z standard errors, the numerator from above and the denominator from
 * below; a stratum's spread of errors is taken at least its mean
 * (coefficient of variation 1), so that a stratum whose few drawn rows
 * happen to agree is not believed to be uniform.
 */
#ifndef STSA_SVG_BOUND_H
#define STSA_SVG_BOUND_H

#include <stdint.h>

/* Standard errors of the one-sided bound: the normal 99% quantile. */
#define STSA_BOUND_Z 2.326

/* The normal 99.5% quantile: a bound that spends half of the 1% (each of
 * the two kinds SVG's drawn rows choose between, svg_heads.c; the first
 * of the recheck's checks, recheck.c). */
#define STSA_BOUND_Z_HALF 2.5758

/* The sampled rows of one head and the strata they were drawn from. */
typedef struct stsa_err_sample {
  int64_t rows;         /* R */
  const int64_t *group; /* [R] stratum of each row, 0..groups-1 */
  const int64_t *pop;   /* [groups] rows of each stratum in the head */
  int64_t groups;
} stsa_err_sample;

/* The bound of sqrt(sum e / sum E) over the strata's rows from the
 * samples' err[R] and energy[R]; *point (if not NULL) the plain estimate.
 * scratch holds 5 x groups doubles. A stratum without a sampled row counts
 * as if its rows had the largest mean error and the smallest mean energy of
 * the sampled strata. 0 when nothing errs; +inf when no energy is seen. */
double stsa_err_bound(const stsa_err_sample *s, const double *err, const double *energy,
                      double *scratch, double *point);

/* stsa_err_bound at z standard errors instead of STSA_BOUND_Z: a check
 * that spends a share of the 1% (the recheck of methods auto and svg2, recheck.c). */
double stsa_err_bound_z(const stsa_err_sample *s, const double *err, const double *energy,
                        double *scratch, double *point, double z);

#endif
