/* k_int8.c - the reference CPU kernels of kiln::QConv and kiln::QMatMul
 * (graph/qlayer.h): exact integer sums (int16 operands less their zero
 * points, int32 accumulation), then graph/quant.h's epilogue, which every
 * quantized kernel shares; and the table of the quantized layers' kernels. */
/* The epilogue's compares and selects vectorize only when they may not trap
 * (kiln never reads the floating-point exception flags; no value changes),
 * and no multiply-add may be contracted into an FMA (the AVX-512 and AVX2
 * clones below must round as the default build does). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include "graph/fused.h"
#include "k_int8.h"
#include "k_nn.h"


static size_t align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

static const kb_tensor *opt_in(const kb_run *r, int i) {
    return i < r->n_in && r->in[i].data ? &r->in[i] : NULL;
}

size_t kq_epi_bytes(int64_t cout) {
    return 3 * align64((size_t)cout * 4u);
}

kiln_status kq_epi_setup(const kb_run *r, int64_t cout, void *ws, kq_epi *q) {
    memset(q, 0, sizeof *q);
    KN_TRY(kn_qepi_parse(r->node, &q->e));
    q->to = r->out[0].dtype;
    q->cout = cout;
    uint8_t *p = ws;
    q->s = (float *)p;
    q->b = (int32_t *)(p + align64((size_t)cout * 4u));
    q->c = (float *)(p + 2 * align64((size_t)cout * 4u));
    const kb_tensor *xs = opt_in(r, KN_QL_XS), *wsc = opt_in(r, KN_QL_WS), *b = opt_in(r, KN_QL_B);
    const kb_tensor *c = opt_in(r, KN_QL_C);
    float x_scale = (float)kq_per_channel(xs, 0, 1.0);
    for (int64_t k = 0; k < cout; k++) {
        q->s[k] = x_scale * (float)kq_per_channel(wsc, k, 1.0);
        q->b[k] = (int32_t)kq_per_channel(b, k, 0.0);
        q->c[k] = (float)kq_per_channel(c, k, 0.0);
    }
    q->ys = (float)kq_per_channel(opt_in(r, KN_QL_YS), 0, 1.0);
    q->yz = kq_per_channel(opt_in(r, KN_QL_YZ), 0, 0.0);
    if (q->to == KILN_DTYPE_UINT8 || q->to == KILN_DTYPE_INT8) {
        kn_q_range((int)q->to, &q->lo, &q->hi);
        if (!(q->ys > 0.f))
            return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT, "y_scale %g is not positive",
                                 (double)q->ys);
    }
    const kb_tensor *z = opt_in(r, KN_QL_Z);
    if (z) {
        q->z = z->data;
        q->zt = z->dtype;
        q->zs = (float)kq_per_channel(opt_in(r, KN_QL_ZS), 0, 1.0);
        q->zz = kq_per_channel(opt_in(r, KN_QL_ZZ), 0, 0.0);
    }
    return KILN_OK;
}


#define quant_f kn_q_quantize_f

/* The epilogue's loops also in AVX-512 and AVX2 builds, picked at load
 * time by the CPU (GCC's function multiversioning). The arithmetic is the
 * same in every clone (fp-contract=off above): only the vector width
 * changes. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
/* (not in sanitizer builds: the clones' resolvers run while the library is
 * relocated, before the sanitizer's runtime is set up, and crash there) */
#define KQ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KQ_CLONES
#endif

/* f[i] = quant_f(f[i]) over a block (a function of its own: inlined into
 * the stage switch, GCC leaves this loop scalar). */
static KQ_CLONES __attribute__((noinline)) void quant_block(float *restrict f, int64_t m, float scale,
                                                  float zp, float lo, float hi) {
#pragma omp simd
    for (int64_t i = 0; i < m; i++)
        f[i] = quant_f(f[i], scale, zp, lo, hi);
}

/* A run of n elements: element i has channel c0 + i * cstep (cstep 0 or
 * 1), its sum at acc[i * as] and its place in Y (and Z) at y0 + i * ystr.
 * Stage by stage over a block of floats; inlined with constant strides
 * (the callers below), so that each loop vectorizes. */
