/*
 * dist_svg.c — the SVG session over ranks.
 *
 * Under Ulysses a head is whole on its rank after the exchange, so each
 * rank runs an ordinary session over its own heads: profiling, the kind
 * choice and the sparse call are those of one process, head by head (the
 * sampled rows depend on seed, layer, step and batch entry only), and the
 * output is bitwise the single-process one. Sessions are kept per local
 * head count (balancing may change it between layers); their masks and
 * plans are the same for every head count and come from the context's
 * plan cache. Methods svg2 and auto keep each head on one rank for good
 * (place_heads), so a rank's one session sees the same heads every call
 * and its SVG2 centroids stay valid; every head's bound, density, budget
 * action, top-p and auto's candidates are gathered into the report
 * (gather_heads). Under ring and hybrid layouts profiling needs keys of the
 * whole sequence: dist_svg_ring.c (method svg, no budget).
 */
#define STSA_EXPERIMENTAL /* stsa_svg_kind_mask */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_svg.h"

void stsa_dist_svg_free(stsa_dist_svg *s) {
  if (!s)
    return;
  for (int64_t n = 0; s->by_heads && n <= s->cfg.heads; n++)
    stsa_svg_free(s->by_heads[n]);
  free(s->by_heads);
  free(s->kind_layer);
  free(s->kinds);
  free(s);
}

stsa_status dist_svg_session(stsa_dist_svg *s, int64_t n, stsa_svg **out) {
  if (!s->by_heads[n]) {
    stsa_svg_config c = s->cfg;
    c.heads = n;
    stsa_status st = stsa_svg_create(s->d->ctx, &c, &s->by_heads[n]);
    if (st != STSA_OK)
      return dist_fail_ctx(s->d, st, "dist: svg session");
  }
  *out = s->by_heads[n];
  return STSA_OK;
}

/* The kept fraction of the dense policy's mask (< 1 with padding text). */
static stsa_status dense_density(stsa_dist_svg *s, const stsa_svg *full) {
  stsa_mask *m = NULL;
  stsa_status st = stsa_svg_kind_mask(full, STSA_HEAD_MIXED, &m, NULL, NULL);
  stsa_plan *plan = NULL;
  if (st == STSA_OK) {
    const stsa_mask *masks[1] = {m};
    stsa_plan_desc desc = STSA_INIT(stsa_plan_desc);
    desc.s_q = desc.s_kv = s->tokens;
    desc.heads = 1;
    desc.masks = masks;
    desc.geometry = &s->cfg.geometry;
    desc.q_tile = s->windows.q_tile;
    desc.kv_tile = s->windows.kv_tile;
    st = stsa_plan_build(s->d->ctx, &desc, &plan);
  }
  if (st == STSA_OK) {
    stsa_plan_stats ps = STSA_INIT(stsa_plan_stats);
    stsa_plan_get_stats(plan, &ps);
    s->density_dense = (double)ps.pairs_kept / (double)ps.pairs_total;
  }
  stsa_plan_free(plan);
  stsa_mask_free(m);
  return st == STSA_OK ? st : dist_fail_ctx(s->d, st, "dist: svg dense mask");
}

static uint64_t config_hash(const stsa_svg_config *c) {
  const int64_t f[] = {c->heads,
                       c->head_dim,
                       c->dense_steps,
                       c->dense_layers,
                       c->sample_rows,
                       c->sink_frames,
                       (int64_t)c->seed,
                       c->steps,
                       c->layers,
                       c->q_tile,
                       c->kv_tile,
                       c->method,
                       c->svg2.q_clusters,
                       c->svg2.kv_clusters,
                       c->svg2.kmeans_iters_cold,
                       c->svg2.kmeans_iters_warm};
  const double x[] = {c->density, c->svg2.top_p, c->svg2.min_kv_fraction,
                      c->max_rel_error};
  uint64_t h = dist_hash_geometry(1469598103934665603ull, &c->geometry);
  h = dist_hash(h, f, sizeof f);
  return dist_hash(h, x, sizeof x);
}

