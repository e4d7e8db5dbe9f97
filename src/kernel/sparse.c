/*
 * sparse.c — block-sparse attention over a plan (the Splash kernel on CPU).
 *
 * Each (batch, head, q tile) unit walks its compact list of active kv tiles:
 * FULL tiles run exactly the dense body, PARTIAL tiles additionally apply
 * the exact mask, and nothing else is packed, loaded or computed. The three
 * modes reproduce the TPU post's progression:
 *   EXACT         mask-free full tiles, stored row intervals on partial ones (B2)
 *   NAIVE         the mask predicate evaluated per pair on every visited tile (B1)
 *   TILE_ROUNDED  partial tiles become full (>= half kept) or vanish (B3, lossy)
 */
#include <math.h>
#include <stdlib.h>

#include "core/context.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/driver.h"
#include "kernel/ref/attention_ref.h"
#include "kernel/sparse.h"
#include "mask/plan.h"

/* The plan and plan head that tensor head h follows. */
typedef struct head_route {
  const stsa_plan *const *plans;
  const int64_t *plan_heads;
} head_route;

static const stsa_plan *plan_of(const head_route *rt, int64_t h) { return rt->plans[h]; }

static const stsa_plan_part *part_of(const head_route *rt, int64_t h) {
  const stsa_plan *plan = rt->plans[h];
  return &plan->parts[plan->head_part[rt->plan_heads[h]]];
}

typedef struct sparse_run {
  const stsa_attn_problem *pb;
  head_route route;
  stsa_sparse_mode mode;
  int prepermuted; /* tensors already in plan order: no gathers */
  uint8_t *used;   /* [H][kv_tiles]: kv tiles some q tile of the head visits */
} sparse_run;

static int tile_rows(const stsa_plan *plan, int64_t qt) {
  int64_t r = plan->s_q - qt * plan->q_tile;
  return (int)(r < plan->q_tile ? r : plan->q_tile);
}

static int tile_cols(const stsa_plan *plan, int64_t kt) {
  int64_t c = plan->s_kv - kt * plan->kv_tile;
  return (int)(c < plan->kv_tile ? c : plan->kv_tile);
}

/* TILE_ROUNDED: a partial entry becomes full when at least half its pairs are
 * kept, and is dropped otherwise. A q tile left with nothing keeps its
 * partial entries as full, so that no row loses all its keys. */
static int rounded_keeps(const stsa_plan *plan, const stsa_plan_part *part, int64_t qt,
                         int64_t e) {
  if (part->kind[e] == STSA_TILE_FULL)
    return 1;
  int64_t pairs = (int64_t)tile_rows(plan, qt) * tile_cols(plan, part->kv_tile[e]);
  if (2 * part->rounded_kept[e] >= pairs)
    return 1;
  for (int64_t f = part->tile_ptr[qt]; f < part->tile_ptr[qt + 1]; f++) {
    int64_t fpairs = (int64_t)tile_rows(plan, qt) * tile_cols(plan, part->kv_tile[f]);
    if (part->kind[f] == STSA_TILE_FULL || 2 * part->rounded_kept[f] >= fpairs)
      return 0; /* the q tile keeps something else */
  }
  return 1;
}

static void fill_neg_inf(float *row, int from, int to) {
  for (int c = from; c < to; c++)
    row[c] = -INFINITY;
}

void stsa_apply_tile_pattern(const stsa_tile_pattern *pat, int rows, int n, float *s,
                             int ld_s) {
  for (int r = 0; r < rows; r++) {
    float *row = s + (int64_t)r * ld_s;
    int c = 0;
    for (int32_t i = pat->row_ptr[r]; i < pat->row_ptr[r + 1]; i++) {
      fill_neg_inf(row, c, pat->iv[2 * i]);
      c = pat->iv[2 * i + 1];
    }
    fill_neg_inf(row, c, n);
  }
}

/* EXACT mode: drops every column outside the stored row intervals. */
static void apply_pattern(const void *mask_ctx, int64_t entry, int64_t q0, int rows,
                          int64_t k0, int n, float *s, int ld_s) {
  (void)q0;
  (void)k0;
  const stsa_unit_buf *buf = mask_ctx;
  const sparse_run *run = buf->ud;
  const stsa_plan_part *part = part_of(&run->route, buf->head % run->pb->H);
  int64_t e = part->tile_ptr[buf->qt] + entry;
  stsa_apply_tile_pattern(&part->pattern_list[part->pattern[e]], rows, n, s, ld_s);
}

