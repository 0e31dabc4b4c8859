/* passes.c - the optimization pass manager (kbld_optimize) and the helpers
 * passes share: reader tables, shapes at every profile point, constants and
 * node rewriting. */
#include <float.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "kiln/kiln_builder.h"
#include "passes.h"

/* ---------------- per-pass state ---------------- */

static void shapes_free(kpass *p) {
    for (int k = 0; k < p->n_points; k++)
        kn_free(p->pts[k]);
    kn_free(p->pts);
    kn_free(p->dd);
    p->pts = NULL;
    p->dd = NULL;
    p->n_points = 0;
    p->shapes_state = 0;
    p->shapes_tensors = 0;
}

static void readers_free(kpass *p) {
    kn_free(p->uses);
    kn_free(p->rd_start);
    kn_free(p->rd_node);
    kn_free(p->is_output);
    kn_free(p->touched);
    p->uses = p->rd_start = p->rd_node = NULL;
    p->is_output = p->touched = NULL;
}

static void kpass_fini(kpass *p) {
    readers_free(p);
    kn_free(p->moved_head);
    kn_free(p->alias);
    kn_free(p->moved);
    p->moved_head = p->alias = NULL;
    p->moved = NULL;
    p->n_moved_tensors = p->n_moved = p->cap_moved = 0;
    shapes_free(p);
}

/* Build the reader tables for the network as it is now. */
static kiln_status readers_build(kpass *p) {
    kn_net *net = p->net;
    readers_free(p);
    p->n_tensors = net->n_tensors;
    p->n_nodes = net->n_nodes;
    size_t nt = (size_t)net->n_tensors + 1;
    KN_TRY(kn_net_use_counts(net, &p->uses));
    p->rd_start = kn_calloc(nt + 1, sizeof(int));
    p->is_output = kn_calloc(nt, sizeof(bool));
    p->touched = kn_calloc((size_t)net->n_nodes + 1, sizeof(bool));
    size_t total = 0;
    for (int i = 0; i < net->n_nodes; i++)
        if (!net->nodes[i].dead)
            total += (size_t)net->nodes[i].n_in;
    p->rd_node = kn_calloc(total + 1, sizeof(int));
    if (!p->rd_start || !p->is_output || !p->touched || !p->rd_node) {
        readers_free(p);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int k = 0; k < net->n_outputs; k++)
        p->is_output[net->outputs[k]] = true;
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                p->rd_start[n->in[j] + 1]++;
    }
    for (int t = 0; t < net->n_tensors; t++)
        p->rd_start[t + 1] += p->rd_start[t];
    int *fill = kn_calloc(nt, sizeof(int));
    if (!fill) {
        readers_free(p);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++) {
            int t = n->in[j];
            if (t >= 0)
                p->rd_node[p->rd_start[t] + fill[t]++] = i;
        }
    }
    kn_free(fill);
    return KILN_OK;
}

/* ---------------- shapes ---------------- */

static bool same_point(const kp_profile *a, const int64_t (*da)[KILN_MAX_DIMS],
                       const int64_t (*db)[KILN_MAX_DIMS]) {
    for (int k = 0; k < a->n_inputs; k++)
        if (a->rank[k] > 0 && memcmp(da[k], db[k], (size_t)a->rank[k] * sizeof(int64_t)) != 0)
            return false;
    return true;
}

