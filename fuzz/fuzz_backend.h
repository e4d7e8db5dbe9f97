/*
 * fuzz_backend.h — the backend a fuzz input runs: one byte picks among the
 * backends this machine runs, read from the library's table (every one but
 * auto, which is one of the others), so a new backend is fuzzed as soon as
 * its row exists.
 */
#ifndef STSA_FUZZ_BACKEND_H
#define STSA_FUZZ_BACKEND_H

#include "stsa.h"

static inline stsa_backend fuzz_backend(unsigned choice) {
  stsa_backend here[STSA_BACKEND_COUNT_];
  int n = 0;
  for (int b = STSA_BACKEND_AUTO + 1; b < STSA_BACKEND_COUNT_; b++)
    if (stsa_backend_available((stsa_backend)b))
      here[n++] = (stsa_backend)b;
  return here[choice % (unsigned)n]; /* ref and portable always run: n >= 2 */
}

/* 1 for the backends with bf16 tiles (kernels.h: full_tile_bf16), whose
 * bf16 products flush inputs and sums below f32's normal range. */
static inline int fuzz_bf16_tiles(stsa_backend b) {
  return b == STSA_BACKEND_AMX || b == STSA_BACKEND_AVX512BF16;
}

#endif