stsa_status stsa_dist_svg_create(stsa_dist *d, const stsa_svg_config *cfg,
                                 stsa_dist_svg **out) {
  if (!d || !out)
    return STSA_ERR_NULL_ARG;
  dist_call_start(d);
  stsa_dist_svg *s = calloc(1, sizeof *s);
  stsa_status st =
      s ? STSA_OK : dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  if (st == STSA_OK && (!cfg || cfg->size != sizeof *cfg))
    st = dist_fail(d, STSA_ERR_BAD_PARAM,
                   "dist: svg config is NULL or of size %zu, expected %zu",
                   cfg ? cfg->size : 0, sizeof *cfg);
  /* methods svg2 and auto run on Ulysses layouts only, which a hybrid
   * scheme's degree (picked from the call's heads) may or may not give:
   * refused at the call (check_ring), as the error budget on rings */
  if (st == STSA_OK) {
    s->d = d;
    s->cfg = *cfg;
    s->by_heads =
        calloc((size_t)(cfg->heads > 0 && cfg->heads < (1 << 20) ? cfg->heads + 1 : 1),
               sizeof *s->by_heads);
    if (!s->by_heads)
      st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  }
  /* the full-head session checks the configuration and gives the windows */
  stsa_svg *full = NULL;
  if (st == STSA_OK && (cfg->heads < 1 || cfg->heads >= (1 << 20)))
    st = dist_fail(d, STSA_ERR_BAD_PARAM, "dist: svg heads = %lld, expected 1..2^20",
                   (long long)cfg->heads);
  if (st == STSA_OK)
    st = dist_svg_session(s, cfg->heads, &full);
  if (st == STSA_OK) {
    s->windows = (stsa_svg_windows)STSA_INIT(stsa_svg_windows);
    stsa_svg_get_windows(full, &s->windows);
    s->tokens = stsa_geometry_tokens(&cfg->geometry);
    st = dense_density(s, full);
  }
  /* every rank must run the same session */
  uint64_t h = st == STSA_OK ? config_hash(cfg) : 0;
  int64_t mine[2] = {(int64_t)(h >> 1), st == STSA_OK}, lo[2], hi[2];
  st = dist_agree(d, st);
  if (st == STSA_OK) {
    if (MPI_Allreduce(mine, lo, 2, MPI_INT64_T, MPI_MIN, d->comm) != MPI_SUCCESS ||
        MPI_Allreduce(mine, hi, 2, MPI_INT64_T, MPI_MAX, d->comm) != MPI_SUCCESS)
      st = dist_fail(d, STSA_ERR_IO, "MPI: MPI_Allreduce failed");
    else if (lo[0] != hi[0])
      st = dist_fail(d, STSA_ERR_BAD_PARAM,
                     "dist: the ranks were given different SVG configurations");
  }
  if (st != STSA_OK) {
    stsa_dist_svg_free(s);
    return st;
  }
  *out = s;
  return STSA_OK;
}

/* The slot of `layer` in a table of `slots` (a power of two, not full), or
 * the empty slot where it goes. Layers are hashed (splitmix64's finaliser):
 * consecutive ones would otherwise fill one run of slots. */
static int64_t kind_slot(const int64_t *kind_layer, int64_t slots, int64_t layer) {
  uint64_t x = (uint64_t)layer + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  const uint64_t mask = (uint64_t)slots - 1;
  for (uint64_t i = x & mask;; i = (i + 1) & mask)
    if (kind_layer[i] == layer || kind_layer[i] < 0)
      return (int64_t)i;
}

/* The kinds remembered for `layer`, or NULL. */
static const signed char *kinds_of(const stsa_dist_svg *s, int64_t layer) {
  if (!s->kind_slots)
    return NULL;
  const int64_t i = kind_slot(s->kind_layer, s->kind_slots, layer);
  return s->kind_layer[i] == layer ? s->kinds + i * s->cfg.heads : NULL;
}

