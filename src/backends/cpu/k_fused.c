/* k_fused.c - reference CPU kernels of kiln's fused ops (graph/fused.h): the
 * base op's reference followed by the epilogue (bias, residual, activation). */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_vec.h"
#include "graph/fused.h"
#include "k_nn.h"

static bool present(const kb_run *r, int i) { return i < r->n_in && r->in[i].data; }

/* The activation named by the node, with its parameters (attribute names
 * differ per op); defaults follow the ONNX op of the same name. */
static kiln_status read_act(const kn_node *node, const char *alpha_name, const char *beta_name,
                            kb_epilogue *ep) {
    const char *name = kn_attr_string(node, "activation", "");
    ep->act = kb_act_parse(name);
    if (ep->act == KB_ACT_INVALID)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "unknown activation '%s'", name);
    float da = 0.f, db = 0.f;
    switch (ep->act) {
    case KB_ACT_LEAKY_RELU: da = 0.01f; break;
    case KB_ACT_CLIP: da = -INFINITY, db = INFINITY; break;
    case KB_ACT_HARD_SIGMOID: da = 0.2f, db = 0.5f; break;
    case KB_ACT_ELU: case KB_ACT_SWISH: da = 1.f; break;
    default: break;
    }
    ep->alpha = kn_attr_float(node, alpha_name, da);
    ep->beta = kn_attr_float(node, beta_name, db);
    return KILN_OK;
}

static bool sup_fused(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                      int n_out) {
    if (n_in > KB_STAGE_MAX)
        return false;
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && !kb_is_real(in[i].dtype))
            return false;
    return kb_act_parse(kn_attr_string(node, "activation", "")) != KB_ACT_INVALID;
}

/* Other real types run through float copies (k_nn_stage.c) that follow the
 * kernel's own workspace (own bytes, 64-aligned). */
static kiln_status stage(const kb_run *r, size_t own, kb_staged *st) {
    if (!kb_stage_types_ok(r->in, r->n_in, &r->out[0]))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "%s inputs are not supported",
                             kiln_dtype_name(r->in[0].dtype));
    if (r->workspace_size < own + kb_stage_bytes(r->in, r->n_in, &r->out[0]))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    /* no workspace at all when nothing needs staging: no offset from NULL */
    uint8_t *base = r->workspace ? (uint8_t *)r->workspace + own : NULL;
    kb_stage_in(r->in, r->n_in, &r->out[0], base, st);
    return KILN_OK;
}

static kiln_status stage_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                 int n_in, const kb_tensor *out, int n_out, void **inst,
                                 size_t *workspace) {
    *workspace = kb_stage_bytes(in, n_in, &out[0]);
    return KILN_OK;
}

static kiln_status fused_conv_run(const kb_run *r) {
    const kb_conv *cv = r->inst; /* from kb_nn_conv_prepare */
    if (!cv)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    size_t own = (kb_conv_workspace(cv) + 63u) & ~(size_t)63u; /* as kb_nn_conv_prepare */
    kb_staged st;
    KN_TRY(stage(r, own, &st));
    kb_epilogue ep = {0};
    KN_TRY(read_act(r->node, "alpha", "beta", &ep));
    ep.bias = present(r, 2) ? st.in[2].data : NULL;
    ep.residual = present(r, 3) ? st.in[3].data : NULL;
    kb_conv_forward(cv, st.in[0].data, st.in[1].data, st.out.data, &ep, r->workspace,
                    r->threads);
    kb_stage_out(&st, &r->out[0]);
    return KILN_OK;
}

static kiln_status fused_gemm_run(const kb_run *r) {
    kb_staged st;
    KN_TRY(stage(r, 0, &st));
    kb_epilogue ep = {0};
    KN_TRY(read_act(r->node, "alpha_act", "beta_act", &ep));
    kb_tensor *y = &st.out;
    kb_gemm_f32(r->node, &st.in[0], &st.in[1], present(r, 2) ? &st.in[2] : NULL, y, r->threads);
    kb_act_apply_n(ep.act, y->data, (size_t)kb_numel(y), ep.alpha, ep.beta);
    kb_stage_out(&st, &r->out[0]);
    return KILN_OK;
}

