/* Execution plans: a compiled graph, replayed by one call.
 *
 * The Python side compiles a graph once per shape (cera_backend_cpu/compile.py), with
 * every intermediate tensor at a fixed place in an arena it owns, and appends each op here
 * with the same arguments the eager call takes. A run holds the context lock once and
 * walks the list: no Python between ops, no GIL held. The run's inputs are already in the
 * buffers the ops read; the state's arrays come in a table of pointers per run.
 *
 * Each op keeps its arguments in a tagged union and runs the very function its eager
 * call runs, so a replayed step computes what the eager step computed, bit for bit.
 */
#include <stdlib.h>
#include <time.h>

#include "encoder.h"
#include "internal.h"
#include "mixers.h"

enum {
    OP_GET_ROWS,
    OP_PRODUCTS,
    OP_RMS_NORM,
    OP_LAYER_NORM,
    OP_ROPE,
    OP_ATTENTION,
    OP_UNARY,
    OP_GLU,
    OP_BINARY,
    OP_SCALE,
    OP_SOFTCAP,
    OP_COPY_ROWS,
    OP_ARGMAX,
    OP_TOP_K,
    OP_TAKE,
    OP_CONV_CAUSAL,
    OP_SSM_SCAN,
    OP_MOE,
    OP_CONV1D,
    OP_ATTENTION_FULL,
    OP_CROSS_ATTENTION,
    OP_STORE_CROSS,
    OP_DELTA_NET,
    OP_COUNT
};

static const char *const OP_NAMES[OP_COUNT] = {
    "get_rows", "products", "rms_norm", "layer_norm", "rope", "attention",
    "unary", "glu", "binary", "scale", "softcap", "copy_rows", "argmax",
    "top_k", "take", "conv_causal", "ssm_scan", "moe",
    "conv1d", "attention_full", "cross_attention", "store_cross", "delta_net",
};

typedef struct {
    int t;
    const void *table;
    int64_t row_bytes, n_cols, n_rows;
    const int32_t *ids;
    int64_t n_ids;
    float *out;
} get_rows_args;

typedef struct {
    const float *x;
    int64_t x_stride, K, M;
    cera_product mem[CERA_MAX_PRODUCTS];
    int n_mem, glu_op, per_row;
    float *glu_out;
    int64_t glu_stride;
} products_args;

typedef struct {
    const float *x, *w, *b;
    int64_t rows, n;
    float eps;
    float *y;
} norm_args;

typedef struct {
    const float *x;
    float *y;
    int64_t n_tok, n_heads, head_dim;
    const int32_t *pos;
    int n_dims, neox, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    const float *freq_factors;
} rope_args;

typedef struct {
    cera_attention_seqs a; /* rows points at the node's own copy */
    int64_t *rows;
} attention_args;

typedef struct {
    const float *x;
    int64_t rows, n;
    int32_t *out;
} argmax_args;

typedef struct { /* top_k (ids out), take (ids in, values out) */
    const float *x;
    int64_t rows, n, k;
    int32_t *ids;
    float *values;
} top_k_args;

typedef struct { /* unary (b unused), glu, binary */
    int code;
    const float *a, *b;
    int64_t b_stride, rows, n;
    float *y;
} ew_args;

typedef struct { /* scale, softcap */
    const float *x;
    float s;
    float *y;
    int64_t n;
} scale_args;

typedef struct {
    const float *x;
    int64_t x_stride, rows, n;
    float *y;
} copy_args;

typedef struct {
    const float *x, *wt, *bias;
    int64_t n_in, c_in, kernel, c_out, n_out;
    int stride, padding;
    float *y;
} conv1d_args;

typedef struct {
    int op;
    union {
        get_rows_args get_rows;
        products_args products;
        norm_args norm;
        rope_args rope;
        attention_args attention;
        ew_args ew;
        scale_args scale;
        copy_args copy;
        argmax_args argmax;
        top_k_args top_k;
        cera_conv_causal_args conv_causal;
        cera_ssm_scan_args ssm_scan;
        cera_delta_net_args delta_net;
        cera_moe_args moe;
        conv1d_args conv1d;
        cera_attention_full_args attention_full;
        cera_cross_args cross;
        cera_store_cross_args store_cross;
    } u;
} plan_node;

