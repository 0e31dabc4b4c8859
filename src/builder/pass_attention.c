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
#include <stdio.h>
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

bool kpass_attn_scores(const kpass *p, int si, kpass_scores *s) {
    const kn_net *net = p->net;
    const kn_node *sm = &net->nodes[si];
    memset(s, 0, sizeof *s);
    s->softmax = si;
    s->add = s->scale_node = s->scores = s->mask = -1;
    s->scale = 1.f;
    if (!kpass_is(sm, "Softmax") || !softmax_last_axis(p, sm) || !kpass_free(p, si))
        return false;
    int t = sm->in[0], reader = si;
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
        s->mask = add->in[1 - side];
        int mr = kpass_rank(p, s->mask);
        if (mr < 0 || mr > 4)
            return false;
        s->add = pr;
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
        s->scale = (float)(div ? 1.0 / c : c);
        s->scale_node = pr;
        reader = pr;
        t = other;
        pr = kpass_producer(p, t);
    }
    if (pr < 0 || !kpass_is(&net->nodes[pr], "MatMul") || kpass_sole_reader(p, t) != reader)
        return false;
    s->scores = pr;
    return true;
}

kiln_status kpass_to_attention(kpass *p, int node, int scores, int softmax, const int *qkv, int mask,
                               float scale) {
    kn_net *net = p->net;
    kn_node *y = &net->nodes[node];
    char *name = kn_strdup(net->nodes[scores].name);
    if (!name)
        return KILN_ERR_OUT_OF_MEMORY;
    kn_free(y->name);
    y->name = name;
    KN_TRY(kpass_join_name(y, net->nodes[softmax].name));
    KN_TRY(kpass_retype(y, "Attention", KN_DOMAIN_KILN, 1));
    for (int a = 0; a < y->n_attr; a++) /* a Transpose's perm means nothing here */
        kn_attr_free(&y->attrs[a]);
    y->n_attr = 0;
    y->in[0] = qkv[0];
    KN_TRY(kpass_set_input(y, 1, qkv[1]));
    KN_TRY(kpass_set_input(y, 2, qkv[2]));
    if (mask >= 0)
        KN_TRY(kpass_set_input(y, 3, mask));
    KN_TRY(kn_node_set_float(y, "scale", scale));
    kpass_touch(p, node);
    return KILN_OK;
}

static bool match(const kpass *p, int si, attn_match *m) {
    static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
    const kn_net *net = p->net;
    const kn_node *sm = &net->nodes[si];
    memset(m, 0, sizeof *m);
    kpass_scores sc;
    if (!kpass_attn_scores(p, si, &sc))
        return false;
    m->mask = sc.mask;
    m->scale = sc.scale;
    m->nodes[m->n_nodes++] = si;
    if (sc.add >= 0)
        m->nodes[m->n_nodes++] = sc.add;
    if (sc.scale_node >= 0)
        m->nodes[m->n_nodes++] = sc.scale_node;
    /* S = Qt Kt */
    const kn_node *mm = &net->nodes[sc.scores];
    int mmi = sc.scores, tn;
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
        const int qkv[3] = {m.qr, m.kr, m.vr};
        KN_TRY(kpass_to_attention(p, m.out_node, m.scores, i, qkv, m.mask, m.scale));
        for (int k = 0; k < m.n_nodes; k++)
            kpass_kill(p, m.nodes[k]);
        kn_log(KILN_LOG_VERBOSE, "attention: '%s' is one layer (scale %g, %s mask)",
               net->nodes[m.out_node].name, (double)m.scale, m.mask >= 0 ? "with" : "no");
        (*changed)++;
    }
    return KILN_OK;
}

/* ---------------- one GEMM for Q, K and V ----------------
 * kiln::Attention(Reshape(Xq), Reshape(Xk), Reshape(Xv)) where each X is a
 * kiln::MatMul of the same input A by a constant [K, H*D] weight (with
 * constant biases on all three or none, no activation or residual), every
 * intermediate read once: the weights and biases are concatenated into one
 * [K, 3*H*D] product, whose output is viewed as [B, S, 3, H, D] by a Reshape
 * (shape [0, 0, 3, H, D]) and read by the attention layer in place. */

/* The kiln::MatMul behind Reshape r feeding the attention, or -1. */
static int projection(const kpass *p, int att, int t, int *reshape) {
    int r = kpass_producer(p, t);
    if (r < 0 || kpass_sole_reader(p, t) != att || !kpass_is(&p->net->nodes[r], "Reshape"))
        return -1;
    int x = p->net->nodes[r].in[0];
    int m = kpass_producer(p, x);
    if (m < 0 || kpass_sole_reader(p, x) != r || kpass_rank(p, x) != 3)
        return -1;
    const kn_node *mm = &p->net->nodes[m];
    if (!kpass_is_kiln(mm, "MatMul") || kn_attr_string(mm, "activation", "")[0] ||
        (mm->n_in > 3 && mm->in[3] >= 0) || mm->n_in < 2 || !kpass_is_const(p->net, mm->in[1]) ||
        p->net->tensors[mm->in[1]].value.rank != 2 ||
        p->net->tensors[mm->in[1]].value.dtype != KILN_DTYPE_FLOAT)
        return -1;
    *reshape = r;
    return m;
}

