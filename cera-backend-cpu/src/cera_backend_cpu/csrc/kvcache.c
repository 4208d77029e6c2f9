/* KV cache row formats: Q4_0 rows as llama.cpp quantizes them, the Walsh-Hadamard turn of
 * quantized rows, and TurboQuant rows (cera/kv_turboquant.py is the reference: the layout
 * and codebooks are its).
 *
 * TurboQuant's rotation P comes from the Python side (numpy's generator with a fixed seed)
 * through cera_tq_register, once per row length, and stays for the process: it is a
 * constant of the format, not of a model. */
#include <math.h>
#include <stdatomic.h>

#include "kvcache.h"

/* Lloyd-Max centroids of N(0, 1), ascending (the reference's CODEBOOKS). */
static const float CB1[2] = {-0.7978845608f, 0.7978845608f};
static const float CB2[4] = {-1.5104176088f, -0.4527800398f, 0.4527800398f, 1.5104176088f};
static const float CB3[8] = {-2.1519457051f, -1.3439092613f, -0.7560052489f, -0.2450940842f,
                             0.2450940842f,  0.7560052489f,  1.3439092613f,  2.1519457051f};
static const float CB4[16] = {-2.7325057628f, -2.0689225438f, -1.6179497832f, -1.2561401598f,
                              -0.9422616950f, -0.6566983696f, -0.3880099835f, -0.1283819394f,
                              0.1283819394f,  0.3880099835f,  0.6566983696f,  0.9422616950f,
                              1.2561401598f,  1.6179497832f,  2.0689225438f,  2.7325057628f};

static const float *codebook(int bits) { return bits == 1 ? CB1 : bits == 2 ? CB2 : bits == 3 ? CB3 : CB4; }
/* the bits a coordinate (the reference's BITS): tq3 keys 4, values 3; tq2 keys 3, values 2 */
static int tq_bits(int kv_type, int key) { return (kv_type == KV_TQ3 ? 3 : 2) + (key ? 1 : 0); }

#define TQ_MAX_DIMS 16   /* row lengths registered at once */
#define TQ_MAX_DIM 4096  /* the longest row (a stack buffer of indices) */
typedef struct {
    int64_t dim;
    const float *rot; /* [dim][dim], row-major */
} tq_mats;
static tq_mats tq_table[TQ_MAX_DIMS];
static atomic_int tq_count;

static void spread_init(void);

int cera_tq_register(int64_t dim, const float *rotation) {
    if (dim <= 0 || dim % 8 || !rotation) return CERA_EINVAL;
    spread_init();
    const int n = atomic_load(&tq_count);
    for (int i = 0; i < n; i++)
        if (tq_table[i].dim == dim) {
            tq_table[i].rot = rotation; /* the same matrix (the caller keeps it) */
            return CERA_OK;
        }
    if (n == TQ_MAX_DIMS) return CERA_ENOMEM;
    tq_table[n].dim = dim;
    tq_table[n].rot = rotation;
    atomic_store(&tq_count, n + 1); /* published after the entry is whole */
    return CERA_OK;
}

static const tq_mats *tq_find(int64_t dim) {
    const int n = atomic_load(&tq_count);
    for (int i = 0; i < n; i++)
        if (tq_table[i].dim == dim) return &tq_table[i];
    return NULL;
}

size_t kv_row_bytes(int kv_type, int64_t dim, int key) {
    switch (kv_type) {
    case KV_F32: return (size_t)dim * 4;
    case KV_F16: return (size_t)dim * 2;
    case KV_Q8_0: return (size_t)(dim / 32 * 34);
    case KV_Q4_0: return (size_t)(dim / 32 * 18);
    default: return (size_t)(2 + tq_bits(kv_type, key) * dim / 8);
    }
}

int kv_check_dim(int kv_type, int64_t dim) {
    if (kv_type < KV_F32 || kv_type >= KV_COUNT || dim <= 0) return CERA_EINVAL;
    if ((kv_type == KV_Q8_0 || kv_type == KV_Q4_0) && dim % 32) return CERA_EINVAL;
    if (kv_is_tq(kv_type) && (dim % 8 || dim > TQ_MAX_DIM || !tq_find(dim))) return CERA_EINVAL;
    return CERA_OK;
}

int kv_hadamard(int kv_type, int64_t dim, int key) {
    if ((kv_type != KV_Q8_0 && kv_type != KV_Q4_0) || dim % 64) return 0;
    if (!key) return 64; /* llama.cpp: "using smaller rotation matrices for V seems beneficial" */
    int64_t n = 64;
    while (dim % (2 * n) == 0) n *= 2;
    return (int)n;
}

