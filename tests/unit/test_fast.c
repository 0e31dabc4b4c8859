/* test_fast.c - the oneDNN tactics (Conv, kiln::Conv, MatMul, kiln::MatMul,
 * Gemm, kiln::Gemm) against plain loops in this file, and, where the
 * reference kernels exist, against "ref" through the executor. Tolerance:
 * max |fast - ref| <= 1e-4 * max |ref| (FP32). */
#include <pthread.h>

#include "test.h" /* first: kt_exec.h relies on its <string.h> */
#include "backends/cpu/act.h"
#include "kt_exec.h"

#define TOL 1e-4

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* xorshift, uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
}
static float *rand_buf(int64_t n) {
    float *p = kn_aligned_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}
static int64_t numel(int rank, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= d[i];
    return n;
}
static kb_tensor tensor(float *data, int rank, const int64_t *dims) {
    kb_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = data ? KILN_DTYPE_FLOAT : KILN_DTYPE_UNDEFINED;
    t.rank = rank > 0 ? rank : 0;
    if (rank > 0)
        memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    return t;
}

/* A one-node network to hold the node and its attributes. */
typedef struct one {
    kn_net *net;
    kn_node *node;
} one;
static one one_node(const char *op, const char *domain, int n_in) {
    one o = {NULL, NULL};
    KT_OK(kn_net_new(&o.net));
    int ins[4], outs[1];
    char name[16];
    for (int i = 0; i < n_in; i++) {
        snprintf(name, sizeof name, "in%d", i);
        KT_OK(kn_net_tensor(o.net, name, &ins[i]));
    }
    KT_OK(kn_net_tensor(o.net, "out", &outs[0]));
    int idx;
    KT_OK(kn_net_add_node(o.net, "n0", op, domain, domain[0] ? 1 : 17, n_in, ins, 1, outs, &idx));
    o.node = &o.net->nodes[idx];
    return o;
}

/* Run a kernel directly: supports (constant inputs per const_mask), init,
 * prepare, run with `threads`, release. Returns false when not supported. */
/* When set, input 1 (the weights) is not known at prepare (no host bytes, no
 * data pointer): the tactics must reorder it on every run. */
static bool lazy_weights;

static bool run_kernel(const kb_kernel *k, const kn_node *node, const kb_tensor *in, int n_in,
                       kb_tensor *out, unsigned const_mask, int threads) {
    kn_tinfo ti[4], to;
    for (int i = 0; i < n_in; i++) {
        memset(&ti[i], 0, sizeof ti[i]);
        ti[i].dtype = in[i].dtype;
        ti[i].rank = in[i].rank;
        memcpy(ti[i].dims, in[i].dims, sizeof ti[i].dims);
        ti[i].value = (const_mask >> i & 1u) ? in[i].data : NULL;
    }
    memset(&to, 0, sizeof to);
    to.dtype = out->dtype;
    to.rank = out->rank;
    memcpy(to.dims, out->dims, sizeof to.dims);
    if (k->supports && !k->supports(node, ti, n_in, &to, 1))
        return false;
    void *state = NULL, *inst = NULL, *ws = NULL;
    size_t wsz = 0;
    if (k->init)
        KT_OK(k->init(node, &state));
    kb_tensor pin[4], rin[4];
    memcpy(pin, in, sizeof(kb_tensor) * (size_t)n_in);
    for (int i = 0; i < n_in; i++) /* constants' values are known, as in the executor */
        pin[i].host = (const_mask >> i & 1u) && !(lazy_weights && i == 1) ? in[i].data : NULL;
    memcpy(rin, pin, sizeof rin);
    if (lazy_weights)
        pin[1].data = NULL;
    KT_OK(k->prepare(state, node, pin, n_in, out, 1, &inst, &wsz));
    if (wsz)
        ws = kn_aligned_alloc(wsz);
    kb_run r = {.node = node, .state = state, .inst = inst, .n_in = n_in, .in = rin, .n_out = 1,
                .out = out, .workspace = ws, .workspace_size = wsz, .threads = threads};
    KT_OK(k->run(&r));
    KT_OK(k->run(&r)); /* a second run reuses what the first one packed */
    if (k->release)
        k->release(inst);
    if (k->fini)
        k->fini(state);
    kn_aligned_free(ws);
    return true;
}

static double rel_err(const float *a, const float *ref, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) /* catches NaN */
            md = d;
        if (fabs(ref[i]) > mr)
            mr = fabs(ref[i]);
    }
    return md / (mr > 1e-6 ? mr : 1e-6);
}

#define KT_REL(a, ref, n, what)                                                              \
    do {                                                                                     \
        double e_ = rel_err((a), (ref), (n));                                                \
        if (e_ <= TOL) {                                                                     \
            kt_pass++;                                                                       \
        } else {                                                                             \
            kt_fail++;                                                                       \
            fprintf(stderr, "%s:%d: %s: relative error %g > %g\n", __FILE__, __LINE__, what, \
                    e_, TOL);                                                                \
        }                                                                                    \
    } while (0)

static const char *const act_names[] = {"", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip",
                                        "HardSigmoid", "HardSwish", "Gelu", "GeluTanh", "Silu",
                                        "Elu", "Softplus"};
static const float act_alpha[] = {0, 0, 0.1f, 0, 0, -0.5f, 0.3f, 0, 0, 0, 0, 0.7f, 0};
static const float act_beta[] = {0, 0, 0, 0, 0, 0.6f, 0.4f, 0, 0, 0, 0, 0, 0};

/* ---------------- convolution ---------------- */

typedef struct conv_case {
    int nsp;
    int64_t n, c, m, group;
    int64_t x[2], k[2], s[2], d[2], pb[2], pe[2];
    const char *auto_pad;
    bool bias, resid;
    const char *act;
    float alpha, beta;
} conv_case;

static int64_t conv_out(int64_t x, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                        const char *ap) {
    if (ap && strncmp(ap, "SAME", 4) == 0)
        return (x + s - 1) / s;
    if (ap && strcmp(ap, "VALID") == 0)
        pb = pe = 0;
    return (x + pb + pe - ((k - 1) * d + 1)) / s + 1;
}

