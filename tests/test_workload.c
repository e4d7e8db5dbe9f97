/*
 * test_workload.c — the built-in Sparse VideoGen workload: head kind names,
 * determinism (bytes, layouts, dtypes, threads, seeds, batch entries), the
 * attention structure of each head kind measured with a double-precision
 * softmax (semantic heads against the masks of an SVG session), the default
 * kind mix, invalid input, and a timing print.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate, stsa_svg_kind_mask */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/convert.h"
#include "testutil.h"

static const stsa_head_kind SPATIAL_TEMPORAL_MIXED[3] = {
    STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL, STSA_HEAD_MIXED};

static stsa_workload_desc make_desc(int64_t F, int64_t Hp, int64_t Wp, int64_t C,
                                    stsa_text_pos pos, int64_t B, int64_t H, int64_t D,
                                    uint64_t seed, const stsa_head_kind *kinds) {
  stsa_workload_desc d = STSA_INIT(stsa_workload_desc);
  d.geometry.frames = F;
  d.geometry.height = Hp;
  d.geometry.width = Wp;
  d.geometry.text = C;
  d.geometry.text_real = C;
  d.geometry.text_pos = pos;
  d.batch = B;
  d.heads = H;
  d.head_dim = D;
  d.seed = seed;
  d.kinds = kinds;
  return d;
}

static int64_t tokens(const stsa_workload_desc *d) {
  const stsa_geometry *g = &d->geometry;
  return g->text + g->frames * g->height * g->width;
}

/* q, k, v of one workload in one dtype and layout. */
typedef struct qkv {
  stsa_tensor t[3];
} qkv;

static qkv alloc_qkv(const stsa_workload_desc *d, stsa_dtype dtype, tu_layout layout) {
  qkv x;
  for (int i = 0; i < 3; i++)
    x.t[i] =
        tu_sentinel_tensor(dtype, layout, d->batch, tokens(d), d->heads, d->head_dim);
  return x;
}

static stsa_status gen(const stsa_workload_desc *d, qkv *x, stsa_head_kind *kinds_out) {
  return stsa_workload_generate(d, &x->t[0], &x->t[1], &x->t[2], kinds_out);
}

static void free_qkv(qkv *x) {
  for (int i = 0; i < 3; i++) {
    CHECK(tu_guard_ok(x->t[i].data), "guard bytes of output %d overwritten", i);
    tu_free_tensor(&x->t[i]);
  }
}

static size_t bytes_of(const stsa_tensor *t) {
  return tu_span(t) * stsa_dtype_size(t->dtype);
}

/* ---- names ----------------------------------------------------------------- */
static void test_names(void) {
  CHECK(strcmp(stsa_head_kind_name(STSA_HEAD_SPATIAL), "spatial") == 0, "spatial name");
  CHECK(strcmp(stsa_head_kind_name(STSA_HEAD_TEMPORAL), "temporal") == 0,
        "temporal name");
  CHECK(strcmp(stsa_head_kind_name(STSA_HEAD_MIXED), "mixed") == 0, "mixed name");
  CHECK(strcmp(stsa_head_kind_name(STSA_HEAD_SEMANTIC), "semantic") == 0,
        "semantic name");
  CHECK(strcmp(stsa_head_kind_name(STSA_HEAD_KIND_COUNT_), "unknown") == 0,
        "name of an invalid kind");
  CHECK(strcmp(stsa_head_kind_name((stsa_head_kind)-1), "unknown") == 0,
        "name of kind -1");
}

/* ---- determinism --------------------------------------------------------------- */
/* Fraction of elements (as f32 values) that differ between two tensors. */
static double diff_fraction(const stsa_tensor *a, const stsa_tensor *b) {
  int64_t n = 0, diff = 0;
  for (int64_t bi = 0; bi < a->shape[0]; bi++)
    for (int64_t s = 0; s < a->shape[1]; s++)
      for (int64_t h = 0; h < a->shape[2]; h++)
        for (int64_t e = 0; e < a->shape[3]; e++, n++)
          diff += tu_load(a->data, a->dtype, tu_offset(a, bi, s, h, e)) !=
                  tu_load(b->data, b->dtype, tu_offset(b, bi, s, h, e));
  return (double)diff / (double)n;
}

/* Counts elements of `t` that are not `ref` (f32) converted to t's dtype. */
static int64_t mismatches(const stsa_tensor *ref, const stsa_tensor *t) {
  int64_t bad = 0;
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t s = 0; s < t->shape[1]; s++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t e = 0; e < t->shape[3]; e++) {
          float f = ((const float *)ref->data)[tu_offset(ref, b, s, h, e)];
          size_t at = tu_offset(t, b, s, h, e);
          int same;
          if (t->dtype == STSA_F32)
            same = memcmp(&f, (const float *)t->data + at, sizeof f) == 0;
          else if (t->dtype == STSA_F16)
            same = ((const uint16_t *)t->data)[at] == stsa_f32_to_f16(f);
          else
            same = ((const uint16_t *)t->data)[at] == stsa_f32_to_bf16(f);
          bad += !same;
        }
  return bad;
}

/* The default mix (kinds NULL), and semantic heads among the others. */
static const stsa_head_kind WITH_SEMANTIC[5] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SPATIAL,
                                                STSA_HEAD_SEMANTIC, STSA_HEAD_TEMPORAL,
                                                STSA_HEAD_SEMANTIC};

