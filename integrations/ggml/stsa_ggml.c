/*
 * stsa_ggml.c — the integration's state, node records and status, the
 * mapping of ggml tensors to stsa tensors, and the dense node.
 */
#define STSA_EXPERIMENTAL /* stsa_svg_kind_mask */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stsa_ggml_internal.h"

static void set_msg(char *msg, size_t size, const char *text) {
  if (msg && size)
    snprintf(msg, size, "%s", text);
}

static void free_records(stsa_ggml *sg) {
  for (node_rec *r = sg->first, *next; r; r = next) {
    next = r->next;
    for (int64_t i = 0; r->row_plans && i < r->batch * KINDS; i++)
      stsa_plan_free(r->row_plans[i]);
    free(r->row_plans);
    free(r->rows);
    free(r);
  }
  sg->first = sg->last = NULL;
}

void stsa_ggml_free(stsa_ggml *sg) {
  if (!sg)
    return;
  free_records(sg);
  for (int i = 0; i < KINDS; i++) {
    stsa_plan_free(sg->kind_plans[i]);
    stsa_mask_free(sg->masks[i]);
  }
  stsa_svg_free(sg->svg);
  stsa_ctx_free(sg->ctx);
  pthread_mutex_destroy(&sg->lock);
  free(sg->wdata);
  free(sg);
}

/* The session's masks and one single-head plan per kind at its tiles: the
 * plans stsa_svg_attention runs each head with. */
static stsa_status svg_plans(stsa_ggml *sg) {
  static const stsa_head_kind kinds[KINDS] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                              STSA_HEAD_MIXED};
  stsa_svg_windows w = STSA_INIT(stsa_svg_windows);
  stsa_status st = stsa_svg_get_windows(sg->svg, &w);
  for (int i = 0; st == STSA_OK && i < KINDS; i++) {
    stsa_order qo, ko;
    st = stsa_svg_kind_mask(sg->svg, kinds[i], &sg->masks[i], &qo, &ko);
    const stsa_mask *m[1] = {sg->masks[i]};
    const int64_t n = stsa_geometry_tokens(&sg->cfg.geometry);
    stsa_plan_desc d = {sizeof d, n,         n, 1,    m,   &sg->cfg.geometry, qo, ko,
                        w.q_tile, w.kv_tile, 0, NULL, NULL};
    if (st == STSA_OK)
      st = stsa_plan_build(sg->ctx, &d, &sg->kind_plans[i]);
  }
  return st;
}

stsa_status stsa_ggml_create(const stsa_svg_config *svg, stsa_ggml **out, char *msg,
                             size_t msg_size) {
  if (!out)
    return STSA_ERR_NULL_ARG;
  *out = NULL;
  stsa_ggml *sg = calloc(1, sizeof *sg);
  if (!sg) {
    set_msg(msg, msg_size, "stsa_ggml: out of memory");
    return STSA_ERR_OUT_OF_MEMORY;
  }
  pthread_mutex_init(&sg->lock, NULL);
  stsa_status st = stsa_ctx_create_msg(&sg->ctx, msg, msg_size);
  /* ggml's flash attention does not scan for NaN/Inf either, and every part
   * would scan the whole input (stsa_ggml_ctx turns it back on) */
  if (st == STSA_OK)
    st = stsa_ctx_set(sg->ctx, STSA_PARAM_CHECK_FINITE, 0);
  if (st == STSA_OK && svg) {
    sg->cfg = *svg;
    if (svg->size < sizeof *svg || svg->method != STSA_SVG_METHOD_SVG ||
        svg->max_rel_error != 0) {
      set_msg(msg, msg_size,
              "stsa_ggml: only method SVG without an error budget runs as ggml nodes "
              "(SVG2 and max_rel_error need the session's own threads)");
      st = STSA_ERR_UNSUPPORTED;
    }
    if (st == STSA_OK && (st = stsa_svg_create(sg->ctx, svg, &sg->svg)) != STSA_OK)
      set_msg(msg, msg_size, stsa_ctx_last_error(sg->ctx));
    if (st == STSA_OK && (st = svg_plans(sg)) != STSA_OK)
      set_msg(msg, msg_size, stsa_ctx_last_error(sg->ctx));
  }
  if (st != STSA_OK) {
    stsa_ggml_free(sg);
    return st;
  }
  *out = sg;
  return STSA_OK;
}

stsa_ctx *stsa_ggml_ctx(stsa_ggml *sg) { return sg ? sg->ctx : NULL; }

void stsa_ggml_clear(stsa_ggml *sg) {
  if (sg)
    free_records(sg);
}

