/* ops.c - the op schema registry and helpers shared by shape inference. */
#include <string.h>

#include "graph.h"
#include "plugin/plugin.h"

/* ops_train.c: ai.onnx.preview.training's Adagrad, Momentum, Adam */
extern const kn_op_schema kn_ops_train[];
extern const size_t kn_ops_train_count;

/* ops_string.c: StringNormalizer */
extern const kn_op_schema kn_ops_string[];
extern const size_t kn_ops_string_count;

const kn_op_schema *kn_op_nth(size_t i) {
    static const struct {
        const kn_op_schema *t;
        const size_t *n;
    } tables[] = {
        {kn_ops_elementwise, &kn_ops_elementwise_count},
        {kn_ops_tensor, &kn_ops_tensor_count},
        {kn_ops_nn, &kn_ops_nn_count},
        {kn_ops_fused, &kn_ops_fused_count},
        {kn_ops_quant, &kn_ops_quant_count},
        {kn_ops_spectral, &kn_ops_spectral_count},
        {kn_ops_tfidf, &kn_ops_tfidf_count},
        {kn_ops_contrib, &kn_ops_contrib_count},
        {kn_ops_control, &kn_ops_control_count},
        {kn_ops_train, &kn_ops_train_count},
        {kn_ops_string, &kn_ops_string_count},
        {kn_ops_seq, &kn_ops_seq_count},
    };
    for (size_t k = 0; k < KN_ARRAY_LEN(tables); k++) {
        if (i < *tables[k].n)
            return &tables[k].t[i];
        i -= *tables[k].n;
    }
    return NULL;
}

const kn_op_schema *kn_op_find(const char *domain, const char *op_type) {
    if (!domain || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    if (strcmp(domain, KPL_DOMAIN) == 0) /* plugin nodes: inference asks the plugin */
        return &kpl_schema;
    const kn_op_schema *s;
    for (size_t i = 0; (s = kn_op_nth(i)) != NULL; i++)
        if (strcmp(s->op_type, op_type) == 0 && strcmp(s->domain, domain) == 0)
            return s;
    return NULL;
}

int64_t kn_value_int(const kn_tinfo *t, int64_t k) {
    const void *p = t->value;
    switch (t->dtype) {
    case KILN_DTYPE_INT64: return ((const int64_t *)p)[k];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[k];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[k];
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[k];
    case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[k];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[k];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[k];
    case KILN_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[k];
    default: return (int64_t)kn_value_double(t, k);
    }
}

double kn_value_double(const kn_tinfo *t, int64_t k) {
    const void *p = t->value;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[k];
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[k];
    case KILN_DTYPE_FLOAT16: return kn_half_to_float(((const uint16_t *)p)[k]);
    case KILN_DTYPE_BFLOAT16: return kn_bf16_to_float(((const uint16_t *)p)[k]);
    case KILN_DTYPE_INT64: case KILN_DTYPE_INT32: case KILN_DTYPE_INT16: case KILN_DTYPE_INT8:
    case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64: return (double)kn_value_int(t, k);
    default: return 0.0;
    }
}

kiln_status kn_axis(const kn_infer *c, int64_t axis, int rank, int *out) {
    if (axis < -(int64_t)rank || axis >= (rank ? rank : 1))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

kiln_status kn_broadcast(const kn_infer *c, const kn_tinfo *a, const kn_tinfo *b, kn_tinfo *out) {
    int r = a->rank > b->rank ? a->rank : b->rank;
    int64_t dims[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->rank), ib = i - (r - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da == db || db == 1)
            dims[i] = da;
        else if (da == 1)
            dims[i] = db;
        else
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "shapes cannot broadcast: dimension %d is %lld in one input "
                                 "and %lld in the other",
                                 i, (long long)da, (long long)db);
    }
    out->rank = r;
    memcpy(out->dims, dims, sizeof(int64_t) * (size_t)r);
    return KILN_OK;
}

void kn_same_as(kn_tinfo *out, const kn_tinfo *in) {
    out->dtype = in->dtype;
    out->rank = in->rank;
    memcpy(out->dims, in->dims, sizeof out->dims);
    /* what is known of a sequence or optional value goes with its handle */
    out->elem_known = in->elem_known;
    out->count_known = in->count_known;
    out->elem_rank = in->elem_rank;
    memcpy(out->elem_dims, in->elem_dims, sizeof out->elem_dims);
    out->count = in->count;
}
