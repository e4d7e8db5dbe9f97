/*
 * stsa_ggml_svg.c — SVG as ggml nodes: gather the sampled query rows, profile
 * them under the dense, spatial and temporal masks, then block-sparse
 * attention with each head's kind. Every node runs on all of ggml's threads;
 * ggml's barrier between nodes is the only synchronisation. The steps are
 * the session's (src/svg/session.c, profile.c), so the result is
 * stsa_svg_attention's.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_svg_sampled_rows */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "stsa_ggml_internal.h"

/* The node's inputs and the session's shape. */
static stsa_status svg_inputs(const node_rec *r, const struct ggml_tensor *dst,
                              stsa_tensor *q, stsa_tensor *k, stsa_tensor *v, char *msg) {
  const stsa_ggml *sg = r->sg;
  if (!sg->svg) {
    snprintf(msg, STSA_GGML_MSG, "no SVG session: stsa_ggml_create was given no config");
    return STSA_ERR_UNSUPPORTED;
  }
  stsa_tensor out;
  STSA_GGML_TRY(stsa_ggml_inputs(dst, q, k, v, &out, msg));
  const int64_t n = stsa_geometry_tokens(&sg->cfg.geometry);
  if (q->shape[1] != n || k->shape[1] != n || q->shape[2] != sg->cfg.heads ||
      q->shape[3] != sg->cfg.head_dim || q->shape[0] != r->batch) {
    snprintf(msg, STSA_GGML_MSG,
             "the session is for %lld tokens (%lld x %lld x %lld video), %lld heads of "
             "dim %lld, but q has %lld tokens, %lld heads of dim %lld, k %lld tokens",
             (long long)n, (long long)sg->cfg.geometry.frames,
             (long long)sg->cfg.geometry.height, (long long)sg->cfg.geometry.width,
             (long long)sg->cfg.heads, (long long)sg->cfg.head_dim,
             (long long)q->shape[1], (long long)q->shape[2], (long long)q->shape[3],
             (long long)k->shape[1]);
    return STSA_ERR_BAD_SHAPE;
  }
  return STSA_OK;
}

/* Node 1: the sampled rows of q, f32 [D, H, R, B] (BSHD over the rows). */
static void gather_node(struct ggml_tensor *dst, int ith, int nth, void *userdata) {
  node_rec *r = userdata;
  const int64_t R = r->sg->cfg.sample_rows;
  char msg[STSA_GGML_MSG] = "";
  stsa_tensor q, k, v, rows;
  stsa_status st = svg_inputs(r, dst, &q, &k, &v, msg);
  if (st == STSA_OK)
    st = stsa_ggml_tensor(dst, 1, "rows", &rows, msg);
  const int64_t n = r->batch * R;
  for (int64_t i = n * ith / nth; st == STSA_OK && i < n * (ith + 1) / nth; i++) {
    const int64_t b = i / R, j = i % R;
    stsa_tensor from = stsa_ggml_view(&q, b, -1), to = stsa_ggml_view(&rows, b, -1);
    from.data =
        (char *)from.data + (size_t)(r->rows[i] * q.stride[1]) * stsa_dtype_size(q.dtype);
    to.data = (float *)to.data + j * rows.stride[1];
    from.shape[1] = to.shape[1] = 1;
    st = stsa_tensor_copy(&from, &to);
  }
  stsa_ggml_finish(r, ROLE_GATHER, dst, ith, nth, st, msg);
}

/* Node 2: the rows under plan i of batch entry b in slot b * KINDS + i of
 * f32 [D, H, R, B * KINDS]. */
static void profile_node(struct ggml_tensor *dst, int ith, int nth, void *userdata) {
  node_rec *r = userdata;
  const stsa_ctx *ctx = r->sg->ctx;
  char msg[STSA_GGML_MSG] = "";
  stsa_tensor q, k, v, rows, prof;
  stsa_sparse_opts opts = {sizeof opts, r->scale, NULL, STSA_SPARSE_EXACT, NULL, 0};
  stsa_status st = svg_inputs(r, dst, &q, &k, &v, msg);
  if (st == STSA_OK)
    st = stsa_ggml_tensor(dst->src[3], 1, "rows", &rows, msg);
  if (st == STSA_OK)
    st = stsa_ggml_tensor(dst, 1, "profile", &prof, msg);
  size_t need = 0, wsize = 0;
  void *wdata = NULL;
  for (int64_t i = 0; st == STSA_OK && i < r->batch * KINDS; i++) {
    const int64_t b = i / KINDS;
    stsa_tensor qb = stsa_ggml_view(&rows, b, -1), kb = stsa_ggml_view(&k, b, -1),
                vb = stsa_ggml_view(&v, b, -1), ob = stsa_ggml_view(&prof, i, -1);
    size_t w = 0;
    st = stsa_sparse_attention_part_wsize(ctx, r->row_plans[i], &qb, &kb, &vb, &ob, &opts,
                                          nth, &w);
    need = w > need ? w : need;
  }
  if (st == STSA_OK && (st = stsa_ggml_work(r->sg, need, &wdata, &wsize)) != STSA_OK)
    snprintf(msg, sizeof msg, "out of memory for the %zu-byte work buffer", need);
  for (int64_t i = 0; st == STSA_OK && i < r->batch * KINDS; i++) {
    const int64_t b = i / KINDS;
    stsa_tensor qb = stsa_ggml_view(&rows, b, -1), kb = stsa_ggml_view(&k, b, -1),
                vb = stsa_ggml_view(&v, b, -1), ob = stsa_ggml_view(&prof, i, -1);
    st = stsa_sparse_attention_part(ctx, r->row_plans[i], &qb, &kb, &vb, &ob, &opts, ith,
                                    nth, wdata, wsize);
  }
  stsa_ggml_finish(r, ROLE_PROFILE, dst, ith, nth, st, msg);
}

