/*
 * quality_zoo.c — see quality_zoo.h.
 *
 * The families cover what decides where a sparse method errs: window width
 * (the workload's heads with q scaled: a sharper or a flatter fall-off than
 * the windows were sized for), temporal heads, moving objects over static
 * regions (semantic heads), global sinks anywhere in the video (not only the
 * first frame, which SVG's masks keep), text that draws much of the mass,
 * near-uniform heads (every key matters a little: no sparse mask is right),
 * heads whose query tokens follow two kinds at once (per token at random, or
 * per region of the frame: error concentrated in a subset of the rows, which
 * is where an estimate from a few rows under-reads), and noise on q and k.
 * Each family runs at two small geometries in f32 and at the larger one in
 * bf16; Wan 480p is opt-in (minutes of dense reference on two cores).
 */
#include "quality_zoo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "svg_eval.h"

#define SP STSA_HEAD_SPATIAL
#define TM STSA_HEAD_TEMPORAL
#define MX STSA_HEAD_MIXED
#define SE STSA_HEAD_SEMANTIC

/* name, kind a, kind b, mix, temperature, noise, sinks, text-heavy */
static const zoo_family FAMILIES[] = {
    {"spatial-narrow", SP, SP, ZOO_MIX_NONE, 1.6, 0, 0, 0},
    {"spatial", SP, SP, ZOO_MIX_NONE, 1.0, 0, 0, 0},
    {"spatial-wide", SP, SP, ZOO_MIX_NONE, 0.6, 0, 0, 0},
    {"temporal-narrow", TM, TM, ZOO_MIX_NONE, 1.6, 0, 0, 0},
    {"temporal", TM, TM, ZOO_MIX_NONE, 1.0, 0, 0, 0},
    {"temporal-wide", TM, TM, ZOO_MIX_NONE, 0.6, 0, 0, 0},
    {"mixed", MX, MX, ZOO_MIX_NONE, 1.0, 0, 0, 0},
    {"objects", SE, SE, ZOO_MIX_NONE, 1.0, 0, 0, 0},
    {"objects-sharp", SE, SE, ZOO_MIX_NONE, 1.6, 0, 0, 0},
    {"sinks", SP, SP, ZOO_MIX_NONE, 1.0, 0, 4, 0},
    {"sinks-objects", SE, SE, ZOO_MIX_NONE, 1.0, 0, 4, 0},
    {"text-heavy", TM, TM, ZOO_MIX_NONE, 1.0, 0, 0, 1},
    {"low-contrast", SP, SP, ZOO_MIX_NONE, 0.15, 0, 0, 0},
    {"mix-tokens", SP, TM, ZOO_MIX_TOKENS, 1.0, 0, 0, 0},
    {"mix-region", SE, SP, ZOO_MIX_REGION, 1.0, 0, 0, 0},
    {"noise-low", TM, TM, ZOO_MIX_NONE, 1.0, 0.5, 0, 0},
    {"noise-high", SP, SP, ZOO_MIX_NONE, 1.0, 2.0, 0, 0},
};
#define N_FAMILIES ((int)(sizeof FAMILIES / sizeof FAMILIES[0]))

/* The Wan-480p families: one of each structure the small ones vary. */
static const char *const WAN_FAMILIES[] = {"spatial", "temporal", "objects", "mix-region",
                                           "sinks"};
#define N_WAN ((int)(sizeof WAN_FAMILIES / sizeof WAN_FAMILIES[0]))

typedef struct zoo_size {
  const char *name;
  int64_t frames, height, width, heads, dim;
  stsa_dtype dtype;
} zoo_size;

static const zoo_size SIZES[] = {
    {"small", 5, 12, 16, 4, 64, STSA_F32}, /* a user's first dump */
    {"medium", 8, 16, 16, 4, 64, STSA_F32},
    {"medium", 8, 16, 16, 4, 64, STSA_BF16},
};
#define N_SIZES ((int)(sizeof SIZES / sizeof SIZES[0]))
static const zoo_size WAN_SIZE = {"wan480p", 21, 30, 52, 2, 128, STSA_F32};

