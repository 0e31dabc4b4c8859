/* test_plan.c - the plan file: lossless round trip of every IR feature, the
 * header alone, and damaged plans (truncation at every length, every byte
 * flipped, forged headers and section tables, damaged records behind a valid
 * checksum, allocation failures) that must fail cleanly, never crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_builder.h"
#include "kiln/kiln_runtime.h"
#include "plan/plan.h"
#include "test.h"

/* ---- building a network that uses every feature the plan stores ---- */

static int tensor(kn_net *net, const char *name, kiln_dtype dt, int rank, const int64_t *dims) {
    int t = -1;
    if (kn_net_tensor(net, name, &t) != KILN_OK)
        return -1;
    net->tensors[t].dtype = dt;
    net->tensors[t].rank = rank;
    for (int i = 0; i < rank; i++)
        net->tensors[t].dims[i] = dims[i];
    return t;
}

static int constant(kn_net *net, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                    unsigned seed) {
    int t = tensor(net, name, dt, rank, dims);
    kn_tdata v;
    if (t < 0 || kn_tdata_alloc(&v, dt, rank, dims) != KILN_OK)
        return -1;
    for (size_t i = 0; i < v.nbytes; i++)
        ((uint8_t *)v.data)[i] = (uint8_t)(seed + i * 7);
    kn_tensor_set_value(&net->tensors[t], &v);
    return t;
}

static kn_attr *attr_slot(kn_node *n, const char *name, kn_attr_type type) {
    if (kn_node_set_int(n, name, 0) != KILN_OK)
        return NULL;
    kn_attr *a = (kn_attr *)kn_attr_find(n, name);
    a->type = type;
    return a;
}

static int add_opset(kn_net *net, const char *domain, int version) {
    net->opset_domains = realloc(net->opset_domains, (size_t)(net->n_opsets + 1) * sizeof(char *));
    net->opset_versions = realloc(net->opset_versions, (size_t)(net->n_opsets + 1) * sizeof(int));
    net->opset_domains[net->n_opsets] = kn_strdup(domain);
    net->opset_versions[net->n_opsets] = version;
    net->n_opsets++;
    return 0;
}

static int push_io(int **list, int *n, int *cap, int t) {
    if (kn_grow((void **)list, cap, *n + 1, sizeof(int)) != KILN_OK)
        return -1;
    (*list)[(*n)++] = t;
    return 0;
}

/* A body graph: y = x + c, with c a constant; depth > 0 nests another body. */
static kn_net *make_body(int depth) {
    kn_net *g;
    if (kn_net_new(&g) != KILN_OK)
        return NULL;
    int64_t d1[1] = {4};
    int x = tensor(g, "body_x", KILN_DTYPE_FLOAT, 1, d1);
    int c = constant(g, "body_c", KILN_DTYPE_FLOAT, 1, d1, 40u + (unsigned)depth);
    int y = tensor(g, "body_y", KILN_DTYPE_FLOAT, 1, d1);
    g->tensors[x].flags |= KN_T_INPUT;
    g->tensors[y].flags |= KN_T_OUTPUT;
    push_io(&g->inputs, &g->n_inputs, &g->cap_inputs, x);
    push_io(&g->outputs, &g->n_outputs, &g->cap_outputs, y);
    int in[2] = {x, c}, out[1] = {y}, k;
    if (kn_net_add_node(g, "body_add", "Add", "", 13, 2, in, 1, out, &k) != KILN_OK)
        return g;
    if (depth > 0) {
        kn_attr *a = attr_slot(&g->nodes[k], "inner", KN_ATTR_GRAPH);
        a->graph = make_body(depth - 1);
    }
    g->opset = 13;
    return g;
}

