/*
 * plot_pareto_zoo.c — `stsa plot pareto --zoo`: true relative L2 error
 * against realised density of SVG, SVG2 and auto on every head of the
 * quality zoo (measured by quality_eval.c, as `stsa bench quality` measures
 * them), one panel per error budget (none, 0.02, 0.05, 0.1): a small mark
 * per head and method, a large one at each method's mean, and the budget as
 * a dashed line. The table of the plotted means is printed; --json writes
 * every point and the table.
 *
 * Whether auto sits on the lower-left frontier is counted per head: auto is
 * dominated on a head when SVG or SVG2 (same head, same budget) ran at no
 * more density (within DOMINATE_DENSITY) with an error lower by more than
 * DOMINATE_ERROR. Tolerances, because auto often runs the very plan of one
 * of them, and its figures then differ only by rounding.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "plot_cmd.h"
#include "plot_pareto_zoo.h"
#include "quality_eval.h"

#define DOMINATE_DENSITY 1e-3
#define DOMINATE_ERROR 0.01 /* relative */
/* Errors under this (heads that ran densely or nearly) sit on the bottom
 * edge of the log axis: below it no budget decides anything. */
#define ERROR_FLOOR 1e-4

/* Indices into QUALITY_METHODS (svg, svg2, auto). */
enum { M_SVG = 0, M_SVG2 = 1, M_AUTO = 2 };

/* What the table prints and the large marks show, per method and budget. */
typedef struct zoo_aggregate {
  int64_t n;
  double mean_density, mean_err, median_err;
  double within;      /* share of heads with true error <= budget (budget > 0) */
  double worst;       /* largest true error / budget (budget > 0) */
  double undominated; /* auto only: share of heads where it is not dominated */
} zoo_aggregate;

struct pareto_zoo {
  zoo_case *cases;
  int ncases;
  int64_t heads, threads;
  uint64_t seed;
  quality_set sets[QUALITY_N_METHODS * QUALITY_N_BUDGETS];
  zoo_aggregate agg[QUALITY_N_METHODS][QUALITY_N_BUDGETS];
};

/* ---- the aggregates ------------------------------------------------------------ */

static const quality_set *set_of(const pareto_zoo *z, int m, int b) {
  return &z->sets[quality_set_index(m, b)];
}

/* Whether method m's head i (at budget index b) beats auto's by the
 * tolerances of the file's comment. */
static int dominates_auto(const pareto_zoo *z, int m, int b, int64_t i) {
  const quality_head *a = &set_of(z, M_AUTO, b)->r[i], *o = &set_of(z, m, b)->r[i];
  if (a->case_index != o->case_index || a->head != o->head)
    cli_die("plot pareto --zoo: the methods' heads are out of step");
  return o->density <= a->density + DOMINATE_DENSITY &&
         o->true_err < (1 - DOMINATE_ERROR) * a->true_err;
}

static zoo_aggregate aggregate(const pareto_zoo *z, int m, int b) {
  const quality_set *s = set_of(z, m, b);
  const double budget = QUALITY_BUDGETS[b];
  zoo_aggregate g = {.n = s->n, .worst = 0, .undominated = NAN};
  double *err = malloc(sizeof *err * (size_t)(s->n + 1));
  if (!err)
    cli_die("out of memory");
  int64_t undominated = 0;
  for (int64_t i = 0; i < s->n; i++) {
    const quality_head *r = &s->r[i];
    g.mean_density += r->density;
    g.mean_err += r->true_err;
    err[i] = r->true_err;
    if (budget > 0) {
      g.within += r->true_err <= budget;
      g.worst = fmax(g.worst, r->true_err / budget);
    }
    if (m == M_AUTO)
      undominated += !dominates_auto(z, M_SVG, b, i) && !dominates_auto(z, M_SVG2, b, i);
  }
  const double n = (double)(s->n ? s->n : 1);
  g.mean_density /= n;
  g.mean_err /= n;
  g.within /= n;
  g.median_err = s->n ? cli_median(err, (int)s->n) : NAN;
  if (m == M_AUTO)
    g.undominated = (double)undominated / n;
  if (budget <= 0)
    g.within = g.worst = NAN;
  free(err);
  return g;
}

