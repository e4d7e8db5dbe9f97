/*
 * test_mask.c — masks, token orders and block plans.
 *
 *  1. Splash's MaskInfo conformance cases (splash-attention.md), on their
 *     exact 16 x 16 grid through the internal fixed-tile builder, and scaled
 *     by 3 through the public API (q tiles are rounded up to multiples of 6).
 *  2. Every mask kind against a predicate written here from coordinates.
 *  3. Token orders: permutations, round trips, text in place.
 *  4. Plans against a brute-force classification of every tile, for random
 *     small geometries, every order combination and several tile sizes.
 *  5. HunyuanVideo 720p-sized plans: small and fast (numbers printed).
 *  6. The plan cache, and plan references taken and dropped on two threads.
 * Brute-force loops count mismatches and CHECK once, naming the first one.
 */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mask/geometry.h"
#include "mask/plan_build.h"
#include "testutil.h"

#define NEW_MASK(var, call)                                                              \
  do {                                                                                   \
    (var) = NULL;                                                                        \
    stsa_status st_ = (call);                                                            \
    CHECK(st_ == STSA_OK && (var), "%s -> %s", #call, stsa_status_str(st_));             \
  } while (0)

static stsa_mask *or_free(stsa_mask *a, stsa_mask *b) {
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_or(a, b, &m), STSA_OK);
  stsa_mask_free(a); /* the OR keeps its own references */
  stsa_mask_free(b);
  return m;
}

static stsa_mask *and_free(stsa_mask *a, stsa_mask *b) {
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_and(a, b, &m), STSA_OK);
  stsa_mask_free(b);
  stsa_mask_free(a);
  return m;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A description with NATIVE orders and the context's tiles. */
static stsa_plan_desc desc_of(int64_t s_q, int64_t s_kv, int64_t heads,
                              const stsa_mask *const *masks, const stsa_geometry *g,
                              unsigned flags) {
  return (stsa_plan_desc){.s_q = s_q,
                          .s_kv = s_kv,
                          .heads = heads,
                          .masks = masks,
                          .geometry = g,
                          .flags = flags};
}

/* ======================= 1. Splash conformance ========================== */
static stsa_plan *plan_fixed(stsa_ctx *ctx, int64_t s_q, int64_t s_kv, int64_t heads,
                             const stsa_mask *const *masks, int tile) {
  stsa_plan_desc d = desc_of(s_q, s_kv, heads, masks, NULL, 0);
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build_tiles(ctx, &d, tile, tile, &p), STSA_OK);
  return p;
}

/* Compares head h's grid (rows x cols) with `want`, row-major. */
static void check_grid(const stsa_plan *p, int64_t h, int rows, int cols, const int *want,
                       const char *what) {
  int bad = 0;
  for (int qt = 0; qt < rows; qt++)
    for (int kt = 0; kt < cols; kt++)
      bad += stsa_plan_tile_kind(p, h, qt, kt) != want[qt * cols + kt];
  CHECK(bad == 0, "%s: %d tiles differ from the expected block kinds", what, bad);
}

static void check_stats(const stsa_plan *p, int64_t masks, int64_t partials,
                        int64_t partial_tiles, const char *what) {
  stsa_plan_stats st;
  CHECK_STATUS(stsa_plan_get_stats(p, &st), STSA_OK);
  CHECK(st.distinct_masks == masks, "%s: %lld distinct masks, expected %lld", what,
        (long long)st.distinct_masks, (long long)masks);
  CHECK(st.distinct_partials == partials, "%s: P = %lld, expected %lld", what,
        (long long)st.distinct_partials, (long long)partials);
  if (partial_tiles >= 0)
    CHECK(st.tiles_partial == partial_tiles, "%s: %lld partial tiles, expected %lld",
          what, (long long)st.tiles_partial, (long long)partial_tiles);
}

static const int B_FULL[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
static const int B_CAUSAL[16] = {1, 0, 0, 0, 2, 1, 0, 0, 2, 2, 1, 0, 2, 2, 2, 1};
static const int B_LOCAL88[16] = {1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1};
static const int B_LOCAL80[16] = {1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1};

/* Cases 1, 2, 5, 6 and 7 at scale s: s*64 tokens, s*16 tiles, windows s*8. */
static void conformance_square(stsa_ctx *ctx, int s, int public_api) {
  char what[64];
  stsa_mask *full, *causal, *causal2, *l88, *l80;
  NEW_MASK(full, stsa_mask_full(&full));
  NEW_MASK(causal, stsa_mask_causal(0, &causal));
  NEW_MASK(causal2, stsa_mask_causal(0, &causal2));
  NEW_MASK(l88, stsa_mask_local(8 * s, 8 * s, &l88));
  NEW_MASK(l80, stsa_mask_local(8 * s, 0, &l80));
  struct {
    const char *name;
    const stsa_mask *m[2];
    int heads;
    const int *grid[2];
    int64_t masks, P, partial_tiles;
  } cases[] = {
      {"case 1 full", {full}, 1, {B_FULL}, 1, 0, 0},
      {"case 2 causal, two heads", {causal, causal2}, 2, {B_CAUSAL, B_CAUSAL}, 1, 1, 8},
      {"case 5 local(8,8)", {l88}, 1, {B_LOCAL88}, 1, 3, 10},
      {"case 6 local(8,0)", {l80}, 1, {B_LOCAL80}, 1, 2, 7},
      {"case 7 causal + local(8,8)", {causal, l88}, 2, {B_CAUSAL, B_LOCAL88}, 2, 4, 14},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    snprintf(what, sizeof what, "%s (scale %d%s)", cases[c].name, s,
             public_api ? ", public API" : "");
    stsa_plan *p = NULL;
    if (public_api) {
      stsa_plan_desc d = desc_of(64 * s, 64 * s, cases[c].heads, cases[c].m, NULL, 0);
      d.q_tile = d.kv_tile = 16 * s;
      CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
    } else {
      p = plan_fixed(ctx, 64 * s, 64 * s, cases[c].heads, cases[c].m, 16 * s);
    }
    if (!p)
      continue;
    for (int h = 0; h < cases[c].heads; h++)
      check_grid(p, h, 4, 4, cases[c].grid[h], what);
    check_stats(p, cases[c].masks, cases[c].P, cases[c].partial_tiles, what);
    stsa_plan_free(p);
  }
  stsa_mask_free(full);
  stsa_mask_free(causal);
  stsa_mask_free(causal2);
  stsa_mask_free(l88);
  stsa_mask_free(l80);
}

static void conformance_rect(stsa_ctx *ctx) {
  stsa_mask *causal;
  NEW_MASK(causal, stsa_mask_causal(0, &causal));
  const stsa_mask *m[1] = {causal};
  /* case 3, wide 64 x 128: each q tile's compacted list equals case 2's row */
  stsa_plan *p = plan_fixed(ctx, 64, 128, 1, m, 16);
  if (p) {
    int want[32] = {0};
    for (int qt = 0; qt < 4; qt++)
      for (int kt = 0; kt < 4; kt++)
        want[qt * 8 + kt] = B_CAUSAL[qt * 4 + kt];
    check_grid(p, 0, 4, 8, want, "case 3 wide causal");
    const stsa_plan_part *part = &p->parts[0];
    int bad = 0;
    for (int qt = 0; qt < 4; qt++) {
      int64_t e0 = part->bs.tile_ptr[qt], n = part->bs.tile_ptr[qt + 1] - e0;
      bad += n != qt + 1 || n > 4;
      for (int64_t e = 0; e < n; e++)
        bad += part->bs.kv_tile[e0 + e] != e ||
               part->bs.kind[e0 + e] != B_CAUSAL[qt * 4 + e];
    }
    CHECK(bad == 0, "case 3: compacted rows differ from case 2");
    check_stats(p, 1, 1, 4, "case 3 wide causal");
    stsa_plan_free(p);
  }
  /* case 4, tall 128 x 64: case 2, then four rows of full tiles */
  p = plan_fixed(ctx, 128, 64, 1, m, 16);
  if (p) {
    int want[32];
    for (int i = 0; i < 32; i++)
      want[i] = i < 16 ? B_CAUSAL[i] : 2;
    check_grid(p, 0, 8, 4, want, "case 4 tall causal");
    check_stats(p, 1, 1, 4, "case 4 tall causal");
    stsa_plan_free(p);
  }
  stsa_mask_free(causal);
}

static void conformance_empty_row(stsa_ctx *ctx) {
  /* case 8: 4 heads x 32 x 32, head 2 has row 14 all false */
  uint8_t bits[32 * 32];
  memset(bits, 1, sizeof bits);
  memset(bits + 14 * 32, 0, 32);
  stsa_mask *full, *causal, *dense;
  NEW_MASK(full, stsa_mask_full(&full));
  NEW_MASK(causal, stsa_mask_causal(0, &causal));
  NEW_MASK(dense, stsa_mask_dense(bits, 32, 32, &dense));
  const stsa_mask *m[4] = {full, causal, dense, causal};
  stsa_plan_desc d = desc_of(32, 32, 4, m, NULL, 0);
  d.q_tile = d.kv_tile = 16;
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_ERR_EMPTY_ROW);
  CHECK(p == NULL, "case 8: out written on failure");
  const char *msg = stsa_ctx_last_error(ctx);
  CHECK(strstr(msg, "head 2") && strstr(msg, "row 14"), "case 8 message: '%s'", msg);
  CHECK_STATUS(stsa_plan_build_tiles(ctx, &d, 16, 16, &p), STSA_ERR_EMPTY_ROW);
  d.flags = STSA_PLAN_ALLOW_EMPTY_ROWS;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  if (p) {
    stsa_plan_stats st;
    stsa_plan_get_stats(p, &st);
    CHECK(st.distinct_masks == 3, "case 8: %lld distinct masks",
          (long long)st.distinct_masks);
    CHECK(st.pairs_kept == 1024 + 528 + 992 + 528, "case 8: %lld kept pairs",
          (long long)st.pairs_kept);
    stsa_plan_free(p);
  }
  stsa_mask_free(full);
  stsa_mask_free(causal);
  stsa_mask_free(dense);
}

