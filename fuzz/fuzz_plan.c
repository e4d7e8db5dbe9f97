/*
 * fuzz_plan.c — libFuzzer target for masks and plans.
 *
 * The input is decoded into a small geometry (or a plain sequence), token
 * orders, tile sizes, flags and up to three heads, each a mask tree of depth
 * <= 3. The plan must build (or refuse an empty row that really exists), and
 * every tile is compared with a brute-force classification over all pairs
 * (tests/plan_oracle.c, the oracle the plan tests use too): kinds, CSR
 * entries, stored row intervals, per-entry and total kept counts, shared
 * pattern storage. Any mismatch calls abort() so libFuzzer records the input.
 *
 * Links the library's sources and tests/plan_oracle.c (fuzz/run.sh); each
 * input gets a fresh context on the portable kernels, so the plan cache
 * starts empty and the tile sizes asked for fit the kernels' register tile.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_reader.h"
#include "kernel/dispatch.h"
#include "mask/mask.h"
#include "mask/plan_build.h"
#include "plan_oracle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why) {
  fprintf(stderr, "fuzz_plan: %s\n", why);
  abort();
}

/* Mostly small values, sometimes the extremes a window may take. */
static int64_t window(reader *r) {
  unsigned b = byte(r);
  if (b == 255)
    return INT64_MAX;
  if (b == 254)
    return (int64_t)1 << 40;
  return b % 24;
}

typedef struct shape {
  const stsa_geometry *g; /* NULL: plain sequence */
  int64_t s_q, s_kv;
} shape;

static stsa_mask *leaf(reader *r, const shape *s) {
  stsa_mask *m = NULL;
  stsa_status st = STSA_OK;
  const stsa_geometry *g = s->g;
  switch (byte(r) % 11) {
  case 0:
    st = stsa_mask_causal((int64_t)(byte(r) % 32) - 16, &m);
    break;
  case 1: {
    unsigned b = byte(r);
    st = stsa_mask_local(b & 1 ? STSA_UNBOUNDED : window(r),
                         b & 2 ? STSA_UNBOUNDED : window(r), &m);
    break;
  }
  case 2:
    st = stsa_mask_chunked_causal(1 + byte(r) % 20, &m);
    break;
  case 3:
  case 4: { /* dense or segments, sized for the plan */
    const int64_t nq = s->s_q, nk = s->s_kv;
    const unsigned density = byte(r) % 8;
    uint64_t x = 0x9e3779b97f4a7c15ULL * (1 + byte(r));
    if (byte(r) % 2 == 0) {
      uint8_t *bits = malloc((size_t)(nq * nk));
      for (int64_t i = 0; i < nq * nk; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        bits[i] = (x & 7) < density;
      }
      st = stsa_mask_dense(bits, nq, nk, &m);
      free(bits);
    } else {
      int32_t *qs = malloc(sizeof(int32_t) * (size_t)nq);
      int32_t *ks = malloc(sizeof(int32_t) * (size_t)nk);
      for (int64_t i = 0; i < nq; i++)
        qs[i] = (int32_t)(i * (density + 1) / nq);
      for (int64_t j = 0; j < nk; j++)
        ks[j] = (int32_t)(j * (density + 1) / nk);
      st = stsa_mask_segments(qs, nq, ks, nk, &m);
      free(qs);
      free(ks);
    }
    break;
  }
  case 5:
    st = g ? stsa_mask_frame_window(g, window(r), &m) : stsa_mask_full(&m);
    break;
  case 6:
    st = g ? stsa_mask_spatial_window(g, window(r), window(r), &m) : stsa_mask_full(&m);
    break;
  case 7:
    st = g ? stsa_mask_position_band(g, window(r), &m) : stsa_mask_full(&m);
    break;
  case 8:
    st = g ? stsa_mask_sink_frames(g, 1 + byte(r) % 6, &m) : stsa_mask_full(&m);
    break;
  case 9:
    st = g ? stsa_mask_text(g, &m) : stsa_mask_full(&m);
    break;
  default:
    st = stsa_mask_full(&m);
    break;
  }
  if (st != STSA_OK || !m)
    fail("a valid leaf was refused");
  return m;
}

