/* control.c - If, Loop and Scan: each body is a network of its own, run by
 * kiln's executor (a program and a context per body) from the control-flow
 * node's kernel, and body shape inference for ops_control.c. The kernels are
 * written once over the body's backend (kx_ctl_prepare): the CPU's table
 * below binds bodies to the CPU reference kernels, the CUDA backend's
 * (src/backends/cuda/k_control.c) to its own, and every copy of a value goes
 * through that backend (see "values" below). */
#include <string.h>

#include "exec.h"
#include "graph/control.h"
#include "graph/seq.h"

/* ---- values: where they are and how they move (backend-neutral) ----
 * On the CPU every value is host memory. On a GPU backend a tensor's bytes
 * are device memory, and kiln may also know them on the host (constants and
 * shape-time values, kb_tensor.host); a body input marked KN_T_HOST (its
 * value feeds the body's shape inference: an inner If's condition, say)
 * must be bound to host memory. */

/* A value's places: dev its device bytes (NULL on the CPU or when only the
 * host has it), host its host bytes (NULL when the host does not know it). */
typedef struct kx_ref {
    const void *dev, *host;
} kx_ref;

/* A growable buffer in device memory (host memory on the CPU) or, with
 * `host`, in host memory (page-locked where the backend has it). */
typedef struct kx_buf {
    void *p;
    size_t cap;
} kx_buf;

static bool be_host(const kb_backend *be) { return be == &kb_cpu_backend; }

static void buf_free(const kb_backend *be, kx_buf *b, bool host) {
    if (b->p) {
        if (!host || be_host(be))
            be->free(b->p);
        else if (be->host_free)
            be->host_free(b->p);
        else
            kn_aligned_free(b->p);
    }
    b->p = NULL;
    b->cap = 0;
}

static kiln_status buf_fit(const kb_backend *be, kx_buf *b, size_t bytes, bool host) {
    if (b->p && b->cap >= bytes)
        return KILN_OK;
    size_t n = bytes ? bytes : 1;
    void *p = NULL;
    if (!host || be_host(be))
        KN_TRY(be->alloc(n, &p));
    else if (be->host_alloc)
        KN_TRY(be->host_alloc(n, &p));
    else if (!(p = kn_aligned_alloc(n)))
        return KILN_ERR_OUT_OF_MEMORY;
    buf_free(be, b, host);
    b->p = p;
    b->cap = n;
    return KILN_OK;
}

/* A kernel's tensor as a value: on a GPU backend its data is device memory
 * unless it is the host copy itself (a shape-tensor graph input). */
static kx_ref ref_of(const kb_backend *be, const kb_tensor *t) {
    if (be_host(be))
        return (kx_ref){NULL, t->data};
    return (kx_ref){t->data == t->host ? NULL : t->data, t->host};
}

/* Memory of this backend (device; host on the CPU) as a value. */
static kx_ref ref_dev(const kb_backend *be, const void *p) {
    return be_host(be) ? (kx_ref){NULL, p} : (kx_ref){p, NULL};
}

/* Copy `bytes` of v into backend memory dst, enqueued on stream. */
static kiln_status put_dev(const kb_backend *be, void *dst, kx_ref v, size_t bytes, void *stream) {
    const void *src = v.dev ? v.dev : v.host;
    if (!bytes || dst == src)
        return KILN_OK;
    if (!src)
        return kn_error(KILN_ERR_INTERNAL, "control flow: a value of %zu bytes has no address",
                        bytes);
    return be->copy(dst, src, bytes, be_host(be) || v.dev ? KB_COPY_D2D : KB_COPY_H2D, stream);
}

/* v's bytes in host memory: where the host has them, else one copy from the
 * device into `stage` and a wait for it. */
static kiln_status get_host(const kb_backend *be, kx_ref v, size_t bytes, kx_buf *stage,
                            void *stream, const void **out) {
    if (be_host(be) || v.host || !bytes) { /* on the CPU every value is host memory */
        *out = v.host;
        return KILN_OK;
    }
    KN_TRY(buf_fit(be, stage, bytes, true));
    KN_TRY(be->copy(stage->p, v.dev, bytes, KB_COPY_D2H, stream));
    KN_TRY(be->sync(stream));
    *out = stage->p;
    return KILN_OK;
}

/* v's bytes in backend memory: where they are, else one copy into `stage`. */
static kiln_status get_dev(const kb_backend *be, kx_ref v, size_t bytes, kx_buf *stage,
                           void *stream, const void **out) {
    if (be_host(be) || v.dev || !bytes) {
        *out = v.dev ? v.dev : v.host;
        return KILN_OK;
    }
    KN_TRY(buf_fit(be, stage, bytes, false));
    KN_TRY(be->copy(stage->p, v.host, bytes, KB_COPY_H2D, stream));
    *out = stage->p;
    return KILN_OK;
}

/* One body, ready to run: an owned copy of the subgraph with its inputs
 * typed from the node's inputs, bound to backend be's kernels (host steps
 * on the CPU reference, as everywhere). hst/dst: per body input, host and
 * device staging for values bound where they are not. */
typedef struct kx_body {
    kn_net *net;
    kx_program p;
    kx_ctx c;
    int state; /* 0 closed, 1 program, 2 program and context */
    const kb_backend *be;
    int n_in;
    kx_buf *hst, *dst;
} kx_body;

static void body_close(kx_body *b) {
    if (b->state >= 2)
        kx_ctx_fini(&b->c);
    if (b->state >= 1)
        kx_program_fini(&b->p);
    for (int i = 0; b->hst && i < b->n_in; i++)
        buf_free(b->be, &b->hst[i], true);
    for (int i = 0; b->dst && i < b->n_in; i++)
        buf_free(b->be, &b->dst[i], false);
    kn_free(b->hst);
    kn_free(b->dst);
    kn_net_free(b->net);
    memset(b, 0, sizeof *b);
}

