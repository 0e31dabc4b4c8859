/* k_seq.c - CPU kernels of the sequence and optional ops (graph/seq.h).
 * Lists are never changed after they are made: Insert and Erase build a
 * new list sharing the element buffers. Each kernel's instance holds one
 * reference on the lists it made last, dropped at its next run or when
 * the instance goes, so a list lives while anything can still read it.
 * SequenceMap runs in src/runtime/control.c. */
#include <string.h>

#include "backends/backend.h"
#include "graph/seq.h"

typedef struct seq_inst {
    kn_seq *made[4];
} seq_inst;

static kiln_status seq_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                               int n_in, const kb_tensor *out, int n_out, void **inst,
                               size_t *workspace) {
    (void)state, (void)in, (void)n_in, (void)out;
    *workspace = 0;
    if (n_out > 4)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "too many outputs");
    seq_inst *si = kn_calloc(1, sizeof *si);
    if (!si)
        return KILN_ERR_OUT_OF_MEMORY;
    *inst = si;
    return KILN_OK;
}

static void seq_release(void *p) {
    seq_inst *si = p;
    for (int j = 0; si && j < 4; j++)
        kn_seq_unref(si->made[j]);
    kn_free(si);
}

/* Output j gets list s (the instance keeps the reference s came with). */
static void put(const kb_run *r, int j, kn_seq *s) {
    seq_inst *si = r->inst;
    kn_seq_unref(si->made[j]);
    si->made[j] = s;
    kn_handle_put(r->out[j].data, s);
}

static kiln_status get_list(const kb_run *r, int i, int kind, kn_seq **out) {
    kn_seq *s = i < r->n_in ? kn_handle_get(r->in[i].data) : NULL;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "input %d holds no sequence or optional",
                             i);
    if (kind && s->kind != kind)
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "input %d is %s, not %s", i,
                             s->kind == KN_SEQ_KIND_SEQUENCE ? "a sequence" : "an optional",
                             kind == KN_SEQ_KIND_SEQUENCE ? "a sequence" : "an optional");
    *out = s;
    return KILN_OK;
}

static int64_t scalar_int(const kb_tensor *t) {
    if (t->dtype == KILN_DTYPE_INT32) {
        int32_t v;
        memcpy(&v, t->data, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, t->data, 8);
    return v;
}

/* Position input i (absent: dflt) normalized into [0, n + extra). */
static kiln_status position(const kb_run *r, int i, int64_t n, int extra, int64_t dflt,
                            int64_t *out) {
    if (i >= r->n_in || !r->in[i].data) {
        *out = dflt;
        return KILN_OK;
    }
    if (kn_numel(r->in[i].rank, r->in[i].dims) != 1 ||
        (r->in[i].dtype != KILN_DTYPE_INT32 && r->in[i].dtype != KILN_DTYPE_INT64))
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "the position must be one int32 or int64");
    int64_t p = scalar_int(&r->in[i]);
    int64_t q = p < 0 ? p + n : p;
    if (q < 0 || q >= n + extra)
        return kn_node_error(r->node, KILN_ERR_RUNTIME,
                             "position %lld is out of range for a sequence of %lld elements",
                             (long long)p, (long long)n);
    *out = q;
    return KILN_OK;
}

static kiln_status elem_of(const kb_run *r, const kb_tensor *t, kn_selem **e) {
    if (kn_dtype_is_handle((int)t->dtype))
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "a sequence element must be a tensor");
    return kn_selem_new(t->dtype, t->rank, t->dims, t->data, e);
}

static kiln_status k_empty(const kb_run *r) {
    kn_seq *s = NULL;
    KN_TRY(kn_seq_new(KN_SEQ_KIND_SEQUENCE,
                      (kiln_dtype)kn_attr_int(r->node, "dtype", KILN_DTYPE_FLOAT), 0, &s));
    put(r, 0, s);
    return KILN_OK;
}

