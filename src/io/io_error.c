/*
 * io_error.c — recording a failure of libstsa_io (io_error.h).
 */
#include "io/io_error.h"

#include <stdarg.h>
#include <stdio.h>

stsa_status stsa_io_fail(stsa_io_errbuf *err, stsa_status code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
  }
  return code;
}

stsa_status stsa_io_err_copy(const stsa_io_errbuf *err, stsa_status code, char *msg,
                             size_t msg_len) {
  if (msg && msg_len > 0)
    snprintf(msg, msg_len, "%s", code == STSA_OK ? "" : err->text);
  return code;
}
