/* pass_gelu.c - the erf form of GELU as older exports spell it,
 *     x * 0.5 * (1 + Erf(x / sqrt(2)))   (any association of the products,
 *     and x * (1/sqrt(2)) in place of the division),
 * becomes one Gelu node (opset 20 semantics), which bias-activation fusion
 * then folds into a preceding MatMul or Gemm. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

static bool near(double v, double want) { return fabs(v - want) <= 1e-4 * fabs(want); }

/* Node i is a binary `op` with operand `t` and a constant scalar near
 * `want` (either order); returns the constant's slot or -1. */
static int binary_with_const(const kpass *p, int i, const char *op, int t, double want) {
    const kn_node *n = &p->net->nodes[i];
    if (!kpass_is(n, op) || n->n_in != 2 || n->n_out < 1)
        return -1;
    for (int s = 0; s < 2; s++) {
        double v;
        if (n->in[1 - s] == t && kpass_const_scalar(p->net, n->in[s], &v) && near(v, want))
            return s;
    }
    return -1;
}

/* The other operand of binary node n, when one operand is t; else -1. */
static int other_operand(const kn_node *n, int t) {
    if (n->n_in != 2)
        return -1;
    if (n->in[0] == t)
        return n->in[1];
    if (n->in[1] == t)
        return n->in[0];
    return -1;
}

/* Match from the Erf node; fills the nodes of the pattern (last is the one
 * whose output the Gelu takes over) and x. Returns the count, 0 if none. */
static int match(const kpass *p, int erf, int nodes[5], int *xout) {
    const kn_net *net = p->net;
    const kn_node *en = &net->nodes[erf];
    if (!kpass_is(en, "Erf") || en->n_in != 1 || en->n_out < 1)
        return 0;
    int scaled = en->in[0];
    int d = kpass_producer(p, scaled);
    if (d < 0 || kpass_sole_reader(p, scaled) != erf)
        return 0;
    const kn_node *dn = &net->nodes[d];
    if (dn->n_in != 2)
        return 0;
    int x = dn->in[0];
    bool ok = (kpass_is(dn, "Div") && binary_with_const(p, d, "Div", x, sqrt(2.0)) == 1) ||
              (kpass_is(dn, "Mul") &&
               ((x = dn->in[0], binary_with_const(p, d, "Mul", x, sqrt(0.5)) == 1) ||
                (x = dn->in[1], binary_with_const(p, d, "Mul", x, sqrt(0.5)) == 0)));
    if (!ok || x < 0 || kpass_is_const(net, x))
        return 0;
    /* 1 + erf */
    int ev = en->out[0];
    int a = kpass_sole_reader(p, ev);
    if (a < 0 || binary_with_const(p, a, "Add", ev, 1.0) < 0)
        return 0;
    int av = net->nodes[a].out[0];
    int m1 = kpass_sole_reader(p, av);
    if (m1 < 0 || !kpass_is(&net->nodes[m1], "Mul"))
        return 0;
    int other = other_operand(&net->nodes[m1], av);
    int m1v = net->nodes[m1].out[0];
    int n = 0;
    nodes[n++] = d;
    nodes[n++] = erf;
    nodes[n++] = a;
    if (other == x) {
        /* (x * (1 + erf)) * 0.5 */
        int m2 = kpass_sole_reader(p, m1v);
        if (m2 < 0 || binary_with_const(p, m2, "Mul", m1v, 0.5) < 0)
            return 0;
        nodes[n++] = m1;
        nodes[n++] = m2;
    } else {
        /* (x * 0.5) * (1 + erf) */
        int h = kpass_producer(p, other);
        if (h < 0 || kpass_sole_reader(p, other) != m1 ||
            binary_with_const(p, h, "Mul", x, 0.5) < 0)
            return 0;
        nodes[n++] = h;
        nodes[n++] = m1;
    }
    *xout = x;
    return n;
}

kiln_status kpass_gelu(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i) || !kpass_is(&net->nodes[i], "Erf"))
            continue;
        int nodes[5], x;
        int cnt = match(p, i, nodes, &x);
        if (!cnt)
            continue;
        int last = nodes[cnt - 1];
        kiln_dtype dt = kpass_dtype(p, x);
        if (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_UNDEFINED && dt != KILN_DTYPE_FLOAT16 &&
            dt != KILN_DTYPE_BFLOAT16 && dt != KILN_DTYPE_DOUBLE)
            continue;
        /* Name: the pattern's node names joined. */
        char name[1024];
        size_t len = 0;
        name[0] = 0;
        for (int k = 0; k < cnt && len < sizeof name; k++) {
            int w = snprintf(name + len, sizeof name - len, "%s%s", k ? " + " : "",
                             net->nodes[nodes[k]].name);
            if (w < 0)
                break;
            len += (size_t)w;
        }
        int y = net->nodes[last].out[0];
        int in[1] = {x}, out[1] = {y}, gi;
        for (int k = 0; k < cnt; k++)
            kpass_kill(p, nodes[k]);
        KN_TRY(kn_net_add_node(net, name, "Gelu", "", 20, 1, in, 1, out, &gi));
        KN_TRY(kn_node_set_string(&net->nodes[gi], "approximate", "none"));
        kn_log(KILN_LOG_VERBOSE, "gelu: '%s' -> Gelu", name);
        (*changed)++;
    }
    return KILN_OK;
}
