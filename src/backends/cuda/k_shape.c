/* k_shape.c - the CUDA shape family's kb_kernel glue: Resize / Upsample,
 * DepthToSpace / SpaceToDepth, CenterCropPad, Range, EyeLike, OneHot,
 * GatherND, ScatterND / ScatterElements / Scatter, ReverseSequence, TopK,
 * Hardmax, MaxUnpool and the data-dependent NonZero, Compress and Unique
 * (flattened). Kernels in shape.cu; the layout ops reuse tensor.cu's
 * strided copy and pad. Value
 * inputs (scales, sizes, roi, K, depth, Range's scalars, shapes) are read
 * from kb_tensor.host; index tensors known on the host are range-checked in
 * prepare, as the CPU reference checks them. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_tensor.h"
#include "kc_common.h"
#include "shape.cuh"
#include "tensor.cuh"

static size_t esize(const kb_tensor *t) { return kiln_dtype_size(t->dtype); }

static bool plain_size(size_t s) { return s == 1 || s == 2 || s == 4 || s == 8; }

/* Element types moved as bytes: every fixed-size type but strings and complex. */
static bool movable(kiln_dtype t) {
    return t != KILN_DTYPE_STRING && t != KILN_DTYPE_COMPLEX64 && t != KILN_DTYPE_COMPLEX128 &&
           plain_size(kiln_dtype_size(t));
}

/* Types the kernels do arithmetic on (shape.cu's loads and stores). */
static bool arith(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_DOUBLE: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_INT8: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT8: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

/* Types the CPU's kbt_store can write a double into on the host (it
 * recurses forever on the fnuz float8 and complex types). */
static bool storable(kiln_dtype t) {
    return arith(t) || t == KILN_DTYPE_BOOL || t == KILN_DTYPE_FLOAT8E4M3FN ||
           t == KILN_DTYPE_FLOAT8E5M2;
}

static bool is_index(kiln_dtype t) { return t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64; }

static bool present(const kn_tinfo *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED;
}

static kn_tinfo info_of(const kb_tensor *t) { return kn_tinfo_of(t->dtype, t->rank, t->dims, t->host); }

/* Value input i, which must be known on the host when present. */
static kiln_status need_host(const kn_node *n, const kb_tensor *in, int n_in, int i) {
    if (kc_present(in, n_in, i) && kc_numel(&in[i]) > 0 && !in[i].host)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "input %d must be known on the host (a constant or shape value)", i);
    return KILN_OK;
}

/* [outer, n, inner] around `axis`. */
static void split3(const int64_t *dims, int rank, int axis, int64_t *o, int64_t *n, int64_t *i) {
    *o = kn_numel(axis, dims);
    *n = rank ? dims[axis] : 1;
    *i = rank ? kn_numel(rank - axis - 1, dims + axis + 1) : 1;
}

/* ---------------- DepthToSpace / SpaceToDepth ---------------- */

static bool d2s_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in >= 1 && in[0].rank == 4 && movable(in[0].dtype) &&
           kn_attr_int(node, "blocksize", 0) >= 1;
}

