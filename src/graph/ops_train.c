/* ops_train.c - the optimizers of ONNX's preview training domain
 * (ai.onnx.preview.training): Adagrad, Momentum and Adam, one update step
 * of n tensors each, as pure functions of their inputs (inference of an
 * update, no state kept). Inputs: R (learning rate, scalar), T (step
 * count, scalar int64), then n tensors of each group: X, G and the
 * optimizer's states (Adagrad H; Momentum V; Adam V, H). Outputs: the new
 * X, then the new states, group by group, each shaped as its input. */
#include "graph/graph.h"

#include <string.h>

static kiln_status infer_optimizer(kn_infer *c) {
    const char *op = c->node->op_type;
    int groups = strcmp(op, "Adam") == 0 ? 4 : 3; /* X, G, states */
    int n = (c->n_in - 2) / groups;
    if (c->n_in < 2 + groups || (c->n_in - 2) % groups != 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "%d inputs do not make R, T and %d groups",
                             c->n_in, groups);
    if (c->n_out != (groups - 1) * n)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "%d outputs, %d expected", c->n_out,
                             (groups - 1) * n);
    if (kn_numel(c->in[0].rank, c->in[0].dims) != 1 || kn_numel(c->in[1].rank, c->in[1].dims) != 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "R and T must be scalars");
    if (c->in[1].dtype != KILN_DTYPE_INT64)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "T must be int64");
    for (int i = 0; i < n; i++) {
        const kn_tinfo *x = &c->in[2 + i];
        if (x->dtype != KILN_DTYPE_FLOAT && x->dtype != KILN_DTYPE_DOUBLE)
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "X%d is %s, not float or double",
                                 i, kiln_dtype_name(x->dtype));
        for (int g = 1; g < groups; g++) {
            const kn_tinfo *o = &c->in[2 + g * n + i];
            if (o->dtype != x->dtype || o->rank != x->rank ||
                memcmp(o->dims, x->dims, (size_t)x->rank * sizeof x->dims[0]) != 0)
                return kn_node_error(c->node, KILN_ERR_SHAPE,
                                     "input %d differs from X%d in type or shape", 2 + g * n + i, i);
        }
        for (int g = 0; g < groups - 1; g++) /* X_new, then the states */
            kn_same_as(&c->out[g * n + i], &c->in[2 + (g == 0 ? 0 : g + 1) * n + i]);
    }
    return KILN_OK;
}

#define TRAIN_DOMAIN "ai.onnx.preview.training"

const kn_op_schema kn_ops_train[] = {
    {"Adagrad", TRAIN_DOMAIN, infer_optimizer, 0},
    {"Momentum", TRAIN_DOMAIN, infer_optimizer, 0},
    {"Adam", TRAIN_DOMAIN, infer_optimizer, 0},
};
const size_t kn_ops_train_count = KN_ARRAY_LEN(kn_ops_train);
