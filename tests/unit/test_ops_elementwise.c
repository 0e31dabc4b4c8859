/* test_ops_elementwise.c - the elementwise family's schemas and reference CPU
 * kernels through the executor: broadcasting, each op class, data types
 * (float16, bfloat16, integers, bool), reductions over various axes,
 * softmax before and after opset 13, the fused chain, and error messages. */
#include <string.h>

#include "backends/cpu/k_elementwise.h"
#include "graph/graph.h"
#include "kt_exec.h"
#include "test.h"

/* ---- a one-node network ---- */

typedef struct tin {
    kiln_dtype dt;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    const void *data;
} tin;

typedef struct one {
    kiln_network *net;
    int node;
    int n_in;
    tin in[8];
    kt_exec e;
    bool ran;
} one;

/* Inputs become graph inputs "x0".."xN"; an input with dt UNDEFINED is an
 * absent optional input. The output is "y". */
static void one_begin(one *o, const char *op, const char *domain, int opset, int n_in,
                      const tin *in) {
    memset(o, 0, sizeof *o);
    KT_OK(kiln_network_create(&o->net));
    const char *names[8];
    static char buf[8][8];
    for (int i = 0; i < n_in; i++) {
        snprintf(buf[i], sizeof buf[i], "x%d", i);
        names[i] = in[i].dt == KILN_DTYPE_UNDEFINED ? "" : buf[i];
        if (in[i].dt != KILN_DTYPE_UNDEFINED) {
            KT_OK(kiln_network_add_input(o->net, buf[i], in[i].dt, in[i].rank, in[i].dims, NULL));
            o->in[o->n_in++] = in[i];
        }
    }
    const char *outs[1] = {"y"};
    KT_OK(kiln_network_add_node(o->net, "n0", op, domain, opset, n_in, names, 1, outs, &o->node));
    KT_OK(kiln_network_mark_output(o->net, "y"));
}

static kiln_status one_run(one *o) {
    const void *data[8];
    int rank[8];
    int64_t dims[8][KILN_MAX_DIMS];
    for (int i = 0; i < o->n_in; i++) {
        data[i] = o->in[i].data;
        rank[i] = o->in[i].rank;
        memcpy(dims[i], o->in[i].dims, sizeof dims[i]);
    }
    o->ran = true;
    return kt_exec_run(&o->e, o->net, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims);
}

static const void *one_out(one *o, kn_tinfo *ti) { return kt_exec_output(&o->e, 0, ti); }

static void one_end(one *o) {
    if (o->ran)
        kt_exec_free(&o->e);
    kiln_network_destroy(o->net);
}

static tin T(kiln_dtype dt, int rank, const int64_t *dims, const void *data) {
    tin t;
    memset(&t, 0, sizeof t);
    t.dt = dt;
    t.rank = rank;
    if (rank)
        memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    t.data = data;
    return t;
}
#define TF(rank, dims, data) T(KILN_DTYPE_FLOAT, rank, dims, data)
static const tin NONE = {KILN_DTYPE_UNDEFINED, 0, {0}, NULL};

static bool same_shape(const kn_tinfo *ti, int rank, const int64_t *dims) {
    return ti->rank == rank && (rank == 0 || memcmp(ti->dims, dims, sizeof(int64_t) * (size_t)rank) == 0);
}

static void check_f32(const float *got, const float *want, int64_t n, double tol) {
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 3; i++)
        if (got[i] != want[i] && !(fabs((double)got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
            if (isnan(got[i]) && isnan(want[i]))
                continue;
            fprintf(stderr, "  element %lld: got %.8g want %.8g\n", (long long)i, got[i], want[i]);
            bad++;
        }
    KT_CHECK(bad == 0);
}

/* Run a float op on float inputs and compare with `want`. */
static void expect_f32(one *o, int rank, const int64_t *dims, const float *want, double tol) {
    KT_OK(one_run(o));
    kn_tinfo ti;
    const float *y = one_out(o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_FLOAT && same_shape(&ti, rank, dims));
    if (y && ti.dtype == KILN_DTYPE_FLOAT && same_shape(&ti, rank, dims))
        check_f32(y, want, kn_numel(rank, dims), tol);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 4.f - 2.f;
}

/* ---------------- broadcasting ---------------- */

static void test_broadcast(void) {
    /* [2,3,4] + [3,1], [2,1,4] * [1,3,1], scalar - [5] */
    float a[24], b[3], c[8], d[3], w[24];
    for (int i = 0; i < 24; i++)
        a[i] = frand();
    for (int i = 0; i < 3; i++)
        b[i] = frand(), d[i] = frand();
    for (int i = 0; i < 8; i++)
        c[i] = frand();
    int64_t da[3] = {2, 3, 4}, db[2] = {3, 1}, dc[3] = {2, 1, 4}, dd[3] = {1, 3, 1};
    one o;
    tin in1[2] = {TF(3, da, a), TF(2, db, b)};
    one_begin(&o, "Add", "", 14, 2, in1);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                w[(i * 3 + j) * 4 + k] = a[(i * 3 + j) * 4 + k] + b[j];
    expect_f32(&o, 3, da, w, 1e-6);
    one_end(&o);

    tin in2[2] = {TF(3, dc, c), TF(3, dd, d)};
    one_begin(&o, "Mul", "", 14, 2, in2);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                w[(i * 3 + j) * 4 + k] = c[i * 4 + k] * d[j];
    expect_f32(&o, 3, da, w, 1e-6);
    one_end(&o);

    float s = 10.f, v[5] = {1, 2, 3, 4, 5}, wv[5];
    int64_t d5[1] = {5};
    tin in3[2] = {TF(0, NULL, &s), TF(1, d5, v)};
    one_begin(&o, "Sub", "", 14, 2, in3);
    for (int i = 0; i < 5; i++)
        wv[i] = s - v[i];
    expect_f32(&o, 1, d5, wv, 0);
    one_end(&o);

    /* opset 6: broadcast=1 with axis lines B up with A from that axis */
    float bb[6], w6[24];
    for (int i = 0; i < 6; i++)
        bb[i] = frand();
    int64_t d23[2] = {2, 3};
    tin in6[2] = {TF(3, da, a), TF(2, d23, bb)};
    one_begin(&o, "Add", "", 6, 2, in6);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "broadcast", 1));
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "axis", 0));
    for (int i = 0; i < 24; i++)
        w6[i] = a[i] + bb[i / 4];
    expect_f32(&o, 3, da, w6, 1e-6);
    one_end(&o);

    /* large same-shape and row-broadcast inputs take the threaded chunked path */
    int64_t n = 300001;
    float *x = malloc((size_t)n * 4), *yv = malloc((size_t)n * 4), *ww = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        x[i] = frand(), yv[i] = frand(), ww[i] = x[i] / yv[i];
    int64_t dn[1] = {n};
    tin in4[2] = {TF(1, dn, x), TF(1, dn, yv)};
    one_begin(&o, "Div", "", 14, 2, in4);
    expect_f32(&o, 1, dn, ww, 1e-6);
    one_end(&o);
    int64_t dr[2] = {3, 100000}, drow[1] = {100000};
    for (int64_t i = 0; i < 300000; i++)
        ww[i] = x[i] > yv[i % 100000] ? x[i] : yv[i % 100000];
    tin in5[2] = {TF(2, dr, x), TF(1, drow, yv)};
    one_begin(&o, "Max", "", 13, 2, in5);
    expect_f32(&o, 2, dr, ww, 0);
    one_end(&o);
    free(x), free(yv), free(ww);
}

