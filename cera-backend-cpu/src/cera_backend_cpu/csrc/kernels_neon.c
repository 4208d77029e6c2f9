/* ARM64 variant: NEON with the dot-product extension (ARMv8.2 dotprod: Apple M1 and
 * later, Graviton 2 and later, Cortex-A76 / Raspberry Pi 5, ...).
 *
 * sdot multiplies signed bytes by signed bytes and sums groups of four into int32 lanes,
 * so no sign tricks are needed: each weight block is expanded to signed bytes (value -
 * offset) and dotted with the activation bytes; scales apply to the int32 sums in float.
 * The activation quantizers produce the same bytes as the scalar ones (round to nearest
 * even, as fcvtns does). The target pragma covers only the kernels: the table filler at
 * the end is plain code, since it runs before the CPU check.
 */
#include <math.h>

#include "internal.h"

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#elif !defined(__ARM_FEATURE_DOTPROD)
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#define CERA_NEON_GCC_PUSHED 1
#endif

#include <arm_neon.h>

/* sdot. Older clang (before 16) declares vdotq_s32 only when the whole file is built for
 * dotprod, which would make the baseline code need it too; there the instruction is
 * spelled out (sdot v0.4s, v1.16b, v2.16b) on fixed registers. */
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD) && __clang_major__ < 16
static inline int32x4_t sdot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    register int32x4_t r0 __asm__("v0") = acc;
    register int8x16_t r1 __asm__("v1") = a;
    register int8x16_t r2 __asm__("v2") = b;
    __asm__(".inst 0x4e829420" : "+w"(r0) : "w"(r1), "w"(r2));
    return r0;
}
#else
#define sdot vdotq_s32
#endif

static inline float h2f(uint16_t h) {
    __fp16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

static inline uint16_t f2h(float x) {
    __fp16 f = (__fp16)x; /* round to nearest even */
    uint16_t h;
    memcpy(&h, &f, 2);
    return h;
}

/* 16 packed nibbles -> low nibbles (elements 0..15) and high ones (16..31), as signed bytes minus `off` */
static inline void nibbles(const uint8_t *p, int8_t off, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t v = vld1q_u8(p);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vdupq_n_s8(off));
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(off));
}

/* bits 0..15 and 16..31 of 4 bytes -> two vectors of 0x10 where a bit is set */
static inline void high_bits(const uint8_t *qh, uint8x16_t *lo, uint8x16_t *hi) {
    static const uint8_t bit_of[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t m = vld1q_u8(bit_of);
    const uint8x16_t b01 = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
    const uint8x16_t b23 = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
    *lo = vandq_u8(vtstq_u8(b01, m), vdupq_n_u8(0x10));
    *hi = vandq_u8(vtstq_u8(b23, m), vdupq_n_u8(0x10));
}

static inline int32x4_t dot32(int8x16_t x0, int8x16_t x1, const int8_t *y) {
    return sdot(sdot(vdupq_n_s32(0), x0, vld1q_s8(y)), x1, vld1q_s8(y + 16));
}

/* -- legacy formats ------------------------------------------------------------------------- */

static void dot_q4_0_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q4_0 *w = vw;
    const block_q8_0 *a = va;
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK; i++) {
        int8x16_t lo, hi;
        nibbles(w[i].qs, 8, &lo, &hi);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dot32(lo, hi, a[i].qs)), h2f(w[i].d) * h2f(a[i].d));
    }
    *s = vaddvq_f32(acc);
}

static void dot_q4_1_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q4_1 *w = vw;
    const block_q8_1 *a = va;
    float32x4_t acc = vdupq_n_f32(0);
    float summ = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int8x16_t lo, hi;
        nibbles(w[i].qs, 0, &lo, &hi);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dot32(lo, hi, a[i].qs)), h2f(w[i].d) * h2f(a[i].d));
        summ += h2f(w[i].m) * h2f(a[i].s);
    }
    *s = vaddvq_f32(acc) + summ;
}

static void dot_q5_0_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK; i++) {
        int8x16_t lo, hi;
        uint8x16_t hlo, hhi;
        nibbles(w[i].qs, 0, &lo, &hi);
        high_bits(w[i].qh, &hlo, &hhi);
        lo = vsubq_s8(vorrq_s8(lo, vreinterpretq_s8_u8(hlo)), vdupq_n_s8(16));
        hi = vsubq_s8(vorrq_s8(hi, vreinterpretq_s8_u8(hhi)), vdupq_n_s8(16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dot32(lo, hi, a[i].qs)), h2f(w[i].d) * h2f(a[i].d));
    }
    *s = vaddvq_f32(acc);
}

