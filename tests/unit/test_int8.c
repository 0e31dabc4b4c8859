/* test_int8.c - kiln's quantized layers on the CPU: kiln::QConv and
 * kiln::QMatMul kernels against a naive integer computation written here
 * (bit-exact: the same integer sums and the graph/quant.h rounding: float
 * products and division, round half to even, saturation), the oneDNN INT8
 * tactic against the reference (bit-exact), and the Q/DQ pass: chains
 * become one layer, an op outside Q/DQ stays float, QLinearConv /
 * MatMulInteger map onto the layers. Data from a fixed-seed LCG. */
#include <string.h>

#include "backends/backend.h"
#include "builder/builder.h"
#include "builder/passes.h"
#include "graph/fused.h"
#include "graph/qlayer.h"
#include "backends/cpu/k_int8.h"
#include "kiln/kiln_builder.h"
#include "test.h"
#include "kt_exec.h"

#include "kt_passes.h"

static uint32_t lcg = 2026u;
static int rnd(int lo, int hi) { /* [lo, hi] */
    lcg = lcg * 1664525u + 1013904223u;
    return lo + (int)((lcg >> 8) % (uint32_t)(hi - lo + 1));
}

static void add_q(kiln_network *net, const char *name, kiln_dtype t, int rank, const int64_t *dims,
                  int lo, int hi, void *keep) {
    int64_t n = kn_numel(rank, dims);
    uint8_t *v = keep ? keep : malloc((size_t)n + 1);
    for (int64_t i = 0; i < n; i++)
        v[i] = t == KILN_DTYPE_UINT8 ? (uint8_t)rnd(lo < 0 ? 0 : lo, hi) : (uint8_t)(int8_t)rnd(lo, hi);
    KT_OK(kiln_network_add_constant(net, name, t, rank, dims, v, (size_t)n));
    if (!keep)
        free(v);
}

static void add_f(kiln_network *net, const char *name, int64_t n, const float *v) {
    KT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_FLOAT, n == 1 ? 0 : 1, DIMS(n), v,
                                    sizeof(float) * (size_t)n));
}

static void add_zp(kiln_network *net, const char *name, kiln_dtype t, int v) {
    uint8_t b = t == KILN_DTYPE_UINT8 ? (uint8_t)v : (uint8_t)(int8_t)v;
    KT_OK(kiln_network_add_constant(net, name, t, 0, NULL, &b, 1));
}

static int32_t ld8(const void *p, kiln_dtype t, int64_t i) {
    return t == KILN_DTYPE_UINT8 ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}

/* ---------------- one layer, three ways ---------------- */

typedef struct lcase {
    const char *what;
    bool conv;
    kiln_dtype xt, yt, zt;     /* zt UNDEFINED: no residual */
    int64_t n, c, h, w, k;     /* conv: X [n, c, h, w], W [k, c/g, kh, kw]; matmul: X [n, h, c], W [c, k] */
    int kh, stride, pad, group;
    int xzp, wzp;              /* wzp != 0: per-channel w zero points (no oneDNN) */
    bool bias_b, bias_c, trans_b, w_batched;
    int n_stages;
    int64_t stages[4];
    bool dnnl;                 /* the oneDNN tactic must take it */
    bool cl;                   /* conv: channels_last (X, Z, Y [N, H, W, C]) */
} lcase;

static double q_lo(kiln_dtype t) { return t == KILN_DTYPE_UINT8 ? 0 : -128; }
static double q_hi(kiln_dtype t) { return t == KILN_DTYPE_UINT8 ? 255 : 127; }