static kn_net *make_net(void) {
    kn_net *net;
    if (kn_net_new(&net) != KILN_OK)
        return NULL;
    int64_t dx[4] = {-1, 3, -1, 8};
    int x = tensor(net, "x", KILN_DTYPE_FLOAT, 4, dx);
    net->tensors[x].flags |= KN_T_INPUT;
    net->tensors[x].dim_names[0] = kn_strdup("batch");
    net->tensors[x].dim_names[2] = kn_strdup("height");
    int64_t dm[1] = {5};
    int mask = tensor(net, "mask", KILN_DTYPE_BOOL, 1, dm);
    net->tensors[mask].flags |= KN_T_INPUT;
    push_io(&net->inputs, &net->n_inputs, &net->cap_inputs, x);
    push_io(&net->inputs, &net->n_inputs, &net->cap_inputs, mask);

    int64_t dw[2] = {3, 8}, dh[1] = {7}, ds[1] = {0}, di[2] = {2, 2}, dz[2] = {0, 4};
    int w = constant(net, "w", KILN_DTYPE_FLOAT, 2, dw, 1);
    int h = constant(net, "h", KILN_DTYPE_FLOAT16, 1, dh, 2);
    int s = constant(net, "s", KILN_DTYPE_INT64, 0, ds, 3);
    int i8 = constant(net, "i8", KILN_DTYPE_INT8, 2, di, 4);
    int dbl = constant(net, "dbl", KILN_DTYPE_DOUBLE, 1, dh, 5);
    int empty = constant(net, "empty", KILN_DTYPE_UINT8, 2, dz, 6);
    int bf = constant(net, "bf", KILN_DTYPE_BFLOAT16, 2, di, 7);
    net->tensors[s].flags |= KN_T_HOST;

    int mid = tensor(net, "mid", KILN_DTYPE_FLOAT, 4, dx);
    int y = tensor(net, "y", KILN_DTYPE_FLOAT, 4, dx);
    int z = tensor(net, "z", KILN_DTYPE_INT64, -1, NULL);
    net->tensors[y].flags |= KN_T_OUTPUT;
    net->tensors[z].flags |= KN_T_OUTPUT;
    push_io(&net->outputs, &net->n_outputs, &net->cap_outputs, y);
    push_io(&net->outputs, &net->n_outputs, &net->cap_outputs, z);

    int in0[3] = {x, w, -1}, out0[1] = {mid};
    int in1[6] = {mid, h, s, i8, dbl, mask}, out1[3] = {y, -1, z};
    int in2[3] = {empty, bf, mid}, out2[1] = {-1};
    int n0, n1, n2;
    kn_net_add_node(net, "conv_0", "Conv", "", 17, 3, in0, 1, out0, &n0);
    kn_net_add_node(net, "fused/1", "FusedThing", "kiln", 1, 6, in1, 3, out1, &n1);
    kn_net_add_node(net, "", "Unused", "com.example", 2, 3, in2, 0, out2, &n2);
    kn_node *a = &net->nodes[n0], *b = &net->nodes[n1], *c = &net->nodes[n2];
    a->tactic = kn_strdup("cpu.conv.im2col");
    c->dead = 1;

    int64_t ints[4] = {1, -2, INT64_MAX, INT64_MIN};
    float floats[3] = {0.5f, -1.25e-7f, 3.0e38f};
    kn_node_set_int(a, "group", -7);
    kn_node_set_float(a, "alpha", 0.3125f);
    kn_node_set_string(a, "auto_pad", "SAME_UPPER");
    kn_node_set_ints(a, "pads", ints, 4);
    kn_node_set_floats(a, "scales", floats, 3);
    kn_node_set_ints(a, "empty_ints", NULL, 0);
    attr_slot(a, "undefined", KN_ATTR_UNDEFINED);

    kn_attr *bin = attr_slot(b, "bytes", KN_ATTR_STRING); /* a string with NUL bytes inside */
    bin->s = kn_malloc(6);
    memcpy(bin->s, "a\0b\0c", 6);
    bin->s_len = 5;
    kn_attr *strs = attr_slot(b, "names", KN_ATTR_STRINGS);
    strs->n = 3;
    strs->strings = calloc(3, sizeof(char *));
    strs->strings[0] = kn_strdup("alpha");
    strs->strings[1] = kn_strdup("");
    strs->strings[2] = kn_strdup("auto_pad"); /* shared with another string */
    kn_attr *ta = attr_slot(b, "value", KN_ATTR_TENSOR);
    ta->tensor = calloc(1, sizeof *ta->tensor);
    kn_tdata_alloc(ta->tensor, KILN_DTYPE_INT32, 2, di);
    for (int k = 0; k < 4; k++)
        ((int32_t *)ta->tensor->data)[k] = -100 * k;
    kn_attr *ga = attr_slot(b, "then_branch", KN_ATTR_GRAPH);
    ga->graph = make_body(2);
    kn_attr *gb = attr_slot(b, "else_branch", KN_ATTR_GRAPH);
    gb->graph = make_body(0);
    attr_slot(b, "no_graph", KN_ATTR_GRAPH);
    attr_slot(b, "no_tensor", KN_ATTR_TENSOR);
    kn_node_set_float(c, "nan", NAN);

    net->opset = 17;
    add_opset(net, "", 17);
    add_opset(net, "kiln", 1);
    add_opset(net, "com.example", 2);
    return net;
}

static void make_meta(kp_meta *m, const kn_net *net) {
    memset(m, 0, sizeof *m);
    snprintf(m->backend, sizeof m->backend, "cpu");
    snprintf(m->target, sizeof m->target, "x86_64-avx2");
    snprintf(m->libraries, sizeof m->libraries, "dnnl=3.0;openblas=0.3.21");
    m->flags = 5;
    m->arena_bytes = 123456;
    m->activation_sum_bytes = 654321;
    m->workspace_bytes = 4096;
    m->build_ms = 12.5;
    if (kp_meta_alloc_profiles(m, 2, net->n_inputs) != KILN_OK)
        return;
    for (int p = 0; p < 2; p++) {
        kp_profile *pr = &m->profiles[p];
        pr->rank[0] = 4;
        int64_t mn[4] = {1, 3, 4, 8}, op[4] = {2 + p, 3, 16, 8}, mx[4] = {8 * (p + 1), 3, 64, 8};
        memcpy(pr->min[0], mn, sizeof mn);
        memcpy(pr->opt[0], op, sizeof op);
        memcpy(pr->max[0], mx, sizeof mx);
        pr->rank[1] = 1;
        pr->min[1][0] = pr->opt[1][0] = pr->max[1][0] = 5;
    }
}

/* ---- deep comparison ---- */

