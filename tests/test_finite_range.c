/*
 * test_finite_range.c — the finite-input contract (stsa.h, "Finite range",
 * at stsa_attention): for finite q, k and v with scale |q_i| |k_j| < 1e38,
 * every backend this machine runs returns finite outputs within f32's
 * tolerance of the double oracle (attention_oracle.h), however large or
 * small the values. Swept over:
 *   - the calls: dense, block-sparse (a band with PARTIAL tiles), SVG (the
 *     oracle under the masks of the kinds the report names) and SVG2 (every
 *     key cluster kept, so the oracle is dense attention);
 *   - q, k and v of one dtype, f32, f16 or bf16 (the amx backend's bf16
 *     tiles run on the last);
 *   - magnitudes from 1e-30 (f16: its smallest normal) to the dtype's
 *     largest finite value, given to a whole tensor, to one whole row or to
 *     one element (an outlier) of q, k or v. Where q or k carries the
 *     magnitude the other is scaled to keep the logits inside the range.
 * Dense and block-sparse calls also take a caller's scale past 1/log2(e),
 * with q or k at the dtype's largest value (the kernels' scaled q
 * overflowed there), and with q's largest in one head, K's in the other. The output goes
 * to f32 (the tolerance) and to the input dtype (finite). Under an emulator (tu_emulated)
 * two magnitudes a dtype: the ends.
 */
#define STSA_EXPERIMENTAL /* stsa_svg_kind_mask */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_oracle.h"
#include "testutil.h"

enum { H = 2, D = 64, MAX_BACKENDS = 1 + TU_MAX_BACKENDS, Q_TILE = 36, KV_TILE = 64 };
/* 3 frames of 6 x 10: 180 tokens, not a multiple of any tile */
static const stsa_geometry GEO = {3, 6, 10, 0, 0, STSA_TEXT_NONE};
#define N 180
/* the largest logit a case may reach, scale |q_i| |k_j|: a tenth of the
 * documented limit, so that every case is inside it whatever rounding did */
#define LOGIT_LIMIT 1e37
/* max |out - oracle| per row, over the row's largest |oracle| value, for
 * logits of order 1: f32 arithmetic on ~180 keys (the kernels' own tests
 * hold them to 2e-5); worst_row_error adds what larger logits explain */
#define ROW_TOL 3e-5

typedef enum call_kind {
  CALL_DENSE,
  CALL_SPARSE,
  CALL_SVG,
  CALL_SVG2,
  CALL_COUNT
} call_kind;
static const char *const CALL_NAME[CALL_COUNT] = {"dense", "sparse", "svg", "svg2"};

/* HEADS: q's head 0 and k's head 1 carry the magnitude (each head inside
 * the range on its own, the call's largest q and K far outside together) */
typedef enum form { WHOLE, ROW, ELEMENT, HEADS } form;
static const char *const FORM_NAME[] = {"whole tensor", "row 7", "element [7][3]",
                                        "head 0 of q and head 1 of k"};

typedef struct sweep_case {
  stsa_dtype dtype;
  char target; /* 'q', 'k' or 'v': the tensor that carries the magnitude */
  form shape;
  double magnitude;
  double scale; /* the caller's softmax scale: 0 for 1/sqrt(D) (every call),
                   else dense and block-sparse calls only */
} sweep_case;

static double scale_of(const sweep_case *c) {
  return c->scale > 0 ? c->scale : 1.0 / sqrt((double)D);
}

static double dtype_max(stsa_dtype t) {
  return t == STSA_F16 ? 65504.0 : t == STSA_BF16 ? 0x1.fep127 : FLT_MAX;
}
/* The smallest magnitude swept: 1e-30, or f16's smallest normal. */
static double dtype_min(stsa_dtype t) { return t == STSA_F16 ? 0x1p-14 : 1e-30; }

