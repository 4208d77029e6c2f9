/* Tensor types: their block layouts, dequantization and the activation quantizers.
 *
 * Dequantization must equal gguf.quants.dequantize bit for bit, so each formula below
 * performs the same float32 operations in the same order as the gguf package (which
 * follows ggml's dequantize_row_*). The build compiles with -ffp-contract=off so that
 * no multiply-add is fused behind our back.
 *
 * The activation quantizers reproduce what llama.cpp's CPU backend does on x86-64
 * (ggml-cpu/arch/x86/quants.c): Q8_0 and Q8_1 scale by 127/amax and round to nearest
 * even; Q8_K follows quantize_row_q8_K_ref (scale -127/max of the signed extreme,
 * nearest_int, clamp to 127, 16-element sums). Every SIMD variant must produce the same
 * bytes, so the quantized activations are identical across variants.
 */
#include <math.h>

#include "internal.h"
#include "iq_tables.h"

const int8_t cera_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* -- dequantization ---------------------------------------------------------------------- */

static void dq_f32(const void *src, float *y, int64_t n) { memcpy(y, src, (size_t)n * sizeof(float)); }

static void dq_f16(const void *src, float *y, int64_t n) {
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++) y[i] = f16_to_f32(x[i]);
}

static void dq_bf16(const void *src, float *y, int64_t n) {
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++) y[i] = bf16_to_f32(x[i]);
}

static void dq_q4_0(const void *src, float *y, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            y[j + QK / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void dq_q4_1(const void *src, float *y, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            y[j + QK / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static void dq_q5_0(const void *src, float *y, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = f16_to_f32(b[i].d);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < QK / 2; j++) {
            const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = d * (float)(((b[i].qs[j] & 0xF) | (h0 << 4)) - 16);
            y[j + QK / 2] = d * (float)(((b[i].qs[j] >> 4) | (h1 << 4)) - 16);
        }
    }
}

static void dq_q5_1(const void *src, float *y, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < QK / 2; j++) {
            const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = d * (float)((b[i].qs[j] & 0xF) | (h0 << 4)) + m;
            y[j + QK / 2] = d * (float)((b[i].qs[j] >> 4) | (h1 << 4)) + m;
        }
    }
}

