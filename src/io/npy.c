/*
 * npy.c — strict .npy reader and atomic writer for F32/F16 arrays.
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.0, u32 LE
 * for 2.0/3.0), then the header: a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw data.
 * The header is parsed by a small recursive-descent parser that accepts
 * exactly that form, never by evaluating Python.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_common.h"
#include "stsa_io.h"

static const uint8_t k_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* numpy's descr of each dtype, read and written; bfloat16 has none. */
static const char *const k_descr[STSA_DTYPE_COUNT_] = {
    [STSA_F32] = "<f4",
    [STSA_F16] = "<f2",
    [STSA_BF16] = NULL,
};

/* ---- header dict parser --------------------------------------------------- */

typedef struct npy_lex {
  const char *s;
  size_t n, i;
  stsa_io_errbuf *err;
} npy_lex;

static void skip_ws(npy_lex *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t'))
    p->i++;
}

/* Describes the byte at the cursor for messages: 'x', "end of header", or
 * a hex code for non-printable bytes. */
static const char *found_str(const npy_lex *p, char *buf, size_t len) {
  if (p->i >= p->n)
    return "end of header";
  unsigned char c = (unsigned char)p->s[p->i];
  if (c == '\n')
    snprintf(buf, len, "a newline");
  else if (c >= 0x20 && c < 0x7f)
    snprintf(buf, len, "'%c'", c);
  else
    snprintf(buf, len, "byte 0x%02x", c);
  return buf;
}

static stsa_status syntax(npy_lex *p, const char *expected) {
  char f[32];
  return stsa_io_fail(p->err, STSA_ERR_FORMAT,
                      "header: expected %s at offset %zu, found %s", expected, p->i,
                      found_str(p, f, sizeof f));
}

static stsa_status expect(npy_lex *p, char c, const char *what) {
  skip_ws(p);
  if (p->i >= p->n || p->s[p->i] != c)
    return syntax(p, what);
  p->i++;
  return STSA_OK;
}

/* A '...' or "..." literal without escapes, at most cap-1 bytes long. */
static stsa_status parse_str(npy_lex *p, char *out, size_t cap, const char *what) {
  skip_ws(p);
  if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
    return syntax(p, what);
  char q = p->s[p->i++];
  size_t start = p->i;
  while (p->i < p->n && p->s[p->i] != q) {
    /* No escapes and no control bytes: a NUL would let "<f4\0x" pass as
     * "<f4" through strcmp. */
    unsigned char c = (unsigned char)p->s[p->i];
    STSA_IO_RETURN_IF(c == '\\' || c < 0x20 || c == 0x7f, p->err, STSA_ERR_FORMAT,
                      "header: unsupported %s 0x%02x inside a string at "
                      "offset %zu",
                      c == '\\' ? "backslash escape" : "control byte", c, p->i);
    p->i++;
  }
  STSA_IO_RETURN_IF(p->i >= p->n, p->err, STSA_ERR_FORMAT,
                    "header: unterminated string starting at offset %zu", start - 1);
  size_t len = p->i - start;
  p->i++; /* closing quote */
  STSA_IO_RETURN_IF(len >= cap, p->err, STSA_ERR_FORMAT,
                    "header: %s at offset %zu is too long (%zu bytes)", what, start - 1,
                    len);
  memcpy(out, p->s + start, len);
  out[len] = '\0';
  return STSA_OK;
}

static stsa_status parse_bool(npy_lex *p, int *out) {
  skip_ws(p);
  size_t left = p->n - p->i;
  if (left >= 4 && memcmp(p->s + p->i, "True", 4) == 0) {
    *out = 1, p->i += 4;
  } else if (left >= 5 && memcmp(p->s + p->i, "False", 5) == 0) {
    *out = 0, p->i += 5;
  } else {
    return syntax(p, "True or False for 'fortran_order'");
  }
  return STSA_OK;
}

