/* pass_attention.c - the score side of attention and the rewrites every
 * attention fusion shares.
 *
 * The one attention matcher (pass_mha.c, kpass_attention) starts from a
 * Softmax and reads the dataflow around it; this file reads the score side
 * of it: Softmax(fill(S * c + M + M2)), where S is a MatMul's output, the
 * scale c a constant scalar Mul or Div (optional), M and M2 additive masks
 * or biases (optional), and fill a Where that replaces masked scores by a
 * large negative constant (masked_fill; optional), which becomes one more
 * additive mask. Some of the Adds may sit inside a view that splits the
 * scores' batch, [B, H, Sq, Sk] -> [B / G, G, H, Sq, Sk] and back (Swin's
 * shifted windows, B = images x G windows): a mask added there is one mask
 * per window, which kiln::Attention reads at batch b % G (mask_batch_mod).
 * It also holds the rewrite into kiln::Attention, the QKV
 * packing that runs on the fused layer, and the sinking of a Gather through
 * a Transpose that exposes packed heads. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* Steps from tensor t back to the score MatMul through Adds (either
 * side), Reshapes and scalar Mul / Div (the scale), or -1 when it does not
 * get there within `depth` steps: which side of an Add is the scores. */
static int score_steps(const kpass *p, int t, int depth) {
    int pr = kpass_producer(p, t);
    if (pr < 0 || depth < 0)
        return -1;
    const kn_node *n = &p->net->nodes[pr];
    if (kpass_is(n, "MatMul"))
        return 0;
    int best = -1;
    double c;
    if ((kpass_is(n, "Mul") || kpass_is(n, "Div")) && n->n_in == 2) {
        int other = kpass_const_scalar(p->net, n->in[1], &c)                        ? n->in[0]
                    : kpass_is(n, "Mul") && kpass_const_scalar(p->net, n->in[0], &c) ? n->in[1]
                                                                                     : -1;
        best = other >= 0 ? score_steps(p, other, depth - 1) : -1;
    } else if (kpass_is(n, "Reshape") && n->n_in >= 1) {
        best = score_steps(p, n->in[0], depth - 1);
    } else if (kpass_is(n, "Add") && n->n_in == 2) {
        int a = score_steps(p, n->in[0], depth - 1), b = score_steps(p, n->in[1], depth - 1);
        best = a < 0 || (b >= 0 && b < a) ? b : a;
    }
    return best < 0 ? -1 : best + 1;
}

/* Whether y [B / G, G, H, Sq, Sk] splits the batch of x [B, H, Sq, Sk]
 * (and nothing else) at every profile point. */
static bool batch_split(const kpass *p, int x, int y) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *a = kpass_shape(p, k, x), *b = kpass_shape(p, k, y);
        if (!a || !b || a->rank != 4 || b->rank != 5 || b->dims[0] < 1 || b->dims[1] < 1 ||
            b->dims[0] * b->dims[1] != a->dims[0])
            return false;
        for (int d = 1; d < 4; d++)
            if (b->dims[d + 1] != a->dims[d])
                return false;
    }
    return true;
}

/* Dim d of tensor t's shape at every profile point is 1 (or t has fewer
 * than d + 1 of the `rank` dims it is right-aligned to). */
static bool dim_one(const kpass *p, int t, int rank, int d) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *m = kpass_shape(p, k, t);
        int at = m ? d - (rank - m->rank) : -1;
        if (!m || (at >= 0 && m->dims[at] != 1))
            return false;
    }
    return true;
}

#define WHY(s)                                                                                     \
    do {                                                                                           \
        sc->why = (s);                                                                             \
        return false;                                                                              \
    } while (0)

