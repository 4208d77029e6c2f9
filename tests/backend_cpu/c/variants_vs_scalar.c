/* Every usable SIMD variant against the scalar kernels, in C, for machines where the
 * Python test suite cannot run (an ARM64 build run under qemu-user by
 * test_cross_arch.py). Prints "ok <variants>" or the first mismatch and exits 1.
 *
 * For each weight type: random valid blocks (random bytes, finite f16 scales), random
 * activations; the activation bytes must be identical (the llama.cpp block part of the
 * row), and each dot product within 2 (nb + 8) 2^-24 M of the scalar one: both are float32
 * sums of the same exact block terms in different orders, each within (nb + 8) 2^-24 M
 * of the exact value, where M = sum (|A_j| + |B_j|) |x~_j| over the scale and min parts of
 * the weights (see cpu_reference.matmul_error_bound). Here M is taken as 4 sum |W_j x~_j|,
 * which covers the min parts of these random blocks with room to spare (a rigorous
 * bound is what the Python tests use). Also the attention primitives (f16/f32 dot,
 * axpy), within a few ulps.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float rndf(void) { return ((float)(rnd() & 0xFFFFFF) / 16777216.0f) * 2.0f - 1.0f; }

static const int TYPES[] = {T_F32, T_F16, T_BF16, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0,
                            T_IQ4_NL, T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K};
static const char *NAMES[] = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                              "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};

/* offsets of the f16 scales in a block */
static void f16_fields(int t, int *off, int *n) {
    *n = 1;
    switch (t) {
    case T_Q4_1: case T_Q5_1: case T_Q4_K: case T_Q5_K: off[0] = 0; off[1] = 2; *n = 2; break;
    case T_Q2_K: off[0] = 80; off[1] = 82; *n = 2; break;
    case T_Q3_K: off[0] = 108; break;
    case T_Q6_K: off[0] = 208; break;
    default: off[0] = 0;
    }
}