/* ---------------- integers, bool, comparisons ---------------- */

static void test_integer_ops(void) {
    int32_t a[6] = {7, -7, 7, -7, 9, 0}, b[6] = {2, 2, -2, -2, 0, 3};
    int64_t d6[1] = {6};
    one o;
    tin in[2] = {T(KILN_DTYPE_INT32, 1, d6, a), T(KILN_DTYPE_INT32, 1, d6, b)};
    kn_tinfo ti;

    one_begin(&o, "Div", "", 14, 2, in);
    KT_OK(one_run(&o));
    const int32_t *q = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT32);
    KT_CHECK(q[0] == 3 && q[1] == -3 && q[2] == -3 && q[3] == 3 && q[4] == 0 && q[5] == 0);
    one_end(&o);

    one_begin(&o, "Mod", "", 13, 2, in); /* fmod=0: the sign follows the divisor */
    KT_OK(one_run(&o));
    q = one_out(&o, &ti);
    KT_CHECK(q[0] == 1 && q[1] == 1 && q[2] == -1 && q[3] == -1);
    one_end(&o);

    one_begin(&o, "Mod", "", 13, 2, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "fmod", 1));
    KT_OK(one_run(&o));
    q = one_out(&o, &ti);
    KT_CHECK(q[0] == 1 && q[1] == -1 && q[2] == 1 && q[3] == -1);
    one_end(&o);

    int64_t pa[3] = {2, -3, 5}, pb[3] = {10, 3, 0};
    int64_t d3[1] = {3};
    tin pin[2] = {T(KILN_DTYPE_INT64, 1, d3, pa), T(KILN_DTYPE_INT64, 1, d3, pb)};
    one_begin(&o, "Pow", "", 15, 2, pin);
    KT_OK(one_run(&o));
    const int64_t *p = one_out(&o, &ti);
    KT_CHECK(p[0] == 1024 && p[1] == -27 && p[2] == 1);
    one_end(&o);

    float fb[3] = {0.5f, 2.f, 3.f}; /* float exponent on an integer base */
    tin pin2[2] = {T(KILN_DTYPE_INT64, 1, d3, pa), TF(1, d3, fb)};
    one_begin(&o, "Pow", "", 15, 2, pin2);
    KT_OK(one_run(&o));
    p = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT64 && p[0] == 1 && p[1] == 9 && p[2] == 125);
    one_end(&o);

    uint8_t sa[3] = {1, 0x80, 0xff}, sb[3] = {3, 1, 4};
    tin sin_[2] = {T(KILN_DTYPE_UINT8, 1, d3, sa), T(KILN_DTYPE_UINT8, 1, d3, sb)};
    one_begin(&o, "BitShift", "", 11, 2, sin_);
    KT_OK(kiln_network_set_attr_string(o.net, o.node, "direction", "LEFT"));
    KT_OK(one_run(&o));
    const uint8_t *u = one_out(&o, &ti);
    KT_CHECK(u[0] == 8 && u[1] == 0 && u[2] == 0xf0);
    one_end(&o);

    uint8_t ua[3] = {3, 5, 200}, ub[3] = {5, 3, 100};
    tin uin[2] = {T(KILN_DTYPE_UINT8, 1, d3, ua), T(KILN_DTYPE_UINT8, 1, d3, ub)};
    one_begin(&o, "Sub", "", 14, 2, uin); /* wraps like uint8 */
    KT_OK(one_run(&o));
    u = one_out(&o, &ti);
    KT_CHECK(u[0] == 254 && u[1] == 2 && u[2] == 100);
    one_end(&o);
}

static void test_compare_logic_where(void) {
    float a[4] = {1, 2, 3, NAN}, b[1] = {2};
    int64_t d4[1] = {4}, d1[1] = {1};
    one o;
    kn_tinfo ti;
    const char *ops[5] = {"Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal"};
    const uint8_t want[5][4] = {{0, 0, 1, 0}, {0, 1, 1, 0}, {1, 0, 0, 0}, {1, 1, 0, 0}, {0, 1, 0, 0}};
    for (int k = 0; k < 5; k++) {
        tin in[2] = {TF(1, d4, a), TF(1, d1, b)};
        one_begin(&o, ops[k], "", 16, 2, in);
        KT_OK(one_run(&o));
        const uint8_t *y = one_out(&o, &ti);
        KT_CHECK(ti.dtype == KILN_DTYPE_BOOL && same_shape(&ti, 1, d4));
        KT_CHECK(y && memcmp(y, want[k], 4) == 0);
        one_end(&o);
    }
    /* And with broadcasting [2,2] x [2] */
    uint8_t x[4] = {1, 1, 0, 1}, m[2] = {1, 0};
    int64_t d22[2] = {2, 2}, d2[1] = {2};
    tin lin[2] = {T(KILN_DTYPE_BOOL, 2, d22, x), T(KILN_DTYPE_BOOL, 1, d2, m)};
    one_begin(&o, "And", "", 7, 2, lin);
    KT_OK(one_run(&o));
    const uint8_t *y = one_out(&o, &ti);
    KT_CHECK(y[0] == 1 && y[1] == 0 && y[2] == 0 && y[3] == 0);
    one_end(&o);
    one_begin(&o, "Xor", "", 7, 2, lin);
    KT_OK(one_run(&o));
    y = one_out(&o, &ti);
    KT_CHECK(y[0] == 0 && y[1] == 1 && y[2] == 1 && y[3] == 1);
    one_end(&o);

    /* Where: cond [2,1], x [2] int64, y scalar */
    uint8_t cnd[2] = {1, 0};
    int64_t xv[2] = {10, 20}, yv = -1;
    int64_t d21[2] = {2, 1};
    tin win[3] = {T(KILN_DTYPE_BOOL, 2, d21, cnd), T(KILN_DTYPE_INT64, 1, d2, xv),
                  T(KILN_DTYPE_INT64, 0, NULL, &yv)};
    one_begin(&o, "Where", "", 16, 3, win);
    KT_OK(one_run(&o));
    const int64_t *w = one_out(&o, &ti);
    KT_CHECK(same_shape(&ti, 2, d22) && ti.dtype == KILN_DTYPE_INT64);
    KT_CHECK(w[0] == 10 && w[1] == 20 && w[2] == -1 && w[3] == -1);
    one_end(&o);
}

/* ---------------- unary and activations ---------------- */

