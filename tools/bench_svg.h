/*
 * bench_svg.h — what `stsa bench svg` (cmd_bench_svg.c) shares with its
 * distributed form under mpirun (bench_svg_dist.c): the parsed options.
 */
#ifndef STSA_TOOLS_BENCH_SVG_H
#define STSA_TOOLS_BENCH_SVG_H

#include <stdint.h>

#include "dist_cli.h"
#include "stsa.h"

typedef struct svg_bench_opts {
  const char *preset;
  int64_t heads;
  int64_t frames, height, width; /* -1: the preset's geometry */
  int threads, json, compare_permute, q_tile, kv_tile, reps, pv_precision;
  stsa_dtype dtype; /* of q, k, v (--dtype; f32 default) */
  uint64_t seed;
  double max_error;   /* --max-error: the error budget (0: none) */
  cli_dist_opts dist; /* --dist; scheme -1: one process */
} svg_bench_opts;

/* `stsa bench svg --dist` with parsed options, MPI started (cli_dist_start)
 * and cfg the preset with --heads, --seed and the tiles applied. */
int bench_svg_dist(const svg_bench_opts *o, const stsa_svg_config *cfg);

#endif