/* Doubles the table of kinds (8 slots at first), moving every layer's. */
static int kinds_grow(stsa_dist_svg *s) {
  const int64_t H = s->cfg.heads, slots = s->kind_slots ? 2 * s->kind_slots : 8;
  int64_t *layer = malloc(sizeof *layer * (size_t)slots);
  signed char *kinds = malloc((size_t)slots * (size_t)H);
  if (!layer || !kinds) {
    free(layer);
    free(kinds);
    return -1;
  }
  for (int64_t i = 0; i < slots; i++)
    layer[i] = -1;
  for (int64_t i = 0; i < s->kind_slots; i++)
    if (s->kind_layer[i] >= 0) {
      const int64_t j = kind_slot(layer, slots, s->kind_layer[i]);
      layer[j] = s->kind_layer[i];
      memcpy(kinds + j * H, s->kinds + i * H, (size_t)H);
    }
  free(s->kind_layer);
  free(s->kinds);
  s->kind_layer = layer;
  s->kinds = kinds;
  s->kind_slots = slots;
  return 0;
}

/* The kept fraction a head of `kind` runs with. */
static double kind_density(const stsa_dist_svg *s, int dense, stsa_head_kind kind) {
  return dense                       ? s->density_dense
         : kind == STSA_HEAD_SPATIAL ? s->windows.density_spatial
                                     : s->windows.density_temporal;
}

/* The cost of each head: its kind's density in the previous call of this
 * layer (unknown or dense calls: all equal). */
static stsa_status svg_costs(stsa_dist_svg *s, int64_t layer, int dense, double *cost) {
  const int64_t H = s->cfg.heads;
  for (int64_t h = 0; h < H; h++)
    cost[h] = 1.0;
  const signed char *k = dense ? NULL : kinds_of(s, layer);
  for (int64_t h = 0; k && h < H; h++)
    cost[h] = k[h] == STSA_HEAD_SPATIAL || k[h] == STSA_HEAD_TEMPORAL
                  ? kind_density(s, 0, (stsa_head_kind)k[h])
                  : 1.0;
  return STSA_OK;
}

static stsa_status remember_kinds(stsa_dist_svg *s, int64_t layer,
                                  const stsa_head_kind *kinds) {
  const int64_t H = s->cfg.heads;
  int64_t i = s->kind_slots ? kind_slot(s->kind_layer, s->kind_slots, layer) : -1;
  if (i < 0 || s->kind_layer[i] != layer) {
    if (2 * (s->kind_count + 1) > s->kind_slots && kinds_grow(s) != 0)
      return dist_fail(s->d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
    i = kind_slot(s->kind_layer, s->kind_slots, layer);
    s->kind_layer[i] = layer;
    s->kind_count++;
  }
  for (int64_t h = 0; h < H; h++) /* batch entry 0 stands for the call */
    s->kinds[i * H + h] = (signed char)kinds[h];
  return STSA_OK;
}

/* Ulysses: the local session computes whole heads; its report goes into
 * this rank's record (dist_svg.h), field by field. */
static stsa_status svg_local_run(void *self, stsa_dist *d, const dist_layout *l,
                                 const dist_local *loc, const stsa_tensor *k,
                                 const stsa_tensor *v, int64_t kv_off,
                                 const stsa_tensor *out, float *lse, int *skipped) {
  (void)d;
  (void)l;
  (void)kv_off;
  (void)lse;
  *skipped = 0;
  dist_svg_call *c = self;
  stsa_svg *sess = NULL;
  DIST_TRY(dist_svg_session(c->s, loc->n, &sess));
  const int64_t Bn = c->B * loc->n;
  float *f = c->local;
  stsa_svg_report r = STSA_INIT(stsa_svg_report);
  r.kinds = c->local_kinds;
  r.mse_spatial = f + SVG_F_MSE_S * Bn;
  r.mse_temporal = f + SVG_F_MSE_T * Bn;
  r.est_error = f + SVG_F_EST * Bn;
  r.head_density = f + SVG_F_DENSITY * Bn;
  r.head_top_p = f + SVG_F_TOP_P * Bn;
  r.cand_density = f + SVG_F_CAND_DENSITY * Bn;
  r.cand_bound = f + SVG_F_CAND_BOUND * Bn;
  uint8_t *u8 = malloc((size_t)(3 * Bn > 0 ? 3 * Bn : 1));
  r.budget = u8;
  r.choice = u8 ? u8 + Bn : NULL;
  r.choice_reason = u8 ? u8 + 2 * Bn : NULL;
  stsa_status st =
      u8 ? stsa_svg_attention(sess, c->layer, c->step, &loc->q, k, v, out, &r)
         : STSA_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; st == STSA_OK && i < Bn; i++) {
    f[SVG_F_BUDGET * Bn + i] = (float)u8[i];
    f[SVG_F_CHOICE * Bn + i] = (float)u8[Bn + i];
    f[SVG_F_REASON * Bn + i] = (float)u8[2 * Bn + i];
  }
  free(u8);
  if (st != STSA_OK)
    return dist_fail_ctx(c->s->d, st, "dist: svg");
  c->profile_ms = r.profile_ms;
  c->attention_ms = r.attention_ms;
  c->cluster_ms = r.cluster_ms;
  c->dense = r.dense;
  c->local_kept = r.density * (double)Bn;
  c->local_cold = r.cold;
  c->local_q_clusters = r.q_clusters;
  c->local_kv_clusters = r.kv_clusters;
  return STSA_OK;
}

