/*
 * test_run_info.c — no silent path: stsa_ctx_last_run and the SVG report's
 * run info name the backend and arithmetic each call ran, and why a bf16
 * call on a backend with bf16 tiles (amx, here or emulated, and avx512bf16) did not take
 * them (f16 inputs), and that fixed kv tiles of 16-key multiples that are
 * not 32-key ones take them: 48 keys, an SVG session whose frame-aligned
 * tiles are 240 keys (Wan 720p's case), as on 32-key multiples, and so do
 * SVG2's variable tiles of 48 and 240 keys. Dense, block-sparse,
 * part 0 of a partitioned call, every backend this machine runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { H = 2, D = 64 };

static stsa_run_info last_run(const stsa_ctx *ctx, stsa_status *st) {
  stsa_run_info info = STSA_INIT(stsa_run_info);
  *st = stsa_ctx_last_run(ctx, &info);
  return info;
}

/* A dense call of dtype t (all three) on ctx; its run info. */
static stsa_run_info dense_run(stsa_ctx *ctx, stsa_dtype t, int64_t S) {
  tu_rng rng = {41};
  stsa_tensor q = tu_random_tensor(&rng, t, TU_BSHD, 1, S, H, D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, t, TU_BSHD, 1, S, H, D, 1.0);
  stsa_tensor v = tu_random_tensor(&rng, t, TU_BSHD, 1, S, H, D, 1.0);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, S, H, D);
  CHECK_STATUS(stsa_attention(ctx, &q, &k, &v, &out, NULL), STSA_OK);
  stsa_status st;
  stsa_run_info info = last_run(ctx, &st);
  CHECK_STATUS(st, STSA_OK);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v), tu_free_tensor(&out);
  return info;
}

static void test_every_backend(void) {
  stsa_backend backends[1 + TU_MAX_BACKENDS] = {STSA_BACKEND_REF};
  const int nb = 1 + tu_tiled_backends(backends + 1);
  for (int i = 0; i < nb; i++) {
    const char *name = stsa_backend_name(backends[i]);
    stsa_ctx *ctx = tu_make_ctx(backends[i], 2, 36, 64);
    stsa_status st;
    (void)last_run(ctx, &st);
    CHECK(st == STSA_ERR_BAD_PARAM, "[%s] before any call: %s", name,
          stsa_status_str(st));
    const stsa_run_info f32 = dense_run(ctx, STSA_F32, 100);
    CHECK(f32.backend == backends[i], "[%s] ran on %s", name,
          stsa_backend_name(f32.backend));
    const stsa_arith want =
        backends[i] == STSA_BACKEND_REF ? STSA_ARITH_F64 : STSA_ARITH_F32;
    CHECK(f32.arith == want && f32.bf16_terms == 0, "[%s] f32 inputs ran %s (%d terms)",
          name, stsa_arith_name(f32.arith), f32.bf16_terms);
    const int tiles = tu_has_bf16_tiles(backends[i]);
    CHECK((f32.why[0] != 0) == tiles, "[%s] why = \"%s\"", name, f32.why);
    if (tiles)
      CHECK(strstr(f32.why, "bf16 only") != NULL, "[%s] f32 inputs: why = \"%s\"", name,
            f32.why);
    const stsa_run_info bf = dense_run(ctx, STSA_BF16, 100);
    CHECK(bf.arith == (tiles ? STSA_ARITH_BF16_TILES : want), "[%s] bf16 inputs ran %s",
          name, stsa_arith_name(bf.arith));
    CHECK(!tiles || bf.bf16_terms == 3, "[%s] bf16 tiles with %d terms for an f32 output",
          name, bf.bf16_terms);
    CHECK(bf.why[0] == 0, "[%s] bf16 inputs: why = \"%s\"", name, bf.why);
    /* kv tiles of 48 keys: a multiple of the panel, not of the bf16 blocks,
     * packed with a zero half block */
    CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, 48), STSA_OK);
    const stsa_run_info odd = dense_run(ctx, STSA_BF16, 100);
    CHECK(odd.arith == bf.arith && odd.why[0] == 0, "[%s] kv tile 48: %s, why = \"%s\"",
          name, stsa_arith_name(odd.arith), odd.why);
    /* a failing call leaves the record of the last one that ran */
    stsa_tensor bad = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, 10, H, D);
    CHECK(stsa_attention(ctx, &bad, &bad, &bad, &bad, NULL) != STSA_OK,
          "[%s] an output aliasing its inputs is refused", name);
    const stsa_run_info after = last_run(ctx, &st);
    CHECK(st == STSA_OK && after.arith == odd.arith,
          "[%s] a failed call changed the record", name);
    tu_free_tensor(&bad);
    stsa_ctx_free(ctx);
  }
}

