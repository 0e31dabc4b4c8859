/* exec.c - binding nodes to kernels, shape inference with host values, the
 * activation memory plan and the run loop. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "graph/fused.h"
#include "graph/seq.h"
#include "plugin/plugin.h"

/* Bytes of a tensor's current type and shape; 0 for one never inferred.
 * Inference holds every shape to kn_check_size, so an overflow cannot reach
 * here from a shape that passed; one that did not reads as SIZE_MAX, which
 * the memory plan refuses (never rounds to 0). */
static size_t tinfo_bytes(const kn_tinfo *t) {
    if (t->rank < 0)
        return 0;
    size_t bytes;
    return kn_shape_fits(t->dtype, t->rank, t->dims, &bytes) ? bytes : SIZE_MAX;
}

/* Hold tensor t's type and shape ti to the sizes kiln plans (kn_check_size),
 * naming node n (the producer; NULL for inputs and constants) and t. */
static kiln_status check_tensor(const kn_net *net, const kn_node *n, int t, const kn_tinfo *ti) {
    if (kn_shape_fits(ti->dtype, ti->rank, ti->dims, NULL))
        return KILN_OK;
    uint32_t f = net->tensors[t].flags;
    char what[320];
    snprintf(what, sizeof what, "%s '%s'",
             n ? "output" : (f & KN_T_INPUT) ? "input" : (f & KN_T_CONST) ? "constant" : "tensor",
             net->tensors[t].name);
    return kn_check_size(n, what, ti->dtype, ti->rank, ti->dims, NULL);
}

/* Every activation starts 256 bytes into the arena past the previous one:
 * as aligned as the buffers the builder timed tactics on (cudaMalloc's),
 * since a library may pick its algorithm by operand alignment (cuBLASLt's
 * heuristic list does), and the plan must run the algorithm that was timed.
 * False when n cannot be rounded up within size_t. */
static bool align_tensor(size_t n, size_t *out) {
    if (n > SIZE_MAX - 255u)
        return false;
    *out = (n + 255u) & ~(size_t)255u;
    return true;
}

/* ---------------- program ---------------- */

/* Ops that read only their input's shape, never its values: computing them
 * on the host does not pull the input to the host. */
static bool reads_shape_only(const kn_node *n) {
    return n->domain[0] == 0 && (strcmp(n->op_type, "Shape") == 0 || strcmp(n->op_type, "Size") == 0 ||
                                 strcmp(n->op_type, "SequenceLength") == 0 ||
                                 strcmp(n->op_type, "OptionalHasElement") == 0);
}

/* SequenceLength / OptionalHasElement at shape time on a list not made yet:
 * the answer from what inference knows of it (seq.h). True when done. */
static kiln_status count_from_tinfo(const kn_node *n, const kn_tinfo *in, void *out, bool *done) {
    *done = false;
    if (!kn_dtype_is_handle((int)in->dtype) || in->value)
        return KILN_OK;
    bool len = strcmp(n->op_type, "SequenceLength") == 0;
    if (!in->count_known)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "the %s is needed when shapes are inferred, and is not known then",
                             len ? "sequence's length" : "optional's presence");
    if (len)
        memcpy(out, &in->count, sizeof in->count);
    else
        *(uint8_t *)out = in->count > 0 || kn_handle_is_seq(in->dtype);
    *done = true;
    return KILN_OK;
}

/* Whether node n's outputs are small values known at shape time: Shape and
 * Size, or shape arithmetic whose inputs are all such values or constants
 * (at least one a host value) and whose outputs are integers. */
static bool computable_at_shape_time(const kn_net *net, const kn_node *n) {
    static const char *const arith[] = {
        "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Add", "Sub", "Mul", "Div",
        "Mod", "Neg", "Abs", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
        "And", "Or", "Where", "Reshape", "Identity", "Flatten", "Min", "Max", "ReduceProd",
        "ReduceSum", "ReduceMin", "ReduceMax", "Range"};
    if (n->domain[0])
        return false;
    if (reads_shape_only(n))
        return true;
    bool known = false;
    for (size_t k = 0; k < KN_ARRAY_LEN(arith); k++)
        if (strcmp(n->op_type, arith[k]) == 0)
            known = true;
    if (!known || n->n_in == 0)
        return false;
    bool any_host = false;
    for (int j = 0; j < n->n_in; j++) {
        if (n->in[j] < 0)
            continue;
        uint32_t f = net->tensors[n->in[j]].flags;
        if (!(f & (KN_T_HOST | KN_T_CONST)))
            return false;
        if ((f & KN_T_CONST) && net->tensors[n->in[j]].value.nbytes > 4096)
            return false; /* a large table, not shape arithmetic */
        any_host |= (f & KN_T_HOST) != 0;
    }
    for (int j = 0; j < n->n_out; j++) {
        if (n->out[j] < 0)
            continue;
        kiln_dtype t = net->tensors[n->out[j]].dtype;
        if (t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_INT64 && t != KILN_DTYPE_INT32 &&
            t != KILN_DTYPE_BOOL)
            return false;
    }
    return any_host;
}

static kiln_status mark_host(kn_net *net) {
    for (int i = 0; i < net->n_tensors; i++)
        net->tensors[i].flags &= ~(uint32_t)KN_T_HOST;
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        const kn_op_schema *s = kn_op_find(n->domain, n->op_type);
        if (!s)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                 "op type '%s' of domain '%s' (opset %d) is not supported",
                                 n->op_type, n->domain[0] ? n->domain : "ai.onnx", n->opset);
        for (int j = 0; j < n->n_in && j < 32; j++)
            if ((s->value_inputs >> j & 1u) && n->in[j] >= 0 &&
                !(net->tensors[n->in[j]].flags & KN_T_CONST))
                net->tensors[n->in[j]].flags |= KN_T_HOST;
    }
    /* Shape and Size are known at shape time; so is small arithmetic on
     * such values (the Shape->Gather->Unsqueeze->Concat chains of exports):
     * compute it once per shape change on the host, not on every run. */
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (!computable_at_shape_time(net, n))
            continue;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0)
                net->tensors[n->out[j]].flags |= KN_T_HOST;
    }
    /* values needed on the host need their producers' inputs there too */
    for (int i = net->n_nodes - 1; i >= 0; i--) {
        const kn_node *n = &net->nodes[i];
        bool host = false;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && (net->tensors[n->out[j]].flags & KN_T_HOST))
                host = true;
        if (!host || reads_shape_only(n))
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0 && !(net->tensors[n->in[j]].flags & KN_T_CONST))
                net->tensors[n->in[j]].flags |= KN_T_HOST;
    }
    return KILN_OK;
}

static bool on_cpu(const kb_backend *be) { return be == &kb_cpu_backend; }

bool kx_is_reformat(const kn_node *n) {
    return strcmp(n->domain, KN_DOMAIN_KILN) == 0 &&
           (strcmp(n->op_type, "ToHost") == 0 || strcmp(n->op_type, "ToDevice") == 0);
}

/* kiln::ToHost / kiln::ToDevice: one copy on the step's stream through the
 * program's backend (the step's state). A host step after a ToHost waits
 * for the stream before it reads (run_steps). */
static kiln_status reformat_run(const kb_run *r) {
    const kb_backend *be = r->state;
    const kb_tensor *x = &r->in[0];
    size_t bytes;
    if (!kn_shape_fits(x->dtype, x->rank, x->dims, &bytes))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "reformat of an unplanned size");
    if (!bytes || r->out[0].data == x->data)
        return KILN_OK;
    kb_copy_kind kind = strcmp(r->node->op_type, "ToHost") == 0 ? KB_COPY_D2H : KB_COPY_H2D;
    return be->copy(r->out[0].data, x->data, bytes, kind, r->stream);
}

