/*
 * test_dist_svg_layers.c — the distributed SVG session remembers each
 * layer's head kinds in a map of the layers it has seen, not an array
 * indexed by the layer: layers INT64_MAX, 2^58 + 9, 2^31 - 1 and one whose
 * 3x wraps a size (H = 3 heads) run next to layers 0 and 1, every call's
 * output and kinds match one process's session (bitwise under Ulysses), and
 * each layer's second call balances its heads by that layer's own kinds of
 * the first call (the test recomputes the longest-first assignment of
 * dist.c: balance_heads), whatever layers ran in between. Run under the
 * ASan+UBSan build as well.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate (dist_testutil.h)  \
                           */
#include "dist_testutil.h"

enum { H = 3, D = 16, MAX_U = 64 };

static const int64_t LAYERS[] = {
    INT64_MAX, ((int64_t)1 << 58) + 9,
    INT32_MAX, 6148914691236517205, /* 3 (x + 1) = 2^64 + 2 */
    0,         1,
    100000000};
enum { NL = sizeof LAYERS / sizeof LAYERS[0] };

static stsa_svg_config svg_config(void) {
  stsa_svg_config cfg = STSA_INIT(stsa_svg_config);
  cfg.geometry = dt_geometry(DT_GEOM_NONE);
  cfg.heads = H;
  cfg.head_dim = D;
  cfg.density = 0.35;
  cfg.sample_rows = 16;
  cfg.sink_frames = 1;
  cfg.seed = 11;
  return cfg;
}

/* The whole problem with heads of known kinds (spatial and temporal heads
 * cost their own densities, so a layer's kinds show in the balancing). */
static void make_problem(dt_problem *p, const stsa_geometry *g, uint64_t seed) {
  const stsa_head_kind kinds[H] = {STSA_HEAD_SPATIAL, STSA_HEAD_TEMPORAL,
                                   STSA_HEAD_SPATIAL};
  memset(p, 0, sizeof *p);
  p->g = *g;
  p->B = 1, p->H = H, p->D = D;
  p->S = stsa_geometry_tokens(g);
  p->q = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p->S, H, D);
  p->k = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p->S, H, D);
  p->v = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p->S, H, D);
  stsa_workload_desc wd = STSA_INIT(stsa_workload_desc);
  wd.geometry = *g;
  wd.batch = 1, wd.heads = H, wd.head_dim = D, wd.seed = seed;
  wd.kinds = kinds;
  stsa_status st = stsa_workload_generate(&wd, &p->q, &p->k, &p->v, NULL);
  DT_CHECK(st == STSA_OK, "stsa_workload_generate: %s", stsa_status_str(st));
}

/* dist.c's balance_heads: heads by cost, largest first (ties by head), each
 * to the least loaded member; kinds NULL: every head costs the same. */
