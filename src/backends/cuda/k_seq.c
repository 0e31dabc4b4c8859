/* k_seq.c - RNN, GRU and LSTM, and the 8-bit integer products
 * (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) on the CUDA
 * backend (kernels in seq.cu). Attributes are read as the CPU reference
 * (k_nn_rnn.c, k_nn_qconv.c, k_nn.c) reads them.
 *
 * Recurrent ops compute in float, whatever their real types (as the CPU
 * does): float32 W and R are read in place (other types, or blocks not
 * 16-byte aligned, are converted each run into padded float copies), X's
 * projection for every time step and direction is one cuBLASLt product per
 * direction, then each step is one small product per direction (h R^T) and
 * one gate kernel for all directions; GRU without linear_before_reset
 * needs the reset gate first, so its steps are product, reset kernel,
 * product ((r * h) Rh^T), cell kernel. */
#include <string.h>

#include "graph/ops_nn.h"
#include "kc_common.h"
#include "seq.cuh"

static bool real_type(kiln_dtype t) { return kc_is_float(t) || t == KILN_DTYPE_DOUBLE; }
static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }
static bool absent_ti(const kn_tinfo *in, int n_in, int i) {
    return i >= n_in || in[i].dtype == KILN_DTYPE_UNDEFINED;
}

/* ---------------- RNN / GRU / LSTM ---------------- */

/* The geometry and activations: graph/ops_nn.h's kn_rnn, as the CPU
 * reference reads them (kind and activation codes match seq.cuh's). */
typedef kn_rnn rnn_geom;

_Static_assert((int)KC_RNN_KIND_RNN == (int)KN_RNN && (int)KC_RNN_KIND_GRU == (int)KN_GRU &&
                   (int)KC_RNN_KIND_LSTM == (int)KN_LSTM && (int)KC_RNN_RELU == (int)KN_RNN_RELU &&
                   (int)KC_RNN_HARD_SIGMOID == (int)KN_RNN_HARD_SIGMOID &&
                   (int)KC_RNN_SOFTPLUS == (int)KN_RNN_SOFTPLUS,
               "seq.cuh's codes are graph/ops_nn.h's");

static kiln_status rnn_setup(const kn_node *node, const int64_t *xd, const int64_t *wd,
                             rnn_geom *g) {
    return kn_rnn_setup(node, xd, wd, g);
}

static bool rnn_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    if (n_in < 3 || n_in > 8 || n_out < 1 || n_out > 3 || in[0].rank != 3 || in[1].rank != 3 ||
        in[2].rank != 3)
        return false;
    for (int i = 0; i < n_in; i++) {
        if (absent_ti(in, n_in, i))
            continue;
        if (i == 4 ? in[i].dtype != KILN_DTYPE_INT32 && in[i].dtype != KILN_DTYPE_INT64
                   : !real_type(in[i].dtype))
            return false;
    }
    for (int i = 0; i < n_out; i++)
        if (out[i].dtype != KILN_DTYPE_UNDEFINED && !real_type(out[i].dtype))
            return false;
    rnn_geom g;
    if (rnn_setup(node, in[0].dims, in[1].dims, &g) != KILN_OK) {
        kn_error_clear();
        return false;
    }
    return true;
}

static bool rnn_present(const kb_tensor *in, int n_in, int i) { return kc_present(in, n_in, i); }

/* Every optional input the kernels read holds what the geometry says, so
 * no kernel reads past one. */
