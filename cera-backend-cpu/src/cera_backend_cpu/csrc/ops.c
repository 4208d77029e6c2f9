/* The non-matmul ops: norms, RoPE, activations, elementwise arithmetic, copies
 * (attention has its own module, attention.c).
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
#include <string.h>

#include "encoder.h"
#include "internal.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* -- tables -------------------------------------------------------------------------------- */

uint16_t cera_gelu_table[65536];

static const float GELU_COEF_A = 0.044715f;
static const float SQRT_2_OVER_PI = 0.79788456080286535587989211986876f;

/* ggml_gelu_f32 as GCC compiles it for llama.cpp (-ffp-contract=fast, the GNU default,
 * on FMA hardware): the inner 1 + a*x*x is one fused multiply-add. Unfused, about one
 * table entry in ten thousand lands on the other side of an f16 rounding. */
static float gelu_f32(float x) {
    return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * fmaf(GELU_COEF_A * x, x, 1.0f)));
}

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

int cera_silu_width(int silu_kind) { return silu_kind == CERA_SILU_AVX512 ? 16 : silu_kind == CERA_SILU_AVX2 ? 8 : 1; }

/* llama.cpp's scalar code (the scalar and NEON variants): libm's expf */
void cera_silu_rows_libm(int64_t n, int64_t n_vec, const float *g, const float *u, float *y) {
    (void)n_vec;
    for (int64_t i = 0; i < n; i++) y[i] = u ? silu(g[i]) * u[i] : silu(g[i]);
}

double cera_softmax_row_libm(int64_t n, float *s, float max) {
    double sum = 0.0;
    for (int64_t c = 0; c < n; c++) {
        s[c] = expf(s[c] - max);
        sum += (double)s[c];
    }
    return sum;
}

/* -- norms --------------------------------------------------------------------------------- */

int cera_rms_norm(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const float *w, float eps, float *y) {
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
    return CERA_OK;
}

int cera_layer_norm(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const float *w, const float *b, float eps,
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
    return CERA_OK;
}

/* -- RoPE ---------------------------------------------------------------------------------- */

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