kiln_status kpass_need_shapes(kpass *p) {
    if (p->shapes_state != 0)
        return KILN_OK;
    const kp_meta *meta = p->b->meta;
    if (!meta || meta->n_profiles < 1) {
        p->shapes_state = -1;
        return KILN_OK;
    }
    int cap = meta->n_profiles * 3;
    p->pts = kn_calloc((size_t)cap, sizeof *p->pts);
    p->dd = kn_calloc((size_t)p->net->n_tensors + 1, sizeof(bool));
    if (!p->pts || !p->dd) {
        shapes_free(p);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = KILN_OK;
    for (int pr = 0; pr < meta->n_profiles && st == KILN_OK; pr++) {
        const kp_profile *prof = &meta->profiles[pr];
        const int64_t (*pd[3])[KILN_MAX_DIMS] = {(const int64_t (*)[KILN_MAX_DIMS])prof->min,
                                                 (const int64_t (*)[KILN_MAX_DIMS])prof->opt,
                                                 (const int64_t (*)[KILN_MAX_DIMS])prof->max};
        for (int w = KBLD_MIN; w <= KBLD_MAX && st == KILN_OK; w++) {
            bool dup = false;
            for (int v = KBLD_MIN; v < w && !dup; v++)
                dup = same_point(prof, pd[v], pd[w]);
            if (dup)
                continue;
            st = kbld_infer(p->b, pr, (kbld_which)w, &p->pts[p->n_points]);
            if (st == KILN_OK)
                p->n_points++;
        }
    }
    if (st == KILN_ERR_OUT_OF_MEMORY) {
        shapes_free(p);
        return st;
    }
    if (st != KILN_OK) {
        kn_log(KILN_LOG_VERBOSE, "passes: shape inference failed (%s); rewrites that need "
               "shapes are skipped", kiln_last_error());
        kn_error_clear();
        shapes_free(p);
        p->shapes_state = -1;
        return KILN_OK;
    }
    p->shapes_tensors = p->net->n_tensors;
    /* A data-dependent dimension is only an upper bound; everything computed
     * from it is equally uncertain. */
    const kn_net *net = p->net;
    for (int t = 0; t < net->n_tensors; t++)
        for (int k = 0; k < p->n_points; k++)
            if (p->pts[k][t].data_dependent)
                p->dd[t] = true;
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        bool any = false;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0 && p->dd[n->in[j]])
                any = true;
        for (int j = 0; any && j < n->n_out; j++)
            if (n->out[j] >= 0)
                p->dd[n->out[j]] = true;
    }
    p->shapes_state = 1;
    return KILN_OK;
}

bool kpass_any(const kpass *p, bool (*pred)(const kn_node *n)) {
    for (int i = 0; i < p->n_nodes; i++)
        if (!p->net->nodes[i].dead && pred(&p->net->nodes[i]))
            return true;
    return false;
}

kiln_status kpass_shapes_if(kpass *p, bool (*pred)(const kn_node *n), bool *ready) {
    *ready = false;
    if (!kpass_any(p, pred))
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p));
    *ready = p->shapes_state == 1;
    return KILN_OK;
}

const kn_tinfo *kpass_shape(const kpass *p, int k, int t) {
    if (p->shapes_state != 1 || t < 0 || t >= p->shapes_tensors || k < 0 || k >= p->n_points)
        return NULL;
    const kn_tinfo *ti = &p->pts[k][t];
    if (ti->rank < 0 || ti->dtype == KILN_DTYPE_UNDEFINED)
        return NULL;
    return ti;
}

static bool tinfo_same(const kn_tinfo *a, const kn_tinfo *b) {
    return a->rank == b->rank &&
           (a->rank == 0 || memcmp(a->dims, b->dims, (size_t)a->rank * sizeof(int64_t)) == 0);
}

bool kpass_same_shape(const kpass *p, int a, int b) {
    if (p->shapes_state != 1)
        return false;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *x = kpass_shape(p, k, a), *y = kpass_shape(p, k, b);
        if (!x || !y || !tinfo_same(x, y))
            return false;
    }
    return true;
}

bool kpass_static_shape(const kpass *p, int t, kn_tinfo *out) {
    if (p->shapes_state != 1 || t >= p->shapes_tensors || p->dd[t])
        return false;
    const kn_tinfo *first = kpass_shape(p, 0, t);
    if (!first)
        return false;
    for (int k = 1; k < p->n_points; k++) {
        const kn_tinfo *x = kpass_shape(p, k, t);
        if (!x || !tinfo_same(x, first))
            return false;
    }
    if (out) {
        *out = *first;
        out->value = NULL;
    }
    return true;
}

kiln_dtype kpass_dtype(const kpass *p, int t) {
    const kn_tensor *x = &p->net->tensors[t];
    if (x->flags & KN_T_CONST)
        return x->value.dtype;
    const kn_tinfo *ti = kpass_shape(p, 0, t);
    if (ti)
        return ti->dtype;
    return x->dtype;
}

