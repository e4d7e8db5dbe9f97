/*
 * dist_svg_ring.c — SVG on ring and hybrid layouts.
 *
 * Profiling needs the sampled query rows against the keys of the whole
 * sequence, which no rank of a ring holds. The ring group shares its local
 * heads, so: the sampled rows' queries are allgathered (rows x heads x D,
 * kilobytes), every member computes them against its own key chunk under
 * the dense, spatial and temporal masks (with the log-sum-exp), and the
 * partial results are allgathered and merged in ring order, identically on
 * every member. The kinds then follow the session's rule (the smaller
 * error against dense wins). The ring's compute runs each local head with
 * its kind's mask and token orders: temporal heads walk their queries
 * position-major (a copy of the chunk's q, permuted once per call) and
 * their keys sink-first (fused into the kernel's gathers).
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_svg_kind_mask, stsa_svg_sampled_rows \
                           */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_svg.h"

enum { KIND_MASKS = 3 }; /* spatial, temporal, dense (the policy's dense calls) */

struct ring_svg {
  stsa_mask *mask[KIND_MASKS];
  stsa_order q_order[KIND_MASKS], kv_order[KIND_MASKS];
  int64_t *q_rows[KIND_MASKS]; /* [S] the chunk's tokens in each q_order */
  int64_t *kv_rows;            /* [largest chunk] */
  void *q_perm;                /* the chunk's q, position-major (temporal heads) */
  float *out_perm, *lse_perm;
};

void ring_svg_free(dist_svg_call *c) {
  struct ring_svg *r = c->ring;
  if (!r)
    return;
  for (int i = 0; i < KIND_MASKS; i++) {
    stsa_mask_free(r->mask[i]);
    free(r->q_rows[i]);
  }
  free(r->kv_rows);
  free(r->q_perm);
  free(r->out_perm);
  free(r->lse_perm);
  free(r);
  c->ring = NULL;
}

static stsa_status oom(stsa_dist *d) {
  return dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory (svg on a ring)");
}

/* Row (b, s, h) of a tensor. */
static void *row_at(const stsa_tensor *t, int64_t b, int64_t s, int64_t h) {
  const int64_t off = b * t->stride[0] + s * t->stride[1] + h * t->stride[2];
  return (char *)t->data + (size_t)off * stsa_dtype_size(t->dtype);
}

/* One head of one batch entry: [1, S, 1, D]. */
static stsa_tensor head_of(const stsa_tensor *t, int64_t b, int64_t h) {
  stsa_tensor v = *t;
  v.data = row_at(t, b, 0, h);
  v.shape[0] = v.shape[2] = 1;
  return v;
}

/* Masks, orders and the chunk's query tokens in each order. */
static stsa_status ring_init(dist_svg_call *c, const dist_layout *l,
                             const dist_local *loc) {
  stsa_dist *d = c->s->d;
  struct ring_svg *r = calloc(1, sizeof *r);
  if (!r)
    return oom(d);
  c->ring = r;
  stsa_svg *full = NULL;
  DIST_TRY(dist_svg_session(c->s, c->s->cfg.heads, &full));
  static const stsa_head_kind kinds[KIND_MASKS] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                                   STSA_HEAD_MIXED};
  for (int i = 0; i < KIND_MASKS; i++) {
    const stsa_status st =
        stsa_svg_kind_mask(full, kinds[i], &r->mask[i], &r->q_order[i], &r->kv_order[i]);
    if (st != STSA_OK) /* the session's message is on the context */
      return dist_fail_ctx(d, st, "dist: svg masks");
  }
  const int64_t go = layout_group_off(l, l->g), S = layout_group_len(l, l->g);
  int64_t smax = 0;
  for (int g = 0; g < l->R; g++)
    smax = layout_group_len(l, g) > smax ? layout_group_len(l, g) : smax;
  r->kv_rows = malloc(sizeof *r->kv_rows * (size_t)smax);
  int64_t *perm = malloc(sizeof *perm * (size_t)l->S);
  for (int i = 0; i < KIND_MASKS; i++)
    r->q_rows[i] = malloc(sizeof *r->q_rows[i] * (size_t)S);
  if (!r->kv_rows || !perm || !r->q_rows[0] || !r->q_rows[1] || !r->q_rows[2]) {
    free(perm);
    return oom(d);
  }
  for (int i = 0; i < KIND_MASKS; i++) {
    stsa_order_permutation(&c->s->cfg.geometry, r->q_order[i], perm);
    int64_t m = 0;
    for (int64_t pos = 0; pos < l->S; pos++)
      if (perm[pos] >= go && perm[pos] < go + S)
        r->q_rows[i][m++] = perm[pos];
  }
  free(perm);
  /* q in the temporal heads' order, once per call */
  const int64_t B = loc->q.shape[0], n = loc->n, D = loc->q.shape[3];
  const size_t rows = (size_t)(B * S * n);
  r->q_perm = malloc(rows * (size_t)D * stsa_dtype_size(loc->q.dtype));
  r->out_perm = malloc(rows * (size_t)D * sizeof(float));
  r->lse_perm = malloc(rows * sizeof(float));
  if (!r->q_perm || !r->out_perm || !r->lse_perm)
    return oom(d);
  stsa_tensor qp = stsa_tensor_bshd(r->q_perm, loc->q.dtype, B, S, n, D);
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < S; i++) {
      stsa_tensor src = loc->q, dst = qp;
      src.data = row_at(&loc->q, b, r->q_rows[1][i] - go, 0);
      dst.data = row_at(&qp, b, i, 0);
      src.shape[0] = src.shape[1] = dst.shape[0] = dst.shape[1] = 1;
      stsa_tensor_copy(&src, &dst);
    }
  return STSA_OK;
}

