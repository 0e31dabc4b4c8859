/* onnx.c - the ONNX importer: ModelProto bytes to a kiln network (opsets,
 * inputs with dynamic dims, initializers, nodes with their attributes and
 * subgraphs, Constant nodes folded into constants, outputs), and the public
 * kiln_onnx_parse_* entry points. */
#include <stdio.h>
#include <string.h>

#include "kiln/kiln_onnx.h"
#include "onnx_internal.h"
#include "graph/control.h"
#include "plugin/plugin.h"

/* Field numbers (onnx.proto). */
enum { M_IR_VERSION = 1, M_GRAPH = 7, M_OPSET = 8 };
enum { G_NODE = 1, G_INITIALIZER = 5, G_INPUT = 11, G_OUTPUT = 12, G_SPARSE_INIT = 15 };
enum { N_INPUT = 1, N_OUTPUT = 2, N_NAME = 3, N_OP_TYPE = 4, N_ATTR = 5, N_DOMAIN = 7 };
enum {
    A_NAME = 1, A_F = 2, A_I = 3, A_S = 4, A_T = 5, A_G = 6, A_FLOATS = 7, A_INTS = 8,
    A_STRINGS = 9, A_TENSORS = 10, A_GRAPHS = 11, A_TP = 14, A_TYPE_PROTOS = 15, A_TYPE = 20,
    A_REF = 21, A_SPARSE = 22, A_SPARSES = 23
};

static kiln_status parse_graph(kx_onnx *cx, kx_pb_msg *parent, const kx_pb_field *f, kn_net *net,
                               int is_sub);

/* A NUL-terminated copy of a name; names with NUL bytes inside are refused. */
static kiln_status dup_name(kx_onnx *cx, const kx_pb_msg *m, const char *what, kx_str s,
                            char **out) {
    if (s.n && memchr(s.p, 0, s.n))
        return kx_pb_error(&cx->pb, m, NULL, "%s contains a NUL byte", what);
    *out = kn_strndup(s.p ? s.p : "", s.n);
    return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

static int str_eq(kx_str s, const char *c) {
    size_t n = strlen(c);
    return s.n == n && memcmp(s.p, c, n) == 0;
}

static int is_default_domain(kx_str d) { return d.n == 0 || str_eq(d, "ai.onnx"); }

/* ---- opsets ---- */

static kiln_status add_opset(kn_net *net, const char *domain, int version) {
    for (int i = 0; i < net->n_opsets; i++)
        if (strcmp(net->opset_domains[i], domain) == 0) {
            net->opset_versions[i] = version;
            return KILN_OK;
        }
    int n = net->n_opsets + 1;
    char **d = kn_realloc(net->opset_domains, (size_t)n * sizeof *d);
    if (!d)
        return KILN_ERR_OUT_OF_MEMORY;
    net->opset_domains = d;
    int *v = kn_realloc(net->opset_versions, (size_t)n * sizeof *v);
    if (!v)
        return KILN_ERR_OUT_OF_MEMORY;
    net->opset_versions = v;
    if (!(d[n - 1] = kn_strdup(domain)))
        return KILN_ERR_OUT_OF_MEMORY;
    v[n - 1] = version;
    net->n_opsets = n;
    if (!*domain)
        net->opset = version;
    return KILN_OK;
}

static kiln_status copy_opsets(kn_net *dst, const kn_net *src) {
    for (int i = 0; i < src->n_opsets; i++)
        KN_TRY(add_opset(dst, src->opset_domains[i], src->opset_versions[i]));
    dst->opset = src->opset;
    return KILN_OK;
}

/* Version of `domain` ("" = default) in the model's opset_import, or -1. */
static int opset_of(const kn_net *root, const char *domain) {
    for (int i = 0; i < root->n_opsets; i++)
        if (strcmp(root->opset_domains[i], domain) == 0)
            return root->opset_versions[i];
    return -1;
}

static kiln_status parse_opset(kx_onnx *cx, kx_pb_msg *m, kn_net *net) {
    kx_pb_field f;
    kx_str domain = {"", 0};
    int64_t version = 0;
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, m, &f));
        if (!f.num)
            break;
        if (f.num == 1)
            KN_TRY(kx_pb_bytes(&cx->pb, m, &f, &domain));
        else if (f.num == 2)
            KN_TRY(kx_pb_int(&cx->pb, m, &f, &version));
    }
    if (version < 1 || version > 100000)
        return kx_pb_error(&cx->pb, m, NULL, "opset version %lld of domain '%.*s' is out of range",
                           (long long)version, (int)(domain.n > 100 ? 100 : domain.n), domain.p);
    char *d = NULL;
    if (is_default_domain(domain))
        domain.n = 0;
    KN_TRY(dup_name(cx, m, "opset domain", domain, &d));
    kiln_status st = add_opset(net, d, (int)version);
    kn_free(d);
    return st;
}

/* ---- value info (graph inputs and outputs) ---- */

typedef struct value_info {
    kx_str name;
    int has_type, non_tensor, has_shape;
    int64_t elem_type;
    int64_t handle;     /* a sequence or optional: its handle dtype (core.h), else 0 */
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    kx_str dim_names[KILN_MAX_DIMS];
} value_info;

static kiln_status parse_dim(kx_onnx *cx, kx_pb_msg *m, value_info *vi, int k) {
    kx_pb_field f;
    vi->dims[k] = -1;
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, m, &f));
        if (!f.num)
            return KILN_OK;
        if (f.num == 1) {
            int64_t v;
            KN_TRY(kx_pb_int(&cx->pb, m, &f, &v));
            /* -1 is an old way to say "dynamic"; other negatives are wrong */
            if (v < -1)
                return kx_pb_fail(&cx->pb, m, &f, KILN_ERR_PARSE,
                                  "tensor '%.*s': dimension %d is %lld", (int)vi->name.n,
                                  vi->name.p, k, (long long)v);
            vi->dims[k] = v < 0 ? -1 : v;
            vi->dim_names[k].n = 0;
        } else if (f.num == 2) {
            KN_TRY(kx_pb_bytes(&cx->pb, m, &f, &vi->dim_names[k]));
            vi->dims[k] = -1;
        }
    }
}

