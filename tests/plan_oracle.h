/*
 * plan_oracle.h — a plan checked against brute force: each tile of a head
 * classified again from stsa_mask_keep over all its pairs, and compared
 * with what the builder stored (kind, CSR entries, row intervals, kept
 * counts, shared pattern storage).
 *
 * Shared by the plan tests (tests/test_plan_*.c, through the test helper
 * library) and fuzz/fuzz_plan.c (fuzz/run.sh compiles this file into it),
 * so both hold the builder to one definition. Needs only the mask layer
 * and stsa.h: no test harness, no printing. Mismatches are counted, and
 * the first is described; the caller decides how to fail.
 */
#ifndef STSA_TESTS_PLAN_ORACLE_H
#define STSA_TESTS_PLAN_ORACLE_H

#include <stdint.h>

#include "mask/plan.h"
#include "stsa.h"

typedef struct plan_oracle {
  long bad_kind;    /* tiles whose kind is not the brute-force one */
  long bad_pattern; /* partial tiles whose stored intervals are out of range,
                       not canonical or not the mask's; equal patterns stored twice */
  long bad_count;   /* CSR entries missing, extra, out of order or of the wrong
                       kind; kept counts; a head mapped to another mask */
  char first[192];  /* the first mismatch, "" while there is none */
} plan_oracle;

/* Checks head h of p against mask m. q_native / kv_native give the native
 * token of each q / kv position (NULL: the identity); pass maps derived
 * from the description to check the plan's own maps too. Adds what it finds
 * to *o (start from a zeroed plan_oracle) and returns the pairs m keeps. */
int64_t plan_oracle_head(plan_oracle *o, const stsa_plan *p, int64_t h,
                         const stsa_mask *m, const int64_t *q_native,
                         const int64_t *kv_native);

/* Checks that equal patterns share storage, across all parts, and that the
 * plan's stats count distinct storage. */
void plan_oracle_dedup(plan_oracle *o, const stsa_plan *p);

/* 1 if some query row of head h of d keeps no key, with the same maps. */
int plan_oracle_empty_row(const stsa_plan_desc *d, int64_t h, const int64_t *q_native,
                          const int64_t *kv_native);

/* Every mismatch found so far. */
static inline long plan_oracle_bad(const plan_oracle *o) {
  return o->bad_kind + o->bad_pattern + o->bad_count;
}

#endif
