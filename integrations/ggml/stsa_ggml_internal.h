/*
 * stsa_ggml_internal.h — what the dense and the SVG nodes share: the state,
 * the per-node records, the tensor mapping and checks, the work buffer.
 */
#ifndef STSA_GGML_INTERNAL_H
#define STSA_GGML_INTERNAL_H

#include <pthread.h>

#include "stsa_ggml.h"

enum { STSA_GGML_MSG = 400 };

#define STSA_GGML_TRY(expr)                                                              \
  do {                                                                                   \
    stsa_status try_st_ = (expr);                                                        \
    if (try_st_ != STSA_OK)                                                              \
      return try_st_;                                                                    \
  } while (0)

/* The SVG session's three single-head plans, by index. */
enum { KIND_SPATIAL = 0, KIND_TEMPORAL = 1, KIND_DENSE = 2, KINDS = 3 };

/* Node roles; an SVG call's record serves up to three nodes. */
enum { ROLE_DENSE = 0, ROLE_GATHER = 1, ROLE_PROFILE = 2, ROLE_SVG = 3, ROLES = 4 };

typedef struct node_rec {
  stsa_ggml *sg;
  const char *what; /* "dense attention", "svg attention" */
  float scale;
  int64_t layer, step;
  int policy_dense;          /* the session's policy: this call runs dense */
  int64_t batch;             /* B at build time (plans per batch entry) */
  int64_t *rows;             /* [batch * sample_rows] profiled rows */
  stsa_plan **row_plans;     /* [batch * KINDS]: H-head plans over the rows */
  stsa_head_kind *kinds_out; /* caller's, optional */
  /* per role, written by thread 0 after its part: STSA_OK or the failure */
  stsa_status status[ROLES];
  int ran[ROLES];
  char msg[ROLES][STSA_GGML_MSG];
  stsa_status build_status; /* a failure found while building the graph */
  char build_msg[STSA_GGML_MSG];
  struct node_rec *next;
} node_rec;

struct stsa_ggml {
  stsa_ctx *ctx;
  stsa_svg *svg; /* NULL without an SVG configuration */
  stsa_svg_config cfg;
  stsa_mask *masks[KINDS];      /* the session's masks, by kind index */
  stsa_plan *kind_plans[KINDS]; /* single-head plans at the session's tiles */
  pthread_mutex_t lock;         /* guards the work buffer's growth */
  void *wdata;
  size_t wsize;
  node_rec *first, *last;
};

/* A new record appended to sg's list (NULL when out of memory). */
node_rec *stsa_ggml_record(stsa_ggml *sg, const char *what, float scale);

/* q, k, v of a node as stsa tensors after the checks ggml does not make:
 * dtypes stsa reads, one head dim, equal heads and batch (no GQA or
 * broadcast), strides in whole elements; out is the node's dst. A failure
 * leaves its reason in msg. */
stsa_status stsa_ggml_inputs(const struct ggml_tensor *dst, stsa_tensor *q,
                             stsa_tensor *k, stsa_tensor *v, stsa_tensor *out, char *msg);
/* One ggml tensor of ne [D, S, H, B] (attention inputs) or, with permuted,
 * [D, H, S, B] (results) as an stsa tensor; `name` for the message. */
stsa_status stsa_ggml_tensor(const struct ggml_tensor *t, int permuted, const char *name,
                             stsa_tensor *out, char *msg);

/* Batch entry b, head h of an stsa tensor (h < 0: every head). */
stsa_tensor stsa_ggml_view(const stsa_tensor *t, int64_t b, int64_t h);

/* The shared work buffer, grown to at least `need` bytes. */
stsa_status stsa_ggml_work(stsa_ggml *sg, size_t need, void **wdata, size_t *wsize);

/* Ends part ith of a node: on failure zeros its share of dst (so nothing
 * downstream reads garbage); thread 0 records the outcome of the role. */
void stsa_ggml_finish(node_rec *r, int role, struct ggml_tensor *dst, int ith, int nth,
                      stsa_status st, const char *msg);

#endif
