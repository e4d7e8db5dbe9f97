/*
 * sparse_call.c — block-sparse attention over plans (see sparse_call.h).
 * The three modes reproduce the TPU post's progression, and all three become
 * plain kernel input here:
 *   EXACT         the plan's block structure as built: mask-free FULL tiles,
 *                 stored row intervals on PARTIAL ones (B2)
 *   NAIVE         every visited tile PARTIAL, the mask predicate asked per
 *                 pair from token coordinates (B1)
 *   TILE_ROUNDED  a derived structure where partial tiles became FULL
 *                 (>= half kept) or vanished (B3, lossy)
 */
#include "mask/sparse_call.h"

#include <math.h>
#include <stdlib.h>

#include "core/sized.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/parts.h"
#include "kernel/sparse.h"

const char *stsa_sparse_mode_name(stsa_sparse_mode mode) {
  static const char *const names[STSA_SPARSE_MODE_COUNT_] = {
      [STSA_SPARSE_EXACT] = "exact",
      [STSA_SPARSE_NAIVE] = "naive",
      [STSA_SPARSE_TILE_ROUNDED] = "tile-rounded",
  };
  return (unsigned)mode < STSA_SPARSE_MODE_COUNT_ ? names[mode] : "unknown";
}

/* Rows of q tile qt and columns of kv tile kt of a part's structure
 * (variable tiles where it has them). */
static int tile_rows(const stsa_plan *plan, const stsa_block_sparse *bs, int64_t qt) {
  if (bs->q_start)
    return (int)(bs->q_start[qt + 1] - bs->q_start[qt]);
  int64_t r = plan->s_q - qt * plan->q_tile;
  return (int)(r < plan->q_tile ? r : plan->q_tile);
}

static int tile_cols(const stsa_plan *plan, const stsa_block_sparse *bs, int64_t kt) {
  if (bs->kv_start)
    return (int)(bs->kv_start[kt + 1] - bs->kv_start[kt]);
  int64_t c = plan->s_kv - kt * plan->kv_tile;
  return (int)(c < plan->kv_tile ? c : plan->kv_tile);
}

static const stsa_plan_part *part_of(const stsa_plan *plan, int64_t plan_head) {
  return &plan->parts[plan->head_part[plan_head]];
}

/* TILE_ROUNDED: a partial entry becomes full when at least half its pairs are
 * kept, and is dropped otherwise. A q tile left with nothing keeps its
 * partial entries as full, so that no row loses all its keys. */
static int rounded_keeps(const stsa_plan *plan, const stsa_plan_part *part, int64_t qt,
                         int64_t e) {
  const stsa_block_sparse *bs = &part->bs;
  if (bs->kind[e] == STSA_TILE_FULL)
    return 1;
  int64_t pairs = (int64_t)tile_rows(plan, bs, qt) * tile_cols(plan, bs, bs->kv_tile[e]);
  if (2 * part->rounded_kept[e] >= pairs)
    return 1;
  for (int64_t f = bs->tile_ptr[qt]; f < bs->tile_ptr[qt + 1]; f++) {
    int64_t fpairs =
        (int64_t)tile_rows(plan, bs, qt) * tile_cols(plan, bs, bs->kv_tile[f]);
    if (bs->kind[f] == STSA_TILE_FULL || 2 * part->rounded_kept[f] >= fpairs)
      return 0; /* the q tile keeps something else */
  }
  return 1;
}

/* Pairs whose keep flag TILE_ROUNDED flips in one head. */
static int64_t rounded_pairs_changed(const stsa_plan *plan, const stsa_plan_part *part) {
  const stsa_block_sparse *bs = &part->bs;
  int64_t changed = 0;
  for (int64_t qt = 0; qt < plan->q_tiles; qt++)
    for (int64_t e = bs->tile_ptr[qt]; e < bs->tile_ptr[qt + 1]; e++) {
      if (bs->kind[e] != STSA_TILE_PARTIAL)
        continue;
      int64_t pairs =
          (int64_t)tile_rows(plan, bs, qt) * tile_cols(plan, bs, bs->kv_tile[e]);
      changed += rounded_keeps(plan, part, qt, e) ? pairs - part->rounded_kept[e]
                                                  : part->rounded_kept[e];
    }
  return changed;
}

/* The TILE_ROUNDED structure of a part: FULL entries only. 0, or -1 when out
 * of memory. */
