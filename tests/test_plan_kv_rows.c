/*
 * test_plan_kv_rows.c — plans over a subset of the keys (stsa_plan_desc.kv_rows),
 * what sequence-parallel (Ring) attention runs: one rank's query shard
 * against one key shard, masks on the true token coordinates, with the
 * log-sum-exp of every row so shards merge exactly.
 *
 * Contract (stsa.h): k and v hold exactly the s_kv subset rows, row j being
 * native token kv_rows[j]; pair (query i, key row j) is kept iff the mask
 * keeps (native q token, kv_rows[j]). Outputs are compared with a
 * double-precision softmax that asks stsa_mask_keep about every pair, and
 * plans with the brute-force plan oracle.
 */
#define STSA_EXPERIMENTAL /* stsa_plan_head_stats */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask_util.h"
#include "plan_oracle.h"
#include "testutil.h"

#define MAX_D 128

/* ---- reference and comparison --------------------------------------------- */
/* out [B][S_q][H][D] and lse [B][H][S_q] in double: q row i (native token
 * qtok[i]) against every k/v row j (native token ktok[j]) the head's mask
 * keeps. */
static void reference(const stsa_tensor *q, const stsa_tensor *k, const stsa_tensor *v,
                      const stsa_mask *const *masks, const int64_t *qtok,
                      const int64_t *ktok, double *out, double *lse) {
  const int64_t B = q->shape[0], Sq = q->shape[1], H = q->shape[2], D = q->shape[3];
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < Sq; i++)
      for (int64_t h = 0; h < H; h++)
        tu_masked_reference_row(q, k, v, masks[h], b, i, qtok[i], h, ktok,
                                out + ((b * Sq + i) * H + h) * D,
                                &lse[(b * H + h) * Sq + i]);
}

/* Max |difference| of out and lse from double arrays (as `reference` lays
 * them out); equal infinities count as 0, any other non-finite as +inf. */
static double worst(const stsa_tensor *out, const float *lse, const double *ref,
                    const double *ref_lse) {
  const int64_t B = out->shape[0], S = out->shape[1], H = out->shape[2],
                D = out->shape[3];
  double w = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < S; i++)
      for (int64_t h = 0; h < H; h++) {
        for (int64_t d = 0; d < D; d++) {
          const double got = tu_load(out->data, out->dtype, tu_offset(out, b, i, h, d));
          const double e =
              isfinite(got) ? fabs(got - ref[((b * S + i) * H + h) * D + d]) : INFINITY;
          w = e > w ? e : w;
        }
        const int64_t li = (b * H + h) * S + i;
        if (lse && (double)lse[li] != ref_lse[li]) {
          const double e = fabs((double)lse[li] - ref_lse[li]);
          w = isfinite(e) && e > w ? e : isfinite(e) ? w : INFINITY;
        }
      }
  return w;
}

/* ---- orders ---------------------------------------------------------------- */
/* The native token at each position of the plan's kv walk: the subset sorted
 * by position in `order` (computed here from stsa_order_permutation, not by
 * the library). */
static void plan_kv_tokens(const stsa_geometry *g, stsa_order order, const int64_t *rows,
                           int64_t n, int64_t *tokens) {
  const int64_t N = tu_tokens(g);
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)N);
  uint8_t *in = calloc((size_t)N, 1);
  CHECK_STATUS(stsa_order_permutation(g, order, perm), STSA_OK);
  for (int64_t j = 0; j < n; j++)
    in[rows[j]] = 1;
  int64_t c = 0;
  for (int64_t pos = 0; pos < N; pos++)
    if (in[perm[pos]])
      tokens[c++] = perm[pos];
  free(perm);
  free(in);
}

/* The native token of each q position: q_rows, or the order's permutation. */
static void plan_q_tokens(const stsa_geometry *g, stsa_order order, const int64_t *q_rows,
                          int64_t n, int64_t *tokens) {
  if (q_rows)
    memcpy(tokens, q_rows, sizeof(int64_t) * (size_t)n);
  else
    CHECK_STATUS(stsa_order_permutation(g, order, tokens), STSA_OK);
}

