/* k_tensor.c - the CUDA tensor family's kb_kernel glue: device copies for
 * the shape-only ops, and Transpose, Concat, Split, Slice, Expand and Gather
 * through the strided copy and gather kernels of tensor.cu. Shape values
 * (Slice's starts, Gather's constant indices) are read from kb_tensor.host. */
#include <string.h>

#include "graph/ops_tensor.h"
#include "kc_common.h"
#include "random.cuh"
#include "tensor.cuh"

static size_t esize(const kb_tensor *t) { return kiln_dtype_size(t->dtype); }

static bool copyable(kiln_dtype t) {
    size_t s = kiln_dtype_size(t);
    return t != KILN_DTYPE_STRING && (s == 1 || s == 2 || s == 4 || s == 8 || s == 16);
}

static bool layout_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    return n_in >= 1 && n_out >= 1 && copyable(in[0].dtype);
}

/* Identity, Reshape, Flatten, Squeeze, Unsqueeze: the bytes do not change. */
static kiln_status k_copy(const kb_run *r) {
    size_t n = (size_t)kc_numel(&r->in[0]) * esize(&r->in[0]);
    if (n && r->out[0].data != r->in[0].data)
        KC_CUDA(r->node, cudaMemcpyAsync(r->out[0].data, r->in[0].data, n,
                                         cudaMemcpyDeviceToDevice, kc_stream(r)));
    return KILN_OK;
}

/* BitCast: the same bytes under another type of the same width. */
static kiln_status k_bitcast(const kb_run *r) {
    if (esize(&r->in[0]) != esize(&r->out[0]))
        return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT, "types differ in width (%s -> %s)",
                             kiln_dtype_name(r->in[0].dtype), kiln_dtype_name(r->out[0].dtype));
    return k_copy(r);
}

static kiln_status run_copy(const kb_run *r, void *dst, const void *src, size_t es,
                            const kc_copy *c) {
    KC_CUDA(r->node, kc_strided_copy(dst, src, es, c, kc_stream(r)));
    return KILN_OK;
}

static kiln_status k_transpose(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int rank = x->rank;
    int64_t st[KILN_MAX_DIMS];
    kc_strides(rank, x->dims, st);
    size_t np;
    const int64_t *perm = kn_attr_ints(r->node, "perm", &np);
    if (perm && np != (size_t)rank)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "perm has %zu entries for rank %d", np, rank);
    kc_copy c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    for (int i = 0; i < rank; i++) {
        int64_t p = perm ? perm[i] : rank - 1 - i;
        if (p < 0 || p >= rank)
            return kn_node_error(r->node, KILN_ERR_SHAPE, "perm[%d] = %lld is out of range", i,
                                 (long long)p);
        c.dims[i] = r->out[0].dims[i];
        c.src_stride[i] = st[p];
    }
    kc_strides(rank, c.dims, c.dst_stride);
    return run_copy(r, r->out[0].data, x->data, esize(x), &c);
}

/* Concat and Split: each piece is a strided copy of [outer, piece, inner]. */
static kiln_status axis_pieces(const kb_run *r, bool concat) {
    const kb_tensor *whole = concat ? &r->out[0] : &r->in[0];
    int64_t axis = kn_attr_int(r->node, "axis", concat ? 1 : 0);
    if (axis < 0)
        axis += whole->rank;
    if (axis < 0 || axis >= whole->rank)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "axis out of range");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= whole->dims[d];
    for (int d = (int)axis + 1; d < whole->rank; d++)
        inner *= whole->dims[d];
    int64_t at = 0, row = whole->dims[axis] * inner;
    int n = concat ? r->n_in : r->n_out;
    for (int i = 0; i < n; i++) {
        const kb_tensor *t = concat ? &r->in[i] : &r->out[i];
        if (!t->data || t->dtype == KILN_DTYPE_UNDEFINED)
            continue;
        int64_t len = t->dims[axis] * inner;
        if (len > 0 && outer > 0) {
            kc_copy c;
            memset(&c, 0, sizeof c);
            c.rank = 2;
            c.dims[0] = outer;
            c.dims[1] = len;
            if (concat) {
                c.src_stride[0] = len;
                c.dst_stride[0] = row;
                c.dst_off = at;
            } else {
                c.src_stride[0] = row;
                c.dst_stride[0] = len;
                c.src_off = at;
            }
            c.src_stride[1] = c.dst_stride[1] = 1;
            KN_TRY(run_copy(r, concat ? r->out[0].data : t->data, concat ? t->data : r->in[0].data,
                            esize(whole), &c));
        }
        at += len;
    }
    return KILN_OK;
}