static void test_determinism(const stsa_head_kind *kinds) {
  /* Odd D, prefix text, batch 2, above the size where threads start. */
  const int64_t dims[2] = {13, 64};
  for (int di = 0; di < 2; di++) {
    stsa_workload_desc d =
        make_desc(5, 6, 7, 11, STSA_TEXT_PREFIX, 2, 3, dims[di], 7, kinds);
    if (dims[di] == 64)
      d = make_desc(6, 12, 16, 11, STSA_TEXT_SUFFIX, 2, 5, 64, 7, kinds);
    qkv a = alloc_qkv(&d, STSA_F32, TU_BSHD), b = alloc_qkv(&d, STSA_F32, TU_BSHD);
    stsa_head_kind ka[5], kb[5];
    CHECK_STATUS(gen(&d, &a, ka), STSA_OK);
    CHECK_STATUS(gen(&d, &b, kb), STSA_OK);
    for (int i = 0; i < 3; i++)
      CHECK(memcmp(a.t[i].data, b.t[i].data, bytes_of(&a.t[i])) == 0,
            "D=%lld: two calls differ in tensor %d", (long long)d.head_dim, i);
    CHECK(memcmp(ka, kb, (size_t)d.heads * sizeof ka[0]) == 0, "kinds differ");

#ifdef _OPENMP
    /* Thread count must not matter: counter-based random numbers. */
    int saved = omp_get_max_threads();
    omp_set_num_threads(saved > 1 ? 1 : 2);
    CHECK_STATUS(gen(&d, &b, NULL), STSA_OK);
    omp_set_num_threads(saved);
    for (int i = 0; i < 3; i++)
      CHECK(memcmp(a.t[i].data, b.t[i].data, bytes_of(&a.t[i])) == 0,
            "D=%lld: thread count changes tensor %d", (long long)d.head_dim, i);
#endif

    /* Another seed: (nearly) every element differs, the kinds do not. */
    d.seed = 8;
    CHECK_STATUS(gen(&d, &b, kb), STSA_OK);
    for (int i = 0; i < 3; i++) {
      double fr = diff_fraction(&a.t[i], &b.t[i]);
      CHECK(fr > 0.95, "D=%lld: seeds 7 and 8 share %.1f%% of tensor %d",
            (long long)d.head_dim, 100 * (1 - fr), i);
    }
    CHECK(memcmp(ka, kb, (size_t)d.heads * sizeof ka[0]) == 0,
          "kinds depend on the seed");
    d.seed = 7;

    /* Batch entries get their own noise. */
    for (int i = 0; i < 3; i++) {
      const stsa_tensor *t = &a.t[i];
      int64_t same = 0, n = 0;
      for (int64_t s = 0; s < t->shape[1]; s++)
        for (int64_t h = 0; h < t->shape[2]; h++)
          for (int64_t e = 0; e < t->shape[3]; e++, n++)
            same += tu_load(t->data, STSA_F32, tu_offset(t, 0, s, h, e)) ==
                    tu_load(t->data, STSA_F32, tu_offset(t, 1, s, h, e));
      CHECK(same < n / 20, "tensor %d: batch entries share %lld of %lld values", i,
            (long long)same, (long long)n);
    }

    /* Every layout and dtype holds the same values (rounded once). */
    const stsa_dtype dtypes[3] = {STSA_F32, STSA_F16, STSA_BF16};
    for (int ti = 0; ti < 3; ti++)
      for (int lay = TU_BSHD; lay <= TU_BHSD; lay++) {
        qkv c = alloc_qkv(&d, dtypes[ti], (tu_layout)lay);
        CHECK_STATUS(gen(&d, &c, NULL), STSA_OK);
        for (int i = 0; i < 3; i++) {
          int64_t bad = mismatches(&a.t[i], &c.t[i]);
          CHECK(bad == 0, "D=%lld %s %s tensor %d: %lld values differ from f32 bshd",
                (long long)d.head_dim, stsa_dtype_name(dtypes[ti]),
                tu_layout_name((tu_layout)lay), i, (long long)bad);
        }
        free_qkv(&c);
      }
    free_qkv(&a);
    free_qkv(&b);
  }
}

/* ---- frozen outputs of the position kinds -------------------------------------- */
/* FNV-1a over the f32 bits of q, k, v of the heads `kinds` does not mark
 * semantic, in (b, s, h, e) order. */
static uint64_t hash_position_heads(const qkv *x, const stsa_head_kind *kinds) {
  uint64_t hsh = 0xcbf29ce484222325ull;
  for (int i = 0; i < 3; i++) {
    const stsa_tensor *t = &x->t[i];
    for (int64_t b = 0; b < t->shape[0]; b++)
      for (int64_t s = 0; s < t->shape[1]; s++)
        for (int64_t h = 0; h < t->shape[2]; h++) {
          if (kinds && kinds[h] == STSA_HEAD_SEMANTIC)
            continue;
          for (int64_t e = 0; e < t->shape[3]; e++) {
            float f = (float)tu_load(t->data, t->dtype, tu_offset(t, b, s, h, e));
            uint32_t bits;
            memcpy(&bits, &f, sizeof bits);
            for (int byte = 0; byte < 4; byte++) {
              hsh ^= (bits >> (8 * byte)) & 0xffu;
              hsh *= 0x100000001b3ull;
            }
          }
        }
  }
  return hsh;
}

/* Spatial, temporal and mixed heads (the default mix among them) are frozen:
 * their q, k, v must stay bitwise what they were when semantic heads were
 * recalibrated (hashes recorded from that code), with or without semantic
 * heads in the same call. */
static void test_frozen_kinds(void) {
  static const stsa_head_kind all4[4] = {STSA_HEAD_MIXED, STSA_HEAD_SEMANTIC,
                                         STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL};
  struct {
    stsa_workload_desc d;
    uint64_t want;
  } cases[5] = {
      {make_desc(5, 6, 7, 11, STSA_TEXT_PREFIX, 2, 12, 13, 7, NULL),
       0x36b197ab203949dbull},
      {make_desc(6, 12, 16, 11, STSA_TEXT_SUFFIX, 2, 5, 64, 7, NULL),
       0x3241d42a9a5a79b0ull},
      {make_desc(9, 12, 16, 0, STSA_TEXT_NONE, 1, 3, 128, 1, SPATIAL_TEMPORAL_MIXED),
       0x13a3a5c1c8930f6eull},
      {make_desc(6, 12, 16, 11, STSA_TEXT_SUFFIX, 2, 5, 64, 7, WITH_SEMANTIC),
       0x50bac9d9b4ad1f51ull},
      {make_desc(8, 24, 32, 0, STSA_TEXT_NONE, 1, 4, 64, 3, all4), 0xce88a21f2dc211aeull},
  };
  for (int c = 0; c < 5; c++) {
    qkv x = alloc_qkv(&cases[c].d, STSA_F32, TU_BSHD);
    CHECK_STATUS(gen(&cases[c].d, &x, NULL), STSA_OK);
    uint64_t got = hash_position_heads(&x, cases[c].d.kinds);
    printf("  frozen case %d: %016llx\n", c, (unsigned long long)got);
    CHECK(got == cases[c].want, "case %d: position heads changed (hash %016llx)", c,
          (unsigned long long)got);
    free_qkv(&x);
  }
}