#define KQ_BLOCK 256
static inline __attribute__((always_inline)) void
epi_run(const kq_epi *q, const int32_t *acc, int64_t as, int64_t n, int64_t c0, int64_t cstep,
        void *y, int64_t y0, int64_t ystr) {
    float f[KQ_BLOCK];
    for (int64_t base = 0; base < n; base += KQ_BLOCK) {
        int64_t m = n - base < KQ_BLOCK ? n - base : KQ_BLOCK;
        const int32_t *a = acc + base * as;
        int64_t cb = c0 + base * cstep, yb = y0 + base * ystr;
        const float *s = q->s + cb, *cv = q->c + cb;
        const int32_t *b = q->b + cb;
        if (q->to == KILN_DTYPE_INT32) {
            int32_t *yo = (int32_t *)y + yb;
            for (int64_t i = 0; i < m; i++)
                yo[i * ystr] = (int32_t)((int64_t)a[i * as] + b[i * cstep]);
            continue;
        }
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            f[i] = (float)(a[i * as] + b[i * cstep]) * s[i * cstep];
        int mid = 0;
        for (int st = 0; st < q->e.n_stages; st++) {
            switch (q->e.stage[st]) {
            case KN_QS_QDQ: {
                float ms = q->e.mid_scale[mid], mz = (float)q->e.mid_zp[mid];
                float lo = (float)q->e.mid_lo[mid], hi = (float)q->e.mid_hi[mid];
#pragma omp simd
                for (int64_t i = 0; i < m; i++)
                    f[i] = (quant_f(f[i], ms, mz, lo, hi) - mz) * ms;
                mid++;
                break;
            }
            case KN_QS_BIAS:
#pragma omp simd
                for (int64_t i = 0; i < m; i++)
                    f[i] = f[i] + cv[i * cstep];
                break;
            case KN_QS_ADD: {
                float zs = q->zs, zz = (float)q->zz;
                if (q->zt == KILN_DTYPE_UINT8) {
                    const uint8_t *z = (const uint8_t *)q->z + yb;
#pragma omp simd
                    for (int64_t i = 0; i < m; i++)
                        f[i] = f[i] + ((float)z[i * ystr] - zz) * zs;
                } else if (q->zt == KILN_DTYPE_INT8) {
                    const int8_t *z = (const int8_t *)q->z + yb;
#pragma omp simd
                    for (int64_t i = 0; i < m; i++)
                        f[i] = f[i] + ((float)z[i * ystr] - zz) * zs;
                } else {
                    const float *z = (const float *)q->z + yb;
#pragma omp simd
                    for (int64_t i = 0; i < m; i++)
                        f[i] = f[i] + z[i * ystr];
                }
                break;
            }
            case KN_QS_RELU:
#pragma omp simd
                for (int64_t i = 0; i < m; i++)
                    f[i] = f[i] > 0.f ? f[i] : 0.f;
                break;
            case KN_QS_CLIP: {
                float lo = q->e.clip_lo, hi = q->e.clip_hi;
#pragma omp simd
                for (int64_t i = 0; i < m; i++)
                    f[i] = f[i] < lo ? lo : f[i] > hi ? hi : f[i];
                break;
            }
            default: break;
            }
        }
        if (q->to == KILN_DTYPE_UINT8 || q->to == KILN_DTYPE_INT8)
            quant_block(f, m, q->ys, (float)q->yz, (float)q->lo, (float)q->hi);
        switch (q->to) {
        /* f holds whole numbers in the type's range (quant_block): the
         * conversions are exact, and vectorize (a scalar convert-and-store
         * loop took half of the epilogue's time) */
        case KILN_DTYPE_UINT8: {
            uint8_t *yo = (uint8_t *)y + yb;
#pragma omp simd
            for (int64_t i = 0; i < m; i++)
                yo[i * ystr] = (uint8_t)(int32_t)f[i];
            break;
        }
        case KILN_DTYPE_INT8: {
            int8_t *yo = (int8_t *)y + yb;
#pragma omp simd
            for (int64_t i = 0; i < m; i++)
                yo[i * ystr] = (int8_t)(int32_t)f[i];
            break;
        }
        default: {
            float *yo = (float *)y + yb;
#pragma omp simd
            for (int64_t i = 0; i < m; i++)
                yo[i * ystr] = f[i];
            break;
        }
        }
    }
}

