/*
 * dispatch.h — the backends this build has, and how a requested one becomes
 * a kernel table. Resolved once when a context is created or its backend
 * set; calls then read ctx->kern and never ask the CPU again.
 */
#ifndef STSA_KERNEL_DISPATCH_H
#define STSA_KERNEL_DISPATCH_H

#include "core/error.h"
#include "kernel/kernels.h"
#include "stsa.h"

/* What a context runs: the kernel table, and whether the double-precision
 * reference computes the rows instead (REF reuses the tiled path's work
 * split and lists, and the table only for loading rows). */
typedef struct stsa_backend_choice {
  stsa_backend id; /* never AUTO */
  int ref;
  stsa_kernels kern;
} stsa_backend_choice;

/* Resolves `requested` (AUTO: the best one this CPU runs). Fails with
 * STSA_ERR_UNSUPPORTED, naming the backends this machine has, when the
 * build or the CPU lacks it. */
stsa_status stsa_backend_choose(stsa_backend requested, stsa_backend_choice *out,
                                stsa_errbuf *err);

/* Whether a table's bf16 tiles (kernels.h: full_tile_bf16) can take a call
 * on q, k and v of these dtypes: all bf16, on a backend that has them. The
 * tile loop decides per call (stsa_problem_use_bf16_tiles); planners ask
 * through stsa_kv_pack_align (problem.h) where to start their spans. */
static inline int stsa_bf16_tiles_take(const stsa_kernels *kern, stsa_dtype q,
                                       stsa_dtype k, stsa_dtype v) {
  return kern->full_tile_bf16 && q == STSA_BF16 && k == STSA_BF16 && v == STSA_BF16;
}

/* Room for every backend's name in stsa_backends_list's form. */
#define STSA_BACKEND_LIST_MAX 128

/* The names of the backends, comma-separated in the table's order (all of
 * them, or with here_only those this machine runs), for messages; buf. */
const char *stsa_backends_list(char *buf, size_t size, int here_only);

#endif
