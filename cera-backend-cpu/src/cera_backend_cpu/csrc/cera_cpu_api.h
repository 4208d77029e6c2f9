/* The C interface of cera's CPU backend.
 *
 * This file is read twice: by the C compiler (through cera_cpu.h, which includes the
 * standard headers first) and by cffi as the cdef of the extension module, so it holds
 * only plain declarations: no #include, no macros, no inline code.
 *
 * Every function works on raw pointers and dimensions, never on Python objects, so a
 * later C-side execution plan can chain them without going back to Python. Arrays are
 * row-major and contiguous unless a stride is passed. GGML type ids are the values of
 * enum ggml_type (F32 = 0, F16 = 1, Q4_0 = 2, ...). Functions that can fail return 0 on
 * success and a negative CERA_E* code otherwise; the Python side validates arguments
 * first, so a failure here means a bug, not bad input.
 */

typedef struct cera_ctx cera_ctx;

/* -- context: kernel variant, thread pool, scratch memory ---------------------------- */

/* n_threads >= 1 (the caller counts as one). variant: NULL or "auto" for the best one
 * this CPU supports, else one of the names cera_compiled_variants() lists. On failure
 * returns NULL and writes a sentence into err. */
cera_ctx *cera_ctx_new(int n_threads, const char *variant, char *err, int err_len);
void cera_ctx_free(cera_ctx *ctx);
const char *cera_ctx_variant(const cera_ctx *ctx);
int cera_ctx_threads(const cera_ctx *ctx);
/* How long (microseconds) idle workers spin before they sleep; 0 sleeps at once. */
void cera_ctx_set_spin_us(cera_ctx *ctx, int spin_us);

/* Comma-separated names of the variants compiled into this build, best last. */
const char *cera_compiled_variants(void);
/* 1 if a compiled variant can run on this CPU, else 0. */
int cera_variant_usable(const char *variant);
/* The best usable variant. */
const char *cera_best_variant(void);
/* A short description of the CPU features found (for probe() and benchmarks). */
const char *cera_cpu_features(void);

/* -- tensor types ----------------------------------------------------------------------- */

int cera_type_supported(int ggml_type);
/* Bytes of n elements (n a multiple of the block size) in the stored form. */
int64_t cera_type_row_bytes(int ggml_type, int64_t n);
/* Bytes of one activation row of n elements quantized for weights of this type
 * (Q8_0 / Q8_1 / Q8_K / F16 / BF16 / F32, as llama.cpp's vec_dot_type). */
int64_t cera_act_row_bytes(int ggml_type, int64_t n);

/* -- dequantization (bit-exact with gguf.quants.dequantize) ---------------------------- */

int cera_dequantize(int ggml_type, const void *src, float *dst, int64_t n);
/* out[i, :] = dequantize(table row ids[i]); rows of n_cols elements, row_bytes apart.
 * Returns CERA_EINVAL (-1) if an id is outside [0, n_rows). */
int cera_get_rows(cera_ctx *ctx, int ggml_type, const void *table, int64_t row_bytes, int64_t n_cols, int64_t n_rows,
                  const int32_t *ids, int64_t n_ids, float *out);

/* -- quantized matrix products ---------------------------------------------------------- */

/* y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]) for m < M, n < N.
 * W: N rows of K elements of type wtype, w_row_bytes apart. x: M rows of K floats,
 * x_stride floats apart; y: M rows of N floats, y_stride floats apart. x is quantized
 * to the activation format of wtype first, as llama.cpp does. */
int cera_matmul(cera_ctx *ctx, int wtype, const void *w, int64_t w_row_bytes, int64_t K, int64_t N,
                const float *x, int64_t x_stride, int64_t M, float *y, int64_t y_stride, const float *bias);

/* The two halves of cera_matmul, exposed for tests and benchmarks. */
int cera_quantize_act(cera_ctx *ctx, int wtype, const float *x, void *dst, int64_t K);
int cera_vec_dot(cera_ctx *ctx, int wtype, int64_t K, const void *w_row, const void *act_row, float *out);

/* -- other ops ---------------------------------------------------------------------------- */

/* y = x / sqrt(mean(x^2) + eps) (* w): rows of n elements; w may be NULL. */
int cera_rms_norm(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const float *w, float eps, float *y);
/* y = (x - mean) / sqrt(var + eps) (* w) (+ b); w, b may be NULL. */
int cera_layer_norm(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const float *w, const float *b,
                    float eps, float *y);