int kpass_rank(const kpass *p, int t) {
    const kn_tensor *x = &p->net->tensors[t];
    if (x->flags & KN_T_CONST)
        return x->value.rank;
    if (p->shapes_state != 1)
        return (x->flags & KN_T_INPUT) ? x->rank : -1;
    int r = -1;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *ti = kpass_shape(p, k, t);
        if (!ti || (r >= 0 && ti->rank != r))
            return -1;
        r = ti->rank;
    }
    return r;
}

/* ---------------- readers ---------------- */

bool kpass_free(const kpass *p, int i) {
    return i >= 0 && i < p->net->n_nodes && !p->net->nodes[i].dead &&
           (i >= p->n_nodes || !p->touched[i]);
}

void kpass_touch(kpass *p, int i) {
    if (i < p->n_nodes)
        p->touched[i] = true;
}

void kpass_kill(kpass *p, int i) {
    p->net->nodes[i].dead = 1;
    kpass_touch(p, i);
}

int kpass_sole_reader(const kpass *p, int t) {
    if (t < 0 || t >= p->n_tensors || p->uses[t] != 1 || p->is_output[t])
        return -1;
    if (p->rd_start[t + 1] - p->rd_start[t] != 1)
        return -1;
    int r = p->rd_node[p->rd_start[t]];
    return kpass_free(p, r) ? r : -1;
}

int kpass_producer(const kpass *p, int t) {
    if (t < 0)
        return -1;
    int i = p->net->tensors[t].producer;
    if (!kpass_free(p, i))
        return -1;
    const kn_node *n = &p->net->nodes[i];
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j] == t)
            return i;
    return -1;
}

bool kpass_is(const kn_node *n, const char *op) {
    return n->domain[0] == 0 && strcmp(n->op_type, op) == 0;
}

bool kpass_is_kiln(const kn_node *n, const char *op) {
    return strcmp(n->domain, KN_DOMAIN_KILN) == 0 && strcmp(n->op_type, op) == 0;
}

/* ---------------- constants ---------------- */

bool kpass_is_const(const kn_net *net, int t) {
    return t >= 0 && (net->tensors[t].flags & KN_T_CONST);
}

int64_t kpass_numel(const kn_tdata *v) { return kn_numel(v->rank, v->dims); }

double kpass_value_at(const kn_tdata *v, int64_t k) {
    const uint8_t *b = (const uint8_t *)v->data + (size_t)k * kiln_dtype_size(v->dtype);
    switch (v->dtype) {
    case KILN_DTYPE_FLOAT: { float x; memcpy(&x, b, 4); return x; }
    case KILN_DTYPE_DOUBLE: { double x; memcpy(&x, b, 8); return x; }
    case KILN_DTYPE_FLOAT16: { uint16_t h; memcpy(&h, b, 2); return kn_half_to_float(h); }
    case KILN_DTYPE_BFLOAT16: { uint16_t h; memcpy(&h, b, 2); return kn_bf16_to_float(h); }
    case KILN_DTYPE_INT64: { int64_t x; memcpy(&x, b, 8); return (double)x; }
    case KILN_DTYPE_INT32: { int32_t x; memcpy(&x, b, 4); return x; }
    case KILN_DTYPE_INT16: { int16_t x; memcpy(&x, b, 2); return x; }
    case KILN_DTYPE_INT8: return (int8_t)b[0];
    case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL: return b[0];
    case KILN_DTYPE_UINT16: { uint16_t x; memcpy(&x, b, 2); return x; }
    case KILN_DTYPE_UINT32: { uint32_t x; memcpy(&x, b, 4); return x; }
    case KILN_DTYPE_UINT64: { uint64_t x; memcpy(&x, b, 8); return (double)x; }
    default: return 0.0;
    }
}

int64_t kpass_value_int(const kn_tdata *v, int64_t k) {
    const uint8_t *b = (const uint8_t *)v->data + (size_t)k * kiln_dtype_size(v->dtype);
    if (v->dtype == KILN_DTYPE_INT64) {
        int64_t x;
        memcpy(&x, b, 8);
        return x;
    }
    if (v->dtype == KILN_DTYPE_UINT64) {
        uint64_t x;
        memcpy(&x, b, 8);
        return x > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x;
    }
    double d = kpass_value_at(v, k);
    if (d >= 9.2e18)
        return INT64_MAX;
    if (d <= -9.2e18)
        return INT64_MIN;
    return (int64_t)d;
}

