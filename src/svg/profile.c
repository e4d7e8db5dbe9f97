/* profile.c — see profile.h. */
#include "svg/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/convert.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "mask/sparse_call.h"
#include "svg/rows_passes.h"

stsa_tensor stsa_batch_view(const stsa_tensor *t, int64_t b) {
  stsa_tensor v = *t;
  v.data = stsa_tensor_row(t, b, 0, 0);
  v.shape[0] = 1;
  return v;
}

/* Gathers the sampled rows of batch entry b into a compact f32 [1, r, H, D]. */
static void gather_rows(const stsa_tensor *q, int64_t b, const int64_t *rows,
                        int64_t nrows, float *dst) {
  const int64_t H = q->shape[2], D = q->shape[3];
  for (int64_t r = 0; r < nrows; r++)
    for (int64_t h = 0; h < H; h++) {
      stsa_load_row_f32(stsa_tensor_row(q, b, rows[r], h), q->dtype, q->stride[3], D,
                        dst + (r * H + h) * D);
    }
}

/* A one-head plan of the sampled rows under `mask`: one q tile holding all
 * of them, keys in native order. */
static stsa_status rows_plan(stsa_ctx *ctx, const stsa_geometry *g, const stsa_mask *mask,
                             const int64_t *rows, int64_t nrows, int64_t tokens,
                             stsa_plan **plan) {
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
                         0,
                         STSA_PLAN_ALLOW_EMPTY_ROWS,
                         rows,
                         NULL};
  return stsa_plan_build(ctx, &desc, plan);
}

/* Rows of a kind's pass that share a q tile: one register tile. More rows
 * per tile stream each key for more of them, but their windows spread and
 * most of their tiles turn partial (measured at Wan 480p: 6 rows beat 12
 * and 24). */
static int group_rows(const stsa_ctx *ctx) { return ctx->run->kern.mr; }

/* Squared differences of a pass's rows (row i is reference row at[i], or
 * row i when at is NULL) to the reference rows, per head. */
static void sq_diff(const float *o, const float *ref, const int64_t *at, int64_t nrows,
                    int64_t H, int64_t D, double *sum) {
  for (int64_t h = 0; h < H; h++) {
    double e = 0;
    for (int64_t r = 0; r < nrows; r++) {
      const float *x = o + (r * H + h) * D, *y = ref + ((at ? at[r] : r) * H + h) * D;
      for (int64_t d = 0; d < D; d++)
        e += ((double)x[d] - y[d]) * ((double)x[d] - y[d]);
    }
    sum[h] = e;
  }
}

/*
 * The three passes share the rows but not their order: the dense rows are
 * one q tile (every key is visited anyway, so each serves all rows); the
 * spatial rows are walked in native order, a q tile then holding rows of
 * one or two frames whose windows cover a few frames of keys; the temporal
 * rows position-major, a q tile then holding rows of nearby positions whose
 * bands meet the same few keys of every frame. The rows, and so the
 * estimate, are those of one q tile of all rows under each mask.
 */
stsa_status stsa_svg_profile(stsa_ctx *ctx, const stsa_geometry *g,
                             const stsa_svg_masks *masks, const int64_t *rows,
                             int64_t nrows, const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, int64_t b, float *mse_spatial,
                             float *mse_temporal, double *energy) {
  const int64_t H = q->shape[2], D = q->shape[3];
  const size_t n = (size_t)(nrows * H * D);
  float *buf = malloc(sizeof(float) * n * 6);
  int64_t *perm = malloc(sizeof *perm * (size_t)nrows * 2);
  double *sum = malloc(sizeof *sum * (size_t)H);
  stsa_status st = buf && perm && sum ? STSA_OK
                                      : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY,
                                                  "profiling: out of memory");
  if (st == STSA_OK) {
    /* q and out: the dense, spatial and temporal passes' rows, one after
     * the other */
    float *qs = buf, *o_dense = buf + 3 * n, *o_sp = buf + 4 * n, *o_tm = buf + 5 * n;
    int64_t *rows_pos = perm + nrows;
    gather_rows(q, b, rows, nrows, qs);
    memcpy(qs + n, qs, sizeof(float) * n);
    stsa_svg_position_order(g, rows, nrows, perm);
    for (int64_t i = 0; i < nrows; i++) {
      rows_pos[i] = rows[perm[i]];
      memcpy(qs + 2 * n + (size_t)(i * H * D), qs + (size_t)(perm[i] * H * D),
             sizeof(float) * (size_t)(H * D));
    }
    const int group = group_rows(ctx);
    const stsa_rows_pass passes[3] = {{masks->dense, rows, (int)nrows},
                                      {masks->spatial, rows, group},
                                      {masks->temporal, rows_pos, group}};
    const stsa_tensor qt = stsa_tensor_bshd(qs, STSA_F32, 1, 3 * nrows, H, D);
    const stsa_tensor ot = stsa_tensor_bshd(o_dense, STSA_F32, 1, 3 * nrows, H, D);
    const stsa_tensor kb = stsa_batch_view(k, b), vb = stsa_batch_view(v, b);
    st = stsa_svg_rows_passes(ctx, g, passes, 3, nrows, &qt, &kb, &vb, &ot);
    if (st == STSA_OK) {
      const double count = (double)(nrows * D);
      sq_diff(o_sp, o_dense, NULL, nrows, H, D, sum);
      for (int64_t h = 0; h < H; h++)
        mse_spatial[h] = (float)(sum[h] / count);
      sq_diff(o_tm, o_dense, perm, nrows, H, D, sum);
      for (int64_t h = 0; h < H; h++)
        mse_temporal[h] = (float)(sum[h] / count);
      for (int64_t h = 0; energy && h < H; h++) {
        double e0 = 0;
        for (int64_t r = 0; r < nrows; r++)
          for (int64_t d = 0; d < D; d++) {
            const double x = o_dense[(r * H + h) * D + d];
            e0 += x * x;
          }
        energy[h] = e0;
      }
    }
  }
  free(buf);
  free(perm);
  free(sum);
  return st;
}

