/* ops_control.c - If, Loop and Scan: outer-scope captures of their bodies
 * and shape inference through the bodies. */
#include <string.h>

#include "graph/control.h"
#include "graph/seq.h"

/* ---- captures ---- */

static bool is_free(const kn_net *g, int t) {
    const kn_tensor *x = &g->tensors[t];
    return x->producer < 0 && !(x->flags & (KN_T_INPUT | KN_T_CONST));
}

static bool is_control(const kn_node *n) {
    return n->domain[0] == 0 && (strcmp(n->op_type, "If") == 0 || strcmp(n->op_type, "Loop") == 0 ||
                                 strcmp(n->op_type, "Scan") == 0 ||
                                 strcmp(n->op_type, "SequenceMap") == 0);
}

static kiln_status add_body_input(kn_net *g, int t) {
    KN_TRY(kn_grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(int)));
    g->tensors[t].flags |= KN_T_INPUT;
    g->inputs[g->n_inputs++] = t;
    return KILN_OK;
}

static kiln_status resolve_node(kn_net *net, int ni, int is_sub) {
    kn_node *n = &net->nodes[ni];
    /* names every body reads from outside, in first-seen order */
    char **names = NULL;
    int n_names = 0, cap = 0;
    kiln_status st = KILN_OK;
    for (int a = 0; a < n->n_attr && st == KILN_OK; a++) {
        kn_net *g = n->attrs[a].type == KN_ATTR_GRAPH ? n->attrs[a].graph : NULL;
        if (!g)
            continue;
        st = kn_net_resolve_captures(g, 1);
        for (int t = 0; t < g->n_tensors && st == KILN_OK; t++) {
            if (!is_free(g, t))
                continue;
            bool seen = false;
            for (int k = 0; k < n_names && !seen; k++)
                seen = strcmp(names[k], g->tensors[t].name) == 0;
            if (seen)
                continue;
            st = kn_grow((void **)&names, &cap, n_names + 1, sizeof *names);
            if (st == KILN_OK)
                names[n_names++] = g->tensors[t].name; /* borrowed: bodies outlive this */
        }
    }
    if (st == KILN_OK && n_names && !is_control(n))
        st = kn_node_error(n, KILN_ERR_UNSUPPORTED,
                           "a subgraph attribute of this op reads outer values ('%s')", names[0]);
    int *idx = NULL;
    if (st == KILN_OK && n_names && !(idx = kn_malloc((size_t)n_names * sizeof *idx)))
        st = KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < n_names && st == KILN_OK; k++) {
        idx[k] = kn_net_find(net, names[k]);
        if (idx[k] < 0 && !is_sub)
            st = kn_node_error(n, KILN_ERR_PARSE,
                               "a subgraph reads '%s', which no enclosing graph defines", names[k]);
        else if (idx[k] < 0)
            st = kn_net_tensor(net, names[k], &idx[k]); /* resolved further out */
        n = &net->nodes[ni];
    }
    /* every body gets every capture as a trailing input, in one order */
    for (int a = 0; a < n->n_attr && st == KILN_OK && n_names; a++) {
        kn_net *g = n->attrs[a].type == KN_ATTR_GRAPH ? n->attrs[a].graph : NULL;
        for (int k = 0; g && k < n_names && st == KILN_OK; k++) {
            const char *nm = net->tensors[idx[k]].name;
            int t = kn_net_find(g, nm);
            if (t >= 0 && !is_free(g, t)) /* this body has a value of that name: */
                st = kn_net_new_tensor(g, nm, &t); /* an unused input of its own */
            else if (t < 0)
                st = kn_net_tensor(g, nm, &t);
            if (st == KILN_OK)
                st = add_body_input(g, t);
        }
    }
    if (st == KILN_OK && n_names) {
        int *in = kn_malloc((size_t)(n->n_in + n_names) * sizeof *in);
        if (!in)
            st = KILN_ERR_OUT_OF_MEMORY;
        else {
            memcpy(in, n->in, (size_t)n->n_in * sizeof *in);
            memcpy(in + n->n_in, idx, (size_t)n_names * sizeof *in);
            kn_free(n->in);
            n->in = in;
            n->n_in += n_names;
            st = kn_node_set_int(n, KN_CAPTURES_ATTR,
                                 kn_attr_int(n, KN_CAPTURES_ATTR, 0) + n_names);
        }
    }
    kn_free(idx);
    kn_free(names);
    return st;
}

