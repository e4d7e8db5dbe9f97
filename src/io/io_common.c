/*
 * io_common.c — quoting for messages, overflow-safe sizes, UTF-8 validation,
 * read-only file mapping and atomic (temp + fsync + rename) writes.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/io_common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *stsa_io_quote(char *buf, size_t buf_len, const char *s, size_t n) {
  /* Valid UTF-8 passes through (names in other scripts stay readable);
   * otherwise every byte >= 0x80 is escaped so the message stays UTF-8. */
  int raw_utf8 = stsa_io_utf8_valid((const uint8_t *)s, n, NULL);
  /* Room after the limit: an escape (4) or the rest of a UTF-8 sequence
   * (3), "...", the closing quote and the NUL. */
  size_t o = 0, limit = buf_len - 12;
  buf[o++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    int continuation = raw_utf8 && (c & 0xc0) == 0x80;
    if (o >= limit && !continuation) { /* cut only between characters */
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    if (c < 0x20 || c == 0x7f || (c >= 0x80 && !raw_utf8)) {
      snprintf(buf + o, 5, "\\x%02x", c);
      o += 4;
    } else if (c == '"' || c == '\\') {
      buf[o++] = '\\';
      buf[o++] = (char)c;
    } else {
      buf[o++] = (char)c;
    }
  }
  buf[o++] = '"';
  buf[o] = '\0';
  return buf;
}

const char *stsa_io_shape_str(char *buf, size_t buf_len, int rank, const int64_t *shape) {
  size_t o = 0;
  buf[o++] = '[';
  buf[o] = '\0';
  for (int i = 0; i < rank; i++) {
    char num[32];
    int k = snprintf(num, sizeof num, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < 0 || o + (size_t)k + 5 >= buf_len) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    memcpy(buf + o, num, (size_t)k);
    o += (size_t)k;
  }
  buf[o++] = ']';
  buf[o] = '\0';
  return buf;
}

int stsa_io_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  if (a != 0 && b > UINT64_MAX / a)
    return 0;
  *out = a * b;
  return 1;
}

int stsa_io_tensor_bytes(int rank, const int64_t *shape, size_t elem_size,
                         uint64_t *out) {
  uint64_t total = elem_size;
  for (int i = 0; i < rank; i++) {
    if (shape[i] == 0) {
      *out = 0;
      return 1;
    }
  }
  for (int i = 0; i < rank; i++) {
    if (!stsa_io_mul_u64(total, (uint64_t)shape[i], &total))
      return 0;
  }
  if (total > (uint64_t)SIZE_MAX)
    return 0;
  *out = total;
  return 1;
}

int stsa_io_utf8_valid(const uint8_t *s, size_t n, size_t *bad_at) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1fu, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0fu, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07u, min = 0x10000;
    } else {
      goto bad;
    }
    if (n - i < len)
      goto bad;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80)
        goto bad;
      cp = (cp << 6) | (s[i + k] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      goto bad;
    i += len;
  }
  return 1;
bad:
  if (bad_at)
    *bad_at = i;
  return 0;
}

/* jansson already guarantees both for what it parses; this keeps the
 * guarantee local and explicit, and checks what callers hand the writer. */
int stsa_io_text_ok(const char *s, size_t n) {
  return memchr(s, '\0', n) == NULL && stsa_io_utf8_valid((const uint8_t *)s, n, NULL);
}

/* ---- mapping ------------------------------------------------------------- */

/* "cannot <what> "<path>": <reason>". strerror_r (XSI form, as selected by
 * _POSIX_C_SOURCE) because plain strerror may use a static buffer. */
static stsa_status sys_fail(stsa_io_errbuf *err, int e, const char *what,
                            const char *path) {
  char reason[128];
  if (strerror_r(e, reason, sizeof reason) != 0)
    snprintf(reason, sizeof reason, "errno %d", e);
  return stsa_io_fail(err, STSA_ERR_IO, "cannot %s \"%s\": %s", what, path, reason);
}

stsa_status stsa_io_map_file(const char *path, stsa_io_map *m, stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!path || !m, err, STSA_ERR_NULL_ARG,
                    "path and output must not be NULL");
  memset(m, 0, sizeof *m);
  /* O_NONBLOCK: opening a FIFO would otherwise block until a writer comes;
   * it is refused just below, like every file that is not a regular one. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return sys_fail(err, errno, "open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return sys_fail(err, e, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return stsa_io_fail(err, STSA_ERR_IO, "\"%s\" is not a regular file", path);
  }
  if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
    close(fd);
    return stsa_io_fail(err, STSA_ERR_IO, "\"%s\" is too large to map", path);
  }
  size_t len = (size_t)st.st_size;
  if (len > 0) { /* mmap rejects a zero length; an empty file maps to NULL */
    void *addr = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      int e = errno;
      close(fd);
      return sys_fail(err, e, "map", path);
    }
    m->addr_ = addr;
    m->bytes = addr;
  }
  m->len = len;
  close(fd); /* the mapping keeps its own reference to the file */
  return STSA_OK;
}

