/* pass_range.c - value ranges, and the attention masks they prove empty.
 *
 * Exporters often build an attention mask even when the model was given
 * none: transformers' vision and encoder models compute "every position is
 * valid" at run time (GreaterOrEqual(Range(0, batch), 0) expanded to
 * [B, 1, S, S], then Where(mask, 0, -inf)), and a dynamo export expands a
 * constant true. The mask's shape follows the batch, so it is no constant,
 * yet every element has the same value. kiln::Attention then reads a
 * [B, H|1, S, S] tensor that changes nothing, and the kernels that take only
 * masks of one row per batch step aside.
 *
 * What this pass knows is the interval [lo, hi] that every element of a
 * tensor lies in, derived from constants, ConstantOfShape, Range, Shape, the
 * comparisons, logic, Where, Cast, + - * and the ops that only move or copy
 * elements (Expand, Reshape, Unsqueeze, Transpose, Gather, Concat, ...).
 * Anything else, and every graph input, is unknown. A kiln::Attention whose
 * mask lies in [v, v] for a finite v adds the same number to every score of
 * a row, which the softmax cancels: the mask input is dropped. */
#include "passes.h"

#include <math.h>
#include <string.h>

typedef struct vrange {
    double lo, hi;
} vrange;

enum { R_UNSEEN = 0, R_BUSY, R_KNOWN, R_UNKNOWN };

typedef struct rctx {
    kpass *p;
    int n;
    unsigned char *state;
    vrange *r;
} rctx;

#define RANGE_MAX_DEPTH 64
/* Constants larger than this are not scanned (a mask constant is far
 * smaller; weights never feed a mask). */
#define RANGE_MAX_SCAN ((int64_t)1 << 22)

static bool bounded(vrange v) { return !isnan(v.lo) && !isnan(v.hi) && v.lo <= v.hi; }