/* A plan of `heads` heads under one mask for query tokens q_rows and the
 * key chunk [kv_off, kv_off + kv_len). */
static stsa_status chunk_plan(dist_svg_call *c, int mask, const int64_t *q_rows,
                              int64_t s_q, int q_tile, int64_t kv_off, int64_t kv_len,
                              int64_t heads, stsa_order q_order, stsa_order kv_order,
                              stsa_plan **plan, int64_t *kept) {
  struct ring_svg *r = c->ring;
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)heads);
  if (!masks)
    return oom(c->s->d);
  for (int64_t h = 0; h < heads; h++)
    masks[h] = r->mask[mask];
  for (int64_t j = 0; j < kv_len; j++)
    r->kv_rows[j] = kv_off + j;
  stsa_plan_desc desc = STSA_INIT(stsa_plan_desc);
  desc.s_q = s_q;
  desc.s_kv = kv_len;
  desc.heads = heads;
  desc.masks = masks;
  desc.geometry = &c->s->cfg.geometry;
  desc.q_order = q_order;
  desc.kv_order = kv_order;
  desc.q_tile = q_tile;
  desc.kv_tile = c->s->windows.kv_tile;
  desc.flags = STSA_PLAN_ALLOW_EMPTY_ROWS; /* a row may keep nothing in this chunk */
  desc.q_rows = q_rows;
  desc.kv_rows = r->kv_rows;
  stsa_status st = stsa_plan_build(c->s->d->ctx, &desc, plan);
  free(masks);
  if (st != STSA_OK)
    return dist_fail_ctx(c->s->d, st, "dist: svg chunk plan");
  stsa_plan_stats ps = STSA_INIT(stsa_plan_stats);
  stsa_plan_get_stats(*plan, &ps);
  *kept = ps.pairs_kept;
  return STSA_OK;
}

/* ---- profiling on the ring ------------------------------------------------ */
/* This member's partial results of the sampled rows of every batch entry
 * against its own key chunk: out [B][3][R][n][D] then lse [B][3][n][R]. */
