/* ops_quant.c - op schemas of kiln's quantized layers kiln::QConv and
 * kiln::QMatMul (graph/qlayer.h): they infer like Conv and MatMul on the
 * quantized tensors, with Y's type from the "to" attribute. */
#include <string.h>

#include "fused.h"
#include "qlayer.h"

bool kn_is_qlayer(const kn_node *n) {
    return strcmp(n->domain, KN_DOMAIN_KILN) == 0 &&
           (strcmp(n->op_type, "QConv") == 0 || strcmp(n->op_type, "QMatMul") == 0);
}

kiln_status kn_qepi_parse(const kn_node *n, kn_qepi *e) {
    memset(e, 0, sizeof *e);
    size_t ns = 0, nm = 0, nz = 0, nt = 0;
    const int64_t *st = kn_attr_ints(n, "stages", &ns);
    const float *ms = kn_attr_floats(n, "mid_scales", &nm);
    const int64_t *mz = kn_attr_ints(n, "mid_zps", &nz);
    const int64_t *mt = kn_attr_ints(n, "mid_types", &nt);
    if (ns > KN_QL_MAX_STAGES)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "%zu epilogue stages (at most %d)", ns,
                             KN_QL_MAX_STAGES);
    size_t mids = 0;
    for (size_t i = 0; i < ns; i++) {
        if (st[i] < KN_QS_QDQ || st[i] > KN_QS_CLIP)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "unknown epilogue stage %lld",
                                 (long long)st[i]);
        e->stage[i] = (int)st[i];
        if (st[i] != KN_QS_QDQ)
            continue;
        if (mids >= nm || mids >= nz || mids >= nt)
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                                 "QDQ stage %zu has no mid_scales/mid_zps/mid_types entry", i);
        double lo, hi;
        if (!(mt[mids] == KILN_DTYPE_UINT8 || mt[mids] == KILN_DTYPE_INT8) ||
            !kn_q_range((int)mt[mids], &lo, &hi))
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "QDQ stage %zu: type %lld is not 8-bit",
                                 i, (long long)mt[mids]);
        if (!(ms[mids] > 0.f) || (double)mz[mids] < lo || (double)mz[mids] > hi)
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                                 "QDQ stage %zu: scale %g / zero point %lld out of range", i,
                                 (double)ms[mids], (long long)mz[mids]);
        e->mid_scale[mids] = ms[mids];
        e->mid_zp[mids] = (double)mz[mids];
        e->mid_lo[mids] = lo;
        e->mid_hi[mids] = hi;
        mids++;
    }
    e->n_stages = (int)ns;
    e->clip_lo = kn_attr_float(n, "clip_min", -INFINITY);
    e->clip_hi = kn_attr_float(n, "clip_max", INFINITY);
    return KILN_OK;
}

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

/* A scale or zero point: absent, one value, or `per` values. */
static kiln_status check_param(const kn_infer *c, int i, int64_t per, const char *what) {
    if (!kn_has_in(c, i))
        return KILN_OK;
    int64_t n = kn_numel(c->in[i].rank, c->in[i].dims);
    if (n != 1 && n != per)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "%s has %lld values (1 or %lld expected)",
                             what, (long long)n, (long long)per);
    return KILN_OK;
}

/* Checks shared by both layers once Y's shape is known; cout = output
 * channels. */
static kiln_status check_common(kn_infer *c, int64_t cout) {
    const kn_node *n = c->node;
    int64_t to = kn_attr_int(n, "to", KILN_DTYPE_FLOAT);
    if (to != KILN_DTYPE_UINT8 && to != KILN_DTYPE_INT8 && to != KILN_DTYPE_FLOAT &&
        to != KILN_DTYPE_INT32)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "output type %lld (uint8, int8, float or int32)",
                             (long long)to);
    bool scaled = to != KILN_DTYPE_INT32;
    if (scaled && (!kn_has_in(c, KN_QL_XS) || !kn_has_in(c, KN_QL_WS)))
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "x_scale and w_scale are required");
    if ((to == KILN_DTYPE_UINT8 || to == KILN_DTYPE_INT8) && !kn_has_in(c, KN_QL_YS))
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "an 8-bit output needs y_scale");
    KN_TRY(check_param(c, KN_QL_XS, 1, "x_scale"));
    KN_TRY(check_param(c, KN_QL_XZ, 1, "x_zero_point"));
    KN_TRY(check_param(c, KN_QL_WS, cout, "w_scale"));
    KN_TRY(check_param(c, KN_QL_WZ, cout, "w_zero_point"));
    KN_TRY(check_param(c, KN_QL_YS, 1, "y_scale"));
    KN_TRY(check_param(c, KN_QL_YZ, 1, "y_zero_point"));
    KN_TRY(check_param(c, KN_QL_ZS, 1, "z_scale"));
    KN_TRY(check_param(c, KN_QL_ZZ, 1, "z_zero_point"));
    if (kn_has_in(c, KN_QL_B)) {
        if (c->in[KN_QL_B].dtype != KILN_DTYPE_INT32)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "B must be int32");
        KN_TRY(check_param(c, KN_QL_B, cout, "B"));
    }
    if (kn_has_in(c, KN_QL_C)) {
        if (c->in[KN_QL_C].dtype != KILN_DTYPE_FLOAT)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "C must be float");
        KN_TRY(check_param(c, KN_QL_C, cout, "C"));
    }
    if (kn_has_in(c, KN_QL_Z)) {
        const kn_tinfo *z = &c->in[KN_QL_Z], *y = &c->out[0];
        if (z->rank != y->rank || memcmp(z->dims, y->dims, sizeof(int64_t) * (size_t)y->rank))
            return kn_node_error(n, KILN_ERR_SHAPE, "the residual Z must have the output's shape");
        if (is_8bit(z->dtype) ? !kn_has_in(c, KN_QL_ZS) : z->dtype != KILN_DTYPE_FLOAT)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                 "Z must be 8-bit with z_scale, or float");
    }
    kn_qepi e;
    KN_TRY(kn_qepi_parse(n, &e));
    if (!scaled && e.n_stages)
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "an int32 output takes no stages");
    c->out[0].dtype = (kiln_dtype)to;
    return KILN_OK;
}