static kiln_status rnn_check(const kn_node *node, const rnn_geom *g, const kb_tensor *in, int n_in) {
    int64_t GH = g->gates * g->hidden;
    const kb_tensor *r = &in[2];
    if (r->dims[0] != g->dirs || r->dims[1] != GH || r->dims[2] != g->hidden)
        return kn_node_error(node, KILN_ERR_SHAPE, "R must be [%lld, %lld, %lld]",
                             (long long)g->dirs, (long long)GH, (long long)g->hidden);
    static const char *const names[8] = {"X", "W", "R", "B", "sequence_lens", "initial_h",
                                         "initial_c", "P"};
    int64_t want[8] = {0, 0, 0, g->dirs * 2 * GH, g->batch, g->dirs * g->batch * g->hidden,
                       g->dirs * g->batch * g->hidden, g->dirs * 3 * g->hidden};
    for (int i = 3; i < n_in && i < 8; i++) {
        if (!rnn_present(in, n_in, i) || (g->kind != KC_RNN_KIND_LSTM && i >= 6))
            continue;
        if (kc_numel(&in[i]) != want[i])
            return kn_node_error(node, KILN_ERR_SHAPE, "%s has %lld elements, not %lld", names[i],
                                 (long long)kc_numel(&in[i]), (long long)want[i]);
    }
    return KILN_OK;
}

static int64_t pad64(int64_t n) { return (n + 63) & ~(int64_t)63; }

typedef struct rnn_inst {
    rnn_geom g;
    kc_gemm *proj, *step, *step2;   /* per direction: x W^T, h R^T, (r * h) Rh^T */
    size_t gemm_ws;                 /* bytes at the start of the workspace */
    int64_t hr_n;
    /* float offsets after gemm_ws, and per-direction strides */
    int64_t o_xf, o_wf, o_rf, o_rhf, o_xp, o_hr, o_h, o_c, o_rh, o_hr2, total;
    int64_t wstride, rstride, rhstride, xpstride, hrstride, ststride;
} rnn_inst;

static void rnn_release(void *p) {
    rnn_inst *s = p;
    if (!s)
        return;
    if (s->proj)
        kc_gemm_destroy(s->proj);
    if (s->step)
        kc_gemm_destroy(s->step);
    if (s->step2)
        kc_gemm_destroy(s->step2);
    kn_free(s);
}

static kiln_status rnn_gemm(const kn_node *node, int64_t m, int64_t n, int64_t k, kc_gemm **out,
                            size_t *ws_max) {
    kc_gemm_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.dt = KILN_DTYPE_FLOAT;
    sp.m = m;
    sp.n = n;
    sp.k = k;
    sp.batch = 1;
    sp.tb = true; /* W and R rows are the gates: B is given as n x k */
    size_t ws = 0;
    KN_TRY(kc_gemm_create_spec(node, &sp, out, &ws));
    if (ws > *ws_max)
        *ws_max = ws;
    return KILN_OK;
}

static kiln_status rnn_build(const kn_node *node, const kb_tensor *in, int n_in, rnn_inst *s) {
    rnn_geom *g = &s->g;
    if (in[0].rank != 3 || in[1].rank != 3 || in[2].rank != 3)
        return kn_node_error(node, KILN_ERR_SHAPE, "X, W and R must have rank 3");
    KN_TRY(rnn_setup(node, in[0].dims, in[1].dims, g));
    KN_TRY(rnn_check(node, g, in, n_in));
    int64_t H = g->hidden, GH = g->gates * H, rows = g->seq * g->batch;
    /* GRU without linear_before_reset: the candidate's product comes later */
    bool two = g->kind == KC_RNN_KIND_GRU && !g->linear_before_reset;
    s->hr_n = two ? 2 * H : GH;
    size_t ws = 0;
    if (H > 0 && g->batch > 0) {
        if (rows > 0 && g->input > 0)
            KN_TRY(rnn_gemm(node, rows, GH, g->input, &s->proj, &ws));
        if (g->seq > 0) {
            KN_TRY(rnn_gemm(node, g->batch, s->hr_n, H, &s->step, &ws));
            if (two)
                KN_TRY(rnn_gemm(node, g->batch, H, H, &s->step2, &ws));
        }
    }
    s->gemm_ws = (ws + 255u) & ~(size_t)255u;
    s->wstride = pad64(GH * g->input);
    s->rstride = pad64(s->hr_n * H);
    s->rhstride = two ? pad64(H * H) : 0;
    s->xpstride = pad64(rows * GH);
    s->hrstride = pad64(g->batch * s->hr_n);
    s->ststride = pad64(g->batch * H);
    int64_t at = 0, D = g->dirs;
#define TAKE(field, n) (s->field = at, at += pad64(n))
    TAKE(o_xf, rows * g->input);
    TAKE(o_wf, D * s->wstride);
    TAKE(o_rf, D * s->rstride);
    TAKE(o_rhf, D * s->rhstride);
    TAKE(o_xp, D * s->xpstride);
    TAKE(o_hr, D * s->hrstride);
    TAKE(o_h, D * s->ststride);
    TAKE(o_c, g->kind == KC_RNN_KIND_LSTM ? D * s->ststride : 0);
    TAKE(o_rh, two ? D * s->ststride : 0);
    TAKE(o_hr2, two ? D * s->ststride : 0);
#undef TAKE
    s->total = at;
    return KILN_OK;
}

