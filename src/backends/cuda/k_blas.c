/* k_blas.c - MatMul, Gemm, kiln::MatMul and kiln::Gemm on the CUDA backend
 * through cuBLASLt: float32 (CUBLAS_COMPUTE_32F, no TF32), float16 and
 * bfloat16 (float accumulation). Row-major Y = A B is computed as the
 * column-major Y^T = B^T A^T, so no operand is ever copied; batched products
 * use strided batches (stride 0 for a broadcast operand) and a batch that
 * only A has is folded into M. Bias and ReLU ride cuBLASLt's epilogue, and
 * GELU where its tanh form is allowed (gelu_epilogue); other activations
 * run as one extra pass (kc_epilogue).
 *
 * Tactics: "lt" takes cuBLASLt's first heuristic, "lt2" .. "lt8" the next
 * ones, so the builder can time them. "lth" .. "lth8" are the same with
 * float16 accumulation (CUBLAS_COMPUTE_16F), offered only for float16
 * layers that carry allow_fp16_accum = 1 (KILN_BUILDER_FLAG_FP16_ACCUMULATION);
 * the builder keeps one only when it times faster. prepare() asks the heuristic twice: once for the
 * alignment of the pointers it was shown (256 bytes when it saw none) and
 * once for 16 bytes; run() uses the second when a pointer is less aligned. */
#include <string.h>

#include "backends/cpu/act.h"
#include "elementwise.cuh"
#include "graph/fused.h"
#include "kc_common.h"
#include "tensor.cuh"

typedef struct mm_geom {
    int64_t m, n, k, batch;
    int64_t stride_a, stride_b; /* elements between batches, 0 = broadcast */
    bool ta, tb;
} mm_geom;

typedef struct kc_gemm lt_inst;
struct kc_gemm {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo[2]; /* [0] for the aligned case, [1] for 16-byte alignment */
    size_t ws[2];
    unsigned align;               /* what algo[0] assumes */
    mm_geom g;
    cudaDataType_t dt;
    int bias_input;               /* input index of a per-column bias for the epilogue, or -1 */
    int c_input;                  /* Gemm: input index of C copied into Y first, or -1 */
    int z_input;                  /* kiln::MatMul: the residual Z, cuBLASLt's C (beta 1), or -1 */
    float alpha, beta;
    uint16_t alpha_h, beta_h;     /* the same as float16, for half_acc */
    bool half_acc;                /* float16 accumulation (an "lth" tactic) */
    kb_act act;
    float act_a, act_b;
    bool act_pass;                /* the activation runs after the product */
};

static bool lt_type(kiln_dtype t, cudaDataType_t *out) {
    switch (t) {
    case KILN_DTYPE_FLOAT: *out = CUDA_R_32F; return true;
    case KILN_DTYPE_FLOAT16: *out = CUDA_R_16F; return true;
    case KILN_DTYPE_BFLOAT16: *out = CUDA_R_16BF; return true;
    default: return false;
    }
}

static bool is_fused(const kn_node *n) { return strcmp(n->domain ? n->domain : "", KN_DOMAIN_KILN) == 0; }
static bool is_gemm(const kn_node *n) { return strcmp(n->op_type, "Gemm") == 0; }

/* Geometry of a MatMul with numpy broadcasting; false when the batch
 * broadcast is not one strided batch. */
static bool matmul_geom(const int arank, const int64_t *ad, const int brank, const int64_t *bd,
                        const int yrank, const int64_t *yd, mm_geom *g) {
    if (arank < 1 || brank < 1)
        return false;
    memset(g, 0, sizeof *g);
    g->m = arank == 1 ? 1 : ad[arank - 2];
    g->k = ad[arank - 1];
    g->n = brank == 1 ? 1 : bd[brank - 1];
    int64_t kb = brank == 1 ? bd[0] : bd[brank - 2];
    if (kb != g->k)
        return false;
    int abr = arank > 2 ? arank - 2 : 0, bbr = brank > 2 ? brank - 2 : 0;
    int br = yrank - (arank == 1 ? 0 : 1) - (brank == 1 ? 0 : 1);
    if (br < 0)
        return false;
    int64_t yb = kn_numel(br, yd), ab = kn_numel(abr, ad), bb = kn_numel(bbr, bd);
    if (bb == 1 && (ab == yb || ab == 1)) { /* B shared: fold A's batch into M */
        g->m *= ab;
        g->batch = 1;
        return true;
    }
    if ((ab != yb && ab != 1) || bb != yb)
        return false;
    g->batch = yb;
    g->stride_a = ab == 1 ? 0 : g->m * g->k;
    g->stride_b = g->n * g->k;
    return true;
}