static void test_unary(void) {
    float x[6] = {-3.f, -0.5f, 0.f, 0.5f, 2.5f, 7.f}, w[6];
    int64_t d6[1] = {6};
    one o;
    struct {
        const char *op;
        double (*f)(double);
    } plain[] = {{"Abs", fabs}, {"Exp", exp}, {"Tanh", tanh}, {"Erf", erf}, {"Floor", floor},
                 {"Atan", atan}, {"Sin", sin}, {"Round", nearbyint}};
    for (size_t k = 0; k < KN_ARRAY_LEN(plain); k++) {
        for (int i = 0; i < 6; i++)
            w[i] = (float)plain[k].f(x[i]);
        tin in[1] = {TF(1, d6, x)};
        one_begin(&o, plain[k].op, "", 13, 1, in);
        expect_f32(&o, 1, d6, w, 1e-6);
        one_end(&o);
    }
    /* Round is half to even */
    KT_CHECK(w[4] == 2.f);

    tin in[1] = {TF(1, d6, x)};
    one_begin(&o, "LeakyRelu", "", 16, 1, in);
    KT_OK(kiln_network_set_attr_float(o.net, o.node, "alpha", 0.1f));
    for (int i = 0; i < 6; i++)
        w[i] = x[i] >= 0 ? x[i] : 0.1f * x[i];
    expect_f32(&o, 1, d6, w, 1e-6);
    one_end(&o);

    one_begin(&o, "Sigmoid", "", 13, 1, in);
    for (int i = 0; i < 6; i++)
        w[i] = (float)(1.0 / (1.0 + exp(-x[i])));
    expect_f32(&o, 1, d6, w, 1e-6);
    one_end(&o);

    one_begin(&o, "Gelu", "", 20, 1, in);
    for (int i = 0; i < 6; i++)
        w[i] = (float)(0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0))));
    expect_f32(&o, 1, d6, w, 1e-6);
    one_end(&o);
    one_begin(&o, "Gelu", "", 20, 1, in);
    KT_OK(kiln_network_set_attr_string(o.net, o.node, "approximate", "tanh"));
    for (int i = 0; i < 6; i++)
        w[i] = (float)(0.5 * x[i] *
                       (1 + tanh(sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]))));
    expect_f32(&o, 1, d6, w, 1e-6);
    one_end(&o);

    one_begin(&o, "Swish", "", 24, 1, in);
    KT_OK(kiln_network_set_attr_float(o.net, o.node, "alpha", 2.f));
    for (int i = 0; i < 6; i++)
        w[i] = (float)(x[i] / (1.0 + exp(-2.0 * x[i])));
    expect_f32(&o, 1, d6, w, 1e-6);
    one_end(&o);

    one_begin(&o, "Shrink", "", 9, 1, in);
    KT_OK(kiln_network_set_attr_float(o.net, o.node, "lambd", 1.f));
    KT_OK(kiln_network_set_attr_float(o.net, o.node, "bias", 0.25f));
    for (int i = 0; i < 6; i++)
        w[i] = x[i] < -1 ? x[i] + 0.25f : (x[i] > 1 ? x[i] - 0.25f : 0.f);
    expect_f32(&o, 1, d6, w, 0);
    one_end(&o);

    one_begin(&o, "HardSwish", "", 14, 1, in);
    for (int i = 0; i < 6; i++)
        w[i] = x[i] * fmaxf(0, fminf(1, x[i] / 6 + 0.5f));
    expect_f32(&o, 1, d6, w, 1e-6);
    one_end(&o);

    /* Clip: attributes before opset 11, optional inputs after */
    one_begin(&o, "Clip", "", 6, 1, in);
    KT_OK(kiln_network_set_attr_float(o.net, o.node, "min", -1.f));
    KT_OK(kiln_network_set_attr_float(o.net, o.node, "max", 1.f));
    for (int i = 0; i < 6; i++)
        w[i] = fmaxf(-1.f, fminf(1.f, x[i]));
    expect_f32(&o, 1, d6, w, 0);
    one_end(&o);
    float hi = 2.f;
    tin cin[3] = {TF(1, d6, x), NONE, TF(0, NULL, &hi)};
    one_begin(&o, "Clip", "", 13, 3, cin);
    for (int i = 0; i < 6; i++)
        w[i] = fminf(2.f, x[i]);
    expect_f32(&o, 1, d6, w, 0);
    one_end(&o);
    int8_t ix[4] = {-100, -5, 5, 100}, lo8 = -10, hi8 = 10;
    int64_t d4[1] = {4};
    tin cin8[3] = {T(KILN_DTYPE_INT8, 1, d4, ix), T(KILN_DTYPE_INT8, 0, NULL, &lo8),
                   T(KILN_DTYPE_INT8, 0, NULL, &hi8)};
    one_begin(&o, "Clip", "", 13, 3, cin8);
    KT_OK(one_run(&o));
    kn_tinfo ti;
    const int8_t *c8 = one_out(&o, &ti);
    KT_CHECK(c8[0] == -10 && c8[1] == -5 && c8[2] == 5 && c8[3] == 10);
    one_end(&o);

    /* IsInf with detect_negative=0, IsNaN */
    float sp[4] = {INFINITY, -INFINITY, NAN, 1.f};
    tin spin[1] = {TF(1, d4, sp)};
    one_begin(&o, "IsInf", "", 10, 1, spin);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "detect_negative", 0));
    KT_OK(one_run(&o));
    const uint8_t *b = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_BOOL && b[0] == 1 && b[1] == 0 && b[2] == 0 && b[3] == 0);
    one_end(&o);
    one_begin(&o, "IsNaN", "", 13, 1, spin);
    KT_OK(one_run(&o));
    b = one_out(&o, &ti);
    KT_CHECK(b[0] == 0 && b[1] == 0 && b[2] == 1 && b[3] == 0);
    one_end(&o);
}

/* ---------------- half precision ---------------- */

