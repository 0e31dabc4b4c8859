/* pass_dce.c - dead-node elimination: a node none of whose outputs is read
 * by a live node or is a graph output is removed. Walks the (topologically
 * ordered) nodes backwards so whole dead subgraphs go in one pass. */
#include "passes.h"

kiln_status kpass_dead_code(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool *live = kn_calloc((size_t)net->n_tensors + 1, sizeof(bool));
    if (!live)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < net->n_outputs; k++)
        live[net->outputs[k]] = true;
    for (int i = net->n_nodes - 1; i >= 0; i--) {
        kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        bool used = false;
        for (int j = 0; j < n->n_out && !used; j++)
            used = n->out[j] >= 0 && live[n->out[j]];
        if (!used) {
            kn_log(KILN_LOG_VERBOSE, "dead-code: removed %s '%s'", n->op_type, n->name);
            kpass_kill(p, i);
            (*changed)++;
            continue;
        }
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                live[n->in[j]] = true;
    }
    kn_free(live);
    return KILN_OK;
}
