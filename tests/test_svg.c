/*
 * test_svg.c — the SVG session end to end: presets, window widths, token
 * permutation round trips, the step/layer policy, profiling accuracy on the
 * built-in workload, and SVG output against the double-precision reference
 * under the same per-head masks in original coordinates (text prefix, suffix
 * with padding, none; batch 2; lengths that are not tile multiples).
 */
#define STSA_EXPERIMENTAL /* stsa_workload_generate, stsa_svg_kind_mask */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svg/windows.h"
#include "testutil.h"

static stsa_ctx *make_ctx(stsa_backend backend, int q_tile, int kv_tile) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  stsa_ctx_set(ctx, STSA_PARAM_BACKEND, backend);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  stsa_ctx_set(ctx, STSA_PARAM_Q_TILE, q_tile);
  stsa_ctx_set(ctx, STSA_PARAM_KV_TILE, kv_tile);
  return ctx;
}

static void test_presets(void) {
  /* name, F, Hp, Wp, text, heads, head_dim, density, sample rows */
  struct {
    const char *name;
    int64_t F, Hp, Wp, C, H, D, rows;
    double density;
    int64_t tokens;
  } want[] = {
      {"wan21-480p", 21, 30, 52, 0, 12, 128, 64, 0.30, 32760},
      {"wan21-720p", 21, 45, 80, 0, 40, 128, 64, 0.30, 75600},
      {"hunyuan-720p", 33, 45, 80, 256, 24, 128, 64, 0.25, 118800 + 256},
      {"hunyuan-480p", 33, 30, 45, 256, 24, 128, 64, 0.20, 44550 + 256},
      {"cogvideox15", 11, 48, 85, 226, 48, 64, 32, 0.25, 44880 + 226},
  };
  int count = 0;
  while (stsa_svg_preset_name(count))
    count++;
  CHECK(count == 5, "%d presets", count);
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    stsa_svg_config c = STSA_INIT(stsa_svg_config);
    CHECK_STATUS(stsa_svg_preset(want[i].name, &c), STSA_OK);
    CHECK(c.geometry.frames == want[i].F && c.geometry.height == want[i].Hp &&
              c.geometry.width == want[i].Wp && c.geometry.text == want[i].C &&
              c.heads == want[i].H && c.head_dim == want[i].D &&
              c.sample_rows == want[i].rows && fabs(c.density - want[i].density) < 1e-12,
          "preset %s fields", want[i].name);
    CHECK(stsa_geometry_tokens(&c.geometry) == want[i].tokens, "preset %s: %lld tokens",
          want[i].name, (long long)stsa_geometry_tokens(&c.geometry));
  }
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  stsa_svg_preset("hunyuan-720p", &c);
  CHECK(c.geometry.text_pos == STSA_TEXT_SUFFIX && c.dense_steps == 5,
        "hunyuan text/steps");
  stsa_svg_preset("cogvideox15", &c);
  CHECK(c.geometry.text_pos == STSA_TEXT_PREFIX && c.dense_layers == 1, "cogvideo text");
  stsa_svg_preset("wan21-720p", &c);
  CHECK(c.dense_steps == 10 && c.dense_layers == 1 && c.steps == 50, "wan policy");
  CHECK_STATUS(stsa_svg_preset("nope", &c), STSA_ERR_BAD_PARAM);
}

static void test_permutation_round_trip(void) {
  const stsa_geometry geoms[] = {{5, 6, 7, 0, 0, STSA_TEXT_NONE},
                                 {4, 3, 5, 9, 9, STSA_TEXT_PREFIX},
                                 {3, 4, 9, 12, 7, STSA_TEXT_SUFFIX}};
  for (int gi = 0; gi < 3; gi++)
    for (int o = 0; o < STSA_ORDER_COUNT_; o++) {
      const stsa_geometry *g = &geoms[gi];
      int64_t N = stsa_geometry_tokens(g);
      tu_rng rng = {(uint64_t)(gi * 10 + o)};
      stsa_tensor in = tu_random_tensor(&rng, STSA_BF16, TU_BSHD, 2, N, 3, 8, 1);
      stsa_tensor mid = tu_sentinel_tensor(STSA_BF16, TU_BHSD, 2, N, 3, 8);
      stsa_tensor back = tu_sentinel_tensor(STSA_BF16, TU_BSHD, 2, N, 3, 8);
      CHECK_STATUS(stsa_permute_tokens(g, (stsa_order)o, 0, &in, &mid), STSA_OK);
      CHECK_STATUS(stsa_permute_tokens(g, (stsa_order)o, 1, &mid, &back), STSA_OK);
      CHECK(memcmp(in.data, back.data, tu_span(&in) * 2) == 0,
            "geometry %d order %d: round trip is not exact", gi, o);
      /* the permuted copy really moved tokens for non-native orders */
      int moved = 0;
      for (int64_t s = 0; s < N; s++)
        moved |= tu_load(in.data, in.dtype, tu_offset(&in, 0, s, 0, 0)) !=
                 tu_load(mid.data, mid.dtype, tu_offset(&mid, 0, s, 0, 0));
      CHECK(moved == (o != STSA_ORDER_NATIVE), "geometry %d order %d: moved = %d", gi, o,
            moved);
      tu_free_tensor(&in);
      tu_free_tensor(&mid);
      tu_free_tensor(&back);
    }
}

