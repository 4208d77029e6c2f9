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

/* -- float32 tiles ------------------------------------------------------------------------------ */

/* C[M x N] += A[M x K] B[K x N], every element one fused multiply-add chain over k in order,
 * as the variant's k->gemm_f32 computes it (so the same bits), in tiles of R x 16 on AVX2
 * (R = 6: twelve accumulators, two loads of B and six broadcasts of A per twelve
 * multiply-adds, where k->gemm_f32's 4 x 16 tiles load six values per eight). The last
 * M % 6 rows take the same tile with R = M % 6, so no row is left to one dependent chain
 * of multiply-adds (attention's 64-row blocks have 4 such rows: a third of the block's
 * time went to them before). Elsewhere k->gemm_f32. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(CERA_NO_TILE6)
#include <immintrin.h>
#define CERA_HAVE_TILE6 1
__attribute__((target("avx2,fma"), always_inline)) static inline void tile_rows(const int R, int64_t i, int64_t N,
                                                                               int64_t K, const float *A, int64_t lda,
                                                                               const float *B, int64_t ldb, float *C,
                                                                               int64_t ldc) {
    int64_t j = 0;
    for (; j + 16 <= N; j += 16) {
        __m256 c[6][2];
        for (int r = 0; r < R; r++) {
            c[r][0] = _mm256_loadu_ps(C + (i + r) * ldc + j);
            c[r][1] = _mm256_loadu_ps(C + (i + r) * ldc + j + 8);
        }
        for (int64_t k = 0; k < K; k++) {
            const __m256 b0 = _mm256_loadu_ps(B + k * ldb + j), b1 = _mm256_loadu_ps(B + k * ldb + j + 8);
            for (int r = 0; r < R; r++) {
                const __m256 a = _mm256_broadcast_ss(A + (i + r) * lda + k);
                c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
                c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
            }
        }
        for (int r = 0; r < R; r++) {
            _mm256_storeu_ps(C + (i + r) * ldc + j, c[r][0]);
            _mm256_storeu_ps(C + (i + r) * ldc + j + 8, c[r][1]);
        }
    }
    for (; j + 8 <= N; j += 8) {
        __m256 c[6];
        for (int r = 0; r < R; r++) c[r] = _mm256_loadu_ps(C + (i + r) * ldc + j);
        for (int64_t k = 0; k < K; k++) {
            const __m256 b0 = _mm256_loadu_ps(B + k * ldb + j);
            for (int r = 0; r < R; r++) c[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(A + (i + r) * lda + k), b0, c[r]);
        }
        for (int r = 0; r < R; r++) _mm256_storeu_ps(C + (i + r) * ldc + j, c[r]);
    }
    for (; j < N; j++)
        for (int r = 0; r < R; r++) {
            float acc = C[(i + r) * ldc + j];
            for (int64_t k = 0; k < K; k++) acc = fmaf(A[(i + r) * lda + k], B[k * ldb + j], acc);
            C[(i + r) * ldc + j] = acc;
        }
}

__attribute__((target("avx2,fma"))) static void gemm_tile6(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                                           const float *B, int64_t ldb, float *C, int64_t ldc) {
    int64_t i = 0;
    for (; i + 6 <= M; i += 6) tile_rows(6, i, N, K, A, lda, B, ldb, C, ldc);
    switch (M - i) {
    case 5: tile_rows(5, i, N, K, A, lda, B, ldb, C, ldc); break;
    case 4: tile_rows(4, i, N, K, A, lda, B, ldb, C, ldc); break;
    case 3: tile_rows(3, i, N, K, A, lda, B, ldb, C, ldc); break;
    case 2: tile_rows(2, i, N, K, A, lda, B, ldb, C, ldc); break;
    case 1: tile_rows(1, i, N, K, A, lda, B, ldb, C, ldc); break;
    default: break;
    }
}
#endif

static void gemm(const cera_kernels *k, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float *C, int64_t ldc) {
#ifdef CERA_HAVE_TILE6
    /* the x86 variants other than scalar have AVX2 and FMA (dispatch.c checks before choosing them) */
    if (strcmp(k->name, "scalar") != 0) {
        gemm_tile6(M, N, K, A, lda, B, ldb, C, ldc);
        return;
    }
