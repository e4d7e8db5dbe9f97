/*
 * plot_pareto.c — `stsa plot pareto`: relative L2 error against realised
 * density of SVG, SVG2 and the tile oracle (pareto_eval.c), one panel per
 * head kind of the built-in workload (semantic, spatial, temporal), with the
 * table printed and, with --json, written as JSON; with --zoo the same for
 * SVG, SVG2 and auto on the quality zoo's heads (plot_pareto_zoo.c). Outputs
 * are checked before the computation and committed together, as `stsa run`
 * does.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_options.h"
#include "cli_util.h"
#include "pareto_eval.h"
#include "plot_cmd.h"
#include "plot_pareto_zoo.h"
#include "quality_eval.h"

typedef struct pareto_opts {
  const char *out, *json;
  int64_t frames, height, width, heads_per_kind, head_dim;
  int threads, tile;
  uint64_t seed;
  int n_densities;
  double densities[PARETO_MAX_DENSITIES];
  int zoo, wan;
  const char *family, *size;
} pareto_opts;

/* --densities 0.05,0.1,...: increasing kept fractions in (0, 1]. */
static void set_densities(void *base, const char *name, const char *value) {
  pareto_opts *o = base;
  char buf[512];
  if (strlen(value) >= sizeof buf)
    cli_die("%s: the list is too long", name);
  strcpy(buf, value);
  o->n_densities = 0;
  for (char *save, *tok = strtok_r(buf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (o->n_densities == PARETO_MAX_DENSITIES)
      cli_die("%s takes at most %d densities", name, PARETO_MAX_DENSITIES);
    o->densities[o->n_densities++] = cli_parse_double(name, tok, 1e-6, 1.0);
  }
  if (!o->n_densities)
    cli_die("%s expects a comma-separated list of densities, got '%s'", name, value);
}

static const cli_opt PARETO_OPTIONS[] = {
    {.help = "output (with neither, only the table is printed):"},
    {.name = "--out", .metavar = "FILE", CLI_STR(pareto_opts, out), .help = "the PNG"},
    {.name = "--json",
     .metavar = "FILE",
     CLI_STR(pareto_opts, json),
     .help = "the table as JSON (with --zoo, and every head's point)"},
    {.help = "the built-in workload (the default):"},
    {.name = "--frames",
     .metavar = "F",
     CLI_I64(pareto_opts, frames, 1, 1 << 16),
     .help = "its video geometry, no text (default 8 x 24 x 32)"},
    {.name = "--height", .metavar = "Hp", CLI_I64(pareto_opts, height, 1, 1 << 16)},
    {.name = "--width", .metavar = "Wp", CLI_I64(pareto_opts, width, 1, 1 << 16)},
    {.name = "--heads-per-kind",
     .metavar = "K",
     CLI_I64(pareto_opts, heads_per_kind, 1, 64),
     .help = "semantic, spatial and temporal heads of each (default 2)"},
    {.name = "--head-dim",
     .metavar = "D",
     CLI_I64(pareto_opts, head_dim, 1, 512),
     .help = "head dimension (default 64)"},
    {.name = "--seed",
     .metavar = "N",
     CLI_U64(pareto_opts, seed, 0, INT64_MAX),
     .help = "its seed (default 1); with --zoo, the zoo's draw (default 0:\n"
             "the zoo's own heads)"},
    {.help = "the methods:"},
    {.name = "--densities",
     .metavar = "LIST",
     CLI_CALL(set_densities),
     .help = "requested kept fractions, comma-separated, at most 16\n"
             "(default 0.05,0.1,0.15,0.2,0.3,0.4)"},
    {.name = "--tile",
     .metavar = "T",
     CLI_INT(pareto_opts, tile, 16, 4096),
     .help = "the oracle's square tiles, a multiple of 16 (default 64)"},
    CLI_THREADS_OPTION(pareto_opts),
    {.help = "or the quality zoo (`stsa bench quality`): SVG, SVG2 and auto, no budget\n"
             "and budgets 0.02, 0.05, 0.1, one panel per budget:"},
    {.name = "--zoo", CLI_FLAG(pareto_opts, zoo), .help = "plot the zoo's heads"},
    QUALITY_FAMILY_OPTION(pareto_opts),
    QUALITY_SIZE_OPTION(pareto_opts),
    QUALITY_WAN_OPTION(pareto_opts),
    {0}};

static void pareto_usage(void) {
  printf(
      "usage: stsa plot pareto [--out pareto.png] [--json T.json] [--frames F --height "
      "Hp\n"
      "                        --width Wp] [--heads-per-kind K] [--head-dim D]\n"
      "                        [--densities 0.05,0.1,...] [--tile T] [--seed N]\n"
      "                        [--threads T]\n"
      "       stsa plot pareto --zoo [--out zoo.png] [--json T.json] [--family NAME]\n"
      "                        [--size NAME] [--wan] [--seed N] [--threads T]\n"
      "Relative L2 against dense of SVG, SVG2 (key budget = density) and an oracle\n"
      "keeping each query tile's heaviest key tiles, against realised density, one\n"
      "panel per kind of the built-in workload's heads (semantic, spatial,\n"
      "temporal); with --zoo, of SVG, SVG2 and auto on every head of the quality\n"
      "zoo, one panel per error budget. The table is always printed.\n");
  const cli_opt *const tables[1] = {PARETO_OPTIONS};
  cli_print_options(tables, 1);
  printf("See docs/cli.md.\n");
}

/* ---- the table as text and JSON ---------------------------------------------- */

static void print_table(const pareto_setup *s, const pareto_table *t) {
  const stsa_geometry *g = &s->geometry;
  printf("plot pareto: %lld x %lld x %lld = %lld tokens, D = %lld, %lld heads per kind; "
         "oracle tiles %d x %d\n",
         (long long)g->frames, (long long)g->height, (long long)g->width,
         (long long)(g->frames * g->height * g->width), (long long)s->head_dim,
         (long long)s->heads_per_kind, s->oracle_tile, s->oracle_tile);
  printf(
      "  relative L2 against dense (realised density), mean over the heads of a kind\n");
  printf("  %-7s %-9s", "method", "requested");
  for (int k = 0; k < PARETO_KINDS; k++)
    printf("   %-19s", stsa_head_kind_name(PARETO_KIND[k]));
  printf("\n");
  for (int m = 0; m < PARETO_METHODS; m++)
    for (int di = 0; di < s->n_densities; di++) {
      printf("  %-7s %9.3f", PARETO_METHOD_NAMES[m], s->densities[di]);
      for (int k = 0; k < PARETO_KINDS; k++)
        printf("   %8.4f (%7.4f)", t->p[m][di][k].rel_l2, t->p[m][di][k].density);
      printf("\n");
    }
  printf("  time: dense %.0f ms; svg %.0f ms, svg2 %.0f ms, oracle %.0f ms (all "
         "densities)\n",
         t->dense_ms, t->method_ms[PARETO_SVG], t->method_ms[PARETO_SVG2],
         t->method_ms[PARETO_ORACLE]);
}

static char *table_json(const pareto_setup *s, const pareto_table *t) {
  const stsa_geometry *g = &s->geometry;
  json_t *root = json_pack(
      "{s:s, s:s, s:{s:I, s:I, s:I}, s:I, s:I, s:i, s:I}", "tool", "stsa plot pareto",
      "version", stsa_version_string(), "geometry", "frames", (json_int_t)g->frames,
      "height", (json_int_t)g->height, "width", (json_int_t)g->width, "head_dim",
      (json_int_t)s->head_dim, "heads_per_kind", (json_int_t)s->heads_per_kind,
      "oracle_tile", s->oracle_tile, "seed", (json_int_t)s->seed);
  json_t *points = json_array();
  for (int m = 0; m < PARETO_METHODS; m++)
    for (int di = 0; di < s->n_densities; di++)
      for (int k = 0; k < PARETO_KINDS; k++) {
        const pareto_point *p = &t->p[m][di][k];
        json_t *j = json_object();
        json_object_set_new(j, "method", json_string(PARETO_METHOD_NAMES[m]));
        json_object_set_new(j, "kind", json_string(stsa_head_kind_name(PARETO_KIND[k])));
        json_object_set_new(j, "requested", json_real(s->densities[di]));
        json_object_set_new(j, "density", plot_json_real(p->density));
        json_object_set_new(j, "rel_l2", plot_json_real(p->rel_l2));
        json_array_append_new(points, j);
      }
  json_object_set_new(root, "points", points);
  json_object_set_new(root, "dense_ms", plot_json_real(t->dense_ms));
  return plot_json_text(root);
}

/* ---- the picture ----------------------------------------------------------------- */

static const rgb METHOD_COL[PARETO_METHODS] = {
    {31, 110, 180}, {238, 128, 30}, {44, 160, 44}};

enum { PANEL_W = 400, PANEL_H = 340, LEFT = 100, GAP = 90, TOP = 110, BOTTOM = 80 };

/* The error range of every point, padded, as a log axis. */
static void error_range(const pareto_setup *s, const pareto_table *t, double *lo,
                        double *hi, double *dmax) {
  *lo = INFINITY, *hi = 0, *dmax = 0;
  for (int m = 0; m < PARETO_METHODS; m++)
    for (int di = 0; di < s->n_densities; di++)
      for (int k = 0; k < PARETO_KINDS; k++) {
        const pareto_point *p = &t->p[m][di][k];
        if (p->rel_l2 > 0 && isfinite(p->rel_l2)) {
          *lo = fmin(*lo, p->rel_l2);
          *hi = fmax(*hi, p->rel_l2);
        }
        *dmax = fmax(*dmax, p->density);
      }
  if (!(*hi > 0))
    *lo = 1e-4, *hi = 1;             /* nothing to show: an honest empty frame */
  *lo = fmax(*lo, *hi * 1e-6) / 1.5; /* exact (0) points sit on the floor */
  *hi *= 1.5;
  *dmax = fmin(1.0, *dmax * 1.1 + 0.01);
}

static void draw_panel(canvas *c, int x0, int k, const pareto_setup *s,
                       const pareto_table *t, double lo, double hi, double dmax) {
  const plot_axis ax = {0, dmax, 0, x0, x0 + PANEL_W};
  const plot_axis ay = {lo, hi, 1, TOP + PANEL_H, TOP};
  plot_axes(c, &ax, &ay, "realised density", k == 0 ? "relative L2 vs dense (log)" : "",
            TS, 1);
  char title[64];
  snprintf(title, sizeof title, "%s heads", stsa_head_kind_name(PARETO_KIND[k]));
  canvas_text_align(c, x0 + PANEL_W / 2, TOP - 26, title, TS, 1, PLOT_BLACK);
  for (int m = 0; m < PARETO_METHODS; m++)
    for (int di = 0; di < s->n_densities; di++) {
      const pareto_point *p = &t->p[m][di][k];
      const double px = axis_map(&ax, p->density),
                   py = axis_map(&ay, fmax(p->rel_l2, lo));
      if (di) {
        const pareto_point *q = &t->p[m][di - 1][k];
        canvas_line(c, axis_map(&ax, q->density), axis_map(&ay, fmax(q->rel_l2, lo)), px,
                    py, 2, 0, METHOD_COL[m]);
      }
      canvas_marker(c, (int)lround(px), (int)lround(py), 9, m, METHOD_COL[m]);
    }
}

static void draw(canvas *c, const pareto_setup *s, const pareto_table *t) {
  double lo, hi, dmax;
  error_range(s, t, &lo, &hi, &dmax);
  canvas_init(c, LEFT + PARETO_KINDS * PANEL_W + (PARETO_KINDS - 1) * GAP + 40,
              TOP + PANEL_H + BOTTOM, PLOT_WHITE);
  canvas_text_align(c, c->w / 2, 12, "Error against density: SVG, SVG2 and a tile oracle",
                    TS, 1, PLOT_BLACK);
  legend_entry leg[PARETO_METHODS] = {
      {"SVG (windows)", METHOD_COL[0], 3},
      {"SVG2 (clusters, density budget)", METHOD_COL[1], 4},
      {"oracle (heaviest tiles)", METHOD_COL[2], 5}};
  plot_legend_row(c, c->w / 2, 38, leg, PARETO_METHODS, TS);
  for (int k = 0; k < PARETO_KINDS; k++)
    draw_panel(c, LEFT + k * (PANEL_W + GAP), k, s, t, lo, hi, dmax);
}

/* ---- the command ------------------------------------------------------------------ */

/* --seed not given: the workload's default is 1, the zoo's 0. */
#define SEED_UNSET UINT64_MAX

/* Dies when an option of one picture is given to the other: 0 (a value no
 * option accepts) marks what was not given. */
static void check_picture(const pareto_opts *o) {
  if (o->zoo) {
    const char *workload = o->frames           ? "--frames"
                           : o->height         ? "--height"
                           : o->width          ? "--width"
                           : o->heads_per_kind ? "--heads-per-kind"
                           : o->head_dim       ? "--head-dim"
                           : o->n_densities    ? "--densities"
                           : o->tile           ? "--tile"
                                               : NULL;
    if (workload)
      cli_die("plot pareto: %s sets the built-in workload, not --zoo (see stsa plot "
              "pareto --help)",
              workload);
  } else {
    const char *zoo = o->family ? "--family"
                      : o->size ? "--size"
                      : o->wan  ? "--wan"
                                : NULL;
    if (zoo)
      cli_die("plot pareto: %s needs --zoo", zoo);
  }
}

static void workload_defaults(pareto_opts *o) {
  static const double densities[] = {0.05, 0.1, 0.15, 0.2, 0.3, 0.4};
  if (!o->frames)
    o->frames = 8;
  if (!o->height)
    o->height = 24;
  if (!o->width)
    o->width = 32;
  if (!o->heads_per_kind)
    o->heads_per_kind = 2;
  if (!o->head_dim)
    o->head_dim = 64;
  if (!o->tile)
    o->tile = 64;
  if (o->seed == SEED_UNSET)
    o->seed = 1;
  if (!o->n_densities) {
    o->n_densities = (int)(sizeof densities / sizeof densities[0]);
    memcpy(o->densities, densities, sizeof densities);
  }
}

int plot_pareto(int argc, char **argv) {
  pareto_opts o = {.seed = SEED_UNSET};
  const cli_opt_set set = {PARETO_OPTIONS, &o};
  /* its own help (per-option lines), not the one of every picture */
  static const cli_command cmd = {"plot pareto", "stsa plot pareto --help", pareto_usage};
  cli_parse(&cmd, argc, argv, 2, &set, 1);
  check_picture(&o);
  pareto_zoo *z = NULL;
  if (o.zoo) {
    const pareto_zoo_setup zs = {o.wan, o.seed == SEED_UNSET ? 0 : o.seed, o.family,
                                 o.size};
    z = pareto_zoo_create(&zs); /* an unknown family dies here, before any output */
  } else {
    workload_defaults(&o);
    if (o.tile % 16)
      cli_die("plot pareto: --tile %d must be a multiple of 16", o.tile);
  }
  cli_output outs[2];
  int n = 0;
  if (o.out)
    outs[n++] = (cli_output){.flag = "--out", .path = o.out};
  if (o.json)
    outs[n++] = (cli_output){.flag = "--json", .path = o.json};
  cli_outputs_prepare(outs, n, NULL, NULL, 0); /* before the computation */
  pareto_setup s = {.geometry = {o.frames, o.height, o.width, 0, 0, STSA_TEXT_NONE},
                    .heads_per_kind = o.heads_per_kind,
                    .head_dim = o.head_dim,
                    .seed = o.seed,
                    .oracle_tile = o.tile,
                    .n_densities = o.n_densities};
  memcpy(s.densities, o.densities, sizeof s.densities);
  stsa_ctx *ctx = cli_ctx_create();
  if (o.threads)
    cli_check(stsa_ctx_set(ctx, STSA_PARAM_THREADS, o.threads), ctx, "--threads");
  pareto_table *t = NULL;
  if (z)
    pareto_zoo_evaluate(ctx, z);
  else {
    t = malloc(sizeof *t);
    if (!t)
      cli_die("out of memory");
    pareto_evaluate(ctx, &s, t);
  }
  canvas c = {0};
  char *text = NULL;
  int i = 0;
  if (o.out) {
    if (z)
      pareto_zoo_draw(&c, z);
    else
      draw(&c, &s, t);
    cli_output_stage(outs, n, i++, plot_png_writer, &c);
  }
  if (o.json) {
    text = z ? pareto_zoo_json(z) : table_json(&s, t);
    cli_output_stage(outs, n, i++, cli_write_text, text);
  }
  cli_outputs_commit(outs, n);
  if (z)
    pareto_zoo_print(z);
  else
    print_table(&s, t);
  for (int j = 0; j < n; j++) {
    free(outs[j].staging);
    free(outs[j].backup);
  }
  if (o.out)
    canvas_free(&c);
  free(text);
  free(t);
  pareto_zoo_free(z);
  stsa_ctx_free(ctx);
  return 0;
}