static float yarn_ramp(float low, float high, int i0) {
    const float y = (i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1 - fminf(1, fmaxf(0, y));
}

/* The cos/sin pairs of one token's rotation (ggml's rope_yarn, step by step). */
static void rope_angles(float *cache, int32_t p, int n_dims, float theta_scale, const float corr[2], float freq_scale,
                        const float *freq_factors, float ext_factor, float attn_factor) {
    float theta = (float)p;
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
}

/* One token's heads rotated by the angles in cache, as GCC contracts ggml's rotate_pairs
 * (x0*c - x1*s: the first product fused into the subtraction); checked bit for bit against
 * llama.cpp's Qcur/Kcur. */
CERA_INLINE void rope_rotate_body(const float *cache, const float *x, float *y, int64_t n_heads, int64_t head_dim,
                                  int n_dims, int neox) {
    for (int64_t h = 0; h < n_heads; h++) {
        const float *src = x + h * head_dim;
        float *dst = y + h * head_dim;
        if (neox) {
            const int half = n_dims / 2;
            for (int i0 = 0; i0 < n_dims; i0 += 2) {
                const int ic = i0 / 2;
                const float c = cache[i0], s = cache[i0 + 1];
                const float x0 = src[ic], x1 = src[ic + half];
                dst[ic] = fmaf(x0, c, -(x1 * s));
                dst[ic + half] = fmaf(x0, s, x1 * c);
            }
        } else {
            for (int i0 = 0; i0 < n_dims; i0 += 2) {
                const float c = cache[i0], s = cache[i0 + 1];
                const float x0 = src[i0], x1 = src[i0 + 1];
                dst[i0] = fmaf(x0, c, -(x1 * s));
                dst[i0 + 1] = fmaf(x0, s, x1 * c);
            }
        }
        if (dst != src)
            for (int64_t i = n_dims; i < head_dim; i++) dst[i] = src[i];
    }
}

/* This file is built for the baseline CPU, where fmaf is a call into libm per value (about
 * 3 ns: it made rope's rotation cost more than its angles). With FMA instructions (every
 * x86 variant but scalar has them: dispatch.c checks before choosing one) the same body
 * compiles to vfmadd, which rounds once as fmaf does: the same bits. */
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void rope_rotate_fma(const float *cache, const float *x, float *y,
                                                               int64_t n_heads, int64_t head_dim, int n_dims,
                                                               int neox) {
    rope_rotate_body(cache, x, y, n_heads, head_dim, n_dims, neox);
}
#define CERA_HAVE_ROPE_FMA 1
#endif

static void rope_rotate(const float *cache, const float *x, float *y, int64_t n_heads, int64_t head_dim, int n_dims,
                        int neox, const cera_ctx *ctx) {
#ifdef CERA_HAVE_ROPE_FMA
    if (ctx && strcmp(ctx->k.name, "scalar") != 0) {
        rope_rotate_fma(cache, x, y, n_heads, head_dim, n_dims, neox);
        return;
    }
#endif
    rope_rotate_body(cache, x, y, n_heads, head_dim, n_dims, neox);
}

/* Every layer of a pass rotates its queries and keys by the same angles: a decode step's
 * (up to ROPE_TAB_TOK rows) are kept per thread and reused while the positions and the
 * parameters stay the same, two parameter sets at a time (Gemma 3 alternates a local and
 * a global base). The values are those computed afresh, so the bits do not change. */
#define ROPE_TAB_TOK 64
#define ROPE_TAB_DIMS 256
typedef struct {
    int valid, n_dims, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    const float *freq_factors;
    int64_t n_tok;
    int32_t pos[ROPE_TAB_TOK];
    float cs[ROPE_TAB_TOK * ROPE_TAB_DIMS];
} rope_table;
static _Thread_local rope_table rope_tabs[2];
static _Thread_local int rope_tab_next;

int cera_rope(cera_ctx *ctx, const float *x, float *y, int64_t n_tok, int64_t n_heads, int64_t head_dim,
              const int32_t *pos, int n_dims, int neox, float freq_base, float freq_scale, const float *freq_factors,
              float ext_factor, float attn_factor, float beta_fast, float beta_slow, int n_ctx_orig) {
    if (n_dims <= 0 || n_dims % 2 || n_dims > head_dim) return CERA_EINVAL;
    const float theta_scale = powf(freq_base, -2.0f / n_dims);
    float corr[2];
    {
        const float start = floorf(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
        const float end = ceilf(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
        corr[0] = fmaxf(0, start);
        corr[1] = fminf(n_dims - 1, end);
    }
    const float *table = NULL; /* [n_tok][n_dims] when kept */
    if (n_tok <= ROPE_TAB_TOK && n_dims <= ROPE_TAB_DIMS) {
        for (int i = 0; i < 2 && !table; i++) {
            const rope_table *e = &rope_tabs[i];
            if (e->valid && e->n_tok == n_tok && e->n_dims == n_dims && e->n_ctx_orig == n_ctx_orig &&
                e->freq_base == freq_base && e->freq_scale == freq_scale && e->ext_factor == ext_factor &&
                e->attn_factor == attn_factor && e->beta_fast == beta_fast && e->beta_slow == beta_slow &&
                e->freq_factors == freq_factors && !memcmp(e->pos, pos, sizeof(int32_t) * (size_t)n_tok))
                table = e->cs;
        }
        if (!table) {
            rope_table *e = &rope_tabs[rope_tab_next];
            rope_tab_next ^= 1;
            e->valid = 1;
            e->n_tok = n_tok;
            e->n_dims = n_dims;
            e->n_ctx_orig = n_ctx_orig;
            e->freq_base = freq_base;
            e->freq_scale = freq_scale;
            e->ext_factor = ext_factor;
            e->attn_factor = attn_factor;
            e->beta_fast = beta_fast;
            e->beta_slow = beta_slow;
            e->freq_factors = freq_factors;
            memcpy(e->pos, pos, sizeof(int32_t) * (size_t)n_tok);
            for (int64_t t = 0; t < n_tok; t++)
                rope_angles(e->cs + t * n_dims, pos[t], n_dims, theta_scale, corr, freq_scale, freq_factors,
                            ext_factor, attn_factor);
            table = e->cs;
        }
    }
    float *own = NULL;
    if (!table) {
        own = malloc(sizeof(float) * (size_t)n_dims);
        if (!own) return CERA_ENOMEM;
    }
    for (int64_t t = 0; t < n_tok; t++) {
        const float *cache;
        if (table) {
            cache = table + t * n_dims;
        } else {
            rope_angles(own, pos[t], n_dims, theta_scale, corr, freq_scale, freq_factors, ext_factor, attn_factor);
            cache = own;
        }
        rope_rotate(cache, x + t * n_heads * head_dim, y + t * n_heads * head_dim, n_heads, head_dim, n_dims, neox,
                    ctx);
    }
    free(own);
    return CERA_OK;
}

/* -- activations ---------------------------------------------------------------------------- */

/* gelu_erf (encoder.c's vectorised form) over many values (an encoder's activations) is
 * split over the pool: the same bits on any thread. */
typedef struct {
    const float *x;
    float *y;
    int64_t n;
    atomic_llong next;
} gelu_erf_job;

#define GELU_ERF_CHUNK 16384

static void gelu_erf_task(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    gelu_erf_job *j = arg;
    for (;;) {
        const int64_t i0 = atomic_fetch_add(&j->next, GELU_ERF_CHUNK);
        if (i0 >= j->n) break;
        const int64_t i1 = i0 + GELU_ERF_CHUNK < j->n ? i0 + GELU_ERF_CHUNK : j->n;
        cera_gelu_erf_rows(j->x + i0, j->y + i0, i1 - i0);
    }
}

int cera_unary(cera_ctx *ctx, int op, const float *x, float *y, int64_t n) {
    if (op == 2 && n >= 4 * GELU_ERF_CHUNK && ctx->n_threads > 1) {
        gelu_erf_job j = {x, y, n, 0};
        cera_pool_run(ctx->pool, gelu_erf_task, &j, ctx->n_threads);
        return CERA_OK;
    }
    switch (op) {
    case 0: /* the row length is not known here: every value takes the vector formula */
        ctx->k.silu_rows(n, n, x, NULL, y);
        return CERA_OK;
    case 1:
        for (int64_t i = 0; i < n; i++) y[i] = gelu_lookup(x[i]);
        return CERA_OK;
    case 2:
        cera_gelu_erf_rows(x, y, n);
        return CERA_OK;
    case 3:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return CERA_OK;
    case 4: /* ggml_sigmoid (scalar in ggml-cpu) */
        for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
        return CERA_OK;
    case 5: /* ggml_softplus */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 20.0f ? x[i] : logf(1.0f + expf(x[i]));
        return CERA_OK;
    default:
        return CERA_EINVAL;
    }
}

void cera_glu_rows(const cera_kernels *k, int op, const float *g, const float *u, float *y, int64_t n, int64_t n_vec) {
    if (op == 0) {
        k->silu_rows(n, n_vec, g, u, y);
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = gelu_lookup(g[i]) * u[i];
    }
}

/* The row length is not known here: every value takes the vector formula (llama.cpp's
 * scalar leftovers only differ for rows whose length is not a multiple of 8 or 16). */
int cera_glu(cera_ctx *ctx, int op, const float *g, const float *u, float *y, int64_t n) {
    if (op != 0 && op != 1) return CERA_EINVAL;
    cera_glu_rows(&ctx->k, op, g, u, y, n, n);
    return CERA_OK;
}

/* -- elementwise arithmetic and copies ------------------------------------------------------- */

/* Plain float32 operations, one rounding each, so that the results equal numpy's (and
 * ggml's) bit for bit; -ffp-contract=off keeps the compiler from fusing them. */

int cera_binary(cera_ctx *ctx, int op, const float *a, const float *b, int64_t b_stride, float *y, int64_t rows,
                int64_t n) {
    (void)ctx;
    if (op != 0 && op != 1) return CERA_EINVAL;
    for (int64_t r = 0; r < rows; r++, a += n, y += n, b += b_stride) {
        if (op == 0)
            for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
        else
            for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
    }
    return CERA_OK;
}

int cera_scale(cera_ctx *ctx, const float *x, float s, float *y, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
    return CERA_OK;
}

/* As llama.cpp builds soft-capping from ggml ops: scale by 1/cap (a float32 division),
 * tanh, scale by cap. */
int cera_softcap(cera_ctx *ctx, const float *x, float cap, float *y, int64_t n) {
    (void)ctx;
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i] * inv) * cap;
    return CERA_OK;
}

int cera_copy_rows(cera_ctx *ctx, const float *x, int64_t x_stride, int64_t rows, int64_t n, float *y) {
    (void)ctx;
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * n, x + r * x_stride, sizeof(float) * (size_t)n);
    return CERA_OK;
}

