/* pass_act.c - epilogue fusion into matrix ops:
 *   MatMul + Add(constant bias along the last dim)  -> kiln::MatMul(A, B, bias)
 *   Gemm without C + Add(constant broadcast to Y)   -> Gemm with C
 *   Conv + Add(residual of Y's shape)               -> kiln::Conv(X, W, B, Z)
 *   kiln::MatMul + Add(residual of Y's shape)       -> kiln::MatMul(A, B, bias, Z)
 *   MatMul(A, constant B) + Add(residual), no bias   -> kiln::MatMul(A, B, -, Z)
 *   Conv / Gemm / MatMul + activation               -> kiln::* with `activation`
 *   (x * Sigmoid(x) counts as the Silu activation, x * HardSigmoid(x) with
 *   alpha 1/6 and beta 1/2 as HardSwish).
 * Every intermediate tensor must have a single reader and not be a graph
 * output; the fused node takes the last node's output, so output names stay. */
#include <math.h>
#include <string.h>

#include "passes.h"

/* Which family node n belongs to and, for fused forms, whether it already
 * has an activation. */
typedef enum mop { MOP_NONE, MOP_CONV, MOP_GEMM, MOP_MATMUL } mop;

static mop mop_of(const kn_node *n, bool *has_act) {
    *has_act = false;
    if (n->domain[0] == 0) {
        if (strcmp(n->op_type, "Conv") == 0)
            return MOP_CONV;
        if (strcmp(n->op_type, "Gemm") == 0)
            return MOP_GEMM;
        if (strcmp(n->op_type, "MatMul") == 0)
            return MOP_MATMUL;
        return MOP_NONE;
    }
    if (strcmp(n->domain, KN_DOMAIN_KILN) != 0)
        return MOP_NONE;
    const char *act = kn_attr_string(n, "activation", "");
    *has_act = act[0] != 0;
    if (strcmp(n->op_type, "Conv") == 0)
        return MOP_CONV;
    if (strcmp(n->op_type, "Gemm") == 0)
        return MOP_GEMM;
    if (strcmp(n->op_type, "MatMul") == 0)
        return MOP_MATMUL;
    return MOP_NONE;
}

/* Element type of matrix op n's output: that of its constant weight (these
 * ops keep their input type), else inferred (which may run inference: the
 * passes here infer only once a candidate needs it). */
static kiln_status out_dtype(kpass *p, const kn_node *n, kiln_dtype *dt) {
    if (n->n_in > 1 && kpass_is_const(p->net, n->in[1])) {
        *dt = p->net->tensors[n->in[1]].value.dtype;
        return KILN_OK;
    }
    KN_TRY(kpass_need_shapes(p));
    *dt = kpass_dtype(p, n->out[0]);
    return KILN_OK;
}

/* Turn a plain op into its kiln:: form (no-op when it already is one). */
static kiln_status to_kiln(kn_node *n) {
    if (strcmp(n->domain, KN_DOMAIN_KILN) == 0)
        return KILN_OK;
    KN_TRY(kpass_retype(n, n->op_type, KN_DOMAIN_KILN, 1));
    return kn_node_set_string(n, "activation", "");
}

/* Make node `keep` write `absorbed`'s output, merge names, kill `absorbed`. */
static kiln_status absorb(kpass *p, int keep, int absorbed) {
    kn_net *net = p->net;
    KN_TRY(kpass_join_name(&net->nodes[keep], net->nodes[absorbed].name));
    kpass_set_output(net, keep, 0, net->nodes[absorbed].out[0]);
    kpass_kill(p, absorbed);
    kpass_touch(p, keep);
    return KILN_OK;
}

/* The other operand of a two-input Add reading y (not y itself), or -1. */
static int add_operand(const kn_node *a, int y) {
    if (!kpass_is(a, "Add") || a->n_in != 2 || a->n_out < 1 || a->out[0] < 0)
        return -1;
    if (a->in[0] == y && a->in[1] != y)
        return a->in[1];
    if (a->in[1] == y && a->in[0] != y)
        return a->in[0];
    return -1;
}

