/* Shared definitions of the C side: GGML block layouts, f16/bf16 conversions, the
 * kernel table that each SIMD variant fills, and the thread pool.
 *
 * Block layouts are GGML's (ggml-common.h): they are the bytes of the GGUF file, so
 * they are facts of the format. Every block size is even and files align tensor data
 * to 32 bytes, so the uint16 fields are always 2-byte aligned.
 */
#ifndef CERA_INTERNAL_H
#define CERA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cera_cpu.h"

#if defined(__GNUC__) || defined(__clang__)
#define CERA_INLINE static inline __attribute__((always_inline))
#define CERA_UNUSED __attribute__((unused))
#else
#define CERA_INLINE static inline
#define CERA_UNUSED
#endif

#define CERA_OK 0
#define CERA_EINVAL (-1)
#define CERA_ENOMEM (-2)
#define CERA_ETYPE (-3)

/* -- GGML type ids (enum ggml_type) ------------------------------------------------------ */
enum {
    T_F32 = 0,
    T_F16 = 1,
    T_Q4_0 = 2,
    T_Q4_1 = 3,
    T_Q5_0 = 6,
    T_Q5_1 = 7,
    T_Q8_0 = 8,
    T_Q8_1 = 9,
    T_Q2_K = 10,
    T_Q3_K = 11,
    T_Q4_K = 12,
    T_Q5_K = 13,
    T_Q6_K = 14,
    T_Q8_K = 15,
    T_IQ2_XXS = 16,
    T_IQ2_XS = 17,
    T_IQ3_XXS = 18,
    T_IQ1_S = 19,
    T_IQ4_NL = 20,
    T_IQ3_S = 21,
    T_IQ2_S = 22,
    T_IQ4_XS = 23,
    T_IQ1_M = 29,
    T_BF16 = 30,
    T_COUNT = 40,
};

#define QK 32   /* block of the legacy formats */
#define QK_K 256 /* super-block of the K-quants */

typedef struct { uint16_t d; uint8_t qs[QK / 2]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[QK / 2]; } block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[QK]; } block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[QK]; } block_q8_1; /* s = d * sum(qs) */
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } block_iq4_nl;
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
/* the IQ formats (256 values; grids in iq_tables.h) */
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; } block_iq2_xxs;
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; } block_iq2_xs;
typedef struct { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; } block_iq2_s;
typedef struct { uint16_t d; uint8_t qs[3 * QK_K / 8]; } block_iq3_xxs;
typedef struct { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; } block_iq3_s;
typedef struct { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; } block_iq1_s;
typedef struct { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; } block_iq1_m;
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(block_q8_1) == 36, "q8_1");
_Static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(block_q3_K) == 110, "q3_K");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K");
_Static_assert(sizeof(block_iq2_xxs) == 66, "iq2_xxs");
_Static_assert(sizeof(block_iq2_xs) == 74, "iq2_xs");
_Static_assert(sizeof(block_iq2_s) == 82, "iq2_s");
_Static_assert(sizeof(block_iq3_xxs) == 98, "iq3_xxs");
_Static_assert(sizeof(block_iq3_s) == 110, "iq3_s");
_Static_assert(sizeof(block_iq1_s) == 50, "iq1_s");
_Static_assert(sizeof(block_iq1_m) == 56, "iq1_m");
_Static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs");

/* An IQ super-block unpacked (quants.c): per value the signed integer weight of ggml's dot
 * (grid value with its sign; IQ4_XS the non-linear level) and, for IQ1_S / IQ1_M, the sign
 * of the delta; per 16 values the integer scale ggml's dot multiplies by and the float
 * scale dequantization multiplies by; d as stored. */
typedef struct {
    int8_t w[QK_K];
    int8_t dsign[QK_K];
    int32_t sc[QK_K / 16];
    float db[QK_K / 16];
    float d;
} cera_iq_block;
/* Whether t is one of the IQ formats of 256 values; unpack block i of a row of them. */
int cera_is_iq256(int t);
void cera_iq_unpack(int t, const void *row, int64_t i, cera_iq_block *b);
/* ggml's x86 dot of one IQ row with a Q8_K row (the lane layout of its AVX2 code), shared by every variant */
void cera_dot_iq(int t, int64_t n, const void *w, const void *a, float *s);
/* One output of llama.cpp's repacked Q4_0 / IQ4_NL product (quants.c; see matmul.c). */
float cera_dot_repack(int t, int64_t n, const void *w, const void *a);

/* The 16 non-linear levels of IQ4_NL (ggml-common.h kvalues_iq4nl). */
extern const int8_t cera_kvalues_iq4nl[16];