static void check_plan(const stsa_plan *plan, const stsa_mask *const *masks, int64_t H,
                       const int64_t *q_pos_tok, const int64_t *kv_pos_tok,
                       const char *what) {
  plan_oracle o;
  memset(&o, 0, sizeof o);
  for (int64_t h = 0; h < H; h++)
    plan_oracle_head(&o, plan, h, masks[h], q_pos_tok, kv_pos_tok);
  CHECK(!o.bad_kind && !o.bad_pattern && !o.bad_count, "%s: plan oracle: %s", what,
        o.first);
}

/* A [B, S, H, D] tensor holding rows `rows[i]` of src (a copy in another order). */
static stsa_tensor gather_rows(const stsa_tensor *src, const int64_t *rows, int64_t S) {
  const int64_t B = src->shape[0], H = src->shape[2], D = src->shape[3];
  stsa_tensor t = tu_sentinel_tensor(src->dtype, TU_BSHD, B, S, H, D);
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < S; i++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < D; d++)
          tu_store(t.data, t.dtype, tu_offset(&t, b, i, h, d),
                   tu_load(src->data, src->dtype, tu_offset(src, b, rows[i], h, d)));
  return t;
}

/* Every backend a test runs: the reference, then the tiled ones. */
static int all_backends(stsa_backend out[TU_MAX_BACKENDS + 1]) {
  out[0] = STSA_BACKEND_REF;
  return 1 + tu_tiled_backends(out + 1);
}

/* ---- video shards ------------------------------------------------------------ */
/* Spatial head (frames +-1 and the sink) and temporal head (a position band),
 * both with the text rules: the masks of an SVG layer. */
static void svg_masks(const stsa_geometry *g, stsa_mask *masks[2]) {
  stsa_mask *fw, *sink, *band, *text1, *text2;
  NEW_MASK(fw, stsa_mask_frame_window(g, 1, &fw));
  NEW_MASK(sink, stsa_mask_sink_frames(g, 1, &sink));
  NEW_MASK(band, stsa_mask_position_band(g, 9, &band));
  NEW_MASK(text1, stsa_mask_text(g, &text1));
  NEW_MASK(text2, stsa_mask_text(g, &text2));
  masks[0] = tu_or_free(tu_or_free(fw, sink), text1);
  masks[1] = tu_or_free(band, text2);
}

typedef struct shard_case {
  stsa_text_pos text_pos;
  stsa_order q_order, kv_order;
  int q_sampled;
  stsa_dtype dtype;
  int64_t D;
} shard_case;