/* NAIVE mode: asks the mask about every pair, from token coordinates. */
static void apply_predicate(const void *mask_ctx, int64_t entry, int64_t q0, int rows,
                            int64_t k0, int n, float *s, int ld_s) {
  (void)entry;
  const stsa_unit_buf *buf = mask_ctx;
  const sparse_run *run = buf->ud;
  const int64_t h = buf->head % run->pb->H;
  const stsa_plan *plan = plan_of(&run->route, h);
  const stsa_mask *mask = part_of(&run->route, h)->mask;
  for (int r = 0; r < rows; r++) {
    int64_t qi = plan->q_native ? plan->q_native[q0 + r] : q0 + r;
    float *row = s + (int64_t)r * ld_s;
    for (int c = 0; c < n; c++) {
      int64_t kj = plan->kv_native ? plan->kv_native[k0 + c] : k0 + c;
      if (!stsa_mask_keep(mask, qi, kj))
        row[c] = -INFINITY;
    }
  }
}

static void sparse_unit(const void *ud, int64_t head, int64_t qt, stsa_unit_buf *buf,
                        stsa_kv_list *list) {
  const sparse_run *run = ud;
  const int64_t h = head % run->pb->H;
  const stsa_plan *plan = plan_of(&run->route, h);
  const stsa_plan_part *part = part_of(&run->route, h);
  const int64_t e0 = part->tile_ptr[qt], e1 = part->tile_ptr[qt + 1];
  list->mask_ctx = buf;
  list->mask = NULL;
  /* q/out/lse rows are plan positions when prepermuted, and always for a plan
   * over sampled rows (q_rows): only native-order tensors need the gather */
  list->q_rows = run->prepermuted || plan->q_sampled ? NULL : plan->q_native;
  switch (run->mode) {
  case STSA_SPARSE_NAIVE:
    for (int64_t e = e0; e < e1; e++)
      buf->kinds[e - e0] = STSA_TILE_PARTIAL;
    list->tiles = part->kv_tile + e0;
    list->kinds = buf->kinds;
    list->count = (int32_t)(e1 - e0);
    list->mask = apply_predicate;
    break;
  case STSA_SPARSE_TILE_ROUNDED: {
    int32_t count = 0;
    for (int64_t e = e0; e < e1; e++)
      if (rounded_keeps(plan, part, qt, e)) {
        buf->tiles[count] = part->kv_tile[e];
        buf->kinds[count++] = STSA_TILE_FULL;
      }
    list->tiles = buf->tiles;
    list->kinds = buf->kinds;
    list->count = count;
    break;
  }
  default:
    list->tiles = part->kv_tile + e0;
    list->kinds = part->kind + e0;
    list->count = (int32_t)(e1 - e0);
    list->mask = apply_pattern;
    break;
  }
}

static int64_t sparse_cost(const void *ud, int64_t head, int64_t qt) {
  const sparse_run *run = ud;
  const stsa_plan_part *part = part_of(&run->route, head % run->pb->H);
  return part->tile_ptr[qt + 1] - part->tile_ptr[qt] + 1;
}

static const uint8_t *sparse_used(const void *ud, int64_t head) {
  const sparse_run *run = ud;
  return run->used + (size_t)(head % run->pb->H) * (size_t)stsa_kv_tiles(run->pb);
}

static const int64_t *sparse_kv_rows(const void *ud, int64_t head) {
  const sparse_run *run = ud;
  return run->prepermuted ? NULL : plan_of(&run->route, head % run->pb->H)->kv_native;
}

/* Flags, per head, the kv tiles that any of its q tiles visits: only those
 * are packed. */
static uint8_t *used_tiles(const head_route *rt, int64_t heads, int64_t kv_tiles) {
  uint8_t *used = calloc((size_t)heads, (size_t)kv_tiles);
  if (!used)
    return NULL;
  for (int64_t h = 0; h < heads; h++) {
    const stsa_plan_part *part = part_of(rt, h);
    for (int64_t e = 0; e < part->entries; e++)
      used[(size_t)h * (size_t)kv_tiles + (size_t)part->kv_tile[e]] = 1;
  }
  return used;
}

/* Pairs whose keep flag TILE_ROUNDED flips, over every batch entry and head. */
static int64_t rounded_pairs_changed(const head_route *rt, int64_t heads, int64_t batch) {
  int64_t changed = 0;
  for (int64_t h = 0; h < heads; h++) {
    const stsa_plan *plan = plan_of(rt, h);
    const stsa_plan_part *part = part_of(rt, h);
    for (int64_t qt = 0; qt < plan->q_tiles; qt++)
      for (int64_t e = part->tile_ptr[qt]; e < part->tile_ptr[qt + 1]; e++) {
        if (part->kind[e] != STSA_TILE_PARTIAL)
          continue;
        int64_t pairs = (int64_t)tile_rows(plan, qt) * tile_cols(plan, part->kv_tile[e]);
        changed += rounded_keeps(plan, part, qt, e) ? pairs - part->rounded_kept[e]
                                                    : part->rounded_kept[e];
      }
  }
  return changed * batch;
}

