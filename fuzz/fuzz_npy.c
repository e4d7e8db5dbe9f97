/*
 * fuzz_npy.c — libFuzzer target for the .npy reader.
 *
 * For every input: reading twice gives the same status, message and array;
 * a failure names a known status with a message and zeroes the result; a
 * success survives serialize -> read -> serialize bitwise. Any violation
 * calls abort() so libFuzzer records the input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stsa_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why) {
  fprintf(stderr, "fuzz_npy: %s\n", why);
  abort();
}

static void same_arrays(const stsa_npy_array *a, const stsa_npy_array *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes)
    fail("array headers differ");
  if (memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) != 0)
    fail("shapes differ");
  if (a->nbytes && memcmp(a->data, b->data, a->nbytes) != 0)
    fail("array bytes differ");
}

static void *serialize(const stsa_npy_array *a, size_t *len) {
  void *out = NULL;
  char err[256];
  if (stsa_npy_serialize(a->dtype, a->rank, a->shape, a->data, &out, len, err,
                         sizeof err) != STSA_OK) {
    fprintf(stderr, "serialize: %s\n", err);
    fail("a parsed array cannot be serialized");
  }
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char e1[256], e2[256];
  stsa_npy_array a, b, c;
  stsa_status s1 = stsa_npy_read_memory(data, size, &a, e1, sizeof e1);
  stsa_status s2 = stsa_npy_read_memory(data, size, &b, e2, sizeof e2);
  if (s1 != s2 || strcmp(e1, e2) != 0)
    fail("two reads of the same bytes disagree");
  if (s1 != STSA_OK) {
    if (a.data || b.data || a.nbytes || a.rank)
      fail("result not zeroed after a failure");
    if (e1[0] == '\0')
      fail("failure without a message");
    if (s1 != STSA_ERR_FORMAT && s1 != STSA_ERR_BAD_DTYPE && s1 != STSA_ERR_BAD_SHAPE)
      fail("unexpected status");
    return 0;
  }
  same_arrays(&a, &b);
  if (a.nbytes > size || memcmp(data + size - a.nbytes, a.data, a.nbytes))
    fail("data is not the tail of the input");

  size_t len1, len2;
  void *img1 = serialize(&a, &len1);
  if (stsa_npy_read_memory(img1, len1, &c, e1, sizeof e1) != STSA_OK) {
    fprintf(stderr, "reread: %s\n", e1);
    fail("a serialized array does not read");
  }
  same_arrays(&a, &c);
  void *img2 = serialize(&c, &len2);
  if (len1 != len2 || memcmp(img1, img2, len1) != 0)
    fail("serialize(read(serialize(x))) != serialize(x)");
  free(img1);
  free(img2);
  stsa_npy_free(&a);
  stsa_npy_free(&b);
  stsa_npy_free(&c);
  return 0;
}
