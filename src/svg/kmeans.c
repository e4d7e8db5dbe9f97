/* kmeans.c — see kmeans.h: the entry point, its scratch and Lloyd's update;
 * the assignments are in kmeans_assign.c, seeding in kmeans_seed.c. */
#include "svg/kmeans.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/per_isa.h"
#include "core/tensor.h"
#include "kernel/dispatch.h"
#include "svg/kmeans_internal.h"

/* ---- scratch ---------------------------------------------------------------- */

/* Panels per centroid group: one panel a group up to STSA_KM_MAX_GROUPS
 * panels, then as many as keep the groups at that count (finer groups give
 * tighter bounds; at k 130, 9 groups of one panel against 5 of two: a warm
 * call's k-means 22-24 -> 18-24 ms). */
static void choose_groups(km *m) {
  const int64_t npan = (m->k + m->nr - 1) / m->nr;
  int64_t gp = (npan + STSA_KM_MAX_GROUPS - 1) / STSA_KM_MAX_GROUPS;
  gp = gp < 1 ? 1 : gp;
  m->gp = (int)(gp < npan ? gp : npan);
  m->groups = (int)((npan + m->gp - 1) / m->gp);
}

/* Carves every scratch array out of one 64-byte aligned block: the
 * workspace's when there is one, else a new one (*block, to free; NULL
 * with a workspace). Returns 0, or -1 when it cannot be allocated. */
static int km_alloc(km *m, stsa_workspace *ws, void **block) {
  const size_t n = (size_t)m->n, k = (size_t)m->k, d = (size_t)m->d;
  const size_t G = (size_t)m->groups;
  const size_t npan = (k + (size_t)m->nr - 1) / (size_t)m->nr;
  const size_t nchunks = (n + STSA_KM_SAMPLE_CHUNK - 1) / STSA_KM_SAMPLE_CHUNK;
  size_t slot[3];
  m->thread_bytes = stsa_km_thread_floats(m->mr, m->nr, m->d, slot) * sizeof(float);
  /* sizes in floats (4 bytes), each rounded to 64 bytes */
  const size_t sizes[] = {
      stsa_km_floats64(npan * (size_t)m->nr * (d + 1)), /* panels */
      stsa_km_floats64(npan * (size_t)m->nr),           /* cnorm */
      stsa_km_floats64(n),                              /* row_val */
      stsa_km_floats64(n),                              /* row_val2 */
      stsa_km_floats64(n),                              /* xnorm */
      stsa_km_floats64(2 * n),                          /* upper */
      stsa_km_floats64(2 * k),                          /* shift */
      stsa_km_floats64(n),                              /* todo */
      stsa_km_floats64(2 * nchunks),                    /* chunk_cum */
      stsa_km_floats64(2 * k),                          /* counts */
      stsa_km_floats64(2 * (k + 1)),                    /* start */
      stsa_km_floats64(2 * k * d),                      /* sums */
      stsa_km_floats64(n),                              /* summed */
      stsa_km_floats64(n),                              /* members */
      stsa_km_floats64(2 * k),                          /* cursor */
      stsa_km_floats64(STSA_KM_PENDING_MAX),            /* pending */
      stsa_km_floats64(k),                              /* perm */
      stsa_km_floats64(k),                              /* pos */
      stsa_km_floats64(k),                              /* cgroup */
      stsa_km_floats64(2 * n * G),                      /* glow */
      stsa_km_floats64(n * G),                          /* gmin */
      stsa_km_floats64(2 * n),                          /* gmask */
      stsa_km_floats64(n * G),                          /* glist */
      stsa_km_floats64(2 * G),                          /* gcount */
      stsa_km_floats64(2 * G),                          /* gshift */
      stsa_km_floats64(G * d),                          /* gcent */
      stsa_km_floats64(k),                              /* glabel */
      stsa_km_floats64(npan),                           /* spread */
      stsa_km_floats64(2 * k * G),                      /* cd_low */
      stsa_km_floats64(n),                              /* coarse */
      stsa_km_floats64(2 * (G + 1)),                    /* cstart */
      stsa_km_floats64((G + (size_t)m->nr - 1) / (size_t)m->nr * (size_t)m->nr * (d + 1)),
      stsa_km_floats64(2 * n), /* gdone */
      stsa_km_floats64(m->thread_bytes / sizeof(float) * (size_t)m->threads)};
  enum { NSLOTS = sizeof sizes / sizeof sizes[0] };
  size_t total = 0;
  for (int i = 0; i < NSLOTS; i++)
    total += sizes[i];
  *block = NULL;
  float *p = ws ? stsa_workspace_get(ws, total * sizeof(float))
                : aligned_alloc(64, total * sizeof(float));
  if (!p)
    return -1;
  if (!ws)
    *block = p;
  void *at[NSLOTS];
  float *q = p;
  for (int i = 0; i < NSLOTS; i++) {
    at[i] = q;
    q += sizes[i];
  }
  m->panels = at[0];
  m->cnorm = at[1];
  m->row_val = at[2];
  m->row_val2 = at[3];
  m->xnorm = at[4];
  m->upper = at[5];
  m->shift = at[6];
  m->todo = at[7];
  m->chunk_cum = at[8];
  m->counts = at[9];
  m->start = at[10];
  m->sums = at[11];
  m->summed = at[12];
  m->members = at[13];
  m->cursor = at[14];
  m->pending = at[15];
  m->perm = at[16];
  m->pos = at[17];
  m->cgroup = at[18];
  m->glow = at[19];
  m->gmin = at[20];
  m->gmask = at[21];
  m->glist = at[22];
  m->gcount = at[23];
  m->gshift = at[24];
  m->gcent = at[25];
  m->glabel = at[26];
  m->spread = at[27];
  m->cd_low = at[28];
  m->coarse = at[29];
  m->cstart = at[30];
  m->cpanels = at[31];
  m->gdone = at[32];
  m->thread_mem = at[33];
  return 0;
}