static kiln_status rnn_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                               int n_in, const kb_tensor *out, int n_out, void **inst,
                               size_t *workspace) {
    if (n_in < 3 || n_in > 8 || n_out > 3)
        return kn_node_error(node, KILN_ERR_SHAPE, "%d inputs and %d outputs", n_in, n_out);
    rnn_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = rnn_build(node, in, n_in, s);
    if (st != KILN_OK) {
        rnn_release(s);
        return st;
    }
    *inst = s;
    *workspace = s->gemm_ws + (size_t)s->total * sizeof(float);
    return KILN_OK;
}

static void *out_data(const kb_run *r, int i) { return i < r->n_out ? r->out[i].data : NULL; }

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Whether the products can read weight tensor t (per direction blocks of
 * `per_dir` elements) where it lies: float32, every block 16-byte aligned. */
static bool in_place(const kb_tensor *t, int64_t per_dir) {
    return t->dtype == KILN_DTYPE_FLOAT && aligned16(t->data) && per_dir % 4 == 0;
}

static kiln_status rnn_run(const kb_run *r) {
    const rnn_inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run before prepare");
    const rnn_geom *g = &s->g;
    const kn_node *node = r->node;
    cudaStream_t st = kc_stream(r);
    if (r->workspace_size < s->gemm_ws + (size_t)s->total * sizeof(float))
        return kn_node_error(node, KILN_ERR_INTERNAL, "workspace too small");
    const kb_tensor *X = &r->in[0], *W = &r->in[1], *R = &r->in[2];
    if (X->dims[0] != (g->layout1 ? g->batch : g->seq) || X->dims[2] != g->input ||
        W->dims[1] != g->gates * g->hidden || R->dims[0] != g->dirs)
        return kn_node_error(node, KILN_ERR_SHAPE, "shapes differ from prepare's");
    KN_TRY(rnn_check(node, g, r->in, r->n_in));
    int64_t H = g->hidden, GH = g->gates * H, rows = g->seq * g->batch, D = g->dirs;
    void *Y = out_data(r, 0);
    if (Y && kc_numel(&r->out[0]) > 0) /* steps past a sequence's length stay zero */
        KC_CUDA(node, cudaMemsetAsync(Y, 0, (size_t)kc_numel(&r->out[0]) *
                                                kiln_dtype_size(r->out[0].dtype), st));
    if (H == 0 || g->batch == 0)
        return KILN_OK; /* every output is empty */
    float *f = (float *)((unsigned char *)r->workspace + s->gemm_ws);
    void *gws = r->workspace;
    size_t gwsz = s->gemm_ws;
    bool two = s->step2 != NULL;
    /* W and R as the products read them: float32 weights in place when
     * every direction's block starts 16-byte aligned, else float copies
     * made here (of W, and of R's rows that the step products read) */
    const float *wf = f + s->o_wf, *rf = f + s->o_rf, *rhf = f + s->o_rhf;
    int64_t wst = s->wstride, rst = s->rstride, rhoff = 0;
    if (in_place(W, GH * g->input)) {
        wf = W->data;
        wst = GH * g->input;
    } else {
        KC_CUDA(node, kc_seq_to_float(W->data, W->dtype, 0, GH * g->input, f + s->o_wf, s->wstride,
                                      D, GH * g->input, st));
    }
    if (in_place(R, GH * H) && (!two || (2 * H * H) % 4 == 0)) {
        rf = R->data;
        rhf = (const float *)R->data + 2 * H * H;
        rst = GH * H;
        rhoff = GH * H;
    } else {
        KC_CUDA(node, kc_seq_to_float(R->data, R->dtype, 0, GH * H, f + s->o_rf, s->rstride, D,
                                      s->hr_n * H, st));
        if (two)
            KC_CUDA(node, kc_seq_to_float(R->data, R->dtype, 2 * H * H, GH * H, f + s->o_rhf,
                                          s->rhstride, D, H * H, st));
        rhoff = s->rhstride;
    }
    /* the input projection of every step */
    if (s->proj) {
        const float *xs = X->data;
        if (X->dtype != KILN_DTYPE_FLOAT || !aligned16(X->data)) {
            KC_CUDA(node, kc_seq_to_float(X->data, X->dtype, 0, 0, f + s->o_xf, 0, 1,
                                          rows * g->input, st));
            xs = f + s->o_xf;
        }
        for (int64_t d = 0; d < D; d++)
            KN_TRY(kc_gemm_run(node, s->proj, xs, wf + d * wst,
                               f + s->o_xp + d * s->xpstride, gws, gwsz, st));
    } else if (rows > 0) { /* input size 0: only the biases */
        KC_CUDA(node, cudaMemsetAsync(f + s->o_xp, 0, (size_t)(D * s->xpstride) * sizeof(float), st));
    }
    kc_rnn p;
    memset(&p, 0, sizeof p);
    p.kind = g->kind;
    p.gates = g->gates;
    p.dirs = (int)D;
    p.reverse_only = g->reverse_only;
    p.layout1 = g->layout1;
    p.lbr = g->linear_before_reset;
    p.input_forget = g->input_forget;
    p.seq = g->seq;
    p.batch = g->batch;
    p.hidden = H;
    p.clip = g->clip;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            p.f[d][k] = (kc_rnn_act){g->f[d][k].act, g->f[d][k].alpha, g->f[d][k].beta};
    p.xp = f + s->o_xp;
    p.hr = f + s->o_hr;
    p.h = f + s->o_h;
    p.c = g->kind == KC_RNN_KIND_LSTM ? f + s->o_c : NULL;
    p.rh = two ? f + s->o_rh : NULL;
    p.hr2 = two ? f + s->o_hr2 : NULL;
    p.hr_n = s->hr_n;
    p.xp_dir = s->xpstride;
    p.hr_dir = s->hrstride;
    p.st_dir = s->ststride;
    int n_in = r->n_in;
    if (kc_present(r->in, n_in, 3)) {
        p.bias = r->in[3].data;
        p.bias_dt = r->in[3].dtype;
    }
    if (kc_present(r->in, n_in, 4)) {
        p.lens = r->in[4].data;
        p.lens_dt = r->in[4].dtype;
    }
    if (g->kind == KC_RNN_KIND_LSTM && kc_present(r->in, n_in, 7)) {
        p.peep = r->in[7].data;
        p.peep_dt = r->in[7].dtype;
    }
    if (Y) {
        p.y = Y;
        p.y_dt = r->out[0].dtype;
    }
    bool h0 = kc_present(r->in, n_in, 5), c0 = g->kind == KC_RNN_KIND_LSTM && kc_present(r->in, n_in, 6);
    KC_CUDA(node, kc_rnn_init(&p, h0 ? r->in[5].data : NULL, h0 ? r->in[5].dtype : KILN_DTYPE_FLOAT,
                              c0 ? r->in[6].data : NULL, c0 ? r->in[6].dtype : KILN_DTYPE_FLOAT, st));
    for (int64_t step = 0; step < g->seq; step++) {
        for (int64_t d = 0; d < D; d++)
            KN_TRY(kc_gemm_run(node, s->step, p.h + d * s->ststride, rf + d * rst,
                               p.hr + d * s->hrstride, gws, gwsz, st));
        KC_CUDA(node, kc_rnn_step(&p, step, two ? 1 : 0, st));
        if (!two)
            continue;
        for (int64_t d = 0; d < D; d++)
            KN_TRY(kc_gemm_run(node, s->step2, p.rh + d * s->ststride, rhf + d * rhoff,
                               p.hr2 + d * s->ststride, gws, gwsz, st));
        KC_CUDA(node, kc_rnn_step(&p, step, 2, st));
    }
    void *yh = out_data(r, 1), *yc = g->kind == KC_RNN_KIND_LSTM ? out_data(r, 2) : NULL;
    KC_CUDA(node, kc_rnn_finish(&p, yh, yh ? r->out[1].dtype : KILN_DTYPE_FLOAT, yc,
                                yc ? r->out[2].dtype : KILN_DTYPE_FLOAT, st));
    return KILN_OK;
}

