/*
 * test_mask_semantics.c — every mask kind against a predicate written here
 * from (frame, y, x) coordinates; index masks; constructor errors, equality
 * and the depth limit of mask trees. Brute-force loops count mismatches and
 * CHECK once.
 */
#include <stdint.h>
#include <string.h>

#include "mask_util.h"

typedef struct tok {
  int kind; /* 0 outside, 1 video, 2 real text, 3 padding text */
  int64_t f, y, x;
} tok;

static tok decode(const stsa_geometry *g, int64_t i) {
  tok t = {0, 0, 0, 0};
  const int64_t L = g->frames * g->height * g->width;
  if (i < 0 || i >= tu_tokens(g))
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
  const int64_t N = tu_tokens(g);
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
    const int64_t N = tu_tokens(g);
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

int main(void) {
  test_video_mask_semantics();
  test_index_mask_semantics();
  test_mask_errors_and_equality();
  return tu_finish("test_mask_semantics");
}