/* Offset in t (broadcast to y's shape) of y's element i. */
static int64_t bcast_offset(const kb_tensor *t, const kb_tensor *y, int64_t i) {
    int64_t off = 0, mul = 1;
    for (int d = 1; d <= t->rank; d++) {
        int64_t yd = y->dims[y->rank - d], td = t->dims[t->rank - d];
        int64_t c = i % yd;
        i /= yd;
        if (td != 1)
            off += c * mul;
        mul *= td;
    }
    return off;
}

typedef struct matmul_epilogue_rows_ctx {
    float *Y;
    const float *B;
    int64_t n;
    kb_epilogue ep;
} matmul_epilogue_rows_ctx;

static void matmul_epilogue_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const matmul_epilogue_rows_ctx *c_ = vc;
    float *Y = c_->Y;
    const float *B = c_->B;
    int64_t n = c_->n;
    kb_epilogue ep = c_->ep;
    (void)tid;
    for (int64_t i = lo_; i < hi_; i++)
        for (int64_t j = 0; j < n; j++)
            Y[i * n + j] = kb_act_apply(ep.act, Y[i * n + j] + (B ? B[j] : 0.f), ep.alpha,
                                        ep.beta);
}

static kiln_status fused_matmul_run(const kb_run *r) {
    kb_staged st;
    KN_TRY(stage(r, 0, &st));
    kb_epilogue ep = {0};
    KN_TRY(read_act(r->node, "alpha", "beta", &ep));
    kb_tensor *y = &st.out;
    kb_matmul_f32(&st.in[0], &st.in[1], y, r->threads);
    const kb_tensor *bias = present(r, 2) ? &st.in[2] : NULL;
    int64_t total = kb_numel(y), n = y->rank ? y->dims[y->rank - 1] : 1;
    float *Y = y->data;
    const float *B = bias ? bias->data : NULL;
    if (present(r, 3)) { /* the residual Z (Y's shape) joins before the activation */
        const float *Z = st.in[3].data;
        for (int64_t i = 0; i < total; i++)
            Y[i] += Z[i];
    }
    if (!bias || (bias->rank == 1 && bias->dims[0] == n)) { /* per column: the common case */
        int64_t rows = n ? total / n : 0;
        int nth = r->threads > 1 && total > 16384 ? r->threads : 1;
        {
            matmul_epilogue_rows_ctx c_ = {Y, B, n, ep};
            kn_parallel_for(nth, rows, 0, matmul_epilogue_rows, &c_);
        }
    } else {
        for (int64_t i = 0; i < total; i++)
            Y[i] = kb_act_apply(ep.act, Y[i] + B[bcast_offset(bias, y, i)], ep.alpha, ep.beta);
    }
    kb_stage_out(&st, &r->out[0]);
    return KILN_OK;
}

/* kiln::Attention (graph/fused.h), in float through staged copies. Jobs
 * of (batch, head, block of up to KB_ATT_ROWS query rows) run in parallel;
 * each is two strided GEMMs on the [B, S, H, D] tensors as they lie
 * (scores = scale * Q K^T, then P V) around a max-subtracted softmax in a
 * per-thread score block. `gemm` is kb_sgemm's signature (the reference) or
 * a library's. */
#define KB_ATT_ROWS 64

static int64_t att_threads(void) { return kb_cpu_default_threads(); }