/* Run the float op's inference on float views of X and W. */
static kiln_status infer_base(kn_infer *c, const char *base, bool trans_b) {
    if (c->n_in <= KN_QL_W || !kn_has_in(c, KN_QL_X) || !kn_has_in(c, KN_QL_W))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "needs X and W");
    if (!is_8bit(c->in[KN_QL_X].dtype) || !is_8bit(c->in[KN_QL_W].dtype))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "X and W must be uint8 or int8 (%s, %s)",
                             kiln_dtype_name(c->in[KN_QL_X].dtype),
                             kiln_dtype_name(c->in[KN_QL_W].dtype));
    const kn_op_schema *s = kn_op_find("", base);
    if (!s)
        return kn_node_error(c->node, KILN_ERR_INTERNAL, "no schema for %s", base);
    kn_tinfo v[2] = {c->in[KN_QL_X], c->in[KN_QL_W]};
    v[0].dtype = v[1].dtype = KILN_DTYPE_FLOAT;
    v[0].value = v[1].value = NULL;
    if (trans_b) {
        if (v[1].rank != 2)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "trans_b needs a 2-D W");
        int64_t t = v[1].dims[0];
        v[1].dims[0] = v[1].dims[1];
        v[1].dims[1] = t;
    }
    kn_infer sub = *c;
    sub.in = v;
    sub.n_in = 2;
    sub.n_out = 1;
    return s->infer(&sub);
}

static kiln_status infer_qconv(kn_infer *c) {
    if (!kn_attr_int(c->node, "channels_last", 0)) {
        KN_TRY(infer_base(c, "Conv", false));
        return check_common(c, c->in[KN_QL_W].dims[0]);
    }
    /* X (and Z, Y) [N, H, W, C]: infer on the channels-first view of X */
    if (c->n_in <= KN_QL_W || c->n_in > KN_QL_N_IN || !kn_has_in(c, KN_QL_X) ||
        c->in[KN_QL_X].rank != 4)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "channels_last needs a 4-D X");
    kn_tinfo v[KN_QL_N_IN];
    memcpy(v, c->in, sizeof(kn_tinfo) * (size_t)c->n_in);
    kn_dims_channels(4, c->in[KN_QL_X].dims, v[KN_QL_X].dims, true);
    kn_infer sub = *c;
    sub.in = v;
    KN_TRY(infer_base(&sub, "Conv", false));
    int64_t d[KILN_MAX_DIMS];
    kn_dims_channels(4, c->out[0].dims, d, false);
    memcpy(c->out[0].dims, d, sizeof(int64_t) * 4);
    return check_common(c, c->in[KN_QL_W].dims[0]);
}

static kiln_status infer_qmatmul(kn_infer *c) {
    bool tb = kn_attr_int(c->node, "trans_b", 0) != 0;
    KN_TRY(infer_base(c, "MatMul", tb));
    const kn_tinfo *y = &c->out[0];
    return check_common(c, y->rank > 0 ? y->dims[y->rank - 1] : 1);
}

/* ---- kiln::FP8Conv, kiln::FP8MatMul (graph/qlayer.h): X and W
 * float8e4m3fn, zero points absent (FP8's are 0), Y float or float8e4m3fn
 * ("to" 1 or 17), a float C and a float or float8 Z; no QDQ stages. ---- */
bool kn_is_fp8layer(const kn_node *n) {
    return strcmp(n->domain, KN_DOMAIN_KILN) == 0 &&
           (strcmp(n->op_type, "FP8Conv") == 0 || strcmp(n->op_type, "FP8MatMul") == 0);
}

