/*
 * auto_pick.h — method auto's choice for one head among its candidates
 * (stsa_auto_candidate), from each one's kept fraction and error bound.
 */
#ifndef STSA_SVG_AUTO_PICK_H
#define STSA_SVG_AUTO_PICK_H

#include <stdint.h>

#include "stsa.h"

/* The candidate a head runs, and why (*reason: stsa_auto_reason).
 * density[c] and bound[c] for each c of STSA_AUTO_CANDIDATE_COUNT_; a NaN bound
 * is a candidate not evaluated, never chosen (dense's bound is 0).
 * budget > 0: the lowest density whose bound is <= budget (ties: the lower
 * bound, then the lower index), which is dense when no sparse candidate
 * met the budget. budget = 0: the lowest bound among the sparse candidates
 * (ties: the lower density), all at the configured density; dense only
 * when none was evaluated. */
int stsa_auto_pick(const double *density, const double *bound, double budget,
                   uint8_t *reason);

/* The sparse candidates whose bound is <= budget (budget > 0) into
 * order[], in stsa_auto_pick's preference (the lower density, then the
 * lower bound, then the lower index); returns their count. order[0] is
 * stsa_auto_pick's choice when the count is not 0; the rest are method
 * auto's climb after a failed recheck (recheck.c). */
int stsa_auto_order(const double *density, const double *bound, double budget,
                    int order[STSA_AUTO_CANDIDATE_COUNT_]);

#endif
