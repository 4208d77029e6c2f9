/* cera-audio-kws C kernels: the micro front end and the int8 layers (see kws_api.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kws_api.h"

/* ---- fixed-point FFT (KISS FFT's 16-bit arithmetic) --------------------------------- */

typedef struct { int16_t r, i; } cpx;

static inline int16_t sround(int64_t x) {
    int32_t w = (int32_t)x;                 /* the int32 product sum, wrapped */
    int32_t v = (int32_t)((int64_t)w + (1 << 14));
    return (int16_t)(v >> 15);
}
static inline cpx cmul(cpx a, int32_t br, int32_t bi) {
    cpx m;
    m.r = sround((int64_t)a.r * br - (int64_t)a.i * bi);
    m.i = sround((int64_t)a.r * bi + (int64_t)a.i * br);
    return m;
}
static inline cpx fixdiv(cpx c, int k) {
    cpx o;
    o.r = sround((int64_t)c.r * (32767 / k));
    o.i = sround((int64_t)c.i * (32767 / k));
    return o;
}

typedef struct { const int32_t *tw; const int32_t *factors; } fft_ctx;

static void bfly2(cpx *f, int fstride, const fft_ctx *c, int m) {
    for (int k = 0; k < m; k++) {
        cpx a = fixdiv(f[k], 2), b = fixdiv(f[k + m], 2);
        cpx t = cmul(b, c->tw[2 * k * fstride], c->tw[2 * k * fstride + 1]);
        f[k + m].r = (int16_t)(a.r - t.r); f[k + m].i = (int16_t)(a.i - t.i);
        f[k].r = (int16_t)(a.r + t.r); f[k].i = (int16_t)(a.i + t.i);
    }
}

static void bfly4(cpx *f, int fstride, const fft_ctx *c, int m) {
    for (int k = 0; k < m; k++) {
        cpx f0 = fixdiv(f[k], 4), f1 = fixdiv(f[k + m], 4), f2 = fixdiv(f[k + 2 * m], 4), f3 = fixdiv(f[k + 3 * m], 4);
        int j1 = k * fstride, j2 = 2 * k * fstride, j3 = 3 * k * fstride;
        cpx s0 = cmul(f1, c->tw[2 * j1], c->tw[2 * j1 + 1]);
        cpx s1 = cmul(f2, c->tw[2 * j2], c->tw[2 * j2 + 1]);
        cpx s2 = cmul(f3, c->tw[2 * j3], c->tw[2 * j3 + 1]);
        cpx s5 = {(int16_t)(f0.r - s1.r), (int16_t)(f0.i - s1.i)};
        f0.r = (int16_t)(f0.r + s1.r); f0.i = (int16_t)(f0.i + s1.i);
        cpx s3 = {(int16_t)(s0.r + s2.r), (int16_t)(s0.i + s2.i)};
        cpx s4 = {(int16_t)(s0.r - s2.r), (int16_t)(s0.i - s2.i)};
        f[k + 2 * m].r = (int16_t)(f0.r - s3.r); f[k + 2 * m].i = (int16_t)(f0.i - s3.i);
        f[k].r = (int16_t)(f0.r + s3.r); f[k].i = (int16_t)(f0.i + s3.i);
        f[k + m].r = (int16_t)(s5.r + s4.i); f[k + m].i = (int16_t)(s5.i - s4.r);
        f[k + 3 * m].r = (int16_t)(s5.r - s4.i); f[k + 3 * m].i = (int16_t)(s5.i + s4.r);
    }
}

/* out[0 .. p*m) = the DFT/N of in[0], in[fstride], ... (p*m values) */
static void work(cpx *out, const cpx *in, int fstride, const int32_t *factors, const fft_ctx *c) {
    int p = factors[0], m = factors[1];
    if (m == 1) {
        for (int j = 0; j < p; j++) out[j] = in[j * fstride];
    } else {
        for (int q = 0; q < p; q++) work(out + q * m, in + q * fstride, fstride * p, factors + 2, c);
    }
    if (p == 4) bfly4(out, fstride, c, m); else bfly2(out, fstride, c, m);
}

