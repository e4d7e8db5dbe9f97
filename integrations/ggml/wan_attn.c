/* wan_attn.c — see wan_attn.h. */
#define STSA_EXPERIMENTAL /* stsa_workload_generate */
#include "wan_attn.h"

#include <math.h>
#include <string.h>

#include "ggml-cpu.h"

size_t wan_ctx_bytes(int64_t L, int64_t C, int masked) {
  const int64_t Lp = (L + 255) / 256 * 256;
  /* q, k, v and their permuted copies (f32), f16 K/V, the result and views */
  size_t bytes = (size_t)(12 * Lp * C) * sizeof(float);
  if (masked || Lp != L)
    bytes += (size_t)(L * Lp) * 2;
  return bytes + ((size_t)64 << 20);
}

/* [C, L, 1] -> [d_head, L, n_head] contiguous, as sd.cpp permutes q and k. */
static struct ggml_tensor *heads_major(struct ggml_context *ctx, struct ggml_tensor *x,
                                       int64_t n_head) {
  const int64_t L = x->ne[1], d = x->ne[0] / n_head, N = x->ne[2];
  x = ggml_reshape_4d(ctx, x, d, n_head, L, N);
  x = ggml_cont(ctx, ggml_permute(ctx, x, 0, 2, 1, 3));
  return ggml_reshape_3d(ctx, x, d, L, n_head * N);
}

struct ggml_tensor *wan_self_attention(struct ggml_context *ctx, struct ggml_tensor *q,
                                       struct ggml_tensor *k, struct ggml_tensor *v,
                                       int64_t n_head, wan_attn *a) {
  const int64_t L_q = q->ne[1], L_k = k->ne[1], C = q->ne[0], N = q->ne[2];
  const int64_t d = C / n_head;
  const float scale = 1.0f / sqrtf((float)d);
  q = heads_major(ctx, q, n_head);
  k = heads_major(ctx, k, n_head);
  v = ggml_reshape_4d(ctx, v, d, n_head, L_k, N);
  /* sd.cpp pads K/V to a multiple of 256 for flash attention, with a -inf
   * mask over the padding; stsa takes any length and needs neither */
  const int64_t pad = a->mode == WAN_FLASH && L_k % 256 ? 256 - L_k % 256 : 0;
  struct ggml_tensor *k_in = pad ? ggml_pad(ctx, k, 0, (int)pad, 0, 0) : k;
  k_in = ggml_cast(ctx, k_in, GGML_TYPE_F16);
  struct ggml_tensor *v_in = ggml_cont(ctx, ggml_permute(ctx, v, 0, 2, 1, 3));
  v_in = ggml_reshape_3d(ctx, v_in, d, L_k, n_head * N);
  if (pad)
    v_in = ggml_pad(ctx, v_in, 0, (int)pad, 0, 0);
  v_in = ggml_cast(ctx, v_in, GGML_TYPE_F16);
  struct ggml_tensor *out;
  if (a->mode == WAN_FLASH) {
    struct ggml_tensor *mask = NULL;
    if (pad || a->keep) {
      mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, L_k + pad, L_q);
      ggml_fp16_t *m = mask->data;
      const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f),
                        ninf = ggml_fp32_to_fp16(-INFINITY);
      for (int64_t i = 0; i < L_q; i++)
        for (int64_t j = 0; j < L_k + pad; j++)
          m[i * (L_k + pad) + j] =
              j < L_k && (!a->keep || a->keep[i * L_k + j]) ? zero : ninf;
    }
    out = ggml_flash_attn_ext(ctx, q, k_in, v_in, mask, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
  } else if (a->mode == WAN_STSA_DENSE) {
    out = stsa_ggml_attn(a->sg, ctx, q, k_in, v_in, scale);
  } else {
    out =
        stsa_ggml_svg_attn(a->sg, ctx, q, k_in, v_in, scale, a->layer, a->step, a->kinds);
  }
  a->q = q;
  a->k = k_in;
  a->v = v_in;
  a->node = out;
  /* [d, n_head, L_q] -> [C, L_q, N] as sd.cpp reads the result */
  out = ggml_view_3d(ctx, out, d, n_head, L_q, out->nb[1], out->nb[2], 0);
  return ggml_reshape_3d(ctx, out, d * n_head, L_q, N);
}

stsa_status wan_workload(struct ggml_context *ctx, const stsa_geometry *g, int64_t heads,
                         int64_t head_dim, const stsa_head_kind *kinds, uint64_t seed,
                         struct ggml_tensor **qkv) {
  const int64_t L = stsa_geometry_tokens(g);
  stsa_tensor t[3];
  for (int i = 0; i < 3; i++) {
    qkv[i] = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, heads * head_dim, L, 1);
    t[i] = stsa_tensor_bshd(qkv[i]->data, STSA_F32, 1, L, heads, head_dim);
  }
  stsa_workload_desc w = STSA_INIT(stsa_workload_desc);
  w.geometry = *g;
  w.batch = 1;
  w.heads = heads;
  w.head_dim = head_dim;
  w.seed = seed;
  w.kinds = kinds;
  return stsa_workload_generate(&w, &t[0], &t[1], &t[2], NULL);
}

stsa_svg_config wan_svg_config(const stsa_geometry *g, int64_t heads, int64_t head_dim,
                               double density, int64_t sample_rows) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = *g;
  c.heads = heads;
  c.head_dim = head_dim;
  c.density = density;
  c.sample_rows = sample_rows;
  c.sink_frames = 1;
  c.seed = 5;
  return c;
}