/* The CPU's 6-D transposes: source strides of the output's 6-D view. */
static kiln_status d2s_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t b = kn_attr_int(r->node, "blocksize", 1);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    bool crd = strcmp(kn_attr_string(r->node, "mode", "DCR"), "CRD") == 0;
    kc_copy c;
    memset(&c, 0, sizeof c);
    c.rank = 6;
    if (b < 1)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "blocksize %lld is below 1", (long long)b);
    if (strcmp(r->node->op_type, "DepthToSpace") == 0) {
        int64_t ch = C / (b * b);
        int64_t d6[6] = {N, ch, H, b, W, b};
        memcpy(c.dims, d6, sizeof d6);
        c.src_stride[0] = C * H * W;
        c.src_stride[2] = W;
        c.src_stride[4] = 1;
        if (crd) { /* input [N, c, b1, b2, H, W] */
            c.src_stride[1] = b * b * H * W;
            c.src_stride[3] = b * H * W;
            c.src_stride[5] = H * W;
        } else { /* input [N, b1, b2, c, H, W] */
            c.src_stride[1] = H * W;
            c.src_stride[3] = b * ch * H * W;
            c.src_stride[5] = ch * H * W;
        }
    } else {
        int64_t h = H / b, w = W / b;
        if (crd) { /* [N, C, h, b1, w, b2] -> [N, C, b1, b2, h, w] */
            int64_t d6[6] = {N, C, b, b, h, w}, s6[6] = {C * H * W, H * W, W, 1, b * W, b};
            memcpy(c.dims, d6, sizeof d6);
            memcpy(c.src_stride, s6, sizeof s6);
        } else { /* [N, C, h, b1, w, b2] -> [N, b1, b2, C, h, w] */
            int64_t d6[6] = {N, b, b, C, h, w}, s6[6] = {C * H * W, W, 1, H * W, b * W, b};
            memcpy(c.dims, d6, sizeof d6);
            memcpy(c.src_stride, s6, sizeof s6);
        }
    }
    if (kc_numel(x) == 0)
        return KILN_OK;
    kc_strides(6, c.dims, c.dst_stride);
    KC_CUDA(r->node, kc_strided_copy(r->out[0].data, x->data, esize(x), &c, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- CenterCropPad ---------------- */

static bool ccp_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in >= 2 && in[0].rank >= 1 && in[0].rank <= KC_MAX_DIMS && movable(in[0].dtype) &&
           is_index(in[1].dtype);
}

static kiln_status ccp_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    KN_TRY(need_host(r->node, r->in, r->n_in, 1));
    kn_tinfo in[2] = {info_of(&r->in[0]), info_of(&r->in[1])};
    in[0].value = NULL;
    kn_pad_plan p;
    KN_TRY(kn_center_crop_pad_decode(r->node, in, 2, &p));
    kc_pad kp;
    memset(&kp, 0, sizeof kp);
    kp.rank = o->rank;
    kp.mode = KN_PAD_CONSTANT;
    for (int d = 0; d < o->rank; d++) {
        kp.in_dims[d] = x->dims[d];
        kp.out_dims[d] = o->dims[d];
        kp.begin[d] = p.begin[d];
    }
    KC_CUDA(r->node, kc_pad_run(x->data, o->data, NULL, esize(x), &kp, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- Range, EyeLike, OneHot ---------------- */

static bool range_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    return n_in == 3 && n_out >= 1 && arith(out[0].dtype);
}

static kiln_status range_run(const kb_run *r) {
    const kb_tensor *o = &r->out[0];
    kiln_dtype t = o->dtype;
    for (int i = 0; i < 3; i++) {
        KN_TRY(need_host(r->node, r->in, r->n_in, i));
        if (!r->in[i].host || kc_numel(&r->in[i]) != 1 || r->in[i].dtype != t)
            return kn_node_error(r->node, KILN_ERR_SHAPE,
                                 "input %d must be one %s value known on the host", i,
                                 kiln_dtype_name(t));
    }
    double fs = 0, fd = 0;
    int64_t is = 0, id = 0;
    if (kbt_is_float(t)) {
        fs = kbt_load(t, r->in[0].host, 0);
        fd = kbt_load(t, r->in[2].host, 0);
    } else {
        is = kbt_load_i64(t, r->in[0].host, 0);
        id = kbt_load_i64(t, r->in[2].host, 0);
    }
    KC_CUDA(r->node, kc_range(o->data, t, kc_numel(o), fs, fd, is, id, kc_stream(r)));
    return KILN_OK;
}

static bool eyelike_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                             int n_out) {
    return n_in >= 1 && n_out >= 1 && out[0].rank == 2 && storable(out[0].dtype);
}

static kiln_status eyelike_run(const kb_run *r) {
    const kb_tensor *o = &r->out[0];
    size_t es = esize(o);
    uint8_t one[16] = {0};
    kbt_store(o->dtype, one, 0, 1.0);
    uint64_t bits = 0;
    memcpy(&bits, one, es);
    KC_CUDA(r->node, kc_eyelike(o->data, es, bits, o->dims[0], o->dims[1],
                                kn_attr_int(r->node, "k", 0), kc_stream(r)));
    return KILN_OK;
}

static bool onehot_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    return n_in == 3 && n_out >= 1 && (arith(in[0].dtype) || in[0].dtype == KILN_DTYPE_BOOL) &&
           kbt_is_numeric(in[1].dtype) && movable(out[0].dtype) && in[2].dtype == out[0].dtype;
}

static kiln_status onehot_run(const kb_run *r) {
    const kb_tensor *ix = &r->in[0], *o = &r->out[0];
    KN_TRY(need_host(r->node, r->in, r->n_in, 1));
    if (!r->in[1].host || kc_numel(&r->in[1]) != 1 || kc_numel(&r->in[2]) != 2)
        return kn_node_error(r->node, KILN_ERR_SHAPE,
                             "depth must be one value known on the host and values two elements");
    int64_t depth = (int64_t)kbt_load(r->in[1].dtype, r->in[1].host, 0);
    int ax = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", -1), o->rank, &ax));
    if (o->dims[ax] != depth)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "output axis %d has %lld entries for depth %lld",
                             ax, (long long)o->dims[ax], (long long)depth);
    int64_t outer, n, inner;
    split3(o->dims, o->rank, ax, &outer, &n, &inner);
    KC_CUDA(r->node, kc_onehot(ix->data, ix->dtype, r->in[2].data, o->data, esize(o), outer, depth,
                               inner, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- GatherND, ScatterND ---------------- */

/* reduction attribute as KC_RED_*, -1 when unknown. */
static int reduction_code(const kn_node *n) {
    const char *s = kn_attr_string(n, "reduction", "none");
    return strcmp(s, "none") == 0  ? KC_RED_NONE
           : strcmp(s, "add") == 0 ? KC_RED_ADD
           : strcmp(s, "mul") == 0 ? KC_RED_MUL
           : strcmp(s, "max") == 0 ? KC_RED_MAX
           : strcmp(s, "min") == 0 ? KC_RED_MIN
                                   : -1;
}

static bool reduction_ok(const kn_node *n, kiln_dtype t) {
    int red = reduction_code(n);
    return red == KC_RED_NONE || (red > 0 && (arith(t) || t == KILN_DTYPE_BOOL));
}

/* GatherND (batch_dims b) and ScatterND (b = 0) addressing. */
static void nd_plan(const kb_tensor *x, const kb_tensor *ix, int b, kc_nd *p) {
    int64_t xs[KILN_MAX_DIMS];
    kc_strides(x->rank, x->dims, xs);
    memset(p, 0, sizeof *p);
    p->k = (int)ix->dims[ix->rank - 1];
    p->tuples = p->k ? kc_numel(ix) / p->k : kn_numel(ix->rank - 1, ix->dims);
    p->slice = kn_numel(x->rank - b - p->k, x->dims + b + p->k);
    p->per_batch = b > 0 ? kn_numel(ix->rank - 1 - b, ix->dims + b) : 0;
    p->batch_stride = b > 0 ? xs[b - 1] : 0;
    for (int j = 0; j < p->k; j++) {
        p->dims[j] = x->dims[b + j];
        p->strides[j] = xs[b + j];
    }
}

/* Host-known tuples must address data, as on the CPU. */
static kiln_status nd_check(const kn_node *n, const kb_tensor *ix, const kc_nd *p) {
    if (!ix->host)
        return KILN_OK;
    const int64_t *v = ix->host;
    for (int64_t t = 0; t < p->tuples; t++)
        for (int j = 0; j < p->k; j++) {
            int64_t i = v[t * p->k + j], dim = p->dims[j];
            if (i < -dim || i >= dim)
                return kn_node_error(n, KILN_ERR_RUNTIME,
                                     "index %lld of tuple %lld is out of range [-%lld, %lld)",
                                     (long long)i, (long long)t, (long long)dim, (long long)dim);
        }
    return KILN_OK;
}

static bool gnd_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in == 2 && movable(in[0].dtype) && in[1].dtype == KILN_DTYPE_INT64 && in[1].rank >= 1;
}

/* batch_dims, checked against both ranks. */
static kiln_status gnd_batch(const kn_node *n, const kb_tensor *x, const kb_tensor *ix, int *b) {
    int64_t v = kn_attr_int(n, "batch_dims", 0);
    if (v < 0 || v >= x->rank || v >= ix->rank || ix->dims[ix->rank - 1] < 1 ||
        ix->dims[ix->rank - 1] > x->rank - v)
        return kn_node_error(n, KILN_ERR_SHAPE, "indices do not fit the data (batch_dims %lld)",
                             (long long)v);
    *b = (int)v;
    return KILN_OK;
}

static kiln_status gnd_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    *workspace = 0;
    int b;
    KN_TRY(gnd_batch(node, &in[0], &in[1], &b));
    kc_nd p;
    nd_plan(&in[0], &in[1], b, &p);
    return nd_check(node, &in[1], &p);
}

