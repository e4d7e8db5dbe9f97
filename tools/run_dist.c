/*
 * run_dist.c — `stsa run --dist` (run_state.h): the steps of cmd_run.c over
 * the ranks of an MPI job, with libstsa_mpi (include/stsa_mpi.h).
 *
 * Every rank maps the input itself and takes its shard of the tokens, rank
 * r of P the tokens [floor(r N / P), floor((r + 1) N / P)), as views on the
 * mapped data. The mode runs as one distributed call over every head
 * (stsa_dist_attention; stsa_dist_sparse_attention with the plan of the
 * whole sequence; the distributed SVG session), after one untimed warm-up
 * call on head 0 as in one process; --compare-dense is distributed too, its
 * per-head sums added up on rank 0. Rank 0 then gathers the output shards
 * (MPI_Gatherv of token rows in out's dtype) and each rank's times, and
 * validates, stages and commits --out and --report as one process does
 * (they gain a "dist" object); only rank 0 prints.
 *
 * The ranks meet (dist_cli.h) after parsing, where they also compare their
 * options, after loading, before writing and after writing; the library's
 * calls agree on their own errors in between. So a failure on any rank
 * stops every rank with its message before anything is written.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_ran.h"
#include "cli_util.h"
#include "dist_cli.h"
#include "run_report.h"
#include "run_state.h"

#ifndef STSA_HAVE_MPI

void run_dist(run_state *s) {
  (void)s;
  cli_die("--dist: this stsa was built without MPI");
}

#else /* STSA_HAVE_MPI */

#include "stsa_mpi.h"

/* ---- the options every rank must share ------------------------------------- */

typedef struct desc_buf {
  char *p;
  size_t len, used;
} desc_buf;

