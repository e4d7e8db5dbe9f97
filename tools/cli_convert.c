/* cli_convert.c — dtype conversions through stsa_tensor_copy (cli_convert.h). */
#include "cli_convert.h"

#include "cli_util.h"

void cli_load_row_f32(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, float *out) {
  const int64_t D = t->shape[3];
  stsa_tensor row = *t;
  row.data =
      (char *)t->data + (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2]) *
                            stsa_dtype_size(t->dtype);
  row.shape[0] = row.shape[1] = row.shape[2] = 1;
  stsa_tensor f32 = stsa_tensor_bshd(out, STSA_F32, 1, 1, 1, D);
  cli_check(stsa_tensor_copy(&row, &f32), NULL, "reading a row");
}

/* Values per row of the copy's [1, rows, 1, ROW] views (at most the head
 * dim a tensor may have). */
#define ROW 256

static void store_rows(const float *in, int64_t rows, int64_t len, void *dst,
                       stsa_dtype dtype) {
  stsa_tensor from = stsa_tensor_bshd((void *)in, STSA_F32, 1, rows, 1, len);
  stsa_tensor to = stsa_tensor_bshd(dst, dtype, 1, rows, 1, len);
  cli_check(stsa_tensor_copy(&from, &to), NULL, "converting values");
}

void cli_store_f32(const float *in, size_t n, void *dst, stsa_dtype dtype) {
  const size_t full = n / ROW * ROW;
  if (full > 0)
    store_rows(in, (int64_t)(full / ROW), ROW, dst, dtype);
  if (n > full)
    store_rows(in + full, 1, (int64_t)(n - full),
               (char *)dst + full * stsa_dtype_size(dtype), dtype);
}
