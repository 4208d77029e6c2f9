/* Matrix products of many activation rows (prefill): weight tiles unpacked once.
 *
 * The row-by-row kernels (dot4) unpack a weight block (nibbles, high bits, scales) for
 * every activation row that meets it; over a prompt of hundreds of rows that unpacking
 * is most of the work. Here a thread unpacks R weight rows at a time (R = 16 with 512-bit
 * vectors, else 8: cera_kernels.gemm_rows) into a tile of unsigned bytes plus integer
 * scales, interleaved so that one vector holds four consecutive values of each of the R
 * rows, and a microkernel (cera_kernels.gemm, one per SIMD variant) multiplies the tile
 * with 4 activation rows at once: one vpdpbusd (or vpmaddubsw + vpmaddwd) per 4 values of
 * R rows, the activation bytes broadcast.
 *
 * The arithmetic is llama.cpp's, bit for bit: legacy formats (32-value blocks) keep
 * ggml's eight float lanes per (weight row, activation row), lane g taking the integer dot
 * of values 4g..4g+3 of each block (as its vec_dot and tinyBLAS); K-quants sum a whole
 * super-block in integers (sub-block scales and mins) and finish it with one float term
 * (as its tiled K-quant kernel). Signed weights are stored with an offset (q + c, c a
 * power of two) and c times the matching activation sum is subtracted in integers, so the
 * sums are exact. Scalar and SIMD microkernels perform the same float operations in the
 * same order, so every variant gives the same bits.
 *
 * Tile layout, per super-block (cera_gemm_tile_bytes / super-blocks apart): values
 * [sub-block][group of 4][row 0..R-1][4 bytes]; float d[R]; float m[R] (the block's min, or
 * K-quants' dmin); then for K-quants int32 sc[n_sub][R] and (Q4_K, Q5_K) int32
 * mins[n_sub][R].
 * Activation rows (cera_gemm_act) are prepared once per product: the int8 values
 * contiguous, the scale per super-block, the integer sum per sub-block, and for Q8_1 the
 * stored f16 block sum s (which llama.cpp's Q4_1 / Q5_1 dot uses for the min term).
 */
#include <stdlib.h>

#include "internal.h"

static const cera_gemm_format FORMATS[T_COUNT] = {
    [T_Q4_0] = {GEMM_OFFSET, 32, 32, 3, 15},
    [T_Q4_1] = {GEMM_MIN, 32, 32, -1, 15},
    [T_Q5_0] = {GEMM_OFFSET, 32, 32, 4, 31},
    [T_Q5_1] = {GEMM_MIN, 32, 32, -1, 31},
    [T_Q8_0] = {GEMM_OFFSET, 32, 32, 7, 255},
    [T_IQ4_NL] = {GEMM_OFFSET, 32, 32, 7, 241},
    [T_Q2_K] = {GEMM_K_MIN, 256, 16, -1, 3},
    [T_Q3_K] = {GEMM_K_OFFSET, 256, 16, 2, 7},
    [T_Q4_K] = {GEMM_K_MIN, 256, 32, -1, 15},
    [T_Q5_K] = {GEMM_K_MIN, 256, 32, -1, 31},
    [T_Q6_K] = {GEMM_K_OFFSET, 256, 16, 5, 63},
    /* the IQ formats as llama.cpp's tiled kernel takes them: signed values + 128 */
    [T_IQ4_XS] = {GEMM_K_OFFSET, 256, 32, 7, 255},
    [T_IQ3_S] = {GEMM_K_OFFSET, 256, 32, 7, 255},
    [T_IQ3_XXS] = {GEMM_K_OFFSET, 256, 32, 7, 255},
    [T_IQ2_S] = {GEMM_K_OFFSET, 256, 16, 7, 255},
    [T_IQ2_XS] = {GEMM_K_OFFSET, 256, 16, 7, 255},
    [T_IQ2_XXS] = {GEMM_K_OFFSET, 256, 32, 7, 255},
    [T_IQ1_M] = {GEMM_K_OFFSET, 256, 16, 7, 255},
    [T_IQ1_S] = {GEMM_K_OFFSET, 256, 32, 7, 255},
};

const cera_gemm_format *cera_gemm_format_of(int wtype, const cera_kernels *k) {
    if (wtype < 0 || wtype >= T_COUNT || !k->gemm) return NULL;
    const cera_gemm_format *f = &FORMATS[wtype];
    if (!f->sbk || f->max_u > k->gemm_max_u) return NULL;
    return f;
}

