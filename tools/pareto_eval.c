/*
 * pareto_eval.c — see pareto_eval.h.
 *
 * The heads are K semantic, then K spatial, then K temporal ones of one
 * workload, so every method runs once per density on all of them and the
 * table takes means per kind. The oracle knows the dense probabilities: per
 * (query tile, key tile) their exact mass, summed over the tile's query rows;
 * each query tile keeps its heaviest key tiles until they hold the requested
 * fraction of the keys. It is the best any tile-granular selection with that
 * per-tile budget can do, which is what SVG's windows and SVG2's cluster
 * rectangles approximate.
 */
#define STSA_EXPERIMENTAL /* stsa_plan_head_stats */
#define _POSIX_C_SOURCE 200809L
#include "pareto_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "svg_eval.h"

const char *const PARETO_METHOD_NAMES[PARETO_METHODS] = {"svg", "svg2", "oracle"};
const stsa_head_kind PARETO_KIND[PARETO_KINDS] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SPATIAL,
                                                  STSA_HEAD_TEMPORAL};

static double elapsed_ms(double t0) { return (cli_now() - t0) * 1e3; }

/* Per-head densities and errors of one method at density index di into the
 * table, as means over the heads of each kind. */
static void add_points(pareto_table *t, const pareto_setup *s, int m, int di,
                       const double *density, const double *rel) {
  const int64_t K = s->heads_per_kind;
  for (int k = 0; k < PARETO_KINDS; k++) {
    double d = 0, e = 0;
    for (int64_t h = k * K; h < (k + 1) * K; h++)
      d += density[h] / (double)K, e += rel[h] / (double)K;
    t->p[m][di][k] = (pareto_point){d, e};
  }
}

/* ---- SVG and SVG2: the session ----------------------------------------------- */

static void run_session(stsa_ctx *ctx, const pareto_setup *s, svg_workload *w, int method,
                        double d, double *density) {
  const int64_t H = PARETO_KINDS * s->heads_per_kind;
  const stsa_geometry *g = &s->geometry;
  const int64_t L = g->frames * g->height * g->width;
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = *g;
  cfg.heads = H, cfg.head_dim = s->head_dim;
  cfg.density = d;
  cfg.sample_rows = L < 64 ? L : 64;
  cfg.sink_frames = 1;
  cfg.seed = s->seed;
  cfg.method = method == PARETO_SVG2 ? STSA_SVG_METHOD_SVG2 : STSA_SVG_METHOD_SVG;
  cfg.svg2.top_p = 0; /* SVG2 keeps d of the keys per query cluster: the same budget */
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, &cfg, &svg), ctx, "creating the SVG session");
  float *hd = malloc(sizeof *hd * (size_t)H);
  if (!hd)
    cli_die("out of memory");
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.head_density = hd;
  cli_check(stsa_svg_attention(svg, 0, 0, &w->q, &w->k, &w->v, &w->out, &rep), ctx,
            PARETO_METHOD_NAMES[method]);
  for (int64_t h = 0; h < H; h++)
    density[h] = hd[h];
  free(hd);
  stsa_svg_free(svg);
}

/* ---- the oracle ------------------------------------------------------------------ */

/* In eight lanes, which the compiler vectorises without reassociating. */
static float dot(const float *a, const float *b, int64_t D) {
  float lane[8] = {0};
  int64_t d = 0;
  for (; d + 8 <= D; d += 8)
    for (int l = 0; l < 8; l++)
      lane[l] += a[d + l] * b[d + l];
  float acc = 0;
  for (; d < D; d++)
    acc += a[d] * b[d];
  for (int l = 0; l < 8; l++)
    acc += lane[l];
  return acc;
}

/* Head h's probability mass per (query tile, key tile), [nt][nt]: row i's
 * softmax over all keys, summed into its tile row. */
static void tile_mass(const svg_workload *w, int64_t h, int T, double *mass) {
  const int64_t N = w->q.shape[1], H = w->q.shape[2], D = w->q.shape[3];
  const int64_t nt = (N + T - 1) / T;
  const float *q = w->q.data, *k = w->k.data;
  float *kh = malloc(sizeof *kh * (size_t)(N * D));
  double *p = malloc(sizeof *p * (size_t)N);
  if (!kh || !p)
    cli_die("out of memory");
  for (int64_t j = 0; j < N; j++) /* the head's keys, contiguous */
    memcpy(kh + j * D, k + (j * H + h) * D, sizeof *kh * (size_t)D);
  const double scale = 1.0 / sqrt((double)D);
  memset(mass, 0, sizeof *mass * (size_t)(nt * nt));
  for (int64_t i = 0; i < N; i++) {
    const float *qi = q + (i * H + h) * D;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < N; j++) {
      p[j] = dot(qi, kh + j * D, D) * scale;
      mx = fmax(mx, p[j]);
    }
    for (int64_t j = 0; j < N; j++)
      sum += p[j] = exp(p[j] - mx);
    double *row = mass + (i / T) * nt;
    for (int64_t j = 0; j < N; j++)
      row[j / T] += p[j] / sum;
  }
  free(kh);
  free(p);
}

static const double *sort_mass; /* the row qsort orders by */
static int by_mass_desc(const void *a, const void *b) {
  const double x = sort_mass[*(const int64_t *)a], y = sort_mass[*(const int64_t *)b];
  return x < y ? 1 : x > y ? -1 : 0;
}

/* keep[nt][nt]: per query tile its heaviest key tiles until they hold
 * d * N keys (at least one tile). */