/* The three forms the kernels use: one channel over contiguous positions,
 * contiguous channels, and anything else. */
static KQ_CLONES void epi_channel(const kq_epi *q, const int32_t *acc, int64_t n, int64_t c, void *y,
                        int64_t y0) {
    epi_run(q, acc, 1, n, c, 0, y, y0, 1);
}
static KQ_CLONES void epi_row(const kq_epi *q, const int32_t *acc, int64_t n, int64_t c0, void *y,
                    int64_t y0) {
    epi_run(q, acc, 1, n, c0, 1, y, y0, 1);
}
static void epi_any(const kq_epi *q, const int32_t *acc, int64_t as, int64_t n, int64_t c0,
                    int64_t cstep, void *y, int64_t y0, int64_t ystr) {
    epi_run(q, acc, as, n, c0, cstep, y, y0, ystr);
}

typedef struct epi_ctx {
    const kq_epi *q;
    const int32_t *acc;
    int64_t acs, ass, c0, nc, ns;
    void *y;
    int64_t yoff, ycs, yss;
} epi_ctx;

enum { EPI_TILE = 64 };

/* both channel-contiguous (matmul rows): runs across channels */
static void epi_rows(void *vc, int64_t lo, int64_t hi, int tid) {
    const epi_ctx *c = vc;
    (void)tid;
    for (int64_t j = lo; j < hi; j++)
        epi_row(c->q, c->acc + j * c->ass, c->nc, c->c0, c->y, c->yoff + c->c0 + j * c->yss);
}

/* NHWC sums into NCHW Y: tiles of positions, transposed through L1 */
static void epi_tiles(void *vc, int64_t lo, int64_t hi, int tid) {
    const epi_ctx *c = vc;
    (void)tid;
    for (int64_t ti = lo; ti < hi; ti++) {
        int32_t tile[EPI_TILE];
        int64_t j0 = ti * EPI_TILE, tn = c->ns - j0 < EPI_TILE ? c->ns - j0 : EPI_TILE;
        for (int64_t i = 0; i < c->nc; i++) {
            for (int64_t t = 0; t < tn; t++)
                tile[t] = c->acc[(j0 + t) * c->ass + i];
            int64_t yo = c->yoff + (c->c0 + i) * c->ycs;
            if (c->yss == 1)
                epi_channel(c->q, tile, tn, c->c0 + i, c->y, yo + j0);
            else
                epi_any(c->q, tile, 1, tn, c->c0 + i, 0, c->y, yo + j0 * c->yss, c->yss);
        }
    }
}

static void epi_channels(void *vc, int64_t lo, int64_t hi, int tid) {
    const epi_ctx *c = vc;
    (void)tid;
    for (int64_t i = lo; i < hi; i++) {
        int64_t yo = c->yoff + (c->c0 + i) * c->ycs;
        if (c->ass == 1 && c->yss == 1)
            epi_channel(c->q, c->acc + i * c->acs, c->ns, c->c0 + i, c->y, yo);
        else
            epi_any(c->q, c->acc + i * c->acs, c->ass, c->ns, c->c0 + i, 0, c->y, yo, c->yss);
    }
}

void kq_epi_apply(const kq_epi *q, const int32_t *acc, int64_t acs, int64_t ass, int64_t c0,
                  int64_t nc, int64_t ns, void *y, int64_t yoff, int64_t ycs, int64_t yss,
                  int threads) {
    int nth = threads > 1 && nc * ns > 16384 ? threads : 1;
    epi_ctx c = {q, acc, acs, ass, c0, nc, ns, y, yoff, ycs, yss};
    if (acs == 1 && ycs == 1)
        kn_parallel_for(nth, ns, 0, epi_rows, &c);
    else if (acs == 1)
        kn_parallel_for(nth, (ns + EPI_TILE - 1) / EPI_TILE, 0, epi_tiles, &c);
    else
        kn_parallel_for(nth, nc, 0, epi_channels, &c);
}

