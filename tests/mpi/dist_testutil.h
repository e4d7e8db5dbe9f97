/*
 * dist_testutil.h — what the distributed tests (tests/mpi/test_*.c) share.
 *
 * A header of static functions because CMake links each MPI test program
 * from its own file only (plus tests/testutil.c and the libraries). Include
 * it first: it asks for POSIX (alarm) before any system header.
 *
 * Method of every test: each rank builds the WHOLE problem deterministically,
 * computes the single-process result with the ordinary API, copies out its
 * own shard of the sequence, calls the distributed function on the shard and
 * compares its shard of the output with the single-process one: bitwise
 * under Ulysses, within 1e-6 of the call's largest |out| under ring and
 * hybrid layouts (see dt_close for low-precision outputs).
 *
 * Failures print "rank R/P: FAIL file:line: [case] message" and the test
 * carries on; dt_finish sums the failures over every rank (so every rank
 * exits alike) and rank 0 prints one summary line.
 */
#ifndef STSA_DIST_TESTUTIL_H
#define STSA_DIST_TESTUTIL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#ifndef STSA_EXPERIMENTAL /* dt_shard and the workload use the experimental API */
#error "define STSA_EXPERIMENTAL before including dist_testutil.h (and stsa.h)"
#endif
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stsa_mpi.h"
#include "testutil.h"

/* ---- program state --------------------------------------------------------- */
/* One test program is one translation unit: this is its state, not the
 * library's. */
static int dt_rank, dt_size;
static long dt_checks, dt_failed;
static stsa_ctx *dt_ctx;
static char dt_case[160]; /* the case being run, named in failures */
static double dt_worst;   /* the largest |diff| / max|out| of f32 tolerance checks */

static inline void dt_check(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void dt_check(int ok, const char *file, int line, const char *fmt, ...) {
  dt_checks++;
  if (ok)
    return;
  dt_failed++;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "rank %d/%d: FAIL %s:%d: [%s] %s\n", dt_rank, dt_size, file, line,
          dt_case, msg);
  fflush(stderr);
}
#define DT_CHECK(cond, ...) dt_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define DT_CHECK_STATUS(st, expected, dist)                                              \
  DT_CHECK((st) == (expected), "returned %s, expected %s (%s)", stsa_status_str(st),     \
           stsa_status_str(expected), (dist) ? stsa_dist_last_error(dist) : "")

static inline void dt_set_case(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static inline void dt_set_case(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dt_case, sizeof dt_case, fmt, ap);
  va_end(ap);
  if (getenv("DT_TRACE")) { /* to find where a hang is */
    fprintf(stderr, "rank %d: %s\n", dt_rank, dt_case);
    fflush(stderr);
  }
}

/* The watchdog: a hang fails the test and names the case it hung in (only
 * async-signal-safe calls here). */
static char dt_alarm_prefix[64];
static inline void dt_on_alarm(int sig) {
  (void)sig;
  static char line[sizeof dt_alarm_prefix + sizeof dt_case + 2];
  size_t n = strlen(dt_alarm_prefix), c = strnlen(dt_case, sizeof dt_case);
  memcpy(line, dt_alarm_prefix, n);
  memcpy(line + n, dt_case, c);
  memcpy(line + n + c, "]\n", 2);
  ssize_t ignored = write(2, line, n + c + 2); /* one write: ranks do not interleave */
  (void)ignored;
  _exit(124);
}

/* Re-arms the watchdog: the program dies unless it gets here again (or to
 * the end) within `seconds`. */
static inline void dt_watchdog(unsigned seconds) { alarm(seconds); }

/* MPI (FUNNELED: the library calls MPI from this thread only), a watchdog
 * so a hang fails the test instead of the CI, and the one context of the
 * program: one thread (ranks are oversubscribed) and small tiles, so that
 * even a few hundred tokens span several tiles and kv chunks cut them. */
