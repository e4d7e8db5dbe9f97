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
#include "dist_cli.h"
#include "progress.h"
#include "run_input.h"
#include "stsa.h"

enum {
  RUN_MODE_DENSE = 0,
  RUN_MODE_SPARSE = 1,
  RUN_MODE_SVG = 2,
  RUN_MODE_SVG2 = 3,
  RUN_MODE_AUTO = 4
};
/* "dense", "sparse", "svg", "svg2", "auto" (NULL-terminated: the choices of
 * --mode). */
extern const char *const RUN_MODE_NAMES[6];
/* Whether a mode runs the SVG session (svg, svg2 or auto). */
static inline int run_mode_is_svg(int mode) {
  return mode == RUN_MODE_SVG || mode == RUN_MODE_SVG2 || mode == RUN_MODE_AUTO;
}
/* Whether a mode runs SVG2's clusters (svg2, and auto among its candidates). */
static inline int run_mode_has_svg2(int mode) {
  return mode == RUN_MODE_SVG2 || mode == RUN_MODE_AUTO;
}

/* --workload: the built-in workload instead of an input file (run_workload.c). */
typedef struct run_workload_opts {
  int on;
  int64_t heads, head_dim; /* -1: not given (defaults 6 and 64) */
  uint64_t seed;
} run_workload_opts;

typedef struct run_opts {
  run_input_opts in;
  run_workload_opts work;
  run_geo_opts geo;
  int mode, compare_dense, quiet, threads;
  double warn_rel_l2; /* warn about heads whose rel L2 vs dense exceeds it */
  int head_kind;      /* sparse mode: a stsa_head_kind */
  const char *out, *report;
  int64_t layer, step; /* svg modes; -1: the first sparse call of the policy */
  /* SVG2 (--mode svg2): top-p (-1: 0.9 unless --density is given) and the
   * k-means clusters (-1: the session's automatic counts) */
  double top_p;
  int64_t q_clusters, kv_clusters;
  double max_error;   /* svg modes: per-call error budget (-1: none given) */
  cli_dist_opts dist; /* --dist (run_dist.c); scheme -1: one process */
} run_opts;

/* Result of one (batch entry, head). */
typedef struct head_result {
  int kind; /* a stsa_head_kind, or RUN_KIND_DENSE (run_report.h) for a dense call */
  int has_mse;
  double mse_spatial, mse_temporal;
  double density, ms;
  double rel_l2, cosine;
  int warn; /* rel_l2 above --warn-rel-l2 (or not finite) */
  /* svg modes: the session's estimate of rel_l2 from the profiled rows, what
   * the error budget did (a stsa_budget_action) and SVG2's top-p */
  double est_error, top_p;
  int budget;
  /* --mode auto: the stsa_auto_candidate run and its stsa_auto_reason, and
   * each candidate's density and bound (NaN: not evaluated) */
  int choice, reason;
  float cand_density[STSA_AUTO_CANDIDATE_COUNT_], cand_bound[STSA_AUTO_CANDIDATE_COUNT_];
} head_result;

/* What the calls of a run ran (stsa_ctx_last_run, cli_ran.h): one entry per
 * head in one process (it calls the library head by head), one per rank
 * under --dist (the rank's last local attention call). */
typedef struct run_ran {
  int64_t n;
  stsa_run_info *info;  /* [n] */
  unsigned char *known; /* [n]: a CLI_RAN_* (cli_ran.h): none, known or not known */
} run_ran;

/* Room for n entries, none known yet. */
void run_ran_alloc(run_ran *r, int64_t n);
void run_ran_free(run_ran *r);

/* What a --dist run adds to the report and the summary (run_dist.c). */
typedef struct run_dist_info {
  const char *scheme; /* "ulysses", "ring" or "hybrid" */
  int ranks, ulysses_degree, ring_degree;
  double imbalance; /* of the mode's call: slowest rank's compute / mean - 1 */
  /* [ranks], of the mode's call: exchanges and waits, local attention */
  double *comm_ms, *compute_ms;
  int64_t *tokens, *local_heads,
      *pairs_skipped; /* shard, heads computed, pairs skipped */
} run_dist_info;

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
  double cluster_ms;               /* SVG2: k-means, inside profile_ms */
  int64_t q_clusters, kv_clusters; /* SVG2: per head, as the session resolved them */
  int cold_calls;                  /* SVG2: calls that seeded their layer's clusters */
  stsa_head_kind *truth;           /* --workload: the planted kind of each head [H] */
  int n_warn;
  progress bar;
  int64_t units_done;
  const run_dist_info *dist; /* a --dist run (on rank 0); NULL otherwise */
  /* what the mode's calls and (--compare-dense) the dense reference's ran:
   * per head, or per rank under --dist (run_dist.c) */
  run_ran ran, dense_ran;
} run_state;

