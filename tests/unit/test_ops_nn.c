/* test_ops_nn.c - the nn family's reference kernels and the fused kiln ops,
 * run through the executor: against hand-computed values, against naive
 * oracles written here (convolution, matmul), and against ONNX Runtime
 * outputs embedded in test_ops_nn_expect.h (gen_ops_nn_expect.py). */
#include "test.h" /* first: kt_exec.h relies on its <string.h> */
#include "kt_exec.h"
#include "test_ops_nn_expect.h"

/* ---------------- harness ---------------- */

/* Deterministic inputs in [-1, 1), the same formula as gen_ops_nn_expect.py. */
static float kt_data_at(int64_t i, int seed) {
    return (float)((double)((i * 7919 + (int64_t)seed * 104729) % 2001) / 1000.0 - 1.0);
}

static float *kt_data(int64_t n, int seed, float scale) {
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        p[i] = scale == 1.f ? kt_data_at(i, seed) : kt_data_at(i, seed) * scale;
    return p;
}

/* One op in a network of its own. */
typedef struct kc {
    kiln_network *net;
    int node, n_in;
    const void *data[16];
    int rank[16];
    int64_t dims[16][KILN_MAX_DIMS];
    kt_exec e;
} kc;

static void kc_new(kc *k) {
    memset(k, 0, sizeof *k);
    KT_OK(kiln_network_create(&k->net));
}

static void kc_input(kc *k, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                     const void *data) {
    KT_OK(kiln_network_add_input(k->net, name, dt, rank, dims, NULL));
    k->data[k->n_in] = data;
    k->rank[k->n_in] = rank;
    memcpy(k->dims[k->n_in], dims, sizeof(int64_t) * (size_t)rank);
    k->n_in++;
}

static void kc_const(kc *k, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                     const void *data) {
    size_t n = (size_t)kn_numel(rank, dims) * kiln_dtype_size(dt);
    KT_OK(kiln_network_add_constant(k->net, name, dt, rank, dims, data, n));
}

static void kc_node(kc *k, const char *op, const char *domain, int opset, int n_in,
                    const char *const *ins, int n_out, const char *const *outs) {
    KT_OK(kiln_network_add_node(k->net, "n0", op, domain, opset, n_in, ins, n_out, outs, &k->node));
    for (int i = 0; i < n_out; i++)
        if (outs[i][0])
            KT_OK(kiln_network_mark_output(k->net, outs[i]));
}

/* Threads the kernels may use: 1 for the first pass over the cases, more for
 * a second pass through the parallel paths. */
static int kc_threads = 1;

static kiln_status kc_run(kc *k) {
    if (kc_threads == 1)
        return kt_exec_run(&k->e, k->net, k->data, k->rank,
                           (const int64_t(*)[KILN_MAX_DIMS])k->dims);
    kt_exec *e = &k->e; /* kt_exec_run with a thread count */
    memset(e, 0, sizeof *e);
    e->net = k->net;
    KN_TRY(kn_net_toposort(k->net));
    KN_TRY(kx_program_init(&e->p, k->net, kc_threads));
    kiln_status st = kx_ctx_init(&e->c, &e->p);
    if (st != KILN_OK) {
        kx_program_fini(&e->p);
        return st;
    }
    e->ready = 1;
    for (int i = 0; i < k->net->n_inputs; i++) {
        KN_TRY(kx_ctx_set_input_shape(&e->c, i, k->rank[i], k->dims[i]));
        kx_ctx_bind(&e->c, k->net->inputs[i], (void *)k->data[i]);
    }
    return kx_ctx_run(&e->c);
}

static const void *kc_out(kc *k, int i, kn_tinfo *ti) { return kt_exec_output(&k->e, i, ti); }

static void kc_free(kc *k) {
    kt_exec_free(&k->e);
    kiln_network_destroy(k->net);
    memset(k, 0, sizeof *k);
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__})
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define NDIMS(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

/* All n values within tol (absolute + relative); one check per call. */
static void check_close(const char *what, const float *got, const float *want, int64_t n,
                        double tol) {
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!(g == w || fabs(g - w) <= tol * (1.0 + fabs(w)))) { /* == for infinities */
            kt_fail++;
            fprintf(stderr, "%s: element %lld is %.7g, expected %.7g\n", what, (long long)i, g, w);
            return;
        }
    }
    kt_pass++;
}

static void check_shape(const char *what, const kn_tinfo *ti, int rank, const int64_t *dims) {
    bool ok = ti->rank == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = ti->dims[i] == dims[i];
    if (ok) {
        kt_pass++;
        return;
    }
    char got[128], want[128];
    kn_shape_str(ti->rank, ti->dims, got, sizeof got);
    kn_shape_str(rank, dims, want, sizeof want);
    kt_fail++;
    fprintf(stderr, "%s: shape %s, expected %s\n", what, got, want);
}

/* Run the one-op net and compare output i (float) with want. */
static void expect_out(kc *k, int i, const char *what, int rank, const int64_t *dims,
                       const float *want, double tol) {
    kn_tinfo ti;
    const float *y = kc_out(k, i, &ti);
    check_shape(what, &ti, rank, dims);
    if (ti.rank == rank && kn_numel(ti.rank, ti.dims) == kn_numel(rank, dims))
        check_close(what, y, want, kn_numel(rank, dims), tol);
}

/* Every other CPU tactic for the net's one node that supports it must give
 * the same output 0 (within tol): the reference is the ground truth they are
 * tested against. Call after a successful reference run. */
static void cross_tactics(kc *k, const char *what, int rank, const int64_t *dims,
                          const float *want, double tol) {
    kn_node *n = &k->net->nodes[0];
    const kb_kernel *ks[16];
    int nk = kb_cpu_kernels_for(n->domain, n->op_type, ks, 16);
    kn_tinfo in[16], out[4];
    if (n->n_in > 16 || n->n_out > 4)
        return;
    for (int j = 0; j < n->n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        if (n->in[j] >= 0)
            in[j] = k->e.c.ti[n->in[j]];
    }
    for (int j = 0; j < n->n_out; j++) {
        memset(&out[j], 0, sizeof out[j]);
        if (n->out[j] >= 0)
            out[j] = k->e.c.ti[n->out[j]];
    }
    for (int i = 0; i < nk && i < 16; i++) {
        if (strcmp(ks[i]->tactic, "ref") == 0 ||
            (ks[i]->supports && !ks[i]->supports(n, in, n->n_in, out, n->n_out)))
            continue;
        char name[160];
        snprintf(name, sizeof name, "%s [tactic %s]", what, ks[i]->tactic);
        kt_exec_free(&k->e);
        n->tactic = kn_strdup(ks[i]->tactic);
        kiln_status st = kc_run(k);
        if (st != KILN_OK) {
            kt_fail++;
            fprintf(stderr, "%s: %s: %s\n", name, kiln_status_name(st), kiln_last_error());
        } else {
            expect_out(k, 0, name, rank, dims, want, tol);
        }
        kt_exec_free(&k->e);
        kn_free(n->tactic);
        n->tactic = NULL;
    }
}

/* ---------------- Conv: a naive oracle ---------------- */

typedef struct cgeo {
    int nsp;
    int64_t n, cin, cout, group;
    int64_t in[3], k[3], s[3], d[3], p0[3], p1[3];
    const char *auto_pad; /* NULL: explicit pads */
    int64_t out[3];
} cgeo;

/* Output size and (for auto_pad) pads, from the ONNX definitions. */
static void cgeo_finish(cgeo *g) {
    for (int i = 0; i < 3; i++) {
        if (i >= g->nsp) {
            g->in[i] = g->k[i] = g->s[i] = g->d[i] = 1;
            g->p0[i] = g->p1[i] = 0;
        }
        int64_t ek = (g->k[i] - 1) * g->d[i] + 1;
        if (g->auto_pad && strncmp(g->auto_pad, "SAME", 4) == 0) {
            g->out[i] = (g->in[i] + g->s[i] - 1) / g->s[i];
            int64_t total = (g->out[i] - 1) * g->s[i] + ek - g->in[i];
            total = total < 0 ? 0 : total;
            g->p0[i] = strcmp(g->auto_pad, "SAME_UPPER") == 0 ? total / 2 : total - total / 2;
            g->p1[i] = total - g->p0[i];
        } else {
            if (g->auto_pad) /* VALID */
                g->p0[i] = g->p1[i] = 0;
            g->out[i] = (g->in[i] + g->p0[i] + g->p1[i] - ek) / g->s[i] + 1;
        }
    }
}

static void conv_oracle(const cgeo *g, const float *x, const float *w, const float *b, float *y) {
    int64_t cig = g->cin / g->group, cog = g->cout / g->group;
    int64_t isz = g->in[0] * g->in[1] * g->in[2], osz = g->out[0] * g->out[1] * g->out[2];
    int64_t ksz = g->k[0] * g->k[1] * g->k[2];
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t co = 0; co < g->cout; co++) {
            int64_t grp = co / cog;
            for (int64_t o0 = 0; o0 < g->out[0]; o0++)
                for (int64_t o1 = 0; o1 < g->out[1]; o1++)
                    for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
                        double acc = b ? b[co] : 0.0;
                        for (int64_t ci = 0; ci < cig; ci++)
                            for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                                for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                                        int64_t i0 = o0 * g->s[0] - g->p0[0] + k0 * g->d[0];
                                        int64_t i1 = o1 * g->s[1] - g->p0[1] + k1 * g->d[1];
                                        int64_t i2 = o2 * g->s[2] - g->p0[2] + k2 * g->d[2];
                                        if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1] ||
                                            i2 < 0 || i2 >= g->in[2])
                                            continue;
                                        acc += (double)x[(n * g->cin + grp * cig + ci) * isz +
                                                         (i0 * g->in[1] + i1) * g->in[2] + i2] *
                                               w[(co * cig + ci) * ksz +
                                                 (k0 * g->k[1] + k1) * g->k[2] + k2];
                                    }
                        y[(n * g->cout + co) * osz + (o0 * g->out[1] + o1) * g->out[2] + o2] =
                            (float)acc;
                    }
        }
}

/* Build X and W dims of a geometry. */
static int cgeo_dims(const cgeo *g, int64_t *xd, int64_t *wd, int64_t *yd) {
    xd[0] = g->n, xd[1] = g->cin;
    wd[0] = g->cout, wd[1] = g->cin / g->group;
    yd[0] = g->n, yd[1] = g->cout;
    for (int i = 0; i < g->nsp; i++) {
        xd[2 + i] = g->in[i];
        wd[2 + i] = g->k[i];
        yd[2 + i] = g->out[i];
    }
    return g->nsp + 2;
}

static void conv_set_attrs(kc *k, const cgeo *g) {
    int64_t v[6];
    for (int i = 0; i < g->nsp; i++)
        v[i] = g->s[i];
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "strides", v, (size_t)g->nsp));
    for (int i = 0; i < g->nsp; i++)
        v[i] = g->d[i];
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "dilations", v, (size_t)g->nsp));
    if (g->auto_pad) {
        KT_OK(kiln_network_set_attr_string(k->net, k->node, "auto_pad", g->auto_pad));
    } else {
        for (int i = 0; i < g->nsp; i++) {
            v[i] = g->p0[i];
            v[i + g->nsp] = g->p1[i];
        }
        KT_OK(kiln_network_set_attr_ints(k->net, k->node, "pads", v, (size_t)(2 * g->nsp)));
    }
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "group", g->group));
}

static void conv_case(const char *what, cgeo g, bool bias) {
    cgeo_finish(&g);
    int64_t xd[5], wd[5], yd[5];
    int r = cgeo_dims(&g, xd, wd, yd);
    int64_t nx = kn_numel(r, xd), nw = kn_numel(r, wd), ny = kn_numel(r, yd);
    float *x = kt_data(nx, 1, 1.f), *w = kt_data(nw, 2, 0.5f), *b = kt_data(g.cout, 3, 1.f);
    float *want = malloc(sizeof(float) * (size_t)ny);
    conv_oracle(&g, x, w, bias ? b : NULL, want);
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, r, xd, x);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, r, wd, w);
    kc_const(&k, "B", KILN_DTYPE_FLOAT, 1, &g.cout, b);
    kc_node(&k, "Conv", "", 18, bias ? 3 : 2, NAMES("X", "W", "B"), 1, NAMES("Y"));
    conv_set_attrs(&k, &g);
    KT_OK(kc_run(&k));
    expect_out(&k, 0, what, r, yd, want, 1e-4);
    cross_tactics(&k, what, r, yd, want, 1e-3);
    kc_free(&k);
    free(x), free(w), free(b), free(want);
}

static void test_conv(void) {
    /* the ONNX documentation's example: 5x5 ramp, 3x3 ones, pads 1 */
    {
        float x[25], w[9];
        for (int i = 0; i < 25; i++)
            x[i] = (float)i;
        for (int i = 0; i < 9; i++)
            w[i] = 1.f;
        static const float want[25] = {12, 21,  27,  33,  24,  33, 54,  63,  72,  51, 63, 99, 108,
                                       117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84};
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 1, 5, 5), x);
        kc_const(&k, "W", KILN_DTYPE_FLOAT, 4, DIMS(1, 1, 3, 3), w);
        kc_node(&k, "Conv", "", 11, 2, NAMES("X", "W"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "pads", DIMS(1, 1, 1, 1), 4));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, "conv doc example", 4, DIMS(1, 1, 5, 5), want, 0);
        kc_free(&k);
    }
    conv_case("conv 2d pads bias",
              (cgeo){2, 2, 3, 4, 1, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, {0}}, true);
    conv_case("conv 2d strided asymmetric pads",
              (cgeo){2, 1, 3, 5, 1, {8, 7}, {3, 2}, {2, 2}, {1, 1}, {0, 1}, {2, 0}, NULL, {0}}, false);
    conv_case("conv grouped dilated",
              (cgeo){2, 1, 4, 6, 2, {9, 9}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, NULL, {0}}, true);
    conv_case("conv depthwise strided",
              (cgeo){2, 2, 4, 4, 4, {9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, {0}}, true);
    conv_case("conv depthwise multiplier",
              (cgeo){2, 1, 3, 6, 3, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, {0}}, true);
    conv_case("conv 1x1 (no im2col)",
              (cgeo){2, 2, 8, 5, 1, {4, 4}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, {0}}, true);
    conv_case("conv 1x1 strided",
              (cgeo){2, 1, 8, 5, 1, {5, 5}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, {0}}, true);
    conv_case("conv 1d", (cgeo){1, 2, 3, 4, 1, {10}, {3}, {2}, {2}, {1}, {2}, NULL, {0}}, true);
    conv_case("conv 3d",
              (cgeo){3, 1, 2, 3, 1, {4, 5, 3}, {2, 3, 2}, {1, 2, 1}, {1, 1, 1}, {1, 0, 1}, {0, 1, 1},
                     NULL, {0}},
              true);
    conv_case("conv SAME_UPPER",
              (cgeo){2, 1, 2, 3, 1, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {0}, {0}, "SAME_UPPER", {0}}, true);
    conv_case("conv SAME_LOWER",
              (cgeo){2, 1, 2, 3, 1, {5, 5}, {4, 4}, {1, 1}, {1, 1}, {0}, {0}, "SAME_LOWER", {0}}, true);
    conv_case("conv VALID",
              (cgeo){2, 1, 2, 3, 1, {6, 7}, {3, 2}, {2, 1}, {1, 1}, {0}, {0}, "VALID", {0}}, false);
    /* large enough for several GEMM tiles and k blocks */
    conv_case("conv larger",
              (cgeo){2, 1, 40, 70, 1, {20, 19}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, {0}},
              true);

    /* im2col in chunks of output positions (576 x 10000 floats > KB_CONV_COL_FLOATS),
     * the second chunk starting inside an output row */
    conv_case("conv chunked im2col",
              (cgeo){2, 1, 64, 4, 1, {100, 100}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, {0}},
              true);

    /* channels that do not fit the weights: a shape error naming the node */
    kc k;
    kc_new(&k);
    float x[2 * 3 * 4 * 4] = {0}, w[4 * 2 * 3 * 3] = {0};
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(2, 3, 4, 4), x);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 4, DIMS(4, 2, 3, 3), w);
    kc_node(&k, "Conv", "", 11, 2, NAMES("X", "W"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "node 'n0' (Conv): channels do not fit");
    kc_free(&k);
}

