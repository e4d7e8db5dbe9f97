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
 * plan cache. Under ring and hybrid layouts profiling needs keys of the
 * whole sequence: dist_svg_ring.c.
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
  /* SVG2 keeps centroids per head across calls, which head balancing would
   * move between ranks (the error budget runs on whole heads: Ulysses
   * layouts, checked at the call) */
  if (st == STSA_OK && cfg->method != STSA_SVG_METHOD_SVG)
    st = dist_fail(d, STSA_ERR_UNSUPPORTED,
                   "dist: method %s (%d) is not distributed: use method 0 (svg)",
                   stsa_svg_method_name(cfg->method), cfg->method);
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

/* Ulysses: the local session computes whole heads. */
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
  stsa_svg_report r = STSA_INIT(stsa_svg_report);
  r.kinds = c->local_kinds;
  r.mse_spatial = c->local_mse;
  r.mse_temporal = c->local_mse + Bn;
  r.est_error = c->local_budget;
  r.head_density = c->local_budget + Bn;
  uint8_t *action = malloc((size_t)(Bn > 0 ? Bn : 1));
  r.budget = action;
  stsa_status st =
      action ? stsa_svg_attention(sess, c->layer, c->step, &loc->q, k, v, out, &r)
             : STSA_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; st == STSA_OK && i < Bn; i++)
    c->local_budget[2 * Bn + i] = (float)action[i];
  free(action);
  if (st != STSA_OK)
    return dist_fail_ctx(c->s->d, st, "dist: svg");
  c->profile_ms = r.profile_ms;
  c->attention_ms = r.attention_ms;
  c->dense = r.dense;
  return STSA_OK;
}

/* Every rank learns every head's kind and errors (allgather in the group:
 * ring groups computed the same heads of other tokens, and the kinds of a
 * call are one per head, decided on the whole sequence). */
static stsa_status gather_kinds(dist_svg_call *c, const dist_layout *l) {
  stsa_dist *d = c->s->d;
  const int64_t B = c->B, H = l->H, U = l->U;
  const int64_t n = layout_heads_of(l, l->u);
  /* per member: [B * n] kinds, then [2 * B * n] mse, then [3 * B * n] error
   * bounds, densities and budget actions, as floats */
  enum { PER_HEAD = 6 };
  int *counts = malloc(sizeof(int) * 2 * (size_t)U);
  float *mine = malloc(sizeof(float) * (size_t)(PER_HEAD * B * n + 1));
  float *all = malloc(sizeof(float) * (size_t)(PER_HEAD * B * H));
  stsa_status st = counts && mine && all
                       ? STSA_OK
                       : dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  if (st == STSA_OK) {
    int *displs = counts + U;
    int64_t off = 0;
    for (int64_t m = 0; m < U; m++) {
      counts[m] = (int)(PER_HEAD * B * layout_heads_of(l, (int)m));
      displs[m] = (int)off;
      off += counts[m];
    }
    for (int64_t i = 0; i < B * n; i++)
      mine[i] = (float)c->local_kinds[i];
    memcpy(mine + B * n, c->local_mse, sizeof(float) * (size_t)(2 * B * n));
    if (c->ring) /* the ring profiles no bound: the kind's plan ran */
      for (int64_t i = 0; i < B * n; i++) {
        c->local_budget[i] = c->dense ? 0.0f : NAN;
        c->local_budget[B * n + i] =
            (float)kind_density(c->s, c->dense, c->local_kinds[i]);
        c->local_budget[2 * B * n + i] = c->dense ? STSA_BUDGET_POLICY : STSA_BUDGET_NONE;
      }
    memcpy(mine + 3 * B * n, c->local_budget, sizeof(float) * (size_t)(3 * B * n));
    int rc = MPI_Allgatherv(mine, (int)(PER_HEAD * B * n), MPI_FLOAT, all, counts, displs,
                            MPI_FLOAT, d->ucomm);
    if (rc != MPI_SUCCESS)
      st = dist_fail_mpi(d, rc, "MPI_Allgatherv (head kinds)");
    for (int64_t m = 0; st == STSA_OK && m < U; m++) {
      const int64_t nm = layout_heads_of(l, (int)m);
      const float *blk = all + displs[m];
      for (int64_t i = 0; i < nm; i++) {
        const int64_t h = l->group_heads[l->head_ptr[m] + i];
        for (int64_t b = 0; b < B; b++) {
          c->kinds[b * H + h] = (stsa_head_kind)blk[b * nm + i];
          c->mse_s[b * H + h] = blk[B * nm + b * nm + i];
          c->mse_t[b * H + h] = blk[2 * B * nm + b * nm + i];
          c->est[b * H + h] = blk[3 * B * nm + b * nm + i];
          c->head_density[b * H + h] = blk[4 * B * nm + b * nm + i];
          c->budget[b * H + h] = (uint8_t)blk[5 * B * nm + b * nm + i];
        }
      }
    }
  }
  free(counts);
  free(mine);
  free(all);
  return st;
}

