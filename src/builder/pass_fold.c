/* pass_fold.c - constant folding. A node whose inputs are all constants is
 * evaluated once with the reference kernels (kbld_fold_node). Shape and Size
 * of a tensor whose shape is the same at every profile point become
 * constants, as does Gather over a Shape when only the gathered dimensions
 * are static (the batch may stay dynamic); folding then continues
 * downstream, which removes the Shape -> Gather -> Concat -> Reshape chains
 * of traced exports. */
#include <string.h>

#include "graph/ops_tensor.h"
#include "passes.h"

/* Outputs larger than this stay computed at run time. */
#define FOLD_MAX_BYTES ((size_t)64 << 20)
/* Ops that make a large tensor out of a small description: folding them
 * buys nothing at run time and stores the whole tensor in the plan, so only
 * small results are folded. */
#define FOLD_EXPAND_MAX_BYTES ((size_t)1 << 20)

static bool never_fold(const kn_node *n) {
    static const char *const ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                      "RandomUniformLike", "Multinomial", "Bernoulli", "If",
                                      "Loop", "Scan", "Identity"};
    if (n->domain[0] && strcmp(n->domain, KN_DOMAIN_KILN) != 0)
        return true; /* plugins and foreign domains have no reference kernel */
    if (kpass_is(n, "Cast") && kn_attr_int(n, "to", 0) == KILN_DTYPE_STRING)
        return true; /* a network keeps no string constants (their text is a kernel's) */
    for (size_t i = 0; i < KN_ARRAY_LEN(ops); i++)
        if (strcmp(n->op_type, ops[i]) == 0)
            return true;
    /* sequence and optional values are lists made at run time, never constants */
    if (!n->domain[0] && (strncmp(n->op_type, "Sequence", 8) == 0 ||
                          strncmp(n->op_type, "Optional", 8) == 0 ||
                          strcmp(n->op_type, "SplitToSequence") == 0 ||
                          strcmp(n->op_type, "ConcatFromSequence") == 0))
        return true;
    return false;
}

static bool expands(const kn_node *n) {
    static const char *const ops[] = {"ConstantOfShape", "Expand", "Tile", "Range", "EyeLike",
                                      "Resize", "Upsample"};
    for (size_t i = 0; i < KN_ARRAY_LEN(ops); i++)
        if (kpass_is(n, ops[i]))
            return true;
    return false;
}

/* Bytes the node's outputs will take, from the inferred shapes; 0 when unknown. */
static size_t output_bytes(const kpass *p, const kn_node *n) {
    size_t total = 0;
    for (int j = 0; j < n->n_out; j++) {
        const kn_tinfo *ti = kpass_shape(p, 0, n->out[j]);
        if (!ti)
            continue;
        int64_t cnt = kn_numel(ti->rank, ti->dims);
        if (cnt < 0)
            continue;
        size_t b;
        if (kn_mul_overflow((size_t)cnt, kiln_dtype_size(ti->dtype), &b))
            return SIZE_MAX;
        total += b;
    }
    return total;
}

/* Give tensor t a 1-D (or, when scalar, 0-D) int64 value. */
static kiln_status set_int64(kn_net *net, int t, const int64_t *v, int64_t n, bool scalar) {
    kn_tdata d;
    int64_t dims[1] = {n};
    KN_TRY(kn_tdata_alloc(&d, KILN_DTYPE_INT64, scalar ? 0 : 1, dims));
    if (n)
        memcpy(d.data, v, (size_t)n * sizeof(int64_t));
    kn_tensor_set_value(&net->tensors[t], &d);
    net->tensors[t].producer = -1;
    return KILN_OK;
}

/* The [start, end) range of dimensions a Shape node reports (opset 15). */
static void shape_range(const kn_node *n, int rank, int *start, int *end) {
    int64_t s, e;
    kn_shape_window(n, rank, &s, &e);
    *start = (int)s;
    *end = (int)e;
}

/* Rank of x and whether its dimension d is the same everywhere (value in
 * *v): from the profiles for a graph input, else from inference. */
static int input_index(const kn_net *net, int x) {
    for (int i = 0; i < net->n_inputs; i++)
        if (net->inputs[i] == x)
            return i;
    return -1;
}

static int known_rank(const kpass *p, int x) {
    int k = input_index(p->net, x);
    if (k >= 0 && p->b->meta && p->b->meta->n_profiles > 0)
        return p->b->meta->profiles[0].rank[k];
    return kpass_rank(p, x);
}