static kiln_status parse_shape(kx_onnx *cx, kx_pb_msg *m, value_info *vi) {
    kx_pb_field f;
    vi->has_shape = 1;
    vi->rank = 0;
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, m, &f));
        if (!f.num)
            return KILN_OK;
        if (f.num != 1)
            continue;
        if (vi->rank >= KILN_MAX_DIMS)
            return kx_pb_fail(&cx->pb, m, &f, KILN_ERR_UNSUPPORTED,
                              "tensor '%.*s' has more than %d dimensions", (int)vi->name.n,
                              vi->name.p, KILN_MAX_DIMS);
        kx_pb_msg d;
        size_t saved;
        KN_TRY(kx_pb_enter(&cx->pb, m, &f, &kx_d_dim, &d, &saved));
        kiln_status st = parse_dim(cx, &d, vi, vi->rank);
        kx_pb_leave(&cx->pb, saved);
        KN_TRY(st);
        vi->rank++;
    }
}

static kiln_status parse_type_tensor(kx_onnx *cx, kx_pb_msg *m, value_info *vi) {
    kx_pb_field f;
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, m, &f));
        if (!f.num)
            return KILN_OK;
        if (f.num == 1) {
            KN_TRY(kx_pb_int(&cx->pb, m, &f, &vi->elem_type));
        } else if (f.num == 2) {
            kx_pb_msg s;
            size_t saved;
            KN_TRY(kx_pb_enter(&cx->pb, m, &f, &kx_d_shape, &s, &saved));
            kiln_status st = parse_shape(cx, &s, vi);
            kx_pb_leave(&cx->pb, saved);
            KN_TRY(st);
        }
    }
}

static kiln_status parse_type(kx_onnx *cx, kx_pb_msg *m, value_info *vi);

/* TypeProto.Sequence / .Optional (seq: which) m: its element type, nested
 * once at most (an optional of a sequence), into vi->handle. */
static kiln_status parse_type_wrap(kx_onnx *cx, kx_pb_msg *m, value_info *vi, int seq) {
    kx_pb_field f;
    value_info in;
    memset(&in, 0, sizeof in);
    in.name = vi->name;
    in.rank = -1;
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, m, &f));
        if (!f.num)
            break;
        if (f.num != 1)
            continue;
        kx_pb_msg t;
        size_t saved;
        KN_TRY(kx_pb_enter(&cx->pb, m, &f, &kx_d_type, &t, &saved));
        kiln_status st = parse_type(cx, &t, &in);
        kx_pb_leave(&cx->pb, saved);
        KN_TRY(st);
    }
    int nl = (int)(vi->name.n > 200 ? 200 : vi->name.n);
    bool inner_seq = in.handle && (in.handle & 0x300) == KN_DTYPE_SEQUENCE;
    if (in.non_tensor || (in.handle && (seq || !inner_seq)) || in.elem_type <= 0 ||
        in.elem_type > KILN_DTYPE_FLOAT8E5M2FNUZ)
        return kx_pb_fail(&cx->pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "value '%.*s': kiln holds sequences of tensors and optionals of a "
                          "tensor or of such a sequence only",
                          nl, vi->name.p);
    vi->elem_type = in.elem_type;
    vi->handle = (seq ? KN_DTYPE_SEQUENCE : KN_DTYPE_OPTIONAL | (inner_seq ? KN_DTYPE_SEQUENCE : 0)) |
                 in.elem_type;
    vi->has_shape = 1;
    vi->rank = 0;
    return KILN_OK;
}

static kiln_status parse_type(kx_onnx *cx, kx_pb_msg *m, value_info *vi) {
    kx_pb_field f;
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, m, &f));
        if (!f.num)
            return KILN_OK;
        if (f.num == 1) {
            vi->has_type = 1;
            kx_pb_msg t;
            size_t saved;
            KN_TRY(kx_pb_enter(&cx->pb, m, &f, &kx_d_type_tensor, &t, &saved));
            kiln_status st = parse_type_tensor(cx, &t, vi);
            kx_pb_leave(&cx->pb, saved);
            KN_TRY(st);
        } else if (f.num == 4 || f.num == 9) {
            vi->has_type = 1;
            kx_pb_msg t;
            size_t saved;
            KN_TRY(kx_pb_enter(&cx->pb, m, &f, f.num == 4 ? &kx_d_type_seq : &kx_d_type_opt, &t,
                               &saved));
            kiln_status st = parse_type_wrap(cx, &t, vi, f.num == 4);
            kx_pb_leave(&cx->pb, saved);
            KN_TRY(st);
        } else if (f.num == 5 || f.num == 8) {
            vi->has_type = 1;
            vi->non_tensor = (int)f.num;
        }
    }
}

static kiln_status parse_value_info(kx_onnx *cx, kx_pb_msg *m, value_info *vi) {
    kx_pb_field f;
    memset(vi, 0, sizeof *vi);
    vi->name.p = "";
    vi->rank = -1;
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, m, &f));
        if (!f.num)
            break;
        if (f.num == 1) {
            KN_TRY(kx_pb_bytes(&cx->pb, m, &f, &vi->name));
        } else if (f.num == 2) {
            kx_pb_msg t;
            size_t saved;
            KN_TRY(kx_pb_enter(&cx->pb, m, &f, &kx_d_type, &t, &saved));
            kiln_status st = parse_type(cx, &t, vi);
            kx_pb_leave(&cx->pb, saved);
            KN_TRY(st);
        }
    }
    if (!vi->name.n)
        return kx_pb_error(&cx->pb, m, NULL, "the value has no name");
    return KILN_OK;
}