/* Concatenate constant float matrices [K, N_i] along columns (or vectors). */
static kiln_status concat_consts(kn_net *net, const int *t, int n, const char *hint, int *out) {
    const kn_tdata *v0 = &net->tensors[t[0]].value;
    int64_t rows = v0->rank == 2 ? v0->dims[0] : 1, cols = 0, ci[3];
    for (int i = 0; i < n; i++) {
        const kn_tdata *v = &net->tensors[t[i]].value;
        ci[i] = v->dims[v->rank - 1];
        cols += ci[i];
    }
    kn_tdata nv;
    int64_t dims[2] = {rows, cols};
    KN_TRY(kn_tdata_alloc(&nv, KILN_DTYPE_FLOAT, v0->rank, v0->rank == 2 ? dims : &dims[1]));
    float *d = nv.data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t c0 = 0;
        for (int i = 0; i < n; i++) {
            void *tmp = NULL;
            const float *src = kn_tdata_aligned(&net->tensors[t[i]].value, &tmp);
            if (!src) {
                kn_tdata_free(&nv);
                return KILN_ERR_OUT_OF_MEMORY;
            }
            memcpy(d + r * cols + c0, src + r * ci[i], sizeof(float) * (size_t)ci[i]);
            kn_aligned_free(tmp);
            c0 += ci[i];
        }
    }
    return kpass_add_const(net, hint, &nv, out);
}

/* Q, K, V = Gather(X, 0 / 1 / 2, axis 2) of one [B, S, 3, H, D] tensor X,
 * each read only by the attention node: X itself, or -1; gathers in g[3]. */
static int gathered_qkv(const kpass *p, int att, int *g) {
    const kn_net *net = p->net;
    const kn_node *a = &net->nodes[att];
    int x = -1;
    for (int j = 0; j < 3; j++) {
        int gi = kpass_producer(p, a->in[j]);
        int64_t idx;
        if (gi < 0 || kpass_sole_reader(p, a->in[j]) != att || !kpass_is(&net->nodes[gi], "Gather") ||
            net->nodes[gi].n_in != 2 || !kpass_const_index(net, net->nodes[gi].in[1], &idx) || idx != j)
            return -1;
        int64_t axis = kn_attr_int(&net->nodes[gi], "axis", 0);
        int src = net->nodes[gi].in[0];
        if ((axis != 2 && axis != -3) || kpass_rank(p, src) != 5 || (x >= 0 && src != x))
            return -1;
        x = src;
        g[j] = gi;
    }
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *t = kpass_shape(p, k, x);
        if (!t || t->dims[2] != 3)
            return -1;
    }
    return x;
}

/* Attention node att reads x viewed as [B, S, 3, H, D] (shape, 0s copying
 * x's dims) through a new Reshape writing `view`, packed; the three
 * reshapes that fed it (r[3]) go. */
static kiln_status read_packed(kpass *p, int att, int x, const int64_t *shape, int view,
                               const int *r) {
    kn_net *net = p->net;
    int sh, ri;
    KN_TRY(kpass_add_i64(net, "qkv_shape", shape, 5, &sh));
    int in2[2] = {x, sh};
    KN_TRY(kn_net_add_node(net, "qkv heads", "Reshape", "", 14, 2, in2, 1, &view, &ri));
    kn_node *an = &net->nodes[att];
    an->in[0] = view;
    an->in[1] = an->in[2] = -1;
    KN_TRY(kn_node_set_int(an, "qkv_packed", 1));
    for (int j = 0; j < 3; j++)
        kpass_kill(p, r[j]);
    kpass_touch(p, att);
    return KILN_OK;
}

/* Q, K, V = Reshape(Split(X, last axis, three equal parts) part j) to
 * [B, S, H, D], each read only by the attention node, X [B, S, 3*H*D]: X,
 * or -1; the Reshapes in r[3], the Split in *sp. */
