/* k_nn.c - the CUDA nn family's kb_kernel glue for kiln's own kernels:
 * Softmax / LogSoftmax, LayerNormalization, BatchNormalization (inference),
 * Reduce{Sum,Mean,Max,Min,Prod,SumSquare,L1,L2,LogSum,LogSumExp}, MaxPool /
 * AveragePool and the global pools. Attributes as the CPU reference reads
 * them; axes given as an input are read from kb_tensor.host. */
#include <string.h>

#include "elementwise.cuh"
#include "graph/ops_nn.h"
#include "graph/fused.h"
#include "kc_common.h"
#include "nn.cuh"
#include "attention.cuh"

static bool float_io(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    return n_in >= 1 && n_out >= 1 && kc_is_float(in[0].dtype) && out[0].dtype == in[0].dtype;
}

/* ---------------- Softmax ---------------- */

static kiln_status softmax_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    bool legacy = r->node->opset > 0 && r->node->opset < 13;
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", legacy ? 1 : -1), x->rank, &axis));
    int64_t outer = kn_numel(axis, x->dims), n = x->rank ? x->dims[axis] : 1;
    int64_t inner = x->rank ? kn_numel(x->rank - axis - 1, x->dims + axis + 1) : 1;
    if (legacy) { /* coerce to 2-D: everything from axis on is one row */
        n *= inner;
        inner = 1;
    }
    int log = strcmp(r->node->op_type, "LogSoftmax") == 0;
    KC_CUDA(r->node, kc_softmax(x->data, r->out[0].data, x->dtype, outer, n, inner, log,
                                kc_stream(r)));
    return KILN_OK;
}

/* ---------------- LayerNormalization ---------------- */

static bool layernorm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                               const kn_tinfo *out, int n_out) {
    if (!float_io(node, in, n_in, out, n_out) || n_in < 2 || !kc_is_float(in[1].dtype))
        return false;
    int64_t axis = kn_attr_int(node, "axis", -1);
    int rank = in[0].rank;
    if (axis < -rank || axis >= rank)
        return false;
    if (axis < 0)
        axis += rank;
    int64_t inner = kn_numel(rank - (int)axis, in[0].dims + axis);
    if (kn_numel(in[1].rank, in[1].dims) != inner)
        return false; /* scale broadcast inside the row: the CPU kernel has it */
    if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED &&
        (in[2].dtype != in[1].dtype || kn_numel(in[2].rank, in[2].dims) != inner))
        return false;
    for (int k = 1; k < n_out; k++)
        if (out[k].dtype != KILN_DTYPE_UNDEFINED && !kc_is_float(out[k].dtype))
            return false;
    return true;
}

static kiln_status layernorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1];
    const kb_tensor *b = kc_present(r->in, r->n_in, 2) ? &r->in[2] : NULL;
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", -1), x->rank, &axis));
    int64_t inner = kn_numel(x->rank - axis, x->dims + axis), rows = kn_numel(axis, x->dims);
    if (kc_numel(sc) != inner || (b && (kc_numel(b) != inner || b->dtype != sc->dtype)))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "scale and bias must have one value per normalized element");
    kb_tensor *mo = r->n_out > 1 && r->out[1].data ? &r->out[1] : NULL;
    kb_tensor *io = r->n_out > 2 && r->out[2].data ? &r->out[2] : NULL;
    if (mo && io && mo->dtype != io->dtype)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "Mean and InvStdDev types differ");
    kiln_dtype st = mo ? mo->dtype : io ? io->dtype : KILN_DTYPE_FLOAT;
    float eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    KC_CUDA(r->node, kc_layernorm(x->data, r->out[0].data, x->dtype, rows, inner, sc->data,
                                  b ? b->data : NULL, sc->dtype, eps, mo ? mo->data : NULL,
                                  io ? io->data : NULL, st, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- kiln::LayerNorm ---------------- */

_Static_assert(KC_LN_MAX_ADD == KN_LN_MAX_ADD, "kiln::LayerNorm addend limits differ");

static bool layernorm_fused_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                     const kn_tinfo *out, int n_out) {
    if (n_in < 2 || n_out < 1 || n_out > 2 || !kc_is_float(in[0].dtype) || out[0].dtype != in[0].dtype ||
        (n_out == 2 && out[1].dtype != KILN_DTYPE_UNDEFINED && out[1].dtype != in[0].dtype) ||
        !kc_is_float(in[1].dtype) || (in[1].dtype != in[0].dtype && in[1].dtype != KILN_DTYPE_FLOAT))
        return false;
    if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED && in[2].dtype != in[1].dtype)
        return false;
    if (n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED && in[3].dtype != KILN_DTYPE_INT64 &&
        in[3].dtype != KILN_DTYPE_INT32)
        return false;
    for (int i = 4; i < n_in; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && in[i].dtype != in[0].dtype)
            return false;
    return true;
}

