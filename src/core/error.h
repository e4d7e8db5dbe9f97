/*
 * error.h — recording a failure: a status code plus a message saying which
 * argument was wrong and what was expected.
 */
#ifndef STSA_CORE_ERROR_H
#define STSA_CORE_ERROR_H

#include "stsa.h"

/* 512 bytes: a message may quote a file path (io), and the CLI's buffers
 * for io messages are that long too. */
typedef struct stsa_errbuf {
  char text[512];
} stsa_errbuf;

/* Writes the formatted message into `err` (if not NULL) and returns `code`. */
stsa_status stsa_fail(stsa_errbuf *err, stsa_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The boundary to a caller that keeps its own buffer (`char *msg, size_t
 * msg_len`, as the io functions the CLI calls take): copies err's message,
 * or "" when code is STSA_OK, into msg (cut and NUL-terminated; nothing
 * when msg is NULL or msg_len is 0) and returns code, so such an entry
 * point reads
 *   stsa_errbuf e = {""};
 *   return stsa_err_copy(&e, impl(..., &e), msg, msg_len);            */
stsa_status stsa_err_copy(const stsa_errbuf *err, stsa_status code, char *msg,
                          size_t msg_len);

/* A floating value for a message: the fewest significant digits that read
 * back as v (as a float when is_float), so that a refused value never reads
 * as its bound ("1.0000001", where %g writes "1"). The text lives in the
 * returned struct until the end of the full expression that calls it:
 *   STSA_RETURN_IF(bad, err, code, "x = %s, expected ...", stsa_real_str(x, 0).s); */
typedef struct stsa_real_text {
  char s[32];
} stsa_real_text;
stsa_real_text stsa_real_str(double v, int is_float);

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