static const kb_kernel reformat_kernel = {"", KN_DOMAIN_KILN, "copy", NULL, NULL, NULL,
                                          NULL, NULL, reformat_run};

/* Whether tensor t lives in host memory at run time (device backends). */
static bool host_tensor(const kx_program *p, int t) { return p->on_host_t && p->on_host_t[t]; }

/* Where each tensor lives on a device backend: the outputs of host-placed
 * steps and of ToHost, and graph inputs of the types that only the host
 * holds (strings are host pointers, sequences and optionals host lists). */
static kiln_status mark_host_tensors(kx_program *p) {
    const kn_net *net = p->net;
    p->on_host_t = kn_calloc((size_t)net->n_tensors + 1, sizeof *p->on_host_t);
    if (!p->on_host_t)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < net->n_inputs; k++) {
        kiln_dtype t = net->tensors[net->inputs[k]].dtype;
        if (t == KILN_DTYPE_STRING || kn_dtype_is_handle((int)t))
            p->on_host_t[net->inputs[k]] = true;
    }
    for (int si = 0; si < p->n_steps; si++) {
        const kn_node *n = &net->nodes[p->steps[si].node];
        bool h = p->steps[si].on_host ||
                 (kx_is_reformat(n) && strcmp(n->op_type, "ToHost") == 0);
        for (int j = 0; h && j < n->n_out; j++)
            if (n->out[j] >= 0 && !(net->tensors[n->out[j]].flags & KN_T_HOST))
                p->on_host_t[n->out[j]] = true;
    }
    return KILN_OK;
}

kiln_status kx_program_init(kx_program *p, kn_net *net, int threads) {
    return kx_program_init_on(p, net, threads, &kb_cpu_backend);
}

/* Copy the constants that device steps read to the device. */
static kiln_status upload_constants(kx_program *p) {
    const kn_net *net = p->net;
    p->dconst = kn_calloc((size_t)net->n_tensors + 1, sizeof *p->dconst);
    if (!p->dconst)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int si = 0; si < p->n_steps; si++) {
        if (p->steps[si].host || p->steps[si].on_host) /* these read the host value */
            continue;
        const kn_node *n = &net->nodes[p->steps[si].node];
        for (int j = 0; j < n->n_in; j++) {
            int t = n->in[j];
            if (t < 0 || !(net->tensors[t].flags & KN_T_CONST) || p->dconst[t])
                continue;
            const kn_tdata *v = &net->tensors[t].value;
            KN_TRY(p->be->alloc(v->nbytes ? v->nbytes : 1, &p->dconst[t]));
            if (v->nbytes)
                KN_TRY(p->be->copy(p->dconst[t], v->data, v->nbytes, KB_COPY_H2D, NULL));
        }
    }
    for (int k = 0; k < net->n_outputs; k++) { /* constant outputs are copied from the device */
        int t = net->outputs[k];
        const kn_tdata *v = &net->tensors[t].value;
        if (!(net->tensors[t].flags & KN_T_CONST) || p->dconst[t])
            continue;
        KN_TRY(p->be->alloc(v->nbytes ? v->nbytes : 1, &p->dconst[t]));
        if (v->nbytes)
            KN_TRY(p->be->copy(p->dconst[t], v->data, v->nbytes, KB_COPY_H2D, NULL));
    }
    return p->be->sync(NULL);
}

/* Reshape-like steps only relabel a tensor's shape: when the output is an
 * activation planned in the arena and the input is one too, or a graph
 * input in caller memory (not a constant, host value or graph output), the
 * output shares the input's bytes and the step needs no run. No step ever
 * writes into its inputs, so an alias of a caller's input is never written. */
static void mark_aliases(kx_program *p) {
    static const char *const relabel[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                          "Identity"};
    const kn_net *net = p->net;
    for (int i = 0; i < p->n_steps; i++) {
        kx_step *s = &p->steps[i];
        const kn_node *n = &net->nodes[s->node];
        bool known = false;
        for (size_t k = 0; k < KN_ARRAY_LEN(relabel); k++)
            known |= strcmp(n->op_type, relabel[k]) == 0;
        if (!known || n->domain[0] || s->host || n->n_in < 1 || n->n_out < 1 || n->in[0] < 0 ||
            n->out[0] < 0)
            continue;
        uint32_t fi = net->tensors[n->in[0]].flags, fo = net->tensors[n->out[0]].flags;
        const uint32_t away = KN_T_CONST | KN_T_HOST | KN_T_OUTPUT;
        s->alias = !(fi & away) && !(fo & (away | KN_T_INPUT)) &&
                   host_tensor(p, n->in[0]) == host_tensor(p, n->out[0]);
    }
}

kiln_status kx_program_init_on(kx_program *p, kn_net *net, int threads, const kb_backend *be) {
    memset(p, 0, sizeof *p);
    p->net = net;
    p->be = be;
    p->threads = threads > 0 ? threads : kb_cpu_default_threads();
    KN_TRY(mark_host(net));
    if (net->n_nodes) {
        p->steps = kn_calloc((size_t)net->n_nodes, sizeof *p->steps);
        if (!p->steps)
            return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        kx_step *s = &p->steps[i];
        s->node = i;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && (net->tensors[n->out[j]].flags & KN_T_HOST))
                s->host = true;
        /* host steps compute shape values with the CPU reference kernels;
         * layers placed on the host run the CPU kernel the plan names */
        const char *htac = kx_host_tactic(n->tactic);
        s->on_host = !s->host && htac && !on_cpu(be);
        const kb_backend *kbe = s->host || s->on_host ? &kb_cpu_backend : be;
        const char *tactic = s->host ? "ref" : htac ? htac : n->tactic ? n->tactic : "ref";
        if (kx_is_reformat(n)) {
            s->k = &reformat_kernel;
            s->state = (void *)be;
            p->n_steps = i + 1;
            continue;
        }
        s->k = kpl_is_node(n) ? &kpl_kernel /* plugins run on every backend */
                              : kbe->kernel_find(n->domain, n->op_type, tactic);
        if (!s->k && !(n->tactic && !s->host)) {
            /* no reference kernel (a body's layer on the GPU, which no
             * build timed): the one registered last, as an untimed build
             * takes (the library's default: cuBLASLt's "lt", float
             * accumulation, not a float16-accumulation variant) */
            const kb_kernel *any[KB_MAX_CANDIDATES];
            int na = kbe->kernels_for(n->domain, n->op_type, any, KB_MAX_CANDIDATES);
            if (na > KB_MAX_CANDIDATES)
                na = KB_MAX_CANDIDATES;
            if (na > 0)
                s->k = any[na - 1];
        }
        if (s->k && !s->host && kx_ctl_syncs(s->k))
            p->no_graphs = true;
        if (s->on_host) { /* the stream is waited for before each host step */
            p->no_graphs = true;
            p->n_host_steps++;
        }
        if (!s->k) {
            kx_program_fini(p);
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "no %s kernel with tactic '%s'",
                                 kbe->name, tactic);
        }
        if (s->k->init) {
            kiln_status st = s->k->init(n, &s->state);
            if (st != KILN_OK) {
                p->n_steps = i;
                kx_program_fini(p);
                return st;
            }
        }
        p->n_steps = i + 1;
    }
    if (!on_cpu(be)) {
        kiln_status st = mark_host_tensors(p);
        if (st != KILN_OK) {
            kx_program_fini(p);
            return st;
        }
    }
    mark_aliases(p);
    if (!on_cpu(be)) {
        kiln_status st = upload_constants(p);
        if (st != KILN_OK) {
            kx_program_fini(p);
            return st;
        }
    }
    return KILN_OK;
}

