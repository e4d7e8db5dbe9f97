/*
 * workspace.h — a grow-only, 64-byte aligned block a context keeps between
 * calls, so that large scratch (packed K/V: tens of MB) is not mapped,
 * faulted in and zeroed by the kernel again on every call.
 */
#ifndef STSA_CORE_WORKSPACE_H
#define STSA_CORE_WORKSPACE_H

#include <stddef.h>

typedef struct stsa_workspace {
  void *mem;
  size_t bytes;
} stsa_workspace;

/* At least `bytes` bytes (contents undefined), or NULL when out of memory
 * (the old block is kept then). */
void *stsa_workspace_get(stsa_workspace *ws, size_t bytes);
void stsa_workspace_release(stsa_workspace *ws);

#endif
