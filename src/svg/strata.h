/*
 * strata.h — the strata of the error bound (bound.h). SVG2's profiled rows
 * are drawn per query cluster: what decides a row's error under a cluster
 * selection is its cluster (every member sees the same key clusters), so
 * each cluster is a stratum and every one of them is sampled. SVG's routing
 * rows are drawn one in each of R equal runs of video tokens (a band of
 * positions of a frame: what decides a row's error under a frame window or
 * a position band); its bound also takes rows drawn per head from strata of
 * each query's estimated lost mass (svg_strata.h).
 */
#ifndef STSA_SVG_STRATA_H
#define STSA_SVG_STRATA_H

#include <stdint.h>

#include "stsa.h"

/* Rows a head may profile with q_clusters clusters over L video tokens:
 * two per cluster (a spread for each stratum) or `sample_rows` if more, at
 * most L and `most` (one q tile of the profiling plan). What a session
 * allocates; a call profiles stsa_strata_call_rows of them. */
int64_t stsa_strata_rows(int64_t sample_rows, int64_t q_clusters, int64_t L,
                         int64_t most);

/* The share of a call's attention work the bound's dense rows may take:
 * R rows against all L keys are R x L pairs, the call's attention at
 * density d about d x L x L of them. 2% until 7 December 2026: 78 rows a
 * head at Wan 480p, now 64 (sample_rows, the floor there; docs/benchmarks.md,
 * "SVG2's leans read in k-means' gather"). */
#define STSA_BOUND_ROW_SHARE 0.015

/* Rows a call profiles when its planned density is `density`: enough for
 * STSA_BOUND_ROW_SHARE of its work (docs/architecture.md, "The error
 * bound": its cost), at least `sample_rows` and two, at most `most` (from
 * stsa_strata_rows), even. */
int64_t stsa_strata_call_rows(int64_t most, int64_t sample_rows, double density,
                              int64_t L);

/* A head's drawn rows and their strata. */
typedef struct stsa_strata {
  int64_t *rows;  /* [R] native token indices (video token i is v0 + i), ascending */
  int64_t *group; /* [R] each row's stratum, 0..groups-1 */
  int64_t *pop;   /* [G] the strata's rows (0 for an empty one), of which groups */
  int64_t groups;
} stsa_strata;

/* Draws R rows of one head from G strata: labels[L] each video token's
 * stratum (0..G-1), sizes[G] their members (SVG2: stsa_strata_geometric's).
 * Each stratum gets min(size, 2) rows, the rest go in proportion to the
 * strata's sizes (never more than they hold; with fewer than 2 a stratum,
 * one as far as they go); a stratum's rows are drawn uniformly from all its
 * members. out->pop gets sizes, out->groups G. Deterministic in seed. 0,
 * or -1 when out of memory. */
int stsa_strata_draw(const int32_t *labels, int64_t L, int64_t v0, int64_t G,
                     const int64_t *sizes, int64_t R, uint64_t seed, stsa_strata *out);

/* The strata of a skewed score, given as its natural log log_score[L]
 * (SVG2: each query's estimated dropped mass): G - 1 strata of equal ratio
 * from the largest score down STSA_STRATA_DECADES decades, and one below
 * them (with it zeros, -inf, and NaN), each split in two by split[i]
 * (NULL: none). label[L] each row's stratum,
 * 0..2G-1 (g + G for a split row), size[2G] their members. Geometric
 * bounds on a skewed auxiliary variable (Gunning and Horgan's stratification
 * of skewed populations) leave the few rows of the largest scores in small
 * strata of their own; stsa_strata_draw gives every stratum two rows, so
 * those few are drawn at a far higher rate than the rest. */
#define STSA_STRATA_DECADES 3.0
void stsa_strata_geometric(const double *log_score, const uint8_t *split, int64_t L,
                           int64_t G, int32_t *label, int64_t *size);

/* SVG's strata: row r of stsa_svg_sample_rows was drawn, one row, from the
 * r-th of R equal runs of the video tokens; runs are taken in adjacent pairs
 * (collapsed strata: two rows give each a spread; an odd last run joins the
 * last pair). group[R] each row's stratum, pop[R] the strata's rows, of
 * which *groups. */
void stsa_svg_strata(const stsa_geometry *g, int64_t R, int64_t *group, int64_t *pop,
                     int64_t *groups);

#endif
