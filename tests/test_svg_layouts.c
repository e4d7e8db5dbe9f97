/*
 * test_svg_layouts.c — callers built against earlier releases of stsa.h:
 * stsa_svg_config with SVG2's fields inline (and the first release's, which
 * ended before them) and stsa_svg_report in release order (and its first
 * release's). Each is accepted by its size and behaves as this release's
 * layout with the same settings: the same output bits, the same report;
 * presets are written into the caller's layout; nothing past a caller's
 * size is read or written.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mask_util.h"
#include "testutil.h"

/* ---- the earlier layouts, as their callers compiled them ---------------- */
/* Written out here, not shared with the library's private copies
 * (src/svg/config_compat.c, report_compat.c): a mistake in those must show. */
typedef struct config_inline { /* SVG2's fields inline, before max_rel_error */
  size_t size;
  stsa_geometry geometry;
  int64_t heads, head_dim;
  double density;
  int64_t dense_steps, dense_layers, sample_rows, sink_frames;
  uint64_t seed;
  int64_t steps, layers;
  int q_tile, kv_tile;
  int method;
  int64_t q_clusters, kv_clusters;
  double top_p, min_kv_fraction;
  int64_t kmeans_iters_cold, kmeans_iters_warm;
  double max_rel_error;
} config_inline;
/* the first release's ended at method */
#define CONFIG_FIRST offsetof(config_inline, method)

typedef struct report_history { /* fields in the order they came */
  size_t size;
  int dense;
  stsa_head_kind *kinds;
  float *mse_spatial, *mse_temporal;
  double profile_ms, attention_ms, density;
  float *est_error, *head_density;
  uint8_t *budget;
  float *head_top_p;
  int64_t q_clusters, kv_clusters;
  double cluster_ms;
  int cold;
  stsa_run_info *run;
  float *cand_density, *cand_bound;
  uint8_t *choice, *choice_reason;
} report_history;
/* the first release's ended at est_error */
#define REPORT_FIRST offsetof(report_history, est_error)

static const stsa_geometry GEO = {4, 8, 12, 0, 0, STSA_TEXT_NONE};
enum { H = 2, D = 16 };

/* Settings that differ from every default, so a field read from the wrong
 * place (or not at all) changes the result. */
static stsa_svg_config new_config(stsa_svg_method method) {
  stsa_svg_config c = STSA_INIT(stsa_svg_config);
  c.geometry = GEO;
  c.heads = H;
  c.head_dim = D;
  c.density = 0.3;
  c.sample_rows = 24;
  c.sink_frames = 1;
  c.seed = 11;
  c.method = method;
  c.max_rel_error = 0.2;
  c.svg2.q_clusters = 10;
  c.svg2.kv_clusters = 27;
  c.svg2.top_p = 0.7;
  c.svg2.min_kv_fraction = 0.2;
  c.svg2.kmeans_iters_cold = 7;
  c.svg2.kmeans_iters_warm = 1;
  return c;
}

static config_inline inline_config(const stsa_svg_config *n) {
  config_inline c;
  memset(&c, 0, sizeof c);
  c.size = sizeof c;
  c.geometry = n->geometry;
  c.heads = n->heads, c.head_dim = n->head_dim, c.density = n->density;
  c.sample_rows = n->sample_rows, c.sink_frames = n->sink_frames, c.seed = n->seed;
  c.method = (int)n->method, c.max_rel_error = n->max_rel_error;
  c.q_clusters = n->svg2.q_clusters, c.kv_clusters = n->svg2.kv_clusters;
  c.top_p = n->svg2.top_p, c.min_kv_fraction = n->svg2.min_kv_fraction;
  c.kmeans_iters_cold = n->svg2.kmeans_iters_cold;
  c.kmeans_iters_warm = n->svg2.kmeans_iters_warm;
  return c;
}

/* Everything a call reports, in this release's layout. */
typedef struct outcome {
  stsa_status st;
  stsa_tensor out;
  stsa_svg_report rep;
  stsa_head_kind kinds[H];
  float mse[2][H], est[H], dens[H], top_p[H];
  float cand[2][H * STSA_AUTO_CANDIDATE_COUNT_];
  uint8_t budget[H], choice[2][H];
} outcome;

typedef struct inputs {
  stsa_tensor q, k, v;
} inputs;