struct cera_plan {
    cera_ctx *ctx;
    void *const *table; /* the state's arrays, for the run in progress */
    plan_node *nodes;
    int n_nodes, cap;
    int profiling;
    int64_t *ns; /* per node, when profiling */
};

cera_plan *cera_plan_new(cera_ctx *ctx) {
    if (!ctx) return NULL;
    cera_plan *plan = calloc(1, sizeof(cera_plan));
    if (!plan) return NULL;
    plan->ctx = ctx;
    return plan;
}

void cera_plan_free(cera_plan *plan) {
    if (!plan) return;
    for (int i = 0; i < plan->n_nodes; i++)
        if (plan->nodes[i].op == OP_ATTENTION) free(plan->nodes[i].u.attention.rows);
    free(plan->nodes);
    free(plan->ns);
    free(plan);
}

int cera_plan_size(const cera_plan *plan) { return plan->n_nodes; }

static plan_node *append(cera_plan *plan, int op) {
    if (plan->n_nodes == plan->cap) {
        const int cap = plan->cap ? plan->cap * 2 : 256;
        plan_node *nodes = realloc(plan->nodes, sizeof(plan_node) * (size_t)cap);
        int64_t *ns = realloc(plan->ns, sizeof(int64_t) * (size_t)cap);
        if (nodes) plan->nodes = nodes;
        if (ns) plan->ns = ns;
        if (!nodes || !ns) return NULL;
        plan->cap = cap;
    }
    plan->ns[plan->n_nodes] = 0;
    plan_node *node = &plan->nodes[plan->n_nodes++];
    memset(node, 0, sizeof *node);
    node->op = op;
    return node;
}

/* -- appending ops (arguments as the eager cera_<op>) ------------------------------------------ */

int cera_plan_get_rows(cera_plan *plan, int t, const void *table, int64_t row_bytes, int64_t n_cols, int64_t n_rows,
                       const int32_t *ids, int64_t n_ids, float *out) {
    if (!cera_type_supported(t) || n_cols % cera_types[t].block) return CERA_ETYPE;
    plan_node *node = append(plan, OP_GET_ROWS);
    if (!node) return CERA_ENOMEM;
    node->u.get_rows.t = t;
    node->u.get_rows.table = table;
    node->u.get_rows.row_bytes = row_bytes;
    node->u.get_rows.n_cols = n_cols;
    node->u.get_rows.n_rows = n_rows;
    node->u.get_rows.ids = ids;
    node->u.get_rows.n_ids = n_ids;
    node->u.get_rows.out = out;
    return CERA_OK;
}

int cera_plan_products(cera_plan *plan, const float *x, int64_t x_stride, int64_t K, int64_t M,
                       const cera_product *members, int n_members, int glu_op, float *glu_out, int64_t glu_stride,
                       int per_row) {
    const int rc = cera_products_check(members, n_members, K, M, glu_op, per_row);
    if (rc != CERA_OK) return rc;
    plan_node *node = append(plan, OP_PRODUCTS);
    if (!node) return CERA_ENOMEM;
    products_args *a = &node->u.products;
    a->x = x;
    a->x_stride = x_stride;
    a->K = K;
    a->M = M;
    memcpy(a->mem, members, sizeof(cera_product) * (size_t)n_members);
    a->n_mem = n_members;
    a->glu_op = glu_op;
    a->glu_out = glu_out;
    a->glu_stride = glu_stride;
    a->per_row = per_row;
    return CERA_OK;
}

static int add_norm(cera_plan *plan, int op, const float *x, int64_t rows, int64_t n, const float *w, const float *b,
                    float eps, float *y) {
    plan_node *node = append(plan, op);
    if (!node) return CERA_ENOMEM;
    node->u.norm.x = x;
    node->u.norm.rows = rows;
    node->u.norm.n = n;
    node->u.norm.w = w;
    node->u.norm.b = b;
    node->u.norm.eps = eps;
    node->u.norm.y = y;
    return CERA_OK;
}

