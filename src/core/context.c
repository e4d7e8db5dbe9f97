/* context.c — context lifetime, parameters, CPU detection. */
#define _POSIX_C_SOURCE 200809L
#include "core/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* AVX2, FMA and F16C from CPUID, and the OS saving ymm state (XGETBV);
 * read directly because not every compiler's __builtin_cpu_supports knows
 * "f16c". */
int stsa_cpu_has_avx2(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  const unsigned fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
  if ((c & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c))
    return 0;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  (void)xcr0_hi;
  if ((xcr0_lo & 6u) != 6u) /* xmm and ymm state enabled */
    return 0;
  if (__get_cpuid_max(0, NULL) < 7)
    return 0;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & (1u << 5)) != 0; /* AVX2 */
}
#else
int stsa_cpu_has_avx2(void) { return 0; }
#endif

stsa_backend stsa_resolve_backend(stsa_backend requested) {
  if (requested == STSA_BACKEND_AUTO)
    return stsa_cpu_has_avx2() ? STSA_BACKEND_AVX2 : STSA_BACKEND_PORTABLE;
  return requested;
}

/* Backend forced by the environment (AUTO when nothing is forced). An
 * unknown STSA_BACKEND, or avx2 on a CPU without it, is an error: a typo
 * must not silently run another backend than the one asked for. */
static stsa_status backend_from_env(stsa_backend *out, stsa_errbuf *err) {
  const char *name = getenv("STSA_BACKEND");
  stsa_backend named = STSA_BACKEND_AUTO;
  if (name && *name) {
    int b = 0;
    while (b < STSA_BACKEND_COUNT_ && strcmp(name, stsa_backend_name((stsa_backend)b)))
      b++;
    STSA_RETURN_IF(b == STSA_BACKEND_COUNT_, err, STSA_ERR_BAD_PARAM,
                   "STSA_BACKEND=%.64s is not one of auto, ref, portable, avx2", name);
    named = (stsa_backend)b;
  }
  const char *force = getenv("STSA_FORCE_PORTABLE");
  if (force && *force && strcmp(force, "0") != 0) {
    *out = STSA_BACKEND_PORTABLE;
    return STSA_OK;
  }
  STSA_RETURN_IF(named == STSA_BACKEND_AVX2 && !stsa_cpu_has_avx2(), err,
                 STSA_ERR_UNSUPPORTED,
                 "STSA_BACKEND=avx2 but this CPU lacks AVX2/FMA/F16C (accepted: auto, "
                 "ref, portable)");
  *out = named;
  return STSA_OK;
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > 1024 ? 1024 : (int)n);
}

stsa_status stsa_ctx_create_msg(stsa_ctx **out_ctx, char *msg, size_t msg_size) {
  stsa_errbuf err;
  stsa_err_clear(&err);
  stsa_status st = STSA_OK;
  stsa_backend backend = STSA_BACKEND_AUTO;
  stsa_ctx *ctx = NULL;
  if (!out_ctx)
    st = stsa_fail(&err, STSA_ERR_NULL_ARG, "stsa_ctx_create: out_ctx is NULL");
  if (st == STSA_OK)
    st = backend_from_env(&backend, &err);
  if (st == STSA_OK && !(ctx = calloc(1, sizeof *ctx)))
    st = stsa_fail(&err, STSA_ERR_OUT_OF_MEMORY, "stsa_ctx_create: out of memory");
  if (st != STSA_OK) {
    if (msg && msg_size > 0)
      snprintf(msg, msg_size, "%s", err.text);
    return st;
  }
  atomic_flag_clear(&ctx->err_lock);
  ctx->threads = online_cpus();
  ctx->backend = backend;
  ctx->q_tile = 192;
  ctx->kv_tile = 256;
  ctx->check_finite = 1;
  *out_ctx = ctx;
  return STSA_OK;
}

stsa_status stsa_ctx_create(stsa_ctx **out_ctx) {
  return stsa_ctx_create_msg(out_ctx, NULL, 0);
}

void stsa_ctx_record_error(const stsa_ctx *ctx, const stsa_errbuf *msg) {
  stsa_ctx *c = (stsa_ctx *)ctx; /* created writable by stsa_ctx_create */
  while (atomic_flag_test_and_set_explicit(&c->err_lock, memory_order_acquire))
    ;
  memcpy(c->err.text, msg->text, sizeof c->err.text);
  atomic_flag_clear_explicit(&c->err_lock, memory_order_release);
}