/* float16 and double convolutions run through float copies. */
static void test_conv_types(void) {
    cgeo g = {2, 1, 3, 4, 1, {6, 5}, {3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 0}, NULL, {0}};
    cgeo_finish(&g);
    int64_t xd[4], wd[4], yd[4];
    cgeo_dims(&g, xd, wd, yd);
    int64_t nx = kn_numel(4, xd), nw = kn_numel(4, wd), ny = kn_numel(4, yd);
    float *x = kt_data(nx, 1, 1.f), *w = kt_data(nw, 2, 0.5f), *b = kt_data(4, 3, 1.f);
    float *want = malloc(sizeof(float) * (size_t)ny), *got = malloc(sizeof(float) * (size_t)ny);
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = t ? KILN_DTYPE_DOUBLE : KILN_DTYPE_FLOAT16;
        size_t es = kiln_dtype_size(dt);
        uint8_t *xs = malloc((size_t)nx * es), *ws = malloc((size_t)nw * es), *bs = malloc(4 * es);
        /* round the inputs to the type first so the oracle sees the same values */
        for (int64_t i = 0; i < nx; i++) {
            if (t) ((double *)xs)[i] = x[i];
            else x[i] = kn_half_to_float(((uint16_t *)xs)[i] = kn_float_to_half(x[i]));
        }
        for (int64_t i = 0; i < nw; i++) {
            if (t) ((double *)ws)[i] = w[i];
            else w[i] = kn_half_to_float(((uint16_t *)ws)[i] = kn_float_to_half(w[i]));
        }
        for (int64_t i = 0; i < 4; i++) {
            if (t) ((double *)bs)[i] = b[i];
            else b[i] = kn_half_to_float(((uint16_t *)bs)[i] = kn_float_to_half(b[i]));
        }
        conv_oracle(&g, x, w, b, want);
        kc k;
        kc_new(&k);
        kc_input(&k, "X", dt, 4, xd, xs);
        kc_const(&k, "W", dt, 4, wd, ws);
        kc_const(&k, "B", dt, 1, DIMS(4), bs);
        kc_node(&k, "Conv", "", 11, 3, NAMES("X", "W", "B"), 1, NAMES("Y"));
        conv_set_attrs(&k, &g);
        KT_OK(kc_run(&k));
        kn_tinfo ti;
        const void *y = kc_out(&k, 0, &ti);
        KT_CHECK(ti.dtype == dt);
        for (int64_t i = 0; i < ny; i++)
            got[i] = t ? (float)((const double *)y)[i] : kn_half_to_float(((const uint16_t *)y)[i]);
        check_close(t ? "conv double" : "conv float16", got, want, ny, t ? 1e-5 : 2e-3);
        kc_free(&k);
        free(xs), free(ws), free(bs);
    }
    free(x), free(w), free(b), free(want), free(got);
}

/* ConvInteger and QLinearConv against the float oracle on the shifted values
 * (small integers: exact in float). */
static void test_conv_integer(void) {
    cgeo g = {2, 2, 4, 6, 2, {6, 5}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, {0, 1}, NULL, {0}};
    cgeo_finish(&g);
    int64_t xd[4], wd[4], yd[4];
    cgeo_dims(&g, xd, wd, yd);
    int64_t nx = kn_numel(4, xd), nw = kn_numel(4, wd), ny = kn_numel(4, yd);
    uint8_t *x = malloc((size_t)nx);
    int8_t *w = malloc((size_t)nw);
    float *xf = malloc(sizeof(float) * (size_t)nx), *wf = malloc(sizeof(float) * (size_t)nw);
    float *want = malloc(sizeof(float) * (size_t)ny);
    const uint8_t xzp = 100;
    const int8_t wzp[6] = {0, 1, -2, 3, 0, -1};
    for (int64_t i = 0; i < nx; i++) {
        x[i] = (uint8_t)((i * 37) % 256);
        xf[i] = (float)x[i] - xzp;
    }
    int64_t per = nw / 6;
    for (int64_t i = 0; i < nw; i++) {
        w[i] = (int8_t)((i * 53) % 255 - 127);
        wf[i] = (float)w[i] - wzp[i / per];
    }
    conv_oracle(&g, xf, wf, NULL, want);
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_UINT8, 4, xd, x);
    kc_const(&k, "W", KILN_DTYPE_INT8, 4, wd, w);
    kc_const(&k, "XZ", KILN_DTYPE_UINT8, 0, DIMS(0), &xzp);
    kc_const(&k, "WZ", KILN_DTYPE_INT8, 1, DIMS(6), wzp);
    kc_node(&k, "ConvInteger", "", 10, 4, NAMES("X", "W", "XZ", "WZ"), 1, NAMES("Y"));
    conv_set_attrs(&k, &g);
    KT_OK(kc_run(&k));
    kn_tinfo ti;
    const int32_t *y = kc_out(&k, 0, &ti);
    check_shape("convinteger", &ti, 4, yd);
    bool same = ti.dtype == KILN_DTYPE_INT32;
    for (int64_t i = 0; same && i < ny; i++)
        same = y[i] == (int32_t)want[i];
    KT_CHECK(same);
    kc_free(&k);
    /* QLinearConv: the same sums, requantized: y = round(acc * xs * ws / ys) + yz */
    const float xs = 0.5f, ws = 0.25f, ys = 64.f;
    const uint8_t yz = 128;
    const int8_t wz0 = 0;
    for (int64_t i = 0; i < nw; i++)
        wf[i] = (float)w[i];
    conv_oracle(&g, xf, wf, NULL, want);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_UINT8, 4, xd, x);
    kc_const(&k, "XS", KILN_DTYPE_FLOAT, 0, DIMS(0), &xs);
    kc_const(&k, "XZ", KILN_DTYPE_UINT8, 0, DIMS(0), &xzp);
    kc_const(&k, "W", KILN_DTYPE_INT8, 4, wd, w);
    kc_const(&k, "WS", KILN_DTYPE_FLOAT, 0, DIMS(0), &ws);
    kc_const(&k, "WZ", KILN_DTYPE_INT8, 0, DIMS(0), &wz0);
    kc_const(&k, "YS", KILN_DTYPE_FLOAT, 0, DIMS(0), &ys);
    kc_const(&k, "YZ", KILN_DTYPE_UINT8, 0, DIMS(0), &yz);
    kc_node(&k, "QLinearConv", "", 10, 8, NAMES("X", "XS", "XZ", "W", "WS", "WZ", "YS", "YZ"), 1,
            NAMES("Y"));
    conv_set_attrs(&k, &g);
    KT_OK(kc_run(&k));
    const uint8_t *q = kc_out(&k, 0, &ti);
    same = ti.dtype == KILN_DTYPE_UINT8;
    for (int64_t i = 0; same && i < ny; i++) {
        float v = nearbyintf(want[i] * (xs * ws / ys)) + yz;
        v = v < 0 ? 0 : (v > 255 ? 255 : v);
        same = q[i] == (uint8_t)v;
    }
    KT_CHECK(same);
    kc_free(&k);
    free(x), free(w), free(xf), free(wf), free(want);
}

/* MaxUnpool puts MaxPool's maxima back where they came from. */
static void test_max_unpool(void) {
    static const float x[4] = {5, 6, 7, 8};
    static const int64_t idx[4] = {5, 7, 13, 15};
    float want[16] = {0};
    want[5] = 5, want[7] = 6, want[13] = 7, want[15] = 8;
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 1, 2, 2), x);
    kc_const(&k, "I", KILN_DTYPE_INT64, 4, DIMS(1, 1, 2, 2), idx);
    kc_node(&k, "MaxUnpool", "", 11, 2, NAMES("X", "I"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_ints(k.net, k.node, "kernel_shape", DIMS(2, 2), 2));
    KT_OK(kiln_network_set_attr_ints(k.net, k.node, "strides", DIMS(2, 2), 2));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "maxunpool", 4, DIMS(1, 1, 4, 4), want, 0);
    kc_free(&k);
}

/* ---------------- ConvTranspose ---------------- */

static void test_conv_transpose(void) {
    /* ONNX Runtime: groups, strides, asymmetric pads, output_padding, dilations, bias */
    {
        float *x = kt_data(36, 71, 1.f), *w = kt_data(108, 72, 1.f), *b = kt_data(6, 73, 1.f);
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 4, 3, 3), x);
        kc_const(&k, "W", KILN_DTYPE_FLOAT, 4, DIMS(4, 3, 3, 3), w);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 1, DIMS(6), b);
        kc_node(&k, "ConvTranspose", "", 11, 3, NAMES("X", "W", "B"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "group", 2));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "strides", DIMS(2, 2), 2));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "pads", DIMS(1, 0, 0, 1), 4));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "output_padding", DIMS(1, 1), 2));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "dilations", DIMS(1, 2), 2));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, "convtranspose groups/output_padding", 4, DIMS(1, 6, 7, 9), exp_convt_Y,
                   1e-5);
        kc_free(&k);
        free(x), free(w), free(b);
    }
    /* by hand: 1-D, stride 2, output_shape one past the full result (pads the end) */
    {
        static const float x[2] = {1, 2}, w[2] = {1, 10};
        static const float want[5] = {1, 10, 2, 20, 0};
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(1, 1, 2), x);
        kc_const(&k, "W", KILN_DTYPE_FLOAT, 3, DIMS(1, 1, 2), w);
        kc_node(&k, "ConvTranspose", "", 11, 2, NAMES("X", "W"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "strides", DIMS(2), 1));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "output_shape", DIMS(5), 1));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, "convtranspose output_shape", 3, DIMS(1, 1, 5), want, 0);
        kc_free(&k);
    }
}

/* ---------------- pooling ---------------- */

static void pool_case(const char *what, const char *op, int opset, int rank, const int64_t *xd,
                      int seed, int n_out, const int64_t *yd, const float *want,
                      const int64_t *want_idx, void (*attrs)(kc *)) {
    int64_t nx = kn_numel(rank, xd);
    float *x = kt_data(nx, seed, 1.f);
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, rank, xd, x);
    kc_node(&k, op, "", opset, 1, NAMES("X"), n_out, NAMES("Y", "I"));
    attrs(&k);
    KT_OK(kc_run(&k));
    expect_out(&k, 0, what, rank, yd, want, 1e-5);
    if (n_out == 1)
        cross_tactics(&k, what, rank, yd, want, 1e-4);
    if (n_out > 1) {
        kn_tinfo ti;
        const int64_t *idx = kc_out(&k, 1, &ti);
        bool same = ti.dtype == KILN_DTYPE_INT64 &&
                    memcmp(idx, want_idx, sizeof(int64_t) * (size_t)kn_numel(rank, yd)) == 0;
        if (!same)
            fprintf(stderr, "%s: indices differ\n", what);
        KT_CHECK(same);
    }
    kc_free(&k);
    free(x);
}

static void attrs_maxpool(kc *k) {
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "kernel_shape", DIMS(2, 2), 2));
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "strides", DIMS(2, 2), 2));
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "ceil_mode", 1));
}
static void attrs_maxpool_so(kc *k) {
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "kernel_shape", DIMS(2, 2), 2));
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "storage_order", 1));
}
static void attrs_avgpool(kc *k) {
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "kernel_shape", DIMS(3, 3), 2));
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "strides", DIMS(2, 2), 2));
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "pads", DIMS(1, 1, 1, 1), 4));
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "ceil_mode", 1));
}
static void attrs_avgpool_incl(kc *k) {
    attrs_avgpool(k);
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "count_include_pad", 1));
}
static void attrs_none(kc *k) { (void)k; }
static void attrs_lppool(kc *k) {
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "kernel_shape", DIMS(2, 2), 2));
    KT_OK(kiln_network_set_attr_ints(k->net, k->node, "strides", DIMS(2, 2), 2));
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "p", 2));
}

static void test_pool(void) {
    pool_case("maxpool ceil_mode + indices", "MaxPool", 12, 4, DIMS(1, 2, 5, 5), 31, 2,
              DIMS(1, 2, 3, 3), exp_maxpool_Y, (const int64_t *)exp_maxpool_I, attrs_maxpool);
    pool_case("maxpool storage_order=1", "MaxPool", 12, 4, DIMS(1, 1, 4, 3), 32, 2,
              DIMS(1, 1, 3, 2), exp_maxpool_so_Y, (const int64_t *)exp_maxpool_so_I,
              attrs_maxpool_so);
    pool_case("avgpool ceil_mode count_include_pad", "AveragePool", 19, 4, DIMS(1, 1, 5, 5), 33,
              1, DIMS(1, 1, 3, 3), exp_avgpool_Y, NULL, attrs_avgpool_incl);
    pool_case("avgpool ceil_mode excluding pads", "AveragePool", 19, 4, DIMS(1, 1, 5, 5), 33, 1,
              DIMS(1, 1, 3, 3), exp_avgpool_ex_Y, NULL, attrs_avgpool);
    /* global pools and LpPool by hand */
    float x[8];
    for (int i = 0; i < 8; i++)
        x[i] = kt_data_at(i, 34);
    float gavg[2] = {(x[0] + x[1] + x[2] + x[3]) / 4, (x[4] + x[5] + x[6] + x[7]) / 4};
    float gmax[2] = {fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3])),
                     fmaxf(fmaxf(x[4], x[5]), fmaxf(x[6], x[7]))};
    float glp[2] = {sqrtf(x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]),
                    sqrtf(x[4] * x[4] + x[5] * x[5] + x[6] * x[6] + x[7] * x[7])};
    pool_case("globalaveragepool", "GlobalAveragePool", 1, 4, DIMS(1, 2, 2, 2), 34, 1,
              DIMS(1, 2, 1, 1), gavg, NULL, attrs_none);
    pool_case("globalmaxpool", "GlobalMaxPool", 1, 4, DIMS(1, 2, 2, 2), 34, 1, DIMS(1, 2, 1, 1),
              gmax, NULL, attrs_none);
    pool_case("globallppool", "GlobalLpPool", 2, 4, DIMS(1, 2, 2, 2), 34, 1, DIMS(1, 2, 1, 1),
              glp, NULL, attrs_none);
    pool_case("lppool p=2", "LpPool", 18, 4, DIMS(1, 2, 2, 2), 34, 1, DIMS(1, 2, 1, 1), glp, NULL,
              attrs_lppool);
}

/* ---------------- normalization ---------------- */

