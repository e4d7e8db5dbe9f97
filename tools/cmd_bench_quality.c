/*
 * cmd_bench_quality.c — `stsa bench quality`: the error guard judged on the
 * quality zoo (quality_zoo.h). Every head of every case runs under each
 * method at each budget; its TRUE relative L2 error ||o - o_dense|| /
 * ||o_dense|| over all rows is measured against dense attention of the same
 * inputs and set beside the estimate the session reported. Per method and
 * budget: the share of heads within the budget (and within 1.5 x), the
 * worst true/budget, the estimate/true ratio (lowest and median: below 1 the
 * estimate under-read), the mean density and the speed-up over dense (warm
 * calls, each after a dense call of the same case: interleaved).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "quality_zoo.h"
#include "svg_eval.h"

/* Budget 0 runs each method at its defaults without a guard (the quality it
 * starts from). */
static const double BUDGETS[] = {0, 0.02, 0.05, 0.1};
#define N_BUDGETS ((int)(sizeof BUDGETS / sizeof BUDGETS[0]))
static const int METHODS[] = {STSA_SVG_METHOD_SVG, STSA_SVG_METHOD_SVG2,
                              STSA_SVG_METHOD_AUTO};
#define N_METHODS ((int)(sizeof METHODS / sizeof METHODS[0]))

/* Warm calls timed per run, each after a dense call. */
#define TIMED_REPS 2

typedef struct quality_opts {
  int threads, wan, by_family;
  const char *csv, *family, *size;
  uint64_t seed;
} quality_opts;

static const cli_opt QUALITY_OPTIONS[] = {
    CLI_THREADS_OPTION(quality_opts),
    {.name = "--wan",
     CLI_FLAG(quality_opts, wan),
     .help = "add the Wan-480p cases (minutes of dense reference)"},
    {.name = "--by-family",
     CLI_FLAG(quality_opts, by_family),
     .help = "also the worst true/budget of each family"},
    {.name = "--family",
     .metavar = "NAME",
     CLI_STR(quality_opts, family),
     .help = "only the cases of one family (e.g. objects)"},
    {.name = "--size",
     .metavar = "NAME",
     CLI_STR(quality_opts, size),
     .help = "only the cases of one size: small, medium or wan480p"},
    {.name = "--seed",
     .metavar = "N",
     CLI_U64(quality_opts, seed, 0, INT64_MAX),
     .help = "other draws of the same families (default 0: the zoo's own heads)"},
    {.name = "--csv",
     .metavar = "FILE",
     CLI_STR(quality_opts, csv),
     .help = "every head's figures, one line each"},
    {0}};

static void usage(void) {
  printf(
      "usage: stsa bench quality [--threads T] [--wan] [--by-family]\n"
      "                          [--family NAME] [--size NAME] [--seed N]\n"
      "                          [--csv FILE]\n"
      "Runs SVG, SVG2 and auto at error budgets 0 (none), 0.02, 0.05 and 0.1 on every\n"
      "head of the quality zoo and compares each head's true relative L2 error\n"
      "(against dense attention) with the budget and with the estimate.\n");
  const cli_opt *const tables[1] = {QUALITY_OPTIONS};
  cli_print_options(tables, 1);
}

/* One head under one method and budget. */
typedef struct head_result {
  int case_index;
  int64_t head;
  double true_err, est_err, density;
} head_result;

/* Every head's results of a (method, budget), and its timings. */
typedef struct run_set {
  head_result *r;
  int64_t n;
  double dense_ms, method_ms;
} run_set;

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
  cfg.top_p = 0.9; /* Sparse VideoGen 2's published settings */
  cfg.min_kv_fraction = 0.10;
  cfg.kmeans_iters_cold = 50;
  cfg.kmeans_iters_warm = 2;
  cfg.max_rel_error = budget;
  return cfg;
}

/* The case's inputs and its dense reference. */
typedef struct case_data {
  stsa_tensor q, k, v, ref, out;
  double *rel, *cosine;
  float *est, *density;
} case_data;

static void run_method(stsa_ctx *ctx, const zoo_case *c, int ci, case_data *d, int method,
                       double budget, run_set *set) {
  stsa_svg_config cfg = zoo_config(c, method, budget);
  stsa_svg *svg;
  cli_check(stsa_svg_create(ctx, &cfg, &svg), ctx, "creating the session");
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.est_error = d->est;
  rep.head_density = d->density;
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
  for (int64_t h = 0; h < c->heads; h++)
    set->r[set->n++] = (head_result){ci, h, d->rel[h], d->est[h], d->density[h]};
}

