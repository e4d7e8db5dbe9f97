/*
 * test_svg2_tiles.c — SVG2 sessions take any q_tile an SVG session takes
 * and round it up to the backend's register tile (mr rows) at the call, as
 * block-sparse plans do: on every tiled backend this machine runs, q tiles
 * 6, 18, 100 and automatic with kv tiles 32 and automatic run (cold and
 * warm, with and without an error budget, which mixes the session's dense
 * plan with the cluster plans), stsa_svg_get_windows reports the tiles the
 * calls use, and the output is bitwise that of a session given the rounded
 * tile. A session keeps working when its context moves to a backend with
 * another register tile. kv tiles that are no multiple of 16 stay refused
 * at create, by SVG and SVG2 alike.
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "kernel/dispatch.h"
#include "mask_util.h"
#include "testutil.h"

/* 1152 video tokens in 4 query clusters: each cluster is cut into many q
 * tiles, so the tile size shapes the plans */
static const stsa_geometry GEO = {6, 12, 16, 0, 0, STSA_TEXT_NONE};
enum { H = 2, D = 32 };

static stsa_svg_config config(int method, int q_tile, int kv_tile) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = GEO;
  c.heads = H;
  c.head_dim = D;
  c.density = 0.25;
  c.sample_rows = 48;
  c.sink_frames = 1;
  c.seed = 3;
  c.method = method;
  c.svg2.q_clusters = 4;
  c.svg2.kv_clusters = 8;
  c.svg2.top_p = 0.9;
  c.q_tile = q_tile;
  c.kv_tile = kv_tile;
  return c;
}

static stsa_ctx *make_ctx(stsa_backend backend) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backend), STSA_OK);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  return ctx;
}

typedef struct problem {
  stsa_tensor q, k, v;
  int64_t N;
} problem;

static problem make_problem(void) {
  const stsa_head_kind kinds[H] = {STSA_HEAD_SEMANTIC, STSA_HEAD_TEMPORAL};
  problem p = {.N = tu_tokens(&GEO)};
  p.q = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
  p.k = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
  p.v = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.N, H, D);
  stsa_workload_desc d = STSA_INIT(stsa_workload_desc);
  d.geometry = GEO;
  d.batch = 1;
  d.heads = H;
  d.head_dim = D;
  d.seed = 21;
  d.kinds = kinds;
  CHECK_STATUS(stsa_workload_generate(&d, &p.q, &p.k, &p.v, NULL), STSA_OK);
  return p;
}

/* Three calls (cold, warm, warm under budget `budget`) into out[3]. */
static void run_calls(stsa_svg *svg, stsa_ctx *ctx, const problem *p, double budget,
                      stsa_tensor *out, const char *what) {
  for (int c = 0; c < 3; c++) {
    stsa_svg_call call = {sizeof call, c == 2 ? budget : 0};
    stsa_status st =
        stsa_svg_attention_ex(svg, 0, c, &p->q, &p->k, &p->v, &out[c], &call, NULL);
    CHECK(st == STSA_OK, "%s, call %d: %s (%s)", what, c, stsa_status_str(st),
          stsa_ctx_last_error(ctx));
  }
}

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