int cera_plan_rms_norm(cera_plan *plan, const float *x, int64_t rows, int64_t n, const float *w, float eps, float *y) {
    return add_norm(plan, OP_RMS_NORM, x, rows, n, w, NULL, eps, y);
}

int cera_plan_layer_norm(cera_plan *plan, const float *x, int64_t rows, int64_t n, const float *w, const float *b,
                         float eps, float *y) {
    return add_norm(plan, OP_LAYER_NORM, x, rows, n, w, b, eps, y);
}

int cera_plan_rope(cera_plan *plan, const float *x, float *y, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                   const int32_t *pos, int n_dims, int neox, float freq_base, float freq_scale,
                   const float *freq_factors, float ext_factor, float attn_factor, float beta_fast, float beta_slow,
                   int n_ctx_orig) {
    if (n_dims <= 0 || n_dims % 2 || n_dims > head_dim) return CERA_EINVAL;
    plan_node *node = append(plan, OP_ROPE);
    if (!node) return CERA_ENOMEM;
    node->u.rope.x = x;
    node->u.rope.y = y;
    node->u.rope.n_tok = n_tok;
    node->u.rope.n_heads = n_heads;
    node->u.rope.head_dim = head_dim;
    node->u.rope.pos = pos;
    node->u.rope.n_dims = n_dims;
    node->u.rope.neox = neox;
    node->u.rope.freq_base = freq_base;
    node->u.rope.freq_scale = freq_scale;
    node->u.rope.freq_factors = freq_factors;
    node->u.rope.ext_factor = ext_factor;
    node->u.rope.attn_factor = attn_factor;
    node->u.rope.beta_fast = beta_fast;
    node->u.rope.beta_slow = beta_slow;
    node->u.rope.n_ctx_orig = n_ctx_orig;
    return CERA_OK;
}

int cera_plan_attention(cera_plan *plan, const cera_attention_seqs *args) {
    const cera_attention_seqs *a = args;
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || a->capacity <= 0 || a->capacity > a->n_ctx ||
        a->n_seq <= 0 || a->n_slots <= 0 || !a->slots || !a->starts || !a->rows)
        return CERA_EINVAL;
    for (int s = 0; s < a->n_seq; s++)
        if (a->rows[2 * s] < 0 || a->rows[2 * s + 1] <= 0 || a->rows[2 * s + 1] > a->capacity) return CERA_EINVAL;
    int64_t *rows = malloc(sizeof(int64_t) * 2 * (size_t)a->n_seq);
    if (!rows) return CERA_ENOMEM;
    memcpy(rows, a->rows, sizeof(int64_t) * 2 * (size_t)a->n_seq);
    plan_node *node = append(plan, OP_ATTENTION);
    if (!node) {
        free(rows);
        return CERA_ENOMEM;
    }
    node->u.attention.a = *a;
    node->u.attention.a.rows = rows;
    node->u.attention.rows = rows;
    return CERA_OK;
}

static int add_ew(cera_plan *plan, int op, int code, const float *a, const float *b, int64_t b_stride, float *y,
                  int64_t rows, int64_t n) {
    plan_node *node = append(plan, op);
    if (!node) return CERA_ENOMEM;
    node->u.ew.code = code;
    node->u.ew.a = a;
    node->u.ew.b = b;
    node->u.ew.b_stride = b_stride;
    node->u.ew.y = y;
    node->u.ew.rows = rows;
    node->u.ew.n = n;
    return CERA_OK;
}

int cera_plan_unary(cera_plan *plan, int op, const float *x, float *y, int64_t n) {
    if (op < 0 || op > 5) return CERA_EINVAL;
    return add_ew(plan, OP_UNARY, op, x, NULL, 0, y, 1, n);
}

int cera_plan_glu(cera_plan *plan, int op, const float *g, const float *u, float *y, int64_t n) {
    if (op < 0 || op > 1) return CERA_EINVAL;
    return add_ew(plan, OP_GLU, op, g, u, 0, y, 1, n);
}

