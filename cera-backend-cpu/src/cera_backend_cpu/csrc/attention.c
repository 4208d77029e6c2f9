/* Attention over the KV cache: store this pass's keys and values, then attend.
 *
 * As llama.cpp's CPU flash attention (its default), which has two paths:
 *
 * - fewer than 64 query rows (decoding): per query row and head, with an f16 cache the
 *   query is rounded to f16 (the vec_dot_type of f16 keys), the logits and the online
 *   softmax run in f32, and the weighted sum of values may be kept in f16, rounded after
 *   every update;
 * - 64 query rows or more (prompts): tiles of 64 query rows x 64 cells in float32: the
 *   query stays f32, keys and values are widened to f32, the logits of a tile are one
 *   matrix product, the softmax runs tile by tile (running maximum and sum per row, the
 *   tile's sum in double), and the values are summed by a second product into an f32
 *   accumulator. Tiles that no query row of the tile can see are skipped.
 *
 * Storing K/V here rather than in the caller keeps a whole attention layer one op, so an
 * execution plan can replay it: the cells it writes (kv_start) are the only thing that
 * changes from one decode step to the next.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"
#include "kvcache.h"

/* Decoding one token over a long context is cut into chunks of cells as llama.cpp's CPU
 * flash attention does (its split-KV path): when the cache view it attends over (the used
 * cells rounded up to 256, at least 256, at most the cache size) reaches 512 cells, that
 * view is cut into one chunk per thread. Each chunk keeps its own running maximum, sum and
 * value accumulator, and the chunks are combined in f32 in order. The chunking, and so the
 * last bits, depend on the thread count and the cache size, as llama.cpp's do; a query of
 * several rows attends over all cells in one pass per (row, head). */
#define SMALL_DIM 512 /* head dimensions up to this use stack buffers */

/* Cache element types (kv_type, kvcache.h): float32, float16, Q8_0 or Q4_0 blocks (32
 * values: an f16 scale and 32 int8 or 4-bit codes; the row length must be a multiple of
 * 32), or TurboQuant rows (tq3, tq2). A Q4_0 key is dotted with the query in Q8_0, as
 * llama.cpp's vec_dot_type of Q4_0; its values are widened to f32. A TurboQuant key's dot
 * product is taken with the turned query (tq_query), its values are summed in the rotated space and the sum turned back once (tq_unrotate). Q8_0 and Q4_0
 * rows are kept turned by a Walsh-Hadamard matrix where kv_hadamard says so, as llama.cpp
 * keeps them: the query is turned the same way, and the output turned back. */

/* One cached row widened to f32 (TurboQuant rows: in the rotated space; a key scaled for
 * the turned query). */
static void kv_row_f32(const cera_kernels *k, int kv_type, int key, const char *src, float *dst, int64_t dim) {
    if (kv_type == KV_F16)
        k->f16_to_f32((const uint16_t *)src, dst, dim);
    else if (kv_type == KV_Q8_0)
        cera_types[T_Q8_0].dequant(src, dst, dim);
    else if (kv_type == KV_Q4_0)
        cera_types[T_Q4_0].dequant(src, dst, dim);
    else if (kv_is_tq(kv_type) && key)
        tq_key_expand(kv_type, src, dst, dim);
    else if (kv_is_tq(kv_type))
        tq_value_rotated(k, kv_type, src, dst, dim);
    else
        memcpy(dst, src, sizeof(float) * (size_t)dim);
}

typedef struct {
    const cera_kernels *k;
    const float *q;
    int64_t n_tok, n_heads, k_dim, v_dim, n_kv_heads, capacity, n_ctx, n_cells;
    int64_t first_present; /* cells before it have left a sliding-window ring */
    int64_t base;          /* physical cell of first_present, minus first_present */
    const char *k_cache, *v_cache;
    int kv_type;
    size_t k_row, v_row; /* bytes of a cached key / value row */
    const int32_t *cell_pos, *q_pos;
    float scale, softcap;
    int32_t window;
    int acc_f16;
    float *out;
    int64_t n_chunks, chunk; /* cells per chunk */
    float *partials; /* [n_tok * n_heads][n_chunks][2 + v_dim]: M, S, values (n_chunks > 1) */
} attn_job;