/* in[i]: dtype and rank of body input i (dims stay dynamic). */
static kiln_status body_open(kx_body *b, const kn_node *node, const kn_net *src, int n,
                             const kn_tinfo *in, const kb_backend *be) {
    memset(b, 0, sizeof *b);
    b->be = be;
    if (src->n_inputs != n)
        return kn_node_error(node, KILN_ERR_INTERNAL, "body has %d inputs, %d given", src->n_inputs,
                             n);
    KN_TRY(kn_net_clone(src, &b->net));
    for (int i = 0; i < n; i++) {
        kn_tensor *t = &b->net->tensors[b->net->inputs[i]];
        if (in[i].dtype == KILN_DTYPE_UNDEFINED) {
            body_close(b);
            return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                 "body input '%s' has no value (absent optional input)", t->name);
        }
        bool handles = kn_dtype_is_handle((int)t->dtype) && kn_dtype_is_handle((int)in[i].dtype);
        if (t->dtype != KILN_DTYPE_UNDEFINED && t->dtype != in[i].dtype && !handles) {
            body_close(b);
            return kn_node_error(node, KILN_ERR_SHAPE, "body input '%s' is %s, the value given %s",
                                 t->name, kiln_dtype_name(t->dtype), kiln_dtype_name(in[i].dtype));
        }
        t->dtype = in[i].dtype;
        t->rank = in[i].rank;
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            t->dims[d] = -1;
    }
    b->hst = kn_calloc((size_t)n + 1, sizeof *b->hst);
    b->dst = kn_calloc((size_t)n + 1, sizeof *b->dst);
    if (!b->hst || !b->dst) {
        body_close(b);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    b->n_in = n;
    kiln_status st = kn_net_toposort(b->net);
    if (st == KILN_OK)
        st = kx_program_init_on(&b->p, b->net, 1, be);
    if (st == KILN_OK) {
        b->state = 1;
        st = kx_ctx_init(&b->c, &b->p);
    }
    if (st == KILN_OK) {
        b->state = 2;
        b->c.use_graphs = false; /* the node's kernel runs it step by step */
    } else {
        body_close(b);
    }
    if (st != KILN_OK)
        return kn_error_wrap(st, "in the body of node '%s' (%s)", node->name, node->op_type);
    return KILN_OK;
}

static size_t tbytes(kiln_dtype dt, int rank, const int64_t *dims) {
    int64_t n = kn_numel(rank, dims);
    return n < 0 ? 0 : (size_t)n * kiln_dtype_size(dt);
}

/* Set input i's shape and bind value v there: host memory for an input
 * the body reads on the host, backend memory for the others (staged when v
 * is not already there). stream: the run's (NULL at inference). */
static kiln_status body_input(kx_body *b, int i, int rank, const int64_t *dims, kx_ref v,
                              void *stream) {
    KN_TRY(kx_ctx_set_input_shape(&b->c, i, rank, dims));
    int t = b->net->inputs[i];
    size_t bytes = tbytes(b->net->tensors[t].dtype, rank, dims);
    const void *p = NULL;
    if (b->net->tensors[t].flags & KN_T_HOST)
        KN_TRY(get_host(b->be, v, bytes, &b->hst[i], stream, &p));
    else
        KN_TRY(get_dev(b->be, v, bytes, &b->dst[i], stream, &p));
    kx_ctx_bind(&b->c, t, (void *)p);
    return KILN_OK;
}

/* Output k of the last run: where it is, and its shape. */
static kx_ref body_output(const kx_body *b, int k, kn_tinfo *ti) {
    int t = b->net->outputs[k];
    const kn_tensor *x = &b->net->tensors[t];
    *ti = b->c.ti[t];
    if (be_host(b->be)) {
        const void *p = b->c.addr[t]                ? b->c.addr[t]
                        : b->c.hostval[t]           ? b->c.hostval[t]
                        : (x->flags & KN_T_CONST) ? x->value.data
                                                    : b->c.user[t];
        return (kx_ref){NULL, p};
    }
    if ((x->flags & KN_T_INPUT) && (x->flags & KN_T_HOST)) /* bound to host memory */
        return (kx_ref){NULL, b->c.user[t]};
    const void *host = (x->flags & KN_T_CONST) ? b->c.ti[t].value : b->c.hostval[t];
    return (kx_ref){b->c.addr[t], host};
}

/* The most bytes of zeros an estimate binds to one body input. */
#define ESTIMATE_MAX_BYTES ((size_t)1 << 26)

kiln_status kx_body_infer_est(const kn_node *node, const kn_net *body, int n_in,
                              const kn_tinfo *in, int n_out, kn_tinfo *out, bool *estimated) {
    if (body->n_outputs < n_out)
        return kn_node_error(node, KILN_ERR_PARSE, "body has %d outputs, %d wanted",
                             body->n_outputs, n_out);
    kx_body b;
    KN_TRY(body_open(&b, node, body, n_in, in, &kb_cpu_backend));
    void **zeros = kn_calloc((size_t)n_in + 1, sizeof *zeros);
    kiln_status st = zeros ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    bool est = false;
    for (int i = 0; i < n_in && st == KILN_OK; i++) {
        const kn_tensor *t = &b.net->tensors[b.net->inputs[i]];
        kx_ref v = {NULL, in[i].value};
        if (kn_dtype_is_handle((int)in[i].dtype))
            kx_ctx_set_input_info(&b.c, i, &in[i]); /* what is known of the list */
        if ((t->flags & KN_T_HOST) && !in[i].value && !kn_dtype_is_handle((int)in[i].dtype)) {
            size_t bytes = tbytes(in[i].dtype, in[i].rank, in[i].dims);
            if (!estimated || bytes > ESTIMATE_MAX_BYTES) {
                st = kn_node_error(node, KILN_ERR_SHAPE,
                                   "the body needs the value of input '%s' to infer shapes",
                                   t->name);
                break;
            }
            /* known only when the node runs: zeros stand in for it, and
             * the shapes they give are an estimate */
            if (!(zeros[i] = kn_aligned_alloc(bytes ? bytes : 1))) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            memset(zeros[i], 0, bytes ? bytes : 1);
            v.host = zeros[i];
            est = true;
        }
        st = body_input(&b, i, in[i].rank, in[i].dims, v, NULL);
    }
    if (st == KILN_OK)
        st = kx_ctx_infer(&b.c);
    for (int k = 0; k < n_out && st == KILN_OK; k++) {
        out[k] = b.c.ti[b.net->outputs[k]];
        out[k].value = NULL;
        if (est && !kn_dtype_is_handle((int)out[k].dtype))
            out[k].data_dependent = true;
    }
    body_close(&b);
    for (int i = 0; zeros && i < n_in; i++)
        kn_aligned_free(zeros[i]);
    kn_free(zeros);
    if (st != KILN_OK)
        return kn_error_wrap(st, "inferring the body of node '%s' (%s)", node->name, node->op_type);
    if (estimated)
        *estimated |= est;
    return KILN_OK;
}

