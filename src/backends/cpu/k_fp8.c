/* k_fp8.c - the reference CPU kernels of kiln::FP8Conv and kiln::FP8MatMul
 * (graph/qlayer.h): graph/fp8layer.h's arithmetic exactly (the E4M3
 * products summed in FP32 in ascending reduction index), one output at a
 * time. They define the bits the layers give; faster kernels are checked
 * against them. */
/* no contraction into FMAs (the products are exact, so it would not change
 * a sum, but the epilogue's acc * s and stages must round one way) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <string.h>

#include "graph/fp8layer.h"
#include "graph/fused.h"
#include "k_int8.h"

static size_t align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

static const kb_tensor *opt_in(const kb_run *r, int i) {
    return i < r->n_in && r->in[i].data ? &r->in[i] : NULL;
}

/* The values of an E4M3 tensor as floats (NaN codes give NaN). */
static void decode(const uint8_t *x, int64_t n, float *out) {
    float lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = kn_f8_to_float((uint8_t)v, KN_F8_E4M3FN);
    for (int64_t i = 0; i < n; i++)
        out[i] = lut[x[i]];
}

/* One run's epilogue: per-channel s and C, the node's stages, Y's type and
 * scale, the residual. */
typedef struct f8epi {
    kn_qepi e;
    kiln_dtype to;
    float *s, *c;
    float ys;
    int saturate;
    const void *z;
    kiln_dtype zt;
    float zs;
} f8epi;

static size_t epi_bytes(int64_t cout) { return 2 * align64((size_t)cout * 4u); }

static kiln_status epi_setup(const kb_run *r, int64_t cout, void *ws, f8epi *q) {
    memset(q, 0, sizeof *q);
    KN_TRY(kn_qepi_parse(r->node, &q->e));
    q->to = r->out[0].dtype;
    q->s = ws;
    q->c = (float *)((uint8_t *)ws + align64((size_t)cout * 4u));
    float xs = (float)kq_per_channel(opt_in(r, KN_QL_XS), 0, 1.0);
    const kb_tensor *w = opt_in(r, KN_QL_WS), *c = opt_in(r, KN_QL_C);
    for (int64_t k = 0; k < cout; k++) {
        q->s[k] = xs * (float)kq_per_channel(w, k, 1.0);
        q->c[k] = (float)kq_per_channel(c, k, 0.0);
    }
    q->ys = (float)kq_per_channel(opt_in(r, KN_QL_YS), 0, 1.0);
    q->saturate = (int)kn_attr_int(r->node, "saturate", 1);
    if (q->to == KILN_DTYPE_FLOAT8E4M3FN && !(q->ys > 0.f))
        return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT, "y_scale %g is not positive",
                             (double)q->ys);
    const kb_tensor *z = opt_in(r, KN_QL_Z);
    if (z) {
        q->z = z->data;
        q->zt = z->dtype;
        q->zs = (float)kq_per_channel(opt_in(r, KN_QL_ZS), 0, 1.0);
    }
    return KILN_OK;
}

/* Element i of Y (channel c) from its sum. */
static void epi_one(const f8epi *q, float acc, int64_t c, void *y, int64_t i) {
    float z = 0.f;
    if (q->z)
        z = q->zt == KILN_DTYPE_FLOAT8E4M3FN
                ? kn_q_dequantize_f8(((const uint8_t *)q->z)[i], KN_F8_E4M3FN, q->zs)
                : ((const float *)q->z)[i];
    float f = kn_f8_layer_out(&q->e, acc, q->s[c], q->c[c], z);
    if (q->to == KILN_DTYPE_FLOAT8E4M3FN)
        ((uint8_t *)y)[i] = kn_q_quantize_f8(f, q->ys, KN_F8_E4M3FN, q->saturate);
    else
        ((float *)y)[i] = f;
}

/* sum_p a[p] * b[p], p ascending, in FP32 */
static float dot(const float *a, const float *b, int64_t k) {
    float s = 0.f;
    for (int64_t p = 0; p < k; p++)
        s = s + a[p] * b[p];
    return s;
}

