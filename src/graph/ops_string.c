/* ops_string.c - ops on string tensors (CPU only; a string element is a
 * `const char *`, see KILN_DTYPE_STRING): StringNormalizer. Cast and
 * CastLike to and from string are Cast's schema (ops_elementwise.c). */
#include <string.h>

#include "graph/graph.h"

/* StringNormalizer: X [C] or [1, C] of strings; Y the same rank with at
 * most C strings (stopwords removed: data-dependent, C an upper bound; all
 * removed gives one empty string). */
static kiln_status infer_strnorm(kn_infer *c) {
    if (c->n_in < 1 || !kn_has_in(c, 0))
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "StringNormalizer takes X");
    const kn_tinfo *x = &c->in[0];
    if (x->dtype != KILN_DTYPE_STRING)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "X is %s, not string",
                             kiln_dtype_name(x->dtype));
    if (!(x->rank == 1 || (x->rank == 2 && x->dims[0] == 1)))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "X must be [C] or [1, C]");
    const char *act = kn_attr_string(c->node, "case_change_action", "NONE");
    if (strcmp(act, "NONE") != 0 && strcmp(act, "LOWER") != 0 && strcmp(act, "UPPER") != 0)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                             "case_change_action '%s' is not NONE, LOWER or UPPER", act);
    kn_same_as(&c->out[0], x);
    int64_t *n = &c->out[0].dims[x->rank - 1];
    if (*n < 1)
        *n = 1;
    c->out[0].data_dependent = true;
    return KILN_OK;
}

/* Ops that take or make string tensors: these ops' kernels and the ones
 * that only move elements (a string element is a pointer); any other op
 * would read a pointer as a number. */
kiln_status kn_check_strings(const kn_infer *c) {
    static const char *const ok[] = {
        "Cast", "CastLike", "StringNormalizer", "Identity", "Reshape", "Flatten", "Squeeze",
        "Unsqueeze", "Transpose", "Gather", "GatherElements", "GatherND", "Concat", "Split",
        "Slice", "Expand", "Tile", "Shape", "Size", "If", "Loop", "Scan"};
    bool any = false;
    for (int j = 0; j < c->n_in && !any; j++)
        any = c->in[j].dtype == KILN_DTYPE_STRING;
    for (int j = 0; j < c->n_out && !any; j++)
        any = c->node->out[j] >= 0 && c->out[j].dtype == KILN_DTYPE_STRING;
    if (!any || c->node->domain[0])
        return any ? kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                                   "string tensors are not supported by this op")
                   : KILN_OK;
    for (size_t k = 0; k < KN_ARRAY_LEN(ok); k++)
        if (strcmp(c->node->op_type, ok[k]) == 0)
            return KILN_OK;
    return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "%s does not take string tensors here",
                         c->node->op_type);
}

const kn_op_schema kn_ops_string[] = {
    {"StringNormalizer", "", infer_strnorm, 0},
};
const size_t kn_ops_string_count = KN_ARRAY_LEN(kn_ops_string);
