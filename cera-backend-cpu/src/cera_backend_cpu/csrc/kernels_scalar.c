/* The portable scalar kernels: the reference every SIMD variant is tested against.
 *
 * Each dot product follows the arithmetic of llama.cpp's generic vec_dot for its type:
 * integer sums of weight quants times activation quants within a (sub-)block, scaled
 * by the block scales in float. The float accumulation order differs from the SIMD
 * variants (which keep several partial sums), so variants agree within float rounding,
 * not bit for bit.
 */
#include <math.h>

#include "internal.h"

/* -- legacy 32-element formats against Q8_0 / Q8_1 ----------------------------------------- */

static void dot_q4_0(int64_t n, const void *vw, const void *va, float *s) {
    const block_q4_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += ((w[i].qs[j] & 0xF) - 8) * a[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + QK / 2];
        }
        sum += (float)sumi * (f16_to_f32(w[i].d) * f16_to_f32(a[i].d));
    }
    *s = sum;
}

static void dot_q4_1(int64_t n, const void *vw, const void *va, float *s) {
    const block_q4_1 *w = vw;
    const block_q8_1 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += (w[i].qs[j] & 0xF) * a[i].qs[j];
            sumi += (w[i].qs[j] >> 4) * a[i].qs[j + QK / 2];
        }
        sum += (float)sumi * (f16_to_f32(w[i].d) * f16_to_f32(a[i].d)) + f16_to_f32(w[i].m) * f16_to_f32(a[i].s);
    }
    *s = sum;
}

static void dot_q5_0(int64_t n, const void *vw, const void *va, float *s) {
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            const int q0 = ((w[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
            const int q1 = ((w[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += q0 * a[i].qs[j] + q1 * a[i].qs[j + QK / 2];
        }
        sum += (float)sumi * (f16_to_f32(w[i].d) * f16_to_f32(a[i].d));
    }
    *s = sum;
}

static void dot_q5_1(int64_t n, const void *vw, const void *va, float *s) {
    const block_q5_1 *w = vw;
    const block_q8_1 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            const int q0 = (w[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            const int q1 = (w[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            sumi += q0 * a[i].qs[j] + q1 * a[i].qs[j + QK / 2];
        }
        sum += (float)sumi * (f16_to_f32(w[i].d) * f16_to_f32(a[i].d)) + f16_to_f32(w[i].m) * f16_to_f32(a[i].s);
    }
    *s = sum;
}

static void dot_q8_0(int64_t n, const void *vw, const void *va, float *s) {
    const block_q8_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK; j++) sumi += w[i].qs[j] * a[i].qs[j];
        sum += (float)sumi * (f16_to_f32(w[i].d) * f16_to_f32(a[i].d));
    }
    *s = sum;
}

static void dot_iq4_nl(int64_t n, const void *vw, const void *va, float *s) {
    const block_iq4_nl *w = vw;
    const block_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += cera_kvalues_iq4nl[w[i].qs[j] & 0xF] * a[i].qs[j];
            sumi += cera_kvalues_iq4nl[w[i].qs[j] >> 4] * a[i].qs[j + QK / 2];
        }
        sum += (float)sumi * (f16_to_f32(w[i].d) * f16_to_f32(a[i].d));
    }
    *s = sum;
}

/* -- K-quants against Q8_K ---------------------------------------------------------------- */

static void dot_q2_K(int64_t n, const void *vw, const void *va, float *s) {
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *sc = w[i].scales;
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += a[i].bsums[j] * (sc[j] >> 4);
        const int8_t *q8 = a[i].qs;
        const uint8_t *q2 = w[i].qs;
        int isum = 0, is = 0;
        for (int half = 0; half < 2; half++, q2 += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; part++, is++, q8 += 16) {
                    int isuml = 0;
                    for (int l = 0; l < 16; l++) isuml += q8[l] * ((q2[16 * part + l] >> shift) & 3);
                    isum += (sc[is] & 0xF) * isuml;
                }
            }
        }
        const float dall = a[i].d * f16_to_f32(w[i].d);
        const float dmin = a[i].d * f16_to_f32(w[i].dmin);
        sum += dall * (float)isum - dmin * (float)summs;
    }
    *s = sum;
}

static void dot_q3_K(int64_t n, const void *vw, const void *va, float *s) {
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        q3k_scales(w[i].scales, sc);
        const int8_t *q8 = a[i].qs;
        const uint8_t *q3 = w[i].qs;
        int isum = 0, is = 0, bit = 0;
        for (int half = 0; half < 2; half++, q3 += 32) {
            for (int shift = 0; shift < 8; shift += 2, bit++) {
                for (int part = 0; part < 2; part++, is++, q8 += 16) {
                    int isuml = 0;
                    for (int l = 0; l < 16; l++) {
                        const int k = 16 * part + l;
                        const int q = ((q3[k] >> shift) & 3) - ((w[i].hmask[k] >> bit) & 1 ? 0 : 4);
                        isuml += q8[l] * q;
                    }
                    isum += sc[is] * isuml;
                }
            }
        }
        sum += (f16_to_f32(w[i].d) * a[i].d) * (float)isum;
    }
    *s = sum;
}

