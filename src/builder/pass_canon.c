/* pass_canon.c - canonicalization: Identity, inference-mode Dropout,
 * Transpose by the identity permutation and Cast to the type its input
 * already has are removed, their readers rewired to the input; Sum is the
 * Adds it computes. Graph output
 * names survive: when the removed node writes a graph output, the input's
 * producer is made to write that output instead. Unless fusion is off, two
 * Transposes in a row become one, and Reshape of a Reshape reshapes the
 * original (layout ops that traced exports chain). */
#include <stdio.h>
#include <string.h>

#include "kiln/kiln_builder.h"
#include "passes.h"

/* Whether a Dropout node is an identity at inference: no training_mode
 * input, or one that is constant false, and no mask output that is read. */
static bool dropout_is_identity(const kpass *p, const kn_node *n) {
    if (n->n_in > 2 && n->in[2] >= 0) {
        double v;
        if (!kpass_const_scalar(p->net, n->in[2], &v) || v != 0.0)
            return false;
    }
    if (kn_attr_int(n, "training_mode", 0) != 0)
        return false;
    for (int j = 1; j < n->n_out; j++)
        if (n->out[j] >= 0 && n->out[j] < p->n_tensors && p->uses[n->out[j]] > 0)
            return false;
    return true;
}

static bool transpose_is_identity(const kn_node *n) {
    size_t np = 0;
    const int64_t *perm = kn_attr_ints(n, "perm", &np);
    if (!perm)
        return false; /* the default reverses the dims */
    for (size_t k = 0; k < np; k++)
        if (perm[k] != (int64_t)k)
            return false;
    return true;
}

/* Node i reads x, the output of a single-reader `op` node whose result only
 * feeds i; returns that producer or -1. */
static int sole_upstream(const kpass *p, int i, const char *op) {
    int x = p->net->nodes[i].in[0];
    int u = kpass_producer(p, x);
    if (u < 0 || kpass_sole_reader(p, x) != i || !kpass_is(&p->net->nodes[u], op) ||
        p->net->nodes[u].n_in < 1 || p->net->nodes[u].in[0] < 0)
        return -1;
    return u;
}

/* Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2[i]]). */
static kiln_status merge_transposes(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    *done = false;
    int u = sole_upstream(p, i, "Transpose");
    if (u < 0)
        return KILN_OK;
    size_t n1 = 0, n2 = 0;
    const int64_t *p1 = kn_attr_ints(&net->nodes[u], "perm", &n1);
    const int64_t *p2 = kn_attr_ints(&net->nodes[i], "perm", &n2);
    if (!p1 || !p2 || n1 != n2 || n1 > KILN_MAX_DIMS)
        return KILN_OK;
    int64_t q[KILN_MAX_DIMS];
    for (size_t k = 0; k < n2; k++) {
        if (p2[k] < 0 || (size_t)p2[k] >= n1)
            return KILN_OK;
        q[k] = p1[p2[k]];
    }
    KN_TRY(kn_node_set_ints(&net->nodes[i], "perm", q, n2));
    KN_TRY(kpass_join_name(&net->nodes[i], net->nodes[u].name));
    net->nodes[i].in[0] = net->nodes[u].in[0];
    kn_log(KILN_LOG_VERBOSE, "canonicalize: merged Transpose '%s' into '%s'",
           net->nodes[u].name, net->nodes[i].name);
    kpass_kill(p, u);
    kpass_touch(p, i);
    *done = true;
    return KILN_OK;
}

/* Reshape(Reshape(x, s1), s2) -> Reshape(x, s2) when s2 is a constant
 * without 0 entries (a 0 copies a dim of the reshaped input, which the
 * merge would change). */
static kiln_status merge_reshapes(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    *done = false;
    if (n->n_in < 2 || !kpass_is_const(net, n->in[1]))
        return KILN_OK;
    const kn_tdata *s2 = &net->tensors[n->in[1]].value;
    int64_t cnt = kpass_numel(s2);
    if (s2->rank != 1 || cnt < 0)
        return KILN_OK;
    for (int64_t k = 0; k < cnt; k++)
        if (kpass_value_int(s2, k) == 0 && !kn_attr_int(n, "allowzero", 0))
            return KILN_OK;
    int u = sole_upstream(p, i, "Reshape");
    if (u < 0)
        return KILN_OK;
    KN_TRY(kpass_join_name(&net->nodes[i], net->nodes[u].name));
    net->nodes[i].in[0] = net->nodes[u].in[0];
    kn_log(KILN_LOG_VERBOSE, "canonicalize: merged Reshape '%s' into '%s'", net->nodes[u].name,
           net->nodes[i].name);
    kpass_kill(p, u);
    kpass_touch(p, i);
    *done = true;
    return KILN_OK;
}

