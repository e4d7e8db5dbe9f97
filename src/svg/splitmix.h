/*
 * splitmix.h — the one pseudo-random generator of the SVG layer (splitmix64):
 * row sampling and k-means++ draws, deterministic in their seeds.
 */
#ifndef STSA_SVG_SPLITMIX_H
#define STSA_SVG_SPLITMIX_H

#include <stdint.h>

/* The next 64-bit draw of the stream *state. */
static inline uint64_t stsa_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#endif
