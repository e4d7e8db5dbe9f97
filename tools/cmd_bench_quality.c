/*
 * cmd_bench_quality.c — `stsa bench quality`: the error guard judged on the
 * quality zoo (quality_zoo.h), every head under each method at each budget
 * (measured by quality_eval.c): its TRUE relative L2 error ||o - o_dense|| /
 * ||o_dense|| over all rows against dense attention of the same inputs, set
 * beside the estimate the session reported. Per method and budget: the
 * share of heads within the budget (and within 1.5 x), the worst
 * true/budget, the estimate/true ratio (lowest and median: below 1 the
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
#include "quality_eval.h"

typedef struct quality_opts {
  int threads, wan, by_family;
  const char *csv, *family, *size;
  uint64_t seed;
} quality_opts;

static const cli_opt QUALITY_OPTIONS[] = {
    CLI_THREADS_OPTION(quality_opts),
    QUALITY_WAN_OPTION(quality_opts),
    {.name = "--by-family",
     CLI_FLAG(quality_opts, by_family),
     .help = "also the worst true/budget of each family"},
    QUALITY_FAMILY_OPTION(quality_opts),
    QUALITY_SIZE_OPTION(quality_opts),
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

static summary summarise(const quality_set *s, double budget, const zoo_case *cases,
                         const char *family) {
  summary out = {0};
  double *ratio = malloc(sizeof *ratio * (size_t)(s->n + 1));
  if (!ratio)
    cli_die("out of memory");
  int64_t nr = 0;
  for (int64_t i = 0; i < s->n; i++) {
    const quality_head *r = &s->r[i];
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

static void print_table(const quality_set *sets, const zoo_case *cases) {
  printf("%-6s %-6s %6s %8s %8s %8s %8s %8s %8s %8s %8s\n", "method", "budget", "heads",
         "<=b", "<=1.5b", "worst/b", "est/true", "(median)", "mean err", "density",
         "speedup");
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    for (int b = 0; b < QUALITY_N_BUDGETS; b++) {
      const summary s =
          summarise(&sets[quality_set_index(m, b)], QUALITY_BUDGETS[b], cases, NULL);
      char bud[16];
      snprintf(bud, sizeof bud, QUALITY_BUDGETS[b] > 0 ? "%.2f" : "none",
               QUALITY_BUDGETS[b]);
      if (QUALITY_BUDGETS[b] > 0)
        printf("%-6s %-6s %6lld %7.1f%% %7.1f%% %8.2f %8.3f %8.3f %8.4f %8.3f %7.2fx\n",
               stsa_svg_method_name(QUALITY_METHODS[m]), bud, (long long)s.n,
               100 * s.within, 100 * s.within_15, s.worst, s.est_min, s.est_median,
               s.mean_true, s.density, s.speedup);
      else
        printf("%-6s %-6s %6lld %8s %8s %8s %8s %8s %8.4f %8.3f %7.2fx\n",
               stsa_svg_method_name(QUALITY_METHODS[m]), bud, (long long)s.n, "-", "-",
               "-", "-", "-", s.mean_true, s.density, s.speedup);
    }
}

/* Per family: the mean true error without a budget, and the worst
 * true/budget at each budget. */
static void print_families(const quality_set *sets, const zoo_case *cases, int ncases) {
  printf("\nper family: mean error without a budget; worst true/budget at 0.02 0.05 "
         "0.1\n%-16s",
         "family");
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    printf(" | %-4s %6s %5s %5s %5s", stsa_svg_method_name(QUALITY_METHODS[m]), "none",
           ".02", ".05", ".1");
  printf("\n");
  for (int ci = 0; ci < ncases; ci++) {
    const char *fam = cases[ci].family->name;
    int seen = 0;
    for (int j = 0; j < ci; j++)
      seen |= !strcmp(cases[j].family->name, fam);
    if (seen)
      continue;
    printf("%-16s", fam);
    for (int m = 0; m < QUALITY_N_METHODS; m++) {
      printf(" |     ");
      for (int b = 0; b < QUALITY_N_BUDGETS; b++) {
        const summary s =
            summarise(&sets[quality_set_index(m, b)], QUALITY_BUDGETS[b], cases, fam);
        printf(b ? " %5.2f" : " %6.4f", b ? s.worst : s.mean_true);
      }
    }
    printf("\n");
  }
}

static void write_csv(const char *path, const quality_set *sets, const zoo_case *cases) {
  FILE *f = fopen(path, "w");
  if (!f)
    cli_die("bench quality: cannot write '%s'", path);
  fprintf(
      f,
      "family,size,dtype,seed,head,method,budget,true_err,est_err,density,choice,reason");
  for (int c = 0; c < STSA_AUTO_CANDIDATE_COUNT_; c++) /* method auto's */
    fprintf(f, ",%s_density,%s_bound", stsa_auto_candidate_name(c),
            stsa_auto_candidate_name(c));
  fprintf(f, "\n");
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    for (int b = 0; b < QUALITY_N_BUDGETS; b++) {
      const quality_set *s = &sets[quality_set_index(m, b)];
      for (int64_t i = 0; i < s->n; i++) {
        const quality_head *r = &s->r[i];
        const zoo_case *c = &cases[r->case_index];
        fprintf(f, "%s,%s,%s,%llu,%lld,%s,%g,%.6g,%.6g,%.6g,%s,%s", c->family->name,
                c->size_name, stsa_dtype_name(c->dtype), (unsigned long long)c->seed,
                (long long)r->head, stsa_svg_method_name(QUALITY_METHODS[m]),
                QUALITY_BUDGETS[b], r->true_err, r->est_err, r->density,
                stsa_auto_candidate_name(r->choice), stsa_auto_reason_name(r->reason));
        for (int k = 0; k < STSA_AUTO_CANDIDATE_COUNT_; k++)
          fprintf(f, ",%.6g,%.6g", r->cand_density[k], r->cand_bound[k]);
        fprintf(f, "\n");
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
  int ncases;
  zoo_case *cases =
      quality_select_cases("bench quality", o.wan, o.seed, o.family, o.size, &ncases);
  const int64_t heads = quality_heads(cases, ncases);
  stsa_ctx *ctx = cli_ctx_create();
  if (o.threads)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, o.threads), ctx, "--threads");
  quality_set sets[QUALITY_N_METHODS * QUALITY_N_BUDGETS];
  quality_run(ctx, cases, ncases, sets);
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
  quality_sets_free(sets);
  free(cases);
  stsa_ctx_free(ctx);
  return 0;
}
