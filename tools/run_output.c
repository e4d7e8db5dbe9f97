/*
 * run_output.c — what `stsa run` leaves behind (run_state.h): the output
 * tensor and the report, validated up front and committed together, and the
 * summary and warnings it prints.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_ran.h"
#include "cli_util.h"
#include "run_report.h"
#include "run_state.h"
#include "stsa_io.h"

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* Writes the output tensor to `path` (atomically: temp file + rename). */
static stsa_status write_out(const char *path, void *arg, char *err, size_t err_len) {
  const run_state *s = arg;
  const stsa_geometry *g = &s->cfg.geometry;
  const stsa_dtype dt = s->qkv.t[0].dtype;
  if (ends_with(s->o.out, ".npy"))
    return stsa_npy_write(path, dt, s->qkv.rank, s->qkv.file_shape, s->out_data, err,
                          err_len);
  char geo[96];
  snprintf(geo, sizeof geo, "%lldx%lldx%lld+%lld", (long long)g->frames,
           (long long)g->height, (long long)g->width, (long long)g->text);
  stsa_io_tensor t = {"out", dt, s->qkv.rank, {0}, s->out_data, s->out_bytes};
  memcpy(t.shape, s->qkv.file_shape, sizeof(int64_t) * (size_t)s->qkv.rank);
  stsa_st_meta meta[3] = {{"stsa_mode", RUN_MODE_NAMES[s->o.mode]},
                          {"stsa_layout", run_layout_name(s->o.in.layout)},
                          {"stsa_geometry", geo}};
  return stsa_st_write_meta(path, &t, 1, meta, 3, err, err_len);
}

int run_outputs_prepare(const run_state *s, cli_output *outs) {
  if (s->o.out && ends_with(s->o.out, ".npy") && s->qkv.t[0].dtype == STSA_BF16)
    cli_die("--out %s: .npy has no bfloat16 type; q is bf16, write .safetensors instead",
            s->o.out);
  int n = 0;
  if (s->o.out)
    outs[n++] = (cli_output){.flag = "--out", .path = s->o.out};
  if (s->o.report)
    outs[n++] = (cli_output){.flag = "--report", .path = s->o.report};
  char in_desc[3][512];
  const char *in_names[3];
  for (int i = 0; i < s->qkv.n_ids; i++) {
    snprintf(in_desc[i], sizeof in_desc[i], "%s %s", s->qkv.id_names[i],
             s->o.in.in ? s->o.in.in : s->o.in.npy[i]);
    in_names[i] = in_desc[i];
  }
  cli_outputs_prepare(outs, n, s->qkv.ids, in_names, s->qkv.n_ids);
  return n;
}

/* Both files are first written in full under staging names next to their
 * targets and only then renamed over them together, so a failed write (a
 * full disk) or a signal leaves --out and --report exactly as they were. */
void run_write_files(run_state *s, cli_output *outs, int n, char *report) {
  int k = 0;
  if (s->o.out)
    cli_output_stage(outs, n, k++, write_out, s);
  if (s->o.report)
    cli_output_stage(outs, n, k++, cli_write_text, report);
  cli_outputs_commit(outs, n);
  for (int i = 0; i < n; i++) {
    free(outs[i].staging);
    free(outs[i].backup);
  }
}

/* One line on the ranks of a --dist run. */
static void print_dist(const run_dist_info *d) {
  double lo = INFINITY, hi = 0, comm = 0;
  for (int r = 0; r < d->ranks; r++) {
    lo = fmin(lo, d->compute_ms[r]);
    hi = fmax(hi, d->compute_ms[r]);
    comm = fmax(comm, d->comm_ms[r]);
  }
  printf("  distributed: %s over %d ranks (Ulysses degree %d, ring degree %d), local "
         "attention %.2f to %.2f ms per rank (imbalance %.1f%%), communication up to "
         "%.2f ms\n",
         d->scheme, d->ranks, d->ulysses_degree, d->ring_degree, lo, hi,
         100 * d->imbalance, comm);
}

