/* bound.c — see bound.h. */
#include "svg/bound.h"

#include <math.h>
#include <string.h>

/* Spread floor of a stratum's values, as a multiple of its mean squared:
 * coefficient of variation at least 1 (an exponential's). */
#define MIN_CV2 2.0

/* The one-sided upper confidence limit (z) of a Poisson mean given k
 * events (continuous in k; Wilson-Hilferty's cube-root approximation of
 * the chi-square quantile, within 1% from k = 1 on). */
static double poisson_upper(double k, double z) {
  const double a = k + 1, c = 1 - 1 / (9 * a) + z / (3 * sqrt(a));
  return a * c * c * c;
}

double stsa_err_bound(const stsa_err_sample *s, const double *err, const double *energy,
                      double *scratch, double *point) {
  return stsa_err_bound_z(s, err, energy, scratch, point, STSA_BOUND_Z);
}

double stsa_err_bound_z(const stsa_err_sample *s, const double *err, const double *energy,
                        double *scratch, double *point, double z) {
  const int64_t G = s->groups;
  double *n = scratch, *se = scratch + G, *se2 = scratch + 2 * G, *sE = scratch + 3 * G,
         *sE2 = scratch + 4 * G;
  memset(scratch, 0, sizeof(double) * (size_t)(5 * G));
  for (int64_t r = 0; r < s->rows; r++) {
    const int64_t g = s->group[r];
    n[g] += 1;
    se[g] += err[r];
    se2[g] += err[r] * err[r];
    sE[g] += energy[r];
    sE2[g] += energy[r] * energy[r];
  }
  /* what an unsampled stratum is assumed to hold */
  double worst_e = 0, least_E = INFINITY;
  for (int64_t g = 0; g < G; g++)
    if (n[g] > 0) {
      worst_e = fmax(worst_e, se[g] / n[g]);
      least_E = fmin(least_E, sE[g] / n[g]);
    }
  if (!(least_E < INFINITY))
    least_E = 0;
  double te = 0, tE = 0, ve = 0, vE = 0;
  for (int64_t g = 0; g < G; g++) {
    const double N = (double)s->pop[g];
    if (N <= 0)
      continue;
    if (n[g] == 0) {
      te += N * worst_e;
      tE += N * least_E;
      continue;
    }
    const double me = se[g] / n[g], mE = sE[g] / n[g];
    te += N * me;
    tE += N * mE;
    if (n[g] >= N) /* the whole stratum was read: no sampling error */
      continue;
    /* sample variances (n - 1); the errors' floored at MIN_CV2 x mean^2
     * (they are heavy-tailed: a few rows of a stratum may hold its error),
     * the energies' not (a dense output's norm varies little by row) */
    double vare = n[g] > 1 ? (se2[g] - n[g] * me * me) / (n[g] - 1) : 0;
    const double varE = n[g] > 1 ? fmax(0.0, (sE2[g] - n[g] * mE * mE) / (n[g] - 1)) : 0;
    vare = fmax(vare, MIN_CV2 * me * me);
    const double fpc = 1.0 - n[g] / N; /* drawn without replacement */
    ve += N * N * fpc * vare / n[g];
    vE += N * N * fpc * varE / n[g];
  }
  /* The strata's spreads come from two rows each: a stratum whose rows
   * both missed its few erring ones looks certain. The variance of the
   * total as if the rows had been drawn with replacement, each with its
   * weight (Hansen-Hurwitz: pop / rows drawn of its stratum), pools the
   * spread of every row; the larger of the two is taken. */
  double vhh = 0;
  int64_t drawn = 0;
  for (int64_t r = 0; r < s->rows; r++)
    drawn += n[s->group[r]] < (double)s->pop[s->group[r]];
  if (drawn > 1) { /* over the rows of strata not read whole */
    double sum = 0, sum2 = 0;
    for (int64_t r = 0; r < s->rows; r++) {
      const int64_t g = s->group[r];
      if (n[g] >= (double)s->pop[g])
        continue;
      const double x = (double)drawn * (double)s->pop[g] / n[g] * err[r];
      sum += x;
      sum2 += x * x;
    }
    const double mean = sum / (double)drawn;
    vhh = (sum2 - (double)drawn * mean * mean) / ((double)drawn - 1) / (double)drawn;
  }
  ve = fmax(ve, vhh);
  if (point)
    *point = tE > 0 ? sqrt(te / tE) : (te > 0 ? INFINITY : 0.0);
  if (te <= 0)
    return 0.0;
  /* The numerator is a sum dominated by its largest terms: with relative
   * variance ve / te^2 it behaves as a count of k = te^2 / ve events, whose
   * upper limit is Poisson's, not k + z sqrt(k) (at k = 1: 6.6, not 3.3). */
  const double k = ve > 0 ? te * te / ve : INFINITY;
  const double hi = k < INFINITY ? te * poisson_upper(k, z) / k : te;
  const double lo = tE - z * sqrt(vE);
  return lo > 0 ? sqrt(hi / lo) : INFINITY;
}
