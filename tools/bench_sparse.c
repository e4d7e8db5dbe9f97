/*
 * bench_sparse.c — `stsa bench sparse`: block-sparse attention with a band
 * or causal mask in each sparse mode, timed against the dense kernel on the
 * same shape in interleaved rounds (bench.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli_ran.h"
#include "cli_util.h"

/* A JSON number, or null for what was not measured (NaN). */
static const char *json_num(char *buf, size_t len, double x) {
  if (!isfinite(x))
    return "null";
  snprintf(buf, len, "%.3f", x);
  return buf;
}

/* Half-width w of a symmetric band |i - j| <= w over S tokens whose kept
 * fraction is `density`: kept = S(2w+1) - w(w+1), solved for w. */
static int64_t band_halfwidth(int64_t S, double density) {
  double n = (double)S, b = 2 * n - 1, c = density * n * n - n;
  double disc = b * b - 4 * c;
  double w = disc > 0 ? (b - sqrt(disc)) / 2 : n;
  return w < 0 ? 0 : (int64_t)llround(w);
}

int bench_sparse(const bench_opts *o) {
  if (o->seq != o->seq_kv && o->mask == BENCH_MASK_BAND)
    cli_die("bench sparse: --mask band needs --seq-kv equal to --seq");
  bench_data bd;
  bench_setup(o, &bd);
  stsa_mask *mask;
  int64_t w = 0;
  if (o->mask == BENCH_MASK_CAUSAL)
    cli_check(stsa_mask_causal(0, &mask), NULL, "causal mask");
  else {
    w = o->band ? o->band : band_halfwidth(o->seq, o->density);
    cli_check(stsa_mask_local(w, w, &mask), NULL, "band mask");
  }
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)o->heads);
  if (!masks)
    cli_die("out of memory");
  for (int64_t h = 0; h < o->heads; h++)
    masks[h] = mask;
  stsa_plan_desc desc = {
      sizeof(stsa_plan_desc), o->seq, o->seq_kv, o->heads, masks, NULL, STSA_ORDER_NATIVE,
      STSA_ORDER_NATIVE,      0,      0,         0,        NULL,  NULL};
  stsa_plan *plan;
  double t0 = cli_now();
  cli_check(stsa_plan_build(bd.ctx, &desc, &plan), bd.ctx, "building the plan");
  double plan_ms = (cli_now() - t0) * 1e3;
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  stsa_plan_get_stats(plan, &st);
  double density = (double)st.pairs_kept / (double)st.pairs_total;
  double visited = (double)st.tiles_active / (double)st.tiles_total;
  double partial =
      st.tiles_active ? (double)st.tiles_partial / (double)st.tiles_active : 0;
  int64_t q_tile, kv_tile;
  stsa_ctx_get(bd.ctx, STSA_PARAM_Q_TILE, &q_tile);
  stsa_ctx_get(bd.ctx, STSA_PARAM_KV_TILE, &kv_tile);
  /* configuration 0 is dense, then one per mode */
  enum { MAXC = STSA_SPARSE_MODE_COUNT_ + 1 };
  const stsa_plan *plans[MAXC] = {NULL};
  stsa_sparse_opts opts[MAXC] = {{0}};
  int64_t changed[MAXC] = {0};
  timing times[MAXC];
  stsa_run_info ran[MAXC]; /* what each configuration's calls ran */
  for (int mi = 0; mi < o->n_modes; mi++) {
    plans[1 + mi] = plan;
    opts[1 + mi] = (stsa_sparse_opts){sizeof(stsa_sparse_opts), 0.0f, NULL, o->modes[mi],
                                      &changed[1 + mi],         0};
  }
  if (o->no_dense) {
    bench_time_interleaved(&bd, o->reps, o->n_modes, plans + 1, opts + 1, times + 1,
                           ran + 1);
    times[0] = (timing){NAN, NAN};
  } else {
    bench_time_interleaved(&bd, o->reps, o->n_modes + 1, plans, opts, times, ran);
  }
  const timing dense = times[0];
  const stsa_run_info *dense_ran = o->no_dense ? NULL : &ran[0];
  char rt[512], rj[512], drj[512];
  if (!o->json) {
    printf(
        "sparse %s: S=%lld H=%lld D=%lld, %d threads, tiles %lld x %lld, plan %.2f ms\n"
        "  density %.4f (kept pairs), tiles visited %.4f, of them partial %.4f\n",
        BENCH_MASK_NAMES[o->mask], (long long)o->seq, (long long)o->heads,
        (long long)o->dim, bd.threads, (long long)q_tile, (long long)kv_tile, plan_ms,
        density, visited, partial);
    if (dense_ran)
      printf("  dense: median %.2f ms, best %.2f ms; ran %s\n", dense.median_ms,
             dense.best_ms, cli_ran_text(dense_ran, rt, sizeof rt));
    else
      printf("  dense: not run (--no-dense)\n");
  }
  for (int mi = 0; mi < o->n_modes; mi++) {
    const timing sparse = times[1 + mi];
    const int64_t n_changed = changed[1 + mi];
    double speedup = dense.best_ms / sparse.best_ms;
    double efficiency = speedup * density; /* 1.0 = the ideal speed-up 1/density */
    const char *mode = stsa_sparse_mode_name(o->modes[mi]);
    char j1[32], j2[32], j3[32], j4[32];
    if (o->json)
      printf("{\"bench\": \"sparse\", \"mask\": \"%s\", \"mode\": \"%s\", \"seq\": %lld, "
             "\"heads\": %lld, \"dim\": %lld, \"threads\": %d, \"band_halfwidth\": %lld, "
             "\"ms\": %.3f, \"best_ms\": %.3f, \"dense_ms\": %s, \"dense_best_ms\": %s, "
             "\"speedup\": %s, \"ideal_speedup\": %.3f, \"efficiency\": %s, "
             "\"density\": %.5f, \"tiles_visited\": %.5f, \"tiles_partial\": %.5f, "
             "\"pairs_changed\": %lld, \"plan_ms\": %.3f, \"q_tile\": %lld, \"kv_tile\": "
             "%lld, \"ran\": %s, \"dense_ran\": %s}\n",
             BENCH_MASK_NAMES[o->mask], mode, (long long)o->seq, (long long)o->heads,
             (long long)o->dim, bd.threads, (long long)w, sparse.median_ms,
             sparse.best_ms, json_num(j1, sizeof j1, dense.median_ms),
             json_num(j2, sizeof j2, dense.best_ms), json_num(j3, sizeof j3, speedup),
             1.0 / density, json_num(j4, sizeof j4, efficiency), density, visited,
             partial, (long long)n_changed, plan_ms, (long long)q_tile,
             (long long)kv_tile, cli_ran_json(&ran[1 + mi], rj, sizeof rj),
             cli_ran_json(dense_ran, drj, sizeof drj));
    else
      printf("  %-12s median %.2f ms, best %.2f ms: speed-up %.2fx (ideal %.2fx, "
             "efficiency %.2f); ran %s%s\n",
             mode, sparse.median_ms, sparse.best_ms, speedup, 1.0 / density, efficiency,
             cli_ran_text(&ran[1 + mi], rt, sizeof rt),
             o->modes[mi] == STSA_SPARSE_TILE_ROUNDED ? "; lossy:" : "");
    if (o->modes[mi] == STSA_SPARSE_TILE_ROUNDED && !o->json)
      printf("               pairs changed by rounding: %lld (%.2f%% of kept)\n",
             (long long)n_changed, 100.0 * (double)n_changed / (double)st.pairs_kept);
    fflush(stdout);
  }
  stsa_plan_free(plan);
  free(masks);
  stsa_mask_free(mask);
  bench_teardown(&bd);
  return 0;
}