/* Rotary embedding of x [n_tok, n_heads, head_dim] into y (may equal x), as ggml's rope
 * with llama.cpp's rope_yarn frequencies. freq_factors: NULL or n_dims/2 floats. */
int cera_rope(cera_ctx *ctx, const float *x, float *y, int64_t n_tok, int64_t n_heads, int64_t head_dim,
              const int32_t *pos, int n_dims, int neox, float freq_base, float freq_scale,
              const float *freq_factors, float ext_factor, float attn_factor, float beta_fast,
              float beta_slow, int n_ctx_orig);

/* Store this pass's keys k [n_tok, n_kv_heads, k_dim] and values v [n_tok, n_kv_heads, v_dim]
 * into sequence cells [kv_start, kv_start + n_tok) of one layer's cache (converted to the
 * cache's type), then attend q [n_tok, n_heads, k_dim] over the cells [0, kv_start + n_tok)
 * the cache still holds. k_cache: [n_kv_heads][capacity][k_dim], v_cache:
 * [n_kv_heads][capacity][v_dim], of kv_type 0 f32, 1 f16 (round to nearest even), 2 Q8_0
 * or 3 Q4_0 (blocks of 32: dims multiples of 32; the query is quantized to Q8_0 for the
 * key dot products, values are widened to f32 before they are summed), 4 tq3 or 5 tq2
 * (TurboQuant rows, see cera_tq_register; rows are bytes); sequence cell c lives at
 * c % capacity (capacity < n_ctx: a sliding-window ring that holds the last capacity cells).
 * cell_pos[c] is the position of sequence cell c (< 0: empty; n_ctx entries); q_pos[t] the
 * position of query t. A cell is visible from a query at position p when cell_pos[c] <= p
 * and, with window > 0, p - cell_pos[c] < window. Logits are scale * q.k, soft-capped to
 * softcap * tanh(logit / softcap) when softcap > 0. out: [n_tok, n_heads * v_dim]. acc_f16
 * (f16 cache only): keep the weighted sum of values in f16, rounding after every update, as
 * llama.cpp's CPU flash attention does; 0 keeps it in f32. n_ctx (the context a llama.cpp
 * cache of the same size would have) decides how a long decode is split over threads. */
/* TurboQuant KV rows of dim numbers (kv_type 4 tq3, 5 tq2; cera/kv_turboquant.py) use a
 * rotation, [dim][dim] float32, that the caller makes and keeps alive for the process;
 * registered once per dim (16 lengths at most, dim a multiple of 8 up to 4096). */
int cera_tq_register(int64_t dim, const float *rotation);

int cera_attention(cera_ctx *ctx, const float *q, const float *k, const float *v, int64_t n_tok, int64_t n_heads,
                   int64_t n_kv_heads, int64_t k_dim, int64_t v_dim, void *k_cache, void *v_cache, int kv_type,
                   int64_t capacity, int64_t n_ctx, const int32_t *cell_pos, const int32_t *q_pos, float scale,
                   int32_t window, float softcap, int acc_f16, float *out, int64_t kv_start);

/* Index of the largest of each row's n values (the first on a tie): rows x n -> int32. */
int cera_argmax(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, int32_t *out);
/* Indices of the k largest of each row's n values, largest first, the lower index first on a
 * tie, NaN after every number (the order of a stable sort of -x): rows x n -> rows x k int32. */
int cera_top_k(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, int64_t k, int32_t *out);
/* out[r, j] = x[r, ids[r, j]] for rows r, j < k; every id must be in [0, n). */
int cera_take(cera_ctx *ctx, const float *x, int64_t rows, int64_t n, const int32_t *ids, int64_t k, float *out);

/* Elementwise ops. op: 0 silu, 1 gelu (tanh approximation, as ggml: through an f16
 * table), 2 gelu_erf, 3 relu. glu: y = act(g) * u with act 0 silu, 1 gelu. */
int cera_unary(cera_ctx *ctx, int op, const float *x, float *y, int64_t n);
int cera_glu(cera_ctx *ctx, int op, const float *g, const float *u, float *y, int64_t n);
/* y[r, i] = a[r, i] (op) b[r * b_stride + i] for rows r < rows, i < n; op 0 add, 1 mul.
 * b_stride = n for two tensors of one shape, 0 to broadcast one row of b over a. */