kiln_status kx_body_infer(const kn_node *node, const kn_net *body, int n_in, const kn_tinfo *in,
                          int n_out, kn_tinfo *out) {
    return kx_body_infer_est(node, body, n_in, in, n_out, out, NULL);
}

/* ---- kernels ----
 * One set for every backend: a node's instance holds its bodies, bound to
 * the backend kx_ctl_prepare was given, and the run functions move values
 * only through that backend, on the run's stream. A device value is read on
 * the host (Loop's condition after each iteration, a trip count the host
 * does not know) by one copy into page-locked memory and a wait; kernels
 * that do so (kx_ctl_syncs) keep their plan from capturing CUDA graphs. */

/* refs: the sequence and optional lists this node's outputs hold after its
 * last run (a reference each, dropped at the next run or at release). */
typedef struct ctl_inst {
    int n;
    kx_body b[2];
    const kb_backend *be;
    kx_buf pin; /* small values read back from the device */
    kn_seq *refs[64];
    int map_ranks[64]; /* SequenceMap: the body input ranks its body was opened for */
} ctl_inst;

static void drop_refs(ctl_inst *ci) {
    for (int j = 0; j < 64; j++) {
        kn_seq_unref(ci->refs[j]);
        ci->refs[j] = NULL;
    }
}

void kx_ctl_release(void *p) {
    ctl_inst *ci = p;
    for (int i = 0; ci && i < ci->n; i++)
        body_close(&ci->b[i]);
    if (ci) {
        buf_free(ci->be, &ci->pin, true);
        drop_refs(ci);
    }
    kn_free(ci);
}

/* Output j of the node holds the list its handle bytes name. */
static void keep_ref(ctl_inst *ci, int j, const kb_tensor *o) {
    if (j < 0 || j >= 64 || !kn_dtype_is_handle((int)o->dtype) || !o->data)
        return;
    kn_seq *s = kn_handle_get(o->data);
    kn_seq_ref(s);
    kn_seq_unref(ci->refs[j]);
    ci->refs[j] = s;
}

static const kn_net *graph_attr(const kn_node *n, const char *name) {
    const kn_attr *a = kn_attr_find(n, name);
    return a && a->type == KN_ATTR_GRAPH ? a->graph : NULL;
}

static int n_captures(const kn_node *n) { return (int)kn_attr_int(n, KN_CAPTURES_ATTR, 0); }

/* Body input types for node n's inputs: Loop prepends iteration and
 * condition, Scan drops the scan axis of scan inputs. */
static kiln_status body_types(const kn_node *n, const kb_tensor *in, int n_in, kn_tinfo *bt,
                              int *nb) {
    kn_tinfo ti[64];
    if (n_in > 64)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs");
    kb_tinfo_types(in, n_in, ti);
    if (strcmp(n->op_type, "If") == 0) {
        *nb = n_in - 1;
        memcpy(bt, ti + 1, (size_t)*nb * sizeof *bt);
    } else if (strcmp(n->op_type, "Loop") == 0) {
        *nb = n_in;
        memset(bt, 0, 2 * sizeof *bt);
        bt[0].dtype = KILN_DTYPE_INT64;
        bt[1].dtype = KILN_DTYPE_BOOL;
        memcpy(bt + 2, ti + 2, (size_t)(n_in - 2) * sizeof *bt);
    } else {
        int ns = (int)kn_attr_int(n, "num_scan_inputs", 0);
        bool v8 = n->opset > 0 && n->opset < 9; /* sequence_lens first, batch axes */
        const kn_tinfo *t0 = v8 ? ti + 1 : ti;
        int nin = v8 ? n_in - 1 : n_in;
        int nv = nin - n_captures(n) - ns;
        *nb = nin;
        memcpy(bt, t0, (size_t)nin * sizeof *bt);
        for (int k = 0; k < nv + ns; k++)
            bt[k].rank = t0[k].rank - (k >= nv) - (v8 ? 1 : 0);
    }
    return KILN_OK;
}