static void test_batchnorm(void) {
    static const float x[4] = {1, 2, 3, 4}, sc[2] = {1, 2}, b[2] = {0, 1}, mean[2] = {1, 3},
                       var[2] = {4, 1};
    static const float want[4] = {0, 0.5f, 1, 3};
    for (int train = 0; train < 2; train++) {
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 1, 2), x);
        kc_const(&k, "S", KILN_DTYPE_FLOAT, 1, DIMS(2), sc);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 1, DIMS(2), b);
        kc_const(&k, "M", KILN_DTYPE_FLOAT, 1, DIMS(2), mean);
        kc_const(&k, "V", KILN_DTYPE_FLOAT, 1, DIMS(2), var);
        kc_node(&k, "BatchNormalization", "", 15, 5, NAMES("X", "S", "B", "M", "V"), 1,
                NAMES("Y"));
        KT_OK(kiln_network_set_attr_float(k.net, k.node, "epsilon", 0.f));
        if (train) { /* batch statistics: each channel's two values go to -1 and 1 */
            static const float want_t[4] = {-1, 1, -1, 3};
            KT_OK(kiln_network_set_attr_int(k.net, k.node, "training_mode", 1));
            KT_OK(kc_run(&k));
            expect_out(&k, 0, "batchnorm training", 4, DIMS(1, 2, 1, 2), want_t, 1e-5);
        } else {
            KT_OK(kc_run(&k));
            expect_out(&k, 0, "batchnorm", 4, DIMS(1, 2, 1, 2), want, 1e-6);
        }
        kc_free(&k);
    }
}

/* BatchNormalization opset 7 with spatial=0: statistics per activation. */
static void test_batchnorm_per_activation(void) {
    static const float x[4] = {1, 2, 3, 4}, sc[2] = {1, 2}, b[2] = {0, 1}, mean[2] = {1, 3},
                       var[2] = {4, 1};
    static const float want[4] = {0, -1, 1, 3}; /* element i of each sample uses index i */
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(2, 1, 2), x);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 2, DIMS(1, 2), sc);
    kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(1, 2), b);
    kc_const(&k, "M", KILN_DTYPE_FLOAT, 2, DIMS(1, 2), mean);
    kc_const(&k, "V", KILN_DTYPE_FLOAT, 2, DIMS(1, 2), var);
    kc_node(&k, "BatchNormalization", "", 7, 5, NAMES("X", "S", "B", "M", "V"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "spatial", 0));
    KT_OK(kiln_network_set_attr_float(k.net, k.node, "epsilon", 0.f));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "batchnorm spatial=0", 3, DIMS(2, 1, 2), want, 1e-6);
    kc_free(&k);
}

/* A single-input op compared with an ONNX Runtime result; extra constant
 * inputs come as (name, rank, dims, seed). */
typedef struct cin {
    const char *name;
    int rank;
    int64_t dims[4];
    int seed;
} cin;

static void ort_case(const char *what, const char *op, int opset, int xrank, const int64_t *xd,
                     int seed, int n_const, const cin *consts, int n_out, const float *const *want,
                     const int *wrank, const int64_t (*wdims)[4], void (*attrs)(kc *)) {
    float *x = kt_data(kn_numel(xrank, xd), seed, 1.f);
    float *cd[4];
    const char *ins[5] = {"X"};
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, xrank, xd, x);
    for (int i = 0; i < n_const; i++) {
        cd[i] = kt_data(kn_numel(consts[i].rank, consts[i].dims), consts[i].seed, 1.f);
        kc_const(&k, consts[i].name, KILN_DTYPE_FLOAT, consts[i].rank, consts[i].dims, cd[i]);
        ins[i + 1] = consts[i].name;
    }
    kc_node(&k, op, "", opset, 1 + n_const, ins, n_out, NAMES("Y", "O1", "O2"));
    attrs(&k);
    KT_OK(kc_run(&k));
    for (int i = 0; i < n_out; i++)
        expect_out(&k, i, what, wrank[i], wdims[i], want[i], 1e-5);
    if (n_out == 1)
        cross_tactics(&k, what, wrank[0], wdims[0], want[0], 1e-4);
    kc_free(&k);
    free(x);
    for (int i = 0; i < n_const; i++)
        free(cd[i]);
}

static void attrs_layernorm(kc *k) {
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "axis", 1));
    KT_OK(kiln_network_set_attr_float(k->net, k->node, "epsilon", 1e-3f));
}
static void attrs_rmsnorm(kc *k) {
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "axis", -2));
    KT_OK(kiln_network_set_attr_float(k->net, k->node, "epsilon", 1e-3f));
}
static void attrs_groupnorm(kc *k) {
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "num_groups", 2));
}
static void attrs_lrn(kc *k) {
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "size", 3));
    KT_OK(kiln_network_set_attr_float(k->net, k->node, "alpha", 0.1f));
    KT_OK(kiln_network_set_attr_float(k->net, k->node, "beta", 0.6f));
    KT_OK(kiln_network_set_attr_float(k->net, k->node, "bias", 1.5f));
}
static void attrs_lpnorm(kc *k) {
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "axis", 1));
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "p", 1));
}
static void attrs_instnorm(kc *k) {
    KT_OK(kiln_network_set_attr_float(k->net, k->node, "epsilon", 1e-2f));
}

static void test_norms(void) {
    {
        const cin c[2] = {{"S", 2, {3, 4}, 42}, {"B", 1, {4}, 43}};
        const float *w[3] = {exp_layernorm_Y, exp_layernorm_M, exp_layernorm_R};
        const int r[3] = {3, 3, 3};
        const int64_t d[3][4] = {{2, 3, 4}, {2, 1, 1}, {2, 1, 1}};
        ort_case("layernorm axis=1 with Mean/InvStdDev", "LayerNormalization", 17, 3,
                 DIMS(2, 3, 4), 41, 2, c, 3, w, r, d, attrs_layernorm);
    }
    {
        const cin c[1] = {{"S", 2, {3, 4}, 45}};
        const float *w[1] = {exp_rmsnorm_Y};
        const int r[1] = {3};
        const int64_t d[1][4] = {{2, 3, 4}};
        ort_case("rmsnorm axis=-2", "RMSNormalization", 23, 3, DIMS(2, 3, 4), 44, 1, c, 1, w, r,
                 d, attrs_rmsnorm);
    }
    {
        const cin c[2] = {{"S", 1, {4}, 52}, {"B", 1, {4}, 53}};
        const float *w[1] = {exp_groupnorm_Y};
        const int r[1] = {3};
        const int64_t d[1][4] = {{2, 4, 3}};
        ort_case("groupnorm", "GroupNormalization", 21, 3, DIMS(2, 4, 3), 51, 2, c, 1, w, r, d,
                 attrs_groupnorm);
    }
    {
        const cin c[2] = {{"S", 1, {3}, 65}, {"B", 1, {3}, 66}};
        const float *w[1] = {exp_instnorm_Y};
        const int r[1] = {3};
        const int64_t d[1][4] = {{2, 3, 4}};
        ort_case("instancenorm", "InstanceNormalization", 6, 3, DIMS(2, 3, 4), 64, 2, c, 1, w, r,
                 d, attrs_instnorm);
    }
    {
        const float *w[1] = {exp_lrn_Y};
        const int r[1] = {4};
        const int64_t d[1][4] = {{1, 5, 2, 2}};
        ort_case("lrn", "LRN", 13, 4, DIMS(1, 5, 2, 2), 61, 0, NULL, 1, w, r, d, attrs_lrn);
    }
    {
        const float *w[1] = {exp_mvn_Y};
        const int r[1] = {4};
        const int64_t d[1][4] = {{2, 3, 2, 2}};
        ort_case("mvn", "MeanVarianceNormalization", 13, 4, DIMS(2, 3, 2, 2), 62, 0, NULL, 1, w,
                 r, d, attrs_none);
    }
    {
        const float *w[1] = {exp_lpnorm_Y};
        const int r[1] = {3};
        const int64_t d[1][4] = {{2, 3, 2}};
        ort_case("lpnorm p=1", "LpNormalization", 1, 3, DIMS(2, 3, 2), 63, 0, NULL, 1, w, r, d,
                 attrs_lpnorm);
    }
}

/* kiln::LayerNorm: rows gathered from a table by ids (one negative) plus a
 * per-position table and a bias row, against values worked out here; the
 * same without the gather on a residual; and the inputs it refuses. */
static void test_layernorm_fused(void) {
    /* table [4, 4], ids [2, 2], pos [2, 4] (a suffix of Y [2, 2, 4]), row [4] */
    static const float table[16] = {1, 2, 3, 4, 0, 0, 0, 8, -1, 1, -1, 1, 2, 2, 2, 2};
    static const float pos[8] = {0, 1, 0, 1, 1, 0, 1, 0}, row[4] = {0.5f, 0, 0, -0.5f};
    static const float scale[4] = {1, 2, 1, 0.5f}, bias[4] = {0, 0, 1, 0};
    static const int64_t ids[4] = {0, -1, 2, 1}; /* -1: the table's last row */
    float want[16];
    for (int r = 0; r < 4; r++) {
        int64_t src = ids[r] < 0 ? ids[r] + 4 : ids[r];
        double v[4], m = 0, q = 0;
        for (int j = 0; j < 4; j++) {
            v[j] = table[src * 4 + j] + pos[(r % 2) * 4 + j] + row[j];
            m += v[j] / 4;
        }
        for (int j = 0; j < 4; j++)
            q += (v[j] - m) * (v[j] - m) / 4;
        for (int j = 0; j < 4; j++)
            want[r * 4 + j] = (float)((v[j] - m) / sqrt(q + 1e-5) * scale[j] + bias[j]);
    }
    kc k;
    kc_new(&k);
    kc_input(&k, "ids", KILN_DTYPE_INT64, 2, DIMS(2, 2), ids);
    kc_const(&k, "table", KILN_DTYPE_FLOAT, 2, DIMS(4, 4), table);
    kc_const(&k, "scale", KILN_DTYPE_FLOAT, 1, DIMS(4), scale);
    kc_const(&k, "bias", KILN_DTYPE_FLOAT, 1, DIMS(4), bias);
    kc_const(&k, "pos", KILN_DTYPE_FLOAT, 2, DIMS(2, 4), pos);
    kc_const(&k, "row", KILN_DTYPE_FLOAT, 1, DIMS(4), row);
    kc_node(&k, "LayerNorm", "kiln", 1, 6, NAMES("table", "scale", "bias", "ids", "pos", "row"), 1,
            NAMES("y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "gather", 1));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "kiln::LayerNorm gather", 3, DIMS(2, 2, 4), want, 1e-5);
    kc_free(&k);

    /* no gather: the rows of X plus a full-shape residual, no bias */
    static const float x[8] = {1, 2, 3, 4, 4, 3, 2, 1}, z[8] = {1, 1, 1, 1, 0, 0, 0, 4};
    float want2[8];
    for (int r = 0; r < 2; r++) {
        double v[4], m = 0, q = 0;
        for (int j = 0; j < 4; j++)
            m += (v[j] = x[r * 4 + j] + z[r * 4 + j]) / 4;
        for (int j = 0; j < 4; j++)
            q += (v[j] - m) * (v[j] - m) / 4;
        for (int j = 0; j < 4; j++)
            want2[r * 4 + j] = (float)((v[j] - m) / sqrt(q + 1e-3) * scale[j]);
    }
    kc_new(&k);
    kc_input(&k, "x", KILN_DTYPE_FLOAT, 2, DIMS(2, 4), x);
    kc_input(&k, "z", KILN_DTYPE_FLOAT, 2, DIMS(2, 4), z);
    kc_const(&k, "scale", KILN_DTYPE_FLOAT, 1, DIMS(4), scale);
    kc_node(&k, "LayerNorm", "kiln", 1, 5, NAMES("x", "scale", "", "", "z"), 1, NAMES("y"));
    KT_OK(kiln_network_set_attr_float(k.net, k.node, "epsilon", 1e-3f));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "kiln::LayerNorm residual", 2, DIMS(2, 4), want2, 1e-5);
    kc_free(&k);

    /* refused: an addend that is not a suffix of Y's shape, Ids without
     * gather, gather without Ids, float ids, an id past the table */
    static const float bad_add[2] = {1, 2};
    static const float fids[4] = {0, 1, 2, 3};
    static const int64_t far[4] = {0, 1, 4, 1};
    for (int c = 0; c < 5; c++) {
        kc_new(&k);
        kc_const(&k, "table", KILN_DTYPE_FLOAT, 2, DIMS(4, 4), table);
        kc_const(&k, "scale", KILN_DTYPE_FLOAT, 1, DIMS(4), scale);
        if (c == 3)
            kc_input(&k, "ids", KILN_DTYPE_FLOAT, 2, DIMS(2, 2), fids);
        else
            kc_input(&k, "ids", KILN_DTYPE_INT64, 2, DIMS(2, 2), c == 4 ? far : ids);
        kc_const(&k, "bad", KILN_DTYPE_FLOAT, 1, DIMS(2), bad_add);
        if (c == 0)
            kc_node(&k, "LayerNorm", "kiln", 1, 5, NAMES("table", "scale", "", "ids", "bad"), 1, NAMES("y"));
        else if (c == 2)
            kc_node(&k, "LayerNorm", "kiln", 1, 2, NAMES("table", "scale"), 1, NAMES("y"));
        else
            kc_node(&k, "LayerNorm", "kiln", 1, 4, NAMES("table", "scale", "", "ids"), 1, NAMES("y"));
        if (c != 1)
            KT_OK(kiln_network_set_attr_int(k.net, k.node, "gather", 1));
        static const char *const why[5] = {"suffix of Y's shape", "Ids given without gather",
                                           "gather takes a [V, H] table and Ids",
                                           "Ids must be int32 or int64", "outside the table"};
        KT_FAILS(kc_run(&k), c == 3 ? KILN_ERR_UNSUPPORTED : c == 4 ? KILN_ERR_INVALID_ARGUMENT : KILN_ERR_SHAPE,
                 why[c]);
        kc_free(&k);
    }
}

/* ---------------- Gemm, MatMul, Einsum ---------------- */

static void test_gemm(void) {
    static const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
    static const float c_scalar[1] = {10}, c_col[2] = {1, 2};
    static const float want_scalar[4] = {14, 15, 20, 21}, want_col[4] = {5, 6, 12, 13};
    for (int v = 0; v < 2; v++) {
        kc k;
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(2, 3), a);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(3, 2), b);
        if (v == 0)
            kc_const(&k, "C", KILN_DTYPE_FLOAT, 0, DIMS(0), c_scalar);
        else
            kc_const(&k, "C", KILN_DTYPE_FLOAT, 2, DIMS(2, 1), c_col);
        kc_node(&k, "Gemm", "", 13, 3, NAMES("A", "B", "C"), 1, NAMES("Y"));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, v ? "gemm column C" : "gemm scalar C", 2, DIMS(2, 2),
                   v ? want_col : want_scalar, 0);
        kc_free(&k);
    }
    /* ONNX Runtime: transA, transB, alpha, beta, vector C */
    float *A = kt_data(12, 81, 1.f), *B = kt_data(20, 82, 1.f), *C = kt_data(5, 83, 1.f);
    kc k;
    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(4, 3), A);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(5, 4), B);
    kc_const(&k, "C", KILN_DTYPE_FLOAT, 1, DIMS(5), C);
    kc_node(&k, "Gemm", "", 13, 3, NAMES("A", "B", "C"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "transA", 1));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "transB", 1));
    KT_OK(kiln_network_set_attr_float(k.net, k.node, "alpha", 0.5f));
    KT_OK(kiln_network_set_attr_float(k.net, k.node, "beta", 2.f));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "gemm transA transB alpha beta", 2, DIMS(3, 5), exp_gemm_Y, 1e-5);
    cross_tactics(&k, "gemm transA transB alpha beta", 2, DIMS(3, 5), exp_gemm_Y, 1e-4);
    kc_free(&k);
    free(A), free(B), free(C);
}