static kiln_status infer_fp8(kn_infer *c, const char *base, bool trans_b) {
    const kn_node *n = c->node;
    if (c->n_in <= KN_QL_W || !kn_has_in(c, KN_QL_X) || !kn_has_in(c, KN_QL_W))
        return kn_node_error(n, KILN_ERR_SHAPE, "needs X and W");
    if (c->in[KN_QL_X].dtype != KILN_DTYPE_FLOAT8E4M3FN ||
        c->in[KN_QL_W].dtype != KILN_DTYPE_FLOAT8E4M3FN)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "X and W must be float8e4m3fn (%s, %s)",
                             kiln_dtype_name(c->in[KN_QL_X].dtype),
                             kiln_dtype_name(c->in[KN_QL_W].dtype));
    static const int none[] = {KN_QL_XZ, KN_QL_WZ, KN_QL_YZ, KN_QL_B, KN_QL_ZZ};
    for (size_t k = 0; k < KN_ARRAY_LEN(none); k++)
        if (kn_has_in(c, none[k]))
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                                 "input %d: an FP8 layer takes no zero points and no int32 B",
                                 none[k]);
    const kn_op_schema *s = kn_op_find("", base);
    if (!s)
        return kn_node_error(n, KILN_ERR_INTERNAL, "no schema for %s", base);
    kn_tinfo v[2] = {c->in[KN_QL_X], c->in[KN_QL_W]};
    v[0].dtype = v[1].dtype = KILN_DTYPE_FLOAT;
    v[0].value = v[1].value = NULL;
    if (trans_b) {
        if (v[1].rank != 2)
            return kn_node_error(n, KILN_ERR_SHAPE, "trans_b needs a 2-D W");
        int64_t t = v[1].dims[0];
        v[1].dims[0] = v[1].dims[1];
        v[1].dims[1] = t;
    }
    kn_infer sub = *c;
    sub.in = v;
    sub.n_in = 2;
    sub.n_out = 1;
    KN_TRY(s->infer(&sub));
    const kn_tinfo *y = &c->out[0];
    int64_t cout = strcmp(base, "Conv") == 0 ? c->in[KN_QL_W].dims[0]
                   : y->rank > 0 ? y->dims[y->rank - 1] : 1;
    int64_t to = kn_attr_int(n, "to", KILN_DTYPE_FLOAT);
    if (to != KILN_DTYPE_FLOAT && to != KILN_DTYPE_FLOAT8E4M3FN)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "output type %lld (float or float8e4m3fn)",
                             (long long)to);
    if (!kn_has_in(c, KN_QL_XS) || !kn_has_in(c, KN_QL_WS))
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "x_scale and w_scale are required");
    if (to == KILN_DTYPE_FLOAT8E4M3FN && !kn_has_in(c, KN_QL_YS))
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "an FP8 output needs y_scale");
    KN_TRY(check_param(c, KN_QL_XS, 1, "x_scale"));
    KN_TRY(check_param(c, KN_QL_WS, cout, "w_scale"));
    KN_TRY(check_param(c, KN_QL_YS, 1, "y_scale"));
    KN_TRY(check_param(c, KN_QL_ZS, 1, "z_scale"));
    if (kn_has_in(c, KN_QL_C)) {
        if (c->in[KN_QL_C].dtype != KILN_DTYPE_FLOAT)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "C must be float");
        KN_TRY(check_param(c, KN_QL_C, cout, "C"));
    }
    if (kn_has_in(c, KN_QL_Z)) {
        const kn_tinfo *z = &c->in[KN_QL_Z];
        if (z->rank != y->rank || memcmp(z->dims, y->dims, sizeof(int64_t) * (size_t)y->rank))
            return kn_node_error(n, KILN_ERR_SHAPE, "the residual Z must have the output's shape");
        if (z->dtype == KILN_DTYPE_FLOAT8E4M3FN ? !kn_has_in(c, KN_QL_ZS)
                                                : z->dtype != KILN_DTYPE_FLOAT)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                 "Z must be float8e4m3fn with z_scale, or float");
    }
    kn_qepi e;
    KN_TRY(kn_qepi_parse(n, &e));
    for (int i = 0; i < e.n_stages; i++)
        if (e.stage[i] == KN_QS_QDQ)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "an FP8 layer takes no QDQ stage");
    c->out[0].dtype = (kiln_dtype)to;
    return KILN_OK;
}

static kiln_status infer_fp8conv(kn_infer *c) { return infer_fp8(c, "Conv", false); }
static kiln_status infer_fp8matmul(kn_infer *c) {
    return infer_fp8(c, "MatMul", kn_attr_int(c->node, "trans_b", 0) != 0);
}

const kn_op_schema kn_ops_quant[] = {
    {"QConv", KN_DOMAIN_KILN, infer_qconv, 0},
    {"QMatMul", KN_DOMAIN_KILN, infer_qmatmul, 0},
    {"FP8Conv", KN_DOMAIN_KILN, infer_fp8conv, 0},
    {"FP8MatMul", KN_DOMAIN_KILN, infer_fp8matmul, 0},
};
const size_t kn_ops_quant_count = KN_ARRAY_LEN(kn_ops_quant);
