/*
 * test_store_rows.c — stsa_store_row_streaming, which writes a permuted
 * tile's output rows: bit for bit what stsa_store_row writes (NaN payloads,
 * Inf, rounding to f16/bf16 included) for every dtype, for rows it streams
 * (16-byte multiples at 16-byte aligned addresses) and rows it hands to
 * stsa_store_row (misaligned, short of a 16-byte multiple, strided), with
 * the bytes around each row untouched.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "core/tensor.h"
#include "testutil.h"

enum { GUARD = 64, SENTINEL = 0xA5 };

static void check_row(tu_rng *rng, stsa_dtype dtype, int64_t n, int64_t stride,
                      size_t offset) {
  const size_t esize = stsa_dtype_size(dtype);
  const size_t span = (size_t)((n - 1) * stride + 1) * esize;
  const size_t bytes = GUARD + offset + span + GUARD;
  float *src = malloc(sizeof(float) * (size_t)n);
  unsigned char *got = aligned_alloc(64, (bytes + 63) / 64 * 64);
  unsigned char *want = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!src || !got || !want) {
    CHECK(0, "out of memory");
    free(src), free(got), free(want);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    src[i] = (float)(tu_rng_normal(rng) * 1e3);
  /* specials: a NaN with a payload, infinities, a subnormal, -0 */
  const uint32_t payload = 0x7fc01234u;
  memcpy(&src[0], &payload, sizeof payload);
  if (n > 3) {
    src[1] = INFINITY, src[2] = -INFINITY, src[3] = 1e-40f;
  }
  if (n > 4)
    src[4] = -0.0f;
  memset(got, SENTINEL, bytes);
  memset(want, SENTINEL, bytes);
  stsa_store_row_streaming(src, n, got + GUARD + offset, dtype, stride);
  stsa_store_fence();
  stsa_store_row(src, n, want + GUARD + offset, dtype, stride);
  CHECK(!memcmp(got, want, bytes),
        "%s n %lld stride %lld offset %zu: the streamed row (or the bytes around it) "
        "differs from stsa_store_row's",
        stsa_dtype_name(dtype), (long long)n, (long long)stride, offset);
  free(src), free(got), free(want);
}

int main(void) {
  tu_rng rng = {7};
  const stsa_dtype dtypes[3] = {STSA_F32, STSA_F16, STSA_BF16};
  /* head dims that stream (64, 80, 128, the largest) and lengths that do not
   * fill 16 bytes in one dtype or another (1, 5, 6, 12) */
  const int64_t lengths[] = {1, 4, 5, 6, 8, 12, 64, 80, 128, STSA_MAX_HEAD_DIM};
  /* from a 64-byte boundary; 2 only for 16-bit elements (a row is aligned
   * to its element) */
  const size_t offsets[] = {0, 2, 4, 8, 16, 48};
  for (int t = 0; t < 3; t++)
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++)
      for (size_t o = 0; o < sizeof offsets / sizeof *offsets; o++)
        for (int64_t stride = 1; stride <= 3; stride += 2)
          if (offsets[o] % stsa_dtype_size(dtypes[t]) == 0)
            check_row(&rng, dtypes[t], lengths[l], stride, offsets[o]);
  return tu_finish("test_store_rows");
}