/* Naive numpy matmul for the oracle (ranks >= 2 here, batch broadcast). */
static void matmul_oracle(int ra, const int64_t *da, const float *a, int rb, const int64_t *db,
                          const float *b, int ry, const int64_t *dy, float *y) {
    int64_t m = dy[ry - 2], n = dy[ry - 1], kk = da[ra - 1];
    int64_t batches = kn_numel(ry - 2, dy);
    for (int64_t bi = 0; bi < batches; bi++) {
        int64_t coord[8], rest = bi, ao = 0, bo = 0;
        for (int d = ry - 3; d >= 0; d--) {
            coord[d] = rest % dy[d];
            rest /= dy[d];
        }
        for (int d = 0; d < ra - 2; d++)
            ao = ao * da[d] + (da[d] == 1 ? 0 : coord[ry - ra + d]);
        for (int d = 0; d < rb - 2; d++)
            bo = bo * db[d] + (db[d] == 1 ? 0 : coord[ry - rb + d]);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < kk; p++)
                    s += (double)a[ao * m * kk + i * kk + p] * b[bo * kk * n + p * n + j];
                y[(bi * m + i) * n + j] = (float)s;
            }
    }
}

static void matmul_case(const char *what, int ra, const int64_t *da, int rb, const int64_t *db,
                        int ry, const int64_t *dy, const float *want_given) {
    float *a = kt_data(kn_numel(ra, da), 5, 1.f), *b = kt_data(kn_numel(rb, db), 6, 1.f);
    float *want = malloc(sizeof(float) * (size_t)kn_numel(ry, dy));
    if (want_given)
        memcpy(want, want_given, sizeof(float) * (size_t)kn_numel(ry, dy));
    else
        matmul_oracle(ra, da, a, rb, db, b, ry, dy, want);
    kc k;
    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_FLOAT, ra, da, a);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, rb, db, b);
    kc_node(&k, "MatMul", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, what, ry, dy, want, 1e-4);
    cross_tactics(&k, what, ry, dy, want, 1e-3);
    kc_free(&k);
    free(a), free(b), free(want);
}

static void test_matmul(void) {
    matmul_case("matmul 2d", 2, DIMS(3, 4), 2, DIMS(4, 5), 2, DIMS(3, 5), NULL);
    matmul_case("matmul batch broadcast", 4, DIMS(2, 1, 3, 4), 3, DIMS(3, 4, 5), 4,
                DIMS(2, 3, 3, 5), NULL);
    matmul_case("matmul batch broadcast rhs", 2, DIMS(3, 4), 3, DIMS(2, 4, 5), 3, DIMS(2, 3, 5),
                NULL);
    matmul_case("matmul large (tiles, k blocks)", 2, DIMS(70, 300), 2, DIMS(300, 270), 2,
                DIMS(70, 270), NULL);
    /* 1-D operands: a vector on the left drops m, on the right drops n */
    float a[4], b[24];
    for (int i = 0; i < 4; i++)
        a[i] = kt_data_at(i, 5);
    for (int i = 0; i < 24; i++)
        b[i] = kt_data_at(i, 6);
    float want_l[6], want_r[6];
    for (int bi = 0; bi < 2; bi++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int p = 0; p < 4; p++)
                s += (double)a[p] * b[bi * 12 + p * 3 + j];
            want_l[bi * 3 + j] = (float)s;
        }
    matmul_case("matmul vector @ batch", 1, DIMS(4), 3, DIMS(2, 4, 3), 2, DIMS(2, 3), want_l);
    /* batch [2,3,4] @ vector [4]: a is seed 5 (24 values), b is seed 6 (4 values) */
    for (int i = 0; i < 6; i++) {
        double s = 0;
        for (int p = 0; p < 4; p++)
            s += (double)kt_data_at(i * 4 + p, 5) * kt_data_at(p, 6);
        want_r[i] = (float)s;
    }
    matmul_case("matmul batch @ vector", 3, DIMS(2, 3, 4), 1, DIMS(4), 2, DIMS(2, 3), want_r);
}

/* float16 MatMul and Gemm run on float copies: compare with float on the
 * same (rounded) values. */
static void test_matmul_half(void) {
    float *a = kt_data(2 * 3 * 4, 41, 1.f), *b = kt_data(4 * 5, 42, 1.f), *c = kt_data(5, 43, 1.f);
    uint16_t ah[24], bh[20], ch[5];
    for (int i = 0; i < 24; i++)
        a[i] = kn_half_to_float(ah[i] = kn_float_to_half(a[i]));
    for (int i = 0; i < 20; i++)
        b[i] = kn_half_to_float(bh[i] = kn_float_to_half(b[i]));
    for (int i = 0; i < 5; i++)
        c[i] = kn_half_to_float(ch[i] = kn_float_to_half(c[i]));
    for (int gemm = 0; gemm < 2; gemm++) {
        float want[30], got[30];
        int n = gemm ? 15 : 30;
        for (int t = 0; t < 2; t++) {
            kiln_dtype dt = t ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT;
            kc k;
            kc_new(&k);
            if (gemm) {
                kc_input(&k, "A", dt, 2, DIMS(3, 4), t ? (const void *)ah : a);
                kc_const(&k, "B", dt, 2, DIMS(4, 5), t ? (const void *)bh : b);
                kc_const(&k, "C", dt, 1, DIMS(5), t ? (const void *)ch : c);
                kc_node(&k, "Gemm", "", 13, 3, NAMES("A", "B", "C"), 1, NAMES("Y"));
            } else {
                kc_input(&k, "A", dt, 3, DIMS(2, 3, 4), t ? (const void *)ah : a);
                kc_const(&k, "B", dt, 2, DIMS(4, 5), t ? (const void *)bh : b);
                kc_node(&k, "MatMul", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
            }
            KT_OK(kc_run(&k));
            kn_tinfo ti;
            const void *y = kc_out(&k, 0, &ti);
            KT_CHECK(ti.dtype == dt);
            for (int i = 0; i < n; i++)
                (t ? got : want)[i] = t ? kn_half_to_float(((const uint16_t *)y)[i])
                                        : ((const float *)y)[i];
            kc_free(&k);
        }
        check_close(gemm ? "gemm float16" : "matmul float16", got, want, n, 2e-3);
    }
    free(a), free(b), free(c);
}

/* Integer MatMul: exact sums. */
static void test_matmul_int(void) {
    static const int32_t a[6] = {1, -2, 3, 4, 5, -6}, b[6] = {7, 8, 9, 10, 11, 12};
    static const int32_t want[4] = {1 * 7 - 2 * 9 + 3 * 11, 1 * 8 - 2 * 10 + 3 * 12,
                                    4 * 7 + 5 * 9 - 6 * 11, 4 * 8 + 5 * 10 - 6 * 12};
    kc k;
    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_INT32, 2, DIMS(2, 3), a);
    kc_input(&k, "B", KILN_DTYPE_INT32, 2, DIMS(3, 2), b);
    kc_node(&k, "MatMul", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
    KT_OK(kc_run(&k));
    kn_tinfo ti;
    const int32_t *y = kc_out(&k, 0, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_INT32 && memcmp(y, want, sizeof want) == 0);
    kc_free(&k);
}

static void test_einsum(void) {
    struct {
        const char *what, *eq;
        int n_in, ra, rb;
        int64_t da[4], db[4];
        int sa, sb;
        int ry;
        int64_t dy[4];
        const float *want;
    } cases[] = {
        {"einsum ellipsis matmul", "...ij,...jk->...ik", 2, 4, 4, {2, 1, 2, 3}, {1, 3, 3, 4}, 91,
         92, 4, {2, 3, 2, 4}, exp_einsum_Y},
        {"einsum diagonal", "ii->i", 1, 2, 0, {3, 3}, {0}, 93, 0, 1, {3}, exp_einsum_diag_Y},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *a = kt_data(kn_numel(cases[c].ra, cases[c].da), cases[c].sa, 1.f);
        float *b = cases[c].n_in > 1 ? kt_data(kn_numel(cases[c].rb, cases[c].db), cases[c].sb, 1.f)
                                     : NULL;
        kc k;
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, cases[c].ra, cases[c].da, a);
        if (b)
            kc_input(&k, "B", KILN_DTYPE_FLOAT, cases[c].rb, cases[c].db, b);
        kc_node(&k, "Einsum", "", 12, cases[c].n_in, NAMES("A", "B"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "equation", cases[c].eq));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, cases[c].what, cases[c].ry, cases[c].dy, cases[c].want, 1e-5);
        kc_free(&k);
        free(a), free(b);
    }
    /* implicit output (alphabetical), double inputs: "ij" of a 2x3 is the identity,
     * "ji" transposes, "i,i" is an inner product (scalar) */
    static const double m[6] = {1, 2, 3, 4, 5, 6}, v[3] = {1, 2, 3};
    static const double want_t[6] = {1, 4, 2, 5, 3, 6};
    kc k;
    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_DOUBLE, 2, DIMS(2, 3), m);
    kc_node(&k, "Einsum", "", 12, 1, NAMES("A"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_string(k.net, k.node, "equation", "ji"));
    KT_OK(kc_run(&k));
    kn_tinfo ti;
    const double *y = kc_out(&k, 0, &ti);
    check_shape("einsum implicit transpose", &ti, 2, DIMS(3, 2));
    KT_CHECK(ti.dtype == KILN_DTYPE_DOUBLE && memcmp(y, want_t, sizeof want_t) == 0);
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_DOUBLE, 1, DIMS(3), v);
    kc_input(&k, "B", KILN_DTYPE_DOUBLE, 1, DIMS(3), v);
    kc_node(&k, "Einsum", "", 12, 2, NAMES("A", "B"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_string(k.net, k.node, "equation", "i,i"));
    KT_OK(kc_run(&k));
    y = kc_out(&k, 0, &ti);
    KT_CHECK(ti.rank == 0 && y[0] == 14.0);
    kc_free(&k);
}

/* ---------------- Dropout ---------------- */

static void test_dropout(void) {
    static const float x[5] = {1, -2, 3, -4, 5};
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 1, DIMS(5), x);
    kc_node(&k, "Dropout", "", 13, 1, NAMES("X"), 2, NAMES("Y", "M"));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "dropout identity", 1, DIMS(5), x, 0);
    kn_tinfo ti;
    const uint8_t *mask = kc_out(&k, 1, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_BOOL && mask[0] == 1 && mask[4] == 1);
    kc_free(&k);
    /* training with a non-zero ratio is refused; with ratio 0 it is the identity */
    for (int zero = 0; zero < 2; zero++) {
        const float ratio = zero ? 0.f : 0.5f;
        const uint8_t training = 1;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 1, DIMS(5), x);
        kc_const(&k, "R", KILN_DTYPE_FLOAT, 0, DIMS(0), &ratio);
        kc_const(&k, "T", KILN_DTYPE_BOOL, 0, DIMS(0), &training);
        kc_node(&k, "Dropout", "", 13, 3, NAMES("X", "R", "T"), 1, NAMES("Y"));
        if (zero) {
            KT_OK(kc_run(&k));
            expect_out(&k, 0, "dropout training ratio 0", 1, DIMS(5), x, 0);
        } else { /* each element dropped or doubled (unit.test_train_ops checks the draws) */
            KT_OK(kc_run(&k));
            const float *y = kc_out(&k, 0, NULL);
            for (int i = 0; y && i < 5; i++)
                KT_CHECK(y[i] == 0.f || y[i] == 2.f * x[i]);
        }
        kc_free(&k);
    }
}

/* ---------------- recurrent ---------------- */

/* A one-element list-of-strings attribute: the public API has no setter for
 * those (ONNX models bring them), so build it on the node directly. */
static void set_strings(kc *k, const char *name, const char *value) {
    KT_OK(kn_node_set_string(&k->net->nodes[k->node], name, value));
    kn_attr *a = (kn_attr *)kn_attr_find(&k->net->nodes[k->node], name);
    char **list = kn_malloc(sizeof *list);
    list[0] = a->s;
    a->s = NULL;
    a->s_len = 0;
    a->strings = list;
    a->n = 1;
    a->type = KN_ATTR_STRINGS;
}

/* A GRU of 4 steps, batch 2, input and hidden size 3 (dirs 1 or 2) on
 * kt_data inputs from `seed` on, against ONNX Runtime's outputs. */
static void gru_case(int dirs, int lbr, int seed, float r_scale, const float *want_y,
                     const float *want_yh) {
    float *X = kt_data(24, seed, 1.f), *W = kt_data(27 * dirs, seed + 1, 0.5f);
    float *R = kt_data(27 * dirs, seed + 2, r_scale), *B = kt_data(18 * dirs, seed + 3, 0.3f);
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(4, 2, 3), X);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 3, DIMS(dirs, 9, 3), W);
    kc_const(&k, "R", KILN_DTYPE_FLOAT, 3, DIMS(dirs, 9, 3), R);
    kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(dirs, 18), B);
    kc_node(&k, "GRU", "", 14, 4, NAMES("X", "W", "R", "B"), 2, NAMES("Y", "Yh"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "hidden_size", 3));
    if (dirs == 2)
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "direction", "bidirectional"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "linear_before_reset", lbr));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "gru Y", 4, DIMS(4, dirs, 2, 3), want_y, 1e-5);
    expect_out(&k, 1, "gru Y_h", 3, DIMS(dirs, 2, 3), want_yh, 1e-5);
    kc_free(&k);
    free(X), free(W), free(R), free(B);
}

