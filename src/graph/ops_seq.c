/* ops_seq.c - sequence and optional values (seq.h): the list object and
 * the schemas of SequenceEmpty / Construct / Insert / Erase / At / Length,
 * SplitToSequence, ConcatFromSequence, Optional, OptionalHasElement,
 * OptionalGetElement and SequenceMap. A handle's tinfo says what inference
 * knows of the list: its length and the largest shape of its elements. */
#include <stdlib.h>
#include <string.h>

#include "graph/control.h"
#include "graph/seq.h"

/* ---- the list object ---- */

static uint64_t g_serial;

kiln_status kn_seq_new(int kind, kiln_dtype elem, int n, kn_seq **out) {
    kn_seq *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    if (n > 0 && !(s->items = kn_calloc((size_t)n, sizeof *s->items))) {
        kn_free(s);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    s->refs = 1;
    s->kind = kind;
    s->elem = elem;
    s->n = n;
    s->serial = __atomic_add_fetch(&g_serial, 1, __ATOMIC_RELAXED);
    *out = s;
    return KILN_OK;
}

void kn_seq_ref(kn_seq *s) {
    if (s)
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void kn_seq_unref(kn_seq *s) {
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (int i = 0; i < s->n; i++)
        kn_selem_unref(s->items[i]);
    kn_seq_unref(s->inner);
    kn_free(s->items);
    kn_free(s);
}

kiln_status kn_selem_new(kiln_dtype dtype, int rank, const int64_t *dims, const void *data,
                         kn_selem **out) {
    size_t bytes;
    KN_TRY(kn_check_size(NULL, "sequence element", dtype, rank, dims, &bytes));
    kn_selem *e = kn_calloc(1, sizeof *e);
    if (!e || !(e->data = kn_aligned_alloc(bytes ? bytes : 1))) {
        kn_free(e);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    e->refs = 1;
    e->dtype = dtype;
    e->rank = rank;
    if (rank)
        memcpy(e->dims, dims, (size_t)rank * sizeof *dims);
    e->nbytes = bytes;
    if (bytes && data)
        memcpy(e->data, data, bytes);
    *out = e;
    return KILN_OK;
}

void kn_selem_ref(kn_selem *e) {
    if (e)
        __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
}

void kn_selem_unref(kn_selem *e) {
    if (!e || __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    kn_aligned_free(e->data);
    kn_free(e);
}

kiln_dtype kn_seq_code(const kn_seq *s) {
    if (s->kind == KN_SEQ_KIND_SEQUENCE)
        return kn_seq_dtype(s->elem);
    bool of_seq = s->inner || (s->none && ((int)s->elem & KN_DTYPE_SEQUENCE));
    return (kiln_dtype)(KN_DTYPE_OPTIONAL | (of_seq ? KN_DTYPE_SEQUENCE : 0) |
                        ((int)s->elem & 0xff));
}

void kn_seq_bound_add(kn_tinfo *ti, int rank, const int64_t *dims, bool first) {
    if (first) {
        ti->elem_known = true;
        ti->elem_rank = rank;
        memcpy(ti->elem_dims, dims, (size_t)rank * sizeof *dims);
        return;
    }
    if (!ti->elem_known)
        return;
    if (ti->elem_rank != rank) {
        ti->elem_known = false;
        return;
    }
    for (int d = 0; d < rank; d++)
        if (dims[d] > ti->elem_dims[d])
            ti->elem_dims[d] = dims[d];
}

void kn_seq_tinfo(const kn_seq *s, kn_tinfo *ti) {
    memset(ti, 0, sizeof *ti);
    ti->dtype = kn_seq_code(s);
    ti->count_known = true;
    if (s->kind == KN_SEQ_KIND_OPTIONAL) {
        ti->count = s->none ? 0 : 1;
        if (s->inner) {
            for (int i = 0; i < s->inner->n; i++)
                kn_seq_bound_add(ti, s->inner->items[i]->rank, s->inner->items[i]->dims, i == 0);
        } else if (!s->none && s->n == 1) {
            kn_seq_bound_add(ti, s->items[0]->rank, s->items[0]->dims, true);
        }
        return;
    }
    ti->count = s->n;
    for (int i = 0; i < s->n; i++)
        kn_seq_bound_add(ti, s->items[i]->rank, s->items[i]->dims, i == 0);
}

/* ---- schemas ---- */

static kiln_status need_seq(const kn_infer *c, int i) {
    if (!kn_has_in(c, i) || !kn_handle_is_seq(c->in[i].dtype))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "input %d must be a sequence (it is %s)", i,
                             kn_has_in(c, i) ? kiln_dtype_name(c->in[i].dtype) : "absent");
    return KILN_OK;
}

static void handle_out(kn_tinfo *o, kiln_dtype code) {
    memset(o, 0, sizeof *o);
    o->dtype = code;
    o->rank = 0;
}

static kiln_status infer_empty(kn_infer *c) {
    int64_t dt = kn_attr_int(c->node, "dtype", KILN_DTYPE_FLOAT);
    if (dt <= 0 || dt > KILN_DTYPE_FLOAT8E5M2FNUZ || kiln_dtype_size((kiln_dtype)dt) == 0)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "dtype %lld is not supported",
                             (long long)dt);
    handle_out(&c->out[0], kn_seq_dtype((kiln_dtype)dt));
    c->out[0].count_known = true;
    return KILN_OK;
}

static kiln_status infer_construct(kn_infer *c) {
    if (c->n_in < 1)
        return kn_node_error(c->node, KILN_ERR_PARSE, "SequenceConstruct takes at least one input");
    kiln_dtype dt = c->in[0].dtype;
    handle_out(&c->out[0], kn_seq_dtype(dt));
    for (int i = 0; i < c->n_in; i++) {
        if (!kn_has_in(c, i) || c->in[i].dtype != dt || kn_dtype_is_handle((int)dt))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "input %d is %s; every input must be a tensor of type %s", i,
                                 kn_has_in(c, i) ? kiln_dtype_name(c->in[i].dtype) : "absent",
                                 kiln_dtype_name(dt));
        kn_seq_bound_add(&c->out[0], c->in[i].rank, c->in[i].dims, i == 0);
    }
    c->out[0].count_known = true;
    c->out[0].count = c->n_in;
    return KILN_OK;
}

static kiln_status elem_matches(const kn_infer *c, int s, int t) {
    if (!kn_has_in(c, t) || c->in[t].dtype != kn_handle_elem(c->in[s].dtype))
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "input %d is %s; the sequence holds %s tensors", t,
                             kn_has_in(c, t) ? kiln_dtype_name(c->in[t].dtype) : "absent",
                             kiln_dtype_name(kn_handle_elem(c->in[s].dtype)));
    return KILN_OK;
}

