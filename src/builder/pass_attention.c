/* pass_attention.c - multi-head attention as one layer.
 *
 * The pattern exporters write for scaled dot-product attention on
 * [B, S, H, D] projections (BERT, ViT, GPT-2 blocks):
 *
 *   Qt = Transpose(Qr, [0,2,1,3])   Kt = Transpose(Kr, [0,2,3,1])
 *   S  = MatMul(Qt, Kt)
 *   S  = S * c  (or S / c)          optional, a constant scalar
 *   S  = S + M                      optional, a mask broadcast to S
 *   P  = Softmax(S, last axis)
 *   O  = MatMul(P, Transpose(Vr, [0,2,1,3]))
 *   Y  = Transpose(O, [0,2,1,3])
 *
 * becomes Y = kiln::Attention(Qr, Kr, Vr, M) with scale = c (or 1/c): no
 * transposed copies, no [B, H, S, S] scores in memory on backends whose
 * kernel keeps them on chip. Every intermediate must have that one reader
 * and not be a graph output. */
#include <string.h>

#include "passes.h"

static bool perm_is(const kn_node *n, const int64_t *want) {
    size_t c = 0;
    const int64_t *perm = kn_attr_ints(n, "perm", &c);
    if (!perm || c != 4)
        return false;
    for (int i = 0; i < 4; i++)
        if (perm[i] != want[i])
            return false;
    return true;
}

/* The input of a Transpose with that perm producing t (t's sole reader
 * being `reader`), or -1; *node gets the Transpose. */
static int through_transpose(const kpass *p, int t, int reader, const int64_t *perm, int *node) {
    int pr = kpass_producer(p, t);
    if (pr < 0 || kpass_sole_reader(p, t) != reader)
        return -1;
    const kn_node *n = &p->net->nodes[pr];
    if (!kpass_is(n, "Transpose") || n->n_in != 1 || !perm_is(n, perm) || kpass_rank(p, n->in[0]) != 4)
        return -1;
    *node = pr;
    return n->in[0];
}

static bool softmax_last_axis(const kpass *p, const kn_node *sm) {
    if (sm->n_in != 1 || sm->n_out != 1 || kpass_rank(p, sm->in[0]) != 4)
        return false;
    int64_t axis = kn_attr_int(sm, "axis", sm->opset >= 13 ? -1 : 1);
    return axis == -1 || axis == 3;
}

typedef struct attn_match {
    int qr, kr, vr, mask;
    float scale;
    int nodes[8]; /* to kill: Qt, Kt, Vt, S, scale, mask add, Softmax, O */
    int n_nodes;
    int out_node; /* the final Transpose: becomes the attention layer */
    int scores;   /* S = Qt Kt: its name leads the fused layer's */
} attn_match;