/* Part 0 of a partitioned dense call records; a struct of size 0 is refused. */
static void test_parts_and_sizes(void) {
  stsa_ctx *ctx = tu_make_ctx(STSA_BACKEND_PORTABLE, 1, 36, 64);
  tu_rng rng = {5};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F16, TU_BSHD, 1, 50, H, D, 1.0);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, 50, H, D);
  size_t wsize = 0;
  CHECK_STATUS(stsa_attention_part_wsize(ctx, &q, &q, &q, &out, NULL, 2, &wsize),
               STSA_OK);
  void *wdata = malloc(wsize);
  stsa_status st;
  CHECK_STATUS(stsa_attention_part(ctx, &q, &q, &q, &out, NULL, 1, 2, wdata, wsize),
               STSA_OK);
  (void)last_run(ctx, &st);
  CHECK(st == STSA_ERR_BAD_PARAM, "part 1 recorded a run");
  CHECK_STATUS(stsa_attention_part(ctx, &q, &q, &q, &out, NULL, 0, 2, wdata, wsize),
               STSA_OK);
  const stsa_run_info info = last_run(ctx, &st);
  CHECK(st == STSA_OK && info.backend == STSA_BACKEND_PORTABLE &&
            info.arith == STSA_ARITH_F32,
        "part 0: %s, %s on %s", stsa_status_str(st), stsa_arith_name(info.arith),
        stsa_backend_name(info.backend));
  stsa_run_info zero = {0};
  CHECK_STATUS(stsa_ctx_last_run(ctx, &zero), STSA_ERR_BAD_PARAM);
  CHECK_STATUS(stsa_ctx_last_run(ctx, NULL), STSA_ERR_NULL_ARG);
  CHECK(strcmp(stsa_arith_name(STSA_ARITH_BF16_TILES), "bf16-tiles") == 0 &&
            strcmp(stsa_arith_name((stsa_arith)99), "unknown") == 0,
        "arith names");
  free(wdata);
  tu_free_tensor(&q), tu_free_tensor(&out);
  stsa_ctx_free(ctx);
}

/* An SVG call on bf16 inputs: the report's run. Frames of 12 x 20 tokens
 * give frame-aligned tiles of 240 (the session's automatic choice, as at
 * Wan 720p), which the bf16 tiles take as tiles of 96 x 128 do. */
static stsa_run_info svg_run(stsa_backend backend, stsa_svg_method method, int q_tile,
                             int kv_tile) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.method = method;
  cfg.geometry = (stsa_geometry){2, 12, 20, 0, 0, STSA_TEXT_NONE};
  cfg.heads = H;
  cfg.head_dim = D;
  cfg.density = 0.5;
  cfg.sample_rows = 16;
  cfg.sink_frames = 1;
  cfg.q_tile = q_tile;
  cfg.kv_tile = kv_tile;
  const int64_t N = 2 * 12 * 20;
  stsa_ctx *ctx = tu_make_ctx(backend, 2, 192, 256);
  tu_rng rng = {9};
  stsa_tensor q = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 1, N, H, D, 1.0);
  stsa_tensor out = tu_sentinel_tensor(STSA_BF16, TU_BSHD, 1, N, H, D);
  stsa_svg *svg = NULL;
  stsa_run_info info = STSA_INIT(stsa_run_info);
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.run = &info;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  CHECK_STATUS(stsa_svg_attention(svg, 0, 0, &q, &q, &q, &out, &rep), STSA_OK);
  stsa_svg_windows win = STSA_INIT(stsa_svg_windows);
  CHECK_STATUS(stsa_svg_get_windows(svg, &win), STSA_OK);
  CHECK(q_tile || method != STSA_SVG_METHOD_SVG || win.kv_tile == 240,
        "automatic tiles %d x %d", win.q_tile, win.kv_tile);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  tu_free_tensor(&q), tu_free_tensor(&out);
  return info;
}

