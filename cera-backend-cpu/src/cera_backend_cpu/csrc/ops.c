/* The non-matmul ops whose loops are hot: norms, RoPE, attention, activations.
 *
 * Formulas follow ggml's CPU backend (ggml-cpu/ops.cpp, vec.h) so that cera computes
 * what llama.cpp computes: norms sum in double, RoPE builds its sin/cos cache with
 * rope_yarn and multiplies theta by theta_scale step by step, gelu goes through an f16
 * table, attention converts the query to f16 when the cache is f16 (llama.cpp's
 * vec_dot_type for f16 keys) and runs an online softmax in f32.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* -- tables -------------------------------------------------------------------------------- */

uint16_t cera_gelu_table[65536];

static const float GELU_COEF_A = 0.044715f;
static const float SQRT_2_OVER_PI = 0.79788456080286535587989211986876f;
static const float SQRT_2_INV = 0.70710678118654752440084436210484f;

static float gelu_f32(float x) { return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * (1.0f + GELU_COEF_A * x * x))); }

void cera_tables_init(void) {
    for (int i = 0; i < 65536; i++) cera_gelu_table[i] = f32_to_f16(gelu_f32(f16_to_f32((uint16_t)i)));
}

/* ggml_vec_gelu_f32 with GGML_GELU_FP16 (the default): saturate outside [-10, 10],
 * otherwise look the f16-rounded input up in the table. */
CERA_INLINE float gelu_lookup(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return f16_to_f32(cera_gelu_table[f32_to_f16(x)]);
}

CERA_INLINE float silu(float x) { return x / (1.0f + expf(-x)); }

/* -- norms --------------------------------------------------------------------------------- */

void cera_rms_norm(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const float *w, float eps, float *y) {
    (void)ctx;
    for (int64_t r = 0; r < rows; r++, x += n, y += n) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
        const float mean = (float)(sum / (double)n);
        const float scale = 1.0f / sqrtf(mean + eps);
        if (w)
            for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
        else
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

void cera_layer_norm(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const float *w, const float *b, float eps,
                     float *y) {
    (void)ctx;
    for (int64_t r = 0; r < rows; r++, x += n, y += n) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += (double)x[i];
        const float mean = (float)(sum / (double)n);
        double var = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i] - mean;
            y[i] = v;
            var += (double)(v * v);
        }
        const float scale = 1.0f / sqrtf((float)(var / (double)n) + eps);
        for (int64_t i = 0; i < n; i++) y[i] *= scale;
        if (w)
            for (int64_t i = 0; i < n; i++) y[i] *= w[i];
        if (b)
            for (int64_t i = 0; i < n; i++) y[i] += b[i];
    }
}

/* -- RoPE ---------------------------------------------------------------------------------- */

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

