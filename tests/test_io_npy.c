/*
 * test_io_npy.c — .npy round trips (bytes equal to stsa_npy_serialize's and
 * numpy's header), headers written by others, a table of malformed files
 * (each with its status and a distinctive part of its message, the same
 * from memory and by path), and writer validation.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io_util.h"
#include "stsa_io.h"
#include "testutil.h"

static void test_npy_roundtrip(void) {
  static const int64_t shapes[][4] = {{0},          {7},    {3, 5},      {2, 3, 4},
                                      {2, 1, 3, 2}, {0, 3}, {3, 0, 2, 2}};
  static const int ranks[] = {0, 1, 2, 3, 4, 2, 4};
  char err[ERR_LEN], path[256];
  tu_path_in(path, sizeof path, "rt.npy");
  for (int dt = 0; dt < 2; dt++) {
    stsa_dtype dtype = dt ? STSA_F16 : STSA_F32;
    for (size_t c = 0; c < sizeof ranks / sizeof *ranks; c++) {
      size_t n = dt ? 2 : 4;
      for (int d = 0; d < ranks[c]; d++)
        n *= (size_t)shapes[c][d];
      uint8_t *data = malloc(n + 1);
      tu_fill_random(data, n, 50 + c);
      CHECK_STATUS(
          stsa_npy_write(path, dtype, ranks[c], shapes[c], data, err, sizeof err),
          STSA_OK);
      stsa_npy_array a;
      CHECK_STATUS(stsa_npy_read(path, &a, err, sizeof err), STSA_OK);
      CHECK(a.dtype == dtype && a.rank == ranks[c] && a.nbytes == n &&
                memcmp(a.shape, shapes[c], sizeof(int64_t) * (size_t)a.rank) == 0 &&
                a.data != NULL && (n == 0 || memcmp(a.data, data, n) == 0),
            "npy round trip dtype %d case %zu: %s", dt, c, err);
      stsa_npy_free(&a);
      CHECK(a.data == NULL && a.nbytes == 0, "npy_free did not zero");

      size_t flen = 0, slen = 0;
      uint8_t *fb = tu_slurp(path, &flen);
      void *sb = NULL;
      CHECK_STATUS(stsa_npy_serialize(dtype, ranks[c], shapes[c], data, &sb, &slen, err,
                                      sizeof err),
                   STSA_OK);
      CHECK(fb && sb && flen == slen && memcmp(fb, sb, flen) == 0,
            "npy file and serialize differ (case %zu)", c);
      CHECK(fb && flen >= 10 && fb[6] == 1 && fb[7] == 0 && (flen - n) % 64 == 0 &&
                fb[flen - n - 1] == '\n',
            "npy layout (version 1.0, 64-aligned, '\\n') case %zu", c);
      CHECK_STATUS(stsa_npy_read_memory(sb, slen, &a, err, sizeof err), STSA_OK);
      CHECK(a.nbytes == n && (n == 0 || memcmp(a.data, data, n) == 0),
            "npy memory round trip case %zu", c);
      stsa_npy_free(&a);
      free(fb);
      free(sb);
      free(data);
    }
  }
  /* The exact header numpy writes for a (2, 3) float32 array. */
  float x[6] = {0};
  int64_t s23[2] = {2, 3};
  void *sb = NULL;
  size_t slen = 0;
  CHECK_STATUS(stsa_npy_serialize(STSA_F32, 2, s23, x, &sb, &slen, err, sizeof err),
               STSA_OK);
  static const char numpy_hdr[] =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  CHECK(sb && slen == 128 + 24 &&
            memcmp((char *)sb + 10, numpy_hdr, sizeof numpy_hdr - 1) == 0,
        "npy header text differs from numpy's");
  free(sb);
  stsa_npy_free(NULL);
}

