/* tensor.c — tensor descriptors and the validation of attention arguments. */
#include "core/tensor.h"

#include <math.h>
#include <stdlib.h>

#include "core/checked.h"
#include "core/convert.h"
#include "core/sized.h"

/* Strides of sizes nobody has checked yet saturate at INT64_MAX instead of
 * overflowing; stsa_check_tensor then names the size that is out of range. */
stsa_tensor stsa_tensor_bshd(void *data, stsa_dtype dtype, int64_t B, int64_t S,
                             int64_t H, int64_t D) {
  const int64_t HD = stsa_mul_sat(H, D);
  stsa_tensor t = {data, dtype, {B, S, H, D}, {stsa_mul_sat(S, HD), HD, D, 1}};
  return t;
}

stsa_tensor stsa_tensor_bhsd(void *data, stsa_dtype dtype, int64_t B, int64_t S,
                             int64_t H, int64_t D) {
  const int64_t SD = stsa_mul_sat(S, D);
  stsa_tensor t = {data, dtype, {B, S, H, D}, {stsa_mul_sat(H, SD), D, SD, 1}};
  return t;
}

stsa_tensor stsa_tensor_shd(void *data, stsa_dtype dtype, int64_t S, int64_t H,
                            int64_t D) {
  return stsa_tensor_bshd(data, dtype, 1, S, H, D);
}

static const char DIM_NAMES[4] = {'B', 'S', 'H', 'D'};

/* Sizes above 2^40 elements per dimension are not realistic and keep every
 * later product far from overflow. */
#define STSA_MAX_DIM ((int64_t)1 << 40)

stsa_status stsa_check_tensor(const stsa_tensor *t, const char *name, stsa_errbuf *err) {
  STSA_RETURN_IF(!t, err, STSA_ERR_NULL_ARG, "%s: tensor descriptor is NULL", name);
  /* Sizes first: an empty tensor (often with a NULL pointer, and with strides
   * of 0 derived from a 0 size) is reported as what it is. */
  for (int i = 0; i < 4; i++) {
    STSA_RETURN_IF(t->shape[i] == 0 && i == STSA_DIM_D, err, STSA_ERR_BAD_SHAPE,
                   "%s: head dim D is 0, must be >= 1", name);
    STSA_RETURN_IF(t->shape[i] == 0, err, STSA_ERR_BAD_SHAPE,
                   "%s: tensor is empty: size of %c is 0, must be >= 1", name,
                   DIM_NAMES[i]);
    STSA_RETURN_IF(t->shape[i] < 0 || t->shape[i] > STSA_MAX_DIM, err, STSA_ERR_BAD_SHAPE,
                   "%s: size of %c is %lld, expected 1..2^40", name, DIM_NAMES[i],
                   (long long)t->shape[i]);
  }
  STSA_RETURN_IF(!t->data, err, STSA_ERR_NULL_ARG, "%s: data pointer is NULL", name);
  size_t esize = stsa_dtype_size(t->dtype);
  STSA_RETURN_IF(esize == 0, err, STSA_ERR_BAD_DTYPE,
                 "%s: dtype %d is not one of f32, f16, bf16", name, (int)t->dtype);
  for (int i = 0; i < 4; i++)
    STSA_RETURN_IF(t->stride[i] <= 0 || t->stride[i] > STSA_MAX_DIM, err,
                   STSA_ERR_BAD_STRIDE, "%s: stride of %c is %lld, expected 1..2^40",
                   name, DIM_NAMES[i], (long long)t->stride[i]);
  STSA_RETURN_IF(t->shape[3] > STSA_MAX_HEAD_DIM, err, STSA_ERR_BAD_SHAPE,
                 "%s: head dim D = %lld exceeds the supported maximum %d", name,
                 (long long)t->shape[3], STSA_MAX_HEAD_DIM);
  STSA_RETURN_IF((uintptr_t)t->data % esize != 0, err, STSA_ERR_MISALIGNED,
                 "%s: data pointer %p is not aligned to its %zu-byte elements", name,
                 t->data, esize);
  /* No two indices may share an address: sorted by stride, each dimension must
   * step over everything the smaller ones span. Size-1 dimensions never step. */
  int order[4] = {0, 1, 2, 3};
  for (int i = 1; i < 4; i++)
    for (int j = i; j > 0 && t->stride[order[j]] < t->stride[order[j - 1]]; j--) {
      int tmp = order[j];
      order[j] = order[j - 1];
      order[j - 1] = tmp;
    }
  double span = 1; /* double: products of four 2^40 values must not wrap */
  for (int i = 0; i < 4; i++) {
    int d = order[i];
    if (t->shape[d] == 1)
      continue;
    STSA_RETURN_IF((double)t->stride[d] < span, err, STSA_ERR_BAD_STRIDE,
                   "%s: stride of %c (%lld) makes elements alias", name, DIM_NAMES[d],
                   (long long)t->stride[d]);
    span += (double)(t->shape[d] - 1) * (double)t->stride[d];
  }
  STSA_RETURN_IF(span * (double)esize > (double)((uint64_t)1 << 52), err,
                 STSA_ERR_BAD_SHAPE,
                 "%s: tensor spans %.0f bytes, more than the limit of 2^52 (%llu)", name,
                 span * (double)esize, (unsigned long long)1 << 52);
  return STSA_OK;
}