/* The masks the session uses, rebuilt from its windows for the reference. */
static stsa_mask *kind_mask(const stsa_geometry *g, const stsa_svg_windows *w,
                            stsa_head_kind kind, int dense) {
  stsa_mask *base, *text, *out;
  stsa_mask_text(g, &text);
  if (dense) { /* every video pair: the sink adds nothing */
    stsa_mask_frame_window(g, g->frames, &base);
    stsa_mask_or(base, text, &out);
  } else {
    stsa_mask *sink, *a;
    if (kind == STSA_HEAD_SPATIAL)
      stsa_mask_frame_window(g, w->frame_window, &base);
    else
      stsa_mask_position_band(g, w->band, &base);
    stsa_mask_sink_frames(g, 1, &sink);
    stsa_mask_or(base, sink, &a);
    stsa_mask_or(a, text, &out);
    stsa_mask_free(sink);
    stsa_mask_free(a);
  }
  stsa_mask_free(base);
  stsa_mask_free(text);
  return out;
}

/* SVG output vs the reference backend applying the same masks pair by pair
 * in native order, for one call. Returns the number of failures. */
static void check_against_reference(const char *name, const stsa_geometry *g, int64_t B,
                                    int64_t H, int64_t D, int64_t layer, int64_t step,
                                    int64_t dense_steps) {
  const int64_t N = stsa_geometry_tokens(g);
  stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 24, 32);
  stsa_svg_config cfg = {.size = sizeof(stsa_svg_config),
                         .geometry = *g,
                         .heads = H,
                         .head_dim = D,
                         .density = 0.35,
                         .dense_steps = dense_steps,
                         .sample_rows = 16,
                         .sink_frames = 1,
                         .seed = 7,
                         .steps = 10,
                         .layers = 4};
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  if (!svg) {
    fprintf(stderr, "  %s: %s\n", name, stsa_ctx_last_error(ctx));
    stsa_ctx_free(ctx);
    return;
  }
  stsa_tensor q = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  stsa_tensor k = tu_sentinel_tensor(STSA_F16, TU_BHSD, B, N, H, D);
  stsa_tensor v = tu_sentinel_tensor(STSA_F16, TU_BHSD, B, N, H, D);
  stsa_workload_desc wd = {sizeof(stsa_workload_desc), *g, B, H, D, 11, NULL};
  stsa_head_kind truth[8];
  CHECK_STATUS(stsa_workload_generate(&wd, &q, &k, &v, truth), STSA_OK);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, N, H, D);
  stsa_head_kind kinds[16];
  stsa_svg_report rep = STSA_INIT(stsa_svg_report);
  rep.kinds = kinds;
  CHECK_STATUS(stsa_svg_attention(svg, layer, step, &q, &k, &v, &out, &rep), STSA_OK);
  CHECK(rep.dense == (step < dense_steps), "%s: dense flag %d at step %lld", name,
        rep.dense, (long long)step);
  stsa_svg_windows w = STSA_INIT(stsa_svg_windows);
  stsa_svg_get_windows(svg, &w);
  /* the session's masks are the ones this test builds from the windows */
  stsa_mask *none = NULL;
  CHECK_STATUS(stsa_svg_kind_mask(svg, STSA_HEAD_SEMANTIC, &none, NULL, NULL),
               STSA_ERR_BAD_PARAM);
  CHECK(!none, "semantic heads have no fixed mask");
  for (int kind = 0; kind <= STSA_HEAD_MIXED; kind++) {
    stsa_mask *session_mask = NULL,
              *mine = kind_mask(g, &w, (stsa_head_kind)kind, kind == STSA_HEAD_MIXED);
    stsa_order qo, ko;
    CHECK_STATUS(stsa_svg_kind_mask(svg, (stsa_head_kind)kind, &session_mask, &qo, &ko),
                 STSA_OK);
    CHECK(session_mask && stsa_mask_equal(session_mask, mine), "%s: mask of kind %d",
          name, kind);
    int temporal = kind == STSA_HEAD_TEMPORAL;
    CHECK(qo == (temporal ? STSA_ORDER_POSITION_MAJOR : STSA_ORDER_NATIVE) &&
              ko == (temporal ? STSA_ORDER_SINK_FIRST : STSA_ORDER_NATIVE),
          "%s: orders of kind %d: %d/%d", name, kind, qo, ko);
    stsa_mask_free(session_mask);
    stsa_mask_free(mine);
  }
  stsa_ctx *rctx = make_ctx(STSA_BACKEND_REF, 24, 32);
  for (int64_t b = 0; b < B; b++) {
    const stsa_mask *masks[8];
    stsa_mask *owned[8];
    for (int64_t h = 0; h < H; h++)
      masks[h] = owned[h] = kind_mask(g, &w, kinds[b * H + h], rep.dense);
    stsa_plan_desc desc = {sizeof(stsa_plan_desc), N, N, H, masks, g,   STSA_ORDER_NATIVE,
                           STSA_ORDER_NATIVE,      0, 0, 0, NULL,  NULL};
    stsa_plan *plan = NULL;
    CHECK_STATUS(stsa_plan_build(rctx, &desc, &plan), STSA_OK);
    stsa_tensor qb = q, kb = k, vb = v, ob = out;
    qb.shape[0] = kb.shape[0] = vb.shape[0] = ob.shape[0] = 1;
    qb.data = (float *)q.data + b * q.stride[0];
    kb.data = (uint16_t *)k.data + b * k.stride[0];
    vb.data = (uint16_t *)v.data + b * v.stride[0];
    ob.data = (float *)out.data + b * out.stride[0];
    stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
    CHECK_STATUS(stsa_sparse_attention(rctx, plan, &qb, &kb, &vb, &ref, NULL), STSA_OK);
    double worst = 0, scale = 0;
    for (int64_t s = 0; s < N; s++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < D; d++) {
          double x = tu_load(ob.data, STSA_F32, tu_offset(&ob, 0, s, h, d));
          double y = tu_load(ref.data, STSA_F32, tu_offset(&ref, 0, s, h, d));
          double e = isfinite(x) ? fabs(x - y) : INFINITY;
          worst = e > worst ? e : worst;
          scale = fabs(y) > scale ? fabs(y) : scale;
        }
    CHECK(worst <= 2e-5 * (scale > 1e-3 ? scale : 1e-3),
          "%s b=%lld: SVG vs reference max err %.3g (scale %.3g)", name, (long long)b,
          worst, scale);
    tu_free_tensor(&ref);
    stsa_plan_free(plan);
    for (int64_t h = 0; h < H; h++)
      stsa_mask_free(owned[h]);
  }
  CHECK(tu_guard_ok(out.data), "%s: guard bytes", name);
  stsa_ctx_free(rctx);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  tu_free_tensor(&out);
}