static void test_npy_foreign(void) {
  static const char *const ok_headers[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }       \n",
      "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f4\"}\n",
      "{ 'fortran_order' :False ,\t'shape': ( 2 , 3 , ) , 'descr':'<f4' }\n",
  };
  char err[ERR_LEN];
  for (size_t i = 0; i < 3; i++) {
    for (int major = 1; major <= 3; major++) {
      size_t len;
      uint8_t *b = tu_npy_image(major, 0, ok_headers[i], 24, &len);
      stsa_npy_array a;
      CHECK_STATUS(stsa_npy_read_memory(b, len, &a, err, sizeof err), STSA_OK);
      CHECK(a.rank == 2 && a.shape[0] == 2 && a.shape[1] == 3 && a.dtype == STSA_F32 &&
                a.nbytes == 24 && memcmp(a.data, b + len - 24, 24) == 0,
            "foreign npy header %zu v%d: %s", i, major, err);
      CHECK(((uintptr_t)a.data & 15) == 0, "npy data not 16-aligned");
      stsa_npy_free(&a);
      free(b);
    }
  }
  size_t len;
  uint8_t *b =
      tu_npy_image(1, 0, "{'descr':'<f2','fortran_order':False,'shape':()}\n", 2, &len);
  stsa_npy_array a;
  CHECK_STATUS(stsa_npy_read_memory(b, len, &a, err, sizeof err), STSA_OK);
  CHECK(a.rank == 0 && a.dtype == STSA_F16 && a.nbytes == 2, "npy scalar");
  stsa_npy_free(&a);
  free(b);
  b = tu_npy_image(
      1, 0, "{'descr':'<f4','fortran_order':False,'shape':(4294967296,4294967296,0)}\n",
      0, &len);
  CHECK_STATUS(stsa_npy_read_memory(b, len, &a, err, sizeof err), STSA_OK);
  CHECK(a.rank == 3 && a.nbytes == 0 && a.shape[0] == 4294967296 && a.data != NULL,
        "npy zero dim with huge dims: %s", err);
  stsa_npy_free(&a);
  free(b);
}

typedef struct npy_bad {
  const char *label;
  int major, minor;
  const char *hdr;
  size_t data_len;
  stsa_status want;
  const char *substr;
} npy_bad;

#define H(d, f, s) "{'descr': '" d "', 'fortran_order': " f ", 'shape': " s ", }    \n"

