/*
 * cmd_bench_svg2.c — `stsa bench svg2`: Sparse VideoGen 2 calls of the SVG
 * session against our dense kernel on the same workload in one run, at a
 * preset's geometry with its published SVG2 settings.
 *
 * A layer's first SVG2 call seeds its k-means clusters (cold: k-means++ and
 * the cold iterations); the following steps of that layer start from those
 * centroids (warm: a few iterations). So the bench times, interleaved with
 * dense calls so that a slow spell of the shared machine hits both alike:
 * dense, the cold call (step s0), then dense and a warm call for steps
 * s0 + 1 .. s0 + reps of the same layer. Warm figures are medians.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli_options.h"
#include "cli_ran.h"
#include "cli_util.h"
#include "commands.h"
#include "svg_eval.h"

typedef struct svg2_bench_opts {
  const char *preset;
  int64_t heads, frames, height, width;
  int threads, reps, json, kinds;
  double top_p, density; /* -1: not given */
  double max_error;      /* the error budget (0: none) */
  double drift;          /* noise added to q and k before each warm call */
  int64_t warm_iters;    /* -1: the preset's */
  uint64_t seed;
  stsa_dtype dtype; /* of q, k, v (--dtype) */
} svg2_bench_opts;

enum { KINDS_SEMANTIC = 0, KINDS_MIX = 1 };
static const char *const KINDS_NAMES[3] = {"semantic", "mix", NULL};

static const cli_opt SVG2_BENCH_OPTIONS[] = {
    {.name = "--preset",
     .metavar = "NAME",
     CLI_STR(svg2_bench_opts, preset),
     .help = "the geometry, policy and SVG2 settings (required)"},
    {.name = "--heads",
     .metavar = "H",
     CLI_I64(svg2_bench_opts, heads, 1, 256),
     .help = "heads (default 2)"},
    CLI_THREADS_OPTION(svg2_bench_opts),
    {.name = "--reps",
     .metavar = "N",
     CLI_INT(svg2_bench_opts, reps, 1, 1000),
     .help = "warm calls (steps 1..N of the layer) after the cold one,\n"
             "each after a dense call (default 3)"},
    {.name = "--top-p",
     .metavar = "P",
     CLI_DOUBLE(svg2_bench_opts, top_p, 1e-6, 1.0),
     .help = "key clusters kept until their probability reaches P\n"
             "(default: the preset's, 0.9)"},
    {.name = "--density",
     .metavar = "D",
     CLI_DOUBLE(svg2_bench_opts, density, 1e-6, 1.0),
     .help = "instead: D of the keys per query cluster"},
    {.name = "--max-error",
     .metavar = "E",
     CLI_DOUBLE(svg2_bench_opts, max_error, 0.0, 1e30),
     .help = "error budget of every call (default 0: none); its bound's\n"
             "profiling is part of each call's time"},
    {.name = "--kinds",
     .metavar = "K",
     CLI_CHOICE(svg2_bench_opts, kinds, KINDS_NAMES, NULL),
     .help = "workload heads: semantic (default) or mix (spatial,\n"
             "temporal and semantic in turn)"},
    {.name = "--seed",
     .metavar = "N",
     CLI_U64(svg2_bench_opts, seed, 0, INT64_MAX),
     .help = "seed of the workload (default 1)"},
    {.name = "--drift",
     .metavar = "E",
     CLI_DOUBLE(svg2_bench_opts, drift, 0.0, 1.0),
     .help = "before each warm call add E x (zero-mean, unit-variance noise)\n"
             "to q and k, as they change between denoising steps (default 0:\n"
             "the same inputs every step, so warm k-means may stop after one\n"
             "iteration)"},
    {.name = "--warm-iters",
     .metavar = "N",
     CLI_I64(svg2_bench_opts, warm_iters, 1, 10000),
     .help = "Lloyd iterations of a warm call (default: the preset's, 2)"},
    {.name = "--frames",
     .metavar = "F",
     CLI_I64(svg2_bench_opts, frames, 1, 1 << 20),
     .help = "override the preset's geometry (video, no text)"},
    {.name = "--height", .metavar = "Hp", CLI_I64(svg2_bench_opts, height, 1, 1 << 20)},
    {.name = "--width", .metavar = "Wp", CLI_I64(svg2_bench_opts, width, 1, 1 << 20)},
    {.name = "--dtype",
     .metavar = "DT",
     CLI_DTYPE(svg2_bench_opts, dtype),
     .help = "q, k and v: f32 (default), f16 or bf16 (outputs stay f32;\n"
             "drift is added to f32 copies, then converted)"},
    {.name = "--json", CLI_FLAG(svg2_bench_opts, json), .help = "one JSON line"},
    {0}};

