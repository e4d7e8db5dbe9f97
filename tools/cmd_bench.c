/*
 * cmd_bench.c — `stsa bench dense|sparse`: times attention on random data.
 *
 * Every timing is N repetitions after one warm-up: median and best ms.
 * GFLOP/s counts 4 * S_q * S_kv * D * H * B flops (dense) and is compared
 * with the FMA peak measured in this same process (the higher of probes
 * before and after the runs, so the ratio is conservative). The sparse bench
 * times the dense kernel on the same shape in the same run for its speed-up
 * (bench_sparse.c). This file holds the options, the data and the timing
 * loops, and the dense bench.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli_backends.h"
#include "cli_options.h"
#include "cli_ran.h"
#include "cli_util.h"
#include "commands.h"
#include "wait_policy.h"

const char *const BENCH_MASK_NAMES[3] = {"band", "causal", NULL};

static void set_kv_dtype(void *base, const char *name, const char *value) {
  bench_opts *o = base;
  o->kv_dtype = cli_parse_dtype(name, value);
  o->kv_dtype_set = 1;
}

static void set_out_dtype(void *base, const char *name, const char *value) {
  bench_opts *o = base;
  o->out_dtype = cli_parse_dtype(name, value);
  o->out_dtype_set = 1;
}

static void set_backend(void *base, const char *name, const char *value) {
  ((bench_opts *)base)->backend = cli_parse_backend(name, value);
}

/* A mode of the library, or "all": naive, exact and tile-rounded. */
static void set_modes(void *base, const char *name, const char *value) {
  bench_opts *o = base;
  int m;
  for (m = 0; m < STSA_SPARSE_MODE_COUNT_; m++)
    if (!strcmp(value, stsa_sparse_mode_name((stsa_sparse_mode)m)))
      break;
  if (!strcmp(value, "all")) {
    o->modes[0] = STSA_SPARSE_NAIVE;
    o->modes[1] = STSA_SPARSE_EXACT;
    o->modes[2] = STSA_SPARSE_TILE_ROUNDED;
    o->n_modes = 3;
  } else if (m == STSA_SPARSE_MODE_COUNT_) {
    cli_die("%s expects exact, naive, tile-rounded or all, got '%s'", name, value);
  } else {
    o->modes[0] = (stsa_sparse_mode)m;
    o->n_modes = 1;
  }
}

#define MAX_SEQ ((int64_t)1 << 24)

static const cli_opt BENCH_OPTIONS[] = {
    {.help = "options:"},
    {.name = "--seq",
     .metavar = "S",
     CLI_I64(bench_opts, seq, 1, MAX_SEQ),
     .help = "query tokens (default 8192)"},
    {.name = "--seq-kv",
     .metavar = "S",
     CLI_I64(bench_opts, seq_kv, 1, MAX_SEQ),
     .help = "key tokens (default: --seq)"},
    {.name = "--heads",
     .metavar = "H",
     CLI_I64(bench_opts, heads, 1, 4096),
     .help = "heads (default 4)"},
    {.name = "--dim",
     .metavar = "D",
     CLI_I64(bench_opts, dim, 1, 512),
     .help = "head dimension (default 128)"},
    {.name = "--batch",
     .metavar = "B",
     CLI_I64(bench_opts, batch, 1, 4096),
     .help = "batch (default 1)"},
    CLI_THREADS_OPTION(bench_opts),
    {.name = "--reps",
     .metavar = "N",
     CLI_INT(bench_opts, reps, 1, 100000),
     .help = "timed runs after one warm-up (default 5): median and best"},
    {.name = "--dtype",
     .metavar = "DT",
     CLI_DTYPE(bench_opts, dtype),
     .help = "f32 (default), f16 or bf16: Q, K and V"},
    {.name = "--kv-dtype",
     .metavar = "DT",
     CLI_CALL(set_kv_dtype),
     .help = "K and V only (default: --dtype)"},
    {.name = "--out-dtype",
     .metavar = "DT",
     CLI_CALL(set_out_dtype),
     .help = "the output (default: --dtype)"},
    CLI_PV_PRECISION_OPTIONS(bench_opts),
    {.name = "--q-tile",
     .metavar = "N",
     CLI_INT(bench_opts, q_tile, 6, 4096),
     .help = "tile sizes (default: the context's)"},
    {.name = "--kv-tile", .metavar = "N", CLI_INT(bench_opts, kv_tile, 16, 4096)},
    {.name = "--backend",
     .metavar = "B",
     CLI_CALL(set_backend),
     .help = "the backend (default auto), one of those below"},
    {.name = "--json", CLI_FLAG(bench_opts, json), .help = "one JSON line per result"},
    {0}};

