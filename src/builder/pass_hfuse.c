/* pass_hfuse.c - horizontal GEMM fusion: N linear layers reading one
 * activation X with constant weights of the same K become one GEMM.
 *
 *   Y_i = X W_i (+ b_i)          (MatMul with a constant [K, N_i] weight and
 *                                 an optional Add of a constant [N_i] bias;
 *                                 Gemm with transA 0, alpha = beta = 1 and a
 *                                 constant B ([K, N_i] or [N_i, K] with
 *                                 transB) and C; kiln::MatMul without
 *                                 activation or residual)
 *   ->  Y = X [W_1 | ... | W_n] + [b_1 | ... | b_n];  Y_1..Y_n = Split(Y, -1)
 *
 * What follows each Y_i does not matter: Q, K and V projections in any head
 * layout, grouped-query attention's narrower K and V, a Llama MLP's gate and
 * up projections, Whisper's bias-less K beside biased Q and V (a missing
 * bias is zeros). A Mul of a part by a scalar constant (a query's scaling)
 * folds into its weights and bias. The split copies; where the parts are three equal head
 * tensors read by one attention layer, the qkv pass then has the attention
 * read the packed product in place and the Split goes. Runs before the
 * bias-activation pass, which then puts the concatenated bias (and nothing
 * part-specific) into the GEMM's epilogue. */
#include "passes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define HF_MAX 16

typedef struct hf_proj {
    int node;    /* the MatMul / Gemm */
    int add;     /* its bias Add, or -1 */
    int w;       /* constant weight */
    bool trans;  /* w is [N, K] (Gemm transB) */
    int bias;    /* constant bias, or -1 */
    int mul;     /* a Mul by a scalar after it (folded into W_i, b_i), or -1 */
    double scale;
    int out;     /* Y_i: the Mul's, the Add's, else the node's output */
    int64_t k, n;
    kiln_dtype dt;
} hf_proj;

/* A float projection's sole reader Mul(Y, c) of a constant scalar c
 * (Whisper's and BERT's query scaling) folds into its weights and bias. */
static void scaled(const kpass *p, hf_proj *h) {
    int m = kpass_sole_reader(p, h->out);
    double c;
    if (m < 0 || h->dt != KILN_DTYPE_FLOAT || !kpass_is(&p->net->nodes[m], "Mul") ||
        p->net->nodes[m].n_in != 2 || p->net->nodes[m].n_out != 1)
        return;
    const kn_node *mn = &p->net->nodes[m];
    int other = mn->in[0] == h->out ? mn->in[1] : mn->in[0];
    if (other == h->out || !kpass_const_scalar(p->net, other, &c) ||
        p->net->tensors[other].value.rank > 1 || !isfinite(c))
        return;
    h->mul = m;
    h->scale = c;
    h->out = mn->out[0];
}

/* Whether bias b (a constant) is a vector of n values of type dt that adds
 * to x's product without broadcasting it further: dims all 1 but the last
 * (n), rank 1 or at most x's rank. */
static bool bias_fits(const kpass *p, int b, int x, int64_t n, kiln_dtype dt) {
    const kn_tdata *v = &p->net->tensors[b].value;
    if (v->dtype != dt || v->rank < 1 || v->dims[v->rank - 1] != n || kpass_numel(v) != n)
        return false;
    if (v->rank == 1)
        return true;
    int xr = kpass_rank(p, x);
    return xr >= v->rank;
}