static void test_half_types(void) {
    uint16_t a[5], b[5], bb[5];
    float fa[5] = {0.5f, -1.25f, 3.f, 10.f, -0.001f}, fb[5] = {1.f, 2.f, -3.f, 0.25f, 8.f};
    for (int i = 0; i < 5; i++) {
        a[i] = kn_float_to_half(fa[i]);
        b[i] = kn_float_to_half(fb[i]);
        bb[i] = kn_float_to_bf16(fa[i]);
    }
    int64_t d5[1] = {5};
    one o;
    kn_tinfo ti;
    tin in[2] = {T(KILN_DTYPE_FLOAT16, 1, d5, a), T(KILN_DTYPE_FLOAT16, 1, d5, b)};
    one_begin(&o, "Mul", "", 14, 2, in);
    KT_OK(one_run(&o));
    const uint16_t *y = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_FLOAT16);
    for (int i = 0; i < 5; i++)
        KT_NEAR(kn_half_to_float(y[i]), fa[i] * fb[i], fabs(fa[i] * fb[i]) * 1e-3 + 1e-6);
    one_end(&o);

    tin ein[1] = {T(KILN_DTYPE_BFLOAT16, 1, d5, bb)};
    one_begin(&o, "Exp", "", 13, 1, ein);
    KT_OK(one_run(&o));
    y = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_BFLOAT16);
    for (int i = 0; i < 5; i++)
        KT_NEAR(kn_bf16_to_float(y[i]), exp(kn_bf16_to_float(bb[i])), exp(fa[i]) * 1e-2);
    one_end(&o);

    /* Softmax in float16 over the last axis */
    int64_t d15[2] = {1, 5};
    tin sin_[1] = {T(KILN_DTYPE_FLOAT16, 2, d15, b)};
    one_begin(&o, "Softmax", "", 13, 1, sin_);
    KT_OK(one_run(&o));
    y = one_out(&o, &ti);
    double sum = 0, ref[5];
    for (int i = 0; i < 5; i++)
        sum += exp(kn_half_to_float(b[i]));
    for (int i = 0; i < 5; i++) {
        ref[i] = exp(kn_half_to_float(b[i])) / sum;
        KT_NEAR(kn_half_to_float(y[i]), ref[i], 1e-3);
    }
    one_end(&o);
}

/* ---------------- Cast ---------------- */

static void test_cast(void) {
    float x[6] = {1.7f, -1.7f, 0.f, 65504.f, 1e-8f, 300.f};
    int64_t d6[1] = {6};
    one o;
    kn_tinfo ti;
    tin in[1] = {TF(1, d6, x)};
    one_begin(&o, "Cast", "", 19, 1, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_INT32));
    KT_OK(one_run(&o));
    const int32_t *i32 = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT32 && i32[0] == 1 && i32[1] == -1 && i32[2] == 0 &&
             i32[3] == 65504 && i32[5] == 300);
    one_end(&o);

    one_begin(&o, "Cast", "", 19, 1, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_FLOAT16));
    KT_OK(one_run(&o));
    const uint16_t *h = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_FLOAT16 && h[3] == 0x7bff && h[0] == kn_float_to_half(1.7f));
    one_end(&o);

    one_begin(&o, "Cast", "", 19, 1, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_BOOL));
    KT_OK(one_run(&o));
    const uint8_t *b = one_out(&o, &ti);
    KT_CHECK(b[0] == 1 && b[1] == 1 && b[2] == 0 && b[4] == 1);
    one_end(&o);

    one_begin(&o, "BitCast", "", 26, 1, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_UINT32));
    KT_OK(one_run(&o));
    const uint32_t *bits = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_UINT32 && bits[2] == 0 && bits[0] == 0x3fd9999au);
    one_end(&o);
    one_begin(&o, "BitCast", "", 26, 1, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_INT16));
    KT_FAILS(one_run(&o), KILN_ERR_INVALID_ARGUMENT, "float and int16 differ in width");
    one_end(&o);

    int64_t big[2] = {-5, 1234567};
    int64_t d2[1] = {2};
    double like = 0;
    int64_t d1[1] = {1};
    tin lin[2] = {T(KILN_DTYPE_INT64, 1, d2, big), T(KILN_DTYPE_DOUBLE, 1, d1, &like)};
    one_begin(&o, "CastLike", "", 19, 2, lin);
    KT_OK(one_run(&o));
    const double *dd = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_DOUBLE && dd[0] == -5.0 && dd[1] == 1234567.0);
    one_end(&o);
}

/* ---------------- variadic ---------------- */

static void test_variadic(void) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, c[1] = {100}, w[6];
    int64_t d23[2] = {2, 3}, d3[1] = {3}, d1[1] = {1};
    one o;
    tin in[3] = {TF(2, d23, a), TF(1, d3, b), TF(1, d1, c)};
    one_begin(&o, "Sum", "", 13, 3, in);
    for (int i = 0; i < 6; i++)
        w[i] = a[i] + b[i % 3] + c[0];
    expect_f32(&o, 2, d23, w, 0);
    one_end(&o);
    one_begin(&o, "Mean", "", 13, 3, in);
    for (int i = 0; i < 6; i++)
        w[i] = (a[i] + b[i % 3] + c[0]) / 3;
    expect_f32(&o, 2, d23, w, 1e-6);
    one_end(&o);
    one_begin(&o, "Sum", "", 13, 1, in);
    expect_f32(&o, 2, d23, a, 0);
    one_end(&o);

    int16_t ia[3] = {-5, 7, 0}, ib[3] = {3, -8, 0};
    tin iin[2] = {T(KILN_DTYPE_INT16, 1, d3, ia), T(KILN_DTYPE_INT16, 1, d3, ib)};
    one_begin(&o, "Min", "", 13, 2, iin);
    KT_OK(one_run(&o));
    kn_tinfo ti;
    const int16_t *y = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT16 && y[0] == -5 && y[1] == -8 && y[2] == 0);
    one_end(&o);
}

/* ---------------- reductions ---------------- */

/* Reference reduction of a [2,3,4] float tensor over the axes in `mask`. */
static void ref_reduce(const float *x, unsigned mask, int kind, float *out) {
    int64_t d[3] = {2, 3, 4};
    double acc[24];
    int cnt[24];
    for (int i = 0; i < 24; i++)
        acc[i] = kind == 1 ? -INFINITY : 0, cnt[i] = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                int oi = (mask & 1) ? 0 : i, oj = (mask & 2) ? 0 : j, ok = (mask & 4) ? 0 : k;
                int o = (int)((oi * ((mask & 2) ? 1 : d[1]) + oj) * ((mask & 4) ? 1 : d[2]) + ok);
                double v = x[(i * 3 + j) * 4 + k];
                if (kind == 0)
                    acc[o] += v;
                else if (kind == 1)
                    acc[o] = v > acc[o] ? v : acc[o];
                else
                    acc[o] += exp(v);
                cnt[o]++;
            }
    for (int i = 0; i < 24; i++)
        out[i] = (float)(kind == 2 ? log(acc[i]) : acc[i]);
}

