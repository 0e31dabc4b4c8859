/* k_int8.c - kiln::QConv and kiln::QMatMul on the CUDA backend (int8.cu):
 * the per-channel values (x_scale * w_scale, B, C, w zero points) come from
 * the constants at prepare and live in device memory owned by the
 * instance. The kernels are direct (a reference for faster GPU tactics), so
 * the Q/DQ pass builds these layers on the GPU only with --int8
 * (KILN_BUILDER_FLAG_INT8); see builder/pass_qdq.c. */
#include <string.h>

#include "graph/fused.h"
#include "graph/ops_nn.h"
#include "graph/qlayer.h"
#include "int8.cuh"
#include "kc_common.h"
#include "nn.cuh"

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

static bool present(const kn_tinfo *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED;
}

/* Double value k of a host tensor (scalar or per channel). */
static double hval(const void *p, kiln_dtype t, int64_t k) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[k];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[k];
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[k];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[k];
    default: return 0.0;
    }
}

static bool supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    if (n_out < 1 || n_in <= KN_QL_W || !is_8bit(in[KN_QL_X].dtype) || !is_8bit(in[KN_QL_W].dtype))
        return false;
    /* the per-channel values are read at prepare: constants only */
    for (int i = KN_QL_XS; i < n_in && i < KN_QL_N_IN; i++)
        if (i != KN_QL_X && i != KN_QL_W && i != KN_QL_Z && present(in, n_in, i) && !in[i].value)
            return false;
    if (present(in, n_in, KN_QL_Z) && !is_8bit(in[KN_QL_Z].dtype) &&
        in[KN_QL_Z].dtype != KILN_DTYPE_FLOAT)
        return false;
    if (strcmp(n->op_type, "QConv") == 0) {
        int r = in[KN_QL_X].rank;
        bool cl = kn_attr_int(n, "channels_last", 0) != 0;
        return (r == 4 || (r == 3 && !cl)) && in[KN_QL_W].rank == r;
    }
    return in[KN_QL_X].rank >= 2 && in[KN_QL_W].rank >= 2;
}

typedef struct qinst {
    void *dev;         /* s, b, c, wz: cout entries each */
    int64_t cout;
} qinst;

static void release(void *p) {
    qinst *q = p;
    if (!q)
        return;
    if (q->dev)
        cudaFree(q->dev);
    kn_free(q);
}

static const void *host_of(const kb_tensor *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED ? in[i].host : NULL;
}

static kiln_status prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                           const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)n_out;
    const kb_tensor *y = &out[0];
    bool conv = strcmp(n->op_type, "QConv") == 0;
    int64_t cout = conv ? in[KN_QL_W].dims[0] : y->dims[y->rank - 1];
    for (int i = KN_QL_XS; i < n_in && i < KN_QL_N_IN; i++)
        if (i != KN_QL_W && i != KN_QL_Z && in[i].dtype != KILN_DTYPE_UNDEFINED && !in[i].host)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "input %d must be a constant", i);
    size_t bytes = (size_t)cout * 16u;
    uint8_t *h = kn_malloc(bytes ? bytes : 16);
    if (!h)
        return KILN_ERR_OUT_OF_MEMORY;
    float *s = (float *)h, *c = (float *)(h + 8 * (size_t)cout);
    int32_t *b = (int32_t *)(h + 4 * (size_t)cout), *wz = (int32_t *)(h + 12 * (size_t)cout);
    const void *xs = host_of(in, n_in, KN_QL_XS), *ws = host_of(in, n_in, KN_QL_WS);
    const void *bb = host_of(in, n_in, KN_QL_B), *cc = host_of(in, n_in, KN_QL_C);
    const void *wzp = host_of(in, n_in, KN_QL_WZ);
    float x_scale = xs ? (float)hval(xs, in[KN_QL_XS].dtype, 0) : 1.f;
    for (int64_t k = 0; k < cout; k++) {
        int64_t kw = ws && kn_numel(in[KN_QL_WS].rank, in[KN_QL_WS].dims) > 1 ? k : 0;
        s[k] = x_scale * (ws ? (float)hval(ws, in[KN_QL_WS].dtype, kw) : 1.f);
        b[k] = bb ? (int32_t)hval(bb, KILN_DTYPE_INT32, kn_numel(in[KN_QL_B].rank, in[KN_QL_B].dims) > 1 ? k : 0) : 0;
        c[k] = cc ? (float)hval(cc, KILN_DTYPE_FLOAT, kn_numel(in[KN_QL_C].rank, in[KN_QL_C].dims) > 1 ? k : 0) : 0.f;
        wz[k] = wzp ? (int32_t)hval(wzp, in[KN_QL_WZ].dtype, kn_numel(in[KN_QL_WZ].rank, in[KN_QL_WZ].dims) > 1 ? k : 0) : 0;
    }
    qinst *q = kn_calloc(1, sizeof *q);
    if (!q) {
        kn_free(h);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    q->cout = cout;
    cudaError_t e = cudaMalloc(&q->dev, bytes ? bytes : 16);
    if (e == cudaSuccess)
        e = cudaMemcpy(q->dev, h, bytes, cudaMemcpyHostToDevice);
    kn_free(h);
    if (e != cudaSuccess) {
        release(q);
        return kc_cuda_fail(n, e, "uploading the per-channel values");
    }
    *inst = q;
    *workspace = 0;
    return KILN_OK;
}