/* kiss_fftr: n real int16 samples -> n/2 + 1 bins (out), using tmp (n/2 values) */
static void real_fft(const int16_t *time, int n, const fft_ctx *c, const int32_t *stw, cpx *tmp, cpx *out) {
    int H = n / 2;
    work(tmp, (const cpx *)time, 1, c->factors, c);
    cpx dc = fixdiv(tmp[0], 2);
    out[0].r = (int16_t)(dc.r + dc.i); out[0].i = 0;
    out[H].r = (int16_t)(dc.r - dc.i); out[H].i = 0;
    for (int k = 1; k <= H / 2; k++) {
        cpx pk = fixdiv(tmp[k], 2);
        cpx nk = {tmp[H - k].r, (int16_t)(-tmp[H - k].i)};
        nk = fixdiv(nk, 2);
        cpx f1 = {(int16_t)(pk.r + nk.r), (int16_t)(pk.i + nk.i)};
        cpx f2 = {(int16_t)(pk.r - nk.r), (int16_t)(pk.i - nk.i)};
        cpx t = cmul(f2, stw[2 * (k - 1)], stw[2 * (k - 1) + 1]);
        out[k].r = (int16_t)((f1.r + t.r) >> 1); out[k].i = (int16_t)((f1.i + t.i) >> 1);
        out[H - k].r = (int16_t)((f1.r - t.r) >> 1); out[H - k].i = (int16_t)((t.i - f1.i) >> 1);
    }
}

/* ---- front end ------------------------------------------------------------------------ */

static inline int bitlen64(uint64_t v) { return v ? 64 - __builtin_clzll(v) : 0; }

static uint64_t isqrt_round(uint64_t v) {
    if (v == 0) return 0;
    uint64_t r = (uint64_t)sqrt((double)v);
    while (r * r > v) r--;
    while ((r + 1) * (r + 1) <= v) r++;
    uint64_t rem = v - r * r, cap = (v >> 32) ? 0xFFFFFFFFull : 0xFFFFull;
    if (rem > r && r != cap) r++;
    return r;
}

static int64_t wide_gain(uint64_t x, const int64_t *lut) {
    if (x <= 2) return lut[x];
    int64_t interval = bitlen64(x);
    int64_t base = 4 * interval - 6;
    int64_t frac = (interval < 11 ? ((int64_t)x << (11 - interval)) : ((int64_t)x >> (interval - 11))) & 0x3FF;
    int64_t res = (lut[base + 2] * frac) >> 5;
    res = (int32_t)(res + (int32_t)(lut[base + 1] << 5));
    res = (int32_t)(res * frac);
    res = (res + (1 << 14)) >> 15;
    return (int16_t)(res + lut[base]);
}

static uint16_t log_scale(uint64_t signal, int correction_bits, int shift, const int64_t *lut) {
    int64_t v = correction_bits < 0 ? (int64_t)(signal >> -correction_bits)
                                    : (int64_t)((signal << correction_bits) & 0xFFFFFFFFull);
    if (v <= 1) return 0;
    int64_t integer = bitlen64((uint64_t)v) - 1;
    int64_t frac = v - ((int64_t)1 << integer);
    frac = integer < 16 ? frac << (16 - integer) : frac >> (integer - 16);
    frac = (int32_t)frac;
    int64_t seg = frac >> 9;
    if (seg < 0) seg = 0;
    if (seg > 128) seg = 128;
    int64_t c0 = lut[seg], c1 = lut[seg + 1];
    int64_t rel = (int64_t)(int32_t)((c1 - c0) * (frac - seg * 512)) >> 16;
    int64_t fraction = (frac + c0 + rel) & 0xFFFFFFFF;
    int64_t log2v = ((integer << 16) + fraction) & 0xFFFFFFFF;
    int64_t loge = ((45426 * log2v + 32768) >> 16) & 0xFFFFFFFF;
    int64_t scaled = ((((loge << shift) & 0xFFFFFFFF) + 32768) & 0xFFFFFFFF) >> 16;
    return (uint16_t)(scaled < 0xFFFF ? scaled : 0xFFFF);
}

