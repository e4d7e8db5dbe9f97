/*
 * test_mask_plan_large.c — HunyuanVideo 720p-sized plans (119,056 tokens):
 * small and fast to build (numbers printed), with sampled tiles checked
 * against brute force.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "mask/plan_build.h"
#include "mask_util.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void report_plan(const stsa_plan *p, double ms, const char *what) {
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
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
    int64_t qt = tu_rnd(r, 0, p->q_tiles - 1), kt = tu_rnd(r, 0, p->kv_tiles - 1);
    int64_t ne = part->bs.tile_ptr[qt + 1] - part->bs.tile_ptr[qt];
    if (n % 2 && ne > 0)
      kt = part->bs.kv_tile[part->bs.tile_ptr[qt] + tu_rnd(r, 0, ne - 1)];
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
  const int64_t N = tu_tokens(&g);
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
  spatial = tu_or_free(spatial, text);
  NEW_MASK(text, stsa_mask_text(&g, &text));
  NEW_MASK(temporal, stsa_mask_or(band, sink, &temporal));
  temporal = tu_or_free(temporal, text);
  stsa_mask_free(fw);
  stsa_mask_free(band);
  stsa_mask_free(sink);
  const stsa_mask *ms[1] = {spatial};
  stsa_plan_desc d = tu_plan_desc(N, N, 1, ms, &g, 0);
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

int main(void) {
  test_large();
  return tu_finish("test_mask_plan_large");
}