static const npy_bad k_npy_bad[] = {
    {"version 4", 4, 0, H("<f4", "False", "(2,)"), 8, STSA_ERR_FORMAT,
     "unsupported .npy version 4.0 (expected 1.0, 2.0 or 3.0)"},
    {"version 0", 0, 0, H("<f4", "False", "(2,)"), 8, STSA_ERR_FORMAT,
     "unsupported .npy version 0.0"},
    {"version 1.1", 1, 1, H("<f4", "False", "(2,)"), 8, STSA_ERR_FORMAT,
     "unsupported .npy version 1.1"},
    {"no newline", 1, 0,
     "{'descr': '<f4', 'fortran_order': False, 'shape': "
     "(2,), }    ",
     8, STSA_ERR_FORMAT, "header does not end with '\\n'"},
    {"empty header", 1, 0, "", 8, STSA_ERR_FORMAT, "does not end with"},
    {"missing shape", 1, 0, "{'descr': '<f4', 'fortran_order': False}\n", 8,
     STSA_ERR_FORMAT, "header has no 'shape' key"},
    {"missing descr", 1, 0, "{'shape': (2,), 'fortran_order': False}\n", 8,
     STSA_ERR_FORMAT, "header has no 'descr' key"},
    {"fortran", 1, 0, H("<f4", "True", "(2, 3)"), 24, STSA_ERR_FORMAT,
     "Fortran-order arrays are not supported; save with "
     "np.ascontiguousarray"},
    {"big-endian", 1, 0, H(">f4", "False", "(2,)"), 8, STSA_ERR_BAD_DTYPE,
     "descr \">f4\": big-endian data is not supported"},
    {"object", 1, 0, H("|O", "False", "(2,)"), 16, STSA_ERR_BAD_DTYPE,
     "descr \"|O\": object arrays are not supported"},
    {"float64", 1, 0, H("<f8", "False", "(2,)"), 16, STSA_ERR_BAD_DTYPE,
     "descr \"<f8\" is not supported (expected '<f4' for F32 or '<f2' for "
     "F16)"},
    {"bfloat16-ish void", 1, 0, H("|V2", "False", "(2,)"), 4, STSA_ERR_BAD_DTYPE,
     "descr \"|V2\" is not supported"},
    {"structured", 1, 0,
     "{'descr': [('a', '<f4')], 'fortran_order': False, "
     "'shape': (2,), }\n",
     8, STSA_ERR_BAD_DTYPE, "structured dtypes are not supported"},
    {"negative dim", 1, 0, H("<f4", "False", "(2, -3)"), 24, STSA_ERR_BAD_SHAPE,
     "shape[1] is negative (-3)"},
    {"dim too big", 1, 0, H("<f4", "False", "(99999999999999999999,)"), 8,
     STSA_ERR_BAD_SHAPE, "shape[0] = 99999999999999999999 does not fit"},
    {"product overflow", 1, 0, H("<f4", "False", "(4294967296, 4294967296, 4)"), 8,
     STSA_ERR_BAD_SHAPE,
     "shape [4294967296,4294967296,4] x <f4 has a byte size that overflows"},
    {"rank 9", 1, 0, H("<f4", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 4,
     STSA_ERR_BAD_SHAPE, "more than 8 dims"},
    {"truncated data", 1, 0, H("<f4", "False", "(2, 3)"), 20, STSA_ERR_FORMAT,
     "data is truncated: shape [2,3] x <f4 needs 24 bytes but the file has "
     "20"},
    {"trailing data", 1, 0, H("<f2", "False", "(2, 3)"), 16, STSA_ERR_FORMAT,
     "4 trailing bytes after the data: shape [2,3] x <f2 needs 12 bytes"},
    {"not a tuple", 1, 0, H("<f4", "False", "(3)"), 12, STSA_ERR_FORMAT,
     "'shape' (3) is not a tuple; expected (3,)"},
    {"shape list", 1, 0, H("<f4", "False", "[3]"), 12, STSA_ERR_FORMAT,
     "expected '(' starting the 'shape' tuple"},
    {"leading zero", 1, 0, H("<f4", "False", "(03,)"), 12, STSA_ERR_FORMAT,
     "leading zero"},
    {"unknown key", 1, 0,
     "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (2,), 'extra': 1}\n",
     8, STSA_ERR_FORMAT, "unknown key \"extra\""},
    {"duplicate key", 1, 0,
     "{'descr': '<f4', 'descr': '<f4', "
     "'fortran_order': False, 'shape': (2,)}\n",
     8, STSA_ERR_FORMAT, "duplicate key \"descr\""},
    {"lowercase false", 1, 0, H("<f4", "false", "(2,)"), 8, STSA_ERR_FORMAT,
     "expected True or False"},
    {"garbage after dict", 1, 0,
     "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (2,)} x\n",
     8, STSA_ERR_FORMAT, "only space padding after the header dict"},
    {"missing colon", 1, 0, "{'descr' '<f4'}\n", 8, STSA_ERR_FORMAT,
     "expected ':' after a key"},
    {"unterminated string", 1, 0, "{'descr': '<f4}\n", 8, STSA_ERR_FORMAT,
     "unterminated string starting at offset 10"},
    {"escape", 1, 0, H("<f\\x34", "False", "(2,)"), 8, STSA_ERR_FORMAT,
     "backslash escape"},
    {"control byte in descr", 1, 0, H("<f4\t", "False", "(2,)"), 8, STSA_ERR_FORMAT,
     "control byte 0x09"},
    {"not a dict", 1, 0, "('<f4', False, (2,))\n", 8, STSA_ERR_FORMAT,
     "expected '{' starting the header dict"},
    {"v3 bad UTF-8", 3, 0,
     "{'descr': '<f4\xff', 'fortran_order': False, "
     "'shape': (2,)}\n",
     8, STSA_ERR_FORMAT, "version 3.0 header is not valid UTF-8"},
    {"v1 latin1 descr", 1, 0,
     "{'descr': '<f4\xff', 'fortran_order': False, "
     "'shape': (2,)}\n",
     8, STSA_ERR_BAD_DTYPE, "descr \"<f4\\xff\" is not supported"},
};

static void expect_npy_fail(const char *label, const uint8_t *img, size_t len,
                            stsa_status want, const char *substr) {
  char err[ERR_LEN], err2[ERR_LEN], path[256];
  stsa_npy_array a;
  memset(&a, 0x5a, sizeof a); /* must be zeroed on failure */
  stsa_status st = stsa_npy_read_memory(img, len, &a, err, sizeof err);
  CHECK(st == want, "%s: status %s, expected %s (%s)", label, stsa_status_str(st),
        stsa_status_str(want), err);
  CHECK(strstr(err, substr) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err,
        substr);
  CHECK(a.data == NULL && a.nbytes == 0 && a.rank == 0,
        "%s: out not zeroed after failure", label);
  tu_path_in(path, sizeof path, "bad.npy");
  CHECK(tu_spit(path, img, len), "%s: cannot write %s", label, path);
  st = stsa_npy_read(path, &a, err2, sizeof err2);
  CHECK(st == want && strcmp(err, err2) == 0, "%s: by path %s \"%s\" vs memory \"%s\"",
        label, stsa_status_str(st), err2, err);
  stsa_npy_free(&a);
  unlink(path);
}

static void test_npy_malformed(void) {
  for (size_t i = 0; i < sizeof k_npy_bad / sizeof *k_npy_bad; i++) {
    const npy_bad *c = &k_npy_bad[i];
    size_t len;
    uint8_t *img = tu_npy_image(c->major, c->minor, c->hdr, c->data_len, &len);
    expect_npy_fail(c->label, img, len, c->want, c->substr);
    free(img);
  }
  size_t len;
  uint8_t *img = tu_npy_image(1, 0, H("<f4", "False", "(2,)"), 8, &len);
  img[5] = 'Z';
  expect_npy_fail("bad magic", img, len, STSA_ERR_FORMAT,
                  "not a .npy file: it starts with "
                  "\\x93\\x4e\\x55\\x4d\\x50\\x5a, not the magic \\x93NUMPY");
  expect_npy_fail("3 bytes, not magic", (const uint8_t *)"PK\3", 3, STSA_ERR_FORMAT,
                  "not a .npy file: it starts with \\x50\\x4b\\x03");
  {
    size_t slen;
    uint8_t *st = tu_st_image("{" TU_ST_ENT("a", "F32", "[1]", "[0,4]") "}", 4, &slen);
    expect_npy_fail("safetensors file", st, slen, STSA_ERR_FORMAT, "not a .npy file");
    free(st);
  }
  img[5] = 'Y';
  expect_npy_fail("truncated header", img, 40, STSA_ERR_FORMAT,
                  "header is truncated: length field says 62 bytes but only "
                  "30 follow");
  expect_npy_fail("short file", img, 4, STSA_ERR_FORMAT,
                  "file is 4 bytes, shorter than the 8-byte magic");
  expect_npy_fail("empty file", img, 0, STSA_ERR_FORMAT, "file is 0 bytes");
  expect_npy_fail("no length field", img, 9, STSA_ERR_FORMAT,
                  "too short for the version 1.0 header length");
  free(img);
  img = tu_npy_image(2, 0, H("<f4", "False", "(2,)"), 8, &len);
  img[10] = 0x10; /* header length ~1 MiB + 64 */
  expect_npy_fail("header above cap", img, len, STSA_ERR_FORMAT, "exceeds the limit");
  free(img);

  char err[ERR_LEN], path[256];
  stsa_npy_array a;
  tu_path_in(path, sizeof path, "missing.npy");
  CHECK_STATUS(stsa_npy_read(path, &a, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "missing.npy") != NULL, "missing npy message: %s", err);
  CHECK_STATUS(stsa_npy_read(NULL, &a, err, sizeof err), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_npy_read_memory(NULL, 3, &a, NULL, 0), STSA_ERR_NULL_ARG);
}

static void test_npy_writer_errors(void) {
  char err[ERR_LEN], path[256];
  tu_path_in(path, sizeof path, "w.npy");
  uint16_t d[4] = {0};
  int64_t s[2] = {2, 2};
  CHECK_STATUS(stsa_npy_write(path, STSA_BF16, 2, s, d, err, sizeof err),
               STSA_ERR_BAD_DTYPE);
  CHECK(strcmp(err, "npy has no bfloat16 type; use safetensors") == 0, "bf16 message: %s",
        err);
  CHECK_STATUS(stsa_npy_write(path, (stsa_dtype)9, 2, s, d, err, sizeof err),
               STSA_ERR_BAD_DTYPE);
  CHECK_STATUS(stsa_npy_write(path, STSA_F16, 9, s, d, err, sizeof err),
               STSA_ERR_BAD_SHAPE);
  CHECK(strstr(err, "rank 9") != NULL, "rank message: %s", err);
  s[1] = -2;
  CHECK_STATUS(stsa_npy_write(path, STSA_F16, 2, s, d, err, sizeof err),
               STSA_ERR_BAD_SHAPE);
  CHECK(strstr(err, "shape[1] is negative (-2)") != NULL, "neg: %s", err);
  s[1] = 2;
  CHECK_STATUS(stsa_npy_write(path, STSA_F16, 2, s, NULL, err, sizeof err),
               STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_npy_write(path, STSA_F16, 2, NULL, d, err, sizeof err),
               STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_npy_write(NULL, STSA_F16, 2, s, d, err, sizeof err),
               STSA_ERR_NULL_ARG);
  CHECK(!tu_exists(path), "a failed npy write left a file");
  /* A scalar needs no shape pointer. */
  CHECK_STATUS(stsa_npy_write(path, STSA_F16, 0, NULL, d, err, sizeof err), STSA_OK);
  unlink(path);
}

int main(void) {
  if (!tu_io_begin())
    return 1;
  test_npy_roundtrip();
  test_npy_foreign();
  test_npy_malformed();
  test_npy_writer_errors();
  return tu_io_end("test_io_npy");
}