static void run_case(const lcase *lc) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    int64_t cg = lc->c / (lc->conv ? lc->group : 1);
    int64_t xd[4], wd[4], yd[4];
    int xr, wr, yr;
    int64_t oh = 0, ow = 0;
    if (lc->conv) {
        xr = wr = yr = 4;
        if (lc->cl)
            memcpy(xd, DIMS(lc->n, lc->h, lc->w, lc->c), sizeof(int64_t) * 4);
        else
            memcpy(xd, DIMS(lc->n, lc->c, lc->h, lc->w), sizeof(int64_t) * 4);
        memcpy(wd, DIMS(lc->k, cg, lc->kh, lc->kh), sizeof(int64_t) * 4);
        oh = (lc->h + 2 * lc->pad - lc->kh) / lc->stride + 1;
        ow = (lc->w + 2 * lc->pad - lc->kh) / lc->stride + 1;
        if (lc->cl)
            memcpy(yd, DIMS(lc->n, oh, ow, lc->k), sizeof(int64_t) * 4);
        else
            memcpy(yd, DIMS(lc->n, lc->k, oh, ow), sizeof(int64_t) * 4);
    } else {
        xr = yr = 3;
        memcpy(xd, DIMS(lc->n, lc->h, lc->c), sizeof(int64_t) * 3);
        memcpy(yd, DIMS(lc->n, lc->h, lc->k), sizeof(int64_t) * 3);
        if (lc->w_batched) {
            wr = 3;
            memcpy(wd, DIMS(lc->n, lc->c, lc->k), sizeof(int64_t) * 3);
        } else {
            wr = 2;
            memcpy(wd, lc->trans_b ? DIMS(lc->k, lc->c) : DIMS(lc->c, lc->k), sizeof(int64_t) * 2);
        }
    }
    int64_t nx = kn_numel(xr, xd), nw = kn_numel(wr, wd), ny = kn_numel(yr, yd), K = lc->k;
    KT_OK(kiln_network_add_input(net, "x", lc->xt, xr, xd, NULL));
    if (lc->zt != KILN_DTYPE_UNDEFINED)
        KT_OK(kiln_network_add_input(net, "z", lc->zt, yr, yd, NULL));
    uint8_t *wv = malloc((size_t)nw);
    add_q(net, "w", KILN_DTYPE_INT8, wr, wd, -127, 127, wv);
    bool scaled = lc->yt != KILN_DTYPE_INT32;
    float xs = 0.02f, ys = 0.37f, zs = 0.05f, ws[64], cv[64];
    int8_t wz[64];
    int32_t bv[64];
    for (int64_t k = 0; k < K; k++) {
        ws[k] = 0.001f * (float)rnd(1, 40);
        wz[k] = (int8_t)(lc->wzp ? rnd(-3, 3) : 0);
        bv[k] = rnd(-3000, 3000);
        cv[k] = 0.1f * (float)rnd(-20, 20);
    }
    add_f(net, "xs", 1, &xs);
    add_zp(net, "xz", lc->xt, lc->xzp);
    add_f(net, "ws", K, ws);
    KT_OK(kiln_network_add_constant(net, "wz", KILN_DTYPE_INT8, 1, DIMS(K), wz, (size_t)K));
    add_f(net, "ys", 1, &ys);
    add_zp(net, "yz", lc->yt == KILN_DTYPE_UINT8 ? KILN_DTYPE_UINT8 : KILN_DTYPE_INT8,
           lc->yt == KILN_DTYPE_UINT8 ? 9 : -4);
    KT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_INT32, 1, DIMS(K), bv, sizeof(int32_t) * (size_t)K));
    add_f(net, "c", K, cv);
    add_f(net, "zs", 1, &zs);
    add_zp(net, "zz", lc->zt == KILN_DTYPE_INT8 ? KILN_DTYPE_INT8 : KILN_DTYPE_UINT8, lc->zt == KILN_DTYPE_INT8 ? 2 : 17);
    const char *ins[13] = {"x", scaled ? "xs" : "", "xz", "w", scaled ? "ws" : "", lc->wzp ? "wz" : "",
                           lc->yt == KILN_DTYPE_UINT8 || lc->yt == KILN_DTYPE_INT8 ? "ys" : "",
                           lc->yt == KILN_DTYPE_UINT8 || lc->yt == KILN_DTYPE_INT8 ? "yz" : "",
                           lc->bias_b ? "b" : "", lc->zt != KILN_DTYPE_UNDEFINED ? "z" : "",
                           lc->zt != KILN_DTYPE_UNDEFINED ? "zs" : "", lc->zt != KILN_DTYPE_UNDEFINED ? "zz" : "",
                           lc->bias_c ? "c" : ""};
    int nin = 13;
    while (nin > 0 && ins[nin - 1][0] == 0)
        nin--;
    int idx = -1;
    const char *outs[1] = {"y"};
    KT_OK(kiln_network_add_node(net, "layer", lc->conv ? "QConv" : "QMatMul", KN_DOMAIN_KILN, 1, nin,
                                ins, 1, outs, &idx));
    KT_OK(kiln_network_set_attr_int(net, idx, "to", lc->yt));
    if (lc->conv) {
        KT_OK(kiln_network_set_attr_ints(net, idx, "strides", DIMS(lc->stride, lc->stride), 2));
        KT_OK(kiln_network_set_attr_ints(net, idx, "pads", DIMS(lc->pad, lc->pad, lc->pad, lc->pad), 4));
        KT_OK(kiln_network_set_attr_int(net, idx, "group", lc->group));
        if (lc->cl)
            KT_OK(kiln_network_set_attr_int(net, idx, "channels_last", 1));
    } else {
        KT_OK(kiln_network_set_attr_int(net, idx, "trans_b", lc->trans_b));
    }
    float mids[1] = {0.21f};
    int64_t mz[1] = {5}, mt[1] = {KILN_DTYPE_UINT8};
    if (lc->n_stages) {
        KT_OK(kiln_network_set_attr_ints(net, idx, "stages", lc->stages, (size_t)lc->n_stages));
        KT_OK(kiln_network_set_attr_floats(net, idx, "mid_scales", mids, 1));
        KT_OK(kiln_network_set_attr_ints(net, idx, "mid_zps", mz, 1));
        KT_OK(kiln_network_set_attr_ints(net, idx, "mid_types", mt, 1));
    }
    KT_OK(kiln_network_mark_output(net, "y"));

    uint8_t *xv = malloc((size_t)nx), *zv = malloc((size_t)ny);
    for (int64_t i = 0; i < nx; i++)
        xv[i] = lc->xt == KILN_DTYPE_UINT8 ? (uint8_t)rnd(0, 255) : (uint8_t)(int8_t)rnd(-128, 127);
    for (int64_t i = 0; i < ny; i++)
        zv[i] = (uint8_t)rnd(0, 255);
    /* the naive result */
    size_t es = kiln_dtype_size(lc->yt);
    uint8_t *want = calloc((size_t)ny, es);
    kn_qepi e;
    memset(&e, 0, sizeof e);
    e.n_stages = lc->n_stages;
    for (int i = 0; i < lc->n_stages; i++)
        e.stage[i] = (int)lc->stages[i];
    e.mid_scale[0] = mids[0], e.mid_zp[0] = 5, e.mid_lo[0] = 0, e.mid_hi[0] = 255;
    for (int64_t yi = 0; yi < ny; yi++) {
        int64_t acc = 0, k;
        if (lc->conv) {
            int64_t b = yi / (K * oh * ow), r = yi % (K * oh * ow), oy, ox;
            if (lc->cl) {
                k = r % K;
                oy = r / K / ow;
                ox = (r / K) % ow;
            } else {
                k = r / (oh * ow);
                oy = (r / ow) % oh;
                ox = r % ow;
            }
            int64_t g = k / (K / lc->group);
            for (int64_t ci = 0; ci < cg; ci++)
                for (int dy = 0; dy < lc->kh; dy++)
                    for (int dx = 0; dx < lc->kh; dx++) {
                        int64_t iy = oy * lc->stride - lc->pad + dy, ix = ox * lc->stride - lc->pad + dx;
                        if (iy < 0 || iy >= lc->h || ix < 0 || ix >= lc->w)
                            continue;
                        int64_t c = g * cg + ci;
                        int64_t xi = lc->cl ? ((b * lc->h + iy) * lc->w + ix) * lc->c + c
                                            : ((b * lc->c + c) * lc->h + iy) * lc->w + ix;
                        int32_t a = ld8(xv, lc->xt, xi) - lc->xzp;
                        int32_t wq = (int8_t)wv[((k * cg + ci) * lc->kh + dy) * lc->kh + dx] - wz[k];
                        acc += (int64_t)a * wq;
                    }
        } else {
            int64_t b = yi / (lc->h * K), m = (yi / K) % lc->h;
            k = yi % K;
            for (int64_t p = 0; p < lc->c; p++) {
                int64_t wi = lc->w_batched ? (b * lc->c + p) * K + k : lc->trans_b ? k * lc->c + p : p * K + k;
                acc += (int64_t)(ld8(xv, lc->xt, (b * lc->h + m) * lc->c + p) - lc->xzp) *
                       ((int8_t)wv[wi] - wz[k]);
            }
        }
        if (lc->bias_b)
            acc += bv[k];
        if (!scaled) {
            ((int32_t *)want)[yi] = (int32_t)acc;
            continue;
        }
        float f = (float)acc * (xs * ws[k]);
        float z = lc->zt == KILN_DTYPE_UNDEFINED ? 0.f
                  : lc->zt == KILN_DTYPE_UINT8   ? (float)((double)zv[yi] - 17) * zs
                                                 : (float)((double)(int8_t)zv[yi] - 2) * zs;
        for (int i = 0; i < lc->n_stages; i++) {
            if (lc->stages[i] == KN_QS_QDQ) {
                double q = rint((double)(f / mids[0])) + 5;
                q = q < 0 ? 0 : q > 255 ? 255 : q;
                f = (float)(q - 5) * mids[0];
            } else if (lc->stages[i] == KN_QS_BIAS) {
                f += lc->bias_c ? cv[k] : 0.f;
            } else if (lc->stages[i] == KN_QS_ADD) {
                f += z;
            } else if (lc->stages[i] == KN_QS_RELU) {
                f = f > 0 ? f : 0;
            }
        }
        if (lc->yt == KILN_DTYPE_FLOAT) {
            ((float *)want)[yi] = f;
        } else {
            double zp = lc->yt == KILN_DTYPE_UINT8 ? 9 : -4;
            double q = rint((double)(f / ys)) + zp;
            q = q < q_lo(lc->yt) ? q_lo(lc->yt) : q > q_hi(lc->yt) ? q_hi(lc->yt) : q;
            if (lc->yt == KILN_DTYPE_UINT8)
                want[yi] = (uint8_t)q;
            else
                ((int8_t *)want)[yi] = (int8_t)q;
        }
    }
    const void *data[2] = {xv, zv};
    int rank[2] = {xr, yr};
    int64_t dims[2][KILN_MAX_DIMS];
    memcpy(dims[0], xd, sizeof xd);
    memcpy(dims[1], yd, sizeof yd);
    bool dnnl_takes = lc->dnnl;
    static bool said;
    if (!kq_dnnl_exact()) { /* no VNNI: oneDNN's int8 sums saturate, it must refuse */
        dnnl_takes = false;
        if (!said)
            fprintf(stderr, "  (this CPU has no VNNI/AMX: the dnnl_int8 tactic must refuse every layer)\n");
        said = true;
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *tactic = pass == 0 ? "ref" : "dnnl_int8";
        if (pass == 1 && !kb_cpu_kernel_find(KN_DOMAIN_KILN, lc->conv ? "QConv" : "QMatMul", tactic))
            break; /* a build without oneDNN */
        kn_net *kn = net;
        int li = -1;
        for (int i = 0; i < kn->n_nodes; i++)
            if (strcmp(kn->nodes[i].name, "layer") == 0)
                li = i;
        kn_free(kn->nodes[li].tactic);
        kn->nodes[li].tactic = kn_strdup(tactic);
        kt_exec ex;
        kiln_status st = kt_exec_run(&ex, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims);
        if (st != KILN_OK) {
            if (pass == 1 && !dnnl_takes) {
                kt_pass++; /* refused, as expected */
            } else {
                kt_fail++;
                fprintf(stderr, "  %s (%s): run failed: %s\n", lc->what, tactic, kiln_last_error());
            }
            kt_exec_free(&ex);
            continue;
        }
        if (pass == 1 && !dnnl_takes) {
            kt_fail++;
            fprintf(stderr, "  %s: the oneDNN tactic took a layer it cannot run\n", lc->what);
        }
        kn_tinfo ti;
        const void *got = kt_exec_output(&ex, 0, &ti);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < ny; i++)
            if (memcmp((const uint8_t *)got + i * (int64_t)es, want + i * (int64_t)es, es) != 0) {
                if (first < 0)
                    first = i;
                bad++;
            }
        if (bad) {
            kt_fail++;
            fprintf(stderr, "  %s (%s): %lld of %lld elements differ from the naive result (first %lld)\n",
                    lc->what, tactic, (long long)bad, (long long)ny, (long long)first);
        } else {
            kt_pass++;
            fprintf(stderr, "  %s (%s): %lld elements bit-exact\n", lc->what, tactic, (long long)ny);
        }
        kt_exec_free(&ex);
    }
    free(xv);
    free(zv);
    free(wv);
    free(want);
    kiln_network_destroy(net);
}

