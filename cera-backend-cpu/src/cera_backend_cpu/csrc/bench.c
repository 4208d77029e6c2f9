/* A memory read-bandwidth probe for the benchmarks: every thread of the pool streams
 * through its share of a buffer and sums it, which is what a memory-bound matrix-vector
 * product does with its weights. The sum is returned so the reads cannot be optimised
 * away. */
#include "internal.h"

typedef struct {
    const cera_kernels *k;
    const uint64_t *p;
    int64_t n_words;
    uint64_t sums[256];
} bw_job;

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
    bw_job *job = arg;
    const int64_t per = (job->n_words / nth) & ~(int64_t)7;
    const int64_t a = per * ith, b = ith == nth - 1 ? job->n_words : a + per;
    job->sums[ith & 255] = job->k->read_sum(job->p + a, (b - a) * 8);
}

uint64_t cera_read_probe(cera_ctx *ctx, const void *p, int64_t bytes) {
    bw_job job;
    memset(&job, 0, sizeof job);
    job.k = &ctx->k;
    job.p = p;
    job.n_words = bytes / 8;
    cera_ctx_lock(ctx);
    cera_pool_run(ctx->pool, bw_task, &job, ctx->n_threads);
    cera_ctx_unlock(ctx);
    uint64_t s = 0;
    for (int i = 0; i < 256; i++) s += job.sums[i];
    return s;
}
