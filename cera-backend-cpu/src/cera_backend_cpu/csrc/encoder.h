/* encoder.c's functions for callers that hold the context lock already (plan.c). */
#ifndef CERA_ENCODER_H
#define CERA_ENCODER_H

#include "internal.h"

int cera_conv1d_unlocked(cera_ctx *ctx, const float *x, int64_t n_in, int64_t c_in, const float *wt, int64_t kernel,
                         int64_t c_out, const float *bias, int stride, int padding, float *y, int64_t n_out);
int cera_attention_full_unlocked(cera_ctx *ctx, const cera_attention_full_args *a);
int cera_cross_attention_unlocked(cera_ctx *ctx, const cera_cross_args *a, void *const *table);
int cera_store_cross_unlocked(cera_ctx *ctx, const cera_store_cross_args *a, void *const *table);

/* y = x (1 + erf(x / sqrt 2)) / 2 with a vectorisable erf (4e-7 from erff). */
void cera_gelu_erf_rows(const float *x, float *y, int64_t n);

#endif