/* ---------------- kiln::QConv ---------------- */

bool kq_channels_last(const kn_node *node) { return kn_attr_int(node, "channels_last", 0) != 0; }

kiln_status kq_conv_geom(const kn_node *node, const kb_tensor *in, kb_conv *cv) {
    kb_tensor x = in[KN_QL_X];
    if (kq_channels_last(node)) /* the channels-first view of X [N, H, W, C] */
        kn_dims_channels(x.rank, in[KN_QL_X].dims, x.dims, true);
    return kb_conv_setup(node, &x, &in[KN_QL_W], cv);
}

static kiln_status qconv_geom(const kn_node *node, const kb_tensor *in, kb_conv *cv) {
    return kq_conv_geom(node, in, cv);
}

static size_t qconv_ws(const kb_conv *cv, bool cl) {
    int64_t cin_g = cv->cin / cv->group, cout_g = cv->cout / cv->group;
    return align64((size_t)(cin_g * cv->kernel_size * cv->out_size) * sizeof(int16_t)) +
           align64((size_t)(cout_g * cv->out_size) * sizeof(int32_t)) + kq_epi_bytes(cv->cout) +
           (cl ? align64((size_t)(cv->batch * cv->cin * cv->in_size)) : 0);
}

kiln_status kq_qconv_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                             const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)n_in, (void)out, (void)n_out, (void)inst;
    kb_conv cv;
    KN_TRY(qconv_geom(node, in, &cv));
    *workspace = qconv_ws(&cv, kq_channels_last(node));
    return KILN_OK;
}

kiln_status kq_qconv_run(const kb_run *r) {
    const kb_tensor *x = &r->in[KN_QL_X], *w = &r->in[KN_QL_W];
    kb_conv cv;
    KN_TRY(qconv_geom(r->node, r->in, &cv));
    bool cl = kq_channels_last(r->node);
    if (r->workspace_size < qconv_ws(&cv, cl))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    int64_t cin_g = cv.cin / cv.group, cout_g = cv.cout / cv.group;
    int64_t kdim = cin_g * cv.kernel_size;
    uint8_t *ws = r->workspace;
    int16_t *col = (int16_t *)ws;
    ws += align64((size_t)(kdim * cv.out_size) * sizeof(int16_t));
    int32_t *acc = (int32_t *)ws;
    ws += align64((size_t)(cout_g * cv.out_size) * sizeof(int32_t));
    kq_epi q;
    KN_TRY(kq_epi_setup(r, cv.cout, ws, &q));
    ws += kq_epi_bytes(cv.cout);
    const void *xdata = x->data;
    if (cl) { /* X [N, S, C] -> [N, C, S] in the workspace; Y and Z stay [N, S, K] */
        uint8_t *xt = ws;
        const uint8_t *xs = x->data;
        for (int64_t b = 0; b < cv.batch; b++)
            for (int64_t sp = 0; sp < cv.in_size; sp++)
                for (int64_t c = 0; c < cv.cin; c++)
                    xt[(b * cv.cin + c) * cv.in_size + sp] = xs[(b * cv.in_size + sp) * cv.cin + c];
        xdata = xt;
    }
    const kb_tensor *xz = opt_in(r, KN_QL_XZ), *wz = opt_in(r, KN_QL_WZ);
    int32_t xzp = (int32_t)kq_per_channel(xz, 0, 0);
    for (int64_t b = 0; b < cv.batch; b++)
        for (int64_t g = 0; g < cv.group; g++) {
            kq_im2col_i16(&cv.w, xdata, x->dtype, (b * cv.cin + g * cin_g) * cv.in_size, xzp,
                          cin_g, cv.kernel_size, cv.in_size, cv.out_size, col, r->threads);
            kq_int_gemm(w->data, w->dtype, g * cout_g * kdim, wz, g * cout_g, cout_g, kdim, col,
                        cv.out_size, acc, r->threads);
            if (cl)
                kq_epi_apply(&q, acc, cv.out_size, 1, g * cout_g, cout_g, cv.out_size,
                             r->out[0].data, b * cv.cout * cv.out_size, 1, cv.cout, r->threads);
            else
                kq_epi_apply(&q, acc, cv.out_size, 1, g * cout_g, cout_g, cv.out_size,
                             r->out[0].data, b * cv.cout * cv.out_size, cv.out_size, 1, r->threads);
        }
    return KILN_OK;
}

