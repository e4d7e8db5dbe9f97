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

/* One call. */
typedef struct dist_svg_call {
  stsa_dist_svg *s;
  int64_t layer, step, B;
  int dense;
  stsa_head_kind *local_kinds; /* [B * n] Ulysses: the local session's report */
  float *local_mse;            /* [2 * B * n] spatial, then temporal */
  /* [3 * B * n] Ulysses: the local session's error bound, density and
   * budget action of each head (ring layouts: NaN, the kind's density,
   * none or policy) */
  float *local_budget;
  stsa_head_kind *kinds;     /* [B * H] every head's kind */
  float *mse_s, *mse_t;      /* [B * H] */
  float *est, *head_density; /* [B * H] */
  uint8_t *budget;           /* [B * H] stsa_budget_action */
  double profile_ms, attention_ms;
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