/* ---------------- integer parameters ---------------- */

/* A zero point or scale: absent, one value, or `n` values indexed by row /
 * column / channel (any other count is an error, as it would read past
 * the tensor). */
static kiln_status qparam(const kn_node *node, const kb_tensor *in, int n_in, int i, int64_t n,
                          const char *what, kc_qparam *q) {
    memset(q, 0, sizeof *q);
    if (!kc_present(in, n_in, i))
        return KILN_OK;
    int64_t k = kc_numel(&in[i]);
    if (k != 1 && k != n)
        return kn_node_error(node, KILN_ERR_SHAPE, "%s has %lld values, not 1 or %lld", what,
                             (long long)k, (long long)n);
    q->p = in[i].data;
    q->dt = in[i].dtype;
    q->per = k != 1;
    return KILN_OK;
}

static bool zp_type(const kn_tinfo *in, int n_in, int i) {
    return absent_ti(in, n_in, i) || is_8bit(in[i].dtype);
}
static bool scale_type(const kn_tinfo *in, int n_in, int i) {
    return absent_ti(in, n_in, i) || real_type(in[i].dtype);
}

/* ---------------- MatMulInteger / QLinearMatMul ---------------- */

static bool qmm_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    if (n_out < 1)
        return false;
    if (strcmp(node->op_type, "QLinearMatMul") == 0)
        return n_in == 8 && is_8bit(in[0].dtype) && is_8bit(in[3].dtype) && is_8bit(out[0].dtype) &&
               in[0].rank >= 1 && in[3].rank >= 1 && scale_type(in, n_in, 1) &&
               zp_type(in, n_in, 2) && scale_type(in, n_in, 4) && zp_type(in, n_in, 5) &&
               scale_type(in, n_in, 6) && zp_type(in, n_in, 7);
    return n_in >= 2 && n_in <= 4 && is_8bit(in[0].dtype) && is_8bit(in[1].dtype) &&
           out[0].dtype == KILN_DTYPE_INT32 && in[0].rank >= 1 && in[1].rank >= 1 &&
           zp_type(in, n_in, 2) && zp_type(in, n_in, 3);
}