/* ---- attention structure ------------------------------------------------------- */
typedef struct mass_stats {
  double near_t;     /* mass on video keys within +-2 frames of the query */
  double near_s;     /* mass on video keys within |dy|, |dx| <= 3, any frame */
  double uni_t;      /* what near_t would be for attention uniform over video */
  double uni_s;      /* the same for near_s */
  double own_frame;  /* mass on the query's own frame */
  double max_p;      /* largest single probability */
  double text;       /* mass on text keys */
  double sink_ratio; /* frame-0 mass / mean mass of a far frame (|df| > 2) */
} mass_stats;

static int64_t iabs64(int64_t a) { return a < 0 ? -a : a; }

static int64_t count_within(int64_t c, int64_t extent, int64_t r) {
  int64_t lo = c - r < 0 ? 0 : c - r, hi = c + r > extent - 1 ? extent - 1 : c + r;
  return hi - lo + 1;
}

/* Row s of (batch b, head h) of t in double: out[D]. */
static void load_row(const stsa_tensor *t, int64_t b, int64_t s, int64_t h, double *out) {
  for (int64_t e = 0; e < t->shape[3]; e++)
    out[e] = tu_load(t->data, t->dtype, tu_offset(t, b, s, h, e));
}

/* All keys of (batch b, head h) in double, [N][D] (caller frees). */
static double *load_keys(const stsa_tensor *k, int64_t b, int64_t h) {
  const int64_t N = k->shape[1], D = k->shape[3];
  double *kd = malloc(sizeof(double) * (size_t)(N * D));
  for (int64_t j = 0; j < N; j++)
    load_row(k, b, j, h, kd + j * D);
  return kd;
}

/* p[N] = softmax(qd kd^T / sqrt(D)) in double. */
static void softmax_row(const double *qd, const double *kd, int64_t N, int64_t D,
                        double *p) {
  double mx = -INFINITY, z = 0;
  for (int64_t j = 0; j < N; j++) {
    double s = 0;
    for (int64_t e = 0; e < D; e++)
      s += qd[e] * kd[j * D + e];
    p[j] = s / sqrt((double)D);
    mx = p[j] > mx ? p[j] : mx;
  }
  for (int64_t j = 0; j < N; j++)
    z += (p[j] = exp(p[j] - mx));
  for (int64_t j = 0; j < N; j++)
    p[j] /= z;
}

/* Softmax(q k^T / sqrt(D)) in double for `rows` sampled video queries of
 * (batch b, head h), averaged. */
static mass_stats measure(const stsa_workload_desc *d, const qkv *x, int64_t b, int64_t h,
                          int rows) {
  const stsa_geometry *g = &d->geometry;
  const int64_t N = tokens(d), D = d->head_dim, F = g->frames, Wp = g->width;
  const int64_t P = g->height * Wp, L = F * P;
  const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  double *kd = load_keys(&x->t[1], b, h);
  double *p = malloc(sizeof(double) * (size_t)N),
         *mf = malloc(sizeof(double) * (size_t)F);
  double qd[512];
  mass_stats m;
  memset(&m, 0, sizeof m);
  double f0 = 0, far = 0;
  tu_rng rng = {0x5eed0000u + (uint64_t)h};
  for (int r = 0; r < rows; r++) {
    const int64_t vi = (int64_t)(tu_rng_next(&rng) % (uint64_t)L), i = v0 + vi;
    const int64_t fq = vi / P, yq = vi % P / Wp, xq = vi % Wp;
    load_row(&x->t[0], b, i, h, qd);
    softmax_row(qd, kd, N, D, p);
    memset(mf, 0, sizeof(double) * (size_t)F);
    double maxp = 0;
    for (int64_t j = 0; j < N; j++) {
      const double pj = p[j];
      const int64_t vj = j - v0;
      maxp = pj > maxp ? pj : maxp;
      if (vj < 0 || vj >= L) {
        m.text += pj;
        continue;
      }
      const int64_t f = vj / P, y = vj % P / Wp, xx = vj % Wp;
      mf[f] += pj;
      if (iabs64(f - fq) <= 2)
        m.near_t += pj;
      if (iabs64(y - yq) <= 3 && iabs64(xx - xq) <= 3)
        m.near_s += pj;
    }
    m.max_p += maxp;
    m.own_frame += mf[fq];
    m.uni_t += (double)count_within(fq, F, 2) / (double)F;
    m.uni_s +=
        (double)(count_within(yq, g->height, 3) * count_within(xq, Wp, 3)) / (double)P;
    /* Sink: only queries for which frame 0 is itself a far frame. */
    if (fq >= 3) {
      double sum = 0;
      int64_t nf = 0;
      for (int64_t f = 1; f < F; f++)
        if (iabs64(f - fq) > 2) {
          sum += mf[f];
          nf++;
        }
      if (nf > 0) {
        f0 += mf[0];
        far += sum / (double)nf;
      }
    }
  }
  m.near_t /= rows;
  m.near_s /= rows;
  m.uni_t /= rows;
  m.uni_s /= rows;
  m.own_frame /= rows;
  m.max_p /= rows;
  m.text /= rows;
  m.sink_ratio = far > 0 ? f0 / far : 0;
  free(kd);
  free(p);
  free(mf);
  return m;
}

/* One configuration: heads spatial, temporal, mixed; checks each kind and
 * their order. */
