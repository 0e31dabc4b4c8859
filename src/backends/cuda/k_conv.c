/* k_conv.c - Conv and kiln::Conv on the CUDA backend through cuDNN (NCHW,
 * 1 to 3 spatial dims, groups, dilations, symmetric pads). float32 runs with
 * FMA math (no TF32); float16 and bfloat16 with tensor cores and float
 * accumulation.
 *
 * Tactics (the builder times them):
 *   "cudnn"       cuDNN's heuristic algorithm; bias, residual Z and any
 *                 activation in one pass after the convolution (kc_epilogue)
 *   "cudnn_find"  the fastest algorithm by cuDNN's own timing in prepare(),
 *                 same epilogue
 *   "cudnn_fused" cudnnConvolutionBiasActivationForward: bias, Z and ReLU
 *                 (or none) inside cuDNN; only for those activations
 *   "cudnn_nhwc"  float16 / bfloat16 2-D: X and W transposed to channels-last
 *                 in the workspace, cuDNN's NHWC tensor-core kernels, Y back
 *                 to NCHW, then the epilogue (cuDNN's NCHW half-precision
 *                 kernels ran at 1-8 % of the chip on ResNet-50 shapes)
 *   "lt_1x1"      1x1 convolutions (stride 1, no pads, one group) as one
 *                 strided batched cuBLASLt product per batch: Y[n] = W X[n],
 *                 NCHW as it is, then the epilogue; channels-last, one
 *                 product Y = X W^T with bias, residual and ReLU in
 *                 cuBLASLt's epilogue
 *   "lt_1x1_2", "lt_1x1_3"  channels-last only: the same GEMM with
 *                 cuBLASLt's second and third heuristic
 *   "dw"          2-D depthwise convolutions (group = C = K): kiln's own
 *                 kernel (dwconv.cu), float sums, bias, Z and any
 *                 activation in the same pass; channels-last or not
 *   "dw_r2"       the same with two output rows a thread (3, 5 and 7 wide
 *                 windows, no dilation): half the input rows loaded, more
 *                 registers
 *   "dw_u"        one output row a thread, the filter rows of a square 3x3
 *                 or 5x5 window unrolled so every row's loads are in flight
 *                 together
 *
 * Channels-last nodes (kiln::Conv with channels_last = 1, made by the
 * builder's layout pass; 2-D only) run every tactic but "cudnn_nhwc" on NHWC
 * descriptors directly: X [N,H,W,C], W [K,R,S,C/g], Y and Z [N,P,Q,K].
 * The cuDNN graph-API tactics ("cudnn_g0".."cudnn_g3") are in k_conv_graph.c. */
#include <string.h>

#include "backends/cpu/act.h"
#include "dwconv.cuh"
#include "elementwise.cuh"
#include "graph/fused.h"
#include "graph/ops_nn.h"
#include "kc_common.h"

enum { CONV_HEUR = 0, CONV_FIND = 1, CONV_FUSED = 2, CONV_NHWC = 3, CONV_DW = 4, CONV_DW2 = 5,
       CONV_DWU = 6, CONV_GEMM = 7 };

typedef struct conv_inst {
    int mode;
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    cudnnConvolutionFwdAlgo_t algo;
    size_t conv_ws, zero_bias_off, ws;
    kiln_dtype dt;
    int64_t cout, spatial;
    kb_act act;
    float act_a, act_b;
    int bias_input, z_input;     /* -1 when absent */
    kc_gemm *gemm;               /* CONV_GEMM */
    int gemm_index;              /* CONV_GEMM: which cuBLASLt heuristic (lt_1x1, lt_1x1_2, _3) */
    size_t x_off, w_off, y_off;  /* CONV_NHWC: channels-last copies in the workspace */
    int64_t n, c, h, w, k, cg, r, sx, p, q;
    bool cl;                     /* channels-last node */
    kc_dwconv dwg;               /* CONV_DW */
} conv_inst;

static bool is_cl(const kn_node *n) { return kn_attr_int(n, "channels_last", 0) != 0; }

/* A channels-first view of dims (identity for a channels-first node). */
static void cf_dims(bool cl, int rank, const int64_t *d, int64_t *out) {
    if (cl)
        kn_dims_channels(rank, d, out, true);
    else
        memcpy(out, d, sizeof(int64_t) * (size_t)rank);
}

