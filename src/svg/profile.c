/* profile.c — see profile.h. */
#include "svg/profile.h"

#include <stdlib.h>

#include "core/context.h"
#include "core/convert.h"
#include "kernel/sparse.h"

stsa_tensor stsa_batch_view(const stsa_tensor *t, int64_t b) {
  stsa_tensor v = *t;
  v.data = (char *)t->data + (size_t)(b * t->stride[0]) * stsa_dtype_size(t->dtype);
  v.shape[0] = 1;
  return v;
}

static uint64_t splitmix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void stsa_svg_sample_rows(const stsa_geometry *g, int64_t rows, uint64_t seed,
                          int64_t layer, int64_t step, int64_t batch, int64_t *out) {
  const int64_t L = g->frames * g->height * g->width;
  const int64_t first = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  uint64_t state = seed ^ ((uint64_t)layer * 0x100000001b3ull) ^ ((uint64_t)step << 32) ^
                   ((uint64_t)batch * 0x9e3779b97f4a7c15ull);
  for (int64_t r = 0; r < rows; r++) {
    /* stratum r covers video tokens [r*L/rows, (r+1)*L/rows) */
    int64_t lo = r * L / rows, hi = (r + 1) * L / rows;
    int64_t span = hi > lo ? hi - lo : 1;
    out[r] = first + lo + (int64_t)(splitmix(&state) % (uint64_t)span);
  }
}

/* Gathers the sampled rows of batch entry b into a compact f32 [1, r, H, D]. */
static void gather_rows(const stsa_tensor *q, int64_t b, const int64_t *rows,
                        int64_t nrows, float *dst) {
  const int64_t H = q->shape[2], D = q->shape[3];
  size_t es = stsa_dtype_size(q->dtype);
  for (int64_t r = 0; r < nrows; r++)
    for (int64_t h = 0; h < H; h++) {
      size_t off = (size_t)(b * q->stride[0] + rows[r] * q->stride[1] + h * q->stride[2]);
      stsa_load_row_f32((const char *)q->data + off * es, q->dtype, q->stride[3], D,
                        dst + (r * H + h) * D);
    }
}

/* Attention of the sampled rows under one mask: out [1, r, H, D] f32. */
static stsa_status masked_rows(stsa_ctx *ctx, const stsa_geometry *g,
                               const stsa_mask *mask, const int64_t *rows, int64_t nrows,
                               const stsa_tensor *qs, const stsa_tensor *kb,
                               const stsa_tensor *vb, const stsa_tensor *out) {
  const int64_t H = qs->shape[2], N = kb->shape[1];
  const stsa_mask *masks[1] = {mask};
  stsa_plan_desc desc = {nrows,
                         N,
                         1,
                         masks,
                         g,
                         STSA_ORDER_NATIVE,
                         STSA_ORDER_NATIVE,
                         0,
                         0,
                         STSA_PLAN_ALLOW_EMPTY_ROWS,
                         rows};
  stsa_plan *plan = NULL;
  STSA_TRY(stsa_plan_build(ctx, &desc, &plan));
  const stsa_plan **plans = malloc(sizeof *plans * (size_t)H);
  int64_t *heads = calloc((size_t)H, sizeof *heads);
  stsa_status st = STSA_ERR_OUT_OF_MEMORY;
  if (plans && heads) {
    for (int64_t h = 0; h < H; h++)
      plans[h] = plan;
    /* q rows are already gathered; keys stay in native order */
    stsa_sparse_opts so = {0.0f, NULL, STSA_SPARSE_EXACT, NULL, STSA_SPARSE_PREPERMUTED};
    /* the session scanned the inputs for NaN/Inf already */
    st = stsa_sparse_attention_heads(ctx, plans, heads, qs, kb, vb, out, &so, 0);
  }
  free(plans);
  free(heads);
  stsa_plan_free(plan);
  return st;
}

stsa_status stsa_svg_profile(stsa_ctx *ctx, const stsa_geometry *g,
                             const stsa_svg_masks *masks, const int64_t *rows,
                             int64_t nrows, const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, int64_t b, float *mse_spatial,
                             float *mse_temporal) {
  const int64_t H = q->shape[2], D = q->shape[3];
  const size_t n = (size_t)(nrows * H * D);
  float *buf = malloc(sizeof(float) * n * 4);
  if (!buf)
    return stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "profiling: out of memory");
  float *qrows = buf, *o_dense = buf + n, *o_sp = buf + 2 * n, *o_tm = buf + 3 * n;
  gather_rows(q, b, rows, nrows, qrows);
  stsa_tensor qs = stsa_tensor_bshd(qrows, STSA_F32, 1, nrows, H, D);
  stsa_tensor kb = stsa_batch_view(k, b), vb = stsa_batch_view(v, b);
  stsa_tensor td = stsa_tensor_bshd(o_dense, STSA_F32, 1, nrows, H, D);
  stsa_tensor ts = stsa_tensor_bshd(o_sp, STSA_F32, 1, nrows, H, D);
  stsa_tensor tt = stsa_tensor_bshd(o_tm, STSA_F32, 1, nrows, H, D);
  stsa_status st = masked_rows(ctx, g, masks->dense, rows, nrows, &qs, &kb, &vb, &td);
  if (st == STSA_OK)
    st = masked_rows(ctx, g, masks->spatial, rows, nrows, &qs, &kb, &vb, &ts);
  if (st == STSA_OK)
    st = masked_rows(ctx, g, masks->temporal, rows, nrows, &qs, &kb, &vb, &tt);
  if (st == STSA_OK)
    for (int64_t h = 0; h < H; h++) {
      double es = 0, et = 0;
      for (int64_t r = 0; r < nrows; r++)
        for (int64_t d = 0; d < D; d++) {
          size_t i = (size_t)((r * H + h) * D + d);
          double ds = (double)o_sp[i] - o_dense[i], dt = (double)o_tm[i] - o_dense[i];
          es += ds * ds;
          et += dt * dt;
        }
      mse_spatial[h] = (float)(es / (double)(nrows * D));
      mse_temporal[h] = (float)(et / (double)(nrows * D));
    }
  free(buf);
  return st;
}
