/* k_nn2.c - the second CUDA nn family's kb_kernel glue: ConvTranspose through
 * cuDNN's backward-data convolution, Instance / Group / RMS / Lp /
 * MeanVariance normalization and LRN, LpPool / GlobalLpPool, and Einsum
 * (kernels in nn2.cu; batched-matmul equations also through cuBLASLt). Attributes are read as the CPU reference reads them;
 * float32, float16 and bfloat16 (Einsum also float64, int32 and int64). */
#include <limits.h>
#include <string.h>

#include "elementwise.cuh"
#include "graph/ops_nn.h"
#include "graph/ops_tensor.h"
#include "graph/window.h"
#include "kc_common.h"
#include "loss.cuh"
#include "random.cuh"
#include "nn2.cuh"

static bool same_float(const kn_tinfo *in, int n_in, const kn_tinfo *out, int n_out) {
    return n_in >= 1 && n_out >= 1 && kc_is_float(in[0].dtype) && out[0].dtype == in[0].dtype &&
           in[0].rank <= KC_MAX_DIMS;
}

static const kc_pidx PIDX_NONE = {1, 0, 1, 1};

/* Group a tensor's dims into kept and reduced runs (adjacent dims of one
 * kind merge; dims of 1 drop out), as kc_reduce does. */
static void norm_geometry(int rank, const int64_t *dims, uint32_t red_mask, kc_norm *p) {
    int64_t st[KILN_MAX_DIMS];
    kc_strides(rank, dims, st);
    int last = -1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1)
            continue;
        int red = (red_mask >> d) & 1u;
        int64_t *gd = red ? p->red_dims : p->keep_dims, *gs = red ? p->red_stride : p->keep_stride;
        int *cnt = red ? &p->n_red : &p->n_keep;
        if (last == red && *cnt > 0) {
            gd[*cnt - 1] *= dims[d];
            gs[*cnt - 1] = st[d];
        } else {
            gd[*cnt] = dims[d];
            gs[*cnt] = st[d];
            (*cnt)++;
        }
        last = red;
    }
    p->groups = kn_numel(p->n_keep, p->keep_dims);
    p->len = kn_numel(p->n_red, p->red_dims);
}

static kiln_status norm_launch(const kb_run *r, const kc_norm *p) {
    KC_CUDA(r->node, kc_norm_run(r->in[0].data, r->out[0].data, r->in[0].dtype, p, kc_stream(r)));
    return KILN_OK;
}

/* Mean/variance normalization of `groups` contiguous runs of `len` elements
 * with inputs 1 and 2 as scale and bias (Instance and GroupNormalization);
 * the caller sets how scale and bias are indexed (si, bi). */
static void meanvar_groups(const kb_run *r, int64_t groups, int64_t len, kc_norm *p) {
    memset(p, 0, sizeof *p);
    p->mode = KC_NORM_MEANVAR;
    p->groups = groups;
    p->len = len;
    p->n_keep = p->n_red = 1;
    p->keep_dims[0] = groups;
    p->keep_stride[0] = len;
    p->red_dims[0] = len;
    p->red_stride[0] = 1;
    p->eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    p->scale = r->in[1].data;
    p->bias = r->in[2].data;
    p->pt = r->in[1].dtype;
}

/* ---------------- InstanceNormalization ---------------- */

static bool instnorm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                              const kn_tinfo *out, int n_out) {
    return same_float(in, n_in, out, n_out) && n_in >= 3 && in[0].rank >= 2 &&
           kc_is_float(in[1].dtype) && in[2].dtype == in[1].dtype &&
           kn_numel(in[1].rank, in[1].dims) == in[0].dims[1] &&
           kn_numel(in[2].rank, in[2].dims) == in[0].dims[1];
}

static kiln_status instnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    if (r->n_in < 3 || x->rank < 2 || kc_numel(&r->in[1]) != x->dims[1] ||
        kc_numel(&r->in[2]) != x->dims[1] || r->in[1].dtype != r->in[2].dtype)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "scale and B need one value per channel");
    kc_norm p;
    meanvar_groups(r, x->dims[0] * x->dims[1], kn_numel(x->rank - 2, x->dims + 2), &p);
    p.si = p.bi = (kc_pidx){x->dims[1] ? x->dims[1] : 1, 1, 1, 1};
    return norm_launch(r, &p);
}

/* ---------------- GroupNormalization ---------------- */

static bool groupnorm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                               const kn_tinfo *out, int n_out) {
    if (!same_float(in, n_in, out, n_out) || n_in < 3 || in[0].rank < 2 ||
        !kc_is_float(in[1].dtype) || in[2].dtype != in[1].dtype)
        return false;
    int64_t g = kn_attr_int(node, "num_groups", 1), c = in[0].dims[1];
    int64_t ns = kn_numel(in[1].rank, in[1].dims), nb = kn_numel(in[2].rank, in[2].dims);
    return g >= 1 && c % g == 0 && (ns == c || ns == g) && (nb == c || nb == g);
}

static kiln_status groupnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t g = kn_attr_int(r->node, "num_groups", 1), c = x->rank >= 2 ? x->dims[1] : 0;
    if (r->n_in < 3 || x->rank < 2 || g < 1 || c % g)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "%lld channels in %lld groups",
                             (long long)c, (long long)g);
    int64_t ns = kc_numel(&r->in[1]), nb = kc_numel(&r->in[2]);
    if ((ns != c && ns != g) || (nb != c && nb != g) || r->in[1].dtype != r->in[2].dtype)
        return kn_node_error(r->node, KILN_ERR_SHAPE,
                             "scale and bias need one value per channel or per group");
    int64_t size = kn_numel(x->rank - 2, x->dims + 2), cpg = c / g;
    kc_norm p;
    meanvar_groups(r, x->dims[0] * g, cpg * size, &p);
    /* one value per channel (opset 21) or per group (opset 18), each on its own */
    kc_pidx per_ch = {g, cpg, size ? size : 1, cpg ? cpg : 1}, per_g = {g, 1, 1, 1};
    p.si = ns == c ? per_ch : per_g;
    p.bi = nb == c ? per_ch : per_g;
    return norm_launch(r, &p);
}

/* ---------------- RMSNormalization ---------------- */

/* The scale broadcast against the normalized dims (right-aligned): its
 * non-1 dims must be one contiguous run that matches them. */
