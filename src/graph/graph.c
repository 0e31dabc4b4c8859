/* graph.c - building, copying, ordering and compacting the network IR. */
#include <stdio.h>
#include <string.h>

#include "graph.h"

void kn_blob_ref(kn_blob *b) {
    if (b)
        __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
}

void kn_blob_unref(kn_blob *b) {
    if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0)
        b->release(b);
}

kiln_status kn_net_new(kn_net **out) {
    kn_net *net = kn_calloc(1, sizeof *net);
    if (!net)
        return KILN_ERR_OUT_OF_MEMORY;
    *out = net;
    return KILN_OK;
}

void kn_tdata_free(kn_tdata *v) {
    if (!v)
        return;
    if (v->blob)
        kn_blob_unref(v->blob);
    else
        kn_aligned_free(v->data);
    memset(v, 0, sizeof *v);
}

void kn_attr_free(kn_attr *a) {
    kn_free(a->name);
    kn_free(a->s);
    kn_free(a->floats);
    kn_free(a->ints);
    for (size_t i = 0; a->strings && i < a->n; i++)
        kn_free(a->strings[i]);
    kn_free(a->strings);
    if (a->tensor) {
        kn_tdata_free(a->tensor);
        kn_free(a->tensor);
    }
    kn_net_free(a->graph);
    memset(a, 0, sizeof *a);
}

static void node_free(kn_node *n) {
    kn_free(n->name);
    kn_free(n->op_type);
    kn_free(n->domain);
    kn_free(n->in);
    kn_free(n->out);
    for (int i = 0; i < n->n_attr; i++)
        kn_attr_free(&n->attrs[i]);
    kn_free(n->attrs);
    kn_free(n->tactic);
    memset(n, 0, sizeof *n);
}

static void tensor_free(kn_tensor *t) {
    kn_free(t->name);
    for (int i = 0; i < KILN_MAX_DIMS; i++)
        kn_free(t->dim_names[i]);
    kn_tdata_free(&t->value);
    memset(t, 0, sizeof *t);
}

void kn_net_free(kn_net *net) {
    if (!net)
        return;
    for (int i = 0; i < net->n_tensors; i++)
        tensor_free(&net->tensors[i]);
    for (int i = 0; i < net->n_nodes; i++)
        node_free(&net->nodes[i]);
    for (int i = 0; i < net->n_opsets; i++)
        kn_free(net->opset_domains[i]);
    kn_free(net->opset_domains);
    kn_free(net->opset_versions);
    kn_free(net->tensors);
    kn_free(net->nodes);
    kn_free(net->inputs);
    kn_free(net->outputs);
    kn_strmap_free(&net->names);
    kn_free(net);
}

int kn_net_find(const kn_net *net, const char *name) {
    if (!name || !*name)
        return -1;
    return kn_strmap_get(&net->names, name);
}