/* The Q, K, V views of r's inputs (graph/fused.h). */
static kiln_status att_views(const kn_node *node, const kb_tensor *in, int n_in, kn_att_view v[3]) {
    int rank[3];
    int64_t dims[3][KILN_MAX_DIMS];
    memset(dims, 0, sizeof dims);
    for (int i = 0; i < 3; i++) {
        rank[i] = i < n_in && (in[i].data || in[i].dtype != KILN_DTYPE_UNDEFINED) ? in[i].rank : -1;
        if (rank[i] >= 0)
            memcpy(dims[i], in[i].dims, sizeof dims[i]);
    }
    return kn_attention_views(node, n_in < 3 ? n_in : 3, rank,
                              (const int64_t (*)[KILN_MAX_DIMS])dims, v);
}

size_t kb_attention_workspace(const kn_node *node, const kb_tensor *in, int n_in,
                              const kb_tensor *out) {
    kn_att_view v[3];
    int64_t sk = in[0].dims[1] > 0 ? in[0].dims[1] : 1; /* self-attention: Sq */
    if (att_views(node, in, n_in, v) == KILN_OK)
        sk = v[1].s > 0 ? v[1].s : 1;
    return ((kb_stage_bytes(in, n_in, &out[0]) + 63u) & ~(size_t)63u) +
           (size_t)sk * KB_ATT_ROWS * sizeof(float) * (size_t)att_threads();
}

typedef struct attention_jobs_ctx {
    kb_gemm_fn gemm;
    int64_t H;
    int64_t Hkv;
    int64_t D;
    int64_t Dv;
    int64_t Sq;
    int64_t Sk;
    int64_t blocks;
    kn_att_view q, k, v; /* element strides of Q, K, V (offsets applied to the pointers) */
    float scale;
    const float *Q;
    const float *K;
    const float *V;
    const float *M;
    const int64_t *ms;
    int64_t mb; /* mask batches: batch b reads mask batch b % mb */
    float *scratch;
    float *Y;
    bool causal;
    float softcap;
} attention_jobs_ctx;

/* row[j] += the mask's value at (b, h, query q, key j), j < Sk: the only
 * place that reads the mask (ms: its strides over [B, H, Sq, Sk]). */
static void att_mask_add(float *row, const float *M, const int64_t *ms, int64_t b, int64_t h,
                         int64_t q, int64_t Sk) {
    const float *mr = M + b * ms[0] + h * ms[1] + q * ms[2];
    for (int64_t j = 0; j < Sk; j++)
        row[j] += mr[j * ms[3]];
}

static void attention_jobs(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const attention_jobs_ctx *c_ = vc;
    kb_gemm_fn gemm = c_->gemm;
    int64_t H = c_->H;
    int64_t Hkv = c_->Hkv;
    int64_t D = c_->D;
    int64_t Dv = c_->Dv;
    int64_t Sq = c_->Sq;
    int64_t Sk = c_->Sk;
    int64_t blocks = c_->blocks;
    const kn_att_view *qv = &c_->q, *kv = &c_->k, *vv = &c_->v;
    float scale = c_->scale;
    const float *Q = c_->Q;
    const float *K = c_->K;
    const float *V = c_->V;
    const float *M = c_->M;
    const int64_t *ms = c_->ms;
    int64_t mb = c_->mb;
    float *scratch = c_->scratch;
    float *Y = c_->Y;
    bool causal = c_->causal;
    float softcap = c_->softcap;
    (void)tid;
    for (int64_t job = lo_; job < hi_; job++) {
        int64_t b = job / (H * blocks), h = job / blocks % H, i0 = job % blocks * KB_ATT_ROWS;
        int64_t hk = h / (H / Hkv); /* the K/V head of query head h */
        int64_t rows = Sq - i0 < KB_ATT_ROWS ? Sq - i0 : KB_ATT_ROWS;
        float *sc = scratch + (size_t)Sk * KB_ATT_ROWS * (size_t)tid;
        const float *qb = Q + b * qv->sb + i0 * qv->ss + h * qv->sh;
        gemm(false, true, rows, Sk, D, scale, qb, qv->ss, K + b * kv->sb + hk * kv->sh, kv->ss, 0.f,
             sc, Sk, 1);
        for (int64_t i = 0; i < rows; i++) {
            float *row = sc + i * Sk, mx = -INFINITY, sum = 0.f;
            if (softcap > 0.f) /* before the mask, as ONNX Attention's */
                for (int64_t j = 0; j < Sk; j++)
                    row[j] = softcap * tanhf(row[j] / softcap);
            if (M)
                att_mask_add(row, M, ms, b % mb, h, i0 + i, Sk);
            if (causal) /* keys after the query, aligned to the last key */
                for (int64_t j = i0 + i + 1 + Sk - Sq > 0 ? i0 + i + 1 + Sk - Sq : 0; j < Sk; j++)
                    row[j] = -INFINITY;
            mx = kv_max(row, (size_t)Sk);
            if (mx == -INFINITY) { /* every key masked: the row gives zeros */
                memset(row, 0, sizeof(float) * (size_t)Sk);
                continue;
            }
            sum = kv_exp_shift_sum(row, (size_t)Sk, mx);
            kv_scale(row, (size_t)Sk, 1.f / sum);
        }
        gemm(false, false, rows, Dv, Sk, 1.f, sc, Sk, V + b * vv->sb + hk * vv->sh, vv->ss, 0.f,
             Y + ((b * Sq + i0) * H + h) * Dv, H * Dv, 1);
    }
}