static void usage(void) {
  printf(
      "usage: stsa bench svg2 --preset NAME [--heads H] [--threads T] [--reps R]\n"
      "                       [--top-p P | --density D] [--kinds semantic|mix]\n"
      "                       [--seed N] [--drift E] [--warm-iters N] [--max-error E]\n"
      "                       [--frames F --height Hp --width Wp] [--dtype DT]\n"
      "                       [--json]\n"
      "Sparse VideoGen 2 calls against dense attention on the same workload in one\n"
      "run: a cold call (the layer's clusters seeded) and R warm calls (steps of\n"
      "the same layer, from its centroids), each after a dense call.\n"
      "presets:");
  cli_print_presets();
  const cli_opt *const tables[1] = {SVG2_BENCH_OPTIONS};
  cli_print_options(tables, 1);
}

/* The preset with the flags: SVG2, its key budget, an overridden geometry. */
static stsa_svg_config bench_config(const svg2_bench_opts *o) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  if (stsa_svg_preset(o->preset, &cfg) != STSA_OK)
    cli_die("bench svg2: unknown preset '%s' (see stsa bench svg2 --help)", o->preset);
  cfg.method = STSA_SVG_METHOD_SVG2;
  cfg.heads = o->heads;
  cfg.seed = o->seed;
  cfg.max_rel_error = o->max_error;
  if (o->warm_iters > 0)
    cfg.svg2.kmeans_iters_warm = o->warm_iters;
  if (o->top_p > 0)
    cfg.svg2.top_p = o->top_p;
  if (o->density > 0) {
    cfg.svg2.top_p = 0;
    cfg.density = o->density;
  }
  const int64_t dims[3] = {o->frames, o->height, o->width};
  if ((dims[0] > 0) != (dims[1] > 0) || (dims[1] > 0) != (dims[2] > 0))
    cli_die("bench svg2: give all of --frames, --height and --width, or none");
  if (dims[0] > 0) {
    cfg.geometry = (stsa_geometry){o->frames, o->height, o->width, 0, 0, STSA_TEXT_NONE};
    const int64_t L = o->frames * o->height * o->width;
    cfg.sample_rows = cfg.sample_rows < L ? cfg.sample_rows : L;
    cfg.sink_frames = cfg.sink_frames < o->frames ? cfg.sink_frames : o->frames;
    cfg.svg2.q_clusters = cfg.svg2.kv_clusters =
        0; /* scaled to this geometry by the session */
  }
  return cfg;
}

/* The figures of one bench. */
typedef struct svg2_times {
  double dense_ms, cold_ms, cold_cluster_ms, warm_ms, warm_cluster_ms, profile_ms,
      attention_ms, density, rel_l2;
  int64_t q_clusters, kv_clusters;
  /* what the calls ran: the last dense call, the cold and the last warm one */
  stsa_run_info dense_ran, cold_ran, warm_ran;
} svg2_times;

static double elapsed_ms(double t0) { return (cli_now() - t0) * 1e3; }

/* Dense and SVG2 calls interleaved (the file's header says in which order). */
/* Adds drift x noise to every element of an f32 tensor (a counter hash, so
 * runs repeat): uniform on [-sqrt(3), sqrt(3)], unit variance. */
static void add_drift(const stsa_tensor *t, double drift, uint64_t step) {
  float *x = t->data;
  const size_t n = (size_t)(t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3]);
  for (size_t i = 0; i < n; i++) {
    uint64_t z = (step + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
    z ^= z >> 29;
    x[i] += (float)(drift * 3.4641016151377544 * ((double)(z >> 11) * 0x1.0p-53 - 0.5));
  }
}

/* The calls' q, k and v: the workload's f32 tensors, or copies in another
 * dtype (refreshed after each drift, untimed). */
typedef struct call_inputs {
  stsa_tensor q, k, v;
  int copies;
} call_inputs;

static call_inputs inputs_of(const svg_workload *w, stsa_dtype dtype) {
  if (dtype == STSA_F32)
    return (call_inputs){w->q, w->k, w->v, 0};
  return (call_inputs){svg_tensor_cast(&w->q, dtype), svg_tensor_cast(&w->k, dtype),
                       svg_tensor_cast(&w->v, dtype), 1};
}

static void inputs_free(call_inputs *in) {
  if (!in->copies)
    return;
  free(in->q.data);
  free(in->k.data);
  free(in->v.data);
}