static void add(desc_buf *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(desc_buf *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (d->used < d->len)
    d->used += (size_t)vsnprintf(d->p + d->used, d->len - d->used, fmt, ap);
  va_end(ap);
  if (d->used < d->len)
    d->used += (size_t)snprintf(d->p + d->used, d->len - d->used, "\n");
}

/* An option that is negative (or NULL) when not given. */
static void add_i64(desc_buf *d, const char *name, int64_t v) {
  if (v < 0)
    add(d, "%s (not given)", name);
  else
    add(d, "%s %lld", name, (long long)v);
}

/* In the fewest digits that read back as v, as it was most likely typed. */
static void add_real(desc_buf *d, const char *name, double v) {
  int digits = 1;
  char text[32];
  do
    snprintf(text, sizeof text, "%.*g", digits, v);
  while (strtod(text, NULL) != v && ++digits < 17);
  if (v < 0)
    add(d, "%s (not given)", name);
  else
    add(d, "%s %.*g", name, digits, v);
}

static void add_str(desc_buf *d, const char *name, const char *v) {
  if (v)
    add(d, "%s %s", name, v);
  else
    add(d, "%s (not given)", name);
}

/* Every parsed option but the input paths (each rank may read its own copy
 * of the input), one per line. */
static void describe_options(const run_opts *o, char *buf, size_t len) {
  desc_buf d = {buf, len, 0};
  char dist[32];
  cli_dist_name(&o->dist, dist, sizeof dist);
  add(&d, "--dist %s", dist);
  add(&d, "--mode %s", RUN_MODE_NAMES[o->mode]);
  add(&d, "--head-kind %s", run_kind_name(o->head_kind));
  add_i64(&d, "--layer", o->layer);
  add_i64(&d, "--step", o->step);
  add(&d, "--compare-dense %s", o->compare_dense ? "given" : "not given");
  add_real(&d, "--warn-rel-l2", o->warn_rel_l2);
  add_real(&d, "--max-error", o->max_error);
  add_real(&d, "--top-p", o->top_p);
  add_i64(&d, "--q-clusters", o->q_clusters);
  add_i64(&d, "--kv-clusters", o->kv_clusters);
  add_i64(&d, "--threads", o->threads ? o->threads : -1);
  add_str(&d, "--out", o->out);
  add_str(&d, "--report", o->report);
  add(&d, "--quiet %s", o->quiet ? "given" : "not given");
  const run_input_opts *in = &o->in;
  add(&d, "input %s", in->in ? "--in FILE" : "--in-q, --in-k, --in-v FILE.npy");
  for (int i = 0; in->in && i < 3; i++)
    add(&d, "--%c %s", "qkv"[i], in -> names[i]);
  add(&d, "--layout %s", in->layout < 0 ? "(not given)" : run_layout_name(in->layout));
  const run_geo_opts *g = &o->geo;
  add_str(&d, "--preset", g->preset);
  add_i64(&d, "--frames", g->frames);
  add_i64(&d, "--height", g->height);
  add_i64(&d, "--width", g->width);
  add_i64(&d, "--text", g->text);
  add_i64(&d, "--text-real", g->text_real);
  add_i64(&d, "--text-pos", g->text_pos);
  add_real(&d, "--density", g->density);
  add_i64(&d, "--sample-rows", g->sample_rows);
  add_i64(&d, "--sink-frames", g->sink_frames);
  add_i64(&d, "--q-tile", g->q_tile);
  add_i64(&d, "--kv-tile", g->kv_tile);
}

/* What every rank must have read: each tensor's dtype and shape. */
static void describe_inputs(const run_qkv *x, char *buf, size_t len) {
  desc_buf d = {buf, len, 0};
  for (int i = 0; i < 3; i++) {
    const int64_t *n = x->t[i].shape;
    add(&d, "%c: %s [B,S,H,D] = [%lld, %lld, %lld, %lld]", "qkv"[i],
        stsa_dtype_name(x->t[i].dtype), (long long)n[0], (long long)n[1], (long long)n[2],
        (long long)n[3]);
  }
}

/* ---- one rank's part --------------------------------------------------------- */

/* What a rank's local attention ran in a distributed call: the last call its
 * context recorded (stsa_ctx_last_run), taken only when the rank computed
 * heads of that call (else it would be an earlier call's). known: a
 * CLI_RAN_*. */
typedef struct rank_ran {
  stsa_run_info info;
  int known;
} rank_ran;

typedef struct dist_run {
  run_state *s;
  stsa_dist *dist;
  int rank, P;
  int64_t *offs;        /* [P + 1]: the first token of each rank's shard */
  stsa_tensor q, k, v;  /* this rank's shards: views on the mapped input */
  stsa_tensor out;      /* its output shard, [B, S_r, H, D] in q's dtype */
  stsa_dist_report rep; /* of the mode's call */
  run_dist_info info;   /* rank 0 */
  double *all;          /* rank 0: [4 * P], every rank's figures (gather_times) */
  rank_ran mine[2];     /* the mode's call, the dense reference's (--compare-dense) */
  rank_ran *all_ran;    /* rank 0: [2 * P], every rank's (gather_ran) */
} dist_run;

/* mine: what this rank's part of the call just made ran (report: of that call). */
static void take_ran(dist_run *r, rank_ran *mine, const stsa_dist_report *report) {
  mine->known = report->local_heads <= 0               ? CLI_RAN_NONE
                : cli_last_run(r->s->ctx, &mine->info) ? CLI_RAN_KNOWN
                                                       : CLI_RAN_UNKNOWN;
}

static void *alloc_or_die(size_t bytes, const char *what) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p)
    cli_die("out of memory for %s (%zu bytes)", what, bytes);
  return p;
}

/* This rank's shard of the loaded tensors, and its output buffer. */
static void take_shard(dist_run *r) {
  const run_state *s = r->s;
  r->offs = cli_dist_shards(s->N);
  if (r->rank == 0) { /* room for gather_times, which may not fail on one rank */
    r->all = malloc(sizeof *r->all * 4 * (size_t)r->P);
    r->info.comm_ms = malloc(sizeof(double) * 2 * (size_t)r->P);
    r->info.tokens = malloc(sizeof(int64_t) * 3 * (size_t)r->P);
    r->all_ran = malloc(sizeof *r->all_ran * 2 * (size_t)r->P);
    if (!r->all || !r->info.comm_ms || !r->info.tokens || !r->all_ran)
      cli_die("out of memory");
    run_ran_alloc(&r->s->ran, r->P);
    if (r->s->o.compare_dense)
      run_ran_alloc(&r->s->dense_ran, r->P);
  }
  const int64_t off = r->offs[r->rank], len = r->offs[r->rank + 1] - off;
  r->q = cli_shard_view(&s->qkv.t[0], off, len);
  r->k = cli_shard_view(&s->qkv.t[1], off, len);
  r->v = cli_shard_view(&s->qkv.t[2], off, len);
  const stsa_dtype dt = s->qkv.t[0].dtype;
  const size_t bytes = (size_t)(s->B * len * s->H * s->D) * stsa_dtype_size(dt);
  r->out = stsa_tensor_bshd(alloc_or_die(bytes, "the output shard"), dt, s->B, len, s->H,
                            s->D);
}