/* ---------------- kiln::QMatMul ---------------- */

/* X [..., M, K] by W [K, N] (or [N, K] with trans_b), shared by every batch
 * or one per batch (W of X's rank with X's batch dims). */
typedef struct qmm_geo {
    int64_t batch, m, k, n;
    bool tb, w_batched;
} qmm_geo;

static kiln_status qmm_geom(const kn_node *node, const kb_tensor *x, const kb_tensor *w,
                            qmm_geo *g) {
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

static size_t qmm_ws(const qmm_geo *g) {
    return align64((size_t)(g->m * g->k) * 2u) + align64((size_t)(g->n * g->k) * 2u) +
           align64((size_t)(g->m * g->n) * 4u) + kq_epi_bytes(g->n);
}

kiln_status kq_qmatmul_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                               int n_in, const kb_tensor *out, int n_out, void **inst,
                               size_t *workspace) {
    (void)state, (void)n_in, (void)out, (void)n_out, (void)inst;
    qmm_geo g;
    KN_TRY(qmm_geom(node, &in[KN_QL_X], &in[KN_QL_W], &g));
    *workspace = qmm_ws(&g);
    return KILN_OK;
}

static inline int32_t ld8(const void *p, kiln_dtype t, int64_t i) {
    return t == KILN_DTYPE_UINT8 ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}

typedef struct qmm_ctx {
    const int16_t *a16, *w16;
    int32_t *acc;
    int64_t n, k;
} qmm_ctx;

/* acc[i, j] = sum_p a16[i, p] w16[j, p], exactly (rows lo..hi) */
static void qmm_rows(void *vc, int64_t lo, int64_t hi, int tid) {
    const qmm_ctx *c = vc;
    (void)tid;
    for (int64_t i = lo; i < hi; i++) {
        const int16_t *ar = c->a16 + i * c->k;
        for (int64_t j = 0; j < c->n; j++) {
            const int16_t *wr = c->w16 + j * c->k;
            int32_t s = 0;
            for (int64_t p = 0; p < c->k; p++)
                s += (int32_t)ar[p] * wr[p];
            c->acc[i * c->n + j] = s;
        }
    }
}

kiln_status kq_qmatmul_run(const kb_run *r) {
    const kb_tensor *x = &r->in[KN_QL_X], *w = &r->in[KN_QL_W];
    qmm_geo g;
    KN_TRY(qmm_geom(r->node, x, w, &g));
    if (r->workspace_size < qmm_ws(&g))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    uint8_t *ws = r->workspace;
    int16_t *a16 = (int16_t *)ws;
    ws += align64((size_t)(g.m * g.k) * 2u);
    int16_t *w16 = (int16_t *)ws; /* [N, K] */
    ws += align64((size_t)(g.n * g.k) * 2u);
    int32_t *acc = (int32_t *)ws;
    ws += align64((size_t)(g.m * g.n) * 4u);
    kq_epi q;
    KN_TRY(kq_epi_setup(r, g.n, ws, &q));
    const kb_tensor *xz = opt_in(r, KN_QL_XZ), *wz = opt_in(r, KN_QL_WZ);
    int32_t xzp = (int32_t)kq_per_channel(xz, 0, 0);
    int64_t m = g.m, k = g.k, n = g.n;
    for (int64_t b = 0; b < g.batch; b++) {
        if (b == 0 || g.w_batched) {
            int64_t wo = g.w_batched ? b * k * n : 0;
            for (int64_t j = 0; j < n; j++) {
                int32_t zp = (int32_t)kq_per_channel(wz, j, 0);
                for (int64_t p = 0; p < k; p++)
                    w16[j * k + p] = (int16_t)(ld8(w->data, w->dtype, wo + (g.tb ? j * k + p : p * n + j)) - zp);
            }
        }
        for (int64_t i = 0; i < m * k; i++)
            a16[i] = (int16_t)(ld8(x->data, x->dtype, b * m * k + i) - xzp);
        int nth = r->threads > 1 && m * n * k > 32768 ? r->threads : 1;
        qmm_ctx c = {a16, w16, acc, n, k};
        kn_parallel_for(nth, m, 0, qmm_rows, &c);
        kq_epi_apply(&q, acc, 1, n, 0, n, m, r->out[0].data, b * m * n, 1, n, r->threads);
    }
    return KILN_OK;
}

