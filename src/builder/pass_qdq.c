/* pass_qdq.c - explicit quantization: the Q/DQ placement of the source
 * graph becomes quantized layers (kiln::QConv, kiln::QMatMul; see
 * graph/qlayer.h).
 *
 *   DQ(X) -> Conv / MatMul / Gemm (W = DQ(constant), bias) -> then, each
 *   read once: Relu, Clip, Add(constant: a per-channel bias), Add(DQ(Z) or a
 *   float Z of the output's shape: the residual), Q->DQ pairs between them
 *   (kept as QDQ stages: the graph's own rounding) -> Q
 *
 * becomes one layer reading the quantized X and writing the quantized Y,
 * its scales folded into the epilogue; the Q/DQ pairs between two such
 * layers disappear with it (a DQ whose readers all became layers is dead
 * code). A chain with no Q at its end gives a layer with a float output;
 * an op whose inputs are not DQ outputs stays float, as the graph places
 * it. QLinearConv / QLinearMatMul / ConvInteger / MatMulInteger become the
 * same layers. Runs before constant folding, which would otherwise fold
 * DQ(constant weights) into float weights. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "graph/qlayer.h"
#include "kiln/kiln_builder.h"
#include "passes.h"

/* A DequantizeLinear or QuantizeLinear node's operands. */
typedef struct qparam {
    int node;
    int x;          /* DQ: the quantized input; Q: the float input */
    int y;          /* the output */
    int scale, zp;  /* tensors (zp -1 when absent) */
    int64_t axis;
    int64_t n;      /* scale values */
    kiln_dtype qt;  /* the 8-bit (or int32, DQ only) type */
} qparam;

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }
/* FP8 E4M3 (ModelOpt's FP8 form): layers kiln::FP8Conv / kiln::FP8MatMul */
static bool is_f8(kiln_dtype t) { return t == KILN_DTYPE_FLOAT8E4M3FN; }

/* Whether every value of the float8 zero point t is 0 (or -0). */
static bool f8_zero(const kn_net *net, int t) {
    if (t < 0)
        return true;
    const kn_tdata *v = &net->tensors[t].value;
    int64_t n = kpass_numel(v);
    for (int64_t k = 0; k < n; k++)
        if ((((const uint8_t *)v->data)[k] & 0x7fu) != 0)
            return false;
    return true;
}

/* Element type of t (constant, input, inferred). */
static kiln_dtype dtype_of(const kpass *p, int t) {
    if (kpass_is_const(p->net, t))
        return p->net->tensors[t].value.dtype;
    return kpass_dtype(p, t);
}

/* Constant scale (float, positive) and zero point, per tensor or one per
 * channel, no blocks. */
static bool params_ok(const kpass *p, const kn_node *n, qparam *q) {
    const kn_net *net = p->net;
    if (n->n_in < 2 || n->n_out < 1 || n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0)
        return false;
    if (kn_attr_int(n, "block_size", 0) != 0)
        return false;
    q->node = -1;
    q->x = n->in[0];
    q->y = n->out[0];
    q->scale = n->in[1];
    q->zp = n->n_in > 2 ? n->in[2] : -1;
    q->axis = kn_attr_int(n, "axis", 1);
    if (!kpass_is_const(net, q->scale) || net->tensors[q->scale].value.dtype != KILN_DTYPE_FLOAT)
        return false;
    const kn_tdata *s = &net->tensors[q->scale].value;
    q->n = kpass_numel(s);
    for (int64_t k = 0; k < q->n; k++)
        if (!(kpass_value_at(s, k) > 0.0))
            return false;
    if (q->zp >= 0 && (!kpass_is_const(net, q->zp) || kpass_numel(&net->tensors[q->zp].value) != q->n))
        return false;
    return true;
}

/* t's producer as a DequantizeLinear (live; it may have other readers). */
static bool dq_of(const kpass *p, int t, qparam *q) {
    if (t < 0)
        return false;
    int i = p->net->tensors[t].producer;
    if (i < 0 || p->net->nodes[i].dead || !kpass_is(&p->net->nodes[i], "DequantizeLinear"))
        return false;
    const kn_node *n = &p->net->nodes[i];
    if (!params_ok(p, n, q))
        return false;
    q->node = i;
    q->qt = q->zp >= 0 ? p->net->tensors[q->zp].value.dtype : dtype_of(p, q->x);
    if (dtype_of(p, q->x) != q->qt)
        return false;
    if (is_f8(q->qt))
        return f8_zero(p->net, q->zp);
    return is_8bit(q->qt) || q->qt == KILN_DTYPE_INT32;
}

/* Node i as a per-tensor QuantizeLinear to an 8-bit type. */
static bool q_node(const kpass *p, int i, qparam *q) {
    const kn_node *n = &p->net->nodes[i];
    if (!kpass_is(n, "QuantizeLinear") || !params_ok(p, n, q) || q->n != 1)
        return false;
    q->node = i;
    q->qt = q->zp >= 0 ? p->net->tensors[q->zp].value.dtype
                       : (kiln_dtype)kn_attr_int(n, "output_dtype", KILN_DTYPE_UINT8);
    if (is_f8(q->qt))
        return f8_zero(p->net, q->zp);
    return is_8bit(q->qt);
}

static double scalar_of(const kn_net *net, int t, double dflt) {
    return t < 0 ? dflt : kpass_value_at(&net->tensors[t].value, 0);
}