/* One pool job over the items (query row, head, chunk) of one or more attention jobs:
 * the sequences of a decode batch, each in its own slot, are one hand-over to the pool.
 * An item's arithmetic does not depend on which job list it is in or which thread runs it. */
#define MAX_BATCH_JOBS 64
typedef struct {
    attn_job *jobs;
    int n_jobs;
    int64_t first[MAX_BATCH_JOBS + 1]; /* job j's items: [first[j], first[j + 1]) */
    atomic_llong next;
    int failed;
} attn_batch;

/* The physical cell of sequence cell c (>= first_present): a full cache stores cell c at
 * c; a sliding-window ring of `capacity` cells at c % capacity, which over the cells it
 * still holds wraps at most once, so a compare replaces the division. */
CERA_INLINE int64_t physical(const attn_job *job, int64_t c) {
    int64_t ph = c - job->base;
    return ph >= job->capacity ? ph - job->capacity : ph;
}

/* The position of sequence cell c, or -1 when the cell is empty or has left the ring. */
CERA_INLINE int32_t cell_position(const attn_job *job, int64_t c) {
    return c < job->first_present ? -1 : job->cell_pos[c];
}

static void attn_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    attn_batch *batch = varg;
    attn_job *job = &batch->jobs[0];
    const cera_kernels *k = job->k;
    const int64_t DK = job->k_dim, DV = job->v_dim; /* the same layer: one shape for every job */
    float acc_stack[SMALL_DIM], vrow_stack[SMALL_DIM];
    uint16_t q16_stack[SMALL_DIM], acc16_stack[SMALL_DIM];
    /* a Q8_0 activation row with its side data (cera_act_bytes: at most 70 bytes a block + 125) */
    _Alignas(64) char q8_stack[SMALL_DIM / 32 * 70 + 128];
    float qx_stack[2 * SMALL_DIM];
    float *acc = acc_stack, *vrow = vrow_stack, *qx = qx_stack;
    uint16_t *q16 = q16_stack, *acc16 = acc16_stack;
    char *q8 = q8_stack;
    void *heap = NULL;
    if (DK > SMALL_DIM || DV > SMALL_DIM) {
        heap = malloc(sizeof(float) * (size_t)(2 * DV + 2 * DK) + sizeof(uint16_t) * (size_t)(DK + DV) +
                      (size_t)cera_act_bytes(ACT_Q8_0, DK) + 64);
        if (!heap) {
            batch->failed = 1;
            return;
        }
        acc = heap;
        vrow = acc + DV;
        q16 = (uint16_t *)(vrow + DV);
        acc16 = q16 + DK;
        qx = (float *)(acc16 + DV);
        q8 = (char *)(qx + 2 * DK);
    }
    const float logit_mul = job->softcap > 0 ? job->scale / job->softcap : job->scale;
    const int kv_type = job->kv_type;
    const int f16acc = kv_type == KV_F16 && job->acc_f16;
    const int64_t group = job->n_heads / job->n_kv_heads;
    const int rot_k = kv_hadamard(kv_type, DK, 1), rot_v = kv_hadamard(kv_type, DV, 0);
    int j = 0;
    for (;;) {
        const int64_t global = atomic_fetch_add_explicit(&batch->next, 1, memory_order_relaxed);
        if (global >= batch->first[batch->n_jobs]) break;
        while (global >= batch->first[j + 1]) j++; /* items are handed out in order */
        job = &batch->jobs[j];
        const int64_t item = global - batch->first[j];
        const int64_t th = item / job->n_chunks, chunk = item % job->n_chunks;
        const int64_t t = th / job->n_heads, h = th % job->n_heads, g = h / group;
        const float *q = job->q + (t * job->n_heads + h) * DK;
        /* the query in the format the keys' dot product takes (llama.cpp's vec_dot_type) */
        if (kv_type == KV_F16) k->quant[ACT_F16](q, q16, DK); /* round to nearest even, as f32_to_f16 */
        if (kv_type == KV_Q8_0 || kv_type == KV_Q4_0) {
            if (rot_k) { /* the query turned as the keys were (qx is free: not TurboQuant) */
                memcpy(qx, q, sizeof(float) * (size_t)DK);
                kv_hadamard_rotate(qx, DK, rot_k);
                k->quant[ACT_Q8_0](qx, q8, DK);
            } else {
                k->quant[ACT_Q8_0](q, q8, DK);
            }
        }
        if (kv_is_tq(kv_type)) tq_query(DK, q, qx);
        const char *kc = job->k_cache + (size_t)(g * job->capacity) * job->k_row;
        const char *vc = job->v_cache + (size_t)(g * job->capacity) * job->v_row;
        const int32_t p = job->q_pos[t];
        float M = -INFINITY, S = 0.0f;
        memset(acc, 0, sizeof(float) * (size_t)DV);
        memset(acc16, 0, sizeof(uint16_t) * (size_t)DV);
        const int64_t c1 = (chunk + 1) * job->chunk < job->n_cells ? (chunk + 1) * job->chunk : job->n_cells;
        int64_t c = chunk * job->chunk;
        if (c < job->first_present) c = job->first_present;
        for (; c < c1; c++) {
            const int32_t pc = job->cell_pos[c];
            if (pc < 0 || pc > p || (job->window > 0 && p - pc >= job->window)) continue;
            const int64_t ph = physical(job, c);
            float s;
            const char *krow = kc + (size_t)ph * job->k_row, *vrow_c = vc + (size_t)ph * job->v_row;
            if (kv_type == KV_F16)
                s = k->dot_f16(DK, (const uint16_t *)krow, q16);
            else if (kv_type == KV_Q8_0)
                k->dot[T_Q8_0](DK, krow, q8, &s);
            else if (kv_type == KV_Q4_0)
                k->dot[T_Q4_0](DK, krow, q8, &s);
            else if (kv_is_tq(kv_type))
                s = tq_key_dot(k, kv_type, krow, qx, DK);
            else
                s = k->dot_f32(DK, (const float *)krow, q);
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
                if (ms != 1.0f) k->scale_f16(DV, acc16, ms);
                k->mad_f16(DV, acc16, (const uint16_t *)vrow_c, vs);
            } else {
                if (ms != 1.0f) k->scale_f32(DV, acc, ms);
                if (kv_type == KV_F16) {
                    k->axpy_f16(DV, acc, (const uint16_t *)vrow_c, vs);
                } else if (kv_type == KV_Q8_0 || kv_type == KV_Q4_0) { /* widened to f32 first, as llama.cpp's v_to_float */
                    cera_types[kv_type == KV_Q8_0 ? T_Q8_0 : T_Q4_0].dequant(vrow_c, vrow, DV);
                    k->axpy_f32(DV, acc, vrow, vs);
                } else if (kv_is_tq(kv_type)) {
                    tq_value_axpy(k, kv_type, vrow_c, vs, acc, DV);
                } else {
                    k->axpy_f32(DV, acc, (const float *)vrow_c, vs);
                }
            }
            S = fmaf(S, ms, vs); /* as GCC contracts ggml's S = S*ms + vs */
        }
        if (f16acc)
            for (int64_t i = 0; i < DV; i++) acc[i] = f16_to_f32(acc16[i]);
        if (job->n_chunks > 1) {
            float *part = job->partials + (th * job->n_chunks + chunk) * (2 + DV);
            part[0] = M;
            part[1] = S;
            memcpy(part + 2, acc, sizeof(float) * (size_t)DV);
        } else {
            float *o = job->out + th * DV;
            const float inv = S == 0.0f ? 0.0f : 1.0f / S;
            if (kv_is_tq(kv_type)) tq_unrotate(DV, acc, vrow);
            for (int64_t i = 0; i < DV; i++) o[i] = acc[i] * inv;
            if (rot_v) kv_hadamard_rotate(o, DV, rot_v); /* back from the values' turn */
        }
    }
    free(heap);
}