static void test_reduce(void) {
    float x[24], w[24];
    for (int i = 0; i < 24; i++)
        x[i] = frand();
    int64_t d[3] = {2, 3, 4};
    one o;
    kn_tinfo ti;

    /* ReduceSum opset 13: axes input, keepdims 0 and 1 */
    int64_t ax1[1] = {-2}, dax[1] = {1};
    tin in[2] = {TF(3, d, x), T(KILN_DTYPE_INT64, 1, dax, ax1)};
    ref_reduce(x, 2, 0, w);
    int64_t dk[3] = {2, 1, 4}, dn[2] = {2, 4};
    one_begin(&o, "ReduceSum", "", 13, 2, in);
    expect_f32(&o, 3, dk, w, 1e-6);
    one_end(&o);
    one_begin(&o, "ReduceSum", "", 13, 2, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "keepdims", 0));
    expect_f32(&o, 2, dn, w, 1e-6);
    one_end(&o);

    /* ReduceMax opset 11: axes attribute {0, 2} (two non-adjacent groups) */
    tin in1[1] = {TF(3, d, x)};
    int64_t axes02[2] = {0, 2};
    ref_reduce(x, 5, 1, w);
    int64_t d131[3] = {1, 3, 1};
    one_begin(&o, "ReduceMax", "", 11, 1, in1);
    KT_OK(kiln_network_set_attr_ints(o.net, o.node, "axes", axes02, 2));
    expect_f32(&o, 3, d131, w, 0);
    one_end(&o);

    /* ReduceLogSumExp over everything (no axes), opset 18 */
    ref_reduce(x, 7, 2, w);
    int64_t d111[3] = {1, 1, 1};
    one_begin(&o, "ReduceLogSumExp", "", 18, 1, in1);
    expect_f32(&o, 3, d111, w, 1e-6);
    one_end(&o);

    /* ReduceMean opset 18 with an empty axes input and noop_with_empty_axes */
    int64_t d0[1] = {0};
    tin in2[2] = {TF(3, d, x), T(KILN_DTYPE_INT64, 1, d0, ax1)};
    one_begin(&o, "ReduceMean", "", 18, 2, in2);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "noop_with_empty_axes", 1));
    expect_f32(&o, 3, d, x, 0);
    one_end(&o);

    /* ReduceSum of int32 over the last axis is exact */
    int32_t iv[6] = {1000000000, 1000000000, 5, -1, -2, -3};
    int64_t d23[2] = {2, 3}, axl[1] = {1};
    tin in3[2] = {T(KILN_DTYPE_INT32, 2, d23, iv), T(KILN_DTYPE_INT64, 1, dax, axl)};
    one_begin(&o, "ReduceSum", "", 13, 2, in3);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "keepdims", 0));
    KT_OK(one_run(&o));
    const int32_t *s = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT32 && ti.rank == 1 && ti.dims[0] == 2);
    KT_CHECK(s[0] == (int32_t)2000000005u && s[1] == -6);
    one_end(&o);

    /* ArgMax with select_last_index, ArgMin default */
    float t[6] = {1, 3, 3, 2, 0, 2};
    tin ain[1] = {TF(2, d23, t)};
    one_begin(&o, "ArgMax", "", 13, 1, ain);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "axis", 1));
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "select_last_index", 1));
    KT_OK(one_run(&o));
    const int64_t *am = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT64 && ti.rank == 2 && ti.dims[1] == 1);
    KT_CHECK(am[0] == 2 && am[1] == 2);
    one_end(&o);
    one_begin(&o, "ArgMin", "", 13, 1, ain);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "keepdims", 0));
    KT_OK(one_run(&o));
    am = one_out(&o, &ti);
    KT_CHECK(ti.rank == 1 && ti.dims[0] == 3 && am[0] == 0 && am[1] == 1 && am[2] == 1);
    one_end(&o);
}

/* ---------------- softmax family, CumSum ---------------- */

static void test_softmax(void) {
    float x[24], w13[24], w11[24];
    for (int i = 0; i < 24; i++)
        x[i] = frand() * 3;
    int64_t d[3] = {2, 3, 4};
    /* opset 13, axis 1: over the 3 entries of each (i, k) */
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            double s = 0;
            for (int j = 0; j < 3; j++)
                s += exp(x[(i * 3 + j) * 4 + k]);
            for (int j = 0; j < 3; j++)
                w13[(i * 3 + j) * 4 + k] = (float)(exp(x[(i * 3 + j) * 4 + k]) / s);
        }
    /* opset 11, axis 1: coerced to [2, 12] */
    for (int i = 0; i < 2; i++) {
        double s = 0;
        for (int j = 0; j < 12; j++)
            s += exp(x[i * 12 + j]);
        for (int j = 0; j < 12; j++)
            w11[i * 12 + j] = (float)(exp(x[i * 12 + j]) / s);
    }
    one o;
    tin in[1] = {TF(3, d, x)};
    one_begin(&o, "Softmax", "", 13, 1, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "axis", 1));
    expect_f32(&o, 3, d, w13, 1e-6);
    one_end(&o);
    one_begin(&o, "Softmax", "", 11, 1, in);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "axis", 1));
    expect_f32(&o, 3, d, w11, 1e-6);
    one_end(&o);
    for (int i = 0; i < 24; i++)
        w11[i] = logf(w11[i]);
    one_begin(&o, "LogSoftmax", "", 11, 1, in); /* default axis 1 before opset 13 */
    expect_f32(&o, 3, d, w11, 1e-5);
    one_end(&o);

    float h[6] = {1, 5, 5, -1, -2, -3}, wh[6] = {0, 1, 0, 1, 0, 0};
    int64_t d23[2] = {2, 3};
    tin hin[1] = {TF(2, d23, h)};
    one_begin(&o, "Hardmax", "", 13, 1, hin);
    expect_f32(&o, 2, d23, wh, 0);
    one_end(&o);

    /* CumSum, axis 1, exclusive and reverse */
    float c[6] = {1, 2, 3, 4, 5, 6}, wc[6] = {5, 3, 0, 11, 6, 0};
    int32_t axis = 1;
    tin cin[2] = {TF(2, d23, c), T(KILN_DTYPE_INT32, 0, NULL, &axis)};
    one_begin(&o, "CumSum", "", 14, 2, cin);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "exclusive", 1));
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "reverse", 1));
    expect_f32(&o, 2, d23, wc, 0);
    one_end(&o);
    float wp[6] = {1, 2, 6, 4, 20, 120};
    tin pin[2] = {TF(2, d23, c), T(KILN_DTYPE_INT32, 0, NULL, &axis)};
    one_begin(&o, "CumProd", "", 26, 2, pin);
    expect_f32(&o, 2, d23, wp, 0);
    one_end(&o);
    int64_t ci[6] = {1, 2, 3, 4, 5, 6};
    int64_t axis0 = 0;
    tin cin2[2] = {T(KILN_DTYPE_INT64, 2, d23, ci), T(KILN_DTYPE_INT64, 0, NULL, &axis0)};
    one_begin(&o, "CumSum", "", 14, 2, cin2);
    KT_OK(one_run(&o));
    kn_tinfo ti;
    const int64_t *cs = one_out(&o, &ti);
    KT_CHECK(cs[0] == 1 && cs[2] == 3 && cs[3] == 5 && cs[5] == 9);
    one_end(&o);
}

/* ---------------- kiln::ElementwiseChain ---------------- */