/* ---- data ------------------------------------------------------------------ */
/* Elements [s0, s1) x [d0, d1) of head h (every head: h = -1) times f. */
static void scale_elements(stsa_tensor *t, int64_t h, int64_t s0, int64_t s1, int64_t d0,
                           int64_t d1, double f) {
  for (int64_t h1 = h < 0 ? H : h + 1, h0 = h < 0 ? 0 : h; h0 < h1; h0++)
    for (int64_t s = s0; s < s1; s++)
      for (int64_t d = d0; d < d1; d++) {
        const size_t off = tu_offset(t, 0, s, h0, d);
        tu_store(t->data, t->dtype, off, f * tu_load(t->data, t->dtype, off));
      }
}

/* Multiplies the part of t the form names by f: every element, row 7 of
 * each head, or element [7][3] of each head (set to f times the sign). */
static void apply_form(stsa_tensor *t, form shape, double f) {
  if (shape == WHOLE)
    scale_elements(t, -1, 0, N, 0, D, f);
  else if (shape == ROW)
    scale_elements(t, -1, 7, 8, 0, D, f);
  else
    for (int64_t h = 0; h < H; h++)
      tu_store(t->data, t->dtype, tu_offset(t, 0, 7, h, 3), h ? -f : f);
}

/* |row s of head h| of t. */
static double row_norm(const stsa_tensor *t, int64_t h, int64_t s) {
  double ss = 0;
  for (int64_t d = 0; d < D; d++) {
    const double x = tu_load(t->data, t->dtype, tu_offset(t, 0, s, h, d));
    ss += x * x;
  }
  return sqrt(ss);
}

/* The largest |row| of head h of t (of every head: h = -1). */
static double max_norm(const stsa_tensor *t, int64_t h) {
  double most = 0;
  for (int64_t h1 = h < 0 ? H : h + 1, h0 = h < 0 ? 0 : h; h0 < h1; h0++)
    for (int64_t s = 0; s < N; s++)
      most = fmax(most, row_norm(t, h0, s));
  return most;
}

/* A guarded tensor of values uniform in [-1, 1). */
static stsa_tensor uniform_tensor(tu_rng *rng, stsa_dtype dtype, tu_layout layout) {
  stsa_tensor t = tu_sentinel_tensor(dtype, layout, 1, N, H, D);
  for (int64_t h = 0; h < H; h++)
    for (int64_t s = 0; s < N; s++)
      for (int64_t d = 0; d < D; d++)
        tu_store(t.data, dtype, tu_offset(&t, 0, s, h, d), tu_rng_uniform(rng));
  return t;
}

/* q, k and v of the case: values uniform in [-1, 1) (so that a magnitude up
 * to the dtype's largest stays finite), then the magnitude applied. When q
 * or k carries it as a whole tensor, the other takes its inverse where that
 * is not below the smallest magnitude swept (logits of order 1); then, in
 * every case, the other is scaled down until the logits are inside the
 * limit (the largest then far apart: one key takes a row). */
static void make_case(const sweep_case *c, stsa_tensor *q, stsa_tensor *k,
                      stsa_tensor *v) {
  tu_rng rng = {(uint64_t)(1000 * c->shape + 7 * c->dtype + c->target) ^
                (uint64_t)(int64_t)(100 + log10(c->magnitude))};
  *q = uniform_tensor(&rng, c->dtype, TU_BSHD);
  *k = uniform_tensor(&rng, c->dtype, TU_BSHD);
  *v = uniform_tensor(&rng, c->dtype, TU_BHSD);
  if (c->target == 'v') {
    apply_form(v, c->shape, c->magnitude);
    return;
  }
  if (c->shape == HEADS) {
    scale_elements(q, 0, 0, N, 0, D, c->magnitude);
    scale_elements(k, 1, 0, N, 0, D, c->magnitude);
    for (int64_t h = 0; h < H; h++) { /* the head's other tensor down */
      const double reach = scale_of(c) * max_norm(q, h) * max_norm(k, h);
      if (reach > LOGIT_LIMIT)
        scale_elements(h ? q : k, h, 0, N, 0, D, LOGIT_LIMIT / reach * 0.5);
    }
    return;
  }
  stsa_tensor *carrier = c->target == 'q' ? q : k, *other = c->target == 'q' ? k : q;
  apply_form(carrier, c->shape, c->magnitude);
  if (c->shape == WHOLE && 1.0 / c->magnitude >= dtype_min(c->dtype))
    scale_elements(other, -1, 0, N, 0, D, 1.0 / c->magnitude);
  const double reach = scale_of(c) * max_norm(q, -1) * max_norm(k, -1);
  if (reach > LOGIT_LIMIT)
    scale_elements(other, -1, 0, N, 0, D, LOGIT_LIMIT / reach * 0.5);
}

