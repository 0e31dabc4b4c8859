/* k_nn_rnn.c - reference RNN, GRU and LSTM (float): forward, reverse and
 * bidirectional, sequence_lens, initial states, peepholes, clip, layout and
 * the ONNX activation list. Plain loops, one time step after another. */
#include <math.h>
#include <string.h>

#include "k_nn.h"

/* The geometry and activations: graph/ops_nn.h's kn_rnn (shared with the
 * CUDA backend). */
typedef kn_rnn rnn_geom;
typedef kn_rnn_fn act_fn;

static float act(const act_fn *f, float x) {
    switch (f->act) {
    case KN_RNN_RELU: return x > 0.f ? x : 0.f;
    case KN_RNN_TANH: return tanhf(x);
    case KN_RNN_SIGMOID: return 1.f / (1.f + expf(-x));
    case KN_RNN_AFFINE: return f->alpha * x + f->beta;
    case KN_RNN_LEAKY: return x >= 0.f ? x : f->alpha * x;
    case KN_RNN_THRESH: return x > f->alpha ? x : 0.f;
    case KN_RNN_SCALED_TANH: return f->alpha * tanhf(f->beta * x);
    case KN_RNN_HARD_SIGMOID: {
        float y = f->alpha * x + f->beta;
        return y < 0.f ? 0.f : (y > 1.f ? 1.f : y);
    }
    case KN_RNN_ELU: return x >= 0.f ? x : f->alpha * (expf(x) - 1.f);
    case KN_RNN_SOFTSIGN: return x / (1.f + fabsf(x));
    case KN_RNN_SOFTPLUS: return log1pf(expf(x));
    default: return x;
    }
}

static kiln_status rnn_setup(const kn_node *node, const kb_tensor *x, const kb_tensor *w,
                             rnn_geom *g) {
    return kn_rnn_setup(node, x->dims, w->dims, g);
}

/* Workspace floats: per direction h, c, h_next, gate pre-activations. */
static size_t rnn_ws_floats(const rnn_geom *g) {
    return (size_t)(g->batch * g->hidden) * (size_t)(3 + g->gates);
}

/* Other real types run on float copies placed after the state buffers: the
 * tensors (sequence_lens aside) that are not float. */
static size_t align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

static bool copied(const kb_tensor *t, int i) {
    return i != 4 && t->dtype != KILN_DTYPE_UNDEFINED && t->dtype != KILN_DTYPE_FLOAT;
}

static size_t copies_bytes(const kb_tensor *in, int n_in, const kb_tensor *out, int n_out) {
    size_t s = 0;
    for (int i = 0; i < n_in && i < 8; i++)
        if (copied(&in[i], i))
            s += align64((size_t)kb_numel(&in[i]) * sizeof(float));
    for (int i = 0; i < n_out && i < 3; i++)
        if (copied(&out[i], -1))
            s += align64((size_t)kb_numel(&out[i]) * sizeof(float));
    return s;
}

kiln_status kb_nn_rnn_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                              int n_in, const kb_tensor *out, int n_out, void **inst,
                              size_t *workspace) {
    rnn_geom g;
    KN_TRY(rnn_setup(node, &in[0], &in[1], &g));
    *workspace = align64(rnn_ws_floats(&g) * sizeof(float)) + copies_bytes(in, n_in, out, n_out);
    return KILN_OK;
}

/* Float views of the inputs (converted into mem) and outputs (in mem). */
static void float_views(const kb_run *r, uint8_t *mem, kb_tensor *in, kb_tensor *out) {
    for (int i = 0; i < r->n_in && i < 8; i++) {
        in[i] = r->in[i];
        if (!copied(&r->in[i], i) || !r->in[i].data)
            continue;
        int64_t n = kb_numel(&r->in[i]);
        float *f = (float *)mem;
        for (int64_t k = 0; k < n; k++)
            f[k] = (float)kb_ld(r->in[i].data, r->in[i].dtype, (size_t)k);
        in[i].data = f;
        in[i].dtype = KILN_DTYPE_FLOAT;
        mem += align64((size_t)n * sizeof(float));
    }
    for (int i = 0; i < r->n_out && i < 3; i++) {
        out[i] = r->out[i];
        if (!copied(&r->out[i], -1) || !r->out[i].data)
            continue;
        out[i].data = mem;
        out[i].dtype = KILN_DTYPE_FLOAT;
        mem += align64((size_t)kb_numel(&r->out[i]) * sizeof(float));
    }
}