/* The CPU's mm_shape_of / mm_offset as batch strides. */
static kiln_status qmm_geom(const kn_node *node, const kb_tensor *a, const kb_tensor *b,
                            const kb_tensor *y, kc_qmm *q) {
    q->m = a->rank == 1 ? 1 : a->dims[a->rank - 2];
    q->k = a->dims[a->rank - 1];
    q->n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    int64_t kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
    q->br = y->rank - (a->rank == 1 ? 0 : 1) - (b->rank == 1 ? 0 : 1);
    if (kb != q->k || q->br < 0 || q->br > KC_MAX_DIMS)
        return kn_node_error(node, KILN_ERR_SHAPE, "A [..., %lld] and B [%lld, ...] do not multiply",
                             (long long)q->k, (long long)kb);
    q->batches = kn_numel(q->br, y->dims);
    for (int d = 0; d < q->br; d++)
        q->ydims[d] = y->dims[d];
    const kb_tensor *t[2] = {a, b};
    int64_t mat[2] = {q->m * q->k, q->k * q->n};
    int64_t *bs[2] = {q->a_bstride, q->b_bstride};
    for (int u = 0; u < 2; u++) {
        int tr = t[u]->rank > 2 ? t[u]->rank - 2 : 0;
        if (tr > q->br)
            return kn_node_error(node, KILN_ERR_SHAPE, "an operand has more batch dims than Y");
        int64_t s = mat[u];
        for (int i = tr - 1; i >= 0; i--) {
            int d = q->br - tr + i;
            if (t[u]->dims[i] != 1 && t[u]->dims[i] != q->ydims[d])
                return kn_node_error(node, KILN_ERR_SHAPE, "batch dims do not broadcast to Y's");
            bs[u][d] = t[u]->dims[i] == 1 ? 0 : s;
            s *= t[u]->dims[i];
        }
    }
    int64_t want = q->batches * q->m * q->n;
    if (kc_numel(y) != want)
        return kn_node_error(node, KILN_ERR_SHAPE, "Y has %lld elements, not %lld",
                             (long long)kc_numel(y), (long long)want);
    return KILN_OK;
}

