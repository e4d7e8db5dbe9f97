/* rows_call.c — see rows_call.h. */
#include "mask/rows_call.h"

#include <stdlib.h>

#include "kernel/dispatch.h"
#include "kernel/rows_fused.h"
#include "mask/sparse_call.h"

/* Whether the plans fit the fused pass: plans[0] keeps every kv tile whole,
 * every plan is one q tile of the rows with the same tiles and native keys.
 * With per-head plans (count = nplans * H of them), every head's. */
static int fusable(const stsa_ctx *ctx, const stsa_plan *const *plans, int nplans,
                   int64_t count, const stsa_tensor *q, const stsa_tensor *k) {
  if (ctx->run->ref || nplans < 1 || nplans > STSA_FUSED_MASKS_MAX + 1)
    return 0;
  const int64_t heads = count / nplans;
  for (int64_t h = 1; h < heads; h++) /* every head's dense plan is whole tiles */
    if (!fusable(ctx, plans + h, 1, 1, q, k))
      return 0;
  for (int64_t i = 0; i < count; i++) {
    const stsa_plan *p = plans[i];
    if (p->q_tiles != 1 || p->kv_native || p->heads != 1 || p->s_q != q->shape[1] ||
        p->s_kv != k->shape[1] || p->q_tile != plans[0]->q_tile ||
        p->kv_tile != plans[0]->kv_tile)
      return 0;
  }
  const stsa_block_sparse *dense = &plans[0]->parts[plans[0]->head_part[0]].bs;
  if (dense->entries != plans[0]->kv_tiles)
    return 0;
  for (int64_t e = 0; e < dense->entries; e++)
    if (dense->kind[e] != STSA_TILE_FULL)
      return 0;
  return 1;
}

/* The fused pass's problem: the sampled rows against every key, into
 * out[0], on the plans' tiles: bf16 tiles where q, K and V are bf16 and the
 * table's bf16 unit is the faster (kernels.h: bf16_rows_unit;
 * rows_fused_bf16.h), else f32 panels. */
static void fused_problem(stsa_attn_problem *pb, const stsa_ctx *ctx,
                          const stsa_plan *const *plans, const stsa_tensor *q,
                          const stsa_tensor *k, const stsa_tensor *v,
                          const stsa_tensor *out) {
  stsa_problem_build(pb, ctx,
                     &(stsa_problem_args){.q = q,
                                          .k = k,
                                          .v = v,
                                          .out = &out[0],
                                          .q_tile = plans[0]->q_tile,
                                          .kv_tile = plans[0]->kv_tile,
                                          .f32_tiles = !ctx->run->kern.bf16_rows_unit});
}

stsa_status stsa_sparse_rows_dense_and(stsa_ctx *ctx, const stsa_plan *const *plans,
                                       int nplans, const int32_t *const *orders,
                                       const stsa_tensor *q, const stsa_tensor *k,
                                       const stsa_tensor *v, const stsa_tensor *out) {
  int done = 0;
  if (fusable(ctx, plans, nplans, nplans, q, k)) {
    stsa_attn_problem pb;
    fused_problem(&pb, ctx, plans, q, k, v, out);
    stsa_rows_fused f = {&pb, nplans - 1, {NULL}, {NULL}, {NULL}, {NULL}, NULL, NULL};
    for (int i = 1; i < nplans; i++) {
      f.bs[i - 1] = &plans[i]->parts[plans[i]->head_part[0]].bs;
      f.order[i - 1] = orders ? orders[i - 1] : NULL;
      f.out[i - 1] = &out[i];
    }
    STSA_RETURN_IF(stsa_rows_fused_run(&f, ctx->threads, &ctx->packed, &done) != STSA_OK,
                   &ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  }
  return done ? STSA_OK : stsa_sparse_rows_multi(ctx, plans, nplans, q, k, v, out);
}

stsa_status stsa_sparse_rows_dense_and_heads(stsa_ctx *ctx, const stsa_plan *const *plans,
                                             int nplans, const int32_t *const *orders,
                                             const uint8_t *heads_on,
                                             const stsa_tensor *q, const stsa_tensor *k,
                                             const stsa_tensor *v,
                                             const stsa_tensor *out) {
  const int64_t H = q->shape[2];
  int done = 0;
  const stsa_block_sparse **bs = malloc(sizeof *bs * (size_t)(nplans * H));
  STSA_RETURN_IF(!bs, &ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  if (fusable(ctx, plans, nplans, nplans * H, q, k)) {
    stsa_attn_problem pb;
    fused_problem(&pb, ctx, plans, q, k, v, out);
    stsa_rows_fused f = {&pb,    nplans - 1, {NULL}, {NULL},
                         {NULL}, {NULL},     orders, heads_on};
    for (int64_t i = 0; i < nplans * H; i++)
      bs[i] = &plans[i]->parts[plans[i]->head_part[0]].bs;
    for (int i = 1; i < nplans; i++) {
      f.bs_head[i - 1] = bs + i * H;
      f.out[i - 1] = &out[i];
    }
    if (stsa_rows_fused_run(&f, ctx->threads, &ctx->packed, &done) != STSA_OK) {
      free(bs);
      return stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
    }
  }
  free(bs);
  return done ? STSA_OK : stsa_sparse_rows_per_head(ctx, plans, nplans, q, k, v, out);
}
