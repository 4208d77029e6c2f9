/* ARM64 NEON variant (placeholder). */
#include "internal.h"

int cera_kernels_init_neon(cera_kernels *k) { (void)k; return 0; }
