/* wait_policy.c — the CLI's OpenMP threads wait without spinning.
 *
 * libgomp's default wait policy keeps an idle worker spinning for a while
 * after each parallel region. On a machine whose cores are busy with other
 * work that costs more than it saves: the spinning thread holds a core that
 * the one running the region's last chunk is waiting for (stsa bench dense
 * --seq 960 --heads 4 --dim 64 with a busy loop on the other core: 2
 * threads slower than 1; passive: faster). libgomp reads OMP_WAIT_POLICY
 * once, when it is loaded, before main, so the tool sets it and starts
 * itself again. It owns its process; the library itself never changes the
 * environment (docs/integration.md says what a host can do). */
#define _POSIX_C_SOURCE 200809L
#include "wait_policy.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

/* Set in the environment of the restarted tool, so it restarts once only. */
#define RESTARTED "STSA_CLI_WAIT_POLICY_SET"

void cli_wait_passive(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv(RESTARTED))
    return; /* the user chose, or this is the restarted tool */
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return; /* no /proc: the default policy stays, nothing else changes */
  self[n] = '\0';
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0 || setenv(RESTARTED, "1", 1) != 0)
    return;
  execv(self, argv);
  /* exec failed (e.g. a foreign binary under QEMU without binfmt): run on as
   * started; only the wait policy differs */
  unsetenv("OMP_WAIT_POLICY");
  unsetenv(RESTARTED);
}

const char *cli_wait_policy(void) {
  const char *policy = getenv("OMP_WAIT_POLICY");
  return policy && *policy ? policy : "default";
}
