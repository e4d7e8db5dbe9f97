/*
 * test_io.c — safetensors and .npy readers/writers: round trips, tables of
 * malformed files (each with its status and a distinctive message part),
 * writer validation and atomic-write guarantees.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_common.h" /* stsa_io_utf8_valid */
#include "io/tensor_file.h"
#include "testutil.h"

#define ERR_LEN 512

static char g_dir[64]; /* the test's mkdtemp folder */

static void path_in(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", g_dir, name);
}

static void fill_random(void *p, size_t n, uint64_t seed) {
  tu_rng rng = {seed};
  uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)(tu_rng_next(&rng) >> 56);
}

/* Reads a whole file into a malloc'd buffer; NULL if it cannot. */
static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
  if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

static int spit(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return 0;
  int ok = fwrite(data, 1, len, f) == len;
  return fclose(f) == 0 && ok;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Number of entries of g_dir whose name contains ".tmp.". */
static int count_temps(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  if (!d)
    return -1;
  for (struct dirent *e; (e = readdir(d));)
    n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0)
      remove_dir(p);
  }
  closedir(d);
  rmdir(dir);
}

/* ======================================================================== */
/* safetensors round trips                                                  */
/* ======================================================================== */

typedef struct spec {
  const char *name;
  stsa_dtype dtype;
  int rank;
  int64_t shape[4];
} spec;

static const spec k_specs[] = {
    {"scalar", STSA_F32, 0, {0}},
    {"vec.f16", STSA_F16, 1, {5}},
    {"mat.bf16", STSA_BF16, 2, {3, 4}},
    {"cube", STSA_F32, 3, {2, 3, 4}},
    {"empty.f32", STSA_F32, 2, {0, 3}},
    {"t4.f16", STSA_F16, 4, {2, 1, 3, 2}},
    {"empty.bf16", STSA_BF16, 4, {2, 0, 2, 1}},
    {"t4.bf16", STSA_BF16, 4, {1, 2, 3, 1}},
    {"名前/ünï", STSA_F32, 1, {3}}, /* UTF-8 name */
};
#define NSPECS (sizeof k_specs / sizeof *k_specs)

static size_t spec_bytes(const spec *s) {
  size_t n = s->dtype == STSA_F32 ? 4 : 2;
  for (int d = 0; d < s->rank; d++)
    n *= (size_t)s->shape[d];
  return n;
}

/* Builds views of NSPECS random tensors; data freed by free_views. */
static void make_views(stsa_io_tensor *t, uint64_t seed) {
  for (size_t i = 0; i < NSPECS; i++) {
    const spec *s = &k_specs[i];
    memset(&t[i], 0, sizeof t[i]);
    t[i].name = s->name;
    t[i].dtype = s->dtype;
    t[i].rank = s->rank;
    memcpy(t[i].shape, s->shape, sizeof s->shape);
    t[i].nbytes = spec_bytes(s);
    void *p = malloc(t[i].nbytes ? t[i].nbytes : 1);
    fill_random(p, t[i].nbytes, seed + i); /* any bits, NaN patterns too */
    t[i].data = p;
  }
}

static void free_views(stsa_io_tensor *t) {
  for (size_t i = 0; i < NSPECS; i++)
    free((void *)t[i].data);
}

/* Every tensor of `want` is in f, in the same order, bitwise equal. */
static void check_same(const stsa_st_file *f, const stsa_io_tensor *want, size_t n,
                       const char *what) {
  CHECK(stsa_st_count(f) == n, "%s: count %zu, expected %zu", what, stsa_st_count(f), n);
  for (size_t i = 0; i < n && i < stsa_st_count(f); i++) {
    const stsa_io_tensor *g = stsa_st_tensor(f, i);
    const stsa_io_tensor *byname = stsa_st_find(f, want[i].name);
    CHECK(g == byname, "%s: tensor %zu is not \"%s\" / find disagrees", what, i,
          want[i].name);
    CHECK(strcmp(g->name, want[i].name) == 0, "%s: name %s vs %s", what, g->name,
          want[i].name);
    CHECK(g->dtype == want[i].dtype && g->rank == want[i].rank, "%s: %s dtype/rank", what,
          g->name);
    CHECK(memcmp(g->shape, want[i].shape, sizeof(int64_t) * (size_t)want[i].rank) == 0,
          "%s: %s shape", what, g->name);
    CHECK(g->nbytes == want[i].nbytes, "%s: %s nbytes %zu vs %zu", what, g->name,
          g->nbytes, want[i].nbytes);
    CHECK(g->nbytes == 0 || memcmp(g->data, want[i].data, g->nbytes) == 0,
          "%s: %s data differs", what, g->name);
  }
  /* Offsets are contiguous, so only the data section start is aligned. */
  const stsa_io_tensor *first = stsa_st_tensor(f, 0);
  CHECK(!first || ((uintptr_t)first->data & 7) == 0, "%s: data section not 8-aligned",
        what);
}

