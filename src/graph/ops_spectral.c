/* ops_spectral.c - op schemas (shape and type inference) of the spectral
 * family: DFT (opsets 17 and 20), STFT, MelWeightMatrix and Det, with the
 * geometry their kernels share (graph/spectral.h). Semantics are those of
 * ONNX's reference implementation. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "spectral.h"

static bool sp_real(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

static bool sp_present(const kn_tinfo *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED;
}

/* A scalar input of an integer type whose value is known on the host. */
static kiln_status sp_scalar_int(const kn_node *node, const kn_tinfo *t, const char *what,
                                 int64_t *out) {
    if (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%s must be int32 or int64, not %s", what,
                             kiln_dtype_name(t->dtype));
    if (kn_numel(t->rank, t->dims) != 1)
        return kn_node_error(node, KILN_ERR_SHAPE, "%s must hold one value", what);
    if (!t->value)
        return kn_node_error(node, KILN_ERR_SHAPE, "%s must be known when the plan is built", what);
    *out = kn_value_int(t, 0);
    return KILN_OK;
}

static kiln_status sp_scalar_real(const kn_node *node, const kn_tinfo *t, const char *what,
                                  double *out) {
    if (!sp_real(t->dtype))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "%s must be float, float16, bfloat16 or double, not %s", what,
                             kiln_dtype_name(t->dtype));
    if (kn_numel(t->rank, t->dims) != 1)
        return kn_node_error(node, KILN_ERR_SHAPE, "%s must hold one value", what);
    if (!t->value)
        return kn_node_error(node, KILN_ERR_SHAPE, "%s must be known when the plan is built", what);
    *out = kn_value_double(t, 0);
    if (!isfinite(*out))
        return kn_node_error(node, KILN_ERR_SHAPE, "%s is not finite", what);
    return KILN_OK;
}

static kiln_status sp_need_real(const kn_node *node, const kn_tinfo *t, const char *what) {
    if (!sp_real(t->dtype))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "%s must be float, float16, bfloat16 or double, not %s", what,
                             kiln_dtype_name(t->dtype));
    return KILN_OK;
}

/* ---------------- DFT ---------------- */

kiln_status kn_dft_setup(const kn_node *node, const kn_tinfo *in, int n_in, kn_dft *g) {
    memset(g, 0, sizeof *g);
    if (!sp_present(in, n_in, 0))
        return kn_node_error(node, KILN_ERR_SHAPE, "input 0 is required");
    const kn_tinfo *x = &in[0];
    KN_TRY(sp_need_real(node, x, "the input"));
    const int r = x->rank;
    if (r < 2 || (x->dims[r - 1] != 1 && x->dims[r - 1] != 2))
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "the input must be [signal dims..., 1] (real) or [signal dims..., 2] "
                             "(complex), of rank 2 or more; got rank %d",
                             r);
    int64_t axis;
    if (node->opset >= 20) {
        axis = -2;
        if (sp_present(in, n_in, 2))
            KN_TRY(sp_scalar_int(node, &in[2], "axis (input 2)", &axis));
    } else {
        if (sp_present(in, n_in, 2))
            return kn_node_error(node, KILN_ERR_SHAPE,
                                 "DFT of opset %d takes axis as an attribute, not as input 2 "
                                 "(opset 20 and later)",
                                 node->opset);
        axis = kn_attr_int(node, "axis", 1);
    }
    if (axis < -r || axis > r - 2 || axis == -1)
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "axis %lld is out of range for rank %d (accepted: [%d, -2] and [0, %d]; "
                             "the last dim holds the real and imaginary parts)",
                             (long long)axis, r, -r, r - 2);
    g->axis = axis < 0 ? axis + r : axis;
    g->len = x->dims[g->axis];
    g->cin = x->dims[r - 1];
    g->outer = kn_numel((int)g->axis, x->dims);
    g->inner = kn_numel(r - 1 - (int)g->axis - 1, x->dims + g->axis + 1);
    g->n = g->len;
    if (sp_present(in, n_in, 1))
        KN_TRY(sp_scalar_int(node, &in[1], "dft_length (input 1)", &g->n));
    if (g->n < 1)
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "the transform's size (dft_length, else the axis's %lld) must be at "
                             "least 1, got %lld",
                             (long long)g->len, (long long)g->n);
    int64_t onesided = kn_attr_int(node, "onesided", 0), inverse = kn_attr_int(node, "inverse", 0);
    if ((onesided != 0 && onesided != 1) || (inverse != 0 && inverse != 1))
        return kn_node_error(node, KILN_ERR_SHAPE, "onesided and inverse must be 0 or 1 (got %lld, %lld)",
                             (long long)onesided, (long long)inverse);
    /* ONNX's reference transforms the whole (padded) input and keeps the
     * first n/2 + 1 outputs, while the clarified spec (onnx PR 7574) makes
     * it irfft; until the two agree, refuse rather than pick one */
    if (onesided && inverse)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "inverse with onesided = 1 is not supported (ONNX's reference and its "
                             "spec disagree on what it computes)");
    g->inverse = (int)inverse;
    g->out_len = onesided ? g->n / 2 + 1 : g->n;
    return KILN_OK;
}