/* Ring layouts profile no bound and run each head's kind (method svg only):
 * the record's bound, density, budget action and choice of those kinds, as
 * one process's session reports them. */
static void ring_record(dist_svg_call *c, int64_t n) {
  const int64_t Bn = c->B * n;
  float *f = c->local;
  for (int64_t i = 0; i < Bn; i++) {
    const stsa_head_kind kind = c->local_kinds[i];
    f[SVG_F_EST * Bn + i] = c->dense ? 0.0f : NAN;
    f[SVG_F_DENSITY * Bn + i] = (float)kind_density(c->s, c->dense, kind);
    f[SVG_F_BUDGET * Bn + i] = c->dense ? STSA_BUDGET_POLICY : STSA_BUDGET_NONE;
    f[SVG_F_TOP_P * Bn + i] = 0.0f;
    f[SVG_F_CHOICE * Bn + i] = c->dense                     ? STSA_AUTO_DENSE
                               : kind == STSA_HEAD_TEMPORAL ? STSA_AUTO_TEMPORAL
                                                            : STSA_AUTO_SPATIAL;
    f[SVG_F_REASON * Bn + i] = c->dense ? STSA_AUTO_POLICY : STSA_AUTO_METHOD;
    for (int64_t j = 0; j < STSA_AUTO_CANDIDATE_COUNT_; j++) /* none evaluated */
      f[SVG_F_CAND_DENSITY * Bn + i * STSA_AUTO_CANDIDATE_COUNT_ + j] =
          f[SVG_F_CAND_BOUND * Bn + i * STSA_AUTO_CANDIDATE_COUNT_ + j] = NAN;
  }
}

/* Member m's record (nm heads) into the call's record of every head. */
static void unpack_record(dist_svg_call *c, const dist_layout *l, int m,
                          const float *blk) {
  enum { C = STSA_AUTO_CANDIDATE_COUNT_ };
  const int64_t B = c->B, H = l->H, nm = layout_heads_of(l, m);
  for (int64_t i = 0; i < nm; i++) {
    const int64_t h = l->group_heads[l->head_ptr[m] + i];
    for (int64_t b = 0; b < B; b++) {
      const int64_t src = b * nm + i, dst = b * H + h;
      for (int f = 0; f < SVG_F_CAND_DENSITY; f++)
        c->all[f * B * H + dst] = blk[f * B * nm + src];
      for (int f = SVG_F_CAND_DENSITY; f < SVG_FIELDS; f += C)
        memcpy(c->all + f * B * H + dst * C, blk + f * B * nm + src * C,
               sizeof(float) * C);
      c->kinds[dst] = (stsa_head_kind)blk[SVG_F_KIND * B * nm + src];
    }
  }
}

