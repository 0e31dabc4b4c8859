/* pass_io.c - the types network inputs and outputs have in the plan
 * (kiln_builder_config_set_io_type; trtexec's --inputIOFormats /
 * --outputIOFormats). Runs after the precision pass:
 *  - an output given another float type is written in it: when its producer
 *    is a Cast from a tensor already of that type (the precision pass's cast
 *    back to float32), the producer of that tensor writes the output
 *    directly and the Cast goes; otherwise a Cast to the type is added;
 *  - an input given another float type takes it, and a Cast after it gives
 *    the layers what they read before; readers that cast it to the new type
 *    (the precision pass's casts) read the input itself.
 * Names, positions and shapes of the network's inputs and outputs stay as
 * they are. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

static bool float_type(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

/* The type requested for input/output k, which has type `has` (UNDEFINED:
 * none). An entry for this position applies as it is; one for every input
 * (output) applies to those of its kind: a float type to the float tensors,
 * another to the rest. check_type judges the result. */
static kiln_dtype wanted(const kbld_io_type *io, int n_io, bool output, int k, kiln_dtype has) {
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    for (int i = 0; i < n_io; i++) {
        if (io[i].output != output)
            continue;
        if (io[i].index == k)
            return io[i].dtype;
        if (io[i].index == -1 && float_type(has) == float_type(io[i].dtype))
            dt = io[i].dtype;
    }
    return dt;
}

static bool is_cast_to(const kn_node *n, kiln_dtype to) {
    return !n->dead && kpass_is(n, "Cast") && n->n_in >= 1 && n->n_out == 1 &&
           kn_attr_int(n, "to", 0) == (int64_t)to;
}

/* Output t written in dt. */
static kiln_status output_to(kpass *p, int t, kiln_dtype dt, int *changed) {
    kn_net *net = p->net;
    int c = kpass_producer(p, t);
    if (c >= 0 && is_cast_to(&net->nodes[c], kpass_dtype(p, t)) && net->nodes[c].in[0] >= 0 &&
        kpass_dtype(p, net->nodes[c].in[0]) == dt && kpass_producer(p, net->nodes[c].in[0]) >= 0 &&
        !kpass_graph_io(net, net->nodes[c].in[0])) {
        /* the cast back from a tensor of that type: its producer writes t */
        int u = net->nodes[c].in[0], pu = kpass_producer(p, u);
        kpass_kill(p, c);
        kpass_move_tensor(p, pu, u, t);
        kn_log(KILN_LOG_VERBOSE, "io types: output '%s' is written in %s by '%s'",
               net->tensors[t].name, kiln_dtype_name(dt), net->nodes[pu].name);
    } else {
        /* t's producer writes a new tensor; a Cast writes t */
        int pt = kpass_producer(p, t), t2;
        if (pt < 0)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "output '%s' is an input or a constant: its type cannot change",
                            net->tensors[t].name);
        char hint[512];
        snprintf(hint, sizeof hint, "%s_%s", net->tensors[t].name,
                 kiln_dtype_name(kpass_dtype(p, t)));
        KN_TRY(kn_net_new_tensor(net, hint, &t2));
        kpass_move_tensor(p, pt, t, t2);
        KN_TRY(kpass_add_cast(net, "output", t2, t, dt));
        kn_log(KILN_LOG_VERBOSE, "io types: output '%s' cast to %s", net->tensors[t].name,
               kiln_dtype_name(dt));
    }
    (*changed)++;
    return KILN_OK;
}

/* Input t (declared `was`) bound as dt. */
static kiln_status input_as(kpass *p, int t, kiln_dtype was, kiln_dtype dt, int *changed) {
    kn_net *net = p->net;
    int t2 = -1;
    /* readers: a Cast to dt reads the input itself; the rest read a Cast of
     * it back to the declared type */
    for (int r = p->rd_start[t]; r < p->rd_start[t + 1]; r++) {
        int i = p->rd_node[r];
        kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        if (is_cast_to(n, dt) && n->out[0] >= 0 && !kpass_graph_io(net, n->out[0])) {
            kpass_replace_reads(p, n->out[0], t);
            kpass_kill(p, i);
            continue;
        }
        if (t2 < 0) {
            char hint[512];
            snprintf(hint, sizeof hint, "%s_%s", net->tensors[t].name, kiln_dtype_name(was));
            KN_TRY(kn_net_new_tensor(net, hint, &t2));
        }
        n = &net->nodes[i]; /* the tensor table may have moved, not the nodes */
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == t)
                n->in[j] = t2;
        kpass_touch(p, i);
    }
    if (t2 >= 0)
        KN_TRY(kpass_add_cast(net, "input", t, t2, was));
    net->tensors[t].dtype = dt;
    kn_log(KILN_LOG_VERBOSE, "io types: input '%s' is bound as %s", net->tensors[t].name,
           kiln_dtype_name(dt));
    (*changed)++;
    return KILN_OK;
}

/* Whether tensor t, an input or output (`what`) of type `has`, can take
 * `dt`; an error names it. */
static kiln_status check_type(const kn_net *net, const char *what, int t, kiln_dtype has,
                              kiln_dtype dt) {
    if (dt == has || (float_type(has) && float_type(dt)))
        return KILN_OK;
    return kn_error(KILN_ERR_UNSUPPORTED, "%s '%s' is %s: it can be bound as %s, not %s", what,
                    net->tensors[t].name, kiln_dtype_name(has),
                    float_type(has) ? "float, float16 or bfloat16" : kiln_dtype_name(has),
                    kiln_dtype_name(dt));
}

kiln_status kpass_io_types(kpass *p, int *changed) {
    int n_io = 0;
    const kbld_io_type *io = kbld_io_types(p->b->cfg, &n_io);
    if (n_io == 0)
        return KILN_OK;
    kn_net *net = p->net;
    for (int i = 0; i < n_io; i++) {
        int n = io[i].output ? net->n_outputs : net->n_inputs;
        if (io[i].index >= n)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "%s type given for %s %d, but the network has %d %s%s",
                            io[i].output ? "an output" : "an input",
                            io[i].output ? "output" : "input", io[i].index, n,
                            io[i].output ? "output" : "input", n == 1 ? "" : "s");
    }
    /* outputs first: their producers and types are those the pass began with */
    bool outputs = false;
    for (int i = 0; i < n_io; i++)
        outputs |= io[i].output;
    if (outputs) {
        KN_TRY(kpass_need_shapes(p));
        if (p->shapes_state != 1)
            return kn_error(KILN_ERR_SHAPE, "output types: the network's shapes are unknown");
    }
    for (int k = 0; outputs && k < net->n_outputs; k++) {
        int t = net->outputs[k];
        kiln_dtype has = kpass_dtype(p, t), dt = wanted(io, n_io, true, k, has);
        if (dt == KILN_DTYPE_UNDEFINED || dt == has)
            continue;
        KN_TRY(check_type(net, "output", t, has, dt));
        KN_TRY(output_to(p, t, dt, changed));
    }
    for (int k = 0; k < net->n_inputs; k++) {
        int t = net->inputs[k];
        kiln_dtype was = net->tensors[t].dtype, dt = wanted(io, n_io, false, k, was);
        if (dt == KILN_DTYPE_UNDEFINED || dt == was)
            continue;
        KN_TRY(check_type(net, "input", t, was, dt));
        KN_TRY(input_as(p, t, was, dt, changed));
    }
    return KILN_OK;
}