static const cli_opt SPARSE_OPTIONS[] = {
    {.help = "sparse only:"},
    {.name = "--mask",
     .metavar = "M",
     CLI_CHOICE(bench_opts, mask, BENCH_MASK_NAMES, NULL),
     .help = "band (default) or causal"},
    {.name = "--density",
     .metavar = "F",
     CLI_DOUBLE(bench_opts, density, 1e-6, 1.0),
     .help = "kept fraction of pairs of the band (default 0.39)"},
    {.name = "--band",
     .metavar = "W",
     CLI_I64(bench_opts, band, 1, MAX_SEQ),
     .help = "the band's half-width instead of --density"},
    {.name = "--mode",
     .metavar = "M",
     CLI_CALL(set_modes),
     .help = "exact (default), naive, tile-rounded, or all: naive, exact\n"
             "and tile-rounded against one dense run (the TPU post's B1,\n"
             "B2, B3 against B0)"},
    {.name = "--no-dense",
     CLI_FLAG(bench_opts, no_dense),
     .help = "no dense baseline (long sequences)"},
    {0}};

static void bench_usage(void) {
  printf(
      "usage: stsa bench dense  [options]\n"
      "       stsa bench sparse [options] [sparse options]\n"
      "       stsa bench svg --preset NAME [--heads H] ... (stsa bench svg --help)\n"
      "       stsa bench svg2 --preset NAME [--heads H] ... (stsa bench svg2 --help)\n"
      "       stsa bench quality [--wan] ... (stsa bench quality --help)\n"
      "Times attention on random data: the median and best of --reps runs, against\n"
      "the measured FMA peak (dense) or the dense kernel on the same shape (sparse).\n");
  const cli_opt *const tables[2] = {BENCH_OPTIONS, SPARSE_OPTIONS};
  cli_print_options(tables, 2);
  printf("backends (--backend B, or STSA_BACKEND=B for every command):\n");
  cli_print_backends(stdout, 2);
}

static void parse_bench(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){.batch = 1,
                    .seq = 8192,
                    .heads = 4,
                    .dim = 128,
                    .reps = 5,
                    .dtype = STSA_F32,
                    .kv_dtype = STSA_F32,
                    .mask = BENCH_MASK_BAND,
                    .density = 0.39,
                    .modes = {STSA_SPARSE_EXACT},
                    .n_modes = 1};
  const int sparse = !strcmp(argv[1], "sparse");
  const cli_command cmd = {sparse ? "bench sparse" : "bench dense", "stsa bench --help",
                           bench_usage};
  const cli_opt_set sets[2] = {{BENCH_OPTIONS, o}, {SPARSE_OPTIONS, o}};
  cli_parse(&cmd, argc, argv, 2, sets, sparse ? 2 : 1);
  if (!o->kv_dtype_set)
    o->kv_dtype = o->dtype;
  if (!o->out_dtype_set)
    o->out_dtype = o->dtype;
  if (!o->seq_kv)
    o->seq_kv = o->seq;
}

