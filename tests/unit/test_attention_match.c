/* test_attention_match.c - the one attention matcher on hand-built graphs,
 * one per exporter spelling: each optimized copy must hold one
 * kiln::Attention (no Softmax left) and give the unfused graph's outputs on
 * the CPU, fully masked rows included (seeded data; the seed is printed). */
#include <math.h>
#include <string.h>

#include "builder/builder.h"
#include "builder/passes.h"
#include "graph/fused.h"
#include "kiln/kiln_builder.h"
#include "test.h"
#include "kt_exec.h"

enum { S = 6, H = 4, D = 8, E = H * D };

#define IN(...) ((const char *const[]){__VA_ARGS__})
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static uint32_t seed = 20261202u, rng;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 65536.f * 2.f - 1.f;
}

static int node_d(kiln_network *net, const char *name, const char *op, const char *domain, int opset,
                  int n_in, const char *const *in, const char *out) {
    int idx = -1;
    const char *outs[1] = {out};
    KT_OK(kiln_network_add_node(net, name, op, domain, opset, n_in, in, 1, outs, &idx));
    return idx;
}

static int node(kiln_network *net, const char *name, const char *op, int n_in, const char *const *in,
                const char *out) {
    return node_d(net, name, op, "", 23, n_in, in, out);
}

static void perm(kiln_network *net, int n, const int64_t *p, size_t c) {
    KT_OK(kiln_network_set_attr_ints(net, n, "perm", p, c));
}

static void fscalar(kiln_network *net, const char *name, float v) {
    KT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_FLOAT, 0, NULL, &v, sizeof v));
}

static void iconst(kiln_network *net, const char *name, int64_t n, const int64_t *v) {
    KT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_INT64, 1, DIMS(n), v,
                                    (size_t)n * sizeof(int64_t)));
}

static void fconst(kiln_network *net, const char *name, int rank, const int64_t *dims) {
    int64_t n = kn_numel(rank, dims);
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        v[i] = frand() * 0.5f;
    KT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_FLOAT, rank, dims, v,
                                    (size_t)n * sizeof(float)));
    free(v);
}

/* ---------------- running ---------------- */

static kn_net *optimized(kiln_network *net) {
    kn_net *o = NULL;
    KT_OK(kn_net_toposort(net));
    KT_OK(kn_net_clone(net, &o));
    if (!o)
        return NULL;
    kp_meta meta;
    memset(&meta, 0, sizeof meta);
    KT_OK(kp_meta_alloc_profiles(&meta, 1, o->n_inputs));
    kp_profile *pr = &meta.profiles[0];
    for (int k = 0; k < o->n_inputs; k++) {
        const kn_tensor *t = &o->tensors[o->inputs[k]];
        pr->rank[k] = t->rank;
        for (int d = 0; d < t->rank; d++) {
            bool dyn = t->dims[d] < 0;
            pr->min[k][d] = dyn ? 1 : t->dims[d];
            pr->opt[k][d] = dyn ? 2 : t->dims[d];
            pr->max[k][d] = dyn ? 3 : t->dims[d];
        }
    }
    kbld b = {.net = o, .flags = 0, .meta = &meta, .threads = 1};
    kiln_status st = kbld_optimize(&b);
    if (st == KILN_OK)
        st = kn_net_compact(o);
    if (st == KILN_OK)
        st = kn_net_toposort(o);
    kp_meta_free(&meta);
    KT_OK(st);
    if (st != KILN_OK) {
        kn_net_free(o);
        return NULL;
    }
    return o;
}

static int count_op(const kn_net *net, const char *domain, const char *op) {
    int c = 0;
    for (int i = 0; i < net->n_nodes; i++)
        if (!strcmp(net->nodes[i].op_type, op) && !strcmp(net->nodes[i].domain, domain))
            c++;
    return c;
}

static const kn_node *find_op(const kn_net *net, const char *domain, const char *op) {
    for (int i = 0; i < net->n_nodes; i++)
        if (!strcmp(net->nodes[i].op_type, op) && !strcmp(net->nodes[i].domain, domain))
            return &net->nodes[i];
    return NULL;
}

static void dump(const kn_net *net) {
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        fprintf(stderr, "    [%d] %s%s%s '%s'\n", i, n->domain, n->domain[0] ? "::" : "", n->op_type,
                n->name);
    }
}

/* Inputs at batch b: floats random; a bool [B, S] mask keeps the first
 * S - 2i keys of batch i and none of batch 2 (a fully masked row, where
 * SDPA's guard gives zeros); int32 masks likewise as 1 / 0 but keep key 0
 * (with a finite filter value a fully masked row is uniform only up to
 * float rounding of score + filter). */
typedef struct feeds {
    int n;
    void *data[4];
    int rank[4];
    int64_t dims[4][KILN_MAX_DIMS];
} feeds;

static void make_feeds(const kn_net *net, int64_t b, feeds *f) {
    memset(f, 0, sizeof *f);
    f->n = net->n_inputs;
    for (int k = 0; k < net->n_inputs; k++) {
        const kn_tensor *t = &net->tensors[net->inputs[k]];
        f->rank[k] = t->rank;
        for (int d = 0; d < t->rank; d++)
            f->dims[k][d] = t->dims[d] < 0 ? b : t->dims[d];
        int64_t n = kn_numel(t->rank, f->dims[k]), last = f->dims[k][t->rank - 1];
        f->data[k] = calloc((size_t)n, 8);
        for (int64_t i = 0; i < n; i++) {
            int64_t row = i / last, col = i % last;
            bool keep = row != 2 && col < last - 2 * row;
            if (t->dtype == KILN_DTYPE_FLOAT)
                ((float *)f->data[k])[i] = frand();
            else if (t->dtype == KILN_DTYPE_BOOL)
                ((uint8_t *)f->data[k])[i] = keep;
            else if (t->dtype == KILN_DTYPE_INT32) /* finite filters: no fully masked row */
                ((int32_t *)f->data[k])[i] = col < last - 2 * row || col == 0;
        }
    }
}