static bool match(const kpass *p, int si, attn_match *m) {
    static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
    const kn_net *net = p->net;
    const kn_node *sm = &net->nodes[si];
    memset(m, 0, sizeof *m);
    m->mask = -1;
    m->scale = 1.f;
    if (!kpass_is(sm, "Softmax") || !softmax_last_axis(p, sm) || !kpass_free(p, si))
        return false;
    int t = sm->in[0], reader = si;
    m->nodes[m->n_nodes++] = si;
    /* S + M, right below the Softmax */
    int pr = kpass_producer(p, t);
    if (pr >= 0 && kpass_is(&net->nodes[pr], "Add") && kpass_sole_reader(p, t) == reader) {
        const kn_node *add = &net->nodes[pr];
        if (add->n_in != 2)
            return false;
        int side = -1;
        for (int j = 0; j < 2 && side < 0; j++) {
            int pj = kpass_producer(p, add->in[j]);
            if (pj >= 0 && (kpass_is(&net->nodes[pj], "MatMul") || kpass_is(&net->nodes[pj], "Mul") ||
                            kpass_is(&net->nodes[pj], "Div")))
                side = j;
        }
        if (side < 0 || !kpass_same_shape(p, add->out[0], add->in[side]))
            return false;
        m->mask = add->in[1 - side];
        int mr = kpass_rank(p, m->mask);
        if (mr < 0 || mr > 4)
            return false;
        m->nodes[m->n_nodes++] = pr;
        reader = pr;
        t = add->in[side];
        pr = kpass_producer(p, t);
    }
    /* S * c or S / c */
    if (pr >= 0 && (kpass_is(&net->nodes[pr], "Mul") || kpass_is(&net->nodes[pr], "Div")) &&
        kpass_sole_reader(p, t) == reader) {
        const kn_node *mul = &net->nodes[pr];
        bool div = kpass_is(mul, "Div");
        double c;
        int other = -1;
        if (mul->n_in == 2 && kpass_const_scalar(net, mul->in[1], &c))
            other = mul->in[0];
        else if (!div && mul->n_in == 2 && kpass_const_scalar(net, mul->in[0], &c))
            other = mul->in[1];
        if (other < 0 || c == 0.0)
            return false;
        m->scale = (float)(div ? 1.0 / c : c);
        m->nodes[m->n_nodes++] = pr;
        reader = pr;
        t = other;
        pr = kpass_producer(p, t);
    }
    /* S = Qt Kt */
    if (pr < 0 || !kpass_is(&net->nodes[pr], "MatMul") || kpass_sole_reader(p, t) != reader)
        return false;
    const kn_node *mm = &net->nodes[pr];
    int mmi = pr, tn;
    m->scores = mmi;
    m->nodes[m->n_nodes++] = mmi;
    if ((m->qr = through_transpose(p, mm->in[0], mmi, p0213, &tn)) < 0)
        return false;
    m->nodes[m->n_nodes++] = tn;
    if ((m->kr = through_transpose(p, mm->in[1], mmi, p0231, &tn)) < 0)
        return false;
    m->nodes[m->n_nodes++] = tn;
    /* O = P Vt, Y = Transpose(O) */
    int o = kpass_sole_reader(p, sm->out[0]);
    if (o < 0 || !kpass_is(&net->nodes[o], "MatMul") || net->nodes[o].in[0] != sm->out[0])
        return false;
    m->nodes[m->n_nodes++] = o;
    if ((m->vr = through_transpose(p, net->nodes[o].in[1], o, p0213, &tn)) < 0)
        return false;
    m->nodes[m->n_nodes++] = tn;
    int y = kpass_sole_reader(p, net->nodes[o].out[0]);
    if (y < 0 || !kpass_is(&net->nodes[y], "Transpose") || !perm_is(&net->nodes[y], p0213))
        return false;
    m->out_node = y;
    for (int k = 0; k < m->n_nodes; k++)
        if (!kpass_free(p, m->nodes[k]))
            return false;
    return kpass_free(p, y) && m->qr != m->kr;
}

kiln_status kpass_attention(kpass *p, int *changed) {
    kn_net *net = p->net;
    KN_TRY(kpass_need_shapes(p));
    if (p->shapes_state != 1)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        attn_match m;
        if (net->nodes[i].dead || !match(p, i, &m))
            continue;
        kn_node *y = &net->nodes[m.out_node];
        /* the layer is named after its first op, then the softmax */
        char *name = kn_strdup(net->nodes[m.scores].name);
        if (!name)
            return KILN_ERR_OUT_OF_MEMORY;
        kn_free(y->name);
        y->name = name;
        KN_TRY(kpass_join_name(y, net->nodes[i].name));
        KN_TRY(kpass_retype(y, "Attention", KN_DOMAIN_KILN, 1));
        for (int a = 0; a < y->n_attr; a++) /* the Transpose's perm means nothing here */
            if (strcmp(y->attrs[a].name, "perm") == 0) {
                kn_attr_free(&y->attrs[a]);
                memmove(&y->attrs[a], &y->attrs[a + 1], sizeof *y->attrs * (size_t)(y->n_attr - a - 1));
                y->n_attr--;
                break;
            }
        y->in[0] = m.qr;
        KN_TRY(kpass_set_input(y, 1, m.kr));
        KN_TRY(kpass_set_input(y, 2, m.vr));
        if (m.mask >= 0)
            KN_TRY(kpass_set_input(y, 3, m.mask));
        KN_TRY(kn_node_set_float(y, "scale", m.scale));
        for (int k = 0; k < m.n_nodes; k++)
            kpass_kill(p, m.nodes[k]);
        kpass_touch(p, m.out_node);
        kn_log(KILN_LOG_VERBOSE, "attention: '%s' is one layer (scale %g, %s mask)", y->name,
               (double)m.scale, m.mask >= 0 ? "with" : "no");
        (*changed)++;
    }
    return KILN_OK;
}