/* An elementwise Add/Sub/Mul/Div reading Gather(D, Expand(C, S)), D and C
 * constants, whose other operand already has the op's output shape (at
 * every profile point): the broadcast does the Expand's work, so the op
 * reads Gather(D, C) instead, which constant folding then turns into a
 * small constant. A model's default token-type or position ids (a constant
 * row expanded to the batch, then looked up in an embedding table) stop
 * costing a gather over the whole batch every run. */
static kiln_status gather_of_expanded_constant(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    *done = false;
    const kn_node *n = &net->nodes[i];
    if (n->n_in != 2 || n->n_out != 1 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0)
        return KILN_OK;
    for (int j = 0; j < 2; j++) {
        int gt = n->in[j], other = n->in[1 - j];
        int g = kpass_producer(p, gt);
        if (g < 0 || !kpass_free(p, g) || !kpass_is(&net->nodes[g], "Gather") ||
            net->nodes[g].n_in != 2 || kpass_sole_reader(p, gt) != i)
            continue;
        const kn_node *gn = &net->nodes[g];
        int d = gn->in[0], idx = gn->in[1];
        int e = idx >= 0 ? kpass_producer(p, idx) : -1;
        if (d < 0 || !kpass_is_const(net, d) || e < 0 || !kpass_is(&net->nodes[e], "Expand") ||
            net->nodes[e].n_in != 2 || net->nodes[e].in[0] < 0 ||
            !kpass_is_const(net, net->nodes[e].in[0]))
            continue;
        const kn_tdata *dv = &net->tensors[d].value, *cv = &net->tensors[net->nodes[e].in[0]].value;
        int64_t axis = kn_attr_int(gn, "axis", 0);
        if (axis < 0)
            axis += dv->rank;
        int rank = dv->rank - 1 + cv->rank;
        if (axis < 0 || axis >= dv->rank || rank < 0 || rank > KILN_MAX_DIMS)
            continue;
        KN_TRY(kpass_need_shapes(p)); /* the pattern is there: its shapes decide */
        if (p->shapes_state != 1)
            return KILN_OK;
        n = &net->nodes[i];
        int64_t dims[KILN_MAX_DIMS]; /* Gather(D, C)'s shape */
        int r = 0;
        for (int k = 0; k < axis; k++)
            dims[r++] = dv->dims[k];
        for (int k = 0; k < cv->rank; k++)
            dims[r++] = cv->dims[k];
        for (int k = (int)axis + 1; k < dv->rank; k++)
            dims[r++] = dv->dims[k];
        bool ok = true;
        for (int pt = 0; pt < p->n_points && ok; pt++) {
            const kn_tinfo *yo = kpass_shape(p, pt, n->out[0]), *xo = kpass_shape(p, pt, other);
            ok = yo && xo && yo->rank == xo->rank && yo->rank >= rank &&
                 memcmp(yo->dims, xo->dims, sizeof(int64_t) * (size_t)yo->rank) == 0;
            for (int k = 0; ok && k < rank; k++) {
                int64_t want = yo->dims[yo->rank - rank + k];
                ok = dims[k] == want || dims[k] == 1;
            }
        }
        if (!ok)
            continue;
        int t2, node;
        char hint[512];
        snprintf(hint, sizeof hint, "%s_unexpanded", net->tensors[gt].name);
        KN_TRY(kn_net_new_tensor(net, hint, &t2));
        int in2[2] = {d, net->nodes[e].in[0]};
        KN_TRY(kn_net_add_node(net, net->nodes[g].name, "Gather", "", net->nodes[g].opset, 2, in2, 1,
                               &t2, &node));
        KN_TRY(kn_node_set_int(&net->nodes[node], "axis", axis));
        net->nodes[i].in[j] = t2;
        kpass_touch(p, i);
        kpass_kill(p, g);
        kn_log(KILN_LOG_VERBOSE, "canonicalize: '%s' reads Gather '%s' of the constant indices "
               "before their Expand", net->nodes[i].name, net->nodes[node].name);
        *done = true;
        return KILN_OK;
    }
    return KILN_OK;
}

