/* k_index.c - ArgMax / ArgMin, CumSum / CumProd, Trilu and GatherElements on
 * the CUDA backend (kernels in index.cu). Attributes and value inputs as the
 * CPU reference reads them; value inputs (CumSum's axis, Trilu's k) must be
 * known on the host (constants or shape-time values). */
#include <string.h>

#include "index.cuh"
#include "kc_common.h"

static bool arg_type(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_DOUBLE: case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT16:
    case KILN_DTYPE_UINT16: case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32:
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

/* [outer, n, inner] around `axis`. */
static void split3(const kb_tensor *x, int axis, int64_t *o, int64_t *n, int64_t *i) {
    *o = kn_numel(axis, x->dims);
    *n = x->rank ? x->dims[axis] : 1;
    *i = kn_numel(x->rank - axis - 1, x->dims + axis + 1);
}

/* ---------------- ArgMax / ArgMin ---------------- */

static bool argext_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    return n_in >= 1 && n_out >= 1 && arg_type(in[0].dtype) && out[0].dtype == KILN_DTYPE_INT64;
}

static kiln_status argext_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", 0), x->rank, &axis));
    int64_t o, n, i;
    split3(x, axis, &o, &n, &i);
    if (n == 0 && o * i > 0)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "cannot take the %s over an empty axis",
                             r->node->op_type);
    KC_CUDA(r->node, kc_argext(x->data, x->dtype, r->out[0].data, o, n, i,
                               strcmp(r->node->op_type, "ArgMax") == 0,
                               kn_attr_int(r->node, "select_last_index", 0) != 0, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- CumSum / CumProd ---------------- */

static bool scan_type(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 ||
           t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_UINT32 ||
           t == KILN_DTYPE_INT64 || t == KILN_DTYPE_UINT64;
}

static bool cum_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    /* the axis is a value input: the runtime keeps it on the host */
    return n_in >= 2 && scan_type(in[0].dtype) &&
           (in[1].dtype == KILN_DTYPE_INT32 || in[1].dtype == KILN_DTYPE_INT64);
}

static kiln_status cum_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *a = &r->in[1];
    if (!a->host || kc_numel(a) != 1)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "axis must be one value known on the host");
    int64_t a64 = a->dtype == KILN_DTYPE_INT32 ? *(const int32_t *)a->host : *(const int64_t *)a->host;
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, a64, x->rank, &axis));
    int64_t o, n, i;
    split3(x, axis, &o, &n, &i);
    KC_CUDA(r->node, kc_cumulative(x->data, r->out[0].data, x->dtype, o, n, i,
                                   strcmp(r->node->op_type, "CumProd") == 0,
                                   kn_attr_int(r->node, "exclusive", 0) != 0,
                                   kn_attr_int(r->node, "reverse", 0) != 0, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- Trilu ---------------- */

static bool trilu_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    if (n_in < 1 || in[0].rank < 2 || kiln_dtype_size(in[0].dtype) == 0)
        return false;
    /* k is a value input (kept on the host); int64 as the schema says */
    return n_in < 2 || in[1].dtype == KILN_DTYPE_UNDEFINED || in[1].dtype == KILN_DTYPE_INT64 ||
           in[1].dtype == KILN_DTYPE_INT32;
}

static kiln_status trilu_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t k = 0;
    if (kc_present(r->in, r->n_in, 1) && kc_numel(&r->in[1]) > 0) {
        if (!r->in[1].host)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "k must be known on the host");
        k = r->in[1].dtype == KILN_DTYPE_INT32 ? *(const int32_t *)r->in[1].host
                                               : *(const int64_t *)r->in[1].host;
    }
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
    int64_t mats = rows != 0 && cols != 0 ? kc_numel(x) / (rows * cols) : 0;
    KC_CUDA(r->node, kc_trilu(x->data, r->out[0].data, kiln_dtype_size(x->dtype), mats, rows, cols,
                              k, kn_attr_int(r->node, "upper", 1) != 0, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- GatherElements ---------------- */

static bool gel_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in >= 2 && kiln_dtype_size(in[0].dtype) > 0 && in[1].rank == in[0].rank &&
           in[0].rank >= 1 && in[0].rank <= KC_MAX_DIMS &&
           (in[1].dtype == KILN_DTYPE_INT32 || in[1].dtype == KILN_DTYPE_INT64);
}

/* Indices known on the host (constants, shape-time values) are checked once
 * per shape here, not on every run: out of range is an error, as on the CPU. */
static kiln_status gel_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    const kb_tensor *x = &in[0], *ix = &in[1];
    *workspace = 0;
    int axis = 0;
    KN_TRY(kc_norm_axis(node, kn_attr_int(node, "axis", 0), x->rank, &axis));
    if (!ix->host)
        return KILN_OK;
    int64_t len = x->dims[axis], total = kc_numel(ix);
    for (int64_t e = 0; e < total; e++) {
        int64_t v = ix->dtype == KILN_DTYPE_INT32 ? ((const int32_t *)ix->host)[e]
                                                 : ((const int64_t *)ix->host)[e];
        if (v < -len || v >= len)
            return kn_node_error(node, KILN_ERR_RUNTIME, "index %lld is out of range [-%lld, %lld)",
                                 (long long)v, (long long)len, (long long)len);
    }
    return KILN_OK;
}

static kiln_status gel_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1];
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", 0), x->rank, &axis));
    kc_gather_el g;
    memset(&g, 0, sizeof g);
    g.rank = x->rank;
    g.axis = axis;
    g.axis_len = x->dims[axis];
    g.total = kc_numel(ix);
    kc_strides(x->rank, x->dims, g.x_strides);
    for (int d = 0; d < x->rank; d++) {
        g.idx_dims[d] = ix->dims[d];
        if (d != axis && ix->dims[d] > x->dims[d])
            return kn_node_error(r->node, KILN_ERR_SHAPE,
                                 "indices are larger than data in dimension %d", d);
    }
    KC_CUDA(r->node, kc_gather_elements(x->data, r->out[0].data, kiln_dtype_size(x->dtype), ix->data,
                                        ix->dtype, &g, kc_stream(r)));
    return KILN_OK;
}

const kb_kernel kb_cuda_index[] = {
    {"ArgMax", "", "cuda", argext_supports, NULL, NULL, NULL, NULL, argext_run},
    {"ArgMin", "", "cuda", argext_supports, NULL, NULL, NULL, NULL, argext_run},
    {"CumSum", "", "cuda", cum_supports, NULL, NULL, NULL, NULL, cum_run},
    {"CumProd", "", "cuda", cum_supports, NULL, NULL, NULL, NULL, cum_run},
    {"Trilu", "", "cuda", trilu_supports, NULL, NULL, NULL, NULL, trilu_run},
    {"GatherElements", "", "cuda", gel_supports, NULL, NULL, gel_prepare, NULL, gel_run},
};
const size_t kb_cuda_index_count = KN_ARRAY_LEN(kb_cuda_index);