static kiln_status add_input(kx_onnx *cx, kx_pb_msg *m, kn_net *net, const value_info *vi,
                             int is_sub) {
    kx_pb *pb = &cx->pb;
    int nl = (int)(vi->name.n > 200 ? 200 : vi->name.n);
    static const char *const kinds[] = {[4] = "sequence", [5] = "map", [8] = "sparse tensor",
                                        [9] = "optional"};
    if (vi->non_tensor)
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "input '%.*s' is a %s; kiln supports tensor inputs only", nl,
                          vi->name.p, kinds[vi->non_tensor]);
    if (!is_sub) {
        if (!vi->has_type || vi->elem_type == 0)
            return kx_pb_error(pb, m, NULL, "input '%.*s' has no tensor element type", nl,
                               vi->name.p);
        if (!vi->has_shape)
            return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                              "input '%.*s' has no shape (unknown rank); kiln needs the rank of "
                              "every input",
                              nl, vi->name.p);
    }
    if (vi->elem_type < 0 || vi->elem_type > KILN_DTYPE_FLOAT8E5M2FNUZ ||
        (vi->elem_type && kiln_dtype_size((kiln_dtype)vi->elem_type) == 0))
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "input '%.*s' has data type %lld (%s), which kiln does not support", nl,
                          vi->name.p, (long long)vi->elem_type,
                          vi->elem_type == KILN_DTYPE_STRING ? "string" : "unknown");
    char *name = NULL;
    KN_TRY(dup_name(cx, m, "input name", vi->name, &name));
    int idx = kn_net_find(net, name);
    kiln_status st = KILN_OK;
    if (idx >= 0 && (net->tensors[idx].flags & KN_T_CONST)) {
        /* Also an initializer: a constant, as TensorRT treats it. */
        kn_free(name);
        return KILN_OK;
    }
    if (idx >= 0)
        st = kx_pb_error(pb, m, NULL, "input '%s' is listed twice", name);
    if (st == KILN_OK)
        st = kn_grow((void **)&net->inputs, &net->cap_inputs, net->n_inputs + 1, sizeof(int));
    if (st == KILN_OK)
        st = kn_net_tensor(net, name, &idx);
    kn_free(name);
    KN_TRY(st);
    kn_tensor *t = &net->tensors[idx];
    t->flags |= KN_T_INPUT;
    t->dtype = (kiln_dtype)(vi->handle ? vi->handle : vi->elem_type);
    t->rank = vi->has_shape ? vi->rank : -1;
    net->inputs[net->n_inputs++] = idx;
    for (int i = 0; i < vi->rank; i++) {
        t->dims[i] = vi->dims[i];
        if (vi->dim_names[i].n)
            KN_TRY(dup_name(cx, m, "dimension name", vi->dim_names[i], &t->dim_names[i]));
    }
    return KILN_OK;
}

/* ---- attributes ---- */

static const char *attr_type_name(int64_t t) {
    static const char *const names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR",
                                        "GRAPH", "FLOATS", "INTS", "STRINGS", "TENSORS",
                                        "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS",
                                        "TYPE_PROTO", "TYPE_PROTOS"};
    return t >= 0 && t < (int64_t)KN_ARRAY_LEN(names) ? names[t] : "unknown";
}

typedef struct attr_scan {
    kx_str name, s, ref;
    int64_t type, i;
    float f;
    int has_name, has_f, has_i, has_s, has_ref;
    kx_pb_field t, g, tp;   /* num 0 when absent */
    size_t n_floats, n_ints, n_strings;
    int other;              /* field number of a present field kiln cannot hold */
} attr_scan;

typedef struct float_sink { float *p; size_t cap; } float_sink;
static void put_float(void *u, size_t k, uint64_t raw) {
    float_sink *s = u;
    if (k < s->cap)
        s->p[k] = kx_pb_f32(raw);
}
typedef struct int_sink { int64_t *p; size_t cap; } int_sink;
static void put_int(void *u, size_t k, uint64_t raw) {
    int_sink *s = u;
    if (k < s->cap)
        s->p[k] = (int64_t)raw;
}

static kiln_status scan_attr(kx_onnx *cx, kx_pb_msg *m, attr_scan *a) {
    kx_pb *pb = &cx->pb;
    kx_pb_field f;
    memset(a, 0, sizeof *a);
    a->name.p = a->s.p = a->ref.p = "";
    for (;;) {
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            return KILN_OK;
        switch (f.num) {
        case A_NAME: KN_TRY(kx_pb_bytes(pb, m, &f, &a->name)); a->has_name = 1; break;
        case A_F:
            KN_TRY(kx_pb_want(pb, m, &f, KX_WT_I32));
            a->f = kx_pb_f32(f.v);
            a->has_f = 1;
            break;
        case A_I: KN_TRY(kx_pb_int(pb, m, &f, &a->i)); a->has_i = 1; break;
        case A_S: KN_TRY(kx_pb_bytes(pb, m, &f, &a->s)); a->has_s = 1; break;
        case A_T: KN_TRY(kx_pb_want(pb, m, &f, KX_WT_LEN)); a->t = f; break;
        case A_G: KN_TRY(kx_pb_want(pb, m, &f, KX_WT_LEN)); a->g = f; break;
        case A_FLOATS: KN_TRY(kx_pb_rep_count(pb, m, &f, KX_WT_I32, &a->n_floats)); break;
        case A_INTS: KN_TRY(kx_pb_rep_count(pb, m, &f, KX_WT_VARINT, &a->n_ints)); break;
        case A_STRINGS: KN_TRY(kx_pb_rep_count(pb, m, &f, KX_WT_LEN, &a->n_strings)); break;
        case A_TYPE: KN_TRY(kx_pb_int(pb, m, &f, &a->type)); break;
        case A_REF: KN_TRY(kx_pb_bytes(pb, m, &f, &a->ref)); a->has_ref = 1; break;
        case A_TP:
            KN_TRY(kx_pb_want(pb, m, &f, KX_WT_LEN));
            a->tp = f;
            a->other = (int)f.num;
            break;
        case A_TENSORS: case A_GRAPHS: case A_TYPE_PROTOS: case A_SPARSE:
        case A_SPARSES:
            a->other = (int)f.num;
            break;
        default: break;
        }
    }
}