int cera_plan_binary(cera_plan *plan, int op, const float *a, const float *b, int64_t b_stride, float *y, int64_t rows,
                     int64_t n) {
    if (op < 0 || op > 1) return CERA_EINVAL;
    return add_ew(plan, OP_BINARY, op, a, b, b_stride, y, rows, n);
}

static int add_scale(cera_plan *plan, int op, const float *x, float s, float *y, int64_t n) {
    plan_node *node = append(plan, op);
    if (!node) return CERA_ENOMEM;
    node->u.scale.x = x;
    node->u.scale.s = s;
    node->u.scale.y = y;
    node->u.scale.n = n;
    return CERA_OK;
}

int cera_plan_scale(cera_plan *plan, const float *x, float s, float *y, int64_t n) {
    return add_scale(plan, OP_SCALE, x, s, y, n);
}

int cera_plan_softcap(cera_plan *plan, const float *x, float cap, float *y, int64_t n) {
    return add_scale(plan, OP_SOFTCAP, x, cap, y, n);
}

int cera_plan_argmax(cera_plan *plan, const float *x, int64_t rows, int64_t n, int32_t *out) {
    if (rows < 0 || n <= 0) return CERA_EINVAL;
    plan_node *node = append(plan, OP_ARGMAX);
    if (!node) return CERA_ENOMEM;
    node->u.argmax.x = x;
    node->u.argmax.rows = rows;
    node->u.argmax.n = n;
    node->u.argmax.out = out;
    return CERA_OK;
}

int cera_plan_top_k(cera_plan *plan, const float *x, int64_t rows, int64_t n, int64_t k, int32_t *out) {
    if (rows < 0 || n <= 0 || k <= 0 || k > n) return CERA_EINVAL;
    plan_node *node = append(plan, OP_TOP_K);
    if (!node) return CERA_ENOMEM;
    node->u.top_k = (top_k_args){x, rows, n, k, out, NULL};
    return CERA_OK;
}

int cera_plan_take(cera_plan *plan, const float *x, int64_t rows, int64_t n, const int32_t *ids, int64_t k,
                   float *out) {
    if (rows < 0 || n <= 0 || k <= 0) return CERA_EINVAL;
    plan_node *node = append(plan, OP_TAKE);
    if (!node) return CERA_ENOMEM;
    node->u.top_k = (top_k_args){x, rows, n, k, (int32_t *)ids, out};
    return CERA_OK;
}

int cera_plan_copy_rows(cera_plan *plan, const float *x, int64_t x_stride, int64_t rows, int64_t n, float *y) {
    plan_node *node = append(plan, OP_COPY_ROWS);
    if (!node) return CERA_ENOMEM;
    node->u.copy.x = x;
    node->u.copy.x_stride = x_stride;
    node->u.copy.rows = rows;
    node->u.copy.n = n;
    node->u.copy.y = y;
    return CERA_OK;
}

int cera_plan_conv1d(cera_plan *plan, const float *x, int64_t n_in, int64_t c_in, const float *wt, int64_t kernel,
                     int64_t c_out, const float *bias, int stride, int padding, float *y, int64_t n_out) {
    if (n_in <= 0 || c_in <= 0 || kernel <= 0 || c_out <= 0 || stride <= 0 || padding < 0 ||
        n_out != (n_in + 2 * padding - kernel) / stride + 1 || n_out <= 0)
        return CERA_EINVAL;
    plan_node *node = append(plan, OP_CONV1D);
    if (!node) return CERA_ENOMEM;
    conv1d_args *a = &node->u.conv1d;
    a->x = x;
    a->wt = wt;
    a->bias = bias;
    a->n_in = n_in;
    a->c_in = c_in;
    a->kernel = kernel;
    a->c_out = c_out;
    a->n_out = n_out;
    a->stride = stride;
    a->padding = padding;
    a->y = y;
    return CERA_OK;
}