static void conformance_offsets(void) {
  /* case 9: causal 4 x 4 with offset -1 has row 0 all false; +1 keeps k <= q + 1 */
  stsa_mask *minus, *plus;
  NEW_MASK(minus, stsa_mask_causal(-1, &minus));
  NEW_MASK(plus, stsa_mask_causal(1, &plus));
  int bad = 0;
  for (int q = 0; q < 4; q++)
    for (int k = 0; k < 4; k++) {
      bad += stsa_mask_keep(minus, q, k) != (k <= q - 1);
      bad += stsa_mask_keep(plus, q, k) != (k <= q + 1);
    }
  CHECK(bad == 0, "case 9: %d pairs wrong", bad);
  for (int k = 0; k < 4; k++)
    CHECK(!stsa_mask_keep(minus, 0, k), "case 9: row 0 keeps key %d", k);
  stsa_mask_free(minus);
  stsa_mask_free(plus);
}

static void test_conformance(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  conformance_square(ctx, 1, 0);
  conformance_square(ctx, 3, 1); /* 48-row q tiles: a multiple of 6 */
  conformance_rect(ctx);
  conformance_empty_row(ctx);
  conformance_offsets();
  /* The public API rounds a 16-row q tile up to 18. */
  stsa_mask *full;
  NEW_MASK(full, stsa_mask_full(&full));
  const stsa_mask *m[1] = {full};
  stsa_plan_desc d = desc_of(64, 64, 1, m, NULL, 0);
  d.q_tile = d.kv_tile = 16;
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  if (p)
    CHECK(p->q_tile == 18 && p->q_tiles == 4 && p->kv_tile == 16,
          "q tile 16 -> %d (%lld tiles)", p->q_tile, (long long)p->q_tiles);
  stsa_plan_free(p);
  stsa_mask_free(full);
  stsa_ctx_free(ctx);
}

/* ================= 2. mask semantics from coordinates ==================== */
typedef struct tok {
  int kind; /* 0 outside, 1 video, 2 real text, 3 padding text */
  int64_t f, y, x;
} tok;

static int64_t n_tokens(const stsa_geometry *g) {
  return g->text + g->frames * g->height * g->width;
}

static tok decode(const stsa_geometry *g, int64_t i) {
  tok t = {0, 0, 0, 0};
  const int64_t L = g->frames * g->height * g->width;
  if (i < 0 || i >= n_tokens(g))
    return t;
  int64_t v = g->text_pos == STSA_TEXT_PREFIX ? i - g->text : i;
  if (v >= 0 && v < L) {
    t.kind = 1;
    t.f = v / (g->height * g->width);
    t.y = v / g->width % g->height;
    t.x = v % g->width;
  } else {
    int64_t c = g->text_pos == STSA_TEXT_PREFIX ? i : i - L;
    t.kind = c < g->text_real ? 2 : 3;
  }
  return t;
}

static int64_t dist(int64_t a, int64_t b) { return a > b ? a - b : b - a; }

typedef enum { P_FRAME, P_SPATIAL, P_BAND, P_SINK, P_TEXT } pred_kind;

static int predicate(const stsa_geometry *g, pred_kind k, int64_t a, int64_t b, int64_t i,
                     int64_t j) {
  tok ti = decode(g, i), tj = decode(g, j);
  int vv = ti.kind == 1 && tj.kind == 1;
  switch (k) {
  case P_FRAME:
    return vv && dist(ti.f, tj.f) <= a;
  case P_SPATIAL:
    return vv && dist(ti.y, tj.y) <= a && dist(ti.x, tj.x) <= b;
  case P_BAND: {
    int64_t F = g->frames;
    return vv && dist((ti.y * g->width + ti.x) * F + ti.f,
                      (tj.y * g->width + tj.x) * F + tj.f) <= a;
  }
  case P_SINK:
    return (ti.kind == 1 || ti.kind == 2) && tj.kind == 1 && tj.f < a;
  default:
    if (ti.kind == 3)
      return tj.kind == 3;
    if (ti.kind == 2)
      return tj.kind == 1 || tj.kind == 2;
    return ti.kind == 1 && tj.kind == 2;
  }
}

static void compare_keep(const stsa_geometry *g, const stsa_mask *m, pred_kind k,
                         int64_t a, int64_t b, const char *what) {
  const int64_t N = n_tokens(g);
  long bad = 0;
  int64_t bi = 0, bj = 0;
  for (int64_t i = -1; i <= N; i++)
    for (int64_t j = -1; j <= N; j++)
      if (stsa_mask_keep(m, i, j) != predicate(g, k, a, b, i, j) && bad++ == 0) {
        bi = i;
        bj = j;
      }
  CHECK(
      bad == 0,
      "%s (a=%lld b=%lld) on F%lld H%lld W%lld C%lld/%lld: %ld wrong, first (%lld, %lld)",
      what, (long long)a, (long long)b, (long long)g->frames, (long long)g->height,
      (long long)g->width, (long long)g->text, (long long)g->text_real, bad,
      (long long)bi, (long long)bj);
}

static const stsa_geometry SMALL_GEOMS[] = {
    {3, 2, 3, 4, 3, STSA_TEXT_PREFIX},
    {2, 3, 2, 5, 2, STSA_TEXT_SUFFIX},
    {3, 2, 2, 0, 0, STSA_TEXT_NONE},
    {1, 2, 3, 3, 3, STSA_TEXT_SUFFIX},
};

