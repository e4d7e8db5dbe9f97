/*
 * workload.c — the built-in Sparse VideoGen workload: deterministic Q, K, V
 * whose attention looks like a video DiT's, with a known kind per head.
 *
 * Model of one head (constants and their reasons are below):
 *
 *   video token at frame f, row y, column x:
 *     s = RoPE_t(f) a_t u_t  (+)  RoPE_h(y) a_h u_h  (+)  RoPE_w(x) a_w u_w
 *     q = s + g + SIGMA_VIDEO z          k = s + [f == 0] g + SIGMA_VIDEO z'
 *     v = V_SMOOTH (RoPE_t(f) e_t (+) RoPE_h(y) e_h (+) RoPE_w(x) e_w) + V_NOISE z''
 *   text token: q, k, v = content noise only (SIGMA_TEXT z, SIGMA_TEXT z', z'')
 *
 * The head dim is split as Wan splits it: time | height | width bands with
 * h = w = 2*(D'/6) and t = D' - h - w, D' = D rounded down to even (128 ->
 * 44/42/42, 64 -> 24/20/20); an odd D keeps its last dim as plain content.
 * RoPE turns pair k of a band by pos * theta_k, theta_k = ROPE_BASE^(-2k/len).
 *
 * Because q and k share the unit vectors u_b, the score of two video tokens
 * depends only on their distance in each band:
 *   (1/sqrt(D)) s_i . s_j = sum_b kappa_b K_b(delta_b),
 *   K_b(delta) = sum_k w_k cos(theta_k delta),   K_b(0) = 1,
 * with a_b = sqrt(kappa_b sqrt(D)) and u_b putting the same weight w_k on each
 * pair it uses (a random phase inside each pair, which the score ignores):
 * equal weights give every head of a kind the same, seed-independent fall-off.
 * With log-spaced frequencies K_b(delta) ~ 1 - ln|delta| / ln(ROPE_BASE), so
 * the mass per unit distance falls like |delta|^-(kappa_b / ln ROPE_BASE): a
 * large kappa_t makes a spatial head, large kappa_h, kappa_w a temporal one.
 *
 * The sink g lives only in dims no u_b touches (the slowest pair of each band,
 * and an odd last dim), so it is orthogonal to every rotated position vector:
 * it adds exactly SINK_KAPPA to the score of each frame-0 key and nothing
 * position-dependent elsewhere.
 *
 * Every random number is a counter-based hash of (seed, stream, batch, head,
 * token, dim), so the values do not depend on layout, dtype or thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "core/error.h"
#include "core/sized.h"
#include "core/tensor.h"
#include "stsa.h"

/* Wan uses 10000, which spreads each band's frequencies over four decades;
 * video extents (<= ~85 positions) only see the top two, the rest add a
 * constant to every score. Base 100 spans 1 .. ~1/80 rad per position, so all
 * pairs shape the fall-off over 10-30 frames and 30-80 rows or columns, and a
 * given fall-off needs half the logit range that base 10000 would. */
#define ROPE_BASE 100.0

/* Per-kind band strengths kappa (score units at distance 0, see above).
 * ln(100) = 4.6, so kappa 7 gives a |df|^-1.5 frame fall-off (most mass within
 * +-2 frames), kappa 11 gives |d|^-2.4 per spatial axis (most mass within +-3
 * rows and columns); kappa <= 1 is a mild preference only. Measured with
 * F 5-21, Hp 8-45, Wp 8-80, D 64/80/128 (sampled rows, double softmax):
 * spatial 87-96% of the mass within +-2 frames; temporal 97-99% within
 * |dy|, |dx| <= 3 with frames as flat as uniform; mixed 60-89% and 51-90%. */
typedef struct kind_kappa {
  double t, h, w;
} kind_kappa;
static const kind_kappa KIND_KAPPA[STSA_HEAD_KIND_COUNT_] = {
    [STSA_HEAD_SPATIAL] = {7.0, 1.0, 1.0},
    [STSA_HEAD_TEMPORAL] = {0.5, 11.0, 11.0},
    [STSA_HEAD_MIXED] = {3.5, 5.0, 5.0},
};