int cera_plan_attention_full(cera_plan *plan, const cera_attention_full_args *args) {
    if (!args->rows || args->n_seq <= 0 || args->n_seq > 64 || args->n_kv_heads <= 0 ||
        args->n_heads % args->n_kv_heads || ((args->causal || args->window > 0) && !args->pos))
        return CERA_EINVAL;
    plan_node *node = append(plan, OP_ATTENTION_FULL);
    if (!node) return CERA_ENOMEM;
    node->u.attention_full = *args;
    return CERA_OK;
}

int cera_plan_cross_attention(cera_plan *plan, const cera_cross_args *args) {
    if (!args->rows || !args->slots || args->n_seq <= 0 || args->n_seq > 64 || args->n_kv_heads <= 0 ||
        args->n_heads % args->n_kv_heads)
        return CERA_EINVAL;
    plan_node *node = append(plan, OP_CROSS_ATTENTION);
    if (!node) return CERA_ENOMEM;
    node->u.cross = *args;
    return CERA_OK;
}

int cera_plan_store_cross(cera_plan *plan, const cera_store_cross_args *args) {
    if (!args->rows || !args->slots || args->n_seq <= 0) return CERA_EINVAL;
    plan_node *node = append(plan, OP_STORE_CROSS);
    if (!node) return CERA_ENOMEM;
    node->u.store_cross = *args;
    return CERA_OK;
}

int cera_plan_conv_causal(cera_plan *plan, const cera_conv_causal_args *args) {
    const int rc = cera_conv_causal_check(args);
    if (rc != CERA_OK) return rc;
    plan_node *node = append(plan, OP_CONV_CAUSAL);
    if (!node) return CERA_ENOMEM;
    node->u.conv_causal = *args;
    return CERA_OK;
}

int cera_plan_ssm_scan(cera_plan *plan, const cera_ssm_scan_args *args) {
    const int rc = cera_ssm_scan_check(args);
    if (rc != CERA_OK) return rc;
    plan_node *node = append(plan, OP_SSM_SCAN);
    if (!node) return CERA_ENOMEM;
    node->u.ssm_scan = *args;
    return CERA_OK;
}

int cera_plan_delta_net(cera_plan *plan, const cera_delta_net_args *args) {
    const int rc = cera_delta_net_check(args);
    if (rc != CERA_OK) return rc;
    plan_node *node = append(plan, OP_DELTA_NET);
    if (!node) return CERA_ENOMEM;
    node->u.delta_net = *args;
    return CERA_OK;
}

int cera_plan_moe(cera_plan *plan, const cera_moe_args *args) {
    const int rc = cera_moe_check(args);
    if (rc != CERA_OK) return rc;
    plan_node *node = append(plan, OP_MOE);
    if (!node) return CERA_ENOMEM;
    node->u.moe = *args;
    return CERA_OK;
}

/* -- running ---------------------------------------------------------------------------------- */