static void run_shard_case(stsa_ctx *ctx, const shard_case *c, tu_rng *rng) {
  const stsa_geometry g = {3, 4, 6, 10, 7, c->text_pos}; /* N = 82 */
  const int64_t N = tu_tokens(&g), B = 1, H = 2, D = c->D;
  const int64_t k0 = 17, Skv = 45; /* keys [17, 62): neither tile nor frame aligned */
  const int64_t q_rows[7] = {81, 3, 40, 41, 12, 70, 0};
  const int64_t Sq = c->q_sampled ? 7 : N;
  int64_t kv_rows[45], kv_pos_tok[45], *q_pos_tok = malloc(sizeof(int64_t) * (size_t)N);
  for (int64_t j = 0; j < Skv; j++)
    kv_rows[j] = k0 + j;
  stsa_mask *m[2];
  svg_masks(&g, m);
  const stsa_mask *masks[2] = {m[0], m[1]};
  char what[160];
  snprintf(what, sizeof what, "text %d, q %d%s, kv %d, %s, D %lld", (int)c->text_pos,
           (int)c->q_order, c->q_sampled ? " (q_rows)" : "", (int)c->kv_order,
           stsa_dtype_name(c->dtype), (long long)D);

  stsa_plan_desc desc = tu_plan_desc(Sq, Skv, H, masks, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  desc.q_order = c->q_order;
  desc.kv_order = c->kv_order;
  desc.q_tile = 12;
  desc.kv_tile = 16;
  desc.q_rows = c->q_sampled ? q_rows : NULL;
  desc.kv_rows = kv_rows;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  if (!plan) {
    free(q_pos_tok);
    return;
  }
  plan_q_tokens(&g, c->q_order, desc.q_rows, Sq, q_pos_tok);
  plan_kv_tokens(&g, c->kv_order, kv_rows, Skv, kv_pos_tok);
  check_plan(plan, masks, H, q_pos_tok, kv_pos_tok, what);
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  CHECK_STATUS(stsa_plan_get_stats(plan, &st), STSA_OK);

  stsa_tensor q = tu_random_tensor(rng, c->dtype, TU_BSHD, B, Sq, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(rng, c->dtype, TU_BSHD, B, Skv, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(rng, c->dtype, TU_BSHD, B, Skv, H, D, 1.0);
  double *ref = malloc(sizeof(double) * (size_t)(B * Sq * H * D));
  double *ref_lse = malloc(sizeof(double) * (size_t)(B * H * Sq));
  /* q rows hold native tokens in native order, or the q_rows ones */
  int64_t *q_tok = malloc(sizeof(int64_t) * (size_t)Sq);
  for (int64_t i = 0; i < Sq; i++)
    q_tok[i] = c->q_sampled ? q_rows[i] : i;
  reference(&q, &k, &v, masks, q_tok, kv_rows, ref, ref_lse);

  stsa_backend be[TU_MAX_BACKENDS + 1];
  const int nbe = all_backends(be);
  float *lse = malloc(sizeof(float) * (size_t)(B * H * Sq));
  for (int bi = 0; bi < nbe; bi++) {
    CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, be[bi]), STSA_OK);
    stsa_tensor exact = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, Sq, H, D);
    for (int mode = 0; mode < STSA_SPARSE_MODE_COUNT_; mode++) {
      stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, Sq, H, D);
      stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
      opts.lse = lse;
      opts.mode = (stsa_sparse_mode)mode;
      stsa_status s = stsa_sparse_attention(ctx, plan, &q, &k, &v, &out, &opts);
      CHECK(s == STSA_OK, "%s, %s, %s: %s (%s)", what, stsa_backend_name(be[bi]),
            stsa_sparse_mode_name(opts.mode), stsa_status_str(s),
            stsa_ctx_last_error(ctx));
      CHECK(tu_guard_ok(out.data), "%s: guard bytes", what);
      if (mode != STSA_SPARSE_TILE_ROUNDED) {
        const double e = worst(&out, lse, ref, ref_lse);
        CHECK(e < 5e-5, "%s, %s, %s: error %g", what, stsa_backend_name(be[bi]),
              stsa_sparse_mode_name(opts.mode), e);
        if (mode == STSA_SPARSE_EXACT)
          memcpy(exact.data, out.data, tu_span(&out) * sizeof(float));
      } else if (st.tiles_partial == 0) { /* nothing to round */
        CHECK(tu_same_bytes(&out, &exact), "%s, %s: tile-rounded != exact", what,
              stsa_backend_name(be[bi]));
      } else { /* lossy, but every row written and finite */
        double scale = 0;
        CHECK(tu_max_abs_diff(&out, &exact, &scale) < 10, "%s, %s: tile-rounded", what,
              stsa_backend_name(be[bi]));
      }
      tu_free_tensor(&out);
    }
    tu_free_tensor(&exact);
  }
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_AUTO);
  free(lse);
  free(ref);
  free(ref_lse);
  free(q_tok);
  free(q_pos_tok);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  stsa_plan_free(plan);
  stsa_mask_free(m[0]);
  stsa_mask_free(m[1]);
}

/* A video key shard under every key order, query order and sampling. */
static void test_video_shards(stsa_ctx *ctx) {
  tu_rng rng = {0x6b76};
  const int64_t dims[3] = {64, 80, 128};
  int n = 0;
  for (int tp = 0; tp < 2; tp++)
    for (int kv = 0; kv < STSA_ORDER_COUNT_; kv++)
      for (int qo = 0; qo < 2; qo++)
        for (int sampled = 0; sampled < 2; sampled++, n++) {
          const shard_case c = {tp ? STSA_TEXT_SUFFIX : STSA_TEXT_PREFIX,
                                (stsa_order)qo,
                                (stsa_order)kv,
                                sampled,
                                n % 2 ? STSA_BF16 : STSA_F32,
                                dims[n % 3]};
          run_shard_case(ctx, &c, &rng);
        }
}

