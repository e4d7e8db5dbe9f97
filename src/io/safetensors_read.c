/*
 * safetensors_read.c — strict safetensors reader: the file is mapped (or
 * given in memory) and never copied; tensor views point into it. Format:
 * u64 LE header length N, N bytes of UTF-8 JSON, data. See tensor_file.h
 * for the validation rules.
 */
#define _POSIX_C_SOURCE 200809L

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_common.h"
#include "io/safetensors.h"
#include "stsa_io.h"

typedef struct st_entry {
  stsa_io_tensor t;
  uint64_t begin, end; /* data_offsets, relative to the data section */
  size_t order;        /* position among the tensors in the header */
} st_entry;

struct stsa_st_file {
  stsa_io_map map; /* unmapped on close; all zero for memory input */
  size_t count;
  st_entry *entries;        /* sorted by (begin, end, order) */
  const st_entry **by_name; /* sorted by name, for stsa_st_find */
  size_t meta_count;
  stsa_st_meta *meta;
  char *strings; /* one arena for names and metadata, NUL-separated */
};

/* ---- dtype and JSON type names ------------------------------------------ */

/* Valid safetensors dtypes this library does not handle; named in errors so
 * that "F64 is not supported" is not mistaken for a corrupt file. */
static const char *const k_unsupported_dtypes[] = {
    "F64",         "I64", "I32",     "I16",     "I8",      "U64",     "U32",
    "U16",         "U8",  "BOOL",    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ",
    "F8_E5M2FNUZ", "F4",  "F6_E2M3", "F6_E3M2", "C64",     "C128"};

static int is_unsupported_dtype(const char *s) {
  for (size_t i = 0; i < sizeof k_unsupported_dtypes / sizeof *k_unsupported_dtypes; i++)
    if (strcmp(s, k_unsupported_dtypes[i]) == 0)
      return 1;
  return 0;
}

/* What a JSON value is, for "..., found <name>" in messages. */
static const char *json_type_name(const json_t *v) {
  static const char *const names[] = {
      [JSON_OBJECT] = "an object",   [JSON_ARRAY] = "an array",
      [JSON_STRING] = "a string",    [JSON_INTEGER] = "an integer",
      [JSON_REAL] = "a real number", [JSON_TRUE] = "a boolean",
      [JSON_FALSE] = "a boolean",    [JSON_NULL] = "null",
  };
  const unsigned type = (unsigned)json_typeof(v);
  return type < sizeof names / sizeof *names && names[type] ? names[type] : "unknown";
}

static uint64_t load_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* ---- reader: one tensor entry -------------------------------------------- */

static stsa_status parse_dtype(const json_t *v, const char *qn, stsa_dtype *dt,
                               stsa_io_errbuf *err) {
  char qd[80];
  STSA_IO_RETURN_IF(!json_is_string(v), err, STSA_ERR_FORMAT,
                    "tensor %s: field \"dtype\" must be a string, found %s", qn,
                    json_type_name(v));
  const char *s = json_string_value(v);
  for (int i = 0; i < STSA_DTYPE_COUNT_; i++) {
    if (strcmp(s, stsa_st_dtype_name((stsa_dtype)i)) == 0) {
      *dt = (stsa_dtype)i;
      return STSA_OK;
    }
  }
  stsa_io_quote(qd, sizeof qd, s, json_string_length(v));
  STSA_IO_RETURN_IF(is_unsupported_dtype(s), err, STSA_ERR_BAD_DTYPE,
                    "tensor %s: dtype %s is not supported (expected F32, "
                    "F16 or BF16)",
                    qn, s);
  return stsa_io_fail(err, STSA_ERR_BAD_DTYPE,
                      "tensor %s: unknown dtype %s (expected F32, F16 or BF16)", qn, qd);
}

static stsa_status parse_shape(const json_t *v, const char *qn, st_entry *e,
                               stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!json_is_array(v), err, STSA_ERR_FORMAT,
                    "tensor %s: field \"shape\" must be an array of "
                    "integers, found %s",
                    qn, json_type_name(v));
  size_t rank = json_array_size(v);
  STSA_IO_RETURN_IF(rank > STSA_IO_MAX_RANK, err, STSA_ERR_BAD_SHAPE,
                    "tensor %s: shape has rank %zu, more than the maximum "
                    "%d",
                    qn, rank, STSA_IO_MAX_RANK);
  e->t.rank = (int)rank;
  for (size_t i = 0; i < rank; i++) {
    const json_t *d = json_array_get(v, i);
    STSA_IO_RETURN_IF(!json_is_integer(d), err, STSA_ERR_FORMAT,
                      "tensor %s: shape[%zu] must be an integer, found %s", qn, i,
                      json_type_name(d));
    json_int_t x = json_integer_value(d);
    STSA_IO_RETURN_IF(x < 0, err, STSA_ERR_BAD_SHAPE,
                      "tensor %s: shape[%zu] is negative (%lld)", qn, i, (long long)x);
    e->t.shape[i] = (int64_t)x;
  }
  return STSA_OK;
}

