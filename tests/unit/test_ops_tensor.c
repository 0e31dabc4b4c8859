/* test_ops_tensor.c - the tensor family (shape, layout and indexing ops)
 * through the executor: each op against hand-computed values, negative axes,
 * opset differences (attributes versus inputs), host-value shape inputs,
 * data-dependent outputs (NonZero, Compress, Unique), Resize modes, and error
 * messages that name the node. */
#include <string.h>

#include "graph/graph.h"
#include "kt_exec.h"
#include "test.h"

/* ---- a one-node network: inputs are graph inputs "x<k>" or constants
 * "c<k>"; outputs are "y0".."yN" ---- */

typedef struct tt {
    kiln_network *net;
    int node;
    int n_names, n_in;
    char names[8][8];
    const char *in_names[8];
    const void *data[8];
    int rank[8];
    int64_t dims[8][KILN_MAX_DIMS];
    kt_exec e;
    bool ran;
} tt;

static void t_begin(tt *t) {
    memset(t, 0, sizeof *t);
    KT_OK(kiln_network_create(&t->net));
}

static void t_in(tt *t, kiln_dtype dt, int rank, const int64_t *dims, const void *data) {
    int k = t->n_names++;
    snprintf(t->names[k], sizeof t->names[k], "x%d", k);
    t->in_names[k] = t->names[k];
    KT_OK(kiln_network_add_input(t->net, t->names[k], dt, rank, dims, NULL));
    t->data[t->n_in] = data;
    t->rank[t->n_in] = rank;
    if (rank)
        memcpy(t->dims[t->n_in], dims, sizeof(int64_t) * (size_t)rank);
    t->n_in++;
}

static void t_const(tt *t, kiln_dtype dt, int rank, const int64_t *dims, const void *data) {
    int k = t->n_names++;
    snprintf(t->names[k], sizeof t->names[k], "c%d", k);
    t->in_names[k] = t->names[k];
    size_t n = kiln_dtype_size(dt);
    for (int i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    KT_OK(kiln_network_add_constant(t->net, t->names[k], dt, rank, dims, data, n));
}

/* 1-D int64 constant. */
static void t_ints(tt *t, int n, const int64_t *v) {
    int64_t d[1] = {n};
    t_const(t, KILN_DTYPE_INT64, 1, d, v);
}

static void t_absent(tt *t) { t->in_names[t->n_names++] = ""; }

static void t_node(tt *t, const char *op, int opset, int n_out) {
    static const char *const outs[4] = {"y0", "y1", "y2", "y3"};
    KT_OK(kiln_network_add_node(t->net, "probe", op, "", opset, t->n_names, t->in_names, n_out,
                                outs, &t->node));
    for (int i = 0; i < n_out; i++)
        KT_OK(kiln_network_mark_output(t->net, outs[i]));
}

static kiln_status t_run(tt *t) {
    t->ran = true;
    return kt_exec_run(&t->e, t->net, t->data, t->rank, (const int64_t(*)[KILN_MAX_DIMS])t->dims);
}

static const void *t_out(tt *t, int k, kn_tinfo *ti) { return kt_exec_output(&t->e, k, ti); }

static void t_end(tt *t) {
    if (t->ran)
        kt_exec_free(&t->e);
    kiln_network_destroy(t->net);
}

static bool dims_are(const kn_tinfo *ti, int rank, const int64_t *d) {
    if (ti->rank != rank)
        return false;
    for (int i = 0; i < rank; i++)
        if (ti->dims[i] != d[i])
            return false;
    return true;
}

static bool floats_near(const float *a, const float *b, int n, float tol) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol)) {
            fprintf(stderr, "  element %d: %g, expected %g\n", i, a[i], b[i]);
            return false;
        }
    return true;
}

static bool ints_eq(const int64_t *a, const int64_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "  element %d: %lld, expected %lld\n", i, (long long)a[i],
                    (long long)b[i]);
            return false;
        }
    return true;
}

static float seq[256];

/* ---------------- reshapes and layout ---------------- */

static void test_reshape(void) {
    int64_t xd[3] = {2, 3, 4};
    tt t;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 3, xd, seq);
    t_ints(&t, 3, (const int64_t[]){0, -1, 2});
    t_node(&t, "Reshape", 14, 1);
    KT_OK(t_run(&t));
    kn_tinfo ti;
    const float *y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){2, 6, 2}));
    KT_CHECK(y && y[23] == 23.f);
    t_end(&t);

    /* allowzero: a 0 is a real zero-sized dim */
    int64_t ed[2] = {0, 3};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, ed, seq);
    t_ints(&t, 2, (const int64_t[]){3, 0});
    t_node(&t, "Reshape", 14, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "allowzero", 1));
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){3, 0}));
    t_end(&t);

    /* a bad shape fails at shape time, naming the node */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 3, xd, seq);
    t_ints(&t, 2, (const int64_t[]){5, 5});
    t_node(&t, "Reshape", 13, 1);
    KT_FAILS(t_run(&t), KILN_ERR_SHAPE, "node 'probe' (Reshape): cannot reshape 2x3x4");
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 3, xd, seq);
    t_ints(&t, 2, (const int64_t[]){-1, -1});
    t_node(&t, "Reshape", 13, 1);
    KT_FAILS(t_run(&t), KILN_ERR_SHAPE, "more than one -1");
    t_end(&t);
}

