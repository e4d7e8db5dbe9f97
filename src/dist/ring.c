/*
 * ring.c — Ring attention over the R groups of a hybrid layout.
 *
 * The queries stay; the key/value chunk a rank holds moves one step along
 * the ring per round (non-blocking send and receive posted before the
 * round's compute, so the transfer hides behind it), and every round's
 * partial result (f32 with its log-sum-exp) is merged into the running one:
 *   m = max(L, l),  O = (e^(L-m) O + e^(l-m) o) / (e^(L-m) + e^(l-m)),
 *   L = m + ln(e^(L-m) + e^(l-m)).
 * A round whose plan keeps no pair is not computed (the compute says so).
 *
 * MPI moves a large message only while the ranks at both ends are inside
 * MPI calls (on TCP; shared memory lets the receiver pull alone), and a
 * round's compute makes none. When the caller's MPI allows calls from
 * another thread one at a time (MPI_THREAD_SERIALIZED or more), a poller
 * thread calls MPI_Testall on the round's transfers every 200 us while the
 * round computes, so they move meanwhile; otherwise they move when the
 * round ends. A round waits for what it receives only; its sends must have
 * completed before their buffer is received into again, a round later.
 *
 * The buffers are allocated before the ring starts, ahead of the call's
 * agreement (dist_run), so that a member short of memory fails where every
 * rank learns which one it was and why, as under Ulysses; in the ring, a
 * failed member could only leave its peers waiting.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"

/* Folds one partial result into the accumulator. Rows are (b, s, h) of a
 * [B, S, n, D] f32 tensor; lse is [B, n, S]. */
static void merge(float *acc, float *acc_lse, const float *part, const float *part_lse,
                  int64_t B, int64_t S, int64_t n, int64_t D) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < n; h++)
      for (int64_t s = 0; s < S; s++) {
        const size_t li = (size_t)((b * n + h) * S + s);
        const double pl = part_lse[li], al = acc_lse[li];
        if (pl == -INFINITY)
          continue;
        float *o = acc + (size_t)(((b * S + s) * n + h) * D);
        const float *p = part + (size_t)(((b * S + s) * n + h) * D);
        if (al == -INFINITY) {
          memcpy(o, p, sizeof *o * (size_t)D);
          acc_lse[li] = (float)pl;
          continue;
        }
        const double m = pl > al ? pl : al;
        const double wa = exp(al - m), wp = exp(pl - m), sum = wa + wp;
        for (int64_t i = 0; i < D; i++)
          o[i] = (float)((wa * o[i] + wp * p[i]) / sum);
        acc_lse[li] = (float)(m + log(sum));
      }
}

/* The poller: MPI_Testall on `reqs` until told to stop (the caller does no
 * MPI meanwhile, so the calls are serialized). */
typedef struct poller {
  pthread_t thread;
  atomic_int stop;
  MPI_Request *reqs;
  int n, running;
} poller;

static void *poll_loop(void *arg) {
  poller *p = arg;
  const struct timespec pause = {0, 200 * 1000};
  while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
    int done = 0;
    if (MPI_Testall(p->n, p->reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || done)
      break; /* the round's Waitall reports errors */
    nanosleep(&pause, NULL);
  }
  return NULL;
}

static void poller_start(poller *p, MPI_Request *reqs, int n, int allowed) {
  p->reqs = reqs;
  p->n = n;
  atomic_init(&p->stop, 0);
  p->running = allowed && pthread_create(&p->thread, NULL, poll_loop, p) == 0;
}

static void poller_stop(poller *p) {
  if (!p->running)
    return;
  atomic_store_explicit(&p->stop, 1, memory_order_release);
  pthread_join(p->thread, NULL);
  p->running = 0;
}