static inline void dt_init(int *argc, char ***argv) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = dt_on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  dt_watchdog(240);
  int provided = 0;
  /* SERIALIZED: the ring's poller thread runs (stsa_mpi.h); the
   * accuracy bench (bench/dist_accuracy.c) runs it under FUNNELED */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "MPI_Init_thread failed\n");
    exit(1);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &dt_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &dt_size);
  snprintf(dt_alarm_prefix, sizeof dt_alarm_prefix,
           "rank %d/%d: FAIL: TIMEOUT (hang) in [", dt_rank, dt_size);
  DT_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI provides thread level %d", provided);
  char msg[256];
  if (stsa_ctx_create_msg(&dt_ctx, msg, sizeof msg) != STSA_OK) {
    fprintf(stderr, "rank %d: stsa_ctx_create: %s\n", dt_rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  DT_CHECK(stsa_ctx_set(dt_ctx, STSA_PARAM_THREADS, 1) == STSA_OK, "threads");
  DT_CHECK(stsa_ctx_set(dt_ctx, STSA_PARAM_Q_TILE, 24) == STSA_OK, "q tile");
  DT_CHECK(stsa_ctx_set(dt_ctx, STSA_PARAM_KV_TILE, 32) == STSA_OK, "kv tile");
}

/* Every rank returns the same exit status: failures summed over ranks. */
static inline int dt_finish(const char *name) {
  long mine[2] = {dt_checks, dt_failed}, all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  double worst = 0;
  MPI_Allreduce(&dt_worst, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (dt_rank == 0 && worst > 0)
    printf("%s: %d ranks, %ld checks, %ld failed; ring f32 |diff| / max|out| <= %.2g\n",
           name, dt_size, all[0], all[1], worst);
  else if (dt_rank == 0)
    printf("%s: %d ranks, %ld checks, %ld failed\n", name, dt_size, all[0], all[1]);
  fflush(stdout);
  stsa_ctx_free(dt_ctx);
  MPI_Finalize();
  return all[1] ? 1 : 0;
}

/* 1 on every rank if cond held on every rank. */
static inline int dt_all(int cond) {
  int mine = !!cond, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* ---- the dist handle --------------------------------------------------------- */
static inline stsa_dist *dt_dist(stsa_dist_scheme scheme, int ulysses_degree,
                                 unsigned flags) {
  stsa_dist_config cfg = STSA_INIT(stsa_dist_config);
  cfg.scheme = scheme;
  cfg.ulysses_degree = ulysses_degree;
  cfg.flags = flags;
  stsa_dist *dist = NULL;
  stsa_status st = stsa_dist_create(dt_ctx, MPI_COMM_WORLD, &cfg, &dist);
  DT_CHECK(st == STSA_OK && dist, "stsa_dist_create(%s, U = %d, flags %u): %s",
           stsa_dist_scheme_name(scheme), ulysses_degree, flags, stsa_status_str(st));
  if (dist) {
    DT_CHECK(stsa_dist_rank(dist) == dt_rank && stsa_dist_size(dist) == dt_size,
             "dist rank %d size %d", stsa_dist_rank(dist), stsa_dist_size(dist));
  }
  return dist;
}

/* ---- shards ---------------------------------------------------------------- */
typedef enum dt_split {
  DT_SPLIT_EVEN = 0, /* sizes differ by at most one (S need not divide by P) */
  DT_SPLIT_RAMP = 1, /* rank r holds about (r + 1) parts: deliberately unequal */
  DT_SPLIT_ONE = 2,  /* rank P / 2 holds a single token, the others the rest */
} dt_split;

static inline const char *dt_split_name(dt_split s) {
  return s == DT_SPLIT_EVEN ? "even" : s == DT_SPLIT_RAMP ? "ramp" : "one";
}

/* off[0 .. P]: the token range of each rank; every rank holds >= 1 token
 * (S >= P). */
static inline void dt_offsets(int64_t S, int P, dt_split split, int64_t *off) {
  int64_t len[64];
  if (P > 64 || S < P) {
    fprintf(stderr, "dt_offsets: %lld tokens on %d ranks\n", (long long)S, P);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int64_t spare = S - P, W = (int64_t)P * (P + 1) / 2;
  int64_t used = 0;
  for (int r = 0; r < P; r++) {
    if (split == DT_SPLIT_RAMP)
      len[r] = 1 + spare * (r + 1) / W;
    else if (split == DT_SPLIT_ONE && P > 1)
      len[r] = r == P / 2 ? 1 : 1 + spare / (P - 1);
    else
      len[r] = (S * (r + 1)) / P - (S * r) / P;
    used += len[r];
  }
  len[P - 1] += S - used; /* rounding remainders to the last rank */
  off[0] = 0;
  for (int r = 0; r < P; r++)
    off[r + 1] = off[r] + len[r];
}

/* Rows [off, off + len) of t, as a view. */
static inline stsa_tensor dt_rows(const stsa_tensor *t, int64_t off, int64_t len) {
  stsa_tensor v = *t;
  v.data = (char *)t->data + (size_t)(off * t->stride[1]) * stsa_dtype_size(t->dtype);
  v.shape[1] = len;
  return v;
}

/* A guarded copy of rows [off, off + len) of full in `layout` (same dtype:
 * the shard holds exactly the bits the single-process call read). */
static inline stsa_tensor dt_shard(const stsa_tensor *full, int64_t off, int64_t len,
                                   tu_layout layout) {
  stsa_tensor s = tu_sentinel_tensor(full->dtype, layout, full->shape[0], len,
                                     full->shape[2], full->shape[3]);
  stsa_tensor src = dt_rows(full, off, len);
  if (stsa_tensor_copy(&src, &s) != STSA_OK) {
    fprintf(stderr, "rank %d: dt_shard: stsa_tensor_copy failed\n", dt_rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return s;
}

/* ---- the whole problem ---------------------------------------------------------- */
typedef struct dt_problem {
  stsa_geometry g; /* frames = 0: a plain sequence of random tokens */
  int64_t B, S, H, D;
  stsa_tensor q, k, v; /* whole sequence, [B, S, H, D] contiguous */
} dt_problem;

/* The video workload for a geometry, or seeded N(0, 1) tokens for a plain
 * sequence of S tokens (g->frames == 0). */
static inline void dt_problem_make(dt_problem *p, const stsa_geometry *g, int64_t S_plain,
                                   int64_t B, int64_t H, int64_t D, stsa_dtype q_dtype,
                                   stsa_dtype kv_dtype, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->g = *g;
  p->B = B, p->H = H, p->D = D;
  p->S = g->frames ? stsa_geometry_tokens(g) : S_plain;
  if (g->frames) {
    p->q = tu_sentinel_tensor(q_dtype, TU_BSHD, B, p->S, H, D);
    p->k = tu_sentinel_tensor(kv_dtype, TU_BSHD, B, p->S, H, D);
    p->v = tu_sentinel_tensor(kv_dtype, TU_BSHD, B, p->S, H, D);
    stsa_workload_desc wd = STSA_INIT(stsa_workload_desc);
    wd.geometry = *g;
    wd.batch = B, wd.heads = H, wd.head_dim = D, wd.seed = seed;
    stsa_status st = stsa_workload_generate(&wd, &p->q, &p->k, &p->v, NULL);
    DT_CHECK(st == STSA_OK, "stsa_workload_generate: %s", stsa_status_str(st));
  } else {
    tu_rng rng = {seed};
    p->q = tu_random_tensor(&rng, q_dtype, TU_BSHD, B, p->S, H, D, 1.0);
    p->k = tu_random_tensor(&rng, kv_dtype, TU_BSHD, B, p->S, H, D, 1.0);
    p->v = tu_random_tensor(&rng, kv_dtype, TU_BSHD, B, p->S, H, D, 1.0);
  }
}

static inline void dt_problem_free(dt_problem *p) {
  tu_free_tensor(&p->q);
  tu_free_tensor(&p->k);
  tu_free_tensor(&p->v);
}

/* This rank's shard of a problem, and an output shard full of the sentinel
 * (so a write outside the rows or a failed call that writes shows). */
typedef struct dt_local {
  int64_t off[65]; /* every rank's token range */
  int64_t lo, len; /* this rank's */
  stsa_tensor q, k, v, out;
} dt_local;

static inline void dt_local_make(dt_local *l, const dt_problem *p, dt_split split,
                                 tu_layout layout, stsa_dtype out_dtype) {
  dt_offsets(p->S, dt_size, split, l->off);
  l->lo = l->off[dt_rank];
  l->len = l->off[dt_rank + 1] - l->lo;
  l->q = dt_shard(&p->q, l->lo, l->len, layout);
  l->k = dt_shard(&p->k, l->lo, l->len, layout);
  l->v = dt_shard(&p->v, l->lo, l->len, layout);
  l->out = tu_sentinel_tensor(out_dtype, layout, p->B, l->len, p->H, p->D);
}

static inline void dt_local_free(dt_local *l) {
  tu_free_tensor(&l->q);
  tu_free_tensor(&l->k);
  tu_free_tensor(&l->v);
  tu_free_tensor(&l->out);
}

/* ---- comparisons ----------------------------------------------------------- */
/* Max |x| over a tensor. */
static inline double dt_max_abs(const stsa_tensor *t) {
  double m = 0;
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t s = 0; s < t->shape[1]; s++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t d = 0; d < t->shape[3]; d++) {
          double x = fabs(tu_load(t->data, t->dtype, tu_offset(t, b, s, h, d)));
          m = x > m ? x : m;
        }
  return m;
}

/* Elements of got (this rank's shard, any layout) whose bytes differ from
 * rows [lo, lo + len) of ref (same dtype); the first such (b, s, h, d) in
 * first[], s counted in the whole sequence. */
static inline int64_t dt_bit_diffs(const stsa_tensor *ref, int64_t lo,
                                   const stsa_tensor *got, int64_t first[4]) {
  const size_t es = stsa_dtype_size(got->dtype);
  if (ref->dtype != got->dtype)
    return -1;
  int64_t n = 0;
  for (int64_t b = 0; b < got->shape[0]; b++)
    for (int64_t s = 0; s < got->shape[1]; s++)
      for (int64_t h = 0; h < got->shape[2]; h++)
        for (int64_t d = 0; d < got->shape[3]; d++) {
          const char *x = (const char *)got->data + tu_offset(got, b, s, h, d) * es;
          const char *y = (const char *)ref->data + tu_offset(ref, b, lo + s, h, d) * es;
          if (memcmp(x, y, es) != 0 && n++ == 0) {
            first[0] = b, first[1] = lo + s, first[2] = h, first[3] = d;
          }
        }
  return n;
}

/* One unit in the last place of a dtype at |x| (0 for f32: its rounding is
 * inside the 1e-6 already). */
static inline double dt_ulp(stsa_dtype dt, double x) {
  if (dt == STSA_F32 || x == 0)
    return 0;
  int e;
  frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
  return ldexp(1.0, e - 1 - (dt == STSA_BF16 ? 7 : 10));
}

/* Ring and hybrid results: |got - ref| <= 1e-6 * scale for every element of
 * this rank's shard (scale: the largest |out| of the whole call). An output
 * of f16/bf16 may also be one unit in its last place away, because two f32
 * values 1e-7 apart can round to neighbours. Returns the elements out of
 * bounds; *worst is the largest |got - ref| / scale. */
static inline int64_t dt_close(const stsa_tensor *ref, int64_t lo, const stsa_tensor *got,
                               double scale, double *worst, int64_t first[4]) {
  int64_t n = 0;
  *worst = 0;
  for (int64_t b = 0; b < got->shape[0]; b++)
    for (int64_t s = 0; s < got->shape[1]; s++)
      for (int64_t h = 0; h < got->shape[2]; h++)
        for (int64_t d = 0; d < got->shape[3]; d++) {
          double x = tu_load(got->data, got->dtype, tu_offset(got, b, s, h, d));
          double y = tu_load(ref->data, ref->dtype, tu_offset(ref, b, lo + s, h, d));
          double diff = fabs(x - y), ax = fabs(x) > fabs(y) ? fabs(x) : fabs(y);
          if (!isfinite(x) || !isfinite(y))
            diff = INFINITY;
          double rel = scale > 0 ? diff / scale : diff;
          *worst = rel > *worst ? rel : *worst;
          if (!(diff <= 1e-6 * scale + dt_ulp(got->dtype, ax)) && n++ == 0) {
            first[0] = b, first[1] = lo + s, first[2] = h, first[3] = d;
          }
        }
  return n;
}

/* Compares this rank's output shard with the single-process output `ref`
 * (the whole sequence): exact = bitwise, else within dt_close. */
static inline void dt_compare(const stsa_tensor *ref, const dt_local *l, int exact) {
  int64_t at[4] = {-1, -1, -1, -1};
  DT_CHECK(tu_guard_ok(l->out.data), "guard bytes around the output shard overwritten");
  if (exact) {
    int64_t n = dt_bit_diffs(ref, l->lo, &l->out, at);
    DT_CHECK(
        n == 0,
        "%lld elements of the output shard differ bitwise from one process; first "
        "(b %lld, s %lld, h %lld, d %lld): got %.9g, expected %.9g",
        (long long)n, (long long)at[0], (long long)at[1], (long long)at[2],
        (long long)at[3],
        n > 0 ? tu_load(l->out.data, l->out.dtype,
                        tu_offset(&l->out, at[0], at[1] - l->lo, at[2], at[3]))
              : 0.0,
        n > 0 ? tu_load(ref->data, ref->dtype, tu_offset(ref, at[0], at[1], at[2], at[3]))
              : 0.0);
  } else {
    const double scale = dt_max_abs(ref);
    double worst = 0;
    int64_t n = dt_close(ref, l->lo, &l->out, scale, &worst, at);
    if (l->out.dtype == STSA_F32) /* bf16 outputs: their rounding dominates */
      dt_worst = worst > dt_worst ? worst : dt_worst;
    DT_CHECK(n == 0 && scale > 0,
             "%lld elements beyond 1e-6 * max|out| (max|out| = %.6g, worst |diff| / "
             "max|out| = %.3g); first (b %lld, s %lld, h %lld, d %lld)",
             (long long)n, scale, worst, (long long)at[0], (long long)at[1],
             (long long)at[2], (long long)at[3]);
  }
}

/* ---- reports --------------------------------------------------------------- */
/* What every report must say: the layout (U and R as expected), every head
 * computed exactly once in each Ulysses group, head_rank the same on every
 * rank and in range (in contiguous groups when asked), times sane. */
static inline void dt_check_report(const stsa_dist_report *r, const int32_t *head_rank,
                                   int64_t H, int U, int contiguous) {
  const int P = dt_size, R = P / U, u = dt_rank % U, g = dt_rank / U;
  DT_CHECK(r->ranks == P && r->ulysses_degree == U && r->ring_degree == R,
           "report: ranks %d, U %d, R %d; expected %d, %d, %d", r->ranks,
           r->ulysses_degree, r->ring_degree, P, U, R);
  int64_t all[64] = {0};
  int64_t mine = r->local_heads;
  MPI_Allgather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, MPI_COMM_WORLD);
  int64_t sum = 0;
  for (int m = 0; m < U && g * U + m < P; m++)
    sum += all[g * U + m];
  DT_CHECK(sum == H, "report: local_heads of Ulysses group %d add up to %lld, H = %lld",
           g, (long long)sum, (long long)H);
  int64_t mine_counted = 0, in_range = 1;
  for (int64_t h = 0; h < H; h++) {
    in_range &= head_rank[h] >= 0 && head_rank[h] < U;
    mine_counted += head_rank[h] == u;
  }
  DT_CHECK(in_range, "report: a head_rank entry outside [0, %d)", U);
  DT_CHECK(mine_counted == r->local_heads,
           "report: head_rank gives this rank (u = %d) %lld heads, local_heads %lld", u,
           (long long)mine_counted, (long long)r->local_heads);
  int32_t lo[64], hi[64];
  if (H <= 64) {
    MPI_Allreduce(head_rank, lo, (int)H, MPI_INT32_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(head_rank, hi, (int)H, MPI_INT32_T, MPI_MAX, MPI_COMM_WORLD);
    DT_CHECK(memcmp(lo, hi, sizeof lo[0] * (size_t)H) == 0,
             "report: ranks disagree on head_rank");
  }
  if (contiguous) {
    int64_t count[64] = {0}, ordered = 1;
    for (int64_t h = 0; h < H; h++) {
      count[head_rank[h]] += head_rank[h] >= 0 && head_rank[h] < U;
      ordered &= h == 0 || head_rank[h] >= head_rank[h - 1];
    }
    int64_t cmin = H, cmax = 0;
    for (int m = 0; m < U; m++) {
      cmin = count[m] < cmin ? count[m] : cmin;
      cmax = count[m] > cmax ? count[m] : cmax;
    }
    DT_CHECK(ordered && cmax - cmin <= 1,
             "report: CONTIGUOUS_HEADS gave head groups of %lld..%lld heads%s",
             (long long)cmin, (long long)cmax, ordered ? "" : ", not in head order");
  }
  DT_CHECK(r->imbalance >= 0 && isfinite(r->imbalance), "report: imbalance %g",
           r->imbalance);
  DT_CHECK(r->compute_ms >= 0 && r->comm_ms >= 0 && r->total_ms >= 0 &&
               r->compute_max_ms >= r->compute_ms && r->compute_mean_ms >= 0 &&
               r->compute_mean_ms <= r->compute_max_ms,
           "report: times total %g comm %g compute %g max %g mean %g", r->total_ms,
           r->comm_ms, r->compute_ms, r->compute_max_ms, r->compute_mean_ms);
  DT_CHECK(r->pairs_skipped >= 0 && (R > 1 || r->pairs_skipped == 0),
           "report: pairs_skipped %lld with R = %d", (long long)r->pairs_skipped, R);
}

/* The Ulysses degree a configuration gives for H heads on P ranks. */
static inline int dt_expected_u(stsa_dist_scheme scheme, int ulysses_degree, int64_t H) {
  if (scheme == STSA_DIST_ULYSSES)
    return dt_size;
  if (scheme == STSA_DIST_RING)
    return 1;
  if (ulysses_degree)
    return ulysses_degree;
  for (int u = dt_size; u > 1; u--)
    if (dt_size % u == 0 && u <= H)
      return u;
  return 1;
}

/* ---- masks ----------------------------------------------------------------- */
/* Per-head masks of a video geometry, mixed on purpose: spatial-like (frame
 * window), temporal-like (position band), spatial windows and full heads,
 * most with the first-frame sink, each OR'ed with the text rules when there
 * is text so no row is left empty. masks[h] are new references. */
static inline void dt_head_masks(const stsa_geometry *g, int64_t H, stsa_mask **masks) {
  stsa_mask *text = NULL, *sink = NULL;
  if (g->text > 0)
    stsa_mask_text(g, &text);
  stsa_mask_sink_frames(g, 1, &sink);
  for (int64_t h = 0; h < H; h++) {
    stsa_mask *base = NULL, *a = NULL;
    switch (h % 5) {
    case 0:
      stsa_mask_frame_window(g, 0, &base);
      break;
    case 1:
      stsa_mask_position_band(g, 2 * g->frames + 1, &base);
      break;
    case 2:
      stsa_mask_frame_window(g, 1, &base);
      break;
    case 3:
      stsa_mask_spatial_window(g, 1, 2, &base);
      break;
    default:
      stsa_mask_full(&base);
      break;
    }
    if (h % 5 != 2 && h % 5 != 4) {
      stsa_mask_or(base, sink, &a);
      stsa_mask_free(base);
      base = a;
    }
    if (text) {
      stsa_mask_or(base, text, &a);
      stsa_mask_free(base);
      base = a;
    }
    masks[h] = base;
    DT_CHECK(base != NULL, "building the mask of head %lld", (long long)h);
  }
  stsa_mask_free(text);
  stsa_mask_free(sink);
}

static inline void dt_masks_free(stsa_mask **masks, int64_t H) {
  for (int64_t h = 0; h < H; h++)
    stsa_mask_free(masks[h]);
}

/* The plan of the whole sequence. */
static inline stsa_plan_desc dt_plan_desc(const dt_problem *p,
                                          const stsa_mask *const *masks,
                                          stsa_order q_order, stsa_order kv_order) {
  stsa_plan_desc desc = STSA_INIT(stsa_plan_desc);
  desc.s_q = desc.s_kv = p->S;
  desc.heads = p->H;
  desc.masks = masks;
  desc.geometry = &p->g;
  desc.q_order = q_order;
  desc.kv_order = kv_order;
  return desc;
}

/* ---- one call, end to end -------------------------------------------------------- */
/* A case of the dense / sparse matrices. */
typedef struct dt_call {
  const char *name;
  stsa_geometry g; /* frames = 0: plain sequence of S tokens */
  int64_t S, B, H, D;
  stsa_dtype q_dtype, kv_dtype, out_dtype;
  tu_layout layout;
  dt_split split;
  float scale;
} dt_call;

static inline void dt_call_name(const dt_call *c, const char *what,
                                stsa_dist_scheme scheme, int U) {
  dt_set_case("%s %s %s U=%d np%d: B %lld H %lld D %lld, q %s kv %s out %s, %s, %s split",
              what, c->name, stsa_dist_scheme_name(scheme), U, dt_size, (long long)c->B,
              (long long)c->H, (long long)c->D, stsa_dtype_name(c->q_dtype),
              stsa_dtype_name(c->kv_dtype), stsa_dtype_name(c->out_dtype),
              tu_layout_name(c->layout), dt_split_name(c->split));
}

/* The geometries of the matrices: 3 frames of 5 x 7 (105 video tokens, a
 * multiple of no tile size), with no text, a text prefix (113 tokens) or a
 * text suffix with padding (text_real < text; 115 tokens): the texts make
 * the lengths prime to 2, 3 and 4, so no rank count divides them. */
enum { DT_GEOM_PLAIN = 0, DT_GEOM_NONE, DT_GEOM_PREFIX, DT_GEOM_SUFFIX };
static inline stsa_geometry dt_geometry(int which) {
  stsa_geometry g = {3, 5, 7, 0, 0, STSA_TEXT_NONE};
  if (which == DT_GEOM_PLAIN)
    g.frames = g.height = g.width = 0;
  else if (which == DT_GEOM_PREFIX)
    g.text = g.text_real = 8, g.text_pos = STSA_TEXT_PREFIX;
  else if (which == DT_GEOM_SUFFIX)
    g.text = 10, g.text_real = 6, g.text_pos = STSA_TEXT_SUFFIX;
  return g;
}

/* The dense matrix every scheme runs: H = 5 and 12 (and 2, fewer heads than
 * ranks), tokens not divisible by P, batch 2, f32 and bf16 inputs, f32 and
 * bf16 outputs, [B,S,H,D] and [B,H,S,D] shards, even and unequal splits. */
static inline int dt_dense_calls(dt_call *out) {
  const dt_call calls[] = {
      {"plain", dt_geometry(DT_GEOM_PLAIN), 101, 1, 5, 16, STSA_F32, STSA_F32, STSA_F32,
       TU_BSHD, DT_SPLIT_EVEN, 0.0f},
      {"no-text", dt_geometry(DT_GEOM_NONE), 0, 1, 12, 32, STSA_BF16, STSA_BF16, STSA_F32,
       TU_BHSD, DT_SPLIT_RAMP, 0.0f},
      {"prefix", dt_geometry(DT_GEOM_PREFIX), 0, 2, 5, 32, STSA_F32, STSA_BF16, STSA_BF16,
       TU_BSHD, DT_SPLIT_ONE, 0.2f},
      {"suffix", dt_geometry(DT_GEOM_SUFFIX), 0, 2, 12, 24, STSA_BF16, STSA_BF16,
       STSA_BF16, TU_BHSD, DT_SPLIT_RAMP, 0.0f},
      {"two-heads", dt_geometry(DT_GEOM_SUFFIX), 0, 1, 2, 16, STSA_F32, STSA_F32,
       STSA_F32, TU_BSHD, DT_SPLIT_EVEN, 0.0f},
  };
  const int n = (int)(sizeof calls / sizeof calls[0]);
  for (int i = 0; i < n; i++)
    out[i] = calls[i];
  return n;
}

/* Dense attention of a case on `dist`, compared with one process. */
static inline void dt_run_dense(stsa_dist *dist, stsa_dist_scheme scheme,
                                int ulysses_degree, unsigned flags, const dt_call *c,
                                uint64_t seed) {
  const int U = dt_expected_u(scheme, ulysses_degree, c->H);
  dt_call_name(c, "dense", scheme, U);
  dt_problem p;
  dt_problem_make(&p, &c->g, c->S, c->B, c->H, c->D, c->q_dtype, c->kv_dtype, seed);
  stsa_tensor ref = tu_sentinel_tensor(c->out_dtype, TU_BSHD, p.B, p.S, p.H, p.D);
  stsa_attn_opts opts = STSA_INIT(stsa_attn_opts);
  opts.scale = c->scale;
  stsa_status st = stsa_attention(dt_ctx, &p.q, &p.k, &p.v, &ref, &opts);
  DT_CHECK(st == STSA_OK, "single-process stsa_attention: %s",
           stsa_ctx_last_error(dt_ctx));
  dt_local l;
  dt_local_make(&l, &p, c->split, c->layout, c->out_dtype);
  int32_t head_rank[64];
  stsa_dist_report rep = STSA_INIT(stsa_dist_report);
  rep.head_rank = head_rank;
  st = stsa_dist_attention(dist, &l.q, &l.k, &l.v, &l.out, &opts, &rep);
  DT_CHECK_STATUS(st, STSA_OK, dist);
  if (st == STSA_OK) {
    DT_CHECK(stsa_dist_last_error(dist)[0] == '\0', "last error \"%s\" after success",
             stsa_dist_last_error(dist));
    dt_compare(&ref, &l, U == dt_size); /* R = 1: no ring, whole heads */
    dt_check_report(&rep, head_rank, c->H, U, (flags & STSA_DIST_CONTIGUOUS_HEADS) != 0);
    if (scheme == STSA_DIST_RING)
      DT_CHECK(rep.local_heads == c->H, "ring: local_heads %lld",
               (long long)rep.local_heads);
  }
  dt_local_free(&l);
  tu_free_tensor(&ref);
  dt_problem_free(&p);
}

/* Block-sparse attention with the mixed per-head masks of dt_head_masks in
 * the given orders, compared with one process. */
static inline void dt_run_sparse(stsa_dist *dist, stsa_dist_scheme scheme,
                                 int ulysses_degree, unsigned flags, const dt_call *c,
                                 stsa_order q_order, stsa_order kv_order,
                                 stsa_sparse_mode mode, uint64_t seed) {
  const int U = dt_expected_u(scheme, ulysses_degree, c->H);
  dt_call_name(c, "sparse", scheme, U);
  size_t n = strlen(dt_case);
  snprintf(dt_case + n, sizeof dt_case - n, ", orders %d/%d, %s", (int)q_order,
           (int)kv_order, stsa_sparse_mode_name(mode));
  dt_problem p;
  dt_problem_make(&p, &c->g, c->S, c->B, c->H, c->D, c->q_dtype, c->kv_dtype, seed);
  stsa_mask *masks[64];
  dt_head_masks(&p.g, p.H, masks);
  stsa_plan_desc desc =
      dt_plan_desc(&p, (const stsa_mask *const *)masks, q_order, kv_order);
  stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
  opts.scale = c->scale;
  opts.mode = mode;
  stsa_plan *plan = NULL;
  stsa_status st = stsa_plan_build(dt_ctx, &desc, &plan);
  DT_CHECK(st == STSA_OK, "single-process stsa_plan_build: %s",
           stsa_ctx_last_error(dt_ctx));
  stsa_tensor ref = tu_sentinel_tensor(c->out_dtype, TU_BSHD, p.B, p.S, p.H, p.D);
  if (plan) {
    st = stsa_sparse_attention(dt_ctx, plan, &p.q, &p.k, &p.v, &ref, &opts);
    DT_CHECK(st == STSA_OK, "single-process stsa_sparse_attention: %s",
             stsa_ctx_last_error(dt_ctx));
  }
  stsa_plan_free(plan);
  dt_local l;
  dt_local_make(&l, &p, c->split, c->layout, c->out_dtype);
  int32_t head_rank[64];
  stsa_dist_report rep = STSA_INIT(stsa_dist_report);
  rep.head_rank = head_rank;
  st = stsa_dist_sparse_attention(dist, &desc, &l.q, &l.k, &l.v, &l.out, &opts, &rep);
  DT_CHECK_STATUS(st, STSA_OK, dist);
  if (st == STSA_OK) {
    dt_compare(&ref, &l, U == dt_size); /* R = 1: no ring, whole heads */
    dt_check_report(&rep, head_rank, c->H, U, (flags & STSA_DIST_CONTIGUOUS_HEADS) != 0);
  }
  dt_local_free(&l);
  tu_free_tensor(&ref);
  dt_masks_free(masks, p.H);
  dt_problem_free(&p);
}

#endif
