/* pass_canon.c - canonicalization: Identity and inference-mode Dropout are
 * removed, their readers rewired to the input. Graph output names survive:
 * when the removed node writes a graph output, the input's producer is made
 * to write that output instead. */
#include <string.h>

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

static bool is_graph_io(const kn_net *net, int t) {
    for (int k = 0; k < net->n_outputs; k++)
        if (net->outputs[k] == t)
            return true;
    return (net->tensors[t].flags & (KN_T_INPUT | KN_T_CONST | KN_T_OUTPUT)) != 0;
}

kiln_status kpass_canonicalize(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        kn_node *n = &net->nodes[i];
        bool ident = kpass_is(n, "Identity") || (kpass_is(n, "Dropout") && dropout_is_identity(p, n));
        if (!ident || n->n_in < 1 || n->n_out < 1 || n->in[0] < 0 || n->out[0] < 0)
            continue;
        int x = n->in[0], y = n->out[0];
        if (!p->is_output[y]) {
            kpass_replace_reads(net, y, x);
        } else {
            /* y names a graph output: let x's producer write y directly. A
             * copy of an input, a constant or another output stays. */
            int prod = kpass_producer(p, x);
            if (prod < 0 || is_graph_io(net, x))
                continue;
            kn_node *pn = &net->nodes[prod];
            for (int j = 0; j < pn->n_out; j++)
                if (pn->out[j] == x)
                    kpass_set_output(net, prod, j, y);
            kpass_kill(p, i);
            kpass_replace_reads(net, x, y);
            kpass_touch(p, prod);
        }
        kn_log(KILN_LOG_VERBOSE, "canonicalize: removed %s '%s'", n->op_type, n->name);
        kpass_kill(p, i);
        (*changed)++;
    }
    return KILN_OK;
}