int cera_binary(cera_ctx *ctx, int op, const float *a, const float *b, int64_t b_stride, float *y, int64_t rows,
                int64_t n);
/* y = x * s */
int cera_scale(cera_ctx *ctx, const float *x, float s, float *y, int64_t n);
/* y = tanh(x * (1 / cap)) * cap, in float32 steps as llama.cpp builds it */
int cera_softcap(cera_ctx *ctx, const float *x, float cap, float *y, int64_t n);
/* y[r, :n] = x[r * x_stride, :n]: gathers a strided view into a contiguous tensor */
int cera_copy_rows(cera_ctx *ctx, const float *x, int64_t x_stride, int64_t rows, int64_t n, float *y);

/* Conversions (round to nearest even, as ggml and F16C). */
void cera_f32_to_f16(const float *x, uint16_t *y, int64_t n);
void cera_f16_to_f32(const uint16_t *x, float *y, int64_t n);

/* -- execution plans ------------------------------------------------------------------------ */

/* A plan is a compiled graph (cera_backend_cpu/compile.py): a list of the ops above with
 * their pointers, sizes and scalar parameters, replayed by one call with the GIL released:
 * a decode step of a small model is a few hundred ops, and calling each from Python costs
 * more than some of them take. Each cera_plan_<op> appends one op with the arguments of
 * cera_<op>, checked the same way; it returns 0 or a negative CERA_E* code.
 *
 * The plan owns no tensor memory: the caller keeps every buffer, weight and input alive as
 * long as the plan, and writes each run's inputs (token ids, positions, the sequences'
 * slots and starts) into the input buffers the ops were given. What belongs to a state
 * (KV caches, cell positions) is not baked in: the attention ops name entries of a table of
 * pointers that each run passes, so one plan serves every state of the same shape. */
typedef struct cera_plan cera_plan;
cera_plan *cera_plan_new(cera_ctx *ctx);
void cera_plan_free(cera_plan *plan);
/* Number of ops recorded (after fusion). */
int cera_plan_size(const cera_plan *plan);
/* Returns 0, CERA_EINVAL if a token id is outside its embedding table or a slot outside
 * its state, or CERA_ENOMEM. */
int cera_plan_run(cera_plan *plan, void *const *state_table);

int cera_plan_get_rows(cera_plan *plan, int ggml_type, const void *table, int64_t row_bytes, int64_t n_cols,
                       int64_t n_rows, const int32_t *ids, int64_t n_ids, float *out);
int cera_plan_rms_norm(cera_plan *plan, const float *x, int64_t rows, int64_t n, const float *w, float eps, float *y);
int cera_plan_layer_norm(cera_plan *plan, const float *x, int64_t rows, int64_t n, const float *w, const float *b,
                         float eps, float *y);
int cera_plan_rope(cera_plan *plan, const float *x, float *y, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                   const int32_t *pos, int n_dims, int neox, float freq_base, float freq_scale,
                   const float *freq_factors, float ext_factor, float attn_factor, float beta_fast,
                   float beta_slow, int n_ctx_orig);
int cera_plan_unary(cera_plan *plan, int op, const float *x, float *y, int64_t n);
int cera_plan_glu(cera_plan *plan, int op, const float *g, const float *u, float *y, int64_t n);
int cera_plan_binary(cera_plan *plan, int op, const float *a, const float *b, int64_t b_stride, float *y,
                     int64_t rows, int64_t n);
int cera_plan_scale(cera_plan *plan, const float *x, float s, float *y, int64_t n);
int cera_plan_softcap(cera_plan *plan, const float *x, float cap, float *y, int64_t n);
int cera_plan_copy_rows(cera_plan *plan, const float *x, int64_t x_stride, int64_t rows, int64_t n, float *y);
int cera_plan_argmax(cera_plan *plan, const float *x, int64_t rows, int64_t n, int32_t *out);
int cera_plan_top_k(cera_plan *plan, const float *x, int64_t rows, int64_t n, int64_t k, int32_t *out);
int cera_plan_take(cera_plan *plan, const float *x, int64_t rows, int64_t n, const int32_t *ids, int64_t k, float *out);

