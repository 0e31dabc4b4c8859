/* k_conv_graph.c - 2-D Conv and kiln::Conv through cuDNN's backend (graph)
 * API: the convolution, bias, residual Z and ReLU as one operation graph run
 * by one execution plan (one kernel where cuDNN fuses the epilogue).
 *
 * Tactics "cudnn_g0" .. "cudnn_g3": the i-th engine configuration, in the
 * order of cuDNN's heuristics (mode A, then the fallback list's engines mode
 * A did not offer), that kiln accepts and whose execution plan finalizes.
 * Accepted: float accumulation only (no reduced-precision reductions, no
 * down-converted inputs), float32 off tensor cores unless the layer allows
 * TF32 (attribute allow_tf32, as the legacy tactics), workspace within
 * KC_CUDNN_MAX_WS. Layouts: NCHW, or channels-last kiln::Conv (X NHWC,
 * W KRSC, Y and Z NHWC) as NHWC strides on the same logical dims; float32,
 * float16, bfloat16; groups, strides, dilations, symmetric pads.
 *
 * prepare() builds the graph and the plan (cuDNN may compile a fused kernel
 * there: that is where the time goes) and logs the chosen engine at verbose
 * level. run() executes the plan on the thread's cuDNN handle and the run's
 * stream. The variant pack holds the device addresses and the workspace,
 * which prepare() does not see, so it is made on the first run and again
 * only when an address changes: host memory only, nothing that a CUDA graph
 * capture records. */
#include <stdio.h>
#include <string.h>

#include "backends/cpu/act.h"
#include "graph/fused.h"
#include "graph/ops_nn.h"
#include "kc_common.h"

/* Tensors the variant pack binds (uid = index + 1) and the virtual ones. */
enum { CG_X = 0, CG_W, CG_B, CG_Z, CG_Y, CG_NIO };
enum { CG_UID_CONV = 16, CG_UID_BIAS, CG_UID_ADD };

#define CG_TACTICS 4
#define CG_MAX_CFG 48 /* engine configurations read per heuristics mode */
#define CG_MAX_OWN (CG_MAX_CFG + 32)

static const char *const cg_names[CG_TACTICS] = {"cudnn_g0", "cudnn_g1", "cudnn_g2", "cudnn_g3"};

typedef struct cg_inst {
    const char *tactic;
    /* every descriptor the plan was built from, in creation order; release
     * destroys them last to first */
    cudnnBackendDescriptor_t own[CG_MAX_OWN];
    int n_own;
    cudnnBackendDescriptor_t plan;  /* one of own[] */
    cudnnBackendDescriptor_t pack;  /* the variant pack of the last run's addresses */
    int n_io;
    int64_t uid[CG_NIO];
    int src[CG_NIO];                /* the kb input that holds uid[i], -1 for output 0 */
    int64_t align[CG_NIO];          /* byte alignment the plan assumes */
    void *pack_ptr[CG_NIO + 1];     /* the addresses in `pack`, the workspace last */
    size_t ws;
} cg_inst;

/* What prepare() carries between its steps. */
typedef struct cg_build {
    const kn_node *node;
    cg_inst *s;
    cudnnHandle_t h;
    cudnnDataType_t dt;
    bool cl, tf32;
    int finalized;                  /* plans finalized, the kept one included */
    double t0;                      /* when prepare() began (ms) */
    char why[400];                  /* why the last engine configuration was passed over */
} cg_build;

typedef struct cg_engine {
    int64_t index;                  /* cuDNN's global engine index */
    bool tensor_core, down_convert, reduced, rtc, reorder;
} cg_engine;

/* ---------------- errors ---------------- */