/* Plain convolution in double. Pads already resolved into cc. */
static void conv_naive(const conv_case *cc, const int64_t *y, const float *x, const float *w,
                       const float *b, const float *z, float *out) {
    int64_t cg = cc->c / cc->group, mg = cc->m / cc->group;
    int64_t xh = cc->nsp == 2 ? cc->x[0] : 1, xw = cc->x[cc->nsp - 1];
    int64_t kh = cc->nsp == 2 ? cc->k[0] : 1, kw = cc->k[cc->nsp - 1];
    int64_t sh = cc->nsp == 2 ? cc->s[0] : 1, sw = cc->s[cc->nsp - 1];
    int64_t dh = cc->nsp == 2 ? cc->d[0] : 1, dw = cc->d[cc->nsp - 1];
    int64_t ph = cc->nsp == 2 ? cc->pb[0] : 0, pw = cc->pb[cc->nsp - 1];
    int64_t yh = cc->nsp == 2 ? y[0] : 1, yw = y[cc->nsp - 1];
    kb_act a = kb_act_parse(cc->act);
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t m = 0; m < cc->m; m++) {
            int64_t g = m / mg;
            for (int64_t oy = 0; oy < yh; oy++)
                for (int64_t ox = 0; ox < yw; ox++) {
                    double acc = b ? b[m] : 0;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t ky = 0; ky < kh; ky++)
                            for (int64_t kx = 0; kx < kw; kx++) {
                                int64_t iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
                                if (iy < 0 || iy >= xh || ix < 0 || ix >= xw)
                                    continue;
                                acc += (double)x[((n * cc->c + g * cg + ci) * xh + iy) * xw + ix] *
                                       w[((m * cg + ci) * kh + ky) * kw + kx];
                            }
                    int64_t o = ((n * cc->m + m) * yh + oy) * yw + ox;
                    if (z)
                        acc += z[o];
                    out[o] = kb_act_apply(a, (float)acc, cc->alpha, cc->beta);
                }
        }
}

static void conv_check(conv_case cc, const char *tactic) {
    bool fused = cc.resid || cc.act;
    int rank = cc.nsp + 2;
    int64_t y[2];
    for (int i = 0; i < cc.nsp; i++)
        y[i] = conv_out(cc.x[i], cc.k[i], cc.s[i], cc.d[i], cc.pb[i], cc.pe[i], cc.auto_pad);
    int64_t xd[4] = {cc.n, cc.c}, wd[4] = {cc.m, cc.c / cc.group}, yd[4] = {cc.n, cc.m}, bd[1] = {cc.m};
    for (int i = 0; i < cc.nsp; i++)
        xd[2 + i] = cc.x[i], wd[2 + i] = cc.k[i], yd[2 + i] = y[i];
    int n_in = fused ? 4 : (cc.bias ? 3 : 2);
    one o = one_node("Conv", fused ? "kiln" : "", n_in);
    kn_node *node = o.node;
    KT_OK(kn_node_set_ints(node, "kernel_shape", cc.k, (size_t)cc.nsp));
    KT_OK(kn_node_set_ints(node, "strides", cc.s, (size_t)cc.nsp));
    KT_OK(kn_node_set_ints(node, "dilations", cc.d, (size_t)cc.nsp));
    KT_OK(kn_node_set_int(node, "group", cc.group));
    if (cc.auto_pad) {
        KT_OK(kn_node_set_string(node, "auto_pad", cc.auto_pad));
        /* resolve the pads the naive loop needs */
        for (int i = 0; i < cc.nsp; i++) {
            int64_t total = (y[i] - 1) * cc.s[i] + (cc.k[i] - 1) * cc.d[i] + 1 - cc.x[i];
            if (total < 0 || strcmp(cc.auto_pad, "VALID") == 0)
                total = 0;
            cc.pb[i] = strcmp(cc.auto_pad, "SAME_LOWER") == 0 ? total - total / 2 : total / 2;
            cc.pe[i] = total - cc.pb[i];
        }
    } else {
        int64_t pads[4];
        for (int i = 0; i < cc.nsp; i++)
            pads[i] = cc.pb[i], pads[cc.nsp + i] = cc.pe[i];
        KT_OK(kn_node_set_ints(node, "pads", pads, 2u * (size_t)cc.nsp));
    }
    if (cc.act) {
        KT_OK(kn_node_set_string(node, "activation", cc.act));
        KT_OK(kn_node_set_float(node, "alpha", cc.alpha));
        KT_OK(kn_node_set_float(node, "beta", cc.beta));
    }
    float *x = rand_buf(numel(rank, xd)), *w = rand_buf(numel(rank, wd));
    float *b = cc.bias ? rand_buf(cc.m) : NULL, *z = cc.resid ? rand_buf(numel(rank, yd)) : NULL;
    float *out = rand_buf(numel(rank, yd)), *ref = rand_buf(numel(rank, yd));
    kb_tensor in[4] = {tensor(x, rank, xd), tensor(w, rank, wd), tensor(b, 1, bd),
                       tensor(z, rank, yd)};
    kb_tensor ot = tensor(out, rank, yd);
    const kb_kernel *k = kb_cpu_kernel_find(fused ? "kiln" : "", "Conv", tactic);
    KT_CHECK(k != NULL);
    if (k) {
        bool ok = run_kernel(k, node, in, n_in, &ot, 2u, 2);
        KT_CHECK(ok);
        if (ok) {
            conv_naive(&cc, y, x, w, b, z, ref);
            char what[160];
            snprintf(what, sizeof what, "Conv %s %dD c%lld m%lld g%lld k%lldx%lld act '%s'%s",
                     tactic, cc.nsp, (long long)cc.c, (long long)cc.m, (long long)cc.group,
                     (long long)cc.k[0], (long long)cc.k[cc.nsp - 1], cc.act ? cc.act : "",
                     cc.resid ? " +Z" : "");
            KT_REL(out, ref, numel(rank, yd), what);
        }
    }
    kn_aligned_free(x), kn_aligned_free(w), kn_aligned_free(b), kn_aligned_free(z);
    kn_aligned_free(out), kn_aligned_free(ref);
    kn_net_free(o.net);
}

