/* pass_rotary.c - rotary position embeddings spelled out become one
 * RotaryEmbedding (ONNX opset 23; half-split form, and interleaved below):
 *
 *   Y = X * C + rotate_half(X) * S,  rotate_half(X) = Concat(-X2, X1, last axis)
 *
 * X [B, H, Sq, D] (heads first, as transformers applies it), X1 / X2 its
 * first and second halves along the last axis, taken by two Slices or one
 * Split; the negation a Neg or a Mul by -1; either operand order of every
 * Add and Mul. C and S broadcast to X as [B or 1, 1, Sq, D]. The op reads
 * one angle per pair, so the pass proves what makes the two equal: each
 * of C, S has equal halves along the last axis, followed back through
 * elementwise ops (Cast, Cos, Sin, a Mul/Div/Add/Sub by a scalar
 * constant) and Unsqueezes not of the last axis to Concat(F, F, last axis)
 * of one tensor F (transformers' emb = cat(freqs, freqs)), or to a
 * constant whose halves are equal. The caches given to the op are C and S
 * without the head axis, [B or 1, Sq, D]: the kernel reads their first
 * D / 2 values per row (cache stride D). Any intermediate also read
 * elsewhere keeps its producer (dead code removes what no one reads).
 *
 * The interleaved form (GPT-J's rotate_every_two, pairs (x0, x1), (x2, x3))
 * is the same sum with rotate_every_two(X) = Reshape(Concat(Unsqueeze(-X[...,
 * 1::2], -1), Unsqueeze(X[..., ::2], -1), last axis)) to X's shape, the
 * Slices of step 2; C and S then repeat each angle twice (each proven made
 * by a Reshape of [..., D / 2, 2] from Concat(u, u) or an Expand / Tile of
 * u [..., 1]: repeat_interleave, or a constant with equal pairs). The op
 * gets interleaved = 1 and caches of one angle per pair, every second value
 * of C's and S's rows (a Slice of step 2 on the small cache). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* The one int value of constant t (Slice bounds computed from static
 * shapes are constants once shape folding has run). */
static bool int_at(const kpass *p, int t, int64_t *v) {
    const kn_net *net = p->net;
    if (t < 0 || !kpass_is_const(net, t))
        return false;
    const kn_tdata *d = &net->tensors[t].value;
    if (kpass_numel(d) != 1 || (d->dtype != KILN_DTYPE_INT64 && d->dtype != KILN_DTYPE_INT32))
        return false;
    *v = kpass_value_int(d, 0);
    return true;
}

/* Live producer of t (touched or not), or -1. */
static int prod(const kpass *p, int t) {
    if (t < 0)
        return -1;
    int i = p->net->tensors[t].producer;
    return i >= 0 && !p->net->nodes[i].dead ? i : -1;
}

static bool is_last_axis(int64_t ax, int rank) { return ax == -1 || (rank > 0 && ax == rank - 1); }

/* Slice node i of x along the last axis with step `want`, from lo up to hi
 * (hi clamped to D). */
static bool slice_step(const kpass *p, int i, int x, int64_t d, int64_t lo, int64_t hi,
                       int64_t want) {
    if (i < 0)
        return false;
    const kn_node *n = &p->net->nodes[i];
    if (!kpass_is(n, "Slice") || n->n_in < 3 || n->in[0] != x)
        return false;
    int64_t st, en, ax = -1, step = 1;
    if (!int_at(p, n->in[1], &st) || !int_at(p, n->in[2], &en))
        return false;
    if (n->n_in > 3 && n->in[3] >= 0 && !int_at(p, n->in[3], &ax))
        return false;
    if (n->n_in > 4 && n->in[4] >= 0 && !int_at(p, n->in[4], &step))
        return false;
    if (!is_last_axis(ax, 4) || step != want)
        return false;
    if (st < 0)
        st += d;
    if (en < 0)
        en += d;
    st = st < 0 ? 0 : st > d ? d : st;
    en = en < 0 ? 0 : en > d ? d : en;
    return st == lo && en == hi;
}