/* Whether the DQ q and the Q before it describe one rounding. */
static bool same_params(const kn_net *net, const qparam *a, const qparam *b) {
    return a->n == 1 && b->n == 1 &&
           (float)scalar_of(net, a->scale, 1) == (float)scalar_of(net, b->scale, 1) &&
           scalar_of(net, a->zp, 0) == scalar_of(net, b->zp, 0) && a->qt == b->qt;
}

/* What a layer is being built from. */
typedef struct qchain {
    int op;                       /* the Conv / MatMul / Gemm node */
    bool conv;
    int64_t cout;                 /* output channels, -1 when unknown */
    qparam x, w;
    int bias_i32;                 /* int32 constant for B, or -1 */
    float *cvals;                 /* C: one float per channel, or NULL */
    int n_stages;
    int64_t stage[KN_QL_MAX_STAGES];
    float mid_scale[KN_QL_MAX_STAGES];
    int64_t mid_zp[KN_QL_MAX_STAGES], mid_type[KN_QL_MAX_STAGES];
    int n_mid;
    float clip_lo, clip_hi;
    bool clip;
    int z, zs, zz;                /* the residual and its scale / zero point (-1: none) */
    int kill[3 * KN_QL_MAX_STAGES + 2];
    int n_kill;
    qparam yq;                    /* the final Q (node -1: float output) */
    bool end_q;                   /* the walk stopped at yq */
    int out;                      /* the layer's output tensor */
    bool f8;                      /* an FP8 layer (X, W float8e4m3fn) */
} qchain;

/* Float values of constant t or of DQ(constant t) (per tensor, or one
 * scale per element of a 1-D constant); NULL when neither. */
static float *const_values(const kpass *p, int t, int64_t *count) {
    const kn_net *net = p->net;
    qparam d;
    if (kpass_is_const(net, t)) {
        const kn_tdata *v = &net->tensors[t].value;
        if (v->dtype != KILN_DTYPE_FLOAT)
            return NULL;
        float *out = NULL;
        if (kpass_const_floats(net, t, &out) != KILN_OK)
            return NULL;
        *count = kpass_numel(v);
        return out;
    }
    if (!dq_of(p, t, &d) || !kpass_is_const(net, d.x) || is_f8(d.qt))
        return NULL;
    const kn_tdata *v = &net->tensors[d.x].value;
    int64_t n = kpass_numel(v);
    if (d.n != 1 && (v->rank != 1 || d.n != n))
        return NULL;
    float *out = kn_malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!out)
        return NULL;
    for (int64_t k = 0; k < n; k++) {
        int64_t c = d.n == 1 ? 0 : k;
        double zp = d.zp >= 0 ? kpass_value_at(&net->tensors[d.zp].value, c) : 0.0;
        out[k] = kn_q_dequantize(kpass_value_at(v, k), zp,
                                 (float)kpass_value_at(&net->tensors[d.scale].value, c));
    }
    *count = n;
    return out;
}

/* Whether the constant's shape is one value per output channel (or one
 * value) as the op broadcasts it: [K, 1, 1] / [1, K, 1, 1] for a conv,
 * [.., 1, K] for a matrix op. */
static bool per_channel_shape(const qchain *c, const kn_tdata *v) {
    int64_t n = kpass_numel(v);
    if (n == 1)
        return true;
    if (n != c->cout)
        return false;
    int at = -1;
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] != 1)
            at = d;
    if (c->conv) /* the channel dim is the third from the end (2-D) or second (1-D) */
        return at >= 0 && (v->rank - at == 3 || v->rank - at == 2);
    return at == v->rank - 1;
}

/* The shape of constant t or of the input of the DQ producing it. */
static const kn_tdata *const_shape(const kpass *p, int t) {
    qparam d;
    if (kpass_is_const(p->net, t))
        return &p->net->tensors[t].value;
    if (dq_of(p, t, &d) && kpass_is_const(p->net, d.x))
        return &p->net->tensors[d.x].value;
    return NULL;
}

static bool push_stage(qchain *c, int64_t s) {
    if (c->n_stages == KN_QL_MAX_STAGES)
        return false;
    c->stage[c->n_stages++] = s;
    return true;
}

/* Add a per-channel float addend (a C stage); false when the chain has one. */
static bool take_bias(qchain *c, float *v, int64_t n) {
    if (c->cvals || c->cout <= 0 || !push_stage(c, KN_QS_BIAS)) {
        kn_free(v);
        return false;
    }
    c->cvals = kn_malloc(sizeof(float) * (size_t)c->cout);
    if (!c->cvals) {
        kn_free(v);
        c->n_stages--;
        return false;
    }
    for (int64_t k = 0; k < c->cout; k++)
        c->cvals[k] = v[n == 1 ? 0 : k];
    kn_free(v);
    return true;
}

/* One step of the walk from tensor *cur: absorb its sole reader when it is
 * a stage; false when the chain ends here. */
