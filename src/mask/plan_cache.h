/*
 * plan_cache.h — the per-context plan cache (see plan_cache.c).
 */
#ifndef STSA_MASK_PLAN_CACHE_H
#define STSA_MASK_PLAN_CACHE_H

#include <stdint.h>

#include "mask/plan.h"

/* Signature of a validated description with resolved tile sizes. */
uint64_t stsa_plan_key(const stsa_plan_desc *desc, int q_tile, int kv_tile);

/* A cached plan equal to the description, with one more reference; NULL if
 * none (or no cache). */
stsa_plan *stsa_plan_cache_find(stsa_plan_cache *cache, const stsa_plan_desc *desc,
                                int q_tile, int kv_tile, uint64_t key);

/* Remembers `plan` under `key` (the cache takes its own reference), creating
 * the cache on first use. Failing to allocate only means nothing is cached. */
void stsa_plan_cache_insert(stsa_plan_cache **cache, stsa_plan *plan, uint64_t key);

#endif
