/*
 * bench.h — what `stsa bench dense` (cmd_bench.c) and `stsa bench sparse`
 * (bench_sparse.c) share: options, random data and timing loops.
 */
#ifndef STSA_TOOLS_BENCH_H
#define STSA_TOOLS_BENCH_H

#include <stdint.h>

#include "stsa.h"

typedef struct bench_opts {
  int64_t batch, seq, seq_kv, heads, dim;
  int threads, reps, json, q_tile, kv_tile, kv_dtype_set, out_dtype_set, pv_precision;
  stsa_dtype dtype, kv_dtype, out_dtype;
  stsa_backend backend;
  /* sparse only */
  int mask; /* BENCH_MASK_BAND or BENCH_MASK_CAUSAL */
  double density;
  int64_t band; /* explicit band half-width (0: from the density) */
  int no_dense; /* skip the dense baseline (long sequences) */
  stsa_sparse_mode modes[STSA_SPARSE_MODE_COUNT_]; /* run in this order */
  int n_modes;
} bench_opts;

enum { BENCH_MASK_BAND, BENCH_MASK_CAUSAL };
/* "band", "causal" (NULL-terminated: the choices of --mask). */
extern const char *const BENCH_MASK_NAMES[3];

/* Random inputs and an output in [B, S, H, D], and a context as asked. */
typedef struct bench_data {
  stsa_ctx *ctx;
  int threads;
  stsa_tensor q, k, v, out;
} bench_data;

void bench_setup(const bench_opts *o, bench_data *bd);
void bench_teardown(bench_data *bd);

typedef struct timing {
  double median_ms, best_ms;
} timing;

/* Times several configurations (plan NULL: dense) in interleaved rounds,
 * after one warm-up each, so that a slow spell of the shared machine hits
 * all of them alike instead of one: out[c] for plans[c] with opts[c], and
 * what its last call ran in ran[c] (stsa_ctx_last_run). */
void bench_time_interleaved(bench_data *bd, int reps, int n,
                            const stsa_plan *const *plans, const stsa_sparse_opts *opts,
                            timing *out, stsa_run_info *ran);

/* `stsa bench sparse` with parsed options. */
int bench_sparse(const bench_opts *o);

#endif