static float clipv(const rnn_geom *g, float v) {
    if (g->clip > 0.f)
        return v < -g->clip ? -g->clip : (v > g->clip ? g->clip : v);
    return v;
}

/* Element offsets of X[t, b, :] and of Y[t, dir, b, :] for the layout. */
static int64_t x_off(const rnn_geom *g, int64_t t, int64_t b) {
    return (g->layout1 ? b * g->seq + t : t * g->batch + b) * g->input;
}
static int64_t y_off(const rnn_geom *g, int64_t t, int64_t d, int64_t b) {
    return g->layout1 ? ((b * g->seq + t) * g->dirs + d) * g->hidden
                      : ((t * g->dirs + d) * g->batch + b) * g->hidden;
}
static int64_t h_off(const rnn_geom *g, int64_t d, int64_t b) {
    return g->layout1 ? (b * g->dirs + d) * g->hidden : (d * g->batch + b) * g->hidden;
}

/* One direction's weights and activations. */
typedef struct dir_params {
    const float *w, *r;       /* [gates * H, input], [gates * H, H] */
    const float *wb, *rb;     /* [gates * H] each, or NULL */
    const float *p;           /* LSTM peepholes [3 * H] (i, o, f), or NULL */
    const act_fn *f, *g, *h;
} dir_params;

/* Gate pre-activations of one sequence at one step: x W^T + Wb, plus
 * h R^T + Rb, except for GRU's candidate gate whose recurrent part comes
 * after the reset gate (see gru_cell). */
static void gate_inputs(const rnn_geom *g, const dir_params *d, const float *xt, const float *h,
                        float *gates) {
    int64_t H = g->hidden;
    for (int64_t q = 0; q < g->gates * H; q++) {
        float s = d->wb ? d->wb[q] : 0.f;
        for (int64_t k = 0; k < g->input; k++)
            s += xt[k] * d->w[q * g->input + k];
        if (!(g->kind == KN_GRU && q >= 2 * H)) {
            s += d->rb ? d->rb[q] : 0.f;
            for (int64_t k = 0; k < H; k++)
                s += h[k] * d->r[q * H + k];
        }
        gates[q] = s;
    }
}

static void rnn_cell(const rnn_geom *g, const dir_params *d, const float *gates, float *hn) {
    for (int64_t j = 0; j < g->hidden; j++)
        hn[j] = act(d->f, clipv(g, gates[j]));
}

/* Gates z, r, h; rh: H floats of scratch for r * h (unit by unit). */
static void gru_cell(const rnn_geom *g, const dir_params *d, const float *gates, const float *h,
                     float *rh, float *hn) {
    int64_t H = g->hidden;
    if (!g->linear_before_reset)
        for (int64_t k = 0; k < H; k++)
            rh[k] = act(d->f, clipv(g, gates[H + k])) * h[k];
    for (int64_t j = 0; j < H; j++) {
        float z = act(d->f, clipv(g, gates[j]));
        float rr = act(d->f, clipv(g, gates[H + j]));
        const float *rw = d->r + (2 * H + j) * H;
        float s = d->rb ? d->rb[2 * H + j] : 0.f;
        if (g->linear_before_reset) { /* r * (h Rh^T + Rbh) */
            for (int64_t k = 0; k < H; k++)
                s += h[k] * rw[k];
            s *= rr;
        } else { /* (r * h) Rh^T + Rbh: unit k's reset gate scales h[k] */
            for (int64_t k = 0; k < H; k++)
                s += rh[k] * rw[k];
        }
        float ht = act(d->g, clipv(g, gates[2 * H + j] + s));
        hn[j] = (1.f - z) * ht + z * h[j];
    }
}

/* Gates i, o, f, c; peepholes i, o, f. Updates the cell state c in place. */
static void lstm_cell(const rnn_geom *g, const dir_params *d, const float *gates, float *c,
                      float *hn) {
    int64_t H = g->hidden;
    const float *p = d->p;
    for (int64_t j = 0; j < H; j++) {
        float gi = gates[j] + (p ? p[j] * c[j] : 0.f);
        float gf = gates[2 * H + j] + (p ? p[2 * H + j] * c[j] : 0.f);
        float it = act(d->f, clipv(g, gi));
        float ft = g->input_forget ? 1.f - it : act(d->f, clipv(g, gf));
        float ct = act(d->g, clipv(g, gates[3 * H + j]));
        float cn = ft * c[j] + it * ct;
        float go = gates[H + j] + (p ? p[H + j] * cn : 0.f);
        c[j] = cn;
        hn[j] = act(d->f, clipv(g, go)) * act(d->h, cn);
    }
}