static void dot_q4_K(int64_t n, const void *vw, const void *va, float *s) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = a[i].qs;
        const uint8_t *q4 = w[i].qs;
        int isum = 0, summs = 0;
        for (int j = 0; j < 4; j++, q4 += 32) {
            uint8_t sc0, m0, sc1, m1;
            get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) s0 += (q4[l] & 0xF) * q8[l];
            for (int l = 0; l < 32; l++) s1 += (q4[l] >> 4) * q8[l + 32];
            q8 += 64;
            isum += sc0 * s0 + sc1 * s1;
            summs += m0 * (a[i].bsums[4 * j] + a[i].bsums[4 * j + 1]) + m1 * (a[i].bsums[4 * j + 2] + a[i].bsums[4 * j + 3]);
        }
        const float d = a[i].d * f16_to_f32(w[i].d);
        const float dmin = a[i].d * f16_to_f32(w[i].dmin);
        sum += d * (float)isum - dmin * (float)summs;
    }
    *s = sum;
}

static void dot_q5_K(int64_t n, const void *vw, const void *va, float *s) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = a[i].qs;
        const uint8_t *q5 = w[i].qs, *qh = w[i].qh;
        int isum = 0, summs = 0;
        for (int j = 0; j < 4; j++, q5 += 32) {
            uint8_t sc0, m0, sc1, m1;
            get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) s0 += ((q5[l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4)) * q8[l];
            for (int l = 0; l < 32; l++) s1 += ((q5[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4)) * q8[l + 32];
            q8 += 64;
            isum += sc0 * s0 + sc1 * s1;
            summs += m0 * (a[i].bsums[4 * j] + a[i].bsums[4 * j + 1]) + m1 * (a[i].bsums[4 * j + 2] + a[i].bsums[4 * j + 3]);
        }
        const float d = a[i].d * f16_to_f32(w[i].d);
        const float dmin = a[i].d * f16_to_f32(w[i].dmin);
        sum += d * (float)isum - dmin * (float)summs;
    }
    *s = sum;
}

static void dot_q6_K(int64_t n, const void *vw, const void *va, float *s) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = w[i].ql + 64 * half, *qh = w[i].qh + 32 * half;
            const int8_t *sc = w[i].scales + 8 * half;
            const int8_t *q8 = a[i].qs + 128 * half;
            for (int g = 0; g < 2; g++) { /* l in [16g, 16g + 16): scale index is g + 2k */
                int s1 = 0, s2 = 0, s3 = 0, s4 = 0;
                for (int l = 16 * g; l < 16 * g + 16; l++) {
                    const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    s1 += q1 * q8[l];
                    s2 += q2 * q8[l + 32];
                    s3 += q3 * q8[l + 64];
                    s4 += q4 * q8[l + 96];
                }
                isum += sc[g + 0] * s1 + sc[g + 2] * s2 + sc[g + 4] * s3 + sc[g + 6] * s4;
            }
        }
        sum += (a[i].d * f16_to_f32(w[i].d)) * (float)isum;
    }
    *s = sum;
}

/* -- float formats ---------------------------------------------------------------------------- */

static float dot_f32_f32(int64_t n, const float *a, const float *b) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += a[i + l] * b[i + l];
    for (; i < n; i++) s[0] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static float dot_f16_f16(int64_t n, const uint16_t *a, const uint16_t *b) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += f16_to_f32(a[i + l]) * f16_to_f32(b[i + l]);
    for (; i < n; i++) s[0] += f16_to_f32(a[i]) * f16_to_f32(b[i]);
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static float dot_bf16_bf16(int64_t n, const uint16_t *a, const uint16_t *b) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += bf16_to_f32(a[i + l]) * bf16_to_f32(b[i + l]);
    for (; i < n; i++) s[0] += bf16_to_f32(a[i]) * bf16_to_f32(b[i]);
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static void dot_f32(int64_t n, const void *w, const void *a, float *s) { *s = dot_f32_f32(n, w, a); }
static void dot_f16(int64_t n, const void *w, const void *a, float *s) { *s = dot_f16_f16(n, w, a); }
static void dot_bf16(int64_t n, const void *w, const void *a, float *s) { *s = dot_bf16_bf16(n, w, a); }