bool kpass_const_scalar(const kn_net *net, int t, double *out) {
    if (!kpass_is_const(net, t))
        return false;
    const kn_tdata *v = &net->tensors[t].value;
    if (kpass_numel(v) != 1 || kiln_dtype_size(v->dtype) == 0 || v->dtype == KILN_DTYPE_STRING)
        return false;
    *out = kpass_value_at(v, 0);
    return true;
}

kiln_status kpass_const_floats(const kn_net *net, int t, float **out) {
    const kn_tdata *v = &net->tensors[t].value;
    int64_t n = kpass_numel(v);
    if (v->dtype != KILN_DTYPE_FLOAT || n < 0 || v->nbytes != (size_t)n * sizeof(float))
        return kn_error(KILN_ERR_INTERNAL, "constant '%s' is not a float tensor",
                        net->tensors[t].name);
    float *f = kn_malloc((size_t)n * sizeof(float) + 1);
    if (!f)
        return KILN_ERR_OUT_OF_MEMORY;
    if (n)
        memcpy(f, v->data, (size_t)n * sizeof(float));
    *out = f;
    return KILN_OK;
}

kiln_status kpass_add_const(kn_net *net, const char *hint, kn_tdata *v, int *index) {
    int t;
    kiln_status st = kn_net_new_tensor(net, hint, &t);
    if (st != KILN_OK) {
        kn_tdata_free(v);
        return st;
    }
    kn_tensor_set_value(&net->tensors[t], v);
    *index = t;
    return KILN_OK;
}

kiln_status kpass_add_i64(kn_net *net, const char *hint, const int64_t *v, int64_t n, int *index) {
    kn_tdata d;
    KN_TRY(kn_tdata_alloc(&d, KILN_DTYPE_INT64, 1, &n));
    if (n)
        memcpy(d.data, v, sizeof(int64_t) * (size_t)n);
    return kpass_add_const(net, hint, &d, index);
}

bool kpass_const_index(const kn_net *net, int t, int64_t *v) {
    if (!kpass_is_const(net, t))
        return false;
    const kn_tdata *d = &net->tensors[t].value;
    if (d->rank != 0 || (d->dtype != KILN_DTYPE_INT64 && d->dtype != KILN_DTYPE_INT32))
        return false;
    *v = kpass_value_int(d, 0);
    return true;
}

bool kpass_matrix_rows(const kn_net *net, const kn_node *n) {
    bool gemm = kpass_is(n, "Gemm") || kpass_is_kiln(n, "Gemm");
    if (!gemm && !kpass_is(n, "MatMul") && !kpass_is_kiln(n, "MatMul"))
        return false;
    return n->n_in >= 2 && n->in[0] >= 0 && kpass_is_const(net, n->in[1]) &&
           net->tensors[n->in[1]].value.rank == 2 && !(gemm && kn_attr_int(n, "transA", 0));
}

/* ---------------- node rewriting ---------------- */

