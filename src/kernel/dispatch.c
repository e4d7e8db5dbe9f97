/*
 * dispatch.c — the one table of backends: its name, whether this machine
 * runs it, and the ISA entries it lays over the portable kernels. Adding an
 * ISA is one row here plus its own folder (see docs/architecture.md).
 */
#include "kernel/dispatch.h"

#include <stdio.h>
#include <string.h>

static int always(void) { return 1; }

typedef struct backend_row {
  const char *name;
  int (*runs_here)(void);               /* NULL: not in this build */
  void (*override)(stsa_kernels *kern); /* NULL: the portable entries */
  int ref;
} backend_row;

static const backend_row BACKENDS[STSA_BACKEND_COUNT_] = {
    [STSA_BACKEND_AUTO] = {"auto", always, NULL, 0},
    [STSA_BACKEND_REF] = {"ref", always, NULL, 1},
    [STSA_BACKEND_PORTABLE] = {"portable", always, NULL, 0},
#if defined(__x86_64__) || defined(__i386__)
    [STSA_BACKEND_AVX2] = {"avx2", stsa_cpu_has_avx2, stsa_kernels_override_avx2, 0},
    [STSA_BACKEND_AVX512] = {"avx512", stsa_cpu_has_avx512, stsa_kernels_override_avx512,
                             0},
#else
    [STSA_BACKEND_AVX2] = {"avx2", NULL, NULL, 0},
    [STSA_BACKEND_AVX512] = {"avx512", NULL, NULL, 0},
#endif
#if defined(__x86_64__)
    [STSA_BACKEND_AMX] = {"amx", stsa_cpu_has_amx, stsa_kernels_override_amx, 0},
#else
    [STSA_BACKEND_AMX] = {"amx", NULL, NULL, 0},
#endif
#if defined(__aarch64__)
    [STSA_BACKEND_NEON] = {"neon", always, stsa_kernels_override_neon, 0},
#else
    [STSA_BACKEND_NEON] = {"neon", NULL, NULL, 0},
#endif
};

/* AUTO's preference, best first. */
static const stsa_backend AUTO_ORDER[] = {STSA_BACKEND_AMX, STSA_BACKEND_AVX512,
                                          STSA_BACKEND_AVX2, STSA_BACKEND_NEON,
                                          STSA_BACKEND_PORTABLE};

static int available(stsa_backend b) {
  return (unsigned)b < STSA_BACKEND_COUNT_ && BACKENDS[b].runs_here &&
         BACKENDS[b].runs_here();
}

int stsa_backend_available(stsa_backend backend) { return available(backend); }

const char *stsa_backend_name(stsa_backend backend) {
  return (unsigned)backend < STSA_BACKEND_COUNT_ ? BACKENDS[backend].name : "unknown";
}

stsa_backend stsa_backend_from_name(const char *name) {
  int b = 0;
  while (b < STSA_BACKEND_COUNT_ && strcmp(name, BACKENDS[b].name) != 0)
    b++;
  return (stsa_backend)b;
}

const char *stsa_backends_here(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int b = 0; b < STSA_BACKEND_COUNT_ && used < size; b++)
    if (available((stsa_backend)b))
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "",
                               BACKENDS[b].name);
  return buf;
}

stsa_status stsa_backend_choose(stsa_backend requested, stsa_backend_choice *out,
                                stsa_errbuf *err) {
  stsa_backend id = requested;
  if (id == STSA_BACKEND_AUTO)
    for (size_t i = 0; i < sizeof AUTO_ORDER / sizeof AUTO_ORDER[0]; i++)
      if (available(AUTO_ORDER[i])) {
        id = AUTO_ORDER[i];
        break;
      }
  if (!available(id)) {
    char here[96];
    return stsa_fail(err, STSA_ERR_UNSUPPORTED,
                     "backend %s does not run on this machine (it has: %s)",
                     stsa_backend_name(id), stsa_backends_here(here, sizeof here));
  }
  out->id = id;
  out->ref = BACKENDS[id].ref;
  stsa_kernels_init_portable(&out->kern);
  if (BACKENDS[id].override)
    BACKENDS[id].override(&out->kern);
  return STSA_OK;
}
