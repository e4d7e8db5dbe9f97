/*
 * cmd_run.c — `stsa run`: dense, block-sparse or SVG attention on Q, K, V
 * dumped from a real model, with an output file and a JSON report. This file
 * holds its options and the order of the steps; the steps are elsewhere
 * (run_state.h): loading and geometry in run_input.c (shared with `stsa
 * plot`), the computation in run_exec.c, the files, summary and warnings in
 * run_output.c, the report in run_report.c.
 *
 * The inputs are used in place (views on the mapped safetensors data), in
 * the file's dtype and layout; the output has q's dtype, layout and shape.
 * Heads run one at a time on one-head views of the tensors: that gives a time
 * per head and a progress bar, and costs nothing in exactness (every head of
 * a library call is independent: the kernels are bitwise partition
 * invariant, and SVG profiles each head on the same sampled rows).
 * Every output target is validated before the computation starts (not an
 * input, not a device, a writable folder); everything is computed before
 * anything is written; the files are staged next to their targets and then
 * committed together (cli_outputs_commit), so a failed run leaves --out and
 * --report untouched.
 *
 * With --dist (under mpirun) MPI starts before the options are parsed, so
 * that a bad option on one rank stops every rank (dist_cli.h), and the run
 * goes to run_dist.c: the same steps on shards of the tokens, over ranks.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "dist_cli.h"
#include "run_input.h"
#include "run_report.h"
#include "run_state.h"

const char *const RUN_MODE_NAMES[6] = {"dense", "sparse", "svg", "svg2", "auto", NULL};

static void set_dist(void *base, const char *name, const char *value) {
  cli_parse_dist(name, value, &((run_opts *)base)->dist);
}

/* The built-in workload instead of an input file (run_workload.c). */
static const cli_opt RUN_WORKLOAD_OPTIONS[] = {
    {.name = "--workload",
     CLI_FLAG(run_workload_opts, on),
     .help = "no input file: the built-in workload (f32, bshd, B = 1) at\n"
             "the geometry of the flags; svg2 and auto plant spatial,\n"
             "temporal and semantic heads in turn, other modes the\n"
             "default mix"},
    {.name = "--heads",
     .metavar = "H",
     CLI_I64(run_workload_opts, heads, 1, 4096),
     .help = "--workload: heads and head dim (default 6 and 64)"},
    {.name = "--head-dim", .metavar = "D", CLI_I64(run_workload_opts, head_dim, 1, 512)},
    {.name = "--seed",
     .metavar = "N",
     CLI_U64(run_workload_opts, seed, 0, INT64_MAX),
     .help = "--workload: its seed (default 1)"},
    {0}};

/* Options of run itself; the input and geometry tables (run_input.c) come
 * first. tests/test_cli_usage.sh reads the names from these two files. */
static const cli_opt RUN_OPTIONS[] = {
    {.help = "what to run:"},
    {.name = "--mode",
     .metavar = "M",
     CLI_CHOICE(run_opts, mode, RUN_MODE_NAMES, NULL),
     .help = "svg (default): profiling, a kind per head, sparse attention;\n"
             "svg2: Sparse VideoGen 2, k-means clusters of q and k and\n"
             "top-p cluster rectangles per head (kind semantic);\n"
             "auto: per head the cheapest of SVG spatial, SVG temporal,\n"
             "SVG2 and dense whose bound meets --max-error (none: the\n"
             "lowest bound; SVG2's settings as in svg2);\n"
             "sparse: every head with the SVG mask of --head-kind;\n"
             "dense: dense attention. A dense call reports kind dense"},
    {.name = "--head-kind",
     .metavar = "K",
     CLI_CHOICE(run_opts, head_kind, RUN_KIND_NAMES, RUN_KIND_VALUES),
     .help = "spatial (default) or temporal (--mode sparse)"},
    {.name = "--layer",
     .metavar = "L",
     CLI_I64(run_opts, layer, 0, INT64_MAX),
     .help = "the call's layer and step (--mode svg, svg2, auto; default:\n"
             "the first call the policy runs sparse)"},
    {.name = "--step", .metavar = "S", CLI_I64(run_opts, step, 0, INT64_MAX)},
    {.name = "--max-error",
     .metavar = "E",
     CLI_DOUBLE(run_opts, max_error, 0.0, 1e300),
     .help = "svg modes: error budget per head: a head whose estimated\n"
             "relative L2 (profiled rows) exceeds E keeps more (SVG:\n"
             "density x2, x4; SVG2: top-p 0.95, 0.98, 0.995), else\n"
             "runs dense (default: none)"},
    {.name = "--top-p",
     .metavar = "P",
     CLI_DOUBLE(run_opts, top_p, 1e-6, 1.0),
     .help = "svg2, auto: key clusters kept per query cluster until their\n"
             "probability reaches P (default 0.9); --density D instead\n"
             "keeps D of the keys per query cluster"},
    {.name = "--q-clusters",
     .metavar = "N",
     CLI_I64(run_opts, q_clusters, 1, INT32_MAX),
     .help = "svg2, auto: k-means clusters of queries and keys per head\n"
             "(default: 300 / 1000 at 75,600 video tokens, scaled)"},
    {.name = "--kv-clusters",
     .metavar = "N",
     CLI_I64(run_opts, kv_clusters, 1, INT32_MAX)},
    {.name = "--compare-dense",
     CLI_FLAG(run_opts, compare_dense),
     .help = "also run dense attention; per head relative L2 and cosine"},
    {.name = "--warn-rel-l2",
     .metavar = "X",
     CLI_DOUBLE(run_opts, warn_rel_l2, 0.0, 1e300),
     .help = "with --compare-dense: warn (stderr and report) about heads\n"
             "whose relative L2 exceeds X (default 0.1)"},
    CLI_THREADS_OPTION(run_opts),
    {.name = "--dist", .metavar = "S", CLI_CALL(set_dist), .help = CLI_DIST_HELP},
    {.help = "output:"},
    {.name = "--out",
     .metavar = "FILE",
     CLI_STR(run_opts, out),
     .help = "tensor \"out\" in q's dtype, layout and shape (.npy suffix:\n"
             "a .npy file); never an input, a device or a directory"},
    {.name = "--report",
     .metavar = "FILE",
     CLI_STR(run_opts, report),
     .help = "the JSON report"},
    {.name = "--quiet",
     CLI_FLAG(run_opts, quiet),
     .help = "no progress bar and no summary on stdout"},
    {0}};