kiln_status kn_net_resolve_captures(kn_net *net, int is_sub) {
    for (int i = 0; i < net->n_nodes; i++) {
        bool has_graph = false;
        for (int a = 0; a < net->nodes[i].n_attr; a++)
            has_graph |= net->nodes[i].attrs[a].type == KN_ATTR_GRAPH;
        if (has_graph)
            KN_TRY(resolve_node(net, i, is_sub));
    }
    return KILN_OK;
}

/* ---- shape inference ---- */

static const kn_net *body_of(const kn_infer *c, const char *attr) {
    const kn_attr *a = kn_attr_find(c->node, attr);
    return a && a->type == KN_ATTR_GRAPH ? a->graph : NULL;
}

static int captures(const kn_infer *c) { return (int)kn_attr_int(c->node, KN_CAPTURES_ATTR, 0); }

static kiln_status need_body(const kn_infer *c, const kn_net *g, const char *attr, int n_in,
                             int min_out) {
    if (!g)
        return kn_node_error(c->node, KILN_ERR_PARSE, "graph attribute '%s' is missing", attr);
    if (g->n_inputs != n_in)
        return kn_node_error(c->node, KILN_ERR_PARSE, "body '%s' has %d inputs, expected %d", attr,
                             g->n_inputs, n_in);
    if (g->n_outputs < min_out)
        return kn_node_error(c->node, KILN_ERR_PARSE, "body '%s' has %d outputs, expected %d",
                             attr, g->n_outputs, min_out);
    return KILN_OK;
}

static kiln_status infer_if(kn_infer *c) {
    int nc = captures(c);
    if (c->n_in != 1 + nc || !kn_has_in(c, 0))
        return kn_node_error(c->node, KILN_ERR_PARSE, "If takes one condition input");
    const kn_net *gt = body_of(c, "then_branch"), *ge = body_of(c, "else_branch");
    KN_TRY(need_body(c, gt, "then_branch", nc, c->n_out));
    KN_TRY(need_body(c, ge, "else_branch", nc, c->n_out));
    if (gt->n_outputs != c->n_out || ge->n_outputs != c->n_out)
        return kn_node_error(c->node, KILN_ERR_PARSE, "the branches have %d and %d outputs, the If %d",
                             gt->n_outputs, ge->n_outputs, c->n_out);
    if (kn_numel(c->in[0].rank, c->in[0].dims) != 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the condition has %lld elements, not 1",
                             (long long)kn_numel(c->in[0].rank, c->in[0].dims));
    bool est = false; /* a branch's shapes need a value known only at run time */
    if (c->in[0].value) {
        bool cond = kn_value_double(&c->in[0], 0) != 0;
        return kx_body_infer_est(c->node, cond ? gt : ge, nc, c->in + 1, c->n_out, c->out, &est);
    }
    /* the condition is not known: both branches, the larger where they differ */
    kn_tinfo *o2 = kn_calloc((size_t)c->n_out + 1, sizeof *o2);
    if (!o2)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kx_body_infer_est(c->node, gt, nc, c->in + 1, c->n_out, c->out, &est);
    if (st == KILN_OK)
        st = kx_body_infer_est(c->node, ge, nc, c->in + 1, c->n_out, o2, &est);
    for (int j = 0; j < c->n_out && st == KILN_OK; j++) {
        kn_tinfo *a = &c->out[j];
        if (kn_dtype_is_handle((int)a->dtype)) { /* either branch's list */
            a->count_known &= o2[j].count_known && a->count == o2[j].count;
            if (a->elem_known && o2[j].elem_known)
                kn_seq_bound_add(a, o2[j].elem_rank, o2[j].elem_dims, false);
            else
                a->elem_known = false;
        }
        if (a->dtype != o2[j].dtype || a->rank != o2[j].rank)
            st = kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                               "output %d differs in type or rank between the branches and the "
                               "condition is not known",
                               j);
        for (int d = 0; st == KILN_OK && d < a->rank; d++)
            if (a->dims[d] != o2[j].dims[d]) {
                a->dims[d] = a->dims[d] > o2[j].dims[d] ? a->dims[d] : o2[j].dims[d];
                a->data_dependent = true;
            }
    }
    kn_free(o2);
    return st;
}