static int round_part(const stsa_plan *plan, const stsa_plan_part *part,
                      stsa_block_sparse *out) {
  const stsa_block_sparse *bs = &part->bs;
  *out = (stsa_block_sparse){0};
  out->q_tiles = bs->q_tiles;
  /* the same tiles, variable ones included (SVG2's cluster plans) */
  out->q_start = bs->q_start;
  out->kv_tiles = bs->kv_tiles;
  out->kv_start = bs->kv_start;
  out->kv_pack = bs->kv_pack;
  out->tile_ptr = malloc(sizeof *out->tile_ptr * (size_t)(bs->q_tiles + 1));
  out->kv_tile = malloc(sizeof *out->kv_tile * (size_t)(bs->entries + 1));
  out->kind = malloc((size_t)bs->entries + 1);
  if (!out->tile_ptr || !out->kv_tile || !out->kind)
    return -1;
  out->tile_ptr[0] = 0;
  for (int64_t qt = 0; qt < bs->q_tiles; qt++) {
    for (int64_t e = bs->tile_ptr[qt]; e < bs->tile_ptr[qt + 1]; e++)
      if (rounded_keeps(plan, part, qt, e)) {
        out->kv_tile[out->entries] = bs->kv_tile[e];
        out->kind[out->entries++] = STSA_TILE_FULL;
      }
    out->tile_ptr[qt + 1] = out->entries;
  }
  return 0;
}

static void free_rounded(stsa_block_sparse *bs) {
  free(bs->tile_ptr);
  free(bs->kv_tile);
  free(bs->kind);
}

/* NAIVE mode's mask: the mask predicate per pair, from token coordinates. */
typedef struct naive_mask {
  const stsa_plan *plan;
  const stsa_mask *mask;
} naive_mask;

static void apply_predicate(const void *mask_ctx, int64_t entry, int64_t q0, int r0,
                            int rows, int64_t k0, int n, float *s, int ld_s) {
  (void)entry;
  const naive_mask *nm = mask_ctx;
  const stsa_plan *plan = nm->plan;
  for (int r = 0; r < rows; r++) {
    const int64_t qp = q0 + r0 + r;
    int64_t qi = plan->q_native ? plan->q_native[qp] : qp;
    float *row = s + (int64_t)r * ld_s;
    for (int c = 0; c < n; c++) {
      int64_t kj = plan->kv_token ? plan->kv_token[k0 + c] : k0 + c;
      if (!stsa_mask_keep(nm->mask, qi, kj))
        row[c] = -INFINITY;
    }
  }
}

/* Everything one call hands the kernel, per tensor head. */
typedef struct sparse_call {
  stsa_sparse_head *heads;    /* [H] */
  naive_mask *naive;          /* [H] */
  stsa_block_sparse *rounded; /* [H], TILE_ROUNDED only */
  int64_t H;
} sparse_call;

static void call_free(sparse_call *c) {
  for (int64_t h = 0; c->rounded && h < c->H; h++)
    free_rounded(&c->rounded[h]);
  free(c->rounded);
  free(c->naive);
  free(c->heads);
}

/* The kernel input of validated arguments. */
static stsa_status call_init(sparse_call *c, const stsa_plan *const *plans,
                             const int64_t *plan_heads, int64_t H, stsa_sparse_mode mode,
                             int prepermuted, stsa_errbuf *err) {
  *c = (sparse_call){0};
  c->H = H;
  c->heads = calloc((size_t)H, sizeof *c->heads);
  c->naive = calloc((size_t)H, sizeof *c->naive);
  int failed = !c->heads || !c->naive;
  if (!failed && mode == STSA_SPARSE_TILE_ROUNDED)
    failed = !(c->rounded = calloc((size_t)H, sizeof *c->rounded));
  for (int64_t h = 0; !failed && h < H; h++) {
    const stsa_plan *plan = plans[h];
    const stsa_plan_part *part = part_of(plan, plan_heads[h]);
    stsa_sparse_head *sh = &c->heads[h];
    sh->bs = &part->bs;
    /* q/out/lse rows are plan positions when prepermuted, and always for a
     * plan over sampled rows (q_rows): only native-order tensors gather */
    sh->q_rows = prepermuted || plan->q_sampled ? NULL : plan->q_native;
    /* kv_native holds rows of k/v, which for a key subset (kv_rows) are
     * indices into it, not tokens */
    sh->kv_rows = prepermuted ? NULL : plan->kv_native;
    if (mode == STSA_SPARSE_NAIVE) {
      c->naive[h] = (naive_mask){plan, part->mask};
      sh->mask = apply_predicate;
      sh->mask_ctx = &c->naive[h];
      sh->all_partial = 1;
    } else if (mode == STSA_SPARSE_TILE_ROUNDED) {
      failed = round_part(plan, part, &c->rounded[h]) != 0;
      sh->bs = &c->rounded[h];
    }
  }
  if (failed) {
    call_free(c);
    return stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "sparse attention: out of memory");
  }
  return STSA_OK;
}

