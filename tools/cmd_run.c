/*
 * cmd_run.c — `stsa run`: dense, block-sparse or SVG attention on Q, K, V
 * dumped from a real model, with an output file and a JSON report.
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
 * Input loading and geometry options live in run_input.c (shared with
 * `stsa plot`).
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_files.h"
#include "cli_util.h"
#include "commands.h"
#include "core/convert.h"
#include "io/io_common.h"
#include "progress.h"
#include "run_input.h"

/* ======================================================================== */
/* stsa run                                                                 */
/* ======================================================================== */

enum { MODE_DENSE = 0, MODE_SPARSE = 1, MODE_SVG = 2 };
static const char *const MODE_NAME[3] = {"dense", "sparse", "svg"};

typedef struct run_opts {
  run_input_opts in;
  run_geo_opts geo;
  int mode, compare_dense, quiet, threads;
  double warn_rel_l2; /* warn about heads whose rel L2 vs dense exceeds it */
  int warn_set;
  stsa_head_kind head_kind; /* sparse mode */
  int head_kind_set;
  const char *out, *report;
  int64_t layer, step; /* svg mode; -1: the first sparse call of the policy */
} run_opts;

/* Result of one (batch entry, head). kind -1 means the call ran dense. */
typedef struct head_result {
  int kind;
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

static void run_usage(void) {
  printf(
      "usage: stsa run --in QKV.safetensors [--q NAME --k NAME --v NAME]\n"
      "                (or --in-q Q.npy --in-k K.npy --in-v V.npy)\n"
      "                --layout bshd|bhsd|shd --frames F --height Hp --width Wp\n"
      "                [options] --out OUT.safetensors|OUT.npy and/or --report R.json\n"
      "Attention on dumped Q, K, V (self-attention over N = text + F*Hp*Wp tokens).\n"
      "Heads and head dim always come from the tensors (a preset's head count is\n"
      "not applied). Values go after a space or an =: --frames 21, --frames=21.\n"
      "input:\n"
      "  --in FILE        safetensors file holding q, k and v\n"
      "  --q NAME, --k NAME, --v NAME  their tensor names (default q, k, v)\n"
      "  --in-q FILE, --in-k FILE, --in-v FILE  or three .npy files\n"
      "  --layout L       bshd [B,S,H,D], bhsd [B,H,S,D] or shd [S,H,D] (required)\n"
      "geometry and SVG settings:\n"
      "  --frames F, --height Hp, --width Wp  latent frames and tokens per side\n"
      "  --text N         text tokens inside self-attention (default 0)\n"
      "  --text-pos P     prefix or suffix (required when --text > 0), or none\n"
      "  --text-real M    real text tokens of a suffix, the rest padding\n"
      "  --preset NAME    wan21-480p, wan21-720p, hunyuan-720p, hunyuan-480p,\n"
      "                   cogvideox15: geometry, density, dense steps/layers; flags win\n"
      "  --density D      kept fraction of pairs aimed at, in (0, 1] (default 0.30)\n"
      "  --sample-rows R  query rows SVG profiles (default 64)\n"
      "  --sink-frames K  frames every query sees (default 1)\n"
      "  --tile T, --q-tile T, --kv-tile T  tile sizes of the plans\n"
      "what to run:\n"
      "  --mode M         svg (default): profiling, a kind per head, sparse attention;\n"
      "                   sparse: every head with the SVG mask of --head-kind;\n"
      "                   dense: dense attention. A dense call reports kind dense\n"
      "  --head-kind K    spatial (default) or temporal (--mode sparse)\n"
      "  --layer L, --step S  the call's layer and step (--mode svg; default: the\n"
      "                   first call the policy runs sparse)\n"
      "  --compare-dense  also run dense attention; per head relative L2 and cosine\n"
      "  --warn-rel-l2 X  with --compare-dense: warn (stderr and report) about heads\n"
      "                   whose relative L2 exceeds X (default 0.1)\n"
      "  --threads T      worker threads (default: all CPUs)\n"
      "output:\n"
      "  --out FILE       tensor \"out\" in q's dtype, layout and shape (.npy suffix:\n"
      "                   a .npy file); never an input, a device or a directory\n"
      "  --report FILE    the JSON report\n"
      "  --quiet          no progress bar and no summary on stdout\n"
      "  -h, --help       this text; -V, --version the version\n"
      "Times exclude one untimed warm-up call per kernel. Nothing is written on\n"
      "error; an existing output keeps its permission bits. See docs/cli.md.\n");
}

/* Flags that only one mode reads are errors in the others: a silently
 * ignored --layer would make a report claim what did not happen. */
static void check_mode_flags(const run_opts *o) {
  if (o->warn_set && !o->compare_dense)
    cli_die("run: --warn-rel-l2 needs --compare-dense (it warns about the comparison)");
  if (o->mode != MODE_SVG && (o->layer >= 0 || o->step >= 0))
    cli_die("run: --layer and --step apply to --mode svg only (this is --mode %s)",
            MODE_NAME[o->mode]);
  if (o->mode != MODE_SPARSE && o->head_kind_set)
    cli_die("run: --head-kind applies to --mode sparse only (this is --mode %s)",
            MODE_NAME[o->mode]);
}

static void parse_run(int argc, char **argv, run_opts *o) {
  *o = (run_opts){.mode = MODE_SVG,
                  .head_kind = STSA_HEAD_SPATIAL,
                  .layer = -1,
                  .step = -1,
                  .warn_rel_l2 = 0.1};
  run_input_defaults(&o->in);
  run_geo_defaults(&o->geo);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (run_parse_input_opt(argc, argv, &i, &o->in) ||
        run_parse_geo_opt(argc, argv, &i, &o->geo))
      continue;
    if (!strcmp(a, "--mode")) {
      const char *s = cli_str(argc, argv, &i);
      int m;
      for (m = 0; m < 3 && strcmp(s, MODE_NAME[m]); m++)
        ;
      if (m == 3)
        cli_die("--mode expects dense, sparse or svg, got '%s'", s);
      o->mode = m;
    } else if (!strcmp(a, "--head-kind")) {
      o->head_kind = run_parse_kind(argc, argv, &i);
      o->head_kind_set = 1;
    } else if (!strcmp(a, "--out"))
      o->out = cli_str(argc, argv, &i);
    else if (!strcmp(a, "--report"))
      o->report = cli_str(argc, argv, &i);
    else if (!strcmp(a, "--layer"))
      o->layer = cli_int(argc, argv, &i, 0, INT32_MAX);
    else if (!strcmp(a, "--step"))
      o->step = cli_int(argc, argv, &i, 0, INT32_MAX);
    else if (!strcmp(a, "--threads"))
      o->threads = (int)cli_int(argc, argv, &i, 1, 1024);
    else if (!strcmp(a, "--compare-dense"))
      o->compare_dense = 1;
    else if (!strcmp(a, "--warn-rel-l2")) {
      o->warn_rel_l2 = cli_double(argc, argv, &i, 0.0, 1e300);
      o->warn_set = 1;
    } else if (!strcmp(a, "--quiet"))
      o->quiet = 1;
    else {
      cli_help_version(a, run_usage);
      cli_unknown("run", a, "stsa run --help");
    }
  }
  if (!o->out && !o->report)
    cli_die("run: nothing to write: give --out FILE (and/or --report FILE.json)");
  check_mode_flags(o);
}