/* Whether body output 0 (the loop condition) is the condition input passed
 * through, or a true constant (the body's own, or an outer one read as a
 * capture: TorchScript's exports), so that the loop runs exactly its trip
 * count. nv: the loop-carried values (captures follow them). */
static bool cond_passthrough(const kn_infer *c, const kn_net *g, int nv) {
    int t = g->outputs[0], cin = g->inputs[1];
    for (int guard = 0; guard < 64; guard++) {
        if (t == cin)
            return true;
        const kn_tensor *x = &g->tensors[t];
        if (x->flags & KN_T_CONST)
            return x->value.nbytes >= 1 && ((const uint8_t *)x->value.data)[0] != 0;
        for (int k = 2 + nv; k < g->n_inputs && k < c->n_in; k++)
            if (g->inputs[k] == t) /* a capture: the outer value, when known */
                return c->in[k].value && kn_numel(c->in[k].rank, c->in[k].dims) == 1 &&
                       kn_value_double(&c->in[k], 0) != 0;
        if (x->producer < 0)
            return false;
        const kn_node *p = &g->nodes[x->producer];
        if (strcmp(p->op_type, "Identity") != 0 || p->n_in < 1 || p->in[0] < 0)
            return false;
        t = p->in[0];
    }
    return false;
}

static bool same_shape(const kn_tinfo *a, const kn_tinfo *b) {
    return a->rank == b->rank && memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]) == 0;
}

/* Whether a carried value's facts are the same after an iteration: its
 * shape, and for a list its length and element bound. */
static bool same_facts(const kn_tinfo *a, const kn_tinfo *b) {
    if (!same_shape(a, b))
        return false;
    if (!kn_dtype_is_handle((int)a->dtype))
        return true;
    if (a->count_known != b->count_known || (a->count_known && a->count != b->count) ||
        a->elem_known != b->elem_known)
        return false;
    return !a->elem_known ||
           (a->elem_rank == b->elem_rank &&
            memcmp(a->elem_dims, b->elem_dims, (size_t)a->elem_rank * sizeof a->elem_dims[0]) == 0);
}

/* The most iterations whose shapes inference follows one by one. */
#define LOOP_INFER_MAX 1024

/* Loop-carried values whose shape changes between iterations (a value
 * grown by Concat each time): with the trip count known on the host, the
 * body's shape inference is repeated for every iteration (the iteration
 * number given, as a shape may follow it);
 * the outputs get the last shapes, or, when the condition may end the loop
 * earlier, the largest shape of any iteration as a data-dependent upper
 * bound (the kernel writes the true one). A carried list is followed the
 * same way (its length and largest element: a list grown by SequenceInsert
 * and read by ConcatFromSequence after an exact loop has known facts). A
 * changing shape with the trip count unknown, a rank that changes, or a
 * scan output that changes shape is refused naming the node. bin/bout: iteration 0's body inputs and
 * outputs; c->out[0..nv) already hold iteration 0's loop-carried shapes. */
