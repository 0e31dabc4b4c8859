/* test_blocks.c - the transformer-block passes: decomposed LayerNorm and
 * RMSNorm in the spellings exporters write, QuickGELU, RotaryEmbedding in
 * both domains. Each test builds a small network, optimizes a copy, checks
 * the fused op and that both give the same outputs through the executor. */
#include <string.h>

#include "builder/builder.h"
#include "builder/passes.h"
#include "graph/fused.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "test.h"
#include "kt_exec.h"

#include "kt_passes.h"

/* ---------------- the tests ---------------- */

/* A node of an explicit opset (ReduceMean takes axes as an attribute before 18). */
static int node_v(kiln_network *net, const char *name, const char *op, const char *domain,
                  int opset, int n_in, const char *const *in, const char *out) {
    int idx = -1;
    const char *outs[1] = {out};
    KT_OK(kiln_network_add_node(net, name, op, domain, opset, n_in, in, 1, outs, &idx));
    return idx;
}

/* ReduceMean over the last axis: attribute (opset 13) or input (opset 18). */
static void mean_last(kiln_network *net, const char *name, const char *x, const char *y,
                      bool axes_input) {
    if (axes_input) {
        char ax[64];
        snprintf(ax, sizeof ax, "%s_axes", name);
        iconst(net, ax, 1, DIMS(1), DIMS(-1));
        node_v(net, name, "ReduceMean", "", 18, 2, IN(x, ax), y);
    } else {
        int i = node_v(net, name, "ReduceMean", "", 13, 1, IN(x), y);
        KT_OK(kiln_network_set_attr_ints(net, i, "axes", DIMS(-1), 1));
    }
}

/* The forms of 1 / sqrt(v + eps) applied to t. */
enum { INV_DIV_ONE, INV_RECIPROCAL, INV_DIV_X, INV_POW };

static void inv_root(kiln_network *net, const char *p, const char *v, const char *t,
                     const char *y, int form) {
    char n[6][48];
    for (int i = 0; i < 6; i++)
        snprintf(n[i], sizeof n[i], "%s_r%d", p, i);
    fscalar(net, n[0], 1e-6f);
    node(net, n[1], "Add", 2, IN(v, n[0]), n[1]);
    if (form == INV_POW) {
        fscalar(net, n[2], -0.5f);
        node(net, n[3], "Pow", 2, IN(n[1], n[2]), n[3]);
        node(net, y, "Mul", 2, IN(t, n[3]), y);
        return;
    }
    node(net, n[2], "Sqrt", 1, IN(n[1]), n[2]);
    if (form == INV_DIV_X) {
        node(net, y, "Div", 2, IN(t, n[2]), y);
        return;
    }
    if (form == INV_RECIPROCAL) {
        node(net, n[3], "Reciprocal", 1, IN(n[2]), n[3]);
    } else {
        fscalar(net, n[4], 1.f);
        node(net, n[3], "Div", 2, IN(n[4], n[2]), n[3]);
    }
    node(net, y, "Mul", 2, IN(n[3], t), y);
}

/* RMSNorm as Llama / T5 export it (torchscript: axes attribute, Div(1, .);
 * dynamo: axes input, Reciprocal), with and without the weight, and the
 * other spellings of the inverse root. */
static void test_rmsnorm(void) {
    for (int form = 0; form < 4; form++)
        for (int weight = 0; weight < 2; weight++) {
            kiln_network *net;
            KT_OK(kiln_network_create(&net));
            KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, 5, 16), NULL));
            fscalar(net, "two", 2.f);
            node(net, "pow", "Pow", 2, IN("x", "two"), "sq");
            mean_last(net, "mean", "sq", "ms", form % 2 == 1);
            inv_root(net, "rms", "ms", "x", weight ? "xn" : "y", form);
            if (weight) {
                fconst(net, "w", 1, DIMS(16), 0.5f, 1.f);
                node(net, "scale", "Mul", 2, IN("w", "xn"), "y");
            }
            KT_OK(kiln_network_mark_output(net, "y"));
            kn_net *o = optimized(net, 0, 1, 2, 4);
            if (o) {
                CHECK_OR_DUMP(o->n_nodes == 1 && count_op(o, "", "RMSNormalization") == 1, o);
                const kn_node *r = find_op(o, "", "RMSNormalization");
                if (r) {
                    KT_CHECK(fabsf(kn_attr_float(r, "epsilon", 0.f) - 1e-6f) < 1e-9f);
                    KT_CHECK(r->n_in >= 2 && (!weight || strcmp(o->tensors[r->in[1]].name, "w") == 0));
                }
                char what[64];
                snprintf(what, sizeof what, "rmsnorm form %d weight %d", form, weight);
                compare(net, o, what, 3);
                kn_net_free(o);
            }
            kiln_network_destroy(net);
        }
}

/* An RMSNorm whose mean of squares is also read elsewhere, or over another
 * axis, stays as it is. */