static zoo_case make_case(const zoo_family *f, const zoo_size *s, uint64_t seed) {
  const int64_t L = s->frames * s->height * s->width;
  const int64_t text = f->text_heavy ? L / 2 : 0;
  zoo_case c = {f,
                {s->frames, s->height, s->width, text, text,
                 text ? STSA_TEXT_PREFIX : STSA_TEXT_NONE},
                s->heads,
                s->dim,
                s->dtype,
                seed,
                s->name};
  return c;
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int zoo_cases(int wan, uint64_t seed, zoo_case *out, int cap) {
  const uint64_t base = seed ? mix64(seed) & 0xffffffffffull : 0;
  int n = 0;
  for (int s = 0; s < N_SIZES; s++)
    for (int f = 0; f < N_FAMILIES && n < cap; f++, n++)
      out[n] = make_case(&FAMILIES[f], &SIZES[s],
                         base + 1000 + (uint64_t)(s * N_FAMILIES + f));
  for (int w = 0; wan && w < N_WAN && n < cap; w++)
    for (int f = 0; f < N_FAMILIES; f++)
      if (!strcmp(FAMILIES[f].name, WAN_FAMILIES[w]))
        out[n++] = make_case(&FAMILIES[f], &WAN_SIZE, base + 5000 + (uint64_t)w);
  return n;
}

int zoo_case_capacity(void) { return N_SIZES * N_FAMILIES + N_WAN; }

/* ---- transforms ------------------------------------------------------------ */

/* A standard normal draw for counter i of stream key (Box-Muller). */
static double gauss(uint64_t key, uint64_t i) {
  const uint64_t a = mix64(key ^ (2 * i + 1) * 0x9e3779b97f4a7c15ull);
  const uint64_t b = mix64(key ^ (2 * i + 2) * 0x9e3779b97f4a7c15ull);
  const double u = ((double)(a >> 11) + 0.5) * 0x1.0p-53,
               w = (double)(b >> 11) * 0x1.0p-53;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

static float *row(const stsa_tensor *t, int64_t n, int64_t h) {
  return (float *)t->data + (n * t->shape[2] + h) * t->shape[3];
}

/* The rms of head h's elements over all tokens. */
static double head_rms(const stsa_tensor *t, int64_t h) {
  const int64_t N = t->shape[1], D = t->shape[3];
  double s = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++)
      s += (double)row(t, n, h)[d] * row(t, n, h)[d];
  return sqrt(s / (double)(N * D));
}

static void add_noise(const stsa_tensor *t, int64_t h, double rel, uint64_t key) {
  const int64_t N = t->shape[1], D = t->shape[3];
  const double sd = rel * head_rms(t, h);
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++)
      row(t, n, h)[d] += (float)(sd * gauss(key, (uint64_t)(n * D + d)));
}

/* Every query gains c u and each favoured key c u (u a random unit vector):
 * those keys' scores rise by about c^2 / sqrt(D) for every query. */
static void favour_keys(const stsa_tensor *q, const stsa_tensor *k, int64_t h,
                        const int64_t *keys, int64_t nkeys, double boost, uint64_t key) {
  const int64_t N = q->shape[1], D = q->shape[3];
  double *u = malloc(sizeof *u * (size_t)D), norm = 0;
  if (!u)
    cli_die("out of memory");
  for (int64_t d = 0; d < D; d++) {
    u[d] = gauss(key, (uint64_t)d);
    norm += u[d] * u[d];
  }
  const double c = sqrt(boost * sqrt((double)D)) / sqrt(norm);
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++)
      row(q, n, h)[d] += (float)(c * u[d]);
  for (int64_t i = 0; i < nkeys; i++)
    for (int64_t d = 0; d < D; d++)
      row(k, keys[i], h)[d] += (float)(c * u[d]);
  free(u);
}

/* Logit boost of favoured keys: a sink draws e^5 ~ 150 keys' worth of mass,
 * text e^2 per token. */
#define SINK_BOOST 5.0
#define TEXT_BOOST 2.0