static bool gemm_geom(const kn_node *node, const kb_tensor *a, const kb_tensor *b, mm_geom *g) {
    memset(g, 0, sizeof *g);
    if (a->rank != 2 || b->rank != 2)
        return false;
    g->ta = kn_attr_int(node, "transA", 0) != 0;
    g->tb = kn_attr_int(node, "transB", 0) != 0;
    g->m = g->ta ? a->dims[1] : a->dims[0];
    g->k = g->ta ? a->dims[0] : a->dims[1];
    g->n = g->tb ? b->dims[0] : b->dims[1];
    g->batch = 1;
    return (g->tb ? b->dims[1] : b->dims[0]) == g->k;
}

/* The activation of a fused node and its parameters (defaults as the CPU's read_act). */
static bool node_act(const kn_node *node, kb_act *act, float *a, float *b) {
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
    bool gemm = is_gemm(node);
    *a = kn_attr_float(node, gemm ? "alpha_act" : "alpha", da);
    *b = kn_attr_float(node, gemm ? "beta_act" : "beta", db);
    return true;
}

/* Whether bias t is one value per output column (shape [N] or [1, N]). */
static bool per_column(int rank, const int64_t *dims, int64_t n) {
    return rank >= 1 && dims[rank - 1] == n && kn_numel(rank, dims) == n;
}

static bool blas_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    cudaDataType_t dt;
    if (n_in < 2 || n_out < 1 || !lt_type(in[0].dtype, &dt) || in[1].dtype != in[0].dtype ||
        out[0].dtype != in[0].dtype)
        return false;
    mm_geom g;
    if (is_gemm(node)) {
        kb_tensor a = {0}, b = {0};
        a.rank = in[0].rank;
        b.rank = in[1].rank;
        memcpy(a.dims, in[0].dims, sizeof a.dims);
        memcpy(b.dims, in[1].dims, sizeof b.dims);
        if (!gemm_geom(node, &a, &b, &g))
            return false;
        if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED &&
            (in[2].dtype != in[0].dtype || in[2].rank > 2))
            return false;
    } else {
        if (!matmul_geom(in[0].rank, in[0].dims, in[1].rank, in[1].dims, out[0].rank, out[0].dims, &g))
            return false;
        if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED &&
            (in[2].dtype != in[0].dtype || !per_column(in[2].rank, in[2].dims, g.n)))
            return false;
        if (n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED && /* residual Z: Y's shape */
            (in[3].dtype != out[0].dtype || in[3].rank != out[0].rank ||
             memcmp(in[3].dims, out[0].dims, sizeof(int64_t) * (size_t)out[0].rank) != 0))
            return false;
    }
    if (g.k < 1 || g.m < 1 || g.n < 1)
        return false; /* empty products: the CPU kernel has them */
    if (is_fused(node)) {
        kb_act act;
        float a, b;
        return node_act(node, &act, &a, &b);
    }
    return true;
}

/* Whether the builder allowed float16 accumulation for a layer whose A is
 * of type a: float16 layers carrying allow_fp16_accum = 1. */
static bool half_allowed(const kn_node *node, kiln_dtype a) {
    return a == KILN_DTYPE_FLOAT16 && kn_attr_int(node, "allow_fp16_accum", 0);
}

/* The "lth" tactics take only the layers half_allowed() admits. */
static bool half_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    return n_in >= 1 && half_allowed(node, in[0].dtype) && blas_supports(node, in, n_in, out, n_out);
}