static bool trailing_pidx(int n, const int64_t *dims, int srank, const int64_t *sdims, kc_pidx *q) {
    if (srank > n) {
        for (int d = 0; d < srank - n; d++)
            if (sdims[d] != 1)
                return false;
        sdims += srank - n;
        srank = n;
    }
    int a = -1, b = -1;
    for (int d = 0; d < n; d++) {
        int sd = d - (n - srank);
        int64_t s = sd >= 0 ? sdims[sd] : 1;
        if (s != 1) {
            if (a < 0)
                a = d;
            b = d;
        }
    }
    *q = PIDX_NONE;
    if (a < 0)
        return true; /* one value */
    for (int d = a; d <= b; d++) {
        int sd = d - (n - srank);
        if (sd < 0 || sdims[sd] != dims[d])
            return false;
    }
    q->jdiv = kn_numel(n - b - 1, dims + b + 1);
    q->jmod = kn_numel(b - a + 1, dims + a);
    if (q->jdiv < 1)
        q->jdiv = 1;
    if (q->jmod < 1)
        q->jmod = 1;
    return true;
}

static bool rmsnorm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                             const kn_tinfo *out, int n_out) {
    if (!same_float(in, n_in, out, n_out) || n_in < 2 || !kc_is_float(in[1].dtype))
        return false;
    int rank = in[0].rank;
    int64_t axis = kn_attr_int(node, "axis", -1);
    if (axis < -rank || axis >= rank)
        return false;
    if (axis < 0)
        axis += rank;
    kc_pidx q;
    return trailing_pidx(rank - (int)axis, in[0].dims + axis, in[1].rank, in[1].dims, &q);
}

static kiln_status rmsnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1];
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", -1), x->rank, &axis));
    kc_norm p;
    memset(&p, 0, sizeof p);
    if (!trailing_pidx(x->rank - axis, x->dims + axis, sc->rank, sc->dims, &p.si))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "the scale must broadcast as one run of the normalized dims");
    p.mode = KC_NORM_RMS;
    p.groups = kn_numel(axis, x->dims);
    p.len = kn_numel(x->rank - axis, x->dims + axis);
    p.n_keep = p.n_red = 1;
    p.keep_dims[0] = p.groups;
    p.keep_stride[0] = p.len;
    p.red_dims[0] = p.len;
    p.red_stride[0] = 1;
    p.eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    p.scale = sc->data;
    p.pt = sc->dtype;
    p.bi = PIDX_NONE;
    return norm_launch(r, &p);
}

/* ---------------- LpNormalization ---------------- */

static bool lpnorm_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    int64_t axis = kn_attr_int(node, "axis", -1);
    return same_float(in, n_in, out, n_out) && in[0].rank >= 1 && axis >= -in[0].rank &&
           axis < in[0].rank;
}

static kiln_status lpnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int axis = 0;
    KN_TRY(kc_norm_axis(r->node, kn_attr_int(r->node, "axis", -1), x->rank, &axis));
    kc_norm p;
    memset(&p, 0, sizeof p);
    norm_geometry(x->rank, x->dims, 1u << axis, &p);
    p.mode = kn_attr_int(r->node, "p", 2) == 1 ? KC_NORM_L1 : KC_NORM_L2;
    p.si = p.bi = PIDX_NONE;
    return norm_launch(r, &p);
}

/* ---------------- MeanVarianceNormalization ---------------- */

static kiln_status mvn_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    size_t na;
    const int64_t *axes = kn_attr_ints(r->node, "axes", &na);
    static const int64_t dflt[] = {0, 2, 3};
    if (!axes) {
        axes = dflt;
        na = 3;
    }
    uint32_t mask = 0;
    for (size_t i = 0; i < na; i++) { /* out-of-range axes are ignored, as on the CPU */
        int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
        if (a >= 0 && a < x->rank)
            mask |= 1u << a;
    }
    kc_norm p;
    memset(&p, 0, sizeof p);
    norm_geometry(x->rank, x->dims, mask, &p);
    p.mode = KC_NORM_MVN;
    p.si = p.bi = PIDX_NONE;
    return norm_launch(r, &p);
}

static bool mvn_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return same_float(in, n_in, out, n_out);
}

/* ---------------- LRN ---------------- */

static bool lrn_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return same_float(in, n_in, out, n_out) && in[0].rank >= 2 && kn_attr_int(node, "size", 1) >= 1;
}

static kiln_status lrn_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    int64_t size = kn_attr_int(r->node, "size", 1);
    if (x->rank < 2 || size < 1)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "needs rank >= 2 and size >= 1");
    KC_CUDA(r->node, kc_lrn(x->data, r->out[0].data, x->dtype, x->dims[0], x->dims[1],
                            kn_numel(x->rank - 2, x->dims + 2), size,
                            kn_attr_float(r->node, "alpha", 1e-4f),
                            kn_attr_float(r->node, "beta", 0.75f),
                            kn_attr_float(r->node, "bias", 1.0f), kc_stream(r)));
    return KILN_OK;
}

/* ---------------- LpPool / GlobalLpPool ---------------- */

static bool lppool_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    return same_float(in, n_in, out, n_out) && in[0].rank >= 3 && in[0].rank <= 5 &&
           kn_attr_int(node, "p", 2) != 0;
}

static kiln_status lppool_run(const kb_run *r) {
    const kn_node *node = r->node;
    const kb_tensor *x = &r->in[0];
    int nsp = x->rank - 2;
    kn_window w;
    KN_TRY(kc_pool_window(node, x, &w));
    kc_lppool p;
    memset(&p, 0, sizeof p);
    p.planes = x->dims[0] * x->dims[1];
    p.p = (float)kn_attr_int(node, "p", 2);
    if (p.p == 0.f)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT, "p must not be 0");
    kc_window3(&w, nsp, p.in, p.out, p.kernel, p.stride, p.dil, p.pad0, NULL);
    KC_CUDA(node, kc_lppool_run(x->data, r->out[0].data, x->dtype, &p, kc_stream(r)));
    return KILN_OK;
}

static bool global_lppool_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                   const kn_tinfo *out, int n_out) {
    return same_float(in, n_in, out, n_out) && in[0].rank >= 2 && kn_attr_int(node, "p", 2) != 0;
}

