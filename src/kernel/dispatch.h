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

/* The backend for a name ("auto", "ref", "portable", "avx2", "neon",
 * "avx512", "amx"), or
 * STSA_BACKEND_COUNT_ when the name is none of them. */
stsa_backend stsa_backend_from_name(const char *name);

/* Whether a table's bf16 tiles (kernels.h: full_tile_bf16) can take a call
 * on q, k and v of these dtypes: all bf16, on a backend that has them. The
 * tile loop decides per call (stsa_problem_use_bf16_tiles); SVG2 asks
 * before planning, for plans whose spans the tiles can take. */
static inline int stsa_bf16_tiles_take(const stsa_kernels *kern, stsa_dtype q,
                                       stsa_dtype k, stsa_dtype v) {
  return kern->full_tile_bf16 && q == STSA_BF16 && k == STSA_BF16 && v == STSA_BF16;
}

/* Comma-separated names of the backends this machine runs, for messages. */
const char *stsa_backends_here(char *buf, size_t size);

#endif
