/* The public C header: standard types, then the declarations that cffi also reads. */
#ifndef CERA_CPU_H
#define CERA_CPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "cera_cpu_api.h"

#ifdef __cplusplus
}
#endif

#endif