static kiln_status global_lppool_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    float pw = (float)kn_attr_int(r->node, "p", 2);
    if (x->rank < 2 || pw == 0.f)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "needs rank >= 2 and p != 0");
    KC_CUDA(r->node, kc_global_lppool(x->data, r->out[0].data, x->dtype, x->dims[0] * x->dims[1],
                                      kn_numel(x->rank - 2, x->dims + 2), pw, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- GridSample ---------------- */

static bool grid_sample_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                 const kn_tinfo *out, int n_out) {
    return same_float(in, n_in, out, n_out) && n_in >= 2 && kc_is_float(in[1].dtype) &&
           in[0].rank == 4 && in[1].rank == 4;
}

static kiln_status grid_sample_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *grid = &r->in[1];
    kn_tinfo ti[2];
    kb_tinfo_of(r->in, 2, ti);
    kn_grid_sample g;
    KN_TRY(kn_grid_sample_geom(r->node, &ti[0], &ti[1], &g));
    kc_grid_sample p = {g.mode, g.padding, g.align_corners, g.n, g.c, g.h, g.w, g.ho, g.wo};
    KC_CUDA(r->node, kc_grid_sample_run(x->data, x->dtype, grid->data, grid->dtype, r->out[0].data,
                                        &p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- quantization ---------------- */

static bool quant_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    bool q = strcmp(node->op_type, "QuantizeLinear") == 0;
    kiln_dtype ft = q ? in[0].dtype : out[0].dtype;
    return n_in >= 2 && n_out >= 1 && kc_is_float(ft) && kc_is_float(in[1].dtype);
}

static kiln_status quant_run(const kb_run *r) {
    bool quantize = strcmp(r->node->op_type, "QuantizeLinear") == 0;
    kn_tinfo ti[3];
    int n = r->n_in < 3 ? r->n_in : 3;
    kb_tinfo_of(r->in, n, ti);
    kn_quant g;
    KN_TRY(kn_quant_geom(r->node, ti, n, quantize, &g));
    kc_quant p = {quantize, g.qtype, g.ftype, r->in[1].dtype, kc_numel(&r->in[0]),
                  g.axis < 0 ? 1 : g.channels, g.axis < 0 ? 1 : g.inner, g.block, g.saturate};
    const void *zp = n > 2 && r->in[2].data ? r->in[2].data : NULL;
    KC_CUDA(r->node, kc_quant_run(r->in[0].data, r->in[1].data, zp, r->out[0].data, &p, kc_stream(r)));
    return KILN_OK;
}

static bool dynamic_quant_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                                   int n_out) {
    return n_in >= 1 && n_out >= 3 && in[0].dtype == KILN_DTYPE_FLOAT;
}

static kiln_status dynamic_quant_run(const kb_run *r) {
    if (r->n_out < 3 || !r->out[1].data || !r->out[2].data)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "needs its three outputs");
    KC_CUDA(r->node, kc_dynamic_quant(r->in[0].data, kc_numel(&r->in[0]), r->out[0].data, r->out[1].data,
                                      r->out[2].data, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- window functions ---------------- */

static bool window_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    return n_out >= 1 && (kc_is_float(out[0].dtype) || out[0].dtype == KILN_DTYPE_DOUBLE);
}

static kiln_status window_run(const kb_run *r) {
    KC_CUDA(r->node, kc_window(r->out[0].data, r->out[0].dtype, kn_window_kind(r->node->op_type),
                               r->out[0].dims[0], kn_attr_int(r->node, "periodic", 1) != 0,
                               kc_stream(r)));
    return KILN_OK;
}

/* ---------------- RoiAlign ---------------- */

static bool roi_align_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                               int n_out) {
    return same_float(in, n_in, out, n_out) && n_in >= 3 && in[1].dtype == in[0].dtype &&
           in[2].dtype == KILN_DTYPE_INT64 && in[0].rank == 4;
}

/* Batch indices known on the host are checked once per shape, with the
 * CPU's message; the kernel reads zeros for an index known only on the
 * device that falls outside X. */
static kiln_status roi_align_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                                     const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    *workspace = 0;
    const kb_tensor *bi = &in[2];
    for (int64_t k = 0; bi->host && k < kc_numel(bi); k++) {
        int64_t b = ((const int64_t *)bi->host)[k];
        if (b < 0 || b >= in[0].dims[0])
            return kn_node_error(node, KILN_ERR_RUNTIME, "region %lld has batch index %lld; X has %lld images",
                                 (long long)k, (long long)b, (long long)in[0].dims[0]);
    }
    return KILN_OK;
}