void bench_setup(const bench_opts *o, bench_data *bd) {
  bd->ctx = cli_ctx_create();
  stsa_ctx *ctx = bd->ctx;
  if (o->threads)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, o->threads), ctx, "--threads");
  if (o->backend != STSA_BACKEND_AUTO)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, o->backend), ctx, "--backend");
  if (o->q_tile)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_Q_TILE, o->q_tile), ctx, "--q-tile");
  if (o->kv_tile)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, o->kv_tile), ctx, "--kv-tile");
  cli_check(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, o->pv_precision), ctx,
            "--pv-precision");
  int64_t threads;
  stsa_ctx_get(ctx, STSA_PARAM_THREADS, &threads);
  bd->threads = (int)threads;
  size_t nq = (size_t)(o->batch * o->seq * o->heads * o->dim);
  size_t nkv = (size_t)(o->batch * o->seq_kv * o->heads * o->dim);
  bd->q = stsa_tensor_bshd(cli_random_buffer(nq, o->dtype, 1.0, 1), o->dtype, o->batch,
                           o->seq, o->heads, o->dim);
  bd->k = stsa_tensor_bshd(cli_random_buffer(nkv, o->kv_dtype, 1.0, 2), o->kv_dtype,
                           o->batch, o->seq_kv, o->heads, o->dim);
  bd->v = stsa_tensor_bshd(cli_random_buffer(nkv, o->kv_dtype, 1.0, 3), o->kv_dtype,
                           o->batch, o->seq_kv, o->heads, o->dim);
  bd->out = stsa_tensor_bshd(cli_random_buffer(nq, o->out_dtype, 0.0, 4), o->out_dtype,
                             o->batch, o->seq, o->heads, o->dim);
}

void bench_teardown(bench_data *bd) {
  free(bd->q.data);
  free(bd->k.data);
  free(bd->v.data);
  free(bd->out.data);
  stsa_ctx_free(bd->ctx);
}

/* One timed call: dense when plan is NULL. */
static void run_once(bench_data *bd, const stsa_plan *plan, const stsa_sparse_opts *so) {
  if (plan)
    cli_check(stsa_sparse_attention(bd->ctx, plan, &bd->q, &bd->k, &bd->v, &bd->out, so),
              bd->ctx, "sparse attention");
  else
    cli_check(stsa_attention(bd->ctx, &bd->q, &bd->k, &bd->v, &bd->out, NULL), bd->ctx,
              "attention");
}

/* ran: what the last call ran. */
static timing time_reps(bench_data *bd, int reps, const stsa_plan *plan,
                        const stsa_sparse_opts *so, stsa_run_info *ran) {
  double *ms = malloc(sizeof(double) * (size_t)reps);
  if (!ms)
    cli_die("out of memory");
  run_once(bd, plan, so); /* warm-up */
  for (int r = 0; r < reps; r++) {
    double t0 = cli_now();
    run_once(bd, plan, so);
    ms[r] = (cli_now() - t0) * 1e3;
  }
  *ran = cli_ran(bd->ctx, plan ? "sparse attention" : "attention");
  timing t = {cli_median(ms, reps), cli_min(ms, reps)};
  free(ms);
  return t;
}

void bench_time_interleaved(bench_data *bd, int reps, int n,
                            const stsa_plan *const *plans, const stsa_sparse_opts *opts,
                            timing *out, stsa_run_info *ran) {
  double *ms = malloc(sizeof(double) * (size_t)(reps * n));
  if (!ms)
    cli_die("out of memory");
  for (int c = 0; c < n; c++)
    run_once(bd, plans[c], &opts[c]);
  for (int r = 0; r < reps; r++)
    for (int c = 0; c < n; c++) {
      double t0 = cli_now();
      run_once(bd, plans[c], &opts[c]);
      ms[c * reps + r] = (cli_now() - t0) * 1e3;
      if (r == reps - 1)
        ran[c] = cli_ran(bd->ctx, plans[c] ? "sparse attention" : "attention");
    }
  for (int c = 0; c < n; c++)
    out[c] = (timing){cli_median(ms + c * reps, reps), cli_min(ms + c * reps, reps)};
  free(ms);
}

static double dense_flops(const bench_opts *o) {
  return 4.0 * (double)o->seq * (double)o->seq_kv * (double)o->dim * (double)o->heads *
         (double)o->batch;
}