static void test_kernels(void) {
    const kiln_dtype U8 = KILN_DTYPE_UINT8, S8 = KILN_DTYPE_INT8, F = KILN_DTYPE_FLOAT, I32 = KILN_DTYPE_INT32;
    const kiln_dtype NONE = KILN_DTYPE_UNDEFINED;
    const lcase cases[] = {
        {"conv u8 zp 3 -> u8, pad 1", true, U8, U8, NONE, 2, 8, 9, 9, 16, 3, 1, 1, 1, 3, 0, true, false, false, false, 0, {0}, true, false},
        {"conv s8 stride 2 -> s8, relu", true, S8, S8, NONE, 2, 8, 9, 7, 16, 3, 2, 1, 1, 0, 0, true, false, false, false, 1, {KN_QS_RELU}, true, false},
        {"depthwise u8 -> u8, qdq + residual u8 + relu", true, U8, U8, U8, 2, 8, 6, 6, 8, 3, 1, 1, 8, 128, 0, true, false, false, false, 3, {KN_QS_QDQ, KN_QS_ADD, KN_QS_RELU}, true, false},
        {"conv 1x1 stride 2 -> float, bias stage", true, U8, F, NONE, 1, 16, 8, 8, 8, 1, 2, 0, 1, 100, 0, false, true, false, false, 1, {KN_QS_BIAS}, true, false},
        {"conv -> int32 (ConvInteger)", true, U8, I32, NONE, 1, 4, 5, 5, 6, 3, 1, 0, 1, 5, 0, false, false, false, false, 0, {0}, true, false},
        {"grouped conv, w zero points", true, U8, U8, NONE, 1, 8, 6, 6, 4, 3, 1, 0, 2, 1, 1, true, false, false, false, 0, {0}, false, false},
        {"NHWC conv u8 zp 5 -> u8, stride 2, qdq + residual s8 + relu", true, U8, U8, S8, 2, 8, 9, 7, 16, 3, 2, 1, 1, 5, 0, true, false, false, false, 3, {KN_QS_QDQ, KN_QS_ADD, KN_QS_RELU}, true, true},
        {"NHWC depthwise s8 -> float", true, S8, F, NONE, 1, 8, 6, 6, 8, 3, 1, 1, 8, 0, 0, true, true, false, false, 1, {KN_QS_BIAS}, true, true},
        {"matmul u8 -> u8, qdq + bias + residual s8", false, U8, U8, S8, 2, 24, 5, 0, 12, 0, 0, 0, 1, 7, 0, true, true, false, false, 3, {KN_QS_QDQ, KN_QS_BIAS, KN_QS_ADD}, true, false},
        {"matmul trans_b -> float", false, S8, F, NONE, 2, 24, 5, 0, 12, 0, 0, 0, 1, 0, 0, true, false, true, false, 0, {0}, true, false},
        {"matmul batched W -> s8", false, S8, S8, NONE, 2, 24, 5, 0, 7, 0, 0, 0, 1, -3, 0, false, false, false, true, 0, {0}, true, false},
        {"matmul -> int32 (MatMulInteger)", false, U8, I32, NONE, 1, 16, 3, 0, 5, 0, 0, 0, 1, 9, 0, false, false, false, false, 0, {0}, true, false},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++)
        run_case(&cases[i]);
}