/* ---------------- kiln::FP8MatMul ---------------- */

typedef struct mm_geo {
    int64_t batch, m, k, n;
    bool tb, w_batched;
} mm_geo;

static kiln_status mm_geom(const kn_node *node, const kb_tensor *x, const kb_tensor *w, mm_geo *g) {
    g->tb = kn_attr_int(node, "trans_b", 0) != 0;
    if (x->rank < 2 || w->rank < 2)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "X and W need rank 2 or more");
    g->m = x->dims[x->rank - 2];
    g->k = x->dims[x->rank - 1];
    int64_t wk = w->dims[w->rank - (g->tb ? 1 : 2)];
    g->n = w->dims[w->rank - (g->tb ? 2 : 1)];
    if (wk != g->k)
        return kn_node_error(node, KILN_ERR_SHAPE, "K differs: X %lld, W %lld", (long long)g->k,
                             (long long)wk);
    g->batch = kn_numel(x->rank - 2, x->dims);
    g->w_batched = w->rank > 2 && kn_numel(w->rank - 2, w->dims) > 1;
    if (g->w_batched && (w->rank != x->rank ||
                         memcmp(w->dims, x->dims, sizeof(int64_t) * (size_t)(x->rank - 2)) != 0))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "W must be 2-D or have X's batch dims (no other broadcasting)");
    return KILN_OK;
}

static size_t mm_ws(const mm_geo *g) {
    return align64((size_t)(g->m * g->k) * 4u) + 2 * align64((size_t)(g->n * g->k) * 4u) +
           epi_bytes(g->n);
}

static kiln_status fp8mm_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                 int n_in, const kb_tensor *out, int n_out, void **inst,
                                 size_t *workspace) {
    (void)state, (void)n_in, (void)out, (void)n_out, (void)inst;
    mm_geo g;
    KN_TRY(mm_geom(node, &in[KN_QL_X], &in[KN_QL_W], &g));
    *workspace = mm_ws(&g);
    return KILN_OK;
}

static kiln_status fp8mm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[KN_QL_X], *w = &r->in[KN_QL_W];
    mm_geo g;
    KN_TRY(mm_geom(r->node, x, w, &g));
    if (r->workspace_size < mm_ws(&g))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    uint8_t *ws = r->workspace;
    float *xf = (float *)ws;
    ws += align64((size_t)(g.m * g.k) * 4u);
    float *wraw = (float *)ws; /* W as stored */
    ws += align64((size_t)(g.n * g.k) * 4u);
    float *wt = (float *)ws; /* [N, K] */
    ws += align64((size_t)(g.n * g.k) * 4u);
    f8epi q;
    KN_TRY(epi_setup(r, g.n, ws, &q));
    int64_t m = g.m, k = g.k, n = g.n;
    for (int64_t b = 0; b < g.batch; b++) {
        if (b == 0 || g.w_batched) {
            decode((const uint8_t *)w->data + (g.w_batched ? b * k * n : 0), k * n, wraw);
            for (int64_t j = 0; j < n; j++)
                for (int64_t p = 0; p < k; p++)
                    wt[j * k + p] = g.tb ? wraw[j * k + p] : wraw[p * n + j];
        }
        decode((const uint8_t *)x->data + b * m * k, m * k, xf);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                epi_one(&q, dot(xf + i * k, wt + j * k, k), j, r->out[0].data, (b * m + i) * n + j);
    }
    return KILN_OK;
}

/* ---------------- kiln::FP8Conv ---------------- */

/* col[(ci * ksize + kidx) * out_size + o]: X's tap (0 in the padding, which
 * adds nothing to a sum that starts from +0: see graph/fp8layer.h). */