static kiln_status loop_shapes(kn_infer *c, const kn_net *g, int nv, int nc, int nk, int64_t trip,
                               bool exact, kn_tinfo *bin, kn_tinfo *bout) {
    int changed = -1;
    bool tensors = false; /* a tensor (not a list) changes shape */
    for (int j = 0; j < nv; j++)
        if (!same_facts(&bout[1 + j], &c->in[2 + j])) {
            changed = changed < 0 ? j : changed;
            tensors |= !kn_dtype_is_handle((int)c->in[2 + j].dtype);
        }
    if (changed < 0)
        return KILN_OK; /* a fixed point from the start */
    if (!tensors && (trip < 0 || trip > LOOP_INFER_MAX))
        return KILN_OK; /* only lists grow: their length stays unknown (infer_loop) */
    if (trip < 0 || trip > LOOP_INFER_MAX)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                             "loop-carried value %d changes shape between iterations and the trip "
                             "count is %s when shapes are inferred",
                             changed, trip < 0 ? "not known" : "too large to follow");
    kn_tinfo *hi = kn_calloc((size_t)nv + 1, sizeof *hi);
    kn_tinfo *scan0 = kn_calloc((size_t)nk + 1, sizeof *scan0);
    if (!hi || !scan0) {
        kn_free(hi);
        kn_free(scan0);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int j = 0; j < nv; j++) {
        hi[j] = bout[1 + j];
        if (!exact) /* the condition may stop the loop after any iteration */
            for (int d = 0; d < hi[j].rank && hi[j].rank == c->in[2 + j].rank; d++)
                if (c->in[2 + j].dims[d] > hi[j].dims[d])
                    hi[j].dims[d] = c->in[2 + j].dims[d];
    }
    for (int k = 0; k < nk; k++)
        scan0[k] = bout[1 + nv + k];
    kiln_status st = KILN_OK;
    int64_t itv = 0;
    bin[0].value = &itv;
    for (int64_t it = 1; it < trip && st == KILN_OK; it++) {
        for (int j = 0; j < nv; j++) {
            bin[2 + j] = bout[1 + j];
            bin[2 + j].value = NULL;
            bin[2 + j].data_dependent = false;
        }
        itv = it;
        bool est = false;
        st = kx_body_infer_est(c->node, g, 2 + nv + nc, bin, g->n_outputs, bout, &est);
        for (int j = 0; j < nv && st == KILN_OK; j++) {
            if (kn_dtype_is_handle((int)hi[j].dtype)) { /* a list: the largest element */
                if (hi[j].elem_known && bout[1 + j].elem_known)
                    kn_seq_bound_add(&hi[j], bout[1 + j].elem_rank, bout[1 + j].elem_dims, false);
                else
                    hi[j].elem_known = false;
                continue;
            }
            if (bout[1 + j].rank != hi[j].rank)
                st = kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                                   "loop-carried value %d changes rank between iterations", j);
            for (int d = 0; st == KILN_OK && d < hi[j].rank; d++)
                if (bout[1 + j].dims[d] > hi[j].dims[d])
                    hi[j].dims[d] = bout[1 + j].dims[d];
        }
        for (int k = 0; k < nk && st == KILN_OK; k++)
            if (!same_shape(&bout[1 + nv + k], &scan0[k]))
                st = kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                                   "scan output %d changes shape between iterations", k);
    }
    if (st != KILN_OK && st != KILN_ERR_OUT_OF_MEMORY && !tensors) {
        /* only lists change and a later iteration's facts cannot be
         * inferred (an optional's presence, say): they stay unknown */
        kn_error_clear();
        kn_free(hi);
        kn_free(scan0);
        return KILN_OK;
    }
    for (int j = 0; j < nv && st == KILN_OK; j++) {
        c->out[j] = exact ? bout[1 + j] : hi[j];
        c->out[j].value = NULL;
        c->out[j].data_dependent = !exact;
        if (!exact && kn_dtype_is_handle((int)c->out[j].dtype)) {
            c->out[j].count_known = false; /* the loop may stop after any iteration */
            c->out[j].data_dependent = false;
        }
    }
    kn_free(hi);
    kn_free(scan0);
    return st;
}

/* ---- a trip bound from the condition ----
 * A loop that stops on a counter often has no usable M: TorchScript writes
 * M = INT64_MAX for a `for` with a `break` and puts `i + 1 < n` into the
 * body's condition, next to the data-dependent stop (`&& not done`). When
 * the condition is a comparison of an affine function of the iteration
 * (the iteration number, or a carried integer that the body steps by a
 * constant from a known start) with a known value, possibly under And,
 * the iteration after which it is false bounds the trip count. */

typedef struct kn_affine {
    int64_t base, step; /* value at iteration i: base + step * i */
} kn_affine;

#define AFFINE_MAX ((int64_t)1 << 40)