/* ---- the Ring property --------------------------------------------------------- */
/* The keys of a full plan split into 2 and 3 contiguous shards, each run with
 * kv_rows and lse, merged by log-sum-exp: the full plan's output. */
static void test_lse_merge(stsa_ctx *ctx) {
  const stsa_geometry g = {4, 4, 5, 9, 6, STSA_TEXT_SUFFIX}; /* N = 89 */
  const int64_t N = tu_tokens(&g), B = 2, H = 2, D = 80;
  stsa_mask *m[2];
  svg_masks(&g, m);
  const stsa_mask *masks[2] = {m[0], m[1]};
  tu_rng rng = {0x7269};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, N, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, N, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, N, H, D, 1.0);
  stsa_plan_desc desc = tu_plan_desc(N, N, H, masks, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  desc.q_order = STSA_ORDER_POSITION_MAJOR;
  desc.kv_order = STSA_ORDER_SINK_FIRST;
  desc.q_tile = 18;
  stsa_plan *full = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &full), STSA_OK);
  const size_t rows = (size_t)(B * N * H), n_out = rows * (size_t)D;
  float *lse_full = malloc(sizeof(float) * rows), *lse = malloc(sizeof(float) * rows);
  double *acc = malloc(sizeof(double) * n_out), *lsum = malloc(sizeof(double) * rows);
  double *mx = malloc(sizeof(double) * rows);
  int64_t *kv_rows = malloc(sizeof(int64_t) * (size_t)N);
  stsa_backend be[TU_MAX_BACKENDS + 1];
  const int nbe = all_backends(be);
  for (int bi = 0; full && bi < nbe; bi++) {
    CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, be[bi]), STSA_OK);
    stsa_tensor out_full = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
    stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
    opts.lse = lse_full;
    CHECK_STATUS(stsa_sparse_attention(ctx, full, &q, &k, &v, &out_full, &opts), STSA_OK);
    for (int shards = 2; shards <= 3; shards++) {
      /* running (max, sum, weighted output) per row, in double */
      for (size_t r = 0; r < rows; r++) {
        mx[r] = -INFINITY;
        lsum[r] = 0;
      }
      memset(acc, 0, sizeof(double) * n_out);
      for (int s = 0; s < shards; s++) {
        const int64_t a = s * N / shards, e = (s + 1) * N / shards, n = e - a;
        for (int64_t j = 0; j < n; j++)
          kv_rows[j] = a + j;
        stsa_plan_desc sd = desc;
        sd.s_kv = n;
        sd.kv_rows = kv_rows;
        stsa_plan *plan = NULL;
        CHECK_STATUS(stsa_plan_build(ctx, &sd, &plan), STSA_OK);
        stsa_tensor ks = gather_rows(&k, kv_rows, n), vs = gather_rows(&v, kv_rows, n);
        stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
        opts.lse = lse;
        CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &ks, &vs, &out, &opts),
                     STSA_OK);
        for (int64_t b = 0; b < B; b++)
          for (int64_t i = 0; i < N; i++)
            for (int64_t h = 0; h < H; h++) {
              const size_t r = (size_t)((b * N + i) * H + h);
              const double l = lse[(b * H + h) * N + i];
              if (l == -INFINITY)
                continue; /* this shard keeps nothing of the row */
              const double m_new = l > mx[r] ? l : mx[r];
              const double keep = exp(mx[r] - m_new), w = exp(l - m_new);
              lsum[r] = lsum[r] * keep + w;
              for (int64_t d = 0; d < D; d++)
                acc[r * (size_t)D + (size_t)d] =
                    acc[r * (size_t)D + (size_t)d] * keep +
                    w * tu_load(out.data, out.dtype, tu_offset(&out, b, i, h, d));
              mx[r] = m_new;
            }
        tu_free_tensor(&out);
        tu_free_tensor(&ks);
        tu_free_tensor(&vs);
        stsa_plan_free(plan);
      }
      double scale = 0, err = 0, lse_err = 0;
      for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < N; i++)
          for (int64_t h = 0; h < H; h++) {
            const size_t r = (size_t)((b * N + i) * H + h);
            for (int64_t d = 0; d < D; d++) {
              const double want =
                  tu_load(out_full.data, STSA_F32, tu_offset(&out_full, b, i, h, d));
              const double got =
                  lsum[r] > 0 ? acc[r * (size_t)D + (size_t)d] / lsum[r] : 0;
              scale = fabs(want) > scale ? fabs(want) : scale;
              err = fabs(got - want) > err ? fabs(got - want) : err;
            }
            const double lf = lse_full[(b * H + h) * N + i];
            const double lm = lsum[r] > 0 ? mx[r] + log(lsum[r]) : -INFINITY;
            const double le = lf == lm ? 0 : fabs(lf - lm);
            lse_err = le > lse_err || !isfinite(le) ? le : lse_err;
          }
      CHECK(err <= 1e-6 * scale && scale > 0, "%s, %d shards: merged error %g, scale %g",
            stsa_backend_name(be[bi]), shards, err, scale);
      CHECK(lse_err < 1e-5, "%s, %d shards: merged lse error %g",
            stsa_backend_name(be[bi]), shards, lse_err);
    }
    tu_free_tensor(&out_full);
  }
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_AUTO);
  stsa_plan_free(full);
  free(lse_full);
  free(lse);
  free(acc);
  free(lsum);
  free(mx);
  free(kv_rows);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  stsa_mask_free(m[0]);
  stsa_mask_free(m[1]);
}