static kiln_status k_concat(const kb_run *r) { return axis_pieces(r, true); }
static kiln_status k_split(const kb_run *r) { return axis_pieces(r, false); }

static kn_tinfo info_of(const kb_tensor *t) {
    kn_tinfo i;
    memset(&i, 0, sizeof i);
    i.dtype = t->dtype;
    i.rank = t->rank;
    memcpy(i.dims, t->dims, sizeof i.dims);
    i.value = t->host;
    return i;
}

static kiln_status k_slice(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kn_tinfo in[5];
    int n_in = r->n_in < 5 ? r->n_in : 5;
    for (int i = 0; i < n_in; i++) {
        in[i] = info_of(&r->in[i]);
        if (i > 0 && r->in[i].dtype != KILN_DTYPE_UNDEFINED && !r->in[i].host)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                                 "input %d must be known on the host (a constant or shape value)", i);
    }
    in[0].value = NULL;
    kn_slice_plan p;
    KN_TRY(kn_slice_decode(r->node, in, n_in, &p));
    int64_t st[KILN_MAX_DIMS];
    kc_strides(x->rank, x->dims, st);
    kc_copy c;
    memset(&c, 0, sizeof c);
    c.rank = x->rank;
    for (int d = 0; d < x->rank; d++) {
        c.src_off += p.start[d] * st[d];
        c.src_stride[d] = p.step[d] * st[d];
        c.dims[d] = r->out[0].dims[d];
    }
    kc_strides(c.rank, c.dims, c.dst_stride);
    if (kc_numel(&r->out[0]) == 0)
        return KILN_OK;
    return run_copy(r, r->out[0].data, x->data, esize(x), &c);
}

static kiln_status k_expand(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    int64_t st[KILN_MAX_DIMS];
    kc_strides(x->rank, x->dims, st);
    kc_copy c;
    memset(&c, 0, sizeof c);
    c.rank = o->rank;
    for (int d = 0; d < o->rank; d++) {
        int k = d - (o->rank - x->rank);
        c.src_stride[d] = k < 0 || x->dims[k] == 1 ? 0 : st[k];
        c.dims[d] = o->dims[d];
    }
    kc_strides(c.rank, c.dims, c.dst_stride);
    return run_copy(r, o->data, x->data, esize(x), &c);
}

static bool gather_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    size_t s = n_in == 2 ? kiln_dtype_size(in[0].dtype) : 0;
    return n_in == 2 && (s == 1 || s == 2 || s == 4 || s == 8) &&
           (in[1].dtype == KILN_DTYPE_INT64 || in[1].dtype == KILN_DTYPE_INT32);
}

static kiln_status k_gather(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1];
    int64_t ax = kn_attr_int(r->node, "axis", 0);
    if (ax < 0)
        ax += x->rank;
    if (ax < 0 || ax >= x->rank)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "axis out of range");
    int64_t dim = x->dims[ax], outer = 1, inner = 1, ni = kc_numel(ix);
    if (ix->host) /* constant indices: check them as the CPU kernel does */
        for (int64_t j = 0; j < ni; j++) {
            int64_t v = ix->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)ix->host)[j]
                                                      : ((const int32_t *)ix->host)[j];
            if (v < -dim || v >= dim)
                return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                     "index %lld is out of range [-%lld, %lld)", (long long)v,
                                     (long long)dim, (long long)dim);
        }
    for (int d = 0; d < ax; d++)
        outer *= x->dims[d];
    for (int d = (int)ax + 1; d < x->rank; d++)
        inner *= x->dims[d];
    KC_CUDA(r->node, kc_gather(x->data, ix->data, ix->dtype, r->out[0].data, esize(x), outer, dim,
                               ni, inner, kc_stream(r)));
    return KILN_OK;
}

