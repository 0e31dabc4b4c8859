/* place.c - layers placed on the host in a device plan: the reformat layers
 * (kiln::ToHost, kiln::ToDevice) where a value crosses between device and
 * host memory, so that the plan and `kiln inspect` show every copy. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "builder.h"
#include "graph/fused.h"
#include "runtime/exec.h"

static bool host_dtype(kiln_dtype t) {
    return t == KILN_DTYPE_STRING || kn_dtype_is_handle((int)t);
}

int kbld_host_only_tensor(const kn_net *net, const kn_node *n, const kn_tinfo *ti) {
    for (int j = 0; j < n->n_in + n->n_out; j++) {
        int t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
        if (t < 0)
            continue;
        kiln_dtype dt = ti && ti[t].dtype != KILN_DTYPE_UNDEFINED ? ti[t].dtype
                                                                 : net->tensors[t].dtype;
        if (host_dtype(dt) ||
            ((net->tensors[t].flags & KN_T_CONST) && host_dtype(net->tensors[t].value.dtype)))
            return t;
    }
    return -1;
}

/* Whether node n computes its outputs at shape time (they are host values). */
static bool shape_time(const kn_net *net, const kn_node *n) {
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j] >= 0 && (net->tensors[n->out[j]].flags & KN_T_HOST))
            return true;
    return false;
}

/* A new tensor like t (type and recorded shape), named after it. */
static kiln_status twin(kn_net *net, int t, const char *suffix, int *out) {
    char hint[300];
    snprintf(hint, sizeof hint, "%.200s%s", net->tensors[t].name, suffix);
    KN_TRY(kn_net_new_tensor(net, hint, out));
    kn_tensor *a = &net->tensors[t], *b = &net->tensors[*out];
    b->dtype = a->flags & KN_T_CONST ? a->value.dtype : a->dtype;
    b->rank = a->rank;
    memcpy(b->dims, a->dims, sizeof b->dims);
    return KILN_OK;
}

static kiln_status add_reformat(kn_net *net, const char *op, int from, int to) {
    char name[600];
    snprintf(name, sizeof name, "reformat %.250s to %s", net->tensors[from].name,
             strcmp(op, "ToHost") == 0 ? "host" : "device");
    int idx;
    KN_TRY(kn_net_add_node(net, name, op, KN_DOMAIN_KILN, 1, 1, &from, 1, &to, &idx));
    kn_node *r = &net->nodes[idx];
    if (!(r->tactic = kn_strdup("copy")))
        return KILN_ERR_OUT_OF_MEMORY;
    return KILN_OK;
}

/* Whether tensor t needs a device copy: a graph output of a device type, or
 * read by a layer that runs on the device. */
static bool read_on_device(const kn_net *net, int count, int t) {
    if ((net->tensors[t].flags & KN_T_OUTPUT) && !host_dtype(net->tensors[t].dtype))
        return true;
    for (int i = 0; i < count; i++) {
        const kn_node *n = &net->nodes[i];
        if (n->dead || kx_host_tactic(n->tactic) || shape_time(net, n))
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == t)
                return true;
    }
    return false;
}

kiln_status kbld_place_reformats(kbld *b) {
    kn_net *net = b->net;
    if (!b->be || b->be == &kb_cpu_backend)
        return KILN_OK;
    int count = net->n_nodes, placed = 0, copies = 0;
    size_t room = (size_t)net->n_tensors + 1; /* every reformat adds one tensor */
    for (int i = 0; i < count; i++)
        if (kx_host_tactic(net->nodes[i].tactic) && !shape_time(net, &net->nodes[i])) {
            placed++;
            room += (size_t)(net->nodes[i].n_in + net->nodes[i].n_out);
        }
    if (placed == 0)
        return KILN_OK;
    /* per tensor: its copy in host memory (itself when it lives there), -1 none */
    int *host_of = kn_malloc(room * sizeof *host_of);
    if (!host_of)
        return KILN_ERR_OUT_OF_MEMORY;
    for (size_t t = 0; t < room; t++)
        host_of[t] = -1;
    for (int k = 0; k < net->n_inputs; k++)
        if (host_dtype(net->tensors[net->inputs[k]].dtype))
            host_of[net->inputs[k]] = net->inputs[k];
    kiln_status st = KILN_OK;
    for (int i = 0; i < count && st == KILN_OK; i++) {
        if (!kx_host_tactic(net->nodes[i].tactic) || shape_time(net, &net->nodes[i]))
            continue;
        for (int j = 0; j < net->nodes[i].n_in && st == KILN_OK; j++) {
            int t = net->nodes[i].in[j];
            if (t < 0 || (net->tensors[t].flags & (KN_T_CONST | KN_T_HOST)))
                continue; /* constants and shape values have host copies already */
            if (host_of[t] < 0) {
                int h;
                if ((st = twin(net, t, ".host", &h)) != KILN_OK ||
                    (st = add_reformat(net, "ToHost", t, h)) != KILN_OK)
                    break;
                host_of[t] = h;
                copies++;
            }
            net->nodes[i].in[j] = host_of[t];
        }
        for (int j = 0; j < net->nodes[i].n_out && st == KILN_OK; j++) {
            int t = net->nodes[i].out[j];
            if (t < 0)
                continue;
            if (!read_on_device(net, count, t)) {
                host_of[t] = t;
                continue;
            }
            int h;
            if ((st = twin(net, t, ".host", &h)) != KILN_OK)
                break;
            net->nodes[i].out[j] = h;
            net->tensors[h].producer = i;
            if ((st = add_reformat(net, "ToDevice", h, t)) != KILN_OK)
                break;
            host_of[t] = h;
            copies++;
        }
    }
    kn_free(host_of);
    KN_TRY(st);
    kn_log(KILN_LOG_INFO, "placement: %d layer(s) on the host, %d reformat layer(s)", placed,
           copies);
    return kn_net_toposort(net);
}