/* A known integer scalar: a body constant, or a capture whose outer value
 * is known. */
static bool known_int(const kn_infer *c, const kn_net *g, int nv, int t, int64_t *v) {
    const kn_tensor *x = &g->tensors[t];
    if (x->flags & KN_T_CONST) {
        if (kn_numel(x->value.rank, x->value.dims) != 1 || !x->value.data)
            return false;
        if (x->value.dtype == KILN_DTYPE_INT64) {
            memcpy(v, x->value.data, sizeof *v);
            return true;
        }
        if (x->value.dtype == KILN_DTYPE_INT32) {
            int32_t w;
            memcpy(&w, x->value.data, sizeof w);
            *v = w;
            return true;
        }
        return false;
    }
    for (int k = 2 + nv; k < g->n_inputs && k < c->n_in; k++)
        if (g->inputs[k] == t)
            return c->in[k].value && kn_numel(c->in[k].rank, c->in[k].dims) == 1 &&
                   (c->in[k].dtype == KILN_DTYPE_INT64 || c->in[k].dtype == KILN_DTYPE_INT32) &&
                   (*v = kn_value_int(&c->in[k], 0), true);
    return false;
}

static bool affine_of(const kn_infer *c, const kn_net *g, int nv, int t, int depth, kn_affine *a);

/* Carried value j's step: its body output is the input plus a constant. */
static bool carried_step(const kn_infer *c, const kn_net *g, int nv, int j, int64_t *step) {
    int in = g->inputs[2 + j], out = g->outputs[1 + j];
    int pr = g->tensors[out].producer;
    if (pr < 0)
        return false;
    const kn_node *p = &g->nodes[pr];
    if (p->domain[0] || p->n_in != 2 || p->in[0] < 0 || p->in[1] < 0)
        return false;
    bool add = strcmp(p->op_type, "Add") == 0, sub = strcmp(p->op_type, "Sub") == 0;
    if (add && p->in[1] == in && known_int(c, g, nv, p->in[0], step))
        return true;
    if ((add || sub) && p->in[0] == in && known_int(c, g, nv, p->in[1], step)) {
        if (sub)
            *step = -*step;
        return true;
    }
    return false;
}

static bool affine_of(const kn_infer *c, const kn_net *g, int nv, int t, int depth, kn_affine *a) {
    int64_t v;
    if (depth > 16)
        return false;
    if (known_int(c, g, nv, t, &v)) {
        *a = (kn_affine){v, 0};
        return v > -AFFINE_MAX && v < AFFINE_MAX;
    }
    if (t == g->inputs[0]) { /* the iteration number */
        *a = (kn_affine){0, 1};
        return true;
    }
    for (int j = 0; j < nv; j++)
        if (t == g->inputs[2 + j]) {
            const kn_tinfo *x0 = &c->in[2 + j];
            int64_t step;
            if (!x0->value || kn_numel(x0->rank, x0->dims) != 1 ||
                (x0->dtype != KILN_DTYPE_INT64 && x0->dtype != KILN_DTYPE_INT32) ||
                !carried_step(c, g, nv, j, &step))
                return false;
            *a = (kn_affine){kn_value_int(x0, 0), step};
            return a->base > -AFFINE_MAX && a->base < AFFINE_MAX && step > -AFFINE_MAX &&
                   step < AFFINE_MAX;
        }
    int pr = g->tensors[t].producer;
    if (pr < 0)
        return false;
    const kn_node *p = &g->nodes[pr];
    if (p->domain[0] || p->n_in < 1 || p->in[0] < 0)
        return false;
    if (strcmp(p->op_type, "Identity") == 0 ||
        (strcmp(p->op_type, "Cast") == 0 && kn_attr_int(p, "to", 0) == KILN_DTYPE_INT64))
        return affine_of(c, g, nv, p->in[0], depth + 1, a);
    bool add = strcmp(p->op_type, "Add") == 0, sub = strcmp(p->op_type, "Sub") == 0;
    kn_affine x, y;
    if ((add || sub) && p->n_in == 2 && p->in[1] >= 0 &&
        affine_of(c, g, nv, p->in[0], depth + 1, &x) &&
        affine_of(c, g, nv, p->in[1], depth + 1, &y)) {
        *a = add ? (kn_affine){x.base + y.base, x.step + y.step}
                 : (kn_affine){x.base - y.base, x.step - y.step};
        return a->base > -AFFINE_MAX && a->base < AFFINE_MAX && a->step > -AFFINE_MAX &&
               a->step < AFFINE_MAX;
    }
    return false;
}

