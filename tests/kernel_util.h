/*
 * kernel_util.h — what the tests that call a backend's kernel table
 * directly share: the table of a backend, with a check that this machine
 * has it.
 */
#ifndef STSA_TESTS_KERNEL_UTIL_H
#define STSA_TESTS_KERNEL_UTIL_H

#include <string.h>

#include "kernel/dispatch.h"
#include "testutil.h"

/* The kernel table (and id) of `backend`; CHECKs that it resolves. */
static inline stsa_backend_choice tu_choose_backend(stsa_backend backend) {
  stsa_backend_choice choice;
  stsa_errbuf err;
  memset(&choice, 0, sizeof choice);
  CHECK(stsa_backend_choose(backend, &choice, &err) == STSA_OK, "%s", err.text);
  return choice;
}

#endif