/* Score bonus of frame-0 keys: e^1.5 = 4.5x the weight of a like key elsewhere. */
#define SINK_KAPPA 1.5
/* Content noise of video q/k: score noise of about 0.5, so rows are not
 * smooth textbook kernels, yet far below the position terms. */
#define SIGMA_VIDEO 0.3f
/* Text q/k: unit content, about the per-element size of video q/k (0.9-1.7). */
#define SIGMA_TEXT 1.0f
/* V: a smooth position field plus noise, unit variance per element, so that
 * attention outputs carry signal rather than averaged-away noise. */
#define V_SMOOTH 0.6f
#define V_NOISE 0.8f

/* HunyuanVideo's head statistics (SVG): 29.2% spatial, 4.1% neither. */
#define DEFAULT_SPATIAL_PERMILLE 292
#define DEFAULT_MIXED_PERMILLE 41

/* Same cap as the mask module: every index product stays far from overflow. */
#define MAX_TOKENS ((int64_t)1 << 40)

enum { STREAM_Q = 1, STREAM_K, STREAM_V, STREAM_PHASE, STREAM_VDIR, STREAM_SINK };

const char *stsa_head_kind_name(stsa_head_kind kind) {
  static const char *const names[STSA_HEAD_KIND_COUNT_] = {
      [STSA_HEAD_SPATIAL] = "spatial",
      [STSA_HEAD_TEMPORAL] = "temporal",
      [STSA_HEAD_MIXED] = "mixed",
  };
  return (unsigned)kind < STSA_HEAD_KIND_COUNT_ ? names[kind] : "unknown";
}

/* ---- counter-based random numbers ---------------------------------------- */
#define GOLDEN 0x9e3779b97f4a7c15ull
#define TWO_PI 6.283185307179586

static inline uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Key of one (stream, batch, head) sequence; elements are mix64(key + G*i). */
static uint64_t stream_key(uint64_t seed, int stream, int64_t b, int64_t h) {
  uint64_t k = mix64(seed + GOLDEN * (uint64_t)stream);
  k = mix64(k + GOLDEN * ((uint64_t)b + 1));
  return mix64(k + GOLDEN * ((uint64_t)h + 1));
}

/* Approximate N(0,1) from one hash: the sum of four 16-bit uniforms
 * (Irwin-Hall, bounded by +-3.46) costs no libm call. */
