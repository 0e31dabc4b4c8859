/* pass_shape.c - Shape nodes read the earliest tensor that decides their
 * answer. Traced exports compute reshape targets from Shape(t) of tensors
 * deep inside a layout chain (torch's MultiheadAttention reads the shape of
 * its transposed input and of its packed projection). A Shape reader keeps
 * t's producer alive even when every other reader is fused away, and a
 * fusion that needs the chain to itself (pass_mha.c) cannot take it. So
 * Shape(t) moves up, as long as t's dims are a known function of an earlier
 * tensor x's:
 *   - Transpose(x, perm):          Gather(Shape(x), perm[start:end])
 *   - an op whose output has its one non-constant input x's shape (Cast,
 *     unary and elementwise ops with constant operands, Softmax,
 *     LayerNormalization) at every profile point: Shape(x)
 *   - MatMul or Gemm of x by a constant matrix W: Shape(x) for dims before
 *     the last, with W's column count appended when the range covers it;
 *   - a part of Split(x): Shape(x), with the part's (static) size on the
 *     split axis;
 *   - Gather(data, x) with data's shape static: data's dims around x's;
 *   - Reshape, Flatten, Squeeze, Unsqueeze of x: dim by dim, x's dim at the
 *     same position where it is that dim at every profile point, else the
 *     dim's static value.
 * The results are shape-time values (host arithmetic on Shape), so no step
 * of the plan runs them on the device. */
#include <stdio.h>
#include <string.h>

#include "graph/ops_tensor.h"
#include "passes.h"

/* Ops whose output always has their first input's shape. */
static bool keeps_shape(const kn_node *n) {
    static const char *const ops[] = {"Cast", "Softmax", "LogSoftmax", "LayerNormalization",
                                      "Identity", "Dropout"};
    for (size_t k = 0; k < KN_ARRAY_LEN(ops); k++)
        if (kpass_is(n, ops[k]))
            return true;
    return !n->domain[0] && kpass_chain_op_arity(n->op_type) > 0;
}

/* The one input of n that is not a constant, or -1. */
static int sole_variable_input(const kn_net *net, const kn_node *n) {
    int x = -1;
    for (int j = 0; j < n->n_in; j++) {
        if (n->in[j] < 0 || kpass_is_const(net, n->in[j]))
            continue;
        if (x >= 0)
            return -1;
        x = n->in[j];
    }
    return x;
}

/* Whether dim `ax` of t is the same at every profile point (*st's dims[ax]
 * gets it). */
static bool part_static(const kpass *p, int t, int ax, kn_tinfo *st) {
    const kn_tinfo *t0 = kpass_shape(p, 0, t);
    if (!t0 || p->dd[t])
        return false;
    for (int k = 1; k < p->n_points; k++) {
        const kn_tinfo *tk = kpass_shape(p, k, t);
        if (!tk || tk->dims[ax] != t0->dims[ax])
            return false;
    }
    *st = *t0;
    return true;
}

/* y = the parts (1-D int64 tensors) one after another: Identity of one,
 * Concat of more. */
static kiln_status join_parts(kn_net *net, const char *name, const char *what, const int *parts,
                              int np, int y) {
    char cname[600];
    int c;
    snprintf(cname, sizeof cname, "%s (%s)", name, what);
    if (np == 1)
        return kn_net_add_node(net, cname, "Identity", "", 13, 1, parts, 1, &y, &c);
    KN_TRY(kn_net_add_node(net, cname, "Concat", "", 13, np, parts, 1, &y, &c));
    return kn_node_set_int(&net->nodes[c], "axis", 0);
}

/* A Shape node on x reporting [start, end), written to tensor `out` (-1: a
 * fresh one); *t gets the tensor. */
static kiln_status add_shape(kn_net *net, const char *name, int x, int start, int end, int rank,
                             int out, int *t) {
    if (out < 0)
        KN_TRY(kn_net_new_tensor(net, "shape_part", &out));
    int node;
    KN_TRY(kn_net_add_node(net, name, "Shape", "", 15, 1, &x, 1, &out, &node));
    if (start != 0)
        KN_TRY(kn_node_set_int(&net->nodes[node], "start", start));
    if (end != rank)
        KN_TRY(kn_node_set_int(&net->nodes[node], "end", end));
    *t = out;
    return KILN_OK;
}

