/* test_onnx.c - the ONNX reader: models built in memory with a tiny protobuf
 * writer (inputs, initializers of many dtypes, attributes, subgraphs,
 * Constant nodes, external data), damaged models (every truncation,
 * corrupted lengths, deep nesting, allocation failures) and real files from
 * ONNX's node test data. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/kiln_onnx.h"
#include "onnx/onnx.h"
#include "test.h"

/* ---- a protobuf writer, just enough to build ModelProto bytes ---- */

typedef struct pbw {
    uint8_t *d;
    size_t n, cap;
} pbw;

static void w_raw(pbw *w, const void *p, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->d = realloc(w->d, w->cap);
        if (!w->d)
            abort();
    }
    if (n)
        memcpy(w->d + w->n, p, n);
    w->n += n;
}
static void w_varint(pbw *w, uint64_t v) {
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    w_raw(w, b, n);
}
static void w_tag(pbw *w, uint32_t num, uint32_t wt) { w_varint(w, (uint64_t)num << 3 | wt); }
static void w_int(pbw *w, uint32_t num, int64_t v) {
    w_tag(w, num, 0);
    w_varint(w, (uint64_t)v);
}
static void w_f32(pbw *w, uint32_t num, float f) {
    w_tag(w, num, 5);
    w_raw(w, &f, 4);
}
static void w_bytes(pbw *w, uint32_t num, const void *p, size_t n) {
    w_tag(w, num, 2);
    w_varint(w, n);
    w_raw(w, p, n);
}
static void w_str(pbw *w, uint32_t num, const char *s) { w_bytes(w, num, s, strlen(s)); }
/* Embed sub as field num and free it. */
static void w_msg(pbw *w, uint32_t num, pbw *sub) {
    w_bytes(w, num, sub->d, sub->n);
    free(sub->d);
    memset(sub, 0, sizeof *sub);
}
static void w_packed_varints(pbw *w, uint32_t num, const int64_t *v, size_t n) {
    pbw p = {0};
    for (size_t i = 0; i < n; i++)
        w_varint(&p, (uint64_t)v[i]);
    w_msg(w, num, &p);
}

/* onnx.proto builders */
static pbw tensor_raw(const char *name, int dtype, int rank, const int64_t *dims, const void *raw,
                      size_t nbytes) {
    pbw t = {0};
    for (int i = 0; i < rank; i++)
        w_int(&t, 1, dims[i]);
    w_int(&t, 2, dtype);
    if (name)
        w_str(&t, 8, name);
    w_bytes(&t, 9, raw, nbytes);
    return t;
}

/* dims < 0 with dim_params[i] set: named dynamic; NULL: a Dimension with no value. */
static pbw value_info(const char *name, int elem, int rank, const int64_t *dims,
                      const char *const *params) {
    pbw shape = {0}, tt = {0}, type = {0}, vi = {0};
    for (int i = 0; i < rank; i++) {
        pbw d = {0};
        if (dims[i] >= 0)
            w_int(&d, 1, dims[i]);
        else if (params && params[i])
            w_str(&d, 2, params[i]);
        w_msg(&shape, 1, &d);
    }
    w_int(&tt, 1, elem);
    if (rank >= 0)
        w_msg(&tt, 2, &shape);
    free(shape.d);
    w_msg(&type, 1, &tt);
    w_str(&vi, 1, name);
    w_msg(&vi, 2, &type);
    return vi;
}

static pbw node(const char *name, const char *op, const char *domain, int n_in,
                const char *const *in, int n_out, const char *const *out) {
    pbw n = {0};
    for (int i = 0; i < n_in; i++)
        w_str(&n, 1, in[i]);
    for (int i = 0; i < n_out; i++)
        w_str(&n, 2, out[i]);
    if (name)
        w_str(&n, 3, name);
    w_str(&n, 4, op);
    if (domain)
        w_str(&n, 7, domain);
    return n;
}

static pbw attr_head(const char *name, int type) {
    pbw a = {0};
    w_str(&a, 1, name);
    w_int(&a, 20, type);
    return a;
}

static pbw model(int64_t opset, pbw *graph) {
    pbw m = {0}, op = {0};
    w_int(&m, 1, 8);
    w_str(&m, 2, "kiln-test");
    w_msg(&m, 7, graph);
    w_str(&op, 1, "");
    w_int(&op, 2, opset);
    w_msg(&m, 8, &op);
    return m;
}

/* The same with opset_import first, so that truncated copies can parse. */
static pbw model_opset_first(int64_t opset, pbw *graph) {
    pbw m = {0}, op = {0};
    w_str(&op, 1, "ai.onnx");
    w_int(&op, 2, opset);
    w_msg(&m, 8, &op);
    w_msg(&m, 7, graph);
    return m;
}

static int have_op(const char *op) { return kn_op_find("", op) != NULL; }

/* Parse with the op check when kiln knows the ops the test uses. */
static kiln_status parse_mem(const pbw *m, const char *base, int ops_known, kn_net **out) {
    return kx_onnx_parse_memory(m->d, m->n, base, ops_known ? 0 : KX_ONNX_NO_OP_CHECK, out);
}

/* ---- the basic model ---- */

/* X[batch,3,?,4] (+W) -> Y -> Relu -> Z; initializers of several dtypes;
 * Constant nodes; outputs Z and C. */
