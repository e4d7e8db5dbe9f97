/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"

static long g_passed, g_failed; /* test-program state, not library state */

void tu_check(int ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    g_passed++;
    return;
  }
  g_failed++;
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

long tu_failures(void) { return g_failed; }

int tu_finish(const char *name) {
  printf("%s: %ld passed, %ld failed\n", name, g_passed, g_failed);
  return g_failed ? 1 : 0;
}

uint64_t tu_rng_next(tu_rng *rng) {
  uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double tu_rng_uniform(tu_rng *rng) {
  return (double)(tu_rng_next(rng) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

double tu_rng_normal(tu_rng *rng) {
  double u1 = ((double)(tu_rng_next(rng) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = (double)(tu_rng_next(rng) >> 11) / 9007199254740992.0;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Layout of a guarded block: [size_t bytes][pad to 64][GUARD][user][GUARD] */
enum { TU_GUARD = 64, TU_HEAD = 64 };
static const unsigned char TU_GUARD_BYTE = 0xA5;

void *tu_guarded_alloc(size_t bytes) {
  unsigned char *raw = malloc(TU_HEAD + TU_GUARD + bytes + TU_GUARD);
  if (!raw) {
    fprintf(stderr, "tu_guarded_alloc: out of memory (%zu bytes)\n", bytes);
    abort();
  }
  memcpy(raw, &bytes, sizeof bytes);
  memset(raw + TU_HEAD, TU_GUARD_BYTE, TU_GUARD);
  memset(raw + TU_HEAD + TU_GUARD + bytes, TU_GUARD_BYTE, TU_GUARD);
  return raw + TU_HEAD + TU_GUARD;
}

int tu_guard_ok(const void *ptr) {
  const unsigned char *user = ptr;
  const unsigned char *raw = user - TU_GUARD - TU_HEAD;
  size_t bytes;
  memcpy(&bytes, raw, sizeof bytes);
  for (int i = 0; i < TU_GUARD; i++)
    if (raw[TU_HEAD + i] != TU_GUARD_BYTE || user[bytes + (size_t)i] != TU_GUARD_BYTE)
      return 0;
  return 1;
}

void tu_guarded_free(void *ptr) {
  if (ptr)
    free((unsigned char *)ptr - TU_GUARD - TU_HEAD);
}

double tu_store(void *base, stsa_dtype dtype, size_t idx, double value) {
  switch (dtype) {
  case STSA_F32:
    ((float *)base)[idx] = (float)value;
    return ((float *)base)[idx];
  case STSA_F16:
    ((uint16_t *)base)[idx] = stsa_f32_to_f16((float)value);
    return stsa_f16_to_f32(((uint16_t *)base)[idx]);
  case STSA_BF16:
    ((uint16_t *)base)[idx] = stsa_f32_to_bf16((float)value);
    return stsa_bf16_to_f32(((uint16_t *)base)[idx]);
  default:
    abort();
  }
}

double tu_load(const void *base, stsa_dtype dtype, size_t idx) {
  switch (dtype) {
  case STSA_F32:
    return ((const float *)base)[idx];
  case STSA_F16:
    return stsa_f16_to_f32(((const uint16_t *)base)[idx]);
  case STSA_BF16:
    return stsa_bf16_to_f32(((const uint16_t *)base)[idx]);
  default:
    abort();
  }
}

size_t tu_offset(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d) {
  return (size_t)(b * t->stride[0] + s * t->stride[1] + h * t->stride[2] +
                  d * t->stride[3]);
}

size_t tu_span(const stsa_tensor *t) {
  size_t span = 1;
  for (int i = 0; i < 4; i++)
    span += (size_t)((t->shape[i] - 1) * t->stride[i]);
  return span;
}

const char *tu_layout_name(tu_layout layout) {
  static const char *names[] = {"bshd", "bhsd", "shd"};
  return layout < TU_LAYOUT_COUNT ? names[layout] : "unknown";
}

stsa_tensor tu_make_tensor(void *data, stsa_dtype dtype, tu_layout layout, int64_t B,
                           int64_t S, int64_t H, int64_t D) {
  switch (layout) {
  case TU_BHSD:
    return stsa_tensor_bhsd(data, dtype, B, S, H, D);
  case TU_SHD:
    if (B != 1)
      abort();
    return stsa_tensor_shd(data, dtype, S, H, D);
  default:
    return stsa_tensor_bshd(data, dtype, B, S, H, D);
  }
}

stsa_tensor tu_random_tensor(tu_rng *rng, stsa_dtype dtype, tu_layout layout, int64_t B,
                             int64_t S, int64_t H, int64_t D, double scale) {
  size_t n = (size_t)(B * S * H * D);
  void *data = tu_guarded_alloc(n * stsa_dtype_size(dtype));
  for (size_t i = 0; i < n; i++)
    tu_store(data, dtype, i, scale * tu_rng_normal(rng));
  return tu_make_tensor(data, dtype, layout, B, S, H, D);
}

enum { TU_SENTINEL = 0x7b };

stsa_tensor tu_sentinel_tensor(stsa_dtype dtype, tu_layout layout, int64_t B, int64_t S,
                               int64_t H, int64_t D) {
  size_t bytes = (size_t)(B * S * H * D) * stsa_dtype_size(dtype);
  void *data = tu_guarded_alloc(bytes);
  memset(data, TU_SENTINEL, bytes);
  return tu_make_tensor(data, dtype, layout, B, S, H, D);
}

int tu_is_sentinel(const stsa_tensor *t) {
  size_t bytes = tu_span(t) * stsa_dtype_size(t->dtype);
  const unsigned char *p = t->data;
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != TU_SENTINEL)
      return 0;
  return 1;
}

void tu_free_tensor(stsa_tensor *t) {
  tu_guarded_free(t->data);
  t->data = NULL;
}

double tu_max_abs_diff(const stsa_tensor *a, const stsa_tensor *b, double *scale) {
  double worst = 0, sc = 0;
  for (int64_t bi = 0; bi < a->shape[0]; bi++)
    for (int64_t s = 0; s < a->shape[1]; s++)
      for (int64_t h = 0; h < a->shape[2]; h++)
        for (int64_t d = 0; d < a->shape[3]; d++) {
          double x = tu_load(a->data, a->dtype, tu_offset(a, bi, s, h, d));
          double y = tu_load(b->data, b->dtype, tu_offset(b, bi, s, h, d));
          if (!isfinite(x) || !isfinite(y))
            return INFINITY;
          worst = fabs(x - y) > worst ? fabs(x - y) : worst;
          sc = fabs(y) > sc ? fabs(y) : sc;
        }
  if (scale)
    *scale = sc;
  return worst;
}

int tu_same_bytes(const stsa_tensor *a, const stsa_tensor *b) {
  return memcmp(a->data, b->data, tu_span(a) * stsa_dtype_size(a->dtype)) == 0;
}

int tu_tiled_backends(stsa_backend out[TU_MAX_BACKENDS]) {
  int n = 0;
  for (int b = 0; b < STSA_BACKEND_COUNT_; b++)
    if (b != STSA_BACKEND_AUTO && b != STSA_BACKEND_REF &&
        stsa_backend_available((stsa_backend)b))
      out[n++] = (stsa_backend)b;
  return n;
}

int tu_has_bf16_tiles(stsa_backend backend) {
  return backend == STSA_BACKEND_AMX || backend == STSA_BACKEND_AVX512BF16;
}

int tu_emulated(void) {
  const char *e = getenv("STSA_TEST_EMULATED");
  return e && *e && strcmp(e, "0") != 0;
}

stsa_ctx *tu_make_ctx(stsa_backend backend, int threads, int q_tile, int kv_tile) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backend);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, threads);
  stsa_ctx_set(ctx, STSA_PARAM_Q_TILE, q_tile);
  stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, kv_tile);
  return ctx;
}