static int split_qkv(const kpass *p, int att, int *r, int *sp) {
    const kn_net *net = p->net;
    const kn_node *a = &net->nodes[att];
    int s = -1;
    for (int j = 0; j < 3; j++) {
        int rj = kpass_producer(p, a->in[j]);
        if (rj < 0 || kpass_sole_reader(p, a->in[j]) != att || !kpass_is(&net->nodes[rj], "Reshape") ||
            !kpass_free(p, rj))
            return -1;
        int part = net->nodes[rj].in[0], sj = kpass_producer(p, part);
        if (sj < 0 || !kpass_is(&net->nodes[sj], "Split") || kpass_sole_reader(p, part) != rj ||
            (s >= 0 && sj != s) || net->nodes[sj].n_out != 3 || net->nodes[sj].out[j] != part ||
            !kpass_free(p, sj))
            return -1;
        s = sj;
        r[j] = rj;
    }
    const kn_node *sn = &net->nodes[s];
    int x = sn->in[0];
    int64_t ax = kn_attr_int(sn, "axis", 0);
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *xt = kpass_shape(p, k, x), *q = kpass_shape(p, k, a->in[0]);
        if (!xt || !q || xt->rank != 3 || q->rank != 4 || (ax != 2 && ax != -1) ||
            xt->dims[0] != q->dims[0] || xt->dims[1] != q->dims[1] ||
            xt->dims[2] != 3 * q->dims[2] * q->dims[3])
            return -1;
        for (int j = 0; j < 3; j++)
            if (!kpass_same_shape(p, a->in[j], a->in[0]))
                return -1;
    }
    *sp = s;
    return x;
}

kiln_status kpass_qkv(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        const kn_node *a = &net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is_kiln(a, "Attention") || kn_attr_int(a, "qkv_packed", 0) ||
            a->n_in < 3)
            continue;
        KN_TRY(kpass_need_shapes(p));
        if (p->shapes_state != 1)
            return KILN_OK;
        int gs[3];
        int x = gathered_qkv(p, i, gs);
        if (x >= 0 && kpass_free(p, gs[0]) && kpass_free(p, gs[1]) && kpass_free(p, gs[2])) {
            kn_node *an = &net->nodes[i];
            an->in[0] = x;
            an->in[1] = an->in[2] = -1;
            KN_TRY(kn_node_set_int(an, "qkv_packed", 1));
            for (int j = 0; j < 3; j++)
                kpass_kill(p, gs[j]);
            kpass_touch(p, i);
            kn_log(KILN_LOG_VERBOSE, "qkv: '%s' reads the exporter's packed projection in place",
                   an->name);
            (*changed)++;
            continue;
        }
        int rs3[3], sp;
        x = split_qkv(p, i, rs3, &sp);
        if (x >= 0) {
            const kn_tinfo *q0 = kpass_shape(p, 0, a->in[0]);
            const int64_t shape[5] = {0, 0, 3, q0->dims[2], q0->dims[3]};
            int view;
            KN_TRY(kn_net_new_tensor(net, "qkv_heads", &view));
            KN_TRY(read_packed(p, i, x, shape, view, rs3));
            kpass_kill(p, sp);
            kn_log(KILN_LOG_VERBOSE, "qkv: '%s' reads the split projection in place",
                   net->nodes[i].name);
            (*changed)++;
            continue;
        }
        int mm[3], rs[3];
        bool ok = true;
        for (int j = 0; j < 3 && ok; j++)
            ok = (mm[j] = projection(p, i, a->in[j], &rs[j])) >= 0 && kpass_free(p, mm[j]) &&
                 kpass_free(p, rs[j]);
        if (!ok)
            continue;
        const kn_node *q = &net->nodes[mm[0]];
        KN_TRY(kpass_need_shapes(p));
        if (p->shapes_state != 1)
            return KILN_OK;
        /* H and D must be the same at every profile point */
        const kn_tinfo *q0 = kpass_shape(p, 0, a->in[0]);
        if (!q0 || q0->rank != 4)
            continue;
        int64_t H = q0->dims[2], D = q0->dims[3];
        for (int k = 1; k < p->n_points && ok; k++) {
            const kn_tinfo *qk = kpass_shape(p, k, a->in[0]);
            ok = qk && qk->rank == 4 && qk->dims[2] == H && qk->dims[3] == D;
        }
        for (int j = 1; j < 3 && ok; j++) {
            const kn_node *m = &net->nodes[mm[j]];
            bool bq = q->n_in > 2 && q->in[2] >= 0, bj = m->n_in > 2 && m->in[2] >= 0;
            ok = m->in[0] == q->in[0] && bq == bj && (!bj || kpass_is_const(net, m->in[2])) &&
                 kpass_same_shape(p, a->in[j], a->in[0]);
        }
        bool has_bias = q->n_in > 2 && q->in[2] >= 0;
        if (!ok || (has_bias && !kpass_is_const(net, q->in[2])))
            continue;
        for (int j = 0; j < 3 && ok; j++) {
            const kn_tdata *w = &net->tensors[net->nodes[mm[j]].in[1]].value;
            ok = w->dims[1] == H * D && w->dims[0] == net->tensors[q->in[1]].value.dims[0];
            if (ok && has_bias) {
                const kn_tdata *bv = &net->tensors[net->nodes[mm[j]].in[2]].value;
                ok = bv->dtype == KILN_DTYPE_FLOAT && kpass_numel(bv) == H * D &&
                     bv->dims[bv->rank - 1] == H * D;
            }
        }
        if (!ok)
            continue;
        int wt[3], bt[3], w, bias = -1;
        for (int j = 0; j < 3; j++) {
            wt[j] = net->nodes[mm[j]].in[1];
            bt[j] = has_bias ? net->nodes[mm[j]].in[2] : -1;
        }
        KN_TRY(concat_consts(net, wt, 3, "qkv_weight", &w));
        if (has_bias)
            KN_TRY(concat_consts(net, bt, 3, "qkv_bias", &bias));
        const int64_t shape[5] = {0, 0, 3, H, D};
        int packed, view;
        KN_TRY(kn_net_new_tensor(net, "qkv", &packed));
        KN_TRY(kn_net_new_tensor(net, "qkv_heads", &view));
        /* the Q projection becomes the packed one */
        kn_node *qn = &net->nodes[mm[0]];
        qn->in[1] = w;
        if (has_bias)
            qn->in[2] = bias;
        KN_TRY(kpass_join_name(qn, net->nodes[mm[1]].name));
        KN_TRY(kpass_join_name(&net->nodes[mm[0]], net->nodes[mm[2]].name));
        kpass_set_output(net, mm[0], 0, packed);
        KN_TRY(read_packed(p, i, packed, shape, view, rs));
        kpass_kill(p, mm[1]);
        kpass_kill(p, mm[2]);
        kpass_touch(p, mm[0]);
        kn_log(KILN_LOG_VERBOSE, "qkv: one GEMM for the projections of '%s'", net->nodes[i].name);
        (*changed)++;
    }
    return KILN_OK;
}

