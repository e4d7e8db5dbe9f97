/* context.c — what every layer needs of a context: freeing it, recording a
 * failure and what a call ran (with the names of what it reports). Creation
 * and parameters live with the backend choice they depend on
 * (src/kernel/context.c). */
#include "core/context.h"

#include <stdlib.h>
#include <string.h>

#include "core/sized.h"

void stsa_ctx_record_error(const stsa_ctx *ctx, const stsa_errbuf *msg) {
  stsa_ctx *c = (stsa_ctx *)ctx; /* created writable by stsa_ctx_create */
  while (atomic_flag_test_and_set_explicit(&c->err_lock, memory_order_acquire))
    ;
  memcpy(c->err.text, msg->text, sizeof c->err.text);
  atomic_flag_clear_explicit(&c->err_lock, memory_order_release);
}

void stsa_ctx_record_run(const stsa_ctx *ctx, const stsa_run_info *run) {
  stsa_ctx *c = (stsa_ctx *)ctx; /* created writable by stsa_ctx_create */
  while (atomic_flag_test_and_set_explicit(&c->err_lock, memory_order_acquire))
    ;
  c->last_run = *run;
  c->last_run.size = sizeof c->last_run;
  atomic_flag_clear_explicit(&c->err_lock, memory_order_release);
}

static const char *const ARITH_NAMES[STSA_ARITH_COUNT_] = {
    [STSA_ARITH_F64] = "f64",
    [STSA_ARITH_F32] = "f32",
    [STSA_ARITH_BF16_TILES] = "bf16-tiles",
};

const char *stsa_arith_name(stsa_arith arith) {
  return (unsigned)arith < STSA_ARITH_COUNT_ ? ARITH_NAMES[arith] : "unknown";
}

const char *stsa_pv_precision_name(stsa_pv_precision precision) {
  static const char *const names[STSA_PV_PRECISION_COUNT_] = {
      [STSA_PV_AUTO] = "auto",
      [STSA_PV_BF16] = "bf16",
      [STSA_PV_NEAR_F32] = "near-f32",
      [STSA_PV_F32] = "f32",
  };
  return (unsigned)precision < STSA_PV_PRECISION_COUNT_ ? names[precision] : "unknown";
}

stsa_status stsa_ctx_last_run(const stsa_ctx *ctx, stsa_run_info *info) {
  if (!ctx || !info)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf err;
  STSA_TRY(STSA_SIZED_CHECK_OUT(info, stsa_run_info, &err));
  stsa_ctx *c = (stsa_ctx *)ctx;
  while (atomic_flag_test_and_set_explicit(&c->err_lock, memory_order_acquire))
    ;
  const stsa_run_info last = c->last_run;
  atomic_flag_clear_explicit(&c->err_lock, memory_order_release);
  if (last.size == 0)
    return STSA_ERR_BAD_PARAM; /* no call yet: nothing ran */
  stsa_sized_write(info, &last, sizeof last);
  return STSA_OK;
}

void stsa_ctx_free(stsa_ctx *ctx) {
  if (!ctx)
    return;
  if (ctx->plans_destroy)
    ctx->plans_destroy(ctx->plans);
  stsa_workspace_release(&ctx->packed);
  free(ctx->run);
  free(ctx);
}

const char *stsa_ctx_last_error(const stsa_ctx *ctx) { return ctx ? ctx->err.text : ""; }
