/*
 * rows_call.h — online profiling's sampled rows under the dense mask and a
 * few others, in one pass over K/V (kernel/rows_fused.h) where it applies.
 */
#ifndef STSA_MASK_ROWS_CALL_H
#define STSA_MASK_ROWS_CALL_H

#include "core/context.h"
#include "mask/plan.h"

/* The contract of stsa_sparse_rows_multi (sparse_call.h), with plans[0] the
 * dense mask's plan (every kv tile FULL) and nplans <= 4. orders[i - 1] (or
 * NULL, as orders itself may be) is a permutation of the R rows in which
 * plans[i]'s rows are best computed: rows that keep similar keys together
 * (see stsa_rows_fused). The fused pass gives the masked rows from the
 * dense probabilities; a reference backend, or inputs whose logits or V
 * are not finite, take stsa_sparse_rows_multi's per-mask passes. */
stsa_status stsa_sparse_rows_dense_and(stsa_ctx *ctx, const stsa_plan *const *plans,
                                       int nplans, const int32_t *const *orders,
                                       const stsa_tensor *q, const stsa_tensor *k,
                                       const stsa_tensor *v, const stsa_tensor *out);

/* The same with a plan per head: plans[i * H + h] is mask i of head h (H =
 * q->shape[2]; i = 0 dense, every kv tile FULL), and orders[h] (or NULL,
 * as orders may be) the row order of every mask of head h: SVG2's
 * candidates, per head, on each head's own rows. Falls back to
 * stsa_sparse_rows_per_head's passes as the one-plan form does. heads_on
 * (or NULL: every head): the fused pass runs only the heads h with
 * heads_on[h] and stores zero rows for the others (stsa_rows_fused); the
 * fallback computes every head. */
stsa_status stsa_sparse_rows_dense_and_heads(stsa_ctx *ctx, const stsa_plan *const *plans,
                                             int nplans, const int32_t *const *orders,
                                             const uint8_t *heads_on,
                                             const stsa_tensor *q, const stsa_tensor *k,
                                             const stsa_tensor *v,
                                             const stsa_tensor *out);

#endif