/* ---- the calls ------------------------------------------------------------- */
/* One thread: the other tests hold the thread counts to bitwise agreement. */
static stsa_ctx *make_ctx(stsa_backend backend) {
  stsa_ctx *ctx = tu_make_ctx(backend, 1, Q_TILE, KV_TILE);
  stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 1); /* the inputs are finite */
  return ctx;
}

static stsa_svg_config session_config(call_kind call) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = GEO;
  c.heads = H;
  c.head_dim = D;
  c.density = 0.4;
  c.sample_rows = 24;
  c.sink_frames = 1;
  c.seed = 11;
  if (call == CALL_SVG2) {
    c.method = STSA_SVG_METHOD_SVG2;
    c.svg2.q_clusters = 5;
    c.svg2.kv_clusters = 7;
    c.svg2.top_p = 0.5;
    c.svg2.min_kv_fraction = 1.0; /* every key cluster: dense attention's result */
  }
  return c;
}

/* The keep matrix [N][N] of a mask over native tokens. */
static uint8_t *keep_of(const stsa_mask *m) {
  uint8_t *keep = malloc((size_t)N * N);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < N; j++)
      keep[i * N + j] = (uint8_t)stsa_mask_keep(m, i, j);
  return keep;
}

/* Runs `call` on `backend` into out (f32 or the inputs' dtype); fills
 * keep[h] with what the oracle must keep (NULL: dense) and returns the
 * status. */
static stsa_status run_call(call_kind call, stsa_backend backend, double scale,
                            const stsa_tensor *q, const stsa_tensor *k,
                            const stsa_tensor *v, const stsa_tensor *out,
                            const stsa_mask *band, uint8_t *keep[H]) {
  stsa_ctx *ctx = make_ctx(backend);
  stsa_status st = STSA_OK;
  keep[0] = keep[1] = NULL;
  const stsa_attn_opts ao = {sizeof ao, (float)scale, NULL};
  stsa_sparse_opts so = STSA_INIT(stsa_sparse_opts);
  so.scale = (float)scale;
  if (call == CALL_DENSE) {
    st = stsa_attention(ctx, q, k, v, out, &ao);
  } else if (call == CALL_SPARSE) {
    const stsa_mask *masks[H] = {band, band};
    stsa_plan_desc pd = STSA_INIT(stsa_plan_desc);
    pd.s_q = pd.s_kv = N;
    pd.heads = H;
    pd.masks = masks;
    stsa_plan *plan = NULL;
    st = stsa_plan_build(ctx, &pd, &plan);
    if (st == STSA_OK)
      st = stsa_sparse_attention(ctx, plan, q, k, v, out, &so);
    stsa_plan_free(plan);
    keep[0] = keep_of(band);
    keep[1] = keep_of(band);
  } else {
    const stsa_svg_config cfg = session_config(call);
    stsa_svg *svg = NULL;
    stsa_head_kind kinds[H];
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    rep.kinds = kinds;
    st = stsa_svg_create(ctx, &cfg, &svg);
    if (st == STSA_OK)
      st = stsa_svg_attention(svg, 0, 0, q, k, v, out, &rep);
    for (int h = 0; call == CALL_SVG && st == STSA_OK && h < H; h++) {
      stsa_mask *m = NULL;
      st = stsa_svg_kind_mask(svg, kinds[h], &m, NULL, NULL);
      if (st == STSA_OK)
        keep[h] = keep_of(m);
      stsa_mask_free(m);
    }
    stsa_svg_free(svg);
  }
  if (st != STSA_OK)
    fprintf(stderr, "  %s: %s\n", CALL_NAME[call], stsa_ctx_last_error(ctx));
  stsa_ctx_free(ctx);
  return st;
}

