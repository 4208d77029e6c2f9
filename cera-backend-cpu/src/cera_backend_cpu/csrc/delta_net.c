/* The gated delta rule of Qwen3-Next / Qwen3.5 linear attention (ggml_gated_delta_net with
 * one decay per head), for the sequences of a batch, each reading and advancing its own
 * slot of the state.
 *
 * Per value head h (key head h mod key_heads, or h / (value_heads / key_heads) when grouped) the state M is [dim_v][dim_k] (row j: value
 * channel j), so every product reads a row: per token, M *= exp(g); d[j] = (v[j] - M[j].k)
 * * beta; M[j] += d[j] k; y[j] = (M[j].q) / sqrt(dim). The arithmetic is ggml-cpu's fused
 * kernel: the row products are ggml_vec_dot_f32 of this CPU (the kernels' f32 dot), the
 * update a fused multiply-add per element (ggml_vec_mad_f32), the decay one multiply
 * (ggml_vec_scale_f32), expf from libm.
 *
 * Work items are one head of one sequence, taken from a shared counter by the pool's
 * threads; a small step runs on the calling thread alone.
 */
#include <math.h>
#include <stdatomic.h>

#include "internal.h"
#include "mixers.h"

#define SMALL_WORK 32768 /* multiply-adds below which one thread does it all */

typedef struct {
    const cera_delta_net_args *a;
    const cera_kernels *k;
    float *state; /* slot 0 of the layer's [n_slots][value_heads][dim][dim] */
    int64_t n_items;
    atomic_llong next;
} delta_job;

static void delta_item(const cera_delta_net_args *a, const cera_kernels *kern, float *state, int s, int64_t h) {
    const int64_t Hk = a->key_heads, Hv = a->value_heads, S = a->dim;
    const int64_t r0 = a->rows[2 * s], n = a->rows[2 * s + 1];
    const int64_t hk = a->grouped ? h / (Hv / Hk) : h % Hk;
    const float scale = 1.0f / sqrtf((float)S);
    const cera_dot_fn dot = kern->dot[T_F32];
    float *M = state + ((int64_t)a->slots[s] * Hv + h) * S * S;
    float d[CERA_DELTA_MAX_DIM];
    for (int64_t t = r0; t < r0 + n; t++) {
        const float *q = a->q + (t * Hk + hk) * S;
        const float *k = a->k + (t * Hk + hk) * S;
        const float *v = a->v + (t * Hv + h) * S;
        const float beta = a->beta[t * Hv + h];
        float *y = a->y + (t * Hv + h) * S;
        kern->scale_f32(S * S, M, expf(a->g[t * Hv + h]));
        for (int64_t j = 0; j < S; j++) {
            float sum = 0.0f;
            dot(S, M + j * S, k, &sum);
            d[j] = (v[j] - sum) * beta;
        }
        for (int64_t j = 0; j < S; j++) kern->axpy_f32(S, M + j * S, k, d[j]);
        for (int64_t j = 0; j < S; j++) {
            float sum = 0.0f;
            dot(S, M + j * S, q, &sum);
            y[j] = sum * scale;
        }
    }
}

static void delta_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    delta_job *job = varg;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (item >= job->n_items) return;
        const int64_t H = job->a->value_heads;
        delta_item(job->a, job->k, job->state, (int)(item / H), item % H);
    }
}

int cera_delta_net_check(const cera_delta_net_args *a) {
    if (!a || !a->q || !a->k || !a->v || !a->g || !a->beta || !a->y || !a->rows || !a->slots || a->key_heads <= 0 ||
        a->value_heads <= 0 || a->value_heads % a->key_heads || a->dim <= 0 || a->dim > CERA_DELTA_MAX_DIM ||
        a->n_seq <= 0 || a->n_slots <= 0)
        return CERA_EINVAL;
    for (int s = 0; s < a->n_seq; s++)
        if (a->rows[2 * s] < 0 || a->rows[2 * s + 1] <= 0) return CERA_EINVAL;
    return CERA_OK;
}

int cera_delta_net_unlocked(cera_ctx *ctx, const cera_delta_net_args *a, void *const *table) {
    int64_t n_tok = 0;
    for (int s = 0; s < a->n_seq; s++) {
        if (a->slots[s] < 0 || a->slots[s] >= a->n_slots) return CERA_EINVAL;
        n_tok += a->rows[2 * s + 1];
    }
    delta_job job = {.a = a, .k = &ctx->k, .state = table[a->state_index],
                     .n_items = (int64_t)a->n_seq * a->value_heads};
    atomic_init(&job.next, 0);
    const int nth = n_tok * a->value_heads * a->dim * a->dim * 3 < SMALL_WORK ? 1 : ctx->n_threads;
    if (nth == 1)
        delta_task(&job, 0, 1);
    else
        cera_pool_run(ctx->pool, delta_task, &job, nth);
    return CERA_OK;
}

int cera_delta_net(cera_ctx *ctx, const cera_delta_net_args *a, void *const *table) {
    const int rc = cera_delta_net_check(a);
    if (rc != CERA_OK) return rc;
    cera_ctx_lock(ctx);
    const int out = cera_delta_net_unlocked(ctx, a, table);
    cera_ctx_unlock(ctx);
    return out;
}