static void check_structure(const stsa_workload_desc *d, stsa_dtype dtype,
                            tu_layout layout, int64_t b, const char *what) {
  qkv x = alloc_qkv(d, dtype, layout);
  stsa_head_kind got[3];
  CHECK_STATUS(gen(d, &x, got), STSA_OK);
  CHECK(memcmp(got, SPATIAL_TEMPORAL_MIXED, sizeof got) == 0, "%s: kinds_out", what);
  mass_stats m[3];
  for (int h = 0; h < 3; h++) {
    m[h] = measure(d, &x, b, h, 32);
    printf("  %-28s %-8s near_t %.3f (uniform %.3f) near_s %.3f (uniform %.3f) own %.3f "
           "max_p %.3f text %.4f sink x%.1f\n",
           what, stsa_head_kind_name(got[h]), m[h].near_t, m[h].uni_t, m[h].near_s,
           m[h].uni_s, m[h].own_frame, m[h].max_p, m[h].text, m[h].sink_ratio);
  }
  const mass_stats *s = &m[0], *t = &m[1], *x3 = &m[2];
  /* Spatial: most mass within +-2 frames, spread inside the frames. */
  CHECK(s->near_t > 0.75, "%s spatial: %.3f within +-2 frames", what, s->near_t);
  CHECK(s->near_s < s->uni_s + 0.2, "%s spatial: %.3f in the 7x7 window (uniform %.3f)",
        what, s->near_s, s->uni_s);
  CHECK(s->own_frame < 0.7 && s->max_p < 0.05, "%s spatial: one-hot (own %.3f, max %.3f)",
        what, s->own_frame, s->max_p);
  /* Temporal: most mass near the query's position, frames alike. */
  CHECK(t->near_s > 0.8, "%s temporal: %.3f in the 7x7 window", what, t->near_s);
  CHECK(t->near_t < t->uni_t + 0.1, "%s temporal: %.3f within +-2 frames (uniform %.3f)",
        what, t->near_t, t->uni_t);
  CHECK(t->max_p < 0.3, "%s temporal: one-hot (max %.3f)", what, t->max_p);
  /* Mixed: in between on both axes, clearly away from either end. */
  CHECK(x3->near_t > t->near_t + 0.1 && x3->near_t < s->near_t - 0.05,
        "%s mixed: near_t %.3f not between %.3f and %.3f", what, x3->near_t, t->near_t,
        s->near_t);
  CHECK(x3->near_s > s->near_s + 0.2 && x3->near_s < t->near_s - 0.05,
        "%s mixed: near_s %.3f not between %.3f and %.3f", what, x3->near_s, s->near_s,
        t->near_s);
  /* Sink: frame 0 well above an average far frame, for every kind. */
  for (int h = 0; h < 3; h++)
    CHECK(m[h].sink_ratio > 2.0, "%s %s: frame 0 only x%.2f a far frame", what,
          stsa_head_kind_name(got[h]), m[h].sink_ratio);
  free_qkv(&x);
}

static void test_structure(void) {
  const int64_t dims[2] = {64, 128};
  for (int di = 0; di < 2; di++) {
    const int64_t D = dims[di];
    char what[64];
    stsa_workload_desc d =
        make_desc(9, 12, 16, 0, STSA_TEXT_NONE, 1, 3, D, 1, SPATIAL_TEMPORAL_MIXED);
    snprintf(what, sizeof what, "D%lld no text", (long long)D);
    check_structure(&d, STSA_F32, TU_BSHD, 0, what);
    d = make_desc(9, 12, 16, 226, STSA_TEXT_PREFIX, 1, 3, D, 2, SPATIAL_TEMPORAL_MIXED);
    snprintf(what, sizeof what, "D%lld prefix 226", (long long)D);
    check_structure(&d, STSA_F32, TU_BSHD, 0, what);
    /* Suffix with padding, bf16 in [B,H,S,D], measured on batch entry 1. */
    d = make_desc(9, 12, 16, 64, STSA_TEXT_SUFFIX, 2, 3, D, 3, SPATIAL_TEMPORAL_MIXED);
    d.geometry.text_real = 40;
    snprintf(what, sizeof what, "D%lld suffix 64 bf16 b1", (long long)D);
    check_structure(&d, STSA_BF16, TU_BHSD, 1, what);
  }
}

/* ---- semantic heads ------------------------------------------------------------ */
/* The test's view of identities (the generator keeps them to itself): key j
 * shares query token i's identity iff k_i . k_j >= SAME_ID |k_i|^2. The
 * identity vector carries 6.5 of the ~8.3 score units of |k_i|^2 / sqrt(D),
 * the position terms add -0.3 .. 0.9 and the sink is absent from a key of
 * frame >= 1, so same-identity keys lie at 0.65-1 and the others below 0.3
 * (measured over the rows below, F 13-21, D 64/128, bf16). */
#define SAME_ID 0.46

typedef struct sem_stats {
  double same;       /* mass on keys of the query's identity (semantic heads) */
  double in_mask[2]; /* mass kept by the session's spatial and temporal masks */
  int moved, still;  /* rows whose identity's positions in frame 0 and frame F-1
                        overlap by < 30% (an object) and > 70% (background) */
  int fast;          /* rows whose identity's positions in frames 1 and 2 overlap
                        by < 50%: it moves by about its radius per frame */
  double time_gap;   /* rms over rows of |o_near - o_all| / |o_all|: o_all the
                        output of the row's softmax restricted to its identity's
                        keys, o_near to those within +-1 frame of the query */
} sem_stats;

/* |A n B| / |A u B| of two position sets (flags [P]); -1 if either is empty. */
static double jaccard(const unsigned char *a, const unsigned char *b, int64_t P) {
  int64_t both = 0, any = 0, na = 0, nb = 0;
  for (int64_t p = 0; p < P; p++) {
    both += a[p] && b[p];
    any += a[p] || b[p];
    na += a[p];
    nb += b[p];
  }
  return na && nb ? (double)both / (double)any : -1.0;
}

