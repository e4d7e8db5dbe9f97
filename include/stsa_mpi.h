/*
 * stsa_mpi.h — sequence-parallel attention over MPI (libstsa_mpi).
 *
 * Each rank of a communicator holds a contiguous shard of the sequence: q,
 * k, v and out of shape [B, S_r, H, D] (any layout and dtype each, as for
 * stsa_attention), rank r's tokens following rank r-1's. S_r may differ
 * between ranks and may be 0 on none: every rank holds at least one token.
 * Every call below is collective over the communicator: each rank calls it
 * with its own shard and the same options, and gets its own shard of the
 * output back, in its own layout and dtype.
 *
 * Schemes (docs/distributed.md):
 *   ULYSSES  an all-to-all turns sequence shards into whole heads (any head
 *            count on any rank count: ranks get unequal head groups, ranks
 *            past the head count get none); heads are computed whole, in
 *            the single-process tile order, so the output is bitwise
 *            identical to one process; a second all-to-all returns it.
 *   RING     each rank keeps its queries; key/value shards travel around
 *            the ring (non-blocking, overlapped with compute) and partial
 *            results are merged by log-sum-exp. Shard pairs whose plan keeps
 *            nothing are not computed.
 *   HYBRID   Ulysses inside groups of U consecutive ranks, ring across the
 *            P / U groups (USP).
 * Ring and hybrid results are exact up to f32 rounding, as one process is,
 * but they round differently: each key/value chunk is normalised with its
 * own running maximum and merged (in double) through its f32 log-sum-exp.
 * So they differ from one process by about one process's own f32 error
 * against the exact result, which grows with the sequence (measured in
 * docs/distributed.md: 1e-6 of max|out| at 500 tokens, 5e-6 at 8k).
 * Tested: within 1e-6 x max|out| of one process on small problems, and no
 * farther from the exact (double-precision) result than twice one
 * process's distance on a 2k-token one. An f16 or bf16 out is that f32
 * result rounded, so it may differ by one unit in the last place.
 *
 * Errors: a call validates on every rank, then agrees: if any rank failed
 * (a wrong shard shape, options that differ between ranks, a kernel error),
 * every rank returns that rank's status with its message ("rank R: ...",
 * the lowest failing rank) in stsa_dist_last_error, and no rank has written
 * its output. Communication errors are returned (the library sets
 * MPI_ERRORS_RETURN on its own duplicate of the communicator), never fatal.
 *
 * Threads: one call at a time on a stsa_dist (and its context); MPI must be
 * initialised before stsa_dist_create and finalised after stsa_dist_free.
 * MPI_THREAD_FUNNELED is enough: the library calls MPI from the calling
 * thread. With MPI_THREAD_SERIALIZED or more, the ring also moves its
 * transfers while a step computes (a thread of its own polls them, never
 * at the same time as another MPI call of the library); under FUNNELED
 * they move between steps (on TCP both ends must be in MPI for a large
 * message to move). Under SERIALIZED, no other thread of the program may
 * call MPI while a ring or hybrid call is in flight (the poller's calls
 * count as the call's own); MPI_THREAD_MULTIPLE has no such rule.
 */
#ifndef STSA_MPI_H
#define STSA_MPI_H

#include <mpi.h>

#include "stsa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum stsa_dist_scheme {
  STSA_DIST_ULYSSES = 0,
  STSA_DIST_RING = 1,
  STSA_DIST_HYBRID = 2,
  STSA_DIST_SCHEME_COUNT_
} stsa_dist_scheme;

/* "ulysses", "ring", "hybrid"; "unknown" for any other value. */
STSA_API const char *stsa_dist_scheme_name(stsa_dist_scheme scheme);

typedef enum stsa_dist_flags {
  STSA_DIST_DEFAULT = 0,
  /* heads go to ranks in contiguous groups of (nearly) equal count instead
   * of by estimated cost */
  STSA_DIST_CONTIGUOUS_HEADS = 1,
} stsa_dist_flags;

typedef struct stsa_dist_config {
  size_t size; /* sizeof this struct, as compiled (see stsa.h "Extensible structs") */
  stsa_dist_scheme scheme;
  /* HYBRID: the Ulysses degree U, a divisor of the world size P (the ring
   * degree is P / U); 0 picks the largest divisor of P that is at most the
   * head count of the call. Ignored by the other schemes (ULYSSES: U = P,
   * RING: U = 1). */
  int ulysses_degree;
  unsigned flags; /* stsa_dist_flags */
} stsa_dist_config;

typedef struct stsa_dist stsa_dist;

/* Collective. Duplicates comm (the caller keeps its own) and uses ctx for
 * every local computation; ctx must outlive the stsa_dist. Fails on every
 * rank alike (e.g. an unknown scheme on one rank) with *out untouched. */
STSA_API stsa_status stsa_dist_create(stsa_ctx *ctx, MPI_Comm comm,
                                      const stsa_dist_config *cfg, stsa_dist **out);
/* The same, with the agreed message of a failure (there is no stsa_dist to
 * ask then) copied into msg (cut, NUL-terminated; "" on success). */
STSA_API stsa_status stsa_dist_create_msg(stsa_ctx *ctx, MPI_Comm comm,
                                          const stsa_dist_config *cfg, stsa_dist **out,
                                          char *msg, size_t msg_size);