void kx_program_fini(kx_program *p) {
    for (int i = 0; i < p->n_steps; i++)
        if (p->steps[i].k && p->steps[i].k->fini && p->steps[i].state)
            p->steps[i].k->fini(p->steps[i].state);
    kn_free(p->on_host_t);
    if (p->dconst) {
        for (int i = 0; i < p->net->n_tensors; i++)
            if (p->dconst[i])
                p->be->free(p->dconst[i]);
        kn_free(p->dconst);
    }
    kn_free(p->steps);
    memset(p, 0, sizeof *p);
}

/* ---------------- context ---------------- */

kiln_status kx_ctx_init(kx_ctx *c, const kx_program *p) {
    memset(c, 0, sizeof *c);
    c->p = p;
    const kn_net *net = p->net;
    size_t nt = (size_t)net->n_tensors + 1, ns = (size_t)p->n_steps + 1;
    size_t nviews = 1;
    for (int i = 0; i < p->n_steps; i++) {
        const kn_node *n = &net->nodes[p->steps[i].node];
        nviews += (size_t)(n->n_in + n->n_out);
    }
    c->ti = kn_calloc(nt, sizeof *c->ti);
    c->hostval = kn_calloc(nt, sizeof *c->hostval);
    c->addr = kn_calloc(nt, sizeof *c->addr);
    c->user = kn_calloc(nt, sizeof *c->user);
    c->offset = kn_calloc(nt, sizeof *c->offset);
    c->in_dims = kn_calloc((size_t)net->n_inputs + 1, sizeof *c->in_dims);
    c->in_rank = kn_calloc((size_t)net->n_inputs + 1, sizeof *c->in_rank);
    c->inst = kn_calloc(ns, sizeof *c->inst);
    c->ws = kn_calloc(ns, sizeof *c->ws);
    c->views = kn_calloc(nviews, sizeof *c->views);
    c->view_at = kn_calloc(ns, sizeof *c->view_at);
    c->step_ms = kn_calloc(ns, sizeof *c->step_ms);
    c->inplace = kn_calloc(ns, sizeof *c->inplace);
    c->saved = kn_calloc(nt, sizeof *c->saved);
    c->dhost = kn_calloc(nt, sizeof *c->dhost);
    c->in_info = kn_calloc((size_t)net->n_inputs + 1, sizeof *c->in_info);
    if (!c->in_info || !c->saved || !c->dhost || !c->ti || !c->hostval || !c->addr || !c->user || !c->offset || !c->in_dims ||
        !c->in_rank || !c->inst || !c->ws || !c->views || !c->view_at || !c->step_ms ||
        !c->inplace) {
        kx_ctx_fini(c);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < net->n_inputs; i++)
        c->in_rank[i] = -1;
    c->use_graphs = true;
    int v = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const kn_node *n = &net->nodes[p->steps[i].node];
        c->view_at[i] = v;
        v += n->n_in + n->n_out;
    }
    return KILN_OK;
}

/* Host memory for the host arena: page-locked where the backend has it, so
 * the reformats' copies run at the device's speed. */
static kiln_status host_alloc(const kb_backend *be, size_t bytes, void **out) {
    if (be->host_alloc)
        return be->host_alloc(bytes, out);
    *out = kn_aligned_alloc(bytes);
    return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

static void host_free(const kb_backend *be, void *p) {
    if (!p)
        return;
    if (be->host_alloc && be->host_free)
        be->host_free(p);
    else
        kn_aligned_free(p);
}

static void release_instances(kx_ctx *c) {
    for (int i = 0; i < c->p->n_steps; i++) {
        if (c->inst[i] && c->p->steps[i].k->release)
            c->p->steps[i].k->release(c->inst[i]);
        c->inst[i] = NULL;
    }
}

static void free_dhost(kx_ctx *c) {
    for (int i = 0; c->dhost && i < c->p->net->n_tensors; i++) {
        if (c->dhost[i])
            c->p->be->free(c->dhost[i]);
        c->dhost[i] = NULL;
    }
}

static void free_hostvals(kx_ctx *c) {
    for (int i = 0; i < c->p->net->n_tensors; i++) {
        kn_aligned_free(c->hostval[i]);
        c->hostval[i] = NULL;
        if (c->saved) {
            kn_aligned_free(c->saved[i]);
            c->saved[i] = NULL;
        }
    }
}

void kx_ctx_fini(kx_ctx *c) {
    if (!c->p)
        return;
    if (c->inst)
        release_instances(c);
    if (c->hostval)
        free_hostvals(c);
    kn_free(c->ti);
    kn_free(c->hostval);
    kn_free(c->addr);
    kn_free(c->user);
    kn_free(c->offset);
    kn_free(c->in_dims);
    kn_free(c->in_rank);
    kn_free(c->inst);
    kn_free(c->ws);
    kn_free(c->views);
    kn_free(c->view_at);
    kn_free(c->step_ms);
    kn_free(c->inplace);
    kn_free(c->saved);
    kn_free(c->in_info);
    kx_ctx_drop_graph(c);
    if (c->own_stream && c->p->be->stream_destroy)
        c->p->be->stream_destroy(c->own_stream);
    free_dhost(c);
    kn_free(c->dhost);
    if (c->arena)
        c->p->be->free(c->arena);
    if (c->workspace)
        c->p->be->free(c->workspace);
    host_free(c->p->be, c->harena);
    kn_aligned_free(c->hworkspace);
    memset(c, 0, sizeof *c);
}

void kx_ctx_set_input_info(kx_ctx *c, int input, const kn_tinfo *info) {
    if (input < 0 || input >= c->p->net->n_inputs)
        return;
    if (info)
        c->in_info[input] = *info;
    else
        memset(&c->in_info[input], 0, sizeof c->in_info[input]);
    c->shapes_ok = false;
    c->prepared = false;
}

kiln_status kx_ctx_set_input_shape(kx_ctx *c, int input, int rank, const int64_t *dims) {
    const kn_net *net = c->p->net;
    if (input < 0 || input >= net->n_inputs)
        return kn_error(KILN_ERR_NOT_FOUND, "no input %d", input);
    const kn_tensor *t = &net->tensors[net->inputs[input]];
    if (rank != t->rank)
        return kn_error(KILN_ERR_SHAPE, "input '%s' has rank %d, a shape of rank %d was given",
                        t->name, t->rank, rank);
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return kn_error(KILN_ERR_SHAPE, "input '%s': dimension %d is negative (%lld)", t->name,
                            i, (long long)dims[i]);
        if (t->dims[i] >= 0 && dims[i] != t->dims[i])
            return kn_error(KILN_ERR_SHAPE,
                            "input '%s': dimension %d must be %lld (static in the model), got %lld",
                            t->name, i, (long long)t->dims[i], (long long)dims[i]);
    }
    char what[320];
    snprintf(what, sizeof what, "input '%s'", t->name);
    KN_TRY(kn_check_size(NULL, what, t->dtype, rank, dims, NULL));
    if (c->in_rank[input] == rank &&
        (rank == 0 || memcmp(c->in_dims[input], dims, (size_t)rank * sizeof(int64_t)) == 0))
        return KILN_OK;
    c->in_rank[input] = rank;
    if (rank)
        memcpy(c->in_dims[input], dims, (size_t)rank * sizeof(int64_t));
    c->shapes_ok = false;
    c->prepared = false;
    return KILN_OK;
}

void kx_ctx_bind(kx_ctx *c, int tensor, void *data) {
    if (c->user[tensor] == data)
        return;
    c->user[tensor] = data;
    /* a host-value input's value feeds shape inference */
    if (c->p->net->tensors[tensor].flags & KN_T_HOST) {
        c->shapes_ok = false;
        c->prepared = false;
    }
}