void stsa_tensor_byte_range(const stsa_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  uint64_t span = 1;
  for (int i = 0; i < 4; i++)
    span += (uint64_t)(t->shape[i] - 1) * (uint64_t)t->stride[i];
  *lo = (uintptr_t)t->data;
  *hi = *lo + (uintptr_t)(span * stsa_dtype_size(t->dtype));
}

static int ranges_overlap(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi) {
  return alo < bhi && blo < ahi;
}

/* 1 if some offset sum_i c_i * stride[dims[i]], |c_i| < shape[dims[i]], over
 * dims k.. (sorted by decreasing stride, non-aliasing) equals `delta`. Every
 * stride exceeds the reach `rest` of the smaller dims, so at most two c_k
 * remain possible per level: at most 2^4 paths. */
static int offset_reachable(const stsa_tensor *t, const int *dims, int n, int k,
                            int64_t delta) {
  if (k >= n || k >= 4)
    return delta == 0;
  int64_t rest = 0; /* reach of dims k+1..n-1; < 2^52 for a checked tensor */
  for (int i = k + 1; i < n && i < 4; i++)
    rest += (t->shape[dims[i]] - 1) * t->stride[dims[i]];
  const int64_t st = t->stride[dims[k]], lim = t->shape[dims[k]] - 1;
  /* c with |delta - c*st| <= rest: ceil((delta-rest)/st) .. floor((delta+rest)/st) */
  int64_t lo = delta - rest, hi = delta + rest;
  int64_t c0 = lo >= 0 ? (lo + st - 1) / st : -((-lo) / st);
  int64_t c1 = hi >= 0 ? hi / st : -((-hi + st - 1) / st);
  if (c0 < -lim)
    c0 = -lim;
  if (c1 > lim)
    c1 = lim;
  for (int64_t c = c0; c <= c1; c++)
    if (offset_reachable(t, dims, n, k + 1, delta - c * st))
      return 1;
  return 0;
}

int stsa_tensors_share_memory(const stsa_tensor *a, const stsa_tensor *b) {
  uintptr_t alo, ahi, blo, bhi;
  stsa_tensor_byte_range(a, &alo, &ahi);
  stsa_tensor_byte_range(b, &blo, &bhi);
  if (!ranges_overlap(alo, ahi, blo, bhi))
    return 0;
  const size_t esize = stsa_dtype_size(a->dtype);
  int same = a->dtype == b->dtype;
  for (int i = 0; i < 4; i++)
    same = same && a->shape[i] == b->shape[i] && a->stride[i] == b->stride[i];
  const uintptr_t diff = alo > blo ? alo - blo : blo - alo;
  if (!same || diff % esize != 0)
    return 1; /* interleaving is only recognised for one layout */
  /* b's elements are a's shifted by delta elements: they meet when delta is
   * the offset difference of two indices of the shape */
  int dims[4], n = 0;
  for (int i = 0; i < 4; i++)
    if (a->shape[i] > 1)
      dims[n++] = i;
  for (int i = 1; i < n; i++) /* by decreasing stride */
    for (int j = i; j > 0 && a->stride[dims[j]] > a->stride[dims[j - 1]]; j--) {
      int tmp = dims[j];
      dims[j] = dims[j - 1];
      dims[j - 1] = tmp;
    }
  return offset_reachable(a, dims, n, 0, (int64_t)(diff / esize));
}

/* Rows a scan thread takes at least: fewer are not worth a thread. */
#define SCAN_ROWS_PER_THREAD 4096