static void test_video_mask_semantics(void) {
  for (size_t gi = 0; gi < sizeof SMALL_GEOMS / sizeof *SMALL_GEOMS; gi++) {
    const stsa_geometry *g = &SMALL_GEOMS[gi];
    stsa_mask *m;
    for (int64_t w = 0; w <= 5; w += 2) {
      NEW_MASK(m, stsa_mask_frame_window(g, w, &m));
      compare_keep(g, m, P_FRAME, w, 0, "frame_window");
      stsa_mask_free(m);
    }
    const int64_t sp[][2] = {{0, 0}, {1, 0}, {0, 2}, {1, 1}, {9, 9}};
    for (int s = 0; s < 5; s++) {
      NEW_MASK(m, stsa_mask_spatial_window(g, sp[s][0], sp[s][1], &m));
      compare_keep(g, m, P_SPATIAL, sp[s][0], sp[s][1], "spatial_window");
      stsa_mask_free(m);
    }
    const int64_t bands[] = {0, 1, 3, 7, 100};
    for (int s = 0; s < 5; s++) {
      NEW_MASK(m, stsa_mask_position_band(g, bands[s], &m));
      compare_keep(g, m, P_BAND, bands[s], 0, "position_band");
      stsa_mask_free(m);
    }
    for (int64_t n = 1; n <= 4; n++) {
      NEW_MASK(m, stsa_mask_sink_frames(g, n, &m));
      compare_keep(g, m, P_SINK, n, 0, "sink_frames");
      stsa_mask_free(m);
    }
    NEW_MASK(m, stsa_mask_text(g, &m));
    compare_keep(g, m, P_TEXT, 0, 0, "text");
    stsa_mask_free(m);
    /* combinators against the combined predicates */
    stsa_mask *fw, *sk, *tx, *either, *both;
    NEW_MASK(fw, stsa_mask_frame_window(g, 1, &fw));
    NEW_MASK(sk, stsa_mask_sink_frames(g, 1, &sk));
    NEW_MASK(tx, stsa_mask_text(g, &tx));
    NEW_MASK(either, stsa_mask_or(fw, sk, &either));
    NEW_MASK(both, stsa_mask_and(fw, tx, &both));
    stsa_mask_free(fw); /* combinators keep the children alive */
    long bad = 0;
    const int64_t N = n_tokens(g);
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < N; j++) {
        int f = predicate(g, P_FRAME, 1, 0, i, j);
        bad += stsa_mask_keep(either, i, j) != (f || predicate(g, P_SINK, 1, 0, i, j));
        bad += stsa_mask_keep(both, i, j) != (f && predicate(g, P_TEXT, 0, 0, i, j));
      }
    CHECK(bad == 0, "AND/OR semantics: %ld wrong pairs", bad);
    stsa_mask_free(either);
    stsa_mask_free(both);
    stsa_mask_free(sk);
    stsa_mask_free(tx);
  }
}

static void test_index_mask_semantics(void) {
  stsa_mask *m;
  long bad = 0;
  const int64_t offs[] = {-3, -1, 0, 2, 50};
  for (int o = 0; o < 5; o++) {
    NEW_MASK(m, stsa_mask_causal(offs[o], &m));
    for (int64_t i = 0; i < 40; i++)
      for (int64_t j = 0; j < 40; j++)
        bad += stsa_mask_keep(m, i, j) != (j <= i + offs[o]);
    stsa_mask_free(m);
  }
  const int64_t lr[][2] = {{0, 0}, {3, 1}, {STSA_UNBOUNDED, 2}, {4, STSA_UNBOUNDED}};
  for (int o = 0; o < 4; o++) {
    NEW_MASK(m, stsa_mask_local(lr[o][0], lr[o][1], &m));
    for (int64_t i = 0; i < 40; i++)
      for (int64_t j = 0; j < 40; j++) {
        int want = (lr[o][0] == STSA_UNBOUNDED || j >= i - lr[o][0]) &&
                   (lr[o][1] == STSA_UNBOUNDED || j <= i + lr[o][1]);
        bad += stsa_mask_keep(m, i, j) != want;
      }
    stsa_mask_free(m);
  }
  NEW_MASK(m, stsa_mask_chunked_causal(7, &m));
  for (int64_t i = 0; i < 40; i++)
    for (int64_t j = 0; j < 40; j++)
      bad += stsa_mask_keep(m, i, j) != (j <= i && i / 7 == j / 7);
  stsa_mask_free(m);
  int32_t qs[9] = {0, 0, 1, 1, 1, 2, 0, 2, 2}, ks[5] = {2, 1, 0, 1, 2};
  NEW_MASK(m, stsa_mask_segments(qs, 9, ks, 5, &m));
  for (int64_t i = 0; i < 10; i++)
    for (int64_t j = 0; j < 6; j++)
      bad += stsa_mask_keep(m, i, j) != (i < 9 && j < 5 && qs[i] == ks[j]);
  stsa_mask_free(m);
  uint8_t bits[6 * 7];
  for (int i = 0; i < 42; i++)
    bits[i] = (uint8_t)((i * 37) % 5 == 0 ? 3 : 0);
  NEW_MASK(m, stsa_mask_dense(bits, 6, 7, &m));
  for (int64_t i = 0; i < 7; i++)
    for (int64_t j = 0; j < 8; j++)
      bad += stsa_mask_keep(m, i, j) != (i < 6 && j < 7 && bits[i * 7 + j] != 0);
  stsa_mask_free(m);
  NEW_MASK(m, stsa_mask_full(&m));
  bad += !stsa_mask_keep(m, 0, 12345) + stsa_mask_keep(m, -1, 0) +
         stsa_mask_keep(NULL, 0, 0);
  stsa_mask_free(m);
  CHECK(bad == 0, "index masks: %ld wrong pairs", bad);
}