/* ---- Lloyd: update ---------------------------------------------------------- */

/* Counts the members of each cluster and their prefix sums. */
static void count_labels(km *m, const int32_t *labels) {
  memset(m->counts, 0, sizeof(int64_t) * (size_t)m->k);
  for (int64_t i = 0; i < m->n; i++)
    m->counts[labels[i]]++;
  m->start[0] = 0;
  for (int64_t c = 0; c < m->k; c++)
    m->start[c + 1] = m->start[c] + m->counts[c];
}

/* The first centroid of part `part` of `parts`: parts of about equal
 * membership (start[] is the prefix of the counts), so equal work. */
static int64_t part_begin(const km *m, int part, int parts) {
  const int64_t target = m->n * part / parts;
  int64_t lo = 0, hi = m->k; /* first c with start[c] >= target */
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (m->start[mid] >= target)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* sums[c] += sign * x_i over the d coordinates (the same in any vector
 * width, each element its own: SSE2 cost a warm Wan-480p call ~1 ms). */
STSA_PER_ISA static void add_row(double *acc, const float *row, int d, double sign) {
  for (int j = 0; j < d; j++)
    acc[j] += sign * (double)row[j];
}

/* members[start[c] ..] = the points of cluster c in index order. */
static void list_members(km *m, const int32_t *labels) {
  memcpy(m->cursor, m->start, sizeof(int64_t) * (size_t)m->k);
  for (int64_t i = 0; i < m->n; i++)
    m->members[m->cursor[labels[i]]++] = (int32_t)i;
}

/* Members whose rows are prefetched ahead of the one added, across
 * centroids (two ahead within a centroid: a warm Wan-480p call 0.3%
 * slower). */
#define SUM_AHEAD 8

/* sums[c] = the sum of cluster c's members, in index order, for c in
 * [c_lo, c_end): one centroid's sum (1 KB at d = 128) stays in L1 while its
 * members' rows are read. A pass over the points in index order adds in
 * the same order, but read-modified-wrote a different centroid's sums,
 * among hundreds of KB of them, at every point. */
static void sum_members(const km *m, int64_t c_lo, int64_t c_end) {
  const int d = m->d;
  const int64_t end = m->start[c_end];
  for (int64_t c = c_lo; c < c_end; c++) {
    double *acc = m->sums + c * d;
    memset(acc, 0, sizeof(double) * (size_t)d);
    const int64_t j0 = m->start[c], j1 = m->start[c + 1];
    for (int64_t j = j0; j < j1; j++) {
      if (j + SUM_AHEAD < end)
        stsa_km_prefetch_row(m, m->members[j + SUM_AHEAD]);
      add_row(acc, stsa_km_row(m, m->members[j]), d, 1.0);
    }
  }
}

/* Moves every non-empty centroid to the mean of its members (sums in
 * double; empty ones stay), each one's shift in m->shift and the largest in
 * m->max_shift (NaN if any is, so that a NaN centroid prunes nothing).
 * Returns the largest shift, squared. Each thread owns a range of centroids,
 * and a centroid's sum is the same on any thread count. The first update of
 * a call sums every member (sum_members); later ones move only the points
 * whose label changed since (a pass over the points in index order:
 * subtracted from the old sum, added to the new), which after the first few
 * iterations is a few percent of the points. */
static double update(km *m, const int32_t *labels, float *centroids) {
  const int d = m->d;
  const int parts = stsa_km_threads_for(m, m->k / 16);
  const int moved_only = m->sums_ok;
  if (!moved_only)
    list_members(m, labels);
  double max_shift2 = 0.0;
#pragma omp parallel num_threads(parts) reduction(max : max_shift2)
  {
    const int part = omp_get_thread_num(), nparts = omp_get_num_threads();
    const int64_t c_lo = part_begin(m, part, nparts);
    const int64_t c_end = part + 1 == nparts ? m->k : part_begin(m, part + 1, nparts);
    if (!moved_only)
      sum_members(m, c_lo, c_end);
    for (int64_t i = 0; moved_only && i < m->n; i++) {
      const int64_t c = labels[i], was = m->summed[i];
      if (c == was)
        continue;
      if (was >= c_lo && was < c_end)
        add_row(m->sums + was * d, stsa_km_row(m, i), d, -1.0);
      if (c >= c_lo && c < c_end)
        add_row(m->sums + c * d, stsa_km_row(m, i), d, 1.0);
    }
    for (int64_t c = c_lo; c < c_end; c++) {
      const int64_t cnt = m->counts[c];
      m->shift[c] = 0.0;
      if (cnt == 0) { /* what the subtractions left is rounding: start again at 0 */
        memset(m->sums + c * d, 0, sizeof(double) * (size_t)d);
        continue;
      }
      const double *acc = m->sums + c * d;
      float *cen = centroids + c * d;
      double shift2 = 0.0;
      for (int j = 0; j < d; j++) {
        const float v = (float)(acc[j] / (double)cnt);
        const double delta = (double)v - (double)cen[j];
        shift2 += delta * delta;
        cen[j] = v;
      }
      m->shift[c] = sqrt(shift2);
      max_shift2 = shift2 > max_shift2 ? shift2 : max_shift2;
    }
  }
  memcpy(m->summed, labels, sizeof(int32_t) * (size_t)m->n);
  m->sums_ok = 1;
  double ms = 0.0;
  for (int64_t c = 0; c < m->k; c++)
    ms = m->shift[c] > ms || isnan(m->shift[c]) ? m->shift[c] : ms;
  m->max_shift = ms;
  return max_shift2;
}

/* ---- entry point ------------------------------------------------------------ */

/* The first row of x with NaN or Inf, or -1. */
static int64_t first_nonfinite_row(const stsa_kmeans_args *a, int threads) {
  int bad = 0;
#pragma omp parallel for num_threads(threads) if (a->n * a->d > (1 << 16))               \
    reduction(|                                                                          \
              : bad) schedule(static)
  for (int64_t i = 0; i < a->n; i++)
    bad |= stsa_km_row_nonfinite(a->x + i * a->ld, a->d);
  for (int64_t i = 0; bad && i < a->n; i++)
    if (stsa_km_row_nonfinite(a->x + i * a->ld, a->d))
      return i;
  return -1;
}

static stsa_status check_args(const stsa_kmeans_args *a, const float *centroids,
                              const int32_t *labels, stsa_errbuf *err) {
  STSA_RETURN_IF(!a || !a->x || !centroids || !labels, err, STSA_ERR_NULL_ARG,
                 "stsa_kmeans: %s is NULL",
                 !a           ? "args"
                 : !a->x      ? "x"
                 : !centroids ? "centroids"
                              : "labels");
  STSA_RETURN_IF(a->n < 1 || a->n > ((int64_t)1 << 31), err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: n = %lld, expected 1..2^31", (long long)a->n);
  STSA_RETURN_IF(a->d < 1 || a->d > STSA_MAX_HEAD_DIM, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: d = %d, expected 1..%d", a->d, STSA_MAX_HEAD_DIM);
  STSA_RETURN_IF(a->ld < a->d || a->ld > INT64_MAX / a->n, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: ld = %lld, expected d (%d) .. INT64_MAX / n",
                 (long long)a->ld, a->d);
  STSA_RETURN_IF(a->k < 1 || a->k > a->n, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: k = %lld, expected 1..n (%lld)", (long long)a->k,
                 (long long)a->n);
  STSA_RETURN_IF(a->iters < 0, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: iters = %d, expected >= 0", a->iters);
  STSA_RETURN_IF(!(a->tol >= 0.0) || !isfinite(a->tol), err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: tol = %s, expected finite and >= 0",
                 stsa_real_str(a->tol, 0).s);
  STSA_RETURN_IF(a->warm != 0 && a->warm != 1, err, STSA_ERR_BAD_PARAM,
                 "stsa_kmeans: warm = %d, expected 0 or 1", a->warm);
  for (int64_t i = 0; a->warm && a->hint && i < a->n; i++)
    STSA_RETURN_IF(a->hint[i] < 0 || a->hint[i] >= a->k, err, STSA_ERR_BAD_PARAM,
                   "stsa_kmeans: hint[%lld] = %d, expected 0..k-1 (%lld)", (long long)i,
                   (int)a->hint[i], (long long)a->k - 1);
  return STSA_OK;
}

static stsa_status nonfinite_point(stsa_errbuf *err, int64_t i) {
  return stsa_fail(err, STSA_ERR_NONFINITE, "stsa_kmeans: point %lld of x is not finite",
                   (long long)i);
}

stsa_status stsa_kmeans(stsa_ctx *ctx, const stsa_kmeans_args *a, float *centroids,
                        int32_t *labels, int64_t *sizes, int *iters_done) {
  return stsa_kmeans_probed(ctx, a, NULL, centroids, labels, sizes, iters_done);
}

stsa_status stsa_kmeans_probed(stsa_ctx *ctx, const stsa_kmeans_args *a,
                               const stsa_kmeans_probe *probe, float *centroids,
                               int32_t *labels, int64_t *sizes, int *iters_done) {
  const stsa_kmeans_probe none = {0, NULL};
  if (!probe)
    probe = &none;
  if (!ctx)
    return STSA_ERR_NULL_ARG;
  stsa_errbuf *err = a && a->err ? a->err : &ctx->err;
  const int threads = a && a->threads > 0 ? a->threads
                      : ctx->threads > 0  ? ctx->threads
                                          : 1;
  stsa_err_clear(err);
  STSA_TRY(check_args(a, centroids, labels, err));
  /* x's NaN/Inf check: before the seeding reads it (cold), else in the
   * first assignment's pass where it has one over every point (below) */
  const int check = ctx->check_finite && !a->finite_checked;
  if (check && !a->warm) {
    const int64_t bad = first_nonfinite_row(a, threads);
    if (bad >= 0)
      return nonfinite_point(err, bad);
  }
  km m;
  memset(&m, 0, sizeof m);
  m.x = a->x;
  m.n = a->n;
  m.ld = a->ld;
  m.k = a->k;
  m.d = a->d;
  m.kern = &ctx->run->kern;
  m.mr = m.kern->mr;
  m.nr = m.kern->nr;
  /* no region has more pieces than gemm_pass's chunks: more threads would
   * only add scratch */
  const int64_t chunks = (m.n + (int64_t)STSA_KM_CHUNK_BLOCKS * m.mr - 1) /
                         ((int64_t)STSA_KM_CHUNK_BLOCKS * m.mr);
  m.threads = threads < chunks ? threads : (int)chunks;
  m.err = err;
  m.hint = a->warm ? a->hint : NULL;
  void *block;
  choose_groups(&m);
  STSA_RETURN_IF(km_alloc(&m, a->scratch, &block) != 0, err, STSA_ERR_OUT_OF_MEMORY,
                 "stsa_kmeans: no memory for the scratch of n = %lld, k = %lld, d = %d",
                 (long long)m.n, (long long)m.k, m.d);
  if (!a->warm)
    stsa_km_seed(&m, a->seed, centroids);
  stsa_km_group(ctx, &m, centroids, a->seed ^ 0x67726f7570ull); /* "group" */
  m.bad_row = -1;
  if (check && a->warm) {
    m.check_rows = !probe->no_prune && stsa_km_first_checks_rows(&m);
    const int64_t bad = m.check_rows ? -1 : first_nonfinite_row(a, threads);
    if (bad >= 0) {
      free(block);
      return nonfinite_point(err, bad);
    }
  }
  const double tol2 = a->tol * a->tol;
  int done = 0;
  for (;;) {
    const int64_t computed = probe->no_prune ? stsa_km_assign_full(&m, centroids, labels)
                             : done == 0     ? stsa_km_assign_first(&m, centroids, labels)
                                         : stsa_km_assign_pruned(&m, centroids, labels);
    if (m.bad_row >= 0) { /* the first assignment's check: nothing written */
      free(block);
      return nonfinite_point(err, m.bad_row);
    }
    if (probe->recomputed)
      probe->recomputed[done] = computed;
    count_labels(&m, labels);
    if (done == a->iters)
      break;
    const double shift2 = update(&m, labels, centroids);
    done++;
    if (done == a->iters || shift2 <= tol2)
      break;
  }
  if (sizes)
    memcpy(sizes, m.counts, sizeof(int64_t) * (size_t)m.k);
  if (iters_done)
    *iters_done = done;
  free(block);
  return STSA_OK;
}