static inputs make_inputs(void) {
  tu_rng rng = {5};
  const int64_t N = tu_tokens(&GEO);
  inputs in = {tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0),
               tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0),
               tu_random_tensor(&rng, STSA_F32, TU_BSHD, 1, N, H, D, 1.0)};
  return in;
}

/* One call (layer 1, step 3) of a fresh session made from the caller's
 * config `cfg` (any layout); the report in this release's layout. */
static outcome run_new_report(stsa_ctx *ctx, const void *cfg, const inputs *in) {
  outcome o;
  memset(&o, 0, sizeof o);
  o.out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, tu_tokens(&GEO), H, D);
  stsa_svg *svg = NULL;
  o.st = stsa_svg_create(ctx, (const stsa_svg_config *)cfg, &svg);
  if (o.st != STSA_OK)
    return o;
  o.rep = (stsa_svg_report)STSA_INIT(stsa_svg_report);
  o.rep.kinds = o.kinds, o.rep.mse_spatial = o.mse[0], o.rep.mse_temporal = o.mse[1];
  o.rep.est_error = o.est, o.rep.head_density = o.dens, o.rep.budget = o.budget;
  o.rep.head_top_p = o.top_p, o.rep.choice = o.choice[0];
  o.rep.choice_reason = o.choice[1];
  o.rep.cand_density = o.cand[0], o.rep.cand_bound = o.cand[1];
  o.st = stsa_svg_attention(svg, 1, 3, &in->q, &in->k, &in->v, &o.out, &o.rep);
  stsa_svg_free(svg);
  return o;
}

/* NaN-aware equality of float arrays (unevaluated candidates are NaN). */
static int same_floats(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))))
      return 0;
  return 1;
}

static void check_same(const outcome *a, const outcome *b, const char *what) {
  CHECK(a->st == STSA_OK && b->st == STSA_OK, "%s: status %d and %d", what, a->st, b->st);
  if (a->st != STSA_OK || b->st != STSA_OK)
    return;
  CHECK(tu_same_bytes(&a->out, &b->out), "%s: the outputs differ", what);
  const stsa_svg_report *r = &a->rep, *s = &b->rep;
  CHECK(r->dense == s->dense && r->method == s->method && r->heads == s->heads &&
            r->density == s->density && r->q_clusters == s->q_clusters &&
            r->kv_clusters == s->kv_clusters && r->cold == s->cold,
        "%s: the reports' scalars differ (density %g and %g, clusters %lld x %lld and "
        "%lld x %lld)",
        what, r->density, s->density, (long long)r->q_clusters, (long long)r->kv_clusters,
        (long long)s->q_clusters, (long long)s->kv_clusters);
  CHECK(!memcmp(a->kinds, b->kinds, sizeof a->kinds) &&
            same_floats(a->mse[0], b->mse[0], 2 * H) && same_floats(a->est, b->est, H) &&
            same_floats(a->dens, b->dens, H) && same_floats(a->top_p, b->top_p, H) &&
            same_floats(a->cand[0], b->cand[0], 2 * H * STSA_AUTO_CANDIDATE_COUNT_) &&
            !memcmp(a->budget, b->budget, sizeof a->budget) &&
            !memcmp(a->choice, b->choice, sizeof a->choice),
        "%s: the reports' per-head arrays differ", what);
}

static void free_outcome(outcome *o) { tu_free_tensor(&o->out); }

/* ---- configs ------------------------------------------------------------ */
/* SVG2 (and auto) configured through the inline layout run as through
 * cfg.svg2: its clusters, top-p and iterations are read. */
static void test_inline_config(stsa_ctx *ctx, const inputs *in) {
  const stsa_svg_method methods[] = {STSA_SVG_METHOD_SVG2, STSA_SVG_METHOD_AUTO};
  for (int m = 0; m < 2; m++) {
    const stsa_svg_config n = new_config(methods[m]);
    const config_inline c = inline_config(&n);
    outcome a = run_new_report(ctx, &n, in), b = run_new_report(ctx, &c, in);
    check_same(&a, &b, stsa_svg_method_name(methods[m]));
    CHECK(b.rep.q_clusters == 10 && b.rep.kv_clusters == 27 && b.rep.method == methods[m],
          "%s: the inline layout's clusters %lld x %lld (set 10 x 27), method %d",
          stsa_svg_method_name(methods[m]), (long long)b.rep.q_clusters,
          (long long)b.rep.kv_clusters, (int)b.rep.method);
    /* the settings matter: the defaults give another report */
    stsa_svg_config d = n;
    d.svg2 = (stsa_svg2_config){0};
    outcome e = run_new_report(ctx, &d, in);
    CHECK(e.st == STSA_OK && (e.rep.q_clusters != 10 || e.rep.kv_clusters != 27),
          "%s: default clusters are %lld x %lld, the test's own",
          stsa_svg_method_name(methods[m]), (long long)e.rep.q_clusters,
          (long long)e.rep.kv_clusters);
    free_outcome(&a), free_outcome(&b), free_outcome(&e);
  }
}

