/* profile.c — see profile.h. */
#include "svg/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/convert.h"
#include "core/tensor.h"
#include "mask/geometry.h"
#include "mask/rows_call.h"
#include "mask/sparse_call.h"
#include "svg/splitmix.h"

stsa_tensor stsa_batch_view(const stsa_tensor *t, int64_t b) {
  stsa_tensor v = *t;
  v.data = stsa_tensor_row(t, b, 0, 0);
  v.shape[0] = 1;
  return v;
}

uint64_t stsa_svg_row_seed(uint64_t seed, int64_t layer, int64_t step, int64_t batch) {
  return seed ^ ((uint64_t)layer * 0x100000001b3ull) ^ ((uint64_t)step << 32) ^
         ((uint64_t)batch * 0x9e3779b97f4a7c15ull);
}

void stsa_svg_sample_rows(const stsa_geometry *g, int64_t rows, uint64_t seed,
                          int64_t layer, int64_t step, int64_t batch, int64_t *out) {
  const int64_t L = g->frames * g->height * g->width;
  const int64_t first = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  uint64_t state = stsa_svg_row_seed(seed, layer, step, batch);
  for (int64_t r = 0; r < rows; r++) {
    /* stratum r covers video tokens [r*L/rows, (r+1)*L/rows) */
    int64_t lo = r * L / rows, hi = (r + 1) * L / rows;
    int64_t span = hi > lo ? hi - lo : 1;
    out[r] = first + lo + (int64_t)(stsa_splitmix64(&state) % (uint64_t)span);
  }
}

/* The dtype profiling gathers q's sampled rows in: bf16 stays bf16 (the
 * fused pass then runs on the bf16 tiles where the table has them), the
 * rest go to f32. */
static stsa_dtype gathered_dtype(const stsa_tensor *q) {
  return q->dtype == STSA_BF16 ? STSA_BF16 : STSA_F32;
}

/* Gathers the sampled rows of batch entry b into a compact [1, r, H, D] of
 * gathered_dtype (dst): head h's rows at rows + h * stride (stride 0: every
 * head the same rows). */
static void gather_rows(const stsa_tensor *q, int64_t b, const int64_t *rows,
                        int64_t stride, int64_t nrows, void *dst) {
  const int64_t H = q->shape[2], D = q->shape[3];
  for (int64_t r = 0; r < nrows; r++)
    for (int64_t h = 0; h < H; h++) {
      const void *src = stsa_tensor_row(q, b, rows[h * stride + r], h);
      if (gathered_dtype(q) == STSA_BF16) {
        uint16_t *to = (uint16_t *)dst + (r * H + h) * D;
        for (int64_t d = 0; d < D; d++)
          to[d] = ((const uint16_t *)src)[d * q->stride[3]];
      } else {
        stsa_load_row_f32(src, q->dtype, q->stride[3], D, (float *)dst + (r * H + h) * D);
      }
    }
}

/* row_sq[(i * H + h) * nrows + r] from the outputs o[0..n-1] ([r][H][D]
 * each): i = 0 the energy of o[0]'s row, i >= 1 the squared difference of
 * o[i]'s row to o[0]'s. */
static void row_squares(const float *const *o, int n, int64_t nrows, int64_t H, int64_t D,
                        double *row_sq) {
  for (int64_t h = 0; h < H; h++)
    for (int64_t r = 0; r < nrows; r++) {
      const float *o0 = o[0] + (r * H + h) * D;
      double e0 = 0;
      for (int64_t d = 0; d < D; d++)
        e0 += (double)o0[d] * o0[d];
      row_sq[h * nrows + r] = e0;
      for (int i = 1; i < n; i++) {
        const float *oi = o[i] + (r * H + h) * D;
        double e = 0;
        for (int64_t d = 0; d < D; d++)
          e += ((double)oi[d] - o0[d]) * ((double)oi[d] - o0[d]);
        row_sq[(i * H + h) * nrows + r] = e;
      }
    }
}