kiln_status kx_ctl_prepare(const kb_backend *be, const kn_node *node, const kb_tensor *in,
                           int n_in, void **inst, size_t *workspace) {
    *workspace = 0;
    ctl_inst *ci = kn_calloc(1, sizeof *ci);
    if (!ci)
        return KILN_ERR_OUT_OF_MEMORY;
    ci->be = be;
    /* sequences and optionals are host pointers: the CPU backend's only */
    for (int i = 0; i < n_in && !be_host(be); i++)
        if (kn_dtype_is_handle((int)in[i].dtype)) {
            kn_free(ci);
            return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                 "input %d is a sequence or optional (%s); they run on the CPU "
                                 "backend only",
                                 i, kiln_dtype_name(in[i].dtype));
        }
    if (strcmp(node->op_type, "SequenceMap") == 0) { /* opened per element ranks by run_map */
        *inst = ci;
        return KILN_OK;
    }
    kn_tinfo bt[64];
    int nb = 0;
    kiln_status st = body_types(node, in, n_in, bt, &nb);
    const char *names[2] = {"body", NULL};
    if (strcmp(node->op_type, "If") == 0)
        names[0] = "then_branch", names[1] = "else_branch";
    for (int i = 0; i < 2 && names[i] && st == KILN_OK; i++) {
        const kn_net *g = graph_attr(node, names[i]);
        if (!g)
            st = kn_node_error(node, KILN_ERR_PARSE, "graph attribute '%s' is missing", names[i]);
        else
            st = body_open(&ci->b[i], node, g, nb, bt, be);
        if (st == KILN_OK)
            ci->n = i + 1;
    }
    if (st == KILN_OK && !be_host(be))
        st = buf_fit(be, &ci->pin, 16, true);
    if (st != KILN_OK) {
        kx_ctl_release(ci);
        return st;
    }
    *inst = ci;
    return KILN_OK;
}

static kiln_status ctl_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)out, (void)n_out;
    return kx_ctl_prepare(&kb_cpu_backend, node, in, n_in, inst, workspace);
}

/* Copy a body output into node output o, whose memory holds the inferred
 * (for data-dependent outputs: upper-bound) shape; o gets the true shape. */
static kiln_status put_output(const kb_run *r, int j, kb_tensor *o, kx_ref src,
                              const kn_tinfo *ti) {
    const ctl_inst *ci = r->inst;
    size_t have = tbytes(o->dtype, o->rank, o->dims), need = tbytes(ti->dtype, ti->rank, ti->dims);
    bool handles = kn_dtype_is_handle((int)ti->dtype) && kn_dtype_is_handle((int)o->dtype);
    if (handles && !be_host(ci->be))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "output %d is a sequence or optional; they run on the CPU backend only",
                             j);
    if ((ti->dtype != o->dtype && !handles) || need > have)
        return kn_node_error(r->node, KILN_ERR_RUNTIME,
                             "output %d: the body gave %zu bytes of %s, %zu bytes of %s were planned",
                             j, need, kiln_dtype_name(ti->dtype), have, kiln_dtype_name(o->dtype));
    KN_TRY(put_dev(ci->be, o->data, src, need, r->stream));
    o->rank = ti->rank;
    memcpy(o->dims, ti->dims, sizeof o->dims);
    return KILN_OK;
}

/* Whether value v of type dt (one element) is true: read on the host. */
static kiln_status truth(const kb_run *r, kx_ref v, kiln_dtype dt, bool *out) {
    ctl_inst *ci = r->inst;
    size_t es = kiln_dtype_size(dt);
    const uint8_t *p = NULL;
    if (es > 16)
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "a condition of type %s",
                             kiln_dtype_name(dt));
    KN_TRY(get_host(ci->be, v, es, &ci->pin, r->stream, (const void **)&p));
    *out = false;
    for (size_t i = 0; p && i < es; i++)
        if (p[i])
            *out = true;
    return KILN_OK;
}

/* The body's stream is the node's: its steps are enqueued where the plan's
 * are. */
static kiln_status body_run(kx_body *b, const kb_run *r) {
    b->c.stream = r->stream;
    return kx_ctx_run(&b->c);
}

kiln_status kx_ctl_run_if(const kb_run *r) {
    ctl_inst *ci = r->inst;
    bool cond = false;
    drop_refs(ci);
    KN_TRY(truth(r, ref_of(ci->be, &r->in[0]), r->in[0].dtype, &cond));
    kx_body *b = &ci->b[cond ? 0 : 1];
    for (int i = 1; i < r->n_in; i++)
        KN_TRY(body_input(b, i - 1, r->in[i].rank, r->in[i].dims, ref_of(ci->be, &r->in[i]),
                          r->stream));
    KN_TRY(body_run(b, r));
    for (int j = 0; j < r->n_out; j++) {
        if (!r->out[j].data)
            continue;
        kn_tinfo ti;
        kx_ref src = body_output(b, j, &ti);
        KN_TRY(put_output(r, j, &r->out[j], src, &ti));
        keep_ref(ci, j, &r->out[j]);
    }
    return KILN_OK;
}

/* A value held between iterations, in backend memory. */
typedef struct held {
    kx_buf buf;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
} held;

/* The list a held value names (NULL for a tensor or an empty buffer). */
static kn_seq *held_seq(const held *h) {
    return h->buf.p && kn_dtype_is_handle((int)h->dtype) ? kn_handle_get(h->buf.p) : NULL;
}

/* Copy src into h, in backend memory. A held handle holds one reference on
 * its list: the one h held before is dropped once, here, whether the copy
 * succeeds or not (on failure h holds nothing). */
static kiln_status hold(const kb_run *r, held *h, kx_ref src, const kn_tinfo *ti) {
    const ctl_inst *ci = r->inst;
    size_t n = tbytes(ti->dtype, ti->rank, ti->dims);
    kn_seq *old = held_seq(h);
    bool handle = kn_dtype_is_handle((int)ti->dtype);
    h->dtype = KILN_DTYPE_UNDEFINED; /* holds nothing until the copy is done */
    kiln_status st = KILN_OK;
    if (handle && !be_host(ci->be))
        st = kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                           "a sequence or optional carried on a GPU backend (CPU only)");
    if (st == KILN_OK)
        st = buf_fit(ci->be, &h->buf, n, false);
    if (st == KILN_OK)
        st = put_dev(ci->be, h->buf.p, src, n, r->stream);
    if (st == KILN_OK && handle) /* a carried list lives while it is held */
        kn_seq_ref(kn_handle_get(h->buf.p));
    kn_seq_unref(old);
    KN_TRY(st);
    h->dtype = ti->dtype;
    h->rank = ti->rank;
    memcpy(h->dims, ti->dims, sizeof h->dims);
    return KILN_OK;
}