static void lt_release(void *p) {
    lt_inst *s = p;
    if (!s)
        return;
    if (s->op)
        cublasLtMatmulDescDestroy(s->op);
    if (s->la)
        cublasLtMatrixLayoutDestroy(s->la);
    if (s->lb)
        cublasLtMatrixLayoutDestroy(s->lb);
    if (s->ld)
        cublasLtMatrixLayoutDestroy(s->ld);
    kn_free(s);
}

static unsigned ptr_align(const void *p) {
    uintptr_t v = (uintptr_t)p;
    unsigned a = 256;
    while (a > 1 && (v % a) != 0)
        a >>= 1;
    return a;
}

static kiln_status layout(const kn_node *node, cublasLtMatrixLayout_t *l, cudaDataType_t dt,
                          int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    KC_CUBLAS(node, cublasLtMatrixLayoutCreate(l, dt, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t bc = (int32_t)batch;
        KC_CUBLAS(node, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                         &bc, sizeof bc));
        KC_CUBLAS(node, cublasLtMatrixLayoutSetAttribute(
                            *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return KILN_OK;
}

/* Tactics lt, lt2, ... lt<LT_TACTICS>: cuBLASLt's heuristic results in
 * order. cuBLASLt 13 returns eight for BERT-base's GEMMs, and the fastest
 * (a 128x128 tile for the QKV and FFN1 shapes, 8-12% ahead of the first)
 * is often the seventh: the builder times them all. */
#define LT_TACTICS 8

/* The `index`-th heuristic for alignment `align`; *found false when none. */
static kiln_status heuristic(const kn_node *node, cublasLtHandle_t h, lt_inst *s, unsigned align,
                             int index, cublasLtMatmulAlgo_t *algo, size_t *ws, bool *found) {
    cublasLtMatmulPreference_t pref = NULL;
    KC_CUBLAS(node, cublasLtMatmulPreferenceCreate(&pref));
    size_t max_ws = (size_t)64 << 20;
    uint32_t al = align;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
         st == CUBLAS_STATUS_SUCCESS && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a,
                                                  &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res[LT_TACTICS];
    int n = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(h, s->op, s->la, s->lb, s->ld, s->ld, pref, LT_TACTICS,
                                            res, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    /* float16 accumulation is an extra: a combination cuBLASLt refuses
     * outright (an epilogue, say) counts as no algorithm, and the tactic
     * declines the layer */
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED && !s->half_acc)
        return kc_cublas_fail(node, st, "cublasLtMatmulAlgoGetHeuristic");
    /* fewer results than index + 1: the last one (a plan's tactic, chosen at
     * one shape of a profile, must run at every other) */
    if (st == CUBLAS_STATUS_SUCCESS && n > 0 && index >= n)
        index = n - 1;
    *found = st == CUBLAS_STATUS_SUCCESS && n > index && res[index].state == CUBLAS_STATUS_SUCCESS;
    if (*found) {
        *algo = res[index].algo;
        *ws = res[index].workspaceSize;
    }
    return KILN_OK;
}

static kiln_status lt_setup(const kn_node *node, lt_inst *s, const void *pa, const void *pb,
                            const void *py, const void *pbias, int index);

/* Whether GELU rides cuBLASLt's epilogue, which computes the tanh form
 * 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))): always for GeluTanh; for the
 * exact (erf) Gelu only on float16/bfloat16 outputs, where the two forms
 * differ by at most 4.7e-4 (at x = -2.7), the size of the output's own
 * rounding for |y| >= 0.5 (docs/accuracy.md). float32 keeps the exact form
 * as a separate pass. */
static bool gelu_epilogue(const lt_inst *s) {
    return s->act == KB_ACT_GELU_TANH || (s->act == KB_ACT_GELU && s->dt != CUDA_R_32F);
}

static kiln_status lt_build(const kn_node *node, const kb_tensor *in, int n_in,
                            const kb_tensor *out, int index, lt_inst *s) {
    if (!lt_type(in[0].dtype, &s->dt) || in[1].dtype != in[0].dtype || out[0].dtype != in[0].dtype)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "types %s x %s -> %s",
                             kiln_dtype_name(in[0].dtype), kiln_dtype_name(in[1].dtype),
                             kiln_dtype_name(out[0].dtype));
    bool gemm = is_gemm(node), fused = is_fused(node);
    bool ok = gemm ? gemm_geom(node, &in[0], &in[1], &s->g)
                   : matmul_geom(in[0].rank, in[0].dims, in[1].rank, in[1].dims, out[0].rank,
                                 out[0].dims, &s->g);
    if (!ok)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "shapes do not form one strided batched product");
    s->alpha = gemm ? kn_attr_float(node, "alpha", 1.f) : 1.f;
    s->beta = 0.f; /* 1 with a residual (below) */
    s->bias_input = s->c_input = s->z_input = -1;
    s->act = KB_ACT_NONE;
    if (fused && !gemm && n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED) {
        const kb_tensor *z = &in[3];
        if (z->dtype != out[0].dtype || kc_numel(z) != kc_numel(&out[0]))
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "the residual Z must have Y's shape and type");
        s->z_input = 3;
        s->beta = 1.f;
    }
    if (fused && !node_act(node, &s->act, &s->act_a, &s->act_b))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "unknown activation '%s'",
                             kn_attr_string(node, "activation", ""));
    if (kc_present(in, n_in, 2) || (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED)) {
        const kb_tensor *c = &in[2];
        float beta = gemm ? kn_attr_float(node, "beta", 1.f) : 1.f;
        if (c->dtype != in[0].dtype)
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "bias type differs");
        if (beta != 0.f) {
            if (beta == 1.f && per_column(c->rank, c->dims, s->g.n))
                s->bias_input = 2;
            else if (gemm) {
                s->c_input = 2;
                s->beta = beta;
            } else
                return kn_node_error(node, KILN_ERR_UNSUPPORTED, "bias is not one value per column");
        }
    }
    s->act_pass = s->act != KB_ACT_NONE && s->act != KB_ACT_RELU && !gelu_epilogue(s);
    return lt_setup(node, s, in[0].data, in[1].data, out[0].data,
                    s->bias_input >= 0 ? in[2].data : NULL, index);
}