static int str_eq(const char *a, const char *b) {
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

static int tdata_eq(const kn_tdata *a, const kn_tdata *b) {
    if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

static int net_eq(const kn_net *a, const kn_net *b);

static int attr_eq(const kn_attr *a, const kn_attr *b) {
    if (!str_eq(a->name, b->name) || a->type != b->type)
        return 0;
    switch (a->type) {
    case KN_ATTR_FLOAT:
        return memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case KN_ATTR_INT:
        return a->i == b->i;
    case KN_ATTR_STRING:
        return a->s_len == b->s_len && memcmp(a->s, b->s, a->s_len + 1) == 0;
    case KN_ATTR_TENSOR:
        return (!a->tensor && !b->tensor) || (a->tensor && b->tensor && tdata_eq(a->tensor, b->tensor));
    case KN_ATTR_GRAPH:
        return (!a->graph && !b->graph) || (a->graph && b->graph && net_eq(a->graph, b->graph));
    case KN_ATTR_FLOATS:
        return a->n == b->n && (a->n == 0 || memcmp(a->floats, b->floats, a->n * 4) == 0);
    case KN_ATTR_INTS:
        return a->n == b->n && (a->n == 0 || memcmp(a->ints, b->ints, a->n * 8) == 0);
    case KN_ATTR_STRINGS:
        if (a->n != b->n)
            return 0;
        for (size_t i = 0; i < a->n; i++)
            if (!str_eq(a->strings[i], b->strings[i]))
                return 0;
        return 1;
    default:
        return 1;
    }
}

static int net_eq(const kn_net *a, const kn_net *b) {
    if (a->n_tensors != b->n_tensors || a->n_nodes != b->n_nodes || a->n_inputs != b->n_inputs ||
        a->n_outputs != b->n_outputs || a->opset != b->opset || a->n_opsets != b->n_opsets)
        return 0;
    for (int i = 0; i < a->n_inputs; i++)
        if (a->inputs[i] != b->inputs[i])
            return 0;
    for (int i = 0; i < a->n_outputs; i++)
        if (a->outputs[i] != b->outputs[i])
            return 0;
    for (int i = 0; i < a->n_opsets; i++)
        if (!str_eq(a->opset_domains[i], b->opset_domains[i]) ||
            a->opset_versions[i] != b->opset_versions[i])
            return 0;
    for (int i = 0; i < a->n_tensors; i++) {
        const kn_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (!str_eq(x->name, y->name) || x->dtype != y->dtype || x->rank != y->rank ||
            x->flags != y->flags || x->producer != y->producer)
            return 0;
        if (kn_net_find(b, y->name) != i)
            return 0;
        for (int d = 0; d < x->rank; d++)
            if (x->dims[d] != y->dims[d] || !str_eq(x->dim_names[d], y->dim_names[d]))
                return 0;
        if ((x->flags & KN_T_CONST) && !tdata_eq(&x->value, &y->value))
            return 0;
    }
    for (int i = 0; i < a->n_nodes; i++) {
        const kn_node *x = &a->nodes[i], *y = &b->nodes[i];
        if (!str_eq(x->name, y->name) || !str_eq(x->op_type, y->op_type) ||
            !str_eq(x->domain, y->domain) || x->opset != y->opset ||
            !str_eq(x->tactic, y->tactic) || x->dead != y->dead || x->n_in != y->n_in ||
            x->n_out != y->n_out || x->n_attr != y->n_attr)
            return 0;
        for (int j = 0; j < x->n_in; j++)
            if (x->in[j] != y->in[j])
                return 0;
        for (int j = 0; j < x->n_out; j++)
            if (x->out[j] != y->out[j])
                return 0;
        for (int j = 0; j < x->n_attr; j++)
            if (!attr_eq(&x->attrs[j], &y->attrs[j]))
                return 0;
    }
    return 1;
}

static int meta_eq(const kp_meta *a, const kp_meta *b) {
    if (strcmp(a->backend, b->backend) || strcmp(a->target, b->target) ||
        strcmp(a->libraries, b->libraries) || a->flags != b->flags ||
        a->n_profiles != b->n_profiles || a->arena_bytes != b->arena_bytes ||
        a->activation_sum_bytes != b->activation_sum_bytes ||
        a->workspace_bytes != b->workspace_bytes || a->build_ms != b->build_ms)
        return 0;
    for (int p = 0; p < a->n_profiles; p++) {
        const kp_profile *x = &a->profiles[p], *y = &b->profiles[p];
        if (x->n_inputs != y->n_inputs)
            return 0;
        for (int i = 0; i < x->n_inputs; i++) {
            if (x->rank[i] != y->rank[i])
                return 0;
            for (int d = 0; d < x->rank[i]; d++)
                if (x->min[i][d] != y->min[i][d] || x->opt[i][d] != y->opt[i][d] ||
                    x->max[i][d] != y->max[i][d])
                    return 0;
        }
    }
    return 1;
}

/* ---- forging plans: re-seal a modified plan so only the change is seen ---- */

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void wr64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

static void reseal(uint8_t *p, size_t size) {
    wr64(p + 248, kn_hash64(p, 248, 0x4b494c4e48454144ull));
    if (size >= 8)
        wr64(p + size - 8, kn_hash64(p, size - 8, 0x4b494c4e46494c45ull));
}

/* Table entry of section `id`: offset of the 24-byte entry, or 0. */
static size_t entry_of(const uint8_t *p, uint32_t id) {
    uint32_t n = rd32(p + 32), hs = rd32(p + 12);
    for (uint32_t i = 0; i < n; i++)
        if (rd32(p + hs + 24 * i) == id)
            return hs + 24 * (size_t)i;
    return 0;
}

static kiln_status try_read(const uint8_t *p, size_t n) {
    kn_net *net = NULL;
    kp_meta m;
    memset(&m, 0, sizeof m);
    kiln_status st = kp_read(p, n, NULL, &net, &m);
    if (st == KILN_OK) {
        kn_net_free(net);
        kp_meta_free(&m);
    }
    return st;
}

/* A blob over an aligned copy of a plan, freed when the last reference goes. */
typedef struct test_blob {
    kn_blob b;
    void *mem;
    int *released;
} test_blob;

static void test_blob_release(kn_blob *b) {
    test_blob *t = (test_blob *)b;
    kn_aligned_free(t->mem);
    *t->released = 1;
    free(t);
}

/* ---- tests ---- */

static void test_round_trip(const uint8_t *plan, size_t size, const kn_net *net, const kp_meta *m) {
    kn_net *back = NULL;
    kp_meta mb;
    memset(&mb, 0, sizeof mb);
    KT_OK(kp_read(plan, size, NULL, &back, &mb));
    if (!back)
        return;
    KT_CHECK(net_eq(net, back));
    KT_CHECK(meta_eq(m, &mb));
    KT_CHECK(kn_net_find(back, "x") == 0);
    KT_CHECK(str_eq(back->tensors[0].dim_names[0], "batch"));
    KT_CHECK(back->tensors[0].dim_names[1] == NULL);
    KT_CHECK(back->nodes[1].attrs[0].s_len == 5 && back->nodes[1].attrs[0].s[2] == 'b');
    /* every constant copied into 64-byte aligned memory */
    for (int i = 0; i < back->n_tensors; i++)
        if (back->tensors[i].flags & KN_T_CONST)
            KT_CHECK(((uintptr_t)back->tensors[i].value.data & 63u) == 0);
    /* nested graphs: then_branch holds two more levels */
    const kn_attr *tb = kn_attr_find(&back->nodes[1], "then_branch");
    KT_CHECK(tb && tb->graph && tb->graph->n_nodes == 1);
    const kn_attr *inner = tb && tb->graph ? kn_attr_find(&tb->graph->nodes[0], "inner") : NULL;
    KT_CHECK(inner && inner->graph && kn_attr_find(&inner->graph->nodes[0], "inner"));

    /* writing what was read gives the same bytes */
    void *again = NULL;
    size_t again_size = 0;
    KT_OK(kp_write(back, &mb, &again, &again_size));
    KT_CHECK(again_size == size && again && memcmp(again, plan, size) == 0);
    kn_free(again);
    kn_net_free(back);
    kp_meta_free(&mb);
}

static void test_borrowed_weights(const uint8_t *plan, size_t size, const kn_net *net) {
    int released = 0;
    test_blob *tb = calloc(1, sizeof *tb);
    tb->mem = kn_aligned_alloc(size);
    memcpy(tb->mem, plan, size);
    tb->b.refs = 1;
    tb->b.release = test_blob_release;
    tb->released = &released;
    kn_net *back = NULL;
    KT_OK(kp_read(tb->mem, size, &tb->b, &back, NULL));
    int borrowed = 0;
    for (int i = 0; back && i < back->n_tensors; i++) {
        const kn_tdata *v = &back->tensors[i].value;
        if (!(back->tensors[i].flags & KN_T_CONST))
            continue;
        KT_CHECK(v->blob == &tb->b);
        KT_CHECK(((uintptr_t)v->data & 63u) == 0);
        KT_CHECK((const uint8_t *)v->data >= (const uint8_t *)tb->mem &&
                 (const uint8_t *)v->data + v->nbytes <= (const uint8_t *)tb->mem + size);
        borrowed++;
    }
    KT_CHECK(borrowed == 7);
    KT_CHECK(back && net_eq(net, back));
    kn_blob_unref(&tb->b); /* the caller's reference; the net still holds some */
    KT_CHECK(!released);
    kn_net_free(back);
    KT_CHECK(released);

    /* A misaligned copy in memory: values are copied, not borrowed. */
    uint8_t *odd = malloc(size + 1);
    memcpy(odd + 1, plan, size);
    int rel2 = 0;
    test_blob *tb2 = calloc(1, sizeof *tb2);
    tb2->mem = NULL;
    tb2->b.refs = 1;
    tb2->b.release = test_blob_release;
    tb2->released = &rel2;
    back = NULL;
    KT_OK(kp_read(odd + 1, size, &tb2->b, &back, NULL));
    KT_CHECK(back && back->tensors[kn_net_find(back, "w")].value.blob == NULL);
    KT_CHECK(tb2->b.refs == 1);
    kn_net_free(back);
    kn_blob_unref(&tb2->b);
    KT_CHECK(rel2);
    free(odd);
}

static void test_info(const uint8_t *plan, size_t size) {
    kiln_plan_info info;
    memset(&info, 0x5a, sizeof info);
    KT_OK(kp_read_info(plan, 256, &info));
    KT_CHECK(info.format_version == KP_FORMAT_VERSION);
    KT_CHECK(info.kiln_version == KILN_VERSION_NUMBER);
    KT_CHECK(strcmp(info.backend, "cpu") == 0);
    KT_CHECK(strcmp(info.target, "x86_64-avx2") == 0);
    KT_CHECK(strcmp(info.libraries, "dnnl=3.0;openblas=0.3.21") == 0);
    KT_CHECK(info.file_size == size);
    KT_FAILS(kp_read_info(plan, 255, &info), KILN_ERR_PLAN, "plan truncated");
    KT_FAILS(kp_read_info(plan, 4, &info), KILN_ERR_PLAN, "not a kiln plan");
    KT_FAILS(kp_read_info(NULL, 0, &info), KILN_ERR_PLAN, "not a kiln plan");
    KT_FAILS(kp_read_info("GGUF\3\0\0\0 and more bytes", 20, &info), KILN_ERR_PLAN,
             "not a kiln plan");
    KT_FAILS(kp_read(plan, 100, NULL, NULL, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
}

static void test_truncation(const uint8_t *plan, size_t size) {
    int clean = 1;
    for (size_t n = 0; n < size; n++) {
        kiln_status st = try_read(plan, n);
        if (st != KILN_ERR_PLAN) {
            clean = 0;
            fprintf(stderr, "truncated to %zu bytes: %s: %s\n", n, kiln_status_name(st),
                    kiln_last_error());
        } else if (n >= 256 && !strstr(kiln_last_error(), "truncated")) {
            clean = 0;
            fprintf(stderr, "truncated to %zu bytes: message does not say so: %s\n", n,
                    kiln_last_error());
        }
    }
    KT_CHECK(clean);
    /* The message names the section that runs past the end. */
    KT_FAILS(try_read(plan, size - 9), KILN_ERR_PLAN, "section 'weights' ends at byte");
    KT_FAILS(try_read(plan, 256 + 7 * 24 + 16), KILN_ERR_PLAN,
             "plan truncated: section 'strings' ends at byte");
}

static void test_byte_flips(const uint8_t *plan, size_t size) {
    uint8_t *p = malloc(size);
    memcpy(p, plan, size);
    int clean = 1;
    const uint8_t masks[3] = {0x01, 0x80, 0xff};
    for (size_t i = 0; i < size; i++) {
        for (int k = 0; k < 3; k++) {
            p[i] ^= masks[k];
            kiln_status st = try_read(p, size);
            p[i] ^= masks[k];
            if (st != KILN_ERR_PLAN) {
                clean = 0;
                fprintf(stderr, "byte %zu ^ 0x%02x: %s: %s\n", i, masks[k], kiln_status_name(st),
                        kiln_last_error());
            }
        }
    }
    KT_CHECK(clean);
    p[1000 < size ? 1000 : size / 2] ^= 1;
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "checksum");
    free(p);
}

/* Flip bytes inside the sections and re-seal, so that the record checks, not
 * the checksum, meet the damage. Any result is fine except a crash, a leak or
 * an error other than KILN_ERR_PLAN. */
static void test_sealed_damage(const uint8_t *plan, size_t size) {
    uint8_t *p = malloc(size);
    int clean = 1, accepted = 0, rejected = 0;
    const uint8_t masks[4] = {0x01, 0x10, 0x80, 0xff};
    for (size_t i = 256; i < size - 8; i++) {
        for (int k = 0; k < 4; k++) {
            memcpy(p, plan, size);
            p[i] ^= masks[k];
            reseal(p, size);
            kiln_status st = try_read(p, size);
            if (st == KILN_OK)
                accepted++;
            else if (st == KILN_ERR_PLAN && strstr(kiln_last_error(), "plan damaged"))
                rejected++;
            else {
                clean = 0;
                fprintf(stderr, "sealed byte %zu ^ 0x%02x: %s: %s\n", i, masks[k],
                        kiln_status_name(st), kiln_last_error());
            }
        }
    }
    KT_CHECK(clean);
    KT_CHECK(rejected > accepted); /* most damage is structural and caught */
    printf("sealed damage: %d rejected, %d accepted (payload bytes)\n", rejected, accepted);
    free(p);
}

static void test_forged(const uint8_t *plan, size_t size) {
    uint8_t *p = malloc(size + 4096);
    kiln_plan_info info;

    memcpy(p, plan, size);
    memcpy(p, "KILNPLAM", 8);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "not a kiln plan");

    /* a later format version: the header still reads, the plan does not load */
    memcpy(p, plan, size);
    wr32(p + 8, KP_FORMAT_VERSION + 1);
    reseal(p, size);
    KT_OK(kp_read_info(p, 256, &info));
    KT_CHECK(info.format_version == KP_FORMAT_VERSION + 1);
    KT_FAILS(try_read(p, size), KILN_ERR_VERSION, "plan format version 2 is not supported");
    KT_FAILS(try_read(p, size), KILN_ERR_VERSION, "reads format version 1");
    wr32(p + 8, 0);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_VERSION, "format version 0");

    /* a version change without re-sealing is damage */
    memcpy(p, plan, size);
    wr32(p + 8, 7);
    KT_FAILS(kp_read_info(p, 256, &info), KILN_ERR_PLAN, "header hash");

    /* the header claims a huge file */
    memcpy(p, plan, size);
    wr64(p + 24, (uint64_t)1 << 60);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "plan truncated: the header says the plan has");
    wr64(p + 24, UINT64_MAX);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "plan truncated");
    wr64(p + 24, 100);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "smaller than the header");
    /* ... or a huge section table */
    memcpy(p, plan, size);
    wr32(p + 32, 1000000);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "section count");
    wr32(p + 32, 1000);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "plan truncated: the section table ends");
    /* header size below the minimum */
    memcpy(p, plan, size);
    wr32(p + 12, 16);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "header size");
    /* an unterminated text field */
    memcpy(p, plan, size);
    memset(p + 40, 'x', 16);
    reseal(p, size);
    KT_FAILS(kp_read_info(p, 256, &info), KILN_ERR_PLAN, "'backend'");

    /* section table pointing out of bounds */
    size_t e = entry_of(plan, 7);
    memcpy(p, plan, size);
    wr64(p + e + 8, (uint64_t)size + 64);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "section 'weights'");
    memcpy(p, plan, size);
    wr64(p + e + 16, UINT64_MAX - 10);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "outside");
    memcpy(p, plan, size);
    wr64(p + e + 8, 8); /* inside the header */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "outside");
    /* overlapping sections */
    size_t et = entry_of(plan, 3), en = entry_of(plan, 4);
    memcpy(p, plan, size);
    wr64(p + en + 8, rd64(plan + et + 8) + 8);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "overlaps");
    /* a missing section, a duplicated one */
    memcpy(p, plan, size);
    wr32(p + entry_of(plan, 6), 4);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "appears twice");
    memcpy(p, plan, size);
    wr32(p + entry_of(plan, 6), 99);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "no 'stats' section");
    /* weights section not aligned */
    memcpy(p, plan, size);
    wr64(p + e + 8, rd64(plan + e + 8) + 8);
    wr64(p + e + 16, rd64(plan + e + 16) - 8);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "not a multiple of 64");

    /* damaged records behind a valid checksum */
    size_t strings = (size_t)rd64(plan + entry_of(plan, 1) + 8);
    memcpy(p, plan, size);
    wr32(p + strings, 0xfffffff0u);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "string count");
    size_t tensors = (size_t)rd64(plan + et + 8);
    memcpy(p, plan, size);
    wr32(p + tensors + 4, 999999); /* first tensor's name */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "refers to string 999999");
    memcpy(p, plan, size);
    wr32(p + tensors + 8, 77); /* first tensor's dtype */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "data type 77");
    memcpy(p, plan, size);
    wr32(p + tensors + 12, 9); /* first tensor's rank */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "rank 9");
    size_t nodes = (size_t)rd64(plan + en + 8);
    memcpy(p, plan, size);
    wr32(p + nodes + 4 + 24 + 4, 5000); /* first node's first input */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "input 0 is tensor 5000");
    memcpy(p, plan, size);
    wr32(p + nodes + 4 + 24, 0x7fffffff); /* first node's input count */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "input count 2147483647 cannot fit");

    /* no profile for a network with inputs */
    size_t profiles = (size_t)rd64(plan + entry_of(plan, 5) + 8);
    memcpy(p, plan, size);
    wr32(p + profiles, 0);
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN,
             "section 'profiles': the network has inputs but no optimization profile");
    /* flags that disagree with the input list */
    memcpy(p, plan, size);
    wr32(p + tensors + 16, 0); /* first tensor ('x', an input): flags */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "tensor 0 'x' is not flagged as an input");
    /* a node that writes a graph input */
    memcpy(p, plan, size);
    wr32(p + nodes + 4 + 24 + 4 + 3 * 4 + 4, 0); /* first node's output 0 -> tensor 0 */
    reseal(p, size);
    KT_FAILS(try_read(p, size), KILN_ERR_PLAN, "writes tensor 'x', a graph input");

    /* kp_reseal does what the documented layout says */
    memcpy(p, plan, size);
    wr32(p + 8, 5);
    uint8_t *q = malloc(size);
    memcpy(q, p, size);
    reseal(p, size);
    kp_reseal(q, size);
    KT_CHECK(memcmp(p, q, size) == 0);
    free(q);

    /* an unknown section is skipped: insert one after the table, moving
     * everything by 64 bytes so the weights stay aligned */
    uint32_t nsec = rd32(plan + 32), hs = rd32(plan + 12);
    size_t table_end = hs + 24 * (size_t)nsec;
    memset(p, 0, size + 64);
    memcpy(p, plan, table_end);
    memcpy(p + table_end + 64, plan + table_end, size - table_end);
    for (uint32_t i = 0; i < nsec; i++)
        wr64(p + hs + 24 * i + 8, rd64(p + hs + 24 * i + 8) + 64);
    wr32(p + 32, nsec + 1);
    wr32(p + table_end, 200);
    wr64(p + table_end + 8, table_end + 24);
    wr64(p + table_end + 16, 40);
    memcpy(p + table_end + 24, "a section from a later kiln", 27);
    wr64(p + 24, size + 64);
    reseal(p, size + 64);
    KT_OK(try_read(p, size + 64));
    free(p);
}