static kiln_status k_tile(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    if (2 * x->rank > KC_MAX_DIMS)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "rank %d (the CUDA Tile takes up to %d)",
                             x->rank, KC_MAX_DIMS / 2);
    int64_t st[KILN_MAX_DIMS];
    kc_strides(x->rank, x->dims, st);
    kc_copy c;
    memset(&c, 0, sizeof c);
    c.rank = 2 * x->rank; /* (repeat, element) pairs */
    for (int d = 0; d < x->rank; d++) {
        c.dims[2 * d] = x->dims[d] ? o->dims[d] / x->dims[d] : 0;
        c.src_stride[2 * d] = 0;
        c.dims[2 * d + 1] = x->dims[d];
        c.src_stride[2 * d + 1] = st[d];
    }
    kc_strides(c.rank, c.dims, c.dst_stride);
    return run_copy(r, o->data, x->data, esize(x), &c);
}

static bool tile_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    return layout_supports(node, in, n_in, out, n_out) && 2 * in[0].rank <= KC_MAX_DIMS &&
           kiln_dtype_size(in[0].dtype) <= 8;
}

static bool pad_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    size_t s = n_in >= 1 ? kiln_dtype_size(in[0].dtype) : 0;
    return n_in >= 1 && (s == 1 || s == 2 || s == 4 || s == 8) && in[0].rank >= 1 &&
           /* pads and axes are value inputs (host memory at run time) */
           (n_in < 2 || in[1].dtype == KILN_DTYPE_UNDEFINED || in[1].dtype == KILN_DTYPE_INT64) &&
           (n_in < 4 || in[3].dtype == KILN_DTYPE_UNDEFINED || in[3].dtype == KILN_DTYPE_INT64 ||
            in[3].dtype == KILN_DTYPE_INT32);
}

static kiln_status k_pad(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    kn_tinfo in[4];
    int n_in = r->n_in < 4 ? r->n_in : 4;
    for (int i = 0; i < n_in; i++) {
        in[i] = info_of(&r->in[i]);
        if ((i == 1 || i == 3) && r->in[i].dtype != KILN_DTYPE_UNDEFINED && !r->in[i].host)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                                 "input %d must be known on the host (a constant or shape value)", i);
    }
    if (n_in > 0)
        in[0].value = NULL;
    if (n_in > 2)
        in[2].value = NULL; /* the constant is read on the device */
    kn_pad_plan p;
    KN_TRY(kn_pad_decode(r->node, in, n_in, &p));
    kc_pad kp;
    memset(&kp, 0, sizeof kp);
    kp.rank = o->rank;
    kp.mode = p.mode;
    for (int d = 0; d < o->rank; d++) {
        kp.in_dims[d] = x->dims[d];
        kp.out_dims[d] = o->dims[d];
        kp.begin[d] = p.begin[d];
    }
    const void *cval = kc_present(r->in, r->n_in, 2) && kc_numel(&r->in[2]) >= 1 ? r->in[2].data : NULL;
    if (!cval && r->node->opset < 11 && kn_attr_float(r->node, "value", 0.f) != 0.f)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "a non-zero 'value' attribute (opset < 11)");
    KC_CUDA(r->node, kc_pad_run(x->data, o->data, cval, esize(x), &kp, kc_stream(r)));
    return KILN_OK;
}

static bool cos_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    size_t s = n_out >= 1 ? kiln_dtype_size(out[0].dtype) : 0;
    return s == 1 || s == 2 || s == 4 || s == 8;
}

static kiln_status k_constant_of_shape(const kb_run *r) {
    const kb_tensor *o = &r->out[0];
    uint64_t v = 0;
    size_t es = esize(o);
    const kn_attr *a = kn_attr_find(r->node, "value");
    if (a && a->type == KN_ATTR_TENSOR && a->tensor && a->tensor->data && es <= sizeof v)
        memcpy(&v, a->tensor->data, es);
    KC_CUDA(r->node, kc_fill(o->data, es, v, kc_numel(o), kc_stream(r)));
    return KILN_OK;
}

/* Dropout. At inference (training_mode absent or false, or a ratio of 0):
 * Y = X, the mask all true. In training mode: the CPU reference's draws
 * (random.cu), key from the seed attribute, else one per context, and a
 * run counter of the context's own in device memory, so that a captured
 * graph draws anew on every replay. */
typedef struct dropout_inst {
    uint64_t key;
    unsigned long long *run; /* device memory */
} dropout_inst;

static void dropout_release(void *inst) {
    dropout_inst *s = inst;
    if (!s)
        return;
    if (s->run)
        cudaFree(s->run);
    kn_free(s);
}

