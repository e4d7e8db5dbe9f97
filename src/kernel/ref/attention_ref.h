/*
 * attention_ref.h — the plain reference: double accumulation, one row at a
 * time, no tiling. It is the test oracle and the STSA_BACKEND=ref path.
 */
#ifndef STSA_KERNEL_REF_ATTENTION_REF_H
#define STSA_KERNEL_REF_ATTENTION_REF_H

#include <stdint.h>

#include "stsa.h"

/* keep(ctx, h, i, j): 1 if query i may see key j in head h (memory order). */
typedef int (*stsa_pair_pred)(const void *ctx, int64_t h, int64_t i, int64_t j);

/* Computes rows [row0, row1) of the flattened (b, h, i) row space, i fastest.
 * A NULL predicate keeps every pair. Rows that keep nothing give 0 and
 * lse = -inf; NaN and Inf follow stsa.h ("Non-finite inputs"), the oracle of
 * the tiled backends for those too. Returns -1 when out of memory. Inputs
 * must be validated. */
int stsa_attention_ref_rows(const stsa_tensor *q, const stsa_tensor *k,
                            const stsa_tensor *v, const stsa_tensor *out,
                            const stsa_attn_opts *opts, stsa_pair_pred keep,
                            const void *keep_ctx, int64_t row0, int64_t row1);

/* The same over rows [row0, row1) on `threads` OpenMP threads, in chunks of
 * 16 rows; -1 when out of memory. */
int stsa_attention_ref_parallel(const stsa_tensor *q, const stsa_tensor *k,
                                const stsa_tensor *v, const stsa_tensor *out,
                                const stsa_attn_opts *opts, stsa_pair_pred keep,
                                const void *keep_ctx, int64_t row0, int64_t row1,
                                int threads);

#endif
