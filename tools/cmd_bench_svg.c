/*
 * cmd_bench_svg.c — `stsa bench svg`: one SVG call (profiling + permuted
 * block-sparse attention) against our dense kernel on the same workload in
 * the same run, at a preset's geometry and density. With --compare-permute it
 * also times temporal heads with the permutation fused into the kernel's
 * gathers against copying whole tensors into position-major order and back.
 * With --dist (under mpirun) MPI starts before the options are parsed and
 * the bench is bench_svg_dist.c's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_svg.h"
#include "cli_options.h"
#include "cli_ran.h"
#include "cli_util.h"
#include "commands.h"
#include "dist_cli.h"
#include "svg_eval.h"

static void set_dist(void *base, const char *name, const char *value) {
  cli_parse_dist(name, value, &((svg_bench_opts *)base)->dist);
}

static const cli_opt SVG_BENCH_OPTIONS[] = {
    {.name = "--preset",
     .metavar = "NAME",
     CLI_STR(svg_bench_opts, preset),
     .help = "the geometry, density and policy (required)"},
    {.name = "--heads",
     .metavar = "H",
     CLI_I64(svg_bench_opts, heads, 1, 256),
     .help = "heads (default 2: the preset's head count makes dense\n"
             "runs take minutes)"},
    CLI_THREADS_OPTION(svg_bench_opts),
    {.name = "--seed",
     .metavar = "N",
     CLI_U64(svg_bench_opts, seed, 0, INT64_MAX),
     .help = "seed of the workload (default 1)"},
    {.name = "--q-tile",
     .metavar = "N",
     CLI_INT(svg_bench_opts, q_tile, 6, 4096),
     .help = "tile sizes (default: the session's)"},
    {.name = "--kv-tile", .metavar = "N", CLI_INT(svg_bench_opts, kv_tile, 16, 4096)},
    {.name = "--reps",
     .metavar = "N",
     CLI_INT(svg_bench_opts, reps, 1, 1000),
     .help = "dense and SVG calls, alternating; best of each (default 1)"},
    {.name = "--frames",
     .metavar = "F",
     CLI_I64(svg_bench_opts, frames, 1, 1 << 20),
     .help = "override the preset's geometry (video, no text): frames of\n"
             "Hp x Wp tokens set the session's frame-aligned tiles"},
    {.name = "--height", .metavar = "Hp", CLI_I64(svg_bench_opts, height, 1, 1 << 20)},
    {.name = "--width", .metavar = "Wp", CLI_I64(svg_bench_opts, width, 1, 1 << 20)},
    {.name = "--compare-permute",
     CLI_FLAG(svg_bench_opts, compare_permute),
     .help = "also time temporal heads with the permutation fused\n"
             "into the kernel against copying the tensors"},
    {.name = "--dtype",
     .metavar = "DT",
     CLI_DTYPE(svg_bench_opts, dtype),
     .help = "q, k and v: f32 (default), f16 or bf16 (outputs stay f32)"},
    CLI_PV_PRECISION_OPTIONS(svg_bench_opts),
    {.name = "--max-error",
     .metavar = "E",
     CLI_DOUBLE(svg_bench_opts, max_error, 0.0, 1e30),
     .help = "error budget of the SVG call (default 0: none); its bound's\n"
             "profiling is part of the call's time"},
    {.name = "--json", CLI_FLAG(svg_bench_opts, json), .help = "one JSON line"},
    {.name = "--dist",
     .metavar = "S",
     CLI_CALL(set_dist),
     .help = "under mpirun: the distributed SVG call against one\n"
             "process with ranks x threads threads, in the same run:\n"
             "ulysses, ring or hybrid[:U] (needs a build with MPI)"},
    {0}};

static void usage(void) {
  printf(
      "usage: stsa bench svg --preset NAME [--heads H] [--threads T] [--seed N]\n"
      "                      [--q-tile N] [--kv-tile N] [--reps N] [--compare-permute]\n"
      "                      [--frames F --height Hp --width Wp] [--dtype DT]\n"
      "                      [--pv-precision P] [--max-error E]\n"
      "                      [--json] [--dist ulysses|ring|hybrid[:U]]\n"
      "One SVG call (profiling and sparse attention) against dense attention on the\n"
      "same workload, at a preset's geometry and density.\n"
      "presets:");
  cli_print_presets();
  const cli_opt *const tables[1] = {SVG_BENCH_OPTIONS};
  cli_print_options(tables, 1);
}

/* Times temporal heads both ways: gathers fused into packing vs whole-tensor
 * copies (q position-major, k/v sink-first, the output back). */