/* The kind of head h of batch entry b: the mask whose rows are closer to
 * dense (mean squared error, as the session computes it). */
static int pick_kind(const stsa_tensor *prof, int64_t b, int64_t h) {
  const int64_t R = prof->shape[1], D = prof->shape[3];
  const stsa_tensor o0 = stsa_ggml_view(prof, b * KINDS + KIND_DENSE, h),
                    os = stsa_ggml_view(prof, b * KINDS + KIND_SPATIAL, h),
                    ot = stsa_ggml_view(prof, b * KINDS + KIND_TEMPORAL, h);
  double es = 0, et = 0;
  for (int64_t j = 0; j < R; j++)
    for (int64_t d = 0; d < D; d++) {
      const int64_t at = j * prof->stride[1] + d;
      const float x0 = ((const float *)o0.data)[at];
      const double ds = (double)((const float *)os.data)[at] - x0,
                   dt = (double)((const float *)ot.data)[at] - x0;
      es += ds * ds;
      et += dt * dt;
    }
  const float mse_s = (float)(es / (double)(R * D)),
              mse_t = (float)(et / (double)(R * D));
  return mse_s <= mse_t ? KIND_SPATIAL : KIND_TEMPORAL;
}

static stsa_head_kind kind_name(int i) {
  return i == KIND_SPATIAL    ? STSA_HEAD_SPATIAL
         : i == KIND_TEMPORAL ? STSA_HEAD_TEMPORAL
                              : STSA_HEAD_MIXED;
}

/* Node 3: every head with its kind's plan, part ith of each head (the parts
 * of one head are cut by cost, so the threads stay balanced head by head). */
static void svg_node(struct ggml_tensor *dst, int ith, int nth, void *userdata) {
  node_rec *r = userdata;
  const stsa_ggml *sg = r->sg;
  const int64_t H = sg->cfg.heads;
  char msg[STSA_GGML_MSG] = "";
  stsa_tensor q, k, v, out, prof;
  stsa_sparse_opts opts = {sizeof opts, r->scale, NULL, STSA_SPARSE_EXACT, NULL, 0};
  stsa_status st = svg_inputs(r, dst, &q, &k, &v, msg);
  if (st == STSA_OK)
    st = stsa_ggml_tensor(dst, 1, "result", &out, msg);
  if (st == STSA_OK && !r->policy_dense)
    st = stsa_ggml_tensor(dst->src[3], 1, "profile", &prof, msg);
  size_t need = 0, wsize = 0;
  void *wdata = NULL;
  if (st == STSA_OK) {
    stsa_tensor qh = stsa_ggml_view(&q, 0, 0), kh = stsa_ggml_view(&k, 0, 0),
                vh = stsa_ggml_view(&v, 0, 0), oh = stsa_ggml_view(&out, 0, 0);
    for (int i = 0; st == STSA_OK && i < KINDS; i++) {
      size_t w = 0;
      st = stsa_sparse_attention_part_wsize(sg->ctx, sg->kind_plans[i], &qh, &kh, &vh,
                                            &oh, &opts, nth, &w);
      need = w > need ? w : need;
    }
  }
  if (st == STSA_OK && (st = stsa_ggml_work(r->sg, need, &wdata, &wsize)) != STSA_OK)
    snprintf(msg, sizeof msg, "out of memory for the %zu-byte work buffer", need);
  for (int64_t i = 0; st == STSA_OK && i < r->batch * H; i++) {
    const int64_t b = i / H, h = i % H;
    const int kind = r->policy_dense ? KIND_DENSE : pick_kind(&prof, b, h);
    if (ith == 0 && r->kinds_out)
      r->kinds_out[i] = kind_name(kind);
    stsa_tensor qh = stsa_ggml_view(&q, b, h), kh = stsa_ggml_view(&k, b, h),
                vh = stsa_ggml_view(&v, b, h), oh = stsa_ggml_view(&out, b, h);
    st = stsa_sparse_attention_part(sg->ctx, sg->kind_plans[kind], &qh, &kh, &vh, &oh,
                                    &opts, ith, nth, wdata, wsize);
  }
  stsa_ggml_finish(r, ROLE_SVG, dst, ith, nth, st, msg);
}

