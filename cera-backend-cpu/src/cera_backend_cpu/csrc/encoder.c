/* Encoder ops: full 1-D convolution, attention without a cache, and cross-attention over a
 * memory an encoder wrote (Whisper's front end, encoder and decoder cross-attention).
 *
 * All three are float32 matrix work: the convolution is an im2col product, attention is
 * two products per (sequence, head, block of query rows) around a softmax, each through
 * the variant's float32 tile kernel (k->gemm_f32: one fused multiply-add chain per
 * element) and its vectorised softmax (k->softmax_row). Work is handed to the pool as
 * items taken from an atomic counter; an item's arithmetic does not depend on the thread
 * that runs it or on how many there are.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "encoder.h"

#define CONV_ROWS 32 /* output frames per convolution item */
#define ATTN_ROWS 64 /* query rows per attention item */

/* -- conv1d ------------------------------------------------------------------------------------ */

typedef struct {
    const cera_kernels *k;
    const float *x, *wt, *bias;
    int64_t n_in, c_in, kernel, c_out, n_out;
    int stride, padding;
    float *y;
    float *scratch; /* per thread: CONV_ROWS x (c_in * kernel) */
    atomic_llong next;
} conv_job;

static void conv_task(void *arg, int ith, int nth) {
    (void)nth;
    conv_job *j = arg;
    const int64_t width = j->c_in * j->kernel;
    float *cols = j->scratch + (size_t)ith * CONV_ROWS * (size_t)width;
    const int64_t n_items = (j->n_out + CONV_ROWS - 1) / CONV_ROWS;
    for (;;) {
        const int64_t item = atomic_fetch_add(&j->next, 1);
        if (item >= n_items) break;
        const int64_t t0 = item * CONV_ROWS;
        const int64_t rows = j->n_out - t0 < CONV_ROWS ? j->n_out - t0 : CONV_ROWS;
        /* cols[r, c * kernel + i] = x[(t0 + r) * stride + i - padding, c], zero outside */
        for (int64_t r = 0; r < rows; r++) {
            float *dst = cols + r * width;
            for (int64_t i = 0; i < j->kernel; i++) {
                const int64_t src = (t0 + r) * j->stride + i - j->padding;
                if (src < 0 || src >= j->n_in) {
                    for (int64_t c = 0; c < j->c_in; c++) dst[c * j->kernel + i] = 0.0f;
                } else {
                    const float *xr = j->x + src * j->c_in;
                    for (int64_t c = 0; c < j->c_in; c++) dst[c * j->kernel + i] = xr[c];
                }
            }
        }
        float *y = j->y + t0 * j->c_out;
        memset(y, 0, sizeof(float) * (size_t)(rows * j->c_out));
        j->k->gemm_f32(rows, j->c_out, width, cols, width, j->wt, j->c_out, y, j->c_out);
        if (j->bias)
            for (int64_t r = 0; r < rows; r++)
                for (int64_t o = 0; o < j->c_out; o++) y[r * j->c_out + o] += j->bias[o];
    }
}

int cera_conv1d_unlocked(cera_ctx *ctx, const float *x, int64_t n_in, int64_t c_in, const float *wt, int64_t kernel,
                         int64_t c_out, const float *bias, int stride, int padding, float *y, int64_t n_out) {
    if (n_in <= 0 || c_in <= 0 || kernel <= 0 || c_out <= 0 || stride <= 0 || padding < 0 ||
        n_out != (n_in + 2 * padding - kernel) / stride + 1 || n_out <= 0)
        return CERA_EINVAL;
    const int nth = ctx->n_threads;
    float *scratch = malloc(sizeof(float) * (size_t)nth * CONV_ROWS * (size_t)(c_in * kernel));
    if (!scratch) return CERA_ENOMEM;
    conv_job j = {&ctx->k, x, wt, bias, n_in, c_in, kernel, c_out, n_out, stride, padding, y, scratch, 0};
    cera_pool_run(ctx->pool, conv_task, &j, nth);
    free(scratch);
    return CERA_OK;
}

int cera_conv1d(cera_ctx *ctx, const float *x, int64_t n_in, int64_t c_in, const float *wt, int64_t kernel,
                int64_t c_out, const float *bias, int stride, int padding, float *y, int64_t n_out) {
    cera_ctx_lock(ctx);
    const int rc = cera_conv1d_unlocked(ctx, x, n_in, c_in, wt, kernel, c_out, bias, stride, padding, y, n_out);
    cera_ctx_unlock(ctx);
    return rc;
}

/* -- attention over keys in memory ------------------------------------------------------------- */

