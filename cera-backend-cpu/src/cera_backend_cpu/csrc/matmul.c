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
 * thread walks all activation rows over it, in groups that stay in L2. A few activation
 * rows (a batch of sequences decoding together, a short prompt) go through the kernels'
 * dotm where they have one: it takes a few weight rows against up to 4 activation rows,
 * unpacking each weight block once for them all, with every output bit for bit what the
 * one-row dot gives; then each weight row is read once and chunks are long runs of rows,
 * as in decode.
 *
 * One job may hold several products of the same input (an execution plan groups the
 * Q/K/V or gate/up projections: one quantization of the input, one hand-over to the
 * pool), finish rows with a residual add, or run the glu of a gate/up pair on rows as
 * they are done. Every output element is computed exactly as by a lone product.
 *
 * A member's LoRA pairs (cera_product.lora) join the job too: their A x (rank values per
 * row) are computed right after the input is quantized (in A's activation format, as the
 * separate product A x would be), then quantized for B; the B rows then run beside the
 * member's own rows, each output finished as y + scale * (B t) before the bias. That is
 * the arithmetic of llama.cpp's separate ops (mul_mat, mul_mat, scale, add) with one
 * hand-over to the pool instead of four ops per pair, and the member stays in its Q/K/V
 * or gate/up group.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"

/* Below this many weight elements a product runs on the calling thread alone: waking
 * the pool would cost more than it saves. */
#define SMALL_PRODUCT 32768
/* From this many elements of A matrices on, a job's LoRA A x is shared by the threads. */
#define LORA_SHARED 16384

#define TILE_COLS 16 /* activation rows per group in the prefill walk */
#define MAX_ACTS 4   /* distinct activation formats in one group */
/* From this many activation rows on, formats with a many-row microkernel (gemm.c) use it:
 * unpacking a tile of 8 weight rows once pays off over a few groups of 4 rows. */
#ifndef GEMM_MIN_ROWS
#define GEMM_MIN_ROWS 16
#endif
#ifndef GEMM_MIN_ROWS_KQUANT
#define GEMM_MIN_ROWS_KQUANT 8
#endif

/* The work of one pool job: the members' weight rows in chunks, numbered member after
 * member (with a glu epilogue, chunks cover the rows of the gate and up members at once). */
typedef struct {
    const cera_kernels *k;
    const cera_product *mem;
    int n_mem;
    int64_t K, M;
    const char *act[MAX_ACTS]; /* quantized activation rows, per format */
    int64_t act_row_bytes[MAX_ACTS];
    int act_of[CERA_MAX_PRODUCTS]; /* member -> index into act[] */
    int64_t chunk[CERA_MAX_PRODUCTS];
    int64_t first_chunk[CERA_MAX_PRODUCTS + 1]; /* member i's chunks: [first_chunk[i], first_chunk[i + 1]) */
    int glu_op;
    float *glu_out;
    int64_t glu_stride;
    const cera_gemm_format *gemm[CERA_MAX_PRODUCTS]; /* member's many-row format, or NULL */
    const cera_gemm_act *gact[CERA_MAX_PRODUCTS];    /* its prepared activation rows */
    int one_row;                                     /* per_row == CERA_ROWS_ONE */
    /* LoRA pairs: member i's are [lora_first[i], lora_first[i + 1]); t quantized for B */
    int lora_first[CERA_MAX_PRODUCTS + 1];
    const char *lora_t[CERA_MAX_LORA];
    int64_t lora_t_row_bytes[CERA_MAX_LORA];
    atomic_llong next;
} mm_job;

/* Whether the kernels' dotm of type t computes what their dot does. Not for IQ4_NL:
 * llama.cpp sums one activation row (vec_dot) in two sets of lanes and several (tinyBLAS)
 * in one, and dotm follows the latter, so rows that must keep the one-row arithmetic take
 * dot there. */
static int dotm_is_dot(int t) { return t != T_IQ4_NL && t != T_F32 && t != T_F16 && t != T_BF16; }

/* Float weights: dotm is llama.cpp's tinyBLAS, which takes products of a multiple of 4
 * weight rows only (vec_dot does the others). */
static int dotm_takes(int t, int64_t N) { return !(t == T_F32 || t == T_F16 || t == T_BF16) || N % 4 == 0; }

