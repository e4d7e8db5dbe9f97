/*
 * tensor_copy.c — the experimental tensor utilities. stsa_tensor_copy: any
 * layout and dtype to any other, of one shape. Equal dtypes copy bits (so a
 * round trip through a contiguous buffer is exact, NaN payloads included);
 * different ones convert through f32 as the kernels' row loads and stores
 * do. stsa_tensor_check and stsa_tensors_overlap: the calls' own argument
 * rules (core/tensor.c), for libraries on top of libstsa.
 */
#define STSA_EXPERIMENTAL /* defines stsa_tensor_copy, _check, _overlap */
#include <string.h>

#include "core/convert.h"
#include "core/tensor.h"

static void copy_row_bits(const char *src, int64_t src_stride, char *dst,
                          int64_t dst_stride, int64_t n, size_t esize) {
  if (src_stride == 1 && dst_stride == 1) {
    memcpy(dst, src, (size_t)n * esize);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    memcpy(dst + (size_t)(i * dst_stride) * esize, src + (size_t)(i * src_stride) * esize,
           esize);
}

stsa_status stsa_tensor_copy(const stsa_tensor *in, const stsa_tensor *out) {
  STSA_TRY(stsa_check_tensor(in, "in", NULL));
  STSA_TRY(stsa_check_tensor(out, "out", NULL));
  for (int i = 0; i < 4; i++)
    if (in->shape[i] != out->shape[i])
      return STSA_ERR_BAD_SHAPE;
  if (stsa_tensors_share_memory(in, out))
    return STSA_ERR_OVERLAP;
  const int64_t B = in->shape[0], S = in->shape[1], H = in->shape[2], D = in->shape[3];
  const size_t esize = stsa_dtype_size(in->dtype);
  float row[STSA_MAX_HEAD_DIM];
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t h = 0; h < H; h++) {
        const void *src = stsa_tensor_row(in, b, s, h);
        void *dst = stsa_tensor_row(out, b, s, h);
        if (in->dtype == out->dtype) {
          copy_row_bits(src, in->stride[3], dst, out->stride[3], D, esize);
        } else {
          stsa_load_row_f32(src, in->dtype, in->stride[3], D, row);
          stsa_store_row(row, D, dst, out->dtype, out->stride[3]);
        }
      }
  return STSA_OK;
}

stsa_status stsa_tensor_check(const stsa_tensor *t) {
  return stsa_check_tensor(t, "tensor", NULL);
}

int stsa_tensors_overlap(const stsa_tensor *a, const stsa_tensor *b) {
  if (stsa_check_tensor(a, "a", NULL) != STSA_OK ||
      stsa_check_tensor(b, "b", NULL) != STSA_OK)
    return 0;
  return stsa_tensors_share_memory(a, b);
}
