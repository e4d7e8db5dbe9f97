/*
 * outputs.c — checking and writing the workload's outputs through libstsa's
 * public stsa_tensor_copy (outputs.h), so that libstsa_io keeps no copy of
 * libstsa's tensor checks or conversions. The one rule it states itself is
 * which outputs share an element: libstsa answers that only inside calls
 * that then write.
 */
#include "workload/outputs.h"

stsa_status wl_check_output(const stsa_tensor *t, int64_t B, int64_t N, int64_t H,
                            int64_t D) {
  /* stsa_tensor_copy checks both its tensors before it asks whether they
   * share memory, and a valid tensor shares all of it with itself: copying t
   * onto itself writes nothing and answers STSA_ERR_OVERLAP exactly when t
   * is valid (test_workload's bad-output cases hold each status). */
  stsa_status st = stsa_tensor_copy(t, t);
  if (st != STSA_ERR_OVERLAP && st != STSA_OK)
    return st;
  if (t->shape[0] != B || t->shape[1] != N || t->shape[2] != H || t->shape[3] != D)
    return STSA_ERR_BAD_SHAPE;
  return STSA_OK;
}

static void byte_range(const stsa_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  uint64_t span = 1; /* < 2^52 elements for a checked tensor */
  for (int i = 0; i < 4; i++)
    span += (uint64_t)(t->shape[i] - 1) * (uint64_t)t->stride[i];
  *lo = (uintptr_t)t->data;
  *hi = *lo + (uintptr_t)(span * stsa_dtype_size(t->dtype));
}

/* 1 if delta (elements) is sum_k c_k stride_k with |c_k| < size_k over the
 * dims dims[k..n) of t, sorted by decreasing stride. A checked tensor's
 * stride steps over all that its smaller dims reach, so at most two c_k fit
 * per dim: at most 2^4 paths. */
static int reachable(const stsa_tensor *t, const int *dims, int n, int k, int64_t delta) {
  if (k >= n || k >= 4) /* n <= 4: the bound is for the compiler */
    return delta == 0;
  int64_t reach = 0; /* of dims k+1 .. n-1; < 2^52 for a checked tensor */
  for (int i = k + 1; i < n && i < 4; i++)
    reach += (t->shape[dims[i]] - 1) * t->stride[dims[i]];
  const int64_t st = t->stride[dims[k]], most = t->shape[dims[k]] - 1;
  /* the c with |delta - c st| <= reach, clamped to |c| <= most */
  int64_t lo = delta - reach, hi = delta + reach;
  int64_t c0 = lo >= 0 ? (lo + st - 1) / st : -(-lo / st);
  int64_t c1 = hi >= 0 ? hi / st : -((-hi + st - 1) / st);
  for (int64_t c = c0 < -most ? -most : c0; c <= (c1 > most ? most : c1); c++)
    if (reachable(t, dims, n, k + 1, delta - c * st))
      return 1;
  return 0;
}

int wl_share_element(const stsa_tensor *a, const stsa_tensor *b) {
  uintptr_t alo, ahi, blo, bhi;
  byte_range(a, &alo, &ahi);
  byte_range(b, &blo, &bhi);
  if (!(alo < bhi && blo < ahi))
    return 0;
  const size_t es = stsa_dtype_size(a->dtype);
  int same = a->dtype == b->dtype && (blo > alo ? blo - alo : alo - blo) % es == 0;
  for (int i = 0; i < 4; i++)
    same = same && a->shape[i] == b->shape[i] && a->stride[i] == b->stride[i];
  if (!same)
    return 1; /* interleaving is recognised for one layout only */
  int dims[4], n = 0;
  for (int i = 0; i < 4; i++)
    if (a->shape[i] > 1) { /* insert by decreasing stride */
      int j = n++;
      for (; j > 0 && a->stride[dims[j - 1]] < a->stride[i]; j--)
        dims[j] = dims[j - 1];
      dims[j] = i;
    }
  const int64_t delta =
      blo >= alo ? (int64_t)((blo - alo) / es) : -(int64_t)((alo - blo) / es);
  return reachable(a, dims, n, 0, delta);
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
