/* workspace.c — see workspace.h. */
#include "core/workspace.h"

#include <stdlib.h>

void *stsa_workspace_get(stsa_workspace *ws, size_t bytes) {
  if (ws->mem && ws->bytes >= bytes)
    return ws->mem;
  size_t rounded = (bytes + 63) / 64 * 64;
  void *mem = aligned_alloc(64, rounded ? rounded : 64);
  if (!mem)
    return NULL;
  free(ws->mem);
  ws->mem = mem;
  ws->bytes = rounded;
  return mem;
}

void stsa_workspace_release(stsa_workspace *ws) {
  free(ws->mem);
  ws->mem = NULL;
  ws->bytes = 0;
}
