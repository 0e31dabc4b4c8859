/* k_nn_conv.c - reference Conv and ConvTranspose (float, any number of
 * spatial dims): im2col / col2im around the reference GEMM, one group at a
 * time. */
#include <string.h>

#include "k_nn.h"

static size_t align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

kiln_status kb_conv_setup(const kn_node *node, const kb_tensor *x, const kb_tensor *w,
                          kb_conv *cv) {
    memset(cv, 0, sizeof *cv);
    if (x->rank < 3 || w->rank != x->rank)
        return kn_node_error(node, KILN_ERR_SHAPE, "input rank %d / weight rank %d", x->rank,
                             w->rank);
    KN_TRY(kn_window_forward(node, x->rank - 2, x->dims + 2, w->dims + 2, false, &cv->w));
    cv->batch = x->dims[0];
    cv->cin = x->dims[1];
    cv->cout = w->dims[0];
    cv->group = kn_attr_int(node, "group", 1);
    if (cv->group < 1 || cv->cin != w->dims[1] * cv->group || cv->cout % cv->group)
        return kn_node_error(node, KILN_ERR_SHAPE, "channels do not fit the group count");
    cv->in_size = cv->out_size = cv->kernel_size = 1;
    cv->direct = true;
    cv->slots = 1;
    for (int i = 0; i < cv->w.nsp; i++) {
        cv->in_size *= cv->w.in[i];
        cv->out_size *= cv->w.out[i];
        cv->kernel_size *= cv->w.kernel[i];
        if (cv->w.kernel[i] != 1 || cv->w.stride[i] != 1 || cv->w.pad0[i] || cv->w.pad1[i])
            cv->direct = false;
    }
    /* im2col a bounded number of columns at a time (KB_CONV_COL_FLOATS per
     * slot), but never fewer than 256 */
    int64_t kdim = cv->cin / cv->group * cv->kernel_size;
    cv->chunk = kdim > 0 ? KB_CONV_COL_FLOATS / kdim : cv->out_size;
    if (cv->chunk < 256)
        cv->chunk = 256;
    if (cv->chunk > cv->out_size)
        cv->chunk = cv->out_size;
    return KILN_OK;
}

void kb_conv_use_threads(kb_conv *cv, int threads) {
    /* grouped convolutions run a group per thread, with an im2col slot each */
    int64_t jobs = cv->group * cv->batch;
    cv->slots = cv->group > 1 && threads > 1 ? (jobs < threads ? (int)jobs : threads) : 1;
}

/* Floats of one im2col slot: `chunk` columns of one group's matrix. */
static size_t col_floats(const kb_conv *cv) {
    return cv->direct ? 0 : (size_t)(cv->cin / cv->group) * (size_t)cv->kernel_size *
                                (size_t)cv->chunk;
}

size_t kb_conv_workspace(const kb_conv *cv) {
    return (size_t)cv->slots * ((col_floats(cv) * sizeof(float) + 63u) & ~(size_t)63u);
}

/* Unravel a kernel offset into per-dim kernel coordinates. */
static void kernel_coords(const kn_window *w, int64_t kidx, int64_t *kc) {
    for (int d = w->nsp - 1; d >= 0; d--) {
        kc[d] = kidx % w->kernel[d];
        kidx /= w->kernel[d];
    }
}

typedef struct im2col_rows_ctx {
    const kn_window *w;
    const float *x;
    int64_t ksize;
    int64_t in_size;
    int64_t o0;
    int64_t o1;
    float *col;
    int last;
    int64_t olast;
    int64_t n;
} im2col_rows_ctx;

static void im2col_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const im2col_rows_ctx *c_ = vc;
    const kn_window *w = c_->w;
    const float *x = c_->x;
    int64_t ksize = c_->ksize;
    int64_t in_size = c_->in_size;
    int64_t o0 = c_->o0;
    int64_t o1 = c_->o1;
    float *col = c_->col;
    int last = c_->last;
    int64_t olast = c_->olast;
    int64_t n = c_->n;
    (void)tid;
    for (int64_t r = lo_; r < hi_; r++) {
        int64_t kc[KN_WIN_MAX];
        kernel_coords(w, r % ksize, kc);
        const float *xc = x + (r / ksize) * in_size;
        float *dst = col + r * n;
        for (int64_t o = o0; o < o1;) {
            int64_t j0 = o % olast, j1 = olast - j0 < o1 - o ? olast : j0 + (o1 - o);
            /* input row of this output row, from the outer output coordinates */
            int64_t outer = o / olast, off = 0, mul = 1;
            bool inside = true;
            for (int d = last - 1; d >= 0; d--) {
                int64_t oc = outer % w->out[d];
                outer /= w->out[d];
                int64_t pos = oc * w->stride[d] - w->pad0[d] + kc[d] * w->dil[d];
                if (pos < 0 || pos >= w->in[d])
                    inside = false;
                off += pos * mul;
                mul *= w->in[d];
            }
            float *run = dst + (o - o0) - j0;
            if (!inside) {
                memset(run + j0, 0, sizeof(float) * (size_t)(j1 - j0));
            } else {
                const float *xr = xc + off * w->in[last];
                int64_t s = w->stride[last], base = kc[last] * w->dil[last] - w->pad0[last];
                for (int64_t j = j0; j < j1; j++) {
                    int64_t pos = j * s + base;
                    run[j] = pos >= 0 && pos < w->in[last] ? xr[pos] : 0.f;
                }
            }
            o += j1 - j0;
        }
    }
}

