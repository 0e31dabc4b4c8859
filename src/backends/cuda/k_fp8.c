/* k_fp8.c - kiln::FP8Conv and kiln::FP8MatMul on the CUDA backend (fp8.cu):
 *   "cuda"      the direct kernel: the CPU reference's bits (any GPU: the
 *               E4M3 codes are decoded in software);
 *   "lt", "lt2" cuBLASLt FP8 GEMM (E4M3 x E4M3, FP32 accumulation with
 *               fast accumulation off, FP32 D) on sm_89 and newer (Ada,
 *               Hopper; supports() refuses elsewhere), then fp8.cu's
 *               epilogue (scales, bias, residual, activation, FP8 or float
 *               output). Convolutions of group 1 through an im2col into the
 *               workspace (a 1x1 stride-1 unpadded one too: NCHW is not the
 *               GEMM's row order), matmuls with a constant 2-D W directly
 *               (X packed only when K is not a multiple of 16 or X is
 *               misaligned). The tensor cores sum in their own order: a
 *               tolerance against the reference (graph/fp8layer.h).
 * The per-channel values (x_scale * w_scale, C) and the packed W' come from
 * the constants at prepare and live in device memory owned by the instance.
 * The Q/DQ pass builds these layers on the GPU only with --fp8
 * (KILN_BUILDER_FLAG_FP8). */
#include <string.h>

#include "fp8.cuh"
#include "graph/fused.h"
#include "graph/ops_nn.h"
#include "graph/qlayer.h"
#include "kc_common.h"

#define F8 KILN_DTYPE_FLOAT8E4M3FN

static bool present(const kn_tinfo *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED;
}

static float hfloat(const kb_tensor *in, int n_in, int i, int64_t c, float dflt) {
    if (i >= n_in || in[i].dtype != KILN_DTYPE_FLOAT || !in[i].host)
        return dflt;
    int64_t n = kn_numel(in[i].rank, in[i].dims);
    return ((const float *)in[i].host)[n > 1 ? c : 0];
}

static bool supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    if (n_out < 1 || n_in <= KN_QL_W || in[KN_QL_X].dtype != F8 || in[KN_QL_W].dtype != F8)
        return false;
    if (out[0].dtype != F8 && out[0].dtype != KILN_DTYPE_FLOAT)
        return false;
    /* the scales and C are read at prepare: constants only */
    static const int consts[] = {KN_QL_XS, KN_QL_WS, KN_QL_YS, KN_QL_ZS, KN_QL_C};
    for (size_t k = 0; k < KN_ARRAY_LEN(consts); k++)
        if (present(in, n_in, consts[k]) &&
            (!in[consts[k]].value || in[consts[k]].dtype != KILN_DTYPE_FLOAT))
            return false;
    if (present(in, n_in, KN_QL_Z) && in[KN_QL_Z].dtype != F8 && in[KN_QL_Z].dtype != KILN_DTYPE_FLOAT)
        return false;
    if (strcmp(n->op_type, "FP8Conv") == 0) {
        int r = in[KN_QL_X].rank;
        return (r == 4 || r == 3) && in[KN_QL_W].rank == r;
    }
    return in[KN_QL_X].rank >= 2 && in[KN_QL_W].rank >= 2;
}

typedef struct f8inst {
    void *dev;       /* s [cout], c [cout] */
    int64_t cout;
    kc_f8layer q;    /* the layer, dims of the prepared shapes */
} f8inst;

static void release(void *p) {
    f8inst *s = p;
    if (!s)
        return;
    if (s->dev)
        cudaFree(s->dev);
    kn_free(s);
}

