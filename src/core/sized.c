/* sized.c — see sized.h. */
#include "core/sized.h"

#include <string.h>

static stsa_status check_size(size_t size, size_t known, const char *type,
                              stsa_errbuf *err) {
  STSA_RETURN_IF(size == 0, err, STSA_ERR_BAD_PARAM,
                 "%s.size is 0: set it to sizeof(%s) (STSA_INIT(%s) does)", type, type,
                 type);
  STSA_RETURN_IF(
      size < known, err, STSA_ERR_BAD_PARAM,
      "%s.size = %zu is smaller than any layout of it this library knows (%zu)", type,
      size, known);
  return STSA_OK;
}

stsa_status stsa_sized_check_out(const void *p, size_t known, const char *type,
                                 stsa_errbuf *err) {
  size_t size;
  memcpy(&size, p, sizeof size);
  return check_size(size, known, type, err);
}

stsa_status stsa_sized_check(const void *p, size_t known, const char *type,
                             stsa_errbuf *err) {
  size_t size;
  memcpy(&size, p, sizeof size);
  STSA_TRY(check_size(size, known, type, err));
  /* a struct grows by a few fields per release; anything far larger is an
   * uninitialised size, whose "extra bytes" must not be read */
  STSA_RETURN_IF(size - known > STSA_SIZED_MAX_GROWTH, err, STSA_ERR_BAD_PARAM,
                 "%s.size = %zu is not the size of any version of it (uninitialised?)",
                 type, size);
  const unsigned char *extra = (const unsigned char *)p + known;
  for (size_t i = 0; i < size - known; i++)
    STSA_RETURN_IF(extra[i] != 0, err, STSA_ERR_UNSUPPORTED,
                   "%s.size = %zu: the caller was built against a newer stsa and sets a "
                   "field this library (%zu bytes) does not have",
                   type, size, known);
  return STSA_OK;
}

void stsa_sized_write(void *dst, const void *src, size_t known) {
  size_t size;
  memcpy(&size, dst, sizeof size);
  const size_t n = size < known ? size : known;
  memcpy((char *)dst + sizeof size, (const char *)src + sizeof size, n - sizeof size);
}

stsa_status stsa_sized_read(void *local, const void *p, size_t first, size_t known,
                            const char *type, stsa_errbuf *err) {
  size_t size;
  memcpy(&size, p, sizeof size);
  const size_t have = size >= first && size < known ? first : known;
  STSA_TRY(stsa_sized_check(p, have, type, err));
  memset(local, 0, known);
  memcpy(local, p, have);
  memcpy(local, &known, sizeof known);
  return STSA_OK;
}