kiln_status kpass_retype(kn_node *n, const char *op_type, const char *domain, int opset) {
    char *o = kn_strdup(op_type), *d = kn_strdup(domain);
    if (!o || !d) {
        kn_free(o);
        kn_free(d);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kn_free(n->op_type);
    kn_free(n->domain);
    n->op_type = o;
    n->domain = d;
    n->opset = opset;
    return KILN_OK;
}

kiln_status kpass_join_name(kn_node *n, const char *other) {
    size_t a = strlen(n->name), b = strlen(other);
    char *s = kn_malloc(a + b + 4);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    memcpy(s, n->name, a);
    memcpy(s + a, " + ", 3);
    memcpy(s + a + 3, other, b + 1);
    kn_free(n->name);
    n->name = s;
    return KILN_OK;
}

kiln_status kpass_set_input(kn_node *n, int i, int t) {
    if (i >= n->n_in) {
        int *in = kn_realloc(n->in, (size_t)(i + 1) * sizeof(int));
        if (!in)
            return KILN_ERR_OUT_OF_MEMORY;
        for (int j = n->n_in; j <= i; j++)
            in[j] = -1;
        n->in = in;
        n->n_in = i + 1;
    }
    n->in[i] = t;
    return KILN_OK;
}

void kpass_set_output(kn_net *net, int node, int j, int t) {
    net->nodes[node].out[j] = t;
    net->tensors[t].producer = node;
}

kiln_status kpass_set_strings(kn_node *n, const char *name, const char *const *v, size_t count) {
    kn_attr a;
    memset(&a, 0, sizeof a);
    a.type = KN_ATTR_STRINGS;
    a.n = count;
    a.name = kn_strdup(name);
    a.strings = kn_calloc(count + 1, sizeof(char *));
    bool ok = a.name && a.strings;
    for (size_t i = 0; ok && i < count; i++)
        ok = (a.strings[i] = kn_strdup(v[i])) != NULL;
    if (!ok) {
        kn_attr_free(&a);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attrs[i].name, name) == 0) {
            kn_attr_free(&n->attrs[i]);
            n->attrs[i] = a;
            return KILN_OK;
        }
    kn_attr *na = kn_realloc(n->attrs, (size_t)(n->n_attr + 1) * sizeof *na);
    if (!na) {
        kn_attr_free(&a);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    n->attrs = na;
    n->attrs[n->n_attr++] = a;
    return KILN_OK;
}

/* Grow the moved-read tables to cover every tensor of the network. */
static bool moved_cover(kpass *p) {
    int nt = p->net->n_tensors;
    if (nt <= p->n_moved_tensors)
        return true;
    int cap = p->n_moved_tensors ? p->n_moved_tensors : 64;
    while (cap < nt)
        cap *= 2;
    int *head = kn_realloc(p->moved_head, (size_t)cap * sizeof *head);
    if (!head)
        return false;
    p->moved_head = head;
    int *alias = kn_realloc(p->alias, (size_t)cap * sizeof *alias);
    if (!alias)
        return false;
    p->alias = alias;
    for (int t = p->n_moved_tensors; t < cap; t++)
        p->moved_head[t] = p->alias[t] = -1;
    p->n_moved_tensors = cap;
    return true;
}

/* Node i reads `to` wherever it read `from`; the count of slots changed. */
static int redirect(kn_net *net, int i, int from, int to) {
    kn_node *n = &net->nodes[i];
    int count = 0;
    if (n->dead)
        return 0;
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] == from) {
            n->in[j] = to;
            count++;
        }
    return count;
}

static int replace_all(kn_net *net, int from, int to) {
    int count = 0;
    for (int i = 0; i < net->n_nodes; i++)
        count += redirect(net, i, from, to);
    return count;
}

/* A node that now reads `to` joins to's moved readers; false when memory ran out. */
static bool moved_push(kpass *p, int node, int to) {
    if (p->n_moved == p->cap_moved &&
        kn_grow((void **)&p->moved, &p->cap_moved, p->n_moved + 1, sizeof *p->moved) != KILN_OK)
        return false;
    p->moved[p->n_moved].node = node;
    p->moved[p->n_moved].next = p->moved_head[to];
    p->moved_head[to] = p->n_moved++;
    return true;
}

/* What t stands for after this pass's replacements (the path is
 * shortened on the way, so long chains of replacements stay cheap). */
static int alias_root(kpass *p, int t) {
    int root = t;
    while (root >= 0 && root < p->n_moved_tensors && p->alias[root] >= 0)
        root = p->alias[root];
    while (t != root) {
        int next = p->alias[t];
        p->alias[t] = root;
        t = next;
    }
    return root;
}

int kpass_replace_reads(kpass *p, int from, int to) {
    kn_net *net = p->net;
    if (from < 0 || from == to)
        return 0;
    if (!moved_cover(p)) {
        kn_error_clear();
        return replace_all(net, from, to); /* no memory for the tables: the slow way */
    }
    int count = 0;
    bool lost = false;
    /* readers when the pass began */
    if (from < p->n_tensors)
        for (int r = p->rd_start[from]; r < p->rd_start[from + 1]; r++) {
            int i = p->rd_node[r], c = redirect(net, i, from, to);
            if (c && to >= 0)
                lost |= !moved_push(p, i, to);
            count += c;
        }
    /* readers moved onto `from` earlier in this pass */
    for (int m = p->moved_head[from]; m >= 0; m = p->moved[m].next) {
        int i = p->moved[m].node, c = redirect(net, i, from, to);
        if (c && to >= 0)
            lost |= !moved_push(p, i, to);
        count += c;
    }
    p->moved_head[from] = -1;
    /* nodes added in this pass */
    for (int i = p->n_nodes; i < net->n_nodes; i++)
        count += redirect(net, i, from, to);
    if (lost) {
        /* the moved lists are incomplete: find the rest by scanning */
        kn_error_clear();
        count += replace_all(net, from, to);
    }
    if (to >= 0) {
        int root = alias_root(p, to);
        if (root != from)
            p->alias[from] = root;
    }
    return count;
}