/* Gather input infos of node n from c->ti into in[]. */
static void gather_inputs(const kx_ctx *c, const kn_node *n, kn_tinfo *in) {
    for (int j = 0; j < n->n_in; j++) {
        if (n->in[j] >= 0)
            in[j] = c->ti[n->in[j]];
        else
            memset(&in[j], 0, sizeof in[j]);
    }
}

static kiln_status run_host_step(kx_ctx *c, int si, kn_tinfo *in, kn_tinfo *out) {
    const kx_step *s = &c->p->steps[si];
    const kn_net *net = c->p->net;
    const kn_node *n = &net->nodes[s->node];
    kb_tensor kin[64], kout[16];
    if (n->n_in > 64 || n->n_out > 16)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs");
    for (int j = 0; j < n->n_in; j++) {
        memset(&kin[j], 0, sizeof kin[j]);
        if (n->in[j] < 0)
            continue;
        if (!in[j].value && tinfo_bytes(&in[j]) > 0 && !reads_shape_only(n))
            return kn_node_error(n, KILN_ERR_INTERNAL, "host value of input '%s' is unknown",
                                 net->tensors[n->in[j]].name);
        kin[j].data = (void *)in[j].value;
        kin[j].dtype = in[j].dtype;
        kin[j].rank = in[j].rank;
        memcpy(kin[j].dims, in[j].dims, sizeof kin[j].dims);
    }
    for (int j = 0; j < n->n_out; j++) {
        memset(&kout[j], 0, sizeof kout[j]);
        int t = n->out[j];
        if (t < 0)
            continue;
        kn_aligned_free(c->hostval[t]);
        KN_TRY(check_tensor(net, n, t, &out[j]));
        size_t bytes = tinfo_bytes(&out[j]);
        if (kn_dtype_is_handle((int)out[j].dtype))
            return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                 "a sequence or optional value cannot be made when shapes are "
                                 "inferred");
        c->hostval[t] = kn_aligned_alloc(bytes ? bytes : 1);
        if (!c->hostval[t])
            return KILN_ERR_OUT_OF_MEMORY;
        kout[j].data = c->hostval[t];
        kout[j].dtype = out[j].dtype;
        kout[j].rank = out[j].rank;
        memcpy(kout[j].dims, out[j].dims, sizeof kout[j].dims);
    }
    void *inst = NULL, *ws = NULL;
    size_t wsz = 0;
    bool done = false;
    if (reads_shape_only(n) && n->n_in > 0 && n->n_out > 0 && n->out[0] >= 0)
        KN_TRY(count_from_tinfo(n, &in[0], c->hostval[n->out[0]], &done));
    kiln_status st = KILN_OK;
    if (done)
        ; /* answered from the list's inferred facts */
    else if (s->k->prepare)
        st = s->k->prepare(s->state, n, kin, n->n_in, kout, n->n_out, &inst, &wsz);
    if (st == KILN_OK && wsz && !(ws = kn_aligned_alloc(wsz)))
        st = KILN_ERR_OUT_OF_MEMORY;
    if (st == KILN_OK && !done) {
        kb_run r = {n, s->state, inst, n->n_in, kin, n->n_out, kout, ws, wsz, 1, NULL};
        st = s->k->run(&r);
    }
    if (inst && s->k->release)
        s->k->release(inst);
    kn_aligned_free(ws);
    if (st != KILN_OK)
        return st;
    for (int j = 0; j < n->n_out; j++) {
        if (n->out[j] < 0)
            continue;
        out[j].rank = kout[j].rank; /* data-dependent kernels report true dims */
        memcpy(out[j].dims, kout[j].dims, sizeof out[j].dims);
        out[j].data_dependent = false;
        out[j].value = c->hostval[n->out[j]];
    }
    return KILN_OK;
}

/* Whether step n reads a tensor marked in `unknown` (NULL: none is); if so
 * its outputs are marked too. */
static bool reads_unknown(const kn_node *n, bool *unknown) {
    bool any = false;
    for (int j = 0; unknown && j < n->n_in; j++)
        any |= n->in[j] >= 0 && unknown[n->in[j]];
    for (int j = 0; any && j < n->n_out; j++)
        if (n->out[j] >= 0)
            unknown[n->out[j]] = true;
    return any;
}

/* Infer shapes of steps [from, n_steps). `unknown` (NULL at a context's
 * inference; set by kx_program_check and after a data-dependent step)
 * marks tensors whose shapes or values cannot be known yet: the steps that
 * read them are skipped. With `defer_dd`, the outputs of a later
 * data-dependent step are marked too: its readers keep their planned
 * (upper-bound) shapes until it has run and reported its true dims, so no
 * reader sees one data-dependent count already true and another still at
 * its bound (two NonZero of one mask: a TopK's K from one, its input from
 * the other). */
static kiln_status infer_from(kx_ctx *c, int from, bool *unknown, bool defer_dd) {
    const kn_net *net = c->p->net;
    kn_tinfo in[64], out[16];
    for (int si = from; si < c->p->n_steps; si++) {
        const kx_step *s = &c->p->steps[si];
        const kn_node *n = &net->nodes[s->node];
        if (n->n_in > 64 || n->n_out > 16)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs");
        if (reads_unknown(n, unknown))
            continue;
        const kn_op_schema *sch = kn_op_find(n->domain, n->op_type);
        if (!sch)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "unknown op");
        gather_inputs(c, n, in);
        memset(out, 0, sizeof(kn_tinfo) * (size_t)n->n_out);
        for (int j = 0; j < n->n_out; j++)
            out[j].rank = -1;
        kn_infer ic = {n, n->n_in, in, n->n_out, out};
        KN_TRY(sch->infer(&ic));
        KN_TRY(kn_check_strings(&ic));
        KN_TRY(kn_check_handles(&ic));
        for (int j = 0; j < n->n_out; j++) {
            if (n->out[j] < 0)
                continue;
            if (out[j].rank < 0 || out[j].rank > KILN_MAX_DIMS ||
                out[j].dtype == KILN_DTYPE_UNDEFINED)
                return kn_node_error(n, KILN_ERR_INTERNAL,
                                     "shape inference left output %d undefined", j);
            for (int d = 0; d < out[j].rank; d++)
                if (out[j].dims[d] < 0)
                    return kn_node_error(n, KILN_ERR_SHAPE,
                                         "output %d has negative dimension %lld", j,
                                         (long long)out[j].dims[d]);
            /* at build (every profile point) and at run alike: a shape
             * that overflows, or that no memory can hold, stops here */
            KN_TRY(check_tensor(net, n, n->out[j], &out[j]));
            if (out[j].data_dependent) {
                c->has_data_dependent = true;
                if (defer_dd && unknown && !s->host)
                    unknown[n->out[j]] = true;
            }
        }
        if (s->host)
            KN_TRY(run_host_step(c, si, in, out));
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0) {
                if (!s->host)
                    out[j].value = NULL;
                c->ti[n->out[j]] = out[j];
            }
    }
    return KILN_OK;
}

/* kx_ctx_infer; with `unknown`, a shape-tensor input with no bound value is
 * marked unknown instead of failing. */