static pbw basic_model(void) {
    pbw g = {0}, t;
    float w[3] = {1.5f, -2.f, 3.25f};
    int64_t d3 = 3, d2 = 2, d4 = 4;
    t = tensor_raw("W", 1, 1, &d3, w, sizeof w);
    w_msg(&g, 5, &t);
    /* int64 via int64_data, unpacked */
    t = (pbw){0};
    w_int(&t, 1, 2);
    w_int(&t, 2, 7);
    w_str(&t, 8, "B");
    w_int(&t, 7, -5);
    w_int(&t, 7, 1LL << 40);
    w_msg(&g, 5, &t);
    /* float16 via packed int32_data */
    t = (pbw){0};
    w_int(&t, 1, 3);
    w_int(&t, 2, 10);
    w_str(&t, 8, "H");
    int64_t hv[3] = {0x3c00, 0xc000, 0x7bff}; /* 1, -2, 65504 */
    w_packed_varints(&t, 5, hv, 3);
    w_msg(&g, 5, &t);
    /* int8 via unpacked int32_data, negatives as 10-byte varints */
    t = (pbw){0};
    w_int(&t, 1, 4);
    w_int(&t, 2, 3);
    w_str(&t, 8, "I8");
    int64_t iv[4] = {-128, -1, 0, 127};
    for (int i = 0; i < 4; i++)
        w_int(&t, 5, iv[i]);
    w_msg(&g, 5, &t);
    /* double via packed double_data */
    t = (pbw){0};
    w_int(&t, 1, 2);
    w_int(&t, 2, 11);
    w_str(&t, 8, "D");
    double dv[2] = {0.1, -1e300};
    w_bytes(&t, 10, dv, sizeof dv);
    w_msg(&g, 5, &t);
    /* uint64 via uint64_data, float via unpacked float_data, bool via int32_data */
    t = (pbw){0};
    w_packed_varints(&t, 1, &d2, 1);
    w_int(&t, 2, 13);
    w_str(&t, 8, "U");
    int64_t uv[2] = {(int64_t)UINT64_MAX, 7};
    w_packed_varints(&t, 11, uv, 2);
    w_msg(&g, 5, &t);
    t = (pbw){0};
    w_int(&t, 1, 2);
    w_int(&t, 2, 1);
    w_str(&t, 8, "F");
    w_f32(&t, 4, 0.5f);
    w_f32(&t, 4, -0.25f);
    w_msg(&g, 5, &t);
    t = (pbw){0};
    w_int(&t, 2, 9);
    w_str(&t, 8, "BOOL");
    w_int(&t, 5, 1);
    w_msg(&g, 5, &t);
    /* bfloat16 raw, scalar */
    uint16_t bf = 0x3f80;
    t = tensor_raw("BF", 16, 0, NULL, &bf, 2);
    w_msg(&g, 5, &t);

    int64_t xd[4] = {-1, 3, -1, 4};
    const char *xp[4] = {"batch", NULL, NULL, NULL};
    pbw vi = value_info("X", 1, 4, xd, xp);
    w_msg(&g, 11, &vi);
    vi = value_info("W", 1, 1, &d3, NULL); /* also an initializer: a constant */
    w_msg(&g, 11, &vi);

    const char *add_in[2] = {"X", "W"}, *add_out[1] = {"Y"};
    pbw n = node("add0", "Add", NULL, 2, add_in, 1, add_out);
    w_msg(&g, 1, &n);
    const char *relu_in[1] = {"Y"}, *relu_out[1] = {"Z"};
    n = node(NULL, "Relu", "ai.onnx", 1, relu_in, 1, relu_out);
    w_msg(&g, 1, &n);
    const char *c_out[1] = {"C"};
    n = node("c0", "Constant", NULL, 0, NULL, 1, c_out);
    pbw a = attr_head("value_float", 1);
    w_f32(&a, 2, 2.5f);
    w_msg(&n, 5, &a);
    w_msg(&g, 1, &n);
    const char *c2_out[1] = {"C2"};
    n = node("c1", "Constant", NULL, 0, NULL, 1, c2_out);
    a = attr_head("value", 4);
    int64_t cv[2] = {10, 20};
    t = tensor_raw(NULL, 7, 1, &d2, cv, sizeof cv);
    w_msg(&a, 5, &t);
    w_msg(&n, 5, &a);
    w_msg(&g, 1, &n);
    const char *c3_out[1] = {"C3"};
    n = node("c2", "Constant", NULL, 0, NULL, 1, c3_out);
    a = attr_head("value_ints", 7);
    int64_t ci[3] = {1, -2, 3};
    w_packed_varints(&a, 8, ci, 3);
    w_msg(&n, 5, &a);
    w_msg(&g, 1, &n);

    vi = value_info("Z", 1, 4, xd, xp);
    w_msg(&g, 12, &vi);
    vi = value_info("C", 1, 0, NULL, NULL);
    w_msg(&g, 12, &vi);
    (void)d4;
    return model(17, &g);
}

static const kn_tensor *tensor(const kn_net *net, const char *name) {
    int i = kn_net_find(net, name);
    return i >= 0 ? &net->tensors[i] : NULL;
}

static void test_basic(void) {
    pbw m = basic_model();
    kn_net *net = NULL;
    KT_OK(parse_mem(&m, NULL, have_op("Add") && have_op("Relu"), &net));
    if (!net)
        goto out;
    KT_CHECK(net->opset == 17);
    KT_CHECK(net->n_opsets == 1 && strcmp(net->opset_domains[0], "") == 0 &&
             net->opset_versions[0] == 17);
    KT_CHECK(kiln_network_num_inputs(net) == 1);
    KT_CHECK(strcmp(kiln_network_input_name(net, 0), "X") == 0);
    const kn_tensor *x = tensor(net, "X");
    KT_CHECK(x && x->dtype == KILN_DTYPE_FLOAT && x->rank == 4 && (x->flags & KN_T_INPUT));
    KT_CHECK(x && x->dims[0] == -1 && x->dims[1] == 3 && x->dims[2] == -1 && x->dims[3] == 4);
    KT_CHECK(x && x->dim_names[0] && strcmp(x->dim_names[0], "batch") == 0 && !x->dim_names[2]);

    const kn_tensor *w = tensor(net, "W");
    KT_CHECK(w && (w->flags & KN_T_CONST) && !(w->flags & KN_T_INPUT));
    float wf[3];
    if (w && w->value.nbytes == sizeof wf) {
        memcpy(wf, w->value.data, sizeof wf);
        KT_CHECK(wf[0] == 1.5f && wf[1] == -2.f && wf[2] == 3.25f);
        KT_CHECK(w->value.blob == NULL); /* parse_memory copies */
    } else {
        KT_CHECK(!"W has 12 bytes");
    }
    const kn_tensor *b = tensor(net, "B");
    KT_CHECK(b && b->dtype == KILN_DTYPE_INT64 && b->rank == 1 && b->dims[0] == 2);
    if (b)
        KT_CHECK(((int64_t *)b->value.data)[0] == -5 && ((int64_t *)b->value.data)[1] == 1LL << 40);
    const kn_tensor *h = tensor(net, "H");
    KT_CHECK(h && h->dtype == KILN_DTYPE_FLOAT16 && h->value.nbytes == 6);
    if (h) {
        const uint16_t *hp = h->value.data;
        KT_CHECK(kn_half_to_float(hp[0]) == 1.f && kn_half_to_float(hp[1]) == -2.f &&
                 kn_half_to_float(hp[2]) == 65504.f);
    }
    const kn_tensor *i8 = tensor(net, "I8");
    KT_CHECK(i8 && i8->dtype == KILN_DTYPE_INT8 && i8->value.nbytes == 4);
    if (i8) {
        const int8_t *p = i8->value.data;
        KT_CHECK(p[0] == -128 && p[1] == -1 && p[2] == 0 && p[3] == 127);
    }
    const kn_tensor *d = tensor(net, "D");
    KT_CHECK(d && d->dtype == KILN_DTYPE_DOUBLE && d->value.nbytes == 16);
    if (d)
        KT_CHECK(((double *)d->value.data)[0] == 0.1 && ((double *)d->value.data)[1] == -1e300);
    const kn_tensor *u = tensor(net, "U");
    KT_CHECK(u && u->dtype == KILN_DTYPE_UINT64 && u->value.nbytes == 16);
    if (u)
        KT_CHECK(((uint64_t *)u->value.data)[0] == UINT64_MAX && ((uint64_t *)u->value.data)[1] == 7);
    const kn_tensor *f = tensor(net, "F");
    KT_CHECK(f && f->value.nbytes == 8);
    if (f)
        KT_CHECK(((float *)f->value.data)[0] == 0.5f && ((float *)f->value.data)[1] == -0.25f);
    const kn_tensor *bo = tensor(net, "BOOL");
    KT_CHECK(bo && bo->dtype == KILN_DTYPE_BOOL && bo->rank == 0 && bo->value.nbytes == 1 &&
             *(uint8_t *)bo->value.data == 1);
    const kn_tensor *bf = tensor(net, "BF");
    KT_CHECK(bf && bf->dtype == KILN_DTYPE_BFLOAT16 && bf->rank == 0 &&
             kn_bf16_to_float(*(uint16_t *)bf->value.data) == 1.f);

    /* Constant nodes are constants, not nodes */
    KT_CHECK(kiln_network_num_nodes(net) == 2);
    const kn_tensor *c = tensor(net, "C");
    KT_CHECK(c && (c->flags & KN_T_CONST) && c->dtype == KILN_DTYPE_FLOAT && c->rank == 0 &&
             *(float *)c->value.data == 2.5f && (c->flags & KN_T_OUTPUT));
    const kn_tensor *c2 = tensor(net, "C2");
    KT_CHECK(c2 && c2->dtype == KILN_DTYPE_INT64 && c2->rank == 1 &&
             ((int64_t *)c2->value.data)[1] == 20);
    const kn_tensor *c3 = tensor(net, "C3");
    KT_CHECK(c3 && c3->dtype == KILN_DTYPE_INT64 && c3->dims[0] == 3 &&
             ((int64_t *)c3->value.data)[1] == -2);

    const kn_node *n0 = &net->nodes[0], *n1 = &net->nodes[1];
    KT_CHECK(strcmp(n0->name, "add0") == 0 && strcmp(n0->op_type, "Add") == 0 && n0->opset == 17);
    KT_CHECK(n0->n_in == 2 && n0->in[0] == kn_net_find(net, "X") && n0->in[1] == kn_net_find(net, "W"));
    KT_CHECK(strcmp(n1->domain, "") == 0 && strcmp(n1->name, "Relu_1") == 0);
    KT_CHECK(kiln_network_num_outputs(net) == 2 &&
             strcmp(kiln_network_output_name(net, 0), "Z") == 0);
    KT_CHECK(tensor(net, "Z") && (tensor(net, "Z")->flags & KN_T_OUTPUT) &&
             tensor(net, "Z")->producer == 1);
    kn_net_free(net);
out:
    free(m.d);
}