/* The first iteration at whose end condition tensor t is false (so that
 * the loop runs at most that many plus one), or -1 when not known. *exact:
 * t is that comparison alone (it is false nowhere before). */
static int64_t cond_bound(const kn_infer *c, const kn_net *g, int nv, int t, int depth,
                          bool *exact) {
    *exact = false;
    if (depth > 16 || t < 0)
        return -1;
    int pr = g->tensors[t].producer;
    if (pr < 0)
        return -1;
    const kn_node *p = &g->nodes[pr];
    if (p->domain[0] || p->n_in < 1 || p->in[0] < 0)
        return -1;
    if (strcmp(p->op_type, "Identity") == 0 ||
        (strcmp(p->op_type, "Cast") == 0 && kn_attr_int(p, "to", 0) == KILN_DTYPE_BOOL))
        return cond_bound(c, g, nv, p->in[0], depth + 1, exact);
    if (strcmp(p->op_type, "And") == 0 && p->n_in == 2) {
        bool e;
        int64_t a = cond_bound(c, g, nv, p->in[0], depth + 1, &e);
        int64_t b = cond_bound(c, g, nv, p->in[1], depth + 1, &e);
        return a < 0 ? b : b < 0 ? a : a < b ? a : b;
    }
    bool lt = strcmp(p->op_type, "Less") == 0, le = strcmp(p->op_type, "LessOrEqual") == 0;
    bool gt = strcmp(p->op_type, "Greater") == 0, ge = strcmp(p->op_type, "GreaterOrEqual") == 0;
    kn_affine x, y;
    if (!(lt || le || gt || ge) || p->n_in != 2 || p->in[1] < 0 ||
        !affine_of(c, g, nv, p->in[0], depth + 1, &x) ||
        !affine_of(c, g, nv, p->in[1], depth + 1, &y))
        return -1;
    /* d(i) = lhs - rhs of "d(i) < 0" */
    kn_affine d = (lt || le) ? (kn_affine){x.base - y.base, x.step - y.step}
                             : (kn_affine){y.base - x.base, y.step - x.step};
    if (le || ge)
        d.base -= 1; /* integers: d <= 0 is d - 1 < 0 */
    if (d.base >= 0) {
        *exact = true;
        return 0;
    }
    if (d.step <= 0)
        return -1; /* true at every iteration */
    *exact = true;
    return (-d.base + d.step - 1) / d.step; /* the first i with d(i) >= 0 */
}