static void test_conv(void) {
    const char *tactics[] = {"dnnl", "dnnl_nchw"};
    for (int t = 0; t < 2; t++) {
        const char *tac = tactics[t];
        /* odd sizes, asymmetric pads, strides, dilation */
        conv_check((conv_case){2, 2, 3, 5, 1, {11, 9}, {3, 2}, {2, 1}, {1, 2}, {1, 0}, {2, 1},
                               NULL, true, false, NULL, 0, 0}, tac);
        /* groups */
        conv_check((conv_case){2, 1, 6, 9, 3, {8, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1},
                               NULL, true, false, NULL, 0, 0}, tac);
        /* depthwise, stride 2 */
        conv_check((conv_case){2, 2, 16, 16, 16, {10, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
                               NULL, false, false, NULL, 0, 0}, tac);
        /* 1x1, ResNet-like channels */
        conv_check((conv_case){2, 1, 64, 32, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0},
                               NULL, true, false, NULL, 0, 0}, tac);
        /* 7x7 stride-2 stem-like, small */
        conv_check((conv_case){2, 1, 3, 8, 1, {23, 23}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3},
                               NULL, true, false, NULL, 0, 0}, tac);
        /* auto_pad */
        conv_check((conv_case){2, 1, 4, 6, 1, {9, 10}, {3, 4}, {2, 2}, {1, 1}, {0, 0}, {0, 0},
                               "SAME_UPPER", true, false, NULL, 0, 0}, tac);
        conv_check((conv_case){2, 1, 4, 6, 1, {9, 10}, {3, 4}, {2, 2}, {1, 1}, {0, 0}, {0, 0},
                               "SAME_LOWER", false, false, NULL, 0, 0}, tac);
        conv_check((conv_case){2, 1, 4, 6, 1, {9, 10}, {3, 4}, {1, 2}, {1, 1}, {0, 0}, {0, 0},
                               "VALID", true, false, NULL, 0, 0}, tac);
        /* 1-D */
        conv_check((conv_case){1, 3, 5, 7, 1, {19}, {5}, {2}, {2}, {2}, {1}, NULL, true, false,
                               NULL, 0, 0}, tac);
        /* kiln::Conv: residual and every activation */
        for (size_t a = 0; a < KN_ARRAY_LEN(act_names); a++)
            conv_check((conv_case){2, 2, 8, 16, 1, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1},
                                   {1, 1}, NULL, true, a % 2 == 0, act_names[a], act_alpha[a],
                                   act_beta[a]}, tac);
        conv_check((conv_case){2, 1, 32, 32, 1, {14, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0},
                               NULL, true, true, "Relu", 0, 0}, tac);
        conv_check((conv_case){2, 1, 8, 8, 2, {6, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
                               NULL, false, true, "Silu", 0, 0}, tac);
    }
}

/* ---------------- matrix products ---------------- */

/* y[..., m, n] = a[..., m, k] b[..., k, n] with numpy batch broadcasting. */
static void matmul_naive(int ra, const int64_t *ad, const float *a, int rb, const int64_t *bd,
                         const float *b, int ry, const int64_t *yd, float *y) {
    int64_t m = yd[ry - 2], n = yd[ry - 1], k = ad[ra - 1];
    int64_t batch = numel(ry - 2, yd);
    for (int64_t bi = 0; bi < batch; bi++) {
        int64_t rem = bi, ao = 0, bo = 0, as = m * k, bs = k * n;
        for (int d = ry - 3; d >= 0; d--) {
            int64_t idx = rem % yd[d];
            rem /= yd[d];
            int da = d - (ry - ra), db = d - (ry - rb);
            if (da >= 0) {
                if (ad[da] != 1)
                    ao += idx * as;
                as *= ad[da];
            }
            if (db >= 0) {
                if (bd[db] != 1)
                    bo += idx * bs;
                bs *= bd[db];
            }
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0;
                for (int64_t p = 0; p < k; p++)
                    acc += (double)a[ao + i * k + p] * b[bo + p * n + j];
                y[bi * m * n + i * n + j] = (float)acc;
            }
    }
}

static void matmul_check(int ra, const int64_t *ad, int rb, const int64_t *bd, bool bias,
                         int act_i, const char *tactic) {
    bool fused = bias || act_i > 0;
    int ry = ra > rb ? ra : rb;
    int64_t yd[KILN_MAX_DIMS];
    for (int i = 0; i < ry - 2; i++) {
        int ia = i - (ry - ra), ib = i - (ry - rb);
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
        yd[i] = da > db ? da : db;
    }
    yd[ry - 2] = ad[ra - 2], yd[ry - 1] = bd[rb - 1];
    int64_t nn = yd[ry - 1], ny = numel(ry, yd), biasd[1] = {nn};
    int n_in = fused ? 3 : 2;
    one o = one_node("MatMul", fused ? "kiln" : "", n_in);
    if (act_i > 0) {
        KT_OK(kn_node_set_string(o.node, "activation", act_names[act_i]));
        KT_OK(kn_node_set_float(o.node, "alpha", act_alpha[act_i]));
        KT_OK(kn_node_set_float(o.node, "beta", act_beta[act_i]));
    }
    float *a = rand_buf(numel(ra, ad)), *b = rand_buf(numel(rb, bd));
    float *bi = bias ? rand_buf(nn) : NULL, *y = rand_buf(ny), *ref = rand_buf(ny);
    kb_tensor in[3] = {tensor(a, ra, ad), tensor(b, rb, bd), tensor(bi, 1, biasd)};
    kb_tensor ot = tensor(y, ry, yd);
    const kb_kernel *k = kb_cpu_kernel_find(fused ? "kiln" : "", "MatMul", tactic);
    KT_CHECK(k != NULL);
    if (k && run_kernel(k, o.node, in, n_in, &ot, 2u, 2)) {
        matmul_naive(ra, ad, a, rb, bd, b, ry, yd, ref);
        kb_act act = kb_act_parse(act_names[act_i]);
        for (int64_t i = 0; i < ny; i++)
            ref[i] = kb_act_apply(act, ref[i] + (bi ? bi[i % nn] : 0.f), act_alpha[act_i],
                                  act_beta[act_i]);
        char what[96];
        snprintf(what, sizeof what, "MatMul %s rank %d x %d bias %d act '%s'", tactic, ra, rb,
                 bias, act_names[act_i]);
        KT_REL(y, ref, ny, what);
    } else {
        KT_CHECK(!"matmul not supported");
    }
    kn_aligned_free(a), kn_aligned_free(b), kn_aligned_free(bi), kn_aligned_free(y);
    kn_aligned_free(ref);
    kn_net_free(o.net);
}

static void test_matmul(void) {
    const char *tactics[] = {"dnnl", "dnnl_packed"};
    for (int t = 0; t < 2; t++) {
        const char *tac = tactics[t];
        int64_t a1[] = {5, 7}, b1[] = {7, 3};
        matmul_check(2, a1, 2, b1, false, 0, tac);
        int64_t a2[] = {2, 3, 5, 7}, b2[] = {7, 4};
        matmul_check(4, a2, 2, b2, false, 0, tac);
        int64_t a3[] = {3, 1, 5, 7}, b3[] = {2, 7, 6};
        matmul_check(4, a3, 3, b3, false, 0, tac);
        int64_t a4[] = {2, 3, 17, 33}, b4[] = {2, 3, 33, 19};
        matmul_check(4, a4, 4, b4, false, 0, tac);
        int64_t a5[] = {1, 130, 96}, b5[] = {96, 200};
        matmul_check(3, a5, 2, b5, true, 0, tac);
        int64_t a6[] = {9, 1}, b6[] = {1, 4};
        matmul_check(2, a6, 2, b6, false, 0, tac);
        for (int act = 1; act < (int)KN_ARRAY_LEN(act_names); act++) {
            int64_t a7[] = {2, 6, 24}, b7[] = {24, 10};
            matmul_check(3, a7, 2, b7, act % 2 == 1, act, tac);
        }
    }
}

