/*
 * dist_call.c — one distributed call end to end (dist_run), and the local
 * checks every entry point shares.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy */
#include <stdlib.h>
#include <string.h>

#include "dist/dist_call.h"

stsa_status dist_check_local(stsa_dist *d, const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const stsa_tensor *out,
                             const stsa_dist_report *report, dist_sig *sig) {
  if (!q || !k || !v || !out)
    return dist_fail(d, STSA_ERR_NULL_ARG, "dist: q, k, v or out is NULL");
  sig->B = q->shape[0];
  sig->S_local = q->shape[1];
  sig->H = q->shape[2];
  sig->D = q->shape[3];
  sig->dtype[0] = q->dtype;
  sig->dtype[1] = k->dtype;
  sig->dtype[2] = v->dtype;
  sig->dtype[3] = out->dtype;
  const stsa_tensor *t[3] = {k, v, out};
  static const char *const names[3] = {"k", "v", "out"};
  for (int i = 0; i < 3; i++)
    for (int dim = 0; dim < 4; dim++)
      if (t[i]->shape[dim] != q->shape[dim])
        return dist_fail(
            d, STSA_ERR_BAD_SHAPE,
            "dist: %s is [%lld, %lld, %lld, %lld] but q is [%lld, %lld, %lld, "
            "%lld]: every rank passes q, k, v and out of its own shard, of one "
            "shape",
            names[i], (long long)t[i]->shape[0], (long long)t[i]->shape[1],
            (long long)t[i]->shape[2], (long long)t[i]->shape[3], (long long)q->shape[0],
            (long long)q->shape[1], (long long)q->shape[2], (long long)q->shape[3]);
  stsa_status st = stsa_attention_check(d->ctx, q, k, v, out, NULL);
  if (st != STSA_OK)
    return dist_fail_ctx(d, st, "dist: this rank's shard");
  if (report && report->size < sizeof *report)
    return dist_fail(d, STSA_ERR_BAD_PARAM,
                     "dist: report size %zu, expected sizeof(stsa_dist_report) = %zu",
                     report->size, sizeof *report);
  return STSA_OK;
}

void dist_sig_init(const stsa_dist *d, int kind, dist_sig *sig) {
  memset(sig, 0, sizeof *sig);
  sig->kind = kind;
  sig->scheme = d->cfg.scheme;
  sig->u_degree = d->cfg.ulysses_degree;
  sig->flags = d->cfg.flags;
}

static void fill_report(stsa_dist *d, const dist_layout *l, double total, double comm,
                        double compute, int64_t skipped, stsa_dist_report *r) {
  double sum = 0, max = 0;
  /* always collective, whether or not this rank wants a report */
  MPI_Allreduce(&compute, &sum, 1, MPI_DOUBLE, MPI_SUM, d->comm);
  MPI_Allreduce(&compute, &max, 1, MPI_DOUBLE, MPI_MAX, d->comm);
  if (!r)
    return;
  int32_t *head_rank = r->head_rank;
  memset(r, 0, sizeof *r);
  r->size = sizeof *r;
  r->head_rank = head_rank;
  r->ranks = l->P;
  r->ulysses_degree = l->U;
  r->ring_degree = l->R;
  r->local_heads = layout_heads_of(l, l->u);
  r->total_ms = total;
  r->comm_ms = comm;
  r->compute_ms = compute;
  r->compute_max_ms = max;
  r->compute_mean_ms = sum / l->P;
  r->imbalance = r->compute_mean_ms > 0 ? max / r->compute_mean_ms - 1 : 0;
  r->pairs_skipped = skipped;
  for (int64_t h = 0; head_rank && h < l->H; h++)
    head_rank[h] = (int32_t)l->head_owner[h];
}