static void dot_q5_1_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q5_1 *w = vw;
    const block_q8_1 *a = va;
    float32x4_t acc = vdupq_n_f32(0);
    float summ = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int8x16_t lo, hi;
        uint8x16_t hlo, hhi;
        nibbles(w[i].qs, 0, &lo, &hi);
        high_bits(w[i].qh, &hlo, &hhi);
        lo = vorrq_s8(lo, vreinterpretq_s8_u8(hlo));
        hi = vorrq_s8(hi, vreinterpretq_s8_u8(hhi));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dot32(lo, hi, a[i].qs)), h2f(w[i].d) * h2f(a[i].d));
        summ += h2f(w[i].m) * h2f(a[i].s);
    }
    *s = vaddvq_f32(acc) + summ;
}

static void dot_q8_0_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q8_0 *w = vw;
    const block_q8_0 *a = va;
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK; i++) {
        const int32x4_t p = dot32(vld1q_s8(w[i].qs), vld1q_s8(w[i].qs + 16), a[i].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(w[i].d) * h2f(a[i].d));
    }
    *s = vaddvq_f32(acc);
}

static void dot_iq4_nl_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_iq4_nl *w = vw;
    const block_q8_0 *a = va;
    const int8x16_t kv = vld1q_s8(cera_kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK; i++) {
        const uint8x16_t v = vld1q_u8(w[i].qs);
        const int8x16_t lo = vqtbl1q_s8(kv, vandq_u8(v, vdupq_n_u8(0x0F)));
        const int8x16_t hi = vqtbl1q_s8(kv, vshrq_n_u8(v, 4));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dot32(lo, hi, a[i].qs)), h2f(w[i].d) * h2f(a[i].d));
    }
    *s = vaddvq_f32(acc);
}

/* -- K-quants ------------------------------------------------------------------------------ */

static inline int dot16(int8x16_t x, const int8_t *y) { return vaddvq_s32(sdot(vdupq_n_s32(0), x, vld1q_s8(y))); }

static void dot_q2_K_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *sc = w[i].scales;
        int summs = 0;
        for (int g = 0; g < 16; g++) summs += a[i].bsums[g] * (sc[g] >> 4);
        const int8_t *q8 = a[i].qs;
        int isum = 0;
        for (int half = 0; half < 2; half++) {
            const uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * half), q1 = vld1q_u8(w[i].qs + 32 * half + 16);
            for (int j = 0; j < 4; j++, q8 += 32) {
                const int g = 8 * half + 2 * j;
                const int8x16_t u0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q0, vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3)));
                const int8x16_t u1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q1, vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3)));
                isum += (sc[g] & 0xF) * dot16(u0, q8) + (sc[g + 1] & 0xF) * dot16(u1, q8 + 16);
            }
        }
        sum += (a[i].d * h2f(w[i].d)) * (float)isum - (a[i].d * h2f(w[i].dmin)) * (float)summs;
    }
    *s = sum;
}

static void dot_q3_K_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        q3k_scales(w[i].scales, sc);
        const uint8x16_t hm0 = vld1q_u8(w[i].hmask), hm1 = vld1q_u8(w[i].hmask + 16);
        const int8_t *q8 = a[i].qs;
        int isum = 0, bit = 0;
        for (int half = 0; half < 2; half++) {
            const uint8x16_t q0 = vld1q_u8(w[i].qs + 32 * half), q1 = vld1q_u8(w[i].qs + 32 * half + 16);
            for (int j = 0; j < 4; j++, bit++, q8 += 32) {
                const int g = 8 * half + 2 * j;
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * j));
                const uint8x16_t m = vdupq_n_u8((uint8_t)(1u << bit));
                /* q = (2 bits) - 4 where the high bit is clear */
                const int8x16_t u0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q0, sh), vdupq_n_u8(3))),
                                              vreinterpretq_s8_u8(vandq_u8(vceqq_u8(vandq_u8(hm0, m), vdupq_n_u8(0)), vdupq_n_u8(4))));
                const int8x16_t u1 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q1, sh), vdupq_n_u8(3))),
                                              vreinterpretq_s8_u8(vandq_u8(vceqq_u8(vandq_u8(hm1, m), vdupq_n_u8(0)), vdupq_n_u8(4))));
                isum += sc[g] * dot16(u0, q8) + sc[g + 1] * dot16(u1, q8 + 16);
            }
        }
        sum += (h2f(w[i].d) * a[i].d) * (float)isum;
    }
    *s = sum;
}