/* col[(c * K + kidx), o] = x[c, o * stride - pad0 + k * dil] or 0 outside. */
/* Columns [o0, o1) of the im2col matrix: col[(c * K + kidx), o - o0] =
 * x[c, o * stride - pad0 + k * dil], or 0 outside the input. Each output row
 * (positions along the last spatial dim) is written as one run. */
static void im2col(const kn_window *w, const float *x, int64_t channels, int64_t ksize,
                   int64_t in_size, int64_t o0, int64_t o1, float *col, int threads) {
    int nsp = w->nsp, last = nsp - 1;
    int64_t rows = channels * ksize, olast = w->out[last], n = o1 - o0;
    int nth = threads > 1 && rows * n > 32768 ? threads : 1;
    {
        im2col_rows_ctx c_ = {w, x, ksize, in_size, o0, o1, col, last, olast, n};
        kn_parallel_for(nth, rows, 0, im2col_rows, &c_);
    }
}

/* One group of one image: im2col (unless direct) and the GEMM, `chunk`
 * output positions at a time so the im2col slot stays bounded. */
static void conv_group(const kb_conv *cv, const float *x, const float *w, float *y, int64_t b,
                       int64_t g, float *col, int threads) {
    int64_t cin_g = cv->cin / cv->group, cout_g = cv->cout / cv->group;
    int64_t kdim = cin_g * cv->kernel_size;
    const float *xg = x + (b * cv->cin + g * cin_g) * cv->in_size;
    const float *wg = w + g * cout_g * kdim;
    float *yg = y + (b * cv->cout + g * cout_g) * cv->out_size;
    if (cv->direct) {
        kb_sgemm(false, false, cout_g, cv->out_size, kdim, 1.f, wg, kdim, xg, cv->out_size, 0.f,
                 yg, cv->out_size, threads);
        return;
    }
    for (int64_t o0 = 0; o0 < cv->out_size; o0 += cv->chunk) {
        int64_t o1 = o0 + cv->chunk < cv->out_size ? o0 + cv->chunk : cv->out_size;
        im2col(&cv->w, xg, cin_g, cv->kernel_size, cv->in_size, o0, o1, col, threads);
        kb_sgemm(false, false, cout_g, o1 - o0, kdim, 1.f, wg, kdim, col, o1 - o0, 0.f, yg + o0,
                 cv->out_size, threads);
    }
}

typedef struct conv_jobs_ctx {
    const kb_conv *cv;
    const float *x;
    const float *w;
    float *y;
    float *ws;
    size_t stride;
} conv_jobs_ctx;

static void conv_jobs(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const conv_jobs_ctx *c_ = vc;
    const kb_conv *cv = c_->cv;
    const float *x = c_->x;
    const float *w = c_->w;
    float *y = c_->y;
    float *ws = c_->ws;
    size_t stride = c_->stride;
    (void)tid;
    for (int64_t j = lo_; j < hi_; j++)
        conv_group(cv, x, w, y, j / cv->group, j % cv->group,
                   ws + (size_t)tid * stride, 1);
}

void kb_conv_forward(const kb_conv *cv, const float *x, const float *w, float *y,
                     const kb_epilogue *ep, float *ws, int threads) {
    int64_t jobs = cv->batch * cv->group;
    size_t stride = ((col_floats(cv) * sizeof(float) + 63u) & ~(size_t)63u) / sizeof(float);
    int nth = threads < cv->slots ? threads : cv->slots;
    if (nth > 1 && jobs > 1) {
        /* many small groups (depthwise): one group per thread, each with its
         * own im2col slot */
        {
            conv_jobs_ctx c_ = {cv, x, w, y, ws, stride};
            kn_parallel_for(nth, jobs, 1, conv_jobs, &c_);
        }
    } else {
        for (int64_t j = 0; j < jobs; j++)
            conv_group(cv, x, w, y, j / cv->group, j % cv->group, ws, threads);
    }
    if (ep)
        kb_epilogue_rows(ep, y, ep->residual, cv->batch * cv->cout, cv->out_size, cv->cout,
                         threads);
}