/* Attribute type from the fields present, for writers that omit `type`. */
static int64_t infer_attr_type(const attr_scan *a) {
    if (a->has_f) return KN_ATTR_FLOAT;
    if (a->has_i) return KN_ATTR_INT;
    if (a->has_s) return KN_ATTR_STRING;
    if (a->t.num) return KN_ATTR_TENSOR;
    if (a->g.num) return KN_ATTR_GRAPH;
    if (a->n_floats) return KN_ATTR_FLOATS;
    if (a->n_ints) return KN_ATTR_INTS;
    if (a->n_strings) return KN_ATTR_STRINGS;
    switch (a->other) {
    case A_TENSORS: return 9;
    case A_GRAPHS: return 10;
    case A_SPARSE: return 11;
    case A_SPARSES: return 12;
    case A_TP: return 13;
    case A_TYPE_PROTOS: return 14;
    }
    return KN_ATTR_UNDEFINED;
}

static kiln_status fill_attr(kx_onnx *cx, kx_pb_msg *m, kn_net *root, const attr_scan *sc,
                             kn_attr *a) {
    kx_pb *pb = &cx->pb;
    size_t start = m->pos;
    kx_pb_field f;
    switch (a->type) {
    case KN_ATTR_FLOAT: a->f = sc->f; return KILN_OK;
    case KN_ATTR_INT: a->i = sc->i; return KILN_OK;
    case KN_ATTR_STRING:
        a->s_len = sc->s.n;
        a->s = kn_strndup(sc->s.p ? sc->s.p : "", sc->s.n);
        return a->s ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    case KN_ATTR_TENSOR: {
        if (!sc->t.num)
            return kx_pb_error(pb, m, NULL, "attribute '%s' of type TENSOR has no tensor (t)",
                               a->name);
        kx_pb_msg t;
        size_t saved;
        KN_TRY(kx_pb_enter(pb, m, &sc->t, &kx_d_tensor, &t, &saved));
        kn_tdata v;
        kiln_status st = kx_onnx_tensor(cx, &t, &v, NULL);
        kx_pb_leave(pb, saved);
        KN_TRY(st);
        if (!(a->tensor = kn_calloc(1, sizeof *a->tensor))) {
            kn_tdata_free(&v);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        *a->tensor = v;
        return KILN_OK;
    }
    case KN_ATTR_GRAPH: {
        if (!sc->g.num)
            return kx_pb_error(pb, m, NULL, "attribute '%s' of type GRAPH has no graph (g)",
                               a->name);
        kn_net *sub;
        KN_TRY(kn_net_new(&sub));
        kiln_status st = copy_opsets(sub, root);
        if (st == KILN_OK)
            st = parse_graph(cx, m, &sc->g, sub, 1);
        if (st != KILN_OK) {
            kn_net_free(sub);
            return st;
        }
        a->graph = sub;
        return KILN_OK;
    }
    case KN_ATTR_FLOATS: case KN_ATTR_INTS: case KN_ATTR_STRINGS: break;
    default:
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "attribute '%s' has type %s, which kiln does not support", a->name,
                          attr_type_name(a->type));
    }
    /* list attributes: allocate, then a second pass over the fields */
    if (a->type == KN_ATTR_FLOATS) {
        a->n = sc->n_floats;
        if (!(a->floats = kn_malloc(a->n * sizeof(float) + 1)))
            return KILN_ERR_OUT_OF_MEMORY;
    } else if (a->type == KN_ATTR_INTS) {
        a->n = sc->n_ints;
        if (!(a->ints = kn_malloc(a->n * sizeof(int64_t) + 1)))
            return KILN_ERR_OUT_OF_MEMORY;
    } else {
        if (!(a->strings = kn_calloc(sc->n_strings + 1, sizeof(char *))))
            return KILN_ERR_OUT_OF_MEMORY;
        a->n = 0; /* counts filled strings so kn_attr_free frees only those */
    }
    size_t k = 0;
    kx_pb_rewind(m, start);
    for (;;) {
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            break;
        if (a->type == KN_ATTR_FLOATS && f.num == A_FLOATS) {
            float_sink s = {a->floats, a->n};
            size_t before = k;
            KN_TRY(kx_pb_rep_count(pb, m, &f, KX_WT_I32, &k));
            kx_pb_rep_each(pb, &f, KX_WT_I32, before, put_float, &s);
        } else if (a->type == KN_ATTR_INTS && f.num == A_INTS) {
            int_sink s = {a->ints, a->n};
            size_t before = k;
            KN_TRY(kx_pb_rep_count(pb, m, &f, KX_WT_VARINT, &k));
            kx_pb_rep_each(pb, &f, KX_WT_VARINT, before, put_int, &s);
        } else if (a->type == KN_ATTR_STRINGS && f.num == A_STRINGS && a->n < sc->n_strings) {
            if (!(a->strings[a->n] = kn_strndup((const char *)pb->buf + f.off, f.len)))
                return KILN_ERR_OUT_OF_MEMORY;
            a->n++;
        }
    }
    return KILN_OK;
}

/* Decode AttributeProto m into a (zeroed by the caller; freed by the caller
 * on failure). */
static kiln_status parse_attr(kx_onnx *cx, kx_pb_msg *m, kn_net *root, const char *node_label,
                              kn_attr *a) {
    kx_pb *pb = &cx->pb;
    size_t start = m->pos;
    attr_scan sc;
    KN_TRY(scan_attr(cx, m, &sc));
    kx_pb_rewind(m, start);
    if (!sc.name.n)
        return kx_pb_error(pb, m, NULL, "%s: an attribute has no name", node_label);
    KN_TRY(dup_name(cx, m, "attribute name", sc.name, &a->name));
    if (sc.has_ref)
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "%s: attribute '%s' refers to '%.*s' of an enclosing function "
                          "(ref_attr_name), which kiln does not support",
                          node_label, a->name, (int)(sc.ref.n > 100 ? 100 : sc.ref.n), sc.ref.p);
    int64_t type = sc.type ? sc.type : infer_attr_type(&sc);
    if (type == KN_ATTR_UNDEFINED)
        return kx_pb_error(pb, m, NULL, "%s: attribute '%s' has no type and no value",
                           node_label, a->name);
    if (type == 13 && sc.tp.num) { /* TYPE_PROTO (Optional's type): its dtype code, an INT */
        value_info vi;
        memset(&vi, 0, sizeof vi);
        vi.name = sc.name;
        kx_pb_msg t;
        size_t saved;
        KN_TRY(kx_pb_enter(pb, m, &sc.tp, &kx_d_type, &t, &saved));
        kiln_status st = parse_type(cx, &t, &vi);
        kx_pb_leave(pb, saved);
        KN_TRY(st);
        if (vi.non_tensor || vi.elem_type <= 0)
            return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                              "%s: attribute '%s' names a type kiln does not hold", node_label,
                              a->name);
        a->type = KN_ATTR_INT;
        a->i = vi.handle ? vi.handle : vi.elem_type;
        return KILN_OK;
    }
    if (type < 0 || type > KN_ATTR_STRINGS)
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "%s: attribute '%s' has type %s, which kiln does not support",
                          node_label, a->name, attr_type_name(type));
    a->type = (kn_attr_type)type;
    return fill_attr(cx, m, root, &sc, a);
}