static stsa_status parse_offsets(const json_t *v, const char *qn, st_entry *e,
                                 stsa_io_errbuf *err) {
  if (!json_is_array(v) || json_array_size(v) != 2) {
    STSA_IO_RETURN_IF(json_is_array(v), err, STSA_ERR_FORMAT,
                      "tensor %s: field \"data_offsets\" must have 2 "
                      "elements [begin, end], found %zu",
                      qn, json_array_size(v));
    return stsa_io_fail(err, STSA_ERR_FORMAT,
                        "tensor %s: field \"data_offsets\" must be an array "
                        "[begin, end], found %s",
                        qn, json_type_name(v));
  }
  uint64_t off[2];
  for (size_t i = 0; i < 2; i++) {
    const json_t *d = json_array_get(v, i);
    STSA_IO_RETURN_IF(!json_is_integer(d), err, STSA_ERR_FORMAT,
                      "tensor %s: data_offsets[%zu] must be an integer, "
                      "found %s",
                      qn, i, json_type_name(d));
    json_int_t x = json_integer_value(d);
    STSA_IO_RETURN_IF(x < 0, err, STSA_ERR_FORMAT,
                      "tensor %s: data_offsets[%zu] is negative (%lld)", qn, i,
                      (long long)x);
    off[i] = (uint64_t)x;
  }
  e->begin = off[0];
  e->end = off[1];
  return STSA_OK;
}

/* Validates one tensor entry of the header and fills e (not its data). */
static stsa_status parse_entry(const json_t *v, const char *qn, uint64_t data_size,
                               st_entry *e, stsa_io_errbuf *err) {
  static const char *const fields[] = {"dtype", "shape", "data_offsets"};
  const json_t *field[3] = {NULL, NULL, NULL};
  STSA_IO_RETURN_IF(!json_is_object(v), err, STSA_ERR_FORMAT,
                    "tensor %s: expected an object with dtype, shape and "
                    "data_offsets, found %s",
                    qn, json_type_name(v));
  for (void *it = json_object_iter((json_t *)v); it;
       it = json_object_iter_next((json_t *)v, it)) {
    const char *k = json_object_iter_key(it);
    int found = 0;
    for (int i = 0; i < 3; i++) {
      if (strcmp(k, fields[i]) == 0) {
        field[i] = json_object_iter_value(it);
        found = 1;
      }
    }
    if (!found) {
      char qk[80];
      stsa_io_quote(qk, sizeof qk, k, json_object_iter_key_len(it));
      return stsa_io_fail(err, STSA_ERR_FORMAT,
                          "tensor %s: unexpected field %s (expected exactly "
                          "dtype, shape and data_offsets)",
                          qn, qk);
    }
  }
  for (int i = 0; i < 3; i++)
    STSA_IO_RETURN_IF(!field[i], err, STSA_ERR_FORMAT, "tensor %s: missing field \"%s\"",
                      qn, fields[i]);

  STSA_IO_TRY(parse_dtype(field[0], qn, &e->t.dtype, err));
  STSA_IO_TRY(parse_shape(field[1], qn, e, err));
  STSA_IO_TRY(parse_offsets(field[2], qn, e, err));

  char shp[96];
  uint64_t need;
  const char *dname = stsa_st_dtype_name(e->t.dtype);
  STSA_IO_RETURN_IF(
      !stsa_io_tensor_bytes(e->t.rank, e->t.shape, stsa_dtype_size(e->t.dtype), &need),
      err, STSA_ERR_BAD_SHAPE,
      "tensor %s: shape %s x %s has a byte size that "
      "overflows",
      qn, stsa_io_shape_str(shp, sizeof shp, e->t.rank, e->t.shape), dname);
  STSA_IO_RETURN_IF(e->begin > e->end, err, STSA_ERR_FORMAT,
                    "tensor %s: data_offsets [%llu, %llu] has begin > end", qn,
                    (unsigned long long)e->begin, (unsigned long long)e->end);
  STSA_IO_RETURN_IF(e->end > data_size, err, STSA_ERR_FORMAT,
                    "tensor %s: data_offsets [%llu, %llu] end beyond the "
                    "data section of %llu bytes",
                    qn, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)data_size);
  STSA_IO_RETURN_IF(e->end - e->begin != need, err, STSA_ERR_FORMAT,
                    "tensor %s: data_offsets [%llu, %llu] span %llu bytes "
                    "but shape %s x %s needs %llu",
                    qn, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin),
                    stsa_io_shape_str(shp, sizeof shp, e->t.rank, e->t.shape), dname,
                    (unsigned long long)need);
  e->t.nbytes = (size_t)need;
  return STSA_OK;
}