static kiln_status roi_align_run(const kb_run *r) {
    kn_tinfo ti[3];
    kb_tinfo_of(r->in, 3, ti);
    kn_roi_align g;
    KN_TRY(kn_roi_align_geom(r->node, &ti[0], &ti[1], &ti[2], &g));
    kc_roi_align p = {g.mode, g.half_pixel, g.oh, g.ow, g.sampling, g.scale, g.n, g.c, g.h, g.w, g.rois};
    KC_CUDA(r->node, kc_roi_align_run(r->in[0].data, r->in[1].data, r->in[2].data, r->out[0].data,
                                      r->in[0].dtype, &p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ---------------- */

static bool loss_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    kiln_dtype t = in[0].dtype;
    return n_in >= 2 && n_out >= 1 && (kc_is_float(t) || t == KILN_DTYPE_DOUBLE) &&
           out[0].dtype == t && (n_out < 2 || out[1].dtype == KILN_DTYPE_UNDEFINED || out[1].dtype == t);
}

static kiln_status loss_plan(const kn_node *node, const kb_tensor *in, int n_in, kc_loss *p) {
    kn_tinfo ti[3];
    int n = n_in < 3 ? n_in : 3;
    kb_tinfo_types(in, n, ti);
    memset(p, 0, sizeof *p);
    KN_TRY(kn_loss_geom(node, ti, n, &p->g));
    p->dt = in[0].dtype;
    p->target_dt = in[1].dtype;
    p->softmax = strcmp(node->op_type, "SoftmaxCrossEntropyLoss") == 0;
    return KILN_OK;
}

/* A target known on the host is checked once per shape, as the CPU checks
 * every run; one known only on the device counts a stray class as ignored. */
static kiln_status loss_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                                const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    kc_loss p;
    KN_TRY(loss_plan(node, in, n_in, &p));
    *workspace = kc_loss_workspace(&p);
    const kb_tensor *t = &in[1];
    for (int64_t e = 0; t->host && e < kc_numel(t); e++) {
        int64_t v = t->dtype == KILN_DTYPE_INT32 ? ((const int32_t *)t->host)[e] : ((const int64_t *)t->host)[e];
        if (!kn_loss_counts(&p.g, v) && !(p.g.has_ignore && v == p.g.ignore))
            return kn_node_error(node, KILN_ERR_RUNTIME,
                                 "target element %lld is %lld, not a class in [0, %lld) nor the "
                                 "ignore_index",
                                 (long long)e, (long long)v, (long long)p.g.classes);
    }
    return KILN_OK;
}

static kiln_status loss_run(const kb_run *r) {
    kc_loss p;
    KN_TRY(loss_plan(r->node, r->in, r->n_in, &p));
    if (r->workspace_size < kc_loss_workspace(&p))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)",
                             r->workspace_size, kc_loss_workspace(&p));
    void *log_prob = p.softmax && r->n_out > 1 ? r->out[1].data : NULL;
    KC_CUDA(r->node, kc_loss_run(r->in[0].data, r->in[1].data, p.g.weighted ? r->in[2].data : NULL,
                                 r->out[0].data, log_prob, r->workspace, &p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- the random ops ---------------- */

typedef struct random_inst {
    kn_random p;
    uint64_t key;
    unsigned long long *run; /* device memory: the context's run count */
} random_inst;

static bool random_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    kiln_dtype t = out[0].dtype;
    bool real = kc_is_float(t) || t == KILN_DTYPE_DOUBLE;
    if (strcmp(node->op_type, "Multinomial") == 0)
        return n_in >= 1 && (kc_is_float(in[0].dtype) || in[0].dtype == KILN_DTYPE_DOUBLE) &&
               (t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64);
    if (strcmp(node->op_type, "Bernoulli") == 0)
        return n_in >= 1 && (kc_is_float(in[0].dtype) || in[0].dtype == KILN_DTYPE_DOUBLE) &&
               (real || t == KILN_DTYPE_BOOL || t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8 ||
                t == KILN_DTYPE_INT16 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64 || t == KILN_DTYPE_UINT16 ||
                t == KILN_DTYPE_UINT32 || t == KILN_DTYPE_UINT64);
    return real;
}

static void random_release(void *inst) {
    random_inst *s = inst;
    if (!s)
        return;
    if (s->run)
        cudaFree(s->run);
    kn_free(s);
}

/* The key and a run counter of the context's own, from 0. */
static kiln_status random_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                                  const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    *workspace = 0;
    random_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kn_random_decode(node, &s->p);
    cudaError_t e = cudaSuccess;
    if (st == KILN_OK && (e = cudaMalloc((void **)&s->run, sizeof *s->run)) == cudaSuccess)
        e = cudaMemset(s->run, 0, sizeof *s->run);
    if (st == KILN_OK && e != cudaSuccess)
        st = kn_node_error(node, KILN_ERR_DEVICE, "the run counter: %s", cudaGetErrorString(e));
    if (st != KILN_OK) {
        random_release(s);
        return st;
    }
    s->key = kn_random_key(&s->p);
    if (s->p.kind == KN_RAND_MULTINOMIAL && n_in > 0) /* each row's maximum and exp-sum */
        *workspace = (size_t)in[0].dims[0] * 2 * sizeof(double);
    *inst = s;
    return KILN_OK;
}

static kiln_status random_run(const kb_run *r) {
    const random_inst *s = r->inst;
    kc_random p;
    memset(&p, 0, sizeof p);
    p.kind = s->p.kind;
    p.a = s->p.a;
    p.b = s->p.b;
    p.key = s->key;
    p.y_dt = r->out[0].dtype;
    p.x_dt = r->n_in > 0 ? r->in[0].dtype : KILN_DTYPE_UNDEFINED;
    if (p.kind == KN_RAND_MULTINOMIAL) {
        p.count = r->in[0].dims[0];
        p.classes = r->in[0].dims[1];
        p.samples = r->out[0].dims[1];
    } else {
        p.count = kc_numel(&r->out[0]);
    }
    if (p.kind == KN_RAND_MULTINOMIAL && r->workspace_size < (size_t)p.count * 2 * sizeof(double))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    KC_CUDA(r->node, kc_random_run(r->n_in > 0 ? r->in[0].data : NULL, r->out[0].data, s->run,
                                   r->workspace, &p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- Einsum ---------------- */

static bool ein_int(kiln_dtype t) { return t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64; }

/* The accumulator for inputs whose first type is t; every input (and the
 * output) must be of its class. -1: not supported. */
static int ein_acc(kiln_dtype t) {
    return ein_int(t) ? KC_EIN_INT64 : t == KILN_DTYPE_DOUBLE ? KC_EIN_DOUBLE
                                     : kc_is_float(t)           ? KC_EIN_FLOAT
                                                                : -1;
}

/* The kernel's view of the equation: output labels and summed labels with
 * every input's strides (repeated labels add theirs: diagonals). */
static kiln_status einsum_build(const kn_node *node, int n_in, const int *rank,
                                const int64_t (*dims)[KILN_MAX_DIMS], kc_einsum *k) {
    if (n_in < 1 || n_in > KC_EIN_MAX_IN || n_in > KN_EINSUM_MAX_IN)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%d inputs (1 to %d supported)", n_in,
                             KC_EIN_MAX_IN);
    kn_einsum e;
    KN_TRY(kn_einsum_parse(node, n_in, rank, dims, &e));
    int64_t stride[KN_EINSUM_MAX_IN][KN_EINSUM_LABELS];
    memset(stride, 0, sizeof stride);
    for (int i = 0; i < n_in; i++) {
        int64_t s = 1;
        for (int d = rank[i] - 1; d >= 0; d--) {
            if (dims[i][d] != 1)
                stride[i][e.label[i][d]] += s;
            s *= dims[i][d];
        }
    }
    memset(k, 0, sizeof *k);
    k->n_in = n_in;
    if (e.out_rank > KC_MAX_DIMS)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "output rank %d", e.out_rank);
    bool in_out[KN_EINSUM_LABELS] = {false};
    k->out_rank = e.out_rank;
    for (int q = 0; q < e.out_rank; q++) {
        int l = e.out_label[q];
        in_out[l] = true;
        k->out_dims[q] = e.size[l];
        for (int i = 0; i < n_in; i++)
            k->out_stride[i][q] = stride[i][l];
    }
    k->sum_count = 1;
    for (int l = 0; l < KN_EINSUM_LABELS; l++) {
        if (e.size[l] < 0 || in_out[l])
            continue;
        if (k->n_sum == KC_EIN_MAX_SUM)
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "more than %d summed labels",
                                 KC_EIN_MAX_SUM);
        k->sum_dims[k->n_sum] = e.size[l];
        for (int i = 0; i < n_in; i++)
            k->sum_stride[i][k->n_sum] = stride[i][l];
        k->sum_count *= e.size[l];
        k->n_sum++;
    }
    k->total = kn_numel(k->out_rank, k->out_dims);
    return KILN_OK;
}