static void time_calls(stsa_ctx *ctx, stsa_svg *svg, const stsa_svg_config *cfg,
                       svg_workload *w, stsa_dtype dtype, int reps, double drift,
                       svg2_times *t) {
  const int n = reps + 1; /* dense calls: before the cold and every warm call */
  double *v = malloc(sizeof *v * (size_t)(5 * n));
  if (!v)
    cli_die("out of memory");
  double *dense = v, *warm = v + n, *cluster = v + 2 * n, *prof = v + 3 * n,
         *attn = v + 4 * n;
  call_inputs in = inputs_of(w, dtype);
  /* untimed: threads started, caches warm */
  cli_check(stsa_attention(ctx, &in.q, &in.k, &in.v, &w->ref, NULL), ctx, "dense");
  const int64_t layer = cfg->dense_layers, step0 = cfg->dense_steps;
  for (int r = 0; r < n; r++) {
    if (r > 0 && drift > 0) {
      add_drift(&w->q, drift, 2 * (uint64_t)r);
      add_drift(&w->k, drift, 2 * (uint64_t)r + 1);
      if (in.copies) {
        cli_check(stsa_tensor_copy(&w->q, &in.q), NULL, "converting q");
        cli_check(stsa_tensor_copy(&w->k, &in.k), NULL, "converting k");
      }
    }
    double t0 = cli_now();
    cli_check(stsa_attention(ctx, &in.q, &in.k, &in.v, &w->ref, NULL), ctx, "dense");
    dense[r] = elapsed_ms(t0);
    t->dense_ran = cli_ran(ctx, "dense");
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    stsa_run_info ran = STSA_INIT(stsa_run_info);
    rep.run = &ran;
    t0 = cli_now();
    cli_check(
        stsa_svg_attention(svg, layer, step0 + r, &in.q, &in.k, &in.v, &w->out, &rep),
        ctx, "SVG2 attention");
    const double ms = elapsed_ms(t0);
    *(r == 0 ? &t->cold_ran : &t->warm_ran) = ran;
    if (r == 0) {
      t->cold_ms = ms, t->cold_cluster_ms = rep.cluster_ms;
      if (!rep.cold)
        cli_die("bench svg2: the first call did not seed its layer's clusters");
    } else {
      warm[r - 1] = ms, cluster[r - 1] = rep.cluster_ms;
      prof[r - 1] = rep.profile_ms, attn[r - 1] = rep.attention_ms;
    }
    t->density = rep.density; /* of the last (warm) call */
    t->q_clusters = rep.q_clusters, t->kv_clusters = rep.kv_clusters;
  }
  t->dense_ms = cli_median(dense, n);
  t->warm_ms = cli_median(warm, reps);
  t->warm_cluster_ms = cli_median(cluster, reps);
  t->profile_ms = cli_median(prof, reps);
  t->attention_ms = cli_median(attn, reps);
  inputs_free(&in);
  free(v);
}