static bool walk_step(kpass *p, qchain *c, int *cur) {
    kn_net *net = p->net;
    int r = kpass_sole_reader(p, *cur);
    if (r < 0)
        return false;
    const kn_node *n = &net->nodes[r];
    if (kpass_is(n, "QuantizeLinear")) {
        qparam q, d;
        if (!q_node(p, r, &q) || q.x != *cur || is_f8(q.qt) != c->f8)
            return false;
        c->yq = q; /* the end, unless a DQ of the same rounding continues the chain */
        if (c->f8) { /* an FP8 layer has no QDQ stage: its Q ends it */
            c->end_q = true;
            return false;
        }
        int di = kpass_sole_reader(p, q.y);
        if (di < 0 || !kpass_is(&net->nodes[di], "DequantizeLinear") || !dq_of(p, net->nodes[di].out[0], &d) ||
            d.x != q.y || !same_params(net, &q, &d) || c->n_mid == KN_QL_MAX_STAGES ||
            c->n_kill + 2 > (int)KN_ARRAY_LEN(c->kill) || !push_stage(c, KN_QS_QDQ)) {
            c->end_q = true;
            return false;
        }
        c->mid_scale[c->n_mid] = (float)scalar_of(net, q.scale, 1);
        c->mid_zp[c->n_mid] = (int64_t)scalar_of(net, q.zp, 0);
        c->mid_type[c->n_mid] = q.qt;
        c->n_mid++;
        c->kill[c->n_kill++] = r;
        c->kill[c->n_kill++] = di;
        *cur = d.y;
        return true;
    }
    if (c->n_kill + 1 > (int)KN_ARRAY_LEN(c->kill))
        return false;
    if (kpass_is(n, "Relu") && n->n_in == 1) {
        if (!push_stage(c, KN_QS_RELU))
            return false;
    } else if (kpass_is(n, "Clip") && !c->clip) {
        double lo = -INFINITY, hi = INFINITY;
        if ((n->n_in > 1 && n->in[1] >= 0 && !kpass_const_scalar(net, n->in[1], &lo)) ||
            (n->n_in > 2 && n->in[2] >= 0 && !kpass_const_scalar(net, n->in[2], &hi)))
            return false;
        if (n->n_in < 2) {
            lo = kn_attr_float(n, "min", -INFINITY);
            hi = kn_attr_float(n, "max", INFINITY);
        }
        if (!push_stage(c, KN_QS_CLIP))
            return false;
        c->clip = true;
        c->clip_lo = (float)lo;
        c->clip_hi = (float)hi;
    } else if (kpass_is(n, "Add") && n->n_in == 2 && n->in[0] != n->in[1]) {
        int other = n->in[0] == *cur ? n->in[1] : n->in[0];
        const kn_tdata *cs = const_shape(p, other);
        qparam d;
        if (cs) {
            int64_t cnt = 0;
            float *v = per_channel_shape(c, cs) ? const_values(p, other, &cnt) : NULL;
            if (!v || !take_bias(c, v, cnt))
                return false;
        } else if (c->z < 0 && kpass_same_shape(p, other, *cur)) {
            if (dq_of(p, other, &d) && (c->f8 ? is_f8(d.qt) : is_8bit(d.qt)) && d.n == 1) {
                c->z = d.x;
                c->zs = d.scale;
                c->zz = d.zp;
            } else if (kpass_dtype(p, other) == KILN_DTYPE_FLOAT) {
                c->z = other;
            } else {
                return false;
            }
            if (!push_stage(c, KN_QS_ADD))
                return false;
        } else {
            return false;
        }
    } else {
        return false;
    }
    c->kill[c->n_kill++] = r;
    *cur = n->out[0];
    return true;
}

/* The weights: DQ of an 8-bit tensor, constant (per tensor or per output
 * channel along `axis`) or not (per tensor). */
static bool weights_ok(const kpass *p, qchain *c, int t, int axis) {
    if (!dq_of(p, t, &c->w) || (c->f8 ? !is_f8(c->w.qt) : !is_8bit(c->w.qt)))
        return false;
    if (!kpass_is_const(p->net, c->w.x))
        return c->w.n == 1;
    const kn_tdata *v = &p->net->tensors[c->w.x].value;
    if (c->w.n == 1)
        return true;
    int64_t ax = c->w.axis < 0 ? c->w.axis + v->rank : c->w.axis;
    return ax == axis && v->dims[axis] == c->w.n;
}

/* The bias of a Conv / Gemm: int32 B when it is DQ(int32) with scale
 * x_scale * w_scale (what quantize_static writes), else a float C stage. */
static bool bias_ok(kpass *p, qchain *c, int t) {
    kn_net *net = p->net;
    qparam d;
    if (!c->f8 && dq_of(p, t, &d) && d.qt == KILN_DTYPE_INT32 && kpass_is_const(net, d.x) &&
        kpass_numel(&net->tensors[d.x].value) == c->cout) {
        bool match = true;
        for (int64_t k = 0; d.zp >= 0 && k < d.n && match; k++)
            match = kpass_value_at(&net->tensors[d.zp].value, k) == 0.0;
        float xs = (float)scalar_of(net, c->x.scale, 1);
        for (int64_t k = 0; k < c->cout && match; k++) {
            float want = xs * (float)kpass_value_at(&net->tensors[c->w.scale].value, c->w.n == 1 ? 0 : k);
            float have = (float)kpass_value_at(&net->tensors[d.scale].value, d.n == 1 ? 0 : k);
            match = fabsf(want - have) <= 1e-6f * want;
        }
        if (match) {
            c->bias_i32 = d.x;
            return true;
        }
    }
    const kn_tdata *cs = const_shape(p, t);
    int64_t cnt = 0;
    float *v = cs && kpass_numel(cs) == c->cout ? const_values(p, t, &cnt) : NULL;
    return v && take_bias(c, v, cnt);
}