static kiln_status gnd_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1];
    int b;
    KN_TRY(gnd_batch(r->node, x, ix, &b));
    kc_nd p;
    nd_plan(x, ix, b, &p);
    KC_CUDA(r->node, kc_gather_nd(x->data, ix->data, r->out[0].data, esize(x), &p, kc_stream(r)));
    return KILN_OK;
}

static bool snd_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in == 3 && movable(in[0].dtype) && in[1].dtype == KILN_DTYPE_INT64 && in[1].rank >= 1 &&
           in[2].dtype == in[0].dtype && reduction_ok(node, in[0].dtype);
}

static kiln_status snd_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    *workspace = 0;
    if (in[1].dims[in[1].rank - 1] > in[0].rank)
        return kn_node_error(node, KILN_ERR_SHAPE, "indices do not fit the data");
    kc_nd p;
    nd_plan(&in[0], &in[1], 0, &p);
    return nd_check(node, &in[1], &p);
}

/* Scatters write into a copy of the data. */
static kiln_status copy_data(const kb_run *r) {
    size_t bytes = (size_t)kc_numel(&r->in[0]) * esize(&r->in[0]);
    if (bytes && r->out[0].data != r->in[0].data)
        KC_CUDA(r->node, cudaMemcpyAsync(r->out[0].data, r->in[0].data, bytes,
                                         cudaMemcpyDeviceToDevice, kc_stream(r)));
    return KILN_OK;
}

static kiln_status snd_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1];
    int red = reduction_code(r->node);
    if (red < 0 || !reduction_ok(r->node, x->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "reduction '%s' on type %s",
                             kn_attr_string(r->node, "reduction", "none"), kiln_dtype_name(x->dtype));
    if (ix->rank < 1 || ix->dims[ix->rank - 1] > x->rank)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "indices do not fit the data");
    kc_nd p;
    nd_plan(x, ix, 0, &p);
    KN_TRY(copy_data(r));
    KC_CUDA(r->node, kc_scatter_nd(r->out[0].data, ix->data, r->in[2].data, x->dtype, red, &p,
                                   kc_stream(r)));
    return KILN_OK;
}

/* ---------------- ScatterElements / Scatter ---------------- */

static bool sel_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in == 3 && movable(in[0].dtype) && is_index(in[1].dtype) && in[0].rank >= 1 &&
           in[0].rank <= KC_MAX_DIMS && in[2].dtype == in[0].dtype &&
           reduction_ok(node, in[0].dtype);
}

static kiln_status sel_plan(const kn_node *n, const kb_tensor *x, const kb_tensor *ix,
                            kc_scatter_el *p) {
    int axis = 0;
    KN_TRY(kc_norm_axis(n, kn_attr_int(n, "axis", 0), x->rank, &axis));
    if (ix->rank != x->rank)
        return kn_node_error(n, KILN_ERR_SHAPE, "indices have rank %d, data rank %d", ix->rank,
                             x->rank);
    memset(p, 0, sizeof *p);
    p->rank = x->rank;
    p->axis = axis;
    p->axis_len = x->dims[axis];
    p->total = kc_numel(ix);
    kc_strides(x->rank, x->dims, p->y_strides);
    for (int d = 0; d < x->rank; d++) {
        p->idx_dims[d] = ix->dims[d];
        if (d != axis && ix->dims[d] > x->dims[d])
            return kn_node_error(n, KILN_ERR_SHAPE, "indices are larger than data in dimension %d", d);
    }
    return KILN_OK;
}

