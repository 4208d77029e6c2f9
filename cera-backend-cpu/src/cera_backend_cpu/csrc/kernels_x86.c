/* x86-64 SIMD variants (placeholder until the AVX kernels land). */
#include "internal.h"

int cera_kernels_init_avx2(cera_kernels *k) { (void)k; return 0; }
int cera_kernels_init_avx512(cera_kernels *k) { (void)k; return 0; }
int cera_kernels_init_avx512vnni(cera_kernels *k) { (void)k; return 0; }