/* Both nets on the same inputs at batch b: output 0 within 1e-5 (relative
 * to max(1, |ref|)); NaN only where the reference has NaN. */
static void compare(kiln_network *ref, kn_net *opt, const char *what, int64_t b) {
    feeds f;
    make_feeds(ref, b, &f);
    kt_exec x, y;
    kiln_status sa = kt_exec_run(&x, ref, (const void *const *)f.data, f.rank,
                                 (const int64_t (*)[KILN_MAX_DIMS])f.dims);
    kiln_status sb = kt_exec_run(&y, opt, (const void *const *)f.data, f.rank,
                                 (const int64_t (*)[KILN_MAX_DIMS])f.dims);
    KT_OK(sa);
    KT_OK(sb);
    if (sa == KILN_OK && sb == KILN_OK) {
        kn_tinfo ta, tb;
        const float *ya = kt_exec_output(&x, 0, &ta), *yb = kt_exec_output(&y, 0, &tb);
        KT_CHECK(ta.rank == tb.rank && !memcmp(ta.dims, tb.dims, sizeof(int64_t) * (size_t)ta.rank));
        double worst = 0;
        int64_t n = kn_numel(ta.rank, ta.dims);
        for (int64_t i = 0; i < n; i++) {
            if (isnan(ya[i]) != isnan(yb[i])) {
                worst = INFINITY;
                break;
            }
            if (isnan(ya[i]))
                continue;
            double d = fabs((double)ya[i] - yb[i]), s = fabs((double)ya[i]) > 1 ? fabs((double)ya[i]) : 1;
            worst = d / s > worst ? d / s : worst;
        }
        if (worst > 1e-5) {
            kt_fail++;
            fprintf(stderr, "  %s (batch %lld): output differs by %g (seed %u)\n", what, (long long)b,
                    worst, seed);
        } else {
            kt_pass++;
        }
    }
    kt_exec_free(&x);
    kt_exec_free(&y);
    for (int k = 0; k < 4; k++)
        free(f.data[k]);
}

/* Optimize, expect one kiln::Attention and no Softmax, compare at batch 3
 * (and 1); returns the optimized net for more checks (caller frees). */
static kn_net *check_fused(kiln_network *net, const char *what) {
    kn_net *o = optimized(net);
    if (!o)
        return NULL;
    bool ok = count_op(o, KN_DOMAIN_KILN, "Attention") == 1 && count_op(o, "", "Softmax") == 0 &&
              count_op(o, "", "Attention") == 0;
    KT_CHECK(ok);
    if (!ok) {
        fprintf(stderr, "  %s: not fused\n", what);
        dump(o);
    }
    compare(net, o, what, 3);
    compare(net, o, what, 1);
    return o;
}

/* ---------------- graphs ---------------- */

/* x [B, S, E] -> name [B, H, S, D] through a projection, Reshape and
 * Transpose (perm), then times `scale` when scale_name. */
static void heads(kiln_network *net, const char *x, const char *name, const int64_t *p,
                  const char *scale_name) {
    char w[32], mm[32], r[32], t[32];
    snprintf(w, sizeof w, "W%s", name);
    snprintf(mm, sizeof mm, "%s_mm", name);
    snprintf(r, sizeof r, "%s_r", name);
    snprintf(t, sizeof t, "%s_t", name);
    fconst(net, w, 2, DIMS(E, E));
    node(net, mm, "MatMul", 2, IN(x, w), mm);
    node(net, r, "Reshape", 2, IN(mm, "shape4"), r);
    perm(net, node(net, t, "Transpose", 1, IN(r), scale_name ? t : name), p, 4);
    if (scale_name)
        node(net, name, "Mul", 2, IN(t, scale_name), name);
}

/* the context and the heads merged back to y [B, S, E] */
static void tail(kiln_network *net, const char *p, const char *v) {
    node(net, "context", "MatMul", 2, IN(p, v), "o");
    perm(net, node(net, "o_t", "Transpose", 1, IN("o"), "ot"), DIMS(0, 2, 1, 3), 4);
    node(net, "merge", "Reshape", 2, IN("ot", "shape3"), "y");
    KT_OK(kiln_network_mark_output(net, "y"));
}

static kiln_network *base_net(bool bool_mask) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, S, E), NULL));
    if (bool_mask)
        KT_OK(kiln_network_add_input(net, "keep", KILN_DTYPE_BOOL, 2, DIMS(-1, S), NULL));
    iconst(net, "shape4", 4, (const int64_t[]){0, 0, H, D});
    iconst(net, "shape3", 3, (const int64_t[]){0, 0, E});
    return net;
}

/* keep [B, S] -> [B, 1, 1, S] -> Where(keep, 0, neg): the additive mask "am" */
static void where_mask(kiln_network *net, float neg) {
    iconst(net, "ax12", 2, (const int64_t[]){1, 2});
    node(net, "keep4", "Unsqueeze", 2, IN("keep", "ax12"), "keep4");
    fscalar(net, "zero", 0.f);
    fscalar(net, "neg", neg);
    node(net, "mask_where", "Where", 3, IN("keep4", "zero", "neg"), "am");
}

/* SDPA's export: sqrt-scale Mul on Q and on K^T, Where mask with -inf or
 * the lowest float, Softmax, the IsNaN guard, context. */
static kiln_network *sdpa_net(float neg, bool guard) {
    kiln_network *net = base_net(true);
    fscalar(net, "rs", 0.5946035f);
    heads(net, "x", "q", DIMS(0, 2, 1, 3), "rs");
    heads(net, "x", "kt", DIMS(0, 2, 3, 1), "rs");
    heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
    where_mask(net, neg);
    node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
    node(net, "add_mask", "Add", 2, IN("s", "am"), "sm");
    KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("sm"), "p"), "axis", -1));
    if (guard) {
        fscalar(net, "pz", 0.f);
        node(net, "isnan", "IsNaN", 1, IN("p"), "nan");
        node(net, "guard", "Where", 3, IN("nan", "pz", "p"), "pg");
    }
    tail(net, guard ? "pg" : "p", "v");
    return net;
}