void kws_frontend(const int16_t *frames, int n, int frame_stride, int window, const int32_t *coef,
                  int fft_size, int n_factors, const int32_t *factors, const int32_t *tw, const int32_t *stw,
                  int start_bin, int end_bin, const int32_t *wchan, const uint32_t *wval, int channels,
                  int smoothing_bits, const uint64_t *smoothing, const uint64_t *one_minus,
                  uint64_t min_signal_remaining, uint64_t *estimate,
                  int pcan, const int64_t *pcan_lut, int snr_shift,
                  int log, int correction_bits, int log_scale_shift, const int64_t *log_lut,
                  int16_t *scratch, uint16_t *out) {
    (void)n_factors;
    fft_ctx ctx = {tw, factors};
    int16_t *fft_in = scratch;                          /* fft_size */
    cpx *tmp = (cpx *)(scratch + fft_size);             /* fft_size / 2 */
    cpx *spec = (cpx *)(scratch + 2 * fft_size);        /* fft_size / 2 + 1 */
    uint64_t sig[256];
    int nb = end_bin - start_bin;
    for (int f = 0; f < n; f++) {
        const int16_t *x = frames + (int64_t)f * frame_stride;
        int maxabs = 0;
        for (int i = 0; i < window; i++) {
            int16_t w = (int16_t)(((int32_t)x[i] * coef[i]) >> 12);
            fft_in[i] = w;
            int a = w < 0 ? -w : w;
            if (a <= 32767 && a > maxabs) maxabs = a;
        }
        int shift = 15 - bitlen64((uint64_t)maxabs);
        for (int i = 0; i < window; i++) fft_in[i] = (int16_t)((int64_t)fft_in[i] << shift);
        for (int i = window; i < fft_size; i++) fft_in[i] = 0;
        real_fft(fft_in, fft_size, &ctx, stw, tmp, spec);
        for (int c = 0; c < channels; c++) sig[c] = 0;
        for (int b = 0; b < nb; b++) {
            int64_t r = spec[start_bin + b].r, im = spec[start_bin + b].i;
            uint64_t e = (uint64_t)(int64_t)(int32_t)(r * r + im * im);
            for (int j = 0; j < 2; j++) {
                int c = wchan[2 * b + j];
                if (c >= 0) sig[c] += (uint64_t)wval[2 * b + j] * e;
            }
        }
        uint16_t *o = out + (int64_t)f * channels;
        for (int c = 0; c < channels; c++) {
            uint64_t s = (isqrt_round(sig[c]) >> shift) & 0xFFFFFFFFull;
            uint64_t scaled = (s << smoothing_bits) & 0xFFFFFFFFull;
            uint64_t est = ((scaled * smoothing[c] + estimate[c] * one_minus[c]) >> 14) & 0xFFFFFFFFull;
            estimate[c] = est;
            uint64_t capped = est < scaled ? est : scaled;
            uint64_t floor_ = ((s * min_signal_remaining) >> 14) & 0xFFFFFFFFull;
            uint64_t sub = (scaled - capped) >> smoothing_bits;
            s = sub > floor_ ? sub : floor_;
            if (pcan) {
                uint64_t gain = (uint64_t)(uint32_t)wide_gain(est, pcan_lut);
                uint64_t snr = ((s * gain) >> snr_shift) & 0xFFFFFFFFull;
                s = snr < (2u << 12) ? (snr * snr) >> 20 : (snr >> 6) - 64;
                s &= 0xFFFFFFFFull;
            }
            o[c] = log ? log_scale(s, correction_bits, log_scale_shift, log_lut) : (uint16_t)(s < 0xFFFF ? s : 0xFFFF);
        }
    }
}

/* ---- int8 layers ---------------------------------------------------------------------- */