stsa_status dist_run(stsa_dist *d, dist_layout *l, const stsa_tensor *q,
                     const stsa_tensor *k, const stsa_tensor *v, const stsa_tensor *out,
                     const dist_compute *c, stsa_dist_report *report) {
  const double t_start = dist_now_ms();
  const int64_t B = q->shape[0], D = q->shape[3];
  const int64_t n = layout_heads_of(l, l->u), Sg = layout_group_len(l, l->g);
  const size_t elems = (size_t)(B * Sg * n * D) + 1;
  double comm = 0, compute = 0;
  int64_t skipped = 0;
  void *qb = NULL, *kb = NULL, *vb = NULL;
  void *ob = dist_buffer(d, BUF_OUT, elems * stsa_dtype_size(out->dtype));
  stsa_status st = ob ? STSA_OK : STSA_ERR_OUT_OF_MEMORY;
  if (st == STSA_OK && l->U > 1) {
    qb = dist_buffer(d, BUF_Q, elems * stsa_dtype_size(q->dtype));
    kb = qb ? dist_buffer(d, BUF_K, elems * stsa_dtype_size(k->dtype)) : NULL;
    vb = kb ? dist_buffer(d, BUF_V, elems * stsa_dtype_size(v->dtype)) : NULL;
    /* the exchanges' staging, reserved here so that no rank can fail to get
     * it in the middle of the all-to-alls */
    size_t esize = stsa_dtype_size(q->dtype);
    const stsa_dtype others[3] = {k->dtype, v->dtype, out->dtype};
    for (int i = 0; i < 3; i++)
      esize = stsa_dtype_size(others[i]) > esize ? stsa_dtype_size(others[i]) : esize;
    const size_t stage = (size_t)(q->shape[1] * q->shape[2] * D + 1) * esize;
    st = vb && dist_buffer(d, BUF_STAGE, stage) ? STSA_OK : STSA_ERR_OUT_OF_MEMORY;
  }
  /* the ring's buffers too: a member without them fails here, named in the
   * agreement, rather than inside the ring its peers wait in */
  ring_bufs rb;
  ring_bufs_clear(&rb);
  if (st == STSA_OK && l->R > 1 && n > 0)
    st = ring_bufs_alloc(d, l, B, n, D, k->dtype, v->dtype, &rb);
  st = dist_agree(d, st);
  dist_local loc = {*q, *k, *v, {0}, l->group_heads + l->head_ptr[l->u], n};
  if (st == STSA_OK && l->U > 1) {
    st = exchange_forward(d, l, q, qb, &comm);
    if (st == STSA_OK)
      st = exchange_forward(d, l, k, kb, &comm);
    if (st == STSA_OK)
      st = exchange_forward(d, l, v, vb, &comm);
    loc.q = stsa_tensor_bshd(qb, q->dtype, B, Sg, n, D);
    loc.k = stsa_tensor_bshd(kb, k->dtype, B, Sg, n, D);
    loc.v = stsa_tensor_bshd(vb, v->dtype, B, Sg, n, D);
  }
  loc.out = stsa_tensor_bshd(ob, out->dtype, B, Sg, n, D);
  if (st == STSA_OK && n > 0 && c->prepare)
    st = c->prepare(c->self, d, l, &loc);
  st = dist_agree(d, st);
  if (st == STSA_OK && n > 0) {
    if (l->R == 1) {
      const double t0 = dist_now_ms();
      int skip = 0;
      st = c->run(c->self, d, l, &loc, &loc.k, &loc.v, 0, &loc.out, NULL, &skip);
      compute += dist_now_ms() - t0;
    } else {
      st = ring_run(d, l, &loc, c, &rb, &comm, &compute, &skipped);
    }
  }
  ring_bufs_free(&rb);
  /* nothing is written until every rank has computed its part */
  st = dist_agree(d, st);
  if (st == STSA_OK) {
    if (l->U > 1)
      st = exchange_backward(d, l, ob, out, &comm);
    else if (stsa_tensor_copy(&loc.out, out) != STSA_OK)
      st = dist_fail(d, STSA_ERR_BAD_SHAPE, "dist: storing the output failed");
    st = dist_agree(d, st); /* a transfer that failed on one rank only */
  }
  if (st == STSA_OK)
    fill_report(d, l, dist_now_ms() - t_start, comm, compute, skipped, report);
  return st;
}