static void test_chain(void) {
    float a[8], b[4], s = 0.5f, w[8];
    for (int i = 0; i < 8; i++)
        a[i] = frand();
    for (int i = 0; i < 4; i++)
        b[i] = frand();
    int64_t d24[2] = {2, 4}, d4[1] = {4};
    /* y = clip(relu(b - (a * b)) / s, 0, 0.3) with Sub swapped */
    for (int i = 0; i < 8; i++) {
        float v = b[i % 4] - a[i] * b[i % 4];
        v = v > 0 ? v : 0;
        v = v / s;
        w[i] = v < 0 ? 0 : (v > 0.3f ? 0.3f : v);
    }
    one o;
    tin in[3] = {TF(2, d24, a), TF(1, d4, b), TF(0, NULL, &s)};
    one_begin(&o, "ElementwiseChain", "kiln", 1, 3, in);
    const char *ops[5] = {"Mul", "Sub", "Relu", "Div", "Clip"};
    kn_net *net = o.net;
    KT_OK(kn_node_set_ints(&net->nodes[o.node], "operand", (const int64_t[]){1, 1, -1, 2, -1}, 5));
    KT_OK(kn_node_set_ints(&net->nodes[o.node], "swap", (const int64_t[]){0, 1, 0, 0, 0}, 5));
    KT_OK(kn_node_set_floats(&net->nodes[o.node], "alphas", (const float[]){0, 0, 0, 0, 0}, 5));
    KT_OK(kn_node_set_floats(&net->nodes[o.node], "betas", (const float[]){0, 0, 0, 0, 0.3f}, 5));
    /* a strings attribute, built by hand as the fusion pass does */
    kn_node *nd = &net->nodes[o.node];
    kn_attr *na = kn_realloc(nd->attrs, (size_t)(nd->n_attr + 1) * sizeof *na);
    KT_CHECK(na != NULL);
    nd->attrs = na;
    memset(&na[nd->n_attr], 0, sizeof *na);
    na[nd->n_attr].name = kn_strdup("ops");
    na[nd->n_attr].type = KN_ATTR_STRINGS;
    na[nd->n_attr].n = 5;
    na[nd->n_attr].strings = kn_calloc(5, sizeof(char *));
    for (int i = 0; i < 5; i++)
        na[nd->n_attr].strings[i] = kn_strdup(ops[i]);
    nd->n_attr++;
    expect_f32(&o, 2, d24, w, 1e-6);
    one_end(&o);

    /* float16, with the first input a scalar broadcast into the output */
    uint16_t hs = kn_float_to_half(0.75f), hv[4];
    for (int i = 0; i < 4; i++)
        hv[i] = kn_float_to_half(b[i]);
    tin hin[2] = {T(KILN_DTYPE_FLOAT16, 0, NULL, &hs), T(KILN_DTYPE_FLOAT16, 1, d4, hv)};
    one_begin(&o, "ElementwiseChain", "kiln", 1, 2, hin);
    nd = &o.net->nodes[o.node];
    KT_OK(kn_node_set_ints(nd, "operand", (const int64_t[]){1, -1}, 2));
    const char *ops2[2] = {"Add", "Sigmoid"};
    na = kn_realloc(nd->attrs, (size_t)(nd->n_attr + 1) * sizeof *na);
    KT_CHECK(na != NULL);
    nd->attrs = na;
    memset(&na[nd->n_attr], 0, sizeof *na);
    na[nd->n_attr].name = kn_strdup("ops");
    na[nd->n_attr].type = KN_ATTR_STRINGS;
    na[nd->n_attr].n = 2;
    na[nd->n_attr].strings = kn_calloc(2, sizeof(char *));
    for (int i = 0; i < 2; i++)
        na[nd->n_attr].strings[i] = kn_strdup(ops2[i]);
    nd->n_attr++;
    KT_OK(one_run(&o));
    kn_tinfo ti;
    const uint16_t *hy = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_FLOAT16 && same_shape(&ti, 1, d4));
    for (int i = 0; i < 4; i++) {
        double v = 0.75 + kn_half_to_float(hv[i]);
        KT_NEAR(kn_half_to_float(hy[i]), 1.0 / (1.0 + exp(-v)), 1e-3);
    }
    one_end(&o);

    /* an unknown op is refused when the kernel is bound, naming the op */
    tin uin[1] = {TF(1, d4, b)};
    one_begin(&o, "ElementwiseChain", "kiln", 1, 1, uin);
    nd = &o.net->nodes[o.node];
    KT_OK(kn_node_set_ints(nd, "operand", (const int64_t[]){-1}, 1));
    na = kn_realloc(nd->attrs, (size_t)(nd->n_attr + 1) * sizeof *na);
    nd->attrs = na;
    memset(&na[nd->n_attr], 0, sizeof *na);
    na[nd->n_attr].name = kn_strdup("ops");
    na[nd->n_attr].type = KN_ATTR_STRINGS;
    na[nd->n_attr].n = 1;
    na[nd->n_attr].strings = kn_calloc(1, sizeof(char *));
    na[nd->n_attr].strings[0] = kn_strdup("Frobnicate");
    nd->n_attr++;
    KT_FAILS(one_run(&o), KILN_ERR_UNSUPPORTED, "op 0 of the chain ('Frobnicate')");
    one_end(&o);
}

/* ---------------- errors ---------------- */

static void test_errors(void) {
    float a[6] = {0}, b[4] = {0};
    int64_t d23[2] = {2, 3}, d4[1] = {4};
    one o;
    tin in[2] = {TF(2, d23, a), TF(1, d4, b)};
    one_begin(&o, "Add", "", 14, 2, in);
    KT_FAILS(one_run(&o), KILN_ERR_SHAPE, "node 'n0' (Add): shapes cannot broadcast");
    one_end(&o);

    int32_t ib[4] = {0};
    int64_t d3[1] = {3};
    tin in2[2] = {TF(2, d23, a), T(KILN_DTYPE_INT32, 1, d3, ib)};
    one_begin(&o, "Mul", "", 14, 2, in2);
    KT_FAILS(one_run(&o), KILN_ERR_INVALID_ARGUMENT, "same data type, got float and int32");
    one_end(&o);

    tin in3[1] = {T(KILN_DTYPE_INT32, 1, d3, ib)};
    one_begin(&o, "Sqrt", "", 13, 1, in3);
    KT_FAILS(one_run(&o), KILN_ERR_UNSUPPORTED, "data type int32, which Sqrt does not support");
    one_end(&o);

    int64_t bad_axis[1] = {3}, d1[1] = {1};
    tin in4[2] = {TF(2, d23, a), T(KILN_DTYPE_INT64, 1, d1, bad_axis)};
    one_begin(&o, "ReduceSum", "", 13, 2, in4);
    KT_FAILS(one_run(&o), KILN_ERR_SHAPE, "axis 3 is out of range for rank 2");
    one_end(&o);

    tin in5[1] = {TF(2, d23, a)};
    one_begin(&o, "Softmax", "", 13, 1, in5);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "axis", -3));
    KT_FAILS(one_run(&o), KILN_ERR_SHAPE, "(Softmax): axis -3 is out of range");
    one_end(&o);

    one_begin(&o, "Cast", "", 13, 1, in5); /* to string: text, a pointer per element */
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_STRING));
    KT_OK(one_run(&o));
    const char *const *txt = one_out(&o, NULL);
    for (int i = 0; txt && i < 6; i++)
        KT_CHECK(txt[i] && strcmp(txt[i], "0") == 0);
    one_end(&o);

    one_begin(&o, "Cast", "", 13, 1, in5);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_COMPLEX64));
    KT_FAILS(one_run(&o), KILN_ERR_UNSUPPORTED, "cannot cast to complex64");
    one_end(&o);

    float c[6] = {0};
    tin in6[3] = {TF(2, d23, c), TF(2, d23, a), TF(2, d23, a)};
    one_begin(&o, "Where", "", 16, 3, in6);
    KT_FAILS(one_run(&o), KILN_ERR_INVALID_ARGUMENT, "condition must be bool");
    one_end(&o);
}