/* The chunks of each (query row, head) combined in order, in f32. */
static int reduce_chunks(const attn_job *job) {
    const int64_t DV = job->v_dim;
    const int rot_v = kv_hadamard(job->kv_type, DV, 0);
    float *tmp = kv_is_tq(job->kv_type) ? malloc(sizeof(float) * (size_t)DV) : NULL;
    if (kv_is_tq(job->kv_type) && !tmp) return CERA_ENOMEM;
    for (int64_t th = 0; th < job->n_tok * job->n_heads; th++) {
        float M = -INFINITY, S = 0.0f;
        float *o = job->out + th * DV;
        memset(o, 0, sizeof(float) * (size_t)DV);
        for (int64_t c = 0; c < job->n_chunks; c++) {
            const float *part = job->partials + (th * job->n_chunks + c) * (2 + DV);
            if (part[1] == 0.0f) continue; /* no visible cell in this chunk */
            const float m_new = fmaxf(M, part[0]);
            const float s_old = expf(M - m_new), s_new = expf(part[0] - m_new);
            /* ggml's a*x + b*y as GCC contracts it: fma(a, x, b*y) */
            for (int64_t i = 0; i < DV; i++) o[i] = fmaf(o[i], s_old, part[2 + i] * s_new);
            S = fmaf(S, s_old, part[1] * s_new);
            M = m_new;
        }
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        if (tmp) tq_unrotate(DV, o, tmp);
        for (int64_t i = 0; i < DV; i++) o[i] *= inv;
        if (rot_v) kv_hadamard_rotate(o, DV, rot_v);
    }
    free(tmp);
    return CERA_OK;
}