static kiln_status layernorm_fused_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1], *y = &r->out[0];
    const kb_tensor *b = kc_present(r->in, r->n_in, 2) ? &r->in[2] : NULL;
    bool gather = kn_attr_int(r->node, "gather", 0) != 0;
    if (gather != kc_present(r->in, r->n_in, 3) || (gather && x->rank != 2))
        return kn_node_error(r->node, KILN_ERR_SHAPE, "gather needs a [V, H] table and Ids");
    int64_t h = y->rank ? y->dims[y->rank - 1] : 1, rows = h ? kc_numel(y) / h : 0;
    if (kc_numel(sc) != h || (b && kc_numel(b) != h))
        return kn_node_error(r->node, KILN_ERR_SHAPE, "Scale and B must hold %lld values",
                             (long long)h);
    kc_ln_sum s;
    memset(&s, 0, sizeof s);
    if (r->n_out > 1 && r->out[1].data) { /* the sum, kept */
        if (kc_numel(&r->out[1]) != kc_numel(y))
            return kn_node_error(r->node, KILN_ERR_SHAPE, "the Sum output does not have Y's size");
        s.sum_out = r->out[1].data;
    }
    if (gather) {
        s.ids = r->in[3].data;
        s.ids_dt = r->in[3].dtype;
        s.table_rows = x->dims[0];
    }
    for (int i = 4; i < r->n_in; i++) {
        if (!kc_present(r->in, r->n_in, i))
            continue;
        if (s.n_add == KC_LN_MAX_ADD)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "more than %d addends",
                                 KC_LN_MAX_ADD);
        int64_t n = kc_numel(&r->in[i]);
        if (!h || n % h || !n || rows % (n / h))
            return kn_node_error(r->node, KILN_ERR_SHAPE, "addend %d does not repeat whole rows",
                                 i - 3);
        s.add[s.n_add] = r->in[i].data;
        s.add_rows[s.n_add++] = n / h;
    }
    float eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    KC_CUDA(r->node, kc_layernorm_sum(x->data, &s, r->out[0].data, x->dtype, rows, h, sc->data,
                                      b ? b->data : NULL, sc->dtype, eps, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- BatchNormalization ---------------- */

static bool batchnorm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                               const kn_tinfo *out, int n_out) {
    if (!float_io(node, in, n_in, out, n_out) || n_in != 5 || in[0].rank < 2)
        return false;
    if (kn_attr_int(node, "training_mode", 0) != 0)
        return false;
    for (int k = 1; k < 5; k++)
        if (in[k].dtype != in[1].dtype || !kc_is_float(in[k].dtype))
            return false;
    return true;
}

static kiln_status batchnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    if (kn_attr_int(r->node, "training_mode", 0) != 0)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "training_mode=1 is not supported");
    if (r->n_in < 5 || x->rank < 2)
        return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT, "needs X, scale, B, mean, var");
    float eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    int64_t ch = x->dims[1], size = kn_numel(x->rank - 2, x->dims + 2);
    KC_CUDA(r->node, kc_batchnorm(x->data, r->out[0].data, x->dtype, kc_numel(x), ch, size,
                                  r->in[1].data, r->in[2].data, r->in[3].data, r->in[4].data,
                                  r->in[1].dtype, eps, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- reductions ---------------- */

static int reduce_op(const char *op) {
    static const char *const names[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                        "ReduceProd", "ReduceSumSquare", "ReduceL1",
                                        "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"};
    for (int i = 0; i < (int)KN_ARRAY_LEN(names); i++)
        if (strcmp(op, names[i]) == 0)
            return i;
    return -1;
}

/* The integer types the reduction kernels read, with their range. */
static bool reduce_int_type(kiln_dtype t, int64_t *lo, int64_t *hi) {
    switch (t) {
    case KILN_DTYPE_BOOL: *lo = 0, *hi = 1; return true;
    case KILN_DTYPE_INT8: *lo = INT8_MIN, *hi = INT8_MAX; return true;
    case KILN_DTYPE_INT16: *lo = INT16_MIN, *hi = INT16_MAX; return true;
    case KILN_DTYPE_INT32: *lo = INT32_MIN, *hi = INT32_MAX; return true;
    case KILN_DTYPE_INT64: *lo = INT64_MIN, *hi = INT64_MAX; return true;
    case KILN_DTYPE_UINT8: *lo = 0, *hi = UINT8_MAX; return true;
    case KILN_DTYPE_UINT16: *lo = 0, *hi = UINT16_MAX; return true;
    case KILN_DTYPE_UINT32: *lo = 0, *hi = UINT32_MAX; return true;
    case KILN_DTYPE_UINT64: *lo = 0, *hi = INT64_MAX; return true; /* as the CPU */
    default: return false;
    }
}

static bool reduce_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    int64_t lo, hi;
    if (n_in < 1 || n_out < 1 || out[0].dtype != in[0].dtype || reduce_op(node->op_type) < 0 ||
        in[0].rank > KC_MAX_DIMS ||
        (!kc_is_float(in[0].dtype) && in[0].dtype != KILN_DTYPE_DOUBLE &&
         !reduce_int_type(in[0].dtype, &lo, &hi)))
        return false;
    /* axes given as an input: a value input, so the runtime keeps it on the
     * host (kb_tensor.host); graph inputs have no value at build time */
    return n_in < 2 || in[1].dtype == KILN_DTYPE_UNDEFINED || in[1].dtype == KILN_DTYPE_INT64 ||
           in[1].dtype == KILN_DTYPE_INT32;
}

static kiln_status reduce_run(const kb_run *r) {
    const kn_node *n = r->node;
    const kb_tensor *x = &r->in[0];
    int rank = x->rank;
    uint32_t mask = 0;
    int64_t axes[KILN_MAX_DIMS * 2];
    int64_t na = 0;
    if (r->n_in >= 2 && r->in[1].dtype != KILN_DTYPE_UNDEFINED) {
        const kb_tensor *a = &r->in[1];
        na = kc_numel(a);
        if (na > (int64_t)KN_ARRAY_LEN(axes))
            return kn_node_error(n, KILN_ERR_SHAPE, "too many axes (%lld)", (long long)na);
        if (na > 0 && !a->host)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "axes must be known on the host");
        for (int64_t k = 0; k < na; k++)
            axes[k] = a->dtype == KILN_DTYPE_INT32 ? ((const int32_t *)a->host)[k]
                                                   : ((const int64_t *)a->host)[k];
    } else {
        size_t cnt;
        const int64_t *a = kn_attr_ints(n, "axes", &cnt);
        if (cnt > KN_ARRAY_LEN(axes))
            return kn_node_error(n, KILN_ERR_SHAPE, "too many axes (%zu)", cnt);
        for (size_t k = 0; k < cnt; k++)
            axes[k] = a[k];
        na = (int64_t)cnt;
    }
    if (na == 0) {
        if (kn_attr_int(n, "noop_with_empty_axes", 0)) {
            size_t bytes = (size_t)kc_numel(x) * kiln_dtype_size(x->dtype);
            if (bytes && x->data != r->out[0].data)
                KC_CUDA(n, cudaMemcpyAsync(r->out[0].data, x->data, bytes,
                                           cudaMemcpyDeviceToDevice, kc_stream(r)));
            return KILN_OK;
        }
        mask = rank ? (uint32_t)((1u << rank) - 1u) : 0;
    }
    for (int64_t k = 0; k < na; k++) {
        int ax = 0;
        KN_TRY(kc_norm_axis(n, axes[k], rank, &ax));
        mask |= 1u << ax;
    }
    /* group adjacent dims of one kind (row-major: they merge) */
    kc_reduce p;
    memset(&p, 0, sizeof p);
    p.op = reduce_op(n->op_type);
    int64_t st[KILN_MAX_DIMS];
    kc_strides(rank, x->dims, st);
    int last = -1;
    for (int d = 0; d < rank; d++) {
        if (x->dims[d] == 1)
            continue;
        int red = (mask >> d) & 1;
        int64_t *dims = red ? p.red_dims : p.keep_dims, *str = red ? p.red_stride : p.keep_stride;
        int *cnt = red ? &p.n_red : &p.n_keep;
        if (last == red && *cnt > 0) {
            dims[*cnt - 1] *= x->dims[d];
            str[*cnt - 1] = st[d];
        } else {
            dims[*cnt] = x->dims[d];
            str[*cnt] = st[d];
            (*cnt)++;
        }
        last = red;
    }
    p.n_out = kn_numel(p.n_keep, p.keep_dims);
    p.n_red_total = kn_numel(p.n_red, p.red_dims); /* 0: the identities, as on the CPU */
    if (!kc_is_float(x->dtype) && x->dtype != KILN_DTYPE_DOUBLE &&
        !reduce_int_type(x->dtype, &p.ilo, &p.ihi))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "data type %s is not supported",
                             kiln_dtype_name(x->dtype));
    if (r->out[0].dtype != x->dtype || kc_numel(&r->out[0]) != p.n_out)
        return kn_node_error(n, KILN_ERR_SHAPE, "the output does not match the reduced input");
    KC_CUDA(n, kc_reduce_run(x->data, x->dtype, r->out[0].data, r->out[0].dtype, &p, r->workspace,
                             r->workspace_size, kc_stream(r)));
    return KILN_OK;
}

