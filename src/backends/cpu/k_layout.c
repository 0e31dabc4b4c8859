/* k_layout.c - reference kernels of kiln's channels-last ops (graph/fused.h):
 * the channels-first reference on reordered copies. Inputs named by a mask
 * and output 0 are reordered between [N, S..., C] and [N, C, S...] in the
 * workspace; the base kernel runs on those copies as if the node were
 * channels-first (it ignores the channels_last attribute). */
#include <string.h>

#include "graph/fused.h"
#include "k_nn.h"

typedef struct cl_inst {
    const kb_kernel *base;
    void *base_inst;
    size_t base_ws;
    unsigned mask;            /* 0: channels-first node, run the base as it is */
    kb_tensor in[KB_STAGE_MAX]; /* channels-first views (data set at run) */
    kb_tensor out;
    size_t in_off[KB_STAGE_MAX], out_off, total;
} cl_inst;

static size_t align64(size_t v) { return (v + 63u) & ~(size_t)63u; }

static size_t tensor_bytes(const kb_tensor *t) {
    return (size_t)kn_numel(t->rank, t->dims) * kiln_dtype_size(t->dtype);
}

/* Copy x ([N, S, C] when to_first, else [N, C, S]) into y in the other order;
 * es bytes an element. */
static void reorder(const void *x, void *y, int rank, const int64_t *xdims, size_t es,
                    bool to_first) {
    int64_t n = xdims[0];
    int64_t c = to_first ? xdims[rank - 1] : xdims[1];
    int64_t s = kn_numel(rank, xdims) / (n && c ? n * c : 1);
    const uint8_t *src = x;
    uint8_t *dst = y;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < s; i++)
            for (int64_t k = 0; k < c; k++) {
                int64_t cl = (b * s + i) * c + k, cf = (b * c + k) * s + i;
                memcpy(dst + (size_t)(to_first ? cf : cl) * es,
                       src + (size_t)(to_first ? cl : cf) * es, es);
            }
}

void kb_cl_release(void *p) {
    cl_inst *s = p;
    if (!s)
        return;
    if (s->base && s->base->release)
        s->base->release(s->base_inst);
    kn_free(s);
}

kiln_status kb_cl_prepare(const kb_kernel *base, unsigned mask, const kn_node *node,
                          const kb_tensor *in, int n_in, const kb_tensor *out, int n_out,
                          void **inst, size_t *workspace) {
    if (n_in > KB_STAGE_MAX || n_out < 1)
        return kn_node_error(node, KILN_ERR_INTERNAL, "channels-last reference: %d inputs", n_in);
    cl_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    s->base = base;
    s->mask = mask;
    size_t off = 0;
    for (int i = 0; i < n_in; i++) {
        s->in[i] = in[i];
        if ((mask >> i & 1u) && in[i].data && in[i].rank >= 3) {
            kn_dims_channels(in[i].rank, in[i].dims, s->in[i].dims, true);
            s->in_off[i] = off;
            off = align64(off + tensor_bytes(&in[i]));
        }
    }
    s->out = out[0];
    if (mask) {
        kn_dims_channels(out[0].rank, out[0].dims, s->out.dims, true);
        s->out_off = off;
        off = align64(off + tensor_bytes(&out[0]));
    }
    s->total = off;
    kiln_status st = KILN_OK;
    if (base->prepare)
        st = base->prepare(NULL, node, s->in, n_in, &s->out, 1, &s->base_inst, &s->base_ws);
    if (st != KILN_OK) {
        kn_free(s);
        return st;
    }
    *inst = s;
    *workspace = s->total + s->base_ws;
    return KILN_OK;
}

kiln_status kb_cl_run(const kb_run *r) {
    const cl_inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    if (r->workspace_size < s->total + s->base_ws || r->n_in > KB_STAGE_MAX)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    if (!s->mask) {
        kb_run sub = *r;
        sub.inst = s->base_inst;
        return s->base->run(&sub);
    }
    uint8_t *ws = r->workspace;
    kb_tensor in[KB_STAGE_MAX];
    for (int i = 0; i < r->n_in; i++) {
        in[i] = s->in[i];
        in[i].data = r->in[i].data;
        in[i].host = r->in[i].host;
        if ((s->mask >> i & 1u) && r->in[i].data && r->in[i].rank >= 3) {
            in[i].data = ws + s->in_off[i];
            in[i].host = NULL;
            reorder(r->in[i].data, in[i].data, r->in[i].rank, r->in[i].dims,
                    kiln_dtype_size(r->in[i].dtype), true);
        }
    }
    kb_tensor out = s->out;
    out.data = ws + s->out_off;
    kb_run sub = *r;
    sub.inst = s->base_inst;
    sub.in = in;
    sub.out = &out;
    sub.n_out = 1;
    sub.workspace = s->base_ws ? ws + s->total : NULL;
    sub.workspace_size = s->base_ws;
    KN_TRY(s->base->run(&sub));
    reorder(out.data, r->out[0].data, out.rank, out.dims, kiln_dtype_size(out.dtype), false);
    return KILN_OK;
}
