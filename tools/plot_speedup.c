/*
 * plot_speedup.c — `stsa plot speedup`: speed-up against density from the
 * JSON lines of `stsa bench ... --json`, one series per mode, with the ideal
 * 1/density, on log-log axes.
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
#include "plot_cmd.h"

enum { MAX_SERIES = 8 };

typedef struct series {
  char name[48];
  double *x, *y;
  int n, cap;
} series;

static const rgb SERIES_COL[MAX_SERIES] = {
    {31, 110, 180},  {238, 128, 30}, {44, 160, 44},   {210, 40, 40},
    {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {90, 90, 90}};

static series *find_series(series *s, int *n, const char *name) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(s[i].name, name))
      return &s[i];
  if (*n == MAX_SERIES)
    cli_die("plot speedup: more than %d series (distinct \"mode\" values)", MAX_SERIES);
  series *t = &s[(*n)++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  return t;
}

static void add_point(series *s, double x, double y) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    double *nx = realloc(s->x, sizeof *nx * (size_t)s->cap);
    if (!nx)
      cli_die("out of memory");
    s->x = nx;
    double *ny = realloc(s->y, sizeof *ny * (size_t)s->cap);
    if (!ny)
      cli_die("out of memory");
    s->y = ny;
  }
  s->x[s->n] = x, s->y[s->n] = y, s->n++;
}

/* Reads JSON lines; lines that are not objects with numeric "density" in
 * (0, 1] and "speedup" > 0 (such as plain-text output) are skipped. */
static int read_bench(const char *flag, const char *path, series *s, int *ns,
                      int *skipped) {
  FILE *f = cli_open_input(flag, path);
  cli_file_id id;
  cli_check_input(flag, path, &id);
  plot_add_input(flag, path, id);
  char *line = NULL;
  size_t cap = 0;
  int points = 0;
  while (getline(&line, &cap, f) > 0) {
    json_t *j = json_loads(line, 0, NULL);
    json_t *d = json_object_get(j, "density"), *sp = json_object_get(j, "speedup");
    double dv = json_number_value(d), sv = json_number_value(sp);
    if (json_is_number(d) && json_is_number(sp) && dv > 0 && dv <= 1 && sv > 0) {
      const char *mode = json_string_value(json_object_get(j, "mode"));
      const char *bench = json_string_value(json_object_get(j, "bench"));
      add_point(find_series(s, ns, mode ? mode : bench ? bench : "speed-up"), dv, sv);
      points++;
    } else if (line[strspn(line, " \t\r\n")]) {
      (*skipped)++;
    }
    json_decref(j);
  }
  free(line);
  fclose(f);
  return points;
}

static void sort_series(series *s) {
  for (int i = 1; i < s->n; i++)
    for (int j = i; j > 0 && s->x[j - 1] > s->x[j]; j--) {
      double tx = s->x[j], ty = s->y[j];
      s->x[j] = s->x[j - 1], s->y[j] = s->y[j - 1];
      s->x[j - 1] = tx, s->y[j - 1] = ty;
    }
}

static void draw_series(canvas *c, const plot_axis *ax, const plot_axis *ay,
                        const series *s, int idx) {
  for (int i = 0; i < s->n; i++) {
    double px = axis_map(ax, s->x[i]), py = axis_map(ay, s->y[i]);
    if (i)
      canvas_line(c, axis_map(ax, s->x[i - 1]), axis_map(ay, s->y[i - 1]), px, py, 2, 0,
                  SERIES_COL[idx]);
    canvas_marker(c, (int)lround(px), (int)lround(py), 9, idx % 4, SERIES_COL[idx]);
  }
}

/* The ideal speed-up 1/density as a dashed curve (straight on log-log). */
static void draw_ideal(canvas *c, const plot_axis *ax, const plot_axis *ay) {
  enum { STEPS = 240 };
  const double l0 = log(ax->lo), l1 = log(ax->hi);
  for (int i = 1; i <= STEPS; i++) {
    if ((i / 6) % 2) /* dashes of 6 segments */
      continue;
    double d0 = exp(l0 + (l1 - l0) * (i - 1) / STEPS),
           d1 = exp(l0 + (l1 - l0) * i / STEPS);
    canvas_line(c, axis_map(ax, d0), axis_map(ay, 1 / d0), axis_map(ax, d1),
                axis_map(ay, 1 / d1), 2, 0, PLOT_BLACK);
  }
}

