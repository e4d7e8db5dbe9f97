/* status.c — version, status names, dtype facts, error recording. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"

#define STSA_STR2(x) #x
#define STSA_STR(x) STSA_STR2(x)

unsigned stsa_version_number(void) { return STSA_VERSION_NUMBER; }

const char *stsa_version_string(void) {
  return STSA_STR(STSA_VERSION_MAJOR) "." STSA_STR(STSA_VERSION_MINOR) "." STSA_STR(
      STSA_VERSION_PATCH);
}

const char *stsa_status_str(stsa_status status) {
  static const char *const names[STSA_STATUS_COUNT_] = {
      [STSA_OK] = "ok",
      [STSA_ERR_NULL_ARG] = "required argument is NULL",
      [STSA_ERR_BAD_SHAPE] = "invalid shape",
      [STSA_ERR_BAD_DTYPE] = "unsupported dtype",
      [STSA_ERR_BAD_STRIDE] = "invalid strides",
      [STSA_ERR_MISALIGNED] = "misaligned data pointer",
      [STSA_ERR_OVERLAP] = "output overlaps another buffer",
      [STSA_ERR_NONFINITE] = "input contains NaN or Inf",
      [STSA_ERR_OUT_OF_MEMORY] = "out of memory",
      [STSA_ERR_BAD_PARAM] = "invalid parameter",
      [STSA_ERR_UNSUPPORTED] = "unsupported",
      [STSA_ERR_EMPTY_ROW] = "mask leaves a query row with no key",
      [STSA_ERR_IO] = "I/O error",
      [STSA_ERR_FORMAT] = "malformed file",
      [STSA_ERR_BAD_MASK] = "invalid mask",
  };
  return (unsigned)status < STSA_STATUS_COUNT_ && names[status] ? names[status]
                                                                : "unknown";
}

/* One row per dtype: everything the library says about an element type. */
static const struct {
  size_t size;
  const char *name;
} DTYPES[STSA_DTYPE_COUNT_] = {
    [STSA_F32] = {4, "f32"},
    [STSA_F16] = {2, "f16"},
    [STSA_BF16] = {2, "bf16"},
};

size_t stsa_dtype_size(stsa_dtype dtype) {
  return (unsigned)dtype < STSA_DTYPE_COUNT_ ? DTYPES[dtype].size : 0;
}

const char *stsa_dtype_name(stsa_dtype dtype) {
  return (unsigned)dtype < STSA_DTYPE_COUNT_ ? DTYPES[dtype].name : "unknown";
}

stsa_status stsa_fail(stsa_errbuf *err, stsa_status code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
  }
  return code;
}

stsa_status stsa_err_copy(const stsa_errbuf *err, stsa_status code, char *msg,
                          size_t msg_len) {
  if (msg && msg_len > 0)
    snprintf(msg, msg_len, "%s", code == STSA_OK ? "" : err->text);
  return code;
}

stsa_real_text stsa_real_str(double v, int is_float) {
  stsa_real_text t;
  const int most = is_float ? 9 : 17; /* digits that always read back */
  for (int digits = 1;; digits++) {
    snprintf(t.s, sizeof t.s, "%.*g", digits, v);
    if (digits >= most || !isfinite(v))
      break;
    const double back = strtod(t.s, NULL);
    if (is_float ? (float)back == (float)v : back == v)
      break;
  }
  return t;
}