static kiln_status add_tensor(kn_net *net, const char *name, int *index) {
    KN_TRY(kn_grow((void **)&net->tensors, &net->cap_tensors, net->n_tensors + 1,
                   sizeof *net->tensors));
    kn_tensor *t = &net->tensors[net->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = kn_strdup(name);
    if (!t->name)
        return KILN_ERR_OUT_OF_MEMORY;
    t->rank = -1;
    t->producer = -1;
    /* The map borrows the name; its table may move on growth, so rebuild
     * lookups through net->tensors[i].name only. */
    if (kn_strmap_put(&net->names, t->name, net->n_tensors) != KILN_OK) {
        kn_free(t->name);
        t->name = NULL;
        return KILN_ERR_OUT_OF_MEMORY;
    }
    *index = net->n_tensors++;
    return KILN_OK;
}

kiln_status kn_net_tensor(kn_net *net, const char *name, int *index) {
    int i = kn_net_find(net, name);
    if (i >= 0) {
        *index = i;
        return KILN_OK;
    }
    return add_tensor(net, name, index);
}

kiln_status kn_net_new_tensor(kn_net *net, const char *hint, int *index) {
    char name[256];
    snprintf(name, sizeof name, "%s", hint);
    for (int k = 1; kn_net_find(net, name) >= 0; k++)
        snprintf(name, sizeof name, "%s_%d", hint, k);
    return add_tensor(net, name, index);
}

kiln_status kn_net_add_node(kn_net *net, const char *name, const char *op_type,
                            const char *domain, int opset, int n_in, const int *in, int n_out,
                            const int *out, int *index) {
    KN_TRY(kn_grow((void **)&net->nodes, &net->cap_nodes, net->n_nodes + 1, sizeof *net->nodes));
    kn_node *n = &net->nodes[net->n_nodes];
    memset(n, 0, sizeof *n);
    n->name = kn_strdup(name ? name : "");
    n->op_type = kn_strdup(op_type);
    n->domain = kn_strdup(domain && strcmp(domain, "ai.onnx") != 0 ? domain : "");
    n->in = kn_calloc((size_t)(n_in > 0 ? n_in : 1), sizeof(int));
    n->out = kn_calloc((size_t)(n_out > 0 ? n_out : 1), sizeof(int));
    if (!n->name || !n->op_type || !n->domain || !n->in || !n->out) {
        node_free(n);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    n->opset = opset;
    n->n_in = n_in;
    n->n_out = n_out;
    if (n_in)
        memcpy(n->in, in, (size_t)n_in * sizeof(int));
    if (n_out)
        memcpy(n->out, out, (size_t)n_out * sizeof(int));
    for (int i = 0; i < n_out; i++)
        if (out[i] >= 0)
            net->tensors[out[i]].producer = net->n_nodes;
    if (index)
        *index = net->n_nodes;
    net->n_nodes++;
    return KILN_OK;
}

void kn_tensor_set_value(kn_tensor *t, kn_tdata *v) {
    kn_tdata_free(&t->value);
    t->value = *v;
    memset(v, 0, sizeof *v);
    t->flags |= KN_T_CONST;
    t->dtype = t->value.dtype;
    t->rank = t->value.rank;
    memcpy(t->dims, t->value.dims, sizeof t->dims);
}

kiln_status kn_tdata_alloc(kn_tdata *v, kiln_dtype dtype, int rank, const int64_t *dims) {
    memset(v, 0, sizeof *v);
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return kn_error(KILN_ERR_UNSUPPORTED, "tensor rank %d is outside 0..%d", rank, KILN_MAX_DIMS);
    size_t n = 1, bytes;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return kn_error(KILN_ERR_SHAPE, "negative dimension %lld", (long long)dims[i]);
        if (kn_mul_overflow(n, (size_t)dims[i], &n))
            return kn_error(KILN_ERR_SHAPE, "tensor size overflows");
    }
    if (kn_mul_overflow(n, kiln_dtype_size(dtype), &bytes))
        return kn_error(KILN_ERR_SHAPE, "tensor size overflows");
    v->data = kn_aligned_alloc(bytes ? bytes : 1);
    if (!v->data)
        return KILN_ERR_OUT_OF_MEMORY;
    memset(v->data, 0, bytes ? bytes : 1);
    v->dtype = dtype;
    v->rank = rank;
    if (rank)
        memcpy(v->dims, dims, (size_t)rank * sizeof(int64_t));
    v->nbytes = bytes;
    return KILN_OK;
}

kiln_status kn_tdata_copy(kn_tdata *dst, const kn_tdata *src) {
    KN_TRY(kn_tdata_alloc(dst, src->dtype, src->rank, src->dims));
    if (src->nbytes != dst->nbytes) {
        kn_tdata_free(dst);
        return kn_error(KILN_ERR_INTERNAL, "constant holds %zu bytes, its shape needs %zu",
                        src->nbytes, dst->nbytes);
    }
    if (src->nbytes)
        memcpy(dst->data, src->data, src->nbytes);
    return KILN_OK;
}

const void *kn_tdata_aligned(const kn_tdata *v, void **tmp) {
    *tmp = NULL;
    if (((uintptr_t)v->data & 63u) == 0 || v->nbytes == 0)
        return v->data;
    *tmp = kn_aligned_alloc(v->nbytes);
    if (!*tmp)
        return NULL;
    memcpy(*tmp, v->data, v->nbytes);
    return *tmp;
}

kiln_status kn_attr_copy(kn_attr *d, const kn_attr *s) {
    memset(d, 0, sizeof *d);
    d->type = s->type;
    d->f = s->f;
    d->i = s->i;
    d->n = s->n;
    d->s_len = s->s_len;
    d->name = kn_strdup(s->name);
    if (!d->name)
        goto oom;
    if (s->s && !(d->s = kn_strndup(s->s, s->s_len)))
        goto oom;
    if (s->floats) {
        if (!(d->floats = kn_malloc(s->n * sizeof(float) + 1)))
            goto oom;
        memcpy(d->floats, s->floats, s->n * sizeof(float));
    }
    if (s->ints) {
        if (!(d->ints = kn_malloc(s->n * sizeof(int64_t) + 1)))
            goto oom;
        memcpy(d->ints, s->ints, s->n * sizeof(int64_t));
    }
    if (s->strings) {
        if (!(d->strings = kn_calloc(s->n + 1, sizeof(char *))))
            goto oom;
        for (size_t i = 0; i < s->n; i++)
            if (!(d->strings[i] = kn_strdup(s->strings[i])))
                goto oom;
    }
    if (s->tensor) {
        if (!(d->tensor = kn_calloc(1, sizeof *d->tensor)))
            goto oom;
        if (kn_tdata_copy(d->tensor, s->tensor) != KILN_OK) {
            kn_free(d->tensor);
            d->tensor = NULL;
            goto oom;
        }
    }
    if (s->graph && kn_net_clone(s->graph, &d->graph) != KILN_OK)
        goto oom;
    return KILN_OK;
oom:
    kn_attr_free(d);
    return KILN_ERR_OUT_OF_MEMORY;
}

static kiln_status tensor_copy(kn_tensor *d, const kn_tensor *s) {
    memset(d, 0, sizeof *d);
    *d = *s;
    d->name = NULL;
    memset(d->dim_names, 0, sizeof d->dim_names);
    memset(&d->value, 0, sizeof d->value);
    if (!(d->name = kn_strdup(s->name)))
        goto oom;
    for (int i = 0; i < KILN_MAX_DIMS; i++)
        if (s->dim_names[i] && !(d->dim_names[i] = kn_strdup(s->dim_names[i])))
            goto oom;
    if (s->flags & KN_T_CONST) {
        if (s->value.blob) { /* share the mapping rather than copy weights */
            d->value = s->value;
            kn_blob_ref(s->value.blob);
        } else if (kn_tdata_copy(&d->value, &s->value) != KILN_OK) {
            goto oom;
        }
    }
    return KILN_OK;
oom:
    tensor_free(d);
    return KILN_ERR_OUT_OF_MEMORY;
}

static kiln_status node_copy(kn_node *d, const kn_node *s) {
    memset(d, 0, sizeof *d);
    d->opset = s->opset;
    d->n_in = s->n_in;
    d->n_out = s->n_out;
    d->dead = s->dead;
    d->name = kn_strdup(s->name);
    d->op_type = kn_strdup(s->op_type);
    d->domain = kn_strdup(s->domain);
    d->in = kn_calloc((size_t)s->n_in + 1, sizeof(int));
    d->out = kn_calloc((size_t)s->n_out + 1, sizeof(int));
    if (!d->name || !d->op_type || !d->domain || !d->in || !d->out)
        goto oom;
    if (s->tactic && !(d->tactic = kn_strdup(s->tactic)))
        goto oom;
    memcpy(d->in, s->in, (size_t)s->n_in * sizeof(int));
    memcpy(d->out, s->out, (size_t)s->n_out * sizeof(int));
    if (s->n_attr) {
        if (!(d->attrs = kn_calloc((size_t)s->n_attr, sizeof(kn_attr))))
            goto oom;
        for (int i = 0; i < s->n_attr; i++) {
            if (kn_attr_copy(&d->attrs[i], &s->attrs[i]) != KILN_OK)
                goto oom;
            d->n_attr = i + 1;
        }
    }
    return KILN_OK;
oom:
    node_free(d);
    return KILN_ERR_OUT_OF_MEMORY;
}

kiln_status kn_net_clone(const kn_net *src, kn_net **out) {
    kn_net *net;
    KN_TRY(kn_net_new(&net));
    kiln_status st = KILN_ERR_OUT_OF_MEMORY;
    if (src->n_tensors) {
        net->tensors = kn_calloc((size_t)src->n_tensors, sizeof(kn_tensor));
        if (!net->tensors)
            goto fail;
        net->cap_tensors = src->n_tensors;
        for (int i = 0; i < src->n_tensors; i++) {
            if ((st = tensor_copy(&net->tensors[i], &src->tensors[i])) != KILN_OK)
                goto fail;
            net->n_tensors = i + 1;
            if ((st = kn_strmap_put(&net->names, net->tensors[i].name, i)) != KILN_OK)
                goto fail;
        }
    }
    if (src->n_nodes) {
        st = KILN_ERR_OUT_OF_MEMORY;
        net->nodes = kn_calloc((size_t)src->n_nodes, sizeof(kn_node));
        if (!net->nodes)
            goto fail;
        net->cap_nodes = src->n_nodes;
        for (int i = 0; i < src->n_nodes; i++) {
            if ((st = node_copy(&net->nodes[i], &src->nodes[i])) != KILN_OK)
                goto fail;
            net->n_nodes = i + 1;
        }
    }
    st = KILN_ERR_OUT_OF_MEMORY;
    if (kn_grow((void **)&net->inputs, &net->cap_inputs, src->n_inputs, sizeof(int)) ||
        kn_grow((void **)&net->outputs, &net->cap_outputs, src->n_outputs, sizeof(int)))
        goto fail;
    if (src->n_inputs)
        memcpy(net->inputs, src->inputs, (size_t)src->n_inputs * sizeof(int));
    if (src->n_outputs)
        memcpy(net->outputs, src->outputs, (size_t)src->n_outputs * sizeof(int));
    net->n_inputs = src->n_inputs;
    net->n_outputs = src->n_outputs;
    net->opset = src->opset;
    if (src->n_opsets) {
        net->opset_domains = kn_calloc((size_t)src->n_opsets, sizeof(char *));
        net->opset_versions = kn_calloc((size_t)src->n_opsets, sizeof(int));
        if (!net->opset_domains || !net->opset_versions)
            goto fail;
        for (int i = 0; i < src->n_opsets; i++) {
            if (!(net->opset_domains[i] = kn_strdup(src->opset_domains[i])))
                goto fail;
            net->opset_versions[i] = src->opset_versions[i];
            net->n_opsets = i + 1;
        }
    }
    *out = net;
    return KILN_OK;
fail:
    kn_net_free(net);
    return st;
}

kiln_status kn_net_use_counts(const kn_net *net, int **counts) {
    int *c = kn_calloc((size_t)net->n_tensors + 1, sizeof(int));
    if (!c)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                c[n->in[j]]++;
    }
    for (int i = 0; i < net->n_outputs; i++)
        c[net->outputs[i]]++;
    *counts = c;
    return KILN_OK;
}