/* ---- one case ---------------------------------------------------------------- */
/* The oracle of one case under each keep the calls asked for (most share
 * one: dense, the band, a pair of SVG kinds), computed once each. */
enum { MEMO_MAX = 16 };
typedef struct oracle_memo {
  int n;
  uint8_t *keep[MEMO_MAX][H]; /* NULL: dense */
  double *want[MEMO_MAX];     /* [H][N][D] */
} oracle_memo;

static int same_keep(const uint8_t *a, const uint8_t *b) {
  return (!a && !b) || (a && b && memcmp(a, b, (size_t)N * N) == 0);
}

/* The oracle's output under keep (taken: the memo frees it). */
static const double *oracle_for(oracle_memo *m, double scale, const stsa_tensor *q,
                                const stsa_tensor *k, const stsa_tensor *v,
                                uint8_t *keep[H]) {
  for (int e = 0; e < m->n; e++)
    if (same_keep(m->keep[e][0], keep[0]) && same_keep(m->keep[e][1], keep[1])) {
      free(keep[0]), free(keep[1]);
      return m->want[e];
    }
  if (m->n == MEMO_MAX) {
    fprintf(stderr, "test_finite_range: more than %d masks in one case\n", MEMO_MAX);
    exit(1);
  }
  double *want = malloc(sizeof(double) * H * N * D),
         *lse = malloc(sizeof(double) * H * N);
  tu_oracle_attention(q, k, v, (const uint8_t *const *)keep, scale, want, lse);
  free(lse);
  m->keep[m->n][0] = keep[0];
  m->keep[m->n][1] = keep[1];
  m->want[m->n] = want;
  return m->want[m->n++];
}

static void memo_free(oracle_memo *m) {
  for (int e = 0; e < m->n; e++)
    free(m->keep[e][0]), free(m->keep[e][1]), free(m->want[e]);
}

/* The largest scale |q_i| |k_j| of each query row [H][N]: f32 logits carry
 * an error of a few ulps of it (the products' rounding), which the softmax
 * turns into relative errors of the weights. */
static void row_reach(const stsa_tensor *q, const stsa_tensor *k, double scale,
                      double *reach) {
  for (int64_t h = 0; h < H; h++) {
    const double kn = max_norm(k, h);
    for (int64_t i = 0; i < N; i++)
      reach[h * N + i] = scale * row_norm(q, h, i) * kn;
  }
}

/* Holds out (f32) to the oracle row by row: max |out - oracle| over the
 * row's largest |oracle| must stay within ROW_TOL plus what the logits'
 * f32 rounding explains (8 ulps of the row's reach). Returns the worst
 * row's error over its tolerance (> 1 fails; +inf for a non-finite value). */
static double worst_row_error(const stsa_tensor *out, const double *want,
                              const double *reach, int64_t heads, int64_t *at) {
  double worst = 0;
  for (int64_t h = 0; h < heads; h++)
    for (int64_t i = 0; i < N; i++) {
      const double *w = want + (h * N + i) * D;
      double row_scale = 0, diff = 0;
      for (int64_t d = 0; d < D; d++) {
        const double got = tu_load(out->data, STSA_F32, tu_offset(out, 0, i, h, d));
        row_scale = fmax(row_scale, fabs(w[d]));
        diff = isfinite(got) ? fmax(diff, fabs(got - w[d])) : INFINITY;
      }
      /* an absolute floor at f32's smallest normal: the amx backend's tile
       * unit, as the hardware does, takes bf16 values below it as zero */
      const double tol = ROW_TOL + 8 * 0x1p-24 * reach[h * N + i];
      const double err = diff / (tol * fmax(row_scale, 0x1p-126 / ROW_TOL));
      if (!(err <= worst)) {
        worst = err;
        *at = h * N + i;
      }
    }
  return worst;
}

