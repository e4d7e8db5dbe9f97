/*
 * cluster_plan.h — the plan of one head's cluster rectangles (Sparse
 * VideoGen 2). Queries and keys are sorted by cluster label (stably, so a
 * cluster's members keep their native order), text after them; each cluster
 * is cut into tiles of at most q_tile / kv_tile tokens, so tile boundaries
 * are cluster boundaries and every kept (query cluster, key cluster)
 * rectangle is a set of whole tiles: the plan has FULL tiles only, ragged
 * ones included (kernel/block_sparse.h, variable tiles). The permutation is
 * the plan's token maps, fused into the kernel's packing and gathers.
 */
#ifndef STSA_MASK_CLUSTER_PLAN_H
#define STSA_MASK_CLUSTER_PLAN_H

#include <stdint.h>

#include "core/context.h"
#include "mask/plan.h"

typedef struct stsa_cluster_layout {
  const stsa_geometry *g;
  int64_t q_clusters, kv_clusters;
  const int32_t *q_label, *k_label; /* [N] by native token; -1 for text */
  const uint8_t *keep;              /* [q_clusters][kv_clusters] rectangles kept */
  int q_tile, kv_tile;              /* tile maxima: multiples of the kernels' mr, nr */
  /* Packed kv spans start on multiples of this (0: the kernels' nr; else a
   * multiple of nr): what the kernels ask for the calls the plan serves
   * (kernel/problem.h: stsa_kv_pack_align). The plan knows no kernel's
   * blocks; a wider alignment than a call needs only pads its K/V more. */
  int pack_align;
} stsa_cluster_layout;

/* A one-head plan of the layout over the whole sequence: video queries see
 * the keys of their cluster's kept key clusters and the real text; real
 * text sees every real token; padding text sees padding only (the text
 * rules of stsa_mask_text). `mask` is the same pattern as a mask (for NAIVE
 * mode and for checks); the plan takes a reference to it. Reads only the
 * context's kernels, and a failure's message goes to err, so calls may run
 * side by side on one context. */
stsa_status stsa_cluster_plan_build(const stsa_ctx *ctx, const stsa_cluster_layout *c,
                                    const stsa_mask *mask, stsa_plan **out,
                                    stsa_errbuf *err);

#endif