static kiln_status k_construct(const kb_run *r) {
    kn_seq *s = NULL;
    KN_TRY(kn_seq_new(KN_SEQ_KIND_SEQUENCE, r->in[0].dtype, r->n_in, &s));
    for (int i = 0; i < r->n_in; i++) {
        kiln_status st = r->in[i].dtype != s->elem
                             ? kn_node_error(r->node, KILN_ERR_RUNTIME, "input %d is %s, not %s",
                                             i, kiln_dtype_name(r->in[i].dtype),
                                             kiln_dtype_name(s->elem))
                             : elem_of(r, &r->in[i], &s->items[i]);
        if (st != KILN_OK) {
            kn_seq_unref(s);
            return st;
        }
    }
    put(r, 0, s);
    return KILN_OK;
}

/* A new list: src's items with `add` inserted at `at` (add NULL: the item
 * at `at` left out). */
static kiln_status rebuild(const kb_run *r, const kn_seq *src, kn_selem *add, int64_t at) {
    int n = src->n + (add ? 1 : -1);
    kn_seq *s = NULL;
    KN_TRY(kn_seq_new(KN_SEQ_KIND_SEQUENCE, src->elem, n, &s));
    for (int i = 0, k = 0; i < src->n + (add ? 1 : 0); i++) {
        if (i == at) {
            if (add)
                s->items[k++] = add;
            continue;
        }
        int from = add && i > at ? i - 1 : i;
        kn_selem_ref(src->items[from]);
        s->items[k++] = src->items[from];
    }
    put(r, 0, s);
    return KILN_OK;
}

static kiln_status k_insert(const kb_run *r) {
    kn_seq *src = NULL;
    KN_TRY(get_list(r, 0, KN_SEQ_KIND_SEQUENCE, &src));
    if (r->in[1].dtype != src->elem)
        return kn_node_error(r->node, KILN_ERR_RUNTIME,
                             "the tensor is %s; the sequence holds %s tensors",
                             kiln_dtype_name(r->in[1].dtype), kiln_dtype_name(src->elem));
    int64_t at;
    KN_TRY(position(r, 2, src->n, 1, src->n, &at));
    kn_selem *e;
    KN_TRY(elem_of(r, &r->in[1], &e));
    kiln_status st = rebuild(r, src, e, at);
    if (st != KILN_OK)
        kn_selem_unref(e);
    return st;
}

static kiln_status k_erase(const kb_run *r) {
    kn_seq *src = NULL;
    KN_TRY(get_list(r, 0, KN_SEQ_KIND_SEQUENCE, &src));
    if (src->n == 0)
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "the sequence is empty");
    int64_t at;
    KN_TRY(position(r, 1, src->n, 0, src->n - 1, &at));
    return rebuild(r, src, NULL, at);
}

/* Tensor output j gets element e (true dims; memory planned at a bound). */
static kiln_status put_elem(const kb_run *r, int j, const kn_selem *e) {
    kb_tensor *o = &r->out[j];
    int64_t have = kn_numel(o->rank, o->dims);
    if (e->dtype != o->dtype || have < 0 ||
        e->nbytes > (size_t)have * kiln_dtype_size(o->dtype))
        return kn_node_error(r->node, KILN_ERR_RUNTIME,
                             "the element (%s, %zu bytes) does not fit the %s output planned",
                             kiln_dtype_name(e->dtype), e->nbytes, kiln_dtype_name(o->dtype));
    if (e->nbytes)
        memcpy(o->data, e->data, e->nbytes);
    o->rank = e->rank;
    memcpy(o->dims, e->dims, sizeof o->dims);
    return KILN_OK;
}

static kiln_status k_at(const kb_run *r) {
    kn_seq *src = NULL;
    KN_TRY(get_list(r, 0, KN_SEQ_KIND_SEQUENCE, &src));
    int64_t at;
    KN_TRY(position(r, 1, src->n, 0, 0, &at));
    return put_elem(r, 0, src->items[at]);
}

static kiln_status k_length(const kb_run *r) {
    kn_seq *src = NULL;
    KN_TRY(get_list(r, 0, KN_SEQ_KIND_SEQUENCE, &src));
    int64_t n = src->n;
    memcpy(r->out[0].data, &n, 8);
    return KILN_OK;
}