static void dot_q4_K_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = a[i].qs;
        int isum = 0, summs = 0;
        for (int j = 0; j < 4; j++, q8 += 64) {
            uint8_t sc0, m0, sc1, m1;
            get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            const uint8x16_t v0 = vld1q_u8(w[i].qs + 32 * j), v1 = vld1q_u8(w[i].qs + 32 * j + 16);
            const int8x16_t l0 = vreinterpretq_s8_u8(vandq_u8(v0, vdupq_n_u8(0xF)));
            const int8x16_t l1 = vreinterpretq_s8_u8(vandq_u8(v1, vdupq_n_u8(0xF)));
            const int8x16_t h0 = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), h1 = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
            isum += sc0 * vaddvq_s32(dot32(l0, l1, q8)) + sc1 * vaddvq_s32(dot32(h0, h1, q8 + 32));
            summs += m0 * (a[i].bsums[4 * j] + a[i].bsums[4 * j + 1]) + m1 * (a[i].bsums[4 * j + 2] + a[i].bsums[4 * j + 3]);
        }
        sum += (a[i].d * h2f(w[i].d)) * (float)isum - (a[i].d * h2f(w[i].dmin)) * (float)summs;
    }
    *s = sum;
}

static void dot_q5_K_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = a[i].qs;
        const uint8x16_t qh0 = vld1q_u8(w[i].qh), qh1 = vld1q_u8(w[i].qh + 16);
        int isum = 0, summs = 0;
        for (int j = 0; j < 4; j++, q8 += 64) {
            uint8_t sc0, m0, sc1, m1;
            get_scale_min_k4(2 * j, w[i].scales, &sc0, &m0);
            get_scale_min_k4(2 * j + 1, w[i].scales, &sc1, &m1);
            const uint8x16_t v0 = vld1q_u8(w[i].qs + 32 * j), v1 = vld1q_u8(w[i].qs + 32 * j + 16);
            const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * j))), bh = vdupq_n_u8((uint8_t)(2u << (2 * j)));
            const uint8x16_t x10 = vdupq_n_u8(0x10);
            const int8x16_t l0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v0, vdupq_n_u8(0xF)), vandq_u8(vtstq_u8(qh0, bl), x10)));
            const int8x16_t l1 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v1, vdupq_n_u8(0xF)), vandq_u8(vtstq_u8(qh1, bl), x10)));
            const int8x16_t h0 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v0, 4), vandq_u8(vtstq_u8(qh0, bh), x10)));
            const int8x16_t h1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v1, 4), vandq_u8(vtstq_u8(qh1, bh), x10)));
            isum += sc0 * vaddvq_s32(dot32(l0, l1, q8)) + sc1 * vaddvq_s32(dot32(h0, h1, q8 + 32));
            summs += m0 * (a[i].bsums[4 * j] + a[i].bsums[4 * j + 1]) + m1 * (a[i].bsums[4 * j + 2] + a[i].bsums[4 * j + 3]);
        }
        sum += (a[i].d * h2f(w[i].d)) * (float)isum - (a[i].d * h2f(w[i].dmin)) * (float)summs;
    }
    *s = sum;
}

static void dot_q6_K_neon(int64_t n, const void *vw, const void *va, float *s) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = w[i].ql + 64 * half, *qh = w[i].qh + 32 * half;
            const int8_t *sc = w[i].scales + 8 * half;
            const int8_t *q8 = a[i].qs + 128 * half;
            for (int g = 0; g < 2; g++) { /* elements l in [16g, 16g + 16) of each quarter */
                const uint8x16_t l0 = vld1q_u8(ql + 16 * g), l1 = vld1q_u8(ql + 32 + 16 * g), h = vld1q_u8(qh + 16 * g);
                const uint8x16_t m4 = vdupq_n_u8(0xF), m3 = vdupq_n_u8(3);
                const int8x16_t b32 = vdupq_n_s8(32);
                const int8x16_t q1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m3), 4))), b32);
                const int8x16_t q2 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m3), 4))), b32);
                const int8x16_t q3 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m3), 4))), b32);
                const int8x16_t q4 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4))), b32);
                isum += sc[g] * dot16(q1, q8 + 16 * g) + sc[g + 2] * dot16(q2, q8 + 32 + 16 * g) +
                        sc[g + 4] * dot16(q3, q8 + 64 + 16 * g) + sc[g + 6] * dot16(q4, q8 + 96 + 16 * g);
            }
        }
        sum += (a[i].d * h2f(w[i].d)) * (float)isum;
    }
    *s = sum;
}

/* -- float formats -------------------------------------------------------------------------- */

static float dot_f32_f32_neon(int64_t n, const float *a, const float *b) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

static inline float32x4_t ld_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline float32x4_t ld_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

static float dot_f16_f16_neon(int64_t n, const uint16_t *a, const uint16_t *b) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, ld_f16(a + i), ld_f16(b + i));
        s1 = vfmaq_f32(s1, ld_f16(a + i + 4), ld_f16(b + i + 4));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, ld_f16(a + i), ld_f16(b + i));
    float sum = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) sum += h2f(a[i]) * h2f(b[i]);
    return sum;
}

