/* x86-64 SIMD variants: avx2 (AVX2 + FMA + F16C), avx512 (F/BW/DQ/VL), avx512vnni.
 *
 * The kernels are written once, in kernels_x86.inc, on 256-bit vectors, and included
 * three times with different compiler targets (a target pragma around each copy, so one
 * build holds all three and the baseline code stays x86-64 v1). The VNNI copy replaces
 * the maddubs/madd pair of the int8 dot products with vpdpbusd; the avx512 copy is the
 * AVX2 code compiled with the AVX-512 register file and encodings. dispatch.c picks one
 * at run time.
 */
#include <math.h>

#include "internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* -- avx2 -------------------------------------------------------------------------------- */
#define X86_NAME avx2
#define X86_VNNI 0
#define X86_512 0
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "kernels_x86.inc"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef X86_NAME
#undef X86_VNNI
#undef X86_512

/* -- avx512 -------------------------------------------------------------------------------- */
#define X86_NAME avx512
#define X86_VNNI 0
#define X86_512 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#endif
#include "kernels_x86.inc"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef X86_NAME
#undef X86_VNNI
#undef X86_512

/* -- avx512vnni ------------------------------------------------------------------------------ */
#define X86_NAME avx512vnni
#define X86_VNNI 1
#define X86_512 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#endif
#include "kernels_x86.inc"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef X86_NAME
#undef X86_VNNI
#undef X86_512

/* llama.cpp built for the same CPU: AVX-512 F+DQ builds use the 512-bit ggml_v_expf */
#define X86_SILU_avx2 CERA_SILU_AVX2
#define X86_SILU_avx512 CERA_SILU_AVX512
#define X86_SILU_avx512vnni CERA_SILU_AVX512