static vrange join(vrange a, vrange b) {
    vrange v = {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
    return v;
}

static const vrange R_BOOL = {0.0, 1.0};
static const vrange R_TRUE = {1.0, 1.0};
static const vrange R_FALSE = {0.0, 0.0};

static bool value_range(const kn_tdata *v, vrange *out) {
    int64_t n = kpass_numel(v);
    if (n < 1 || n > RANGE_MAX_SCAN || v->dtype == KILN_DTYPE_STRING ||
        kiln_dtype_size(v->dtype) == 0 || !v->data ||
        v->nbytes < (size_t)n * kiln_dtype_size(v->dtype))
        return false;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t k = 0; k < n; k++) {
        double x = kpass_value_at(v, k);
        if (isnan(x))
            return false;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    out->lo = lo;
    out->hi = hi;
    return true;
}

/* What a Cast to `to` does to the interval (monotone for every numeric
 * target; to bool it is "nonzero"). */
static bool cast_range(vrange a, kiln_dtype to, vrange *out) {
    if (to == KILN_DTYPE_BOOL) {
        if (a.lo > 0.0 || a.hi < 0.0)
            *out = R_TRUE;
        else if (a.lo == 0.0 && a.hi == 0.0)
            *out = R_FALSE;
        else
            *out = R_BOOL;
        return true;
    }
    if (to == KILN_DTYPE_FLOAT || to == KILN_DTYPE_DOUBLE || to == KILN_DTYPE_FLOAT16 ||
        to == KILN_DTYPE_BFLOAT16) {
        *out = a;
        return true;
    }
    if (!isfinite(a.lo) || !isfinite(a.hi))
        return false; /* inf to an integer type is undefined */
    out->lo = trunc(a.lo);
    out->hi = trunc(a.hi);
    return true;
}

/* a OP b as a comparison: true everywhere, false everywhere, or either. */
static vrange compare(const char *op, vrange a, vrange b) {
    bool t = false, f = false;
    if (!strcmp(op, "Equal")) {
        t = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
        f = a.hi < b.lo || b.hi < a.lo;
    } else if (!strcmp(op, "Less")) {
        t = a.hi < b.lo;
        f = a.lo >= b.hi;
    } else if (!strcmp(op, "LessOrEqual")) {
        t = a.hi <= b.lo;
        f = a.lo > b.hi;
    } else if (!strcmp(op, "Greater")) {
        t = a.lo > b.hi;
        f = a.hi <= b.lo;
    } else { /* GreaterOrEqual */
        t = a.lo >= b.hi;
        f = a.hi < b.lo;
    }
    return t ? R_TRUE : f ? R_FALSE : R_BOOL;
}

static vrange product(vrange a, vrange b) {
    double c[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
    vrange v = {c[0], c[0]};
    for (int k = 1; k < 4; k++) {
        if (isnan(c[k]) || isnan(c[0])) {
            v.lo = v.hi = NAN;
            return v;
        }
        v.lo = c[k] < v.lo ? c[k] : v.lo;
        v.hi = c[k] > v.hi ? c[k] : v.hi;
    }
    return v;
}

static bool range_of(rctx *c, int t, vrange *out, int depth);

static bool input_range(rctx *c, const kn_node *n, int i, vrange *out, int depth) {
    return i < n->n_in && n->in[i] >= 0 && range_of(c, n->in[i], out, depth + 1);
}

static bool is_one_of(const kn_node *n, const char *const *ops) {
    for (; *ops; ops++)
        if (kpass_is(n, *ops))
            return true;
    return false;
}

/* The range of node n's output 0 (every op below has one output that
 * matters here). */
static bool node_range(rctx *c, const kn_node *n, vrange *out, int depth) {
    /* ops whose output elements are copies of input 0's */
    static const char *const moves[] = {"Identity", "Expand", "Reshape", "Unsqueeze", "Squeeze",
                                        "Flatten", "Transpose", "Tile", "Slice", "Gather",
                                        "GatherElements", "GatherND", "ReduceMax",
                                        "ReduceMin", "DepthToSpace", "SpaceToDepth", NULL};
    static const char *const cmps[] = {"Equal", "Less", "LessOrEqual", "Greater",
                                       "GreaterOrEqual", NULL};
    vrange a, b;
    if (n->n_out < 1)
        return false;
    if (kpass_is(n, "ConstantOfShape")) {
        const kn_attr *v = kn_attr_find(n, "value");
        if (!v) {
            *out = R_FALSE; /* float 0 */
            return true;
        }
        return v->type == KN_ATTR_TENSOR && v->tensor && value_range(v->tensor, out);
    }
    if (kpass_is(n, "Shape") || kpass_is(n, "Size")) {
        out->lo = 0.0;
        out->hi = INFINITY;
        return true;
    }
    if (is_one_of(n, moves))
        return input_range(c, n, 0, out, depth);
    if (kpass_is(n, "Concat") || kpass_is(n, "Max") || kpass_is(n, "Min")) {
        bool mx = kpass_is(n, "Max"), mn = kpass_is(n, "Min");
        for (int i = 0; i < n->n_in; i++) {
            if (!input_range(c, n, i, &a, depth))
                return false;
            if (i == 0)
                *out = a;
            else if (mx)
                *out = (vrange){fmax(out->lo, a.lo), fmax(out->hi, a.hi)};
            else if (mn)
                *out = (vrange){fmin(out->lo, a.lo), fmin(out->hi, a.hi)};
            else
                *out = join(*out, a);
        }
        return n->n_in > 0;
    }
    if (kpass_is(n, "Cast")) {
        kiln_dtype to = (kiln_dtype)kn_attr_int(n, "to", KILN_DTYPE_UNDEFINED);
        return input_range(c, n, 0, &a, depth) && cast_range(a, to, out);
    }
    if (is_one_of(n, cmps)) {
        if (!input_range(c, n, 0, &a, depth) || !input_range(c, n, 1, &b, depth))
            *out = R_BOOL;
        else
            *out = compare(n->op_type, a, b);
        return true;
    }
    if (kpass_is(n, "Not")) {
        if (!input_range(c, n, 0, &a, depth))
            *out = R_BOOL;
        else
            *out = (vrange){1.0 - a.hi, 1.0 - a.lo};
        return true;
    }
    if (kpass_is(n, "And") || kpass_is(n, "Or")) {
        bool ka = input_range(c, n, 0, &a, depth), kb = input_range(c, n, 1, &b, depth);
        if (!ka)
            a = R_BOOL;
        if (!kb)
            b = R_BOOL;
        *out = kpass_is(n, "And") ? (vrange){fmin(a.lo, b.lo), fmin(a.hi, b.hi)}
                                  : (vrange){fmax(a.lo, b.lo), fmax(a.hi, b.hi)};
        return true;
    }
    if (kpass_is(n, "Where")) {
        vrange cond;
        if (!input_range(c, n, 0, &cond, depth))
            cond = R_BOOL;
        if (cond.lo >= 1.0)
            return input_range(c, n, 1, out, depth);
        if (cond.hi <= 0.0)
            return input_range(c, n, 2, out, depth);
        if (!input_range(c, n, 1, &a, depth) || !input_range(c, n, 2, &b, depth))
            return false;
        *out = join(a, b);
        return true;
    }
    if (kpass_is(n, "Range")) {
        vrange st, lim, d;
        if (!input_range(c, n, 0, &st, depth) || !input_range(c, n, 1, &lim, depth) ||
            !input_range(c, n, 2, &d, depth))
            return false;
        if (d.lo > 0.0) /* start <= x < limit */
            *out = (vrange){st.lo, fmax(st.lo, lim.hi)};
        else if (d.hi < 0.0)
            *out = (vrange){fmin(st.hi, lim.lo), st.hi};
        else
            return false;
        return true;
    }
    if (kpass_is(n, "Neg")) {
        if (!input_range(c, n, 0, &a, depth))
            return false;
        *out = (vrange){-a.hi, -a.lo};
        return true;
    }
    if (kpass_is(n, "Add") || kpass_is(n, "Sub") || kpass_is(n, "Mul")) {
        if (!input_range(c, n, 0, &a, depth) || !input_range(c, n, 1, &b, depth))
            return false;
        if (kpass_is(n, "Add"))
            *out = (vrange){a.lo + b.lo, a.hi + b.hi};
        else if (kpass_is(n, "Sub"))
            *out = (vrange){a.lo - b.hi, a.hi - b.lo};
        else
            *out = product(a, b);
        return true;
    }
    return false;
}

static bool range_of(rctx *c, int t, vrange *out, int depth) {
    kn_net *net = c->p->net;
    if (t < 0 || t >= c->n || depth > RANGE_MAX_DEPTH)
        return false;
    if (c->state[t] == R_KNOWN) {
        *out = c->r[t];
        return true;
    }
    if (c->state[t] != R_UNSEEN)
        return false; /* unknown, or a cycle (none in a valid graph) */
    c->state[t] = R_BUSY;
    bool ok;
    vrange v = {NAN, NAN};
    if (kpass_is_const(net, t)) {
        ok = value_range(&net->tensors[t].value, &v);
    } else {
        int pr = net->tensors[t].producer;
        ok = pr >= 0 && pr < net->n_nodes && !net->nodes[pr].dead &&
             net->nodes[pr].n_out > 0 && net->nodes[pr].out[0] == t &&
             node_range(c, &net->nodes[pr], &v, depth);
    }
    ok = ok && bounded(v);
    c->state[t] = ok ? R_KNOWN : R_UNKNOWN;
    if (ok) {
        c->r[t] = v;
        *out = v;
    }
    return ok;
}

/* ---------------- masks that only broadcast ----------------
 * A padding mask often reaches kiln::Attention expanded to [B, 1, S, S]:
 * And(every query valid [1, 1, S, 1], keys kept [B, 1, 1, S]) and an Expand
 * to the scores' shape (transformers' SDPA masks, both exporters). The
 * attention broadcasts its mask itself, so where a tensor feeds nothing but
 * attention masks, the Expand and the provably all-true term of an And
 * (all-false of an Or) can go: the mask stays [B, 1, 1, S], one row per
 * batch, which the fast kernels take. */

#define MASK_MAX_DEPTH 16

static bool mask_op(const kn_node *n) {
    static const char *const ops[] = {"Where", "And", "Or", "Not", "Cast", "Expand", "Add",
                                      "Sub", "Mul", "Neg", NULL};
    return is_one_of(n, ops);
}

/* Whether every reader of t (as the pass began, and t no graph output)
 * is a kiln::Attention reading it as its mask only, or a mask op whose
 * output feeds nothing else either. */
static bool mask_only(const kpass *p, int t, int depth) {
    const kn_net *net = p->net;
    if (t < 0 || t >= p->n_tensors || p->is_output[t] || depth > MASK_MAX_DEPTH)
        return false;
    if (p->rd_start[t] == p->rd_start[t + 1])
        return false;
    for (int k = p->rd_start[t]; k < p->rd_start[t + 1]; k++) {
        int r = p->rd_node[k];
        const kn_node *n = &net->nodes[r];
        if (n->dead)
            return false;
        if (kpass_is_kiln(n, "Attention")) {
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] == t && j != 3)
                    return false;
            continue;
        }
        if (!mask_op(n) || n->n_out < 1 || (kpass_is(n, "Expand") && n->in[0] != t) ||
            !mask_only(p, n->out[0], depth + 1))
            return false;
    }
    return true;
}