/* ---- attributes and subgraphs ---- */

static pbw attr_model(int nest, const char *op_in_sub) {
    /* sub: If's then_branch reads outer tensor "A" */
    pbw g = {0};
    int64_t d2 = 2;
    pbw vi = value_info("A", 1, 1, &d2, NULL);
    w_msg(&g, 11, &vi);
    vi = value_info("cond", 9, 0, NULL, NULL);
    w_msg(&g, 11, &vi);
    const char *in[1] = {"cond"}, *out[1] = {"R"};
    pbw n = node("if0", "If", NULL, 1, in, 1, out);
    pbw a;
    a = attr_head("f", 1);
    w_f32(&a, 2, 0.25f);
    w_msg(&n, 5, &a);
    a = attr_head("i", 2);
    w_int(&a, 3, -7);
    w_msg(&n, 5, &a);
    a = attr_head("s", 3);
    w_bytes(&a, 4, "ab\0c", 4);
    w_msg(&n, 5, &a);
    a = attr_head("ints_packed", 7);
    int64_t iv[3] = {1, -1, 1LL << 50};
    w_packed_varints(&a, 8, iv, 3);
    w_msg(&n, 5, &a);
    a = (pbw){0}; /* no type field: inferred from the values */
    w_str(&a, 1, "ints_unpacked");
    w_int(&a, 8, 4);
    w_int(&a, 8, 5);
    w_msg(&n, 5, &a);
    a = attr_head("floats", 6);
    w_f32(&a, 7, 1.f);
    float fp[2] = {2.f, 3.f};
    w_bytes(&a, 7, fp, sizeof fp); /* a packed run after an unpacked value */
    w_msg(&n, 5, &a);
    a = attr_head("strings", 8);
    w_str(&a, 9, "x");
    w_str(&a, 9, "yz");
    w_msg(&n, 5, &a);
    a = attr_head("t", 4);
    int32_t tv[2] = {7, 8};
    pbw t = tensor_raw(NULL, 6, 1, &d2, tv, sizeof tv);
    w_msg(&a, 5, &t);
    w_msg(&n, 5, &a);
    a = attr_head("empty_ints", 7);
    w_msg(&n, 5, &a);

    pbw sub = {0};
    w_str(&sub, 2, "then");
    const char *sin[1] = {"A"}, *sout[1] = {"R1"};
    pbw sn = node("inner", op_in_sub, NULL, 1, sin, 1, sout);
    w_msg(&sub, 1, &sn);
    vi = value_info("R1", 1, 1, &d2, NULL);
    w_msg(&sub, 12, &vi);
    for (int k = 0; k < nest; k++) { /* wrap the subgraph in `nest` more Ifs */
        pbw outer = {0}, on = node(NULL, "If", NULL, 1, in, 1, sout), oa = attr_head("then_branch", 5);
        w_msg(&oa, 6, &sub);
        w_msg(&on, 5, &oa);
        w_msg(&outer, 1, &on);
        vi = value_info("R1", 1, 1, &d2, NULL);
        w_msg(&outer, 12, &vi);
        sub = outer;
    }
    a = attr_head("then_branch", 5);
    w_msg(&a, 6, &sub);
    w_msg(&n, 5, &a);
    w_msg(&g, 1, &n);
    vi = value_info("R", 1, 1, &d2, NULL);
    w_msg(&g, 12, &vi);
    return model(13, &g);
}