bool kpass_attn_scores(const kpass *p, int si, kpass_scores *sc) {
    const kn_net *net = p->net;
    const kn_node *sm = &net->nodes[si];
    memset(sc, 0, sizeof *sc);
    sc->softmax = si;
    sc->add = sc->add2 = sc->scale_node = sc->scores = sc->mask = sc->mask2 = -1;
    sc->split = sc->merge = -1;
    sc->fill = sc->fill_cond = -1;
    sc->scale = 1.f;
    if (!kpass_is(sm, "Softmax") || sm->n_in != 1 || sm->n_out != 1)
        WHY("not a Softmax");
    if (!kpass_free(p, si))
        WHY("the Softmax was rewritten already");
    if (kpass_rank(p, sm->in[0]) != 4)
        WHY("the scores are not of rank 4 at every profile point");
    int64_t axis = kn_attr_int(sm, "axis", sm->opset >= 13 ? -1 : 1);
    if (axis != -1 && axis != 3)
        WHY("the Softmax is not over the last axis");
    int t = sm->in[0], reader = si;
    int pr = kpass_producer(p, t);
    /* Where(cond, S, c) or Where(cond, c, S): masked_fill on the scores */
    if (pr >= 0 && kpass_is(&net->nodes[pr], "Where") && net->nodes[pr].n_in == 3 &&
        kpass_sole_reader(p, t) == reader) {
        const kn_node *w = &net->nodes[pr];
        double c;
        int side = kpass_const_scalar(net, w->in[2], &c) ? 1
                   : kpass_const_scalar(net, w->in[1], &c) ? 2
                                                            : -1;
        if (side < 0 || !(c <= -1e4))
            WHY("a Where before the Softmax does not fill with a large negative constant");
        if (kpass_dtype(p, w->in[0]) != KILN_DTYPE_BOOL)
            WHY("the condition of the Where before the Softmax is not boolean");
        sc->fill = pr;
        sc->fill_cond = w->in[0];
        sc->fill_keep = side == 1; /* true: cond keeps the score */
        sc->fill_value = c;
        reader = pr;
        t = w->in[side];
        if (!kpass_same_shape(p, t, w->out[0]))
            WHY("the masked_fill Where broadcasts the scores");
        pr = kpass_producer(p, t);
    }
    /* S + M (+ M2), right below the Softmax: additive masks and biases,
     * maybe some of them added through a view that splits the batch into
     * [B / G, G] (Swin's shifted windows: the mask is per window, b % G) */
    bool inside = false;
    for (int step = 0; step < 6; step++) {
        if (pr < 0 || kpass_sole_reader(p, t) != reader)
            break;
        const kn_node *n = &net->nodes[pr];
        if (kpass_is(n, "Reshape") && n->n_in >= 1 && sc->split < 0) {
            int x = n->in[0], xr = kpass_rank(p, x), yr = kpass_rank(p, t);
            if (!inside && sc->merge < 0 && xr == 5 && yr == 4) {
                sc->merge = pr;
                inside = true;
            } else if (inside && xr == 4 && yr == 5) {
                if (!batch_split(p, x, t))
                    WHY("a rank-5 view of the scores does not split their batch into [B / G, G]");
                if (!kpass_same_shape(p, x, net->nodes[sc->merge].out[0]))
                    WHY("the rank-5 view of the scores is not reshaped back to their shape");
                sc->split = pr;
                inside = false;
            } else {
                break;
            }
            reader = pr;
            t = x;
            pr = kpass_producer(p, t);
            continue;
        }
        if (!kpass_is(n, "Add") || sc->add2 >= 0)
            break;
        if (n->n_in != 2)
            WHY("an Add of the scores does not have two inputs");
        int s0 = score_steps(p, n->in[0], 8), s1 = score_steps(p, n->in[1], 8);
        int side = s0 >= 0 && (s1 < 0 || s0 <= s1) ? 0 : s1 >= 0 ? 1 : -1;
        if (side < 0)
            WHY("no side of the Add before the Softmax comes from the score MatMul");
        if (!kpass_same_shape(p, n->out[0], n->in[side]))
            WHY("the mask broadcasts the scores to a larger shape");
        int mr = kpass_rank(p, n->in[1 - side]);
        if (mr < 0 || mr > (inside ? 5 : 4))
            WHY("the mask's rank is unknown or above the scores'");
        if (inside && mr == 5 && !dim_one(p, n->in[1 - side], 5, 0))
            WHY("a mask added through the batch-split view of the scores varies with B / G "
                "(it is no mask of window b % G)");
        if (sc->add < 0) {
            sc->add = pr;
            sc->mask = n->in[1 - side];
            sc->mask_split = inside;
        } else {
            sc->add2 = pr;
            sc->mask2 = n->in[1 - side];
            sc->mask2_split = inside;
        }
        reader = pr;
        t = n->in[side];
        pr = kpass_producer(p, t);
    }
    if (inside)
        WHY("the scores are viewed at rank 5 but not through a batch split of theirs");
    if (sc->split >= 0) {
        /* a per-window mask (G > 1) joins whole-batch terms only where
         * those broadcast over the batch */
        bool windowed = (sc->mask_split && !dim_one(p, sc->mask, 5, 1)) ||
                        (sc->mask2_split && !dim_one(p, sc->mask2, 5, 1));
        bool whole = (sc->mask >= 0 && !sc->mask_split && !dim_one(p, sc->mask, 4, 0)) ||
                     (sc->mask2 >= 0 && !sc->mask2_split && !dim_one(p, sc->mask2, 4, 0)) ||
                     (sc->fill >= 0 && !dim_one(p, sc->fill_cond, 4, 0));
        if (windowed && whole)
            WHY("a mask over the whole batch beside one per window of the batch-split view");
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
            WHY("the scores are scaled by something other than a constant scalar");
        sc->scale = (float)(div ? 1.0 / c : c);
        sc->scale_node = pr;
        reader = pr;
        t = other;
        pr = kpass_producer(p, t);
    }
    if (pr < 0 || !kpass_is(&net->nodes[pr], "MatMul"))
        WHY("the Softmax's input does not come from a MatMul (through scale, mask and bias)");
    if (kpass_sole_reader(p, t) != reader)
        WHY("the scores are read outside the attention");
    sc->scores = pr;
    return true;
}
#undef WHY

/* A scalar constant of a real type holding v (float, half, bfloat16 or
 * double), or an error for any other type. */
static kiln_status scalar_const(kn_net *net, const char *hint, kiln_dtype dt, double v, int *out) {
    if (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16 &&
        dt != KILN_DTYPE_DOUBLE)
        return KILN_ERR_UNSUPPORTED;
    kn_tdata z;
    KN_TRY(kn_tdata_alloc(&z, dt, 0, NULL));
    if (dt == KILN_DTYPE_FLOAT) {
        float f = (float)v;
        memcpy(z.data, &f, sizeof f);
    } else if (dt == KILN_DTYPE_DOUBLE) {
        memcpy(z.data, &v, sizeof v);
    } else {
        uint16_t h = dt == KILN_DTYPE_FLOAT16 ? kn_float_to_half((float)v) : kn_float_to_bf16((float)v);
        memcpy(z.data, &h, sizeof h);
    }
    return kpass_add_const(net, hint, &z, out);
}

/* A mask added through the batch-split view, as kiln::Attention reads it:
 * [1, G, H, Sq, Sk] loses its leading 1 (a rank-4 one already is
 * [G, H, Sq, Sk], right-aligned). */
static kiln_status window_mask(kpass *p, int m, const char *name, int *out) {
    kn_net *net = p->net;
    *out = m;
    if (kpass_rank(p, m) != 5)
        return KILN_OK;
    char nm[600];
    int ax, sq, node;
    KN_TRY(kpass_add_i64(net, "window_mask_axes", (const int64_t[]){0}, 1, &ax));
    KN_TRY(kn_net_new_tensor(net, "window_mask", &sq));
    int in2[2] = {m, ax};
    snprintf(nm, sizeof nm, "%s window mask", name);
    KN_TRY(kn_net_add_node(net, nm, "Squeeze", "", 13, 2, in2, 1, &sq, &node));
    *out = sq;
    return KILN_OK;
}