/* ---- computing ------------------------------------------------------------ */

/* Head h of a [B, S, H, D] tensor as a [B, S, 1, D] view. */
static stsa_tensor head_view(const stsa_tensor *t, int64_t h) {
  stsa_tensor v = *t;
  v.data = (char *)t->data + (size_t)(h * t->stride[2]) * stsa_dtype_size(t->dtype);
  v.shape[2] = 1;
  return v;
}

/* The first non-finite value of head h of q, k or v, as "<tensor> holds NaN
 * or Inf at b=.., s=.., h=.., d=.." in the caller's coordinates; 0 if none. */
static int find_nonfinite(const run_state *s, int64_t h, char *msg, size_t len) {
  float *row = malloc(sizeof *row * (size_t)s->D);
  if (!row)
    return 0;
  for (int t = 0; t < 3; t++) {
    const stsa_tensor *x = &s->qkv.t[t];
    const size_t es = stsa_dtype_size(x->dtype);
    for (int64_t b = 0; b < s->B; b++)
      for (int64_t i = 0; i < s->N; i++) {
        size_t off = (size_t)(b * x->stride[0] + i * x->stride[1] + h * x->stride[2]);
        stsa_load_row_f32((const char *)x->data + off * es, x->dtype, x->stride[3], s->D,
                          row);
        for (int64_t d = 0; d < s->D; d++)
          if (!isfinite(row[d])) {
            snprintf(msg, len, "%s holds %s at b=%lld, s=%lld, h=%lld, d=%lld",
                     s->qkv.label[t], isnan(row[d]) ? "NaN" : "Inf", (long long)b,
                     (long long)i, (long long)h, (long long)d);
            free(row);
            return 1;
          }
      }
  }
  free(row);
  return 0;
}