/* Workspace for the split row reduction (nn.cu): few outputs that keep the
 * last dim, each over many elements of a float input. */
static kiln_status reduce_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                  int n_in, const kb_tensor *out, int n_out, void **inst,
                                  size_t *workspace) {
    (void)state, (void)n_in, (void)n_out;
    *inst = NULL;
    *workspace = 0;
    const kb_tensor *x = &in[0], *y = &out[0];
    int64_t nx = kc_numel(x), ny = kc_numel(y);
    if (kc_is_float(x->dtype) && x->rank >= 2 && y->rank >= 1 && ny > 0 && nx / ny >= 64 &&
        y->dims[y->rank - 1] == x->dims[x->rank - 1] && strcmp(node->op_type, "ReduceLogSumExp") != 0)
        *workspace = kc_reduce_workspace(ny);
    return KILN_OK;
}

/* ---------------- pooling ---------------- */

static bool pool_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    /* MaxPool also takes 8-bit integers (exact in the kernel's float) */
    bool int8 = n_in >= 1 && n_out >= 1 && strcmp(node->op_type, "MaxPool") == 0 &&
                (in[0].dtype == KILN_DTYPE_INT8 || in[0].dtype == KILN_DTYPE_UINT8) &&
                out[0].dtype == in[0].dtype;
    if ((!int8 && !float_io(node, in, n_in, out, n_out)) || in[0].rank < 3 || in[0].rank > 5)
        return false;
    if (n_out > 1 && out[1].dtype != KILN_DTYPE_UNDEFINED && out[1].dtype != KILN_DTYPE_INT64)
        return false;
    return true;
}