static void test_recurrent(void) {
    /* LSTM: bidirectional, sequence lengths, initial states, peepholes */
    {
        float *X = kt_data(18, 1, 1.f), *W = kt_data(96, 2, 0.5f), *R = kt_data(128, 3, 0.5f);
        float *B = kt_data(64, 4, 0.3f), *H0 = kt_data(16, 5, 0.2f), *C0 = kt_data(16, 6, 0.2f);
        float *P = kt_data(24, 7, 0.3f);
        static const int32_t L[2] = {3, 2};
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(3, 2, 3), X);
        kc_const(&k, "W", KILN_DTYPE_FLOAT, 3, DIMS(2, 16, 3), W);
        kc_const(&k, "R", KILN_DTYPE_FLOAT, 3, DIMS(2, 16, 4), R);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(2, 32), B);
        kc_const(&k, "L", KILN_DTYPE_INT32, 1, DIMS(2), L);
        kc_const(&k, "H0", KILN_DTYPE_FLOAT, 3, DIMS(2, 2, 4), H0);
        kc_const(&k, "C0", KILN_DTYPE_FLOAT, 3, DIMS(2, 2, 4), C0);
        kc_const(&k, "P", KILN_DTYPE_FLOAT, 2, DIMS(2, 12), P);
        kc_node(&k, "LSTM", "", 14, 8, NAMES("X", "W", "R", "B", "L", "H0", "C0", "P"), 3,
                NAMES("Y", "Yh", "Yc"));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "hidden_size", 4));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "direction", "bidirectional"));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, "lstm Y", 4, DIMS(3, 2, 2, 4), exp_lstm_Y, 1e-5);
        expect_out(&k, 1, "lstm Y_h", 3, DIMS(2, 2, 4), exp_lstm_Yh, 1e-5);
        expect_out(&k, 2, "lstm Y_c", 3, DIMS(2, 2, 4), exp_lstm_Yc, 1e-5);
        kc_free(&k);
        free(X), free(W), free(R), free(B), free(H0), free(C0), free(P);
    }
    /* the same LSTM in double (float copies inside): the same results */
    {
        static const int64_t n[7] = {18, 96, 128, 64, 16, 16, 24};
        static const int seeds[7] = {1, 2, 3, 4, 5, 6, 7};
        static const float scales[7] = {1.f, 0.5f, 0.5f, 0.3f, 0.2f, 0.2f, 0.3f};
        double *d[7];
        for (int i = 0; i < 7; i++) {
            float *f = kt_data(n[i], seeds[i], scales[i]);
            d[i] = malloc(sizeof(double) * (size_t)n[i]);
            for (int64_t j = 0; j < n[i]; j++)
                d[i][j] = f[j];
            free(f);
        }
        static const int32_t L[2] = {3, 2};
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_DOUBLE, 3, DIMS(3, 2, 3), d[0]);
        kc_const(&k, "W", KILN_DTYPE_DOUBLE, 3, DIMS(2, 16, 3), d[1]);
        kc_const(&k, "R", KILN_DTYPE_DOUBLE, 3, DIMS(2, 16, 4), d[2]);
        kc_const(&k, "B", KILN_DTYPE_DOUBLE, 2, DIMS(2, 32), d[3]);
        kc_const(&k, "L", KILN_DTYPE_INT32, 1, DIMS(2), L);
        kc_const(&k, "H0", KILN_DTYPE_DOUBLE, 3, DIMS(2, 2, 4), d[4]);
        kc_const(&k, "C0", KILN_DTYPE_DOUBLE, 3, DIMS(2, 2, 4), d[5]);
        kc_const(&k, "P", KILN_DTYPE_DOUBLE, 2, DIMS(2, 12), d[6]);
        kc_node(&k, "LSTM", "", 14, 8, NAMES("X", "W", "R", "B", "L", "H0", "C0", "P"), 2,
                NAMES("Y", "Yh"));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "hidden_size", 4));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "direction", "bidirectional"));
        KT_OK(kc_run(&k));
        kn_tinfo ti;
        const double *y = kc_out(&k, 1, &ti);
        float yh[16];
        for (int i = 0; i < 16; i++)
            yh[i] = (float)y[i];
        KT_CHECK(ti.dtype == KILN_DTYPE_DOUBLE);
        check_close("lstm double Y_h", yh, exp_lstm_Yh, 16, 1e-5);
        kc_free(&k);
        for (int i = 0; i < 7; i++)
            free(d[i]);
    }
    /* GRU: bidirectional with linear_before_reset; forward with 0 (each
     * unit's reset gate scales its own h before the product with Rh) */
    gru_case(2, 1, 11, 0.5f, exp_gru_Y, exp_gru_Yh);
    gru_case(1, 0, 15, 0.8f, exp_gru0_Y, exp_gru0_Yh);
    /* RNN: reverse, Relu, initial state */
    {
        float *X = kt_data(12, 21, 1.f), *W = kt_data(6, 22, 1.f), *R = kt_data(9, 23, 0.5f);
        float *B = kt_data(6, 24, 0.3f), *H0 = kt_data(6, 25, 1.f);
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(3, 2, 2), X);
        kc_const(&k, "W", KILN_DTYPE_FLOAT, 3, DIMS(1, 3, 2), W);
        kc_const(&k, "R", KILN_DTYPE_FLOAT, 3, DIMS(1, 3, 3), R);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(1, 6), B);
        kc_const(&k, "H0", KILN_DTYPE_FLOAT, 3, DIMS(1, 2, 3), H0);
        kc_node(&k, "RNN", "", 14, 6, NAMES("X", "W", "R", "B", "", "H0"), 2, NAMES("Y", "Yh"));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "hidden_size", 3));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "direction", "reverse"));
        set_strings(&k, "activations", "Relu");
        KT_OK(kc_run(&k));
        expect_out(&k, 0, "rnn Y", 4, DIMS(3, 1, 2, 3), exp_rnn_Y, 1e-5);
        expect_out(&k, 1, "rnn Y_h", 3, DIMS(1, 2, 3), exp_rnn_Yh, 1e-5);
        kc_free(&k);
        free(X), free(W), free(R), free(B), free(H0);
    }
}

/* ---------------- Attention ---------------- */

static void test_attention(void) {
    /* 4-D, grouped-query heads, bool mask, causal after a past cache */
    {
        float *q = kt_data(120, 1, 1.f), *k = kt_data(80, 2, 1.f), *v = kt_data(48, 4, 1.f);
        float *pk = kt_data(40, 5, 1.f), *pv = kt_data(24, 6, 1.f);
        uint8_t mask[18];
        for (int i = 0; i < 18; i++)
            mask[i] = kt_data_at(i, 3) > -0.5f;
        kc k4;
        kc_new(&k4);
        kc_input(&k4, "Q", KILN_DTYPE_FLOAT, 4, DIMS(2, 4, 3, 5), q);
        kc_input(&k4, "K", KILN_DTYPE_FLOAT, 4, DIMS(2, 2, 4, 5), k);
        kc_input(&k4, "V", KILN_DTYPE_FLOAT, 4, DIMS(2, 2, 4, 3), v);
        kc_const(&k4, "M", KILN_DTYPE_BOOL, 2, DIMS(3, 6), mask);
        kc_input(&k4, "PK", KILN_DTYPE_FLOAT, 4, DIMS(2, 2, 2, 5), pk);
        kc_input(&k4, "PV", KILN_DTYPE_FLOAT, 4, DIMS(2, 2, 2, 3), pv);
        kc_node(&k4, "Attention", "", 23, 6, NAMES("Q", "K", "V", "M", "PK", "PV"), 4,
                NAMES("Y", "PKo", "PVo", "QK"));
        KT_OK(kiln_network_set_attr_int(k4.net, k4.node, "is_causal", 1));
        KT_OK(kiln_network_set_attr_int(k4.net, k4.node, "qk_matmul_output_mode", 3));
        KT_OK(kc_run(&k4));
        expect_out(&k4, 0, "attention 4-D Y", 4, DIMS(2, 4, 3, 3), exp_att4_Y, 1e-5);
        expect_out(&k4, 1, "attention present_key", 4, DIMS(2, 2, 6, 5), exp_att4_PKo, 0);
        expect_out(&k4, 2, "attention present_value", 4, DIMS(2, 2, 6, 3), exp_att4_PVo, 0);
        expect_out(&k4, 3, "attention softmax output", 4, DIMS(2, 4, 3, 6), exp_att4_QK, 1e-5);
        kc_free(&k4);
        free(q), free(k), free(v), free(pk), free(pv);
    }
    /* 3-D inputs split into heads, float mask, softcap, explicit scale */
    {
        float *q = kt_data(48, 11, 1.f), *k = kt_data(40, 12, 1.f), *v = kt_data(60, 13, 1.f);
        float *m = kt_data(15, 14, 1.f);
        kc k3;
        kc_new(&k3);
        kc_input(&k3, "Q", KILN_DTYPE_FLOAT, 3, DIMS(2, 3, 8), q);
        kc_input(&k3, "K", KILN_DTYPE_FLOAT, 3, DIMS(2, 5, 4), k);
        kc_input(&k3, "V", KILN_DTYPE_FLOAT, 3, DIMS(2, 5, 6), v);
        kc_const(&k3, "M", KILN_DTYPE_FLOAT, 3, DIMS(1, 3, 5), m);
        kc_node(&k3, "Attention", "", 23, 4, NAMES("Q", "K", "V", "M"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_int(k3.net, k3.node, "q_num_heads", 2));
        KT_OK(kiln_network_set_attr_int(k3.net, k3.node, "kv_num_heads", 1));
        KT_OK(kiln_network_set_attr_float(k3.net, k3.node, "softcap", 2.f));
        KT_OK(kiln_network_set_attr_float(k3.net, k3.node, "scale", 0.7f));
        KT_OK(kc_run(&k3));
        expect_out(&k3, 0, "attention 3-D Y", 3, DIMS(2, 3, 12), exp_att3_Y, 1e-5);
        kc_free(&k3);
        free(q), free(k), free(v), free(m);
    }
    /* float16 against float on the same rounded values, causal, 4-D */
    {
        float *q = kt_data(24, 15, 1.f), *k = kt_data(24, 16, 1.f), *v = kt_data(24, 17, 1.f);
        uint16_t qh[24], kh[24], vh[24];
        for (int i = 0; i < 24; i++) {
            q[i] = kn_half_to_float(qh[i] = kn_float_to_half(q[i]));
            k[i] = kn_half_to_float(kh[i] = kn_float_to_half(k[i]));
            v[i] = kn_half_to_float(vh[i] = kn_float_to_half(v[i]));
        }
        float res[2][24];
        for (int t = 0; t < 2; t++) {
            kiln_dtype dt = t ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT;
            kc kx;
            kc_new(&kx);
            kc_input(&kx, "Q", dt, 4, DIMS(1, 2, 3, 4), t ? (const void *)qh : q);
            kc_input(&kx, "K", dt, 4, DIMS(1, 2, 3, 4), t ? (const void *)kh : k);
            kc_input(&kx, "V", dt, 4, DIMS(1, 2, 3, 4), t ? (const void *)vh : v);
            kc_node(&kx, "Attention", "", 23, 3, NAMES("Q", "K", "V"), 1, NAMES("Y"));
            KT_OK(kiln_network_set_attr_int(kx.net, kx.node, "is_causal", 1));
            KT_OK(kc_run(&kx));
            kn_tinfo ti;
            const void *y = kc_out(&kx, 0, &ti);
            KT_CHECK(ti.dtype == dt);
            for (int i = 0; i < 24; i++)
                res[t][i] = t ? kn_half_to_float(((const uint16_t *)y)[i]) : ((const float *)y)[i];
            kc_free(&kx);
        }
        check_close("attention float16", res[1], res[0], 24, 2e-3);
        free(q), free(k), free(v);
    }
}

/* ---------------- fused ops: base op + epilogue ---------------- */

/* The activations of graph/fused.h, written out independently (ONNX forms). */
static float act_ref2(const char *act, float v, float alpha, float beta) {
    double x = v;
    if (strcmp(act, "Relu") == 0)
        return v > 0 ? v : 0;
    if (strcmp(act, "LeakyRelu") == 0)
        return v >= 0 ? v : alpha * v;
    if (strcmp(act, "Sigmoid") == 0)
        return (float)(1 / (1 + exp(-x)));
    if (strcmp(act, "Tanh") == 0)
        return (float)tanh(x);
    if (strcmp(act, "Clip") == 0)
        return v < alpha ? alpha : v > beta ? beta : v;
    if (strcmp(act, "HardSigmoid") == 0)
        return (float)fmax(0, fmin(1, alpha * x + beta));
    if (strcmp(act, "HardSwish") == 0)
        return (float)(x * fmax(0, fmin(1, x / 6 + 0.5)));
    if (strcmp(act, "Gelu") == 0)
        return (float)(0.5 * x * (1 + erf(x / sqrt(2))));
    if (strcmp(act, "GeluTanh") == 0)
        return (float)(0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))));
    if (strcmp(act, "Silu") == 0)
        return (float)(x / (1 + exp(-x)));
    if (strcmp(act, "Elu") == 0)
        return (float)(x >= 0 ? x : alpha * (exp(x) - 1));
    if (strcmp(act, "Softplus") == 0)
        return (float)log1p(exp(x));
    return v;
}

static float act_ref(const char *act, float v, float alpha) { return act_ref2(act, v, alpha, 0); }

/* Every activation name the fused ops accept, through kiln::MatMul. */
static void test_fused_activations(void) {
    static const struct {
        const char *name;
        float alpha, beta;
    } acts[] = {{"Relu", 0, 0},        {"LeakyRelu", 0.2f, 0},   {"Sigmoid", 0, 0},
                {"Tanh", 0, 0},        {"Clip", -0.5f, 0.75f},   {"HardSigmoid", 0.3f, 0.4f},
                {"HardSwish", 0, 0},   {"Gelu", 0, 0},           {"GeluTanh", 0, 0},
                {"Silu", 0, 0},        {"Elu", 0.7f, 0},         {"Softplus", 0, 0}};
    float *a = kt_data(6 * 4, 31, 2.f), *b = kt_data(4 * 5, 32, 2.f), base[30], want[30];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 5; j++) {
            double acc = 0;
            for (int p = 0; p < 4; p++)
                acc += (double)a[i * 4 + p] * b[p * 5 + j];
            base[i * 5 + j] = (float)acc;
        }
    for (size_t t = 0; t < sizeof acts / sizeof acts[0]; t++) {
        for (int i = 0; i < 30; i++)
            want[i] = act_ref2(acts[t].name, base[i], acts[t].alpha, acts[t].beta);
        kc k;
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(6, 4), a);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(4, 5), b);
        kc_node(&k, "MatMul", "kiln", 1, 2, NAMES("A", "B"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "activation", acts[t].name));
        KT_OK(kiln_network_set_attr_float(k.net, k.node, "alpha", acts[t].alpha));
        KT_OK(kiln_network_set_attr_float(k.net, k.node, "beta", acts[t].beta));
        KT_OK(kc_run(&k));
        char what[64];
        snprintf(what, sizeof what, "kiln::MatMul activation %s", acts[t].name);
        expect_out(&k, 0, what, 2, DIMS(6, 5), want, 1e-5);
        cross_tactics(&k, what, 2, DIMS(6, 5), want, 1e-4);
        kc_free(&k);
    }
    free(a), free(b);
}

static void test_fused_conv(void) {
    cgeo g = {2, 2, 4, 6, 2, {7, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, {0}};
    cgeo_finish(&g);
    int64_t xd[4], wd[4], yd[4];
    cgeo_dims(&g, xd, wd, yd);
    int64_t ny = kn_numel(4, yd);
    float *x = kt_data(kn_numel(4, xd), 1, 1.f), *w = kt_data(kn_numel(4, wd), 2, 0.5f);
    float *b = kt_data(6, 3, 1.f), *z = kt_data(ny, 4, 1.f);
    float *base = malloc(sizeof(float) * (size_t)ny), *want = malloc(sizeof(float) * (size_t)ny);
    conv_oracle(&g, x, w, NULL, base);
    const char *acts[] = {"Relu", "LeakyRelu", ""};
    for (int a = 0; a < 3; a++) {
        int64_t osz = ny / (g.n * g.cout);
        for (int64_t i = 0; i < ny; i++)
            want[i] = act_ref(acts[a], base[i] + b[(i / osz) % g.cout] + z[i], 0.1f);
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, xd, x);
        kc_const(&k, "W", KILN_DTYPE_FLOAT, 4, wd, w);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 1, DIMS(6), b);
        kc_input(&k, "Z", KILN_DTYPE_FLOAT, 4, yd, z);
        kc_node(&k, "Conv", "kiln", 1, 4, NAMES("X", "W", "B", "Z"), 1, NAMES("Y"));
        conv_set_attrs(&k, &g);
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "activation", acts[a]));
        if (a == 1)
            KT_OK(kiln_network_set_attr_float(k.net, k.node, "alpha", 0.1f));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, "kiln::Conv vs conv + bias + Z + act", 4, yd, want, 1e-4);
        cross_tactics(&k, "kiln::Conv", 4, yd, want, 1e-3);
        kc_free(&k);
    }
    /* an unknown activation is refused, naming the node */
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, xd, x);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 4, wd, w);
    kc_node(&k, "Conv", "kiln", 1, 2, NAMES("X", "W"), 1, NAMES("Y"));
    conv_set_attrs(&k, &g);
    KT_OK(kiln_network_set_attr_string(k.net, k.node, "activation", "Wobble"));
    KT_FAILS(kc_run(&k), KILN_ERR_UNSUPPORTED, "unknown activation 'Wobble'");
    kc_free(&k);
    free(x), free(w), free(b), free(z), free(base), free(want);
}