node_rec *stsa_ggml_record(stsa_ggml *sg, const char *what, float scale) {
  node_rec *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->sg = sg;
  r->what = what;
  r->scale = scale;
  if (sg->last)
    sg->last->next = r;
  else
    sg->first = r;
  sg->last = r;
  return r;
}

static const char *const role_names[ROLES] = {"dense node", "gather node", "profile node",
                                              "attention node"};

stsa_status stsa_ggml_status(const stsa_ggml *sg, const char **msg) {
  if (msg)
    *msg = "";
  if (!sg)
    return STSA_ERR_NULL_ARG;
  for (node_rec *r = sg->first; r; r = r->next)
    for (int i = 0; i < ROLES; i++)
      if (r->ran[i] && r->status[i] != STSA_OK) {
        /* stsa's own messages are in the context (recorded under its lock
         * by the failing parts); read them now that every part returned */
        if (!r->msg[i][0])
          snprintf(r->msg[i], sizeof r->msg[i], "%s (%s): %s", r->what, role_names[i],
                   stsa_ctx_last_error(sg->ctx));
        if (msg)
          *msg = r->msg[i];
        return r->status[i];
      }
  return STSA_OK;
}

/* ------------------------------------------------------------------------ */
/* ggml tensors as stsa tensors                                              */
/* ------------------------------------------------------------------------ */

stsa_status stsa_ggml_tensor(const struct ggml_tensor *t, int permuted, const char *name,
                             stsa_tensor *out, char *msg) {
  stsa_dtype dt;
  switch (t->type) {
  case GGML_TYPE_F32:
    dt = STSA_F32;
    break;
  case GGML_TYPE_F16:
    dt = STSA_F16;
    break;
  case GGML_TYPE_BF16:
    dt = STSA_BF16;
    break;
  default:
    snprintf(msg, STSA_GGML_MSG,
             "%s is %s: stsa reads f32, f16 and bf16 (ggml's flash attention also "
             "takes quantised K/V; dequantise first, e.g. ggml_cast)",
             name, ggml_type_name(t->type));
    return STSA_ERR_BAD_DTYPE;
  }
  const size_t es = ggml_type_size(t->type);
  for (int i = 0; i < 4; i++)
    if (t->nb[i] % es != 0) {
      snprintf(msg, STSA_GGML_MSG,
               "%s: byte stride nb[%d] = %zu is not a multiple of its %zu-byte elements",
               name, i, t->nb[i], es);
      return STSA_ERR_BAD_STRIDE;
    }
  /* ne = [D, S, H, B], or [D, H, S, B] for results; stsa is [B, S, H, D] */
  const int s = permuted ? 2 : 1, h = permuted ? 1 : 2;
  *out = (stsa_tensor){t->data,
                       dt,
                       {t->ne[3], t->ne[s], t->ne[h], t->ne[0]},
                       {(int64_t)(t->nb[3] / es), (int64_t)(t->nb[s] / es),
                        (int64_t)(t->nb[h] / es), (int64_t)(t->nb[0] / es)}};
  return STSA_OK;
}

stsa_status stsa_ggml_inputs(const struct ggml_tensor *dst, stsa_tensor *q,
                             stsa_tensor *k, stsa_tensor *v, stsa_tensor *out,
                             char *msg) {
  const struct ggml_tensor *tq = dst->src[0], *tk = dst->src[1], *tv = dst->src[2];
  STSA_GGML_TRY(stsa_ggml_tensor(tq, 0, "q", q, msg));
  STSA_GGML_TRY(stsa_ggml_tensor(tk, 0, "k", k, msg));
  STSA_GGML_TRY(stsa_ggml_tensor(tv, 0, "v", v, msg));
  STSA_GGML_TRY(stsa_ggml_tensor(dst, 1, "result", out, msg));
  if (tk->ne[0] != tq->ne[0] || tv->ne[0] != tq->ne[0]) {
    snprintf(msg, STSA_GGML_MSG,
             "head dims differ: q %lld, k %lld, v %lld (ggml allows DV != DK; stsa "
             "needs one D)",
             (long long)tq->ne[0], (long long)tk->ne[0], (long long)tv->ne[0]);
    return STSA_ERR_BAD_SHAPE;
  }
  if (tk->ne[2] != tq->ne[2] || tv->ne[2] != tq->ne[2]) {
    snprintf(msg, STSA_GGML_MSG,
             "q has %lld heads but k %lld and v %lld: stsa needs one K/V head per "
             "query head (no GQA/MQA broadcast; repeat K/V first)",
             (long long)tq->ne[2], (long long)tk->ne[2], (long long)tv->ne[2]);
    return STSA_ERR_BAD_SHAPE;
  }
  if (tk->ne[3] != tq->ne[3] || tv->ne[3] != tq->ne[3] || tk->ne[1] != tv->ne[1]) {
    snprintf(msg, STSA_GGML_MSG,
             "q is [%lld, %lld, %lld, %lld], k [%lld, %lld, %lld, %lld], v [%lld, "
             "%lld, %lld, %lld]: k and v need q's batch (no broadcast) and one length",
             (long long)tq->ne[0], (long long)tq->ne[1], (long long)tq->ne[2],
             (long long)tq->ne[3], (long long)tk->ne[0], (long long)tk->ne[1],
             (long long)tk->ne[2], (long long)tk->ne[3], (long long)tv->ne[0],
             (long long)tv->ne[1], (long long)tv->ne[2], (long long)tv->ne[3]);
    return STSA_ERR_BAD_SHAPE;
  }
  msg[0] = '\0';
  return STSA_OK;
}