/* Every rank learns every head's record (allgather in the Ulysses group:
 * ring groups computed the same heads of other tokens, and the kinds of a
 * call are one per head, decided on the whole sequence), and the group's
 * kept fraction, cold flag and cluster counts. */
static stsa_status gather_heads(dist_svg_call *c, const dist_layout *l) {
  stsa_dist *d = c->s->d;
  const int64_t B = c->B, H = l->H, U = l->U;
  const int64_t n = layout_heads_of(l, l->u);
  enum { SUMS = 4 }; /* kept, cold, q clusters, kv clusters */
  int *counts = malloc(sizeof(int) * 2 * (size_t)U);
  float *all = malloc(sizeof(float) * (size_t)(SVG_FIELDS * B * H));
  double *sums = malloc(sizeof(double) * (size_t)(SUMS * (U + 1)));
  stsa_status st = counts && all && sums
                       ? STSA_OK
                       : dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  if (st == STSA_OK) {
    int *displs = counts + U;
    int64_t off = 0;
    for (int64_t m = 0; m < U; m++) {
      counts[m] = (int)(SVG_FIELDS * B * layout_heads_of(l, (int)m));
      displs[m] = (int)off;
      off += counts[m];
    }
    for (int64_t i = 0; i < B * n; i++)
      c->local[SVG_F_KIND * B * n + i] = (float)c->local_kinds[i];
    if (c->ring)
      ring_record(c, n);
    int rc = MPI_Allgatherv(c->local, counts[l->u], MPI_FLOAT, all, counts, displs,
                            MPI_FLOAT, d->ucomm);
    const double mine[SUMS] = {c->local_kept, c->local_cold, (double)c->local_q_clusters,
                               (double)c->local_kv_clusters};
    if (rc == MPI_SUCCESS)
      rc = MPI_Allgather(mine, SUMS, MPI_DOUBLE, sums + SUMS, SUMS, MPI_DOUBLE, d->ucomm);
    if (rc != MPI_SUCCESS)
      st = dist_fail_mpi(d, rc, "MPI_Allgatherv (head kinds)");
    for (int64_t m = 0; st == STSA_OK && m < U; m++)
      unpack_record(c, l, (int)m, all + displs[m]);
    /* summed in member order, the same on every rank; the rest are equal
     * on every member with heads (0 on the others) */
    for (int j = 0; j < SUMS; j++)
      sums[j] = 0;
    for (int64_t m = 0; st == STSA_OK && m < U; m++) {
      const double *x = sums + SUMS * (m + 1);
      sums[0] += x[0];
      for (int j = 1; j < SUMS; j++)
        sums[j] = x[j] > sums[j] ? x[j] : sums[j];
    }
    c->local_kept = sums[0];
    c->local_cold = (int)sums[1];
    c->local_q_clusters = (int64_t)sums[2];
    c->local_kv_clusters = (int64_t)sums[3];
  }
  free(counts);
  free(all);
  free(sums);
  return st;
}

/* The call's kept fraction: under Ulysses the local sessions' own sums,
 * added up; on rings each head's kind's density (exact, double) or, for
 * raised heads, its gathered one. */
static double call_density(const dist_svg_call *c, int R) {
  const stsa_dist_svg *s = c->s;
  const int64_t BH = c->B * s->cfg.heads;
  if (R == 1)
    return c->local_kept / (double)BH;
  const float *hd = c->all + SVG_F_DENSITY * BH, *bud = c->all + SVG_F_BUDGET * BH;
  double kept = 0;
  for (int64_t i = 0; i < BH; i++)
    kept += bud[i] == STSA_BUDGET_RAISED  ? (double)hd[i]
            : bud[i] == STSA_BUDGET_DENSE ? s->density_dense
                                          : kind_density(s, c->dense, c->kinds[i]);
  return kept / (double)BH;
}