static void test_write_errors(void) {
    kn_net *net = make_net();
    kp_meta m;
    make_meta(&m, net);
    void *out = NULL;
    size_t size = 0;
    m.profiles[1].min[0][2] = 100; /* min > opt */
    KT_FAILS(kp_write(net, &m, &out, &size), KILN_ERR_INVALID_ARGUMENT,
             "profile 1 input 'x' dimension 2 needs 0 <= min <= opt <= max");
    m.profiles[1].min[0][2] = 4;
    m.profiles[1].max[0][1] = 4; /* a static dim */
    KT_FAILS(kp_write(net, &m, &out, &size), KILN_ERR_INVALID_ARGUMENT,
             "dimension 1 is 3 in the network; the profile gives 3..4");
    m.profiles[1].max[0][1] = 3;
    m.profiles[0].rank[1] = 2;
    KT_FAILS(kp_write(net, &m, &out, &size), KILN_ERR_INVALID_ARGUMENT,
             "profile 0 gives input 'mask' rank 2; the network says 1");
    m.profiles[0].rank[1] = 1;
    m.profiles[1].min[0][2] = 4;
    memset(m.target, 'x', sizeof m.target);
    KT_FAILS(kp_write(net, &m, &out, &size), KILN_ERR_INVALID_ARGUMENT, "no NUL");
    KT_CHECK(out == NULL);
    strcpy(m.target, "x86_64");
    /* graph rules: no writes into constants, single assignment, order */
    int wt = kn_net_find(net, "w"), yt = kn_net_find(net, "y"), mt = kn_net_find(net, "mid");
    net->nodes[0].out[0] = wt;
    KT_FAILS(kp_write(net, &m, &out, &size), KILN_ERR_INVALID_ARGUMENT,
             "node 0 'conv_0' (Conv) writes tensor 'w', a graph constant");
    net->nodes[0].out[0] = mt;
    net->nodes[1].out[1] = mt;
    KT_FAILS(kp_write(net, &m, &out, &size), KILN_ERR_INVALID_ARGUMENT,
             "node 1 'fused/1' (FusedThing) writes tensor 'mid', which an earlier node writes too");
    net->nodes[1].out[1] = -1;
    net->nodes[0].in[2] = yt;
    KT_FAILS(kp_write(net, &m, &out, &size), KILN_ERR_INVALID_ARGUMENT,
             "reads tensor 'y' before any node produces it");
    net->nodes[0].in[2] = -1;
    /* stale flags are not trusted: the lists decide */
    net->tensors[mt].flags |= KN_T_INPUT;
    KT_OK(kp_write(net, &m, &out, &size));
    kn_net *nf = NULL;
    KT_OK(kp_read(out, size, NULL, &nf, NULL));
    KT_CHECK(nf && !(nf->tensors[mt].flags & KN_T_INPUT));
    kn_net_free(nf);
    kn_free(out);
    out = NULL;
    net->tensors[mt].flags &= ~(uint32_t)KN_T_INPUT;
    /* no meta at all: a network with inputs needs a profile */
    KT_FAILS(kp_write(net, NULL, &out, &size), KILN_ERR_INVALID_ARGUMENT,
             "the network has inputs but no optimization profile");
    /* ... one without inputs does not: an empty identity, no profiles */
    kn_net *ci;
    KT_OK(kn_net_new(&ci));
    int64_t d2[1] = {2};
    int c0 = constant(ci, "c", KILN_DTYPE_FLOAT, 1, d2, 9), y0 = tensor(ci, "y", KILN_DTYPE_FLOAT, 1, d2);
    KT_OK(kn_net_add_node(ci, "id", "Identity", "", 13, 1, &c0, 1, &y0, NULL));
    push_io(&ci->outputs, &ci->n_outputs, &ci->cap_outputs, y0);
    KT_OK(kp_write(ci, NULL, &out, &size));
    kn_net *back = NULL;
    kp_meta mb;
    memset(&mb, 0, sizeof mb);
    KT_OK(kp_read(out, size, NULL, &back, &mb));
    KT_CHECK(back && (back->tensors[y0].flags & KN_T_OUTPUT)); /* flag taken from the list */
    ci->tensors[y0].flags |= KN_T_OUTPUT;
    KT_CHECK(back && net_eq(ci, back) && mb.n_profiles == 0 && mb.backend[0] == 0);
    kn_net_free(back);
    kn_net_free(ci);
    kp_meta_free(&mb);
    kn_free(out);
    kp_meta_free(&m);
    kn_net_free(net);
}

