/* A routed mixture of experts as one op, as llama.cpp's build_moe_ffn computes it:
 *
 *   logits = x @ router.T; probs = softmax(logits) or sigmoid(logits)
 *   chosen = the k largest of probs (+ selection bias, which only chooses)
 *   weights = probs[chosen] (/ their sum, clamped below at 2^-14) (* scale)
 *   out[t] = sum over slots j, in order, of weights[t, j] * down_e(act(gate_e x) * up_e x)
 *
 * The tokens of a pass are grouped by expert: each expert's rows are gathered and go
 * through its gate/up product (with the GLU as its epilogue) and its down product once,
 * so an expert's weights are read once per pass instead of once per token routed to it.
 * The products are the backend's own (cera_products_unlocked), threaded and quantizing
 * the activations as every other product does; routing is a few values per token and runs
 * on the calling thread. Each token's expert outputs are summed in slot order afterwards,
 * as ggml adds them.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

int cera_moe_check(const cera_moe_args *a) {
    if (!a || !a->x || !a->out || !a->router || !a->gate || !a->up || !a->down || a->n_tok <= 0 || a->dim <= 0 ||
        a->n_ff <= 0 || a->n_expert <= 0 || a->k <= 0 || a->k > a->n_expert || a->gating < 0 || a->gating > 1 ||
        a->act < 0 || a->act > 1)
        return CERA_EINVAL;
    if (!cera_type_supported(a->router_type) || !cera_type_supported(a->gate_type) ||
        !cera_type_supported(a->up_type) || !cera_type_supported(a->down_type))
        return CERA_ETYPE;
    return CERA_OK;
}

/* The k best of n scores, highest first; the lower index first on a tie (a stable
 * descending sort, as the op's reference). */
static void top_k(const float *score, int64_t n, int k, int32_t *ids) {
    for (int j = 0; j < k; j++) ids[j] = -1;
    for (int64_t e = 0; e < n; e++) {
        int j = k;
        while (j > 0 && (ids[j - 1] < 0 || score[e] > score[ids[j - 1]])) j--;
        if (j >= k) continue;
        for (int m = k - 1; m > j; m--) ids[m] = ids[m - 1];
        ids[j] = (int32_t)e;
    }
}

