/*
 * svg2.c — see svg2.h. Per (batch, head) of a call:
 *   1. gather the video queries and keys (f32) and run k-means on each:
 *      k-means++ and cfg.kmeans_iters_cold iterations on a layer's first
 *      call, cfg.kmeans_iters_warm from that layer's previous centroids after;
 *   2. score the centroid pairs (select.h) and keep, per query cluster, the
 *      key clusters of the top-p (or key-budget) rule;
 *   3. under an error budget, bound the head's relative error from rows
 *      drawn in every query cluster (strata.h, bound.h) against the dense
 *      rows, for the planned selection and the larger ones of the ladder
 *      (one pass over the heads' K/V serves all); take the first whose
 *      bound is within the budget, else run the head dense. A warm call
 *      whose heads all met the budget with their first candidate at the
 *      layer's last call profiles the dense rows only: its heads run their
 *      first candidates and the bound is taken on their output rows after
 *      the run (stsa_svg2_settle; a head that misses then climbs its ladder
 *      and runs again).
 *      Without a budget nothing is profiled (the estimate is NaN);
 *   4. build (or reuse, when labels and selection are unchanged) the head's
 *      cluster plan.
 */
#define _POSIX_C_SOURCE 200809L
#include "svg/svg2.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/context.h"
#include "core/convert.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "mask/cluster_plan.h"
#include "mask/geometry.h"
#include "mask/mask.h"
#include "svg/bound.h"
#include "svg/kmeans.h"
#include "svg/profile.h"
#include "svg/select.h"
#include "svg/strata.h"

/* Published counts (Wan 2.1 at 720p, 75,600 video tokens): 300 query and
 * 1000 key clusters; other sizes scale them, down to the floors below. */
#define REF_TOKENS 75600.0
#define REF_Q_CLUSTERS 300.0
#define REF_KV_CLUSTERS 1000.0
/* Clusters of fewer tokens than this make rectangles too small to pay. */
#define MIN_CLUSTER_TOKENS 8
/* Automatic counts stay at least this many per frame: scaled down to a
 * small input (4 / 13 at 5 x 12 x 16 tokens), a cluster merges a small
 * object with its background and every query of it loses the object's keys
 * (the quality zoo's mean error 0.17 -> 0.08 at the same budget). Below the
 * published counts at Wan 480p and 720p (126 / 420 at 21 frames). */
#define Q_PER_FRAME 6
#define KV_PER_FRAME 20
#define DEFAULT_MIN_FRACTION 0.10
#define DEFAULT_ITERS_COLD 50
#define DEFAULT_ITERS_WARM 2
/* Lloyd stops when no centroid moves more than this (published 1e-4). */
#define KMEANS_TOL 1e-4
/* The budget ladder: top-p values tried after the configured one. */
static const double TOP_P_LADDER[] = {0.95, 0.98, 0.995};
#define LADDER_MAX 3 /* candidates per head: the profiling pass takes 4 masks */
/* The profiled rows are one q tile of at most 4096 rows, a multiple of the
 * kernels' register-tile rows (12 or 6). */
#define MAX_PROFILE_ROWS 4092

typedef struct layer_state {
  int64_t layer; /* the key; -1: an empty slot of the store */
  int valid;
  int64_t B;
  float *qc, *kc;    /* [B*H][QC][D], [B*H][KC][D] */
  int32_t *lq, *lk;  /* [B*H][L] the video tokens' query and key labels of the
                      * last call: a warm call's k-means starts from them */
  uint64_t *sig;     /* [B*H] signature of the cached plan's labels and selection */
  stsa_plan **plans; /* [B*H] the cached plans */
  /* [B*H] 1: the head's first candidate met the budget at the layer's last
   * call under one. A batch entry whose heads all did defers its bound to
   * its output (stsa_svg2_settle): a head that then misses runs twice. */
  uint8_t *first_met;
} layer_state;