void kv_hadamard_rotate(float *x, int64_t dim, int64_t n) {
    const float scale = 1.0f / sqrtf((float)n);
    for (int64_t b = 0; b < dim; b += n) {
        float *y = x + b;
        for (int64_t i = 0; i < n; i++) y[i] *= scale;
        for (int64_t len = 1; len < n; len <<= 1)
            for (int64_t i = 0; i < n; i += 2 * len)
                for (int64_t j = i; j < i + len; j++) {
                    const float u = y[j], v = y[j + len];
                    y[j] = u + v;
                    y[j + len] = u - v;
                }
    }
}

/* llama.cpp's quantize_row_q4_0_ref: the scale is the signed value of largest magnitude
 * over -8, codes round(x / d) + 8 clamped to 15. */
static void quant_row_q4_0(const float *x, block_q4_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / QK; b++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < QK / 2; j++) {
            const int8_t a = (int8_t)(x[j] * id + 8.5f), c = (int8_t)(x[QK / 2 + j] * id + 8.5f);
            const uint8_t xa = (uint8_t)(a < 15 ? a : 15), xc = (uint8_t)(c < 15 ? c : 15);
            y[b].qs[j] = (uint8_t)(xa | (xc << 4));
        }
    }
}

/* y = M x for a [dim][dim] row-major M (double accumulation is not needed: the reference is
 * float32 too, and an index that lands on a threshold either way is equally right). */
static void matvec(const float *m, const float *x, float *y, int64_t dim) {
    for (int64_t i = 0; i < dim; i++) {
        const float *row = m + i * dim;
        float s = 0.0f;
        for (int64_t j = 0; j < dim; j++) s += row[j] * x[j];
        y[i] = s;
    }
}

static void put_planes(const uint8_t *idx, int bits, uint8_t *dst, int64_t dim) {
    for (int p = 0; p < bits; p++) {
        uint8_t *plane = dst + p * dim / 8;
        memset(plane, 0, (size_t)(dim / 8));
        for (int64_t i = 0; i < dim; i++) plane[i >> 3] |= (uint8_t)(((idx[i] >> p) & 1) << (i & 7));
    }
}

/* SPREAD[b]: byte b's bit i moved to bit 0 of byte lane i (little-endian lanes), so the
 * indices of 8 coordinates come from one table read a plane: sum of SPREAD[plane byte] << p. */
static uint64_t SPREAD[256];
static atomic_int spread_ready;

static void spread_init(void) {
    if (atomic_load(&spread_ready)) return;
    for (int b = 0; b < 256; b++) {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) v |= (uint64_t)((b >> i) & 1) << (8 * i);
        SPREAD[b] = v;
    }
    atomic_store(&spread_ready, 1); /* every thread writes the same table */
}

/* the indices of coordinates 8j .. 8j+7 */
CERA_INLINE void get_indices8(const uint8_t *planes, int bits, int64_t dim, int64_t j, uint8_t out[8]) {
    uint64_t v = 0;
    for (int p = 0; p < bits; p++) v |= SPREAD[planes[p * dim / 8 + j]] << p;
    memcpy(out, &v, 8); /* lane i is coordinate 8j + i (the layout is little-endian) */
}

/* The row's norm over the centroids' is stored (the module docstring of the reference):
 * the decoded row keeps the row's norm. */
static void tq_store(int kv_type, int key, const float *x, uint8_t *dst, int64_t dim, float *scratch) {
    const tq_mats *m = tq_find(dim);
    const int bits = tq_bits(kv_type, key);
    const float *cb = codebook(bits);
    const int levels = 1 << bits;
    float *u = scratch, *y = scratch + dim;
    float nn = 0.0f;
    for (int64_t i = 0; i < dim; i++) nn += x[i] * x[i];
    const float norm = sqrtf(nn), inv = norm > 0 ? 1.0f / norm : 0.0f;
    for (int64_t i = 0; i < dim; i++) u[i] = x[i] * inv;
    matvec(m->rot, u, y, dim);
    const float sq = sqrtf((float)dim);
    uint8_t idx[TQ_MAX_DIM];
    float kept = 0.0f;
    for (int64_t i = 0; i < dim; i++) {
        const float t = y[i] * sq;
        int c = 0;
        for (int l = 0; l + 1 < levels; l++) c += t > 0.5f * (cb[l] + cb[l + 1]);
        idx[i] = (uint8_t)c;
        kept += cb[c] * cb[c];
    }
    kept = sqrtf(kept) / sq;
    const uint16_t h = f32_to_f16(kept > 0 ? norm / kept : 0.0f);
    memcpy(dst, &h, 2);
    put_planes(idx, bits, dst + 2, dim);
}

