/* KV cache row formats (cera.kv_types): the codes kernels are told, the bytes of a row,
 * and the converters the attention kernel uses. TurboQuant rows (tq3, tq2) are described
 * in cera/kv_turboquant.py; this is the same format. */
#ifndef CERA_KVCACHE_H
#define CERA_KVCACHE_H

#include "internal.h"

enum { KV_F32 = 0, KV_F16 = 1, KV_Q8_0 = 2, KV_Q4_0 = 3, KV_TQ3 = 4, KV_TQ2 = 5, KV_COUNT = 6 };

CERA_INLINE int kv_is_tq(int kv_type) { return kv_type == KV_TQ3 || kv_type == KV_TQ2; }

/* llama.cpp's attention rotation of quantized caches (llama-kv-cache.cpp, attn_rot_k/v):
 * with a Q8_0 or Q4_0 cache and a head dimension that is a multiple of 64, keys and queries
 * are turned by an orthonormal Walsh-Hadamard matrix over blocks of the largest power of
 * two (64 or more) that divides the dimension, values over blocks of 64, before the rows
 * are quantized, and the attention output is turned back (the matrix is its own inverse).
 * The rotation spreads outliers over a block, so the block scales lose less. Returns the
 * block length, or 0 when rows of this type and dim are not rotated. */
int kv_hadamard(int kv_type, int64_t dim, int key);
/* x[0:dim] turned in place block by block (n: kv_hadamard's block), as ggml's CPU fast
 * Walsh-Hadamard transform computes it: scaled by 1/sqrt(n) first, then the butterflies. */
void kv_hadamard_rotate(float *x, int64_t dim, int64_t n);

/* Bytes of one cached key (key = 1) or value row of dim numbers. */
size_t kv_row_bytes(int kv_type, int64_t dim, int key);

/* 0 if rows of dim numbers can be kept in kv_type (and, for TurboQuant, its matrices for
 * dim were registered), else CERA_EINVAL. */
int kv_check_dim(int kv_type, int64_t dim);

/* One row of dim floats into the cache's format (dst: kv_row_bytes). scratch: at least
 * 3 * dim floats and cera_act_bytes(ACT_Q8_0, dim) bytes (unused by f32 and f16). */
void kv_store_row(const cera_kernels *k, int kv_type, int key, const float *src, char *dst, int64_t dim, float *scratch);

/* TurboQuant: the query turned for the key rows of dim numbers: qx[0:dim] = P q / sqrt(dim).
 * A key row's q.k is then tq_key_dot(row, qx). */
void tq_query(int64_t dim, const float *q, float *qx);
float tq_key_dot(const cera_kernels *k, int kv_type, const char *row, const float *qx, int64_t dim);
/* A key row as the dim numbers whose dot product with qx is q.k (n c[idx]). */
void tq_key_expand(int kv_type, const char *row, float *dst, int64_t dim);
/* acc[0:dim] += w * (the value row in the rotated space); tq_value_rotated writes it. */
void tq_value_axpy(const cera_kernels *k, int kv_type, const char *row, float w, float *acc, int64_t dim);
void tq_value_rotated(const cera_kernels *k, int kv_type, const char *row, float *dst, int64_t dim);
/* x[0:dim] = P^T x (a sum of rotated values back in the model's space); tmp: dim floats. */
void tq_unrotate(int64_t dim, float *x, float *tmp);

#endif