/* The status of a distributed call, which every rank shares: a non-finite
 * input is named at its place in the whole tensors by the rank that holds
 * it (the lowest such rank), anything else with the library's message. */
static void check_call(dist_run *r, stsa_status st, const char *what) {
  if (st == STSA_ERR_NONFINITE) {
    const run_state *s = r->s;
    const stsa_tensor shard[3] = {r->q, r->k, r->v};
    char where[256], msg[400] = "";
    const int found = run_find_nonfinite(shard, s->qkv.label, 0, s->H, r->offs[r->rank],
                                         where, sizeof where);
    if (found)
      snprintf(msg, sizeof msg, "%s failed: %s", what, where);
    cli_dist_agree(found ? st : STSA_OK, msg);
  }
  cli_dist_check(st, what);
}

/* The mode's call and its warm-up on head 0 (views of the shards). */
typedef stsa_status (*dist_call)(dist_run *r, void *arg, const stsa_tensor *q,
                                 const stsa_tensor *k, const stsa_tensor *v,
                                 const stsa_tensor *out, int warm_up);

/* Runs call untimed on head 0, then timed on every head; returns the ms. */
static double warm_then_time(dist_run *r, dist_call call, void *arg,
                             const stsa_tensor *out, const char *what) {
  const stsa_tensor q0 = run_head_view(&r->q, 0), k0 = run_head_view(&r->k, 0),
                    v0 = run_head_view(&r->v, 0), o0 = run_head_view(out, 0);
  double t0 = cli_now();
  check_call(r, call(r, arg, &q0, &k0, &v0, &o0, 1), what);
  r->s->warmup_ms += (cli_now() - t0) * 1e3;
  t0 = cli_now();
  check_call(r, call(r, arg, &r->q, &r->k, &r->v, out, 0), what);
  const double ms = (cli_now() - t0) * 1e3;
  run_tick(r->s);
  return ms;
}

/* ---- the modes ----------------------------------------------------------------- */

/* arg: the report to fill (NULL: none). */
static stsa_status call_dense(dist_run *r, void *arg, const stsa_tensor *q,
                              const stsa_tensor *k, const stsa_tensor *v,
                              const stsa_tensor *out, int warm_up) {
  return stsa_dist_attention(r->dist, q, k, v, out, NULL, warm_up ? NULL : arg);
}

static void mode_dense(dist_run *r) {
  run_state *s = r->s;
  s->compute_ms = warm_then_time(r, call_dense, &r->rep, &r->out, "dense attention");
  for (int64_t i = 0; i < s->B * s->H; i++)
    s->res[i] = (head_result){.kind = RUN_KIND_DENSE, .density = 1.0, .ms = NAN};
}

/* The plan of the whole sequence: every head with one mask; desc[1] is the
 * one-head plan of the warm-up. */
typedef struct sparse_arg {
  stsa_plan_desc desc[2];
  stsa_dist_report *rep;
} sparse_arg;

static stsa_status call_sparse(dist_run *r, void *arg, const stsa_tensor *q,
                               const stsa_tensor *k, const stsa_tensor *v,
                               const stsa_tensor *out, int warm_up) {
  sparse_arg *a = arg;
  return stsa_dist_sparse_attention(r->dist, &a->desc[warm_up], q, k, v, out, NULL,
                                    warm_up ? NULL : a->rep);
}

