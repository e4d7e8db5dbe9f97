/*
 * stsa_io.h — tensor files for stsa (libstsa_io): safetensors and .npy
 * readers and writers, and an atomic file write.
 *
 * libstsa_io is a separate library on top of libstsa's public API (it links
 * libstsa and jansson; libstsa itself needs neither a JSON parser nor file
 * access): link it (pkg-config stsa_io, CMake stsa::stsa_io) only to read or
 * write tensor files. Its experimental section (the synthetic workload) is
 * declared only when STSA_EXPERIMENTAL is defined before this header.
 *
 * Every file function returns an stsa_status and, when err is non-NULL and
 * err_len > 0, writes a NUL-terminated message into err saying which tensor,
 * which field, what was expected and what was found (err is set to "" on
 * success; a message is at most 511 bytes). Nothing here prints, exits or
 * keeps global state; distinct objects may be used from distinct threads.
 * On bad input a writer creates no file and leaves an existing one as it
 * was; a reader of a hostile or truncated file returns an error.
 *
 * Status codes used:
 *   STSA_ERR_NULL_ARG       a required pointer is NULL
 *   STSA_ERR_IO             the OS refused (open, stat, mmap, write, rename)
 *   STSA_ERR_FORMAT         malformed contents: bad prefix/magic, JSON or dict
 *                           syntax, wrong field types, missing/extra fields,
 *                           offsets out of range, overlaps, size mismatches,
 *                           truncated or trailing bytes
 *   STSA_ERR_BAD_DTYPE      a dtype that is unknown or not F32/F16/BF16
 *   STSA_ERR_BAD_SHAPE      rank > STSA_IO_MAX_RANK, a negative dim, or a
 *                           shape whose byte size overflows
 *   STSA_ERR_BAD_PARAM      writer input that cannot be stored: empty,
 *                           duplicate, reserved or non-UTF-8 names; nbytes
 *                           that disagrees with the shape
 *   STSA_ERR_OUT_OF_MEMORY
 */
#ifndef STSA_IO_H
#define STSA_IO_H

#include <stddef.h>
#include <stdint.h>

#include "stsa.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STSA_IO_MAX_RANK 8
/* Readers reject a safetensors header (or a .npy header) longer than this. */
#define STSA_ST_MAX_HEADER ((uint64_t)100 << 20)
#define STSA_NPY_MAX_HEADER ((uint64_t)1 << 20)

/* A view of one tensor. */
typedef struct stsa_io_tensor {
  const char *name; /* NUL-terminated UTF-8 */
  stsa_dtype dtype;
  int rank; /* 0..STSA_IO_MAX_RANK; rank 0 is a scalar */
  int64_t shape[STSA_IO_MAX_RANK];
  const void *data; /* little-endian, C order, contiguous */
  size_t nbytes;    /* numel * element size */
} stsa_io_tensor;

/* ======================================================================== */
/* safetensors                                                              */
/* ======================================================================== */

typedef struct stsa_st_file stsa_st_file; /* opaque */

/* One "__metadata__" entry (string -> string). */
typedef struct stsa_st_meta {
  const char *key;
  const char *value;
} stsa_st_meta;

/*
 * Opens a safetensors file: maps it read-only (mmap PROT_READ, MAP_PRIVATE;
 * the data is never copied), parses and validates the whole header. Tensor
 * data views point into the mapping and stay valid until stsa_st_close.
 * F16/BF16 data are raw bytes. A view's data is aligned to its element only
 * if the writer made it so: stsa_st_write starts the data section 8-aligned
 * but packs tensors back to back (an F32 after an odd-length F16 tensor is
 * only 2-aligned), so check alignment or memcpy before casting. Truncating
 * the file while it is open is undefined (SIGBUS).
 *
 * Validation: 8-byte LE header length N with N <= STSA_ST_MAX_HEADER and
 * N <= file size - 8; header valid UTF-8 and a JSON object without duplicate
 * keys; "__metadata__" (optional) an object of string -> string; every other
 * key a non-empty tensor name mapping to an object with exactly "dtype"
 * (string), "shape" (array of <= 8 integers >= 0) and "data_offsets" (two
 * integers >= 0, begin <= end <= data size); end - begin == numel x element
 * size; no two byte ranges overlap (an empty range may sit at the boundary
 * of another); gaps between tensors are allowed, but the data section must
 * end exactly where the last tensor ends (trailing bytes are an error).
 * Accepted dtypes: "F32", "F16", "BF16"; other safetensors dtypes (F64, I32,
 * U8, BOOL, F8_E4M3, ...) are rejected by name, anything else as unknown.
 *
 * *out is set to NULL on failure.
 */
STSA_API stsa_status stsa_st_open(const char *path, stsa_st_file **out, char *err,
                                  size_t err_len);

