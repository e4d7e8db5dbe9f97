/*
 * svg2_select.c — steps 2 and 4 of an svg2 call: the candidates' selections
 * (the configured rule, then the ladder of larger top-p values or key
 * budgets under a budget) and their masks; then the candidate a head runs
 * and its cluster plan, cached per (layer, head).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "mask/cluster_plan.h"
#include "mask/mask.h"
#include "svg/select.h"
#include "svg/svg2_internal.h"

#define DEFAULT_MIN_FRACTION 0.10
/* The budget ladder: top-p values tried after the configured one. */
static const double TOP_P_LADDER[] = {0.95, 0.98, 0.995};

/* Labels by native token: video tokens their cluster's, text -1. */
static void native_labels(const stsa_geo *geo, const int32_t *video, int32_t *out) {
  for (int64_t i = 0; i < geo->N; i++)
    out[i] = -1;
  memcpy(out + geo->v0, video, sizeof(int32_t) * (size_t)geo->L);
}

/* The candidates a head is evaluated at: the configured rule first, then
 * (under a budget) larger top-p values, or doubled key budgets. */
int stsa_svg2_ladder(int64_t L, double budget, const stsa_select_args *base,
                     stsa_select_args *cand) {
  int n = 0;
  cand[n++] = *base;
  if (!(budget > 0))
    return n;
  if (base->top_p > 0) {
    for (size_t i = 0;
         i < sizeof TOP_P_LADDER / sizeof *TOP_P_LADDER && n < STSA_SVG2_LADDER_MAX; i++)
      if (TOP_P_LADDER[i] > base->top_p) {
        cand[n] = *base;
        cand[n++].top_p = TOP_P_LADDER[i];
      }
  } else {
    for (int64_t keys = base->key_budget * 2; n < STSA_SVG2_LADDER_MAX && keys < 2 * L;
         keys *= 2) {
      cand[n] = *base;
      cand[n++].key_budget = keys;
    }
  }
  return n;
}

/* The rule of the config for a head's centroids (kv_sizes, centroids set
 * by the caller). */
stsa_select_args stsa_svg2_base_rule(const stsa_svg2 *s, const stsa_svg_config *cfg) {
  const double min_frac =
      cfg->svg2.min_kv_fraction > 0 ? cfg->svg2.min_kv_fraction : DEFAULT_MIN_FRACTION;
  stsa_select_args a = {s->QC,
                        s->KC,
                        (int)s->D,
                        NULL,
                        NULL,
                        NULL,
                        1.0 / sqrt((double)s->D),
                        cfg->svg2.top_p,
                        (int64_t)ceil(cfg->density * (double)s->L),
                        (int64_t)floor(min_frac * (double)s->KC)};
  return a;
}

/* Key clusters less likely than this share of the query cluster's most
 * likely one are left out of the pooled keys: the pooled keys are the means
 * of the others, weighted by their probabilities. At Wan 480p that cuts the
 * pooling from 0.67 to 0.19 ms a head (thread CPU time), what the centre
 * distances it replaces cost; the tilt only orders queries into strata,
 * so an approximate one costs the bound width, not validity. */
#define TILT_LEAST 1e-2

/* The tilt of query cluster c's dropped mass (w->q_tilt): its selection
 * drops the key clusters of centroid probabilities p_j (j not kept), mass
 * m. Pooled into two keys, the dropped ones' p-weighted mean kd and the
 * kept ones' kk, a query q of the cluster drops, to first order in its
 * offset from the centre qc, the mass sigma(logit m + scale (q - qc) .
 * (kd - kk)): a query that leans towards the dropped keys loses more than
 * its centre, which is where a cluster's few large errors sit. One dot
 * product a query; the pooling is the selection's own cost again. */