static kiln_status sel_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    *workspace = 0;
    kc_scatter_el p;
    KN_TRY(sel_plan(node, &in[0], &in[1], &p));
    const kb_tensor *ix = &in[1];
    for (int64_t e = 0; ix->host && e < p.total; e++) {
        int64_t v = kbt_load_i64(ix->dtype, ix->host, e);
        if (v < -p.axis_len || v >= p.axis_len)
            return kn_node_error(node, KILN_ERR_RUNTIME,
                                 "index %lld (element %lld) is out of range [-%lld, %lld)",
                                 (long long)v, (long long)e, (long long)p.axis_len,
                                 (long long)p.axis_len);
    }
    return KILN_OK;
}

static kiln_status sel_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1];
    int red = reduction_code(r->node);
    if (red < 0 || !reduction_ok(r->node, x->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "reduction '%s' on type %s",
                             kn_attr_string(r->node, "reduction", "none"), kiln_dtype_name(x->dtype));
    kc_scatter_el p;
    KN_TRY(sel_plan(r->node, x, ix, &p));
    KN_TRY(copy_data(r));
    KC_CUDA(r->node, kc_scatter_elements(r->out[0].data, ix->data, ix->dtype, r->in[2].data,
                                         x->dtype, red, &p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- ReverseSequence ---------------- */

static bool revseq_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    return n_in == 2 && in[0].rank >= 2 && movable(in[0].dtype) && arith(in[1].dtype) &&
           !kbt_is_float(in[1].dtype);
}

static kiln_status revseq_geometry(const kn_node *n, const kb_tensor *x, int *ba, int64_t *T,
                                   int64_t *B, int64_t *inner) {
    KN_TRY(kc_norm_axis(n, kn_attr_int(n, "batch_axis", 1), x->rank, ba));
    if (*ba > 1)
        return kn_node_error(n, KILN_ERR_SHAPE, "batch_axis must be 0 or 1");
    *T = x->dims[*ba == 0 ? 1 : 0];
    *B = x->dims[*ba];
    *inner = kn_numel(x->rank - 2, x->dims + 2);
    return KILN_OK;
}

static kiln_status revseq_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                  int n_in, const kb_tensor *out, int n_out, void **inst,
                                  size_t *workspace) {
    *workspace = 0;
    int ba;
    int64_t T, B, inner;
    KN_TRY(revseq_geometry(node, &in[0], &ba, &T, &B, &inner));
    if (kc_numel(&in[1]) != B)
        return kn_node_error(node, KILN_ERR_SHAPE, "sequence_lens must have %lld entries",
                             (long long)B);
    for (int64_t b = 0; in[1].host && b < B; b++) {
        int64_t len = kbt_load_i64(in[1].dtype, in[1].host, b);
        if (len < 0 || len > T)
            return kn_node_error(node, KILN_ERR_RUNTIME,
                                 "sequence length %lld of batch %lld is outside [0, %lld]",
                                 (long long)len, (long long)b, (long long)T);
    }
    return KILN_OK;
}

static kiln_status revseq_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int ba;
    int64_t T, B, inner;
    KN_TRY(revseq_geometry(r->node, x, &ba, &T, &B, &inner));
    if (kc_numel(&r->in[1]) != B)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "sequence_lens must have %lld entries",
                             (long long)B);
    KC_CUDA(r->node, kc_reverse_sequence(x->data, r->out[0].data, esize(x), r->in[1].data,
                                         r->in[1].dtype, T, B, inner, ba, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- TopK ---------------- */

static bool topk_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    return n_in >= 1 && in[0].rank >= 1 && arith(in[0].dtype) && n_out >= 1 &&
           (n_out < 2 || out[1].dtype == KILN_DTYPE_UNDEFINED || out[1].dtype == KILN_DTYPE_INT64);
}

/* Axis, slice geometry and k (from whichever output is wanted). */
static kiln_status topk_geometry(const kn_node *n, const kb_tensor *x, const kb_tensor *out,
                                 int n_out, int64_t *o, int64_t *len, int64_t *i, int64_t *k) {
    int ax = 0;
    KN_TRY(kc_norm_axis(n, kn_attr_int(n, "axis", -1), x->rank, &ax));
    split3(x->dims, x->rank, ax, o, len, i);
    *k = 0;
    for (int j = n_out - 1; j >= 0; j--)
        if (out[j].data && out[j].rank == x->rank)
            *k = out[j].dims[ax];
    if (*k < 0 || *k > *len)
        return kn_node_error(n, KILN_ERR_SHAPE, "k = %lld is out of range for an axis of %lld",
                             (long long)*k, (long long)*len);
    return KILN_OK;
}

static kiln_status topk_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                int n_in, const kb_tensor *out, int n_out, void **inst,
                                size_t *workspace) {
    int64_t o, len, i, k;
    KN_TRY(topk_geometry(node, &in[0], out, n_out, &o, &len, &i, &k));
    cudaError_t e = kc_topk_workspace(o, len, i, workspace);
    if (e == cudaErrorInvalidValue)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "%lld slices of %lld elements are too many to sort on CUDA",
                             (long long)(o * i), (long long)len);
    KC_CUDA(node, e);
    return KILN_OK;
}