static kiln_status add_floats(kn_net *net, const char *hint, float *v, int64_t n, int *index) {
    kn_tdata d = {0};
    d.dtype = KILN_DTYPE_FLOAT;
    d.rank = 1;
    d.dims[0] = n;
    d.data = v;
    d.nbytes = sizeof(float) * (size_t)n;
    return kpass_add_const(net, hint, &d, index);
}

static const char *short_type(kiln_dtype t) {
    return t == KILN_DTYPE_UINT8 ? "u8" : t == KILN_DTYPE_INT8 ? "s8" : t == KILN_DTYPE_INT32 ? "s32"
           : t == KILN_DTYPE_FLOAT8E4M3FN ? "e4m3" : "f32";
}

static const char *stage_name(int64_t s) {
    switch (s) {
    case KN_QS_QDQ: return "qdq";
    case KN_QS_BIAS: return "bias";
    case KN_QS_ADD: return "add";
    case KN_QS_RELU: return "relu";
    case KN_QS_CLIP: return "clip";
    default: return "?";
    }
}

/* The layer's precision and scales in words (attribute quant_info, which
 * kiln inspect shows): "u8 x s8 -> u8; x 0.0123 zp 128; w 64 scales
 * 0.0011..0.0093; y 0.0456 zp 0; stages qdq(0.05 zp 3),add,relu". */
