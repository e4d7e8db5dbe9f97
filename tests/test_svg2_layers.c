/*
 * test_svg2_layers.c — SVG2's per-layer state is a map of the layers a
 * session has seen, not an array indexed by the layer: any layer in
 * [0, INT64_MAX] works (INT64_MAX, 2^58 + 9, 2^31 - 1, one whose multiple
 * wraps a size), each keeps its own centroids (a layer's first call is cold,
 * its next ones warm, whatever other layers ran in between, and its outputs
 * are bitwise those of a session that saw that layer alone), hundreds of
 * distinct layers keep theirs, and a huge layer costs what layer 0 does
 * (resident memory). Huge steps too, on SVG and SVG2 sessions.
 * Run under the ASan+UBSan build as well.
 */
#define STSA_EXPERIMENTAL       /* stsa_workload_generate */
#define _POSIX_C_SOURCE 200809L /* getrusage */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "mask_util.h"
#include "testutil.h"

/* 64 tokens: a call is well under a millisecond, so a growing store shows */
static const stsa_geometry GEO = {2, 4, 8, 0, 0, STSA_TEXT_NONE};
enum { H = 2, D = 16 };

static stsa_svg_config config(int method) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = GEO;
  c.heads = H;
  c.head_dim = D;
  c.density = 0.3;
  c.sample_rows = 16;
  c.sink_frames = 1;
  c.seed = 5;
  c.method = method;
  c.svg2.q_clusters = 4;
  c.svg2.kv_clusters = 8;
  c.svg2.top_p = 0.9;
  return c;
}

typedef struct problem {
  stsa_tensor q, k, v;
  int64_t N;
} problem;

static problem make_problem(int64_t B) {
  const stsa_head_kind kinds[H] = {STSA_HEAD_SEMANTIC, STSA_HEAD_SPATIAL};
  problem p = {.N = tu_tokens(&GEO)};
  p.q = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, p.N, H, D);
  p.k = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, p.N, H, D);
  p.v = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, p.N, H, D);
  stsa_workload_desc d = STSA_INIT(stsa_workload_desc);
  d.geometry = GEO;
  d.batch = B;
  d.heads = H;
  d.head_dim = D;
  d.seed = 9;
  d.kinds = kinds;
  CHECK_STATUS(stsa_workload_generate(&d, &p.q, &p.k, &p.v, NULL), STSA_OK);
  return p;
}

static void free_problem(problem *p) {
  tu_free_tensor(&p->q);
  tu_free_tensor(&p->k);
  tu_free_tensor(&p->v);
}

static stsa_ctx *make_ctx(void) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  return ctx;
}

/* One call; returns the report's cold flag, or -1 when the call failed. */
static int call(stsa_svg *svg, stsa_ctx *ctx, int64_t layer, int64_t step,
                const problem *p, stsa_tensor *out) {
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  stsa_status st = stsa_svg_attention(svg, layer, step, &p->q, &p->k, &p->v, out, &rep);
  CHECK(st == STSA_OK, "layer %lld step %lld: %s (%s)", (long long)layer, (long long)step,
        stsa_status_str(st), stsa_ctx_last_error(ctx));
  CHECK(tu_guard_ok(out->data), "layer %lld: guard bytes around the output",
        (long long)layer);
  return st == STSA_OK ? rep.cold : -1;
}

/* Layers that broke the array: INT64_MAX (layer + 1 overflows), 2^58 + 9
 * (64-byte states: the size wraps to 640 bytes), 2^31 - 1 (137 GB), 1e8
 * (6.4 GB), one whose 3x wraps to 2 bytes (the MPI library's H = 3 kinds),
 * and small ones next to them. */
static const int64_t LAYERS[] = {INT64_MAX,
                                 ((int64_t)1 << 58) + 9,
                                 INT32_MAX,
                                 6148914691236517205, /* 3 (x + 1) = 2^64 + 2 */
                                 0,
                                 1,
                                 INT64_MAX - 1,
                                 100000000};
enum { NL = sizeof LAYERS / sizeof LAYERS[0] };

/* Every layer of one session cold then warm, then every layer again warm
 * (later layers grew the store in between); each layer's outputs bitwise
 * those of a session that saw only that layer. */
static void test_huge_layers(void) {
  stsa_ctx *ctx = make_ctx();
  problem p = make_problem(1);
  const stsa_svg_config cfg = config(STSA_SVG_METHOD_SVG2);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_tensor out[NL][3];
  for (int i = 0; i < NL; i++) {
    for (int c = 0; c < 2; c++) {
      out[i][c] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
      const int cold = call(svg, ctx, LAYERS[i], c, &p, &out[i][c]);
      CHECK(cold == !c, "layer %lld call %d: cold %d, expected %d", (long long)LAYERS[i],
            c, cold, !c);
    }
  }
  for (int i = NL - 1; i >= 0; i--) {
    out[i][2] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
    const int cold = call(svg, ctx, LAYERS[i], 2, &p, &out[i][2]);
    CHECK(cold == 0, "layer %lld, third call after %d other layers: cold %d",
          (long long)LAYERS[i], NL - 1, cold);
  }
  stsa_svg_free(svg);
  for (int i = 0; i < NL; i++) {
    stsa_svg *alone = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &alone), STSA_OK);
    for (int c = 0; alone && c < 3; c++) {
      stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
      call(alone, ctx, LAYERS[i], c, &p, &o);
      CHECK(tu_same_bytes(&o, &out[i][c]),
            "layer %lld call %d: output differs from a session of that layer alone",
            (long long)LAYERS[i], c);
      tu_free_tensor(&o);
    }
    stsa_svg_free(alone);
    for (int c = 0; c < 3; c++)
      tu_free_tensor(&out[i][c]);
  }
  /* negative layers and steps stay refused, with a message */
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
  CHECK_STATUS(stsa_svg_attention(svg, INT64_MIN, 0, &p.q, &p.k, &p.v, &o, NULL),
               STSA_ERR_BAD_PARAM);
  CHECK(strstr(stsa_ctx_last_error(ctx), "must be >= 0") != NULL, "message: %s",
        stsa_ctx_last_error(ctx));
  CHECK(tu_is_sentinel(&o), "a refused call writes nothing");
  stsa_svg_free(svg);
  tu_free_tensor(&o);
  free_problem(&p);
  stsa_ctx_free(ctx);
}

