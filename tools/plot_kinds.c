/*
 * plot_kinds.c — `stsa plot kinds`: the head kind SVG chose, one row per
 * `stsa run` report (sorted by layer, then step), one column per head.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_files.h"
#include "cli_options.h"
#include "cli_util.h"
#include "plot_cmd.h"
#include "run_report.h"

enum { KIND_NONE = 0, KIND_SPATIAL, KIND_TEMPORAL, KIND_DENSE, KIND_SEMANTIC, KIND_N };
static const rgb KIND_COL[KIND_N] = {
    {250, 250, 250}, {31, 110, 180}, {238, 128, 30}, {150, 150, 150}, {44, 160, 44}};
static const char KIND_CHAR[KIND_N] = {0, 'S', 'T', 'D', 'C'};
/* Cells from this size up also carry the letter (for grey-scale prints). */
enum { LETTER_CELL = 28 };

typedef run_report_kinds kinds_row;

/* The colour index of head h of a row (no data past its heads). */
static int cell_kind(const kinds_row *row, int64_t h) {
  const int k = h < row->heads ? row->kind[h] : RUN_KIND_NONE;
  return k == RUN_KIND_DENSE       ? KIND_DENSE
         : k == STSA_HEAD_SPATIAL  ? KIND_SPATIAL
         : k == STSA_HEAD_TEMPORAL ? KIND_TEMPORAL
         : k == STSA_HEAD_SEMANTIC ? KIND_SEMANTIC
                                   : KIND_NONE;
}

static int cmp_rows(const void *a, const void *b) {
  const kinds_row *x = a, *y = b;
  if (x->layer != y->layer)
    return x->layer < y->layer ? -1 : 1;
  return (x->step > y->step) - (x->step < y->step);
}

/* Row label: the layer, with the step when a layer appears more than once. */
static void row_label(const kinds_row *rows, int n, int r, char *buf, size_t len) {
  int dup = (r > 0 && rows[r - 1].layer == rows[r].layer) ||
            (r + 1 < n && rows[r + 1].layer == rows[r].layer);
  if (rows[r].layer < 0)
    snprintf(buf, len, "?");
  else if (dup)
    snprintf(buf, len, "%lld s%lld", (long long)rows[r].layer, (long long)rows[r].step);
  else
    snprintf(buf, len, "%lld", (long long)rows[r].layer);
}

static void draw_kinds_grid(canvas *c, const kinds_row *rows, int n, int64_t H, int x0,
                            int y0, int cell) {
  for (int r = 0; r < n; r++) {
    char lab[32];
    row_label(rows, n, r, lab, sizeof lab);
    canvas_text_align(c, x0 - 8, y0 + r * cell + (cell - text_height(TS)) / 2, lab, TS, 2,
                      PLOT_BLACK);
    for (int64_t h = 0; h < H; h++) {
      int k = cell_kind(&rows[r], h);
      int x = x0 + (int)h * cell, y = y0 + r * cell;
      canvas_fill(c, x, y, cell, cell, KIND_COL[k]);
      canvas_box(c, x, y, cell, cell, 1, PLOT_WHITE);
      if (cell >= LETTER_CELL && KIND_CHAR[k]) {
        char s[2] = {KIND_CHAR[k], 0};
        canvas_text_align(c, x + cell / 2 + 1, y + (cell - text_height(TS)) / 2, s, TS, 1,
                          PLOT_WHITE);
      }
    }
  }
  canvas_box(c, x0 - 1, y0 - 1, (int)H * cell + 2, n * cell + 2, 1, PLOT_GREY);
  int step = H > 40 ? 10 : H > 16 ? 5 : 1; /* head numbers that fit */
  for (int64_t h = 0; h < H; h += step) {
    char lab[24];
    snprintf(lab, sizeof lab, "%lld", (long long)h);
    canvas_text_align(c, x0 + (int)h * cell + cell / 2, y0 + n * cell + 6, lab, TS, 1,
                      PLOT_BLACK);
  }
}

/* Legend entries with counts: spatial and temporal always, dense calls and
 * gaps only when present. Returns the number of entries. */