static void test_svg_vs_reference(void) {
  const stsa_geometry none = {5, 6, 7, 0, 0, STSA_TEXT_NONE};
  const stsa_geometry prefix = {4, 5, 7, 9, 9, STSA_TEXT_PREFIX};
  const stsa_geometry suffix = {4, 6, 5, 12, 7, STSA_TEXT_SUFFIX}; /* 5 padding */
  check_against_reference("no text", &none, 1, 4, 64, 2, 3, 1);
  check_against_reference("prefix text", &prefix, 1, 3, 80, 1, 1, 0);
  check_against_reference("suffix text with padding, batch 2", &suffix, 2, 4, 64, 1, 2,
                          1);
  check_against_reference("dense step (policy)", &suffix, 1, 2, 32, 3, 0, 1);
}

static void test_policy(void) {
  stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 24, 32);
  const stsa_geometry g = {3, 4, 4, 0, 0, STSA_TEXT_NONE};
  stsa_svg_config cfg = {.size = sizeof(stsa_svg_config),
                         .geometry = g,
                         .heads = 1,
                         .head_dim = 32,
                         .density = 0.4,
                         .dense_steps = 2,
                         .dense_layers = 1,
                         .sample_rows = 8,
                         .sink_frames = 1,
                         .steps = 4,
                         .layers = 3};
  stsa_svg *svg;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  const int64_t N = 48;
  tu_rng rng = {1};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, 1, 32, 1);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, 1, 32);
  for (int64_t step = 0; step < 4; step++)
    for (int64_t layer = 0; layer < 3; layer++) {
      stsa_svg_report rep = STSA_INIT(stsa_svg_report);
      CHECK_STATUS(stsa_svg_attention(svg, layer, step, &q, &q, &q, &o, &rep), STSA_OK);
      int want = step < 2 || layer < 1;
      CHECK(rep.dense == want, "step %lld layer %lld: dense %d, want %d", (long long)step,
            (long long)layer, rep.dense, want);
      CHECK(want ? rep.profile_ms == 0 : rep.density < 1.0,
            "step %lld layer %lld: profile %.3f ms, density %.3f", (long long)step,
            (long long)layer, rep.profile_ms, rep.density);
    }
  /* invalid calls */
  CHECK_STATUS(stsa_svg_attention(svg, -1, 0, &q, &q, &q, &o, NULL), STSA_ERR_BAD_PARAM);
  stsa_tensor shorter = q;
  shorter.shape[1] = N - 1;
  stsa_tensor o2 = o;
  o2.shape[1] = N - 1;
  CHECK_STATUS(stsa_svg_attention(svg, 1, 3, &shorter, &shorter, &shorter, &o2, NULL),
               STSA_ERR_BAD_SHAPE);
  cfg.density = 1.5;
  stsa_svg *bad = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &bad), STSA_ERR_BAD_PARAM);
  CHECK(strstr(stsa_ctx_last_error(ctx), "KEPT") != NULL, "density message: %s",
        stsa_ctx_last_error(ctx));
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  tu_free_tensor(&q);
  tu_free_tensor(&o);
}