/* ---- run_exec.c ------------------------------------------------------------ */

/* Geometry and settings from the loaded tensors and the flags (dies on an
 * inconsistency); allocates the results and the output tensor. */
void run_setup(run_state *s);
/* The same without the output tensor (run_setup = this + run_alloc_out). */
void run_setup_config(run_state *s);
/* The output buffer like q: same dtype, layout and shape, contiguous. */
void run_alloc_out(run_state *s);

/* Head h of a [B, S, H, D] tensor as a [B, S, 1, D] view. */
stsa_tensor run_head_view(const stsa_tensor *t, int64_t h);
/* One unit of the progress bar done (drawn once the run has lasted 1 s). */
void run_tick(run_state *s);

/* --mode sparse: the session's windows (into s->win), the mask of
 * --head-kind (returned, for the caller to free; also in mask1[0]) and the
 * plan of one head with it at the session's tiles: *desc (masks = mask1),
 * *plan and the kept fraction of its pairs. */
stsa_mask *run_sparse_plan(run_state *s, const stsa_mask **mask1, stsa_plan_desc *desc,
                           stsa_plan **plan, double *density);

/* Room for the per-head arrays of an SVG report over n (batch, head) pairs,
 * and the report pointing into it. */
typedef struct run_svg_arrays {
  stsa_head_kind *kinds;
  float *mse, *est, *density, *top_p; /* mse: [2 n], spatial then temporal */
  uint8_t *budget, *choice, *reason;
  float *cand; /* [2][n][STSA_AUTO_CANDIDATE_COUNT_]: densities, then bounds */
} run_svg_arrays;
void run_svg_arrays_alloc(run_svg_arrays *a, int64_t n);
void run_svg_arrays_free(run_svg_arrays *a);
stsa_svg_report run_svg_report_of(const run_svg_arrays *a, int64_t n);

/* The result of entry i of an SVG call's report (arrays as run_svg_report_of
 * sets them): its kind (dense for a call the policy ran dense), profiling
 * errors (SVG), the density the head ran with, the estimated error and the
 * budget's action (win: the session's windows, for a report without
 * per-head densities). */
head_result run_svg_result(const stsa_svg_report *rep, int64_t i,
                           const stsa_svg_windows *win, double ms);

/* The first non-finite value in heads [h0, h1) of t[0..2] (q, k, v, named
 * label[i]), as "<label> holds NaN at b=.., s=.., h=.., d=.." with s offset
 * by s0 (a shard's first token); returns 0 if there is none. */
int run_find_nonfinite(const stsa_tensor *t, const char *const *label, int64_t h0,
                       int64_t h1, int64_t s0, char *msg, size_t len);

/* The sums of --compare-dense for head (b, h) of out against ref over their
 * tokens (row_o, row_r: room for D floats each): sums[4] = sum (o - r)^2,
 * sum r^2, sum o^2, sum o r. Sums of shards add up to the whole's. */
void run_compare_sums(const stsa_tensor *out, const stsa_tensor *ref, int64_t b,
                      int64_t h, float *row_o, float *row_r, double *sums);
/* Relative L2, cosine and the warning from those sums. */
void run_compare_finish(const double *sums, double warn_rel_l2, head_result *r);

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

/* ---- run_workload.c -------------------------------------------------------- */

/* --workload: q, k, v of the built-in workload (f32, bshd, B = 1) at the
 * geometry of the flags into s->qkv, and the planted kinds into s->truth;
 * --mode svg2 plants spatial, temporal and semantic heads in turn, the other
 * modes the generator's default mix. */
void run_workload_load(run_state *s);

/* ---- run_dist.c ------------------------------------------------------------ */

/* `stsa run --dist` after its options are parsed, MPI started
 * (cli_dist_start): every rank loads the input and computes its shard of
 * the tokens with libstsa_mpi; rank 0 gathers the output and writes the
 * files. Returns only after a success on every rank. */
void run_dist(run_state *s);

#endif