static inline float gauss_bits(uint64_t r) {
  uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
               (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
  return ((float)s - 131070.0f) * (1.0f / 37837.227f);
}

static inline float noise(uint64_t key, uint64_t idx) {
  return gauss_bits(mix64(key + GOLDEN * (idx + 1)));
}

static double unit_interval(uint64_t key, uint64_t idx) {
  return (double)(mix64(key + GOLDEN * (idx + 1)) >> 11) * 0x1.0p-53;
}

/* ---- validation -------------------------------------------------------------- */
static stsa_status check_desc(const stsa_workload_desc *d, int64_t *n_out) {
  stsa_errbuf err; /* this entry point has no context for a message */
  STSA_TRY(STSA_SIZED_CHECK(d, stsa_workload_desc, &err));
  const stsa_geometry *g = &d->geometry;
  if (g->frames < 1 || g->height < 1 || g->width < 1 || g->text < 0)
    return STSA_ERR_BAD_SHAPE; /* a workload needs video */
  if (g->text_real < 0 || g->text_real > g->text)
    return STSA_ERR_BAD_PARAM;
  if (g->text_pos != STSA_TEXT_NONE && g->text_pos != STSA_TEXT_PREFIX &&
      g->text_pos != STSA_TEXT_SUFFIX)
    return STSA_ERR_BAD_PARAM;
  if (g->text > 0 && g->text_pos == STSA_TEXT_NONE)
    return STSA_ERR_BAD_PARAM;
  /* Divisions, so the check itself cannot overflow. */
  int64_t room = MAX_TOKENS - g->text;
  if (room < 0 || g->height > room / g->frames || g->width > room / g->frames / g->height)
    return STSA_ERR_BAD_SHAPE;
  if (d->batch < 1 || d->heads < 1 || d->head_dim < 1)
    return STSA_ERR_BAD_SHAPE;
  *n_out = g->text + g->frames * g->height * g->width;
  return STSA_OK;
}

/* After the output tensors passed: heads is then bounded by their shape. */
static stsa_status check_kinds(const stsa_workload_desc *d) {
  if (d->kinds)
    for (int64_t h = 0; h < d->heads; h++)
      if ((unsigned)d->kinds[h] >= STSA_HEAD_KIND_COUNT_)
        return STSA_ERR_BAD_PARAM;
  return STSA_OK;
}

static stsa_status check_out(const stsa_tensor *t, const stsa_workload_desc *d,
                             int64_t n) {
  STSA_TRY(stsa_check_tensor(t, "workload output", NULL));
  if (t->shape[0] != d->batch || t->shape[1] != n || t->shape[2] != d->heads ||
      t->shape[3] != d->head_dim)
    return STSA_ERR_BAD_SHAPE;
  return STSA_OK;
}

/* ---- head kinds ------------------------------------------------------------ */
/* Default mix: round(29.2% H) spatial and, for H >= 12, max(1, round(4.1% H))
 * mixed heads, the rest temporal (H = 1: temporal; H = 2: temporal, spatial).
 * Each minority kind is spread evenly over the heads (Bresenham), so every
 * range of heads sees the mix; the rule depends on H only, never on the seed. */
static void default_kinds(int64_t H, stsa_head_kind *kinds) {
  int64_t ns = (H * DEFAULT_SPATIAL_PERMILLE + 500) / 1000;
  int64_t nm = H >= 12 ? (H * DEFAULT_MIXED_PERMILLE + 500) / 1000 : 0;
  if (H >= 12 && nm < 1)
    nm = 1;
  int64_t rest = H - ns, acc_s = 0, acc_m = 0;
  for (int64_t h = 0; h < H; h++) {
    acc_s += ns;
    if (acc_s >= H) {
      acc_s -= H;
      kinds[h] = STSA_HEAD_SPATIAL;
      continue;
    }
    acc_m += nm;
    if (acc_m >= rest) {
      acc_m -= rest;
      kinds[h] = STSA_HEAD_MIXED;
    } else {
      kinds[h] = STSA_HEAD_TEMPORAL;
    }
  }
}

/* ---- per-head position tables --------------------------------------------- */
/* Everything that depends on a head and one coordinate, so the token loop is
 * table reads plus noise: qk[b] holds a_b RoPE_b(pos) u_b and v[b] the smooth
 * V field, both [H][extent_b][len_b]; sink holds g, [H][D]. */
typedef struct tables {
  int64_t off[3], len[3], ext[3];
  float *qk[3], *v[3], *sink;
  float *block;
} tables;

static void band_split(int64_t D, int64_t len[3], int64_t off[3]) {
  int64_t even = D & ~(int64_t)1;
  len[1] = len[2] = 2 * (even / 6);
  len[0] = even - len[1] - len[2];
  off[0] = 0;
  off[1] = len[0];
  off[2] = len[0] + len[1];
}

/* Fills the tables of head h; `sink_dims` flags the dims g may use. */
static void build_head(tables *tb, const stsa_workload_desc *d, int64_t h,
                       stsa_head_kind kind, unsigned char *sink_dims) {
  const int64_t D = d->head_dim;
  const double kappa[3] = {KIND_KAPPA[kind].t, KIND_KAPPA[kind].h, KIND_KAPPA[kind].w};
  const uint64_t kphase = stream_key(d->seed, STREAM_PHASE, 0, h);
  const uint64_t kvdir = stream_key(d->seed, STREAM_VDIR, 0, h);
  const uint64_t ksink = stream_key(d->seed, STREAM_SINK, 0, h);
  memset(sink_dims, 0, (size_t)D);
  if (D & 1)
    sink_dims[D - 1] = 1;
  for (int b = 0; b < 3; b++) {
    int64_t pairs = tb->len[b] / 2;
    /* The slowest pair is left to the sink when the band has others. */
    int64_t used = pairs >= 2 ? pairs - 1 : pairs;
    if (pairs >= 2)
      sink_dims[tb->off[b] + 2 * pairs - 2] = sink_dims[tb->off[b] + 2 * pairs - 1] = 1;
    double amp = used > 0 ? sqrt(kappa[b] * sqrt((double)D) / (double)used) : 0.0;
    for (int64_t k = 0; k < pairs; k++) {
      double theta = pow(ROPE_BASE, -2.0 * (double)k / (double)tb->len[b]);
      uint64_t dim = (uint64_t)(tb->off[b] + 2 * k);
      double phase = TWO_PI * unit_interval(kphase, dim);
      double u0 = k < used ? amp * cos(phase) : 0.0,
             u1 = k < used ? amp * sin(phase) : 0.0;
      double e0 = noise(kvdir, dim), e1 = noise(kvdir, dim + 1);
      for (int64_t p = 0; p < tb->ext[b]; p++) {
        double c = cos((double)p * theta), s = sin((double)p * theta);
        int64_t at = (h * tb->ext[b] + p) * tb->len[b] + 2 * k;
        tb->qk[b][at] = (float)(u0 * c - u1 * s);
        tb->qk[b][at + 1] = (float)(u0 * s + u1 * c);
        tb->v[b][at] = (float)(e0 * c - e1 * s);
        tb->v[b][at + 1] = (float)(e0 * s + e1 * c);
      }
    }
  }
  /* g: a random direction over the free dims (all dims if there are none,
   * which only happens for D < 8), scaled so that g . g / sqrt(D) = SINK_KAPPA. */
  int64_t nfree = 0;
  for (int64_t i = 0; i < D; i++)
    nfree += sink_dims[i];
  float *g = tb->sink + h * D;
  double norm2 = 0;
  for (int64_t i = 0; i < D; i++) {
    g[i] = (nfree == 0 || sink_dims[i]) ? noise(ksink, (uint64_t)i) : 0.0f;
    norm2 += (double)g[i] * g[i];
  }
  double want = sqrt(SINK_KAPPA * sqrt((double)D));
  double scale = norm2 > 0 ? want / sqrt(norm2) : 0.0;
  for (int64_t i = 0; i < D; i++)
    g[i] = (float)(g[i] * scale);
}

static stsa_status build_tables(tables *tb, const stsa_workload_desc *d,
                                const stsa_head_kind *kinds) {
  const int64_t H = d->heads, D = d->head_dim;
  band_split(D, tb->len, tb->off);
  tb->ext[0] = d->geometry.frames;
  tb->ext[1] = d->geometry.height;
  tb->ext[2] = d->geometry.width;
  /* Sizes are bounded by the validated output tensors (<= 2^52 bytes). */
  size_t per[3], total = (size_t)(H * D);
  for (int b = 0; b < 3; b++) {
    per[b] = (size_t)(H * tb->ext[b] * tb->len[b]);
    total += 2 * per[b];
  }
  tb->block = malloc(total * sizeof(float));
  unsigned char *sink_dims = malloc((size_t)D);
  if (!tb->block || !sink_dims) {
    free(tb->block);
    free(sink_dims);
    return STSA_ERR_OUT_OF_MEMORY;
  }
  float *p = tb->block;
  for (int b = 0; b < 3; b++) {
    tb->qk[b] = p;
    tb->v[b] = p + per[b];
    p += 2 * per[b];
  }
  tb->sink = p;
  for (int64_t h = 0; h < H; h++)
    build_head(tb, d, h, kinds[h], sink_dims);
  free(sink_dims);
  return STSA_OK;
}

/* ---- the token loop ---------------------------------------------------------- */
static void generate(const tables *tb, const stsa_workload_desc *d, int64_t n,
                     const stsa_tensor *q, const stsa_tensor *k, const stsa_tensor *v) {
  const stsa_geometry *g = &d->geometry;
  const int64_t H = d->heads, D = d->head_dim;
  const int64_t P = g->height * g->width, L = g->frames * P;
  const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  const int64_t rows = n * H;
  for (int64_t b = 0; b < d->batch; b++) {
#pragma omp parallel for schedule(static) if (rows * D > (1 << 16))
    for (int64_t s = 0; s < n; s++) {
      float qr[STSA_MAX_HEAD_DIM], kr[STSA_MAX_HEAD_DIM], vr[STSA_MAX_HEAD_DIM];
      const int64_t i = s - v0;
      const int video = i >= 0 && i < L;
      const int64_t f = video ? i / P : 0, y = video ? i % P / g->width : 0,
                    x = video ? i % g->width : 0;
      const int64_t pos[3] = {f, y, x};
      for (int64_t h = 0; h < H; h++) {
        const uint64_t kq = stream_key(d->seed, STREAM_Q, b, h);
        const uint64_t kk = stream_key(d->seed, STREAM_K, b, h);
        const uint64_t kv = stream_key(d->seed, STREAM_V, b, h);
        const uint64_t idx0 = (uint64_t)(s * D);
        if (!video) {
          for (int64_t e = 0; e < D; e++) {
            qr[e] = SIGMA_TEXT * noise(kq, idx0 + (uint64_t)e);
            kr[e] = SIGMA_TEXT * noise(kk, idx0 + (uint64_t)e);
            vr[e] = noise(kv, idx0 + (uint64_t)e);
          }
        } else {
          /* Position terms first (three table rows), then sink and noise. */
          for (int bd = 0; bd < 3; bd++) {
            const int64_t at = (h * tb->ext[bd] + pos[bd]) * tb->len[bd];
            memcpy(qr + tb->off[bd], tb->qk[bd] + at,
                   (size_t)tb->len[bd] * sizeof(float));
            memcpy(vr + tb->off[bd], tb->v[bd] + at, (size_t)tb->len[bd] * sizeof(float));
          }
          if (D & 1)
            qr[D - 1] = vr[D - 1] = 0.0f;
          const float *sk = tb->sink + h * D;
          const float ksink = f == 0 ? 1.0f : 0.0f;
          for (int64_t e = 0; e < D; e++) {
            const float base = qr[e];
            kr[e] = base + ksink * sk[e] + SIGMA_VIDEO * noise(kk, idx0 + (uint64_t)e);
            qr[e] = base + sk[e] + SIGMA_VIDEO * noise(kq, idx0 + (uint64_t)e);
            vr[e] = V_SMOOTH * vr[e] + V_NOISE * noise(kv, idx0 + (uint64_t)e);
          }
        }
        stsa_store_row(qr, D, stsa_tensor_row(q, b, s, h), q->dtype, q->stride[3]);
        stsa_store_row(kr, D, stsa_tensor_row(k, b, s, h), k->dtype, k->stride[3]);
        stsa_store_row(vr, D, stsa_tensor_row(v, b, s, h), v->dtype, v->stride[3]);
      }
    }
  }
}

stsa_status stsa_workload_generate(const stsa_workload_desc *desc, const stsa_tensor *q,
                                   const stsa_tensor *k, const stsa_tensor *v,
                                   stsa_head_kind *kinds_out) {
  if (!desc || !q || !k || !v)
    return STSA_ERR_NULL_ARG;
  int64_t n = 0;
  STSA_TRY(check_desc(desc, &n));
  STSA_TRY(check_out(q, desc, n));
  STSA_TRY(check_out(k, desc, n));
  STSA_TRY(check_out(v, desc, n));
  /* q, k and v may interleave in one buffer (fused QKV): only outputs that
   * share elements are refused */
  if (stsa_tensors_share_memory(q, k) || stsa_tensors_share_memory(q, v) ||
      stsa_tensors_share_memory(k, v))
    return STSA_ERR_OVERLAP;
  STSA_TRY(check_kinds(desc));
  stsa_head_kind *kinds = malloc((size_t)desc->heads * sizeof *kinds);
  if (!kinds)
    return STSA_ERR_OUT_OF_MEMORY;
  if (desc->kinds)
    memcpy(kinds, desc->kinds, (size_t)desc->heads * sizeof *kinds);
  else
    default_kinds(desc->heads, kinds);
  tables tb;
  stsa_status st = build_tables(&tb, desc, kinds);
  if (st == STSA_OK) {
    generate(&tb, desc, n, q, k, v);
    free(tb.block);
    if (kinds_out)
      memcpy(kinds_out, kinds, (size_t)desc->heads * sizeof *kinds);
  }
  free(kinds);
  return st;
}