#define DOT_IQ(NAME, T) static void NAME(int64_t n, const void *w, const void *a, float *s) { cera_dot_iq(T, n, w, a, s); }
DOT_IQ(dot_iq2_xxs, T_IQ2_XXS)
DOT_IQ(dot_iq2_xs, T_IQ2_XS)
DOT_IQ(dot_iq2_s, T_IQ2_S)
DOT_IQ(dot_iq3_xxs, T_IQ3_XXS)
DOT_IQ(dot_iq3_s, T_IQ3_S)
DOT_IQ(dot_iq1_s, T_IQ1_S)
DOT_IQ(dot_iq1_m, T_IQ1_M)
DOT_IQ(dot_iq4_xs, T_IQ4_XS)
#undef DOT_IQ

static void quant_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void quant_f16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_f16(x[i]);
}

static void quant_bf16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_bf16(x[i]);
}

static void axpy_f16(int64_t n, float *y, const uint16_t *x, float a) {
    for (int64_t i = 0; i < n; i++) y[i] += a * f16_to_f32(x[i]);
}

static void axpy_f32(int64_t n, float *y, const float *x, float a) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void mad_f16(int64_t n, uint16_t *y, const uint16_t *v, float a) {
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_f16(fmaf(f16_to_f32(v[i]), a, f16_to_f32(y[i])));
}

static void scale_f16(int64_t n, uint16_t *y, float a) {
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_f16(f16_to_f32(y[i]) * a);
}

static void scale_f32(int64_t n, float *y, float a) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

/* The many-row microkernel (gemm.c): the reference every SIMD one must equal bit for
 * bit, so the float steps are spelled out.
 *
 * The legacy formats (32-value blocks) as llama.cpp's AVX2 vec_dot and tinyBLAS sum them:
 * eight float lanes per (row, activation row), lane g taking the integer dot of values
 * 4g..4g+3 of every block times d_w d_a in a fused multiply-add, the lanes then added as
 * hsum_float_8 does ((4+0)+(6+2))+((5+1)+(7+3)), plus the running min term for Q4_1/Q5_1. */
static void gemm_legacy_scalar(const cera_gemm_format *f, int64_t n_blocks, int64_t stride, const uint8_t *tile,
                               const cera_gemm_act *const a[4], float *const y[4], int R) {
    for (int m = 0; m < 4; m++) {
        if (!y[m]) continue;
        for (int r = 0; r < R; r++) {
            float lane[8] = {0}, summs = 0.0f;
            for (int64_t i = 0; i < n_blocks; i++) {
                const uint8_t *vals = tile + i * stride;
                const float *dw = (const float *)(vals + 32 * R), *mw = dw + R;
                const int8_t *q = a[m]->q + i * 32;
                const float d = dw[r] * a[m]->d[i];
                for (int g = 0; g < 8; g++) {
                    int32_t isum = 0, qsum = 0;
                    for (int t = 0; t < 4; t++) {
                        isum += (int32_t)vals[g * 4 * R + 4 * r + t] * q[4 * g + t];
                        qsum += q[4 * g + t];
                    }
                    if (f->shift >= 0) isum -= qsum * (1 << f->shift);
                    lane[g] = fmaf(d, (float)isum, lane[g]);
                }
                if (f->kind == GEMM_MIN) summs = fmaf(mw[r], a[m]->s[i], summs);
            }
            float out = ((lane[4] + lane[0]) + (lane[6] + lane[2])) + ((lane[5] + lane[1]) + (lane[7] + lane[3]));
            if (f->kind == GEMM_MIN) out = out + summs;
            y[m][r] = out;
        }
    }
}