/* The sgemm tactics (k_fast_sgemm.c: one library call, kiln's epilogue):
 * B without batch dims only; 2 threads, so the larger products run in
 * column slabs (widths not a multiple of 16 at the edge). */
static void test_sgemm_tactics(void) {
    const char *tactics[] = {"sgemm", "blas"};
    for (int t = 0; t < 2; t++) {
        const char *tac = tactics[t];
        if (!kb_cpu_kernel_find("", "MatMul", tac)) /* "blas": built without OpenBLAS */
            continue;
        int64_t a1[] = {5, 7}, b1[] = {7, 3};
        matmul_check(2, a1, 2, b1, false, 0, tac);
        int64_t a2[] = {2, 3, 5, 7}, b2[] = {7, 4};
        matmul_check(4, a2, 2, b2, false, 0, tac);
        int64_t a5[] = {1, 130, 96}, b5[] = {96, 200};
        matmul_check(3, a5, 2, b5, true, 0, tac);
        int64_t a6[] = {2, 64, 96}, b6[] = {1, 96, 301};
        matmul_check(3, a6, 3, b6, true, 8 /* Gelu */, tac);
        matmul_check(3, a6, 3, b6, true, 9 /* GeluTanh */, tac);
        for (int act = 1; act < (int)KN_ARRAY_LEN(act_names); act++) {
            int64_t a7[] = {2, 6, 24}, b7[] = {24, 10};
            matmul_check(3, a7, 2, b7, act % 2 == 1, act, tac);
        }
    }
}

typedef struct gemm_case {
    int64_t m, k, n;
    int ta, tb;
    float alpha, beta;
    int c_rank;
    int64_t c_dims[2];
    int act;
} gemm_case;

static void gemm_check(gemm_case g, const char *tactic) {
    bool fused = g.act > 0;
    int n_in = g.c_rank >= 0 ? 3 : 2;
    one o = one_node("Gemm", fused ? "kiln" : "", n_in);
    KT_OK(kn_node_set_int(o.node, "transA", g.ta));
    KT_OK(kn_node_set_int(o.node, "transB", g.tb));
    KT_OK(kn_node_set_float(o.node, "alpha", g.alpha));
    KT_OK(kn_node_set_float(o.node, "beta", g.beta));
    if (fused) {
        KT_OK(kn_node_set_string(o.node, "activation", act_names[g.act]));
        KT_OK(kn_node_set_float(o.node, "alpha_act", act_alpha[g.act]));
        KT_OK(kn_node_set_float(o.node, "beta_act", act_beta[g.act]));
    }
    int64_t ad[2] = {g.ta ? g.k : g.m, g.ta ? g.m : g.k}, bd[2] = {g.tb ? g.n : g.k, g.tb ? g.k : g.n};
    int64_t yd[2] = {g.m, g.n};
    float *a = rand_buf(g.m * g.k), *b = rand_buf(g.k * g.n), *y = rand_buf(g.m * g.n);
    float *ref = rand_buf(g.m * g.n);
    float *c = g.c_rank >= 0 ? rand_buf(numel(g.c_rank, g.c_dims)) : NULL;
    kb_tensor in[3] = {tensor(a, 2, ad), tensor(b, 2, bd), tensor(c, g.c_rank, g.c_dims)};
    kb_tensor ot = tensor(y, 2, yd);
    const kb_kernel *k = kb_cpu_kernel_find(fused ? "kiln" : "", "Gemm", tactic);
    KT_CHECK(k != NULL);
    if (k && run_kernel(k, o.node, in, n_in, &ot, 2u, 2)) {
        kb_act act = kb_act_parse(act_names[g.act]);
        int64_t cm = g.c_rank == 2 ? g.c_dims[0] : 1, cn = g.c_rank >= 1 ? g.c_dims[g.c_rank - 1] : 1;
        for (int64_t i = 0; i < g.m; i++)
            for (int64_t j = 0; j < g.n; j++) {
                double acc = 0;
                for (int64_t p = 0; p < g.k; p++)
                    acc += (double)a[g.ta ? p * g.m + i : i * g.k + p] *
                           b[g.tb ? j * g.k + p : p * g.n + j];
                acc *= g.alpha;
                if (c)
                    acc += g.beta * c[(cm > 1 ? i : 0) * cn + (cn > 1 ? j : 0)];
                ref[i * g.n + j] = kb_act_apply(act, (float)acc, act_alpha[g.act], act_beta[g.act]);
            }
        char what[96];
        snprintf(what, sizeof what, "Gemm %s tA%d tB%d alpha %g beta %g C rank %d act '%s'", tactic,
                 g.ta, g.tb, g.alpha, g.beta, g.c_rank, act_names[g.act]);
        KT_REL(y, ref, g.m * g.n, what);
    } else {
        KT_CHECK(!"gemm not supported");
    }
    kn_aligned_free(a), kn_aligned_free(b), kn_aligned_free(c), kn_aligned_free(y);
    kn_aligned_free(ref);
    kn_net_free(o.net);
}

static void test_gemm(void) {
    const char *tactics[] = {"dnnl", "dnnl_packed"};
    for (int t = 0; t < 2; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_check((gemm_case){13, 21, 9, ta, tb, 1.f, 1.f, 1, {9, 0}, 0}, tactics[t]);
                gemm_check((gemm_case){13, 21, 9, ta, tb, 0.5f, 2.f, 2, {13, 9}, 0}, tactics[t]);
                gemm_check((gemm_case){13, 21, 9, ta, tb, 1.f, 0.5f, 2, {13, 1}, 0}, tactics[t]);
                gemm_check((gemm_case){13, 21, 9, ta, tb, 2.f, 1.f, 0, {0, 0}, 0}, tactics[t]);
                gemm_check((gemm_case){13, 21, 9, ta, tb, 1.f, 1.f, -1, {0, 0}, 0}, tactics[t]);
                gemm_check((gemm_case){4, 64, 33, ta, tb, 1.f, 1.f, 2, {1, 33}, 1 + 3 * ta + tb},
                           tactics[t]);
            }
    for (int act = 1; act < (int)KN_ARRAY_LEN(act_names); act++)
        gemm_check((gemm_case){8, 40, 24, 0, 1, 1.f, 1.f, 1, {24, 0}, act}, "dnnl_packed");
}

/* ---------------- what the tactics refuse ---------------- */