/* Profiling on the workload picks the constructed kind for >= 95% of the
 * clearly spatial or temporal heads. */
static void test_profiling_accuracy(void) {
  const stsa_geometry g = {9, 12, 16, 0, 0, STSA_TEXT_NONE};
  const int64_t H = 12, D = 64, N = stsa_geometry_tokens(&g);
  stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 192, 256);
  stsa_svg_config cfg = {.size = sizeof(stsa_svg_config),
                         .geometry = g,
                         .heads = H,
                         .head_dim = D,
                         .density = 0.3,
                         .sample_rows = 64,
                         .sink_frames = 1,
                         .seed = 3,
                         .steps = 1,
                         .layers = 1};
  stsa_svg *svg;
  CHECK_STATUS(stsa_svg_create(ctx, &cfg, &svg), STSA_OK);
  stsa_tensor q = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  stsa_tensor k = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  stsa_tensor v = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, H, D);
  int right = 0, total = 0;
  for (uint64_t seed = 1; seed <= 4; seed++) {
    stsa_workload_desc wd = {sizeof(stsa_workload_desc), g, 1, H, D, seed, NULL};
    stsa_head_kind truth[12], chosen[12];
    CHECK_STATUS(stsa_workload_generate(&wd, &q, &k, &v, truth), STSA_OK);
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    rep.kinds = chosen;
    CHECK_STATUS(stsa_svg_attention(svg, 1, (int64_t)seed, &q, &k, &v, &o, &rep),
                 STSA_OK);
    for (int64_t h = 0; h < H; h++)
      if (truth[h] != STSA_HEAD_MIXED) {
        total++;
        right += chosen[h] == truth[h];
      }
  }
  CHECK(total > 0 && right >= 0.95 * total, "profiling accuracy %d / %d", right, total);
  printf("profiling accuracy on the workload: %d / %d clear heads\n", right, total);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  tu_free_tensor(&o);
}

/* Sizes near INT64_MAX are refused with a message before anything is
 * multiplied (UBSan in the sanitizer build aborts on a signed overflow). */