/* ---- reader: whole header ------------------------------------------------ */

static int cmp_offset(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_name(const void *a, const void *b) {
  const st_entry *const *x = a, *const *y = b;
  return strcmp((*x)->t.name, (*y)->t.name);
}

/* Copies n bytes plus a NUL into the arena at *pos. */
static const char *arena_put(char *arena, size_t *pos, const char *s, size_t n) {
  char *dst = arena + *pos;
  memcpy(dst, s, n);
  dst[n] = '\0';
  *pos += n + 1;
  return dst;
}

static stsa_status parse_metadata(const json_t *v, stsa_st_file *f, char *arena,
                                  size_t *pos, stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!json_is_object(v), err, STSA_ERR_FORMAT,
                    "\"" STSA_ST_META_KEY "\" must be an object of string -> "
                    "string, found %s",
                    json_type_name(v));
  for (void *it = json_object_iter((json_t *)v); it;
       it = json_object_iter_next((json_t *)v, it)) {
    const char *k = json_object_iter_key(it);
    size_t kn = json_object_iter_key_len(it);
    const json_t *val = json_object_iter_value(it);
    char qk[80];
    stsa_io_quote(qk, sizeof qk, k, kn);
    STSA_IO_RETURN_IF(!json_is_string(val), err, STSA_ERR_FORMAT,
                      "\"" STSA_ST_META_KEY "\" entry %s must be a string, found "
                      "%s",
                      qk, json_type_name(val));
    const char *s = json_string_value(val);
    size_t sn = json_string_length(val);
    STSA_IO_RETURN_IF(!stsa_io_text_ok(k, kn) || !stsa_io_text_ok(s, sn), err,
                      STSA_ERR_FORMAT,
                      "\"" STSA_ST_META_KEY "\" entry %s holds a NUL byte or "
                      "invalid UTF-8",
                      qk);
    stsa_st_meta *m = &f->meta[f->meta_count++];
    m->key = arena_put(arena, pos, k, kn);
    m->value = arena_put(arena, pos, s, sn);
  }
  return STSA_OK;
}

/* Sizes the arena and the arrays, then allocates them. */
static stsa_status alloc_tables(const json_t *root, stsa_st_file *f,
                                stsa_io_errbuf *err) {
  size_t ntensors = 0, nmeta = 0, bytes = 1;
  for (void *it = json_object_iter((json_t *)root); it;
       it = json_object_iter_next((json_t *)root, it)) {
    const json_t *v = json_object_iter_value(it);
    /* Lengths are bounded by the (<= 100 MiB) header: no overflow. */
    if (strcmp(json_object_iter_key(it), STSA_ST_META_KEY) == 0 && json_is_object(v)) {
      for (void *m = json_object_iter((json_t *)v); m;
           m = json_object_iter_next((json_t *)v, m)) {
        const json_t *s = json_object_iter_value(m);
        bytes += json_object_iter_key_len(m) + 1;
        bytes += (json_is_string(s) ? json_string_length(s) : 0) + 1;
        nmeta++;
      }
    } else {
      bytes += json_object_iter_key_len(it) + 1;
      ntensors++;
    }
  }
  f->entries = calloc(ntensors ? ntensors : 1, sizeof *f->entries);
  f->by_name = calloc(ntensors ? ntensors : 1, sizeof *f->by_name);
  f->meta = calloc(nmeta ? nmeta : 1, sizeof *f->meta);
  f->strings = malloc(bytes);
  STSA_IO_RETURN_IF(!f->entries || !f->by_name || !f->meta || !f->strings, err,
                    STSA_ERR_OUT_OF_MEMORY, "out of memory for %zu tensor entries",
                    ntensors);
  return STSA_OK;
}