/* The table fillers run before any CPU check, so they live outside the target regions. */
#define X86_INIT(V)                                            \
    int cera_kernels_init_##V(cera_kernels *k) {               \
        k->dot[T_F32] = dot_f32_##V;                           \
        k->dot[T_F16] = dot_f16_##V;                           \
        k->dot[T_BF16] = dot_bf16_##V;                         \
        k->dot[T_Q4_0] = dot_q4_0_##V;                         \
        k->dot[T_Q4_1] = dot_q4_1_##V;                         \
        k->dot[T_Q5_0] = dot_q5_0_##V;                         \
        k->dot[T_Q5_1] = dot_q5_1_##V;                         \
        k->dot[T_Q8_0] = dot_q8_0_##V;                         \
        k->dot[T_IQ4_NL] = dot_iq4_nl_##V;                     \
        k->dot[T_Q2_K] = dot_q2_K_##V;                         \
        k->dot[T_Q3_K] = dot_q3_K_##V;                         \
        k->dot[T_Q4_K] = dot_q4_K_##V;                         \
        k->dot[T_Q5_K] = dot_q5_K_##V;                         \
        k->dot[T_Q6_K] = dot_q6_K_##V;                         \
        k->dotm[T_F32] = dotm_f32_##V;                         \
        k->dotm[T_F16] = dotm_f16_##V;                         \
        k->dotm[T_BF16] = dotm_bf16_##V;                       \
        k->dotm_rows[T_F32] = k->dotm_rows[T_F16] = k->dotm_rows[T_BF16] = 4; \
        k->dot4[T_Q4_0] = dot4_q4_0_##V;                       \
        k->dot4[T_Q4_1] = dot4_q4_1_##V;                       \
        k->dot4[T_Q5_0] = dot4_q5_0_##V;                       \
        k->dot4[T_Q5_1] = dot4_q5_1_##V;                       \
        k->dot4[T_Q8_0] = dot4_q8_0_##V;                       \
        k->dot4[T_Q4_K] = dot4_q4_K_##V;                       \
        k->dot4[T_Q5_K] = dot4_q5_K_##V;                       \
        k->dot4[T_Q6_K] = dot4_q6_K_##V;                       \
        k->dotm[T_Q4_0] = dotm_q4_0_##V;                       \
        k->dotm[T_Q4_1] = dotm_q4_1_##V;                       \
        k->dotm[T_Q5_0] = dotm_q5_0_##V;                       \
        k->dotm[T_Q5_1] = dotm_q5_1_##V;                       \
        k->dotm[T_Q8_0] = dotm_q8_0_##V;                       \
        k->dotm[T_IQ4_NL] = dotm_iq4_nl_tb_##V;                \
        k->dotm[T_Q4_K] = dotm_q4_K_##V;                       \
        k->dotm[T_Q5_K] = dotm_q5_K_##V;                       \
        k->dotm[T_Q6_K] = dotm_q6_K_##V;                       \
        k->dotm_rows[T_Q4_0] = k->dotm_rows[T_Q4_1] = k->dotm_rows[T_Q5_0] = dotm_rows_legacy_##V; \
        k->dotm_rows[T_Q5_1] = k->dotm_rows[T_Q8_0] = k->dotm_rows[T_IQ4_NL] = dotm_rows_legacy_##V; \
        k->dotm_rows[T_Q4_K] = k->dotm_rows[T_Q5_K] = k->dotm_rows[T_Q6_K] = dotm_rows_kquant_##V; \
        k->quant[ACT_F16] = quant_f16_##V;                     \
        k->quant[ACT_Q8_0] = quant_q8_0_##V;                   \
        k->quant[ACT_Q8_1] = quant_q8_1_##V;                   \
        k->quant[ACT_Q8_K] = quant_q8_K_##V;                   \
        k->dot_f16 = dot_f16_f16_##V;                          \
        k->dot_f32 = dot_f32_f32_##V;                          \
        k->axpy_f16 = axpy_f16_##V;                            \
        k->axpy_f32 = axpy_f32_##V;                            \
        k->scale_f32 = scale_f32_##V;                          \
        k->tq_dot = tq_dot_##V;                                \
        k->tq_axpy = tq_axpy_##V;                              \
        k->mad_f16 = mad_f16_##V;                              \
        k->scale_f16 = scale_f16_##V;                          \
        k->read_sum = read_sum_##V;                            \
        k->gemm = gemm_tile4_##V;                              \
        k->gemm_repack = gemm_repack_##V;                      \
        k->dot_repack = dot_repack_##V;                        \
        k->gemm_rows = gemm_rows_##V;                          \
        k->gemm_f32 = gemm_f32_##V;                            \
        k->f16_to_f32 = f16_to_f32_row_##V;                    \
        k->gemm_max_u = X86_GEMM_MAX_U_##V;                    \
        k->silu_kind = X86_SILU_##V;                           \
        k->silu_rows = silu_rows_##V;                          \
        k->softmax_row = softmax_row_##V;                      \
        return 1;                                              \
    }

/* vpmaddubsw saturates pair sums at 32767: unsigned values up to 127 are safe against
 * |a| <= 127; vpdpbusd sums in 32 bits and takes any byte. */
#define X86_GEMM_MAX_U_avx2 127
#define X86_GEMM_MAX_U_avx512 127
#define X86_GEMM_MAX_U_avx512vnni 255

X86_INIT(avx2)
X86_INIT(avx512)
X86_INIT(avx512vnni)

/* llama.cpp built for a CPU with AVX512_BF16 takes vdpbf16ps for BF16 weights: the
 * 512-bit variants follow it there (dispatch.c asks the CPU). */
void cera_kernels_bf16_dp(cera_kernels *k) {
    if (k->dot[T_BF16] == dot_bf16_avx512) {
        k->dot[T_BF16] = dot_bf16_dp_avx512;
        k->dotm[T_BF16] = dotm_bf16_dp_avx512;
    } else if (k->dot[T_BF16] == dot_bf16_avx512vnni) {
        k->dot[T_BF16] = dot_bf16_dp_avx512vnni;
        k->dotm[T_BF16] = dotm_bf16_dp_avx512vnni;
    }
}

#else /* not x86-64 with GCC or clang */

int cera_kernels_init_avx2(cera_kernels *k) { (void)k; return 0; }
int cera_kernels_init_avx512(cera_kernels *k) { (void)k; return 0; }
int cera_kernels_init_avx512vnni(cera_kernels *k) { (void)k; return 0; }
void cera_kernels_bf16_dp(cera_kernels *k) { (void)k; }

#endif
