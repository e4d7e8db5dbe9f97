/* mask_util.c — helpers of the mask and plan tests (see mask_util.h). */
#include "mask_util.h"

stsa_mask *tu_or_free(stsa_mask *a, stsa_mask *b) {
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_or(a, b, &m), STSA_OK);
  stsa_mask_free(a);
  stsa_mask_free(b);
  return m;
}

stsa_mask *tu_and_free(stsa_mask *a, stsa_mask *b) {
  stsa_mask *m = NULL;
  CHECK_STATUS(stsa_mask_and(a, b, &m), STSA_OK);
  stsa_mask_free(b);
  stsa_mask_free(a);
  return m;
}

stsa_plan_desc tu_plan_desc(int64_t s_q, int64_t s_kv, int64_t heads,
                            const stsa_mask *const *masks, const stsa_geometry *g,
                            unsigned flags) {
  return (stsa_plan_desc){.size = sizeof(stsa_plan_desc),
                          .s_q = s_q,
                          .s_kv = s_kv,
                          .heads = heads,
                          .masks = masks,
                          .geometry = g,
                          .flags = flags};
}

int64_t tu_tokens(const stsa_geometry *g) {
  return g->text + g->frames * g->height * g->width;
}

int64_t tu_rnd(tu_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(tu_rng_next(r) % (uint64_t)(hi - lo + 1));
}
