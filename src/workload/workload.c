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
 * Semantic heads (SVG2's case) attend by object identity instead. Each batch
 * entry has a scene: a few discs (OBJECTS) that move in straight lines across
 * the frames, wrapping around the frame edges, over a static partition of the
 * frame into BACKGROUND regions (Voronoi cells of fixed seeds). A video token
 * belongs to the topmost object covering it, else to its background region
 * (token_identity is the one place that decides). Then
 *     q = s' + e_id + g + SIGMA_VIDEO z      k = s' + e_id + [f == 0] g + ...
 *     v = SEM_V_ID c_id + SEM_V_TIME (cos(w_id f + p_id) a_id
 *                                     + sin(w_id f + p_id) b_id) + V_NOISE z''
 * where s' is the RoPE term above at weak strengths, on every other pair of
 * each band only, and the identity vectors e_id live on the pairs s' leaves
 * out: they are orthogonal to every position vector and to each other (as
 * long as there are no more identities than identity dims), so a key of the
 * query's identity gets exactly SEM_KAPPA more score and any other key none.
 * c_id, a_id, b_id are unit Gaussian directions per identity: c_id is what
 * the identity is (constant), a_id/b_id how it looks in frame f (pose,
 * lighting: a smooth turn of w_id radians per frame). A semantic head thus
 * returns the identity averaged over all frames, which is what a video DiT's
 * object-tracking heads do and what SVG cannot reproduce:
 *  - its frame window holds the identity's tokens of the nearby frames only
 *    (every frame holds some), so it returns the near-frame appearance: the
 *    +-1-frame average differs from the all-frame one by 55-58% (rms, test);
 *  - its position band holds a background region in every frame but an
 *    object only while it passes: objects move 3+ tokens per frame.
 * Content clustering (SVG2) finds the identity's keys in every frame.
 * Measured with `stsa plot pareto` (8x24x32, D 64, 2 heads per kind; rel L2
 * against dense at the realised density in brackets):
 *      semantic   SVG 0.382 (0.234)  0.349 (0.191)  0.189 (0.278)
 *                 SVG2 0.031 (0.152) 0.028 (0.210)  0.024 (0.311)
 *                 tile oracle 0.367 (0.104) 0.215 (0.208) 0.149 (0.302)
 * (13x30x40: SVG 0.222 (0.191), 0.148 (0.283); SVG2 0.027 (0.204), 0.023
 * (0.303); D 128 alike). Spatial, temporal and mixed heads are untouched
 * by all this (bitwise; test_workload holds their hashes).
 *
 * The generator is libstsa_io's, a client of libstsa's public API: it writes
 * through stsa_tensor_copy (workload/outputs.h).
 *
 * Every random number is a counter-based hash of (seed, stream, batch, head,
 * token, dim), so the values do not depend on layout, dtype or thread count.
 */
#define STSA_EXPERIMENTAL /* defines stsa_workload_generate */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_error.h"
#include "stsa.h"
#include "stsa_io.h"
#include "workload/outputs.h"

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
    /* A trace of locality, as real semantic heads have, far below the
     * identity term (at most 0.9 score units in all): a same-identity key
     * anywhere outweighs an adjacent key of another identity by at least
     * e^(SEM_KAPPA - 0.9), and the mass off the identity stays 3-5%, which
     * content clustering cannot recover at low density (0.7 left 7-21%). */
    [STSA_HEAD_SEMANTIC] = {0.3, 0.3, 0.3},
};

/* Score bonus of a same-identity key in a semantic head. There are 12-28
 * identities (23 at 24x32), each about 1/ids of the video tokens (an object
 * pi r^2 of a frame's Hp*Wp with the radius below, a background cell a 16th
 * to a 6th of what objects leave free), and the other keys weigh ~1.3 on
 * average (the weak position terms, the sink), so 95% of a row's mass on its
 * identity needs e^kappa >~ 25 ids. Measured (sampled rows, double softmax;
 * F 13-21, Hp x Wp 20x30 .. 30x52, D 64/128): 96.8-97.2% of the mass on
 * same-identity keys. At density 0.25 SVG's spatial mask (frame window,
 * sink, text) holds 40-48% of a semantic row's mass against 81-90% of a
 * spatial head's, and the temporal mask (position band) 52-65% against
 * 93.5-99% of a temporal head's. kappa 6.0 (95%) left SVG2 at 0.05-0.10 rel
 * L2 per head and one in four k-means runs mixing identities (0.19); 6.5
 * gives 0.025-0.030 over seeds. */