static kiln_status topk_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t o, len, i, k;
    KN_TRY(topk_geometry(r->node, x, r->out, r->n_out, &o, &len, &i, &k));
    void *vals = r->out[0].data;
    int64_t *idx = r->n_out > 1 ? r->out[1].data : NULL;
    KC_CUDA(r->node, kc_topk(x->data, x->dtype, vals, idx, o, len, i, k,
                             kn_attr_int(r->node, "largest", 1) != 0, r->workspace,
                             r->workspace_size, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- Hardmax ---------------- */

static bool hardmax_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                             int n_out) {
    return n_in >= 1 && in[0].rank >= 1 &&
           (kc_is_float(in[0].dtype) || in[0].dtype == KILN_DTYPE_DOUBLE);
}

static kiln_status hardmax_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    bool legacy = r->node->opset > 0 && r->node->opset < 13;
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", legacy ? 1 : -1), x->rank, &axis));
    int64_t o, n, i;
    split3(x->dims, x->rank, axis, &o, &n, &i);
    if (legacy) { /* coerced to 2-D: everything from axis on is one row */
        n *= i;
        i = 1;
    }
    KC_CUDA(r->node, kc_hardmax(x->data, r->out[0].data, x->dtype, o, n, i, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- MaxUnpool ---------------- */

static bool unpool_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    kiln_dtype t = n_in >= 2 ? in[0].dtype : KILN_DTYPE_UNDEFINED;
    size_t nk;
    return n_in >= 2 && (kc_is_float(t) || t == KILN_DTYPE_DOUBLE || is_index(t)) && is_index(in[1].dtype) && in[0].rank >= 3 &&
           kn_attr_ints(node, "kernel_shape", &nk) && nk == (size_t)(in[0].rank - 2);
}

static kiln_status unpool_plan(const kn_node *n, const kb_tensor *x, const kb_tensor *idx,
                               const kb_tensor *y, kc_unpool *p) {
    int nsp = x->rank - 2;
    if (kc_numel(idx) != kc_numel(x))
        return kn_node_error(n, KILN_ERR_SHAPE, "indices must have the input's shape");
    size_t nk, ns, np;
    const int64_t *ks = kn_attr_ints(n, "kernel_shape", &nk);
    if (!ks || nk != (size_t)nsp)
        return kn_node_error(n, KILN_ERR_SHAPE, "kernel_shape must have %d values", nsp);
    const int64_t *st = kn_attr_ints(n, "strides", &ns);
    const int64_t *pd = kn_attr_ints(n, "pads", &np);
    memset(p, 0, sizeof *p);
    p->nsp = nsp;
    p->n = kc_numel(x);
    p->total = kc_numel(y);
    p->orig_plane = 1;
    p->out_plane = kn_numel(nsp, y->dims + 2);
    for (int d = 0; d < nsp; d++) {
        int64_t s = st && ns == (size_t)nsp ? st[d] : 1;
        int64_t pad = pd && np == (size_t)(2 * nsp) ? pd[d] + pd[d + nsp] : 0;
        p->orig[d] = (x->dims[2 + d] - 1) * s + ks[d] - pad;
        p->out_sp[d] = y->dims[2 + d];
        if (p->orig[d] <= 0)
            return kn_node_error(n, KILN_ERR_SHAPE, "the unpooled extent of axis %d is %lld",
                                 2 + d, (long long)p->orig[d]);
        p->orig_plane *= p->orig[d];
    }
    return KILN_OK;
}

static kiln_status unpool_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                  int n_in, const kb_tensor *out, int n_out, void **inst,
                                  size_t *workspace) {
    *workspace = 0;
    kc_unpool p;
    KN_TRY(unpool_plan(node, &in[0], &in[1], &out[0], &p));
    for (int64_t i = 0; in[1].host && i < p.n; i++) { /* the kernel's mapping, checked */
        int64_t k = kbt_load_i64(in[1].dtype, in[1].host, i), rest = k % p.orig_plane;
        int64_t off = (k / p.orig_plane) * p.out_plane, mul = 1;
        bool inside = k >= 0;
        for (int d = p.nsp - 1; d >= 0; d--) {
            int64_t c = rest % p.orig[d];
            rest /= p.orig[d];
            inside = inside && c < p.out_sp[d];
            off += c * mul;
            mul *= p.out_sp[d];
        }
        if (!inside || off >= p.total)
            return kn_node_error(node, KILN_ERR_RUNTIME, "index %lld is outside the output",
                                 (long long)k);
    }
    return KILN_OK;
}

static kiln_status unpool_run(const kb_run *r) {
    kc_unpool p;
    KN_TRY(unpool_plan(r->node, &r->in[0], &r->in[1], &r->out[0], &p));
    KC_CUDA(r->node, kc_max_unpool(r->in[0].data, r->in[1].data, r->in[1].dtype, r->out[0].data,
                                   esize(&r->out[0]), &p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- NonZero, Compress, Unique (data-dependent shapes) ----------------
 * The executor sizes their outputs by the upper bound and reads the true
 * dims from the kernel when run() returns, so run() waits for the count:
 * it synchronizes its stream (contexts with data-dependent shapes never
 * capture CUDA graphs). The count lands in page-locked memory from prepare. */

static void count_release(void *inst) {
    if (inst)
        (void)cudaFreeHost(inst);
}

static kiln_status count_alloc(const kn_node *n, void **inst) {
    void *p = NULL;
    KC_CUDA(n, cudaHostAlloc(&p, sizeof(int64_t), cudaHostAllocDefault));
    *(int64_t *)p = 0;
    *inst = p;
    return KILN_OK;
}

static kiln_status count_wait(const kb_run *r, int64_t *count) {
    KC_CUDA(r->node, cudaStreamSynchronize(kc_stream(r)));
    if (*count < 0)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "negative count %lld", (long long)*count);
    return KILN_OK;
}

static kc_zero_test zero_test(kiln_dtype t) {
    kc_zero_test z = {kiln_dtype_size(t), kbt_is_float(t)};
    return z;
}

static bool nonzero_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                             int n_out) {
    return n_in == 1 && in[0].rank <= KC_MAX_DIMS && movable(in[0].dtype);
}

static kiln_status nonzero_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *workspace) {
    KC_CUDA(node, kc_nonzero_workspace(kc_numel(&in[0]), workspace));
    return count_alloc(node, inst);
}

static kiln_status nonzero_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t *count = r->inst;
    if (!count)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run without prepare");
    KC_CUDA(r->node, kc_nonzero(x->data, zero_test(x->dtype), x->rank, x->dims, r->out[0].data,
                                r->workspace, r->workspace_size, count, kc_stream(r)));
    KN_TRY(count_wait(r, count));
    if (*count > kc_numel(x))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "%lld nonzeros of %lld elements",
                             (long long)*count, (long long)kc_numel(x));
    r->out[0].dims[1] = *count;
    return KILN_OK;
}