static void run_case(stsa_ctx *ctx, const zoo_case *c, int ci, run_set *sets) {
  case_data d;
  zoo_generate(c, &d.q, &d.k, &d.v);
  d.ref = svg_f32_tensor(1, d.q.shape[1], d.q.shape[2], d.q.shape[3]);
  d.out = svg_f32_tensor(1, d.q.shape[1], d.q.shape[2], d.q.shape[3]);
  const size_t H = (size_t)c->heads;
  d.rel = malloc(sizeof *d.rel * H);
  d.cosine = malloc(sizeof *d.cosine * H);
  d.est = malloc(sizeof *d.est * H);
  d.density = malloc(sizeof *d.density * H);
  if (!d.rel || !d.cosine || !d.est || !d.density)
    cli_die("out of memory");
  for (int m = 0; m < N_METHODS; m++)
    for (int b = 0; b < N_BUDGETS; b++)
      run_method(ctx, c, ci, &d, METHODS[m], BUDGETS[b], &sets[m * N_BUDGETS + b]);
  free(d.q.data);
  free(d.k.data);
  free(d.v.data);
  free(d.ref.data);
  free(d.out.data);
  free(d.rel);
  free(d.cosine);
  free(d.est);
  free(d.density);
}

static int by_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* What the table prints for one (method, budget) over the heads whose case
 * passes `keep` (all: NULL). */
typedef struct summary {
  int64_t n;
  double within, within_15, worst, est_min, est_median, mean_true, density, speedup;
} summary;

static summary summarise(const run_set *s, double budget, const zoo_case *cases,
                         const char *family) {
  summary out = {0};
  double *ratio = malloc(sizeof *ratio * (size_t)(s->n + 1));
  if (!ratio)
    cli_die("out of memory");
  int64_t nr = 0;
  for (int64_t i = 0; i < s->n; i++) {
    const head_result *r = &s->r[i];
    if (family && strcmp(cases[r->case_index].family->name, family))
      continue;
    out.n++;
    out.mean_true += r->true_err;
    out.density += r->density;
    if (budget > 0) {
      out.within += r->true_err <= budget;
      out.within_15 += r->true_err <= 1.5 * budget;
      out.worst = fmax(out.worst, r->true_err / budget);
      /* heads that ran dense (or nearly) have nothing to estimate */
      if (r->true_err > 1e-3 * budget)
        ratio[nr++] = r->est_err / r->true_err;
    }
  }
  if (out.n) {
    out.mean_true /= (double)out.n;
    out.density /= (double)out.n;
    out.within /= (double)out.n;
    out.within_15 /= (double)out.n;
  }
  qsort(ratio, (size_t)nr, sizeof *ratio, by_double);
  out.est_min = nr ? ratio[0] : NAN;
  out.est_median = nr ? ratio[nr / 2] : NAN;
  out.speedup = s->method_ms > 0 ? s->dense_ms / s->method_ms : 0;
  free(ratio);
  return out;
}

static void print_table(const run_set *sets, const zoo_case *cases) {
  printf("%-6s %-6s %6s %8s %8s %8s %8s %8s %8s %8s %8s\n", "method", "budget", "heads",
         "<=b", "<=1.5b", "worst/b", "est/true", "(median)", "mean err", "density",
         "speedup");
  for (int m = 0; m < N_METHODS; m++)
    for (int b = 0; b < N_BUDGETS; b++) {
      const summary s = summarise(&sets[m * N_BUDGETS + b], BUDGETS[b], cases, NULL);
      char bud[16];
      snprintf(bud, sizeof bud, BUDGETS[b] > 0 ? "%.2f" : "none", BUDGETS[b]);
      if (BUDGETS[b] > 0)
        printf("%-6s %-6s %6lld %7.1f%% %7.1f%% %8.2f %8.3f %8.3f %8.4f %8.3f %7.2fx\n",
               stsa_svg_method_name(METHODS[m]), bud, (long long)s.n, 100 * s.within,
               100 * s.within_15, s.worst, s.est_min, s.est_median, s.mean_true,
               s.density, s.speedup);
      else
        printf("%-6s %-6s %6lld %8s %8s %8s %8s %8s %8.4f %8.3f %7.2fx\n",
               stsa_svg_method_name(METHODS[m]), bud, (long long)s.n, "-", "-", "-", "-",
               "-", s.mean_true, s.density, s.speedup);
    }
}

/* Per family: the mean true error without a budget, and the worst
 * true/budget at each budget. */