/* cli_check for a call on the one-head views of head h: the library names a
 * non-finite input by its position in the view (always h=0), so the tool
 * names it in the tensors as given. */
static void check_head(const run_state *s, stsa_status st, int64_t h, const char *what) {
  char msg[256];
  if (st == STSA_ERR_NONFINITE && find_nonfinite(s, h, msg, sizeof msg))
    cli_die("%s failed: %s", what, msg);
  cli_check(st, s->ctx, what);
}

/* The bar appears only once a run has lasted a second: short runs stay quiet. */
static void tick(run_state *s) {
  s->units_done++;
  if (cli_now() - s->bar.t0 >= 1.0)
    progress_update(&s->bar, s->units_done);
}

/* An output buffer like q: same dtype, layout and shape, contiguous. */
static void alloc_out(run_state *s) {
  const stsa_tensor *q = &s->qkv.t[0];
  size_t es = stsa_dtype_size(q->dtype);
  s->out_bytes = (size_t)(s->B * s->N * s->H * s->D) * es;
  s->out_data = aligned_alloc(64, (s->out_bytes + 63) / 64 * 64);
  if (!s->out_data)
    cli_die("out of memory for the output (%zu bytes)", s->out_bytes);
  s->out = *q; /* q's strides describe a contiguous tensor in its layout */
  s->out.data = s->out_data;
}

/* Dense attention head by head into out; returns the timed total in ms.
 * One untimed warm-up call on head 0 first (threads started, caches warm). */
static double run_dense_heads(run_state *s, const stsa_tensor *out, double *ms) {
  const stsa_tensor *t = s->qkv.t;
  double total = 0;
  for (int64_t h = -1; h < s->H; h++) {
    const int64_t hh = h < 0 ? 0 : h;
    stsa_tensor q = head_view(&t[0], hh), k = head_view(&t[1], hh),
                v = head_view(&t[2], hh), o = head_view(out, hh);
    double t0 = cli_now();
    check_head(s, stsa_attention(s->ctx, &q, &k, &v, &o, NULL), hh, "dense attention");
    double dt = (cli_now() - t0) * 1e3;
    if (h < 0) {
      s->warmup_ms += dt;
      continue;
    }
    ms[h] = dt;
    total += dt;
    tick(s);
  }
  return total;
}

static void run_mode_dense(run_state *s) {
  double *ms = malloc(sizeof *ms * (size_t)s->H);
  if (!ms)
    cli_die("out of memory");
  s->compute_ms = run_dense_heads(s, &s->out, ms);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++)
      s->res[b * s->H + h] = (head_result){.kind = -1, .density = 1.0, .ms = ms[h]};
  free(ms);
}

