/*
 * head_kind.c — the names of stsa_head_kind (stsa.h's SVG section): the kind
 * a session picks per head, and the ground truth of the synthetic workload
 * (libstsa_io).
 */
#include "stsa.h"

const char *stsa_head_kind_name(stsa_head_kind kind) {
  static const char *const names[STSA_HEAD_KIND_COUNT_] = {
      [STSA_HEAD_SPATIAL] = "spatial",
      [STSA_HEAD_TEMPORAL] = "temporal",
      [STSA_HEAD_MIXED] = "mixed",
      [STSA_HEAD_SEMANTIC] = "semantic",
  };
  return (unsigned)kind < STSA_HEAD_KIND_COUNT_ ? names[kind] : "unknown";
}