/* Shape values computed on the host: Reshape(x, Concat(Shape(x)[0:1], [-1, 2])). */
static void test_shape_chain(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    int64_t dyn[2] = {-1, 6};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, dyn, NULL));
    int64_t two[1] = {2};
    const int64_t tail[2] = {-1, 2};
    KT_OK(kiln_network_add_constant(net, "tail", KILN_DTYPE_INT64, 1, two, tail, sizeof tail));
    int n;
    KT_OK(kiln_network_add_node(net, "shape", "Shape", "", 15, 1, (const char *[]){"x"}, 1,
                                (const char *[]){"s"}, &n));
    KT_OK(kiln_network_set_attr_int(net, n, "end", 1));
    KT_OK(kiln_network_add_node(net, "cat", "Concat", "", 13, 2, (const char *[]){"s", "tail"}, 1,
                                (const char *[]){"shp"}, &n));
    KT_OK(kiln_network_set_attr_int(net, n, "axis", 0));
    KT_OK(kiln_network_add_node(net, "rs", "Reshape", "", 13, 2, (const char *[]){"x", "shp"}, 1,
                                (const char *[]){"y"}, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    kt_exec e;
    int rank[1] = {2};
    int64_t dims[1][KILN_MAX_DIMS] = {{4, 6}};
    const void *data[1] = {seq};
    KT_OK(kt_exec_run(&e, net, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims));
    kn_tinfo ti;
    const float *y = kt_exec_output(&e, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){4, 3, 2}));
    KT_CHECK(y && y[7] == 7.f);
    /* a new batch re-infers through the host values */
    KT_OK(kx_ctx_set_input_shape(&e.c, 0, 2, (const int64_t[]){2, 6}));
    KT_OK(kx_ctx_run(&e.c));
    y = kt_exec_output(&e, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){2, 3, 2}));
    /* Shape reads only the shape: x is not a host value, so new contents in
     * the same buffer reach the output */
    float x2[12];
    for (int i = 0; i < 12; i++)
        x2[i] = 100.f + (float)i;
    kx_ctx_bind(&e.c, e.net->inputs[0], x2);
    KT_OK(kx_ctx_run(&e.c));
    y = kt_exec_output(&e, 0, &ti);
    KT_CHECK(y && y[0] == 100.f);
    x2[0] = -1.f;
    KT_OK(kx_ctx_run(&e.c));
    y = kt_exec_output(&e, 0, &ti);
    KT_CHECK(y && y[0] == -1.f);
    kt_exec_free(&e);
    kiln_network_destroy(net);
}

static void test_squeeze_unsqueeze_flatten(void) {
    int64_t xd[4] = {1, 3, 1, 2};
    kn_tinfo ti;
    tt t;
    /* opset 11: axes attribute; opset 13: axes input */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, seq);
    t_node(&t, "Squeeze", 11, 1);
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "axes", (const int64_t[]){-2}, 1));
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){1, 3, 2}));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, seq);
    t_ints(&t, 2, (const int64_t[]){0, -2});
    t_node(&t, "Squeeze", 13, 1);
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){3, 2}));
    t_end(&t);
    t_begin(&t); /* no axes: every 1 goes */
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, seq);
    t_node(&t, "Squeeze", 13, 1);
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){3, 2}));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, seq);
    t_ints(&t, 1, (const int64_t[]){1});
    t_node(&t, "Squeeze", 13, 1);
    KT_FAILS(t_run(&t), KILN_ERR_SHAPE, "cannot squeeze axis 1 of size 3");
    t_end(&t);

    int64_t ud[2] = {3, 2};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, ud, seq);
    t_node(&t, "Unsqueeze", 11, 1);
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "axes", (const int64_t[]){0, -1}, 2));
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 3, 2, 1}));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, ud, seq);
    t_ints(&t, 2, (const int64_t[]){-2, 1});
    t_node(&t, "Unsqueeze", 13, 1);
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){3, 1, 1, 2}));
    t_end(&t);

    int64_t fd[4] = {2, 3, 4, 5};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, fd, seq);
    t_node(&t, "Flatten", 13, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", -3));
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 60}));
    t_end(&t);
}

static void test_transpose(void) {
    int8_t x[24];
    for (int i = 0; i < 24; i++)
        x[i] = (int8_t)i;
    int64_t xd[3] = {2, 3, 4};
    kn_tinfo ti;
    tt t;
    t_begin(&t); /* default: reverse the axes */
    t_in(&t, KILN_DTYPE_INT8, 3, xd, x);
    t_node(&t, "Transpose", 13, 1);
    KT_OK(t_run(&t));
    const int8_t *y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){4, 3, 2}));
    /* y[k][j][i] = x[i][j][k]: y[1][2][1] = x[1][2][1] = 12 + 8 + 1 */
    KT_CHECK(y && y[1 * 6 + 2 * 2 + 1] == 21);
    t_end(&t);
    int64_t x64[24];
    for (int i = 0; i < 24; i++)
        x64[i] = 1000 + i;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_INT64, 3, xd, x64);
    t_node(&t, "Transpose", 13, 1);
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "perm", (const int64_t[]){1, 2, 0}, 3));
    KT_OK(t_run(&t));
    const int64_t *y64 = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){3, 4, 2}));
    /* y[j][k][i] = x[i][j][k]: y[2][3][1] = x[1][2][3] */
    KT_CHECK(y64 && y64[2 * 8 + 3 * 2 + 1] == 1000 + 12 + 8 + 3);
    t_end(&t);
    /* large enough for the tiled path: NCHW -> NHWC in int16 and float */
    static int16_t big16[2 * 24 * 40 * 20];
    static float bigf[2 * 24 * 40 * 20];
    for (int i = 0; i < 2 * 24 * 40 * 20; i++) {
        big16[i] = (int16_t)i;
        bigf[i] = (float)i;
    }
    int64_t bd[4] = {2, 40, 20, 24};
    for (int f = 0; f < 2; f++) {
        t_begin(&t);
        t_in(&t, f ? KILN_DTYPE_FLOAT : KILN_DTYPE_INT16, 4, bd, f ? (const void *)bigf : big16);
        t_node(&t, "Transpose", 13, 1);
        KT_OK(kiln_network_set_attr_ints(t.net, t.node, "perm", (const int64_t[]){0, 3, 1, 2}, 4));
        KT_OK(t_run(&t));
        const void *yb = t_out(&t, 0, &ti);
        KT_CHECK(dims_are(&ti, 4, (const int64_t[]){2, 24, 40, 20}));
        int bad = 0;
        for (int n = 0; n < 2 && yb; n++)
            for (int c = 0; c < 24; c++)
                for (int hw = 0; hw < 800; hw++) {
                    int src = (n * 800 + hw) * 24 + c, dst = (n * 24 + c) * 800 + hw;
                    bad += f ? ((const float *)yb)[dst] != (float)src
                             : ((const int16_t *)yb)[dst] != (int16_t)src;
                }
        KT_CHECK(yb && bad == 0);
        t_end(&t);
    }
    t_begin(&t);
    t_in(&t, KILN_DTYPE_INT64, 3, xd, x64);
    t_node(&t, "Transpose", 13, 1);
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "perm", (const int64_t[]){1, 1, 0}, 3));
    KT_FAILS(t_run(&t), KILN_ERR_SHAPE, "perm is not a permutation");
    t_end(&t);
}

