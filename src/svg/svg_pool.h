/*
 * svg_pool.h — the pooled keys of SVG's estimate (svg_strata.h): a head's
 * keys in cells (each frame in up to four parts, bands of positions over
 * the frames past the sinks, the text), each cell in two halves, each half
 * as its scaled centroid and members (docs/architecture.md, "SVG's
 * strata").
 */
#ifndef STSA_SVG_SVG_POOL_H
#define STSA_SVG_SVG_POOL_H

#include <float.h>
#include <stdint.h>

#include "mask/geometry.h"
#include "stsa.h"
#include "svg/svg_strata.h"

/* The pooled keys a query is scored against: every query costs one dot
 * product a cell, so the cells stay near STSA_POOL_CELL_BUDGET (at Wan
 * 480p, 21 frame cells and 16 bands: 37 dot products a query, about 0.2% of
 * the call's attention at density 0.3). A frame is cut into up to four parts
 * (a small object moves between them) while that stays within the budget. */
enum { STSA_POOL_CELL_BUDGET = 32, STSA_POOL_BANDS = 16 };

/* The score of an empty half, and of the panels' padding columns: far
 * below any real one (exp2 takes it to 0), and finite, so that a padding
 * query row (zeros) scores 0 against it rather than NaN. */
#define STSA_POOL_EMPTY_SCORE (-FLT_MAX)

/* The cells: frame f part s is spatial cell f * parts + s; band t (over
 * the frames past the sinks) is cell F * parts + t; the real text tokens
 * are the last. A cell's keys are pooled in two halves, cut across the
 * direction of its key farthest from their mean (halfway to it): a few keys
 * that stand out (an object, a sink) keep a centroid of their own instead of
 * a tenth of one, and a query that matches them sees it. */
typedef struct stsa_pool_cells {
  int64_t parts, bands, count;
  int64_t stride; /* 2 count, rounded up to the kernel table's nr */
  int64_t depth;  /* D + 1 */
  int64_t nr;     /* the panels' width */
  /* The halves as the qk kernel's K^T panels ([stride / nr][depth][nr],
   * 64-byte aligned; half h of cell j in column h count + j): rows d < D
   * the centroid scaled by the softmax scale and log2(e), row D log2 of
   * its members (STSA_POOL_EMPTY_SCORE for an empty half and past 2
   * count). A query row with a 1 at D then scores ln n + x . centre in one
   * product. */
  float *centre;
  double edge[STSA_POOL_BANDS + 1];  /* band t spans positions [edge[t], edge[t + 1]) */
  double inv_width[STSA_POOL_BANDS]; /* 1 / (edge[t + 1] - edge[t]) */
  int32_t *band_of;                  /* [P] the band holding each position (the edges
                                        are whole positions: so is x's, floor(x)'s) */
} stsa_pool_cells;

static inline int64_t stsa_clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* The cell layout of geometry geo for head dim D and panels nr wide into
 * c (centre not yet pooled: NULL). 0, or -1 when out of memory (c freed
 * either way by stsa_pool_cells_free). */
int stsa_pool_layout(const stsa_geo *geo, int64_t D, int64_t nr, stsa_pool_cells *c);
void stsa_pool_cells_free(stsa_pool_cells *c);

/* Row d of column col of the halves' panels. */
static inline float *stsa_pool_centre_at(const stsa_pool_cells *c, int64_t col,
                                         int64_t d) {
  return c->centre + (col / c->nr) * c->depth * c->nr + d * c->nr + col % c->nr;
}

/* Pools head h's keys of batch entry b of k ([B, N, H, D]) into the
 * cells' halves (c->centre, allocated here: stsa_pool_cells_free), in three
 * passes over the keys: the cells' means, each cell's key farthest from its
 * mean, and the far halves' sums (the near half is the cell less it). Rows
 * that are not contiguous f32 are converted by `load` (kernels.h:
 * load_row). 0, or -1 when out of memory. */
int stsa_pool_keys(const stsa_svg_keep *keep, const stsa_geo *geo, const stsa_tensor *k,
                   int64_t b, int64_t h,
                   void (*load)(const void *, int, int64_t, int64_t, float *),
                   stsa_pool_cells *c);

#endif
