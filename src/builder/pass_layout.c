/* pass_layout.c - channels-last activations for 2-D convolutions.
 *
 * GPU convolution libraries run float16/bfloat16 convolutions on tensor
 * cores in channels-last order (NHWC); ONNX graphs are channels-first
 * (NCHW). Rather than reorder around every convolution, this pass moves
 * whole regions to NHWC: each eligible Conv becomes kiln::Conv with
 * channels_last = 1 (its weights reordered to [K, R, S, C/g], which folding
 * makes a constant), and the ops between convolutions follow when every 4-D
 * input they read is already available in NHWC:
 *   MaxPool / AveragePool (no Indices)  -> kiln::MaxPool / kiln::AveragePool
 *   GlobalAveragePool / GlobalMaxPool   -> ReduceMean / ReduceMax over H, W
 *   ReduceMean / ReduceMax over exactly H and W with kept dims (what the
 *     dynamo exporter writes for adaptive_avg_pool2d(1)): the same
 *   elementwise ops, kiln::ElementwiseChain, Cast: as they are (other
 *   inputs must be single values).
 *   Concat of NHWC tensors only: its axis moved to the NHWC one.
 * A reformat step (Transpose, or Reshape when H = W = 1) is added where an
 * NCHW tensor enters a region and where an NHWC tensor is read by anything
 * outside it or is a graph output; the original tensor keeps its name and
 * NCHW shape, so graph outputs and other readers see no change. Reformats
 * nobody reads are removed by dead-code elimination.
 *
 * The model's own layout changes meet the region's (ConvNeXt permutes to
 * channels-last around each LayerNorm and back before the residual Add):
 *   Transpose perm [0,2,3,1] of a tensor with an NHWC twin is that twin, so
 *     its readers read the twin and the Transpose goes;
 *   Transpose perm [0,3,1,2] of any 4-D tensor s makes an NCHW tensor whose
 *     NHWC twin is s itself, so the region goes on through its readers (the
 *     Transpose becomes the pass's own reformat, removed when nothing
 *     outside the region reads it).
 *
 * Runs late (after the precision pass, which decides the types): on the CUDA
 * backend for float16/bfloat16 convolutions unless fusion is off, on the CPU
 * backend with oneDNN for float convolutions unless fusion is off, and on any
 * backend for every float convolution with KILN_BUILDER_FLAG_CHANNELS_LAST. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "kiln/kiln_builder.h"
#include "passes.h"

typedef struct layout {
    kpass *p;
    bool force;   /* every float convolution (the flag, or the CPU's oneDNN) */
    int *nh;      /* per original tensor: its NHWC twin, or -1 */
    int changed;
} layout;

/* The elementwise ops chains take (pass_chain.c), plus those no chain
 * takes but that are as indifferent to layout. */
static bool is_unary(const kn_node *n) {
    static const char *const more[] = {"Cast", "Identity", "Not", "IsNaN", "IsInf"};
    if (n->domain[0] == 0 && kpass_chain_op_arity(n->op_type) == 1)
        return true;
    for (size_t k = 0; k < KN_ARRAY_LEN(more); k++)
        if (kpass_is(n, more[k]))
            return true;
    return false;
}

static bool is_binary(const kn_node *n) {
    static const char *const more[] = {"Sum", "Mean", "Where", "Equal", "Less", "Greater",
                                       "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"};
    if (n->domain[0] == 0 && kpass_chain_op_arity(n->op_type) == 2)
        return true;
    for (size_t k = 0; k < KN_ARRAY_LEN(more); k++)
        if (kpass_is(n, more[k]))
            return true;
    return kpass_is_kiln(n, "ElementwiseChain");
}

/* Rank-4 at every profile point with a known shape. */
static bool is_4d(const kpass *p, int t) { return t >= 0 && kpass_rank(p, t) == 4; }

/* Whether t holds one value at every profile point. */
static bool is_single(const kpass *p, int t) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *s = kpass_shape(p, k, t);
        if (!s || kn_numel(s->rank, s->dims) != 1)
            return false;
    }
    return true;
}

/* Whether t's dims 2.. are all 1 at every point and its dim 1 is fixed:
 * then NCHW <-> NHWC is a Reshape. *c gets dim 1. */
static bool unit_spatial(const kpass *p, int t, int64_t *c) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *s = kpass_shape(p, k, t);
        if (!s || s->rank != 4 || s->dims[2] != 1 || s->dims[3] != 1 ||
            (k > 0 && s->dims[1] != *c))
            return false;
        *c = s->dims[1];
    }
    return p->n_points > 0;
}