/* Slice node i of x along the last axis, step 1, covering [lo, hi) of D. */
static bool slice_of(const kpass *p, int i, int x, int64_t d, int64_t lo, int64_t hi) {
    return slice_step(p, i, x, d, lo, hi, 1);
}

/* Tensor t is half `which` (0 first, 1 second) of x's last axis (size d). */
static bool half_of(const kpass *p, int t, int x, int64_t d, int which) {
    int i = prod(p, t);
    if (i < 0)
        return false;
    const kn_node *n = &p->net->nodes[i];
    if (kpass_is(n, "Slice"))
        return slice_of(p, i, x, d, which ? d / 2 : 0, which ? d : d / 2);
    if (!kpass_is(n, "Split") || n->in[0] != x || n->n_out != 2 || n->out[which] != t ||
        !is_last_axis(kn_attr_int(n, "axis", 0), 4))
        return false;
    if (n->n_in > 1 && n->in[1] >= 0) {
        const kn_net *net = p->net;
        if (!kpass_is_const(net, n->in[1]))
            return false;
        const kn_tdata *s = &net->tensors[n->in[1]].value;
        return kpass_numel(s) == 2 && kpass_value_int(s, 0) == d / 2 && kpass_value_int(s, 1) == d / 2;
    }
    return true; /* two equal parts (num_outputs 2 or the output count) */
}

/* t = -u: Neg(u) or Mul(u, -1); *u gets u. */
static bool negation(const kpass *p, int t, int *u) {
    int i = prod(p, t);
    if (i < 0)
        return false;
    const kn_node *n = &p->net->nodes[i];
    if (kpass_is(n, "Neg") && n->n_in == 1) {
        *u = n->in[0];
        return true;
    }
    double v;
    if (kpass_is(n, "Mul") && n->n_in == 2)
        for (int s = 0; s < 2; s++)
            if (kpass_const_scalar(p->net, n->in[s], &v) && v == -1.0) {
                *u = n->in[1 - s];
                return true;
            }
    return false;
}

/* t = rotate_half(x) (half-split). */
static bool rotate_half(const kpass *p, int t, int x, int64_t d) {
    int i = prod(p, t);
    if (i < 0)
        return false;
    const kn_node *c = &p->net->nodes[i];
    if (!kpass_is(c, "Concat") || c->n_in != 2 || !is_last_axis(kn_attr_int(c, "axis", 0), 4))
        return false;
    int x2;
    return negation(p, c->in[0], &x2) && half_of(p, x2, x, d, 1) && half_of(p, c->in[1], x, d, 0);
}

/* t is u with a new last axis: Unsqueeze(u, [-1] or [rank]); u in *u. */
static bool unsqueeze_last(const kpass *p, int t, int *u) {
    int i = prod(p, t);
    if (i < 0)
        return false;
    const kn_node *n = &p->net->nodes[i];
    int64_t ax;
    int r = kpass_rank(p, t);
    if (!kpass_is(n, "Unsqueeze") || n->n_in != 2 || !int_at(p, n->in[1], &ax) ||
        !is_last_axis(ax, r))
        return false;
    *u = n->in[0];
    return true;
}

/* t = rotate_every_two(x) (interleaved pairs, GPT-J / NeoX-interleaved):
 * Reshape(Concat(Unsqueeze(-x[..., 1::2], -1), Unsqueeze(x[..., ::2], -1),
 * last axis)) to x's shape, i.e. (-x1, x0, -x3, x2, ...). */
static bool rotate_pairs(const kpass *p, int t, int x, int64_t d) {
    int i = prod(p, t);
    if (i < 0 || !kpass_is(&p->net->nodes[i], "Reshape") || !kpass_same_shape(p, t, x))
        return false;
    int c = prod(p, p->net->nodes[i].in[0]);
    if (c < 0)
        return false;
    const kn_node *cn = &p->net->nodes[c];
    if (!kpass_is(cn, "Concat") || cn->n_in != 2 || !is_last_axis(kn_attr_int(cn, "axis", 0), 5) ||
        kpass_rank(p, cn->out[0]) != 5)
        return false;
    int a, b, x2;
    if (!unsqueeze_last(p, cn->in[0], &a) || !unsqueeze_last(p, cn->in[1], &b) ||
        !negation(p, a, &x2))
        return false;
    return slice_step(p, prod(p, x2), x, d, 1, d, 2) && slice_step(p, prod(p, b), x, d, 0, d, 2);
}