static void test_rmsnorm_not(void) {
    for (int c = 0; c < 2; c++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(2, 5, 16), NULL));
        fscalar(net, "two", 2.f);
        node(net, "pow", "Pow", 2, IN("x", "two"), "sq");
        if (c == 0) {
            mean_last(net, "mean", "sq", "ms", false);
            KT_OK(kiln_network_mark_output(net, "ms"));
        } else {
            int i = node_v(net, "mean", "ReduceMean", "", 13, 1, IN("sq"), "ms");
            KT_OK(kiln_network_set_attr_ints(net, i, "axes", DIMS(1), 1));
        }
        inv_root(net, "rms", "ms", "x", "y", INV_RECIPROCAL);
        KT_OK(kiln_network_mark_output(net, "y"));
        kn_net *o = optimized(net, 0, 1, 1, 1);
        if (o) {
            CHECK_OR_DUMP(count_op(o, "", "RMSNormalization") == 0, o);
            compare(net, o, c ? "rmsnorm over axis 1" : "rmsnorm mean read twice", 1);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* LayerNorm spelled out: mean, Sub, Pow(2) or d * d, mean, Add eps, the
 * inverse root in each form, then gamma and beta (or neither). */
static void test_layernorm_decomposed(void) {
    for (int form = 0; form < 4; form++)
        for (int affine = 0; affine < 2; affine++) {
            kiln_network *net;
            KT_OK(kiln_network_create(&net));
            KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, 3, 24), NULL));
            mean_last(net, "mean", "x", "mu", form >= 2);
            node(net, "sub", "Sub", 2, IN("x", "mu"), "d");
            if (form % 2 == 0) {
                fscalar(net, "two", 2.f);
                node(net, "sq", "Pow", 2, IN("d", "two"), "d2");
            } else {
                node(net, "sq", "Mul", 2, IN("d", "d"), "d2");
            }
            mean_last(net, "var", "d2", "v", form >= 2);
            inv_root(net, "ln", "v", "d", affine ? "xn" : "y", form);
            if (affine) {
                fconst(net, "gamma", 1, DIMS(24), 0.5f, 1.f);
                fconst(net, "beta", 1, DIMS(24), -0.5f, 1.f);
                node(net, "mul_g", "Mul", 2, IN("xn", "gamma"), "xg");
                node(net, "add_b", "Add", 2, IN("beta", "xg"), "y");
            }
            KT_OK(kiln_network_mark_output(net, "y"));
            kn_net *o = optimized(net, 0, 1, 2, 4);
            if (o) {
                CHECK_OR_DUMP(o->n_nodes == 1 && count_op(o, "", "LayerNormalization") +
                                                         count_op(o, KN_DOMAIN_KILN, "LayerNorm") ==
                                                     1,
                              o);
                char what[64];
                snprintf(what, sizeof what, "layernorm form %d affine %d", form, affine);
                compare(net, o, what, 3);
                kn_net_free(o);
            }
            kiln_network_destroy(net);
        }
}

/* A decomposed LayerNorm after a residual Add becomes one kiln::LayerNorm
 * with the sum inside. */
