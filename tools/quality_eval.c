/*
 * quality_eval.c — see quality_eval.h.
 */
#include "quality_eval.h"

#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "svg_eval.h"

const double QUALITY_BUDGETS[QUALITY_N_BUDGETS] = {0, 0.02, 0.05, 0.1};
const int QUALITY_METHODS[QUALITY_N_METHODS] = {STSA_SVG_METHOD_SVG, STSA_SVG_METHOD_SVG2,
                                                STSA_SVG_METHOD_AUTO};

/* Warm calls timed per run, each after a dense call. */
#define TIMED_REPS 2

zoo_case *quality_select_cases(const char *what, int wan, uint64_t seed,
                               const char *family, const char *size, int *n) {
  const int cap = zoo_case_capacity();
  zoo_case *cases = malloc(sizeof *cases * (size_t)cap);
  if (!cases)
    cli_die("out of memory");
  const int all = zoo_cases(wan || (size && !strcmp(size, "wan480p")), seed, cases, cap);
  int kept = 0;
  for (int i = 0; i < all; i++)
    if ((!family || !strcmp(family, cases[i].family->name)) &&
        (!size || !strcmp(size, cases[i].size_name)))
      cases[kept++] = cases[i];
  if (!kept)
    cli_die("%s: no case of family '%s' and size '%s' (see --by-family)", what,
            family ? family : "any", size ? size : "any");
  *n = kept;
  return cases;
}

int64_t quality_heads(const zoo_case *cases, int n) {
  int64_t heads = 0;
  for (int i = 0; i < n; i++)
    heads += cases[i].heads;
  return heads;
}

static double elapsed_ms(double t0) { return (cli_now() - t0) * 1e3; }

static stsa_svg_config zoo_config(const zoo_case *c, int method, double budget) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = c->geometry;
  cfg.heads = c->heads;
  cfg.head_dim = c->head_dim;
  cfg.density = 0.30; /* the CLI's default */
  const int64_t L = c->geometry.frames * c->geometry.height * c->geometry.width;
  cfg.sample_rows = L < 64 ? L : 64;
  cfg.sink_frames = 1;
  cfg.seed = c->seed;
  cfg.method = method;
  cfg.svg2.top_p = 0.9; /* Sparse VideoGen 2's published settings */
  cfg.svg2.min_kv_fraction = 0.10;
  cfg.svg2.kmeans_iters_cold = 50;
  cfg.svg2.kmeans_iters_warm = 2;
  cfg.max_rel_error = budget;
  return cfg;
}

/* The case's inputs and its dense reference. */
typedef struct case_data {
  stsa_tensor q, k, v, ref, out;
  double *rel, *cosine;
  float *est, *density, *cand_density, *cand_bound;
  uint8_t *choice, *reason;
} case_data;

static void run_method(stsa_ctx *ctx, const zoo_case *c, int ci, case_data *d, int method,
                       double budget, quality_set *set) {
  stsa_svg_config cfg = zoo_config(c, method, budget);
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, &cfg, &svg), ctx, "creating the session");
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.est_error = d->est;
  rep.head_density = d->density;
  rep.choice = d->choice;
  rep.choice_reason = d->reason;
  rep.cand_density = d->cand_density;
  rep.cand_bound = d->cand_bound;
  /* the cold call (SVG2 seeds its clusters), then dense and a warm call in
   * turn; the figures are the last warm call's */
  cli_check(stsa_svg_attention(svg, 0, 0, &d->q, &d->k, &d->v, &d->out, &rep), ctx,
            stsa_svg_method_name(method));
  for (int r = 1; r <= TIMED_REPS; r++) {
    double t0 = cli_now();
    cli_check(stsa_attention(ctx, &d->q, &d->k, &d->v, &d->ref, NULL), ctx, "dense");
    set->dense_ms += elapsed_ms(t0);
    t0 = cli_now();
    cli_check(stsa_svg_attention(svg, 0, r, &d->q, &d->k, &d->v, &d->out, &rep), ctx,
              stsa_svg_method_name(method));
    set->method_ms += elapsed_ms(t0);
  }
  stsa_svg_free(svg);
  svg_head_errors(&d->out, &d->ref, d->rel, d->cosine);
  enum { C = STSA_AUTO_CANDIDATE_COUNT_ };
  for (int64_t h = 0; h < c->heads; h++) {
    quality_head *r = &set->r[set->n++];
    *r = (quality_head){
        ci, h, d->rel[h], d->est[h], d->density[h], d->choice[h], d->reason[h], {0}, {0}};
    memcpy(r->cand_density, d->cand_density + h * C, sizeof r->cand_density);
    memcpy(r->cand_bound, d->cand_bound + h * C, sizeof r->cand_bound);
  }
}

static void run_case(stsa_ctx *ctx, const zoo_case *c, int ci, quality_set *sets) {
  case_data d;
  zoo_generate(c, &d.q, &d.k, &d.v);
  d.ref = svg_f32_tensor(1, d.q.shape[1], d.q.shape[2], d.q.shape[3]);
  d.out = svg_f32_tensor(1, d.q.shape[1], d.q.shape[2], d.q.shape[3]);
  const size_t H = (size_t)c->heads;
  d.rel = malloc(sizeof *d.rel * H);
  d.cosine = malloc(sizeof *d.cosine * H);
  d.est = malloc(sizeof *d.est * H);
  d.density = malloc(sizeof *d.density * H);
  d.cand_density = malloc(sizeof *d.cand_density * H * STSA_AUTO_CANDIDATE_COUNT_);
  d.cand_bound = malloc(sizeof *d.cand_bound * H * STSA_AUTO_CANDIDATE_COUNT_);
  d.choice = malloc(H);
  d.reason = malloc(H);
  if (!d.rel || !d.cosine || !d.est || !d.density || !d.cand_density || !d.cand_bound ||
      !d.choice || !d.reason)
    cli_die("out of memory");
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    for (int b = 0; b < QUALITY_N_BUDGETS; b++)
      run_method(ctx, c, ci, &d, QUALITY_METHODS[m], QUALITY_BUDGETS[b],
                 &sets[quality_set_index(m, b)]);
  free(d.q.data);
  free(d.k.data);
  free(d.v.data);
  free(d.ref.data);
  free(d.out.data);
  free(d.rel);
  free(d.cosine);
  free(d.est);
  free(d.density);
  free(d.cand_density);
  free(d.cand_bound);
  free(d.choice);
  free(d.reason);
}

void quality_run(stsa_ctx *ctx, const zoo_case *cases, int n, quality_set *sets) {
  const int64_t heads = quality_heads(cases, n);
  for (int i = 0; i < QUALITY_N_METHODS * QUALITY_N_BUDGETS; i++) {
    sets[i] = (quality_set){malloc(sizeof(quality_head) * (size_t)heads), 0, 0, 0};
    if (!sets[i].r)
      cli_die("out of memory");
  }
  for (int ci = 0; ci < n; ci++)
    run_case(ctx, &cases[ci], ci, sets);
}

void quality_sets_free(quality_set *sets) {
  for (int i = 0; i < QUALITY_N_METHODS * QUALITY_N_BUDGETS; i++) {
    free(sets[i].r);
    sets[i].r = NULL;
  }
}