/* Whether constant v (last dim d) has equal halves along its last axis. */
static bool const_halves(const kn_tdata *v, int64_t d) {
    if (v->rank < 1 || v->dims[v->rank - 1] != d || d % 2)
        return false;
    int64_t rows = kpass_numel(v) / d;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d / 2; j++)
            if (kpass_value_at(v, r * d + j) != kpass_value_at(v, r * d + d / 2 + j))
                return false;
    return true;
}

/* Whether constant v (last dim d) has equal pairs (v[2i] = v[2i + 1]). */
static bool const_pairs(const kn_tdata *v, int64_t d) {
    if (v->rank < 1 || v->dims[v->rank - 1] != d || d % 2)
        return false;
    for (int64_t k = 0; k + 1 < kpass_numel(v); k += 2)
        if (kpass_value_at(v, k) != kpass_value_at(v, k + 1))
            return false;
    return true;
}

/* Whether y = Reshape(z) repeats each element twice along the last axis:
 * z is [..., d / 2, 2] at every point, made by Concat(u, u, last axis) of
 * two [..., 1] (torch.stack((f, f), -1)), or Expand / Tile of [..., 1] to
 * 2 (repeat_interleave(f, 2, -1)); y keeps z's leading dims, last d. */
static bool repeated_pairs(const kpass *p, const kn_node *rs, int64_t d) {
    int z = rs->in[0], i = prod(p, z);
    if (i < 0)
        return false;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *zt = kpass_shape(p, k, z), *yt = kpass_shape(p, k, rs->out[0]);
        if (!zt || !yt || zt->rank != yt->rank + 1 || zt->dims[zt->rank - 1] != 2 ||
            zt->dims[zt->rank - 2] * 2 != d || yt->dims[yt->rank - 1] != d)
            return false;
        for (int a = 0; a + 1 < yt->rank; a++)
            if (zt->dims[a] != yt->dims[a])
                return false;
    }
    const kn_node *n = &p->net->nodes[i];
    int u = -1;
    if (kpass_is(n, "Concat") && n->n_in == 2 && n->in[0] == n->in[1] &&
        is_last_axis(kn_attr_int(n, "axis", 0), kpass_rank(p, z)))
        u = n->in[0];
    else if ((kpass_is(n, "Expand") || kpass_is(n, "Tile")) && n->n_in == 2)
        u = n->in[0];
    if (u < 0)
        return false;
    for (int k = 0; k < p->n_points; k++) { /* one value per pair before the repeat */
        const kn_tinfo *ut = kpass_shape(p, k, u);
        if (!ut || ut->rank < 1 || ut->dims[ut->rank - 1] != 1)
            return false;
    }
    if (kpass_is(n, "Tile")) { /* repeats 1 but the last, 2 */
        const kn_net *net = p->net;
        if (!kpass_is_const(net, n->in[1]))
            return false;
        const kn_tdata *r = &net->tensors[n->in[1]].value;
        int64_t nr = kpass_numel(r);
        for (int64_t k = 0; k < nr; k++)
            if (kpass_value_int(r, k) != (k == nr - 1 ? 2 : 1))
                return false;
    }
    return true;
}

/* Whether tensor t (last dim d) has equal halves (pairs false) or equal
 * pairs (pairs true) along its last axis, by how it is made. */