static void transform_head(const zoo_case *c, const stsa_tensor *q, const stsa_tensor *k,
                           int64_t h) {
  const zoo_family *f = c->family;
  const int64_t N = q->shape[1], D = q->shape[3];
  const uint64_t key = mix64(c->seed * 0x100000001b3ull + (uint64_t)h);
  if (f->temperature != 1.0)
    for (int64_t n = 0; n < N; n++)
      for (int64_t d = 0; d < D; d++)
        row(q, n, h)[d] *= (float)f->temperature;
  if (f->noise > 0) {
    add_noise(q, h, f->noise, key ^ 1);
    add_noise(k, h, f->noise, key ^ 2);
  }
  const stsa_geometry *g = &c->geometry;
  const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  const int64_t L = g->frames * g->height * g->width;
  if (f->sinks > 0) {
    int64_t keys[16];
    for (int i = 0; i < f->sinks && i < 16; i++)
      keys[i] = v0 + (int64_t)(mix64(key ^ (uint64_t)(100 + i)) % (uint64_t)L);
    favour_keys(q, k, h, keys, f->sinks < 16 ? f->sinks : 16, SINK_BOOST, key ^ 3);
  }
  if (f->text_heavy && g->text > 0) {
    int64_t *keys = malloc(sizeof *keys * (size_t)g->text);
    if (!keys)
      cli_die("out of memory");
    for (int64_t i = 0; i < g->text; i++)
      keys[i] = i + (g->text_pos == STSA_TEXT_PREFIX ? 0 : L);
    favour_keys(q, k, h, keys, g->text, TEXT_BOOST, key ^ 4);
    free(keys);
  }
}

/* Whether query token n follows kind a in a mixed head. */
static int follows_a(const zoo_case *c, int64_t n, uint64_t key) {
  const stsa_geometry *g = &c->geometry;
  const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  const int64_t i = n - v0;
  if (i < 0 || i >= g->frames * g->height * g->width)
    return 1;
  if (c->family->mix == ZOO_MIX_TOKENS)
    return (int)(mix64(key ^ (uint64_t)n) & 1);
  return i % g->width < g->width / 2;
}

/* A mixed head from heads a and b of half the dimension: q = sqrt 2 (q_a |
 * 0) or sqrt 2 (0 | q_b) by token, k = (k_a | k_b), v = (v_a | v_b): a query
 * token's scores are exactly those of its kind's head (at that head's
 * scale), its output that head's output next to b's dims' weighted mean. */
static void combine(const zoo_case *c, const svg_workload *half, const stsa_tensor *q,
                    const stsa_tensor *k, const stsa_tensor *v) {
  const int64_t N = q->shape[1], H = q->shape[2], D = q->shape[3], Dh = D / 2;
  for (int64_t h = 0; h < H; h++) {
    const uint64_t key = mix64(c->seed ^ (uint64_t)(h + 77));
    for (int64_t n = 0; n < N; n++) {
      const int a = follows_a(c, n, key);
      for (int64_t d = 0; d < D; d++) {
        const int64_t src = d < Dh ? 2 * h : 2 * h + 1, e = d < Dh ? d : d - Dh;
        const float qv = row(&half->q, n, src)[e];
        row(q, n, h)[d] = (d < Dh) == a ? (float)(sqrt(2.0) * qv) : 0.0f;
        row(k, n, h)[d] = row(&half->k, n, src)[e];
        row(v, n, h)[d] = row(&half->v, n, src)[e];
      }
    }
  }
}

void zoo_generate(const zoo_case *c, stsa_tensor *q, stsa_tensor *k, stsa_tensor *v) {
  const zoo_family *f = c->family;
  const int64_t H = c->heads, D = c->head_dim, N = stsa_geometry_tokens(&c->geometry);
  const int mixed = f->mix != ZOO_MIX_NONE;
  stsa_head_kind kinds[64];
  const int64_t gen_heads = mixed ? 2 * H : H;
  if (gen_heads > 64)
    cli_die("zoo: at most 32 heads a case");
  for (int64_t h = 0; h < gen_heads; h++)
    kinds[h] = mixed && h % 2 ? f->kind_b : f->kind_a;
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = c->geometry;
  cfg.heads = gen_heads;
  cfg.head_dim = mixed ? D / 2 : D;
  svg_workload w;
  svg_workload_make_kinds(&w, &cfg, 1, c->seed, kinds);
  if (mixed) {
    *q = svg_f32_tensor(1, N, H, D);
    *k = svg_f32_tensor(1, N, H, D);
    *v = svg_f32_tensor(1, N, H, D);
    combine(c, &w, q, k, v);
    svg_workload_free(&w);
  } else {
    *q = w.q, *k = w.k, *v = w.v;
    free(w.out.data);
    free(w.ref.data);
    free(w.truth);
  }
  for (int64_t h = 0; h < H; h++)
    transform_head(c, q, k, h);
  if (c->dtype != STSA_F32) {
    stsa_tensor *t[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
      const stsa_tensor to = svg_tensor_cast(t[i], c->dtype);
      free(t[i]->data);
      *t[i] = to;
    }
  }
}
