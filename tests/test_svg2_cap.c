/*
 * test_svg2_cap.c — the cap on SVG2's cluster pairs (query clusters x key
 * clusters), whose per-call scratch grows with them: 12,288 x 12,288
 * clusters of 16,384 tokens took 2.2 GB and 22 s a call and are now refused
 * at create, naming the cap and the counts; 2048 x 2048 (the cap) is taken
 * and its call runs in bounded memory; every preset's published counts
 * are taken, and automatic counts (alone or next to an explicit one) shrink
 * to fit the cap on any geometry up to 2^40 tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "mask_util.h"
#include "svg/svg2.h"
#include "testutil.h"

/* the documented cap (include/stsa.h, stsa_svg_config) */
#define CAP ((int64_t)1 << 22)

static stsa_svg_config config(const stsa_geometry *g, int64_t qc, int64_t kc) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = *g;
  c.heads = 1;
  c.head_dim = 16;
  c.density = 0.3;
  c.sample_rows = 32;
  c.sink_frames = 1;
  c.method = STSA_SVG_METHOD_SVG2;
  c.svg2.q_clusters = qc;
  c.svg2.kv_clusters = kc;
  c.svg2.top_p = 0.9;
  return c;
}

static long max_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* 16,384 video tokens: the 12,288 x 12,288 refused at create with
 * the counts and the cap in the message; the cap itself taken, one more
 * pair refused; a call at the cap stays within a bounded scratch. */
static void test_refused_at_create(void) {
  CHECK(STSA_SVG2_MAX_CLUSTER_PAIRS == CAP, "the library's cap %lld, documented %lld",
        (long long)STSA_SVG2_MAX_CLUSTER_PAIRS, (long long)CAP);
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  stsa_ctx_set(ctx, STSA_PARAM_THREADS, 2);
  const stsa_geometry g = {4, 64, 64, 0, 0, STSA_TEXT_NONE};
  stsa_svg *svg = NULL;
  stsa_svg_config c = config(&g, 12288, 12288);
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_ERR_BAD_PARAM);
  const char *msg = stsa_ctx_last_error(ctx);
  CHECK(svg == NULL && strstr(msg, "12288 query x 12288 key clusters") &&
            strstr(msg, "4194304"),
        "12288 x 12288: message \"%s\"", msg);
  const int64_t over[][2] = {{2048, 2049}, {4097, 1024}, {16384, 257}, {1, 16384}};
  for (size_t i = 0; i < sizeof over / sizeof *over; i++) {
    c = config(&g, over[i][0], over[i][1]);
    const stsa_status want = over[i][0] * over[i][1] > CAP ? STSA_ERR_BAD_PARAM : STSA_OK;
    CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), want);
    stsa_svg_free(svg);
    svg = NULL;
  }
  /* at the cap: one call (one cold k-means pass keeps it short) */
  c = config(&g, 2048, 2048);
  c.svg2.kmeans_iters_cold = 1;
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_OK);
  if (svg) {
    const int64_t N = tu_tokens(&g);
    tu_rng rng = {17};
    stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, 1, 16, 1.0);
    stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, 1, 16, 1.0);
    stsa_tensor o = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, N, 1, 16);
    const long rss0 = max_rss_kb();
    stsa_svg_report rep = STSA_INIT(stsa_svg_report);
    CHECK_STATUS(stsa_svg_attention(svg, 0, 0, &q, &k, &k, &o, &rep), STSA_OK);
    CHECK(rep.q_clusters == 2048 && rep.kv_clusters == 2048, "report: %lld x %lld",
          (long long)rep.q_clusters, (long long)rep.kv_clusters);
    /* probabilities (8 B a pair a thread), keep flags and a mask (1 B each):
     * 2^22 * 18 B = 72 MB; the sanitizer build's shadow adds an eighth */
    const long grown_mb = (max_rss_kb() - rss0) / 1024;
    CHECK(grown_mb < 256, "a call at the cap grew the resident set by %ld MB", grown_mb);
    tu_free_tensor(&q);
    tu_free_tensor(&k);
    tu_free_tensor(&o);
    stsa_svg_free(svg);
  }
  stsa_ctx_free(ctx);
}

/* The presets' published counts (300 / 1000 at Wan 720p, 400 / 1000 at
 * HunyuanVideo 720p, the others scaled) as SVG2 sessions. */