void ring_bufs_free(ring_bufs *r) {
  for (int i = 0; i < 2; i++) {
    free(r->k[i]);
    free(r->v[i]);
  }
  free(r->acc);
  free(r->acc_lse);
  free(r->part);
  free(r->part_lse);
  if (r->krow != MPI_DATATYPE_NULL)
    MPI_Type_free(&r->krow);
  if (r->vrow != MPI_DATATYPE_NULL)
    MPI_Type_free(&r->vrow);
  ring_bufs_clear(r);
}

static int row_type(int64_t D, stsa_dtype dt, MPI_Datatype *t) {
  int rc = MPI_Type_contiguous((int)(D * (int64_t)stsa_dtype_size(dt)), MPI_BYTE, t);
  return rc == MPI_SUCCESS ? MPI_Type_commit(t) : rc;
}

stsa_status ring_bufs_alloc(stsa_dist *d, const dist_layout *l, int64_t B, int64_t n,
                            int64_t D, stsa_dtype k_dtype, stsa_dtype v_dtype,
                            ring_bufs *r) {
  const int64_t S = layout_group_len(l, l->g);
  int64_t smax = 0;
  for (int g = 0; g < l->R; g++)
    if (layout_group_len(l, g) > smax)
      smax = layout_group_len(l, g);
  const size_t kv_rows = (size_t)(B * smax * n), rows = (size_t)(B * S * n);
  const size_t k_bytes = kv_rows * (size_t)D * stsa_dtype_size(k_dtype),
               v_bytes = kv_rows * (size_t)D * stsa_dtype_size(v_dtype),
               out_bytes = rows * (size_t)D * sizeof(float),
               lse_bytes = rows * sizeof(float);
  for (int i = 0; i < 2; i++) {
    r->k[i] = malloc(k_bytes);
    r->v[i] = malloc(v_bytes);
  }
  r->acc = calloc(rows * (size_t)D, sizeof *r->acc);
  r->part = malloc(out_bytes);
  r->acc_lse = malloc(lse_bytes);
  r->part_lse = malloc(lse_bytes);
  if (!r->k[0] || !r->k[1] || !r->v[0] || !r->v[1] || !r->acc || !r->part ||
      !r->acc_lse || !r->part_lse)
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY,
                     "dist: out of memory (ring buffers: %zu bytes)",
                     2 * (k_bytes + v_bytes) + 2 * (out_bytes + lse_bytes));
  for (size_t i = 0; i < rows; i++)
    r->acc_lse[i] = -INFINITY;
  int rc = row_type(D, k_dtype, &r->krow);
  if (rc == MPI_SUCCESS)
    rc = row_type(D, v_dtype, &r->vrow);
  return rc == MPI_SUCCESS ? STSA_OK : dist_fail_mpi(d, rc, "MPI_Type_contiguous");
}