static void test_concat_split(void) {
    const uint16_t a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    int64_t ad[2] = {2, 2}, bd[2] = {2, 1};
    kn_tinfo ti;
    tt t;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT16, 2, ad, a);
    t_in(&t, KILN_DTYPE_FLOAT16, 2, bd, b);
    t_node(&t, "Concat", 13, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", -1));
    KT_OK(t_run(&t));
    const uint16_t *y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 3}));
    const uint16_t want[6] = {1, 2, 5, 3, 4, 6};
    KT_CHECK(y && memcmp(y, want, sizeof want) == 0);
    t_end(&t);

    /* opset 18: num_outputs with an uneven last part */
    int64_t xd[1] = {7};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 1, xd, seq);
    t_node(&t, "Split", 18, 3);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "num_outputs", 3));
    KT_OK(t_run(&t));
    const float *y2 = t_out(&t, 2, &ti);
    KT_CHECK(dims_are(&ti, 1, (const int64_t[]){1}) && y2 && y2[0] == 6.f);
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 1, (const int64_t[]){3}));
    t_end(&t);
    /* opset 13: split sizes as an input; opset 11: as an attribute */
    int64_t md[2] = {2, 5};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, md, seq);
    t_ints(&t, 2, (const int64_t[]){1, 4});
    t_node(&t, "Split", 13, 2);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", -1));
    KT_OK(t_run(&t));
    const float *s1 = t_out(&t, 1, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 4}));
    KT_CHECK(s1 && floats_near(s1, (const float[]){1, 2, 3, 4, 6, 7, 8, 9}, 8, 0));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, md, seq);
    t_node(&t, "Split", 11, 2);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", 1));
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "split", (const int64_t[]){3, 2}, 2));
    KT_OK(t_run(&t));
    s1 = t_out(&t, 1, &ti);
    KT_CHECK(s1 && floats_near(s1, (const float[]){3, 4, 8, 9}, 4, 0));
    t_end(&t);
    t_begin(&t); /* 5 does not split into 2 equal parts before opset 18 */
    t_in(&t, KILN_DTYPE_FLOAT, 2, md, seq);
    t_node(&t, "Split", 13, 2);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", 1));
    KT_FAILS(t_run(&t), KILN_ERR_SHAPE, "cannot be split into 2 equal parts");
    t_end(&t);
}

static void test_slice(void) {
    int64_t xd[2] = {3, 5};
    kn_tinfo ti;
    tt t;
    /* opset 1: attributes; ends past the end clamp */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_node(&t, "Slice", 1, 1);
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "starts", (const int64_t[]){1, -2}, 2));
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "ends", (const int64_t[]){100, 1000}, 2));
    KT_OK(t_run(&t));
    const float *y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 2}));
    KT_CHECK(y && floats_near(y, (const float[]){8, 9, 13, 14}, 4, 0));
    t_end(&t);
    /* opset 13: negative steps from a clamped start, axes negative */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_ints(&t, 1, (const int64_t[]){100});
    t_ints(&t, 1, (const int64_t[]){INT64_MIN});
    t_ints(&t, 1, (const int64_t[]){-1});
    t_ints(&t, 1, (const int64_t[]){-2});
    t_node(&t, "Slice", 13, 1);
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){3, 3}));
    KT_CHECK(y && floats_near(y, (const float[]){4, 2, 0, 9, 7, 5, 14, 12, 10}, 9, 0));
    t_end(&t);
    /* empty result when start >= end */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_ints(&t, 1, (const int64_t[]){3});
    t_ints(&t, 1, (const int64_t[]){1});
    t_node(&t, "Slice", 13, 1);
    KT_OK(t_run(&t));
    t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){0, 5}));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_ints(&t, 1, (const int64_t[]){0});
    t_ints(&t, 1, (const int64_t[]){1});
    t_ints(&t, 1, (const int64_t[]){0});
    t_ints(&t, 1, (const int64_t[]){0});
    t_node(&t, "Slice", 13, 1);
    KT_FAILS(t_run(&t), KILN_ERR_SHAPE, "step of axis 0 is 0");
    t_end(&t);
}

/* ---------------- indexing ---------------- */