/* q from the node and its tensors (dims, host constants). */
static kiln_status fill(const kn_node *n, const kb_tensor *in, int n_in, const kb_tensor *out,
                        kc_f8layer *q) {
    const kb_tensor *x = &in[KN_QL_X], *w = &in[KN_QL_W], *y = &out[0];
    memset(q, 0, sizeof *q);
    KN_TRY(kn_qepi_parse(n, &q->e));
    for (int i = 0; i < q->e.n_stages; i++)
        if (q->e.stage[i] == KN_QS_QDQ)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "an FP8 layer takes no QDQ stage");
    q->conv = strcmp(n->op_type, "FP8Conv") == 0;
    q->y_dt = y->dtype;
    q->z_dt = n_in > KN_QL_Z ? in[KN_QL_Z].dtype : KILN_DTYPE_UNDEFINED;
    q->saturate = (int)kn_attr_int(n, "saturate", 1);
    q->ys = hfloat(in, n_in, KN_QL_YS, 0, 1.f);
    q->zs = hfloat(in, n_in, KN_QL_ZS, 0, 1.f);
    if (q->y_dt == F8 && !(q->ys > 0.f))
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "y_scale %g is not positive", (double)q->ys);
    if (q->conv) {
        int nsp = x->rank - 2;
        kn_window win;
        KN_TRY(kn_window_forward(n, nsp, x->dims + 2, w->dims + 2, false, &win));
        int o = nsp == 2 ? 0 : -1; /* 1-D: H = 1 */
        q->batch = x->dims[0];
        q->cin = x->dims[1];
        q->cout = w->dims[0];
        q->group = kn_attr_int(n, "group", 1);
        q->ih = o == 0 ? win.in[0] : 1, q->iw = win.in[nsp - 1];
        q->oh = o == 0 ? win.out[0] : 1, q->ow = win.out[nsp - 1];
        q->kh = o == 0 ? win.kernel[0] : 1, q->kw = win.kernel[nsp - 1];
        q->sh = o == 0 ? win.stride[0] : 1, q->sw = win.stride[nsp - 1];
        q->dh = o == 0 ? win.dil[0] : 1, q->dw = win.dil[nsp - 1];
        q->ph = o == 0 ? win.pad0[0] : 0, q->pw = win.pad0[nsp - 1];
        if (q->group < 1 || q->cin != w->dims[1] * q->group || q->cout % q->group)
            return kn_node_error(n, KILN_ERR_SHAPE, "channels do not fit the group count");
    } else {
        q->tb = kn_attr_int(n, "trans_b", 0) != 0;
        q->m = x->dims[x->rank - 2];
        q->k = x->dims[x->rank - 1];
        q->n = w->dims[w->rank - (q->tb ? 2 : 1)];
        q->batch = kn_numel(x->rank - 2, x->dims);
        q->wb = w->rank > 2 && kn_numel(w->rank - 2, w->dims) > 1;
        if (q->wb && kn_numel(w->rank - 2, w->dims) != q->batch)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "W must be 2-D or have X's batch dims");
    }
    return KILN_OK;
}

static kiln_status prepare_base(const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, f8inst *s) {
    KN_TRY(fill(n, in, n_in, out, &s->q));
    int64_t cout = s->q.conv ? s->q.cout : s->q.n;
    s->cout = cout;
    size_t bytes = (size_t)(cout > 0 ? cout : 1) * 8u;
    float *h = kn_malloc(bytes);
    if (!h)
        return KILN_ERR_OUT_OF_MEMORY;
    float xs = hfloat(in, n_in, KN_QL_XS, 0, 1.f);
    for (int64_t c = 0; c < cout; c++) {
        h[c] = xs * hfloat(in, n_in, KN_QL_WS, c, 1.f);
        h[cout + c] = hfloat(in, n_in, KN_QL_C, c, 0.f);
    }
    cudaError_t e = cudaMalloc(&s->dev, bytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(s->dev, h, bytes, cudaMemcpyHostToDevice);
    kn_free(h);
    if (e != cudaSuccess)
        return kc_cuda_fail(n, e, "uploading the per-channel values");
    s->q.s = (const float *)s->dev;
    s->q.c = (const float *)s->dev + cout;
    return KILN_OK;
}

static kiln_status prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                           const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)n_out;
    f8inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = prepare_base(n, in, n_in, out, s);
    if (st != KILN_OK) {
        release(s);
        return st;
    }
    *inst = s;
    *workspace = 0;
    return KILN_OK;
}

static kiln_status run(const kb_run *r) {
    const f8inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "not prepared");
    kc_f8layer q;
    KN_TRY(fill(r->node, r->in, r->n_in, r->out, &q));
    q.s = s->q.s, q.c = s->q.c;
    const kb_tensor *z = r->n_in > KN_QL_Z && r->in[KN_QL_Z].data ? &r->in[KN_QL_Z] : NULL;
    q.z_dt = z ? z->dtype : KILN_DTYPE_UNDEFINED;
    KC_CUDA(r->node, kc_f8_direct(r->in[KN_QL_X].data, r->in[KN_QL_W].data, z ? z->data : NULL,
                                  r->out[0].data, &q, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- cuBLASLt FP8 tactics: lt, lt2 ----------------
 * cuBLASLt's FP8 GEMM takes only the "TN" form in column-major order:
 * op(A) = A^T with A = W' (kp x np, ld kp), B = X' (kp x rows, ld kp),
 * D (np x rows, ld np) FP32, CUBLAS_COMPUTE_32F, alpha 1, beta 0; kp and
 * np are multiples of 16 (every leading dimension a multiple of 16 bytes,
 * as FP8 needs). */
#define LT_TACTICS 2
#define LT_MAX_WS ((size_t)32 << 20)

/* The device's compute capability is 8.9 or newer (FP8 tensor cores). */
static bool fp8_device(void) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return false;
    return major * 10 + minor >= 89;
}

static bool lt_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    if (!supports(n, in, n_in, out, n_out) || !in[KN_QL_W].value || !fp8_device())
        return false;
    if (strcmp(n->op_type, "FP8Conv") == 0)
        return kn_attr_int(n, "group", 1) == 1;
    return kn_numel(in[KN_QL_W].rank - 2, in[KN_QL_W].dims) == 1;
}