/* Collective (frees the duplicated communicator). NULL is a no-op. */
STSA_API void stsa_dist_free(stsa_dist *dist);
/* The message of the last failed call, on every rank; "" after success. */
STSA_API const char *stsa_dist_last_error(const stsa_dist *dist);
STSA_API int stsa_dist_rank(const stsa_dist *dist);
STSA_API int stsa_dist_size(const stsa_dist *dist);

/* Collective: agrees on a status the caller computed on each rank (reading
 * an input file, say). Returns STSA_OK on every rank if every rank passed
 * STSA_OK; otherwise the lowest failing rank's status on every rank, with
 * "rank R: msg" (its msg, NULL for none) as stsa_dist_last_error. */
STSA_API stsa_status stsa_dist_agree(stsa_dist *dist, stsa_status status,
                                     const char *msg);

/* What one call did, on this rank and over all ranks. */
typedef struct stsa_dist_report {
  size_t size; /* sizeof this struct, as compiled */
  int ranks, ulysses_degree, ring_degree;
  int64_t local_heads;    /* heads this rank computed (all H for RING) */
  double total_ms;        /* this rank, the whole call */
  double comm_ms;         /* this rank: exchanges and transfer waits */
  double compute_ms;      /* this rank: local attention */
  double compute_max_ms;  /* over all ranks */
  double compute_mean_ms; /* over all ranks */
  double imbalance;       /* compute_max_ms / compute_mean_ms - 1 */
  int64_t pairs_skipped;  /* RING/HYBRID, this rank: shard pairs not computed */
  int32_t *head_rank;     /* optional [H] out: the Ulysses rank (inside its
                             group) that computed each head */
} stsa_dist_report;

/* Dense attention of the whole sequence; opts->lse must be NULL
 * (STSA_ERR_UNSUPPORTED). report may be NULL. */
STSA_API stsa_status stsa_dist_attention(stsa_dist *dist, const stsa_tensor *q,
                                         const stsa_tensor *k, const stsa_tensor *v,
                                         const stsa_tensor *out,
                                         const stsa_attn_opts *opts,
                                         stsa_dist_report *report);

/* Block-sparse attention with per-head masks: desc describes the plan of
 * the whole sequence (s_q = s_kv = the sum of the shards, H masks, orders,
 * tiles, flags) exactly as for stsa_plan_build in one process; q_rows and
 * kv_rows must be NULL. Each rank builds the plans of its own part. opts as
 * for stsa_sparse_attention, but lse, pairs_changed and
 * STSA_SPARSE_PREPERMUTED are not supported (shards are in native order).
 * Heads are balanced by their plans' active tiles. */
STSA_API stsa_status stsa_dist_sparse_attention(
    stsa_dist *dist, const stsa_plan_desc *desc, const stsa_tensor *q,
    const stsa_tensor *k, const stsa_tensor *v, const stsa_tensor *out,
    const stsa_sparse_opts *opts, stsa_dist_report *report);

/* An SVG session over the ranks: the same configuration as stsa_svg_create
 * (heads = H, the geometry of the whole sequence) on every rank. Profiling
 * is per head and needs no extra exchange under ULYSSES (a head is whole on
 * its rank); under RING/HYBRID the sampled query rows and their partial
 * results are exchanged (a few kilobytes per head). Heads are balanced by
 * the kind each had in the previous call of the same layer (method svg).
 * An error budget (cfg.max_rel_error) and methods svg2 and auto run on
 * Ulysses layouts only (ULYSSES, or HYBRID with U = P: no ring), where a
 * rank holds whole heads and bounds its own; a call on a layout with rings
 * fails with STSA_ERR_UNSUPPORTED on every rank, nothing written. Methods
 * svg2 and auto keep each head on one rank for good, in the contiguous
 * split (head h on Ulysses rank h * U / H, as STSA_DIST_CONTIGUOUS_HEADS):
 * SVG2 keeps its k-means centroids per head across calls, in the rank's
 * session, which balancing would move away from them. Each rank's heads
 * then give bitwise what one process's session created over just that
 * rank's block of heads gives (not an H-head session: SVG2 seeds its
 * k-means by a head's place in its session). */
typedef struct stsa_dist_svg stsa_dist_svg;
STSA_API stsa_status stsa_dist_svg_create(stsa_dist *dist, const stsa_svg_config *cfg,
                                          stsa_dist_svg **out);
STSA_API void stsa_dist_svg_free(stsa_dist_svg *svg);
/* report (optional, of the current layout) is filled on every rank for the
 * whole call: every per-head array of all B * H heads, as one process
 * reports them (bounds, densities, budget actions, top-p, auto's candidates
 * and choices; ring layouts profile no bound: NaN, and no candidates), and
 * cold, q_clusters and kv_clusters (equal on every rank with heads). The
 * times (profile_ms, attention_ms, cluster_ms) are this rank's, and run is
 * what this rank's attention ran, not written on a rank without heads
 * (stsa_dist_report.local_heads = 0); its size must be
 * sizeof(stsa_run_info). density is of the whole call. */
STSA_API stsa_status stsa_dist_svg_attention(stsa_dist_svg *svg, int64_t layer,
                                             int64_t step, const stsa_tensor *q,
                                             const stsa_tensor *k, const stsa_tensor *v,
                                             const stsa_tensor *out,
                                             stsa_svg_report *report,
                                             stsa_dist_report *dist_report);

#ifdef __cplusplus
}
#endif
#endif /* STSA_MPI_H */
