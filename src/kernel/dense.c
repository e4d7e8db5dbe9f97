/*
 * dense.c — the dense attention entry points: validation, backend choice, and
 * the two ways to run in parallel (own OpenMP threads, or part ith of nth).
 *
 * Work is split over (batch, head, q tile) units. Each unit computes its rows
 * in a fixed order whatever thread runs it, so the output is bitwise the same
 * for any thread count or partitioning.
 */
#include <stdlib.h>

#include "core/context.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "kernel/driver.h"
#include "kernel/ref/attention_ref.h"

stsa_status stsa_attention_check(stsa_ctx *ctx, const stsa_tensor *q,
                                 const stsa_tensor *k, const stsa_tensor *v,
                                 const stsa_tensor *out, const stsa_attn_opts *opts) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  return stsa_check_attention(q, k, v, out, opts, ctx->check_finite, &ctx->err);
}

/* Reference backend over rows [row0, row1) with `threads` threads. */
static stsa_status run_ref(const stsa_tensor *q, const stsa_tensor *k,
                           const stsa_tensor *v, const stsa_tensor *out,
                           const stsa_attn_opts *opts, int64_t row0, int64_t row1,
                           int threads) {
  return stsa_attention_ref_parallel(q, k, v, out, opts, NULL, NULL, row0, row1, threads)
             ? STSA_ERR_OUT_OF_MEMORY
             : STSA_OK;
}

stsa_status stsa_attention(stsa_ctx *ctx, const stsa_tensor *q, const stsa_tensor *k,
                           const stsa_tensor *v, const stsa_tensor *out,
                           const stsa_attn_opts *opts) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  STSA_TRY(stsa_check_attention(q, k, v, out, opts, ctx->check_finite, &ctx->err));
  stsa_status st;
  if (ctx->run->ref) {
    st = run_ref(q, k, v, out, opts, 0, q->shape[0] * q->shape[2] * q->shape[1],
                 ctx->threads);
  } else {
    stsa_attn_problem pb;
    stsa_problem_init(&pb, q, k, v, out, opts, ctx->q_tile, ctx->kv_tile,
                      &ctx->run->kern);
    st = stsa_drive(&pb, ctx->threads, NULL, &ctx->packed);
  }
  if (st != STSA_OK)
    stsa_fail(&ctx->err, st, "attention: out of memory for scratch");
  return st;
}

/* Part ith of nth of a run over `units` units: [*u0, *u1). */
static void part_range(int64_t units, int ith, int nth, int64_t *u0, int64_t *u1) {
  *u0 = units * ith / nth;
  *u1 = units * (ith + 1) / nth;
}

static stsa_status attention_part(const stsa_ctx *ctx, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v,
                                  const stsa_tensor *out, const stsa_attn_opts *opts,
                                  int ith, int nth, stsa_errbuf *err) {
  STSA_RETURN_IF(nth < 1 || ith < 0 || ith >= nth, err, STSA_ERR_BAD_PARAM,
                 "attention part: ith = %d, nth = %d, expected 0 <= ith < nth", ith, nth);
  STSA_TRY(stsa_check_attention(q, k, v, out, opts, ctx->check_finite, err));
  int64_t u0, u1;
  if (ctx->run->ref) {
    part_range(q->shape[0] * q->shape[2] * q->shape[1], ith, nth, &u0, &u1);
    STSA_RETURN_IF(run_ref(q, k, v, out, opts, u0, u1, 1) != STSA_OK, err,
                   STSA_ERR_OUT_OF_MEMORY, "attention part: out of memory");
    return STSA_OK;
  }
  stsa_attn_problem pb;
  stsa_problem_init(&pb, q, k, v, out, opts, ctx->q_tile, ctx->kv_tile, &ctx->run->kern);
  const int64_t nqt = stsa_q_tiles(&pb), nkt = stsa_kv_tiles(&pb);
  part_range(pb.B * pb.H * nqt, ith, nth, &u0, &u1);
  if (u0 == u1)
    return STSA_OK;
  float *pack_mem = aligned_alloc(64, stsa_kv_packed_floats(&pb) * sizeof(float));
  stsa_tile_scratch sc = {0};
  if (!pack_mem || stsa_tile_scratch_alloc(&pb, &sc) != 0) {
    free(pack_mem);
    return stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "attention part: out of memory");
  }
  stsa_kv_packed pack = stsa_kv_packed_at(&pb, pack_mem);
  int64_t packed_head = -1;
  for (int64_t u = u0; u < u1; u++) {
    int64_t head = u / nqt;
    if (head != packed_head) {
      for (int64_t t = 0; t < nkt; t++)
        stsa_pack_kv_tile(&pb, head / pb.H, head % pb.H, t, NULL, &pack);
      packed_head = head;
    }
    stsa_run_q_tile(&pb, &pack, head / pb.H, head % pb.H, u % nqt, NULL, &sc);
  }
  stsa_tile_scratch_free(&sc);
  free(pack_mem);
  return STSA_OK;
}

/* Parts run concurrently on one context: a failure's message goes in under
 * the context's lock, and a successful part leaves the message alone. */
stsa_status stsa_attention_part(const stsa_ctx *ctx, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v,
                                const stsa_tensor *out, const stsa_attn_opts *opts,
                                int ith, int nth) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  stsa_err_clear(&err);
  stsa_status st = attention_part(ctx, q, k, v, out, opts, ith, nth, &err);
  if (st != STSA_OK)
    stsa_ctx_record_error(ctx, &err);
  return st;
}