void stsa_io_unmap(stsa_io_map *m) {
  if (m && m->addr_)
    munmap(m->addr_, m->len);
  if (m)
    memset(m, 0, sizeof *m);
}

/* ---- atomic write -------------------------------------------------------- */

static stsa_status write_all(int fd, const void *data, size_t len, const char *tmp,
                             stsa_io_errbuf *err) {
  const char *p = data;
  while (len > 0) {
    /* Linux writes at most ~2 GiB per call; ask for 1 GiB at a time. */
    size_t want = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
    ssize_t k = write(fd, p, want);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return sys_fail(err, errno, "write", tmp);
    }
    STSA_IO_RETURN_IF(k == 0, err, STSA_ERR_IO, "cannot write \"%s\": no progress", tmp);
    p += k;
    len -= (size_t)k;
  }
  return STSA_OK;
}

/* Creates a fresh temp file next to path. mkstemp would do, but it forces
 * mode 0600; O_EXCL with 0666 lets the umask decide like a plain fopen. The
 * suffix mixes time, pid and a stack address; O_EXCL makes clashes safe. */
static int open_temp(const char *path, char *tmp, size_t tmp_len) {
  static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
               ((uint64_t)getpid() << 17) ^ (uint64_t)(uintptr_t)&ts;
  for (int attempt = 0; attempt < 100; attempt++) {
    x += 0x9e3779b97f4a7c15ull; /* splitmix64 step */
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    char suffix[7];
    for (int i = 0; i < 6; i++, z /= 62)
      suffix[i] = alphabet[z % 62];
    suffix[6] = '\0';
    snprintf(tmp, tmp_len, "%s.tmp.%s", path, suffix);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  errno = EEXIST;
  return -1;
}

/* fsync the folder holding path so the rename itself is durable. Best
 * effort: the data is already safe and the rename done, and some file
 * systems refuse fsync on folders, so a failure here is not reported. */
static void sync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir;
  if (!slash) {
    dir = malloc(2);
    if (dir)
      memcpy(dir, ".", 2);
  } else {
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    dir = malloc(n + 1);
    if (dir) {
      memcpy(dir, path, n);
      dir[n] = '\0';
    }
  }
  if (!dir)
    return;
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

stsa_status stsa_io_write_file(const char *path, const stsa_io_chunk *chunks,
                               size_t count, stsa_io_errbuf *err) {
  STSA_IO_RETURN_IF(!path || (count > 0 && !chunks), err, STSA_ERR_NULL_ARG,
                    "path and chunks must not be NULL");
  STSA_IO_RETURN_IF(path[0] == '\0', err, STSA_ERR_IO, "empty path");
  size_t tmp_len = strlen(path) + sizeof ".tmp.XXXXXX";
  char *tmp = malloc(tmp_len);
  STSA_IO_RETURN_IF(!tmp, err, STSA_ERR_OUT_OF_MEMORY,
                    "out of memory for a temp file name");
  int fd = open_temp(path, tmp, tmp_len);
  if (fd < 0) {
    stsa_status st = sys_fail(err, errno, "create temp file", tmp);
    free(tmp);
    return st;
  }
  stsa_status st = STSA_OK;
  for (size_t i = 0; i < count && st == STSA_OK; i++)
    if (chunks[i].len > 0)
      st = write_all(fd, chunks[i].data, chunks[i].len, tmp, err);
  if (st == STSA_OK && fsync(fd) != 0)
    st = sys_fail(err, errno, "fsync", tmp);
  /* close() can report a deferred write error (NFS), so it is checked. */
  if (close(fd) != 0 && st == STSA_OK)
    st = sys_fail(err, errno, "close", tmp);
  if (st == STSA_OK && rename(tmp, path) != 0)
    st = sys_fail(err, errno, "rename temp file to", path);
  if (st != STSA_OK)
    unlink(tmp);
  else
    sync_parent(path);
  free(tmp);
  return st;
}

stsa_status stsa_io_atomic_write(const char *path, const stsa_io_chunk *chunks,
                                 size_t count, char *err, size_t err_len) {
  stsa_io_errbuf e = {""};
  return stsa_io_err_copy(&e, stsa_io_write_file(path, chunks, count, &e), err, err_len);
}