/* The output width N of MatMul node n, when the same at every profile point. */
static int64_t matmul_n(const kpass *p, const kn_node *n) {
    const kn_net *net = p->net;
    int b = n->in[1];
    if (kpass_is_const(net, b) && net->tensors[b].value.rank >= 2)
        return net->tensors[b].value.dims[net->tensors[b].value.rank - 1];
    if (p->shapes_state == 1) {
        int64_t v = -1;
        for (int k = 0; k < p->n_points; k++) {
            const kn_tinfo *ti = kpass_shape(p, k, n->out[0]);
            if (!ti || ti->rank < 1 || (v >= 0 && ti->dims[ti->rank - 1] != v))
                return -1;
            v = ti->dims[ti->rank - 1];
        }
        return v;
    }
    return -1;
}

/* MatMul + Add(bias) -> kiln::MatMul. */
static kiln_status fuse_matmul_bias(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    *done = false;
    if (n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0)
        return KILN_OK;
    int y = n->out[0];
    int ai = kpass_sole_reader(p, y);
    if (ai < 0)
        return KILN_OK;
    int c = add_operand(&net->nodes[ai], y);
    if (c < 0 || !kpass_is_const(net, c))
        return KILN_OK;
    const kn_tdata *v = &net->tensors[c].value;
    if (!kpass_is_const(net, n->in[1]) || v->rank > 1)
        KN_TRY(kpass_need_shapes(p));
    int64_t nn = matmul_n(p, n);
    int ry = kpass_rank(p, y);
    if (nn <= 0 || v->rank < 1 || v->dims[v->rank - 1] != nn || (ry >= 0 && v->rank > ry) ||
        (ry < 0 && v->rank != 1))
        return KILN_OK;
    for (int k = 0; k + 1 < v->rank; k++)
        if (v->dims[k] != 1)
            return KILN_OK;
    kiln_dtype dt;
    KN_TRY(out_dtype(p, n, &dt));
    if (v->dtype != KILN_DTYPE_FLOAT || dt != KILN_DTYPE_FLOAT)
        return KILN_OK;
    KN_TRY(to_kiln(&net->nodes[i]));
    KN_TRY(kpass_set_input(&net->nodes[i], 2, c));
    kn_log(KILN_LOG_VERBOSE, "bias-activation: MatMul '%s' + Add '%s' -> kiln::MatMul",
           net->nodes[i].name, net->nodes[ai].name);
    KN_TRY(absorb(p, i, ai));
    *done = true;
    return KILN_OK;
}

/* Whether constant c broadcasts onto y without changing y's shape. */
static bool broadcasts_onto(const kpass *p, const kn_tdata *c, int y) {
    if (p->shapes_state != 1)
        return false;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *ti = kpass_shape(p, k, y);
        if (!ti || c->rank > ti->rank)
            return false;
        for (int d = 0; d < c->rank; d++) {
            int64_t cd = c->dims[d], yd = ti->dims[ti->rank - c->rank + d];
            if (cd != 1 && cd != yd)
                return false;
        }
    }
    return true;
}

