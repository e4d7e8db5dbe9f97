/*
 * test_nonfinite.c — NaN and Inf inputs with STSA_PARAM_CHECK_FINITE = 0.
 *
 * The contract (stsa.h, "Non-finite inputs") is PyTorch SDPA's math: row i
 * is a softmax over the logits of the keys its mask keeps, then times V. This
 * test computes that literally in double (oracle_attention) and holds every
 * backend this machine runs (ref and every tiled one: tu_tiled_backends) to it, for dense
 * and block-sparse attention, f32/f16/bf16 K/V, head dims 64/80/128 and lengths that are
 * not tile multiples:
 *   - NaN exactly where the oracle has NaN (out and lse), nowhere else;
 *   - the finite values close to the oracle;
 *   - every element the poison does not reach (the oracle gives the same
 *     value with and without it) bitwise equal to the backend's own run
 *     without the poison: keys the mask drops never reach a row.
 * Plus logits near the documented finite range (all backends finite and in
 * agreement) and beyond it (a tiled row that overflows is NaN, never 0).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_oracle.h"
#include "testutil.h"

enum { B = 1, H = 2, MAX_BACKENDS = 1 + TU_MAX_BACKENDS };

static stsa_ctx *make_ctx(stsa_backend backend, int q_tile, int kv_tile) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK) {
    fprintf(stderr, "cannot create context\n");
    exit(1);
  }
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backend);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 0);
  if (q_tile)
    stsa_ctx_set(ctx, STSA_PARAM_Q_TILE, q_tile);
  if (kv_tile)
    stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, kv_tile);
  return ctx;
}

/* Every backend: the reference and every tiled one this machine runs. */
static int all_backends(stsa_backend out[MAX_BACKENDS]) {
  out[0] = STSA_BACKEND_REF;
  return 1 + tu_tiled_backends(out + 1);
}

/* The oracle (attention_oracle.h) with one keep matrix for every head
 * (NULL: dense). */
static void oracle_attention(const stsa_tensor *q, const stsa_tensor *k,
                             const stsa_tensor *v, const uint8_t *keep, double scale,
                             double *out, double *lse) {
  const uint8_t *keeps[H] = {keep, keep};
  tu_oracle_attention(q, k, v, keep ? keeps : NULL, scale, out, lse);
}

/* ---- one run of a backend ------------------------------------------------ */
typedef struct run_result {
  float *out; /* [H][S_q][D], f32 */
  float *lse; /* [H][S_q] */
  stsa_status st;
} run_result;

typedef struct problem {
  const char *name;
  int64_t Sq, Skv, D;
  stsa_dtype q_dtype, kv_dtype, out_dtype;
  int q_tile, kv_tile;
  const stsa_plan *plan; /* NULL: dense */
  stsa_sparse_mode mode;
  const uint8_t *keep; /* the plan's mask as a matrix, for the oracle */
} problem;

static run_result run_backend(const problem *pb, stsa_backend backend,
                              const stsa_tensor *q, const stsa_tensor *k,
                              const stsa_tensor *v) {
  run_result r = {0};
  stsa_tensor out = tu_sentinel_tensor(pb->out_dtype, TU_BHSD, B, pb->Sq, H, pb->D);
  size_t nlse = (size_t)(H * pb->Sq);
  float *lse = tu_guarded_alloc(nlse * sizeof(float));
  stsa_ctx *ctx = make_ctx(backend, pb->q_tile, pb->kv_tile);
  if (pb->plan) {
    stsa_sparse_opts so = {sizeof(stsa_sparse_opts), 0.0f, lse, pb->mode, NULL, 0};
    r.st = stsa_sparse_attention(ctx, pb->plan, q, k, v, &out, &so);
  } else {
    stsa_attn_opts ao = {sizeof(stsa_attn_opts), 0.0f, lse};
    r.st = stsa_attention(ctx, q, k, v, &out, &ao);
  }
  CHECK(tu_guard_ok(out.data) && tu_guard_ok(lse), "%s [%s]: guard bytes overwritten",
        pb->name, stsa_backend_name(backend));
  stsa_ctx_free(ctx);
  size_t n = (size_t)(H * pb->Sq * pb->D);
  r.out = malloc(sizeof(float) * n);
  for (int64_t h = 0; h < H; h++)
    for (int64_t i = 0; i < pb->Sq; i++)
      for (int64_t d = 0; d < pb->D; d++)
        r.out[(h * pb->Sq + i) * pb->D + d] =
            (float)tu_load(out.data, out.dtype, tu_offset(&out, 0, i, h, d));
  r.lse = malloc(sizeof(float) * nlse);
  memcpy(r.lse, lse, sizeof(float) * nlse);
  tu_guarded_free(lse);
  tu_free_tensor(&out);
  return r;
}