static kiln_status set_info(kn_net *net, kn_node *n, const qchain *c) {
    char buf[512];
    size_t o = 0;
    kiln_dtype yt = c->yq.node >= 0 ? c->yq.qt : KILN_DTYPE_FLOAT;
#define PUT(...) o += (size_t)snprintf(buf + o, o < sizeof buf ? sizeof buf - o : 0, __VA_ARGS__)
    PUT("%s x %s -> %s; x %.6g zp %g", short_type(c->x.qt), short_type(c->w.qt), short_type(yt),
        scalar_of(net, c->x.scale, 1), scalar_of(net, c->x.zp, 0));
    const kn_tdata *ws = &net->tensors[c->w.scale].value;
    double lo = INFINITY, hi = 0;
    for (int64_t k = 0; k < c->w.n; k++) {
        double v = kpass_value_at(ws, k);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    if (c->w.n == 1)
        PUT("; w %.6g", lo);
    else
        PUT("; w %lld scales %.4g..%.4g", (long long)c->w.n, lo, hi);
    if (c->yq.node >= 0)
        PUT("; y %.6g zp %g", scalar_of(net, c->yq.scale, 1), scalar_of(net, c->yq.zp, 0));
    if (c->z >= 0 && c->zs >= 0)
        PUT("; z %.6g zp %g", scalar_of(net, c->zs, 1), scalar_of(net, c->zz, 0));
    int m = 0;
    for (int i = 0; i < c->n_stages; i++) {
        PUT("%s%s", i ? "," : "; stages ", stage_name(c->stage[i]));
        if (c->stage[i] == KN_QS_QDQ) {
            PUT("(%.4g zp %lld)", (double)c->mid_scale[m], (long long)c->mid_zp[m]);
            m++;
        }
    }
#undef PUT
    buf[sizeof buf - 1] = 0;
    return kn_node_set_string(n, "quant_info", buf);
}

/* Rewrite c->op as the quantized layer. */
static kiln_status build_layer(kpass *p, qchain *c) {
    kn_net *net = p->net;
    int i = c->op;
    int cidx = -1;
    if (c->cvals) {
        kiln_status st = add_floats(net, "qdq_bias", c->cvals, c->cout, &cidx);
        if (st != KILN_OK)
            return st;
        c->cvals = NULL; /* the constant owns them */
    }
    kn_node *n = &net->nodes[i];
    char base[16];
    snprintf(base, sizeof base, "%s", n->op_type);
    bool gemm = strcmp(base, "Gemm") == 0;
    int64_t tb = gemm ? kn_attr_int(n, "transB", 0) : 0;
    KN_TRY(kpass_retype(n, c->f8 ? (c->conv ? "FP8Conv" : "FP8MatMul") : c->conv ? "QConv" : "QMatMul",
                        KN_DOMAIN_KILN, 1));
    n = &net->nodes[i];
    int ins[KN_QL_N_IN];
    for (int k = 0; k < KN_QL_N_IN; k++)
        ins[k] = -1;
    ins[KN_QL_X] = c->x.x, ins[KN_QL_XS] = c->x.scale, ins[KN_QL_XZ] = c->x.zp;
    ins[KN_QL_W] = c->w.x, ins[KN_QL_WS] = c->w.scale, ins[KN_QL_WZ] = c->w.zp;
    if (c->yq.node >= 0)
        ins[KN_QL_YS] = c->yq.scale, ins[KN_QL_YZ] = c->yq.zp;
    ins[KN_QL_B] = c->bias_i32;
    ins[KN_QL_Z] = c->z, ins[KN_QL_ZS] = c->zs, ins[KN_QL_ZZ] = c->zz;
    ins[KN_QL_C] = cidx;
    if (c->f8) /* FP8's zero points are 0 (checked): the layer takes none */
        ins[KN_QL_XZ] = ins[KN_QL_WZ] = ins[KN_QL_YZ] = ins[KN_QL_ZZ] = -1;
    int last = KN_QL_N_IN;
    while (last > 0 && ins[last - 1] < 0)
        last--;
    for (int k = 0; k < last; k++)
        KN_TRY(kpass_set_input(&net->nodes[i], k, ins[k]));
    n = &net->nodes[i];
    n->n_in = last;
    if (!c->conv)
        KN_TRY(kn_node_set_int(n, "trans_b", tb));
    KN_TRY(kn_node_set_int(n, "to", c->yq.node >= 0 ? c->yq.qt : KILN_DTYPE_FLOAT));
    if (c->n_stages) {
        KN_TRY(kn_node_set_ints(n, "stages", c->stage, (size_t)c->n_stages));
    }
    if (c->n_mid) {
        KN_TRY(kn_node_set_floats(n, "mid_scales", c->mid_scale, (size_t)c->n_mid));
        KN_TRY(kn_node_set_ints(n, "mid_zps", c->mid_zp, (size_t)c->n_mid));
        KN_TRY(kn_node_set_ints(n, "mid_types", c->mid_type, (size_t)c->n_mid));
    }
    if (c->f8 && c->yq.node >= 0)
        KN_TRY(kn_node_set_int(n, "saturate", kn_attr_int(&net->nodes[c->yq.node], "saturate", 1)));
    if (c->clip) {
        KN_TRY(kn_node_set_float(n, "clip_min", c->clip_lo));
        KN_TRY(kn_node_set_float(n, "clip_max", c->clip_hi));
    }
    KN_TRY(set_info(net, n, c));
    kn_log(KILN_LOG_VERBOSE, "qdq: %s '%s' -> kiln::%s (%s output, %d stage(s))", base,
           n->name, n->op_type, kiln_dtype_name(c->yq.node >= 0 ? c->yq.qt : KILN_DTYPE_FLOAT),
           c->n_stages);
    for (int k = 0; k < c->n_kill; k++) {
        KN_TRY(kpass_join_name(&net->nodes[i], net->nodes[c->kill[k]].name));
        kpass_kill(p, c->kill[k]);
    }
    kpass_set_output(net, i, 0, c->out);
    kpass_touch(p, i);
    return KILN_OK;
}

/* DQ -> Conv / MatMul / Gemm -> stages -> Q at node i. */
static kiln_status try_chain(kpass *p, int i, bool int8_ok, bool fp8_ok, bool *done) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    *done = false;
    qchain c;
    memset(&c, 0, sizeof c);
    c.op = i;
    c.bias_i32 = c.z = c.zs = c.zz = -1;
    c.yq.node = -1;
    c.cout = -1;
    c.conv = kpass_is(n, "Conv");
    bool gemm = kpass_is(n, "Gemm");
    if (n->n_in < 2 || n->n_out < 1 || !dq_of(p, n->in[0], &c.x) || c.x.n != 1)
        return KILN_OK;
    c.f8 = is_f8(c.x.qt);
    if (c.f8 ? !fp8_ok : !is_8bit(c.x.qt) || !int8_ok)
        return KILN_OK;
    if (c.conv) {
        if (!weights_ok(p, &c, n->in[1], 0))
            return KILN_OK;
    } else if (gemm) {
        if (kn_attr_int(n, "transA", 0) || kn_attr_float(n, "alpha", 1.f) != 1.f ||
            (n->n_in > 2 && n->in[2] >= 0 && kn_attr_float(n, "beta", 1.f) != 1.f))
            return KILN_OK;
        if (!weights_ok(p, &c, n->in[1], kn_attr_int(n, "transB", 0) ? 0 : 1))
            return KILN_OK;
    } else {
        qparam w;
        if (!dq_of(p, n->in[1], &w))
            return KILN_OK;
        int rank = kpass_is_const(net, w.x) ? net->tensors[w.x].value.rank : -1;
        if (!weights_ok(p, &c, n->in[1], rank > 0 ? rank - 1 : 1))
            return KILN_OK;
        /* the layer's forms: W 2-D (or with unit batch dims), or W of X's rank */
        int xr = kpass_rank(p, n->in[0]), wr = kpass_rank(p, w.x);
        if (xr < 2 || wr < 2)
            return KILN_OK;
        if (rank > 2) {
            const kn_tdata *wv = &net->tensors[w.x].value;
            if (kn_numel(rank - 2, wv->dims) != 1)
                return KILN_OK;
        } else if (rank < 0 && wr > 2 && wr != xr) {
            return KILN_OK;
        }
    }
    if (kpass_is_const(net, c.w.x)) {
        const kn_tdata *wv = &net->tensors[c.w.x].value;
        if (wv->rank < 2)
            return KILN_OK;
        bool tb = gemm && kn_attr_int(n, "transB", 0);
        c.cout = c.conv || tb ? wv->dims[0] : wv->dims[wv->rank - 1];
    }
    if (c.w.n > 1 && c.cout != c.w.n)
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p));
    if (c.cout < 0) { /* from the output's shape */
        int y = n->out[0];
        kn_tinfo ti;
        if (kpass_static_shape(p, y, &ti) && ti.rank >= 1)
            c.cout = ti.dims[ti.rank - 1];
    }
    if (n->n_in > 2 && n->in[2] >= 0) {
        if (c.cout <= 0 || !bias_ok(p, &c, n->in[2]))
            goto out;
    }
    int cur = n->out[0];
    while (walk_step(p, &c, &cur)) {
    }
    if (c.end_q) { /* the walk stopped at a Q: it ends the layer */
        c.kill[c.n_kill++] = c.yq.node;
        cur = c.yq.y;
    } else if (c.n_stages > 0 && c.stage[c.n_stages - 1] == KN_QS_QDQ) {
        /* a trailing Q->DQ: the Q ends the layer, its DQ stays for the readers */
        c.n_stages--;
        c.n_mid--;
        c.n_kill -= 1; /* keep the DQ */
        cur = c.yq.y;
    } else {
        c.yq.node = -1;
    }
    c.out = cur;
    KN_TRY(build_layer(p, &c));
    *done = true;