/* Whether value a at index ia comes before value b at index ib in a stable sort of -x. */
static inline int top_k_before(float a, int64_t ia, float b, int64_t ib) {
    if (a != a) return b != b && ia < ib; /* NaN: after every number */
    if (b != b) return 1;
    return a > b || (a == b && ia < ib);
}

int cera_top_k(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, int64_t k, int32_t *out) {
    (void)ctx;
    if (n <= 0 || k <= 0 || k > n || n > INT32_MAX) return CERA_EINVAL;
    /* One pass per row keeping the best k in order: k is a sampler's handful, and after
     * the first few hundred values almost every value fails the first comparison. */
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * n;
        int32_t *ids = out + r * k;
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++) {
            if (m == k && (i & 15) == 0 && i + 16 <= n) {
                /* Once the k are chosen, a later value enters only if it is larger than the
                 * k-th (a later equal value sorts after it, NaN after every number): skip
                 * blocks of 16 with none such, in a loop the compiler vectorizes. */
                const float kth = row[ids[k - 1]];
                if (kth == kth) {
                    int any = 0;
                    for (int j = 0; j < 16; j++) any |= row[i + j] > kth;
                    if (!any) {
                        i += 15;
                        continue;
                    }
                }
            }
            const float v = row[i];
            if (m == k && !top_k_before(v, i, row[ids[k - 1]], ids[k - 1])) continue;
            int64_t j = m < k ? m++ : k - 1;
            while (j > 0 && top_k_before(v, i, row[ids[j - 1]], ids[j - 1])) {
                ids[j] = ids[j - 1];
                j--;
            }
            ids[j] = (int32_t)i;
        }
    }
    return CERA_OK;
}

int cera_take(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const int32_t *ids, int64_t k, float *out) {
    (void)ctx;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t id = ids[r * k + j];
            if (id < 0 || id >= n) return CERA_EINVAL;
            out[r * k + j] = x[r * n + id];
        }
    return CERA_OK;
}

int cera_argmax(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, int32_t *out) {
    (void)ctx;
    if (n <= 0) return CERA_EINVAL;
    /* The first index of the largest value (NaNs never win; a NaN first value wins, as
     * the plain scan from it would leave it): the maximum in 16 lanes the compiler
     * vectorises, then the first index holding it. */
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * n;
        if (row[0] != row[0]) {
            out[r] = 0;
            continue;
        }
        float lane[16];
        for (int j = 0; j < 16; j++) lane[j] = row[0];
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) lane[j] = row[i + j] > lane[j] ? row[i + j] : lane[j];
        float v = lane[0];
        for (int j = 1; j < 16; j++) v = lane[j] > v ? lane[j] : v;
        for (; i < n; i++) v = row[i] > v ? row[i] : v;
        int64_t best = 0;
        while (row[best] != v) best++;
        out[r] = (int32_t)best;
    }
    return CERA_OK;
}
