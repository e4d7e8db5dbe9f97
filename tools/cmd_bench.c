/*
 * cmd_bench.c — `stsa bench dense|sparse`: times attention on random data.
 *
 * Every timing is N repetitions after one warm-up: median and best ms.
 * GFLOP/s counts 4 * S_q * S_kv * D * H * B flops (dense) and is compared
 * with the FMA peak measured in this same process (the higher of probes
 * before and after the runs, so the ratio is conservative). The sparse bench
 * times the dense kernel on the same shape in the same run for its speed-up.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

typedef struct bench_opts {
  int64_t batch, seq, seq_kv, heads, dim;
  int threads, reps, json, q_tile, kv_tile, kv_dtype_set;
  stsa_dtype dtype, kv_dtype;
  stsa_backend backend;
  /* sparse only */
  const char *mask;
  double density;
  int64_t band; /* explicit band half-width (0: from the density) */
  int no_dense; /* skip the dense baseline (long sequences) */
  stsa_sparse_mode modes[STSA_SPARSE_MODE_COUNT_]; /* run in this order */
  int n_modes;
} bench_opts;

static void bench_usage(void) {
  printf("usage: stsa bench dense  [common options]\n"
         "       stsa bench sparse [common options] [--mask band|causal] [--density F]\n"
         "                         [--mode exact|naive|tile-rounded|all] [--band W]\n"
         "                         [--no-dense]\n"
         "       stsa bench svg --preset NAME [--heads H] ... (stsa bench svg --help)\n"
         "common options:\n"
         "  --seq S --seq-kv S --heads H --dim D --batch B --threads T --reps N\n"
         "  --dtype f32|f16|bf16 (Q, K, V)  --kv-dtype f32|f16|bf16 (K and V only)\n"
         "  --q-tile N --kv-tile N --backend auto|portable|avx2|ref --json\n"
         "defaults: --seq 8192 --heads 4 --dim 128 --batch 1 --threads <cpus> --reps 5,\n"
         "          sparse: --mask band --density 0.39 --mode exact; --mode all runs\n"
         "          naive, exact and tile-rounded against one dense run (the TPU post's\n"
         "          B1, B2, B3 against B0)\n");
}

static void parse_bench(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){.batch = 1,
                    .seq = 8192,
                    .heads = 4,
                    .dim = 128,
                    .reps = 5,
                    .dtype = STSA_F32,
                    .kv_dtype = STSA_F32,
                    .mask = "band",
                    .density = 0.39,
                    .modes = {STSA_SPARSE_EXACT},
                    .n_modes = 1};
  const int sparse = !strcmp(argv[1], "sparse");
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
    else if (!strcmp(a, "--reps"))
      o->reps = (int)cli_int(argc, argv, &i, 1, 100000);
    else if (!strcmp(a, "--q-tile"))
      o->q_tile = (int)cli_int(argc, argv, &i, 6, 4096);
    else if (!strcmp(a, "--kv-tile"))
      o->kv_tile = (int)cli_int(argc, argv, &i, 16, 4096);
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
    else if (sparse && !strcmp(a, "--mask")) {
      o->mask = cli_str(argc, argv, &i);
      if (strcmp(o->mask, "band") && strcmp(o->mask, "causal"))
        cli_die("--mask expects band or causal, got '%s'", o->mask);
    } else if (sparse && !strcmp(a, "--band"))
      o->band = cli_int(argc, argv, &i, 1, (int64_t)1 << 24);
    else if (sparse && !strcmp(a, "--no-dense"))
      o->no_dense = 1;
    else if (sparse && !strcmp(a, "--density"))
      o->density = cli_double(argc, argv, &i, 1e-6, 1.0);
    else if (sparse && !strcmp(a, "--mode")) {
      const char *s = cli_str(argc, argv, &i);
      int m;
      for (m = 0; m < STSA_SPARSE_MODE_COUNT_; m++)
        if (!strcmp(s, stsa_sparse_mode_name((stsa_sparse_mode)m)))
          break;
      if (!strcmp(s, "all")) {
        o->modes[0] = STSA_SPARSE_NAIVE;
        o->modes[1] = STSA_SPARSE_EXACT;
        o->modes[2] = STSA_SPARSE_TILE_ROUNDED;
        o->n_modes = 3;
      } else if (m == STSA_SPARSE_MODE_COUNT_) {
        cli_die("--mode expects exact, naive, tile-rounded or all, got '%s'", s);
      } else {
        o->modes[0] = (stsa_sparse_mode)m;
        o->n_modes = 1;
      }
    } else {
      cli_help_version(a, bench_usage);
      cli_unknown(sparse ? "bench sparse" : "bench dense", a, "stsa bench --help");
    }
  }
  if (!o->kv_dtype_set)
    o->kv_dtype = o->dtype;
  if (!o->seq_kv)
    o->seq_kv = o->seq;
}

