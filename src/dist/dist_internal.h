/*
 * dist_internal.h — libstsa_mpi's shared state. The distributed layer sits
 * on top of the library and uses its public API only (stsa.h), so it links
 * against either the shared or the static libstsa.
 *
 * Rank grid: world rank w = g * U + u, where u indexes the Ulysses group of
 * U consecutive ranks (their shards together are the group's chunk of the
 * sequence) and g the position on the ring of R = P / U groups.
 */
#ifndef STSA_DIST_INTERNAL_H
#define STSA_DIST_INTERNAL_H

#include <stdint.h>

#include "stsa.h"
#include "stsa_mpi.h"

#define DIST_MSG 480

/* The kept work buffers: the local q, k, v and out, the exchange's staging. */
enum { BUF_Q, BUF_K, BUF_V, BUF_OUT, BUF_STAGE, DIST_BUFFERS };

/* Propagates a non-OK status. */
#define DIST_TRY(expr)                                                                   \
  do {                                                                                   \
    stsa_status dist_try_st_ = (expr);                                                   \
    if (dist_try_st_ != STSA_OK)                                                         \
      return dist_try_st_;                                                               \
  } while (0)

struct stsa_dist {
  stsa_ctx *ctx;
  MPI_Comm comm; /* our duplicate of the caller's */
  int rank, size;
  stsa_dist_config cfg;
  char err[DIST_MSG + 32];
  /* the call has failed on every rank already (agreed): later agreements
   * of the same call pass the status on without communicating */
  int agreed_failure;
  /* work buffers kept across calls (shapes repeat every layer and step),
   * grown on demand: see dist_buffer */
  void *buf[DIST_BUFFERS];
  size_t buf_cap[DIST_BUFFERS];
  /* sub-communicators for the current Ulysses degree (built on change) */
  int comm_u_degree;
  MPI_Comm ucomm, rcomm;
};

/* What a call is, as every rank must agree on it (one fixed-size record,
 * allgathered). */
enum { CALL_DENSE = 0, CALL_SPARSE = 1, CALL_SVG = 2 };
typedef struct dist_sig {
  int64_t status;           /* the rank's local validation */
  int64_t kind;             /* CALL_* */
  int64_t B, S_local, H, D; /* q's shape (k, v, out checked equal locally) */
  int64_t dtype[4];         /* q, k, v, out */
  int64_t scheme, u_degree, flags;
  int64_t mode, layer, step;
  uint64_t options; /* hash of the remaining options (scale, plan desc, ...) */
} dist_sig;

/* The sequence and head layout of one call. */
typedef struct dist_layout {
  int P, U, R;          /* world size, Ulysses degree, ring degree */
  int u, g;             /* this rank in its Ulysses group, its group on the ring */
  int64_t S;            /* total tokens */
  int64_t *shard_off;   /* [P + 1] token offset of each world rank's shard */
  int64_t *head_owner;  /* [H] Ulysses index (0..U-1) computing each head */
  int64_t *group_heads; /* heads by owner: those of u at [head_ptr[u], head_ptr[u+1]) */
  int64_t *head_ptr;    /* [U + 1] */
  int64_t H;
} dist_layout;

/* Token range of Ulysses member u of ring group g, and of the whole group. */
static inline int64_t layout_shard_off(const dist_layout *l, int g, int u) {
  return l->shard_off[g * l->U + u];
}
static inline int64_t layout_group_off(const dist_layout *l, int g) {
  return l->shard_off[g * l->U];
}
static inline int64_t layout_group_len(const dist_layout *l, int g) {
  return l->shard_off[(g + 1) * l->U] - l->shard_off[g * l->U];
}
static inline int64_t layout_heads_of(const dist_layout *l, int u) {
  return l->head_ptr[u + 1] - l->head_ptr[u];
}

void layout_free(dist_layout *l);

/* Every entry point starts here: no message, no agreed failure. */
static inline void dist_call_start(stsa_dist *d) {
  d->err[0] = '\0';
  d->agreed_failure = 0;
}

