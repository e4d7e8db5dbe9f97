/*
 * test_dist_oom.c — one rank out of memory in the middle of a ring: the
 * last rank cannot get its ring buffers. Every rank must return
 * STSA_ERR_OUT_OF_MEMORY with the same message, which names that rank and
 * its cause ("rank P-1: dist: out of memory ..."), not an "another rank of
 * the ring failed" of a rank that had its memory; nothing is written, no
 * rank hangs, and the dist works afterwards. Under ring and, on 4 ranks,
 * hybrid with U = 2 (two rings of two).
 *
 * The failure is injected: this program is linked with -Wl,--wrap=malloc
 * (CMakeLists.txt), so the library's malloc calls come here, and while
 * armed, on the failing rank, a malloc of exactly the size of a ring's key
 * buffer (B x the longest ring chunk x the member's heads x D x 4 bytes)
 * returns NULL. Where the linker has no --wrap the test has nothing to do.
 */
#define STSA_EXPERIMENTAL /* stsa_tensor_copy, stsa_workload_generate (dist_testutil.h)  \
                           */
#include "dist_testutil.h"

#ifdef DT_WRAP_MALLOC
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
static size_t dt_fail_size; /* 0: not armed */
static long dt_fail_count;  /* mallocs refused */
void *__wrap_malloc(size_t n) {
  if (dt_fail_size && n == dt_fail_size) {
    dt_fail_count++;
    return NULL;
  }
  return __real_malloc(n);
}
#endif

enum { L = 50, B = 1, H = 4, D = 40 }; /* tokens per rank, batch, heads, head dim */

static void ring_oom(stsa_dist_scheme scheme, int u_degree) {
  stsa_dist *dist = dt_dist(scheme, u_degree, 0);
  if (!dist)
    return;
  const int bad = dt_size - 1;
  dt_set_case("%s U=%d, rank %d out of memory, np%d", stsa_dist_scheme_name(scheme),
              u_degree, bad, dt_size);
  tu_rng rng = {900 + (uint64_t)dt_rank};
  stsa_tensor q = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, L, H, D, 1);
  stsa_tensor k = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, L, H, D, 1);
  stsa_tensor v = tu_random_tensor(&rng, STSA_F32, TU_BSHD, B, L, H, D, 1);
  stsa_tensor out = tu_sentinel_tensor(STSA_F32, TU_BSHD, B, L, H, D);
#ifdef DT_WRAP_MALLOC
  /* equal shards and U dividing H: a member's key buffer of U L tokens of
   * H / U heads is B L H D floats under either scheme */
  dt_fail_count = 0;
  dt_fail_size = dt_rank == bad ? (size_t)(B * L * H * D) * sizeof(float) : 0;
#endif
  stsa_status st = stsa_dist_attention(dist, &q, &k, &v, &out, NULL, NULL);
#ifdef DT_WRAP_MALLOC
  dt_fail_size = 0;
  if (dt_rank == bad)
    DT_CHECK(dt_fail_count > 0, "no allocation of the ring's buffers was refused: the "
                                "injection no longer matches the library");
#endif
  const char *msg = stsa_dist_last_error(dist);
  int lo = (int)st, hi = (int)st;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  DT_CHECK(lo == hi, "ranks returned different statuses (%s .. %s)",
           stsa_status_str((stsa_status)lo), stsa_status_str((stsa_status)hi));
  DT_CHECK(st == STSA_ERR_OUT_OF_MEMORY, "returned %s, expected out of memory (\"%s\")",
           stsa_status_str(st), msg);
  char root[1024] = {0};
  if (dt_rank == 0)
    snprintf(root, sizeof root, "%s", msg);
  MPI_Bcast(root, (int)sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
  DT_CHECK(strcmp(root, msg) == 0, "message \"%s\" here, \"%s\" on rank 0", msg, root);
  char prefix[32];
  snprintf(prefix, sizeof prefix, "rank %d: ", bad);
  DT_CHECK(strncmp(msg, prefix, strlen(prefix)) == 0 && strstr(msg, "out of memory"),
           "message \"%s\" does not name rank %d and its cause (\"%sdist: out of memory "
           "...\")",
           msg, bad, prefix);
  DT_CHECK(tu_is_sentinel(&out) && tu_guard_ok(out.data),
           "the output shard was written by a failed call");
  /* and the same call works afterwards */
  dt_set_case("%s U=%d after a rank ran out of memory, np%d",
              stsa_dist_scheme_name(scheme), u_degree, dt_size);
  st = stsa_dist_attention(dist, &q, &k, &v, &out, NULL, NULL);
  DT_CHECK(dt_all(st == STSA_OK), "returned %s (%s)", stsa_status_str(st),
           stsa_dist_last_error(dist));
  DT_CHECK(!tu_is_sentinel(&out), "output not written");
  tu_free_tensor(&q);
  tu_free_tensor(&k);
  tu_free_tensor(&v);
  tu_free_tensor(&out);
  stsa_dist_free(dist);
}

int main(int argc, char **argv) {
  dt_init(&argc, &argv);
#ifdef DT_WRAP_MALLOC
  if (dt_size >= 2) /* one rank is no ring */
    ring_oom(STSA_DIST_RING, 0);
  if (dt_size == 4)
    ring_oom(STSA_DIST_HYBRID, 2);
#else
  if (dt_rank == 0)
    printf("test_dist_oom: no -Wl,--wrap=malloc here, nothing injected\n");
#endif
  return dt_finish("test_dist_oom");
}