stsa_status stsa_check_finite_tokens(const stsa_tensor *t, const char *name, int64_t s0,
                                     int64_t s1, int threads, stsa_errbuf *err) {
  const int64_t S = s1 - s0, H = t->shape[2], tokens = t->shape[0] * S, rows = tokens * H;
  int64_t first_bad = rows;
  const int64_t most = rows / SCAN_ROWS_PER_THREAD;
  const int nth = threads < 1 ? 1 : most < threads ? (most > 1 ? (int)most : 1) : threads;
  /* by token, its heads inside: a division per token for the rows'
   * indices, not three per row */
#pragma omp parallel for num_threads(nth) schedule(static) reduction(min : first_bad)
  for (int64_t tk = 0; tk < tokens; tk++) {
    if (tk * H > first_bad) /* this thread found one before: the rest cannot win */
      continue;
    const int64_t b = tk / S, s = s0 + tk % S;
    for (int64_t h = 0; h < H; h++)
      if (!stsa_row_is_finite(stsa_tensor_row(t, b, s, h), t->dtype, t->stride[3],
                              t->shape[3])) {
        first_bad = tk * H + h;
        break;
      }
  }
  STSA_RETURN_IF(first_bad < rows, err, STSA_ERR_NONFINITE,
                 "%s[b=%lld, s=%lld, h=%lld] holds NaN or Inf", name,
                 (long long)(first_bad / (S * H)), (long long)(s0 + first_bad / H % S),
                 (long long)(first_bad % H));
  return STSA_OK;
}

stsa_status stsa_check_attention(const stsa_tensor *q, const stsa_tensor *k,
                                 const stsa_tensor *v, const stsa_tensor *out,
                                 const stsa_attn_opts *opts, int finite_threads,
                                 stsa_errbuf *err) {
  STSA_TRY(stsa_check_tensor(q, "q", err));
  STSA_TRY(stsa_check_tensor(k, "k", err));
  STSA_TRY(stsa_check_tensor(v, "v", err));
  STSA_TRY(stsa_check_tensor(out, "out", err));
  const stsa_tensor *all[4] = {q, k, v, out};
  const char *names[4] = {"q", "k", "v", "out"};
  for (int i = 1; i < 4; i++) {
    STSA_RETURN_IF(all[i]->shape[0] != q->shape[0], err, STSA_ERR_BAD_SHAPE,
                   "%s has batch %lld but q has %lld", names[i],
                   (long long)all[i]->shape[0], (long long)q->shape[0]);
    STSA_RETURN_IF(all[i]->shape[2] != q->shape[2], err, STSA_ERR_BAD_SHAPE,
                   "%s has %lld heads but q has %lld", names[i],
                   (long long)all[i]->shape[2], (long long)q->shape[2]);
    STSA_RETURN_IF(all[i]->shape[3] != q->shape[3], err, STSA_ERR_BAD_SHAPE,
                   "%s has head dim %lld but q has %lld", names[i],
                   (long long)all[i]->shape[3], (long long)q->shape[3]);
  }
  STSA_RETURN_IF(v->shape[1] != k->shape[1], err, STSA_ERR_BAD_SHAPE,
                 "v has %lld tokens but k has %lld", (long long)v->shape[1],
                 (long long)k->shape[1]);
  STSA_RETURN_IF(out->shape[1] != q->shape[1], err, STSA_ERR_BAD_SHAPE,
                 "out has %lld tokens but q has %lld", (long long)out->shape[1],
                 (long long)q->shape[1]);
  uintptr_t lo[5], hi[5];
  for (int i = 0; i < 4; i++)
    stsa_tensor_byte_range(all[i], &lo[i], &hi[i]);
  for (int i = 0; i < 3; i++)
    STSA_RETURN_IF(ranges_overlap(lo[3], hi[3], lo[i], hi[i]), err, STSA_ERR_OVERLAP,
                   "out overlaps %s in memory", names[i]);
  if (opts) {
    STSA_TRY(STSA_SIZED_CHECK(opts, stsa_attn_opts, err));
    STSA_RETURN_IF(!isfinite(opts->scale) || opts->scale < 0, err, STSA_ERR_BAD_PARAM,
                   "scale = %s must be finite and >= 0 (0 selects 1/sqrt(D))",
                   stsa_real_str(opts->scale, 1).s);
    if (opts->lse) {
      STSA_RETURN_IF((uintptr_t)opts->lse % sizeof(float) != 0, err, STSA_ERR_MISALIGNED,
                     "lse pointer is not aligned to float");
      lo[4] = (uintptr_t)opts->lse;
      hi[4] =
          lo[4] + (uintptr_t)(q->shape[0] * q->shape[2] * q->shape[1]) * sizeof(float);
      for (int i = 0; i < 4; i++)
        STSA_RETURN_IF(ranges_overlap(lo[4], hi[4], lo[i], hi[i]), err, STSA_ERR_OVERLAP,
                       "lse overlaps %s in memory", names[i]);
    }
  }
  if (finite_threads > 0)
    for (int i = 0; i < 3; i++)
      STSA_TRY(stsa_check_finite_tokens(all[i], names[i], 0, all[i]->shape[1],
                                        finite_threads, err));
  return STSA_OK;
}