static void test_rejects(void) {
    const kb_kernel *k = kb_cpu_kernel_find("", "Conv", "dnnl");
    KT_CHECK(k && k->supports);
    if (!k)
        return;
    one o = one_node("Conv", "", 2);
    float w[1] = {1.f};
    kn_tinfo in[2], out;
    memset(in, 0, sizeof in), memset(&out, 0, sizeof out);
    int64_t xd[5] = {1, 2, 4, 4, 4}, wd[5] = {3, 2, 1, 1, 1};
    in[0].dtype = in[1].dtype = out.dtype = KILN_DTYPE_FLOAT;
    in[0].rank = in[1].rank = out.rank = 4;
    memcpy(in[0].dims, xd, sizeof xd), memcpy(in[1].dims, wd, sizeof wd);
    memcpy(out.dims, xd, sizeof xd);
    out.dims[1] = 3;
    in[1].value = w;
    KT_CHECK(k->supports(o.node, in, 2, &out, 1));    /* 2-D float, constant weights */
    in[1].value = NULL;
    KT_CHECK(k->supports(o.node, in, 2, &out, 1));    /* run-time weights: reordered per run */
    in[1].value = w;
    in[0].dtype = KILN_DTYPE_FLOAT16;
    KT_CHECK(!k->supports(o.node, in, 2, &out, 1));   /* not float */
    in[0].dtype = KILN_DTYPE_FLOAT;
    in[0].rank = in[1].rank = out.rank = 5;           /* 3-D convolution */
    KT_CHECK(!k->supports(o.node, in, 2, &out, 1));
    kn_net_free(o.net);

    const kb_kernel *mm = kb_cpu_kernel_find("", "MatMul", "dnnl");
    KT_CHECK(mm != NULL);
    if (mm) {
        one m = one_node("MatMul", "", 2);
        kn_tinfo a[2], y;
        memset(a, 0, sizeof a), memset(&y, 0, sizeof y);
        a[0].dtype = a[1].dtype = y.dtype = KILN_DTYPE_INT64;
        a[0].rank = a[1].rank = y.rank = 2;
        a[0].dims[0] = 2, a[0].dims[1] = 3, a[1].dims[0] = 3, a[1].dims[1] = 4;
        y.dims[0] = 2, y.dims[1] = 4;
        KT_CHECK(!mm->supports(m.node, a, 2, &y, 1)); /* integers */
        a[0].dtype = a[1].dtype = y.dtype = KILN_DTYPE_FLOAT;
        KT_CHECK(mm->supports(m.node, a, 2, &y, 1));
        a[1].rank = 1, a[1].dims[0] = 3, y.rank = 1, y.dims[0] = 2; /* vector operand */
        KT_CHECK(!mm->supports(m.node, a, 2, &y, 1));
        kn_net_free(m.net);
    }
}

/* ---------------- two contexts on two threads ---------------- */

typedef struct thread_job {
    const kb_kernel *k;
    const kn_node *node;
    void *state, *inst, *ws;
    size_t wsz;
    kb_tensor in[3], out;
    int threads, iters;
    kiln_status st;
} thread_job;

static void *thread_main(void *p) {
    thread_job *j = p;
    for (int i = 0; i < j->iters && j->st == KILN_OK; i++) {
        kb_run r = {.node = j->node, .state = j->state, .inst = j->inst, .n_in = 3, .in = j->in,
                    .n_out = 1, .out = &j->out, .workspace = j->ws, .workspace_size = j->wsz,
                    .threads = j->threads};
        j->st = j->k->run(&r);
    }
    return NULL;
}

static void test_threads(void) {
    /* one engine-level state, two per-context instances running at once */
    conv_case cc = {2, 2, 32, 48, 1, {20, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL,
                    true, false, NULL, 0, 0};
    int64_t xd[4] = {2, 32, 20, 20}, wd[4] = {48, 32, 3, 3}, yd[4] = {2, 48, 20, 20}, bd[1] = {48};
    int64_t y[2] = {20, 20};
    one o = one_node("Conv", "", 3);
    KT_OK(kn_node_set_ints(o.node, "pads", (int64_t[]){1, 1, 1, 1}, 4));
    const kb_kernel *k = kb_cpu_kernel_find("", "Conv", "dnnl");
    float *x = rand_buf(numel(4, xd)), *w = rand_buf(numel(4, wd)), *b = rand_buf(48);
    float *ref = rand_buf(numel(4, yd));
    conv_naive(&cc, y, x, w, b, NULL, ref);
    void *state = NULL;
    KT_OK(k->init(o.node, &state));
    thread_job jobs[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        thread_job *j = &jobs[t];
        memset(j, 0, sizeof *j);
        j->k = k, j->node = o.node, j->state = state, j->threads = t + 1, j->iters = 20;
        j->in[0] = tensor(x, 4, xd), j->in[1] = tensor(w, 4, wd), j->in[2] = tensor(b, 1, bd);
        j->out = tensor(rand_buf(numel(4, yd)), 4, yd);
        KT_OK(k->prepare(state, o.node, j->in, 3, &j->out, 1, &j->inst, &j->wsz));
        j->ws = kn_aligned_alloc(j->wsz ? j->wsz : 64);
    }
    for (int t = 0; t < 2; t++)
        pthread_create(&th[t], NULL, thread_main, &jobs[t]);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++) {
        KT_OK(jobs[t].st);
        KT_REL((float *)jobs[t].out.data, ref, numel(4, yd), "two contexts at once");
        k->release(jobs[t].inst);
        kn_aligned_free(jobs[t].ws);
        kn_aligned_free(jobs[t].out.data);
    }
    k->fini(state);
    kn_aligned_free(x), kn_aligned_free(w), kn_aligned_free(b), kn_aligned_free(ref);
    kn_net_free(o.net);
}

/* ---------------- against the reference kernels, through the executor ---------------- */

/* Run net (one node, index node) with "ref" and with `tactic` on the same
 * inputs and compare output 0. */
