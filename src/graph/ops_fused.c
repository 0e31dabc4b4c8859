/* ops_fused.c - op schemas of kiln's fused ops (domain "kiln", see fused.h):
 * each infers like its base ONNX op, then checks what the epilogue adds. */
#include <string.h>

#include "fused.h"
#include "graph.h"

/* Run the base op's inference on the first n_in inputs. */
static kiln_status infer_as(kn_infer *c, const char *base, int n_in) {
    const kn_op_schema *s = kn_op_find("", base);
    if (!s)
        return kn_node_error(c->node, KILN_ERR_INTERNAL, "no schema for base op %s", base);
    kn_infer sub = *c;
    sub.n_in = n_in < c->n_in ? n_in : c->n_in;
    sub.n_out = 1;
    return s->infer(&sub);
}

/* Whether t broadcasts (unidirectionally, numpy rules) to y's shape. */
static bool broadcasts_to(const kn_tinfo *t, const kn_tinfo *y) {
    if (t->rank > y->rank)
        return false;
    for (int i = 1; i <= t->rank; i++) {
        int64_t d = t->dims[t->rank - i];
        if (d != 1 && d != y->dims[y->rank - i])
            return false;
    }
    return true;
}

/* The reference kernels compute in float; float16, bfloat16 and double pass
 * through float copies. */
static kiln_status need_real(kn_infer *c) {
    for (int i = 0; i < c->n_in; i++) {
        kiln_dtype t = kn_has_in(c, i) ? c->in[i].dtype : KILN_DTYPE_FLOAT;
        if (t != KILN_DTYPE_FLOAT && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16 &&
            t != KILN_DTYPE_DOUBLE)
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "input %d has type %s, not a float type",
                                 i, kiln_dtype_name(t));
    }
    if (c->n_in > 4)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "too many inputs (%d)", c->n_in);
    return KILN_OK;
}

static kiln_status infer_fused_conv(kn_infer *c) {
    KN_TRY(need_real(c));
    KN_TRY(infer_as(c, "Conv", 3));
    if (kn_has_in(c, 3)) {
        const kn_tinfo *z = &c->in[3], *y = &c->out[0];
        if (z->rank != y->rank || memcmp(z->dims, y->dims, sizeof(int64_t) * (size_t)y->rank))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "the residual Z must have the output's shape");
    }
    return KILN_OK;
}

static kiln_status infer_fused_gemm(kn_infer *c) {
    KN_TRY(need_real(c));
    return infer_as(c, "Gemm", 3);
}

static kiln_status infer_fused_matmul(kn_infer *c) {
    KN_TRY(need_real(c));
    KN_TRY(infer_as(c, "MatMul", 2));
    if (kn_has_in(c, 2) && !broadcasts_to(&c->in[2], &c->out[0]))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "bias does not broadcast to the output");
    return KILN_OK;
}

const kn_op_schema kn_ops_fused[] = {
    {"Conv", KN_DOMAIN_KILN, infer_fused_conv, 0},
    {"Gemm", KN_DOMAIN_KILN, infer_fused_gemm, 0},
    {"MatMul", KN_DOMAIN_KILN, infer_fused_matmul, 0},
};
const size_t kn_ops_fused_count = KN_ARRAY_LEN(kn_ops_fused);