kiln_status kpass_scores_mask(kpass *p, const kpass_scores *sc, const char *name, int *mask) {
    kn_net *net = p->net;
    char nm[600];
    int m = sc->mask, m2 = sc->mask2, node;
    if (m >= 0 && sc->mask_split)
        KN_TRY(window_mask(p, m, name, &m));
    if (m2 >= 0 && sc->mask2_split)
        KN_TRY(window_mask(p, m2, name, &m2));
    if (m2 >= 0) {
        int sum, in2[2] = {m2, m};
        KN_TRY(kn_net_new_tensor(net, "attn_mask_sum", &sum));
        snprintf(nm, sizeof nm, "%s mask terms", name);
        KN_TRY(kn_net_add_node(net, nm, "Add", "", 14, 2, in2, 1, &sum, &node));
        m = sum;
    }
    if (sc->fill >= 0) {
        /* the fill as an additive mask: 0 where the score is kept, the
         * fill value (-inf stays -inf) where it is replaced */
        kiln_dtype dt = kpass_dtype(p, net->nodes[sc->scores].out[0]);
        int zt, ft, add;
        KN_TRY(scalar_const(net, "attn_keep", dt, 0.0, &zt));
        KN_TRY(scalar_const(net, "attn_fill", dt, sc->fill_value, &ft));
        KN_TRY(kn_net_new_tensor(net, "attn_fill_mask", &add));
        int in3[3] = {sc->fill_cond, sc->fill_keep ? zt : ft, sc->fill_keep ? ft : zt};
        snprintf(nm, sizeof nm, "%s fill as a mask", name);
        KN_TRY(kn_net_add_node(net, nm, "Where", "", 16, 3, in3, 1, &add, &node));
        if (m >= 0) {
            int sum, in2[2] = {m, add};
            KN_TRY(kn_net_new_tensor(net, "attn_mask_sum", &sum));
            snprintf(nm, sizeof nm, "%s mask and fill", name);
            KN_TRY(kn_net_add_node(net, nm, "Add", "", 14, 2, in2, 1, &sum, &node));
            m = sum;
        } else {
            m = add;
        }
    }
    *mask = m;
    return KILN_OK;
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

/* ---------------- the attention ops ----------------
 * ONNX Attention (opset 23) and com.microsoft MultiHeadAttention as
 * kiln::Attention, when they compute nothing more than it does:
 *   - ONNX: no QK output read (softcap is kiln::Attention's); Q, K, V [B, H, S, D] (each
 *     transposed to [B, S, H, D], the output back) or [B, S, H*D] (viewed
 *     with q_num_heads / kv_num_heads heads); a bool mask becomes
 *     Where(M, 0, -inf), a float one is added as it is. kv heads may
 *     divide q heads. past_key / past_value [B, Hkv, P, D]: K and V are
 *     Concat(past, new) on the sequence axis, which are the present
 *     outputs; is_causal (with kv_seq = q_seq, so that ONNX's j > i + P is
 *     kiln's j > i + Sk - Sq) is the causal attribute.
 *   - MultiHeadAttention: 3-D query, key and value, no packed bias or past,
 *     unidirectional 0; key_padding_mask [B, L] (0 masks a key, by
 *     mask_filter_value as ONNX Runtime does) and attention_bias are added.
 *   - com.microsoft Attention: its packed projection becomes a MatMul and a
 *     bias Add whose [B, S, 3, H, D] view a packed kiln::Attention reads;
 *     equal qkv_hidden_sizes, a raw [B, T] int32 mask_index (as above),
 *     attention_bias; no past, unidirectional or rotary.
 *   - GroupQueryAttention in its prompt form (no past cache, present
 *     unread): causal, with its seqlens_k as a per-batch key mask.
 * The default scale, 1/sqrt(head size), is set once shapes are known.
 * Anything else stays as it is (ONNX Attention has its own kernels). */

/* Whether output j of node n is absent or read by nothing. */
static bool unused_out(const kpass *p, const kn_node *n, int j) {
    if (j >= n->n_out || n->out[j] < 0)
        return true;
    int t = n->out[j];
    return !p->is_output[t] && p->rd_start[t + 1] == p->rd_start[t];
}

static bool has_in(const kn_node *n, int j) { return j < n->n_in && n->in[j] >= 0; }

/* Reshape t to shape (n values) or Transpose it by perm (shape NULL): a
 * new node named `name`, writing a fresh tensor or `to` when >= 0. */
static kiln_status view(kpass *p, int t, const int64_t *shape, int n, const int64_t *perm,
                        const char *name, int to, int *out) {
    kn_net *net = p->net;
    int r = to, node;
    if (r < 0)
        KN_TRY(kn_net_new_tensor(net, "attn_view", &r));
    if (shape) {
        int sh, in2[2] = {t, 0};
        KN_TRY(kpass_add_i64(net, "attn_shape", shape, n, &sh));
        in2[1] = sh;
        KN_TRY(kn_net_add_node(net, name, "Reshape", "", 14, 2, in2, 1, &r, &node));
    } else {
        KN_TRY(kn_net_add_node(net, name, "Transpose", "", 13, 1, &t, 1, &r, &node));
        KN_TRY(kn_node_set_ints(&net->nodes[node], "perm", perm, 4));
    }
    *out = r;
    return KILN_OK;
}

/* The additive form of a key mask: Where(cond, 0, neg) in type dt. */
static kiln_status bool_mask(kpass *p, int cond, kiln_dtype dt, double neg, const char *name,
                             int *out) {
    kn_net *net = p->net;
    int zt, ft, m, node;
    KN_TRY(scalar_const(net, "attn_keep", dt, 0.0, &zt));
    KN_TRY(scalar_const(net, "attn_masked", dt, neg, &ft));
    KN_TRY(kn_net_new_tensor(net, "attn_mask", &m));
    int in3[3] = {cond, zt, ft};
    KN_TRY(kn_net_add_node(net, name, "Where", "", 16, 3, in3, 1, &m, &node));
    *out = m;
    return KILN_OK;
}

/* A new kiln::Attention node reading q, k, v and mask (or -1), writing y. */
static kiln_status new_attention(kpass *p, const char *name, const int *qkv, int mask, int y,
                                 double scale, bool default_scale) {
    kn_net *net = p->net;
    int in4[4] = {qkv[0], qkv[1], qkv[2], mask}, node;
    KN_TRY(kn_net_add_node(net, name, "Attention", KN_DOMAIN_KILN, 1, mask >= 0 ? 4 : 3, in4, 1,
                           &y, &node));
    KN_TRY(kn_node_set_float(&net->nodes[node], "scale", (float)scale));
    if (default_scale) /* resolved once Q's head size is known (kpass_attn_ops) */
        KN_TRY(kn_node_set_int(&net->nodes[node], "scale_pending", 1));
    kpass_touch(p, node);
    return KILN_OK;
}

static const char *onnx_attention_why(const kpass *p, const kn_node *n) {
    if (n->n_in < 3 || !has_in(n, 0) || !has_in(n, 1) || !has_in(n, 2))
        return "Q, K or V is absent";
    if (has_in(n, 4) != has_in(n, 5))
        return "only one of past_key and past_value is given";
    for (int j = 6; j < n->n_in; j++)
        if (has_in(n, j))
            return "it has inputs beyond past_value (nonpad_kv_seqlen)";
    if (!unused_out(p, n, 3))
        return "its QK output is read";
    if (kn_attr_float(n, "softcap", 0.f) < 0.f)
        return "softcap is negative";
    int r = kpass_rank(p, n->in[0]);
    if (r != 3 && r != 4)
        return "Q's rank is not 3 or 4 at every profile point";
    for (int j = 1; j < 3; j++)
        if (kpass_rank(p, n->in[j]) != r)
            return "Q, K and V ranks differ";
    if (r == 3 && (kn_attr_int(n, "q_num_heads", 0) <= 0 || kn_attr_int(n, "kv_num_heads", 0) <= 0))
        return "3-D inputs without q_num_heads and kv_num_heads";
    bool past = has_in(n, 4);
    if (past && (kpass_rank(p, n->in[4]) != 4 || kpass_rank(p, n->in[5]) != 4))
        return "past_key / past_value are not 4-D at every profile point";
    /* is_causal masks key j of row i where j > i + past, kiln::Attention's
     * causal where j > i + (past + kv_seq - q_seq): equal when kv_seq = q_seq */
    if (kn_attr_int(n, "is_causal", 0))
        for (int k = 0; k < p->n_points; k++) {
            const kn_tinfo *q = kpass_shape(p, k, n->in[0]), *kt = kpass_shape(p, k, n->in[1]);
            if (!q || !kt || q->dims[r == 4 ? 2 : 1] != kt->dims[r == 4 ? 2 : 1])
                return "is_causal with a key sequence other than the query's";
        }
    if (has_in(n, 3)) {
        kiln_dtype mt = kpass_dtype(p, n->in[3]);
        int mr = kpass_rank(p, n->in[3]);
        if (mr < 1 || mr > 4)
            return "the mask's rank is unknown or above 4";
        if (mt != KILN_DTYPE_BOOL && mt != kpass_dtype(p, n->in[0]))
            return "the mask is neither bool nor of Q's type";
        /* the mask must cover every key (ONNX masks keys past a short one) */
        for (int k = 0; k < p->n_points; k++) {
            const kn_tinfo *m = kpass_shape(p, k, n->in[3]), *kt = kpass_shape(p, k, n->in[1]);
            const kn_tinfo *pk = past ? kpass_shape(p, k, n->in[4]) : NULL;
            if (!m || !kt || (past && !pk))
                return "the mask's or the keys' shape is unknown";
            int64_t sk = (r == 4 ? kt->dims[2] : kt->dims[1]) + (past ? pk->dims[2] : 0);
            if (m->dims[m->rank - 1] != sk && m->dims[m->rank - 1] != 1)
                return "the mask's last dim is not the key length (past included)";
        }
    }
    kiln_dtype qt = kpass_dtype(p, n->in[0]);
    if (qt != KILN_DTYPE_FLOAT && qt != KILN_DTYPE_FLOAT16 && qt != KILN_DTYPE_BFLOAT16)
        return "Q is not float, float16 or bfloat16";
    return NULL;
}

/* t [B, Hkv * G, S, D] = Reshape(Expand(Unsqueeze(k, [2]), [B, Hkv, G, S, D]))
 * at every profile point (transformers' repeat_kv for grouped-query
 * heads): k [B, Hkv, S, D], or -1. Query head h then reads k's head h / G,
 * which is what kiln::Attention does with Hkv heads. */
static int unrepeat_kv(const kpass *p, int t) {
    const kn_net *net = p->net;
    int r = kpass_producer(p, t);
    if (r < 0 || !kpass_is(&net->nodes[r], "Reshape"))
        return -1;
    int e = kpass_producer(p, net->nodes[r].in[0]);
    if (e < 0 || !kpass_is(&net->nodes[e], "Expand") || net->nodes[e].n_in != 2)
        return -1;
    int u = kpass_producer(p, net->nodes[e].in[0]);
    if (u < 0 || !kpass_is(&net->nodes[u], "Unsqueeze") || net->nodes[u].n_in != 2 ||
        !kpass_is_const(net, net->nodes[u].in[1]))
        return -1;
    const kn_tdata *ax = &net->tensors[net->nodes[u].in[1]].value;
    if (kpass_numel(ax) != 1 || kpass_value_int(ax, 0) != 2)
        return -1;
    int k = net->nodes[u].in[0];
    for (int q = 0; q < p->n_points; q++) {
        const kn_tinfo *kt = kpass_shape(p, q, k), *et = kpass_shape(p, q, net->nodes[e].out[0]);
        const kn_tinfo *tt = kpass_shape(p, q, t);
        if (!kt || !et || !tt || kt->rank != 4 || et->rank != 5 || tt->rank != 4)
            return -1;
        if (et->dims[0] != kt->dims[0] || et->dims[1] != kt->dims[1] || et->dims[3] != kt->dims[2] ||
            et->dims[4] != kt->dims[3] || tt->dims[0] != kt->dims[0] ||
            tt->dims[1] != kt->dims[1] * et->dims[2] || tt->dims[2] != kt->dims[2] ||
            tt->dims[3] != kt->dims[3])
            return -1;
    }
    return k;
}

static kiln_status map_onnx_attention(kpass *p, int i) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    char name[600];
    snprintf(name, sizeof name, "%s", n->name);
    int r = kpass_rank(p, n->in[0]);
    int src[4] = {n->in[0], n->in[1], n->in[2], has_in(n, 3) ? n->in[3] : -1}, y = n->out[0];
    int pkv[2] = {has_in(n, 4) ? n->in[4] : -1, has_in(n, 5) ? n->in[5] : -1};
    int pres[2] = {n->n_out > 1 ? n->out[1] : -1, n->n_out > 2 ? n->out[2] : -1};
    bool used[2] = {!unused_out(p, n, 1), !unused_out(p, n, 2)};
    bool causal = kn_attr_int(n, "is_causal", 0) != 0;
    float softcap = kn_attr_float(n, "softcap", 0.f);
    int64_t hq = kn_attr_int(n, "q_num_heads", 0), hkv = kn_attr_int(n, "kv_num_heads", 0);
    const kn_attr *sa = kn_attr_find(n, "scale");
    double scale = sa ? kn_attr_float(n, "scale", 1.f) : 0.0;
    kiln_dtype qt = kpass_dtype(p, src[0]);
    if (!sa) {
        const kn_tinfo *q0 = kpass_shape(p, 0, src[0]);
        int64_t d = r == 4 ? q0->dims[3] : q0->dims[2] / hq;
        scale = 1.0 / sqrt((double)(d > 0 ? d : 1));
    }
    /* 4-D K and V repeated for grouped heads, without a cache: the
     * attention reads the unrepeated heads (both, or neither) */
    if (r == 4 && pkv[0] < 0 && !used[0] && !used[1]) {
        int k0 = unrepeat_kv(p, src[1]), v0 = unrepeat_kv(p, src[2]);
        const kn_tinfo *kt = k0 >= 0 ? kpass_shape(p, 0, k0) : NULL;
        const kn_tinfo *vt = v0 >= 0 ? kpass_shape(p, 0, v0) : NULL;
        if (kt && vt && kt->dims[1] == vt->dims[1]) {
            src[1] = k0;
            src[2] = v0;
        }
    }
    kpass_kill(p, i);
    int qkv[3], mask = -1, yb;
    char nm[700];
    static const int64_t p0213[4] = {0, 2, 1, 3};
    for (int j = 0; j < 3; j++) {
        const char *what = j == 0 ? "Q" : j == 1 ? "K" : "V";
        /* K and V with a past cache or a present output: [B, Hkv, T, D],
         * the past first (the present outputs), then to [B, T, Hkv, D] */
        if (j > 0 && (pkv[j - 1] >= 0 || used[j - 1])) {
            int t = src[j];
            if (r == 3) { /* [B, S, Hkv * D] -> [B, Hkv, S, D] */
                const int64_t sh[4] = {0, 0, hkv, -1};
                int v4;
                snprintf(nm, sizeof nm, "%s %s heads", name, what);
                KN_TRY(view(p, t, sh, 4, NULL, nm, -1, &v4));
                snprintf(nm, sizeof nm, "%s %s heads first", name, what);
                KN_TRY(view(p, v4, NULL, 0, p0213, nm, -1, &t));
            }
            int present = used[j - 1] ? pres[j - 1] : -1;
            if (pkv[j - 1] >= 0) {
                int cat = present, node, in2[2] = {pkv[j - 1], t};
                if (cat < 0)
                    KN_TRY(kn_net_new_tensor(net, "attn_present", &cat));
                snprintf(nm, sizeof nm, "%s present %s", name, j == 1 ? "key" : "value");
                KN_TRY(kn_net_add_node(net, nm, "Concat", "", 13, 2, in2, 1, &cat, &node));
                KN_TRY(kn_node_set_int(&net->nodes[node], "axis", 2));
                t = cat;
            } else if (present >= 0) { /* the present output is the input itself */
                snprintf(nm, sizeof nm, "%s present %s", name, j == 1 ? "key" : "value");
                int node;
                KN_TRY(kn_net_add_node(net, nm, "Identity", "", 16, 1, &t, 1, &present, &node));
                t = present;
            }
            snprintf(nm, sizeof nm, "%s %s to [B, T, H, D]", name, what);
            KN_TRY(view(p, t, NULL, 0, p0213, nm, -1, &qkv[j]));
            continue;
        }
        snprintf(nm, sizeof nm, "%s %s to [B, S, H, D]", name, what);
        if (r == 4) {
            KN_TRY(view(p, src[j], NULL, 0, p0213, nm, -1, &qkv[j]));
        } else {
            const int64_t sh[4] = {0, 0, j == 0 ? hq : hkv, -1};
            KN_TRY(view(p, src[j], sh, 4, NULL, nm, -1, &qkv[j]));
        }
    }
    if (src[3] >= 0) {
        if (kpass_dtype(p, src[3]) == KILN_DTYPE_BOOL) {
            snprintf(nm, sizeof nm, "%s mask as added scores", name);
            KN_TRY(bool_mask(p, src[3], qt, -INFINITY, nm, &mask));
        } else {
            mask = src[3];
        }
    }
    KN_TRY(kn_net_new_tensor(net, "attn_bshd", &yb));
    KN_TRY(new_attention(p, name, qkv, mask, yb, scale, false));
    if (causal) /* the last node added is the attention */
        KN_TRY(kn_node_set_int(&net->nodes[net->n_nodes - 1], "causal", 1));
    if (softcap > 0.f)
        KN_TRY(kn_node_set_float(&net->nodes[net->n_nodes - 1], "softcap", softcap));
    snprintf(nm, sizeof nm, "%s output", name);
    if (r == 4) {
        KN_TRY(view(p, yb, NULL, 0, p0213, nm, y, &y));
    } else {
        const int64_t sh[3] = {0, 0, -1};
        KN_TRY(view(p, yb, sh, 3, NULL, nm, y, &y));
    }
    kn_log(KILN_LOG_VERBOSE, "attention: ONNX Attention '%s' is kiln::Attention (%d-D, scale %g%s%s%s)",
           name, r, scale, src[3] >= 0 ? ", with mask" : "", causal ? ", causal" : "",
           pkv[0] >= 0 ? ", past cache" : "");
    return KILN_OK;
}

