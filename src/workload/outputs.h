/*
 * outputs.h — the workload's q, k and v as libstsa's public API sees them
 * (internal to libstsa_io): checked whole, then written one token at a time
 * through stsa_tensor_copy, which converts f32 rows to the tensor's dtype as
 * the kernels' stores do.
 */
#ifndef STSA_WORKLOAD_OUTPUTS_H
#define STSA_WORKLOAD_OUTPUTS_H

#include <stdint.h>

#define STSA_EXPERIMENTAL /* stsa_tensor_check, stsa_tensor_copy */
#include "stsa.h"

/* STSA_OK if t is a valid tensor (libstsa's rules: data, dtype, sizes,
 * strides, alignment) of shape [B, N, H, D]; else the status saying why. */
stsa_status wl_check_output(const stsa_tensor *t, int64_t B, int64_t N, int64_t H,
                            int64_t D);

/* Writes token (b, s) of checked t from rows, its [H, D] values in f32. */
void wl_store_token(const float *rows, const stsa_tensor *t, int64_t b, int64_t s);

#endif