/* The dense options a sparse call's scale and lse amount to. */
static stsa_attn_opts dense_opts_of(const stsa_sparse_opts *opts) {
  stsa_attn_opts d = {sizeof d, opts ? opts->scale : 0.0f, opts ? opts->lse : NULL};
  return d;
}

/* Checks the arguments of a call: tensors, mode and flags, and that every
 * head's plan fits the tensors and the context's kernels. */
static stsa_status check_call(const stsa_ctx *ctx, const stsa_plan *const *plans,
                              const int64_t *plan_heads, const stsa_tensor *q,
                              const stsa_tensor *k, const stsa_tensor *v,
                              const stsa_tensor *out, const stsa_sparse_opts *opts,
                              int finite_threads, stsa_errbuf *err) {
  if (opts)
    STSA_TRY(STSA_SIZED_CHECK(opts, stsa_sparse_opts, err));
  const stsa_attn_opts dense_opts = dense_opts_of(opts);
  STSA_TRY(stsa_check_attention(q, k, v, out, &dense_opts, finite_threads, err));
  stsa_sparse_mode mode = opts ? opts->mode : STSA_SPARSE_EXACT;
  STSA_RETURN_IF((unsigned)mode >= STSA_SPARSE_MODE_COUNT_, err, STSA_ERR_BAD_PARAM,
                 "sparse mode %d is not one of exact, naive, tile-rounded", (int)mode);
  STSA_RETURN_IF(opts && (opts->flags & ~(unsigned)STSA_SPARSE_PREPERMUTED), err,
                 STSA_ERR_BAD_PARAM,
                 "sparse attention: unknown flags 0x%x (known: STSA_SPARSE_PREPERMUTED)",
                 opts->flags & ~(unsigned)STSA_SPARSE_PREPERMUTED);
  const int mr = ctx->run->kern.mr, nr = ctx->run->kern.nr;
  for (int64_t h = 0; h < q->shape[2]; h++) {
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
    STSA_RETURN_IF(plan->q_tile % mr != 0 || plan->kv_tile % nr != 0, err,
                   STSA_ERR_BAD_PARAM,
                   "plan tiles %d x %d do not fit the %s kernels' %d x %d register tile "
                   "(build the plan on a context with this backend)",
                   plan->q_tile, plan->kv_tile, ctx->run->kern.name, mr, nr);
  }
  return STSA_OK;
}

/* pairs_changed of the call's opts, over every batch entry and head. */
static void report_pairs_changed(const stsa_plan *const *plans, const int64_t *plan_heads,
                                 const stsa_tensor *q, const stsa_sparse_opts *opts) {
  if (!opts || !opts->pairs_changed)
    return;
  int64_t changed = 0;
  for (int64_t h = 0; opts->mode == STSA_SPARSE_TILE_ROUNDED && h < q->shape[2]; h++)
    changed += rounded_pairs_changed(plans[h], part_of(plans[h], plan_heads[h]));
  *opts->pairs_changed = changed * q->shape[0];
}

/* A validated call's problem, kernel input and work. */
typedef struct prepared {
  stsa_attn_problem pb;
  sparse_call call;
  stsa_sparse_run run;
  stsa_work work;
} prepared;

static stsa_status prepare(const stsa_ctx *ctx, const stsa_plan *const *plans,
                           const int64_t *plan_heads, const stsa_tensor *q,
                           const stsa_tensor *k, const stsa_tensor *v,
                           const stsa_tensor *out, const stsa_sparse_opts *opts,
                           prepared *p, stsa_errbuf *err) {
  const stsa_attn_opts dense_opts = dense_opts_of(opts);
  STSA_TRY(call_init(&p->call, plans, plan_heads, q->shape[2],
                     opts ? opts->mode : STSA_SPARSE_EXACT,
                     opts && (opts->flags & STSA_SPARSE_PREPERMUTED), err));
  stsa_problem_build(&p->pb, ctx,
                     &(stsa_problem_args){.q = q,
                                          .k = k,
                                          .v = v,
                                          .out = out,
                                          .opts = &dense_opts,
                                          .q_tile = plans[0]->q_tile,
                                          .kv_tile = plans[0]->kv_tile,
                                          .heads = p->call.heads});
  p->work = stsa_sparse_work(&p->run, &p->pb, p->call.heads, ctx->run->ref);
  return STSA_OK;
}

