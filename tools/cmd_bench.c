/*
 * cmd_bench.c — `stsa bench dense`: times dense attention on random data.
 * Reports median and best of N timed repetitions after one warm-up, GFLOP/s
 * (4 * S_q * S_kv * D * H * B flops) and the share of the FMA peak measured
 * in this same process (the higher of probes before and after the runs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

typedef struct bench_opts {
  int64_t batch, seq, seq_kv, heads, dim;
  int threads, reps, json, q_tile, kv_tile;
  stsa_dtype dtype, kv_dtype;
  int kv_dtype_set;
  stsa_backend backend;
} bench_opts;

static void bench_usage(void) {
  printf("usage: stsa bench dense [--seq S] [--seq-kv S] [--heads H] [--dim D] [--batch B]\n"
         "                        [--threads T] [--dtype f32|f16|bf16]\n"
         "                        [--kv-dtype f32|f16|bf16] [--reps N]\n"
         "                        [--q-tile N] [--kv-tile N]\n"
         "                        [--backend auto|portable|avx2|ref] [--json]\n"
         "defaults: --seq 8192 --heads 4 --dim 128 --batch 1 --threads <cpus> --reps 5\n");
}

static void parse_bench(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){1, 8192, 0, 4, 128, 0, 5, 0, 0, 0, STSA_F32, STSA_F32, 0, STSA_BACKEND_AUTO};
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--seq"))
      o->seq = cli_int(argc, argv, &i, 1, (int64_t)1 << 24);
    else if (!strcmp(a, "--seq-kv"))
      o->seq_kv = cli_int(argc, argv, &i, 1, (int64_t)1 << 24);
    else if (!strcmp(a, "--heads"))
      o->heads = cli_int(argc, argv, &i, 1, 4096);
    else if (!strcmp(a, "--dim"))
      o->dim = cli_int(argc, argv, &i, 1, 512);
    else if (!strcmp(a, "--batch"))
      o->batch = cli_int(argc, argv, &i, 1, 4096);
    else if (!strcmp(a, "--threads"))
      o->threads = (int)cli_int(argc, argv, &i, 1, 1024);
    else if (!strcmp(a, "--q-tile"))
      o->q_tile = (int)cli_int(argc, argv, &i, 6, 4096);
    else if (!strcmp(a, "--kv-tile"))
      o->kv_tile = (int)cli_int(argc, argv, &i, 16, 4096);
    else if (!strcmp(a, "--reps"))
      o->reps = (int)cli_int(argc, argv, &i, 1, 100000);
    else if (!strcmp(a, "--dtype"))
      o->dtype = cli_dtype(argc, argv, &i);
    else if (!strcmp(a, "--kv-dtype")) {
      o->kv_dtype = cli_dtype(argc, argv, &i);
      o->kv_dtype_set = 1;
    } else if (!strcmp(a, "--backend")) {
      const char *s = cli_str(argc, argv, &i);
      int b;
      for (b = 0; b < STSA_BACKEND_COUNT_; b++)
        if (!strcmp(s, stsa_backend_name((stsa_backend)b)))
          break;
      if (b == STSA_BACKEND_COUNT_)
        cli_die("--backend expects auto, ref, portable or avx2, got '%s'", s);
      o->backend = (stsa_backend)b;
    } else if (!strcmp(a, "--json"))
      o->json = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_usage();
      exit(0);
    } else
      cli_die("bench dense: unknown option '%s' (see stsa bench --help)", a);
  }
  if (!o->kv_dtype_set)
    o->kv_dtype = o->dtype;
  if (!o->seq_kv)
    o->seq_kv = o->seq;
}

static int bench_dense(int argc, char **argv) {
  bench_opts o;
  parse_bench(argc, argv, &o);
  stsa_ctx *ctx;
  cli_check(stsa_ctx_create(&ctx), NULL, "creating a context");
  if (o.threads)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, o.threads), ctx, "--threads");
  if (o.backend != STSA_BACKEND_AUTO)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, o.backend), ctx, "--backend");
  if (o.q_tile)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_Q_TILE, o.q_tile), ctx, "--q-tile");
  if (o.kv_tile)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, o.kv_tile), ctx, "--kv-tile");
  int64_t threads;
  stsa_ctx_get(ctx, STSA_PARAM_THREADS, &threads);

  size_t nq = (size_t)(o.batch * o.seq * o.heads * o.dim);
  size_t nkv = (size_t)(o.batch * o.seq_kv * o.heads * o.dim);
  void *q = cli_random_buffer(nq, o.dtype, 1.0, 1);
  void *k = cli_random_buffer(nkv, o.kv_dtype, 1.0, 2);
  void *v = cli_random_buffer(nkv, o.kv_dtype, 1.0, 3);
  void *out = cli_random_buffer(nq, o.dtype, 0.0, 4);
  stsa_tensor tq = stsa_tensor_bshd(q, o.dtype, o.batch, o.seq, o.heads, o.dim);
  stsa_tensor tk = stsa_tensor_bshd(k, o.kv_dtype, o.batch, o.seq_kv, o.heads, o.dim);
  stsa_tensor tv = stsa_tensor_bshd(v, o.kv_dtype, o.batch, o.seq_kv, o.heads, o.dim);
  stsa_tensor to = stsa_tensor_bshd(out, o.dtype, o.batch, o.seq, o.heads, o.dim);

  double peak = cli_fma_peak((int)threads);
  double *ms = malloc(sizeof(double) * (size_t)o.reps);
  if (!ms)
    cli_die("out of memory");
  cli_check(stsa_attention(ctx, &tq, &tk, &tv, &to, NULL), ctx, "attention (warm-up)");
  for (int r = 0; r < o.reps; r++) {
    double t0 = cli_now();
    cli_check(stsa_attention(ctx, &tq, &tk, &tv, &to, NULL), ctx, "attention");
    ms[r] = (cli_now() - t0) * 1e3;
  }
  /* The machine is shared and its clock moves: the peak is probed before and
   * after the timed runs and the higher one is used (the conservative ratio). */
  double peak_after = cli_fma_peak((int)threads);
  peak = peak_after > peak ? peak_after : peak;
  double best = cli_min(ms, o.reps), median = cli_median(ms, o.reps);
  double flops = 4.0 * (double)o.seq * (double)o.seq_kv * (double)o.dim *
                 (double)o.heads * (double)o.batch;
  double gflops = flops / (best * 1e-3) * 1e-9;
  double gflops_med = flops / (median * 1e-3) * 1e-9;
  double pct = peak > 0 ? 100.0 * gflops / peak : 0.0;
  const char *backend = stsa_backend_name(stsa_ctx_backend(ctx));
  if (o.json)
    printf("{\"bench\": \"dense\", \"backend\": \"%s\", \"seq\": %lld, \"seq_kv\": %lld, "
           "\"heads\": %lld, \"dim\": %lld, \"batch\": %lld, \"threads\": %lld, "
           "\"dtype\": \"%s\", \"kv_dtype\": \"%s\", \"reps\": %d, \"ms\": %.3f, "
           "\"best_ms\": %.3f, \"gflops\": %.2f, \"gflops_median\": %.2f, "
           "\"peak_gflops\": %.2f, \"pct_peak\": %.2f}\n",
           backend, (long long)o.seq, (long long)o.seq_kv, (long long)o.heads,
           (long long)o.dim, (long long)o.batch, (long long)threads,
           stsa_dtype_name(o.dtype), stsa_dtype_name(o.kv_dtype), o.reps, median, best,
           gflops, gflops_med, peak, pct);
  else
    printf("dense %s: S_q=%lld S_kv=%lld H=%lld D=%lld B=%lld, q %s, kv %s, %lld threads\n"
           "  median %.2f ms, best %.2f ms (%d reps)\n"
           "  %.1f GFLOP/s best (%.1f median) = %.1f%% of the measured FMA peak "
           "(%.1f GFLOP/s)\n",
           backend, (long long)o.seq, (long long)o.seq_kv, (long long)o.heads,
           (long long)o.dim, (long long)o.batch, stsa_dtype_name(o.dtype),
           stsa_dtype_name(o.kv_dtype), (long long)threads, median, best, o.reps, gflops,
           gflops_med, pct, peak);
  free(ms);
  free(q);
  free(k);
  free(v);
  free(out);
  stsa_ctx_free(ctx);
  return 0;
}

int cmd_bench(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    bench_usage();
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "dense"))
    return bench_dense(argc, argv);
  cli_die("bench: unknown benchmark '%s' (available: dense)", argv[1]);
}
