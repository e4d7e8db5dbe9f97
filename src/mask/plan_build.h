/*
 * plan_build.h — the plan builder's internal entry points (the public ones
 * are in stsa.h).
 */
#ifndef STSA_MASK_PLAN_BUILD_H
#define STSA_MASK_PLAN_BUILD_H

#include <stddef.h>

#include "core/context.h"
#include "mask/plan.h"

/* Checks a description against its masks, lengths, geometry and orders
 * (everything but the tile sizes), recording a message in ctx->err. */
stsa_status stsa_plan_validate(stsa_ctx *ctx, const stsa_plan_desc *desc);

/* Builds a plan with tile sizes used exactly as given (1..4096 each, no
 * rounding) and without the cache. For tests that pin a tile grid such as
 * Splash's 16 x 16; the kernel needs multiples of its table's mr and nr,
 * so such plans are for inspection only. */
stsa_status stsa_plan_build_tiles(stsa_ctx *ctx, const stsa_plan_desc *desc, int q_tile,
                                  int kv_tile, stsa_plan **out);

/* An empty plan (refcount 1, every field zero) with an arena of its own, for
 * builders of structures other than masks' (SVG2's cluster plans); NULL when
 * out of memory. stsa_plan_free frees it, its arena and its parts' masks. */
stsa_plan *stsa_plan_new(void);
/* 16-byte aligned storage that lives as long as the plan; NULL when out of
 * memory. */
void *stsa_plan_alloc(stsa_plan *plan, size_t n);

/* Bytes of memory the plan holds (its arena), for reports. */
size_t stsa_plan_bytes(const stsa_plan *plan);

#endif