kiln_status kc_pool_window(const kn_node *node, const kb_tensor *x, kn_window *w) {
    int nsp = x->rank - 2;
    if (nsp < 1 || nsp > 3)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%d spatial dims (1 to 3 supported)", nsp);
    size_t nk;
    const int64_t *ks = kn_attr_ints(node, "kernel_shape", &nk);
    if (!ks || nk != (size_t)nsp)
        return kn_node_error(node, KILN_ERR_SHAPE, "kernel_shape must have %d values", nsp);
    return kn_window_forward(node, nsp, x->dims + 2, ks, kn_attr_int(node, "ceil_mode", 0) != 0, w);
}

void kc_window3(const kn_window *w, int nsp, int64_t *in, int64_t *out, int64_t *kernel,
                int64_t *stride, int64_t *dil, int64_t *pad0, int64_t *pad1) {
    for (int d = 0; d < 3; d++) {
        int s = d - (3 - nsp);
        in[d] = s >= 0 ? w->in[s] : 1;
        out[d] = s >= 0 ? w->out[s] : 1;
        kernel[d] = s >= 0 ? w->kernel[s] : 1;
        stride[d] = s >= 0 ? w->stride[s] : 1;
        dil[d] = s >= 0 ? w->dil[s] : 1;
        pad0[d] = s >= 0 ? w->pad0[s] : 0;
        if (pad1)
            pad1[d] = s >= 0 ? w->pad1[s] : 0;
    }
}

