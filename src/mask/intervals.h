/*
 * intervals.h — the kept keys of one query row, as intervals.
 *
 * For a mask and one query (native index), the kept keys are returned as
 * sorted, disjoint, non-adjacent half-open intervals [lo, hi) of kv POSITIONS
 * (the kv order's numbering), clipped to [0, s_kv). Non-adjacent matters:
 * a kv tile that a row keeps entirely then lies inside a single interval,
 * which is what lets the planner count full tiles with difference arrays.
 *
 * Structured masks are generated analytically, without looking at keys one
 * by one; dense and segment masks, and index masks in a permuted kv order,
 * fall back to a per-key scan of stsa_mask_keep (O(s_kv) per row). A
 * cluster mask's keys are cut once per kv order into runs of one label, and
 * each row then tests runs, not keys (O(runs) per row).
 */
#ifndef STSA_MASK_INTERVALS_H
#define STSA_MASK_INTERVALS_H

#include <stdint.h>

#include "mask/mask.h"

/* A growable list of intervals: v[2k], v[2k + 1] are the k-th [lo, hi). */
typedef struct stsa_ivec {
  int64_t *v;
  int64_t n, cap; /* in intervals */
} stsa_ivec;

/* Room for `more` intervals past n; 0 on success, -1 when out of memory. */
int stsa_ivec_reserve(stsa_ivec *iv, int64_t more);
void stsa_ivec_free(stsa_ivec *iv);

/* Appends [lo, hi) (after a reserve): empty ones are skipped, one that
 * overlaps or touches the last interval extends it. lo must not precede the
 * last interval's lo. */
static inline void stsa_ivec_put(stsa_ivec *iv, int64_t lo, int64_t hi) {
  if (lo >= hi)
    return;
  if (iv->n > 0 && lo <= iv->v[2 * iv->n - 1]) {
    if (hi > iv->v[2 * iv->n - 1])
      iv->v[2 * iv->n - 1] = hi;
    return;
  }
  iv->v[2 * iv->n] = lo;
  iv->v[2 * iv->n + 1] = hi;
  iv->n++;
}

/* A cluster node's keys in kv order as runs of one label: run r covers the
 * positions [start[r], start[r + 1]) and holds label[r] (-1: no cluster). */
typedef struct stsa_iv_runs {
  const stsa_mask *mask; /* the node they were cut for, NULL: slot unused */
  int64_t n;
  int64_t *start; /* [n + 1] */
  int32_t *label; /* [n] */
} stsa_iv_runs;

/* Cluster nodes whose runs are kept at once; a tree with more of them still
 * works, each row then cutting its runs again (O(s_kv) per row). */
#define STSA_IV_RUN_SLOTS 4

/* The kv side of a plan plus reusable buffers, one pair per tree level, so
 * that generating rows allocates nothing once the buffers have grown. */
typedef struct stsa_iv_gen {
  stsa_order kv_order;
  int64_t s_kv;
  const int64_t *kv_native; /* [s_kv] position -> native index; NULL: identity */
  stsa_ivec level[2 * STSA_MASK_MAX_DEPTH];
  stsa_iv_runs runs[STSA_IV_RUN_SLOTS];
  int next_slot; /* the slot the next new cluster node replaces */
} stsa_iv_gen;

/* Sets up a generator (its buffers start empty). */
void stsa_iv_gen_init(stsa_iv_gen *gen, stsa_order kv_order, int64_t s_kv,
                      const int64_t *kv_native);
void stsa_iv_gen_free(stsa_iv_gen *gen);

/* Replaces `out` with the kept key intervals of query `qi` (native index).
 * Fails only with STSA_ERR_OUT_OF_MEMORY. */
stsa_status stsa_iv_row(stsa_iv_gen *gen, const stsa_mask *mask, int64_t qi,
                        stsa_ivec *out);

/* For a plan over a subset of the keys: replaces `out` with `in` (intervals
 * of positions of the whole kv order) restricted to the subset, numbered by
 * rank: the subset sits at the ascending positions pos[0 .. n), and [lo, hi)
 * becomes [rank(lo), rank(hi)) with rank(x) = #{i : pos[i] < x}. Empty
 * results are dropped and touching ones merged, so `out` keeps the
 * non-adjacent form. Fails only with STSA_ERR_OUT_OF_MEMORY. */
stsa_status stsa_ivec_restrict(const stsa_ivec *in, const int64_t *pos, int64_t n,
                               stsa_ivec *out);

#endif
