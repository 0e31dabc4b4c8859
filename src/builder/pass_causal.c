/* pass_causal.c - causal masks computed at run time.
 *
 * transformers (GPT-2, Llama, ... through masking_utils) builds the mask of
 * a decoder from index arithmetic on the shapes, combined with the padding
 * mask, and the attention matcher turns the boolean into an additive mask:
 *
 *   M = Where(Expand(keep_1 And keep_2 And ...), 0, -inf)
 *
 * where one keep_i is the causal predicate kv_idx <= q_idx, with q_idx and
 * kv_idx Range(0, S, 1) laid along the query and key axes (by Unsqueeze /
 * Reshape / Squeeze / Cast), spelled LessOrEqual(k, q), GreaterOrEqual(q, k)
 * or Not(Greater(k, q)) / Not(Less(q, k)), or Trilu of all ones [S, S]
 * (lower, k = 0; computed from the shape at run time); the others (the
 * padding mask, a constant all-true) anything. The dual form Where(masked_1 Or ..., -inf, 0)
 * with the causal term Greater(k, q) / Less(q, k) is taken as well.
 *
 * With a past cache the query positions are Range(0, Sq) + past (the
 * cache positions): an Add or Sub of one-element values whose value the
 * shapes decide (computed here per profile point from Shape / Gather /
 * Cast / + - *); the predicate counts when q_offset - k_offset = Sk - Sq
 * at every point (key j masked where j > i + Sk - Sq, the kernels' causal
 * alignment). Trilu and constant masks need Sq = Sk.
 *
 * A kiln::Attention reading such an M with Sq <= Sk at every profile point
 * gets causal = 1 (the kernels mask key j of query i where j > i + Sk - Sq,
 * by position) and, as its mask, Where(the other terms, 0, -inf) without
 * the Expand: the padding row per batch [B, 1, 1, Sk] instead of a
 * materialized [B, 1, Sq, Sk] (or no mask when nothing else is left). The
 * fill must be -inf, so that a row whose every key is masked stays one
 * (zeros, as before): the result is the same in every row, padded or not.
 * The lowest finite value of the mask's type (finfo.min) is taken as well
 * when no padding term is left: the causal term alone never masks a whole
 * row (key 0 is always kept), and a score plus that value underflows exp
 * to 0 as -inf does. With padding terms it is refused (a fully padded row
 * is uniform over all keys in the graph, over the causal ones after the
 * rewrite) and the verbose log, so `kiln inspect`, says why. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

#define CM_LEAVES 8
#define CM_CACHE 16
#define CM_POINTS (3 * 8)

static int prod(const kpass *p, int t) {
    if (t < 0)
        return -1;
    int i = p->net->tensors[t].producer;
    return i >= 0 && !p->net->nodes[i].dead ? i : -1;
}

static bool const_int(const kn_net *net, int t, int64_t *v) {
    if (t < 0 || !kpass_is_const(net, t))
        return false;
    const kn_tdata *d = &net->tensors[t].value;
    if (kpass_numel(d) != 1 || kiln_dtype_size(d->dtype) == 0)
        return false;
    double x = kpass_value_at(d, 0);
    if (x != floor(x))
        return false;
    *v = (int64_t)x;
    return true;
}

/* The one-element integer t's value at profile point k, computed from the
 * shapes there: constants, Shape (of a rank-1 tensor, or picked by
 * Gather / Slice's start), Gather of a shape by a constant index, Cast,
 * Identity, Squeeze / Unsqueeze / Reshape, and + - * of such values (what
 * exporters compute a past length with). The pass's inferred shapes keep
 * no host values, so the arithmetic is done here. */
