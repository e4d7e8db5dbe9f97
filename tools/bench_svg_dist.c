/*
 * bench_svg_dist.c — `stsa bench svg --dist` (bench_svg.h) under mpirun: the
 * distributed SVG call (stsa_dist_svg_attention) on the built-in workload
 * against the one-process session on the whole problem, in the same run.
 *
 * Every rank generates the whole workload (it is deterministic) and uses
 * its shard of the tokens as views. After one untimed warm-up of each, the
 * reps alternate: the distributed call on every rank with T threads each,
 * then the one-process call on rank 0 alone with P x T threads while the
 * other ranks wait without spinning (cli_dist_wait_quietly: Open MPI's
 * blocking waits poll and would take the cores), so both see the same
 * cores and a slow spell of the machine hits both alike. svg_ms is the
 * median over reps of the slowest rank's call, comm_ms the median of the
 * largest communication time, imbalance the median of the library's
 * compute max / mean - 1; speedup_vs_1rank is the one-process median over
 * svg_ms. The output shards of the last rep are gathered and compared with
 * the one-process output (bitwise under ulysses).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_svg.h"
#include "cli_ran.h"
#include "cli_util.h"
#include "dist_cli.h"
#include "svg_eval.h"

#ifndef STSA_HAVE_MPI

int bench_svg_dist(const svg_bench_opts *o, const stsa_svg_config *cfg) {
  (void)o, (void)cfg;
  cli_die("--dist: this stsa was built without MPI");
}

#else /* STSA_HAVE_MPI */

#include "stsa_mpi.h"

/* The parsed options, one per line, for cli_dist_same. */
static void describe_options(const svg_bench_opts *o, char *buf, size_t len) {
  char dist[32];
  cli_dist_name(&o->dist, dist, sizeof dist);
  snprintf(buf, len,
           "--dist %s\n--preset %s\n--heads %lld\n--threads %d\n--seed %llu\n"
           "--q-tile %d\n--kv-tile %d\n--reps %d\n--json %d\n--frames %lld\n"
           "--height %lld\n--width %lld\n",
           dist, o->preset, (long long)o->heads, o->threads, (unsigned long long)o->seed,
           o->q_tile, o->kv_tile, o->reps, o->json, (long long)o->frames,
           (long long)o->height, (long long)o->width);
}

/* What the reps measured, on rank 0 (maxima over ranks). */
typedef struct dist_times {
  double *svg, *comm, *compute, *imbalance, *one; /* [reps] each */
  int64_t local_heads; /* this rank, the last distributed call */
} dist_times;

/* What a rank's local attention ran in the last distributed call: the last
 * call its context recorded, taken only when the rank computed heads of it
 * (known: a CLI_RAN_*). */
typedef struct rank_ran {
  stsa_run_info info;
  int known;
} rank_ran;

/* The distributed call on every rank, then the one-process call on rank 0
 * while the others sleep; times stored at rep (rep < 0: the warm-up). */
static void one_rep(stsa_dist_svg *dsvg, stsa_svg *svg1, const stsa_svg_config *cfg,
                    const svg_workload *w, const stsa_tensor *shard, dist_times *t,
                    int rep, stsa_svg_report *srep) {
  const int64_t layer = cfg->dense_layers, step = cfg->dense_steps;
  stsa_dist_report drep = {.size = sizeof drep};
  cli_dist_mpi_check(MPI_Barrier(cli_dist_comm()), "MPI_Barrier"); /* start together */
  double t0 = cli_now();
  cli_dist_check(stsa_dist_svg_attention(dsvg, layer, step, &shard[0], &shard[1],
                                         &shard[2], &shard[3], srep, &drep),
                 "distributed SVG attention");
  const double ms = (cli_now() - t0) * 1e3;
  t->local_heads = drep.local_heads;
  stsa_status st = STSA_OK;
  double one = 0;
  if (svg1) {
    t0 = cli_now();
    st = stsa_svg_attention(svg1, layer, step, &w->q, &w->k, &w->v, &w->out, NULL);
    one = (cli_now() - t0) * 1e3;
  }
  cli_dist_wait_quietly();
  char msg[600] = "";
  if (st != STSA_OK)
    snprintf(msg, sizeof msg, "one-process SVG attention failed: %s",
             stsa_status_str(st));
  cli_dist_agree(st, msg);
  if (rep < 0)
    return;
  const double mine[2] = {ms, drep.comm_ms};
  double most[2];
  cli_dist_mpi_check(MPI_Reduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, 0, cli_dist_comm()),
                     "MPI_Reduce (the times)");
  t->svg[rep] = most[0];
  t->comm[rep] = most[1];
  t->compute[rep] = drep.compute_mean_ms;
  t->imbalance[rep] = drep.imbalance;
  t->one[rep] = one;
}