static void print_families(const run_set *sets, const zoo_case *cases, int ncases) {
  printf("\nper family: mean error without a budget; worst true/budget at 0.02 0.05 "
         "0.1\n%-16s",
         "family");
  for (int m = 0; m < N_METHODS; m++)
    printf(" | %-4s %6s %5s %5s %5s", stsa_svg_method_name(METHODS[m]), "none", ".02",
           ".05", ".1");
  printf("\n");
  for (int ci = 0; ci < ncases; ci++) {
    const char *fam = cases[ci].family->name;
    int seen = 0;
    for (int j = 0; j < ci; j++)
      seen |= !strcmp(cases[j].family->name, fam);
    if (seen)
      continue;
    printf("%-16s", fam);
    for (int m = 0; m < N_METHODS; m++) {
      printf(" |     ");
      for (int b = 0; b < N_BUDGETS; b++) {
        const summary s = summarise(&sets[m * N_BUDGETS + b], BUDGETS[b], cases, fam);
        printf(b ? " %5.2f" : " %6.4f", b ? s.worst : s.mean_true);
      }
    }
    printf("\n");
  }
}

static void write_csv(const char *path, const run_set *sets, const zoo_case *cases) {
  FILE *f = fopen(path, "w");
  if (!f)
    cli_die("bench quality: cannot write '%s'", path);
  fprintf(f, "family,size,dtype,seed,head,method,budget,true_err,est_err,density\n");
  for (int m = 0; m < N_METHODS; m++)
    for (int b = 0; b < N_BUDGETS; b++) {
      const run_set *s = &sets[m * N_BUDGETS + b];
      for (int64_t i = 0; i < s->n; i++) {
        const head_result *r = &s->r[i];
        const zoo_case *c = &cases[r->case_index];
        fprintf(f, "%s,%s,%s,%llu,%lld,%s,%g,%.6g,%.6g,%.6g\n", c->family->name,
                c->size_name, stsa_dtype_name(c->dtype), (unsigned long long)c->seed,
                (long long)r->head, stsa_svg_method_name(METHODS[m]), BUDGETS[b],
                r->true_err, r->est_err, r->density);
      }
    }
  if (fclose(f) != 0)
    cli_die("bench quality: writing '%s' failed", path);
}

int bench_quality(int argc, char **argv) {
  quality_opts o = {0};
  static const cli_command cmd = {"bench quality", "stsa bench quality --help", usage};
  const cli_opt_set set = {QUALITY_OPTIONS, &o};
  cli_parse(&cmd, argc, argv, 2, &set, 1);
  const int cap = zoo_case_capacity();
  zoo_case *cases = malloc(sizeof *cases * (size_t)cap);
  if (!cases)
    cli_die("out of memory");
  int ncases =
      zoo_cases(o.wan || (o.size && !strcmp(o.size, "wan480p")), o.seed, cases, cap);
  int kept = 0;
  for (int i = 0; i < ncases; i++)
    if ((!o.family || !strcmp(o.family, cases[i].family->name)) &&
        (!o.size || !strcmp(o.size, cases[i].size_name)))
      cases[kept++] = cases[i];
  if (!kept)
    cli_die("bench quality: no case of family '%s' and size '%s' (see --by-family)",
            o.family ? o.family : "any", o.size ? o.size : "any");
  ncases = kept;
  int64_t heads = 0;
  for (int i = 0; i < ncases; i++)
    heads += cases[i].heads;
  stsa_ctx *ctx = cli_ctx_create();
  if (o.threads)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, o.threads), ctx, "--threads");
  run_set sets[N_METHODS * N_BUDGETS];
  for (int i = 0; i < N_METHODS * N_BUDGETS; i++) {
    sets[i] = (run_set){malloc(sizeof(head_result) * (size_t)heads), 0, 0, 0};
    if (!sets[i].r)
      cli_die("out of memory");
  }
  for (int ci = 0; ci < ncases; ci++)
    run_case(ctx, &cases[ci], ci, sets);
  int64_t threads;
  stsa_ctx_get(ctx, STSA_PARAM_THREADS, &threads);
  printf("quality zoo: %d cases, %lld heads, %lld threads; true error = rel L2 against "
         "dense over all rows\n",
         ncases, (long long)heads, (long long)threads);
  print_table(sets, cases);
  if (o.by_family)
    print_families(sets, cases, ncases);
  if (o.csv)
    write_csv(o.csv, sets, cases);
  for (int i = 0; i < N_METHODS * N_BUDGETS; i++)
    free(sets[i].r);
  free(cases);
  stsa_ctx_free(ctx);
  return 0;
}