void kv_store_row(const cera_kernels *k, int kv_type, int key, const float *src, char *dst, int64_t dim, float *scratch) {
    const int rot = kv_hadamard(kv_type, dim, key);
    if (rot) { /* turned first (scratch[0:dim]); the quantizer's output goes after it */
        memcpy(scratch, src, sizeof(float) * (size_t)dim);
        kv_hadamard_rotate(scratch, dim, rot);
        src = scratch;
        scratch += dim;
    }
    switch (kv_type) {
    case KV_F16: k->quant[ACT_F16](src, dst, dim); break; /* round to nearest even */
    case KV_Q8_0: /* the activation quantizer (llama.cpp quantizes cache rows with the same from_float):
                     its blocks come first, side data after them */
        k->quant[ACT_Q8_0](src, scratch, dim);
        memcpy(dst, scratch, kv_row_bytes(KV_Q8_0, dim, key));
        break;
    case KV_Q4_0: quant_row_q4_0(src, (block_q4_0 *)dst, dim); break;
    case KV_F32: memcpy(dst, src, sizeof(float) * (size_t)dim); break;
    default: tq_store(kv_type, key, src, (uint8_t *)dst, dim, scratch);
    }
}

void tq_query(int64_t dim, const float *q, float *qx) {
    const tq_mats *m = tq_find(dim);
    matvec(m->rot, q, qx, dim);
    const float a = 1.0f / sqrtf((float)dim);
    for (int64_t i = 0; i < dim; i++) qx[i] *= a;
}

float cera_tq_dot_scalar(int64_t n, const uint8_t *planes, int bits, const float *cb, const float *x) {
    float a[8] = {0};
    uint8_t idx[8];
    for (int64_t j = 0; j < n / 8; j++) {
        get_indices8(planes, bits, n, j, idx);
        for (int i = 0; i < 8; i++) a[i] += x[8 * j + i] * cb[idx[i]];
    }
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

void cera_tq_axpy_scalar(int64_t n, float *y, const uint8_t *planes, int bits, const float *cb, float a) {
    uint8_t idx[8];
    for (int64_t j = 0; j < n / 8; j++) {
        get_indices8(planes, bits, n, j, idx);
        for (int i = 0; i < 8; i++) y[8 * j + i] += a * cb[idx[i]];
    }
}

float tq_key_dot(const cera_kernels *k, int kv_type, const char *row, const float *qx, int64_t dim) {
    const int bits = tq_bits(kv_type, 1);
    uint16_t hn;
    memcpy(&hn, row, 2);
    return f16_to_f32(hn) * k->tq_dot(dim, (const uint8_t *)row + 2, bits, codebook(bits), qx);
}

void tq_key_expand(int kv_type, const char *row, float *dst, int64_t dim) {
    const int bits = tq_bits(kv_type, 1);
    const float *cb = codebook(bits);
    uint16_t hn;
    memcpy(&hn, row, 2);
    const float n = f16_to_f32(hn);
    const uint8_t *planes = (const uint8_t *)row + 2;
    uint8_t idx[8];
    for (int64_t j = 0; j < dim / 8; j++) {
        get_indices8(planes, bits, dim, j, idx);
        for (int i = 0; i < 8; i++) dst[8 * j + i] = n * cb[idx[i]];
    }
}

void tq_value_axpy(const cera_kernels *k, int kv_type, const char *row, float w, float *acc, int64_t dim) {
    const int bits = tq_bits(kv_type, 0);
    uint16_t hn;
    memcpy(&hn, row, 2);
    const float s = w * f16_to_f32(hn) / sqrtf((float)dim);
    k->tq_axpy(dim, acc, (const uint8_t *)row + 2, bits, codebook(bits), s);
}

void tq_value_rotated(const cera_kernels *k, int kv_type, const char *row, float *dst, int64_t dim) {
    memset(dst, 0, sizeof(float) * (size_t)dim);
    tq_value_axpy(k, kv_type, row, 1.0f, dst, dim);
}

void tq_unrotate(int64_t dim, float *x, float *tmp) {
    const tq_mats *m = tq_find(dim);
    memset(tmp, 0, sizeof(float) * (size_t)dim);
    for (int64_t i = 0; i < dim; i++) { /* tmp = P^T x: row i of P weighs x[i] */
        const float *row = m->rot + i * dim;
        const float xi = x[i];
        for (int64_t j = 0; j < dim; j++) tmp[j] += row[j] * xi;
    }
    memcpy(x, tmp, sizeof(float) * (size_t)dim);
}