out:
    kn_free(c.cvals);
    return KILN_OK;
}

/* QLinearConv / QLinearMatMul / ConvInteger / MatMulInteger as the layers. */
static kiln_status try_qlinear(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    kn_node *n = &net->nodes[i];
    *done = false;
    bool conv = kpass_is(n, "QLinearConv") || kpass_is(n, "ConvInteger");
    bool linear = kpass_is(n, "QLinearConv") || kpass_is(n, "QLinearMatMul");
    int64_t to;
    if (linear) {
        if (n->n_in < 8 || n->in[7] < 0)
            return KILN_OK;
        to = dtype_of(p, n->in[7]);
        if (!is_8bit((kiln_dtype)to))
            return KILN_OK;
        /* the layers take a per-tensor X (QLinearMatMul may have per-row A
         * parameters) and constant scales */
        for (int k = 1; k <= 2; k++)
            if (n->n_in > k && n->in[k] >= 0 &&
                (!kpass_is_const(net, n->in[k]) || kpass_numel(&net->tensors[n->in[k]].value) != 1))
                return KILN_OK;
        for (int k = 4; k <= 7; k++)
            if (n->n_in > k && n->in[k] >= 0 && !kpass_is_const(net, n->in[k]))
                return KILN_OK;
        KN_TRY(kpass_retype(n, conv ? "QConv" : "QMatMul", KN_DOMAIN_KILN, 1));
    } else {
        /* (X, W, x_zp?, w_zp?) -> X, -, x_zp, W, -, w_zp */
        int x = n->in[0], w = n->n_in > 1 ? n->in[1] : -1;
        int xz = n->n_in > 2 ? n->in[2] : -1, wz = n->n_in > 3 ? n->in[3] : -1;
        if (x < 0 || w < 0)
            return KILN_OK;
        if (xz >= 0 && (!kpass_is_const(net, xz) || kpass_numel(&net->tensors[xz].value) != 1))
            return KILN_OK; /* a per-row zero point of MatMulInteger has no layer form */
        to = KILN_DTYPE_INT32;
        KN_TRY(kpass_retype(n, conv ? "QConv" : "QMatMul", KN_DOMAIN_KILN, 1));
        n = &net->nodes[i];
        KN_TRY(kpass_set_input(n, KN_QL_WZ, wz));
        n = &net->nodes[i];
        n->in[KN_QL_X] = x;
        n->in[KN_QL_XS] = -1;
        n->in[KN_QL_XZ] = xz;
        n->in[KN_QL_W] = w;
        n->in[KN_QL_WS] = -1;
    }
    n = &net->nodes[i];
    KN_TRY(kn_node_set_int(n, "to", to));
    if (!conv)
        KN_TRY(kn_node_set_int(n, "trans_b", 0));
    kpass_touch(p, i);
    *done = true;
    return KILN_OK;
}

/* DQ(x) -> a layout op or MaxPool -> Q of the same scale, zero point and
 * type: the op on x itself (element moves commute with DQ, and
 * Q(DQ(v)) == v; DQ is monotone (scale > 0), so the max of the DQs is the
 * DQ of the max, and MaxPool's padding never wins). Inputs past the first
 * are constants. An 8-bit MaxPool between two QConvs joins their NHWC
 * region (qdq_nhwc). */
static bool moves_values(const kn_node *n) {
    return kpass_is(n, "Flatten") || kpass_is(n, "Reshape") ||
           kpass_is(n, "Transpose") || kpass_is(n, "Squeeze") || kpass_is(n, "Unsqueeze") ||
           (kpass_is(n, "MaxPool") && n->n_out == 1);
}

static kiln_status try_pool(kpass *p, int i, bool *done) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    *done = false;
    qparam d, q;
    if (n->n_in < 1 || n->n_out != 1 || n->out[0] < 0 || !dq_of(p, n->in[0], &d) ||
        !is_8bit(d.qt) || d.n != 1)
        return KILN_OK;
    for (int k = 1; k < n->n_in; k++)
        if (n->in[k] >= 0 && !kpass_is_const(net, n->in[k]))
            return KILN_OK;
    int r = kpass_sole_reader(p, n->out[0]);
    if (r < 0 || !q_node(p, r, &q) || !same_params(net, &q, &d))
        return KILN_OK;
    int out = q.y;
    KN_TRY(kpass_set_input(&net->nodes[i], 0, d.x));
    KN_TRY(kpass_join_name(&net->nodes[i], net->nodes[r].name));
    kpass_kill(p, r);
    kpass_set_output(net, i, 0, out);
    kpass_touch(p, i);
    kn_log(KILN_LOG_VERBOSE, "qdq: %s '%s' on %s", net->nodes[i].op_type, net->nodes[i].name,
           kiln_dtype_name(d.qt));
    *done = true;
    return KILN_OK;
}

static bool candidate(const kn_node *n) {
    return kpass_is(n, "Conv") || kpass_is(n, "MatMul") || kpass_is(n, "Gemm") || moves_values(n) ||
           kpass_is(n, "QLinearConv") || kpass_is(n, "QLinearMatMul") ||
           kpass_is(n, "ConvInteger") || kpass_is(n, "MatMulInteger");
}