/* Whether a live node writes t. */
static bool live_producer(const kn_net *net, int t) {
    int prod = net->tensors[t].producer;
    if (prod < 0 || prod >= net->n_nodes || net->nodes[prod].dead)
        return false;
    for (int k = 0; k < net->nodes[prod].n_out; k++)
        if (net->nodes[prod].out[k] == t)
            return true;
    return false;
}

void kpass_apply_aliases(kpass *p) {
    kn_net *net = p->net;
    if (!p->alias)
        return;
    for (int i = 0; i < net->n_nodes; i++) {
        kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++) {
            int t = n->in[j];
            if (t < 0 || t >= p->n_moved_tensors || p->alias[t] < 0)
                continue;
            /* a tensor that is produced again (or an input or constant) is
             * read on purpose */
            if (live_producer(net, t) || kpass_graph_io(net, t))
                continue;
            n->in[j] = alias_root(p, t);
        }
    }
}

void kpass_move_tensor(kpass *p, int prod, int from, int to) {
    kn_net *net = p->net;
    for (int j = 0; j < net->nodes[prod].n_out; j++)
        if (net->nodes[prod].out[j] == from)
            kpass_set_output(net, prod, j, to);
    kpass_touch(p, prod);
    kpass_replace_reads(p, from, to);
}

bool kpass_graph_io(const kn_net *net, int t) {
    for (int k = 0; k < net->n_outputs; k++)
        if (net->outputs[k] == t)
            return true;
    return (net->tensors[t].flags & (KN_T_INPUT | KN_T_CONST | KN_T_OUTPUT)) != 0;
}

kiln_status kpass_add_cast(kn_net *net, const char *what, int from, int to, kiln_dtype to_type) {
    char name[512];
    snprintf(name, sizeof name, "%s %s -> %s", what, net->tensors[from].name,
             kiln_dtype_name(to_type));
    int idx;
    KN_TRY(kn_net_add_node(net, name, "Cast", "", 13, 1, &from, 1, &to, &idx));
    return kn_node_set_int(&net->nodes[idx], "to", (int64_t)to_type);
}

/* Clip's bounds: inputs 1 and 2 from opset 11, attributes before. */
static bool clip_bounds(const kn_net *net, const kn_node *n, float *lo, float *hi) {
    *lo = -FLT_MAX;
    *hi = FLT_MAX;
    if (n->n_in > 1 || (n->opset >= 11)) {
        double v;
        if (n->n_in > 1 && n->in[1] >= 0) {
            if (!kpass_const_scalar(net, n->in[1], &v))
                return false;
            *lo = (float)v;
        }
        if (n->n_in > 2 && n->in[2] >= 0) {
            if (!kpass_const_scalar(net, n->in[2], &v))
                return false;
            *hi = (float)v;
        }
        return true;
    }
    *lo = kn_attr_float(n, "min", -FLT_MAX);
    *hi = kn_attr_float(n, "max", FLT_MAX);
    return true;
}