/* [signal dims..., 1 or 2] -> the same dims with the axis at its output
 * length and the last dim 2. */
static kiln_status infer_dft(kn_infer *c) {
    kn_dft g;
    KN_TRY(kn_dft_setup(c->node, c->in, c->n_in, &g));
    kn_same_as(&c->out[0], &c->in[0]);
    c->out[0].dims[g.axis] = g.out_len;
    c->out[0].dims[c->out[0].rank - 1] = 2;
    return KILN_OK;
}

/* ---------------- STFT ---------------- */

kiln_status kn_stft_setup(const kn_node *node, const kn_tinfo *in, int n_in, kn_stft *g) {
    memset(g, 0, sizeof *g);
    if (!sp_present(in, n_in, 0) || !sp_present(in, n_in, 1))
        return kn_node_error(node, KILN_ERR_SHAPE, "signal (input 0) and frame_step (input 1) are required");
    const kn_tinfo *x = &in[0];
    KN_TRY(sp_need_real(node, x, "signal"));
    if (x->rank != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "signal must be [batch, length, 1] (real) or [batch, length, 2] "
                             "(complex), got rank %d",
                             x->rank);
    g->batch = x->dims[0];
    g->len = x->dims[1];
    g->cin = x->dims[2];
    KN_TRY(sp_scalar_int(node, &in[1], "frame_step (input 1)", &g->step));
    if (g->step < 1)
        return kn_node_error(node, KILN_ERR_SHAPE, "frame_step must be at least 1, got %lld",
                             (long long)g->step);
    bool has_window = sp_present(in, n_in, 2);
    if (has_window) {
        const kn_tinfo *w = &in[2];
        if (w->dtype != x->dtype || w->rank != 1 || w->dims[0] < 1)
            return kn_node_error(node, KILN_ERR_SHAPE,
                                 "window must be a non-empty 1-D tensor of the signal's type (%s)",
                                 kiln_dtype_name(x->dtype));
    }
    if (sp_present(in, n_in, 3)) {
        KN_TRY(sp_scalar_int(node, &in[3], "frame_length (input 3)", &g->n));
        if (g->n < 1)
            return kn_node_error(node, KILN_ERR_SHAPE, "frame_length must be at least 1, got %lld",
                                 (long long)g->n);
    } else {
        g->n = has_window ? in[2].dims[0] : g->len;
    }
    g->win = has_window ? in[2].dims[0] : g->n;
    if (g->len < g->n || g->n < 1)
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "the signal (%lld samples) is shorter than one frame (%lld)",
                             (long long)g->len, (long long)g->n);
    int64_t onesided = kn_attr_int(node, "onesided", 1);
    if (onesided != 0 && onesided != 1)
        return kn_node_error(node, KILN_ERR_SHAPE, "onesided must be 0 or 1, got %lld", (long long)onesided);
    g->frames = (g->len - g->n) / g->step + 1;
    g->bins = onesided ? g->n / 2 + 1 : g->n;
    return KILN_OK;
}

/* [batch, frames, bins, 2] of the signal's type. */
static kiln_status infer_stft(kn_infer *c) {
    kn_stft g;
    KN_TRY(kn_stft_setup(c->node, c->in, c->n_in, &g));
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].rank = 4;
    c->out[0].dims[0] = g.batch;
    c->out[0].dims[1] = g.frames;
    c->out[0].dims[2] = g.bins;
    c->out[0].dims[3] = 2;
    return KILN_OK;
}

/* ---------------- MelWeightMatrix ---------------- */

void kn_mel_edges(kiln_dtype t, double lower, double upper, int64_t nmel, double *low_mel,
                  double *mel_step) {
    if (t == KILN_DTYPE_DOUBLE) {
        double lo = 2595.0 * log10(1.0 + lower / 700.0), hi = 2595.0 * log10(1.0 + upper / 700.0);
        *low_mel = lo;
        *mel_step = (hi - lo) / (double)(nmel + 2);
        return;
    }
    /* numpy keeps float32 scalars in float32 through these steps */
    float lo = 2595.0f * log10f(1.0f + (float)lower / 700.0f);
    float hi = 2595.0f * log10f(1.0f + (float)upper / 700.0f);
    *low_mel = lo;
    *mel_step = (double)((hi - lo) / (float)(nmel + 2));
}