stsa_tensor stsa_ggml_view(const stsa_tensor *t, int64_t b, int64_t h) {
  stsa_tensor v = *t;
  const size_t es = stsa_dtype_size(t->dtype);
  int64_t off = b * t->stride[0] + (h < 0 ? 0 : h * t->stride[2]);
  v.data = (char *)t->data + (size_t)off * es;
  v.shape[0] = 1;
  if (h >= 0)
    v.shape[2] = 1;
  return v;
}

stsa_status stsa_ggml_work(stsa_ggml *sg, size_t need, void **wdata, size_t *wsize) {
  pthread_mutex_lock(&sg->lock);
  /* every part of a node needs the same size, and nodes are separated by
   * ggml's barrier: the buffer never grows under a part that uses it */
  if (sg->wsize < need) {
    free(sg->wdata);
    sg->wdata = malloc(need);
    sg->wsize = sg->wdata ? need : 0;
  }
  *wdata = sg->wdata;
  *wsize = sg->wsize;
  pthread_mutex_unlock(&sg->lock);
  return *wdata ? STSA_OK : STSA_ERR_OUT_OF_MEMORY;
}

void stsa_ggml_finish(node_rec *r, int role, struct ggml_tensor *dst, int ith, int nth,
                      stsa_status st, const char *msg) {
  if (st != STSA_OK) {
    const size_t n = ggml_nbytes(dst);
    const size_t lo = n * (size_t)ith / (size_t)nth,
                 hi = n * (size_t)(ith + 1) / (size_t)nth;
    memset((char *)dst->data + lo, 0, hi - lo);
  }
  if (ith != 0)
    return;
  r->ran[role] = 1;
  r->status[role] = st;
  if (st == STSA_OK || !msg[0])
    r->msg[role][0] = '\0'; /* a failure of stsa's: its message is in the context */
  else
    snprintf(r->msg[role], sizeof r->msg[role], "%s (%s): %s", r->what, role_names[role],
             msg);
}

/* ------------------------------------------------------------------------ */
/* The dense node                                                            */
/* ------------------------------------------------------------------------ */

static void dense_node(struct ggml_tensor *dst, int ith, int nth, void *userdata) {
  node_rec *r = userdata;
  const stsa_ctx *ctx = r->sg->ctx;
  char msg[STSA_GGML_MSG] = "";
  stsa_tensor q, k, v, out;
  stsa_attn_opts opts = {sizeof opts, r->scale, NULL};
  size_t need = 0, wsize = 0;
  void *wdata = NULL;
  stsa_status st = stsa_ggml_inputs(dst, &q, &k, &v, &out, msg);
  if (st == STSA_OK)
    st = stsa_attention_part_wsize(ctx, &q, &k, &v, &out, &opts, nth, &need);
  if (st == STSA_OK && (st = stsa_ggml_work(r->sg, need, &wdata, &wsize)) != STSA_OK)
    snprintf(msg, sizeof msg, "out of memory for the %zu-byte work buffer", need);
  if (st == STSA_OK)
    st = stsa_attention_part(ctx, &q, &k, &v, &out, &opts, ith, nth, wdata, wsize);
  stsa_ggml_finish(r, ROLE_DENSE, dst, ith, nth, st, msg);
}

struct ggml_tensor *stsa_ggml_attn(stsa_ggml *sg, struct ggml_context *ctx,
                                   struct ggml_tensor *q, struct ggml_tensor *k,
                                   struct ggml_tensor *v, float scale) {
  node_rec *r = sg ? stsa_ggml_record(sg, "dense attention", scale) : NULL;
  if (!r)
    return NULL;
  struct ggml_tensor *args[3] = {q, k, v};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0], q->ne[2], q->ne[1], q->ne[3], args,
                        3, dense_node, GGML_N_TASKS_MAX, r);
}