/* Random inputs and an output in [B, S, H, D], and a context as asked. */
typedef struct bench_data {
  stsa_ctx *ctx;
  int threads;
  stsa_tensor q, k, v, out;
} bench_data;

static void bench_setup(const bench_opts *o, bench_data *bd) {
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
  bd->out = stsa_tensor_bshd(cli_random_buffer(nq, o->dtype, 0.0, 4), o->dtype, o->batch,
                             o->seq, o->heads, o->dim);
}

static void bench_teardown(bench_data *bd) {
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

typedef struct timing {
  double median_ms, best_ms;
} timing;

static timing time_reps(bench_data *bd, int reps, const stsa_plan *plan,
                        const stsa_sparse_opts *so) {
  double *ms = malloc(sizeof(double) * (size_t)reps);
  if (!ms)
    cli_die("out of memory");
  run_once(bd, plan, so); /* warm-up */
  for (int r = 0; r < reps; r++) {
    double t0 = cli_now();
    run_once(bd, plan, so);
    ms[r] = (cli_now() - t0) * 1e3;
  }
  timing t = {cli_median(ms, reps), cli_min(ms, reps)};
  free(ms);
  return t;
}

/* A JSON number, or null for what was not measured (NaN). */
static const char *json_num(char *buf, size_t len, double x) {
  if (!isfinite(x))
    return "null";
  snprintf(buf, len, "%.3f", x);
  return buf;
}

/* Times several configurations (plan NULL: dense) in interleaved rounds,
 * after one warm-up each, so that a slow spell of the shared machine hits
 * all of them alike instead of one. */
static void time_interleaved(bench_data *bd, int reps, int n,
                             const stsa_plan *const *plans, const stsa_sparse_opts *opts,
                             timing *out) {
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
  timing t = time_reps(&bd, o->reps, NULL, NULL);
  double peak_after = cli_fma_peak(bd.threads);
  peak = peak_after > peak ? peak_after : peak;
  double gflops = dense_flops(o) / (t.best_ms * 1e-3) * 1e-9;
  double gflops_med = dense_flops(o) / (t.median_ms * 1e-3) * 1e-9;
  double pct = peak > 0 ? 100.0 * gflops / peak : 0.0;
  const char *backend = stsa_backend_name(stsa_ctx_backend(bd.ctx));
  if (o->json)
    printf("{\"bench\": \"dense\", \"backend\": \"%s\", \"seq\": %lld, \"seq_kv\": %lld, "
           "\"heads\": %lld, \"dim\": %lld, \"batch\": %lld, \"threads\": %d, "
           "\"dtype\": \"%s\", \"kv_dtype\": \"%s\", \"reps\": %d, \"ms\": %.3f, "
           "\"best_ms\": %.3f, \"gflops\": %.2f, \"gflops_median\": %.2f, "
           "\"peak_gflops\": %.2f, \"pct_peak\": %.2f}\n",
           backend, (long long)o->seq, (long long)o->seq_kv, (long long)o->heads,
           (long long)o->dim, (long long)o->batch, bd.threads, stsa_dtype_name(o->dtype),
           stsa_dtype_name(o->kv_dtype), o->reps, t.median_ms, t.best_ms, gflops,
           gflops_med, peak, pct);
  else
    printf("dense %s: S_q=%lld S_kv=%lld H=%lld D=%lld B=%lld, q %s, kv %s, %d threads\n"
           "  median %.2f ms, best %.2f ms (%d reps)\n"
           "  %.1f GFLOP/s best (%.1f median) = %.1f%% of the measured FMA peak "
           "(%.1f GFLOP/s)\n",
           backend, (long long)o->seq, (long long)o->seq_kv, (long long)o->heads,
           (long long)o->dim, (long long)o->batch, stsa_dtype_name(o->dtype),
           stsa_dtype_name(o->kv_dtype), bd.threads, t.median_ms, t.best_ms, o->reps,
           gflops, gflops_med, pct, peak);
  bench_teardown(&bd);
  return 0;
}

/* Half-width w of a symmetric band |i - j| <= w over S tokens whose kept
 * fraction is `density`: kept = S(2w+1) - w(w+1), solved for w. */
static int64_t band_halfwidth(int64_t S, double density) {
  double n = (double)S, b = 2 * n - 1, c = density * n * n - n;
  double disc = b * b - 4 * c;
  double w = disc > 0 ? (b - sqrt(disc)) / 2 : n;
  return w < 0 ? 0 : (int64_t)llround(w);
}

static int bench_sparse(const bench_opts *o) {
  if (o->seq != o->seq_kv && !strcmp(o->mask, "band"))
    cli_die("bench sparse: --mask band needs --seq-kv equal to --seq");
  bench_data bd;
  bench_setup(o, &bd);
  stsa_mask *mask;
  int64_t w = 0;
  if (!strcmp(o->mask, "causal"))
    cli_check(stsa_mask_causal(0, &mask), NULL, "causal mask");
  else {
    w = o->band ? o->band : band_halfwidth(o->seq, o->density);
    cli_check(stsa_mask_local(w, w, &mask), NULL, "band mask");
  }
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)o->heads);
  if (!masks)
    cli_die("out of memory");
  for (int64_t h = 0; h < o->heads; h++)
    masks[h] = mask;
  stsa_plan_desc desc = {
      o->seq, o->seq_kv, o->heads, masks, NULL, STSA_ORDER_NATIVE, STSA_ORDER_NATIVE,
      0,      0,         0,        NULL};
  stsa_plan *plan;
  double t0 = cli_now();
  cli_check(stsa_plan_build(bd.ctx, &desc, &plan), bd.ctx, "building the plan");
  double plan_ms = (cli_now() - t0) * 1e3;
  stsa_plan_stats st;
  stsa_plan_get_stats(plan, &st);
  double density = (double)st.pairs_kept / (double)st.pairs_total;
  double visited = (double)st.tiles_active / (double)st.tiles_total;
  double partial =
      st.tiles_active ? (double)st.tiles_partial / (double)st.tiles_active : 0;
  int64_t q_tile, kv_tile;
  stsa_ctx_get(bd.ctx, STSA_PARAM_Q_TILE, &q_tile);
  stsa_ctx_get(bd.ctx, STSA_PARAM_KV_TILE, &kv_tile);
  /* configuration 0 is dense, then one per mode */
  enum { MAXC = STSA_SPARSE_MODE_COUNT_ + 1 };
  const stsa_plan *plans[MAXC] = {NULL};
  stsa_sparse_opts opts[MAXC] = {{0}};
  int64_t changed[MAXC] = {0};
  timing times[MAXC];
  for (int mi = 0; mi < o->n_modes; mi++) {
    plans[1 + mi] = plan;
    opts[1 + mi] = (stsa_sparse_opts){0.0f, NULL, o->modes[mi], &changed[1 + mi], 0};
  }
  if (o->no_dense) {
    time_interleaved(&bd, o->reps, o->n_modes, plans + 1, opts + 1, times + 1);
    times[0] = (timing){NAN, NAN};
  } else {
    time_interleaved(&bd, o->reps, o->n_modes + 1, plans, opts, times);
  }
  const timing dense = times[0];
  if (!o->json)
    printf(
        "sparse %s: S=%lld H=%lld D=%lld, %d threads, tiles %lld x %lld, plan %.2f ms\n"
        "  density %.4f (kept pairs), tiles visited %.4f, of them partial %.4f\n"
        "  dense: median %.2f ms, best %.2f ms\n",
        o->mask, (long long)o->seq, (long long)o->heads, (long long)o->dim, bd.threads,
        (long long)q_tile, (long long)kv_tile, plan_ms, density, visited, partial,
        dense.median_ms, dense.best_ms);
  for (int mi = 0; mi < o->n_modes; mi++) {
    const timing sparse = times[1 + mi];
    const int64_t n_changed = changed[1 + mi];
    double speedup = dense.best_ms / sparse.best_ms;
    double efficiency = speedup * density; /* 1.0 = the ideal speed-up 1/density */
    const char *mode = stsa_sparse_mode_name(o->modes[mi]);
    char j1[32], j2[32], j3[32], j4[32];
    if (o->json)
      printf("{\"bench\": \"sparse\", \"mask\": \"%s\", \"mode\": \"%s\", \"seq\": %lld, "
             "\"heads\": %lld, \"dim\": %lld, \"threads\": %d, \"band_halfwidth\": %lld, "
             "\"ms\": %.3f, \"best_ms\": %.3f, \"dense_ms\": %s, \"dense_best_ms\": %s, "
             "\"speedup\": %s, \"ideal_speedup\": %.3f, \"efficiency\": %s, "
             "\"density\": %.5f, \"tiles_visited\": %.5f, \"tiles_partial\": %.5f, "
             "\"pairs_changed\": %lld, \"plan_ms\": %.3f, \"q_tile\": %lld, \"kv_tile\": "
             "%lld}\n",
             o->mask, mode, (long long)o->seq, (long long)o->heads, (long long)o->dim,
             bd.threads, (long long)w, sparse.median_ms, sparse.best_ms,
             json_num(j1, sizeof j1, dense.median_ms),
             json_num(j2, sizeof j2, dense.best_ms), json_num(j3, sizeof j3, speedup),
             1.0 / density, json_num(j4, sizeof j4, efficiency), density, visited,
             partial, (long long)n_changed, plan_ms, (long long)q_tile,
             (long long)kv_tile);
    else
      printf("  %-12s median %.2f ms, best %.2f ms: speed-up %.2fx (ideal %.2fx, "
             "efficiency %.2f)%s\n",
             mode, sparse.median_ms, sparse.best_ms, speedup, 1.0 / density, efficiency,
             o->modes[mi] == STSA_SPARSE_TILE_ROUNDED ? " lossy:" : "");
    if (o->modes[mi] == STSA_SPARSE_TILE_ROUNDED && !o->json)
      printf("               pairs changed by rounding: %lld (%.2f%% of kept)\n",
             (long long)n_changed, 100.0 * (double)n_changed / (double)st.pairs_kept);
    fflush(stdout);
  }
  stsa_plan_free(plan);
  free(masks);
  stsa_mask_free(mask);
  bench_teardown(&bd);
  return 0;
}

int cmd_bench(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    bench_usage();
    return argc < 2 ? 2 : 0;
  }
  cli_help_version(argv[1], bench_usage);
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
  cli_die("bench: unknown benchmark '%s' (available: dense, sparse, svg)", argv[1]);
}
