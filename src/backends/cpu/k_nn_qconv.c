/* k_nn_qconv.c - reference integer convolutions: ConvInteger (int32 result)
 * and QLinearConv (requantized 8-bit result). im2col of the zero-point-
 * shifted input into int16, then an exact integer GEMM per group. */
#include <math.h>
#include <string.h>

#include "k_int8.h"
#include "k_nn.h"

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

static int32_t ld8(const void *p, kiln_dtype t, int64_t i) {
    return t == KILN_DTYPE_UINT8 ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}

/* A zero point (or scale) of channel c: scalar or one per channel; dflt when absent. */
double kq_per_channel(const kb_tensor *t, int64_t c, double dflt) {
    if (!t || !t->data)
        return dflt;
    return kb_ld(t->data, t->dtype, (size_t)(kb_numel(t) == 1 ? 0 : c));
}

typedef struct im2col_i16_rows_ctx {
    const kn_window *w;
    const void *x;
    kiln_dtype dt;
    int64_t x_off;
    int32_t zp;
    int64_t ksize;
    int64_t in_size;
    int64_t out_size;
    int16_t *col;
    int nsp;
} im2col_i16_rows_ctx;

static void im2col_i16_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const im2col_i16_rows_ctx *c_ = vc;
    const kn_window *w = c_->w;
    const void *x = c_->x;
    kiln_dtype dt = c_->dt;
    int64_t x_off = c_->x_off;
    int32_t zp = c_->zp;
    int64_t ksize = c_->ksize;
    int64_t in_size = c_->in_size;
    int64_t out_size = c_->out_size;
    int16_t *col = c_->col;
    int nsp = c_->nsp;
    (void)tid;
    for (int64_t r = lo_; r < hi_; r++) {
        int64_t kc[KN_WIN_MAX], oc[KN_WIN_MAX] = {0}, kidx = r % ksize;
        for (int d = nsp - 1; d >= 0; d--) {
            kc[d] = kidx % w->kernel[d];
            kidx /= w->kernel[d];
        }
        int64_t base = x_off + (r / ksize) * in_size;
        for (int64_t o = 0; o < out_size; o++) {
            int64_t off = 0;
            bool inside = true;
            for (int d = 0; d < nsp; d++) {
                int64_t pos = oc[d] * w->stride[d] - w->pad0[d] + kc[d] * w->dil[d];
                if (pos < 0 || pos >= w->in[d])
                    inside = false;
                off = off * w->in[d] + pos;
            }
            col[r * out_size + o] = inside ? (int16_t)(ld8(x, dt, base + off) - zp) : 0;
            for (int d = nsp - 1; d >= 0; d--) {
                if (++oc[d] < w->out[d])
                    break;
                oc[d] = 0;
            }
        }
    }
}

/* col[(c * K + kidx), o] = x[c, window position] - zp, or 0 in the padding
 * (which holds the zero point). */
void kq_im2col_i16(const kn_window *w, const void *x, kiln_dtype dt, int64_t x_off,
                       int32_t zp, int64_t channels, int64_t ksize, int64_t in_size,
                       int64_t out_size, int16_t *col, int threads) {
    int nsp = w->nsp;
    int64_t rows = channels * ksize;
    int nth = threads > 1 && rows * out_size > 32768 ? threads : 1;
    {
        im2col_i16_rows_ctx c_ = {w, x, dt, x_off, zp, ksize, in_size, out_size, col, nsp};
        kn_parallel_for(nth, rows, 0, im2col_i16_rows, &c_);
    }
}

typedef struct int_gemm_rows_ctx {
    const void *w;
    kiln_dtype wt;
    int64_t w_off;
    const kb_tensor *wzp;
    int64_t co0;
    int64_t kdim;
    const int16_t *col;
    int64_t n;
    int32_t *acc;
} int_gemm_rows_ctx;

static void int_gemm_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const int_gemm_rows_ctx *c_ = vc;
    const void *w = c_->w;
    kiln_dtype wt = c_->wt;
    int64_t w_off = c_->w_off;
    const kb_tensor *wzp = c_->wzp;
    int64_t co0 = c_->co0;
    int64_t kdim = c_->kdim;
    const int16_t *col = c_->col;
    int64_t n = c_->n;
    int32_t *acc = c_->acc;
    (void)tid;
    for (int64_t i = lo_; i < hi_; i++) {
        int32_t *row = acc + i * n;
        int32_t zp = (int32_t)kq_per_channel(wzp, co0 + i, 0);
        memset(row, 0, sizeof(int32_t) * (size_t)n);
        for (int64_t p = 0; p < kdim; p++) {
            int32_t a = ld8(w, wt, w_off + i * kdim + p) - zp;
            if (a == 0)
                continue;
            const int16_t *cp = col + p * n;
#pragma omp simd
            for (int64_t j = 0; j < n; j++)
                row[j] += a * cp[j];
        }
    }
}

/* acc[co, :] = sum_p (w[co, p] - wzp[co]) col[p, :] for the group's channels. */
void kq_int_gemm(const void *w, kiln_dtype wt, int64_t w_off, const kb_tensor *wzp,
                     int64_t co0, int64_t couts, int64_t kdim, const int16_t *col, int64_t n,
                     int32_t *acc, int threads) {
    int nth = threads > 1 && couts * kdim * n > 32768 ? threads : 1;
    {
        int_gemm_rows_ctx c_ = {w, wt, w_off, wzp, co0, kdim, col, n, acc};
        kn_parallel_for(nth, couts, 0, int_gemm_rows, &c_);
    }
}