static int kinds_legend(const kinds_row *rows, int n, int64_t H, int cell,
                        char labs[KIND_N][48], legend_entry *leg) {
  static const char *const NAMES[KIND_N] = {"no data", "spatial", "temporal",
                                            "dense call", "semantic (SVG2)"};
  static const int ORDER[KIND_N] = {KIND_SPATIAL, KIND_TEMPORAL, KIND_SEMANTIC,
                                    KIND_DENSE, KIND_NONE};
  int64_t count[KIND_N] = {0};
  for (int r = 0; r < n; r++)
    for (int64_t h = 0; h < H; h++)
      count[cell_kind(&rows[r], h)]++;
  int m = 0;
  for (int i = 0; i < KIND_N; i++) {
    int k = ORDER[i];
    if ((k == KIND_DENSE || k == KIND_NONE || k == KIND_SEMANTIC) && !count[k])
      continue;
    if (cell >= LETTER_CELL && KIND_CHAR[k])
      snprintf(labs[k], sizeof labs[k], "%s (%c): %lld", NAMES[k], KIND_CHAR[k],
               (long long)count[k]);
    else
      snprintf(labs[k], sizeof labs[k], "%s: %lld", NAMES[k], (long long)count[k]);
    leg[m++] = (legend_entry){labs[k], KIND_COL[k], 0};
  }
  return m;
}

/* The reports, one row each, read as their --report options are parsed. */
typedef struct kinds_opts {
  kinds_row *rows;
  int n;
  int64_t H; /* the most heads of any report */
  const char *out;
} kinds_opts;

static void add_report(void *base, const char *name, const char *path) {
  kinds_opts *o = base;
  FILE *f = cli_open_input(name, path); /* a missing file: why, not "line -1" */
  cli_file_id id;
  cli_check_input(name, path, &id);
  plot_add_input(name, path, id);
  run_report_read_kinds(name, path, f, &o->rows[o->n]);
  o->H = o->rows[o->n].heads > o->H ? o->rows[o->n].heads : o->H;
  o->n++;
}

static const cli_opt KINDS_OPTIONS[] = {
    {.name = "--report", .metavar = "FILE", CLI_CALL(add_report)},
    {.name = "--out", .metavar = "FILE", CLI_STR(kinds_opts, out)},
    {0}};

/* Rows of all --report files, sorted by layer and step. */
static void load_kinds(int argc, char **argv, kinds_opts *o) {
  *o = (kinds_opts){.rows = calloc((size_t)argc, sizeof *o->rows)};
  if (!o->rows)
    cli_die("out of memory");
  const cli_opt_set set = {KINDS_OPTIONS, o};
  plot_parse("kinds", argc, argv, &set, 1);
  plot_need_out(o->out, "kinds");
  if (!o->n)
    cli_die("plot kinds: give at least one --report FILE.json (from stsa run --report)");
  qsort(o->rows, (size_t)o->n, sizeof *o->rows, cmp_rows);
}

static void kinds_labels(canvas *c, const kinds_row *rows, int n, int64_t H, int x0,
                         int y0, int cell) {
  char title[160];
  snprintf(title, sizeof title,
           "Head kind chosen per layer and head (%d report%s, batch 0)", n,
           n == 1 ? "" : "s");
  canvas_text_align(c, c->w / 2, 14, title, TS, 1, PLOT_BLACK);
  canvas_text_align(c, c->w / 2, 40, "SVG profiling picks the mask with the lower error",
                    TS, 1, PLOT_GREY);
  canvas_text_align(c, x0 + (int)H * cell / 2, y0 + n * cell + 30, "head", TS, 1,
                    PLOT_BLACK);
  int dup = 0; /* a layer seen at several steps: the rows are (layer, step) */
  for (int r = 1; r < n; r++)
    dup |= rows[r].layer == rows[r - 1].layer;
  canvas_text_vertical(c, 30, y0 + n * cell / 2, dup ? "layer, step" : "layer", TS,
                       PLOT_BLACK);
}

int plot_kinds(int argc, char **argv) {
  kinds_opts o;
  load_kinds(argc, argv, &o);
  const kinds_row *rows = o.rows;
  const int n = o.n;
  const int64_t H = o.H;
  const int64_t side = H > n ? H : n;
  int cell = (int)(640 / side);
  cell = cell < 6 ? 6 : cell > 48 ? 48 : cell;
  char labs[KIND_N][48];
  legend_entry leg[KIND_N];
  const int m = kinds_legend(rows, n, H, cell, labs, leg);

  const int x0 = 150, y0 = 90, lw = legend_row_width(leg, m, TS) + 80;
  int width = x0 + (int)H * cell + 60;
  width = width > 760 ? width : 760;
  width = width > lw ? width : lw;
  canvas c;
  canvas_init(&c, width, y0 + n * cell + 140, PLOT_WHITE);
  kinds_labels(&c, rows, n, H, x0, y0, cell);
  draw_kinds_grid(&c, rows, n, H, x0, y0, cell);
  plot_legend_row(&c, c.w / 2, c.h - 50, leg, m, TS);
  plot_save(&c, o.out);
  canvas_free(&c);
  for (int r = 0; r < n; r++)
    free(o.rows[r].kind);
  free(o.rows);
  return 0;
}