/* Rows [t0, t0 + rows) of member i (rows <= R) for every activation row, through the
 * many-row microkernel (gemm.c); a short tile goes through a buffer, so that every row of
 * the product is computed the same way whatever R the variant's tiles have. */
static void gemm_tile(const mm_job *job, int i, int64_t t0, int rows, cera_gemm_scratch *gs, cera_gemm_fn gemm) {
    const cera_product *p = &job->mem[i];
    const cera_gemm_format *f = job->gemm[i];
    const int R = job->k->gemm_rows;
    cera_gemm_pack(p->wtype, f, (const char *)p->w + t0 * p->w_row_bytes, p->w_row_bytes, job->K, R, rows, gs->tile, gs);
    const cera_gemm_act *acts = job->gact[i];
    float tail[4][CERA_GEMM_MAX_ROWS];
    for (int64_t m = 0; m < job->M; m += 4) {
        const cera_gemm_act *a[4];
        float *y[4];
        for (int k = 0; k < 4; k++) {
            const int64_t mm = m + k < job->M ? m + k : job->M - 1;
            a[k] = &acts[mm];
            y[k] = m + k >= job->M ? NULL : rows == R ? p->y + (m + k) * p->y_stride + t0 : tail[k];
        }
        gemm(f, job->K / f->sbk, gs->tile, a, y);
        if (rows < R)
            for (int k = 0; k < 4 && m + k < job->M; k++)
                memcpy(p->y + (m + k) * p->y_stride + t0, tail[k], sizeof(float) * (size_t)rows);
    }
}

/* y[r] = y[r] + scale * (B t)[r] for r in [r0, r1): one LoRA pair's rows for one
 * activation row (t: A x quantized for B), the separate ops' float steps (the product,
 * then the scale, then the add). */
static void lora_rows(const cera_kernels *k, const cera_lora *L, const char *t, float *y, int64_t r0, int64_t r1) {
    const float scale = L->scale;
    float v[64];
    int64_t r = r0;
    while (r < r1) {
        const int64_t n = r1 - r < 64 ? r1 - r : 64;
        /* B's rows as a separate product reads them: four at a time where the kernels have dot4
         * (a transposed copy of B read by columns, sixteen rows per load, commit 88040c1, was
         * faster with B in cache and slower from memory, as a decode reads it: SmolLM2-135M's
         * 210 adapted products one after another on one thread cost 24% over the plain
         * products by columns, 19% by rows) */
        const char *b = (const char *)L->b + r * L->b_row_bytes;
        int64_t j = 0;
        if (k->dot4[L->b_type])
            for (; j + 4 <= n; j += 4) k->dot4[L->b_type](L->rank, b + j * L->b_row_bytes, L->b_row_bytes, t, v + j);
        for (; j < n; j++) k->dot[L->b_type](L->rank, b + j * L->b_row_bytes, t, v + j);
        float *restrict yr = y + r;
        for (int64_t j = 0; j < n; j++) {
            const float scaled = v[j] * scale;
            yr[j] = yr[j] + scaled;
        }
        r += n;
    }
}

/* Rows [r0, r1) of member i for every activation row, then its epilogue. */
/* Whether member p runs as llama.cpp's repacked kernels do (cera_kernels.llama_repack):
 * x86 llama.cpp repacks Q4_0 and IQ4_NL weights of a multiple of 8 rows. */
static int repacked(const cera_kernels *k, const cera_product *p) {
    return k->llama_repack && (p->wtype == T_Q4_0 || p->wtype == T_IQ4_NL) && p->N % 8 == 0;
}