static void run_usage(void) {
  printf(
      "usage: stsa run --in QKV.safetensors [--q NAME --k NAME --v NAME]\n"
      "                (or --in-q Q.npy --in-k K.npy --in-v V.npy, or --workload)\n"
      "                --layout bshd|bhsd|shd --frames F --height Hp --width Wp\n"
      "                [options] --out OUT.safetensors|OUT.npy and/or --report R.json\n"
      "Attention on dumped Q, K, V (self-attention over N = text + F*Hp*Wp tokens).\n"
      "Heads and head dim always come from the tensors (a preset's head count is\n"
      "not applied). Values go after a space or an =: --frames 21, --frames=21.\n");
  const cli_opt *const tables[4] = {RUN_INPUT_OPTIONS, RUN_WORKLOAD_OPTIONS,
                                    RUN_GEO_OPTIONS, RUN_OPTIONS};
  cli_print_options(tables, 4);
  printf("Times exclude one untimed warm-up call per kernel. Nothing is written on\n"
         "error; an existing output keeps its permission bits. See docs/cli.md.\n");
}

/* Flags that only one mode reads are errors in the others: a silently
 * ignored --layer would make a report claim what did not happen. */
static void check_mode_flags(const run_opts *o) {
  if (o->warn_rel_l2 >= 0 && !o->compare_dense)
    cli_die("run: --warn-rel-l2 needs --compare-dense (it warns about the comparison)");
  const char *mode = RUN_MODE_NAMES[o->mode];
  if (!run_mode_is_svg(o->mode) && (o->layer >= 0 || o->step >= 0))
    cli_die("run: --layer and --step apply to --mode svg, svg2 and auto only (this is "
            "--mode %s)",
            mode);
  if (!run_mode_is_svg(o->mode) && o->max_error >= 0)
    cli_die("run: --max-error applies to --mode svg, svg2 and auto only (this is --mode "
            "%s)",
            mode);
  if (!run_mode_has_svg2(o->mode) &&
      (o->top_p >= 0 || o->q_clusters >= 0 || o->kv_clusters >= 0))
    cli_die(
        "run: --top-p, --q-clusters and --kv-clusters apply to --mode svg2 and auto only "
        "(this is --mode %s)",
        mode);
  if (run_mode_has_svg2(o->mode) && o->top_p >= 0 && o->geo.density > 0)
    cli_die("run: --density and --top-p are two budgets of SVG2's key clusters: give one "
            "(--top-p P: until their probability reaches P; --density D: D of the keys)");
  /* SVG2 keeps its centroids per head on the head's rank, and bounds need a
   * head's every key there: Ulysses only (refused, not dropped) */
  if (run_mode_has_svg2(o->mode) && o->dist.scheme >= 0 && o->dist.scheme != 0)
    cli_die("run: --mode %s runs with --dist ulysses only (each rank keeps whole heads, "
            "and their SVG2 centroids, from call to call; ring and hybrid layouts split "
            "their keys)",
            mode);
  /* a head's bound needs its every key on one rank: Ulysses only (refused,
   * not dropped) */
  if (o->max_error >= 0 && o->dist.scheme >= 0 && o->dist.scheme != 0 /* ulysses */)
    cli_die("run: --max-error runs with --dist ulysses only (a rank must hold whole "
            "heads to bound their error; ring and hybrid layouts split their keys)");
  const run_workload_opts *w = &o->work;
  if (w->on && o->dist.scheme >= 0)
    cli_die("run: --workload does not run with --dist (give the ranks an input file)");
  if (w->on && (o->in.in || o->in.npy[0] || o->in.npy[1] || o->in.npy[2]))
    cli_die("run: --workload generates q, k and v: give it or an input file, not both");
  if (w->on && o->in.layout >= 0)
    cli_die("run: --layout describes an input file; --workload is always bshd");
  if (!w->on && (w->heads >= 0 || w->head_dim >= 0 || w->seed != UINT64_MAX))
    cli_die("run: --heads, --head-dim and --seed apply to --workload only (an input's "
            "heads and head dim come from its tensors)");
  if (o->mode != RUN_MODE_SPARSE && o->head_kind >= 0)
    cli_die("run: --head-kind applies to --mode sparse only (this is --mode %s)",
            RUN_MODE_NAMES[o->mode]);
}

