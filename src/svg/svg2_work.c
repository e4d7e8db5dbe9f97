/*
 * svg2_work.c — the buffers of one svg2 call (call_work), the deferred
 * bound's state that outlives it (settle_state), and the jobs' failures.
 */
#include <stdlib.h>
#include <string.h>

#include "mask/mask.h"
#include "svg/svg2_internal.h"

void stsa_svg2_work_free(call_work *w) {
  for (int64_t i = w->H; w->mask && i < (1 + STSA_SVG2_LADDER_MAX) * w->H; i++)
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
  free(w->q_tilt);
  free(w->q_tilt_at);
  free(w->lean);
  free(w->lean_ready);
  free(w->q_drop);
  free(w->planned);
}

/* The heads' selections and plans are independent: a thread a head, up
 * to the context's threads (each holds its own [QC][KC] probabilities). */
int stsa_svg2_work_alloc(call_work *w, const stsa_svg2 *s, int64_t N, int threads) {
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
  w->keep = malloc((size_t)(s->H * STSA_SVG2_LADDER_MAX) * (size_t)w->QK);
  w->mask = calloc((size_t)((1 + STSA_SVG2_LADDER_MAX) * s->H), sizeof *w->mask);
  w->R = s->R;
  w->rows = malloc(sizeof(int64_t) * H * (size_t)s->R);
  w->row_group = malloc(sizeof(int64_t) * H * (size_t)s->R);
  w->pop_stride = s->R > 2 ? s->R : 2;
  w->row_pop = malloc(sizeof(int64_t) * H * (size_t)w->pop_stride);
  w->groups = malloc(sizeof(int64_t) * H);
  w->q_drop = malloc(sizeof(double) * H * (size_t)s->QC);
  w->planned = malloc(sizeof(double) * H);
  return w->q_sizes && w->k_sizes && w->job_err && w->job_status && w->prob &&
                 w->q_label && w->k_label && w->keep && w->mask && w->rows &&
                 w->row_group && w->row_pop && w->groups && w->q_drop && w->planned
             ? 0
             : -1;
}

/* Frees p; its work too when it holds one (owns_work). */
void stsa_svg2_settle_state_free(settle_state *p, int owns_work) {
  if (!p)
    return;
  if (owns_work)
    stsa_svg2_work_free(&p->w);
  free(p->dense_rows);
  free(p->energy);
  free(p);
}

void stsa_svg2_pending_free(stsa_svg2 *s) {
  stsa_svg2_settle_state_free(s->pending, 1);
  s->pending = NULL;
}

/* The first of jobs [0, count) that failed, its message copied to the
 * context's (the jobs ran side by side, each with its own), or STSA_OK. */
stsa_status stsa_svg2_first_failure(stsa_ctx *ctx, const call_work *w, int64_t count) {
  for (int64_t j = 0; j < count; j++)
    if (w->job_status[j] != STSA_OK)
      return stsa_fail(&ctx->err, w->job_status[j], "%s", w->job_err[j].text);
  return STSA_OK;
}