static void dropped_tilt(const stsa_svg2 *s, const uint8_t *keep, const double *prob,
                         const float *qc, const float *kc, double m, float *acc,
                         float *tilt, double *at) {
  const int64_t D = s->D; /* acc [2 D]: the dropped and the kept keys' sums */
  memset(acc, 0, sizeof(float) * (size_t)(2 * D));
  double top = 0, weight[2] = {0, 0}; /* dropped, kept */
  for (int64_t j = 0; j < s->KC; j++)
    top = prob[j] > top ? prob[j] : top;
  for (int64_t j = 0; j < s->KC; j++) {
    if (!(prob[j] > 0) || prob[j] < TILT_LEAST * top) /* an empty key cluster (its
                                                         centroid is never read) */
      continue;
    const float p = (float)prob[j], *k = kc + j * D;
    float *a = acc + (keep[j] ? D : 0);
    weight[keep[j] ? 1 : 0] += prob[j];
    for (int64_t d = 0; d < D; d++) /* vectorised over d */
      a[d] += p * k[d];
  }
  /* No dropped cluster pooled (each under TILT_LEAST of the top): kd is
   * the origin, and the tilt reads how little the query leans towards the
   * kept keys. (Giving such a cluster no tilt at all was tried: as good on
   * the zoo, one head of the outside seed 4242 at 1.18 b; not kept.) */
  const double scale = 1.0 / sqrt((double)D);
  double centre = 0;
  for (int64_t d = 0; d < D; d++) {
    const double kd = weight[0] > 0 ? acc[d] / weight[0] : 0,
                 kk = weight[1] > 0 ? acc[D + d] / weight[1] : 0;
    tilt[d] = (float)(scale * (kd - kk));
    centre += (double)tilt[d] * qc[d];
  }
  *at = (m > 0 && m < 1 ? log(m / (1 - m)) : (m > 0 ? INFINITY : -INFINITY)) - centre;
}

/* What the bound's row draw needs of head h's first candidate: the mass
 * (centroid probabilities) each query cluster's selection drops and its
 * tilt by the query (dropped_tilt), by which the strata are drawn, and the
 * density it plans, by which the call's rows are sized. */
static int planned_selection(const stsa_svg2 *s, call_work *w, int64_t h,
                             const double *prob, const float *qc, const float *kc) {
  float *acc = w->q_tilt ? malloc(sizeof(float) * (size_t)(2 * s->D)) : NULL;
  if (w->q_tilt && !acc)
    return -1;
  const uint8_t *keep = stsa_svg2_keep_of(w, h, 0);
  const int64_t *qs = w->q_sizes + h * s->QC, *ks = w->k_sizes + h * s->KC;
  double pairs = 0;
  for (int64_t c = 0; c < s->QC; c++) {
    double drop = 0, keys = 0;
    for (int64_t j = 0; j < s->KC; j++) {
      const int kept = keep[c * s->KC + j];
      drop += kept ? 0 : prob[c * s->KC + j];
      keys += kept ? (double)ks[j] : 0;
    }
    w->q_drop[h * s->QC + c] = drop;
    pairs += (double)qs[c] * keys;
    if (w->q_tilt)
      dropped_tilt(s, keep + c * s->KC, prob + c * s->KC, qc + c * s->D, kc, drop, acc,
                   w->q_tilt + (h * s->QC + c) * s->D, w->q_tilt_at + h * s->QC + c);
  }
  free(acc);
  w->planned[h] = s->L > 0 ? pairs / ((double)s->L * (double)s->L) : 1.0;
  return 0;
}

/* Phase 1 for head h, after its clusters: the candidates' keep maps and
 * masks, from the probabilities in prob ([QC][KC], the thread's). Failures
 * go to err (heads run side by side). */
stsa_status stsa_svg2_select_head(const stsa_svg2 *s, const stsa_svg2_env *env,
                                  const layer_state *ls, int64_t b, int64_t h,
                                  double budget, call_work *w, double *prob,
                                  stsa_errbuf *err) {
  const stsa_svg_config *cfg = env->cfg;
  const stsa_geometry *g = &cfg->geometry;
  stsa_geo geo;
  stsa_geo_init(&geo, g);
  const int64_t slot = b * s->H + h, D = s->D;
  float *qc = ls->qc + slot * s->QC * D, *kc = ls->kc + slot * s->KC * D;
  int32_t *ql = w->q_label + h * w->N, *kl = w->k_label + h * w->N;
  native_labels(&geo, ls->lq + slot * s->L, ql);
  native_labels(&geo, ls->lk + slot * s->L, kl);
  stsa_select_args base = stsa_svg2_base_rule(s, cfg);
  base.qc = qc;
  base.kc = kc;
  base.kv_sizes = w->k_sizes + h * s->KC;
  stsa_select_args cand[STSA_SVG2_LADDER_MAX];
  const int ncand = stsa_svg2_ladder(s->L, budget, &base, cand);
  STSA_RETURN_IF(stsa_select_probs(&base, prob) != 0, err, STSA_ERR_OUT_OF_MEMORY,
                 "svg2: out of memory");
  uint8_t *keep[STSA_SVG2_LADDER_MAX];
  for (int i = 0; i < ncand; i++)
    keep[i] = stsa_svg2_keep_of(w, h, i);
  stsa_status st = stsa_select_keep_rules(cand, ncand, prob, keep) == 0
                       ? STSA_OK
                       : stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  if (st == STSA_OK && planned_selection(s, w, h, prob, qc, kc) != 0)
    st = stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  return st;
}

