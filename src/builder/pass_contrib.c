/* pass_contrib.c - the com.microsoft ops of ONNX Runtime's transformer
 * optimizer as ONNX ops, which kiln's own passes then fuse as they fuse
 * the exporters' graphs:
 *   Gelu -> Gelu; FastGelu(X, bias?) -> Add + Gelu(tanh);
 *   BiasGelu(A, B) -> Add + Gelu; QuickGelu(alpha) -> Swish(alpha);
 *   SimplifiedLayerNormalization -> RMSNormalization;
 *   SkipLayerNormalization(X, skip, gamma, beta?, bias?) -> Add(s) +
 *     LayerNormalization (the layernorm pass joins them: kiln::LayerNorm);
 *   SkipSimplifiedLayerNormalization(X, skip, gamma, bias?) -> Add(s) +
 *     RMSNormalization.
 * The sum output (input_skip_bias_sum) stays available; a norm whose mean
 * or inverse deviation is read is left as it is (and refused for want of a
 * kernel). com.microsoft RotaryEmbedding has kernels of its own. */
#include <stdio.h>
#include <string.h>

#include "graph/rotary.h"
#include "passes.h"

static bool is_ms(const kn_node *n, const char *op) {
    return strcmp(n->domain, KN_MS_DOMAIN) == 0 && strcmp(n->op_type, op) == 0;
}

static bool any_contrib(const kn_node *n) {
    return strcmp(n->domain, KN_MS_DOMAIN) == 0 || kpass_is(n, "SimplifiedLayerNormalization");
}

/* Input slot k of the node, or -1 when absent. */
static int in_at(const kn_node *n, int k) { return k < n->n_in ? n->in[k] : -1; }

/* Whether output slot k is read (or a graph output). */
static bool out_used(const kpass *p, const kn_node *n, int k) {
    return k < n->n_out && n->out[k] >= 0 && n->out[k] < p->n_tensors && p->uses[n->out[k]] > 0;
}

/* Append node `op` (default domain) named "<base> (<op>)"; its index in *ni. */
static kiln_status add(kn_net *net, const char *base, const char *op, int opset, int n_in,
                       const int *in, int out, int *ni) {
    char name[512];
    snprintf(name, sizeof name, "%s (%s)", base, op);
    int outs[1] = {out};
    return kn_net_add_node(net, name, op, "", opset, n_in, in, 1, outs, ni);
}

/* a + b into `out` (a new tensor when out < 0); the sum's tensor in *sum. */
static kiln_status add_sum(kn_net *net, const char *base, int a, int b, int out, int *sum) {
    if (out < 0)
        KN_TRY(kn_net_new_tensor(net, "contrib sum", &out));
    int in[2] = {a, b}, ni;
    KN_TRY(add(net, base, "Add", 14, 2, in, out, &ni));
    *sum = out;
    return KILN_OK;
}

static kiln_status lower(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    *done = false;
    char base[400];
    snprintf(base, sizeof base, "%s", n->name);
    int x = in_at(n, 0), y = n->n_out > 0 ? n->out[0] : -1, ni;
    if (x < 0 || y < 0)
        return KILN_OK;
    if (is_ms(n, "Gelu") || is_ms(n, "QuickGelu")) {
        bool quick = is_ms(n, "QuickGelu");
        float alpha = kn_attr_float(n, "alpha", 1.702f);
        kpass_kill(p, i);
        KN_TRY(add(net, base, quick ? "Swish" : "Gelu", quick ? 24 : 20, 1, &x, y, &ni));
        if (quick)
            KN_TRY(kn_node_set_float(&net->nodes[ni], "alpha", alpha));
    } else if (is_ms(n, "FastGelu") || is_ms(n, "BiasGelu")) {
        bool fast = is_ms(n, "FastGelu");
        int bias = in_at(n, 1), t = x;
        if (!fast && bias < 0)
            return KILN_OK;
        kpass_kill(p, i);
        if (bias >= 0)
            KN_TRY(add_sum(net, base, x, bias, -1, &t));
        KN_TRY(add(net, base, "Gelu", 20, 1, &t, y, &ni));
        KN_TRY(kn_node_set_string(&net->nodes[ni], "approximate", fast ? "tanh" : "none"));
    } else if (kpass_is(n, "SimplifiedLayerNormalization") ||
               is_ms(n, "SimplifiedLayerNormalization")) {
        if (out_used(p, n, 1) || in_at(n, 1) < 0)
            return KILN_OK;
        int in[2] = {x, n->in[1]};
        int64_t axis = kn_attr_int(n, "axis", -1);
        float eps = kn_attr_float(n, "epsilon", 1e-5f);
        kpass_kill(p, i);
        KN_TRY(add(net, base, "RMSNormalization", 23, 2, in, y, &ni));
        KN_TRY(kn_node_set_int(&net->nodes[ni], "axis", axis));
        KN_TRY(kn_node_set_float(&net->nodes[ni], "epsilon", eps));
    } else if (is_ms(n, "SkipLayerNormalization") || is_ms(n, "SkipSimplifiedLayerNormalization")) {
        bool rms = is_ms(n, "SkipSimplifiedLayerNormalization");
        int skip = in_at(n, 1), gamma = in_at(n, 2);
        int beta = rms ? -1 : in_at(n, 3), bias = in_at(n, rms ? 3 : 4);
        if (skip < 0 || gamma < 0 || out_used(p, n, 1) || out_used(p, n, 2))
            return KILN_OK;
        int sum_out = out_used(p, n, 3) ? n->out[3] : -1;
        float eps = kn_attr_float(n, "epsilon", 1e-12f);
        kpass_kill(p, i);
        int s;
        KN_TRY(add_sum(net, base, x, skip, bias >= 0 ? -1 : sum_out, &s));
        if (bias >= 0)
            KN_TRY(add_sum(net, base, s, bias, sum_out, &s));
        int in[3] = {s, gamma, beta};
        KN_TRY(add(net, base, rms ? "RMSNormalization" : "LayerNormalization", rms ? 23 : 17,
                   rms ? 2 : 3, in, y, &ni));
        KN_TRY(kn_node_set_int(&net->nodes[ni], "axis", -1));
        KN_TRY(kn_node_set_float(&net->nodes[ni], "epsilon", eps));
    } else {
        return KILN_OK;
    }
    kn_log(KILN_LOG_VERBOSE, "contrib: '%s' -> ONNX ops", base);
    *done = true;
    return KILN_OK;
}

kiln_status kpass_contrib(kpass *p, int *changed) {
    if (!kpass_any(p, any_contrib))
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i) || !any_contrib(&p->net->nodes[i]))
            continue;
        bool done;
        KN_TRY(lower(p, i, &done));
        if (done)
            (*changed)++;
    }
    return KILN_OK;
}
