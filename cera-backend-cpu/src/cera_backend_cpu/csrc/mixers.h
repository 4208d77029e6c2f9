/* The recurrent mixers and the experts op (recurrent.c, moe.c) for callers that hold the
 * context lock already (cera_plan_run); their public forms lock and call these. */
#ifndef CERA_MIXERS_H
#define CERA_MIXERS_H

#include "internal.h"

int cera_conv_causal_check(const cera_conv_causal_args *a);
int cera_conv_causal_unlocked(cera_ctx *ctx, const cera_conv_causal_args *a, void *const *table);
int cera_ssm_scan_check(const cera_ssm_scan_args *a);
int cera_ssm_scan_unlocked(cera_ctx *ctx, const cera_ssm_scan_args *a, void *const *table);
#define CERA_DELTA_MAX_DIM 1024
int cera_delta_net_check(const cera_delta_net_args *a);
int cera_delta_net_unlocked(cera_ctx *ctx, const cera_delta_net_args *a, void *const *table);
int cera_moe_check(const cera_moe_args *a);
int cera_moe_unlocked(cera_ctx *ctx, const cera_moe_args *a);

#endif