struct stsa_svg2 {
  int64_t QC, KC, H, D, L;
  int64_t R; /* rows profiled per head under a budget (strata.h) */
  /* The layers called so far, by layer: open addressing with linear
   * probing, a power-of-two number of slots at most half full. Memory
   * follows the distinct layers called, not the largest one: any layer in
   * [0, INT64_MAX] is a key (an array indexed by the layer took 6.4 GB at
   * layer 1e8, and its size wrapped at 2^58). */
  layer_state *layers;
  int64_t layer_slots, layer_count;
  /* Kept between calls (each call needs the same sizes): the k-means'
   * scratch, one per k-means running at once, and the video rows gathered
   * as f32 for them. Allocated per call, they were mapped and zeroed by the
   * kernel again each time: a warm Wan-480p call 0.5% slower (its k-means
   * 2.5%), a few calls far more. */
  stsa_workspace *km_scratch;
  int km_slots;
  stsa_workspace xbuf;
  struct settle_state *pending; /* a planned batch entry whose bound waits for
                                 * its output (stsa_svg2_settle); NULL: none */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Largest a with a * b <= cap (b >= 1), at least 1. */
static int64_t fit_under(int64_t b, int64_t cap) { return cap / b > 0 ? cap / b : 1; }

void stsa_svg2_clusters(const stsa_svg_config *cfg, int64_t *q_clusters,
                        int64_t *kv_clusters) {
  const stsa_geometry *g = &cfg->geometry;
  const int64_t L = g->frames * g->height * g->width;
  const int64_t cap = STSA_SVG2_MAX_CLUSTER_PAIRS;
  int64_t most = L / MIN_CLUSTER_TOKENS > 0 ? L / MIN_CLUSTER_TOKENS : 1;
  int64_t qc = cfg->q_clusters, kc = cfg->kv_clusters;
  if (!qc)
    qc = (int64_t)llround(REF_Q_CLUSTERS * (double)L / REF_TOKENS);
  if (!kc)
    kc = (int64_t)llround(REF_KV_CLUSTERS * (double)L / REF_TOKENS);
  if (!cfg->q_clusters && qc < Q_PER_FRAME * g->frames)
    qc = Q_PER_FRAME * g->frames;
  if (!cfg->kv_clusters && kc < KV_PER_FRAME * g->frames)
    kc = KV_PER_FRAME * g->frames;
  qc = cfg->q_clusters ? qc : qc < 1 ? 1 : qc > most ? most : qc;
  kc = cfg->kv_clusters ? kc : kc < 1 ? 1 : kc > most ? most : kc;
  /* Automatic counts give way to the cap on the pairs (from ~280,000 video
   * tokens on): both shrink by the same factor, or the automatic one alone
   * next to an explicit one. Explicit counts past it are the check's. */
  if (qc > cap / kc) {
    if (!cfg->q_clusters && !cfg->kv_clusters) {
      const double f = sqrt((double)cap / ((double)qc * (double)kc));
      qc = (int64_t)((double)qc * f) > 1 ? (int64_t)((double)qc * f) : 1;
      kc = fit_under(qc, cap) < kc ? fit_under(qc, cap) : kc;
    } else if (!cfg->q_clusters) {
      qc = fit_under(kc, cap);
    } else if (!cfg->kv_clusters) {
      kc = fit_under(qc, cap);
    }
  }
  *q_clusters = qc;
  *kv_clusters = kc;
}

stsa_status stsa_svg2_check(const stsa_svg_config *c, stsa_errbuf *err) {
  const int64_t L = c->geometry.frames * c->geometry.height * c->geometry.width;
  STSA_RETURN_IF(c->q_clusters < 0 || c->q_clusters > L || c->kv_clusters < 0 ||
                     c->kv_clusters > L,
                 err, STSA_ERR_BAD_PARAM,
                 "svg2: %lld query and %lld key clusters, expected 0 (automatic) or "
                 "1..%lld (the video tokens)",
                 (long long)c->q_clusters, (long long)c->kv_clusters, (long long)L);
  int64_t qc = 0, kc = 0;
  stsa_svg2_clusters(c, &qc, &kc);
  STSA_RETURN_IF(qc > STSA_SVG2_MAX_CLUSTER_PAIRS / kc, err, STSA_ERR_BAD_PARAM,
                 "svg2: %lld query x %lld key clusters, expected at most %lld cluster "
                 "pairs (2^22, e.g. 2048 x 2048; each call's scratch grows with them)",
                 (long long)qc, (long long)kc, (long long)STSA_SVG2_MAX_CLUSTER_PAIRS);
  STSA_RETURN_IF(!(c->top_p >= 0 && c->top_p <= 1), err, STSA_ERR_BAD_PARAM,
                 "svg2: top_p = %s, expected 0 (use density) or (0, 1]",
                 stsa_real_str(c->top_p, 0).s);
  STSA_RETURN_IF(!(c->min_kv_fraction >= 0 && c->min_kv_fraction <= 1), err,
                 STSA_ERR_BAD_PARAM, "svg2: min_kv_fraction = %s, expected [0, 1]",
                 stsa_real_str(c->min_kv_fraction, 0).s);
  STSA_RETURN_IF(c->kmeans_iters_cold < 0 || c->kmeans_iters_cold > 10000 ||
                     c->kmeans_iters_warm < 0 || c->kmeans_iters_warm > 10000,
                 err, STSA_ERR_BAD_PARAM,
                 "svg2: k-means iterations %lld (cold) and %lld (warm), expected "
                 "0 (default) to 10000",
                 (long long)c->kmeans_iters_cold, (long long)c->kmeans_iters_warm);
  return STSA_OK;
}

stsa_status stsa_svg2_create(const stsa_svg_config *cfg, stsa_svg2 **out) {
  stsa_svg2 *s = calloc(1, sizeof *s);
  if (!s)
    return STSA_ERR_OUT_OF_MEMORY;
  stsa_svg2_clusters(cfg, &s->QC, &s->KC);
  s->H = cfg->heads;
  s->D = cfg->head_dim;
  s->L = cfg->geometry.frames * cfg->geometry.height * cfg->geometry.width;
  s->R = stsa_strata_rows(cfg->sample_rows, s->QC, s->L, MAX_PROFILE_ROWS);
  *out = s;
  return STSA_OK;
}

/* Frees a layer's state; the slot keeps its layer. */
static void layer_clear(layer_state *ls, int64_t H) {
  for (int64_t i = 0; ls->plans && i < ls->B * H; i++)
    stsa_plan_free(ls->plans[i]);
  free(ls->plans);
  free(ls->first_met);
  free(ls->sig);
  free(ls->qc);
  free(ls->kc);
  free(ls->lq);
  free(ls->lk);
  *ls = (layer_state){.layer = ls->layer};
}

static void pending_free(stsa_svg2 *s);

void stsa_svg2_free(stsa_svg2 *s) {
  if (!s)
    return;
  pending_free(s);
  for (int64_t i = 0; i < s->layer_slots; i++)
    if (s->layers[i].layer >= 0)
      layer_clear(&s->layers[i], s->H);
  for (int i = 0; i < s->km_slots; i++)
    stsa_workspace_release(&s->km_scratch[i]);
  free(s->km_scratch);
  stsa_workspace_release(&s->xbuf);
  free(s->layers);
  free(s);
}

/* The slot of `layer` in a table of `slots` (a power of two, not full), or
 * the empty slot where it goes. Layers are hashed: consecutive ones would
 * otherwise fill one run of slots. */
static layer_state *layer_slot(layer_state *table, int64_t slots, int64_t layer) {
  const uint64_t mask = (uint64_t)slots - 1;
  for (uint64_t i = stsa_hash_mix(0x6c61796572ull, (uint64_t)layer) & mask;;
       i = (i + 1) & mask)
    if (table[i].layer == layer || table[i].layer < 0)
      return &table[i];
}

/* Doubles the layer store (8 slots at first), moving every state. */
static int layers_grow(stsa_svg2 *s) {
  const int64_t slots = s->layer_slots ? 2 * s->layer_slots : 8;
  layer_state *table = malloc(sizeof *table * (size_t)slots);
  if (!table)
    return -1;
  for (int64_t i = 0; i < slots; i++)
    table[i] = (layer_state){.layer = -1};
  for (int64_t i = 0; i < s->layer_slots; i++)
    if (s->layers[i].layer >= 0)
      *layer_slot(table, slots, s->layers[i].layer) = s->layers[i];
  free(s->layers);
  s->layers = table;
  s->layer_slots = slots;
  return 0;
}

/* The state of `layer` (>= 0) for B batch entries; a new layer or batch
 * size starts cold. */
static layer_state *layer_for(stsa_svg2 *s, int64_t layer, int64_t B) {
  layer_state *ls = s->layers ? layer_slot(s->layers, s->layer_slots, layer) : NULL;
  if (!ls || ls->layer < 0) {
    if (2 * (s->layer_count + 1) > s->layer_slots) {
      if (layers_grow(s) != 0)
        return NULL;
      ls = layer_slot(s->layers, s->layer_slots, layer);
    }
    ls->layer = layer;
    s->layer_count++;
  }
  if (ls->qc && ls->B == B)
    return ls;
  layer_clear(ls, s->H);
  const size_t heads = (size_t)(B * s->H);
  ls->B = B;
  ls->qc = malloc(sizeof(float) * heads * (size_t)(s->QC * s->D));
  ls->kc = malloc(sizeof(float) * heads * (size_t)(s->KC * s->D));
  ls->lq = malloc(sizeof(int32_t) * heads * (size_t)s->L);
  ls->lk = malloc(sizeof(int32_t) * heads * (size_t)s->L);
  ls->sig = calloc(heads, sizeof *ls->sig);
  ls->plans = calloc(heads, sizeof *ls->plans);
  ls->first_met = calloc(heads, 1);
  if (!ls->qc || !ls->kc || !ls->lq || !ls->lk || !ls->sig || !ls->plans ||
      !ls->first_met) {
    layer_clear(ls, s->H); /* the slot stays, empty: the next call retries */
    return NULL;
  }
  return ls;
}

/* Scratch of one call: every head's clusters, and what each head's
 * selection leaves for the profiling pass and its plan. */
typedef struct call_work {
  int64_t H, N, L, QK;
  float *xbuf;                /* [threads][L][D] video rows gathered as f32, if needed
                               * (the session's workspace) */
  int64_t *q_sizes, *k_sizes; /* [H][QC], [H][KC] */
  stsa_errbuf *job_err;       /* [2 H] each k-means' message */
  stsa_status *job_status;    /* [2 H] */
  double *prob;               /* [planning threads][QC][KC] */
  int plan_threads;           /* threads over the heads' selections and plans */
  int32_t *q_label, *k_label; /* [H][N] labels by native token, -1 for text */
  uint8_t *keep;              /* [H][LADDER_MAX][QC][KC] per candidate */
  uint64_t row_seed;          /* of the call's profiled rows */
  int64_t R;                  /* profiled rows per head this call (<= the session's) */
  int64_t *rows, *row_group;  /* [H][R] each head's rows and their strata */
  int64_t *row_pop, *groups;  /* [H][2 QC] the strata's rows, [H] how many strata */
  float *q_spread;            /* [H][L] each video query's squared distance to its
                               * centroid, when the call bounds its error */
  double *q_drop;             /* [H][QC] the mass each query cluster's selection drops */
  double *planned;            /* [H] the first candidate's density (video pairs) */
  stsa_mask **mask;           /* [(1 + LADDER_MAX) * H]: dense, then the candidates */
  int pack_align;             /* the plans' (stsa_cluster_layout) */
} call_work;

static void work_free(call_work *w) {
  for (int64_t i = w->H; w->mask && i < (1 + LADDER_MAX) * w->H; i++)
    stsa_mask_free(w->mask[i]);
  free(w->mask);
  free(w->job_err);
  free(w->job_status);
  free(w->q_sizes);
  free(w->k_sizes);
  free(w->prob);
  free(w->q_label);
  free(w->k_label);
  free(w->keep);
  free(w->rows);
  free(w->row_group);
  free(w->row_pop);
  free(w->groups);
  free(w->q_spread);
  free(w->q_drop);
  free(w->planned);
}

/* The heads' selections and plans are independent: a thread a head, up
 * to the context's threads (each holds its own [QC][KC] probabilities). */
static int work_alloc(call_work *w, const stsa_svg2 *s, int64_t N, int threads) {
  memset(w, 0, sizeof *w);
  w->plan_threads = (int)(threads < s->H ? threads : s->H);
  w->H = s->H;
  w->N = N;
  w->L = s->L;
  w->QK = s->QC * s->KC;
  const size_t HN = (size_t)(s->H * N), H = (size_t)s->H;
  w->q_sizes = malloc(sizeof(int64_t) * H * (size_t)s->QC);
  w->k_sizes = malloc(sizeof(int64_t) * H * (size_t)s->KC);
  w->job_err = calloc(2 * H, sizeof *w->job_err);
  w->job_status = calloc(2 * H, sizeof *w->job_status);
  w->prob = malloc(sizeof(double) * (size_t)w->plan_threads * (size_t)w->QK);
  w->q_label = malloc(sizeof(int32_t) * HN);
  w->k_label = malloc(sizeof(int32_t) * HN);
  w->keep = malloc((size_t)(s->H * LADDER_MAX) * (size_t)w->QK);
  w->mask = calloc((size_t)((1 + LADDER_MAX) * s->H), sizeof *w->mask);
  w->R = s->R;
  w->rows = malloc(sizeof(int64_t) * H * (size_t)s->R);
  w->row_group = malloc(sizeof(int64_t) * H * (size_t)s->R);
  w->row_pop = malloc(sizeof(int64_t) * H * 2 * (size_t)s->QC);
  w->groups = malloc(sizeof(int64_t) * H);
  w->q_drop = malloc(sizeof(double) * H * (size_t)s->QC);
  w->planned = malloc(sizeof(double) * H);
  return w->q_sizes && w->k_sizes && w->job_err && w->job_status && w->prob &&
                 w->q_label && w->k_label && w->keep && w->mask && w->rows &&
                 w->row_group && w->row_pop && w->groups && w->q_drop && w->planned
             ? 0
             : -1;
}

static uint8_t *keep_of(const call_work *w, int64_t h, int i) {
  return w->keep + (h * LADDER_MAX + i) * w->QK;
}

/* A batch entry planned with its bound deferred (env->settle): what
 * stsa_svg2_settle needs to bound each head on the call's own output rows
 * and, for a head past the budget, to climb its ladder. */
typedef struct settle_state {
  call_work w;
  layer_state *ls;
  int64_t b;
  int n; /* candidates of the ladder */
  stsa_select_args cand[LADDER_MAX];
  float *dense_rows; /* [R][H][D] the sampled rows' dense outputs */
  double *energy;    /* [H][R] their squared norms */
} settle_state;

/* Frees p; its work too when it holds one (owns_work). */
static void settle_state_free(settle_state *p, int owns_work) {
  if (!p)
    return;
  if (owns_work)
    work_free(&p->w);
  free(p->dense_rows);
  free(p->energy);
  free(p);
}

static void pending_free(stsa_svg2 *s) {
  settle_state_free(s->pending, 1);
  s->pending = NULL;
}

/* The first of jobs [0, count) that failed, its message copied to the
 * context's (the jobs ran side by side, each with its own), or STSA_OK. */
static stsa_status first_failure(stsa_ctx *ctx, const call_work *w, int64_t count) {
  for (int64_t j = 0; j < count; j++)
    if (w->job_status[j] != STSA_OK)
      return stsa_fail(&ctx->err, w->job_status[j], "%s", w->job_err[j].text);
  return STSA_OK;
}

/* Whether k-means cannot read t's rows in place: not f32 with unit
 * element stride (k-means reads rows ld apart). */
static int needs_gather(const stsa_tensor *t, int64_t D) {
  return !(t->dtype == STSA_F32 && t->stride[3] == 1 && t->stride[1] >= D);
}

/* The video rows of head h of batch entry b as k-means input: the tensor's
 * own rows where possible, else a gathered f32 copy [L][D] in `buf`. */
static const float *video_rows(const stsa_tensor *t, int64_t b, int64_t h,
                               const stsa_geo *geo, int64_t D, float *buf, int64_t *ld) {
  if (!needs_gather(t, D)) {
    *ld = t->stride[1];
    return stsa_tensor_row(t, b, geo->v0, h);
  }
  for (int64_t i = 0; i < geo->L; i++)
    stsa_load_row_f32(stsa_tensor_row(t, b, geo->v0 + i, h), t->dtype, t->stride[3], D,
                      buf + i * D);
  *ld = D;
  return buf;
}

/* dist[i] = ||x_i - centre of its label||^2 over L rows of D (ld apart). */
static void centre_distances(const float *x, int64_t ld, int64_t L, int64_t D,
                             const float *cent, const int32_t *labels, float *dist) {
  enum { LANES = 8 }; /* independent sums the compiler keeps in vector lanes */
  for (int64_t i = 0; i < L; i++) {
    const float *xi = x + i * ld, *c = cent + (int64_t)labels[i] * D;
    float acc[LANES] = {0};
    int64_t d = 0;
    for (; d + LANES <= D; d += LANES)
      for (int j = 0; j < LANES; j++)
        acc[j] += (xi[d + j] - c[d + j]) * (xi[d + j] - c[d + j]);
    for (; d < D; d++)
      acc[0] += (xi[d] - c[d]) * (xi[d] - c[d]);
    float sum = 0;
    for (int j = 0; j < LANES; j++)
      sum += acc[j];
    dist[i] = sum;
  }
}

/* The session's k-means scratch for `slots` k-means at once. */
static int reserve_km_slots(stsa_svg2 *s, int slots) {
  if (slots <= s->km_slots)
    return 0;
  stsa_workspace *grown = realloc(s->km_scratch, sizeof *grown * (size_t)slots);
  if (!grown)
    return -1;
  memset(grown + s->km_slots, 0, sizeof *grown * (size_t)(slots - s->km_slots));
  s->km_scratch = grown;
  s->km_slots = slots;
  return 0;
}

/* Clusters every head's queries and keys (warm from the layer's centroids):
 * 2 H independent k-means, each deterministic on any thread count. With
 * enough of them to keep the threads balanced (2 a thread), they run side
 * by side on one thread each, keys (the larger) first: no k-means has a
 * serial step then. Else they run one after another on every thread. */
static stsa_status cluster_heads(stsa_ctx *ctx, stsa_svg2 *s, const stsa_svg_config *cfg,
                                 call_work *w, const stsa_geo *geo, const stsa_tensor *q,
                                 const stsa_tensor *k, int64_t b, layer_state *ls,
                                 int warm, int64_t layer, int video_unchecked) {
  const int64_t H = s->H, D = s->D, L = s->L, jobs = 2 * H;
  const int threads = ctx->threads > 0 ? ctx->threads : 1;
  const int side_by_side = threads > 1 && jobs >= 2 * (int64_t)threads;
  const int gathers = needs_gather(q, D) || needs_gather(k, D);
  if (gathers) {
    w->xbuf = stsa_workspace_get(
        &s->xbuf, sizeof(float) * (size_t)(side_by_side ? threads : 1) * (size_t)(L * D));
    STSA_RETURN_IF(!w->xbuf, &ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  }
  STSA_RETURN_IF(reserve_km_slots(s, side_by_side ? threads : 1) != 0, &ctx->err,
                 STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  const int64_t iters =
      warm ? (cfg->kmeans_iters_warm ? cfg->kmeans_iters_warm : DEFAULT_ITERS_WARM)
           : (cfg->kmeans_iters_cold ? cfg->kmeans_iters_cold : DEFAULT_ITERS_COLD);
#pragma omp parallel for num_threads(side_by_side ? threads : 1) schedule(dynamic, 1)
  for (int64_t j = 0; j < jobs; j++) {
    const int keys = j < H;
    const int64_t h = keys ? j : j - H, slot = b * H + h;
    const stsa_tensor *t = keys ? k : q;
    const int slot_of_thread = side_by_side ? omp_get_thread_num() : 0;
    float *buf = gathers ? w->xbuf + (int64_t)slot_of_thread * L * D : NULL;
    int64_t ld = 0;
    const float *x = video_rows(t, b, h, geo, D, buf, &ld);
    uint64_t seed = cfg->seed ^ ((uint64_t)layer * 0x100000001b3ull) ^
                    ((uint64_t)slot * 0x9e3779b97f4a7c15ull);
    if (keys)
      seed ^= 0x6b6579736b657973ull; /* "keys" */
    /* finite_checked: the session checked q and k before this call, or
     * left their video rows to this k-means (env->video_unchecked) */
    stsa_kmeans_args a = {x,
                          L,
                          (int)D,
                          ld,
                          keys ? s->KC : s->QC,
                          warm,
                          (int)iters,
                          KMEANS_TOL,
                          seed,
                          !video_unchecked,
                          side_by_side ? 1 : threads,
                          &w->job_err[j],
                          NULL,
                          &s->km_scratch[slot_of_thread]};
    float *cent = keys ? ls->kc + slot * s->KC * D : ls->qc + slot * s->QC * D;
    int32_t *labels = (keys ? ls->lk : ls->lq) + slot * L;
    a.hint = warm ? labels : NULL; /* the layer's last labels, overwritten */
    int64_t *sizes = keys ? w->k_sizes + h * s->KC : w->q_sizes + h * s->QC;
    w->job_status[j] = stsa_kmeans(ctx, &a, cent, labels, sizes, NULL);
    if (!keys && w->q_spread && w->job_status[j] == STSA_OK)
      centre_distances(x, ld, L, D, cent, labels, w->q_spread + h * L);
  }
  int64_t j = 0;
  while (j < jobs && w->job_status[j] == STSA_OK)
    j++;
  /* NaN/Inf in q or k: the message of the session's scan (the first bad row
   * of q, then of k), not a k-means point's */
  if (j < jobs && w->job_status[j] == STSA_ERR_NONFINITE && video_unchecked) {
    STSA_TRY(stsa_check_finite_tokens(q, "q", 0, q->shape[1], threads, &ctx->err));
    STSA_TRY(stsa_check_finite_tokens(k, "k", 0, k->shape[1], threads, &ctx->err));
  }
  return first_failure(ctx, w, jobs);
}

/* Labels by native token: video tokens their cluster's, text -1. */
static void native_labels(const stsa_geo *geo, const int32_t *video, int32_t *out) {
  for (int64_t i = 0; i < geo->N; i++)
    out[i] = -1;
  memcpy(out + geo->v0, video, sizeof(int32_t) * (size_t)geo->L);
}

/* The candidates a head is evaluated at: the configured rule first, then
 * (under a budget) larger top-p values, or doubled key budgets. */
static int ladder(int64_t L, double budget, const stsa_select_args *base,
                  stsa_select_args *cand) {
  int n = 0;
  cand[n++] = *base;
  if (!(budget > 0))
    return n;
  if (base->top_p > 0) {
    for (size_t i = 0; i < sizeof TOP_P_LADDER / sizeof *TOP_P_LADDER && n < LADDER_MAX;
         i++)
      if (TOP_P_LADDER[i] > base->top_p) {
        cand[n] = *base;
        cand[n++].top_p = TOP_P_LADDER[i];
      }
  } else {
    for (int64_t keys = base->key_budget * 2; n < LADDER_MAX && keys < 2 * L; keys *= 2) {
      cand[n] = *base;
      cand[n++].key_budget = keys;
    }
  }
  return n;
}

/* The rule of the config for a head's centroids (kv_sizes, centroids set
 * by the caller). */
static stsa_select_args base_rule(const stsa_svg2 *s, const stsa_svg_config *cfg) {
  const double min_frac =
      cfg->min_kv_fraction > 0 ? cfg->min_kv_fraction : DEFAULT_MIN_FRACTION;
  stsa_select_args a = {s->QC,
                        s->KC,
                        (int)s->D,
                        NULL,
                        NULL,
                        NULL,
                        1.0 / sqrt((double)s->D),
                        cfg->top_p,
                        (int64_t)ceil(cfg->density * (double)s->L),
                        (int64_t)floor(min_frac * (double)s->KC)};
  return a;
}

/* What the bound's row draw needs of head h's first candidate: the mass
 * (centroid probabilities) each query cluster's selection drops, by which
 * its strata group the clusters, and the density it plans, by which the
 * call's rows are sized. */
static void planned_selection(const stsa_svg2 *s, call_work *w, int64_t h,
                              const double *prob) {
  const uint8_t *keep = keep_of(w, h, 0);
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
  }
  w->planned[h] = s->L > 0 ? pairs / ((double)s->L * (double)s->L) : 1.0;
}

/* Phase 1 for head h, after its clusters: the candidates' keep maps and
 * masks, from the probabilities in prob ([QC][KC], the thread's). Failures
 * go to err (heads run side by side). */
static stsa_status select_head(const stsa_svg2 *s, const stsa_svg2_env *env,
                               const layer_state *ls, int64_t b, int64_t h, double budget,
                               call_work *w, double *prob, stsa_errbuf *err) {
  const stsa_svg_config *cfg = env->cfg;
  const stsa_geometry *g = &cfg->geometry;
  stsa_geo geo;
  stsa_geo_init(&geo, g);
  const int64_t slot = b * s->H + h, D = s->D, H = s->H;
  float *qc = ls->qc + slot * s->QC * D, *kc = ls->kc + slot * s->KC * D;
  int32_t *ql = w->q_label + h * w->N, *kl = w->k_label + h * w->N;
  native_labels(&geo, ls->lq + slot * s->L, ql);
  native_labels(&geo, ls->lk + slot * s->L, kl);
  stsa_select_args base = base_rule(s, cfg);
  base.qc = qc;
  base.kc = kc;
  base.kv_sizes = w->k_sizes + h * s->KC;
  stsa_select_args cand[LADDER_MAX];
  const int ncand = ladder(s->L, budget, &base, cand);
  STSA_RETURN_IF(stsa_select_probs(&base, prob) != 0, err, STSA_ERR_OUT_OF_MEMORY,
                 "svg2: out of memory");
  stsa_mask *text = NULL;
  stsa_status mst = stsa_mask_text(g, &text);
  STSA_RETURN_IF(mst != STSA_OK, err, mst, "svg2: text mask: %s", stsa_status_str(mst));
  stsa_status st = STSA_OK;
  for (int i = 0; i < ncand && st == STSA_OK; i++) {
    stsa_mask *rect = NULL;
    if (stsa_select_keep(&cand[i], prob, keep_of(w, h, i)) != 0)
      st = stsa_fail(err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
    if (st == STSA_OK)
      st =
          stsa_mask_clusters(ql, geo.N, s->QC, kl, geo.N, s->KC, keep_of(w, h, i), &rect);
    if (st == STSA_OK)
      st = stsa_mask_or(rect, text, &w->mask[(1 + i) * H + h]);
    if (st != STSA_OK && !err->text[0])
      stsa_fail(err, st, "svg2: cluster mask: %s", stsa_status_str(st));
    stsa_mask_free(rect);
  }
  stsa_mask_free(text);
  if (st == STSA_OK)
    planned_selection(s, w, h, prob);
  return st;
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
static stsa_status pick_head(const stsa_svg2 *s, const stsa_svg2_env *env,
                             layer_state *ls, int64_t b, int64_t h, const call_work *w,
                             const stsa_select_args *cand, int n, const double *rel,
                             double budget, stsa_svg2_head *res, stsa_errbuf *err) {
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
    return STSA_OK;
  }
  res->budget = pick > 0 ? STSA_BUDGET_RAISED : STSA_BUDGET_NONE;
  res->est_error = (float)rel[pick * H + h];
  res->top_p = (float)cand[pick].top_p;
  const uint8_t *keep = keep_of(w, h, pick);
  const uint64_t sig = selection_sig(w, h, keep);
  if (!ls->plans[slot] || ls->sig[slot] != sig) {
    stsa_cluster_layout lay = {
        g,    s->QC,       s->KC,        w->q_label + h * N, w->k_label + h * N,
        keep, env->q_tile, env->kv_tile, w->pack_align};
    stsa_plan *plan = NULL;
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

/* Head h's rows in cluster order (stable), so that a register tile of rows
 * keeps the same key clusters in the profiling pass's masked sums. */
static void cluster_order(const call_work *w, int64_t h, int64_t QC, int32_t *order,
                          int64_t *count) {
  const int64_t R = w->R, *rows = w->rows + h * R;
  const int32_t *label = w->q_label + h * w->N; /* the rows are video tokens */
  memset(count, 0, sizeof(int64_t) * (size_t)(QC + 1));
  for (int64_t r = 0; r < R; r++)
    count[label[rows[r]] + 1]++;
  for (int64_t c = 0; c < QC; c++)
    count[c + 1] += count[c];
  for (int64_t r = 0; r < R; r++)
    order[count[label[rows[r]]]++] = (int32_t)r;
}

/* A query this many times its cluster's mean squared distance from the
 * centre is an outlier: the selection, made for the centre, fits it least. */
#define RISK_SPREAD 2.0

/* Head h's video tokens whose error is likely large ([L], malloc'ed; NULL
 * when out of memory): those whose own key cluster the first candidate's
 * selection drops for their query cluster (a local head loses its nearest
 * keys there), and the queries farther than RISK_SPREAD x their cluster's
 * mean squared distance from its centre. Measured on heads not from the
 * repository's generators (3-D rotary codes, smooth semantic fields), the
 * bound's errors sat in a handful of such rows (4 of 1,680 held half). */
static uint8_t *risky_tokens(const stsa_svg2 *s, const call_work *w, int64_t h,
                             int64_t v0) {
  const int32_t *ql = w->q_label + h * w->N + v0, *kl = w->k_label + h * w->N + v0;
  const uint8_t *keep = keep_of(w, h, 0);
  const float *spread = w->q_spread + h * s->L;
  const int64_t *size = w->q_sizes + h * s->QC;
  uint8_t *risk = malloc((size_t)s->L);
  double *mean = calloc((size_t)s->QC, sizeof(double)); /* x the cluster's size */
  if (!risk || !mean) {
    free(risk);
    free(mean);
    return NULL;
  }
  for (int64_t i = 0; i < s->L; i++)
    mean[ql[i]] += spread[i];
  for (int64_t i = 0; i < s->L; i++)
    risk[i] = !keep[ql[i] * s->KC + kl[i]] ||
              (double)spread[i] * (double)size[ql[i]] > RISK_SPREAD * mean[ql[i]];
  free(mean);
  return risk;
}

/* Phase 2 under a budget: the rows the heads' bounds are taken on. As many
 * as keep their dense rows near STSA_BOUND_ROW_SHARE of the call's
 * attention at the heads' mean planned density (the same count for every
 * head: one pass profiles them), drawn per head from strata of its
 * query clusters alike in the mass their selection drops, the tokens whose
 * own key cluster the selection drops in strata of their own (strata.h). */
static stsa_status draw_rows(stsa_ctx *ctx, const stsa_svg2 *s, const stsa_svg2_env *env,
                             call_work *w) {
  /* the call's work is the sum over its heads: R rows a head keep to the
   * share of it at the heads' mean density */
  double mean = 0;
  for (int64_t h = 0; h < s->H; h++)
    mean += w->planned[h] / (double)s->H;
  w->R = stsa_strata_call_rows(s->R, env->cfg->sample_rows, mean, s->L);
  stsa_geo geo;
  stsa_geo_init(&geo, &env->cfg->geometry);
#pragma omp parallel for num_threads(w->plan_threads) schedule(dynamic, 1)
  for (int64_t h = 0; h < s->H; h++) {
    const int32_t *ql = w->q_label + h * w->N + geo.v0;
    uint8_t *risk = risky_tokens(s, w, h, geo.v0);
    stsa_strata got = {w->rows + h * w->R, w->row_group + h * w->R,
                       w->row_pop + h * 2 * s->QC, 0};
    const int failed =
        !risk || stsa_strata_draw(ql, s->L, geo.v0, s->QC, w->q_sizes + h * s->QC,
                                  w->q_drop + h * s->QC, risk, w->R,
                                  stsa_hash_mix(w->row_seed, (uint64_t)h), &got) != 0;
    w->job_status[h] = failed ? STSA_ERR_OUT_OF_MEMORY : STSA_OK;
    if (failed)
      stsa_fail(&w->job_err[h], STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
    w->groups[h] = got.groups;
    free(risk);
  }
  return first_failure(ctx, w, s->H);
}

/* The bound of head h's candidate from its rows' squared errors and dense
 * energies ([R] each). */
static double candidate_bound(const stsa_svg2 *s, const call_work *w, int64_t h,
                              const double *err, const double *energy, double *scratch) {
  const stsa_err_sample smp = {w->R, w->row_group + h * w->R, w->row_pop + h * 2 * s->QC,
                               w->groups[h]};
  return stsa_err_bound(&smp, err, energy, scratch, NULL);
}

/* Under a budget, rel[i * H + h] = the error bound of head h's candidate i.
 * First every head's configured candidate in one pass over the heads' K/V;
 * then, for the heads whose bound exceeds the budget, the rest of the
 * ladder (a head at its configured rule, the common case, profiles one
 * mask besides dense). */
static stsa_status bound_heads(stsa_ctx *ctx, const stsa_svg2 *s,
                               const stsa_svg2_env *env, const call_work *w, int n,
                               double budget, const stsa_tensor *q, const stsa_tensor *k,
                               const stsa_tensor *v, int64_t b, double *rel) {
  const int64_t H = s->H, R = w->R;
  /* the rows' squares, then the bound's scratch: 5 a stratum, 2 QC strata */
  double *sq = malloc(sizeof(double) * (size_t)((1 + LADDER_MAX) * H * R + 10 * s->QC));
  int32_t *order = malloc(sizeof(int32_t) * (size_t)(H * R));
  const int32_t **orders = malloc(sizeof *orders * (size_t)H);
  int64_t *count = malloc(sizeof(int64_t) * (size_t)(s->QC + 1));
  stsa_status st =
      sq && order && orders && count
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  double *scratch = sq ? sq + (1 + LADDER_MAX) * H * R : NULL;
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    cluster_order(w, h, s->QC, order + h * R, count);
    orders[h] = order + h * R;
  }
  const stsa_mask *const *masks = (const stsa_mask *const *)w->mask;
  const stsa_geometry *g = &env->cfg->geometry;
  if (st == STSA_OK) /* the dense masks, then the first candidates: masks[0 .. 2H) */
    st = stsa_svg_profile_heads(ctx, g, masks, 2, w->rows, 1, R, orders, q, k, v, b, sq);
  for (int64_t h = 0; st == STSA_OK && h < H; h++)
    rel[h] = candidate_bound(s, w, h, sq + (H + h) * R, sq + h * R, scratch);
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    if (n < 2 || rel[h] <= budget)
      continue;
    const stsa_mask *pm[1 + LADDER_MAX];
    pm[0] = masks[h];
    for (int i = 1; i < n; i++)
      pm[i] = masks[(1 + i) * H + h];
    st = stsa_svg_profile_head(ctx, g, pm, n, w->rows + h * R, R, orders[h], q, k, v, b,
                               h, sq);
    for (int i = 1; st == STSA_OK && i < n; i++)
      rel[i * H + h] = candidate_bound(s, w, h, sq + i * R, sq, scratch);
  }
  free(count);
  free(orders);
  free(order);
  free(sq);
  return st;
}

void stsa_svg2_tiles(const stsa_ctx *ctx, int q_tile, int kv_tile, int *q_run,
                     int *kv_run) {
  const int mr = ctx->run->kern.mr, nr = ctx->run->kern.nr;
  *q_run = (q_tile + mr - 1) / mr * mr;
  *kv_run = (kv_tile + nr - 1) / nr * nr;
}

/* The session's env with its tiles on the backend the context has now. */
static stsa_svg2_env call_env(const stsa_svg2_env *session_env) {
  stsa_svg2_env run_env = *session_env;
  stsa_svg2_tiles(session_env->ctx, session_env->q_tile, session_env->kv_tile,
                  &run_env.q_tile, &run_env.kv_tile);
  return run_env;
}

/* Under a deferred bound: every head's dense rows on its drawn rows, kept
 * with the call's work in a settle_state (*out) for stsa_svg2_settle. */
static stsa_status dense_rows_heads(stsa_ctx *ctx, const stsa_svg2 *s,
                                    const stsa_svg2_env *env, const call_work *w,
                                    const stsa_tensor *q, const stsa_tensor *k,
                                    const stsa_tensor *v, int64_t b, settle_state **out) {
  const int64_t H = s->H, R = w->R;
  settle_state *p = calloc(1, sizeof *p);
  float *dense_rows = malloc(sizeof(float) * (size_t)(R * H * s->D));
  double *energy = malloc(sizeof(double) * (size_t)(H * R));
  stsa_status st =
      p && dense_rows && energy
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  if (st == STSA_OK)
    st = stsa_svg_profile_dense_rows(ctx, &env->cfg->geometry,
                                     (const stsa_mask *const *)w->mask, w->rows, R, q, k,
                                     v, b, dense_rows, energy);
  if (st != STSA_OK) {
    free(p);
    free(dense_rows);
    free(energy);
    return st;
  }
  p->b = b;
  p->dense_rows = dense_rows;
  p->energy = energy;
  *out = p;
  return STSA_OK;
}

stsa_status stsa_svg2_plan_batch(stsa_svg2 *s, const stsa_svg2_env *session_env,
                                 int64_t layer, int64_t B, int64_t b, uint64_t row_seed,
                                 const stsa_tensor *q, const stsa_tensor *k,
                                 const stsa_tensor *v, double max_rel_error,
                                 stsa_svg2_head *heads, double *cluster_ms, int *cold) {
  stsa_ctx *ctx = session_env->ctx;
  const stsa_svg2_env run_env = call_env(session_env);
  const stsa_svg2_env *env = &run_env;
  const int64_t H = s->H;
  pending_free(s); /* a planned entry the session never settled (its call failed) */
  layer_state *ls = layer_for(s, layer, B);
  STSA_RETURN_IF(!ls, &ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  const int warm = ls->valid;
  call_work w;
  double *rel = malloc(sizeof(double) * (size_t)(LADDER_MAX * H));
  stsa_status st =
      work_alloc(&w, s, stsa_geometry_tokens(&env->cfg->geometry),
                 ctx->threads > 0 ? ctx->threads : 1) == 0 &&
              rel
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  for (int64_t h = 0; h < H; h++)
    heads[h] = (stsa_svg2_head){0};
  w.row_seed = row_seed;
  /* bf16 inputs on a backend with bf16 tiles: spans on its key blocks */
  w.pack_align = stsa_bf16_tiles_take(&ctx->run->kern, q->dtype, k->dtype, v->dtype)
                     ? STSA_BF16_KEY_BLOCK
                     : 0;
  /* the candidates' rules (pick_head reads their top_p) are every head's */
  const stsa_select_args rule = base_rule(s, env->cfg);
  stsa_select_args cand[LADDER_MAX];
  const int n = ladder(s->L, max_rel_error, &rule, cand);
  const int bounds = max_rel_error > 0 || env->estimate;
  if (st == STSA_OK && bounds) { /* the strata's outliers */
    w.q_spread = malloc(sizeof(float) * (size_t)(H * s->L));
    if (!w.q_spread)
      st = stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  }
  if (st == STSA_OK) {
    stsa_geo geo;
    stsa_geo_init(&geo, &env->cfg->geometry);
    const double t0 = now_ms();
    st = cluster_heads(ctx, s, env->cfg, &w, &geo, q, k, b, ls, warm, layer,
                       env->video_unchecked);
    *cluster_ms += now_ms() - t0;
  }
  if (st == STSA_OK) {
    for (int64_t h = 0; h < H; h++) {
      w.mask[h] = (stsa_mask *)env->mask_dense; /* borrowed: never freed here */
      w.job_err[h].text[0] = '\0';
    }
#pragma omp parallel for num_threads(w.plan_threads) schedule(dynamic, 1)
    for (int64_t h = 0; h < H; h++)
      w.job_status[h] = select_head(s, env, ls, b, h, max_rel_error, &w,
                                    w.prob + (size_t)omp_get_thread_num() * (size_t)w.QK,
                                    &w.job_err[h]);
    st = first_failure(ctx, &w, H);
  }
  /* Under a budget, every head's candidates in one pass over the heads' K/V.
   * Without one nothing needs the estimate (SVG2 itself does not profile)
   * unless method auto asks for it: the pass is skipped, and the report
   * says not estimated (NaN). */
  for (int64_t i = 0; rel && i < LADDER_MAX * H; i++)
    rel[i] = NAN;
  /* Deferred (env->settle): the bound is taken on the call's own output
   * rows after it ran, so no candidate is profiled here; every head plans
   * its first candidate (rel NaN picks it) and stsa_svg2_settle climbs the
   * ladder for a head past the budget. */
  int defer = max_rel_error > 0 && env->settle && !env->estimate && warm;
  for (int64_t h = 0; defer && h < H; h++)
    defer = ls->first_met[b * H + h];
  settle_state *pending = NULL;
  if (st == STSA_OK && (max_rel_error > 0 || env->estimate))
    st = draw_rows(ctx, s, env, &w);
  if (st == STSA_OK && defer)
    st = dense_rows_heads(ctx, s, env, &w, q, k, v, b, &pending);
  else if (st == STSA_OK && (max_rel_error > 0 || env->estimate))
    st = bound_heads(ctx, s, env, &w, n, max_rel_error, q, k, v, b, rel);
  for (int64_t h = 0; st == STSA_OK && max_rel_error > 0 && !defer && h < H; h++)
    ls->first_met[b * H + h] = rel[h] <= max_rel_error;
  if (st == STSA_OK) {
#pragma omp parallel for num_threads(w.plan_threads) schedule(dynamic, 1)
    for (int64_t h = 0; h < H; h++)
      w.job_status[h] = pick_head(s, env, ls, b, h, &w, cand, n, rel, max_rel_error,
                                  &heads[h], &w.job_err[h]);
    st = first_failure(ctx, &w, H);
  }
  if (st == STSA_OK && pending) { /* the work waits for stsa_svg2_settle */
    pending->w = w;
    pending->ls = ls;
    pending->n = n;
    memcpy(pending->cand, cand, sizeof cand);
    s->pending = pending;
  } else {
    work_free(&w);
    settle_state_free(pending, 0);
  }
  free(rel);
  if (st != STSA_OK) {
    for (int64_t h = 0; h < H; h++) {
      stsa_plan_free(heads[h].plan);
      heads[h].plan = NULL;
    }
    ls->valid = 0; /* centroids may be half updated: the next call starts cold */
    return st;
  }
  if (b == B - 1) {
    if (!warm)
      *cold = 1;
    ls->valid = 1;
  }
  return STSA_OK;
}

/* The squared errors err[R] of head h's rows in `out` (the call's output of
 * batch entry b) against the dense rows the plan kept. */
static void output_errors(const stsa_svg2 *s, const settle_state *p, int64_t h,
                          const stsa_tensor *out, float *row, double *err) {
  const int64_t H = s->H, D = s->D, R = p->w.R;
  for (int64_t r = 0; r < R; r++) {
    stsa_load_row_f32(stsa_tensor_row(out, p->b, p->w.rows[h * R + r], h), out->dtype,
                      out->stride[3], D, row);
    const float *ref = p->dense_rows + (r * H + h) * D;
    double e = 0;
    for (int64_t d = 0; d < D; d++)
      e += ((double)row[d] - ref[d]) * ((double)row[d] - ref[d]);
    err[r] = e;
  }
}

/* Head h past the budget: its ladder's other candidates profiled on its
 * rows (rel[i * H + h], i >= 1), then pick_head's choice in *res. */
static stsa_status climb_ladder(const stsa_svg2 *s, const stsa_svg2_env *env,
                                const settle_state *p, int64_t h, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v, double budget,
                                double *rel, double *sq, double *scratch, int32_t *order,
                                int64_t *count, stsa_svg2_head *res) {
  const int64_t H = s->H, R = p->w.R;
  const call_work *w = &p->w;
  if (p->n > 1) {
    const stsa_mask *pm[1 + LADDER_MAX];
    pm[0] = w->mask[h];
    for (int i = 1; i < p->n; i++)
      pm[i] = w->mask[(1 + i) * H + h];
    cluster_order(w, h, s->QC, order, count);
    STSA_TRY(stsa_svg_profile_head(env->ctx, &env->cfg->geometry, pm, p->n,
                                   w->rows + h * R, R, order, q, k, v, p->b, h, sq));
    for (int i = 1; i < p->n; i++)
      rel[i * H + h] = candidate_bound(s, w, h, sq + i * R, sq, scratch);
  }
  return pick_head(s, env, p->ls, p->b, h, w, p->cand, p->n, rel, budget, res,
                   &env->ctx->err);
}

int stsa_svg2_deferred(const stsa_svg2 *s, int64_t b) {
  return s->pending && s->pending->b == b;
}

stsa_status stsa_svg2_settle(stsa_svg2 *s, const stsa_svg2_env *session_env, int64_t b,
                             const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const stsa_tensor *out,
                             double max_rel_error, stsa_svg2_head *heads, uint8_t *redo) {
  stsa_ctx *ctx = session_env->ctx;
  settle_state *p = s->pending;
  STSA_RETURN_IF(!p || p->b != b, &ctx->err, STSA_ERR_BAD_PARAM,
                 "svg2: batch entry %lld has no deferred bound to settle", (long long)b);
  const stsa_svg2_env env = call_env(session_env);
  const int64_t H = s->H, R = p->w.R;
  /* each row's error, the ladder's squares, the bound's scratch (5 a
   * stratum, 2 QC strata) */
  double *err = malloc(sizeof(double) * (size_t)((2 + LADDER_MAX) * R + 10 * s->QC));
  double *rel = malloc(sizeof(double) * (size_t)(LADDER_MAX * H));
  float *row = malloc(sizeof(float) * (size_t)s->D);
  int32_t *order = malloc(sizeof(int32_t) * (size_t)R);
  int64_t *count = malloc(sizeof(int64_t) * (size_t)(s->QC + 1));
  stsa_status st =
      err && rel && row && order && count
          ? STSA_OK
          : stsa_fail(&ctx->err, STSA_ERR_OUT_OF_MEMORY, "svg2: out of memory");
  double *sq = err ? err + R : NULL, *scratch = err ? err + (2 + LADDER_MAX) * R : NULL;
  for (int64_t i = 0; rel && i < LADDER_MAX * H; i++)
    rel[i] = INFINITY;
  for (int64_t h = 0; st == STSA_OK && h < H; h++) {
    output_errors(s, p, h, out, row, err);
    rel[h] = candidate_bound(s, &p->w, h, err, p->energy + h * R, scratch);
    heads[h] = (stsa_svg2_head){.est_error = (float)rel[h]};
    redo[h] = !(rel[h] <= max_rel_error);
    p->ls->first_met[b * H + h] = !redo[h];
    if (redo[h])
      st = climb_ladder(s, &env, p, h, q, k, v, max_rel_error, rel, sq, scratch, order,
                        count, &heads[h]);
  }
  if (st != STSA_OK)
    for (int64_t h = 0; h < H; h++) {
      stsa_plan_free(heads[h].plan);
      heads[h].plan = NULL;
      redo[h] = 0;
    }
  free(count);
  free(order);
  free(row);
  free(rel);
  free(err);
  pending_free(s);
  return st;
}