static void vs_ref(kiln_network *net, int node, int n_data, const void *const *data,
                   const int *rank, const int64_t (*dims)[KILN_MAX_DIMS], const char *tactic,
                   const char *what) {
    kt_exec a, b;
    kn_free(net->nodes[node].tactic);
    net->nodes[node].tactic = NULL;
    kiln_status sa = kt_exec_run(&a, net, data, rank, dims);
    KT_OK(sa);
    kn_tinfo ta, tb;
    const float *ya = sa == KILN_OK ? kt_exec_output(&a, 0, &ta) : NULL;
    net->nodes[node].tactic = kn_strdup(tactic);
    kiln_status sb = kt_exec_run(&b, net, data, rank, dims);
    KT_OK(sb);
    const float *yb = sb == KILN_OK ? kt_exec_output(&b, 0, &tb) : NULL;
    (void)n_data;
    if (ya && yb) {
        KT_CHECK(ta.rank == tb.rank && memcmp(ta.dims, tb.dims, sizeof ta.dims) == 0);
        char w[160];
        snprintf(w, sizeof w, "%s (%s vs ref)", what, tactic);
        KT_REL(yb, ya, kn_numel(ta.rank, ta.dims), w);
    }
    kt_exec_free(&a);
    kt_exec_free(&b);
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

static void test_vs_ref(void) {
    static const char *const conv_tactics[] = {"dnnl", "dnnl_nchw"};
    /* kiln::Conv: groups, stride, dilation, asymmetric pads, bias, residual, each activation */
    for (size_t a = 0; a < KN_ARRAY_LEN(act_names); a++)
        for (int t = 0; t < 2; t++) {
            kiln_network *net;
            KT_OK(kiln_network_create(&net));
            int64_t xd[4] = {2, 6, 13, 11}, wd[4] = {8, 3, 3, 3}, bd[1] = {8}, zd[4] = {2, 8, 6, 4};
            float *x = rand_buf(2 * 6 * 13 * 11), *w = rand_buf(8 * 3 * 9), *bi = rand_buf(8);
            float *z = rand_buf(2 * 8 * 6 * 4);
            KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, xd, NULL));
            KT_OK(kiln_network_add_input(net, "z", KILN_DTYPE_FLOAT, 4, zd, NULL));
            KT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT, 4, wd, w, sizeof(float) * 8 * 27));
            KT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT, 1, bd, bi, sizeof(float) * 8));
            int node;
            KT_OK(kiln_network_add_node(net, "c", "Conv", "kiln", 1, 4, NAMES("x", "w", "b", "z"), 1,
                                        NAMES("y"), &node));
            KT_OK(kiln_network_set_attr_int(net, node, "group", 2));
            KT_OK(kiln_network_set_attr_ints(net, node, "strides", (int64_t[]){2, 2}, 2));
            KT_OK(kiln_network_set_attr_ints(net, node, "dilations", (int64_t[]){1, 2}, 2));
            KT_OK(kiln_network_set_attr_ints(net, node, "pads", (int64_t[]){1, 0, 0, 1}, 4));
            KT_OK(kiln_network_set_attr_string(net, node, "activation", act_names[a]));
            if (act_alpha[a] != 0.f || act_beta[a] != 0.f) {
                KT_OK(kiln_network_set_attr_float(net, node, "alpha", act_alpha[a]));
                KT_OK(kiln_network_set_attr_float(net, node, "beta", act_beta[a]));
            }
            KT_OK(kiln_network_mark_output(net, "y"));
            const void *data[2] = {x, z};
            int rank[2] = {4, 4};
            int64_t dims[2][KILN_MAX_DIMS] = {{2, 6, 13, 11}, {2, 8, 6, 4}};
            char what[64];
            snprintf(what, sizeof what, "kiln::Conv act '%s'", act_names[a]);
            vs_ref(net, node, 2, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims,
                   conv_tactics[t], what);
            kiln_network_destroy(net);
            kn_aligned_free(x), kn_aligned_free(w), kn_aligned_free(bi), kn_aligned_free(z);
        }
    /* Conv whose weights are a graph input (reordered on every run) */
    for (int t = 0; t < 2; t++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        int64_t xd[4] = {1, 4, 9, 9}, wd[4] = {6, 4, 3, 3};
        float *x = rand_buf(4 * 81), *w = rand_buf(6 * 36);
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, xd, NULL));
        KT_OK(kiln_network_add_input(net, "w", KILN_DTYPE_FLOAT, 4, wd, NULL));
        int node;
        KT_OK(kiln_network_add_node(net, "c", "Conv", "", 17, 2, NAMES("x", "w"), 1, NAMES("y"),
                                    &node));
        KT_OK(kiln_network_set_attr_ints(net, node, "pads", (int64_t[]){1, 1, 1, 1}, 4));
        KT_OK(kiln_network_mark_output(net, "y"));
        const void *data[2] = {x, w};
        int rank[2] = {4, 4};
        int64_t dims[2][KILN_MAX_DIMS] = {{1, 4, 9, 9}, {6, 4, 3, 3}};
        vs_ref(net, node, 2, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, conv_tactics[t],
               "Conv with run-time weights");
        /* new weight values, same context shapes: the next run must use them */
        for (int i = 0; i < 6 * 36; i++)
            w[i] = -w[i] * 0.5f;
        vs_ref(net, node, 2, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, conv_tactics[t],
               "Conv with run-time weights, changed");
        kiln_network_destroy(net);
        kn_aligned_free(x), kn_aligned_free(w);
    }
    /* ONNX Conv, 1-D, SAME_UPPER, no bias */
    for (int t = 0; t < 2; t++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        int64_t xd[3] = {3, 4, 17}, wd[3] = {5, 4, 4};
        float *x = rand_buf(3 * 4 * 17), *w = rand_buf(5 * 4 * 4);
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, xd, NULL));
        KT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT, 3, wd, w, sizeof(float) * 80));
        int node;
        KT_OK(kiln_network_add_node(net, "c", "Conv", "", 17, 2, NAMES("x", "w"), 1, NAMES("y"),
                                    &node));
        KT_OK(kiln_network_set_attr_string(net, node, "auto_pad", "SAME_UPPER"));
        KT_OK(kiln_network_set_attr_ints(net, node, "strides", (int64_t[]){3}, 1));
        KT_OK(kiln_network_mark_output(net, "y"));
        const void *data[1] = {x};
        int rank[1] = {3};
        int64_t dims[1][KILN_MAX_DIMS] = {{3, 4, 17}};
        vs_ref(net, node, 1, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, conv_tactics[t],
               "Conv 1-D SAME_UPPER");
        kiln_network_destroy(net);
        kn_aligned_free(x), kn_aligned_free(w);
    }
    /* MatMul: batched activations x constant weights (both tactics), and two
     * run-time operands with batch broadcasting ("dnnl") */
    for (int t = 0; t < 4; t++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        int64_t ad[3] = {2, 37, 48}, bd[2] = {48, 29}, bd3[3] = {1, 48, 29}, biasd[1] = {29};
        float *a = rand_buf(2 * 37 * 48), *b = rand_buf(48 * 29), *bi = rand_buf(29);
        KT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_FLOAT, 3, ad, NULL));
        if (t < 2)
            KT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT, 2, bd, b, sizeof(float) * 48 * 29));
        else
            KT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_FLOAT, 3, bd3, NULL));
        KT_OK(kiln_network_add_constant(net, "bias", KILN_DTYPE_FLOAT, 1, biasd, bi, sizeof(float) * 29));
        int node;
        KT_OK(kiln_network_add_node(net, "m", "MatMul", "kiln", 1, 3, NAMES("a", "b", "bias"), 1,
                                    NAMES("y"), &node));
        KT_OK(kiln_network_set_attr_string(net, node, "activation", "Gelu"));
        KT_OK(kiln_network_mark_output(net, "y"));
        const void *data[2] = {a, b};
        int rank[2] = {3, 3};
        int64_t dims[2][KILN_MAX_DIMS] = {{2, 37, 48}, {1, 48, 29}};
        vs_ref(net, node, t < 2 ? 1 : 2, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims,
               t % 2 ? "dnnl_packed" : "dnnl",
               t < 2 ? "kiln::MatMul bias Gelu" : "kiln::MatMul bias Gelu, run-time B");
        kiln_network_destroy(net);
        kn_aligned_free(a), kn_aligned_free(b), kn_aligned_free(bi);
    }
    /* Gemm transB with full C, alpha, beta; kiln::Gemm with a row bias and Relu */
    for (int t = 0; t < 4; t++) {
        bool fused = t >= 2;
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        int64_t ad[2] = {9, 70}, bd[2] = {33, 70}, cd[2] = {9, 33}, cr[1] = {33};
        float *a = rand_buf(9 * 70), *b = rand_buf(33 * 70), *c = rand_buf(9 * 33);
        KT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_FLOAT, 2, ad, NULL));
        KT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT, 2, bd, b, sizeof(float) * 33 * 70));
        KT_OK(kiln_network_add_constant(net, "c", KILN_DTYPE_FLOAT, fused ? 1 : 2, fused ? cr : cd,
                                        c, sizeof(float) * (fused ? 33 : 9 * 33)));
        int node;
        KT_OK(kiln_network_add_node(net, "g", "Gemm", fused ? "kiln" : "", fused ? 1 : 17, 3,
                                    NAMES("a", "b", "c"), 1, NAMES("y"), &node));
        KT_OK(kiln_network_set_attr_int(net, node, "transB", 1));
        if (!fused) {
            KT_OK(kiln_network_set_attr_float(net, node, "alpha", 0.75f));
            KT_OK(kiln_network_set_attr_float(net, node, "beta", -1.5f));
        } else {
            KT_OK(kiln_network_set_attr_string(net, node, "activation", "Relu"));
        }
        KT_OK(kiln_network_mark_output(net, "y"));
        const void *data[1] = {a};
        int rank[1] = {2};
        int64_t dims[1][KILN_MAX_DIMS] = {{9, 70}};
        vs_ref(net, node, 1, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims,
               t % 2 ? "dnnl_packed" : "dnnl", fused ? "kiln::Gemm Relu" : "Gemm alpha beta C");
        kiln_network_destroy(net);
        kn_aligned_free(a), kn_aligned_free(b), kn_aligned_free(c);
    }
}