/* ---------------- kiln::MaxPool on 8-bit NHWC: q8 ----------------
 *
 * The INT8 region's MaxPool (builder/pass_qdq.c: X and Y [N, H, W, C] of
 * one scale and zero point, so the max of the codes is the code of the
 * max). Each output pixel starts as a copy of its window's first X pixel
 * and takes the bytewise max of the others, C contiguous bytes at a time
 * (a loop the compiler vectorizes); rows of output pixels are split over
 * the threads. The reference ran it through an NCHW copy and a double a
 * value. A window of padding only (declined at build; possible at run
 * only for other shapes of a dynamic profile) gets the byte the
 * reference stores for its -inf. */
static bool q8pool_window(const kn_node *n, const int64_t *nhwc, kn_window *w, bool full) {
    size_t nk;
    const int64_t *ks = kn_attr_ints(n, "kernel_shape", &nk);
    if (!ks || nk != 2)
        return false;
    int64_t sp[2] = {nhwc[1], nhwc[2]};
    if (kn_window_forward(n, 2, sp, ks, kn_attr_int(n, "ceil_mode", 0) != 0, w) != KILN_OK)
        return false;
    for (int d = 0; d < 2 && full; d++)
        for (int64_t o = 0; o < w->out[d]; o++) {
            bool hit = false;
            for (int64_t t = 0; t < w->kernel[d] && !hit; t++) {
                int64_t pos = o * w->stride[d] - w->pad0[d] + t * w->dil[d];
                hit = pos >= 0 && pos < w->in[d];
            }
            if (!hit)
                return false;
        }
    return true;
}

static bool q8pool_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    if (n_in < 1 || n_out < 1 || (n_out > 1 && out[1].dtype != KILN_DTYPE_UNDEFINED))
        return false;
    kiln_dtype t = in[0].dtype;
    if ((t != KILN_DTYPE_UINT8 && t != KILN_DTYPE_INT8) || out[0].dtype != t || in[0].rank != 4 ||
        !kn_attr_int(n, "channels_last", 0) || kn_attr_int(n, "storage_order", 0) != 0)
        return false;
    for (int d = 1; d < 4; d++) /* the batch may be dynamic */
        if (in[0].dims[d] <= 0)
            return false;
    kn_window w;
    return q8pool_window(n, in[0].dims, &w, true);
}

typedef struct q8pool_ctx {
    const uint8_t *x;
    uint8_t *y;
    kn_window w;
    int64_t c, oh, ow, ih, iw;
    bool sgn;
    uint8_t empty; /* the reference's byte for a window of padding only */
} q8pool_ctx;

static void q8pool_max_u8(uint8_t *restrict a, const uint8_t *restrict b, int64_t c) {
    for (int64_t i = 0; i < c; i++)
        a[i] = b[i] > a[i] ? b[i] : a[i];
}

static void q8pool_max_s8(int8_t *restrict a, const int8_t *restrict b, int64_t c) {
    for (int64_t i = 0; i < c; i++)
        a[i] = b[i] > a[i] ? b[i] : a[i];
}