/* Free n held values, dropping the reference each held handle holds. */
static void held_free(const kb_backend *be, held *h, int n) {
    for (int j = 0; h && j < n; j++) {
        kn_seq_unref(held_seq(&h[j]));
        buf_free(be, &h[j].buf, false);
    }
    kn_free(h);
}

static void held_info(const held *h, kn_tinfo *ti) {
    memset(ti, 0, sizeof *ti);
    ti->dtype = h->dtype;
    ti->rank = h->rank;
    memcpy(ti->dims, h->dims, sizeof ti->dims);
}

static void tinfo_of_kb(const kb_tensor *t, kn_tinfo *ti) {
    memset(ti, 0, sizeof *ti);
    ti->dtype = t->dtype;
    ti->rank = t->rank;
    memcpy(ti->dims, t->dims, sizeof ti->dims);
}

/* Copy slice `idx` along `axis` of a tensor of shape dims between the whole
 * tensor `whole` and the slice `part` (into the slice when extract), in
 * backend memory; the source may be host memory (src_host). One copy per
 * row outside the axis. */
static kiln_status slice_copy(const kb_run *r, uint8_t *whole, uint8_t *part, int rank,
                              const int64_t *dims, int axis, int64_t idx, size_t es, bool extract,
                              bool src_host) {
    const ctl_inst *ci = r->inst;
    int64_t outer = 1, inner = (int64_t)es;
    for (int d = 0; d < axis; d++)
        outer *= dims[d];
    for (int d = axis + 1; d < rank; d++)
        inner *= dims[d];
    int64_t len = dims[axis];
    kb_copy_kind kind = src_host && !be_host(ci->be) ? KB_COPY_H2D : KB_COPY_D2D;
    for (int64_t o = 0; o < outer; o++) {
        uint8_t *w = whole + (size_t)((o * len + idx) * inner), *p = part + (size_t)(o * inner);
        KN_TRY(ci->be->copy(extract ? p : w, extract ? w : p, (size_t)inner, kind, r->stream));
    }
    return KILN_OK;
}

kiln_status kx_ctl_run_loop(const kb_run *r) {
    ctl_inst *ci = r->inst;
    const kb_backend *be = ci->be;
    kx_body *b = &ci->b[0];
    const kn_node *n = r->node;
    int nc = n_captures(n), nv = r->n_in - 2 - nc, nk = r->n_out - nv;
    int64_t m = INT64_MAX;
    bool cond = true;
    kiln_status st = KILN_OK;
    drop_refs(ci);
    if (r->in[0].data) {
        const void *mp = NULL;
        KN_TRY(get_host(be, ref_of(be, &r->in[0]), sizeof m, &ci->pin, r->stream, &mp));
        memcpy(&m, mp, sizeof m);
    }
    if (r->in[1].data)
        KN_TRY(truth(r, ref_of(be, &r->in[1]), r->in[1].dtype, &cond));
    /* loop-carried values: cur feeds an iteration, nxt takes its outputs */
    held *cur = kn_calloc((size_t)nv + 1, sizeof *cur);
    held *nxt = kn_calloc((size_t)nv + 1, sizeof *nxt);
    size_t *scan_at = kn_calloc((size_t)nk + 1, sizeof *scan_at);
    kn_tinfo *scan_ti = kn_calloc((size_t)nk + 1, sizeof *scan_ti);
    if (!cur || !nxt || !scan_at || !scan_ti)
        st = KILN_ERR_OUT_OF_MEMORY;
    for (int j = 0; j < nv && st == KILN_OK; j++) {
        kn_tinfo ti;
        tinfo_of_kb(&r->in[2 + j], &ti);
        st = hold(r, &cur[j], ref_of(be, &r->in[2 + j]), &ti);
    }
    int64_t it = 0;
    for (; st == KILN_OK && it < m && cond; it++) {
        uint8_t c8 = 1;
        st = body_input(b, 0, 0, NULL, (kx_ref){NULL, &it}, r->stream);
        if (st == KILN_OK)
            st = body_input(b, 1, 0, NULL, (kx_ref){NULL, &c8}, r->stream);
        for (int j = 0; j < nv && st == KILN_OK; j++)
            st = body_input(b, 2 + j, cur[j].rank, cur[j].dims, ref_dev(be, cur[j].buf.p),
                            r->stream);
        for (int k = 0; k < nc && st == KILN_OK; k++) {
            const kb_tensor *x = &r->in[2 + nv + k];
            st = body_input(b, 2 + nv + k, x->rank, x->dims, ref_of(be, x), r->stream);
        }
        if (st == KILN_OK)
            st = body_run(b, r);
        if (st != KILN_OK)
            break;
        kn_tinfo ti;
        kx_ref cp = body_output(b, 0, &ti);
        if (kn_numel(ti.rank, ti.dims) != 1) {
            st = kn_node_error(n, KILN_ERR_RUNTIME, "the body's condition has %lld elements",
                               (long long)kn_numel(ti.rank, ti.dims));
            break;
        }
        /* the last iteration's condition decides nothing: no read (and, on
         * a device, no wait) for it */
        if (it + 1 < m)
            st = truth(r, cp, ti.dtype, &cond);
        for (int j = 0; j < nv && st == KILN_OK; j++) {
            kx_ref src = body_output(b, 1 + j, &ti);
            st = hold(r, &nxt[j], src, &ti);
        }
        for (int j = 0; j < nv && st == KILN_OK; j++) {
            held t = cur[j];
            cur[j] = nxt[j];
            nxt[j] = t;
        }
        for (int k = 0; k < nk && st == KILN_OK; k++) {
            kb_tensor *o = &r->out[nv + k];
            kx_ref src = body_output(b, 1 + nv + k, &ti);
            size_t bytes = tbytes(ti.dtype, ti.rank, ti.dims);
            if (it > 0 && (ti.rank != scan_ti[k].rank ||
                           memcmp(ti.dims, scan_ti[k].dims, sizeof ti.dims) != 0)) {
                st = kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                   "scan output %d changes shape between iterations", k);
                break;
            }
            scan_ti[k] = ti;
            if (kn_dtype_is_handle((int)ti.dtype)) {
                st = kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                   "scan output %d is a sequence or optional (not a tensor)", k);
                break;
            }
            if (!o->data)
                continue;
            if (ti.dtype != o->dtype ||
                scan_at[k] + bytes > tbytes(o->dtype, o->rank, o->dims)) {
                st = kn_node_error(n, KILN_ERR_RUNTIME,
                                   "scan output %d outgrew its planned %lld iterations", k,
                                   (long long)o->dims[0]);
                break;
            }
            st = put_dev(be, (uint8_t *)o->data + scan_at[k], src, bytes, r->stream);
            scan_at[k] += bytes;
        }
    }
    for (int j = 0; j < nv && st == KILN_OK; j++) {
        if (!r->out[j].data)
            continue;
        kn_tinfo ti;
        held_info(&cur[j], &ti);
        st = put_output(r, j, &r->out[j], ref_dev(be, cur[j].buf.p), &ti);
        if (st == KILN_OK)
            keep_ref(ci, j, &r->out[j]);
    }
    for (int k = 0; k < nk && st == KILN_OK; k++) {
        kb_tensor *o = &r->out[nv + k];
        o->dims[0] = it;
        if (it > 0) {
            o->rank = scan_ti[k].rank + 1;
            memcpy(o->dims + 1, scan_ti[k].dims, (size_t)scan_ti[k].rank * sizeof o->dims[0]);
        }
    }
    /* the held buffers may still be read by copies in flight */
    if (!be_host(be) && cur && nxt) {
        kiln_status ss = be->sync(r->stream);
        st = st == KILN_OK ? ss : st;
    }
    held_free(be, cur, nv);
    held_free(be, nxt, nv);
    kn_free(scan_at);
    kn_free(scan_ti);
    return st;
}