/* -- many query rows: tiles ----------------------------------------------------------------- */

#define TQ 64  /* query rows per tile (llama.cpp's GGML_FA_TILE_Q) */
#define TKV 64 /* cells per tile (GGML_FA_TILE_KV) */

typedef struct {
    const attn_job *job;
    int64_t n_qtiles;
    atomic_llong next; /* next (head, query tile) */
    int failed;
} tiled_job;

CERA_INLINE int visible(const attn_job *job, int32_t pc, int32_t p) {
    return pc >= 0 && pc <= p && !(job->window > 0 && p - pc >= job->window);
}

static void tiled_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    tiled_job *tj = varg;
    const attn_job *job = tj->job;
    const cera_kernels *k = job->k;
    const int tq = kv_is_tq(job->kv_type);
    const int64_t DK = job->k_dim, DV = job->v_dim, group = job->n_heads / job->n_kv_heads;
    float *buf = malloc(sizeof(float) * (size_t)(TQ * DK + DK * TKV + TKV * DV + TQ * TKV + TQ * DV + (DK > DV ? DK : DV)));
    if (!buf) {
        tj->failed = 1;
        return;
    }
    float *Q = buf, *Kt = Q + TQ * DK, *V = Kt + DK * TKV, *KQ = V + TKV * DV, *O = KQ + TQ * TKV, *row = O + TQ * DV;
    const float logit_mul = job->softcap > 0 ? job->scale / job->softcap : job->scale;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&tj->next, 1, memory_order_relaxed);
        if (item >= job->n_heads * tj->n_qtiles) break;
        const int64_t h = item / tj->n_qtiles, t0 = (item % tj->n_qtiles) * TQ, g = h / group;
        const int64_t rows = job->n_tok - t0 < TQ ? job->n_tok - t0 : TQ;
        for (int64_t r = 0; r < rows; r++) {
            const float *qr = job->q + ((t0 + r) * job->n_heads + h) * job->k_dim;
            if (tq)
                tq_query(job->k_dim, qr, Q + r * DK);
            else
                memcpy(Q + r * DK, qr, sizeof(float) * (size_t)DK);
        }
        memset(O, 0, sizeof(float) * (size_t)(TQ * DV));
        float M[TQ], S[TQ];
        int32_t pmin = INT32_MAX, pmax = INT32_MIN;
        for (int64_t r = 0; r < rows; r++) {
            M[r] = -INFINITY;
            S[r] = 0.0f;
            const int32_t p = job->q_pos[t0 + r];
            pmin = p < pmin ? p : pmin;
            pmax = p > pmax ? p : pmax;
        }
        const char *kc = job->k_cache + (size_t)(g * job->capacity) * job->k_row;
        const char *vc = job->v_cache + (size_t)(g * job->capacity) * job->v_row;
        for (int64_t c0 = 0; c0 < job->n_cells; c0 += TKV) {
            const int64_t cells = job->n_cells - c0 < TKV ? job->n_cells - c0 : TKV;
            /* skip a tile that no query row of this tile sees; note one that every row sees whole */
            int any = 0, all = 1;
            for (int64_t c = 0; c < cells; c++) {
                const int32_t pc = cell_position(job, c0 + c);
                any |= pc >= 0 && pc <= pmax && !(job->window > 0 && pmin - pc >= job->window);
                all &= pc >= 0 && pc <= pmin && !(job->window > 0 && pmax - pc >= job->window);
            }
            if (!any) continue;
            /* keys transposed (a cell per column), values as rows, widened to f32 */
            for (int64_t c = 0; c < cells; c++) {
                if (c0 + c < job->first_present) { /* left the ring: invisible, weight 0 */
                    memset(row, 0, sizeof(float) * (size_t)DK);
                    memset(V + c * DV, 0, sizeof(float) * (size_t)DV);
                } else {
                    const int64_t ph = physical(job, c0 + c);
                    kv_row_f32(k, job->kv_type, 1, kc + (size_t)ph * job->k_row, row, job->k_dim);
                    kv_row_f32(k, job->kv_type, 0, vc + (size_t)ph * job->v_row, V + c * DV, DV);
                }
                for (int64_t d = 0; d < DK; d++) Kt[d * TKV + c] = row[d];
            }
            memset(KQ, 0, sizeof(float) * (size_t)(TQ * TKV));
            k->gemm_f32(rows, cells, DK, Q, DK, Kt, TKV, KQ, TKV);
            for (int64_t r = 0; r < rows; r++) {
                float *s = KQ + r * TKV;
                const int32_t p = job->q_pos[t0 + r];
                float tile_max = -INFINITY;
                if (job->softcap > 0)
                    for (int64_t c = 0; c < cells; c++) s[c] = job->softcap * tanhf(s[c] * logit_mul);
                else
                    for (int64_t c = 0; c < cells; c++) s[c] = s[c] * logit_mul;
                if (!all)
                    for (int64_t c = 0; c < cells; c++)
                        if (!visible(job, cell_position(job, c0 + c), p)) s[c] = -INFINITY;
                for (int64_t c = 0; c < cells; c++) tile_max = s[c] > tile_max ? s[c] : tile_max;
                if (tile_max == -INFINITY) { /* nothing visible in this tile: adds nothing */
                    memset(s, 0, sizeof(float) * (size_t)cells);
                    continue;
                }
                const float m_new = fmaxf(M[r], tile_max);
                if (m_new > M[r]) {
                    const float ms = expf(M[r] - m_new);
                    k->scale_f32(DV, O + r * DV, ms);
                    S[r] *= ms;
                }
                M[r] = m_new;
                S[r] = (float)((double)S[r] + k->softmax_row(cells, s, m_new));
            }
            k->gemm_f32(rows, DV, cells, KQ, TKV, V, DV, O, DV);
        }
        for (int64_t r = 0; r < rows; r++) {
            float *o = job->out + ((t0 + r) * job->n_heads + h) * DV;
            const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
            if (tq) tq_unrotate(DV, O + r * DV, row);
            for (int64_t d = 0; d < DV; d++) o[d] = O[r * DV + d] * inv;
        }
    }
    free(buf);
}