static void test_st_roundtrip(void) {
  stsa_io_tensor t[NSPECS];
  make_views(t, 100);
  char err[ERR_LEN], path[256], path2[256];
  path_in(path, sizeof path, "rt.safetensors");
  path_in(path2, sizeof path2, "rt_meta.safetensors");

  /* Without metadata, by path. */
  CHECK_STATUS(stsa_st_write(path, t, NSPECS, err, sizeof err), STSA_OK);
  CHECK(err[0] == '\0', "err not cleared on success: %s", err);
  stsa_st_file *f = NULL;
  CHECK_STATUS(stsa_st_open(path, &f, err, sizeof err), STSA_OK);
  CHECK(f != NULL, "open: %s", err);
  if (f) {
    check_same(f, t, NSPECS, "st path");
    CHECK(stsa_st_metadata_count(f) == 0, "unexpected metadata");
    CHECK(stsa_st_find(f, "absent") == NULL, "find of a missing name");
    CHECK(stsa_st_tensor(f, NSPECS) == NULL, "tensor out of range");
  }
  stsa_st_close(f);

  /* The file bytes equal stsa_st_serialize's, and the layout is canonical:
   * header padded to 8 with spaces, keys in the given order. */
  size_t flen = 0, slen = 0;
  uint8_t *fbytes = slurp(path, &flen);
  void *sbytes = NULL;
  CHECK_STATUS(stsa_st_serialize(t, NSPECS, NULL, 0, &sbytes, &slen, err, sizeof err),
               STSA_OK);
  CHECK(fbytes && sbytes && flen == slen && memcmp(fbytes, sbytes, flen) == 0,
        "file and serialize differ");
  if (fbytes && flen >= 8) {
    uint64_t n = 0;
    for (int b = 7; b >= 0; b--)
      n = (n << 8) | fbytes[b];
    CHECK(n % 8 == 0 && n <= flen - 8, "header length %llu not padded",
          (unsigned long long)n);
    size_t end = (size_t)n; /* JSON, then fewer than 8 padding spaces */
    while (end > 0 && fbytes[8 + end - 1] == ' ')
      end--;
    CHECK(end > 0 && fbytes[8 + end - 1] == '}' && n - end < 8,
          "header not padded with spaces");
    const char *prev = (const char *)fbytes + 8;
    for (size_t i = 0; i < NSPECS; i++) {
      const char *at = strstr(prev, k_specs[i].name);
      CHECK(at != NULL, "key %s missing or out of order", k_specs[i].name);
      if (at)
        prev = at;
    }
  }
  free(fbytes);
  free(sbytes);

  /* With metadata, kept in order; also from memory. */
  const stsa_st_meta meta[] = {{"format", "pt"}, {"note", "ünï ✓"}};
  CHECK_STATUS(stsa_st_write_meta(path2, t, NSPECS, meta, 2, err, sizeof err), STSA_OK);
  CHECK_STATUS(stsa_st_open(path2, &f, err, sizeof err), STSA_OK);
  if (f) {
    check_same(f, t, NSPECS, "st meta");
    CHECK(stsa_st_metadata_count(f) == 2, "metadata count %zu",
          stsa_st_metadata_count(f));
    const stsa_st_meta *m1 = stsa_st_metadata(f, 1);
    CHECK(m1 && strcmp(m1->key, "note") == 0 && strcmp(m1->value, "ünï ✓") == 0,
          "metadata entry 1");
    const char *v = stsa_st_metadata_get(f, "format");
    CHECK(v && strcmp(v, "pt") == 0, "metadata format");
    CHECK(stsa_st_metadata_get(f, "nope") == NULL, "absent metadata key");
    CHECK(stsa_st_metadata(f, 2) == NULL, "metadata out of range");
  }
  stsa_st_close(f);
  CHECK_STATUS(stsa_st_serialize(t, NSPECS, meta, 2, &sbytes, &slen, err, sizeof err),
               STSA_OK);
  CHECK_STATUS(stsa_st_open_memory(sbytes, slen, &f, err, sizeof err), STSA_OK);
  if (f)
    check_same(f, t, NSPECS, "st memory");
  stsa_st_close(f);
  free(sbytes);

  /* Zero tensors: "{}" padded, readable. */
  CHECK_STATUS(stsa_st_serialize(NULL, 0, NULL, 0, &sbytes, &slen, err, sizeof err),
               STSA_OK);
  CHECK(slen == 16, "empty file is %zu bytes", slen);
  CHECK_STATUS(stsa_st_open_memory(sbytes, slen, &f, err, sizeof err), STSA_OK);
  CHECK(stsa_st_count(f) == 0, "empty file count");
  stsa_st_close(f);
  free(sbytes);
  free_views(t);
}