/* Node i as a linear layer of its input 0 by a constant weight. */
static bool as_proj(const kpass *p, int i, hf_proj *h) {
    const kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    if (!kpass_free(p, i) || n->n_out != 1 || n->out[0] < 0 || n->n_in < 2 || n->in[0] < 0 ||
        n->in[1] < 0 || !kpass_is_const(net, n->in[1]))
        return false;
    const kn_tdata *w = &net->tensors[n->in[1]].value;
    size_t es = kiln_dtype_size(w->dtype);
    if (w->rank != 2 || es == 0 || w->dtype == KILN_DTYPE_STRING || w->dtype == KILN_DTYPE_BOOL)
        return false;
    memset(h, 0, sizeof *h);
    h->node = i;
    h->add = -1;
    h->mul = -1;
    h->scale = 1.0;
    h->bias = -1;
    h->w = n->in[1];
    h->dt = w->dtype;
    h->out = n->out[0];
    int bias = -1;
    if (kpass_is(n, "MatMul")) {
        if (n->n_in != 2)
            return false;
    } else if (kpass_is(n, "Gemm")) {
        if (kn_attr_int(n, "transA", 0) || kn_attr_float(n, "alpha", 1.0f) != 1.0f ||
            kpass_rank(p, n->in[0]) != 2)
            return false;
        h->trans = kn_attr_int(n, "transB", 0) != 0;
        if (n->n_in > 2 && n->in[2] >= 0) {
            if (kn_attr_float(n, "beta", 1.0f) != 1.0f || !kpass_is_const(net, n->in[2]))
                return false;
            bias = n->in[2];
        }
    } else if (kpass_is_kiln(n, "MatMul")) {
        if (kn_attr_string(n, "activation", "")[0] || (n->n_in > 3 && n->in[3] >= 0))
            return false;
        if (n->n_in > 2 && n->in[2] >= 0) {
            if (!kpass_is_const(net, n->in[2]))
                return false;
            bias = n->in[2];
        }
    } else {
        return false;
    }
    h->k = w->dims[h->trans ? 1 : 0];
    h->n = w->dims[h->trans ? 0 : 1];
    if (bias >= 0) {
        if (!bias_fits(p, bias, n->in[0], h->n, h->dt))
            return false;
        h->bias = bias;
        scaled(p, h);
        return true;
    }
    if (!kpass_is(n, "MatMul")) {
        scaled(p, h);
        return true;
    }
    /* a plain MatMul's bias is the Add that alone reads it */
    int a = kpass_sole_reader(p, h->out);
    if (a < 0 || !kpass_is(&net->nodes[a], "Add") || net->nodes[a].n_in != 2 ||
        net->nodes[a].n_out != 1) {
        scaled(p, h);
        return true;
    }
    const kn_node *an = &net->nodes[a];
    int other = an->in[0] == h->out ? an->in[1] : an->in[0];
    if (other == h->out || !kpass_is_const(net, other) || !bias_fits(p, other, n->in[0], h->n, h->dt)) {
        scaled(p, h);
        return true;
    }
    h->add = a;
    h->bias = other;
    h->out = an->out[0];
    scaled(p, h);
    return true;
}

/* Copy column block [c0, c0 + n) of a [K, total] matrix d from h's weight. */
static kiln_status put_weight(const kn_net *net, const hf_proj *h, char *d, int64_t total,
                              int64_t c0, size_t es) {
    void *tmp = NULL;
    const char *src = kn_tdata_aligned(&net->tensors[h->w].value, &tmp);
    if (!src)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int64_t r = 0; r < h->k; r++) {
        if (!h->trans) {
            memcpy(d + ((size_t)(r * total + c0)) * es, src + (size_t)(r * h->n) * es,
                   (size_t)h->n * es);
        } else {
            for (int64_t c = 0; c < h->n; c++)
                memcpy(d + ((size_t)(r * total + c0 + c)) * es, src + (size_t)(c * h->k + r) * es, es);
        }
    }
    kn_aligned_free(tmp);
    if (h->scale != 1.0) /* float only (scaled) */
        for (int64_t r = 0; r < h->k; r++)
            for (int64_t c = 0; c < h->n; c++)
                ((float *)d)[r * total + c0 + c] *= (float)h->scale;
    return KILN_OK;
}

