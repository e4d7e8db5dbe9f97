/*
 * test_io_atomic.c — atomic writes of both formats: nothing created in a
 * missing folder, an existing file unchanged by a failing write and
 * replaced by a successful one, no temp file left after a failed rename.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io_util.h"
#include "stsa_io.h"
#include "testutil.h"

static void test_atomic(void) {
  char err[ERR_LEN], path[256], sub[256];
  float d[4] = {1, 2, 3, 4};
  stsa_io_tensor t = {"x", STSA_F32, 1, {4}, d, sizeof d};
  int64_t s4 = 4;

  /* A folder that does not exist: IO error, nothing created. */
  tu_path_in(path, sizeof path, "no/such/dir/x.safetensors");
  CHECK_STATUS(stsa_st_write(path, &t, 1, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "no/such/dir") != NULL, "missing dir message: %s", err);
  CHECK(!tu_exists(path), "file created in a missing folder");
  tu_path_in(path, sizeof path, "no/such/dir/x.npy");
  CHECK_STATUS(stsa_npy_write(path, STSA_F32, 1, &s4, d, err, sizeof err), STSA_ERR_IO);

  /* A failing write leaves an existing file unchanged. */
  tu_path_in(path, sizeof path, "keep.safetensors");
  CHECK_STATUS(stsa_st_write(path, &t, 1, err, sizeof err), STSA_OK);
  size_t len0 = 0, len1 = 0;
  uint8_t *before = tu_slurp(path, &len0);
  stsa_io_tensor bad[2] = {t, t}; /* duplicate names */
  CHECK_STATUS(stsa_st_write(path, bad, 2, err, sizeof err), STSA_ERR_BAD_PARAM);
  uint8_t *after = tu_slurp(path, &len1);
  CHECK(before && after && len0 == len1 && memcmp(before, after, len0) == 0,
        "failed write changed the existing file");
  free(after);
  /* A successful write replaces it. */
  d[0] = 9;
  CHECK_STATUS(stsa_st_write(path, &t, 1, err, sizeof err), STSA_OK);
  after = tu_slurp(path, &len1);
  CHECK(after && len1 == len0 && memcmp(before, after, len0) != 0,
        "successful write did not replace the file");
  free(before);
  free(after);

  tu_path_in(path, sizeof path, "keep.npy");
  CHECK_STATUS(stsa_npy_write(path, STSA_F32, 1, &s4, d, err, sizeof err), STSA_OK);
  before = tu_slurp(path, &len0);
  CHECK_STATUS(stsa_npy_write(path, STSA_BF16, 1, &s4, d, err, sizeof err),
               STSA_ERR_BAD_DTYPE);
  after = tu_slurp(path, &len1);
  CHECK(before && after && len0 == len1 && memcmp(before, after, len0) == 0,
        "failed npy write changed the existing file");
  free(before);
  free(after);

  /* Failure after the temp file exists (rename onto a non-empty folder):
   * IO error, folder intact, temp removed. */
  tu_path_in(sub, sizeof sub, "occupied");
  CHECK(mkdir(sub, 0700) == 0, "mkdir %s", sub);
  tu_path_in(path, sizeof path, "occupied/inner");
  CHECK(tu_spit(path, "x", 1), "spit inner");
  CHECK_STATUS(stsa_st_write(sub, &t, 1, err, sizeof err), STSA_ERR_IO);
  CHECK(strstr(err, "rename") != NULL, "rename message: %s", err);
  CHECK(tu_exists(path), "the folder was clobbered");
  CHECK_STATUS(stsa_npy_write(sub, STSA_F32, 1, &s4, d, err, sizeof err), STSA_ERR_IO);

  CHECK(tu_count_temps() == 0, "%d temp files left in %s", tu_count_temps(), tu_io_dir);
}

int main(void) {
  if (!tu_io_begin())
    return 1;
  test_atomic();
  return tu_io_end("test_io_atomic");
}
