/*
 * sparse.h — the block-sparse kernel's internal entry point, where every head
 * may follow a different plan (SVG runs spatial heads in native order and
 * temporal heads in position-major order in one call).
 */
#ifndef STSA_KERNEL_SPARSE_H
#define STSA_KERNEL_SPARSE_H

#include "stsa.h"

/* Head h of the tensors follows head plan_heads[h] of plans[h]. All plans
 * must agree on S_q, S_kv and tile sizes. Arguments are validated; the scan
 * for NaN/Inf runs only when check_finite (callers that already scanned the
 * same inputs pass 0). */
stsa_status stsa_sparse_attention_heads(stsa_ctx *ctx, const stsa_plan *const *plans,
                                        const int64_t *plan_heads, const stsa_tensor *q,
                                        const stsa_tensor *k, const stsa_tensor *v,
                                        const stsa_tensor *out,
                                        const stsa_sparse_opts *opts, int check_finite);

#endif