/* One dim: an optional '-' and decimal digits without leading zeros. */
static stsa_status parse_dim(npy_lex *p, int index, int64_t *out) {
  skip_ws(p);
  size_t start = p->i;
  int neg = p->i < p->n && p->s[p->i] == '-';
  if (neg)
    p->i++;
  if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
    return syntax(p, "an integer in 'shape'");
  if (p->s[p->i] == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' &&
      p->s[p->i + 1] <= '9')
    return stsa_io_fail(p->err, STSA_ERR_FORMAT,
                        "header: shape[%d] has a leading zero at offset %zu", index,
                        start);
  uint64_t v = 0;
  int overflow = 0;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
    unsigned digit = (unsigned)(p->s[p->i++] - '0');
    if (v > ((uint64_t)INT64_MAX - digit) / 10)
      overflow = 1;
    else
      v = v * 10 + digit;
  }
  int len = (int)(p->i - start);
  STSA_IO_RETURN_IF(overflow, p->err, STSA_ERR_BAD_SHAPE,
                    "header: shape[%d] = %.*s does not fit in 64 bits", index,
                    len > 40 ? 40 : len, p->s + start);
  STSA_IO_RETURN_IF(neg && v != 0, p->err, STSA_ERR_BAD_SHAPE,
                    "header: shape[%d] is negative (%.*s)", index, len, p->s + start);
  *out = (int64_t)v;
  return STSA_OK;
}

/* "(" [dim ("," dim)* [","]] ")"; a single dim needs its comma as in Python,
 * since "(3)" is the integer 3, not a tuple. */
static stsa_status parse_shape(npy_lex *p, int *rank, int64_t *shape) {
  stsa_status st = expect(p, '(', "'(' starting the 'shape' tuple");
  int n = 0, comma = 0;
  skip_ws(p);
  while (st == STSA_OK && p->i < p->n && p->s[p->i] != ')') {
    STSA_IO_RETURN_IF(n == STSA_IO_MAX_RANK, p->err, STSA_ERR_BAD_SHAPE,
                      "header: shape has more than %d dims", STSA_IO_MAX_RANK);
    STSA_IO_TRY(parse_dim(p, n, &shape[n]));
    n++;
    skip_ws(p);
    comma = p->i < p->n && p->s[p->i] == ',';
    if (comma) {
      p->i++;
      skip_ws(p);
    } else if (p->i >= p->n || p->s[p->i] != ')') {
      return syntax(p, "',' or ')' in 'shape'");
    }
  }
  if (st == STSA_OK)
    st = expect(p, ')', "')' closing the 'shape' tuple");
  STSA_IO_RETURN_IF(st == STSA_OK && n == 1 && !comma, p->err, STSA_ERR_FORMAT,
                    "header: 'shape' (%lld) is not a tuple; expected "
                    "(%lld,)",
                    (long long)shape[0], (long long)shape[0]);
  *rank = n;
  return st;
}

typedef struct npy_header {
  char descr[32];
  int fortran;
  int rank;
  int64_t shape[STSA_IO_MAX_RANK];
} npy_header;

/* Parses the dict; p->n excludes the final '\n'. */
static stsa_status parse_dict(npy_lex *p, npy_header *h) {
  int seen[3] = {0, 0, 0};
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  stsa_status st = expect(p, '{', "'{' starting the header dict");
  while (st == STSA_OK) {
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == '}')
      break;
    char key[32];
    STSA_IO_TRY(parse_str(p, key, sizeof key, "a quoted key or '}'"));
    int k = 0;
    while (k < 3 && strcmp(key, keys[k]) != 0)
      k++;
    char qk[48];
    stsa_io_quote(qk, sizeof qk, key, strlen(key));
    STSA_IO_RETURN_IF(k == 3, p->err, STSA_ERR_FORMAT,
                      "header: unknown key %s (expected 'descr', "
                      "'fortran_order', 'shape')",
                      qk);
    STSA_IO_RETURN_IF(seen[k]++, p->err, STSA_ERR_FORMAT, "header: duplicate key %s", qk);
    st = expect(p, ':', "':' after a key");
    skip_ws(p);
    if (st == STSA_OK && k == 0) {
      STSA_IO_RETURN_IF(p->i < p->n && (p->s[p->i] == '[' || p->s[p->i] == '{'), p->err,
                        STSA_ERR_BAD_DTYPE,
                        "header: structured dtypes are not supported "
                        "(descr is a list)");
      st = parse_str(p, h->descr, sizeof h->descr, "a quoted 'descr'");
    } else if (st == STSA_OK && k == 1) {
      st = parse_bool(p, &h->fortran);
    } else if (st == STSA_OK) {
      st = parse_shape(p, &h->rank, h->shape);
    }
    if (st != STSA_OK)
      return st;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',')
      p->i++;
    else if (p->i >= p->n || p->s[p->i] != '}')
      return syntax(p, "',' or '}' after a value");
  }
  STSA_IO_TRY(st);
  STSA_IO_TRY(expect(p, '}', "'}' closing the header dict"));
  /* numpy pads with spaces before the final '\n'. */
  while (p->i < p->n && p->s[p->i] == ' ')
    p->i++;
  if (p->i < p->n)
    return syntax(p, "only space padding after the header dict");
  for (int k = 0; k < 3; k++)
    STSA_IO_RETURN_IF(!seen[k], p->err, STSA_ERR_FORMAT, "header has no '%s' key",
                      keys[k]);
  return STSA_OK;
}

