/*
 * sparse_rows.c — a few query rows under several masks in one pass over K/V,
 * for SVG's online profiling: per head, K and V are packed once and the one q
 * tile of sampled rows is run against each plan's kv list. Packing (tens of
 * MB per head) is what three separate calls would repeat.
 */
#include <omp.h>
#include <stdlib.h>

#include "core/context.h"
#include "kernel/dispatch.h"
#include "kernel/sparse.h"
#include "kernel/tile_loop.h"

/* Mask context of one plan's q tile 0. */
typedef struct rows_mask {
  const stsa_plan_part *part;
} rows_mask;

static void apply_rows_pattern(const void *mask_ctx, int64_t entry, int64_t q0, int rows,
                               int64_t k0, int n, float *s, int ld_s) {
  (void)q0;
  (void)k0;
  const stsa_plan_part *part = ((const rows_mask *)mask_ctx)->part;
  int64_t e = part->tile_ptr[0] + entry;
  stsa_apply_tile_pattern(&part->pattern_list[part->pattern[e]], rows, n, s, ld_s);
}

enum { MAX_PLANS = 4 };

stsa_status stsa_sparse_rows_multi(stsa_ctx *ctx, const stsa_plan *const *plans,
                                   int nplans, const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, const stsa_tensor *out) {
  const int64_t H = q->shape[2];
  STSA_RETURN_IF(nplans < 1 || nplans > MAX_PLANS, &ctx->err, STSA_ERR_BAD_PARAM,
                 "profiling: %d plans (1..%d)", nplans, MAX_PLANS);
  for (int i = 0; i < nplans; i++)
    STSA_RETURN_IF(plans[i]->q_tiles != 1 || plans[i]->kv_native ||
                       plans[i]->kv_tile != plans[0]->kv_tile ||
                       plans[i]->s_q != q->shape[1] || plans[i]->s_kv != k->shape[1],
                   &ctx->err, STSA_ERR_BAD_PARAM,
                   "profiling: plan %d does not fit the sampled rows", i);
  const stsa_kernels *kern = &ctx->run->kern;
  stsa_attn_problem pb[MAX_PLANS];
  for (int i = 0; i < nplans; i++)
    stsa_problem_init(&pb[i], q, k, v, &out[i], NULL, plans[i]->q_tile, plans[i]->kv_tile,
                      kern);
  const int threads = (int)(H < ctx->threads ? H : ctx->threads);
  const size_t pack_floats = stsa_kv_packed_floats(&pb[0]);
  float *packs = stsa_workspace_get(&ctx->packed, (size_t)threads * pack_floats * 4);
  stsa_tile_scratch *scratch = calloc((size_t)threads, sizeof *scratch);
  int ok = packs && scratch;
  for (int t = 0; ok && t < threads; t++)
    ok = stsa_tile_scratch_alloc(&pb[0], &scratch[t]) == 0;
  if (ok) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t h = 0; h < H; h++) {
      const int t = omp_get_thread_num();
      stsa_kv_packed kv = stsa_kv_packed_at(&pb[0], packs + (size_t)t * pack_floats);
      for (int64_t tile = 0; tile < stsa_kv_tiles(&pb[0]); tile++)
        stsa_pack_kv_tile(&pb[0], 0, h, tile, NULL, &kv);
      for (int i = 0; i < nplans; i++) {
        const stsa_plan_part *part = &plans[i]->parts[plans[i]->head_part[0]];
        rows_mask mctx = {part};
        const int64_t e0 = part->tile_ptr[0];
        stsa_kv_list list = {
            part->kv_tile + e0, part->kind + e0, (int32_t)(part->tile_ptr[1] - e0),
            apply_rows_pattern, &mctx,           NULL};
        stsa_run_q_tile(&pb[i], &kv, 0, h, 0, &list, &scratch[t]);
      }
    }
  }
  for (int t = 0; scratch && t < threads; t++)
    stsa_tile_scratch_free(&scratch[t]);
  free(scratch);
  STSA_RETURN_IF(!ok, &ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  return STSA_OK;
}