kiln_status kn_net_compact(kn_net *net) {
    int *used = kn_calloc((size_t)net->n_tensors + 1, sizeof(int));
    int *remap = kn_calloc((size_t)net->n_tensors + 1, sizeof(int));
    if (!used || !remap) {
        kn_free(used);
        kn_free(remap);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < net->n_nodes; i++) {
        kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                used[n->in[j]] = 1;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0)
                used[n->out[j]] = 1;
    }
    for (int i = 0; i < net->n_inputs; i++)
        used[net->inputs[i]] = 1;
    for (int i = 0; i < net->n_outputs; i++)
        used[net->outputs[i]] = 1;
    /* nodes */
    int nn = 0;
    for (int i = 0; i < net->n_nodes; i++) {
        if (net->nodes[i].dead) {
            node_free(&net->nodes[i]);
            continue;
        }
        net->nodes[nn++] = net->nodes[i];
    }
    net->n_nodes = nn;
    /* tensors */
    int nt = 0;
    kn_strmap_free(&net->names);
    kiln_status st = KILN_OK;
    for (int i = 0; i < net->n_tensors; i++) {
        if (!used[i]) {
            tensor_free(&net->tensors[i]);
            remap[i] = -1;
            continue;
        }
        remap[i] = nt;
        net->tensors[nt++] = net->tensors[i];
    }
    net->n_tensors = nt;
    for (int i = 0; i < nt && st == KILN_OK; i++) {
        st = kn_strmap_put(&net->names, net->tensors[i].name, i);
        net->tensors[i].producer = -1;
    }
    for (int i = 0; i < nn; i++) {
        kn_node *n = &net->nodes[i];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                n->in[j] = remap[n->in[j]];
        for (int j = 0; j < n->n_out; j++) {
            if (n->out[j] >= 0)
                n->out[j] = remap[n->out[j]];
            if (n->out[j] >= 0)
                net->tensors[n->out[j]].producer = i;
        }
    }
    for (int i = 0; i < net->n_inputs; i++)
        net->inputs[i] = remap[net->inputs[i]];
    for (int i = 0; i < net->n_outputs; i++)
        net->outputs[i] = remap[net->outputs[i]];
    kn_free(used);
    kn_free(remap);
    return st;
}

