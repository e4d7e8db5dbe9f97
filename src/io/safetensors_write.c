/*
 * safetensors_write.c — safetensors writer: validates every tensor and the
 * metadata before anything is created, builds the header (keys in the
 * given order, padded so data starts 8-aligned), then writes atomically.
 */
#define _POSIX_C_SOURCE 200809L

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_common.h"
#include "io/safetensors.h"
#include "stsa_io.h"

/* ---- writer -------------------------------------------------------------- */

/* Checks the metadata and adds it to root as "__metadata__". */
static stsa_status build_meta(json_t *root, const stsa_st_meta *meta, size_t meta_count,
                              stsa_io_errbuf *err) {
  if (meta_count == 0)
    return STSA_OK;
  STSA_IO_RETURN_IF(!meta, err, STSA_ERR_NULL_ARG, "meta is NULL but meta_count is %zu",
                    meta_count);
  json_t *obj = json_object();
  STSA_IO_RETURN_IF(!obj || json_object_set_new(root, STSA_ST_META_KEY, obj) != 0, err,
                    STSA_ERR_OUT_OF_MEMORY, "out of memory building the header");
  for (size_t i = 0; i < meta_count; i++) {
    const char *k = meta[i].key, *v = meta[i].value;
    STSA_IO_RETURN_IF(!k || !v, err, STSA_ERR_NULL_ARG,
                      "metadata entry %zu: key or value is NULL", i);
    /* An empty key is allowed: JSON and the reader accept it, and every
     * file the reader accepts must be writable again. */
    char qk[80];
    stsa_io_quote(qk, sizeof qk, k, strlen(k));
    STSA_IO_RETURN_IF(!stsa_io_text_ok(k, strlen(k)) || !stsa_io_text_ok(v, strlen(v)),
                      err, STSA_ERR_BAD_PARAM,
                      "metadata entry %s: key or value is not valid UTF-8", qk);
    STSA_IO_RETURN_IF(json_object_get(obj, k), err, STSA_ERR_BAD_PARAM,
                      "metadata entry %s: duplicate key", qk);
    STSA_IO_RETURN_IF(json_object_set_new(obj, k, json_string(v)) != 0, err,
                      STSA_ERR_OUT_OF_MEMORY, "out of memory building the header");
  }
  return STSA_OK;
}

/* Checks one tensor for writing; *need = its byte size. */
static stsa_status check_tensor(const json_t *root, const stsa_io_tensor *t, size_t i,
                                const char *qn, uint64_t *need, stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(t->name[0] == '\0', err, STSA_ERR_BAD_PARAM,
                    "tensor %zu: name is empty", i);
  STSA_IO_RETURN_IF(!stsa_io_text_ok(t->name, strlen(t->name)), err, STSA_ERR_BAD_PARAM,
                    "tensor %zu (%s): name is not valid UTF-8", i, qn);
  STSA_IO_RETURN_IF(strcmp(t->name, STSA_ST_META_KEY) == 0, err, STSA_ERR_BAD_PARAM,
                    "tensor %zu: name \"" STSA_ST_META_KEY "\" is reserved", i);
  STSA_IO_RETURN_IF(json_object_get(root, t->name), err, STSA_ERR_BAD_PARAM,
                    "tensor %zu: duplicate name %s", i, qn);
  size_t es =
      (int)t->dtype >= 0 && t->dtype < STSA_DTYPE_COUNT_ ? stsa_dtype_size(t->dtype) : 0;
  STSA_IO_RETURN_IF(es == 0, err, STSA_ERR_BAD_DTYPE, "tensor %s: invalid dtype %d", qn,
                    (int)t->dtype);
  STSA_IO_RETURN_IF(t->rank < 0 || t->rank > STSA_IO_MAX_RANK, err, STSA_ERR_BAD_SHAPE,
                    "tensor %s: rank %d is outside 0..%d", qn, t->rank, STSA_IO_MAX_RANK);
  for (int d = 0; d < t->rank; d++)
    STSA_IO_RETURN_IF(t->shape[d] < 0, err, STSA_ERR_BAD_SHAPE,
                      "tensor %s: shape[%d] is negative (%lld)", qn, d,
                      (long long)t->shape[d]);
  char shp[96];
  stsa_io_shape_str(shp, sizeof shp, t->rank, t->shape);
  STSA_IO_RETURN_IF(!stsa_io_tensor_bytes(t->rank, t->shape, es, need), err,
                    STSA_ERR_BAD_SHAPE,
                    "tensor %s: shape %s x %s has a byte size that "
                    "overflows",
                    qn, shp, stsa_st_dtype_name(t->dtype));
  STSA_IO_RETURN_IF(t->nbytes != *need, err, STSA_ERR_BAD_PARAM,
                    "tensor %s: nbytes is %zu but shape %s x %s needs "
                    "%llu",
                    qn, t->nbytes, shp, stsa_st_dtype_name(t->dtype),
                    (unsigned long long)*need);
  STSA_IO_RETURN_IF(!t->data && t->nbytes > 0, err, STSA_ERR_NULL_ARG,
                    "tensor %s: data is NULL", qn);
  return STSA_OK;
}