static bool equal_parts(const kpass *p, int t, int64_t d, bool pairs) {
    static const char *const unary[] = {"Cast", "Cos", "Sin", "Identity", "Neg", "Sqrt", "Exp"};
    const kn_net *net = p->net;
    for (int depth = 0; depth < 24 && t >= 0; depth++) {
        if (kpass_is_const(net, t))
            return pairs ? const_pairs(&net->tensors[t].value, d)
                         : const_halves(&net->tensors[t].value, d);
        int i = prod(p, t);
        if (i < 0)
            return false;
        const kn_node *n = &net->nodes[i];
        bool un = false;
        for (size_t k = 0; k < KN_ARRAY_LEN(unary); k++)
            un |= kpass_is(n, unary[k]);
        if (un && n->n_in >= 1) {
            t = n->in[0];
            continue;
        }
        if ((kpass_is(n, "Mul") || kpass_is(n, "Div") || kpass_is(n, "Add") || kpass_is(n, "Sub")) &&
            n->n_in == 2) {
            double v;
            if (kpass_const_scalar(net, n->in[1], &v))
                t = n->in[0];
            else if (kpass_const_scalar(net, n->in[0], &v))
                t = n->in[1];
            else
                return false;
            continue;
        }
        if (kpass_is(n, "Unsqueeze") && n->n_in == 2 && kpass_is_const(net, n->in[1])) {
            int r = kpass_rank(p, n->out[0]);
            const kn_tdata *ax = &net->tensors[n->in[1]].value;
            if (r < 1)
                return false;
            for (int64_t k = 0; k < kpass_numel(ax); k++) {
                int64_t a = kpass_value_int(ax, k);
                if (a == -1 || a == r - 1)
                    return false;
            }
            t = n->in[0];
            continue;
        }
        if (pairs)
            return kpass_is(n, "Reshape") && n->n_in == 2 && repeated_pairs(p, n, d);
        if (kpass_is(n, "Concat") && n->n_in == 2 && n->in[0] == n->in[1] && n->in[0] >= 0) {
            int r = kpass_rank(p, n->out[0]);
            return r > 0 && is_last_axis(kn_attr_int(n, "axis", 0), r);
        }
        return false;
    }
    return false;
}

/* The cache [Bc, Sq, D] behind C (broadcast to x [B, H, Sq, D] as
 * [Bc, 1, Sq, D], Bc 1 or B): C's input when C = Unsqueeze(., [1]), else
 * -2 (a Squeeze of C's axis 1 is needed), or -1 when C does not fit. */
static int cache_of(const kpass *p, int c, int x) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *ct = kpass_shape(p, k, c), *xt = kpass_shape(p, k, x);
        if (!ct || !xt || ct->rank != 4 || ct->dims[1] != 1 || ct->dims[2] != xt->dims[2] ||
            ct->dims[3] != xt->dims[3] || (ct->dims[0] != 1 && ct->dims[0] != xt->dims[0]) ||
            ct->dtype != xt->dtype)
            return -1;
    }
    int i = prod(p, c);
    if (i >= 0 && kpass_is(&p->net->nodes[i], "Unsqueeze") && p->net->nodes[i].n_in == 2 &&
        kpass_is_const(p->net, p->net->nodes[i].in[1])) {
        const kn_tdata *ax = &p->net->tensors[p->net->nodes[i].in[1]].value;
        if (kpass_numel(ax) == 1 && kpass_value_int(ax, 0) == 1 &&
            kpass_rank(p, p->net->nodes[i].in[0]) == 3)
            return p->net->nodes[i].in[0];
    }
    return -2;
}

/* Mul node i as x * other; *other gets the operand that is not x. */
static bool mul_with(const kpass *p, int i, int x, int *other) {
    if (i < 0)
        return false;
    const kn_node *n = &p->net->nodes[i];
    if (!kpass_is(n, "Mul") || n->n_in != 2)
        return false;
    if (n->in[0] == x)
        *other = n->in[1];
    else if (n->in[1] == x)
        *other = n->in[0];
    else
        return false;
    return true;
}

static bool any_add(const kn_node *n) { return kpass_is(n, "Add") || kpass_is(n, "RotaryEmbedding"); }

/* Whether node i is a Transpose by [0, 2, 1, 3]. */
static bool swap12(const kpass *p, int i) {
    if (i < 0 || !kpass_is(&p->net->nodes[i], "Transpose") || p->net->nodes[i].n_in != 1)
        return false;
    size_t np = 0;
    const int64_t *perm = kn_attr_ints(&p->net->nodes[i], "perm", &np);
    return perm && np == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3;
}