/* Hundreds of distinct huge layers (the store grows several times), then
 * every one again: all warm. */
static void test_many_layers(void) {
  enum { MANY = 300 };
  stsa_ctx *ctx = make_ctx();
  problem p = make_problem(1);
  const stsa_svg_config cfg = config(STSA_SVG_METHOD_SVG2);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
  int64_t layer[MANY];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < MANY; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    /* distinct: the top bits spread them, the low ones hold i */
    layer[i] = (int64_t)((x >> 1) & ~(uint64_t)0x3ff) | i;
  }
  int bad_cold = 0, bad_warm = 0;
  for (int i = 0; i < MANY; i++)
    bad_cold += call(svg, ctx, layer[i], 0, &p, &o) != 1;
  for (int i = 0; i < MANY; i++)
    bad_warm += call(svg, ctx, layer[i], 1, &p, &o) != 0;
  CHECK(bad_cold == 0 && bad_warm == 0,
        "%d distinct layers: %d first calls not cold, %d second calls not warm", MANY,
        bad_cold, bad_warm);
  stsa_svg_free(svg);
  tu_free_tensor(&o);
  free_problem(&p);
  stsa_ctx_free(ctx);
}

/* A new batch size starts a huge layer cold again; steps up to INT64_MAX
 * (the sampled rows mix the step in) on SVG and SVG2 sessions. */
static void test_batch_and_steps(void) {
  stsa_ctx *ctx = make_ctx();
  problem p1 = make_problem(1), p2 = make_problem(2);
  for (int method = 0; method < 2; method++) {
    const stsa_svg_config cfg = config(method);
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
    stsa_tensor o1 = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p1.N, H, D);
    stsa_tensor o2 = tu_sentinel_tensor(STSA_F32, TU_BSHD, 2, p2.N, H, D);
    const int64_t steps[] = {INT64_MAX, 0, INT64_MAX - 1};
    for (int s = 0; s < 3; s++) {
      int cold = call(svg, ctx, INT64_MAX, steps[s], &p1, &o1);
      CHECK(cold == (method == 1 && s == 0), "%s step %lld: cold %d",
            stsa_svg_method_name(method), (long long)steps[s], cold);
    }
    int cold = call(svg, ctx, INT64_MAX, INT64_MAX, &p2, &o2);
    CHECK(cold == (method == 1), "%s, batch 2 after batch 1: cold %d",
          stsa_svg_method_name(method), cold);
    cold = call(svg, ctx, INT64_MAX, 3, &p2, &o2);
    CHECK(cold == 0, "%s, batch 2 again: cold %d", stsa_svg_method_name(method), cold);
    stsa_svg_free(svg);
    tu_free_tensor(&o1);
    tu_free_tensor(&o2);
  }
  free_problem(&p1);
  free_problem(&p2);
  stsa_ctx_free(ctx);
}

static long max_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* A huge layer costs what a small one does: calls at 1e8 and 2^31 - 1 add
 * no resident memory to speak of (the array took 6.4 GB and 30 s at 1e8 and
 * failed at 2^31 - 1; resident memory, not time, so that a loaded machine
 * or an emulator cannot fail it); the second call at each is warm, so the
 * store holds each layer once. */
static void test_memory_flat(void) {
  stsa_ctx *ctx = make_ctx();
  problem p = make_problem(1);
  const stsa_svg_config cfg = config(STSA_SVG_METHOD_SVG2);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
  call(svg, ctx, 0, 0, &p, &o); /* first-call allocations out of the way */
  const long rss0 = max_rss_kb();
  const int64_t huge[] = {100000000, INT32_MAX, 100000000, INT32_MAX};
  for (int i = 0; i < 4; i++) {
    const int cold = call(svg, ctx, huge[i], i, &p, &o);
    CHECK(cold == (i < 2), "layer %lld, call %d there: cold %d", (long long)huge[i],
          i / 2 + 1, cold);
  }
  const long grown_kb = max_rss_kb() - rss0;
  /* generous for the sanitizer build: the array needed gigabytes */
  CHECK(grown_kb < 64 * 1024,
        "calls at layers 1e8 and 2^31-1 grew the resident set by %ld MB",
        grown_kb / 1024);
  stsa_svg_free(svg);
  tu_free_tensor(&o);
  free_problem(&p);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_memory_flat();
  test_huge_layers();
  test_many_layers();
  test_batch_and_steps();
  return tu_finish("test_svg2_layers");
}
