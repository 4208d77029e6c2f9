/* A memory read-bandwidth probe for the benchmarks: every thread of the pool streams
 * through its share of a buffer and sums it, which is what a memory-bound matrix-vector
 * product does with its weights. The sum is returned so the reads cannot be optimised
 * away. */
#include <stdatomic.h>

#include "internal.h"

typedef struct {
    const cera_kernels *k;
    const uint64_t *p;
    int64_t n_words;
    atomic_llong next; /* next chunk */
    _Atomic uint64_t sum;
} bw_job;

#define BW_CHUNK_WORDS (1 << 17) /* 1 MiB per chunk taken from the counter */

/* The portable probe; SIMD variants read with their widest loads (kernel table). */
uint64_t cera_read_sum_scalar(const void *vp, int64_t bytes) {
    const uint64_t *p = vp;
    const int64_t n = bytes / 8;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    for (; i < n; i++) s0 += p[i];
    return s0 + s1 + s2 + s3;
}

static void bw_task(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    bw_job *job = arg;
    uint64_t sum = 0;
    for (;;) {
        const int64_t a = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed) * BW_CHUNK_WORDS;
        if (a >= job->n_words) break;
        const int64_t b = a + BW_CHUNK_WORDS < job->n_words ? a + BW_CHUNK_WORDS : job->n_words;
        sum += job->k->read_sum(job->p + a, (b - a) * 8);
    }
    atomic_fetch_add(&job->sum, sum);
}

uint64_t cera_read_probe(cera_ctx *ctx, const void *p, int64_t bytes) {
    bw_job job;
    job.k = &ctx->k;
    job.p = p;
    job.n_words = bytes / 8;
    atomic_init(&job.next, 0);
    atomic_init(&job.sum, 0);
    cera_ctx_lock(ctx);
    cera_pool_run(ctx->pool, bw_task, &job, ctx->n_threads);
    cera_ctx_unlock(ctx);
    return atomic_load(&job.sum);
}

int cera_bench_matvecs(cera_ctx *ctx, int n, const int *types, void *const *w, const int64_t *row_bytes,
                       const int64_t *K, const int64_t *N, const float *x, float *y, int reps) {
    int rc = CERA_OK;
    cera_ctx_lock(ctx);
    for (int r = 0; r < reps && rc == CERA_OK; r++)
        for (int i = 0; i < n && rc == CERA_OK; i++)
            rc = cera_matmul_unlocked(ctx, types[i], w[i], row_bytes[i], K[i], N[i], x, K[i], 1, y, N[i], NULL);
    cera_ctx_unlock(ctx);
    return rc;
}