/* Every allocation in the writer and the reader may fail; the result is a
 * clean error with nothing leaked (the sanitizer build checks the leaks). */
static void test_alloc_failures(const uint8_t *plan, size_t size, const kn_net *net,
                                const kp_meta *m) {
    int clean = 1;
    uint64_t wk = 1, rk = 1;
    for (uint64_t k = 1; k < 100000; k++, wk++) {
        void *out = NULL;
        size_t n = 0;
        kn_fault_inject_set(k);
        kiln_status st = kp_write(net, m, &out, &n);
        kn_fault_inject_set(0);
        if (st == KILN_OK) {
            kn_free(out);
            break;
        }
        if (st != KILN_ERR_OUT_OF_MEMORY) {
            clean = 0;
            fprintf(stderr, "write, allocation %llu fails: %s\n", (unsigned long long)k,
                    kiln_status_name(st));
        }
    }
    for (uint64_t k = 1; k < 100000; k++, rk++) {
        kn_fault_inject_set(k);
        kiln_status st = try_read(plan, size);
        kn_fault_inject_set(0);
        if (st == KILN_OK)
            break;
        if (st != KILN_ERR_OUT_OF_MEMORY) {
            clean = 0;
            fprintf(stderr, "read, allocation %llu fails: %s: %s\n", (unsigned long long)k,
                    kiln_status_name(st), kiln_last_error());
        }
    }
    KT_CHECK(clean);
    KT_CHECK(wk > 20 && rk > 50);
    printf("allocation failures: %llu points in the writer, %llu in the reader\n",
           (unsigned long long)wk, (unsigned long long)rk);
}