static bool is_fused(const kn_node *n) { return strcmp(n->domain ? n->domain : "", KN_DOMAIN_KILN) == 0; }

bool kc_dnn_type(kiln_dtype t, cudnnDataType_t *out) {
    switch (t) {
    case KILN_DTYPE_FLOAT: *out = CUDNN_DATA_FLOAT; return true;
    case KILN_DTYPE_FLOAT16: *out = CUDNN_DATA_HALF; return true;
    case KILN_DTYPE_BFLOAT16: *out = CUDNN_DATA_BFLOAT16; return true;
    default: return false;
    }
}

static bool node_act(const kn_node *node, kb_act *act, float *a, float *b) {
    *act = KB_ACT_NONE;
    *a = *b = 0.f;
    if (!is_fused(node))
        return true;
    *act = kb_act_parse(kn_attr_string(node, "activation", ""));
    if (*act == KB_ACT_INVALID)
        return false;
    float da = 0.f, db = 0.f;
    switch (*act) {
    case KB_ACT_LEAKY_RELU: da = 0.01f; break;
    case KB_ACT_CLIP: da = -INFINITY, db = INFINITY; break;
    case KB_ACT_HARD_SIGMOID: da = 0.2f, db = 0.5f; break;
    case KB_ACT_ELU: case KB_ACT_SWISH: da = 1.f; break;
    default: break;
    }
    *a = kn_attr_float(node, "alpha", da);
    *b = kn_attr_float(node, "beta", db);
    return true;
}

static bool is_dw(int mode) { return mode == CONV_DW || mode == CONV_DW2 || mode == CONV_DWU; }

/* kc_dwconv.rows of each depthwise tactic. */
static int dw_rows(int mode) { return mode == CONV_DW2 ? 2 : mode == CONV_DWU ? -1 : 1; }

/* The depthwise kernel's geometry from channels-first dims; false when the
 * convolution is not depthwise (group = C = K, one input channel a filter). */
static bool dw_geometry(const kn_node *node, bool cl, int rank, const int64_t *xf, const int64_t *wf,
                        const int64_t *yf, const kn_window *win, int rows, kc_dwconv *g) {
    int64_t group = kn_attr_int(node, "group", 1);
    if (rank != 4 || win->nsp != 2 || group < 2 || xf[1] != group || wf[0] != group || wf[1] != 1)
        return false;
    kb_act act;
    float a, b;
    if (!node_act(node, &act, &a, &b))
        return false;
    memset(g, 0, sizeof *g);
    g->n = xf[0], g->c = xf[1], g->h = xf[2], g->w = xf[3], g->p = yf[2], g->q = yf[3];
    g->r = (int)wf[2], g->s = (int)wf[3];
    g->sh = (int)win->stride[0], g->sw = (int)win->stride[1];
    g->ph = (int)win->pad0[0], g->pw = (int)win->pad0[1];
    g->dh = (int)win->dil[0], g->dw = (int)win->dil[1];
    g->channels_last = cl;
    g->rows = rows;
    g->act = (int)act, g->alpha = a, g->beta = b;
    return kc_dwconv_supported(g) != 0;
}

kiln_status kc_conv_window(const kn_node *node, int rank, const int64_t *xd, const int64_t *wd,
                           kn_window *w) {
    int nsp = rank - 2;
    if (nsp < 1 || nsp > 3)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%d spatial dims (1 to 3 supported)", nsp);
    KN_TRY(kn_window_forward(node, nsp, xd + 2, wd + 2, false, w));
    for (int d = 0; d < nsp; d++)
        if (w->pad0[d] != w->pad1[d])
            return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                 "asymmetric padding (%lld before, %lld after) in dim %d",
                                 (long long)w->pad0[d], (long long)w->pad1[d], d);
    return KILN_OK;
}

