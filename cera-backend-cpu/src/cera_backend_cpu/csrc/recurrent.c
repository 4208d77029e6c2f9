/* Recurrent mixers with carried state: the causal depthwise convolution of LFM2 and
 * Mamba-2 (ggml_ssm_conv) and Mamba-2's selective scan (ggml_ssm_scan with a scalar A per
 * head), for the sequences of a batch, each reading and advancing its own slot of the state.
 *
 * The state arrays are entries of the run's state table (compile.py StateTable), so one
 * compiled plan serves every state of the same shape. Work is split into items (a block of
 * channels of one sequence; one head of one sequence) taken from a shared counter by the
 * pool's threads; a small step (a decode token) runs on the calling thread alone, where
 * waking the pool would cost more than the work.
 *
 * Arithmetic order follows ggml's scalar loops: the convolution sums its taps in order in
 * float, one fused multiply-add per tap (ggml_ssm_conv's `sumf += s * c` as llama.cpp's x86
 * builds compile it: contracted to FMA; bit-identical to its conv_output_raw on the tiny
 * qwen35 file, where a separate multiply and add differ by up to 7e-7); the scan updates each state element as s * dA + B * (x * dt) and accumulates
 * y += s * C in float over the state dimension.
 */
#include <math.h>
#include <stdatomic.h>

#include "internal.h"

#define CONV_BLOCK 256    /* channels per work item */
#define SMALL_WORK 32768  /* multiply-adds below which one thread does it all */

/* -- causal convolution ------------------------------------------------------------------ */

typedef struct {
    const cera_conv_causal_args *a;
    float *state; /* slot 0 of the layer's [n_slots][kernel - 1][channels] */
    int64_t n_blocks, n_items;
    atomic_llong next;
} conv_job;

/* Input row r of a sequence (r counts the rows of x), gated by b when set: what the
 * convolution reads and what is carried. */
static inline float conv_input(const float *x, const float *b, int64_t xs, int64_t r, int64_t c) {
    return b ? b[r * xs + c] * x[r * xs + c] : x[r * xs + c];
}

/* Sequence s, channels [c0, c1): y rows from the carried inputs then x (b * x when gated),
 * times c when gated; then the last kernel - 1 inputs become the carried ones. Each y
 * element sums its taps in order from 0 with one fused multiply-add each, as ggml_ssm_conv; the gates multiply as ggml_mul. */
static void conv_item(const cera_conv_causal_args *a, float *state, int s, int64_t c0, int64_t c1) {
    const int64_t C = a->channels, K = a->kernel, r0 = a->rows[2 * s], n = a->rows[2 * s + 1];
    const int64_t xs = a->x_stride > 0 ? a->x_stride : C;
    float *st = state + (int64_t)a->slots[s] * (K - 1) * C;
    const float *x = a->x + r0 * xs;
    const float *b = a->b ? a->b + r0 * xs : NULL;
    const float *g = a->c ? a->c + r0 * xs : NULL;
    float *y = a->y + r0 * C;
    for (int64_t t = 0; t < n; t++) {
        float *yt = y + t * C;
        for (int64_t c = c0; c < c1; c++) yt[c] = 0.0f;
        for (int64_t j = 0; j < K; j++) {
            const int64_t i = t + j; /* row of [carried; x] */
            const float *wj = a->wt + j * C;
            if (i < K - 1) {
                const float *src = st + i * C;
                for (int64_t c = c0; c < c1; c++) yt[c] = fmaf(src[c], wj[c], yt[c]);
            } else if (b) {
                const float *xr = x + (i - (K - 1)) * xs, *br = b + (i - (K - 1)) * xs;
                for (int64_t c = c0; c < c1; c++) yt[c] = fmaf(br[c] * xr[c], wj[c], yt[c]);
            } else {
                const float *xr = x + (i - (K - 1)) * xs;
                for (int64_t c = c0; c < c1; c++) yt[c] = fmaf(xr[c], wj[c], yt[c]);
            }
        }
        if (g) {
            const float *gt = g + t * xs;
            for (int64_t c = c0; c < c1; c++) yt[c] = gt[c] * yt[c];
        }
    }
    /* new carried rows: rows n .. n + K - 2 of [carried; x], in increasing order (a row
     * moves to a lower index, so reading ahead of the writes is safe) */
    for (int64_t i = 0; i < K - 1; i++) {
        const int64_t from = n + i;
        float *dst = st + i * C;
        if (from < K - 1) {
            const float *src = st + from * C;
            if (src != dst) memmove(dst + c0, src + c0, sizeof(float) * (size_t)(c1 - c0));
        } else {
            for (int64_t c = c0; c < c1; c++) dst[c] = conv_input(x, b, xs, from - (K - 1), c);
        }
    }
}

static void conv_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    conv_job *job = varg;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (item >= job->n_items) return;
        const int s = (int)(item / job->n_blocks);
        const int64_t c0 = (item % job->n_blocks) * CONV_BLOCK;
        const int64_t c1 = c0 + CONV_BLOCK < job->a->channels ? c0 + CONV_BLOCK : job->a->channels;
        conv_item(job->a, job->state, s, c0, c1);
    }
}