static kiln_status pool_run(const kb_run *r) {
    const kn_node *node = r->node;
    /* kiln::MaxPool / kiln::AveragePool: channels-last X [N, S..., C] */
    bool cl = strcmp(node->domain, KN_DOMAIN_KILN) == 0;
    kb_tensor xv = r->in[0];
    if (cl)
        kn_dims_channels(xv.rank, r->in[0].dims, xv.dims, true);
    const kb_tensor *x = &xv;
    int nsp = x->rank - 2;
    kn_window w;
    KN_TRY(kc_pool_window(node, x, &w));
    kc_pool p;
    memset(&p, 0, sizeof p);
    p.max = strcmp(node->op_type, "MaxPool") == 0;
    p.include_pad = kn_attr_int(node, "count_include_pad", 0) != 0;
    p.col_major = kn_attr_int(node, "storage_order", 0) == 1;
    p.nsp = nsp;
    p.planes = cl ? x->dims[0] : x->dims[0] * x->dims[1];
    p.channels = cl ? x->dims[1] : 1;
    kc_window3(&w, nsp, p.in, p.out, p.kernel, p.stride, p.dil, p.pad0, p.pad1);
    int64_t *idx = r->n_out > 1 && r->out[1].data ? r->out[1].data : NULL;
    KC_CUDA(node, kc_pool_run(x->data, r->out[0].data, x->dtype, idx, &p, kc_stream(r)));
    return KILN_OK;
}

static kiln_status global_pool_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    if (x->rank < 2)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "input needs rank >= 2");
    int64_t planes = x->dims[0] * x->dims[1], size = kn_numel(x->rank - 2, x->dims + 2);
    int max = strcmp(r->node->op_type, "GlobalMaxPool") == 0;
    KC_CUDA(r->node, kc_global_pool(x->data, r->out[0].data, x->dtype, planes, size, max,
                                    kc_stream(r)));
    return KILN_OK;
}

/* ---------------- attention ---------------- */

/* The Q, K, V views of kiln::Attention's inputs (graph/fused.h), from
 * ranks and dims as shape inference and the kernels see them. */
static bool attention_views(const kn_node *node, const kn_tinfo *in, int n_in, kn_att_view v[3]) {
    int rank[3];
    int64_t dims[3][KILN_MAX_DIMS];
    memset(dims, 0, sizeof dims);
    for (int i = 0; i < 3; i++) {
        rank[i] = i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED ? in[i].rank : -1;
        if (rank[i] >= 0)
            memcpy(dims[i], in[i].dims, sizeof dims[i]);
    }
    return kn_attention_views(node, n_in < 3 ? n_in : 3, rank,
                              (const int64_t (*)[KILN_MAX_DIMS])dims, v) == KILN_OK;
}

static bool attention_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                               const kn_tinfo *out, int n_out) {
    if (n_out < 1 || n_in < 1 || !kc_is_float(in[0].dtype))
        return false;
    for (int i = 1; i < 3 && i < n_in; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && in[i].dtype != in[0].dtype)
            return false;
    if (n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED && !kc_is_float(in[3].dtype))
        return false;
    kn_att_view v[3];
    if (!attention_views(node, in, n_in, v))
        return false;
    /* grouped-query K/V: their heads divide Q's */
    if (v[1].h < 1 || v[0].h % v[1].h != 0 || v[2].h != v[1].h)
        return false;
    return out[0].dtype == in[0].dtype && v[0].d <= 256 && v[2].d <= 256;
}