static bool dim_static(const kpass *p, int x, int d, int64_t *v) {
    int k = input_index(p->net, x);
    const kp_meta *meta = p->b->meta;
    if (k >= 0 && meta && meta->n_profiles > 0) {
        *v = meta->profiles[0].min[k][d];
        for (int pr = 0; pr < meta->n_profiles; pr++) {
            const kp_profile *q = &meta->profiles[pr];
            if (q->min[k][d] != *v || q->opt[k][d] != *v || q->max[k][d] != *v)
                return false;
        }
        return true;
    }
    if (p->shapes_state != 1 || x >= p->shapes_tensors || p->dd[x])
        return false;
    *v = kpass_shape(p, 0, x)->dims[d];
    for (int pt = 1; pt < p->n_points; pt++)
        if (kpass_shape(p, pt, x)->dims[d] != *v)
            return false;
    return true;
}

/* A graph input's shape when it is the same at every profile point, read
 * from the profiles themselves (no inference needed). */
static bool input_static_shape(const kpass *p, int x, kn_tinfo *out) {
    const kp_meta *meta = p->b->meta;
    int k = input_index(p->net, x);
    if (k < 0 || !meta || meta->n_profiles < 1)
        return false;
    memset(out, 0, sizeof *out);
    out->rank = meta->profiles[0].rank[k];
    out->dtype = p->net->tensors[x].dtype;
    if (out->rank < 0 || out->rank > KILN_MAX_DIMS)
        return false;
    for (int pr = 1; pr < meta->n_profiles; pr++)
        if (meta->profiles[pr].rank[k] != out->rank)
            return false;
    for (int d = 0; d < out->rank; d++)
        if (!dim_static(p, x, d, &out->dims[d]))
            return false;
    return true;
}

/* Shape or Size of a tensor with one shape everywhere. */
static kiln_status fold_shape(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    *done = false;
    int x = n->in[0];
    kn_tinfo s;
    if (kpass_is_const(net, x)) {
        memset(&s, 0, sizeof s);
        s.rank = net->tensors[x].value.rank;
        memcpy(s.dims, net->tensors[x].value.dims, sizeof s.dims);
    } else if (!input_static_shape(p, x, &s) && !kpass_static_shape(p, x, &s)) {
        return KILN_OK;
    }
    if (kpass_is(n, "Shape")) {
        int a, e;
        shape_range(n, s.rank, &a, &e);
        KN_TRY(set_int64(net, n->out[0], s.dims + a, e - a, false));
    } else {
        int64_t cnt = kn_numel(s.rank, s.dims);
        KN_TRY(set_int64(net, n->out[0], &cnt, 1, true));
    }
    *done = true;
    return KILN_OK;
}

/* The Shape node producing tensor t (not yet folded), its input x and the
 * [a, e) range of x's dims it reports; false when t is no such value. */
static bool shape_source(const kpass *p, int t, int *x, int *a, int *e) {
    int sp = kpass_producer(p, t);
    if (sp < 0 || !kpass_is(&p->net->nodes[sp], "Shape"))
        return false;
    *x = p->net->nodes[sp].in[0];
    int rank = *x >= 0 ? known_rank(p, *x) : -1;
    if (rank < 0)
        return false;
    shape_range(&p->net->nodes[sp], rank, a, e);
    return true;
}

/* Gather(Shape(x), constant indices) where the gathered dims are static. */
static kiln_status fold_shape_gather(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *g = &net->nodes[i];
    int x, a, e;
    *done = false;
    if (g->n_in < 2 || !kpass_is_const(net, g->in[1]) || kn_attr_int(g, "axis", 0) != 0 ||
        !shape_source(p, g->in[0], &x, &a, &e))
        return KILN_OK;
    const kn_tdata *idx = &net->tensors[g->in[1]].value;
    int64_t cnt = kpass_numel(idx);
    if (cnt < 0 || cnt > KILN_MAX_DIMS || idx->rank > 1)
        return KILN_OK;
    int64_t vals[KILN_MAX_DIMS];
    for (int64_t k = 0; k < cnt; k++) {
        int64_t d = kpass_value_int(idx, k);
        if (d < 0)
            d += e - a;
        if (d < 0 || d >= e - a)
            return KILN_OK;
        if (!dim_static(p, x, (int)(d + a), &vals[k]))
            return KILN_OK;
    }
    KN_TRY(set_int64(net, g->out[0], vals, cnt, idx->rank == 0));
    *done = true;
    return KILN_OK;
}

/* One constant integer of an optional Slice input (default dflt). */
static bool slice_arg(const kn_net *net, const kn_node *n, int slot, int64_t dflt, int64_t *v) {
    *v = dflt;
    if (n->n_in <= slot || n->in[slot] < 0)
        return true;
    if (!kpass_is_const(net, n->in[slot]) || kpass_numel(&net->tensors[n->in[slot]].value) != 1)
        return false;
    *v = kpass_value_int(&net->tensors[n->in[slot]].value, 0);
    return true;
}

/* Slice(Shape(x), start, end, axes=[0], step) where the sliced dims are
 * static (x.shape[1:] with a dynamic batch, say). */
