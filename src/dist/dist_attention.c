/*
 * dist_attention.c — distributed dense and block-sparse attention: the
 * local computations the Ulysses groups and the ring run.
 */
#define STSA_EXPERIMENTAL /* stsa_plan_head_stats, stsa_tensor_copy */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_call.h"

/* ---- dense ---------------------------------------------------------------- */
static stsa_status dense_run(void *self, stsa_dist *d, const dist_layout *l,
                             const dist_local *loc, const stsa_tensor *k,
                             const stsa_tensor *v, int64_t kv_off, const stsa_tensor *out,
                             float *lse, int *skipped) {
  (void)l;
  (void)kv_off;
  *skipped = 0;
  const float *scale = self;
  stsa_attn_opts o = {sizeof o, *scale, lse};
  stsa_status st = stsa_attention(d->ctx, &loc->q, k, v, out, &o);
  return st == STSA_OK ? STSA_OK : dist_fail_ctx(d, st, "dist: dense attention");
}

stsa_status stsa_dist_attention(stsa_dist *d, const stsa_tensor *q, const stsa_tensor *k,
                                const stsa_tensor *v, const stsa_tensor *out,
                                const stsa_attn_opts *opts, stsa_dist_report *report) {
  if (!d)
    return STSA_ERR_NULL_ARG;
  dist_call_start(d);
  dist_sig sig;
  dist_sig_init(d, CALL_DENSE, &sig);
  stsa_status st = dist_check_local(d, q, k, v, out, report, &sig);
  float scale = 0;
  if (st == STSA_OK && opts) {
    if (opts->size < sizeof *opts)
      st = dist_fail(d, STSA_ERR_BAD_PARAM, "dist: opts size %zu, expected %zu",
                     opts->size, sizeof *opts);
    else if (opts->lse)
      st = dist_fail(d, STSA_ERR_UNSUPPORTED,
                     "dist: lse output is not supported in distributed calls");
    else
      scale = opts->scale;
  }
  sig.options = dist_hash(1469598103934665603ull, &scale, sizeof scale);
  sig.status = st;
  dist_layout l;
  DIST_TRY(dist_begin(d, &sig, &l));
  st = dist_agree(d, balance_heads(d, NULL, &l));
  dist_compute c = {NULL, dense_run, &scale};
  if (st == STSA_OK)
    st = dist_run(d, &l, q, k, v, out, &c, report);
  layout_free(&l);
  return st;
}

/* ---- block-sparse ---------------------------------------------------------- */
typedef struct sparse_self {
  stsa_plan_desc desc; /* the caller's, for the local heads */
  stsa_sparse_opts opts;
  const stsa_mask **masks; /* [n] */
  /* ring: the local chunk's tokens in q_order (row i of q_perm holds token
   * q_rows[i]); q_perm is NULL when that is the chunk's own order */
  int64_t *q_rows, *kv_rows;
  void *q_perm;
  float *out_perm, *lse_perm;
} sparse_self;

static void sparse_self_free(sparse_self *s) {
  free(s->masks);
  free(s->q_rows);
  free(s->kv_rows);
  free(s->q_perm);
  free(s->out_perm);
  free(s->lse_perm);
}

/* Copies row (b, s) of every head between two [B, S, n, D] tensors. */
static void copy_token(const stsa_tensor *src, int64_t sb, int64_t ss,
                       const stsa_tensor *dst, int64_t db, int64_t ds) {
  stsa_tensor a = *src, z = *dst;
  const size_t ea = stsa_dtype_size(a.dtype), ez = stsa_dtype_size(z.dtype);
  a.data = (char *)a.data + (size_t)(sb * a.stride[0] + ss * a.stride[1]) * ea;
  z.data = (char *)z.data + (size_t)(db * z.stride[0] + ds * z.stride[1]) * ez;
  a.shape[0] = a.shape[1] = z.shape[0] = z.shape[1] = 1;
  stsa_tensor_copy(&a, &z);
}

/* Ring only: the local chunk's query tokens in q_order, and q in that order
 * when it is not the native one. */
