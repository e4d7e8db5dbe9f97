/*
 * run_report.c — the JSON report of `stsa run` (run_report.h): built from the
 * run's state before anything is written, and read back for `stsa plot kinds`.
 */
#define _POSIX_C_SOURCE 200809L
#include "run_report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_ran.h"
#include "cli_util.h"
#include "run_state.h"

/* ---- writing ---------------------------------------------------------------- */

/* The keys `stsa plot kinds` reads back (run_report_read_kinds). */
static const char K_PER_HEAD[] = "per_head", K_LAYER[] = "layer", K_STEP[] = "step",
                  K_BATCH[] = "batch", K_HEAD[] = "head", K_KIND[] = "kind";

const char *run_kind_name(int kind) {
  return kind == RUN_KIND_DENSE ? "dense"
         : kind >= 0            ? stsa_head_kind_name((stsa_head_kind)kind)
                                : "none";
}

/* JSON has no NaN or Inf: such values become null. */
static json_t *jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static const char *text_pos_name(stsa_text_pos p) {
  static const char *const names[] = {[STSA_TEXT_NONE] = "none",
                                      [STSA_TEXT_PREFIX] = "prefix",
                                      [STSA_TEXT_SUFFIX] = "suffix"};
  return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "unknown";
}

int64_t run_ran_common(const run_state *s, const run_ran *r, char *note, size_t len) {
  return cli_ran_common(r->info, r->known, r->n, s->dist ? "rank" : "head", note, len);
}

/* key: what every head or rank ran, or null and key_note saying why not
 * (key_note also names ranks that computed no heads); returns whether they
 * differ or are not known (the entries then go per head or per rank). */
static int report_ran(json_t *root, const run_state *s, const run_ran *r,
                      const char *key) {
  char note[160], note_key[32];
  const int64_t i = run_ran_common(s, r, note, sizeof note);
  json_object_set_new(root, key, cli_ran_object(i >= 0 ? &r->info[i] : NULL));
  if (note[0]) {
    snprintf(note_key, sizeof note_key, "%s_note", key);
    json_object_set_new(root, note_key, json_string(note));
  }
  return i < 0;
}

/* The entries of r as an array (null for a rank that computed no heads, or
 * whose run is not known). */
static json_t *ran_array(const run_ran *r) {
  json_t *arr = json_array();
  for (int64_t i = 0; i < r->n; i++)
    json_array_append_new(
        arr, cli_ran_object(r->known[i] == CLI_RAN_KNOWN ? &r->info[i] : NULL));
  return arr;
}

static json_t *report_geometry(const run_state *s) {
  const stsa_geometry *g = &s->cfg.geometry;
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I}", "frames",
                   (json_int_t)g->frames, "height", (json_int_t)g->height, "width",
                   (json_int_t)g->width, "text", (json_int_t)g->text, "text_real",
                   (json_int_t)g->text_real, "text_pos", text_pos_name(g->text_pos),
                   "tokens", (json_int_t)s->N, "batch", (json_int_t)s->B, "heads",
                   (json_int_t)s->H, "head_dim", (json_int_t)s->D);
}

static json_t *report_input(const run_state *s) {
  const run_input_opts *in = &s->o.in;
  json_t *j = json_object();
  if (s->o.work.on) {
    json_t *kinds = json_array();
    for (int64_t h = 0; h < s->H; h++)
      json_array_append_new(kinds, json_string(stsa_head_kind_name(s->truth[h])));
    json_object_set_new(j, "workload",
                        json_pack("{s:I, s:I, s:I, s:o}", "heads", (json_int_t)s->H,
                                  "head_dim", (json_int_t)s->D, "seed",
                                  (json_int_t)s->o.work.seed, "kinds", kinds));
  } else if (in->in) {
    json_object_set_new(j, "file", json_string(in->in));
    json_object_set_new(j, "names",
                        json_pack("[s, s, s]", in->names[0], in->names[1], in->names[2]));
  } else {
    json_object_set_new(j, "npy",
                        json_pack("[s, s, s]", in->npy[0], in->npy[1], in->npy[2]));
  }
  json_object_set_new(j, "layout", json_string(run_layout_name(in->layout)));
  json_t *dt = json_array();
  for (int i = 0; i < 3; i++)
    json_array_append_new(dt, json_string(stsa_dtype_name(s->qkv.t[i].dtype)));
  json_object_set_new(j, "dtypes", dt);
  json_object_set_new(
      j, "copied",
      json_pack("[b, b, b]", s->qkv.copied[0], s->qkv.copied[1], s->qkv.copied[2]));
  return j;
}