stsa_status stsa_svg2_candidate_mask(const stsa_svg2 *s, const stsa_geometry *g,
                                     const call_work *w, int64_t h, int i,
                                     stsa_errbuf *err) {
  stsa_mask **slot = &w->mask[(1 + i) * s->H + h];
  if (*slot)
    return STSA_OK;
  stsa_mask *text = NULL, *rect = NULL;
  stsa_status st = stsa_mask_text(g, &text);
  if (st == STSA_OK)
    st = stsa_mask_clusters(w->q_label + h * w->N, w->N, s->QC, w->k_label + h * w->N,
                            w->N, s->KC, stsa_svg2_keep_of(w, h, i), &rect);
  if (st == STSA_OK)
    st = stsa_mask_or(rect, text, slot);
  stsa_mask_free(rect);
  stsa_mask_free(text);
  return st == STSA_OK
             ? STSA_OK
             : stsa_fail(err, st, "svg2: cluster mask: %s", stsa_status_str(st));
}

static uint64_t selection_sig(const call_work *w, int64_t h, const uint8_t *keep) {
  uint64_t sig = stsa_hash_mix(0x5356473275ull, (uint64_t)w->pack_align);
  sig = stsa_hash_bytes(sig, w->q_label + h * w->N, sizeof(int32_t) * (size_t)w->N);
  sig = stsa_hash_bytes(sig, w->k_label + h * w->N, sizeof(int32_t) * (size_t)w->N);
  return stsa_hash_bytes(sig, keep, (size_t)w->QK);
}

/* Phase 3 for head h: the first candidate within the budget (else dense),
 * and its plan, reused while labels and selection are those of the
 * layer's last call. */
stsa_status stsa_svg2_pick_head(const stsa_svg2 *s, const stsa_svg2_env *env,
                                layer_state *ls, int64_t b, int64_t h, const call_work *w,
                                const stsa_select_args *cand, int n, const double *rel,
                                const double *half, double budget, stsa_svg2_head *res,
                                stsa_errbuf *err) {
  const stsa_geometry *g = &env->cfg->geometry;
  const int64_t slot = b * s->H + h, H = s->H, N = w->N;
  int pick = 0;
  if (budget > 0)
    while (pick < n && rel[pick * H + h] > budget)
      pick++;
  *res = (stsa_svg2_head){0};
  if (pick == n) { /* nothing sparse met the budget */
    res->budget = STSA_BUDGET_DENSE;
    res->est_error = (float)rel[(n - 1) * H + h];
    res->est_half = NAN;
    return STSA_OK;
  }
  res->budget = pick > 0 ? STSA_BUDGET_RAISED : STSA_BUDGET_NONE;
  res->est_error = (float)rel[pick * H + h];
  res->est_half = half ? (float)half[pick * H + h] : NAN;
  res->top_p = (float)cand[pick].top_p;
  res->step = (uint8_t)pick;
  const uint8_t *keep = stsa_svg2_keep_of(w, h, pick);
  const uint64_t sig = selection_sig(w, h, keep);
  if (!ls->plans[slot] || ls->sig[slot] != sig) {
    stsa_cluster_layout lay = {
        g,    s->QC,       s->KC,        w->q_label + h * N, w->k_label + h * N,
        keep, env->q_tile, env->kv_tile, w->pack_align};
    stsa_plan *plan = NULL;
    STSA_TRY(stsa_svg2_candidate_mask(s, g, w, h, pick, err));
    STSA_TRY(
        stsa_cluster_plan_build(env->ctx, &lay, w->mask[(1 + pick) * H + h], &plan, err));
    stsa_plan_free(ls->plans[slot]);
    ls->plans[slot] = plan;
    ls->sig[slot] = sig;
  }
  res->plan = stsa_plan_ref(ls->plans[slot]);
  res->density =
      (float)((double)ls->plans[slot]->parts[0].kept_pairs / ((double)N * (double)N));
  return STSA_OK;
}
