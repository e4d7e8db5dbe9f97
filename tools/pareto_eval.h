/*
 * pareto_eval.h — the error-against-density table of `stsa plot pareto`
 * (pareto_eval.c): SVG, SVG2 and a tile oracle on the built-in workload's
 * semantic, spatial and temporal heads, each error measured against dense
 * attention, each density the one the method realised.
 */
#ifndef STSA_TOOLS_PARETO_EVAL_H
#define STSA_TOOLS_PARETO_EVAL_H

#include <stdint.h>

#include "stsa.h"

enum { PARETO_SVG = 0, PARETO_SVG2 = 1, PARETO_ORACLE = 2, PARETO_METHODS = 3 };
enum { PARETO_KINDS = 3, PARETO_MAX_DENSITIES = 16 };

/* "svg", "svg2", "oracle" */
extern const char *const PARETO_METHOD_NAMES[PARETO_METHODS];
/* The head kinds of the table, in its order: semantic, spatial, temporal. */
extern const stsa_head_kind PARETO_KIND[PARETO_KINDS];

typedef struct pareto_setup {
  stsa_geometry geometry;
  int64_t heads_per_kind, head_dim;
  uint64_t seed;
  int oracle_tile; /* tokens per side of the oracle's tiles */
  int n_densities;
  double densities[PARETO_MAX_DENSITIES]; /* requested kept fractions */
} pareto_setup;

/* One point: a method at a requested density, on the heads of one kind
 * (means over those heads). */
typedef struct pareto_point {
  double density; /* realised kept fraction of pairs */
  double rel_l2;  /* ||o - o_dense|| / ||o_dense|| over all rows */
} pareto_point;

typedef struct pareto_table {
  pareto_point p[PARETO_METHODS][PARETO_MAX_DENSITIES][PARETO_KINDS];
  double dense_ms, method_ms[PARETO_METHODS]; /* total time of each */
} pareto_table;

/* Fills t for setup s on the context's threads. */
void pareto_evaluate(stsa_ctx *ctx, const pareto_setup *s, pareto_table *t);

#endif