static bool point_int_d(const kpass *p, int k, int t, int64_t *v, int depth) {
    const kn_net *net = p->net;
    if (const_int(net, t, v))
        return true;
    int i = prod(p, t);
    if (i < 0 || depth > 12)
        return false;
    const kn_node *n = &net->nodes[i];
    const kn_tinfo *ti = kpass_shape(p, k, t);
    if (!ti || kn_numel(ti->rank, ti->dims) != 1 || n->n_in < 1)
        return false;
    if (kpass_is(n, "Cast") || kpass_is(n, "Identity") || kpass_is(n, "Squeeze") ||
        kpass_is(n, "Unsqueeze") || kpass_is(n, "Reshape"))
        return point_int_d(p, k, n->in[0], v, depth + 1);
    if (kpass_is(n, "Add") || kpass_is(n, "Sub") || kpass_is(n, "Mul")) {
        int64_t x, y;
        if (n->n_in != 2 || !point_int_d(p, k, n->in[0], &x, depth + 1) ||
            !point_int_d(p, k, n->in[1], &y, depth + 1))
            return false;
        *v = kpass_is(n, "Add") ? x + y : kpass_is(n, "Sub") ? x - y : x * y;
        return true;
    }
    /* dim d of Shape(x) (its start attribute counted) */
    int sh = -1;
    int64_t d = 0;
    if (kpass_is(n, "Shape")) {
        sh = i;
    } else if (kpass_is(n, "Gather") && n->n_in == 2 && kn_attr_int(n, "axis", 0) == 0 &&
               const_int(net, n->in[1], &d)) {
        sh = prod(p, n->in[0]);
        if (sh >= 0 && !kpass_is(&net->nodes[sh], "Shape"))
            sh = -1;
    }
    if (sh < 0)
        return false;
    const kn_node *sn = &net->nodes[sh];
    const kn_tinfo *xi = sn->n_in >= 1 ? kpass_shape(p, k, sn->in[0]) : NULL;
    if (!xi)
        return false;
    int64_t start = kn_attr_int(sn, "start", 0);
    if (start < 0)
        start += xi->rank;
    if (d < 0)
        d += xi->rank - start;
    d += start;
    if (d < 0 || d >= xi->rank || xi->dims[d] < 0)
        return false;
    *v = xi->dims[d];
    return true;
}

static bool point_int(const kpass *p, int k, int t, int64_t *v) {
    return point_int_d(p, k, t, v, 0);
}

/* Whether t has one element at every profile point. */
static bool scalar_at_points(const kpass *p, int t) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *ti = kpass_shape(p, k, t);
        if (!ti || kn_numel(ti->rank, ti->dims) != 1)
            return false;
    }
    return true;
}

/* Tensor t is the positions off..off+L-1 laid along one axis of
 * [B, H, Sq, Sk] (right-aligned): that axis (2 with L = Sq, or 3 with L =
 * Sk), or -1. The positions are Range(0, L, 1) plus (Add) or minus (Sub)
 * scalars whose value the shapes decide (a past length, Shape(.)[2]);
 * off[k] gets their sum at profile point k. sq, sk hold the lengths per
 * point. */
static int pos_axis(const kpass *p, int t, const int64_t *sq, const int64_t *sk, int64_t *off) {
    const kn_net *net = p->net;
    int u = t;
    for (int k = 0; k < p->n_points; k++)
        off[k] = 0;
    for (int depth = 0; depth < 12; depth++) {
        int i = prod(p, u);
        if (i < 0)
            return -1;
        const kn_node *n = &net->nodes[i];
        if (kpass_is(n, "Range") && n->n_in == 3) {
            int64_t st, dl;
            if (!const_int(net, n->in[0], &st) || !const_int(net, n->in[2], &dl) || st != 0 || dl != 1)
                return -1;
            break;
        }
        if ((kpass_is(n, "Add") || kpass_is(n, "Sub")) && n->n_in == 2) {
            /* positions +- a scalar: the other operand has one element */
            int side = scalar_at_points(p, n->in[1]) ? 1 : 0;
            if (side == 0 && (kpass_is(n, "Sub") || !scalar_at_points(p, n->in[0])))
                return -1;
            for (int k = 0; k < p->n_points; k++) {
                int64_t v;
                if (!point_int(p, k, n->in[side], &v))
                    return -1;
                off[k] += kpass_is(n, "Sub") ? -v : v;
            }
            u = n->in[1 - side];
            continue;
        }
        if (!(kpass_is(n, "Unsqueeze") || kpass_is(n, "Reshape") || kpass_is(n, "Squeeze") ||
              kpass_is(n, "Cast") || kpass_is(n, "Identity") || kpass_is(n, "Flatten")) ||
            n->n_in < 1)
            return -1;
        u = n->in[0];
        if (depth == 11)
            return -1;
    }
    /* one axis of length L, every other of 1; the axis from a point with L > 1 */
    int axis = -1;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *ti = kpass_shape(p, k, t);
        if (!ti || ti->rank < 1 || ti->rank > 4)
            return -1;
        int found = -1;
        for (int d = 0; d < ti->rank; d++) {
            int a = d + 4 - ti->rank;
            if (ti->dims[d] == 1)
                continue;
            if (found >= 0 || (a != 2 && a != 3) || ti->dims[d] != (a == 2 ? sq[k] : sk[k]))
                return -1;
            found = a;
        }
        if (found >= 0) {
            if (axis >= 0 && found != axis)
                return -1;
            axis = found;
        }
    }
    /* a point where the axis has length 1 must have L = 1 there */
    for (int k = 0; k < p->n_points && axis >= 0; k++)
        if ((axis == 2 ? sq[k] : sk[k]) != 1) {
            const kn_tinfo *ti = kpass_shape(p, k, t);
            if (kn_numel(ti->rank, ti->dims) == 1)
                return -1;
        }
    return axis;
}

