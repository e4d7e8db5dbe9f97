/*
 * run_state.h — what the parts of `stsa run` share: its options (parsed in
 * cmd_run.c), the state of one run (computed in run_exec.c), and the steps
 * that write it out (run_output.c; the JSON report in run_report.c).
 */
#ifndef STSA_TOOLS_RUN_STATE_H
#define STSA_TOOLS_RUN_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "cli_files.h"
#include "progress.h"
#include "run_input.h"
#include "stsa.h"

enum { RUN_MODE_DENSE = 0, RUN_MODE_SPARSE = 1, RUN_MODE_SVG = 2 };
/* "dense", "sparse", "svg" (NULL-terminated: the choices of --mode). */
extern const char *const RUN_MODE_NAMES[4];

typedef struct run_opts {
  run_input_opts in;
  run_geo_opts geo;
  int mode, compare_dense, quiet, threads;
  double warn_rel_l2; /* warn about heads whose rel L2 vs dense exceeds it */
  int head_kind;      /* sparse mode: a stsa_head_kind */
  const char *out, *report;
  int64_t layer, step; /* svg mode; -1: the first sparse call of the policy */
} run_opts;

/* Result of one (batch entry, head). */
typedef struct head_result {
  int kind; /* a stsa_head_kind, or RUN_KIND_DENSE (run_report.h) for a dense call */
  int has_mse;
  double mse_spatial, mse_temporal;
  double density, ms;
  double rel_l2, cosine;
  int warn; /* rel_l2 above --warn-rel-l2 (or not finite) */
} head_result;

typedef struct run_state {
  run_opts o;
  stsa_ctx *ctx;
  stsa_svg_config cfg;
  char cfg_note[128];
  run_qkv qkv;
  int64_t B, H, D, N;
  stsa_tensor out;
  void *out_data;
  size_t out_bytes;
  head_result *res; /* [B * H] */
  stsa_svg_windows win;
  int have_windows, svg_dense_call;
  int64_t layer, step;
  double load_ms, setup_ms, compute_ms, profile_ms, attention_ms, dense_ms, warmup_ms;
  int n_warn;
  progress bar;
  int64_t units_done;
} run_state;

/* ---- run_exec.c ------------------------------------------------------------ */

/* Geometry and settings from the loaded tensors and the flags (dies on an
 * inconsistency); allocates the results and the output tensor. */
void run_setup(run_state *s);

/* The attention of the mode, head by head, and with --compare-dense the dense
 * reference and the per-head errors; a progress bar meanwhile. */
void run_compute(run_state *s);

/* ---- run_output.c ---------------------------------------------------------- */

/* --out and --report as outputs, validated against the inputs before the
 * computation (cli_outputs_prepare); returns how many there are (<= 2). */
int run_outputs_prepare(const run_state *s, cli_output *outs);

/* Writes --out and the report text (may be NULL) under staging names, then
 * renames them into place together. */
void run_write_files(run_state *s, cli_output *outs, int n, char *report);

/* The summary on stdout, and the warnings (on stderr, even with --quiet). */
void run_print_summary(const run_state *s);
void run_print_warnings(const run_state *s);

#endif
