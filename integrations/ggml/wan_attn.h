/*
 * wan_attn.h — Wan's self-attention core as stable-diffusion.cpp builds it
 * with ggml (ggml_ext_attention_ext, flash path), with the attention node
 * itself selectable: ggml_flash_attn_ext (optionally with a mask), stsa
 * dense or stsa SVG. Shared by the test, the benchmark and the example.
 */
#ifndef WAN_ATTN_H
#define WAN_ATTN_H

#include "stsa_ggml.h"

typedef enum wan_mode { WAN_FLASH = 0, WAN_STSA_DENSE = 1, WAN_STSA_SVG = 2 } wan_mode;

typedef struct wan_attn {
  wan_mode mode;
  stsa_ggml *sg;         /* stsa modes */
  int64_t layer, step;   /* SVG */
  stsa_head_kind *kinds; /* SVG, optional [H] */
  const uint8_t *keep;   /* WAN_FLASH, optional [L_q][L_k]: a -inf mask elsewhere */
  /* out: the attention node's inputs and result, as the graph holds them */
  struct ggml_tensor *q, *k, *v, *node;
} wan_attn;

/* q, k, v: f32 [C = n_head * d_head, L, 1] (ne order; [1, L, C] in memory)
 * as Wan's projections leave them; returns [C, L_q, 1]. Uses a context that
 * allocates (no_alloc = false): the padding mask is filled here. */
struct ggml_tensor *wan_self_attention(struct ggml_context *ctx, struct ggml_tensor *q,
                                       struct ggml_tensor *k, struct ggml_tensor *v,
                                       int64_t n_head, wan_attn *a);

/* Wan-like projections q, k, v (f32 [C, L, 1]) from the built-in workload
 * (kinds NULL: its default mix of heads). */
stsa_status wan_workload(struct ggml_context *ctx, const stsa_geometry *g, int64_t heads,
                         int64_t head_dim, const stsa_head_kind *kinds, uint64_t seed,
                         struct ggml_tensor **qkv);

/* An SVG configuration for the frame grid (first-frame sink, no dense
 * steps or layers, no budget). */
stsa_svg_config wan_svg_config(const stsa_geometry *g, int64_t heads, int64_t head_dim,
                               double density, int64_t sample_rows);

/* Bytes a context needs for one such graph of L tokens and C channels (with
 * a dense mask when `masked`) plus ggml's work buffer. */
size_t wan_ctx_bytes(int64_t L, int64_t C, int masked);

#endif
