/* k_quant.c - reference CPU kernels of QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear: per tensor, per axis or blocked, integer or float8,
 * the arithmetic of graph/quant.h. */
/* The per-tensor float <-> 8-bit loops below vectorize only when their
 * compares may not trap; no value changes (kiln reads no FP flags). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "graph/quant.h"
#include "k_nn.h"


/* Per tensor, float x to uint8 / int8 (the quantized layers' neighbours):
 * kn_q_quantize_f, which gives kn_q_quantize's values. */
static bool quantize_fast(const kb_run *r, const kn_quant *q) {
    const kb_tensor *x = &r->in[0], *s = &r->in[1];
    const kb_tensor *zp = r->n_in > 2 && r->in[2].data ? &r->in[2] : NULL;
    if (q->axis >= 0 || x->dtype != KILN_DTYPE_FLOAT || kb_numel(s) != 1 ||
        (q->qtype != KILN_DTYPE_UINT8 && q->qtype != KILN_DTYPE_INT8))
        return false;
    double lo, hi;
    kn_q_range((int)q->qtype, &lo, &hi);
    float sc = (float)kb_ld(s->data, s->dtype, 0), z = zp ? (float)kb_ld(zp->data, zp->dtype, 0) : 0.f;
    float flo = (float)lo, fhi = (float)hi;
    const float *xv = x->data;
    int64_t n = kb_numel(x);
    if (q->qtype == KILN_DTYPE_UINT8) {
        uint8_t *y = r->out[0].data;
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = (uint8_t)(int32_t)kn_q_quantize_f(xv[i], sc, z, flo, fhi);
    } else {
        int8_t *y = r->out[0].data;
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = (int8_t)(int32_t)kn_q_quantize_f(xv[i], sc, z, flo, fhi);
    }
    return true;
}

/* Per tensor, uint8 / int8 x to float: (float)(x - zp) * scale. */
static bool dequantize_fast(const kb_run *r, const kn_quant *q) {
    const kb_tensor *x = &r->in[0], *s = &r->in[1];
    const kb_tensor *zp = r->n_in > 2 && r->in[2].data ? &r->in[2] : NULL;
    if (q->axis >= 0 || r->out[0].dtype != KILN_DTYPE_FLOAT || kb_numel(s) != 1 ||
        (x->dtype != KILN_DTYPE_UINT8 && x->dtype != KILN_DTYPE_INT8))
        return false;
    float sc = (float)kb_ld(s->data, s->dtype, 0);
    int32_t z = zp ? (int32_t)kb_ld(zp->data, zp->dtype, 0) : 0;
    float *y = r->out[0].data;
    int64_t n = kb_numel(x);
    if (x->dtype == KILN_DTYPE_UINT8) {
        const uint8_t *xv = x->data;
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)((int32_t)xv[i] - z) * sc;
    } else {
        const int8_t *xv = x->data;
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)((int32_t)xv[i] - z) * sc;
    }
    return true;
}

static kiln_status quant_setup(const kb_run *r, bool quantize, kn_quant *q) {
    kn_tinfo ti[3];
    int n = r->n_in < 3 ? r->n_in : 3;
    kb_tinfo_of(r->in, n, ti);
    return kn_quant_geom(r->node, ti, n, quantize, q);
}

/* The scale / zero point index of element i. */
static inline size_t quant_channel(const kn_quant *q, int64_t i) {
    return q->axis < 0 ? 0 : (size_t)kn_q_param_index(i, q->channels, q->inner, q->block);
}

/* To float8: the zero point is 0 (kn_quant_geom refuses another constant
 * one) and is not added. */
static void quantize_f8(const kb_run *r, const kn_quant *q) {
    const kb_tensor *x = &r->in[0], *s = &r->in[1];
    uint8_t *y = r->out[0].data;
    int64_t n = kb_numel(x);
    for (int64_t i = 0; i < n; i++) {
        size_t ch = quant_channel(q, i);
        y[i] = kn_q_quantize_f8((float)kb_ld(x->data, x->dtype, (size_t)i), (float)kb_ld(s->data, s->dtype, ch),
                                (int)q->qtype, q->saturate);
    }
}

kiln_status kb_quantize_run(const kb_run *r) {
    kn_quant q;
    KN_TRY(quant_setup(r, true, &q));
    if (kn_f8_is((int)q.qtype)) {
        quantize_f8(r, &q);
        return KILN_OK;
    }
    if (quantize_fast(r, &q))
        return KILN_OK;
    const kb_tensor *x = &r->in[0], *s = &r->in[1];
    const kb_tensor *zp = r->n_in > 2 && r->in[2].data ? &r->in[2] : NULL;
    double lo = 0, hi = 0;
    kn_q_range((int)q.qtype, &lo, &hi); /* kn_quant_geom admits only types with a range */
    int64_t n = kb_numel(x);
    for (int64_t i = 0; i < n; i++) {
        size_t ch = quant_channel(&q, i);
        double z = zp ? kb_ld(zp->data, zp->dtype, ch) : 0.0;
        double v = kn_q_quantize((float)kb_ld(x->data, x->dtype, (size_t)i),
                                 (float)kb_ld(s->data, s->dtype, ch), z, lo, hi);
        kb_st(r->out[0].data, q.qtype, (size_t)i, v);
    }
    return KILN_OK;
}

kiln_status kb_dequantize_run(const kb_run *r) {
    kn_quant q;
    KN_TRY(quant_setup(r, false, &q));
    if (dequantize_fast(r, &q))
        return KILN_OK;
    const kb_tensor *x = &r->in[0], *s = &r->in[1];
    const kb_tensor *zp = r->n_in > 2 && r->in[2].data ? &r->in[2] : NULL;
    int64_t n = kb_numel(x);
    if (kn_f8_is((int)q.qtype)) { /* the zero point is 0, as above */
        const uint8_t *xv = x->data;
        for (int64_t i = 0; i < n; i++)
            kb_st(r->out[0].data, q.ftype, (size_t)i,
                  kn_q_dequantize_f8(xv[i], (int)q.qtype, (float)kb_ld(s->data, s->dtype, quant_channel(&q, i))));
        return KILN_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        size_t ch = quant_channel(&q, i);
        double z = zp ? kb_ld(zp->data, zp->dtype, ch) : 0.0;
        float v = kn_q_dequantize(kb_ld(x->data, x->dtype, (size_t)i), z,
                                  (float)kb_ld(s->data, s->dtype, ch));
        kb_st(r->out[0].data, q.ftype, (size_t)i, v);
    }
    return KILN_OK;
}

kiln_status kb_dynamic_quantize_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    const float *xv = x->data;
    int64_t n = kb_numel(x);
    float mn = 0.f, mx = 0.f, scale;
    for (int64_t i = 0; i < n; i++) {
        mn = xv[i] < mn ? xv[i] : mn;
        mx = xv[i] > mx ? xv[i] : mx;
    }
    double zp;
    kn_q_dynamic_params(mn, mx, &scale, &zp);
    uint8_t *y = r->out[0].data;
    for (int64_t i = 0; i < n; i++)
        y[i] = (uint8_t)kn_q_quantize(xv[i], scale, zp, 0.0, 255.0);
    if (r->n_out > 1 && r->out[1].data)
        *(float *)r->out[1].data = scale;
    if (r->n_out > 2 && r->out[2].data)
        *(uint8_t *)r->out[2].data = (uint8_t)zp;
    return KILN_OK;
}
