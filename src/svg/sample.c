/* sample.c — see sample.h. */
#include "svg/sample.h"

#include "svg/splitmix.h"

void stsa_svg_sample_rows(const stsa_geometry *g, int64_t rows, uint64_t seed,
                          int64_t layer, int64_t step, int64_t batch, int64_t *out) {
  const int64_t L = g->frames * g->height * g->width;
  const int64_t first = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  uint64_t state = seed ^ ((uint64_t)layer * 0x100000001b3ull) ^ ((uint64_t)step << 32) ^
                   ((uint64_t)batch * 0x9e3779b97f4a7c15ull);
  for (int64_t r = 0; r < rows; r++) {
    /* stratum r covers video tokens [r*L/rows, (r+1)*L/rows) */
    int64_t lo = r * L / rows, hi = (r + 1) * L / rows;
    int64_t span = hi > lo ? hi - lo : 1;
    out[r] = first + lo + (int64_t)(stsa_splitmix64(&state) % (uint64_t)span);
  }
}

/* The position-major index of a native video token. */
static int64_t position_major(const stsa_geometry *g, int64_t token) {
  const int64_t P = g->height * g->width;
  const int64_t v = token - (g->text_pos == STSA_TEXT_PREFIX ? g->text : 0);
  return v % P * g->frames + v / P;
}

void stsa_svg_position_order(const stsa_geometry *g, const int64_t *rows, int64_t n,
                             int64_t *perm) {
  /* insertion sort: a few dozen rows, and stable */
  for (int64_t i = 0; i < n; i++) {
    const int64_t key = position_major(g, rows[i]);
    int64_t j = i;
    for (; j > 0 && position_major(g, rows[perm[j - 1]]) > key; j--)
      perm[j] = perm[j - 1];
    perm[j] = i;
  }
}