/* ---------------- packed QKV written by the exporter ----------------
 * ViT-style exports make Q, K and V from one [B, S, 3, H, D] projection:
 * Transpose(X, [2, 0, 3, 1, 4]) then Gather(., i, axis 0) for i = 0, 1, 2.
 * A Gather of one constant index from a Transpose is the Transpose of the
 * Gather on the matching axis of the input:
 *   Gather(Transpose(X, p), i, axis a) = Transpose(Gather(X, i, axis p[a]), p')
 * where p' is p without position a, renumbered. Sinking the Transposes this
 * way exposes the per-head transposes the attention pass matches; the
 * attention then reads X in place (kpass_qkv below). */

kiln_status kpass_gather_transpose(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        const kn_node *g = &net->nodes[i];
        int64_t idx;
        if (!kpass_free(p, i) || !kpass_is(g, "Gather") || g->n_in != 2 || g->n_out != 1 ||
            !kpass_const_index(net, g->in[1], &idx))
            continue;
        int ti = kpass_producer(p, g->in[0]);
        if (ti < 0 || !kpass_is(&net->nodes[ti], "Transpose") || net->nodes[ti].n_in != 1)
            continue;
        KN_TRY(kpass_need_shapes(p));
        size_t pc = 0;
        const int64_t *perm = kn_attr_ints(&net->nodes[ti], "perm", &pc);
        int r = kpass_rank(p, g->in[0]);
        if (!perm || r < 2 || (size_t)r != pc || r > KILN_MAX_DIMS)
            continue;
        int64_t a = kn_attr_int(g, "axis", 0);
        if (a < 0)
            a += r;
        if (a < 0 || a >= r)
            continue;
        int64_t src_axis = perm[a], np[KILN_MAX_DIMS];
        int k = 0;
        for (int j = 0; j < r; j++)
            if (j != a)
                np[k++] = perm[j] - (perm[j] > src_axis);
        int x = net->nodes[ti].in[0], gathered, out = g->out[0], gi, tn;
        char hint[512], name[512];
        snprintf(hint, sizeof hint, "%s_pre", net->tensors[out].name);
        KN_TRY(kn_net_new_tensor(net, hint, &gathered));
        int in2[2] = {x, net->nodes[i].in[1]};
        snprintf(name, sizeof name, "%s (before the transpose)", net->nodes[i].name);
        KN_TRY(kn_net_add_node(net, name, "Gather", "", 13, 2, in2, 1, &gathered, &gi));
        KN_TRY(kn_node_set_int(&net->nodes[gi], "axis", src_axis));
        snprintf(name, sizeof name, "%s (after the gather)", net->nodes[ti].name);
        KN_TRY(kn_net_add_node(net, name, "Transpose", "", 13, 1, &gathered, 1, &out, &tn));
        KN_TRY(kn_node_set_ints(&net->nodes[tn], "perm", np, (size_t)(r - 1)));
        kpass_kill(p, i); /* the old Transpose dies with its last reader (dead code) */
        (*changed)++;
    }
    return KILN_OK;
}