static void test_gather(void) {
    int64_t xd[2] = {3, 4}, id[2] = {2, 2};
    const int32_t idx[4] = {-1, 0, 2, -3};
    kn_tinfo ti;
    tt t;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_in(&t, KILN_DTYPE_INT32, 2, id, idx);
    t_node(&t, "Gather", 13, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", -1));
    KT_OK(t_run(&t));
    const float *y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){3, 2, 2}));
    KT_CHECK(y && floats_near(y, (const float[]){3, 0, 2, 1, 7, 4, 6, 5}, 8, 0));
    t_end(&t);
    /* an index out of range fails at run time, naming the node */
    const int64_t bad[2] = {1, 3};
    int64_t bd[1] = {2};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_in(&t, KILN_DTYPE_INT64, 1, bd, bad);
    t_node(&t, "Gather", 13, 1);
    KT_FAILS(t_run(&t), KILN_ERR_RUNTIME, "node 'probe' (Gather): index 3 (element 1) is out of range");
    t_end(&t);

    /* GatherElements along axis 1 with a negative index */
    const int64_t ge[4] = {-1, 0, 1, 1};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_in(&t, KILN_DTYPE_INT64, 2, id, ge);
    t_node(&t, "GatherElements", 13, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", 1));
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(y && floats_near(y, (const float[]){3, 0, 5, 5}, 4, 0));
    t_end(&t);

    /* GatherND with batch_dims = 1: data [2,3,4], indices [2,1,1] */
    int64_t nd[3] = {2, 3, 4}, ndi[3] = {2, 1, 1};
    const int64_t gi[2] = {2, -3};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 3, nd, seq);
    t_in(&t, KILN_DTYPE_INT64, 3, ndi, gi);
    t_node(&t, "GatherND", 13, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "batch_dims", 1));
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){2, 1, 4}));
    KT_CHECK(y && floats_near(y, (const float[]){8, 9, 10, 11, 12, 13, 14, 15}, 8, 0));
    t_end(&t);
}

static void test_scatter(void) {
    float d[6] = {1, 2, 3, 4, 5, 6};
    int64_t dd[2] = {2, 3}, id[2] = {1, 2};
    const int64_t idx[2] = {2, -3};
    const float upd[2] = {10, 20};
    kn_tinfo ti;
    tt t;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, dd, d);
    t_in(&t, KILN_DTYPE_INT64, 2, id, idx);
    t_in(&t, KILN_DTYPE_FLOAT, 2, id, upd);
    t_node(&t, "ScatterElements", 16, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", 1));
    KT_OK(kiln_network_set_attr_string(t.net, t.node, "reduction", "add"));
    KT_OK(t_run(&t));
    const float *y = t_out(&t, 0, &ti);
    KT_CHECK(y && floats_near(y, (const float[]){21, 2, 13, 4, 5, 6}, 6, 0));
    t_end(&t);

    /* ScatterND with max over int32, a repeated index */
    const int32_t di[4] = {1, 5, 3, 7};
    int64_t d4[1] = {4}, nid[2] = {3, 1}, nud[1] = {3};
    const int64_t nidx[3] = {1, 1, -1};
    const int32_t nu[3] = {2, 9, 4};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_INT32, 1, d4, di);
    t_in(&t, KILN_DTYPE_INT64, 2, nid, nidx);
    t_in(&t, KILN_DTYPE_INT32, 1, nud, nu);
    t_node(&t, "ScatterND", 18, 1);
    KT_OK(kiln_network_set_attr_string(t.net, t.node, "reduction", "max"));
    KT_OK(t_run(&t));
    const int32_t *yi = t_out(&t, 0, &ti);
    KT_CHECK(yi && yi[0] == 1 && yi[1] == 9 && yi[2] == 3 && yi[3] == 7);
    t_end(&t);

    const int64_t oob[3] = {1, 4, 0};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_INT32, 1, d4, di);
    t_in(&t, KILN_DTYPE_INT64, 2, nid, oob);
    t_in(&t, KILN_DTYPE_INT32, 1, nud, nu);
    t_node(&t, "ScatterND", 13, 1);
    KT_FAILS(t_run(&t), KILN_ERR_RUNTIME, "node 'probe' (ScatterND): index 4 of tuple 1");
    t_end(&t);
}

/* ---------------- generators and padding ---------------- */

