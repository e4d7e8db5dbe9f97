/*
 * mask_util.h — what the mask and plan tests (tests/test_mask_*.c) share:
 * building masks with a check, combining them, plan descriptions, token
 * counts and random ranges.
 */
#ifndef STSA_TESTS_MASK_UTIL_H
#define STSA_TESTS_MASK_UTIL_H

#include <stdint.h>

#include "stsa.h"
#include "testutil.h"

/* var = the mask `call` builds into &var; CHECKs that it did. */
#define NEW_MASK(var, call)                                                              \
  do {                                                                                   \
    (var) = NULL;                                                                        \
    stsa_status st_ = (call);                                                            \
    CHECK(st_ == STSA_OK && (var), "%s -> %s", #call, stsa_status_str(st_));             \
  } while (0)

/* a OR b (a AND b), dropping the caller's references to a and b: the
 * combination keeps its own. */
stsa_mask *tu_or_free(stsa_mask *a, stsa_mask *b);
stsa_mask *tu_and_free(stsa_mask *a, stsa_mask *b);

/* A description with NATIVE orders and the context's tiles. */
stsa_plan_desc tu_plan_desc(int64_t s_q, int64_t s_kv, int64_t heads,
                            const stsa_mask *const *masks, const stsa_geometry *g,
                            unsigned flags);

/* Tokens of a geometry, counted here rather than by the library:
 * text + frames x height x width. */
int64_t tu_tokens(const stsa_geometry *g);

/* The double-precision reference of row (b, i, h): the query of native
 * token qi against every key row j of k and v (native token kv_native[j],
 * or j when NULL) that `mask` keeps; out[D] and the natural-log lse (0 and
 * -inf for a row that keeps nothing). */
void tu_masked_reference_row(const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const stsa_mask *mask, int64_t b,
                             int64_t i, int64_t qi, int64_t h, const int64_t *kv_native,
                             double *out, double *lse);

/* Uniform in lo..hi (both included). */
int64_t tu_rnd(tu_rng *r, int64_t lo, int64_t hi);

#endif
