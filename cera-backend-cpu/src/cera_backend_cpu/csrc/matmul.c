/* Quantized matrix products: y = x @ W.T, W in its stored GGUF form.
 *
 * As llama.cpp does, the activations are first quantized to the 8-bit block format
 * that pairs with the weight type (Q8_0, Q8_1, Q8_K; f16 / bf16 for float weights),
 * then every output element is one dot product of a weight row and an activation row,
 * accumulated in integers within blocks.
 *
 * Work split: the weight rows are cut into chunks that threads take from an atomic
 * counter (so a thread that the OS preempts does not hold everyone back). For several
 * activation rows (prefill) a chunk is a tile of weight rows that stays in L1 while the
 * thread walks all activation rows over it, in groups that stay in L2.
 */
#include <stdatomic.h>

#include "internal.h"

/* Below this many weight elements a product runs on the calling thread alone: waking
 * the pool would cost more than it saves. */
#define SMALL_PRODUCT 32768

#define TILE_COLS 16 /* activation rows per group in the prefill walk */

typedef struct {
    cera_dot_fn dot;
    cera_dot4_fn dot4;
    const char *w;
    int64_t w_row_bytes, K, N, M;
    const char *act;
    int64_t act_row_bytes;
    float *y;
    int64_t y_stride;
    const float *bias;
    int64_t chunk; /* weight rows per chunk */
    int64_t n_chunks;
    atomic_llong next;
} mm_job;

static void mm_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    mm_job *job = varg;
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (c >= job->n_chunks) break;
        const int64_t r0 = c * job->chunk;
        const int64_t r1 = r0 + job->chunk < job->N ? r0 + job->chunk : job->N;
        for (int64_t m0 = 0; m0 < job->M; m0 += TILE_COLS) {
            const int64_t m1 = m0 + TILE_COLS < job->M ? m0 + TILE_COLS : job->M;
            for (int64_t m = m0; m < m1; m++) {
                const char *a = job->act + m * job->act_row_bytes;
                float *y = job->y + m * job->y_stride;
                int64_t r = r0;
                if (job->dot4)
                    for (; r + 4 <= r1; r += 4) job->dot4(job->K, job->w + r * job->w_row_bytes, job->w_row_bytes, a, &y[r]);
                for (; r < r1; r++) job->dot(job->K, job->w + r * job->w_row_bytes, a, &y[r]);
                if (job->bias)
                    for (int64_t r = r0; r < r1; r++) y[r] += job->bias[r];
            }
        }
    }
}

typedef struct {
    cera_quant_fn quant;
    const float *x;
    int64_t x_stride, K, M;
    char *act;
    int64_t act_row_bytes;
    atomic_llong next; /* next activation row */
} quant_job;

static void quant_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    quant_job *job = varg;
    for (;;) {
        const int64_t m = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (m >= job->M) break;
        job->quant(job->x + m * job->x_stride, job->act + m * job->act_row_bytes, job->K);
    }
}

int cera_matmul_unlocked(cera_ctx *ctx, int wtype, const void *w, int64_t w_row_bytes, int64_t K, int64_t N,
                         const float *x, int64_t x_stride, int64_t M, float *y, int64_t y_stride, const float *bias) {
    if (!cera_type_supported(wtype) || K % cera_types[wtype].block) return CERA_ETYPE;
    if (K <= 0 || N <= 0 || M <= 0) return M == 0 || N == 0 ? CERA_OK : CERA_EINVAL;
    const int act = cera_types[wtype].act;
    if (K % cera_act_block[act]) return CERA_ETYPE;
    const int64_t act_row_bytes = cera_act_bytes(act, K);

    char *buf = cera_scratch(ctx, (size_t)(act_row_bytes * M));
    if (!buf) return CERA_ENOMEM;
    const int small = N * K < SMALL_PRODUCT && M == 1;
    int nth = small ? 1 : ctx->n_threads;

    quant_job qj = {ctx->k.quant[act], x, x_stride, K, M, buf, act_row_bytes, 0};
    atomic_init(&qj.next, 0);
    cera_pool_run(ctx->pool, quant_task, &qj, M >= 4 ? nth : 1);

    mm_job job;
    job.dot = ctx->k.dot[wtype];
    job.dot4 = ctx->k.dot4[wtype];
    job.w = w;
    job.w_row_bytes = w_row_bytes;
    job.K = K;
    job.N = N;
    job.M = M;
    job.act = buf;
    job.act_row_bytes = act_row_bytes;
    job.y = y;
    job.y_stride = y_stride;
    job.bias = bias;
    if (M == 1) {
        /* decode: about 4 chunks per thread, at least 16 rows each */
        int64_t chunk = N / ((int64_t)nth * 4);
        chunk = chunk < 16 ? 16 : (chunk + 15) / 16 * 16;
        job.chunk = chunk;
    } else {
        job.chunk = 16; /* rows of a tile: 16 weight rows stay in L1 */
    }
    job.n_chunks = (N + job.chunk - 1) / job.chunk;
    if (job.n_chunks < nth) nth = (int)job.n_chunks;
    atomic_init(&job.next, 0);
    cera_pool_run(ctx->pool, mm_task, &job, nth);
    return CERA_OK;
}

int cera_matmul(cera_ctx *ctx, int wtype, const void *w, int64_t w_row_bytes, int64_t K, int64_t N, const float *x,
                int64_t x_stride, int64_t M, float *y, int64_t y_stride, const float *bias) {
    cera_ctx_lock(ctx);
    const int rc = cera_matmul_unlocked(ctx, wtype, w, w_row_bytes, K, N, x, x_stride, M, y, y_stride, bias);
    cera_ctx_unlock(ctx);
    return rc;
}

int cera_quantize_act(cera_ctx *ctx, int wtype, const float *x, void *dst, int64_t K) {
    if (!cera_type_supported(wtype)) return CERA_ETYPE;
    const int act = cera_types[wtype].act;
    if (K % cera_act_block[act]) return CERA_ETYPE;
    ctx->k.quant[act](x, dst, K);
    return CERA_OK;
}

int cera_vec_dot(cera_ctx *ctx, int wtype, int64_t K, const void *w_row, const void *act_row, float *out) {
    if (!cera_type_supported(wtype) || K % cera_types[wtype].block) return CERA_ETYPE;
    ctx->k.dot[wtype](K, w_row, act_row, out);
    return CERA_OK;
}

int cera_get_rows(cera_ctx *ctx, int t, const void *table, int64_t row_bytes, int64_t n_cols, int64_t n_rows,
                  const int32_t *ids, int64_t n_ids, float *out) {
    (void)ctx;
    if (!cera_type_supported(t) || n_cols % cera_types[t].block) return CERA_ETYPE;
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= n_rows) return CERA_EINVAL;
    for (int64_t i = 0; i < n_ids; i++)
        cera_types[t].dequant((const char *)table + (int64_t)ids[i] * row_bytes, out + i * n_cols, n_cols);
    return CERA_OK;
}