static void run_mode_sparse(run_state *s) {
  double t0 = cli_now();
  run_session_windows(s->ctx, &s->cfg, &s->win);
  s->have_windows = 1;
  stsa_order qo, ko;
  stsa_mask *mask = run_kind_mask(s->ctx, &s->cfg, s->o.head_kind, &qo, &ko);
  const stsa_mask *masks[1] = {mask};
  /* the session's tile sizes, so the plan is the session's plan */
  stsa_plan_desc desc = {s->N,
                         s->N,
                         1,
                         masks,
                         &s->cfg.geometry,
                         qo,
                         ko,
                         s->win.q_tile,
                         s->win.kv_tile,
                         STSA_PLAN_DEFAULT,
                         NULL};
  stsa_plan *plan;
  cli_check(stsa_plan_build(s->ctx, &desc, &plan), s->ctx, "building the plan");
  stsa_plan_stats st;
  cli_check(stsa_plan_get_stats(plan, &st), NULL, "plan statistics");
  const double density = (double)st.pairs_kept / (double)st.pairs_total;
  s->setup_ms = (cli_now() - t0) * 1e3;
  for (int64_t h = -1; h < s->H; h++) { /* h = -1: untimed warm-up on head 0 */
    const int64_t hh = h < 0 ? 0 : h;
    const stsa_tensor *t = s->qkv.t;
    stsa_tensor q = head_view(&t[0], hh), k = head_view(&t[1], hh),
                v = head_view(&t[2], hh), o = head_view(&s->out, hh);
    double t1 = cli_now();
    check_head(s, stsa_sparse_attention(s->ctx, plan, &q, &k, &v, &o, NULL), hh,
               "block-sparse attention");
    double ms = (cli_now() - t1) * 1e3;
    if (h < 0) {
      s->warmup_ms += ms;
      continue;
    }
    s->compute_ms += ms;
    for (int64_t b = 0; b < s->B; b++)
      s->res[b * s->H + h] =
          (head_result){.kind = (int)s->o.head_kind, .density = density, .ms = ms};
    tick(s);
  }
  stsa_plan_free(plan);
  stsa_mask_free(mask);
}

/* One SVG call per head on a one-head session: the session's per-head work
 * (profiling on rows drawn from layer, step and batch entry; one plan per
 * kind) is the same as in an H-head call. */
static void run_mode_svg(run_state *s) {
  double t0 = cli_now();
  stsa_svg_config one = s->cfg;
  one.heads = 1;
  stsa_svg *svg;
  cli_check(stsa_svg_create(s->ctx, &one, &svg), s->ctx, "creating the SVG session");
  cli_check(stsa_svg_get_windows(svg, &s->win), NULL, "SVG windows");
  s->have_windows = 1;
  s->setup_ms = (cli_now() - t0) * 1e3;
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)s->B);
  float *mse = malloc(sizeof *mse * (size_t)(2 * s->B));
  if (!kinds || !mse)
    cli_die("out of memory");
  for (int64_t h = -1; h < s->H; h++) { /* h = -1: untimed warm-up on head 0 */
    const int64_t hh = h < 0 ? 0 : h;
    const stsa_tensor *t = s->qkv.t;
    stsa_tensor q = head_view(&t[0], hh), k = head_view(&t[1], hh),
                v = head_view(&t[2], hh), o = head_view(&s->out, hh);
    stsa_svg_report rep = {0};
    rep.kinds = kinds, rep.mse_spatial = mse, rep.mse_temporal = mse + s->B;
    double t1 = cli_now();
    check_head(s, stsa_svg_attention(svg, s->layer, s->step, &q, &k, &v, &o, &rep), hh,
               "SVG attention");
    double ms = (cli_now() - t1) * 1e3;
    if (h < 0) {
      s->warmup_ms += ms;
      continue;
    }
    s->compute_ms += ms;
    s->svg_dense_call = rep.dense;
    s->profile_ms += rep.profile_ms;
    s->attention_ms += rep.attention_ms;
    for (int64_t b = 0; b < s->B; b++) {
      head_result *r = &s->res[b * s->H + h];
      int spatial = kinds[b] == STSA_HEAD_SPATIAL;
      *r = (head_result){.kind = rep.dense ? -1 : (int)kinds[b],
                         .has_mse = !rep.dense,
                         .mse_spatial = mse[b],
                         .mse_temporal = mse[s->B + b],
                         .density = rep.dense ? rep.density
                                    : spatial ? s->win.density_spatial
                                              : s->win.density_temporal,
                         .ms = ms};
    }
    tick(s);
  }
  free(kinds);
  free(mse);
  stsa_svg_free(svg);
}

