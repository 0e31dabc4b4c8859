/* pass_affine_conv.c - per-channel affine steps that no convolution before
 * them absorbed (pass_conv_bn.c folds those):
 *
 * - affine-conv: Mul / Div by a per-channel (or scalar) constant, or Add /
 *   Sub of one, whose output only a Conv reads (as its data input) folds
 *   into that Conv's weights (a scale: W'[m, c] = W[m, c] * s[c], right
 *   with any padding, since padding zeros scale to zeros) or bias (a shift:
 *   B'[m] = B[m] + sum_{c,k} W[m, c, k] * t[c], right only when the conv
 *   pads nothing, so a shift before a padded conv stays);
 * - bn-split: an inference BatchNormalization left standing becomes
 *   Mul(x, s) then Add(., t) with s, t per-channel constants shaped to
 *   broadcast over axis 1, so that the affine-conv fold can take it, or the
 *   elementwise chain joins it with the activation after it as one layer
 *   (DenseNet's BN -> Relu -> Conv) instead of a BN layer plus a chain. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* Whether constant v, broadcast against a rank-r tensor of c channels
 * (axis 1), varies at most along axis 1 and keeps the tensor's shape;
 * *per_channel says it holds c values. */
static bool channel_const(const kn_tdata *v, int r, int64_t c, bool *per_channel) {
    if (v->dtype != KILN_DTYPE_FLOAT || v->rank > r)
        return false;
    *per_channel = false;
    for (int i = 0; i < v->rank; i++) {
        int axis = r - v->rank + i;
        if (v->dims[i] == 1)
            continue;
        if (axis == 1 && v->dims[i] == c)
            *per_channel = true;
        else
            return false;
    }
    return true;
}

/* Whether the conv pads nothing (explicit zero pads, auto_pad NOTSET or
 * VALID). */
static bool conv_unpadded(const kn_node *cv) {
    const char *ap = kn_attr_string(cv, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0)
        return false;
    size_t n = 0;
    const int64_t *pads = kn_attr_ints(cv, "pads", &n);
    for (size_t i = 0; pads && i < n; i++)
        if (pads[i] != 0)
            return false;
    return true;
}

/* Fold x -> x * scale[c] (shift == NULL) or x -> x + shift[c] (scale ==
 * NULL) over the conv's C input channels into conv node ci. */
static kiln_status fold_into(kpass *p, int ci, const float *scale, const float *shift) {
    kn_net *net = p->net;
    kn_node *cv = &net->nodes[ci];
    int wt = cv->in[1];
    const kn_tdata *w0 = &net->tensors[wt].value;
    int64_t m = w0->dims[0], cg = w0->dims[1];
    int64_t group = kn_attr_int(cv, "group", 1);
    int64_t mg = m / group, per = kpass_numel(w0) / (m * cg);
    int bt = cv->n_in > 2 ? cv->in[2] : -1;
    char hint[256];
    if (scale) {
        kn_tdata w;
        KN_TRY(kn_tdata_copy(&w, w0));
        float *wf = w.data;
        for (int64_t o = 0; o < m; o++)
            for (int64_t c = 0; c < cg; c++) {
                float s = scale[(o / mg) * cg + c];
                for (int64_t k = 0; k < per; k++)
                    wf[(o * cg + c) * per + k] *= s;
            }
        int nw;
        snprintf(hint, sizeof hint, "%s_prescaled", net->tensors[wt].name);
        KN_TRY(kpass_add_const(net, hint, &w, &nw));
        net->nodes[ci].in[1] = nw;
        return KILN_OK;
    }
    kn_tdata bias;
    int64_t bd[1] = {m};
    KN_TRY(kn_tdata_alloc(&bias, KILN_DTYPE_FLOAT, 1, bd));
    float *bf = bias.data;
    for (int64_t o = 0; o < m; o++) {
        double acc = bt >= 0 ? kpass_value_at(&net->tensors[bt].value, o) : 0.0;
        for (int64_t c = 0; c < cg; c++) {
            double t = shift[(o / mg) * cg + c];
            for (int64_t k = 0; k < per; k++)
                acc += kpass_value_at(w0, (o * cg + c) * per + k) * t;
        }
        bf[o] = (float)acc;
    }
    int nb;
    snprintf(hint, sizeof hint, "%s_bias_preshifted", net->nodes[ci].name);
    KN_TRY(kpass_add_const(net, hint, &bias, &nb));
    return kpass_set_input(&net->nodes[ci], 2, nb);
}