static void product_rows(const mm_job *job, int i, int64_t r0, int64_t r1, cera_gemm_scratch **gs) {
    const cera_product *p = &job->mem[i];
    if (repacked(job->k, p)) {
        const char *act = job->act[job->act_of[i]];
        const int64_t arb = job->act_row_bytes[job->act_of[i]];
        int64_t r = r0;
        if (job->gemm[i] && job->k->gemm_repack) { /* many activation rows: weight tiles */
            if (!*gs) *gs = cera_gemm_scratch_new(job->K);
            const int R = job->k->gemm_rows;
            if (*gs)
                for (; r < r1; r += R) gemm_tile(job, i, r, r1 - r < R ? (int)(r1 - r) : R, *gs, job->k->gemm_repack);
        }
        if (job->k->dot_repack) /* four weight rows at a time against each activation row */
            for (; r < r1; r += 4) {
                const int R = r1 - r < 4 ? (int)(r1 - r) : 4;
                for (int64_t m = 0; m < job->M; m++) {
                    float out[4];
                    job->k->dot_repack(p->wtype, job->K, (const char *)p->w + r * p->w_row_bytes, p->w_row_bytes, R,
                                       act + m * arb, out);
                    memcpy(p->y + m * p->y_stride + r, out, sizeof(float) * (size_t)R);
                }
            }
        for (int64_t m = 0; m < job->M; m++)
            for (int64_t rr = r; rr < r1; rr++)
                p->y[m * p->y_stride + rr] = cera_dot_repack(p->wtype, job->K, (const char *)p->w + rr * p->w_row_bytes, act + m * arb);
        goto epilogue;
    }
    cera_dot_fn dot = job->k->dot[p->wtype];
    cera_dot4_fn dot4 = job->k->dot4[p->wtype];
    const char *w = p->w;
    const char *act = job->act[job->act_of[i]];
    const int64_t arb = job->act_row_bytes[job->act_of[i]];
    int64_t rg = r0; /* rows [r0, rg) go through the microkernel */
    if (job->gemm[i]) {
        if (!*gs) *gs = cera_gemm_scratch_new(job->K);
        const int R = job->k->gemm_rows;
        if (*gs)
            for (; rg < r1; rg += R) gemm_tile(job, i, rg, r1 - rg < R ? (int)(r1 - rg) : R, *gs, job->k->gemm);
    }
    cera_dotm_fn dotm = job->M > 1 && (!job->one_row || dotm_is_dot(p->wtype)) && dotm_takes(p->wtype, p->N)
                            ? job->k->dotm[p->wtype] : NULL;
    for (int64_t m0 = 0; m0 < job->M && rg < r1; m0 += TILE_COLS) {
        const int64_t m1 = m0 + TILE_COLS < job->M ? m0 + TILE_COLS : job->M;
        if (dotm) {
            /* a few weight rows at a time against every activation row of the group: each
             * weight block is unpacked once per group of CERA_DOTM_MAX_ACTS activation
             * rows instead of once per activation row */
            const int R = job->k->dotm_rows[p->wtype];
            for (int64_t r = rg; r < r1; r += R) {
                const int rows = r1 - r < R ? (int)(r1 - r) : R;
                for (int64_t m = m0; m < m1; m += CERA_DOTM_MAX_ACTS) {
                    const int A = m1 - m < CERA_DOTM_MAX_ACTS ? (int)(m1 - m) : CERA_DOTM_MAX_ACTS;
                    dotm(job->K, w + r * p->w_row_bytes, p->w_row_bytes, rows, act + m * arb, arb, A,
                         p->y + m * p->y_stride + r, p->y_stride);
                }
            }
            continue;
        }
        for (int64_t m = m0; m < m1; m++) {
            const char *a = act + m * arb;
            float *y = p->y + m * p->y_stride;
            int64_t r = rg;
            if (dot4)
                for (; r + 4 <= r1; r += 4) dot4(job->K, w + r * p->w_row_bytes, p->w_row_bytes, a, &y[r]);
            for (; r < r1; r++) dot(job->K, w + r * p->w_row_bytes, a, &y[r]);
        }
    }
epilogue:
    for (int64_t m = 0; m < job->M; m++) {
        float *y = p->y + m * p->y_stride;
        for (int l = job->lora_first[i]; l < job->lora_first[i + 1]; l++)
            lora_rows(job->k, &p->lora[l - job->lora_first[i]], job->lora_t[l] + m * job->lora_t_row_bytes[l], y, r0, r1);
        if (p->bias)
            for (int64_t r = r0; r < r1; r++) y[r] += p->bias[r];
        if (p->residual) {
            const float *res = p->residual + m * p->y_stride;
            float *out = p->out + m * p->y_stride;
            for (int64_t r = r0; r < r1; r++) out[r] = res[r] + y[r];
        }
    }
}