/* Keys per kv tile of the profiling plans: a tile's K and V panels (2 x
 * 64 KiB at D = 128) stay in L2 while the rows' scores, the dense P.V and
 * every mask's P.V read them. */
enum { ROWS_KV_TILE = 128 };

/* The kv tile of a pass of dense rows alone (no mask's P.V to keep near):
 * wider, since each tile costs every row a pass over its sums (o = alpha o
 * + the tile's P.V), while the rows' scores of a tile stay within 1 MiB.
 * At Wan 480p, 332 bf16 rows of two heads: 20.3 ms at 128 keys, 18.5 at
 * 256, 16.1 at 512, 17.2 at 1024 (docs/benchmarks.md). Steps, not a
 * quotient: a pass of the recheck's 256 rows takes the same tile as one of
 * a few tens, up to 512 rows in all. */
static int dense_rows_kv_tile(int64_t nrows) {
  return nrows <= 512    ? 4 * ROWS_KV_TILE
         : nrows <= 1024 ? 2 * ROWS_KV_TILE
                         : ROWS_KV_TILE;
}

/* A one-head plan of the sampled rows under `mask`: one q tile holding all
 * of them, keys in native order, kv_tile keys a tile. */
static stsa_status rows_plan(stsa_ctx *ctx, const stsa_geometry *g, const stsa_mask *mask,
                             const int64_t *rows, int64_t nrows, int64_t tokens,
                             int kv_tile, stsa_plan **plan) {
  const stsa_mask *masks[1] = {mask};
  int q_tile = (int)nrows; /* the builder rounds it up to the kernels' mr */
  stsa_plan_desc desc = {sizeof desc,
                         nrows,
                         tokens,
                         1,
                         masks,
                         g,
                         STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,
                         q_tile,
                         kv_tile,
                         STSA_PLAN_ALLOW_EMPTY_ROWS,
                         rows,
                         NULL};
  return stsa_plan_build(ctx, &desc, plan);
}

/* A sampled row and the key its temporal pass is ordered by. */
typedef struct keyed_row {
  int64_t key;
  int32_t row;
} keyed_row;

static int by_key(const void *a, const void *b) {
  const keyed_row *x = a, *y = b;
  return x->key != y->key ? (x->key < y->key ? -1 : 1)
                          : (x->row > y->row) - (x->row < y->row);
}

/* The temporal pass's row order: by position in the frame, so that a
 * register tile of rows keeps about the same keys of every frame (the rows
 * themselves ascend by token, which groups them by frame: the spatial
 * pass's order). */