/* NonMaxSuppression: max_output_boxes_per_class, iou_threshold and
 * score_threshold are host values (kb_tensor.host). */
static bool nms_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in >= 2 && in[0].dtype == KILN_DTYPE_FLOAT && in[1].dtype == KILN_DTYPE_FLOAT &&
           in[0].rank == 3 && in[1].rank == 3;
}

static kiln_status nms_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    KC_CUDA(node, kc_nms_workspace(in[1].dims[0], in[1].dims[1], in[1].dims[2], workspace));
    return count_alloc(node, inst);
}

static double nms_host(const kb_run *r, int i, double dflt, bool *given) {
    *given = kc_present(r->in, r->n_in, i) && r->in[i].host && kc_numel(&r->in[i]) > 0;
    if (!*given)
        return dflt;
    const void *h = r->in[i].host;
    switch (r->in[i].dtype) {
    case KILN_DTYPE_INT64: return (double)*(const int64_t *)h;
    case KILN_DTYPE_INT32: return *(const int32_t *)h;
    case KILN_DTYPE_DOUBLE: return *(const double *)h;
    default: return *(const float *)h;
    }
}

static kiln_status nms_run(const kb_run *r) {
    const kb_tensor *boxes = &r->in[0], *scores = &r->in[1];
    int64_t *count = r->inst;
    if (!count)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run without prepare");
    if (boxes->dims[2] != 4 || scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1])
        return kn_node_error(r->node, KILN_ERR_SHAPE, "boxes must be [B, N, 4] and scores [B, C, N]");
    bool given;
    kc_nms_params p = {scores->dims[0], scores->dims[1], scores->dims[2], 0, 0, 0, 0.f, 0.f};
    p.max_out = (int64_t)nms_host(r, 2, 0, &given);
    p.iou = (float)nms_host(r, 3, 0, &given);
    p.score = (float)nms_host(r, 4, 0, &given);
    p.has_score = given;
    p.center = (int)kn_attr_int(r->node, "center_point_box", 0);
    KC_CUDA(r->node, kc_nms(boxes->data, scores->data, &p, r->out[0].data, r->workspace,
                            r->workspace_size, count, kc_stream(r)));
    KN_TRY(count_wait(r, count));
    if (*count > r->out[0].dims[0])
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "%lld selected boxes, room for %lld",
                             (long long)*count, (long long)r->out[0].dims[0]);
    r->out[0].dims[0] = *count;
    return KILN_OK;
}

static bool compress_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                              int n_out) {
    return n_in == 2 && movable(in[0].dtype) && movable(in[1].dtype) && in[1].rank == 1;
}

/* [outer, dim, inner] around the axis (the flattened input without one),
 * and how many condition entries count. */
static kiln_status compress_geometry(const kn_node *n, const kb_tensor *x, const kb_tensor *cond,
                                     int *ax, int64_t *outer, int64_t *dim, int64_t *inner,
                                     int64_t *lim) {
    const kn_attr *a = kn_attr_find(n, "axis");
    *ax = -1;
    *outer = *inner = 1;
    *dim = kc_numel(x);
    if (a) {
        KN_TRY(kc_norm_axis(n, a->i, x->rank, ax));
        split3(x->dims, x->rank, *ax, outer, dim, inner);
    }
    int64_t len = cond->rank == 1 ? cond->dims[0] : kc_numel(cond);
    *lim = len < *dim ? len : *dim;
    return KILN_OK;
}

static kiln_status compress_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                    int n_in, const kb_tensor *out, int n_out, void **inst,
                                    size_t *workspace) {
    int ax;
    int64_t outer, dim, inner, lim;
    KN_TRY(compress_geometry(node, &in[0], &in[1], &ax, &outer, &dim, &inner, &lim));
    KC_CUDA(node, kc_compress_workspace(lim, workspace));
    return count_alloc(node, inst);
}

