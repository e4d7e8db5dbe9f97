/*
 * plot_pareto_zoo.h — the quality zoo's picture of `stsa plot pareto --zoo`
 * (plot_pareto_zoo.c): measured, drawn, tabulated; plot_pareto.c parses the
 * options and writes the outputs, as for the built-in workload's picture.
 */
#ifndef STSA_TOOLS_PLOT_PARETO_ZOO_H
#define STSA_TOOLS_PLOT_PARETO_ZOO_H

#include <stdint.h>

#include "plot_png.h"
#include "stsa.h"

/* Which of the zoo's heads (quality_select_cases). */
typedef struct pareto_zoo_setup {
  int wan;
  uint64_t seed;
  const char *family, *size; /* NULL: any */
} pareto_zoo_setup;

typedef struct pareto_zoo pareto_zoo;

/* The chosen heads, not yet run (dies when none is chosen: call it before
 * any output is prepared). */
pareto_zoo *pareto_zoo_create(const pareto_zoo_setup *s);
/* Runs them under every method and budget on the context's threads. */
void pareto_zoo_evaluate(stsa_ctx *ctx, pareto_zoo *z);
void pareto_zoo_free(pareto_zoo *z);

/* The table of the plotted means on stdout. */
void pareto_zoo_print(const pareto_zoo *z);
/* Every point and the table as JSON (free it). */
char *pareto_zoo_json(const pareto_zoo *z);
/* The picture: one panel per budget. */
void pareto_zoo_draw(canvas *c, const pareto_zoo *z);

#endif