static void fill_svg_report(const dist_svg_call *c, int R, stsa_svg_report *r) {
  enum { C = STSA_AUTO_CANDIDATE_COUNT_ };
  const stsa_dist_svg *s = c->s;
  const int64_t BH = c->B * s->cfg.heads;
  const float *f = c->all;
  r->dense = c->dense;
  r->method = s->cfg.method;
  r->heads = BH;
  r->profile_ms = c->profile_ms;
  r->attention_ms = c->attention_ms;
  r->cluster_ms = c->cluster_ms;
  r->cold = c->local_cold;
  r->q_clusters = c->local_q_clusters;
  r->kv_clusters = c->local_kv_clusters;
  r->density = call_density(c, R);
  for (int64_t i = 0; i < BH; i++) {
    if (r->kinds)
      r->kinds[i] = c->kinds[i];
    if (r->mse_spatial)
      r->mse_spatial[i] = f[SVG_F_MSE_S * BH + i];
    if (r->mse_temporal)
      r->mse_temporal[i] = f[SVG_F_MSE_T * BH + i];
    if (r->est_error)
      r->est_error[i] = f[SVG_F_EST * BH + i];
    if (r->head_density)
      r->head_density[i] = f[SVG_F_DENSITY * BH + i];
    if (r->budget)
      r->budget[i] = (uint8_t)f[SVG_F_BUDGET * BH + i];
    if (r->head_top_p)
      r->head_top_p[i] = f[SVG_F_TOP_P * BH + i];
    if (r->choice)
      r->choice[i] = (uint8_t)f[SVG_F_CHOICE * BH + i];
    if (r->choice_reason)
      r->choice_reason[i] = (uint8_t)f[SVG_F_REASON * BH + i];
  }
  if (r->cand_density)
    memcpy(r->cand_density, f + SVG_F_CAND_DENSITY * BH,
           sizeof(float) * (size_t)(BH * C));
  if (r->cand_bound)
    memcpy(r->cand_bound, f + SVG_F_CAND_BOUND * BH, sizeof(float) * (size_t)(BH * C));
}

static void call_free(dist_svg_call *c) {
  free(c->local_kinds);
  free(c->local);
  free(c->all);
  free(c->kinds);
  ring_svg_free(c);
}

/* Methods svg2 and auto keep per-head state across calls (SVG2's k-means
 * centroids, per layer, in the session's layer store) and price their heads
 * by what they choose in the call itself: they run on Ulysses layouts only,
 * each head on the same rank every call. */
static int heads_stay(const stsa_dist_svg *s) {
  return s->cfg.method != STSA_SVG_METHOD_SVG;
}

/* The refusals of layouts with rings (R > 1): a bound, and methods svg2
 * and auto, need a head's every key on one rank. */
static stsa_status check_ring(const stsa_dist_svg *s, const dist_layout *l) {
  if (l->R > 1 && heads_stay(s))
    return dist_fail(s->d, STSA_ERR_UNSUPPORTED,
                     "dist: method %s runs on Ulysses layouts, where a rank holds whole "
                     "heads and keeps them from call to call (its k-means centroids "
                     "stay on it); this layout has rings of %d ranks",
                     stsa_svg_method_name(s->cfg.method), l->R);
  if (l->R > 1 && s->cfg.max_rel_error > 0)
    return dist_fail(s->d, STSA_ERR_UNSUPPORTED,
                     "dist: the error budget (max_rel_error %g) runs on Ulysses layouts, "
                     "where a rank holds whole heads; this layout has rings of %d ranks",
                     s->cfg.max_rel_error, l->R);
  return STSA_OK;
}

/* Heads to ranks: method svg by the kinds of the layer's previous call;
 * svg2 and auto in the static contiguous split (balance_heads without
 * costs), the same every call, so that a rank's session always holds the
 * same global heads and its SVG2 layer store the centroids of its own heads
 * (balancing by cost would move a head to a rank whose store holds another
 * head's centroids, or none, and change its output). */