static void test_mask_errors_and_equality(void) {
  const stsa_geometry *g = &SMALL_GEOMS[0];
  stsa_mask *m = NULL, *a = NULL, *b = NULL;
  CHECK_STATUS(stsa_mask_local(-1, 0, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_local(0, -2, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_chunked_causal(0, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_frame_window(NULL, 1, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_frame_window(g, -1, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_spatial_window(g, 0, -1, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_position_band(g, -5, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_sink_frames(g, 0, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_text(NULL, &m), STSA_ERR_BAD_MASK);
  const stsa_geometry plain = {0, 0, 0, 5, 5, STSA_TEXT_PREFIX};
  const stsa_geometry bad_text = {2, 2, 2, 3, 4, STSA_TEXT_SUFFIX};
  const stsa_geometry no_pos = {2, 2, 2, 3, 3, STSA_TEXT_NONE};
  CHECK_STATUS(stsa_mask_frame_window(&plain, 1, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_text(&bad_text, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_text(&no_pos, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_causal(0, NULL), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_mask_dense(NULL, 2, 2, &m), STSA_ERR_NULL_ARG);
  uint8_t bits[4] = {1, 0, 2, 1};
  CHECK_STATUS(stsa_mask_dense(bits, 0, 2, &m), STSA_ERR_BAD_MASK);
  CHECK_STATUS(stsa_mask_segments(NULL, 2, NULL, 2, &m), STSA_ERR_NULL_ARG);
  CHECK(m == NULL, "a failed constructor wrote its output");
  CHECK_STATUS(stsa_mask_and(NULL, NULL, &m), STSA_ERR_NULL_ARG);
  stsa_mask_free(NULL);

  /* combinations must agree on geometry and on dense lengths */
  NEW_MASK(a, stsa_mask_text(&SMALL_GEOMS[0], &a));
  NEW_MASK(b, stsa_mask_text(&SMALL_GEOMS[1], &b));
  CHECK_STATUS(stsa_mask_or(a, b, &m), STSA_ERR_BAD_MASK);
  stsa_mask_free(b);
  NEW_MASK(b, stsa_mask_dense(bits, 2, 2, &b));
  stsa_mask *c = NULL, *d = NULL;
  NEW_MASK(c, stsa_mask_dense(bits, 1, 4, &c));
  CHECK_STATUS(stsa_mask_and(b, c, &m), STSA_ERR_BAD_MASK);
  /* equality: structural, dense by content (nonzero = keep) */
  uint8_t same[4] = {7, 0, 1, 9};
  NEW_MASK(d, stsa_mask_dense(same, 2, 2, &d));
  CHECK(stsa_mask_equal(b, d), "dense masks with the same meaning differ");
  CHECK(!stsa_mask_equal(b, c), "dense 2x2 equals dense 1x4");
  stsa_mask *x1, *x2, *y1, *y2;
  NEW_MASK(x1, stsa_mask_and(a, b, &x1));
  NEW_MASK(x2, stsa_mask_and(a, d, &x2));
  NEW_MASK(y1, stsa_mask_or(a, b, &y1));
  NEW_MASK(y2, stsa_mask_frame_window(&SMALL_GEOMS[0], 1, &y2));
  CHECK(stsa_mask_equal(x1, x2), "AND of equal children differs");
  CHECK(!stsa_mask_equal(x1, y1), "AND equals OR");
  CHECK(!stsa_mask_equal(y2, a) && !stsa_mask_equal(NULL, a), "unequal masks equal");
  stsa_mask *fw2, *fw3, *c0, *c1;
  NEW_MASK(fw2, stsa_mask_frame_window(&SMALL_GEOMS[0], 1, &fw2));
  NEW_MASK(fw3, stsa_mask_frame_window(&SMALL_GEOMS[1], 1, &fw3));
  NEW_MASK(c0, stsa_mask_causal(0, &c0));
  NEW_MASK(c1, stsa_mask_causal(1, &c1));
  CHECK(stsa_mask_equal(y2, fw2) && !stsa_mask_equal(y2, fw3), "frame_window equality");
  CHECK(!stsa_mask_equal(c0, c1), "causal(0) equals causal(1)");
  stsa_mask *list[] = {a, b, c, d, x1, x2, y1, y2, fw2, fw3, c0, c1};
  for (size_t i = 0; i < sizeof list / sizeof *list; i++)
    stsa_mask_free(list[i]);

  /* trees deeper than 64 are refused */
  stsa_mask *deep;
  NEW_MASK(deep, stsa_mask_full(&deep));
  stsa_status st = STSA_OK;
  int levels = 0;
  while (st == STSA_OK && levels < 100) {
    stsa_mask *leaf, *next = NULL;
    NEW_MASK(leaf, stsa_mask_causal(levels, &leaf));
    st = stsa_mask_and(deep, leaf, &next);
    stsa_mask_free(leaf);
    if (st == STSA_OK) {
      stsa_mask_free(deep);
      deep = next;
      levels++;
    }
  }
  CHECK(st == STSA_ERR_BAD_MASK && levels == 63, "depth limit: %s after %d levels",
        stsa_status_str(st), levels);
  stsa_mask_free(deep);
}

/* ============================ 3. orders ================================== */
static void test_orders(void) {
  const stsa_geometry geoms[] = {
      {3, 2, 3, 4, 3, STSA_TEXT_PREFIX}, {4, 3, 2, 5, 2, STSA_TEXT_SUFFIX},
      {3, 2, 2, 0, 0, STSA_TEXT_NONE},   {1, 2, 3, 3, 3, STSA_TEXT_SUFFIX},
      {5, 1, 1, 2, 1, STSA_TEXT_PREFIX}, {0, 0, 0, 7, 7, STSA_TEXT_PREFIX},
  };
  for (size_t gi = 0; gi < sizeof geoms / sizeof *geoms; gi++) {
    const stsa_geometry *g = &geoms[gi];
    const int64_t N = n_tokens(g), F = g->frames, P = g->height * g->width, L = F * P;
    const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
    CHECK(stsa_geometry_tokens(g) == N, "tokens %lld, expected %lld",
          (long long)stsa_geometry_tokens(g), (long long)N);
    stsa_geo geo;
    stsa_geo_init(&geo, g);
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)N);
    char *seen = malloc((size_t)N);
    for (int o = 0; o < STSA_ORDER_COUNT_; o++) {
      CHECK_STATUS(stsa_order_permutation(g, (stsa_order)o, perm), STSA_OK);
      memset(seen, 0, (size_t)N);
      long bad = 0;
      for (int64_t pos = 0; pos < N; pos++) {
        int64_t nat = perm[pos];
        if (nat < 0 || nat >= N || seen[nat]++) {
          bad++;
          continue;
        }
        int64_t want = pos; /* text, and NATIVE video */
        int64_t j = pos - v0;
        if (j >= 0 && j < L && o == STSA_ORDER_POSITION_MAJOR)
          want = v0 + (j % F) * P + j / F;
        if (j >= P && j < L && o == STSA_ORDER_SINK_FIRST)
          want = v0 + (1 + (j - P) % (F - 1)) * P + (j - P) / (F - 1);
        bad += nat != want;
        bad += stsa_geo_to_pos(&geo, (stsa_order)o, nat) != pos;
        bad += stsa_geo_to_native(&geo, (stsa_order)o, pos) != nat;
      }
      CHECK(bad == 0, "order %d on geometry %zu: %ld bad positions", o, gi, bad);
    }
    free(perm);
    free(seen);
  }
  int64_t perm[4];
  const stsa_geometry bad = {2, 2, 2, 1, 2, STSA_TEXT_PREFIX};
  const stsa_geometry huge = {1 << 20, 1 << 20, 1 << 20, 0, 0, STSA_TEXT_NONE};
  CHECK_STATUS(stsa_order_permutation(NULL, STSA_ORDER_NATIVE, perm), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_order_permutation(&bad, STSA_ORDER_NATIVE, perm), STSA_ERR_BAD_SHAPE);
  CHECK_STATUS(stsa_order_permutation(&SMALL_GEOMS[0], (stsa_order)7, perm),
               STSA_ERR_BAD_PARAM);
  CHECK(stsa_geometry_tokens(&bad) < 0 && stsa_geometry_tokens(&huge) < 0 &&
            stsa_geometry_tokens(NULL) < 0,
        "invalid geometries have a token count");
}

/* ==================== 4. plans against brute force ======================= */
/* Checks every tile of every head: kind, stored pattern, per-entry and total
 * kept counts, CSR order; and that equal patterns are stored once. */
static void check_plan(const stsa_plan *p, const stsa_mask *const *masks,
                       const int64_t *q_nat, const int64_t *kv_nat, const char *what) {
  long bad_kind = 0, bad_pat = 0, bad_count = 0;
  char first[160] = "";
  for (int64_t h = 0; h < p->heads; h++) {
    const stsa_plan_part *part = &p->parts[p->head_part[h]];
    int64_t kept_total = 0;
    for (int64_t qt = 0; qt < p->q_tiles; qt++) {
      const int64_t q0 = qt * p->q_tile;
      const int rows = (int)(p->s_q - q0 < p->q_tile ? p->s_q - q0 : p->q_tile);
      int64_t e = part->bs.tile_ptr[qt], last = -1;
      for (int64_t i = part->bs.tile_ptr[qt]; i < part->bs.tile_ptr[qt + 1]; i++) {
        bad_count += part->bs.kv_tile[i] <= last;
        last = part->bs.kv_tile[i];
      }
      for (int64_t kt = 0; kt < p->kv_tiles; kt++) {
        const int64_t k0 = kt * p->kv_tile;
        const int cols = (int)(p->s_kv - k0 < p->kv_tile ? p->s_kv - k0 : p->kv_tile);
        int64_t kept = 0;
        for (int r = 0; r < rows; r++)
          for (int c = 0; c < cols; c++)
            kept += stsa_mask_keep(masks[h], q_nat ? q_nat[q0 + r] : q0 + r,
                                   kv_nat ? kv_nat[k0 + c] : k0 + c);
        kept_total += kept;
        int want = kept == 0 ? 0 : kept == (int64_t)rows * cols ? 2 : 1;
        int got = stsa_plan_tile_kind(p, h, qt, kt);
        if (got != want && bad_kind++ == 0)
          snprintf(first, sizeof first,
                   "head %lld tile (%lld, %lld): kind %d, expected %d", (long long)h,
                   (long long)qt, (long long)kt, got, want);
        if (want == 0 || e >= part->bs.tile_ptr[qt + 1] || part->bs.kv_tile[e] != kt)
          continue;
        bad_count += part->rounded_kept[e] != kept;
        if (part->bs.kind[e] == 1) {
          int32_t id = part->bs.pattern[e];
          if (id < 0 || id >= part->bs.patterns) {
            bad_pat++;
            e++;
            continue;
          }
          const stsa_tile_pattern *pat = &part->bs.pattern_list[id];
          bad_pat += pat->rows != rows;
          for (int r = 0; r < rows && r < pat->rows; r++) {
            char in[4096] = {0};
            int prev_hi = -1;
            for (int32_t k = pat->row_ptr[r]; k < pat->row_ptr[r + 1]; k++) {
              int lo = pat->iv[2 * k], hi = pat->iv[2 * k + 1];
              bad_pat += lo <= prev_hi || lo >= hi || hi > cols; /* canonical form */
              prev_hi = hi;
              for (int c = lo; c < hi && c < cols; c++)
                in[c] = 1;
            }
            for (int c = 0; c < cols; c++)
              bad_pat += in[c] != stsa_mask_keep(masks[h], q_nat ? q_nat[q0 + r] : q0 + r,
                                                 kv_nat ? kv_nat[k0 + c] : k0 + c);
          }
        } else {
          bad_count += part->bs.pattern[e] != -1;
        }
        e++;
      }
      bad_count += e != part->bs.tile_ptr[qt + 1];
    }
    bad_count += kept_total != part->kept_pairs;
  }
  /* dedup complete: equal contents share storage; stats count the storage */
  int64_t total = 0, distinct = 0;
  for (int32_t a = 0; a < p->parts_count; a++)
    total += p->parts[a].bs.patterns;
  const stsa_tile_pattern **all = malloc(sizeof *all * (size_t)(total + 1));
  int64_t n = 0;
  for (int32_t a = 0; a < p->parts_count; a++)
    for (int32_t i = 0; i < p->parts[a].bs.patterns; i++)
      all[n++] = &p->parts[a].bs.pattern_list[i];
  for (int64_t i = 0; i < n; i++) {
    int new_storage = 1;
    for (int64_t j = 0; j < i; j++) {
      const stsa_tile_pattern *x = all[i], *y = all[j];
      int same =
          x->rows == y->rows && x->row_ptr[x->rows] == y->row_ptr[y->rows] &&
          !memcmp(x->row_ptr, y->row_ptr, sizeof(int32_t) * (size_t)(x->rows + 1)) &&
          !memcmp(x->iv, y->iv, 4 * (size_t)x->row_ptr[x->rows]);
      bad_pat += same != (x->row_ptr == y->row_ptr);
      new_storage &= x->row_ptr != y->row_ptr;
    }
    distinct += new_storage;
  }
  free(all);
  stsa_plan_stats st;
  stsa_plan_get_stats(p, &st);
  bad_count += st.distinct_partials != distinct;
  CHECK(bad_kind == 0, "%s: %ld tile kinds wrong; %s", what, bad_kind, first);
  CHECK(bad_pat == 0, "%s: %ld pattern errors", what, bad_pat);
  CHECK(bad_count == 0, "%s: %ld count/CSR errors", what, bad_count);
}

static int64_t rnd(tu_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(tu_rng_next(r) % (uint64_t)(hi - lo + 1));
}

enum { N_VIDEO_MASKS = 15 };

static void video_masks(tu_rng *r, const stsa_geometry *g, stsa_mask **m) {
  const int64_t F = g->frames, N = n_tokens(g);
  stsa_mask *t1, *t2;
  NEW_MASK(m[0], stsa_mask_frame_window(g, 1, &m[0]));
  NEW_MASK(m[1], stsa_mask_position_band(g, rnd(r, 1, 2 * F + 3), &m[1]));
  NEW_MASK(m[2], stsa_mask_spatial_window(g, 1, 2, &m[2]));
  NEW_MASK(m[3], stsa_mask_sink_frames(g, 1, &m[3]));
  NEW_MASK(m[4], stsa_mask_sink_frames(g, 2, &m[4]));
  NEW_MASK(m[5], stsa_mask_text(g, &m[5]));
  /* the spatial and the temporal head of SVG */
  NEW_MASK(t1, stsa_mask_frame_window(g, 0, &t1));
  NEW_MASK(t2, stsa_mask_sink_frames(g, 1, &t2));
  m[6] = or_free(t1, t2);
  NEW_MASK(t1, stsa_mask_text(g, &t1));
  m[6] = or_free(m[6], t1);
  NEW_MASK(t1, stsa_mask_position_band(g, F + 1, &t1));
  NEW_MASK(t2, stsa_mask_sink_frames(g, 1, &t2));
  m[7] = or_free(t1, t2);
  NEW_MASK(t1, stsa_mask_text(g, &t1));
  m[7] = or_free(t1, m[7]);
  NEW_MASK(t1, stsa_mask_frame_window(g, 1, &t1));
  NEW_MASK(t2, stsa_mask_spatial_window(g, 1, 1, &t2));
  m[8] = and_free(t1, t2);
  NEW_MASK(t1, stsa_mask_frame_window(g, 0, &t1));
  NEW_MASK(t2, stsa_mask_position_band(g, 3, &t2));
  m[9] = or_free(t1, t2);
  NEW_MASK(t1, stsa_mask_spatial_window(g, 2, 2, &t1));
  m[9] = and_free(m[9], t1);
  NEW_MASK(m[10], stsa_mask_causal(3, &m[10])); /* scanned in permuted kv orders */
  NEW_MASK(t1, stsa_mask_local(7, 4, &t1));
  NEW_MASK(t2, stsa_mask_text(g, &t2));
  stsa_mask *t3;
  NEW_MASK(t3, stsa_mask_frame_window(g, 1, &t3));
  m[11] = and_free(t1, or_free(t2, t3));
  uint8_t *bits = malloc((size_t)(N * N));
  for (int64_t i = 0; i < N * N; i++)
    bits[i] = rnd(r, 0, 9) < 3;
  NEW_MASK(m[12], stsa_mask_dense(bits, N, N, &m[12]));
  free(bits);
  NEW_MASK(m[13], stsa_mask_full(&m[13]));
  NEW_MASK(m[14], stsa_mask_frame_window(g, 1, &m[14])); /* equal to m[0] */
}

static void plan_vs_brute(stsa_ctx *ctx, const stsa_plan_desc *d, int fixed_q,
                          int fixed_kv, const char *what) {
  stsa_plan *p = NULL;
  stsa_status st = fixed_q ? stsa_plan_build_tiles(ctx, d, fixed_q, fixed_kv, &p)
                           : stsa_plan_build(ctx, d, &p);
  CHECK(st == STSA_OK && p, "%s: build -> %s (%s)", what, stsa_status_str(st),
        stsa_ctx_last_error(ctx));
  if (!p)
    return;
  int64_t *qn = NULL, *kn = NULL;
  if (d->q_rows) {
    qn = malloc(sizeof(int64_t) * (size_t)d->s_q);
    memcpy(qn, d->q_rows, sizeof(int64_t) * (size_t)d->s_q);
  } else if (d->q_order != STSA_ORDER_NATIVE) {
    qn = malloc(sizeof(int64_t) * (size_t)d->s_q);
    stsa_order_permutation(d->geometry, d->q_order, qn);
  }
  if (d->kv_order != STSA_ORDER_NATIVE) {
    kn = malloc(sizeof(int64_t) * (size_t)d->s_kv);
    stsa_order_permutation(d->geometry, d->kv_order, kn);
  }
  check_plan(p, d->masks, qn, kn, what);
  free(qn);
  free(kn);
  stsa_plan_free(p);
}

static void test_plans_video(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  tu_rng r = {2024};
  const int tiles[][2] = {{6, 16}, {12, 32}};
  for (int trial = 0; trial < 14; trial++) {
    stsa_geometry g = {rnd(&r, 2, 5), rnd(&r, 2, 5), rnd(&r, 2, 7), rnd(&r, 0, 9), 0,
                       STSA_TEXT_NONE};
    if (trial == 0) /* one frame, one column: the degenerate orders */
      g = (stsa_geometry){1, 3, 1, 4, 2, STSA_TEXT_SUFFIX};
    if (g.text) {
      g.text_pos = rnd(&r, 0, 1) ? STSA_TEXT_PREFIX : STSA_TEXT_SUFFIX;
      g.text_real = rnd(&r, 0, g.text);
    }
    stsa_mask *m[N_VIDEO_MASKS];
    video_masks(&r, &g, m);
    const int64_t N = n_tokens(&g);
    char what[160];
    for (int qo = 0; qo < 2; qo++)
      for (int ko = 0; ko < 3; ko++)
        for (int t = 0; t < 3; t++) {
          stsa_plan_desc d = desc_of(N, N, N_VIDEO_MASKS, (const stsa_mask *const *)m, &g,
                                     STSA_PLAN_ALLOW_EMPTY_ROWS);
          d.q_order = (stsa_order)qo;
          d.kv_order = (stsa_order)ko;
          d.q_tile = t < 2 ? tiles[t][0] : 0;
          d.kv_tile = t < 2 ? tiles[t][1] : 0;
          snprintf(what, sizeof what,
                   "F%lld H%lld W%lld C%lld/%lld pos %d, orders %d/%d, %s",
                   (long long)g.frames, (long long)g.height, (long long)g.width,
                   (long long)g.text, (long long)g.text_real, (int)g.text_pos, qo, ko,
                   t < 2 ? "public tiles" : "fixed 5 x 7 tiles");
          plan_vs_brute(ctx, &d, t < 2 ? 0 : 5, 7, what);
        }
    /* sharing: m[14] equals m[0] */
    stsa_plan_desc d = desc_of(N, N, N_VIDEO_MASKS, (const stsa_mask *const *)m, &g,
                               STSA_PLAN_ALLOW_EMPTY_ROWS);
    stsa_plan *p = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
    if (p) {
      CHECK(p->parts_count == N_VIDEO_MASKS - 1 && p->head_part[14] == p->head_part[0],
            "equal masks not shared: %d parts", p->parts_count);
      stsa_plan_free(p);
    }
    /* a plan over sampled query rows (online profiling) */
    int64_t rows[9];
    for (int i = 0; i < 9; i++)
      rows[i] = rnd(&r, 0, N - 1);
    d.s_q = 9;
    d.q_rows = rows;
    d.kv_order = STSA_ORDER_SINK_FIRST;
    d.q_tile = 6;
    d.kv_tile = 16;
    plan_vs_brute(ctx, &d, 0, 0, "sampled rows");
    for (int i = 0; i < N_VIDEO_MASKS; i++)
      stsa_mask_free(m[i]);
  }
  stsa_ctx_free(ctx);
}

static void test_plans_plain(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  tu_rng r = {77};
  const int64_t shapes[][2] = {{37, 53}, {64, 64}, {100, 31}, {1, 17}};
  for (int s = 0; s < 4; s++) {
    const int64_t sq = shapes[s][0], skv = shapes[s][1];
    stsa_mask *m[8];
    NEW_MASK(m[0], stsa_mask_causal(0, &m[0]));
    NEW_MASK(m[1], stsa_mask_causal(-3, &m[1]));
    NEW_MASK(m[2], stsa_mask_local(5, 9, &m[2]));
    NEW_MASK(m[3], stsa_mask_local(STSA_UNBOUNDED, 2, &m[3]));
    NEW_MASK(m[4], stsa_mask_chunked_causal(11, &m[4]));
    int32_t *qs = malloc(sizeof(int32_t) * (size_t)sq),
            *ks = malloc(sizeof(int32_t) * (size_t)skv);
    for (int64_t i = 0; i < sq; i++)
      qs[i] = (int32_t)(i * 3 / sq);
    for (int64_t j = 0; j < skv; j++)
      ks[j] = (int32_t)(j * 3 / skv);
    NEW_MASK(m[5], stsa_mask_segments(qs, sq, ks, skv, &m[5]));
    uint8_t *bits = malloc((size_t)(sq * skv));
    for (int64_t i = 0; i < sq * skv; i++)
      bits[i] = rnd(&r, 0, 3) == 0;
    NEW_MASK(m[6], stsa_mask_dense(bits, sq, skv, &m[6]));
    stsa_mask *tmp;
    NEW_MASK(tmp, stsa_mask_local(3, 3, &tmp));
    stsa_mask *both;
    NEW_MASK(both, stsa_mask_and(m[6], m[5], &both));
    m[7] = or_free(tmp, both);
    const int tiles[][2] = {{6, 16}, {12, 32}, {48, 64}};
    for (int t = 0; t < 3; t++) {
      stsa_plan_desc d = desc_of(sq, skv, 8, (const stsa_mask *const *)m, NULL,
                                 STSA_PLAN_ALLOW_EMPTY_ROWS);
      d.q_tile = tiles[t][0];
      d.kv_tile = tiles[t][1];
      char what[96];
      snprintf(what, sizeof what, "plain %lld x %lld, tiles %d x %d", (long long)sq,
               (long long)skv, tiles[t][0], tiles[t][1]);
      plan_vs_brute(ctx, &d, 0, 0, what);
    }
    free(qs);
    free(ks);
    free(bits);
    for (int i = 0; i < 8; i++)
      stsa_mask_free(m[i]);
  }
  stsa_ctx_free(ctx);
}

/* ===================== 5. large structured plans ========================= */
static void report_plan(const stsa_plan *p, double ms, const char *what) {
  stsa_plan_stats st;
  stsa_plan_get_stats(p, &st);
  printf("  %s: %lld x %lld tiles of %d x %d, %lld active (%.1f%%), %lld partial, "
         "%lld distinct partials, density %.3f, %.1f ms, %.2f MB\n",
         what, (long long)st.q_tiles, (long long)st.kv_tiles, p->q_tile, p->kv_tile,
         (long long)st.tiles_active,
         100.0 * (double)st.tiles_active / (double)st.tiles_total,
         (long long)st.tiles_partial, (long long)st.distinct_partials,
         (double)st.pairs_kept / (double)st.pairs_total, ms,
         (double)stsa_plan_bytes(p) / 1048576.0);
  CHECK(st.tiles_active < st.tiles_total / 2, "%s: %lld of %lld tiles active", what,
        (long long)st.tiles_active, (long long)st.tiles_total);
  CHECK(st.tiles_partial * 10 < st.tiles_active, "%s: %lld of %lld active tiles partial",
        what, (long long)st.tiles_partial, (long long)st.tiles_active);
  CHECK(st.distinct_partials < 4096, "%s: %lld distinct partials", what,
        (long long)st.distinct_partials);
  CHECK(stsa_plan_bytes(p) < ((size_t)64 << 20), "%s: %zu bytes", what,
        stsa_plan_bytes(p));
  CHECK(ms < 20000, "%s: build took %.0f ms", what, ms);
}

/* A few random tiles of a large plan against brute force. */
static void spot_check(const stsa_plan *p, const stsa_mask *m, tu_rng *r,
                       const char *what) {
  long bad = 0;
  for (int n = 0; n < 24; n++) {
    /* half the probes on active tiles, where the interesting cases are */
    const stsa_plan_part *part = &p->parts[0];
    int64_t qt = rnd(r, 0, p->q_tiles - 1), kt = rnd(r, 0, p->kv_tiles - 1);
    int64_t ne = part->bs.tile_ptr[qt + 1] - part->bs.tile_ptr[qt];
    if (n % 2 && ne > 0)
      kt = part->bs.kv_tile[part->bs.tile_ptr[qt] + rnd(r, 0, ne - 1)];
    int64_t kept = 0, pairs = 0;
    for (int64_t q = qt * p->q_tile; q < (qt + 1) * p->q_tile && q < p->s_q; q++)
      for (int64_t k = kt * p->kv_tile; k < (kt + 1) * p->kv_tile && k < p->s_kv; k++) {
        kept += stsa_mask_keep(m, p->q_native ? p->q_native[q] : q,
                               p->kv_native ? p->kv_native[k] : k);
        pairs++;
      }
    int want = kept == 0 ? 0 : kept == pairs ? 2 : 1;
    bad += stsa_plan_tile_kind(p, 0, qt, kt) != want;
  }
  CHECK(bad == 0, "%s: %ld of 24 sampled tiles misclassified", what, bad);
}

static void test_large(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  const stsa_geometry g = {33,  45,  80,
                           256, 200, STSA_TEXT_SUFFIX}; /* HunyuanVideo 720p */
  const int64_t N = n_tokens(&g);
  tu_rng r = {5};
  printf("HunyuanVideo 720p geometry, N = %lld:\n", (long long)N);
  /* SVG at density 0.25: band w = N (1 - sqrt(1 - s')) rounded down to 128,
   * about 4 frames for the spatial head */
  stsa_mask *fw, *band, *sink, *text, *spatial, *temporal;
  NEW_MASK(fw, stsa_mask_frame_window(&g, 4, &fw));
  NEW_MASK(band, stsa_mask_position_band(&g, 15616, &band));
  NEW_MASK(sink, stsa_mask_sink_frames(&g, 1, &sink));
  NEW_MASK(text, stsa_mask_text(&g, &text));
  NEW_MASK(spatial, stsa_mask_or(fw, sink, &spatial));
  spatial = or_free(spatial, text);
  NEW_MASK(text, stsa_mask_text(&g, &text));
  NEW_MASK(temporal, stsa_mask_or(band, sink, &temporal));
  temporal = or_free(temporal, text);
  stsa_mask_free(fw);
  stsa_mask_free(band);
  stsa_mask_free(sink);
  const stsa_mask *ms[1] = {spatial};
  stsa_plan_desc d = desc_of(N, N, 1, ms, &g, 0);
  d.q_tile = d.kv_tile = 128;
  stsa_plan *p = NULL;
  double t0 = now_ms();
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  double ms_spatial = now_ms() - t0;
  if (p) {
    report_plan(p, ms_spatial, "spatial: frame_window(4) | sink | text, native");
    spot_check(p, spatial, &r, "spatial");
    stsa_plan_free(p);
  }
  ms[0] = temporal;
  d.q_order = STSA_ORDER_POSITION_MAJOR;
  d.kv_order = STSA_ORDER_SINK_FIRST;
  t0 = now_ms();
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  double ms_temporal = now_ms() - t0;
  if (p) {
    report_plan(
        p, ms_temporal,
        "temporal: position_band(15616) | sink | text, q POSITION_MAJOR, kv SINK_FIRST");
    spot_check(p, temporal, &r, "temporal");
    stsa_plan_free(p);
  }
  stsa_mask_free(spatial);
  stsa_mask_free(temporal);
  stsa_ctx_free(ctx);
}

/* ============================ 6. the cache =============================== */
static void test_cache(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  const stsa_geometry g = {4, 3, 5, 6, 4, STSA_TEXT_PREFIX};
  const int64_t N = n_tokens(&g);
  stsa_mask *a1, *a2, *b;
  NEW_MASK(a1, stsa_mask_frame_window(&g, 1, &a1));
  NEW_MASK(a2, stsa_mask_frame_window(&g, 1, &a2)); /* equal, another object */
  NEW_MASK(b, stsa_mask_frame_window(&g, 2, &b));
  const stsa_mask *m1[2] = {a1, b}, *m2[2] = {a2, b}, *m3[2] = {b, b};
  stsa_plan_desc d = desc_of(N, N, 2, m1, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  stsa_plan *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL, *p5 = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p1), STSA_OK);
  d.masks = m2;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p2), STSA_OK);
  CHECK(p1 && p1 == p2, "an identical description gave another plan");
  d.masks = m3;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p3), STSA_OK);
  CHECK(p3 && p3 != p1, "a different mask gave the cached plan");
  d.masks = m1;
  d.kv_tile = 32;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p4), STSA_OK);
  CHECK(p4 && p4 != p1, "a different kv tile gave the cached plan");
  d.kv_tile = 0;
  d.kv_order = STSA_ORDER_SINK_FIRST;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p5), STSA_OK);
  CHECK(p5 && p5 != p1, "a different order gave the cached plan");
  stsa_plan_free(p1);
  stsa_mask_free(a1); /* plans and the cache hold their own references */
  stsa_mask_free(a2);
  /* 40 more distinct plans push p1 out (least recently used) */
  for (int w = 3; w < 43; w++) {
    stsa_mask *x;
    NEW_MASK(x, stsa_mask_frame_window(&g, w, &x));
    const stsa_mask *mx[1] = {x};
    stsa_plan_desc dx = desc_of(N, N, 1, mx, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
    stsa_plan *px = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &dx, &px), STSA_OK);
    stsa_mask_free(x);
    stsa_plan_free(px);
  }
  NEW_MASK(a1, stsa_mask_frame_window(&g, 1, &a1));
  m1[0] = a1;
  d.kv_order = STSA_ORDER_NATIVE;
  stsa_plan *p6 = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p6), STSA_OK);
  CHECK(p6 && p6 != p2, "an evicted plan came back from the cache");
  stsa_ctx_free(ctx); /* plans outlive their context */
  stsa_plan_stats st;
  CHECK_STATUS(stsa_plan_get_stats(p2, &st), STSA_OK);
  CHECK(st.distinct_masks == 2, "plan after context free: %lld masks",
        (long long)st.distinct_masks);
  stsa_plan_free(p5);
  stsa_plan_free(p2);
  stsa_plan_free(p4);
  stsa_plan_free(p6);
  stsa_plan_free(p3);
  stsa_plan_free(NULL);
  stsa_mask_free(a1);
  stsa_mask_free(b);
}

