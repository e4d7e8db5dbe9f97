/*
 * test_mask_orders.c — token orders: every order is a permutation, agrees
 * with the formula written here, and the position <-> native maps of
 * mask/geometry.h are each other's inverse; text stays in place.
 */
#include <stdlib.h>
#include <string.h>

#include "mask/geometry.h"
#include "mask_util.h"

static void test_orders(void) {
  const stsa_geometry geoms[] = {
      {3, 2, 3, 4, 3, STSA_TEXT_PREFIX}, {4, 3, 2, 5, 2, STSA_TEXT_SUFFIX},
      {3, 2, 2, 0, 0, STSA_TEXT_NONE},   {1, 2, 3, 3, 3, STSA_TEXT_SUFFIX},
      {5, 1, 1, 2, 1, STSA_TEXT_PREFIX}, {0, 0, 0, 7, 7, STSA_TEXT_PREFIX},
  };
  for (size_t gi = 0; gi < sizeof geoms / sizeof *geoms; gi++) {
    const stsa_geometry *g = &geoms[gi];
    const int64_t N = tu_tokens(g), F = g->frames, P = g->height * g->width, L = F * P;
    const int64_t v0 = g->text_pos == STSA_TEXT_PREFIX ? g->text : 0;
    CHECK(stsa_geometry_tokens(g) == N, "tokens %lld, expected %lld",
          (long long)stsa_geometry_tokens(g), (long long)N);
    stsa_geo geo;
    stsa_geo_init(&geo, g);
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)N);
    char *seen = malloc((size_t)N);
    for (int o = 0; o < STSA_ORDER_COUNT_; o++) {
      CHECK_STATUS(stsa_order_permutation(g, (stsa_order)o, perm), STSA_OK);
      memset(seen, 0, (size_t)N);
      long bad = 0;
      for (int64_t pos = 0; pos < N; pos++) {
        int64_t nat = perm[pos];
        if (nat < 0 || nat >= N || seen[nat]++) {
          bad++;
          continue;
        }
        int64_t want = pos; /* text, and NATIVE video */
        int64_t j = pos - v0;
        if (j >= 0 && j < L && o == STSA_ORDER_POSITION_MAJOR)
          want = v0 + (j % F) * P + j / F;
        if (j >= P && j < L && o == STSA_ORDER_SINK_FIRST)
          want = v0 + (1 + (j - P) % (F - 1)) * P + (j - P) / (F - 1);
        bad += nat != want;
        bad += stsa_geo_to_pos(&geo, (stsa_order)o, nat) != pos;
        bad += stsa_geo_to_native(&geo, (stsa_order)o, pos) != nat;
      }
      CHECK(bad == 0, "order %d on geometry %zu: %ld bad positions", o, gi, bad);
    }
    free(perm);
    free(seen);
  }
  int64_t perm[4];
  const stsa_geometry bad = {2, 2, 2, 1, 2, STSA_TEXT_PREFIX};
  const stsa_geometry huge = {1 << 20, 1 << 20, 1 << 20, 0, 0, STSA_TEXT_NONE};
  CHECK_STATUS(stsa_order_permutation(NULL, STSA_ORDER_NATIVE, perm), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_order_permutation(&bad, STSA_ORDER_NATIVE, perm), STSA_ERR_BAD_SHAPE);
  CHECK_STATUS(stsa_order_permutation(&geoms[0], (stsa_order)7, perm),
               STSA_ERR_BAD_PARAM);
  CHECK(stsa_geometry_tokens(&bad) < 0 && stsa_geometry_tokens(&huge) < 0 &&
            stsa_geometry_tokens(NULL) < 0,
        "invalid geometries have a token count");
}

int main(void) {
  test_orders();
  return tu_finish("test_mask_orders");
}