static stsa_status prepare_ring(stsa_dist *d, const dist_layout *l, const dist_local *loc,
                                sparse_self *s) {
  const int64_t go = layout_group_off(l, l->g), S = layout_group_len(l, l->g);
  const int64_t B = loc->q.shape[0], n = loc->n, D = loc->q.shape[3];
  int64_t smax = 0;
  for (int g = 0; g < l->R; g++)
    if (layout_group_len(l, g) > smax)
      smax = layout_group_len(l, g);
  s->q_rows = malloc(sizeof *s->q_rows * (size_t)S);
  s->kv_rows = malloc(sizeof *s->kv_rows * (size_t)smax);
  if (!s->q_rows || !s->kv_rows)
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  for (int64_t i = 0; i < S; i++)
    s->q_rows[i] = go + i;
  if (s->desc.q_order == STSA_ORDER_NATIVE || !s->desc.geometry)
    return STSA_OK;
  int64_t *perm = malloc(sizeof *perm * (size_t)l->S);
  if (!perm)
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  stsa_order_permutation(s->desc.geometry, s->desc.q_order, perm);
  int64_t m = 0;
  for (int64_t pos = 0; pos < l->S; pos++)
    if (perm[pos] >= go && perm[pos] < go + S)
      s->q_rows[m++] = perm[pos];
  free(perm);
  const size_t rows = (size_t)(B * S * n);
  s->q_perm = malloc(rows * (size_t)D * stsa_dtype_size(loc->q.dtype));
  s->out_perm = malloc(rows * (size_t)D * sizeof(float));
  s->lse_perm = malloc(rows * sizeof(float));
  if (!s->q_perm || !s->out_perm || !s->lse_perm)
    return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  stsa_tensor qp = stsa_tensor_bshd(s->q_perm, loc->q.dtype, B, S, n, D);
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < S; i++)
      copy_token(&loc->q, b, s->q_rows[i] - go, &qp, b, i);
  return STSA_OK;
}

static stsa_status sparse_run(void *self, stsa_dist *d, const dist_layout *l,
                              const dist_local *loc, const stsa_tensor *k,
                              const stsa_tensor *v, int64_t kv_off,
                              const stsa_tensor *out, float *lse, int *skipped) {
  sparse_self *s = self;
  *skipped = 0;
  stsa_plan_desc desc = s->desc;
  desc.heads = loc->n;
  desc.masks = s->masks;
  stsa_sparse_opts opts = s->opts;
  const int ring = l->R > 1;
  if (ring) {
    if (!s->q_rows)
      DIST_TRY(prepare_ring(d, l, loc, s));
    desc.s_q = layout_group_len(l, l->g);
    desc.q_rows = s->q_rows;
    desc.s_kv = k->shape[1];
    for (int64_t j = 0; j < desc.s_kv; j++)
      s->kv_rows[j] = kv_off + j;
    desc.kv_rows = s->kv_rows;
    /* a row may keep nothing in one chunk and much in another */
    desc.flags |= STSA_PLAN_ALLOW_EMPTY_ROWS;
  }
  stsa_plan *plan = NULL;
  stsa_status st = stsa_plan_build(d->ctx, &desc, &plan);
  if (st != STSA_OK)
    return dist_fail_ctx(d, st, "dist: local plan");
  stsa_plan_stats ps = STSA_INIT(stsa_plan_stats);
  stsa_plan_get_stats(plan, &ps);
  if (ps.pairs_kept == 0) {
    *skipped = 1;
    stsa_plan_free(plan);
    return STSA_OK;
  }
  const stsa_tensor *q = &loc->q, *o = out;
  stsa_tensor qp, op;
  if (s->q_perm) {
    const int64_t B = q->shape[0], S = desc.s_q, n = loc->n, D = q->shape[3];
    qp = stsa_tensor_bshd(s->q_perm, q->dtype, B, S, n, D);
    op = stsa_tensor_bshd(s->out_perm, STSA_F32, B, S, n, D);
    q = &qp;
    o = &op;
  }
  opts.lse = s->q_perm ? s->lse_perm : lse;
  st = stsa_sparse_attention(d->ctx, plan, q, k, v, o, &opts);
  stsa_plan_free(plan);
  if (st != STSA_OK)
    return dist_fail_ctx(d, st, "dist: sparse attention");
  if (s->q_perm) { /* rows back to the chunk's order */
    const int64_t B = q->shape[0], S = desc.s_q, n = loc->n;
    const int64_t go = layout_group_off(l, l->g);
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < S; i++) {
        const int64_t r = s->q_rows[i] - go;
        copy_token(&op, b, i, out, b, r);
        for (int64_t h = 0; h < n; h++)
          lse[(b * n + h) * S + r] = s->lse_perm[(b * n + h) * S + i];
      }
  }
  return STSA_OK;
}

/* A fingerprint of the plan description and options, masks included (their
 * keep flags at a few fixed pairs), so ranks given different masks fail. */
static uint64_t sparse_fingerprint(const stsa_plan_desc *desc,
                                   const stsa_sparse_opts *o) {
  uint64_t h = 1469598103934665603ull;
  const int64_t f[] = {desc->s_q,      desc->s_kv,   desc->heads,   desc->q_order,
                       desc->kv_order, desc->q_tile, desc->kv_tile, desc->flags,
                       o->mode,        o->flags};
  h = dist_hash(h, f, sizeof f);
  h = dist_hash(h, &o->scale, sizeof o->scale);
  if (desc->geometry)
    h = dist_hash_geometry(h, desc->geometry);
  for (int64_t m = 0; desc->masks && m < desc->heads; m++)
    for (int64_t t = 0; desc->masks[m] && t < 32; t++) {
      const int64_t i = (t * 2654435761ll + m) % desc->s_q,
                    j = (t * 40503ll + 17) % desc->s_kv;
      unsigned char keep = (unsigned char)stsa_mask_keep(desc->masks[m], i, j);
      h = dist_hash(h, &keep, 1);
    }
  return h;
}

