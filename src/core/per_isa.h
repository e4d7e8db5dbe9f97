/* per_isa.h — STSA_PER_ISA: a function built for the widest vectors the CPU
 * has, picked when the library loads (x86-64 Linux, whose loader resolves
 * the clones), for plain C loops that gcc vectorises and whose results do
 * not depend on the vector width. The library's generic files are built for
 * the x86-64 baseline (SSE2); elsewhere this is a plain function. */
#ifndef STSA_CORE_PER_ISA_H
#define STSA_CORE_PER_ISA_H

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define STSA_PER_ISA __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define STSA_PER_ISA
#endif

#endif