static kiln_status infer_insert(kn_infer *c) {
    KN_TRY(need_seq(c, 0));
    KN_TRY(elem_matches(c, 0, 1));
    kn_tinfo *o = &c->out[0];
    *o = c->in[0];
    o->value = NULL;
    o->data_dependent = false;
    bool first = o->count_known && o->count == 0;
    if (first || o->elem_known)
        kn_seq_bound_add(o, c->in[1].rank, c->in[1].dims, first);
    if (o->count_known)
        o->count++;
    return KILN_OK;
}

static kiln_status infer_erase(kn_infer *c) {
    KN_TRY(need_seq(c, 0));
    kn_tinfo *o = &c->out[0];
    *o = c->in[0];
    o->value = NULL;
    o->data_dependent = false;
    if (o->count_known) {
        if (o->count == 0)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "the sequence is empty");
        o->count--;
    }
    return KILN_OK;
}

/* A tensor of the elements' largest shape, as a data-dependent bound. */
static kiln_status elem_out(const kn_infer *c, const kn_tinfo *s, kiln_dtype dt, kn_tinfo *o) {
    if (!s->elem_known)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                             "the shape of the sequence's elements is not known when shapes are "
                             "inferred");
    memset(o, 0, sizeof *o);
    o->dtype = dt;
    o->rank = s->elem_rank;
    memcpy(o->dims, s->elem_dims, sizeof o->dims);
    o->data_dependent = true;
    return KILN_OK;
}