/* The largest |a - b| and |b| over n floats, and whether every bit agrees. */
static void compare_out(const float *a, const float *b, size_t n, double *diff,
                        double *most, int *bitwise) {
  *diff = *most = 0;
  *bitwise = memcmp(a, b, n * sizeof *a) == 0;
  for (size_t i = 0; i < n; i++) {
    *diff = fmax(*diff, fabs((double)a[i] - (double)b[i]));
    *most = fmax(*most, fabs((double)b[i]));
  }
}

int bench_svg_dist(const svg_bench_opts *o, const stsa_svg_config *cfg) {
  char desc[1024];
  describe_options(o, desc, sizeof desc);
  cli_dist_same(desc, "options", CLI_DIST_SAME_OPTIONS);
  if (o->compare_permute)
    cli_die("bench svg: --compare-permute times one process; it does not apply with "
            "--dist");
  /* the distributed bench runs the f32 workload: refused, not ignored */
  if (o->dtype != STSA_F32)
    cli_die("bench svg: --dtype %s does not run with --dist yet (its workload is f32)",
            stsa_dtype_name(o->dtype));
  const int rank = cli_dist_rank(), P = cli_dist_size();
  stsa_ctx *ctx = cli_ctx_create(), *ctx1 = NULL;
  const int T = cli_dist_threads(ctx, o->threads);
  if (rank == 0) {
    ctx1 = cli_ctx_create();
    cli_check(stsa_ctx_set(ctx1, STSA_PARAM_THREADS, (int64_t)P * T), ctx1,
              "the one-process threads");
  }
  stsa_dist *dist = cli_dist_create(ctx, &o->dist);
  const int64_t N = stsa_geometry_tokens(&cfg->geometry), H = cfg->heads,
                D = cfg->head_dim;
  int64_t *offs = cli_dist_shards(N);
  const int64_t off = offs[rank], len = offs[rank + 1] - off;
  svg_workload w;
  svg_workload_make(&w, cfg, 1, o->seed);
  float *out_data =
      aligned_alloc(64, ((size_t)(len * H * D) * sizeof(float) + 63) / 64 * 64);
  double *times = malloc(sizeof *times * 5 * (size_t)o->reps);
  if (!out_data || !times)
    cli_die("out of memory");
  const stsa_tensor shard[4] = {
      cli_shard_view(&w.q, off, len), cli_shard_view(&w.k, off, len),
      cli_shard_view(&w.v, off, len), stsa_tensor_bshd(out_data, STSA_F32, 1, len, H, D)};
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)H);
  rank_ran *all_ran = malloc(sizeof *all_ran * (size_t)P);
  stsa_run_info *ran_info = malloc(sizeof *ran_info * (size_t)P);
  unsigned char *ran_known = malloc((size_t)P);
  if (!kinds || !all_ran || !ran_info || !ran_known)
    cli_die("out of memory");
  stsa_svg *svg1 = NULL;
  if (rank == 0)
    cli_check(stsa_svg_create(ctx1, cfg, &svg1), ctx1,
              "creating the one-process session");
  cli_dist_checkpoint(); /* from here on only agreed calls can fail */
  stsa_dist_svg *dsvg;
  cli_dist_check(stsa_dist_svg_create(dist, cfg, &dsvg),
                 "creating the distributed session");
  stsa_svg_windows win = STSA_INIT(stsa_svg_windows);
  stsa_svg_report srep = {.size = sizeof srep, .kinds = kinds};
  const int R = o->reps;
  dist_times t = {times, times + R, times + 2 * R, times + 3 * R, times + 4 * R, 0};
  for (int rep = -1; rep < R; rep++)
    one_rep(dsvg, svg1, cfg, &w, shard, &t, rep, &srep);
  /* what each rank's part of the last distributed call ran, on rank 0 */
  rank_ran mine = {.known = 0};
  mine.known = t.local_heads <= 0              ? CLI_RAN_NONE
               : cli_last_run(ctx, &mine.info) ? CLI_RAN_KNOWN
                                               : CLI_RAN_UNKNOWN;
  cli_dist_mpi_check(MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all_ran,
                                (int)sizeof mine, MPI_BYTE, 0, cli_dist_comm()),
                     "MPI_Gather (what the ranks ran)");
  /* w.ref holds the whole distributed output on rank 0 */
  cli_dist_gather_rows(out_data, w.ref.data, offs, (size_t)(H * D) * sizeof(float));
  if (rank == 0) {
    stsa_svg_get_windows(svg1, &win);
    double diff, most;
    int bitwise;
    compare_out(w.ref.data, w.out.data, (size_t)(N * H * D), &diff, &most, &bitwise);
    char scheme[32];
    cli_dist_name(&o->dist, scheme, sizeof scheme);
    const double svg_ms = cli_median(t.svg, R), one_ms = cli_median(t.one, R);
    const double comm_ms = cli_median(t.comm, R), compute_ms = cli_median(t.compute, R);
    const double imbalance = cli_median(t.imbalance, R);
    int spatial = 0;
    for (int64_t h = 0; h < H; h++)
      spatial += kinds[h] == STSA_HEAD_SPATIAL;
    for (int p = 0; p < P; p++)
      ran_info[p] = all_ran[p].info, ran_known[p] = (unsigned char)all_ran[p].known;
    char note[160], ran_text[512], one_text[512], *ranks_json = NULL;
    const int64_t common =
        cli_ran_common(ran_info, ran_known, P, "rank", note, sizeof note);
    const stsa_run_info one_ran = cli_ran(ctx1, "one-process SVG attention");
    size_t ranks_len = 0;
    FILE *rj = open_memstream(&ranks_json, &ranks_len);
    if (!rj)
      cli_die("out of memory");
    for (int p = 0; p < P; p++)
      fprintf(rj, "%s%s", p ? ", " : "[",
              cli_ran_json(ran_known[p] == CLI_RAN_KNOWN ? &ran_info[p] : NULL, ran_text,
                           sizeof ran_text));
    fprintf(rj, "]");
    if (fclose(rj) != 0 || !ranks_json)
      cli_die("out of memory");
    if (o->json)
      printf(
          "{\"bench\": \"svg_dist\", \"preset\": \"%s\", \"scheme\": \"%s\", "
          "\"ranks\": %d, \"tokens\": %lld, \"heads\": %lld, \"dim\": %lld, "
          "\"threads_per_rank\": %d, \"threads_1rank\": %d, \"reps\": %d, "
          "\"svg_ms\": %.3f, \"svg_1rank_ms\": %.3f, \"speedup_vs_1rank\": %.3f, "
          "\"comm_ms\": %.3f, \"compute_ms\": %.3f, \"imbalance\": %.4f, "
          "\"density\": %.5f, \"spatial_heads\": %d, \"temporal_heads\": %lld, "
          "\"max_abs_diff_vs_1rank\": %.3g, \"rel_diff_vs_1rank\": %.3g, "
          "\"bitwise_equal\": %s, \"q_tile\": %d, "
          "\"kv_tile\": %d, \"ran\": %s%s%s%s, \"ran_ranks\": %s, \"ran_1rank\": %s}\n",
          o->preset, scheme, P, (long long)N, (long long)H, (long long)D, T, P * T, R,
          svg_ms, one_ms, one_ms / svg_ms, comm_ms, compute_ms, imbalance, srep.density,
          spatial, (long long)(H - spatial), diff, most > 0 ? diff / most : 0.0,
          bitwise ? "true" : "false", win.q_tile, win.kv_tile,
          cli_ran_json(common >= 0 ? &ran_info[common] : NULL, ran_text, sizeof ran_text),
          note[0] ? ", \"ran_note\": \"" : "", note, note[0] ? "\"" : "", ranks_json,
          cli_ran_json(&one_ran, one_text, sizeof one_text));
    else {
      printf("svg %s distributed: %s over %d ranks x %d threads; %lld tokens, %lld heads "
             "x %lld\n",
             o->preset, scheme, P, T, (long long)N, (long long)H, (long long)D);
      printf("  distributed SVG %.1f ms (median of %d, slowest rank): communication %.1f "
             "ms, local attention %.1f ms per rank on average, imbalance %.1f%%\n",
             svg_ms, R, comm_ms, compute_ms, 100 * imbalance);
      printf("  one process (rank 0 alone, %d threads) %.1f ms: the ranks are %.2fx "
             "%s\n",
             P * T, one_ms, one_ms >= svg_ms ? one_ms / svg_ms : svg_ms / one_ms,
             one_ms >= svg_ms ? "faster" : "slower");
      printf("  density %.3f, heads: %d spatial, %lld temporal; output against one "
             "process: %s (max |diff| %.3g, %.3g of max |out|)\n",
             srep.density, spatial, (long long)(H - spatial),
             bitwise ? "bitwise equal" : "not bitwise equal", diff,
             most > 0 ? diff / most : 0.0);
      if (common >= 0)
        printf("  ran: distributed %s on every rank%s%s",
               cli_ran_text(&ran_info[common], ran_text, sizeof ran_text),
               note[0] ? " with heads; " : "", note);
      else
        printf("  ran: distributed: %s", note);
      printf("; one process %s\n", cli_ran_text(&one_ran, one_text, sizeof one_text));
      for (int p = 0; common < 0 && p < P; p++)
        printf("    rank %d: %s\n", p,
               ran_known[p] == CLI_RAN_KNOWN
                   ? cli_ran_text(&ran_info[p], ran_text, sizeof ran_text)
               : ran_known[p] == CLI_RAN_NONE ? "no heads of the call"
                                              : "not known");
    }
    free(ranks_json);
    fflush(stdout);
  }
  cli_dist_checkpoint();
  stsa_dist_svg_free(dsvg);
  stsa_svg_free(svg1);
  free(kinds);
  free(all_ran);
  free(ran_info);
  free(ran_known);
  free(times);
  free(out_data);
  free(offs);
  svg_workload_free(&w);
  cli_dist_finish();
  stsa_ctx_free(ctx);
  stsa_ctx_free(ctx1);
  return 0;
}

#endif /* STSA_HAVE_MPI */
