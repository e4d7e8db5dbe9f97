/* cpu.c — what this CPU and OS run: the run-time checks behind the backend
 * table's availability (src/kernel/dispatch.c), which alone asks them. The
 * public question is stsa_backend_available; these stay internal so that a
 * new backend adds a row, not a public function. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall(), for the AMX permission request */
#include "core/cpu.h"

#include <stddef.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* AVX2, FMA and F16C from CPUID, and the OS saving ymm state (XGETBV);
 * read directly because not every compiler's __builtin_cpu_supports knows
 * "f16c". */
int stsa_cpu_runs_avx2(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  const unsigned fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
  if ((c & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c))
    return 0;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  (void)xcr0_hi;
  if ((xcr0_lo & 6u) != 6u) /* xmm and ymm state enabled */
    return 0;
  if (__get_cpuid_max(0, NULL) < 7)
    return 0;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & (1u << 5)) != 0; /* AVX2 */
}

/* AVX-512F and DQ from CPUID leaf 7, and the OS saving opmask and all 32 zmm
 * registers (XCR0 bits 5-7) besides xmm and ymm. */
int stsa_cpu_runs_avx512(void) {
  if (!stsa_cpu_runs_avx2())
    return 0;
  unsigned a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  /* AVX512F, and DQ for the kernels' exp2 (vreduceps; every AVX-512 CPU
   * but the Xeon Phi has it) */
  if ((b & (1u << 16)) == 0 || (b & (1u << 17)) == 0)
    return 0;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  (void)xcr0_hi;
  return (xcr0_lo & 0xE6u) == 0xE6u;
}

/* stsa_cpu_runs_avx512, AVX512-BW and VL (CPUID 7.0 EBX bits 30 and 31) and
 * AVX512-BF16 (7.1 EAX bit 5). */
int stsa_cpu_runs_avx512bf16(void) {
  if (!stsa_cpu_runs_avx512())
    return 0;
  unsigned a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned bw_vl = (1u << 30) | (1u << 31);
  if ((b & bw_vl) != bw_vl)
    return 0;
  __cpuid_count(7, 1, a, b, c, d);
  return (a & (1u << 5)) != 0;
}
#endif

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

/* Linux keeps the AMX tile data (XSAVE feature 18) off until a process
 * asks for it (arch_prctl ARCH_REQ_XCOMP_PERM; idempotent, process-wide). */
#define STSA_ARCH_REQ_XCOMP_PERM 0x1023
#define STSA_XFEATURE_XTILEDATA 18

/* AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24 and 22) on top of the
 * avx512bf16 backend's ISA (its AVX512-BW and -BF16 split the
 * probabilities into bf16 terms), the OS saving the tile state (XCR0 bits
 * 17-18), and Linux granting it to this process. */
int stsa_cpu_runs_amx(void) {
  if (!stsa_cpu_runs_avx512bf16())
    return 0;
  unsigned a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned amx = (1u << 22) | (1u << 24);
  const int tile_unit = (d & amx) == amx;
#ifdef STSA_AMX_EMULATION
  /* a test build: the tile instructions run in C (kernel/x86/amx_emulation.h)
   * and the CPU needs only the rest of the backend's ISA, checked above */
  (void)tile_unit;
  return 1;
#else
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  (void)xcr0_hi;
  if (!tile_unit || (xcr0_lo & (3u << 17)) != (3u << 17))
    return 0;
  return syscall(SYS_arch_prctl, STSA_ARCH_REQ_XCOMP_PERM, STSA_XFEATURE_XTILEDATA) == 0;
#endif
}
#elif defined(__x86_64__)
int stsa_cpu_runs_amx(void) { return 0; } /* the tile permission is asked on Linux only */
#endif