bool kpass_activation(const kn_net *net, const kn_node *n, const char **name, float *alpha,
                      float *beta) {
    *alpha = 0.f;
    *beta = 0.f;
    if (n->domain[0] != 0 || n->n_out < 1)
        return false;
    const char *op = n->op_type;
    static const char *const plain[] = {"Relu", "Sigmoid", "Tanh", "HardSwish", "Softplus"};
    for (size_t i = 0; i < KN_ARRAY_LEN(plain); i++)
        if (strcmp(op, plain[i]) == 0) {
            *name = plain[i];
            return true;
        }
    if (strcmp(op, "LeakyRelu") == 0) {
        *name = "LeakyRelu";
        *alpha = kn_attr_float(n, "alpha", 0.01f);
        return true;
    }
    if (strcmp(op, "Swish") == 0) { /* x * sigmoid(alpha x): QuickGELU at 1.702 */
        *name = "Swish";
        *alpha = kn_attr_float(n, "alpha", 1.0f);
        return true;
    }
    if (strcmp(op, "Elu") == 0) {
        *name = "Elu";
        *alpha = kn_attr_float(n, "alpha", 1.0f);
        return true;
    }
    if (strcmp(op, "HardSigmoid") == 0) {
        *name = "HardSigmoid";
        *alpha = kn_attr_float(n, "alpha", 0.2f);
        *beta = kn_attr_float(n, "beta", 0.5f);
        return true;
    }
    if (strcmp(op, "Gelu") == 0) {
        const char *approx = kn_attr_string(n, "approximate", "none");
        if (strcmp(approx, "none") == 0)
            *name = "Gelu";
        else if (strcmp(approx, "tanh") == 0)
            *name = "GeluTanh";
        else
            return false;
        return true;
    }
    if (strcmp(op, "Clip") == 0) {
        *name = "Clip";
        return clip_bounds(net, n, alpha, beta);
    }
    return false;
}

/* ---------------- the pass manager ---------------- */

typedef struct pass_entry {
    const char *name;
    kpass_fn fn;
    bool fusion;   /* skipped under KILN_BUILDER_FLAG_NO_FUSION */
} pass_entry;

/* Order matters inside a round: Gelu patterns must become Gelu nodes before
 * bias/activation fusion looks for activations, and BatchNormalization must
 * fold into a Conv before the Conv grows an activation. */
static const pass_entry kpass_rounds[] = {
    {"dead-code", kpass_dead_code, false},
    {"canonicalize", kpass_canonicalize, false},
    {"contrib", kpass_contrib, false}, /* no kernels for them: runs without fusion too */
    {"qdq", kpass_qdq, true}, /* before folding turns DQ(weights) into floats */
    {"constant-fold", kpass_fold, false},
    {"control", kpass_control, false}, /* If on a folded condition: its branch inlined */
    {"shape-sink", kpass_shape_sink, true}, /* frees layout chains from Shape readers */
    {"pad-conv", kpass_pad_conv, true},
    {"patchify", kpass_patchify, true}, /* before conv-bn: a patch conv has no BN */
    {"conv-bn", kpass_conv_bn, true},
    {"affine-conv", kpass_affine_conv, true}, /* per-channel Mul/Add into the Conv after */
    {"bn-split", kpass_bn_split, true}, /* a BN no Conv took: Mul + Add for the two above */
    {"gelu", kpass_gelu, true},
    {"norms", kpass_norms, true}, /* before the attention passes read the adds */
    {"rotary", kpass_rotary, true}, /* x * cos + rotate_half(x) * sin */
    {"gather-transpose", kpass_gather_transpose, true}, /* exposes packed-QKV heads */
    {"attention", kpass_attention, true}, /* before a mask Add becomes a MatMul bias */
    {"row-permutes", kpass_row_permutes, true},
    {"view-chains", kpass_view_chains, true},
    {"hfuse", kpass_hfuse, true}, /* before bias-activation takes per-layer epilogues */
    {"bias-activation", kpass_bias_act, true},
    {"qkv", kpass_qkv, true}, /* after the projections took their biases */
};

/* Elementwise chains run once everything else is settled, so they do not
 * swallow a bias or activation that a matrix op's epilogue could take. */
static const pass_entry kpass_final[] = {
    {"attention-uniform-mask", kpass_attn_uniform_mask, true},
    {"attention-causal-mask", kpass_attn_causal_mask, true}, /* run-time causal masks */
    {"attention-causal", kpass_attn_causal, true},
    {"attention-views", kpass_attn_views, true}, /* after the passes that read K's [B, S, H, D] */
    {"dead-code", kpass_dead_code, false},       /* the layout chains the views left unread */
    {"split-part", kpass_split_part, true},      /* what the views leave of a Split */
    {"elementwise-chain", kpass_chain, true},
    {"chain-views", kpass_chain_views, true}, /* chains read Split parts in place */
    {"layernorm", kpass_layernorm, true},
    {"dead-code", kpass_dead_code, false},
};