static stsa_mask *tree(reader *r, const shape *s, int depth) {
  unsigned b = byte(r);
  if (depth >= 3 || b % 3 == 0)
    return leaf(r, s);
  stsa_mask *a = tree(r, s, depth + 1), *c = tree(r, s, depth + 1), *m = NULL;
  stsa_status st = b % 3 == 1 ? stsa_mask_and(a, c, &m) : stsa_mask_or(a, c, &m);
  if (st != STSA_OK)
    fail("a combination of compatible masks was refused");
  stsa_mask_free(a);
  stsa_mask_free(c);
  return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  stsa_geometry geom = {1 + byte(&r) % 4, 1 + byte(&r) % 4, 1 + byte(&r) % 5, 0, 0,
                        STSA_TEXT_NONE};
  const unsigned mode = byte(&r);
  shape s = {NULL, 1 + byte(&r) % 48, 1 + byte(&r) % 48};
  if (mode & 1) { /* a video geometry */
    geom.text = byte(&r) % 8;
    geom.text_real = geom.text ? byte(&r) % (geom.text + 1) : 0;
    geom.text_pos = geom.text ? (mode & 2 ? STSA_TEXT_PREFIX : STSA_TEXT_SUFFIX) : 0;
    s.g = &geom;
    s.s_q = s.s_kv = stsa_geometry_tokens(&geom);
  }
  const int64_t heads = 1 + byte(&r) % 3;
  stsa_mask *masks[3] = {NULL, NULL, NULL};
  for (int64_t h = 0; h < heads; h++)
    masks[h] = h > 0 && byte(&r) % 4 == 0 ? (stsa_mask *)stsa_mask_ref(masks[0])
                                          : tree(&r, &s, 0);
  stsa_plan_desc d = {.size = sizeof(stsa_plan_desc),
                      .s_q = s.s_q,
                      .s_kv = s.s_kv,
                      .heads = heads,
                      .masks = (const stsa_mask *const *)masks,
                      .geometry = s.g};
  if (s.g) {
    d.q_order = (stsa_order)(byte(&r) % 2);
    d.kv_order = (stsa_order)(byte(&r) % 3);
  }
  d.flags = byte(&r) % 2 ? STSA_PLAN_ALLOW_EMPTY_ROWS : 0;
  const unsigned tb = byte(&r);
  /* The portable kernels, whatever the CPU: their register tile (mr x nr)
   * decides which tile sizes a description may ask for. */
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK ||
      stsa_ctx_set(ctx, STSA_PARAM_BACKEND, STSA_BACKEND_PORTABLE) != STSA_OK)
    fail("cannot create a portable context");
  const int mr = ctx->run->kern.mr, nr = ctx->run->kern.nr;
  stsa_plan *p = NULL;
  stsa_status st;
  if (tb & 1) {
    st = stsa_plan_build_tiles(ctx, &d, 1 + (int)(tb >> 1) % 20, 1 + byte(&r) % 40, &p);
  } else {
    d.q_tile = mr * (int)((tb >> 1) % 7);
    d.kv_tile = nr * (int)(byte(&r) % 4);
    st = stsa_plan_build(ctx, &d, &p);
  }
  int64_t *q_map = NULL, *kv_map = NULL;
  if (s.g && d.q_order != STSA_ORDER_NATIVE) {
    q_map = malloc(sizeof(int64_t) * (size_t)s.s_q);
    stsa_order_permutation(s.g, d.q_order, q_map);
  }
  if (s.g && d.kv_order != STSA_ORDER_NATIVE) {
    kv_map = malloc(sizeof(int64_t) * (size_t)s.s_kv);
    stsa_order_permutation(s.g, d.kv_order, kv_map);
  }
  if (st == STSA_ERR_EMPTY_ROW) {
    int any = 0;
    for (int64_t h = 0; h < heads; h++)
      any |= plan_oracle_empty_row(&d, h, q_map, kv_map);
    if (!any || (d.flags & STSA_PLAN_ALLOW_EMPTY_ROWS) || p)
      fail("an empty row was reported where there is none");
  } else if (st != STSA_OK || !p) {
    fprintf(stderr, "%s: %s\n", stsa_status_str(st), stsa_ctx_last_error(ctx));
    fail("a valid description was refused");
  } else {
    plan_oracle o = {0};
    for (int64_t h = 0; h < heads; h++) {
      if (!(d.flags & STSA_PLAN_ALLOW_EMPTY_ROWS) &&
          plan_oracle_empty_row(&d, h, q_map, kv_map))
        fail("an empty row was accepted without the flag");
      plan_oracle_head(&o, p, h, masks[h], p->q_native, p->kv_native);
    }
    plan_oracle_dedup(&o, p);
    if (plan_oracle_bad(&o))
      fail(o.first);
    stsa_plan *again = NULL;
    if (!(tb & 1) && (stsa_plan_build(ctx, &d, &again) != STSA_OK || again != p))
      fail("the cache did not return the same plan");
    stsa_plan_free(again);
    stsa_plan_free(p);
  }
  free(q_map);
  free(kv_map);
  for (int64_t h = 0; h < heads; h++)
    stsa_mask_free(masks[h]);
  stsa_ctx_free(ctx); /* and the plans its cache holds */
  return 0;
}