/* ---- nodes ---- */

typedef struct node_scan {
    kx_str name, op_type, domain;
    int n_in, n_out, n_attr;
} node_scan;

static kiln_status scan_node(kx_onnx *cx, kx_pb_msg *m, node_scan *ns) {
    kx_pb *pb = &cx->pb;
    kx_pb_field f;
    memset(ns, 0, sizeof *ns);
    ns->name.p = ns->op_type.p = ns->domain.p = "";
    for (;;) {
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            return KILN_OK;
        switch (f.num) {
        case N_INPUT: KN_TRY(kx_pb_want(pb, m, &f, KX_WT_LEN)); ns->n_in++; break;
        case N_OUTPUT: KN_TRY(kx_pb_want(pb, m, &f, KX_WT_LEN)); ns->n_out++; break;
        case N_NAME: KN_TRY(kx_pb_bytes(pb, m, &f, &ns->name)); break;
        case N_OP_TYPE: KN_TRY(kx_pb_bytes(pb, m, &f, &ns->op_type)); break;
        case N_DOMAIN: KN_TRY(kx_pb_bytes(pb, m, &f, &ns->domain)); break;
        case N_ATTR: KN_TRY(kx_pb_want(pb, m, &f, KX_WT_LEN)); ns->n_attr++; break;
        default: break;
        }
        if (ns->n_in > 65536 || ns->n_out > 65536 || ns->n_attr > 65536)
            return kx_pb_error(pb, m, NULL, "node has more than 65536 inputs, outputs or "
                                            "attributes");
    }
}

typedef struct attr_list {
    kn_attr *a;
    int n;
} attr_list;

static void attr_list_free(attr_list *l) {
    for (int i = 0; i < l->n; i++)
        kn_attr_free(&l->a[i]);
    kn_free(l->a);
    l->a = NULL;
    l->n = 0;
}

static kiln_status parse_attrs(kx_onnx *cx, kx_pb_msg *m, int n, const char *label,
                               attr_list *out) {
    kx_pb *pb = &cx->pb;
    kx_pb_field f;
    if (!(out->a = kn_calloc((size_t)n + 1, sizeof(kn_attr))))
        return KILN_ERR_OUT_OF_MEMORY;
    for (;;) {
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            return KILN_OK;
        if (f.num != N_ATTR || out->n >= n)
            continue;
        kx_pb_msg am;
        size_t saved;
        KN_TRY(kx_pb_enter(pb, m, &f, &kx_d_attr, &am, &saved));
        kn_attr *a = &out->a[out->n++];
        kiln_status st = parse_attr(cx, &am, cx->root, label, a);
        kx_pb_leave(pb, saved);
        KN_TRY(st);
        for (int j = 0; j < out->n - 1; j++)
            if (strcmp(out->a[j].name, a->name) == 0)
                return kx_pb_error(pb, m, &f, "%s: attribute '%s' appears twice", label, a->name);
    }
}

/* A Constant node becomes a constant tensor (no node is added). */
static kiln_status constant_value(kx_onnx *cx, kx_pb_msg *m, const char *label, attr_list *al,
                                  kn_tdata *v) {
    kx_pb *pb = &cx->pb;
    if (al->n != 1)
        return kx_pb_error(pb, m, NULL, "%s: a Constant needs exactly one value attribute, it has "
                                        "%d", label, al->n);
    kn_attr *a = &al->a[0];
    const char *nm = a->name;
    int64_t one = 1, n = (int64_t)a->n;
    if (strcmp(nm, "value") == 0 && a->type == KN_ATTR_TENSOR) {
        *v = *a->tensor;
        memset(a->tensor, 0, sizeof *a->tensor);
        return KILN_OK;
    }
    if (strcmp(nm, "value_float") == 0 && a->type == KN_ATTR_FLOAT) {
        KN_TRY(kn_tdata_alloc(v, KILN_DTYPE_FLOAT, 0, &one));
        memcpy(v->data, &a->f, sizeof(float));
        return KILN_OK;
    }
    if (strcmp(nm, "value_int") == 0 && a->type == KN_ATTR_INT) {
        KN_TRY(kn_tdata_alloc(v, KILN_DTYPE_INT64, 0, &one));
        memcpy(v->data, &a->i, sizeof(int64_t));
        return KILN_OK;
    }
    if (strcmp(nm, "value_floats") == 0 && a->type == KN_ATTR_FLOATS) {
        KN_TRY(kn_tdata_alloc(v, KILN_DTYPE_FLOAT, 1, &n));
        if (a->n)
            memcpy(v->data, a->floats, a->n * sizeof(float));
        return KILN_OK;
    }
    if (strcmp(nm, "value_ints") == 0 && a->type == KN_ATTR_INTS) {
        KN_TRY(kn_tdata_alloc(v, KILN_DTYPE_INT64, 1, &n));
        if (a->n)
            memcpy(v->data, a->ints, a->n * sizeof(int64_t));
        return KILN_OK;
    }
    if (strcmp(nm, "value_string") == 0 || strcmp(nm, "value_strings") == 0)
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "%s: string constants ('%s') are not supported", label, nm);
    return kx_pb_error(pb, m, NULL, "%s: attribute '%s' of type %s is not a Constant value",
                       label, nm, attr_type_name(a->type));
}