/* ---- empty shard pairs and prepermuted keys -------------------------------------- */
/* Frame-0 queries against a frame-2 key shard under a same-frame mask: no
 * pair at all. Accepted only with ALLOW_EMPTY_ROWS, then 0 tiles, out 0 and
 * lse -inf in every backend and mode. */
static void test_empty_pair(stsa_ctx *ctx) {
  const stsa_geometry g = {3, 4, 4, 0, 0, STSA_TEXT_NONE};
  const int64_t Sq = 16, Skv = 16, H = 1, D = 64;
  int64_t q_rows[16], kv_rows[16];
  for (int64_t i = 0; i < 16; i++) {
    q_rows[i] = i;
    kv_rows[i] = 32 + i;
  }
  stsa_mask *fw;
  NEW_MASK(fw, stsa_mask_frame_window(&g, 0, &fw));
  const stsa_mask *masks[1] = {fw};
  stsa_plan_desc desc = tu_plan_desc(Sq, Skv, H, masks, &g, STSA_PLAN_DEFAULT);
  desc.q_rows = q_rows;
  desc.kv_rows = kv_rows;
  desc.kv_order = STSA_ORDER_SINK_FIRST;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_ERR_EMPTY_ROW);
  desc.flags = STSA_PLAN_ALLOW_EMPTY_ROWS;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  if (plan)
    CHECK_STATUS(stsa_plan_get_stats(plan, &st), STSA_OK);
  CHECK(st.tiles_active == 0 && st.pairs_kept == 0, "empty pair: %lld tiles, %lld pairs",
        (long long)st.tiles_active, (long long)st.pairs_kept);
  tu_rng rng = {3};
  stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, Sq, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, Skv, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, Skv, H, D, 1.0);
  stsa_backend be[TU_MAX_BACKENDS + 1];
  const int nbe = all_backends(be);
  float lse[16];
  for (int bi = 0; plan && bi < nbe; bi++) {
    stsa_ctx_set(ctx, STSA_PARAM_BACKEND, be[bi]);
    for (int mode = 0; mode < STSA_SPARSE_MODE_COUNT_; mode++) {
      stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, Sq, H, D);
      stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
      opts.lse = lse;
      opts.mode = (stsa_sparse_mode)mode;
      CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &out, &opts), STSA_OK);
      int zero = 1, minf = 1;
      for (size_t i = 0; i < (size_t)(Sq * D); i++)
        zero &= ((const float *)out.data)[i] == 0.0f;
      for (int i = 0; i < 16; i++)
        minf &= lse[i] == -INFINITY;
      CHECK(zero && minf, "empty pair, %s, %s: out 0 %d, lse -inf %d",
            stsa_backend_name(be[bi]), stsa_sparse_mode_name(opts.mode), zero, minf);
      tu_free_tensor(&out);
    }
  }
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_AUTO);
  stsa_plan_free(plan);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  stsa_mask_free(fw);
}