/* Sum(x0, x1, ..., xk) -> Add(...Add(Add(x0, x1), x2)..., xk), the last
 * Add writing the Sum's output (a Sum of floats adds left to right too). */
static kiln_status sum_as_adds(kpass *p, int i) {
    kn_net *net = p->net;
    int n_in = net->nodes[i].n_in, acc = net->nodes[i].in[0];
    char name[600];
    snprintf(name, sizeof name, "%s", net->nodes[i].name);
    for (int k = 1; k + 1 < n_in; k++) {
        int t, node, in2[2] = {acc, net->nodes[i].in[k]};
        char nm[640];
        snprintf(nm, sizeof nm, "%s (term %d)", name, k);
        KN_TRY(kn_net_new_tensor(net, nm, &t));
        KN_TRY(kn_net_add_node(net, nm, "Add", "", 14, 2, in2, 1, &t, &node));
        acc = t;
    }
    kn_node *n = &net->nodes[i];
    n->in[0] = acc;
    n->in[1] = n->in[n_in - 1];
    n->n_in = 2;
    KN_TRY(kpass_retype(n, "Add", "", 14));
    kpass_touch(p, i);
    kn_log(KILN_LOG_VERBOSE, "canonicalize: Sum '%s' of %d inputs is %d Add(s)", name, n_in,
           n_in - 1);
    return KILN_OK;
}

kiln_status kpass_canonicalize(kpass *p, int *changed) {
    kn_net *net = p->net;
    /* merging two layers is a fusion: not when fusion is off */
    bool fuse = !(p->b->flags & KILN_BUILDER_FLAG_NO_FUSION);
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        kn_node *n = &net->nodes[i];
        bool merged = false;
        if (fuse && kpass_is(n, "Transpose") && n->n_in == 1 && n->in[0] >= 0 &&
            !transpose_is_identity(n))
            KN_TRY(merge_transposes(p, i, &merged));
        else if (fuse && kpass_is(n, "Reshape") && n->n_in >= 1 && n->in[0] >= 0)
            KN_TRY(merge_reshapes(p, i, &merged));
        else if (kpass_is(n, "Add") || kpass_is(n, "Sub") || kpass_is(n, "Mul") ||
                 kpass_is(n, "Div"))
            KN_TRY(gather_of_expanded_constant(p, i, &merged));
        if (merged) {
            (*changed)++;
            continue;
        }
        n = &net->nodes[i];
        if (kpass_is(n, "Sum") && n->n_in >= 2 && n->n_out == 1) {
            /* Sum of two or more: the Adds it is (broadcasting alike), so
             * that residual fusion and elementwise chains see them (opset-9
             * exports write a ResNet's shortcut as Sum) */
            KN_TRY(sum_as_adds(p, i));
            (*changed)++;
            continue;
        }
        bool same_cast = false;
        if (kpass_is(n, "Cast") && n->n_in == 1 && n->in[0] >= 0) {
            /* a Cast to the type its input already has (GPT-2's export casts
             * the float softmax to float) */
            if (kpass_dtype(p, n->in[0]) == KILN_DTYPE_UNDEFINED && p->shapes_state == 0)
                KN_TRY(kpass_need_shapes(p));
            n = &net->nodes[i];
            kiln_dtype from = kpass_dtype(p, n->in[0]);
            same_cast = from != KILN_DTYPE_UNDEFINED && kn_attr_int(n, "to", 0) == (int64_t)from;
        }
        bool ident = kpass_is(n, "Identity") || (kpass_is(n, "Sum") && n->n_in == 1) || (kpass_is(n, "Dropout") && dropout_is_identity(p, n)) ||
                     (kpass_is(n, "Transpose") && transpose_is_identity(n)) || same_cast;
        if (!ident || n->n_in < 1 || n->n_out < 1 || n->in[0] < 0 || n->out[0] < 0)
            continue;
        int x = n->in[0], y = n->out[0];
        if (!p->is_output[y]) {
            kpass_replace_reads(p, y, x);
        } else {
            /* y names a graph output: let x's producer write y directly. A
             * copy of an input, a constant or another output stays. */
            int prod = kpass_producer(p, x);
            if (prod < 0 || kpass_graph_io(net, x))
                continue;
            kpass_kill(p, i);
            kpass_move_tensor(p, prod, x, y);
        }
        kn_log(KILN_LOG_VERBOSE, "canonicalize: removed %s '%s'", n->op_type, n->name);
        kpass_kill(p, i);
        (*changed)++;
    }
    return KILN_OK;
}