static void compare_permute(stsa_ctx *ctx, const stsa_svg_config *cfg, svg_workload *w,
                            double *fused_ms, double *copy_ms, double *permute_ms) {
  const stsa_geometry *g = &cfg->geometry;
  stsa_svg_windows win = STSA_INIT(stsa_svg_windows);
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, cfg, &svg), ctx, "session");
  stsa_svg_get_windows(svg, &win);
  stsa_svg_free(svg);
  stsa_mask *band, *sink, *text, *a, *m;
  cli_check(stsa_mask_position_band(g, win.band, &band), NULL, "band");
  cli_check(stsa_mask_sink_frames(g, 1, &sink), NULL, "sink");
  cli_check(stsa_mask_text(g, &text), NULL, "text");
  cli_check(stsa_mask_or(band, sink, &a), NULL, "or");
  cli_check(stsa_mask_or(a, text, &m), NULL, "or");
  const int64_t H = cfg->heads, N = stsa_geometry_tokens(g);
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)H);
  if (!masks)
    cli_die("out of memory");
  for (int64_t h = 0; h < H; h++)
    masks[h] = m;
  stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                         N,
                         N,
                         H,
                         masks,
                         g,
                         STSA_ORDER_POSITION_MAJOR,
                         STSA_ORDER_SINK_FIRST,
                         win.q_tile,
                         win.kv_tile,
                         0,
                         NULL,
                         NULL};
  stsa_plan *plan;
  cli_check(stsa_plan_build(ctx, &desc, &plan), ctx, "temporal plan");
  /* the copy variant: w->ref holds the permuted q, then the output */
  stsa_tensor pk = w->k, pv = w->v;
  size_t bytes = (size_t)(N * H * cfg->head_dim) * sizeof(float);
  pk.data = aligned_alloc(64, bytes);
  pv.data = aligned_alloc(64, bytes);
  if (!pk.data || !pv.data)
    cli_die("out of memory");
  stsa_sparse_opts pre = {sizeof(stsa_sparse_opts), 0.0f, NULL,
                          STSA_SPARSE_EXACT,        NULL, STSA_SPARSE_PREPERMUTED};
  *fused_ms = *copy_ms = *permute_ms = INFINITY;
  for (int rep = 0; rep < 2; rep++) { /* best of two: the machine is shared */
    double t0 = cli_now();
    cli_check(stsa_sparse_attention(ctx, plan, &w->q, &w->k, &w->v, &w->out, NULL), ctx,
              "fused");
    double fused = (cli_now() - t0) * 1e3;
    t0 = cli_now();
    cli_check(stsa_permute_tokens(g, STSA_ORDER_POSITION_MAJOR, 0, &w->q, &w->ref), NULL,
              "q");
    cli_check(stsa_permute_tokens(g, STSA_ORDER_SINK_FIRST, 0, &w->k, &pk), NULL, "k");
    cli_check(stsa_permute_tokens(g, STSA_ORDER_SINK_FIRST, 0, &w->v, &pv), NULL, "v");
    double t1 = cli_now();
    cli_check(stsa_sparse_attention(ctx, plan, &w->ref, &pk, &pv, &w->out, &pre), ctx,
              "copy");
    double t2 = cli_now();
    cli_check(stsa_permute_tokens(g, STSA_ORDER_POSITION_MAJOR, 1, &w->out, &w->ref),
              NULL, "out");
    double t3 = cli_now();
    *fused_ms = fmin(*fused_ms, fused);
    *copy_ms = fmin(*copy_ms, (t3 - t0) * 1e3);
    *permute_ms = fmin(*permute_ms, ((t1 - t0) + (t3 - t2)) * 1e3);
  }
  free(pk.data);
  free(pv.data);
  stsa_plan_free(plan);
  free(masks);
  stsa_mask_free(band);
  stsa_mask_free(sink);
  stsa_mask_free(text);
  stsa_mask_free(a);
  stsa_mask_free(m);
}