static bool conv_eligible(const layout *l, const kn_node *n) {
    const kpass *p = l->p;
    if (!(kpass_is(n, "Conv") || kpass_is_kiln(n, "Conv")) || n->n_in < 2 || n->n_out != 1 ||
        kn_attr_int(n, "channels_last", 0) != 0)
        return false;
    if (!is_4d(p, n->in[0]) || !is_4d(p, n->in[1]))
        return false;
    kiln_dtype t = kpass_dtype(p, n->in[0]);
    if (t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16)
        return true;
    return l->force && t == KILN_DTYPE_FLOAT;
}

static const int64_t PERM_LAST[4] = {0, 2, 3, 1}, PERM_FIRST[4] = {0, 3, 1, 2};

/* A reformat of tensor `from` into tensor `to`: NCHW -> NHWC (to_last) or
 * back, as a Transpose or, for unit spatial dims, a Reshape. `orig` is the
 * NCHW tensor of the pair (whose shapes the pass knows). */
static kiln_status add_reformat(layout *l, int from, int to, int orig, bool to_last) {
    kn_net *net = l->p->net;
    char name[512];
    snprintf(name, sizeof name, "reformat %s %s", to_last ? "NCHW->NHWC" : "NHWC->NCHW",
             net->tensors[orig].name);
    int64_t c = 0;
    int idx;
    if (unit_spatial(l->p, orig, &c)) {
        kn_tdata v;
        int64_t four = 4;
        KN_TRY(kn_tdata_alloc(&v, KILN_DTYPE_INT64, 1, &four));
        int64_t shape_last[4] = {0, 1, 1, c}, shape_first[4] = {0, c, 1, 1};
        memcpy(v.data, to_last ? shape_last : shape_first, sizeof shape_last);
        int sh;
        KN_TRY(kpass_add_const(net, "reformat_shape", &v, &sh));
        int in[2] = {from, sh};
        return kn_net_add_node(net, name, "Reshape", "", 14, 2, in, 1, &to, NULL);
    }
    KN_TRY(kn_net_add_node(net, name, "Transpose", "", 13, 1, &from, 1, &to, &idx));
    return kn_node_set_ints(&net->nodes[idx], "perm", to_last ? PERM_LAST : PERM_FIRST, 4);
}

/* The NHWC twin of original tensor t, made on first use. */
static kiln_status nhwc_of(layout *l, int t, int *out) {
    if (l->nh[t] < 0) {
        char hint[512];
        snprintf(hint, sizeof hint, "%s_nhwc", l->p->net->tensors[t].name);
        int u;
        KN_TRY(kn_net_new_tensor(l->p->net, hint, &u));
        KN_TRY(add_reformat(l, t, u, t, true));
        l->nh[t] = u;
    }
    *out = l->nh[t];
    return KILN_OK;
}

/* Node i now writes an NHWC twin of its output; the original tensor is
 * made from it by a reformat (removed later if nothing reads it). */
static kiln_status redirect_output(layout *l, int i) {
    kn_net *net = l->p->net;
    int y = net->nodes[i].out[0];
    char hint[512];
    snprintf(hint, sizeof hint, "%s_nhwc", net->tensors[y].name);
    int u;
    KN_TRY(kn_net_new_tensor(net, hint, &u));
    kpass_set_output(net, i, 0, u);
    l->nh[y] = u;
    return add_reformat(l, u, y, y, false);
}

static kiln_status convert_conv(layout *l, int i) {
    kn_net *net = l->p->net;
    int x, z = -1;
    KN_TRY(nhwc_of(l, net->nodes[i].in[0], &x));
    kn_node *n = &net->nodes[i];
    if (kpass_is_kiln(n, "Conv") && n->n_in > 3 && n->in[3] >= 0) {
        KN_TRY(nhwc_of(l, n->in[3], &z));
        n = &net->nodes[i];
    }
    /* weights: [K, C/g, R, S] -> [K, R, S, C/g] (folded when constant) */
    int w = n->in[1], wl;
    char hint[512];
    snprintf(hint, sizeof hint, "%s_krsc", net->tensors[w].name);
    KN_TRY(kn_net_new_tensor(net, hint, &wl));
    char name[512];
    snprintf(name, sizeof name, "reformat KCRS->KRSC %s", net->tensors[w].name);
    int t;
    KN_TRY(kn_net_add_node(net, name, "Transpose", "", 13, 1, &w, 1, &wl, &t));
    static const int64_t perm[4] = {0, 2, 3, 1};
    KN_TRY(kn_node_set_ints(&net->nodes[t], "perm", perm, 4));
    n = &net->nodes[i];
    n->in[0] = x;
    n->in[1] = wl;
    if (z >= 0)
        n->in[3] = z;
    if (kpass_is(n, "Conv"))
        KN_TRY(kpass_retype(n, "Conv", KN_DOMAIN_KILN, 1));
    KN_TRY(kn_node_set_int(&net->nodes[i], "channels_last", 1));
    return redirect_output(l, i);
}