static bool conv_supports_mode(const kn_node *node, const kn_tinfo *in, int n_in,
                               const kn_tinfo *out, int n_out, int mode) {
    cudnnDataType_t dt;
    if (n_in < 2 || n_out < 1 || !kc_dnn_type(in[0].dtype, &dt) || in[1].dtype != in[0].dtype ||
        out[0].dtype != in[0].dtype || in[0].rank != in[1].rank || in[0].rank < 3 || in[0].rank > 5)
        return false;
    for (int k = 2; k < n_in; k++)
        if (in[k].dtype != KILN_DTYPE_UNDEFINED && in[k].dtype != in[0].dtype)
            return false;
    if (n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED &&
        (in[3].rank != out[0].rank || memcmp(in[3].dims, out[0].dims, sizeof(int64_t) * (size_t)out[0].rank) != 0))
        return false; /* Z must have Y's shape */
    kb_act act;
    float a, b;
    if (!node_act(node, &act, &a, &b))
        return false;
    if (mode == CONV_FUSED && act != KB_ACT_NONE && act != KB_ACT_RELU)
        return false;
    bool cl = is_cl(node);
    if (mode == CONV_NHWC && (cl || in[0].rank != 4 || in[0].dtype == KILN_DTYPE_FLOAT))
        return false;
    if (cl && in[0].rank != 4)
        return false;
    int64_t xf[KILN_MAX_DIMS], wf[KILN_MAX_DIMS];
    cf_dims(cl, in[0].rank, in[0].dims, xf);
    cf_dims(cl, in[1].rank, in[1].dims, wf);
    kn_window w;
    kiln_status st = kc_conv_window(node, in[0].rank, xf, wf, &w);
    if (st != KILN_OK) {
        kn_error_clear();
        return false;
    }
    if (is_dw(mode)) {
        int64_t yf[KILN_MAX_DIMS];
        kc_dwconv g;
        cf_dims(cl, out[0].rank, out[0].dims, yf);
        return out[0].rank == 4 &&
               dw_geometry(node, cl, in[0].rank, xf, wf, yf, &w, dw_rows(mode), &g);
    }
    if (mode == CONV_GEMM) {
        if (kn_attr_int(node, "group", 1) != 1)
            return false;
        for (int d = 0; d < w.nsp; d++)
            if (w.kernel[d] != 1 || w.stride[d] != 1 || w.pad0[d] != 0 || w.pad1[d] != 0)
                return false;
    }
    return true;
}

/* One supports() a tactic: each asks in its own mode. */
#define CONV_SUP(fn, mode)                                                                  \
    static bool fn(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out, \
                   int n_out) {                                                             \
        return conv_supports_mode(node, in, n_in, out, n_out, mode);                        \
    }
CONV_SUP(sup_heur, CONV_HEUR)
CONV_SUP(sup_nhwc, CONV_NHWC)
CONV_SUP(sup_dw, CONV_DW)
CONV_SUP(sup_dw2, CONV_DW2)
CONV_SUP(sup_dwu, CONV_DWU)
CONV_SUP(sup_gemm, CONV_GEMM)

bool kc_conv_supports_relu(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    return conv_supports_mode(node, in, n_in, out, n_out, CONV_FUSED);
}

/* The other cuBLASLt heuristics for channels-last 1x1 convolutions (one
 * GEMM with the whole epilogue). */
static bool sup_gemm_cl(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    return is_cl(node) && sup_gemm(node, in, n_in, out, n_out);
}

static void conv_release(void *p) {
    conv_inst *s = p;
    if (!s)
        return;
    if (s->xd)
        cudnnDestroyTensorDescriptor(s->xd);
    if (s->yd)
        cudnnDestroyTensorDescriptor(s->yd);
    if (s->bd)
        cudnnDestroyTensorDescriptor(s->bd);
    if (s->wd)
        cudnnDestroyFilterDescriptor(s->wd);
    if (s->cd)
        cudnnDestroyConvolutionDescriptor(s->cd);
    if (s->ad)
        cudnnDestroyActivationDescriptor(s->ad);
    if (s->gemm)
        kc_gemm_destroy(s->gemm);
    kn_free(s);
}

/* cuDNN wants at least 4 dims: a 1-D convolution gets a spatial dim of 1 in front. */
int kc_dnn_dims(int rank, const int64_t *d, int *out) {
    int n = 0;
    out[n++] = (int)d[0];
    out[n++] = (int)d[1];
    if (rank == 3)
        out[n++] = 1;
    for (int i = 2; i < rank; i++)
        out[n++] = (int)d[i];
    return n;
}