/* kiln::Conv in float16 and kiln::MatMul in double against the float results. */
static void test_fused_types(void) {
    static const int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, yd[4] = {1, 3, 5, 5};
    float *x = kt_data(50, 1, 1.f), *w = kt_data(54, 2, 0.5f), *b = kt_data(3, 3, 1.f);
    float *z = kt_data(75, 4, 1.f);
    uint16_t xh[50], wh[54], bh[3], zh[75];
    for (int i = 0; i < 50; i++) x[i] = kn_half_to_float(xh[i] = kn_float_to_half(x[i]));
    for (int i = 0; i < 54; i++) w[i] = kn_half_to_float(wh[i] = kn_float_to_half(w[i]));
    for (int i = 0; i < 3; i++) b[i] = kn_half_to_float(bh[i] = kn_float_to_half(b[i]));
    for (int i = 0; i < 75; i++) z[i] = kn_half_to_float(zh[i] = kn_float_to_half(z[i]));
    float ref[75], got[75];
    for (int t = 0; t < 2; t++) {
        kiln_dtype dt = t ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT;
        kc k;
        kc_new(&k);
        kc_input(&k, "X", dt, 4, xd, t ? (const void *)xh : x);
        kc_const(&k, "W", dt, 4, wd, t ? (const void *)wh : w);
        kc_const(&k, "B", dt, 1, DIMS(3), t ? (const void *)bh : b);
        kc_input(&k, "Z", dt, 4, yd, t ? (const void *)zh : z);
        kc_node(&k, "Conv", "kiln", 1, 4, NAMES("X", "W", "B", "Z"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "pads", DIMS(1, 1, 1, 1), 4));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "activation", "Relu"));
        KT_OK(kc_run(&k));
        kn_tinfo ti;
        const void *y = kc_out(&k, 0, &ti);
        KT_CHECK(ti.dtype == dt);
        for (int i = 0; i < 75; i++)
            (t ? got : ref)[i] = t ? kn_half_to_float(((const uint16_t *)y)[i]) : ((const float *)y)[i];
        kc_free(&k);
    }
    check_close("kiln::Conv float16", got, ref, 75, 2e-3);
    static const double a[6] = {1, 2, 3, 4, 5, 6}, bm[6] = {1, -1, 2, 0, 0.5, 3}, bias[2] = {10, -20};
    static const double want[4] = {1 + 4 + 1.5 + 10, -1 + 0 + 9 - 20, 4 + 10 + 3 + 10,
                                   -4 + 0 + 18 - 20};
    kc k;
    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_DOUBLE, 2, DIMS(2, 3), a);
    kc_const(&k, "B", KILN_DTYPE_DOUBLE, 2, DIMS(3, 2), bm);
    kc_const(&k, "C", KILN_DTYPE_DOUBLE, 1, DIMS(2), bias);
    kc_node(&k, "MatMul", "kiln", 1, 3, NAMES("A", "B", "C"), 1, NAMES("Y"));
    KT_OK(kc_run(&k));
    kn_tinfo ti;
    const double *y = kc_out(&k, 0, &ti);
    KT_CHECK(ti.dtype == KILN_DTYPE_DOUBLE && memcmp(y, want, sizeof want) == 0);
    kc_free(&k);
    free(x), free(w), free(b), free(z);
}

/* Run base (ONNX op) and fused (kiln op) on the same inputs; compare
 * fused with act(base + bias). */
static void test_fused_gemm_matmul(void) {
    float *a = kt_data(4 * 5, 1, 1.f), *b = kt_data(5 * 3, 2, 1.f), *c = kt_data(3, 3, 1.f);
    for (int fused_mm = 0; fused_mm < 2; fused_mm++) {
        float base[12], want[12];
        kc k;
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(4, 5), a);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(5, 3), b);
        kc_const(&k, "C", KILN_DTYPE_FLOAT, 1, DIMS(3), c);
        kc_node(&k, fused_mm ? "MatMul" : "Gemm", "", 13, fused_mm ? 2 : 3, NAMES("A", "B", "C"),
                1, NAMES("Y"));
        KT_OK(kc_run(&k));
        memcpy(base, kc_out(&k, 0, NULL), sizeof base);
        kc_free(&k);
        const char *act = fused_mm ? "Tanh" : "Sigmoid";
        for (int i = 0; i < 12; i++)
            want[i] = act_ref(act, base[i] + (fused_mm ? c[i % 3] : 0.f), 0);
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(4, 5), a);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(5, 3), b);
        kc_const(&k, "C", KILN_DTYPE_FLOAT, 1, DIMS(3), c);
        kc_node(&k, fused_mm ? "MatMul" : "Gemm", "kiln", 1, 3, NAMES("A", "B", "C"), 1,
                NAMES("Y"));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "activation", act));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, fused_mm ? "kiln::MatMul vs MatMul + bias + Tanh"
                                   : "kiln::Gemm vs Gemm + Sigmoid",
                   2, DIMS(4, 3), want, 1e-5);
        cross_tactics(&k, fused_mm ? "kiln::MatMul" : "kiln::Gemm", 2, DIMS(4, 3), want, 1e-4);
        kc_free(&k);
    }
    /* kiln::MatMul with a [4, 1] bias: the general broadcast path */
    {
        float base[12], want[12], bias[4] = {1, -1, 2, -2};
        kc k;
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(4, 5), a);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(5, 3), b);
        kc_node(&k, "MatMul", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
        KT_OK(kc_run(&k));
        memcpy(base, kc_out(&k, 0, NULL), sizeof base);
        kc_free(&k);
        for (int i = 0; i < 12; i++)
            want[i] = act_ref("Relu", base[i] + bias[i / 3], 0);
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(4, 5), a);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(5, 3), b);
        kc_const(&k, "C", KILN_DTYPE_FLOAT, 2, DIMS(4, 1), bias);
        kc_node(&k, "MatMul", "kiln", 1, 3, NAMES("A", "B", "C"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, "activation", "Relu"));
        KT_OK(kc_run(&k));
        expect_out(&k, 0, "kiln::MatMul column bias", 2, DIMS(4, 3), want, 1e-5);
        cross_tactics(&k, "kiln::MatMul column bias", 2, DIMS(4, 3), want, 1e-4);
        kc_free(&k);
    }
    free(a), free(b), free(c);
}

/* ---------------- random geometries against the oracles ---------------- */

static uint32_t rng_state = 20261130u;
static int rnd(int lo, int hi) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return lo + (int)((rng_state >> 8) % (uint32_t)(hi - lo + 1));
}

static void test_conv_random(void) {
    static const char *const pads[] = {NULL, NULL, "SAME_UPPER", "SAME_LOWER", "VALID"};
    int done = 0;
    while (done < 60) {
        cgeo g;
        memset(&g, 0, sizeof g);
        g.nsp = rnd(1, 3);
        int gk = rnd(0, 2);
        int64_t cin_g = rnd(1, 3), cout_g = rnd(1, 3);
        g.group = gk == 0 ? 1 : gk == 1 ? 2 : rnd(2, 5); /* the last: depthwise-like */
        if (gk == 2)
            cin_g = 1;
        g.n = rnd(1, 2);
        g.cin = cin_g * g.group;
        g.cout = cout_g * g.group;
        g.auto_pad = pads[rnd(0, 4)];
        bool ok = true;
        for (int i = 0; i < g.nsp; i++) {
            g.in[i] = rnd(1, g.nsp == 3 ? 5 : 8);
            g.k[i] = rnd(1, 3);
            g.s[i] = rnd(1, 3);
            g.d[i] = rnd(1, 2);
            g.p0[i] = rnd(0, 2);
            g.p1[i] = rnd(0, 2);
            int64_t ek = (g.k[i] - 1) * g.d[i] + 1;
            int64_t padded = g.in[i] + (g.auto_pad ? 0 : g.p0[i] + g.p1[i]);
            if ((!g.auto_pad || strcmp(g.auto_pad, "VALID") == 0) && padded < ek)
                ok = false;
        }
        if (!ok)
            continue;
        char what[96];
        snprintf(what, sizeof what, "random conv %d (%dD, group %lld, %s)", done, g.nsp,
                 (long long)g.group, g.auto_pad ? g.auto_pad : "pads");
        conv_case(what, g, rnd(0, 1) == 1);
        done++;
    }
}

/* ConvTranspose by scattering each input value through the kernel. */
static void convt_oracle(const cgeo *g, const int64_t *out, const float *x, const float *w,
                         const float *b, float *y) {
    int64_t cig = g->cin / g->group, cog = g->cout / g->group;
    int64_t isz = g->in[0] * g->in[1] * g->in[2], osz = out[0] * out[1] * out[2];
    int64_t ksz = g->k[0] * g->k[1] * g->k[2];
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t co = 0; co < g->cout; co++)
            for (int64_t o = 0; o < osz; o++)
                y[(n * g->cout + co) * osz + o] = b ? b[co] : 0.f;
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t ci = 0; ci < g->cin; ci++)
            for (int64_t i0 = 0; i0 < g->in[0]; i0++)
                for (int64_t i1 = 0; i1 < g->in[1]; i1++)
                    for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
                        float xv = x[(n * g->cin + ci) * isz + (i0 * g->in[1] + i1) * g->in[2] + i2];
                        int64_t grp = ci / cig;
                        for (int64_t cj = 0; cj < cog; cj++)
                            for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                                for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                                    for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                                        int64_t o0 = i0 * g->s[0] - g->p0[0] + k0 * g->d[0];
                                        int64_t o1 = i1 * g->s[1] - g->p0[1] + k1 * g->d[1];
                                        int64_t o2 = i2 * g->s[2] - g->p0[2] + k2 * g->d[2];
                                        if (o0 < 0 || o0 >= out[0] || o1 < 0 || o1 >= out[1] ||
                                            o2 < 0 || o2 >= out[2])
                                            continue;
                                        int64_t co = grp * cog + cj;
                                        y[(n * g->cout + co) * osz + (o0 * out[1] + o1) * out[2] + o2] +=
                                            xv * w[(ci * cog + cj) * ksz + (k0 * g->k[1] + k1) * g->k[2] + k2];
                                    }
                    }
}

/* Input positions in chunks (16 * 9 x 32400 floats > KB_CONV_COL_FLOATS). */
static void test_conv_transpose_chunked(void) {
    cgeo g = {2, 1, 2, 16, 1, {180, 180, 1}, {3, 3, 1}, {2, 2, 1}, {1, 1, 1}, {0}, {0}, NULL, {0}};
    int64_t out[3] = {361, 361, 1};
    int64_t xd[4] = {1, 2, 180, 180}, wd[4] = {2, 16, 3, 3}, yd[4] = {1, 16, 361, 361};
    int64_t nx = kn_numel(4, xd), nw = kn_numel(4, wd), ny = kn_numel(4, yd);
    float *x = kt_data(nx, 7, 1.f), *w = kt_data(nw, 8, 0.5f);
    float *want = malloc(sizeof(float) * (size_t)ny);
    convt_oracle(&g, out, x, w, NULL, want);
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, xd, x);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 4, wd, w);
    kc_node(&k, "ConvTranspose", "", 11, 2, NAMES("X", "W"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_ints(k.net, k.node, "strides", DIMS(2, 2), 2));
    KT_OK(kc_run(&k));
    expect_out(&k, 0, "convtranspose in chunks", 4, yd, want, 1e-4);
    kc_free(&k);
    free(x), free(w), free(want);
}

static void test_conv_transpose_random(void) {
    int done = 0;
    while (done < 30) {
        cgeo g;
        memset(&g, 0, sizeof g);
        g.nsp = rnd(1, 3);
        g.group = rnd(1, 2);
        g.cin = rnd(1, 3) * g.group;
        g.cout = rnd(1, 3) * g.group;
        g.n = rnd(1, 2);
        int64_t op[3] = {0, 0, 0}, out[3] = {1, 1, 1};
        bool ok = true;
        for (int i = 0; i < 3; i++) {
            if (i >= g.nsp) {
                g.in[i] = g.k[i] = g.s[i] = g.d[i] = 1;
                continue;
            }
            g.in[i] = rnd(1, g.nsp == 3 ? 4 : 6);
            g.k[i] = rnd(1, 3);
            g.s[i] = rnd(1, 3);
            g.d[i] = rnd(1, 2);
            g.p0[i] = rnd(0, 2);
            g.p1[i] = rnd(0, 2);
            int64_t lim = g.s[i] > g.d[i] ? g.s[i] : g.d[i]; /* output_padding < stride or dilation */
            op[i] = rnd(0, (int)lim - 1);
            out[i] = g.s[i] * (g.in[i] - 1) + op[i] + (g.k[i] - 1) * g.d[i] + 1 - g.p0[i] - g.p1[i];
            if (out[i] < 1)
                ok = false;
        }
        if (!ok)
            continue;
        int r = g.nsp + 2;
        int64_t xd[5] = {g.n, g.cin}, wd[5] = {g.cin, g.cout / g.group}, yd[5] = {g.n, g.cout};
        int64_t v[6];
        for (int i = 0; i < g.nsp; i++) {
            xd[2 + i] = g.in[i];
            wd[2 + i] = g.k[i];
            yd[2 + i] = out[i];
        }
        int64_t nx = kn_numel(r, xd), nw = kn_numel(r, wd), ny = kn_numel(r, yd);
        float *x = kt_data(nx, 7, 1.f), *w = kt_data(nw, 8, 0.5f), *b = kt_data(g.cout, 9, 1.f);
        float *want = malloc(sizeof(float) * (size_t)ny);
        bool bias = rnd(0, 1) == 1;
        convt_oracle(&g, out, x, w, bias ? b : NULL, want);
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, r, xd, x);
        kc_const(&k, "W", KILN_DTYPE_FLOAT, r, wd, w);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 1, &g.cout, b);
        kc_node(&k, "ConvTranspose", "", 11, bias ? 3 : 2, NAMES("X", "W", "B"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "group", g.group));
        for (int i = 0; i < g.nsp; i++)
            v[i] = g.s[i];
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "strides", v, (size_t)g.nsp));
        for (int i = 0; i < g.nsp; i++)
            v[i] = g.d[i];
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "dilations", v, (size_t)g.nsp));
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "output_padding", op, (size_t)g.nsp));
        for (int i = 0; i < g.nsp; i++) {
            v[i] = g.p0[i];
            v[i + g.nsp] = g.p1[i];
        }
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "pads", v, (size_t)(2 * g.nsp)));
        KT_OK(kc_run(&k));
        char what[80];
        snprintf(what, sizeof what, "random convtranspose %d (%dD, group %lld)", done, g.nsp,
                 (long long)g.group);
        expect_out(&k, 0, what, r, yd, want, 1e-4);
        cross_tactics(&k, what, r, yd, want, 1e-3);
        kc_free(&k);
        free(x), free(w), free(b), free(want);
        done++;
    }
}

/* Pooling oracle over padded coordinates. kind: 0 max, 1 average, 2 Lp(2). */
static void pool_oracle(int kind, bool incl, const cgeo *g, const int64_t *out, const float *x,
                        float *y) {
    int64_t isz = g->in[0] * g->in[1] * g->in[2], osz = out[0] * out[1] * out[2];
    for (int64_t pl = 0; pl < g->n * g->cin; pl++)
        for (int64_t o0 = 0; o0 < out[0]; o0++)
            for (int64_t o1 = 0; o1 < out[1]; o1++)
                for (int64_t o2 = 0; o2 < out[2]; o2++) {
                    double acc = kind == 0 ? -INFINITY : 0.0;
                    int64_t cnt = 0;
                    for (int64_t k0 = 0; k0 < g->k[0]; k0++)
                        for (int64_t k1 = 0; k1 < g->k[1]; k1++)
                            for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                                int64_t i[3] = {o0 * g->s[0] - g->p0[0] + k0 * g->d[0],
                                                o1 * g->s[1] - g->p0[1] + k1 * g->d[1],
                                                o2 * g->s[2] - g->p0[2] + k2 * g->d[2]};
                                bool in = true, padded = true;
                                for (int d = 0; d < 3; d++) {
                                    in = in && i[d] >= 0 && i[d] < g->in[d];
                                    padded = padded && i[d] >= -g->p0[d] && i[d] < g->in[d] + g->p1[d];
                                }
                                if (!in) {
                                    cnt += padded && incl;
                                    continue;
                                }
                                double v = x[pl * isz + (i[0] * g->in[1] + i[1]) * g->in[2] + i[2]];
                                acc = kind == 0 ? fmax(acc, v) : kind == 1 ? acc + v : acc + v * v;
                                cnt++;
                            }
                    y[pl * osz + (o0 * out[1] + o1) * out[2] + o2] =
                        (float)(kind == 0 ? acc : kind == 1 ? acc / (double)cnt : sqrt(acc));
                }
}