/* The NHWC twin of tensor t, or -1 (tensors the pass made have none). */
static int twin(const layout *l, int t) { return t >= 0 && t < l->p->n_tensors ? l->nh[t] : -1; }

static bool is_perm(const kn_node *n, const int64_t want[4]) {
    size_t k = 0;
    const int64_t *perm = kpass_is(n, "Transpose") && n->n_in == 1 && n->n_out == 1
                              ? kn_attr_ints(n, "perm", &k)
                              : NULL;
    return perm && k == 4 && memcmp(perm, want, sizeof(int64_t) * 4) == 0;
}

/* The model's own Transposes to and from channels-last (see the top). */
static bool transpose_meets_region(layout *l, int i, kiln_status *st) {
    kpass *p = l->p;
    const kn_node *n = &p->net->nodes[i];
    int x = n->in[0], y = n->out[0];
    if (x < 0 || y < 0 || y >= p->n_tensors || !is_4d(p, x))
        return false;
    if (is_perm(n, PERM_LAST) && twin(l, x) >= 0) {
        int u = twin(l, x);
        kpass_kill(p, i);
        if (!p->is_output[y]) {
            kpass_replace_reads(p, y, u);
            return true;
        }
        /* a graph output gets its own copy of the twin */
        char name[512];
        snprintf(name, sizeof name, "%s (channels-last already)", p->net->nodes[i].name);
        *st = kn_net_add_node(p->net, name, "Identity", "", 13, 1, &u, 1, &y, NULL);
        return true;
    }
    if (is_perm(n, PERM_FIRST) && twin(l, y) < 0) {
        /* the same reformat the pass would add (a Reshape when H = W = 1) */
        l->nh[y] = x;
        kpass_kill(p, i);
        *st = add_reformat(l, x, y, y, false);
        return true;
    }
    return false;
}

/* Whether 4-D tensor t broadcasts to 4-D tensor y at every profile point
 * (each dim 1 or y's): then t's NHWC twin broadcasts to y's the same way. */
static bool broadcasts_4d(const kpass *p, int t, int y) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *a = kpass_shape(p, k, t), *b = kpass_shape(p, k, y);
        if (!a || !b || a->rank != 4 || b->rank != 4)
            return false;
        for (int d = 0; d < 4; d++)
            if (a->dims[d] != 1 && a->dims[d] != b->dims[d])
                return false;
    }
    return p->n_points > 0;
}

/* A constant of rank 1 to 4 that an elementwise op broadcasts against a 4-D
 * tensor (a per-channel scale [C, 1, 1], say): its NHWC form is its dims
 * padded to rank 4 with leading 1s, then reformatted like any tensor. */
static bool const_follows(const kn_net *net, int t) {
    if (!kpass_is_const(net, t))
        return false;
    const kn_tdata *v = &net->tensors[t].value;
    return v->rank >= 1 && v->rank <= 4 && v->data && kiln_dtype_size(v->dtype) > 0;
}

static kiln_status const_nhwc(layout *l, int t, int *out) {
    if (l->nh[t] < 0) {
        kn_net *net = l->p->net;
        const kn_tdata *v = &net->tensors[t].value;
        int src = t;
        if (v->rank < 4) { /* the same values under rank-4 dims */
            kn_tdata w;
            int64_t d[4] = {1, 1, 1, 1};
            for (int k = 0; k < v->rank; k++)
                d[4 - v->rank + k] = v->dims[k];
            KN_TRY(kn_tdata_alloc(&w, v->dtype, 4, d));
            memcpy(w.data, v->data, w.nbytes);
            char hint[512];
            snprintf(hint, sizeof hint, "%s_4d", net->tensors[t].name);
            KN_TRY(kpass_add_const(net, hint, &w, &src));
        }
        /* the region's own reformat, which folding turns into a constant */
        char hint[512];
        snprintf(hint, sizeof hint, "%s_nhwc", net->tensors[t].name);
        int u;
        KN_TRY(kn_net_new_tensor(net, hint, &u));
        KN_TRY(add_reformat(l, src, u, t, true));
        l->nh[t] = u;
    }
    *out = l->nh[t];
    return KILN_OK;
}

