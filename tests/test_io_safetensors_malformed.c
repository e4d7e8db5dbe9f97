/*
 * test_io_safetensors_malformed.c — malformed safetensors files, each with
 * its status and a distinctive part of its message, the same from memory
 * and by path; files of other kinds; failures only a path can have
 * (missing file, folder, FIFO); tiny message buffers.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_common.h" /* stsa_io_utf8_valid */
#include "io_util.h"
#include "stsa_io.h"
#include "testutil.h"

typedef struct st_bad {
  const char *label;
  const char *json;
  size_t data_len;
  stsa_status want;
  const char *substr;
} st_bad;

static const st_bad k_st_bad[] = {
    {"not JSON", "{not json", 0, STSA_ERR_FORMAT, "not valid JSON"},
    {"empty header", "", 0, STSA_ERR_FORMAT, "not valid JSON"},
    {"not an object", "[1,2]", 0, STSA_ERR_FORMAT,
     "must be a JSON object, found an array"},
    {"entry not object", "{\"q\":5}", 0, STSA_ERR_FORMAT,
     "tensor \"q\": expected an object"},
    {"missing dtype", "{\"q\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     STSA_ERR_FORMAT, "tensor \"q\": missing field \"dtype\""},
    {"missing offsets", "{\"q\":{\"shape\":[2],\"dtype\":\"F32\"}}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": missing field \"data_offsets\""},
    {"extra field",
     "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
     "\"foo\":1}}",
     8, STSA_ERR_FORMAT, "tensor \"q\": unexpected field \"foo\""},
    {"dtype wrong type", "{\"q\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     STSA_ERR_FORMAT, "tensor \"q\": field \"dtype\" must be a string, found an integer"},
    {"unknown dtype", "{" TU_ST_ENT("q", "F33", "[2]", "[0,8]") "}", 8,
     STSA_ERR_BAD_DTYPE, "tensor \"q\": unknown dtype \"F33\""},
    {"unsupported F64", "{" TU_ST_ENT("q", "F64", "[1]", "[0,8]") "}", 8,
     STSA_ERR_BAD_DTYPE,
     "tensor \"q\": dtype F64 is not supported (expected F32, F16 or BF16)"},
    {"unsupported U8", "{" TU_ST_ENT("q", "U8", "[8]", "[0,8]") "}", 8,
     STSA_ERR_BAD_DTYPE, "dtype U8 is not supported"},
    {"unsupported F8", "{" TU_ST_ENT("w", "F8_E4M3", "[8]", "[0,8]") "}", 8,
     STSA_ERR_BAD_DTYPE, "tensor \"w\": dtype F8_E4M3 is not supported"},
    {"shape not array", "{" TU_ST_ENT("q", "F32", "\"2\"", "[0,8]") "}", 8,
     STSA_ERR_FORMAT,
     "tensor \"q\": field \"shape\" must be an array of integers, found a "
     "string"},
    {"negative dim", "{" TU_ST_ENT("q", "F32", "[2,-1]", "[0,8]") "}", 8,
     STSA_ERR_BAD_SHAPE, "tensor \"q\": shape[1] is negative (-1)"},
    {"real dim", "{" TU_ST_ENT("q", "F32", "[2.0]", "[0,8]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": shape[0] must be an integer, found a real"},
    {"rank 9", "{" TU_ST_ENT("q", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4,
     STSA_ERR_BAD_SHAPE, "tensor \"q\": shape has rank 9"},
    {"product overflow",
     "{" TU_ST_ENT("huge", "F32", "[4294967296,4294967296,4]", "[0,16]") "}", 16,
     STSA_ERR_BAD_SHAPE,
     "tensor \"huge\": shape [4294967296,4294967296,4] x "
     "F32 has a byte size that overflows"},
    {"bytes overflow", "{" TU_ST_ENT("h", "F32", "[4611686018427387904]", "[0,16]") "}",
     16, STSA_ERR_BAD_SHAPE, "tensor \"h\": shape"},
    {"offsets not array", "{" TU_ST_ENT("q", "F32", "[2]", "8") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": field \"data_offsets\" must be an array"},
    {"offsets 3 elements", "{" TU_ST_ENT("q", "F32", "[2]", "[0,4,8]") "}", 8,
     STSA_ERR_FORMAT, "must have 2 elements [begin, end], found 3"},
    {"offset negative", "{" TU_ST_ENT("q", "F32", "[0]", "[-4,0]") "}", 0,
     STSA_ERR_FORMAT, "tensor \"q\": data_offsets[0] is negative"},
    {"offset real", "{" TU_ST_ENT("q", "F32", "[2]", "[0,8.0]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets[1] must be an integer"},
    {"offset too big for JSON",
     "{" TU_ST_ENT("q", "F32", "[2]", "[0,99999999999999999999]") "}", 8, STSA_ERR_FORMAT,
     "too big integer"},
    {"offsets out of range", "{" TU_ST_ENT("q", "F32", "[4]", "[0,16]") "}", 8,
     STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets [0, 16] end beyond the data section of 8 "
     "bytes"},
    {"begin > end", "{" TU_ST_ENT("q", "F32", "[2]", "[8,0]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets [8, 0] has begin > end"},
    {"size mismatch", "{" TU_ST_ENT("q", "F32", "[2,3,4]", "[0,90]") "}", 90,
     STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets [0, 90] span 90 bytes but shape [2,3,4] x "
     "F32 needs 96"},
    {"overlap",
     "{" TU_ST_ENT("a", "F32", "[2]", "[0,8]") "," TU_ST_ENT("b", "F32", "[2]",
                                                             "[4,12]") "}",
     12, STSA_ERR_FORMAT, "tensors \"a\" [0, 8] and \"b\" [4, 12] overlap"},
    {"same range twice",
     "{" TU_ST_ENT("a", "F32", "[2]", "[0,8]") "," TU_ST_ENT("b", "F16", "[4]",
                                                             "[0,8]") "}",
     8, STSA_ERR_FORMAT, "overlap"},
    {"empty inside another",
     "{" TU_ST_ENT("a", "F32", "[2]", "[0,8]") "," TU_ST_ENT("e", "F32", "[0]",
                                                             "[4,4]") "}",
     8, STSA_ERR_FORMAT, "\"e\" [4, 4] overlap"},
    {"duplicate key",
     "{" TU_ST_ENT("q", "F32", "[1]", "[0,4]") "," TU_ST_ENT("q", "F32", "[1]",
                                                             "[4,8]") "}",
     8, STSA_ERR_FORMAT, "duplicate object key"},
    {"non-UTF-8 name", "{" TU_ST_ENT("\xff\xfe", "F32", "[1]", "[0,4]") "}", 4,
     STSA_ERR_FORMAT, "not valid UTF-8: byte 0xff"},
    {"overlong UTF-8 name", "{" TU_ST_ENT("\xc0\xaf", "F32", "[1]", "[0,4]") "}", 4,
     STSA_ERR_FORMAT, "not valid UTF-8: byte 0xc0"},
    {"surrogate UTF-8 name", "{" TU_ST_ENT("\xed\xa0\x80", "F32", "[1]", "[0,4]") "}", 4,
     STSA_ERR_FORMAT, "not valid UTF-8"},
    {"NUL in name", "{" TU_ST_ENT("a\\u0000b", "F32", "[1]", "[0,4]") "}", 4,
     STSA_ERR_FORMAT, "NUL"},
    {"empty name", "{" TU_ST_ENT("", "F32", "[1]", "[0,4]") "}", 4, STSA_ERR_FORMAT,
     "tensor name is empty"},
    {"trailing garbage", "{" TU_ST_ENT("q", "F32", "[2]", "[0,8]") "}", 12,
     STSA_ERR_FORMAT,
     "data section is 12 bytes but the tensors end at byte 8: 4 bytes of "
     "trailing garbage"},
    {"data but no tensors", "{}", 3, STSA_ERR_FORMAT, "trailing garbage"},
    {"metadata not object", "{\"__metadata__\":5}", 0, STSA_ERR_FORMAT,
     "\"__metadata__\" must be an object"},
    {"metadata value not string", "{\"__metadata__\":{\"k\":1}}", 0, STSA_ERR_FORMAT,
     "\"__metadata__\" entry \"k\" must be a string"},
    {"trailing non-space", "{" TU_ST_ENT("q", "F32", "[1]", "[0,4]") "} x", 4,
     STSA_ERR_FORMAT, "not valid JSON"},
};

/* Opens img from memory and from a file; both must fail the same way. */
static void expect_st_fail(const char *label, const uint8_t *img, size_t len,
                           stsa_status want, const char *substr) {
  char err[ERR_LEN], err2[ERR_LEN], path[256];
  stsa_st_file *f = (stsa_st_file *)&err; /* must be reset to NULL */
  stsa_status st = stsa_st_open_memory(img, len, &f, err, sizeof err);
  CHECK(st == want, "%s: status %s, expected %s (%s)", label, stsa_status_str(st),
        stsa_status_str(want), err);
  CHECK(strstr(err, substr) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err,
        substr);
  CHECK(f == NULL, "%s: out not NULL after failure", label);
  tu_path_in(path, sizeof path, "bad.safetensors");
  CHECK(tu_spit(path, img, len), "%s: cannot write %s", label, path);
  st = stsa_st_open(path, &f, err2, sizeof err2);
  CHECK(st == want && strcmp(err, err2) == 0, "%s: by path %s \"%s\" vs memory \"%s\"",
        label, stsa_status_str(st), err2, err);
  stsa_st_close(f);
  unlink(path);
}

static void test_st_malformed(void) {
  for (size_t i = 0; i < sizeof k_st_bad / sizeof *k_st_bad; i++) {
    const st_bad *c = &k_st_bad[i];
    size_t len;
    uint8_t *img = tu_st_image(c->json, c->data_len, &len);
    expect_st_fail(c->label, img, len, c->want, c->substr);
    free(img);
  }
  /* Cases on the 8-byte prefix itself. */
  uint8_t raw[32] = {0};
  expect_st_fail("empty file", raw, 0, STSA_ERR_FORMAT,
                 "file is 0 bytes, shorter than the 8-byte header length");
  expect_st_fail("truncated prefix", raw, 5, STSA_ERR_FORMAT,
                 "file is 5 bytes, shorter than the 8-byte");
  raw[0] = 0xe8, raw[1] = 0x03; /* 1000 */
  memcpy(raw + 8, "{}", 2);
  expect_st_fail("header beyond file", raw, 20, STSA_ERR_FORMAT,
                 "header length 1000 exceeds the 12 bytes after the 8-byte "
                 "prefix");
  memset(raw, 0, 8);
  raw[3] = 0x40; /* 1 GiB */
  expect_st_fail("header above cap", raw, 20, STSA_ERR_FORMAT,
                 "header length 1073741824 exceeds the limit");
  memset(raw, 0xff, 8);
  expect_st_fail("header length 2^64-1", raw, 20, STSA_ERR_FORMAT, "exceeds the limit");
  /* Without the '{' of a JSON header at byte 8, an impossible length means
   * another kind of file, and the message says so. */
  raw[8] = 0;
  expect_st_fail("2^64-1 and no JSON", raw, 20, STSA_ERR_FORMAT,
                 "not a safetensors file: its first 8 bytes give a header length of "
                 "18446744073709551615 (above the limit)");
  memset(raw, 0, 8);
  raw[0] = 0xe8, raw[1] = 0x03; /* 1000 */
  expect_st_fail("too long and no JSON", raw, 20, STSA_ERR_FORMAT,
                 "not a safetensors file: its first 8 bytes give a header length of "
                 "1000 (longer than the file)");
  expect_st_fail("8 bytes only", raw, 8, STSA_ERR_FORMAT, "not a safetensors file");
  {
    const char text[] = "q,k,v\n1.0,2.0,3.0\n4.0,5.0,6.0\n"; /* a CSV file */
    expect_st_fail("text file", (const uint8_t *)text, sizeof text - 1, STSA_ERR_FORMAT,
                   "not a safetensors file");
    size_t nlen;
    uint8_t *npy = tu_npy_image(1, 0,
                                "{'descr': '<f4', 'fortran_order': False, "
                                "'shape': (2,), }\n",
                                8, &nlen);
    expect_st_fail(".npy file", npy, nlen, STSA_ERR_FORMAT, "not a safetensors file");
    free(npy);
  }

  /* A long name is cut between characters, keeping the message UTF-8. */
  char json[1024];
  size_t o = (size_t)snprintf(json, sizeof json, "{\"");
  for (int i = 0; i < 150; i++)
    o += (size_t)snprintf(json + o, sizeof json - o, "\xc3\xa9"); /* é */
  snprintf(json + o, sizeof json - o,
           "\":{\"dtype\":\"X\",\"shape\":[],"
           "\"data_offsets\":[0,0]}}");
  size_t ilen;
  uint8_t *img = tu_st_image(json, 0, &ilen);
  char msg[ERR_LEN];
  stsa_st_file *lf = NULL;
  CHECK_STATUS(stsa_st_open_memory(img, ilen, &lf, msg, sizeof msg), STSA_ERR_BAD_DTYPE);
  CHECK(strstr(msg, "\xc3\xa9...\": unknown dtype \"X\"") != NULL && strlen(msg) < 200 &&
            stsa_io_utf8_valid((const uint8_t *)msg, strlen(msg), NULL),
        "long name message: %s", msg);
  free(img);

  /* Path-only failures. */
  char err[ERR_LEN], path[256];
  stsa_st_file *f = NULL;
  tu_path_in(path, sizeof path, "does-not-exist.safetensors");
  CHECK_STATUS(stsa_st_open(path, &f, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "does-not-exist") && strstr(err, "No such file"),
        "missing file message: %s", err);
  CHECK_STATUS(stsa_st_open(tu_io_dir, &f, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "not a regular file") != NULL, "dir message: %s", err);
  /* A FIFO with no writer is refused at once: an open without O_NONBLOCK
   * would block forever before the regular-file check (the alarm turns such
   * a hang into a failing test). */
  char fifo[256];
  tu_path_in(fifo, sizeof fifo, "qkv.fifo");
  CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
  alarm(20);
  CHECK_STATUS(stsa_st_open(fifo, &f, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "not a regular file") != NULL, "FIFO message: %s", err);
  stsa_npy_array arr;
  CHECK_STATUS(stsa_npy_read(fifo, &arr, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "not a regular file") != NULL, "FIFO message (npy): %s", err);
  alarm(0);
  unlink(fifo);
  CHECK_STATUS(stsa_st_open(NULL, &f, err, sizeof err), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_st_open(path, NULL, err, sizeof err), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_st_open_memory(NULL, 5, &f, NULL, 0), STSA_ERR_NULL_ARG);
  /* A tiny error buffer is truncated, not overrun. */
  char small[12];
  memset(small, 'x', sizeof small);
  CHECK_STATUS(stsa_st_open_memory(raw, 3, &f, small, 8), STSA_ERR_FORMAT);
  CHECK(small[7] == '\0' && small[8] == 'x', "small err buffer overrun");
  CHECK(stsa_st_count(NULL) == 0 && stsa_st_find(NULL, "a") == NULL &&
            stsa_st_tensor(NULL, 0) == NULL,
        "NULL file accessors");
  stsa_st_close(NULL);
}

int main(void) {
  if (!tu_io_begin())
    return 1;
  test_st_malformed();
  return tu_io_end("test_io_safetensors_malformed");
}
