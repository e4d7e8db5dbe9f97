/* prefetch.h — a cache-line prefetch hint where the compiler has one. For
 * rows read in an order the hardware prefetcher cannot follow (gathers by
 * label or by permutation). */
#ifndef STSA_CORE_PREFETCH_H
#define STSA_CORE_PREFETCH_H

#if defined(__GNUC__)
#define STSA_PREFETCH(p) __builtin_prefetch(p)
#else
#define STSA_PREFETCH(p) ((void)(p))
#endif

#endif
