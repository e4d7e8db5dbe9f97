/*
 * test_amx_paths.c — a bf16 call on each backend with bf16 tiles (amx, here
 * or emulated, and avx512bf16) leaves them only where its run info says why: a table of
 * the tile shapes and rows a plan makes (q tiles shorter than a 32-row
 * pass, last kv tiles shorter than kv_tile, kv tiles of 16-key multiples,
 * PARTIAL tiles with stored patterns and with the mask callback, token
 * orders, SVG and SVG2 text rows and sink frames, the profiling rows of an
 * error budget, part 0 of a partitioned call) and of the calls they refuse
 * (f16 inputs, mixed dtypes, a plan of variable tiles packed for f32).
 * Each row asserts the backend, the arithmetic, the bf16 terms, and that
 * `why` is empty exactly when the bf16 tiles ran; the kernel calls also
 * check their output against the reference backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/dispatch.h"
#include "kernel/problem.h"
#include "mask/cluster_plan.h"
#include "mask/plan.h"
#include "mask_util.h"
#include "testutil.h"

enum { H = 2 };

/* The backend with bf16 tiles under test (main runs each one here). */
static stsa_backend UNIT = STSA_BACKEND_AMX;

typedef enum path_kind {
  DENSE,
  PART0,      /* part 0 of 2 of a partitioned dense call */
  BAND,       /* a band mask's plan: PARTIAL tiles with stored patterns */
  BAND_NAIVE, /* the same in naive mode: every tile PARTIAL, the mask callback */
  TEMPORAL,   /* a position band in position-major order (a token map) */
  UNALIGNED,  /* a cluster plan whose spans are packed for f32 (16-key blocks) */
  SVG,        /* an SVG session */
  SVG_BUDGET, /* an SVG session with an error budget (profiling rows) */
  SVG2,       /* an SVG2 session */
} path_kind;

typedef struct path_case {
  const char *name;
  path_kind kind;
  int64_t Sq, Skv, D; /* kernel calls; sessions take the geometry's tokens */
  int q_tile, kv_tile;
  stsa_dtype q_dtype, kv_dtype, out_dtype;
  int terms;        /* STSA_PARAM_PV_PRECISION */
  stsa_geometry g;  /* sessions and the temporal mask */
  stsa_arith arith; /* what must run */
  int bf16_terms;   /* what run info must say */
  const char *why;  /* a part of the reason, for a call that is refused */
} path_case;

/* The output the reference backend's run of c must be near: bf16 tiles of
 * two terms and f32 agree far inside an output's own rounding. */
static double tolerance(stsa_dtype out) { return out == STSA_F32 ? 2e-5 : 1e-2; }

static stsa_plan *band_plan(stsa_ctx *ctx, const path_case *c, stsa_mask *mask,
                            stsa_order order) {
  const stsa_mask *masks[H] = {mask, mask};
  stsa_plan_desc desc = tu_plan_desc(c->Sq, c->Skv, H, masks, order ? &c->g : NULL,
                                     STSA_PLAN_ALLOW_EMPTY_ROWS);
  desc.q_order = desc.kv_order = order;
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &desc, &plan), STSA_OK);
  return plan;
}

/* A cluster plan with random labels whose spans start at 16-key multiples
 * (pack_align 16, what f32 calls ask), one of them off the 32-key blocks. */
static stsa_plan *unaligned_plan(stsa_ctx *ctx, const path_case *c, stsa_mask **mask) {
  enum { QC = 5, KC = 9 };
  const int64_t N = c->Sq;
  const stsa_geometry g = {1, 1, N, 0, 0, STSA_TEXT_NONE};
  tu_rng rng = {77};
  int32_t *ql = malloc(sizeof(int32_t) * (size_t)N),
          *kl = malloc(sizeof(int32_t) * (size_t)N);
  uint8_t keep[QC * KC];
  CHECK(ql && kl, "out of memory");
  for (int64_t i = 0; i < N; i++) {
    ql[i] = (int32_t)tu_rnd(&rng, 0, QC - 1);
    kl[i] = (int32_t)tu_rnd(&rng, 0, KC - 1);
  }
  for (int i = 0; i < QC * KC; i++)
    keep[i] = (uint8_t)(i % 3 == 0 || i % KC == i / KC);
  CHECK_STATUS(stsa_mask_clusters(ql, N, QC, kl, N, KC, keep, mask), STSA_OK);
  const stsa_cluster_layout lay = {&g, QC, KC, ql, kl, keep, c->q_tile, c->kv_tile, 16};
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_cluster_plan_build(ctx, &lay, *mask, &plan, &ctx->err), STSA_OK);
  const stsa_block_sparse *bs = &plan->parts[0].bs;
  int off_blocks = 0;
  for (int64_t t = 0; t <= bs->kv_tiles; t++)
    off_blocks |= bs->kv_pack[t] % STSA_BF16_KEY_BLOCK != 0;
  CHECK(off_blocks, "%s: every span is on a 32-key block", c->name);
  free(ql), free(kl);
  return plan;
}