static kiln_status fold_shape_slice(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *s = &net->nodes[i];
    int x, a, e;
    *done = false;
    int64_t start, end, axis, step;
    if (s->n_in < 3 || !shape_source(p, s->in[0], &x, &a, &e) ||
        !slice_arg(net, s, 1, 0, &start) || !slice_arg(net, s, 2, 0, &end) ||
        !slice_arg(net, s, 3, 0, &axis) || !slice_arg(net, s, 4, 1, &step) ||
        (axis != 0 && axis != -1) || step == 0 || s->in[1] < 0 || s->in[2] < 0)
        return KILN_OK;
    int64_t len = e - a;
    if (start < 0)
        start += len;
    if (end < 0)
        end += len;
    int64_t vals[KILN_MAX_DIMS], cnt = 0;
    if (step > len + 1) /* one element at most; keeps k += step from overflowing */
        step = len + 1;
    if (step < -(len + 1))
        step = -(len + 1);
    if (step > 0) {
        start = start < 0 ? 0 : (start > len ? len : start);
        end = end < 0 ? 0 : (end > len ? len : end);
        for (int64_t k = start; k < end; k += step)
            if (!dim_static(p, x, (int)(k + a), &vals[cnt++]))
                return KILN_OK;
    } else {
        start = start < 0 ? 0 : (start > len - 1 ? len - 1 : start);
        end = end < -1 ? -1 : (end > len - 1 ? len - 1 : end);
        for (int64_t k = start; k > end; k += step)
            if (!dim_static(p, x, (int)(k + a), &vals[cnt++]))
                return KILN_OK;
    }
    KN_TRY(set_int64(net, s->out[0], vals, cnt, false));
    *done = true;
    return KILN_OK;
}

static bool all_inputs_const(const kn_net *net, const kn_node *n) {
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] >= 0 && !kpass_is_const(net, n->in[j]))
            return false;
    return true;
}

kiln_status kpass_fold(kpass *p, int *changed) {
    kn_net *net = p->net;
    /* Inference is needed to size constant results and for shapes of
     * tensors other than graph inputs (whose shapes the profiles give). */
    bool any = false, want_shapes = false;
    for (int i = 0; i < p->n_nodes && !want_shapes; i++) {
        const kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        bool shape_op = (kpass_is(n, "Shape") || kpass_is(n, "Size")) && n->n_in > 0;
        bool folds = all_inputs_const(net, n) && !never_fold(n);
        any = any || shape_op || folds;
        want_shapes = folds || (shape_op && !kpass_is_const(net, n->in[0]) &&
                                input_index(net, n->in[0]) < 0);
    }
    if (!any)
        return KILN_OK;
    /* Static shapes come from the same profile-point inference that
     * kbld_static_shapes does, kept once per pass instead of redone. */
    if (want_shapes)
        KN_TRY(kpass_need_shapes(p));
    kiln_status st = KILN_OK;
    for (int i = 0; i < p->n_nodes && st == KILN_OK; i++) {
        if (!kpass_free(p, i))
            continue;
        kn_node *n = &net->nodes[i];
        bool done = false;
        if ((kpass_is(n, "Shape") || kpass_is(n, "Size")) && n->n_in >= 1 && n->in[0] >= 0 &&
            n->n_out >= 1 && n->out[0] >= 0) {
            st = fold_shape(p, i, &done);
        } else if (kpass_is(n, "Gather") && n->n_out >= 1 && !all_inputs_const(net, n)) {
            st = fold_shape_gather(p, i, &done);
        } else if (kpass_is(n, "Slice") && n->n_out >= 1 && !all_inputs_const(net, n)) {
            st = fold_shape_slice(p, i, &done);
        } else if (all_inputs_const(net, n) && !never_fold(n)) {
            size_t bytes = output_bytes(p, n);
            if (bytes > FOLD_MAX_BYTES || (expands(n) && bytes > FOLD_EXPAND_MAX_BYTES)) {
                kn_log(KILN_LOG_VERBOSE, "constant-fold: kept %s '%s' (%zu bytes of output)",
                       n->op_type, n->name, bytes);
                continue;
            }
            st = kbld_fold_node(p->b, i);
            if (st == KILN_OK) {
                done = true;
            } else if (st != KILN_ERR_OUT_OF_MEMORY) {
                kn_log(KILN_LOG_VERBOSE, "constant-fold: kept %s '%s': %s", n->op_type, n->name,
                       kiln_last_error());
                kn_error_clear();
                st = KILN_OK;
            }
        }
        if (st == KILN_OK && done) {
            kn_log(KILN_LOG_VERBOSE, "constant-fold: %s '%s' -> constant", n->op_type, n->name);
            kpass_kill(p, i);
            (*changed)++;
        }
    }
    return st;
}
