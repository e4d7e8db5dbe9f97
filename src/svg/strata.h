/*
 * strata.h — the strata of the error bound (bound.h). SVG2's profiled rows
 * are drawn per query cluster: what decides a row's error under a cluster
 * selection is its cluster (every member sees the same key clusters), so
 * each cluster is a stratum and every one of them is sampled. SVG's rows
 * are drawn one in each of R equal runs of video tokens (a band of
 * positions of a frame: what decides a row's error under a frame window or
 * a position band).
 */
#ifndef STSA_SVG_STRATA_H
#define STSA_SVG_STRATA_H

#include <stdint.h>

#include "stsa.h"

/* Rows a head profiles with q_clusters clusters over L video tokens: two
 * per cluster (a spread for each stratum) or `sample_rows` if more, at
 * most L and `most` (one q tile of the profiling plan). */
int64_t stsa_strata_rows(int64_t sample_rows, int64_t q_clusters, int64_t L,
                         int64_t most);

/* Draws R rows of one head: labels[L] the video tokens' clusters (0..QC-1),
 * sizes[QC] their members. Each cluster gets min(size, 2) rows, the rest
 * go to the clusters in proportion to their sizes (never more than they
 * hold; with fewer than 2 QC rows, one a cluster as far as they go). rows[R]
 * receives native token indices (video token i is v0 + i), ascending, and
 * group[R] each row's cluster. Deterministic in seed. 0, or -1 when out of
 * memory. */
int stsa_strata_draw(const int32_t *labels, int64_t L, int64_t v0, int64_t QC,
                     const int64_t *sizes, int64_t R, uint64_t seed, int64_t *rows,
                     int64_t *group);

/* SVG's strata: row r of stsa_svg_sample_rows was drawn, one row, from the
 * r-th of R equal runs of the video tokens; runs are taken in adjacent pairs
 * (collapsed strata: two rows give each a spread; an odd last run joins the
 * last pair). group[R] each row's stratum, pop[R] the strata's rows, of
 * which *groups. */
void stsa_svg_strata(const stsa_geometry *g, int64_t R, int64_t *group, int64_t *pop,
                     int64_t *groups);

#endif