static kiln_status dropout_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *workspace) {
    (void)state, (void)in, (void)n_in, (void)out, (void)n_out;
    *workspace = 0;
    dropout_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    cudaError_t e = cudaMalloc((void **)&s->run, sizeof *s->run);
    if (e == cudaSuccess)
        e = cudaMemset(s->run, 0, sizeof *s->run);
    if (e != cudaSuccess) {
        dropout_release(s);
        return kn_node_error(node, KILN_ERR_DEVICE, "the run counter: %s", cudaGetErrorString(e));
    }
    kn_random p;
    memset(&p, 0, sizeof p);
    p.has_seed = kn_attr_find(node, "seed") != NULL;
    p.seed = (double)kn_attr_int(node, "seed", 0);
    s->key = kn_random_key(&p);
    *inst = s;
    return KILN_OK;
}

static double host_scalar(const kb_tensor *t, double dflt) {
    if (!t->host)
        return dflt;
    switch (t->dtype) {
    case KILN_DTYPE_DOUBLE: return *(const double *)t->host;
    case KILN_DTYPE_FLOAT: return *(const float *)t->host;
    case KILN_DTYPE_FLOAT16: return kn_half_to_float(*(const uint16_t *)t->host);
    case KILN_DTYPE_BFLOAT16: return kn_bf16_to_float(*(const uint16_t *)t->host);
    default: return dflt;
    }
}

static kiln_status k_dropout(const kb_run *r) {
    bool training = false;
    double ratio = 0.5;
    if (kc_present(r->in, r->n_in, 2)) {
        const kb_tensor *tm = &r->in[2];
        if (!tm->host)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                                 "training_mode must be known on the host");
        training = *(const uint8_t *)tm->host != 0;
    }
    if (training && kc_present(r->in, r->n_in, 1)) {
        if (!r->in[1].host)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "ratio must be known on the host");
        ratio = host_scalar(&r->in[1], 0.5);
    }
    if (training && !(ratio >= 0.0 && ratio < 1.0))
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "ratio %g is not in [0, 1)", ratio);
    if (training && ratio != 0.0) {
        const dropout_inst *s = r->inst;
        if (!s)
            return kn_node_error(r->node, KILN_ERR_INTERNAL, "Dropout was not prepared");
        kc_dropout p;
        memset(&p, 0, sizeof p);
        p.key = s->key;
        p.ratio = ratio;
        p.scale = 1.0 / (1.0 - ratio);
        p.count = kc_numel(&r->in[0]);
        p.x_dt = r->in[0].dtype;
        bool mask = r->n_out > 1 && r->out[1].data;
        p.mask_dt = mask ? r->out[1].dtype : KILN_DTYPE_BOOL;
        KC_CUDA(r->node, kc_dropout_run(r->in[0].data, r->out[0].data,
                                        mask ? r->out[1].data : NULL, s->run, &p, kc_stream(r)));
        return KILN_OK;
    }
    KN_TRY(k_copy(r));
    if (r->n_out > 1 && r->out[1].data)
        KC_CUDA(r->node, kc_fill(r->out[1].data, 1, 1, kc_numel(&r->out[1]), kc_stream(r)));
    return KILN_OK;
}

#define K(name, fn) {name, "", "cuda", layout_supports, NULL, NULL, NULL, NULL, fn}

const kb_kernel kb_cuda_tensor[] = {
    K("Identity", k_copy),  K("Reshape", k_copy),    K("Flatten", k_copy),
    K("Squeeze", k_copy),   K("Unsqueeze", k_copy),  K("Transpose", k_transpose),
    K("BitCast", k_bitcast),
    K("Concat", k_concat),  K("Split", k_split),     K("Slice", k_slice),
    K("Expand", k_expand),
    {"Gather", "", "cuda", gather_supports, NULL, NULL, NULL, NULL, k_gather},
    {"Tile", "", "cuda", tile_supports, NULL, NULL, NULL, NULL, k_tile},
    {"Pad", "", "cuda", pad_supports, NULL, NULL, NULL, NULL, k_pad},
    {"ConstantOfShape", "", "cuda", cos_supports, NULL, NULL, NULL, NULL, k_constant_of_shape},
    {"Dropout", "", "cuda", layout_supports, NULL, NULL, dropout_prepare, dropout_release,
     k_dropout},
};
const size_t kb_cuda_tensor_count = KN_ARRAY_LEN(kb_cuda_tensor);
