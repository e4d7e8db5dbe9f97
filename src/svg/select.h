/*
 * select.h — SVG2's block selection: which key clusters each query cluster
 * keeps, from the centroids alone. The score of a (query cluster, key
 * cluster) pair is qc . kc * scale + ln |kc|: the log of the attention mass
 * the pair would receive if every member sat at its centroid (the
 * size-weighted softmax of Sparse VideoGen 2).
 */
#ifndef STSA_SVG_SELECT_H
#define STSA_SVG_SELECT_H

#include <stdint.h>

typedef struct stsa_select_args {
  int64_t q_clusters, kv_clusters;
  int d;
  const float *qc, *kc;    /* [q_clusters][d], [kv_clusters][d] centroids */
  const int64_t *kv_sizes; /* [kv_clusters] members of each key cluster */
  double scale;            /* the softmax scale (1/sqrt(D)) */
  /* Keep key clusters in descending probability until the cumulative
   * probability reaches top_p (top_p > 0), or until the kept keys reach
   * key_budget (top_p == 0); the top one always, and at least min_keep of
   * them (empty clusters are never kept). */
  double top_p;
  int64_t key_budget;
  int64_t min_keep;
} stsa_select_args;

/* The centroid probabilities: prob[i][j] = softmax_j(scale qc_i . kc_j +
 * ln |kc_j|), 0 for empty key clusters. prob is [q_clusters][kv_clusters];
 * 0 on success, -1 when out of memory. */
int stsa_select_probs(const stsa_select_args *a, double *prob);

/* keep[i][j] = 1 for the kept pairs of the rule above, from precomputed
 * probabilities; 0 on success, -1 when out of memory. */
int stsa_select_keep(const stsa_select_args *a, const double *prob, uint8_t *keep);

/* stsa_select_keep for n rules a[0 .. n) at once that differ only in
 * top_p, key_budget and min_keep (a[0]'s clusters and kv_sizes are every
 * rule's): keep[c] gets rule c's pairs, bitwise what stsa_select_keep
 * gives it, from one ranking of each query cluster's key clusters (the
 * rules take prefixes of the same order); -1 when out of memory or n is
 * not 1 .. STSA_SELECT_RULES_MAX. SVG2's budget ladder: one ranking where
 * three took 0.8-1.3 ms each a Wan-480p head. */
enum { STSA_SELECT_RULES_MAX = 8 };
int stsa_select_keep_rules(const stsa_select_args *a, int n, const double *prob,
                           uint8_t *const *keep);

#endif