/* x [n_tok, n_kv_heads, dim] into sequence cells [start, start + n_tok) of cache
 * [n_kv_heads][capacity][row] (cell c at c % capacity), converted to the cache's type: f16
 * rounded to nearest even (as ggml's conversion), Q8_0 by the activation quantizer (llama.cpp
 * quantizes cache rows with the same from_float). Returns CERA_ENOMEM if Q8_0 needs a
 * buffer it cannot get. */
static int store_cells(const cera_kernels *k, const float *x, int64_t n_tok, int64_t n_kv_heads, int64_t dim,
                       char *cache, int kv_type, int key, int64_t capacity, int64_t start, const float *offset) {
    const size_t row = kv_row_bytes(kv_type, dim, key);
    float *scratch = NULL;
    if (kv_type == KV_Q8_0 || kv_type == KV_Q4_0 || kv_is_tq(kv_type)) {
        const size_t need = sizeof(float) * (size_t)(4 * dim) + (size_t)cera_act_bytes(ACT_Q8_0, dim);
        scratch = malloc(need);
        if (!scratch) return CERA_ENOMEM;
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = 0; h < n_kv_heads; h++) {
            const float *src = x + (t * n_kv_heads + h) * dim;
            char *dst = cache + (size_t)(h * capacity + (start + t) % capacity) * row;
            float *work = scratch;
            if (offset && scratch) { /* the row less its head's offset (TurboQuant keys) first, the store's
                                        scratch after it */
                for (int64_t i = 0; i < dim; i++) scratch[i] = src[i] - offset[h * dim + i];
                src = scratch;
                work = scratch + dim;
            }
            kv_store_row(k, kv_type, key, src, dst, dim, work);
        }
    free(scratch);
    return CERA_OK;
}

