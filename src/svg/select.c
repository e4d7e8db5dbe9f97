/* select.c — see select.h. */
#include "svg/select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int stsa_select_probs(const stsa_select_args *a, double *prob) {
  const int64_t QC = a->q_clusters, KC = a->kv_clusters;
  const int d = a->d;
  /* kc transposed, so the inner loop runs over key clusters and vectorises */
  float *kct = malloc(sizeof(float) * (size_t)(KC * d));
  float *s = malloc(sizeof(float) * (size_t)KC);
  if (!kct || !s) {
    free(kct);
    free(s);
    return -1;
  }
  for (int64_t j = 0; j < KC; j++)
    for (int c = 0; c < d; c++)
      kct[(int64_t)c * KC + j] = a->kc[j * d + c];
  for (int64_t i = 0; i < QC; i++) {
    const float *q = a->qc + i * d;
    for (int64_t j = 0; j < KC; j++)
      s[j] = 0.0f;
    for (int c = 0; c < d; c++) {
      const float qv = q[c], *row = kct + (int64_t)c * KC;
      for (int64_t j = 0; j < KC; j++)
        s[j] += qv * row[j];
    }
    double *p = prob + i * KC, mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < KC; j++) {
      p[j] =
          a->kv_sizes[j] > 0 ? a->scale * s[j] + log((double)a->kv_sizes[j]) : -INFINITY;
      mx = p[j] > mx ? p[j] : mx;
    }
    for (int64_t j = 0; j < KC; j++) {
      p[j] = a->kv_sizes[j] > 0 ? exp(p[j] - mx) : 0.0;
      sum += p[j];
    }
    for (int64_t j = 0; j < KC; j++)
      p[j] = sum > 0 ? p[j] / sum : 0.0;
  }
  free(kct);
  free(s);
  return 0;
}

/* Sorting one row's key clusters by descending probability, ties by index:
 * qsort is not stable, so the index decides. */
typedef struct ranked {
  double p;
  int64_t j;
} ranked;

static int by_prob_desc(const void *x, const void *y) {
  const ranked *a = x, *b = y;
  if (a->p != b->p)
    return a->p > b->p ? -1 : 1;
  return (a->j > b->j) - (a->j < b->j);
}

int stsa_select_keep(const stsa_select_args *a, const double *prob, uint8_t *keep) {
  const int64_t QC = a->q_clusters, KC = a->kv_clusters;
  ranked *r = malloc(sizeof *r * (size_t)KC);
  if (!r)
    return -1;
  memset(keep, 0, (size_t)(QC * KC));
  for (int64_t i = 0; i < QC; i++) {
    const double *p = prob + i * KC;
    int64_t n = 0;
    for (int64_t j = 0; j < KC; j++)
      if (a->kv_sizes[j] > 0)
        r[n++] = (ranked){p[j], j};
    qsort(r, (size_t)n, sizeof *r, by_prob_desc);
    double mass = 0;
    int64_t keys = 0;
    for (int64_t t = 0; t < n; t++) {
      const int enough = a->top_p > 0 ? mass >= a->top_p : keys >= a->key_budget;
      if (t > 0 && t >= a->min_keep && enough)
        break;
      keep[i * KC + r[t].j] = 1;
      mass += r[t].p;
      keys += a->kv_sizes[r[t].j];
    }
  }
  free(r);
  return 0;
}