kiln_status kb_attention_run(const kb_run *r, kb_gemm_fn gemm) {
    size_t sbytes = (kb_stage_bytes(r->in, r->n_in, &r->out[0]) + 63u) & ~(size_t)63u;
    kb_staged st;
    KN_TRY(stage(r, 0, &st));
    const kb_tensor *m = present(r, 3) ? &st.in[3] : NULL;
    kn_att_view vw[3];
    KN_TRY(att_views(r->node, st.in, r->n_in, vw));
    const kb_tensor *kt = present(r, 1) ? &st.in[1] : &st.in[0];
    const kb_tensor *vt = present(r, 2) ? &st.in[2] : &st.in[0];
    int64_t B = vw[0].b, Sq = vw[0].s, H = vw[0].h, D = vw[0].d;
    int64_t Hkv = vw[1].h, Sk = vw[1].s, Dv = vw[2].d;
    const float *Q = (const float *)st.in[0].data + vw[0].off;
    const float *K = (const float *)kt->data + vw[1].off, *V = (const float *)vt->data + vw[2].off;
    float scale = kn_attr_float(r->node, "scale", 1.f);
    bool causal = kn_attr_int(r->node, "causal", 0) != 0;
    float softcap = kn_attr_float(r->node, "softcap", 0.f);
    int64_t ms[4] = {0, 0, 0, 0}; /* mask strides over [B, H, Sq, Sk], 0 where broadcast */
    int64_t mb = 1;               /* mask batches (mask_batch_mod: a divisor of B) */
    if (m) {
        kn_mask_strides(m->rank, m->dims, ms);
        mb = kn_mask_batches(m->rank, m->dims);
        if (B % mb != 0)
            return kn_node_error(r->node, KILN_ERR_SHAPE, "mask batch %lld does not divide %lld",
                                 (long long)mb, (long long)B);
    }
    int64_t blocks = (Sq + KB_ATT_ROWS - 1) / KB_ATT_ROWS, jobs = B * H * blocks;
    int nth = r->threads > 1 && B * H * Sq * Sk * (D + Dv) > 65536 ? r->threads : 1;
    if (nth > att_threads())
        nth = (int)att_threads();
    if (r->workspace_size < sbytes + (size_t)(Sk > 0 ? Sk : 1) * KB_ATT_ROWS * sizeof(float) * (size_t)nth)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    float *scratch = (float *)((uint8_t *)r->workspace + sbytes);
    const float *M = m ? m->data : NULL;
    float *Y = st.out.data;
    {
        attention_jobs_ctx c_ = {gemm, H, Hkv, D, Dv, Sq, Sk, blocks, vw[0], vw[1], vw[2], scale, Q, K, V, M, ms, mb, scratch, Y, causal, softcap};
        kn_parallel_for(nth, jobs, 1, attention_jobs, &c_);
    }
    kb_stage_out(&st, &r->out[0]);
    return KILN_OK;
}

