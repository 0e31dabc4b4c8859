/* ops_contrib.c - shape inference of the ONNX Runtime contrib ops that its
 * transformer optimizer writes (com.microsoft; SimplifiedLayerNormalization
 * also in the default domain, where ONNX Runtime registers it). kiln has no
 * kernels for them: the builder's contrib pass (pass_contrib.c) rewrites
 * each into ONNX ops and kiln's fused ops before anything else runs. */
#include <string.h>

#include "graph.h"
#include "rotary.h"

static bool real(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 ||
           t == KILN_DTYPE_DOUBLE;
}

/* Output 0 like input 0 (a float tensor); every other output too, except
 * the statistics of the norms (float, the last dim 1). */
static kiln_status infer_like_x(kn_infer *c, bool stats) {
    if (!kn_has_in(c, 0) || !real(c->in[0].dtype))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "input 0 must be a float tensor");
    for (int k = 0; k < c->n_out; k++) {
        kn_same_as(&c->out[k], &c->in[0]);
        if (stats && (k == 1 || k == 2) && c->out[k].rank > 0) {
            c->out[k].dtype = KILN_DTYPE_FLOAT;
            c->out[k].dims[c->out[k].rank - 1] = 1;
        }
    }
    return KILN_OK;
}

static kiln_status infer_act(kn_infer *c) { return infer_like_x(c, false); }

static kiln_status infer_norm(kn_infer *c) {
    int need = strstr(c->node->op_type, "Skip") ? 3 : 2;
    for (int i = 0; i < need; i++)
        if (!kn_has_in(c, i))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "input %d is required", i);
    return infer_like_x(c, true);
}

const kn_op_schema kn_ops_contrib[] = {
    {"Gelu", KN_MS_DOMAIN, infer_act, 0},
    {"FastGelu", KN_MS_DOMAIN, infer_act, 0},
    {"BiasGelu", KN_MS_DOMAIN, infer_act, 0},
    {"QuickGelu", KN_MS_DOMAIN, infer_act, 0},
    {"SkipLayerNormalization", KN_MS_DOMAIN, infer_norm, 0},
    {"SkipSimplifiedLayerNormalization", KN_MS_DOMAIN, infer_norm, 0},
    {"SimplifiedLayerNormalization", KN_MS_DOMAIN, infer_norm, 0},
    {"SimplifiedLayerNormalization", "", infer_norm, 0},
};
const size_t kn_ops_contrib_count = KN_ARRAY_LEN(kn_ops_contrib);