static void im2col(const kn_window *w, const float *x, int64_t channels, int64_t ksize,
                   int64_t in_size, int64_t out_size, float *col) {
    int nsp = w->nsp;
    for (int64_t ci = 0; ci < channels; ci++)
        for (int64_t kidx = 0; kidx < ksize; kidx++) {
            int64_t kk[KN_WIN_MAX], rem = kidx;
            for (int d = nsp - 1; d >= 0; d--) {
                kk[d] = rem % w->kernel[d];
                rem /= w->kernel[d];
            }
            float *row = col + (ci * ksize + kidx) * out_size;
            for (int64_t o = 0; o < out_size; o++) {
                int64_t orem = o, at = 0;
                bool inside = true;
                int64_t pos[KN_WIN_MAX];
                for (int d = nsp - 1; d >= 0; d--) {
                    pos[d] = orem % w->out[d];
                    orem /= w->out[d];
                }
                for (int d = 0; d < nsp; d++) {
                    int64_t p = pos[d] * w->stride[d] - w->pad0[d] + kk[d] * w->dil[d];
                    inside = inside && p >= 0 && p < w->in[d];
                    at = at * w->in[d] + p;
                }
                row[o] = inside ? x[ci * in_size + at] : 0.f;
            }
        }
}

static size_t conv_ws(const kb_conv *cv) {
    int64_t cin_g = cv->cin / cv->group;
    return align64((size_t)(cv->cin * cv->in_size) * 4u) +
           align64((size_t)(cin_g * cv->kernel_size * cv->out_size) * 4u) +
           align64((size_t)(cv->cout * cin_g * cv->kernel_size) * 4u) +
           align64((size_t)(cin_g * cv->kernel_size) * 4u) + epi_bytes(cv->cout);
}

static kiln_status fp8conv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *workspace) {
    (void)state, (void)n_in, (void)out, (void)n_out, (void)inst;
    kb_conv cv;
    KN_TRY(kb_conv_setup(node, &in[KN_QL_X], &in[KN_QL_W], &cv));
    *workspace = conv_ws(&cv);
    return KILN_OK;
}

static kiln_status fp8conv_run(const kb_run *r) {
    const kb_tensor *x = &r->in[KN_QL_X], *w = &r->in[KN_QL_W];
    kb_conv cv;
    KN_TRY(kb_conv_setup(r->node, x, w, &cv));
    if (r->workspace_size < conv_ws(&cv))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    int64_t cin_g = cv.cin / cv.group, cout_g = cv.cout / cv.group;
    int64_t kdim = cin_g * cv.kernel_size, os = cv.out_size;
    uint8_t *ws = r->workspace;
    float *xf = (float *)ws;
    ws += align64((size_t)(cv.cin * cv.in_size) * 4u);
    float *col = (float *)ws;
    ws += align64((size_t)(kdim * os) * 4u);
    float *wf = (float *)ws;
    ws += align64((size_t)(cv.cout * kdim) * 4u);
    float *colt = (float *)ws; /* one output position's column */
    ws += align64((size_t)kdim * 4u);
    f8epi q;
    KN_TRY(epi_setup(r, cv.cout, ws, &q));
    decode(w->data, cv.cout * kdim, wf);
    for (int64_t b = 0; b < cv.batch; b++) {
        decode((const uint8_t *)x->data + b * cv.cin * cv.in_size, cv.cin * cv.in_size, xf);
        for (int64_t g = 0; g < cv.group; g++) {
            im2col(&cv.w, xf + g * cin_g * cv.in_size, cin_g, cv.kernel_size, cv.in_size, os, col);
            for (int64_t o = 0; o < os; o++) {
                for (int64_t p = 0; p < kdim; p++)
                    colt[p] = col[p * os + o];
                for (int64_t co = g * cout_g; co < (g + 1) * cout_g; co++)
                    epi_one(&q, dot(wf + co * kdim, colt, kdim), co, r->out[0].data,
                            (b * cv.cout + co) * os + o);
            }
        }
    }
    return KILN_OK;
}

/* ---------------- the table ---------------- */

const kb_kernel kb_cpu_fp8[] = {
    {"FP8Conv", KN_DOMAIN_KILN, "ref", NULL, NULL, NULL, fp8conv_prepare, NULL, fp8conv_run},
    {"FP8MatMul", KN_DOMAIN_KILN, "ref", NULL, NULL, NULL, fp8mm_prepare, NULL, fp8mm_run},
};
const size_t kb_cpu_fp8_count = KN_ARRAY_LEN(kb_cpu_fp8);