static kiln_status attention_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                     int n_in, const kb_tensor *out, int n_out, void **inst,
                                     size_t *workspace) {
    *workspace = 0;
    KC_CUDA(node, kc_attention_setup());
    return KILN_OK;
}

/* The tensor-core tactics: float16 / bfloat16 with head dims that are
 * multiples of 16 up to 128 (the direct one also wants Sq, Sk multiples of
 * 16; the staged one at most 512 keys). */
static bool attention_tc_shapes(const kn_node *node, const kn_tinfo *in, int n_in, bool direct) {
    if (in[0].dtype != KILN_DTYPE_FLOAT16 && in[0].dtype != KILN_DTYPE_BFLOAT16)
        return false;
    kn_att_view v[3];
    if (!attention_views(node, in, n_in, v))
        return false;
    int64_t sq = v[0].s, d = v[0].d, sk = v[1].s, dv = v[2].d;
    if (d % 16 || dv % 16 || d > 128 || dv > 128)
        return false;
    return direct ? sq % 16 == 0 && sk % 16 == 0 : sk <= 512;
}

/* softcap runs on the general kernel alone */
static bool no_softcap(const kn_node *node) { return kn_attr_float(node, "softcap", 0.f) == 0.f; }

static bool attention_supports_direct(const kn_node *node, const kn_tinfo *in, int n_in,
                                      const kn_tinfo *out, int n_out) {
    return attention_supports(node, in, n_in, out, n_out) && no_softcap(node) &&
           attention_tc_shapes(node, in, n_in, true);
}

static bool attention_supports_staged(const kn_node *node, const kn_tinfo *in, int n_in,
                                      const kn_tinfo *out, int n_out) {
    return attention_supports(node, in, n_in, out, n_out) && no_softcap(node) &&
           attention_tc_shapes(node, in, n_in, false);
}

/* The mma.sync tactic: float16 / bfloat16, d = dv in {32, 64, 128}, any
 * Sq and Sk. */
static bool attention_supports_mma(const kn_node *node, const kn_tinfo *in, int n_in,
                                   const kn_tinfo *out, int n_out) {
    if (!attention_supports(node, in, n_in, out, n_out) || !no_softcap(node) ||
        (in[0].dtype != KILN_DTYPE_FLOAT16 && in[0].dtype != KILN_DTYPE_BFLOAT16))
        return false;
    kn_att_view v[3];
    if (!attention_views(node, in, n_in, v))
        return false;
    int64_t d = v[0].d, dv = v[2].d;
    return d == dv && (d == 32 || d == 64 || d == 128);
}

/* The single-pass tactics: as mma, with d <= 64 and at most 128 keys (at
 * another shape of the profile the kernel falls back to mma's). */
static bool attention_supports_mma1(const kn_node *node, const kn_tinfo *in, int n_in,
                                    const kn_tinfo *out, int n_out) {
    if (!attention_supports_mma(node, in, n_in, out, n_out))
        return false;
    kn_att_view v[3];
    if (!attention_views(node, in, n_in, v))
        return false;
    return v[0].d <= 64 && v[1].s <= 128;
}

/* The wgmma tactics: float16 / bfloat16, d = dv = 64, at most 128 keys,
 * on a device of compute capability 9.0 (at another shape of the profile,
 * or with a per-head or per-query mask, the kernel falls back to mma1's). */
static bool attention_supports_wgmma(const kn_node *node, const kn_tinfo *in, int n_in,
                                     const kn_tinfo *out, int n_out) {
    if (!attention_supports_mma1(node, in, n_in, out, n_out) || !kc_attn_wgmma_device())
        return false;
    kn_att_view v[3];
    return attention_views(node, in, n_in, v) && v[0].d == 64;
}