static bool is_ms(const kn_node *n, const char *op) {
    return strcmp(n->op_type, op) == 0 && strcmp(n->domain, "com.microsoft") == 0;
}

static const char *mha_why(const kpass *p, const kn_node *n) {
    if (n->n_in < 3 || !has_in(n, 0) || !has_in(n, 1) || !has_in(n, 2))
        return "query, key or value is absent (packed forms are not mapped)";
    if (has_in(n, 3))
        return "it has a packed projection bias";
    for (int j = 6; j < n->n_in; j++)
        if (has_in(n, j))
            return "it has past key/value or cache inputs";
    for (int j = 1; j < n->n_out; j++)
        if (!unused_out(p, n, j))
            return "its present key/value output is read";
    if (kn_attr_int(n, "unidirectional", 0))
        return "unidirectional is set";
    if (kn_attr_int(n, "num_heads", 0) <= 0)
        return "num_heads is missing";
    return NULL;
}

static kiln_status map_ms_mha(kpass *p, int i) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    char name[600], nm[700];
    snprintf(name, sizeof name, "%s", n->name);
    int src[6], y = n->out[0];
    for (int j = 0; j < 6; j++)
        src[j] = has_in(n, j) ? n->in[j] : -1;
    int64_t h = kn_attr_int(n, "num_heads", 0);
    const kn_attr *sa = kn_attr_find(n, "scale");
    double scale = sa ? kn_attr_float(n, "scale", 1.f) : 1.0;
    double filter = kn_attr_float(n, "mask_filter_value", -10000.f);
    kpass_kill(p, i);
    int qkv[3], mask = -1, yb, node;
    for (int j = 0; j < 3; j++) {
        const int64_t sh[4] = {0, 0, h, -1};
        snprintf(nm, sizeof nm, "%s %s heads", name, j == 0 ? "query" : j == 1 ? "key" : "value");
        KN_TRY(view(p, src[j], sh, 4, NULL, nm, -1, &qkv[j]));
    }
    if (src[4] >= 0) { /* [B, L] of 1 (keep) and 0 (mask) -> [B, 1, 1, L] */
        int nz, zero, c, m4;
        int64_t z = 0;
        kn_tdata zv;
        KN_TRY(kn_tdata_alloc(&zv, KILN_DTYPE_INT32, 0, NULL));
        memcpy(zv.data, &(int32_t){0}, sizeof(int32_t));
        (void)z;
        KN_TRY(kpass_add_const(net, "attn_pad_zero", &zv, &zero));
        KN_TRY(kn_net_new_tensor(net, "attn_pad_zero_eq", &nz));
        int in2[2] = {src[4], zero};
        snprintf(nm, sizeof nm, "%s padding mask", name);
        KN_TRY(kn_net_add_node(net, nm, "Equal", "", 13, 2, in2, 1, &nz, &node));
        KN_TRY(kn_net_new_tensor(net, "attn_pad_keep", &c));
        snprintf(nm, sizeof nm, "%s keys kept", name);
        KN_TRY(kn_net_add_node(net, nm, "Not", "", 1, 1, &nz, 1, &c, &node));
        snprintf(nm, sizeof nm, "%s padding as added scores", name);
        KN_TRY(bool_mask(p, c, kpass_dtype(p, src[0]) != KILN_DTYPE_UNDEFINED ? kpass_dtype(p, src[0])
                                                                             : KILN_DTYPE_FLOAT,
                         filter, nm, &mask));
        const int64_t sh[4] = {0, 1, 1, -1};
        snprintf(nm, sizeof nm, "%s padding per key", name);
        KN_TRY(view(p, mask, sh, 4, NULL, nm, -1, &m4));
        mask = m4;
    }
    if (src[5] >= 0) {
        if (mask >= 0) {
            int sum, in2[2] = {src[5], mask};
            KN_TRY(kn_net_new_tensor(net, "attn_mask_sum", &sum));
            snprintf(nm, sizeof nm, "%s bias and padding", name);
            KN_TRY(kn_net_add_node(net, nm, "Add", "", 14, 2, in2, 1, &sum, &node));
            mask = sum;
        } else {
            mask = src[5];
        }
    }
    KN_TRY(kn_net_new_tensor(net, "attn_bshd", &yb));
    KN_TRY(new_attention(p, name, qkv, mask, yb, scale, !sa));
    const int64_t sh[3] = {0, 0, -1};
    snprintf(nm, sizeof nm, "%s output", name);
    KN_TRY(view(p, yb, sh, 3, NULL, nm, y, &y));
    kn_log(KILN_LOG_VERBOSE, "attention: com.microsoft MultiHeadAttention '%s' is kiln::Attention",
           name);
    return KILN_OK;
}