int cera_conv_causal_check(const cera_conv_causal_args *a) {
    if (!a || !a->x || !a->y || !a->wt || !a->rows || !a->slots || a->channels <= 0 || a->kernel < 2 ||
        a->n_seq <= 0 || a->n_slots <= 0 || a->x_stride < 0 || (a->x_stride > 0 && a->x_stride < a->channels))
        return CERA_EINVAL;
    for (int s = 0; s < a->n_seq; s++)
        if (a->rows[2 * s] < 0 || a->rows[2 * s + 1] <= 0) return CERA_EINVAL;
    return CERA_OK;
}

int cera_conv_causal_unlocked(cera_ctx *ctx, const cera_conv_causal_args *a, void *const *table) {
    float *state = table[a->state_index];
    int64_t n_tok = 0;
    for (int s = 0; s < a->n_seq; s++) {
        if (a->slots[s] < 0 || a->slots[s] >= a->n_slots) return CERA_EINVAL;
        n_tok += a->rows[2 * s + 1];
    }
    conv_job job = {.a = a, .state = state};
    job.n_blocks = (a->channels + CONV_BLOCK - 1) / CONV_BLOCK;
    job.n_items = job.n_blocks * a->n_seq;
    atomic_init(&job.next, 0);
    const int nth = n_tok * a->channels * a->kernel < SMALL_WORK ? 1 : ctx->n_threads;
    if (nth == 1)
        conv_task(&job, 0, 1);
    else
        cera_pool_run(ctx->pool, conv_task, &job, nth);
    return CERA_OK;
}

int cera_conv_causal(cera_ctx *ctx, const cera_conv_causal_args *a, void *const *table) {
    const int rc = cera_conv_causal_check(a);
    if (rc != CERA_OK) return rc;
    cera_ctx_lock(ctx);
    const int out = cera_conv_causal_unlocked(ctx, a, table);
    cera_ctx_unlock(ctx);
    return out;
}

/* -- selective scan ---------------------------------------------------------------------- */

typedef struct {
    const cera_ssm_scan_args *a;
    float *state; /* slot 0 of the layer's [n_slots][heads][head_dim][d_state] */
    int64_t n_items;
    atomic_llong next;
} scan_job;

static void scan_item(const cera_ssm_scan_args *a, float *state, int s, int64_t h) {
    const int64_t H = a->n_heads, P = a->head_dim, G = a->n_groups, N = a->d_state;
    const int64_t r0 = a->rows[2 * s], n = a->rows[2 * s + 1];
    const int64_t g = h / (H / G);
    float *st = state + ((int64_t)a->slots[s] * H + h) * P * N;
    for (int64_t t = r0; t < r0 + n; t++) {
        const float d = a->dt[t * H + h];
        const float dt_sp = d <= 20.0f ? log1pf(expf(d)) : d; /* softplus, as ggml */
        const float dA = expf(dt_sp * a->A[h]);
        const float *B = a->B + (t * G + g) * N;
        const float *C = a->C + (t * G + g) * N;
        const float *x = a->x + (t * H + h) * P;
        float *y = a->y + (t * H + h) * P;
        for (int64_t p = 0; p < P; p++) {
            const float x_dt = x[p] * dt_sp;
            float *sp = st + p * N;
            float sum = 0.0f;
            for (int64_t i = 0; i < N; i++) {
                const float v = sp[i] * dA + B[i] * x_dt;
                sum += v * C[i];
                sp[i] = v;
            }
            y[p] = sum;
        }
    }
}

static void scan_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    scan_job *job = varg;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (item >= job->n_items) return;
        scan_item(job->a, job->state, (int)(item / job->a->n_heads), item % job->a->n_heads);
    }
}

int cera_ssm_scan_check(const cera_ssm_scan_args *a) {
    if (!a || !a->x || !a->dt || !a->A || !a->B || !a->C || !a->y || !a->rows || !a->slots || a->n_heads <= 0 ||
        a->head_dim <= 0 || a->n_groups <= 0 || a->n_heads % a->n_groups || a->d_state <= 0 || a->n_seq <= 0 ||
        a->n_slots <= 0)
        return CERA_EINVAL;
    for (int s = 0; s < a->n_seq; s++)
        if (a->rows[2 * s] < 0 || a->rows[2 * s + 1] <= 0) return CERA_EINVAL;
    return CERA_OK;
}

int cera_ssm_scan_unlocked(cera_ctx *ctx, const cera_ssm_scan_args *a, void *const *table) {
    int64_t n_tok = 0;
    for (int s = 0; s < a->n_seq; s++) {
        if (a->slots[s] < 0 || a->slots[s] >= a->n_slots) return CERA_EINVAL;
        n_tok += a->rows[2 * s + 1];
    }
    scan_job job = {.a = a, .state = table[a->state_index], .n_items = (int64_t)a->n_seq * a->n_heads};
    atomic_init(&job.next, 0);
    const int nth = n_tok * a->n_heads * a->head_dim * a->d_state < SMALL_WORK ? 1 : ctx->n_threads;
    if (nth == 1)
        scan_task(&job, 0, 1);
    else
        cera_pool_run(ctx->pool, scan_task, &job, nth);
    return CERA_OK;
}

int cera_ssm_scan(cera_ctx *ctx, const cera_ssm_scan_args *a, void *const *table) {
    const int rc = cera_ssm_scan_check(a);
    if (rc != CERA_OK) return rc;
    cera_ctx_lock(ctx);
    const int out = cera_ssm_scan_unlocked(ctx, a, table);
    cera_ctx_unlock(ctx);
    return out;
}