/* Attention of the sequences of a batch, each over its own slot of a state. The state's
 * arrays are entries of the run's table: table[k_index] / table[v_index] hold slot 0 of the
 * layer's keys / values ([n_slots][n_kv_heads][capacity][dim], slots back to back) and
 * table[pos_index] slot 0 of the cell positions ([n_slots][n_ctx] int32). Sequence s is rows
 * [rows[2s], rows[2s] + rows[2s + 1]) of q, k, v and out; at run time slots[s] and starts[s]
 * (input buffers) say which slot it uses and how many cells that slot held. With per_row,
 * row t of a sequence attends as if it were a one-token step at cell starts[s] + t (the
 * same chunking, the same bits), which speculative decoding's verification needs; with 2
 * the rows attend in tiles (the prompt path) however few they are. */
typedef struct {
    const float *q, *k, *v;
    float *out;
    int64_t n_heads, n_kv_heads, k_dim, v_dim, capacity, n_ctx;
    int kv_type, acc_f16; /* kv_type: 0 f32, 1 f16, 2 q8_0, 3 q4_0, 4 tq3, 5 tq2 */
    int k_index, v_index, pos_index;
    int koff_index; /* TurboQuant caches: table[koff_index] holds the keys' offset [n_kv_heads][k_dim] (f32),
                       subtracted from each key before it is stored; -1: none */
    int n_slots;
    const int32_t *q_pos;
    float scale, softcap;
    int32_t window;
    int n_seq;
    int per_row; /* 1: attend row by row, each as a one-token step would; 2: always in tiles */
    const int64_t *rows;
    const int32_t *slots, *starts;
} cera_attention_seqs;
int cera_plan_attention(cera_plan *plan, const cera_attention_seqs *args);

/* Several products of one input as one pool job: the input is quantized once per
 * activation format, and the members' rows are handed out together. Member i computes
 * y[m, :N] = x[m] @ W.T (+ bias) and, with a residual, also out[m, r] = residual[m, r] +
 * y[m, r] (same strides as y) as its rows are done. glu_op >= 0 (0 silu, 1 gelu) needs
 * exactly two members of one size, a gate and an up: their rows are done together and
 * glu_out[m, r] = act(gate[m, r]) * up[m, r] (rows glu_stride apart). Every element is
 * computed as cera_matmul, cera_binary and cera_glu compute it. per_row selects the kernels
 * by row, not by the row count: 1 (a batch of sequences decoding together) computes every
 * row as a one-row product would, so a sequence's results do not depend on what shares its
 * batch; 2 (the rows of a long prompt) computes every row with the many-row microkernel,
 * so a prompt's rows do not depend on how it was cut into chunks; 0 chooses by the count,
 * as llama.cpp does. At most 8 members.
 *
 * A member may carry LoRA pairs (n_lora of them at lora): y[m, r] = y[m, r] + scale *
 * (B (A x[m]))[r] per pair in order, before the bias, as llama.cpp's graph computes it
 * from separate ops: t = A x and B t are one-row products (A's rank rows against x in A's
 * activation format, B's rows against t in B's), then the scale, then the add. Pairs need
 * one-row arithmetic: M == 1 or per_row == 1. At most 16 pairs in one job. */
typedef struct {
    int a_type;
    const void *a; /* rank rows of K */
    int64_t a_row_bytes;
    int b_type;
    const void *b; /* N rows of rank */
    int64_t b_row_bytes, rank;
    float scale;
} cera_lora;
typedef struct {
    int wtype;
    const void *w;
    int64_t w_row_bytes, N;
    float *y;
    int64_t y_stride;
    const float *bias;
    const float *residual;
    float *out;
    const cera_lora *lora;
    int n_lora;
} cera_product;
int cera_plan_products(cera_plan *plan, const float *x, int64_t x_stride, int64_t K, int64_t M,
                       const cera_product *members, int n_members, int glu_op, float *glu_out, int64_t glu_stride,
                       int per_row);

/* Profiling: with profiling on, every run adds each op's wall time (ns) to a counter;
 * cera_plan_profile copies the counters and the op names out (n = cera_plan_size). */
void cera_plan_set_profiling(cera_plan *plan, int on);
void cera_plan_profile(const cera_plan *plan, int64_t *ns, const char **names);

/* -- benchmarks ----------------------------------------------------------------------------- */

/* Read every byte of p on all the context's threads and return a checksum: measures the
 * memory read bandwidth that a memory-bound matrix-vector product can reach. */
uint64_t cera_read_probe(cera_ctx *ctx, const void *p, int64_t bytes);