/* A view of head h of batch entry b (B = H = 1). */
static stsa_tensor head_view(const stsa_tensor *t, int64_t b, int64_t h) {
  stsa_tensor v = *t;
  v.data = stsa_tensor_row(t, b, 0, h);
  v.shape[0] = 1;
  v.shape[2] = 1;
  return v;
}

stsa_status stsa_svg_profile_heads(stsa_ctx *ctx, const stsa_geometry *g,
                                   const stsa_mask *const *masks, int nmasks,
                                   const int64_t *rows, int64_t nrows,
                                   const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, int64_t b, double *rel) {
  enum { MAX = 4 };
  STSA_RETURN_IF(nmasks < 2 || nmasks > MAX, &ctx->err, STSA_ERR_BAD_PARAM,
                 "profiling: %d masks (2..%d)", nmasks, MAX);
  const int64_t H = q->shape[2], D = q->shape[3];
  const size_t n = (size_t)(nrows * H * D);
  float *buf = malloc(sizeof(float) * n * (size_t)(nmasks + 1));
  stsa_plan **plans = calloc((size_t)(nmasks * H), sizeof *plans);
  stsa_status st = buf && plans ? STSA_OK
                                : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY,
                                            "profiling: out of memory");
  stsa_tensor kb = stsa_batch_view(k, b), vb = stsa_batch_view(v, b), outs[MAX];
  if (st == STSA_OK)
    gather_rows(q, b, rows, nrows, buf);
  stsa_tensor qs = stsa_tensor_bshd(buf, STSA_F32, 1, nrows, H, D);
  for (int i = 0; i < nmasks; i++)
    outs[i] = stsa_tensor_bshd(buf ? buf + n * (size_t)(i + 1) : NULL, STSA_F32, 1, nrows,
                               H, D);
  for (int64_t i = 0; st == STSA_OK && i < nmasks * H; i++)
    st = rows_plan(ctx, g, masks[i], rows, nrows, kb.shape[1], &plans[i]);
  if (st == STSA_OK)
    st = stsa_sparse_rows_per_head(ctx, (const stsa_plan *const *)plans, nmasks, &qs, &kb,
                                   &vb, outs);
  for (int64_t i = 0; plans && i < nmasks * H; i++)
    stsa_plan_free(plans[i]);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    const float *o0 = buf + n;
    double e0 = 0;
    for (int64_t r = 0; r < nrows; r++)
      for (int64_t d = 0; d < D; d++) {
        const double x = o0[(r * H + h) * D + d];
        e0 += x * x;
      }
    for (int i = 1; i < nmasks; i++) {
      const float *oi = buf + n * (size_t)(i + 1);
      double e = 0;
      for (int64_t r = 0; r < nrows; r++)
        for (int64_t d = 0; d < D; d++) {
          const size_t j = (size_t)((r * H + h) * D + d);
          e += ((double)oi[j] - o0[j]) * ((double)oi[j] - o0[j]);
        }
      rel[(i - 1) * H + h] = e0 > 0 ? sqrt(e / e0) : (e > 0 ? INFINITY : 0.0);
    }
  }
  free(plans);
  free(buf);
  return st;
}

stsa_status stsa_svg_profile_head(stsa_ctx *ctx, const stsa_geometry *g,
                                  const stsa_mask *const *masks, int nmasks,
                                  const int64_t *rows, int64_t nrows,
                                  const stsa_tensor *q, const stsa_tensor *k,
                                  const stsa_tensor *v, int64_t b, int64_t h,
                                  double *rel) {
  stsa_tensor qh = head_view(q, b, h), kh = head_view(k, b, h), vh = head_view(v, b, h);
  return stsa_svg_profile_heads(ctx, g, masks, nmasks, rows, nrows, &qh, &kh, &vh, 0,
                                rel);
}
