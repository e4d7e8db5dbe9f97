/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader.
 *
 * For every input: parsing twice gives the same status, message and views
 * (no hidden state); a failure names a known status with a message; a
 * success yields views inside the input, findable by name, and survives
 * serialize -> parse -> serialize bitwise (the second image equals the
 * first). Any violation calls abort() so libFuzzer records the input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stsa_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why) {
  fprintf(stderr, "fuzz_safetensors: %s\n", why);
  abort();
}

/* a and b hold the same tensors in the same order, bitwise. */
static void same_files(const stsa_st_file *a, const stsa_st_file *b) {
  if (stsa_st_count(a) != stsa_st_count(b))
    fail("tensor counts differ");
  for (size_t i = 0; i < stsa_st_count(a); i++) {
    const stsa_io_tensor *x = stsa_st_tensor(a, i), *y = stsa_st_tensor(b, i);
    if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->rank != y->rank ||
        x->nbytes != y->nbytes)
      fail("tensor headers differ");
    if (memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->rank) != 0)
      fail("shapes differ");
    if (x->nbytes && memcmp(x->data, y->data, x->nbytes) != 0)
      fail("tensor bytes differ");
  }
  if (stsa_st_metadata_count(a) != stsa_st_metadata_count(b))
    fail("metadata counts differ");
  for (size_t i = 0; i < stsa_st_metadata_count(a); i++) {
    const stsa_st_meta *x = stsa_st_metadata(a, i), *y = stsa_st_metadata(b, i);
    if (strcmp(x->key, y->key) != 0 || strcmp(x->value, y->value) != 0)
      fail("metadata differs");
  }
}

/* Serializes f (tensors in file order, metadata in header order). */
static void *serialize(const stsa_st_file *f, size_t *len) {
  size_t n = stsa_st_count(f), m = stsa_st_metadata_count(f);
  stsa_io_tensor *t = malloc((n ? n : 1) * sizeof *t);
  stsa_st_meta *meta = malloc((m ? m : 1) * sizeof *meta);
  if (!t || !meta)
    fail("out of memory");
  for (size_t i = 0; i < n; i++)
    t[i] = *stsa_st_tensor(f, i);
  for (size_t i = 0; i < m; i++)
    meta[i] = *stsa_st_metadata(f, i);
  void *out = NULL;
  char err[256];
  if (stsa_st_serialize(t, n, meta, m, &out, len, err, sizeof err) != STSA_OK) {
    fprintf(stderr, "serialize: %s\n", err);
    fail("a parsed file cannot be serialized");
  }
  free(t);
  free(meta);
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char e1[256], e2[256];
  stsa_st_file *f1 = NULL, *f2 = NULL;
  stsa_status s1 = stsa_st_open_memory(data, size, &f1, e1, sizeof e1);
  stsa_status s2 = stsa_st_open_memory(data, size, &f2, e2, sizeof e2);
  if (s1 != s2 || strcmp(e1, e2) != 0)
    fail("two parses of the same bytes disagree");
  if (s1 != STSA_OK) {
    if (f1 || f2)
      fail("out not NULL after a failure");
    if (e1[0] == '\0')
      fail("failure without a message");
    if (s1 != STSA_ERR_FORMAT && s1 != STSA_ERR_BAD_DTYPE && s1 != STSA_ERR_BAD_SHAPE)
      fail("unexpected status");
    return 0;
  }
  same_files(f1, f2);
  for (size_t i = 0; i < stsa_st_count(f1); i++) {
    const stsa_io_tensor *t = stsa_st_tensor(f1, i);
    const uint8_t *p = t->data;
    if (p < data || p > data + size || t->nbytes > (size_t)(data + size - p))
      fail("view outside the input");
    if (stsa_st_find(f1, t->name) != t)
      fail("find does not return the tensor");
    if (t->data != stsa_st_tensor(f2, i)->data)
      fail("views differ between parses");
  }

  size_t len1, len2;
  void *img1 = serialize(f1, &len1);
  stsa_st_file *g = NULL;
  if (stsa_st_open_memory(img1, len1, &g, e1, sizeof e1) != STSA_OK) {
    fprintf(stderr, "reparse: %s\n", e1);
    fail("a serialized file does not parse");
  }
  same_files(f1, g);
  void *img2 = serialize(g, &len2);
  if (len1 != len2 || memcmp(img1, img2, len1) != 0)
    fail("serialize(parse(serialize(x))) != serialize(x)");
  stsa_st_close(g);
  free(img1);
  free(img2);
  stsa_st_close(f1);
  stsa_st_close(f2);
  return 0;
}