/* Store the pass's keys and values and fill `job` for one sequence. Returns 1 when the
 * rows take the tiled path (64+ query rows, run at once here), 0 when `job` is ready for
 * attn_task, or a negative CERA_E* code. */
static int attn_prepare(cera_ctx *ctx, const float *q, const float *k, const float *v, int64_t n_tok, int64_t n_heads,
                        int64_t n_kv_heads, int64_t k_dim, int64_t v_dim, void *k_cache, void *v_cache, int kv_type,
                        int64_t capacity, int64_t n_ctx, const int32_t *cell_pos, const int32_t *q_pos, float scale,
                        int32_t window, float softcap, int acc_f16, float *out, int64_t kv_start, int tiled,
                        const float *k_offset, attn_job *job) {
    const int64_t n_cells = kv_start + n_tok;
    if (n_kv_heads <= 0 || n_heads % n_kv_heads || kv_start < 0 || n_cells > n_ctx || n_tok > capacity ||
        capacity > n_ctx || capacity <= 0 || kv_check_dim(kv_type, k_dim) != CERA_OK ||
        kv_check_dim(kv_type, v_dim) != CERA_OK)
        return CERA_EINVAL;
    if (store_cells(&ctx->k, k, n_tok, n_kv_heads, k_dim, k_cache, kv_type, 1, capacity, kv_start, k_offset) != CERA_OK ||
        store_cells(&ctx->k, v, n_tok, n_kv_heads, v_dim, v_cache, kv_type, 0, capacity, kv_start, NULL) != CERA_OK)
        return CERA_ENOMEM;
    job->k = &ctx->k;
    job->q = q;
    job->n_tok = n_tok;
    job->n_heads = n_heads;
    job->k_dim = k_dim;
    job->v_dim = v_dim;
    job->n_kv_heads = n_kv_heads;
    job->capacity = capacity;
    job->n_ctx = n_ctx;
    job->n_cells = n_cells;
    job->first_present = n_cells > capacity ? n_cells - capacity : 0;
    job->base = job->first_present / capacity * capacity;
    job->k_cache = k_cache;
    job->v_cache = v_cache;
    job->kv_type = kv_type;
    job->k_row = kv_row_bytes(kv_type, k_dim, 1);
    job->v_row = kv_row_bytes(kv_type, v_dim, 0);
    job->cell_pos = cell_pos;
    job->q_pos = q_pos;
    job->scale = scale;
    job->softcap = softcap;
    job->window = window;
    job->acc_f16 = acc_f16;
    job->out = out;
    job->partials = NULL;
    const int64_t work = n_tok * n_heads * n_cells * (k_dim + v_dim);
    /* Q8_0 and Q4_0 caches take the per-row path for any row count, as llama.cpp's CPU flash
     * attention does (its tiles are for f32 and f16 caches only): the query in Q8_0 against
     * each key's blocks, each value widened to f32. */
    const int tiles = !(kv_type == KV_Q8_0 || kv_type == KV_Q4_0);
    if (tiles && (n_tok >= TQ || tiled)) {
        tiled_job tj;
        tj.job = job;
        tj.n_qtiles = (n_tok + TQ - 1) / TQ;
        tj.failed = 0;
        atomic_init(&tj.next, 0);
        cera_pool_run(ctx->pool, tiled_task, &tj, work < 32768 ? 1 : ctx->n_threads);
        return tj.failed ? CERA_ENOMEM : 1;
    }
    job->chunk = n_cells;
    if (n_tok == 1 && !tiled) { /* a prompt's row (tiled) is computed as every other prompt row */
        int64_t n_kv = (n_cells + 255) / 256 * 256;
        n_kv = n_kv < 256 ? 256 : n_kv > n_ctx ? n_ctx : n_kv; /* llama.cpp's view of a cache of n_ctx cells */
        if (n_kv >= 512) job->chunk = (n_kv + ctx->n_threads - 1) / ctx->n_threads;
    }
    job->n_chunks = (n_cells + job->chunk - 1) / job->chunk;
    return CERA_OK;
}