/* The profiled rows of every batch entry and an H-head plan over them per
 * mask, built with the graph (they depend on layer, step and batch entry
 * only), as the session's profile builds them. */
static stsa_status row_plans(node_rec *r) {
  const stsa_ggml *sg = r->sg;
  const int64_t R = sg->cfg.sample_rows, H = sg->cfg.heads;
  const int64_t n = stsa_geometry_tokens(&sg->cfg.geometry);
  r->rows = malloc(sizeof *r->rows * (size_t)(r->batch * R));
  r->row_plans = calloc((size_t)(r->batch * KINDS), sizeof *r->row_plans);
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)H);
  stsa_status st = r->rows && r->row_plans && masks ? STSA_OK : STSA_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; st == STSA_OK && i < r->batch * KINDS; i++) {
    const int64_t b = i / KINDS;
    if (i % KINDS == 0)
      st = stsa_svg_sampled_rows(sg->svg, r->layer, r->step, b, r->rows + b * R);
    for (int64_t h = 0; h < H; h++)
      masks[h] = sg->masks[i % KINDS];
    stsa_plan_desc d = {sizeof d,
                        R,
                        n,
                        H,
                        masks,
                        &sg->cfg.geometry,
                        STSA_ORDER_NATIVE,
                        STSA_ORDER_NATIVE,
                        (int)R, /* one q tile of all the rows */
                        0,
                        STSA_PLAN_ALLOW_EMPTY_ROWS,
                        r->rows + b * R,
                        NULL};
    if (st == STSA_OK)
      st = stsa_plan_build(sg->ctx, &d, &r->row_plans[i]);
  }
  free(masks);
  return st;
}

/* A node of no use but to carry a failure found while building. */
static void failed_node(struct ggml_tensor *dst, int ith, int nth, void *userdata) {
  node_rec *r = userdata;
  stsa_ggml_finish(r, ROLE_SVG, dst, ith, nth, r->build_status, r->build_msg);
}

struct ggml_tensor *stsa_ggml_svg_attn(stsa_ggml *sg, struct ggml_context *ctx,
                                       struct ggml_tensor *q, struct ggml_tensor *k,
                                       struct ggml_tensor *v, float scale, int64_t layer,
                                       int64_t step, stsa_head_kind *kinds) {
  node_rec *r = sg ? stsa_ggml_record(sg, "svg attention", scale) : NULL;
  if (!r)
    return NULL;
  r->layer = layer;
  r->step = step;
  r->batch = q->ne[3];
  r->kinds_out = kinds;
  struct ggml_tensor *args[4] = {q, k, v, NULL};
  const int64_t D = q->ne[0], H = q->ne[2], S = q->ne[1], B = q->ne[3];
  stsa_status st = STSA_OK;
  if (sg->svg) {
    r->policy_dense = step < sg->cfg.dense_steps || layer < sg->cfg.dense_layers;
    if (layer < 0 || step < 0) {
      st = STSA_ERR_BAD_PARAM;
      snprintf(r->build_msg, STSA_GGML_MSG, "layer %lld, step %lld: expected >= 0",
               (long long)layer, (long long)step);
    } else if (!r->policy_dense && (st = row_plans(r)) != STSA_OK) {
      snprintf(r->build_msg, STSA_GGML_MSG, "profiling plans: %s",
               stsa_ctx_last_error(sg->ctx));
    }
  }
  if (st != STSA_OK) {
    r->build_status = st;
    return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0], H, S, B, args, 3, failed_node,
                          GGML_N_TASKS_MAX, r);
  }
  if (sg->svg && !r->policy_dense) {
    const int64_t R = sg->cfg.sample_rows;
    args[3] = ggml_custom_4d(ctx, GGML_TYPE_F32, D, H, R, B, args, 3, gather_node,
                             GGML_N_TASKS_MAX, r);
    args[3] = ggml_custom_4d(ctx, GGML_TYPE_F32, D, H, R, B * KINDS, args, 4,
                             profile_node, GGML_N_TASKS_MAX, r);
  }
  return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0], H, S, B, args, args[3] ? 4 : 3,
                        svg_node, GGML_N_TASKS_MAX, r);
}