kiln_status kn_net_toposort(kn_net *net) {
    int n = net->n_nodes;
    if (n == 0)
        return KILN_OK;
    int *ready = kn_calloc((size_t)net->n_tensors + 1, sizeof(int)); /* tensor available */
    int *done = kn_calloc((size_t)n, sizeof(int));
    kn_node *sorted = kn_calloc((size_t)n, sizeof(kn_node));
    int *order = kn_calloc((size_t)n, sizeof(int));
    if (!ready || !done || !sorted || !order) {
        kn_free(ready);
        kn_free(done);
        kn_free(sorted);
        kn_free(order);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < net->n_tensors; i++) {
        const kn_tensor *t = &net->tensors[i];
        if (t->flags & (KN_T_INPUT | KN_T_CONST))
            ready[i] = 1;
    }
    /* A tensor produced by a node is not ready until that node is placed. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < net->nodes[i].n_out; j++)
            if (net->nodes[i].out[j] >= 0 && !(net->tensors[net->nodes[i].out[j]].flags & KN_T_INPUT))
                ready[net->nodes[i].out[j]] = 0;
    kiln_status st = KILN_OK;
    /* Kahn's algorithm by repeated scans, keeping the original order among
     * ready nodes (stable); the node lists here are small enough. */
    int placed = 0, progress = 1;
    int start = 0;
    while (placed < n && progress) {
        progress = 0;
        for (int i = start; i < n; i++) {
            if (done[i])
                continue;
            const kn_node *nd = &net->nodes[i];
            int ok = 1;
            for (int j = 0; j < nd->n_in && ok; j++)
                if (nd->in[j] >= 0 && !ready[nd->in[j]])
                    ok = 0;
            if (!ok)
                continue;
            done[i] = 1;
            order[placed++] = i;
            for (int j = 0; j < nd->n_out; j++)
                if (nd->out[j] >= 0)
                    ready[nd->out[j]] = 1;
            progress = 1;
        }
        while (start < n && done[start])
            start++;
    }
    if (placed < n) {
        /* name the first stuck node and the input it waits for */
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            const kn_node *nd = &net->nodes[i];
            for (int j = 0; j < nd->n_in; j++) {
                int t = nd->in[j];
                if (t < 0 || ready[t])
                    continue;
                if (net->tensors[t].producer < 0)
                    st = kn_node_error(nd, KILN_ERR_PARSE,
                                       "input '%s' is not produced by any node, nor a graph input "
                                       "or initializer",
                                       net->tensors[t].name);
                else
                    st = kn_node_error(nd, KILN_ERR_PARSE,
                                       "the graph has a cycle through tensor '%s'",
                                       net->tensors[t].name);
                break;
            }
            if (st != KILN_OK)
                break;
        }
        if (st == KILN_OK)
            st = kn_error(KILN_ERR_PARSE, "the graph cannot be ordered");
    } else {
        for (int i = 0; i < n; i++)
            sorted[i] = net->nodes[order[i]];
        for (int i = 0; i < n; i++)
            net->nodes[i] = sorted[i];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < net->nodes[i].n_out; j++)
                if (net->nodes[i].out[j] >= 0)
                    net->tensors[net->nodes[i].out[j]].producer = i;
    }
    kn_free(ready);
    kn_free(done);
    kn_free(sorted);
    kn_free(order);
    return st;
}

