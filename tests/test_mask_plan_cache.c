/*
 * test_mask_plan_cache.c — the context's plan cache (hits, misses, LRU
 * eviction, plans outliving their context), and plan references taken and
 * dropped on several threads.
 */
#include <omp.h>
#include <stdlib.h>

#include "mask/plan.h"
#include "mask_util.h"

static void test_cache(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  const stsa_geometry g = {4, 3, 5, 6, 4, STSA_TEXT_PREFIX};
  const int64_t N = tu_tokens(&g);
  stsa_mask *a1, *a2, *b;
  NEW_MASK(a1, stsa_mask_frame_window(&g, 1, &a1));
  NEW_MASK(a2, stsa_mask_frame_window(&g, 1, &a2)); /* equal, another object */
  NEW_MASK(b, stsa_mask_frame_window(&g, 2, &b));
  const stsa_mask *m1[2] = {a1, b}, *m2[2] = {a2, b}, *m3[2] = {b, b};
  stsa_plan_desc d = tu_plan_desc(N, N, 2, m1, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
  stsa_plan *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL, *p5 = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p1), STSA_OK);
  d.masks = m2;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p2), STSA_OK);
  CHECK(p1 && p1 == p2, "an identical description gave another plan");
  d.masks = m3;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p3), STSA_OK);
  CHECK(p3 && p3 != p1, "a different mask gave the cached plan");
  d.masks = m1;
  d.kv_tile = 32;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p4), STSA_OK);
  CHECK(p4 && p4 != p1, "a different kv tile gave the cached plan");
  d.kv_tile = 0;
  d.kv_order = STSA_ORDER_SINK_FIRST;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p5), STSA_OK);
  CHECK(p5 && p5 != p1, "a different order gave the cached plan");
  stsa_plan_free(p1);
  stsa_mask_free(a1); /* plans and the cache hold their own references */
  stsa_mask_free(a2);
  /* 40 more distinct plans push p1 out (least recently used) */
  for (int w = 3; w < 43; w++) {
    stsa_mask *x;
    NEW_MASK(x, stsa_mask_frame_window(&g, w, &x));
    const stsa_mask *mx[1] = {x};
    stsa_plan_desc dx = tu_plan_desc(N, N, 1, mx, &g, STSA_PLAN_ALLOW_EMPTY_ROWS);
    stsa_plan *px = NULL;
    CHECK_STATUS(stsa_plan_build(ctx, &dx, &px), STSA_OK);
    stsa_mask_free(x);
    stsa_plan_free(px);
  }
  NEW_MASK(a1, stsa_mask_frame_window(&g, 1, &a1));
  m1[0] = a1;
  d.kv_order = STSA_ORDER_NATIVE;
  stsa_plan *p6 = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &p6), STSA_OK);
  CHECK(p6 && p6 != p2, "an evicted plan came back from the cache");
  stsa_ctx_free(ctx); /* plans outlive their context */
  stsa_plan_stats st = STSA_INIT(stsa_plan_stats);
  CHECK_STATUS(stsa_plan_get_stats(p2, &st), STSA_OK);
  CHECK(st.distinct_masks == 2, "plan after context free: %lld masks",
        (long long)st.distinct_masks);
  stsa_plan_free(p5);
  stsa_plan_free(p2);
  stsa_plan_free(p4);
  stsa_plan_free(p6);
  stsa_plan_free(p3);
  stsa_plan_free(NULL);
  stsa_mask_free(a1);
  stsa_mask_free(b);
}

/* Plan references are counted atomically: one thread takes references (cache
 * hits of stsa_plan_build, on the context it owns) while three others drop
 * references taken before (stsa_plan_free without the context, as a
 * finalizer would). A lost update shows as a wrong final count, or under
 * ASan as a use after free. */
static void test_plan_refs_threads(void) {
  stsa_ctx *ctx = NULL;
  CHECK_STATUS(stsa_ctx_create(&ctx), STSA_OK);
  stsa_mask *m;
  NEW_MASK(m, stsa_mask_causal(0, &m));
  const stsa_mask *masks[1] = {m};
  stsa_plan_desc d = tu_plan_desc(64, 64, 1, masks, NULL, STSA_PLAN_DEFAULT);
  stsa_plan *plan = NULL;
  CHECK_STATUS(stsa_plan_build(ctx, &d, &plan), STSA_OK);
  enum { REFS = 60000, ROUNDS = 64, DROPPERS = 1 };
  stsa_plan **held = malloc(sizeof *held * REFS);
  long wrong = 0;
  omp_set_dynamic(0);
  for (int round = 0; plan && held && round < ROUNDS; round++) {
    for (int i = 0; i < REFS; i++)
      stsa_plan_build(ctx, &d, &held[i]);
    long same = 0;
#pragma omp parallel num_threads(1 + DROPPERS) reduction(+ : same)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp barrier
      if (t == 0) {
        for (int i = 0; i < REFS; i++) { /* take and drop */
          stsa_plan *p = NULL;
          stsa_plan_build(ctx, &d, &p);
          same += p == plan;
          stsa_plan_free(p);
        }
      }
      /* the held ones, interleaved over the other threads (all of them on
       * thread 0 if the runtime gave only one) */
      for (int i = nt > 1 ? t - 1 : 0; t > 0 || nt == 1; i += nt > 1 ? nt - 1 : 1) {
        if (i >= REFS)
          break;
        stsa_plan_free(held[i]);
        for (volatile int spin = 0; spin < 10; spin++)
          ;
      }
    }
    wrong += REFS - same;
  }
  CHECK(wrong == 0, "%ld cache hits gave another plan", wrong);
  /* left: the caller's reference and the cache's */
  CHECK(plan && plan->refcount == 2, "plan refcount %d after the races, expected 2",
        plan ? (int)plan->refcount : -1);
  free(held);
  stsa_plan_free(plan);
  stsa_mask_free(m);
  stsa_ctx_free(ctx);
}

int main(void) {
  test_cache();
  test_plan_refs_threads();
  return tu_finish("test_mask_plan_cache");
}
