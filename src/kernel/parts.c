/* parts.c — see parts.h. */
#include "kernel/parts.h"

#include <stdint.h>

stsa_status stsa_parts_check(int nth, int ith, const void *ptr, const char *what,
                             stsa_errbuf *err) {
  STSA_RETURN_IF(nth < 1 || nth > STSA_MAX_PARTS || ith < 0 || ith >= nth, err,
                 STSA_ERR_BAD_PARAM,
                 "%s: ith = %d, nth = %d, expected 0 <= ith < nth <= %d", what, ith, nth,
                 STSA_MAX_PARTS);
  STSA_RETURN_IF(!ptr, err, STSA_ERR_NULL_ARG,
                 "%s: the work buffer (or wsize) is NULL; its size comes from the "
                 "matching _wsize function",
                 what);
  return STSA_OK;
}

size_t stsa_parts_wsize(const stsa_work *w, int nth) {
  return 64 + stsa_work_slice_bytes(w) * (size_t)nth;
}

stsa_status stsa_parts_run(const stsa_work *w, int ith, int nth, void *wdata,
                           size_t wsize, const char *what, stsa_errbuf *err) {
  const size_t need = stsa_parts_wsize(w, nth);
  STSA_RETURN_IF(wsize < need, err, STSA_ERR_BAD_PARAM,
                 "%s: the work buffer has %zu bytes but %d parts of this call need %zu "
                 "(ask the matching _wsize function)",
                 what, wsize, nth, need);
  uintptr_t base = ((uintptr_t)wdata + 63) / 64 * 64;
  stsa_work_part(w, ith, nth, (char *)base + stsa_work_slice_bytes(w) * (size_t)ith);
  return STSA_OK;
}