/* One block of query rows of one head against n_keys keys: out = softmax(scale q.k) v.
 * Kt: the head's keys transposed ([k_dim][n_keys]); v rows v_stride apart. mask(row, key)
 * (NULL: everything visible) hides a key from a row. S: rows x n_keys scratch, O: rows x
 * v_dim scratch. */
typedef struct {
    const int32_t *pos; /* row positions (sequence-local rows: pos[r0 + r]) */
    int causal;
    int32_t window;
} mask_info;

static void attend_block(const cera_kernels *k, const float *q, int64_t q_stride, int64_t rows, const float *Kt,
                         int64_t n_keys, int64_t k_dim, const float *v, int64_t v_stride, int64_t v_dim, float scale,
                         float softcap, const mask_info *mask, int64_t row0, float *S, float *O, float *out,
                         int64_t out_stride) {
    memset(S, 0, sizeof(float) * (size_t)(rows * n_keys));
    k->gemm_f32(rows, n_keys, k_dim, q, q_stride, Kt, n_keys, S, n_keys);
    float sums[ATTN_ROWS];
    for (int64_t r = 0; r < rows; r++) {
        float *s = S + r * n_keys;
        if (softcap > 0)
            for (int64_t c = 0; c < n_keys; c++) s[c] = softcap * tanhf(s[c] * (scale / softcap));
        else
            for (int64_t c = 0; c < n_keys; c++) s[c] *= scale;
        if (mask) {
            const int32_t p = mask->pos[row0 + r];
            for (int64_t c = 0; c < n_keys; c++) {
                const int32_t pk = mask->pos[c];
                if ((mask->causal && pk > p) || (mask->window > 0 && abs(p - pk) >= mask->window)) s[c] = -INFINITY;
            }
        }
        float m = -INFINITY;
        for (int64_t c = 0; c < n_keys; c++) m = s[c] > m ? s[c] : m;
        if (m == -INFINITY) {
            memset(s, 0, sizeof(float) * (size_t)n_keys);
            sums[r] = 0.0f;
            continue;
        }
        sums[r] = (float)k->softmax_row(n_keys, s, m);
    }
    memset(O, 0, sizeof(float) * (size_t)(rows * v_dim));
    k->gemm_f32(rows, v_dim, n_keys, S, n_keys, v, v_stride, O, v_dim);
    for (int64_t r = 0; r < rows; r++) {
        const float inv = sums[r] == 0.0f ? 0.0f : 1.0f / sums[r];
        for (int64_t d = 0; d < v_dim; d++) out[r * out_stride + d] = O[r * v_dim + d] * inv;
    }
}

/* One query row against n_keys keys in rows (k_stride apart): the dot-product path of a
 * decoding step, where transposing the keys would cost as much as the products. */
static void attend_row(const cera_kernels *k, const float *q, const float *keys, int64_t k_stride, int64_t n_keys,
                       int64_t k_dim, const float *v, int64_t v_stride, int64_t v_dim, float scale, float *s,
                       float *out) {
    float m = -INFINITY;
    for (int64_t c = 0; c < n_keys; c++) {
        s[c] = k->dot_f32(k_dim, keys + c * k_stride, q) * scale;
        m = s[c] > m ? s[c] : m;
    }
    const float sum = (float)k->softmax_row(n_keys, s, m);
    memset(out, 0, sizeof(float) * (size_t)v_dim);
    for (int64_t c = 0; c < n_keys; c++) k->axpy_f32(v_dim, out, v + c * v_stride, s[c]);
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (int64_t d = 0; d < v_dim; d++) out[d] *= inv;
}

/* An attention problem of several sequences: per sequence its queries, keys and values. */
typedef struct {
    const float *q;       /* row r0 of the sequence */
    const float *k, *v;   /* key / value 0 of the sequence */
    float *out;
    int64_t r0, rows, n_keys;
    float *Kt;            /* per head: [k_dim][n_keys] (rows > 1) */
} attn_seq;

typedef struct {
    const cera_kernels *k;
    attn_seq *seqs;
    int n_seq;
    int64_t n_heads, n_kv_heads, k_dim, v_dim, k_stride, v_stride, max_keys;
    float scale, softcap;
    mask_info mask;
    int masked;
    int64_t first[65]; /* items of sequence s: [first[s], first[s + 1]) */
    float *scratch;    /* per thread: S (ATTN_ROWS x max_keys) and O (ATTN_ROWS x v_dim) */
    atomic_llong next;
} attn_problem;