static kiln_status k_split(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int rank = x->rank;
    int64_t ax = kn_attr_int(r->node, "axis", 0);
    if (ax < 0)
        ax += rank;
    bool keep = kn_attr_int(r->node, "keepdims", 1) != 0;
    bool has_split = r->n_in > 1 && r->in[1].data;
    int64_t len = x->dims[ax], n, k1 = 1;
    const kb_tensor *sp = has_split ? &r->in[1] : NULL;
    if (!sp)
        n = len;
    else if (sp->rank == 0) {
        k1 = scalar_int(sp);
        n = (len + k1 - 1) / k1;
    } else
        n = kn_numel(sp->rank, sp->dims);
    kn_seq *s = NULL;
    KN_TRY(kn_seq_new(KN_SEQ_KIND_SEQUENCE, x->dtype, (int)n, &s));
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= x->dims[d];
    for (int d = (int)ax + 1; d < rank; d++)
        inner *= x->dims[d];
    int64_t start = 0;
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < n && st == KILN_OK; i++) {
        int64_t k = !sp ? 1
                    : sp->rank == 0 ? (len - start < k1 ? len - start : k1)
                    : sp->dtype == KILN_DTYPE_INT32 ? ((const int32_t *)sp->data)[i]
                                                    : ((const int64_t *)sp->data)[i];
        int64_t dims[KILN_MAX_DIMS];
        memcpy(dims, x->dims, sizeof dims);
        dims[ax] = k;
        int r2 = rank;
        if (!sp && !keep) {
            memmove(dims + ax, dims + ax + 1, (size_t)(rank - ax - 1) * sizeof *dims);
            r2--;
        }
        st = kn_selem_new(x->dtype, r2, dims, NULL, &s->items[i]);
        if (st != KILN_OK)
            break;
        uint8_t *dst = s->items[i]->data;
        const uint8_t *src = x->data;
        size_t row = (size_t)(k * inner) * es;
        for (int64_t o = 0; o < outer; o++)
            memcpy(dst + (size_t)o * row, src + (size_t)((o * len + start) * inner) * es, row);
        start += k;
    }
    if (st != KILN_OK) {
        kn_seq_unref(s);
        return st;
    }
    put(r, 0, s);
    return KILN_OK;
}

static kiln_status k_concat(const kb_run *r) {
    kn_seq *src = NULL;
    KN_TRY(get_list(r, 0, KN_SEQ_KIND_SEQUENCE, &src));
    kb_tensor *o = &r->out[0];
    bool new_axis = kn_attr_int(r->node, "new_axis", 0) != 0;
    if (src->n == 0)
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "the sequence is empty");
    const kn_selem *e0 = src->items[0];
    int rank = e0->rank + (new_axis ? 1 : 0);
    int64_t ax = kn_attr_int(r->node, "axis", 0);
    if (ax < 0)
        ax += rank;
    int64_t dims[KILN_MAX_DIMS], total = 0;
    for (int i = 0; i < src->n; i++) {
        const kn_selem *e = src->items[i];
        if (e->rank != e0->rank)
            return kn_node_error(r->node, KILN_ERR_RUNTIME, "element %d has rank %d, element 0 %d",
                                 i, e->rank, e0->rank);
        for (int d = 0, k = 0; d < rank; d++) {
            int64_t v = (new_axis && d == ax) ? 1 : e->dims[k++];
            if (d == ax)
                total += v;
            else if (i > 0 && v != dims[d])
                return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                     "element %d differs from element 0 in dimension %d", i, d);
            else
                dims[d] = v;
        }
    }
    dims[ax] = total;
    size_t es = kiln_dtype_size(e0->dtype), need = (size_t)kn_numel(rank, dims) * es;
    if (need > (size_t)kn_numel(o->rank, o->dims) * es)
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "the result outgrew its planned size");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= dims[d];
    for (int d = (int)ax + 1; d < rank; d++)
        inner *= dims[d];
    int64_t at = 0;
    for (int i = 0; i < src->n; i++) {
        const kn_selem *e = src->items[i];
        int64_t k = new_axis ? 1 : e->dims[ax];
        size_t row = (size_t)(k * inner) * es;
        for (int64_t q = 0; q < outer; q++)
            memcpy((uint8_t *)o->data + (size_t)((q * total + at) * inner) * es,
                   (const uint8_t *)e->data + (size_t)q * row, row);
        at += k;
    }
    o->rank = rank;
    memcpy(o->dims, dims, sizeof o->dims);
    return KILN_OK;
}