static int bench_dense(const bench_opts *o) {
  bench_data bd;
  bench_setup(o, &bd);
  double peak = cli_fma_peak(bd.threads);
  stsa_run_info ran;
  timing t = time_reps(&bd, o->reps, NULL, NULL, &ran);
  double peak_after = cli_fma_peak(bd.threads);
  peak = peak_after > peak ? peak_after : peak;
  double gflops = dense_flops(o) / (t.best_ms * 1e-3) * 1e-9;
  double gflops_med = dense_flops(o) / (t.median_ms * 1e-3) * 1e-9;
  double pct = peak > 0 ? 100.0 * gflops / peak : 0.0; /* 0: no peak measured here */
  const char *backend = stsa_backend_name(ran.backend);
  /* the calls that ran on the bf16 tiles (what they recorded), which
   * the f32 FMA peak does not bound: the percentage then compares, not
   * measures */
  const int tiles = cli_ran_tiles(&ran);
  char ran_text[512];
  if (o->json)
    printf(
        "{\"bench\": \"dense\", \"backend\": \"%s\", \"bf16_tiles\": %s, \"ran\": %s, "
        "\"seq\": %lld, "
        "\"seq_kv\": %lld, "
        "\"heads\": %lld, \"dim\": %lld, \"batch\": %lld, \"threads\": %d, "
        "\"dtype\": \"%s\", \"kv_dtype\": \"%s\", \"out_dtype\": \"%s\", \"reps\": %d, "
        "\"ms\": %.3f, \"best_ms\": %.3f, \"gflops\": %.2f, \"gflops_median\": %.2f, "
        "\"peak_gflops\": %.2f, \"peak_isa\": \"%s\", \"pct_peak\": %.2f, "
        "\"omp_wait_policy\": \"%s\"}\n",
        backend, tiles ? "true" : "false", cli_ran_json(&ran, ran_text, sizeof ran_text),
        (long long)o->seq, (long long)o->seq_kv, (long long)o->heads, (long long)o->dim,
        (long long)o->batch, bd.threads, stsa_dtype_name(o->dtype),
        stsa_dtype_name(o->kv_dtype), stsa_dtype_name(o->out_dtype), o->reps, t.median_ms,
        t.best_ms, gflops, gflops_med, peak, cli_fma_peak_isa(), pct, cli_wait_policy());
  else {
    printf("dense %s: S_q=%lld S_kv=%lld H=%lld D=%lld B=%lld, q %s, kv %s, out %s, "
           "%d threads\n"
           "  ran: %s\n"
           "  median %.2f ms, best %.2f ms (%d reps)\n"
           "  %.1f GFLOP/s best (%.1f median)",
           backend, (long long)o->seq, (long long)o->seq_kv, (long long)o->heads,
           (long long)o->dim, (long long)o->batch, stsa_dtype_name(o->dtype),
           stsa_dtype_name(o->kv_dtype), stsa_dtype_name(o->out_dtype), bd.threads,
           cli_ran_text(&ran, ran_text, sizeof ran_text), t.median_ms, t.best_ms, o->reps,
           gflops, gflops_med);
    if (peak > 0)
      printf(" = %.1f%% of the measured %s FMA peak (%.1f GFLOP/s)%s%s%s\n", pct,
             cli_fma_peak_isa(), peak, tiles ? ";\n  bf16 on " : "",
             !tiles ? ""
             : ran.backend == STSA_BACKEND_AMX
                 ? "the AMX tile multiply"
                 : "vdpbf16ps (bf16 pairs, twice an FMA's work)",
             tiles ? ", which that f32 peak does not bound" : "");
    else
      printf("; the FMA peak is measured on x86 with AVX2 only\n");
  }
  bench_teardown(&bd);
  return 0;
}

int cmd_bench(int argc, char **argv) {
  if (argc < 2) {
    bench_usage();
    return 2;
  }
  const cli_command bench = {"bench", "stsa bench --help", bench_usage};
  cli_help_version(&bench, argv[1]);
  bench_opts o;
  if (!strcmp(argv[1], "dense")) {
    parse_bench(argc, argv, &o);
    return bench_dense(&o);
  }
  if (!strcmp(argv[1], "sparse")) {
    parse_bench(argc, argv, &o);
    return bench_sparse(&o);
  }
  if (!strcmp(argv[1], "svg"))
    return bench_svg(argc, argv);
  if (!strcmp(argv[1], "svg2"))
    return bench_svg2(argc, argv);
  if (!strcmp(argv[1], "quality"))
    return bench_quality(argc, argv);
  cli_die("bench: unknown benchmark '%s' (available: dense, sparse, svg, svg2, quality)",
          argv[1]);
}