/* ---- the reference path: the same pairs, one row at a time ------------- */
typedef struct ref_keep_ctx {
  const head_route *route;
  stsa_sparse_mode mode;
  int prepermuted;
  int64_t **q_pos, **kv_pos; /* [H] native -> plan position (TILE_ROUNDED only) */
} ref_keep_ctx;

static int ref_keep(const void *ctx, int64_t h, int64_t i, int64_t j) {
  const ref_keep_ctx *rk = ctx;
  const stsa_plan *plan = plan_of(rk->route, h);
  const stsa_plan_part *part = part_of(rk->route, h);
  /* tensor rows are native tokens, or plan positions when prepermuted; q
   * rows of a plan over sampled rows are always plan positions */
  int64_t qi = i, kj = j, qpos = i, kpos = j;
  if (rk->prepermuted || plan->q_sampled)
    qi = plan->q_native ? plan->q_native[i] : i;
  else if (rk->mode == STSA_SPARSE_TILE_ROUNDED)
    qpos = rk->q_pos[h] ? rk->q_pos[h][i] : i;
  if (rk->prepermuted)
    kj = plan->kv_native ? plan->kv_native[j] : j;
  else if (rk->mode == STSA_SPARSE_TILE_ROUNDED)
    kpos = rk->kv_pos[h] ? rk->kv_pos[h][j] : j;
  if (rk->mode == STSA_SPARSE_TILE_ROUNDED) {
    int64_t qt = qpos / plan->q_tile, kt = kpos / plan->kv_tile;
    for (int64_t e = part->tile_ptr[qt]; e < part->tile_ptr[qt + 1]; e++)
      if (part->kv_tile[e] == kt)
        return rounded_keeps(plan, part, qt, e);
    return 0;
  }
  return stsa_mask_keep(part->mask, qi, kj);
}

/* native -> position inverse of a plan order (NULL for the identity). */
static int64_t *inverse_order(const int64_t *native, int64_t n, int *failed) {
  if (!native)
    return NULL;
  int64_t *pos = malloc(sizeof *pos * (size_t)n);
  if (!pos) {
    *failed = 1;
    return NULL;
  }
  for (int64_t p = 0; p < n; p++)
    pos[native[p]] = p;
  return pos;
}

static stsa_status run_ref(ref_keep_ctx *rk, int64_t heads, const stsa_tensor *q,
                           const stsa_tensor *k, const stsa_tensor *v,
                           const stsa_tensor *out, const stsa_attn_opts *opts,
                           int threads) {
  int failed = 0;
  rk->q_pos = calloc((size_t)heads, sizeof *rk->q_pos);
  rk->kv_pos = calloc((size_t)heads, sizeof *rk->kv_pos);
  failed = !rk->q_pos || !rk->kv_pos;
  for (int64_t h = 0;
       !failed && h < heads && rk->mode == STSA_SPARSE_TILE_ROUNDED && !rk->prepermuted;
       h++) {
    const stsa_plan *plan = plan_of(rk->route, h);
    if (!plan->q_sampled) /* a permutation of s_q = N tokens */
      rk->q_pos[h] = inverse_order(plan->q_native, plan->s_q, &failed);
    rk->kv_pos[h] = inverse_order(plan->kv_native, plan->s_kv, &failed);
  }
  const int64_t rows = q->shape[0] * q->shape[2] * q->shape[1];
  if (!failed)
    failed =
        stsa_attention_ref_parallel(q, k, v, out, opts, ref_keep, rk, 0, rows, threads);
  for (int64_t h = 0; h < heads && rk->q_pos && rk->kv_pos; h++) {
    free(rk->q_pos[h]);
    free(rk->kv_pos[h]);
  }
  free(rk->q_pos);
  free(rk->kv_pos);
  return failed ? STSA_ERR_OUT_OF_MEMORY : STSA_OK;
}