#define SEM_KAPPA 6.5
/* v of a semantic head: identity and frame-varying appearance, with
 * SEM_V_ID^2 + SEM_V_TIME^2 = V_SMOOTH^2, so v keeps unit variance per
 * element. The identity dominates (what the object is matters more than how
 * it looks in one frame); the appearance part is large enough that a +-1
 * frame average is not the all-frame one (55-58% apart). */
#define SEM_V_ID 0.5f
#define SEM_V_TIME 0.33f
/* Appearance turn w_id per latent frame (4 video frames in Wan and
 * HunyuanVideo): a period of 6-12 latent frames, 1-2 s at 24 fps, so a
 * 21-frame video sees it change 2-3 times and an 8-frame one about once. */
#define SEM_OMEGA_MIN 0.5
#define SEM_OMEGA_MAX 1.0
/* Scene of a batch entry. Objects: 6 + P/512 of them, at most 12 (6 at
 * 12x16, 12 at Wan 720p's 45x80), radius 10-18% of the shorter frame side
 * (>= 1.5 tokens), speed 12-20% of it per frame and at least 3 tokens (about
 * its radius: its footprint in the next frame overlaps the last one by less
 * than half; 48 px per latent frame at 16 px per token is brisk but common
 * motion), so a position band loses an object within a frame and the object
 * crosses the frame in 5-8 frames. Background: P/32 Voronoi cells, 4 to 16. */
#define SEM_SPEED_MIN 0.12
#define SEM_SPEED_MAX 0.20
#define SEM_SPEED_TOKENS 3.0
#define SEM_MAX_OBJECTS 12
#define SEM_MAX_REGIONS 16
#define SEM_MAX_IDS (SEM_MAX_OBJECTS + SEM_MAX_REGIONS)

/* Score bonus of frame-0 keys: e^1.5 = 4.5x the weight of a like key elsewhere. */
#define SINK_KAPPA 1.5
/* Content noise of video q/k: score noise of about 0.5, so rows are not
 * smooth textbook kernels, yet far below the position terms. */
#define SIGMA_VIDEO 0.3f
/* Text q/k: unit content, about the per-element size of video q/k (0.9-1.7). */
#define SIGMA_TEXT 1.0f
/* V: a smooth position field (semantic heads: identity and appearance, see
 * SEM_V_ID) plus noise, unit variance per element, so that attention outputs
 * carry signal rather than averaged-away noise. */
#define V_SMOOTH 0.6f
#define V_NOISE 0.8f

/* HunyuanVideo's head statistics (SVG): 29.2% spatial, 4.1% neither. */
#define DEFAULT_SPATIAL_PERMILLE 292
#define DEFAULT_MIXED_PERMILLE 41

/* Same cap as the mask module: every index product stays far from overflow. */
#define MAX_TOKENS ((int64_t)1 << 40)

enum {
  STREAM_Q = 1,
  STREAM_K,
  STREAM_V,
  STREAM_PHASE,
  STREAM_VDIR,
  STREAM_SINK,
  STREAM_SCENE,
  STREAM_IDENT,
  STREAM_IDENT_V,
  STREAM_IDENT_VT, /* the time-varying part of a semantic head's v */
  STREAM_IDENT_W   /* its angular speed and phase */
};

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
/* The most the struct may have grown in a caller's newer header (bytes). */
#define MAX_GROWTH 1024

/* stsa.h's "Extensible structs": a caller's desc is at least this library's
 * (its only layout so far), and a newer one sets none of the fields this
 * library lacks. */
static stsa_status check_size(const stsa_workload_desc *d) {
  const size_t known = sizeof *d;
  if (d->size < known || d->size - known > MAX_GROWTH)
    return STSA_ERR_BAD_PARAM;
  const unsigned char *extra = (const unsigned char *)d + known;
  for (size_t i = 0; i < d->size - known; i++)
    if (extra[i] != 0)
      return STSA_ERR_UNSUPPORTED;
  return STSA_OK;
}