/* A real plan (built from a small network through the public API) with each
 * byte of its records changed and the plan re-sealed, then loaded and run:
 * the loader and the runtime give an error or a result, never a crash. */
static void test_sealed_damage_loaded(void) {
    kiln_network *net = NULL;
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    int64_t dx[2] = {-1, 4}, dc[1] = {4};
    const char *dn[2] = {"batch", NULL};
    float cv[4] = {0.5f, -1, 2, 0};
    const char *add_in[2] = {"x", "c"}, *add_out[1] = {"s"}, *relu_in[1] = {"s"}, *relu_out[1] = {"y"};
    int profile = -1;
    int64_t mn[2] = {1, 4}, op[2] = {2, 4}, mx[2] = {4, 4};
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, dx, dn));
    KT_OK(kiln_network_add_constant(net, "c", KILN_DTYPE_FLOAT, 1, dc, cv, sizeof cv));
    KT_OK(kiln_network_add_node(net, "add", "Add", "", 17, 2, add_in, 1, add_out, NULL));
    KT_OK(kiln_network_add_node(net, "relu", "Relu", "", 17, 1, relu_in, 1, relu_out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_builder_config_create(&cfg));
    if (cfg) {
        kiln_builder_config_set_threads(cfg, 1);
        kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING | KILN_BUILDER_FLAG_NO_FUSION);
        KT_OK(kiln_builder_config_add_profile(cfg, &profile));
        KT_OK(kiln_builder_config_set_shape(cfg, profile, "x", 2, mn, op, mx));
        KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    }
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    if (!plan)
        return;
    uint8_t *p = malloc(size);
    float in[16] = {1, 2, 3, 4, -1, -2, -3, -4}, out[16];
    int loaded = 0, ran = 0, clean = 1;
    for (size_t i = 256; i < size - 8; i++) {
        for (int k = 0; k < 2; k++) {
            memcpy(p, plan, size);
            p[i] ^= k ? 0xff : 0x01;
            kp_reseal(p, size);
            kiln_engine *e = NULL;
            kiln_status st = kiln_engine_load(p, size, &e);
            if (st != KILN_OK) {
                /* any clear error will do; an internal error is a bug */
                if (st == KILN_ERR_INTERNAL || !kiln_last_error()[0]) {
                    clean = 0;
                    fprintf(stderr, "sealed byte %zu: load: %s: %s\n", i, kiln_status_name(st),
                            kiln_last_error());
                }
                continue;
            }
            loaded++;
            kiln_context *c = NULL;
            int64_t d[2] = {2, 4};
            if (kiln_context_create(e, &c) == KILN_OK &&
                kiln_context_set_input_shape(c, "x", 2, d) == KILN_OK &&
                kiln_context_set_tensor_address(c, "x", in) == KILN_OK &&
                kiln_context_set_tensor_address(c, "y", out) == KILN_OK &&
                kiln_context_enqueue(c, NULL) == KILN_OK)
                ran++;
            kiln_context_destroy(c);
            kiln_engine_destroy(e);
        }
    }
    KT_CHECK(clean);
    KT_CHECK(ran > 0);
    printf("sealed damage of a built plan (%zu bytes): %d loaded, %d ran\n", size, loaded, ran);
    free(p);
    kiln_free(plan);
}