static void mode_sparse(dist_run *r) {
  run_state *s = r->s;
  double t0 = cli_now();
  const stsa_mask *mask1[1];
  sparse_arg a = {.rep = &r->rep};
  stsa_plan *plan;
  double density; /* of one head's plan, as one process reports it */
  stsa_mask *mask = run_sparse_plan(s, mask1, &a.desc[1], &plan, &density);
  stsa_plan_free(plan);
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)s->H);
  if (!masks)
    cli_die("out of memory");
  for (int64_t h = 0; h < s->H; h++)
    masks[h] = mask;
  a.desc[0] = a.desc[1]; /* every head with that mask */
  a.desc[0].heads = s->H;
  a.desc[0].masks = masks;
  s->setup_ms = (cli_now() - t0) * 1e3;
  cli_dist_checkpoint(); /* the plan was built on every rank */
  s->compute_ms = warm_then_time(r, call_sparse, &a, &r->out, "block-sparse attention");
  for (int64_t i = 0; i < s->B * s->H; i++)
    s->res[i] = (head_result){.kind = s->o.head_kind, .density = density, .ms = NAN};
  free(masks);
  stsa_mask_free(mask);
}

/* sessions[1] is the one-head session of the warm-up. */
typedef struct svg_arg {
  stsa_dist_svg *sessions[2];
  int64_t layer, step;
  stsa_svg_report *srep;
  stsa_dist_report *rep;
} svg_arg;

static stsa_status call_svg(dist_run *r, void *arg, const stsa_tensor *q,
                            const stsa_tensor *k, const stsa_tensor *v,
                            const stsa_tensor *out, int warm_up) {
  (void)r;
  svg_arg *a = arg;
  return stsa_dist_svg_attention(a->sessions[warm_up], a->layer, a->step, q, k, v, out,
                                 warm_up ? NULL : a->srep, warm_up ? NULL : a->rep);
}

static void mode_svg(dist_run *r) {
  run_state *s = r->s;
  double t0 = cli_now();
  run_session_windows(s->ctx, &s->cfg, &s->win);
  s->have_windows = 1;
  cli_dist_checkpoint();
  stsa_svg_config one = s->cfg;
  one.heads = 1;
  svg_arg a = {.layer = s->layer, .step = s->step, .rep = &r->rep};
  stsa_svg_config cfg = s->cfg; /* the budget of --max-error, for every call */
  if (s->o.max_error >= 0)
    cfg.max_rel_error = one.max_rel_error = s->o.max_error;
  cli_dist_check(stsa_dist_svg_create(r->dist, &cfg, &a.sessions[0]),
                 "creating the SVG session");
  cli_dist_check(stsa_dist_svg_create(r->dist, &one, &a.sessions[1]),
                 "creating the SVG session");
  s->setup_ms = (cli_now() - t0) * 1e3;
  const int64_t BH = s->B * s->H;
  run_svg_arrays arr;
  run_svg_arrays_alloc(&arr, BH);
  stsa_svg_report srep = run_svg_report_of(&arr, BH);
  /* every head's error bound, density, budget action, top-p and auto's
   * candidates: gathered from the ranks that ran it (NaN bounds on ring
   * layouts, which profile no bound) */
  a.srep = &srep;
  cli_dist_checkpoint();
  s->compute_ms = warm_then_time(r, call_svg, &a, &r->out, "SVG attention");
  s->svg_dense_call = srep.dense;
  s->profile_ms = srep.profile_ms; /* rank 0's, as the times of the summary */
  s->attention_ms = srep.attention_ms;
  s->cluster_ms = srep.cluster_ms;
  s->cold_calls = srep.cold;
  s->q_clusters = srep.q_clusters, s->kv_clusters = srep.kv_clusters;
  for (int64_t i = 0; i < BH; i++)
    s->res[i] = run_svg_result(&srep, i, &s->win, NAN);
  run_svg_arrays_free(&arr);
  stsa_dist_svg_free(a.sessions[1]);
  stsa_dist_svg_free(a.sessions[0]);
}

/* --compare-dense: dense attention of the shards (distributed) into f32,
 * each rank's per-head sums added up on rank 0. */