static void print_times(const svg2_bench_opts *o, const stsa_svg_config *cfg,
                        int64_t threads, const svg2_times *t) {
  const int64_t N = stsa_geometry_tokens(&cfg->geometry);
  const double ideal = 1.0 / t->density, speedup = t->dense_ms / t->warm_ms;
  const char *budget = cfg->svg2.top_p > 0 ? "top_p" : "density";
  const double budget_value = cfg->svg2.top_p > 0 ? cfg->svg2.top_p : cfg->density;
  char ran[3][512];
  if (o->json) {
    printf("{\"bench\": \"svg2\", \"mode\": \"svg2\", \"preset\": \"%s\", \"dtype\": "
           "\"%s\", \"tokens\": "
           "%lld, \"heads\": %lld, \"dim\": %lld, \"threads\": %lld, \"kinds\": \"%s\", "
           "\"budget\": \"%s\", \"top_p\": %.4f, \"key_density\": %.4f, \"q_clusters\": "
           "%lld, \"kv_clusters\": "
           "%lld, \"reps\": %d, \"dense_ms\": %.3f, \"cold_ms\": %.3f, "
           "\"cold_cluster_ms\": %.3f, \"warm_ms\": %.3f, \"warm_cluster_ms\": %.3f, "
           "\"profile_ms\": %.3f, \"attention_ms\": %.3f, \"density\": %.5f, "
           "\"ideal_speedup\": %.3f, \"speedup\": %.3f, \"efficiency\": %.3f, "
           "\"cluster_share\": %.4f, \"rel_l2\": %.5f, \"drift\": %g, \"warm_iters\": "
           "%lld, \"ran\": %s, \"cold_ran\": %s, \"dense_ran\": %s}\n",
           o->preset, stsa_dtype_name(o->dtype), (long long)N, (long long)cfg->heads,
           (long long)cfg->head_dim, (long long)threads, KINDS_NAMES[o->kinds], budget,
           cfg->svg2.top_p, cfg->svg2.top_p > 0 ? 0.0 : cfg->density,
           (long long)t->q_clusters, (long long)t->kv_clusters, o->reps, t->dense_ms,
           t->cold_ms, t->cold_cluster_ms, t->warm_ms, t->warm_cluster_ms, t->profile_ms,
           t->attention_ms, t->density, ideal, speedup, speedup / ideal,
           t->warm_cluster_ms / t->warm_ms, t->rel_l2, o->drift,
           (long long)cfg->svg2.kmeans_iters_warm,
           cli_ran_json(&t->warm_ran, ran[0], sizeof ran[0]),
           cli_ran_json(&t->cold_ran, ran[1], sizeof ran[1]),
           cli_ran_json(&t->dense_ran, ran[2], sizeof ran[2]));
    return;
  }
  printf("svg2 %s: %lld tokens (%s), %lld %s heads x %lld, %lld threads; %s %g, %lld "
         "query x %lld key clusters\n",
         o->preset, (long long)N, stsa_dtype_name(o->dtype), (long long)cfg->heads,
         KINDS_NAMES[o->kinds], (long long)cfg->head_dim, (long long)threads, budget,
         budget_value, (long long)t->q_clusters, (long long)t->kv_clusters);
  printf("  dense %.1f ms (median of %d)\n", t->dense_ms, o->reps + 1);
  printf("  cold call %.1f ms (k-means %.1f ms: seeding the layer)\n", t->cold_ms,
         t->cold_cluster_ms);
  printf("  warm call %.1f ms (median of %d): profiling %.1f ms, of which k-means %.1f "
         "ms = %.1f%% of the call; attention %.1f ms\n",
         t->warm_ms, o->reps, t->profile_ms, t->warm_cluster_ms,
         100 * t->warm_cluster_ms / t->warm_ms, t->attention_ms);
  printf("  density %.4f: ideal %.2fx, warm speed-up %.2fx (efficiency %.2f); rel L2 "
         "%.4f against dense\n",
         t->density, ideal, speedup, speedup / ideal, t->rel_l2);
  if (cli_ran_same(&t->cold_ran, &t->warm_ran))
    printf("  ran: SVG2 %s; dense %s\n",
           cli_ran_text(&t->warm_ran, ran[0], sizeof ran[0]),
           cli_ran_text(&t->dense_ran, ran[2], sizeof ran[2]));
  else
    printf("  ran: SVG2 warm %s, cold %s; dense %s\n",
           cli_ran_text(&t->warm_ran, ran[0], sizeof ran[0]),
           cli_ran_text(&t->cold_ran, ran[1], sizeof ran[1]),
           cli_ran_text(&t->dense_ran, ran[2], sizeof ran[2]));
}

int bench_svg2(int argc, char **argv) {
  svg2_bench_opts o = {.heads = 2,
                       .reps = 3,
                       .seed = 1,
                       .top_p = -1,
                       .density = -1,
                       .frames = -1,
                       .warm_iters = -1,
                       .dtype = STSA_F32};
  o.height = o.width = -1;
  static const cli_command cmd = {"bench svg2", "stsa bench svg2 --help", usage};
  const cli_opt_set set = {SVG2_BENCH_OPTIONS, &o};
  cli_parse(&cmd, argc, argv, 2, &set, 1);
  if (!o.preset)
    cli_die("bench svg2: --preset is required (see stsa bench svg2 --help)");
  if (o.top_p > 0 && o.density > 0)
    cli_die("bench svg2: --top-p and --density are two budgets of the key clusters: "
            "give one");
  const stsa_svg_config cfg = bench_config(&o);
  stsa_ctx *ctx = cli_ctx_create();
  if (o.threads)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, o.threads), ctx, "--threads");
  int64_t threads;
  stsa_ctx_get(ctx, STSA_PARAM_THREADS, &threads);
  const int64_t H = cfg.heads;
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)H);
  double *rel = malloc(sizeof *rel * (size_t)H), *cosv = malloc(sizeof *cosv * (size_t)H);
  if (!kinds || !rel || !cosv)
    cli_die("out of memory");
  static const stsa_head_kind MIX[3] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                        STSA_HEAD_SEMANTIC};
  for (int64_t h = 0; h < H; h++)
    kinds[h] = o.kinds == KINDS_MIX ? MIX[h % 3] : STSA_HEAD_SEMANTIC;
  svg_workload w;
  svg_workload_make_kinds(&w, &cfg, 1, o.seed, kinds);
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, &cfg, &svg), ctx, "creating the SVG2 session");
  svg2_times t = {0};
  time_calls(ctx, svg, &cfg, &w, o.dtype, o.reps, o.drift, &t);
  svg_head_errors(&w.out, &w.ref, rel, cosv); /* the last warm call */
  for (int64_t h = 0; h < H; h++)
    t.rel_l2 += rel[h] / (double)H;
  print_times(&o, &cfg, threads, &t);
  free(kinds);
  free(rel);
  free(cosv);
  svg_workload_free(&w);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  return 0;
}
