/*
 * io_common.h — helpers shared by the tensor file readers and writers
 * (internal to libstsa_io; stsa_io_quote and stsa_io_atomic_write are
 * public, in stsa_io.h). Nothing here prints, exits or keeps global state.
 */
#ifndef STSA_IO_COMMON_H
#define STSA_IO_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "io/io_error.h"
#include "stsa_io.h"

/* Renders a shape as "[2,3,4]" ("[]" for rank 0), cut with "..." if long. */
const char *stsa_io_shape_str(char *buf, size_t buf_len, int rank, const int64_t *shape);

/* *out = a * b; returns 0 (and leaves *out unspecified) on overflow. */
int stsa_io_mul_u64(uint64_t a, uint64_t b, uint64_t *out);

/* Bytes of `rank` dims (each >= 0) of elem_size-byte elements. Any zero dim
 * makes the result 0 regardless of the other dims, so the answer does not
 * depend on dim order. Returns 0 on overflow of uint64_t or size_t. */
int stsa_io_tensor_bytes(int rank, const int64_t *shape, size_t elem_size, uint64_t *out);

/* 1 if s[0..n) is well-formed UTF-8 (no overlong forms, no surrogates, no
 * code point above U+10FFFF); otherwise 0 and *bad_at = offset of the first
 * byte of the bad sequence (bad_at may be NULL). */
int stsa_io_utf8_valid(const uint8_t *s, size_t n, size_t *bad_at);

/* 1 if s[0..n) holds no NUL byte and is valid UTF-8: what a safetensors
 * name, metadata key or value must be, when read and when written. */
int stsa_io_text_ok(const char *s, size_t n);

/* ---- whole-file read-only mapping --------------------------------------- */
typedef struct stsa_io_map {
  const uint8_t *bytes; /* NULL for an empty file */
  size_t len;
  void *addr_; /* mmap address, NULL if nothing mapped */
} stsa_io_map;

/* Maps a regular file read-only (PROT_READ, MAP_PRIVATE). Errors: NULL_ARG,
 * IO (open/stat/mmap failures, not a regular file). */
stsa_status stsa_io_map_file(const char *path, stsa_io_map *m, stsa_io_errbuf *err);
void stsa_io_unmap(stsa_io_map *m);

/* ---- atomic write -------------------------------------------------------- */
/* Writes the concatenation of chunks to path atomically: creates
 * "<path>.tmp.XXXXXX" in the same folder (O_EXCL, mode 0666 & ~umask),
 * writes, fsyncs, closes and renames it over path, then fsyncs the folder
 * (best effort). On any failure the temp file is removed and path is left
 * as it was. Errors: IO, OUT_OF_MEMORY. */
stsa_status stsa_io_write_file(const char *path, const stsa_io_chunk *chunks,
                               size_t count, stsa_io_errbuf *err);

#endif /* STSA_IO_COMMON_H */