static void compare_dense(dist_run *r) {
  run_state *s = r->s;
  const int64_t len = r->out.shape[1], BH = s->B * s->H;
  float *ref_data = alloc_or_die((size_t)(s->B * len * s->H * s->D) * sizeof(float),
                                 "the dense reference");
  float *rows = malloc(sizeof *rows * (size_t)(2 * s->D));
  double *sums = malloc(sizeof *sums * (size_t)(8 * BH));
  if (!rows || !sums)
    cli_die("out of memory");
  cli_dist_checkpoint();
  const stsa_tensor ref = stsa_tensor_bshd(ref_data, STSA_F32, s->B, len, s->H, s->D);
  stsa_dist_report rep = {.size = sizeof rep};
  s->dense_ms = warm_then_time(r, call_dense, &rep, &ref, "dense attention");
  take_ran(r, &r->mine[1], &rep);
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++)
      run_compare_sums(&r->out, &ref, b, h, rows, rows + s->D, sums + 4 * (b * s->H + h));
  cli_dist_mpi_check(MPI_Reduce(sums, sums + 4 * BH, (int)(4 * BH), MPI_DOUBLE, MPI_SUM,
                                0, cli_dist_comm()),
                     "MPI_Reduce (the sums of --compare-dense)");
  for (int64_t i = 0; r->rank == 0 && i < BH; i++) {
    run_compare_finish(sums + 4 * (BH + i), s->o.warn_rel_l2, &s->res[i]);
    s->n_warn += s->res[i].warn;
  }
  free(ref_data);
  free(rows);
  free(sums);
}

/* ---- gathering on rank 0 --------------------------------------------------------- */

/* The output shards into rank 0's whole output, as rows of one token's H x D
 * values: straight into place when every shard is one contiguous piece of it
 * (B = 1 and a token-major layout), else through a staging buffer. */
static void gather_output(dist_run *r) {
  run_state *s = r->s;
  const stsa_dtype dt = s->qkv.t[0].dtype;
  const size_t row_bytes = (size_t)(s->H * s->D) * stsa_dtype_size(dt);
  const stsa_tensor *full = &s->out;
  const int direct = s->B == 1 && full->stride[1] == s->H * s->D &&
                     full->stride[2] == s->D && full->stride[3] == 1;
  int64_t *rows = malloc(sizeof *rows * (size_t)(r->P + 1));
  if (!rows)
    cli_die("out of memory");
  for (int p = 0; p <= r->P; p++) /* a shard holds B x S_r rows */
    rows[p] = s->B * r->offs[p];
  char *staging = r->rank == 0 && !direct ? alloc_or_die(row_bytes * (size_t)rows[r->P],
                                                         "gathering the output")
                                          : NULL;
  cli_dist_gather_rows(r->out.data, direct ? s->out_data : staging, rows, row_bytes);
  for (int p = 0; staging && p < r->P; p++) {
    const int64_t len = r->offs[p + 1] - r->offs[p];
    const stsa_tensor src = stsa_tensor_bshd(staging + (size_t)rows[p] * row_bytes, dt,
                                             s->B, len, s->H, s->D);
    const stsa_tensor dst = cli_shard_view(full, r->offs[p], len);
    cli_check(stsa_tensor_copy(&src, &dst), NULL, "placing an output shard");
  }
  free(staging);
  free(rows);
}

/* Each rank's figures of the mode's call, for the report and the summary
 * (into room take_shard made, so nothing here can fail on one rank). */
static void gather_times(dist_run *r) {
  enum { FIELDS = 4 };
  const double mine[FIELDS] = {r->rep.comm_ms, r->rep.compute_ms,
                               (double)r->rep.local_heads, (double)r->rep.pairs_skipped};
  cli_dist_mpi_check(MPI_Gather(mine, FIELDS, MPI_DOUBLE, r->all, FIELDS, MPI_DOUBLE, 0,
                                cli_dist_comm()),
                     "MPI_Gather (the times of the ranks)");
  if (r->rank != 0)
    return;
  run_dist_info *d = &r->info;
  d->scheme = stsa_dist_scheme_name((stsa_dist_scheme)r->s->o.dist.scheme);
  d->ranks = r->rep.ranks;
  d->ulysses_degree = r->rep.ulysses_degree;
  d->ring_degree = r->rep.ring_degree;
  d->imbalance = r->rep.imbalance;
  d->compute_ms = d->comm_ms + r->P;
  d->local_heads = d->tokens + r->P;
  d->pairs_skipped = d->tokens + 2 * r->P;
  for (int p = 0; p < r->P; p++) {
    d->comm_ms[p] = r->all[FIELDS * p];
    d->compute_ms[p] = r->all[FIELDS * p + 1];
    d->local_heads[p] = (int64_t)r->all[FIELDS * p + 2];
    d->pairs_skipped[p] = (int64_t)r->all[FIELDS * p + 3];
    d->tokens[p] = r->offs[p + 1] - r->offs[p];
  }
  r->s->dist = d;
}