static inline int32_t requant(int32_t x, int32_t mult, int32_t shift) {
    int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    int64_t a = (int64_t)(int32_t)((int64_t)x * ((int64_t)1 << left));
    int64_t ab = a * mult;
    int64_t nudge = ab >= 0 ? (1ll << 30) : (1 - (1ll << 30));
    int64_t t = ab + nudge;
    int32_t q = (int32_t)(t >= 0 ? t >> 31 : -((-t) >> 31));
    if (right == 0) return q;
    int64_t mask = ((int64_t)1 << right) - 1;
    int64_t rem = q & mask, thr = (mask >> 1) + (q < 0);
    return (int32_t)((q >> right) + (rem > thr));
}

static inline int8_t finish(int32_t acc, int32_t mult, int32_t shift, int zp, int lo, int hi) {
    int32_t v = requant(acc, mult, shift) + zp;
    return (int8_t)(v < lo ? lo : v > hi ? hi : v);
}

void kws_dense(const int8_t *x, const int32_t *idx, int P, int K, const int8_t *w, int C,
               const int32_t *bias, const int32_t *mult, const int32_t *shift, int zp, int lo, int hi, int8_t *out) {
    int32_t acc[1024];
    for (int p = 0; p < P; p++) {
        for (int c0 = 0; c0 < C; c0 += 1024) {
            int nc = C - c0 < 1024 ? C - c0 : 1024;
            for (int c = 0; c < nc; c++) acc[c] = bias[c0 + c];
            const int32_t *ip = idx + (int64_t)p * K;
            for (int k = 0; k < K; k++) {
                int32_t xv = x[ip[k]];
                const int8_t *wr = w + (int64_t)k * C + c0;
                for (int c = 0; c < nc; c++) acc[c] += xv * wr[c];
            }
            for (int c = 0; c < nc; c++)
                out[(int64_t)p * C + c0 + c] = finish(acc[c], mult[c0 + c], shift[c0 + c], zp, lo, hi);
        }
    }
}

void kws_depthwise(const int8_t *x, const int32_t *idx, int P, int K, const int8_t *w, int C,
                   const int32_t *bias, const int32_t *mult, const int32_t *shift, int zp, int lo, int hi, int8_t *out) {
    for (int p = 0; p < P; p++) {
        for (int c = 0; c < C; c++) {
            int32_t acc = bias[c];
            const int32_t *ip = idx + (int64_t)p * K * C + c;
            for (int k = 0; k < K; k++) acc += (int32_t)x[ip[(int64_t)k * C]] * w[(int64_t)k * C + c];
            out[(int64_t)p * C + c] = finish(acc, mult[c], shift[c], zp, lo, hi);
        }
    }
}

/* ---- a step as one program ------------------------------------------------------------ */

#define KWS_RECORD 14
#define P8(v) ((int8_t *)(intptr_t)(v))
#define P32(v) ((int32_t *)(intptr_t)(v))

void kws_run(const int64_t *program, int n) {
    for (int i = 0; i < n; i++) {
        const int64_t *r = program + (int64_t)i * KWS_RECORD;
        switch (r[0]) {
        case 1:
            for (int64_t row = 0; row < r[3]; row++) memmove(P8(r[1]) + row * r[5], P8(r[2]) + row * r[6], (size_t)r[4]);
            break;
        case 2: {
            uint8_t *d = (uint8_t *)P8(r[1]);
            const uint8_t *s = (const uint8_t *)P8(r[2]), *t = (const uint8_t *)P8(r[4]);
            for (int64_t j = 0; j < r[3]; j++) d[j] = t[s[j]];
            break;
        }
        case 3:
        case 4:
            (r[0] == 3 ? kws_dense : kws_depthwise)(P8(r[1]), P32(r[2]), (int)r[3], (int)r[4], P8(r[5]), (int)r[6],
                                                   P32(r[7]), P32(r[8]), P32(r[9]), (int)r[10], (int)r[11],
                                                   (int)r[12], P8(r[13]));
            break;
        }
    }
}