static kiln_status k_optional(const kb_run *r) {
    kn_seq *s = NULL;
    bool has = r->n_in > 0 && r->in[0].data;
    kiln_dtype elem = has ? r->in[0].dtype
                          : (kiln_dtype)(kn_attr_int(r->node, "type", KILN_DTYPE_FLOAT) & 0x1ff);
    kn_seq *inner = has && kn_dtype_is_handle((int)elem) ? kn_handle_get(r->in[0].data) : NULL;
    if (has && kn_dtype_is_handle((int)elem) && (!inner || inner->kind != KN_SEQ_KIND_SEQUENCE))
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "the input is not a sequence");
    KN_TRY(kn_seq_new(KN_SEQ_KIND_OPTIONAL, inner ? inner->elem : elem, has && !inner ? 1 : 0, &s));
    s->none = !has;
    if (!has && ((int)elem & KN_DTYPE_SEQUENCE))
        s->elem = elem; /* a none of a sequence type keeps that in its code */
    if (inner) {
        kn_seq_ref(inner);
        s->inner = inner;
    } else if (has) {
        kiln_status st = elem_of(r, &r->in[0], &s->items[0]);
        if (st != KILN_OK) {
            kn_seq_unref(s);
            return st;
        }
    }
    put(r, 0, s);
    return KILN_OK;
}

static kiln_status k_has(const kb_run *r) {
    uint8_t v = 0;
    if (r->n_in > 0 && r->in[0].data) {
        kn_seq *s = kn_dtype_is_handle((int)r->in[0].dtype) ? kn_handle_get(r->in[0].data) : NULL;
        v = !s || s->kind == KN_SEQ_KIND_SEQUENCE || !s->none; /* a tensor or sequence: yes */
    }
    memcpy(r->out[0].data, &v, 1);
    return KILN_OK;
}

static kiln_status k_get(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *o = &r->out[0];
    if (!kn_dtype_is_handle((int)x->dtype)) { /* a tensor is its own element */
        size_t n = (size_t)kn_numel(x->rank, x->dims) * kiln_dtype_size(x->dtype);
        if (n)
            memcpy(o->data, x->data, n);
        return KILN_OK;
    }
    kn_seq *s = NULL;
    KN_TRY(get_list(r, 0, 0, &s));
    if (s->kind == KN_SEQ_KIND_SEQUENCE) { /* a sequence is its own element */
        kn_seq_ref(s);
        put(r, 0, s);
        return KILN_OK;
    }
    if (s->none)
        return kn_node_error(r->node, KILN_ERR_RUNTIME, "the optional input holds no element");
    if (s->inner) {
        if (!kn_dtype_is_handle((int)o->dtype))
            return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                 "the optional holds a sequence; a tensor was planned");
        kn_seq_ref(s->inner);
        put(r, 0, s->inner);
        return KILN_OK;
    }
    return put_elem(r, 0, s->items[0]);
}

#define K(op, fn) {op, "", "ref", NULL, NULL, NULL, seq_prepare, seq_release, fn}
const kb_kernel kb_cpu_seq[] = {
    K("SequenceEmpty", k_empty),
    K("SequenceConstruct", k_construct),
    K("SequenceInsert", k_insert),
    K("SequenceErase", k_erase),
    K("SequenceAt", k_at),
    K("SequenceLength", k_length),
    K("SplitToSequence", k_split),
    K("ConcatFromSequence", k_concat),
    K("Optional", k_optional),
    K("OptionalHasElement", k_has),
    K("OptionalGetElement", k_get),
};
const size_t kb_cpu_seq_count = KN_ARRAY_LEN(kb_cpu_seq);