/* RotaryEmbedding node i on Transpose(T [B, S, H, D], [0, 2, 1, 3]) whose
 * output only a Transpose back reads (heads split, rotated heads-first,
 * then given to an attention that wants [B, S, H, D]): the op rotates T
 * viewed as [B, S, H * D] with num_heads H instead, and both Transposes go
 * (two copies fewer per Q and K). */
static kiln_status heads_last(kpass *p, int i, int *changed) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    if (n->domain[0] || n->n_in < 3 || (n->n_in > 3 && n->in[3] >= 0) || n->n_out != 1)
        return KILN_OK;
    int t1 = prod(p, n->in[0]);
    int t2 = kpass_sole_reader(p, n->out[0]);
    if (!swap12(p, t1) || !kpass_free(p, t1) || kpass_sole_reader(p, n->in[0]) != i || !swap12(p, t2))
        return KILN_OK;
    int x = net->nodes[t1].in[0], z = net->nodes[t2].out[0];
    int64_t h = -1, d = -1;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *xt = kpass_shape(p, k, x);
        if (!xt || xt->rank != 4 || (h >= 0 && (xt->dims[2] != h || xt->dims[3] != d)))
            return KILN_OK;
        h = xt->dims[2];
        d = xt->dims[3];
    }
    if (h < 1 || d < 1)
        return KILN_OK;
    const int64_t s3[3] = {0, 0, h * d}, s4[4] = {0, 0, h, d};
    int sh3, sh4, x3, r3, node;
    char nm[300];
    KN_TRY(kpass_add_i64(net, "rotary_rows", s3, 3, &sh3));
    KN_TRY(kpass_add_i64(net, "rotary_heads", s4, 4, &sh4));
    KN_TRY(kn_net_new_tensor(net, "rotary_in", &x3));
    KN_TRY(kn_net_new_tensor(net, "rotary_out", &r3));
    int in2[2] = {x, sh3};
    snprintf(nm, sizeof nm, "%s rows", net->nodes[i].name);
    KN_TRY(kn_net_add_node(net, nm, "Reshape", "", 14, 2, in2, 1, &x3, &node));
    kpass_touch(p, node);
    kpass_kill(p, t1);
    kpass_kill(p, t2);
    kn_node *y = &net->nodes[i];
    y->in[0] = x3;
    KN_TRY(kn_node_set_int(y, "num_heads", h));
    kpass_set_output(net, i, 0, r3);
    kpass_touch(p, i);
    int in2b[2] = {r3, sh4};
    snprintf(nm, sizeof nm, "%s heads", net->nodes[i].name);
    KN_TRY(kn_net_add_node(net, nm, "Reshape", "", 14, 2, in2b, 1, &z, &node));
    kpass_touch(p, node);
    kn_log(KILN_LOG_VERBOSE, "rotary: '%s' rotates [B, S, H * D] rows, its two Transposes gone",
           net->nodes[i].name);
    (*changed)++;
    return KILN_OK;
}