static void test_attributes(void) {
    pbw m = attr_model(0, "Relu");
    kn_net *net = NULL;
    KT_OK(parse_mem(&m, NULL, have_op("If") && have_op("Relu"), &net));
    free(m.d);
    if (!net)
        return;
    const kn_node *n = &net->nodes[0];
    KT_CHECK(n->n_attr == 11); /* the ten read and kiln_captures (graph/control.h) */
    KT_CHECK(kn_attr_float(n, "f", 0) == 0.25f && kn_attr_int(n, "i", 0) == -7);
    const kn_attr *s = kn_attr_find(n, "s");
    KT_CHECK(s && s->type == KN_ATTR_STRING && s->s_len == 4 && memcmp(s->s, "ab\0c", 4) == 0);
    size_t cnt;
    const int64_t *iv = kn_attr_ints(n, "ints_packed", &cnt);
    KT_CHECK(iv && cnt == 3 && iv[0] == 1 && iv[1] == -1 && iv[2] == 1LL << 50);
    iv = kn_attr_ints(n, "ints_unpacked", &cnt);
    KT_CHECK(iv && cnt == 2 && iv[0] == 4 && iv[1] == 5);
    const float *fv = kn_attr_floats(n, "floats", &cnt);
    KT_CHECK(fv && cnt == 3 && fv[0] == 1.f && fv[1] == 2.f && fv[2] == 3.f);
    const kn_attr *ss = kn_attr_find(n, "strings");
    KT_CHECK(ss && ss->type == KN_ATTR_STRINGS && ss->n == 2 && strcmp(ss->strings[1], "yz") == 0);
    const kn_attr *t = kn_attr_find(n, "t");
    KT_CHECK(t && t->type == KN_ATTR_TENSOR && t->tensor && t->tensor->dtype == KILN_DTYPE_INT32 &&
             ((int32_t *)t->tensor->data)[1] == 8);
    const kn_attr *e = kn_attr_find(n, "empty_ints");
    KT_CHECK(e && e->type == KN_ATTR_INTS && e->n == 0);
    const kn_attr *g = kn_attr_find(n, "then_branch");
    KT_CHECK(g && g->type == KN_ATTR_GRAPH && g->graph);
    if (g && g->graph) {
        const kn_net *sub = g->graph;
        KT_CHECK(sub->n_nodes == 1 && strcmp(sub->nodes[0].op_type, "Relu") == 0 &&
                 sub->nodes[0].opset == 13 && sub->opset == 13);
        /* the outer-scope value A becomes a body input and an If input */
        KT_CHECK(sub->n_inputs == 1 && sub->n_outputs == 1);
        int a = kn_net_find(sub, "A");
        KT_CHECK(a >= 0 && sub->tensors[a].producer == -1 && sub->nodes[0].in[0] == a &&
                 sub->inputs[0] == a);
        KT_CHECK(n->n_in == 2 && n->in[1] == kn_net_find(net, "A") &&
                 kn_attr_int(n, "kiln_captures", 0) == 1);
    }
    kn_net_free(net);

    /* unknown op inside a subgraph is reported with the subgraph */
    m = attr_model(0, "NoSuchOp");
    KT_FAILS(kx_onnx_parse_memory(m.d, m.n, NULL, 0, &net), KILN_ERR_UNSUPPORTED,
             "node 'inner' (NoSuchOp): op type 'NoSuchOp' of domain 'ai.onnx' (opset 13) is not "
             "supported");
    KT_CHECK(strstr(kiln_last_error(), "subgraph 'then_branch' of node 'if0'") != NULL);
    free(m.d);

    /* nested subgraphs within the limit parse; beyond it fail cleanly */
    m = attr_model(20, "Relu");
    KT_OK(kx_onnx_parse_memory(m.d, m.n, NULL, KX_ONNX_NO_OP_CHECK, &net));
    kn_net_free(net);
    free(m.d);
    m = attr_model(40, "Relu");
    KT_FAILS(kx_onnx_parse_memory(m.d, m.n, NULL, KX_ONNX_NO_OP_CHECK, &net), KILN_ERR_PARSE,
             "nest deeper than");
    free(m.d);
}

/* ---- errors ---- */

/* A one-node model: `op` with inputs X (float [2]) and an extra attribute. */
static pbw one_node(const char *node_name, const char *op, const char *domain, pbw *attr) {
    pbw g = {0};
    int64_t d2 = 2;
    pbw vi = value_info("X", 1, 1, &d2, NULL);
    w_msg(&g, 11, &vi);
    const char *in[1] = {"X"}, *out[1] = {"Y"};
    pbw n = node(node_name, op, domain, 1, in, 1, out);
    if (attr)
        w_msg(&n, 5, attr);
    w_msg(&g, 1, &n);
    vi = value_info("Y", 1, 1, &d2, NULL);
    w_msg(&g, 12, &vi);
    return model(17, &g);
}

static void test_errors(void) {
    kn_net *net = NULL;
    pbw m = one_node("foo", "FancyOp", NULL, NULL);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_UNSUPPORTED,
             "node 'foo' (FancyOp): op type 'FancyOp' of domain 'ai.onnx' (opset 17) is not "
             "supported");
    free(m.d);
    m = one_node("bar", "Relu", "com.example", NULL);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_PARSE,
             "node 'bar' (com.example::Relu): domain 'com.example' is not in the model's "
             "opset_import");
    free(m.d);

    pbw a = attr_head("alpha", 1);
    w_str(&a, 21, "outer_alpha");
    m = one_node("r", "Relu", NULL, &a);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_UNSUPPORTED,
             "attribute 'alpha' refers to 'outer_alpha' of an enclosing function (ref_attr_name)");
    free(m.d);

    a = attr_head("graphs", 10);
    m = one_node("r", "Relu", NULL, &a);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_UNSUPPORTED,
             "attribute 'graphs' has type GRAPHS, which kiln does not support");
    free(m.d);

    /* wrong wire type: ir_version as a string */
    pbw w = {0};
    w_str(&w, 1, "8");
    KT_FAILS(kiln_onnx_parse_memory(w.d, w.n, NULL, &net), KILN_ERR_PARSE,
             "ModelProto.ir_version: wire type 2 (length-delimited) at offset 0 where varint (0) "
             "was expected");
    free(w.d);

    /* empty buffer: no graph */
    KT_FAILS(kiln_onnx_parse_memory("", 0, NULL, &net), KILN_ERR_PARSE, "the model has no graph");

    /* string initializer */
    pbw g = {0}, t = {0};
    w_int(&t, 2, 8);
    w_str(&t, 8, "names");
    w_str(&t, 6, "hello");
    w_msg(&g, 5, &t);
    m = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_UNSUPPORTED,
             "ModelProto.graph.initializer[0]: tensor 'names': string tensors are not supported");
    free(m.d);

    /* raw_data of the wrong size */
    float two[2] = {1, 2};
    int64_t d3 = 3;
    g = (pbw){0};
    t = tensor_raw("w", 1, 1, &d3, two, sizeof two);
    w_msg(&g, 5, &t);
    m = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_PARSE,
             "tensor 'w': raw_data holds 8 bytes, but its float [3] shape needs 12");
    free(m.d);

    /* sparse Constant */
    g = (pbw){0};
    const char *cout[1] = {"C"};
    pbw n = node("sc", "Constant", NULL, 0, NULL, 1, cout);
    a = attr_head("sparse_value", 11);
    w_msg(&n, 5, &a);
    w_msg(&g, 1, &n);
    m = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_UNSUPPORTED, "SPARSE_TENSOR");
    free(m.d);

    /* graph output that nothing produces */
    g = (pbw){0};
    int64_t d1 = 1;
    pbw vi = value_info("nowhere", 1, 1, &d1, NULL);
    w_msg(&g, 12, &vi);
    m = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_PARSE,
             "graph output 'nowhere' is not produced by any node");
    free(m.d);

    /* a tensor produced twice */
    g = (pbw){0};
    vi = value_info("X", 1, 1, &d1, NULL);
    w_msg(&g, 11, &vi);
    const char *in[1] = {"X"}, *out[1] = {"Y"};
    n = node("a", "Relu", NULL, 1, in, 1, out);
    w_msg(&g, 1, &n);
    n = node("b", "Relu", NULL, 1, in, 1, out);
    w_msg(&g, 1, &n);
    m = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_PARSE,
             "ModelProto.graph.node[1]: node 'b' (Relu): output 'Y' is already produced by node 'a'");
    free(m.d);

    /* a node reading a value that nothing provides */
    g = (pbw){0};
    const char *in2[2] = {"X", "ghost"};
    vi = value_info("X", 1, 1, &d1, NULL);
    w_msg(&g, 11, &vi);
    n = node("a", "Add", NULL, 2, in2, 1, out);
    w_msg(&g, 1, &n);
    m = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_PARSE,
             "node 'a' (Add): input 1 'ghost' is not a graph input, an initializer, nor the output "
             "of any node");
    free(m.d);

    /* input without a shape */
    g = (pbw){0};
    vi = value_info("X", 1, -1, NULL, NULL);
    w_msg(&g, 11, &vi);
    m = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_UNSUPPORTED,
             "input 'X' has no shape");
    free(m.d);

    KT_FAILS(kiln_onnx_parse_file("/nonexistent/model.onnx", &net), KILN_ERR_IO, "cannot open");
    KT_FAILS(kiln_onnx_parse_memory(NULL, 4, NULL, &net), KILN_ERR_INVALID_ARGUMENT, "NULL");
}