/* Reduced precision goes last, on the fused layers, so casts never stand
 * between layers a fusion would have joined; dead-code then drops casts
 * nothing reads. */
static const pass_entry kpass_late[] = {
    {"precision", kpass_precision, false},
    {"io-types", kpass_io_types, false},
    {"cast-pairs", kpass_cast_pairs, true},
    {"layout", kpass_layout, false},
    {"fold", kpass_fold, false},       /* the layout pass's weight reorders */
    {"dead-code", kpass_dead_code, false},
};

/* Shapes outlive a pass that changed nothing: inference over every profile
 * point is the costly part of a pass, and the network it describes is the
 * same until some pass rewrites it. */
typedef struct shape_cache {
    int state, tensors, n_points;
    kn_tinfo **pts;
    bool *dd;
} shape_cache;

static void cache_take(kpass *p, shape_cache *c) {
    p->shapes_state = c->state;
    p->shapes_tensors = c->tensors;
    p->n_points = c->n_points;
    p->pts = c->pts;
    p->dd = c->dd;
    memset(c, 0, sizeof *c);
}

static void cache_give(kpass *p, shape_cache *c) {
    c->state = p->shapes_state;
    c->tensors = p->shapes_tensors;
    c->n_points = p->n_points;
    c->pts = p->pts;
    c->dd = p->dd;
    p->pts = NULL;
    p->dd = NULL;
    p->n_points = 0;
    p->shapes_state = 0;
}

static kiln_status run_pass(kbld *b, const pass_entry *e, int *changed, shape_cache *sc) {
    kpass p;
    memset(&p, 0, sizeof p);
    p.b = b;
    p.net = b->net;
    cache_take(&p, sc);
    kiln_status st = readers_build(&p);
    int n = 0;
    if (st == KILN_OK)
        st = e->fn(&p, &n);
    if (st == KILN_OK)
        kpass_apply_aliases(&p);
    if (st == KILN_OK && n == 0)
        cache_give(&p, sc);
    kpass_fini(&p);
    if (st != KILN_OK)
        return kn_error_wrap(st, "pass %s", e->name);
    if (n > 0) {
        KN_TRY(kn_net_compact(b->net));
        KN_TRY(kn_net_toposort(b->net));
        kn_log(KILN_LOG_VERBOSE, "pass %s: %d rewrite(s), %d layers now", e->name, n,
               b->net->n_nodes);
    }
    *changed += n;
    return KILN_OK;
}

static kiln_status optimize(kbld *b, shape_cache *sc) {
    bool fuse = !(b->flags & KILN_BUILDER_FLAG_NO_FUSION);
    int before = b->net->n_nodes;
    KN_TRY(kn_net_compact(b->net));
    KN_TRY(kn_net_toposort(b->net));
    enum { MAX_ROUNDS = 32 };
    int round = 0, changed = 1, total = 0;
    for (; changed && round < MAX_ROUNDS; round++) {
        changed = 0;
        for (size_t i = 0; i < KN_ARRAY_LEN(kpass_rounds); i++)
            if (fuse || !kpass_rounds[i].fusion)
                KN_TRY(run_pass(b, &kpass_rounds[i], &changed, sc));
        total += changed;
    }
    if (changed)
        kn_log(KILN_LOG_VERBOSE, "passes: stopped after %d rounds still changing", round);
    for (size_t i = 0; i < KN_ARRAY_LEN(kpass_final); i++)
        if (fuse || !kpass_final[i].fusion)
            KN_TRY(run_pass(b, &kpass_final[i], &total, sc));
    for (size_t i = 0; i < KN_ARRAY_LEN(kpass_late); i++)
        if (fuse || !kpass_late[i].fusion)
            KN_TRY(run_pass(b, &kpass_late[i], &total, sc));
    kn_log(KILN_LOG_VERBOSE, "passes: %d rewrite(s) in %d round(s): %d layers -> %d", total,
           round, before, b->net->n_nodes);
    return KILN_OK;
}

kiln_status kbld_optimize(kbld *b) {
    shape_cache sc;
    memset(&sc, 0, sizeof sc);
    kiln_status st = optimize(b, &sc);
    kpass p; /* frees what the cache still holds */
    memset(&p, 0, sizeof p);
    cache_take(&p, &sc);
    shapes_free(&p);
    return st;
}