/* ---------------- the pass ---------------- */

/* x -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> Q -> DQ -> Add(DQ(Q(z))) -> Relu -> Q -> DQ -> y,
 * and a float Conv beside it reading x directly (outside Q/DQ). */
static void test_pass_chain(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(-1, 4, 6, 6), NULL));
    KT_OK(kiln_network_add_input(net, "z", KILN_DTYPE_FLOAT, 4, DIMS(-1, 8, 6, 6), NULL));
    add_q(net, "wq", KILN_DTYPE_INT8, 4, DIMS(8, 4, 3, 3), -127, 127, NULL);
    float ws[8], bs[8], xs = 0.02f, s1 = 0.05f, zs = 0.03f, s2 = 0.04f;
    int32_t bq[8];
    for (int k = 0; k < 8; k++) {
        ws[k] = 0.002f * (float)(k + 1);
        bs[k] = xs * ws[k];
        bq[k] = rnd(-500, 500);
    }
    add_f(net, "xs", 1, &xs);
    add_zp(net, "xz", KILN_DTYPE_UINT8, 128);
    KT_OK(kiln_network_add_constant(net, "ws", KILN_DTYPE_FLOAT, 1, DIMS(8), ws, sizeof ws));
    KT_OK(kiln_network_add_constant(net, "bs", KILN_DTYPE_FLOAT, 1, DIMS(8), bs, sizeof bs));
    KT_OK(kiln_network_add_constant(net, "bq", KILN_DTYPE_INT32, 1, DIMS(8), bq, sizeof bq));
    add_f(net, "s1", 1, &s1);
    add_zp(net, "z1", KILN_DTYPE_UINT8, 120);
    add_f(net, "zs", 1, &zs);
    add_zp(net, "zz", KILN_DTYPE_UINT8, 128);
    add_f(net, "s2", 1, &s2);
    add_zp(net, "z2", KILN_DTYPE_UINT8, 0);
    node(net, "qx", "QuantizeLinear", 3, IN("x", "xs", "xz"), "xq");
    node(net, "dqx", "DequantizeLinear", 3, IN("xq", "xs", "xz"), "xd");
    node(net, "dqz0", "QuantizeLinear", 3, IN("z", "zs", "zz"), "zq");
    node(net, "dqz", "DequantizeLinear", 3, IN("zq", "zs", "zz"), "zd");
    int dw = node(net, "dqw", "DequantizeLinear", 2, IN("wq", "ws"), "wd");
    KT_OK(kiln_network_set_attr_int(net, dw, "axis", 0));
    int db = node(net, "dqb", "DequantizeLinear", 2, IN("bq", "bs"), "bd");
    KT_OK(kiln_network_set_attr_int(net, db, "axis", 0));
    int cv = node(net, "conv", "Conv", 3, IN("xd", "wd", "bd"), "c");
    KT_OK(kiln_network_set_attr_ints(net, cv, "pads", DIMS(1, 1, 1, 1), 4));
    node(net, "q1", "QuantizeLinear", 3, IN("c", "s1", "z1"), "c_q");
    node(net, "dq1", "DequantizeLinear", 3, IN("c_q", "s1", "z1"), "c_d");
    node(net, "add", "Add", 2, IN("c_d", "zd"), "a");
    node(net, "relu", "Relu", 1, IN("a"), "r");
    node(net, "q2", "QuantizeLinear", 3, IN("r", "s2", "z2"), "r_q");
    node(net, "dq2", "DequantizeLinear", 3, IN("r_q", "s2", "z2"), "y");
    /* outside Q/DQ: float x into a conv on the dequantized weights */
    int fc = node(net, "float_conv", "Conv", 2, IN("x", "wd"), "yf");
    KT_OK(kiln_network_set_attr_ints(net, fc, "pads", DIMS(1, 1, 1, 1), 4));
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_network_mark_output(net, "yf"));
    kn_net *o = optimized(net, 0, 1, 2, 3);
    if (!o) {
        kiln_network_destroy(net);
        return;
    }
    CHECK_OR_DUMP(count_op(o, KN_DOMAIN_KILN, "QConv") == 1, o);
    CHECK_OR_DUMP(count_op(o, "", "Add") == 0 && count_op(o, "", "Relu") == 0, o);
    /* the float conv stays float (as a kiln::Conv or Conv) */
    CHECK_OR_DUMP(count_op(o, "", "Conv") + count_op(o, KN_DOMAIN_KILN, "Conv") == 1, o);
    const kn_node *q = find_op(o, KN_DOMAIN_KILN, "QConv");
    if (q) {
        size_t ns = 0;
        const int64_t *st = kn_attr_ints(q, "stages", &ns);
        KT_CHECK(ns == 3 && st && st[0] == KN_QS_QDQ && st[1] == KN_QS_ADD && st[2] == KN_QS_RELU);
        KT_CHECK(kn_attr_int(q, "to", 0) == KILN_DTYPE_UINT8);
        KT_CHECK(kn_attr_int(q, "channels_last", 0) == 1); /* the NHWC region */
        KT_CHECK(q->n_in > KN_QL_B && q->in[KN_QL_B] >= 0); /* the int32 bias kept as B */
        KT_CHECK(q->n_in > KN_QL_Z && q->in[KN_QL_Z] >= 0 &&
                 strncmp(o->tensors[q->in[KN_QL_Z]].name, "zq", 2) == 0); /* the quantized residual (its NHWC twin) */
    }
    /* same result as the float emulation within one step of s2 */
    run_in ri;
    float *bufs[4] = {0};
    make_inputs(net, &ri, bufs, 2);
    kt_exec a, b;
    KT_OK(kt_exec_run(&a, net, ri.data, ri.rank, (const int64_t (*)[KILN_MAX_DIMS])ri.dims));
    KT_OK(kt_exec_run(&b, o, ri.data, ri.rank, (const int64_t (*)[KILN_MAX_DIMS])ri.dims));
    kn_tinfo ta, tb;
    const float *ya = kt_exec_output(&a, 0, &ta), *yb = kt_exec_output(&b, 0, &tb);
    int64_t n = kn_numel(ta.rank, ta.dims), off = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(ya[i] - yb[i]) > s2 * 1.01f)
            off++;
    KT_CHECK(off == 0);
    fprintf(stderr, "  pass chain: %lld elements, %lld more than one step from the float emulation\n",
            (long long)n, (long long)off);
    kt_exec_free(&a);
    kt_exec_free(&b);
    for (int k = 0; k < 4; k++)
        free(bufs[k]);
    kn_net_free(o);
    kiln_network_destroy(net);
}

