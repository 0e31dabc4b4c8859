/* network_extract.c - node I/O inspection and subgraph extraction for the
 * public network API: what `kiln compare --all-tensors` and `kiln debug
 * reduce` need to walk a model and cut pieces out of it. */
#include <string.h>

#include "graph.h"

KILN_API int kiln_network_node_num_inputs(const kiln_network *net, int node) {
    return net && node >= 0 && node < net->n_nodes ? net->nodes[node].n_in : 0;
}

KILN_API int kiln_network_node_num_outputs(const kiln_network *net, int node) {
    return net && node >= 0 && node < net->n_nodes ? net->nodes[node].n_out : 0;
}

static const char *slot_name(const kiln_network *net, int node, int i, bool out) {
    if (!net || node < 0 || node >= net->n_nodes)
        return NULL;
    const kn_node *n = &net->nodes[node];
    int count = out ? n->n_out : n->n_in;
    if (i < 0 || i >= count)
        return NULL;
    int t = out ? n->out[i] : n->in[i];
    return t < 0 ? "" : net->tensors[t].name;
}

KILN_API const char *kiln_network_node_input(const kiln_network *net, int node, int i) {
    return slot_name(net, node, i, false);
}

KILN_API const char *kiln_network_node_output(const kiln_network *net, int node, int i) {
    return slot_name(net, node, i, true);
}

KILN_API kiln_status kiln_network_set_tensor_info(kiln_network *net, const char *name,
                                                  kiln_dtype dtype, int rank,
                                                  const int64_t *dims) {
    if (!net || !name || (rank > 0 && !dims))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "set_tensor_info: NULL argument");
    if (rank < -1 || rank > KILN_MAX_DIMS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "tensor '%s': rank %d is outside -1..%d", name,
                        rank, KILN_MAX_DIMS);
    int t = kn_net_find(net, name);
    if (t < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "no tensor named '%s'", name);
    kn_tensor *x = &net->tensors[t];
    if (x->flags & KN_T_CONST)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "tensor '%s' is a constant", name);
    x->dtype = dtype;
    x->rank = rank;
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        x->dims[d] = d < rank ? (dims[d] < 0 ? -1 : dims[d]) : 0;
    return KILN_OK;
}

/* Cut the clone down to the kept nodes: the net is a private copy. */
static kiln_status cut(kn_net *net, const bool *keep) {
    int nt = net->n_tensors;
    bool *read_kept = kn_calloc((size_t)nt + 1, sizeof(bool));
    bool *read_other = kn_calloc((size_t)nt + 1, sizeof(bool));
    bool *made_kept = kn_calloc((size_t)nt + 1, sizeof(bool));
    bool *was_output = kn_calloc((size_t)nt + 1, sizeof(bool));
    int *order = kn_calloc((size_t)nt + 1, sizeof(int));
    kiln_status st = KILN_OK;
    if (!read_kept || !read_other || !made_kept || !was_output || !order) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (int k = 0; k < net->n_outputs; k++)
        was_output[net->outputs[k]] = true;
    /* new inputs in first-read order, the old inputs first */
    int n_new = 0;
    for (int k = 0; k < net->n_inputs; k++) {
        int t = net->inputs[k];
        bool used = false;
        for (int i = 0; i < net->n_nodes && !used; i++)
            for (int j = 0; keep[i] && j < net->nodes[i].n_in; j++)
                used |= net->nodes[i].in[j] == t;
        if (used)
            order[n_new++] = t;
        net->tensors[t].flags &= ~(uint32_t)KN_T_INPUT;
    }
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        for (int j = 0; j < n->n_in; j++) {
            int t = n->in[j];
            if (t < 0)
                continue;
            if (!keep[i]) {
                read_other[t] = true;
                continue;
            }
            if (!read_kept[t] && !made_kept[t] && !(net->tensors[t].flags & KN_T_CONST)) {
                bool listed = false;
                for (int k = 0; k < n_new && !listed; k++)
                    listed = order[k] == t;
                if (!listed)
                    order[n_new++] = t;
            }
            read_kept[t] = true;
        }
        for (int j = 0; keep[i] && j < n->n_out; j++)
            if (n->out[j] >= 0)
                made_kept[n->out[j]] = true;
    }
    for (int i = 0; i < net->n_nodes; i++)
        net->nodes[i].dead = !keep[i];
    if ((st = kn_grow((void **)&net->inputs, &net->cap_inputs, n_new + 1, sizeof(int))) != KILN_OK)
        goto done;
    net->n_inputs = 0;
    for (int k = 0; k < n_new; k++) {
        kn_tensor *x = &net->tensors[order[k]];
        x->flags |= KN_T_INPUT;
        x->producer = -1;
        net->inputs[net->n_inputs++] = order[k];
    }
    int n_out = 0;
    for (int t = 0; t < nt; t++) {
        net->tensors[t].flags &= ~(uint32_t)KN_T_OUTPUT;
        if (made_kept[t] && (was_output[t] || read_other[t]))
            n_out++;
    }
    if ((st = kn_grow((void **)&net->outputs, &net->cap_outputs, n_out + 1, sizeof(int))) !=
        KILN_OK)
        goto done;
    net->n_outputs = 0;
    /* outputs: the old ones first, in their order, then the cut ones */
    for (int pass = 0; pass < 2; pass++)
        for (int t = 0; t < nt; t++) {
            bool first = was_output[t];
            if (!made_kept[t] || !(was_output[t] || read_other[t]) || first != (pass == 0))
                continue;
            net->tensors[t].flags |= KN_T_OUTPUT;
            net->outputs[net->n_outputs++] = t;
        }
    st = kn_net_compact(net);
done:
    kn_free(read_kept);
    kn_free(read_other);
    kn_free(made_kept);
    kn_free(was_output);
    kn_free(order);
    return st;
}

KILN_API kiln_status kiln_network_extract(const kiln_network *net, int n_nodes, const int *nodes,
                                          kiln_network **out) {
    if (!net || !out || (n_nodes > 0 && !nodes) || n_nodes < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_extract: bad argument");
    bool *keep = kn_calloc((size_t)net->n_nodes + 1, sizeof(bool));
    if (!keep)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < n_nodes; k++) {
        if (nodes[k] < 0 || nodes[k] >= net->n_nodes) {
            kn_free(keep);
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "kiln_network_extract: node index %d is outside 0..%d", nodes[k],
                            net->n_nodes - 1);
        }
        keep[nodes[k]] = true;
    }
    kn_net *copy = NULL;
    kiln_status st = kn_net_clone(net, &copy);
    if (st == KILN_OK)
        st = cut(copy, keep);
    kn_free(keep);
    if (st != KILN_OK) {
        kn_net_free(copy);
        return st;
    }
    *out = copy;
    return KILN_OK;
}