static float dot_bf16_bf16_neon(int64_t n, const uint16_t *a, const uint16_t *b) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, ld_bf16(a + i), ld_bf16(b + i));
        s1 = vfmaq_f32(s1, ld_bf16(a + i + 4), ld_bf16(b + i + 4));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, ld_bf16(a + i), ld_bf16(b + i));
    float sum = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) sum += bf16_to_f32(a[i]) * bf16_to_f32(b[i]);
    return sum;
}

static void dot_f32_neon(int64_t n, const void *w, const void *a, float *s) { *s = dot_f32_f32_neon(n, w, a); }
static void dot_f16_neon(int64_t n, const void *w, const void *a, float *s) { *s = dot_f16_f16_neon(n, w, a); }
static void dot_bf16_neon(int64_t n, const void *w, const void *a, float *s) { *s = dot_bf16_bf16_neon(n, w, a); }

static void axpy_f16_neon(int64_t n, float *y, const uint16_t *x, float a) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), ld_f16(x + i), a));
    for (; i < n; i++) y[i] += a * h2f(x[i]);
}

static void axpy_f32_neon(int64_t n, float *y, const float *x, float a) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] += a * x[i];
}

static void mad_f16_neon(int64_t n, uint16_t *y, const uint16_t *v, float a) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vfmaq_n_f32(ld_f16(y + i), ld_f16(v + i), a))));
    for (; i < n; i++) y[i] = f2h(fmaf(h2f(v[i]), a, h2f(y[i])));
}

static void scale_f16_neon(int64_t n, uint16_t *y, float a) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vmulq_n_f32(ld_f16(y + i), a))));
    for (; i < n; i++) y[i] = f2h(h2f(y[i]) * a);
}

/* -- activation quantizers: the same bytes as the scalar ones -------------------------------- */

static inline float amax32(const float *x) {
    float32x4_t m = vabsq_f32(vld1q_f32(x));
    for (int k = 4; k < 32; k += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + k)));
    return vmaxvq_f32(m);
}

/* round x * mul to nearest even for 32 values, store as int8, return their sum */
static inline int round_store32(const float *x, float mul, int8_t *q) {
    int32x4_t sum = vdupq_n_s32(0);
    for (int k = 0; k < 32; k += 8) {
        const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + k), mul));
        const int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + k + 4), mul));
        sum = vaddq_s32(sum, vaddq_s32(a, b));
        vst1_s8(q + k, vqmovn_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b))));
    }
    return vaddvq_s32(sum);
}

static void quant_q8_0_neon(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        const float amax = amax32(x);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = f2h(d);
        round_store32(x, id, y[i].qs);
    }
}

static void quant_q8_1_neon(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        const float amax = amax32(x);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = f2h(d);
        const int sum = round_store32(x, id, y[i].qs);
        y[i].s = f2h(d * (float)sum);
    }
}

static void quant_f16_neon(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) y[i] = f2h(x[i]);
}

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(CERA_NEON_GCC_PUSHED)
#pragma GCC pop_options
#endif

int cera_kernels_init_neon(cera_kernels *k) {
    k->dot[T_F32] = dot_f32_neon;
    k->dot[T_F16] = dot_f16_neon;
    k->dot[T_BF16] = dot_bf16_neon;
    k->dot[T_Q4_0] = dot_q4_0_neon;
    k->dot[T_Q4_1] = dot_q4_1_neon;
    k->dot[T_Q5_0] = dot_q5_0_neon;
    k->dot[T_Q5_1] = dot_q5_1_neon;
    k->dot[T_Q8_0] = dot_q8_0_neon;
    k->dot[T_IQ4_NL] = dot_iq4_nl_neon;
    k->dot[T_Q2_K] = dot_q2_K_neon;
    k->dot[T_Q3_K] = dot_q3_K_neon;
    k->dot[T_Q4_K] = dot_q4_K_neon;
    k->dot[T_Q5_K] = dot_q5_K_neon;
    k->dot[T_Q6_K] = dot_q6_K_neon;
    k->quant[ACT_F16] = quant_f16_neon;
    k->quant[ACT_Q8_0] = quant_q8_0_neon;
    k->quant[ACT_Q8_1] = quant_q8_1_neon;
    k->dot_f16 = dot_f16_f16_neon;
    k->dot_f32 = dot_f32_f32_neon;
    k->axpy_f16 = axpy_f16_neon;
    k->axpy_f32 = axpy_f32_neon;
    k->mad_f16 = mad_f16_neon;
    k->scale_f16 = scale_f16_neon;
    /* no NEON many-row microkernel yet: the dotprod row kernels beat the scalar one */
    k->gemm = NULL;
    return 1;
}

#else

int cera_kernels_init_neon(cera_kernels *k) {
    (void)k;
    return 0;
}

#endif