static int run_node(cera_plan *plan, const plan_node *node) {
    cera_ctx *ctx = plan->ctx;
    switch (node->op) {
    case OP_GET_ROWS: {
        const get_rows_args *a = &node->u.get_rows;
        return cera_get_rows(ctx, a->t, a->table, a->row_bytes, a->n_cols, a->n_rows, a->ids, a->n_ids, a->out);
    }
    case OP_PRODUCTS: {
        const products_args *a = &node->u.products;
        return cera_products_unlocked(ctx, a->x, a->x_stride, a->K, a->M, a->mem, a->n_mem, a->glu_op, a->glu_out,
                                      a->glu_stride, a->per_row);
    }
    case OP_RMS_NORM: {
        const norm_args *a = &node->u.norm;
        return cera_rms_norm(ctx, a->x, a->rows, a->n, a->w, a->eps, a->y);
    }
    case OP_LAYER_NORM: {
        const norm_args *a = &node->u.norm;
        return cera_layer_norm(ctx, a->x, a->rows, a->n, a->w, a->b, a->eps, a->y);
    }
    case OP_ROPE: {
        const rope_args *a = &node->u.rope;
        return cera_rope(ctx, a->x, a->y, a->n_tok, a->n_heads, a->head_dim, a->pos, a->n_dims, a->neox, a->freq_base,
                         a->freq_scale, a->freq_factors, a->ext_factor, a->attn_factor, a->beta_fast, a->beta_slow,
                         a->n_ctx_orig);
    }
    case OP_ATTENTION:
        return cera_attention_seqs_unlocked(ctx, &node->u.attention.a, plan->table);
    case OP_ARGMAX:
        return cera_argmax(ctx, node->u.argmax.x, node->u.argmax.rows, node->u.argmax.n, node->u.argmax.out);
    case OP_TOP_K: {
        const top_k_args *a = &node->u.top_k;
        return cera_top_k(ctx, a->x, a->rows, a->n, a->k, a->ids);
    }
    case OP_TAKE: {
        const top_k_args *a = &node->u.top_k;
        return cera_take(ctx, a->x, a->rows, a->n, a->ids, a->k, a->values);
    }
    case OP_UNARY:
        return cera_unary(ctx, node->u.ew.code, node->u.ew.a, node->u.ew.y, node->u.ew.n);
    case OP_GLU:
        return cera_glu(ctx, node->u.ew.code, node->u.ew.a, node->u.ew.b, node->u.ew.y, node->u.ew.n);
    case OP_BINARY: {
        const ew_args *a = &node->u.ew;
        return cera_binary(ctx, a->code, a->a, a->b, a->b_stride, a->y, a->rows, a->n);
    }
    case OP_SCALE:
        return cera_scale(ctx, node->u.scale.x, node->u.scale.s, node->u.scale.y, node->u.scale.n);
    case OP_SOFTCAP:
        return cera_softcap(ctx, node->u.scale.x, node->u.scale.s, node->u.scale.y, node->u.scale.n);
    case OP_COPY_ROWS: {
        const copy_args *a = &node->u.copy;
        return cera_copy_rows(ctx, a->x, a->x_stride, a->rows, a->n, a->y);
    }
    case OP_CONV_CAUSAL:
        return cera_conv_causal_unlocked(ctx, &node->u.conv_causal, plan->table);
    case OP_SSM_SCAN:
        return cera_ssm_scan_unlocked(ctx, &node->u.ssm_scan, plan->table);
    case OP_MOE:
        return cera_moe_unlocked(ctx, &node->u.moe);
    case OP_DELTA_NET:
        return cera_delta_net_unlocked(ctx, &node->u.delta_net, plan->table);
    case OP_CONV1D: {
        const conv1d_args *a = &node->u.conv1d;
        return cera_conv1d_unlocked(ctx, a->x, a->n_in, a->c_in, a->wt, a->kernel, a->c_out, a->bias, a->stride,
                                    a->padding, a->y, a->n_out);
    }
    case OP_ATTENTION_FULL:
        return cera_attention_full_unlocked(ctx, &node->u.attention_full);
    case OP_CROSS_ATTENTION:
        return cera_cross_attention_unlocked(ctx, &node->u.cross, plan->table);
    case OP_STORE_CROSS:
        return cera_store_cross_unlocked(ctx, &node->u.store_cross, plan->table);
    default:
        return CERA_EINVAL;
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int cera_plan_run(cera_plan *plan, void *const *state_table) {
    plan->table = state_table;
    int rc = CERA_OK;
    cera_ctx_lock(plan->ctx);
    for (int i = 0; i < plan->n_nodes && rc == CERA_OK; i++) {
        if (plan->profiling) {
            const int64_t t0 = now_ns();
            rc = run_node(plan, &plan->nodes[i]);
            plan->ns[i] += now_ns() - t0;
        } else {
            rc = run_node(plan, &plan->nodes[i]);
        }
    }
    cera_ctx_unlock(plan->ctx);
    return rc;
}

void cera_plan_set_profiling(cera_plan *plan, int on) {
    plan->profiling = on;
    for (int i = 0; i < plan->n_nodes; i++) plan->ns[i] = 0;
}

void cera_plan_profile(const cera_plan *plan, int64_t *ns, const char **names) {
    for (int i = 0; i < plan->n_nodes; i++) {
        if (ns) ns[i] = plan->ns[i];
        if (names) names[i] = OP_NAMES[plan->nodes[i].op];
    }
}