static void test_expand_tile_pad(void) {
    int64_t xd[2] = {3, 1};
    kn_tinfo ti;
    tt t;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_ints(&t, 3, (const int64_t[]){2, 1, 2});
    t_node(&t, "Expand", 13, 1);
    KT_OK(t_run(&t));
    const float *y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 3, (const int64_t[]){2, 3, 2}));
    KT_CHECK(y && floats_near(y, (const float[]){0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}, 12, 0));
    t_end(&t);

    int64_t td[2] = {2, 2};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, td, seq);
    t_ints(&t, 2, (const int64_t[]){2, 2});
    t_node(&t, "Tile", 13, 1);
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){4, 4}));
    KT_CHECK(y && floats_near(y, (const float[]){0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3}, 16, 0));
    t_end(&t);

    /* Pad over [0 1 2 3] by 2 before and 3 after, each mode */
    static const char *const modes[4] = {"constant", "reflect", "edge", "wrap"};
    static const float want[4][9] = {{7, 7, 0, 1, 2, 3, 7, 7, 7},
                                     {2, 1, 0, 1, 2, 3, 2, 1, 0},
                                     {0, 0, 0, 1, 2, 3, 3, 3, 3},
                                     {2, 3, 0, 1, 2, 3, 0, 1, 2}};
    int64_t pd[1] = {4};
    const float seven = 7;
    for (int m = 0; m < 4; m++) {
        t_begin(&t);
        t_in(&t, KILN_DTYPE_FLOAT, 1, pd, seq);
        t_ints(&t, 2, (const int64_t[]){2, 3});
        t_const(&t, KILN_DTYPE_FLOAT, 0, NULL, &seven);
        t_node(&t, "Pad", 13, 1);
        KT_OK(kiln_network_set_attr_string(t.net, t.node, "mode", modes[m]));
        KT_OK(t_run(&t));
        y = t_out(&t, 0, &ti);
        KT_CHECK(dims_are(&ti, 1, (const int64_t[]){9}));
        KT_CHECK(y && floats_near(y, want[m], 9, 0));
        t_end(&t);
    }
    /* opset 2: pads and value as attributes, negative pads crop */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, td, seq);
    t_node(&t, "Pad", 2, 1);
    KT_OK(kiln_network_set_attr_ints(t.net, t.node, "pads", (const int64_t[]){1, -1, 0, 0}, 4));
    KT_OK(kiln_network_set_attr_float(t.net, t.node, "value", 5.f));
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){3, 1}));
    KT_CHECK(y && floats_near(y, (const float[]){5, 1, 3}, 3, 0));
    t_end(&t);
    /* CenterCropPad: crop 5 -> 2 from offset 1, pad 2 -> 5 with 1 zero before */
    int64_t cd[2] = {2, 5};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, cd, seq);
    t_ints(&t, 2, (const int64_t[]){5, 2});
    t_node(&t, "CenterCropPad", 18, 1);
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){5, 2}));
    KT_CHECK(y && floats_near(y, (const float[]){0, 0, 1, 2, 6, 7, 0, 0, 0, 0}, 10, 0));
    t_end(&t);
    /* opset 18: axes input selects the padded axes (negative allowed) */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, td, seq);
    t_ints(&t, 2, (const int64_t[]){1, 0});
    t_absent(&t);
    t_ints(&t, 1, (const int64_t[]){-1});
    t_node(&t, "Pad", 18, 1);
    KT_OK(kiln_network_set_attr_string(t.net, t.node, "mode", "edge"));
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 3}));
    KT_CHECK(y && floats_near(y, (const float[]){0, 0, 1, 2, 2, 3}, 6, 0));
    t_end(&t);
}

static void test_generators(void) {
    kn_tinfo ti;
    tt t;
    /* Range in int32 with a negative delta */
    const int32_t s = 10, l = -3, d = -4;
    t_begin(&t);
    t_const(&t, KILN_DTYPE_INT32, 0, NULL, &s);
    t_const(&t, KILN_DTYPE_INT32, 0, NULL, &l);
    t_const(&t, KILN_DTYPE_INT32, 0, NULL, &d);
    t_node(&t, "Range", 11, 1);
    KT_OK(t_run(&t));
    const int32_t *r = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 1, (const int64_t[]){4}));
    KT_CHECK(r && r[0] == 10 && r[1] == 6 && r[2] == 2 && r[3] == -2);
    t_end(&t);
    const float fs = 0.5f, fl = 1.6f, fd = 0.5f;
    t_begin(&t);
    t_const(&t, KILN_DTYPE_FLOAT, 0, NULL, &fs);
    t_const(&t, KILN_DTYPE_FLOAT, 0, NULL, &fl);
    t_const(&t, KILN_DTYPE_FLOAT, 0, NULL, &fd);
    t_node(&t, "Range", 11, 1);
    KT_OK(t_run(&t));
    const float *rf = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 1, (const int64_t[]){3}));
    KT_CHECK(rf && floats_near(rf, (const float[]){0.5f, 1.f, 1.5f}, 3, 0));
    t_end(&t);

    /* ConstantOfShape defaults to float zeros */
    t_begin(&t);
    t_ints(&t, 2, (const int64_t[]){2, 3});
    t_node(&t, "ConstantOfShape", 9, 1);
    KT_OK(t_run(&t));
    rf = t_out(&t, 0, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_FLOAT && dims_are(&ti, 2, (const int64_t[]){2, 3}));
    KT_CHECK(rf && rf[5] == 0.f);
    t_end(&t);

    /* Shape with start/end (opset 15), Size */
    int64_t xd[4] = {2, 3, 4, 5};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, seq);
    t_node(&t, "Shape", 15, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "start", -3));
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "end", -1));
    KT_OK(t_run(&t));
    const int64_t *sh = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 1, (const int64_t[]){2}) && sh && sh[0] == 3 && sh[1] == 4);
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, seq);
    t_node(&t, "Size", 13, 1);
    KT_OK(t_run(&t));
    sh = t_out(&t, 0, &ti);
    KT_CHECK(ti.rank == 0 && sh && sh[0] == 120);
    t_end(&t);

    /* OneHot: negative indices count from depth, out-of-range ones stay off */
    const int64_t oi[3] = {1, -1, 5};
    const float depth = 3, vals[2] = {-1, 1};
    int64_t od[1] = {3}, vd[1] = {2};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_INT64, 1, od, oi);
    t_const(&t, KILN_DTYPE_FLOAT, 0, NULL, &depth);
    t_in(&t, KILN_DTYPE_FLOAT, 1, vd, vals);
    t_node(&t, "OneHot", 11, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", 0));
    KT_OK(t_run(&t));
    rf = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){3, 3}));
    KT_CHECK(rf && floats_near(rf, (const float[]){-1, -1, -1, 1, -1, -1, -1, 1, -1}, 9, 0));
    t_end(&t);

    /* Trilu lower with k = -1; EyeLike with k = 1 as int32 */
    int64_t md[2] = {3, 3};
    const int64_t k = -1;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, md, seq);
    t_const(&t, KILN_DTYPE_INT64, 0, NULL, &k);
    t_node(&t, "Trilu", 14, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "upper", 0));
    KT_OK(t_run(&t));
    rf = t_out(&t, 0, &ti);
    KT_CHECK(rf && floats_near(rf, (const float[]){0, 0, 0, 3, 0, 0, 6, 7, 0}, 9, 0));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, md, seq);
    t_node(&t, "EyeLike", 9, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "k", 1));
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "dtype", KILN_DTYPE_INT32));
    KT_OK(t_run(&t));
    const int32_t *e = t_out(&t, 0, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT32);
    KT_CHECK(e && e[1] == 1 && e[5] == 1 && e[0] == 0 && e[4] == 0 && e[8] == 0);
    t_end(&t);
}