/* ---- the run ------------------------------------------------------------------- */

pareto_zoo *pareto_zoo_create(const pareto_zoo_setup *s) {
  pareto_zoo *z = calloc(1, sizeof *z);
  if (!z)
    cli_die("out of memory");
  z->cases = quality_select_cases("plot pareto --zoo", s->wan, s->seed, s->family,
                                  s->size, &z->ncases);
  z->heads = quality_heads(z->cases, z->ncases);
  z->seed = s->seed;
  return z;
}

void pareto_zoo_evaluate(stsa_ctx *ctx, pareto_zoo *z) {
  stsa_ctx_get(ctx, STSA_PARAM_THREADS, &z->threads);
  quality_run(ctx, z->cases, z->ncases, z->sets);
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    for (int b = 0; b < QUALITY_N_BUDGETS; b++)
      z->agg[m][b] = aggregate(z, m, b);
}

void pareto_zoo_free(pareto_zoo *z) {
  if (!z)
    return;
  quality_sets_free(z->sets);
  free(z->cases);
  free(z);
}

static const char *budget_name(int b, char *buf, size_t len) {
  snprintf(buf, len, QUALITY_BUDGETS[b] > 0 ? "%.2f" : "none", QUALITY_BUDGETS[b]);
  return buf;
}

/* ---- the table as text and JSON -------------------------------------------------- */

void pareto_zoo_print(const pareto_zoo *z) {
  printf("plot pareto --zoo: %d cases, %lld heads, %lld threads; true error = rel L2 "
         "against dense over all rows\n",
         z->ncases, (long long)z->heads, (long long)z->threads);
  printf("  %-6s %-6s %6s %8s %9s %9s %7s %8s %11s\n", "method", "budget", "heads",
         "density", "mean err", "median", "<=b", "worst/b", "undominated");
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    for (int b = 0; b < QUALITY_N_BUDGETS; b++) {
      const zoo_aggregate *g = &z->agg[m][b];
      char bud[16], within[16] = "-", worst[16] = "-", und[16] = "-";
      if (QUALITY_BUDGETS[b] > 0) {
        snprintf(within, sizeof within, "%.1f%%", 100 * g->within);
        snprintf(worst, sizeof worst, "%.2f", g->worst);
      }
      if (m == M_AUTO)
        snprintf(und, sizeof und, "%.1f%%", 100 * g->undominated);
      printf("  %-6s %-6s %6lld %8.3f %9.4f %9.4f %7s %8s %11s\n",
             stsa_svg_method_name(QUALITY_METHODS[m]), budget_name(b, bud, sizeof bud),
             (long long)g->n, g->mean_density, g->mean_err, g->median_err, within, worst,
             und);
    }
  printf(
      "  auto dominated: svg or svg2 on the same head at no more density (+%g) with an "
      "error lower by more than %g%%\n",
      DOMINATE_DENSITY, 100 * DOMINATE_ERROR);
}

static json_t *budget_json(int b) {
  return QUALITY_BUDGETS[b] > 0 ? json_real(QUALITY_BUDGETS[b]) : json_null();
}

static json_t *points_json(const pareto_zoo *z) {
  json_t *points = json_array();
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    for (int b = 0; b < QUALITY_N_BUDGETS; b++) {
      const quality_set *s = set_of(z, m, b);
      for (int64_t i = 0; i < s->n; i++) {
        const quality_head *r = &s->r[i];
        const zoo_case *c = &z->cases[r->case_index];
        json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:s}", "family", c->family->name,
                              "size", c->size_name, "dtype", stsa_dtype_name(c->dtype),
                              "seed", (json_int_t)c->seed, "head", (json_int_t)r->head,
                              "method", stsa_svg_method_name(QUALITY_METHODS[m]));
        json_object_set_new(j, "budget", budget_json(b));
        json_object_set_new(j, "density", plot_json_real(r->density));
        json_object_set_new(j, "rel_l2", plot_json_real(r->true_err));
        json_object_set_new(j, "est_err", plot_json_real(r->est_err));
        json_array_append_new(points, j);
      }
    }
  return points;
}