void stsa_ctx_free(stsa_ctx *ctx) {
  if (!ctx)
    return;
  if (ctx->plans_destroy)
    ctx->plans_destroy(ctx->plans);
  stsa_workspace_release(&ctx->packed);
  free(ctx);
}

const char *stsa_ctx_last_error(const stsa_ctx *ctx) { return ctx ? ctx->err.text : ""; }

stsa_backend stsa_ctx_backend(const stsa_ctx *ctx) {
  return stsa_resolve_backend(ctx ? ctx->backend : STSA_BACKEND_AUTO);
}

typedef struct param_info {
  const char *name;
  int64_t lo, hi;
} param_info;

static const param_info PARAMS[STSA_PARAM_COUNT_] = {
    [STSA_PARAM_THREADS] = {"threads", 1, 1024},
    [STSA_PARAM_BACKEND] = {"backend", 0, STSA_BACKEND_COUNT_ - 1},
    [STSA_PARAM_Q_TILE] = {"q_tile", 6, 4096},
    [STSA_PARAM_KV_TILE] = {"kv_tile", 16, 4096},
    [STSA_PARAM_CHECK_FINITE] = {"check_finite", 0, 1},
};

stsa_status stsa_param_bounds(stsa_param param, int64_t *lo, int64_t *hi) {
  if ((unsigned)param >= STSA_PARAM_COUNT_)
    return STSA_ERR_BAD_PARAM;
  if (!lo || !hi)
    return STSA_ERR_NULL_ARG;
  *lo = PARAMS[param].lo;
  *hi = PARAMS[param].hi;
  return STSA_OK;
}

stsa_status stsa_ctx_set(stsa_ctx *ctx, stsa_param param, int64_t value) {
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_err_clear(&ctx->err);
  STSA_RETURN_IF((unsigned)param >= STSA_PARAM_COUNT_, &ctx->err, STSA_ERR_BAD_PARAM,
                 "unknown parameter %d", (int)param);
  const param_info *p = &PARAMS[param];
  STSA_RETURN_IF(value < p->lo || value > p->hi, &ctx->err, STSA_ERR_BAD_PARAM,
                 "%s = %lld is out of range [%lld, %lld]", p->name, (long long)value,
                 (long long)p->lo, (long long)p->hi);
  switch (param) {
  case STSA_PARAM_THREADS:
    ctx->threads = (int)value;
    break;
  case STSA_PARAM_BACKEND:
    STSA_RETURN_IF(value == STSA_BACKEND_AVX2 && !stsa_cpu_has_avx2(), &ctx->err,
                   STSA_ERR_UNSUPPORTED,
                   "backend avx2 requested but this CPU lacks "
                   "AVX2/FMA/F16C");
    ctx->backend = (stsa_backend)value;
    break;
  case STSA_PARAM_Q_TILE:
    ctx->q_tile = (int)value;
    break;
  case STSA_PARAM_KV_TILE:
    STSA_RETURN_IF(value % 16 != 0, &ctx->err, STSA_ERR_BAD_PARAM,
                   "kv_tile = %lld must be a multiple of 16", (long long)value);
    ctx->kv_tile = (int)value;
    break;
  case STSA_PARAM_CHECK_FINITE:
    ctx->check_finite = (int)value;
    break;
  default:
    break;
  }
  return STSA_OK;
}

stsa_status stsa_ctx_get(const stsa_ctx *ctx, stsa_param param, int64_t *value) {
  if (!ctx || !value)
    return STSA_ERR_NULL_ARG;
  switch (param) {
  case STSA_PARAM_THREADS:
    *value = ctx->threads;
    return STSA_OK;
  case STSA_PARAM_BACKEND:
    *value = ctx->backend;
    return STSA_OK;
  case STSA_PARAM_Q_TILE:
    *value = ctx->q_tile;
    return STSA_OK;
  case STSA_PARAM_KV_TILE:
    *value = ctx->kv_tile;
    return STSA_OK;
  case STSA_PARAM_CHECK_FINITE:
    *value = ctx->check_finite;
    return STSA_OK;
  default:
    return STSA_ERR_BAD_PARAM;
  }
}
