/*
 * exchange.c — Ulysses' two all-to-alls inside a group of U ranks.
 *
 * Forward: every member sends each other member the rows of that member's
 * heads for its own tokens; the receive side is laid out [B, S_group, n, D]
 * by the displacements alone (the members' shards are consecutive token
 * ranges), so nothing is unpacked: the kernel reads the received buffer
 * and fuses any token permutation (temporal heads) into its own packing.
 * Backward: the local output's rows of member m's tokens are one
 * contiguous block per batch entry; what comes back is scattered into the
 * caller's output in its layout and dtype.
 *
 * Counts are in rows of D elements (an MPI contiguous type), so one call
 * moves up to 2^31 rows per peer. Batch entries go one all-to-all each.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "dist/dist_internal.h"

/* Address of row (b, s, h) of a tensor. */
static void *row_at(const stsa_tensor *t, int64_t b, int64_t s, int64_t h) {
  const int64_t off = b * t->stride[0] + s * t->stride[1] + h * t->stride[2];
  return (char *)t->data + (size_t)off * stsa_dtype_size(t->dtype);
}

/* [1, S, 1, D] view of rows s = 0..S-1 of one head, `per_row` heads apart,
 * in a contiguous block. */
static stsa_tensor block_view(void *data, stsa_dtype dt, int64_t S, int64_t per_row,
                              int64_t D) {
  stsa_tensor t = {data, dt, {1, S, 1, D}, {S * per_row * D, per_row * D, D, 1}};
  return t;
}

static stsa_tensor head_view(const stsa_tensor *x, int64_t b, int64_t h) {
  stsa_tensor t = *x;
  t.data = row_at(x, b, 0, h);
  t.shape[0] = 1;
  t.shape[2] = 1;
  return t;
}

/* Counts and displacements, in rows, of the two sides of an exchange: the
 * shard side (this rank's tokens, member m's heads, staged contiguously
 * member after member) and the group side (member m's tokens, this rank's
 * heads, at their place in [S_group, n, D]). Forward sends the shard side
 * and receives the group side; backward the other way round. */
typedef struct a2a {
  int *shard_c, *shard_d, *group_c, *group_d; /* [U] each */
  int64_t staged;                             /* rows of the shard side */
  MPI_Datatype row;
} a2a;

static void a2a_free(a2a *a) {
  free(a->shard_c);
  if (a->row != MPI_DATATYPE_NULL)
    MPI_Type_free(&a->row);
}

/* Row counts must fit an int. */
static stsa_status set_count(stsa_dist *d, int *slot, int64_t rows) {
  if (rows > INT_MAX)
    return dist_fail(d, STSA_ERR_UNSUPPORTED,
                     "dist: %lld rows to one peer in one all-to-all exceed MPI's int "
                     "counts; use more ranks",
                     (long long)rows);
  *slot = (int)rows;
  return STSA_OK;
}

static stsa_status a2a_init(stsa_dist *d, const dist_layout *l, int64_t Sw, int64_t D,
                            stsa_dtype dt, a2a *a) {
  const int U = l->U, g = l->g;
  const int64_t n_me = layout_heads_of(l, l->u);
  a->row = MPI_DATATYPE_NULL;
  a->staged = 0;
  a->shard_c = malloc(sizeof(int) * 4 * (size_t)U);
  if (!a->shard_c)
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  a->shard_d = a->shard_c + U;
  a->group_c = a->shard_d + U;
  a->group_d = a->group_c + U;
  stsa_status st = STSA_OK;
  for (int m = 0; st == STSA_OK && m < U; m++) {
    const int64_t len = layout_shard_off(l, g, m + 1) - layout_shard_off(l, g, m);
    st = set_count(d, &a->shard_c[m], Sw * layout_heads_of(l, m));
    if (st == STSA_OK)
      st = set_count(d, &a->shard_d[m], a->staged);
    a->staged += Sw * layout_heads_of(l, m);
    if (st == STSA_OK)
      st = set_count(d, &a->group_c[m], len * n_me);
    if (st == STSA_OK)
      st = set_count(d, &a->group_d[m],
                     (layout_shard_off(l, g, m) - layout_group_off(l, g)) * n_me);
  }
  if (st != STSA_OK)
    return st;
  int rc =
      MPI_Type_contiguous((int)(D * (int64_t)stsa_dtype_size(dt)), MPI_BYTE, &a->row);
  if (rc == MPI_SUCCESS)
    rc = MPI_Type_commit(&a->row);
  return rc == MPI_SUCCESS ? STSA_OK : dist_fail_mpi(d, rc, "MPI_Type_contiguous");
}