static void test_depth_space(void) {
    int64_t xd[4] = {1, 4, 1, 2};
    kn_tinfo ti;
    tt t;
    /* DCR: y[0, 0, h*2 + i, w*2 + j] = x[0, i*2 + j, h, w] */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, seq);
    t_node(&t, "DepthToSpace", 13, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "blocksize", 2));
    KT_OK(t_run(&t));
    const float *y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 1, 2, 4}));
    KT_CHECK(y && floats_near(y, (const float[]){0, 2, 1, 3, 4, 6, 5, 7}, 8, 0));
    t_end(&t);
    /* SpaceToDepth inverts it */
    int64_t sd[4] = {1, 1, 2, 4};
    const float sx[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, sd, sx);
    t_node(&t, "SpaceToDepth", 13, 1);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "blocksize", 2));
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 4, xd));
    KT_CHECK(y && floats_near(y, seq, 8, 0));
    t_end(&t);
}

/* ---------------- data-dependent outputs ---------------- */

static void test_nonzero(void) {
    const float x[6] = {0, 1.5f, -0.0f, 0, 2, 3};
    int64_t xd[2] = {2, 3};
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, xd, NULL));
    KT_OK(kiln_network_add_node(net, "nz", "NonZero", "", 13, 1, (const char *[]){"x"}, 1,
                                (const char *[]){"idx"}, NULL));
    KT_OK(kiln_network_add_node(net, "tr", "Transpose", "", 13, 1, (const char *[]){"idx"}, 1,
                                (const char *[]){"y"}, NULL));
    KT_OK(kiln_network_mark_output(net, "idx"));
    KT_OK(kiln_network_mark_output(net, "y"));
    kt_exec e;
    int rank[1] = {2};
    int64_t dims[1][KILN_MAX_DIMS] = {{2, 3}};
    const void *data[1] = {x};
    KT_OK(kt_exec_run(&e, net, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims));
    kn_tinfo ti;
    const int64_t *idx = kt_exec_output(&e, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 3}));
    KT_CHECK(idx && ints_eq(idx, (const int64_t[]){0, 1, 1, 1, 1, 2}, 6));
    const int64_t *y = kt_exec_output(&e, 1, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){3, 2}));
    KT_CHECK(y && ints_eq(y, (const int64_t[]){0, 1, 1, 1, 1, 2}, 6));
    kt_exec_free(&e);
    kiln_network_destroy(net);

    /* Compress without an axis, condition shorter than the data */
    const uint8_t cond[4] = {1, 0, 0, 1};
    int64_t cd[1] = {4};
    kn_tinfo ti2;
    tt t;
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_in(&t, KILN_DTYPE_BOOL, 1, cd, cond);
    t_node(&t, "Compress", 11, 1);
    KT_OK(t_run(&t));
    const float *c = t_out(&t, 0, &ti2);
    KT_CHECK(dims_are(&ti2, 1, (const int64_t[]){2}) && c && c[0] == 0 && c[1] == 3);
    t_end(&t);
}

static void test_unique(void) {
    const float x[6] = {2, 1, 1, 3, 4, 3};
    int64_t xd[1] = {6};
    kn_tinfo ti;
    for (int sorted = 0; sorted <= 1; sorted++) {
        tt t;
        t_begin(&t);
        t_in(&t, KILN_DTYPE_FLOAT, 1, xd, x);
        t_node(&t, "Unique", 11, 4);
        KT_OK(kiln_network_set_attr_int(t.net, t.node, "sorted", sorted));
        KT_OK(t_run(&t));
        const float *y = t_out(&t, 0, &ti);
        KT_CHECK(dims_are(&ti, 1, (const int64_t[]){4}));
        const int64_t *first = t_out(&t, 1, NULL), *inv = t_out(&t, 2, &ti), *cnt = t_out(&t, 3, NULL);
        KT_CHECK(dims_are(&ti, 1, (const int64_t[]){6}));
        if (sorted) {
            KT_CHECK(y && floats_near(y, (const float[]){1, 2, 3, 4}, 4, 0));
            KT_CHECK(first && ints_eq(first, (const int64_t[]){1, 0, 3, 4}, 4));
            KT_CHECK(inv && ints_eq(inv, (const int64_t[]){1, 0, 0, 2, 3, 2}, 6));
            KT_CHECK(cnt && ints_eq(cnt, (const int64_t[]){2, 1, 2, 1}, 4));
        } else {
            KT_CHECK(y && floats_near(y, (const float[]){2, 1, 3, 4}, 4, 0));
            KT_CHECK(first && ints_eq(first, (const int64_t[]){0, 1, 3, 4}, 4));
            KT_CHECK(inv && ints_eq(inv, (const int64_t[]){0, 1, 1, 2, 3, 2}, 6));
            KT_CHECK(cnt && ints_eq(cnt, (const int64_t[]){1, 2, 2, 1}, 4));
        }
        t_end(&t);
    }
}

