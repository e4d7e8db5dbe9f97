/* io_util.c — helpers of the tensor file tests (see io_util.h). */
#define _POSIX_C_SOURCE 200809L
#include "io_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

char tu_io_dir[64];

void tu_path_in(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", tu_io_dir, name);
}

void tu_fill_random(void *p, size_t n, uint64_t seed) {
  tu_rng rng = {seed};
  uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)(tu_rng_next(&rng) >> 56);
}

/* Reads a whole file into a malloc'd buffer; NULL if it cannot. */
uint8_t *tu_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
  if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

int tu_spit(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return 0;
  int ok = fwrite(data, 1, len, f) == len;
  return fclose(f) == 0 && ok;
}

int tu_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Number of entries of tu_io_dir whose name contains ".tmp.". */
int tu_count_temps(void) {
  DIR *d = opendir(tu_io_dir);
  int n = 0;
  if (!d)
    return -1;
  for (struct dirent *e; (e = readdir(d));)
    n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0)
      remove_dir(p);
  }
  closedir(d);
  rmdir(dir);
}

/* A safetensors image: 8-byte LE length of json, json, data_len bytes. */
uint8_t *tu_st_image(const char *json, size_t data_len, size_t *len) {
  size_t n = strlen(json);
  uint8_t *b = malloc(8 + n + data_len + 1);
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(b + 8, json, n);
  tu_fill_random(b + 8 + n, data_len, 7);
  *len = 8 + n + data_len;
  return b;
}

/* A .npy image: magic, version, header length field (len of hdr), hdr,
 * data_len bytes. */
uint8_t *tu_npy_image(int major, int minor, const char *hdr, size_t data_len,
                      size_t *len) {
  size_t hl = strlen(hdr), pre = major == 1 ? 10 : 12;
  uint8_t *b = malloc(pre + hl + data_len + 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (uint8_t)major, b[7] = (uint8_t)minor;
  for (size_t k = 8; k < pre; k++)
    b[k] = (uint8_t)(hl >> (8 * (k - 8)));
  memcpy(b + pre, hdr, hl);
  tu_fill_random(b + pre + hl, data_len, 9);
  *len = pre + hl + data_len;
  return b;
}

int tu_io_begin(void) {
  snprintf(tu_io_dir, sizeof tu_io_dir, "/tmp/stsa_test_io.XXXXXX");
  if (!mkdtemp(tu_io_dir)) {
    perror("mkdtemp");
    return 0;
  }
  return 1;
}

int tu_io_end(const char *name) {
  CHECK(tu_count_temps() == 0, "temp files left behind");
  remove_dir(tu_io_dir);
  return tu_finish(name);
}