static float yarn_ramp(float low, float high, int i0) {
    const float y = (i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1 - fminf(1, fmaxf(0, y));
}

int cera_rope(cera_ctx *ctx, const float *x, float *y, int64_t n_tok, int64_t n_heads, int64_t head_dim,
              const int32_t *pos, int n_dims, int neox, float freq_base, float freq_scale, const float *freq_factors,
              float ext_factor, float attn_factor, float beta_fast, float beta_slow, int n_ctx_orig) {
    (void)ctx;
    if (n_dims <= 0 || n_dims % 2 || n_dims > head_dim) return CERA_EINVAL;
    float *cache = malloc(sizeof(float) * (size_t)n_dims);
    if (!cache) return CERA_ENOMEM;
    const float theta_scale = powf(freq_base, -2.0f / n_dims);
    float corr[2];
    {
        const float start = floorf(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
        const float end = ceilf(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
        corr[0] = fmaxf(0, start);
        corr[1] = fminf(n_dims - 1, end);
    }
    for (int64_t t = 0; t < n_tok; t++) {
        float theta = (float)pos[t];
        for (int i0 = 0; i0 < n_dims; i0 += 2) {
            const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
            const float theta_extrap = theta / ff;
            const float theta_interp = freq_scale * theta_extrap;
            float th = theta_interp, mscale = attn_factor;
            if (ext_factor != 0.0f) {
                const float ramp_mix = yarn_ramp(corr[0], corr[1], i0) * ext_factor;
                th = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
                mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
            }
            cache[i0] = cosf(th) * mscale;
            cache[i0 + 1] = sinf(th) * mscale;
            theta *= theta_scale;
        }
        for (int64_t h = 0; h < n_heads; h++) {
            const float *src = x + (t * n_heads + h) * head_dim;
            float *dst = y + (t * n_heads + h) * head_dim;
            if (neox) {
                const int half = n_dims / 2;
                for (int i0 = 0; i0 < n_dims; i0 += 2) {
                    const int ic = i0 / 2;
                    const float c = cache[i0], s = cache[i0 + 1];
                    const float x0 = src[ic], x1 = src[ic + half];
                    dst[ic] = x0 * c - x1 * s;
                    dst[ic + half] = x0 * s + x1 * c;
                }
            } else {
                for (int i0 = 0; i0 < n_dims; i0 += 2) {
                    const float c = cache[i0], s = cache[i0 + 1];
                    const float x0 = src[i0], x1 = src[i0 + 1];
                    dst[i0] = x0 * c - x1 * s;
                    dst[i0 + 1] = x0 * s + x1 * c;
                }
            }
            if (dst != src)
                for (int64_t i = n_dims; i < head_dim; i++) dst[i] = src[i];
        }
    }
    free(cache);
    return CERA_OK;
}

/* -- attention ------------------------------------------------------------------------------ */

typedef struct {
    const cera_kernels *k;
    const float *q;
    int64_t n_tok, n_heads, k_dim, v_dim, n_kv_heads, kv_stride, n_cells;
    const char *k_cache, *v_cache;
    int kv_f16;
    const int32_t *cell_pos, *q_pos;
    float scale, softcap;
    int32_t window;
    int acc_f16;
    float *out;
    atomic_llong next;
    int failed;
} attn_job;

static void attn_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    attn_job *job = varg;
    const cera_kernels *k = job->k;
    const int64_t group = job->n_heads / job->n_kv_heads;
    const size_t elt = job->kv_f16 ? 2 : 4;
    float *acc = malloc(sizeof(float) * (size_t)job->v_dim);
    uint16_t *q16 = malloc(sizeof(uint16_t) * (size_t)(job->k_dim + job->v_dim));
    if (!acc || !q16) {
        job->failed = 1;
        free(acc);
        free(q16);
        return;
    }
    const float logit_mul = job->softcap > 0 ? job->scale / job->softcap : job->scale;
    uint16_t *acc16 = (uint16_t *)q16 + job->k_dim; /* after q16: allocated together below */
    const int f16acc = job->kv_f16 && job->acc_f16;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (item >= job->n_tok * job->n_heads) break;
        const int64_t t = item / job->n_heads, h = item % job->n_heads, g = h / group;
        const float *q = job->q + (t * job->n_heads + h) * job->k_dim;
        if (job->kv_f16)
            for (int64_t i = 0; i < job->k_dim; i++) q16[i] = f32_to_f16(q[i]);
        const char *kc = job->k_cache + (size_t)(g * job->kv_stride * job->k_dim) * elt;
        const char *vc = job->v_cache + (size_t)(g * job->kv_stride * job->v_dim) * elt;
        const int32_t p = job->q_pos[t];
        float M = -INFINITY, S = 0.0f;
        memset(acc, 0, sizeof(float) * (size_t)job->v_dim);
        memset(acc16, 0, sizeof(uint16_t) * (size_t)job->v_dim);
        for (int64_t c = 0; c < job->n_cells; c++) {
            const int32_t pc = job->cell_pos[c];
            if (pc < 0 || pc > p || (job->window > 0 && p - pc >= job->window)) continue;
            float s;
            if (job->kv_f16)
                s = k->dot_f16(job->k_dim, (const uint16_t *)kc + c * job->k_dim, q16);
            else
                s = k->dot_f32(job->k_dim, (const float *)kc + c * job->k_dim, q);
            s *= logit_mul;
            if (job->softcap > 0) s = job->softcap * tanhf(s);
            float vs = 1.0f, ms = 1.0f;
            if (s > M) {
                ms = expf(M - s); /* 0 on the first visible cell */
                M = s;
            } else {
                vs = expf(s - M);
            }
            if (f16acc) {
                /* ggml_vec_scale_f16 / ggml_vec_mad_f16: f32 arithmetic, f16 after each step */
                if (ms != 1.0f) k->scale_f16(job->v_dim, acc16, ms);
                k->mad_f16(job->v_dim, acc16, (const uint16_t *)vc + c * job->v_dim, vs);
            } else {
                if (ms != 1.0f) k->scale_f32(job->v_dim, acc, ms);
                if (job->kv_f16)
                    k->axpy_f16(job->v_dim, acc, (const uint16_t *)vc + c * job->v_dim, vs);
                else
                    k->axpy_f32(job->v_dim, acc, (const float *)vc + c * job->v_dim, vs);
            }
            S = S * ms + vs;
        }
        float *o = job->out + (t * job->n_heads + h) * job->v_dim;
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        if (f16acc)
            for (int64_t i = 0; i < job->v_dim; i++) o[i] = f16_to_f32(acc16[i]) * inv;
        else
            for (int64_t i = 0; i < job->v_dim; i++) o[i] = acc[i] * inv;
    }
    free(acc);
    free(q16);
}

int cera_attention(cera_ctx *ctx, const float *q, int64_t n_tok, int64_t n_heads, int64_t k_dim, const void *k_cache,
                   const void *v_cache, int kv_f16, int64_t n_kv_heads, int64_t kv_stride, int64_t v_dim,
                   const int32_t *cell_pos, int64_t n_cells, const int32_t *q_pos, float scale, int32_t window,
                   float softcap, int acc_f16, float *out) {
    if (n_kv_heads <= 0 || n_heads % n_kv_heads || n_cells > kv_stride) return CERA_EINVAL;
    attn_job job;
    job.k = &ctx->k;
    job.q = q;
    job.n_tok = n_tok;
    job.n_heads = n_heads;
    job.k_dim = k_dim;
    job.v_dim = v_dim;
    job.n_kv_heads = n_kv_heads;
    job.kv_stride = kv_stride;
    job.n_cells = n_cells;
    job.k_cache = k_cache;
    job.v_cache = v_cache;
    job.kv_f16 = kv_f16;
    job.cell_pos = cell_pos;
    job.q_pos = q_pos;
    job.scale = scale;
    job.softcap = softcap;
    job.window = window;
    job.acc_f16 = acc_f16;
    job.out = out;
    job.failed = 0;
    atomic_init(&job.next, 0);
    const int64_t work = n_tok * n_heads * n_cells * (k_dim + v_dim);
    int nth = work < 32768 ? 1 : ctx->n_threads;
    if (n_tok * n_heads < nth) nth = (int)(n_tok * n_heads);
    cera_ctx_lock(ctx);
    cera_pool_run(ctx->pool, attn_task, &job, nth);
    cera_ctx_unlock(ctx);
    return job.failed ? CERA_ENOMEM : CERA_OK;
}

/* -- activations ---------------------------------------------------------------------------- */

int cera_unary(cera_ctx *ctx, int op, const float *x, float *y, int64_t n) {
    (void)ctx;
    switch (op) {
    case 0:
        for (int64_t i = 0; i < n; i++) y[i] = silu(x[i]);
        return CERA_OK;
    case 1:
        for (int64_t i = 0; i < n; i++) y[i] = gelu_lookup(x[i]);
        return CERA_OK;
    case 2:
        for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * SQRT_2_INV));
        return CERA_OK;
    case 3:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return CERA_OK;
    default:
        return CERA_EINVAL;
    }
}

int cera_glu(cera_ctx *ctx, int op, const float *g, const float *u, float *y, int64_t n) {
    (void)ctx;
    switch (op) {
    case 0:
        for (int64_t i = 0; i < n; i++) y[i] = silu(g[i]) * u[i];
        return CERA_OK;
    case 1:
        for (int64_t i = 0; i < n; i++) y[i] = gelu_lookup(g[i]) * u[i];
        return CERA_OK;
    default:
        return CERA_EINVAL;
    }
}