static json_t *report_svg(const run_state *s) {
  const stsa_svg_config *c = &s->cfg;
  json_t *j =
      json_pack("{s:I, s:I, s:I, s:I, s:I}", "dense_steps", (json_int_t)c->dense_steps,
                "dense_layers", (json_int_t)c->dense_layers, "sample_rows",
                (json_int_t)c->sample_rows, "sink_frames", (json_int_t)c->sink_frames,
                "seed", (json_int_t)c->seed);
  if (s->have_windows) {
    json_object_set_new(j, "q_tile", json_integer(s->win.q_tile));
    json_object_set_new(j, "kv_tile", json_integer(s->win.kv_tile));
    json_object_set_new(j, "frame_window", json_integer(s->win.frame_window));
    json_object_set_new(j, "band", json_integer(s->win.band));
    json_object_set_new(j, "density_spatial", jreal(s->win.density_spatial));
    json_object_set_new(j, "density_temporal", jreal(s->win.density_temporal));
  }
  if (run_mode_is_svg(s->o.mode)) {
    json_object_set_new(j, "method", json_string(stsa_svg_method_name(c->method)));
    json_object_set_new(j, "max_error", jreal(run_max_error(s)));
  }
  if (run_mode_has_svg2(s->o.mode)) {
    json_object_set_new(j, "top_p", jreal(c->svg2.top_p));
    json_object_set_new(j, "budget_of_keys",
                        json_string(c->svg2.top_p > 0 ? "top_p" : "density"));
    json_object_set_new(j, "q_clusters", json_integer(s->q_clusters));
    json_object_set_new(j, "kv_clusters", json_integer(s->kv_clusters));
    json_object_set_new(j, "cold_calls", json_integer(s->cold_calls));
  }
  if (s->cfg_note[0])
    json_object_set_new(j, "note", json_string(s->cfg_note));
  return j;
}

/* --mode auto's choice for a head: each candidate's density and bound (null:
 * not evaluated), the choice and why. */
static json_t *report_auto(const head_result *r) {
  json_t *cands = json_object();
  for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) {
    const int known = !isnan(r->cand_bound[c]);
    json_object_set_new(cands, stsa_auto_candidate_name(c),
                        json_pack("{s:o, s:o}", "density",
                                  known ? jreal(r->cand_density[c]) : json_null(),
                                  "bound",
                                  known ? jreal(r->cand_bound[c]) : json_null()));
  }
  return json_pack("{s:s, s:s, s:o}", "choice", stsa_auto_candidate_name(r->choice),
                   "reason", stsa_auto_reason_name(r->reason), "candidates", cands);
}

/* per_head; ran, dense_ran: give each head what it ran (the heads differ). */
static json_t *report_heads(const run_state *s, int ran, int dense_ran) {
  json_t *arr = json_array();
  for (int64_t i = 0; i < s->B * s->H; i++) {
    const head_result *r = &s->res[i];
    json_t *j = json_pack("{s:I, s:I, s:s}", K_BATCH, (json_int_t)(i / s->H), K_HEAD,
                          (json_int_t)(i % s->H), K_KIND, run_kind_name(r->kind));
    json_object_set_new(j, "mse_spatial",
                        r->has_mse ? jreal(r->mse_spatial) : json_null());
    json_object_set_new(j, "mse_temporal",
                        r->has_mse ? jreal(r->mse_temporal) : json_null());
    json_object_set_new(j, "density", jreal(r->density));
    json_object_set_new(j, "time_ms", jreal(r->ms));
    if (s->truth)
      json_object_set_new(j, "truth",
                          json_string(stsa_head_kind_name(s->truth[i % s->H])));
    if (run_mode_is_svg(s->o.mode)) {
      json_object_set_new(j, "est_error", jreal(r->est_error));
      json_object_set_new(j, "budget", json_string(stsa_budget_action_name(r->budget)));
    }
    if (run_mode_has_svg2(s->o.mode))
      json_object_set_new(j, "top_p", jreal(r->top_p));
    if (s->o.mode == RUN_MODE_AUTO)
      json_object_set_new(j, "auto", report_auto(r));
    if (s->o.compare_dense) {
      json_object_set_new(j, "rel_l2", jreal(r->rel_l2));
      json_object_set_new(j, "cosine", jreal(r->cosine));
      json_object_set_new(j, "warning", json_boolean(r->warn));
    }
    const int64_t h = i % s->H;
    if (ran)
      json_object_set_new(j, "ran", cli_ran_object(&s->ran.info[h]));
    if (dense_ran)
      json_object_set_new(j, "dense_ran", cli_ran_object(&s->dense_ran.info[h]));
    json_array_append_new(arr, j);
  }
  return arr;
}

int run_top_p_budget(const run_state *s) {
  return run_mode_has_svg2(s->o.mode) && s->cfg.svg2.top_p > 0;
}