/* com.microsoft Attention: one [B, S, In] input, packed weights [In, 3E]
 * and bias [3E]; Q, K, V as slices of the projection. */
static const char *ms_attention_why(const kpass *p, const kn_node *n) {
    if (n->n_in < 3 || !has_in(n, 0) || !has_in(n, 1) || !has_in(n, 2))
        return "input, weights or bias is absent";
    if (has_in(n, 4) || has_in(n, 6) || has_in(n, 7))
        return "it has a past state or past_sequence_length input";
    for (int j = 1; j < n->n_out; j++)
        if (!unused_out(p, n, j))
            return "its present output is read";
    if (kn_attr_int(n, "unidirectional", 0))
        return "unidirectional is set";
    if (kn_attr_int(n, "do_rotary", 0))
        return "do_rotary is set";
    if (kn_attr_int(n, "num_heads", 0) <= 0)
        return "num_heads is missing";
    size_t nq = 0;
    const int64_t *qs = kn_attr_ints(n, "qkv_hidden_sizes", &nq);
    if (qs && (nq != 3 || qs[0] != qs[1] || qs[1] != qs[2]))
        return "qkv_hidden_sizes differ (Q, K, V of different widths)";
    if (!kpass_is_const(p->net, n->in[1]) || p->net->tensors[n->in[1]].value.rank != 2 ||
        p->net->tensors[n->in[1]].value.dims[1] % (3 * kn_attr_int(n, "num_heads", 1)) != 0)
        return "the weights are not a constant [In, 3 * num_heads * D] matrix";
    if (has_in(n, 3) && kpass_dtype(p, n->in[3]) != KILN_DTYPE_INT32)
        return "mask_index is not int32";
    return NULL;
}