kiln_status kb_nn_rnn_run(const kb_run *r) {
    if (r->n_in > 8 || r->n_out > 3)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "too many inputs or outputs");
    for (int i = 0; i < r->n_in; i++)
        if (i != 4 && r->in[i].data && !kb_is_real(r->in[i].dtype))
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "input %d of type %s", i,
                                 kiln_dtype_name(r->in[i].dtype));
    rnn_geom g;
    KN_TRY(rnn_setup(r->node, &r->in[0], &r->in[1], &g));
    size_t own = align64(rnn_ws_floats(&g) * sizeof(float));
    if (r->workspace_size < own + copies_bytes(r->in, r->n_in, r->out, r->n_out))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    kb_tensor in[8], out[3];
    float_views(r, (uint8_t *)r->workspace + own, in, out);
    const kb_tensor *X = &in[0], *W = &in[1], *R = &in[2];
#define IN(i) (r->n_in > (i) && in[i].data ? &in[i] : NULL)
    const kb_tensor *B = IN(3), *SL = IN(4), *H0 = IN(5), *C0 = IN(6), *P = IN(7);
#undef IN
    if (g.kind != KN_LSTM)
        C0 = P = NULL;
    float *Y = out[0].data;
    float *YH = r->n_out > 1 ? out[1].data : NULL;
    float *YC = r->n_out > 2 ? out[2].data : NULL;
    int64_t H = g.hidden, BH = g.batch * H, G = g.gates;
    size_t hbytes = sizeof(float) * (size_t)H;
    float *h = r->workspace, *c = h + BH, *hn = c + BH, *gates = hn + BH;
    if (Y) /* steps past a sequence's length stay zero */
        memset(Y, 0, sizeof(float) * (size_t)(g.seq * g.dirs * BH));
    for (int64_t dir = 0; dir < g.dirs; dir++) {
        bool rev = g.reverse_only || dir == 1;
        dir_params d = {(const float *)W->data + dir * G * H * g.input,
                        (const float *)R->data + dir * G * H * H,
                        B ? (const float *)B->data + dir * 2 * G * H : NULL,
                        B ? (const float *)B->data + dir * 2 * G * H + G * H : NULL,
                        P ? (const float *)P->data + dir * 3 * H : NULL,
                        &g.f[dir][0], &g.f[dir][1], &g.f[dir][2]};
        for (int64_t b = 0; b < g.batch; b++)
            for (int64_t j = 0; j < H; j++) {
                h[b * H + j] = H0 ? ((const float *)H0->data)[h_off(&g, dir, b) + j] : 0.f;
                c[b * H + j] = C0 ? ((const float *)C0->data)[h_off(&g, dir, b) + j] : 0.f;
            }
        for (int64_t step = 0; step < g.seq; step++) {
            for (int64_t b = 0; b < g.batch; b++) {
                int64_t len = SL ? (int64_t)kb_ld(SL->data, SL->dtype, (size_t)b) : g.seq;
                if (step >= len)
                    continue; /* this sequence is done: its state stays */
                int64_t t = rev ? len - 1 - step : step;
                float *hb = h + b * H, *gb = gates + b * G * H, *hnb = hn + b * H;
                gate_inputs(&g, &d, (const float *)X->data + x_off(&g, t, b), hb, gb);
                if (g.kind == KN_RNN)
                    rnn_cell(&g, &d, gb, hnb);
                else if (g.kind == KN_GRU)
                    gru_cell(&g, &d, gb, hb, c + b * H, hnb); /* c: scratch (no cell state) */
                else
                    lstm_cell(&g, &d, gb, c + b * H, hnb);
                memcpy(hb, hnb, hbytes);
                if (Y)
                    memcpy(Y + y_off(&g, t, dir, b), hnb, hbytes);
            }
        }
        for (int64_t b = 0; b < g.batch; b++) {
            if (YH)
                memcpy(YH + h_off(&g, dir, b), h + b * H, hbytes);
            if (YC)
                memcpy(YC + h_off(&g, dir, b), c + b * H, hbytes);
        }
    }
    for (int i = 0; i < r->n_out && i < 3; i++) /* back from the float copies */
        if (out[i].data && out[i].data != r->out[i].data)
            for (int64_t k = 0; k < kb_numel(&r->out[i]); k++)
                kb_st(r->out[i].data, r->out[i].dtype, (size_t)k, ((const float *)out[i].data)[k]);
    return KILN_OK;
}
