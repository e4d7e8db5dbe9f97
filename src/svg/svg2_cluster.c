/*
 * svg2_cluster.c — step 1 of an svg2 call: every head's video queries and
 * keys, gathered as f32 where needed, clustered by k-means (warm from the
 * layer's centroids); a warm call that bounds its heads reads its queries'
 * estimated dropped masses in the gather of q (step 3's strata).
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/per_isa.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "svg/kmeans.h"
#include "svg/lanes.h"
#include "svg/svg2_internal.h"

#define DEFAULT_ITERS_COLD 50
#define DEFAULT_ITERS_WARM 2
/* Lloyd stops when no centroid moves more than this (published 1e-4). */
#define KMEANS_TOL 1e-4

/* Whether k-means cannot read t's rows in place: not f32 with unit
 * element stride (k-means reads rows ld apart). */
static int needs_gather(const stsa_tensor *t, int64_t D) {
  return !(t->dtype == STSA_F32 && t->stride[3] == 1 && t->stride[1] >= D);
}

/* A head's queries' leans from the layer's last tilt (layer_state): the
 * log of each query's estimated dropped mass, at most 0, under the last
 * call's first candidate and labels (svg2_bound.c, dropped_logit, takes
 * this call's). */
typedef struct last_tilt {
  const float *tilt;    /* [QC][D] */
  const double *at;     /* [QC] */
  const int32_t *label; /* [L] the last call's query labels */
  double *lean;         /* [L] out */
} last_tilt;

/* lean[i0 .. i0 + n) of t from the rows x[n][D]. */
STSA_PER_ISA static void lean_rows(const last_tilt *t, const float *x, int64_t i0,
                                   int64_t n, int64_t D) {
  for (int64_t i = 0; i < n; i++) {
    const int32_t c = t->label[i0 + i];
    const double z = t->at[c] + (double)lanes_dot(x + i * D, t->tilt + (int64_t)c * D, D);
    t->lean[i0 + i] = z < 0 ? z : 0;
  }
}

/* The video rows of head h of batch entry b as k-means input: the tensor's
 * own rows where possible, else a gathered f32 copy [L][D] in `buf`,
 * converted by kern's load_row (the generic conversion, a row at a time
 * without prefetch, took about 2 ms of one core for a head's q or K at Wan
 * 480p on bf16). With lean (or NULL; t must then need the gather), q's
 * leans too, each few rows while they sit in L1: a pass of their own over
 * a bf16 q took a Wan-480p head 0.65 ms, what reading q from memory costs. */
static const float *video_rows(const stsa_kernels *kern, const stsa_tensor *t, int64_t b,
                               int64_t h, const stsa_geo *geo, int64_t D, float *buf,
                               const last_tilt *lean, int64_t *ld) {
  if (!needs_gather(t, D)) {
    *ld = t->stride[1];
    return stsa_tensor_row(t, b, geo->v0, h);
  }
  for (int64_t i = 0; i < geo->L; i++) {
    if (i % STSA_ROWS_AHEAD == 0)
      stsa_tensor_prefetch_rows(t, b, geo->v0 + i + STSA_ROWS_AHEAD, STSA_ROWS_AHEAD, h);
    kern->load_row(stsa_tensor_row(t, b, geo->v0 + i, h), (int)t->dtype, t->stride[3], D,
                   buf + i * D);
    if (lean && ((i + 1) % STSA_ROWS_AHEAD == 0 || i + 1 == geo->L)) {
      const int64_t i0 = i / STSA_ROWS_AHEAD * STSA_ROWS_AHEAD;
      lean_rows(lean, buf + i0 * D, i0, i + 1 - i0, D);
    }
  }
  *ld = D;
  return buf;
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
stsa_status stsa_svg2_cluster_heads(stsa_ctx *ctx, stsa_svg2 *s,
                                    const stsa_svg_config *cfg, call_work *w,
                                    const stsa_geo *geo, const stsa_tensor *q,
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
  const int64_t iters = warm ? (cfg->svg2.kmeans_iters_warm ? cfg->svg2.kmeans_iters_warm
                                                            : DEFAULT_ITERS_WARM)
                             : (cfg->svg2.kmeans_iters_cold ? cfg->svg2.kmeans_iters_cold
                                                            : DEFAULT_ITERS_COLD);
#pragma omp parallel for num_threads(side_by_side ? threads : 1) schedule(dynamic, 1)
  for (int64_t j = 0; j < jobs; j++) {
    const int keys = j < H;
    const int64_t h = keys ? j : j - H, slot = b * H + h;
    const stsa_tensor *t = keys ? k : q;
    const int slot_of_thread = side_by_side ? omp_get_thread_num() : 0;
    float *buf = gathers ? w->xbuf + (int64_t)slot_of_thread * L * D : NULL;
    int64_t ld = 0;
    /* a warm call's queries' leans from the layer's last tilt of the head,
     * where k-means gathers q */
    const int leans = !keys && warm && w->lean && ls->tilt && ls->tilt_valid[slot] &&
                      needs_gather(t, D);
    last_tilt tilt = {0};
    if (leans)
      tilt = (last_tilt){ls->tilt + slot * s->QC * D, ls->tilt_at + slot * s->QC,
                         ls->lq + slot * L, w->lean + h * L};
    const float *x =
        video_rows(&ctx->run->kern, t, b, h, geo, D, buf, leans ? &tilt : NULL, &ld);
    if (!keys && w->lean_ready)
      w->lean_ready[h] = (uint8_t)leans;
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
  return stsa_svg2_first_failure(ctx, w, jobs);
}