static kiln_status infer_loop(kn_infer *c) {
    int nc = captures(c), nv = c->n_in - 2 - nc;
    if (nv < 0)
        return kn_node_error(c->node, KILN_ERR_PARSE, "Loop takes M and cond inputs");
    const kn_net *g = body_of(c, "body");
    KN_TRY(need_body(c, g, "body", 2 + nv + nc, 1 + nv));
    int nk = g->n_outputs - 1 - nv;
    if (c->n_out != nv + nk)
        return kn_node_error(c->node, KILN_ERR_PARSE, "Loop has %d outputs, its body gives %d",
                             c->n_out, nv + nk);
    bool has_m = kn_has_in(c, 0), has_cond = kn_has_in(c, 1);
    int64_t trip = -1;
    if (has_m && c->in[0].value)
        trip = kn_value_int(&c->in[0], 0);
    else if (has_m)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the trip count M is not known on the host");
    if (has_cond && c->in[1].value && kn_value_double(&c->in[1], 0) == 0)
        trip = 0;
    bool bound_exact = false;
    int64_t bound = trip < 0 || trip > LOOP_INFER_MAX
                        ? cond_bound(c, g, nv, g->outputs[0], 0, &bound_exact)
                        : -1;
    if (bound >= 0 && (trip < 0 || bound + 1 < trip)) {
        trip = bound + 1; /* the condition stops it by then */
        bound_exact &= !has_cond || (c->in[1].value && kn_value_double(&c->in[1], 0) != 0);
    } else {
        bound_exact = false;
    }
    if (trip < 0 && !has_m && nk > 0)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                             "a Loop without trip count M cannot have scan outputs here");
    kn_tinfo *bin = kn_calloc((size_t)(2 + nv + nc), sizeof *bin);
    kn_tinfo *bout = kn_calloc((size_t)g->n_outputs, sizeof *bout);
    if (!bin || !bout) {
        kn_free(bin);
        kn_free(bout);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    static const int64_t zero = 0;
    static const uint8_t yes = 1;
    bin[0].dtype = KILN_DTYPE_INT64;
    bin[0].value = &zero;
    bin[1].dtype = KILN_DTYPE_BOOL;
    bin[1].value = &yes;
    for (int k = 0; k < nv + nc; k++) {
        bin[2 + k] = c->in[2 + k];
        bin[2 + k].data_dependent = false;
    }
    /* a body whose shapes need a value known only at run time (a capture
     * the network computes) is inferred on an estimate: the outputs are
     * data-dependent, their planned size that estimate's */
    bool est = false;
    kiln_status st = kx_body_infer_est(c->node, g, 2 + nv + nc, bin, g->n_outputs, bout, &est);
    bool exact = (bound_exact || cond_passthrough(c, g, nv)) && !est;
    for (int j = 0; j < nv && st == KILN_OK; j++) {
        c->out[j] = bout[1 + j];
        if (kn_dtype_is_handle((int)c->out[j].dtype) && trip != 0) {
            /* a carried list changes in every iteration: its length and
             * element shapes after the loop are not followed */
            c->out[j].count_known = false;
            c->out[j].elem_known = false;
        }
        if (c->out[j].dtype != c->in[2 + j].dtype &&
            !(kn_dtype_is_handle((int)c->out[j].dtype) && kn_dtype_is_handle((int)c->in[2 + j].dtype)))
            st = kn_node_error(c->node, KILN_ERR_SHAPE,
                               "loop-carried value %d changes type in the body", j);
        if (trip == 0)
            kn_same_as(&c->out[j], &c->in[2 + j]);
    }
    if (st == KILN_OK && trip != 0)
        st = loop_shapes(c, g, nv, nc, nk, trip, exact, bin, bout);
    for (int j = 0; j < nk && st == KILN_OK; j++) {
        kn_tinfo *o = &c->out[nv + j];
        const kn_tinfo *b = &bout[1 + nv + j];
        if (b->rank + 1 > KILN_MAX_DIMS) {
            st = kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "scan output %d has too many dims", j);
            break;
        }
        o->dtype = b->dtype;
        o->rank = b->rank + 1;
        o->dims[0] = trip;
        memcpy(o->dims + 1, b->dims, (size_t)b->rank * sizeof b->dims[0]);
        o->data_dependent = trip > 0 && !exact;
    }
    kn_free(bin);
    kn_free(bout);
    return st;
}

/* Scan-8 (opset 8): input 0 is sequence_lens, and every state, scan input
 * and output has a batch axis first (captures do not); the scan axis is
 * the one after it. Later opsets: no batch, axes by attribute. */