static void test_pool_random(void) {
    static const char *const ops[] = {"MaxPool", "AveragePool", "LpPool"};
    int done = 0;
    while (done < 60) {
        cgeo g;
        memset(&g, 0, sizeof g);
        int kind = rnd(0, 2);
        bool ceil_mode = rnd(0, 1), incl = kind == 1 && rnd(0, 1);
        g.nsp = rnd(1, 3);
        g.n = rnd(1, 2);
        g.cin = rnd(1, 3);
        int64_t out[3] = {1, 1, 1};
        bool ok = true;
        for (int i = 0; i < 3; i++) {
            if (i >= g.nsp) {
                g.in[i] = g.k[i] = g.s[i] = g.d[i] = 1;
                continue;
            }
            g.in[i] = rnd(1, g.nsp == 3 ? 5 : 8);
            g.k[i] = rnd(1, 3);
            g.s[i] = rnd(1, 3);
            g.d[i] = rnd(1, 2);
            g.p0[i] = rnd(0, (int)g.k[i] - 1); /* pads smaller than the window */
            g.p1[i] = rnd(0, (int)g.k[i] - 1);
            int64_t ek = (g.k[i] - 1) * g.d[i] + 1, span = g.in[i] + g.p0[i] + g.p1[i] - ek;
            if (span < 0) {
                ok = false;
                continue;
            }
            out[i] = ceil_mode ? (span + g.s[i] - 1) / g.s[i] + 1 : span / g.s[i] + 1;
            if (ceil_mode && (out[i] - 1) * g.s[i] >= g.in[i] + g.p0[i])
                out[i]--;
        }
        if (!ok)
            continue;
        int r = g.nsp + 2;
        int64_t xd[5] = {g.n, g.cin}, yd[5] = {g.n, g.cin}, v[6];
        for (int i = 0; i < g.nsp; i++) {
            xd[2 + i] = g.in[i];
            yd[2 + i] = out[i];
        }
        int64_t nx = kn_numel(r, xd), ny = kn_numel(r, yd);
        float *x = kt_data(nx, 10 + done, 1.f), *want = malloc(sizeof(float) * (size_t)ny);
        pool_oracle(kind, incl, &g, out, x, want);
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, r, xd, x);
        kc_node(&k, ops[kind], "", kind == 0 ? 12 : kind == 1 ? 19 : 18, 1, NAMES("X"), 1,
                NAMES("Y"));
        for (int i = 0; i < g.nsp; i++)
            v[i] = g.k[i];
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "kernel_shape", v, (size_t)g.nsp));
        for (int i = 0; i < g.nsp; i++)
            v[i] = g.s[i];
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "strides", v, (size_t)g.nsp));
        for (int i = 0; i < g.nsp; i++)
            v[i] = g.d[i];
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "dilations", v, (size_t)g.nsp));
        for (int i = 0; i < g.nsp; i++) {
            v[i] = g.p0[i];
            v[i + g.nsp] = g.p1[i];
        }
        KT_OK(kiln_network_set_attr_ints(k.net, k.node, "pads", v, (size_t)(2 * g.nsp)));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "ceil_mode", ceil_mode));
        if (kind == 1)
            KT_OK(kiln_network_set_attr_int(k.net, k.node, "count_include_pad", incl));
        KT_OK(kc_run(&k));
        char what[96];
        snprintf(what, sizeof what, "random %s %d (%dD%s%s)", ops[kind], done, g.nsp,
                 ceil_mode ? ", ceil" : "", incl ? ", include pad" : "");
        expect_out(&k, 0, what, r, yd, want, 1e-5);
        cross_tactics(&k, what, r, yd, want, 1e-4);
        kc_free(&k);
        free(x), free(want);
        done++;
    }
}

static void test_matmul_random(void) {
    for (int c = 0; c < 40; c++) {
        int ra = rnd(2, 4), rb = rnd(2, 4), ry = ra > rb ? ra : rb;
        int64_t da[4], db[4], dy[4], m = rnd(1, 9), kk = rnd(1, 9), n = rnd(1, 9);
        for (int i = 0; i < ry - 2; i++) { /* batch dims: equal or 1 on either side */
            int64_t d = rnd(1, 3);
            int ia = i - (ry - ra), ib = i - (ry - rb);
            int64_t a_d = rnd(0, 2) == 0 ? 1 : d, b_d = rnd(0, 2) == 0 ? 1 : d;
            if (ia >= 0)
                da[ia] = a_d;
            if (ib >= 0)
                db[ib] = b_d;
            dy[i] = (ia >= 0 ? a_d : 1) > (ib >= 0 ? b_d : 1) ? (ia >= 0 ? a_d : 1)
                                                                : (ib >= 0 ? b_d : 1);
        }
        da[ra - 2] = m, da[ra - 1] = kk, db[rb - 2] = kk, db[rb - 1] = n;
        dy[ry - 2] = m, dy[ry - 1] = n;
        char what[64];
        snprintf(what, sizeof what, "random matmul %d (ranks %d, %d)", c, ra, rb);
        matmul_case(what, ra, da, rb, db, ry, dy, NULL);
    }
}

static void test_gemm_random(void) {
    for (int c = 0; c < 30; c++) {
        int ta = rnd(0, 1), tb = rnd(0, 1), ck = rnd(0, 5);
        int64_t m = rnd(1, 7), n = rnd(1, 7), kk = rnd(1, 7);
        float alpha = (float)rnd(-4, 4) / 2.f, beta = (float)rnd(-4, 4) / 2.f;
        /* C: absent, scalar, [n], [1, n], [m, 1], [m, n] */
        static const int crank[6] = {-1, 0, 1, 2, 2, 2};
        int64_t cd[2] = {ck == 4 || ck == 5 ? m : 1, ck == 4 ? 1 : n};
        if (ck == 2)
            cd[0] = n;
        float *a = kt_data(m * kk, 11, 1.f), *b = kt_data(kk * n, 12, 1.f), *cc = kt_data(m * n, 13, 1.f);
        float *want = malloc(sizeof(float) * (size_t)(m * n));
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0;
                for (int64_t p = 0; p < kk; p++)
                    acc += (double)a[ta ? p * m + i : i * kk + p] * b[tb ? j * kk + p : p * n + j];
                double cv = 0;
                if (ck == 1)
                    cv = cc[0];
                else if (ck == 2 || ck == 3)
                    cv = cc[j];
                else if (ck == 4)
                    cv = cc[i];
                else if (ck == 5)
                    cv = cc[i * n + j];
                want[i * n + j] = (float)(alpha * acc + beta * cv);
            }
        kc k;
        kc_new(&k);
        kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, ta ? DIMS(kk, m) : DIMS(m, kk), a);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, 2, tb ? DIMS(n, kk) : DIMS(kk, n), b);
        if (ck)
            kc_const(&k, "C", KILN_DTYPE_FLOAT, crank[ck], ck == 2 ? DIMS(n) : cd, cc);
        kc_node(&k, "Gemm", "", 13, ck ? 3 : 2, NAMES("A", "B", "C"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "transA", ta));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "transB", tb));
        KT_OK(kiln_network_set_attr_float(k.net, k.node, "alpha", alpha));
        KT_OK(kiln_network_set_attr_float(k.net, k.node, "beta", beta));
        KT_OK(kc_run(&k));
        char what[80];
        snprintf(what, sizeof what, "random gemm %d (tA %d tB %d, C kind %d)", c, ta, tb, ck);
        expect_out(&k, 0, what, 2, DIMS(m, n), want, 1e-5);
        cross_tactics(&k, what, 2, DIMS(m, n), want, 1e-4);
        kc_free(&k);
        free(a), free(b), free(cc), free(want);
    }
}

static void test_layernorm_random(void) {
    for (int c = 0; c < 30; c++) {
        int rank = rnd(1, 4), axis = rnd(-rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t d[4];
        for (int i = 0; i < rank; i++)
            d[i] = rnd(1, 6);
        int64_t inner = kn_numel(rank - ax, d + ax), outer = kn_numel(ax, d), n = inner * outer;
        bool bias = rnd(0, 1);
        float eps = rnd(0, 1) ? 1e-5f : 1e-2f;
        float *x = kt_data(n, 20 + c, 1.f), *sc = kt_data(inner, 21, 1.f), *b = kt_data(inner, 22, 1.f);
        float *want = malloc(sizeof(float) * (size_t)n);
        for (int64_t o = 0; o < outer; o++) {
            double m = 0, v = 0;
            for (int64_t j = 0; j < inner; j++)
                m += x[o * inner + j];
            m /= (double)inner;
            for (int64_t j = 0; j < inner; j++)
                v += (x[o * inner + j] - m) * (x[o * inner + j] - m);
            v /= (double)inner;
            for (int64_t j = 0; j < inner; j++)
                want[o * inner + j] =
                    (float)((x[o * inner + j] - m) / sqrt(v + eps) * sc[j] + (bias ? b[j] : 0.0));
        }
        kc k;
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, rank, d, x);
        kc_const(&k, "S", KILN_DTYPE_FLOAT, rank - ax, d + ax, sc);
        kc_const(&k, "B", KILN_DTYPE_FLOAT, rank - ax, d + ax, b);
        kc_node(&k, "LayerNormalization", "", 17, bias ? 3 : 2, NAMES("X", "S", "B"), 1,
                NAMES("Y"));
        KT_OK(kiln_network_set_attr_int(k.net, k.node, "axis", axis));
        KT_OK(kiln_network_set_attr_float(k.net, k.node, "epsilon", eps));
        KT_OK(kc_run(&k));
        char what[64];
        snprintf(what, sizeof what, "random layernorm %d (rank %d, axis %d)", c, rank, axis);
        expect_out(&k, 0, what, rank, d, want, 1e-4);
        cross_tactics(&k, what, rank, d, want, 1e-3);
        kc_free(&k);
        free(x), free(sc), free(b), free(want);
    }
}

/* Empty tensors: the kernels run and write nothing (or zeros). */
static void test_empty(void) {
    static const float w[2 * 3 * 3 * 3] = {0};
    float dummy[1] = {0};
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(0, 3, 5, 5), dummy);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 4, DIMS(2, 3, 3, 3), w);
    kc_node(&k, "Conv", "", 11, 2, NAMES("X", "W"), 1, NAMES("Y"));
    KT_OK(kc_run(&k));
    kn_tinfo ti;
    kc_out(&k, 0, &ti);
    check_shape("conv of an empty batch", &ti, 4, DIMS(0, 2, 3, 3));
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(0, 3), dummy);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(3, 4), w);
    kc_node(&k, "MatMul", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
    KT_OK(kc_run(&k));
    kc_out(&k, 0, &ti);
    check_shape("matmul with no rows", &ti, 2, DIMS(0, 4));
    kc_free(&k);

    kc_new(&k); /* an empty inner dim: the products are zero */
    kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(2, 0), dummy);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(0, 3), dummy);
    kc_node(&k, "MatMul", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
    KT_OK(kc_run(&k));
    static const float zeros[6] = {0};
    expect_out(&k, 0, "matmul with an empty inner dim", 2, DIMS(2, 3), zeros, 0);
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(0, 2, 4), dummy);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 1, DIMS(4), w);
    kc_node(&k, "LayerNormalization", "", 17, 2, NAMES("X", "S"), 1, NAMES("Y"));
    KT_OK(kc_run(&k));
    kc_out(&k, 0, &ti);
    check_shape("layernorm of an empty batch", &ti, 3, DIMS(0, 2, 4));
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(0, 2, 4, 4), dummy);
    kc_node(&k, "MaxPool", "", 12, 1, NAMES("X"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_ints(k.net, k.node, "kernel_shape", DIMS(2, 2), 2));
    KT_OK(kc_run(&k));
    kc_out(&k, 0, &ti);
    check_shape("maxpool of an empty batch", &ti, 4, DIMS(0, 2, 3, 3));
    kc_free(&k);
}

/* Malformed nodes fail with a message that names the node and the problem. */
/* QuantizeLinear to the four float8 types, saturating and not, and
 * DequantizeLinear back, against codes worked out by hand: signed zeros,
 * ties to even (1.0625, 1.1875, 248), E4M3FN's 464 rounding back to 448,
 * overflow and infinities (clamped, or NaN / E5M2's infinity), NaN,
 * subnormals and the tie halfway to the smallest, a negative value rounding
 * to zero (-0, but +0 in the fnuz types). x / 2 with a scale of 2. */
