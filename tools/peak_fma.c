/*
 * peak_fma.c — the machine's fp32 FMA peak: 12 independent accumulator
 * chains per thread (enough to cover FMA latency x throughput on Zen 3-5 and
 * Intel cores), on the widest vectors the CPU has: 512 bits where stsa's
 * AVX-512 backend runs, else 256 (AVX2+FMA). A peak taken on narrower
 * vectors than the machine has would flatter every "% of peak" figure.
 * Compiled with -mavx2 -mfma on x86, the 512-bit chains by a target
 * attribute; cli_fma_peak checks the CPU first. Other architectures have no
 * probe (yet): the peak reads as 0.
 */
#include "cli_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <omp.h>

/* Runs `iters` steps of 12 FMA chains; returns a value so nothing is elided. */
static float fma_chains_256(long iters) {
  __m256 a[12];
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; i++)
    a[i] = _mm256_set1_ps((float)i);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++)
      a[i] = _mm256_fmadd_ps(a[i], x, y);
  __m256 s = a[0];
  for (int i = 1; i < 12; i++)
    s = _mm256_add_ps(s, a[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) static float fma_chains_512(long iters) {
  __m512 a[12];
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; i++)
    a[i] = _mm512_set1_ps((float)i);
  for (long it = 0; it < iters; it++)
    for (int i = 0; i < 12; i++)
      a[i] = _mm512_fmadd_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; i++)
    s = _mm512_add_ps(s, a[i]);
  return _mm512_cvtss_f32(s);
}

const char *cli_fma_peak_isa(void) {
  return stsa_backend_available(STSA_BACKEND_AVX512) ? "avx512"
         : stsa_backend_available(STSA_BACKEND_AVX2) ? "avx2"
                                                     : "none";
}

double cli_fma_peak(int threads) {
  if (!stsa_backend_available(STSA_BACKEND_AVX2))
    return 0.0;
  const int wide = stsa_backend_available(STSA_BACKEND_AVX512), lanes = wide ? 16 : 8;
  const long iters = 20 * 1000 * 1000;
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int trial = 0; trial < 5; trial++) {
    double t0 = cli_now();
#pragma omp parallel num_threads(threads)
    {
      float r = wide ? fma_chains_512(iters) : fma_chains_256(iters);
#pragma omp atomic
      sink += r;
    }
    double dt = cli_now() - t0;
    double gflops = (double)threads * (double)iters * 12 * lanes * 2 / dt * 1e-9;
    best = gflops > best ? gflops : best;
  }
  (void)sink;
  return best;
}
#else
const char *cli_fma_peak_isa(void) { return "none"; }

double cli_fma_peak(int threads) {
  (void)threads;
  return 0.0;
}
#endif