/* Descriptors and algorithms for s->g, s->dt, s->bias_input and s->act;
 * the pointers (any may be NULL) only hint at their alignment. */
static kiln_status lt_setup(const kn_node *node, lt_inst *s, const void *pa, const void *pb,
                            const void *py, const void *pbias, int index) {
    const mm_geom *g = &s->g;
    cublasLtHandle_t h;
    KN_TRY(kc_cublaslt_handle(node, &h));
    /* float32 runs on TF32 tensor cores only when the builder allowed it */
    cublasComputeType_t ct = s->dt == CUDA_R_32F && kn_attr_int(node, "allow_tf32", 0)
                                 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                 : CUBLAS_COMPUTE_32F;
    /* float16 accumulation: alpha and beta are float16 too */
    if (s->half_acc)
        ct = CUBLAS_COMPUTE_16F;
    s->alpha_h = kn_float_to_half(s->alpha);
    s->beta_h = kn_float_to_half(s->beta);
    KC_CUBLAS(node, cublasLtMatmulDescCreate(&s->op, ct, s->half_acc ? CUDA_R_16F : CUDA_R_32F));
    /* first operand: B's memory (N x K column-major, or K x N when transB) */
    cublasOperation_t opa = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    KC_CUBLAS(node, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    KC_CUBLAS(node, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    bool relu = s->act == KB_ACT_RELU, gelu = gelu_epilogue(s);
    if (s->bias_input >= 0)
        epi = relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                   : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (relu)
        epi = CUBLASLT_EPILOGUE_RELU;
    else if (gelu)
        epi = CUBLASLT_EPILOGUE_GELU;
    KC_CUBLAS(node, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->tb)
        KN_TRY(layout(node, &s->la, s->dt, g->k, g->n, g->k, g->batch, g->stride_b));
    else
        KN_TRY(layout(node, &s->la, s->dt, g->n, g->k, g->n, g->batch, g->stride_b));
    if (g->ta)
        KN_TRY(layout(node, &s->lb, s->dt, g->m, g->k, g->m, g->batch, g->stride_a));
    else
        KN_TRY(layout(node, &s->lb, s->dt, g->k, g->m, g->k, g->batch, g->stride_a));
    KN_TRY(layout(node, &s->ld, s->dt, g->n, g->m, g->n, g->batch, g->m * g->n));

    unsigned align = 256;
    if (pa && pb && py) {
        unsigned a0 = ptr_align(pa), a1 = ptr_align(pb), a2 = ptr_align(py);
        align = a0 < a1 ? a0 : a1;
        align = align < a2 ? align : a2;
        if (pbias && ptr_align(pbias) < align)
            align = ptr_align(pbias);
        if (align < 16)
            align = 16;
    }
    bool found0 = false, found1 = false;
    KN_TRY(heuristic(node, h, s, align, index, &s->algo[0], &s->ws[0], &found0));
    KN_TRY(heuristic(node, h, s, 16, index, &s->algo[1], &s->ws[1], &found1));
    if (!found0 && found1) {
        s->algo[0] = s->algo[1];
        s->ws[0] = s->ws[1];
        align = 16;
        found0 = true;
    }
    if (!found0)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "cuBLASLt has no algorithm number %d for "
                             "M=%lld N=%lld K=%lld batch=%lld",
                             index + 1, (long long)g->m, (long long)g->n,
                             (long long)g->k, (long long)g->batch);
    if (!found1) {
        s->algo[1] = s->algo[0];
        s->ws[1] = s->ws[0];
    }
    s->align = align;
    return KILN_OK;
}

/* index 0 .. LT_TACTICS - 1: float accumulation; LT_TACTICS and up: the
 * same heuristic indices with float16 accumulation */
static kiln_status lt_prepare_n(const kn_node *node, const kb_tensor *in, int n_in,
                                const kb_tensor *out, void **inst, size_t *workspace, int index) {
    lt_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    s->half_acc = index >= LT_TACTICS;
    kiln_status st = s->half_acc && !half_allowed(node, in[0].dtype)
                         ? kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                         "float16 accumulation needs a float16 layer that allows it")
                         : lt_build(node, in, n_in, out, index % LT_TACTICS, s);
    if (st != KILN_OK) {
        lt_release(s);
        return st;
    }
    *inst = s;
    *workspace = s->ws[0] > s->ws[1] ? s->ws[0] : s->ws[1];
    return KILN_OK;
}

