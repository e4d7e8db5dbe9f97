/*
 * cmd_plot.c — `stsa plot plan|attention|kinds|speedup`: PNG pictures of a
 * head's tile plan, of one query's attention over the video, of the head
 * kinds in `stsa run` reports and of speed-up against density from
 * `stsa bench --json` lines, and of error against density (pareto, also over
 * the quality zoo). This file dispatches
 * to the pictures (one file each, plot_cmd.h) and holds what they share.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "plot_cmd.h"

/* One text for all pictures: they share the <geometry> and <input> flags. */
static void plot_usage(void) {
  printf(
      "usage: stsa plot plan <geometry> [--kind spatial|temporal]\n"
      "                      --out plan.png\n"
      "       stsa plot attention <input> <geometry> --head H --query I|F,Y,X\n"
      "                      [--batch B] [--linear] --out attn.png\n"
      "       stsa plot kinds --report R.json [--report R2.json ...] --out kinds.png\n"
      "       stsa plot speedup --bench B.jsonl [--bench ...] --out speedup.png\n"
      "       stsa plot pareto [--out pareto.png] [--json T.json] [--frames F --height "
      "Hp\n"
      "                      --width Wp] [--heads-per-kind K] [--head-dim D]\n"
      "                      [--densities 0.05,0.1,...] [--tile T] [--seed N] [--threads "
      "T]\n"
      "       stsa plot pareto --zoo [--out zoo.png] [--json T.json] [--family NAME]\n"
      "                      [--size NAME] [--wan] [--seed N] [--threads T]\n"
      "<geometry>: --frames F --height Hp --width Wp [--text N --text-pos prefix|suffix\n"
      "            --text-real M] [--preset NAME] [--density D] [--sink-frames K]\n"
      "            [--tile T | --q-tile T --kv-tile T] (default: the session's tiles)\n"
      "<input>:    --in QKV.safetensors [--q/--k/--v NAME] or --in-q/--in-k/--in-v "
      "X.npy,\n"
      "            and --layout bshd|bhsd|shd\n"
      "  plan       empty/partial/full tiles of one head's SVG mask: frame-major order\n"
      "             beside position-major queries with sink-first keys\n"
      "  attention  softmax(q.k/sqrt(D)) of one query as one heat map per frame\n"
      "  kinds      the kind each head chose, one row per report's layer\n"
      "  speedup    \"speedup\" against \"density\" per \"mode\", and the ideal "
      "1/density\n"
      "  pareto     relative L2 against realised density of SVG, SVG2 (key budget =\n"
      "             density) and an oracle keeping each query tile's heaviest key\n"
      "             tiles, per kind of the built-in workload's heads (semantic,\n"
      "             spatial, temporal; default 8 x 24 x 32, D 64, 2 heads per kind,\n"
      "             densities 0.05-0.4, 64-token oracle tiles); with --zoo, of SVG,\n"
      "             SVG2 and auto on the quality zoo's heads, one panel per error\n"
      "             budget (none, 0.02, 0.05, 0.1); the table is printed;\n"
      "             its options: stsa plot pareto --help\n"
      "See docs/cli.md.\n");
}

static const cli_command PLOT = {"plot", "stsa plot --help", plot_usage};

void plot_parse(const char *what, int argc, char **argv, const cli_opt_set *sets,
                int n_sets) {
  static char name[32];
  snprintf(name, sizeof name, "plot %s", what);
  const cli_command cmd = {name, PLOT.hint, plot_usage};
  cli_parse(&cmd, argc, argv, 2, sets, n_sets);
}

void plot_need_out(const char *out, const char *what) {
  if (!out)
    cli_die("plot %s: --out FILE.png is required", what);
}

/* The input files of this picture, recorded as they are opened. */
static cli_file_id inputs[64];
static const char *input_names[64];
static int n_inputs;

void plot_add_input(const char *flag, const char *path, cli_file_id id) {
  if (n_inputs == 64)
    return;
  char *name = malloc(strlen(flag) + strlen(path) + 2);
  if (!name)
    cli_die("out of memory");
  sprintf(name, "%s %s", flag, path);
  inputs[n_inputs] = id, input_names[n_inputs++] = name;
}

json_t *plot_json_real(double x) { return isfinite(x) ? json_real(x) : json_null(); }

char *plot_json_text(json_t *root) {
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
  json_decref(root);
  if (!text)
    cli_die("out of memory formatting the table");
  return text;
}

stsa_status plot_png_writer(const char *path, void *arg, char *err, size_t err_len) {
  return canvas_write_png(arg, path, err, err_len) == 0 ? STSA_OK : STSA_ERR_IO;
}

void plot_save(const canvas *c, const char *path) {
  cli_output out = {.flag = "--out", .path = path};
  cli_outputs_prepare(&out, 1, inputs, input_names, n_inputs);
  cli_output_stage(&out, 1, 0, plot_png_writer, (void *)(uintptr_t)c);
  cli_outputs_commit(&out, 1);
  free(out.staging);
  free(out.backup);
}

static const struct {
  const char *name;
  int (*draw)(int argc, char **argv);
} PICTURES[] = {{"plan", plot_plan},
                {"attention", plot_attention},
                {"kinds", plot_kinds},
                {"speedup", plot_speedup},
                {"pareto", plot_pareto}};

int cmd_plot(int argc, char **argv) {
  cli_signals_start(); /* before any thread exists: staging files go on a signal */
  if (argc < 2) {
    plot_usage();
    return 2;
  }
  const char *what = argv[1];
  cli_help_version(&PLOT, what);
  for (size_t i = 0; i < sizeof PICTURES / sizeof PICTURES[0]; i++)
    if (!strcmp(what, PICTURES[i].name))
      return PICTURES[i].draw(argc, argv);
  cli_die(
      "plot: unknown picture '%s' (available: plan, attention, kinds, speedup, pareto)",
      what);
}