/* A model whose second node's second attribute claims 4000000 bytes. */
static pbw bad_length_model(void) {
    pbw g = {0}, n = node("n0", "Relu", NULL, 0, NULL, 0, NULL), ok = attr_head("x", 2);
    w_int(&ok, 3, 1);
    pbw n1 = node("n1", "Relu", NULL, 0, NULL, 0, NULL);
    w_msg(&n1, 5, &ok);
    w_tag(&n1, 5, 2);
    w_varint(&n1, 4000000);
    w_raw(&n1, "\x0a\x01y", 3);
    w_msg(&g, 1, &n);
    w_msg(&g, 1, &n1);
    return model(17, &g);
}

/* Lengths that run past their message or the buffer. */
static void test_corrupt_lengths(void) {
    kn_net *net = NULL;
    /* graph claims 4000000 bytes in a 12-byte buffer */
    pbw m = {0};
    w_int(&m, 1, 8);
    w_tag(&m, 7, 2);
    w_varint(&m, 4000000);
    w_raw(&m, "abcdefg", 7);
    char want[200];
    snprintf(want, sizeof want,
             "ModelProto.graph: length 4000000 at offset 3 runs past the end of the buffer (size %zu)",
             m.n);
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_PARSE, want);
    free(m.d);

    /* an attribute's length runs past its node */
    m = bad_length_model();
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_PARSE,
             "ModelProto.graph.node[1].attribute[1]: length 4000000 at offset");
    KT_CHECK(strstr(kiln_last_error(), "runs past the end of its message") != NULL);
    free(m.d);

    /* varint longer than 10 bytes */
    uint8_t v[12] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    KT_FAILS(kiln_onnx_parse_memory(v, sizeof v, NULL, &net), KILN_ERR_PARSE,
             "longer than 10 bytes");
    /* a group wire type */
    uint8_t grp[2] = {0x0b, 0x0c};
    KT_FAILS(kiln_onnx_parse_memory(grp, sizeof grp, NULL, &net), KILN_ERR_PARSE,
             "wire type 3 (group)");
    /* field number 0 */
    uint8_t zero[2] = {0x00, 0x00};
    KT_FAILS(kiln_onnx_parse_memory(zero, sizeof zero, NULL, &net), KILN_ERR_PARSE,
             "invalid field number 0");
}

/* Every prefix of a model, and every single-byte change of it, either parses
 * or fails with a parse-class error; never a crash (run under ASan). */
static void test_truncation(void) {
    pbw m = attr_model(1, "Relu");
    pbw b = basic_model();
    pbw g = {0};
    int64_t d2 = 2;
    pbw vi = value_info("X", 1, 1, &d2, NULL), t = tensor_raw("W", 7, 1, &d2, "abcdefghijklmnop", 16);
    w_msg(&g, 11, &vi);
    w_msg(&g, 5, &t);
    const char *in[2] = {"X", "W"}, *out[1] = {"Y"};
    pbw n = node("n", "Add", NULL, 2, in, 1, out);
    w_msg(&g, 1, &n);
    vi = value_info("X", 1, 1, &d2, NULL);
    w_msg(&g, 12, &vi);
    pbw o = model_opset_first(17, &g);
    w_str(&o, 2, "producer"); /* fields after the graph: prefixes that cut them still parse */
    w_str(&o, 6, "documentation");
    const pbw *models[3] = {&m, &b, &o};
    int crashes = 0, ok = 0, failed = 0, bad_status = 0;
    for (int k = 0; k < 3; k++) {
        const pbw *x = models[k];
        uint8_t *copy = malloc(x->n);
        for (size_t len = 0; len < x->n; len++) {
            /* a fresh allocation per prefix lets ASan see reads past its end */
            uint8_t *p = malloc(len ? len : 1);
            memcpy(p, x->d, len);
            kn_net *net = NULL;
            kiln_status st = kx_onnx_parse_memory(p, len, NULL, KX_ONNX_NO_OP_CHECK, &net);
            if (st == KILN_OK) {
                ok++;
                kn_net_free(net);
            } else {
                failed++;
                if (st != KILN_ERR_PARSE && st != KILN_ERR_UNSUPPORTED)
                    bad_status++, fprintf(stderr, "prefix %zu: %s: %s\n", len,
                                          kiln_status_name(st), kiln_last_error());
            }
            free(p);
        }
        /* flip bytes */
        for (size_t i = 0; i < x->n; i++) {
            static const uint8_t vals[] = {0x00, 0xff, 0x80, 0x7f, 0x12};
            for (size_t j = 0; j < sizeof vals; j++) {
                memcpy(copy, x->d, x->n);
                copy[i] = vals[j];
                kn_net *net = NULL;
                kiln_status st = kx_onnx_parse_memory(copy, x->n, NULL, KX_ONNX_NO_OP_CHECK, &net);
                if (st == KILN_OK)
                    kn_net_free(net);
                else if (st == KILN_ERR_INTERNAL || st == KILN_ERR_OUT_OF_MEMORY)
                    bad_status++, fprintf(stderr, "byte %zu=%02x: %s: %s\n", i, vals[j],
                                          kiln_status_name(st), kiln_last_error());
            }
        }
        free(copy);
    }
    KT_CHECK(crashes == 0 && bad_status == 0);
    KT_CHECK(failed > 0 && ok > 0);
    printf("truncation: %d prefixes parsed, %d failed cleanly\n", ok, failed);
    free(o.d);
    free(m.d);
    free(b.d);
}

