/* network_api.c - the public kiln_network_* functions over the IR. */
#include <string.h>

#include "graph.h"

#define CHECK_NET(net)                                                          \
    do {                                                                        \
        if (!(net))                                                             \
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "network is NULL");      \
    } while (0)

KILN_API kiln_status kiln_network_create(kiln_network **out) {
    if (!out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_create: out is NULL");
    return kn_net_new(out);
}

KILN_API void kiln_network_destroy(kiln_network *net) { kn_net_free(net); }

static kiln_status check_shape(const char *what, const char *name, int rank) {
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s': rank %d is outside 0..%d", what,
                        name, rank, KILN_MAX_DIMS);
    return KILN_OK;
}

KILN_API kiln_status kiln_network_add_input(kiln_network *net, const char *name, kiln_dtype dtype,
                                            int rank, const int64_t *dims,
                                            const char *const *dim_names) {
    CHECK_NET(net);
    if (!name || !*name)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "an input needs a name");
    KN_TRY(check_shape("input", name, rank));
    if (kiln_dtype_size(dtype) == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "input '%s': data type %d is not supported", name,
                        (int)dtype);
    if (kn_net_find(net, name) >= 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': a tensor of that name exists", name);
    KN_TRY(kn_grow((void **)&net->inputs, &net->cap_inputs, net->n_inputs + 1, sizeof(int)));
    int idx;
    KN_TRY(kn_net_tensor(net, name, &idx));
    kn_tensor *t = &net->tensors[idx];
    t->dtype = dtype;
    t->rank = rank;
    t->flags |= KN_T_INPUT;
    for (int i = 0; i < rank; i++) {
        t->dims[i] = dims[i] < 0 ? -1 : dims[i];
        if (dim_names && dim_names[i] && dims[i] < 0 && !(t->dim_names[i] = kn_strdup(dim_names[i])))
            return KILN_ERR_OUT_OF_MEMORY;
    }
    net->inputs[net->n_inputs++] = idx;
    return KILN_OK;
}

KILN_API kiln_status kiln_network_add_constant(kiln_network *net, const char *name,
                                               kiln_dtype dtype, int rank, const int64_t *dims,
                                               const void *data, size_t nbytes) {
    CHECK_NET(net);
    if (!name || !*name)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "a constant needs a name");
    KN_TRY(check_shape("constant", name, rank));
    if (kn_net_find(net, name) >= 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "constant '%s': a tensor of that name exists",
                        name);
    kn_tdata v;
    KN_TRY(kn_tdata_alloc(&v, dtype, rank, dims));
    if (v.nbytes != nbytes || (nbytes && !data)) {
        size_t want = v.nbytes;
        kn_tdata_free(&v);
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "constant '%s': %zu bytes given, its type and shape need %zu", name,
                        nbytes, want);
    }
    if (nbytes)
        memcpy(v.data, data, nbytes);
    int idx;
    kiln_status st = kn_net_tensor(net, name, &idx);
    if (st != KILN_OK) {
        kn_tdata_free(&v);
        return st;
    }
    kn_tensor_set_value(&net->tensors[idx], &v);
    return KILN_OK;
}

KILN_API kiln_status kiln_network_add_node(kiln_network *net, const char *name,
                                           const char *op_type, const char *domain, int opset,
                                           int n_inputs, const char *const *inputs, int n_outputs,
                                           const char *const *outputs, int *index) {
    CHECK_NET(net);
    if (!op_type || !*op_type)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "node '%s' has no op type", name ? name : "");
    if (n_inputs < 0 || n_outputs < 1 || (n_inputs && !inputs) || !outputs)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "node '%s': bad input or output list",
                        name ? name : "");
    int stack_in[16], stack_out[16];
    int *in = n_inputs <= 16 ? stack_in : kn_malloc((size_t)n_inputs * sizeof(int));
    int *out = n_outputs <= 16 ? stack_out : kn_malloc((size_t)n_outputs * sizeof(int));
    kiln_status st = (!in || !out) ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
    for (int i = 0; st == KILN_OK && i < n_inputs; i++) {
        in[i] = -1;
        if (inputs[i] && *inputs[i])
            st = kn_net_tensor(net, inputs[i], &in[i]);
    }
    for (int i = 0; st == KILN_OK && i < n_outputs; i++) {
        out[i] = -1;
        if (!outputs[i] || !*outputs[i])
            continue;
        int e = kn_net_find(net, outputs[i]);
        if (e >= 0 && (net->tensors[e].producer >= 0 || (net->tensors[e].flags & (KN_T_INPUT | KN_T_CONST))))
            st = kn_error(KILN_ERR_PARSE, "node '%s': output '%s' is already produced elsewhere",
                          name ? name : "", outputs[i]);
        else
            st = kn_net_tensor(net, outputs[i], &out[i]);
    }
    if (st == KILN_OK)
        st = kn_net_add_node(net, name, op_type, domain, opset, n_inputs, in, n_outputs, out, index);
    if (in != stack_in)
        kn_free(in);
    if (out != stack_out)
        kn_free(out);
    return st;
}

static kiln_status node_at(kiln_network *net, int node, kn_node **out) {
    CHECK_NET(net);
    if (node < 0 || node >= net->n_nodes)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "no node with index %d", node);
    *out = &net->nodes[node];
    return KILN_OK;
}