/* q from the node and its tensors (dims and host constants; no data
 * pointers): everything but the device per-channel values. */
static kiln_status fill(const kn_node *n, const kb_tensor *in, int n_in, const kb_tensor *out,
                        bool has_z, kc_qlayer *q) {
    const kb_tensor *x = &in[KN_QL_X], *w = &in[KN_QL_W], *y = &out[0];
    memset(q, 0, sizeof *q);
    KN_TRY(kn_qepi_parse(n, &q->e));
    q->conv = strcmp(n->op_type, "QConv") == 0;
    q->x_dt = x->dtype, q->w_dt = w->dtype, q->y_dt = y->dtype;
    q->z_dt = has_z ? in[KN_QL_Z].dtype : KILN_DTYPE_UNDEFINED;
    const void *h;
    q->xz = (h = host_of(in, n_in, KN_QL_XZ)) ? (int32_t)hval(h, in[KN_QL_XZ].dtype, 0) : 0;
    q->ys = (h = host_of(in, n_in, KN_QL_YS)) ? (float)hval(h, KILN_DTYPE_FLOAT, 0) : 1.f;
    q->yz = (h = host_of(in, n_in, KN_QL_YZ)) ? (float)hval(h, in[KN_QL_YZ].dtype, 0) : 0.f;
    q->zs = (h = host_of(in, n_in, KN_QL_ZS)) ? (float)hval(h, KILN_DTYPE_FLOAT, 0) : 1.f;
    q->zz = (h = host_of(in, n_in, KN_QL_ZZ)) ? (float)hval(h, in[KN_QL_ZZ].dtype, 0) : 0.f;
    double lo = 0, hi = 0;
    if (q->y_dt == KILN_DTYPE_UINT8 || q->y_dt == KILN_DTYPE_INT8)
        kn_q_range((int)q->y_dt, &lo, &hi);
    q->lo = (float)lo, q->hi = (float)hi;
    if (q->conv) {
        q->cl = kn_attr_int(n, "channels_last", 0) != 0;
        int nsp = x->rank - 2;
        int64_t xs[KN_WIN_MAX];
        for (int d = 0; d < nsp; d++)
            xs[d] = q->cl ? x->dims[1 + d] : x->dims[2 + d];
        kn_window win;
        KN_TRY(kn_window_forward(n, nsp, xs, w->dims + 2, false, &win));
        int o = nsp == 2 ? 0 : -1; /* 1-D: H = 1 */
        q->batch = x->dims[0];
        q->cin = q->cl ? x->dims[x->rank - 1] : x->dims[1];
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

static void set_dev(kc_qlayer *q, const qinst *qi) {
    const uint8_t *dev = qi->dev;
    size_t cout = (size_t)qi->cout;
    q->s = (const float *)dev;
    q->b = (const int32_t *)(dev + 4 * cout);
    q->c = (const float *)(dev + 8 * cout);
    q->wz = (const int32_t *)(dev + 12 * cout);
}

static kiln_status run(const kb_run *r) {
    const kn_node *n = r->node;
    const qinst *qi = r->inst;
    if (!qi)
        return kn_node_error(n, KILN_ERR_INTERNAL, "not prepared");
    const kb_tensor *x = &r->in[KN_QL_X], *w = &r->in[KN_QL_W], *y = &r->out[0];
    const kb_tensor *z = r->n_in > KN_QL_Z && r->in[KN_QL_Z].data ? &r->in[KN_QL_Z] : NULL;
    kc_qlayer q;
    KN_TRY(fill(n, r->in, r->n_in, r->out, z != NULL, &q));
    set_dev(&q, qi);
    KC_CUDA(n, kc_qlayer_run(x->data, w->data, z ? z->data : NULL, y->data, &q, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- cuBLASLt IMMA tactics: imma, imma2, imma3, imma4 ----------------
 *
 * The layer as one int8 x int8 -> int32 GEMM (int8.cuh's kc_qgemm): a
 * QConv (group 1) as an implicit GEMM over an im2col of X in the
 * workspace (skipped for a 1x1 stride-1 unpadded channels-last int8 conv,
 * whose X is the operand as it is), a QMatMul with constant W directly
 * (X packed only when it is uint8 or K is not a multiple of 16). cuBLASLt
 * wants IMMA's "TN" form in column-major order: op(A) = A^T with A = W'
 * (kp x np, ld kp), B = X' (kp x rows, ld kp), D (np x rows, ld np) int32,
 * CUBLAS_COMPUTE_32I with CUDA_R_32I scales (alpha 1, beta 0); kp and np
 * are multiples of 16, so every dimension and leading dimension is a
 * multiple of 4 and every row of the packed operands 16-byte aligned.
 * Tactic i takes the heuristic's i-th result; none: the tactic declines in
 * prepare (KILN_ERR_UNSUPPORTED) and the builder keeps another one. */
#define IMMA_TACTICS 4
#define IMMA_MAX_WS ((size_t)32 << 20)

static bool imma_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    if (!supports(n, in, n_in, out, n_out) || !in[KN_QL_W].value)
        return false;
    if (strcmp(n->op_type, "QConv") == 0)
        return kn_attr_int(n, "group", 1) == 1;
    /* W 2-D (or with unit batch dims): one weight matrix for all rows */
    return kn_numel(in[KN_QL_W].rank - 2, in[KN_QL_W].dims) == 1;
}

typedef struct imma_inst {
    qinst base;                   /* s, b, c, wz (the epilogue's) */
    kc_qlayer q;                  /* the layer, device pointers of base set */
    kc_qgemm g;
    void *dev;                    /* W' [np, kp], corr [cols], wzp [cols] */
    bool direct;                  /* X is the B operand as it is (when 16-byte aligned) */
    int mma_bn;                   /* qmma tactics: kiln's fused kernel, tiles 128 x mma_bn;
                                   * 0: cuBLASLt and the epilogue kernel */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    size_t lt_ws, off_x, off_d, off_rs, total_ws;
} imma_inst;

static void imma_release(void *p) {
    imma_inst *s = p;
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
    if (s->dev)
        cudaFree(s->dev);
    if (s->base.dev)
        cudaFree(s->base.dev);
    kn_free(s);
}

static size_t up256(size_t v) { return (v + 255) & ~(size_t)255; }
static int64_t up16(int64_t v) { return (v + 15) / 16 * 16; }

/* W' [np, kp] (columns in the im2col's order), its zero points wz' and
 * corr (int8.cuh) on the host, then on the device. */
static kiln_status imma_weights(const kn_node *n, const kb_tensor *in, int n_in, imma_inst *s) {
    const kc_qlayer *q = &s->q;
    kc_qgemm *g = &s->g;
    const kb_tensor *w = &in[KN_QL_W];
    const void *wh = w->host;
    if (!wh)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "W must be a constant");
    int64_t cols = g->cols, kp = g->kp, np = g->np, k = g->k;
    size_t wbytes = up256((size_t)(np * kp)), cbytes = up256((size_t)cols * 4);
    size_t bytes = wbytes + 2 * cbytes;
    uint8_t *h = kn_calloc(1, bytes);
    if (!h)
        return KILN_ERR_OUT_OF_MEMORY;
    int8_t *wp = (int8_t *)h;
    int32_t *corr = (int32_t *)(h + wbytes), *wzp = (int32_t *)(h + wbytes + cbytes);
    const void *wzh = host_of(in, n_in, KN_QL_WZ), *bh = host_of(in, n_in, KN_QL_B);
    int wshift = w->dtype == KILN_DTYPE_UINT8 ? 128 : 0;
    int64_t xzp = g->xzp;
    bool any_wz = false;
    for (int64_t c = 0; c < cols; c++) {
        int64_t sum = 0;
        for (int64_t kk = 0; kk < k; kk++) {
            int64_t wi;
            if (q->conv) {
                int64_t ci = kk % q->cin, t = kk / q->cin, kx = t % q->kw, ky = t / q->kw;
                wi = ((c * q->cin + ci) * q->kh + ky) * q->kw + kx;
            } else {
                wi = q->tb ? c * k + kk : kk * cols + c;
            }
            int32_t v = (int32_t)hval(wh, w->dtype, wi) - wshift;
            wp[c * kp + kk] = (int8_t)v;
            sum += v;
        }
        int64_t wz = 0, b = 0;
        if (wzh)
            wz = (int64_t)hval(wzh, in[KN_QL_WZ].dtype,
                               kn_numel(in[KN_QL_WZ].rank, in[KN_QL_WZ].dims) > 1 ? c : 0);
        wz -= wshift;
        if (bh)
            b = (int64_t)hval(bh, KILN_DTYPE_INT32, kn_numel(in[KN_QL_B].rank, in[KN_QL_B].dims) > 1 ? c : 0);
        wzp[c] = (int32_t)wz;
        any_wz = any_wz || wz != 0;
        /* int32 wrap-around, as the reference's own sums */
        corr[c] = (int32_t)(uint32_t)(uint64_t)(b - xzp * sum + k * xzp * wz);
    }
    cudaError_t e = cudaMalloc(&s->dev, bytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(s->dev, h, bytes, cudaMemcpyHostToDevice);
    kn_free(h);
    if (e != cudaSuccess)
        return kc_cuda_fail(n, e, "uploading the packed weights");
    g->corr = (const int32_t *)((uint8_t *)s->dev + wbytes);
    g->wzp = any_wz ? (const int32_t *)((uint8_t *)s->dev + wbytes + cbytes) : NULL;
    return KILN_OK;
}

static kiln_status imma_layout(const kn_node *n, cublasLtMatrixLayout_t *l, cudaDataType_t dt,
                               int64_t rows, int64_t cols, int64_t ld) {
    KC_CUBLAS(n, cublasLtMatrixLayoutCreate(l, dt, (uint64_t)rows, (uint64_t)cols, ld));
    cublasLtOrder_t order = CUBLASLT_ORDER_COL;
    KC_CUBLAS(n, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
    return KILN_OK;
}

static kiln_status imma_setup(const kn_node *n, imma_inst *s, int index) {
    cublasLtHandle_t h;
    KN_TRY(kc_cublaslt_handle(n, &h));
    const kc_qgemm *g = &s->g;
    KC_CUBLAS(n, cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    KC_CUBLAS(n, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    KC_CUBLAS(n, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    KN_TRY(imma_layout(n, &s->la, CUDA_R_8I, g->kp, g->np, g->kp));
    KN_TRY(imma_layout(n, &s->lb, CUDA_R_8I, g->kp, g->rows, g->kp));
    KN_TRY(imma_layout(n, &s->ld, CUDA_R_32I, g->np, g->rows, g->np));
    cublasLtMatmulPreference_t pref = NULL;
    KC_CUBLAS(n, cublasLtMatmulPreferenceCreate(&pref));
    size_t max_ws = IMMA_MAX_WS;
    uint32_t al = 16; /* X as it is may be only 16-byte aligned */
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
         st == CUBLAS_STATUS_SUCCESS && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a,
                                                  &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res[IMMA_TACTICS];
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(h, s->op, s->la, s->lb, s->ld, s->ld, pref,
                                            IMMA_TACTICS, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found <= 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "cuBLASLt has no int8 GEMM for M=%lld N=%lld K=%lld (status %d)",
                             (long long)g->rows, (long long)g->np, (long long)g->kp, (int)st);
    /* fewer results than index + 1: the last one (a plan's tactic must run
     * at every shape of its profile) */
    if (index >= found)
        index = found - 1;
    if (res[index].state != CUBLAS_STATUS_SUCCESS)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "cuBLASLt's int8 algorithm %d is unusable", index);
    s->algo = res[index].algo;
    s->lt_ws = res[index].workspaceSize;
    return KILN_OK;
}

/* The pack's and the epilogue's index geometry (int8_geom.h) and the
 * stage pattern, all fixed at prepare: run() only picks the widest chunks
 * that the pointers' alignment allows. */
static kiln_status imma_geometry(const kn_node *n, imma_inst *s) {
    const kc_qlayer *q = &s->q;
    kc_qgemm *g = &s->g;
    static const uint32_t pv[3] = {16, 4, 1};
    bool rowmajor = !q->conv || q->cl; /* X channels-last (or a QMatMul's rows), Y too */
    for (int i = 0; i < 3 && rowmajor; i++) {
        if (q->conv)
            kc_qpack_init(&g->pg[i], pv[i], g->rows, g->k, g->kp, q->cin, q->kh, q->kw, q->ih,
                          q->iw, q->oh, q->ow, q->sh, q->sw, q->dh, q->dw, q->ph, q->pw);
        else
            kc_qpack_init(&g->pg[i], pv[i], g->rows, g->k, g->kp, g->k, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                          1, 0, 0);
    }
    if (rowmajor && !g->pg[2].v)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "the int8 GEMM's operand is too large to pack");
    if (rowmajor)
        kc_qepi_init(&g->eg[0], 4, g->rows, g->cols, g->np, 0);
    if (!kc_qepi_init(&g->eg[1], 1, g->rows, g->cols, g->np, rowmajor ? 0 : q->oh * q->ow))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "the int8 GEMM's output is too large");
    g->pat = kc_qepi_pattern(q->e.n_stages, q->e.stage);
    return KILN_OK;
}

static kiln_status imma_prepare_n(const kn_node *n, const kb_tensor *in, int n_in,
                                  const kb_tensor *out, int n_out, void **inst, size_t *workspace,
                                  int index) {
    imma_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    void *base = NULL;
    size_t unused = 0;
    kiln_status st = prepare(NULL, n, in, n_in, out, n_out, &base, &unused);
    if (st == KILN_OK) {
        s->base = *(qinst *)base;
        kn_free(base);
        st = fill(n, in, n_in, out, n_in > KN_QL_Z && in[KN_QL_Z].dtype != KILN_DTYPE_UNDEFINED,
                  &s->q);
    }
    if (st == KILN_OK) {
        kc_qlayer *q = &s->q;
        kc_qgemm *g = &s->g;
        set_dev(q, &s->base);
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
        g->shift = q->x_dt == KILN_DTYPE_UINT8;
        g->xzp = q->xz - (g->shift ? 128 : 0);
        bool plain = q->x_dt == KILN_DTYPE_INT8 && g->kp == g->k;
        if (q->conv)
            plain = plain && q->cl && q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 &&
                    q->ph == 0 && q->pw == 0 && q->oh == q->ih && q->ow == q->iw;
        s->direct = plain;
        if (g->rows <= 0 || g->cols <= 0 || g->k <= 0 || g->rows > INT32_MAX ||
            g->kp * g->np > INT32_MAX)
            st = kn_node_error(n, KILN_ERR_UNSUPPORTED, "an empty or too large int8 GEMM");
        else
            st = imma_geometry(n, s);
    }
    if (st == KILN_OK)
        st = imma_weights(n, in, n_in, s);
    if (st == KILN_OK && index >= 0)
        st = imma_setup(n, s, index);
    if (st == KILN_OK && index < 0) {
        s->mma_bn = index == -1 ? 64 : 128;
        if (s->q.conv && !s->q.cl)
            st = kn_node_error(n, KILN_ERR_UNSUPPORTED, "the fused int8 GEMM writes NHWC Y only");
    }
    if (st != KILN_OK) {
        imma_release(s);
        return st;
    }
    const kc_qgemm *g = &s->g;
    /* workspace: cuBLASLt's, X' (also when X may be used as it is: a
     * misaligned X is packed), D, the row sums */
    s->off_x = up256(s->lt_ws);
    s->off_d = s->off_x + up256((size_t)(g->rows * g->kp));
    /* the fused kernel keeps D in registers */
    s->off_rs = s->off_d + (s->mma_bn ? 0 : up256((size_t)(g->rows * g->np) * 4));
    s->total_ws = s->off_rs + up256((size_t)g->rows * 4);
    *inst = s;
    *workspace = s->total_ws;
    return KILN_OK;
}

static kiln_status imma_run(const kb_run *r) {
    const kn_node *n = r->node;
    const imma_inst *s = r->inst;
    if (!s)
        return kn_node_error(n, KILN_ERR_INTERNAL, "not prepared");
    if (!r->workspace || r->workspace_size < s->total_ws)
        return kn_node_error(n, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)",
                             r->workspace_size, s->total_ws);
    const kb_tensor *x = &r->in[KN_QL_X], *y = &r->out[0];
    const kb_tensor *z = r->n_in > KN_QL_Z && r->in[KN_QL_Z].data ? &r->in[KN_QL_Z] : NULL;
    kc_qlayer q = s->q;
    q.z_dt = z ? z->dtype : KILN_DTYPE_UNDEFINED;
    cudaStream_t stream = kc_stream(r);
    uint8_t *ws = r->workspace;
    const int8_t *xp = (const int8_t *)x->data;
    if (!s->direct || ((uintptr_t)x->data & 15u) != 0) {
        int8_t *p = (int8_t *)(ws + s->off_x);
        KC_CUDA(n, kc_qgemm_pack(x->data, p, &q, &s->g, stream));
        xp = p;
    }
    int32_t *d = (int32_t *)(ws + s->off_d), *rs = NULL;
    if (s->g.wzp) {
        rs = (int32_t *)(ws + s->off_rs);
        KC_CUDA(n, kc_qgemm_rowsum(xp, rs, &s->g, stream));
    }
    if (s->mma_bn) {
        KC_CUDA(n, kc_qgemm_mma(xp, (const int8_t *)s->dev, rs, z ? z->data : NULL, y->data, &q,
                                &s->g, s->mma_bn, stream));
        return KILN_OK;
    }
    cublasLtHandle_t h;
    KN_TRY(kc_cublaslt_handle(n, &h));
    int32_t alpha = 1, beta = 0;
    const int8_t *wp = (const int8_t *)s->dev;
    KC_CUBLAS(n, cublasLtMatmul(h, s->op, &alpha, wp, s->la, xp, s->lb, &beta, d, s->ld, d, s->ld,
                                &s->algo, s->lt_ws ? ws : NULL, s->lt_ws, stream));
    KC_CUDA(n, kc_qgemm_epilogue(d, rs, z ? z->data : NULL, y->data, &q, &s->g, stream));
    return KILN_OK;
}

#define IMMA_PREPARE(i)                                                                          \
    static kiln_status imma_prepare_##i(const void *state, const kn_node *n, const kb_tensor *in, \
                                        int n_in, const kb_tensor *out, int n_out, void **inst,   \
                                        size_t *workspace) {                                      \
        (void)state;                                                                              \
        return imma_prepare_n(n, in, n_in, out, n_out, inst, workspace, i);                       \
    }
IMMA_PREPARE(0)
IMMA_PREPARE(1)
IMMA_PREPARE(2)
IMMA_PREPARE(3)

/* kiln's fused GEMM (int8.cu's kc_qgemm_mma): the IMMA tactics' packed
 * operands and their epilogue, but applied to the sums in registers, so
 * no int32 D goes through memory; NHWC (or a QMatMul's row-major) Y. */
static bool qmma_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    if (!imma_supports(n, in, n_in, out, n_out))
        return false;
    return strcmp(n->op_type, "QConv") != 0 || kn_attr_int(n, "channels_last", 0) != 0;
}

static kiln_status qmma_prepare_64(const void *state, const kn_node *n, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *workspace) {
    (void)state;
    return imma_prepare_n(n, in, n_in, out, n_out, inst, workspace, -1);
}

static kiln_status qmma_prepare_128(const void *state, const kn_node *n, const kb_tensor *in,
                                    int n_in, const kb_tensor *out, int n_out, void **inst,
                                    size_t *workspace) {
    (void)state;
    return imma_prepare_n(n, in, n_in, out, n_out, inst, workspace, -2);
}

/* best heuristic last: the tactic an untimed build keeps (builder.h); the
 * fused qmma tactics before them, taken when they time faster */
#define IMMA_KERNELS(op)                                                                        \
    {op, KN_DOMAIN_KILN, "qmma128", qmma_supports, NULL, NULL, qmma_prepare_128, imma_release, imma_run}, \
    {op, KN_DOMAIN_KILN, "qmma", qmma_supports, NULL, NULL, qmma_prepare_64, imma_release, imma_run}, \
    {op, KN_DOMAIN_KILN, "imma4", imma_supports, NULL, NULL, imma_prepare_3, imma_release, imma_run}, \
    {op, KN_DOMAIN_KILN, "imma3", imma_supports, NULL, NULL, imma_prepare_2, imma_release, imma_run}, \
    {op, KN_DOMAIN_KILN, "imma2", imma_supports, NULL, NULL, imma_prepare_1, imma_release, imma_run}, \
    {op, KN_DOMAIN_KILN, "imma", imma_supports, NULL, NULL, imma_prepare_0, imma_release, imma_run}

/* ---------------- kiln::MaxPool on 8-bit channels-last X: q8pool ----------------
 *
 * The INT8 region's MaxPool (builder/pass_qdq.c: X and Y [N, H, W, C] of
 * one scale and zero point): int8.cu's kc_qpool_max, a thread a group of
 * 16 (or 4, or 1) channels of one output pixel, bytewise max in 32-bit
 * words. Registered after k_nn.c's general pool, so an untimed build keeps
 * it. A window of padding only (whose output the general kernel defines)
 * or an X too large for its 32-bit index math runs the general kernel. */
static bool q8pool_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    return n_in >= 1 && n_out >= 1 && (n_out < 2 || out[1].dtype == KILN_DTYPE_UNDEFINED) &&
           is_8bit(in[0].dtype) && out[0].dtype == in[0].dtype && in[0].rank == 4 &&
           kn_attr_int(n, "channels_last", 0) != 0 && kn_attr_int(n, "storage_order", 0) == 0;
}

static kiln_status q8pool_run(const kb_run *r) {
    const kn_node *n = r->node;
    kb_tensor xv = r->in[0];
    kn_dims_channels(xv.rank, r->in[0].dims, xv.dims, true); /* the window's NCHW view */
    kn_window w;
    KN_TRY(kc_pool_window(n, &xv, &w));
    int64_t batch = xv.dims[0], c = xv.dims[1];
    static const uint32_t vs[3] = {16, 4, 1};
    for (int i = 0; i < 3; i++) {
        kc_qpool_geom g;
        if (((uintptr_t)xv.data | (uintptr_t)r->out[0].data) & (vs[i] - 1u))
            continue;
        if (!kc_qpool_init(&g, vs[i], batch, c, w.in[0], w.in[1], w.out[0], w.out[1], w.kernel[0],
                           w.kernel[1], w.stride[0], w.stride[1], w.dil[0], w.dil[1], w.pad0[0],
                           w.pad0[1]))
            continue;
        KC_CUDA(n, kc_qpool_max(xv.data, r->out[0].data, xv.dtype == KILN_DTYPE_INT8, &g, batch,
                                kc_stream(r)));
        return KILN_OK;
    }
    /* the general kernel (k_nn.c's channels-last path) */
    kc_pool p;
    memset(&p, 0, sizeof p);
    p.max = 1;
    p.nsp = 2;
    p.planes = batch;
    p.channels = c;
    kc_window3(&w, 2, p.in, p.out, p.kernel, p.stride, p.dil, p.pad0, p.pad1);
    KC_CUDA(n, kc_pool_run(xv.data, r->out[0].data, xv.dtype, NULL, &p, kc_stream(r)));
    return KILN_OK;
}

const kb_kernel kb_cuda_int8[] = {
    {"MaxPool", KN_DOMAIN_KILN, "q8pool", q8pool_supports, NULL, NULL, NULL, NULL, q8pool_run},
    {"QConv", KN_DOMAIN_KILN, "cuda", supports, NULL, NULL, prepare, release, run},
    {"QMatMul", KN_DOMAIN_KILN, "cuda", supports, NULL, NULL, prepare, release, run},
    IMMA_KERNELS("QConv"),
    IMMA_KERNELS("QMatMul"),
};
const size_t kb_cuda_int8_count = KN_ARRAY_LEN(kb_cuda_int8);
