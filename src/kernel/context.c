/*
 * context.c — creating a context and setting its parameters: the parts of a
 * context that depend on the backend it runs. The backend is resolved here,
 * once (at creation and when it is set), and kv_tile must be a multiple of
 * the chosen kernel table's panel width.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/context.h"
#include "kernel/dispatch.h"

/* Backend forced by the environment (AUTO when nothing is forced). An
 * unknown STSA_BACKEND, or one this machine does not run, is an error: a
 * typo must not silently run another backend than the one asked for. */
static stsa_status backend_from_env(stsa_backend *out, stsa_errbuf *err) {
  const char *name = getenv("STSA_BACKEND");
  stsa_backend named = STSA_BACKEND_AUTO;
  char all[STSA_BACKEND_LIST_MAX], here[STSA_BACKEND_LIST_MAX];
  if (name && *name) {
    const int found = stsa_backend_from_name(name);
    STSA_RETURN_IF(found < 0, err, STSA_ERR_BAD_PARAM,
                   "STSA_BACKEND=%.64s is not one of %s (this machine runs: %s)", name,
                   stsa_backends_list(all, sizeof all, 0),
                   stsa_backends_list(here, sizeof here, 1));
    named = (stsa_backend)found;
  }
  const char *force = getenv("STSA_FORCE_PORTABLE");
  if (force && *force && strcmp(force, "0") != 0) {
    *out = STSA_BACKEND_PORTABLE;
    return STSA_OK;
  }
  STSA_RETURN_IF(!stsa_backend_available(named), err, STSA_ERR_UNSUPPORTED,
                 "STSA_BACKEND=%s but this machine does not run it (accepted: %s)",
                 stsa_backend_name(named), stsa_backends_list(here, sizeof here, 1));
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
  if (st == STSA_OK &&
      (!(ctx = calloc(1, sizeof *ctx)) || !(ctx->run = malloc(sizeof *ctx->run))))
    st = stsa_fail(&err, STSA_ERR_OUT_OF_MEMORY, "stsa_ctx_create: out of memory");
  if (st == STSA_OK)
    st = stsa_backend_choose(backend, ctx->run, &err);
  if (st != STSA_OK) {
    if (ctx)
      free(ctx->run);
    free(ctx);
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

stsa_backend stsa_ctx_backend(const stsa_ctx *ctx) {
  return ctx ? ctx->run->id : STSA_BACKEND_AUTO;
}

typedef struct param_info {
  const char *name;
  int64_t lo, hi;
} param_info;

/* Bounds without a context: the tile minima are the portable register tile,
 * which every table in this build shares or divides (a context checks its
 * own table's in stsa_ctx_set). */
static const param_info PARAMS[STSA_PARAM_COUNT_] = {
    [STSA_PARAM_THREADS] = {"threads", 1, 1024},
    [STSA_PARAM_BACKEND] = {"backend", 0, STSA_BACKEND_COUNT_ - 1},
    [STSA_PARAM_Q_TILE] = {"q_tile", STSA_PORTABLE_MR, 4096},
    [STSA_PARAM_KV_TILE] = {"kv_tile", STSA_PORTABLE_NR, 4096},
    [STSA_PARAM_CHECK_FINITE] = {"check_finite", 0, 1},
    [STSA_PARAM_PV_PRECISION] = {"pv_precision", 0, STSA_PV_PRECISION_COUNT_ - 1},
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

static stsa_status set_backend(stsa_ctx *ctx, stsa_backend requested) {
  stsa_backend_choice choice;
  STSA_TRY(stsa_backend_choose(requested, &choice, &ctx->err));
  STSA_RETURN_IF(ctx->kv_tile % choice.kern.nr != 0, &ctx->err, STSA_ERR_BAD_PARAM,
                 "backend %s packs %d columns, but kv_tile = %d is not a multiple",
                 stsa_backend_name(choice.id), choice.kern.nr, ctx->kv_tile);
  *ctx->run = choice;
  ctx->backend = requested;
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
  const int nr = ctx->run->kern.nr;
  switch (param) {
  case STSA_PARAM_THREADS:
    ctx->threads = (int)value;
    break;
  case STSA_PARAM_BACKEND:
    return set_backend(ctx, (stsa_backend)value);
  case STSA_PARAM_Q_TILE: /* calls round it up to the register tile's rows */
    ctx->q_tile = (int)value;
    break;
  case STSA_PARAM_KV_TILE:
    STSA_RETURN_IF(
        value % nr != 0, &ctx->err, STSA_ERR_BAD_PARAM,
        "kv_tile = %lld must be a multiple of %d (the %s kernels' panel width)",
        (long long)value, nr, ctx->run->kern.name);
    ctx->kv_tile = (int)value;
    break;
  case STSA_PARAM_CHECK_FINITE:
    ctx->check_finite = (int)value;
    break;
  case STSA_PARAM_PV_PRECISION:
    ctx->pv_precision = (stsa_pv_precision)value;
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
  case STSA_PARAM_PV_PRECISION:
    *value = ctx->pv_precision;
    return STSA_OK;
  default:
    return STSA_ERR_BAD_PARAM;
  }
}