static bool einsum_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    if (n_in < 1 || n_in > KC_EIN_MAX_IN || n_out < 1)
        return false;
    int acc = ein_acc(in[0].dtype);
    if (acc < 0 || ein_acc(out[0].dtype) != acc)
        return false;
    int rank[KC_EIN_MAX_IN];
    int64_t dims[KC_EIN_MAX_IN][KILN_MAX_DIMS];
    for (int i = 0; i < n_in; i++) {
        if (ein_acc(in[i].dtype) != acc)
            return false;
        rank[i] = in[i].rank;
        memcpy(dims[i], in[i].dims, sizeof dims[i]);
    }
    kc_einsum k;
    if (einsum_build(node, n_in, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, &k) != KILN_OK) {
        kn_error_clear();
        return false;
    }
    return true;
}

static kiln_status einsum_run(const kb_run *r) {
    int rank[KC_EIN_MAX_IN];
    int64_t dims[KC_EIN_MAX_IN][KILN_MAX_DIMS];
    if (r->n_in < 1 || r->n_in > KC_EIN_MAX_IN)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "%d inputs (1 to %d supported)",
                             r->n_in, KC_EIN_MAX_IN);
    int acc = ein_acc(r->in[0].dtype);
    for (int i = 0; i < r->n_in; i++) {
        if (acc < 0 || ein_acc(r->in[i].dtype) != acc || ein_acc(r->out[0].dtype) != acc)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "Einsum of %s and %s",
                                 kiln_dtype_name(r->in[0].dtype), kiln_dtype_name(r->in[i].dtype));
        rank[i] = r->in[i].rank;
        memcpy(dims[i], r->in[i].dims, sizeof dims[i]);
    }
    kc_einsum k;
    KN_TRY(einsum_build(r->node, r->n_in, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, &k));
    if (kc_numel(&r->out[0]) != k.total)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "output has %lld elements, the equation %lld",
                             (long long)kc_numel(&r->out[0]), (long long)k.total);
    for (int i = 0; i < r->n_in; i++) {
        k.in[i] = r->in[i].data;
        k.in_dt[i] = r->in[i].dtype;
    }
    KC_CUDA(r->node, kc_einsum_run(&k, r->out[0].data, r->out[0].dtype, acc, kc_stream(r)));
    return KILN_OK;
}

/* Einsum "lt": two operands whose equation is one strided batched GEMM,
 * A [batch..., M..., K...] times B [batch..., K..., N...] (or B [batch...,
 * N..., K...], transposed) into Y [batch..., M..., N...], each group of
 * labels in one order everywhere, no diagonals, sums of one operand or
 * broadcasts; float32 / float16 / bfloat16 through cuBLASLt. */
static bool ein_gemm_spec(const kn_node *node, const int *rank,
                          const int64_t (*dims)[KILN_MAX_DIMS], kc_gemm_spec *sp) {
    kn_einsum e;
    if (kn_einsum_parse(node, 2, rank, dims, &e) != KILN_OK) {
        kn_error_clear();
        return false;
    }
    int where[KN_EINSUM_LABELS]; /* bit 0: A, bit 1: B, bit 2: Y */
    memset(where, 0, sizeof where);
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < rank[i]; d++) {
            int l = e.label[i][d];
            if ((where[l] >> i) & 1 || dims[i][d] != e.size[l] || e.size[l] < 1)
                return false; /* a diagonal, a broadcast or an empty dim */
            where[l] |= 1 << i;
        }
    for (int q = 0; q < e.out_rank; q++) {
        int l = e.out_label[q];
        if ((where[l] >> 2) & 1)
            return false;
        where[l] |= 4;
    }
    /* the kind of each position: 7 batch, 5 M, 3 K, 6 N */
    int nb = 0;
    while (nb < e.out_rank && where[e.out_label[nb]] == 7)
        nb++;
    int64_t batch = 1, m = 1, n = 1, k = 1;
    for (int q = 0; q < e.out_rank; q++) {
        int w = where[e.out_label[q]];
        if (q < nb ? w != 7 : w == 7)
            return false;
    }
    /* A: batch as in Y, then M as in Y, then K */
    int qa = 0, kl[KILN_MAX_DIMS], nk = 0;
    for (int d = 0; d < rank[0]; d++) {
        int l = e.label[0][d], w = where[l];
        if (d < nb) {
            if (l != e.out_label[d])
                return false;
            batch *= e.size[l];
        } else if (w == 5) {
            if (nk || nb + qa >= e.out_rank || e.out_label[nb + qa] != l)
                return false;
            qa++;
            m *= e.size[l];
        } else if (w == 3) {
            kl[nk++] = l;
            k *= e.size[l];
        } else {
            return false;
        }
    }
    /* B: batch as in Y, then K as in A and N as in Y, in either order */
    int first = -1, qn = 0, qk = 0;
    for (int d = 0; d < rank[1]; d++) {
        int l = e.label[1][d], w = where[l];
        if (d < nb) {
            if (l != e.out_label[d])
                return false;
        } else if (w == 3) {
            if (first < 0)
                first = 3;
            if ((first == 6 && qn == 0) || qk >= nk || kl[qk] != l || (first == 3 && qn))
                return false;
            qk++;
        } else if (w == 6) {
            if (first < 0)
                first = 6;
            if (first == 3 && qk < nk)
                return false;
            if (first == 6 && qk)
                return false;
            if (nb + qa + qn >= e.out_rank || e.out_label[nb + qa + qn] != l)
                return false;
            qn++;
            n *= e.size[l];
        } else {
            return false;
        }
    }
    if (nb + qa + qn != e.out_rank || qk != nk)
        return false;
    memset(sp, 0, sizeof *sp);
    sp->m = m, sp->n = n, sp->k = k, sp->batch = batch;
    sp->stride_a = m * k;
    sp->stride_b = k * n;
    sp->tb = first == 6 && nk > 0;
    return true;
}