/* QLinearConv and MatMulInteger become the layers with the same results. */
static void test_pass_qlinear(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_UINT8, 4, DIMS(1, 4, 5, 5), NULL));
    KT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_UINT8, 2, DIMS(3, 6), NULL));
    add_q(net, "w", KILN_DTYPE_INT8, 4, DIMS(6, 4, 3, 3), -100, 100, NULL);
    add_q(net, "bw", KILN_DTYPE_INT8, 2, DIMS(6, 4), -100, 100, NULL);
    float xs = 0.1f, ws = 0.01f, ys = 0.2f;
    add_f(net, "xs", 1, &xs);
    add_zp(net, "xz", KILN_DTYPE_UINT8, 10);
    add_f(net, "ws", 1, &ws);
    add_zp(net, "wz", KILN_DTYPE_INT8, 0);
    add_f(net, "ys", 1, &ys);
    add_zp(net, "yz", KILN_DTYPE_UINT8, 50);
    node(net, "qlc", "QLinearConv", 8, IN("x", "xs", "xz", "w", "ws", "wz", "ys", "yz"), "y");
    node(net, "mmi", "MatMulInteger", 3, IN("a", "bw", "xz"), "m");
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_network_mark_output(net, "m"));
    kn_net *o = optimized(net, 0, 1, 1, 1);
    if (!o) {
        kiln_network_destroy(net);
        return;
    }
    CHECK_OR_DUMP(count_op(o, KN_DOMAIN_KILN, "QConv") == 1 && count_op(o, KN_DOMAIN_KILN, "QMatMul") == 1, o);
    uint8_t xv[100], av[18];
    for (int i = 0; i < 100; i++)
        xv[i] = (uint8_t)rnd(0, 255);
    for (int i = 0; i < 18; i++)
        av[i] = (uint8_t)rnd(0, 255);
    const void *data[2] = {xv, av};
    int rank[2] = {4, 2};
    int64_t dims[2][KILN_MAX_DIMS] = {{1, 4, 5, 5}, {3, 6}};
    kt_exec e1, e2;
    KT_OK(kt_exec_run(&e1, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims));
    KT_OK(kt_exec_run(&e2, o, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims));
    kn_tinfo t1, t2;
    const uint8_t *y1 = kt_exec_output(&e1, 0, &t1), *y2 = kt_exec_output(&e2, 0, &t2);
    int worst = 0;
    for (int64_t i = 0; i < kn_numel(t1.rank, t1.dims); i++) {
        int d = abs((int)y1[i] - (int)y2[i]);
        worst = d > worst ? d : worst;
    }
    KT_CHECK(worst <= 1); /* QLinearConv's reference rounds (acc * (xs * ws / ys)) */
    const int32_t *m1 = kt_exec_output(&e1, 1, &t1), *m2 = kt_exec_output(&e2, 1, &t2);
    KT_CHECK(t2.dtype == KILN_DTYPE_INT32 && memcmp(m1, m2, sizeof(int32_t) * 12) == 0);
    kt_exec_free(&e1);
    kt_exec_free(&e2);
    kn_net_free(o);
    kiln_network_destroy(net);
}