static void test_sdpa(void) {
    kiln_network *net = sdpa_net(-INFINITY, true);
    kn_net *o = check_fused(net, "SDPA: scale on Q and K, -inf Where mask, NaN guard");
    if (o) {
        const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
        if (a)
            KT_NEAR(kn_attr_float(a, "scale", 0.f), 0.5946035 * 0.5946035, 1e-6);
        KT_CHECK(count_op(o, "", "IsNaN") == 0);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
    net = sdpa_net(-3.4028234663852886e38f, false);
    o = check_fused(net, "SDPA: Where mask with the lowest float, no guard");
    kn_net_free(o);
    kiln_network_destroy(net);
}

/* BERT's classic export: Div by sqrt(D) on the scores, an additive mask
 * (1 - m) * -10000 from a float [B, S] input. */
static void test_div_additive(void) {
    kiln_network *net = base_net(true);
    heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
    heads(net, "x", "kt", DIMS(0, 2, 3, 1), NULL);
    heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
    where_mask(net, -10000.f);
    node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
    fscalar(net, "sqrt_d", sqrtf((float)D));
    node(net, "scale", "Div", 2, IN("s", "sqrt_d"), "sd");
    node(net, "add_mask", "Add", 2, IN("am", "sd"), "sm"); /* the mask first */
    KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("sm"), "p"), "axis", -1));
    tail(net, "p", "v");
    kn_net *o = check_fused(net, "Div scale, mask first in the Add");
    if (o) {
        const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
        if (a)
            KT_NEAR(kn_attr_float(a, "scale", 0.f), 1.0 / sqrt((double)D), 1e-6);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* masked_fill: Where(keep, S, -inf) right before the Softmax, with the guard */
static void test_masked_fill(void) {
    kiln_network *net = base_net(true);
    heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
    heads(net, "x", "kt", DIMS(0, 2, 3, 1), NULL);
    heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
    iconst(net, "ax12", 2, (const int64_t[]){1, 2});
    node(net, "keep4", "Unsqueeze", 2, IN("keep", "ax12"), "keep4");
    node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
    fscalar(net, "ninf", -INFINITY);
    node(net, "fill", "Where", 3, IN("keep4", "s", "ninf"), "sf");
    KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("sf"), "p"), "axis", -1));
    fscalar(net, "pz", 0.f);
    node(net, "isnan", "IsNaN", 1, IN("p"), "nan");
    node(net, "guard", "Where", 3, IN("nan", "pz", "p"), "pg");
    tail(net, "pg", "v");
    kn_net *o = check_fused(net, "masked_fill Where before the Softmax");
    kn_net_free(o);
    kiln_network_destroy(net);
}

/* A causal mask made by Trilu from a constant: folded, and the causal pass
 * marks the attention. */