/* Every allocation of a parse may fail: the result is OK or OUT_OF_MEMORY and
 * nothing leaks. */
static void test_alloc_failures(void) {
    pbw m = attr_model(1, "Relu"), b = basic_model();
    const pbw *models[2] = {&m, &b};
    for (int k = 0; k < 2; k++) {
        int bad = 0, steps = 0;
        for (uint64_t at = 1; at < 100000; at++) {
            kn_net *net = NULL;
            kn_fault_inject_set(at);
            kiln_status st =
                kx_onnx_parse_memory(models[k]->d, models[k]->n, NULL, KX_ONNX_NO_OP_CHECK, &net);
            kn_fault_inject_set(0);
            steps++;
            if (st == KILN_OK) {
                kn_net_free(net);
                break;
            }
            if (st != KILN_ERR_OUT_OF_MEMORY) {
                bad++;
                fprintf(stderr, "alloc %llu: %s: %s\n", (unsigned long long)at,
                        kiln_status_name(st), kiln_last_error());
            }
        }
        KT_CHECK(bad == 0 && steps > 10);
    }
    free(m.d);
    free(b.d);
}

/* ---- external data ---- */

static char tmpdir[256];

static void write_file(const char *rel, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(p, 1, n, f);
    fclose(f);
}

static pbw ext_model(const char *location, const char *offset, const char *length) {
    pbw g = {0}, t = {0};
    w_int(&t, 1, 3);
    w_int(&t, 2, 1);
    w_str(&t, 8, "E");
    w_int(&t, 14, 1);
    const char *keys[3] = {"location", "offset", "length"}, *vals[3] = {location, offset, length};
    for (int i = 0; i < 3; i++) {
        if (!vals[i])
            continue;
        pbw e = {0};
        w_str(&e, 1, keys[i]);
        w_str(&e, 2, vals[i]);
        w_msg(&t, 13, &e);
    }
    w_msg(&g, 5, &t);
    int64_t d3 = 3;
    pbw vi = value_info("E", 1, 1, &d3, NULL);
    w_msg(&g, 12, &vi);
    return model(17, &g);
}

static kiln_status parse_ext_file(const char *loc, const char *off, const char *len, kn_net **net) {
    pbw m = ext_model(loc, off, len);
    write_file("m.onnx", m.d, m.n);
    free(m.d);
    char path[512];
    snprintf(path, sizeof path, "%s/m.onnx", tmpdir);
    return kiln_onnx_parse_file(path, net);
}

static void test_external(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_onnx_test_%d", (int)getpid());
    char sub[300], outside[300], link[300];
    snprintf(sub, sizeof sub, "%s/sub", tmpdir);
    mkdir(tmpdir, 0700);
    mkdir(sub, 0700);
    float data[5] = {9.f, 1.f, 2.f, 3.f, 9.f};
    write_file("w.bin", data, sizeof data);
    write_file("sub/w.bin", data, sizeof data);
    snprintf(outside, sizeof outside, "%s_outside.bin", tmpdir);
    FILE *f = fopen(outside, "wb");
    fwrite(data, 1, sizeof data, f);
    fclose(f);
    snprintf(link, sizeof link, "%s/link.bin", tmpdir);
    KT_CHECK(symlink(outside, link) == 0);

    kn_net *net = NULL;
    KT_OK(parse_ext_file("w.bin", "4", "12", &net));
    if (net) {
        const kn_tensor *e = tensor(net, "E");
        KT_CHECK(e && (e->flags & KN_T_CONST) && e->value.blob != NULL && e->value.nbytes == 12);
        float got[3];
        if (e)
            memcpy(got, e->value.data, sizeof got);
        KT_CHECK(e && got[0] == 1.f && got[2] == 3.f);
        /* the mapping outlives the parse: read again after other work */
        kn_net *clone = NULL;
        KT_OK(kn_net_clone(net, &clone));
        kn_net_free(net);
        if (clone) {
            e = tensor(clone, "E");
            memcpy(got, e->value.data, sizeof got);
            KT_CHECK(got[1] == 2.f);
            kn_net_free(clone);
        }
    }
    KT_FAILS(parse_ext_file("./sub/../sub/w.bin", "4", NULL, &net), KILN_ERR_PARSE,
             "external data holds 16 bytes, but its float shape needs 12");
    KT_OK(parse_ext_file("./sub/../sub/w.bin", "4", "12", &net));
    kn_net_free(net);
    KT_FAILS(parse_ext_file("../w.bin", NULL, "12", &net), KILN_ERR_PARSE,
             "tensor 'E': external data location '../w.bin' leaves the model's folder");
    KT_FAILS(parse_ext_file("sub/../../x.bin", NULL, "12", &net), KILN_ERR_PARSE,
             "leaves the model's folder");
    KT_FAILS(parse_ext_file("/etc/passwd", NULL, "12", &net), KILN_ERR_PARSE,
             "external data location '/etc/passwd' is an absolute path");
    KT_FAILS(parse_ext_file("link.bin", NULL, "12", &net), KILN_ERR_PARSE,
             "outside the model's folder");
    KT_FAILS(parse_ext_file("w.bin", "12", "12", &net), KILN_ERR_PARSE,
             "external data at offset 12, length 12 runs past the end of 'w.bin' (size 20)");
    KT_FAILS(parse_ext_file("w.bin", "21", NULL, &net), KILN_ERR_PARSE,
             "offset 21 is past the end of 'w.bin'");
    KT_FAILS(parse_ext_file("w.bin", "-1", NULL, &net), KILN_ERR_PARSE, "is not a number");
    KT_FAILS(parse_ext_file("missing.bin", NULL, "12", &net), KILN_ERR_IO,
             "cannot open external data file");

    /* an external_data entry with a key and no value (found by fuzzing) */
    pbw g = {0}, t = {0}, e = {0};
    w_int(&t, 1, 1);
    w_int(&t, 2, 1);
    w_str(&t, 8, "E");
    w_int(&t, 14, 1);
    w_str(&e, 1, "location");
    w_msg(&t, 13, &e);
    w_msg(&g, 5, &t);
    pbw em = model(17, &g);
    KT_FAILS(kiln_onnx_parse_memory(em.d, em.n, tmpdir, &net), KILN_ERR_PARSE,
             "tensor 'E': external data has an empty location");
    free(em.d);

    /* allocation failures while mapping external files */
    pbw fm = ext_model("sub/w.bin", "4", "12");
    write_file("m.onnx", fm.d, fm.n);
    free(fm.d);
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/m.onnx", tmpdir);
    int bad = 0;
    for (uint64_t at = 1; at < 10000; at++) {
        kn_fault_inject_set(at);
        kiln_status st = kiln_onnx_parse_file(mpath, &net);
        kn_fault_inject_set(0);
        if (st == KILN_OK) {
            kn_net_free(net);
            break;
        }
        bad += st != KILN_ERR_OUT_OF_MEMORY;
    }
    KT_CHECK(bad == 0);

    /* parse_memory: needs base_dir */
    pbw m = ext_model("w.bin", "4", "12");
    KT_FAILS(kiln_onnx_parse_memory(m.d, m.n, NULL, &net), KILN_ERR_INVALID_ARGUMENT,
             "base_dir is NULL");
    KT_OK(kiln_onnx_parse_memory(m.d, m.n, tmpdir, &net));
    kn_net_free(net);
    free(m.d);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", tmpdir, outside);
    KT_CHECK(system(cmd) == 0);
}