/* ---------------- ONNX corner cases ---------------- */

static void test_corners(void) {
    one o;
    kn_tinfo ti;
    float x[3] = {-5.f, 1.5f, 5.f}, lo = 2.f, hi = 1.f, w[3] = {1.f, 1.f, 1.f};
    int64_t d3[1] = {3};
    tin cin[3] = {TF(1, d3, x), TF(0, NULL, &lo), TF(0, NULL, &hi)};
    one_begin(&o, "Clip", "", 13, 3, cin); /* min > max: every value becomes max */
    expect_f32(&o, 1, d3, w, 0);
    one_end(&o);

    int8_t sx[3] = {-8, 4, -1}, sy[3] = {8, 9, 127};
    tin sin_[2] = {T(KILN_DTYPE_INT8, 1, d3, sx), T(KILN_DTYPE_INT8, 1, d3, sy)};
    one_begin(&o, "BitShift", "", 11, 2, sin_);
    KT_OK(kiln_network_set_attr_string(o.net, o.node, "direction", "RIGHT"));
    KT_OK(one_run(&o));
    const int8_t *s8 = one_out(&o, &ti);
    KT_CHECK(s8[0] == -1 && s8[1] == 0 && s8[2] == -1);
    one_end(&o);
    int8_t lx[3] = {64, 1, -64}, ly[3] = {1, 7, 1};
    tin lin[2] = {T(KILN_DTYPE_INT8, 1, d3, lx), T(KILN_DTYPE_INT8, 1, d3, ly)};
    one_begin(&o, "BitShift", "", 11, 2, lin);
    KT_OK(kiln_network_set_attr_string(o.net, o.node, "direction", "LEFT"));
    KT_OK(one_run(&o));
    s8 = one_out(&o, &ti);
    KT_CHECK(s8[0] == -128 && s8[1] == -128 && s8[2] == -128);
    one_end(&o);

    /* float8: saturate by default, NaN past the range with saturate=0 */
    float big[3] = {1e6f, 1.f, -1e6f};
    tin fin[1] = {TF(1, d3, big)};
    one_begin(&o, "Cast", "", 19, 1, fin);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_FLOAT8E4M3FN));
    KT_OK(one_run(&o));
    const uint8_t *f8 = one_out(&o, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_FLOAT8E4M3FN && f8[0] == 0x7e && f8[1] == 0x38 && f8[2] == 0xfe);
    one_end(&o);
    one_begin(&o, "Cast", "", 19, 1, fin);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_FLOAT8E4M3FN));
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "saturate", 0));
    KT_OK(one_run(&o));
    f8 = one_out(&o, &ti);
    KT_CHECK(f8[0] == 0x7f && f8[1] == 0x38 && f8[2] == 0xff);
    one_end(&o);
    /* without saturation the overflow is judged after rounding: 464 is the
     * tie between 448 and the first value past the range and rounds to
     * even (448); anything above it is NaN; float8e5m2's 61440 ties up to
     * infinity */
    float edge[3] = {464.f, -464.5f, 61440.f};
    tin ein8[1] = {TF(1, d3, edge)};
    one_begin(&o, "Cast", "", 19, 1, ein8);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_FLOAT8E4M3FN));
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "saturate", 0));
    KT_OK(one_run(&o));
    f8 = one_out(&o, &ti);
    KT_CHECK(f8[0] == 0x7e && f8[1] == 0xff && f8[2] == 0x7f);
    one_end(&o);
    one_begin(&o, "Cast", "", 19, 1, ein8);
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "to", KILN_DTYPE_FLOAT8E5M2));
    KT_OK(kiln_network_set_attr_int(o.net, o.node, "saturate", 0));
    KT_OK(one_run(&o));
    f8 = one_out(&o, &ti);
    KT_CHECK(f8[0] == 0x5f && f8[1] == 0xdf && f8[2] == 0x7c);
    one_end(&o);

    /* Max/Min over an empty axis start from the type's range */
    int32_t none[1] = {0};
    int64_t d20[2] = {2, 0}, ax[1] = {1}, dax[1] = {1}, d21[2] = {2, 1};
    tin ein[2] = {T(KILN_DTYPE_INT32, 2, d20, none), T(KILN_DTYPE_INT64, 1, dax, ax)};
    one_begin(&o, "ReduceMax", "", 18, 2, ein);
    KT_OK(one_run(&o));
    const int32_t *e32 = one_out(&o, &ti);
    KT_CHECK(same_shape(&ti, 2, d21) && e32[0] == INT32_MIN && e32[1] == INT32_MIN);
    one_end(&o);

    /* integer sums down columns (the row-folding path) */
    int64_t m[12], d34[2] = {3, 4}, ax0[1] = {0};
    for (int i = 0; i < 12; i++)
        m[i] = (int64_t)i * 1000000000000LL;
    tin min_[2] = {T(KILN_DTYPE_INT64, 2, d34, m), T(KILN_DTYPE_INT64, 1, dax, ax0)};
    one_begin(&o, "ReduceSum", "", 13, 2, min_);
    KT_OK(one_run(&o));
    const int64_t *cs = one_out(&o, &ti);
    KT_CHECK(ti.rank == 2 && ti.dims[0] == 1 && ti.dims[1] == 4);
    for (int j = 0; j < 4; j++)
        KT_CHECK(cs[j] == (int64_t)(j + (4 + j) + (8 + j)) * 1000000000000LL);
    one_end(&o);
}

/* ---------------- conversions match core's ---------------- */

