/*
 * run_report.h — the JSON report of `stsa run` (its keys are documented in
 * docs/cli.md), written by `stsa run --report` and read back by `stsa plot
 * kinds`: both sides live in run_report.c, so the keys are spelled once.
 */
#ifndef STSA_TOOLS_RUN_REPORT_H
#define STSA_TOOLS_RUN_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct run_state;

/* The "kind" of a head: a stsa_head_kind, or one of these. */
enum { RUN_KIND_DENSE = -1, RUN_KIND_NONE = -2 /* no data (only when reading) */ };

/* "spatial", "temporal", "semantic" or "dense", as the report and the summary name a
 * kind. */
const char *run_kind_name(int kind);

/* ---- writing ---------------------------------------------------------------- */

/* The whole report as a JSON string (malloc'd), before anything is written. */
char *run_report_build(const struct run_state *s);

/* The mean density over every (batch entry, head), as the report gives it. */
double run_mean_density(const struct run_state *s);

/* Whether the keys' budget is SVG2's top-p (not the density). */
int run_top_p_budget(const struct run_state *s);
/* The error budget of the svg modes' calls (0: none). */
double run_max_error(const struct run_state *s);

struct run_ran;
/* The entry of r that every entry shares (its index: what every head, or
 * under --dist every rank, ran), or -1 with why not in note: "the heads
 * differ", "the ranks differ", "not known: rank R computed no heads of the
 * call". */
int64_t run_ran_common(const struct run_state *s, const struct run_ran *r, char *note,
                       size_t len);

/* The text of the warning about result i (rel L2 above --warn-rel-l2). */
void run_warning_text(const struct run_state *s, int64_t i, char *buf, size_t len);

/* ---- reading ---------------------------------------------------------------- */

/* What `stsa plot kinds` reads back from a report. */
typedef struct run_report_kinds {
  int64_t layer, step; /* -1 when null */
  int64_t heads;       /* 1 + the largest head number in "per_head" */
  signed char *kind;   /* [heads]: the kind of each head of batch entry 0 */
} run_report_kinds;

/* Reads the report in f (named by option `flag` and `path` in messages) and
 * closes f. Dies unless it is JSON with a "per_head" array of valid heads. */
void run_report_read_kinds(const char *flag, const char *path, FILE *f,
                           run_report_kinds *r);

#endif