static stsa_status temporal_order(const stsa_geometry *g, const int64_t *rows,
                                  int64_t nrows, int32_t *order, stsa_errbuf *err) {
  keyed_row *kr = malloc(sizeof *kr * (size_t)nrows);
  STSA_RETURN_IF(!kr, err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  stsa_geo geo;
  stsa_geo_init(&geo, g);
  for (int64_t r = 0; r < nrows; r++)
    kr[r] = (keyed_row){stsa_geo_token(&geo, rows[r]).p, (int32_t)r};
  qsort(kr, (size_t)nrows, sizeof *kr, by_key);
  for (int64_t r = 0; r < nrows; r++)
    order[r] = kr[r].row;
  free(kr);
  return STSA_OK;
}

stsa_status stsa_svg_profile(stsa_ctx *ctx, const stsa_geometry *g,
                             const stsa_svg_masks *masks, const int64_t *rows,
                             int64_t nrows, const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, int64_t b, double *row_sq) {
  const int64_t H = q->shape[2], D = q->shape[3];
  const size_t n = (size_t)(nrows * H * D);
  float *buf = malloc(sizeof(float) * n * 4);
  if (!buf)
    return stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  float *qrows = buf, *o_dense = buf + n, *o_sp = buf + 2 * n, *o_tm = buf + 3 * n;
  gather_rows(q, b, rows, 0, nrows, qrows);
  stsa_tensor qs = stsa_tensor_bshd(qrows, gathered_dtype(q), 1, nrows, H, D);
  stsa_tensor kb = stsa_batch_view(k, b), vb = stsa_batch_view(v, b);
  stsa_tensor td = stsa_tensor_bshd(o_dense, STSA_F32, 1, nrows, H, D);
  stsa_tensor ts = stsa_tensor_bshd(o_sp, STSA_F32, 1, nrows, H, D);
  stsa_tensor tt = stsa_tensor_bshd(o_tm, STSA_F32, 1, nrows, H, D);
  /* one pass over each head's K/V serves all three masks */
  const stsa_mask *which[3] = {masks->dense, masks->spatial, masks->temporal};
  stsa_plan *plans[3] = {NULL, NULL, NULL};
  int32_t *order = malloc(sizeof *order * (size_t)nrows);
  stsa_status st =
      order ? temporal_order(g, rows, nrows, order, &ctx->err)
            : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  for (int i = 0; i < 3 && st == STSA_OK; i++)
    st = rows_plan(ctx, g, which[i], rows, nrows, kb.shape[1], ROWS_KV_TILE, &plans[i]);
  if (st == STSA_OK) {
    const stsa_tensor outs[3] = {td, ts, tt};
    const stsa_plan *const cplans[3] = {plans[0], plans[1], plans[2]};
    const int32_t *const orders[2] = {NULL, order};
    st = stsa_sparse_rows_dense_and(ctx, cplans, 3, orders, &qs, &kb, &vb, outs);
  }
  free(order);
  for (int i = 0; i < 3; i++)
    stsa_plan_free(plans[i]);
  if (st == STSA_OK) {
    const float *const o[3] = {o_dense, o_sp, o_tm};
    row_squares(o, 3, nrows, H, D, row_sq);
  }
  free(buf);
  return st;
}

stsa_tensor stsa_head_view(const stsa_tensor *t, int64_t b, int64_t h) {
  stsa_tensor v = *t;
  v.data = stsa_tensor_row(t, b, 0, h);
  v.shape[0] = 1;
  v.shape[2] = 1;
  return v;
}

/* stsa_svg_profile_heads with 1 to 4 masks; dense_rows (or NULL) gets a
 * copy of the reference's rows [nrows][H][D]. */
static stsa_status profile_rows(stsa_ctx *ctx, const stsa_geometry *g,
                                const stsa_mask *const *masks, int nmasks,
                                const int64_t *rows, int per_head, int64_t nrows,
                                const int32_t *const *orders, const uint8_t *heads_on,
                                const stsa_tensor *q, const stsa_tensor *k,
                                const stsa_tensor *v, int64_t b, double *row_sq,
                                float *dense_rows) {
  enum { MAX = 4 };
  STSA_RETURN_IF(nmasks < 1 || nmasks > MAX, &ctx->err, STSA_ERR_BAD_PARAM,
                 "profiling: %d masks (1..%d)", nmasks, MAX);
  const int64_t H = q->shape[2], D = q->shape[3];
  const size_t n = (size_t)(nrows * H * D);
  float *buf = malloc(sizeof(float) * n * (size_t)(nmasks + 1));
  stsa_plan **plans = calloc((size_t)(nmasks * H), sizeof *plans);
  stsa_status st = buf && plans ? STSA_OK
                                : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY,
                                            "profiling: out of memory");
  stsa_tensor kb = stsa_batch_view(k, b), vb = stsa_batch_view(v, b), outs[MAX];
  const int64_t stride = per_head ? nrows : 0;
  if (st == STSA_OK)
    gather_rows(q, b, rows, stride, nrows, buf);
  stsa_tensor qs = stsa_tensor_bshd(buf, gathered_dtype(q), 1, nrows, H, D);
  for (int i = 0; i < nmasks; i++)
    outs[i] = stsa_tensor_bshd(buf ? buf + n * (size_t)(i + 1) : NULL, STSA_F32, 1, nrows,
                               H, D);
  const int kv_tile = nmasks == 1 ? dense_rows_kv_tile(nrows) : ROWS_KV_TILE;
  for (int64_t i = 0; st == STSA_OK && i < nmasks * H; i++)
    st = rows_plan(ctx, g, masks[i], rows + i % H * stride, nrows, kb.shape[1], kv_tile,
                   &plans[i]);
  if (st == STSA_OK)
    st = stsa_sparse_rows_dense_and_heads(ctx, (const stsa_plan *const *)plans, nmasks,
                                          orders, heads_on, &qs, &kb, &vb, outs);
  for (int64_t i = 0; plans && i < nmasks * H; i++)
    stsa_plan_free(plans[i]);
  if (st == STSA_OK) {
    const float *o[MAX];
    for (int i = 0; i < nmasks; i++)
      o[i] = buf + n * (size_t)(i + 1);
    row_squares(o, nmasks, nrows, H, D, row_sq);
    if (dense_rows)
      memcpy(dense_rows, o[0], sizeof(float) * n);
  }
  free(plans);
  free(buf);
  return st;
}

