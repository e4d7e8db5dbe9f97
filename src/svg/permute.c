/*
 * permute.c — token permutation by copy: the alternative to the gathers
 * fused into the kernel (stsa_sparse_attention walks plan orders itself).
 * Kept for measurement and for callers who want permuted tensors.
 */
#include <stdlib.h>

#include "core/convert.h"
#include "core/tensor.h"

stsa_status stsa_permute_tokens(const stsa_geometry *g, stsa_order order, int inverse,
                                const stsa_tensor *in, const stsa_tensor *out) {
  if (!g)
    return STSA_ERR_NULL_ARG;
  STSA_TRY(stsa_check_tensor(in, "in", NULL));
  STSA_TRY(stsa_check_tensor(out, "out", NULL));
  const int64_t N = stsa_geometry_tokens(g);
  for (int i = 0; i < 4; i++)
    if (in->shape[i] != out->shape[i])
      return STSA_ERR_BAD_SHAPE;
  if (N <= 0 || in->shape[1] != N)
    return STSA_ERR_BAD_SHAPE;
  uintptr_t ilo, ihi, olo, ohi;
  stsa_tensor_byte_range(in, &ilo, &ihi);
  stsa_tensor_byte_range(out, &olo, &ohi);
  if (ilo < ohi && olo < ihi)
    return STSA_ERR_OVERLAP;
  int64_t *perm = malloc(sizeof *perm * (size_t)N);
  float *row = malloc(sizeof *row * (size_t)in->shape[3]);
  stsa_status st =
      perm && row ? stsa_order_permutation(g, order, perm) : STSA_ERR_OUT_OF_MEMORY;
  const int64_t B = in->shape[0], H = in->shape[2], D = in->shape[3];
  for (int64_t b = 0; st == STSA_OK && b < B; b++)
    for (int64_t pos = 0; pos < N; pos++) {
      /* position pos of the order holds native token perm[pos] */
      int64_t src = inverse ? pos : perm[pos], dst = inverse ? perm[pos] : pos;
      for (int64_t h = 0; h < H; h++) {
        stsa_load_row_f32(stsa_tensor_row(in, b, src, h), in->dtype, in->stride[3], D,
                          row);
        stsa_store_row(row, D, (void *)stsa_tensor_row(out, b, dst, h), out->dtype,
                       out->stride[3]);
      }
    }
  free(perm);
  free(row);
  return st;
}