/* A kernel call of c (not a session) on `backend` into out; its run info. */
static stsa_run_info run_kernel_call(stsa_backend backend, const path_case *c,
                                     const stsa_tensor *q, const stsa_tensor *k,
                                     const stsa_tensor *v, const stsa_tensor *out) {
  stsa_ctx *ctx = tu_make_ctx(backend, 2, c->q_tile, c->kv_tile);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, c->terms), STSA_OK);
  stsa_mask *mask = NULL;
  stsa_plan *plan = NULL;
  if (c->kind == DENSE) {
    CHECK_STATUS(stsa_attention(ctx, q, k, v, out, NULL), STSA_OK);
  } else if (c->kind == PART0) {
    size_t wsize = 0;
    CHECK_STATUS(stsa_attention_part_wsize(ctx, q, k, v, out, NULL, 2, &wsize), STSA_OK);
    void *wdata = malloc(wsize);
    for (int part = 1; part >= 0; part--) /* part 0 last: its record stays */
      CHECK_STATUS(stsa_attention_part(ctx, q, k, v, out, NULL, part, 2, wdata, wsize),
                   STSA_OK);
    free(wdata);
  } else {
    if (c->kind == TEMPORAL) {
      CHECK_STATUS(stsa_mask_position_band(&c->g, 6, &mask), STSA_OK);
      plan = band_plan(ctx, c, mask, STSA_ORDER_POSITION_MAJOR);
    } else if (c->kind == UNALIGNED) {
      plan = unaligned_plan(ctx, c, &mask);
    } else {
      CHECK_STATUS(stsa_mask_local(37, 21, &mask), STSA_OK);
      plan = band_plan(ctx, c, mask, STSA_ORDER_NATIVE);
    }
    stsa_sparse_opts opts = {
        sizeof opts, 0.0f,
        NULL,        c->kind == BAND_NAIVE ? STSA_SPARSE_NAIVE : STSA_SPARSE_EXACT,
        NULL,        0};
    CHECK_STATUS(stsa_sparse_attention(ctx, plan, q, k, v, out, &opts), STSA_OK);
  }
  stsa_run_info info = STSA_INIT(stsa_run_info);
  CHECK_STATUS(stsa_ctx_last_run(ctx, &info), STSA_OK);
  stsa_plan_free(plan);
  stsa_mask_free(mask);
  stsa_ctx_free(ctx);
  return info;
}

/* A kernel call of c on UNIT and on the reference: UNIT's run info. A
 * cluster plan is one head's. */
static stsa_run_info kernel_case(const path_case *c) {
  tu_rng rng = {(uint64_t)(c->Sq * 31 + c->Skv)};
  const int64_t h = c->kind == UNALIGNED ? 1 : H;
  stsa_tensor q = tu_random_tensor(&rng, c->q_dtype, TU_BSHD, 1, c->Sq, h, c->D, 1.0);
  stsa_tensor k = tu_random_tensor(&rng, c->kv_dtype, TU_BSHD, 1, c->Skv, h, c->D, 1.0);
  stsa_tensor v = tu_random_tensor(&rng, c->kv_dtype, TU_BSHD, 1, c->Skv, h, c->D, 1.0);
  stsa_tensor out = tu_sentinel_tensor(c->out_dtype, TU_BSHD, 1, c->Sq, h, c->D);
  stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, c->Sq, h, c->D);
  const stsa_run_info info = run_kernel_call(UNIT, c, &q, &k, &v, &out);
  (void)run_kernel_call(STSA_BACKEND_REF, c, &q, &k, &v, &ref);
  double scale;
  const double diff = tu_max_abs_diff(&out, &ref, &scale);
  CHECK(diff <= tolerance(c->out_dtype) * (scale > 1 ? scale : 1),
        "%s: %.3g from the reference (scale %.3g)", c->name, diff, scale);
  CHECK(tu_guard_ok(out.data), "%s: guard bytes", c->name);
  tu_free_tensor(&q), tu_free_tensor(&k), tu_free_tensor(&v);
  tu_free_tensor(&out), tu_free_tensor(&ref);
  return info;
}