/* The first release's config (no method: SVG), in a buffer of exactly its
 * size (reading past it faults under ASan). */
static void test_first_config(stsa_ctx *ctx, const inputs *in) {
  stsa_svg_config n = new_config(STSA_SVG_METHOD_SVG);
  n.max_rel_error = 0; /* the first release had no budget */
  n.svg2 = (stsa_svg2_config){0};
  config_inline c = inline_config(&n);
  c.size = CONFIG_FIRST;
  void *first = malloc(CONFIG_FIRST);
  CHECK(first != NULL, "out of memory");
  if (!first)
    return;
  memcpy(first, &c, CONFIG_FIRST);
  outcome a = run_new_report(ctx, &n, in), b = run_new_report(ctx, first, in);
  check_same(&a, &b, "the first release's config");
  free(first);
  free_outcome(&a), free_outcome(&b);
}

/* svg2.size: 0 (STSA_INIT of the config leaves it so) or the sub-struct's
 * size; one below it or past the config's end is an error that names it. */
static void test_svg2_size(stsa_ctx *ctx) {
  stsa_svg_config c = new_config(STSA_SVG_METHOD_SVG2);
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_OK);
  stsa_svg_free(svg);
  c.svg2.size = sizeof c.svg2;
  CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_OK);
  stsa_svg_free(svg);
  svg = NULL;
  const size_t bad[] = {8, sizeof c.svg2 - 8, sizeof c.svg2 + 8}; /* past the config */
  for (int i = 0; i < 3; i++) {
    c.svg2.size = bad[i];
    CHECK_STATUS(stsa_svg_create(ctx, &c, &svg), STSA_ERR_BAD_PARAM);
    CHECK(svg == NULL && strstr(stsa_ctx_last_error(ctx), "svg2.size") != NULL,
          "svg2.size = %zu: message %s", bad[i], stsa_ctx_last_error(ctx));
  }
  /* a size between the inline layout's and this one's is neither */
  CHECK(sizeof(stsa_svg_config) > sizeof(config_inline) &&
            sizeof(stsa_svg_report) > sizeof(report_history),
        "this release's layouts are larger than the earlier ones (%zu, %zu)",
        sizeof(stsa_svg_config), sizeof(stsa_svg_report));
}

/* Presets are written in the caller's layout, nothing past its size. */
static void test_preset_layouts(void) {
  stsa_svg_config n = STSA_INIT(stsa_svg_config);
  CHECK_STATUS(stsa_svg_preset("wan21-720p", &n), STSA_OK);
  CHECK(n.svg2.q_clusters == 300 && n.svg2.kv_clusters == 1000 && n.svg2.top_p == 0.9 &&
            n.svg2.kmeans_iters_cold == 50 && n.svg2.size == sizeof n.svg2,
        "preset in this layout: %lld x %lld clusters, top-p %g",
        (long long)n.svg2.q_clusters, (long long)n.svg2.kv_clusters, n.svg2.top_p);
  config_inline c;
  memset(&c, 0xAB, sizeof c);
  c.size = sizeof c;
  CHECK_STATUS(stsa_svg_preset("wan21-720p", (stsa_svg_config *)&c), STSA_OK);
  CHECK(c.q_clusters == 300 && c.kv_clusters == 1000 && c.top_p == 0.9 &&
            c.min_kv_fraction == 0.10 && c.kmeans_iters_cold == 50 &&
            c.kmeans_iters_warm == 2 && c.method == 0 && c.max_rel_error == 0 &&
            c.heads == n.heads && c.density == n.density,
        "preset in the inline layout: %lld x %lld clusters, top-p %g, method %d",
        (long long)c.q_clusters, (long long)c.kv_clusters, c.top_p, c.method);
  unsigned char *first = tu_guarded_alloc(CONFIG_FIRST);
  memset(first, 0xAB, CONFIG_FIRST);
  const size_t size = CONFIG_FIRST;
  memcpy(first, &size, sizeof size);
  CHECK_STATUS(stsa_svg_preset("wan21-720p", (stsa_svg_config *)(void *)first), STSA_OK);
  CHECK(tu_guard_ok(first) && !memcmp(first + sizeof size, (char *)&n + sizeof size,
                                      CONFIG_FIRST - sizeof size),
        "preset in the first release's layout: its fields, nothing past them");
  tu_guarded_free(first);
}