static stsa_status check_layout(stsa_st_file *f, uint64_t data_size,
                                stsa_io_errbuf *err) {
  qsort(f->entries, f->count, sizeof *f->entries, cmp_offset);
  uint64_t max_end = 0;
  const st_entry *max_owner = NULL;
  for (size_t i = 0; i < f->count; i++) {
    const st_entry *e = &f->entries[i];
    if (e->begin < max_end) {
      char qa[80], qb[80];
      return stsa_io_fail(
          err, STSA_ERR_FORMAT, "tensors %s [%llu, %llu] and %s [%llu, %llu] overlap",
          stsa_io_quote(qa, sizeof qa, max_owner->t.name, strlen(max_owner->t.name)),
          (unsigned long long)max_owner->begin, (unsigned long long)max_owner->end,
          stsa_io_quote(qb, sizeof qb, e->t.name, strlen(e->t.name)),
          (unsigned long long)e->begin, (unsigned long long)e->end);
    }
    if (e->end > max_end || !max_owner) {
      max_end = e->end;
      max_owner = e;
    }
  }
  STSA_IO_RETURN_IF(max_end != data_size, err, STSA_ERR_FORMAT,
                    "data section is %llu bytes but the tensors end at "
                    "byte %llu: %llu bytes of trailing garbage",
                    (unsigned long long)data_size, (unsigned long long)max_end,
                    (unsigned long long)(data_size - max_end));
  return STSA_OK;
}

static stsa_status parse_file(const uint8_t *bytes, size_t len, stsa_st_file *f,
                              stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(len < 8, err, STSA_ERR_FORMAT,
                    "file is %zu bytes, shorter than the 8-byte header "
                    "length prefix",
                    len);
  uint64_t n = load_le64(bytes);
  /* A header length that cannot be right, with no '{' opening a JSON header
   * at byte 8, means another kind of file rather than a damaged one. */
  STSA_IO_RETURN_IF((n > STSA_ST_MAX_HEADER || n > len - 8) &&
                        (len == 8 || bytes[8] != '{'),
                    err, STSA_ERR_FORMAT,
                    "not a safetensors file: its first 8 bytes give a header "
                    "length of %llu (%s) and no JSON header starts at byte 8",
                    (unsigned long long)n,
                    n > STSA_ST_MAX_HEADER ? "above the limit" : "longer than the file");
  STSA_IO_RETURN_IF(n > STSA_ST_MAX_HEADER, err, STSA_ERR_FORMAT,
                    "header length %llu exceeds the limit of %llu bytes",
                    (unsigned long long)n, (unsigned long long)STSA_ST_MAX_HEADER);
  STSA_IO_RETURN_IF(n > len - 8, err, STSA_ERR_FORMAT,
                    "header length %llu exceeds the %zu bytes after the "
                    "8-byte prefix",
                    (unsigned long long)n, len - 8);
  const uint8_t *hdr = bytes + 8;
  size_t bad;
  STSA_IO_RETURN_IF(!stsa_io_utf8_valid(hdr, (size_t)n, &bad), err, STSA_ERR_FORMAT,
                    "header is not valid UTF-8: byte 0x%02x at header "
                    "offset %zu",
                    hdr[bad], bad);
  json_error_t je;
  json_t *root = json_loadb((const char *)hdr, (size_t)n, JSON_REJECT_DUPLICATES, &je);
  STSA_IO_RETURN_IF(!root, err, STSA_ERR_FORMAT,
                    "header is not valid JSON: %s (header byte %d)", je.text,
                    je.position);
  stsa_status st = STSA_OK;
  if (!json_is_object(root)) {
    st = stsa_io_fail(err, STSA_ERR_FORMAT, "header must be a JSON object, found %s",
                      json_type_name(root));
    goto done;
  }
  st = alloc_tables(root, f, err);
  if (st != STSA_OK)
    goto done;

  uint64_t data_size = (uint64_t)(len - 8) - n;
  size_t pos = 0;
  for (void *it = json_object_iter(root); it && st == STSA_OK;
       it = json_object_iter_next(root, it)) {
    const char *k = json_object_iter_key(it);
    size_t kn = json_object_iter_key_len(it);
    const json_t *v = json_object_iter_value(it);
    if (strcmp(k, STSA_ST_META_KEY) == 0) {
      st = parse_metadata(v, f, f->strings, &pos, err);
      continue;
    }
    char qn[80];
    stsa_io_quote(qn, sizeof qn, k, kn);
    if (kn == 0) {
      st = stsa_io_fail(err, STSA_ERR_FORMAT,
                        "tensor name is empty (entry %zu of the header)", f->count);
      break;
    }
    if (!stsa_io_text_ok(k, kn)) {
      st = stsa_io_fail(err, STSA_ERR_FORMAT,
                        "tensor %s: name holds a NUL byte or invalid UTF-8", qn);
      break;
    }
    st_entry *e = &f->entries[f->count];
    st = parse_entry(v, qn, data_size, e, err);
    if (st == STSA_OK) {
      e->t.name = arena_put(f->strings, &pos, k, kn);
      e->order = f->count++;
    }
  }
  if (st == STSA_OK)
    st = check_layout(f, data_size, err);
  if (st == STSA_OK) {
    const uint8_t *data = hdr + n;
    for (size_t i = 0; i < f->count; i++) {
      f->entries[i].t.data = data + f->entries[i].begin;
      f->by_name[i] = &f->entries[i];
    }
    qsort(f->by_name, f->count, sizeof *f->by_name, cmp_name);
  }
done:
  json_decref(root);
  return st;
}