int bench_svg(int argc, char **argv) {
  svg_bench_opts o = {.heads = 2,
                      .frames = -1,
                      .height = -1,
                      .width = -1,
                      .reps = 1,
                      .seed = 1,
                      .dtype = STSA_F32,
                      .dist = CLI_DIST_NONE};
  static const cli_command cmd = {"bench svg", "stsa bench svg --help", usage};
  const cli_opt_set set = {SVG_BENCH_OPTIONS, &o};
  const int dist = cli_dist_start(&set, 1, argc, argv, 2);
  cli_parse(&cmd, argc, argv, 2, &set, 1);
  if (!o.preset)
    cli_die("bench svg: --preset is required (see stsa bench svg --help)");
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  if (stsa_svg_preset(o.preset, &cfg) != STSA_OK)
    cli_die("bench svg: unknown preset '%s' (see stsa bench svg --help)", o.preset);
  cfg.heads = o.heads;
  cfg.seed = o.seed;
  cfg.max_rel_error = o.max_error;
  const int64_t dims[3] = {o.frames, o.height, o.width};
  if ((dims[0] > 0) != (dims[1] > 0) || (dims[1] > 0) != (dims[2] > 0))
    cli_die("bench svg: give all of --frames, --height and --width, or none");
  if (dims[0] > 0) { /* a video of that size: the preset's policy and density */
    cfg.geometry = (stsa_geometry){o.frames, o.height, o.width, 0, 0, STSA_TEXT_NONE};
    const int64_t L = o.frames * o.height * o.width;
    cfg.sample_rows = cfg.sample_rows < L ? cfg.sample_rows : L;
    cfg.sink_frames = cfg.sink_frames < o.frames ? cfg.sink_frames : o.frames;
  }
  if (dist) {
    cfg.q_tile = o.q_tile;
    cfg.kv_tile = o.kv_tile;
    return bench_svg_dist(&o, &cfg);
  }
  stsa_ctx *ctx;
  ctx = cli_ctx_create();
  if (o.threads)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, o.threads), ctx, "--threads");
  cli_check(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, o.pv_precision), ctx,
            "--pv-precision");
  /* explicit tiles override the session's frame-aligned choice */
  cfg.q_tile = o.q_tile;
  cfg.kv_tile = o.kv_tile;
  int64_t threads;
  stsa_ctx_get(ctx, STSA_PARAM_THREADS, &threads);
  const int64_t H = cfg.heads;

  svg_workload w;
  svg_workload_make(&w, &cfg, 1, o.seed);
  if (o.dtype != STSA_F32)
    svg_workload_cast(&w, o.dtype);
  stsa_svg *svg;
  double t0 = cli_now();
  cli_check(stsa_svg_create(ctx, &cfg, &svg), ctx, "creating the session");
  double setup_ms = (cli_now() - t0) * 1e3;
  stsa_svg_windows win = STSA_INIT(stsa_svg_windows);
  stsa_svg_get_windows(svg, &win);
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)H);
  double *rel = malloc(sizeof *rel * (size_t)H), *cosv = malloc(sizeof *cosv * (size_t)H);
  float *est = malloc(sizeof *est * (size_t)H);
  uint8_t *action = malloc((size_t)H);
  if (!kinds || !rel || !cosv || !est || !action)
    cli_die("out of memory");
  /* dense and SVG alternate, best of --reps each: a slow spell of the shared
   * machine then hits both alike */
  double dense_ms = INFINITY, svg_ms = INFINITY;
  stsa_svg_report rep = {.size = sizeof(stsa_svg_report)}, best = {0};
  /* what the dense and the SVG calls ran (every rep runs the same) */
  stsa_run_info dense_ran, svg_ran = {.size = sizeof svg_ran};
  for (int r = 0; r < o.reps; r++) {
    t0 = cli_now();
    cli_check(stsa_attention(ctx, &w.q, &w.k, &w.v, &w.ref, NULL), ctx,
              "dense attention");
    dense_ms = fmin(dense_ms, (cli_now() - t0) * 1e3);
    dense_ran = cli_ran(ctx, "dense attention");
    rep.kinds = kinds;
    rep.est_error = est;
    rep.budget = action;
    rep.run = &svg_ran;
    t0 = cli_now();
    /* the first step and layer past the preset's dense ones: a sparse call */
    cli_check(stsa_svg_attention(svg, cfg.dense_layers, cfg.dense_steps, &w.q, &w.k, &w.v,
                                 &w.out, &rep),
              ctx, "SVG attention");
    double ms = (cli_now() - t0) * 1e3;
    if (ms < svg_ms) {
      svg_ms = ms;
      best = rep;
    }
  }
  rep = best;
  svg_head_errors(&w.out, &w.ref, rel, cosv);
  double rel_kind[2] = {0, 0}, worst_cos = 1, rel_all = 0;
  int n_kind[2] = {0, 0}, right = 0, clear = 0;
  for (int64_t h = 0; h < H; h++) {
    rel_kind[kinds[h]] += rel[h];
    n_kind[kinds[h]]++;
    rel_all += rel[h] / (double)H;
    worst_cos = cosv[h] < worst_cos ? cosv[h] : worst_cos;
    if (w.truth[h] != STSA_HEAD_MIXED) {
      clear++;
      right += kinds[h] == w.truth[h];
    }
  }
  /* under a budget: the worst bound and true error, the heads widened or dense
   * (branches, not one loop of mixed reductions: gcc 12's aarch64 vectoriser
   * stopped with an internal error on that) */
  double worst_est = 0, worst_rel = 0;
  int widened = 0, densed = 0;
  for (int64_t h = 0; h < H; h++) {
    if (est[h] > worst_est)
      worst_est = est[h];
    if (rel[h] > worst_rel)
      worst_rel = rel[h];
    if (action[h] == STSA_BUDGET_RAISED)
      widened++;
    else if (action[h] == STSA_BUDGET_DENSE)
      densed++;
  }
  double fused_ms = 0, copy_ms = 0, permute_ms = 0;
  if (o.compare_permute)
    compare_permute(ctx, &cfg, &w, &fused_ms, &copy_ms, &permute_ms);
  const int64_t N = stsa_geometry_tokens(&cfg.geometry);
  double speedup = dense_ms / svg_ms, ideal = 1.0 / rep.density;
  double accuracy = clear ? (double)right / clear : 1.0;
  double rel_sp = n_kind[0] ? rel_kind[0] / n_kind[0] : 0;
  double rel_tm = n_kind[1] ? rel_kind[1] / n_kind[1] : 0;
  char ran[512], dran[512];
  if (o.json)
    printf(
        "{\"bench\": \"svg\", \"preset\": \"%s\", \"dtype\": \"%s\", \"tokens\": %lld, "
        "\"heads\": %lld, "
        "\"dim\": %lld, \"threads\": %lld, \"dense_ms\": %.3f, \"svg_ms\": %.3f, "
        "\"speedup\": %.3f, \"ideal_speedup\": %.3f, \"efficiency\": %.3f, "
        "\"profile_ms\": %.3f, \"attention_ms\": %.3f, \"permute_ms\": %.3f, "
        "\"temporal_fused_ms\": %.3f, \"temporal_copy_ms\": %.3f, \"density\": %.5f, "
        "\"rel_l2\": %.5f, \"rel_l2_spatial\": %.5f, \"rel_l2_temporal\": %.5f, "
        "\"min_cosine\": %.6f, \"kind_accuracy\": %.4f, \"spatial_heads\": %d, "
        "\"temporal_heads\": %d, \"setup_ms\": %.3f, \"q_tile\": %d, \"kv_tile\": %d, "
        "\"max_error\": %g, \"worst_bound\": %.5f, \"worst_rel_l2\": %.5f, "
        "\"widened_heads\": %d, \"dense_heads\": %d, "
        "\"ran\": %s, \"dense_ran\": %s}\n",
        o.preset, stsa_dtype_name(o.dtype), (long long)N, (long long)H,
        (long long)cfg.head_dim, (long long)threads, dense_ms, svg_ms, speedup, ideal,
        speedup / ideal, rep.profile_ms, rep.attention_ms, permute_ms, fused_ms, copy_ms,
        rep.density, rel_all, rel_sp, rel_tm, worst_cos, accuracy, n_kind[0], n_kind[1],
        setup_ms, win.q_tile, win.kv_tile, o.max_error, worst_est, worst_rel, widened,
        densed, cli_ran_json(&svg_ran, ran, sizeof ran),
        cli_ran_json(&dense_ran, dran, sizeof dran));
  else {
    printf("svg %s: %lld tokens, %lld heads x %lld, %lld threads\n", o.preset,
           (long long)N, (long long)H, (long long)cfg.head_dim, (long long)threads);
    printf(
        "  dense %.1f ms | SVG %.1f ms (profiling %.1f ms = %.1f%%, attention %.1f ms)\n",
        dense_ms, svg_ms, rep.profile_ms, 100 * rep.profile_ms / svg_ms,
        rep.attention_ms);
    printf("  ran: SVG %s; dense %s\n", cli_ran_text(&svg_ran, ran, sizeof ran),
           cli_ran_text(&dense_ran, dran, sizeof dran));
    printf("  speed-up %.2fx, ideal %.2fx at density %.3f (efficiency %.2f)\n", speedup,
           ideal, rep.density, speedup / ideal);
    printf("  heads: %d spatial, %d temporal; kind accuracy %.0f%%; rel L2 %.4f (spatial "
           "%.4f, temporal %.4f), min cosine %.5f\n",
           n_kind[0], n_kind[1], 100 * accuracy, rel_all, rel_sp, rel_tm, worst_cos);
    if (o.max_error > 0)
      printf("  budget %g: worst bound %.4f, worst rel L2 %.4f; %d heads widened, %d "
             "dense\n",
             o.max_error, worst_est, worst_rel, widened, densed);
    if (o.compare_permute)
      printf("  temporal heads: permutation fused %.1f ms vs copied %.1f ms (of which "
             "copies %.1f ms)\n",
             fused_ms, copy_ms, permute_ms);
    printf("  session set-up (windows and plans) %.1f ms, once per geometry; tiles %d x "
           "%d\n",
           setup_ms, win.q_tile, win.kv_tile);
  }
  free(kinds);
  free(rel);
  free(cosv);
  free(est);
  free(action);
  svg_workload_free(&w);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  return 0;
}