static void fill_svg_report(const dist_svg_call *c, stsa_svg_report *r) {
  const stsa_dist_svg *s = c->s;
  const int64_t BH = c->B * s->cfg.heads;
  /* the kinds' and the dense plan's densities are exact (double); the
   * gathered ones (float) only for what the ranks alone know: raised heads */
  double kept = 0;
  for (int64_t i = 0; i < BH; i++)
    kept += c->budget[i] == STSA_BUDGET_RAISED  ? (double)c->head_density[i]
            : c->budget[i] == STSA_BUDGET_DENSE ? s->density_dense
                                                : kind_density(s, c->dense, c->kinds[i]);
  r->dense = c->dense;
  r->method = s->cfg.method;
  r->heads = BH;
  r->profile_ms = c->profile_ms;
  r->attention_ms = c->attention_ms;
  r->density = kept / (double)BH;
  for (int64_t i = 0; i < BH; i++) {
    if (r->kinds)
      r->kinds[i] = c->kinds[i];
    if (r->mse_spatial)
      r->mse_spatial[i] = c->mse_s[i];
    if (r->mse_temporal)
      r->mse_temporal[i] = c->mse_t[i];
    if (r->est_error)
      r->est_error[i] = c->est[i];
    if (r->head_density)
      r->head_density[i] = c->head_density[i];
    if (r->budget)
      r->budget[i] = c->budget[i];
    if (r->head_top_p)
      r->head_top_p[i] = 0.0f;
  }
}

static void call_free(dist_svg_call *c) {
  free(c->local_kinds);
  free(c->local_mse);
  free(c->local_budget);
  free(c->kinds);
  free(c->mse_s);
  free(c->est);
  free(c->budget);
  ring_svg_free(c);
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
  double *cost = malloc(sizeof *cost * (size_t)H);
  c.local_kinds = malloc(sizeof *c.local_kinds * (size_t)(B * H));
  c.local_mse = malloc(sizeof *c.local_mse * (size_t)(2 * B * H));
  c.kinds = malloc(sizeof *c.kinds * (size_t)(B * H));
  c.mse_s = malloc(sizeof *c.mse_s * (size_t)(2 * B * H));
  c.mse_t = c.mse_s ? c.mse_s + B * H : NULL;
  c.local_budget = malloc(sizeof *c.local_budget * (size_t)(3 * B * H));
  c.est = malloc(sizeof *c.est * (size_t)(2 * B * H));
  c.head_density = c.est ? c.est + B * H : NULL;
  c.budget = malloc((size_t)(B * H));
  if (st == STSA_OK && (!cost || !c.local_kinds || !c.local_mse || !c.kinds || !c.mse_s ||
                        !c.local_budget || !c.est || !c.budget))
    st = dist_fail(d, STSA_ERR_OUT_OF_MEMORY, "dist: out of memory");
  /* a bound needs a head's every key on one rank */
  if (st == STSA_OK && l.R > 1 && s->cfg.max_rel_error > 0)
    st = dist_fail(d, STSA_ERR_UNSUPPORTED,
                   "dist: the error budget (max_rel_error %g) runs on Ulysses layouts, "
                   "where a rank holds whole heads; this layout has rings of %d ranks",
                   s->cfg.max_rel_error, l.R);
  if (st == STSA_OK)
    st = svg_costs(s, layer, c.dense, cost);
  if (st == STSA_OK)
    st = balance_heads(d, cost, &l);
  st = dist_agree(d, st);
  /* rings profile after the exchange, on the ring (dist_svg_ring.c) */
  dist_compute comp = {l.R > 1 ? ring_svg_prepare : NULL,
                       l.R > 1 ? ring_svg_run : svg_local_run, &c};
  if (st == STSA_OK)
    st = dist_run(d, &l, q, k, v, out, &comp, dist_report);
  if (st == STSA_OK)
    st = dist_agree(d, gather_kinds(&c, &l));
  if (st == STSA_OK && !c.dense)
    st = dist_agree(d, remember_kinds(s, layer, c.kinds));
  if (st == STSA_OK && report)
    fill_svg_report(&c, report);
  free(cost);
  call_free(&c);
  layout_free(&l);
  return st;
}