/* What each rank ran, into rank 0's s->ran and s->dense_ran (into room
 * take_shard made). */
static void gather_ran(dist_run *r) {
  const int bytes = (int)sizeof r->mine;
  cli_dist_mpi_check(MPI_Gather(r->mine, bytes, MPI_BYTE, r->all_ran, bytes, MPI_BYTE, 0,
                                cli_dist_comm()),
                     "MPI_Gather (what the ranks ran)");
  if (r->rank != 0)
    return;
  run_state *s = r->s;
  for (int p = 0; p < r->P; p++) {
    const rank_ran *m = &r->all_ran[2 * p];
    s->ran.info[p] = m[0].info;
    s->ran.known[p] = (unsigned char)m[0].known;
    if (s->o.compare_dense) {
      s->dense_ran.info[p] = m[1].info;
      s->dense_ran.known[p] = (unsigned char)m[1].known;
    }
  }
}

/* ---- the run ------------------------------------------------------------------------
 */

void run_dist(run_state *s) {
  char desc[4096];
  describe_options(&s->o, desc, sizeof desc);
  cli_dist_same(desc, "options", CLI_DIST_SAME_OPTIONS);
  dist_run r = {.s = s, .rank = cli_dist_rank(), .P = cli_dist_size()};
  s->ctx = cli_ctx_create();
  cli_dist_threads(s->ctx, s->o.threads);
  r.dist = cli_dist_create(s->ctx, &s->o.dist);
  r.rep = (stsa_dist_report){.size = sizeof r.rep};

  const double t_start = cli_now();
  run_load_qkv(&s->o.in, &s->qkv);
  s->load_ms = (cli_now() - t_start) * 1e3;
  run_setup_config(s);
  take_shard(&r);
  cli_output outs[2];
  int n_out = 0;
  if (r.rank == 0) {
    run_alloc_out(s);
    n_out = run_outputs_prepare(s, outs); /* every target checked before computing */
  }
  /* every rank loaded its input, and the same tensors */
  describe_inputs(&s->qkv, desc, sizeof desc);
  cli_dist_same(desc, "inputs", "each rank reads q, k and v of the whole sequence");

  progress_start(&s->bar, "stsa run", s->o.compare_dense ? 2 : 1,
                 s->o.quiet || r.rank != 0);
  if (s->o.mode == RUN_MODE_DENSE)
    mode_dense(&r);
  else if (s->o.mode == RUN_MODE_SPARSE)
    mode_sparse(&r);
  else
    mode_svg(&r);
  take_ran(&r, &r.mine[0], &r.rep);
  if (s->o.compare_dense)
    compare_dense(&r);
  progress_finish(&s->bar);
  cli_dist_checkpoint(); /* before the gathers, which no failing rank would join */
  gather_times(&r);
  gather_ran(&r);
  gather_output(&r); /* rank 0 places the shards last: the next meeting agrees */

  if (r.rank == 0) {
    char *report = s->o.report ? run_report_build(s) : NULL;
    run_write_files(s, outs, n_out, report);
    if (!s->o.quiet)
      run_print_summary(s);
    fflush(stdout);
    run_print_warnings(s);
    free(report);
  }
  cli_dist_checkpoint(); /* rank 0 wrote the files: every rank succeeds */
  free(r.all);
  free(r.all_ran);
  run_ran_free(&s->ran);
  run_ran_free(&s->dense_ran);
  free(r.info.comm_ms);
  free(r.info.tokens);
  free(r.offs);
  free(r.out.data);
  free(s->res);
  free(s->out_data);
  run_free_qkv(&s->qkv);
  cli_dist_finish(); /* frees the distributed context, before its ctx */
  stsa_ctx_free(s->ctx);
}

#endif /* STSA_HAVE_MPI */