static stsa_status check_descr(const npy_header *h, stsa_dtype *dt, stsa_io_errbuf *err) {
  const char *d = h->descr;
  for (int i = 0; i < STSA_DTYPE_COUNT_; i++)
    if (k_descr[i] && strcmp(d, k_descr[i]) == 0) {
      *dt = (stsa_dtype)i;
      return STSA_OK;
    }
  char q[48];
  stsa_io_quote(q, sizeof q, d, strlen(d));
  STSA_IO_RETURN_IF(d[0] == '>', err, STSA_ERR_BAD_DTYPE,
                    "descr %s: big-endian data is not supported (expected "
                    "'<f4' or '<f2')",
                    q);
  const char *kind = d[0] == '<' || d[0] == '|' || d[0] == '=' ? d + 1 : d;
  STSA_IO_RETURN_IF(kind[0] == 'O', err, STSA_ERR_BAD_DTYPE,
                    "descr %s: object arrays are not supported", q);
  return stsa_io_fail(err, STSA_ERR_BAD_DTYPE,
                      "descr %s is not supported (expected '<f4' for F32 or "
                      "'<f2' for F16)",
                      q);
}

typedef struct npy_info {
  stsa_dtype dtype;
  int rank;
  int64_t shape[STSA_IO_MAX_RANK];
  size_t data_off, nbytes;
} npy_info;

/* Validates a whole .npy image held in b[0..len). */
static stsa_status parse_npy(const uint8_t *b, size_t len, npy_info *info,
                             stsa_io_errbuf *err) {
  const size_t head = len < 6 ? len : 6;
  if (head && memcmp(b, k_magic, head) != 0) {
    char got[32] = "";
    for (size_t i = 0; i < head; i++)
      snprintf(got + 4 * i, sizeof got - 4 * i, "\\x%02x", b[i]);
    return stsa_io_fail(err, STSA_ERR_FORMAT,
                        "not a .npy file: it starts with %s, not the magic "
                        "\\x93NUMPY",
                        got);
  }
  STSA_IO_RETURN_IF(len < 8, err, STSA_ERR_FORMAT,
                    "file is %zu bytes, shorter than the 8-byte magic "
                    "and version",
                    len);
  unsigned major = b[6], minor = b[7];
  STSA_IO_RETURN_IF(major < 1 || major > 3 || minor != 0, err, STSA_ERR_FORMAT,
                    "unsupported .npy version %u.%u (expected 1.0, 2.0 or "
                    "3.0)",
                    major, minor);
  size_t pre = major == 1 ? 10 : 12;
  STSA_IO_RETURN_IF(len < pre, err, STSA_ERR_FORMAT,
                    "file is %zu bytes, too short for the version %u.0 "
                    "header length",
                    len, major);
  uint64_t hl = (uint64_t)b[8] | (uint64_t)b[9] << 8;
  if (major > 1)
    hl |= (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
  STSA_IO_RETURN_IF(hl > STSA_NPY_MAX_HEADER, err, STSA_ERR_FORMAT,
                    "header length %llu exceeds the limit of %llu bytes",
                    (unsigned long long)hl, (unsigned long long)STSA_NPY_MAX_HEADER);
  STSA_IO_RETURN_IF(hl > len - pre, err, STSA_ERR_FORMAT,
                    "header is truncated: length field says %llu bytes "
                    "but only %zu follow",
                    (unsigned long long)hl, len - pre);
  const char *hdr = (const char *)b + pre;
  STSA_IO_RETURN_IF(hl == 0 || hdr[hl - 1] != '\n', err, STSA_ERR_FORMAT,
                    "header does not end with '\\n'");
  size_t bad;
  STSA_IO_RETURN_IF(major == 3 && !stsa_io_utf8_valid((const uint8_t *)hdr, hl, &bad),
                    err, STSA_ERR_FORMAT,
                    "version 3.0 header is not valid UTF-8 at offset %zu", bad);

  npy_header h;
  memset(&h, 0, sizeof h);
  npy_lex p = {hdr, (size_t)hl - 1, 0, err};
  STSA_IO_TRY(parse_dict(&p, &h));
  STSA_IO_TRY(check_descr(&h, &info->dtype, err));
  STSA_IO_RETURN_IF(h.fortran, err, STSA_ERR_FORMAT,
                    "Fortran-order arrays are not supported; save with "
                    "np.ascontiguousarray");
  char shp[96];
  stsa_io_shape_str(shp, sizeof shp, h.rank, h.shape);
  uint64_t need;
  STSA_IO_RETURN_IF(
      !stsa_io_tensor_bytes(h.rank, h.shape, stsa_dtype_size(info->dtype), &need), err,
      STSA_ERR_BAD_SHAPE, "shape %s x %s has a byte size that overflows", shp, h.descr);
  size_t have = len - pre - (size_t)hl;
  STSA_IO_RETURN_IF(have < need, err, STSA_ERR_FORMAT,
                    "data is truncated: shape %s x %s needs %llu bytes but "
                    "the file has %zu after the header",
                    shp, h.descr, (unsigned long long)need, have);
  STSA_IO_RETURN_IF(have > need, err, STSA_ERR_FORMAT,
                    "%llu trailing bytes after the data: shape %s x %s "
                    "needs %llu bytes but the file has %zu after the "
                    "header",
                    (unsigned long long)(have - need), shp, h.descr,
                    (unsigned long long)need, have);
  info->rank = h.rank;
  memcpy(info->shape, h.shape, sizeof h.shape);
  info->data_off = pre + (size_t)hl;
  info->nbytes = (size_t)need;
  return STSA_OK;
}

/* ---- reader: public ------------------------------------------------------ */

static stsa_status read_memory(const void *bytes, size_t len, stsa_npy_array *out,
                               stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!out, err, STSA_ERR_NULL_ARG, "out is NULL");
  memset(out, 0, sizeof *out);
  STSA_IO_RETURN_IF(!bytes && len > 0, err, STSA_ERR_NULL_ARG,
                    "bytes is NULL but len is %zu", len);
  npy_info info;
  memset(&info, 0, sizeof info);
  STSA_IO_TRY(parse_npy(bytes, len, &info, err));
  /* At least one byte so that data is non-NULL even for an empty array. */
  void *data = malloc(info.nbytes ? info.nbytes : 1);
  STSA_IO_RETURN_IF(!data, err, STSA_ERR_OUT_OF_MEMORY,
                    "out of memory for %zu bytes of data", info.nbytes);
  if (info.nbytes)
    memcpy(data, (const uint8_t *)bytes + info.data_off, info.nbytes);
  out->dtype = info.dtype;
  out->rank = info.rank;
  memcpy(out->shape, info.shape, sizeof info.shape);
  out->data = data;
  out->nbytes = info.nbytes;
  return STSA_OK;
}