/* ========================== description errors =========================== */
static void expect_fail(stsa_ctx *ctx, const stsa_plan_desc *d, stsa_status want,
                        const char *what) {
  stsa_plan sentinel, *p = &sentinel; /* must stay untouched */
  stsa_status st = stsa_plan_build(ctx, d, &p);
  CHECK(st == want && p == &sentinel && stsa_ctx_last_error(ctx)[0],
        "%s: %s, expected %s (message '%s')", what, stsa_status_str(st),
        stsa_status_str(want), stsa_ctx_last_error(ctx));
}

static void test_plan_errors(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  const stsa_geometry g = {2, 2, 3, 2, 2, STSA_TEXT_SUFFIX};
  const int64_t N = n_tokens(&g);
  stsa_mask *fw, *causal, *dense, *other;
  uint8_t bits[5 * 5];
  memset(bits, 1, sizeof bits);
  NEW_MASK(fw, stsa_mask_frame_window(&g, 1, &fw));
  NEW_MASK(causal, stsa_mask_causal(0, &causal));
  NEW_MASK(dense, stsa_mask_dense(bits, 5, 5, &dense));
  const stsa_geometry g2 = {2, 3, 2, 2, 2, STSA_TEXT_SUFFIX};
  NEW_MASK(other, stsa_mask_frame_window(&g2, 1, &other));
  const stsa_mask *mf[1] = {fw}, *mc[1] = {causal}, *md[1] = {dense}, *mo[1] = {other};
  const stsa_mask *mnull[1] = {NULL};
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build(NULL, NULL, &p), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_plan_build(ctx, NULL, &p), STSA_ERR_NULL_ARG);
  const stsa_plan_desc base = desc_of(N, N, 1, mf, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  stsa_plan_desc d = base;
  CHECK_STATUS(stsa_plan_build(ctx, &d, NULL), STSA_ERR_NULL_ARG);
  d.heads = 0;
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "heads 0");
  d.heads = INT64_MAX; /* refused before masks[1..] is read */
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "heads INT64_MAX");
  d.heads = ((int64_t)1 << 40) + 1;
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "heads 2^40 + 1");
  d = base;
  d.masks = NULL;
  expect_fail(ctx, &d, STSA_ERR_NULL_ARG, "masks NULL");
  d.masks = mnull;
  expect_fail(ctx, &d, STSA_ERR_NULL_ARG, "masks[0] NULL");
  d = base;
  d.s_q = N - 1;
  expect_fail(ctx, &d, STSA_ERR_BAD_SHAPE, "s_q != tokens");
  d = base;
  d.q_order = STSA_ORDER_SINK_FIRST;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "q_order SINK_FIRST");
  d.q_order = (stsa_order)9;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "q_order 9");
  d = base;
  d.kv_tile = 40;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "kv_tile 40");
  d.kv_tile = 0;
  d.q_tile = -6;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "q_tile -6");
  d = base;
  d.flags = 8;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "unknown flag");
  d = base;
  d.masks = mo;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "mask of another geometry");
  d = base;
  d.geometry = NULL;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "video mask without geometry");
  d.masks = mc;
  d.kv_order = STSA_ORDER_POSITION_MAJOR;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "permuted order without geometry");
  d = base;
  d.masks = md;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "dense 5 x 5 on a 14-token plan");
  d.geometry = NULL;
  d.s_q = d.s_kv = 5;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  stsa_plan_free(p);
  d.s_q = 4;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "dense 5 x 5 on a 4 x 5 plan");
  int64_t rows[2] = {1, 5};
  d.q_rows = rows;
  d.s_q = 2;
  expect_fail(ctx, &d, STSA_ERR_BAD_MASK, "q_rows past the dense mask");
  rows[1] = -1;
  expect_fail(ctx, &d, STSA_ERR_BAD_PARAM, "negative q_rows");
  rows[1] = 4;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  stsa_plan_free(p);
  CHECK(stsa_plan_tile_kind(NULL, 0, 0, 0) == -1, "tile kind of NULL");
  CHECK_STATUS(stsa_plan_get_stats(NULL, NULL), STSA_ERR_NULL_ARG);
  CHECK(!strcmp(stsa_sparse_mode_name(STSA_SPARSE_EXACT), "exact") &&
            !strcmp(stsa_sparse_mode_name(STSA_SPARSE_NAIVE), "naive") &&
            !strcmp(stsa_sparse_mode_name(STSA_SPARSE_TILE_ROUNDED), "tile-rounded"),
        "sparse mode names");
  stsa_mask_free(fw);
  stsa_mask_free(causal);
  stsa_mask_free(dense);
  stsa_mask_free(other);
  stsa_ctx_free(ctx);
}