/* An SVG or SVG2 session call of c on UNIT: the report's run info. The
 * session runs sparse (text rows and sink frames in its plans). */
static stsa_run_info session_case(const path_case *c) {
  const int64_t N = stsa_geometry_tokens(&c->g);
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.method = c->kind == SVG2 ? STSA_SVG_METHOD_SVG2 : STSA_SVG_METHOD_SVG;
  cfg.geometry = c->g;
  cfg.heads = H;
  cfg.head_dim = c->D;
  cfg.density = 0.3;
  cfg.sample_rows = 16;
  cfg.sink_frames = 1;
  cfg.svg2.q_clusters = 6;
  cfg.svg2.kv_clusters = 13;
  cfg.q_tile = c->q_tile;
  cfg.kv_tile = c->kv_tile;
  cfg.max_rel_error = c->kind == SVG_BUDGET ? 0.5 : 0;
  stsa_ctx *ctx = tu_make_ctx(UNIT, 2, 192, 256);
  CHECK_STATUS(stsa_ctx_set(ctx, STSA_PARAM_PV_PRECISION, c->terms), STSA_OK);
  tu_rng rng = {(uint64_t)N};
  stsa_tensor q = tu_random_tensor(&rng, c->q_dtype, TU_BSHD, 1, N, H, c->D, 1.0);
  stsa_tensor kv = tu_random_tensor(&rng, c->kv_dtype, TU_BSHD, 1, N, H, c->D, 1.0);
  stsa_tensor out = tu_sentinel_tensor(c->out_dtype, TU_BSHD, 1, N, H, c->D);
  stsa_svg *svg = NULL;
  stsa_run_info info = STSA_INIT(stsa_run_info);
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.run = &info;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  CHECK_STATUS(stsa_svg_attention(svg, 0, 0, &q, &kv, &kv, &out, &rep), STSA_OK);
  CHECK(!rep.dense, "%s: the call ran dense", c->name);
  CHECK(!tu_is_sentinel(&out) && tu_guard_ok(out.data), "%s: output", c->name);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  tu_free_tensor(&q), tu_free_tensor(&kv), tu_free_tensor(&out);
  return info;
}

#define BF STSA_BF16
#define TILES STSA_ARITH_BF16_TILES
/* geometries as initialisers (a static const object is not a constant
 * expression in C) */
#define NO_GEOMETRY                                                                      \
  { 0, 0, 0, 0, 0, STSA_TEXT_NONE }
#define SUFFIX_TEXT                                                                      \
  { 3, 12, 20, 23, 17, STSA_TEXT_SUFFIX }
#define PREFIX_TEXT                                                                      \
  { 3, 9, 14, 11, 11, STSA_TEXT_PREFIX }
#define VIDEO_4X6X14                                                                     \
  { 4, 6, 14, 0, 0, STSA_TEXT_NONE }

