/*
 * mask.h — the mask tree behind the opaque stsa_mask.
 *
 * A mask is an immutable node: a leaf predicate with its parameters, or an
 * AND/OR of two children it holds references to. Each node carries a 64-bit
 * signature of its whole subtree (kind, parameters, geometry, children, array
 * contents), computed once at construction: equal masks have equal
 * signatures, so plan sharing and the plan cache compare signatures first and
 * confirm with the full structural comparison.
 */
#ifndef STSA_MASK_MASK_H
#define STSA_MASK_MASK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mask/geometry.h"
#include "stsa.h"

/* Trees deeper than this are refused, which bounds every recursion over them. */
#define STSA_MASK_MAX_DEPTH 64

typedef enum stsa_mask_kind {
  STSA_MK_FULL = 0,
  STSA_MK_CAUSAL,         /* a = offset */
  STSA_MK_LOCAL,          /* a = left, b = right, STSA_UNBOUNDED allowed */
  STSA_MK_CHUNKED,        /* a = chunk */
  STSA_MK_FRAME_WINDOW,   /* a = w */
  STSA_MK_SPATIAL_WINDOW, /* a = rows, b = columns */
  STSA_MK_POSITION_BAND,  /* a = w */
  STSA_MK_SINK_FRAMES,    /* a = n */
  STSA_MK_TEXT,
  STSA_MK_SEGMENTS, /* q_seg [s_q], k_seg [s_kv] */
  STSA_MK_DENSE,    /* bits [s_q * s_kv], 0 or 1 */
  /* a = q clusters, b = kv clusters; q_seg [s_q] and k_seg [s_kv] hold the
   * labels (-1: no cluster), bits [a * b] (0 or 1) the kept rectangles */
  STSA_MK_CLUSTERS,
  STSA_MK_AND,
  STSA_MK_OR,
} stsa_mask_kind;

struct stsa_mask {
  atomic_int refs; /* masks may be shared by plans used on several threads */
  stsa_mask_kind kind;
  int depth; /* 1 for a leaf */
  int64_t a, b;
  /* Video and text nodes need a geometry; a combinator inherits its
   * children's (they must agree), so the root tells a plan what it needs. */
  int has_geo;
  stsa_geometry geometry;
  stsa_geo geo;
  /* Lengths a dense, segment or cluster node in the subtree requires, -1 if
   * none. */
  int64_t s_q, s_kv;
  const stsa_mask *lhs, *rhs;
  int32_t *q_seg, *k_seg; /* segment ids, or cluster labels */
  uint8_t *bits;          /* dense pairs, or kept cluster pairs */
  uint64_t sig;
};

/* Mixes one 64-bit word into a running hash. */
uint64_t stsa_hash_mix(uint64_t h, uint64_t word);
/* Mixes n bytes (any alignment) into a running hash. */
uint64_t stsa_hash_bytes(uint64_t h, const void *data, size_t n);

/* The subtree signature (see above). */
static inline uint64_t stsa_mask_signature(const stsa_mask *m) { return m->sig; }

/* Whether a cluster node keeps the pair of a query labelled ql and a key
 * labelled kl; label -1 (no cluster) is never kept. */
static inline int stsa_clusters_keep(const stsa_mask *m, int32_t ql, int32_t kl) {
  return ql >= 0 && kl >= 0 && m->bits[(int64_t)ql * m->b + kl];
}

/* Takes one more reference (masks are immutable, so sharing is safe). */
const stsa_mask *stsa_mask_ref(const stsa_mask *m);

#endif
