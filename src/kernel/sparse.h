/*
 * sparse.h — the block-sparse kernel's internal entry point, where every head
 * may follow a different plan (SVG runs spatial heads in native order and
 * temporal heads in position-major order in one call).
 */
#ifndef STSA_KERNEL_SPARSE_H
#define STSA_KERNEL_SPARSE_H

#include "mask/plan.h"
#include "stsa.h"

/* Sets s[r][c] = -inf outside the pattern's kept intervals, r < rows, c < n:
 * the exact mask of a partial tile. */
void stsa_apply_tile_pattern(const stsa_tile_pattern *pat, int rows, int n, float *s,
                             int ld_s);

/*
 * Sampled rows under several masks at once (online profiling): q holds the
 * rows already gathered, [1, R, H, D]; every plan is a one-head plan with a
 * single q tile (q_tile >= R) and native kv order, all with one kv tile size.
 * Each head's K/V is packed once and serves every plan; out[i] receives the
 * rows under plans[i]. Arguments must be valid (internal callers only).
 */
stsa_status stsa_sparse_rows_multi(stsa_ctx *ctx, const stsa_plan *const *plans,
                                   int nplans, const stsa_tensor *q, const stsa_tensor *k,
                                   const stsa_tensor *v, const stsa_tensor *out);

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