/* Records a message (this rank's, not yet agreed) and returns code. */
stsa_status dist_fail(stsa_dist *d, stsa_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The context's last message as this rank's failure. */
stsa_status dist_fail_ctx(stsa_dist *d, stsa_status code, const char *what);
/* An MPI error as a failure (STSA_ERR_IO). */
stsa_status dist_fail_mpi(stsa_dist *d, int mpi_rc, const char *what);

/* Collective agreement on a status: see stsa_dist_agree. The local message
 * is d->err when st != STSA_OK. */
stsa_status dist_agree(stsa_dist *d, stsa_status st);

/* Collective: allgathers every rank's signature, agrees on the statuses
 * they carry, checks they describe one call (naming the first field that
 * differs), derives the Ulysses degree and the shard offsets, and fills l
 * (head ownership is left to balance_heads). */
stsa_status dist_begin(stsa_dist *d, const dist_sig *mine, dist_layout *l);

/* The sub-communicators for l->U (collective on change). */
stsa_status dist_comms(stsa_dist *d, const dist_layout *l);

/* Heads to Ulysses members: cost[h] >= 0 (NULL: all equal); longest first
 * to the least loaded member, ties to the lower head / member, so every rank
 * computes the same assignment. CONTIGUOUS_HEADS: equal contiguous groups. */
stsa_status balance_heads(stsa_dist *d, const double *cost, dist_layout *l);

/* Buffer `slot` with room for `bytes` (contents not kept when it grows);
 * NULL, with a message, when out of memory. */
void *dist_buffer(stsa_dist *d, int slot, size_t bytes);

/* Monotonic milliseconds. */
double dist_now_ms(void);

/* 64-bit FNV-1a over bytes, to fingerprint options (never over a struct:
 * its padding bytes are undefined). */
uint64_t dist_hash(uint64_t h, const void *p, size_t n);
/* The fields of a geometry. */
uint64_t dist_hash_geometry(uint64_t h, const stsa_geometry *g);

/* ---- the Ulysses exchange ------------------------------------------------ */
/* x (this rank's shard [B, S_w, H, D]) -> x_loc [B, S_group, n_u, D],
 * contiguous, in x's dtype, holding the group's tokens of this member's
 * heads. x_loc must have room for that. */
stsa_status exchange_forward(stsa_dist *d, const dist_layout *l, const stsa_tensor *x,
                             void *x_loc, double *comm_ms);
/* out_loc [B, S_group, n_u, D] contiguous in out's dtype -> this rank's
 * shard of out (every head), via a staging buffer; writes out. */
stsa_status exchange_backward(stsa_dist *d, const dist_layout *l, const void *out_loc,
                              const stsa_tensor *out, double *comm_ms);

/* ---- the local computation of one call ------------------------------------ */
/* Computes out_loc = attention of the local tensors (whole heads of the
 * group's chunk: the full sequence when R == 1, else the ring runs). */
typedef struct dist_local {
  stsa_tensor q, k, v;  /* [B, S_group, n, D] */
  stsa_tensor out;      /* [B, S_group, n, D], out's dtype, contiguous */
  const int64_t *heads; /* [n] global head index of local head i */
  int64_t n;
} dist_local;

typedef struct dist_compute {
  /* optional, called once after the exchange on every rank with local
   * heads, before any compute (collectives inside must be reached by every
   * member of the ring group, failed or not) */
  stsa_status (*prepare)(void *self, stsa_dist *d, const dist_layout *l,
                         const dist_local *loc);
  /* computes out (f32 when lse is given, else out's dtype) for queries of
   * the local chunk against keys kv (a chunk starting at token kv_off of
   * kv_len tokens; the whole sequence when R == 1) */
  stsa_status (*run)(void *self, stsa_dist *d, const dist_layout *l,
                     const dist_local *loc, const stsa_tensor *k, const stsa_tensor *v,
                     int64_t kv_off, const stsa_tensor *out, float *lse, int *skipped);
  void *self;
} dist_compute;

/* The ring's buffers: the key/value chunk a round computes on and the one
 * it receives, the running result and a round's (f32, with their lse), and
 * the MPI row types of k and v. */
typedef struct ring_bufs {
  void *k[2], *v[2];
  float *acc, *acc_lse, *part, *part_lse;
  MPI_Datatype krow, vrow;
} ring_bufs;

/* No buffers (what ring_bufs_free leaves). */
static inline void ring_bufs_clear(ring_bufs *r) {
  *r = (ring_bufs){.krow = MPI_DATATYPE_NULL, .vrow = MPI_DATATYPE_NULL};
}

/* Allocates the cleared r for this rank's place in l: n local heads of
 * head dim D, batch B, k and v in those dtypes. Local: called before the
 * agreement that precedes the ring (dist_run), so a member that gets no
 * memory fails there, named, and no ring starts. */
stsa_status ring_bufs_alloc(stsa_dist *d, const dist_layout *l, int64_t B, int64_t n,
                            int64_t D, stsa_dtype k_dtype, stsa_dtype v_dtype,
                            ring_bufs *r);
/* Frees and clears r. */
void ring_bufs_free(ring_bufs *r);

/* Ring over the R groups in the buffers r (from ring_bufs_alloc): partial
 * results of every kv chunk merged by log-sum-exp into loc->out. */
stsa_status ring_run(stsa_dist *d, const dist_layout *l, const dist_local *loc,
                     const dist_compute *c, const ring_bufs *r, double *comm_ms,
                     double *compute_ms, int64_t *skipped);

/* Runs one call end to end: exchange, compute (directly or on the ring),
 * agreement, exchange back; fills the report. */
stsa_status dist_run(stsa_dist *d, dist_layout *l, const stsa_tensor *q,
                     const stsa_tensor *k, const stsa_tensor *v, const stsa_tensor *out,
                     const dist_compute *c, stsa_dist_report *report);

#endif