/* A safetensors image: 8-byte LE length of json, json, data_len bytes. */
static uint8_t *st_image(const char *json, size_t data_len, size_t *len) {
  size_t n = strlen(json);
  uint8_t *b = malloc(8 + n + data_len + 1);
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(b + 8, json, n);
  fill_random(b + 8 + n, data_len, 7);
  *len = 8 + n + data_len;
  return b;
}

#define ENT(n, d, s, o)                                                                  \
  "\"" n "\":{\"dtype\":\"" d "\",\"shape\":" s ",\"data_offsets\":" o "}"

/* Files written by others: offsets out of header order, gaps, metadata. */
static void test_st_foreign(void) {
  char err[ERR_LEN];
  size_t len;
  uint8_t *b = st_image(
      "{\"__metadata__\":{\"k\":\"v\"}," ENT("b", "F16", "[2]", "[16,20]") "," ENT(
          "a", "F32", "[2]", "[0,8]") "," ENT("z", "BF16", "[0]", "[8,8]") "}",
      20, &len);
  stsa_st_file *f = NULL;
  CHECK_STATUS(stsa_st_open_memory(b, len, &f, err, sizeof err), STSA_OK);
  CHECK(f != NULL, "foreign: %s", err);
  if (f) {
    CHECK(stsa_st_count(f) == 3, "foreign count");
    const char *order[] = {"a", "z", "b"};
    for (size_t i = 0; i < 3; i++)
      CHECK(strcmp(stsa_st_tensor(f, i)->name, order[i]) == 0, "foreign order %zu: %s", i,
            stsa_st_tensor(f, i)->name);
    const stsa_io_tensor *tb = stsa_st_find(f, "b");
    CHECK(tb && tb->dtype == STSA_F16 && tb->nbytes == 4 &&
              (const uint8_t *)tb->data == b + len - 4,
          "foreign b view");
    CHECK(stsa_st_metadata_get(f, "k") != NULL, "foreign metadata");
  }
  stsa_st_close(f);
  free(b);

  /* Header padded with trailing whitespace, which JSON allows. */
  b = st_image("{" ENT("a", "F32", "[1]", "[0,4]") "}     ", 4, &len);
  CHECK_STATUS(stsa_st_open_memory(b, len, &f, err, sizeof err), STSA_OK);
  stsa_st_close(f);
  free(b);

  /* A zero dim makes the size 0 even when the other dims alone overflow. */
  b = st_image("{" ENT("z", "F32", "[4294967296,4294967296,0]", "[0,0]") "}", 0, &len);
  CHECK_STATUS(stsa_st_open_memory(b, len, &f, err, sizeof err), STSA_OK);
  CHECK(f && stsa_st_tensor(f, 0)->nbytes == 0 &&
            stsa_st_tensor(f, 0)->shape[1] == 4294967296,
        "zero dim with huge dims: %s", err);
  stsa_st_close(f);
  free(b);
}

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
    {"unknown dtype", "{" ENT("q", "F33", "[2]", "[0,8]") "}", 8, STSA_ERR_BAD_DTYPE,
     "tensor \"q\": unknown dtype \"F33\""},
    {"unsupported F64", "{" ENT("q", "F64", "[1]", "[0,8]") "}", 8, STSA_ERR_BAD_DTYPE,
     "tensor \"q\": dtype F64 is not supported (expected F32, F16 or BF16)"},
    {"unsupported U8", "{" ENT("q", "U8", "[8]", "[0,8]") "}", 8, STSA_ERR_BAD_DTYPE,
     "dtype U8 is not supported"},
    {"unsupported F8", "{" ENT("w", "F8_E4M3", "[8]", "[0,8]") "}", 8, STSA_ERR_BAD_DTYPE,
     "tensor \"w\": dtype F8_E4M3 is not supported"},
    {"shape not array", "{" ENT("q", "F32", "\"2\"", "[0,8]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": field \"shape\" must be an array of integers, found a "
     "string"},
    {"negative dim", "{" ENT("q", "F32", "[2,-1]", "[0,8]") "}", 8, STSA_ERR_BAD_SHAPE,
     "tensor \"q\": shape[1] is negative (-1)"},
    {"real dim", "{" ENT("q", "F32", "[2.0]", "[0,8]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": shape[0] must be an integer, found a real"},
    {"rank 9", "{" ENT("q", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4,
     STSA_ERR_BAD_SHAPE, "tensor \"q\": shape has rank 9"},
    {"product overflow",
     "{" ENT("huge", "F32", "[4294967296,4294967296,4]", "[0,16]") "}", 16,
     STSA_ERR_BAD_SHAPE,
     "tensor \"huge\": shape [4294967296,4294967296,4] x "
     "F32 has a byte size that overflows"},
    {"bytes overflow", "{" ENT("h", "F32", "[4611686018427387904]", "[0,16]") "}", 16,
     STSA_ERR_BAD_SHAPE, "tensor \"h\": shape"},
    {"offsets not array", "{" ENT("q", "F32", "[2]", "8") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": field \"data_offsets\" must be an array"},
    {"offsets 3 elements", "{" ENT("q", "F32", "[2]", "[0,4,8]") "}", 8, STSA_ERR_FORMAT,
     "must have 2 elements [begin, end], found 3"},
    {"offset negative", "{" ENT("q", "F32", "[0]", "[-4,0]") "}", 0, STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets[0] is negative"},
    {"offset real", "{" ENT("q", "F32", "[2]", "[0,8.0]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets[1] must be an integer"},
    {"offset too big for JSON",
     "{" ENT("q", "F32", "[2]", "[0,99999999999999999999]") "}", 8, STSA_ERR_FORMAT,
     "too big integer"},
    {"offsets out of range", "{" ENT("q", "F32", "[4]", "[0,16]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets [0, 16] end beyond the data section of 8 "
     "bytes"},
    {"begin > end", "{" ENT("q", "F32", "[2]", "[8,0]") "}", 8, STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets [8, 0] has begin > end"},
    {"size mismatch", "{" ENT("q", "F32", "[2,3,4]", "[0,90]") "}", 90, STSA_ERR_FORMAT,
     "tensor \"q\": data_offsets [0, 90] span 90 bytes but shape [2,3,4] x "
     "F32 needs 96"},
    {"overlap",
     "{" ENT("a", "F32", "[2]", "[0,8]") "," ENT("b", "F32", "[2]", "[4,12]") "}", 12,
     STSA_ERR_FORMAT, "tensors \"a\" [0, 8] and \"b\" [4, 12] overlap"},
    {"same range twice",
     "{" ENT("a", "F32", "[2]", "[0,8]") "," ENT("b", "F16", "[4]", "[0,8]") "}", 8,
     STSA_ERR_FORMAT, "overlap"},
    {"empty inside another",
     "{" ENT("a", "F32", "[2]", "[0,8]") "," ENT("e", "F32", "[0]", "[4,4]") "}", 8,
     STSA_ERR_FORMAT, "\"e\" [4, 4] overlap"},
    {"duplicate key",
     "{" ENT("q", "F32", "[1]", "[0,4]") "," ENT("q", "F32", "[1]", "[4,8]") "}", 8,
     STSA_ERR_FORMAT, "duplicate object key"},
    {"non-UTF-8 name", "{" ENT("\xff\xfe", "F32", "[1]", "[0,4]") "}", 4, STSA_ERR_FORMAT,
     "not valid UTF-8: byte 0xff"},
    {"overlong UTF-8 name", "{" ENT("\xc0\xaf", "F32", "[1]", "[0,4]") "}", 4,
     STSA_ERR_FORMAT, "not valid UTF-8: byte 0xc0"},
    {"surrogate UTF-8 name", "{" ENT("\xed\xa0\x80", "F32", "[1]", "[0,4]") "}", 4,
     STSA_ERR_FORMAT, "not valid UTF-8"},
    {"NUL in name", "{" ENT("a\\u0000b", "F32", "[1]", "[0,4]") "}", 4, STSA_ERR_FORMAT,
     "NUL"},
    {"empty name", "{" ENT("", "F32", "[1]", "[0,4]") "}", 4, STSA_ERR_FORMAT,
     "tensor name is empty"},
    {"trailing garbage", "{" ENT("q", "F32", "[2]", "[0,8]") "}", 12, STSA_ERR_FORMAT,
     "data section is 12 bytes but the tensors end at byte 8: 4 bytes of "
     "trailing garbage"},
    {"data but no tensors", "{}", 3, STSA_ERR_FORMAT, "trailing garbage"},
    {"metadata not object", "{\"__metadata__\":5}", 0, STSA_ERR_FORMAT,
     "\"__metadata__\" must be an object"},
    {"metadata value not string", "{\"__metadata__\":{\"k\":1}}", 0, STSA_ERR_FORMAT,
     "\"__metadata__\" entry \"k\" must be a string"},
    {"trailing non-space", "{" ENT("q", "F32", "[1]", "[0,4]") "} x", 4, STSA_ERR_FORMAT,
     "not valid JSON"},
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
  path_in(path, sizeof path, "bad.safetensors");
  CHECK(spit(path, img, len), "%s: cannot write %s", label, path);
  st = stsa_st_open(path, &f, err2, sizeof err2);
  CHECK(st == want && strcmp(err, err2) == 0, "%s: by path %s \"%s\" vs memory \"%s\"",
        label, stsa_status_str(st), err2, err);
  stsa_st_close(f);
  unlink(path);
}

static uint8_t *npy_image(int major, int minor, const char *hdr, size_t data_len,
                          size_t *len);

static void test_st_malformed(void) {
  for (size_t i = 0; i < sizeof k_st_bad / sizeof *k_st_bad; i++) {
    const st_bad *c = &k_st_bad[i];
    size_t len;
    uint8_t *img = st_image(c->json, c->data_len, &len);
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
    uint8_t *npy = npy_image(1, 0,
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
  uint8_t *img = st_image(json, 0, &ilen);
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
  path_in(path, sizeof path, "does-not-exist.safetensors");
  CHECK_STATUS(stsa_st_open(path, &f, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "does-not-exist") && strstr(err, "No such file"),
        "missing file message: %s", err);
  CHECK_STATUS(stsa_st_open(g_dir, &f, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "not a regular file") != NULL, "dir message: %s", err);
  /* A FIFO with no writer is refused at once: an open without O_NONBLOCK
   * would block forever before the regular-file check (the alarm turns such
   * a hang into a failing test). */
  char fifo[256];
  path_in(fifo, sizeof fifo, "qkv.fifo");
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

/* ======================================================================== */
/* safetensors writer validation                                            */
/* ======================================================================== */

static void expect_write_fail(const char *label, const stsa_io_tensor *t, size_t n,
                              const stsa_st_meta *meta, size_t nm, stsa_status want,
                              const char *substr) {
  char err[ERR_LEN], path[256];
  path_in(path, sizeof path, "w.safetensors");
  stsa_status st = stsa_st_write_meta(path, t, n, meta, nm, err, sizeof err);
  CHECK(st == want, "%s: status %s, expected %s (%s)", label, stsa_status_str(st),
        stsa_status_str(want), err);
  CHECK(strstr(err, substr) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err,
        substr);
  CHECK(!exists(path), "%s: a file was left at the path", label);
}

static void test_st_writer_errors(void) {
  float d[6] = {0};
  stsa_io_tensor a = {"a", STSA_F32, 2, {2, 3}, d, sizeof d};
  stsa_io_tensor t[2] = {a, a};
  t[1].name = "b";

  t[1].name = "";
  expect_write_fail("empty name", t, 2, NULL, 0, STSA_ERR_BAD_PARAM,
                    "tensor 1: name is empty");
  t[1].name = "a";
  expect_write_fail("duplicate", t, 2, NULL, 0, STSA_ERR_BAD_PARAM,
                    "tensor 1: duplicate name \"a\"");
  t[1].name = "__metadata__";
  expect_write_fail("reserved", t, 2, NULL, 0, STSA_ERR_BAD_PARAM, "reserved");
  t[1].name = "bad\xc3\x28";
  expect_write_fail("non-UTF-8", t, 2, NULL, 0, STSA_ERR_BAD_PARAM, "not valid UTF-8");
  t[1].name = NULL;
  expect_write_fail("NULL name", t, 2, NULL, 0, STSA_ERR_NULL_ARG,
                    "tensor 1: name is NULL");
  t[1] = a, t[1].name = "b";
  t[1].dtype = (stsa_dtype)7;
  expect_write_fail("bad dtype", t, 2, NULL, 0, STSA_ERR_BAD_DTYPE,
                    "tensor \"b\": invalid dtype 7");
  t[1] = a, t[1].name = "b";
  t[1].rank = 9;
  expect_write_fail("rank 9", t, 2, NULL, 0, STSA_ERR_BAD_SHAPE, "tensor \"b\": rank 9");
  t[1] = a, t[1].name = "b";
  t[1].shape[1] = -3;
  expect_write_fail("negative dim", t, 2, NULL, 0, STSA_ERR_BAD_SHAPE,
                    "tensor \"b\": shape[1] is negative (-3)");
  t[1] = a, t[1].name = "b";
  t[1].nbytes = 20;
  expect_write_fail("nbytes mismatch", t, 2, NULL, 0, STSA_ERR_BAD_PARAM,
                    "tensor \"b\": nbytes is 20 but shape [2,3] x F32 needs "
                    "24");
  t[1] = a, t[1].name = "b";
  t[1].data = NULL;
  expect_write_fail("NULL data", t, 2, NULL, 0, STSA_ERR_NULL_ARG,
                    "tensor \"b\": data is NULL");
  t[1] = a, t[1].name = "b";
  t[1].rank = 3, t[1].shape[0] = t[1].shape[1] = t[1].shape[2] = 1LL << 40;
  expect_write_fail("overflow", t, 2, NULL, 0, STSA_ERR_BAD_SHAPE, "overflows");
  t[1] = a, t[1].name = "b";
  const stsa_st_meta dup[2] = {{"k", "1"}, {"k", "2"}};
  expect_write_fail("dup meta", t, 2, dup, 2, STSA_ERR_BAD_PARAM,
                    "metadata entry \"k\": duplicate key");
  const stsa_st_meta bad_value[1] = {{"k", "\xe2\x82"}};
  expect_write_fail("non-UTF-8 meta value", t, 2, bad_value, 1, STSA_ERR_BAD_PARAM,
                    "key or value is not valid UTF-8");
  expect_write_fail("NULL tensors", NULL, 2, NULL, 0, STSA_ERR_NULL_ARG,
                    "tensors is NULL");
  char err[ERR_LEN];
  CHECK_STATUS(stsa_st_write(NULL, t, 2, err, sizeof err), STSA_ERR_NULL_ARG);
  /* Zero-size tensors may have NULL data. */
  stsa_io_tensor z = {"z", STSA_BF16, 2, {0, 4}, NULL, 0};
  void *buf = NULL;
  size_t len = 0;
  CHECK_STATUS(stsa_st_serialize(&z, 1, NULL, 0, &buf, &len, err, sizeof err), STSA_OK);
  free(buf);
}

/* ======================================================================== */
/* inputs found by fuzz/run.sh                                              */
/* ======================================================================== */

/* The fuzzer's property: a file that parses is re-serialized, parses again
 * to the same tensors and metadata, and serializes to the same bytes. */
static void st_reserialize(const char *label, const uint8_t *img, size_t len) {
  char err[ERR_LEN];
  stsa_st_file *f = NULL, *g = NULL;
  CHECK_STATUS(stsa_st_open_memory(img, len, &f, err, sizeof err), STSA_OK);
  if (!f)
    return;
  size_t n = stsa_st_count(f), m = stsa_st_metadata_count(f);
  stsa_io_tensor *t = calloc(n + 1, sizeof *t);
  stsa_st_meta *meta = calloc(m + 1, sizeof *meta);
  for (size_t i = 0; i < n; i++)
    t[i] = *stsa_st_tensor(f, i);
  for (size_t i = 0; i < m; i++)
    meta[i] = *stsa_st_metadata(f, i);
  void *s1 = NULL, *s2 = NULL;
  size_t l1 = 0, l2 = 0;
  stsa_status st = stsa_st_serialize(t, n, meta, m, &s1, &l1, err, sizeof err);
  CHECK(st == STSA_OK, "%s: cannot re-serialize: %s", label, err);
  if (st == STSA_OK && stsa_st_open_memory(s1, l1, &g, err, sizeof err) == STSA_OK) {
    check_same(g, t, n, label);
    CHECK(stsa_st_metadata_count(g) == m, "%s: metadata count", label);
    for (size_t i = 0; i < n; i++)
      t[i] = *stsa_st_tensor(g, i);
    for (size_t i = 0; i < m && i < stsa_st_metadata_count(g); i++)
      meta[i] = *stsa_st_metadata(g, i);
    CHECK_STATUS(stsa_st_serialize(t, n, meta, m, &s2, &l2, err, sizeof err), STSA_OK);
    CHECK(l1 == l2 && s2 && memcmp(s1, s2, l1) == 0, "%s: second serialization differs",
          label);
  } else {
    CHECK(0, "%s: re-serialized file does not parse: %s", label, err);
  }
  stsa_st_close(g);
  stsa_st_close(f);
  free(s1);
  free(s2);
  free(t);
  free(meta);
}

static void test_fuzz_regressions(void) {
  size_t len;
  /* Crash 1: the reader accepted an empty "__metadata__" key that the
   * writer refused, so a parsed file could not be written back. */
  uint8_t *img = st_image("{\"__metadata__\":{\"format\":\"ktp\",\"\":"
                          "\"\xc3\xbcn\xc3\xaf\"},\"\x7f\":{\"dtype\":"
                          "\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}"
                          "       ",
                          8, &len);
  st_reserialize("fuzz crash 1 (empty metadata key)", img, len);
  free(img);
}

/* ======================================================================== */
/* .npy                                                                     */
/* ======================================================================== */

static void test_npy_roundtrip(void) {
  static const int64_t shapes[][4] = {{0},          {7},    {3, 5},      {2, 3, 4},
                                      {2, 1, 3, 2}, {0, 3}, {3, 0, 2, 2}};
  static const int ranks[] = {0, 1, 2, 3, 4, 2, 4};
  char err[ERR_LEN], path[256];
  path_in(path, sizeof path, "rt.npy");
  for (int dt = 0; dt < 2; dt++) {
    stsa_dtype dtype = dt ? STSA_F16 : STSA_F32;
    for (size_t c = 0; c < sizeof ranks / sizeof *ranks; c++) {
      size_t n = dt ? 2 : 4;
      for (int d = 0; d < ranks[c]; d++)
        n *= (size_t)shapes[c][d];
      uint8_t *data = malloc(n + 1);
      fill_random(data, n, 50 + c);
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
      uint8_t *fb = slurp(path, &flen);
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

/* A .npy image: magic, version, header length field (len of hdr), hdr,
 * data_len bytes. */
static uint8_t *npy_image(int major, int minor, const char *hdr, size_t data_len,
                          size_t *len) {
  size_t hl = strlen(hdr), pre = major == 1 ? 10 : 12;
  uint8_t *b = malloc(pre + hl + data_len + 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (uint8_t)major, b[7] = (uint8_t)minor;
  for (size_t k = 8; k < pre; k++)
    b[k] = (uint8_t)(hl >> (8 * (k - 8)));
  memcpy(b + pre, hdr, hl);
  fill_random(b + pre + hl, data_len, 9);
  *len = pre + hl + data_len;
  return b;
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
      uint8_t *b = npy_image(major, 0, ok_headers[i], 24, &len);
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
      npy_image(1, 0, "{'descr':'<f2','fortran_order':False,'shape':()}\n", 2, &len);
  stsa_npy_array a;
  CHECK_STATUS(stsa_npy_read_memory(b, len, &a, err, sizeof err), STSA_OK);
  CHECK(a.rank == 0 && a.dtype == STSA_F16 && a.nbytes == 2, "npy scalar");
  stsa_npy_free(&a);
  free(b);
  b = npy_image(
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
  path_in(path, sizeof path, "bad.npy");
  CHECK(spit(path, img, len), "%s: cannot write %s", label, path);
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
    uint8_t *img = npy_image(c->major, c->minor, c->hdr, c->data_len, &len);
    expect_npy_fail(c->label, img, len, c->want, c->substr);
    free(img);
  }
  size_t len;
  uint8_t *img = npy_image(1, 0, H("<f4", "False", "(2,)"), 8, &len);
  img[5] = 'Z';
  expect_npy_fail("bad magic", img, len, STSA_ERR_FORMAT,
                  "not a .npy file: it starts with "
                  "\\x93\\x4e\\x55\\x4d\\x50\\x5a, not the magic \\x93NUMPY");
  expect_npy_fail("3 bytes, not magic", (const uint8_t *)"PK\3", 3, STSA_ERR_FORMAT,
                  "not a .npy file: it starts with \\x50\\x4b\\x03");
  {
    size_t slen;
    uint8_t *st = st_image("{" ENT("a", "F32", "[1]", "[0,4]") "}", 4, &slen);
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
  img = npy_image(2, 0, H("<f4", "False", "(2,)"), 8, &len);
  img[10] = 0x10; /* header length ~1 MiB + 64 */
  expect_npy_fail("header above cap", img, len, STSA_ERR_FORMAT, "exceeds the limit");
  free(img);

  char err[ERR_LEN], path[256];
  stsa_npy_array a;
  path_in(path, sizeof path, "missing.npy");
  CHECK_STATUS(stsa_npy_read(path, &a, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "missing.npy") != NULL, "missing npy message: %s", err);
  CHECK_STATUS(stsa_npy_read(NULL, &a, err, sizeof err), STSA_ERR_NULL_ARG);
  CHECK_STATUS(stsa_npy_read_memory(NULL, 3, &a, NULL, 0), STSA_ERR_NULL_ARG);
}

static void test_npy_writer_errors(void) {
  char err[ERR_LEN], path[256];
  path_in(path, sizeof path, "w.npy");
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
  CHECK(!exists(path), "a failed npy write left a file");
  /* A scalar needs no shape pointer. */
  CHECK_STATUS(stsa_npy_write(path, STSA_F16, 0, NULL, d, err, sizeof err), STSA_OK);
  unlink(path);
}

/* ======================================================================== */
/* atomic writes                                                            */
/* ======================================================================== */

static void test_atomic(void) {
  char err[ERR_LEN], path[256], sub[256];
  float d[4] = {1, 2, 3, 4};
  stsa_io_tensor t = {"x", STSA_F32, 1, {4}, d, sizeof d};
  int64_t s4 = 4;

  /* A folder that does not exist: IO error, nothing created. */
  path_in(path, sizeof path, "no/such/dir/x.safetensors");
  CHECK_STATUS(stsa_st_write(path, &t, 1, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "no/such/dir") != NULL, "missing dir message: %s", err);
  CHECK(!exists(path), "file created in a missing folder");
  path_in(path, sizeof path, "no/such/dir/x.npy");
  CHECK_STATUS(stsa_npy_write(path, STSA_F32, 1, &s4, d, err, sizeof err), STSA_ERR_IO);

  /* A failing write leaves an existing file unchanged. */
  path_in(path, sizeof path, "keep.safetensors");
  CHECK_STATUS(stsa_st_write(path, &t, 1, err, sizeof err), STSA_OK);
  size_t len0 = 0, len1 = 0;
  uint8_t *before = slurp(path, &len0);
  stsa_io_tensor bad[2] = {t, t}; /* duplicate names */
  CHECK_STATUS(stsa_st_write(path, bad, 2, err, sizeof err), STSA_ERR_BAD_PARAM);
  uint8_t *after = slurp(path, &len1);
  CHECK(before && after && len0 == len1 && memcmp(before, after, len0) == 0,
        "failed write changed the existing file");
  free(after);
  /* A successful write replaces it. */
  d[0] = 9;
  CHECK_STATUS(stsa_st_write(path, &t, 1, err, sizeof err), STSA_OK);
  after = slurp(path, &len1);
  CHECK(after && len1 == len0 && memcmp(before, after, len0) != 0,
        "successful write did not replace the file");
  free(before);
  free(after);

  path_in(path, sizeof path, "keep.npy");
  CHECK_STATUS(stsa_npy_write(path, STSA_F32, 1, &s4, d, err, sizeof err), STSA_OK);
  before = slurp(path, &len0);
  CHECK_STATUS(stsa_npy_write(path, STSA_BF16, 1, &s4, d, err, sizeof err),
               STSA_ERR_BAD_DTYPE);
  after = slurp(path, &len1);
  CHECK(before && after && len0 == len1 && memcmp(before, after, len0) == 0,
        "failed npy write changed the existing file");
  free(before);
  free(after);

  /* Failure after the temp file exists (rename onto a non-empty folder):
   * IO error, folder intact, temp removed. */
  path_in(sub, sizeof sub, "occupied");
  CHECK(mkdir(sub, 0700) == 0, "mkdir %s", sub);
  path_in(path, sizeof path, "occupied/inner");
  CHECK(spit(path, "x", 1), "spit inner");
  CHECK_STATUS(stsa_st_write(sub, &t, 1, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "rename") != NULL, "rename message: %s", err);
  CHECK(exists(path), "the folder was clobbered");
  CHECK_STATUS(stsa_npy_write(sub, STSA_F32, 1, &s4, d, err, sizeof err), STSA_ERR_IO);

  CHECK(count_temps() == 0, "%d temp files left in %s", count_temps(), g_dir);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/stsa_test_io.XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_st_roundtrip();
  test_st_foreign();
  test_st_malformed();
  test_st_writer_errors();
  test_fuzz_regressions();
  test_npy_roundtrip();
  test_npy_foreign();
  test_npy_malformed();
  test_npy_writer_errors();
  test_atomic();
  CHECK(count_temps() == 0, "temp files left behind");
  remove_dir(g_dir);
  return tu_finish("test_io");
}