static kiln_status infer_inputs(kx_ctx *c, bool *unknown) {
    const kn_net *net = c->p->net;
    c->shapes_ok = false;
    c->prepared = false;
    c->has_data_dependent = false;
    free_hostvals(c);
    for (int i = 0; i < net->n_tensors; i++) {
        const kn_tensor *t = &net->tensors[i];
        kn_tinfo *ti = &c->ti[i];
        memset(ti, 0, sizeof *ti);
        ti->rank = -1;
        if (t->flags & KN_T_CONST) {
            ti->dtype = t->value.dtype;
            ti->rank = t->value.rank;
            memcpy(ti->dims, t->value.dims, sizeof ti->dims);
            KN_TRY(check_tensor(net, NULL, i, ti));
            void *tmp;
            ti->value = kn_tdata_aligned(&t->value, &tmp);
            if (!ti->value && t->value.nbytes)
                return KILN_ERR_OUT_OF_MEMORY;
            c->hostval[i] = tmp; /* freed with the other host values */
        }
    }
    for (int k = 0; k < net->n_inputs; k++) {
        int i = net->inputs[k];
        const kn_tensor *t = &net->tensors[i];
        kn_tinfo *ti = &c->ti[i];
        ti->dtype = t->dtype;
        ti->rank = t->rank;
        if (c->in_rank[k] >= 0) {
            memcpy(ti->dims, c->in_dims[k], sizeof ti->dims);
        } else {
            memcpy(ti->dims, t->dims, sizeof ti->dims);
            for (int d = 0; d < t->rank; d++)
                if (t->dims[d] < 0)
                    return kn_error(KILN_ERR_SHAPE,
                                    "input '%s' has dynamic dimension %d (%s): set its shape first",
                                    t->name, d, t->dim_names[d] ? t->dim_names[d] : "unnamed");
        }
        KN_TRY(check_tensor(net, NULL, i, ti));
        if (kn_dtype_is_handle((int)t->dtype)) {
            /* a sequence or optional input: the facts of the list bound, or
             * those given (a body inferred for its node), else unknown:
             * what reads it is inferred once it is bound */
            kn_seq *sq = c->user[i] ? kn_handle_get(c->user[i]) : NULL;
            if (sq) {
                kn_seq_tinfo(sq, ti);
                ti->value = c->user[i]; /* the handle: the list itself is read at shape time */
                if (!(c->saved[i] = kn_aligned_alloc(sizeof sq->serial)))
                    return KILN_ERR_OUT_OF_MEMORY;
                memcpy(c->saved[i], &sq->serial, sizeof sq->serial);
            } else if (c->in_info && c->in_info[k].dtype != KILN_DTYPE_UNDEFINED) {
                *ti = c->in_info[k];
                ti->value = NULL;
                ti->data_dependent = false;
            } else {
                unknown[i] = true;
            }
            continue;
        }
        if ((t->flags & KN_T_HOST) && unknown && !c->user[i]) {
            unknown[i] = true;
        } else if (t->flags & KN_T_HOST) {
            if (!c->user[i])
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "input '%s' is a shape tensor: bind its data before shapes are "
                                "inferred",
                                t->name);
            ti->value = c->user[i];
            /* remember the values so a run can tell when they change */
            size_t bytes = tinfo_bytes(ti);
            if (!(c->saved[i] = kn_aligned_alloc(bytes ? bytes : 1)))
                return KILN_ERR_OUT_OF_MEMORY;
            if (bytes)
                memcpy(c->saved[i], c->user[i], bytes);
        }
    }
    KN_TRY(infer_from(c, 0, unknown, false));
    c->shapes_ok = true;
    return KILN_OK;
}

/* A sequence or optional input with no list bound and no facts given
 * leaves what reads it to be inferred when it is bound (an engine's own
 * inference before the caller binds it; the builder's). */
static kiln_status infer_all(kx_ctx *c, bool *unknown) {
    const kn_net *net = c->p->net;
    bool need = false;
    for (int k = 0; k < net->n_inputs && !unknown; k++) {
        int i = net->inputs[k];
        need |= kn_dtype_is_handle((int)net->tensors[i].dtype) && !kn_handle_get(c->user[i]) &&
                !(c->in_info && c->in_info[k].dtype != KILN_DTYPE_UNDEFINED);
    }
    if (!need)
        return infer_inputs(c, unknown);
    bool *own = kn_calloc((size_t)net->n_tensors + 1, sizeof *own);
    if (!own)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = infer_inputs(c, own);
    kn_free(own);
    return st;
}

kiln_status kx_ctx_infer(kx_ctx *c) { return infer_all(c, NULL); }

/* Whether the kernel bound to step si takes its node at the current shapes
 * (the test the builder chose it by); a reference kernel always does. */
static kiln_status check_tactic(const kx_ctx *c, int si, const bool *unknown) {
    const kx_step *s = &c->p->steps[si];
    const kn_net *net = c->p->net;
    const kn_node *n = &net->nodes[s->node];
    if (s->host || !s->k->supports || !n->tactic || strcmp(n->tactic, "ref") == 0)
        return KILN_OK;
    kn_tinfo in[64], out[16];
    for (int j = 0; j < n->n_out; j++) {
        memset(&out[j], 0, sizeof out[j]);
        if (n->out[j] >= 0) {
            if (unknown[n->out[j]])
                return KILN_OK;
            out[j] = c->ti[n->out[j]];
        }
    }
    gather_inputs(c, n, in);
    for (int j = 0; j < n->n_in; j++) /* as the builder asked: constants' values only */
        if (n->in[j] >= 0 && !(net->tensors[n->in[j]].flags & KN_T_CONST))
            in[j].value = NULL;
    if (!s->k->supports(n, in, n->n_in, out, n->n_out))
        return kn_node_error(n, KILN_ERR_PLAN,
                             "the plan's tactic '%s' (%s) does not take this layer at the shapes "
                             "it was chosen for",
                             n->tactic, c->p->be->name);
    return KILN_OK;
}

kiln_status kx_program_check(const kx_program *p, const int *rank,
                             const int64_t (*dims)[KILN_MAX_DIMS], bool tactics) {
    const kn_net *net = p->net;
    kx_ctx c;
    KN_TRY(kx_ctx_init(&c, p));
    bool *unknown = kn_calloc((size_t)net->n_tensors + 1, sizeof *unknown);
    kiln_status st = unknown ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; st == KILN_OK && k < net->n_inputs; k++)
        st = kx_ctx_set_input_shape(&c, k, rank[k], dims[k]);
    if (st == KILN_OK)
        st = infer_all(&c, unknown);
    for (int si = 0; tactics && st == KILN_OK && si < p->n_steps; si++)
        if (p->steps[si].node < net->n_nodes && p->steps[si].k)
            st = check_tactic(&c, si, unknown);
    kn_free(unknown);
    kx_ctx_fini(&c);
    return st;
}

/* ---------------- memory plan ---------------- */

typedef struct live {
    int t;
    int first, last;
    size_t size;
    bool host;                /* in the host arena (device backends) */
} live;

static int by_size_desc(const void *a, const void *b) {
    const live *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->t - y->t;
}

/* The tensor owning t's bytes, following Reshape aliases and in-place
 * Concat slices; *off (when given) gets the bytes into it. */
static int find_root(const int *root, const size_t *roff, int t, size_t *off) {
    size_t o = 0;
    while (root[t] != t) {
        o += roff[t];
        t = root[t];
    }
    if (off)
        *off = o;
    return t;
}

/* Concat in place: when every dim before the axis is 1 (NCHW channels at
 * batch 1, or axis 0), each input is one contiguous slice of the output, so
 * the producers can write there and the copy goes. Only on the CPU backend,
 * for an output and inputs that are arena activations of their own (not
 * graph inputs, outputs, constants or host values, not Reshape aliases,
 * not a slice of another Concat, each once), of the output's type and of
 * known shapes, and when every slice starts on the arena's 256-byte
 * alignment (as every activation does: kernels were timed so). Marks
 * root/roff; true when the Concat need not run. */