/* One prepare per heuristic index (kb_kernel has no tactic parameter). */
#define LT_PREPARE(i)                                                                          \
    static kiln_status lt_prepare##i(const void *state, const kn_node *node, const kb_tensor *in, \
                                     int n_in, const kb_tensor *out, int n_out, void **inst,     \
                                     size_t *workspace) {                                        \
        return lt_prepare_n(node, in, n_in, out, inst, workspace, i);                            \
    }
LT_PREPARE(0)
LT_PREPARE(1)
LT_PREPARE(2)
LT_PREPARE(3)
LT_PREPARE(4)
LT_PREPARE(5)
LT_PREPARE(6)
LT_PREPARE(7)
LT_PREPARE(8)
LT_PREPARE(9)
LT_PREPARE(10)
LT_PREPARE(11)
LT_PREPARE(12)
LT_PREPARE(13)
LT_PREPARE(14)
LT_PREPARE(15)

/* Gemm's C broadcast into Y (unidirectional to [M, N]). */
static kiln_status copy_c(const kb_run *r, const kb_tensor *c, kb_tensor *y) {
    kc_copy cp;
    memset(&cp, 0, sizeof cp);
    cp.rank = 2;
    cp.dims[0] = y->dims[0];
    cp.dims[1] = y->dims[1];
    cp.dst_stride[0] = y->dims[1];
    cp.dst_stride[1] = 1;
    int64_t cr = c->rank >= 2 ? c->dims[c->rank - 2] : 1, cc = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
    cp.src_stride[0] = cr == 1 ? 0 : cc;
    cp.src_stride[1] = cc == 1 ? 0 : 1;
    KC_CUDA(r->node, kc_strided_copy(y->data, c->data, kiln_dtype_size(y->dtype), &cp, kc_stream(r)));
    return KILN_OK;
}

