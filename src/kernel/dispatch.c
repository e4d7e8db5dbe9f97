/* dispatch.c — picks the micro-kernel table for a backend. */
#include "kernel/kernels.h"
#include "stsa.h"

const stsa_kernels *stsa_kernels_for(int backend) {
#if defined(__x86_64__) || defined(__i386__)
  if (backend == STSA_BACKEND_AVX2)
    return &stsa_kernels_avx2;
#else
  (void)backend; /* only the portable kernels exist off x86 */
#endif
  return &stsa_kernels_generic;
}