static void mm_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    mm_job *job = varg;
    cera_gemm_scratch *gs = NULL; /* this thread's tile space, made on first use */
    const int64_t n_chunks = job->first_chunk[job->n_mem];
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (c >= n_chunks) break;
        int i = 0;
        while (c >= job->first_chunk[i + 1]) i++;
        const int64_t r0 = (c - job->first_chunk[i]) * job->chunk[i];
        const int64_t r1 = r0 + job->chunk[i] < job->mem[i].N ? r0 + job->chunk[i] : job->mem[i].N;
        product_rows(job, i, r0, r1, &gs);
        if (job->glu_op >= 0) { /* the up rows that go with these gate rows, then the glu */
            product_rows(job, 1, r0, r1, &gs);
            /* llama.cpp's vector loop covers each row up to a multiple of its width */
            const int64_t w = cera_silu_width(job->k->silu_kind), vec_end = job->mem[0].N / w * w;
            const int64_t n_vec = vec_end <= r0 ? 0 : vec_end - r0;
            for (int64_t m = 0; m < job->M; m++)
                cera_glu_rows(job->k, job->glu_op, job->mem[0].y + m * job->mem[0].y_stride + r0,
                              job->mem[1].y + m * job->mem[1].y_stride + r0,
                              job->glu_out + m * job->glu_stride + r0, r1 - r0, n_vec);
        }
    }
    free(gs);
}

#define MAX_PREPS 2 /* prepared layouts of one activation format (Q8_K: sub-blocks of 32 and 16) */

typedef struct {
    cera_quant_fn quant;
    const float *x;
    int64_t x_stride, K, M;
    char *act;
    int64_t act_row_bytes;
    int act_format;
    /* the quantized rows prepared for the many-row microkernel, per format that needs it */
    int n_preps;
    const cera_gemm_format *prep_format[MAX_PREPS];
    char *prep_space[MAX_PREPS];
    int64_t prep_bytes[MAX_PREPS];
    cera_gemm_act *prep_rows[MAX_PREPS];
    atomic_llong next; /* next activation row */
} quant_job;

static void quant_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    quant_job *job = varg;
    for (;;) {
        const int64_t m = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (m >= job->M) break;
        char *row = job->act + m * job->act_row_bytes;
        job->quant(job->x + m * job->x_stride, row, job->K);
        for (int p = 0; p < job->n_preps; p++)
            cera_gemm_prep_act(job->prep_format[p], job->act_format, row, job->K,
                               job->prep_space[p] + m * job->prep_bytes[p], &job->prep_rows[p][m]);
    }
}

/* The first part of the LoRA pairs of one job: t = A x for each pair and activation row,
 * with the one-row kernels (dot4 where the kernels have it, as product_rows does), in
 * items of four of A's rows, so that both threads share a job's few pairs; then (on the
 * calling thread) t's rows quantized to B's activation format. */
#define LORA_ITEM_ROWS 4
typedef struct {
    const cera_kernels *k;
    int n;
    int64_t K, M;
    const cera_lora *pair[CERA_MAX_LORA];
    int act_of[CERA_MAX_LORA];
    const char *act[CERA_MAX_LORA]; /* the input rows in A's activation format */
    int64_t act_row_bytes[CERA_MAX_LORA];
    float *t[CERA_MAX_LORA];        /* [M, rank] */
    char *tq[CERA_MAX_LORA];        /* [M] rows of t_row_bytes */
    int64_t t_row_bytes[CERA_MAX_LORA];
    int64_t first_item[CERA_MAX_LORA + 1]; /* pair l's items: (row m, group of A's rows) */
    atomic_llong next;
} lora_job;

static void lora_a_task(void *varg, int ith, int nth) {
    (void)ith;
    (void)nth;
    lora_job *job = varg;
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (c >= job->first_item[job->n]) break;
        int l = 0;
        while (c >= job->first_item[l + 1]) l++;
        const cera_lora *L = job->pair[l];
        const int64_t groups = (L->rank + LORA_ITEM_ROWS - 1) / LORA_ITEM_ROWS;
        const int64_t m = (c - job->first_item[l]) / groups;
        const int64_t r0 = (c - job->first_item[l]) % groups * LORA_ITEM_ROWS;
        const int64_t r1 = r0 + LORA_ITEM_ROWS < L->rank ? r0 + LORA_ITEM_ROWS : L->rank;
        const char *a = job->act[l] + m * job->act_row_bytes[l];
        const char *w = L->a;
        float *t = job->t[l] + m * L->rank;
        cera_dot_fn dot = job->k->dot[L->a_type];
        cera_dot4_fn dot4 = job->k->dot4[L->a_type];
        int64_t r = r0;
        if (dot4)
            for (; r + 4 <= r1; r += 4) dot4(job->K, w + r * L->a_row_bytes, L->a_row_bytes, a, &t[r]);
        for (; r < r1; r++) dot(job->K, w + r * L->a_row_bytes, a, &t[r]);
    }
}