kiln_status kpass_rotary(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_shapes_if(p, any_add, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        if (kpass_free(p, i) && kpass_is(&net->nodes[i], "RotaryEmbedding")) {
            KN_TRY(heads_last(p, i, changed));
            continue;
        }
        const kn_node *a = &net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is(a, "Add") || a->n_in != 2 || a->n_out != 1 ||
            kpass_rank(p, a->out[0]) != 4)
            continue;
        int x = -1, c = -1, s = -1;
        bool pairs = false;
        for (int o = 0; o < 2 && x < 0; o++) {
            int mc = prod(p, a->in[o]), ms = prod(p, a->in[1 - o]);
            if (mc < 0 || ms < 0 || !kpass_is(&net->nodes[mc], "Mul") ||
                !kpass_is(&net->nodes[ms], "Mul") || net->nodes[ms].n_in != 2)
                continue;
            for (int q = 0; q < 2 && x < 0; q++) {
                int xc = net->nodes[mc].in[q];
                const kn_tinfo *xt = kpass_shape(p, 0, xc);
                if (!xt || xt->rank != 4 || !kpass_same_shape(p, xc, a->out[0]))
                    continue;
                int64_t d = xt->dims[3];
                int cc, ss = -1;
                if (d < 2 || d % 2 || !mul_with(p, mc, xc, &cc))
                    continue;
                const kn_node *m = &net->nodes[ms];
                bool pr = false;
                for (int r = 0; r < 2 && ss < 0; r++)
                    if (rotate_half(p, m->in[r], xc, d) || (pr = rotate_pairs(p, m->in[r], xc, d)))
                        ss = m->in[1 - r];
                if (ss < 0)
                    continue;
                if (!equal_parts(p, cc, d, pr) || !equal_parts(p, ss, d, pr)) {
                    /* the rotation is there; the caches are not provably the op's */
                    kn_log(KILN_LOG_VERBOSE,
                           "attention: rotary '%s' not fused: cos/sin are not proven to hold one "
                           "angle per pair (%s)",
                           a->name, pr ? "each repeated twice in a row" : "equal halves");
                    continue;
                }
                pairs = pr;
                x = xc;
                c = cc;
                s = ss;
            }
        }
        if (x < 0)
            continue;
        int cache[2] = {cache_of(p, c, x), cache_of(p, s, x)};
        if (cache[0] == -1 || cache[1] == -1 || !kpass_same_shape(p, c, s))
            continue;
        char nm[256];
        for (int j = 0; j < 2; j++) {
            if (cache[j] != -2)
                continue;
            int ax, y, in2[2] = {j ? s : c, -1};
            const int64_t one = 1;
            KN_TRY(kpass_add_i64(net, "rotary_axis", &one, 1, &ax));
            in2[1] = ax;
            KN_TRY(kn_net_new_tensor(net, j ? "rotary_sin" : "rotary_cos", &y));
            snprintf(nm, sizeof nm, "%s %s cache", net->nodes[i].name, j ? "sin" : "cos");
            KN_TRY(kn_net_add_node(net, nm, "Squeeze", "", 13, 2, in2, 1, &y, NULL));
            cache[j] = y;
        }
        for (int j = 0; j < 2 && pairs; j++) {
            /* one angle per pair: every second value of the cache's rows */
            const int64_t lo = 0, hi = INT64_MAX, ax = -1, st = 2;
            int t0, t1, t2, t3, y, in5[5] = {cache[j], -1, -1, -1, -1};
            KN_TRY(kpass_add_i64(net, "rotary_pair_lo", &lo, 1, &t0));
            KN_TRY(kpass_add_i64(net, "rotary_pair_hi", &hi, 1, &t1));
            KN_TRY(kpass_add_i64(net, "rotary_pair_axis", &ax, 1, &t2));
            KN_TRY(kpass_add_i64(net, "rotary_pair_step", &st, 1, &t3));
            in5[1] = t0, in5[2] = t1, in5[3] = t2, in5[4] = t3;
            KN_TRY(kn_net_new_tensor(net, j ? "rotary_sin_pairs" : "rotary_cos_pairs", &y));
            snprintf(nm, sizeof nm, "%s %s per pair", net->nodes[i].name, j ? "sin" : "cos");
            KN_TRY(kn_net_add_node(net, nm, "Slice", "", 13, 5, in5, 1, &y, NULL));
            cache[j] = y;
        }
        kn_node *y = &net->nodes[i];
        KN_TRY(kpass_retype(y, "RotaryEmbedding", "", 23));
        y->in[0] = x;
        y->in[1] = cache[0];
        KN_TRY(kpass_set_input(y, 2, cache[1]));
        KN_TRY(kn_node_set_int(y, "interleaved", pairs ? 1 : 0));
        kpass_touch(p, i);
        kn_log(KILN_LOG_VERBOSE, "rotary: '%s' is a RotaryEmbedding of '%s' (%s)", y->name,
               net->tensors[x].name, pairs ? "interleaved pairs" : "halves");
        (*changed)++;
    }
    return KILN_OK;
}
