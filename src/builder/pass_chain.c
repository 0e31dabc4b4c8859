/* pass_chain.c - elementwise-chain fusion: a run of elementwise ops, each
 * the only reader of the previous one's output, whose values all keep the
 * run's shape (other operands broadcast onto it), becomes one
 * kiln::ElementwiseChain node (encoding in graph/fused.h). One op alone is
 * left as it is. Float tensors only. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* Longest run fused into one node; longer runs become several. */
#define CHAIN_MAX_OPS 32
#define CHAIN_MAX_INPUTS 16

/* Ops the ElementwiseChain kernel evaluates: arity, and the attributes that
 * become its alpha / beta (with ONNX defaults). Clip's bounds and Gelu's
 * form are handled apart. */
typedef struct chain_op {
    const char *name;
    int arity;
    const char *alpha, *beta;
    float alpha0, beta0;
} chain_op;

static const chain_op chain_ops[] = {
    {"Add", 2, NULL, NULL, 0, 0}, {"Sub", 2, NULL, NULL, 0, 0}, {"Mul", 2, NULL, NULL, 0, 0},
    {"Div", 2, NULL, NULL, 0, 0}, {"Pow", 2, NULL, NULL, 0, 0}, {"Max", 2, NULL, NULL, 0, 0},
    {"Min", 2, NULL, NULL, 0, 0}, {"PRelu", 2, NULL, NULL, 0, 0},
    {"Abs", 1, NULL, NULL, 0, 0}, {"Neg", 1, NULL, NULL, 0, 0}, {"Sign", 1, NULL, NULL, 0, 0},
    {"Reciprocal", 1, NULL, NULL, 0, 0}, {"Floor", 1, NULL, NULL, 0, 0},
    {"Ceil", 1, NULL, NULL, 0, 0}, {"Round", 1, NULL, NULL, 0, 0}, {"Sqrt", 1, NULL, NULL, 0, 0},
    {"Exp", 1, NULL, NULL, 0, 0}, {"Log", 1, NULL, NULL, 0, 0}, {"Sin", 1, NULL, NULL, 0, 0},
    {"Cos", 1, NULL, NULL, 0, 0}, {"Erf", 1, NULL, NULL, 0, 0}, {"Tanh", 1, NULL, NULL, 0, 0},
    {"Relu", 1, NULL, NULL, 0, 0}, {"Sigmoid", 1, NULL, NULL, 0, 0},
    {"HardSwish", 1, NULL, NULL, 0, 0}, {"Softplus", 1, NULL, NULL, 0, 0},
    {"Softsign", 1, NULL, NULL, 0, 0}, {"Mish", 1, NULL, NULL, 0, 0},
    {"LeakyRelu", 1, "alpha", NULL, 0.01f, 0}, {"Elu", 1, "alpha", NULL, 1.f, 0},
    {"Celu", 1, "alpha", NULL, 1.f, 0}, {"ThresholdedRelu", 1, "alpha", NULL, 1.f, 0},
    {"Selu", 1, "alpha", "gamma", 1.67326319217681884765625f, 1.05070102214813232421875f},
    {"HardSigmoid", 1, "alpha", "beta", 0.2f, 0.5f},
    {"Clip", 1, NULL, NULL, 0, 0}, {"Gelu", 1, NULL, NULL, 0, 0},
};

int kpass_chain_op_arity(const char *op_type) {
    for (size_t i = 0; i < KN_ARRAY_LEN(chain_ops); i++)
        if (strcmp(op_type, chain_ops[i].name) == 0)
            return chain_ops[i].arity;
    return 0;
}

static const chain_op *chain_op_of(const kn_node *n) {
    if (n->domain[0] != 0 || n->n_out != 1 || n->out[0] < 0 || n->n_in < 1 || n->in[0] < 0)
        return NULL;
    for (size_t i = 0; i < KN_ARRAY_LEN(chain_ops); i++) {
        const chain_op *op = &chain_ops[i];
        if (strcmp(n->op_type, op->name) != 0)
            continue;
        if (op->arity == 2 && (n->n_in != 2 || n->in[1] < 0))
            return NULL;
        return op;
    }
    return NULL;
}

static int chain_arity(const kn_node *n) {
    const chain_op *op = chain_op_of(n);
    return op ? op->arity : 0;
}

typedef struct chain {
    int n_ops;
    int nodes[CHAIN_MAX_OPS];
    const char *ops[CHAIN_MAX_OPS];
    int64_t operand[CHAIN_MAX_OPS], swap[CHAIN_MAX_OPS];
    float alphas[CHAIN_MAX_OPS], betas[CHAIN_MAX_OPS];
    int n_x;
    int x[CHAIN_MAX_INPUTS];
} chain;