kiln_status kpass_affine_conv(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        const kn_node *e = &net->nodes[i];
        bool mul = kpass_is(e, "Mul"), add = kpass_is(e, "Add");
        bool sub = kpass_is(e, "Sub"), div = kpass_is(e, "Div");
        if ((!mul && !add && !sub && !div) || e->n_in != 2 || e->n_out != 1 || e->out[0] < 0)
            continue;
        int ci = kpass_sole_reader(p, e->out[0]);
        if (ci < 0)
            continue;
        const kn_node *cv = &net->nodes[ci];
        if (!kpass_is(cv, "Conv") || cv->n_in < 2 || cv->in[0] != e->out[0] ||
            cv->in[1] == e->out[0])
            continue;
        int wt = cv->in[1];
        if (!kpass_is_const(net, wt) || net->tensors[wt].value.dtype != KILN_DTYPE_FLOAT)
            continue;
        const kn_tdata *w = &net->tensors[wt].value;
        int r = w->rank;
        int64_t group = kn_attr_int(cv, "group", 1);
        if (r < 3 || group < 1 || w->dims[0] % group != 0)
            continue;
        int64_t cin = w->dims[1] * group;
        int bt = cv->n_in > 2 ? cv->in[2] : -1;
        if (bt >= 0 && (!kpass_is_const(net, bt) || net->tensors[bt].value.dtype != KILN_DTYPE_FLOAT ||
                        kpass_numel(&net->tensors[bt].value) != w->dims[0]))
            continue;
        /* which operand is the data: a constant on the left only for the
         * commutative ops */
        int xi = kpass_is_const(net, e->in[1]) ? 0 : 1;
        if (xi == 1 && (sub || div))
            continue;
        int x = e->in[xi], c = e->in[1 - xi];
        if (x < 0 || c < 0 || x == c || !kpass_is_const(net, c) || kpass_is_const(net, x))
            continue;
        /* x is the Conv's data input: of W's rank and type by the op's
         * definition, so no shapes are needed here */
        const kn_tdata *v = &net->tensors[c].value;
        bool per;
        if (!channel_const(v, r, cin, &per))
            continue;
        bool scale = mul || div;
        if (!scale && !conv_unpadded(cv))
            continue; /* the zero border would get the shift's weight sums wrong */
        float *a = kn_malloc((size_t)cin * sizeof(float) + 1);
        if (!a)
            return KILN_ERR_OUT_OF_MEMORY;
        bool ok = true;
        for (int64_t k = 0; k < cin; k++) {
            double val = kpass_value_at(v, per ? k : 0);
            if (div && val == 0.0)
                ok = false;
            a[k] = (float)(div ? 1.0 / val : sub ? -val : val);
        }
        kiln_status st = ok ? fold_into(p, ci, scale ? a : NULL, scale ? NULL : a) : KILN_OK;
        kn_free(a);
        KN_TRY(st);
        if (!ok)
            continue;
        e = &net->nodes[i];
        kn_node *cvw = &net->nodes[ci];
        kn_log(KILN_LOG_VERBOSE, "affine-conv: folded %s '%s' into the Conv '%s' after it",
               e->op_type, e->name, cvw->name);
        KN_TRY(kpass_join_name(cvw, e->name));
        cvw = &net->nodes[ci];
        cvw->in[0] = net->nodes[i].in[xi];
        kpass_kill(p, i);
        kpass_touch(p, ci);
        (*changed)++;
    }
    return KILN_OK;
}

static bool is_bn(const kn_node *n) { return kpass_is(n, "BatchNormalization"); }