static void random_weights(int t, uint8_t *w, int64_t k) {
    const int64_t bytes = cera_type_row_bytes(t, k);
    if (t == T_F32) {
        for (int64_t i = 0; i < k; i++) ((float *)w)[i] = rndf();
        return;
    }
    if (t == T_F16 || t == T_BF16) {
        for (int64_t i = 0; i < k; i++) ((uint16_t *)w)[i] = t == T_F16 ? f32_to_f16(rndf()) : f32_to_bf16(rndf());
        return;
    }
    for (int64_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    const int bb = cera_types[t].block_bytes;
    int off[2], n;
    f16_fields(t, off, &n);
    for (int64_t b = 0; b < bytes / bb; b++)
        for (int f = 0; f < n; f++) {
            const uint16_t h = f32_to_f16(rndf() * 0.01f);
            memcpy(w + b * bb + off[f], &h, 2);
        }
}

/* the activation values the kernels see, dequantized */
static void act_values(int act, const void *a, float *out, int64_t k) {
    const int64_t nb = k / cera_act_block[act];
    if (act == ACT_F32) memcpy(out, a, k * 4);
    if (act == ACT_F16 || act == ACT_BF16)
        for (int64_t i = 0; i < k; i++) out[i] = act == ACT_F16 ? f16_to_f32(((const uint16_t *)a)[i]) : bf16_to_f32(((const uint16_t *)a)[i]);
    if (act == ACT_Q8_0)
        for (int64_t b = 0; b < nb; b++)
            for (int j = 0; j < 32; j++) out[32 * b + j] = ((const block_q8_0 *)a)[b].qs[j] * f16_to_f32(((const block_q8_0 *)a)[b].d);
    if (act == ACT_Q8_1)
        for (int64_t b = 0; b < nb; b++)
            for (int j = 0; j < 32; j++) out[32 * b + j] = ((const block_q8_1 *)a)[b].qs[j] * f16_to_f32(((const block_q8_1 *)a)[b].d);
    if (act == ACT_Q8_K)
        for (int64_t b = 0; b < nb; b++)
            for (int j = 0; j < 256; j++) out[256 * b + j] = ((const block_q8_K *)a)[b].qs[j] * ((const block_q8_K *)a)[b].d;
}

static int check_variant(const char *name) {
    char err[256];
    cera_ctx *sc = cera_ctx_new(1, "scalar", err, sizeof err);
    cera_ctx *vc = cera_ctx_new(1, name, err, sizeof err);
    if (!sc || !vc) {
        printf("cannot create %s: %s\n", name, err);
        return 1;
    }
    const int64_t K = 1024, ROWS = 9;
    float *x = malloc(K * 4), *wv = malloc(K * 4), *av = malloc(K * 4);
    uint8_t *w = malloc(ROWS * K * 4 + 4096), *as = malloc(cera_act_bytes(ACT_F32, K) + 4096), *avb = malloc(cera_act_bytes(ACT_F32, K) + 4096);
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const int t = TYPES[ti], act = cera_types[t].act;
        for (int trial = 0; trial < 20; trial++) {
            const float spread = powf(10.0f, (float)(rnd() % 7) - 3.0f);
            for (int64_t i = 0; i < K; i++) x[i] = rndf() * spread * (i % 17 == 0 ? 20.0f : 1.0f);
            const int64_t rb = cera_type_row_bytes(t, K);
            for (int64_t r = 0; r < ROWS; r++) random_weights(t, w + r * rb, K);
            memset(as, 0, cera_act_bytes(act, K));
            memset(avb, 0, cera_act_bytes(act, K));
            sc->k.quant[act](x, as, K);
            vc->k.quant[act](x, avb, K);
            const int64_t block_part = K / cera_act_block[act] * cera_act_block_bytes[act];
            if (memcmp(as, avb, block_part)) {
                printf("%s: activation bytes for %s differ\n", name, NAMES[ti]);
                return 1;
            }
            act_values(act, as, av, K);
            float ys[16], yv[16];
            for (int64_t r = 0; r < ROWS; r++) sc->k.dot[t](K, w + r * rb, as, &ys[r]);
            for (int64_t r = 0; r < ROWS; r++) vc->k.dot[t](K, w + r * rb, avb, &yv[r]);
            if (vc->k.dot4[t]) vc->k.dot4[t](K, w, rb, avb, yv); /* rows 0..3 through the 4-row kernel */
            for (int64_t r = 0; r < ROWS; r++) {
                cera_types[t].dequant(w + r * rb, wv, K);
                double mag = 0;
                for (int64_t i = 0; i < K; i++) mag += fabs((double)wv[i] * av[i]);
                const double tol = 2.0 * (K / cera_types[t].block + 8) * ldexp(1.0, -24) * (4 * mag) + 1e-30;
                if (!(fabs((double)ys[r] - yv[r]) <= tol)) {
                    printf("%s: %s row %d: scalar %.9g, %s %.9g (tolerance %.3g)\n", name, NAMES[ti], (int)r, ys[r], name, yv[r], tol);
                    return 1;
                }
            }
        }
    }
    /* attention primitives */
    uint16_t h1[100], h2[100];
    float f1[100], f2[100], y1[100], y2[100];
    for (int i = 0; i < 100; i++) {
        f1[i] = rndf();
        f2[i] = rndf();
        h1[i] = f32_to_f16(f1[i]);
        h2[i] = f32_to_f16(f2[i]);
        y1[i] = y2[i] = rndf();
    }
    for (int n = 1; n <= 100; n += 33) {
        const float a = sc->k.dot_f16(n, h1, h2), b = vc->k.dot_f16(n, h1, h2);
        const float c = sc->k.dot_f32(n, f1, f2), d = vc->k.dot_f32(n, f1, f2);
        if (fabsf(a - b) > 1e-4f || fabsf(c - d) > 1e-4f) {
            printf("%s: attention dot products differ (n=%d)\n", name, n);
            return 1;
        }
    }
    sc->k.axpy_f16(100, y1, h1, 0.5f);
    vc->k.axpy_f16(100, y2, h1, 0.5f);
    sc->k.axpy_f32(100, y1, f1, -0.25f);
    vc->k.axpy_f32(100, y2, f1, -0.25f);
    for (int i = 0; i < 100; i++)
        if (fabsf(y1[i] - y2[i]) > 1e-6f) {
            printf("%s: axpy differs at %d\n", name, i);
            return 1;
        }
    /* the f16 accumulator: one fused multiply-add, then f16 rounding: identical bits */
    uint16_t a1[100], a2[100];
    memcpy(a1, h2, sizeof a1);
    memcpy(a2, h2, sizeof a2);
    sc->k.scale_f16(100, a1, 0.3f);
    vc->k.scale_f16(100, a2, 0.3f);
    sc->k.mad_f16(100, a1, h1, 0.7f);
    vc->k.mad_f16(100, a2, h1, 0.7f);
    if (memcmp(a1, a2, sizeof a1)) {
        printf("%s: f16 accumulator differs\n", name);
        return 1;
    }
    free(x); free(wv); free(av); free(w); free(as); free(avb);
    cera_ctx_free(sc);
    cera_ctx_free(vc);
    return 0;
}

int main(void) {
    char names[128];
    snprintf(names, sizeof names, "%s", cera_compiled_variants());
    printf("compiled: %s; features: %s; best: %s\n", names, cera_cpu_features(), cera_best_variant());
    char checked[128] = "";
    for (char *v = strtok(names, ","); v; v = strtok(NULL, ",")) {
        if (!strcmp(v, "scalar") || !cera_variant_usable(v)) continue;
        if (check_variant(v)) return 1;
        strcat(checked, " ");
        strcat(checked, v);
    }
    printf("ok%s\n", checked);
    return 0;
}