/* ---- reports ------------------------------------------------------------ */
/* The report in release order is filled as this one (method auto fills
 * every field); the first release's layout gets its fields only. */
static void test_history_report(stsa_ctx *ctx, const inputs *in) {
  const stsa_svg_config n = new_config(STSA_SVG_METHOD_AUTO);
  outcome a = run_new_report(ctx, &n, in);
  outcome b;
  memset(&b, 0, sizeof b);
  b.out = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, tu_tokens(&GEO), H, D);
  stsa_run_info ran = STSA_INIT(stsa_run_info);
  report_history old;
  memset(&old, 0, sizeof old);
  old.size = sizeof old;
  old.kinds = b.kinds, old.mse_spatial = b.mse[0], old.mse_temporal = b.mse[1];
  old.est_error = b.est, old.head_density = b.dens, old.budget = b.budget;
  old.head_top_p = b.top_p, old.run = &ran, old.choice = b.choice[0];
  old.choice_reason = b.choice[1];
  old.cand_density = b.cand[0], old.cand_bound = b.cand[1];
  stsa_svg *svg = NULL;
  CHECK_STATUS(stsa_svg_create(ctx, &n, &svg), STSA_OK);
  b.st = stsa_svg_attention(svg, 1, 3, &in->q, &in->k, &in->v, &b.out,
                            (stsa_svg_report *)&old);
  /* what the old layout received, in this one's for the comparison */
  b.rep = (stsa_svg_report)STSA_INIT(stsa_svg_report);
  b.rep.dense = old.dense, b.rep.method = a.rep.method, b.rep.heads = a.rep.heads;
  b.rep.density = old.density, b.rep.q_clusters = old.q_clusters;
  b.rep.kv_clusters = old.kv_clusters, b.rep.cold = old.cold;
  check_same(&a, &b, "the report in release order");
  CHECK(old.kinds == b.kinds && old.run == &ran && old.choice_reason == b.choice[1],
        "the report in release order: its pointers were overwritten");
  CHECK(
      ran.backend != STSA_BACKEND_AUTO && old.q_clusters > 0 && old.profile_ms > 0,
      "the report in release order: run info (backend %d), clusters %lld, profile %g ms",
      (int)ran.backend, (long long)old.q_clusters, old.profile_ms);

  /* the first release's: dense, kinds, mse, times, density; nothing after */
  unsigned char *first = tu_guarded_alloc(REPORT_FIRST);
  memset(&old, 0, sizeof old);
  old.size = REPORT_FIRST, old.kinds = b.kinds;
  memset(b.kinds, 0xFF, sizeof b.kinds);
  memcpy(first, &old, REPORT_FIRST);
  CHECK_STATUS(stsa_svg_attention(svg, 1, 4, &in->q, &in->k, &in->v, &b.out,
                                  (stsa_svg_report *)(void *)first),
               STSA_OK);
  memcpy(&old, first, REPORT_FIRST);
  CHECK(tu_guard_ok(first) && old.size == REPORT_FIRST && old.kinds == b.kinds &&
            old.density > 0 && old.density <= 1 && b.kinds[0] < STSA_HEAD_KIND_COUNT_,
        "the first release's report: density %g, kind %d", old.density, (int)b.kinds[0]);
  tu_guarded_free(first);
  stsa_svg_free(svg);
  free_outcome(&a), free_outcome(&b);
}

int main(void) {
  stsa_ctx *ctx = NULL; /* one thread: sessions of equal settings give equal bits */
  if (stsa_ctx_create(&ctx) != STSA_OK || stsa_ctx_set(ctx, STSA_PARAM_THREADS, 1))
    return 1;
  inputs in = make_inputs();
  test_inline_config(ctx, &in);
  test_first_config(ctx, &in);
  test_svg2_size(ctx);
  test_preset_layouts();
  test_history_report(ctx, &in);
  tu_free_tensor(&in.q);
  tu_free_tensor(&in.k);
  tu_free_tensor(&in.v);
  stsa_ctx_free(ctx);
  return tu_finish("test_svg_layouts");
}