static stsa_status read_path(const char *path, stsa_npy_array *out, stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!path || !out, err, STSA_ERR_NULL_ARG,
                    "path and out must not be NULL");
  memset(out, 0, sizeof *out);
  stsa_io_map map;
  STSA_IO_TRY(stsa_io_map_file(path, &map, err));
  /* An empty file maps to NULL with len 0; read_memory reports it short. */
  stsa_status st = read_memory(map.bytes, map.len, out, err);
  stsa_io_unmap(&map);
  return st;
}

void stsa_npy_free(stsa_npy_array *a) {
  if (!a)
    return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* ---- writer -------------------------------------------------------------- */

/* Validates the array and builds the preamble + header into hdr (malloc'd). */
static stsa_status build_header(stsa_dtype dtype, int rank, const int64_t *shape,
                                const void *data, char **hdr, size_t *hdr_len,
                                size_t *nbytes, stsa_io_errbuf *err) {
  *hdr = NULL;
  STSA_IO_RETURN_IF(dtype == STSA_BF16, err, STSA_ERR_BAD_DTYPE,
                    "npy has no bfloat16 type; use safetensors");
  STSA_IO_RETURN_IF((unsigned)dtype >= STSA_DTYPE_COUNT_ || !k_descr[dtype], err,
                    STSA_ERR_BAD_DTYPE, "invalid dtype %d (expected F32 or F16)",
                    (int)dtype);
  STSA_IO_RETURN_IF(rank < 0 || rank > STSA_IO_MAX_RANK, err, STSA_ERR_BAD_SHAPE,
                    "rank %d is outside 0..%d", rank, STSA_IO_MAX_RANK);
  STSA_IO_RETURN_IF(rank > 0 && !shape, err, STSA_ERR_NULL_ARG,
                    "shape is NULL but rank is %d", rank);
  for (int d = 0; d < rank; d++)
    STSA_IO_RETURN_IF(shape[d] < 0, err, STSA_ERR_BAD_SHAPE,
                      "shape[%d] is negative (%lld)", d, (long long)shape[d]);
  uint64_t need;
  STSA_IO_RETURN_IF(!stsa_io_tensor_bytes(rank, shape, stsa_dtype_size(dtype), &need),
                    err, STSA_ERR_BAD_SHAPE, "the byte size of the shape overflows");
  STSA_IO_RETURN_IF(need > 0 && !data, err, STSA_ERR_NULL_ARG, "data is NULL");

  /* The dict exactly as numpy writes it; shape like Python's tuple repr. */
  char dict[400];
  int o = snprintf(dict, sizeof dict,
                   "{'descr': '%s', 'fortran_order': False, 'shape': (", k_descr[dtype]);
  for (int d = 0; d < rank; d++)
    o += snprintf(dict + o, sizeof dict - (size_t)o, "%s%lld", d ? ", " : "",
                  (long long)shape[d]);
  o += snprintf(dict + o, sizeof dict - (size_t)o, "%s), }", rank == 1 ? "," : "");
  /* Preamble + dict + '\n' padded with spaces to a multiple of 64, so data
   * is 64-byte aligned in the file; version 2.0 only if 1.0's u16 is short. */
  size_t dl = (size_t)o, pre = 10;
  size_t total = (pre + dl + 1 + 63) & ~(size_t)63;
  if (total - pre > 0xffff) {
    pre = 12;
    total = (pre + dl + 1 + 63) & ~(size_t)63;
  }
  char *h = malloc(total);
  STSA_IO_RETURN_IF(!h, err, STSA_ERR_OUT_OF_MEMORY, "out of memory for the header");
  size_t hl = total - pre;
  memcpy(h, k_magic, 6);
  h[6] = (char)(pre == 10 ? 1 : 2);
  h[7] = 0;
  for (size_t k = 0; k < pre - 8; k++)
    h[8 + k] = (char)(uint8_t)(hl >> (8 * k));
  memcpy(h + pre, dict, dl);
  memset(h + pre + dl, ' ', total - 1 - pre - dl);
  h[total - 1] = '\n';
  *hdr = h;
  *hdr_len = total;
  *nbytes = (size_t)need;
  return STSA_OK;
}

static stsa_status serialize(stsa_dtype dtype, int rank, const int64_t *shape,
                             const void *data, void **out, size_t *out_len,
                             stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!out || !out_len, err, STSA_ERR_NULL_ARG,
                    "out and out_len must not be NULL");
  *out = NULL;
  *out_len = 0;
  char *hdr;
  size_t hl = 0, nb = 0;
  STSA_IO_TRY(build_header(dtype, rank, shape, data, &hdr, &hl, &nb, err));
  if (nb > SIZE_MAX - hl) {
    free(hdr);
    return stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY,
                        "array of %zu bytes does not fit in memory", nb);
  }
  char *buf = realloc(hdr, hl + nb);
  if (!buf) {
    free(hdr);
    return stsa_io_fail(err, STSA_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes",
                        hl + nb);
  }
  if (nb)
    memcpy(buf + hl, data, nb);
  *out = buf;
  *out_len = hl + nb;
  return STSA_OK;
}