static kiln_status fuse_group(kpass *p, const hf_proj *g, int ng) {
    kn_net *net = p->net;
    size_t es = kiln_dtype_size(g[0].dt);
    int64_t total = 0;
    bool any_bias = false;
    for (int j = 0; j < ng; j++) {
        total += g[j].n;
        any_bias |= g[j].bias >= 0;
    }
    int x = net->nodes[g[0].node].in[0];
    int64_t wd[2] = {g[0].k, total};
    kn_tdata wv;
    KN_TRY(kn_tdata_alloc(&wv, g[0].dt, 2, wd));
    int64_t c0 = 0;
    for (int j = 0; j < ng; j++) {
        kiln_status st = put_weight(net, &g[j], wv.data, total, c0, es);
        if (st != KILN_OK) {
            kn_tdata_free(&wv);
            return st;
        }
        c0 += g[j].n;
    }
    int w, bias = -1;
    KN_TRY(kpass_add_const(net, "hfuse_weight", &wv, &w));
    if (any_bias) {
        kn_tdata bv;
        KN_TRY(kn_tdata_alloc(&bv, g[0].dt, 1, &total));
        memset(bv.data, 0, bv.nbytes);
        c0 = 0;
        for (int j = 0; j < ng; j++) {
            if (g[j].bias >= 0) {
                void *tmp = NULL;
                const char *src = kn_tdata_aligned(&net->tensors[g[j].bias].value, &tmp);
                if (!src) {
                    kn_tdata_free(&bv);
                    return KILN_ERR_OUT_OF_MEMORY;
                }
                memcpy((char *)bv.data + (size_t)c0 * es, src, (size_t)g[j].n * es);
                kn_aligned_free(tmp);
                if (g[j].scale != 1.0)
                    for (int64_t c = 0; c < g[j].n; c++)
                        ((float *)bv.data)[c0 + c] *= (float)g[j].scale;
            }
            c0 += g[j].n;
        }
        KN_TRY(kpass_add_const(net, "hfuse_bias", &bv, &bias));
    }
    int64_t sizes[HF_MAX];
    int outs[HF_MAX];
    for (int j = 0; j < ng; j++) {
        sizes[j] = g[j].n;
        outs[j] = g[j].out;
    }
    int sz;
    KN_TRY(kpass_add_i64(net, "hfuse_split", sizes, ng, &sz));
    /* the name lists the layers it packs */
    char *name = kn_strdup(net->nodes[g[0].node].name);
    if (!name)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int j = 0; j < ng; j++) {
        kpass_kill(p, g[j].node);
        if (g[j].add >= 0)
            kpass_kill(p, g[j].add);
        if (g[j].mul >= 0)
            kpass_kill(p, g[j].mul);
    }
    int y, ni, in2[2] = {x, w};
    kiln_status st = kn_net_new_tensor(net, "hfuse", &y);
    if (st == KILN_OK)
        st = kn_net_add_node(net, name, "MatMul", "", 13, 2, in2, 1, &y, &ni);
    kn_free(name);
    KN_TRY(st);
    for (int j = 1; j < ng; j++)
        KN_TRY(kpass_join_name(&net->nodes[ni], net->nodes[g[j].node].name));
    char nm[256];
    if (bias >= 0) {
        int yb, ai, ia[2] = {y, bias};
        KN_TRY(kn_net_new_tensor(net, "hfuse_biased", &yb));
        KN_TRY(kn_net_add_node(net, "packed bias", "Add", "", 14, 2, ia, 1, &yb, &ai));
        kpass_touch(p, ai);
        y = yb;
    }
    kpass_touch(p, ni);
    int si, is[2] = {y, sz};
    snprintf(nm, sizeof nm, "%s split", net->nodes[ni].name);
    KN_TRY(kn_net_add_node(net, nm, "Split", "", 13, 2, is, ng, outs, &si));
    KN_TRY(kn_node_set_int(&net->nodes[si], "axis", -1));
    kpass_touch(p, si);
    kn_log(KILN_LOG_VERBOSE, "hfuse: one GEMM [%lld, %lld] for %d layers reading '%s' ('%s')",
           (long long)g[0].k, (long long)total, ng, net->tensors[x].name, net->nodes[ni].name);
    return KILN_OK;
}

static bool any_linear(const kn_node *n) {
    return kpass_is(n, "MatMul") || kpass_is(n, "Gemm") || kpass_is_kiln(n, "MatMul");
}

kiln_status kpass_hfuse(kpass *p, int *changed) {
    kn_net *net = p->net;
    if (!kpass_any(p, any_linear))
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p)); /* ranks, for the bias checks; unknown ones refuse */
    for (int i = 0; i < p->n_nodes; i++) {
        hf_proj g[HF_MAX];
        if (!as_proj(p, i, &g[0]))
            continue;
        int x = net->nodes[i].in[0];
        if (x >= p->n_tensors || kpass_is_const(net, x))
            continue;
        int ng = 1;
        for (int r = p->rd_start[x]; r < p->rd_start[x + 1] && ng < HF_MAX; r++) {
            int m = p->rd_node[r];
            bool seen = false;
            for (int j = 0; j < ng; j++)
                seen |= g[j].node == m;
            if (seen || m == i || net->nodes[m].in[0] != x || !as_proj(p, m, &g[ng]))
                continue;
            /* same contraction and type; bias Adds of distinct nodes */
            if (g[ng].k != g[0].k || g[ng].dt != g[0].dt)
                continue;
            ng++;
        }
        if (ng < 2)
            continue;
        /* node order keeps the parts in the graph's order */
        for (int a = 1; a < ng; a++)
            for (int b = a; b > 0 && g[b].node < g[b - 1].node; b--) {
                hf_proj t = g[b];
                g[b] = g[b - 1];
                g[b - 1] = t;
            }
        KN_TRY(fuse_group(p, g, ng));
        (*changed)++;
    }
    return KILN_OK;
}
