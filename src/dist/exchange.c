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
#include <limits.h>
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

typedef struct a2a {
  int *sc, *sd, *rc, *rd; /* [U] each */
  MPI_Datatype row;
} a2a;

static void a2a_free(a2a *a) {
  free(a->sc);
  if (a->row != MPI_DATATYPE_NULL)
    MPI_Type_free(&a->row);
}

static stsa_status a2a_init(stsa_dist *d, int U, int64_t D, stsa_dtype dt, a2a *a) {
  a->row = MPI_DATATYPE_NULL;
  a->sc = malloc(sizeof(int) * 4 * (size_t)U);
  if (!a->sc)
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  a->sd = a->sc + U;
  a->rc = a->sd + U;
  a->rd = a->rc + U;
  int rc =
      MPI_Type_contiguous((int)(D * (int64_t)stsa_dtype_size(dt)), MPI_BYTE, &a->row);
  if (rc == MPI_SUCCESS)
    rc = MPI_Type_commit(&a->row);
  return rc == MPI_SUCCESS ? STSA_OK : dist_fail_mpi(d, rc, "MPI_Type_contiguous");
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

stsa_status exchange_forward(stsa_dist *d, const dist_layout *l, const stsa_tensor *x,
                             void *x_loc, double *comm_ms) {
  const int64_t B = x->shape[0], Sw = x->shape[1], D = x->shape[3];
  const int U = l->U, me = l->u, g = l->g;
  const int64_t n_me = layout_heads_of(l, me), Sg = layout_group_len(l, g);
  const size_t esize = stsa_dtype_size(x->dtype);
  a2a a;
  stsa_status st = a2a_init(d, U, D, x->dtype, &a);
  int64_t sent = 0;
  for (int m = 0; st == STSA_OK && m < U; m++) {
    const int64_t len = l->shard_off[g * U + m + 1] - l->shard_off[g * U + m];
    st = set_count(d, &a.sc[m], Sw * layout_heads_of(l, m));
    if (st == STSA_OK)
      st = set_count(d, &a.sd[m], sent);
    sent += Sw * layout_heads_of(l, m);
    if (st == STSA_OK)
      st = set_count(d, &a.rc[m], len * n_me);
    if (st == STSA_OK)
      st = set_count(d, &a.rd[m],
                     (layout_shard_off(l, g, m) - layout_group_off(l, g)) * n_me);
  }
  char *send = st == STSA_OK ? dist_buffer(d, BUF_STAGE,
                                           (size_t)(sent ? sent : 1) * (size_t)D * esize)
                             : NULL;
  if (st == STSA_OK && !send)
    st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory (send buffer)");
  for (int64_t b = 0; st == STSA_OK && b < B; b++) {
    for (int m = 0; st == STSA_OK && m < U; m++) {
      const int64_t nm = layout_heads_of(l, m);
      for (int64_t i = 0; i < nm && st == STSA_OK; i++) {
        const int64_t h = l->group_heads[l->head_ptr[m] + i];
        stsa_tensor src = head_view(x, b, h);
        stsa_tensor dst =
            block_view(send + ((size_t)a.sd[m] + (size_t)i) * (size_t)D * esize, x->dtype,
                       Sw, nm, D);
        if (stsa_tensor_copy(&src, &dst) != STSA_OK)
          st = dist_fail(d, STSA_ERR_BAD_SHAPE, "dist: packing head %lld failed",
                         (long long)h);
      }
    }
    if (st != STSA_OK)
      break;
    char *recv = (char *)x_loc + (size_t)(b * Sg * n_me * D) * esize;
    const double t0 = dist_now_ms();
    int rc = MPI_Alltoallv(send, a.sc, a.sd, a.row, recv, a.rc, a.rd, a.row, d->ucomm);
    *comm_ms += dist_now_ms() - t0;
    if (rc != MPI_SUCCESS)
      st = dist_fail_mpi(d, rc, "MPI_Alltoallv (q/k/v to head groups)");
  }
  a2a_free(&a);
  return st;
}

stsa_status exchange_backward(stsa_dist *d, const dist_layout *l, const void *out_loc,
                              const stsa_tensor *out, double *comm_ms) {
  const int64_t B = out->shape[0], Sw = out->shape[1], D = out->shape[3];
  const int U = l->U, me = l->u, g = l->g;
  const int64_t n_me = layout_heads_of(l, me), Sg = layout_group_len(l, g);
  const size_t esize = stsa_dtype_size(out->dtype);
  a2a a;
  stsa_status st = a2a_init(d, U, D, out->dtype, &a);
  int64_t got = 0;
  for (int m = 0; st == STSA_OK && m < U; m++) {
    const int64_t len = l->shard_off[g * U + m + 1] - l->shard_off[g * U + m];
    st = set_count(d, &a.sc[m], len * n_me);
    if (st == STSA_OK)
      st = set_count(d, &a.sd[m],
                     (layout_shard_off(l, g, m) - layout_group_off(l, g)) * n_me);
    if (st == STSA_OK)
      st = set_count(d, &a.rc[m], Sw * layout_heads_of(l, m));
    if (st == STSA_OK)
      st = set_count(d, &a.rd[m], got);
    got += Sw * layout_heads_of(l, m);
  }
  char *recv = st == STSA_OK ? dist_buffer(d, BUF_STAGE,
                                           (size_t)(got ? got : 1) * (size_t)D * esize)
                             : NULL;
  if (st == STSA_OK && !recv)
    st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory (receive buffer)");
  for (int64_t b = 0; st == STSA_OK && b < B; b++) {
    const char *send = (const char *)out_loc + (size_t)(b * Sg * n_me * D) * esize;
    const double t0 = dist_now_ms();
    int rc = MPI_Alltoallv(send, a.sc, a.sd, a.row, recv, a.rc, a.rd, a.row, d->ucomm);
    *comm_ms += dist_now_ms() - t0;
    if (rc != MPI_SUCCESS) {
      st = dist_fail_mpi(d, rc, "MPI_Alltoallv (output back to sequence shards)");
      break;
    }
    for (int m = 0; st == STSA_OK && m < U; m++) {
      const int64_t nm = layout_heads_of(l, m);
      for (int64_t i = 0; i < nm && st == STSA_OK; i++) {
        const int64_t h = l->group_heads[l->head_ptr[m] + i];
        stsa_tensor src =
            block_view(recv + ((size_t)a.rd[m] + (size_t)i) * (size_t)D * esize,
                       out->dtype, Sw, nm, D);
        stsa_tensor dst = head_view(out, b, h);
        if (stsa_tensor_copy(&src, &dst) != STSA_OK)
          st = dist_fail(d, STSA_ERR_BAD_SHAPE, "dist: unpacking head %lld failed",
                         (long long)h);
      }
    }
  }
  a2a_free(&a);
  return st;
}