/* Whether every 4-D input of node i has an NHWC twin (at least one does)
 * and every other input is a single value or, for binary ops, a constant
 * that broadcasts against the rest. */
static bool inputs_follow(const layout *l, const kn_node *n, bool binary) {
    const kpass *p = l->p;
    int y = n->out[0];
    bool any = false;
    for (int j = 0; j < n->n_in; j++) {
        int t = n->in[j];
        if (t < 0)
            continue;
        if (is_4d(p, t) && twin(l, t) >= 0) {
            if (binary && !kpass_same_shape(p, t, y) && !broadcasts_4d(p, t, y))
                return false;
            any = true;
        } else if (!is_single(p, t) && !(binary && t < p->n_tensors && const_follows(p->net, t))) {
            return false;
        }
    }
    return any;
}

/* ReduceMean / ReduceMax of a 4-D tensor over exactly its two spatial axes
 * with kept dims: a global pool, whichever spelling (axes as the attribute
 * before opset 18, as a constant input from 18; negative or not). */
static bool spatial_reduce(const kpass *p, const kn_node *n) {
    if (!(kpass_is(n, "ReduceMean") || kpass_is(n, "ReduceMax")) || n->n_in < 1 ||
        kn_attr_int(n, "keepdims", 1) != 1 || kn_attr_int(n, "noop_with_empty_axes", 0) != 0)
        return false;
    int64_t ax[2];
    size_t na = 0;
    if (n->n_in >= 2 && n->in[1] >= 0) {
        if (!kpass_is_const(p->net, n->in[1]))
            return false;
        const kn_tdata *v = &p->net->tensors[n->in[1]].value;
        if (kpass_numel(v) != 2)
            return false;
        ax[0] = kpass_value_int(v, 0);
        ax[1] = kpass_value_int(v, 1);
    } else {
        const int64_t *axes = kn_attr_ints(n, "axes", &na);
        if (!axes || na != 2)
            return false;
        ax[0] = axes[0];
        ax[1] = axes[1];
    }
    bool seen[4] = {false, false, false, false};
    for (int k = 0; k < 2; k++) {
        int64_t a = ax[k] < 0 ? ax[k] + 4 : ax[k];
        if (a < 2 || a > 3 || seen[a])
            return false;
        seen[a] = true;
    }
    return true;
}

static kiln_status convert_follower(layout *l, int i) {
    kn_net *net = l->p->net;
    kn_node *n = &net->nodes[i];
    bool reduce = spatial_reduce(l->p, n);
    if (reduce)
        n->n_in = 1; /* the axes become an attribute (opset 13) below */
    for (int j = 0; j < n->n_in; j++) {
        int t = n->in[j];
        if (twin(l, t) >= 0 && !kpass_is_const(net, t)) {
            n->in[j] = twin(l, t);
        } else if (t >= 0 && t < l->p->n_tensors && !is_single(l->p, t) && const_follows(net, t)) {
            int u;
            KN_TRY(const_nhwc(l, t, &u));
            n = &net->nodes[i];
            n->in[j] = u;
        }
    }
    if (kpass_is(n, "MaxPool") || kpass_is(n, "AveragePool")) {
        KN_TRY(kpass_retype(n, n->op_type, KN_DOMAIN_KILN, 1));
        KN_TRY(kn_node_set_int(&net->nodes[i], "channels_last", 1));
    } else if (kpass_is(n, "Concat")) {
        static const int64_t to_last[4] = {0, 3, 1, 2}; /* NCHW axis -> NHWC axis */
        int64_t axis = kn_attr_int(n, "axis", 0);
        KN_TRY(kn_node_set_int(n, "axis", to_last[axis < 0 ? axis + 4 : axis]));
    } else if (kpass_is(n, "GlobalAveragePool") || kpass_is(n, "GlobalMaxPool") || reduce) {
        bool avg = kpass_is(n, "GlobalAveragePool") || kpass_is(n, "ReduceMean");
        KN_TRY(kpass_retype(n, avg ? "ReduceMean" : "ReduceMax", "", 13));
        static const int64_t axes[2] = {1, 2};
        KN_TRY(kn_node_set_ints(&net->nodes[i], "axes", axes, 2));
        KN_TRY(kn_node_set_int(&net->nodes[i], "keepdims", 1));
    }
    return redirect_output(l, i);
}

