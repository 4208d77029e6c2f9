/* Run-time choice of the kernel variant, and the context object.
 *
 * One build holds every variant its architecture can have (each compiled with its own
 * per-function target attributes, never -march=native); at run time we ask the CPU (and
 * the OS, for the AVX register state) what it supports and take the best one. A name
 * passed to cera_ctx_new forces a variant, for tests and benchmarks.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CERA_X86 1
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

typedef struct {
    int avx2, fma, f16c, avx512, avx512vnni, avx512bf16, neon_dotprod;
} cpu_features;

static cpu_features detect(void) {
    cpu_features f;
    memset(&f, 0, sizeof f);
#ifdef CERA_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    unsigned xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv */
        xcr0 = lo;
    }
    const int os_avx = avx && (xcr0 & 0x6) == 0x6;          /* XMM and YMM state */
    const int os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f.avx2 = os_avx && ((b >> 5) & 1) && f.fma && f.f16c;
        const int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
                  avx512vl = (b >> 31) & 1;
        f.avx512 = f.avx2 && os_avx512 && avx512f && avx512dq && avx512bw && avx512vl;
        f.avx512vnni = f.avx512 && ((c >> 11) & 1);
        __cpuid_count(7, 1, a, b, c, d);
        f.avx512bf16 = f.avx512 && ((a >> 5) & 1);
    }
#elif defined(__aarch64__)
#if defined(__APPLE__)
    f.neon_dotprod = 1; /* every Apple arm64 CPU (M1 and later) has the dot product extension */
#elif defined(__linux__)
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
    f.neon_dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__ARM_FEATURE_DOTPROD)
    f.neon_dotprod = 1;
#endif
#endif
    return f;
}

typedef struct {
    const char *name;
    int (*init)(cera_kernels *k); /* NULL: scalar */
} variant;

/* worst to best */
static const variant VARIANTS[] = {
    {"scalar", NULL},
    {"avx2", cera_kernels_init_avx2},
    {"avx512", cera_kernels_init_avx512},
    {"avx512vnni", cera_kernels_init_avx512vnni},
    {"neon", cera_kernels_init_neon},
};
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

static int compiled(const variant *v) {
    if (!v->init) return 1;
    cera_kernels k;
    cera_kernels_init_scalar(&k);
    return v->init(&k);
}

static int usable(const variant *v, const cpu_features *f) {
    if (!compiled(v)) return 0;
    if (!strcmp(v->name, "scalar")) return 1;
    if (!strcmp(v->name, "avx2")) return f->avx2;
    if (!strcmp(v->name, "avx512")) return f->avx512;
    if (!strcmp(v->name, "avx512vnni")) return f->avx512vnni;
    if (!strcmp(v->name, "neon")) return f->neon_dotprod;
    return 0;
}

static const variant *find(const char *name) {
    for (int i = 0; i < N_VARIANTS; i++)
        if (!strcmp(VARIANTS[i].name, name)) return &VARIANTS[i];
    return NULL;
}

static char compiled_names[128];
static char features_text[160];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static cpu_features features;

static void init_once(void) {
    features = detect();
    compiled_names[0] = 0;
    for (int i = 0; i < N_VARIANTS; i++) {
        if (!compiled(&VARIANTS[i])) continue;
        if (compiled_names[0]) strcat(compiled_names, ",");
        strcat(compiled_names, VARIANTS[i].name);
    }
    snprintf(features_text, sizeof features_text, "avx2=%d fma=%d f16c=%d avx512=%d avx512vnni=%d neon_dotprod=%d",
             features.avx2, features.fma, features.f16c, features.avx512, features.avx512vnni, features.neon_dotprod);
    cera_tables_init();
}

const char *cera_compiled_variants(void) {
    pthread_once(&once, init_once);
    return compiled_names;
}

const char *cera_cpu_features(void) {
    pthread_once(&once, init_once);
    return features_text;
}

int cera_variant_usable(const char *name) {
    pthread_once(&once, init_once);
    const variant *v = name ? find(name) : NULL;
    return v && usable(v, &features);
}

const char *cera_best_variant(void) {
    pthread_once(&once, init_once);
    const char *best = "scalar";
    for (int i = 0; i < N_VARIANTS; i++)
        if (usable(&VARIANTS[i], &features)) best = VARIANTS[i].name;
    return best;
}

/* -- context -------------------------------------------------------------------------------- */

cera_ctx *cera_ctx_new(int n_threads, const char *name, char *err, int err_len) {
    pthread_once(&once, init_once);
    if (!name || !*name || !strcmp(name, "auto")) name = cera_best_variant();
    const variant *v = find(name);
    if (!v || !compiled(v)) {
        snprintf(err, (size_t)err_len, "kernel variant '%s' is not compiled into this build (compiled: %s)", name,
                 compiled_names);
        return NULL;
    }
    if (!usable(v, &features)) {
        snprintf(err, (size_t)err_len, "kernel variant '%s' cannot run on this CPU (found: %s)", name, features_text);
        return NULL;
    }
    cera_ctx *ctx = calloc(1, sizeof(cera_ctx));
    pthread_mutex_t *mu = malloc(sizeof(pthread_mutex_t));
    if (!ctx || !mu) {
        free(ctx);
        free(mu);
        snprintf(err, (size_t)err_len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(mu, NULL);
    ctx->lock = mu;
    cera_kernels_init_scalar(&ctx->k);
    if (v->init) v->init(&ctx->k);
    if (detect().avx512bf16) cera_kernels_bf16_dp(&ctx->k);
    {
        const char *rp = getenv("CERA_CPU_LLAMA_REPACK");
        ctx->k.llama_repack = rp && *rp && strcmp(rp, "0") != 0;
    }
    ctx->k.name = v->name;
    ctx->pool = cera_pool_new(n_threads);
    if (!ctx->pool) {
        pthread_mutex_destroy(mu);
        free(mu);
        free(ctx);
        snprintf(err, (size_t)err_len, "cannot start the thread pool");
        return NULL;
    }
    ctx->n_threads = cera_pool_threads(ctx->pool);
    return ctx;
}

void cera_ctx_free(cera_ctx *ctx) {
    if (!ctx) return;
    cera_pool_free(ctx->pool);
    free(ctx->scratch);
    pthread_mutex_destroy((pthread_mutex_t *)ctx->lock);
    free(ctx->lock);
    free(ctx);
}

const char *cera_ctx_variant(const cera_ctx *ctx) { return ctx->k.name; }
int cera_ctx_threads(const cera_ctx *ctx) { return ctx->n_threads; }
void cera_ctx_set_spin_us(cera_ctx *ctx, int spin_us) { cera_pool_set_spin_us(ctx->pool, spin_us); }

void cera_ctx_lock(cera_ctx *ctx) { pthread_mutex_lock((pthread_mutex_t *)ctx->lock); }
void cera_ctx_unlock(cera_ctx *ctx) { pthread_mutex_unlock((pthread_mutex_t *)ctx->lock); }

void *cera_scratch(cera_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->scratch_bytes) return ctx->scratch;
    free(ctx->scratch);
    size_t want = bytes + bytes / 2 + 4096;
    want = (want + 63) & ~(size_t)63;
    ctx->scratch = aligned_alloc(64, want);
    ctx->scratch_bytes = ctx->scratch ? want : 0;
    return ctx->scratch;
}
