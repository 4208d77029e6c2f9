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