static void expected_owners(const stsa_head_kind *kinds, const stsa_svg_windows *w, int U,
                            int32_t *owner) {
  double cost[H], load[MAX_U] = {0};
  int order[H];
  for (int h = 0; h < H; h++) {
    cost[h] = !kinds                           ? 1.0
              : kinds[h] == STSA_HEAD_SPATIAL  ? w->density_spatial
              : kinds[h] == STSA_HEAD_TEMPORAL ? w->density_temporal
                                               : 1.0;
    order[h] = h;
  }
  for (int i = 1; i < H; i++) /* insertion sort: cost descending, then head */
    for (int j = i; j > 0 && cost[order[j]] > cost[order[j - 1]]; j--) {
      const int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  for (int i = 0; i < H; i++) {
    int best = 0;
    for (int u = 1; u < U; u++)
      if (load[u] < load[best])
        best = u;
    load[best] += cost[order[i]] + 1e-9;
    owner[order[i]] = best;
  }
}

static void run_layout(stsa_dist_scheme scheme, int ulysses_degree) {
  stsa_dist *dist = dt_dist(scheme, ulysses_degree, 0);
  if (!dist)
    return;
  const int U = dt_expected_u(scheme, ulysses_degree, H);
  const int exact = U == dt_size;
  const stsa_svg_config cfg = svg_config();
  stsa_svg *svg = NULL;
  stsa_dist_svg *dsvg = NULL;
  DT_CHECK(stsa_svg_create(dt_ctx, &cfg, &svg) == STSA_OK, "stsa_svg_create: %s",
           stsa_ctx_last_error(dt_ctx));
  stsa_status st = stsa_dist_svg_create(dist, &cfg, &dsvg);
  DT_CHECK_STATUS(st, STSA_OK, dist);
  stsa_svg_windows win = STSA_INIT(stsa_svg_windows);
  if (svg)
    stsa_svg_get_windows(svg, &win);
  stsa_head_kind first_kinds[NL][H]; /* each layer's kinds of its first call */
  memset(first_kinds, 0, sizeof first_kinds);
  for (int64_t step = 0; svg && dsvg && step < 2; step++)
    for (int i = 0; i < NL; i++) {
      const int64_t layer = LAYERS[i];
      dt_set_case("svg layers %s U=%d np%d layer %lld step %lld",
                  stsa_dist_scheme_name(scheme), U, dt_size, (long long)layer,
                  (long long)step);
      dt_problem p;
      make_problem(&p, &cfg.geometry, 200 + 10 * (uint64_t)step + (uint64_t)i);
      stsa_tensor ref = tu_sentinel_tensor(STSA_F32, TU_BSHD, 1, p.S, H, D);
      stsa_head_kind rk[H], gk[H];
      stsa_svg_report rrep = STSA_INIT(stsa_svg_report),
                      grep = STSA_INIT(stsa_svg_report);
      rrep.kinds = rk;
      grep.kinds = gk;
      st = stsa_svg_attention(svg, layer, step, &p.q, &p.k, &p.v, &ref, &rrep);
      DT_CHECK(st == STSA_OK, "single-process stsa_svg_attention: %s",
               stsa_ctx_last_error(dt_ctx));
      dt_local l;
      dt_local_make(&l, &p, DT_SPLIT_EVEN, TU_BSHD, STSA_F32);
      int32_t head_rank[H];
      stsa_dist_report drep = STSA_INIT(stsa_dist_report);
      drep.head_rank = head_rank;
      st = stsa_dist_svg_attention(dsvg, layer, step, &l.q, &l.k, &l.v, &l.out, &grep,
                                   &drep);
      DT_CHECK_STATUS(st, STSA_OK, dist);
      if (st == STSA_OK) {
        dt_compare(&ref, &l, exact);
        for (int h = 0; h < H; h++)
          DT_CHECK(gk[h] == rk[h], "head %d: kind %s, one process %s", h,
                   stsa_head_kind_name(gk[h]), stsa_head_kind_name(rk[h]));
        int32_t want[H];
        expected_owners(step ? first_kinds[i] : NULL, &win, U, want);
        for (int h = 0; h < H; h++)
          DT_CHECK(head_rank[h] == want[h],
                   "head %d ran on member %d, expected %d (balanced by %s)", h,
                   head_rank[h], want[h],
                   step ? "this layer's kinds of its first call" : "equal costs");
        if (step == 0)
          memcpy(first_kinds[i], gk, sizeof gk);
      }
      dt_local_free(&l);
      tu_free_tensor(&ref);
      dt_problem_free(&p);
    }
  stsa_dist_svg_free(dsvg);
  stsa_svg_free(svg);
  stsa_dist_free(dist);
}

int main(int argc, char **argv) {
  dt_init(&argc, &argv);
  run_layout(STSA_DIST_ULYSSES, 0);
  run_layout(STSA_DIST_RING, 0);
  if (dt_size % 2 == 0)
    run_layout(STSA_DIST_HYBRID, 2);
  return dt_finish("test_dist_svg_layers");
}