/* `rows` sampled video queries of frames >= 1 of (batch b, head h): where
 * their mass lies, by identity (of head `id_head`'s keys) and by mask. */
static sem_stats measure_semantic(const stsa_workload_desc *d, const qkv *x, int64_t b,
                                  int64_t h, int64_t id_head, stsa_mask *const masks[2],
                                  int rows) {
  const stsa_geometry *g = &d->geometry;
  const int64_t N = tokens(d), D = d->head_dim, F = g->frames, P = g->height * g->width;
  const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
  double *kd = load_keys(&x->t[1], b, h), *vd = load_keys(&x->t[2], b, h);
  double *kid = id_head == h ? kd : load_keys(&x->t[1], b, id_head);
  double *p = malloc(sizeof(double) * (size_t)N);
  unsigned char *first = malloc((size_t)(4 * P));
  unsigned char *last = first + P, *second = last + P, *third = second + P;
  double qd[512], o_all[512], o_near[512], gap2 = 0;
  sem_stats m;
  memset(&m, 0, sizeof m);
  tu_rng rng = {0x5e3a0000u + (uint64_t)h};
  for (int r = 0; r < rows; r++) {
    const int64_t vi = P + (int64_t)(tu_rng_next(&rng) % (uint64_t)((F - 1) * P));
    const int64_t i = v0 + vi;
    const double *ki = kid + i * D;
    double self = 0;
    for (int64_t e = 0; e < D; e++)
      self += ki[e] * ki[e];
    load_row(&x->t[0], b, i, h, qd);
    softmax_row(qd, kd, N, D, p);
    const int64_t fq = vi / P;
    memset(first, 0, (size_t)(4 * P));
    memset(o_all, 0, sizeof(double) * (size_t)D);
    memset(o_near, 0, sizeof(double) * (size_t)D);
    double z_all = 0, z_near = 0;
    for (int64_t j = 0; j < N; j++) {
      for (int mi = 0; mi < 2; mi++)
        if (stsa_mask_keep(masks[mi], i, j))
          m.in_mask[mi] += p[j];
      const int64_t vj = j - v0;
      if (vj < 0 || vj >= F * P)
        continue;
      double dot = 0;
      for (int64_t e = 0; e < D; e++)
        dot += ki[e] * kid[j * D + e];
      if (dot < SAME_ID * self)
        continue;
      m.same += p[j];
      const int64_t f = vj / P, at = vj % P;
      first[at] |= f == 0;
      last[at] |= f == F - 1;
      second[at] |= f == 1;
      third[at] |= f == 2;
      const int near = f >= fq - 1 && f <= fq + 1;
      z_all += p[j];
      z_near += near ? p[j] : 0;
      for (int64_t e = 0; e < D; e++) {
        o_all[e] += p[j] * vd[j * D + e];
        o_near[e] += near ? p[j] * vd[j * D + e] : 0;
      }
    }
    const double overlap = jaccard(first, last, P), step = jaccard(second, third, P);
    m.moved += overlap >= 0 && overlap < 0.3;
    m.still += overlap > 0.7;
    m.fast += step >= 0 && step < 0.5;
    double d2 = 0, n2 = 0;
    for (int64_t e = 0; e < D; e++) {
      const double a = o_all[e] / z_all, n = z_near > 0 ? o_near[e] / z_near : 0;
      d2 += (n - a) * (n - a);
      n2 += a * a;
    }
    gap2 += n2 > 0 ? d2 / n2 : 0;
  }
  m.time_gap = sqrt(gap2 / rows);
  m.same /= rows;
  m.in_mask[0] /= rows;
  m.in_mask[1] /= rows;
  if (kid != kd)
    free(kid);
  free(kd);
  free(vd);
  free(p);
  free(first);
  return m;
}

/* Heads spatial, temporal, semantic at density 0.25: the semantic head puts
 * over 92% of its mass on its identity, which moves fast for objects and
 * stays for background, its v changes over the frames, and SVG's masks hold
 * clearly less of it than of their kinds. */
static void check_semantic(const stsa_workload_desc *d, stsa_dtype dtype,
                           tu_layout layout, int64_t b, const char *what) {
  static const stsa_head_kind kinds[3] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                          STSA_HEAD_SEMANTIC};
  const int rows = 48;
  stsa_workload_desc wd = *d;
  wd.heads = 3;
  wd.kinds = kinds;
  qkv x = alloc_qkv(&wd, dtype, layout);
  stsa_head_kind got[3];
  CHECK_STATUS(gen(&wd, &x, got), STSA_OK);
  CHECK(memcmp(got, kinds, sizeof got) == 0, "%s: kinds_out", what);
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = wd.geometry;
  cfg.heads = wd.heads;
  cfg.head_dim = wd.head_dim;
  cfg.density = 0.25;
  cfg.sample_rows = 16;
  cfg.sink_frames = 1;
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_mask *masks[2] = {NULL, NULL};
  for (int mi = 0; svg && mi < 2; mi++)
    CHECK_STATUS(stsa_svg_kind_mask(svg, kinds[mi], &masks[mi], NULL, NULL), STSA_OK);
  if (masks[0] && masks[1]) {
    sem_stats m[3];
    for (int h = 0; h < 3; h++) {
      m[h] = measure_semantic(&wd, &x, b, h, 2, masks, rows);
      printf("  %-28s %-8s same identity %.3f  spatial mask %.3f  temporal mask %.3f  "
             "rows moved %d still %d fast %d of %d  near/all frames %.3f\n",
             what, stsa_head_kind_name(got[h]), m[h].same, m[h].in_mask[0],
             m[h].in_mask[1], m[h].moved, m[h].still, m[h].fast, rows, m[h].time_gap);
    }
    const sem_stats *sem = &m[2];
    CHECK(sem->same > 0.92, "%s semantic: %.3f of the mass on the identity", what,
          sem->same);
    CHECK(sem->in_mask[0] < m[0].in_mask[0] - 0.2,
          "%s: spatial mask holds %.3f of the semantic head, %.3f of the spatial one",
          what, sem->in_mask[0], m[0].in_mask[0]);
    CHECK(sem->in_mask[1] < m[1].in_mask[1] - 0.2,
          "%s: temporal mask holds %.3f of the semantic head, %.3f of the temporal one",
          what, sem->in_mask[1], m[1].in_mask[1]);
    /* Objects sit elsewhere in the last frame and move by about their radius
     * per frame; background regions stay. */
    CHECK(sem->moved >= 3 && sem->still >= 3, "%s: %d rows moved, %d still", what,
          sem->moved, sem->still);
    CHECK(sem->fast >= sem->moved - 1, "%s: %d of %d moving rows move fast", what,
          sem->fast, sem->moved);
    /* v changes over the frames: the identity seen in +-1 frame is another
     * output than the identity over all frames (what SVG's frame window gets
     * wrong even where it holds the identity). */
    CHECK(sem->time_gap > 0.25, "%s: near and all frames differ by only %.3f", what,
          sem->time_gap);
    /* The other kinds attend less by this identity (a temporal head still
     * finds the static background regions at its own position). */
    for (int h = 0; h < 2; h++)
      CHECK(m[h].same < sem->same - 0.2, "%s %s: %.3f on the semantic identity", what,
            stsa_head_kind_name(got[h]), m[h].same);
  }
  stsa_mask_free(masks[0]);
  stsa_mask_free(masks[1]);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  free_qkv(&x);
}