kiln_status kn_node_error(const kn_node *n, kiln_status st, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kn_error(st, "node '%s' (%s%s%s): %s", n->name, n->domain[0] ? n->domain : "",
                    n->domain[0] ? "::" : "", n->op_type, msg);
}

int64_t kn_numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] != 0 && n > INT64_MAX / dims[i])
            return INT64_MAX;
        n *= dims[i];
    }
    return n;
}

bool kn_shape_fits(kiln_dtype dt, int rank, const int64_t *dims, size_t *bytes) {
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return false;
    int64_t reach = 1, n = 1; /* reach counts 0 dims as 1 */
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || dims[i] > KN_MAX_ELEMENTS)
            return false;
        if (kn_mul_i64(reach, dims[i] ? dims[i] : 1, &reach) || reach > KN_MAX_ELEMENTS)
            return false;
        n *= dims[i]; /* n <= reach */
    }
    size_t b;
    if (kn_mul_overflow((size_t)n, kiln_dtype_size(dt), &b) || b > KN_MAX_TENSOR_BYTES)
        return false;
    if (bytes)
        *bytes = b;
    return true;
}

kiln_status kn_check_size(const kn_node *n, const char *what, kiln_dtype dt, int rank,
                          const int64_t *dims, size_t *bytes) {
    if (kn_shape_fits(dt, rank, dims, bytes))
        return KILN_OK;
    char shape[256];
    const char *why = "more elements or bytes than kiln plans (2^48 of each at most)";
    if (rank < 0 || rank > KILN_MAX_DIMS) {
        why = "a rank kiln does not take";
        rank = rank < 0 ? 0 : KILN_MAX_DIMS;
    }
    kn_shape_str(rank, dims, shape, sizeof shape);
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0)
            why = "a negative dimension";
    if (n)
        return kn_node_error(n, KILN_ERR_SHAPE, "%s would be %s (%s): %s", what, shape,
                             kiln_dtype_name(dt), why);
    return kn_error(KILN_ERR_SHAPE, "%s would be %s (%s): %s", what, shape, kiln_dtype_name(dt),
                    why);
}

void kn_shape_str(int rank, const int64_t *dims, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    if (rank < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    if (rank == 0) {
        snprintf(buf, cap, "scalar");
        return;
    }
    for (int i = 0; i < rank && len < cap; i++) {
        int w = dims[i] < 0 ? snprintf(buf + len, cap - len, "%s?", i ? "x" : "")
                            : snprintf(buf + len, cap - len, "%s%lld", i ? "x" : "",
                                       (long long)dims[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}
