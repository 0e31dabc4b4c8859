/* pass_conv_bn.c - folding a per-channel affine step into the convolution
 * before it: BatchNormalization (inference form), or Mul / Add / Sub / Div
 * by a constant that varies only along the channel axis. The conv gets new
 * weight and bias constants (the originals may be shared) and writes the
 * affine step's output. Only when the conv output has no other reader. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* The affine map y -> y * scale[m] + shift[m] over the M output channels. */
typedef struct affine {
    float *scale, *shift;
} affine;

static void affine_free(affine *a) {
    kn_free(a->scale);
    kn_free(a->shift);
    a->scale = a->shift = NULL;
}

static kiln_status affine_alloc(affine *a, int64_t m) {
    a->scale = kn_malloc((size_t)m * sizeof(float) + 1);
    a->shift = kn_malloc((size_t)m * sizeof(float) + 1);
    if (!a->scale || !a->shift) {
        affine_free(a);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < m; i++) {
        a->scale[i] = 1.f;
        a->shift[i] = 0.f;
    }
    return KILN_OK;
}

static bool float_const(const kn_net *net, int t, int64_t numel) {
    if (!kpass_is_const(net, t))
        return false;
    const kn_tdata *v = &net->tensors[t].value;
    return v->dtype == KILN_DTYPE_FLOAT && kpass_numel(v) == numel;
}

/* BatchNormalization(y, scale, bias, mean, var) in inference form. */
static kiln_status bn_affine(const kpass *p, const kn_node *bn, int64_t m, affine *a, bool *ok) {
    const kn_net *net = p->net;
    *ok = false;
    if (bn->n_in < 5 || kn_attr_int(bn, "training_mode", 0) != 0)
        return KILN_OK;
    for (int j = 1; j < 5; j++)
        if (!float_const(net, bn->in[j], m))
            return KILN_OK;
    for (int j = 1; j < bn->n_out; j++)
        if (bn->out[j] >= 0 && bn->out[j] < p->n_tensors && p->uses[bn->out[j]] > 0)
            return KILN_OK;
    float eps = kn_attr_float(bn, "epsilon", 1e-5f);
    KN_TRY(affine_alloc(a, m));
    const kn_tdata *g = &net->tensors[bn->in[1]].value, *b = &net->tensors[bn->in[2]].value,
                   *mu = &net->tensors[bn->in[3]].value, *var = &net->tensors[bn->in[4]].value;
    for (int64_t c = 0; c < m; c++) {
        double s = kpass_value_at(g, c) / sqrt(kpass_value_at(var, c) + (double)eps);
        a->scale[c] = (float)s;
        a->shift[c] = (float)(kpass_value_at(b, c) - kpass_value_at(mu, c) * s);
    }
    *ok = true;
    return KILN_OK;
}

/* Whether constant c broadcast against a rank-r conv output varies only
 * along the channel axis (dimension 1); *per_channel says it has M values. */
static bool channel_const(const kn_tdata *c, int r, int64_t m, bool *per_channel) {
    if (c->dtype != KILN_DTYPE_FLOAT || c->rank > r)
        return false;
    *per_channel = false;
    for (int i = 0; i < c->rank; i++) {
        int axis = r - c->rank + i;
        if (c->dims[i] == 1)
            continue;
        if (axis == 1 && c->dims[i] == m)
            *per_channel = true;
        else
            return false;
    }
    return true;
}

/* Mul / Add / Sub / Div of the conv output y by a channel constant. */
static kiln_status arith_affine(const kpass *p, const kn_node *e, int y, int r, int64_t m,
                                affine *a, bool *ok) {
    const kn_net *net = p->net;
    *ok = false;
    if (e->n_in != 2)
        return KILN_OK;
    int yi = e->in[0] == y ? 0 : 1;
    int c = e->in[1 - yi];
    if (e->in[yi] != y || c == y || !kpass_is_const(net, c))
        return KILN_OK;
    bool mul = kpass_is(e, "Mul"), add = kpass_is(e, "Add");
    bool sub = kpass_is(e, "Sub") && yi == 0, div = kpass_is(e, "Div") && yi == 0;
    if (!mul && !add && !sub && !div)
        return KILN_OK;
    const kn_tdata *v = &net->tensors[c].value;
    bool per;
    if (!channel_const(v, r, m, &per))
        return KILN_OK;
    if (div)
        for (int64_t k = 0; k < kpass_numel(v); k++)
            if (kpass_value_at(v, k) == 0.0)
                return KILN_OK; /* y / 0 is not a scaling of the weights */
    KN_TRY(affine_alloc(a, m));
    for (int64_t k = 0; k < m; k++) {
        float x = (float)kpass_value_at(v, per ? k : 0);
        if (mul)
            a->scale[k] = x;
        else if (div)
            a->scale[k] = 1.f / x;
        else
            a->shift[k] = sub ? -x : x;
    }
    *ok = true;
    return KILN_OK;
}