static kiln_status map_ms_attention(kpass *p, int i) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    char name[600], nm[700];
    snprintf(name, sizeof name, "%s", n->name);
    int x = n->in[0], w = n->in[1], bias = n->in[2], mi = has_in(n, 3) ? n->in[3] : -1;
    int ab = has_in(n, 5) ? n->in[5] : -1, y = n->out[0], node;
    int64_t h = kn_attr_int(n, "num_heads", 0);
    int64_t e3 = net->tensors[w].value.dims[1], d = e3 / 3 / h;
    const kn_attr *sa = kn_attr_find(n, "scale");
    double scale = sa ? kn_attr_float(n, "scale", 1.f) : 1.0 / sqrt((double)d);
    double filter = kn_attr_float(n, "mask_filter_value", -10000.f);
    kpass_kill(p, i);
    int mm, pb, qkv[3] = {-1, -1, -1}, mask = -1, yb;
    KN_TRY(kn_net_new_tensor(net, "attn_qkv_mm", &mm));
    int in2[2] = {x, w};
    snprintf(nm, sizeof nm, "%s projection", name);
    KN_TRY(kn_net_add_node(net, nm, "MatMul", "", 13, 2, in2, 1, &mm, &node));
    KN_TRY(kn_net_new_tensor(net, "attn_qkv", &pb));
    int in2b[2] = {mm, bias};
    snprintf(nm, sizeof nm, "%s projection bias", name);
    KN_TRY(kn_net_add_node(net, nm, "Add", "", 14, 2, in2b, 1, &pb, &node));
    const int64_t sh5[5] = {0, 0, 3, h, d};
    snprintf(nm, sizeof nm, "%s heads", name);
    KN_TRY(view(p, pb, sh5, 5, NULL, nm, -1, &qkv[0]));
    if (mi >= 0) { /* [B, T] of 1 (keep) and 0 (mask) -> [B, 1, 1, T] */
        const kn_tinfo *m0 = kpass_shape(p, 0, mi);
        (void)m0;
        int zero, nz, keep, m4;
        kn_tdata zv;
        KN_TRY(kn_tdata_alloc(&zv, KILN_DTYPE_INT32, 0, NULL));
        KN_TRY(kpass_add_const(net, "attn_pad_zero", &zv, &zero));
        KN_TRY(kn_net_new_tensor(net, "attn_pad_zero_eq", &nz));
        int in2c[2] = {mi, zero};
        snprintf(nm, sizeof nm, "%s padding mask", name);
        KN_TRY(kn_net_add_node(net, nm, "Equal", "", 13, 2, in2c, 1, &nz, &node));
        KN_TRY(kn_net_new_tensor(net, "attn_pad_keep", &keep));
        snprintf(nm, sizeof nm, "%s keys kept", name);
        KN_TRY(kn_net_add_node(net, nm, "Not", "", 1, 1, &nz, 1, &keep, &node));
        snprintf(nm, sizeof nm, "%s padding as added scores", name);
        kiln_dtype dt = kpass_dtype(p, x) != KILN_DTYPE_UNDEFINED ? kpass_dtype(p, x) : KILN_DTYPE_FLOAT;
        KN_TRY(bool_mask(p, keep, dt, filter, nm, &mask));
        const int64_t sh[4] = {0, 1, 1, -1};
        snprintf(nm, sizeof nm, "%s padding per key", name);
        KN_TRY(view(p, mask, sh, 4, NULL, nm, -1, &m4));
        mask = m4;
    }
    if (ab >= 0) {
        if (mask >= 0) {
            int sum, in2d[2] = {ab, mask};
            KN_TRY(kn_net_new_tensor(net, "attn_mask_sum", &sum));
            snprintf(nm, sizeof nm, "%s bias and padding", name);
            KN_TRY(kn_net_add_node(net, nm, "Add", "", 14, 2, in2d, 1, &sum, &node));
            mask = sum;
        } else {
            mask = ab;
        }
    }
    KN_TRY(kn_net_new_tensor(net, "attn_bshd", &yb));
    int in4[4] = {qkv[0], -1, -1, mask}, an;
    KN_TRY(kn_net_add_node(net, name, "Attention", KN_DOMAIN_KILN, 1, mask >= 0 ? 4 : 1, in4, 1, &yb,
                           &an));
    KN_TRY(kn_node_set_float(&net->nodes[an], "scale", (float)scale));
    KN_TRY(kn_node_set_int(&net->nodes[an], "qkv_packed", 1));
    kpass_touch(p, an);
    const int64_t sh3[3] = {0, 0, -1};
    snprintf(nm, sizeof nm, "%s output", name);
    KN_TRY(view(p, yb, sh3, 3, NULL, nm, y, &y));
    kn_log(KILN_LOG_VERBOSE, "attention: com.microsoft Attention '%s' is a projection and a packed "
           "kiln::Attention (%lld heads of %lld)", name, (long long)h, (long long)d);
    return KILN_OK;
}