/* Relative L2 and cosine of head (b, h) of out against dense, over S x D. */
static void compare_head(const stsa_tensor *out, const stsa_tensor *ref, int64_t b,
                         int64_t h, float *row_o, float *row_r, head_result *r) {
  const int64_t S = out->shape[1], D = out->shape[3];
  const size_t eo = stsa_dtype_size(out->dtype), er = stsa_dtype_size(ref->dtype);
  double diff = 0, nr = 0, no = 0, dot = 0;
  for (int64_t i = 0; i < S; i++) {
    size_t oo = (size_t)(b * out->stride[0] + i * out->stride[1] + h * out->stride[2]);
    size_t orf = (size_t)(b * ref->stride[0] + i * ref->stride[1] + h * ref->stride[2]);
    stsa_load_row_f32((const char *)out->data + oo * eo, out->dtype, 1, D, row_o);
    stsa_load_row_f32((const char *)ref->data + orf * er, ref->dtype, 1, D, row_r);
    for (int64_t d = 0; d < D; d++) {
      double x = row_o[d], y = row_r[d];
      diff += (x - y) * (x - y);
      nr += y * y;
      no += x * x;
      dot += x * y;
    }
  }
  r->rel_l2 = nr > 0 ? sqrt(diff / nr) : (diff > 0 ? INFINITY : 0.0);
  r->cosine = no > 0 && nr > 0 ? dot / sqrt(no * nr) : (no == nr ? 1.0 : 0.0);
}

/* Dense attention into an f32 [B, N, H, D] buffer, then per-head errors of
 * the output as written (in q's dtype) against it. */
static void compare_dense(run_state *s) {
  size_t n = (size_t)(s->B * s->N * s->H * s->D);
  float *ref_data = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  float *rows = malloc(sizeof *rows * (size_t)(2 * s->D));
  double *ms = malloc(sizeof *ms * (size_t)s->H);
  if (!ref_data || !rows || !ms)
    cli_die("out of memory for the dense reference (%zu floats)", n);
  stsa_tensor ref = stsa_tensor_bshd(ref_data, STSA_F32, s->B, s->N, s->H, s->D);
  s->dense_ms = run_dense_heads(s, &ref, ms);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++) {
      head_result *r = &s->res[b * s->H + h];
      compare_head(&s->out, &ref, b, h, rows, rows + s->D, r);
      r->warn = !(r->rel_l2 <= s->o.warn_rel_l2); /* NaN warns too */
      s->n_warn += r->warn;
    }
  free(ref_data);
  free(rows);
  free(ms);
}

/* ---- the report ----------------------------------------------------------- */

/* Kind of head result r as the report and the summary name it. */
static const char *kind_name(const head_result *r) {
  return r->kind < 0 ? "dense" : stsa_head_kind_name((stsa_head_kind)r->kind);
}