static kiln_status attention_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                     int n_in, const kb_tensor *out, int n_out, void **inst,
                                     size_t *workspace) {
    *workspace = kb_attention_workspace(node, in, n_in, out);
    return KILN_OK;
}

static kiln_status attention_run(const kb_run *r) { return kb_attention_run(r, kb_sgemm); }

/* kiln::Conv, either layout: channels-last runs on reordered copies of X,
 * W, Z and Y (k_layout.c). */
static const kb_kernel fused_conv_cf = {"Conv", KN_DOMAIN_KILN, "ref", NULL, NULL, NULL,
                                        kb_nn_conv_prepare, kb_nn_conv_release, fused_conv_run};

static kiln_status conv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                int n_in, const kb_tensor *out, int n_out, void **inst,
                                size_t *workspace) {
    unsigned mask = kn_attr_int(node, "channels_last", 0) ? 0xBu : 0u; /* X, W, Z */
    return kb_cl_prepare(&fused_conv_cf, mask, node, in, n_in, out, n_out, inst, workspace);
}

/* kiln::MaxPool / kiln::AveragePool: channels-last pools. */
static const kb_kernel pool_cf = {"Pool", KN_DOMAIN_KILN, "ref", NULL, NULL, NULL,
                                  NULL, NULL, kb_nn_pool_run};

static bool sup_pool_cl(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    kiln_dtype t = n_in >= 1 ? in[0].dtype : KILN_DTYPE_UNDEFINED;
    bool q8 = strcmp(node->op_type, "MaxPool") == 0 && (t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8);
    return n_in >= 1 && (kb_is_real(t) || q8) && in[0].rank >= 3;
}

static kiln_status pool_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                int n_in, const kb_tensor *out, int n_out, void **inst,
                                size_t *workspace) {
    return kb_cl_prepare(&pool_cf, 0x1u, node, in, n_in, out, n_out, inst, workspace);
}

/* kiln::LayerNorm: real X, addends and parameters; integer Ids. */
static bool sup_layernorm(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    for (int i = 0; i < n_in; i++)
        if (i != 3 && in[i].dtype != KILN_DTYPE_UNDEFINED && !kb_is_real(in[i].dtype))
            return false;
    return (n_out == 1 || (n_out == 2 && (out[1].dtype == KILN_DTYPE_UNDEFINED ||
                                          out[1].dtype == in[0].dtype))) &&
           kb_is_real(out[0].dtype);
}

const kb_kernel kb_cpu_fused[] = {
    {"LayerNorm", KN_DOMAIN_KILN, "ref", sup_layernorm, NULL, NULL, NULL, NULL,
     kb_nn_layernorm_fused_run},
    {"Conv", KN_DOMAIN_KILN, "ref", sup_fused, NULL, NULL, conv_prepare, kb_cl_release, kb_cl_run},
    {"Attention", KN_DOMAIN_KILN, "ref", sup_fused, NULL, NULL, attention_prepare, NULL,
     attention_run},
    {"MaxPool", KN_DOMAIN_KILN, "ref", sup_pool_cl, NULL, NULL, pool_prepare, kb_cl_release,
     kb_cl_run},
    {"AveragePool", KN_DOMAIN_KILN, "ref", sup_pool_cl, NULL, NULL, pool_prepare, kb_cl_release,
     kb_cl_run},
    {"Gemm", KN_DOMAIN_KILN, "ref", sup_fused, NULL, NULL, stage_prepare, NULL, fused_gemm_run},
    {"MatMul", KN_DOMAIN_KILN, "ref", sup_fused, NULL, NULL, stage_prepare, NULL,
     fused_matmul_run},
};
const size_t kb_cpu_fused_count = KN_ARRAY_LEN(kb_cpu_fused);