double run_max_error(const run_state *s) {
  return s->o.max_error >= 0 ? s->o.max_error : s->cfg.max_rel_error;
}

double run_mean_density(const run_state *s) {
  double sum = 0;
  for (int64_t i = 0; i < s->B * s->H; i++)
    sum += s->res[i].density;
  return sum / (double)(s->B * s->H);
}

/* Per rank: an array of doubles or of integers. */
static json_t *per_rank(int n, const double *real, const int64_t *ints) {
  json_t *arr = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(arr, real ? jreal(real[i]) : json_integer((json_int_t)ints[i]));
  return arr;
}

static json_t *report_dist(const run_state *s, const run_dist_info *d) {
  json_t *j =
      json_pack("{s:s, s:i, s:i, s:i}", "scheme", d->scheme, "ranks", d->ranks,
                "ulysses_degree", d->ulysses_degree, "ring_degree", d->ring_degree);
  json_object_set_new(j, "tokens", per_rank(d->ranks, NULL, d->tokens));
  json_object_set_new(j, "local_heads", per_rank(d->ranks, NULL, d->local_heads));
  json_object_set_new(j, "comm_ms", per_rank(d->ranks, d->comm_ms, NULL));
  json_object_set_new(j, "compute_ms", per_rank(d->ranks, d->compute_ms, NULL));
  json_object_set_new(j, "pairs_skipped", per_rank(d->ranks, NULL, d->pairs_skipped));
  json_object_set_new(j, "imbalance", jreal(d->imbalance));
  json_object_set_new(j, "ran", ran_array(&s->ran));
  if (s->o.compare_dense)
    json_object_set_new(j, "dense_ran", ran_array(&s->dense_ran));
  return j;
}

static json_t *report_timing(const run_state *s) {
  json_t *j = json_object();
  json_object_set_new(j, "load_ms", jreal(s->load_ms));
  json_object_set_new(j, "setup_ms", jreal(s->setup_ms));
  json_object_set_new(j, "compute_ms", jreal(s->compute_ms));
  json_object_set_new(j, "warmup_ms", jreal(s->warmup_ms));
  if (run_mode_is_svg(s->o.mode)) {
    json_object_set_new(j, "profile_ms", jreal(s->profile_ms));
    json_object_set_new(j, "attention_ms", jreal(s->attention_ms));
  }
  if (run_mode_has_svg2(s->o.mode))
    json_object_set_new(j, "cluster_ms", jreal(s->cluster_ms));
  if (s->o.compare_dense) {
    json_object_set_new(j, "dense_ms", jreal(s->dense_ms));
    json_object_set_new(j, "speedup_vs_dense", jreal(s->dense_ms / s->compute_ms));
  }
  return j;
}

void run_warning_text(const run_state *s, int64_t i, char *buf, size_t len) {
  const head_result *r = &s->res[i];
  char err[40], warn[40]; /* digits enough to tell the error from the bound */
  snprintf(buf, len,
           "batch %lld head %lld (%s): relative L2 %s against dense exceeds "
           "--warn-rel-l2 %s (cosine %.4f)",
           (long long)(i / s->H), (long long)(i % s->H), run_kind_name(r->kind),
           cli_real(err, sizeof err, r->rel_l2, 4, s->o.warn_rel_l2),
           cli_real(warn, sizeof warn, s->o.warn_rel_l2, 1, s->o.warn_rel_l2), r->cosine);
}

static json_t *report_warnings(const run_state *s) {
  json_t *arr = json_array();
  for (int64_t i = 0; i < s->B * s->H; i++)
    if (s->res[i].warn) {
      char w[256];
      run_warning_text(s, i, w, sizeof w);
      json_array_append_new(arr, json_string(w));
    }
  return arr;
}