/* Write damaged samples for tests/bad/plans (run by hand with a folder). */
static int write_samples(const char *dir, const uint8_t *plan, size_t size) {
    char path[1024];
    uint8_t *p = malloc(size);
    struct {
        const char *name;
        size_t len;
    } cut[] = {{"truncated_header.plan", 100}, {"truncated_weights.plan", 0}};
    cut[1].len = size - 40;
    for (size_t i = 0; i < KN_ARRAY_LEN(cut); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cut[i].name);
        if (kn_file_write(path, plan, cut[i].len) != KILN_OK)
            return 1;
    }
    memcpy(p, plan, size);
    p[size / 2] ^= 0x20;
    snprintf(path, sizeof path, "%s/flipped_byte.plan", dir);
    if (kn_file_write(path, p, size) != KILN_OK)
        return 1;
    memcpy(p, plan, size);
    wr32(p + 8, 99);
    reseal(p, size);
    snprintf(path, sizeof path, "%s/future_version.plan", dir);
    if (kn_file_write(path, p, size) != KILN_OK)
        return 1;
    memcpy(p, plan, size);
    wr64(p + entry_of(plan, 7) + 8, (uint64_t)1 << 40);
    reseal(p, size);
    snprintf(path, sizeof path, "%s/section_out_of_bounds.plan", dir);
    if (kn_file_write(path, p, size) != KILN_OK)
        return 1;
    static const char onnx_like[] = "\x08\x07\x12\x07pytorch\x1a\x032.1 not a plan at all";
    snprintf(path, sizeof path, "%s/not_a_plan.plan", dir);
    if (kn_file_write(path, onnx_like, sizeof onnx_like - 1) != KILN_OK)
        return 1;
    free(p);
    return 0;
}