static json_t *tensor_json(const stsa_io_tensor *t, uint64_t begin, uint64_t end) {
  json_t *o = json_object(), *shape = json_array(), *offs = json_array();
  int bad = !o || !shape || !offs;
  for (int d = 0; !bad && d < t->rank; d++)
    bad = json_array_append_new(shape, json_integer(t->shape[d])) != 0;
  bad = bad || json_array_append_new(offs, json_integer((json_int_t)begin)) ||
        json_array_append_new(offs, json_integer((json_int_t)end));
  bad = bad ||
        json_object_set_new(o, "dtype", json_string(stsa_st_dtype_name(t->dtype))) ||
        json_object_set(o, "shape", shape) || json_object_set(o, "data_offsets", offs);
  json_decref(shape);
  json_decref(offs);
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* Validates everything and builds the 8-byte prefix + padded header into a
 * malloc'd *hdr; *data_len = total tensor bytes. */
static stsa_status build_header(const stsa_io_tensor *tensors, size_t count,
                                const stsa_st_meta *meta, size_t meta_count,
                                uint8_t **hdr, size_t *hdr_len, uint64_t *data_len,
                                stsa_io_errbuf *err) {
  *hdr = NULL;
  STSA_IO_RETURN_IF(count > 0 && !tensors, err, STSA_ERR_NULL_ARG,
                    "tensors is NULL but count is %zu", count);
  json_t *root = json_object();
  STSA_IO_RETURN_IF(!root, err, STSA_ERR_OUT_OF_MEMORY,
                    "out of memory building the header");
  stsa_status st = build_meta(root, meta, meta_count, err);
  uint64_t off = 0;
  for (size_t i = 0; i < count && st == STSA_OK; i++) {
    const stsa_io_tensor *t = &tensors[i];
    if (!t->name) {
      st = stsa_io_fail(err, STSA_ERR_NULL_ARG, "tensor %zu: name is NULL", i);
      break;
    }
    char qn[80];
    uint64_t need;
    stsa_io_quote(qn, sizeof qn, t->name, strlen(t->name));
    st = check_tensor(root, t, i, qn, &need, err);
    if (st != STSA_OK)
      break;
    /* JSON integers are long long: keep every offset representable. */
    if (need > (uint64_t)LLONG_MAX - off) {
      st = stsa_io_fail(err, STSA_ERR_BAD_SHAPE, "tensor %s: total data size overflows",
                        qn);
      break;
    }
    json_t *o = tensor_json(t, off, off + need);
    if (!o || json_object_set_new(root, t->name, o) != 0)
      st = stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY, "out of memory building the header");
    off += need;
  }
  char *text = NULL;
  if (st == STSA_OK) {
    text = json_dumps(root, JSON_COMPACT);
    if (!text)
      st = stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY, "out of memory building the header");
  }
  json_decref(root);
  if (st != STSA_OK)
    return st;
  size_t tl = strlen(text), padded = (tl + 7) & ~(size_t)7;
  if (padded > STSA_ST_MAX_HEADER) {
    free(text);
    return stsa_io_fail(err, STSA_ERR_BAD_PARAM,
                        "header would be %zu bytes, above the %llu-byte limit "
                        "readers accept",
                        padded, (unsigned long long)STSA_ST_MAX_HEADER);
  }
  *hdr = malloc(8 + padded);
  if (!*hdr) {
    free(text);
    return stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY, "out of memory for the header");
  }
  for (int b = 0; b < 8; b++)
    (*hdr)[b] = (uint8_t)((uint64_t)padded >> (8 * b));
  memcpy(*hdr + 8, text, tl);
  memset(*hdr + 8 + tl, ' ', padded - tl);
  free(text);
  *hdr_len = 8 + padded;
  *data_len = off;
  return STSA_OK;
}