kiln_status kc_tensor_desc(const kn_node *node, cudnnTensorDescriptor_t *t, cudnnDataType_t dt,
                           int rank, const int64_t *dims) {
    int d[KILN_MAX_DIMS], s[KILN_MAX_DIMS];
    int n = kc_dnn_dims(rank, dims, d);
    s[n - 1] = 1;
    for (int i = n - 2; i >= 0; i--)
        s[i] = s[i + 1] * d[i + 1];
    KC_CUDNN(node, cudnnCreateTensorDescriptor(t));
    KC_CUDNN(node, cudnnSetTensorNdDescriptor(*t, dt, n, d, s));
    return KILN_OK;
}

static kiln_status conv_build(const kn_node *node, const kb_tensor *in, int n_in,
                              const kb_tensor *out, conv_inst *s) {
    const kb_tensor *x = &in[0], *w = &in[1], *y = &out[0];
    int64_t xf[KILN_MAX_DIMS], wf[KILN_MAX_DIMS], yf[KILN_MAX_DIMS];
    cudnnDataType_t dt;
    if (!kc_dnn_type(x->dtype, &dt) || w->dtype != x->dtype || y->dtype != x->dtype)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "types %s, %s -> %s",
                             kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype),
                             kiln_dtype_name(y->dtype));
    if (x->rank != w->rank || x->rank < 3 || x->rank > 5 || y->rank != x->rank)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "X rank %d, W rank %d", x->rank, w->rank);
    s->cl = is_cl(node);
    if (s->cl && x->rank != 4)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "channels-last convolutions are 2-D");
    cf_dims(s->cl, x->rank, x->dims, xf);
    cf_dims(s->cl, w->rank, w->dims, wf);
    cf_dims(s->cl, y->rank, y->dims, yf);
    kn_window win;
    KN_TRY(kc_conv_window(node, x->rank, xf, wf, &win));
    int64_t group = kn_attr_int(node, "group", 1);
    if (group < 1 || xf[1] != wf[1] * group || wf[0] % group != 0)
        return kn_node_error(node, KILN_ERR_SHAPE, "channels %lld do not fit W %lld x group %lld",
                             (long long)xf[1], (long long)wf[1], (long long)group);
    s->dt = x->dtype;
    s->cout = wf[0];
    /* the epilogue's bias index is (i / spatial) % cout: channels innermost when cl */
    s->spatial = s->cl ? 1 : kn_numel(y->rank - 2, yf + 2);
    s->bias_input = kc_present(in, n_in, 2) || (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED) ? 2 : -1;
    s->z_input = is_fused(node) && n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED ? 3 : -1;
    if (s->bias_input >= 0 && kc_numel(&in[2]) != s->cout)
        return kn_node_error(node, KILN_ERR_SHAPE, "B has %lld values for %lld output channels",
                             (long long)kc_numel(&in[2]), (long long)s->cout);
    if (!node_act(node, &s->act, &s->act_a, &s->act_b))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "unknown activation '%s'",
                             kn_attr_string(node, "activation", ""));
    if (s->mode == CONV_FUSED && s->act != KB_ACT_NONE && s->act != KB_ACT_RELU)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "cudnn_fused takes Relu or no activation");

    if (is_dw(s->mode)) {
        if (!dw_geometry(node, s->cl, x->rank, xf, wf, yf, &win, dw_rows(s->mode), &s->dwg))
            return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                 "dw takes 2-D depthwise convolutions (group = C = K) whose taps fit");
        s->ws = 0;
        return KILN_OK;
    }
    if (s->mode == CONV_GEMM) {
        int64_t hw = kn_numel(x->rank - 2, xf + 2);
        if (group != 1 || kn_numel(w->rank - 2, wf + 2) != 1 || kn_numel(y->rank - 2, yf + 2) != hw)
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "lt_1x1 takes 1x1, stride 1, unpadded, one group");
        if (s->cl) { /* Y (NHW x K) = X (NHW x C) @ W^T, W as K x C; epilogue in cuBLASLt */
            kc_gemm_spec p = {.dt = x->dtype, .m = xf[0] * hw, .n = s->cout, .k = xf[1],
                              .batch = 1, .tb = true, .bias = s->bias_input >= 0,
                              .relu = s->act == KB_ACT_RELU, .add_c = s->z_input >= 0,
                              .a = x->data, .b = w->data, .y = y->data,
                              .bias_ptr = s->bias_input >= 0 ? in[2].data : NULL,
                              .index = s->gemm_index};
            return kc_gemm_create_spec(node, &p, &s->gemm, &s->ws);
        }
        /* Y[n] (K x HW) = W (K x C) @ X[n] (C x HW) */
        return kc_gemm_create(node, x->dtype, s->cout, hw, xf[1], xf[0], 0, xf[1] * hw, w->data,
                              x->data, y->data, &s->gemm, &s->ws);
    }
    cudnnHandle_t h;
    KN_TRY(kc_cudnn_handle(node, NULL, &h));
    int wdims[KILN_MAX_DIMS];
    int nw = kc_dnn_dims(w->rank, wf, wdims);
    KC_CUDNN(node, cudnnCreateFilterDescriptor(&s->wd));
    if (s->cl) { /* the tensors are NHWC already */
        KC_CUDNN(node, cudnnCreateTensorDescriptor(&s->xd));
        KC_CUDNN(node, cudnnSetTensor4dDescriptor(s->xd, CUDNN_TENSOR_NHWC, dt, (int)xf[0],
                                                  (int)xf[1], (int)xf[2], (int)xf[3]));
        KC_CUDNN(node, cudnnCreateTensorDescriptor(&s->yd));
        KC_CUDNN(node, cudnnSetTensor4dDescriptor(s->yd, CUDNN_TENSOR_NHWC, dt, (int)yf[0],
                                                  (int)yf[1], (int)yf[2], (int)yf[3]));
        KC_CUDNN(node, cudnnSetFilter4dDescriptor(s->wd, dt, CUDNN_TENSOR_NHWC, (int)wf[0],
                                                  (int)wf[1], (int)wf[2], (int)wf[3]));
    } else if (s->mode == CONV_NHWC) {
        if (x->rank != 4 || x->dtype == KILN_DTYPE_FLOAT)
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "cudnn_nhwc takes 2-D float16/bfloat16");
        s->n = x->dims[0], s->c = x->dims[1], s->h = x->dims[2], s->w = x->dims[3];
        s->k = w->dims[0], s->cg = w->dims[1], s->r = w->dims[2], s->sx = w->dims[3];
        s->p = y->dims[2], s->q = y->dims[3];
        KC_CUDNN(node, cudnnCreateTensorDescriptor(&s->xd));
        KC_CUDNN(node, cudnnSetTensor4dDescriptor(s->xd, CUDNN_TENSOR_NHWC, dt, (int)s->n, (int)s->c,
                                                  (int)s->h, (int)s->w));
        KC_CUDNN(node, cudnnCreateTensorDescriptor(&s->yd));
        KC_CUDNN(node, cudnnSetTensor4dDescriptor(s->yd, CUDNN_TENSOR_NHWC, dt, (int)s->n, (int)s->k,
                                                  (int)s->p, (int)s->q));
        KC_CUDNN(node, cudnnSetFilter4dDescriptor(s->wd, dt, CUDNN_TENSOR_NHWC, (int)s->k, (int)s->cg,
                                                  (int)s->r, (int)s->sx));
    } else {
        KN_TRY(kc_tensor_desc(node, &s->xd, dt, x->rank, x->dims));
        KN_TRY(kc_tensor_desc(node, &s->yd, dt, y->rank, y->dims));
        KC_CUDNN(node, cudnnSetFilterNdDescriptor(s->wd, dt, CUDNN_TENSOR_NCHW, nw, wdims));
    }
    int nsp = nw - 2, pad[3], str[3], dil[3];
    for (int d = 0; d < nsp; d++) {
        int sd = d - (nsp - win.nsp); /* the inserted leading dim of a 1-D conv */
        pad[d] = sd >= 0 ? (int)win.pad0[sd] : 0;
        str[d] = sd >= 0 ? (int)win.stride[sd] : 1;
        dil[d] = sd >= 0 ? (int)win.dil[sd] : 1;
    }
    KC_CUDNN(node, cudnnCreateConvolutionDescriptor(&s->cd));
    KC_CUDNN(node, cudnnSetConvolutionNdDescriptor(s->cd, nsp, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    KC_CUDNN(node, cudnnSetConvolutionGroupCount(s->cd, (int)group));
    /* float32: FMA unless the builder allowed TF32 (attribute allow_tf32) */
    bool tf32 = kn_attr_int(node, "allow_tf32", 0) != 0;
    KC_CUDNN(node, cudnnSetConvolutionMathType(s->cd, x->dtype == KILN_DTYPE_FLOAT && !tf32
                                                          ? CUDNN_FMA_MATH
                                                          : CUDNN_TENSOR_OP_MATH));
    /* the output shape cuDNN computes must be the schema's */
    int od[KILN_MAX_DIMS], yd[KILN_MAX_DIMS];
    int ny = kc_dnn_dims(y->rank, yf, yd);
    KC_CUDNN(node, cudnnGetConvolutionNdForwardOutputDim(s->cd, s->xd, s->wd, ny, od));
    if (memcmp(od, yd, sizeof(int) * (size_t)ny) != 0)
        return kn_node_error(node, KILN_ERR_SHAPE, "cuDNN's output shape differs from the inferred one");

    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int got = 0;
    if (s->mode == CONV_FIND)
        KC_CUDNN(node, cudnnFindConvolutionForwardAlgorithm(h, s->xd, s->wd, s->cd, s->yd, 16, &got, perf));
    else
        KC_CUDNN(node, cudnnGetConvolutionForwardAlgorithm_v7(h, s->xd, s->wd, s->cd, s->yd, 16, &got, perf));
    bool found = false;
    bool identity_fused = s->mode == CONV_FUSED && s->act == KB_ACT_NONE;
    for (int i = 0; i < got && !found; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > KC_CUDNN_MAX_WS)
            continue;
        /* cuDNN's fused call runs an identity activation with one algorithm only */
        if (identity_fused && perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
            continue;
        /* float32 must not use TF32 tensor cores unless allowed: plain FMA
         * configurations only */
        bool f32 = x->dtype == KILN_DTYPE_FLOAT && !tf32;
        if (f32 && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH)
            continue;
        s->algo = perf[i].algo;
        /* an algorithm runs with the math type it was ranked with; float32
         * is pinned to FMA so DEFAULT cannot mean TF32 */
        KC_CUDNN(node, cudnnSetConvolutionMathType(s->cd, f32 ? CUDNN_FMA_MATH : perf[i].mathType));
        found = true;
    }
    if (!found && identity_fused) {
        s->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        found = true;
    }
    if (!found)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "cuDNN offers no algorithm for this convolution");
    KC_CUDNN(node, cudnnGetConvolutionForwardWorkspaceSize(h, s->xd, s->wd, s->cd, s->yd, s->algo,
                                                           &s->conv_ws));
    s->ws = s->conv_ws;
    if (s->mode == CONV_NHWC) {
        size_t es = kiln_dtype_size(s->dt);
        s->x_off = (s->ws + 255) & ~(size_t)255;
        s->w_off = (s->x_off + (size_t)kc_numel(x) * es + 255) & ~(size_t)255;
        s->y_off = (s->w_off + (size_t)kc_numel(w) * es + 255) & ~(size_t)255;
        s->ws = s->y_off + (size_t)kc_numel(y) * es;
    }
    if (s->mode == CONV_FUSED) {
        int bdims[KILN_MAX_DIMS], bst[KILN_MAX_DIMS];
        for (int i = 0; i < ny; i++)
            bdims[i] = i == 1 ? (int)s->cout : 1;
        for (int i = ny - 1; i >= 0; i--)
            bst[i] = i == ny - 1 ? 1 : bst[i + 1] * bdims[i + 1];
        KC_CUDNN(node, cudnnCreateTensorDescriptor(&s->bd));
        KC_CUDNN(node, cudnnSetTensorNdDescriptor(s->bd, dt, ny, bdims, bst));
        KC_CUDNN(node, cudnnCreateActivationDescriptor(&s->ad));
        KC_CUDNN(node, cudnnSetActivationDescriptor(s->ad, s->act == KB_ACT_RELU
                                                               ? CUDNN_ACTIVATION_RELU
                                                               : CUDNN_ACTIVATION_IDENTITY,
                                                    CUDNN_NOT_PROPAGATE_NAN, 0.0));
        if (s->bias_input < 0) { /* cuDNN needs a bias: zeros after the conv workspace */
            s->zero_bias_off = (s->conv_ws + 255) & ~(size_t)255;
            s->ws = s->zero_bias_off + (size_t)s->cout * kiln_dtype_size(s->dt);
        }
    }
    return KILN_OK;
}