/* com.microsoft GroupQueryAttention in its prompt form: query [B, S, Hq*D],
 * key / value [B, S, Hkv*D] (or one packed [B, S, (Hq + 2 Hkv) * D] query),
 * seqlens_k [B] (int32, each batch's valid length - 1), no past cache, no
 * present output read, no rotary, local window, smooth softmax,
 * bias or head sink. ONNX Runtime then masks key j of row i where j > i
 * or j > seqlens_k[b]: kiln::Attention with causal = 1 and the mask
 * Where(j < seqlens_k[b] + 1, 0, -inf) [B, 1, 1, S]. */
static const char *ms_gqa_why(const kpass *p, const kn_node *n) {
    if (n->n_in < 7 || !has_in(n, 0) || !has_in(n, 5))
        return "query or seqlens_k is absent";
    if (has_in(n, 1) != has_in(n, 2))
        return "only one of key and value is given";
    if (has_in(n, 3) || has_in(n, 4))
        return "it reads a past cache (placed per batch by seqlens_k, which a Concat cannot follow)";
    for (int j = 7; j < n->n_in; j++)
        if (has_in(n, j))
            return "it has rotary caches, position ids, an attention bias or head sinks";
    for (int j = 1; j < n->n_out; j++)
        if (!unused_out(p, n, j))
            return "its present key/value (total_sequence_length long) is read";
    if (kn_attr_int(n, "do_rotary", 0))
        return "do_rotary is set";
    if (kn_attr_float(n, "softcap", 0.f) < 0.f)
        return "softcap is negative";
    if (kn_attr_int(n, "local_window_size", -1) >= 0)
        return "local_window_size is set";
    if (kn_attr_int(n, "smooth_softmax", 0))
        return "smooth_softmax is set";
    if (kn_attr_int(n, "qk_output", 0))
        return "qk_output is set";
    int64_t hq = kn_attr_int(n, "num_heads", 0), hkv = kn_attr_int(n, "kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0 || hq % hkv)
        return "num_heads is not a positive multiple of kv_num_heads";
    return NULL;
}

static kiln_status map_ms_gqa(kpass *p, int i) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    char name[600], nm[700];
    snprintf(name, sizeof name, "%s", n->name);
    bool packed = !has_in(n, 1);
    int q = n->in[0], k = packed ? -1 : n->in[1], v = packed ? -1 : n->in[2], sl = n->in[5];
    int y = n->out[0], node;
    int64_t hq = kn_attr_int(n, "num_heads", 0), hkv = kn_attr_int(n, "kv_num_heads", 0);
    const kn_attr *sa = kn_attr_find(n, "scale");
    double scale = sa && kn_attr_float(n, "scale", 0.f) != 0.f ? kn_attr_float(n, "scale", 1.f) : 1.0;
    bool default_scale = !(sa && kn_attr_float(n, "scale", 0.f) != 0.f);
    float softcap = kn_attr_float(n, "softcap", 0.f);
    kiln_dtype dt = kpass_dtype(p, q) != KILN_DTYPE_UNDEFINED ? kpass_dtype(p, q) : KILN_DTYPE_FLOAT;
    kpass_kill(p, i);
    int qkv[3];
    if (packed) { /* [B, S, Hq + 2 Hkv, D] split on the head axis */
        const int64_t sh[4] = {0, 0, hq + 2 * hkv, -1};
        int h4, sizes;
        snprintf(nm, sizeof nm, "%s packed heads", name);
        KN_TRY(view(p, q, sh, 4, NULL, nm, -1, &h4));
        const int64_t parts[3] = {hq, hkv, hkv};
        KN_TRY(kpass_add_i64(net, "gqa_heads", parts, 3, &sizes));
        for (int j = 0; j < 3; j++)
            KN_TRY(kn_net_new_tensor(net, j == 0 ? "gqa_q" : j == 1 ? "gqa_k" : "gqa_v", &qkv[j]));
        int in2[2] = {h4, sizes};
        snprintf(nm, sizeof nm, "%s Q, K, V", name);
        KN_TRY(kn_net_add_node(net, nm, "Split", "", 13, 2, in2, 3, qkv, &node));
        KN_TRY(kn_node_set_int(&net->nodes[node], "axis", 2));
    } else {
        const int src[3] = {q, k, v};
        for (int j = 0; j < 3; j++) {
            const int64_t sh[4] = {0, 0, j == 0 ? hq : hkv, -1};
            snprintf(nm, sizeof nm, "%s %s heads", name, j == 0 ? "query" : j == 1 ? "key" : "value");
            KN_TRY(view(p, src[j], sh, 4, NULL, nm, -1, &qkv[j]));
        }
    }
    /* keys past each batch's length: Range(0, S) < seqlens_k + 1 */
    int shp, one, zero, sk, pos, pos4, l64, len, len4, keep, mask;
    KN_TRY(kn_net_new_tensor(net, "gqa_shape", &shp));
    snprintf(nm, sizeof nm, "%s key count", name);
    KN_TRY(kn_net_add_node(net, nm, "Shape", "", 15, 1, &qkv[1], 1, &shp, &node));
    kn_tdata sv;
    KN_TRY(kn_tdata_alloc(&sv, KILN_DTYPE_INT64, 0, NULL));
    ((int64_t *)sv.data)[0] = 1;
    KN_TRY(kpass_add_const(net, "gqa_one", &sv, &one));
    KN_TRY(kn_tdata_alloc(&sv, KILN_DTYPE_INT64, 0, NULL));
    ((int64_t *)sv.data)[0] = 0;
    KN_TRY(kpass_add_const(net, "gqa_zero", &sv, &zero));
    KN_TRY(kn_net_new_tensor(net, "gqa_keys", &sk));
    int g2[2] = {shp, one};
    KN_TRY(kn_net_add_node(net, nm, "Gather", "", 13, 2, g2, 1, &sk, &node));
    KN_TRY(kn_net_new_tensor(net, "gqa_pos", &pos));
    int r3[3] = {zero, sk, one};
    snprintf(nm, sizeof nm, "%s key positions", name);
    KN_TRY(kn_net_add_node(net, nm, "Range", "", 11, 3, r3, 1, &pos, &node));
    const int64_t sh_pos[4] = {1, 1, 1, -1}, sh_len[4] = {-1, 1, 1, 1};
    KN_TRY(view(p, pos, sh_pos, 4, NULL, nm, -1, &pos4));
    KN_TRY(kn_net_new_tensor(net, "gqa_len64", &l64));
    snprintf(nm, sizeof nm, "%s lengths", name);
    KN_TRY(kn_net_add_node(net, nm, "Cast", "", 13, 1, &sl, 1, &l64, &node));
    KN_TRY(kn_node_set_int(&net->nodes[node], "to", KILN_DTYPE_INT64));
    KN_TRY(kn_net_new_tensor(net, "gqa_len", &len));
    int a2[2] = {l64, one};
    KN_TRY(kn_net_add_node(net, nm, "Add", "", 14, 2, a2, 1, &len, &node));
    KN_TRY(view(p, len, sh_len, 4, NULL, nm, -1, &len4));
    KN_TRY(kn_net_new_tensor(net, "gqa_keep", &keep));
    int l2[2] = {pos4, len4};
    snprintf(nm, sizeof nm, "%s keys kept", name);
    KN_TRY(kn_net_add_node(net, nm, "Less", "", 13, 2, l2, 1, &keep, &node));
    snprintf(nm, sizeof nm, "%s lengths as added scores", name);
    KN_TRY(bool_mask(p, keep, dt, -INFINITY, nm, &mask));
    int yb;
    KN_TRY(kn_net_new_tensor(net, "attn_bshd", &yb));
    KN_TRY(new_attention(p, name, qkv, mask, yb, scale, default_scale));
    KN_TRY(kn_node_set_int(&net->nodes[net->n_nodes - 1], "causal", 1));
    if (softcap > 0.f) /* before the mask, as ONNX Runtime applies it */
        KN_TRY(kn_node_set_float(&net->nodes[net->n_nodes - 1], "softcap", softcap));
    const int64_t sh3[3] = {0, 0, -1};
    snprintf(nm, sizeof nm, "%s output", name);
    KN_TRY(view(p, yb, sh3, 3, NULL, nm, y, &y));
    kn_log(KILN_LOG_VERBOSE, "attention: com.microsoft GroupQueryAttention '%s' is a causal "
           "kiln::Attention (%lld query heads, %lld key/value heads%s)", name, (long long)hq,
           (long long)hkv, packed ? ", packed" : "");
    return KILN_OK;
}