static kiln_status compress_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *cond = &r->in[1];
    int64_t *count = r->inst;
    if (!count)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run without prepare");
    int ax;
    int64_t outer, dim, inner, lim;
    KN_TRY(compress_geometry(r->node, x, cond, &ax, &outer, &dim, &inner, &lim));
    KC_CUDA(r->node, kc_compress(x->data, r->out[0].data, esize(x), cond->data,
                                 zero_test(cond->dtype), lim, outer, dim, inner, r->workspace,
                                 r->workspace_size, count, kc_stream(r)));
    KN_TRY(count_wait(r, count));
    if (*count > lim)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "%lld of %lld entries selected",
                             (long long)*count, (long long)lim);
    r->out[0].dims[ax >= 0 ? ax : 0] = *count;
    return KILN_OK;
}

/* Unique over the flattened input (or a 1-D input's only axis), or along
 * an axis of a higher-rank input (whole slices compared, kc_unique_axis). */
static bool unique_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    const kn_attr *a = kn_attr_find(node, "axis");
    return n_in == 1 && n_out <= 4 && (arith(in[0].dtype) || in[0].dtype == KILN_DTYPE_BOOL) &&
           (!a || (in[0].rank >= 1 && a->i >= -in[0].rank && a->i < in[0].rank));
}

/* The axis form's [outer, n, inner] (ax < 0: the flat form). */
static kiln_status unique_geometry(const kn_node *n, const kb_tensor *x, int *ax, int64_t *outer,
                                   int64_t *dim, int64_t *inner) {
    const kn_attr *a = kn_attr_find(n, "axis");
    *ax = -1;
    *outer = *inner = 1;
    *dim = kc_numel(x);
    if (!a || x->rank == 1)
        return KILN_OK;
    KN_TRY(kc_norm_axis(n, a->i, x->rank, ax));
    split3(x->dims, x->rank, *ax, outer, dim, inner);
    return KILN_OK;
}

static kiln_status unique_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                  int n_in, const kb_tensor *out, int n_out, void **inst,
                                  size_t *workspace) {
    int ax;
    int64_t outer, dim, inner;
    KN_TRY(unique_geometry(node, &in[0], &ax, &outer, &dim, &inner));
    if (ax < 0)
        KC_CUDA(node, kc_unique_workspace(dim, workspace));
    else
        KC_CUDA(node, kc_unique_axis_workspace(dim, workspace));
    return count_alloc(node, inst);
}

static void *out_or_null(const kb_run *r, int i) { return i < r->n_out ? r->out[i].data : NULL; }

static kiln_status unique_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t *count = r->inst;
    if (!count)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run without prepare");
    int ax;
    int64_t outer, n, inner;
    KN_TRY(unique_geometry(r->node, x, &ax, &outer, &n, &inner));
    int sorted = kn_attr_int(r->node, "sorted", 1) != 0;
    if (ax < 0)
        KC_CUDA(r->node, kc_unique(x->data, x->dtype, n, sorted, out_or_null(r, 0),
                                   out_or_null(r, 1), out_or_null(r, 2), out_or_null(r, 3),
                                   r->workspace, r->workspace_size, count, kc_stream(r)));
    else
        KC_CUDA(r->node, kc_unique_axis(x->data, x->dtype, outer, n, inner, sorted,
                                        out_or_null(r, 0), out_or_null(r, 1), out_or_null(r, 2),
                                        out_or_null(r, 3), r->workspace, r->workspace_size, count,
                                        kc_stream(r)));
    KN_TRY(count_wait(r, count));
    if (*count > n)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "%lld groups of %lld items",
                             (long long)*count, (long long)n);
    r->out[0].dims[ax < 0 ? 0 : ax] = *count;
    if (r->n_out > 1 && r->out[1].data)
        r->out[1].dims[0] = *count;
    if (r->n_out > 3 && r->out[3].data)
        r->out[3].dims[0] = *count;
    return KILN_OK;
}

/* ---------------- Resize / Upsample ----------------
 * prepare builds each axis's taps on the host with the CPU reference's own
 * builder (kbt_resize_taps, k_tensor_resize.c) and uploads them once per
 * shape; the kernel reads them. */

static bool resize_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    if (n_in < 1 || in[0].rank > KC_MAX_DIMS || !storable(in[0].dtype))
        return false;
    return strcmp(kn_attr_string(node, "mode", "nearest"), "nearest") == 0 || arith(in[0].dtype);
}

typedef struct resize_inst {
    void *tables; /* device memory */
    kc_resize p;
} resize_inst;

static void resize_release(void *inst) {
    resize_inst *ri = inst;
    if (!ri)
        return;
    if (ri->tables)
        (void)cudaFree(ri->tables);
    kn_free(ri);
}

static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