/* JSON has no NaN or Inf: such values become null. */
static json_t *jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static const char *text_pos_name(stsa_text_pos p) {
  return p == STSA_TEXT_PREFIX ? "prefix" : p == STSA_TEXT_SUFFIX ? "suffix" : "none";
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
  if (in->in) {
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
  if (s->cfg_note[0])
    json_object_set_new(j, "note", json_string(s->cfg_note));
  return j;
}

static json_t *report_heads(const run_state *s) {
  json_t *arr = json_array();
  for (int64_t i = 0; i < s->B * s->H; i++) {
    const head_result *r = &s->res[i];
    json_t *j = json_pack("{s:I, s:I, s:s}", "batch", (json_int_t)(i / s->H), "head",
                          (json_int_t)(i % s->H), "kind", kind_name(r));
    json_object_set_new(j, "mse_spatial",
                        r->has_mse ? jreal(r->mse_spatial) : json_null());
    json_object_set_new(j, "mse_temporal",
                        r->has_mse ? jreal(r->mse_temporal) : json_null());
    json_object_set_new(j, "density", jreal(r->density));
    json_object_set_new(j, "time_ms", jreal(r->ms));
    if (s->o.compare_dense) {
      json_object_set_new(j, "rel_l2", jreal(r->rel_l2));
      json_object_set_new(j, "cosine", jreal(r->cosine));
      json_object_set_new(j, "warning", json_boolean(r->warn));
    }
    json_array_append_new(arr, j);
  }
  return arr;
}

static double mean_density(const run_state *s) {
  double sum = 0;
  for (int64_t i = 0; i < s->B * s->H; i++)
    sum += s->res[i].density;
  return sum / (double)(s->B * s->H);
}

static json_t *report_timing(const run_state *s) {
  json_t *j = json_object();
  json_object_set_new(j, "load_ms", jreal(s->load_ms));
  json_object_set_new(j, "setup_ms", jreal(s->setup_ms));
  json_object_set_new(j, "compute_ms", jreal(s->compute_ms));
  json_object_set_new(j, "warmup_ms", jreal(s->warmup_ms));
  if (s->o.mode == MODE_SVG) {
    json_object_set_new(j, "profile_ms", jreal(s->profile_ms));
    json_object_set_new(j, "attention_ms", jreal(s->attention_ms));
  }
  if (s->o.compare_dense) {
    json_object_set_new(j, "dense_ms", jreal(s->dense_ms));
    json_object_set_new(j, "speedup_vs_dense", jreal(s->dense_ms / s->compute_ms));
  }
  return j;
}

/* The text of the warning about head i (rel L2 above --warn-rel-l2). */
static void warning_text(const run_state *s, int64_t i, char *buf, size_t len) {
  const head_result *r = &s->res[i];
  snprintf(buf, len,
           "batch %lld head %lld (%s): relative L2 %.4g against dense exceeds "
           "--warn-rel-l2 %g (cosine %.4f)",
           (long long)(i / s->H), (long long)(i % s->H), kind_name(r), r->rel_l2,
           s->o.warn_rel_l2, r->cosine);
}

static json_t *report_warnings(const run_state *s) {
  json_t *arr = json_array();
  for (int64_t i = 0; i < s->B * s->H; i++)
    if (s->res[i].warn) {
      char w[256];
      warning_text(s, i, w, sizeof w);
      json_array_append_new(arr, json_string(w));
    }
  return arr;
}

/* The whole report as a JSON string (malloc'd), before anything is written. */
static char *build_report(const run_state *s) {
  int64_t threads = 0;
  stsa_ctx_get(s->ctx, STSA_PARAM_THREADS, &threads);
  json_t *root = json_object();
  json_object_set_new(root, "tool", json_string("stsa run"));
  json_object_set_new(root, "version", json_string(stsa_version_string()));
  json_object_set_new(root, "mode", json_string(MODE_NAME[s->o.mode]));
  if (s->o.mode == MODE_SPARSE)
    json_object_set_new(root, "head_kind",
                        json_string(stsa_head_kind_name(s->o.head_kind)));
  json_object_set_new(root, "preset",
                      s->o.geo.preset ? json_string(s->o.geo.preset) : json_null());
  json_object_set_new(root, "input", report_input(s));
  json_object_set_new(root, "geometry", report_geometry(s));
  json_object_set_new(root, "layer",
                      s->layer >= 0 ? json_integer(s->layer) : json_null());
  json_object_set_new(root, "step", s->step >= 0 ? json_integer(s->step) : json_null());
  if (s->o.mode == MODE_SVG)
    json_object_set_new(root, "layer_step_from",
                        json_string(s->o.layer < 0 && s->o.step < 0
                                        ? "default: first sparse call of the policy"
                                        : "flags"));
  json_object_set_new(root, "dense_call",
                      json_boolean(s->o.mode == MODE_DENSE || s->svg_dense_call));
  json_object_set_new(root, "density_target", jreal(s->cfg.density));
  json_object_set_new(root, "density", jreal(mean_density(s)));
  json_object_set_new(root, "svg", s->o.mode == MODE_DENSE ? json_null() : report_svg(s));
  json_object_set_new(root, "backend",
                      json_string(stsa_backend_name(stsa_ctx_backend(s->ctx))));
  json_object_set_new(root, "threads", json_integer(threads));
  json_object_set_new(root, "compare_dense", json_boolean(s->o.compare_dense));
  if (s->o.compare_dense)
    json_object_set_new(root, "warn_rel_l2", jreal(s->o.warn_rel_l2));
  json_object_set_new(root, "warnings", report_warnings(s));
  json_object_set_new(root, "per_head", report_heads(s));
  json_object_set_new(root, "timing", report_timing(s));
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
  json_decref(root);
  if (!text)
    cli_die("out of memory formatting the report");
  return text;
}

/* ---- writing --------------------------------------------------------------- */

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
  stsa_st_meta meta[3] = {{"stsa_mode", MODE_NAME[s->o.mode]},
                          {"stsa_layout", run_layout_name(s->o.in.layout)},
                          {"stsa_geometry", geo}};
  return stsa_st_write_meta(path, &t, 1, meta, 3, err, err_len);
}