static bool is_attn_op(const kn_node *n) {
    return kpass_is(n, "Attention") ||
           (kpass_is_kiln(n, "Attention") && kn_attr_int(n, "scale_pending", 0));
}

kiln_status kpass_attn_ops(kpass *p, int *changed) {
    kn_net *net = p->net;
    /* com.microsoft ops first: kiln infers no shapes through them */
    int n0 = p->n_nodes;
    for (int i = 0; i < n0; i++) {
        const kn_node *n = &net->nodes[i];
        if (!kpass_free(p, i))
            continue;
        const char *why = NULL;
        if (is_ms(n, "MultiHeadAttention")) {
            if (!(why = mha_why(p, n))) {
                KN_TRY(map_ms_mha(p, i));
                (*changed)++;
            }
        } else if (is_ms(n, "Attention")) {
            if (!(why = ms_attention_why(p, n))) {
                KN_TRY(map_ms_attention(p, i));
                (*changed)++;
            }
        } else if (is_ms(n, "GroupQueryAttention")) {
            if (!(why = ms_gqa_why(p, n))) {
                KN_TRY(map_ms_gqa(p, i));
                (*changed)++;
            }
        }
        if (why)
            kn_log(KILN_LOG_VERBOSE, "attention: %s '%s' not mapped: %s", net->nodes[i].op_type,
                   net->nodes[i].name, why);
    }
    if (!kpass_any(p, is_attn_op))
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p));
    if (p->shapes_state != 1)
        return KILN_OK;
    for (int i = 0; i < n0; i++) {
        kn_node *n = &net->nodes[i];
        if (!kpass_free(p, i))
            continue;
        if (kpass_is_kiln(n, "Attention") && kn_attr_int(n, "scale_pending", 0)) {
            const kn_tinfo *q0 = kpass_shape(p, 0, n->in[0]);
            if (!q0 || q0->rank < 4 || q0->dims[q0->rank - 1] <= 0)
                continue;
            KN_TRY(kn_node_set_float(n, "scale", (float)(1.0 / sqrt((double)q0->dims[q0->rank - 1]))));
            KN_TRY(kn_node_set_int(n, "scale_pending", 0));
            kpass_touch(p, i);
            (*changed)++;
            continue;
        }
        if (!kpass_is(n, "Attention"))
            continue;
        const char *why = onnx_attention_why(p, n);
        if (why) {
            kn_log(KILN_LOG_VERBOSE, "attention: ONNX Attention '%s' not mapped: %s", n->name, why);
            continue;
        }
        KN_TRY(map_onnx_attention(p, i));
        (*changed)++;
    }
    return KILN_OK;
}