static int all_finite(const stsa_tensor *t) {
  for (int64_t h = 0; h < H; h++)
    for (int64_t s = 0; s < N; s++)
      for (int64_t d = 0; d < D; d++)
        if (!isfinite(tu_load(t->data, t->dtype, tu_offset(t, 0, s, h, d))))
          return 0;
  return 1;
}

static void check_case(const sweep_case *c, const stsa_mask *band) {
  stsa_tensor q, k, v;
  make_case(c, &q, &k, &v);
  char name[160];
  snprintf(name, sizeof name, "%s inputs, %c %s x %.3g, scale %.3g",
           stsa_dtype_name(c->dtype), c->target, FORM_NAME[c->shape], c->magnitude,
           scale_of(c));
  oracle_memo memo = {0};
  double *reach = malloc(sizeof(double) * H * N);
  row_reach(&q, &k, scale_of(c), reach);
  /* a caller's scale: the calls that take one */
  const int calls = c->scale > 0 ? CALL_SPARSE + 1 : CALL_COUNT;
  stsa_backend backends[MAX_BACKENDS] = {STSA_BACKEND_REF};
  const int nb = 1 + tu_tiled_backends(backends + 1);
  for (int call = 0; call < calls; call++)
    for (int bi = 0; bi < nb; bi++) {
      const char *bn = stsa_backend_name(backends[bi]);
      stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
      stsa_tensor low = tu_sentinel_tensor(c->dtype, TU_BHSD, 1, N, H, D);
      uint8_t *keep[H], *low_keep[H];
      stsa_status st =
          run_call(call, backends[bi], c->scale, &q, &k, &v, &out, band, keep);
      CHECK(st == STSA_OK, "%s, %s [%s]: %s", name, CALL_NAME[call], bn,
            stsa_status_str(st));
      if (st == STSA_OK) {
        int64_t at = -1;
        const double err = worst_row_error(
            &out, oracle_for(&memo, scale_of(c), &q, &k, &v, keep), reach, H, &at);
        CHECK(err <= 1, "%s, %s [%s]: row %lld (head %lld) off by %.3g of its tolerance",
              name, CALL_NAME[call], bn, (long long)(at % N), (long long)(at / N), err);
        if (backends[bi] != STSA_BACKEND_REF) { /* its stores are the others' */
          st = run_call(call, backends[bi], c->scale, &q, &k, &v, &low, band, low_keep);
          CHECK(st == STSA_OK && all_finite(&low),
                "%s, %s [%s]: a %s output is not finite", name, CALL_NAME[call], bn,
                stsa_dtype_name(c->dtype));
          free(low_keep[0]), free(low_keep[1]);
        }
      } else {
        free(keep[0]), free(keep[1]);
      }
      CHECK(tu_guard_ok(out.data) && tu_guard_ok(low.data), "%s, %s [%s]: guard bytes",
            name, CALL_NAME[call], bn);
      tu_free_tensor(&out), tu_free_tensor(&low);
    }
  memo_free(&memo);
  free(reach);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
}

/* A NaN in head 1's q (with check_finite off) leaves head 0, whose q is
 * near the top of its range under a scale of 2, to the contract: the power
 * of two a head moves from q onto its K is read from the head's own q (the
 * call's maximum, NaN, had left head 0's q to overflow: fuzz_svg2_session). */