/* New W' = W * scale[m] and B' = B * scale[m] + shift[m] for conv node ci. */
static kiln_status apply(kpass *p, int ci, const affine *a, int64_t m) {
    kn_net *net = p->net;
    kn_node *cv = &net->nodes[ci];
    int wt = cv->in[1];
    kn_tdata w, bias;
    KN_TRY(kn_tdata_copy(&w, &net->tensors[wt].value));
    int64_t per = kpass_numel(&w) / m;
    float *wf = w.data;
    for (int64_t k = 0; k < m; k++)
        for (int64_t j = 0; j < per; j++)
            wf[k * per + j] *= a->scale[k];
    int64_t bd[1] = {m};
    kiln_status st = kn_tdata_alloc(&bias, KILN_DTYPE_FLOAT, 1, bd);
    if (st != KILN_OK) {
        kn_tdata_free(&w);
        return st;
    }
    int bt = cv->n_in > 2 ? cv->in[2] : -1;
    float *bf = bias.data;
    for (int64_t k = 0; k < m; k++) {
        float b0 = bt >= 0 ? (float)kpass_value_at(&net->tensors[bt].value, k) : 0.f;
        bf[k] = b0 * a->scale[k] + a->shift[k];
    }
    char hint[256];
    int nw, nb;
    snprintf(hint, sizeof hint, "%s_folded", net->tensors[wt].name);
    st = kpass_add_const(net, hint, &w, &nw);
    if (st != KILN_OK) {
        kn_tdata_free(&bias);
        return st;
    }
    snprintf(hint, sizeof hint, "%s_bias_folded", net->nodes[ci].name);
    KN_TRY(kpass_add_const(net, hint, &bias, &nb));
    cv = &net->nodes[ci]; /* the tensor table moved, the node table did not */
    cv->in[1] = nw;
    return kpass_set_input(cv, 2, nb);
}

kiln_status kpass_conv_bn(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        kn_node *cv = &net->nodes[i];
        if (!kpass_is(cv, "Conv") || cv->n_in < 2 || cv->n_out < 1 || cv->out[0] < 0)
            continue;
        int wt = cv->in[1];
        if (!kpass_is_const(net, wt) || net->tensors[wt].value.dtype != KILN_DTYPE_FLOAT)
            continue;
        const kn_tdata *w = &net->tensors[wt].value;
        int r = w->rank;
        int64_t m = r >= 3 ? w->dims[0] : 0;
        if (m <= 0)
            continue;
        if (cv->n_in > 2 && cv->in[2] >= 0 && !float_const(net, cv->in[2], m))
            continue;
        int y = cv->out[0];
        int ri = kpass_sole_reader(p, y);
        if (ri < 0)
            continue;
        const kn_node *e = &net->nodes[ri];
        affine a = {NULL, NULL};
        bool ok = false;
        if (kpass_is(e, "BatchNormalization") && e->in[0] == y)
            KN_TRY(bn_affine(p, e, m, &a, &ok));
        else
            KN_TRY(arith_affine(p, e, y, r, m, &a, &ok));
        if (!ok || e->n_out < 1 || e->out[0] < 0) {
            affine_free(&a);
            continue;
        }
        kiln_status st = apply(p, i, &a, m);
        affine_free(&a);
        KN_TRY(st);
        cv = &net->nodes[i];
        e = &net->nodes[ri];
        kn_log(KILN_LOG_VERBOSE, "conv-bn: folded %s '%s' into Conv '%s'", e->op_type, e->name,
               cv->name);
        KN_TRY(kpass_join_name(cv, e->name));
        kpass_set_output(net, i, 0, e->out[0]);
        kpass_kill(p, ri);
        kpass_touch(p, i);
        (*changed)++;
    }
    return KILN_OK;
}
