/*
 * convert.h — scalar conversions between f32 and the 16-bit float formats.
 * Round to nearest even; NaN stays NaN; overflow gives Inf (f16).
 */
#ifndef STSA_CORE_CONVERT_H
#define STSA_CORE_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "stsa.h"

float stsa_f16_to_f32(uint16_t h);
uint16_t stsa_f32_to_f16(float f);
float stsa_bf16_to_f32(uint16_t h);
uint16_t stsa_f32_to_bf16(float f);

/* dst[i] = src[i * stride] as f32, i < n (stride in elements). */
void stsa_load_row_f32(const void *src, stsa_dtype dtype, int64_t stride, int64_t n,
                       float *dst);
/* The same for i in [from, n) only: the elements an ISA's vector loop of
 * load_row left (dtype is the int the kernel table passes). */
void stsa_load_row_rest(const void *src, int dtype, int64_t stride, int64_t from,
                        int64_t n, float *dst);
/* dst[i * stride] = src[i] converted to dtype, i < n. */
void stsa_store_row(const float *src, int64_t n, void *dst, stsa_dtype dtype,
                    int64_t stride);
/* The same, for rows the caller will not read again soon: bypasses the
 * caches where the CPU can (x86-64: unit stride, 16-byte aligned rows of
 * 16-byte multiples). Call stsa_store_fence before other threads or the
 * caller read such rows. */
void stsa_store_row_streaming(const float *src, int64_t n, void *dst, stsa_dtype dtype,
                              int64_t stride);
/* Orders the streaming stores before the stores after it. */
void stsa_store_fence(void);
/* 1 if all n elements (stride apart) are finite. */
int stsa_row_is_finite(const void *src, stsa_dtype dtype, int64_t stride, int64_t n);

#endif
