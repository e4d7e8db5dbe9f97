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

/* Uniform in lo..hi (both included). */
int64_t tu_rnd(tu_rng *r, int64_t lo, int64_t hi);

#endif