stsa_status ring_run(stsa_dist *d, const dist_layout *l, const dist_local *loc,
                     const dist_compute *c, const ring_bufs *r, double *comm_ms,
                     double *compute_ms, int64_t *skipped) {
  const int R = l->R, g = l->g;
  const int64_t B = loc->q.shape[0], n = loc->n, D = loc->q.shape[3];
  const int64_t S = layout_group_len(l, g);
  stsa_status st = STSA_OK;
  /* a failed compute keeps passing chunks on (the peers wait for them) and
   * reports at the end; a failed transfer ends the ring */
  stsa_status compute_st = STSA_OK;
  { /* the own chunk, contiguous, starts the ring */
    stsa_tensor k0 = stsa_tensor_bshd(r->k[0], loc->k.dtype, B, S, n, D);
    stsa_tensor v0 = stsa_tensor_bshd(r->v[0], loc->v.dtype, B, S, n, D);
    if (stsa_tensor_copy(&loc->k, &k0) != STSA_OK ||
        stsa_tensor_copy(&loc->v, &v0) != STSA_OK)
      compute_st =
          dist_fail(d, STSA_ERR_BAD_SHAPE, "dist: copying the key/value chunk failed");
  }
  const int next = (g + 1) % R, prev = (g + R - 1) % R;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  const int polling = level >= MPI_THREAD_SERIALIZED;
  /* [0, 1] this round's receives, [2, 3] the sends still in flight */
  MPI_Request req[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                        MPI_REQUEST_NULL};
  MPI_Request *recvs = req, *sends = req + 2;
  for (int t = 0, cur = 0; st == STSA_OK && t < R; t++, cur ^= 1) {
    const int cg = (g - t + R) % R, ng = (g - t - 1 + 2 * R) % R;
    const int64_t len = layout_group_len(l, cg), nlen = layout_group_len(l, ng);
    int rc = MPI_SUCCESS;
    const double t0 = dist_now_ms();
    if (t + 1 < R) {
      const int sendn = (int)(B * len * n), recvn = (int)(B * nlen * n);
      rc = MPI_Waitall(2, sends, MPI_STATUSES_IGNORE); /* cur ^ 1 was sent from */
      if (rc == MPI_SUCCESS)
        rc = MPI_Irecv(r->k[cur ^ 1], recvn, r->krow, prev, 2 * t, d->rcomm, &recvs[0]);
      if (rc == MPI_SUCCESS)
        rc = MPI_Irecv(r->v[cur ^ 1], recvn, r->vrow, prev, 2 * t + 1, d->rcomm,
                       &recvs[1]);
      if (rc == MPI_SUCCESS)
        rc = MPI_Isend(r->k[cur], sendn, r->krow, next, 2 * t, d->rcomm, &sends[0]);
      if (rc == MPI_SUCCESS)
        rc = MPI_Isend(r->v[cur], sendn, r->vrow, next, 2 * t + 1, d->rcomm, &sends[1]);
    }
    *comm_ms += dist_now_ms() - t0;
    if (rc != MPI_SUCCESS) {
      st = dist_fail_mpi(d, rc, "MPI_Isend/MPI_Irecv (ring)");
      break;
    }
    stsa_tensor kt = stsa_tensor_bshd(r->k[cur], loc->k.dtype, B, len, n, D);
    stsa_tensor vt = stsa_tensor_bshd(r->v[cur], loc->v.dtype, B, len, n, D);
    stsa_tensor pt = stsa_tensor_bshd(r->part, STSA_F32, B, S, n, D);
    int skip = 0;
    const double t1 = dist_now_ms();
    poller pl;
    poller_start(&pl, req, 4, polling);
    if (compute_st == STSA_OK)
      compute_st = c->run(c->self, d, l, loc, &kt, &vt, layout_group_off(l, cg), &pt,
                          r->part_lse, &skip);
    poller_stop(&pl);
    if (compute_st == STSA_OK && !skip)
      merge(r->acc, r->acc_lse, r->part, r->part_lse, B, S, n, D);
    *skipped += skip;
    *compute_ms += dist_now_ms() - t1;
    const double t2 = dist_now_ms();
    rc = MPI_Waitall(2, recvs, MPI_STATUSES_IGNORE);
    *comm_ms += dist_now_ms() - t2;
    if (rc != MPI_SUCCESS)
      st = dist_fail_mpi(d, rc, "MPI_Waitall (ring)");
  }
  const double t3 = dist_now_ms();
  if (MPI_Waitall(2, sends, MPI_STATUSES_IGNORE) != MPI_SUCCESS && st == STSA_OK)
    st = dist_fail(d, STSA_ERR_IO, "MPI: MPI_Waitall (ring sends) failed");
  *comm_ms += dist_now_ms() - t3;
  if (st == STSA_OK)
    st = compute_st;
  if (st == STSA_OK) {
    stsa_tensor acc = stsa_tensor_bshd(r->acc, STSA_F32, B, S, n, D);
    if (stsa_tensor_copy(&acc, &loc->out) != STSA_OK)
      st = dist_fail(d, STSA_ERR_BAD_SHAPE, "dist: storing the ring's output failed");
  }
  return st;
}