static bool has_dq(const kn_node *n) {
    return kpass_is(n, "DequantizeLinear") || kpass_is(n, "QLinearConv") ||
           kpass_is(n, "QLinearMatMul") || kpass_is(n, "ConvInteger") ||
           kpass_is(n, "MatMulInteger");
}

/* ---- an NHWC region of 8-bit convolutions ----
 * Once every layer is made, each 2-D kiln::QConv moves to channels-last
 * (channels_last = 1: X, Z and Y are [N, H, W, C]; W stays [K, C/g, R, S]):
 * oneDNN's INT8 convolutions compute in NHWC, so the 8-bit tensors between
 * two such layers stay NHWC and no reorder runs between them (an 8-bit
 * MaxPool reading such a layer joins as kiln::MaxPool). A Transpose
 * makes the NCHW tensor where something else reads a layer's output (or it
 * is a graph output; the tensor keeps its name), and the NHWC one where a
 * layer reads a tensor from outside; dead code drops those nobody reads. */
static const int64_t QPERM_LAST[4] = {0, 2, 3, 1}, QPERM_FIRST[4] = {0, 3, 1, 2};

static kiln_status add_transpose(kn_net *net, int from, int to, bool to_last) {
    char name[512];
    snprintf(name, sizeof name, "reformat %s %s", to_last ? "NCHW->NHWC" : "NHWC->NCHW",
             net->tensors[to_last ? from : to].name);
    int idx;
    KN_TRY(kn_net_add_node(net, name, "Transpose", "", 13, 1, &from, 1, &to, &idx));
    return kn_node_set_ints(&net->nodes[idx], "perm", to_last ? QPERM_LAST : QPERM_FIRST, 4);
}

static bool nhwc_candidate(const kpass *p, int i) {
    const kn_node *n = &p->net->nodes[i];
    return kpass_free(p, i) && kpass_is_kiln(n, "QConv") && !kn_attr_int(n, "channels_last", 0) &&
           n->n_in > KN_QL_W && n->in[KN_QL_X] >= 0 && kpass_rank(p, n->in[KN_QL_X]) == 4 &&
           n->out[0] >= 0 && kpass_rank(p, n->out[0]) == 4;
}

/* An 8-bit MaxPool (no Indices) reading a region QConv's output joins the
 * region as kiln::MaxPool (channels-last, the same values). */
static bool nhwc_pool(const kpass *p, int i) {
    const kn_node *n = &p->net->nodes[i];
    if (!kpass_free(p, i) || !kpass_is(n, "MaxPool") || n->n_in < 1 || n->n_out != 1 ||
        n->in[0] < 0 || n->out[0] < 0 || !is_8bit(kpass_dtype(p, n->in[0])) ||
        kpass_rank(p, n->in[0]) != 4 || kpass_rank(p, n->out[0]) != 4 ||
        kn_attr_int(n, "storage_order", 0) != 0)
        return false;
    int pr = kpass_producer(p, n->in[0]);
    return pr >= 0 && nhwc_candidate(p, pr);
}

static kiln_status qdq_nhwc(kpass *p, int *changed) {
    kn_net *net = p->net;
    int n0 = net->n_nodes, t0 = net->n_tensors;
    int count = 0;
    bool *pool = kn_calloc((size_t)(n0 > 0 ? n0 : 1), 1);
    if (!pool)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < n0; i++) {
        pool[i] = nhwc_pool(p, i); /* before any QConv changes */
        count += nhwc_candidate(p, i) || pool[i];
    }
    if (!count) {
        kn_free(pool);
        return KILN_OK;
    }
    int *twin = kn_malloc(sizeof(int) * (size_t)t0); /* per tensor: its NHWC twin, or -1 */
    bool *sel = kn_calloc((size_t)n0, 1);
    if (!twin || !sel) {
        kn_free(twin);
        kn_free(sel);
        kn_free(pool);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int t = 0; t < t0; t++)
        twin[t] = -1;
    kiln_status st = KILN_OK;
    for (int i = 0; i < n0 && st == KILN_OK; i++) {
        if (!pool[i] && !nhwc_candidate(p, i))
            continue;
        sel[i] = true;
        int y = net->nodes[i].out[0], u;
        char hint[512];
        snprintf(hint, sizeof hint, "%s_nhwc", net->tensors[y].name);
        st = kn_net_new_tensor(net, hint, &u);
        if (st != KILN_OK)
            break;
        kpass_set_output(net, i, 0, u);
        twin[y] = u;
        st = add_transpose(net, u, y, false);
    }
    for (int i = 0; i < n0 && st == KILN_OK; i++) {
        if (!sel[i])
            continue;
        static const int slots[2] = {KN_QL_X, KN_QL_Z};
        for (int k = 0; k < (pool[i] ? 1 : 2) && st == KILN_OK; k++) {
            kn_node *n = &net->nodes[i];
            if (slots[k] >= n->n_in || n->in[slots[k]] < 0)
                continue;
            int t = n->in[slots[k]];
            if (t < t0 && twin[t] < 0) { /* from outside the region */
                char hint[512];
                snprintf(hint, sizeof hint, "%s_nhwc", net->tensors[t].name);
                int u;
                st = kn_net_new_tensor(net, hint, &u);
                if (st == KILN_OK)
                    st = add_transpose(net, t, u, true);
                if (st != KILN_OK)
                    break;
                twin[t] = u;
            }
            if (t < t0)
                st = kpass_set_input(&net->nodes[i], slots[k], twin[t]);
        }
        if (st == KILN_OK && pool[i])
            st = kpass_retype(&net->nodes[i], "MaxPool", KN_DOMAIN_KILN, 1);
        if (st == KILN_OK)
            st = kn_node_set_int(&net->nodes[i], "channels_last", 1);
        kpass_touch(p, i);
    }
    kn_free(twin);
    kn_free(sel);
    kn_free(pool);
    KN_TRY(st);
    kn_log(KILN_LOG_VERBOSE, "qdq: %d INT8 convolution(s) and pool(s) on NHWC tensors", count);
    *changed += count;
    return KILN_OK;
}

