/*
 * outputs.c — checking and writing the workload's outputs through libstsa's
 * experimental tensor utilities (outputs.h: stsa_tensor_check,
 * stsa_tensor_copy), so that libstsa_io keeps no copy of libstsa's tensor
 * rules or conversions.
 */
#include "workload/outputs.h"

stsa_status wl_check_output(const stsa_tensor *t, int64_t B, int64_t N, int64_t H,
                            int64_t D) {
  stsa_status st = stsa_tensor_check(t);
  if (st != STSA_OK)
    return st;
  if (t->shape[0] != B || t->shape[1] != N || t->shape[2] != H || t->shape[3] != D)
    return STSA_ERR_BAD_SHAPE;
  return STSA_OK;
}

void wl_store_token(const float *rows, const stsa_tensor *t, int64_t b, int64_t s) {
  stsa_tensor dst = *t;
  dst.data = (char *)t->data +
             (size_t)(b * t->stride[0] + s * t->stride[1]) * stsa_dtype_size(t->dtype);
  dst.shape[0] = dst.shape[1] = 1;
  stsa_tensor src =
      stsa_tensor_bshd((void *)rows, STSA_F32, 1, 1, t->shape[2], t->shape[3]);
  /* cannot fail: a view of a checked tensor, from a buffer of our own */
  (void)stsa_tensor_copy(&src, &dst);
}