static bool concat_in_place(kx_ctx *c, int si, int *root, size_t *roff) {
    const kx_step *s = &c->p->steps[si];
    const kn_net *net = c->p->net;
    const kn_node *n = &net->nodes[s->node];
    const uint32_t away = KN_T_CONST | KN_T_HOST | KN_T_OUTPUT | KN_T_INPUT;
    if (!on_cpu(c->p->be) || s->host || s->alias || n->domain[0] ||
        strcmp(n->op_type, "Concat") != 0 || n->n_out != 1 || n->out[0] < 0 || n->n_in < 1 ||
        getenv("KILN_NO_CONCAT_IN_PLACE"))
        return false;
    int o = n->out[0];
    const kn_tinfo *to = &c->ti[o];
    if ((net->tensors[o].flags & away) || c->hostval[o] || root[o] != o || to->data_dependent ||
        to->rank < 1)
        return false;
    int64_t axis = kn_attr_int(n, "axis", 0);
    if (axis < 0)
        axis += to->rank;
    if (axis < 0 || axis >= to->rank)
        return false;
    for (int d = 0; d < axis; d++)
        if (to->dims[d] != 1)
            return false;
    size_t off = 0;
    for (int j = 0; j < n->n_in; j++) {
        int t = n->in[j];
        if (t < 0 || t == o || (net->tensors[t].flags & away) || c->hostval[t] || root[t] != t)
            return false;
        const kn_tinfo *ti = &c->ti[t];
        if (ti->dtype != to->dtype || ti->rank != to->rank || ti->data_dependent)
            return false;
        int pr = net->tensors[t].producer;
        if (pr < 0 || pr >= net->n_nodes)
            return false;
        for (int k = 0; k < j; k++)
            if (n->in[k] == t)
                return false;
        if (off % 256u != 0)
            return false;
        off += tinfo_bytes(ti);
    }
    if (off != tinfo_bytes(to))
        return false;
    /* the producers' steps must run (not host steps) */
    for (int j = 0; j < n->n_in; j++) {
        int pr = net->tensors[n->in[j]].producer;
        bool found = false;
        for (int q = 0; q < si; q++)
            if (c->p->steps[q].node == pr && !c->p->steps[q].host && !c->p->steps[q].alias)
                found = true;
        if (!found)
            return false;
    }
    off = 0;
    for (int j = 0; j < n->n_in; j++) {
        root[n->in[j]] = o;
        roff[n->in[j]] = off;
        off += tinfo_bytes(&c->ti[n->in[j]]);
    }
    return true;
}

/* Greedy by size: place each tensor at the lowest offset where it overlaps
 * no already-placed tensor whose lifetime overlaps its own. */