static void test_svg_report(void) {
  stsa_backend backends[TU_MAX_BACKENDS];
  const int nb = tu_tiled_backends(backends);
  for (int i = 0; i < nb; i++) {
    const char *name = stsa_backend_name(backends[i]);
    const int tiles = tu_has_bf16_tiles(backends[i]);
    const stsa_run_info frame = svg_run(backends[i], STSA_SVG_METHOD_SVG, 0, 0);
    CHECK(frame.size == sizeof frame && frame.backend == backends[i] &&
              frame.arith == (tiles ? STSA_ARITH_BF16_TILES : STSA_ARITH_F32) &&
              frame.bf16_terms == (tiles ? 2 : 0) && frame.why[0] == 0,
          "[%s] svg on 240-key tiles: %s (%d terms) on %s, why = \"%s\"", name,
          stsa_arith_name(frame.arith), frame.bf16_terms,
          stsa_backend_name(frame.backend), frame.why);
    if (!tiles)
      continue;
    const stsa_run_info fit = svg_run(backends[i], STSA_SVG_METHOD_SVG, 96, 128);
    CHECK(fit.arith == STSA_ARITH_BF16_TILES && fit.bf16_terms == 2 && fit.why[0] == 0,
          "[%s] svg on 96 x 128 tiles: %s (%d terms), why = \"%s\"", name,
          stsa_arith_name(fit.arith), fit.bf16_terms, fit.why);
    /* SVG2's cluster plans of 48- and 240-key kv tiles: variable tiles,
     * whose packed spans (up to 64 and 256 keys on 32-key blocks) the
     * tiles' scratch takes at its rounded width */
    const int cluster_kv[2] = {48, 240};
    for (int c = 0; c < 2; c++) {
      const stsa_run_info cl =
          svg_run(backends[i], STSA_SVG_METHOD_SVG2, 36, cluster_kv[c]);
      CHECK(cl.arith == STSA_ARITH_BF16_TILES && cl.bf16_terms == 2 && cl.why[0] == 0,
            "[%s] svg2 on %d-key tiles: %s, why = \"%s\"", name, cluster_kv[c],
            stsa_arith_name(cl.arith), cl.why);
    }
  }
}

/* STSA_PARAM_PV_PRECISION on every backend: only the bf16 tiles run less
 * than f32 probabilities, each as asked (AUTO: what the output keeps), and
 * every run says which precision it ran; the f32 and f64 paths run F32
 * whatever is asked. */
static void test_pv_precision(void) {
  static const char *const names[STSA_PV_PRECISION_COUNT_] = {"auto", "bf16", "near-f32",
                                                              "f32"};
  for (int p = 0; p < STSA_PV_PRECISION_COUNT_; p++)
    CHECK(!strcmp(stsa_pv_precision_name((stsa_pv_precision)p), names[p]),
          "precision %d is named %s", p, stsa_pv_precision_name((stsa_pv_precision)p));
  CHECK(!strcmp(stsa_pv_precision_name(STSA_PV_PRECISION_COUNT_), "unknown"),
        "an unknown precision's name");
  int64_t lo, hi;
  CHECK_STATUS(stsa_param_bounds(STSA_PARAM_PV_PRECISION, &lo, &hi), STSA_OK);
  CHECK(lo == 0 && hi == STSA_PV_PRECISION_COUNT_ - 1, "pv_precision bounds [%lld, %lld]",
        (long long)lo, (long long)hi);
  stsa_backend backends[1 + TU_MAX_BACKENDS] = {STSA_BACKEND_REF};
  const int nb = 1 + tu_tiled_backends(backends + 1);
  for (int i = 0; i < nb; i++) {
    const char *name = stsa_backend_name(backends[i]);
    const int tiles = tu_has_bf16_tiles(backends[i]);
    stsa_ctx *ctx = tu_make_ctx(backends[i], 2, 36, 64);
    for (int p = 0; p < STSA_PV_PRECISION_COUNT_; p++) {
      CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, p), STSA_OK);
      int64_t got;
      CHECK_STATUS(stsa_ctx_get(ctx, STSA_PARAM_PV_PRECISION, &got), STSA_OK);
      CHECK(got == p, "[%s] pv_precision %d reads back %lld", name, p, (long long)got);
      const stsa_run_info f32 = dense_run(ctx, STSA_F32, 70);
      CHECK(f32.pv_precision == STSA_PV_F32, "[%s] f32 inputs asked %s ran %s", name,
            names[p], stsa_pv_precision_name(f32.pv_precision));
      /* the output is f32: AUTO gives F32 */
      const stsa_pv_precision want = !tiles              ? STSA_PV_F32
                                     : p == STSA_PV_AUTO ? STSA_PV_F32
                                                         : (stsa_pv_precision)p;
      const stsa_run_info bf = dense_run(ctx, STSA_BF16, 70);
      CHECK(bf.pv_precision == want && bf.bf16_terms == (tiles ? (int)want : 0),
            "[%s] bf16 inputs asked %s ran %s (%d terms)", name, names[p],
            stsa_pv_precision_name(bf.pv_precision), bf.bf16_terms);
    }
    CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, STSA_PV_PRECISION_COUNT_),
                 STSA_ERR_BAD_PARAM);
    stsa_ctx_free(ctx);
  }
}

int main(void) {
  test_pv_precision();
  test_every_backend();
  test_parts_and_sizes();
  test_svg_report();
  return tu_finish("test_run_info");
}
