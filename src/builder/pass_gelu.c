/* pass_gelu.c - GELU as older exports spell it becomes one Gelu node (opset
 * 20 semantics), which bias-activation fusion then folds into a preceding
 * MatMul or Gemm:
 *   erf form   x * 0.5 * (1 + Erf(x / sqrt(2)))          (or x * (1/sqrt(2)))
 *   tanh form  x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
 *              (x^3 as Pow(x, 3) or x * x * x) -> Gelu(approximate="tanh")
 * with any association of the outer products, and QuickGELU (CLIP):
 *   x * Sigmoid(x * c)  (c a constant, 1.702 in CLIP) -> Swish(alpha = c)
 * (opset 24), an activation the GEMM epilogues take as well. Every
 * intermediate must have one reader and not be a graph output. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

#define GELU_MAX_NODES 12

static bool near(double v, double want) { return fabs(v - want) <= 1e-4 * fabs(want); }

/* Node i is a binary `op` with operand `t` and a constant scalar near
 * `want` (either order); returns the constant's slot or -1. */
static int binary_with_const(const kpass *p, int i, const char *op, int t, double want) {
    if (i < 0)
        return -1;
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

/* Producer of t when t's only reader is `reader`; else -1. */
static int sole_producer(const kpass *p, int t, int reader) {
    if (kpass_sole_reader(p, t) != reader)
        return -1;
    return kpass_producer(p, t);
}

typedef struct match {
    int n;
    int nodes[GELU_MAX_NODES];
    int x;
} match;

static void push(match *m, int node) { m->nodes[m->n++] = node; }

/* From the Erf / Tanh output `core` on: 0.5 * x * (1 + core). Appends the
 * nodes; the last one's output becomes the Gelu's. */
static bool match_tail(const kpass *p, match *m, int core) {
    const kn_net *net = p->net;
    int x = m->x;
    int a = kpass_sole_reader(p, core);
    if (binary_with_const(p, a, "Add", core, 1.0) < 0)
        return false;
    int av = net->nodes[a].out[0];
    int m1 = kpass_sole_reader(p, av);
    if (m1 < 0 || !kpass_is(&net->nodes[m1], "Mul"))
        return false;
    int other = other_operand(&net->nodes[m1], av);
    int m1v = net->nodes[m1].out[0];
    push(m, a);
    if (other == x) { /* (x * (1 + core)) * 0.5 */
        int m2 = kpass_sole_reader(p, m1v);
        if (binary_with_const(p, m2, "Mul", m1v, 0.5) < 0)
            return false;
        push(m, m1);
        push(m, m2);
    } else { /* (x * 0.5) * (1 + core) */
        int h = sole_producer(p, other, m1);
        if (binary_with_const(p, h, "Mul", x, 0.5) < 0)
            return false;
        push(m, h);
        push(m, m1);
    }
    return true;
}

/* Erf(x / sqrt(2)) or Erf(x * (1/sqrt(2))). */
static bool match_erf(const kpass *p, int erf, match *m) {
    const kn_net *net = p->net;
    const kn_node *en = &net->nodes[erf];
    if (en->n_in != 1 || en->n_out < 1 || en->out[0] < 0)
        return false;
    int d = sole_producer(p, en->in[0], erf);
    if (d < 0 || net->nodes[d].n_in != 2)
        return false;
    const kn_node *dn = &net->nodes[d];
    int x = -1;
    if (binary_with_const(p, d, "Div", dn->in[0], sqrt(2.0)) == 1)
        x = dn->in[0];
    else if (binary_with_const(p, d, "Mul", dn->in[0], sqrt(0.5)) == 1)
        x = dn->in[0];
    else if (binary_with_const(p, d, "Mul", dn->in[1], sqrt(0.5)) == 0)
        x = dn->in[1];
    if (x < 0 || kpass_is_const(net, x))
        return false;
    m->x = x;
    push(m, d);
    push(m, erf);
    return match_tail(p, m, en->out[0]);
}

/* x^3 read only by `reader`: Pow(x, 3) or x * x * x. */
static bool match_cube(const kpass *p, int t, int x, int reader, match *m) {
    const kn_net *net = p->net;
    int c = sole_producer(p, t, reader);
    if (c < 0)
        return false;
    if (binary_with_const(p, c, "Pow", x, 3.0) == 1) {
        push(m, c);
        return true;
    }
    const kn_node *cn = &net->nodes[c];
    int sq = other_operand(cn, x);
    if (!kpass_is(cn, "Mul") || sq < 0)
        return false;
    int s = sole_producer(p, sq, c);
    if (s < 0 || !kpass_is(&net->nodes[s], "Mul") || net->nodes[s].n_in != 2 ||
        net->nodes[s].in[0] != x || net->nodes[s].in[1] != x)
        return false;
    push(m, s);
    push(m, c);
    return true;
}

/* Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)). */
static bool match_tanh(const kpass *p, int th, match *m) {
    const kn_net *net = p->net;
    const kn_node *tn = &net->nodes[th];
    if (tn->n_in != 1 || tn->n_out < 1 || tn->out[0] < 0)
        return false;
    const double k = 0.7978845608028654; /* sqrt(2 / pi) */
    int s = sole_producer(p, tn->in[0], th);
    if (s < 0 || net->nodes[s].n_in != 2)
        return false;
    int inner = -1;
    for (int j = 0; j < 2 && inner < 0; j++)
        if (binary_with_const(p, s, "Mul", net->nodes[s].in[j], k) == 1 - j)
            inner = net->nodes[s].in[j];
    int a = inner >= 0 ? sole_producer(p, inner, s) : -1;
    if (a < 0 || !kpass_is(&net->nodes[a], "Add") || net->nodes[a].n_in != 2)
        return false;
    /* one addend is x, the other 0.044715 * x^3 */
    for (int j = 0; j < 2; j++) {
        int x = net->nodes[a].in[j], cubed = net->nodes[a].in[1 - j];
        int c = sole_producer(p, cubed, a);
        if (c < 0 || kpass_is_const(net, x) || net->nodes[c].n_in != 2)
            continue;
        int cube = -1;
        for (int q = 0; q < 2 && cube < 0; q++)
            if (binary_with_const(p, c, "Mul", net->nodes[c].in[q], 0.044715) == 1 - q)
                cube = net->nodes[c].in[q];
        if (cube < 0)
            continue;
        match save = *m;
        m->x = x;
        if (match_cube(p, cube, x, c, m)) {
            push(m, c);
            push(m, a);
            push(m, s);
            push(m, th);
            if (match_tail(p, m, tn->out[0]))
                return true;
        }
        *m = save;
    }
    return false;
}

/* approx NULL: QuickGELU, Swish(alpha). */
static kiln_status replace(kpass *p, const match *m, const char *approx, double alpha) {
    kn_net *net = p->net;
    char name[1024];
    size_t len = 0;
    name[0] = 0;
    for (int k = 0; k < m->n && len < sizeof name; k++) {
        int w = snprintf(name + len, sizeof name - len, "%s%s", k ? " + " : "",
                         net->nodes[m->nodes[k]].name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    int y = net->nodes[m->nodes[m->n - 1]].out[0];
    int in[1] = {m->x}, out[1] = {y}, gi;
    for (int k = 0; k < m->n; k++)
        kpass_kill(p, m->nodes[k]);
    if (!approx) {
        KN_TRY(kn_net_add_node(net, name, "Swish", "", 24, 1, in, 1, out, &gi));
        KN_TRY(kn_node_set_float(&net->nodes[gi], "alpha", (float)alpha));
        kn_log(KILN_LOG_VERBOSE, "gelu: '%s' -> Swish", name);
        return KILN_OK;
    }
    KN_TRY(kn_net_add_node(net, name, "Gelu", "", 20, 1, in, 1, out, &gi));
    KN_TRY(kn_node_set_string(&net->nodes[gi], "approximate", approx));
    kn_log(KILN_LOG_VERBOSE, "gelu: '%s' -> Gelu (%s)", name, approx);
    return KILN_OK;
}

/* x * Sigmoid(x * c) from the Sigmoid node sg; *alpha gets c. */
static bool match_quick(const kpass *p, int sg, match *m, double *alpha) {
    const kn_net *net = p->net;
    const kn_node *sn = &net->nodes[sg];
    if (sn->n_in != 1 || sn->n_out < 1 || sn->out[0] < 0)
        return false;
    int g = sole_producer(p, sn->in[0], sg);
    if (g < 0 || !kpass_is(&net->nodes[g], "Mul") || net->nodes[g].n_in != 2)
        return false;
    const kn_node *gn = &net->nodes[g];
    int x = -1;
    for (int s = 0; s < 2 && x < 0; s++)
        if (kpass_const_scalar(net, gn->in[s], alpha) && !kpass_is_const(net, gn->in[1 - s]))
            x = gn->in[1 - s];
    if (x < 0 || !(*alpha > 0.0) || fabs(*alpha - 1.0) < 1e-6) /* c = 1 is Silu's own pattern */
        return false;
    int mu = kpass_sole_reader(p, sn->out[0]);
    if (mu < 0 || !kpass_is(&net->nodes[mu], "Mul") || other_operand(&net->nodes[mu], sn->out[0]) != x)
        return false;
    m->x = x;
    push(m, g);
    push(m, sg);
    push(m, mu);
    return true;
}

kiln_status kpass_gelu(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        const kn_node *n = &net->nodes[i];
        bool erf = kpass_is(n, "Erf"), th = kpass_is(n, "Tanh");
        match m;
        memset(&m, 0, sizeof m);
        double alpha;
        if (kpass_is(n, "Sigmoid") && match_quick(p, i, &m, &alpha)) {
            kiln_dtype qt = kpass_dtype(p, m.x);
            if (qt != KILN_DTYPE_FLOAT && qt != KILN_DTYPE_FLOAT16 && qt != KILN_DTYPE_BFLOAT16 &&
                qt != KILN_DTYPE_UNDEFINED)
                continue;
            KN_TRY(replace(p, &m, NULL, alpha));
            (*changed)++;
            continue;
        }
        if (!erf && !th)
            continue;
        if (!(erf ? match_erf(p, i, &m) : match_tanh(p, i, &m)))
            continue;
        kiln_dtype dt = kpass_dtype(p, m.x);
        if (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_UNDEFINED && dt != KILN_DTYPE_FLOAT16 &&
            dt != KILN_DTYPE_BFLOAT16 && dt != KILN_DTYPE_DOUBLE)
            continue;
        KN_TRY(replace(p, &m, erf ? "none" : "tanh", 0.0));
        (*changed)++;
    }
    return KILN_OK;
}