kiln_status kpass_bn_split(kpass *p, int *changed) {
    kn_net *net = p->net;
    int n0 = p->n_nodes;
    bool ready = false;
    KN_TRY(kpass_shapes_if(p, is_bn, &ready)); /* the input's rank shapes the constants */
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < n0; i++) {
        if (!kpass_free(p, i))
            continue;
        const kn_node *bn = &net->nodes[i];
        if (!kpass_is(bn, "BatchNormalization") || bn->n_in < 5 || bn->n_out < 1 ||
            bn->out[0] < 0 || bn->in[0] < 0 || kn_attr_int(bn, "training_mode", 0) != 0)
            continue;
        bool extra = false;
        for (int j = 1; j < bn->n_out; j++)
            if (bn->out[j] >= 0 && bn->out[j] < p->n_tensors &&
                (p->uses[bn->out[j]] > 0 || p->is_output[bn->out[j]]))
                extra = true;
        if (extra)
            continue;
        int x = bn->in[0];
        int r = kpass_rank(p, x);
        if (r < 2 || kpass_dtype(p, x) != KILN_DTYPE_FLOAT)
            continue;
        const kn_tdata *prm[4];
        int64_t m = -1;
        bool ok = true;
        for (int j = 0; j < 4; j++) {
            int t = bn->in[j + 1];
            if (t < 0 || !kpass_is_const(net, t) ||
                net->tensors[t].value.dtype != KILN_DTYPE_FLOAT) {
                ok = false;
                break;
            }
            prm[j] = &net->tensors[t].value;
            int64_t n = kpass_numel(prm[j]);
            if (m < 0)
                m = n;
            if (n != m || n < 1)
                ok = false;
        }
        if (!ok)
            continue;
        /* s and t shaped [C, 1, ...] (rank r - 1) to align with axis 1 */
        kn_tdata sv, tv;
        int64_t dims[KILN_MAX_DIMS];
        dims[0] = m;
        for (int d = 1; d < r - 1; d++)
            dims[d] = 1;
        KN_TRY(kn_tdata_alloc(&sv, KILN_DTYPE_FLOAT, r - 1, dims));
        kiln_status st = kn_tdata_alloc(&tv, KILN_DTYPE_FLOAT, r - 1, dims);
        if (st != KILN_OK) {
            kn_tdata_free(&sv);
            return st;
        }
        double eps = kn_attr_float(bn, "epsilon", 1e-5f);
        float *sf = sv.data, *tf = tv.data;
        for (int64_t c = 0; c < m; c++) {
            double s = kpass_value_at(prm[0], c) / sqrt(kpass_value_at(prm[3], c) + eps);
            sf[c] = (float)s;
            tf[c] = (float)(kpass_value_at(prm[1], c) - kpass_value_at(prm[2], c) * s);
        }
        char hint[600];
        int ts, tt, mid, node;
        snprintf(hint, sizeof hint, "%s_scale", bn->name);
        st = kpass_add_const(net, hint, &sv, &ts);
        if (st != KILN_OK) {
            kn_tdata_free(&tv);
            return st;
        }
        bn = &net->nodes[i];
        snprintf(hint, sizeof hint, "%s_shift", bn->name);
        KN_TRY(kpass_add_const(net, hint, &tv, &tt));
        bn = &net->nodes[i];
        snprintf(hint, sizeof hint, "%s_scaled", net->tensors[bn->out[0]].name);
        KN_TRY(kn_net_new_tensor(net, hint, &mid));
        bn = &net->nodes[i];
        int y = bn->out[0];
        char name[600];
        snprintf(name, sizeof name, "%s (shift)", bn->name);
        int in2[2] = {mid, tt};
        KN_TRY(kn_net_add_node(net, name, "Add", "", 14, 2, in2, 1, &y, &node));
        kn_node *b = &net->nodes[i];
        KN_TRY(kpass_retype(b, "Mul", "", 14));
        b = &net->nodes[i];
        for (int k = 0; k < b->n_attr; k++) /* epsilon, momentum: not Mul's */
            kn_attr_free(&b->attrs[k]);
        b->n_attr = 0;
        b->in[1] = ts;
        b->n_in = 2;
        b->n_out = 1;
        b->out[0] = mid;
        net->tensors[mid].producer = i;
        net->tensors[y].producer = node;
        kn_log(KILN_LOG_VERBOSE, "bn-split: BatchNormalization '%s' as a per-channel Mul + Add",
               net->nodes[i].name);
        kpass_touch(p, i);
        (*changed)++;
    }
    return KILN_OK;
}
