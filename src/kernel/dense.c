/*
 * dense.c — the dense attention entry points: validation, then the one
 * scheduler (schedule.h) on the library's threads or as part ith of nth in
 * the caller's work buffer.
 */
#include "core/context.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/parts.h"
#include "kernel/schedule.h"

stsa_status stsa_attention_check(stsa_ctx *ctx, const stsa_tensor *q,
                                 const stsa_tensor *k, const stsa_tensor *v,
                                 const stsa_tensor *out, const stsa_attn_opts *opts) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  return stsa_check_attention(q, k, v, out, opts, stsa_finite_threads(ctx), &ctx->err);
}

/* The dense work of validated arguments. */
static stsa_work dense_work(const stsa_ctx *ctx, stsa_attn_problem *pb,
                            const stsa_tensor *q, const stsa_tensor *k,
                            const stsa_tensor *v, const stsa_tensor *out,
                            const stsa_attn_opts *opts) {
  stsa_problem_build(pb, ctx,
                     &(stsa_problem_args){.q = q,
                                          .k = k,
                                          .v = v,
                                          .out = out,
                                          .opts = opts,
                                          .q_tile = ctx->q_tile,
                                          .kv_tile = ctx->kv_tile});
  stsa_work w = {pb, pb->B * pb->H, stsa_q_tiles(pb), ctx->run->ref, 0, NULL, NULL};
  return w;
}

stsa_status stsa_attention(stsa_ctx *ctx, const stsa_tensor *q, const stsa_tensor *k,
                           const stsa_tensor *v, const stsa_tensor *out,
                           const stsa_attn_opts *opts) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  STSA_TRY(stsa_check_attention(q, k, v, out, opts, stsa_finite_threads(ctx), &ctx->err));
  stsa_attn_problem pb;
  stsa_work w = dense_work(ctx, &pb, q, k, v, out, opts);
  STSA_RETURN_IF(stsa_work_run(&w, ctx->threads, &ctx->packed) != STSA_OK, &ctx->err,
                 STSA_ERR_OUT_OF_MEMORY, "attention: out of memory for packed K/V");
  stsa_problem_record_run(&pb, ctx);
  return STSA_OK;
}

static stsa_status attention_wsize(const stsa_ctx *ctx, const stsa_tensor *q,
                                   const stsa_tensor *k, const stsa_tensor *v,
                                   const stsa_tensor *out, const stsa_attn_opts *opts,
                                   int nth, size_t *wsize, stsa_errbuf *err) {
  STSA_TRY(stsa_parts_check(nth, 0, wsize, "attention", err));
  STSA_TRY(stsa_check_attention(q, k, v, out, opts, 0, err));
  stsa_attn_problem pb;
  stsa_work w = dense_work(ctx, &pb, q, k, v, out, opts);
  *wsize = stsa_parts_wsize(&w, nth);
  return STSA_OK;
}

stsa_status stsa_attention_part_wsize(const stsa_ctx *ctx, const stsa_tensor *q,
                                      const stsa_tensor *k, const stsa_tensor *v,
                                      const stsa_tensor *out, const stsa_attn_opts *opts,
                                      int nth, size_t *wsize) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  stsa_err_clear(&err);
  stsa_status st = attention_wsize(ctx, q, k, v, out, opts, nth, wsize, &err);
  if (st != STSA_OK)
    stsa_ctx_record_error(ctx, &err);
  return st;
}

static stsa_status attention_part(const stsa_ctx *ctx, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v,
                                  const stsa_tensor *out, const stsa_attn_opts *opts,
                                  int ith, int nth, void *wdata, size_t wsize,
                                  stsa_errbuf *err) {
  STSA_TRY(stsa_parts_check(nth, ith, wdata, "attention part", err));
  /* on the caller's thread: a part starts no threads of its own */
  STSA_TRY(stsa_check_attention(q, k, v, out, opts, ctx->check_finite ? 1 : 0, err));
  stsa_attn_problem pb;
  stsa_work w = dense_work(ctx, &pb, q, k, v, out, opts);
  STSA_TRY(stsa_parts_run(&w, ith, nth, wdata, wsize, "attention part", err));
  if (ith == 0) /* every part runs the same arithmetic: one records it */
    stsa_problem_record_run(&pb, ctx);
  return STSA_OK;
}

/* Parts run concurrently on one context: a failure's message goes in under
 * the context's lock, and a successful part leaves the message alone. */
stsa_status stsa_attention_part(const stsa_ctx *ctx, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v,
                                const stsa_tensor *out, const stsa_attn_opts *opts,
                                int ith, int nth, void *wdata, size_t wsize) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  stsa_err_clear(&err);
  stsa_status st = attention_part(ctx, q, k, v, out, opts, ith, nth, wdata, wsize, &err);
  if (st != STSA_OK)
    stsa_ctx_record_error(ctx, &err);
  return st;
}