static kiln_status infer_at(kn_infer *c) {
    KN_TRY(need_seq(c, 0));
    if (!kn_has_in(c, 1))
        return kn_node_error(c->node, KILN_ERR_PARSE, "SequenceAt needs a position");
    if (c->in[0].count_known && c->in[0].count == 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the sequence is empty");
    kn_seq *s = c->in[0].value ? kn_handle_get(c->in[0].value) : NULL;
    if (s && s->kind == KN_SEQ_KIND_SEQUENCE && c->in[1].value) {
        /* the list and the position are known: the element's own shape */
        int64_t p = kn_value_int(&c->in[1], 0), q = p < 0 ? p + s->n : p;
        if (q < 0 || q >= s->n)
            return kn_node_error(c->node, KILN_ERR_RUNTIME,
                                 "position %lld is out of range for a sequence of %d elements",
                                 (long long)p, s->n);
        memset(&c->out[0], 0, sizeof c->out[0]);
        c->out[0].dtype = s->items[q]->dtype;
        c->out[0].rank = s->items[q]->rank;
        memcpy(c->out[0].dims, s->items[q]->dims, sizeof c->out[0].dims);
        return KILN_OK;
    }
    return elem_out(c, &c->in[0], kn_handle_elem(c->in[0].dtype), &c->out[0]);
}

static kiln_status infer_length(kn_infer *c) {
    KN_TRY(need_seq(c, 0));
    memset(&c->out[0], 0, sizeof c->out[0]);
    c->out[0].dtype = KILN_DTYPE_INT64;
    return KILN_OK;
}

static kiln_status infer_split(kn_infer *c) {
    if (!kn_has_in(c, 0) || c->in[0].rank < 1 || kn_dtype_is_handle((int)c->in[0].dtype))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "SplitToSequence takes a tensor of rank >= 1");
    const kn_tinfo *x = &c->in[0];
    int ax;
    KN_TRY(kn_axis(c, kn_attr_int(c->node, "axis", 0), x->rank, &ax));
    bool keep = kn_attr_int(c->node, "keepdims", 1) != 0;
    int64_t len = x->dims[ax];
    kn_tinfo *o = &c->out[0];
    handle_out(o, kn_seq_dtype(x->dtype));
    o->count_known = true;
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    if (!kn_has_in(c, 1)) { /* pieces of 1, the axis dropped unless keepdims */
        o->count = len;
        dims[ax] = 1;
        int r = x->rank;
        if (!keep) {
            memmove(dims + ax, dims + ax + 1, (size_t)(r - ax - 1) * sizeof *dims);
            r--;
        }
        if (len > 0)
            kn_seq_bound_add(o, r, dims, true);
        return KILN_OK;
    }
    const kn_tinfo *sp = &c->in[1];
    if (!sp->value)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the split sizes are not known on the host");
    int64_t ns = kn_numel(sp->rank, sp->dims);
    if (sp->rank == 0) { /* one size: pieces of it, the last one shorter */
        int64_t k = kn_value_int(sp, 0);
        if (k <= 0)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "split size %lld", (long long)k);
        o->count = (len + k - 1) / k;
        dims[ax] = len < k ? len : k;
        if (o->count > 0)
            kn_seq_bound_add(o, x->rank, dims, true);
        return KILN_OK;
    }
    int64_t sum = 0;
    o->count = ns;
    for (int64_t i = 0; i < ns; i++) {
        int64_t k = kn_value_int(sp, i);
        if (k < 0)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "split size %lld", (long long)k);
        sum += k;
        dims[ax] = k;
        kn_seq_bound_add(o, x->rank, dims, i == 0);
    }
    if (sum != len)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the splits sum to %lld, the axis is %lld",
                             (long long)sum, (long long)len);
    return KILN_OK;
}