/* Whether a product of type t over rows of n values can run (its blocks fill the rows). */
static int takes_rows(int t, int64_t n) {
    return cera_type_supported(t) && n % cera_types[t].block == 0 && n % cera_act_block[cera_types[t].act] == 0;
}

/* Adds act format a to acts[] (at most MAX_ACTS); 0 when there is no room. */
static int add_act(int *acts, int *n_acts, int a) {
    int j = 0;
    while (j < *n_acts && acts[j] != a) j++;
    if (j == *n_acts) {
        if (*n_acts == MAX_ACTS) return 0;
        acts[(*n_acts)++] = a;
    }
    return 1;
}

int cera_products_check(const cera_product *mem, int n_mem, int64_t K, int64_t M, int glu_op, int per_row) {
    if (n_mem < 1 || n_mem > CERA_MAX_PRODUCTS || K <= 0) return CERA_EINVAL;
    int acts[MAX_ACTS], n_acts = 0, n_lora = 0;
    for (int i = 0; i < n_mem; i++) {
        const int t = mem[i].wtype;
        if (!takes_rows(t, K)) return CERA_ETYPE;
        if (mem[i].N <= 0) return CERA_EINVAL;
        if (!add_act(acts, &n_acts, cera_types[t].act)) return CERA_EINVAL;
        if (mem[i].n_lora < 0 || (mem[i].n_lora > 0 && !mem[i].lora)) return CERA_EINVAL;
        n_lora += mem[i].n_lora;
        for (int l = 0; l < mem[i].n_lora; l++) {
            const cera_lora *L = &mem[i].lora[l];
            if (!takes_rows(L->a_type, K) || L->rank <= 0 || !takes_rows(L->b_type, L->rank)) return CERA_ETYPE;
            if (!add_act(acts, &n_acts, cera_types[L->a_type].act)) return CERA_EINVAL;
        }
    }
    /* the pairs keep the one-row arithmetic of the separate products */
    if (n_lora > CERA_MAX_LORA || (n_lora > 0 && M > 1 && per_row != CERA_ROWS_ONE)) return CERA_EINVAL;
    if (glu_op >= 0 && (n_mem != 2 || mem[0].N != mem[1].N)) return CERA_EINVAL;
    return CERA_OK;
}