static void test_semantic(void) {
  stsa_workload_desc d = make_desc(13, 24, 32, 0, STSA_TEXT_NONE, 1, 3, 64, 1, NULL);
  check_semantic(&d, STSA_F32, TU_BSHD, 0, "F13 24x32 D64");
  /* Suffix with padding, bf16 in [B,H,S,D], measured on batch entry 1. */
  d = make_desc(13, 20, 30, 64, STSA_TEXT_SUFFIX, 2, 3, 128, 2, NULL);
  d.geometry.text_real = 40;
  check_semantic(&d, STSA_BF16, TU_BHSD, 1, "F13 20x30 D128 suffix bf16 b1");
  d = make_desc(21, 30, 52, 226, STSA_TEXT_PREFIX, 1, 3, 128, 3, NULL);
  check_semantic(&d, STSA_F32, TU_BSHD, 0, "F21 30x52 D128 prefix 226");
}

/* Text tokens carry content only: zero-mean, unit-scale noise. */
static void test_text_content(void) {
  stsa_workload_desc d = make_desc(3, 4, 5, 300, STSA_TEXT_PREFIX, 1, 2, 64, 5, NULL);
  qkv x = alloc_qkv(&d, STSA_F32, TU_BSHD);
  CHECK_STATUS(gen(&d, &x, NULL), STSA_OK);
  for (int i = 0; i < 3; i++) {
    double sum = 0, sq = 0;
    int64_t n = 0;
    for (int64_t s = 0; s < 300; s++)
      for (int64_t h = 0; h < 2; h++)
        for (int64_t e = 0; e < 64; e++, n++) {
          double v = tu_load(x.t[i].data, STSA_F32, tu_offset(&x.t[i], 0, s, h, e));
          sum += v;
          sq += v * v;
        }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
    CHECK(fabs(mean) < 0.03 && fabs(sd - 1) < 0.05, "text tensor %d: mean %.3f sd %.3f",
          i, mean, sd);
  }
  free_qkv(&x);
}

/* ---- default kinds ------------------------------------------------------------- */
static void test_default_kinds(void) {
  const int64_t Hs[5] = {1, 2, 12, 24, 40};
  /* round(29.2% H) spatial; for H >= 12 max(1, round(4.1% H)) mixed */
  const int64_t want_s[5] = {0, 1, 4, 7, 12}, want_m[5] = {0, 0, 1, 1, 2};
  for (int i = 0; i < 5; i++) {
    const int64_t H = Hs[i];
    stsa_workload_desc d = make_desc(2, 2, 3, 0, STSA_TEXT_NONE, 1, H, 8, 1, NULL);
    qkv x = alloc_qkv(&d, STSA_F32, TU_BSHD);
    stsa_head_kind kinds[40];
    CHECK_STATUS(gen(&d, &x, kinds), STSA_OK);
    int64_t n[3] = {0, 0, 0}, first_half_s = 0;
    for (int64_t h = 0; h < H; h++) {
      if ((unsigned)kinds[h] < 3)
        n[kinds[h]]++;
      first_half_s += kinds[h] == STSA_HEAD_SPATIAL && h < H / 2;
    }
    printf("  default kinds H=%-2lld: %lld spatial, %lld temporal, %lld mixed\n",
           (long long)H, (long long)n[0], (long long)n[1], (long long)n[2]);
    CHECK(n[0] + n[1] + n[2] == H, "H=%lld: invalid kinds", (long long)H);
    CHECK(n[0] == want_s[i] && n[2] == want_m[i] && n[1] >= n[0] + n[2],
          "H=%lld: %lld spatial %lld temporal %lld mixed", (long long)H, (long long)n[0],
          (long long)n[1], (long long)n[2]);
    if (H >= 12) /* spread over the heads, not bunched at one end */
      CHECK(first_half_s > 0 && first_half_s < n[0], "H=%lld: spatial heads bunched",
            (long long)H);
    /* The same with another seed. */
    stsa_head_kind again[40];
    d.seed = 99;
    CHECK_STATUS(gen(&d, &x, again), STSA_OK);
    CHECK(memcmp(kinds, again, (size_t)H * sizeof kinds[0]) == 0,
          "H=%lld: seed changes kinds", (long long)H);
    free_qkv(&x);
  }
}

/* ---- edge shapes --------------------------------------------------------------- */
static int all_finite(const stsa_tensor *t) {
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t s = 0; s < t->shape[1]; s++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t e = 0; e < t->shape[3]; e++)
          if (!isfinite(tu_load(t->data, t->dtype, tu_offset(t, b, s, h, e))))
            return 0;
  return 1;
}

