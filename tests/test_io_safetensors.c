/*
 * test_io_safetensors.c — safetensors round trips (by path and in memory,
 * with and without metadata, bytes equal to stsa_st_serialize's), files
 * written by others, writer validation, and inputs found by fuzz/run.sh.
 */
#include <stdlib.h>
#include <string.h>

#include "io_util.h"
#include "stsa_io.h"
#include "testutil.h"

/* ---- round trips ---- */

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
    tu_fill_random(p, t[i].nbytes, seed + i); /* any bits, NaN patterns too */
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
  tu_path_in(path, sizeof path, "rt.safetensors");
  tu_path_in(path2, sizeof path2, "rt_meta.safetensors");

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
  uint8_t *fbytes = tu_slurp(path, &flen);
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

/* Files written by others: offsets out of header order, gaps, metadata. */
static void test_st_foreign(void) {
  char err[ERR_LEN];
  size_t len;
  uint8_t *b =
      tu_st_image("{\"__metadata__\":{\"k\":\"v\"}," TU_ST_ENT(
                      "b", "F16", "[2]",
                      "[16,20]") "," TU_ST_ENT("a", "F32", "[2]",
                                               "[0,8]") "," TU_ST_ENT("z", "BF16", "[0]",
                                                                      "[8,8]") "}",
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
  b = tu_st_image("{" TU_ST_ENT("a", "F32", "[1]", "[0,4]") "}     ", 4, &len);
  CHECK_STATUS(stsa_st_open_memory(b, len, &f, err, sizeof err), STSA_OK);
  stsa_st_close(f);
  free(b);

  /* A zero dim makes the size 0 even when the other dims alone overflow. */
  b = tu_st_image("{" TU_ST_ENT("z", "F32", "[4294967296,4294967296,0]", "[0,0]") "}", 0,
                  &len);
  CHECK_STATUS(stsa_st_open_memory(b, len, &f, err, sizeof err), STSA_OK);
  CHECK(f && stsa_st_tensor(f, 0)->nbytes == 0 &&
            stsa_st_tensor(f, 0)->shape[1] == 4294967296,
        "zero dim with huge dims: %s", err);
  stsa_st_close(f);
  free(b);
}

/* ---- writer validation ---- */

static void expect_write_fail(const char *label, const stsa_io_tensor *t, size_t n,
                              const stsa_st_meta *meta, size_t nm, stsa_status want,
                              const char *substr) {
  char err[ERR_LEN], path[256];
  tu_path_in(path, sizeof path, "w.safetensors");
  stsa_status st = stsa_st_write_meta(path, t, n, meta, nm, err, sizeof err);
  CHECK(st == want, "%s: status %s, expected %s (%s)", label, stsa_status_str(st),
        stsa_status_str(want), err);
  CHECK(strstr(err, substr) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err,
        substr);
  CHECK(!tu_exists(path), "%s: a file was left at the path", label);
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

/* ---- inputs found by fuzz/run.sh ---- */

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
  uint8_t *img = tu_st_image("{\"__metadata__\":{\"format\":\"ktp\",\"\":"
                             "\"\xc3\xbcn\xc3\xaf\"},\"\x7f\":{\"dtype\":"
                             "\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}"
                             "       ",
                             8, &len);
  st_reserialize("fuzz crash 1 (empty metadata key)", img, len);
  free(img);
}

int main(void) {
  if (!tu_io_begin())
    return 1;
  test_st_roundtrip();
  test_st_foreign();
  test_st_writer_errors();
  test_fuzz_regressions();
  return tu_io_end("test_io_safetensors");
}