/* The per-row path of prepared jobs, as one pool job; then each job's chunks combined. */
static int attn_run(cera_ctx *ctx, attn_job *jobs, int n_jobs) {
    attn_batch batch;
    batch.jobs = jobs;
    batch.n_jobs = n_jobs;
    batch.failed = 0;
    atomic_init(&batch.next, 0);
    size_t scratch = 0;
    int64_t work = 0;
    batch.first[0] = 0;
    for (int j = 0; j < n_jobs; j++) {
        const attn_job *job = &jobs[j];
        batch.first[j + 1] = batch.first[j] + job->n_tok * job->n_heads * job->n_chunks;
        if (job->n_chunks > 1) scratch += (size_t)(job->n_tok * job->n_heads * job->n_chunks * (2 + job->v_dim));
        work += job->n_tok * job->n_heads * job->n_cells * (job->k_dim + job->v_dim);
    }
    if (scratch) {
        float *space = cera_scratch(ctx, sizeof(float) * scratch);
        if (!space) return CERA_ENOMEM;
        for (int j = 0; j < n_jobs; j++)
            if (jobs[j].n_chunks > 1) {
                jobs[j].partials = space;
                space += jobs[j].n_tok * jobs[j].n_heads * jobs[j].n_chunks * (2 + jobs[j].v_dim);
            }
    }
    int nth = work < 32768 ? 1 : ctx->n_threads;
    if (batch.first[n_jobs] < nth) nth = (int)batch.first[n_jobs];
    if (nth < 1) return CERA_OK;
    cera_pool_run(ctx->pool, attn_task, &batch, nth);
    if (batch.failed) return CERA_ENOMEM;
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].n_chunks > 1 && reduce_chunks(&jobs[j]) != CERA_OK) return CERA_ENOMEM;
    return CERA_OK;
}

int cera_attention_unlocked(cera_ctx *ctx, const float *q, const float *k, const float *v, int64_t n_tok,
                            int64_t n_heads, int64_t n_kv_heads, int64_t k_dim, int64_t v_dim, void *k_cache,
                            void *v_cache, int kv_type, int64_t capacity, int64_t n_ctx, const int32_t *cell_pos,
                            const int32_t *q_pos, float scale, int32_t window, float softcap, int acc_f16, float *out,
                            int64_t kv_start) {
    attn_job job;
    const int rc = attn_prepare(ctx, q, k, v, n_tok, n_heads, n_kv_heads, k_dim, v_dim, k_cache, v_cache, kv_type,
                                capacity, n_ctx, cell_pos, q_pos, scale, window, softcap, acc_f16, out, kv_start, 0,
                                NULL, &job);
    if (rc != CERA_OK) return rc < 0 ? rc : CERA_OK;
    return attn_run(ctx, &job, 1);
}