enum { TABLE_ROWS = 32 }; /* the rest is in --report */

/* --mode auto: per head each candidate's density / bound, the choice and
 * why. */
static void print_candidates(const run_state *s) {
  printf("  auto's candidates (density / bound; - : not evaluated):\n");
  printf("  %5s %5s", "batch", "head");
  for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++)
    printf(" %17s", stsa_auto_candidate_name(c));
  printf("  %-8s %s\n", "choice", "why");
  for (int64_t i = 0; i < s->B * s->H && i < TABLE_ROWS; i++) {
    const head_result *r = &s->res[i];
    printf("  %5lld %5lld", (long long)(i / s->H), (long long)(i % s->H));
    for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) {
      char cell[32] = "-";
      if (!isnan(r->cand_bound[c]))
        snprintf(cell, sizeof cell, "%.3f / %.4f", (double)r->cand_density[c],
                 (double)r->cand_bound[c]);
      printf(" %17s", cell);
    }
    printf("  %-8s %s\n", stsa_auto_candidate_name(r->choice),
           stsa_auto_reason_name(r->reason));
  }
}

/* The per-head table of the svg modes: what each head ran with and the
 * session's error estimate beside the realised error (--compare-dense). */
static void print_heads(const run_state *s) {
  const int svg2 = run_mode_has_svg2(s->o.mode), cmp = s->o.compare_dense;
  const int bw = svg2 ? 7 : 0; /* no trailing blanks after the last column */
  printf("  %5s %5s %-9s%s %8s %9s%s %-*s%s\n", "batch", "head", "kind",
         s->truth ? " truth    " : "", "density", "est_err", cmp ? "    rel_l2" : "", bw,
         "budget", svg2 ? "  top_p" : "");
  const int64_t n = s->B * s->H;
  for (int64_t i = 0; i < n && i < TABLE_ROWS; i++) {
    const head_result *r = &s->res[i];
    char truth[16] = "", rel[16] = "", top[16] = "";
    if (s->truth)
      snprintf(truth, sizeof truth, " %-9s", stsa_head_kind_name(s->truth[i % s->H]));
    if (cmp)
      snprintf(rel, sizeof rel, " %9.4f", r->rel_l2);
    if (svg2)
      snprintf(top, sizeof top, " %6.3f", r->top_p);
    printf("  %5lld %5lld %-9s%s %8.4f %9.4f%s %-*s%s\n", (long long)(i / s->H),
           (long long)(i % s->H), run_kind_name(r->kind), truth, r->density, r->est_error,
           rel, bw, stsa_budget_action_name(r->budget), top);
  }
  if (n > TABLE_ROWS)
    printf("  ... %lld more (batch, head) pairs in --report\n",
           (long long)(n - TABLE_ROWS));
  if (s->o.mode == RUN_MODE_AUTO && !s->svg_dense_call)
    print_candidates(s);
}

/* "  <label>: avx512, f32": what every head (or rank) ran, else why not and
 * each one's. */
static void print_ran(const run_state *s, const run_ran *r, const char *label) {
  char note[160], text[256];
  const int64_t common = run_ran_common(s, r, note, sizeof note);
  if (common >= 0) {
    printf("  %s: %s%s%s%s\n", label, cli_ran_text(&r->info[common], text, sizeof text),
           s->dist ? " on every rank" : "", note[0] ? " with heads; " : "", note);
    return;
  }
  printf("  %s: %s\n", label, note);
  for (int64_t i = 0; i < r->n && i < TABLE_ROWS; i++)
    printf("    %s %lld: %s\n", s->dist ? "rank" : "head", (long long)i,
           r->known[i] == CLI_RAN_KNOWN  ? cli_ran_text(&r->info[i], text, sizeof text)
           : r->known[i] == CLI_RAN_NONE ? "no heads of the call"
                                         : "not known");
  if (r->n > TABLE_ROWS)
    printf("    ... %lld more in --report\n", (long long)(r->n - TABLE_ROWS));
}