/* ---------------- kiln::MaxPool on 8-bit NHWC ---------------- */

/* The pool through the reference and the q8 tactic, each against a naive
 * max written here, bit for bit. */
static void pool_case(const char *what, kiln_dtype t, int64_t n, int64_t h, int64_t w, int64_t c,
                      int64_t k, int64_t st, int64_t pad, int64_t dil) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    int64_t ext = dil * (k - 1) + 1;
    int64_t oh = (h + 2 * pad - ext) / st + 1, ow = (w + 2 * pad - ext) / st + 1;
    KT_OK(kiln_network_add_input(net, "x", t, 4, DIMS(n, h, w, c), NULL));
    const char *ins[1] = {"x"}, *outs[1] = {"y"};
    int idx = -1;
    KT_OK(kiln_network_add_node(net, "pool", "MaxPool", KN_DOMAIN_KILN, 1, 1, ins, 1, outs, &idx));
    KT_OK(kiln_network_set_attr_int(net, idx, "channels_last", 1));
    KT_OK(kiln_network_set_attr_ints(net, idx, "kernel_shape", DIMS(k, k), 2));
    KT_OK(kiln_network_set_attr_ints(net, idx, "strides", DIMS(st, st), 2));
    KT_OK(kiln_network_set_attr_ints(net, idx, "pads", DIMS(pad, pad, pad, pad), 4));
    KT_OK(kiln_network_set_attr_ints(net, idx, "dilations", DIMS(dil, dil), 2));
    KT_OK(kiln_network_mark_output(net, "y"));
    int64_t nx = n * h * w * c, ny = n * oh * ow * c;
    uint8_t *xv = malloc((size_t)nx), *want = malloc((size_t)ny);
    for (int64_t i = 0; i < nx; i++)
        xv[i] = t == KILN_DTYPE_UINT8 ? (uint8_t)rnd(0, 255) : (uint8_t)(int8_t)rnd(-128, 127);
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++)
                for (int64_t ch = 0; ch < c; ch++) {
                    int best = 1000;
                    for (int64_t ky = 0; ky < k; ky++)
                        for (int64_t kx = 0; kx < k; kx++) {
                            int64_t iy = oy * st - pad + ky * dil, ix = ox * st - pad + kx * dil;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                continue;
                            int v = ld8(xv, t, ((b * h + iy) * w + ix) * c + ch);
                            best = best == 1000 || v > best ? v : best;
                        }
                    want[((b * oh + oy) * ow + ox) * c + ch] = (uint8_t)best;
                }
    const void *data[1] = {xv};
    int rank[1] = {4};
    int64_t dims[1][KILN_MAX_DIMS] = {{n, h, w, c}};
    for (int pass = 0; pass < 2; pass++) {
        const char *tactic = pass == 0 ? "ref" : "q8";
        kn_net *kn = net;
        kn_free(kn->nodes[0].tactic);
        kn->nodes[0].tactic = kn_strdup(tactic);
        kt_exec ex;
        kiln_status st2 = kt_exec_run(&ex, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims);
        if (st2 != KILN_OK) {
            kt_fail++;
            fprintf(stderr, "  %s (%s): run failed: %s\n", what, tactic, kiln_last_error());
            kt_exec_free(&ex);
            continue;
        }
        kn_tinfo ti;
        const uint8_t *got = kt_exec_output(&ex, 0, &ti);
        int64_t bad = 0;
        for (int64_t i = 0; i < ny; i++)
            bad += got[i] != want[i];
        if (bad || ti.dims[1] != oh || ti.dims[2] != ow) {
            kt_fail++;
            fprintf(stderr, "  %s (%s): %lld of %lld bytes differ\n", what, tactic, (long long)bad,
                    (long long)ny);
        } else {
            kt_pass++;
            fprintf(stderr, "  %s (%s): %lld bytes exact\n", what, tactic, (long long)ny);
        }
        kt_exec_free(&ex);
    }
    free(xv);
    free(want);
    kiln_network_destroy(net);
}