/* Gemm (no C) + Add(constant) -> Gemm with C. */
static kiln_status fuse_gemm_bias(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    *done = false;
    if (n->n_in > 2 && n->in[2] >= 0)
        return KILN_OK;
    int y = n->out[0];
    int ai = kpass_sole_reader(p, y);
    if (ai < 0)
        return KILN_OK;
    int c = add_operand(&net->nodes[ai], y);
    if (c < 0 || !kpass_is_const(net, c))
        return KILN_OK;
    kiln_dtype dt;
    KN_TRY(out_dtype(p, n, &dt));
    const kn_tdata *v = &net->tensors[c].value;
    if (v->dtype != dt)
        return KILN_OK;
    bool fits = false;
    if (kpass_is_const(net, n->in[1]) && net->tensors[n->in[1]].value.rank == 2) {
        /* a row of N values always fits Y = [M, N] */
        const kn_tdata *w = &net->tensors[n->in[1]].value;
        int64_t nn = kn_attr_int(n, "transB", 0) ? w->dims[0] : w->dims[1];
        fits = (v->rank == 1 && v->dims[0] == nn) || (v->rank == 2 && v->dims[0] == 1 && v->dims[1] == nn);
    }
    if (!fits) {
        KN_TRY(kpass_need_shapes(p));
        fits = broadcasts_onto(p, v, y);
    }
    if (!fits)
        return KILN_OK;
    KN_TRY(kpass_set_input(n, 2, c));
    KN_TRY(kn_node_set_float(n, "beta", 1.0f));
    kn_log(KILN_LOG_VERBOSE, "bias-activation: Gemm '%s' + Add '%s' -> Gemm with bias",
           n->name, net->nodes[ai].name);
    KN_TRY(absorb(p, i, ai));
    *done = true;
    return KILN_OK;
}

/* Conv or kiln::MatMul + Add(residual z of y's shape) -> kiln::Conv /
 * kiln::MatMul with Z (a transformer's skip connection rides the GEMM). */
static kiln_status fuse_residual(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    *done = false;
    if (n->n_in > 3 && n->in[3] >= 0)
        return KILN_OK;
    int y = n->out[0];
    int ai = kpass_sole_reader(p, y);
    if (ai < 0)
        return KILN_OK;
    int z = add_operand(&net->nodes[ai], y);
    if (z < 0)
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p));
    if (!kpass_same_shape(p, y, z) || kpass_dtype(p, z) != kpass_dtype(p, y) ||
        kpass_dtype(p, y) != KILN_DTYPE_FLOAT)
        return KILN_OK;
    KN_TRY(to_kiln(n));
    KN_TRY(kpass_set_input(&net->nodes[i], 3, z));
    kn_log(KILN_LOG_VERBOSE, "bias-activation: %s '%s' + residual Add '%s' -> kiln::%s",
           net->nodes[i].op_type, net->nodes[i].name, net->nodes[ai].name, net->nodes[i].op_type);
    KN_TRY(absorb(p, i, ai));
    *done = true;
    return KILN_OK;
}

/* Set the activation attributes; Gemm's alpha/beta are its own, so its
 * activation parameters have their own names. */
static kiln_status set_activation(kn_node *n, mop m, const char *act, float alpha, float beta) {
    KN_TRY(kn_node_set_string(n, "activation", act));
    KN_TRY(kn_node_set_float(n, m == MOP_GEMM ? "alpha_act" : "alpha", alpha));
    return kn_node_set_float(n, m == MOP_GEMM ? "beta_act" : "beta", beta);
}

/* The self-gated activation Mul(y, gate(y)) names, when gate node g is one. */
static const char *gate_act(const kn_node *g) {
    if (kpass_is(g, "Sigmoid"))
        return "Silu";
    if (kpass_is(g, "HardSigmoid") && fabsf(kn_attr_float(g, "alpha", 0.2f) - 1.f / 6.f) < 1e-6f &&
        fabsf(kn_attr_float(g, "beta", 0.5f) - 0.5f) < 1e-6f)
        return "HardSwish";
    return NULL;
}

/* y read by exactly gate(y) and Mul(y, that): returns the Mul, the gate in
 * *sig and the activation in *act; -1 if not so. */