/* parse_file borrows raw_data from the mapping. */
static void test_file_zero_copy(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_onnx_zc_%d", (int)getpid());
    mkdir(tmpdir, 0700);
    pbw m = basic_model();
    write_file("basic.onnx", m.d, m.n);
    free(m.d);
    char path[512];
    snprintf(path, sizeof path, "%s/basic.onnx", tmpdir);
    kn_net *net = NULL;
    KT_OK(kx_onnx_parse_file(path, KX_ONNX_NO_OP_CHECK, &net));
    unlink(path); /* the mapping keeps the bytes */
    rmdir(tmpdir);
    if (!net)
        return;
    const kn_tensor *w = tensor(net, "W");
    KT_CHECK(w && w->value.blob != NULL && w->value.nbytes == 12);
    float wf[3];
    if (w)
        memcpy(wf, w->value.data, sizeof wf);
    KT_CHECK(w && wf[2] == 3.25f);
    const kn_tensor *h = tensor(net, "H"); /* typed fields are decoded into owned memory */
    KT_CHECK(h && h->value.blob == NULL);
    kn_net_free(net);
}

/* ---- ONNX's own test data ---- */

#define NODE_DIR "/usr/share/libonnx-testdata/data/node"

static int read_pb(const char *path, kn_tdata *v, char *name, size_t cap) {
    uint8_t *d;
    size_t n;
    if (kn_file_read(path, &d, &n) != KILN_OK)
        return -1;
    kiln_status st = kx_onnx_read_tensor(d, n, v, name, cap);
    kn_free(d);
    return st == KILN_OK ? 0 : -1;
}

/* SequenceProto and OptionalProto values (the runner's sequence data). */
static void test_read_values(void) {
    /* TensorProto dims=[2] FLOAT raw {1, 2} */
#define KT_T "\x08\x02\x10\x01\x4a\x08\x00\x00\x80\x3f\x00\x00\x00\x40"
    static const char seq[] = "\x0a\x01s\x10\x01\x1a\x0e" KT_T "\x1a\x0e" KT_T;
    kx_onnx_value v;
    KT_OK(kx_onnx_read_value(seq, sizeof seq - 1, KX_VALUE_SEQUENCE, &v));
    KT_CHECK(v.kind == KX_VALUE_SEQUENCE && v.n == 2 && strcmp(v.name, "s") == 0);
    for (int i = 0; i < v.n; i++)
        KT_CHECK(v.items[i].dtype == KILN_DTYPE_FLOAT && v.items[i].rank == 1 &&
                 v.items[i].dims[0] == 2 && ((float *)v.items[i].data)[1] == 2.0f);
    kx_onnx_value_free(&v);
    /* an empty sequence */
    KT_OK(kx_onnx_read_value("\x10\x01", 2, KX_VALUE_SEQUENCE, &v));
    KT_CHECK(v.n == 0 && !v.is_none);
    kx_onnx_value_free(&v);
    /* optional: none, a tensor, a sequence */
    KT_OK(kx_onnx_read_value("\x0a\x01o\x10\x01", 5, KX_VALUE_OPTIONAL, &v));
    KT_CHECK(v.kind == KX_VALUE_OPTIONAL && v.is_none && v.n == 0 && strcmp(v.name, "o") == 0);
    kx_onnx_value_free(&v);
    static const char opt_t[] = "\x10\x01\x1a\x0e" KT_T;
    KT_OK(kx_onnx_read_value(opt_t, sizeof opt_t - 1, KX_VALUE_OPTIONAL, &v));
    KT_CHECK(!v.is_none && !v.elem_is_seq && v.n == 1 && v.items[0].dims[0] == 2);
    kx_onnx_value_free(&v);
    static const char opt_s[] = "\x10\x03\x2a\x12\x10\x01\x1a\x0e" KT_T;
    KT_OK(kx_onnx_read_value(opt_s, sizeof opt_s - 1, KX_VALUE_OPTIONAL, &v));
    KT_CHECK(!v.is_none && v.elem_is_seq && v.n == 1);
    kx_onnx_value_free(&v);
#undef KT_T
    /* a sequence of sequences, a map, a damaged tensor */
    KT_FAILS(kx_onnx_read_value("\x2a\x00", 2, KX_VALUE_SEQUENCE, &v), KILN_ERR_UNSUPPORTED,
             "SequenceProto.sequence_values");
    KT_FAILS(kx_onnx_read_value("\x32\x00", 2, KX_VALUE_OPTIONAL, &v), KILN_ERR_UNSUPPORTED,
             "OptionalProto.map_value");
    KT_FAILS(kx_onnx_read_value("\x1a\x02\x12\x00", 4, KX_VALUE_SEQUENCE, &v), KILN_ERR_PARSE,
             "data_type");
    /* ONNX's own data, when installed */
    uint8_t *d;
    size_t n;
    if (kn_file_read(NODE_DIR "/test_sequence_insert_at_back/test_data_set_0/input_0.pb", &d, &n) ==
        KILN_OK) {
        KT_OK(kx_onnx_read_value(d, n, KX_VALUE_SEQUENCE, &v));
        KT_CHECK(v.n == 3 && v.items[0].dtype == KILN_DTYPE_INT64 && v.items[0].dims[0] == 4);
        kx_onnx_value_free(&v);
        kn_free(d);
    }
}