kiln_status kb_nn_conv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                               int n_in, const kb_tensor *out, int n_out, void **inst,
                               size_t *workspace) {
    kb_conv *cv = kn_malloc(sizeof *cv);
    if (!cv)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kb_conv_setup(node, &in[0], &in[1], cv);
    if (st != KILN_OK) {
        kn_free(cv);
        return st;
    }
    kb_conv_use_threads(cv, kb_cpu_default_threads());
    *inst = cv;
    *workspace = align64(kb_conv_workspace(cv)) + kb_stage_bytes(in, n_in, &out[0]);
    return KILN_OK;
}

void kb_nn_conv_release(void *inst) { kn_free(inst); }

kiln_status kb_nn_conv_run(const kb_run *r) {
    const kb_conv *cv = r->inst;
    if (!cv)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    if (!kb_stage_types_ok(r->in, r->n_in, &r->out[0]))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "Conv of %s is not supported",
                             kiln_dtype_name(r->in[0].dtype));
    size_t own = align64(kb_conv_workspace(cv));
    if (r->workspace_size < own + kb_stage_bytes(r->in, r->n_in, &r->out[0]))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    kb_staged st;
    kb_stage_in(r->in, r->n_in, &r->out[0], (uint8_t *)r->workspace + own, &st);
    kb_epilogue ep = {0};
    bool has_bias = r->n_in > 2 && st.in[2].data;
    if (has_bias)
        ep.bias = st.in[2].data;
    kb_conv_forward(cv, st.in[0].data, st.in[1].data, st.out.data, has_bias ? &ep : NULL,
                    r->workspace, r->threads);
    kb_stage_out(&st, &r->out[0]);
    return KILN_OK;
}

/* ---------------- ConvTranspose ---------------- */

typedef struct convt_geom {
    kn_window w;
    int64_t batch, cin, cout, group, in_size, out_size, kernel_size;
    int64_t chunk; /* input positions per GEMM + col2im pass */
} convt_geom;

static kiln_status convt_setup(const kn_node *node, const kb_tensor *x, const kb_tensor *w,
                               convt_geom *g) {
    memset(g, 0, sizeof *g);
    if (x->rank < 3 || w->rank != x->rank)
        return kn_node_error(node, KILN_ERR_SHAPE, "input rank %d / weight rank %d", x->rank,
                             w->rank);
    KN_TRY(kn_window_transpose(node, x->rank - 2, x->dims + 2, w->dims + 2, &g->w));
    g->batch = x->dims[0];
    g->cin = x->dims[1];
    g->group = kn_attr_int(node, "group", 1);
    g->cout = w->dims[1] * g->group;
    if (g->group < 1 || g->cin != w->dims[0] || g->cin % g->group)
        return kn_node_error(node, KILN_ERR_SHAPE, "channels do not fit the group count");
    g->in_size = g->out_size = g->kernel_size = 1;
    for (int i = 0; i < g->w.nsp; i++) {
        g->in_size *= g->w.in[i];
        g->out_size *= g->w.out[i];
        g->kernel_size *= g->w.kernel[i];
    }
    int64_t rows = g->cout / g->group * g->kernel_size; /* bounded like Conv's im2col */
    g->chunk = rows > 0 ? KB_CONV_COL_FLOATS / rows : g->in_size;
    if (g->chunk < 256)
        g->chunk = 256;
    if (g->chunk > g->in_size)
        g->chunk = g->in_size;
    return KILN_OK;
}

static size_t convt_workspace(const convt_geom *g) {
    return (size_t)(g->cout / g->group) * (size_t)g->kernel_size * (size_t)g->chunk *
           sizeof(float);
}

kiln_status kb_nn_convt_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                int n_in, const kb_tensor *out, int n_out, void **inst,
                                size_t *workspace) {
    convt_geom g;
    KN_TRY(convt_setup(node, &in[0], &in[1], &g));
    *workspace = align64(convt_workspace(&g)) + kb_stage_bytes(in, n_in, &out[0]);
    return KILN_OK;
}

typedef struct col2im_channels_ctx {
    const kn_window *w;
    const float *col;
    int64_t ksize;
    int64_t i0;
    int64_t out_size;
    float *y;
    int nsp;
    int64_t n;
} col2im_channels_ctx;