static stsa_status place_heads(stsa_dist_svg *s, dist_svg_call *c, dist_layout *l) {
  if (heads_stay(s))
    return balance_heads(s->d, NULL, l);
  double *cost = malloc(sizeof *cost * (size_t)l->H);
  stsa_status st = cost ? svg_costs(s, c->layer, c->dense, cost)
                        : dist_fail(s->d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  if (st == STSA_OK)
    st = balance_heads(s->d, cost, l);
  free(cost);
  return st;
}

stsa_status stsa_dist_svg_attention(stsa_dist_svg *s, int64_t layer, int64_t step,
                                    const stsa_tensor *q, const stsa_tensor *k,
                                    const stsa_tensor *v, const stsa_tensor *out,
                                    stsa_svg_report *report,
                                    stsa_dist_report *dist_report) {
  if (!s)
    return STSA_ERR_NULL_ARG;
  stsa_dist *d = s->d;
  dist_call_start(d);
  dist_sig sig;
  dist_sig_init(d, CALL_SVG, &sig);
  stsa_status st = dist_check_local(d, q, k, v, out, dist_report, &sig);
  if (st == STSA_OK && report && report->size < sizeof *report)
    st = dist_fail(d, STSA_ERR_BAD_PARAM, "dist: svg report size %zu, expected %zu",
                   report->size, sizeof *report);
  if (st == STSA_OK && report && report->run && report->run->size != sizeof *report->run)
    st = dist_fail(d, STSA_ERR_BAD_PARAM, "dist: svg report's run size %zu, expected %zu",
                   report->run->size, sizeof *report->run);
  if (st == STSA_OK && (layer < 0 || step < 0))
    st = dist_fail(d, STSA_ERR_BAD_PARAM,
                   "dist: layer = %lld and step = %lld must be >= 0", (long long)layer,
                   (long long)step);
  sig.layer = layer;
  sig.step = step;
  sig.status = st;
  dist_layout l;
  DIST_TRY(dist_begin(d, &sig, &l));
  const int64_t B = sig.B, H = l.H;
  dist_svg_call c = {.s = s, .layer = layer, .step = step, .B = B};
  c.dense = step < s->cfg.dense_steps || layer < s->cfg.dense_layers;
  if (l.S != s->tokens || H != s->cfg.heads || sig.D != s->cfg.head_dim)
    st = dist_fail(
        d, STSA_ERR_BAD_SHAPE,
        "dist: svg session is for N = %lld, H = %lld, D = %lld, but the shards "
        "add up to %lld tokens of %lld heads of %lld",
        (long long)s->tokens, (long long)s->cfg.heads, (long long)s->cfg.head_dim,
        (long long)l.S, (long long)H, (long long)sig.D);
  c.local_kinds = malloc(sizeof *c.local_kinds * (size_t)(B * H));
  c.local = malloc(sizeof *c.local * (size_t)(SVG_FIELDS * B * H));
  c.all = malloc(sizeof *c.all * (size_t)(SVG_FIELDS * B * H));
  c.kinds = malloc(sizeof *c.kinds * (size_t)(B * H));
  if (st == STSA_OK && (!c.local_kinds || !c.local || !c.all || !c.kinds))
    st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  if (st == STSA_OK)
    st = check_ring(s, &l);
  if (st == STSA_OK)
    st = place_heads(s, &c, &l);
  st = dist_agree(d, st);
  const int64_t n = st == STSA_OK ? layout_heads_of(&l, l.u) : 0;
  c.local_mse = c.local ? c.local + SVG_F_MSE_S * B * n : NULL;
  /* rings profile after the exchange, on the ring (dist_svg_ring.c) */
  dist_compute comp = {l.R > 1 ? ring_svg_prepare : NULL,
                       l.R > 1 ? ring_svg_run : svg_local_run, &c};
  if (st == STSA_OK)
    st = dist_run(d, &l, q, k, v, out, &comp, dist_report);
  if (st == STSA_OK)
    st = dist_agree(d, gather_heads(&c, &l));
  if (st == STSA_OK && !c.dense && !heads_stay(s))
    st = dist_agree(d, remember_kinds(s, layer, c.kinds));
  if (st == STSA_OK && report) {
    fill_svg_report(&c, l.R, report);
    /* what this rank's last attention ran; a rank without heads ran none */
    if (report->run && n > 0)
      stsa_ctx_last_run(d->ctx, report->run);
  }
  call_free(&c);
  layout_free(&l);
  return st;
}