/* The samples in tests/bad/plans, each with the error it must give. */
static void test_samples(void) {
    static const struct {
        const char *file;
        kiln_status st;
        const char *text;
    } cases[] = {
        {"bad/plans/truncated_header.plan", KILN_ERR_PLAN, "plan truncated: the header needs 256"},
        {"bad/plans/truncated_weights.plan", KILN_ERR_PLAN, "section 'weights' ends at byte"},
        {"bad/plans/flipped_byte.plan", KILN_ERR_PLAN, "checksum"},
        {"bad/plans/future_version.plan", KILN_ERR_VERSION, "plan format version 99"},
        {"bad/plans/section_out_of_bounds.plan", KILN_ERR_PLAN, "section 'weights'"},
        {"bad/plans/not_a_plan.plan", KILN_ERR_PLAN, "not a kiln plan"},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        uint8_t *data = NULL;
        size_t n = 0;
        if (kn_file_read(cases[i].file, &data, &n) != KILN_OK) {
            fprintf(stderr, "missing sample %s (run from tests/)\n", cases[i].file);
            KT_CHECK(0);
            continue;
        }
        KT_FAILS(try_read(data, n), cases[i].st, cases[i].text);
        kn_free(data);
    }
}

/* Builder options that reach the plan: the TF32 and FP16-accumulation
 * permissions as layer attributes,
 * the optimization level's range, and strongly typed builds refusing
 * precision flags. */
static void test_builder_options(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    const char *in[2] = {"x", "w"}, *out[1] = {"y"};
    float w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (float)i / 16.f;
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, (const int64_t[]){2, 4}, NULL));
    KT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT, 2, (const int64_t[]){4, 4}, w,
                                    sizeof w));
    KT_OK(kiln_network_add_node(net, "mm", "MatMul", "", 17, 2, in, 1, out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_FAILS(kiln_builder_config_set_optimization_level(cfg, 6), KILN_ERR_INVALID_ARGUMENT,
             "outside 0 to 5");
    KT_OK(kiln_builder_config_set_optimization_level(cfg, 0));
    /* each permission flag tags the MatMul with its own attribute only */
    static const struct {
        uint32_t flags;
        int tf32, fp16_accum;
    } perms[] = {
        {KILN_BUILDER_FLAG_TF32, 1, 0},
        {KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_FP16_ACCUMULATION, 0, 1},
        {KILN_BUILDER_FLAG_FP16, 0, 0},
    };
    void *plan = NULL;
    size_t size = 0;
    for (size_t p = 0; p < sizeof perms / sizeof perms[0]; p++) {
        kiln_builder_config_set_flags(cfg, perms[p].flags);
        plan = NULL;
        KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
        kn_net *back = NULL;
        kp_meta mb;
        memset(&mb, 0, sizeof mb);
        if (plan)
            KT_OK(kp_read(plan, size, NULL, &back, &mb));
        if (back) {
            int found = 0, tf32 = -1, acc = -1;
            for (int i = 0; i < back->n_nodes; i++)
                if (strcmp(back->nodes[i].op_type, "MatMul") == 0) {
                    found++;
                    tf32 = (int)kn_attr_int(&back->nodes[i], "allow_tf32", 0);
                    acc = (int)kn_attr_int(&back->nodes[i], "allow_fp16_accum", 0);
                }
            KT_CHECK(found == 1 && tf32 == perms[p].tf32 && acc == perms[p].fp16_accum);
            kn_net_free(back);
            kp_meta_free(&mb);
        }
        kiln_free(plan);
    }
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_STRONGLY_TYPED | KILN_BUILDER_FLAG_FP16);
    plan = NULL;
    KT_FAILS(kiln_build_serialized(net, cfg, &plan, &size), KILN_ERR_INVALID_ARGUMENT,
             "strongly typed");
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_STRONGLY_TYPED);
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
}

int main(int argc, char **argv) {
    kn_net *net = make_net();
    kp_meta m;
    make_meta(&m, net);
    void *plan = NULL;
    size_t size = 0;
    KT_OK(kp_write(net, &m, &plan, &size));
    if (!plan)
        return kt_finish();
    printf("test plan: %zu bytes\n", size);
    if (argc == 3 && strcmp(argv[1], "--write-samples") == 0) {
        int rc = write_samples(argv[2], plan, size);
        kn_free(plan);
        kp_meta_free(&m);
        kn_net_free(net);
        return rc;
    }

    test_builder_options();
    test_round_trip(plan, size, net, &m);
    test_borrowed_weights(plan, size, net);
    test_info(plan, size);
    test_truncation(plan, size);
    test_byte_flips(plan, size);
    test_forged(plan, size);
    test_sealed_damage(plan, size);
    test_sealed_damage_loaded();
    test_write_errors();
    test_alloc_failures(plan, size, net, &m);
    test_samples();

    kn_free(plan);
    kp_meta_free(&m);
    kn_net_free(net);
    return kt_finish();
}