static stsa_status write_report(const char *path, void *arg, char *err, size_t err_len) {
  const char *report = arg;
  stsa_io_chunk chunks[2] = {{report, strlen(report)}, {"\n", 1}};
  return stsa_io_atomic_write(path, chunks, 2, err, err_len);
}

/* --out and --report as outputs (validated by cli_outputs_prepare). */
static int output_list(const run_state *s, cli_output *outs) {
  int n = 0;
  if (s->o.out)
    outs[n++] = (cli_output){.flag = "--out", .path = s->o.out};
  if (s->o.report)
    outs[n++] = (cli_output){.flag = "--report", .path = s->o.report};
  return n;
}

/* Both files are first written in full under staging names next to their
 * targets and only then renamed over them together, so a failed write (a
 * full disk) or a signal leaves --out and --report exactly as they were. */
static void write_files(run_state *s, cli_output *outs, int n, char *report) {
  int k = 0;
  if (s->o.out)
    cli_output_stage(outs, n, k++, write_out, s);
  if (s->o.report)
    cli_output_stage(outs, n, k++, write_report, report);
  cli_outputs_commit(outs, n);
  for (int i = 0; i < n; i++) {
    free(outs[i].staging);
    free(outs[i].backup);
  }
}

static void print_summary(const run_state *s) {
  const stsa_geometry *g = &s->cfg.geometry;
  printf(
      "stsa run %s: N = %lld (%lld x %lld x %lld video + %lld text), B = %lld, H = %lld, "
      "D = %lld, %s\n",
      MODE_NAME[s->o.mode], (long long)s->N, (long long)g->frames, (long long)g->height,
      (long long)g->width, (long long)g->text, (long long)s->B, (long long)s->H,
      (long long)s->D, stsa_dtype_name(s->qkv.t[0].dtype));
  int spatial = 0, temporal = 0, dense = 0;
  for (int64_t i = 0; i < s->B * s->H; i++) {
    spatial += s->res[i].kind == STSA_HEAD_SPATIAL;
    temporal += s->res[i].kind == STSA_HEAD_TEMPORAL;
    dense += s->res[i].kind < 0;
  }
  if (s->o.mode == MODE_SVG)
    printf("  layer %lld step %lld: %s call\n", (long long)s->layer, (long long)s->step,
           s->svg_dense_call ? "dense (by policy)" : "sparse");
  printf("  kinds of the %lld (batch, head) pairs: %d spatial, %d temporal, %d dense\n",
         (long long)(s->B * s->H), spatial, temporal, dense);
  printf("  density %.4f (target %.2f), attention %.2f ms (after one untimed warm-up "
         "call)\n",
         mean_density(s), s->cfg.density, s->compute_ms);
  if (s->o.compare_dense) {
    double worst = 0, cmin = 1, ratio = s->dense_ms / s->compute_ms;
    for (int64_t i = 0; i < s->B * s->H; i++) {
      worst = fmax(worst, s->res[i].rel_l2);
      cmin = fmin(cmin, s->res[i].cosine);
    }
    printf("  dense reference %.2f ms: %s %.2fx %s than dense\n", s->dense_ms,
           MODE_NAME[s->o.mode], ratio >= 1 ? ratio : 1 / ratio,
           ratio >= 1 ? "faster" : "slower");
    printf(
        "  against dense: worst head rel L2 %.4g, lowest cosine %.6f; %d head(s) above "
        "--warn-rel-l2 %g\n",
        worst, cmin, s->n_warn, s->o.warn_rel_l2);
  }
}