void run_print_summary(const run_state *s) {
  const stsa_geometry *g = &s->cfg.geometry;
  printf(
      "stsa run %s: N = %lld (%lld x %lld x %lld video + %lld text), B = %lld, H = %lld, "
      "D = %lld, %s\n",
      RUN_MODE_NAMES[s->o.mode], (long long)s->N, (long long)g->frames,
      (long long)g->height, (long long)g->width, (long long)g->text, (long long)s->B,
      (long long)s->H, (long long)s->D, stsa_dtype_name(s->qkv.t[0].dtype));
  int spatial = 0, temporal = 0, semantic = 0, dense = 0;
  for (int64_t i = 0; i < s->B * s->H; i++) {
    spatial += s->res[i].kind == STSA_HEAD_SPATIAL;
    temporal += s->res[i].kind == STSA_HEAD_TEMPORAL;
    semantic += s->res[i].kind == STSA_HEAD_SEMANTIC;
    dense += s->res[i].kind < 0;
  }
  if (run_mode_is_svg(s->o.mode))
    printf("  layer %lld step %lld: %s call\n", (long long)s->layer, (long long)s->step,
           s->svg_dense_call ? "dense (by policy)" : "sparse");
  if (run_mode_has_svg2(s->o.mode) && !s->svg_dense_call)
    printf("  SVG2: %lld query x %lld key clusters per head, %s, k-means %.2f ms of "
           "profiling %.2f ms (%s)\n",
           (long long)s->q_clusters, (long long)s->kv_clusters,
           s->cfg.svg2.top_p > 0 ? "top-p budget" : "density budget", s->cluster_ms,
           s->profile_ms, s->cold_calls ? "cold: clusters seeded" : "warm");
  printf("  kinds of the %lld (batch, head) pairs: %d spatial, %d temporal, %d dense",
         (long long)(s->B * s->H), spatial, temporal, dense);
  if (semantic || run_mode_has_svg2(s->o.mode))
    printf(", %d semantic", semantic);
  printf("\n");
  char target[32];
  snprintf(target, sizeof target, run_top_p_budget(s) ? "top-p %.3g" : "target %.2f",
           run_top_p_budget(s) ? s->cfg.svg2.top_p : s->cfg.density);
  printf("  density %.4f (%s), attention %.2f ms (after one untimed warm-up call)\n",
         run_mean_density(s), target, s->compute_ms);
  print_ran(s, &s->ran, "ran");
  if (s->dist)
    print_dist(s->dist);
  if (run_mode_is_svg(s->o.mode))
    print_heads(s);
  if (s->o.compare_dense) {
    double worst = 0, cmin = 1, ratio = s->dense_ms / s->compute_ms;
    for (int64_t i = 0; i < s->B * s->H; i++) {
      worst = fmax(worst, s->res[i].rel_l2);
      cmin = fmin(cmin, s->res[i].cosine);
    }
    printf("  dense reference %.2f ms: %s %.2fx %s than dense\n", s->dense_ms,
           RUN_MODE_NAMES[s->o.mode], ratio >= 1 ? ratio : 1 / ratio,
           ratio >= 1 ? "faster" : "slower");
    print_ran(s, &s->dense_ran, "dense reference ran");
    /* the worst head at 4 digits, or more where it exceeds the threshold by
     * less than that shows */
    char w[32], x[32];
    const double warn = s->o.warn_rel_l2;
    printf("  against dense: worst head rel L2 %s, lowest cosine %.6f; %d head(s) above "
           "--warn-rel-l2 %s\n",
           cli_real(w, sizeof w, worst, 4, warn), cmin, s->n_warn,
           cli_real(x, sizeof x, warn, 1, warn));
  }
}

void run_print_warnings(const run_state *s) {
  for (int64_t i = 0; i < s->B * s->H; i++)
    if (s->res[i].warn) {
      char w[256];
      run_warning_text(s, i, w, sizeof w);
      fprintf(stderr, "stsa: warning: %s\n", w);
    }
}