static int norm_axis(int64_t a, int rank) { return (int)(a < 0 ? a + rank : a); }

/* One scan over in (states, scan inputs, captures) into out (states, scan
 * outputs). v8: Scan-8's per-batch form, scan axis 0 of each batch entry,
 * directions from "directions". */
static kiln_status scan_core(const kb_run *r, kx_body *b, int n_in, const kb_tensor *in, int n_out,
                             kb_tensor *out, bool v8) {
    const kn_node *n = r->node;
    const kb_backend *be = ((const ctl_inst *)r->inst)->be;
    int nc = n_captures(n), ns = (int)kn_attr_int(n, "num_scan_inputs", 0);
    int nv = n_in - nc - ns, nk = n_out - nv;
    size_t na = 0, nd = 0, noa = 0, nod = 0;
    const int64_t *in_axes = v8 ? NULL : kn_attr_ints(n, "scan_input_axes", &na);
    const int64_t *in_dirs = kn_attr_ints(n, v8 ? "directions" : "scan_input_directions", &nd);
    const int64_t *out_axes = v8 ? NULL : kn_attr_ints(n, "scan_output_axes", &noa);
    const int64_t *out_dirs = v8 ? NULL : kn_attr_ints(n, "scan_output_directions", &nod);
    for (int j = 0; j < n_in; j++)
        if (kn_dtype_is_handle((int)in[j].dtype))
            return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                 "input %d is a sequence or optional; Scan takes tensors", j);
    held *cur = kn_calloc((size_t)nv + 1, sizeof *cur);
    held *nxt = kn_calloc((size_t)nv + 1, sizeof *nxt);
    held *slice = kn_calloc((size_t)ns + 1, sizeof *slice);
    kiln_status st = cur && nxt && slice ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    int64_t len = 0;
    for (int j = 0; j < nv && st == KILN_OK; j++) {
        kn_tinfo ti;
        tinfo_of_kb(&in[j], &ti);
        st = hold(r, &cur[j], ref_of(be, &in[j]), &ti);
    }
    for (int k = 0; k < ns && st == KILN_OK; k++) { /* slice buffers */
        const kb_tensor *x = &in[nv + k];
        int ax = norm_axis(na ? in_axes[k] : 0, x->rank);
        len = x->dims[ax];
        kn_tinfo ti = {0};
        ti.dtype = x->dtype;
        ti.rank = x->rank - 1;
        for (int d = 0, s = 0; d < x->rank; d++)
            if (d != ax)
                ti.dims[s++] = x->dims[d];
        st = buf_fit(be, &slice[k].buf, tbytes(ti.dtype, ti.rank, ti.dims), false);
        slice[k].dtype = ti.dtype;
        slice[k].rank = ti.rank;
        memcpy(slice[k].dims, ti.dims, sizeof ti.dims);
    }
    for (int64_t i = 0; i < len && st == KILN_OK; i++) {
        for (int k = 0; k < ns && st == KILN_OK; k++) {
            const kb_tensor *x = &in[nv + k];
            kx_ref xr = ref_of(be, x);
            int ax = norm_axis(na ? in_axes[k] : 0, x->rank);
            int64_t at = nd && in_dirs[k] ? len - 1 - i : i;
            st = slice_copy(r, (uint8_t *)(xr.dev ? xr.dev : xr.host), slice[k].buf.p, x->rank,
                            x->dims, ax, at, kiln_dtype_size(x->dtype), true, !xr.dev);
        }
        for (int j = 0; j < nv && st == KILN_OK; j++)
            st = body_input(b, j, cur[j].rank, cur[j].dims, ref_dev(be, cur[j].buf.p), r->stream);
        for (int k = 0; k < ns && st == KILN_OK; k++)
            st = body_input(b, nv + k, slice[k].rank, slice[k].dims, ref_dev(be, slice[k].buf.p),
                            r->stream);
        for (int k = 0; k < nc && st == KILN_OK; k++) {
            const kb_tensor *x = &in[nv + ns + k];
            st = body_input(b, nv + ns + k, x->rank, x->dims, ref_of(be, x), r->stream);
        }
        if (st == KILN_OK)
            st = body_run(b, r);
        for (int j = 0; j < nv && st == KILN_OK; j++) {
            kn_tinfo ti;
            kx_ref src = body_output(b, j, &ti);
            st = hold(r, &nxt[j], src, &ti);
        }
        for (int j = 0; j < nv && st == KILN_OK; j++) {
            held t = cur[j];
            cur[j] = nxt[j];
            nxt[j] = t;
        }
        for (int k = 0; k < nk && st == KILN_OK; k++) {
            kb_tensor *o = &out[nv + k];
            kn_tinfo ti;
            kx_ref src = body_output(b, nv + k, &ti);
            if (!o->data)
                continue;
            int ax = norm_axis(noa ? out_axes[k] : 0, o->rank);
            kn_tinfo want = {0};
            want.dtype = o->dtype;
            want.rank = o->rank - 1;
            for (int d = 0, s = 0; d < o->rank; d++)
                if (d != ax)
                    want.dims[s++] = o->dims[d];
            if (ti.dtype != want.dtype || ti.rank != want.rank ||
                memcmp(ti.dims, want.dims, (size_t)ti.rank * sizeof ti.dims[0]) != 0) {
                st = kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                   "scan output %d changes shape between iterations", k);
                break;
            }
            int64_t at = nod && out_dirs[k] ? len - 1 - i : i;
            st = slice_copy(r, o->data, (uint8_t *)(src.dev ? src.dev : src.host), o->rank,
                            o->dims, ax, at, kiln_dtype_size(o->dtype), false, !src.dev);
        }
    }
    for (int j = 0; j < nv && st == KILN_OK; j++) {
        if (!out[j].data)
            continue;
        kn_tinfo ti;
        held_info(&cur[j], &ti);
        st = put_output(r, j, &out[j], ref_dev(be, cur[j].buf.p), &ti);
    }
    if (!be_host(be) && cur && nxt && slice) { /* copies in flight may read the buffers */
        kiln_status ss = be->sync(r->stream);
        st = st == KILN_OK ? ss : st;
    }
    held_free(be, cur, nv);
    held_free(be, nxt, nv);
    held_free(be, slice, ns);
    return st;
}