static void check_nan_apart(stsa_dtype dtype) {
  const sweep_case c = {dtype, 'q', HEADS, dtype_max(dtype), 2.0};
  stsa_tensor q, k, v;
  make_case(&c, &q, &k, &v);
  tu_store(q.data, dtype, tu_offset(&q, 0, 5, 1, 1), NAN);
  double *reach = malloc(sizeof(double) * H * N);
  row_reach(&q, &k, c.scale, reach);
  oracle_memo memo = {0};
  uint8_t *keep[H] = {NULL, NULL};
  const double *want = oracle_for(&memo, c.scale, &q, &k, &v, keep);
  stsa_backend backends[MAX_BACKENDS] = {STSA_BACKEND_REF};
  const int nb = 1 + tu_tiled_backends(backends + 1);
  const stsa_attn_opts ao = {sizeof ao, (float)c.scale, NULL};
  for (int bi = 0; bi < nb; bi++) {
    stsa_ctx *ctx = make_ctx(backends[bi]);
    stsa_ctx_set(ctx, STSA_PARAM_CHECK_FINITE, 0);
    stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
    const stsa_status st = stsa_attention(ctx, &q, &k, &v, &out, &ao);
    int64_t at = -1;
    const double err =
        st == STSA_OK ? worst_row_error(&out, want, reach, 1, &at) : INFINITY;
    CHECK(err <= 1,
          "%s inputs, a NaN in head 1's q, dense [%s]: %s, head 0 row %lld off by %.3g "
          "of its tolerance",
          stsa_dtype_name(dtype), stsa_backend_name(backends[bi]), stsa_status_str(st),
          (long long)at, err);
    CHECK(tu_guard_ok(out.data), "a NaN in head 1's q [%s]: guard bytes",
          stsa_backend_name(backends[bi]));
    tu_free_tensor(&out);
    stsa_ctx_free(ctx);
  }
  memo_free(&memo);
  free(reach);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
}

/* Magnitudes from the dtype's smallest swept one to its largest finite
 * value: decades 10^-30, 10^-20, ... that it holds, and the largest. */
static int magnitudes(stsa_dtype t, double out[16]) {
  int n = 0;
  if (tu_emulated()) { /* the ends: a quarter of the time */
    out[n++] = dtype_min(t);
    out[n++] = dtype_max(t);
    return n;
  }
  for (int e = -30; e <= 30; e += 10)
    if (pow(10.0, e) >= dtype_min(t) && pow(10.0, e) < dtype_max(t))
      out[n++] = pow(10.0, e);
  if (t == STSA_F16) { /* its range is 10^-4.2 .. 10^4.8: more steps inside */
    n = 0;
    for (int e = -4; e <= 4; e += 2)
      out[n++] = pow(10.0, e);
    out[n++] = dtype_min(t);
  }
  out[n++] = dtype_max(t);
  return n;
}

int main(void) {
  const stsa_dtype dtypes[] = {STSA_F32, STSA_F16, STSA_BF16};
  const char targets[] = {'q', 'k', 'v'};
  stsa_mask *band = NULL;
  CHECK_STATUS(stsa_mask_local(40, 40, &band), STSA_OK);
  for (size_t ti = 0; ti < sizeof dtypes / sizeof *dtypes; ti++) {
    double mags[16];
    const int nm = magnitudes(dtypes[ti], mags);
    for (size_t gi = 0; gi < sizeof targets; gi++)
      for (int shape = WHOLE; shape <= ELEMENT; shape++)
        for (int mi = 0; mi < nm; mi++) {
          const sweep_case c = {dtypes[ti], targets[gi], (form)shape, mags[mi], 0};
          check_case(&c, band);
        }
    /* a scale past 1/log2(e) (D <= 2 by default, or a caller's): q near the
     * top of its range overflowed f32 when the kernels multiplied it by
     * scale * log2(e) (NaN rows); a large K beside it; and the two in
     * different heads (K took the power of two the call's largest q needed,
     * and overflowed: fuzz/repro/k_exp_rows.c) */
    const double scales[] = {2.0, 1e30};
    for (size_t si = 0; si < sizeof scales / sizeof *scales; si++)
      for (size_t gi = 0; gi < 2; gi++)
        for (int shape = WHOLE; shape <= (gi ? ELEMENT : HEADS); shape++) {
          const sweep_case c = {dtypes[ti], targets[gi], (form)shape,
                                dtype_max(dtypes[ti]), scales[si]};
          check_case(&c, band);
        }
    check_nan_apart(dtypes[ti]);
  }
  stsa_mask_free(band);
  return tu_finish("test_finite_range");
}