static kiln_status attention_go(const kb_run *r, int kernel);
static kiln_status attention_run(const kb_run *r) { return attention_go(r, KC_ATT_GENERAL); }
static kiln_status attention_run_direct(const kb_run *r) { return attention_go(r, KC_ATT_DIRECT); }
static kiln_status attention_run_staged(const kb_run *r) { return attention_go(r, KC_ATT_STAGED); }
static kiln_status attention_run_mma(const kb_run *r) { return attention_go(r, KC_ATT_MMA); }
static kiln_status attention_run_mma_wide(const kb_run *r) { return attention_go(r, KC_ATT_MMA_WIDE); }
static kiln_status attention_run_mma1(const kb_run *r) { return attention_go(r, KC_ATT_MMA1); }
static kiln_status attention_run_mma1_wide(const kb_run *r) { return attention_go(r, KC_ATT_MMA1_WIDE); }
static kiln_status attention_run_wgmma(const kb_run *r) { return attention_go(r, KC_ATT_WGMMA); }
static kiln_status attention_run_wgmma_wide(const kb_run *r) { return attention_go(r, KC_ATT_WGMMA_WIDE); }
static kiln_status attention_run_wgmma_pipe(const kb_run *r) { return attention_go(r, KC_ATT_WGMMA_PIPE); }

static kiln_status attention_go(const kb_run *r, int kernel) {
    const kb_tensor *q = &r->in[0];
    const kb_tensor *m = kc_present(r->in, r->n_in, 3) ? &r->in[3] : NULL;
    kc_attn a;
    memset(&a, 0, sizeof a);
    kn_tinfo ti[3];
    memset(ti, 0, sizeof ti);
    for (int i = 0; i < 3 && i < r->n_in; i++) {
        ti[i].dtype = r->in[i].data ? r->in[i].dtype : KILN_DTYPE_UNDEFINED;
        ti[i].rank = r->in[i].rank;
        memcpy(ti[i].dims, r->in[i].dims, sizeof ti[i].dims);
    }
    kn_att_view v[3];
    if (!attention_views(r->node, ti, r->n_in < 3 ? r->n_in : 3, v))
        return kn_node_error(r->node, KILN_ERR_SHAPE, "Q, K, V do not fit their views");
    a.b = v[0].b, a.sq = v[0].s, a.h = v[0].h, a.d = v[0].d;
    a.sk = v[1].s, a.dv = v[2].d;
    a.group = a.h / (v[1].h > 0 ? v[1].h : 1);
    a.qrow = v[0].ss, a.krow = v[1].ss, a.vrow = v[2].ss;
    a.qbatch = v[0].sb, a.kbatch = v[1].sb, a.vbatch = v[2].sb;
    a.qhead = v[0].sh, a.khead = v[1].sh, a.vhead = v[2].sh;
    size_t es = kiln_dtype_size(q->dtype);
    const void *kt = kc_present(r->in, r->n_in, 1) ? r->in[1].data : q->data;
    const void *vt = kc_present(r->in, r->n_in, 2) ? r->in[2].data : q->data;
    const void *qp = (const uint8_t *)q->data + (size_t)v[0].off * es;
    const void *kp = (const uint8_t *)kt + (size_t)v[1].off * es;
    const void *vp = (const uint8_t *)vt + (size_t)v[2].off * es;
    a.scale = kn_attr_float(r->node, "scale", 1.f);
    a.causal = kn_attr_int(r->node, "causal", 0) != 0;
    a.softcap = kn_attr_float(r->node, "softcap", 0.f);
    a.kernel = kernel;
    a.dt = q->dtype;
    a.mask_dt = m ? m->dtype : KILN_DTYPE_UNDEFINED;
    if (m) { /* right-aligned against [B, H, Sq, Sk]; broadcast dims get stride 0 */
        kn_mask_strides(m->rank, m->dims, a.mstride);
        a.mbatch = kn_mask_batches(m->rank, m->dims);
        if (a.b % a.mbatch != 0)
            return kn_node_error(r->node, KILN_ERR_SHAPE, "mask batch %lld does not divide %lld",
                                 (long long)a.mbatch, (long long)a.b);
    }
    KC_CUDA(r->node, kc_attention(qp, kp, vp, m ? m->data : NULL, r->out[0].data, &a, kc_stream(r)));
    return KILN_OK;
}