static bool all_value(rctx *c, int t, double v) {
    vrange r;
    return range_of(c, t, &r, 0) && r.lo == v && r.hi == v;
}

/* The tensor that can stand for mask value t where only its broadcast
 * matters; rewrites the condition of a Where on the way. */
static int simpler_mask(rctx *c, int t, int depth, int *changed) {
    kpass *p = c->p;
    kn_net *net = p->net;
    if (depth > MASK_MAX_DEPTH || t < 0 || t >= p->n_tensors)
        return t;
    int pr = kpass_producer(p, t);
    if (pr < 0)
        return t;
    kn_node *n = &net->nodes[pr];
    if (kpass_is(n, "Expand") && n->n_in >= 1 && n->in[0] >= 0)
        return simpler_mask(c, n->in[0], depth + 1, changed);
    if ((kpass_is(n, "And") || kpass_is(n, "Or")) && n->n_in == 2 && n->in[0] >= 0 &&
        n->in[1] >= 0) {
        double unit = kpass_is(n, "And") ? 1.0 : 0.0;
        int a = n->in[0], b = n->in[1];
        if (all_value(c, a, unit))
            return simpler_mask(c, b, depth + 1, changed);
        if (all_value(c, b, unit))
            return simpler_mask(c, a, depth + 1, changed);
        return t;
    }
    if (kpass_is(n, "Where") && n->n_in == 3 && n->in[0] >= 0 && mask_only(p, t, 0)) {
        int cond = simpler_mask(c, n->in[0], depth + 1, changed);
        if (cond != n->in[0]) {
            kn_log(KILN_LOG_VERBOSE, "attention-mask: '%s' reads '%s' for '%s' (only broadcast)",
                   n->name, net->tensors[cond].name, net->tensors[n->in[0]].name);
            net->nodes[pr].in[0] = cond;
            kpass_touch(p, pr);
            (*changed)++;
        }
    }
    return t;
}