static void test_layernorm_decomposed_residual(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(2, 3, 24), NULL));
    KT_OK(kiln_network_add_input(net, "r", KILN_DTYPE_FLOAT, 3, DIMS(2, 3, 24), NULL));
    node(net, "res", "Add", 2, IN("x", "r"), "s");
    mean_last(net, "mean", "s", "mu", true);
    node(net, "sub", "Sub", 2, IN("s", "mu"), "d");
    fscalar(net, "two", 2.f);
    node(net, "sq", "Pow", 2, IN("d", "two"), "d2");
    mean_last(net, "var", "d2", "v", true);
    inv_root(net, "ln", "v", "d", "xn", INV_DIV_X);
    fconst(net, "gamma", 1, DIMS(24), 0.5f, 1.f);
    fconst(net, "beta", 1, DIMS(24), -0.5f, 1.f);
    node(net, "mul_g", "Mul", 2, IN("xn", "gamma"), "xg");
    node(net, "add_b", "Add", 2, IN("xg", "beta"), "y");
    KT_OK(kiln_network_mark_output(net, "y"));
    kn_net *o = optimized(net, 0, 1, 1, 1);
    if (o) {
        CHECK_OR_DUMP(o->n_nodes == 1 && count_op(o, KN_DOMAIN_KILN, "LayerNorm") == 1, o);
        compare(net, o, "residual + decomposed layernorm", 1);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* QuickGELU x * Sigmoid(1.702 x): after MatMul + bias it is the GEMM's
 * Swish epilogue; alone it is one Swish node. */
static void test_quick_gelu(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(2, 3, 8), NULL));
    fconst(net, "W", 2, DIMS(8, 6), -0.5f, 1.f);
    fconst(net, "bias", 1, DIMS(6), -0.5f, 1.f);
    fscalar(net, "c", 1.702f);
    fscalar(net, "c2", 1.702f);
    node(net, "mm", "MatMul", 2, IN("x", "W"), "h0");
    node(net, "bias_add", "Add", 2, IN("h0", "bias"), "h");
    node(net, "mul_c", "Mul", 2, IN("h", "c"), "hc");
    node(net, "sig", "Sigmoid", 1, IN("hc"), "hs");
    node(net, "gate", "Mul", 2, IN("h", "hs"), "y");
    node(net, "mul_c2", "Mul", 2, IN("c2", "x"), "xc");
    node(net, "sig2", "Sigmoid", 1, IN("xc"), "xs");
    node(net, "gate2", "Mul", 2, IN("xs", "x"), "y2");
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_network_mark_output(net, "y2"));
    kn_net *o = optimized(net, 0, 1, 1, 1);
    if (o) {
        CHECK_OR_DUMP(o->n_nodes == 2 && count_op(o, KN_DOMAIN_KILN, "MatMul") == 1 &&
                          count_op(o, "", "Swish") == 1,
                      o);
        const kn_node *m = find_op(o, KN_DOMAIN_KILN, "MatMul");
        if (m) {
            KT_CHECK(strcmp(kn_attr_string(m, "activation", ""), "Swish") == 0);
            KT_CHECK(fabsf(kn_attr_float(m, "alpha", 0.f) - 1.702f) < 1e-6f);
        }
        compare(net, o, "quick gelu", 1);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* com.microsoft RotaryEmbedding with one position offset equals the ONNX
 * op with explicit position ids (offset + s), in both layouts. */
static void test_rotary_domains(void) {
    for (int layout = 0; layout < 2; layout++) {
        kn_net *nets[2];
        for (int ms = 0; ms < 2; ms++) {
            rng_state = 777u; /* the same caches in both networks */
            kiln_network *net;
            KT_OK(kiln_network_create(&net));
            KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, layout ? 4 : 3,
                                         layout ? DIMS(2, 3, 5, 8) : DIMS(2, 5, 24), NULL));
            fconst(net, "cos", 2, DIMS(12, 4), -1.f, 2.f);
            fconst(net, "sin", 2, DIMS(12, 4), -1.f, 2.f);
            int i;
            if (ms) {
                iconst(net, "pos", 1, DIMS(1), DIMS(4));
                i = node_v(net, "rope", "RotaryEmbedding", "com.microsoft", 1, 4,
                           IN("x", "pos", "cos", "sin"), "y");
            } else {
                iconst(net, "pos", 2, DIMS(2, 5), DIMS(4, 5, 6, 7, 8, 4, 5, 6, 7, 8));
                i = node_v(net, "rope", "RotaryEmbedding", "", 23, 4, IN("x", "cos", "sin", "pos"),
                           "y");
            }
            if (!layout)
                KT_OK(kiln_network_set_attr_int(net, i, "num_heads", 3));
            KT_OK(kiln_network_set_attr_int(net, i, "interleaved", layout));
            KT_OK(kiln_network_mark_output(net, "y"));
            nets[ms] = net;
        }
        kn_net *o = optimized(nets[1], 0, 1, 1, 1);
        if (o) {
            CHECK_OR_DUMP(count_op(o, "com.microsoft", "RotaryEmbedding") == 1, o);
            compare(nets[0], o, layout ? "rotary [B,H,S,D] interleaved" : "rotary [B,S,H*D]", 1);
            kn_net_free(o);
        }
        kiln_network_destroy(nets[0]);
        kiln_network_destroy(nets[1]);
    }
}

/* The com.microsoft ops against their ONNX spelling. */
enum { MS_SKIP_LN, MS_SKIP_LN_SUM, MS_SKIP_RMS, MS_SIMPLIFIED, MS_FAST_GELU, MS_BIAS_GELU, MS_GELU,
       MS_QUICK_GELU, MS_COUNT };