static kiln_status infer_concat(kn_infer *c) {
    KN_TRY(need_seq(c, 0));
    const kn_tinfo *s = &c->in[0];
    if (!s->count_known || !s->elem_known)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                             "the sequence's length and element shapes are not known when shapes "
                             "are inferred");
    bool new_axis = kn_attr_int(c->node, "new_axis", 0) != 0;
    int r = s->elem_rank + (new_axis ? 1 : 0);
    if (r < 1 || r > KILN_MAX_DIMS)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "elements of rank %d", s->elem_rank);
    int ax;
    KN_TRY(kn_axis(c, kn_attr_int(c->node, "axis", 0), r, &ax));
    kn_tinfo *o = &c->out[0];
    memset(o, 0, sizeof *o);
    o->dtype = kn_handle_elem(s->dtype);
    o->rank = r;
    for (int d = 0, k = 0; d < r; d++)
        o->dims[d] = (new_axis && d == ax) ? 1 : s->elem_dims[k++];
    if (kn_mul_i64(o->dims[ax], s->count, &o->dims[ax]))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the output's axis overflows");
    o->data_dependent = true;
    return KILN_OK;
}

static kiln_status infer_optional(kn_infer *c) {
    kn_tinfo *o = &c->out[0];
    if (!kn_has_in(c, 0)) {
        const kn_attr *a = kn_attr_find(c->node, "type");
        if (!a || a->type != KN_ATTR_INT)
            return kn_node_error(c->node, KILN_ERR_PARSE,
                                 "an Optional without input needs its 'type' attribute");
        int64_t t = a->i;
        if (t <= 0 || t > 0x1ff || (t & 0xff) == 0 || (t & 0xff) > KILN_DTYPE_FLOAT8E5M2FNUZ)
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "type %lld is not supported",
                                 (long long)t);
        handle_out(o, (kiln_dtype)(KN_DTYPE_OPTIONAL | (int)t));
        o->count_known = true;
        o->count = 0;
        return KILN_OK;
    }
    const kn_tinfo *x = &c->in[0];
    if (kn_handle_is_opt(x->dtype))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "an optional of an optional");
    handle_out(o, (kiln_dtype)(KN_DTYPE_OPTIONAL | (int)x->dtype));
    o->count_known = true;
    o->count = 1;
    if (kn_handle_is_seq(x->dtype)) {
        o->elem_known = x->elem_known;
        o->elem_rank = x->elem_rank;
        memcpy(o->elem_dims, x->elem_dims, sizeof o->elem_dims);
    } else {
        kn_seq_bound_add(o, x->rank, x->dims, true);
    }
    return KILN_OK;
}

static kiln_status infer_has(kn_infer *c) {
    memset(&c->out[0], 0, sizeof c->out[0]);
    c->out[0].dtype = KILN_DTYPE_BOOL;
    return KILN_OK;
}

static kiln_status infer_get(kn_infer *c) {
    if (!kn_has_in(c, 0))
        return kn_node_error(c->node, KILN_ERR_PARSE, "OptionalGetElement needs an input");
    const kn_tinfo *x = &c->in[0];
    kn_tinfo *o = &c->out[0];
    if (!kn_handle_is_opt(x->dtype)) { /* opset 18: a tensor or sequence is itself */
        *o = *x;
        o->value = NULL;
        o->data_dependent = false;
        return KILN_OK;
    }
    if (x->count_known && x->count == 0)
        return kn_node_error(c->node, KILN_ERR_RUNTIME, "the optional input holds no element");
    if ((int)x->dtype & KN_DTYPE_SEQUENCE) {
        handle_out(o, kn_seq_dtype(kn_handle_elem(x->dtype)));
        o->elem_known = x->elem_known;
        o->elem_rank = x->elem_rank;
        memcpy(o->elem_dims, x->elem_dims, sizeof o->elem_dims);
        return KILN_OK;
    }
    return elem_out(c, x, kn_handle_elem(x->dtype), o);
}

/* SequenceMap: the body runs once per element of the first input; every
 * sequence input gives its element, every tensor input itself. The body
 * is inferred at the elements' largest shapes. */