static kiln_status plan_memory(kx_ctx *c, size_t *arena_bytes, size_t *host_bytes,
                               size_t *sum_bytes) {
    const kn_net *net = c->p->net;
    int nt = net->n_tensors;
    live *lv = kn_calloc((size_t)nt + 1, sizeof *lv);
    size_t *placed_off = kn_calloc((size_t)nt + 1, sizeof *placed_off);
    int *placed = kn_calloc((size_t)nt + 1, sizeof *placed);
    if (!lv || !placed_off || !placed) {
        kn_free(lv);
        kn_free(placed_off);
        kn_free(placed);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    int *first = kn_malloc(((size_t)nt + 1) * sizeof(int));
    int *last = kn_malloc(((size_t)nt + 1) * sizeof(int));
    if (!first || !last) {
        kn_free(lv);
        kn_free(placed_off);
        kn_free(placed);
        kn_free(first);
        kn_free(last);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    int *root = kn_malloc(((size_t)nt + 1) * sizeof(int)); /* alias -> the tensor owning bytes */
    if (!root) {
        kn_free(lv);
        kn_free(placed_off);
        kn_free(placed);
        kn_free(first);
        kn_free(last);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    size_t *roff = kn_calloc((size_t)nt + 1, sizeof *roff); /* bytes into root[i] */
    if (!roff) {
        kn_free(root);
        kn_free(lv);
        kn_free(placed_off);
        kn_free(placed);
        kn_free(first);
        kn_free(last);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < nt; i++) {
        first[i] = -1;
        last[i] = -1;
        root[i] = i;
        c->offset[i] = SIZE_MAX;
    }
    for (int si = 0; si < c->p->n_steps; si++) {
        const kx_step *s = &c->p->steps[si];
        const kn_node *n = &net->nodes[s->node];
        c->inplace[si] = false;
        if (!s->host && s->alias)
            root[n->out[0]] = root[n->in[0]];
    }
    for (int si = 0; si < c->p->n_steps; si++)
        c->inplace[si] = concat_in_place(c, si, root, roff);
    for (int si = 0; si < c->p->n_steps; si++) {
        const kx_step *s = &c->p->steps[si];
        const kn_node *n = &net->nodes[s->node];
        if (s->host)
            continue;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && first[find_root(root, roff, n->out[j], NULL)] < 0)
                first[find_root(root, roff, n->out[j], NULL)] = si;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                last[find_root(root, roff, n->in[j], NULL)] = si;
    }
    for (int i = 0; i < nt; i++) { /* flatten: root[i] is the owner, roff[i] the bytes in */
        size_t off = 0;
        int r = find_root(root, roff, i, &off);
        root[i] = r;
        roff[i] = off;
    }
    for (int k = 0; k < net->n_outputs; k++)
        last[root[net->outputs[k]]] = c->p->n_steps;
    int n = 0;
    size_t sum = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < nt && st == KILN_OK; i++) {
        const kn_tensor *t = &net->tensors[i];
        bool alias = root[i] != i; /* shares its root's bytes; counted as an activation */
        if (!alias && (first[i] < 0 || (t->flags & (KN_T_CONST | KN_T_INPUT)) || c->hostval[i]))
            continue;
        /* a size that cannot be planned is refused, never rounded to 0 */
        size_t size;
        if (!align_tensor(tinfo_bytes(&c->ti[i]), &size) || kn_add_overflow(sum, size, &sum)) {
            st = check_tensor(net, NULL, i, &c->ti[i]);
            if (st == KILN_OK)
                st = kn_error(KILN_ERR_SHAPE,
                              "tensor '%s': the activations' bytes overflow the memory plan",
                              t->name);
            break;
        }
        if (alias)
            continue;
        lv[n].t = i;
        lv[n].first = first[i];
        lv[n].last = last[i] < first[i] ? first[i] : last[i];
        lv[n].size = size;
        lv[n].host = host_tensor(c->p, i);
        n++;
    }
    if (st == KILN_OK)
        qsort(lv, (size_t)n, sizeof *lv, by_size_desc);
    /* every offset + size below is at most sum, which did not overflow; the
     * host arena's tensors are placed apart from the device arena's */
    size_t total = 0, htotal = 0;
    for (int a = 0; st == KILN_OK && a < n; a++) {
        size_t off = 0;
        bool moved = true;
        while (moved) { /* first fit among conflicts, rescanning after each move */
            moved = false;
            for (int b = 0; b < a; b++) {
                if (lv[b].host != lv[a].host || lv[b].last < lv[a].first ||
                    lv[a].last < lv[b].first)
                    continue;
                size_t bo = placed_off[b];
                if (off < bo + lv[b].size && bo < off + lv[a].size) {
                    off = bo + lv[b].size;
                    moved = true;
                }
            }
        }
        placed_off[a] = off;
        c->offset[lv[a].t] = off;
        size_t *tot = lv[a].host ? &htotal : &total;
        if (off + lv[a].size > *tot)
            *tot = off + lv[a].size;
    }
    for (int i = 0; st == KILN_OK && i < nt; i++)
        if (root[i] != i)
            c->offset[i] = c->offset[root[i]] == SIZE_MAX ? SIZE_MAX : c->offset[root[i]] + roff[i];
    if (st == KILN_OK) {
        *arena_bytes = total;
        *host_bytes = htotal;
        *sum_bytes = sum;
    }
    kn_free(roff);
    kn_free(root);
    kn_free(lv);
    kn_free(placed_off);
    kn_free(placed);
    kn_free(first);
    kn_free(last);
    return st;
}

/* Tensor t's bytes in host memory, for a step placed on the host: host
 * values and constants where kiln keeps them, else its address (the host
 * arena or the caller's memory: the builder put a ToHost before any other). */
static void *host_addr(const kx_ctx *c, int t) {
    if (c->hostval[t])
        return c->hostval[t];
    uint32_t f = c->p->net->tensors[t].flags;
    if (f & KN_T_CONST)
        return (void *)c->ti[t].value;
    if ((f & KN_T_HOST) && (f & KN_T_INPUT) && c->user[t])
        return c->user[t]; /* a shape-value input: the caller's host bytes */
    return c->addr[t];
}

static void fill_views(kx_ctx *c, int si) {
    const kn_net *net = c->p->net;
    const kx_step *s = &c->p->steps[si];
    const kn_node *n = &net->nodes[s->node];
    kb_tensor *v = &c->views[c->view_at[si]];
    for (int j = 0; j < n->n_in + n->n_out; j++) {
        int t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
        memset(&v[j], 0, sizeof v[j]);
        if (t < 0)
            continue;
        v[j].data = s->on_host ? host_addr(c, t) : c->addr[t];
        v[j].host = c->hostval[t] ? c->hostval[t] : c->ti[t].value;
        v[j].dtype = c->ti[t].dtype;
        v[j].rank = c->ti[t].rank;
        memcpy(v[j].dims, c->ti[t].dims, sizeof v[j].dims);
    }
}

/* Where each tensor lives for the next run. */
static void resolve_addresses(kx_ctx *c) {
    const kn_net *net = c->p->net;
    bool cpu = on_cpu(c->p->be);
    for (int i = 0; i < net->n_tensors; i++) {
        void *a;
        if (c->offset[i] != SIZE_MAX)
            a = (c->user[i] && (net->tensors[i].flags & KN_T_OUTPUT))
                    ? c->user[i]
                    : (host_tensor(c->p, i) ? c->harena : c->arena) + c->offset[i];
        else if (c->hostval[i] && !(net->tensors[i].flags & KN_T_CONST))
            a = cpu ? c->hostval[i] : c->dhost[i];
        else if (net->tensors[i].flags & KN_T_CONST)
            a = cpu ? (void *)c->ti[i].value : c->p->dconst[i];
        else if (!cpu && c->dhost[i])
            a = c->dhost[i]; /* a shape-value input device steps read */
        else
            a = c->user[i];
        c->addr[i] = a;
    }
    /* aliases of graph inputs: the caller's bytes (arena aliases already
     * have their root's offset; steps run in order, so chains resolve) */
    for (int si = 0; si < c->p->n_steps; si++) {
        const kx_step *s = &c->p->steps[si];
        if (s->alias) {
            const kn_node *n = &net->nodes[s->node];
            c->addr[n->out[0]] = c->addr[n->in[0]];
        }
    }
}

/* GPU backends: device copies of the host values that device steps read or
 * that are graph outputs, and of the inputs bound in host memory because
 * their values feed shapes (KN_T_HOST inputs: a Loop body's iteration
 * number, a shape tensor) where a device step reads them too. Made once
 * per shape change (a host input's new value is one). */
static kiln_status upload_host_values(kx_ctx *c) {
    const kx_program *p = c->p;
    const kn_net *net = p->net;
    free_dhost(c);
    for (int si = 0; si <= p->n_steps; si++) {
        const kn_node *n = si < p->n_steps ? &net->nodes[p->steps[si].node] : NULL;
        if (n && (p->steps[si].host || p->steps[si].on_host))
            continue;
        int cnt = n ? n->n_in : net->n_outputs;
        for (int j = 0; j < cnt; j++) {
            int t = n ? n->in[j] : net->outputs[j];
            if (t < 0 || (net->tensors[t].flags & KN_T_CONST) || c->dhost[t])
                continue;
            uint32_t f = net->tensors[t].flags;
            const void *src = c->hostval[t];
            if (!src && n && (f & KN_T_HOST) && (f & KN_T_INPUT) && !host_tensor(p, t) &&
                !kn_dtype_is_handle((int)c->ti[t].dtype) && c->ti[t].dtype != KILN_DTYPE_STRING)
                src = c->user[t];
            if (!src)
                continue;
            size_t bytes = tinfo_bytes(&c->ti[t]);
            KN_TRY(p->be->alloc(bytes ? bytes : 1, &c->dhost[t]));
            if (bytes)
                KN_TRY(p->be->copy(c->dhost[t], src, bytes, KB_COPY_H2D, c->stream));
        }
    }
    return p->be->sync(c->stream);
}

static int ctx_threads(const kx_ctx *c) { return c->threads > 0 ? c->threads : c->p->threads; }

/* Prepare every device step's kernel for the current shapes. */
static kiln_status prepare_steps(kx_ctx *c, size_t *ws_max, size_t *hws_max) {
    const kn_net *net = c->p->net;
    *ws_max = 0;
    *hws_max = 0;
    for (int si = 0; si < c->p->n_steps; si++) {
        const kx_step *s = &c->p->steps[si];
        c->ws[si] = 0;
        if (s->host || s->alias || c->inplace[si])
            continue;
        fill_views(c, si);
        if (s->k->prepare) {
            const kn_node *n = &net->nodes[s->node];
            kb_tensor *v = &c->views[c->view_at[si]];
            KN_TRY(s->k->prepare(s->state, n, v, n->n_in, v + n->n_in, n->n_out, &c->inst[si],
                                 &c->ws[si]));
        }
        size_t *m = s->on_host ? hws_max : ws_max;
        if (c->ws[si] > *m)
            *m = c->ws[si];
    }
    return KILN_OK;
}

kiln_status kx_ctx_prepare(kx_ctx *c) {
    if (!c->shapes_ok)
        KN_TRY(kx_ctx_infer(c));
    if (c->prepared)
        return KILN_OK;
    const kb_backend *be = c->p->be;
    size_t arena = 0, harena = 0, sum = 0;
    KN_TRY(plan_memory(c, &arena, &harena, &sum));
    if (arena > c->arena_cap) {
        void *na = NULL;
        KN_TRY(be->alloc(arena, &na));
        if (c->arena)
            be->free(c->arena);
        c->arena = na;
        c->arena_cap = arena;
    }
    if (harena > c->harena_cap) {
        void *na = NULL;
        KN_TRY(host_alloc(be, harena, &na));
        host_free(be, c->harena);
        c->harena = na;
        c->harena_cap = harena;
    }
    if (!on_cpu(be))
        KN_TRY(upload_host_values(c));
    release_instances(c);
    resolve_addresses(c); /* so prepare functions see real pointers */
    /* libraries that fix their thread count when a kernel is made (oneDNN)
     * must see the engine's count here, not the machine's */
    int omp_before = omp_get_max_threads();
    omp_set_num_threads(ctx_threads(c));
    size_t ws_max = 0, hws_max = 0;
    kiln_status pst = prepare_steps(c, &ws_max, &hws_max);
    omp_set_num_threads(omp_before);
    KN_TRY(pst);
    if (hws_max > c->hworkspace_cap) {
        void *w = kn_aligned_alloc(hws_max);
        if (!w)
            return KILN_ERR_OUT_OF_MEMORY;
        kn_aligned_free(c->hworkspace);
        c->hworkspace = w;
        c->hworkspace_cap = hws_max;
    }
    if (ws_max > c->workspace_cap) {
        void *w = NULL;
        KN_TRY(be->alloc(ws_max, &w));
        if (c->workspace)
            be->free(c->workspace);
        c->workspace = w;
        c->workspace_cap = ws_max;
    }
    c->info.arena_bytes = arena;
    c->info.host_arena_bytes = harena;
    c->info.sum_bytes = sum;
    c->info.workspace_bytes = ws_max;
    c->prepared = true;
    return KILN_OK;
}

/* After a data-dependent step: re-infer later shapes, and check that they
 * still fit the memory planned from the upper bounds. */
static kiln_status after_data_dependent(kx_ctx *c, int si) {
    const kn_net *net = c->p->net;
    size_t nt = (size_t)net->n_tensors;
    size_t *planned = kn_malloc((nt + 1) * sizeof *planned);
    if (!planned)
        return KILN_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < nt; i++)
        planned[i] = tinfo_bytes(&c->ti[i]);
    const kn_node *n = &net->nodes[c->p->steps[si].node];
    const kb_tensor *v = &c->views[c->view_at[si]] + n->n_in;
    for (int j = 0; j < n->n_out; j++) {
        if (n->out[j] < 0)
            continue;
        kn_tinfo *ti = &c->ti[n->out[j]];
        ti->rank = v[j].rank;
        memcpy(ti->dims, v[j].dims, sizeof ti->dims);
        ti->data_dependent = false;
    }
    bool *later = kn_calloc(nt + 1, sizeof *later);
    if (!later) {
        kn_free(planned);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = infer_from(c, si + 1, later, true);
    kn_free(later);
    /* host values made again (a Shape or SequenceLength after the step)
     * have new buffers: later steps and the caller read those */
    if (st == KILN_OK && on_cpu(c->p->be))
        resolve_addresses(c);
    for (size_t i = 0; st == KILN_OK && i < nt; i++)
        if (c->offset[i] != SIZE_MAX && tinfo_bytes(&c->ti[i]) > planned[i])
            st = kn_error(KILN_ERR_RUNTIME,
                          "tensor '%s' grew past its planned size after a data-dependent shape",
                          net->tensors[i].name);
    kn_free(planned);
    return st;
}

/* Enqueue every step (and the copies of outputs no step writes) on
 * `stream`; `capture`: into the graph being captured there. */
static kiln_status run_steps(kx_ctx *c, void *stream, bool capture) {
    const kn_net *net = c->p->net;
    /* a host step waits for the device work enqueued before it: the copies
     * of its inputs (ToHost), and the copies out of host memory it is about
     * to overwrite (ToDevice of an earlier host step, this run or the last) */
    bool pending = true;
    for (int si = 0; si < c->p->n_steps; si++) {
        const kx_step *s = &c->p->steps[si];
        if (s->host || s->alias || c->inplace[si])
            continue;
        const kn_node *n = &net->nodes[s->node];
        fill_views(c, si);
        kb_tensor *v = &c->views[c->view_at[si]];
        kb_run r = {n, s->state, c->inst[si], n->n_in, v, n->n_out, v + n->n_in,
                    c->workspace, c->ws[si], ctx_threads(c), stream};
        if (s->on_host) {
            if (pending)
                KN_TRY(c->p->be->sync(stream));
            pending = false;
            r.workspace = c->hworkspace;
            r.stream = NULL;
        } else {
            pending = true;
        }
        double t0 = c->profiling ? kn_now_ms() : 0;
        kiln_status st = s->k->run(&r);
        if (c->profiling) { /* per-layer times need the device to finish each layer */
            if (st == KILN_OK)
                st = c->p->be->sync(stream);
            c->step_ms[si] += kn_now_ms() - t0;
        }
        if (st == KILN_OK && capture && c->p->be->graph_step)
            st = c->p->be->graph_step(stream, c->workspace, c->ws[si]);
        if (st != KILN_OK)
            return st;
        bool dd = false;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && c->ti[n->out[j]].data_dependent)
                dd = true;
        if (dd)
            KN_TRY(after_data_dependent(c, si));
    }
    /* outputs that no step wrote: constants, inputs and host values */
    for (int k = 0; k < net->n_outputs; k++) {
        int t = net->outputs[k];
        if (c->offset[t] != SIZE_MAX || !c->user[t] || c->user[t] == c->addr[t])
            continue;
        size_t bytes = tinfo_bytes(&c->ti[t]);
        if (bytes && c->addr[t])
            KN_TRY(c->p->be->copy(c->user[t], c->addr[t], bytes, KB_COPY_D2D, stream));
    }
    return KILN_OK;
}