static kiln_network *contrib_net(int which, bool ms) {
    rng_state = 4242u; /* the same constants in both networks */
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(2, 3, 16), NULL));
    KT_OK(kiln_network_add_input(net, "skip", KILN_DTYPE_FLOAT, 3, DIMS(2, 3, 16), NULL));
    fconst(net, "gamma", 1, DIMS(16), 0.5f, 1.f);
    fconst(net, "beta", 1, DIMS(16), -0.5f, 1.f);
    fconst(net, "bias", 1, DIMS(16), -0.5f, 1.f);
    fconst(net, "W", 2, DIMS(16, 16), -0.3f, 0.6f);
    node(net, "mm", "MatMul", 2, IN("skip", "W"), "h");
    const char *y = "y";
    int i = -1;
    switch (which) {
    case MS_SKIP_LN:
    case MS_SKIP_LN_SUM:
        if (ms) {
            const char *outs[4] = {"y", "", "", which == MS_SKIP_LN_SUM ? "sum" : ""};
            KT_OK(kiln_network_add_node(net, "sln", "SkipLayerNormalization", "com.microsoft", 1, 5,
                                        IN("x", "h", "gamma", "beta", "bias"), 4, outs, &i));
        } else {
            node(net, "a1", "Add", 2, IN("x", "h"), "s1");
            node(net, "a2", "Add", 2, IN("s1", "bias"), "sum");
            i = node(net, "ln", "LayerNormalization", 3, IN("sum", "gamma", "beta"), "y");
        }
        KT_OK(kiln_network_set_attr_float(net, i, "epsilon", 1e-5f));
        break;
    case MS_SKIP_RMS:
        if (ms) {
            const char *outs[1] = {"y"};
            KT_OK(kiln_network_add_node(net, "ssln", "SkipSimplifiedLayerNormalization",
                                        "com.microsoft", 1, 3, IN("x", "h", "gamma"), 1, outs, &i));
        } else {
            node(net, "a1", "Add", 2, IN("x", "h"), "s1");
            i = node_v(net, "rms", "RMSNormalization", "", 23, 2, IN("s1", "gamma"), "y");
        }
        KT_OK(kiln_network_set_attr_float(net, i, "epsilon", 1e-6f));
        break;
    case MS_SIMPLIFIED:
        i = ms ? node_v(net, "sln", "SimplifiedLayerNormalization", "", 1, 2, IN("h", "gamma"), "y")
               : node_v(net, "rms", "RMSNormalization", "", 23, 2, IN("h", "gamma"), "y");
        KT_OK(kiln_network_set_attr_float(net, i, "epsilon", 1e-6f));
        break;
    case MS_FAST_GELU:
    case MS_BIAS_GELU:
        if (ms) {
            node_v(net, "g", which == MS_FAST_GELU ? "FastGelu" : "BiasGelu", "com.microsoft", 1, 2,
                   IN("h", "bias"), "y");
        } else {
            node(net, "a", "Add", 2, IN("h", "bias"), "hb");
            i = node(net, "g", "Gelu", 1, IN("hb"), "y");
            KT_OK(kiln_network_set_attr_string(net, i, "approximate",
                                               which == MS_FAST_GELU ? "tanh" : "none"));
        }
        break;
    case MS_GELU:
        node_v(net, "g", "Gelu", ms ? "com.microsoft" : "", ms ? 1 : 20, 1, IN("h"), "y");
        break;
    case MS_QUICK_GELU:
        if (ms) {
            node_v(net, "g", "QuickGelu", "com.microsoft", 1, 1, IN("h"), "y");
        } else {
            fscalar(net, "c", 1.702f);
            node(net, "m1", "Mul", 2, IN("h", "c"), "hc");
            node(net, "sg", "Sigmoid", 1, IN("hc"), "hs");
            node(net, "m2", "Mul", 2, IN("h", "hs"), "y");
        }
        break;
    }
    KT_OK(kiln_network_mark_output(net, y));
    if (which == MS_SKIP_LN_SUM)
        KT_OK(kiln_network_mark_output(net, "sum"));
    return net;
}

static void test_contrib(void) {
    static const char *const names[MS_COUNT] = {
        "SkipLayerNormalization", "SkipLayerNormalization + sum", "SkipSimplifiedLayerNormalization",
        "SimplifiedLayerNormalization", "FastGelu", "BiasGelu", "com.microsoft Gelu", "QuickGelu"};
    for (int w = 0; w < MS_COUNT; w++) {
        kiln_network *ref = contrib_net(w, false), *ms = contrib_net(w, true);
        kn_net *o = optimized(ms, 0, 1, 1, 1);
        if (o) {
            int left = count_op(o, "com.microsoft", "SkipLayerNormalization") +
                       count_op(o, "", "SimplifiedLayerNormalization");
            for (int k = 0; k < o->n_nodes; k++)
                left += strcmp(o->nodes[k].domain, "com.microsoft") == 0;
            CHECK_OR_DUMP(left == 0, o);
            if (w == MS_SKIP_LN) /* the sums join the norm */
                CHECK_OR_DUMP(count_op(o, KN_DOMAIN_KILN, "LayerNorm") == 1, o);
            if (w == MS_SKIP_RMS || w == MS_SIMPLIFIED)
                CHECK_OR_DUMP(count_op(o, "", "RMSNormalization") == 1, o);
            if (w >= MS_FAST_GELU) { /* the activation is the GEMM's epilogue */
                const kn_node *m = find_op(o, KN_DOMAIN_KILN, "MatMul");
                CHECK_OR_DUMP(o->n_nodes == 1 && m && kn_attr_string(m, "activation", "")[0], o);
            }
            compare(ref, o, names[w], 1);
            kn_net_free(o);
        }
        kiln_network_destroy(ref);
        kiln_network_destroy(ms);
    }
}

static int gemm_count(const kn_net *o) {
    return count_op(o, "", "MatMul") + count_op(o, KN_DOMAIN_KILN, "MatMul") +
           count_op(o, "", "Gemm") + count_op(o, KN_DOMAIN_KILN, "Gemm");
}

