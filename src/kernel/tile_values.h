/*
 * tile_values.h — what the tile engines share about values: the bound below
 * which no f32 logit overflows, the marker of kept -inf logits, and the small
 * arithmetic of sizes, magnitudes and prefetches.
 */
#ifndef STSA_KERNEL_TILE_VALUES_H
#define STSA_KERNEL_TILE_VALUES_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/prefetch.h"
#include "core/tensor.h"

/* Non-finite values (the rules are in stsa.h, at stsa_attention).
 *
 * A scaled q row q' and a K row k give |partial sums of q'.k| <=
 * D max|q'_d| max|k_d|, so below LOGIT_SAFE no f32 logit overflows (a factor
 * 2 under FLT_MAX covers rounding). The documented finite range,
 * scale |q| |k| < 1e38 < 2^127 / log2(e), is inside it. Only when a (q tile,
 * kv tile) pair reaches it, or holds NaN/Inf, can a kept logit be -inf. */
#define LOGIT_SAFE 0x1p127
/* What a kept -inf logit becomes before the mask runs, so that it stays
 * apart from the -inf of dropped pairs: its weight exp2(KEPT_NEG_INF - m) is
 * 0 for any m in range, and a row whose maximum ends here kept only -inf
 * logits (NaN). No logit in range comes near it. */
#define KEPT_NEG_INF (-FLT_MAX)

static inline int64_t stsa_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Floats rounded up to whole 64-byte lines. */
static inline size_t stsa_align64(size_t floats) { return (floats + 15) / 16 * 16; }

/* The value of stsa_abs_max_bits, +inf for NaN/Inf. */
static inline float stsa_abs_max_value(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return bits < 0x7f800000u ? x : INFINITY;
}

/* Every cache line of `bytes` from row on. */
static inline void stsa_prefetch_bytes(const void *row, int64_t bytes) {
  const char *at = row;
  for (int64_t i = 0; i < bytes; i += 64)
    STSA_PREFETCH(at + i);
  STSA_PREFETCH(at + bytes - 1);
}

/* The bytes of a row of t's head dim that prefetching fetches: the row's,
 * or for strided rows their first element's. */
static inline int64_t stsa_prefetched_row_bytes(const stsa_tensor *t, int D) {
  return t->stride[3] == 1 ? D * stsa_dtype_size(t->dtype) : 1;
}

#endif