static void test_pool(void) {
    const kiln_dtype U8 = KILN_DTYPE_UINT8, S8 = KILN_DTYPE_INT8;
    pool_case("maxpool u8 NHWC 3x3 s2 p1 (the ResNet stem's)", U8, 2, 28, 27, 64, 3, 2, 1, 1);
    pool_case("maxpool s8 NHWC 3x3 s2 p1, C 12", S8, 1, 9, 10, 12, 3, 2, 1, 1);
    pool_case("maxpool s8 NHWC 2x2 dilation 2, C 5", S8, 2, 7, 6, 5, 2, 1, 0, 2);
    pool_case("maxpool u8 NHWC 3x3 s1 p2, C 3", U8, 1, 6, 7, 3, 3, 1, 2, 1);
    /* the q8 tactic takes 8-bit NHWC MaxPool, not float or NCHW */
    const kb_kernel *k = kb_cpu_kernel_find(KN_DOMAIN_KILN, "MaxPool", "q8");
    KT_CHECK(k != NULL);
    if (k) {
        kn_net *net = NULL;
        KT_OK(kn_net_new(&net));
        int ti = -1, to = -1, ni = -1;
        if (net) {
            KT_OK(kn_net_new_tensor(net, "x", &ti));
            KT_OK(kn_net_new_tensor(net, "y", &to));
            KT_OK(kn_net_add_node(net, "p", "MaxPool", KN_DOMAIN_KILN, 1, 1, &ti, 1, &to, &ni));
        }
        if (net && ni >= 0) {
            kn_node *nd = &net->nodes[ni];
            KT_OK(kn_node_set_ints(nd, "kernel_shape", DIMS(3, 3), 2));
            kn_tinfo in = {.dtype = U8, .rank = 4, .dims = {1, 8, 8, 16}}, out = in;
            out.dims[1] = out.dims[2] = 6;
            KT_CHECK(!k->supports(nd, &in, 1, &out, 1)); /* no channels_last */
            KT_OK(kn_node_set_int(nd, "channels_last", 1));
            KT_CHECK(k->supports(nd, &in, 1, &out, 1));
            in.dims[0] = -1; /* a dynamic batch */
            KT_CHECK(k->supports(nd, &in, 1, &out, 1));
            in.dtype = out.dtype = KILN_DTYPE_FLOAT;
            KT_CHECK(!k->supports(nd, &in, 1, &out, 1));
        }
        kn_net_free(net);
    }
}

int main(void) {
    test_pool();
    test_kernels();
    test_pass_chain();
    test_pass_qlinear();
    fprintf(stderr, "test_int8: %d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}