static kiln_status conv_prepare_mode(const kn_node *node, const kb_tensor *in, int n_in,
                                     const kb_tensor *out, void **inst, size_t *workspace, int mode) {
    conv_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    s->mode = mode > CONV_GEMM ? CONV_GEMM : mode; /* CONV_GEMM + i: cuBLASLt's heuristic i */
    s->gemm_index = mode - s->mode;
    kiln_status st = conv_build(node, in, n_in, out, s);
    if (st != KILN_OK) {
        conv_release(s);
        return st;
    }
    *inst = s;
    *workspace = s->ws;
    return KILN_OK;
}

/* One prepare a tactic: each builds the instance in its own mode. */
#define CONV_PREP(fn, mode)                                                                      \
    static kiln_status fn(const void *state, const kn_node *node, const kb_tensor *in, int n_in, \
                          const kb_tensor *out, int n_out, void **inst, size_t *ws) {            \
        (void)state, (void)n_out;                                                                \
        return conv_prepare_mode(node, in, n_in, out, inst, ws, mode);                           \
    }
CONV_PREP(prep_heur, CONV_HEUR)
CONV_PREP(prep_find, CONV_FIND)
CONV_PREP(prep_fused, CONV_FUSED)
CONV_PREP(prep_nhwc, CONV_NHWC)
CONV_PREP(prep_dw, CONV_DW)
CONV_PREP(prep_dw2, CONV_DW2)
CONV_PREP(prep_dwu, CONV_DWU)
CONV_PREP(prep_gemm, CONV_GEMM)
CONV_PREP(prep_gemm2, CONV_GEMM + 1)
CONV_PREP(prep_gemm3, CONV_GEMM + 2)