static void oracle_keep(const double *mass, int64_t N, int T, double d, uint8_t *keep) {
  const int64_t nt = (N + T - 1) / T;
  int64_t *order = malloc(sizeof *order * (size_t)nt);
  if (!order)
    cli_die("out of memory");
  memset(keep, 0, (size_t)(nt * nt));
  for (int64_t qt = 0; qt < nt; qt++) {
    for (int64_t kt = 0; kt < nt; kt++)
      order[kt] = kt;
    sort_mass = mass + qt * nt;
    qsort(order, (size_t)nt, sizeof *order, by_mass_desc);
    int64_t kept = 0;
    for (int64_t r = 0; r < nt && (r == 0 || (double)kept < d * (double)N); r++) {
      const int64_t kt = order[r];
      keep[qt * nt + kt] = 1;
      kept += kt == nt - 1 ? N - kt * T : T;
    }
  }
  free(order);
}

/* One block-sparse call of every head with its oracle mask at density d. */
static void run_oracle(stsa_ctx *ctx, const pareto_setup *s, svg_workload *w,
                       double *const *mass, double d, double *density) {
  const int64_t H = w->q.shape[2], N = w->q.shape[1];
  const int T = s->oracle_tile;
  const int64_t nt = (N + T - 1) / T;
  int32_t *label = malloc(sizeof *label * (size_t)N);
  uint8_t *keep = malloc((size_t)(nt * nt));
  stsa_mask **masks = calloc((size_t)H, sizeof *masks);
  if (!label || !keep || !masks)
    cli_die("out of memory");
  for (int64_t i = 0; i < N; i++)
    label[i] = (int32_t)(i / T);
  for (int64_t h = 0; h < H; h++) {
    oracle_keep(mass[h], N, T, d, keep);
    cli_check(stsa_mask_clusters(label, N, nt, label, N, nt, keep, &masks[h]), NULL,
              "the oracle's mask");
  }
  const stsa_plan_desc desc = {.size = sizeof desc,
                               .s_q = N,
                               .s_kv = N,
                               .heads = H,
                               .masks = (const stsa_mask *const *)masks,
                               .q_order = STSA_ORDER_NATIVE,
                               .kv_order = STSA_ORDER_NATIVE,
                               .q_tile = T,
                               .kv_tile = T,
                               .flags = STSA_PLAN_DEFAULT};
  stsa_plan *plan;
  cli_check(stsa_plan_build(ctx, &desc, &plan), ctx, "the oracle's plan");
  cli_check(stsa_sparse_attention(ctx, plan, &w->q, &w->k, &w->v, &w->out, NULL), ctx,
            "the oracle's attention");
  for (int64_t h = 0; h < H; h++) {
    int64_t kept = 0;
    cli_check(stsa_plan_head_stats(plan, h, NULL, NULL, &kept), NULL, "plan statistics");
    density[h] = (double)kept / ((double)N * (double)N);
  }
  stsa_plan_free(plan);
  for (int64_t h = 0; h < H; h++)
    stsa_mask_free(masks[h]);
  free(masks);
  free(keep);
  free(label);
}

/* ---- the table ------------------------------------------------------------------- */

void pareto_evaluate(stsa_ctx *ctx, const pareto_setup *s, pareto_table *t) {
  const int64_t K = s->heads_per_kind, H = PARETO_KINDS * K;
  stsa_head_kind *kinds = malloc(sizeof *kinds * (size_t)H);
  double *density = malloc(sizeof *density * (size_t)H);
  double *rel = malloc(sizeof *rel * (size_t)H), *cosv = malloc(sizeof *cosv * (size_t)H);
  double **mass = calloc((size_t)H, sizeof *mass);
  if (!kinds || !density || !rel || !cosv || !mass)
    cli_die("out of memory");
  for (int64_t h = 0; h < H; h++)
    kinds[h] = PARETO_KIND[h / K];
  stsa_svg_config wcfg = STSA_INIT(stsa_svg_config);
  wcfg.geometry = s->geometry, wcfg.heads = H, wcfg.head_dim = s->head_dim;
  svg_workload w;
  svg_workload_make_kinds(&w, &wcfg, 1, s->seed, kinds);
  memset(t, 0, sizeof *t);
  double t0 = cli_now();
  cli_check(stsa_attention(ctx, &w.q, &w.k, &w.v, &w.ref, NULL), ctx, "dense attention");
  t->dense_ms = elapsed_ms(t0);
  t0 = cli_now();
  const int64_t N = w.q.shape[1], nt = (N + s->oracle_tile - 1) / s->oracle_tile;
  for (int64_t h = 0; h < H; h++) {
    mass[h] = malloc(sizeof **mass * (size_t)(nt * nt));
    if (!mass[h])
      cli_die("out of memory");
    tile_mass(&w, h, s->oracle_tile, mass[h]);
  }
  t->method_ms[PARETO_ORACLE] += elapsed_ms(t0);
  for (int di = 0; di < s->n_densities; di++)
    for (int m = 0; m < PARETO_METHODS; m++) {
      t0 = cli_now();
      if (m == PARETO_ORACLE)
        run_oracle(ctx, s, &w, mass, s->densities[di], density);
      else
        run_session(ctx, s, &w, m, s->densities[di], density);
      t->method_ms[m] += elapsed_ms(t0);
      svg_head_errors(&w.out, &w.ref, rel, cosv);
      add_points(t, s, m, di, density, rel);
    }
  for (int64_t h = 0; h < H; h++)
    free(mass[h]);
  free(mass);
  free(kinds);
  free(density);
  free(rel);
  free(cosv);
  svg_workload_free(&w);
}