static void test_trilu_causal(void) {
    kiln_network *net = base_net(false);
    heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
    heads(net, "x", "kt", DIMS(0, 2, 3, 1), NULL);
    heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
    float full[S * S];
    for (int i = 0; i < S * S; i++)
        full[i] = -INFINITY;
    KT_OK(kiln_network_add_constant(net, "neg_full", KILN_DTYPE_FLOAT, 2, DIMS(S, S), full, sizeof full));
    KT_OK(kiln_network_add_constant(net, "one", KILN_DTYPE_INT64, 0, NULL, (const int64_t[]){1},
                                    sizeof(int64_t)));
    KT_OK(kiln_network_set_attr_int(net, node(net, "causal", "Trilu", 2, IN("neg_full", "one"), "cm"),
                                    "upper", 1));
    node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
    node(net, "add_mask", "Add", 2, IN("s", "cm"), "sm");
    KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("sm"), "p"), "axis", -1));
    tail(net, "p", "v");
    kn_net *o = check_fused(net, "Trilu causal mask");
    if (o) {
        const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
        KT_CHECK(a && kn_attr_int(a, "causal", 0) == 1);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* Llama's grouped-query attention: K and V with 2 heads, each repeated
 * twice through Unsqueeze / Expand / Reshape; Q heads-first behind an Add
 * (where rotary embeddings would be). */
static void test_gqa(void) {
    enum { HKV = 2, G = H / HKV };
    kiln_network *net = base_net(false);
    iconst(net, "shape4kv", 4, (const int64_t[]){0, 0, HKV, D});
    heads(net, "x", "q0", DIMS(0, 2, 1, 3), NULL);
    fconst(net, "qbias", 4, DIMS(1, H, 1, D));
    node(net, "rope", "Add", 2, IN("q0", "qbias"), "q");
    const char *kv[2] = {"k", "v"};
    for (int j = 0; j < 2; j++) {
        char w[16], mm[16], r[16], t[16], u[16], ex[16], rep[16];
        snprintf(w, sizeof w, "W%s", kv[j]);
        snprintf(mm, sizeof mm, "%s_mm", kv[j]);
        snprintf(r, sizeof r, "%s_r", kv[j]);
        snprintf(t, sizeof t, "%s_t", kv[j]);
        snprintf(u, sizeof u, "%s_u", kv[j]);
        snprintf(ex, sizeof ex, "%s_x", kv[j]);
        snprintf(rep, sizeof rep, "%s_rep", kv[j]);
        fconst(net, w, 2, DIMS(E, HKV * D));
        node(net, mm, "MatMul", 2, IN("x", w), mm);
        node(net, r, "Reshape", 2, IN(mm, "shape4kv"), r);
        perm(net, node(net, t, "Transpose", 1, IN(r), t), DIMS(0, 2, 1, 3), 4);
        if (j == 0) {
            iconst(net, "ax2", 1, (const int64_t[]){2});
            iconst(net, "grow", 5, (const int64_t[]){1, 1, G, 1, 1});
            iconst(net, "merged", 4, (const int64_t[]){0, H, S, D});
        }
        node(net, u, "Unsqueeze", 2, IN(t, "ax2"), u);
        node(net, ex, "Expand", 2, IN(u, "grow"), ex);
        node(net, rep, "Reshape", 2, IN(ex, "merged"), rep);
    }
    perm(net, node(net, "k_T", "Transpose", 1, IN("k_rep"), "kt"), DIMS(0, 1, 3, 2), 4);
    node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
    fscalar(net, "c", 0.35f);
    node(net, "scale", "Mul", 2, IN("s", "c"), "ss");
    KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("ss"), "p"), "axis", -1));
    tail(net, "p", "v_rep");
    kn_net *o = check_fused(net, "grouped-query attention");
    if (o) {
        const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
        KT_CHECK(a && count_op(o, "", "Expand") == 0);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* ONNX Attention (opset 23) on [B, H, S, D] with a bool mask [B, 1, 1, S]
 * or a float one; 3-D with q_num_heads / kv_num_heads (2 kv heads). */
static kiln_network *onnx_attention_net(int rank, bool bool_mask) {
    kiln_network *net = base_net(bool_mask);
    const char *mask = "";
    if (bool_mask) {
        iconst(net, "ax12", 2, (const int64_t[]){1, 2});
        node(net, "keep4", "Unsqueeze", 2, IN("keep", "ax12"), "keep4");
        mask = "keep4";
    } else {
        fconst(net, "fmask", 4, DIMS(1, 1, S, S));
        mask = "fmask";
    }
    int a;
    if (rank == 4) {
        heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
        heads(net, "x", "k", DIMS(0, 2, 1, 3), NULL);
        heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
        a = node(net, "sdpa", "Attention", 4, IN("q", "k", "v", mask), "o");
        perm(net, node(net, "o_t", "Transpose", 1, IN("o"), "ot"), DIMS(0, 2, 1, 3), 4);
        node(net, "merge", "Reshape", 2, IN("ot", "shape3"), "y");
    } else {
        fconst(net, "Wq", 2, DIMS(E, E));
        fconst(net, "Wk", 2, DIMS(E, E / 2));
        fconst(net, "Wv", 2, DIMS(E, E / 2));
        node(net, "q_mm", "MatMul", 2, IN("x", "Wq"), "q");
        node(net, "k_mm", "MatMul", 2, IN("x", "Wk"), "k");
        node(net, "v_mm", "MatMul", 2, IN("x", "Wv"), "v");
        a = node(net, "sdpa", "Attention", 4, IN("q", "k", "v", mask), "y");
        KT_OK(kiln_network_set_attr_int(net, a, "q_num_heads", H));
        KT_OK(kiln_network_set_attr_int(net, a, "kv_num_heads", H / 2));
    }
    KT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static void test_onnx_attention(void) {
    static const char *const what[4] = {"ONNX Attention 4-D, float mask", "ONNX Attention 4-D, bool mask",
                                        "ONNX Attention 3-D GQA, float mask",
                                        "ONNX Attention 3-D GQA, bool mask"};
    for (int c = 0; c < 4; c++) {
        kiln_network *net = onnx_attention_net(c < 2 ? 4 : 3, c & 1);
        kn_net *o = check_fused(net, what[c]);
        if (o) {
            const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
            if (a)
                KT_NEAR(kn_attr_float(a, "scale", 0.f), 1.0 / sqrt((double)D), 1e-6);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* com.microsoft MultiHeadAttention with a key_padding_mask [B, S] (int32),
 * against the same attention written as ONNX Attention with the mask as
 * Where(keep, 0, -10000) (ONNX Runtime's mask_filter_value). */
static void test_ms_mha(void) {
    kiln_network *mha = NULL, *ref = NULL;
    for (int which = 0; which < 2; which++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, S, E), NULL));
        KT_OK(kiln_network_add_input(net, "pad", KILN_DTYPE_INT32, 2, DIMS(-1, S), NULL));
        rng = seed;
        fconst(net, "Wq", 2, DIMS(E, E));
        fconst(net, "Wk", 2, DIMS(E, E));
        fconst(net, "Wv", 2, DIMS(E, E));
        node(net, "q_mm", "MatMul", 2, IN("x", "Wq"), "q");
        node(net, "k_mm", "MatMul", 2, IN("x", "Wk"), "k");
        node(net, "v_mm", "MatMul", 2, IN("x", "Wv"), "v");
        if (which == 0) {
            int a = node_d(net, "mha", "MultiHeadAttention", "com.microsoft", 1, 5,
                           IN("q", "k", "v", "", "pad"), "y");
            KT_OK(kiln_network_set_attr_int(net, a, "num_heads", H));
            mha = net;
        } else {
            iconst(net, "ax12", 2, (const int64_t[]){1, 2});
            KT_OK(kiln_network_add_constant(net, "izero", KILN_DTYPE_INT32, 0, NULL, &(int32_t){0},
                                            sizeof(int32_t)));
            node(net, "is_pad", "Equal", 2, IN("pad", "izero"), "isp");
            node(net, "keep", "Not", 1, IN("isp"), "keep");
            node(net, "keep4", "Unsqueeze", 2, IN("keep", "ax12"), "keep4");
            fscalar(net, "zero", 0.f);
            fscalar(net, "filter", -10000.f);
            node(net, "mask_where", "Where", 3, IN("keep4", "zero", "filter"), "am");
            int a = node(net, "sdpa", "Attention", 4, IN("q", "k", "v", "am"), "y");
            KT_OK(kiln_network_set_attr_int(net, a, "q_num_heads", H));
            KT_OK(kiln_network_set_attr_int(net, a, "kv_num_heads", H));
            ref = net;
        }
        KT_OK(kiln_network_mark_output(net, "y"));
    }
    kn_net *o = optimized(mha);
    if (o) {
        bool ok = count_op(o, KN_DOMAIN_KILN, "Attention") == 1 &&
                  count_op(o, "com.microsoft", "MultiHeadAttention") == 0;
        KT_CHECK(ok);
        if (!ok)
            dump(o);
        const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
        if (a)
            KT_NEAR(kn_attr_float(a, "scale", 0.f), 1.0 / sqrt((double)D), 1e-6);
        compare(ref, o, "com.microsoft MultiHeadAttention with key padding", 3);
        kn_net_free(o);
    }
    kiln_network_destroy(mha);
    kiln_network_destroy(ref);
}

/* A causal mask computed at run time, as transformers' masking_utils
 * writes it: kv_idx <= q_idx from Range(0, S) laid along the key and query
 * axes, And the padding row, Where(., 0, -inf) (case 0); the dual
 * Where(Greater(k, q) Or Not(keep), -inf, 0) (case 1): the attention gets
 * causal = 1 and the padding row alone. Case 2: the anti-causal q <= k is
 * no causal mask; case 3: a finite fill (a fully masked row would be
 * uniform, not zeros) keeps the mask; case 4: Trilu of ones expanded to
 * [S, S] (lower), cast to bool, is causal too; case 5: an expanded
 * all-true keep masks nothing and is dropped. Batch 3 has a fully masked row
 * (SDPA's NaN guard after the Softmax makes it zeros). */
static void test_runtime_causal(void) {
    for (int c = 0; c < 6; c++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, -1, E), NULL));
        KT_OK(kiln_network_add_input(net, "keep", KILN_DTYPE_BOOL, 2, DIMS(-1, -1), NULL));
        iconst(net, "shape4", 4, (const int64_t[]){0, 0, H, D});
        iconst(net, "shape3", 3, (const int64_t[]){0, 0, E});
        heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
        heads(net, "x", "kt", DIMS(0, 2, 3, 1), NULL);
        heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
        node(net, "shape", "Shape", 1, IN("x"), "xs");
        KT_OK(kiln_network_add_constant(net, "one_i", KILN_DTYPE_INT64, 0, NULL, (const int64_t[]){1},
                                        sizeof(int64_t)));
        KT_OK(kiln_network_add_constant(net, "zero_i", KILN_DTYPE_INT64, 0, NULL, (const int64_t[]){0},
                                        sizeof(int64_t)));
        KT_OK(kiln_network_set_attr_int(net, node(net, "seq", "Gather", 2, IN("xs", "one_i"), "sl"),
                                        "axis", 0));
        node(net, "range", "Range", 3, IN("zero_i", "sl", "one_i"), "pos");
        iconst(net, "ax0", 1, (const int64_t[]){0});
        iconst(net, "ax1", 1, (const int64_t[]){1});
        iconst(net, "ax12", 2, (const int64_t[]){1, 2});
        node(net, "qidx", "Unsqueeze", 2, IN("pos", "ax1"), "qi");  /* [S, 1] */
        node(net, "kidx", "Unsqueeze", 2, IN("pos", "ax0"), "ki");  /* [1, S] */
        node(net, "keep4", "Unsqueeze", 2, IN("keep", "ax12"), "keep4");
        fscalar(net, "zero", 0.f);
        fscalar(net, "neg", c == 3 ? -3.4028234663852886e38f : -INFINITY);
        if (c == 1) {
            node(net, "future", "Greater", 2, IN("ki", "qi"), "cm");
            node(net, "padded", "Not", 1, IN("keep4"), "pad");
            node(net, "masked", "Or", 2, IN("cm", "pad"), "both");
            node(net, "mask_where", "Where", 3, IN("both", "neg", "zero"), "am");
        } else if (c == 5) { /* Where(Expand(true, [B, 1, S, S]), 0, -inf): masks nothing */
            KT_OK(kiln_network_add_constant(net, "yes", KILN_DTYPE_BOOL, 4, DIMS(1, 1, 1, 1),
                                            (const uint8_t[]){1}, 1));
            node(net, "bshape", "Shape", 1, IN("keep4"), "ks4");
            node(net, "all", "Expand", 2, IN("yes", "ks4"), "both");
            node(net, "mask_where", "Where", 3, IN("both", "zero", "neg"), "am");
        } else if (c == 4) { /* Cast(Trilu(Expand(1.0, [S, S]))) to bool */
            iconst(net, "ax0b", 1, (const int64_t[]){0});
            node(net, "sl1", "Unsqueeze", 2, IN("sl", "ax0b"), "sl1");
            KT_OK(kiln_network_set_attr_int(net, node(net, "ss", "Concat", 2, IN("sl1", "sl1"), "ss"),
                                            "axis", 0));
            fscalar(net, "one_f", 1.f);
            node(net, "ones", "Expand", 2, IN("one_f", "ss"), "ones");
            KT_OK(kiln_network_set_attr_int(net, node(net, "tril", "Trilu", 1, IN("ones"), "tl"),
                                            "upper", 0));
            KT_OK(kiln_network_set_attr_int(net, node(net, "tril_b", "Cast", 1, IN("tl"), "cm"), "to",
                                            KILN_DTYPE_BOOL));
            node(net, "both", "And", 2, IN("cm", "keep4"), "both");
            node(net, "mask_where", "Where", 3, IN("both", "zero", "neg"), "am");
        } else {
            node(net, "causal", "LessOrEqual", 2, c == 2 ? IN("qi", "ki") : IN("ki", "qi"), "cm");
            node(net, "both", "And", 2, IN("cm", "keep4"), "both");
            node(net, "mask_where", "Where", 3, IN("both", "zero", "neg"), "am");
        }
        node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
        node(net, "add_mask", "Add", 2, IN("s", "am"), "sm");
        KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("sm"), "p"), "axis",
                                        -1));
        fscalar(net, "pz", 0.f); /* SDPA's guard: a fully masked row gives zeros */
        node(net, "isnan", "IsNaN", 1, IN("p"), "nan");
        node(net, "guard", "Where", 3, IN("nan", "pz", "p"), "pg");
        tail(net, "pg", "v");
        char what[64];
        snprintf(what, sizeof what, "run-time causal mask, case %d", c);
        kn_net *o = check_fused(net, what);
        if (o) {
            const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
            bool causal = c < 2 || c == 4;
            KT_CHECK(a && kn_attr_int(a, "causal", 0) == (causal ? 1 : 0));
            if (c == 5) /* dropped */
                KT_CHECK(a && (a->n_in < 4 || a->in[3] < 0));
            else
                KT_CHECK(a && a->n_in > 3 && a->in[3] >= 0); /* the padding row stays */
            int cmp = count_op(o, "", "LessOrEqual") + count_op(o, "", "Greater") +
                      count_op(o, "", "Trilu");
            KT_CHECK(causal || c == 5 ? cmp == 0 : cmp == 1);
            if (!(a && kn_attr_int(a, "causal", 0) == (causal ? 1 : 0)))
                dump(o);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* The causal mask of a decoder step with a past cache, as masking_utils
 * writes it: kv_idx = Range(0, Sk) over K = Concat(past, new) and q_idx =
 * Range(0, S) + Shape(past)[2] (the cache positions), kv_idx <= q_idx, so
 * key j is masked where j > i + Sk - Sq: causal = 1 (aligned to the last
 * key) and no mask left. Case 0: fill -inf; case 1: fill float's lowest
 * (finfo.min, dynamo's spelling: no padding term, so no row is fully
 * masked and the fill is exact); case 2: the query offset is past + 1
 * (not Sk - Sq): no causal flag, the comparison stays. */
static void test_past_causal(void) {
    for (int c = 0; c < 3; c++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, -1, E), NULL));
        KT_OK(kiln_network_add_input(net, "pk", KILN_DTYPE_FLOAT, 4, DIMS(-1, H, -1, D), NULL));
        KT_OK(kiln_network_add_input(net, "pv", KILN_DTYPE_FLOAT, 4, DIMS(-1, H, -1, D), NULL));
        iconst(net, "shape4", 4, (const int64_t[]){0, 0, H, D});
        iconst(net, "shape3", 3, (const int64_t[]){0, 0, E});
        heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
        heads(net, "x", "kn", DIMS(0, 2, 1, 3), NULL);
        heads(net, "x", "vn", DIMS(0, 2, 1, 3), NULL);
        KT_OK(kiln_network_set_attr_int(net, node(net, "kcat", "Concat", 2, IN("pk", "kn"), "kc"),
                                        "axis", 2));
        KT_OK(kiln_network_set_attr_int(net, node(net, "vcat", "Concat", 2, IN("pv", "vn"), "v"),
                                        "axis", 2));
        perm(net, node(net, "k_t", "Transpose", 1, IN("kc"), "kt"), DIMS(0, 1, 3, 2), 4);
        KT_OK(kiln_network_add_constant(net, "one_i", KILN_DTYPE_INT64, 0, NULL, (const int64_t[]){1},
                                        sizeof(int64_t)));
        KT_OK(kiln_network_add_constant(net, "zero_i", KILN_DTYPE_INT64, 0, NULL, (const int64_t[]){0},
                                        sizeof(int64_t)));
        KT_OK(kiln_network_add_constant(net, "two_i", KILN_DTYPE_INT64, 0, NULL, (const int64_t[]){2},
                                        sizeof(int64_t)));
        node(net, "xshape", "Shape", 1, IN("x"), "xs");
        node(net, "pshape", "Shape", 1, IN("pk"), "ps");
        node(net, "kshape", "Shape", 1, IN("kc"), "ks");
        KT_OK(kiln_network_set_attr_int(net, node(net, "seq", "Gather", 2, IN("xs", "one_i"), "sl"),
                                        "axis", 0));
        KT_OK(kiln_network_set_attr_int(net, node(net, "past", "Gather", 2, IN("ps", "two_i"), "pl"),
                                        "axis", 0));
        KT_OK(kiln_network_set_attr_int(net, node(net, "total", "Gather", 2, IN("ks", "two_i"), "tl"),
                                        "axis", 0));
        node(net, "qrange", "Range", 3, IN("zero_i", "sl", "one_i"), "qr");
        node(net, "qpos", "Add", 2, IN("qr", "pl"), c == 2 ? "qp0" : "qp");
        if (c == 2)
            node(net, "qpos1", "Add", 2, IN("qp0", "one_i"), "qp");
        node(net, "krange", "Range", 3, IN("zero_i", "tl", "one_i"), "kp");
        iconst(net, "ax0", 1, (const int64_t[]){0});
        iconst(net, "ax1", 1, (const int64_t[]){1});
        node(net, "qidx", "Unsqueeze", 2, IN("qp", "ax1"), "qi"); /* [S, 1] */
        node(net, "kidx", "Unsqueeze", 2, IN("kp", "ax0"), "ki"); /* [1, P + S] */
        node(net, "causal", "LessOrEqual", 2, IN("ki", "qi"), "cm");
        fscalar(net, "zero", 0.f);
        fscalar(net, "neg", c == 1 ? -3.4028234663852886e38f : -INFINITY);
        node(net, "mask_where", "Where", 3, IN("cm", "zero", "neg"), "am");
        node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
        node(net, "add_mask", "Add", 2, IN("s", "am"), "sm");
        KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("sm"), "p"), "axis",
                                        -1));
        tail(net, "p", "v");
        char what[64];
        snprintf(what, sizeof what, "causal mask with a past cache, case %d", c);
        kn_net *o = check_fused(net, what);
        if (o) {
            const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
            bool causal = c < 2;
            KT_CHECK(a && kn_attr_int(a, "causal", 0) == (causal ? 1 : 0));
            if (causal)
                KT_CHECK(a && (a->n_in < 4 || a->in[3] < 0)); /* nothing left to mask */
            KT_CHECK(count_op(o, "", "LessOrEqual") == (causal ? 0 : 1));
            if (!(a && kn_attr_int(a, "causal", 0) == (causal ? 1 : 0)))
                dump(o);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* Every output of both nets at batch b within 1e-5 (relative to max(1, |ref|)). */
static void compare_all(kiln_network *ref, kn_net *opt, const char *what, int64_t b) {
    feeds f;
    make_feeds(ref, b, &f);
    kt_exec x, y;
    kiln_status sa = kt_exec_run(&x, ref, (const void *const *)f.data, f.rank,
                                 (const int64_t (*)[KILN_MAX_DIMS])f.dims);
    kiln_status sb = kt_exec_run(&y, opt, (const void *const *)f.data, f.rank,
                                 (const int64_t (*)[KILN_MAX_DIMS])f.dims);
    KT_OK(sa);
    KT_OK(sb);
    if (sa == KILN_OK && sb == KILN_OK) {
        KT_CHECK(ref->n_outputs == opt->n_outputs);
        for (int k = 0; k < ref->n_outputs && k < opt->n_outputs; k++) {
            kn_tinfo ta, tb;
            const float *ya = kt_exec_output(&x, k, &ta), *yb = kt_exec_output(&y, k, &tb);
            bool same = ta.rank == tb.rank && !memcmp(ta.dims, tb.dims, sizeof(int64_t) * (size_t)ta.rank);
            KT_CHECK(same);
            if (!same)
                continue;
            double worst = 0;
            for (int64_t i = 0; i < kn_numel(ta.rank, ta.dims); i++) {
                double d = fabs((double)ya[i] - yb[i]), sc = fabs((double)ya[i]) > 1 ? fabs((double)ya[i]) : 1;
                worst = isnan(d) ? INFINITY : d / sc > worst ? d / sc : worst;
            }
            if (worst > 1e-5) {
                kt_fail++;
                fprintf(stderr, "  %s (batch %lld): output %d differs by %g (seed %u)\n", what,
                        (long long)b, k, worst, seed);
            } else {
                kt_pass++;
            }
        }
    }
    kt_exec_free(&x);
    kt_exec_free(&y);
    for (int k = 0; k < 4; k++)
        free(f.data[k]);
}

/* ONNX Attention with a past cache (pk, pv [B, Hkv, P, D]), is_causal and
 * the present outputs read: kiln::Attention over Concat(past, new) with
 * causal = 1 (aligned to the last key: ONNX's j > i + P). Case 0: 4-D,
 * past, causal, a float mask over all P + S keys; case 1: 3-D grouped
 * heads, past, causal; case 2: 4-D, no past, causal, present read; case
 * 3: 3-D, past, not causal, with the mask. */
static void test_onnx_attention_past(void) {
    enum { P = 3, HKV = H / 2 };
    for (int c = 0; c < 4; c++) {
        kiln_network *net = base_net(false);
        bool past = c != 2, causal = c != 3, mask = c == 0 || c == 3, r4 = c % 2 == 0;
        int hkv = r4 ? H : HKV;
        if (past) {
            KT_OK(kiln_network_add_input(net, "pk", KILN_DTYPE_FLOAT, 4, DIMS(-1, hkv, P, D), NULL));
            KT_OK(kiln_network_add_input(net, "pv", KILN_DTYPE_FLOAT, 4, DIMS(-1, hkv, P, D), NULL));
        }
        if (mask)
            fconst(net, "fmask", 4, DIMS(1, 1, S, S + (past ? P : 0)));
        const char *outs[3] = {r4 ? "o" : "y", "present_k", "present_v"};
        const char *ins[6] = {"q", "k", "v", mask ? "fmask" : "", past ? "pk" : "", past ? "pv" : ""};
        int a = -1;
        if (r4) {
            heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
            heads(net, "x", "k", DIMS(0, 2, 1, 3), NULL);
            heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
        } else {
            fconst(net, "Wq", 2, DIMS(E, E));
            fconst(net, "Wk", 2, DIMS(E, E / 2));
            fconst(net, "Wv", 2, DIMS(E, E / 2));
            node(net, "q_mm", "MatMul", 2, IN("x", "Wq"), "q");
            node(net, "k_mm", "MatMul", 2, IN("x", "Wk"), "k");
            node(net, "v_mm", "MatMul", 2, IN("x", "Wv"), "v");
        }
        KT_OK(kiln_network_add_node(net, "sdpa", "Attention", "", 23, past ? 6 : 4, ins, 3, outs, &a));
        if (!r4) {
            KT_OK(kiln_network_set_attr_int(net, a, "q_num_heads", H));
            KT_OK(kiln_network_set_attr_int(net, a, "kv_num_heads", HKV));
        }
        if (causal)
            KT_OK(kiln_network_set_attr_int(net, a, "is_causal", 1));
        if (r4) {
            perm(net, node(net, "o_t", "Transpose", 1, IN("o"), "ot"), DIMS(0, 2, 1, 3), 4);
            node(net, "merge", "Reshape", 2, IN("ot", "shape3"), "y");
        }
        KT_OK(kiln_network_mark_output(net, "y"));
        KT_OK(kiln_network_mark_output(net, "present_k"));
        KT_OK(kiln_network_mark_output(net, "present_v"));
        char what[64];
        snprintf(what, sizeof what, "ONNX Attention with past/present, case %d", c);
        kn_net *o = optimized(net);
        if (o) {
            const kn_node *at = find_op(o, KN_DOMAIN_KILN, "Attention");
            bool ok = at && count_op(o, "", "Attention") == 0 &&
                      kn_attr_int(at, "causal", 0) == (causal ? 1 : 0);
            KT_CHECK(ok);
            if (!ok) {
                fprintf(stderr, "  %s: not mapped\n", what);
                dump(o);
            }
            compare_all(net, o, what, 3);
            compare_all(net, o, what, 1);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* ONNX Attention on K and V repeated for grouped heads (transformers'
 * repeat_kv: Unsqueeze(k, 2), Expand to [B, Hkv, G, S, D], Reshape to
 * [B, H, S, D], as torch's dynamo exporter writes Llama at opset 23): the
 * attention reads the Hkv heads and the repeat goes. */
static void test_onnx_attention_repeat_kv(void) {
    enum { HKV = H / 2, G = H / HKV };
    kiln_network *net = base_net(false);
    heads(net, "x", "q", DIMS(0, 2, 1, 3), NULL);
    iconst(net, "shape4kv", 4, (const int64_t[]){0, 0, HKV, D});
    iconst(net, "ax2", 1, (const int64_t[]){2});
    iconst(net, "rep", 5, (const int64_t[]){1, HKV, G, S, D});
    iconst(net, "merged", 4, (const int64_t[]){0, H, S, D});
    for (int j = 0; j < 2; j++) {
        char w[8], mm[8], r[8], t[8], u[8], e[8], o[8];
        const char *c = j ? "v" : "k";
        snprintf(w, sizeof w, "W%s", c);
        snprintf(mm, sizeof mm, "%s_mm", c);
        snprintf(r, sizeof r, "%s_r", c);
        snprintf(t, sizeof t, "%s_t", c);
        snprintf(u, sizeof u, "%s_u", c);
        snprintf(e, sizeof e, "%s_e", c);
        snprintf(o, sizeof o, "%s", c);
        fconst(net, w, 2, DIMS(E, E / 2));
        node(net, mm, "MatMul", 2, IN("x", w), mm);
        node(net, r, "Reshape", 2, IN(mm, "shape4kv"), r);
        perm(net, node(net, t, "Transpose", 1, IN(r), t), DIMS(0, 2, 1, 3), 4);
        node(net, u, "Unsqueeze", 2, IN(t, "ax2"), u);
        node(net, e, "Expand", 2, IN(u, "rep"), e);
        node(net, o, "Reshape", 2, IN(e, "merged"), o);
    }
    int a = -1;
    const char *outs[1] = {"o"};
    KT_OK(kiln_network_add_node(net, "sdpa", "Attention", "", 23, 3, IN("q", "k", "v"), 1, outs, &a));
    perm(net, node(net, "o_t", "Transpose", 1, IN("o"), "ot"), DIMS(0, 2, 1, 3), 4);
    node(net, "merge", "Reshape", 2, IN("ot", "shape3"), "y");
    KT_OK(kiln_network_mark_output(net, "y"));
    kn_net *o = check_fused(net, "ONNX Attention on repeat_kv heads");
    if (o) {
        bool gone = count_op(o, "", "Expand") == 0;
        KT_CHECK(gone);
        if (!gone)
            dump(o);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* Swin's shifted windows: the scores of B images x G windows, [B G, H, S, S],
 * plus a bias, are viewed as [B, G, H, S, S] for a per-window mask and
 * viewed back before the Softmax. mode 0: a [1, G, 1, S, S] mask (fuses,
 * mask batch b % G); 1: a [G, 1, S, S] one (fuses); 2: a whole-batch
 * [B G, 1, 1, S] padding mask beside it (cannot be one mask read b % G:
 * stays unfused, and stays right). */
enum { G = 2 };
static kiln_network *window_net(int mode) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "xw", KILN_DTYPE_FLOAT, 4, DIMS(-1, G, S, E), NULL));
    if (mode == 2)
        KT_OK(kiln_network_add_input(net, "keepw", KILN_DTYPE_BOOL, 3, DIMS(-1, G, S), NULL));
    iconst(net, "shape4", 4, (const int64_t[]){0, 0, H, D});
    iconst(net, "shape3", 3, (const int64_t[]){0, 0, E});
    iconst(net, "rows", 3, (const int64_t[]){-1, S, E});
    node(net, "windows", "Reshape", 2, IN("xw", "rows"), "x");
    fscalar(net, "qs", 0.35f);
    heads(net, "x", "q", DIMS(0, 2, 1, 3), "qs");
    heads(net, "x", "kt", DIMS(0, 2, 3, 1), NULL);
    heads(net, "x", "v", DIMS(0, 2, 1, 3), NULL);
    node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
    fconst(net, "bias", 3, DIMS(H, S, S));
    node(net, "add_bias", "Add", 2, IN("s", "bias"), "sb");
    iconst(net, "split5", 5, (const int64_t[]){-1, G, H, S, S});
    node(net, "split", "Reshape", 2, IN("sb", "split5"), "s5");
    /* the window mask: 0 or -100 per window, so the windows differ */
    int64_t n = G * S * S;
    float *wm = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        wm[i] = (i / (S * S) + i % S + i / S % S) % 3 == 0 ? -100.f : 0.f;
    if (mode == 1)
        KT_OK(kiln_network_add_constant(net, "wmask", KILN_DTYPE_FLOAT, 4, DIMS(G, 1, S, S), wm,
                                        (size_t)n * sizeof(float)));
    else
        KT_OK(kiln_network_add_constant(net, "wmask", KILN_DTYPE_FLOAT, 5, DIMS(1, G, 1, S, S), wm,
                                        (size_t)n * sizeof(float)));
    free(wm);
    node(net, "add_window", "Add", 2, IN("s5", "wmask"), "s5m");
    iconst(net, "merge4", 4, (const int64_t[]){-1, H, S, S});
    node(net, "merge_windows", "Reshape", 2, IN("s5m", "merge4"), "sw");
    const char *sm = "sw";
    if (mode == 2) {
        iconst(net, "keeprows", 2, (const int64_t[]){-1, S});
        node(net, "keep_rows", "Reshape", 2, IN("keepw", "keeprows"), "keep");
        where_mask(net, -1e4f);
        node(net, "add_pad", "Add", 2, IN("sw", "am"), "swp");
        sm = "swp";
    }
    KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN(sm), "p"), "axis", -1));
    tail(net, "p", "v");
    return net;
}

static void test_window_mask(void) {
    static const char *const what[2] = {"Swin: [1, G, 1, S, S] window mask through a batch split",
                                        "Swin: [G, 1, S, S] window mask through a batch split"};
    for (int mode = 0; mode < 2; mode++) {
        kiln_network *net = window_net(mode);
        kn_net *o = check_fused(net, what[mode]);
        if (o) {
            const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
            KT_CHECK(a && kn_attr_int(a, "mask_batch_mod", 0) == 1 && a->n_in > 3 && a->in[3] >= 0);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
    kiln_network *net = window_net(2);
    kn_net *o = optimized(net);
    if (o) {
        KT_CHECK(count_op(o, KN_DOMAIN_KILN, "Attention") == 0 && count_op(o, "", "Softmax") == 1);
        compare(net, o, "Swin window mask beside a whole-batch mask (unfused)", 3);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

int main(void) {
    printf("seed %u\n", seed);
    rng = seed;
    test_sdpa();
    test_div_additive();
    test_masked_fill();
    test_trilu_causal();
    test_runtime_causal();
    test_past_causal();
    test_gqa();
    test_onnx_attention();
    test_onnx_attention_past();
    test_onnx_attention_repeat_kv();
    test_ms_mha();
    test_window_mask();
    return kt_finish();
}