/* Warnings go to stderr even with --quiet. */
static void print_warnings(const run_state *s) {
  for (int64_t i = 0; i < s->B * s->H; i++)
    if (s->res[i].warn) {
      char w[256];
      warning_text(s, i, w, sizeof w);
      fprintf(stderr, "stsa: warning: %s\n", w);
    }
}

/* Geometry and settings from the tensors and flags; dies on inconsistency. */
static void setup(run_state *s) {
  const stsa_tensor *q = &s->qkv.t[0];
  s->B = q->shape[0], s->N = q->shape[1], s->H = q->shape[2], s->D = q->shape[3];
  run_resolve_config(&s->o.geo, s->H, s->D, &s->cfg, s->cfg_note, sizeof s->cfg_note);
  run_check_tokens(&s->cfg, &s->qkv, s->o.in.layout);
  s->layer =
      s->o.mode == MODE_SVG ? (s->o.layer >= 0 ? s->o.layer : s->cfg.dense_layers) : -1;
  s->step =
      s->o.mode == MODE_SVG ? (s->o.step >= 0 ? s->o.step : s->cfg.dense_steps) : -1;
  if (s->o.out && ends_with(s->o.out, ".npy") && q->dtype == STSA_BF16)
    cli_die("--out %s: .npy has no bfloat16 type; q is bf16, write .safetensors instead",
            s->o.out);
  s->res = calloc((size_t)(s->B * s->H), sizeof *s->res);
  if (!s->res)
    cli_die("out of memory");
  alloc_out(s);
}

int cmd_run(int argc, char **argv) {
  cli_signals_start(); /* before any thread exists */
  run_state s;
  memset(&s, 0, sizeof s);
  parse_run(argc, argv, &s.o);
  double t_start = cli_now();
  run_load_qkv(&s.o.in, &s.qkv);
  s.load_ms = (cli_now() - t_start) * 1e3;
  setup(&s);
  /* every output target is checked before the (long) computation */
  cli_output outs[2];
  const int n_out = output_list(&s, outs);
  char in_desc[3][512];
  const char *in_names[3];
  for (int i = 0; i < s.qkv.n_ids; i++) {
    snprintf(in_desc[i], sizeof in_desc[i], "%s %s", s.qkv.id_names[i],
             s.o.in.in ? s.o.in.in : s.o.in.npy[i]);
    in_names[i] = in_desc[i];
  }
  cli_outputs_prepare(outs, n_out, s.qkv.ids, in_names, s.qkv.n_ids);
  s.ctx = cli_ctx_create();
  if (s.o.threads)
    cli_check(stsa_ctx_set(s.ctx, STSA_PARAM_THREADS, s.o.threads), s.ctx, "--threads");

  progress_start(&s.bar, "stsa run", s.H * (s.o.compare_dense ? 2 : 1), s.o.quiet);
  if (s.o.mode == MODE_DENSE)
    run_mode_dense(&s);
  else if (s.o.mode == MODE_SPARSE)
    run_mode_sparse(&s);
  else
    run_mode_svg(&s);
  if (s.o.compare_dense)
    compare_dense(&s);
  progress_finish(&s.bar);

  char *report = s.o.report ? build_report(&s) : NULL;
  write_files(&s, outs, n_out, report);
  if (!s.o.quiet)
    print_summary(&s);
  fflush(stdout);
  print_warnings(&s); /* last, where they are seen */
  free(report);
  free(s.res);
  free(s.out_data);
  run_free_qkv(&s.qkv);
  stsa_ctx_free(s.ctx);
  return 0;
}