static kiln_status conv_run(const kb_run *r) {
    const conv_inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    if (r->workspace_size < s->ws)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)",
                             r->workspace_size, s->ws);
    kb_tensor *y = &r->out[0];
    const void *bias = s->bias_input >= 0 ? r->in[s->bias_input].data : NULL;
    const void *z = s->z_input >= 0 ? r->in[s->z_input].data : NULL;
    if (is_dw(s->mode)) {
        KC_CUDA(r->node, kc_dwconv_run(&s->dwg, y->dtype, r->in[0].data, r->in[1].data, bias, z,
                                       y->data, kc_stream(r)));
        return KILN_OK;
    }
    if (s->mode == CONV_GEMM && s->cl) {
        KN_TRY(kc_gemm_run_ex(r->node, s->gemm, r->in[0].data, r->in[1].data, y->data, bias, z,
                              r->workspace, r->workspace_size, kc_stream(r)));
        if (s->act != KB_ACT_NONE && s->act != KB_ACT_RELU)
            KC_CUDA(r->node, kc_epilogue(y->data, y->dtype, kc_numel(y), NULL, 1, 1, NULL,
                                         (int)s->act, s->act_a, s->act_b, kc_stream(r)));
        return KILN_OK;
    }
    if (s->mode == CONV_GEMM) {
        KN_TRY(kc_gemm_run(r->node, s->gemm, r->in[1].data, r->in[0].data, y->data, r->workspace,
                           r->workspace_size, kc_stream(r)));
        if (bias || z || s->act != KB_ACT_NONE)
            KC_CUDA(r->node, kc_epilogue(y->data, y->dtype, kc_numel(y), bias, s->cout, s->spatial,
                                         z, (int)s->act, s->act_a, s->act_b, kc_stream(r)));
        return KILN_OK;
    }
    cudnnHandle_t h;
    KN_TRY(kc_cudnn_handle(r->node, kc_stream(r), &h));
    float one = 1.f, zero = 0.f;
    if (s->mode == CONV_FUSED) {
        if (!bias) {
            void *zb = (uint8_t *)r->workspace + s->zero_bias_off;
            KC_CUDA(r->node, cudaMemsetAsync(zb, 0, (size_t)s->cout * kiln_dtype_size(s->dt), kc_stream(r)));
            bias = zb;
        }
        float alpha2 = z ? 1.f : 0.f;
        KC_CUDNN(r->node, cudnnConvolutionBiasActivationForward(
                              h, &one, s->xd, r->in[0].data, s->wd, r->in[1].data, s->cd, s->algo,
                              r->workspace, s->conv_ws, &alpha2, s->yd, z ? z : y->data, s->bd,
                              bias, s->ad, s->yd, y->data));
        return KILN_OK;
    }
    if (s->mode == CONV_NHWC) {
        uint8_t *ws = r->workspace;
        void *xn = ws + s->x_off, *wn = ws + s->w_off, *yn = ws + s->y_off;
        cudaStream_t st = kc_stream(r);
        /* X [N][C][HW] -> [N][HW][C]; W [K][C/g][RS] -> [K][RS][C/g] */
        KC_CUDA(r->node, kc_transpose_epilogue(r->in[0].data, xn, s->dt, s->n, s->c, s->h * s->w,
                                               NULL, NULL, 0, 0.f, 0.f, st));
        KC_CUDA(r->node, kc_transpose_epilogue(r->in[1].data, wn, s->dt, s->k, s->cg, s->r * s->sx,
                                               NULL, NULL, 0, 0.f, 0.f, st));
        KC_CUDNN(r->node, cudnnConvolutionForward(h, &one, s->xd, xn, s->wd, wn, s->cd, s->algo,
                                                  r->workspace, s->conv_ws, &zero, s->yd, yn));
        /* Y [N][PQ][K] -> [N][K][PQ] with bias, Z and the activation on the way */
        KC_CUDA(r->node, kc_transpose_epilogue(yn, y->data, s->dt, s->n, s->p * s->q, s->k, bias, z,
                                               (int)s->act, s->act_a, s->act_b, st));
        return KILN_OK;
    } else {
        KC_CUDNN(r->node, cudnnConvolutionForward(h, &one, s->xd, r->in[0].data, s->wd,
                                                  r->in[1].data, s->cd, s->algo, r->workspace,
                                                  s->conv_ws, &zero, s->yd, y->data));
    }
    if (bias || z || s->act != KB_ACT_NONE)
        KC_CUDA(r->node, kc_epilogue(y->data, y->dtype, kc_numel(y), bias, s->cout, s->spatial, z,
                                     (int)s->act, s->act_a, s->act_b, kc_stream(r)));
    return KILN_OK;
}