static void test_conversions(void) {
    int bad = 0;
    static uint16_t hs[65536];
    static float fs[65536];
    for (uint32_t h = 0; h < 65536; h++)
        hs[h] = (uint16_t)h;
    kb_ew_load(KILN_DTYPE_FLOAT16, hs, 65536, KB_F32, fs);
    for (uint32_t h = 0; h < 65536; h++) {
        float want = kn_half_to_float((uint16_t)h);
        if (memcmp(&fs[h], &want, 4) != 0 && bad++ < 3)
            fprintf(stderr, "  half 0x%04x -> %g, core %g\n", h, fs[h], want);
    }
    kb_ew_load(KILN_DTYPE_BFLOAT16, hs, 65536, KB_F32, fs);
    for (uint32_t h = 0; h < 65536; h++) {
        float want = kn_bf16_to_float((uint16_t)h);
        if (memcmp(&fs[h], &want, 4) != 0 && bad++ < 3)
            fprintf(stderr, "  bf16 0x%04x -> %g, core %g\n", h, fs[h], want);
    }
    /* floats: a stride over every bit pattern plus dense runs at the edges */
    uint32_t starts[] = {0x00000000u, 0x33000000u, 0x387fc000u, 0x38800000u - 4096u,
                         0x477fe000u, 0x7f7ff000u, 0x7f800000u - 16u};
    for (int pass = 0; pass < 2; pass++) {
        int64_t n = 0;
        static float src[65536];
        uint32_t u = pass ? 0 : starts[0];
        for (size_t k = 0; pass == 0 && k < KN_ARRAY_LEN(starts); k++)
            for (uint32_t j = 0; j < 8192 && n < 65536; j++) {
                uint32_t v = starts[k] + j;
                memcpy(&src[n++], &v, 4);
                v |= 0x80000000u;
                memcpy(&src[n++], &v, 4);
            }
        for (; pass == 1 && n < 65536; n++, u += 65537u)
            memcpy(&src[n], &u, 4);
        static uint16_t h16[65536], b16[65536];
        kb_ew_store(KILN_DTYPE_FLOAT16, h16, n, KB_F32, src);
        kb_ew_store(KILN_DTYPE_BFLOAT16, b16, n, KB_F32, src);
        for (int64_t i = 0; i < n; i++) {
            uint16_t wh = kn_float_to_half(src[i]), wb = kn_float_to_bf16(src[i]);
            if ((h16[i] != wh || b16[i] != wb) && bad++ < 3)
                fprintf(stderr, "  float %a -> half 0x%04x (core 0x%04x), bf16 0x%04x (core 0x%04x)\n",
                        src[i], h16[i], wh, b16[i], wb);
        }
    }
    KT_CHECK(bad == 0);
}

/* ---------------- registration ---------------- */

static void test_registration(void) {
    /* every schema of the family has a reference kernel and every kernel a schema */
    int missing = 0;
    for (size_t i = 0; i < kn_ops_elementwise_count; i++) {
        const kn_op_schema *sc = &kn_ops_elementwise[i];
        if (!kb_cpu_kernel_find(sc->domain, sc->op_type, "ref") && missing++ < 3)
            fprintf(stderr, "  no ref kernel for %s\n", sc->op_type);
    }
    for (size_t i = 0; i < kb_cpu_elementwise_count; i++) {
        const kb_kernel *k = &kb_cpu_elementwise[i];
        if (!kn_op_find(k->domain, k->op_type) && missing++ < 3)
            fprintf(stderr, "  no schema for %s\n", k->op_type);
    }
    KT_CHECK(missing == 0);

    /* supports() refuses types the loops do not have */
    kn_net *net;
    KT_OK(kn_net_new(&net));
    int t[3], idx;
    KT_OK(kn_net_tensor(net, "a", &t[0]));
    KT_OK(kn_net_tensor(net, "b", &t[1]));
    KT_OK(kn_net_tensor(net, "y", &t[2]));
    const char *ops[] = {"Sqrt", "And", "BitShift", "Softmax", "Add"};
    const kiln_dtype good[] = {KILN_DTYPE_FLOAT16, KILN_DTYPE_BOOL, KILN_DTYPE_UINT8,
                               KILN_DTYPE_DOUBLE, KILN_DTYPE_INT8};
    const kiln_dtype bad[] = {KILN_DTYPE_INT32, KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT,
                              KILN_DTYPE_INT64, KILN_DTYPE_STRING};
    for (size_t i = 0; i < KN_ARRAY_LEN(ops); i++) {
        KT_OK(kn_net_add_node(net, ops[i], ops[i], "", 18, 2, t, 1, &t[2], &idx));
        const kn_node *n = &net->nodes[idx];
        const kb_kernel *k = kb_cpu_kernel_find("", ops[i], "ref");
        KT_CHECK(k && k->supports);
        if (!k || !k->supports)
            continue;
        kn_tinfo in[2], out[1];
        memset(in, 0, sizeof in);
        memset(out, 0, sizeof out);
        in[0].dtype = in[1].dtype = out[0].dtype = good[i];
        KT_CHECK(k->supports(n, in, 2, out, 1));
        in[0].dtype = in[1].dtype = out[0].dtype = bad[i];
        KT_CHECK(!k->supports(n, in, 2, out, 1));
    }
    kn_net_free(net);
}

/* ---------------- several threads ---------------- */

static void test_threads(void) {
    int64_t d[2] = {400, 1000}, drow[1] = {1000};
    int64_t n = 400000;
    float *a = malloc((size_t)n * 4), *b = malloc(1000 * 4), *w = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        a[i] = frand();
    for (int i = 0; i < 1000; i++)
        b[i] = frand();
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_FLOAT, 2, d, NULL));
    KT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_FLOAT, 1, drow, NULL));
    const char *in[2] = {"a", "b"}, *mid[1] = {"s"}, *out[1] = {"y"};
    int node;
    KT_OK(kiln_network_add_node(net, "add", "Add", "", 14, 2, in, 1, mid, NULL));
    KT_OK(kiln_network_add_node(net, "sm", "Softmax", "", 13, 1, mid, 1, out, &node));
    KT_OK(kiln_network_set_attr_int(net, node, "axis", 0));
    KT_OK(kiln_network_mark_output(net, "y"));
    for (int j = 0; j < 1000; j++) {
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < 400; i++)
            mx = fmax(mx, a[i * 1000 + j] + b[j]);
        for (int i = 0; i < 400; i++)
            s += exp(a[i * 1000 + j] + b[j] - mx);
        for (int i = 0; i < 400; i++)
            w[i * 1000 + j] = (float)(exp(a[i * 1000 + j] + b[j] - mx) / s);
    }
    kx_program p;
    kx_ctx c;
    KT_OK(kn_net_toposort(net));
    KT_OK(kx_program_init(&p, net, 2));
    KT_OK(kx_ctx_init(&c, &p));
    KT_OK(kx_ctx_set_input_shape(&c, 0, 2, d));
    KT_OK(kx_ctx_set_input_shape(&c, 1, 1, drow));
    kx_ctx_bind(&c, net->inputs[0], a);
    kx_ctx_bind(&c, net->inputs[1], b);
    KT_OK(kx_ctx_run(&c));
    check_f32(c.addr[net->outputs[0]], w, n, 1e-5);
    kx_ctx_fini(&c);
    kx_program_fini(&p);
    kiln_network_destroy(net);
    free(a), free(b), free(w);
}

int main(void) {
    rng = kt_seed("test_ops_elementwise", 0x9e3779b97f4a7c15ull);
    test_broadcast();
    test_integer_ops();
    test_compare_logic_where();
    test_unary();
    test_half_types();
    test_cast();
    test_variadic();
    test_reduce();
    test_softmax();
    test_chain();
    test_errors();
    test_corners();
    test_conversions();
    test_registration();
    test_threads();
    return kt_finish();
}