static bool const_all(const kn_net *net, int t, bool v);

/* Whether t is all ones (true) whatever the inputs: a constant, a
 * ConstantOfShape of 1, or an Expand of such a constant. */
static bool all_ones(const kpass *p, int t) {
    const kn_net *net = p->net;
    if (kpass_is_const(net, t))
        return const_all(net, t, true);
    int i = prod(p, t);
    if (i < 0)
        return false;
    const kn_node *n = &net->nodes[i];
    if (kpass_is(n, "Expand") && n->n_in == 2)
        return kpass_is_const(net, n->in[0]) && const_all(net, n->in[0], true);
    if (kpass_is(n, "ConstantOfShape")) {
        const kn_attr *v = kn_attr_find(n, "value");
        if (!v) /* default 0.0 */
            return false;
        return v->type == KN_ATTR_TENSOR && v->tensor && kpass_numel(v->tensor) == 1 &&
               kiln_dtype_size(v->tensor->dtype) > 0 && kpass_value_at(v->tensor, 0) != 0.0;
    }
    return false;
}

/* Trilu(ones [.., S, S]): lower with k = 0 keeps j <= i (+1), upper with k
 * = 1 keeps j > i (-1); the last two dims S, S at every point and the
 * leading ones 1. */
static int trilu_pred(const kpass *p, const kn_node *n, const int64_t *s) {
    int64_t k = 0;
    if (n->n_in > 1 && n->in[1] >= 0 && !const_int(p->net, n->in[1], &k))
        return 0;
    if (!all_ones(p, n->in[0]))
        return 0;
    for (int q = 0; q < p->n_points; q++) {
        const kn_tinfo *ti = kpass_shape(p, q, n->out[0]);
        if (!ti || ti->rank < 2 || ti->rank > 4 || ti->dims[ti->rank - 1] != s[q] ||
            ti->dims[ti->rank - 2] != s[q])
            return 0;
        for (int d = 0; d + 2 < ti->rank; d++)
            if (ti->dims[d] != 1)
                return 0;
    }
    bool upper = kn_attr_int(n, "upper", 1) != 0;
    if (!upper && k == 0)
        return 1;
    if (upper && k == 1)
        return -1;
    return 0;
}

/* A constant [1, .., 1, S, S] with S the sequence at every profile point
 * (a causal mask folded at a fixed sequence length): +1 when it is true
 * exactly on and below the diagonal, -1 exactly above it, else 0. */
static int const_tri(const kpass *p, int t, const int64_t *s) {
    const kn_tdata *v = &p->net->tensors[t].value;
    if (v->rank < 2 || kiln_dtype_size(v->dtype) == 0 || v->dtype == KILN_DTYPE_STRING)
        return 0;
    int64_t n = v->dims[v->rank - 1];
    if (n < 1 || n > 4096 || v->dims[v->rank - 2] != n)
        return 0;
    for (int d = 0; d + 2 < v->rank; d++)
        if (v->dims[d] != 1)
            return 0;
    for (int k = 0; k < p->n_points; k++)
        if (s[k] != n)
            return 0;
    bool lower = true, upper = true;
    for (int64_t i = 0; i < n && (lower || upper); i++)
        for (int64_t j = 0; j < n; j++) {
            bool on = kpass_value_at(v, i * n + j) != 0.0;
            lower = lower && on == (j <= i);
            upper = upper && on == (j > i);
        }
    return lower ? 1 : upper ? -1 : 0;
}