static json_t *aggregates_json(const pareto_zoo *z) {
  json_t *rows = json_array();
  for (int m = 0; m < QUALITY_N_METHODS; m++)
    for (int b = 0; b < QUALITY_N_BUDGETS; b++) {
      const zoo_aggregate *g = &z->agg[m][b];
      json_t *j =
          json_pack("{s:s, s:I}", "method", stsa_svg_method_name(QUALITY_METHODS[m]),
                    "heads", (json_int_t)g->n);
      json_object_set_new(j, "budget", budget_json(b));
      json_object_set_new(j, "mean_density", plot_json_real(g->mean_density));
      json_object_set_new(j, "mean_rel_l2", plot_json_real(g->mean_err));
      json_object_set_new(j, "median_rel_l2", plot_json_real(g->median_err));
      json_object_set_new(j, "within_budget", plot_json_real(g->within));
      json_object_set_new(j, "worst_over_budget", plot_json_real(g->worst));
      json_object_set_new(j, "undominated", plot_json_real(g->undominated));
      json_array_append_new(rows, j);
    }
  return rows;
}

char *pareto_zoo_json(const pareto_zoo *z) {
  json_t *root = json_pack("{s:s, s:s, s:i, s:I, s:I, s:I}", "tool",
                           "stsa plot pareto --zoo", "version", stsa_version_string(),
                           "cases", z->ncases, "heads", (json_int_t)z->heads, "seed",
                           (json_int_t)z->seed, "threads", (json_int_t)z->threads);
  json_object_set_new(root, "points", points_json(z));
  json_object_set_new(root, "aggregates", aggregates_json(z));
  return plot_json_text(root);
}

/* ---- the picture ------------------------------------------------------------------- */

static const rgb METHOD_COL[QUALITY_N_METHODS] = {
    {31, 110, 180}, {238, 128, 30}, {44, 160, 44}};
static const int METHOD_SHAPE[QUALITY_N_METHODS] = {0, 1, 2};
/* Marks shrink in drawing order, so where auto ran the very plan of SVG or
 * SVG2 its circle sits inside their square or diamond and both show. */
static const int HEAD_MARK[QUALITY_N_METHODS] = {9, 11, 5};
static const int MEAN_MARK[QUALITY_N_METHODS] = {20, 24, 12};

enum {
  PANEL_W = 460,
  PANEL_H = 300,
  LEFT = 130,
  GAP_X = 110,
  TOP = 150,
  GAP_Y = 120,
  BOTTOM = 70
};

/* c 40% of the way to white: a head's mark, under the means' full colours. */
static rgb tint(rgb c) {
  return (rgb){(uint8_t)((3 * c.r + 2 * 255) / 5), (uint8_t)((3 * c.g + 2 * 255) / 5),
               (uint8_t)((3 * c.b + 2 * 255) / 5)};
}

/* The error axis: every head's error above the floor, padded. */
static void error_range(const pareto_zoo *z, double *lo, double *hi) {
  *lo = INFINITY, *hi = QUALITY_BUDGETS[QUALITY_N_BUDGETS - 1];
  for (int i = 0; i < QUALITY_N_METHODS * QUALITY_N_BUDGETS; i++)
    for (int64_t j = 0; j < z->sets[i].n; j++) {
      const double e = z->sets[i].r[j].true_err;
      if (isfinite(e)) {
        *lo = fmin(*lo, e);
        *hi = fmax(*hi, e);
      }
    }
  *lo = fmax(*lo, ERROR_FLOOR) / 2;
  *hi *= 1.5;
}

/* Where an error is drawn: on the floor, just above the frame's bottom edge,
 * when it is under it (or 0: a head that ran densely). */
static double on_axis(double err, double lo) { return fmax(err, 1.3 * lo); }