char *run_report_build(const run_state *s) {
  int64_t threads = 0;
  stsa_ctx_get(s->ctx, STSA_PARAM_THREADS, &threads);
  json_t *root = json_object();
  json_object_set_new(root, "tool", json_string("stsa run"));
  json_object_set_new(root, "version", json_string(stsa_version_string()));
  json_object_set_new(root, "mode", json_string(RUN_MODE_NAMES[s->o.mode]));
  if (s->o.mode == RUN_MODE_SPARSE)
    json_object_set_new(root, "head_kind", json_string(run_kind_name(s->o.head_kind)));
  json_object_set_new(root, "preset",
                      s->o.geo.preset ? json_string(s->o.geo.preset) : json_null());
  json_object_set_new(root, "input", report_input(s));
  json_object_set_new(root, "geometry", report_geometry(s));
  json_object_set_new(root, K_LAYER,
                      s->layer >= 0 ? json_integer(s->layer) : json_null());
  json_object_set_new(root, K_STEP, s->step >= 0 ? json_integer(s->step) : json_null());
  if (run_mode_is_svg(s->o.mode))
    json_object_set_new(root, "layer_step_from",
                        json_string(s->o.layer < 0 && s->o.step < 0
                                        ? "default: first sparse call of the policy"
                                        : "flags"));
  json_object_set_new(root, "dense_call",
                      json_boolean(s->o.mode == RUN_MODE_DENSE || s->svg_dense_call));
  /* SVG2 under a top-p budget aims at a probability, not at a density */
  json_object_set_new(root, "density_target",
                      run_top_p_budget(s) ? json_null() : jreal(s->cfg.density));
  json_object_set_new(root, "density", jreal(run_mean_density(s)));
  json_object_set_new(root, "svg",
                      s->o.mode == RUN_MODE_DENSE ? json_null() : report_svg(s));
  json_object_set_new(root, "backend",
                      json_string(stsa_backend_name(stsa_ctx_backend(s->ctx))));
  /* what the calls ran: per head (one process) where the heads differ, per
   * rank under --dist (in "dist") */
  const int heads_differ = report_ran(root, s, &s->ran, "ran") && !s->dist;
  const int dense_differ =
      s->o.compare_dense && report_ran(root, s, &s->dense_ran, "dense_ran") && !s->dist;
  json_object_set_new(root, "threads", json_integer(threads));
  json_object_set_new(root, "compare_dense", json_boolean(s->o.compare_dense));
  if (s->o.compare_dense)
    json_object_set_new(root, "warn_rel_l2", jreal(s->o.warn_rel_l2));
  if (run_mode_has_svg2(s->o.mode))
    json_object_set_new(root, "cold", json_boolean(s->cold_calls > 0));
  json_object_set_new(root, "warnings", report_warnings(s));
  json_object_set_new(root, K_PER_HEAD, report_heads(s, heads_differ, dense_differ));
  json_object_set_new(root, "timing", report_timing(s));
  if (s->dist)
    json_object_set_new(root, "dist", report_dist(s, s->dist));
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
  json_decref(root);
  if (!text)
    cli_die("out of memory formatting the report");
  return text;
}

/* ---- reading ---------------------------------------------------------------- */

static int64_t json_int_or(json_t *v, int64_t dflt) {
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/* The kind a report names (NULL or an unknown name: no data). */
static int kind_code(const char *s) {
  static const int KINDS[4] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL, STSA_HEAD_SEMANTIC,
                               RUN_KIND_DENSE};
  for (int i = 0; s && i < 4; i++)
    if (!strcmp(s, run_kind_name(KINDS[i])))
      return KINDS[i];
  return RUN_KIND_NONE;
}

static json_t *load_json(const char *flag, const char *path, FILE *f) {
  json_error_t e;
  json_t *root = json_loadf(f, 0, &e);
  const int read_error = ferror(f);
  fclose(f);
  if (!root && read_error)
    cli_die("%s %s: cannot read it", flag, path);
  if (!root && e.line >= 1)
    cli_die("%s %s: not valid JSON: line %d, column %d: %s", flag, path, e.line, e.column,
            e.text);
  if (!root)
    cli_die("%s %s: not valid JSON: %s", flag, path, e.text);
  return root;
}

void run_report_read_kinds(const char *flag, const char *path, FILE *f,
                           run_report_kinds *r) {
  json_t *root = load_json(flag, path, f);
  json_t *heads = json_object_get(root, K_PER_HEAD);
  if (!json_is_object(root) || !json_is_array(heads))
    cli_die("%s %s: not an stsa run report (no \"%s\" array)", flag, path, K_PER_HEAD);
  r->layer = json_int_or(json_object_get(root, K_LAYER), -1);
  r->step = json_int_or(json_object_get(root, K_STEP), -1);
  r->heads = 0;
  size_t i;
  json_t *h;
  json_array_foreach(heads, i, h) {
    int64_t head = json_int_or(json_object_get(h, K_HEAD), -1);
    r->heads = head + 1 > r->heads ? head + 1 : r->heads;
  }
  if (r->heads < 1 || r->heads > 65536)
    cli_die("%s %s: \"%s\" holds no valid head numbers", flag, path, K_PER_HEAD);
  r->kind = malloc((size_t)r->heads);
  if (!r->kind)
    cli_die("out of memory");
  memset(r->kind, RUN_KIND_NONE, (size_t)r->heads);
  json_array_foreach(heads, i, h) {
    int64_t head = json_int_or(json_object_get(h, K_HEAD), -1);
    if (head >= 0 && json_int_or(json_object_get(h, K_BATCH), 0) == 0)
      r->kind[head] =
          (signed char)kind_code(json_string_value(json_object_get(h, K_KIND)));
  }
  json_decref(root);
}