stsa_status stsa_svg_profile_heads(stsa_ctx *ctx, const stsa_geometry *g,
                                   const stsa_mask *const *masks, int nmasks,
                                   const int64_t *rows, int per_head, int64_t nrows,
                                   const int32_t *const *orders, const uint8_t *heads_on,
                                   const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, int64_t b, double *row_sq) {
  STSA_RETURN_IF(nmasks < 2, &ctx->err, STSA_ERR_BAD_PARAM, "profiling: %d masks (2..4)",
                 nmasks);
  return profile_rows(ctx, g, masks, nmasks, rows, per_head, nrows, orders, heads_on, q,
                      k, v, b, row_sq, NULL);
}

stsa_status stsa_svg_profile_dense_rows(stsa_ctx *ctx, const stsa_geometry *g,
                                        const stsa_mask *const *masks,
                                        const int64_t *rows, int64_t nrows,
                                        const uint8_t *heads_on, const stsa_tensor *q,
                                        const stsa_tensor *k, const stsa_tensor *v,
                                        int64_t b, float *dense_rows, double *energy) {
  return profile_rows(ctx, g, masks, 1, rows, 1, nrows, NULL, heads_on, q, k, v, b,
                      energy, dense_rows);
}

stsa_status stsa_svg_profile_head(stsa_ctx *ctx, const stsa_geometry *g,
                                  const stsa_mask *const *masks, int nmasks,
                                  const int64_t *rows, int64_t nrows,
                                  const int32_t *order, const stsa_tensor *q,
                                  const stsa_tensor *k, const stsa_tensor *v, int64_t b,
                                  int64_t h, double *row_sq) {
  stsa_tensor qh = stsa_head_view(q, b, h), kh = stsa_head_view(k, b, h),
              vh = stsa_head_view(v, b, h);
  const int32_t *const orders[1] = {order};
  return stsa_svg_profile_heads(ctx, g, masks, nmasks, rows, 0, nrows,
                                order ? orders : NULL, NULL, &qh, &kh, &vh, 0, row_sq);
}

void stsa_svg_output_errors(const stsa_tensor *out, int64_t b, int64_t h, int64_t H,
                            int64_t D, const int64_t *rows, int64_t R, const float *dense,
                            float *row, double *err) {
  for (int64_t r = 0; r < R; r++) {
    stsa_load_row_f32(stsa_tensor_row(out, b, rows[r], h), out->dtype, out->stride[3], D,
                      row);
    const float *ref = dense + (r * H + h) * D;
    double e = 0;
    for (int64_t d = 0; d < D; d++)
      e += ((double)row[d] - ref[d]) * ((double)row[d] - ref[d]);
    err[r] = e;
  }
}
