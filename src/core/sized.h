/*
 * sized.h — the library's side of stsa.h's "Extensible structs": every
 * public struct starts with the size the caller compiled it with, and the
 * library reads or writes only that many bytes.
 */
#ifndef STSA_CORE_SIZED_H
#define STSA_CORE_SIZED_H

#include <stddef.h>

#include "core/error.h"

/* The most a struct may have grown in a caller's newer header (bytes). */
#define STSA_SIZED_MAX_GROWTH 1024

/* Checks the size field of a caller's struct `p` (non-NULL) of a type this
 * library knows as `known` bytes long (its first release's size is the
 * same today); `type` names it in the message. */
stsa_status stsa_sized_check(const void *p, size_t known, const char *type,
                             stsa_errbuf *err);

/* The same for a struct the library only writes (stats, windows): a larger
 * size than known is fine whatever the extra bytes hold (nothing past known
 * bytes is written). */
stsa_status stsa_sized_check_out(const void *p, size_t known, const char *type,
                                 stsa_errbuf *err);

/* Writes the library's `src` (known bytes, its own size field included) into
 * the caller's `dst`, whose size was checked: only the bytes both know, and
 * dst's size field is left as the caller set it. */
void stsa_sized_write(void *dst, const void *src, size_t known);

/* Reads a caller's struct that has grown since its first release: `first`
 * is the size of its first layout, `known` this library's. The caller's
 * size may be either (or anything sized_check accepts above known); local
 * (known bytes) gets the bytes both know, later fields zero (their
 * defaults), and its size field set to known. */
stsa_status stsa_sized_read(void *local, const void *p, size_t first, size_t known,
                            const char *type, stsa_errbuf *err);

/* The checked size field of a caller's struct. */
#define STSA_SIZED_CHECK(p, type, err) stsa_sized_check((p), sizeof(type), #type, (err))
#define STSA_SIZED_CHECK_OUT(p, type, err)                                               \
  stsa_sized_check_out((p), sizeof(type), #type, (err))

#endif