/* PREPERMUTED: k and v already hold the shard in the plan's kv order. Same
 * bits as the gathered call, in EXACT and in NAIVE mode (which asks the mask
 * about the true tokens, not about rows). */
static void test_prepermuted(stsa_ctx *ctx) {
  const stsa_geometry g = {3, 4, 6, 8, 8, STSA_TEXT_PREFIX}; /* N = 80 */
  const int64_t H = 2, D = 64, Skv = 50, N = tu_tokens(&g);
  int64_t kv_rows[50], tokens[50], rows[50];
  for (int64_t j = 0; j < Skv; j++)
    kv_rows[j] = 69 - j; /* [20, 70), given in descending order */
  stsa_mask *m[2];
  svg_masks(&g, m);
  const stsa_mask *masks[2] = {m[0], m[1]};
  stsa_plan_desc desc = tu_plan_desc(N, Skv, H, masks, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  desc.kv_order = STSA_ORDER_SINK_FIRST;
  desc.kv_rows = kv_rows;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  plan_kv_tokens(&g, STSA_ORDER_SINK_FIRST, kv_rows, Skv, tokens);
  for (int64_t i = 0; i < Skv; i++)
    rows[i] = 69 - tokens[i]; /* the row of kv_rows holding that token */
  tu_rng rng = {9};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, Skv, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, Skv, H, D, 1.0);
  stsa_tensor kp = gather_rows(&k, rows, Skv), vp = gather_rows(&v, rows, Skv);
  stsa_backend be[TU_MAX_BACKENDS + 1];
  const int nbe = all_backends(be);
  for (int bi = 0; plan && bi < nbe; bi++) {
    stsa_ctx_set(ctx, STSA_PARAM_BACKEND, be[bi]);
    for (int mode = 0; mode < 2; mode++) {
      stsa_tensor a = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
      stsa_tensor b = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
      stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
      opts.mode = (stsa_sparse_mode)mode;
      CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &a, &opts), STSA_OK);
      opts.flags = STSA_SPARSE_PREPERMUTED;
      CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &kp, &vp, &b, &opts), STSA_OK);
      CHECK(tu_same_bytes(&a, &b), "prepermuted kv_rows, %s, %s: differs from gathered",
            stsa_backend_name(be[bi]), stsa_sparse_mode_name(opts.mode));
      tu_free_tensor(&a);
      tu_free_tensor(&b);
    }
  }
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_AUTO);
  stsa_plan_free(plan);
  stsa_tensor *all[] = {&q, &k, &v, &kp, &vp};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tu_free_tensor(all[i]);
  stsa_mask_free(m[0]);
  stsa_mask_free(m[1]);
}

/* ---- plain sequences ------------------------------------------------------------ */
/* Without a geometry: a causal shard near the 2^40 index limit (no array of
 * that size may be allocated), a dense mask's shuffled subset, and a full
 * mask (FULL tiles only: TILE_ROUNDED has nothing to round). */
