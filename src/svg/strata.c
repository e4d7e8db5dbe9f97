/* strata.c — see strata.h. */
#include "svg/strata.h"

#include <math.h>
#include <stdlib.h>

#include "svg/splitmix.h"

int64_t stsa_strata_rows(int64_t sample_rows, int64_t q_clusters, int64_t L,
                         int64_t most) {
  int64_t r = 2 * q_clusters > sample_rows ? 2 * q_clusters : sample_rows;
  r = r < L ? r : L;
  return r < most ? r : most;
}

int64_t stsa_strata_call_rows(int64_t most, int64_t sample_rows, double density,
                              int64_t L) {
  const double want = STSA_BOUND_ROW_SHARE * (density > 0 ? density : 0) * (double)L;
  int64_t r = want < (double)most ? (int64_t)ceil(want) : most;
  r = r > sample_rows ? r : sample_rows;
  r = r > 2 ? r : 2;
  r += r & 1;
  return r < most ? r : most;
}

/* Rows per stratum: n[c] summing to R, n[c] <= sizes[c]. */
static void allocate(const int64_t *sizes, int64_t QC, int64_t L, int64_t R, int64_t *n) {
  int64_t left = R;
  for (int per = 2; per >= 1; per--) { /* two a cluster, else one */
    int64_t need = 0;
    for (int64_t c = 0; c < QC; c++)
      need += sizes[c] < per ? sizes[c] : per;
    if (need <= R || per == 1) {
      for (int64_t c = 0; c < QC; c++) {
        n[c] = sizes[c] < per ? sizes[c] : per;
        n[c] = n[c] < left ? n[c] : left;
        left -= n[c];
      }
      break;
    }
  }
  const int64_t extra = left;
  for (int64_t c = 0; c < QC && extra > 0; c++) { /* in proportion to size */
    int64_t add = (int64_t)((double)extra * (double)sizes[c] / (double)L);
    add = add < sizes[c] - n[c] ? add : sizes[c] - n[c];
    add = add < left ? add : left;
    n[c] += add;
    left -= add;
  }
  for (int64_t c = 0; left > 0; c = (c + 1) % QC) /* what rounding left */
    if (n[c] < sizes[c]) {
      n[c]++;
      left--;
    }
}

typedef struct drawn {
  int64_t token, group;
} drawn;

static int by_token(const void *a, const void *b) {
  const drawn *x = a, *y = b;
  return (x->token > y->token) - (x->token < y->token);
}

int stsa_strata_draw(const int32_t *labels, int64_t L, int64_t v0, int64_t G,
                     const int64_t *sizes, int64_t R, uint64_t seed, stsa_strata *out) {
  int64_t *start = malloc(sizeof(int64_t) * (size_t)(2 * G + 1));
  int32_t *members = malloc(sizeof(int32_t) * (size_t)L);
  drawn *d = malloc(sizeof *d * (size_t)R);
  if (!start || !members || !d) {
    free(start);
    free(members);
    free(d);
    return -1;
  }
  int64_t *n = start + G + 1; /* start [G + 1], n [G] */
  for (int64_t g = 0; g < G; g++)
    out->pop[g] = sizes[g];
  allocate(sizes, G, L, R, n);
  start[0] = 0;
  for (int64_t g = 0; g < G; g++)
    start[g + 1] = start[g] + sizes[g];
  /* members by stratum, in token order (a counting sort; start[] advances
   * and is rebuilt after) */
  for (int64_t i = 0; i < L; i++)
    members[start[labels[i]]++] = (int32_t)i;
  for (int64_t g = G; g > 0; g--)
    start[g] = start[g - 1];
  start[0] = 0;
  uint64_t state = seed;
  int64_t drew = 0;
  for (int64_t g = 0; g < G; g++) {
    int32_t *m = members + start[g];
    for (int64_t j = 0; j < n[g]; j++) { /* a partial Fisher-Yates shuffle */
      const int64_t pick =
          j + (int64_t)(stsa_splitmix64(&state) % (uint64_t)(sizes[g] - j));
      const int32_t t = m[j];
      m[j] = m[pick];
      m[pick] = t;
      d[drew++] = (drawn){v0 + m[j], g};
    }
  }
  qsort(d, (size_t)drew, sizeof *d, by_token);
  for (int64_t r = 0; r < drew; r++) {
    out->rows[r] = d[r].token;
    out->group[r] = d[r].group;
  }
  out->groups = G;
  free(start);
  free(members);
  free(d);
  return 0;
}

void stsa_strata_geometric(const double *log_score, const uint8_t *split, int64_t L,
                           int64_t G, int32_t *label, int64_t *size) {
  double top = -INFINITY;
  for (int64_t i = 0; i < L; i++)
    top = log_score[i] > top ? log_score[i] : top;
  for (int64_t g = 0; g < 2 * G; g++)
    size[g] = 0;
  const double span = STSA_STRATA_DECADES * log(10.0), least = top - span;
  const double step = G > 1 ? span / (double)(G - 1) : 1;
  for (int64_t i = 0; i < L; i++) {
    int64_t g = G - 1;
    if (G > 1 && log_score[i] > least) { /* steps of equal ratio below the top */
      const double r = (top - log_score[i]) / step;
      g = r < (double)(G - 2) ? (int64_t)r : G - 2;
    }
    g += split && split[i] ? G : 0;
    label[i] = (int32_t)g;
    size[g]++;
  }
}

void stsa_svg_strata(const stsa_geometry *g, int64_t R, int64_t *group, int64_t *pop,
                     int64_t *groups) {
  const int64_t L = g->frames * g->height * g->width;
  const int64_t G = R >= 2 ? R / 2 : 1;
  for (int64_t i = 0; i < G; i++)
    pop[i] = 0;
  for (int64_t r = 0; r < R; r++) {
    group[r] = r / 2 < G ? r / 2 : G - 1;
    pop[group[r]] += (r + 1) * L / R - r * L / R;
  }
  *groups = G;
}