static stsa_status profile_partials(dist_svg_call *c, const dist_layout *l,
                                    const dist_local *loc, const int64_t *rows,
                                    const float *qs, float *part) {
  const int64_t B = c->B, R = c->s->cfg.sample_rows, n = loc->n, D = loc->q.shape[3];
  const int64_t go = layout_group_off(l, l->g), S = layout_group_len(l, l->g);
  const size_t per_b = (size_t)(KIND_MASKS * R * n * (D + 1));
  stsa_status st = STSA_OK;
  for (int64_t b = 0; st == STSA_OK && b < B; b++) {
    float *out = part + (size_t)b * per_b, *lse = out + KIND_MASKS * R * n * D;
    stsa_tensor q =
        stsa_tensor_bshd((void *)(qs + (size_t)(b * R * n * D)), STSA_F32, 1, R, n, D);
    stsa_tensor kb = loc->k, vb = loc->v;
    kb.data = row_at(&loc->k, b, 0, 0);
    vb.data = row_at(&loc->v, b, 0, 0);
    kb.shape[0] = vb.shape[0] = 1;
    static const int masks[KIND_MASKS] = {2, 0, 1}; /* dense, spatial, temporal */
    for (int i = 0; st == STSA_OK && i < KIND_MASKS; i++) {
      stsa_plan *plan = NULL;
      int64_t kept = 0;
      /* as the session profiles: one q tile holds every sampled row, keys in
       * native order */
      st = chunk_plan(c, masks[i], rows + b * R, R, (int)R, go, S, n, STSA_ORDER_NATIVE,
                      STSA_ORDER_NATIVE, &plan, &kept);
      float *o = out + i * R * n * D, *ls = lse + i * n * R;
      if (st == STSA_OK && kept == 0) {
        for (int64_t j = 0; j < n * R; j++)
          ls[j] = -INFINITY;
        memset(o, 0, sizeof *o * (size_t)(R * n * D));
      } else if (st == STSA_OK) {
        stsa_tensor ot = stsa_tensor_bshd(o, STSA_F32, 1, R, n, D);
        stsa_sparse_opts so = STSA_INIT(stsa_sparse_opts);
        so.lse = ls;
        st = stsa_sparse_attention(c->s->d->ctx, plan, &q, &kb, &vb, &ot, &so);
        if (st != STSA_OK)
          st = dist_fail_ctx(c->s->d, st, "dist: svg profiling");
      }
      stsa_plan_free(plan);
    }
  }
  return st;
}

/* Merges the members' partials (in ring order: the same on every member)
 * and decides the kinds of the local heads. */
static void choose_kinds(dist_svg_call *c, const float *all, int members, int64_t n,
                         int64_t D) {
  const int64_t B = c->B, R = c->s->cfg.sample_rows;
  const size_t per_b = (size_t)(KIND_MASKS * R * n * (D + 1)), per_m = per_b * (size_t)B;
  double *o = malloc(sizeof *o * (size_t)(KIND_MASKS * R * n * D));
  for (int64_t b = 0; o && b < B; b++) {
    for (int i = 0; i < KIND_MASKS; i++)
      for (int64_t h = 0; h < n; h++)
        for (int64_t r = 0; r < R; r++) {
          /* log-sum-exp merge of row (r, h) over the members */
          double m = -INFINITY;
          for (int g = 0; g < members; g++) {
            const float *lse = all + g * per_m + b * per_b + KIND_MASKS * R * n * D;
            m = fmax(m, lse[i * n * R + h * R + r]);
          }
          double wsum = 0;
          double *dst = o + ((i * R + r) * n + h) * D;
          for (int64_t x = 0; x < D; x++)
            dst[x] = 0;
          for (int g = 0; m > -INFINITY && g < members; g++) {
            const float *base = all + g * per_m + b * per_b;
            const float *lse = base + KIND_MASKS * R * n * D;
            const double w = exp(lse[i * n * R + h * R + r] - m);
            const float *src = base + ((i * R + r) * n + h) * D;
            wsum += w;
            for (int64_t x = 0; x < D; x++)
              dst[x] += w * src[x];
          }
          for (int64_t x = 0; wsum > 0 && x < D; x++)
            dst[x] /= wsum;
        }
    for (int64_t h = 0; h < n; h++) {
      double es = 0, et = 0;
      for (int64_t r = 0; r < R; r++)
        for (int64_t x = 0; x < D; x++) {
          const double dn = o[((0 * R + r) * n + h) * D + x];
          const double ds = o[((1 * R + r) * n + h) * D + x] - dn;
          const double dt = o[((2 * R + r) * n + h) * D + x] - dn;
          es += ds * ds;
          et += dt * dt;
        }
      const float ms = (float)(es / (double)(R * D)), mt = (float)(et / (double)(R * D));
      c->local_mse[b * n + h] = ms;
      c->local_mse[B * n + b * n + h] = mt;
      c->local_kinds[b * n + h] = ms <= mt ? STSA_HEAD_SPATIAL : STSA_HEAD_TEMPORAL;
    }
  }
  free(o);
}