stsa_status stsa_sparse_attention_heads(stsa_ctx *ctx, const stsa_plan *const *plans,
                                        const int64_t *plan_heads, const stsa_tensor *q,
                                        const stsa_tensor *k, const stsa_tensor *v,
                                        const stsa_tensor *out,
                                        const stsa_sparse_opts *opts, int check_finite) {
  stsa_errbuf *err = &ctx->err;
  stsa_attn_opts dense_opts = {opts ? opts->scale : 0.0f, opts ? opts->lse : NULL};
  STSA_TRY(stsa_check_attention(q, k, v, out, &dense_opts, check_finite, err));
  stsa_sparse_mode mode = opts ? opts->mode : STSA_SPARSE_EXACT;
  STSA_RETURN_IF((unsigned)mode >= STSA_SPARSE_MODE_COUNT_, err, STSA_ERR_BAD_PARAM,
                 "sparse mode %d is not one of exact, naive, tile-rounded", (int)mode);
  STSA_RETURN_IF(opts && (opts->flags & ~(unsigned)STSA_SPARSE_PREPERMUTED), err,
                 STSA_ERR_BAD_PARAM,
                 "sparse attention: unknown flags 0x%x (known: STSA_SPARSE_PREPERMUTED)",
                 opts->flags & ~(unsigned)STSA_SPARSE_PREPERMUTED);
  const int64_t H = q->shape[2];
  for (int64_t h = 0; h < H; h++) {
    const stsa_plan *plan = plans[h];
    STSA_RETURN_IF(plan->q_sampled && q->shape[1] != plan->s_q, err, STSA_ERR_BAD_SHAPE,
                   "plan is over %lld sampled query rows (q_rows): q and out hold those "
                   "rows only, in q_rows order, but q has %lld tokens",
                   (long long)plan->s_q, (long long)q->shape[1]);
    STSA_RETURN_IF(q->shape[1] != plan->s_q || k->shape[1] != plan->s_kv, err,
                   STSA_ERR_BAD_SHAPE,
                   "plan is for S_q = %lld, S_kv = %lld but q has %lld and k %lld tokens",
                   (long long)plan->s_q, (long long)plan->s_kv, (long long)q->shape[1],
                   (long long)k->shape[1]);
    STSA_RETURN_IF(plan_heads[h] < 0 || plan_heads[h] >= plan->heads, err,
                   STSA_ERR_BAD_SHAPE, "head %lld follows plan head %lld of %lld",
                   (long long)h, (long long)plan_heads[h], (long long)plan->heads);
    STSA_RETURN_IF(plan->q_tile != plans[0]->q_tile || plan->kv_tile != plans[0]->kv_tile,
                   err, STSA_ERR_BAD_PARAM, "the heads' plans use different tile sizes");
  }
  head_route route = {plans, plan_heads};
  int prepermuted = opts && (opts->flags & STSA_SPARSE_PREPERMUTED);
  if (opts && opts->pairs_changed)
    *opts->pairs_changed = mode == STSA_SPARSE_TILE_ROUNDED
                               ? rounded_pairs_changed(&route, H, q->shape[0])
                               : 0;

  if (ctx->run->ref) {
    ref_keep_ctx rk = {&route, mode, prepermuted, NULL, NULL};
    STSA_RETURN_IF(run_ref(&rk, H, q, k, v, out, &dense_opts, ctx->threads) != STSA_OK,
                   err, STSA_ERR_OUT_OF_MEMORY, "sparse attention: out of memory");
    return STSA_OK;
  }
  stsa_attn_problem pb;
  stsa_problem_init(&pb, q, k, v, out, &dense_opts, plans[0]->q_tile, plans[0]->kv_tile,
                    &ctx->run->kern);
  sparse_run run = {&pb, route, mode, prepermuted,
                    used_tiles(&route, H, stsa_kv_tiles(&pb))};
  STSA_RETURN_IF(!run.used, err, STSA_ERR_OUT_OF_MEMORY,
                 "sparse attention: out of memory");
  stsa_work_source src = {sparse_unit, sparse_cost, sparse_used, sparse_kv_rows, &run};
  stsa_status st = stsa_drive(&pb, ctx->threads, &src, &ctx->packed);
  free(run.used);
  STSA_RETURN_IF(st != STSA_OK, err, st, "sparse attention: out of memory for scratch");
  return STSA_OK;
}

stsa_status stsa_sparse_attention(stsa_ctx *ctx, const stsa_plan *plan,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, const stsa_tensor *out,
                                  const stsa_sparse_opts *opts) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  STSA_RETURN_IF(!plan, &ctx->err, STSA_ERR_NULL_ARG, "plan is NULL");
  STSA_TRY(stsa_check_tensor(q, "q", &ctx->err));
  STSA_RETURN_IF(q->shape[2] != plan->heads, &ctx->err, STSA_ERR_BAD_SHAPE,
                 "plan has %lld heads but q has %lld", (long long)plan->heads,
                 (long long)q->shape[2]);
  const int64_t H = plan->heads;
  const stsa_plan **plans = malloc(sizeof *plans * (size_t)H);
  int64_t *heads = malloc(sizeof *heads * (size_t)H);
  if (!plans || !heads) {
    free(plans);
    free(heads);
    return stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY,
                     "sparse attention: out of memory");
  }
  for (int64_t h = 0; h < H; h++) {
    plans[h] = plan;
    heads[h] = h;
  }
  stsa_status st = stsa_sparse_attention_heads(ctx, plans, heads, q, k, v, out, opts,
                                               ctx->check_finite);
  free(plans);
  free(heads);
  return st;
}