static bool follower_kind(const layout *l, const kn_node *n) {
    const kpass *p = l->p;
    if (n->n_out < 1 || n->out[0] < 0 || !is_4d(p, n->out[0]))
        return false;
    for (int j = 1; j < n->n_out; j++)
        if (n->out[j] >= 0)
            return false; /* MaxPool Indices and other second outputs */
    if (kpass_is(n, "MaxPool") || kpass_is(n, "AveragePool") || kpass_is(n, "GlobalAveragePool") ||
        kpass_is(n, "GlobalMaxPool"))
        return n->n_in == 1 && is_4d(p, n->in[0]) && twin(l, n->in[0]) >= 0;
    if (spatial_reduce(p, n))
        return is_4d(p, n->in[0]) && twin(l, n->in[0]) >= 0;
    if (kpass_is(n, "Concat")) { /* every input NHWC already: the axis moves */
        for (int j = 0; j < n->n_in; j++)
            if (!is_4d(p, n->in[j]) || twin(l, n->in[j]) < 0)
                return false;
        int64_t axis = kn_attr_int(n, "axis", 0);
        return n->n_in >= 1 && axis >= -4 && axis < 4;
    }
    if (is_unary(n))
        return inputs_follow(l, n, false);
    if (is_binary(n))
        return inputs_follow(l, n, true);
    return false;
}

/* The CPU backend with oneDNN's convolution: its brgconv kernels prefer
 * NHWC (format_tag::any picks acdb for every ResNet-50 shape), so float
 * convolutions there run in channels-last regions by default.
 * KILN_CPU_NCHW=1 in the environment keeps the NCHW graph (for A/B runs). */
static bool cpu_fast_conv(const kpass *p) {
    const kb_backend *be = p->b->be;
    if (!be || strcmp(be->name, "cpu") != 0 || !be->kernel_find)
        return false;
    const char *off = getenv("KILN_CPU_NCHW");
    if (off && off[0] && strcmp(off, "0") != 0)
        return false;
    return be->kernel_find(KN_DOMAIN_KILN, "Conv", "dnnl") != NULL;
}

static bool enabled(const kpass *p) {
    uint32_t f = p->b->flags;
    if (f & KILN_BUILDER_FLAG_CHANNELS_LAST)
        return true;
    if (f & (KILN_BUILDER_FLAG_NO_FUSION | KILN_BUILDER_FLAG_REF_TACTICS))
        return false;
    return p->b->be && (strcmp(p->b->be->name, "cuda") == 0 || cpu_fast_conv(p));
}

kiln_status kpass_layout(kpass *p, int *changed) {
    if (!enabled(p))
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p));
    if (p->shapes_state != 1)
        return KILN_OK;
    bool force = (p->b->flags & KILN_BUILDER_FLAG_CHANNELS_LAST) != 0 || cpu_fast_conv(p);
    layout l = {p, force, NULL, 0};
    /* twins are looked up by original tensors only; new tensors index past them */
    l.nh = kn_malloc(sizeof(int) * (size_t)(p->n_tensors + 1));
    if (!l.nh)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int t = 0; t <= p->n_tensors; t++)
        l.nh[t] = -1;
    kiln_status st = KILN_OK;
    int convs = 0, others = 0;
    /* nodes are in topological order: a node's inputs are decided first */
    for (int i = 0; i < p->n_nodes && st == KILN_OK; i++) {
        const kn_node *n = &p->net->nodes[i];
        if (n->dead)
            continue;
        if (conv_eligible(&l, n)) {
            st = convert_conv(&l, i);
            convs++;
        } else if (transpose_meets_region(&l, i, &st)) {
            others++;
        } else if (follower_kind(&l, n)) {
            st = convert_follower(&l, i);
            others++;
        }
    }
    kn_free(l.nh);
    if (st != KILN_OK)
        return st;
    if (convs)
        kn_log(KILN_LOG_VERBOSE, "layout: %d convolution(s) and %d other layer(s) channels-last",
               convs, others);
    *changed += convs + others;
    return KILN_OK;
}