static kiln_status infer_map(kn_infer *c) {
    const kn_attr *a = kn_attr_find(c->node, "body");
    const kn_net *g = a && a->type == KN_ATTR_GRAPH ? a->graph : NULL;
    if (!g)
        return kn_node_error(c->node, KILN_ERR_PARSE, "graph attribute 'body' is missing");
    KN_TRY(need_seq(c, 0));
    if (g->n_inputs != c->n_in || g->n_outputs != c->n_out)
        return kn_node_error(c->node, KILN_ERR_PARSE,
                             "the body has %d inputs and %d outputs, the node %d and %d",
                             g->n_inputs, g->n_outputs, c->n_in, c->n_out);
    kn_tinfo *bin = kn_calloc((size_t)c->n_in + 1, sizeof *bin);
    kn_tinfo *bout = kn_calloc((size_t)c->n_out + 1, sizeof *bout);
    kiln_status st = bin && bout ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < c->n_in && st == KILN_OK; i++) {
        if (!kn_has_in(c, i))
            st = kn_node_error(c->node, KILN_ERR_PARSE, "input %d is absent", i);
        else if (kn_handle_is_seq(c->in[i].dtype)) {
            if (c->in[i].count_known && c->in[0].count_known && c->in[i].count != c->in[0].count)
                st = kn_node_error(c->node, KILN_ERR_SHAPE,
                                   "input %d holds %lld elements, input 0 %lld", i,
                                   (long long)c->in[i].count, (long long)c->in[0].count);
            else
                st = elem_out(c, &c->in[i], kn_handle_elem(c->in[i].dtype), &bin[i]);
            bin[i].data_dependent = false;
        } else
            bin[i] = c->in[i];
    }
    if (st == KILN_OK)
        st = kx_body_infer(c->node, g, c->n_in, bin, c->n_out, bout);
    for (int j = 0; j < c->n_out && st == KILN_OK; j++) {
        if (kn_dtype_is_handle((int)bout[j].dtype)) {
            st = kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "body output %d is not a tensor", j);
            break;
        }
        handle_out(&c->out[j], kn_seq_dtype(bout[j].dtype));
        kn_seq_bound_add(&c->out[j], bout[j].rank, bout[j].dims, true);
        c->out[j].count_known = c->in[0].count_known;
        c->out[j].count = c->in[0].count;
    }
    kn_free(bin);
    kn_free(bout);
    return st;
}

static bool takes_handles(const kn_node *n) {
    static const char *const ok[] = {"Identity", "If", "Loop", "SequenceMap"};
    if (n->domain[0])
        return false;
    if (strncmp(n->op_type, "Sequence", 8) == 0 || strncmp(n->op_type, "Optional", 8) == 0 ||
        strcmp(n->op_type, "SplitToSequence") == 0 || strcmp(n->op_type, "ConcatFromSequence") == 0)
        return true;
    for (size_t k = 0; k < KN_ARRAY_LEN(ok); k++)
        if (strcmp(n->op_type, ok[k]) == 0)
            return true;
    return false;
}

kiln_status kn_check_handles(const kn_infer *c) {
    bool any = false;
    for (int j = 0; j < c->n_in && !any; j++)
        any = kn_dtype_is_handle((int)c->in[j].dtype);
    for (int j = 0; j < c->n_out && !any; j++)
        any = c->node->out[j] >= 0 && kn_dtype_is_handle((int)c->out[j].dtype);
    if (!any || takes_handles(c->node))
        return KILN_OK;
    return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                         "%s does not take sequence or optional values", c->node->op_type);
}

const kn_op_schema kn_ops_seq[] = {
    {"SequenceEmpty", "", infer_empty, 0},
    {"SequenceConstruct", "", infer_construct, 0},
    {"SequenceInsert", "", infer_insert, 0},
    {"SequenceErase", "", infer_erase, 0},
    {"SequenceAt", "", infer_at, 1u << 1}, /* the position: exact shapes of known lists */
    {"SequenceLength", "", infer_length, 0},
    {"SplitToSequence", "", infer_split, 1u << 1},
    {"ConcatFromSequence", "", infer_concat, 0},
    {"Optional", "", infer_optional, 0},
    {"OptionalHasElement", "", infer_has, 0},
    {"OptionalGetElement", "", infer_get, 0},
    {"SequenceMap", "", infer_map, 0},
};
const size_t kn_ops_seq_count = KN_ARRAY_LEN(kn_ops_seq);