#define K_RED(name) {name, "", "cuda", reduce_supports, NULL, NULL, reduce_prepare, NULL, reduce_run}

const kb_kernel kb_cuda_nn[] = {
    {"Softmax", "", "cuda", float_io, NULL, NULL, NULL, NULL, softmax_run},
    {"LogSoftmax", "", "cuda", float_io, NULL, NULL, NULL, NULL, softmax_run},
    {"LayerNormalization", "", "cuda", layernorm_supports, NULL, NULL, NULL, NULL, layernorm_run},
    {"LayerNorm", KN_DOMAIN_KILN, "cuda", layernorm_fused_supports, NULL, NULL, NULL, NULL,
     layernorm_fused_run},
    {"BatchNormalization", "", "cuda", batchnorm_supports, NULL, NULL, NULL, NULL, batchnorm_run},
    K_RED("ReduceSum"), K_RED("ReduceMean"), K_RED("ReduceMax"), K_RED("ReduceMin"),
    K_RED("ReduceProd"), K_RED("ReduceSumSquare"), K_RED("ReduceL1"), K_RED("ReduceL2"),
    K_RED("ReduceLogSum"), K_RED("ReduceLogSumExp"),
    {"MaxPool", "", "cuda", pool_supports, NULL, NULL, NULL, NULL, pool_run},
    {"AveragePool", "", "cuda", pool_supports, NULL, NULL, NULL, NULL, pool_run},
    /* the builder times them all: the general kernel, the WMMA ones
     * (fragments from global memory, or K/V staged in shared memory) and
     * the mma.sync ones (scores in registers, online softmax; 64 or 128
     * query rows a block; single pass with an exact softmax up to 128 keys)
     * and the wgmma ones (Hopper, head dim 64, up to 128 keys) */
    {"Attention", KN_DOMAIN_KILN, "cuda", attention_supports, NULL, NULL, attention_prepare, NULL,
     attention_run},
    {"Attention", KN_DOMAIN_KILN, "wmma", attention_supports_direct, NULL, NULL, attention_prepare,
     NULL, attention_run_direct},
    {"Attention", KN_DOMAIN_KILN, "wmma_staged", attention_supports_staged, NULL, NULL,
     attention_prepare, NULL, attention_run_staged},
    {"Attention", KN_DOMAIN_KILN, "mma", attention_supports_mma, NULL, NULL, attention_prepare, NULL,
     attention_run_mma},
    {"Attention", KN_DOMAIN_KILN, "mma_wide", attention_supports_mma, NULL, NULL, attention_prepare,
     NULL, attention_run_mma_wide},
    {"Attention", KN_DOMAIN_KILN, "mma1", attention_supports_mma1, NULL, NULL, attention_prepare,
     NULL, attention_run_mma1},
    {"Attention", KN_DOMAIN_KILN, "mma1_wide", attention_supports_mma1, NULL, NULL,
     attention_prepare, NULL, attention_run_mma1_wide},
    {"Attention", KN_DOMAIN_KILN, "wgmma", attention_supports_wgmma, NULL, NULL, attention_prepare,
     NULL, attention_run_wgmma},
    {"Attention", KN_DOMAIN_KILN, "wgmma_wide", attention_supports_wgmma, NULL, NULL,
     attention_prepare, NULL, attention_run_wgmma_wide},
    {"Attention", KN_DOMAIN_KILN, "wgmma_pipe", attention_supports_wgmma, NULL, NULL,
     attention_prepare, NULL, attention_run_wgmma_pipe},

    {"MaxPool", KN_DOMAIN_KILN, "cuda", pool_supports, NULL, NULL, NULL, NULL, pool_run},
    {"AveragePool", KN_DOMAIN_KILN, "cuda", pool_supports, NULL, NULL, NULL, NULL, pool_run},
    {"GlobalAveragePool", "", "cuda", float_io, NULL, NULL, NULL, NULL, global_pool_run},
    {"GlobalMaxPool", "", "cuda", float_io, NULL, NULL, NULL, NULL, global_pool_run},
};
const size_t kb_cuda_nn_count = KN_ARRAY_LEN(kb_cuda_nn);