static void attn_task(void *arg, int ith, int nth) {
    (void)nth;
    attn_problem *p = arg;
    float *S = p->scratch + (size_t)ith * (size_t)(ATTN_ROWS * (p->max_keys + p->v_dim));
    float *O = S + ATTN_ROWS * p->max_keys;
    const int64_t total = p->first[p->n_seq];
    for (;;) {
        const int64_t item = atomic_fetch_add(&p->next, 1);
        if (item >= total) break;
        int s = 0;
        while (item >= p->first[s + 1]) s++;
        const attn_seq *sq = &p->seqs[s];
        const int64_t local = item - p->first[s];
        const int64_t blocks = (sq->rows + ATTN_ROWS - 1) / ATTN_ROWS;
        const int64_t h = local / blocks, b = local % blocks;
        const int64_t g = h / (p->n_heads / p->n_kv_heads);
        const int64_t t0 = b * ATTN_ROWS;
        const int64_t rows = sq->rows - t0 < ATTN_ROWS ? sq->rows - t0 : ATTN_ROWS;
        const int64_t q_stride = p->n_heads * p->k_dim, out_stride = p->n_heads * p->v_dim;
        const float *q = sq->q + t0 * q_stride + h * p->k_dim;
        float *out = sq->out + t0 * out_stride + h * p->v_dim;
        if (sq->rows == 1 && !p->masked && p->softcap <= 0) {
            attend_row(p->k, q, sq->k + g * p->k_dim, p->k_stride, sq->n_keys, p->k_dim, sq->v + g * p->v_dim,
                       p->v_stride, p->v_dim, p->scale, S, out);
        } else {
            mask_info m = p->mask;
            if (p->masked) m.pos = p->mask.pos + sq->r0;
            attend_block(p->k, q, q_stride, rows, sq->Kt + g * p->k_dim * sq->n_keys, sq->n_keys, p->k_dim,
                         sq->v + g * p->v_dim, p->v_stride, p->v_dim, p->scale, p->softcap, p->masked ? &m : NULL, t0,
                         S, O, out, out_stride);
        }
    }
}

/* Runs an attention problem whose seqs[] are filled in (Kt unset). */
static int run_problem(cera_ctx *ctx, attn_problem *p) {
    if (p->n_seq <= 0 || p->n_seq > 64 || p->n_kv_heads <= 0 || p->n_heads % p->n_kv_heads) return CERA_EINVAL;
    const cera_kernels *k = &ctx->k;
    int64_t kt_floats = 0;
    p->max_keys = 1;
    p->first[0] = 0;
    for (int s = 0; s < p->n_seq; s++) {
        const attn_seq *sq = &p->seqs[s];
        if (sq->rows <= 0 || sq->n_keys <= 0) return CERA_EINVAL;
        if (sq->n_keys > p->max_keys) p->max_keys = sq->n_keys;
        const int row_path = sq->rows == 1 && !p->masked && p->softcap <= 0;
        if (!row_path) kt_floats += p->n_kv_heads * p->k_dim * sq->n_keys;
        p->first[s + 1] = p->first[s] + p->n_heads * ((sq->rows + ATTN_ROWS - 1) / ATTN_ROWS);
    }
    float *kt = kt_floats ? malloc(sizeof(float) * (size_t)kt_floats) : NULL;
    const int nth = ctx->n_threads;
    p->scratch = malloc(sizeof(float) * (size_t)nth * (size_t)(ATTN_ROWS * (p->max_keys + p->v_dim)));
    if ((kt_floats && !kt) || !p->scratch) {
        free(kt);
        free(p->scratch);
        return CERA_ENOMEM;
    }
    float *at = kt;
    for (int s = 0; s < p->n_seq; s++) {
        attn_seq *sq = &p->seqs[s];
        sq->Kt = NULL;
        if (sq->rows == 1 && !p->masked && p->softcap <= 0) continue;
        sq->Kt = at;
        for (int64_t g = 0; g < p->n_kv_heads; g++) {
            float *dst = at + g * p->k_dim * sq->n_keys;
            for (int64_t c = 0; c < sq->n_keys; c++) {
                const float *src = sq->k + c * p->k_stride + g * p->k_dim;
                for (int64_t d = 0; d < p->k_dim; d++) dst[d * sq->n_keys + c] = src[d];
            }
        }
        at += p->n_kv_heads * p->k_dim * sq->n_keys;
    }
    (void)k;
    atomic_store(&p->next, 0);
    cera_pool_run(ctx->pool, attn_task, p, nth);
    free(kt);
    free(p->scratch);
    return CERA_OK;
}