/* Same as stsa_st_open on a buffer already in memory (used by the fuzzers).
 * Nothing is copied: the buffer must outlive the file object. */
STSA_API stsa_status stsa_st_open_memory(const void *bytes, size_t len,
                                         stsa_st_file **out, char *err, size_t err_len);

/* Releases the object and unmaps the file. NULL is accepted. */
STSA_API void stsa_st_close(stsa_st_file *f);

/* Number of tensors (0 for NULL). */
STSA_API size_t stsa_st_count(const stsa_st_file *f);

/* Tensor i (0 <= i < count), ordered by data offset: by begin, then end,
 * then position in the header. NULL if out of range. */
STSA_API const stsa_io_tensor *stsa_st_tensor(const stsa_st_file *f, size_t i);

/* The tensor named `name` (binary search), NULL if absent. */
STSA_API const stsa_io_tensor *stsa_st_find(const stsa_st_file *f, const char *name);

/* "__metadata__": number of entries, entry i in header order (NULL if out of
 * range), and the value of a key (NULL if absent). */
STSA_API size_t stsa_st_metadata_count(const stsa_st_file *f);
STSA_API const stsa_st_meta *stsa_st_metadata(const stsa_st_file *f, size_t i);
STSA_API const char *stsa_st_metadata_get(const stsa_st_file *f, const char *key);

/*
 * Writes tensors, in the given order, to path atomically: the bytes go to
 * "<path>.tmp.XXXXXX" in the same folder, which is fsynced and renamed over
 * path; on any failure nothing new is left at path (an existing file stays
 * unchanged) and the temp file is removed. All input is validated before any
 * file is created. Layout: header JSON with keys in the given order
 * ("__metadata__" first when given), data_offsets contiguous, header padded
 * with spaces to a multiple of 8 bytes so that data starts 8-aligned.
 * Rejects NULL/empty/duplicate/non-UTF-8 names and the reserved name
 * "__metadata__" (BAD_PARAM), invalid dtypes (BAD_DTYPE), rank > 8 or
 * negative dims (BAD_SHAPE), nbytes != numel x element size (BAD_PARAM) and
 * NULL data with nbytes > 0 (NULL_ARG).
 */
STSA_API stsa_status stsa_st_write(const char *path, const stsa_io_tensor *tensors,
                                   size_t count, char *err, size_t err_len);

/* stsa_st_write with a "__metadata__" object of meta_count entries (keys
 * unique and UTF-8, possibly empty; values UTF-8). meta may be NULL if
 * meta_count is 0. */
STSA_API stsa_status stsa_st_write_meta(const char *path, const stsa_io_tensor *tensors,
                                        size_t count, const stsa_st_meta *meta,
                                        size_t meta_count, char *err, size_t err_len);

/* Builds the exact bytes stsa_st_write_meta would write, into a malloc'd
 * buffer (*out, *out_len; free() it). Used by tests and fuzzers. */
STSA_API stsa_status stsa_st_serialize(const stsa_io_tensor *tensors, size_t count,
                                       const stsa_st_meta *meta, size_t meta_count,
                                       void **out, size_t *out_len, char *err,
                                       size_t err_len);

/* ======================================================================== */
/* .npy                                                                     */
/* ======================================================================== */

/* Owned result of a .npy read. */
typedef struct stsa_npy_array {
  stsa_dtype dtype; /* STSA_F32 or STSA_F16 */
  int rank;
  int64_t shape[STSA_IO_MAX_RANK];
  void *data;    /* malloc'd (at least 1 byte, so non-NULL even if empty) */
  size_t nbytes; /* numel * element size */
  int mapped_;   /* internal: 0 = malloc'd (the only kind made today) */
} stsa_npy_array;

/*
 * Reads a .npy file (versions 1.0, 2.0, 3.0). The file is mapped for parsing
 * and its data copied into a malloc'd, 16-byte-aligned buffer the caller
 * owns (free with stsa_npy_free). The header must be exactly the dict
 * literal numpy writes: keys 'descr', 'fortran_order', 'shape' (any order,
 * each once, single or double quotes, spaces/tabs anywhere between tokens,
 * optional trailing comma), followed by spaces and a final '\n'. descr must
 * be '<f4' (F32) or '<f2' (F16): big-endian, object, structured and other
 * dtypes are BAD_DTYPE; fortran_order True is FORMAT; negative dims, rank > 8
 * or an overflowing size are BAD_SHAPE; the data must be exactly numel x
 * itemsize bytes (truncated or trailing bytes are FORMAT).
 * *out is zeroed on failure.
 */
STSA_API stsa_status stsa_npy_read(const char *path, stsa_npy_array *out, char *err,
                                   size_t err_len);