/* y = a @ b (+ bias, ReLU as set up) on the stream, with the algorithm
 * that fits the pointers' alignment. */
static kiln_status lt_matmul(const kn_node *node, const lt_inst *s, const void *a, const void *b,
                             void *y, const void *bias, const void *c, void *ws, size_t wsz,
                             cudaStream_t stream) {
    cublasLtHandle_t h;
    KN_TRY(kc_cublaslt_handle(node, &h));
    unsigned al = ptr_align(a), a1 = ptr_align(b), a2 = ptr_align(y);
    al = al < a1 ? al : a1;
    al = al < a2 ? al : a2;
    if (bias && ptr_align(bias) < al)
        al = ptr_align(bias);
    if (c && ptr_align(c) < al)
        al = ptr_align(c);
    if (al < 16)
        return kn_node_error(node, KILN_ERR_RUNTIME, "operands must be 16-byte aligned");
    int pick = al >= s->align ? 0 : 1;
    if (wsz < s->ws[pick])
        return kn_node_error(node, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)", wsz,
                             s->ws[pick]);
    if (bias)
        KC_CUBLAS(node, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof bias));
    /* Y^T = B^T A^T: the first operand is B's memory */
    const void *alpha = s->half_acc ? (const void *)&s->alpha_h : (const void *)&s->alpha;
    const void *beta = s->half_acc ? (const void *)&s->beta_h : (const void *)&s->beta;
    KC_CUBLAS(node, cublasLtMatmul(h, s->op, alpha, b, s->la, a, s->lb, beta, c ? c : y,
                                   s->ld, y, s->ld, &s->algo[pick], ws, s->ws[pick], stream));
    return KILN_OK;
}

kiln_status kc_gemm_create_spec(const kn_node *node, const kc_gemm_spec *p, kc_gemm **out,
                                size_t *workspace) {
    lt_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    if (!lt_type(p->dt, &s->dt) || p->m < 1 || p->n < 1 || p->k < 1 || p->batch < 1)
        st = kn_node_error(node, KILN_ERR_UNSUPPORTED, "GEMM of %s, M=%lld N=%lld K=%lld",
                           kiln_dtype_name(p->dt), (long long)p->m, (long long)p->n,
                           (long long)p->k);
    if (st == KILN_OK) {
        s->g.m = p->m;
        s->g.n = p->n;
        s->g.k = p->k;
        s->g.batch = p->batch;
        s->g.stride_a = p->stride_a;
        s->g.stride_b = p->stride_b;
        s->g.tb = p->tb;
        s->alpha = 1.f;
        s->beta = p->add_c ? 1.f : 0.f;
        s->bias_input = p->bias ? 0 : -1; /* only "present" matters here */
        s->c_input = -1;
        s->act = p->relu ? KB_ACT_RELU : KB_ACT_NONE;
        st = lt_setup(node, s, p->a, p->b, p->y, p->bias_ptr, p->index);
    }
    if (st != KILN_OK) {
        lt_release(s);
        return st;
    }
    *out = s;
    *workspace = s->ws[0] > s->ws[1] ? s->ws[0] : s->ws[1];
    return KILN_OK;
}

kiln_status kc_gemm_create(const kn_node *node, kiln_dtype dt, int64_t m, int64_t n, int64_t k,
                           int64_t batch, int64_t stride_a, int64_t stride_b, const void *a,
                           const void *b, const void *y, kc_gemm **out, size_t *workspace) {
    kc_gemm_spec p = {.dt = dt, .m = m, .n = n, .k = k, .batch = batch, .stride_a = stride_a,
                      .stride_b = stride_b, .a = a, .b = b, .y = y};
    return kc_gemm_create_spec(node, &p, out, workspace);
}

kiln_status kc_gemm_run(const kn_node *node, const kc_gemm *g, const void *a, const void *b,
                        void *y, void *ws, size_t wsz, cudaStream_t stream) {
    return lt_matmul(node, g, a, b, y, NULL, NULL, ws, wsz, stream);
}