int64_t cera_gemm_tile_bytes(const cera_gemm_format *f, int64_t K, int R) {
    const int n_sub = f->sbk / f->sb;
    int64_t per = (int64_t)f->sbk * R + 8 * R;
    if (f->kind == GEMM_K_MIN) per += (int64_t)n_sub * 8 * R;
    if (f->kind == GEMM_K_OFFSET) per += (int64_t)n_sub * 4 * R;
    return K / f->sbk * per;
}

/* -- unpacking one weight row ------------------------------------------------------------------ */

/* The row's values as unsigned bytes (offset included), d and m per super-block, and
 * for K-quants the integer scale and min per sub-block. */
static void unpack_row(int t, const void *row, int64_t K, uint8_t *u, float *d, float *m, int32_t *sc, int32_t *mn) {
    switch (t) {
    case T_Q4_0:
    case T_Q4_1:
    case T_IQ4_NL: {
        const size_t bytes = t == T_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q4_0);
        for (int64_t i = 0; i < K / QK; i++, u += QK) {
            const char *b = (const char *)row + i * bytes;
            const uint8_t *qs = (const uint8_t *)b + (t == T_Q4_1 ? 4 : 2);
            uint16_t h;
            memcpy(&h, b, 2);
            d[i] = f16_to_f32(h);
            if (t == T_Q4_1) {
                memcpy(&h, b + 2, 2);
                m[i] = f16_to_f32(h);
            }
            for (int j = 0; j < QK / 2; j++) {
                int lo = qs[j] & 0xF, hi = qs[j] >> 4;
                if (t == T_IQ4_NL) {
                    lo = cera_kvalues_iq4nl[lo] + 128;
                    hi = cera_kvalues_iq4nl[hi] + 128;
                }
                u[j] = (uint8_t)lo;
                u[j + QK / 2] = (uint8_t)hi;
            }
        }
        return;
    }
    case T_Q5_0:
    case T_Q5_1: {
        for (int64_t i = 0; i < K / QK; i++, u += QK) {
            const uint8_t *qs, *qhp;
            if (t == T_Q5_0) {
                const block_q5_0 *b = (const block_q5_0 *)row + i;
                d[i] = f16_to_f32(b->d);
                qs = b->qs;
                qhp = b->qh;
            } else {
                const block_q5_1 *b = (const block_q5_1 *)row + i;
                d[i] = f16_to_f32(b->d);
                m[i] = f16_to_f32(b->m);
                qs = b->qs;
                qhp = b->qh;
            }
            uint32_t qh;
            memcpy(&qh, qhp, 4);
            for (int j = 0; j < QK / 2; j++) {
                u[j] = (uint8_t)((qs[j] & 0xF) | (((qh >> j) & 1) << 4));
                u[j + QK / 2] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
            }
        }
        return;
    }
    case T_Q8_0: {
        const block_q8_0 *b = row;
        for (int64_t i = 0; i < K / QK; i++, u += QK) {
            d[i] = f16_to_f32(b[i].d);
            for (int j = 0; j < QK; j++) u[j] = (uint8_t)(b[i].qs[j] + 128);
        }
        return;
    }
    case T_Q4_K:
    case T_Q5_K: {
        for (int64_t i = 0; i < K / QK_K; i++) {
            const uint8_t *q, *qh = NULL, *scales;
            if (t == T_Q4_K) {
                const block_q4_K *b = (const block_q4_K *)row + i;
                d[i] = f16_to_f32(b->d);
                m[i] = f16_to_f32(b->dmin);
                q = b->qs;
                scales = b->scales;
            } else {
                const block_q5_K *b = (const block_q5_K *)row + i;
                d[i] = f16_to_f32(b->d);
                m[i] = f16_to_f32(b->dmin);
                q = b->qs;
                qh = b->qh;
                scales = b->scales;
            }
            for (int j = 0; j < 4; j++, q += 32) {
                uint8_t s, mm;
                get_scale_min_k4(2 * j, scales, &s, &mm);
                sc[8 * i + 2 * j] = s;
                mn[8 * i + 2 * j] = mm;
                get_scale_min_k4(2 * j + 1, scales, &s, &mm);
                sc[8 * i + 2 * j + 1] = s;
                mn[8 * i + 2 * j + 1] = mm;
                for (int l = 0; l < 32; l++) {
                    const int h0 = qh ? ((qh[l] >> (2 * j)) & 1) << 4 : 0;
                    const int h1 = qh ? ((qh[l] >> (2 * j + 1)) & 1) << 4 : 0;
                    u[256 * i + 64 * j + l] = (uint8_t)((q[l] & 0xF) | h0);
                    u[256 * i + 64 * j + 32 + l] = (uint8_t)((q[l] >> 4) | h1);
                }
            }
        }
        return;
    }
    case T_Q2_K: {
        for (int64_t i = 0; i < K / QK_K; i++) {
            const block_q2_K *b = (const block_q2_K *)row + i;
            d[i] = f16_to_f32(b->d);
            m[i] = f16_to_f32(b->dmin);
            for (int k = 0; k < 16; k++) {
                sc[16 * i + k] = b->scales[k] & 0xF;
                mn[16 * i + k] = b->scales[k] >> 4;
            }
            for (int half = 0; half < 2; half++)
                for (int j = 0; j < 4; j++)
                    for (int l = 0; l < 32; l++)
                        u[256 * i + 128 * half + 32 * j + l] = (uint8_t)((b->qs[32 * half + l] >> (2 * j)) & 3);
        }
        return;
    }
    case T_Q3_K: { /* values + 4: the low 2 bits, plus 4 where the high bit is set */
        for (int64_t i = 0; i < K / QK_K; i++) {
            const block_q3_K *b = (const block_q3_K *)row + i;
            d[i] = f16_to_f32(b->d);
            int8_t s16[16];
            q3k_scales(b->scales, s16);
            for (int k = 0; k < 16; k++) sc[16 * i + k] = s16[k];
            for (int half = 0; half < 2; half++)
                for (int j = 0; j < 4; j++)
                    for (int l = 0; l < 32; l++)
                        u[256 * i + 128 * half + 32 * j + l] =
                            (uint8_t)(((b->qs[32 * half + l] >> (2 * j)) & 3) | (((b->hmask[l] >> (4 * half + j)) & 1) << 2));
        }
        return;
    }
    case T_Q6_K: {
        for (int64_t i = 0; i < K / QK_K; i++) {
            const block_q6_K *b = (const block_q6_K *)row + i;
            d[i] = f16_to_f32(b->d);
            for (int k = 0; k < 16; k++) sc[16 * i + k] = b->scales[k];
            for (int half = 0; half < 2; half++) {
                const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
                uint8_t *uu = u + 256 * i + 128 * half;
                for (int l = 0; l < 32; l++) {
                    uu[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                    uu[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                    uu[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                    uu[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                }
            }
        }
        return;
    }
    default:
        if (cera_is_iq256(t)) {
            /* llama.cpp's tiled IQ unpacking: the block scale times the constant its dot
             * applies at the end (IQ2: 1/8, IQ3_XXS: 1/4, IQ1: 1/8 with values 8 grid + delta),
             * the integer sub-block scales of the dot */
            const int sb = FORMATS[t].sb;
            const float f = t == T_IQ3_XXS ? 0.25f : t == T_IQ3_S || t == T_IQ4_XS ? 1.0f : 0.125f;
            const int iq1 = t == T_IQ1_S || t == T_IQ1_M;
            cera_iq_block b;
            for (int64_t i = 0; i < K / QK_K; i++) {
                cera_iq_unpack(t, row, i, &b);
                d[i] = b.d * f;
                for (int j = 0; j < QK_K / sb; j++) sc[QK_K / sb * i + j] = b.sc[j * sb / 16];
                for (int k = 0; k < QK_K; k++)
                    u[QK_K * i + k] = (uint8_t)((iq1 ? 8 * b.w[k] + b.dsign[k] : b.w[k]) + 128);
            }
        }
        return;
    }
}

void cera_gemm_pack(int t, const cera_gemm_format *f, const void *w, int64_t row_bytes, int64_t K, int R, int rows,
                    uint8_t *tile, cera_gemm_scratch *s) {
    const int64_t n_super = K / f->sbk;
    const int n_sub = f->sbk / f->sb;
    for (int r = 0; r < R; r++) {
        if (r < rows) {
            unpack_row(t, (const char *)w + r * row_bytes, K, s->u[r], s->d[r], s->m[r], s->sc[r], s->mn[r]);
        } else { /* a short tile: zero rows whose results nobody stores */
            memset(s->u[r], 0, (size_t)K);
            memset(s->d[r], 0, sizeof(float) * (size_t)n_super);
            memset(s->m[r], 0, sizeof(float) * (size_t)n_super);
            memset(s->sc[r], 0, sizeof(int32_t) * (size_t)(n_super * n_sub));
            memset(s->mn[r], 0, sizeof(int32_t) * (size_t)(n_super * n_sub));
        }
    }
    const int64_t stride = cera_gemm_tile_bytes(f, K, R) / n_super;
    for (int64_t i = 0; i < n_super; i++) {
        uint8_t *p = tile + i * stride;
        for (int64_t g = 0; g < f->sbk / 4; g++, p += 4 * R)
            for (int r = 0; r < R; r++) memcpy(p + 4 * r, s->u[r] + i * f->sbk + 4 * g, 4);
        float *dm = (float *)p;
        for (int r = 0; r < R; r++) {
            dm[r] = s->d[r][i];
            dm[R + r] = s->m[r][i];
        }
        int32_t *iv = (int32_t *)(dm + 2 * R);
        if (f->kind == GEMM_K_MIN || f->kind == GEMM_K_OFFSET)
            for (int j = 0; j < n_sub; j++)
                for (int r = 0; r < R; r++) iv[R * j + r] = s->sc[r][i * n_sub + j];
        if (f->kind == GEMM_K_MIN)
            for (int j = 0; j < n_sub; j++)
                for (int r = 0; r < R; r++) iv[R * (n_sub + j) + r] = s->mn[r][i * n_sub + j];
    }
}

/* -- activation rows ------------------------------------------------------------------------- */

int64_t cera_gemm_act_bytes(const cera_gemm_format *f, int64_t K) {
    /* values, scale per super-block, sum per sub-block, s per 32 (Q8_1): 64-byte aligned parts */
    return CERA_ALIGN32(K) + CERA_ALIGN32(K / f->sbk * 4) + CERA_ALIGN32(K / f->sb * 4) + CERA_ALIGN32(K / 32 * 4) + 64;
}

void cera_gemm_prep_act(const cera_gemm_format *f, int act, const void *row, int64_t K, void *dst, cera_gemm_act *a) {
    char *p = dst;
    int8_t *q = (int8_t *)p;
    p += CERA_ALIGN32(K);
    float *d = (float *)p;
    p += CERA_ALIGN32(K / f->sbk * 4);
    int32_t *sum = (int32_t *)p;
    p += CERA_ALIGN32(K / f->sb * 4);
    float *s = (float *)p;
    if (act == ACT_Q8_K) {
        const block_q8_K *b = row;
        for (int64_t i = 0; i < K / QK_K; i++) {
            memcpy(q + i * QK_K, b[i].qs, QK_K);
            d[i] = b[i].d;
            for (int j = 0; j < QK_K / f->sb; j++) {
                int32_t v = 0;
                for (int k = j * f->sb / 16; k < (j + 1) * f->sb / 16; k++) v += b[i].bsums[k];
                sum[i * (QK_K / f->sb) + j] = v;
            }
        }
    } else { /* Q8_0 (d) or Q8_1 (d, s): blocks of 32 */
        const size_t bytes = act == ACT_Q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
        const size_t off = act == ACT_Q8_1 ? 4 : 2;
        for (int64_t i = 0; i < K / QK; i++) {
            const char *b = (const char *)row + i * bytes;
            const int8_t *qs = (const int8_t *)(b + off);
            uint16_t h;
            memcpy(&h, b, 2);
            d[i] = f16_to_f32(h);
            if (act == ACT_Q8_1) {
                memcpy(&h, b + 2, 2);
                s[i] = f16_to_f32(h);
            }
            int32_t v = 0;
            for (int j = 0; j < QK; j++) v += qs[j];
            sum[i] = v;
            memcpy(q + i * QK, qs, QK);
        }
    }
    a->q = q;
    a->d = d;
    a->sum = sum;
    a->s = s;
}

/* -- scratch ------------------------------------------------------------------------------- */

cera_gemm_scratch *cera_gemm_scratch_new(int64_t K) {
    /* sized for every format and up to CERA_GEMM_MAX_ROWS rows: a tile holds under 1.3
     * bytes per value and row (cera_gemm_tile_bytes: Q4_K 328 per 256), a row at most
     * K/32 super-blocks and K/16 sub-blocks */
    const int R = CERA_GEMM_MAX_ROWS;
    const int64_t n_super = K / 32 + 1, n_sub = K / 16 + 1;
    const size_t per_row = (size_t)(K + n_super * 8 + n_sub * 8 + 64 * 5);
    const size_t tile = (size_t)(K * 12 * R / 8 + 64);
    cera_gemm_scratch *s = malloc(sizeof(cera_gemm_scratch) + R * per_row + tile + 128);
    if (!s) return NULL;
    char *p = (char *)(s + 1);
    p += -(uintptr_t)p & 63;
    s->tile = (uint8_t *)p;
    p += tile;
    for (int r = 0; r < R; r++) {
        s->u[r] = (uint8_t *)p;
        p += K + 64 - K % 64;
        s->d[r] = (float *)p;
        p += n_super * 4 + 64 - (n_super * 4) % 64;
        s->m[r] = (float *)p;
        p += n_super * 4 + 64 - (n_super * 4) % 64;
        s->sc[r] = (int32_t *)p;
        p += n_sub * 4 + 64 - (n_sub * 4) % 64;
        s->mn[r] = (int32_t *)p;
        p += n_sub * 4 + 64 - (n_sub * 4) % 64;
    }
    return s;
}