static void test_presets(void) {
  stsa_ctx *ctx = NULL;
  if (stsa_ctx_create(&ctx) != STSA_OK)
    exit(1);
  for (int i = 0; stsa_svg_preset_name(i); i++) {
    stsa_svg_config c = STSA_INIT(stsa_svg_config);
    CHECK_STATUS(stsa_svg_preset(stsa_svg_preset_name(i), &c), STSA_OK);
    c.method = STSA_SVG_METHOD_SVG2;
    stsa_errbuf err = {{0}};
    CHECK(stsa_svg2_check(&c, &err) == STSA_OK, "preset %s (%lld x %lld clusters): %s",
          stsa_svg_preset_name(i), (long long)c.svg2.q_clusters,
          (long long)c.svg2.kv_clusters, err.text);
    stsa_svg *svg = NULL;
    CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_OK);
    stsa_svg_free(svg);
  }
  stsa_ctx_free(ctx);
}

/* Automatic counts on geometries up to 2^40 tokens: unchanged below ~280k
 * video tokens, shrunk to the cap above (both, or the automatic one next to
 * an explicit one), and always accepted. */
static void test_automatic(void) {
  const stsa_geometry geos[] = {
      {21, 30, 52, 0, 0, STSA_TEXT_NONE},                /* Wan 480p, 32,760 */
      {33, 45, 80, 256, 256, STSA_TEXT_SUFFIX},          /* HunyuanVideo 720p, 118,800 */
      {64, 64, 64, 0, 0, STSA_TEXT_NONE},                /* 262,144: just under */
      {128, 64, 64, 0, 0, STSA_TEXT_NONE},               /* 524,288 */
      {1024, 1024, 1024, 0, 0, STSA_TEXT_NONE},          /* 2^30 */
      {1 << 14, 1 << 13, 1 << 13, 0, 0, STSA_TEXT_NONE}, /* 2^40 */
  };
  for (size_t i = 0; i < sizeof geos / sizeof *geos; i++) {
    const stsa_geometry *g = &geos[i];
    const int64_t L = g->frames * g->height * g->width;
    const int64_t explicit_q[] = {0, 0, 4096, 1};
    const int64_t explicit_k[] = {0, 1000, 0, 0};
    for (int e = 0; e < 4; e++) {
      stsa_svg_config c = config(g, explicit_q[e], explicit_k[e]);
      int64_t qc = 0, kc = 0;
      stsa_svg2_clusters(&c, &qc, &kc);
      stsa_errbuf err = {{0}};
      CHECK(qc >= 1 && kc >= 1 && qc <= CAP / kc && stsa_svg2_check(&c, &err) == STSA_OK,
            "%lld video tokens, %lld x %lld asked: %lld x %lld clusters (%s)",
            (long long)L, (long long)explicit_q[e], (long long)explicit_k[e],
            (long long)qc, (long long)kc, err.text);
      CHECK((!explicit_q[e] || qc == explicit_q[e]) &&
                (!explicit_k[e] || kc == explicit_k[e]),
            "%lld video tokens: explicit counts kept (%lld x %lld)", (long long)L,
            (long long)qc, (long long)kc);
      if (e == 0 && L < 280000) {
        const int64_t want_q = (int64_t)(300.0 * (double)L / 75600 + 0.5),
                      want_k = (int64_t)(1000.0 * (double)L / 75600 + 0.5);
        CHECK(qc == want_q && kc == want_k,
              "%lld video tokens: automatic %lld x %lld, expected the scaled %lld x %lld",
              (long long)L, (long long)qc, (long long)kc, (long long)want_q,
              (long long)want_k);
      }
      if (e == 0 && L > 300000)
        CHECK(qc * kc > CAP / 2 && kc > 2 * qc,
              "%lld video tokens: automatic %lld x %lld use the cap in the published "
              "ratio",
              (long long)L, (long long)qc, (long long)kc);
    }
    /* an explicit count alone past the cap: refused */
    if (L > 2 * CAP) {
      stsa_svg_config c = config(g, 2 * CAP, 0);
      stsa_errbuf err = {{0}};
      CHECK(stsa_svg2_check(&c, &err) == STSA_ERR_BAD_PARAM &&
                strstr(err.text, "4194304") != NULL,
            "%lld query clusters: \"%s\"", (long long)(2 * CAP), err.text);
    }
  }
}

int main(void) {
  test_automatic();
  test_presets();
  test_refused_at_create();
  return tu_finish("test_svg2_cap");
}
