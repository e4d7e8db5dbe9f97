/*
 * sparse_call.h — block-sparse attention over plans: what the public
 * stsa_sparse_attention* entry points and SVG share. Here, above the kernel,
 * live the plan-vs-tensor checks and the sparse modes; the kernel gets plain
 * block structures (kernel/block_sparse.h).
 */
#ifndef STSA_MASK_SPARSE_CALL_H
#define STSA_MASK_SPARSE_CALL_H

#include "core/context.h"
#include "mask/plan.h"

/* Head h of the tensors follows head plan_heads[h] of plans[h] (SVG runs
 * spatial heads in native order and temporal heads position-major in one
 * call). All plans must agree on S_q, S_kv and tile sizes. Arguments are
 * validated; the scan for NaN/Inf runs on finite_threads threads, not at
 * all for 0 (callers that already scanned the same inputs pass 0). */
stsa_status stsa_sparse_attention_heads(stsa_ctx *ctx, const stsa_plan *const *plans,
                                        const int64_t *plan_heads, const stsa_tensor *q,
                                        const stsa_tensor *k, const stsa_tensor *v,
                                        const stsa_tensor *out,
                                        const stsa_sparse_opts *opts, int finite_threads);

/* Sampled rows under several masks at once (online profiling): q holds the
 * rows already gathered, [1, R, H, D]; every plan is a one-head plan with a
 * single q tile (q_tile >= R) and native kv order, all with one kv tile
 * size. Each head's K/V is packed once and serves every plan; out[i]
 * receives the rows under plans[i]. */
stsa_status stsa_sparse_rows_multi(stsa_ctx *ctx, const stsa_plan *const *plans,
                                   int nplans, const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, const stsa_tensor *out);
/* The same with a plan per head: out[i] of head h follows plans[i * H + h]
 * (H = q->shape[2]); e.g. SVG2, whose masks are per head. */
stsa_status stsa_sparse_rows_per_head(stsa_ctx *ctx, const stsa_plan *const *plans,
                                      int nplans, const stsa_tensor *q,
                                      const stsa_tensor *k, const stsa_tensor *v,
                                      const stsa_tensor *out);

#endif
