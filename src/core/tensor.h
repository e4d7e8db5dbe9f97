/*
 * tensor.h — argument checks at the API boundary (kernels trust what
 * passes), and the address of a tensor's row.
 */
#ifndef STSA_CORE_TENSOR_H
#define STSA_CORE_TENSOR_H

#include "core/error.h"
#include "core/prefetch.h"
#include "stsa.h"

/* Address of row (b, s, h) of a checked tensor: its D elements start there,
 * stride[3] elements apart. The one place the B, S, H strides are applied;
 * indices are not checked. */
static inline void *stsa_tensor_row(const stsa_tensor *t, int64_t b, int64_t s,
                                    int64_t h) {
  const int64_t off = b * t->stride[0] + s * t->stride[1] + h * t->stride[2];
  return (char *)t->data + (size_t)off * stsa_dtype_size(t->dtype);
}

/* Rows of one head lie H x D elements apart in a [B, N, H, D] tensor: a
 * stride past a page, which the hardware prefetcher does not follow, so a
 * pass over a head's rows fetches this many rows ahead itself. */
enum { STSA_ROWS_AHEAD = 8 };

/* Prefetches `count` rows (b, s..., h) of t, those inside the tensor. */
static inline void stsa_tensor_prefetch_rows(const stsa_tensor *t, int64_t b, int64_t s,
                                             int64_t count, int64_t h) {
  const int64_t bytes = t->shape[3] * t->stride[3] * (int64_t)stsa_dtype_size(t->dtype);
  for (int64_t r = s; r < s + count && r < t->shape[1]; r++)
    stsa_prefetch_span(stsa_tensor_row(t, b, r, h), bytes);
}

/* Checks one tensor on its own: data, dtype, sizes, strides, alignment. */
stsa_status stsa_check_tensor(const stsa_tensor *t, const char *name, stsa_errbuf *err);

/* Byte range [lo, hi) that a tensor's elements occupy. */
void stsa_tensor_byte_range(const stsa_tensor *t, uintptr_t *lo, uintptr_t *hi);

/* 1 if two checked tensors may share a byte. Exact for two tensors of one
 * dtype, shape and strides (interleaved in one buffer, such as the q, k and
 * v of a fused QKV projection, do not share); otherwise any overlap of
 * their byte ranges counts. */
int stsa_tensors_share_memory(const stsa_tensor *a, const stsa_tensor *b);

/* Scans tokens [s0, s1) of a checked tensor (every batch entry and head)
 * for NaN/Inf on up to `threads` threads. The error names the first bad row
 * in (b, s, h) order, whatever the threads. */
stsa_status stsa_check_finite_tokens(const stsa_tensor *t, const char *name, int64_t s0,
                                     int64_t s1, int threads, stsa_errbuf *err);

/* Checks a dense attention call: every tensor, matching shapes, the lse
 * buffer, no overlap between what is written and anything else, and (when
 * finite_threads > 0) that inputs hold no NaN/Inf, scanned on up to that
 * many threads (stsa_finite_threads gives a context's choice). */
stsa_status stsa_check_attention(const stsa_tensor *q, const stsa_tensor *k,
                                 const stsa_tensor *v, const stsa_tensor *out,
                                 const stsa_attn_opts *opts, int finite_threads,
                                 stsa_errbuf *err);

#endif
