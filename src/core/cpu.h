/*
 * cpu.h — run-time CPU (and OS) checks, one per x86 backend. Declared only
 * where the build targets x86: elsewhere the backend table names none of
 * them (kernel/dispatch.c), so no avx2 symbol exists in an AArch64 build.
 */
#ifndef STSA_CORE_CPU_H
#define STSA_CORE_CPU_H

#if defined(__x86_64__) || defined(__i386__)
/* AVX2, FMA and F16C, and the OS saving ymm state. */
int stsa_cpu_runs_avx2(void);
/* stsa_cpu_runs_avx2, AVX-512F and DQ, and the OS saving zmm state. */
int stsa_cpu_runs_avx512(void);
/* stsa_cpu_runs_avx512, AVX512-BW, VL and AVX512-BF16 (CPUID 7.1 EAX bit
 * 5). */
int stsa_cpu_runs_avx512bf16(void);
#endif
#if defined(__x86_64__)
/* stsa_cpu_runs_avx512bf16, AMX-TILE and AMX-BF16, the OS saving the tile
 * state, and (Linux) the tile data granted to this process, which this call
 * asks the kernel for (arch_prctl ARCH_REQ_XCOMP_PERM): the backend table
 * calls it whenever stsa_backend_available(STSA_BACKEND_AMX) is asked and
 * before a context selects amx. Off Linux it is 0. */
int stsa_cpu_runs_amx(void);
#endif

#endif