static stsa_status serialize(const stsa_io_tensor *tensors, size_t count,
                             const stsa_st_meta *meta, size_t meta_count, void **out,
                             size_t *out_len, stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!out || !out_len, err, STSA_ERR_NULL_ARG,
                    "out and out_len must not be NULL");
  *out = NULL;
  *out_len = 0;
  uint8_t *hdr;
  size_t hl = 0;
  uint64_t dl = 0;
  STSA_IO_TRY(build_header(tensors, count, meta, meta_count, &hdr, &hl, &dl, err));
  if (dl > (uint64_t)(SIZE_MAX - hl)) {
    free(hdr);
    return stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY,
                        "file of %llu data bytes does not fit in memory",
                        (unsigned long long)dl);
  }
  uint8_t *buf = realloc(hdr, hl + (size_t)dl);
  if (!buf) {
    free(hdr);
    return stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes",
                        hl + (size_t)dl);
  }
  size_t pos = hl;
  for (size_t i = 0; i < count; i++) {
    if (tensors[i].nbytes > 0)
      memcpy(buf + pos, tensors[i].data, tensors[i].nbytes);
    pos += tensors[i].nbytes;
  }
  *out = buf;
  *out_len = pos;
  return STSA_OK;
}

static stsa_status write_meta(const char *path, const stsa_io_tensor *tensors,
                              size_t count, const stsa_st_meta *meta, size_t meta_count,
                              stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!path, err, STSA_ERR_NULL_ARG, "path is NULL");
  uint8_t *hdr;
  size_t hl = 0;
  uint64_t dl = 0;
  STSA_IO_TRY(build_header(tensors, count, meta, meta_count, &hdr, &hl, &dl, err));
  stsa_io_chunk *chunks = malloc((count + 1) * sizeof *chunks);
  if (!chunks) {
    free(hdr);
    return stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY, "out of memory for %zu chunks",
                        count + 1);
  }
  chunks[0].data = hdr;
  chunks[0].len = hl;
  for (size_t i = 0; i < count; i++) {
    chunks[i + 1].data = tensors[i].data;
    chunks[i + 1].len = tensors[i].nbytes;
  }
  stsa_status st = stsa_io_write_file(path, chunks, count + 1, err);
  free(chunks);
  free(hdr);
  return st;
}

/* ---- the callers' message buffers ---------------------------------------- */

stsa_status stsa_st_serialize(const stsa_io_tensor *tensors, size_t count,
                              const stsa_st_meta *meta, size_t meta_count, void **out,
                              size_t *out_len, char *err, size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(
      &e, serialize(tensors, count, meta, meta_count, out, out_len, &e), err, err_len);
}

stsa_status stsa_st_write_meta(const char *path, const stsa_io_tensor *tensors,
                               size_t count, const stsa_st_meta *meta, size_t meta_count,
                               char *err, size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, write_meta(path, tensors, count, meta, meta_count, &e), err,
                          err_len);
}

stsa_status stsa_st_write(const char *path, const stsa_io_tensor *tensors, size_t count,
                          char *err, size_t err_len) {
  return stsa_st_write_meta(path, tensors, count, NULL, 0, err, err_len);
}