/* -- f16 / bf16 -------------------------------------------------------------------------- */

CERA_INLINE uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
CERA_INLINE float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Exact f16 -> f32 (no table, no float arithmetic except for subnormals, which are exact). */
CERA_INLINE float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    if (em >= 0x7c00u) return bits_f32(sign | 0x7f800000u | ((em & 0x3ffu) << 13)); /* inf, nan */
    if (em >= 0x0400u) return bits_f32(sign | ((em << 13) + 0x38000000u));         /* normal */
    float f = (float)em * 5.9604644775390625e-08f;                                  /* subnormal: em * 2^-24 */
    return sign ? -f : f;
}

/* f32 -> f16 rounding to nearest even, like F16C's vcvtps2ph with imm 0. */
CERA_INLINE uint16_t f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x1ffu)); /* nan stays nan, quiet */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                     /* >= 65520: inf */
    if (ax >= 0x38800000u) {                                                      /* normal half */
        uint32_t h = (ax - 0x38000000u) >> 13;
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    if (ax < 0x33000000u) return (uint16_t)sign; /* below 2^-25: rounds to zero */
    /* subnormal half: round(|f| * 2^24) */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

CERA_INLINE float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* As ggml_compute_fp32_to_bf16: nan made quiet, otherwise round to nearest even. */
CERA_INLINE uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* Round to nearest, ties to even, for |v| < 2^22 (ggml's nearest_int). */
CERA_INLINE int nearest_int(float v) {
    float f = v + 12582912.f;
    int i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The 6-bit scale and min j (0..7) of a Q4_K / Q5_K super-block. */
CERA_INLINE void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

/* The 16 signed 6-bit scales of a Q3_K super-block, minus 32. */
CERA_INLINE void q3k_scales(const uint8_t *s, int8_t out[16]) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
        int hi = (s[8 + (i % 4)] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* -- activation formats (llama.cpp's vec_dot_type of each weight type) ------------------- */
enum { ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_1, ACT_Q8_K, ACT_COUNT };

/* The activation rows of the Q8_0 and Q8_1 formats carry, after llama.cpp's blocks, side
 * data that SIMD kernels use to save work per weight block (the blocks stay as they are,
 * byte for byte):
 *   Q8_0: float da[nb] (the f16 scales as f32), then int32 neg_lanes[nb][8] where lane i
 *         is -(q[4i] + q[4i+1] + q[4i+2] + q[4i+3]): with it, an unsigned weight u = w + c
 *         gives sum((u - c) * q) = dpbusd(neg_lanes << log2(c), u, q) in one instruction;
 *   Q8_1: float ds[nb][2] = {d, s} as f32.
 * Each part starts 32 bytes after the row start (rows are padded to 64 bytes); callers
 * need not align the row, so the kernels use unaligned loads. */
#define CERA_ALIGN32(x) (((x) + 31) & ~(int64_t)31)
CERA_INLINE int64_t q8_0_side_da(int64_t nb) { return CERA_ALIGN32(nb * (int64_t)sizeof(block_q8_0)); }
CERA_INLINE int64_t q8_0_side_lanes(int64_t nb) { return q8_0_side_da(nb) + CERA_ALIGN32(nb * 4); }
CERA_INLINE int64_t q8_1_side_ds(int64_t nb) { return CERA_ALIGN32(nb * (int64_t)sizeof(block_q8_1)); }

typedef struct {
    int supported;
    int block;       /* elements per block */
    int block_bytes; /* bytes per block */
    int act;         /* activation format */
    void (*dequant)(const void *src, float *dst, int64_t n);
} cera_type_traits;

extern const cera_type_traits cera_types[T_COUNT];
extern const int cera_act_block[ACT_COUNT];
extern const int cera_act_block_bytes[ACT_COUNT];

/* Bytes of one activation row of n elements in format act, side data and padding included. */
int64_t cera_act_bytes(int act, int64_t n);

/* -- kernel table: one per SIMD variant ------------------------------------------------- */

/* s = dot(weight row w, quantized activation row a), n elements. */
typedef void (*cera_dot_fn)(int64_t n, const void *w, const void *a, float *s);
/* quantize n floats (a multiple of the format's block) into the activation format. */
typedef void (*cera_quant_fn)(const float *x, void *y, int64_t n);

/* the same for 4 weight rows, row_stride bytes apart: s[0..3] */
typedef void (*cera_dot4_fn)(int64_t n, const void *w, int64_t row_stride, const void *a, float *s);

/* R weight rows (w_stride bytes apart) against A activation rows (act_stride bytes apart):
 * s[a * s_stride + r] = dot(row r, activation row a), for R <= cera_kernels.dotm_rows[t]
 * and A <= CERA_DOTM_MAX_ACTS. Each output is bit for bit what dot computes for its pair
 * (a batch of sequences decoding together must give each one the tokens it gets alone):
 * the unpacking of the weights and the integer parts are shared, the float steps of each
 * pair are dot's. */
typedef void (*cera_dotm_fn)(int64_t n, const void *w, int64_t w_stride, int R, const void *acts, int64_t act_stride,
                             int A, float *s, int64_t s_stride);
#define CERA_DOTM_MAX_ACTS 4

/* -- many-row products (gemm.c) ---------------------------------------------------------- */

/* How a weight format maps onto the gemm microkernel: the integer arithmetic of its
 * llama.cpp dot product, per super-block of sbk values made of sub-blocks of sb. */
enum {
    GEMM_OFFSET,   /* legacy, signed: d_w d_a (sum u q - (sum q << shift)) */
    GEMM_MIN,      /* legacy with a min (Q4_1, Q5_1): d_w d_a sum u q + m s */
    GEMM_K_MIN,    /* Q4_K, Q5_K: d d_a sum_j sc_j sum u q - dmin d_a sum_j mins_j sum_j q */
    GEMM_K_OFFSET, /* Q6_K: d d_a sum_j sc_j (sum u q - (sum_j q << shift)) */
};
typedef struct {
    int kind, sbk, sb;
    int shift; /* log2 of the offset stored into signed values */
    int max_u; /* largest unsigned value (the microkernel must not saturate on it) */
} cera_gemm_format;

/* One prepared activation row: int8 values (contiguous), scale per super-block, integer
 * sum per sub-block, the stored block sum s per 32 values (Q8_1 only). */
typedef struct {
    const int8_t *q;
    const float *d;
    const int32_t *sum;
    const float *s;
} cera_gemm_act;

/* R tiled weight rows (cera_kernels.gemm_rows) times 4 activation rows: y[a][r] for r < R
 * (a tile, see gemm.c); y[a] NULL: not stored. */
typedef void (*cera_gemm_fn)(const cera_gemm_format *f, int64_t n_super, const uint8_t *tile,
                             const cera_gemm_act *const a[4], float *const y[4]);

#define CERA_GEMM_MAX_ROWS 16
/* Per-thread space of the packing: the tile and each row unpacked. */
typedef struct {
    uint8_t *tile;
    uint8_t *u[CERA_GEMM_MAX_ROWS];
    float *d[CERA_GEMM_MAX_ROWS], *m[CERA_GEMM_MAX_ROWS];
    int32_t *sc[CERA_GEMM_MAX_ROWS], *mn[CERA_GEMM_MAX_ROWS];
} cera_gemm_scratch;

typedef struct cera_kernels cera_kernels;
/* The format of weight type t if the context's microkernel can take it, else NULL. */
const cera_gemm_format *cera_gemm_format_of(int t, const cera_kernels *k);
int64_t cera_gemm_tile_bytes(const cera_gemm_format *f, int64_t K, int R);
int64_t cera_gemm_act_bytes(const cera_gemm_format *f, int64_t K);
/* Tile rows [0, rows) of W into R rows (rows <= R; the rest zero). */
void cera_gemm_pack(int t, const cera_gemm_format *f, const void *w, int64_t row_bytes, int64_t K, int R, int rows,
                    uint8_t *tile, cera_gemm_scratch *s);
/* Prepare a quantized activation row (format act) into dst (cera_gemm_act_bytes). */
void cera_gemm_prep_act(const cera_gemm_format *f, int act, const void *row, int64_t K, void *dst, cera_gemm_act *a);
cera_gemm_scratch *cera_gemm_scratch_new(int64_t K); /* any format, rows of K; free() it */
void cera_gemm_8x4_scalar(const cera_gemm_format *f, int64_t n_super, const uint8_t *tile,
                          const cera_gemm_act *const a[4], float *const y[4]);

struct cera_kernels {
    const char *name;
    /* which SiLU llama.cpp's ggml-cpu computes on this kind of CPU: 0 = x / (1 + expf(-x))
     * (its scalar code), CERA_SILU_AVX2 / CERA_SILU_AVX512 = its vectorized ggml_v_expf of
     * that width (ops.c), whose bits differ from libm's and from each other's */
    int silu_kind;
    /* y = silu(g) (* u if given), values from n_vec on by the scalar formula; and
     * ggml_vec_soft_max_f32 (s = exp(s - max), returns the sum): ops.c, attention.c */
    void (*silu_rows)(int64_t n, int64_t n_vec, const float *g, const float *u, float *y);
    double (*softmax_row)(int64_t n, float *s, float max);
    cera_dot_fn dot[T_COUNT];
    cera_dot4_fn dot4[T_COUNT]; /* optional */
    cera_dotm_fn dotm[T_COUNT]; /* optional; takes up to dotm_rows[t] weight rows at once */
    int dotm_rows[T_COUNT];
    cera_quant_fn quant[ACT_COUNT];
    /* attention primitives over the KV cache */
    float (*dot_f16)(int64_t n, const uint16_t *a, const uint16_t *b);
    float (*dot_f32)(int64_t n, const float *a, const float *b);
    void (*axpy_f16)(int64_t n, float *y, const uint16_t *x, float a); /* y += a * x */
    void (*axpy_f32)(int64_t n, float *y, const float *x, float a);
    void (*scale_f32)(int64_t n, float *y, float a);
    /* TurboQuant rows (kvcache.c): over the bit planes of a row of n indices (n a multiple
     * of 8, `bits` planes of n / 8 bytes), sum_i x[i] cb[idx_i], and y[i] += a cb[idx_i] */
    float (*tq_dot)(int64_t n, const uint8_t *planes, int bits, const float *cb, const float *x);
    void (*tq_axpy)(int64_t n, float *y, const uint8_t *planes, int bits, const float *cb, float a);
    /* an f16 accumulator, as llama.cpp's flash attention keeps one: y = f16(v * a + y)
     * with one rounding in f32 (a fused multiply-add), and y = f16(y * a) */
    void (*mad_f16)(int64_t n, uint16_t *y, const uint16_t *v, float a);
    void (*scale_f16)(int64_t n, uint16_t *y, float a);
    /* sum of the 64-bit words of a buffer: the read-bandwidth probe of the benchmarks */
    uint64_t (*read_sum)(const void *p, int64_t bytes);
    /* the many-row microkernel (gemm.c) and the largest unsigned weight value it takes */
    cera_gemm_fn gemm;
    int gemm_rows; /* R of its tiles: 8, or 16 with 512-bit vectors */
    int gemm_max_u;
    /* C[M x N] += A[M x K] B[K x N] in float32, one fused multiply-add chain over k per
     * element (the tiled attention of many query rows), and an exact f16 -> f32 row */
    void (*gemm_f32)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float *C, int64_t ldc);
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    /* reproduce llama.cpp as shipped, weight repacking on ($CERA_CPU_LLAMA_REPACK=1): Q4_0 and
     * IQ4_NL products of a multiple of 8 weight rows take its repacked arithmetic (matmul.c) */
    int llama_repack;
    /* that arithmetic (cera_dot_repack, bit for bit), optional: R <= 4 weight rows, stride
     * bytes apart, against one activation row (with its side data); and over a gemm tile
     * (format GEMM_OFFSET) of 4 activation rows */
    void (*dot_repack)(int t, int64_t n, const void *w, int64_t stride, int R, const void *a, float *s);
    cera_gemm_fn gemm_repack;
};

/* Fill a table with the portable scalar kernels. */
void cera_kernels_init_scalar(cera_kernels *k);
/* Each SIMD variant starts from the scalar table and overrides what it implements;
 * these return 0 when the variant is not compiled for this architecture. */
int cera_kernels_init_avx2(cera_kernels *k);
int cera_kernels_init_avx512(cera_kernels *k);
int cera_kernels_init_avx512vnni(cera_kernels *k);
int cera_kernels_init_neon(cera_kernels *k);
/* On a CPU with AVX512_BF16: BF16 products as llama.cpp's build for it (vdpbf16ps). */
void cera_kernels_bf16_dp(cera_kernels *k);

/* The scalar activation quantizers, shared by every variant (a SIMD quantizer must
 * produce the same bytes). */
void cera_quant_q8_0_scalar(const float *x, void *y, int64_t n);
void cera_quant_q8_1_scalar(const float *x, void *y, int64_t n);
void cera_quant_q8_K_scalar(const float *x, void *y, int64_t n);
uint64_t cera_read_sum_scalar(const void *p, int64_t bytes);

/* -- thread pool ---------------------------------------------------------------------------- */

typedef struct cera_pool cera_pool;
typedef void (*cera_task_fn)(void *arg, int ith, int nth);

cera_pool *cera_pool_new(int n_threads);
void cera_pool_free(cera_pool *pool);
int cera_pool_threads(const cera_pool *pool);
void cera_pool_set_spin_us(cera_pool *pool, int spin_us);
/* Run fn(arg, ith, nth) on up to nth threads (the caller is ith 0) and wait for those
 * that took part. Workers that do not arrive before the caller has finished its own call
 * are left out, so a task must take its work from a shared counter (an atomic in arg),
 * never split it by ith; ith only names a thread (scratch space, say). */
void cera_pool_run(cera_pool *pool, cera_task_fn fn, void *arg, int nth);

/* -- context -------------------------------------------------------------------------------- */

struct cera_ctx {
    cera_kernels k;
    cera_pool *pool;
    int n_threads;
    void *scratch; /* activation buffer of cera_matmul, grown on demand, 64-byte aligned */
    size_t scratch_bytes;
    void *lock; /* pthread mutex: one top-level call at a time per context */
};

void *cera_scratch(cera_ctx *ctx, size_t bytes);

#define CERA_MAX_PRODUCTS 8 /* members of one product job (cera_product in cera_cpu_api.h) */
/* How a job picks its kernels (the per_row arguments of cera_cpu_api.h): by the row count
 * (llama.cpp's choice), the one-row kernels for every row, the prompt kernels for every row. */
enum { CERA_ROWS_BY_COUNT = 0, CERA_ROWS_ONE = 1, CERA_ROWS_PROMPT = 2 };

/* 0 if the members can run as one job (glu_op >= 0: exactly a gate and an up member of
 * one size), else a CERA_E* code. */
int cera_products_check(const cera_product *mem, int n_mem, int64_t K, int glu_op);
/* The members as one pool job; glu_op >= 0 also writes glu_out[m, r] = act(gate) * up
 * (rows glu_stride apart). Needs the context lock. */
int cera_products_unlocked(cera_ctx *ctx, const float *x, int64_t x_stride, int64_t K, int64_t M,
                           const cera_product *mem, int n_mem, int glu_op, float *glu_out, int64_t glu_stride,
                           int per_row);
/* y = act(g) * u over n elements (ops.c; the glu op and the epilogue above share it). */
enum { CERA_SILU_LIBM = 0, CERA_SILU_AVX2 = 1, CERA_SILU_AVX512 = 2 };
/* y = act(g) * u over n values; with op 0 (SiLU), values from n_vec on take the scalar
 * formula, as llama.cpp's leftovers after its vector loop do */
void cera_glu_rows(const cera_kernels *k, int op, const float *g, const float *u, float *y, int64_t n, int64_t n_vec);
int cera_silu_width(int silu_kind);
void cera_silu_rows_libm(int64_t n, int64_t n_vec, const float *g, const float *u, float *y);
double cera_softmax_row_libm(int64_t n, float *s, float max);

/* The ops that use the pool or the scratch buffer, for callers that hold the context
 * lock already (cera_plan_run); cera_matmul and cera_attention lock and call these. */
int cera_matmul_unlocked(cera_ctx *ctx, int wtype, const void *w, int64_t w_row_bytes, int64_t K, int64_t N,
                         const float *x, int64_t x_stride, int64_t M, float *y, int64_t y_stride, const float *bias);
int cera_attention_unlocked(cera_ctx *ctx, const float *q, const float *k, const float *v, int64_t n_tok,
                            int64_t n_heads, int64_t n_kv_heads, int64_t k_dim, int64_t v_dim, void *k_cache,
                            void *v_cache, int kv_type, int64_t capacity, int64_t n_ctx, const int32_t *cell_pos,
                            const int32_t *q_pos, float scale, int32_t window, float softcap, int acc_f16, float *out,
                            int64_t kv_start);
/* Attention of several sequences, each in its own slot of a state (see cera_attention_seqs). */
int cera_attention_seqs_unlocked(cera_ctx *ctx, const cera_attention_seqs *a, void *const *table);
void cera_ctx_lock(cera_ctx *ctx);
void cera_ctx_unlock(cera_ctx *ctx);

/* The gelu lookup table (f16 in, f16 out), as ggml builds it. */
extern uint16_t cera_gelu_table[65536];
void cera_tables_init(void);

/* the portable TurboQuant row kernels (kvcache.c), the table's scalar entries */
float cera_tq_dot_scalar(int64_t n, const uint8_t *planes, int bits, const float *cb, const float *x);
void cera_tq_axpy_scalar(int64_t n, float *y, const uint8_t *planes, int bits, const float *cb, float a);

#endif