/* The attention's query and key lengths per profile point; square when
 * Sq = Sk at every point (a constant or Trilu mask is then aligned either
 * way). */
typedef struct cm_geom {
    const int64_t *sq, *sk;
    bool square;
} cm_geom;

/* +1: t is true exactly where key j <= query i + Sk - Sq (the causal
 * predicate aligned to the last key, which is j <= i when Sq = Sk); -1:
 * exactly where j > i + Sk - Sq; 0: neither known. Positions compared may
 * carry offsets (the query positions of a decoder step with a past cache
 * are Range(0, Sq) + past): q + oq against k + ok is aligned to the last
 * key when oq - ok = Sk - Sq at every point. */
static int causal_pred(const kpass *p, int t, const cm_geom *g) {
    const kn_net *net = p->net;
    for (int depth = 0; depth < 8; depth++) {
        if (t >= 0 && kpass_is_const(net, t))
            return g->square ? const_tri(p, t, g->sq) : 0;
        int i = prod(p, t);
        if (i < 0)
            return 0;
        const kn_node *n = &net->nodes[i];
        /* a Cast to bool: nonzero is true (a float tril of ones too) */
        if (kpass_is(n, "Cast") && n->n_in == 1 && kn_attr_int(n, "to", 0) == KILN_DTYPE_BOOL) {
            t = n->in[0];
            continue;
        }
        if (kpass_is(n, "Trilu") && n->n_in >= 1)
            return g->square ? trilu_pred(p, n, g->sq) : 0;
        if (kpass_is(n, "Not") && n->n_in == 1) {
            int r = causal_pred(p, n->in[0], g);
            return -r;
        }
        if (n->n_in != 2 || p->n_points > CM_POINTS)
            return 0;
        int64_t off0[CM_POINTS], off1[CM_POINTS];
        int a0 = pos_axis(p, n->in[0], g->sq, g->sk, off0);
        int a1 = pos_axis(p, n->in[1], g->sq, g->sk, off1);
        if (a0 < 0 || a1 < 0 || a0 == a1)
            return 0;
        bool kq = a0 == 3; /* (key, query) operand order */
        for (int k = 0; k < p->n_points; k++) {
            int64_t oq = kq ? off1[k] : off0[k], ok = kq ? off0[k] : off1[k];
            if (oq - ok != g->sk[k] - g->sq[k])
                return 0;
        }
        if (kpass_is(n, "LessOrEqual"))
            return kq ? 1 : 0;    /* j <= i */
        if (kpass_is(n, "GreaterOrEqual"))
            return kq ? 0 : 1;    /* i >= j */
        if (kpass_is(n, "Greater"))
            return kq ? -1 : 0;   /* j > i */
        if (kpass_is(n, "Less"))
            return kq ? 0 : -1;   /* i < j */
        return 0;
    }
    return 0;
}

/* Whether constant t is all `v` (booleans / numbers as truth). */
static bool const_all(const kn_net *net, int t, bool v) {
    if (!kpass_is_const(net, t))
        return false;
    const kn_tdata *d = &net->tensors[t].value;
    if (kiln_dtype_size(d->dtype) == 0)
        return false;
    for (int64_t k = 0; k < kpass_numel(d); k++)
        if ((kpass_value_at(d, k) != 0.0) != v)
            return false;
    return true;
}

/* Whether t is Expand(c) of a constant c all `v`. */
static bool expanded_const_all(const kpass *p, int t, bool v) {
    int i = prod(p, t);
    if (i < 0 || !kpass_is(&p->net->nodes[i], "Expand") || p->net->nodes[i].n_in != 2)
        return false;
    return const_all(p->net, p->net->nodes[i].in[0], v);
}

/* The leaves of the And (keep) / Or (!keep) tree at t, Casts of booleans
 * looked through; false when more than CM_LEAVES. */