/* Plan statistics saturate at INT64_MAX instead of overflowing: 2^22 heads
 * of 2^21 x 2^21 pairs are 2^64 pairs. */
static void test_stats_saturate(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_mask *diag;
  NEW_MASK(diag, stsa_mask_local(0, 0, &diag));
  const int64_t H = (int64_t)1 << 22, S = (int64_t)1 << 21;
  const stsa_mask **masks = malloc(sizeof *masks * (size_t)H);
  for (int64_t h = 0; masks && h < H; h++)
    masks[h] = diag;
  stsa_plan_desc d = desc_of(S, S, H, masks, NULL, STSA_PLAN_DEFAULT);
  d.kv_tile = 4096;
  d.q_tile = 4096;
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  stsa_plan_stats st;
  CHECK_STATUS(stsa_plan_get_stats(p, &st), STSA_OK);
  CHECK(st.pairs_total == INT64_MAX, "pairs_total %lld, expected INT64_MAX (saturated)",
        (long long)st.pairs_total);
  CHECK(st.tiles_total == H * (S / 4096) * (S / 4096), "tiles_total %lld",
        (long long)st.tiles_total);
  CHECK(st.pairs_kept == H * S, "pairs_kept %lld", (long long)st.pairs_kept);
  stsa_plan_free(p);
  free(masks);
  stsa_mask_free(diag);
  stsa_ctx_free(ctx);
}