typedef struct lt_inst {
    f8inst base;
    kc_f8gemm g;
    void *wdev;                   /* W' [np, kp] */
    bool direct;                  /* X is B as it is (when 16-byte aligned) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    size_t lt_ws, off_x, off_d, total_ws;
} lt_inst;

static void lt_release(void *p) {
    lt_inst *s = p;
    if (!s)
        return;
    if (s->ld)
        cublasLtMatrixLayoutDestroy(s->ld);
    if (s->lb)
        cublasLtMatrixLayoutDestroy(s->lb);
    if (s->la)
        cublasLtMatrixLayoutDestroy(s->la);
    if (s->op)
        cublasLtMatmulDescDestroy(s->op);
    if (s->wdev)
        cudaFree(s->wdev);
    if (s->base.dev)
        cudaFree(s->base.dev);
    kn_free(s);
}

static size_t up256(size_t v) { return (v + 255) & ~(size_t)255; }
static int64_t up16(int64_t v) { return (v + 15) / 16 * 16; }

/* W' [np, kp]: row c holds output channel c's weights in the im2col's
 * column order (a conv's W [K, C, kh, kw] row as it is), zeros past k. */
static kiln_status lt_weights(const kn_node *n, const kb_tensor *w, lt_inst *s) {
    const kc_f8gemm *g = &s->g;
    const uint8_t *wh = w->host;
    if (!wh)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "W must be a constant");
    size_t bytes = (size_t)(g->np * g->kp);
    uint8_t *h = kn_calloc(1, bytes);
    if (!h)
        return KILN_ERR_OUT_OF_MEMORY;
    const kc_f8layer *q = &s->base.q;
    for (int64_t c = 0; c < g->cols; c++)
        for (int64_t kk = 0; kk < g->k; kk++)
            h[c * g->kp + kk] = q->conv || q->tb ? wh[c * g->k + kk] : wh[kk * g->cols + c];
    cudaError_t e = cudaMalloc(&s->wdev, bytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(s->wdev, h, bytes, cudaMemcpyHostToDevice);
    kn_free(h);
    if (e != cudaSuccess)
        return kc_cuda_fail(n, e, "uploading the packed FP8 weights");
    return KILN_OK;
}

static kiln_status lt_layout(const kn_node *n, cublasLtMatrixLayout_t *l, cudaDataType_t dt,
                             int64_t rows, int64_t cols, int64_t ld) {
    KC_CUBLAS(n, cublasLtMatrixLayoutCreate(l, dt, (uint64_t)rows, (uint64_t)cols, ld));
    cublasLtOrder_t order = CUBLASLT_ORDER_COL;
    KC_CUBLAS(n, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
    return KILN_OK;
}

static kiln_status lt_setup(const kn_node *n, lt_inst *s, int index) {
    cublasLtHandle_t h;
    KN_TRY(kc_cublaslt_handle(n, &h));
    const kc_f8gemm *g = &s->g;
    KC_CUBLAS(n, cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    KC_CUBLAS(n, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    KC_CUBLAS(n, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    /* FP32 partial sums promoted as cuBLASLt does without fast accumulation */
    int8_t fast = 0;
    KC_CUBLAS(n, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    KN_TRY(lt_layout(n, &s->la, CUDA_R_8F_E4M3, g->kp, g->np, g->kp));
    KN_TRY(lt_layout(n, &s->lb, CUDA_R_8F_E4M3, g->kp, g->rows, g->kp));
    KN_TRY(lt_layout(n, &s->ld, CUDA_R_32F, g->np, g->rows, g->np));
    cublasLtMatmulPreference_t pref = NULL;
    KC_CUBLAS(n, cublasLtMatmulPreferenceCreate(&pref));
    size_t max_ws = LT_MAX_WS;
    uint32_t al = 16; /* X as it is may be only 16-byte aligned */
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
         st == CUBLAS_STATUS_SUCCESS && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a,
                                                  &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res[LT_TACTICS];
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(h, s->op, s->la, s->lb, s->ld, s->ld, pref, LT_TACTICS,
                                            res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found <= 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "cuBLASLt has no FP8 GEMM for M=%lld N=%lld K=%lld (status %d)",
                             (long long)g->rows, (long long)g->np, (long long)g->kp, (int)st);
    if (index >= found) /* a plan's tactic must run at every shape of its profile */
        index = found - 1;
    if (res[index].state != CUBLAS_STATUS_SUCCESS)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "cuBLASLt's FP8 algorithm %d is unusable", index);
    s->algo = res[index].algo;
    s->lt_ws = res[index].workspaceSize;
    return KILN_OK;
}

static kiln_status lt_prepare_n(const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, void **inst, size_t *workspace, int index) {
    lt_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = prepare_base(n, in, n_in, out, &s->base);
    if (st == KILN_OK) {
        const kc_f8layer *q = &s->base.q;
        kc_f8gemm *g = &s->g;
        if (q->conv) {
            g->rows = q->batch * q->oh * q->ow;
            g->cols = q->cout;
            g->k = q->cin * q->kh * q->kw;
        } else {
            g->rows = q->batch * q->m;
            g->cols = q->n;
            g->k = q->k;
        }
        g->kp = up16(g->k);
        g->np = up16(g->cols);
        s->direct = !q->conv && g->kp == g->k;
        if (g->rows <= 0 || g->cols <= 0 || g->k <= 0 || g->rows > INT32_MAX ||
            g->kp * g->np > INT32_MAX)
            st = kn_node_error(n, KILN_ERR_UNSUPPORTED, "an empty or too large FP8 GEMM");
    }
    if (st == KILN_OK)
        st = lt_weights(n, &in[KN_QL_W], s);
    if (st == KILN_OK)
        st = lt_setup(n, s, index);
    if (st != KILN_OK) {
        lt_release(s);
        return st;
    }
    const kc_f8gemm *g = &s->g;
    s->off_x = up256(s->lt_ws);
    s->off_d = s->off_x + up256((size_t)(g->rows * g->kp));
    s->total_ws = s->off_d + up256((size_t)(g->rows * g->np) * 4);
    *inst = s;
    *workspace = s->total_ws;
    return KILN_OK;
}

static kiln_status lt_run(const kb_run *r) {
    const kn_node *n = r->node;
    const lt_inst *s = r->inst;
    if (!s)
        return kn_node_error(n, KILN_ERR_INTERNAL, "not prepared");
    if (!r->workspace || r->workspace_size < s->total_ws)
        return kn_node_error(n, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)",
                             r->workspace_size, s->total_ws);
    const kb_tensor *x = &r->in[KN_QL_X];
    const kb_tensor *z = r->n_in > KN_QL_Z && r->in[KN_QL_Z].data ? &r->in[KN_QL_Z] : NULL;
    kc_f8layer q = s->base.q;
    q.z_dt = z ? z->dtype : KILN_DTYPE_UNDEFINED;
    cudaStream_t stream = kc_stream(r);
    uint8_t *ws = r->workspace;
    const uint8_t *xp = x->data;
    if (!s->direct || ((uintptr_t)x->data & 15u) != 0) {
        uint8_t *p = ws + s->off_x;
        KC_CUDA(n, kc_f8_pack(x->data, p, &q, &s->g, stream));
        xp = p;
    }
    float *d = (float *)(ws + s->off_d);
    cublasLtHandle_t h;
    KN_TRY(kc_cublaslt_handle(n, &h));
    float alpha = 1.f, beta = 0.f;
    KC_CUBLAS(n, cublasLtMatmul(h, s->op, &alpha, s->wdev, s->la, xp, s->lb, &beta, d, s->ld, d,
                                s->ld, &s->algo, s->lt_ws ? ws : NULL, s->lt_ws, stream));
    KC_CUDA(n, kc_f8_epilogue(d, z ? z->data : NULL, r->out[0].data, &q, &s->g, stream));
    return KILN_OK;
}

static kiln_status lt_prepare_0(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)n_out;
    return lt_prepare_n(n, in, n_in, out, inst, workspace, 0);
}
static kiln_status lt_prepare_1(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)n_out;
    return lt_prepare_n(n, in, n_in, out, inst, workspace, 1);
}

/* best heuristic last: the tactic an untimed build keeps (builder.h) */
#define LT_KERNELS(op)                                                                           \
    {op, KN_DOMAIN_KILN, "lt2", lt_supports, NULL, NULL, lt_prepare_1, lt_release, lt_run},       \
    {op, KN_DOMAIN_KILN, "lt", lt_supports, NULL, NULL, lt_prepare_0, lt_release, lt_run}

const kb_kernel kb_cuda_fp8[] = {
    {"FP8Conv", KN_DOMAIN_KILN, "cuda", supports, NULL, NULL, prepare, release, run},
    {"FP8MatMul", KN_DOMAIN_KILN, "cuda", supports, NULL, NULL, prepare, release, run},
    LT_KERNELS("FP8Conv"),
    LT_KERNELS("FP8MatMul"),
};
const size_t kb_cuda_fp8_count = KN_ARRAY_LEN(kb_cuda_fp8);