/* Entry bi of a batched tensor (axis 0), as a tensor of one rank less. */
static kb_tensor batch_view(const kb_tensor *t, int64_t bi) {
    kb_tensor v = *t;
    v.host = NULL;
    v.rank = t->rank - 1;
    memmove(v.dims, t->dims + 1, (size_t)v.rank * sizeof v.dims[0]);
    if (t->data)
        v.data = (uint8_t *)t->data + (size_t)bi * tbytes(v.dtype, v.rank, v.dims);
    return v;
}

kiln_status kx_ctl_run_scan(const kb_run *r) {
    ctl_inst *ci = r->inst;
    const kn_node *n = r->node;
    if (n->opset <= 0 || n->opset >= 9)
        return scan_core(r, &ci->b[0], r->n_in, r->in, r->n_out, r->out, false);
    /* Scan-8: input 0 is sequence_lens; every state, scan input and output
     * has a batch axis first; captures do not */
    int nc = n_captures(n), ns = (int)kn_attr_int(n, "num_scan_inputs", 0);
    int nin = r->n_in - 1, nv = nin - nc - ns;
    if (nin < 1 || nin > 64 || r->n_out > 64 || nv < 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs");
    const kb_tensor *x0 = &r->in[1 + nv];
    int64_t nb = x0->dims[0], len = x0->rank > 1 ? x0->dims[1] : 0;
    if (r->in[0].data) {
        const kb_tensor *sl = &r->in[0];
        int64_t cnt = kn_numel(sl->rank, sl->dims);
        const void *hp = NULL;
        KN_TRY(get_host(ci->be, ref_of(ci->be, sl), tbytes(sl->dtype, sl->rank, sl->dims),
                        &ci->pin, r->stream, &hp));
        for (int64_t i = 0; i < cnt; i++) {
            int64_t v = sl->dtype == KILN_DTYPE_INT32 ? ((const int32_t *)hp)[i]
                                                      : ((const int64_t *)hp)[i];
            if (v != len)
                return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                     "sequence_lens[%lld] = %lld is not the full length %lld",
                                     (long long)i, (long long)v, (long long)len);
        }
    }
    kb_tensor vin[64], vout[64];
    for (int64_t bi = 0; bi < nb; bi++) {
        for (int k = 0; k < nin; k++)
            vin[k] = k < nv + ns ? batch_view(&r->in[1 + k], bi) : r->in[1 + k];
        for (int j = 0; j < r->n_out; j++)
            vout[j] = batch_view(&r->out[j], bi);
        KN_TRY(scan_core(r, &ci->b[0], nin, vin, r->n_out, vout, true));
    }
    return KILN_OK;
}

/* SequenceMap: the body once per element of input 0; a sequence input
 * gives its element, a tensor input itself; body output j's values make
 * output sequence j. The body is opened for the element ranks it is given
 * and again when they change. */