static void test_config_bounds(void) {
  stsa_ctx *ctx = make_ctx(STSA_BACKEND_AUTO, 192, 256);
  stsa_svg_config base = STSA_INIT(stsa_svg_config);
  base.geometry = (stsa_geometry){2, 4, 4, 0, 0, STSA_TEXT_NONE};
  base.heads = 2;
  base.head_dim = 16;
  base.density = 0.5;
  base.sample_rows = 4;
  base.sink_frames = 1;
  struct {
    const char *what, *msg;
    stsa_svg_config c;
  } bad[16];
  int n = 0;
  const int64_t big[3] = {INT64_MAX, INT64_MAX / 2 + 1, (int64_t)1 << 40};
  for (int i = 0; i < 3; i++) {
    bad[n].c = base, bad[n].c.geometry.frames = big[i];
    bad[n].what = "huge frames", bad[n++].msg = "too many tokens";
    bad[n].c = base, bad[n].c.geometry.height = big[i], bad[n].c.geometry.width = big[i];
    bad[n].what = "huge height x width", bad[n++].msg = "too many tokens";
  }
  bad[n].c = base, bad[n].c.geometry.text = INT64_MAX;
  bad[n].c.geometry.text_pos = STSA_TEXT_PREFIX;
  bad[n].what = "huge text", bad[n++].msg = "too many tokens";
  bad[n].c = base, bad[n].c.heads = INT64_MAX;
  bad[n].what = "huge heads", bad[n++].msg = "heads";
  bad[n].c = base, bad[n].c.head_dim = INT64_MAX;
  bad[n].what = "huge head_dim", bad[n++].msg = "head_dim";
  bad[n].c = base, bad[n].c.head_dim = 513;
  bad[n].what = "head_dim above the kernel's 512", bad[n++].msg = "kernel's limit";
  bad[n].c = base, bad[n].c.sample_rows = INT64_MAX;
  bad[n].what = "huge sample_rows", bad[n++].msg = "sample_rows";
  bad[n].c = base, bad[n].c.sink_frames = INT64_MAX;
  bad[n].what = "huge sink_frames", bad[n++].msg = "sink_frames";
  bad[n].c = base, bad[n].c.dense_steps = INT64_MIN;
  bad[n].what = "negative dense_steps", bad[n++].msg = "dense_steps";
  for (int i = 0; i < n; i++) {
    stsa_svg *svg = (stsa_svg *)&n; /* must stay untouched */
    stsa_status st = stsa_svg_create(ctx, &bad[i].c, &svg);
    CHECK(st == STSA_ERR_BAD_PARAM, "%s: got %s", bad[i].what, stsa_status_str(st));
    CHECK(strstr(stsa_ctx_last_error(ctx), bad[i].msg) != NULL,
          "%s: message '%s' lacks '%s'", bad[i].what, stsa_ctx_last_error(ctx),
          bad[i].msg);
    CHECK(svg == (stsa_svg *)&n, "%s: out written on failure", bad[i].what);
  }
  /* the largest head dim the kernel takes is accepted */
  stsa_svg_config ok = base;
  ok.head_dim = 512;
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &ok, &svg), STSA_OK);
  stsa_svg_free(svg);
  stsa_ctx_free(ctx);
}

/* The frame window search (closed form + bisection) picks what a scan over
 * every w with brute-force pair counts picks. */
static void test_frame_window_search(void) {
  long mismatches = 0;
  char first[160] = "";
  for (int64_t F = 1; F <= 24; F++)
    for (int64_t sink = 0; sink <= F; sink++)
      for (int di = 0; di <= 40; di++) {
        const double target = di / 40.0;
        int64_t best = 0;
        double best_gap = INFINITY;
        for (int64_t w = 0; w < F; w++) {
          int64_t kept = 0;
          for (int64_t fq = 0; fq < F; fq++)
            for (int64_t fk = 0; fk < F; fk++)
              kept += (fq - fk <= w && fk - fq <= w) || fk < sink;
          double gap = fabs((double)kept / (double)(F * F) - target);
          if (gap < best_gap) {
            best_gap = gap;
            best = w;
          }
        }
        stsa_geometry g = {F, 3, 5, 0, 0, STSA_TEXT_NONE};
        int64_t got = stsa_svg_frame_window(&g, sink, target);
        if (got != best && mismatches++ == 0)
          snprintf(first, sizeof first, "F %lld sink %lld density %g: %lld, scan %lld",
                   (long long)F, (long long)sink, target, (long long)got,
                   (long long)best);
      }
  CHECK(mismatches == 0, "%ld frame windows differ from the scan, first: %s", mismatches,
        first);
  /* and a geometry with 2^40 frames answers at once, without overflow */
  stsa_geometry huge = {(int64_t)1 << 40, 1, 1, 0, 0, STSA_TEXT_NONE};
  int64_t w = stsa_svg_frame_window(&huge, 1, 0.25);
  CHECK(w > 0 && w < ((int64_t)1 << 40), "2^40 frames: w = %lld", (long long)w);
  CHECK(stsa_svg_band_halfwidth(&huge, 1, 0.25) > 0, "2^40 frames: band");
}

int main(void) {
  test_presets();
  test_config_bounds();
  test_frame_window_search();
  test_permutation_round_trip();
  test_policy();
  test_svg_vs_reference();
  test_profiling_accuracy();
  return tu_finish("test_svg");
}
