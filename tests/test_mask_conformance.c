/*
 * test_mask_conformance.c — Splash's MaskInfo conformance cases
 * (splash-attention.md) on their exact 16 x 16 grid through the internal
 * fixed-tile builder, and scaled by 3 through the public API (q tiles are
 * rounded up to multiples of 6).
 */
#include <stdio.h>
#include <string.h>

#include "kernel/dispatch.h"
#include "mask/plan_build.h"
#include "mask_util.h"

static stsa_plan *plan_fixed(stsa_ctx *ctx, int64_t s_q, int64_t s_kv, int64_t heads,
                             const stsa_mask *const *masks, int tile) {
  stsa_plan_desc d = tu_plan_desc(s_q, s_kv, heads, masks, NULL, 0);
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
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
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
      stsa_plan_desc d =
          tu_plan_desc(64 * s, 64 * s, cases[c].heads, cases[c].m, NULL, 0);
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
  stsa_plan_desc d = tu_plan_desc(32, 32, 4, m, NULL, 0);
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
    stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
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
  /* The public API rounds a 16-row q tile up to a multiple of the backend's
   * register-tile rows: 18 for 6 rows, 24 for 12. */
  stsa_mask *full;
  NEW_MASK(full, stsa_mask_full(&full));
  const stsa_mask *m[1] = {full};
  stsa_plan_desc d = tu_plan_desc(64, 64, 1, m, NULL, 0);
  d.q_tile = d.kv_tile = 16;
  stsa_plan *p = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p), STSA_OK);
  const int mr = ctx->run->kern.mr, want = (16 + mr - 1) / mr * mr;
  if (p)
    CHECK(p->q_tile == want && p->q_tiles == (64 + want - 1) / want && p->kv_tile == 16,
          "q tile 16 -> %d (%lld tiles)", p->q_tile, (long long)p->q_tiles);
  stsa_plan_free(p);
  stsa_mask_free(full);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_conformance();
  return tu_finish("test_mask_conformance");
}