/* Same as stsa_npy_read on a buffer in memory; the data is copied. */
STSA_API stsa_status stsa_npy_read_memory(const void *bytes, size_t len,
                                          stsa_npy_array *out, char *err, size_t err_len);

/* Frees the data and zeroes *a. NULL or a zeroed struct is accepted. */
STSA_API void stsa_npy_free(stsa_npy_array *a);

/*
 * Writes a C-order little-endian array of F32 or F16 to path atomically
 * (same temp + fsync + rename scheme as stsa_st_write). Writes version 1.0
 * unless the header is too long for it (then 2.0); the preamble is padded
 * to a multiple of 64 bytes as numpy does. BF16 is STSA_ERR_BAD_DTYPE (npy
 * has no bfloat16 type). shape may be NULL when rank is 0; data may be NULL
 * when the array is empty.
 */
STSA_API stsa_status stsa_npy_write(const char *path, stsa_dtype dtype, int rank,
                                    const int64_t *shape, const void *data, char *err,
                                    size_t err_len);

/* Builds the exact bytes stsa_npy_write would write into a malloc'd buffer
 * (free() it). */
STSA_API stsa_status stsa_npy_serialize(stsa_dtype dtype, int rank, const int64_t *shape,
                                        const void *data, void **out, size_t *out_len,
                                        char *err, size_t err_len);

/* ======================================================================== */
/* Files and messages                                                       */
/* ======================================================================== */

/* One piece of a file stsa_io_atomic_write writes. */
typedef struct stsa_io_chunk {
  const void *data;
  size_t len;
} stsa_io_chunk;

/* Writes the concatenation of chunks to path atomically: creates
 * "<path>.tmp.XXXXXX" in the same folder (O_EXCL, mode 0666 & ~umask),
 * writes, fsyncs, closes and renames it over path, then fsyncs the folder
 * (best effort). On any failure the temp file is removed and path is left
 * as it was. Errors: NULL_ARG, IO, OUT_OF_MEMORY. */
STSA_API stsa_status stsa_io_atomic_write(const char *path, const stsa_io_chunk *chunks,
                                          size_t count, char *err, size_t err_len);

/* Renders the n bytes at s (a tensor name read from a file, say) as a
 * double-quoted string for messages: control bytes, '"' and '\\' are
 * escaped, and long names are cut with "...". Bytes >= 0x80 pass through if
 * the whole input is valid UTF-8, else they are escaped too. Returns buf.
 * buf_len must be at least 16. */
STSA_API const char *stsa_io_quote(char *buf, size_t buf_len, const char *s, size_t n);

#ifdef STSA_EXPERIMENTAL
/* ======================================================================== */
/* Experimental: may change in any release (define STSA_EXPERIMENTAL)       */
/* ======================================================================== */
/*
 * The synthetic workload: what the tools, tests and benchmarks measure on,
 * whose statistics will follow new measurements. Its struct is extensible
 * like libstsa's (stsa.h, "Extensible structs"), but names, fields and
 * semantics may change in a minor release.
 */
/*
 * The built-in workload: deterministic video-DiT-like Q, K, V for a geometry.
 * Per head: content noise plus a 3-D rotary position embedding (head dim
 * split into time, height and width frequency bands, as Wan does), weighted
 * so the head is spatial-dominant (scores fall off with frame distance),
 * temporal-dominant (fall off with spatial distance) or mixed, plus a
 * first-frame sink term. Text tokens get content only. A semantic head (only
 * where `kinds` asks for one) attends by object identity instead: objects
 * that move across frames over static background regions, each token's
 * identity adding the same score to every key of that identity, with weak
 * position terms.
 */
typedef struct stsa_workload_desc {
  size_t size; /* sizeof this struct, as compiled (see "Extensible structs") */
  stsa_geometry geometry;
  int64_t batch, heads, head_dim;
  uint64_t seed;
  /* ground-truth kinds per head; NULL picks the default mix: about a third
   * spatial, two thirds temporal, a few mixed (HunyuanVideo's statistics) */
  const stsa_head_kind *kinds;
} stsa_workload_desc;

/* Fills q, k, v (shape [B, N, H, D], any layout/dtype the tensors describe)
 * and, if kinds_out is not NULL, the ground-truth kind of each head [H].
 * q, k and v may interleave in one buffer (a fused [B, N, 3, H, D] QKV), but
 * no element may belong to two of them: STSA_ERR_OVERLAP (recognised exactly
 * for tensors of one dtype, shape and strides; otherwise any overlap of
 * their byte ranges counts). */
STSA_API stsa_status stsa_workload_generate(const stsa_workload_desc *desc,
                                            const stsa_tensor *q, const stsa_tensor *k,
                                            const stsa_tensor *v,
                                            stsa_head_kind *kinds_out);
#endif /* STSA_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif

#endif /* STSA_IO_H */