/* The matrix-vector products of one decoded token, in order, under one lock, reps times:
 * product i is x (K[i] floats, the first K[i] of x) times weight w[i] of type types[i]
 * (N[i] rows of row_bytes[i]) into y (at least N[i] floats). Returns the first error. */
int cera_bench_matvecs(cera_ctx *ctx, int n, const int *types, void *const *w, const int64_t *row_bytes,
                       const int64_t *K, const int64_t *N, const float *x, float *y, int reps);

/* -- recurrent mixers and routed experts (recurrent.c, moe.c) -------------------------------- */

/* Causal depthwise convolution over the tokens of each sequence (ggml_ssm_conv):
 * y[t, c] = sum_j wt[j, c] * xx[t + j, c], xx being the sequence's carried last kernel - 1
 * inputs followed by its rows of x; the carried inputs then advance. x, y: [n, channels];
 * wt: the kernel transposed, [kernel][channels]. table[state_index] holds slot 0 of the
 * carried inputs, [n_slots][kernel - 1][channels] float32. Sequence s is rows [rows[2s],
 * rows[2s] + rows[2s + 1]); slots[s] (read at run time) is its slot.
 * Gating (LFM2's short convolution in one pass, none of it materialised): with b set, the
 * input row t is b[t] * x[t] (that product is what is carried); with c set, y[t] is
 * c[t] * conv[t]. x, b and c rows are x_stride floats apart (0: channels), so they may be
 * slices of one fused projection's rows; y is [n, channels]. */
typedef struct {
    const float *x, *wt;
    float *y;
    int64_t channels, kernel;
    int state_index, n_slots;
    int n_seq;
    const int64_t *rows;
    const int32_t *slots;
    const float *b, *c;
    int64_t x_stride;
} cera_conv_causal_args;
int cera_conv_causal(cera_ctx *ctx, const cera_conv_causal_args *args, void *const *table);

/* Mamba-2's selective scan (ggml_ssm_scan with a scalar A per head), token by token within
 * each sequence: dt' = softplus(dt); per head h of group g, state = state * exp(dt' A[h]) +
 * B[g] (x[h] dt'); y[h] = state C[g]. x, y: [n, heads, head_dim]; dt: [n, heads]; B, C:
 * [n, groups, d_state]; table[state_index]: slot 0 of [n_slots][heads][head_dim][d_state]. */
typedef struct {
    const float *x, *dt, *A, *B, *C;
    float *y;
    int64_t n_heads, head_dim, n_groups, d_state;
    int state_index, n_slots;
    int n_seq;
    const int64_t *rows;
    const int32_t *slots;
} cera_ssm_scan_args;
int cera_ssm_scan(cera_ctx *ctx, const cera_ssm_scan_args *args, void *const *table);

/* The gated delta rule (ggml_gated_delta_net with one decay per head), token by token within
 * each sequence: per value head h, key head h % key_heads (grouped: h / (value_heads /
 * key_heads)), state M [dim][dim] (row j: value
 * channel j): M *= exp(g[h]); d = (v[h] - M k) beta[h]; M += d k^T; y[h] = M q / sqrt(dim).
 * q, k: [n, key_heads, dim]; v, y: [n, value_heads, dim]; g, beta: [n, value_heads];
 * table[state_index]: slot 0 of [n_slots][value_heads][dim][dim]. dim <= 1024. */
typedef struct {
    const float *q, *k, *v, *g, *beta;
    float *y;
    int64_t key_heads, value_heads, dim;
    int grouped;
    int state_index, n_slots;
    int n_seq;
    const int64_t *rows;
    const int32_t *slots;
} cera_delta_net_args;
int cera_delta_net(cera_ctx *ctx, const cera_delta_net_args *args, void *const *table);

/* Top-k routed experts (llama.cpp's build_moe_ffn): gating 0 softmax, 1 sigmoid; experts
 * chosen by probability plus selection_bias (NULL: none); the k weights renormalised when
 * norm_topk, multiplied by weight_scale unless it is 0 or 1; act 0 SwiGLU, 1 GeGLU. x, out:
 * [n_tok, dim]. router: n_expert rows of dim; gate/up: n_expert slabs of n_ff rows of dim;
 * down: n_expert slabs of dim rows of n_ff (GGML [dim, n_ff, n_expert] / [n_ff, dim,
 * n_expert]), rows *_row_bytes apart. The tokens are grouped by expert, so each expert's
 * weights are read once per call. per_row: as cera_plan_products. */