int cera_attention_full_unlocked(cera_ctx *ctx, const cera_attention_full_args *a) {
    if (!a->rows || a->n_seq <= 0 || a->n_seq > 64 || ((a->causal || a->window > 0) && !a->pos)) return CERA_EINVAL;
    attn_seq seqs[64];
    attn_problem p;
    memset(&p, 0, sizeof p);
    p.k = &ctx->k;
    p.seqs = seqs;
    p.n_seq = a->n_seq;
    p.n_heads = a->n_heads;
    p.n_kv_heads = a->n_kv_heads;
    p.k_dim = a->k_dim;
    p.v_dim = a->v_dim;
    p.k_stride = a->n_kv_heads * a->k_dim;
    p.v_stride = a->n_kv_heads * a->v_dim;
    p.scale = a->scale;
    p.softcap = a->softcap;
    p.masked = a->causal || a->window > 0;
    p.mask.pos = a->pos;
    p.mask.causal = a->causal;
    p.mask.window = a->window;
    for (int s = 0; s < a->n_seq; s++) {
        const int64_t r0 = a->rows[2 * s], n = a->rows[2 * s + 1];
        seqs[s].q = a->q + r0 * a->n_heads * a->k_dim;
        seqs[s].k = a->k + r0 * p.k_stride;
        seqs[s].v = a->v + r0 * p.v_stride;
        seqs[s].out = a->out + r0 * a->n_heads * a->v_dim;
        seqs[s].r0 = r0;
        seqs[s].rows = n;
        seqs[s].n_keys = n;
    }
    return run_problem(ctx, &p);
}

int cera_attention_full(cera_ctx *ctx, const cera_attention_full_args *a) {
    cera_ctx_lock(ctx);
    const int rc = cera_attention_full_unlocked(ctx, a);
    cera_ctx_unlock(ctx);
    return rc;
}

int cera_cross_attention_unlocked(cera_ctx *ctx, const cera_cross_args *a, void *const *table) {
    if (!a->rows || !a->slots || a->n_seq <= 0 || a->n_seq > 64 || !table) return CERA_EINVAL;
    const float *kc = table[a->k_index], *vc = table[a->v_index];
    const int64_t *len = table[a->len_index];
    attn_seq seqs[64];
    attn_problem p;
    memset(&p, 0, sizeof p);
    p.k = &ctx->k;
    p.seqs = seqs;
    p.n_seq = a->n_seq;
    p.n_heads = a->n_heads;
    p.n_kv_heads = a->n_kv_heads;
    p.k_dim = a->k_dim;
    p.v_dim = a->v_dim;
    p.k_stride = a->n_kv_heads * a->k_dim;
    p.v_stride = a->n_kv_heads * a->v_dim;
    p.scale = a->scale;
    for (int s = 0; s < a->n_seq; s++) {
        const int32_t slot = a->slots[s];
        if (slot < 0 || slot >= a->n_slots) return CERA_EINVAL;
        const int64_t n_keys = len[slot];
        if (n_keys <= 0 || n_keys > a->max_len) return CERA_EINVAL; /* no memory stored for the slot */
        const int64_t r0 = a->rows[2 * s];
        seqs[s].q = a->q + r0 * a->n_heads * a->k_dim;
        seqs[s].k = kc + (size_t)slot * (size_t)(a->max_len * p.k_stride);
        seqs[s].v = vc + (size_t)slot * (size_t)(a->max_len * p.v_stride);
        seqs[s].out = a->out + r0 * a->n_heads * a->v_dim;
        seqs[s].r0 = r0;
        seqs[s].rows = a->rows[2 * s + 1];
        seqs[s].n_keys = n_keys;
    }
    return run_problem(ctx, &p);
}

int cera_store_cross_unlocked(cera_ctx *ctx, const cera_store_cross_args *a, void *const *table) {
    (void)ctx;
    if (!a->rows || !a->slots || a->n_seq <= 0 || !table) return CERA_EINVAL;
    float *kc = table[a->k_index], *vc = table[a->v_index];
    int64_t *len = table[a->len_index];
    const int64_t kw = a->n_kv_heads * a->k_dim, vw = a->n_kv_heads * a->v_dim;
    for (int s = 0; s < a->n_seq; s++) {
        const int32_t slot = a->slots[s];
        const int64_t r0 = a->rows[2 * s], n = a->rows[2 * s + 1];
        if (slot < 0 || slot >= a->n_slots || n > a->max_len) return CERA_EINVAL;
        memcpy(kc + (size_t)slot * (size_t)(a->max_len * kw), a->k + r0 * kw, sizeof(float) * (size_t)(n * kw));
        memcpy(vc + (size_t)slot * (size_t)(a->max_len * vw), a->v + r0 * vw, sizeof(float) * (size_t)(n * vw));
        len[slot] = n;
    }
    return CERA_OK;
}
