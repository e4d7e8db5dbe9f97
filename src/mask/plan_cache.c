/*
 * plan_cache.c — plans remembered by the context that built them.
 *
 * A plan depends only on its description (the head masks, lengths, geometry,
 * orders, tile sizes and flags), never on tensor contents. So one plan serves
 * every layer and every denoising step that uses the same masks: a model can
 * call stsa_plan_build with the same description before each attention call
 * and, after the first, pays a signature and a comparison instead of a build.
 *
 * Entries are found by a 64-bit signature of the description and confirmed by
 * a full comparison (masks structurally, through stsa_mask_equal), so a hash
 * collision can never hand out the wrong plan. The cache holds its own
 * reference to each plan; callers' references stay valid after eviction or
 * after the context is freed. At most CACHE_CAP plans are kept; a new one
 * evicts the least recently used.
 */
#include <stdlib.h>

#include "mask/mask.h"
#include "mask/plan_cache.h"

#define CACHE_CAP 32

struct stsa_plan_cache {
  struct {
    stsa_plan *plan;
    uint64_t key;
    uint64_t used; /* clock value of the last hit or insert */
  } slot[CACHE_CAP];
  int n;
  uint64_t clock;
};

uint64_t stsa_plan_key(const stsa_plan_desc *d, int q_tile, int kv_tile) {
  const int64_t words[] = {d->s_q,      d->s_kv,           d->heads,
                           q_tile,      kv_tile,           d->q_order,
                           d->kv_order, (int64_t)d->flags, d->geometry != NULL};
  uint64_t h = 0x706c616e;
  for (size_t i = 0; i < sizeof words / sizeof *words; i++)
    h = stsa_hash_mix(h, (uint64_t)words[i]);
  if (d->geometry) {
    const stsa_geometry *g = d->geometry;
    const int64_t gw[] = {g->frames, g->height,    g->width,
                          g->text,   g->text_real, (int64_t)g->text_pos};
    for (size_t i = 0; i < sizeof gw / sizeof *gw; i++)
      h = stsa_hash_mix(h, (uint64_t)gw[i]);
  }
  for (int64_t i = 0; i < d->heads; i++)
    h = stsa_hash_mix(h, stsa_mask_signature(d->masks[i]));
  return h;
}

static int matches(const stsa_plan *p, const stsa_plan_desc *d, int q_tile, int kv_tile) {
  if (p->s_q != d->s_q || p->s_kv != d->s_kv || p->heads != d->heads ||
      p->q_tile != q_tile || p->kv_tile != kv_tile || p->q_order != d->q_order ||
      p->kv_order != d->kv_order || p->flags != d->flags ||
      p->has_geometry != (d->geometry != NULL) ||
      (d->geometry && !stsa_geometry_same(&p->geometry, d->geometry)))
    return 0;
  for (int64_t h = 0; h < d->heads; h++)
    if (!stsa_mask_equal(d->masks[h], p->parts[p->head_part[h]].mask))
      return 0;
  return 1;
}

stsa_plan *stsa_plan_cache_find(stsa_plan_cache *c, const stsa_plan_desc *d, int q_tile,
                                int kv_tile, uint64_t key) {
  for (int i = 0; c && i < c->n; i++)
    if (c->slot[i].key == key && matches(c->slot[i].plan, d, q_tile, kv_tile)) {
      c->slot[i].used = ++c->clock;
      return stsa_plan_ref(c->slot[i].plan);
    }
  return NULL;
}

void stsa_plan_cache_insert(stsa_plan_cache **cache, stsa_plan *plan, uint64_t key) {
  if (!*cache && !(*cache = calloc(1, sizeof **cache)))
    return;
  stsa_plan_cache *c = *cache;
  int i = c->n;
  if (i == CACHE_CAP) {
    i = 0;
    for (int j = 1; j < CACHE_CAP; j++)
      if (c->slot[j].used < c->slot[i].used)
        i = j;
    stsa_plan_free(c->slot[i].plan);
  } else {
    c->n++;
  }
  c->slot[i].plan = stsa_plan_ref(plan);
  c->slot[i].key = key;
  c->slot[i].used = ++c->clock;
}

void stsa_plan_cache_destroy(stsa_plan_cache *c) {
  if (!c)
    return;
  for (int i = 0; i < c->n; i++)
    stsa_plan_free(c->slot[i].plan);
  free(c);
}
