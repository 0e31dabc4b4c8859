/* pass_pad.c - a zero Pad before a Conv (what ZeroPad2d and TensorFlow
 * exports produce) becomes the Conv's own padding, when it pads only the
 * spatial dimensions, by non-negative amounts, and the padded tensor has no
 * other reader. */
#include <string.h>

#include "passes.h"

/* The Pad node's pads (begin..., end...) for a rank-r input, when it is a
 * constant zero pad; false otherwise. */
static bool zero_pads(const kn_net *net, const kn_node *pad, int r, int64_t *pads) {
    if (strcmp(kn_attr_string(pad, "mode", "constant"), "constant") != 0)
        return false;
    if (pad->n_in > 3 && pad->in[3] >= 0)
        return false; /* axes (opset 18): rare enough to leave alone */
    double v = 0;
    if (pad->n_in > 2 && pad->in[2] >= 0 && !kpass_const_scalar(net, pad->in[2], &v))
        return false;
    if (pad->n_in < 2 || pad->in[1] < 0) {
        size_t n = 0;
        const int64_t *a = kn_attr_ints(pad, "pads", &n);
        if (!a || n != (size_t)(2 * r))
            return false;
        memcpy(pads, a, n * sizeof *a);
        v = kn_attr_float(pad, "value", 0.f);
    } else {
        if (!kpass_is_const(net, pad->in[1]))
            return false;
        const kn_tdata *p = &net->tensors[pad->in[1]].value;
        if (kpass_numel(p) != 2 * r)
            return false;
        for (int k = 0; k < 2 * r; k++)
            pads[k] = kpass_value_int(p, k);
    }
    return v == 0.0;
}

kiln_status kpass_pad_conv(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        kn_node *cv = &net->nodes[i];
        if (!kpass_is(cv, "Conv") || cv->n_in < 2 || !kpass_is_const(net, cv->in[1]) ||
            strcmp(kn_attr_string(cv, "auto_pad", "NOTSET"), "NOTSET") != 0)
            continue;
        int r = net->tensors[cv->in[1]].value.rank;
        int x = cv->in[0];
        int pi = kpass_producer(p, x);
        if (pi < 0 || !kpass_is(&net->nodes[pi], "Pad") || kpass_sole_reader(p, x) != i ||
            r < 3 || r > KILN_MAX_DIMS)
            continue;
        int64_t pads[2 * KILN_MAX_DIMS];
        if (!zero_pads(net, &net->nodes[pi], r, pads))
            continue;
        bool ok = pads[0] == 0 && pads[1] == 0 && pads[r] == 0 && pads[r + 1] == 0;
        for (int k = 0; k < 2 * r && ok; k++)
            ok = pads[k] >= 0;
        if (!ok)
            continue;
        int s = r - 2; /* spatial dims */
        int64_t cp[2 * KILN_MAX_DIMS] = {0};
        size_t n = 0;
        const int64_t *old = kn_attr_ints(cv, "pads", &n);
        if (old && n != (size_t)(2 * s))
            continue;
        for (int k = 0; k < s; k++) {
            cp[k] = (old ? old[k] : 0) + pads[2 + k];
            cp[s + k] = (old ? old[s + k] : 0) + pads[r + 2 + k];
        }
        const kn_node *pn = &net->nodes[pi];
        KN_TRY(kn_node_set_ints(cv, "pads", cp, (size_t)(2 * s)));
        cv->in[0] = pn->in[0];
        /* the fused name lists the layers in order: Pad first */
        size_t lp = strlen(pn->name), lc = strlen(cv->name);
        char *nm = kn_malloc(lp + lc + 4);
        if (!nm)
            return KILN_ERR_OUT_OF_MEMORY;
        memcpy(nm, pn->name, lp);
        memcpy(nm + lp, " + ", 3);
        memcpy(nm + lp + 3, cv->name, lc + 1);
        kn_free(cv->name);
        cv->name = nm;
        kn_log(KILN_LOG_VERBOSE, "pad-conv: folded Pad '%s' into Conv '%s'", pn->name, cv->name);
        kpass_kill(p, pi);
        kpass_touch(p, i);
        (*changed)++;
    }
    return KILN_OK;
}