static kiln_status cg_status(cudnnStatus_t e) {
    if ((int)CUDNN_STATUS_CATEGORY(e) == (int)CUDNN_STATUS_NOT_SUPPORTED)
        return KILN_ERR_UNSUPPORTED;
    if (e == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        e == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        return KILN_ERR_OUT_OF_MEMORY;
    return KILN_ERR_RUNTIME;
}

/* "step: status (cuDNN's last error message)". */
static void cg_describe(cudnnStatus_t e, const char *step, char *buf, size_t cap) {
    char detail[256];
    detail[0] = '\0';
    cudnnGetLastErrorString(detail, sizeof detail);
    snprintf(buf, cap, "%s: %s%s%.255s%s", step, cudnnGetErrorString(e), detail[0] ? " (" : "",
             detail, detail[0] ? ")" : "");
}

static kiln_status cg_fail(const kn_node *node, const char *tactic, cudnnStatus_t e,
                           const char *step) {
    char msg[400];
    cg_describe(e, step, msg, sizeof msg);
    return kn_node_error(node, cg_status(e), "%s: %s", tactic, msg);
}

#define CG_TRY(b, call, step)                                                 \
    do {                                                                      \
        cudnnStatus_t cg_e_ = (call);                                         \
        if (cg_e_ != CUDNN_STATUS_SUCCESS)                                    \
            return cg_fail((b)->node, (b)->s->tactic, cg_e_, (step));         \
    } while (0)
#define CG_SET(b, d, attr, type, n, ptr) \
    CG_TRY(b, cudnnBackendSetAttribute((d), (attr), (type), (int64_t)(n), (ptr)), #attr)
#define CG_GET(b, d, attr, type, cap, got, ptr) \
    CG_TRY(b, cudnnBackendGetAttribute((d), (attr), (type), (int64_t)(cap), (got), (ptr)), #attr)

/* ---------------- descriptors ---------------- */

static void cg_release(void *p) {
    cg_inst *s = p;
    if (!s)
        return;
    if (s->pack)
        cudnnBackendDestroyDescriptor(s->pack);
    for (int i = s->n_own - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(s->own[i]);
    kn_free(s);
}

/* A new descriptor owned by the instance (freed by cg_release or cg_drop). */
static kiln_status cg_new(cg_build *b, cudnnBackendDescriptorType_t type, const char *what,
                          cudnnBackendDescriptor_t *out) {
    cg_inst *s = b->s;
    if (s->n_own == CG_MAX_OWN)
        return kn_node_error(b->node, KILN_ERR_INTERNAL, "%s: more than %d cuDNN descriptors",
                             s->tactic, CG_MAX_OWN);
    cudnnBackendDescriptor_t d = NULL;
    CG_TRY(b, cudnnBackendCreateDescriptor(type, &d), what);
    s->own[s->n_own++] = d;
    *out = d;
    return KILN_OK;
}

/* Destroy an owned descriptor before the instance goes. */
static void cg_drop(cg_build *b, cudnnBackendDescriptor_t d) {
    cg_inst *s = b->s;
    for (int i = s->n_own - 1; i >= 0; i--)
        if (s->own[i] == d) {
            cudnnBackendDestroyDescriptor(d);
            memmove(&s->own[i], &s->own[i + 1], sizeof s->own[0] * (size_t)(s->n_own - 1 - i));
            s->n_own--;
            return;
        }
}

/* Logical dims [N, C, H, W] (W: [K, C/g, R, S]); channels-last strides put
 * C innermost (NHWC, KRSC), else packed NCHW. */
static void cg_strides(const int64_t *d, bool cl, int64_t *st) {
    if (cl) {
        st[1] = 1;
        st[3] = d[1];
        st[2] = d[3] * d[1];
        st[0] = d[2] * d[3] * d[1];
    } else {
        st[3] = 1;
        st[2] = d[3];
        st[1] = d[2] * d[3];
        st[0] = d[1] * d[2] * d[3];
    }
}

static kiln_status cg_tensor(cg_build *b, const char *name, int64_t uid, cudnnDataType_t dt,
                             const int64_t *dims, int64_t align, bool virt,
                             cudnnBackendDescriptor_t *out) {
    int64_t st[4];
    cg_strides(dims, b->cl, st);
    cudnnBackendDescriptor_t t;
    KN_TRY(cg_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "create tensor descriptor", &t));
    CG_SET(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    CG_SET(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    CG_SET(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st);
    CG_SET(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    CG_SET(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    CG_SET(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    char step[64];
    snprintf(step, sizeof step, "finalize tensor %s", name);
    CG_TRY(b, cudnnBackendFinalize(t), step);
    *out = t;
    return KILN_OK;
}

/* The byte alignment cuDNN may assume for p: its lowest set address bit,
 * at most 16 (what tensor-core engines ask for); 16 when prepare sees none. */
static int64_t cg_align(const void *p) {
    uintptr_t v = (uintptr_t)p;
    if (!v)
        return 16;
    uintptr_t low = v & (~v + 1);
    return low >= 16 ? 16 : (int64_t)low;
}

/* An input or output tensor the variant pack binds: src is the kb input
 * index, -1 for output 0. */
static kiln_status cg_io(cg_build *b, int slot, int src, const kb_tensor *t, const int64_t *dims,
                         cudnnBackendDescriptor_t *out) {
    static const char *const names[CG_NIO] = {"X", "W", "B", "Z", "Y"};
    cg_inst *s = b->s;
    int k = s->n_io++;
    s->uid[k] = slot + 1;
    s->src[k] = src;
    s->align[k] = cg_align(t->data);
    return cg_tensor(b, names[slot], s->uid[k], b->dt, dims, s->align[k], false, out);
}

/* ---------------- the operation graph ---------------- */

static kiln_status cg_conv_op(cg_build *b, const kn_window *w, cudnnBackendDescriptor_t x,
                              cudnnBackendDescriptor_t wt, cudnnBackendDescriptor_t y,
                              cudnnBackendDescriptor_t *op) {
    int64_t nsp = 2, pre[2], post[2], str[2], dil[2];
    for (int d = 0; d < 2; d++) {
        pre[d] = w->pad0[d];
        post[d] = w->pad1[d];
        str[d] = w->stride[d];
        dil[d] = w->dil[d];
    }
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    cudnnBackendDescriptor_t c;
    KN_TRY(cg_new(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "create convolution descriptor", &c));
    CG_SET(b, c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    CG_SET(b, c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    CG_SET(b, c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp);
    CG_SET(b, c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nsp, pre);
    CG_SET(b, c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nsp, post);
    CG_SET(b, c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nsp, str);
    CG_SET(b, c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nsp, dil);
    CG_TRY(b, cudnnBackendFinalize(c), "finalize convolution descriptor");

    float alpha = 1.f, beta = 0.f;
    KN_TRY(cg_new(b, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                  "create convolution operation", op));
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wt);
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    CG_TRY(b, cudnnBackendFinalize(*op), "finalize convolution operation");
    return KILN_OK;
}

/* y = mode(x) or mode(x, bt) in float. */
static kiln_status cg_pointwise(cg_build *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                cudnnBackendDescriptor_t bt, cudnnBackendDescriptor_t y,
                                cudnnBackendDescriptor_t *op) {
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw;
    KN_TRY(cg_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "create pointwise descriptor", &pw));
    CG_SET(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    CG_SET(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    CG_TRY(b, cudnnBackendFinalize(pw), "finalize pointwise descriptor");
    KN_TRY(cg_new(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "create pointwise operation", op));
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (bt)
        CG_SET(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bt);
    CG_SET(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_TRY(b, cudnnBackendFinalize(*op), "finalize pointwise operation");
    return KILN_OK;
}

/* The shapes of one convolution as cuDNN sees them: logical NCHW dims. */
typedef struct cg_shape {
    int64_t x[4], w[4], y[4], bias[4];
    kn_window win;
    bool bias_in, z_in, relu;
} cg_shape;

/* conv -> (+ B) -> (+ Z) -> (ReLU) -> Y; intermediates are virtual float
 * tensors, the last operation writes Y. */
static kiln_status cg_graph(cg_build *b, const cg_shape *sh, const kb_tensor *in,
                            const kb_tensor *y, cudnnBackendDescriptor_t *graph) {
    cudnnBackendDescriptor_t tx, tw, tb = NULL, tz = NULL, ty, ops[4];
    int n_ops = 0, n_epi = sh->bias_in + sh->z_in + sh->relu;
    KN_TRY(cg_io(b, CG_X, 0, &in[0], sh->x, &tx));
    KN_TRY(cg_io(b, CG_W, 1, &in[1], sh->w, &tw));
    if (sh->bias_in)
        KN_TRY(cg_io(b, CG_B, 2, &in[2], sh->bias, &tb));
    if (sh->z_in)
        KN_TRY(cg_io(b, CG_Z, 3, &in[3], sh->y, &tz));
    KN_TRY(cg_io(b, CG_Y, -1, y, sh->y, &ty));

    /* each step writes Y when it is the last, else a new virtual tensor */
    cudnnBackendDescriptor_t cur;
    int64_t vuid = CG_UID_CONV;
    if (n_epi == 0)
        cur = ty;
    else
        KN_TRY(cg_tensor(b, "conv (virtual)", vuid++, CUDNN_DATA_FLOAT, sh->y, 16, true, &cur));
    KN_TRY(cg_conv_op(b, &sh->win, tx, tw, cur, &ops[n_ops++]));
    const struct { bool on; cudnnPointwiseMode_t mode; cudnnBackendDescriptor_t other; } epi[3] = {
        {sh->bias_in, CUDNN_POINTWISE_ADD, tb},
        {sh->z_in, CUDNN_POINTWISE_ADD, tz},
        {sh->relu, CUDNN_POINTWISE_RELU_FWD, NULL},
    };
    for (int e = 0, done = 0; e < 3; e++) {
        if (!epi[e].on)
            continue;
        cudnnBackendDescriptor_t next = ty;
        if (++done < n_epi)
            KN_TRY(cg_tensor(b, "epilogue (virtual)", vuid++, CUDNN_DATA_FLOAT, sh->y, 16, true, &next));
        KN_TRY(cg_pointwise(b, epi[e].mode, cur, epi[e].other, next, &ops[n_ops++]));
        cur = next;
    }
    KN_TRY(cg_new(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "create operation graph", graph));
    CG_SET(b, *graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->h);
    CG_SET(b, *graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops);
    CG_TRY(b, cudnnBackendFinalize(*graph), "finalize operation graph");
    return KILN_OK;
}

/* ---------------- engines and the plan ---------------- */

/* The engine configurations cuDNN's heuristics in `mode` offer for the
 * graph (at most CG_MAX_CFG, owned). None, with b->why saying so, when the
 * heuristics cannot handle the graph. */
static kiln_status cg_heuristics(cg_build *b, cudnnBackendDescriptor_t graph,
                                 cudnnBackendHeurMode_t mode, cudnnBackendDescriptor_t *cfg,
                                 int *n) {
    *n = 0;
    cudnnBackendDescriptor_t heur;
    KN_TRY(cg_new(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "create heuristics descriptor", &heur));
    CG_SET(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    CG_SET(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    cudnnStatus_t e = cudnnBackendFinalize(heur);
    if (e != CUDNN_STATUS_SUCCESS) {
        cg_describe(e, "finalize heuristics", b->why, sizeof b->why);
        cg_drop(b, heur);
        return KILN_OK;
    }
    int64_t count = 0;
    CG_GET(b, heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (count > CG_MAX_CFG)
        count = CG_MAX_CFG;
    for (int i = 0; i < (int)count; i++)
        KN_TRY(cg_new(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "create engine configuration", &cfg[i]));
    int64_t got = 0;
    if (count > 0)
        CG_GET(b, heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
    for (int64_t i = got; i < count; i++) /* created but not filled */
        cg_drop(b, cfg[i]);
    cg_drop(b, heur);
    *n = (int)got;
    return KILN_OK;
}

static kiln_status cg_engine_info(cg_build *b, cudnnBackendDescriptor_t cfg, cg_engine *info) {
    memset(info, 0, sizeof *info);
    cudnnBackendDescriptor_t eng;
    KN_TRY(cg_new(b, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "create engine descriptor", &eng));
    int64_t got = 0;
    CG_GET(b, cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng);
    CG_GET(b, eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &info->index);
    cudnnBackendNumericalNote_t num[32];
    CG_GET(b, eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 32, &got, num);
    for (int64_t i = 0; i < got && i < 32; i++) {
        info->tensor_core |= num[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
        info->down_convert |= num[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
        info->reduced |= num[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
    }
    cudnnBackendBehaviorNote_t beh[32];
    CG_GET(b, eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 32, &got, beh);
    for (int64_t i = 0; i < got && i < 32; i++) {
        info->rtc |= beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
        info->reorder |= beh[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER ||
                         beh[i] == CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER;
    }
    cg_drop(b, eng);
    return KILN_OK;
}

/* Whether kiln takes the engine's numerics (b->why says why not). */
static bool cg_numerics_ok(cg_build *b, const cg_engine *e) {
    const char *no = NULL;
    if (e->reduced || e->down_convert)
        no = "reduces or converts below the data type";
    else if (e->reorder)
        no = "needs reordered int8 weights";
    else if (b->dt == CUDNN_DATA_FLOAT && !b->tf32 && e->tensor_core)
        no = "runs float32 on tensor cores (TF32) and the layer does not allow TF32";
    if (no)
        snprintf(b->why, sizeof b->why, "engine %lld %s", (long long)e->index, no);
    return no == NULL;
}

/* The execution plan of cfg, or *plan NULL (b->why says why) when it does
 * not finalize or needs more workspace than kiln's cuDNN policy allows. */
static kiln_status cg_plan(cg_build *b, cudnnBackendDescriptor_t cfg, const cg_engine *e,
                           cudnnBackendDescriptor_t *plan, size_t *ws) {
    cudnnBackendDescriptor_t p;
    *plan = NULL;
    KN_TRY(cg_new(b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "create execution plan", &p));
    CG_SET(b, p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->h);
    CG_SET(b, p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    cudnnStatus_t st = cudnnBackendFinalize(p);
    if (st != CUDNN_STATUS_SUCCESS) {
        char step[64];
        snprintf(step, sizeof step, "engine %lld: finalize execution plan", (long long)e->index);
        cg_describe(st, step, b->why, sizeof b->why);
        cg_drop(b, p);
        return KILN_OK;
    }
    b->finalized++;
    int64_t bytes = 0, got = 0;
    CG_GET(b, p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &bytes);
    if (bytes < 0 || (uint64_t)bytes > KC_CUDNN_MAX_WS) {
        snprintf(b->why, sizeof b->why, "engine %lld needs %lld bytes of workspace (at most %zu)",
                 (long long)e->index, (long long)bytes, KC_CUDNN_MAX_WS);
        cg_drop(b, p);
        return KILN_OK;
    }
    *plan = p;
    *ws = (size_t)bytes;
    return KILN_OK;
}

/* Keep cfg[pick] (the plan's), drop the others of the list. */
static void cg_keep_one(cg_build *b, cudnnBackendDescriptor_t *cfg, int n, int pick) {
    for (int i = n - 1; i >= 0; i--)
        if (i != pick)
            cg_drop(b, cfg[i]);
}

/* The want-th accepted engine configuration whose plan finalizes: mode A's
 * list, then the fallback list's engines mode A did not offer. */
static kiln_status cg_choose_at(cg_build *b, cudnnBackendDescriptor_t graph, int want,
                                int *n_usable) {
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    static const char *const mode_names[2] = {"mode A", "fallback"};
    int64_t seen[CG_MAX_CFG];
    int n_seen = 0, offered = 0, usable = 0;
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t cfg[CG_MAX_CFG];
        int n = 0;
        KN_TRY(cg_heuristics(b, graph, modes[m], cfg, &n));
        for (int i = 0; i < n; i++) {
            cg_engine e;
            KN_TRY(cg_engine_info(b, cfg[i], &e));
            bool dup = false;
            for (int j = 0; j < n_seen && m == 1; j++)
                dup |= seen[j] == e.index;
            if (m == 0 && n_seen < CG_MAX_CFG)
                seen[n_seen++] = e.index;
            if (dup)
                continue;
            offered++;
            if (!cg_numerics_ok(b, &e))
                continue;
            cudnnBackendDescriptor_t plan;
            size_t ws = 0;
            KN_TRY(cg_plan(b, cfg[i], &e, &plan, &ws));
            if (!plan)
                continue;
            if (usable++ < want) { /* an earlier tactic's plan */
                cg_drop(b, plan);
                continue;
            }
            cg_keep_one(b, cfg, n, i);
            b->s->plan = plan;
            b->s->ws = ws;
            kn_log(KILN_LOG_VERBOSE,
                   "layer '%s': %s is cuDNN engine %lld (heuristics %s, #%d), workspace %zu "
                   "bytes%s; %d plans finalized in %.1f ms",
                   b->node->name ? b->node->name : "", b->s->tactic, (long long)e.index,
                   mode_names[m], i, ws, e.rtc ? ", compiled at run time" : "", b->finalized,
                   kn_now_ms() - b->t0);
            return KILN_OK;
        }
        cg_keep_one(b, cfg, n, -1);
    }
    *n_usable = usable;
    return kn_node_error(b->node, KILN_ERR_UNSUPPORTED,
                         "%s: cuDNN has %d usable engine configurations for this convolution (of "
                         "%d offered)%s%s",
                         b->s->tactic, usable, offered, b->why[0] ? "; last passed over: " : "",
                         b->why);
}

/* The want-th usable configuration, or the last one when there are fewer:
 * a plan built for one shape of a profile must run at every other, where
 * the heuristics may offer fewer engines. */
static kiln_status cg_choose(cg_build *b, cudnnBackendDescriptor_t graph, int want) {
    int usable = 0;
    kiln_status st = cg_choose_at(b, graph, want, &usable);
    if (st != KILN_ERR_UNSUPPORTED || usable < 1 || usable > want)
        return st;
    kn_log(KILN_LOG_VERBOSE, "layer '%s': %s: %d usable engine configurations here, taking the last",
           b->node->name ? b->node->name : "", b->s->tactic, usable);
    return cg_choose_at(b, graph, usable - 1, &usable);
}

/* ---------------- kernel glue ---------------- */

/* Logical NCHW dims of the node's tensors, its window and its epilogue. */
static kiln_status cg_shape_of(cg_build *b, const kb_tensor *in, int n_in, const kb_tensor *out,
                               cg_shape *sh) {
    const kn_node *node = b->node;
    const kb_tensor *x = &in[0], *w = &in[1], *y = &out[0];
    memset(sh, 0, sizeof *sh);
    if (!kc_dnn_type(x->dtype, &b->dt) || w->dtype != x->dtype || y->dtype != x->dtype)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%s: types %s, %s -> %s", b->s->tactic,
                             kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype),
                             kiln_dtype_name(y->dtype));
    if (x->rank != 4 || w->rank != 4 || y->rank != 4)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%s: 2-D convolutions only (X rank %d)",
                             b->s->tactic, x->rank);
    b->cl = kn_attr_int(node, "channels_last", 0) != 0;
    b->tf32 = kn_attr_int(node, "allow_tf32", 0) != 0;
    if (b->cl) {
        kn_dims_channels(4, x->dims, sh->x, true);
        kn_dims_channels(4, w->dims, sh->w, true);
        kn_dims_channels(4, y->dims, sh->y, true);
    } else {
        memcpy(sh->x, x->dims, sizeof sh->x);
        memcpy(sh->w, w->dims, sizeof sh->w);
        memcpy(sh->y, y->dims, sizeof sh->y);
    }
    KN_TRY(kc_conv_window(node, 4, sh->x, sh->w, &sh->win));
    int64_t group = kn_attr_int(node, "group", 1);
    if (group < 1 || sh->x[1] != sh->w[1] * group || sh->w[0] % group != 0 || sh->y[1] != sh->w[0])
        return kn_node_error(node, KILN_ERR_SHAPE, "channels %lld do not fit W %lld x group %lld",
                             (long long)sh->x[1], (long long)sh->w[1], (long long)group);
    bool fused = strcmp(node->domain ? node->domain : "", KN_DOMAIN_KILN) == 0;
    sh->bias_in = n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED;
    sh->z_in = fused && n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED;
    if (sh->bias_in && (in[2].dtype != x->dtype || kc_numel(&in[2]) != sh->w[0]))
        return kn_node_error(node, KILN_ERR_SHAPE, "B has %lld values of %s for %lld channels",
                             (long long)kc_numel(&in[2]), kiln_dtype_name(in[2].dtype),
                             (long long)sh->w[0]);
    if (sh->z_in && (in[3].dtype != x->dtype || in[3].rank != 4 ||
                     memcmp(in[3].dims, y->dims, sizeof y->dims[0] * 4) != 0))
        return kn_node_error(node, KILN_ERR_SHAPE, "the residual Z must have Y's shape and type");
    kb_act act = fused ? kb_act_parse(kn_attr_string(node, "activation", "")) : KB_ACT_NONE;
    if (act != KB_ACT_NONE && act != KB_ACT_RELU)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%s takes Relu or no activation, not '%s'",
                             b->s->tactic, kn_attr_string(node, "activation", ""));
    sh->relu = act == KB_ACT_RELU;
    int64_t bias[4] = {1, sh->w[0], 1, 1};
    memcpy(sh->bias, bias, sizeof bias);
    return KILN_OK;
}

static kiln_status cg_prepare(const kn_node *node, const kb_tensor *in, int n_in,
                              const kb_tensor *out, int want, void **inst, size_t *workspace) {
    cg_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    s->tactic = cg_names[want];
    cg_build b = {.node = node, .s = s, .t0 = kn_now_ms()};
    cg_shape sh;
    cudnnBackendDescriptor_t graph;
    kiln_status st = cg_shape_of(&b, in, n_in, out, &sh);
    if (st == KILN_OK)
        st = kc_cudnn_handle(node, NULL, &b.h);
    if (st == KILN_OK)
        st = cg_graph(&b, &sh, in, &out[0], &graph);
    if (st == KILN_OK)
        st = cg_choose(&b, graph, want);
    if (st != KILN_OK) {
        cg_release(s);
        return st;
    }
    *inst = s;
    *workspace = s->ws;
    return KILN_OK;
}

/* A variant pack for these addresses (the workspace last), replacing the
 * instance's. */
static kiln_status cg_pack(const kb_run *r, cg_inst *s, void *const *ptr) {
    for (int i = 0; i < s->n_io; i++)
        if (cg_align(ptr[i]) < s->align[i])
            return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                 "%s: tensor %lld at %p is less aligned than the %lld bytes the "
                                 "plan was built for",
                                 s->tactic, (long long)s->uid[i], ptr[i], (long long)s->align[i]);
    cudnnBackendDescriptor_t p = NULL;
    const char *step = "create variant pack";
    cudnnStatus_t e = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &p);
    if (e == CUDNN_STATUS_SUCCESS) {
        step = "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS";
        e = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                     s->n_io, s->uid);
    }
    if (e == CUDNN_STATUS_SUCCESS) {
        step = "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS";
        e = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                     s->n_io, ptr);
    }
    if (e == CUDNN_STATUS_SUCCESS) {
        step = "CUDNN_ATTR_VARIANT_PACK_WORKSPACE";
        e = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                     &ptr[s->n_io]);
    }
    if (e == CUDNN_STATUS_SUCCESS) {
        step = "finalize variant pack";
        e = cudnnBackendFinalize(p);
    }
    if (e != CUDNN_STATUS_SUCCESS) {
        kiln_status st = cg_fail(r->node, s->tactic, e, step);
        if (p)
            cudnnBackendDestroyDescriptor(p);
        return st;
    }
    if (s->pack)
        cudnnBackendDestroyDescriptor(s->pack);
    s->pack = p;
    memcpy(s->pack_ptr, ptr, sizeof(void *) * (size_t)(s->n_io + 1));
    return KILN_OK;
}

static kiln_status cg_run(const kb_run *r) {
    cg_inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    if (r->workspace_size < s->ws)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "%s: workspace too small (%zu < %zu)",
                             s->tactic, r->workspace_size, s->ws);
    void *ptr[CG_NIO + 1];
    for (int i = 0; i < s->n_io; i++)
        ptr[i] = s->src[i] < 0 ? r->out[0].data : r->in[s->src[i]].data;
    ptr[s->n_io] = r->workspace;
    if (!s->pack || memcmp(ptr, s->pack_ptr, sizeof(void *) * (size_t)(s->n_io + 1)) != 0)
        KN_TRY(cg_pack(r, s, ptr));
    cudnnHandle_t h;
    KN_TRY(kc_cudnn_handle(r->node, kc_stream(r), &h));
    cudnnStatus_t e = cudnnBackendExecute(h, s->plan, s->pack);
    if (e != CUDNN_STATUS_SUCCESS)
        return cg_fail(r->node, s->tactic, e, "cudnnBackendExecute");
    return KILN_OK;
}

/* 2-D, Relu or no activation, otherwise what the legacy cudnn_fused takes. */
static bool cg_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    return n_in >= 2 && in[0].rank == 4 && kc_conv_supports_relu(node, in, n_in, out, n_out);
}

#define CG_PREP(i)                                                                              \
    static kiln_status cg_prep_##i(const void *state, const kn_node *node, const kb_tensor *in, \
                                   int n_in, const kb_tensor *out, int n_out, void **inst,      \
                                   size_t *ws) {                                                \
        return cg_prepare(node, in, n_in, out, i, inst, ws);                                    \
    }
CG_PREP(0)
CG_PREP(1)
CG_PREP(2)
CG_PREP(3)

/* Listed from the fourth configuration to the first: when the builder does
 * not time tactics it takes the one registered last, the heuristics' best. */
#define K_CG(op, dom)                                                                    \
    {op, dom, "cudnn_g3", cg_supports, NULL, NULL, cg_prep_3, cg_release, cg_run},       \
        {op, dom, "cudnn_g2", cg_supports, NULL, NULL, cg_prep_2, cg_release, cg_run},   \
        {op, dom, "cudnn_g1", cg_supports, NULL, NULL, cg_prep_1, cg_release, cg_run},   \
        {op, dom, "cudnn_g0", cg_supports, NULL, NULL, cg_prep_0, cg_release, cg_run}

const kb_kernel kb_cuda_conv_graph[] = {
    K_CG("Conv", ""),
    K_CG("Conv", KN_DOMAIN_KILN),
};
const size_t kb_cuda_conv_graph_count = KN_ARRAY_LEN(kb_cuda_conv_graph);