/* One node with input "x" (shape xd) and constants "c1", "c2" (shapes c1d,
 * c2d; rank -1 = absent), compared with ref through the executor. The
 * caller sets attributes in `attrs`. */
typedef void (*attr_fn)(kiln_network *net, int node);

static void light_case(const char *op, int opset, int xr, const int64_t *xd, int c1r,
                       const int64_t *c1d, int c2r, const int64_t *c2d, attr_fn attrs,
                       const char *what) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    int64_t nx = kn_numel(xr, xd);
    float *x = rand_buf(nx), *c1 = NULL, *c2 = NULL;
    for (int64_t i = 0; i < nx; i += 7) /* some large values, as softmax logits have */
        x[i] *= 30.f;
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, xr, xd, NULL));
    int n_in = 1;
    if (c1r >= 0) {
        int64_t n1 = kn_numel(c1r, c1d);
        c1 = rand_buf(n1);
        KT_OK(kiln_network_add_constant(net, "c1", KILN_DTYPE_FLOAT, c1r, c1d, c1,
                                        sizeof(float) * (size_t)n1));
        n_in = 2;
    }
    if (c2r >= 0) {
        int64_t n2 = kn_numel(c2r, c2d);
        c2 = rand_buf(n2);
        KT_OK(kiln_network_add_constant(net, "c2", KILN_DTYPE_FLOAT, c2r, c2d, c2,
                                        sizeof(float) * (size_t)n2));
        n_in = 3;
    }
    int node;
    KT_OK(kiln_network_add_node(net, "n", op, "", opset, n_in, NAMES("x", "c1", "c2"), 1,
                                NAMES("y"), &node));
    if (attrs)
        attrs(net, node);
    KT_OK(kiln_network_mark_output(net, "y"));
    const void *data[1] = {x};
    int rank[1] = {xr};
    int64_t dims[1][KILN_MAX_DIMS];
    memcpy(dims[0], xd, sizeof(int64_t) * (size_t)xr);
    /* the tactic must accept the node as the builder would see it */
    const kb_kernel *k = kb_cpu_kernel_find("", op, "dnnl");
    KT_CHECK(k != NULL);
    vs_ref(net, node, 1, data, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, "dnnl", what);
    kiln_network_destroy(net);
    kn_aligned_free(x), kn_aligned_free(c1), kn_aligned_free(c2);
}

static void a_axis1(kiln_network *net, int node) { KT_OK(kiln_network_set_attr_int(net, node, "axis", 1)); }
static void a_axism2(kiln_network *net, int node) {
    KT_OK(kiln_network_set_attr_int(net, node, "axis", -2));
    KT_OK(kiln_network_set_attr_float(net, node, "epsilon", 1e-3f));
}
static void a_pool_k3s2p1(kiln_network *net, int node) {
    KT_OK(kiln_network_set_attr_ints(net, node, "kernel_shape", (int64_t[]){3, 3}, 2));
    KT_OK(kiln_network_set_attr_ints(net, node, "strides", (int64_t[]){2, 2}, 2));
    KT_OK(kiln_network_set_attr_ints(net, node, "pads", (int64_t[]){1, 1, 1, 1}, 4));
}
static void a_pool_incl(kiln_network *net, int node) {
    a_pool_k3s2p1(net, node);
    KT_OK(kiln_network_set_attr_int(net, node, "count_include_pad", 1));
}
static void a_pool_ceil(kiln_network *net, int node) {
    KT_OK(kiln_network_set_attr_ints(net, node, "kernel_shape", (int64_t[]){3, 2}, 2));
    KT_OK(kiln_network_set_attr_ints(net, node, "strides", (int64_t[]){2, 2}, 2));
    KT_OK(kiln_network_set_attr_int(net, node, "ceil_mode", 1));
}
static void a_pool_dil(kiln_network *net, int node) {
    KT_OK(kiln_network_set_attr_ints(net, node, "kernel_shape", (int64_t[]){2, 3}, 2));
    KT_OK(kiln_network_set_attr_ints(net, node, "dilations", (int64_t[]){2, 2}, 2));
    KT_OK(kiln_network_set_attr_ints(net, node, "pads", (int64_t[]){0, 1, 1, 2}, 4));
}
static void a_pool_same(kiln_network *net, int node) {
    KT_OK(kiln_network_set_attr_ints(net, node, "kernel_shape", (int64_t[]){4}, 1));
    KT_OK(kiln_network_set_attr_ints(net, node, "strides", (int64_t[]){3}, 1));
    KT_OK(kiln_network_set_attr_string(net, node, "auto_pad", "SAME_UPPER"));
}
static void a_pool_3d(kiln_network *net, int node) {
    KT_OK(kiln_network_set_attr_ints(net, node, "kernel_shape", (int64_t[]){2, 2, 2}, 3));
    KT_OK(kiln_network_set_attr_ints(net, node, "strides", (int64_t[]){2, 2, 2}, 3));
}