static void free_result(run_result *r) {
  free(r->out);
  free(r->lse);
}

/* Same value, NaN equal to NaN. */
static int same_value(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Compares one backend's poisoned run with the oracle and with its own
 * clean run; one CHECK per property, naming the first bad element. */
static void compare(const problem *pb, stsa_backend backend, const run_result *clean,
                    const run_result *dirty, const double *o_clean, const double *o_dirty,
                    const double *l_clean, const double *l_dirty) {
  const char *bn = stsa_backend_name(backend);
  const int64_t n = H * pb->Sq * pb->D, rows = H * pb->Sq;
  /* the kernel's f32 error, plus rounding of the output to its dtype */
  double ulp = pb->out_dtype == STSA_F16    ? 0x1p-10
               : pb->out_dtype == STSA_BF16 ? 0x1p-7
                                            : 0;
  double oscale = 0;
  for (int64_t e = 0; e < n; e++)
    if (isfinite(o_dirty[e]) && fabs(o_dirty[e]) > oscale)
      oscale = fabs(o_dirty[e]);
  double tol = (2e-5 + ulp) * (oscale > 1 ? oscale : 1);
  int64_t bad_nan = -1, bad_val = -1, bad_same = -1;
  double worst = 0;
  for (int64_t e = 0; e < n; e++) {
    double got = dirty->out[e], want = o_dirty[e];
    if (isnan(got) != isnan(want) || isinf(got) != isinf(want)) {
      if (bad_nan < 0)
        bad_nan = e;
      continue;
    }
    if (isfinite(want) && fabs(got - want) > tol) {
      if (bad_val < 0)
        bad_val = e;
      worst = fabs(got - want) > worst ? fabs(got - want) : worst;
    }
    if (same_value(o_clean[e], o_dirty[e]) && !same_value(clean->out[e], got) &&
        bad_same < 0)
      bad_same = e;
  }
#define WHERE(e)                                                                         \
  (long long)((e) / pb->D / pb->Sq), (long long)((e) / pb->D % pb->Sq),                  \
      (long long)((e) % pb->D)
  CHECK(bad_nan < 0, "%s [%s]: out[h=%lld][i=%lld][d=%lld] = %g, the oracle says %g",
        pb->name, bn, WHERE(bad_nan < 0 ? 0 : bad_nan),
        bad_nan < 0 ? 0.0 : (double)dirty->out[bad_nan],
        bad_nan < 0 ? 0.0 : o_dirty[bad_nan]);
  CHECK(bad_val < 0, "%s [%s]: out[h=%lld][i=%lld][d=%lld] off the oracle by %.3g > %.3g",
        pb->name, bn, WHERE(bad_val < 0 ? 0 : bad_val), worst, tol);
  CHECK(bad_same < 0,
        "%s [%s]: out[h=%lld][i=%lld][d=%lld] = %g changed (%g without the poison) "
        "though the poison does not reach it",
        pb->name, bn, WHERE(bad_same < 0 ? 0 : bad_same),
        bad_same < 0 ? 0.0 : (double)dirty->out[bad_same],
        bad_same < 0 ? 0.0 : (double)clean->out[bad_same]);
#undef WHERE
  int64_t bad_lse = -1, same_lse = -1;
  for (int64_t r = 0; r < rows; r++) {
    double got = dirty->lse[r], want = l_dirty[r];
    int ok = isnan(want)   ? isnan(got)
             : isinf(want) ? got == want
                           : isfinite(got) && fabs(got - want) <= 2e-5 * (1 + fabs(want));
    if (!ok && bad_lse < 0)
      bad_lse = r;
    if (same_value(l_clean[r], l_dirty[r]) && !same_value(clean->lse[r], got) &&
        same_lse < 0)
      same_lse = r;
  }
  CHECK(bad_lse < 0, "%s [%s]: lse[h=%lld][i=%lld] = %g, the oracle says %g", pb->name,
        bn, (long long)((bad_lse < 0 ? 0 : bad_lse) / pb->Sq),
        (long long)((bad_lse < 0 ? 0 : bad_lse) % pb->Sq),
        bad_lse < 0 ? 0.0 : (double)dirty->lse[bad_lse],
        bad_lse < 0 ? 0.0 : l_dirty[bad_lse]);
  CHECK(same_lse < 0,
        "%s [%s]: lse[h=%lld][i=%lld] changed though the poison does not "
        "reach it",
        pb->name, bn, (long long)((same_lse < 0 ? 0 : same_lse) / pb->Sq),
        (long long)((same_lse < 0 ? 0 : same_lse) % pb->Sq));
}

/* ---- poisons ------------------------------------------------------------- */
typedef enum poison {
  NAN_Q,
  INF_Q,
  NAN_K,
  NAN_V,
  POS_INF_K,
  NEG_INF_K,
  POISON_COUNT
} poison;

static const char *poison_name(poison p) {
  static const char *names[] = {"NaN in q", "Inf in q",  "NaN in k",
                                "NaN in v", "+Inf in k", "-Inf in k"};
  return names[p];
}

/* Rows and key of the poison (head 0): row A is ordinary, row R keeps only
 * key J in the sparse cases and row E keeps nothing. */
typedef struct spots {
  int64_t A, R, E, J;
} spots;

static void set(stsa_tensor *t, int64_t s, int64_t d, double x) {
  tu_store(t->data, t->dtype, tu_offset(t, 0, s, 0, d), x);
}

static void apply_poison(poison p, const spots *at, stsa_tensor *q, stsa_tensor *k,
                         stsa_tensor *v) {
  switch (p) {
  case NAN_Q:
    set(q, at->A, 3, NAN);
    set(q, at->E, 0, NAN); /* a row that keeps nothing stays 0 */
    break;
  case INF_Q:
    set(q, at->A, 1, INFINITY);
    break;
  case NAN_K:
    set(k, at->J, 5, NAN);
    break;
  case NAN_V:
    set(v, at->J, 7, NAN);
    break;
  case POS_INF_K:
  case NEG_INF_K:
    /* +inf or -inf logits by the sign of q[i][2]; 0 * inf = NaN for row A;
     * row R sees a -inf logit as its only one with NEG_INF_K: NaN */
    set(k, at->J, 2, p == POS_INF_K ? INFINITY : -INFINITY);
    set(q, at->A, 2, 0.0);
    set(q, at->R, 2, p == POS_INF_K ? -1.0 : 1.0);
    break;
  default:
    break;
  }
}

static stsa_tensor copy_tensor(const stsa_tensor *t) {
  size_t bytes = tu_span(t) * stsa_dtype_size(t->dtype);
  stsa_tensor c = *t;
  c.data = tu_guarded_alloc(bytes);
  memcpy(c.data, t->data, bytes);
  return c;
}

/* Runs one problem with every poison on every backend. */
static void run_poisons(problem *pb, const spots *at, uint64_t seed) {
  tu_rng rng = {seed};
  stsa_tensor q = tu_random_tensor(&rng, pb->q_dtype, TU_BSHD, B, pb->Sq, H, pb->D, 1);
  stsa_tensor k = tu_random_tensor(&rng, pb->kv_dtype, TU_BHSD, B, pb->Skv, H, pb->D, 1);
  stsa_tensor v = tu_random_tensor(&rng, pb->kv_dtype, TU_BSHD, B, pb->Skv, H, pb->D, 1);
  const double scale = 1.0 / sqrt((double)pb->D);
  const size_t n = (size_t)(H * pb->Sq * pb->D), rows = (size_t)(H * pb->Sq);
  double *o_clean = malloc(sizeof(double) * n), *o_dirty = malloc(sizeof(double) * n);
  double *l_clean = malloc(sizeof(double) * rows),
         *l_dirty = malloc(sizeof(double) * rows);
  const char *base_name = pb->name;
  char name[256];
  pb->name = name;
  stsa_backend backends[MAX_BACKENDS];
  int nb = all_backends(backends);
  for (int p = 0; p < POISON_COUNT; p++) {
    stsa_tensor q0 = copy_tensor(&q), k0 = copy_tensor(&k), v0 = copy_tensor(&v);
    /* the clean run shares the poison's finite edits (the zero in q) */
    if (p == POS_INF_K || p == NEG_INF_K) {
      set(&q0, at->A, 2, 0.0);
      set(&q0, at->R, 2, p == POS_INF_K ? -1.0 : 1.0);
    }
    stsa_tensor q1 = copy_tensor(&q0), k1 = copy_tensor(&k0), v1 = copy_tensor(&v0);
    apply_poison((poison)p, at, &q1, &k1, &v1);
    snprintf(name, sizeof name, "%s, %s", base_name, poison_name((poison)p));
    oracle_attention(&q0, &k0, &v0, pb->keep, scale, o_clean, l_clean);
    oracle_attention(&q1, &k1, &v1, pb->keep, scale, o_dirty, l_dirty);
    /* the poison must reach something, or the case tests nothing */
    int reached = 0;
    for (size_t e = 0; e < n && !reached; e++)
      reached = !same_value(o_clean[e], o_dirty[e]);
    CHECK(reached, "%s: the poison reaches no output (bad test)", name);
    for (int bi = 0; bi < nb; bi++) {
      run_result clean = run_backend(pb, backends[bi], &q0, &k0, &v0);
      run_result dirty = run_backend(pb, backends[bi], &q1, &k1, &v1);
      CHECK(clean.st == STSA_OK && dirty.st == STSA_OK, "%s [%s]: status %s / %s", name,
            stsa_backend_name(backends[bi]), stsa_status_str(clean.st),
            stsa_status_str(dirty.st));
      if (clean.st == STSA_OK && dirty.st == STSA_OK)
        compare(pb, backends[bi], &clean, &dirty, o_clean, o_dirty, l_clean, l_dirty);
      free_result(&clean);
      free_result(&dirty);
    }
    tu_free_tensor(&q0), tu_free_tensor(&k0), tu_free_tensor(&v0);
    tu_free_tensor(&q1), tu_free_tensor(&k1), tu_free_tensor(&v1);
  }
  pb->name = base_name;
  free(o_clean), free(o_dirty), free(l_clean), free(l_dirty);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
}

static const int64_t head_dims[] = {64, 80, 128};
static const stsa_dtype kv_dtypes[] = {STSA_F32, STSA_F16, STSA_BF16};

/* Tile configurations: (S, q tile, kv tile); no S is a tile multiple. */
typedef struct tiling {
  int64_t S;
  int q_tile, kv_tile;
  int64_t J, band; /* sparse: the poisoned key and the band half-width */
} tiling;

static const tiling tilings[] = {{83, 6, 16, 40, 24}, {150, 30, 64, 70, 60}};

static void test_dense(void) {
  for (size_t t = 0; t < sizeof tilings / sizeof *tilings; t++)
    for (size_t di = 0; di < sizeof head_dims / sizeof *head_dims; di++)
      for (size_t ki = 0; ki < sizeof kv_dtypes / sizeof *kv_dtypes; ki++) {
        const tiling *tl = &tilings[t];
        char name[128];
        snprintf(name, sizeof name, "dense S=%lld D=%lld kv %s tiles %d/%d",
                 (long long)tl->S, (long long)head_dims[di],
                 stsa_dtype_name(kv_dtypes[ki]), tl->q_tile, tl->kv_tile);
        problem pb = {name,
                      tl->S,
                      tl->S,
                      head_dims[di],
                      kv_dtypes[ki] == STSA_BF16 ? STSA_BF16 : STSA_F32,
                      kv_dtypes[ki],
                      kv_dtypes[ki] == STSA_F16 ? STSA_F16 : STSA_F32,
                      tl->q_tile,
                      tl->kv_tile,
                      NULL,
                      STSA_SPARSE_EXACT,
                      NULL};
        spots at = {11, tl->S - 3, tl->S - 2, tl->J};
        run_poisons(&pb, &at, 1000 + 10 * t + di + 100 * ki);
      }
}

/* A band |i - j| <= band, plus key J for rows i % 3 == 0; row R keeps only J
 * and row E nothing. Key J's tile is FULL for q tiles inside the band and
 * PARTIAL elsewhere, so J is kept by some rows of a tile and dropped by
 * others. */
static uint8_t *band_keep(const tiling *tl, const spots *at) {
  const int64_t S = tl->S;
  uint8_t *keep = calloc((size_t)(S * S), 1);
  for (int64_t i = 0; i < S; i++)
    for (int64_t j = 0; j < S; j++) {
      int kept = llabs(i - j) <= tl->band || (j == at->J && i % 3 == 0);
      if (i == at->R)
        kept = j == at->J;
      if (i == at->E)
        kept = 0;
      keep[i * S + j] = (uint8_t)kept;
    }
  return keep;
}

static void test_sparse(void) {
  for (size_t t = 0; t < sizeof tilings / sizeof *tilings; t++) {
    const tiling *tl = &tilings[t];
    spots at = {11, tl->S - 3, tl->S - 2, tl->J};
    uint8_t *keep = band_keep(tl, &at);
    stsa_mask *mask = NULL;
    CHECK_STATUS(stsa_mask_dense(keep, tl->S, tl->S, &mask), STSA_OK);
    const stsa_mask *masks[H] = {mask, mask};
    stsa_plan_desc desc = {sizeof(stsa_plan_desc),
                           tl->S,
                           tl->S,
                           H,
                           masks,
                           NULL,
                           STSA_ORDER_NATIVE,
                           STSA_ORDER_NATIVE,
                           tl->q_tile,
                           tl->kv_tile,
                           STSA_PLAN_ALLOW_EMPTY_ROWS,
                           NULL,
                           NULL};
    stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, tl->q_tile, tl->kv_tile);
    stsa_plan *plan = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
    if (!plan) {
      fprintf(stderr, "  (%s)\n", stsa_ctx_last_error(ctx));
      stsa_ctx_free(ctx);
      stsa_mask_free(mask);
      free(keep);
      continue;
    }
    /* the plan has what the case needs: J's tile FULL for some q tile and
     * PARTIAL for others */
    int64_t jt = at.J / tl->kv_tile, full = 0, partial = 0;
    for (int64_t qt = 0; qt * tl->q_tile < tl->S; qt++) {
      int kind = stsa_plan_tile_kind(plan, 0, qt, jt);
      full += kind == 2;
      partial += kind == 1;
    }
    CHECK(full > 0 && partial > 0,
          "sparse S=%lld: key %lld's tile is FULL %lld and "
          "PARTIAL %lld times (bad test)",
          (long long)tl->S, (long long)at.J, (long long)full, (long long)partial);
    for (int mode = STSA_SPARSE_EXACT; mode <= STSA_SPARSE_NAIVE; mode++)
      for (size_t di = 0; di < sizeof head_dims / sizeof *head_dims; di++)
        for (size_t ki = 0; ki < 2; ki++) {
          char name[128];
          snprintf(name, sizeof name, "sparse %s S=%lld D=%lld kv %s tiles %d/%d",
                   stsa_sparse_mode_name((stsa_sparse_mode)mode), (long long)tl->S,
                   (long long)head_dims[di], stsa_dtype_name(kv_dtypes[ki]), tl->q_tile,
                   tl->kv_tile);
          problem pb = {name,
                        tl->S,
                        tl->S,
                        head_dims[di],
                        STSA_F32,
                        kv_dtypes[ki],
                        STSA_F32,
                        tl->q_tile,
                        tl->kv_tile,
                        plan,
                        (stsa_sparse_mode)mode,
                        keep};
          run_poisons(&pb, &at, 2000 + 10 * t + di + 100 * ki);
        }
    stsa_plan_free(plan);
    stsa_ctx_free(ctx);
    stsa_mask_free(mask);
    free(keep);
  }
}