#endif
    k->gemm_f32(M, N, K, A, lda, B, ldb, C, ldc);
}

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
        gemm(j->k, rows, j->c_out, width, cols, width, j->wt, j->c_out, y, j->c_out);
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
 * Kt: the head's keys transposed ([k_dim][ld]); v rows v_stride apart. mask(row, key)
 * (NULL: everything visible) hides a key from a row. S: rows x ld scratch, O: rows x
 * v_dim scratch. ld: n_keys rounded up to 16 and Kt and S 64-byte aligned, so that the
 * tile's 16-wide loads and stores of their rows each touch one cache line (Whisper's 1500
 * keys: rows 6000 bytes apart split every one of them over two). */
typedef struct {
    const int32_t *pos; /* row positions (sequence-local rows: pos[r0 + r]) */
    int causal;
    int32_t window;
} mask_info;

static void attend_block(const cera_kernels *k, const float *q, int64_t q_stride, int64_t rows, const float *Kt,
                         int64_t n_keys, int64_t ld, int64_t k_dim, const float *v, int64_t v_stride, int64_t v_dim, float scale,
                         float softcap, const mask_info *mask, int64_t row0, float *S, float *O, float *out,
                         int64_t out_stride) {
    memset(S, 0, sizeof(float) * (size_t)(rows * ld));
    gemm(k, rows, n_keys, k_dim, q, q_stride, Kt, ld, S, ld);
    float sums[ATTN_ROWS];
    for (int64_t r = 0; r < rows; r++) {
        float *s = S + r * ld;
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
    gemm(k, rows, v_dim, n_keys, S, ld, v, v_stride, O, v_dim);
    for (int64_t r = 0; r < rows; r++) {
        const float inv = sums[r] == 0.0f ? 0.0f : 1.0f / sums[r];
        for (int64_t d = 0; d < v_dim; d++) out[r * out_stride + d] = O[r * v_dim + d] * inv;
    }
}

/* The two loops of a one-row attention, written for the compiler to vectorise: eight
 * partial sums per dot product, a plain axpy. On x86 with GCC they are also built for
 * AVX-512 and AVX2 and chosen at load time (target_clones); elsewhere the baseline build
 * vectorises them. The build does not contract multiply-adds (-ffp-contract=off) and the
 * source fixes the order of every sum, so each clone computes the same bits; only the
 * vector width differs (the exact GELU's double-precision loop: 8 lanes instead of 4). */
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define CERA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CERA_CLONES
#endif

CERA_CLONES static void row_logits(const float *q, const float *keys, int64_t k_stride, int64_t n_keys, int64_t k_dim,
                                   float scale, float *s) {
    for (int64_t c = 0; c < n_keys; c++) {
        const float *kr = keys + c * k_stride;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t d = 0;
        for (; d + 8 <= k_dim; d += 8)
            for (int j = 0; j < 8; j++) acc[j] += kr[d + j] * q[d + j];
        float t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; d < k_dim; d++) t += kr[d] * q[d];
        s[c] = t * scale;
    }
}

CERA_CLONES static void row_values(const float *p, const float *v, int64_t v_stride, int64_t n_keys, int64_t v_dim,
                                   float *out) {
    for (int64_t c = 0; c < n_keys; c++) {
        const float *vr = v + c * v_stride;
        const float w = p[c];
        for (int64_t d = 0; d < v_dim; d++) out[d] += w * vr[d];
    }
}

/* One query row against n_keys keys in rows (k_stride apart): the dot-product path of a
 * decoding step, where transposing the keys would cost as much as the products. */