/* The option tables of run and where each stores its values. */
enum { RUN_OPTION_SETS = 4 };
static void option_sets(run_opts *o, cli_opt_set *sets) {
  sets[0] = (cli_opt_set){RUN_INPUT_OPTIONS, &o->in};
  sets[1] = (cli_opt_set){RUN_WORKLOAD_OPTIONS, &o->work};
  sets[2] = (cli_opt_set){RUN_GEO_OPTIONS, &o->geo};
  sets[3] = (cli_opt_set){RUN_OPTIONS, o};
}

static void parse_run(int argc, char **argv, run_opts *o) {
  /* -1: not given (checked against the mode, then the default) */
  *o = (run_opts){.mode = RUN_MODE_SVG,
                  .head_kind = -1,
                  .layer = -1,
                  .step = -1,
                  .warn_rel_l2 = -1,
                  .top_p = -1,
                  .q_clusters = -1,
                  .kv_clusters = -1,
                  .max_error = -1,
                  .work = {.heads = -1, .head_dim = -1, .seed = UINT64_MAX},
                  .dist = CLI_DIST_NONE};
  run_input_defaults(&o->in);
  run_geo_defaults(&o->geo);
  static const cli_command cmd = {"run", "stsa run --help", run_usage};
  cli_opt_set sets[RUN_OPTION_SETS];
  option_sets(o, sets);
  cli_parse(&cmd, argc, argv, 1, sets, RUN_OPTION_SETS);
  if (!o->out && !o->report)
    cli_die("run: nothing to write: give --out FILE (and/or --report FILE.json)");
  check_mode_flags(o);
  o->head_kind = o->head_kind >= 0 ? o->head_kind : STSA_HEAD_SPATIAL;
  o->warn_rel_l2 = o->warn_rel_l2 >= 0 ? o->warn_rel_l2 : 0.1;
}

int cmd_run(int argc, char **argv) {
  cli_signals_start(); /* before any thread exists */
  run_state s;
  memset(&s, 0, sizeof s);
  cli_opt_set sets[RUN_OPTION_SETS];
  option_sets(&s.o, sets);
  const int dist = cli_dist_start(sets, RUN_OPTION_SETS, argc, argv, 1);
  parse_run(argc, argv, &s.o);
  if (dist) {
    run_dist(&s);
    return 0;
  }
  double t_start = cli_now();
  if (s.o.work.on)
    run_workload_load(&s);
  else
    run_load_qkv(&s.o.in, &s.qkv);
  s.load_ms = (cli_now() - t_start) * 1e3;
  run_setup(&s);
  /* every output target is checked before the (long) computation */
  cli_output outs[2];
  const int n_out = run_outputs_prepare(&s, outs);
  s.ctx = cli_ctx_create();
  if (s.o.threads)
    cli_check(stsa_ctx_set(s.ctx, STSA_PARAM_THREADS, s.o.threads), s.ctx, "--threads");
  run_compute(&s);

  char *report = s.o.report ? run_report_build(&s) : NULL;
  run_write_files(&s, outs, n_out, report);
  if (!s.o.quiet)
    run_print_summary(&s);
  fflush(stdout);
  run_print_warnings(&s); /* last, where they are seen */
  free(report);
  free(s.truth);
  free(s.res);
  free(s.out_data);
  run_ran_free(&s.ran);
  run_ran_free(&s.dense_ran);
  run_free_qkv(&s.qkv);
  stsa_ctx_free(s.ctx);
  return 0;
}