/* Index of the tensor node output `name` names, refusing one produced twice. */
static kiln_status output_tensor(kx_onnx *cx, kx_pb_msg *m, kn_net *net, const char *label,
                                 const char *name, int *idx) {
    int e = kn_net_find(net, name);
    if (e >= 0) {
        const kn_tensor *t = &net->tensors[e];
        if (t->producer >= 0)
            return kx_pb_error(&cx->pb, m, NULL, "%s: output '%s' is already produced by node '%s'",
                               label, name, net->nodes[t->producer].name);
        if (t->flags & (KN_T_INPUT | KN_T_CONST))
            return kx_pb_error(&cx->pb, m, NULL,
                               "%s: output '%s' is already a graph input or constant", label,
                               name);
    }
    return kn_net_tensor(net, name, idx);
}

static kiln_status node_tensors(kx_onnx *cx, kx_pb_msg *m, kn_net *net, const char *label,
                                int *in, int *out) {
    kx_pb *pb = &cx->pb;
    kx_pb_field f;
    int ni = 0, no = 0;
    for (;;) {
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            return KILN_OK;
        if (f.num != N_INPUT && f.num != N_OUTPUT)
            continue;
        kx_str s;
        KN_TRY(kx_pb_bytes(pb, m, &f, &s));
        int *slot = f.num == N_INPUT ? &in[ni++] : &out[no++];
        *slot = -1;
        if (!s.n)
            continue;
        char *name = NULL;
        KN_TRY(dup_name(cx, m, "tensor name", s, &name));
        kiln_status st = f.num == N_INPUT ? kn_net_tensor(net, name, slot)
                                          : output_tensor(cx, m, net, label, name, slot);
        if (st == KILN_OK && f.num == N_OUTPUT) {
            for (int j = 0; j < no - 1; j++)
                if (out[j] == *slot)
                    st = kx_pb_error(pb, m, NULL, "%s: output '%s' is listed twice", label, name);
        }
        kn_free(name);
        KN_TRY(st);
    }
}

static kiln_status parse_node(kx_onnx *cx, kx_pb_msg *m, kn_net *net) {
    kx_pb *pb = &cx->pb;
    size_t start = m->pos;
    node_scan ns;
    KN_TRY(scan_node(cx, m, &ns));
    if (!ns.op_type.n)
        return kx_pb_error(pb, m, NULL, "node '%.*s' has no op_type",
                           (int)(ns.name.n > 200 ? 200 : ns.name.n), ns.name.p);
    char *name = NULL, *op = NULL, *dom = NULL;
    int *in = NULL, *out = NULL;
    attr_list al = {0};
    kiln_status st;
    kx_str domain = ns.domain;
    if (is_default_domain(domain))
        domain.n = 0;
    if ((st = dup_name(cx, m, "node name", ns.name, &name)) != KILN_OK ||
        (st = dup_name(cx, m, "op_type", ns.op_type, &op)) != KILN_OK ||
        (st = dup_name(cx, m, "domain", domain, &dom)) != KILN_OK)
        goto done;
    if (!*name) { /* unnamed nodes get "<op_type>_<index>" so messages can name them */
        char gen[160];
        snprintf(gen, sizeof gen, "%.120s_%d", op, net->n_nodes);
        kn_free(name);
        if (!(name = kn_strdup(gen))) {
            st = KILN_ERR_OUT_OF_MEMORY;
            goto done;
        }
    }
    char label[512];
    snprintf(label, sizeof label, "node '%.200s' (%s%s%.200s)", name, dom, *dom ? "::" : "", op);
    int opset = opset_of(cx->root, dom);
    if (opset < 0) {
        st = kx_pb_error(pb, m, NULL, "%s: domain '%s' is not in the model's opset_import", label,
                         kx_domain_label(dom));
        goto done;
    }
    kx_pb_rewind(m, start);
    if ((st = parse_attrs(cx, m, ns.n_attr, label, &al)) != KILN_OK)
        goto done;
    if (!*dom && strcmp(op, "Constant") == 0) {
        kn_tdata v;
        int idx = -1;
        if (ns.n_out != 1 || ns.n_in != 0) {
            st = kx_pb_error(pb, m, NULL, "%s: a Constant has no inputs and one output", label);
            goto done;
        }
        if ((st = constant_value(cx, m, label, &al, &v)) != KILN_OK)
            goto done;
        kx_pb_rewind(m, start);
        st = node_tensors(cx, m, net, label, &idx, &idx);
        if (st == KILN_OK && idx < 0)
            st = kx_pb_error(pb, m, NULL, "%s: the Constant's output has no name", label);
        if (st != KILN_OK) {
            kn_tdata_free(&v);
            goto done;
        }
        kn_tensor_set_value(&net->tensors[idx], &v);
        goto done;
    }
    in = kn_calloc((size_t)ns.n_in + 1, sizeof(int));
    out = kn_calloc((size_t)ns.n_out + 1, sizeof(int));
    if (!in || !out) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    kx_pb_rewind(m, start);
    if ((st = node_tensors(cx, m, net, label, in, out)) != KILN_OK)
        goto done;
    int index;
    if ((st = kn_net_add_node(net, name, op, dom, opset, ns.n_in, in, ns.n_out, out, &index)) !=
        KILN_OK)
        goto done;
    net->nodes[index].attrs = al.a;
    net->nodes[index].n_attr = al.n;
    al.a = NULL;
    al.n = 0;
done:
    attr_list_free(&al);
    kn_free(in);
    kn_free(out);
    kn_free(name);
    kn_free(op);
    kn_free(dom);
    return st;
}

/* ---- graphs ---- */

