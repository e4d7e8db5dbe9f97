/*
 * fuzz_reader.h — the fuzz targets read their input as a stream of bytes that
 * decide sizes and choices; past its end every byte reads as 0, so any input
 * decodes to some valid sequence of choices.
 */
#ifndef STSA_FUZZ_READER_H
#define STSA_FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct reader {
  const uint8_t *p;
  size_t n, at;
} reader;

static inline unsigned byte(reader *r) { return r->at < r->n ? r->p[r->at++] : 0; }
static inline unsigned u16(reader *r) { return byte(r) | byte(r) << 8; }

#endif
