/*
 * context.h — what an stsa_ctx holds. Only library code sees this.
 */
#ifndef STSA_CORE_CONTEXT_H
#define STSA_CORE_CONTEXT_H

#include <stdatomic.h>

#include "core/error.h"
#include "core/workspace.h"
#include "stsa.h"

struct stsa_ctx {
  int threads;          /* worker threads for calls that own their threads */
  stsa_backend backend; /* as requested (may be AUTO) */
  /* What calls run: the backend resolved when it was set, and its kernel
   * table (src/kernel/dispatch.h; owned here, freed by stsa_ctx_free). */
  struct stsa_backend_choice *run;
  int q_tile;       /* query rows per tile */
  int kv_tile;      /* key rows per tile, a multiple of the kernel table's nr */
  int check_finite; /* scan inputs for NaN/Inf before computing */
  stsa_pv_precision pv_precision; /* STSA_PARAM_PV_PRECISION */
  stsa_errbuf err;                /* message of the last failure */
  atomic_flag err_lock;           /* taken by stsa_ctx_record_error */
  /* Plans built on this context, by signature: owned by the plan layer
   * (src/mask), which installs plans_destroy with the first one; the core
   * frees them through it and knows nothing else of plans. */
  struct stsa_plan_cache *plans;
  void (*plans_destroy)(struct stsa_plan_cache *plans);
  stsa_workspace packed; /* packed K/V, reused across calls */
  /* What the last successful attention call ran (stsa_ctx_last_run); size
   * 0 until then. Written under err_lock (stsa_ctx_record_run). */
  stsa_run_info last_run;
};

/* Copies a failure's message into ctx->err under a lock, for entry points
 * that only read the context and may fail on several threads at once
 * (stsa_attention_part). */
void stsa_ctx_record_error(const stsa_ctx *ctx, const stsa_errbuf *msg);

/* Records what a call ran (stsa_ctx_last_run), under the same lock: part 0
 * of a partitioned call writes it while other parts may fail. */
void stsa_ctx_record_run(const stsa_ctx *ctx, const stsa_run_info *run);

/* The threads stsa_check_attention scans inputs on for a call that owns
 * its threads: the context's, or 0 when check_finite is off. */
static inline int stsa_finite_threads(const stsa_ctx *ctx) {
  return ctx->check_finite ? (ctx->threads > 0 ? ctx->threads : 1) : 0;
}

#endif