void cera_gemm_8x4_scalar(const cera_gemm_format *f, int64_t n_super, const uint8_t *tile,
                          const cera_gemm_act *const a[4], float *const y[4]) {
    enum { R = 8 };
    const int n_sub = f->sbk / f->sb;
    const int64_t stride = cera_gemm_tile_bytes(f, n_super * f->sbk, R) / n_super;
    if (f->kind == GEMM_OFFSET || f->kind == GEMM_MIN) {
        gemm_legacy_scalar(f, n_super, stride, tile, a, y, R);
        return;
    }
    float acc[4][R];
    memset(acc, 0, sizeof acc);
    for (int64_t i = 0; i < n_super; i++) {
        const uint8_t *vals = tile + i * stride;
        const float *dw = (const float *)(vals + f->sbk * R), *mw = dw + R;
        const int32_t *sc = (const int32_t *)(mw + R), *mins = sc + R * n_sub;
        for (int m = 0; m < 4; m++) {
            const int8_t *q = a[m]->q + i * f->sbk;
            const int32_t *asum = a[m]->sum + i * n_sub;
            for (int r = 0; r < R; r++) {
                int32_t total = 0, msum = 0;
                for (int j = 0; j < n_sub; j++) {
                    int32_t isum = 0;
                    for (int g = 0; g < f->sb / 4; g++)
                        for (int t = 0; t < 4; t++) {
                            const int e = j * f->sb + 4 * g + t;
                            isum += (int32_t)vals[(e / 4) * 4 * R + 4 * r + t] * q[e];
                        }
                    if (f->shift >= 0) isum -= asum[j] * (1 << f->shift);
                    isum *= sc[R * j + r];
                    if (f->kind == GEMM_K_MIN) msum += mins[R * j + r] * asum[j];
                    total += isum;
                }
                /* as llama.cpp's tiled K-quant matmul finishes a super-block: s1 d, minus
                 * dmin s2 in one rounding, then t da + acc fused (GCC contracts its
                 * add(acc, mul(t, da)) of the AVX-512 build; the AVX2 build writes the fma) */
                const float da = a[m]->d[i];
                float t = (float)total * dw[r];
                if (f->kind == GEMM_K_MIN) t = fmaf(-mw[r], (float)msum, t);
                acc[m][r] = fmaf(t, da, acc[m][r]);
            }
        }
    }
    for (int m = 0; m < 4; m++)
        if (y[m]) memcpy(y[m], acc[m], sizeof acc[m]);
}

/* C[M x N] += A[M x K] B[K x N], one fused multiply-add chain over k per element (the
 * order every SIMD variant keeps) */
static void gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float c = C[i * ldc + j];
            for (int64_t k = 0; k < K; k++) c = fmaf(A[i * lda + k], B[k * ldb + j], c);
            C[i * ldc + j] = c;
        }
}

static void f16_to_f32_row(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = f16_to_f32(x[i]);
}

void cera_kernels_init_scalar(cera_kernels *k) {
    memset(k, 0, sizeof(*k));
    k->name = "scalar";
    k->dot[T_F32] = dot_f32;
    k->dot[T_F16] = dot_f16;
    k->dot[T_BF16] = dot_bf16;
    k->dot[T_Q4_0] = dot_q4_0;
    k->dot[T_Q4_1] = dot_q4_1;
    k->dot[T_Q5_0] = dot_q5_0;
    k->dot[T_Q5_1] = dot_q5_1;
    k->dot[T_Q8_0] = dot_q8_0;
    k->dot[T_IQ4_NL] = dot_iq4_nl;
    k->dot[T_Q2_K] = dot_q2_K;
    k->dot[T_Q3_K] = dot_q3_K;
    k->dot[T_Q4_K] = dot_q4_K;
    k->dot[T_Q5_K] = dot_q5_K;
    k->dot[T_Q6_K] = dot_q6_K;
    /* the IQ formats: ggml's x86 order in every variant (see cera_dot_iq) */
    k->dot[T_IQ2_XXS] = dot_iq2_xxs;
    k->dot[T_IQ2_XS] = dot_iq2_xs;
    k->dot[T_IQ2_S] = dot_iq2_s;
    k->dot[T_IQ3_XXS] = dot_iq3_xxs;
    k->dot[T_IQ3_S] = dot_iq3_s;
    k->dot[T_IQ1_S] = dot_iq1_s;
    k->dot[T_IQ1_M] = dot_iq1_m;
    k->dot[T_IQ4_XS] = dot_iq4_xs;
    k->quant[ACT_F32] = quant_f32;
    k->quant[ACT_F16] = quant_f16;
    k->quant[ACT_BF16] = quant_bf16;
    k->quant[ACT_Q8_0] = cera_quant_q8_0_scalar;
    k->quant[ACT_Q8_1] = cera_quant_q8_1_scalar;
    k->quant[ACT_Q8_K] = cera_quant_q8_K_scalar;
    k->dot_f16 = dot_f16_f16;
    k->dot_f32 = dot_f32_f32;
    k->axpy_f16 = axpy_f16;
    k->axpy_f32 = axpy_f32;
    k->scale_f32 = scale_f32;
    k->tq_dot = cera_tq_dot_scalar;
    k->tq_axpy = cera_tq_axpy_scalar;
    k->mad_f16 = mad_f16;
    k->scale_f16 = scale_f16;
    k->read_sum = cera_read_sum_scalar;
    k->gemm = cera_gemm_8x4_scalar;
    k->silu_kind = CERA_SILU_LIBM;
    k->silu_rows = cera_silu_rows_libm;
    k->softmax_row = cera_softmax_row_libm;
    k->gemm_rows = 8;
    k->gemm_f32 = gemm_f32;
    k->f16_to_f32 = f16_to_f32_row;
    k->gemm_max_u = 255;
}