static stsa_status check_desc(const stsa_workload_desc *d, int64_t *n_out) {
  STSA_IO_TRY(check_size(d));
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
  return wl_check_output(t, d->batch, n, d->heads, d->head_dim);
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

/* ---- scenes of semantic heads ---------------------------------------------- */
/* One batch entry's objects and background seeds, in token units; the counts
 * depend on the geometry only, the placement on (seed, batch). */
typedef struct scene {
  int objects, regions;
  int64_t height, width;
  double cy[SEM_MAX_OBJECTS], cx[SEM_MAX_OBJECTS]; /* centre in frame 0 */
  double vy[SEM_MAX_OBJECTS], vx[SEM_MAX_OBJECTS]; /* tokens per frame */
  double r2[SEM_MAX_OBJECTS];                      /* squared radius */
  double sy[SEM_MAX_REGIONS], sx[SEM_MAX_REGIONS]; /* Voronoi seeds */
} scene;

static int scene_ids(const stsa_geometry *g, int *objects, int *regions) {
  const int64_t P = g->height * g->width;
  const int64_t no = 6 + P / 512, nr = P / 32;
  *objects = no > SEM_MAX_OBJECTS ? SEM_MAX_OBJECTS : (int)no;
  *regions = nr < 4 ? 4 : nr > SEM_MAX_REGIONS ? SEM_MAX_REGIONS : (int)nr;
  return *objects + *regions;
}

static void build_scene(scene *sc, const stsa_geometry *g, uint64_t seed, int64_t b) {
  const uint64_t key = stream_key(seed, STREAM_SCENE, b, 0);
  const double Hp = (double)g->height, Wp = (double)g->width;
  const double side = Hp < Wp ? Hp : Wp;
  scene_ids(g, &sc->objects, &sc->regions);
  sc->height = g->height;
  sc->width = g->width;
  for (int o = 0; o < sc->objects; o++) {
    const uint64_t at = 8 * (uint64_t)o;
    double r = side * (0.10 + 0.08 * unit_interval(key, at + 2));
    double speed = side * (SEM_SPEED_MIN +
                           (SEM_SPEED_MAX - SEM_SPEED_MIN) * unit_interval(key, at + 3));
    double dir = TWO_PI * unit_interval(key, at + 4);
    r = r < 1.5 ? 1.5 : r;
    speed = speed < SEM_SPEED_TOKENS ? SEM_SPEED_TOKENS : speed;
    sc->cy[o] = Hp * unit_interval(key, at);
    sc->cx[o] = Wp * unit_interval(key, at + 1);
    sc->vy[o] = speed * sin(dir);
    sc->vx[o] = speed * cos(dir);
    sc->r2[o] = r * r;
  }
  for (int c = 0; c < sc->regions; c++) {
    const uint64_t at = 8 * (uint64_t)(SEM_MAX_OBJECTS + c);
    sc->sy[c] = Hp * unit_interval(key, at);
    sc->sx[c] = Wp * unit_interval(key, at + 1);
  }
}

/* Distance from a to b along a wrapping axis of length n, in [0, n/2]. */
static double wrap_dist(double a, double b, double n) {
  double d = fmod(fabs(a - b), n);
  return d > n - d ? n - d : d;
}

/* The identity of video token (f, y, x): the highest-numbered object whose
 * disc (centre moved f frames, wrapped onto the frame) covers the token's
 * centre, else objects + its Voronoi cell. The only place that decides it:
 * everything else reads identities through the vectors indexed by it. */
static int token_identity(const scene *sc, int64_t f, int64_t y, int64_t x) {
  const double Hp = (double)sc->height, Wp = (double)sc->width;
  const double py = (double)y + 0.5, px = (double)x + 0.5;
  for (int o = sc->objects - 1; o >= 0; o--) {
    double dy = wrap_dist(py, sc->cy[o] + (double)f * sc->vy[o], Hp);
    double dx = wrap_dist(px, sc->cx[o] + (double)f * sc->vx[o], Wp);
    if (dy * dy + dx * dx <= sc->r2[o])
      return o;
  }
  int best = 0;
  double best_d2 = INFINITY;
  for (int c = 0; c < sc->regions; c++) {
    double dy = py - sc->sy[c], dx = px - sc->sx[c], d2 = dy * dy + dx * dx;
    if (d2 < best_d2) {
      best_d2 = d2;
      best = c;
    }
  }
  return sc->objects + best;
}

/* ---- per-head position tables --------------------------------------------- */
/* Everything that depends on a head and one coordinate, so the token loop is
 * table reads plus noise: qk[b] holds a_b RoPE_b(pos) u_b and v[b] the smooth
 * V field, both [H][extent_b][len_b]; sink holds g, [H][D]; ident holds
 * e_id of semantic heads, [H][ids][D], ident_v their v directions c_id, a_id,
 * b_id, [H][ids][3][D], and ident_w the angular speed and phase of a_id/b_id,
 * [H][ids][2] (ids = 0 when no head is semantic). */
typedef struct tables {
  int64_t off[3], len[3], ext[3];
  int ids;
  float *qk[3], *v[3], *sink, *ident, *ident_v, *ident_w;
  float *block;
  /* One token's q, k and v rows ([3][H][D] f32) per thread, stored whole */
  float *tokens;
  int threads;
} tables;

static void band_split(int64_t D, int64_t len[3], int64_t off[3]) {
  int64_t even = D & ~(int64_t)1;
  len[1] = len[2] = 2 * (even / 6);
  len[0] = even - len[1] - len[2];
  off[0] = 0;
  off[1] = len[0];
  off[2] = len[0] + len[1];
}

/* e_id, c_id, a_id, b_id, w_id and p_id of semantic head h: e_id on the dims
 * `id_dims` flags (all dims if none, which only happens for D < 8),
 * orthogonalised in order while there is room (Gram-Schmidt; later ones stay
 * random), each scaled so that e . e / sqrt(D) = SEM_KAPPA; c_id, a_id, b_id
 * unit Gaussian on every dim; w_id uniform in [SEM_OMEGA_MIN, SEM_OMEGA_MAX],
 * p_id in [0, 2 pi). */
static void build_identities(tables *tb, const stsa_workload_desc *d, int64_t h,
                             const unsigned char *id_dims) {
  const int64_t D = d->head_dim;
  const uint64_t ke = stream_key(d->seed, STREAM_IDENT, 0, h);
  const uint64_t kc = stream_key(d->seed, STREAM_IDENT_V, 0, h);
  const uint64_t kt = stream_key(d->seed, STREAM_IDENT_VT, 0, h);
  const uint64_t kw = stream_key(d->seed, STREAM_IDENT_W, 0, h);
  int64_t room = 0;
  for (int64_t i = 0; i < D; i++)
    room += id_dims[i];
  const int all = room == 0;
  room = all ? D : room;
  const double want = sqrt(SEM_KAPPA * sqrt((double)D));
  double w[STSA_MAX_HEAD_DIM];
  for (int a = 0; a < tb->ids; a++) {
    float *e = tb->ident + (h * tb->ids + a) * D;
    float *c = tb->ident_v + (h * tb->ids + a) * 3 * D;
    float *rot = tb->ident_w + (h * tb->ids + a) * 2;
    const uint64_t idx0 = (uint64_t)a * (uint64_t)D;
    for (int64_t i = 0; i < D; i++) {
      w[i] = (all || id_dims[i]) ? noise(ke, idx0 + (uint64_t)i) : 0.0;
      c[i] = noise(kc, idx0 + (uint64_t)i);
      c[D + i] = noise(kt, 2 * idx0 + (uint64_t)i);
      c[2 * D + i] = noise(kt, 2 * idx0 + (uint64_t)(D + i));
    }
    rot[0] = (float)(SEM_OMEGA_MIN + (SEM_OMEGA_MAX - SEM_OMEGA_MIN) *
                                         unit_interval(kw, 2 * (uint64_t)a));
    rot[1] = (float)(TWO_PI * unit_interval(kw, 2 * (uint64_t)a + 1));
    for (int p = 0; p < a && a < room; p++) {
      const float *ep = tb->ident + (h * tb->ids + p) * D;
      double dot = 0, n2 = 0;
      for (int64_t i = 0; i < D; i++) {
        dot += w[i] * ep[i];
        n2 += (double)ep[i] * ep[i];
      }
      for (int64_t i = 0; i < D; i++)
        w[i] -= dot / n2 * ep[i];
    }
    double norm2 = 0;
    for (int64_t i = 0; i < D; i++)
      norm2 += w[i] * w[i];
    const double scale = norm2 > 0 ? want / sqrt(norm2) : 0.0;
    for (int64_t i = 0; i < D; i++)
      e[i] = (float)(w[i] * scale);
  }
}

/* Fills the tables of head h; `sink_dims` flags the dims g may use and
 * `id_dims` (semantic heads) those e_id may use. A semantic head puts its
 * position terms on the even pairs of each band only and leaves the odd ones
 * to e_id. */
static void build_head(tables *tb, const stsa_workload_desc *d, int64_t h,
                       stsa_head_kind kind, unsigned char *sink_dims,
                       unsigned char *id_dims) {
  const int64_t D = d->head_dim;
  const int semantic = kind == STSA_HEAD_SEMANTIC;
  const double kappa[3] = {KIND_KAPPA[kind].t, KIND_KAPPA[kind].h, KIND_KAPPA[kind].w};
  const uint64_t kphase = stream_key(d->seed, STREAM_PHASE, 0, h);
  const uint64_t kvdir = stream_key(d->seed, STREAM_VDIR, 0, h);
  const uint64_t ksink = stream_key(d->seed, STREAM_SINK, 0, h);
  memset(sink_dims, 0, (size_t)D);
  memset(id_dims, 0, (size_t)D);
  if (D & 1)
    sink_dims[D - 1] = 1;
  for (int b = 0; b < 3; b++) {
    int64_t pairs = tb->len[b] / 2;
    /* The slowest pair is left to the sink when the band has others. */
    int64_t used = pairs >= 2 ? pairs - 1 : pairs;
    if (pairs >= 2)
      sink_dims[tb->off[b] + 2 * pairs - 2] = sink_dims[tb->off[b] + 2 * pairs - 1] = 1;
    int64_t npos = semantic ? (used + 1) / 2 : used;
    double amp = npos > 0 ? sqrt(kappa[b] * sqrt((double)D) / (double)npos) : 0.0;
    for (int64_t k = 0; k < pairs; k++) {
      double theta = pow(ROPE_BASE, -2.0 * (double)k / (double)tb->len[b]);
      uint64_t dim = (uint64_t)(tb->off[b] + 2 * k);
      double phase = TWO_PI * unit_interval(kphase, dim);
      int pos_pair = k < used && (!semantic || k % 2 == 0);
      if (semantic && k < used && !pos_pair)
        id_dims[dim] = id_dims[dim + 1] = 1;
      double u0 = pos_pair ? amp * cos(phase) : 0.0,
             u1 = pos_pair ? amp * sin(phase) : 0.0;
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
  if (semantic)
    build_identities(tb, d, h, id_dims);
}

static stsa_status build_tables(tables *tb, const stsa_workload_desc *d,
                                const stsa_head_kind *kinds) {
  const int64_t H = d->heads, D = d->head_dim;
  band_split(D, tb->len, tb->off);
  tb->ext[0] = d->geometry.frames;
  tb->ext[1] = d->geometry.height;
  tb->ext[2] = d->geometry.width;
  int semantic = 0, objects, regions;
  for (int64_t h = 0; h < H; h++)
    semantic |= kinds[h] == STSA_HEAD_SEMANTIC;
  tb->ids = semantic ? scene_ids(&d->geometry, &objects, &regions) : 0;
  /* Sizes are bounded by the validated output tensors (<= 2^52 bytes). */
  size_t per[3],
      total = (size_t)(H * D) * (1 + 4 * (size_t)tb->ids) + 2 * (size_t)(H * tb->ids);
  for (int b = 0; b < 3; b++) {
    per[b] = (size_t)(H * tb->ext[b] * tb->len[b]);
    total += 2 * per[b];
  }
  tb->threads = omp_get_max_threads();
  tb->block = malloc(total * sizeof(float));
  tb->tokens = malloc((size_t)tb->threads * 3 * (size_t)(H * D) * sizeof(float));
  unsigned char *dims = malloc(2 * (size_t)D); /* flags: sink dims, identity dims */
  if (!tb->block || !tb->tokens || !dims) {
    free(tb->block);
    free(tb->tokens);
    free(dims);
    return STSA_ERR_OUT_OF_MEMORY;
  }
  float *p = tb->block;
  for (int b = 0; b < 3; b++) {
    tb->qk[b] = p;
    tb->v[b] = p + per[b];
    p += 2 * per[b];
  }
  tb->sink = p;
  tb->ident = p + H * D;
  tb->ident_v = tb->ident + H * tb->ids * D;
  tb->ident_w = tb->ident_v + 3 * H * tb->ids * D;
  for (int64_t h = 0; h < H; h++)
    build_head(tb, d, h, kinds[h], dims, dims + D);
  free(dims);
  return STSA_OK;
}

/* ---- the token loop ---------------------------------------------------------- */
static void generate(const tables *tb, const stsa_workload_desc *d,
                     const stsa_head_kind *kinds, int64_t n, const stsa_tensor *q,
                     const stsa_tensor *k, const stsa_tensor *v) {
  const stsa_geometry *g = &d->geometry;
  const int64_t H = d->heads, D = d->head_dim;
  const int64_t P = g->height * g->width, L = g->frames * P;
  const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  const int64_t rows = n * H;
  for (int64_t b = 0; b < d->batch; b++) {
    scene sc;
    if (tb->ids > 0)
      build_scene(&sc, g, d->seed, b);
#pragma omp parallel for schedule(static) if (rows * D > (1 << 16))                      \
    num_threads(tb->threads)
    for (int64_t s = 0; s < n; s++) {
      float *const token_q =
          tb->tokens + (size_t)omp_get_thread_num() * 3 * (size_t)(H * D);
      float *const token_k = token_q + H * D, *const token_v = token_k + H * D;
      const int64_t i = s - v0;
      const int video = i >= 0 && i < L;
      const int64_t f = video ? i / P : 0, y = video ? i % P / g->width : 0,
                    x = video ? i % g->width : 0;
      const int64_t pos[3] = {f, y, x};
      const int id = video && tb->ids > 0 ? token_identity(&sc, f, y, x) : 0;
      for (int64_t h = 0; h < H; h++) {
        float *const qr = token_q + h * D, *const kr = token_k + h * D,
                     *const vr = token_v + h * D;
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
          float vs = V_SMOOTH;
          if (kinds[h] == STSA_HEAD_SEMANTIC) { /* identity over the weak position */
            const float *e_id = tb->ident + (h * tb->ids + id) * D;
            const float *cab = tb->ident_v + (h * tb->ids + id) * 3 * D; /* c, a, b */
            const float *rot = tb->ident_w + (h * tb->ids + id) * 2;
            const double ang = (double)rot[0] * (double)f + (double)rot[1];
            const float ca = SEM_V_TIME * (float)cos(ang),
                        sa = SEM_V_TIME * (float)sin(ang);
            for (int64_t e = 0; e < D; e++) {
              qr[e] += e_id[e];
              vr[e] = SEM_V_ID * cab[e] + ca * cab[D + e] + sa * cab[2 * D + e];
            }
            vs = 1.0f;
          }
          const float *sk = tb->sink + h * D;
          const float ksink = f == 0 ? 1.0f : 0.0f;
          for (int64_t e = 0; e < D; e++) {
            const float base = qr[e];
            kr[e] = base + ksink * sk[e] + SIGMA_VIDEO * noise(kk, idx0 + (uint64_t)e);
            qr[e] = base + sk[e] + SIGMA_VIDEO * noise(kq, idx0 + (uint64_t)e);
            vr[e] = vs * vr[e] + V_NOISE * noise(kv, idx0 + (uint64_t)e);
          }
        }
      }
      wl_store_token(token_q, q, b, s);
      wl_store_token(token_k, k, b, s);
      wl_store_token(token_v, v, b, s);
    }
  }
}

stsa_status stsa_workload_generate(const stsa_workload_desc *desc, const stsa_tensor *q,
                                   const stsa_tensor *k, const stsa_tensor *v,
                                   stsa_head_kind *kinds_out) {
  if (!desc || !q || !k || !v)
    return STSA_ERR_NULL_ARG;
  int64_t n = 0;
  STSA_IO_TRY(check_desc(desc, &n));
  STSA_IO_TRY(check_out(q, desc, n));
  STSA_IO_TRY(check_out(k, desc, n));
  STSA_IO_TRY(check_out(v, desc, n));
  /* q, k and v may interleave in one buffer (fused QKV): only outputs that
   * share elements are refused */
  if (stsa_tensors_overlap(q, k) || stsa_tensors_overlap(q, v) ||
      stsa_tensors_overlap(k, v))
    return STSA_ERR_OVERLAP;
  STSA_IO_TRY(check_kinds(desc));
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
    generate(&tb, desc, kinds, n, q, k, v);
    free(tb.block);
    free(tb.tokens);
    if (kinds_out)
      memcpy(kinds_out, kinds, (size_t)desc->heads * sizeof *kinds);
  }
  free(kinds);
  return st;
}
