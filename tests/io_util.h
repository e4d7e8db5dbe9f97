/*
 * io_util.h — what the tensor file tests (tests/test_io_*.c) share: a
 * scratch folder per test program, whole-file reads and writes, and
 * hand-made safetensors and .npy images.
 */
#ifndef STSA_TESTS_IO_UTIL_H
#define STSA_TESTS_IO_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The size of every message buffer the tests hand the io functions. */
#define ERR_LEN 512

/* The test program's scratch folder (a mkdtemp folder under /tmp). */
extern char tu_io_dir[64];

/* Creates tu_io_dir; 0 (with a message on stderr) if it cannot. */
int tu_io_begin(void);
/* Checks that no temp file was left, removes tu_io_dir and returns
 * tu_finish(name). */
int tu_io_end(const char *name);

/* buf = "<tu_io_dir>/<name>". */
void tu_path_in(char *buf, size_t len, const char *name);
/* n bytes of deterministic noise, any bit pattern (NaNs too). */
void tu_fill_random(void *p, size_t n, uint64_t seed);
/* A whole file in a malloc'd buffer; NULL if it cannot be read. */
uint8_t *tu_slurp(const char *path, size_t *len);
/* Writes a whole file; 1 on success. */
int tu_spit(const char *path, const void *data, size_t len);
int tu_exists(const char *path);
/* Entries of tu_io_dir whose name contains ".tmp." (-1 if unreadable). */
int tu_count_temps(void);

/* A safetensors image: 8-byte LE length of json, json, data_len bytes of
 * noise; *len its size (malloc'd). */
uint8_t *tu_st_image(const char *json, size_t data_len, size_t *len);
/* One header entry: TU_ST_ENT("a", "F32", "[2]", "[0,8]"). */
#define TU_ST_ENT(n, d, s, o)                                                            \
  "\"" n "\":{\"dtype\":\"" d "\",\"shape\":" s ",\"data_offsets\":" o "}"
/* A .npy image: magic, version major.minor, the header length field (of
 * hdr's length), hdr, data_len bytes of noise (malloc'd). */
uint8_t *tu_npy_image(int major, int minor, const char *hdr, size_t data_len,
                      size_t *len);

#endif