static stsa_status check_sparse(stsa_dist *d, const stsa_plan_desc *desc,
                                const stsa_sparse_opts *opts, int64_t H) {
  if (!desc || !desc->masks)
    return dist_fail(d, STSA_ERR_NULL_ARG, "dist: plan desc or its masks is NULL");
  if (desc->size < sizeof *desc)
    return dist_fail(d, STSA_ERR_BAD_PARAM, "dist: plan desc size %zu, expected %zu",
                     desc->size, sizeof *desc);
  if (desc->q_rows || desc->kv_rows)
    return dist_fail(d, STSA_ERR_UNSUPPORTED,
                     "dist: q_rows / kv_rows plans are not distributed (each rank builds "
                     "its own)");
  if (desc->heads != H)
    return dist_fail(d, STSA_ERR_BAD_SHAPE, "dist: plan desc has %lld heads, q has %lld",
                     (long long)desc->heads, (long long)H);
  if (opts && opts->size < sizeof *opts)
    return dist_fail(d, STSA_ERR_BAD_PARAM, "dist: sparse opts size %zu, expected %zu",
                     opts->size, sizeof *opts);
  if (opts && (opts->lse || opts->pairs_changed || opts->flags))
    return dist_fail(d, STSA_ERR_UNSUPPORTED,
                     "dist: lse, pairs_changed and PREPERMUTED are not supported in "
                     "distributed calls (shards are in native order)");
  return STSA_OK;
}

/* Every rank builds the whole plan (cached by the context): it validates
 * the description against the whole sequence and gives each head's cost. */
static stsa_status head_costs(stsa_dist *d, const stsa_plan_desc *desc, int64_t S,
                              double *cost) {
  if (desc->s_q != S || desc->s_kv != S)
    return dist_fail(
        d, STSA_ERR_BAD_SHAPE,
        "dist: plan desc is %lld x %lld but the shards add up to %lld tokens",
        (long long)desc->s_q, (long long)desc->s_kv, (long long)S);
  stsa_plan *plan = NULL;
  stsa_status st = stsa_plan_build(d->ctx, desc, &plan);
  if (st != STSA_OK)
    return dist_fail_ctx(d, st, "dist: plan");
  for (int64_t h = 0; h < desc->heads; h++) {
    int64_t active = 0, partial = 0;
    stsa_plan_head_stats(plan, h, &active, &partial, NULL);
    cost[h] = (double)active + 0.25 * (double)partial; /* partial tiles cost more */
  }
  stsa_plan_free(plan);
  return STSA_OK;
}

stsa_status stsa_dist_sparse_attention(stsa_dist *d, const stsa_plan_desc *desc,
                                       const stsa_tensor *q, const stsa_tensor *k,
                                       const stsa_tensor *v, const stsa_tensor *out,
                                       const stsa_sparse_opts *opts,
                                       stsa_dist_report *report) {
  if (!d)
    return STSA_ERR_NULL_ARG;
  dist_call_start(d);
  dist_sig sig;
  dist_sig_init(d, CALL_SPARSE, &sig);
  stsa_status st = dist_check_local(d, q, k, v, out, report, &sig);
  if (st == STSA_OK)
    st = check_sparse(d, desc, opts, sig.H);
  stsa_sparse_opts o = {sizeof o, 0, NULL, STSA_SPARSE_EXACT, NULL, 0};
  if (st == STSA_OK && opts)
    o = *opts;
  if (st == STSA_OK) {
    sig.mode = o.mode;
    sig.options = sparse_fingerprint(desc, &o);
  }
  sig.status = st;
  dist_layout l;
  DIST_TRY(dist_begin(d, &sig, &l));
  double *cost = malloc(sizeof *cost * (size_t)l.H);
  sparse_self s = {0};
  st = cost ? head_costs(d, desc, l.S, cost)
            : dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  if (st == STSA_OK)
    st = balance_heads(d, cost, &l);
  if (st == STSA_OK) {
    const int64_t n = layout_heads_of(&l, l.u);
    s.desc = *desc;
    s.opts = o;
    s.masks = malloc(sizeof *s.masks * (size_t)(n ? n : 1));
    if (!s.masks)
      st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
    for (int64_t i = 0; s.masks && i < n; i++)
      s.masks[i] = desc->masks[l.group_heads[l.head_ptr[l.u] + i]];
  }
  st = dist_agree(d, st);
  dist_compute c = {NULL, sparse_run, &s};
  if (st == STSA_OK)
    st = dist_run(d, &l, q, k, v, out, &c, report);
  sparse_self_free(&s);
  free(cost);
  layout_free(&l);
  return st;
}
