/*
 * io_error.h — how libstsa_io records a failure (internal): a status code
 * plus a message saying which tensor, which field, what was expected and
 * what was found. libstsa_io is a client of libstsa's public API, so it
 * keeps its own buffer and helpers rather than libstsa's internal ones;
 * only the entry points copy a message into the caller's buffer
 * (stsa_io_err_copy).
 */
#ifndef STSA_IO_ERROR_H
#define STSA_IO_ERROR_H

#include <stddef.h>

#include "stsa.h"

/* 512 bytes: a message may quote a file path, and stsa_io.h promises at
 * most 511 bytes. */
typedef struct stsa_io_errbuf {
  char text[512];
} stsa_io_errbuf;

/* Writes the formatted message into `err` (if not NULL) and returns `code`. */
stsa_status stsa_io_fail(stsa_io_errbuf *err, stsa_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies err's message, or "" when code is STSA_OK, into msg (cut and
 * NUL-terminated; nothing when msg is NULL or msg_len is 0) and returns
 * code, so an entry point reads
 *   stsa_io_errbuf e = {""};
 *   return stsa_io_err_copy(&e, impl(..., &e), msg, msg_len);          */
stsa_status stsa_io_err_copy(const stsa_io_errbuf *err, stsa_status code, char *msg,
                             size_t msg_len);

/* `return`s the failure from the enclosing function when `cond` holds. */
#define STSA_IO_RETURN_IF(cond, err, code, ...)                                          \
  do {                                                                                   \
    if (cond)                                                                            \
      return stsa_io_fail((err), (code), __VA_ARGS__);                                   \
  } while (0)

/* Propagates a non-OK status. */
#define STSA_IO_TRY(expr)                                                                \
  do {                                                                                   \
    stsa_status stsa_io_try_st_ = (expr);                                                \
    if (stsa_io_try_st_ != STSA_OK)                                                      \
      return stsa_io_try_st_;                                                            \
  } while (0)

#endif