static const path_case cases[] = {
    /* dense: q tiles of 5 and 12 rows (shorter than a 32-row pass), the
     * last kv tile of 7 keys on 240-key tiles, of 1 key on 48-key ones */
    {"dense, 5 q rows, kv 240", DENSE, 5, 247, 64, 36, 240, BF, BF, BF, 0, NO_GEOMETRY,
     TILES, 2, NULL},
    {"dense, q tiles of 12 rows, last kv tile 1 key", DENSE, 77, 97, 80, 12, 48, BF, BF,
     STSA_F32, 0, NO_GEOMETRY, TILES, 3, NULL},
    {"dense, one term, kv 80", DENSE, 50, 161, 128, 36, 80, BF, BF, BF, 1, NO_GEOMETRY,
     TILES, 1, NULL},
    {"part 0 of 2, kv 240", PART0, 130, 300, 64, 36, 240, BF, BF, BF, 0, NO_GEOMETRY,
     TILES, 2, NULL},
    /* sparse: PARTIAL tiles at the band's edges */
    {"band, stored patterns, kv 48", BAND, 201, 201, 64, 36, 48, BF, BF, BF, 0,
     NO_GEOMETRY, TILES, 2, NULL},
    {"band, naive mode, kv 80", BAND_NAIVE, 190, 190, 80, 24, 80, BF, BF, STSA_F32, 0,
     NO_GEOMETRY, TILES, 3, NULL},
    {"temporal, position-major, kv 240", TEMPORAL, 336, 336, 128, 36, 240, BF, BF, BF, 0,
     VIDEO_4X6X14, TILES, 2, NULL},
    /* sessions: text rows (suffix with padding, prefix), sink frames */
    {"svg, text suffix, frame tiles 240", SVG, 0, 0, 64, 0, 0, BF, BF, BF, 0, SUFFIX_TEXT,
     TILES, 2, NULL},
    {"svg, text prefix", SVG, 0, 0, 80, 0, 0, BF, BF, BF, 0, PREFIX_TEXT, TILES, 2, NULL},
    {"svg, error budget (profiling rows)", SVG_BUDGET, 0, 0, 64, 0, 0, BF, BF, BF, 0,
     SUFFIX_TEXT, TILES, 2, NULL},
    {"svg2, text suffix, kv 48", SVG2, 0, 0, 64, 36, 48, BF, BF, BF, 0, SUFFIX_TEXT,
     TILES, 2, NULL},
    {"svg2, text prefix, kv 240", SVG2, 0, 0, 128, 0, 240, BF, BF, STSA_F32, 0,
     PREFIX_TEXT, TILES, 3, NULL},
    /* refused, and said why */
    {"dense, f16 inputs", DENSE, 40, 100, 64, 36, 64, STSA_F16, STSA_F16, BF, 0,
     NO_GEOMETRY, STSA_ARITH_F32, 0, "bf16 only"},
    {"dense, bf16 q, f16 k and v", DENSE, 40, 100, 64, 36, 64, BF, STSA_F16, BF, 0,
     NO_GEOMETRY, STSA_ARITH_F32, 0, "bf16, f16 and f16"},
    {"svg2, f16 inputs", SVG2, 0, 0, 64, 36, 48, STSA_F16, STSA_F16, BF, 0, SUFFIX_TEXT,
     STSA_ARITH_F32, 0, "bf16 only"},
    {"cluster plan packed for f32", UNALIGNED, 300, 300, 64, 36, 64, BF, BF, BF, 0,
     NO_GEOMETRY, STSA_ARITH_F32, 0, "on 32-key blocks"},
};

/* Every case on UNIT. */
static void check_unit(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const path_case *c = &cases[i];
    const int session = c->kind == SVG || c->kind == SVG_BUDGET || c->kind == SVG2;
    const stsa_run_info info = session ? session_case(c) : kernel_case(c);
    CHECK(info.backend == UNIT && info.arith == c->arith &&
              info.bf16_terms == c->bf16_terms,
          "%s: ran %s (%d terms) on %s, expected %s (%d terms) on %s", c->name,
          stsa_arith_name(info.arith), info.bf16_terms, stsa_backend_name(info.backend),
          stsa_arith_name(c->arith), c->bf16_terms, stsa_backend_name(UNIT));
    CHECK((info.why[0] == 0) == (info.arith == STSA_ARITH_BF16_TILES),
          "%s: ran %s, why = \"%s\"", c->name, stsa_arith_name(info.arith), info.why);
    if (c->why)
      CHECK(strstr(info.why, c->why) != NULL, "%s: why = \"%s\", expected \"%s\"",
            c->name, info.why, c->why);
  }
}

int main(void) {
  const stsa_backend units[2] = {STSA_BACKEND_AMX, STSA_BACKEND_AVX512BF16};
  for (int i = 0; i < 2; i++) {
    UNIT = units[i];
    if (!stsa_backend_available(UNIT)) {
      printf(
          "test_amx_paths: this machine does not run %s (nor its emulation); skipped\n",
          stsa_backend_name(UNIT));
      continue;
    }
    check_unit();
  }
  return tu_finish("test_amx_paths");
}