static void test_quant_f8(void) {
    static const float xv[16] = {0.f, -0.f, 1.0625f, 1.1875f, 464.f, 465.f, 500.f, INFINITY, -INFINITY, NAN,
                                 0x1p-10f, 0x3p-10f, 1e-40f, -1e-9f, 248.f, 61440.f};
    static const struct {
        kiln_dtype t;
        uint8_t sat[16], nosat[16];
    } want[4] = {
        {KILN_DTYPE_FLOAT8E4M3FN,
         {0x00, 0x80, 0x38, 0x3a, 0x7e, 0x7e, 0x7e, 0x7e, 0xfe, 0x7f, 0x00, 0x02, 0x00, 0x80, 0x78, 0x7e},
         {0x00, 0x80, 0x38, 0x3a, 0x7e, 0x7f, 0x7f, 0x7f, 0xff, 0x7f, 0x00, 0x02, 0x00, 0x80, 0x78, 0x7f}},
        {KILN_DTYPE_FLOAT8E4M3FNUZ,
         {0x00, 0x00, 0x40, 0x42, 0x7f, 0x7f, 0x7f, 0x7f, 0xff, 0x80, 0x01, 0x03, 0x00, 0x00, 0x7f, 0x7f},
         {0x00, 0x00, 0x40, 0x42, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x03, 0x00, 0x00, 0x80, 0x80}},
        {KILN_DTYPE_FLOAT8E5M2,
         {0x00, 0x80, 0x3c, 0x3d, 0x5f, 0x5f, 0x60, 0x7b, 0xfb, 0x7f, 0x14, 0x1a, 0x00, 0x80, 0x5c, 0x7b},
         {0x00, 0x80, 0x3c, 0x3d, 0x5f, 0x5f, 0x60, 0x7c, 0xfc, 0x7f, 0x14, 0x1a, 0x00, 0x80, 0x5c, 0x7c}},
        {KILN_DTYPE_FLOAT8E5M2FNUZ,
         {0x00, 0x00, 0x40, 0x41, 0x63, 0x63, 0x64, 0x7f, 0xff, 0x80, 0x18, 0x1e, 0x00, 0x00, 0x60, 0x7f},
         {0x00, 0x00, 0x40, 0x41, 0x63, 0x63, 0x64, 0x80, 0x80, 0x80, 0x18, 0x1e, 0x00, 0x00, 0x60, 0x80}},
    };
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = xv[i] * 2.f;
    const float two = 2.f;
    for (int k = 0; k < 4; k++)
        for (int sat = 0; sat < 2; sat++) {
            kc k8;
            kc_new(&k8);
            kc_input(&k8, "X", KILN_DTYPE_FLOAT, 1, DIMS(16), x);
            kc_const(&k8, "S", KILN_DTYPE_FLOAT, 0, DIMS(0), &two);
            kc_node(&k8, "QuantizeLinear", "", 21, 2, NAMES("X", "S"), 1, NAMES("Y"));
            KT_OK(kiln_network_set_attr_int(k8.net, k8.node, "output_dtype", want[k].t));
            KT_OK(kiln_network_set_attr_int(k8.net, k8.node, "saturate", sat));
            KT_OK(kc_run(&k8));
            kn_tinfo ti;
            const uint8_t *y = kc_out(&k8, 0, &ti);
            const uint8_t *w = sat ? want[k].sat : want[k].nosat;
            bool same = y && ti.dtype == want[k].t;
            for (int i = 0; same && i < 16; i++) {
                same = y[i] == w[i];
                if (!same)
                    fprintf(stderr, "%s saturate %d: x %g gives 0x%02x, want 0x%02x\n",
                            kiln_dtype_name(want[k].t), sat, (double)xv[i], y[i], w[i]);
            }
            KT_CHECK(same);
            kc_free(&k8);
        }
    /* back: (code as float) * 2, per type: zeros, the smallest subnormal,
       the largest value, NaN, and E5M2's infinities */
    static const struct {
        kiln_dtype t;
        uint8_t code[6];
        float want[6];
    } dq[4] = {
        {KILN_DTYPE_FLOAT8E4M3FN, {0x00, 0x80, 0x01, 0x7e, 0xfe, 0x7f}, {0.f, -0.f, 0x1p-8f, 896.f, -896.f, NAN}},
        {KILN_DTYPE_FLOAT8E4M3FNUZ, {0x00, 0x80, 0x01, 0x7f, 0xff, 0x08}, {0.f, NAN, 0x1p-9f, 480.f, -480.f, 0x1p-6f}},
        {KILN_DTYPE_FLOAT8E5M2, {0x80, 0x7c, 0xfc, 0x7d, 0x01, 0x7b},
         {-0.f, INFINITY, -INFINITY, NAN, 0x1p-15f, 114688.f}},
        {KILN_DTYPE_FLOAT8E5M2FNUZ, {0x00, 0x80, 0x01, 0x7f, 0xff, 0x04},
         {0.f, NAN, 0x1p-16f, 114688.f, -114688.f, 0x1p-14f}},
    };
    for (int k = 0; k < 4; k++) {
        kc k8;
        kc_new(&k8);
        kc_input(&k8, "X", dq[k].t, 1, DIMS(6), dq[k].code);
        kc_const(&k8, "S", KILN_DTYPE_FLOAT, 0, DIMS(0), &two);
        kc_node(&k8, "DequantizeLinear", "", 21, 2, NAMES("X", "S"), 1, NAMES("Y"));
        KT_OK(kc_run(&k8));
        kn_tinfo ti;
        const float *y = kc_out(&k8, 0, &ti);
        bool same = y && ti.dtype == KILN_DTYPE_FLOAT;
        for (int i = 0; same && i < 6; i++) {
            float w = dq[k].want[i];
            same = isnan(w) ? isnan(y[i]) != 0 : y[i] == w && signbit(y[i]) == signbit(w);
            if (!same)
                fprintf(stderr, "%s code 0x%02x gives %g, want %g\n", kiln_dtype_name(dq[k].t), dq[k].code[i],
                        (double)y[i], (double)w);
        }
        KT_CHECK(same);
        kc_free(&k8);
    }
}

static void test_errors(void) {
    static const float x[24] = {0};
    kc k;
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 4), x);
    kc_node(&k, "MaxPool", "", 12, 1, NAMES("X"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "node 'n0' (MaxPool): kernel_shape must have 2 values");
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 4), x);
    kc_node(&k, "AveragePool", "", 19, 1, NAMES("X"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_ints(k.net, k.node, "kernel_shape", DIMS(5, 5), 2));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "larger than the padded input");
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(2, 3), x);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, 2, DIMS(4, 2), x);
    kc_node(&k, "Gemm", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "node 'n0' (Gemm): inner dims differ: 3 and 4");
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_FLOAT, 3, DIMS(2, 2, 3), x);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, 3, DIMS(3, 3, 2), x);
    kc_node(&k, "MatMul", "", 13, 2, NAMES("A", "B"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "cannot broadcast");
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(2, 3), x);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 1, DIMS(3), x);
    kc_node(&k, "LayerNormalization", "", 17, 2, NAMES("X", "S"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "axis", 2));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "axis 2 is out of range for rank 2");
    kc_free(&k);

    /* GridSample: an unknown mode, a grid that is not (x, y), a volumetric input */
    static const char *const gs_bad[][2] = {{"mode", "trilinear"}, {"padding_mode", "wrap"}};
    for (int b = 0; b < 2; b++) {
        kc_new(&k);
        kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 4), x);
        kc_input(&k, "G", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 2), x);
        kc_node(&k, "GridSample", "", 16, 2, NAMES("X", "G"), 1, NAMES("Y"));
        KT_OK(kiln_network_set_attr_string(k.net, k.node, gs_bad[b][0], gs_bad[b][1]));
        KT_FAILS(kc_run(&k), KILN_ERR_INVALID_ARGUMENT, gs_bad[b][1]);
        kc_free(&k);
    }
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 4), x);
    kc_input(&k, "G", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 3), x);
    kc_node(&k, "GridSample", "", 16, 2, NAMES("X", "G"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "node 'n0' (GridSample): grid's last dim must be 2");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 5, DIMS(1, 1, 2, 3, 2), x);
    kc_input(&k, "G", KILN_DTYPE_FLOAT, 5, DIMS(1, 1, 1, 2, 3), x);
    kc_node(&k, "GridSample", "", 20, 2, NAMES("X", "G"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_UNSUPPORTED, "rank-5 (volumetric)");
    kc_free(&k);

    /* QuantizeLinear / DequantizeLinear: blocked scales of the wrong shape,
       an int32 target, a float8 zero point that is not 0, a scale per index
       that does not match the axis */
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(4, 6), x);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 2, DIMS(4, 2), x);
    kc_node(&k, "QuantizeLinear", "", 21, 2, NAMES("X", "S"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "block_size", 2));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "scale dim 1 is 2; blocks of 2 along axis 1 of x need 3");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(4, 6), x);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 0, DIMS(0), x);
    kc_node(&k, "QuantizeLinear", "", 21, 2, NAMES("X", "S"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "output_dtype", KILN_DTYPE_INT32));
    KT_FAILS(kc_run(&k), KILN_ERR_UNSUPPORTED,
             "quantized type int32 is not supported (int8, uint8, int16, uint16, float8)");
    kc_free(&k);
    static const uint8_t f8zp[3] = {0x80, 0x30, 0x00}; /* -0 is a zero; 0x30 is 0.5 in float8e4m3fn */
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(4, 3), x);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 1, DIMS(3), x);
    kc_const(&k, "Z", KILN_DTYPE_FLOAT8E4M3FN, 1, DIMS(3), f8zp);
    kc_node(&k, "QuantizeLinear", "", 21, 3, NAMES("X", "S", "Z"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_INVALID_ARGUMENT,
             "node 'n0' (QuantizeLinear): the zero point of a float8e4m3fn quantization must be 0; "
             "element 1 is 0.5");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT8E5M2FNUZ, 2, DIMS(1, 3), f8zp);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 1, DIMS(3), x);
    kc_const(&k, "Z", KILN_DTYPE_FLOAT8E5M2FNUZ, 1, DIMS(3), f8zp);
    kc_node(&k, "DequantizeLinear", "", 21, 3, NAMES("X", "S", "Z"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_INVALID_ARGUMENT,
             "node 'n0' (DequantizeLinear): the zero point of a float8e5m2fnuz quantization must be 0; "
             "element 0 is nan");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_INT8, 2, DIMS(4, 6), x);
    kc_const(&k, "S", KILN_DTYPE_FLOAT, 1, DIMS(5), x);
    kc_node(&k, "DequantizeLinear", "", 13, 2, NAMES("X", "S"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "5 scales for axis 1 of 6");
    kc_free(&k);

    /* the losses: an unknown reduction, a target of the wrong shape, a
       weight of the wrong length, a target that is no class (at run time) */
    static const int64_t tgt[3] = {0, 7, 1};
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(3, 4), x);
    kc_const(&k, "T", KILN_DTYPE_INT64, 1, DIMS(3), tgt);
    kc_node(&k, "NegativeLogLikelihoodLoss", "", 13, 2, NAMES("X", "T"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_string(k.net, k.node, "reduction", "max"));
    KT_FAILS(kc_run(&k), KILN_ERR_INVALID_ARGUMENT, "reduction 'max' is not none, sum or mean");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(3, 4, 2), x);
    kc_const(&k, "T", KILN_DTYPE_INT64, 2, DIMS(3, 1), tgt);
    kc_node(&k, "SoftmaxCrossEntropyLoss", "", 13, 2, NAMES("X", "T"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "target dim 1 is 1 but the input's matching dim (2) is 2");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(3, 4), x);
    kc_const(&k, "T", KILN_DTYPE_INT64, 1, DIMS(3), tgt);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 1, DIMS(5), x);
    kc_node(&k, "NegativeLogLikelihoodLoss", "", 13, 3, NAMES("X", "T", "W"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "the weight must be [C] = [4]");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(3, 4), x);
    kc_const(&k, "T", KILN_DTYPE_INT64, 1, DIMS(3), tgt);
    kc_node(&k, "NegativeLogLikelihoodLoss", "", 13, 2, NAMES("X", "T"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_RUNTIME, "target element 1 is 7, not a class in [0, 4) nor the ignore_index");
    kc_free(&k);

    /* the random ops: no shape, a Multinomial of rank 3, an integer RandomNormal */
    kc_new(&k);
    kc_node(&k, "RandomNormal", "", 1, 0, NULL, 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_INVALID_ARGUMENT, "the shape attribute is missing");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(1, 2, 3), x);
    kc_node(&k, "Multinomial", "", 7, 1, NAMES("X"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "input must be [batch, classes], has rank 3");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 2, DIMS(2, 0), x);
    kc_node(&k, "Multinomial", "", 7, 1, NAMES("X"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "input has no classes to draw from");
    kc_free(&k);
    kc_new(&k);
    kc_node(&k, "RandomNormal", "", 1, 0, NULL, 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_ints(k.net, k.node, "shape", DIMS(2, 3), 2));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "dtype", KILN_DTYPE_INT32));
    KT_FAILS(kc_run(&k), KILN_ERR_UNSUPPORTED, "output type int32 is not supported");
    kc_free(&k);

    /* RoiAlign: a mode it does not have, rois and batch indices that disagree */
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 4), x);
    kc_input(&k, "R", KILN_DTYPE_FLOAT, 2, DIMS(2, 4), x);
    kc_input(&k, "I", KILN_DTYPE_INT64, 1, DIMS(2), x);
    kc_node(&k, "RoiAlign", "", 16, 3, NAMES("X", "R", "I"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_string(k.net, k.node, "mode", "median"));
    KT_FAILS(kc_run(&k), KILN_ERR_INVALID_ARGUMENT, "mode 'median' is not avg or max");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 4), x);
    kc_input(&k, "R", KILN_DTYPE_FLOAT, 2, DIMS(2, 4), x);
    kc_input(&k, "I", KILN_DTYPE_INT64, 1, DIMS(3), x);
    kc_node(&k, "RoiAlign", "", 16, 3, NAMES("X", "R", "I"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "2 rois but 3 batch indices");
    kc_free(&k);

    /* NonMaxSuppression: scores for another box count, a bad box format */
    kc_new(&k);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, 3, DIMS(1, 3, 4), x);
    kc_input(&k, "S", KILN_DTYPE_FLOAT, 3, DIMS(1, 2, 4), x);
    kc_node(&k, "NonMaxSuppression", "", 11, 2, NAMES("B", "S"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "do not agree on batch and box count");
    kc_free(&k);
    kc_new(&k);
    kc_input(&k, "B", KILN_DTYPE_FLOAT, 3, DIMS(1, 3, 4), x);
    kc_input(&k, "S", KILN_DTYPE_FLOAT, 3, DIMS(1, 2, 3), x);
    kc_node(&k, "NonMaxSuppression", "", 11, 2, NAMES("B", "S"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "center_point_box", 2));
    KT_FAILS(kc_run(&k), KILN_ERR_INVALID_ARGUMENT, "center_point_box must be 0 or 1");
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_FLOAT, 2, DIMS(2, 3), x);
    kc_node(&k, "Einsum", "", 12, 1, NAMES("A"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_string(k.net, k.node, "equation", "ijk->i"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "node 'n0' (Einsum): operand 0 has rank 2");
    kc_free(&k);

    static const uint8_t q[24] = {0};
    kc_new(&k);
    kc_input(&k, "A", KILN_DTYPE_UINT8, 2, DIMS(4, 3), q);
    kc_input(&k, "B", KILN_DTYPE_UINT8, 2, DIMS(3, 2), q);
    kc_const(&k, "AZ", KILN_DTYPE_UINT8, 1, DIMS(3), q);
    kc_node(&k, "MatMulInteger", "", 10, 3, NAMES("A", "B", "AZ"), 1, NAMES("Y"));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "a_zero_point (input 2) must have 1 or 4 values, has 3");
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(2, 1, 2), x);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 3, DIMS(1, 3, 2), x);
    kc_const(&k, "R", KILN_DTYPE_FLOAT, 3, DIMS(1, 3, 3), x);
    kc_const(&k, "H0", KILN_DTYPE_FLOAT, 3, DIMS(1, 1, 2), x);
    kc_node(&k, "RNN", "", 14, 6, NAMES("X", "W", "R", "", "", "H0"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_int(k.net, k.node, "hidden_size", 3));
    KT_FAILS(kc_run(&k), KILN_ERR_SHAPE, "initial state (input 5) must have 3 values");
    kc_free(&k);

    kc_new(&k);
    kc_input(&k, "X", KILN_DTYPE_FLOAT, 3, DIMS(1, 2, 3), x);
    kc_const(&k, "W", KILN_DTYPE_FLOAT, 3, DIMS(2, 2, 1), x);
    kc_node(&k, "Conv", "", 11, 2, NAMES("X", "W"), 1, NAMES("Y"));
    KT_OK(kiln_network_set_attr_string(k.net, k.node, "auto_pad", "SIDEWAYS"));
    KT_FAILS(kc_run(&k), KILN_ERR_UNSUPPORTED, "unknown auto_pad 'SIDEWAYS'");
    kc_free(&k);
}

int main(void) {
    rng_state = (uint32_t)kt_seed("test_ops_nn", 20261130u);
    test_conv();
    test_conv_types();
    test_conv_integer();
    test_max_unpool();
    test_conv_transpose();
    test_pool();
    test_batchnorm();
    test_batchnorm_per_activation();
    test_norms();
    test_layernorm_fused();
    test_gemm();
    test_matmul();
    test_matmul_int();
    test_matmul_half();
    test_einsum();
    test_dropout();
    test_recurrent();
    test_attention();
    test_fused_conv();
    test_fused_gemm_matmul();
    test_fused_types();
    test_fused_activations();
    test_conv_random();
    test_conv_transpose_random();
    test_conv_transpose_chunked();
    test_pool_random();
    test_matmul_random();
    test_gemm_random();
    test_layernorm_random();
    test_empty();
    test_quant_f8();
    test_errors();
    /* again with several threads: the parallel paths must agree */
    kc_threads = 2;
    test_conv();
    test_conv_transpose();
    test_pool();
    test_norms();
    test_layernorm_fused();
    test_matmul();
    test_recurrent();
    test_attention();
    test_fused_conv();
    test_conv_random();
    test_conv_transpose_random();
    test_pool_random();
    test_matmul_random();
    test_layernorm_random();
    return kt_finish();
}