KILN_API kiln_status kiln_network_set_attr_int(kiln_network *net, int node, const char *name,
                                               int64_t value) {
    kn_node *n = NULL;
    KN_TRY(node_at(net, node, &n));
    return kn_node_set_int(n, name, value);
}

KILN_API kiln_status kiln_network_set_attr_float(kiln_network *net, int node, const char *name,
                                                 float value) {
    kn_node *n = NULL;
    KN_TRY(node_at(net, node, &n));
    return kn_node_set_float(n, name, value);
}

KILN_API kiln_status kiln_network_set_attr_string(kiln_network *net, int node, const char *name,
                                                  const char *value) {
    kn_node *n = NULL;
    KN_TRY(node_at(net, node, &n));
    return kn_node_set_string(n, name, value);
}

KILN_API kiln_status kiln_network_set_attr_ints(kiln_network *net, int node, const char *name,
                                                const int64_t *values, size_t n_values) {
    kn_node *n = NULL;
    KN_TRY(node_at(net, node, &n));
    return kn_node_set_ints(n, name, values, n_values);
}

KILN_API kiln_status kiln_network_set_attr_floats(kiln_network *net, int node, const char *name,
                                                  const float *values, size_t n_values) {
    kn_node *n = NULL;
    KN_TRY(node_at(net, node, &n));
    return kn_node_set_floats(n, name, values, n_values);
}

KILN_API kiln_status kiln_network_mark_output(kiln_network *net, const char *name) {
    CHECK_NET(net);
    int idx = kn_net_find(net, name);
    if (idx < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "cannot mark '%s' as an output: no such tensor",
                        name ? name : "(null)");
    for (int i = 0; i < net->n_outputs; i++)
        if (net->outputs[i] == idx)
            return KILN_OK;
    KN_TRY(kn_grow((void **)&net->outputs, &net->cap_outputs, net->n_outputs + 1, sizeof(int)));
    net->tensors[idx].flags |= KN_T_OUTPUT;
    net->outputs[net->n_outputs++] = idx;
    return KILN_OK;
}

KILN_API int kiln_network_num_inputs(const kiln_network *net) { return net ? net->n_inputs : 0; }
KILN_API int kiln_network_num_outputs(const kiln_network *net) { return net ? net->n_outputs : 0; }
KILN_API int kiln_network_num_nodes(const kiln_network *net) { return net ? net->n_nodes : 0; }

KILN_API const char *kiln_network_input_name(const kiln_network *net, int i) {
    return net && i >= 0 && i < net->n_inputs ? net->tensors[net->inputs[i]].name : NULL;
}
KILN_API const char *kiln_network_output_name(const kiln_network *net, int i) {
    return net && i >= 0 && i < net->n_outputs ? net->tensors[net->outputs[i]].name : NULL;
}
KILN_API const char *kiln_network_node_name(const kiln_network *net, int i) {
    return net && i >= 0 && i < net->n_nodes ? net->nodes[i].name : NULL;
}
KILN_API const char *kiln_network_node_op_type(const kiln_network *net, int i) {
    return net && i >= 0 && i < net->n_nodes ? net->nodes[i].op_type : NULL;
}

KILN_API kiln_status kiln_network_tensor_info(const kiln_network *net, const char *name,
                                              kiln_dtype *dtype, int *rank, int64_t *dims) {
    CHECK_NET(net);
    int idx = kn_net_find(net, name);
    if (idx < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "no tensor named '%s'", name ? name : "(null)");
    const kn_tensor *t = &net->tensors[idx];
    if (dtype)
        *dtype = t->dtype;
    if (rank)
        *rank = t->rank;
    if (dims && t->rank > 0)
        memcpy(dims, t->dims, (size_t)t->rank * sizeof(int64_t));
    return KILN_OK;
}

static kiln_status dim_of(const kiln_network *net, const char *name, int d, int *idx) {
    *idx = kn_net_find(net, name);
    if (*idx < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "no tensor named '%s'", name ? name : "(null)");
    const kn_tensor *t = &net->tensors[*idx];
    if (t->rank < 0 || d < 0 || d >= t->rank)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "tensor '%s': dimension %d is outside 0..%d",
                        name, d, t->rank - 1);
    return KILN_OK;
}

KILN_API kiln_status kiln_network_tensor_dim_name(const kiln_network *net, const char *name, int d,
                                                  const char **dim_name) {
    CHECK_NET(net);
    if (!dim_name)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "tensor_dim_name: dim_name is NULL");
    *dim_name = NULL;
    int idx;
    KN_TRY(dim_of(net, name, d, &idx));
    *dim_name = net->tensors[idx].dim_names[d];
    return KILN_OK;
}

KILN_API kiln_status kiln_network_set_dim_name(kiln_network *net, const char *name, int d,
                                               const char *dim_name) {
    CHECK_NET(net);
    int idx;
    KN_TRY(dim_of(net, name, d, &idx));
    kn_tensor *t = &net->tensors[idx];
    if (!(t->flags & (KN_T_INPUT | KN_T_OUTPUT)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "tensor '%s' is not a network input or output: its dimensions have no names",
                        name);
    char *s = NULL;
    if (dim_name && *dim_name && !(s = kn_strdup(dim_name)))
        return KILN_ERR_OUT_OF_MEMORY;
    kn_free(t->dim_names[d]);
    t->dim_names[d] = s;
    return KILN_OK;
}