int cera_moe_unlocked(cera_ctx *ctx, const cera_moe_args *a) {
    const int64_t n = a->n_tok, D = a->dim, F = a->n_ff, E = a->n_expert;
    const int k = a->k;
    /* scratch: logits/probs [n][E], choices [n][k], weights [n][k], per expert lists,
     * gathered rows [n][D], gate/up/h [n][F] each, expert outputs [n][D], slots [n][k][D] */
    const size_t floats = (size_t)(n * E + n * k + n * D + 3 * n * F + n * D + n * k * D);
    float *buf = malloc(sizeof(float) * floats);
    int32_t *ints = malloc(sizeof(int32_t) * (size_t)(2 * n * k + E + 1));
    if (!buf || !ints) {
        free(buf);
        free(ints);
        return CERA_ENOMEM;
    }
    float *probs = buf, *wts = probs + n * E, *xe = wts + n * k, *gbuf = xe + n * D, *ubuf = gbuf + n * F,
          *hbuf = ubuf + n * F, *ye = hbuf + n * F, *slots = ye + n * D;
    int32_t *chosen = ints, *list = chosen + n * k, *start = list + n * k;
    int rc = cera_matmul_unlocked(ctx, a->router_type, a->router, a->router_row_bytes, D, E, a->x, D, n, probs, E,
                                  NULL);
    if (rc != CERA_OK) goto done;

    /* routing, token by token */
    float *select = malloc(sizeof(float) * (size_t)E);
    if (!select) {
        rc = CERA_ENOMEM;
        goto done;
    }
    for (int64_t t = 0; t < n; t++) {
        float *p = probs + t * E;
        if (a->gating == 0) {
            float mx = p[0];
            for (int64_t e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
            double sum = 0.0;
            for (int64_t e = 0; e < E; e++) {
                p[e] = expf(p[e] - mx);
                sum += p[e];
            }
            const float inv = (float)(1.0 / sum);
            for (int64_t e = 0; e < E; e++) p[e] *= inv;
        } else {
            for (int64_t e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
        }
        for (int64_t e = 0; e < E; e++) select[e] = p[e] + (a->selection_bias ? a->selection_bias[e] : 0.0f);
        int32_t *ids = chosen + t * k;
        top_k(select, E, k, ids);
        float *w = wts + t * k;
        float sum = 0.0f;
        for (int j = 0; j < k; j++) {
            w[j] = p[ids[j]];
            sum += w[j];
        }
        if (a->norm_topk) {
            sum = sum < 6.103515625e-5f ? 6.103515625e-5f : sum;
            for (int j = 0; j < k; j++) w[j] /= sum;
        }
        if (a->weight_scale != 0.0f && a->weight_scale != 1.0f)
            for (int j = 0; j < k; j++) w[j] *= a->weight_scale;
    }
    free(select);

    /* group the (token, slot) pairs by expert: a counting sort, tokens in order */
    for (int64_t e = 0; e <= E; e++) start[e] = 0;
    for (int64_t i = 0; i < n * k; i++) start[chosen[i] + 1]++;
    for (int64_t e = 0; e < E; e++) start[e + 1] += start[e];
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)E);
    if (!pos) {
        rc = CERA_ENOMEM;
        goto done;
    }
    for (int64_t e = 0; e < E; e++) pos[e] = start[e];
    for (int64_t i = 0; i < n * k; i++) list[pos[chosen[i]]++] = (int32_t)i; /* i = t * k + j */
    free(pos);

    for (int64_t e = 0; e < E && rc == CERA_OK; e++) {
        const int64_t m = start[e + 1] - start[e];
        if (!m) continue;
        const int32_t *items = list + start[e];
        for (int64_t r = 0; r < m; r++) memcpy(xe + r * D, a->x + (items[r] / k) * D, sizeof(float) * (size_t)D);
        cera_product gu[2];
        memset(gu, 0, sizeof gu);
        gu[0].wtype = a->gate_type;
        gu[0].w = (const char *)a->gate + (size_t)e * (size_t)F * (size_t)a->gate_row_bytes;
        gu[0].w_row_bytes = a->gate_row_bytes;
        gu[0].N = F;
        gu[0].y = gbuf;
        gu[0].y_stride = F;
        gu[1] = gu[0];
        gu[1].wtype = a->up_type;
        gu[1].w = (const char *)a->up + (size_t)e * (size_t)F * (size_t)a->up_row_bytes;
        gu[1].w_row_bytes = a->up_row_bytes;
        gu[1].y = ubuf;
        rc = cera_products_unlocked(ctx, xe, D, D, m, gu, 2, a->act, hbuf, F, a->per_row);
        if (rc != CERA_OK) break;
        cera_product dn;
        memset(&dn, 0, sizeof dn);
        dn.wtype = a->down_type;
        dn.w = (const char *)a->down + (size_t)e * (size_t)D * (size_t)a->down_row_bytes;
        dn.w_row_bytes = a->down_row_bytes;
        dn.N = D;
        dn.y = ye;
        dn.y_stride = D;
        rc = cera_products_unlocked(ctx, hbuf, F, F, m, &dn, 1, -1, NULL, 0, a->per_row);
        if (rc != CERA_OK) break;
        for (int64_t r = 0; r < m; r++) {
            const float w = wts[items[r]];
            float *dst = slots + (int64_t)items[r] * D;
            const float *src = ye + r * D;
            for (int64_t c = 0; c < D; c++) dst[c] = src[c] * w;
        }
    }
    if (rc == CERA_OK) {
        for (int64_t t = 0; t < n; t++) {
            float *o = a->out + t * D;
            const float *s0 = slots + t * k * D;
            memcpy(o, s0, sizeof(float) * (size_t)D);
            for (int j = 1; j < k; j++) {
                const float *sj = s0 + (int64_t)j * D;
                for (int64_t c = 0; c < D; c++) o[c] += sj[c];
            }
        }
    }
done:
    free(buf);
    free(ints);
    return rc;
}

int cera_moe(cera_ctx *ctx, const cera_moe_args *a) {
    const int rc = cera_moe_check(a);
    if (rc != CERA_OK) return rc;
    cera_ctx_lock(ctx);
    const int out = cera_moe_unlocked(ctx, a);
    cera_ctx_unlock(ctx);
    return out;
}
