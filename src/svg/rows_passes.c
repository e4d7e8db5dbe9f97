/* rows_passes.c — see rows_passes.h. */
#include "svg/rows_passes.h"

#include <stdlib.h>

#include "kernel/dispatch.h"
#include "kernel/sparse.h"
#include "mask/plan.h"

/* A one-head plan of a pass's rows, keys in native order. */
static stsa_status pass_plan(stsa_ctx *ctx, const stsa_geometry *g,
                             const stsa_rows_pass *pass, int64_t R, int64_t tokens,
                             stsa_plan **plan) {
  const stsa_mask *masks[1] = {pass->mask};
  stsa_plan_desc desc = {sizeof desc,
                         R,
                         tokens,
                         1,
                         masks,
                         g,
                         STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,
                         pass->q_tile,
                         0,
                         STSA_PLAN_ALLOW_EMPTY_ROWS,
                         pass->rows,
                         NULL};
  return stsa_plan_build(ctx, &desc, plan);
}

/* The passes' structures one after the other: pass i's q tiles become
 * variable tiles over positions [i * R, (i + 1) * R), its entries and
 * partial patterns unchanged (they still point into the plans). */
typedef struct fused {
  stsa_block_sparse bs;
  int64_t *q_start, *tile_ptr;
  int32_t *kv_tile, *pattern;
  uint8_t *kind;
  stsa_tile_pattern *patterns;
} fused;

static void fused_free(fused *f) {
  free(f->q_start);
  free(f->tile_ptr);
  free(f->kv_tile);
  free(f->pattern);
  free(f->kind);
  free(f->patterns);
}

static int fuse(const stsa_plan *const *plans, int n, int64_t R, fused *f) {
  int64_t q_tiles = 0, entries = 0, patterns = 0;
  for (int i = 0; i < n; i++) {
    const stsa_block_sparse *bs = &plans[i]->parts[plans[i]->head_part[0]].bs;
    q_tiles += bs->q_tiles;
    entries += bs->entries;
    patterns += bs->patterns;
  }
  *f = (fused){0};
  f->q_start = malloc(sizeof *f->q_start * (size_t)(q_tiles + 1));
  f->tile_ptr = malloc(sizeof *f->tile_ptr * (size_t)(q_tiles + 1));
  f->kv_tile = malloc(sizeof *f->kv_tile * (size_t)(entries + 1));
  f->pattern = malloc(sizeof *f->pattern * (size_t)(entries + 1));
  f->kind = malloc((size_t)entries + 1);
  f->patterns = malloc(sizeof *f->patterns * (size_t)(patterns + 1));
  if (!f->q_start || !f->tile_ptr || !f->kv_tile || !f->pattern || !f->kind ||
      !f->patterns)
    return -1;
  int64_t qt = 0, e = 0, p = 0;
  f->q_start[0] = f->tile_ptr[0] = 0;
  for (int i = 0; i < n; i++) {
    const stsa_plan *plan = plans[i];
    const stsa_block_sparse *bs = &plan->parts[plan->head_part[0]].bs;
    for (int64_t t = 0; t < bs->q_tiles; t++, qt++) {
      const int64_t end = (t + 1) * plan->q_tile;
      f->q_start[qt + 1] = i * R + (end < R ? end : R);
      for (int64_t x = bs->tile_ptr[t]; x < bs->tile_ptr[t + 1]; x++, e++) {
        f->kv_tile[e] = bs->kv_tile[x];
        f->kind[e] = bs->kind[x];
        f->pattern[e] = bs->pattern[x] < 0 ? -1 : (int32_t)(p + bs->pattern[x]);
      }
      f->tile_ptr[qt + 1] = e;
    }
    for (int32_t x = 0; x < bs->patterns; x++)
      f->patterns[p + x] = bs->pattern_list[x];
    p += bs->patterns;
  }
  f->bs = (stsa_block_sparse){.q_tiles = q_tiles,
                              .entries = entries,
                              .tile_ptr = f->tile_ptr,
                              .kv_tile = f->kv_tile,
                              .kind = f->kind,
                              .pattern = f->pattern,
                              .patterns = (int32_t)patterns,
                              .pattern_list = f->patterns,
                              .q_start = f->q_start};
  return 0;
}

stsa_status stsa_svg_rows_passes(stsa_ctx *ctx, const stsa_geometry *g,
                                 const stsa_rows_pass *passes, int npasses, int64_t R,
                                 const stsa_tensor *q, const stsa_tensor *k,
                                 const stsa_tensor *v, const stsa_tensor *out) {
  STSA_RETURN_IF(npasses < 1 || npasses > STSA_ROWS_PASSES_MAX, &ctx->err,
                 STSA_ERR_BAD_PARAM, "profiling: %d passes (1..%d)", npasses,
                 STSA_ROWS_PASSES_MAX);
  const int64_t H = q->shape[2];
  stsa_plan *plans[STSA_ROWS_PASSES_MAX] = {NULL};
  stsa_status st = STSA_OK;
  int q_tile = 0;
  for (int i = 0; st == STSA_OK && i < npasses; i++) {
    st = pass_plan(ctx, g, &passes[i], R, k->shape[1], &plans[i]);
    if (st == STSA_OK && plans[i]->q_tile > q_tile)
      q_tile = plans[i]->q_tile;
  }
  fused f = {0};
  stsa_sparse_head *heads = NULL;
  if (st == STSA_OK && (fuse((const stsa_plan *const *)plans, npasses, R, &f) != 0 ||
                        !(heads = calloc((size_t)H, sizeof *heads))))
    st = stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  if (st == STSA_OK) {
    for (int64_t h = 0; h < H; h++)
      heads[h].bs = &f.bs;
    stsa_attn_problem pb;
    stsa_problem_init(&pb, q, k, v, out, NULL, q_tile, plans[0]->kv_tile,
                      &ctx->run->kern);
    stsa_problem_fit_layouts(&pb, heads, H);
    stsa_sparse_run run;
    const stsa_work w = stsa_sparse_work(&run, &pb, heads, ctx->run->ref);
    if (stsa_work_run(&w, ctx->threads, &ctx->packed) != STSA_OK)
      st = stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  }
  free(heads);
  fused_free(&f);
  for (int i = 0; i < npasses; i++)
    stsa_plan_free(plans[i]);
  return st;
}