/* The series of all --bench files, read as their options are parsed. */
typedef struct speedup_opts {
  series s[MAX_SERIES];
  int ns, points, files, skipped;
  const char *out;
} speedup_opts;

static void add_bench(void *base, const char *name, const char *path) {
  speedup_opts *o = base;
  o->points += read_bench(name, path, o->s, &o->ns, &o->skipped);
  o->files++;
}

static const cli_opt SPEEDUP_OPTIONS[] = {
    {.name = "--bench", .metavar = "FILE", CLI_CALL(add_bench)},
    {.name = "--out", .metavar = "FILE", CLI_STR(speedup_opts, out)},
    {0}};

static void load_bench(int argc, char **argv, speedup_opts *o) {
  memset(o, 0, sizeof *o);
  const cli_opt_set set = {SPEEDUP_OPTIONS, o};
  plot_parse("speedup", argc, argv, &set, 1);
  plot_need_out(o->out, "speedup");
  if (!o->files)
    cli_die("plot speedup: give --bench FILE.jsonl (lines of stsa bench ... --json)");
  if (!o->points)
    cli_die("plot speedup: no line with numeric \"density\" and \"speedup\" keys found");
  if (o->skipped)
    fprintf(stderr, "stsa: plot speedup: skipped %d line(s) without density/speedup\n",
            o->skipped);
}

static void speedup_labels(canvas *c, const series *s, int ns, int points, int x_right,
                           int y_top) {
  canvas_text_align(c, c->w / 2, 14, "Sparse attention speed-up against density", TS, 1,
                    PLOT_BLACK);
  char sub[128];
  snprintf(sub, sizeof sub, "%d point%s; dashed: ideal 1/density; grey: dense (1x)",
           points, points == 1 ? "" : "s");
  canvas_text_align(c, c->w / 2, 40, sub, TS, 1, PLOT_GREY);
  legend_entry leg[MAX_SERIES + 1];
  for (int k = 0; k < ns; k++)
    leg[k] = (legend_entry){s[k].name, SERIES_COL[k], 3 + k % 4};
  leg[ns] = (legend_entry){"ideal 1/density", PLOT_BLACK, 2};
  plot_legend(c, x_right - legend_width(leg, ns + 1, TS) - 10, y_top + 10, leg, ns + 1,
              TS);
}

int plot_speedup(int argc, char **argv) {
  speedup_opts o;
  load_bench(argc, argv, &o);
  series *s = o.s;
  const int ns = o.ns, points = o.points;
  double dmin = 1, smin = 1, smax = 1;
  for (int k = 0; k < ns; k++) {
    sort_series(&s[k]);
    for (int i = 0; i < s[k].n; i++) {
      dmin = fmin(dmin, s[k].x[i]);
      smin = fmin(smin, s[k].y[i]);
      smax = fmax(smax, s[k].y[i]);
    }
  }
  enum { L = 120, T = 80, W = 760, HH = 520 };
  canvas c;
  canvas_init(&c, L + W + 40, T + HH + 90, PLOT_WHITE);
  plot_axis ax = {dmin / 1.25, 1.0, 1, L, L + W};
  plot_axis ay = {smin / 1.25, fmax(smax, 1.0 / dmin) * 1.25, 1, T + HH, T};
  plot_axes(&c, &ax, &ay, "density (kept fraction of pairs, log)",
            "speed-up vs dense (log)", TS, 1);
  canvas_line(&c, L, axis_map(&ay, 1.0), L + W, axis_map(&ay, 1.0), 1, 0, PLOT_GREY);
  draw_ideal(&c, &ax, &ay);
  for (int k = 0; k < ns; k++)
    draw_series(&c, &ax, &ay, &s[k], k);
  speedup_labels(&c, s, ns, points, L + W, T);
  plot_save(&c, o.out);
  canvas_free(&c);
  for (int k = 0; k < ns; k++) {
    free(s[k].x);
    free(s[k].y);
  }
  return 0;
}