static void dq_q8_0(const void *src, float *y, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void dq_iq4_nl(const void *src, float *y, int64_t n) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = d * (float)cera_kvalues_iq4nl[b[i].qs[j] & 0xF];
            y[j + QK / 2] = d * (float)cera_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

static void dq_q2_K(const void *src, float *y, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int j = 0; j < 4; j++) {
                const int shift = 2 * j;
                for (int part = 0; part < 2; part++, is++) {
                    const uint8_t sc = b[i].scales[is];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[16 * part + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

static void dq_q3_K(const void *src, float *y, int64_t n) {
    const block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = f16_to_f32(b[i].d);
        int8_t sc[16];
        q3k_scales(b[i].scales, sc);
        const uint8_t *q = b[i].qs;
        int is = 0, bit = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int j = 0; j < 4; j++, bit++) {
                const int shift = 2 * j;
                for (int part = 0; part < 2; part++, is++) {
                    const float dl = d * (float)sc[is];
                    for (int l = 16 * part; l < 16 * part + 16; l++) {
                        const int v = ((q[l] >> shift) & 3) - ((b[i].hmask[l] >> bit) & 1 ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

static void dq_q4_K(const void *src, float *y, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 4; j++, q += 32) {
            uint8_t sc, m;
            get_scale_min_k4(2 * j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            get_scale_min_k4(2 * j + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void dq_q5_K(const void *src, float *y, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        for (int j = 0; j < 4; j++, q += 32) {
            uint8_t sc, m;
            get_scale_min_k4(2 * j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            get_scale_min_k4(2 * j + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((q[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4)) - m2;
        }
    }
}

static void dq_q6_K(const void *src, float *y, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = f16_to_f32(b[i].d);
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = b[i].ql + 64 * half, *qh = b[i].qh + 32 * half;
            const int8_t *sc = b[i].scales + 8 * half;
            float *yy = y + 128 * half;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                yy[l] = (d * (float)sc[is + 0]) * (float)q1;
                yy[l + 32] = (d * (float)sc[is + 2]) * (float)q2;
                yy[l + 64] = (d * (float)sc[is + 4]) * (float)q3;
                yy[l + 96] = (d * (float)sc[is + 6]) * (float)q4;
            }
        }
    }
}

/* -- the IQ formats -------------------------------------------------------------------------- */

int cera_is_iq256(int t) {
    return t == T_IQ2_XXS || t == T_IQ2_XS || t == T_IQ2_S || t == T_IQ3_XXS || t == T_IQ3_S || t == T_IQ1_S ||
           t == T_IQ1_M || t == T_IQ4_XS;
}

/* 8 grid values (8 or 4 + 4) with the signs of the bits of sbits */
static void iq_put8(int8_t *w, const int8_t *g0, const int8_t *g1, unsigned sbits) {
    for (int j = 0; j < 8; j++) {
        const int v = j < 4 || !g1 ? g0[j] : g1[j - 4];
        w[j] = (int8_t)((sbits >> j) & 1 ? -v : v);
    }
}

/* The float scale of the gguf package's dequantization, from the stored 4-bit scale ls:
 * d * (0.5 + ls) * f in that order (IQ2: f = 0.25, IQ3_XXS: 0.5) */
static float iq_db_half(float d, int ls, float f) { return d * (0.5f + (float)ls) * f; }

void cera_iq_unpack(int t, const void *row, int64_t i, cera_iq_block *b) {
    memset(b->dsign, 1, sizeof b->dsign);
    switch (t) {
    case T_IQ2_XXS: {
        const block_iq2_xxs *x = (const block_iq2_xxs *)row + i;
        b->d = f16_to_f32(x->d);
        const uint8_t *q = (const uint8_t *)x->qs;
        for (int ib = 0; ib < 8; ib++, q += 8) {
            uint32_t aux;
            memcpy(&aux, q + 4, 4);
            const int ls = (int)(aux >> 28);
            for (int l = 0; l < 4; l++)
                iq_put8(b->w + 32 * ib + 8 * l, cera_iq2xxs_grid[q[l]], NULL, cera_iq2_ksigns[(aux >> (7 * l)) & 127]);
            b->sc[2 * ib] = b->sc[2 * ib + 1] = 2 * ls + 1;
            b->db[2 * ib] = b->db[2 * ib + 1] = iq_db_half(b->d, ls, 0.25f);
        }
        return;
    }
    case T_IQ2_XS: {
        const block_iq2_xs *x = (const block_iq2_xs *)row + i;
        b->d = f16_to_f32(x->d);
        for (int g = 0; g < 32; g++)
            iq_put8(b->w + 8 * g, cera_iq2xs_grid[x->qs[g] & 511], NULL, cera_iq2_ksigns[x->qs[g] >> 9]);
        for (int s = 0; s < 16; s++) {
            const int ls = (x->scales[s / 2] >> (4 * (s % 2))) & 0xF;
            b->sc[s] = 2 * ls + 1;
            b->db[s] = iq_db_half(b->d, ls, 0.25f);
        }
        return;
    }
    case T_IQ2_S: {
        const block_iq2_s *x = (const block_iq2_s *)row + i;
        b->d = f16_to_f32(x->d);
        for (int g = 0; g < 32; g++) {
            const int idx = x->qs[g] | (((x->qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
            iq_put8(b->w + 8 * g, cera_iq2s_grid[idx], NULL, x->qs[32 + g]);
        }
        for (int s = 0; s < 16; s++) {
            const int ls = (x->scales[s / 2] >> (4 * (s % 2))) & 0xF;
            b->sc[s] = 2 * ls + 1;
            b->db[s] = iq_db_half(b->d, ls, 0.25f);
        }
        return;
    }
    case T_IQ3_XXS: {
        const block_iq3_xxs *x = (const block_iq3_xxs *)row + i;
        b->d = f16_to_f32(x->d);
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux;
            memcpy(&aux, x->qs + 64 + 4 * ib, 4);
            const int ls = (int)(aux >> 28);
            const uint8_t *q = x->qs + 8 * ib;
            for (int l = 0; l < 4; l++)
                iq_put8(b->w + 32 * ib + 8 * l, cera_iq3xxs_grid[q[2 * l]], cera_iq3xxs_grid[q[2 * l + 1]],
                        cera_iq2_ksigns[(aux >> (7 * l)) & 127]);
            b->sc[2 * ib] = b->sc[2 * ib + 1] = 2 * ls + 1;
            b->db[2 * ib] = b->db[2 * ib + 1] = iq_db_half(b->d, ls, 0.5f);
        }
        return;
    }
    case T_IQ3_S: {
        const block_iq3_s *x = (const block_iq3_s *)row + i;
        b->d = f16_to_f32(x->d);
        for (int g = 0; g < 32; g++) {
            const int i0 = 2 * g, i1 = 2 * g + 1;
            const int idx0 = x->qs[i0] | (((x->qh[i0 / 8] >> (i0 % 8)) & 1) << 8);
            const int idx1 = x->qs[i1] | (((x->qh[i1 / 8] >> (i1 % 8)) & 1) << 8);
            iq_put8(b->w + 8 * g, cera_iq3s_grid[idx0], cera_iq3s_grid[idx1], x->signs[g]);
        }
        for (int s = 0; s < 8; s++) {
            const int ls = (x->scales[s / 2] >> (4 * (s % 2))) & 0xF;
            b->sc[2 * s] = b->sc[2 * s + 1] = 1 + 2 * ls;
            b->db[2 * s] = b->db[2 * s + 1] = b->d * (float)(1 + 2 * ls);
        }
        return;
    }
    case T_IQ1_S: {
        const block_iq1_s *x = (const block_iq1_s *)row + i;
        b->d = f16_to_f32(x->d);
        for (int ib = 0; ib < 8; ib++) {
            const unsigned h = x->qh[ib];
            for (int l = 0; l < 4; l++)
                iq_put8(b->w + 32 * ib + 8 * l, cera_iq1s_grid[x->qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8)], NULL, 0);
            memset(b->dsign + 32 * ib, h & 0x8000 ? -1 : 1, 32);
            const int ls = 2 * ((h >> 12) & 7) + 1;
            b->sc[2 * ib] = b->sc[2 * ib + 1] = ls;
            b->db[2 * ib] = b->db[2 * ib + 1] = b->d * (float)ls;
        }
        return;
    }
    case T_IQ1_M: {
        const block_iq1_m *x = (const block_iq1_m *)row + i;
        uint16_t sc[4];
        memcpy(sc, x->scales, 8);
        const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        b->d = f16_to_f32(dh);
        for (int g = 0; g < 32; g++) {
            const unsigned h = (x->qh[g / 2] >> (4 * (g % 2))) & 0xF;
            iq_put8(b->w + 8 * g, cera_iq1s_grid[x->qs[g] | ((h & 7) << 8)], NULL, 0);
            memset(b->dsign + 8 * g, h & 8 ? -1 : 1, 8);
        }
        for (int s = 0; s < 16; s++) {
            const int ls = 2 * ((sc[s / 4] >> (3 * (s % 4))) & 7) + 1;
            b->sc[s] = ls;
            b->db[s] = b->d * (float)ls;
        }
        return;
    }
    case T_IQ4_XS: {
        const block_iq4_xs *x = (const block_iq4_xs *)row + i;
        b->d = f16_to_f32(x->d);
        for (int s = 0; s < 8; s++) {
            const int ls = (((x->scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((x->scales_h >> (2 * s)) & 3) << 4)) - 32;
            b->sc[2 * s] = b->sc[2 * s + 1] = ls;
            b->db[2 * s] = b->db[2 * s + 1] = b->d * (float)ls;
            for (int j = 0; j < 16; j++) {
                b->w[32 * s + j] = cera_kvalues_iq4nl[x->qs[16 * s + j] & 0xF];
                b->w[32 * s + 16 + j] = cera_kvalues_iq4nl[x->qs[16 * s + j] >> 4];
            }
        }
        return;
    }
    default:
        memset(b, 0, sizeof *b);
    }
}

/* As the gguf package: y = db * w (its sign flip is exact), IQ1: dl * (grid + delta) */
static void dq_iq(int t, const void *src, float *y, int64_t n) {
    cera_iq_block b;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        cera_iq_unpack(t, src, i, &b);
        if (t == T_IQ1_S || t == T_IQ1_M)
            for (int k = 0; k < QK_K; k++) y[k] = b.db[k / 16] * ((float)b.w[k] + (b.dsign[k] < 0 ? -0.125f : 0.125f));
        else
            for (int k = 0; k < QK_K; k++) y[k] = b.db[k / 16] * (float)b.w[k];
    }
}
#define DQ_IQ(NAME, T) static void NAME(const void *src, float *y, int64_t n) { dq_iq(T, src, y, n); }
DQ_IQ(dq_iq2_xxs, T_IQ2_XXS)
DQ_IQ(dq_iq2_xs, T_IQ2_XS)
DQ_IQ(dq_iq2_s, T_IQ2_S)
DQ_IQ(dq_iq3_xxs, T_IQ3_XXS)
DQ_IQ(dq_iq3_s, T_IQ3_S)
DQ_IQ(dq_iq1_s, T_IQ1_S)
DQ_IQ(dq_iq1_m, T_IQ1_M)
DQ_IQ(dq_iq4_xs, T_IQ4_XS)
#undef DQ_IQ

/* hsum_float_8: ((4+0)+(6+2)) + ((5+1)+(7+3)) */
static float hsum8(const float *v) { return ((v[4] + v[0]) + (v[6] + v[2])) + ((v[5] + v[1]) + (v[7] + v[3])); }

/* ggml's x86 (AVX2, and so AVX-512) vec_dot of the IQ formats: per super-block eight int32
 * lanes, lane k the scaled integer dot of values 4k..4k+3 of every 32 (integer sums, so
 * the order within them is free), added to eight float lanes with one fused multiply-add
 * by d = d_w * d_a; hsum_float_8 at the end, times the format's constant. IQ1_S adds its
 * deltas (one per 32 values, from the activation's 16-value sums) in one float; IQ1_M in a
 * second set of lanes. */
void cera_dot_iq(int t, int64_t n, const void *w, const void *a, float *s) {
    const block_q8_K *y = a;
    float acc[8] = {0}, acc2[8] = {0}, acc1 = 0.0f;
    cera_iq_block b;
    for (int64_t i = 0; i < n / QK_K; i++) {
        cera_iq_unpack(t, w, i, &b);
        int32_t lanes[8] = {0}, lanes2[8] = {0};
        for (int c = 0; c < 8; c++)
            for (int k = 0; k < 8; k++) {
                const int p = 32 * c + 4 * k;
                int32_t v = 0, v2 = 0;
                for (int u = 0; u < 4; u++) {
                    v += b.w[p + u] * y[i].qs[p + u];
                    v2 += b.dsign[p + u] * y[i].qs[p + u];
                }
                lanes[k] += b.sc[p / 16] * v;
                lanes2[k] += b.sc[p / 16] * v2;
            }
        const float d = b.d * y[i].d;
        for (int k = 0; k < 8; k++) acc[k] = fmaf(d, (float)lanes[k], acc[k]);
        if (t == T_IQ1_M)
            for (int k = 0; k < 8; k++) acc2[k] = fmaf(d, (float)lanes2[k], acc2[k]);
        if (t == T_IQ1_S) {
            int32_t sumi1 = 0;
            for (int ib = 0; ib < 8; ib++)
                sumi1 += (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]) * b.dsign[32 * ib] * b.sc[2 * ib];
            acc1 = fmaf(d, (float)sumi1, acc1);
        }
    }
    switch (t) {
    case T_IQ2_XXS:
    case T_IQ2_XS:
    case T_IQ2_S: *s = 0.125f * hsum8(acc); return;
    case T_IQ3_XXS: *s = 0.25f * hsum8(acc); return;
    case T_IQ1_S: *s = fmaf(0.125f, acc1, hsum8(acc)); return; /* GCC fuses hsum + delta * acc1 */
    case T_IQ1_M: *s = fmaf(0.125f, hsum8(acc2), hsum8(acc)); return;
    default: *s = hsum8(acc); return;
    }
}

/* llama.cpp's repacked Q4_0 / IQ4_NL products on x86 (its default: weights of a multiple
 * of 8 rows interleaved 8 by 8, gemv / gemm q4_0_8x8_q8_0): every output is one float
 * chain over the blocks, acc = fma(block's integer dot, d_w * d_a, acc), for any number
 * of activation rows. */
float cera_dot_repack(int t, int64_t n, const void *vw, const void *va) {
    const block_q8_0 *a = va;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        const block_q4_0 *b = (const block_q4_0 *)vw + i; /* IQ4_NL blocks have the same layout */
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            const int lo = t == T_IQ4_NL ? cera_kvalues_iq4nl[b->qs[j] & 0xF] : (b->qs[j] & 0xF) - 8;
            const int hi = t == T_IQ4_NL ? cera_kvalues_iq4nl[b->qs[j] >> 4] : (b->qs[j] >> 4) - 8;
            sumi += lo * a[i].qs[j] + hi * a[i].qs[j + QK / 2];
        }
        acc = fmaf((float)sumi, f16_to_f32(b->d) * f16_to_f32(a[i].d), acc);
    }
    return acc;
}

/* -- activation quantizers --------------------------------------------------------------- */

void cera_quant_q8_0_scalar(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = f32_to_f16(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
    }
}

void cera_quant_q8_1_scalar(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            const int q = nearest_int(x[j] * id);
            y[i].qs[j] = (int8_t)q;
            sum += q;
        }
        y[i].s = f32_to_f16(d * (float)sum);
    }
}

void cera_quant_q8_K_scalar(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* -- the type table ---------------------------------------------------------------------- */

const int cera_act_block[ACT_COUNT] = {1, 1, 1, QK, QK, QK_K};
const int cera_act_block_bytes[ACT_COUNT] = {4, 2, 2, sizeof(block_q8_0), sizeof(block_q8_1), sizeof(block_q8_K)};

const cera_type_traits cera_types[T_COUNT] = {
    [T_F32] = {1, 1, 4, ACT_F32, dq_f32},
    [T_F16] = {1, 1, 2, ACT_F16, dq_f16},
    [T_BF16] = {1, 1, 2, ACT_BF16, dq_bf16},
    [T_Q4_0] = {1, QK, sizeof(block_q4_0), ACT_Q8_0, dq_q4_0},
    [T_Q4_1] = {1, QK, sizeof(block_q4_1), ACT_Q8_1, dq_q4_1},
    [T_Q5_0] = {1, QK, sizeof(block_q5_0), ACT_Q8_0, dq_q5_0},
    [T_Q5_1] = {1, QK, sizeof(block_q5_1), ACT_Q8_1, dq_q5_1},
    [T_Q8_0] = {1, QK, sizeof(block_q8_0), ACT_Q8_0, dq_q8_0},
    [T_IQ4_NL] = {1, QK, sizeof(block_iq4_nl), ACT_Q8_0, dq_iq4_nl},
    [T_Q2_K] = {1, QK_K, sizeof(block_q2_K), ACT_Q8_K, dq_q2_K},
    [T_Q3_K] = {1, QK_K, sizeof(block_q3_K), ACT_Q8_K, dq_q3_K},
    [T_Q4_K] = {1, QK_K, sizeof(block_q4_K), ACT_Q8_K, dq_q4_K},
    [T_Q5_K] = {1, QK_K, sizeof(block_q5_K), ACT_Q8_K, dq_q5_K},
    [T_Q6_K] = {1, QK_K, sizeof(block_q6_K), ACT_Q8_K, dq_q6_K},
    [T_IQ2_XXS] = {1, QK_K, sizeof(block_iq2_xxs), ACT_Q8_K, dq_iq2_xxs},
    [T_IQ2_XS] = {1, QK_K, sizeof(block_iq2_xs), ACT_Q8_K, dq_iq2_xs},
    [T_IQ2_S] = {1, QK_K, sizeof(block_iq2_s), ACT_Q8_K, dq_iq2_s},
    [T_IQ3_XXS] = {1, QK_K, sizeof(block_iq3_xxs), ACT_Q8_K, dq_iq3_xxs},
    [T_IQ3_S] = {1, QK_K, sizeof(block_iq3_s), ACT_Q8_K, dq_iq3_s},
    [T_IQ1_S] = {1, QK_K, sizeof(block_iq1_s), ACT_Q8_K, dq_iq1_s},
    [T_IQ1_M] = {1, QK_K, sizeof(block_iq1_m), ACT_Q8_K, dq_iq1_m},
    [T_IQ4_XS] = {1, QK_K, sizeof(block_iq4_xs), ACT_Q8_K, dq_iq4_xs},
};

int cera_type_supported(int t) { return t >= 0 && t < T_COUNT && cera_types[t].supported; }

int64_t cera_type_row_bytes(int t, int64_t n) {
    if (!cera_type_supported(t) || n % cera_types[t].block) return -1;
    return n / cera_types[t].block * cera_types[t].block_bytes;
}

int64_t cera_act_bytes(int act, int64_t n) {
    const int64_t nb = n / cera_act_block[act];
    int64_t bytes;
    if (act == ACT_Q8_0)
        bytes = q8_0_side_lanes(nb) + nb * 32;
    else if (act == ACT_Q8_1)
        bytes = q8_1_side_ds(nb) + nb * 8;
    else
        bytes = nb * cera_act_block_bytes[act];
    return (bytes + 63) & ~(int64_t)63;
}

int64_t cera_act_row_bytes(int t, int64_t n) {
    if (!cera_type_supported(t)) return -1;
    const int a = cera_types[t].act;
    if (n % cera_act_block[a]) return -1;
    return cera_act_bytes(a, n);
}

int cera_dequantize(int t, const void *src, float *dst, int64_t n) {
    if (!cera_type_supported(t) || n % cera_types[t].block) return CERA_ETYPE;
    cera_types[t].dequant(src, dst, n);
    return CERA_OK;
}

void cera_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_f16(x[i]);
}

void cera_f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = f16_to_f32(x[i]);
}