static void test_topk(void) {
    const float x[8] = {3, 1, 3, 2, 5, 5, 0, 1};
    int64_t xd[2] = {2, 4};
    kn_tinfo ti;
    tt t;
    /* ties keep the lower index first */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, x);
    t_ints(&t, 1, (const int64_t[]){2});
    t_node(&t, "TopK", 11, 2);
    KT_OK(t_run(&t));
    const float *v = t_out(&t, 0, &ti);
    const int64_t *i = t_out(&t, 1, NULL);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 2}));
    KT_CHECK(v && floats_near(v, (const float[]){3, 3, 5, 5}, 4, 0));
    KT_CHECK(i && ints_eq(i, (const int64_t[]){0, 2, 0, 1}, 4));
    t_end(&t);
    /* opset 1: k as an attribute; smallest along axis 0 (opset 11 largest=0) */
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, x);
    t_ints(&t, 1, (const int64_t[]){1});
    t_node(&t, "TopK", 11, 2);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "axis", -2));
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "largest", 0));
    KT_OK(t_run(&t));
    v = t_out(&t, 0, &ti);
    i = t_out(&t, 1, NULL);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){1, 4}));
    KT_CHECK(v && floats_near(v, (const float[]){3, 1, 0, 1}, 4, 0));
    KT_CHECK(i && ints_eq(i, (const int64_t[]){0, 0, 1, 1}, 4));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, x);
    t_node(&t, "TopK", 1, 2);
    KT_OK(kiln_network_set_attr_int(t.net, t.node, "k", 3));
    KT_OK(t_run(&t));
    i = t_out(&t, 1, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){2, 3}));
    KT_CHECK(i && ints_eq(i, (const int64_t[]){0, 2, 3, 0, 1, 3}, 6));
    t_end(&t);
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, x);
    t_ints(&t, 1, (const int64_t[]){5});
    t_node(&t, "TopK", 11, 2);
    KT_FAILS(t_run(&t), KILN_ERR_SHAPE, "k = 5 is out of range");
    t_end(&t);
}

static void test_reverse_sequence(void) {
    int64_t xd[2] = {3, 2}, ld[1] = {2};
    const int64_t lens[2] = {3, 1};
    kn_tinfo ti;
    tt t;
    t_begin(&t); /* time axis 0, batch axis 1 */
    t_in(&t, KILN_DTYPE_FLOAT, 2, xd, seq);
    t_in(&t, KILN_DTYPE_INT64, 1, ld, lens);
    t_node(&t, "ReverseSequence", 10, 1);
    KT_OK(t_run(&t));
    const float *y = t_out(&t, 0, &ti);
    KT_CHECK(y && floats_near(y, (const float[]){4, 1, 2, 3, 0, 5}, 6, 0));
    t_end(&t);
}

/* Byte-moving ops on every element width: Gather on bool, Pad on int64 with
 * a constant, Tile on double, Resize nearest on uint8. */
static void test_dtypes(void) {
    kn_tinfo ti;
    tt t;
    const uint8_t b[4] = {1, 0, 0, 1};
    const int64_t gi[3] = {3, 0, -3};
    int64_t bd[1] = {4}, gd[1] = {3};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_BOOL, 1, bd, b);
    t_in(&t, KILN_DTYPE_INT64, 1, gd, gi);
    t_node(&t, "Gather", 13, 1);
    KT_OK(t_run(&t));
    const uint8_t *yb = t_out(&t, 0, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_BOOL && yb && yb[0] == 1 && yb[1] == 1 && yb[2] == 0);
    t_end(&t);

    const int64_t v[2] = {INT64_MAX, -5}, pv = INT64_MIN;
    int64_t vd[1] = {2};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_INT64, 1, vd, v);
    t_ints(&t, 2, (const int64_t[]){1, 1});
    t_const(&t, KILN_DTYPE_INT64, 0, NULL, &pv);
    t_node(&t, "Pad", 13, 1);
    KT_OK(t_run(&t));
    const int64_t *yi = t_out(&t, 0, &ti);
    KT_CHECK(yi && ints_eq(yi, (const int64_t[]){INT64_MIN, INT64_MAX, -5, INT64_MIN}, 4));
    t_end(&t);

    const double d[2] = {0.25, -1e300};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_DOUBLE, 1, vd, d);
    t_ints(&t, 1, (const int64_t[]){2});
    t_node(&t, "Tile", 13, 1);
    KT_OK(t_run(&t));
    const double *yd = t_out(&t, 0, &ti);
    KT_CHECK(yd && yd[0] == 0.25 && yd[1] == -1e300 && yd[2] == 0.25 && yd[3] == -1e300);
    t_end(&t);

    const uint8_t px[4] = {10, 20, 30, 40};
    const float s2[4] = {1, 1, 2, 2};
    int64_t pd[4] = {1, 1, 2, 2}, four[1] = {4};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_UINT8, 4, pd, px);
    t_absent(&t);
    t_const(&t, KILN_DTYPE_FLOAT, 1, four, s2);
    t_node(&t, "Resize", 13, 1);
    KT_OK(t_run(&t));
    const uint8_t *yu = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 1, 4, 4}));
    /* half_pixel + round_prefer_floor: x = (o + 0.5) / 2 - 0.5 -> 0, 0, 1, 1 */
    KT_CHECK(yu && yu[0] == 10 && yu[1] == 10 && yu[2] == 20 && yu[15] == 40 && yu[8] == 30);
    t_end(&t);
}

/* ---------------- Resize ---------------- */

static const float *resize_run(tt *t, const float *x, int64_t w, const char *mode,
                               const char *coord, const float *scales, const int64_t *sizes,
                               int opset, kn_tinfo *ti) {
    int64_t xd[4] = {1, 1, 1, w};
    t_begin(t);
    t_in(t, KILN_DTYPE_FLOAT, 4, xd, x);
    int64_t four[1] = {4};
    if (opset >= 11)
        t_absent(t); /* roi */
    if (scales)
        t_const(t, KILN_DTYPE_FLOAT, 1, four, scales);
    else
        t_absent(t);
    if (sizes)
        t_ints(t, 4, sizes);
    t_node(t, "Resize", opset, 1);
    KT_OK(kiln_network_set_attr_string(t->net, t->node, "mode", mode));
    if (coord)
        KT_OK(kiln_network_set_attr_string(t->net, t->node, "coordinate_transformation_mode", coord));
    KT_OK(t_run(t));
    return t_out(t, 0, ti);
}