/* ---- the finite range of the logits -------------------------------------- */
/* Multiplies row s of head 0 of t by f. */
static void scale_row(stsa_tensor *t, int64_t s, int64_t D, double f) {
  for (int64_t d = 0; d < D; d++) {
    size_t off = tu_offset(t, 0, s, 0, d);
    tu_store(t->data, t->dtype, off, f * tu_load(t->data, t->dtype, off));
  }
}

/* Euclidean norm of row s of head h. */
static double row_norm(const stsa_tensor *t, int64_t s, int64_t h, int64_t D) {
  double ss = 0;
  for (int64_t d = 0; d < D; d++) {
    double x = tu_load(t->data, t->dtype, tu_offset(t, 0, s, h, d));
    ss += x * x;
  }
  return sqrt(ss);
}

/* Logits up to scale * |q| * |k| = frac * 1e38, the documented limit: with
 * frac < 1 every backend is finite and agrees with the oracle; beyond it the
 * tiled backends' row that overflows must be NaN (the rules for +inf logits),
 * never a row of zeros, and the other rows must not change. */
static void test_logit_range(void) {
  const double fracs[] = {0.25, 0.9, 40.0};
  const int64_t S = 83;
  for (size_t fi = 0; fi < sizeof fracs / sizeof *fracs; fi++)
    for (size_t di = 0; di < sizeof head_dims / sizeof *head_dims; di++)
      for (size_t ki = 0; ki < 2; ki++) {
        const int64_t D = head_dims[di];
        const stsa_dtype kvt = kv_dtypes[ki];
        tu_rng rng = {3000 + 10 * fi + di + 100 * ki};
        stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, S, H, D, 1);
        stsa_tensor k = tu_random_tensor(&rng, kvt, TU_BSHD, B, S, H, D, 1);
        stsa_tensor v = tu_random_tensor(&rng, kvt, TU_BSHD, B, S, H, D, 1);
        const double scale = 1.0 / sqrt((double)D), target = fracs[fi] * 1e38;
        /* K stays ordinary in f16 (|k| <= 65504); q carries the magnitude.
         * Key 40 is made parallel to q row 11, the largest logit. */
        const double kmax = kvt == STSA_F16 ? 1000.0 : 1e18;
        double kn = 0;
        for (int64_t j = 0; j < S; j++) {
          scale_row(&k, j, D, kmax / row_norm(&k, j, 0, D));
          kn = fmax(kn, row_norm(&k, j, 0, D));
        }
        for (int64_t d = 0; d < D; d++)
          set(&k, 40, d, tu_load(q.data, STSA_F32, tu_offset(&q, 0, 11, 0, d)));
        scale_row(&k, 40, D, kmax / row_norm(&k, 40, 0, D));
        for (int64_t i = 0; i < S; i++)
          scale_row(&q, i, D, target / (scale * kn * row_norm(&q, i, 0, D)) * 0.999);
        char name[128];
        snprintf(name, sizeof name, "logits to %.3g x 1e38, D=%lld kv %s", fracs[fi],
                 (long long)D, stsa_dtype_name(kvt));
        problem pb = {name,     S, S,  D,    STSA_F32,          kvt,
                      STSA_F32, 6, 16, NULL, STSA_SPARSE_EXACT, NULL};
        const size_t n = (size_t)(H * S * D);
        double *o = malloc(sizeof(double) * n), *l = malloc(sizeof(double) * H * S);
        oracle_attention(&q, &k, &v, NULL, scale, o, l);
        stsa_backend backends[MAX_BACKENDS];
        int nb = all_backends(backends);
        for (int bi = 0; bi < nb; bi++) {
          run_result r = run_backend(&pb, backends[bi], &q, &k, &v);
          CHECK_STATUS(r.st, STSA_OK);
          const char *bn = stsa_backend_name(backends[bi]);
          if (fracs[fi] < 1) {
            int64_t bad = -1, bad_lse = -1;
            for (size_t e = 0; e < n; e++)
              if (!(fabs(r.out[e] - o[e]) <= 1e-5 * (1 + fabs(o[e]))) && bad < 0)
                bad = (int64_t)e;
            for (int64_t e = 0; e < H * S; e++)
              if (!(fabs(r.lse[e] - l[e]) <= 1e-5 * fabs(l[e]) + 1e-5) && bad_lse < 0)
                bad_lse = e;
            CHECK(bad < 0, "%s [%s]: out element %lld = %g, the oracle says %g", name, bn,
                  (long long)bad, bad < 0 ? 0.0 : (double)r.out[bad],
                  bad < 0 ? 0.0 : o[bad]);
            CHECK(bad_lse < 0, "%s [%s]: lse %lld = %g, the oracle says %g", name, bn,
                  (long long)bad_lse, bad_lse < 0 ? 0.0 : (double)r.lse[bad_lse],
                  bad_lse < 0 ? 0.0 : l[bad_lse]);
          } else if (backends[bi] != STSA_BACKEND_REF) {
            /* row 11 meets key 40 with a logit past FLT_MAX in log2 units */
            int nan_row = isnan(r.lse[11]);
            for (int64_t d = 0; d < D; d++)
              nan_row &= isnan(r.out[11 * D + d]);
            CHECK(nan_row, "%s [%s]: the overflowing row gives %g (lse %g), not NaN",
                  name, bn, (double)r.out[11 * D], (double)r.lse[11]);
            int64_t bad = -1;
            for (int64_t e = (int64_t)S * D; e < (int64_t)n; e++) /* head 1: ordinary */
              if (!(fabs(r.out[e] - o[e]) <= 1e-5 * (1 + fabs(o[e]))) && bad < 0)
                bad = e;
            CHECK(bad < 0, "%s [%s]: head 1 element %lld = %g, the oracle says %g", name,
                  bn, (long long)bad, bad < 0 ? 0.0 : (double)r.out[bad],
                  bad < 0 ? 0.0 : o[bad]);
          }
          free_result(&r);
        }
        free(o), free(l);
        tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
      }
}

int main(void) {
  test_dense();
  test_sparse();
  test_logit_range();
  return tu_finish("test_nonfinite");
}