static bool einsum_lt_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                               const kn_tinfo *out, int n_out) {
    if (n_in != 2 || n_out < 1 || !kc_is_float(in[0].dtype) || in[1].dtype != in[0].dtype ||
        out[0].dtype != in[0].dtype)
        return false;
    int rank[2] = {in[0].rank, in[1].rank};
    int64_t dims[2][KILN_MAX_DIMS];
    memcpy(dims[0], in[0].dims, sizeof dims[0]);
    memcpy(dims[1], in[1].dims, sizeof dims[1]);
    kc_gemm_spec sp;
    return ein_gemm_spec(node, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, &sp);
}

static kiln_status einsum_lt_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                     int n_in, const kb_tensor *out, int n_out, void **inst,
                                     size_t *workspace) {
    if (n_in != 2)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "the GEMM form takes two operands");
    int rank[2] = {in[0].rank, in[1].rank};
    int64_t dims[2][KILN_MAX_DIMS];
    memcpy(dims[0], in[0].dims, sizeof dims[0]);
    memcpy(dims[1], in[1].dims, sizeof dims[1]);
    kc_gemm_spec sp;
    if (!ein_gemm_spec(node, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, &sp))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "the equation is not one batched GEMM");
    sp.dt = in[0].dtype;
    sp.a = in[0].data;
    sp.b = in[1].data;
    sp.y = out[0].data;
    return kc_gemm_create_spec(node, &sp, (kc_gemm **)inst, workspace);
}

static void einsum_lt_release(void *inst) {
    if (inst)
        kc_gemm_destroy(inst);
}

static kiln_status einsum_lt_run(const kb_run *r) {
    if (!r->inst)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    return kc_gemm_run(r->node, r->inst, r->in[0].data, r->in[1].data, r->out[0].data,
                       r->workspace, r->workspace_size, kc_stream(r));
}

/* ---------------- ConvTranspose ----------------
 * Y = ConvTranspose(X, W) is the data gradient of the convolution whose
 * output is X: cudnnConvolutionBackwardData with W as that convolution's
 * filter ([C_in, C_out / group, k...]). When the pads are symmetric cuDNN
 * writes Y directly (output_padding rows get no contributions: zeros, as
 * ConvTranspose wants) and the bias follows as an epilogue; otherwise
 * (asymmetric or SAME pads, output_shape) cuDNN writes the unpadded result
 * into the workspace and one pass crops it into Y with the bias. */

enum { CT_HEUR = 0, CT_FIND = 1 };
#define CT_MAX_WS ((size_t)512 << 20)

typedef struct convt_inst {
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionBwdDataAlgo_t algo;
    size_t conv_ws, full_off, ws;
    bool empty; /* X or Y has no elements: Y is the bias (or zeros) */
    bool crop;
    kc_crop c;
    int64_t cout, spatial;
} convt_inst;

static bool ct_type(kiln_dtype t, cudnnDataType_t *out) {
    switch (t) {
    case KILN_DTYPE_FLOAT: *out = CUDNN_DATA_FLOAT; return true;
    case KILN_DTYPE_FLOAT16: *out = CUDNN_DATA_HALF; return true;
    case KILN_DTYPE_BFLOAT16: *out = CUDNN_DATA_BFLOAT16; return true;
    default: return false;
    }
}

static bool convt_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    cudnnDataType_t dt;
    if (n_in < 2 || n_out < 1 || !ct_type(in[0].dtype, &dt) || in[1].dtype != in[0].dtype ||
        out[0].dtype != in[0].dtype || in[0].rank < 3 || in[0].rank > 5 ||
        in[1].rank != in[0].rank || out[0].rank != in[0].rank)
        return false;
    if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED &&
        (in[2].dtype != in[0].dtype || kn_numel(in[2].rank, in[2].dims) != out[0].dims[1]))
        return false;
    int64_t g = kn_attr_int(node, "group", 1);
    if (g < 1 || in[0].dims[1] != in[1].dims[0] || in[0].dims[1] % g ||
        out[0].dims[1] != in[1].dims[1] * g)
        return false;
    for (int i = 0; i < in[0].rank; i++)
        if (in[0].dims[i] > INT_MAX || out[0].dims[i] > INT_MAX || in[1].dims[i] > INT_MAX)
            return false;
    kn_window w;
    if (kn_window_transpose(node, in[0].rank - 2, in[0].dims + 2, in[1].dims + 2, &w) != KILN_OK) {
        kn_error_clear();
        return false;
    }
    for (int d = 0; d < w.nsp; d++)
        if (w.out[d] != out[0].dims[2 + d])
            return false;
    return true;
}

static void convt_release(void *p) {
    convt_inst *s = p;
    if (!s)
        return;
    if (s->xd)
        cudnnDestroyTensorDescriptor(s->xd);
    if (s->yd)
        cudnnDestroyTensorDescriptor(s->yd);
    if (s->wd)
        cudnnDestroyFilterDescriptor(s->wd);
    if (s->cd)
        cudnnDestroyConvolutionDescriptor(s->cd);
    kn_free(s);
}

