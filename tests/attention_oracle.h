/*
 * attention_oracle.h — attention as stsa.h defines it, in double, literally:
 * the oracle the kernel tests hold every backend to (test_nonfinite.c,
 * test_finite_range.c).
 */
#ifndef STSA_TESTS_ATTENTION_ORACLE_H
#define STSA_TESTS_ATTENTION_ORACLE_H

#include <stdint.h>

#include "stsa.h"

/* out[((b * H + h) * S_q + i) * D + d] and lse[(b * H + h) * S_q + i] of
 * softmax(s) V over the keys that keep[h][i * S_kv + j] != 0 keeps (keep,
 * or keep[h], NULL: all), s_ij = scale * q_i . k_j (stsa.h, "Non-finite
 * inputs", PyTorch SDPA's math):
 *   no kept key                               -> 0, lse -inf
 *   a kept NaN or +inf logit, or all -inf     -> NaN row, lse NaN
 *   otherwise weights exp(s - max) (-inf -> 0) and sum_j p_j v_j over every
 *   kept j, so a NaN in a kept v_j reaches the row even with weight 0.
 * q, k and v: [B, S, H, D] of any dtype and layout. */
void tu_oracle_attention(const stsa_tensor *q, const stsa_tensor *k, const stsa_tensor *v,
                         const uint8_t *const *keep, double scale, double *out,
                         double *lse);

#endif