static void test_light_ops(void) {
    int64_t s4[4] = {2, 3, 5, 17}, s3[3] = {2, 7, 4}, s3b[3] = {3, 4, 5};
    light_case("Softmax", 13, 4, s4, -1, NULL, -1, NULL, NULL, "Softmax axis -1");
    light_case("Softmax", 13, 3, s3, -1, NULL, -1, NULL, a_axis1, "Softmax axis 1");
    light_case("Softmax", 11, 3, s3b, -1, NULL, -1, NULL, a_axis1, "Softmax opset 11 (2-D view)");
    int64_t l3[3] = {2, 5, 48}, c48[1] = {48}, l4[4] = {2, 5, 6, 8}, c68[2] = {6, 8};
    light_case("LayerNormalization", 17, 3, l3, 1, c48, 1, c48, NULL, "LayerNorm axis -1");
    light_case("LayerNormalization", 17, 4, l4, 2, c68, -1, NULL, a_axism2, "LayerNorm axis -2 no bias");
    int64_t p4[4] = {2, 4, 13, 12}, p4b[4] = {1, 3, 10, 11}, p3[3] = {2, 3, 20}, p5[5] = {1, 2, 4, 6, 5};
    light_case("MaxPool", 12, 4, p4, -1, NULL, -1, NULL, a_pool_k3s2p1, "MaxPool 3x3/2 pad 1");
    light_case("MaxPool", 12, 4, p4b, -1, NULL, -1, NULL, a_pool_ceil, "MaxPool ceil_mode");
    light_case("MaxPool", 12, 4, p4, -1, NULL, -1, NULL, a_pool_dil, "MaxPool dilated");
    light_case("MaxPool", 12, 3, p3, -1, NULL, -1, NULL, a_pool_same, "MaxPool 1-D SAME_UPPER");
    light_case("MaxPool", 12, 5, p5, -1, NULL, -1, NULL, a_pool_3d, "MaxPool 3-D");
    light_case("AveragePool", 11, 4, p4, -1, NULL, -1, NULL, a_pool_k3s2p1, "AveragePool exclude pad");
    light_case("AveragePool", 11, 4, p4, -1, NULL, -1, NULL, a_pool_incl, "AveragePool include pad");
    light_case("AveragePool", 11, 4, p4b, -1, NULL, -1, NULL, a_pool_ceil, "AveragePool ceil_mode");
    light_case("AveragePool", 11, 3, p3, -1, NULL, -1, NULL, a_pool_same, "AveragePool 1-D SAME_UPPER");
    light_case("GlobalAveragePool", 1, 4, p4, -1, NULL, -1, NULL, NULL, "GlobalAveragePool");
    light_case("GlobalMaxPool", 1, 4, p4b, -1, NULL, -1, NULL, NULL, "GlobalMaxPool");
    light_case("GlobalAveragePool", 1, 5, p5, -1, NULL, -1, NULL, NULL, "GlobalAveragePool 3-D");
}

/* Run-time weights change between two runs of one prepared instance: the
 * packed tactics must reorder them again, not reuse the first pack. */
static void test_weights_change(void) {
    const kb_kernel *k = kb_cpu_kernel_find("", "MatMul", "dnnl_packed");
    KT_CHECK(k != NULL);
    if (!k)
        return;
    one o = one_node("MatMul", "", 2);
    int64_t ad[2] = {7, 40}, bd[2] = {40, 24}, yd[2] = {7, 24};
    float *a = rand_buf(7 * 40), *b = rand_buf(40 * 24), *y = rand_buf(7 * 24), *ref = rand_buf(7 * 24);
    kb_tensor in[2] = {tensor(a, 2, ad), tensor(b, 2, bd)}, out = tensor(y, 2, yd);
    void *inst = NULL, *ws = NULL;
    size_t wsz = 0;
    KT_OK(k->prepare(NULL, o.node, in, 2, &out, 1, &inst, &wsz)); /* host NULL: not constant */
    ws = kn_aligned_alloc(wsz ? wsz : 64);
    kb_run r = {.node = o.node, .inst = inst, .n_in = 2, .in = in, .n_out = 1, .out = &out,
                .workspace = ws, .workspace_size = wsz, .threads = 2};
    for (int pass = 0; pass < 2; pass++) {
        KT_OK(k->run(&r));
        matmul_naive(2, ad, a, 2, bd, b, 2, yd, ref);
        KT_REL(y, ref, 7 * 24, pass ? "MatMul dnnl_packed, B changed" : "MatMul dnnl_packed");
        for (int i = 0; i < 40 * 24; i++)
            b[i] = 1.f - 2.f * b[i];
    }
    k->release(inst);
    kn_aligned_free(ws);
    kn_aligned_free(a), kn_aligned_free(b), kn_aligned_free(y), kn_aligned_free(ref);
    kn_net_free(o.net);
}

static void test_versions(void) {
    const char *v = kb_cpu_library_versions();
    printf("libraries: %s\n", v);
    KT_CHECK(strncmp(v, "dnnl=", 5) == 0);
    KT_CHECK(strstr(v, "openblas=0.") != NULL);
}

int main(void) {
    rng = kt_seed("test_fast", 88172645463325252ull);
    kiln_set_logger(NULL, NULL, KILN_LOG_WARNING);
    test_versions();
    const kb_kernel *k = kb_cpu_kernel_find("", "Conv", "dnnl");
    if (!k) {
        printf("built without oneDNN: nothing to test\n");
        return kt_finish();
    }
    test_conv();
    test_matmul();
    test_sgemm_tactics();
    test_gemm();
    lazy_weights = true; /* weights packed at the first run instead */
    test_conv();
    test_matmul();
    test_gemm();
    lazy_weights = false;
    test_vs_ref();
    test_light_ops();
    test_weights_change();
    test_rejects();
    test_threads();
    return kt_finish();
}
