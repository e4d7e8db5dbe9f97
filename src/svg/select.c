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
  double *log_size = malloc(sizeof(double) * (size_t)KC);
  if (!kct || !s || !log_size) {
    free(kct);
    free(s);
    free(log_size);
    return -1;
  }
  for (int64_t j = 0; j < KC; j++) /* -inf for an empty cluster: never kept */
    log_size[j] = a->kv_sizes[j] > 0 ? log((double)a->kv_sizes[j]) : -INFINITY;
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
      p[j] = a->kv_sizes[j] > 0 ? a->scale * s[j] + log_size[j] : -INFINITY;
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
  free(log_size);
  return 0;
}

/* One row's key clusters in descending probability, ties by index (a total
 * order: the kept set does not depend on how they are ranked). Only the
 * head of the order is ever read, so they sit in a binary heap and leave it
 * one at a time: O(KC + kept log KC) a row instead of a full sort. */
typedef struct ranked {
  double p;
  int64_t j;
} ranked;

static int ranks_before(const ranked *a, const ranked *b) {
  return a->p > b->p || (a->p == b->p && a->j < b->j);
}

static void sift_down(ranked *h, int64_t n, int64_t i) {
  for (;;) {
    int64_t best = i, l = 2 * i + 1, r = l + 1;
    if (l < n && ranks_before(&h[l], &h[best]))
      best = l;
    if (r < n && ranks_before(&h[r], &h[best]))
      best = r;
    if (best == i)
      return;
    const ranked t = h[i];
    h[i] = h[best];
    h[best] = t;
    i = best;
  }
}

/* Removes and returns the first of the heap's n entries. */
static ranked pop_first(ranked *h, int64_t *n) {
  const ranked top = h[0];
  h[0] = h[--*n];
  sift_down(h, *n, 0);
  return top;
}

/* Whether a rule has kept enough after t key clusters of mass `mass` and
 * `keys` keys. */
static int rule_met(const stsa_select_args *a, int64_t t, double mass, int64_t keys) {
  const int enough = a->top_p > 0 ? mass >= a->top_p : keys >= a->key_budget;
  return t > 0 && t >= a->min_keep && enough;
}

int stsa_select_keep_rules(const stsa_select_args *a, int n, const double *prob,
                           uint8_t *const *keep) {
  const int64_t QC = a->q_clusters, KC = a->kv_clusters;
  if (n < 1 || n > STSA_SELECT_RULES_MAX) /* done[] below holds that many */
    return -1;
  ranked *r = malloc(sizeof *r * (size_t)KC);
  if (!r)
    return -1;
  for (int c = 0; c < n; c++)
    memset(keep[c], 0, (size_t)(QC * KC));
  for (int64_t i = 0; i < QC; i++) {
    const double *p = prob + i * KC;
    int64_t m = 0;
    for (int64_t j = 0; j < KC; j++)
      if (a->kv_sizes[j] > 0)
        r[m++] = (ranked){p[j], j};
    for (int64_t x = m / 2 - 1; x >= 0; x--)
      sift_down(r, m, x);
    double mass = 0;
    int64_t keys = 0;
    int open = n; /* rules still keeping */
    uint8_t done[STSA_SELECT_RULES_MAX] = {0};
    for (int64_t t = 0; m > 0 && open > 0; t++) {
      for (int c = 0; c < n; c++)
        if (!done[c] && rule_met(&a[c], t, mass, keys)) {
          done[c] = 1;
          open--;
        }
      if (open == 0)
        break;
      const ranked next = pop_first(r, &m);
      for (int c = 0; c < n; c++)
        if (!done[c])
          keep[c][i * KC + next.j] = 1;
      mass += next.p;
      keys += a->kv_sizes[next.j];
    }
  }
  free(r);
  return 0;
}

int stsa_select_keep(const stsa_select_args *a, const double *prob, uint8_t *keep) {
  return stsa_select_keep_rules(a, 1, prob, &keep);
}