/* Whether the build's backend has a kernel for kiln::<op>: a backend
 * without the quantized layers keeps the graph as it is (the DQs fold
 * into float weights, the QLinear ops run on their own kernels). The GPU's
 * quantized kernels are direct (slower than its FP16 convolutions), so a
 * GPU build makes the layers only when asked with --int8. */
static bool backend_has(const kpass *p, const char *op) {
    const kb_backend *be = p->b->be ? p->b->be : &kb_cpu_backend;
    uint32_t want = strncmp(op, "FP8", 3) == 0 ? KILN_BUILDER_FLAG_FP8 : KILN_BUILDER_FLAG_INT8;
    if (be != &kb_cpu_backend && !(p->b->flags & want))
        return false;
    const kb_kernel *k[1];
    return be->kernels_for(KN_DOMAIN_KILN, op, k, 1) > 0;
}

/* Q(float constant W) -> DQ: the form ModelOpt writes its weights in (the
 * float weights stored, quantized in the graph). The Q is evaluated here
 * into the 8-bit (or float8) constant, so the DQ reads a quantized
 * constant as quantize_static writes it; the folding pass would instead
 * fold the DQ too, into float weights. Only a Q every reader of which is
 * a DequantizeLinear folds. */
static kiln_status fold_weight_q(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        const kn_node *n = &net->nodes[i];
        if (!kpass_is(n, "QuantizeLinear") || n->n_out != 1 || n->out[0] < 0)
            continue;
        bool consts = n->n_in >= 2;
        for (int k = 0; k < n->n_in && consts; k++)
            consts = n->in[k] < 0 || kpass_is_const(net, n->in[k]);
        if (!consts || kpass_is_const(net, n->out[0]))
            continue;
        int t = n->out[0], readers = 0;
        bool only_dq = true;
        for (int j = 0; j < net->n_nodes && only_dq; j++) {
            const kn_node *r = &net->nodes[j];
            if (r->dead)
                continue;
            for (int k = 0; k < r->n_in; k++)
                if (r->in[k] == t) {
                    readers++;
                    only_dq = only_dq && k == 0 && kpass_is(r, "DequantizeLinear");
                }
        }
        for (int k = 0; k < net->n_outputs && only_dq; k++)
            only_dq = net->outputs[k] != t;
        if (!only_dq || readers == 0)
            continue;
        kiln_status st = kbld_fold_node(p->b, i);
        if (st == KILN_ERR_OUT_OF_MEMORY)
            return st;
        if (st != KILN_OK) {
            kn_log(KILN_LOG_VERBOSE, "qdq: kept the weight QuantizeLinear '%s': %s",
                   net->nodes[i].name, kiln_last_error());
            kn_error_clear();
            continue;
        }
        kn_log(KILN_LOG_VERBOSE, "qdq: weight QuantizeLinear '%s' -> constant", net->nodes[i].name);
        kpass_kill(p, i);
        (*changed)++;
    }
    return KILN_OK;
}

kiln_status kpass_qdq(kpass *p, int *changed) {
    if (!kpass_any(p, has_dq))
        return KILN_OK;
    /* INT8 and FP8 layers each where the backend has both of their kernels
     * (a GPU's FP8 kernels need sm_89+: their supports() refuse elsewhere,
     * and the build then fails to place the layer, so --fp8 is the ask) */
    bool int8_ok = backend_has(p, "QConv") && backend_has(p, "QMatMul");
    bool fp8_ok = backend_has(p, "FP8Conv") && backend_has(p, "FP8MatMul");
    if (!int8_ok && !fp8_ok)
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p)); /* the types of quantized activations */
    int before = *changed;
    KN_TRY(fold_weight_q(p, changed));
    int n0 = p->net->n_nodes;
    for (int i = 0; i < n0; i++) {
        if (!kpass_free(p, i) || !candidate(&p->net->nodes[i]))
            continue;
        bool done = false;
        const kn_node *n = &p->net->nodes[i];
        if (kpass_is(n, "Conv") || kpass_is(n, "MatMul") || kpass_is(n, "Gemm"))
            KN_TRY(try_chain(p, i, int8_ok, fp8_ok, &done));
        else if (!int8_ok)
            continue;
        else if (moves_values(n))
            KN_TRY(try_pool(p, i, &done));
        else
            KN_TRY(try_qlinear(p, i, &done));
        if (done)
            (*changed)++;
    }
    /* the layout once the layers are settled (a round that made none) */
    if (*changed == before && int8_ok)
        KN_TRY(qdq_nhwc(p, changed));
    return KILN_OK;
}
