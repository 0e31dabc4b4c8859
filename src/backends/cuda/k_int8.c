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

static kiln_status run(const kb_run *r) {
    const kn_node *n = r->node;
    const qinst *qi = r->inst;
    if (!qi)
        return kn_node_error(n, KILN_ERR_INTERNAL, "not prepared");
    const kb_tensor *x = &r->in[KN_QL_X], *w = &r->in[KN_QL_W], *y = &r->out[0];
    const kb_tensor *z = r->n_in > KN_QL_Z && r->in[KN_QL_Z].data ? &r->in[KN_QL_Z] : NULL;
    kc_qlayer q;
    memset(&q, 0, sizeof q);
    KN_TRY(kn_qepi_parse(n, &q.e));
    q.conv = strcmp(n->op_type, "QConv") == 0;
    q.x_dt = x->dtype, q.w_dt = w->dtype, q.y_dt = y->dtype;
    q.z_dt = z ? z->dtype : KILN_DTYPE_UNDEFINED;
    const uint8_t *dev = qi->dev;
    int64_t cout = qi->cout;
    q.s = (const float *)dev;
    q.b = (const int32_t *)(dev + 4 * (size_t)cout);
    q.c = (const float *)(dev + 8 * (size_t)cout);
    q.wz = (const int32_t *)(dev + 12 * (size_t)cout);
    const void *h;
    q.xz = (h = host_of(r->in, r->n_in, KN_QL_XZ)) ? (int32_t)hval(h, r->in[KN_QL_XZ].dtype, 0) : 0;
    q.ys = (h = host_of(r->in, r->n_in, KN_QL_YS)) ? (float)hval(h, KILN_DTYPE_FLOAT, 0) : 1.f;
    q.yz = (h = host_of(r->in, r->n_in, KN_QL_YZ)) ? (float)hval(h, r->in[KN_QL_YZ].dtype, 0) : 0.f;
    q.zs = (h = host_of(r->in, r->n_in, KN_QL_ZS)) ? (float)hval(h, KILN_DTYPE_FLOAT, 0) : 1.f;
    q.zz = (h = host_of(r->in, r->n_in, KN_QL_ZZ)) ? (float)hval(h, r->in[KN_QL_ZZ].dtype, 0) : 0.f;
    double lo = 0, hi = 0;
    if (q.y_dt == KILN_DTYPE_UINT8 || q.y_dt == KILN_DTYPE_INT8)
        kn_q_range((int)q.y_dt, &lo, &hi);
    q.lo = (float)lo, q.hi = (float)hi;
    if (q.conv) {
        q.cl = kn_attr_int(n, "channels_last", 0) != 0;
        int nsp = x->rank - 2;
        int64_t xs[KN_WIN_MAX];
        for (int d = 0; d < nsp; d++)
            xs[d] = q.cl ? x->dims[1 + d] : x->dims[2 + d];
        kn_window win;
        KN_TRY(kn_window_forward(n, nsp, xs, w->dims + 2, false, &win));
        int o = nsp == 2 ? 0 : -1; /* 1-D: H = 1 */
        q.batch = x->dims[0];
        q.cin = q.cl ? x->dims[x->rank - 1] : x->dims[1];
        q.cout = w->dims[0];
        q.group = kn_attr_int(n, "group", 1);
        q.ih = o == 0 ? win.in[0] : 1, q.iw = win.in[nsp - 1];
        q.oh = o == 0 ? win.out[0] : 1, q.ow = win.out[nsp - 1];
        q.kh = o == 0 ? win.kernel[0] : 1, q.kw = win.kernel[nsp - 1];
        q.sh = o == 0 ? win.stride[0] : 1, q.sw = win.stride[nsp - 1];
        q.dh = o == 0 ? win.dil[0] : 1, q.dw = win.dil[nsp - 1];
        q.ph = o == 0 ? win.pad0[0] : 0, q.pw = win.pad0[nsp - 1];
        if (q.group < 1 || q.cin != w->dims[1] * q.group || q.cout % q.group)
            return kn_node_error(n, KILN_ERR_SHAPE, "channels do not fit the group count");
    } else {
        q.tb = kn_attr_int(n, "trans_b", 0) != 0;
        q.m = x->dims[x->rank - 2];
        q.k = x->dims[x->rank - 1];
        q.n = w->dims[w->rank - (q.tb ? 2 : 1)];
        q.batch = kn_numel(x->rank - 2, x->dims);
        q.wb = w->rank > 2 && kn_numel(w->rank - 2, w->dims) > 1;
        if (q.wb && kn_numel(w->rank - 2, w->dims) != q.batch)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "W must be 2-D or have X's batch dims");
    }
    KC_CUDA(n, kc_qlayer_run(x->data, w->data, z ? z->data : NULL, y->data, &q, kc_stream(r)));
    return KILN_OK;
}

const kb_kernel kb_cuda_int8[] = {
    {"QConv", KN_DOMAIN_KILN, "cuda", supports, NULL, NULL, prepare, release, run},
    {"QMatMul", KN_DOMAIN_KILN, "cuda", supports, NULL, NULL, prepare, release, run},
};
const size_t kb_cuda_int8_count = KN_ARRAY_LEN(kb_cuda_int8);