static kiln_status sink(kpass *p, int si, bool *done) {
    kn_net *net = p->net;
    *done = false;
    const kn_node *s = &net->nodes[si];
    int t = s->in[0], y = s->out[0];
    if (t < 0 || y < 0 || kpass_is_const(net, t) || kpass_graph_io(net, t))
        return KILN_OK;
    int pr = kpass_producer(p, t);
    int rank = kpass_rank(p, t);
    if (pr < 0 || rank < 1)
        return KILN_OK;
    const kn_node *n = &net->nodes[pr];
    int64_t a64, e64;
    kn_shape_window(s, rank, &a64, &e64);
    int a = (int)a64, e = (int)e64;
    char name[512];
    size_t nl = strlen(s->name), sl = strlen(" (moved up)");
    bool moved = nl >= sl && strcmp(s->name + nl - sl, " (moved up)") == 0;
    snprintf(name, sizeof name, moved ? "%s" : "%s (moved up)", s->name);
    /* for the log: adding nodes below may move the node array */
    char what[600];
    snprintf(what, sizeof what, "'%s' reads the shape before %s '%s'", s->name, n->op_type, n->name);
    if (kpass_is(n, "Transpose") && n->n_in == 1 && n->in[0] >= 0) {
        size_t np = 0;
        const int64_t *perm = kn_attr_ints(n, "perm", &np);
        int64_t idx[KILN_MAX_DIMS];
        if (e <= a || (perm && np != (size_t)rank) || rank > KILN_MAX_DIMS)
            return KILN_OK;
        for (int k = a; k < e; k++)
            idx[k - a] = perm ? perm[k] : rank - 1 - k;
        int x = n->in[0], sx, it, g;
        KN_TRY(add_shape(net, name, x, 0, rank, rank, -1, &sx));
        KN_TRY(kpass_add_i64(net, "shape_perm", idx, e - a, &it));
        int in2[2] = {sx, it};
        char gname[600];
        snprintf(gname, sizeof gname, "%s (permuted)", name);
        KN_TRY(kn_net_add_node(net, gname, "Gather", "", 13, 2, in2, 1, &y, &g));
        KN_TRY(kn_node_set_int(&net->nodes[g], "axis", 0));
    } else if (keeps_shape(n)) {
        int x = sole_variable_input(net, n);
        if (x < 0 || kpass_rank(p, x) != rank || !kpass_same_shape(p, x, t))
            return KILN_OK;
        int ty;
        KN_TRY(add_shape(net, name, x, a, e, rank, y, &ty));
    } else if (kpass_matrix_rows(net, n) && kpass_rank(p, n->in[0]) == rank && rank >= 2) {
        int x = n->in[0], ty;
        if (e <= rank - 1) {
            KN_TRY(add_shape(net, name, x, a, e, rank, y, &ty));
        } else {
            /* the leading dims of x, then W's column count */
            int lead = -1, cols;
            const kn_tdata *w = &net->tensors[n->in[1]].value;
            int64_t ncol = kn_attr_int(n, "transB", 0) ? w->dims[0] : w->dims[1];
            if (a < rank - 1)
                KN_TRY(add_shape(net, name, x, a, rank - 1, rank, -1, &lead));
            KN_TRY(kpass_add_i64(net, "shape_cols", &ncol, 1, &cols));
            int in2[2] = {lead, cols};
            if (lead >= 0)
                KN_TRY(join_parts(net, name, "columns", in2, 2, y));
            else
                KN_TRY(join_parts(net, name, "columns", &cols, 1, y));
        }
    } else if (kpass_is(n, "Split") && n->n_in >= 1 && n->in[0] >= 0 &&
               kpass_rank(p, n->in[0]) == rank) {
        /* a part of x: x's dims, the split axis's part size in between */
        int x = n->in[0], ty;
        int64_t ax = kn_attr_int(n, "axis", 0);
        if (ax < 0)
            ax += rank;
        if (ax < 0 || ax >= rank)
            return KILN_OK;
        if (e <= ax || a > ax) {
            KN_TRY(add_shape(net, name, x, a, e, rank, y, &ty));
        } else {
            kn_tinfo st;
            if (!kpass_static_shape(p, t, &st) && !part_static(p, t, (int)ax, &st))
                return KILN_OK;
            int parts[3], np = 0;
            if (a < ax)
                KN_TRY(add_shape(net, name, x, a, (int)ax, rank, -1, &parts[np++]));
            KN_TRY(kpass_add_i64(net, "shape_part", &st.dims[ax], 1, &parts[np++]));
            if (ax + 1 < e)
                KN_TRY(add_shape(net, name, x, (int)ax + 1, e, rank, -1, &parts[np++]));
            KN_TRY(join_parts(net, name, "split part", parts, np, y));
        }
    } else if (kpass_is(n, "Gather") && n->n_in == 2 && n->in[0] >= 0 && n->in[1] >= 0 &&
               !kpass_is_const(net, n->in[1])) {
        /* data [.., axis, ..] at indices idx: data's dims before the axis,
         * idx's dims, data's dims after it; data's must be static */
        int data = n->in[0], idx = n->in[1], dr = kpass_rank(p, data), ir = kpass_rank(p, idx);
        int64_t ax = kn_attr_int(n, "axis", 0);
        kn_tinfo ds;
        if (ax < 0)
            ax += dr;
        if (dr < 1 || ir < 0 || ax < 0 || ax >= dr || dr - 1 + ir != rank || e <= a ||
            !(kpass_is_const(net, data) ? (ds.rank = net->tensors[data].value.rank,
                                           memcpy(ds.dims, net->tensors[data].value.dims, sizeof ds.dims), true)
                                        : kpass_static_shape(p, data, &ds)))
            return KILN_OK;
        int parts[3], np = 0;
        int i0 = (int)ax, i1 = (int)ax + ir; /* idx's dims in the output */
        if (a < i0)
            KN_TRY(kpass_add_i64(net, "shape_part", ds.dims + a, (e < i0 ? e : i0) - a, &parts[np++]));
        int b0 = a > i0 ? a : i0, b1 = e < i1 ? e : i1;
        if (b1 > b0)
            KN_TRY(add_shape(net, name, idx, b0 - i0, b1 - i0, ir, -1, &parts[np++]));
        if (e > i1) {
            int c0 = a > i1 ? a : i1;
            KN_TRY(kpass_add_i64(net, "shape_part", ds.dims + (c0 - i1) + ax + 1, e - c0, &parts[np++]));
        }
        KN_TRY(join_parts(net, name, "gathered", parts, np, y));
    } else if ((kpass_is(n, "Reshape") || kpass_is(n, "Flatten") || kpass_is(n, "Squeeze") ||
                kpass_is(n, "Unsqueeze")) && n->n_in >= 1 && n->in[0] >= 0) {
        /* dim by dim: x's dim at the same position where it is that one at
         * every profile point, else a static value */
        int x = n->in[0], parts[KILN_MAX_DIMS], np = 0;
        int xr = kpass_rank(p, x);
        if (xr < 1 || e <= a)
            return KILN_OK;
        int64_t vals[KILN_MAX_DIMS];
        bool from_x[KILN_MAX_DIMS];
        for (int d = a; d < e; d++) {
            bool same = d < xr, fixed = true;
            const kn_tinfo *t0 = kpass_shape(p, 0, t);
            vals[d] = t0->dims[d];
            for (int k = 0; k < p->n_points; k++) {
                const kn_tinfo *tk = kpass_shape(p, k, t), *xk = kpass_shape(p, k, x);
                same = same && xk && tk->dims[d] == xk->dims[d];
                fixed = fixed && tk->dims[d] == vals[d];
            }
            if (p->dd[t] || p->dd[x] || (!same && !fixed))
                return KILN_OK;
            from_x[d] = !fixed;
        }
        bool any_x = false;
        for (int d = a; d < e; d++)
            any_x |= from_x[d];
        if (!any_x)
            return KILN_OK; /* constant folding's case */
        for (int d = a; d < e;) {
            int d1 = d + 1;
            while (d1 < e && from_x[d1] == from_x[d])
                d1++;
            if (from_x[d])
                KN_TRY(add_shape(net, name, x, d, d1, xr, -1, &parts[np++]));
            else
                KN_TRY(kpass_add_i64(net, "shape_part", &vals[d], d1 - d, &parts[np++]));
            d = d1;
        }
        KN_TRY(join_parts(net, name, "by dim", parts, np, y));
    } else {
        return KILN_OK;
    }
    kn_log(KILN_LOG_VERBOSE, "shape-sink: %s", what);
    kpass_kill(p, si);
    *done = true;
    return KILN_OK;
}

static bool is_shape(const kn_node *n) { return kpass_is(n, "Shape"); }

kiln_status kpass_shape_sink(kpass *p, int *changed) {
    bool ready;
    KN_TRY(kpass_shapes_if(p, is_shape, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i) || !is_shape(&p->net->nodes[i]) || p->net->nodes[i].n_in < 1 ||
            p->net->nodes[i].n_out < 1)
            continue;
        bool done;
        KN_TRY(sink(p, i, &done));
        if (done)
            (*changed)++;
    }
    return KILN_OK;
}