kiln_status kn_mel_setup(const kn_node *node, const kn_tinfo *in, int n_in, kn_mel *g) {
    static const char *const names[5] = {"num_mel_bins (input 0)", "dft_length (input 1)",
                                         "sample_rate (input 2)", "lower_edge_hertz (input 3)",
                                         "upper_edge_hertz (input 4)"};
    memset(g, 0, sizeof *g);
    for (int i = 0; i < 5; i++)
        if (!sp_present(in, n_in, i))
            return kn_node_error(node, KILN_ERR_SHAPE, "%s is required", names[i]);
    double lower, upper;
    KN_TRY(sp_scalar_int(node, &in[0], names[0], &g->nmel));
    KN_TRY(sp_scalar_int(node, &in[1], names[1], &g->dft_length));
    KN_TRY(sp_scalar_int(node, &in[2], names[2], &g->sample_rate));
    KN_TRY(sp_scalar_real(node, &in[3], names[3], &lower));
    KN_TRY(sp_scalar_real(node, &in[4], names[4], &upper));
    if (g->nmel < 0 || g->dft_length < 1 || g->sample_rate < 1)
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "num_mel_bins must be >= 0 and dft_length and sample_rate >= 1 (got "
                             "%lld, %lld, %lld)",
                             (long long)g->nmel, (long long)g->dft_length, (long long)g->sample_rate);
    g->nspec = g->dft_length / 2 + 1;
    const int64_t out_dims[2] = {g->nspec, g->nmel};
    if (g->dft_length > KN_MAX_ELEMENTS || !kn_shape_fits(KILN_DTYPE_UINT8, 2, out_dims, NULL))
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "a [%lld, %lld] weight matrix is larger than a tensor can be",
                             (long long)g->nspec, (long long)g->nmel);
    kn_mel_edges(in[3].dtype, lower, upper, g->nmel, &g->low_mel, &g->mel_step);
    /* every spectrogram bin a triangle writes must exist (the reference
     * would fail, or wrap a negative index) */
    for (int64_t i = 0; i < g->nmel; i++) {
        int64_t b0 = kn_mel_bin(g, i), b1 = kn_mel_bin(g, i + 1), b2 = kn_mel_bin(g, i + 2);
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        if (b0 <= b1) { /* the rising edge (a single 1 when b0 == b1) */
            lo = b0;
            hi = b1;
        }
        if (b2 > b1) { /* the falling edge */
            lo = lo < b1 ? lo : b1;
            hi = hi > b2 - 1 ? hi : b2 - 1;
        }
        if (lo <= hi && (lo < 0 || hi >= g->nspec))
            return kn_node_error(node, KILN_ERR_SHAPE,
                                 "mel band %lld covers frequency bins %lld to %lld, outside the %lld "
                                 "bins of a %lld-point spectrogram (check lower_edge_hertz %g, "
                                 "upper_edge_hertz %g against sample_rate %lld)",
                                 (long long)i, (long long)lo, (long long)hi, (long long)g->nspec,
                                 (long long)g->dft_length, lower, upper, (long long)g->sample_rate);
    }
    return KILN_OK;
}

bool kn_mel_out_type(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_DOUBLE: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT16: case KILN_DTYPE_UINT16:
    case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32: case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

/* [dft_length/2 + 1, num_mel_bins] of output_datatype (float by default). */
static kiln_status infer_mel(kn_infer *c) {
    kn_mel g;
    KN_TRY(kn_mel_setup(c->node, c->in, c->n_in, &g));
    kiln_dtype t = (kiln_dtype)kn_attr_int(c->node, "output_datatype", KILN_DTYPE_FLOAT);
    if (!kn_mel_out_type(t))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "output_datatype %s is not a numeric type",
                             kiln_dtype_name(t));
    c->out[0].dtype = t;
    c->out[0].rank = 2;
    c->out[0].dims[0] = g.nspec;
    c->out[0].dims[1] = g.nmel;
    return KILN_OK;
}

/* ---------------- Det ---------------- */

kiln_status kn_det_setup(const kn_node *node, const kn_tinfo *x, int64_t *batch, int64_t *m) {
    if (x->dtype == KILN_DTYPE_UNDEFINED)
        return kn_node_error(node, KILN_ERR_SHAPE, "input 0 is required");
    KN_TRY(sp_need_real(node, x, "X"));
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return kn_node_error(node, KILN_ERR_SHAPE,
                             "X must be [*, M, M] (square matrices), got rank %d%s", x->rank,
                             x->rank < 2 ? "" : " with unequal last dims");
    *m = x->dims[x->rank - 1];
    *batch = kn_numel(x->rank - 2, x->dims);
    return KILN_OK;
}

/* [*, M, M] -> [*]. */
static kiln_status infer_det(kn_infer *c) {
    int64_t batch, m;
    if (c->n_in < 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "input 0 is required");
    KN_TRY(kn_det_setup(c->node, &c->in[0], &batch, &m));
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].rank = c->in[0].rank - 2;
    memcpy(c->out[0].dims, c->in[0].dims, sizeof(int64_t) * (size_t)c->out[0].rank);
    return KILN_OK;
}

const kn_op_schema kn_ops_spectral[] = {
    {"DFT", "", infer_dft, (1u << 1) | (1u << 2)},
    {"STFT", "", infer_stft, (1u << 1) | (1u << 3)},
    {"MelWeightMatrix", "", infer_mel, 0x1fu},
    {"Det", "", infer_det, 0},
};
const size_t kn_ops_spectral_count = KN_ARRAY_LEN(kn_ops_spectral);
