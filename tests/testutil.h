/*
 * testutil.h — the small test harness shared by every C test.
 *
 * CHECK(cond, fmt, ...) records one assertion; a failing one prints where and
 * why and the test carries on, so one run shows every failure. Each test
 * program ends with `return tu_finish("name");`, which prints a line
 * "name: N passed, N failed" and returns the exit status.
 */
#ifndef STSA_TESTUTIL_H
#define STSA_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "stsa.h"
#include "stsa_io.h"

void tu_check(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define CHECK(cond, ...) tu_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* Asserts that an expression returns the given stsa_status. */
#define CHECK_STATUS(expr, expected)                                                     \
  do {                                                                                   \
    stsa_status tu_st_ = (expr);                                                         \
    CHECK(tu_st_ == (expected), "%s returned %s, expected %s", #expr,                    \
          stsa_status_str(tu_st_), stsa_status_str(expected));                           \
  } while (0)

int tu_finish(const char *name);
long tu_failures(void);

/* Deterministic generator (splitmix64) so every run sees the same data. */
typedef struct tu_rng {
  uint64_t state;
} tu_rng;
uint64_t tu_rng_next(tu_rng *rng);
/* Uniform in [-1, 1). */
double tu_rng_uniform(tu_rng *rng);
/* Standard normal (Box-Muller). */
double tu_rng_normal(tu_rng *rng);

/* ---- buffers with guard bytes ------------------------------------------ */
/* Allocates `bytes` usable bytes followed (and preceded) by guard bytes of a
 * known pattern; tu_guard_ok() tells whether they are intact. */
void *tu_guarded_alloc(size_t bytes);
int tu_guard_ok(const void *ptr);
void tu_guarded_free(void *ptr);

/* ---- elements ------------------------------------------------------------ */
/* Stores `value` at element index `idx` of a buffer of `dtype`, rounding to
 * nearest even, and returns the value actually stored. */
double tu_store(void *base, stsa_dtype dtype, size_t idx, double value);
double tu_load(const void *base, stsa_dtype dtype, size_t idx);
/* Element offset of (b,s,h,d) in a tensor. */
size_t tu_offset(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d);
/* Number of elements a tensor's strides span (max offset + 1). */
size_t tu_span(const stsa_tensor *t);

/* ---- layouts ------------------------------------------------------------- */
typedef enum tu_layout {
  TU_BSHD = 0,
  TU_BHSD = 1,
  TU_SHD = 2,
  TU_LAYOUT_COUNT
} tu_layout;
const char *tu_layout_name(tu_layout layout);
/* A descriptor of the given layout over `data` (B must be 1 for TU_SHD). */
stsa_tensor tu_make_tensor(void *data, stsa_dtype dtype, tu_layout layout, int64_t B,
                           int64_t S, int64_t H, int64_t D);

/* Allocates a guarded tensor and fills it with scale * N(0,1) values.  */
stsa_tensor tu_random_tensor(tu_rng *rng, stsa_dtype dtype, tu_layout layout, int64_t B,
                             int64_t S, int64_t H, int64_t D, double scale);
/* A guarded tensor filled with a NaN-free sentinel (0x7b bytes). */
stsa_tensor tu_sentinel_tensor(stsa_dtype dtype, tu_layout layout, int64_t B, int64_t S,
                               int64_t H, int64_t D);
/* 1 if every byte of the tensor's span is the sentinel. */
int tu_is_sentinel(const stsa_tensor *t);
void tu_free_tensor(stsa_tensor *t);

/* ---- comparisons --------------------------------------------------------- */
/* Max |a - b| over all elements of two same-shape tensors, and (if scale is
 * not NULL) max |b|, the output scale. NaN or Inf in either gives +inf, so it
 * can never pass a tolerance. */
double tu_max_abs_diff(const stsa_tensor *a, const stsa_tensor *b, double *scale);
/* 1 if two tensors of one layout and dtype hold the same bytes. */
int tu_same_bytes(const stsa_tensor *a, const stsa_tensor *b);

/* The tiled backends this machine runs (every one of the table but auto and
 * ref: portable, and avx2, avx512, amx or neon where there), in the table's
 * order in out[0..n); returns n (at most TU_MAX_BACKENDS). */
enum { TU_MAX_BACKENDS = STSA_BACKEND_COUNT_ - 2 };
int tu_tiled_backends(stsa_backend out[TU_MAX_BACKENDS]);

/* 1 for the backends with bf16 tiles (kernels.h: full_tile_bf16): amx and
 * avx512bf16. */
int tu_has_bf16_tiles(stsa_backend backend);

/* 1 when the test runs under an emulator (QEMU, 10-50x slower: ctest sets
 * STSA_TEST_EMULATED in cross builds), where a long sweep takes fewer
 * points; its kernels' correctness is what such a run checks. */
int tu_emulated(void);

/* A context on `backend` with `threads` threads and q_tile x kv_tile tiles;
 * exits the test program when none can be created. */
stsa_ctx *tu_make_ctx(stsa_backend backend, int threads, int q_tile, int kv_tile);

#endif
