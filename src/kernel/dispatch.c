/*
 * dispatch.c — the one table of backends. A row says everything about a
 * backend: its name, one line on what it is, whether this machine runs it,
 * the ISA entries it lays over the portable kernels and its rank in AUTO's
 * choice. Every list of backends (the public enumeration, messages, the
 * CLI's usage texts, the Python binding's names) is read from it, so adding
 * an ISA is one row here plus its own folder (see docs/architecture.md).
 */
#include "kernel/dispatch.h"

#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/cpu.h"

static int always(void) { return 1; }

/* An ISA's entry where this build targets the ISA, NULL (not in this
 * build) elsewhere: the name then appears nowhere, so no declaration of a
 * function the build lacks is needed. */
#if defined(__x86_64__) || defined(__i386__)
#define ON_X86(entry) entry
#else
#define ON_X86(entry) NULL
#endif
#if defined(__x86_64__)
#define ON_X86_64(entry) entry
#else
#define ON_X86_64(entry) NULL
#endif
#if defined(__aarch64__)
#define ON_AARCH64(entry) entry
#else
#define ON_AARCH64(entry) NULL
#endif

typedef struct backend_row {
  const char *name;
  const char *about;                    /* one line, for usage texts */
  int (*runs_here)(void);               /* NULL: not in this build */
  void (*override)(stsa_kernels *kern); /* NULL: the portable entries */
  int auto_rank; /* AUTO runs the highest that runs here; 0: never */
  int ref;       /* the double-precision reference computes the rows */
} backend_row;

static const backend_row BACKENDS[STSA_BACKEND_COUNT_] = {
    [STSA_BACKEND_AUTO] = {"auto", "the best backend this machine runs (the default)",
                           always, NULL, 0, 0},
    [STSA_BACKEND_REF] = {"ref", "plain double-precision reference (slow)", always, NULL,
                          0, 1},
    [STSA_BACKEND_PORTABLE] = {"portable", "tiled kernels in portable C", always, NULL, 1,
                               0},
    [STSA_BACKEND_AVX2] = {"avx2", "tiled kernels with AVX2+FMA+F16C (x86)",
                           ON_X86(stsa_cpu_runs_avx2), ON_X86(stsa_kernels_override_avx2),
                           3, 0},
    [STSA_BACKEND_NEON] = {"neon", "tiled kernels with NEON (AArch64)",
                           ON_AARCH64(always), ON_AARCH64(stsa_kernels_override_neon), 2,
                           0},
    [STSA_BACKEND_AVX512] = {"avx512", "tiled kernels with AVX-512F (x86), 12 x 16 tiles",
                             ON_X86(stsa_cpu_runs_avx512),
                             ON_X86(stsa_kernels_override_avx512), 4, 0},
    [STSA_BACKEND_AMX] = {"amx", "avx512, and bf16 tiles on the AMX unit (x86-64 Linux)",
                          ON_X86_64(stsa_cpu_runs_amx),
                          ON_X86_64(stsa_kernels_override_amx), 6, 0},
    [STSA_BACKEND_AVX512BF16] =
        {"avx512bf16", "avx512, and bf16 tiles with AVX512-BF16 vdpbf16ps (x86)",
         ON_X86_64(stsa_cpu_runs_avx512bf16), ON_X86_64(stsa_kernels_override_avx512bf16),
         5, 0},
};

static int available(stsa_backend b) {
  return (unsigned)b < STSA_BACKEND_COUNT_ && BACKENDS[b].runs_here &&
         BACKENDS[b].runs_here();
}

int stsa_backend_available(stsa_backend backend) { return available(backend); }

int stsa_backend_count(void) { return STSA_BACKEND_COUNT_; }

const char *stsa_backend_name(stsa_backend backend) {
  return (unsigned)backend < STSA_BACKEND_COUNT_ ? BACKENDS[backend].name : "unknown";
}

const char *stsa_backend_about(stsa_backend backend) {
  return (unsigned)backend < STSA_BACKEND_COUNT_ ? BACKENDS[backend].about : "";
}

int stsa_backend_from_name(const char *name) {
  for (int b = 0; name && b < STSA_BACKEND_COUNT_; b++)
    if (!strcmp(name, BACKENDS[b].name))
      return b;
  return -1;
}

const char *stsa_backends_list(char *buf, size_t size, int here_only) {
  size_t used = 0;
  buf[0] = '\0';
  for (int b = 0; b < STSA_BACKEND_COUNT_ && used < size; b++)
    if (!here_only || available((stsa_backend)b))
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "",
                               BACKENDS[b].name);
  return buf;
}

/* AUTO's choice: the highest-ranked backend this machine runs (portable,
 * ranked lowest, always does). */
static stsa_backend auto_choice(void) {
  stsa_backend best = STSA_BACKEND_PORTABLE;
  for (int b = 0; b < STSA_BACKEND_COUNT_; b++)
    if (BACKENDS[b].auto_rank > BACKENDS[best].auto_rank && available((stsa_backend)b))
      best = (stsa_backend)b;
  return best;
}

stsa_status stsa_backend_choose(stsa_backend requested, stsa_backend_choice *out,
                                stsa_errbuf *err) {
  const stsa_backend id = requested == STSA_BACKEND_AUTO ? auto_choice() : requested;
  if (!available(id)) {
    char here[STSA_BACKEND_LIST_MAX];
    return stsa_fail(err, STSA_ERR_UNSUPPORTED,
                     "backend %s does not run on this machine (it has: %s)",
                     stsa_backend_name(id), stsa_backends_list(here, sizeof here, 1));
  }
  out->id = id;
  out->ref = BACKENDS[id].ref;
  stsa_kernels_init_portable(&out->kern);
  if (BACKENDS[id].override)
    BACKENDS[id].override(&out->kern);
  return STSA_OK;
}