/* ---- reader: public ------------------------------------------------------ */

static stsa_status open_memory(const void *bytes, size_t len, stsa_st_file **out,
                               stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!out, err, STSA_ERR_NULL_ARG, "out is NULL");
  *out = NULL;
  STSA_IO_RETURN_IF(!bytes && len > 0, err, STSA_ERR_NULL_ARG,
                    "bytes is NULL but len is %zu", len);
  stsa_st_file *f = calloc(1, sizeof *f);
  STSA_IO_RETURN_IF(!f, err, STSA_ERR_OUT_OF_MEMORY, "out of memory for the file object");
  stsa_status st = parse_file(bytes, len, f, err);
  if (st != STSA_OK) {
    stsa_st_close(f);
    return st;
  }
  *out = f;
  return STSA_OK;
}

static stsa_status open_path(const char *path, stsa_st_file **out, stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!path || !out, err, STSA_ERR_NULL_ARG,
                    "path and out must not be NULL");
  *out = NULL;
  stsa_io_map map;
  STSA_IO_TRY(stsa_io_map_file(path, &map, err));
  stsa_status st = open_memory(map.bytes, map.len, out, err);
  if (st != STSA_OK) {
    stsa_io_unmap(&map);
    return st;
  }
  (*out)->map = map; /* the views point into it; unmapped on close */
  return STSA_OK;
}

void stsa_st_close(stsa_st_file *f) {
  if (!f)
    return;
  stsa_io_unmap(&f->map);
  free(f->entries);
  free(f->by_name);
  free(f->meta);
  free(f->strings);
  free(f);
}

size_t stsa_st_count(const stsa_st_file *f) { return f ? f->count : 0; }

const stsa_io_tensor *stsa_st_tensor(const stsa_st_file *f, size_t i) {
  return f && i < f->count ? &f->entries[i].t : NULL;
}

const stsa_io_tensor *stsa_st_find(const stsa_st_file *f, const char *name) {
  if (!f || !name)
    return NULL;
  size_t lo = 0, hi = f->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name, f->by_name[mid]->t.name);
    if (c == 0)
      return &f->by_name[mid]->t;
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

size_t stsa_st_metadata_count(const stsa_st_file *f) { return f ? f->meta_count : 0; }

const stsa_st_meta *stsa_st_metadata(const stsa_st_file *f, size_t i) {
  return f && i < f->meta_count ? &f->meta[i] : NULL;
}

const char *stsa_st_metadata_get(const stsa_st_file *f, const char *key) {
  if (!f || !key)
    return NULL;
  for (size_t i = 0; i < f->meta_count; i++)
    if (strcmp(f->meta[i].key, key) == 0)
      return f->meta[i].value;
  return NULL;
}

/* ---- the callers' message buffers ---------------------------------------- */

stsa_status stsa_st_open_memory(const void *bytes, size_t len, stsa_st_file **out,
                                char *err, size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, open_memory(bytes, len, out, &e), err, err_len);
}

stsa_status stsa_st_open(const char *path, stsa_st_file **out, char *err,
                         size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, open_path(path, out, &e), err, err_len);
}