static kiln_status add_initializer(kx_onnx *cx, kx_pb_msg *m, kn_net *net) {
    kn_tdata v;
    kx_str nm;
    KN_TRY(kx_onnx_tensor(cx, m, &v, &nm));
    char *name = NULL;
    kiln_status st = KILN_OK;
    if (!nm.n)
        st = kx_pb_error(&cx->pb, m, NULL, "an initializer has no name");
    if (st == KILN_OK)
        st = dup_name(cx, m, "initializer name", nm, &name);
    if (st == KILN_OK && kn_net_find(net, name) >= 0)
        st = kx_pb_error(&cx->pb, m, NULL, "initializer '%s' appears twice", name);
    int idx = -1;
    if (st == KILN_OK)
        st = kn_net_tensor(net, name, &idx);
    kn_free(name);
    if (st != KILN_OK) {
        kn_tdata_free(&v);
        return st;
    }
    kn_tensor_set_value(&net->tensors[idx], &v);
    return KILN_OK;
}

typedef kiln_status (*graph_item_fn)(kx_onnx *cx, kx_pb_msg *m, kn_net *net, int is_sub);

static kiln_status item_initializer(kx_onnx *cx, kx_pb_msg *m, kn_net *net, int is_sub) {
    (void)is_sub;
    return add_initializer(cx, m, net);
}

static kiln_status item_input(kx_onnx *cx, kx_pb_msg *m, kn_net *net, int is_sub) {
    value_info vi;
    KN_TRY(parse_value_info(cx, m, &vi));
    return add_input(cx, m, net, &vi, is_sub);
}

static kiln_status item_node(kx_onnx *cx, kx_pb_msg *m, kn_net *net, int is_sub) {
    (void)is_sub;
    return parse_node(cx, m, net);
}

static kiln_status item_output(kx_onnx *cx, kx_pb_msg *m, kn_net *net, int is_sub) {
    value_info vi;
    KN_TRY(parse_value_info(cx, m, &vi));
    char *name = NULL;
    KN_TRY(dup_name(cx, m, "output name", vi.name, &name));
    int idx = kn_net_find(net, name);
    kiln_status st = KILN_OK;
    if (idx < 0 && !is_sub)
        st = kx_pb_error(&cx->pb, m, NULL,
                         "graph output '%s' is not produced by any node, nor an input or "
                         "initializer",
                         name);
    else if (idx < 0) /* a subgraph may output a value of the enclosing graph */
        st = kn_net_tensor(net, name, &idx);
    if (st == KILN_OK)
        st = kiln_network_mark_output(net, name);
    /* the declared type where nothing else gives one yet: a sequence or
     * optional output (its kind), or a value whose inference waits for a
     * sequence input to be bound */
    if (st == KILN_OK && net->tensors[idx].dtype == KILN_DTYPE_UNDEFINED && vi.has_type &&
        !vi.non_tensor && vi.elem_type > 0 && vi.elem_type <= KILN_DTYPE_FLOAT8E5M2FNUZ)
        net->tensors[idx].dtype = (kiln_dtype)(vi.handle ? vi.handle : vi.elem_type);
    kn_free(name);
    return st;
}

/* Visit every field `num` of graph g as a message of type desc. */
static kiln_status graph_pass(kx_onnx *cx, kx_pb_msg *g, size_t start, uint32_t num,
                              const kx_pb_mdesc *desc, graph_item_fn fn, kn_net *net,
                              int is_sub) {
    kx_pb_field f;
    kx_pb_rewind(g, start);
    for (;;) {
        KN_TRY(kx_pb_next(&cx->pb, g, &f));
        if (!f.num)
            return KILN_OK;
        if (f.num == G_SPARSE_INIT && num == G_INITIALIZER)
            return kx_pb_fail(&cx->pb, g, &f, KILN_ERR_UNSUPPORTED,
                              "sparse initializers are not supported");
        if (f.num != num)
            continue;
        kx_pb_msg m;
        size_t saved;
        KN_TRY(kx_pb_enter(&cx->pb, g, &f, desc, &m, &saved));
        kiln_status st = fn(cx, &m, net, is_sub);
        kx_pb_leave(&cx->pb, saved);
        KN_TRY(st);
    }
}

/* In the main graph every value a node reads must come from somewhere (a
 * subgraph may read values of its enclosing graphs). */
static kiln_status check_inputs_known(const kn_net *net) {
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0)
                continue;
            const kn_tensor *t = &net->tensors[n->in[k]];
            if (t->producer < 0 && !(t->flags & (KN_T_INPUT | KN_T_CONST)))
                return kn_node_error(n, KILN_ERR_PARSE,
                                     "input %d '%s' is not a graph input, an initializer, nor "
                                     "the output of any node",
                                     k, t->name);
        }
    }
    return KILN_OK;
}

static kiln_status parse_graph(kx_onnx *cx, kx_pb_msg *parent, const kx_pb_field *f, kn_net *net,
                               int is_sub) {
    kx_pb_msg g;
    size_t saved;
    KN_TRY(kx_pb_enter(&cx->pb, parent, f, &kx_d_graph, &g, &saved));
    size_t start = g.pos;
    /* Initializers first so inputs that are also initializers become constants;
     * nodes before outputs so outputs name existing tensors. */
    kiln_status st = graph_pass(cx, &g, start, G_INITIALIZER, &kx_d_tensor, item_initializer,
                                net, is_sub);
    if (st == KILN_OK)
        st = graph_pass(cx, &g, start, G_INPUT, &kx_d_value_info, item_input, net, is_sub);
    if (st == KILN_OK)
        st = graph_pass(cx, &g, start, G_NODE, &kx_d_node, item_node, net, is_sub);
    if (st == KILN_OK && !is_sub)
        st = check_inputs_known(net);
    if (st == KILN_OK)
        st = graph_pass(cx, &g, start, G_OUTPUT, &kx_d_value_info, item_output, net, is_sub);
    kx_pb_leave(&cx->pb, saved);
    return st;
}

/* ---- model ---- */