static void test_backend(stsa_backend backend, const problem *p) {
  stsa_ctx *ctx = make_ctx(backend);
  const int mr = ctx->run->kern.mr, nr = ctx->run->kern.nr;
  const char *name = stsa_backend_name(backend);
  const int q_tiles[] = {6, 18, 100, 0}, kv_tiles[] = {32, 0};
  const double budgets[] = {0.05, 1e-9}; /* some heads dense; every head dense */
  for (size_t qi = 0; qi < sizeof q_tiles / sizeof *q_tiles; qi++)
    for (size_t ki = 0; ki < sizeof kv_tiles / sizeof *kv_tiles; ki++) {
      const int qt = q_tiles[qi], kt = kv_tiles[ki];
      char what[96];
      snprintf(what, sizeof what, "%s (mr %d): q_tile %d, kv_tile %d", name, mr, qt, kt);
      stsa_svg_config cfg = config(STSA_SVG_METHOD_SVG2, qt, kt);
      stsa_svg *svg = NULL;
      CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
      if (!svg)
        continue;
      stsa_svg_windows w = STSA_INIT(stsa_svg_windows);
      CHECK_STATUS(stsa_svg_get_windows(svg, &w), STSA_OK);
      if (qt)
        CHECK(w.q_tile == round_up(qt, mr), "%s: windows report q_tile %d, expected %d",
              what, w.q_tile, round_up(qt, mr));
      CHECK(w.q_tile % mr == 0 && w.kv_tile % nr == 0 && (!kt || w.kv_tile == kt),
            "%s: windows report %d x %d tiles", what, w.q_tile, w.kv_tile);
      stsa_tensor out[3], same[3];
      for (int c = 0; c < 3; c++) {
        out[c] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p->N, H, D);
        same[c] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p->N, H, D);
      }
      const double budget = budgets[qi % 2];
      run_calls(svg, ctx, p, budget, out, what);
      /* a session given the tiles the windows report runs the same */
      stsa_svg_config exact = config(STSA_SVG_METHOD_SVG2, w.q_tile, w.kv_tile);
      stsa_svg *ref = NULL;
      CHECK_STATUS(stsa_svg_create(ctx, &exact, &ref), STSA_OK);
      if (ref)
        run_calls(ref, ctx, p, budget, same, what);
      for (int c = 0; c < 3; c++) {
        CHECK(tu_guard_ok(out[c].data) && !tu_is_sentinel(&out[c]),
              "%s, call %d: output written, guards intact", what, c);
        CHECK(tu_same_bytes(&out[c], &same[c]),
              "%s, call %d: output differs from a session of %d x %d tiles", what, c,
              w.q_tile, w.kv_tile);
        tu_free_tensor(&out[c]);
        tu_free_tensor(&same[c]);
      }
      stsa_svg_free(ref);
      stsa_svg_free(svg);
    }
  /* kv tiles are whole panels: refused at create, by both methods */
  for (int method = 0; method < 2; method++) {
    stsa_svg_config cfg = config(method, 18, 40);
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_ERR_BAD_PARAM);
    CHECK(svg == NULL && strstr(stsa_ctx_last_error(ctx), "kv_tile = 40") != NULL,
          "%s %s, kv_tile 40: message \"%s\"", name, stsa_svg_method_name(method),
          stsa_ctx_last_error(ctx));
  }
  stsa_ctx_free(ctx);
}

/* A session created on one backend, run after its context moved to
 * another of a different register tile: the tiles follow the backend, and
 * the output is that of a session created there. */
static void test_backend_change(const stsa_backend *backends, int n, const problem *p) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      stsa_ctx *ctx = make_ctx(backends[i]), *there = make_ctx(backends[j]);
      const int mr_from = ctx->run->kern.mr, mr_to = there->run->kern.mr;
      if (i == j || mr_from == mr_to) {
        stsa_ctx_free(ctx);
        stsa_ctx_free(there);
        continue;
      }
      char what[96];
      snprintf(what, sizeof what, "q_tile 18 created on %s (mr %d), run on %s (mr %d)",
               stsa_backend_name(backends[i]), mr_from, stsa_backend_name(backends[j]),
               mr_to);
      const stsa_svg_config cfg = config(STSA_SVG_METHOD_SVG2, 18, 32);
      stsa_svg *svg = NULL, *ref = NULL;
      CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
      CHECK_STATUS(stsa_svg_create(there, &cfg, &ref), STSA_OK);
      CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backends[j]), STSA_OK);
      stsa_svg_windows w = STSA_INIT(stsa_svg_windows);
      if (svg)
        stsa_svg_get_windows(svg, &w);
      CHECK(w.q_tile == round_up(18, mr_to), "%s: windows report q_tile %d", what,
            w.q_tile);
      stsa_tensor out[3], same[3];
      for (int c = 0; c < 3; c++) {
        out[c] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p->N, H, D);
        same[c] = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p->N, H, D);
      }
      if (svg && ref) {
        /* no budget: every head runs its cluster plan (the session's dense
         * plan was built for the first backend's register tile) */
        run_calls(svg, ctx, p, 0, out, what);
        run_calls(ref, there, p, 0, same, what);
      }
      for (int c = 0; c < 3; c++) {
        CHECK(tu_same_bytes(&out[c], &same[c]),
              "%s, call %d: output differs from a session created there", what, c);
        tu_free_tensor(&out[c]);
        tu_free_tensor(&same[c]);
      }
      stsa_svg_free(svg);
      stsa_svg_free(ref);
      stsa_ctx_free(ctx);
      stsa_ctx_free(there);
    }
}

int main(void) {
  stsa_backend backends[TU_MAX_BACKENDS];
  const int n = tu_tiled_backends(backends);
  problem p = make_problem();
  for (int i = 0; i < n; i++)
    test_backend(backends[i], &p);
  test_backend_change(backends, n, &p);
  tu_free_tensor(&p.q);
  tu_free_tensor(&p.k);
  tu_free_tensor(&p.v);
  return tu_finish("test_svg2_tiles");
}