static void attend_row(const cera_kernels *k, const float *q, const float *keys, int64_t k_stride, int64_t n_keys,
                       int64_t k_dim, const float *v, int64_t v_stride, int64_t v_dim, float scale, float *s,
                       float *out) {
    row_logits(q, keys, k_stride, n_keys, k_dim, scale, s);
    float m = -INFINITY;
    for (int64_t c = 0; c < n_keys; c++) m = s[c] > m ? s[c] : m;
    const float sum = (float)k->softmax_row(n_keys, s, m);
    memset(out, 0, sizeof(float) * (size_t)v_dim);
    row_values(s, v, v_stride, n_keys, v_dim, out);
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (int64_t d = 0; d < v_dim; d++) out[d] *= inv;
}

/* An attention problem of several sequences: per sequence its queries, keys and values. */
typedef struct {
    const float *q;       /* row r0 of the sequence */
    const float *k, *v;   /* key / value 0 of the sequence */
    float *out;
    int64_t r0, rows, n_keys;
    float *Kt;            /* per head: [k_dim][ld] (rows > 1) */
    int64_t ld;           /* n_keys rounded up to 16 */
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
    float *scratch;    /* per thread: S (ATTN_ROWS x max_keys) and O (ATTN_ROWS x v_dim); 64-byte aligned */
    int64_t per_thread; /* floats of scratch per thread */
    atomic_llong next;
} attn_problem;

