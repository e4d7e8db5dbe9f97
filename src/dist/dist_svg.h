/*
 * dist_svg.h — the distributed SVG session and one call's state, shared by
 * the Ulysses path (dist_svg.c) and the ring's profiling (dist_svg_ring.c).
 */
#ifndef STSA_DIST_SVG_H
#define STSA_DIST_SVG_H

#include "dist/dist_call.h"

struct stsa_dist_svg {
  stsa_dist *d;
  stsa_svg_config cfg;
  int64_t tokens;
  stsa_svg **by_heads; /* [heads + 1]: sessions by local head count, lazily */
  stsa_svg_windows windows;
  double density_dense; /* kept fraction of the policy's dense calls */
  /* Each layer's head kinds of its last sparse call (batch entry 0), for
   * balancing, by layer: open addressing with linear probing, a power-of-two
   * number of slots at most half full, so memory follows the distinct layers
   * called, not the largest one (any layer in [0, INT64_MAX]). */
  int64_t *kind_layer; /* [kind_slots] the layer of each slot, -1: empty */
  signed char *kinds;  /* [kind_slots * heads] */
  int64_t kind_slots, kind_count;
};

/* The session for n local heads (created on first use). */
stsa_status dist_svg_session(stsa_dist_svg *s, int64_t n, stsa_svg **out);

/* What a call gathers of each head, as floats (kinds, actions and choices
 * are small integers, exact in a float; bounds, densities and top-p are the
 * local session's floats, moved bitwise): field f of local head i of batch
 * entry b at [f * B * n + b * n + i] in a record of n heads; the candidates'
 * fields are [B * n * STSA_AUTO_CANDIDATE_COUNT_] each, candidate-minor as
 * in stsa_svg_report, from [f * B * n]. */
enum {
  SVG_F_KIND,
  SVG_F_MSE_S,
  SVG_F_MSE_T,
  SVG_F_EST,
  SVG_F_DENSITY,
  SVG_F_BUDGET,
  SVG_F_TOP_P,
  SVG_F_CHOICE,
  SVG_F_REASON,
  SVG_F_CAND_DENSITY,
  SVG_F_CAND_BOUND = SVG_F_CAND_DENSITY + STSA_AUTO_CANDIDATE_COUNT_,
  SVG_FIELDS = SVG_F_CAND_BOUND + STSA_AUTO_CANDIDATE_COUNT_
};

/* One call. */
typedef struct dist_svg_call {
  stsa_dist_svg *s;
  int64_t layer, step, B;
  int dense;
  stsa_head_kind *local_kinds; /* [B * n] the local session's or the ring's kinds */
  float *local;                /* [SVG_FIELDS * B * n] this rank's record */
  float *local_mse;            /* its SVG_F_MSE_S and SVG_F_MSE_T fields */
  float *all;                  /* [SVG_FIELDS * B * H] every head's, by global head */
  stsa_head_kind *kinds;       /* [B * H] every head's kind */
  /* this rank's: its kept fraction summed over its heads, and its session's
   * cold flag and cluster counts (0 with no local heads) */
  double local_kept;
  int local_cold;
  int64_t local_q_clusters, local_kv_clusters;
  double profile_ms, attention_ms, cluster_ms;
  stsa_run_info *run;    /* the caller's, for the local session (may be NULL) */
  struct ring_svg *ring; /* ring layouts only */
} dist_svg_call;

/* Ring and hybrid layouts: profiles the local heads on the ring (collective
 * over the ring group) and fills c->local_kinds and c->local_mse. */
stsa_status ring_svg_prepare(void *self, stsa_dist *d, const dist_layout *l,
                             const dist_local *loc);
/* The ring's compute of one kv chunk: every local head with its kind's mask. */
stsa_status ring_svg_run(void *self, stsa_dist *d, const dist_layout *l,
                         const dist_local *loc, const stsa_tensor *k,
                         const stsa_tensor *v, int64_t kv_off, const stsa_tensor *out,
                         float *lse, int *skipped);
void ring_svg_free(dist_svg_call *c);

#endif