stsa_status stsa_sparse_attention_heads(stsa_ctx *ctx, const stsa_plan *const *plans,
                                        const int64_t *plan_heads, const stsa_tensor *q,
                                        const stsa_tensor *k, const stsa_tensor *v,
                                        const stsa_tensor *out,
                                        const stsa_sparse_opts *opts,
                                        int finite_threads) {
  stsa_errbuf *err = &ctx->err;
  STSA_TRY(check_call(ctx, plans, plan_heads, q, k, v, out, opts, finite_threads, err));
  report_pairs_changed(plans, plan_heads, q, opts);
  prepared p;
  STSA_TRY(prepare(ctx, plans, plan_heads, q, k, v, out, opts, &p, err));
  stsa_status st = stsa_work_run(&p.work, ctx->threads, &ctx->packed);
  call_free(&p.call);
  STSA_RETURN_IF(st != STSA_OK, err, st,
                 "sparse attention: out of memory for packed K/V");
  stsa_problem_record_run(&p.pb, ctx);
  return STSA_OK;
}

/* Every head of the tensors follows the same-numbered head of one plan. */
typedef struct one_plan {
  const stsa_plan **plans;
  int64_t *heads;
} one_plan;

static stsa_status one_plan_init(one_plan *o, const stsa_plan *plan, const stsa_tensor *q,
                                 stsa_errbuf *err) {
  *o = (one_plan){0};
  STSA_RETURN_IF(!plan, err, STSA_ERR_NULL_ARG, "plan is NULL");
  STSA_TRY(stsa_check_tensor(q, "q", err));
  STSA_RETURN_IF(q->shape[2] != plan->heads, err, STSA_ERR_BAD_SHAPE,
                 "plan has %lld heads but q has %lld", (long long)plan->heads,
                 (long long)q->shape[2]);
  o->plans = malloc(sizeof *o->plans * (size_t)plan->heads);
  o->heads = malloc(sizeof *o->heads * (size_t)plan->heads);
  if (!o->plans || !o->heads) {
    free(o->plans);
    free(o->heads);
    return stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "sparse attention: out of memory");
  }
  for (int64_t h = 0; h < plan->heads; h++) {
    o->plans[h] = plan;
    o->heads[h] = h;
  }
  return STSA_OK;
}

static void one_plan_free(one_plan *o) {
  free(o->plans);
  free(o->heads);
}

stsa_status stsa_sparse_attention(stsa_ctx *ctx, const stsa_plan *plan,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, const stsa_tensor *out,
                                  const stsa_sparse_opts *opts) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  one_plan o;
  STSA_TRY(one_plan_init(&o, plan, q, &ctx->err));
  stsa_status st = stsa_sparse_attention_heads(ctx, o.plans, o.heads, q, k, v, out, opts,
                                               stsa_finite_threads(ctx));
  one_plan_free(&o);
  return st;
}

/* Part ith of nth, or (wdata NULL, wsize not) the work buffer's size. */
static stsa_status sparse_part(const stsa_ctx *ctx, const stsa_plan *plan,
                               const stsa_tensor *q, const stsa_tensor *k,
                               const stsa_tensor *v, const stsa_tensor *out,
                               const stsa_sparse_opts *opts, int ith, int nth,
                               void *wdata, size_t *wsize, stsa_errbuf *err) {
  const char *what = wdata ? "sparse attention part" : "sparse attention wsize";
  STSA_TRY(stsa_parts_check(nth, ith, wdata ? wdata : (void *)wsize, what, err));
  one_plan o;
  STSA_TRY(one_plan_init(&o, plan, q, err));
  stsa_status st = check_call(ctx, o.plans, o.heads, q, k, v, out, opts,
                              wdata && ctx->check_finite ? 1 : 0, err);
  prepared p;
  if (st == STSA_OK)
    st = prepare(ctx, o.plans, o.heads, q, k, v, out, opts, &p, err);
  if (st == STSA_OK) {
    if (wdata) {
      if (ith == 0)
        report_pairs_changed(o.plans, o.heads, q, opts);
      st = stsa_parts_run(&p.work, ith, nth, wdata, *wsize, what, err);
      if (st == STSA_OK && ith == 0) /* one part records what they all ran */
        stsa_problem_record_run(&p.pb, ctx);
    } else {
      *wsize = stsa_parts_wsize(&p.work, nth);
    }
    call_free(&p.call);
  }
  one_plan_free(&o);
  return st;
}

