/* prefetch.h — a cache-line prefetch hint where the compiler has one. For
 * rows read in an order the hardware prefetcher cannot follow (gathers by
 * label or by permutation). */
#ifndef STSA_CORE_PREFETCH_H
#define STSA_CORE_PREFETCH_H

#include <stdint.h>

#if defined(__GNUC__)
#define STSA_PREFETCH(p) __builtin_prefetch(p)
#else
#define STSA_PREFETCH(p) ((void)(p))
#endif

/* Prefetches the cache lines of bytes [p, p + bytes). */
static inline void stsa_prefetch_span(const void *p, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) /* a cache line */
    STSA_PREFETCH((const char *)p + at);
}

#endif