static kiln_status run_map(const kb_run *r) {
    ctl_inst *ci = r->inst;
    const kn_node *n = r->node;
    drop_refs(ci);
    if (r->n_in > 64 || r->n_out > 64)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs");
    const kn_attr *ga = kn_attr_find(n, "body");
    const kn_net *g = ga && ga->type == KN_ATTR_GRAPH ? ga->graph : NULL;
    if (!g)
        return kn_node_error(n, KILN_ERR_PARSE, "graph attribute 'body' is missing");
    kn_seq *sin[64] = {0};
    for (int i = 0; i < r->n_in; i++) {
        if (!kn_dtype_is_handle((int)r->in[i].dtype))
            continue;
        sin[i] = kn_handle_get(r->in[i].data);
        if (!sin[i] || sin[i]->kind != KN_SEQ_KIND_SEQUENCE)
            return kn_node_error(n, KILN_ERR_RUNTIME, "input %d is not a sequence", i);
        if (sin[0] && sin[i]->n != sin[0]->n)
            return kn_node_error(n, KILN_ERR_RUNTIME, "input %d holds %d elements, input 0 %d",
                                 i, sin[i]->n, sin[0]->n);
    }
    if (!sin[0])
        return kn_node_error(n, KILN_ERR_RUNTIME, "input 0 is not a sequence");
    int count = sin[0]->n;
    kn_seq *outs[64] = {0};
    kiln_status st = KILN_OK;
    for (int j = 0; j < r->n_out && st == KILN_OK; j++)
        st = kn_seq_new(KN_SEQ_KIND_SEQUENCE, kn_handle_elem(r->out[j].dtype), count, &outs[j]);
    for (int e = 0; e < count && st == KILN_OK; e++) {
        kn_tinfo bt[64];
        bool reopen = ci->n == 0;
        for (int i = 0; i < r->n_in; i++) {
            memset(&bt[i], 0, sizeof bt[i]);
            if (sin[i]) {
                const kn_selem *x = sin[i]->items[e];
                bt[i].dtype = x->dtype;
                bt[i].rank = x->rank;
            } else {
                tinfo_of_kb(&r->in[i], &bt[i]);
            }
            reopen |= ci->map_ranks[i] != bt[i].rank;
            ci->map_ranks[i] = bt[i].rank;
        }
        if (reopen) {
            if (ci->n)
                body_close(&ci->b[0]);
            ci->n = 0;
            st = body_open(&ci->b[0], n, g, r->n_in, bt, ci->be);
            if (st != KILN_OK)
                break;
            ci->n = 1;
        }
        kx_body *b = &ci->b[0];
        for (int i = 0; i < r->n_in && st == KILN_OK; i++) {
            const kn_selem *x = sin[i] ? sin[i]->items[e] : NULL;
            st = x ? body_input(b, i, x->rank, x->dims, (kx_ref){NULL, x->data}, r->stream)
                   : body_input(b, i, r->in[i].rank, r->in[i].dims, ref_of(ci->be, &r->in[i]),
                                r->stream);
        }
        if (st == KILN_OK)
            st = body_run(b, r);
        for (int j = 0; j < r->n_out && st == KILN_OK; j++) {
            kn_tinfo ti;
            kx_ref src = body_output(b, j, &ti);
            if (kn_dtype_is_handle((int)ti.dtype) || ti.dtype != outs[j]->elem)
                st = kn_node_error(n, KILN_ERR_RUNTIME, "body output %d is %s, not %s", j,
                                   kiln_dtype_name(ti.dtype), kiln_dtype_name(outs[j]->elem));
            else
                st = kn_selem_new(ti.dtype, ti.rank, ti.dims, src.host, &outs[j]->items[e]);
        }
    }
    for (int j = 0; j < r->n_out; j++) {
        if (st == KILN_OK && r->out[j].data) {
            kn_handle_put(r->out[j].data, outs[j]);
            ci->refs[j] = outs[j]; /* the reference it was made with */
        } else {
            kn_seq_unref(outs[j]);
        }
    }
    return st;
}

static bool host_only_type(kiln_dtype t) {
    return t == KILN_DTYPE_STRING || kn_dtype_is_handle((int)t);
}

static bool body_needs_host(const kb_backend *be, const kn_net *g, int depth) {
    if (!g || depth >= 64)
        return true;
    for (int t = 0; t < g->n_tensors; t++)
        if (host_only_type(g->tensors[t].dtype) ||
            ((g->tensors[t].flags & KN_T_CONST) && host_only_type(g->tensors[t].value.dtype)))
            return true;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        const kb_kernel *k[1];
        bool shape_only = !n->domain[0] && (strcmp(n->op_type, "Shape") == 0 ||
                                            strcmp(n->op_type, "Size") == 0);
        if (!shape_only && be->kernels_for(n->domain, n->op_type, k, 1) < 1)
            return true; /* Shape and Size run at shape time on every backend */
        if (!n->domain[0] && strcmp(n->op_type, "Cast") == 0 &&
            kn_attr_int(n, "to", 0) == KILN_DTYPE_STRING)
            return true;
        for (int a = 0; a < n->n_attr; a++)
            if (n->attrs[a].type == KN_ATTR_GRAPH &&
                body_needs_host(be, n->attrs[a].graph, depth + 1))
                return true;
    }
    return false;
}

bool kx_ctl_needs_host(const kb_backend *be, const kn_node *node, const kn_tinfo *in, int n_in,
                       const kn_tinfo *out, int n_out) {
    for (int j = 0; in && j < n_in; j++)
        if (host_only_type(in[j].dtype))
            return true;
    for (int j = 0; out && j < n_out; j++)
        if (host_only_type(out[j].dtype))
            return true;
    for (int a = 0; a < node->n_attr; a++)
        if (node->attrs[a].type == KN_ATTR_GRAPH && body_needs_host(be, node->attrs[a].graph, 0))
            return true;
    return false;
}

bool kx_ctl_syncs(const kb_kernel *k) {
    return k->run == kx_ctl_run_if || k->run == kx_ctl_run_loop || k->run == kx_ctl_run_scan;
}

const kb_kernel kb_cpu_control[] = {
    {"If", "", "ref", NULL, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_if},
    {"Loop", "", "ref", NULL, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_loop},
    {"Scan", "", "ref", NULL, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_scan},
    {"SequenceMap", "", "ref", NULL, NULL, NULL, ctl_prepare, kx_ctl_release, run_map},
};
const size_t kb_cpu_control_count = KN_ARRAY_LEN(kb_cpu_control);