static int silu_of(const kpass *p, int y, int *sig, const char **act) {
    const kn_net *net = p->net;
    if (y >= p->n_tensors || p->is_output[y] || p->uses[y] != 2 ||
        p->rd_start[y + 1] - p->rd_start[y] != 2)
        return -1;
    for (int s = 0; s < 2; s++) {
        int si = p->rd_node[p->rd_start[y] + s], mi = p->rd_node[p->rd_start[y] + 1 - s];
        if (!kpass_free(p, si) || !kpass_free(p, mi))
            continue;
        const kn_node *sn = &net->nodes[si], *mn = &net->nodes[mi];
        if (!gate_act(sn) || sn->n_in < 1 || sn->in[0] != y || sn->n_out < 1 ||
            !kpass_is(mn, "Mul") || mn->n_in != 2)
            continue;
        int sv = sn->out[0];
        if (kpass_sole_reader(p, sv) != mi || !((mn->in[0] == y && mn->in[1] == sv) ||
                                                (mn->in[1] == y && mn->in[0] == sv)))
            continue;
        *sig = si;
        *act = gate_act(sn);
        return mi;
    }
    return -1;
}

/* Matrix op + activation -> kiln:: op with the activation. */
static kiln_status fuse_activation(kpass *p, int i, mop m, bool *done) {
    kn_net *net = p->net;
    int y = net->nodes[i].out[0];
    *done = false;
    const char *act;
    float alpha, beta;
    int ri = kpass_sole_reader(p, y), sig = -1;
    if (ri >= 0) {
        const kn_node *r = &net->nodes[ri];
        if (r->n_in < 1 || r->in[0] != y || r->n_out < 1 || r->out[0] < 0 ||
            !kpass_activation(net, r, &act, &alpha, &beta))
            return KILN_OK;
    } else {
        ri = silu_of(p, y, &sig, &act);
        if (ri < 0)
            return KILN_OK;
        alpha = beta = 0.f;
    }
    kiln_dtype dt;
    KN_TRY(out_dtype(p, &net->nodes[i], &dt));
    if (dt != KILN_DTYPE_FLOAT)
        return KILN_OK;
    KN_TRY(to_kiln(&net->nodes[i]));
    KN_TRY(set_activation(&net->nodes[i], m, act, alpha, beta));
    kn_log(KILN_LOG_VERBOSE, "bias-activation: %s '%s' + %s -> kiln::%s", net->nodes[i].op_type,
           net->nodes[i].name, act, net->nodes[i].op_type);
    if (sig >= 0) {
        KN_TRY(kpass_join_name(&net->nodes[i], net->nodes[sig].name));
        kpass_kill(p, sig);
    }
    KN_TRY(absorb(p, i, ri));
    *done = true;
    return KILN_OK;
}

kiln_status kpass_bias_act(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool need = false;
    for (int i = 0; i < p->n_nodes && !need; i++) {
        bool a;
        need = !net->nodes[i].dead && mop_of(&net->nodes[i], &a) != MOP_NONE;
    }
    if (!need)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        kn_node *n = &net->nodes[i];
        bool has_act;
        mop m = mop_of(n, &has_act);
        if (m == MOP_NONE || has_act || n->n_out < 1 || n->out[0] < 0)
            continue;
        bool done = false;
        bool plain = n->domain[0] == 0;
        if (m == MOP_MATMUL && plain) {
            KN_TRY(fuse_matmul_bias(p, i, &done));
            /* a linear layer without a bias (a constant weight: not an
             * attention product, whose mask Add the attention pass reads)
             * still takes its skip connection into the GEMM */
            if (!done && net->nodes[i].n_in > 1 && kpass_is_const(net, net->nodes[i].in[1]))
                KN_TRY(fuse_residual(p, i, &done));
        } else if (m == MOP_GEMM && plain)
            KN_TRY(fuse_gemm_bias(p, i, &done));
        else if (m == MOP_CONV || m == MOP_MATMUL) /* kiln::MatMul: bias first */
            KN_TRY(fuse_residual(p, i, &done));
        if (!done)
            KN_TRY(fuse_activation(p, i, m, &done));
        if (done)
            (*changed)++;
    }
    return KILN_OK;
}