int cera_attention(cera_ctx *ctx, const float *q, const float *k, const float *v, int64_t n_tok, int64_t n_heads,
                   int64_t n_kv_heads, int64_t k_dim, int64_t v_dim, void *k_cache, void *v_cache, int kv_type,
                   int64_t capacity, int64_t n_ctx, const int32_t *cell_pos, const int32_t *q_pos, float scale,
                   int32_t window, float softcap, int acc_f16, float *out, int64_t kv_start) {
    cera_ctx_lock(ctx);
    const int rc = cera_attention_unlocked(ctx, q, k, v, n_tok, n_heads, n_kv_heads, k_dim, v_dim, k_cache, v_cache,
                                           kv_type, capacity, n_ctx, cell_pos, q_pos, scale, window, softcap, acc_f16,
                                           out, kv_start);
    cera_ctx_unlock(ctx);
    return rc;
}

int cera_attention_seqs_unlocked(cera_ctx *ctx, const cera_attention_seqs *a, void *const *table) {
    const char *k_base = table[a->k_index], *v_base = table[a->v_index];
    const int32_t *pos_base = table[a->pos_index];
    const float *k_offset = a->koff_index >= 0 ? table[a->koff_index] : NULL;
    if (!k_base || !v_base || !pos_base || (a->koff_index >= 0 && !kv_is_tq(a->kv_type))) return CERA_EINVAL;
    if (kv_check_dim(a->kv_type, a->k_dim) != CERA_OK || kv_check_dim(a->kv_type, a->v_dim) != CERA_OK) return CERA_EINVAL;
    const size_t k_slot = (size_t)(a->n_kv_heads * a->capacity) * kv_row_bytes(a->kv_type, a->k_dim, 1);
    const size_t v_slot = (size_t)(a->n_kv_heads * a->capacity) * kv_row_bytes(a->kv_type, a->v_dim, 0);
    attn_job jobs[MAX_BATCH_JOBS];
    int n_jobs = 0;
    for (int s = 0; s < a->n_seq; s++) {
        const int64_t r0 = a->rows[2 * s], n = a->rows[2 * s + 1];
        const int32_t slot = a->slots[s];
        if (slot < 0 || slot >= a->n_slots) return CERA_EINVAL;
        /* per_row: one job per row, as a one-token step at its cell (its chunking included) */
        const int one = a->per_row == CERA_ROWS_ONE;
        const int64_t parts = one ? n : 1, rows_each = one ? 1 : n;
        for (int64_t part = 0; part < parts; part++) {
            if (n_jobs == MAX_BATCH_JOBS) {
                const int rc = attn_run(ctx, jobs, n_jobs);
                if (rc != CERA_OK) return rc;
                n_jobs = 0;
            }
            const int64_t r = r0 + part;
            const int rc = attn_prepare(
                ctx, a->q + r * a->n_heads * a->k_dim, a->k + r * a->n_kv_heads * a->k_dim,
                a->v + r * a->n_kv_heads * a->v_dim, rows_each, a->n_heads, a->n_kv_heads, a->k_dim, a->v_dim,
                (char *)k_base + slot * k_slot, (char *)v_base + slot * v_slot, a->kv_type, a->capacity, a->n_ctx,
                pos_base + (int64_t)slot * a->n_ctx, a->q_pos + r, a->scale, a->window, a->softcap, a->acc_f16,
                a->out + r * a->n_heads * a->v_dim, a->starts[s] + part, a->per_row == CERA_ROWS_PROMPT,
                k_offset, &jobs[n_jobs]);
            if (rc < 0) return rc;
            if (rc == CERA_OK) n_jobs++; /* rc 1: a prompt's tiles, done already */
        }
    }
    return n_jobs ? attn_run(ctx, jobs, n_jobs) : CERA_OK;
}
