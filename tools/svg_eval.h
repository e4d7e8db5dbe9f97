/*
 * svg_eval.h — what the demo and `bench svg` share: a workload in memory and
 * per-head error metrics of an output against dense attention.
 */
#ifndef STSA_TOOLS_SVG_EVAL_H
#define STSA_TOOLS_SVG_EVAL_H

#include "stsa.h"
#include "stsa_io.h"

/* Q, K, V (f32 [B, N, H, D]) of the built-in workload and an output buffer. */
typedef struct svg_workload {
  stsa_tensor q, k, v, out, ref;
  stsa_head_kind *truth; /* [H] */
} svg_workload;

/* A new f32 [B, N, H, D] tensor, 64-byte aligned (free its data). */
stsa_tensor svg_f32_tensor(int64_t B, int64_t N, int64_t H, int64_t D);

void svg_workload_make(svg_workload *w, const stsa_svg_config *cfg, int64_t batch,
                       uint64_t seed);
/* The same with the kinds planted in the heads ([cfg->heads]; NULL: the
 * generator's default mix). */
void svg_workload_make_kinds(svg_workload *w, const stsa_svg_config *cfg, int64_t batch,
                             uint64_t seed, const stsa_head_kind *kinds);
void svg_workload_free(svg_workload *w);
/* q, k and v converted to `dtype` (f16, bf16: what a pipeline in that
 * precision passes); out and ref stay f32. */
void svg_workload_cast(svg_workload *w, stsa_dtype dtype);
/* A new [B, N, H, D] tensor of `dtype` holding t's values (free its data). */
stsa_tensor svg_tensor_cast(const stsa_tensor *t, stsa_dtype dtype);

/* Per head over all batch entries: relative L2 error ||out - ref|| / ||ref||
 * and cosine similarity, both f32 [B, N, H, D] tensors. */
void svg_head_errors(const stsa_tensor *out, const stsa_tensor *ref, double *rel_l2,
                     double *cosine);

#endif