kiln_status kc_gemm_run_ex(const kn_node *node, const kc_gemm *g, const void *a, const void *b,
                           void *y, const void *bias, const void *c, void *ws, size_t wsz,
                           cudaStream_t stream) {
    if ((g->bias_input >= 0) != (bias != NULL) || (g->beta != 0.f) != (c != NULL))
        return kn_node_error(node, KILN_ERR_INTERNAL, "GEMM bias/residual differ from its setup");
    return lt_matmul(node, g, a, b, y, bias, c, ws, wsz, stream);
}

void kc_gemm_destroy(kc_gemm *g) { lt_release(g); }

static kiln_status lt_run(const kb_run *r) {
    lt_inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    kb_tensor *y = &r->out[0];
    const void *bias = s->bias_input >= 0 ? r->in[s->bias_input].data : NULL;
    if (s->c_input >= 0)
        KN_TRY(copy_c(r, &r->in[s->c_input], y));
    if (kc_numel(y) == 0)
        return KILN_OK;
    const void *z = s->z_input >= 0 ? r->in[s->z_input].data : NULL;
    KN_TRY(lt_matmul(r->node, s, r->in[0].data, r->in[1].data, y->data, bias, z, r->workspace,
                     r->workspace_size, kc_stream(r)));
    if (s->act_pass)
        KC_CUDA(r->node, kc_epilogue(y->data, y->dtype, kc_numel(y), NULL, 1, 1, NULL, (int)s->act,
                                     s->act_a, s->act_b, kc_stream(r)));
    return KILN_OK;
}

/* Registered from the last float16-accumulation heuristic to cuBLASLt's
 * first: a build that times nothing takes the tactic registered last, "lt"
 * (the heuristic's best, float accumulation). */
#define K_LT(op, dom) \
    {op, dom, "lth8", half_supports, NULL, NULL, lt_prepare15, lt_release, lt_run}, \
    {op, dom, "lth7", half_supports, NULL, NULL, lt_prepare14, lt_release, lt_run}, \
    {op, dom, "lth6", half_supports, NULL, NULL, lt_prepare13, lt_release, lt_run}, \
    {op, dom, "lth5", half_supports, NULL, NULL, lt_prepare12, lt_release, lt_run}, \
    {op, dom, "lth4", half_supports, NULL, NULL, lt_prepare11, lt_release, lt_run}, \
    {op, dom, "lth3", half_supports, NULL, NULL, lt_prepare10, lt_release, lt_run}, \
    {op, dom, "lth2", half_supports, NULL, NULL, lt_prepare9, lt_release, lt_run}, \
    {op, dom, "lth", half_supports, NULL, NULL, lt_prepare8, lt_release, lt_run}, \
    {op, dom, "lt8", blas_supports, NULL, NULL, lt_prepare7, lt_release, lt_run}, \
    {op, dom, "lt7", blas_supports, NULL, NULL, lt_prepare6, lt_release, lt_run}, \
    {op, dom, "lt6", blas_supports, NULL, NULL, lt_prepare5, lt_release, lt_run}, \
    {op, dom, "lt5", blas_supports, NULL, NULL, lt_prepare4, lt_release, lt_run}, \
    {op, dom, "lt4", blas_supports, NULL, NULL, lt_prepare3, lt_release, lt_run}, \
    {op, dom, "lt3", blas_supports, NULL, NULL, lt_prepare2, lt_release, lt_run}, \
    {op, dom, "lt2", blas_supports, NULL, NULL, lt_prepare1, lt_release, lt_run}, \
    {op, dom, "lt", blas_supports, NULL, NULL, lt_prepare0, lt_release, lt_run}

const kb_kernel kb_cuda_blas[] = {
    K_LT("MatMul", ""),
    K_LT("Gemm", ""),
    K_LT("MatMul", KN_DOMAIN_KILN),
    K_LT("Gemm", KN_DOMAIN_KILN),
};
const size_t kb_cuda_blas_count = KN_ARRAY_LEN(kb_cuda_blas);