static kiln_status resize_tables(const kn_node *node, const kn_resize_plan *plan,
                                 const kb_tensor *x, resize_inst *ri) {
    kc_resize *p = &ri->p;
    size_t bytes = 0;
    for (int d = 0; d < p->rank; d++) {
        size_t out = (size_t)p->out_dims[d];
        p->cap[d] = kbt_resize_max_taps(node, x->dims[d], p->out_dims[d]);
        p->cnt_at[d] = (int64_t)bytes;
        bytes += al64(out * sizeof(int64_t));
        p->idx_at[d] = (int64_t)bytes;
        bytes += al64(out * (size_t)p->cap[d] * sizeof(int64_t));
        p->w_at[d] = (int64_t)bytes;
        bytes += al64(out * (size_t)p->cap[d] * sizeof(double));
    }
    unsigned char *host = kn_calloc(bytes ? bytes : 1, 1);
    if (!host)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    for (int d = 0; st == KILN_OK && d < p->rank; d++)
        st = kbt_resize_taps(node, plan, d, x->dims[d], p->out_dims[d], p->cap[d],
                        (int64_t *)(void *)(host + p->cnt_at[d]),
                        (int64_t *)(void *)(host + p->idx_at[d]),
                        (double *)(void *)(host + p->w_at[d]));
    cudaError_t e = cudaSuccess;
    if (st == KILN_OK && (e = cudaMalloc(&ri->tables, bytes ? bytes : 1)) == cudaSuccess)
        e = cudaMemcpy(ri->tables, host, bytes, cudaMemcpyHostToDevice);
    kn_free(host);
    if (st == KILN_OK && e != cudaSuccess)
        st = kc_cuda_fail(node, e, "resize tables");
    return st;
}

static kiln_status resize_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                  int n_in, const kb_tensor *out, int n_out, void **inst,
                                  size_t *workspace) {
    const kb_tensor *x = &in[0], *o = &out[0];
    *workspace = 0;
    kn_tinfo ti[4];
    int n = n_in < 4 ? n_in : 4;
    for (int i = 0; i < n; i++) {
        if (i > 0)
            KN_TRY(need_host(node, in, n_in, i));
        ti[i] = info_of(&in[i]);
    }
    ti[0].value = NULL;
    kn_resize_plan plan;
    KN_TRY(kn_resize_decode(node, ti, n, &plan));
    for (int d = 0; d < x->rank; d++)
        if (plan.out[d] != o->dims[d])
            return kn_node_error(node, KILN_ERR_INTERNAL, "output shape changed");
    if (plan.mode != KN_RS_NEAREST && !arith(x->dtype))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "interpolation of type %s",
                             kiln_dtype_name(x->dtype));
    int64_t total = kc_numel(o);
    if (x->rank == 0 || total == 0)
        return KILN_OK;
    if (kc_numel(x) == 0)
        return kn_node_error(node, KILN_ERR_SHAPE, "cannot resize an empty tensor");
    resize_inst *ri = kn_calloc(1, sizeof *ri);
    if (!ri)
        return KILN_ERR_OUT_OF_MEMORY;
    kc_resize *p = &ri->p;
    p->rank = x->rank;
    p->nearest = plan.mode == KN_RS_NEAREST;
    p->dt = x->dtype;
    p->es = esize(x);
    p->total = total;
    kc_strides(x->rank, x->dims, p->x_strides);
    for (int d = 0; d < x->rank; d++)
        p->out_dims[d] = o->dims[d];
    uint8_t extra[16] = {0};
    kbt_store(x->dtype, extra, 0, plan.extrapolation);
    memcpy(&p->extra, extra, p->es);
    kiln_status st = resize_tables(node, &plan, x, ri);
    if (st != KILN_OK) {
        resize_release(ri);
        return st;
    }
    *inst = ri;
    return KILN_OK;
}

static kiln_status resize_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *o = &r->out[0];
    if (kc_numel(o) == 0)
        return KILN_OK;
    if (x->rank == 0) {
        KC_CUDA(r->node, cudaMemcpyAsync(o->data, x->data, esize(x), cudaMemcpyDeviceToDevice,
                                         kc_stream(r)));
        return KILN_OK;
    }
    const resize_inst *ri = r->inst;
    if (!ri)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run without prepare");
    KC_CUDA(r->node, kc_resize_run(x->data, o->data, ri->tables, &ri->p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- the table ---------------- */

#define K(op, sup, run) {op, "", "cuda", sup, NULL, NULL, NULL, NULL, run}
#define KP(op, sup, prep, rel, run) {op, "", "cuda", sup, NULL, NULL, prep, rel, run}

const kb_kernel kb_cuda_shape[] = {
    KP("Resize", resize_supports, resize_prepare, resize_release, resize_run),
    KP("Upsample", resize_supports, resize_prepare, resize_release, resize_run),
    K("DepthToSpace", d2s_supports, d2s_run),
    K("SpaceToDepth", d2s_supports, d2s_run),
    K("CenterCropPad", ccp_supports, ccp_run),
    K("Range", range_supports, range_run),
    K("EyeLike", eyelike_supports, eyelike_run),
    K("OneHot", onehot_supports, onehot_run),
    KP("GatherND", gnd_supports, gnd_prepare, NULL, gnd_run),
    KP("ScatterND", snd_supports, snd_prepare, NULL, snd_run),
    KP("ScatterElements", sel_supports, sel_prepare, NULL, sel_run),
    KP("Scatter", sel_supports, sel_prepare, NULL, sel_run),
    KP("ReverseSequence", revseq_supports, revseq_prepare, NULL, revseq_run),
    KP("TopK", topk_supports, topk_prepare, NULL, topk_run),
    K("Hardmax", hardmax_supports, hardmax_run),
    KP("MaxUnpool", unpool_supports, unpool_prepare, NULL, unpool_run),
    KP("NonZero", nonzero_supports, nonzero_prepare, count_release, nonzero_run),
    KP("NonMaxSuppression", nms_supports, nms_prepare, count_release, nms_run),
    KP("Compress", compress_supports, compress_prepare, count_release, compress_run),
    KP("Unique", unique_supports, unique_prepare, count_release, unique_run),
};
const size_t kb_cuda_shape_count = KN_ARRAY_LEN(kb_cuda_shape);