/* Allgathers `elems` floats of every ring member into all[members][elems]
 * (each buffer has room for one more float). A member's status travels in
 * that extra slot, so every member reaches the collective, failed or not,
 * and every member learns whether any failed. Returns the status to go on
 * with: st, or a failure of this exchange or of another member. */
static stsa_status gather_members(stsa_dist *d, stsa_status st, float *mine, size_t elems,
                                  float *all, int members, const char *what) {
  if (mine)
    mine[elems] = st == STSA_OK ? 0.0f : 1.0f;
  const int count = (int)(elems + 1);
  int rc = mine && all
               ? MPI_Allgather(mine, count, MPI_FLOAT, all, count, MPI_FLOAT, d->rcomm)
               : MPI_SUCCESS;
  if (rc != MPI_SUCCESS && st == STSA_OK)
    st = dist_fail_mpi(d, rc, what);
  for (int g = 0; st == STSA_OK && g < members; g++)
    if (all[(size_t)g * (elems + 1) + elems] != 0.0f)
      st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: svg profiling failed on the ring");
  /* drop the status slots: member g's block starts at g * (elems + 1) */
  for (int g = 1; st == STSA_OK && g < members; g++)
    memmove(all + (size_t)g * elems, all + (size_t)g * (elems + 1),
            sizeof(float) * elems);
  return st;
}

stsa_status ring_svg_prepare(void *self, stsa_dist *d, const dist_layout *l,
                             const dist_local *loc) {
  dist_svg_call *c = self;
  const double t0 = dist_now_ms();
  const int64_t B = c->B, R = c->s->cfg.sample_rows, n = loc->n, D = loc->q.shape[3];
  stsa_status st = ring_init(c, l, loc);
  if (c->dense) {
    for (int64_t i = 0; i < B * n; i++) {
      c->local_kinds[i] = STSA_HEAD_SPATIAL;
      c->local_mse[i] = c->local_mse[B * n + i] = 0.0f;
    }
    return st;
  }
  /* every member reaches both allgathers, failed or not: a status travels
   * with the data */
  const int members = l->R;
  const int64_t go = layout_group_off(l, l->g), S = layout_group_len(l, l->g);
  const size_t q_elems = (size_t)(B * R * n * D),
               part_elems = (size_t)B * KIND_MASKS * R * n * (D + 1);
  int64_t *rows = malloc(sizeof *rows * (size_t)(B * R));
  float *q_mine = calloc(q_elems + 1, sizeof *q_mine),
        *q_all = malloc(sizeof(float) * (q_elems + 1) * members);
  float *part = calloc(part_elems + 1, sizeof *part),
        *all = malloc(sizeof(float) * (part_elems + 1) * members);
  if (!rows || !q_mine || !q_all || !part || !all)
    st = st == STSA_OK ? oom(d) : st;
  stsa_svg *full = NULL;
  if (st == STSA_OK)
    st = dist_svg_session(c->s, c->s->cfg.heads, &full);
  for (int64_t b = 0; st == STSA_OK && b < B; b++)
    stsa_svg_sampled_rows(full, c->layer, c->step, b, rows + b * R);
  /* the sampled rows this member holds (zeros elsewhere: the sum is exact) */
  for (int64_t b = 0; st == STSA_OK && b < B; b++)
    for (int64_t r = 0; r < R; r++) {
      const int64_t t = rows[b * R + r];
      if (t < go || t >= go + S)
        continue;
      for (int64_t h = 0; h < n; h++) {
        stsa_tensor src = head_of(&loc->q, b, h), dst;
        src.data = row_at(&loc->q, b, t - go, h);
        src.shape[1] = 1;
        dst = stsa_tensor_bshd(q_mine + ((b * R + r) * n + h) * D, STSA_F32, 1, 1, 1, D);
        stsa_tensor_copy(&src, &dst);
      }
    }
  st = gather_members(d, st, q_mine, q_elems, q_all, members,
                      "MPI_Allgather (sampled queries)");
  if (st == STSA_OK) { /* exactly one member holds each row: sum them */
    for (size_t i = 0; i < q_elems; i++) {
      float sum = 0;
      for (int g = 0; g < members; g++)
        sum += q_all[(size_t)g * q_elems + i];
      q_mine[i] = sum;
    }
    st = profile_partials(c, l, loc, rows, q_mine, part);
  }
  st = gather_members(d, st, part, part_elems, all, members,
                      "MPI_Allgather (profiling partials)");
  if (st == STSA_OK)
    choose_kinds(c, all, members, n, D);
  free(rows);
  free(q_mine);
  free(q_all);
  free(part);
  free(all);
  c->profile_ms += dist_now_ms() - t0;
  return st;
}