static kiln_status parse_model(kx_onnx *cx, kx_pb_msg *root, kn_net *net) {
    kx_pb *pb = &cx->pb;
    kx_pb_field f, graph = {0};
    int64_t ir_version = 0;
    cx->root = net;
    for (;;) {
        KN_TRY(kx_pb_next(pb, root, &f));
        if (!f.num)
            break;
        if (f.num == M_IR_VERSION) {
            KN_TRY(kx_pb_int(pb, root, &f, &ir_version));
        } else if (f.num == M_GRAPH) {
            KN_TRY(kx_pb_want(pb, root, &f, KX_WT_LEN));
            if (graph.num)
                return kx_pb_error(pb, root, &f, "the model has a second graph (at offset %zu)",
                                   f.tag_off);
            graph = f;
        } else if (f.num == M_OPSET) {
            kx_pb_msg m;
            size_t saved;
            KN_TRY(kx_pb_enter(pb, root, &f, &kx_d_opset, &m, &saved));
            kiln_status st = parse_opset(cx, &m, net);
            kx_pb_leave(pb, saved);
            KN_TRY(st);
        }
    }
    if (!graph.num)
        return kx_pb_error(pb, root, NULL, "the model has no graph (%zu bytes read)", pb->size);
    if (ir_version > 10)
        kn_log(KILN_LOG_INFO, "ONNX IR version %lld is newer than kiln knows (10); reading anyway",
               (long long)ir_version);
    return parse_graph(cx, root, &graph, net, 0);
}

/* Every node's (domain, op_type) must be known to kiln and its attributes
 * have the types their names take, in subgraphs too. */
static kiln_status check_ops(const kn_net *net) {
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        /* subgraphs first: the innermost unknown op is the most precise report */
        for (int k = 0; k < n->n_attr; k++) {
            if (n->attrs[k].type != KN_ATTR_GRAPH || !n->attrs[k].graph)
                continue;
            kiln_status st = check_ops(n->attrs[k].graph);
            if (st != KILN_OK)
                return kn_error_wrap(st, "in subgraph '%s' of node '%s' (%s)", n->attrs[k].name,
                                     n->name, n->op_type);
        }
        if (!kn_op_find(n->domain, n->op_type))
            return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                 "op type '%s' of domain '%s' (opset %d) is not supported",
                                 n->op_type, kx_domain_label(n->domain), n->opset);
        KN_TRY(kn_node_check_attrs(n));
    }
    return KILN_OK;
}

static kiln_status parse(const void *data, size_t size, kn_blob *blob, const char *base_dir,
                         unsigned flags, kn_net **out) {
    kx_onnx cx;
    memset(&cx, 0, sizeof cx);
    cx.blob = blob;
    cx.base_dir = base_dir;
    cx.flags = flags;
    kx_pb_msg root;
    kx_pb_init(&cx.pb, data, size, &kx_d_model, &root);
    kn_net *net;
    KN_TRY(kn_net_new(&net));
    kiln_status st = parse_model(&cx, &root, net);
    if (st == KILN_OK) /* subgraphs' outer-scope reads become explicit inputs */
        st = kn_net_resolve_captures(net, 0);
    if (st == KILN_OK && !(flags & KX_ONNX_NO_PLUGINS)) /* custom ops become plugin nodes */
        st = kpl_import(net, (flags & KX_ONNX_PLUGINS_OVERRIDE) != 0,
                        !(flags & KX_ONNX_NO_OP_CHECK));
    if (st == KILN_OK && !(flags & KX_ONNX_NO_OP_CHECK))
        st = check_ops(net);
    kx_onnx_ext_close(&cx);
    if (st != KILN_OK) {
        kn_net_free(net);
        if (st == KILN_ERR_OUT_OF_MEMORY) /* the allocator's message says how much, not where */
            kn_error_wrap(st, "reading an ONNX model of %zu bytes", size);
        return st;
    }
    kn_log(KILN_LOG_VERBOSE, "ONNX model read: %d nodes, %d tensors, %d inputs, %d outputs, opset %d",
           net->n_nodes, net->n_tensors, net->n_inputs, net->n_outputs, net->opset);
    *out = net;
    return KILN_OK;
}

kiln_status kx_onnx_parse_memory(const void *data, size_t size, const char *base_dir,
                                 unsigned flags, kn_net **out) {
    if (!out || (!data && size))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_onnx_parse_memory: %s is NULL",
                        !out ? "out" : "data");
    return parse(data, size, NULL, base_dir, flags, out);
}

kiln_status kx_onnx_parse_file(const char *path, unsigned flags, kn_net **out) {
    if (!path || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_onnx_parse_file: %s is NULL",
                        !path ? "path" : "out");
    const char *slash = strrchr(path, '/');
    char *dir = slash ? kn_strndup(path, slash == path ? 1 : (size_t)(slash - path))
                      : kn_strdup(".");
    kx_map_blob *mb = kn_calloc(1, sizeof *mb);
    if (!dir || !mb) {
        kn_free(dir);
        kn_free(mb);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = kn_file_map(path, &mb->map);
    if (st != KILN_OK) {
        kn_free(dir);
        kn_free(mb);
        return st;
    }
    mb->blob.refs = 1;
    mb->blob.release = kx_map_blob_release;
    st = parse(mb->map.data, mb->map.size, &mb->blob, dir, flags, out);
    kn_blob_unref(&mb->blob); /* tensors that borrow weights hold their own references */
    kn_free(dir);
    if (st != KILN_OK)
        return kn_error_wrap(st, "%s", path);
    return KILN_OK;
}

KILN_API kiln_status kiln_onnx_parse_file(const char *path, kiln_network **out) {
    return kx_onnx_parse_file(path, 0, out);
}

KILN_API kiln_status kiln_onnx_parse_memory(const void *data, size_t size, const char *base_dir,
                                            kiln_network **out) {
    return kx_onnx_parse_memory(data, size, base_dir, 0, out);
}

/* Public flags to the reader's own. */
static unsigned public_flags(uint32_t flags) {
    return (flags & KILN_ONNX_PLUGINS_OVERRIDE_BUILTINS) ? KX_ONNX_PLUGINS_OVERRIDE : 0u;
}

KILN_API kiln_status kiln_onnx_parse_file_ex(const char *path, uint32_t flags, kiln_network **out) {
    return kx_onnx_parse_file(path, public_flags(flags), out);
}

KILN_API kiln_status kiln_onnx_parse_memory_ex(const void *data, size_t size, const char *base_dir,
                                               uint32_t flags, kiln_network **out) {
    return kx_onnx_parse_memory(data, size, base_dir, public_flags(flags), out);
}
