/*
 * error.h — recording a failure: a status code plus a message saying which
 * argument was wrong and what was expected.
 */
#ifndef STSA_CORE_ERROR_H
#define STSA_CORE_ERROR_H

#include "stsa.h"

typedef struct stsa_errbuf {
  char text[384];
} stsa_errbuf;

/* Writes the formatted message into `err` (if not NULL) and returns `code`. */
stsa_status stsa_fail(stsa_errbuf *err, stsa_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Forgets the previous failure: every entry point taking a context starts
 * with it, so stsa_ctx_last_error never shows a stale message. */
static inline void stsa_err_clear(stsa_errbuf *err) { err->text[0] = '\0'; }

/* `return`s the failure from the enclosing function when `cond` holds. */
#define STSA_RETURN_IF(cond, err, code, ...)                                             \
  do {                                                                                   \
    if (cond)                                                                            \
      return stsa_fail((err), (code), __VA_ARGS__);                                      \
  } while (0)

/* Propagates a non-OK status. */
#define STSA_TRY(expr)                                                                   \
  do {                                                                                   \
    stsa_status stsa_try_st_ = (expr);                                                   \
    if (stsa_try_st_ != STSA_OK)                                                         \
      return stsa_try_st_;                                                               \
  } while (0)

#endif