static void draw_panel(canvas *c, int x0, int y0, int b, const pareto_zoo *z, double lo,
                       double hi) {
  /* a little past 1, so heads that ran densely are not cut by the frame */
  const plot_axis ax = {0, 1.04, 0, x0, x0 + PANEL_W};
  const plot_axis ay = {lo, hi, 1, y0 + PANEL_H, y0};
  plot_axes(c, &ax, &ay, "realised density",
            x0 == LEFT ? "true relative L2 vs dense (log)" : "", TS, 1);
  char title[96];
  if (QUALITY_BUDGETS[b] > 0)
    snprintf(title, sizeof title, "budget %.2f: auto undominated on %.1f%%",
             QUALITY_BUDGETS[b], 100 * z->agg[M_AUTO][b].undominated);
  else
    snprintf(title, sizeof title, "no budget: auto undominated on %.1f%%",
             100 * z->agg[M_AUTO][b].undominated);
  canvas_text_align(c, x0 + PANEL_W / 2, y0 - 26, title, TS, 1, PLOT_BLACK);
  for (int m = 0; m < QUALITY_N_METHODS; m++) {
    const quality_set *s = set_of(z, m, b);
    for (int64_t i = 0; i < s->n; i++)
      canvas_marker(c, (int)lround(axis_map(&ax, s->r[i].density)),
                    (int)lround(axis_map(&ay, on_axis(s->r[i].true_err, lo))),
                    HEAD_MARK[m], METHOD_SHAPE[m], tint(METHOD_COL[m]));
  }
  if (QUALITY_BUDGETS[b] > 0) {
    const double y = axis_map(&ay, QUALITY_BUDGETS[b]);
    canvas_line(c, x0, y, x0 + PANEL_W, y, 2, 8, PLOT_RED);
    char label[32];
    snprintf(label, sizeof label, "budget %.2f", QUALITY_BUDGETS[b]);
    canvas_text_align(c, x0 + PANEL_W - 6, (int)lround(y) - text_height(TS) - 6, label,
                      TS, 2, PLOT_RED);
  }
  for (int m = 0; m < QUALITY_N_METHODS; m++) {
    const zoo_aggregate *g = &z->agg[m][b];
    const int px = (int)lround(axis_map(&ax, g->mean_density)),
              py = (int)lround(axis_map(&ay, on_axis(g->mean_err, lo)));
    canvas_marker(c, px, py, MEAN_MARK[m] + 4, METHOD_SHAPE[m], PLOT_BLACK);
    canvas_marker(c, px, py, MEAN_MARK[m], METHOD_SHAPE[m], METHOD_COL[m]);
  }
}

void pareto_zoo_draw(canvas *c, const pareto_zoo *z) {
  double lo, hi;
  error_range(z, &lo, &hi);
  canvas_init(c, LEFT + 2 * PANEL_W + GAP_X + 40, TOP + 2 * PANEL_H + GAP_Y + BOTTOM,
              PLOT_WHITE);
  char title[128];
  snprintf(title, sizeof title,
           "The quality zoo: true error against realised density, %lld heads",
           (long long)z->heads);
  canvas_text_align(c, c->w / 2, 12, title, TS, 1, PLOT_BLACK);
  snprintf(title, sizeof title,
           "small marks: one head each; large: the mean; errors under %g on the floor",
           ERROR_FLOOR);
  canvas_text_align(c, c->w / 2, 38, title, TS, 1, PLOT_GREY);
  legend_entry leg[QUALITY_N_METHODS + 1] = {{"SVG", METHOD_COL[M_SVG], 3},
                                             {"SVG2 (top-p 0.9)", METHOD_COL[M_SVG2], 4},
                                             {"auto", METHOD_COL[M_AUTO], 5},
                                             {"error budget", PLOT_RED, 2}};
  plot_legend_row(c, c->w / 2, 64, leg, QUALITY_N_METHODS + 1, TS);
  for (int b = 0; b < QUALITY_N_BUDGETS; b++)
    draw_panel(c, LEFT + (b % 2) * (PANEL_W + GAP_X), TOP + (b / 2) * (PANEL_H + GAP_Y),
               b, z, lo, hi);
}