void kx_ctx_drop_graph(kx_ctx *c) {
    if (c->graph && c->p->be->graph_destroy)
        c->p->be->graph_destroy(c->graph);
    c->graph = NULL;
    c->graph_sig = 0;
}

/* Run through a captured graph: capture once per shapes and addresses,
 * replay after that. Launch overhead of many small kernels goes away. */
static kiln_status run_graph(kx_ctx *c, void *stream) {
    const kb_backend *be = c->p->be;
    uint64_t sig = kn_hash64(c->addr, sizeof(void *) * (size_t)c->p->net->n_tensors,
                             (uint64_t)(uintptr_t)c->arena ^ (uint64_t)(uintptr_t)c->workspace);
    if (!c->graph || sig != c->graph_sig) {
        kx_ctx_drop_graph(c);
        KN_TRY(be->graph_begin(stream));
        kiln_status st = run_steps(c, stream, true);
        void *g = NULL;
        kiln_status st2 = be->graph_end(stream, &g); /* always end the capture */
        if (st != KILN_OK) {
            if (g)
                be->graph_destroy(g);
            return st;
        }
        KN_TRY(st2);
        c->graph = g;
        c->graph_sig = sig;
    }
    return be->graph_launch(c->graph, stream);
}

kiln_status kx_ctx_run(kx_ctx *c) {
    const kn_net *net = c->p->net;
    const kb_backend *be = c->p->be;
    if (c->dd_ran) { /* the last run shrank data-dependent shapes */
        c->shapes_ok = false;
        c->prepared = false;
        c->dd_ran = false;
    }
    for (int k = 0; c->shapes_ok && k < net->n_inputs; k++) {
        int t = net->inputs[k]; /* shape-tensor inputs whose values changed */
        kn_seq *sq = kn_dtype_is_handle((int)net->tensors[t].dtype) ? kn_handle_get(c->user[t])
                                                                    : NULL;
        if (kn_dtype_is_handle((int)net->tensors[t].dtype)
                ? (!c->saved[t] || !sq || memcmp(c->saved[t], &sq->serial, sizeof sq->serial) != 0)
                : (c->saved[t] && c->user[t] &&
                   memcmp(c->saved[t], c->user[t], tinfo_bytes(&c->ti[t])) != 0)) {
            c->shapes_ok = false;
            c->prepared = false;
        }
    }
    if (!c->prepared)
        kx_ctx_drop_graph(c);
    KN_TRY(kx_ctx_prepare(c));
    resolve_addresses(c);
    for (int k = 0; k < net->n_inputs; k++) {
        int t = net->inputs[k];
        if (!c->user[t] && tinfo_bytes(&c->ti[t]) > 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' has no address bound",
                            net->tensors[t].name);
    }
    /* a caller that passes no stream gets the context's own, and a
     * synchronous call (graphs cannot be captured on the legacy stream) */
    void *stream = c->stream;
    if (!stream && be->stream_create) {
        if (!c->own_stream)
            KN_TRY(be->stream_create(&c->own_stream));
        stream = c->own_stream;
    }
    bool graph = c->use_graphs && be->graph_begin && stream && !c->profiling &&
                 !c->has_data_dependent && !c->p->no_graphs;
    KN_TRY(graph ? run_graph(c, stream) : run_steps(c, stream, false));
    if (!c->stream && stream)
        KN_TRY(be->sync(stream));
    if (c->profiling)
        c->runs++;
    c->dd_ran = c->has_data_dependent;
    return KILN_OK;
}
