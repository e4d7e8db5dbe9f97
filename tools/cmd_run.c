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

const char *const RUN_MODE_NAMES[4] = {"dense", "sparse", "svg", NULL};

static void set_dist(void *base, const char *name, const char *value) {
  cli_parse_dist(name, value, &((run_opts *)base)->dist);
}

/* Options of run itself; the input and geometry tables (run_input.c) come
 * first. tests/test_cli_usage.sh reads the names from these two files. */
static const cli_opt RUN_OPTIONS[] = {
    {.help = "what to run:"},
    {.name = "--mode",
     .metavar = "M",
     CLI_CHOICE(run_opts, mode, RUN_MODE_NAMES, NULL),
     .help = "svg (default): profiling, a kind per head, sparse attention;\n"
             "sparse: every head with the SVG mask of --head-kind;\n"
             "dense: dense attention. A dense call reports kind dense"},
    {.name = "--head-kind",
     .metavar = "K",
     CLI_CHOICE(run_opts, head_kind, RUN_KIND_NAMES, RUN_KIND_VALUES),
     .help = "spatial (default) or temporal (--mode sparse)"},
    {.name = "--layer",
     .metavar = "L",
     CLI_I64(run_opts, layer, 0, INT32_MAX),
     .help = "the call's layer and step (--mode svg; default: the\n"
             "first call the policy runs sparse)"},
    {.name = "--step", .metavar = "S", CLI_I64(run_opts, step, 0, INT32_MAX)},
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
      "                (or --in-q Q.npy --in-k K.npy --in-v V.npy)\n"
      "                --layout bshd|bhsd|shd --frames F --height Hp --width Wp\n"
      "                [options] --out OUT.safetensors|OUT.npy and/or --report R.json\n"
      "Attention on dumped Q, K, V (self-attention over N = text + F*Hp*Wp tokens).\n"
      "Heads and head dim always come from the tensors (a preset's head count is\n"
      "not applied). Values go after a space or an =: --frames 21, --frames=21.\n");
  const cli_opt *const tables[3] = {RUN_INPUT_OPTIONS, RUN_GEO_OPTIONS, RUN_OPTIONS};
  cli_print_options(tables, 3);
  printf("Times exclude one untimed warm-up call per kernel. Nothing is written on\n"
         "error; an existing output keeps its permission bits. See docs/cli.md.\n");
}

/* Flags that only one mode reads are errors in the others: a silently
 * ignored --layer would make a report claim what did not happen. */
static void check_mode_flags(const run_opts *o) {
  if (o->warn_rel_l2 >= 0 && !o->compare_dense)
    cli_die("run: --warn-rel-l2 needs --compare-dense (it warns about the comparison)");
  if (o->mode != RUN_MODE_SVG && (o->layer >= 0 || o->step >= 0))
    cli_die("run: --layer and --step apply to --mode svg only (this is --mode %s)",
            RUN_MODE_NAMES[o->mode]);
  if (o->mode != RUN_MODE_SPARSE && o->head_kind >= 0)
    cli_die("run: --head-kind applies to --mode sparse only (this is --mode %s)",
            RUN_MODE_NAMES[o->mode]);
}

/* The option tables of run and where each stores its values. */
static void option_sets(run_opts *o, cli_opt_set *sets) {
  sets[0] = (cli_opt_set){RUN_INPUT_OPTIONS, &o->in};
  sets[1] = (cli_opt_set){RUN_GEO_OPTIONS, &o->geo};
  sets[2] = (cli_opt_set){RUN_OPTIONS, o};
}

static void parse_run(int argc, char **argv, run_opts *o) {
  /* -1: not given (checked against the mode, then the default) */
  *o = (run_opts){.mode = RUN_MODE_SVG,
                  .head_kind = -1,
                  .layer = -1,
                  .step = -1,
                  .warn_rel_l2 = -1,
                  .dist = CLI_DIST_NONE};
  run_input_defaults(&o->in);
  run_geo_defaults(&o->geo);
  static const cli_command cmd = {"run", "stsa run --help", run_usage};
  cli_opt_set sets[3];
  option_sets(o, sets);
  cli_parse(&cmd, argc, argv, 1, sets, 3);
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
  cli_opt_set sets[3];
  option_sets(&s.o, sets);
  const int dist = cli_dist_start(sets, 3, argc, argv, 1);
  parse_run(argc, argv, &s.o);
  if (dist) {
    run_dist(&s);
    return 0;
  }
  double t_start = cli_now();
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
  free(s.res);
  free(s.out_data);
  run_free_qkv(&s.qkv);
  stsa_ctx_free(s.ctx);
  return 0;
}