static void test_real_add(void) {
    struct stat sb;
    if (stat(NODE_DIR "/test_add/model.onnx", &sb) != 0) {
        printf("skipping ONNX test data: %s not found\n", NODE_DIR);
        return;
    }
    kn_net *net = NULL;
    KT_OK(kx_onnx_parse_file(NODE_DIR "/test_add/model.onnx", have_op("Add") ? 0 : KX_ONNX_NO_OP_CHECK,
                             &net));
    if (!net)
        return;
    KT_CHECK(net->n_inputs == 2 && net->n_outputs == 1 && net->n_nodes == 1);
    KT_CHECK(strcmp(kiln_network_input_name(net, 0), "x") == 0 &&
             strcmp(kiln_network_output_name(net, 0), "sum") == 0);
    const kn_tensor *x = tensor(net, "x");
    KT_CHECK(x && x->rank == 3 && x->dims[0] == 3 && x->dims[1] == 4 && x->dims[2] == 5);
    KT_CHECK(strcmp(net->nodes[0].op_type, "Add") == 0 && net->nodes[0].opset == net->opset &&
             net->opset > 0);
    kn_net_free(net);

    kn_tdata a, b, s;
    char name[64];
    KT_CHECK(read_pb(NODE_DIR "/test_add/test_data_set_0/input_0.pb", &a, name, sizeof name) == 0);
    KT_CHECK(strcmp(name, "x") == 0);
    KT_CHECK(read_pb(NODE_DIR "/test_add/test_data_set_0/input_1.pb", &b, NULL, 0) == 0);
    KT_CHECK(read_pb(NODE_DIR "/test_add/test_data_set_0/output_0.pb", &s, name, sizeof name) == 0);
    KT_CHECK(a.dtype == KILN_DTYPE_FLOAT && a.rank == 3 && a.nbytes == 60 * 4 && !a.blob &&
             ((uintptr_t)a.data & 63) == 0);
    double err = 0;
    for (int i = 0; i < 60; i++)
        err = fmax(err, fabs(((float *)a.data)[i] + ((float *)b.data)[i] - ((float *)s.data)[i]));
    KT_NEAR(err, 0, 1e-6);
    kn_tdata_free(&a);
    kn_tdata_free(&b);
    kn_tdata_free(&s);
    KT_FAILS(kx_onnx_read_tensor("\x12\x00", 2, &a, NULL, 0), KILN_ERR_PARSE,
             "TensorProto.data_type: wire type 2");
}

/* Read every model and tensor of the node tests; report what kiln cannot
 * hold. Nothing may crash or fail with a non-parse status. */
static void test_all_node_models(void) {
    DIR *dir = opendir(NODE_DIR);
    if (!dir)
        return;
    int models = 0, models_ok = 0, tensors = 0, tensors_ok = 0, odd = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/model.onnx", NODE_DIR, de->d_name);
        kn_net *net = NULL;
        kiln_status st = kx_onnx_parse_file(path, KX_ONNX_NO_OP_CHECK, &net);
        models++;
        if (st == KILN_OK) {
            models_ok++;
            kn_net_free(net);
        } else if (st != KILN_ERR_UNSUPPORTED) {
            odd++;
            fprintf(stderr, "%s: %s: %s\n", de->d_name, kiln_status_name(st), kiln_last_error());
        }
        for (int k = 0; k < 4; k++) {
            snprintf(path, sizeof path, "%s/%s/test_data_set_0/%s_%d.pb", NODE_DIR, de->d_name,
                     k < 2 ? "input" : "output", k % 2);
            struct stat sb;
            if (stat(path, &sb) != 0)
                continue;
            kn_tdata v;
            tensors++;
            if (read_pb(path, &v, NULL, 0) == 0) {
                tensors_ok++;
                kn_tdata_free(&v);
            }
        }
    }
    closedir(dir);
    printf("node tests: %d/%d models read, %d/%d tensors read\n", models_ok, models, tensors_ok,
           tensors);
    KT_CHECK(odd == 0);
    KT_CHECK(models_ok * 10 >= models * 9);
    KT_CHECK(tensors_ok * 10 >= tensors * 9);
}

/* ---- damaged samples in tests/bad/onnx ---- */

static pbw string_init_model(void) {
    pbw g = {0}, t = {0};
    w_int(&t, 2, 8);
    w_str(&t, 8, "names");
    w_str(&t, 6, "hello");
    w_msg(&g, 5, &t);
    return model(17, &g);
}

typedef struct bad_sample {
    const char *file;
    kiln_status status;
    const char *text;
} bad_sample;

static const bad_sample bad_samples[] = {
    {"bad/onnx/truncated.onnx", KILN_ERR_PARSE, "runs past the end of the buffer"},
    {"bad/onnx/bad_length.onnx", KILN_ERR_PARSE,
     "ModelProto.graph.node[1].attribute[1]: length 4000000 at offset"},
    {"bad/onnx/unknown_op.onnx", KILN_ERR_UNSUPPORTED,
     "node 'foo' (FancyOp): op type 'FancyOp' of domain 'ai.onnx' (opset 17) is not supported"},
    {"bad/onnx/external_escape.onnx", KILN_ERR_PARSE,
     "external data location '../secret.bin' leaves the model's folder"},
    {"bad/onnx/external_absolute.onnx", KILN_ERR_PARSE,
     "external data location '/etc/passwd' is an absolute path"},
    {"bad/onnx/string_initializer.onnx", KILN_ERR_UNSUPPORTED, "string tensors are not supported"},
    {"bad/onnx/deep_nesting.onnx", KILN_ERR_PARSE, "messages nest deeper than"},
    {"bad/onnx/not_onnx.onnx", KILN_ERR_PARSE, "ModelProto"},
};

/* Write the samples (run by hand: test_onnx --write-bad <tests/bad/onnx>). */
static int write_bad_samples(const char *dir) {
    pbw s[8];
    s[0] = basic_model();
    s[0].n = s[0].n * 3 / 5;
    s[1] = bad_length_model();
    s[2] = one_node("foo", "FancyOp", NULL, NULL);
    s[3] = ext_model("../secret.bin", NULL, "12");
    s[4] = ext_model("/etc/passwd", NULL, "12");
    s[5] = string_init_model();
    s[6] = attr_model(40, "Relu");
    s[7] = (pbw){0};
    w_raw(&s[7], "this is not an ONNX model\n", 26);
    for (size_t i = 0; i < KN_ARRAY_LEN(bad_samples); i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, strrchr(bad_samples[i].file, '/') + 1);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(s[i].d, 1, s[i].n, f) != s[i].n || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        free(s[i].d);
    }
    return 0;
}

static void test_bad_samples(void) {
    for (size_t i = 0; i < KN_ARRAY_LEN(bad_samples); i++) {
        kn_net *net = NULL;
        kiln_status st = kiln_onnx_parse_file(bad_samples[i].file, &net);
        if (st == bad_samples[i].status && strstr(kiln_last_error(), bad_samples[i].text)) {
            kt_pass++;
        } else {
            kt_fail++;
            fprintf(stderr, "%s: expected %s with \"%s\", got %s: %s\n", bad_samples[i].file,
                    kiln_status_name(bad_samples[i].status), bad_samples[i].text,
                    kiln_status_name(st), kiln_last_error());
            if (st == KILN_OK)
                kn_net_free(net);
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-bad") == 0)
        return write_bad_samples(argv[2]);
    test_basic();
    test_attributes();
    test_errors();
    test_corrupt_lengths();
    test_truncation();
    test_alloc_failures();
    test_external();
    test_file_zero_copy();
    test_real_add();
    test_read_values();
    test_all_node_models();
    test_bad_samples();
    return kt_finish();
}