/* rows [lo, hi) of n * OH output rows */
static void q8pool_rows(void *vc, int64_t lo, int64_t hi, int tid) {
    const q8pool_ctx *p = vc;
    const kn_window *w = &p->w;
    (void)tid;
    for (int64_t row = lo; row < hi; row++) {
        int64_t n = row / p->oh, oy = row % p->oh;
        const uint8_t *img = p->x + n * p->ih * p->iw * p->c;
        for (int64_t ox = 0; ox < p->ow; ox++) {
            uint8_t *o = p->y + (row * p->ow + ox) * p->c;
            bool first = true;
            for (int64_t ky = 0; ky < w->kernel[0]; ky++) {
                int64_t iy = oy * w->stride[0] - w->pad0[0] + ky * w->dil[0];
                if (iy < 0 || iy >= p->ih)
                    continue;
                for (int64_t kx = 0; kx < w->kernel[1]; kx++) {
                    int64_t ix = ox * w->stride[1] - w->pad0[1] + kx * w->dil[1];
                    if (ix < 0 || ix >= p->iw)
                        continue;
                    const uint8_t *src = img + (iy * p->iw + ix) * p->c;
                    if (first)
                        memcpy(o, src, (size_t)p->c);
                    else if (p->sgn)
                        q8pool_max_s8((int8_t *)o, (const int8_t *)src, p->c);
                    else
                        q8pool_max_u8(o, src, p->c);
                    first = false;
                }
            }
            if (first)
                memset(o, p->empty, (size_t)p->c);
        }
    }
}

static kiln_status q8pool_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    q8pool_ctx p;
    memset(&p, 0, sizeof p);
    if (x->rank != 4 || !q8pool_window(r->node, x->dims, &p.w, false))
        return kn_node_error(r->node, KILN_ERR_SHAPE, "the 8-bit MaxPool's window does not fit X");
    uint64_t e8 = 0; /* kb_st may write up to 8 bytes for other types */
    kb_st(&e8, x->dtype, 0, -INFINITY);
    memcpy(&p.empty, &e8, 1);
    p.x = x->data;
    p.y = y->data;
    p.c = x->dims[3];
    p.ih = x->dims[1], p.iw = x->dims[2];
    p.oh = p.w.out[0], p.ow = p.w.out[1];
    p.sgn = x->dtype == KILN_DTYPE_INT8;
    if (y->rank != 4 || y->dims[0] != x->dims[0] || y->dims[1] != p.oh || y->dims[2] != p.ow ||
        y->dims[3] != p.c)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "Y's dims are not the window's");
    int64_t rows = x->dims[0] * p.oh;
    int64_t work = rows * p.ow * p.c * p.w.kernel[0] * p.w.kernel[1];
    kn_parallel_for(r->threads > 1 && work > 65536 ? r->threads : 1, rows, 0, q8pool_rows, &p);
    return KILN_OK;
}

/* ---------------- the table ---------------- */

const kb_kernel kb_cpu_int8[] = {
    {"QConv", KN_DOMAIN_KILN, "ref", NULL, NULL, NULL, kq_qconv_prepare, NULL, kq_qconv_run},
    {"QMatMul", KN_DOMAIN_KILN, "ref", NULL, NULL, NULL, kq_qmatmul_prepare, NULL, kq_qmatmul_run},
    {"MaxPool", KN_DOMAIN_KILN, "q8", q8pool_supports, NULL, NULL, NULL, NULL, q8pool_run},
#ifdef KILN_HAVE_DNNL
    {"QConv", KN_DOMAIN_KILN, "dnnl_int8", kq_dnnl_conv_supports, NULL, NULL, kq_dnnl_conv_prepare,
     kq_dnnl_release, kq_dnnl_conv_run},
    {"QMatMul", KN_DOMAIN_KILN, "dnnl_int8", kq_dnnl_matmul_supports, NULL, NULL,
     kq_dnnl_matmul_prepare, kq_dnnl_release, kq_dnnl_matmul_run},
#endif
};
const size_t kb_cpu_int8_count = KN_ARRAY_LEN(kb_cpu_int8);
