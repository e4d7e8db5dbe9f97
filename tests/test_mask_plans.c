/*
 * test_mask_plans.c — plans against a brute-force classification of every
 * tile (tests/plan_oracle.h), for random small geometries, every order
 * combination and several tile sizes, for plain sequences, and for sampled
 * query rows; equal masks share a part.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask/geometry.h"
#include "mask/plan_build.h"
#include "mask_util.h"
#include "plan_oracle.h"

/* Checks every head of p against brute force (tests/plan_oracle.h), with
 * token maps derived here from the description rather than taken from the
 * plan; and that equal patterns are stored once. */
static void check_plan(const stsa_plan *p, const stsa_mask *const *masks,
                       const int64_t *q_nat, const int64_t *kv_nat, const char *what) {
  plan_oracle o = {0};
  for (int64_t h = 0; h < p->heads; h++)
    plan_oracle_head(&o, p, h, masks[h], q_nat, kv_nat);
  plan_oracle_dedup(&o, p);
  CHECK(o.bad_kind == 0, "%s: %ld tile kinds wrong; first: %s", what, o.bad_kind,
        o.first);
  CHECK(o.bad_pattern == 0, "%s: %ld pattern errors; first: %s", what, o.bad_pattern,
        o.first);
  CHECK(o.bad_count == 0, "%s: %ld count/CSR errors; first: %s", what, o.bad_count,
        o.first);
}

enum { N_VIDEO_MASKS = 15 };

static void video_masks(tu_rng *r, const stsa_geometry *g, stsa_mask **m) {
  const int64_t F = g->frames, N = tu_tokens(g);
  stsa_mask *t1, *t2;
  NEW_MASK(m[0], stsa_mask_frame_window(g, 1, &m[0]));
  NEW_MASK(m[1], stsa_mask_position_band(g, tu_rnd(r, 1, 2 * F + 3), &m[1]));
  NEW_MASK(m[2], stsa_mask_spatial_window(g, 1, 2, &m[2]));
  NEW_MASK(m[3], stsa_mask_sink_frames(g, 1, &m[3]));
  NEW_MASK(m[4], stsa_mask_sink_frames(g, 2, &m[4]));
  NEW_MASK(m[5], stsa_mask_text(g, &m[5]));
  /* the spatial and the temporal head of SVG */
  NEW_MASK(t1, stsa_mask_frame_window(g, 0, &t1));
  NEW_MASK(t2, stsa_mask_sink_frames(g, 1, &t2));
  m[6] = tu_or_free(t1, t2);
  NEW_MASK(t1, stsa_mask_text(g, &t1));
  m[6] = tu_or_free(m[6], t1);
  NEW_MASK(t1, stsa_mask_position_band(g, F + 1, &t1));
  NEW_MASK(t2, stsa_mask_sink_frames(g, 1, &t2));
  m[7] = tu_or_free(t1, t2);
  NEW_MASK(t1, stsa_mask_text(g, &t1));
  m[7] = tu_or_free(t1, m[7]);
  NEW_MASK(t1, stsa_mask_frame_window(g, 1, &t1));
  NEW_MASK(t2, stsa_mask_spatial_window(g, 1, 1, &t2));
  m[8] = tu_and_free(t1, t2);
  NEW_MASK(t1, stsa_mask_frame_window(g, 0, &t1));
  NEW_MASK(t2, stsa_mask_position_band(g, 3, &t2));
  m[9] = tu_or_free(t1, t2);
  NEW_MASK(t1, stsa_mask_spatial_window(g, 2, 2, &t1));
  m[9] = tu_and_free(m[9], t1);
  NEW_MASK(m[10], stsa_mask_causal(3, &m[10])); /* scanned in permuted kv orders */
  NEW_MASK(t1, stsa_mask_local(7, 4, &t1));
  NEW_MASK(t2, stsa_mask_text(g, &t2));
  stsa_mask *t3;
  NEW_MASK(t3, stsa_mask_frame_window(g, 1, &t3));
  m[11] = tu_and_free(t1, tu_or_free(t2, t3));
  uint8_t *bits = malloc((size_t)(N * N));
  for (int64_t i = 0; i < N * N; i++)
    bits[i] = tu_rnd(r, 0, 9) < 3;
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
    stsa_geometry g = {
        tu_rnd(&r, 2, 5), tu_rnd(&r, 2, 5), tu_rnd(&r, 2, 7), tu_rnd(&r, 0, 9), 0,
        STSA_TEXT_NONE};
    if (trial == 0) /* one frame, one column: the degenerate orders */
      g = (stsa_geometry){1, 3, 1, 4, 2, STSA_TEXT_SUFFIX};
    if (g.text) {
      g.text_pos = tu_rnd(&r, 0, 1) ? STSA_TEXT_PREFIX : STSA_TEXT_SUFFIX;
      g.text_real = tu_rnd(&r, 0, g.text);
    }
    stsa_mask *m[N_VIDEO_MASKS];
    video_masks(&r, &g, m);
    const int64_t N = tu_tokens(&g);
    char what[160];
    for (int qo = 0; qo < 2; qo++)
      for (int ko = 0; ko < 3; ko++)
        for (int t = 0; t < 3; t++) {
          stsa_plan_desc d =
              tu_plan_desc(N, N, N_VIDEO_MASKS, (const stsa_mask *const *)m, &g,
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
    stsa_plan_desc d = tu_plan_desc(N, N, N_VIDEO_MASKS, (const stsa_mask *const *)m, &g,
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
      rows[i] = tu_rnd(&r, 0, N - 1);
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
      bits[i] = tu_rnd(&r, 0, 3) == 0;
    NEW_MASK(m[6], stsa_mask_dense(bits, sq, skv, &m[6]));
    stsa_mask *tmp;
    NEW_MASK(tmp, stsa_mask_local(3, 3, &tmp));
    stsa_mask *both;
    NEW_MASK(both, stsa_mask_and(m[6], m[5], &both));
    m[7] = tu_or_free(tmp, both);
    const int tiles[][2] = {{6, 16}, {12, 32}, {48, 64}};
    for (int t = 0; t < 3; t++) {
      stsa_plan_desc d = tu_plan_desc(sq, skv, 8, (const stsa_mask *const *)m, NULL,
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

int main(void) {
  test_plans_video();
  test_plans_plain();
  return tu_finish("test_mask_plans");
}