stsa_status stsa_sparse_attention_part_wsize(const stsa_ctx *ctx, const stsa_plan *plan,
                                             const stsa_tensor *q, const stsa_tensor *k,
                                             const stsa_tensor *v, const stsa_tensor *out,
                                             const stsa_sparse_opts *opts, int nth,
                                             size_t *wsize) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  stsa_err_clear(&err);
  stsa_status st = sparse_part(ctx, plan, q, k, v, out, opts, 0, nth, NULL, wsize, &err);
  if (st != STSA_OK)
    stsa_ctx_record_error(ctx, &err);
  return st;
}

stsa_status stsa_sparse_attention_part(const stsa_ctx *ctx, const stsa_plan *plan,
                                       const stsa_tensor *q, const stsa_tensor *k,
                                       const stsa_tensor *v, const stsa_tensor *out,
                                       const stsa_sparse_opts *opts, int ith, int nth,
                                       void *wdata, size_t wsize) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  stsa_err_clear(&err);
  stsa_status st =
      sparse_part(ctx, plan, q, k, v, out, opts, ith, nth, wdata, &wsize, &err);
  if (st != STSA_OK)
    stsa_ctx_record_error(ctx, &err);
  return st;
}

/* Profiling rows: output i of head h follows plans[i * per_head + h] when
 * per_head (= H), else plans[i] for every head. */
static stsa_status rows_run(stsa_ctx *ctx, const stsa_plan *const *plans, int nplans,
                            int64_t per_head, const stsa_tensor *q, const stsa_tensor *k,
                            const stsa_tensor *v, const stsa_tensor *out) {
  STSA_RETURN_IF(nplans < 1 || nplans > STSA_ROWS_MAX, &ctx->err, STSA_ERR_BAD_PARAM,
                 "profiling: %d plans (1..%d)", nplans, STSA_ROWS_MAX);
  const int64_t count = per_head ? nplans * per_head : nplans;
  for (int64_t i = 0; i < count; i++)
    STSA_RETURN_IF(plans[i]->q_tiles != 1 || plans[i]->kv_native ||
                       plans[i]->kv_tile != plans[0]->kv_tile ||
                       plans[i]->q_tile != plans[0]->q_tile ||
                       plans[i]->s_q != q->shape[1] || plans[i]->s_kv != k->shape[1],
                   &ctx->err, STSA_ERR_BAD_PARAM,
                   "profiling: plan %lld does not fit the sampled rows", (long long)i);
  const stsa_block_sparse **bs = NULL;
  if (per_head) {
    bs = malloc(sizeof *bs * (size_t)count);
    STSA_RETURN_IF(!bs, &ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
    for (int64_t i = 0; i < count; i++)
      bs[i] = &part_of(plans[i], 0)->bs;
  }
  stsa_attn_problem pb[STSA_ROWS_MAX];
  stsa_rows_run run = {{NULL}, {NULL}, {NULL}, nplans};
  for (int i = 0; i < nplans; i++) {
    const stsa_plan *first = plans[per_head ? i * per_head : i];
    stsa_problem_build(&pb[i], ctx,
                       &(stsa_problem_args){.q = q,
                                            .k = k,
                                            .v = v,
                                            .out = &out[i],
                                            .q_tile = first->q_tile,
                                            .kv_tile = first->kv_tile,
                                            .f32_tiles = 1});
    run.pb[i] = &pb[i];
    run.bs[i] = &part_of(first, 0)->bs;
    run.bs_of_head[i] = bs ? bs + i * per_head : NULL;
  }
  stsa_work w = stsa_rows_work(&run, ctx->run->ref);
  stsa_status st = stsa_work_run(&w, ctx->threads, &ctx->packed);
  free(bs);
  STSA_RETURN_IF(st != STSA_OK, &ctx->err, STSA_ERR_OUT_OF_MEMORY,
                 "profiling: out of memory");
  return STSA_OK;
}

stsa_status stsa_sparse_rows_multi(stsa_ctx *ctx, const stsa_plan *const *plans,
                                   int nplans, const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, const stsa_tensor *out) {
  return rows_run(ctx, plans, nplans, 0, q, k, v, out);
}

stsa_status stsa_sparse_rows_per_head(stsa_ctx *ctx, const stsa_plan *const *plans,
                                      int nplans, const stsa_tensor *q,
                                      const stsa_tensor *k, const stsa_tensor *v,
                                      const stsa_tensor *out) {
  return rows_run(ctx, plans, nplans, q->shape[2], q, k, v, out);
}