/* Copies batch entry b of every head between the caller's tensor x and the
 * staged shard side: to_stage packs, else unpacks. */
static stsa_status stage_copy(stsa_dist *d, const dist_layout *l, const a2a *a,
                              const stsa_tensor *x, int64_t b, char *stage,
                              int to_stage) {
  const int64_t Sw = x->shape[1], D = x->shape[3];
  const size_t esize = stsa_dtype_size(x->dtype);
  for (int m = 0; m < l->U; m++) {
    const int64_t nm = layout_heads_of(l, m);
    for (int64_t i = 0; i < nm; i++) {
      const int64_t h = l->group_heads[l->head_ptr[m] + i];
      stsa_tensor mine = head_view(x, b, h);
      stsa_tensor staged =
          block_view(stage + ((size_t)a->shard_d[m] + (size_t)i) * (size_t)D * esize,
                     x->dtype, Sw, nm, D);
      if (stsa_tensor_copy(to_stage ? &mine : &staged, to_stage ? &staged : &mine) !=
          STSA_OK)
        return dist_fail(d, STSA_ERR_BAD_SHAPE, "dist: %s head %lld failed",
                         to_stage ? "packing" : "unpacking", (long long)h);
    }
  }
  return STSA_OK;
}

/* Both directions: x is the caller's tensor (the shard side), group the
 * contiguous [B, S_group, n, D] buffer (the group side). */
static stsa_status exchange(stsa_dist *d, const dist_layout *l, const stsa_tensor *x,
                            char *group, int forward, double *comm_ms) {
  const int64_t B = x->shape[0], Sw = x->shape[1], D = x->shape[3];
  const int64_t n_me = layout_heads_of(l, l->u), Sg = layout_group_len(l, l->g);
  const size_t esize = stsa_dtype_size(x->dtype);
  a2a a;
  stsa_status st = a2a_init(d, l, Sw, D, x->dtype, &a);
  /* reserved by dist_run before its agreement: this does not fail */
  char *stage = st == STSA_OK ? dist_buffer(d, BUF_STAGE,
                                            (size_t)(a.staged + 1) * (size_t)D * esize)
                              : NULL;
  if (st == STSA_OK && !stage)
    st = STSA_ERR_OUT_OF_MEMORY;
  for (int64_t b = 0; st == STSA_OK && b < B; b++) {
    char *grp = group + (size_t)(b * Sg * n_me * D) * esize;
    if (forward)
      st = stage_copy(d, l, &a, x, b, stage, 1);
    if (st != STSA_OK)
      break;
    const double t0 = dist_now_ms();
    int rc = forward ? MPI_Alltoallv(stage, a.shard_c, a.shard_d, a.row, grp, a.group_c,
                                     a.group_d, a.row, d->ucomm)
                     : MPI_Alltoallv(grp, a.group_c, a.group_d, a.row, stage, a.shard_c,
                                     a.shard_d, a.row, d->ucomm);
    *comm_ms += dist_now_ms() - t0;
    if (rc != MPI_SUCCESS)
      st = dist_fail_mpi(d, rc,
                         forward ? "MPI_Alltoallv (q/k/v to head groups)"
                                 : "MPI_Alltoallv (output back to sequence shards)");
    else if (!forward)
      st = stage_copy(d, l, &a, x, b, stage, 0);
  }
  a2a_free(&a);
  return st;
}

stsa_status exchange_forward(stsa_dist *d, const dist_layout *l, const stsa_tensor *x,
                             void *x_loc, double *comm_ms) {
  return exchange(d, l, x, x_loc, 1, comm_ms);
}

stsa_status exchange_backward(stsa_dist *d, const dist_layout *l, const void *out_loc,
                              const stsa_tensor *out, double *comm_ms) {
  /* the group side is only read when sending back */
  return exchange(d, l, out, (char *)(uintptr_t)out_loc, 0, comm_ms);
}