/* Plan references are counted atomically: one thread takes references (cache
 * hits of stsa_plan_build, on the context it owns) while three others drop
 * references taken before (stsa_plan_free without the context, as a
 * finalizer would). A lost update shows as a wrong final count, or under
 * ASan as a use after free. */
static void test_plan_refs_threads(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_mask *m;
  NEW_MASK(m, stsa_mask_causal(0, &m));
  const stsa_mask *masks[1] = {m};
  stsa_plan_desc d = desc_of(64, 64, 1, masks, NULL, STSA_PLAN_DEFAULT);
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_OK);
  enum { REFS = 60000, ROUNDS = 64, DROPPERS = 1 };
  stsa_plan **held = malloc(sizeof *held * REFS);
  long wrong = 0;
  omp_set_dynamic(0);
  for (int round = 0; plan && held && round < ROUNDS; round++) {
    for (int i = 0; i < REFS; i++)
      stsa_plan_build(ctx, &d, &held[i]);
    long same = 0;
#pragma omp parallel num_threads(1 + DROPPERS) reduction(+ : same)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp barrier
      if (t == 0) {
        for (int i = 0; i < REFS; i++) { /* take and drop */
          stsa_plan *p = NULL;
          stsa_plan_build(ctx, &d, &p);
          same += p == plan;
          stsa_plan_free(p);
        }
      }
      /* the held ones, interleaved over the other threads (all of them on
       * thread 0 if the runtime gave only one) */
      for (int i = nt > 1 ? t - 1 : 0; t > 0 || nt == 1; i += nt > 1 ? nt - 1 : 1) {
        if (i >= REFS)
          break;
        stsa_plan_free(held[i]);
        for (volatile int spin = 0; spin < 10; spin++)
          ;
      }
    }
    wrong += REFS - same;
  }
  CHECK(wrong == 0, "%ld cache hits gave another plan", wrong);
  /* left: the caller's reference and the cache's */
  CHECK(plan && plan->refcount == 2, "plan refcount %d after the races, expected 2",
        plan ? (int)plan->refcount : -1);
  free(held);
  stsa_plan_free(plan);
  stsa_mask_free(m);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_conformance();
  test_video_mask_semantics();
  test_index_mask_semantics();
  test_mask_errors_and_equality();
  test_orders();
  test_plans_video();
  test_plans_plain();
  test_plan_errors();
  test_cache();
  test_plan_refs_threads();
  test_stats_saturate();
  test_large();
  return tu_finish("test_mask");
}
