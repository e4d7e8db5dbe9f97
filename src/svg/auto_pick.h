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

#endif