static int chain_input(chain *c, int t) {
    for (int k = 0; k < c->n_x; k++)
        if (c->x[k] == t)
            return k;
    if (c->n_x == CHAIN_MAX_INPUTS)
        return -1;
    c->x[c->n_x] = t;
    return c->n_x++;
}

/* Append node i, one of whose inputs is the running value `cur`; its other
 * operand becomes an input of the fused node. Returns false when the op
 * cannot join (shape, type, or a second read of the running value). */
static bool chain_add(const kpass *p, chain *c, int i, int cur) {
    const kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    int ar = chain_arity(n);
    if (!ar || c->n_ops == CHAIN_MAX_OPS || kpass_dtype(p, n->out[0]) != KILN_DTYPE_FLOAT ||
        !kpass_same_shape(p, n->out[0], cur))
        return false;
    int k = c->n_ops;
    const chain_op *op = chain_op_of(n);
    const char *name = op->name;
    float a = op->alpha ? kn_attr_float(n, op->alpha, op->alpha0) : 0.f;
    float b = op->beta ? kn_attr_float(n, op->beta, op->beta0) : 0.f;
    if (strcmp(name, "Clip") == 0 || strcmp(name, "Gelu") == 0) {
        if (!kpass_activation(net, n, &name, &a, &b)) /* bounds not constant, unknown form */
            return false;
    }
    int64_t operand = -1, swap = 0;
    if (ar == 2) {
        int slot = n->in[0] == cur ? 0 : (n->in[1] == cur ? 1 : -1);
        if (slot < 0)
            return false;
        int other = n->in[1 - slot];
        if (kpass_dtype(p, other) != KILN_DTYPE_FLOAT)
            return false;
        if (other == cur) {
            if (k != 0) /* the running value is no input of the fused node */
                return false;
            operand = 0;
        } else {
            int x = chain_input(c, other);
            if (x < 0)
                return false;
            operand = x;
        }
        swap = slot;
    } else if (n->in[0] != cur || (n->n_in > 1 && strcmp(name, "Clip") != 0)) {
        return false;
    }
    c->nodes[k] = i;
    c->ops[k] = name;
    c->operand[k] = operand;
    c->swap[k] = swap;
    c->alphas[k] = a;
    c->betas[k] = b;
    c->n_ops++;
    return true;
}

static kiln_status emit(kpass *p, chain *c) {
    kn_net *net = p->net;
    char name[1024];
    size_t len = 0;
    name[0] = 0;
    for (int k = 0; k < c->n_ops && len < sizeof name; k++) {
        int w = snprintf(name + len, sizeof name - len, "%s%s", k ? " + " : "",
                         net->nodes[c->nodes[k]].name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    int out = net->nodes[c->nodes[c->n_ops - 1]].out[0], gi;
    for (int k = 0; k < c->n_ops; k++)
        kpass_kill(p, c->nodes[k]);
    KN_TRY(kn_net_add_node(net, name, "ElementwiseChain", KN_DOMAIN_KILN, 1, c->n_x, c->x, 1,
                           &out, &gi));
    kn_node *g = &net->nodes[gi];
    KN_TRY(kpass_set_strings(g, "ops", c->ops, (size_t)c->n_ops));
    KN_TRY(kn_node_set_ints(g, "operand", c->operand, (size_t)c->n_ops));
    KN_TRY(kn_node_set_ints(g, "swap", c->swap, (size_t)c->n_ops));
    KN_TRY(kn_node_set_floats(g, "alphas", c->alphas, (size_t)c->n_ops));
    KN_TRY(kn_node_set_floats(g, "betas", c->betas, (size_t)c->n_ops));
    kn_log(KILN_LOG_VERBOSE, "elementwise-chain: %d ops -> kiln::ElementwiseChain '%s'",
           c->n_ops, name);
    return KILN_OK;
}

static bool chain_start(const kn_node *n) { return chain_arity(n) > 0; }

kiln_status kpass_chain(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_shapes_if(p, chain_start, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        const kn_node *n = &net->nodes[i];
        int ar = chain_arity(n);
        if (!ar)
            continue;
        /* the chain value: an input that already has the output's shape */
        int v = -1;
        for (int s = 0; s < ar && v < 0; s++)
            if (kpass_same_shape(p, n->in[s], n->out[0]) && !kpass_is_const(net, n->in[s]))
                v = n->in[s];
        if (v < 0)
            continue;
        chain c;
        memset(&c, 0, sizeof c);
        c.x[c.n_x++] = v;
        if (!chain_add(p, &c, i, v))
            continue;
        int cur = n->out[0];
        for (;;) {
            int r = kpass_sole_reader(p, cur);
            if (r < 0 || !chain_add(p, &c, r, cur))
                break;
            cur = net->nodes[r].out[0];
        }
        if (c.n_ops < 2)
            continue;
        KN_TRY(emit(p, &c));
        (*changed)++;
    }
    return KILN_OK;
}
