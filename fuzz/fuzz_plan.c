/*
 * fuzz_plan.c — libFuzzer target for masks and plans.
 *
 * The input is decoded into a small geometry (or a plain sequence), token
 * orders, tile sizes, flags and up to three heads, each a mask tree of depth
 * <= 3. The plan must build (or refuse an empty row that really exists), and
 * every tile is compared with a brute-force classification over all pairs:
 * kinds, stored row intervals, per-entry and total kept counts. Any mismatch
 * calls abort() so libFuzzer records the input.
 *
 * Needs the src/mask sources and src/core/status.c; the context is built by hand so
 * that nothing else is linked in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_reader.h"
#include "mask/mask.h"
#include "mask/plan_build.h"

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

static int64_t native(const int64_t *map, int64_t pos) { return map ? map[pos] : pos; }

/* Every tile of head h against stsa_mask_keep; returns the kept pair count. */
static int64_t check_head(const stsa_plan *p, int64_t h, const stsa_mask *m) {
  const stsa_plan_part *part = &p->parts[p->head_part[h]];
  if (part->mask != m && !stsa_mask_equal(part->mask, m))
    fail("head mapped to a part with another mask");
  int64_t total = 0;
  for (int64_t qt = 0; qt < p->q_tiles; qt++) {
    const int64_t q0 = qt * p->q_tile;
    const int rows = (int)(p->s_q - q0 < p->q_tile ? p->s_q - q0 : p->q_tile);
    int64_t e = part->tile_ptr[qt];
    for (int64_t kt = 0; kt < p->kv_tiles; kt++) {
      const int64_t k0 = kt * p->kv_tile;
      const int cols = (int)(p->s_kv - k0 < p->kv_tile ? p->s_kv - k0 : p->kv_tile);
      int64_t kept = 0;
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
          kept += stsa_mask_keep(m, native(p->q_native, q0 + r),
                                 native(p->kv_native, k0 + c));
      total += kept;
      const int want = kept == 0 ? 0 : kept == (int64_t)rows * cols ? 2 : 1;
      if (stsa_plan_tile_kind(p, h, qt, kt) != want)
        fail("tile kind differs from brute force");
      if (want == 0)
        continue;
      if (e >= part->tile_ptr[qt + 1] || part->kv_tile[e] != kt ||
          part->kind[e] != want || part->rounded_kept[e] != kept)
        fail("CSR entry differs from brute force");
      if (want == 1) {
        if (part->pattern[e] < 0 || part->pattern[e] >= part->patterns)
          fail("pattern id out of range");
        const stsa_tile_pattern *pat = &part->pattern_list[part->pattern[e]];
        if (pat->rows != rows)
          fail("pattern row count");
        for (int r = 0; r < rows; r++) {
          int c = 0;
          for (int32_t k = pat->row_ptr[r]; k < pat->row_ptr[r + 1]; k++) {
            const int lo = pat->iv[2 * k], hi = pat->iv[2 * k + 1];
            if (lo < c || lo >= hi || hi > cols || (k > pat->row_ptr[r] && lo == c))
              fail("pattern intervals not canonical");
            for (; c < hi; c++)
              if (stsa_mask_keep(m, native(p->q_native, q0 + r),
                                 native(p->kv_native, k0 + c)) != (c >= lo))
                fail("pattern differs from brute force");
          }
          for (; c < cols; c++)
            if (stsa_mask_keep(m, native(p->q_native, q0 + r),
                               native(p->kv_native, k0 + c)))
              fail("pattern misses a kept pair");
        }
      } else if (part->pattern[e] != -1) {
        fail("full entry with a pattern");
      }
      e++;
    }
    if (e != part->tile_ptr[qt + 1])
      fail("extra CSR entries");
  }
  if (total != part->kept_pairs)
    fail("kept_pairs differs from brute force");
  return total;
}

/* 1 if some query row of head h keeps no key. */
static int has_empty_row(const stsa_plan_desc *d, const int64_t *q_map,
                         const int64_t *kv_map, int64_t h) {
  for (int64_t q = 0; q < d->s_q; q++) {
    int any = 0;
    for (int64_t k = 0; k < d->s_kv && !any; k++)
      any = stsa_mask_keep(d->masks[h], native(q_map, q), native(kv_map, k));
    if (!any)
      return 1;
  }
  return 0;
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
  stsa_plan_desc d = {.s_q = s.s_q,
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
  stsa_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.q_tile = 192;
  ctx.kv_tile = 256;
  stsa_plan *p = NULL;
  stsa_status st;
  if (tb & 1) {
    st = stsa_plan_build_tiles(&ctx, &d, 1 + (int)(tb >> 1) % 20, 1 + byte(&r) % 40, &p);
  } else {
    d.q_tile = 6 * (int)((tb >> 1) % 7);
    d.kv_tile = 16 * (int)(byte(&r) % 4);
    st = stsa_plan_build(&ctx, &d, &p);
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
      any |= has_empty_row(&d, q_map, kv_map, h);
    if (!any || (d.flags & STSA_PLAN_ALLOW_EMPTY_ROWS) || p)
      fail("an empty row was reported where there is none");
  } else if (st != STSA_OK || !p) {
    fprintf(stderr, "%s: %s\n", stsa_status_str(st), ctx.err.text);
    fail("a valid description was refused");
  } else {
    for (int64_t h = 0; h < heads; h++) {
      if (!(d.flags & STSA_PLAN_ALLOW_EMPTY_ROWS) && has_empty_row(&d, q_map, kv_map, h))
        fail("an empty row was accepted without the flag");
      check_head(p, h, masks[h]);
    }
    stsa_plan *again = NULL;
    if (!(tb & 1) && (stsa_plan_build(&ctx, &d, &again) != STSA_OK || again != p))
      fail("the cache did not return the same plan");
    stsa_plan_free(again);
    stsa_plan_free(p);
  }
  free(q_map);
  free(kv_map);
  for (int64_t h = 0; h < heads; h++)
    stsa_mask_free(masks[h]);
  stsa_plan_cache_destroy(ctx.plans);
  return 0;
}