static size_t qconv_workspace(const kb_conv *cv, bool requant) {
    size_t col = (size_t)(cv->cin / cv->group * cv->kernel_size * cv->out_size) * sizeof(int16_t);
    col = (col + 63u) & ~(size_t)63u;
    size_t acc = requant ? (size_t)(cv->cout / cv->group * cv->out_size) * sizeof(int32_t) : 0;
    return col + acc;
}

static kiln_status qconv_prepare(const kn_node *node, const kb_tensor *in, int wi, bool requant,
                                 size_t *workspace) {
    kb_conv cv;
    KN_TRY(kb_conv_setup(node, &in[0], &in[wi], &cv));
    *workspace = qconv_workspace(&cv, requant);
    return KILN_OK;
}

kiln_status kb_nn_convint_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                  int n_in, const kb_tensor *out, int n_out, void **inst,
                                  size_t *workspace) {
    return qconv_prepare(node, in, 1, false, workspace);
}

kiln_status kb_nn_qlinearconv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                      int n_in, const kb_tensor *out, int n_out, void **inst,
                                      size_t *workspace) {
    return qconv_prepare(node, in, 3, true, workspace);
}

/* Shared driver. For ConvInteger (q == NULL) the int32 sums go straight to y;
 * for QLinearConv they are requantized with q's scales and zero points. */
typedef struct qparams {
    const kb_tensor *xs, *ws, *ys, *yz, *bias;
} qparams;

static kiln_status qconv_run(const kb_run *r, int wi, const kb_tensor *xz, const kb_tensor *wz,
                             const qparams *q) {
    const kb_tensor *x = &r->in[0], *w = &r->in[wi];
    kb_tensor *y = &r->out[0];
    if (!is_8bit(x->dtype) || !is_8bit(w->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "8-bit input and weights only");
    kb_conv cv;
    KN_TRY(kb_conv_setup(r->node, x, w, &cv));
    if (r->workspace_size < qconv_workspace(&cv, q != NULL))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    int64_t cin_g = cv.cin / cv.group, cout_g = cv.cout / cv.group;
    int64_t kdim = cin_g * cv.kernel_size;
    size_t col_bytes = ((size_t)(kdim * cv.out_size) * sizeof(int16_t) + 63u) & ~(size_t)63u;
    int16_t *col = r->workspace;
    int32_t *acc = q ? (int32_t *)((uint8_t *)r->workspace + col_bytes) : NULL;
    int32_t xzp = (int32_t)kq_per_channel(xz, 0, 0);
    double lo = y->dtype == KILN_DTYPE_UINT8 ? 0.0 : -128.0;
    double hi = y->dtype == KILN_DTYPE_UINT8 ? 255.0 : 127.0;
    for (int64_t b = 0; b < cv.batch; b++)
        for (int64_t g = 0; g < cv.group; g++) {
            kq_im2col_i16(&cv.w, x->data, x->dtype, (b * cv.cin + g * cin_g) * cv.in_size, xzp, cin_g,
                       cv.kernel_size, cv.in_size, cv.out_size, col, r->threads);
            int64_t y_off = (b * cv.cout + g * cout_g) * cv.out_size;
            int32_t *dst = q ? acc : (int32_t *)y->data + y_off;
            kq_int_gemm(w->data, w->dtype, g * cout_g * kdim, wz, g * cout_g, cout_g, kdim, col,
                     cv.out_size, dst, r->threads);
            if (!q)
                continue;
            float yscale = (float)kq_per_channel(q->ys, 0, 1.0);
            double yzero = kq_per_channel(q->yz, 0, 0.0);
            for (int64_t i = 0; i < cout_g; i++) {
                int64_t co = g * cout_g + i;
                float scale = (float)kq_per_channel(q->xs, 0, 1.0) *
                              (float)kq_per_channel(q->ws, co, 1.0) / yscale;
                int32_t bv = (int32_t)kq_per_channel(q->bias, co, 0);
                for (int64_t j = 0; j < cv.out_size; j++) {
                    double v = nearbyint((double)((float)(acc[i * cv.out_size + j] + bv) * scale)) +
                               yzero;
                    v = v < lo ? lo : (v > hi ? hi : v);
                    kb_st(y->data, y->dtype, (size_t)(y_off + i * cv.out_size + j), v);
                }
            }
        }
    return KILN_OK;
}

kiln_status kb_nn_convint_run(const kb_run *r) {
    const kb_tensor *xz = r->n_in > 2 && r->in[2].data ? &r->in[2] : NULL;
    const kb_tensor *wz = r->n_in > 3 && r->in[3].data ? &r->in[3] : NULL;
    return qconv_run(r, 1, xz, wz, NULL);
}

kiln_status kb_nn_qlinearconv_run(const kb_run *r) {
    qparams q = {&r->in[1], &r->in[4], &r->in[6], &r->in[7],
                 r->n_in > 8 && r->in[8].data ? &r->in[8] : NULL};
    if (!is_8bit(r->out[0].dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "8-bit output only");
    return qconv_run(r, 3, &r->in[2], &r->in[5], &q);
}