/* ---- the ring's compute ----------------------------------------------------- */
stsa_status ring_svg_run(void *self, stsa_dist *d, const dist_layout *l,
                         const dist_local *loc, const stsa_tensor *k,
                         const stsa_tensor *v, int64_t kv_off, const stsa_tensor *out,
                         float *lse, int *skipped) {
  dist_svg_call *c = self;
  struct ring_svg *r = c->ring;
  const double t0 = dist_now_ms();
  const int64_t B = c->B, n = loc->n, D = loc->q.shape[3];
  const int64_t go = layout_group_off(l, l->g), S = layout_group_len(l, l->g);
  const int64_t len = k->shape[1];
  stsa_plan *plan[2] = {NULL, NULL};
  int64_t kept[2] = {0, 0};
  int used[2] = {0, 0};
  for (int64_t i = 0; i < B * n; i++)
    used[c->dense ? 0 : c->local_kinds[i] == STSA_HEAD_TEMPORAL] = 1;
  stsa_status st = STSA_OK;
  for (int kk = 0; st == STSA_OK && kk < 2; kk++) {
    const int mask = c->dense ? 2 : kk;
    if (used[kk])
      st = chunk_plan(c, mask, r->q_rows[mask], S, c->s->windows.q_tile, kv_off, len, 1,
                      r->q_order[mask], r->kv_order[mask], &plan[kk], &kept[kk]);
  }
  int computed = 0;
  for (int64_t b = 0; st == STSA_OK && b < B; b++)
    for (int64_t h = 0; st == STSA_OK && h < n; h++) {
      const int kk = c->dense ? 0 : c->local_kinds[b * n + h] == STSA_HEAD_TEMPORAL;
      float *head_lse = lse + (b * n + h) * S;
      if (kept[kk] == 0) {
        for (int64_t s = 0; s < S; s++)
          head_lse[s] = -INFINITY;
        continue;
      }
      const int permuted = kk == 1;
      stsa_tensor qh, oh;
      if (permuted) {
        stsa_tensor qp = stsa_tensor_bshd(r->q_perm, loc->q.dtype, B, S, n, D);
        stsa_tensor op = stsa_tensor_bshd(r->out_perm, STSA_F32, B, S, n, D);
        qh = head_of(&qp, b, h);
        oh = head_of(&op, b, h);
      } else {
        qh = head_of(&loc->q, b, h);
        oh = head_of(out, b, h);
      }
      stsa_tensor kh = head_of(k, b, h), vh = head_of(v, b, h);
      stsa_sparse_opts so = STSA_INIT(stsa_sparse_opts);
      so.lse = permuted ? r->lse_perm + (b * n + h) * S : head_lse;
      st = stsa_sparse_attention(d->ctx, plan[kk], &qh, &kh, &vh, &oh, &so);
      if (st != STSA_OK) {
        st = dist_fail_ctx(d, st, "dist: svg sparse attention");
        break;
      }
      computed = 1;
      if (permuted) /* rows back to the chunk's native order */
        for (int64_t j = 0; j < S; j++) {
          const int64_t s = r->q_rows[1][j] - go;
          memcpy(row_at(out, b, s, h), row_at(&oh, 0, j, 0), sizeof(float) * (size_t)D);
          head_lse[s] = so.lse[j];
        }
    }
  stsa_plan_free(plan[0]);
  stsa_plan_free(plan[1]);
  *skipped = !computed;
  c->attention_ms += dist_now_ms() - t0;
  return st;
}
