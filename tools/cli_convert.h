/*
 * cli_convert.h — dtype conversions the CLI needs, through libstsa's public
 * stsa_tensor_copy (so the CLI converts exactly as the kernels load and
 * store: f16/bf16 <-> f32 with round to nearest even).
 */
#ifndef STSA_CLI_CONVERT_H
#define STSA_CLI_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#define STSA_EXPERIMENTAL /* stsa_tensor_copy */
#include "stsa.h"

/* Row (b, s, h) of t (its shape[3] elements) as f32 into out. */
void cli_load_row_f32(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, float *out);

/* n f32 values into dst as dtype (dst holds n elements of it). */
void cli_store_f32(const float *in, size_t n, void *dst, stsa_dtype dtype);

#endif