static stsa_status write_path(const char *path, stsa_dtype dtype, int rank,
                              const int64_t *shape, const void *data,
                              stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!path, err, STSA_ERR_NULL_ARG, "path is NULL");
  char *hdr;
  size_t hl = 0, nb = 0;
  STSA_IO_TRY(build_header(dtype, rank, shape, data, &hdr, &hl, &nb, err));
  stsa_io_chunk chunks[2] = {{hdr, hl}, {data, nb}};
  stsa_status st = stsa_io_write_file(path, chunks, 2, err);
  free(hdr);
  return st;
}

/* ---- the callers' message buffers ---------------------------------------- */

stsa_status stsa_npy_read_memory(const void *bytes, size_t len, stsa_npy_array *out,
                                 char *err, size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, read_memory(bytes, len, out, &e), err, err_len);
}

stsa_status stsa_npy_read(const char *path, stsa_npy_array *out, char *err,
                          size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, read_path(path, out, &e), err, err_len);
}

stsa_status stsa_npy_serialize(stsa_dtype dtype, int rank, const int64_t *shape,
                               const void *data, void **out, size_t *out_len, char *err,
                               size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, serialize(dtype, rank, shape, data, out, out_len, &e), err,
                          err_len);
}

stsa_status stsa_npy_write(const char *path, stsa_dtype dtype, int rank,
                           const int64_t *shape, const void *data, char *err,
                           size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, write_path(path, dtype, rank, shape, data, &e), err,
                          err_len);
}