static void col2im_channels(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const col2im_channels_ctx *c_ = vc;
    const kn_window *w = c_->w;
    const float *col = c_->col;
    int64_t ksize = c_->ksize;
    int64_t i0 = c_->i0;
    int64_t out_size = c_->out_size;
    float *y = c_->y;
    int nsp = c_->nsp;
    int64_t n = c_->n;
    (void)tid;
    for (int64_t c = lo_; c < hi_; c++) {
        float *yc = y + c * out_size;
        for (int64_t kidx = 0; kidx < ksize; kidx++) {
            int64_t kc[KN_WIN_MAX], ic[KN_WIN_MAX];
            kernel_coords(w, kidx, kc);
            for (int64_t d = nsp - 1, rest = i0; d >= 0; d--) { /* coordinates of i0 */
                ic[d] = rest % w->in[d];
                rest /= w->in[d];
            }
            const float *src = col + (c * ksize + kidx) * n;
            for (int64_t i = 0; i < n; i++) {
                int64_t off = 0;
                bool inside = true;
                for (int d = 0; d < nsp; d++) {
                    int64_t pos = ic[d] * w->stride[d] - w->pad0[d] + kc[d] * w->dil[d];
                    if (pos < 0 || pos >= w->out[d])
                        inside = false;
                    off = off * w->out[d] + pos;
                }
                if (inside)
                    yc[off] += src[i];
                for (int d = nsp - 1; d >= 0; d--) {
                    if (++ic[d] < w->in[d])
                        break;
                    ic[d] = 0;
                }
            }
        }
    }
}

/* y[c, i * stride - pad0 + k * dil] += col[(c * K + kidx), i - i0] for the
 * input positions i in [i0, i1): the adjoint of im2col. One thread per
 * output channel, so no two threads add to one value. */
static void col2im(const kn_window *w, const float *col, int64_t channels, int64_t ksize,
                   int64_t i0, int64_t i1, int64_t out_size, float *y, int threads) {
    int nsp = w->nsp;
    int64_t n = i1 - i0;
    int nth = threads > 1 && channels * ksize * n > 32768 ? threads : 1;
    {
        col2im_channels_ctx c_ = {w, col, ksize, i0, out_size, y, nsp, n};
        kn_parallel_for(nth, channels, 0, col2im_channels, &c_);
    }
}

kiln_status kb_nn_convt_run(const kb_run *r) {
    if (!kb_stage_types_ok(r->in, r->n_in, &r->out[0]))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "ConvTranspose of %s is not supported",
                             kiln_dtype_name(r->in[0].dtype));
    convt_geom g;
    KN_TRY(convt_setup(r->node, &r->in[0], &r->in[1], &g));
    size_t own = align64(convt_workspace(&g));
    if (r->workspace_size < own + kb_stage_bytes(r->in, r->n_in, &r->out[0]))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    kb_staged st;
    kb_stage_in(r->in, r->n_in, &r->out[0], (uint8_t *)r->workspace + own, &st);
    int64_t cin_g = g.cin / g.group, cout_g = g.cout / g.group, rows = cout_g * g.kernel_size;
    const float *X = st.in[0].data, *W = st.in[1].data;
    const float *bias = r->n_in > 2 ? st.in[2].data : NULL;
    float *Y = st.out.data, *col = r->workspace;
    memset(Y, 0, sizeof(float) * (size_t)(g.batch * g.cout * g.out_size));
    for (int64_t b = 0; b < g.batch; b++) {
        for (int64_t gi = 0; gi < g.group; gi++) {
            const float *xg = X + (b * g.cin + gi * cin_g) * g.in_size;
            const float *wg = W + gi * cin_g * rows; /* [cin_g, cout_g * K] */
            for (int64_t i0 = 0; i0 < g.in_size; i0 += g.chunk) {
                int64_t i1 = i0 + g.chunk < g.in_size ? i0 + g.chunk : g.in_size;
                kb_sgemm(true, false, rows, i1 - i0, cin_g, 1.f, wg, rows, xg + i0, g.in_size,
                         0.f, col, i1 - i0, r->threads);
                col2im(&g.w, col, cout_g, g.kernel_size, i0, i1, g.out_size,
                       Y + (b * g.cout + gi * cout_g) * g.out_size, r->threads);
            }
        }
    }
    if (bias) {
        kb_epilogue ep = {.bias = bias};
        kb_epilogue_rows(&ep, Y, NULL, g.batch * g.cout, g.out_size, g.cout, r->threads);
    }
    kb_stage_out(&st, &r->out[0]);
    return KILN_OK;
}