int cera_products_unlocked(cera_ctx *ctx, const float *x, int64_t x_stride, int64_t K, int64_t M,
                           const cera_product *mem, int n_mem, int glu_op, float *glu_out, int64_t glu_stride,
                           int per_row) {
    const int rc = cera_products_check(mem, n_mem, K, M, glu_op, per_row);
    if (rc != CERA_OK) return rc;
    if (M <= 0) return M == 0 ? CERA_OK : CERA_EINVAL;

    mm_job job;
    job.k = &ctx->k;
    job.mem = mem;
    job.n_mem = n_mem;
    job.K = K;
    job.M = M;
    job.glu_op = glu_op;
    job.glu_out = glu_out;
    job.glu_stride = glu_stride;
    job.one_row = per_row == CERA_ROWS_ONE;
    /* activation formats, and the microkernel layouts each needs */
    quant_job qj[MAX_ACTS];
    int n_acts = 0;
    int prep_of[CERA_MAX_PRODUCTS];
    int64_t weights = 0;
    for (int i = 0; i < n_mem; i++) {
        const int act = cera_types[mem[i].wtype].act;
        int j = 0;
        while (j < n_acts && qj[j].act_format != act) j++;
        if (j == n_acts) {
            memset(&qj[j], 0, sizeof qj[j]);
            qj[j].act_format = act;
            qj[j].act_row_bytes = cera_act_bytes(act, K);
            n_acts++;
        }
        job.act_of[i] = j;
        weights += mem[i].N * K;
        const cera_gemm_format *f = cera_gemm_format_of(mem[i].wtype, &ctx->k);
        /* K-quants from 8 rows, where llama.cpp's tiled K-quant path starts (same float steps) */
        const int kquant = f && (f->kind == GEMM_K_MIN || f->kind == GEMM_K_OFFSET);
        /* per_row (CERA_ROWS_ONE): a batch of sequences decoding together; every row keeps
         * the one-row arithmetic (vec_dot), so a sequence's tokens do not depend on its batch.
         * CERA_ROWS_PROMPT: rows of a long prompt take the many-row microkernel whatever their
         * count, so a prompt's rows compute alike however it is cut into chunks. */
        if (f && (per_row == CERA_ROWS_ONE ||
                  (per_row != CERA_ROWS_PROMPT && M < (kquant ? GEMM_MIN_ROWS_KQUANT : GEMM_MIN_ROWS))))
            f = NULL;
        if (repacked(&ctx->k, &mem[i]) && !ctx->k.gemm_repack) f = NULL; /* then one activation row at a time */
        job.gemm[i] = f;
        prep_of[i] = -1;
        if (f) {
            int p = 0;
            while (p < qj[j].n_preps && (qj[j].prep_format[p]->sbk != f->sbk || qj[j].prep_format[p]->sb != f->sb)) p++;
            if (p == qj[j].n_preps) {
                if (p == MAX_PREPS) { /* cannot happen with the formats of gemm.c; stay correct anyway */
                    job.gemm[i] = NULL;
                    continue;
                }
                qj[j].prep_format[p] = f;
                qj[j].prep_bytes[p] = cera_gemm_act_bytes(f, K);
                qj[j].n_preps++;
            }
            prep_of[i] = p;
        }
    }
    /* the LoRA pairs: A's activation formats (t = A x), and t's rows for B */
    lora_job lj;
    lj.n = 0;
    int64_t lora_weights = 0; /* elements of the A matrices */
    job.lora_first[0] = 0;
    for (int i = 0; i < n_mem; i++) {
        for (int l = 0; l < mem[i].n_lora; l++) {
            const cera_lora *L = &mem[i].lora[l];
            const int act = cera_types[L->a_type].act;
            int j = 0;
            while (j < n_acts && qj[j].act_format != act) j++;
            if (j == n_acts) {
                memset(&qj[j], 0, sizeof qj[j]);
                qj[j].act_format = act;
                qj[j].act_row_bytes = cera_act_bytes(act, K);
                n_acts++;
            }
            lj.pair[lj.n] = L;
            lj.act_of[lj.n] = j;
            lj.t_row_bytes[lj.n] = cera_act_bytes(cera_types[L->b_type].act, L->rank);
            job.lora_t_row_bytes[lj.n] = lj.t_row_bytes[lj.n];
            lora_weights += L->rank * K;
            lj.n++;
        }
        job.lora_first[i + 1] = lj.n;
    }
    /* one scratch allocation: per format the quantized rows, then each prepared layout */
    size_t bytes = lj.n ? 64 : 0;
    for (int l = 0; l < lj.n; l++)
        bytes += (size_t)M * ((size_t)lj.pair[l]->rank * sizeof(float) + (size_t)lj.t_row_bytes[l]) + 64;
    for (int j = 0; j < n_acts; j++) {
        bytes += (size_t)(qj[j].act_row_bytes * M);
        for (int p = 0; p < qj[j].n_preps; p++)
            bytes += (size_t)(qj[j].prep_bytes[p] * M) + (sizeof(cera_gemm_act) * (size_t)M + 63) / 64 * 64;
    }
    char *buf = cera_scratch(ctx, bytes);
    if (!buf) return CERA_ENOMEM;
    const int small = weights < SMALL_PRODUCT && M == 1;
    int nth = small ? 1 : ctx->n_threads;

    for (int j = 0; j < n_acts; j++) {
        quant_job *q = &qj[j];
        q->quant = ctx->k.quant[q->act_format];
        q->x = x;
        q->x_stride = x_stride;
        q->K = K;
        q->M = M;
        q->act = buf;
        buf += q->act_row_bytes * M;
        for (int p = 0; p < q->n_preps; p++) {
            q->prep_space[p] = buf;
            buf += q->prep_bytes[p] * M;
            q->prep_rows[p] = (cera_gemm_act *)buf;
            buf += (sizeof(cera_gemm_act) * (size_t)M + 63) / 64 * 64;
        }
        atomic_init(&q->next, 0);
        cera_pool_run(ctx->pool, quant_task, q, M >= 4 ? nth : 1);
        job.act[j] = q->act;
        job.act_row_bytes[j] = q->act_row_bytes;
    }
    for (int i = 0; i < n_mem; i++)
        job.gact[i] = prep_of[i] >= 0 ? qj[job.act_of[i]].prep_rows[prep_of[i]] : NULL;
    if (lj.n) { /* t = A x per pair and row, then t quantized for B (B's rows run in mm_task) */
        lj.k = &ctx->k;
        lj.K = K;
        lj.M = M;
        buf += (64 - (uintptr_t)buf % 64) % 64;
        for (int l = 0; l < lj.n; l++) {
            lj.act[l] = qj[lj.act_of[l]].act;
            lj.act_row_bytes[l] = qj[lj.act_of[l]].act_row_bytes;
            lj.t[l] = (float *)buf;
            buf += (size_t)M * (size_t)lj.pair[l]->rank * sizeof(float);
            lj.tq[l] = buf;
            buf += (size_t)M * (size_t)lj.t_row_bytes[l];
            buf += (64 - (uintptr_t)buf % 64) % 64;
            job.lora_t[l] = lj.tq[l];
        }
        lj.first_item[0] = 0;
        for (int l = 0; l < lj.n; l++)
            lj.first_item[l + 1] = lj.first_item[l] + M * ((lj.pair[l]->rank + LORA_ITEM_ROWS - 1) / LORA_ITEM_ROWS);
        atomic_init(&lj.next, 0);
        /* a rank-16 A of 576 columns is about a microsecond of work: shared from two pairs on */
        cera_pool_run(ctx->pool, lora_a_task, &lj, lora_weights * M < LORA_SHARED ? 1 : nth);
        for (int l = 0; l < lj.n; l++)
            for (int64_t m = 0; m < M; m++)
                ctx->k.quant[cera_types[lj.pair[l]->b_type].act](lj.t[l] + m * lj.pair[l]->rank,
                                                                  lj.tq[l] + m * lj.t_row_bytes[l], lj.pair[l]->rank);
    }

    /* a glu pair is walked as one member whose chunks also do the up rows */
    const int n_walk = glu_op >= 0 ? 1 : n_mem;
    job.first_chunk[0] = 0;
    for (int i = 0; i < n_walk; i++) {
        /* the rows of this walk go through dotm, which reads each weight row once for all
         * M <= TILE_COLS activation rows */
        int one_pass = M <= TILE_COLS;
        for (int j = i; j < (glu_op >= 0 ? 2 : i + 1); j++)
            one_pass = one_pass && !job.gemm[j] && ctx->k.dotm[mem[j].wtype] && (!job.one_row || dotm_is_dot(mem[j].wtype)) &&
                       dotm_takes(mem[j].wtype, mem[j].N);
        int64_t chunk;
        if (M == 1) {
            /* decode: about 4 chunks per thread, at least 16 rows each */
            chunk = mem[i].N / ((int64_t)nth * 4);
            chunk = chunk < 16 ? 16 : (chunk + 15) / 16 * 16;
        } else if (one_pass) {
            /* no tile to keep in L1: long runs of rows, so that a thread's prefetching
             * (kernels_x86.inc, ahead_bytes) stays within its own rows (measured: with
             * 16-row chunks shared by two threads, dotm waited on memory at twice the time
             * of these; 8 per thread did as well as 16 or 32) */
            chunk = mem[i].N / ((int64_t)nth * 8);
            chunk = chunk < 16 ? 16 : (chunk + 15) / 16 * 16;
        } else {
            chunk = 16; /* rows of a tile: 16 weight rows stay in L1 */
        }
        job.chunk[i] = chunk;
        job.first_chunk[i + 1] = job.first_chunk[i] + (mem[i].N + chunk - 1) / chunk;
    }
    job.n_mem = n_walk;
    if (job.first_chunk[n_walk] < nth) nth = (int)job.first_chunk[n_walk];
    atomic_init(&job.next, 0);
    cera_pool_run(ctx->pool, mm_task, &job, nth);
    return CERA_OK;
}

int cera_matmul_unlocked(cera_ctx *ctx, int wtype, const void *w, int64_t w_row_bytes, int64_t K, int64_t N,
                         const float *x, int64_t x_stride, int64_t M, float *y, int64_t y_stride, const float *bias) {
    if (N == 0) return CERA_OK;
    const cera_product p = {wtype, w, w_row_bytes, N, y, y_stride, bias, NULL, NULL};
    return cera_products_unlocked(ctx, x, x_stride, K, M, &p, 1, -1, NULL, 0, 0);
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