static kiln_status ct_conv_desc(const kn_node *node, convt_inst *s, int nsp, const kn_window *w,
                                bool pads, kiln_dtype xt) {
    int n = nsp < 2 ? 2 : nsp, pad[3], str[3], dil[3];
    for (int d = 0; d < n; d++) {
        int sd = d - (n - nsp); /* the inserted leading dim of a 1-D case */
        pad[d] = sd >= 0 && pads ? (int)w->pad0[sd] : 0;
        str[d] = sd >= 0 ? (int)w->stride[sd] : 1;
        dil[d] = sd >= 0 ? (int)w->dil[sd] : 1;
    }
    if (s->cd) {
        cudnnDestroyConvolutionDescriptor(s->cd);
        s->cd = NULL;
    }
    KC_CUDNN(node, cudnnCreateConvolutionDescriptor(&s->cd));
    KC_CUDNN(node, cudnnSetConvolutionNdDescriptor(s->cd, n, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    KC_CUDNN(node, cudnnSetConvolutionGroupCount(s->cd, (int)kn_attr_int(node, "group", 1)));
    bool tf32 = kn_attr_int(node, "allow_tf32", 0) != 0;
    KC_CUDNN(node, cudnnSetConvolutionMathType(s->cd, xt == KILN_DTYPE_FLOAT && !tf32
                                                          ? CUDNN_FMA_MATH
                                                          : CUDNN_TENSOR_OP_MATH));
    return KILN_OK;
}

/* Whether cuDNN's forward convolution of ydesc gives X's dims. */
static kiln_status ct_fits(const kn_node *node, const convt_inst *s, int nd, const int *xdims,
                           bool *fits) {
    int od[KILN_MAX_DIMS];
    *fits = false;
    if (cudnnGetConvolutionNdForwardOutputDim(s->cd, s->yd, s->wd, nd, od) != CUDNN_STATUS_SUCCESS)
        return KILN_OK;
    *fits = memcmp(od, xdims, sizeof(int) * (size_t)nd) == 0;
    return KILN_OK;
}

static kiln_status convt_build(const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int mode, convt_inst *s) {
    const kb_tensor *x = &in[0], *w = &in[1], *y = &out[0];
    cudnnDataType_t dt;
    if (!ct_type(x->dtype, &dt) || w->dtype != x->dtype || y->dtype != x->dtype)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "types %s, %s -> %s",
                             kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype),
                             kiln_dtype_name(y->dtype));
    if (x->rank < 3 || x->rank > 5 || w->rank != x->rank || y->rank != x->rank)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "X rank %d, W rank %d", x->rank, w->rank);
    int nsp = x->rank - 2;
    kn_window win;
    KN_TRY(kn_window_transpose(node, nsp, x->dims + 2, w->dims + 2, &win));
    int64_t group = kn_attr_int(node, "group", 1);
    if (group < 1 || x->dims[1] != w->dims[0] || x->dims[1] % group ||
        y->dims[1] != w->dims[1] * group)
        return kn_node_error(node, KILN_ERR_SHAPE, "channels do not fit W and the group count");
    for (int d = 0; d < nsp; d++)
        if (win.out[d] != y->dims[2 + d])
            return kn_node_error(node, KILN_ERR_SHAPE, "output dim %d is %lld, the window gives %lld",
                                 d, (long long)y->dims[2 + d], (long long)win.out[d]);
    s->cout = y->dims[1];
    s->spatial = kn_numel(nsp, y->dims + 2);
    if (kc_present(in, n_in, 2) && kc_numel(&in[2]) != s->cout)
        return kn_node_error(node, KILN_ERR_SHAPE, "B has %lld values for %lld output channels",
                             (long long)kc_numel(&in[2]), (long long)s->cout);
    if (kc_numel(x) == 0 || kc_numel(y) == 0) { /* cuDNN takes no empty tensors */
        s->empty = true;
        return KILN_OK;
    }
    cudnnHandle_t h;
    KN_TRY(kc_cudnn_handle(node, NULL, &h));
    int wdims[KILN_MAX_DIMS], xdims[KILN_MAX_DIMS];
    int nw = kc_dnn_dims(w->rank, w->dims, wdims), nx = kc_dnn_dims(x->rank, x->dims, xdims);
    KC_CUDNN(node, cudnnCreateFilterDescriptor(&s->wd));
    KC_CUDNN(node, cudnnSetFilterNdDescriptor(s->wd, dt, CUDNN_TENSOR_NCHW, nw, wdims));
    KN_TRY(kc_tensor_desc(node, &s->xd, dt, x->rank, x->dims));

    /* direct: symmetric pads, and cuDNN agrees on the shapes */
    bool sym = true;
    for (int d = 0; d < nsp; d++)
        sym &= win.pad0[d] == win.pad1[d] && win.pad0[d] >= 0 && win.pad0[d] <= INT_MAX;
    bool fits = false;
    if (sym) {
        KN_TRY(ct_conv_desc(node, s, nsp, &win, true, x->dtype));
        KN_TRY(kc_tensor_desc(node, &s->yd, dt, y->rank, y->dims));
        KN_TRY(ct_fits(node, s, nx, xdims, &fits));
    }
    if (!fits) { /* the unpadded result in the workspace, cropped into Y */
        int64_t full[KILN_MAX_DIMS];
        full[0] = y->dims[0];
        full[1] = y->dims[1];
        for (int d = 0; d < nsp; d++) {
            full[2 + d] = win.stride[d] * (win.in[d] - 1) + win.dil[d] * (win.kernel[d] - 1) + 1;
            if (full[2 + d] < 1 || full[2 + d] > INT_MAX)
                return kn_node_error(node, KILN_ERR_UNSUPPORTED, "spatial dim %d of %lld", d,
                                     (long long)full[2 + d]);
        }
        if (s->yd) {
            cudnnDestroyTensorDescriptor(s->yd);
            s->yd = NULL;
        }
        KN_TRY(ct_conv_desc(node, s, nsp, &win, false, x->dtype));
        KN_TRY(kc_tensor_desc(node, &s->yd, dt, y->rank, full));
        KN_TRY(ct_fits(node, s, nx, xdims, &fits));
        if (!fits)
            return kn_node_error(node, KILN_ERR_SHAPE, "cuDNN's shapes differ from the inferred ones");
        s->crop = true;
        memset(&s->c, 0, sizeof s->c);
        s->c.planes = y->dims[0] * y->dims[1];
        s->c.channels = y->dims[1];
        for (int d = 0; d < 3; d++) {
            int sd = d - (3 - nsp);
            s->c.out[d] = sd >= 0 ? y->dims[2 + sd] : 1;
            s->c.full[d] = sd >= 0 ? full[2 + sd] : 1;
            s->c.pad0[d] = sd >= 0 ? win.pad0[sd] : 0;
        }
    }

    cudnnConvolutionBwdDataAlgoPerf_t perf[16];
    int got = 0;
    if (mode == CT_FIND)
        KC_CUDNN(node, cudnnFindConvolutionBackwardDataAlgorithm(h, s->wd, s->xd, s->cd, s->yd, 16,
                                                                 &got, perf));
    else
        KC_CUDNN(node, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, s->wd, s->xd, s->cd, s->yd,
                                                                   16, &got, perf));
    bool f32 = x->dtype == KILN_DTYPE_FLOAT && kn_attr_int(node, "allow_tf32", 0) == 0;
    bool found = false;
    for (int i = 0; i < got && !found; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > CT_MAX_WS)
            continue;
        /* float32 stays off TF32 tensor cores unless the builder allowed them */
        if (f32 && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH)
            continue;
        s->algo = perf[i].algo;
        KC_CUDNN(node, cudnnSetConvolutionMathType(s->cd, f32 ? CUDNN_FMA_MATH : perf[i].mathType));
        found = true;
    }
    if (!found)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "cuDNN offers no algorithm for this transposed convolution");
    KC_CUDNN(node, cudnnGetConvolutionBackwardDataWorkspaceSize(h, s->wd, s->xd, s->cd, s->yd,
                                                                s->algo, &s->conv_ws));
    s->ws = s->conv_ws;
    if (s->crop) {
        int64_t full_n = s->c.planes * s->c.full[0] * s->c.full[1] * s->c.full[2];
        s->full_off = (s->conv_ws + 255) & ~(size_t)255;
        s->ws = s->full_off + (size_t)full_n * kiln_dtype_size(x->dtype);
    }
    return KILN_OK;
}