static kiln_status infer_scan(kn_infer *c) {
    bool v8 = c->node->opset > 0 && c->node->opset < 9;
    int off = v8 ? 1 : 0;
    int nc = captures(c);
    int ns = (int)kn_attr_int(c->node, "num_scan_inputs", -1);
    int nin = c->n_in - off;
    int nv = nin - nc - ns;
    if (ns < 1 || nv < 0)
        return kn_node_error(c->node, KILN_ERR_PARSE, "num_scan_inputs %d does not fit %d inputs",
                             ns, nin - nc);
    const kn_net *g = body_of(c, "body");
    KN_TRY(need_body(c, g, "body", nin, nv));
    int nk = g->n_outputs - nv;
    if (c->n_out != nv + nk)
        return kn_node_error(c->node, KILN_ERR_PARSE, "Scan has %d outputs, its body gives %d",
                             c->n_out, nv + nk);
    size_t na = 0, noa = 0;
    const int64_t *in_axes = v8 ? NULL : kn_attr_ints(c->node, "scan_input_axes", &na);
    const int64_t *out_axes = v8 ? NULL : kn_attr_ints(c->node, "scan_output_axes", &noa);
    kn_tinfo *bin = kn_calloc((size_t)nin, sizeof *bin);
    kn_tinfo *bout = kn_calloc((size_t)g->n_outputs, sizeof *bout);
    if (!bin || !bout) {
        kn_free(bin);
        kn_free(bout);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = KILN_OK;
    bool est = false; /* the body's shapes need a value known only at run time */
    int64_t len = -1, batch = -1;
    for (int k = 0; k < nin && st == KILN_OK; k++) {
        const kn_tinfo *x = &c->in[off + k];
        bin[k] = *x;
        bin[k].data_dependent = false;
        if (k >= nv + ns)
            continue; /* a capture */
        bin[k].value = NULL;
        int cut = (k >= nv) + (v8 ? 1 : 0); /* axes to drop */
        if (x->rank < cut) {
            st = kn_node_error(c->node, KILN_ERR_SHAPE, "input %d has rank %d", off + k, x->rank);
            break;
        }
        if (v8) {
            if (batch >= 0 && x->dims[0] != batch)
                st = kn_node_error(c->node, KILN_ERR_SHAPE, "inputs differ in batch size");
            batch = x->dims[0];
        }
        int ax = v8 ? 1 : 0;
        if (k >= nv && !v8)
            st = kn_axis(c, na ? in_axes[k - nv] : 0, x->rank, &ax);
        if (st != KILN_OK)
            break;
        if (k >= nv) {
            if (len >= 0 && x->dims[ax] != len)
                st = kn_node_error(c->node, KILN_ERR_SHAPE,
                                   "scan inputs differ in length (%lld, %lld)", (long long)len,
                                   (long long)x->dims[ax]);
            len = x->dims[ax];
        }
        bin[k].rank = x->rank - cut;
        for (int d = 0, s = 0; d < x->rank; d++)
            if (!(v8 && d == 0) && !(k >= nv && d == ax))
                bin[k].dims[s++] = x->dims[d];
    }
    if (st == KILN_OK)
        st = kx_body_infer_est(c->node, g, nin, bin, g->n_outputs, bout, &est);
    for (int j = 0; j < nv && st == KILN_OK; j++) {
        c->out[j] = bout[j];
        if (v8) {
            c->out[j].rank = bout[j].rank + 1;
            c->out[j].dims[0] = batch;
            memcpy(c->out[j].dims + 1, bout[j].dims, (size_t)bout[j].rank * sizeof bout[j].dims[0]);
        }
    }
    for (int j = 0; j < nk && st == KILN_OK; j++) {
        const kn_tinfo *b = &bout[nv + j];
        kn_tinfo *o = &c->out[nv + j];
        int ax = v8 ? 1 : 0;
        o->dtype = b->dtype;
        o->rank = b->rank + 1 + (v8 ? 1 : 0);
        if (o->rank > KILN_MAX_DIMS) {
            st = kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "scan output %d has too many dims", j);
            break;
        }
        if (!v8)
            st = kn_axis(c, noa ? out_axes[j] : 0, o->rank, &ax);
        for (int d = 0, s = 0; st == KILN_OK && d < o->rank; d++)
            o->dims[d] = d == ax ? len : (v8 && d == 0) ? batch : b->dims[s++];
        o->data_dependent = est;
    }
    kn_free(bin);
    kn_free(bout);
    return st;
}

/* If reads its condition on the host (the branch decides the shapes), Loop
 * its trip count and first condition. */
const kn_op_schema kn_ops_control[] = {
    {"If", "", infer_if, 0},
    {"Loop", "", infer_loop, (1u << 0) | (1u << 1)},
    {"Scan", "", infer_scan, 0},
};
const size_t kn_ops_control_count = KN_ARRAY_LEN(kn_ops_control);