static bool leaves(const kpass *p, int t, bool keep, int *out, int *n) {
    const kn_net *net = p->net;
    int i = prod(p, t);
    while (i >= 0 && kpass_is(&net->nodes[i], "Cast") && net->nodes[i].n_in == 1 &&
           kpass_dtype(p, net->nodes[i].in[0]) == KILN_DTYPE_BOOL) {
        t = net->nodes[i].in[0];
        i = prod(p, t);
    }
    if (i >= 0 && kpass_is(&net->nodes[i], keep ? "And" : "Or") && net->nodes[i].n_in == 2) {
        int a = net->nodes[i].in[0], b = net->nodes[i].in[1];
        return leaves(p, a, keep, out, n) && leaves(p, b, keep, out, n);
    }
    if (*n >= CM_LEAVES)
        return false;
    out[(*n)++] = t;
    return true;
}

/* Whether t broadcasts to [B, H, Sq, Sk] (right-aligned) at every point. */
static bool fits(const kpass *p, int t, const int64_t (*att)[4]) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *ti = kpass_shape(p, k, t);
        if (!ti || ti->rank > 4)
            return false;
        for (int d = 0; d < ti->rank; d++) {
            int64_t x = ti->dims[d], want = att[k][d + 4 - ti->rank];
            if (x != 1 && x != want)
                return false;
        }
    }
    return true;
}

/* Whether x is the fill a causal rewrite may drop for positions: -inf, or
 * the lowest finite value of the mask's type (finfo.min, what transformers'
 * dynamo exports write). The latter only when no padding term is left (the
 * caller checks): a causal mask aligned to the last key with Sk >= Sq keeps
 * key 0 of every row, so no row is fully masked, and score + lowest - max
 * underflows exp to 0 exactly as -inf does. */
static bool fill_lowest(double x, kiln_dtype dt) {
    if (isinf(x))
        return x < 0;
    switch (dt) {
    case KILN_DTYPE_FLOAT: return x == -(double)FLT_MAX;
    case KILN_DTYPE_DOUBLE: return x == -DBL_MAX;
    case KILN_DTYPE_FLOAT16: return x == -65504.0;
    case KILN_DTYPE_BFLOAT16: return x == -3.3895313892515355e38;
    default: return false;
    }
}

typedef struct cm_entry {
    int cond;          /* a Where's condition */
    bool keep;         /* its orientation (the fill is -inf, the other 0) */
    kiln_dtype dt;     /* its type */
    int mask;          /* what replaced it (-1: none) */
} cm_entry;