typedef struct {
    const float *x;
    float *out;
    int64_t n_tok, dim, n_ff, n_expert;
    int router_type, gate_type, up_type, down_type;
    const void *router, *gate, *up, *down;
    int64_t router_row_bytes, gate_row_bytes, up_row_bytes, down_row_bytes;
    const float *selection_bias;
    int k, gating, norm_topk, act, per_row;
    float weight_scale;
} cera_moe_args;
int cera_moe(cera_ctx *ctx, const cera_moe_args *args);

int cera_plan_conv_causal(cera_plan *plan, const cera_conv_causal_args *args);
int cera_plan_ssm_scan(cera_plan *plan, const cera_ssm_scan_args *args);
int cera_plan_delta_net(cera_plan *plan, const cera_delta_net_args *args);
int cera_plan_moe(cera_plan *plan, const cera_moe_args *args);

/* -- encoder ops (encoder.c): full convolution, attention without a cache, cross-attention -- */

/* y[t, o] = bias[o] + sum_{c, i} x[t * stride + i - padding, c] * W[o, c, i] (zero outside
 * x): x [n_in, c_in], y [n_out, c_out] with n_out = (n_in + 2 padding - kernel) / stride + 1.
 * wt is W transposed: [c_in * kernel][c_out], row c * kernel + i. bias may be NULL. */
int cera_conv1d(cera_ctx *ctx, const float *x, int64_t n_in, int64_t c_in, const float *wt, int64_t kernel,
                int64_t c_out, const float *bias, int stride, int padding, float *y, int64_t n_out);

/* Attention within each sequence of a batch, without a cache: sequence s is rows
 * [rows[2s], rows[2s] + rows[2s + 1]) of q [n, n_heads, k_dim], k [n, n_kv_heads, k_dim],
 * v [n, n_kv_heads, v_dim] and out [n, n_heads * v_dim]. Every row sees every row of its
 * sequence, unless causal (keys at positions <= its own) or window > 0 (|p_q - p_k| <
 * window), by the rows' positions pos. Logits scale * q.k, soft-capped when softcap > 0. */
typedef struct {
    const float *q, *k, *v;
    float *out;
    int64_t n_heads, n_kv_heads, k_dim, v_dim;
    float scale, softcap;
    int32_t window;
    int causal;
    const int32_t *pos;
    int n_seq; /* at most 64 */
    const int64_t *rows;
} cera_attention_full_args;
int cera_attention_full(cera_ctx *ctx, const cera_attention_full_args *args);

/* A cross-attention memory in a state: table[k_index] / table[v_index] hold slot 0 of
 * [n_slots][max_len][n_kv_heads][dim] float32, table[len_index] the rows stored per slot
 * (int64 [n_slots]). store_cross writes sequence s's rows of k / v into slot slots[s] and
 * sets its length; cross_attention attends sequence s's queries q [n, n_heads, k_dim] over
 * its slot's stored rows (unmasked) into out [n, n_heads * v_dim]. slots (an input buffer)
 * are read at run time; the plan keeps the rows pointer, which the caller keeps alive. */
typedef struct {
    const float *q;
    float *out;
    int64_t n_heads, n_kv_heads, k_dim, v_dim, max_len;
    float scale;
    int k_index, v_index, len_index, n_slots;
    int n_seq; /* at most 64 */
    const int64_t *rows;
    const int32_t *slots;
    int shared; /* every sequence reads the memory of slots[0] (beams of one source) */
} cera_cross_args;
typedef struct {
    const float *k, *v;
    int64_t n_kv_heads, k_dim, v_dim, max_len;
    int k_index, v_index, len_index, n_slots;
    int n_seq;
    const int64_t *rows;
    const int32_t *slots;
} cera_store_cross_args;

int cera_plan_conv1d(cera_plan *plan, const float *x, int64_t n_in, int64_t c_in, const float *wt, int64_t kernel,
                     int64_t c_out, const float *bias, int stride, int padding, float *y, int64_t n_out);
int cera_plan_attention_full(cera_plan *plan, const cera_attention_full_args *args);
int cera_plan_cross_attention(cera_plan *plan, const cera_cross_args *args);
int cera_plan_store_cross(cera_plan *plan, const cera_store_cross_args *args);
