/*
 * stsa_ggml.h — stsa attention as ggml custom ops (ggml_custom_4d), running on
 * ggml's own threads through stsa's partitioned entry points.
 *
 * Where ggml_flash_attn_ext(ctx, q, k, v, NULL, scale, 0, 0) stands (as in
 * stable-diffusion.cpp's Wan self-attention: f32 Q, f16 K/V), call
 *
 *   dense: stsa_ggml_attn(sg, ctx, q, k, v, scale)
 *   SVG:   stsa_ggml_svg_attn(sg, ctx, q, k, v, scale, layer, step)
 *
 * Both take ggml_flash_attn_ext's layouts and return its result's:
 *
 *   q:   [D, S_q,  H, B]   (ggml ne order; f32, f16 or bf16)
 *   k:   [D, S_kv, H, B]   (f32, f16 or bf16)
 *   v:   [D, S_kv, H, B]   !! not transposed !! (f32, f16 or bf16)
 *   res: [D, H, S_q, B]    !! permuted !! f32, contiguous
 *
 * Any byte strides that are multiples of the element size work (stsa takes
 * explicit strides), so the permuted views need no ggml_cont.
 *
 * The SVG call is three nodes: a gather of the sampled query rows, the
 * profile (those rows under the dense, spatial and temporal masks), and the
 * block-sparse attention, in which every thread picks each head's kind from
 * the profile (deterministically, so all agree) and runs its part of every
 * head with that kind's plan. Policy-dense calls (dense_steps, dense_layers)
 * are one node. The result is the SVG session's (stsa_svg_attention).
 *
 * Errors never crash and never reach ggml's asserts: shapes ggml accepts but
 * stsa does not (GQA, K and V head dims that differ, quantised K/V, a
 * sequence that is not the session's video) build a node as usual; when the
 * graph runs, the node writes zeros and records a status and a message,
 * which the host reads after ggml_graph_compute with stsa_ggml_status.
 *
 * Threads: one graph computation at a time per stsa_ggml (like a stsa
 * context). The work buffer of the partitioned calls is grown once, under
 * a lock, the first time a node needs more; nothing else is allocated while
 * the graph runs, but for stsa's O(heads) per-call bookkeeping.
 */
#ifndef STSA_GGML_H
#define STSA_GGML_H

#include <stdint.h>

#include "ggml.h"
#include "stsa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stsa_ggml stsa_ggml;

/* Creates the integration's state: an stsa context (read only while graphs
 * run) and, when svg is not NULL, an SVG session for that configuration
 * (method SVG, no error budget: anything else is STSA_ERR_UNSUPPORTED).
 * On failure *out is NULL and msg (if not NULL) holds the reason. */
stsa_status stsa_ggml_create(const stsa_svg_config *svg, stsa_ggml **out, char *msg,
                             size_t msg_size);
/* NULL is accepted. Only after every graph using its nodes has finished. */
void stsa_ggml_free(stsa_ggml *sg);

/* The stsa context, e.g. to set STSA_PARAM_CHECK_FINITE before building. */
stsa_ctx *stsa_ggml_ctx(stsa_ggml *sg);

/* Dense attention in place of ggml_flash_attn_ext (no mask, no ALiBi, no
 * soft-cap). scale 0 means 1/sqrt(D). */
struct ggml_tensor *stsa_ggml_attn(stsa_ggml *sg, struct ggml_context *ctx,
                                   struct ggml_tensor *q, struct ggml_tensor *k,
                                   struct ggml_tensor *v, float scale);

/* SVG attention of one layer of one denoising step (the session's policy,
 * profiling and plans). The sequence must be the session's video:
 * S_q = S_kv = its tokens, H = heads, D = head_dim; B any. kinds (optional,
 * [B * H], b-major, caller-owned until the graph has run) receives the kind
 * each head ran with (STSA_HEAD_MIXED for a policy-dense call). */
struct ggml_tensor *stsa_ggml_svg_attn(stsa_ggml *sg, struct ggml_context *ctx,
                                       struct ggml_tensor *q, struct ggml_tensor *k,
                                       struct ggml_tensor *v, float scale, int64_t layer,
                                       int64_t step, stsa_head_kind *kinds);

/* The first failure of a node built since stsa_ggml_clear (STSA_OK if
 * none), in node creation order; *msg (if not NULL) names the node and why.
 * Call after ggml_graph_compute has returned. */
stsa_status stsa_ggml_status(const stsa_ggml *sg, const char **msg);

/* Forgets the nodes built so far (their records are freed): call between
 * graphs, once the previous graph will not run again. */
void stsa_ggml_clear(stsa_ggml *sg);

#ifdef __cplusplus
}
#endif
#endif