kiln_status kpass_attn_causal_mask(kpass *p, int *changed) {
    kn_net *net = p->net;
    cm_entry cache[CM_CACHE];
    int n_cache = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        const kn_node *a = &net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is_kiln(a, "Attention") || a->n_in < 4 || a->in[3] < 0 ||
            kn_attr_int(a, "causal", 0))
            continue;
        int w = prod(p, a->in[3]);
        if (w < 0 || !kpass_is(&net->nodes[w], "Where") || net->nodes[w].n_in != 3)
            continue;
        const kn_node *wn = &net->nodes[w];
        double x1, x2;
        if (!kpass_const_scalar(net, wn->in[1], &x1) || !kpass_const_scalar(net, wn->in[2], &x2))
            continue;
        bool keep;
        /* the fill's own type (the constant the exporter wrote) */
        kiln_dtype dt1 = net->tensors[wn->in[1]].value.dtype;
        kiln_dtype dt2 = net->tensors[wn->in[2]].value.dtype;
        if (x1 == 0.0 && fill_lowest(x2, dt2))
            keep = true; /* Where(keep, 0, -inf) */
        else if (x2 == 0.0 && fill_lowest(x1, dt1))
            keep = false; /* Where(masked, -inf, 0) */
        else
            continue;
        bool finite = !isinf(keep ? x2 : x1);
        KN_TRY(kpass_need_shapes(p));
        if (p->shapes_state != 1)
            return KILN_OK;
        a = &net->nodes[i];
        wn = &net->nodes[w];
        /* Sq <= Sk at every point; the attention's [B, H, Sq, Sk] */
        bool packed = kn_attr_int(a, "qkv_packed", 0) != 0, ok = p->n_points <= CM_POINTS;
        int64_t sq[CM_POINTS], sk[CM_POINTS], att[CM_POINTS][4];
        cm_geom g = {sq, sk, true};
        for (int k = 0; k < p->n_points && ok; k++) {
            const kn_tinfo *q = kpass_shape(p, k, a->in[0]);
            const kn_tinfo *kt = packed ? q : (a->in[1] >= 0 ? kpass_shape(p, k, a->in[1]) : NULL);
            ok = q && kt && q->rank == (packed ? 5 : 4) && kt->rank >= 2 &&
                 q->dims[1] <= kt->dims[1];
            if (ok) {
                sq[k] = q->dims[1];
                sk[k] = kt->dims[1];
                g.square = g.square && sq[k] == sk[k];
                att[k][0] = q->dims[0];
                att[k][1] = packed ? q->dims[3] : q->dims[2];
                att[k][2] = sq[k];
                att[k][3] = sk[k];
            }
        }
        if (!ok)
            continue;
        int cond = wn->in[0], ex = prod(p, cond);
        if (ex >= 0 && kpass_is(&net->nodes[ex], "Expand"))
            cond = net->nodes[ex].in[0]; /* the attention broadcasts the mask itself */
        int lv[CM_LEAVES], nl = 0, rest[CM_LEAVES], nr = 0;
        bool causal = false;
        if (!leaves(p, cond, keep, lv, &nl))
            continue;
        for (int j = 0; j < nl && ok; j++) {
            int c = causal_pred(p, lv[j], &g);
            if (c == (keep ? 1 : -1))
                causal = true;
            else if (!const_all(net, lv[j], keep) && !expanded_const_all(p, lv[j], keep) &&
                     !(keep && all_ones(p, lv[j])))
                rest[nr++] = lv[j];
        }
        /* (a mask that masks nothing at all is pass_range.c's: its value is
         * provably 0 everywhere, and it is dropped before this pass) */
        for (int j = 0; j < nr && ok; j++)
            ok = fits(p, rest[j], (const int64_t (*)[4])att) && kpass_dtype(p, rest[j]) == KILN_DTYPE_BOOL;
        if (!ok || !causal)
            continue;
        if (finite && nr > 0) {
            /* a row whose keys are all padded is uniform over every key in
             * the graph; with the causal term by position it would be
             * uniform over the causal keys only */
            kn_log(KILN_LOG_VERBOSE,
                   "attention: causal mask '%s' not fused: its fill is finite (%g) and padding "
                   "terms are left; a fully padded row averages every value there, which a "
                   "causal flag would change (a -inf fill, or no padding term, would fuse)",
                   net->nodes[w].name, keep ? x2 : x1);
            continue;
        }
        int mask = -1, hit = -1;
        kiln_dtype mdt = kpass_dtype(p, a->in[3]);
        for (int c = 0; c < n_cache && hit < 0; c++) /* layers sharing one mask share its rewrite */
            if (cache[c].cond == wn->in[0] && cache[c].keep == keep && cache[c].dt == mdt)
                hit = c;
        if (hit >= 0) {
            mask = cache[hit].mask;
        } else if (nr > 0) {
            char nm[256];
            int c = rest[0], keep_in = wn->in[1], fill_in = wn->in[2];
            for (int j = 1; j < nr; j++) {
                int y, in2[2] = {c, rest[j]};
                KN_TRY(kn_net_new_tensor(net, "padding_mask", &y));
                snprintf(nm, sizeof nm, "%s padding terms", net->nodes[w].name);
                KN_TRY(kn_net_add_node(net, nm, keep ? "And" : "Or", "", 7, 2, in2, 1, &y, NULL));
                c = y;
            }
            int in3[3] = {c, keep_in, fill_in};
            KN_TRY(kn_net_new_tensor(net, "padding_bias", &mask));
            snprintf(nm, sizeof nm, "%s without its causal term", net->nodes[w].name);
            KN_TRY(kn_net_add_node(net, nm, "Where", "", 16, 3, in3, 1, &mask, NULL));
        }
        if (hit < 0 && n_cache < CM_CACHE)
            cache[n_cache++] = (cm_entry){net->nodes[w].in[0], keep, mdt, mask};
        kn_node *an = &net->nodes[i];
        an->in[3] = mask;
        KN_TRY(kn_node_set_int(an, "causal", 1));
        kpass_touch(p, i);
        kn_log(KILN_LOG_VERBOSE,
               "attention-causal: '%s' masks by position; %s", an->name,
               mask >= 0 ? "the padding terms stay its mask" : "no mask left");
        (*changed)++;
    }
    return KILN_OK;
}