#define K_CONV(op, dom) \
    {op, dom, "cudnn", sup_heur, NULL, NULL, prep_heur, conv_release, conv_run}, \
    {op, dom, "cudnn_find", sup_heur, NULL, NULL, prep_find, conv_release, conv_run}, \
    {op, dom, "cudnn_fused", kc_conv_supports_relu, NULL, NULL, prep_fused, conv_release, conv_run}, \
    {op, dom, "cudnn_nhwc", sup_nhwc, NULL, NULL, prep_nhwc, conv_release, conv_run}, \
    {op, dom, "dw", sup_dw, NULL, NULL, prep_dw, conv_release, conv_run}, \
    {op, dom, "dw_r2", sup_dw2, NULL, NULL, prep_dw2, conv_release, conv_run}, \
    {op, dom, "dw_u", sup_dwu, NULL, NULL, prep_dwu, conv_release, conv_run}, \
    {op, dom, "lt_1x1", sup_gemm, NULL, NULL, prep_gemm, conv_release, conv_run}, \
    {op, dom, "lt_1x1_2", sup_gemm_cl, NULL, NULL, prep_gemm2, conv_release, conv_run}, \
    {op, dom, "lt_1x1_3", sup_gemm_cl, NULL, NULL, prep_gemm3, conv_release, conv_run}

const kb_kernel kb_cuda_conv[] = {
    K_CONV("Conv", ""),
    K_CONV("Conv", KN_DOMAIN_KILN),
};
const size_t kb_cuda_conv_count = KN_ARRAY_LEN(kb_cuda_conv);