/* Horizontal fusion: linear layers of one input with constant weights are
 * one GEMM. Case 0: Q [16, 16] + bias then scaled by a constant, K [16, 8]
 * without bias, V [16, 8] + bias (grouped-query widths, Whisper's bias-less
 * K), each output read by a different op; case 1: a gated MLP, silu(x Wg) * (x Wu); case 2: Gemm
 * with transB beside a MatMul on a 2-D input; case 3: a weight that is an
 * input (an attention product) stays a layer of its own. */
static void test_hfuse(void) {
    for (int c = 0; c < 4; c++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        bool two_d = c == 2;
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, two_d ? 2 : 3,
                                     two_d ? DIMS(-1, 16) : DIMS(-1, 5, 16), NULL));
        int want = 1;
        if (c == 0) {
            fconst(net, "wq", 2, DIMS(16, 16), -0.5f, 1.f);
            fconst(net, "wk", 2, DIMS(16, 8), -0.5f, 1.f);
            fconst(net, "wv", 2, DIMS(16, 8), -0.5f, 1.f);
            fconst(net, "bq", 1, DIMS(16), -0.5f, 1.f);
            fconst(net, "bv", 1, DIMS(16 / 2), -0.5f, 1.f);
            node(net, "q", "MatMul", 2, IN("x", "wq"), "q0");
            node(net, "qb", "Add", 2, IN("q0", "bq"), "q1");
            fscalar(net, "qscale", 0.35f); /* the query's scaling folds into its weights */
            node(net, "qs", "Mul", 2, IN("q1", "qscale"), "q");
            node(net, "k", "MatMul", 2, IN("x", "wk"), "k");
            node(net, "v", "MatMul", 2, IN("x", "wv"), "v0");
            node(net, "vb", "Add", 2, IN("bv", "v0"), "v");
            node(net, "qr", "Relu", 1, IN("q"), "qo");
            node(net, "kt", "Tanh", 1, IN("k"), "ko");
            KT_OK(kiln_network_mark_output(net, "qo"));
            KT_OK(kiln_network_mark_output(net, "ko"));
            KT_OK(kiln_network_mark_output(net, "v"));
        } else if (c == 1) {
            fconst(net, "wg", 2, DIMS(16, 24), -0.5f, 1.f);
            fconst(net, "wu", 2, DIMS(16, 24), -0.5f, 1.f);
            node(net, "gate", "MatMul", 2, IN("x", "wg"), "g");
            node(net, "up", "MatMul", 2, IN("x", "wu"), "u");
            node(net, "sig", "Sigmoid", 1, IN("g"), "sg");
            node(net, "silu", "Mul", 2, IN("g", "sg"), "a");
            node(net, "glu", "Mul", 2, IN("a", "u"), "y");
            KT_OK(kiln_network_mark_output(net, "y"));
        } else if (c == 2) {
            fconst(net, "wa", 2, DIMS(12, 16), -0.5f, 1.f); /* [N, K]: transB */
            fconst(net, "ca", 1, DIMS(12), -0.5f, 1.f);
            fconst(net, "wb", 2, DIMS(16, 4), -0.5f, 1.f);
            int g = node(net, "ga", "Gemm", 3, IN("x", "wa", "ca"), "ya");
            KT_OK(kiln_network_set_attr_int(net, g, "transB", 1));
            node(net, "mb", "MatMul", 2, IN("x", "wb"), "yb");
            KT_OK(kiln_network_mark_output(net, "ya"));
            KT_OK(kiln_network_mark_output(net, "yb"));
        } else {
            KT_OK(kiln_network_add_input(net, "w", KILN_DTYPE_FLOAT, 2, DIMS(16, 8), NULL));
            fconst(net, "wc", 2, DIMS(16, 8), -0.5f, 1.f);
            node(net, "m1", "MatMul", 2, IN("x", "w"), "y1");
            node(net, "m2", "MatMul", 2, IN("x", "wc"), "y2");
            KT_OK(kiln_network_mark_output(net, "y1"));
            KT_OK(kiln_network_mark_output(net, "y2"));
            want = 2;
        }
        kn_net *o = optimized(net, 0, 1, 2, 4);
        if (o) {
            CHECK_OR_DUMP(gemm_count(o) == want, o);
            /* case 1's chain reads the gate/up halves as column views: no
             * Split left (chain-views) */
            CHECK_OR_DUMP(count_op(o, "", "Split") == (want == 1 && c != 1 ? 1 : 0), o);
            if (c == 0)
                CHECK_OR_DUMP(count_op(o, "", "Mul") == 0, o);
            char what[64];
            snprintf(what, sizeof what, "hfuse case %d", c);
            compare(net, o, what, 3);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* Rotary embeddings spelled out as transformers writes them:
 * q * cos + rotate_half(q) * sin with rotate_half = Concat(-x2, x1) on
 * x [B, H, S, D], cos = Unsqueeze(Cos(Concat(f, f)), 1). Case 0: Slices
 * and Neg, per-batch angles f (an input); case 1: one Split, Mul by -1,
 * operands swapped, constant angles (folded to a constant cos/sin with
 * equal halves) times a scaling; case 2: cos an input (its halves may
 * differ): not fused; case 3: the halves swapped (not rotate_half): not
 * fused; case 4: on heads transposed from [B, S, H, D] and back, the op
 * rotates the [B, S, H * D] rows and both Transposes go. */
static void test_rotary_decomposed(void) {
    for (int c = 0; c < 5; c++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        if (c == 4) { /* heads split [B, S, H, D], transposed to heads-first and back */
            KT_OK(kiln_network_add_input(net, "t", KILN_DTYPE_FLOAT, 4, DIMS(-1, 5, 3, 8), NULL));
            KT_OK(kiln_network_set_attr_ints(net, node(net, "to_hf", "Transpose", 1, IN("t"), "x"),
                                             "perm", DIMS(0, 2, 1, 3), 4));
        } else {
            KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(-1, 3, 5, 8), NULL));
        }
        if (c == 0 || c == 3 || c == 4) {
            KT_OK(kiln_network_add_input(net, "f", KILN_DTYPE_FLOAT, 3, DIMS(-1, 5, 4), NULL));
        } else if (c == 1) {
            fconst(net, "f", 3, DIMS(1, 5, 4), -3.f, 6.f);
        }
        iconst(net, "ax1", 1, DIMS(1), DIMS(1));
        if (c == 2) {
            KT_OK(kiln_network_add_input(net, "cosu", KILN_DTYPE_FLOAT, 4, DIMS(-1, 1, 5, 8), NULL));
            KT_OK(kiln_network_add_input(net, "sinu", KILN_DTYPE_FLOAT, 4, DIMS(-1, 1, 5, 8), NULL));
        } else {
            int cc = node(net, "cat", "Concat", 2, IN("f", "f"), "emb");
            KT_OK(kiln_network_set_attr_int(net, cc, "axis", -1));
            node(net, "cos", "Cos", 1, IN("emb"), "cos0");
            node(net, "sin", "Sin", 1, IN("emb"), "sin0");
            if (c == 1) {
                fscalar(net, "scaling", 1.25f);
                node(net, "cs", "Mul", 2, IN("scaling", "cos0"), "cos1");
                node(net, "ss", "Mul", 2, IN("sin0", "scaling"), "sin1");
            }
            node(net, "cu", "Unsqueeze", 2, IN(c == 1 ? "cos1" : "cos0", "ax1"), "cosu");
            node(net, "su", "Unsqueeze", 2, IN(c == 1 ? "sin1" : "sin0", "ax1"), "sinu");
        }
        if (c == 1) {
            iconst(net, "halves", 1, DIMS(2), DIMS(4, 4));
            const char *outs[2] = {"x1", "x2"};
            int sp = -1;
            KT_OK(kiln_network_add_node(net, "split", "Split", "", 18, 2, IN("x", "halves"), 2, outs,
                                        &sp));
            KT_OK(kiln_network_set_attr_int(net, sp, "axis", 3));
            fscalar(net, "m1", -1.f);
            node(net, "neg", "Mul", 2, IN("m1", "x2"), "nx2");
        } else {
            iconst(net, "s0", 1, DIMS(1), DIMS(0));
            iconst(net, "s4", 1, DIMS(1), DIMS(4));
            iconst(net, "big", 1, DIMS(1), DIMS(INT64_MAX));
            iconst(net, "axl", 1, DIMS(1), DIMS(-1));
            node(net, "sl1", "Slice", 4, IN("x", "s0", "s4", "axl"), "x1");
            node(net, "sl2", "Slice", 4, IN("x", "s4", "big", "axl"), "x2");
            node(net, "neg", "Neg", 1, IN(c == 3 ? "x1" : "x2"), "nx2");
        }
        int rc = node(net, "rot", "Concat", 2, IN("nx2", c == 3 ? "x2" : "x1"), "rh");
        KT_OK(kiln_network_set_attr_int(net, rc, "axis", -1));
        if (c == 1) {
            node(net, "mc", "Mul", 2, IN("cosu", "x"), "xc");
            node(net, "ms", "Mul", 2, IN("sinu", "rh"), "xs");
            node(net, "add", "Add", 2, IN("xs", "xc"), "y");
        } else {
            node(net, "mc", "Mul", 2, IN("x", "cosu"), "xc");
            node(net, "ms", "Mul", 2, IN("rh", "sinu"), "xs");
            node(net, "add", "Add", 2, IN("xc", "xs"), c == 4 ? "yh" : "y");
        }
        if (c == 4)
            KT_OK(kiln_network_set_attr_ints(net, node(net, "to_bshd", "Transpose", 1, IN("yh"), "y"),
                                             "perm", DIMS(0, 2, 1, 3), 4));
        KT_OK(kiln_network_mark_output(net, "y"));
        kn_net *o = optimized(net, 0, 1, 2, 3);
        if (o) {
            bool fused = c < 2 || c == 4;
            CHECK_OR_DUMP(count_op(o, "", "RotaryEmbedding") == (fused ? 1 : 0), o);
            if (fused)
                CHECK_OR_DUMP(count_op(o, "", "Neg") + count_op(o, "", "Mul") +
                                  count_op(o, "", "Slice") + count_op(o, "", "Split") == 0, o);
            if (c == 4) /* rotated as [B, S, H * D] rows: no Transpose left */
                CHECK_OR_DUMP(count_op(o, "", "Transpose") == 0, o);
            char what[64];
            snprintf(what, sizeof what, "rotary decomposed case %d", c);
            compare(net, o, what, 2);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* Rotary embeddings on interleaved pairs (GPT-J's rotate_every_two):
 * q * cos + rotate_every_two(q) * sin, rotate_every_two(x) =
 * Reshape(Concat(Unsqueeze(-x[..., 1::2], -1), Unsqueeze(x[..., ::2], -1)))
 * and cos = Unsqueeze(Cos(repeat_interleave(f, 2, -1)), 1). Case 0: the
 * repeat as Concat(u, u) of u = Unsqueeze(f, -1), then Reshape; case 1:
 * the repeat as Expand of u to [.., 2]; case 4: as Tile of u by [1, 1, 1,
 * 2]: each one RotaryEmbedding with interleaved = 1; case 2: cos and sin
 * inputs (pairs may differ): not fused; case 3: the pair rotated the wrong
 * way (x0, -x1): not fused. */
static void test_rotary_interleaved(void) {
    for (int c = 0; c < 5; c++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(-1, 3, 5, 8), NULL));
        iconst(net, "ax1", 1, DIMS(1), DIMS(1));
        iconst(net, "axl", 1, DIMS(1), DIMS(-1));
        iconst(net, "rows3", 1, DIMS(3), DIMS(0, 0, 8));
        if (c == 2) {
            KT_OK(kiln_network_add_input(net, "cosu", KILN_DTYPE_FLOAT, 4, DIMS(-1, 1, 5, 8), NULL));
            KT_OK(kiln_network_add_input(net, "sinu", KILN_DTYPE_FLOAT, 4, DIMS(-1, 1, 5, 8), NULL));
        } else {
            KT_OK(kiln_network_add_input(net, "f", KILN_DTYPE_FLOAT, 3, DIMS(-1, 5, 4), NULL));
            node(net, "fu", "Unsqueeze", 2, IN("f", "axl"), "fu"); /* [B, 5, 4, 1] */
            if (c == 1 || c == 4) {
                iconst(net, "two", 1, DIMS(4), DIMS(1, 1, 1, 2));
                node(net, "rep", c == 1 ? "Expand" : "Tile", 2, IN("fu", "two"), "f2");
            } else {
                KT_OK(kiln_network_set_attr_int(net, node(net, "rep", "Concat", 2, IN("fu", "fu"), "f2"),
                                                "axis", -1));
            }
            node(net, "flat", "Reshape", 2, IN("f2", "rows3"), "emb"); /* [B, 5, 8] */
            node(net, "cos", "Cos", 1, IN("emb"), "cos0");
            node(net, "sin", "Sin", 1, IN("emb"), "sin0");
            node(net, "cu", "Unsqueeze", 2, IN("cos0", "ax1"), "cosu");
            node(net, "su", "Unsqueeze", 2, IN("sin0", "ax1"), "sinu");
        }
        iconst(net, "s0", 1, DIMS(1), DIMS(0));
        iconst(net, "s1", 1, DIMS(1), DIMS(1));
        iconst(net, "st2", 1, DIMS(1), DIMS(2));
        iconst(net, "big", 1, DIMS(1), DIMS(INT64_MAX));
        node(net, "even", "Slice", 5, IN("x", "s0", "big", "axl", "st2"), "x1");
        node(net, "odd", "Slice", 5, IN("x", "s1", "big", "axl", "st2"), "x2");
        node(net, "neg", "Neg", 1, IN(c == 3 ? "x1" : "x2"), "nx2");
        node(net, "ua", "Unsqueeze", 2, IN("nx2", "axl"), "ua");
        node(net, "ub", "Unsqueeze", 2, IN(c == 3 ? "x2" : "x1", "axl"), "ub");
        KT_OK(kiln_network_set_attr_int(net, node(net, "stack", "Concat", 2, IN("ua", "ub"), "st"),
                                        "axis", -1));
        iconst(net, "xshape", 1, DIMS(4), DIMS(0, 3, 5, 8));
        node(net, "rot", "Reshape", 2, IN("st", "xshape"), "rh");
        node(net, "mc", "Mul", 2, IN("x", "cosu"), "xc");
        node(net, "ms", "Mul", 2, IN("rh", "sinu"), "xs");
        node(net, "add", "Add", 2, IN("xc", "xs"), "y");
        KT_OK(kiln_network_mark_output(net, "y"));
        kn_net *o = optimized(net, 0, 1, 2, 3);
        if (o) {
            bool fused = c < 2 || c == 4;
            CHECK_OR_DUMP(count_op(o, "", "RotaryEmbedding") == (fused ? 1 : 0), o);
            const kn_node *r = NULL;
            for (int i = 0; i < o->n_nodes; i++)
                if (!strcmp(o->nodes[i].op_type, "RotaryEmbedding"))
                    r = &o->nodes[i];
            if (fused) {
                CHECK_OR_DUMP(r && kn_attr_int(r, "interleaved", 0) == 1, o);
                /* the pair rotation is gone (a Concat left makes the caches) */
                CHECK_OR_DUMP(count_op(o, "", "Neg") + count_op(o, "", "Mul") == 0 &&
                                  count_op(o, "", "Concat") == (c == 0 ? 1 : 0), o);
            }
            char what[64];
            snprintf(what, sizeof what, "rotary interleaved case %d", c);
            compare(net, o, what, 2);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* A LayerNorm of a sum also read afterwards (x = a + h; y = LN(x); out =
 * x + f(y): CLIP's embeddings before the first pre-norm block): one
 * kiln::LayerNorm whose second output is the sum; case 1: the sum is a
 * graph output as well. */
static void test_layernorm_sum_kept(void) {
    for (int c = 0; c < 2; c++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_FLOAT, 3, DIMS(-1, 5, 16), NULL));
        KT_OK(kiln_network_add_input(net, "h", KILN_DTYPE_FLOAT, 3, DIMS(-1, 5, 16), NULL));
        fconst(net, "g", 1, DIMS(16), 0.5f, 1.f);
        fconst(net, "b", 1, DIMS(16), -0.5f, 1.f);
        node(net, "res", "Add", 2, IN("a", "h"), "x");
        node(net, "ln", "LayerNormalization", 3, IN("x", "g", "b"), "y");
        node(net, "act", "Tanh", 1, IN("y"), "t");
        node(net, "res2", "Add", 2, IN("x", "t"), "out");
        KT_OK(kiln_network_mark_output(net, "out"));
        if (c)
            KT_OK(kiln_network_mark_output(net, "x"));
        kn_net *o = optimized(net, 0, 1, 2, 4);
        if (o) {
            const kn_node *l = find_op(o, KN_DOMAIN_KILN, "LayerNorm");
            CHECK_OR_DUMP(l && l->n_out == 2 && count_op(o, "", "LayerNormalization") == 0, o);
            char what[64];
            snprintf(what, sizeof what, "layernorm with its sum kept, case %d", c);
            compare(net, o, what, 3);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* A norm's weight left outside it (RMSNormalization / LayerNormalization,
 * then Mul by a constant row), with a Shape of the norm's output beside
 * (as the shape-sink pass leaves it): the weight folds into the norm's
 * scale (and bias). */
static void test_norm_weight_fold(void) {
    for (int ln = 0; ln < 2; ln++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, 5, 16), NULL));
        fconst(net, "s", 1, DIMS(16), 0.5f, 1.f);
        fconst(net, "b", 1, DIMS(16), -0.5f, 1.f);
        fconst(net, "w", 1, DIMS(16), -1.f, 2.f);
        int n = ln ? node_v(net, "norm", "LayerNormalization", "", 17, 3, IN("x", "s", "b"), "y")
                   : node_v(net, "norm", "RMSNormalization", "", 23, 2, IN("x", "s"), "y");
        KT_OK(kiln_network_set_attr_int(net, n, "axis", -1));
        node(net, "weight", "Mul", 2, IN("w", "y"), "z");
        node(net, "shape", "Shape", 1, IN("y"), "ys");
        node(net, "zeros", "ConstantOfShape", 1, IN("ys"), "zs");
        node(net, "plus", "Add", 2, IN("z", "zs"), "out");
        KT_OK(kiln_network_mark_output(net, "out"));
        kn_net *o = optimized(net, 0, 1, 2, 4);
        if (o) {
            CHECK_OR_DUMP(count_op(o, "", ln ? "LayerNormalization" : "RMSNormalization") +
                                  count_op(o, KN_DOMAIN_KILN, "LayerNorm") ==
                              1 &&
                              count_op(o, "", "Mul") == 0,
                          o);
            compare(net, o, ln ? "LayerNormalization weight folded" : "RMSNormalization weight folded", 3);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

int main(void) {
    printf("seed %u (fixed)\n", rng_state);
    test_rmsnorm();
    test_rmsnorm_not();
    test_layernorm_decomposed();
    test_layernorm_decomposed_residual();
    test_quick_gelu();
    test_rotary_domains();
    test_contrib();
    test_hfuse();
    test_rotary_decomposed();
    test_rotary_interleaved();
    test_layernorm_sum_kept();
    test_norm_weight_fold();
    if (kt_skipped)
        printf("%d numeric check(s) skipped: kernels missing\n", kt_skipped);
    return kt_finish();
}
