/*
 * auto_pick.c — method auto's per-head choice (auto_pick.h).
 */
#include "svg/auto_pick.h"

#include <math.h>

/* 1 if candidate a is preferred to b by (primary, secondary, index). */
static int better(const double *primary, const double *secondary, int a, int b) {
  if (primary[a] != primary[b])
    return primary[a] < primary[b];
  if (secondary[a] != secondary[b])
    return secondary[a] < secondary[b];
  return a < b;
}

int stsa_auto_pick(const double *density, const double *bound, double budget,
                   uint8_t *reason) {
  int pick = -1;
  if (budget > 0) {
    int sparse_met = 0;
    for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) {
      if (!(bound[c] <= budget)) /* NaN: not evaluated */
        continue;
      sparse_met |= c != STSA_AUTO_DENSE;
      if (pick < 0 || better(density, bound, c, pick))
        pick = c;
    }
    if (pick < 0) /* dense's bound is 0: only a caller's NaN gets here */
      pick = STSA_AUTO_DENSE;
    *reason = sparse_met ? STSA_AUTO_CHEAPEST : STSA_AUTO_NONE_MET;
    return pick;
  }
  for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++)
    if (c != STSA_AUTO_DENSE && !isnan(bound[c]) &&
        (pick < 0 || better(bound, density, c, pick)))
      pick = c;
  *reason = STSA_AUTO_LOWEST;
  return pick < 0 ? STSA_AUTO_DENSE : pick;
}

int stsa_auto_order(const double *density, const double *bound, double budget,
                    int order[STSA_AUTO_CANDIDATE_COUNT_]) {
  int n = 0;
  for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) {
    if (c == STSA_AUTO_DENSE || !(bound[c] <= budget)) /* NaN: not evaluated */
      continue;
    int at = n++;
    for (; at > 0 && better(density, bound, c, order[at - 1]); at--)
      order[at] = order[at - 1];
    order[at] = c;
  }
  return n;
}

/* The enums are compared as int: a caller may pass any value, and an enum
 * without negative constants may be unsigned. */
const char *stsa_auto_candidate_name(stsa_auto_candidate candidate) {
  static const char *const names[STSA_AUTO_CANDIDATE_COUNT_] = {"spatial", "temporal",
                                                                "svg2", "dense"};
  const int i = (int)candidate;
  return i >= 0 && i < STSA_AUTO_CANDIDATE_COUNT_ ? names[i] : "unknown";
}

const char *stsa_auto_reason_name(stsa_auto_reason reason) {
  static const char *const names[STSA_AUTO_REASON_COUNT_] = {
      "method", "cheapest", "none-met", "lowest-bound",
      "policy", "recheck",  "kept",     "confirmed"};
  const int i = (int)reason;
  return i >= 0 && i < STSA_AUTO_REASON_COUNT_ ? names[i] : "unknown";
}