kiln_status kpass_attn_uniform_mask(kpass *p, int *changed) {
    kn_net *net = p->net;
    rctx c = {p, net->n_tensors, NULL, NULL};
    for (int i = 0; i < p->n_nodes; i++) {
        kn_node *a = &net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is_kiln(a, "Attention") || a->n_in < 4 || a->in[3] < 0)
            continue;
        if (!c.state) {
            c.state = kn_calloc((size_t)c.n + 1, 1);
            c.r = kn_calloc((size_t)c.n + 1, sizeof(vrange));
            if (!c.state || !c.r) {
                kn_free(c.state);
                kn_free(c.r);
                return KILN_ERR_OUT_OF_MEMORY;
            }
        }
        vrange v;
        if (!range_of(&c, a->in[3], &v, 0) || v.lo != v.hi || !isfinite(v.lo)) {
            int m = a->in[3], s = simpler_mask(&c, m, 0, changed);
            if (s != m && mask_only(p, m, 0)) {
                kn_log(KILN_LOG_VERBOSE, "attention-mask: '%s' reads its mask '%s' unexpanded",
                       a->name, net->tensors[s].name);
                a->in[3] = s;
                kpass_touch(p, i);
                (*changed)++;
            }
            continue;
        }
        kn_log(KILN_LOG_VERBOSE,
               "attention-uniform-mask: '%s' drops its mask '%s' (every element is %g, which the "
               "softmax cancels)",
               a->name, net->tensors[a->in[3]].name, v.lo);
        a->in[3] = -1;
        kpass_touch(p, i);
        (*changed)++;
    }
    kn_free(c.state);
    kn_free(c.r);
    return KILN_OK;
}