static kiln_status convt_prepare_mode(const kn_node *node, const kb_tensor *in, int n_in,
                                      const kb_tensor *out, void **inst, size_t *workspace,
                                      int mode) {
    convt_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = convt_build(node, in, n_in, out, mode, s);
    if (st != KILN_OK) {
        convt_release(s);
        return st;
    }
    *inst = s;
    *workspace = s->ws;
    return KILN_OK;
}

static kiln_status convt_prep_heur(const void *state, const kn_node *node, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *ws) {
    return convt_prepare_mode(node, in, n_in, out, inst, ws, CT_HEUR);
}

static kiln_status convt_prep_find(const void *state, const kn_node *node, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *ws) {
    return convt_prepare_mode(node, in, n_in, out, inst, ws, CT_FIND);
}

static kiln_status convt_run(const kb_run *r) {
    const convt_inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    if (r->workspace_size < s->ws)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)",
                             r->workspace_size, s->ws);
    kb_tensor *y = &r->out[0];
    const void *bias = kc_present(r->in, r->n_in, 2) ? r->in[2].data : NULL;
    if (s->empty) { /* nothing reaches Y but the bias */
        if (kc_numel(y) > 0) {
            KC_CUDA(r->node, cudaMemsetAsync(y->data, 0, (size_t)kc_numel(y) * kiln_dtype_size(y->dtype),
                                             kc_stream(r)));
            if (bias)
                KC_CUDA(r->node, kc_epilogue(y->data, y->dtype, kc_numel(y), bias, s->cout,
                                             s->spatial ? s->spatial : 1, NULL, 0, 0.f, 0.f,
                                             kc_stream(r)));
        }
        return KILN_OK;
    }
    cudnnHandle_t h;
    KN_TRY(kc_cudnn_handle(r->node, kc_stream(r), &h));
    float one = 1.f, zero = 0.f;
    void *dst = s->crop ? (uint8_t *)r->workspace + s->full_off : y->data;
    KC_CUDNN(r->node, cudnnConvolutionBackwardData(h, &one, s->wd, r->in[1].data, s->xd,
                                                   r->in[0].data, s->cd, s->algo, r->workspace,
                                                   s->conv_ws, &zero, s->yd, dst));
    if (s->crop)
        KC_CUDA(r->node, kc_convt_crop(dst, y->data, y->dtype, bias, &s->c, kc_stream(r)));
    else if (bias)
        KC_CUDA(r->node, kc_epilogue(y->data, y->dtype, kc_numel(y), bias, s->cout, s->spatial,
                                     NULL, 0, 0.f, 0.f, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- the table ---------------- */

#define K_NN2(op, sup, run) {op, "", "cuda", sup, NULL, NULL, NULL, NULL, run}

const kb_kernel kb_cuda_nn2[] = {
    /* the builder times the two: cuDNN's heuristic choice and its own timing */
    {"ConvTranspose", "", "cudnn", convt_supports, NULL, NULL, convt_prep_heur, convt_release,
     convt_run},
    {"ConvTranspose", "", "cudnn_find", convt_supports, NULL, NULL, convt_prep_find, convt_release,
     convt_run},
    K_NN2("InstanceNormalization", instnorm_supports, instnorm_run),
    K_NN2("GroupNormalization", groupnorm_supports, groupnorm_run),
    K_NN2("RMSNormalization", rmsnorm_supports, rmsnorm_run),
    K_NN2("LpNormalization", lpnorm_supports, lpnorm_run),
    K_NN2("MeanVarianceNormalization", mvn_supports, mvn_run),
    K_NN2("LRN", lrn_supports, lrn_run),
    K_NN2("LpPool", lppool_supports, lppool_run),
    K_NN2("GridSample", grid_sample_supports, grid_sample_run),
    K_NN2("HannWindow", window_supports, window_run),
    K_NN2("HammingWindow", window_supports, window_run),
    K_NN2("BlackmanWindow", window_supports, window_run),
    K_NN2("QuantizeLinear", quant_supports, quant_run),
    K_NN2("DequantizeLinear", quant_supports, quant_run),
    K_NN2("DynamicQuantizeLinear", dynamic_quant_supports, dynamic_quant_run),
    {"RoiAlign", "", "cuda", roi_align_supports, NULL, NULL, roi_align_prepare, NULL, roi_align_run},
    {"NegativeLogLikelihoodLoss", "", "cuda", loss_supports, NULL, NULL, loss_prepare, NULL, loss_run},
    {"RandomUniform", "", "cuda", random_supports, NULL, NULL, random_prepare, random_release, random_run},
    {"RandomNormal", "", "cuda", random_supports, NULL, NULL, random_prepare, random_release, random_run},
    {"RandomUniformLike", "", "cuda", random_supports, NULL, NULL, random_prepare, random_release, random_run},
    {"RandomNormalLike", "", "cuda", random_supports, NULL, NULL, random_prepare, random_release, random_run},
    {"Bernoulli", "", "cuda", random_supports, NULL, NULL, random_prepare, random_release, random_run},
    {"Multinomial", "", "cuda", random_supports, NULL, NULL, random_prepare, random_release, random_run},
    {"SoftmaxCrossEntropyLoss", "", "cuda", loss_supports, NULL, NULL, loss_prepare, NULL, loss_run},
    K_NN2("GlobalLpPool", global_lppool_supports, global_lppool_run),
    K_NN2("Einsum", einsum_supports, einsum_run),
    {"Einsum", "", "lt", einsum_lt_supports, NULL, NULL, einsum_lt_prepare, einsum_lt_release,
     einsum_lt_run},
};
const size_t kb_cuda_nn2_count = KN_ARRAY_LEN(kb_cuda_nn2);