static void test_edge_shapes(void) {
  const int64_t dims[7] = {1, 2, 5, 7, 8, 9, 512};
  /* temporal, mixed; then semantic heads, whose identity dims are few or none */
  const stsa_head_kind *kinds[2] = {SPATIAL_TEMPORAL_MIXED + 1, WITH_SEMANTIC + 2};
  for (int ki = 0; ki < 2; ki++)
    for (int i = 0; i < 7; i++) {
      stsa_workload_desc d =
          make_desc(3, 2, 4, 2, STSA_TEXT_SUFFIX, 1, 2, dims[i], 3, kinds[ki]);
      qkv x = alloc_qkv(&d, STSA_F16, TU_BSHD);
      CHECK_STATUS(gen(&d, &x, NULL), STSA_OK);
      for (int t = 0; t < 3; t++)
        CHECK(all_finite(&x.t[t]), "D=%lld kinds %d: tensor %d not finite",
              (long long)dims[i], ki, t);
      free_qkv(&x);
    }
  /* One token of video; text 0 with a text position is allowed. */
  stsa_workload_desc d = make_desc(1, 1, 1, 0, STSA_TEXT_PREFIX, 1, 1, 16, 3, NULL);
  qkv x = alloc_qkv(&d, STSA_F32, TU_SHD);
  CHECK_STATUS(gen(&d, &x, NULL), STSA_OK);
  CHECK(!tu_is_sentinel(&x.t[0]) && all_finite(&x.t[0]), "1-token workload");
  free_qkv(&x);
}

/* ---- invalid input ------------------------------------------------------------- */
/* Calls with `call` (possibly broken descriptors of the fixture's tensors)
 * and checks that the fixture `x` and kinds_out kept their sentinel. */
static void expect_fail(const stsa_workload_desc *d, const stsa_tensor call[3],
                        const qkv *x, stsa_status want, const char *what) {
  stsa_head_kind kinds[4];
  memset(kinds, 0x5a, sizeof kinds);
  stsa_status st = stsa_workload_generate(d, &call[0], &call[1], &call[2], kinds);
  CHECK(st == want, "%s: got %s, expected %s", what, stsa_status_str(st),
        stsa_status_str(want));
  int untouched = 1;
  for (int i = 0; i < 3; i++)
    untouched &= tu_is_sentinel(&x->t[i]);
  for (size_t i = 0; i < sizeof kinds; i++)
    untouched &= ((unsigned char *)kinds)[i] == 0x5a;
  CHECK(untouched, "%s: output written on error", what);
}

static void test_invalid(void) {
  const stsa_head_kind kinds4[4] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                    STSA_HEAD_MIXED, STSA_HEAD_TEMPORAL};
  const stsa_workload_desc ok =
      make_desc(3, 4, 5, 6, STSA_TEXT_PREFIX, 2, 4, 16, 1, kinds4);
  qkv x = alloc_qkv(&ok, STSA_F32, TU_BSHD);
  stsa_workload_desc d;

  CHECK_STATUS(stsa_workload_generate(NULL, &x.t[0], &x.t[1], &x.t[2], NULL),
               STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_workload_generate(&ok, NULL, &x.t[1], &x.t[2], NULL),
               STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_workload_generate(&ok, &x.t[0], NULL, &x.t[2], NULL),
               STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_workload_generate(&ok, &x.t[0], &x.t[1], NULL, NULL),
               STSA_ERR_NULL_ARG);

#define BAD_DESC(field_change, want)                                                     \
  do {                                                                                   \
    d = ok;                                                                              \
    field_change;                                                                        \
    expect_fail(&d, x.t, &x, want, #field_change);                                       \
  } while (0)
  BAD_DESC(d.geometry.frames = 0, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.geometry.height = 0, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.geometry.width = -1, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.geometry.text = -1, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.geometry.text_real = 7, STSA_ERR_BAD_PARAM);
  BAD_DESC(d.geometry.text_real = -1, STSA_ERR_BAD_PARAM);
  BAD_DESC(d.geometry.text_pos = STSA_TEXT_NONE, STSA_ERR_BAD_PARAM);
  BAD_DESC(d.geometry.text_pos = (stsa_text_pos)7, STSA_ERR_BAD_PARAM);
  BAD_DESC((d.geometry.frames = (int64_t)1 << 40, d.geometry.height = (int64_t)1 << 40),
           STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.geometry.text = INT64_MAX, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.batch = 0, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.heads = 0, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.head_dim = 0, STSA_ERR_BAD_SHAPE);
  /* Descriptor valid but not the tensors' shape. */
  BAD_DESC(d.batch = 1, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.heads = 3, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.head_dim = 8, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.geometry.text = d.geometry.text_real = 5, STSA_ERR_BAD_SHAPE);
  BAD_DESC(d.geometry.width = 4, STSA_ERR_BAD_SHAPE);
#undef BAD_DESC

  stsa_head_kind bad_kinds[4] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                 STSA_HEAD_KIND_COUNT_, STSA_HEAD_MIXED};
  d = ok;
  d.kinds = bad_kinds;
  expect_fail(&d, x.t, &x, STSA_ERR_BAD_PARAM, "kinds[2] invalid");

  /* Bad tensors, one at a time: each must stop the call before any write. */
  for (int i = 0; i < 3; i++) {
    stsa_tensor call[3] = {x.t[0], x.t[1], x.t[2]};
    call[i].shape[STSA_DIM_B]++;
    expect_fail(&ok, call, &x, STSA_ERR_BAD_SHAPE, "tensor B + 1");
    call[i] = x.t[i];
    call[i].shape[STSA_DIM_D]--;
    expect_fail(&ok, call, &x, STSA_ERR_BAD_SHAPE, "tensor D - 1");
    call[i] = x.t[i];
    call[i].data = NULL;
    expect_fail(&ok, call, &x, STSA_ERR_NULL_ARG, "tensor data NULL");
    call[i] = x.t[i];
    call[i].dtype = STSA_DTYPE_COUNT_;
    expect_fail(&ok, call, &x, STSA_ERR_BAD_DTYPE, "tensor dtype invalid");
    call[i] = x.t[i];
    call[i].stride[STSA_DIM_H] = 1; /* heads alias head-dim elements */
    expect_fail(&ok, call, &x, STSA_ERR_BAD_STRIDE, "tensor strides alias");
    call[i] = x.t[i];
    call[i].data = (char *)call[i].data + 1;
    expect_fail(&ok, call, &x, STSA_ERR_MISALIGNED, "tensor misaligned");
  }
  /* Outputs that share elements: the same tensor twice, or k one element
   * into q's buffer. */
  {
    stsa_tensor call[3] = {x.t[0], x.t[0], x.t[2]};
    expect_fail(&ok, call, &x, STSA_ERR_OVERLAP, "k is q");
    call[1] = x.t[1], call[2] = x.t[1];
    expect_fail(&ok, call, &x, STSA_ERR_OVERLAP, "v is k");
    call[1] = x.t[0], call[2] = x.t[2];
    call[1].data = (float *)x.t[0].data + 1;
    expect_fail(&ok, call, &x, STSA_ERR_OVERLAP, "k one element into q");
  }
  CHECK_STATUS(gen(&ok, &x, NULL), STSA_OK); /* the fixture itself was valid */
  free_qkv(&x);
}