static void test_plain(stsa_ctx *ctx) {
  const int64_t top = ((int64_t)1 << 40) - 64, H = 1, D = 80;
  int64_t q_rows[5] = {top + 5, top + 63, top + 12, top, top + 40};
  int64_t kv_rows[40];
  for (int64_t j = 0; j < 40; j++)
    kv_rows[j] = top + (j * 7) % 40; /* a shuffled contiguous shard */
  stsa_mask *causal, *dense, *full;
  NEW_MASK(causal, stsa_mask_causal(0, &causal));
  NEW_MASK(full, stsa_mask_full(&full));
  uint8_t keep[50 * 50];
  tu_rng rng = {77};
  for (int i = 0; i < 50 * 50; i++)
    keep[i] = tu_rng_next(&rng) % 3 != 0;
  for (int i = 0; i < 50; i++)
    keep[i * 50 + 49] = 1; /* no empty row */
  NEW_MASK(dense, stsa_mask_dense(keep, 50, 50, &dense));
  int64_t dense_kv[30], dense_q[50];
  for (int64_t j = 0; j < 30; j++)
    dense_kv[j] = (j * 17 + 3) % 50;
  dense_kv[29] = 49;
  for (int64_t i = 0; i < 50; i++)
    dense_q[i] = i;
  struct {
    const stsa_mask *mask;
    int64_t s_q, s_kv;
    const int64_t *q_rows, *q_tok, *kv_rows;
  } cases[] = {{causal, 5, 40, q_rows, q_rows, kv_rows},
               {dense, 50, 30, NULL, dense_q, dense_kv},
               {full, 5, 40, q_rows, q_rows, kv_rows}};
  stsa_backend be[TU_MAX_BACKENDS + 1];
  const int nbe = all_backends(be);
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const stsa_mask *masks[1] = {cases[c].mask};
    stsa_plan_desc desc =
        tu_plan_desc(cases[c].s_q, cases[c].s_kv, H, masks, NULL, STSA_PLAN_DEFAULT);
    desc.q_rows = cases[c].q_rows;
    desc.kv_rows = cases[c].kv_rows;
    desc.kv_tile = 16;
    stsa_plan *plan = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
    if (!plan)
      continue;
    stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
    CHECK_STATUS(stsa_plan_get_stats(plan, &st), STSA_OK);
    CHECK((st.tiles_partial == 0) == (cases[c].mask == full),
          "plain case %zu: %lld partial tiles", c, (long long)st.tiles_partial);
    stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, desc.s_q, H, D, 1.0);
    stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, desc.s_kv, H, D, 1.0);
    stsa_tensor v = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, desc.s_kv, H, D, 1.0);
    double *ref = malloc(sizeof(double) * (size_t)(desc.s_q * D));
    double ref_lse[50];
    float lse[50];
    reference(&q, &k, &v, masks, cases[c].q_tok, cases[c].kv_rows, ref, ref_lse);
    for (int bi = 0; bi < nbe; bi++) {
      stsa_ctx_set(ctx, STSA_PARAM_BACKEND, be[bi]);
      /* TILE_ROUNDED is exact where no tile is partial */
      const int modes = st.tiles_partial ? 2 : STSA_SPARSE_MODE_COUNT_;
      for (int mode = 0; mode < modes; mode++) {
        stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, desc.s_q, H, D);
        stsa_sparse_opts opts = STSA_INIT(stsa_sparse_opts);
        opts.lse = lse;
        opts.mode = (stsa_sparse_mode)mode;
        CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &v, &out, &opts), STSA_OK);
        const double e = worst(&out, lse, ref, ref_lse);
        CHECK(e < 5e-5, "plain case %zu, %s, %s: error %g", c, stsa_backend_name(be[bi]),
              stsa_sparse_mode_name(opts.mode), e);
        tu_free_tensor(&out);
      }
    }
    stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_AUTO);
    free(ref);
    tu_free_tensor(&q);
    tu_free_tensor(&k);
    tu_free_tensor(&v);
    stsa_plan_free(plan);
  }
  /* a dense mask must cover every entry of kv_rows */
  const stsa_mask *masks[1] = {dense};
  int64_t beyond[2] = {3, 50};
  stsa_plan_desc desc = tu_plan_desc(50, 2, H, masks, NULL, STSA_PLAN_DEFAULT);
  desc.kv_rows = beyond;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_ERR_BAD_MASK);
  stsa_mask_free(causal);
  stsa_mask_free(dense);
  stsa_mask_free(full);
}