static void attn_task(void *arg, int ith, int nth) {
    (void)nth;
    attn_problem *p = arg;
    float *S = p->scratch + (size_t)ith * (size_t)p->per_thread;
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
            attend_block(p->k, q, q_stride, rows, sq->Kt + g * p->k_dim * sq->ld, sq->n_keys, sq->ld, p->k_dim,
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
        attn_seq *sq = &p->seqs[s];
        if (sq->rows <= 0 || sq->n_keys <= 0) return CERA_EINVAL;
        if (sq->n_keys > p->max_keys) p->max_keys = sq->n_keys;
        sq->ld = (sq->n_keys + 15) / 16 * 16;
        const int row_path = sq->rows == 1 && !p->masked && p->softcap <= 0;
        if (!row_path) kt_floats += p->n_kv_heads * p->k_dim * sq->ld;
        p->first[s + 1] = p->first[s] + p->n_heads * ((sq->rows + ATTN_ROWS - 1) / ATTN_ROWS);
    }
    p->max_keys = (p->max_keys + 15) / 16 * 16;
    const int nth = ctx->n_threads;
    const int64_t v_pad = (p->v_dim + 15) / 16 * 16;
    /* one allocation: the transposed keys, then the threads' scratch, each 64-byte aligned */
    const size_t kt_bytes = sizeof(float) * (size_t)kt_floats;
    const size_t scratch_floats = (size_t)nth * (size_t)(ATTN_ROWS * (p->max_keys + v_pad));
    char *raw = malloc(kt_bytes + sizeof(float) * scratch_floats + 64);
    if (!raw) return CERA_ENOMEM;
    float *kt = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    p->scratch = kt + kt_floats;
    p->per_thread = ATTN_ROWS * (p->max_keys + v_pad);
    float *at = kt;
    for (int s = 0; s < p->n_seq; s++) {
        attn_seq *sq = &p->seqs[s];
        sq->Kt = NULL;
        if (sq->rows == 1 && !p->masked && p->softcap <= 0) continue;
        sq->Kt = at;
        for (int64_t g = 0; g < p->n_kv_heads; g++) {
            float *dst = at + g * p->k_dim * sq->ld;
            for (int64_t c = 0; c < sq->n_keys; c++) {
                const float *src = sq->k + c * p->k_stride + g * p->k_dim;
                for (int64_t d = 0; d < p->k_dim; d++) dst[d * sq->ld + c] = src[d];
            }
        }
        at += p->n_kv_heads * p->k_dim * sq->ld;
    }
    (void)k;
    atomic_store(&p->next, 0);
    cera_pool_run(ctx->pool, attn_task, p, nth);
    free(raw);
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

/* -- cross-attention of a few rows: every head at once, the keys split in chunks -------------- */

/* A decoding step reads the whole memory (keys and values of every head) once per row. Here
 * each item is one chunk of one sequence's keys for all its rows and heads, so every key and
 * value row is read whole, front to back; each chunk keeps its own maximum, sum and weighted
 * values per (row, head), and the chunks are combined in order afterwards. The number of
 * chunks is fixed (not the thread count), so the bits do not depend on how many threads run. */
#define CROSS_CHUNKS 4
#define FEW_ROWS 8

typedef struct {
    const cera_kernels *k;
    attn_seq *seqs;
    int n_seq;
    int64_t n_heads, n_kv_heads, k_dim, v_dim, k_stride, v_stride, chunk_cap;
    float scale;
    float *partials; /* per seq s: rows * n_heads * CROSS_CHUNKS * (2 + v_dim), at part_off[s] */
    int64_t part_off[65];
    float *scratch;  /* per thread: n_heads * chunk_cap logits */
    atomic_llong next;
} cross_split;

/* One dot product as heads_logits sums it: eight partial sums over d = j, j + 8, ..., then
 * ((0 + 4) + (1 + 5)) + ((2 + 6) + (3 + 7)). Inlined where the length is a constant (64,
 * Whisper's head width), so the loop unrolls into eight vector steps. */
static inline __attribute__((always_inline)) float dot_lanes8(const float *a, const float *b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t d = 0;
    for (; d + 8 <= n; d += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[d + j] * b[d + j];
    float t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; d < n; d++) t += a[d] * b[d];
    return t;
}

/* The head of a query head's keys and values: h itself without grouped heads (no integer
 * division per key and head: with one, the division was the largest part of a beam step's
 * cross-attention). */
#define KV_HEAD(h, group) ((group) == 1 ? (h) : (h) / (group))

CERA_CLONES static void heads_logits(const float *q, const float *kr, int64_t n_heads, int64_t group, int64_t k_dim,
                                     float scale, float *s, int64_t s_stride) {
    if (k_dim == 64) {
        for (int64_t h = 0; h < n_heads; h++)
            s[h * s_stride] = dot_lanes8(kr + KV_HEAD(h, group) * 64, q + h * 64, 64) * scale;
        return;
    }
    for (int64_t h = 0; h < n_heads; h++)
        s[h * s_stride] = dot_lanes8(kr + KV_HEAD(h, group) * k_dim, q + h * k_dim, k_dim) * scale;
}

CERA_CLONES static void heads_values(const float *vr, const float *p, int64_t p_stride, int64_t n_heads,
                                     int64_t group, int64_t v_dim, float *o, int64_t o_stride) {
    if (v_dim == 64) {
        for (int64_t h = 0; h < n_heads; h++) {
            const float w = p[h * p_stride];
            const float *v = vr + KV_HEAD(h, group) * 64;
            float *y = o + h * o_stride;
            for (int64_t d = 0; d < 64; d++) y[d] += w * v[d];
        }
        return;
    }
    for (int64_t h = 0; h < n_heads; h++) {
        const float w = p[h * p_stride];
        const float *v = vr + KV_HEAD(h, group) * v_dim;
        float *y = o + h * o_stride;
        for (int64_t d = 0; d < v_dim; d++) y[d] += w * v[d];
    }
}

static void cross_split_task(void *arg, int ith, int nth) {
    (void)nth;
    cross_split *p = arg;
    const int64_t H = p->n_heads, group = p->n_heads / p->n_kv_heads, dv = p->v_dim;
    float *S = p->scratch + (size_t)ith * (size_t)(H * p->chunk_cap);
    const int64_t total = (int64_t)p->n_seq * CROSS_CHUNKS;
    for (;;) {
        const int64_t item = atomic_fetch_add(&p->next, 1);
        if (item >= total) break;
        const attn_seq *sq = &p->seqs[item / CROSS_CHUNKS];
        const int chunk = (int)(item % CROSS_CHUNKS);
        const int64_t per = (sq->n_keys + CROSS_CHUNKS - 1) / CROSS_CHUNKS;
        const int64_t c0 = chunk * per, c1 = c0 + per < sq->n_keys ? c0 + per : sq->n_keys;
        const int64_t L = c1 > c0 ? c1 - c0 : 0;
        for (int64_t t = 0; t < sq->rows; t++) {
            const float *q = sq->q + t * H * p->k_dim;
            /* partial (row t, head h, chunk): M, S, then v_dim weighted values */
            float *part = p->partials + p->part_off[item / CROSS_CHUNKS] + ((t * H) * CROSS_CHUNKS + chunk) * (2 + dv);
            const int64_t part_stride = CROSS_CHUNKS * (2 + dv); /* from head h to h + 1 */
            if (L == 0) {
                for (int64_t h = 0; h < H; h++) {
                    part[h * part_stride] = -INFINITY;
                    part[h * part_stride + 1] = 0.0f;
                }
                continue;
            }
            for (int64_t c = 0; c < L; c++)
                heads_logits(q, sq->k + (c0 + c) * p->k_stride, H, group, p->k_dim, p->scale, S + c, p->chunk_cap);
            for (int64_t h = 0; h < H; h++) {
                float *s = S + h * p->chunk_cap;
                float m = -INFINITY;
                for (int64_t c = 0; c < L; c++) m = s[c] > m ? s[c] : m;
                part[h * part_stride] = m;
                part[h * part_stride + 1] = (float)p->k->softmax_row(L, s, m);
                memset(part + h * part_stride + 2, 0, sizeof(float) * (size_t)dv);
            }
            for (int64_t c = 0; c < L; c++)
                heads_values(sq->v + (c0 + c) * p->v_stride, S + c, p->chunk_cap, H, group, dv, part + 2, part_stride);
        }
    }
}

static int cross_few_rows(cera_ctx *ctx, attn_seq *seqs, int n_seq, int64_t n_heads, int64_t n_kv_heads,
                          int64_t k_dim, int64_t v_dim, float scale) {
    cross_split p;
    memset(&p, 0, sizeof p);
    p.k = &ctx->k;
    p.seqs = seqs;
    p.n_seq = n_seq;
    p.n_heads = n_heads;
    p.n_kv_heads = n_kv_heads;
    p.k_dim = k_dim;
    p.v_dim = v_dim;
    p.k_stride = n_kv_heads * k_dim;
    p.v_stride = n_kv_heads * v_dim;
    p.scale = scale;
    int64_t parts = 0, max_keys = 1;
    for (int s = 0; s < n_seq; s++) {
        p.part_off[s] = parts;
        parts += seqs[s].rows * n_heads * CROSS_CHUNKS * (2 + v_dim);
        if (seqs[s].n_keys > max_keys) max_keys = seqs[s].n_keys;
    }
    p.chunk_cap = (max_keys + CROSS_CHUNKS - 1) / CROSS_CHUNKS;
    const int nth = ctx->n_threads;
    p.partials = malloc(sizeof(float) * (size_t)parts);
    p.scratch = malloc(sizeof(float) * (size_t)nth * (size_t)(n_heads * p.chunk_cap));
    if (!p.partials || !p.scratch) {
        free(p.partials);
        free(p.scratch);
        return CERA_ENOMEM;
    }
    atomic_store(&p.next, 0);
    cera_pool_run(ctx->pool, cross_split_task, &p, nth);
    /* combine the chunks of each (row, head) in order */
    for (int s = 0; s < n_seq; s++) {
        for (int64_t t = 0; t < seqs[s].rows; t++) {
            for (int64_t h = 0; h < n_heads; h++) {
                const float *part = p.partials + p.part_off[s] + ((t * n_heads + h) * CROSS_CHUNKS) * (2 + v_dim);
                float M = -INFINITY;
                for (int c = 0; c < CROSS_CHUNKS; c++) M = part[c * (2 + v_dim)] > M ? part[c * (2 + v_dim)] : M;
                float *out = seqs[s].out + (t * n_heads + h) * v_dim;
                memset(out, 0, sizeof(float) * (size_t)v_dim);
                float sum = 0.0f;
                for (int c = 0; c < CROSS_CHUNKS; c++) {
                    const float *pc = part + c * (2 + v_dim);
                    if (pc[0] == -INFINITY) continue;
                    const float w = expf(pc[0] - M);
                    sum += pc[1] * w;
                    for (int64_t d = 0; d < v_dim; d++) out[d] += pc[2 + d] * w;
                }
                const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
                for (int64_t d = 0; d < v_dim; d++) out[d] *= inv;
            }
        }
    }
    free(p.partials);
    free(p.scratch);
    return CERA_OK;
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
    int few = 1;
    /* shared: the rows of all sequences (consecutive) attend over one memory, read once */
    const int n_groups = a->shared ? 1 : a->n_seq;
    p.n_seq = n_groups;
    for (int s = 0; s < n_groups; s++) {
        const int32_t slot = a->slots[a->shared ? 0 : s];
        if (slot < 0 || slot >= a->n_slots) return CERA_EINVAL;
        const int64_t n_keys = len[slot];
        if (n_keys <= 0 || n_keys > a->max_len) return CERA_EINVAL; /* no memory stored for the slot */
        const int64_t r0 = a->rows[2 * s];
        seqs[s].q = a->q + r0 * a->n_heads * a->k_dim;
        seqs[s].k = kc + (size_t)slot * (size_t)(a->max_len * p.k_stride);
        seqs[s].v = vc + (size_t)slot * (size_t)(a->max_len * p.v_stride);
        seqs[s].out = a->out + r0 * a->n_heads * a->v_dim;
        seqs[s].r0 = r0;
        seqs[s].rows = a->shared ? a->rows[2 * (a->n_seq - 1)] + a->rows[2 * (a->n_seq - 1) + 1] - r0 : a->rows[2 * s + 1];
        seqs[s].n_keys = n_keys;
        if (seqs[s].rows >= FEW_ROWS) few = 0;
    }
    if (few) return cross_few_rows(ctx, seqs, n_groups, a->n_heads, a->n_kv_heads, a->k_dim, a->v_dim, a->scale);
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

/* -- GELU with the exact (erf) form -------------------------------------------------------------- */

/* erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (and +-1 beyond, where erf differs from 1 by less
 * than float32 resolves): a rational fit of degrees 6 and 5, made for cera by weighted least
 * squares on 20001 points of [0, 4], within 3e-9 of erf. Evaluated in double, the GELU
 * comes out within a few float32 ulps of the exact one, as libm's erff gives it; unlike
 * erff there are no branches or calls, so the loop vectorises (Whisper's encoder applies it
 * to millions of values per window). */
static const double ERF_P[7] = {1.1283791828588086, 0.18464218086324885, 0.05432957883040807, 0.00383755826977548,
                                0.0003828986325226922, 4.787317653093953e-06, -1.3695023309834298e-08};
static const double ERF_Q[6] = {1.0, 0.49696842670304175, 0.11380346548390824, 0.015450254738400736,
                                0.0013094628385792978, 6.407477198094522e-05};

CERA_CLONES void cera_gelu_erf_rows(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double v = (double)x[i] * 0.70710678118654752440;
        const double c = v < -4.0 ? -4.0 : (v > 4.0 ? 4.0 : v);
        const double t = c * c;
        const double p = (((((ERF_P[6] * t + ERF_P[5]) * t + ERF_P[4]) * t + ERF_P[3]) * t + ERF_P[2]) * t + ERF_P[1]) * t +
                         ERF_P[0];
        const double q = ((((ERF_Q[5] * t + ERF_Q[4]) * t + ERF_Q[3]) * t + ERF_Q[2]) * t + ERF_Q[1]) * t + ERF_Q[0];
        y[i] = (float)(0.5 * (double)x[i] * (1.0 + c * p / q));
    }
}