static kiln_status qmm_run(const kb_run *r) {
    const kn_node *node = r->node;
    bool ql = strcmp(node->op_type, "QLinearMatMul") == 0;
    int bi = ql ? 3 : 1;
    if (r->n_in <= bi)
        return kn_node_error(node, KILN_ERR_SHAPE, "%d inputs", r->n_in);
    const kb_tensor *a = &r->in[0], *b = &r->in[bi];
    kb_tensor *y = &r->out[0];
    if (!is_8bit(a->dtype) || !is_8bit(b->dtype))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "8-bit inputs only");
    kc_qmm q;
    memset(&q, 0, sizeof q);
    KN_TRY(qmm_geom(node, a, b, y, &q));
    q.a_dt = a->dtype;
    q.b_dt = b->dtype;
    q.y_dt = y->dtype;
    if (ql) {
        if (!is_8bit(y->dtype))
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "8-bit output only");
        q.requant = 1;
        KN_TRY(qparam(node, r->in, r->n_in, 1, q.m, "a_scale", &q.as));
        KN_TRY(qparam(node, r->in, r->n_in, 2, q.m, "a_zero_point", &q.za));
        KN_TRY(qparam(node, r->in, r->n_in, 4, q.n, "b_scale", &q.bs));
        KN_TRY(qparam(node, r->in, r->n_in, 5, q.n, "b_zero_point", &q.zb));
        KN_TRY(qparam(node, r->in, r->n_in, 6, 1, "y_scale", &q.ys));
        KN_TRY(qparam(node, r->in, r->n_in, 7, 1, "y_zero_point", &q.yz));
    } else {
        if (y->dtype != KILN_DTYPE_INT32)
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "int32 output only");
        KN_TRY(qparam(node, r->in, r->n_in, 2, q.m, "a_zero_point", &q.za));
        KN_TRY(qparam(node, r->in, r->n_in, 3, q.n, "b_zero_point", &q.zb));
    }
    KC_CUDA(node, kc_qmatmul(a->data, b->data, y->data, &q, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- ConvInteger / QLinearConv ---------------- */

static bool qconv_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    if (n_out < 1 || n_in < 2)
        return false;
    bool ql = strcmp(node->op_type, "QLinearConv") == 0;
    int wi = ql ? 3 : 1;
    if (n_in <= wi || !is_8bit(in[0].dtype) || !is_8bit(in[wi].dtype) || in[0].rank < 3 ||
        in[0].rank > 5 || in[wi].rank != in[0].rank)
        return false;
    if (!ql)
        return n_in <= 4 && out[0].dtype == KILN_DTYPE_INT32 && zp_type(in, n_in, 2) &&
               zp_type(in, n_in, 3);
    return n_in <= 9 && is_8bit(out[0].dtype) && scale_type(in, n_in, 1) && zp_type(in, n_in, 2) &&
           scale_type(in, n_in, 4) && zp_type(in, n_in, 5) && scale_type(in, n_in, 6) &&
           zp_type(in, n_in, 7) && (absent_ti(in, n_in, 8) || in[8].dtype == KILN_DTYPE_INT32);
}

static kiln_status qconv_run(const kb_run *r) {
    const kn_node *node = r->node;
    bool ql = strcmp(node->op_type, "QLinearConv") == 0;
    int wi = ql ? 3 : 1;
    if (r->n_in <= wi)
        return kn_node_error(node, KILN_ERR_SHAPE, "%d inputs", r->n_in);
    const kb_tensor *x = &r->in[0], *w = &r->in[wi];
    kb_tensor *y = &r->out[0];
    if (!is_8bit(x->dtype) || !is_8bit(w->dtype))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "8-bit input and weights only");
    int nsp = x->rank - 2;
    if (nsp < 1 || nsp > 3 || w->rank != x->rank)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "input rank %d / weight rank %d (1 to 3 "
                             "spatial dims supported)", x->rank, w->rank);
    kn_window win;
    KN_TRY(kn_window_forward(node, nsp, x->dims + 2, w->dims + 2, false, &win));
    kc_qconv q;
    memset(&q, 0, sizeof q);
    q.batch = x->dims[0];
    q.cin = x->dims[1];
    q.cout = w->dims[0];
    q.group = kn_attr_int(node, "group", 1);
    if (q.group < 1 || q.cin != w->dims[1] * q.group || q.cout % q.group)
        return kn_node_error(node, KILN_ERR_SHAPE, "channels do not fit the group count");
    kc_window3(&win, nsp, q.in, q.out, q.kernel, q.stride, q.dil, q.pad0, NULL);
    if (kc_numel(y) != q.batch * q.cout * q.out[0] * q.out[1] * q.out[2])
        return kn_node_error(node, KILN_ERR_SHAPE, "Y does not match the convolution's output");
    q.x_dt = x->dtype;
    q.w_dt = w->dtype;
    q.y_dt = y->dtype;
    if (ql) {
        if (!is_8bit(y->dtype))
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "8-bit output only");
        q.requant = 1;
        KN_TRY(qparam(node, r->in, r->n_in, 1, 1, "x_scale", &q.xs));
        KN_TRY(qparam(node, r->in, r->n_in, 2, 1, "x_zero_point", &q.xz));
        KN_TRY(qparam(node, r->in, r->n_in, 4, q.cout, "w_scale", &q.ws));
        KN_TRY(qparam(node, r->in, r->n_in, 5, q.cout, "w_zero_point", &q.wz));
        KN_TRY(qparam(node, r->in, r->n_in, 6, 1, "y_scale", &q.ys));
        KN_TRY(qparam(node, r->in, r->n_in, 7, 1, "y_zero_point", &q.yz));
        KN_TRY(qparam(node, r->in, r->n_in, 8, q.cout, "B", &q.bias));
    } else {
        if (y->dtype != KILN_DTYPE_INT32)
            return kn_node_error(node, KILN_ERR_UNSUPPORTED, "int32 output only");
        KN_TRY(qparam(node, r->in, r->n_in, 2, 1, "x_zero_point", &q.xz));
        KN_TRY(qparam(node, r->in, r->n_in, 3, q.cout, "w_zero_point", &q.wz));
    }
    KC_CUDA(node, kc_qconv_run(x->data, w->data, y->data, &q, kc_stream(r)));
    return KILN_OK;
}

const kb_kernel kb_cuda_seq[] = {
    {"RNN", "", "cuda", rnn_supports, NULL, NULL, rnn_prepare, rnn_release, rnn_run},
    {"GRU", "", "cuda", rnn_supports, NULL, NULL, rnn_prepare, rnn_release, rnn_run},
    {"LSTM", "", "cuda", rnn_supports, NULL, NULL, rnn_prepare, rnn_release, rnn_run},
    {"MatMulInteger", "", "cuda", qmm_supports, NULL, NULL, NULL, NULL, qmm_run},
    {"QLinearMatMul", "", "cuda", qmm_supports, NULL, NULL, NULL, NULL, qmm_run},
    {"ConvInteger", "", "cuda", qconv_supports, NULL, NULL, NULL, NULL, qconv_run},
    {"QLinearConv", "", "cuda", qconv_supports, NULL, NULL, NULL, NULL, qconv_run},
};
const size_t kb_cuda_seq_count = KN_ARRAY_LEN(kb_cuda_seq);