/* ---- errors, stats and the old layout --------------------------------------------- */
static void test_rejected(stsa_ctx *ctx) {
  const stsa_geometry g = {2, 4, 4, 0, 0, STSA_TEXT_NONE}; /* N = 32 */
  const int64_t N = 32, H = 2, D = 64;
  stsa_mask *m;
  NEW_MASK(m, stsa_mask_frame_window(&g, 1, &m));
  const stsa_mask *masks[2] = {m, m};
  struct {
    int64_t rows[4];
    int64_t s_kv;
    stsa_status st;
    const char *msg;
  } bad[] = {
      {{4, 9, 4, 5}, 4, STSA_ERR_BAD_PARAM, "kv_rows[2] = 4 repeats kv_rows[0]"},
      {{4, 9, 32, 5}, 4, STSA_ERR_BAD_PARAM, "kv_rows[2] = 32"},
      {{-1, 9, 3, 5}, 4, STSA_ERR_BAD_PARAM, "kv_rows[0] = -1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    stsa_plan_desc desc = tu_plan_desc(N, bad[i].s_kv, H, masks, &g, STSA_PLAN_DEFAULT);
    desc.kv_rows = bad[i].rows;
    desc.kv_order = STSA_ORDER_POSITION_MAJOR;
    stsa_plan *plan = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), bad[i].st);
    CHECK(!plan && strstr(stsa_ctx_last_error(ctx), bad[i].msg),
          "bad kv_rows %zu: message '%s' lacks '%s'", i, stsa_ctx_last_error(ctx),
          bad[i].msg);
  }
  int64_t all[33];
  for (int64_t j = 0; j < 33; j++)
    all[j] = j;
  stsa_plan_desc desc = tu_plan_desc(N, 33, H, masks, &g, STSA_PLAN_DEFAULT);
  desc.kv_rows = all;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_ERR_BAD_SHAPE);

  /* a good plan over 20 keys: k of the wrong row count leaves out alone */
  desc.s_kv = 20;
  desc.kv_rows = all + 6;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  tu_rng rng = {1};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  if (plan) {
    CHECK_STATUS(stsa_sparse_attention(ctx, plan, &q, &k, &k, &out, NULL),
                 STSA_ERR_BAD_SHAPE);
    CHECK(tu_is_sentinel(&out) && strstr(stsa_ctx_last_error(ctx), "S_kv = 20"),
          "k of all N rows: '%s', output untouched %d", stsa_ctx_last_error(ctx),
          tu_is_sentinel(&out));

    /* per-head stats add up to the plan's */
    stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
    CHECK_STATUS(stsa_plan_get_stats(plan, &st), STSA_OK);
    int64_t active = 0, partial = 0, pairs = 0;
    for (int64_t h = 0; h < H; h++) {
      int64_t a, p, n;
      CHECK_STATUS(stsa_plan_head_stats(plan, h, &a, &p, &n), STSA_OK);
      active += a;
      partial += p;
      pairs += n;
    }
    CHECK(active == st.tiles_active && partial == st.tiles_partial &&
              pairs == st.pairs_kept && pairs > 0,
          "head stats %lld %lld %lld vs %lld %lld %lld", (long long)active,
          (long long)partial, (long long)pairs, (long long)st.tiles_active,
          (long long)st.tiles_partial, (long long)st.pairs_kept);
    CHECK_STATUS(stsa_plan_head_stats(plan, 1, NULL, NULL, NULL), STSA_OK);
    CHECK_STATUS(stsa_plan_head_stats(plan, H, NULL, NULL, NULL), STSA_ERR_BAD_PARAM);
    CHECK_STATUS(stsa_plan_head_stats(plan, -1, NULL, NULL, NULL), STSA_ERR_BAD_PARAM);
  }
  CHECK_STATUS(stsa_plan_head_stats(NULL, 0, NULL, NULL, NULL), STSA_ERR_NULL_ARG);
  stsa_plan_free(plan);

  /* a caller of the first layout (no kv_rows field): the bytes past its
   * size are never read, so this is a plan over every key */
  desc.size = offsetof(stsa_plan_desc, kv_rows);
  desc.s_kv = N;
  plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  if (plan)
    CHECK_STATUS(stsa_plan_get_stats(plan, &st), STSA_OK);
  CHECK(st.pairs_total == H * N * N, "first layout: %lld pairs in all",
        (long long)st.pairs_total);
  stsa_plan_free(plan);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&out);
  stsa_mask_free(m);
}

int main(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  if (!ctx)
    return tu_finish("test_plan_kv_rows");
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  test_video_shards(ctx);
  test_lse_merge(ctx);
  test_empty_pair(ctx);
  test_prepermuted(ctx);
  test_plain(ctx);
  test_rejected(ctx);
  stsa_ctx_free(ctx);
  return tu_finish("test_plan_kv_rows");
}