static void test_resize(void) {
    const float x[4] = {1, 2, 3, 4};
    const float up2[4] = {1, 1, 1, 2}, down[4] = {1, 1, 1, 0.5f};
    kn_tinfo ti;
    tt t;
    /* nearest, asymmetric, 2x: each value twice */
    const float *y = resize_run(&t, x, 4, "nearest", "asymmetric", up2, NULL, 13, &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 1, 1, 8}));
    KT_CHECK(y && floats_near(y, (const float[]){1, 1, 2, 2, 3, 3, 4, 4}, 8, 0));
    t_end(&t);
    /* linear, half_pixel, 2x: x = (o + 0.5) / 2 - 0.5, edges clamp */
    y = resize_run(&t, x, 4, "linear", NULL, up2, NULL, 13, &ti);
    KT_CHECK(y && floats_near(y, (const float[]){1, 1.25f, 1.75f, 2.25f, 2.75f, 3.25f, 3.75f, 4},
                              8, 1e-6f));
    t_end(&t);
    /* linear, align_corners, sizes 7: x = o * 3 / 6 */
    y = resize_run(&t, x, 4, "linear", "align_corners", NULL, (const int64_t[]){1, 1, 1, 7}, 13,
                   &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 1, 1, 7}));
    KT_CHECK(y && floats_near(y, (const float[]){1, 1.5f, 2, 2.5f, 3, 3.5f, 4}, 7, 1e-6f));
    t_end(&t);
    /* linear, half_pixel, halving: x = 2o + 0.5, the mean of each pair */
    y = resize_run(&t, x, 4, "linear", NULL, down, NULL, 13, &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 1, 1, 2}));
    KT_CHECK(y && floats_near(y, (const float[]){1.5f, 3.5f}, 2, 1e-6f));
    t_end(&t);
    /* cubic, asymmetric, 2x at o = 1 (x = 0.5, A = -0.75): weights
     * -0.09375, 0.59375, 0.59375, -0.09375 over x[-1 -> 0], x0, x1, x2 */
    y = resize_run(&t, x, 4, "cubic", "asymmetric", up2, NULL, 13, &ti);
    KT_CHECK(y && fabsf(y[1] - (-0.09375f * 1 + 0.59375f * 1 + 0.59375f * 2 - 0.09375f * 3)) < 1e-6f);
    KT_CHECK(y && y[0] == 1.f && y[2] == 2.f);
    t_end(&t);
    /* nearest round_prefer_ceil vs floor with half_pixel, 3 -> 2 */
    const float x3[3] = {10, 20, 30};
    const float s23[4] = {1, 1, 1, 2.f / 3.f};
    y = resize_run(&t, x3, 3, "nearest", NULL, s23, NULL, 13, &ti);
    /* x = (o + 0.5) * 1.5 - 0.5 = 0.25, 1.75 -> round: 0, 2 */
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 1, 1, 2}));
    KT_CHECK(y && floats_near(y, (const float[]){10, 30}, 2, 0));
    t_end(&t);
    /* opset 10: asymmetric; nearest rounds down when enlarging */
    const float s15[4] = {1, 1, 1, 1.5f};
    y = resize_run(&t, x3, 3, "nearest", NULL, s15, NULL, 10, &ti);
    KT_CHECK(dims_are(&ti, 4, (const int64_t[]){1, 1, 1, 4}));
    KT_CHECK(y && floats_near(y, (const float[]){10, 10, 20, 30}, 4, 0));
    t_end(&t);
    /* both scales and sizes is an error */
    int64_t xd[4] = {1, 1, 1, 4};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 4, xd, x);
    t_absent(&t);
    int64_t four[1] = {4};
    t_const(&t, KILN_DTYPE_FLOAT, 1, four, up2);
    t_ints(&t, 4, (const int64_t[]){1, 1, 1, 8});
    t_node(&t, "Resize", 13, 1);
    KT_FAILS(t_run(&t), KILN_ERR_INVALID_ARGUMENT, "scales and sizes must not both be given");
    t_end(&t);
    /* Upsample-9, nearest: repeats */
    const float s2[2] = {1, 2};
    int64_t ud[2] = {1, 2}, two[1] = {2};
    t_begin(&t);
    t_in(&t, KILN_DTYPE_FLOAT, 2, ud, x);
    t_const(&t, KILN_DTYPE_FLOAT, 1, two, s2);
    t_node(&t, "Upsample", 9, 1);
    KT_OK(t_run(&t));
    y = t_out(&t, 0, &ti);
    KT_CHECK(dims_are(&ti, 2, (const int64_t[]){1, 4}));
    KT_CHECK(y && floats_near(y, (const float[]){1, 1, 2, 2}, 4, 0));
    t_end(&t);
}

int main(void) {
    for (int i = 0; i < 256; i++)
        seq[i] = (float)i;
    test_reshape();
    test_shape_chain();
    test_squeeze_unsqueeze_flatten();
    test_transpose();
    test_concat_split();
    test_slice();
    test_gather();
    test_scatter();
    test_expand_tile_pad();
    test_generators();
    test_depth_space();
    test_nonzero();
    test_unique();
    test_topk();
    test_reverse_sequence();
    test_dtypes();
    test_resize();
    return kt_finish();
}