/* A fused QKV buffer [B, N, 3, H, D]: q, k and v interleave without sharing an
 * element, which is accepted and gives what separate buffers give; offsets
 * that make them share elements are refused. */
static void test_fused_qkv(void) {
  const stsa_workload_desc d =
      make_desc(2, 3, 4, 2, STSA_TEXT_SUFFIX, 2, 3, 16, 7, SPATIAL_TEMPORAL_MIXED);
  const int64_t B = d.batch, N = tokens(&d), H = d.heads, D = d.head_dim;
  qkv sep = alloc_qkv(&d, STSA_F32, TU_BSHD);
  CHECK_STATUS(gen(&d, &sep, NULL), STSA_OK);
  float *fused = tu_guarded_alloc(sizeof(float) * (size_t)(B * N * 3 * H * D));
  stsa_tensor t[3];
  for (int i = 0; i < 3; i++) {
    t[i] = stsa_tensor_bshd(fused + i * H * D, STSA_F32, B, N, H, D);
    t[i].stride[0] = N * 3 * H * D;
    t[i].stride[1] = 3 * H * D;
  }
  CHECK_STATUS(stsa_workload_generate(&d, &t[0], &t[1], &t[2], NULL), STSA_OK);
  for (int i = 0; i < 3; i++)
    CHECK(tu_max_abs_diff(&t[i], &sep.t[i], NULL) == 0, "fused tensor %d differs", i);
  /* k half a head further: its elements meet q's and v's */
  stsa_tensor k = t[1];
  k.data = fused + H * D + D / 2;
  CHECK_STATUS(stsa_workload_generate(&d, &t[0], &k, &t[2], NULL), STSA_ERR_OVERLAP);
  /* k on v's heads 1.. and beyond: they share */
  k.data = fused + 2 * H * D + D;
  CHECK_STATUS(stsa_workload_generate(&d, &t[0], &k, &t[2], NULL), STSA_ERR_OVERLAP);
  /* one f16 view among f32 ones over the same bytes: refused (byte ranges) */
  stsa_tensor v16 = t[2];
  v16.dtype = STSA_F16;
  CHECK_STATUS(stsa_workload_generate(&d, &t[0], &t[1], &v16, NULL), STSA_ERR_OVERLAP);
  CHECK(tu_guard_ok(fused), "fused buffer guards");
  tu_guarded_free(fused);
  free_qkv(&sep);
}

/* ---- timing -------------------------------------------------------------------- */
static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wan 720p with the default mix in f32 and bf16, then 2 semantic heads at
 * 32760 tokens (HunyuanVideo 480p's video). */
static void time_generation(void) {
  static const stsa_head_kind two_semantic[2] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SEMANTIC};
  for (int i = 0; i < 3; i++) {
    stsa_workload_desc d =
        i < 2 ? make_desc(21, 45, 80, 0, STSA_TEXT_NONE, 1, 2, 128, 1, NULL)
              : make_desc(21, 30, 52, 0, STSA_TEXT_NONE, 1, 2, 128, 1, two_semantic);
    const int64_t N = tokens(&d);
    const stsa_dtype dtypes[3] = {STSA_F32, STSA_BF16, STSA_F32};
    size_t bytes = (size_t)(N * 2 * 128) * stsa_dtype_size(dtypes[i]);
    void *buf[3];
    stsa_tensor t[3];
    for (int j = 0; j < 3; j++) {
      buf[j] = malloc(bytes);
      t[j] = stsa_tensor_bshd(buf[j], dtypes[i], 1, N, 2, 128);
    }
    double t0 = now_s();
    stsa_status st = stsa_workload_generate(&d, &t[0], &t[1], &t[2], NULL);
    double t1 = now_s();
    CHECK(st == STSA_OK, "generation %d: %s", i, stsa_status_str(st));
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("  %s (21x%lldx%lld = %lld tokens) x 2 %s heads x D 128, %s: %.3f s on %d "
           "thread(s)\n",
           i < 2 ? "Wan 720p" : "Hunyuan 480p", (long long)d.geometry.height,
           (long long)d.geometry.width, (long long)N, i < 2 ? "default" : "semantic",
           stsa_dtype_name(dtypes[i]), t1 - t0, threads);
    for (int j = 0; j < 3; j++)
      free(buf[j]);
  }
}

int main(void) {
  test_names();
  test_determinism(NULL);
  test_determinism(WITH_SEMANTIC);
  test_frozen_kinds();
  test_structure();
  test_semantic();
  test_text_content();
  test_default_kinds();
  test_edge_shapes();
  test_invalid();
  test_fused_qkv();
  time_generation();
  return tu_finish("test_workload");
}
