/* quant.h - the arithmetic of QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear, shared by the CPU reference and the CUDA kernels
 * (plain C, host and device) so that both round alike: float division and
 * products as the spec's reference computes them, round half to even,
 * saturation to the integer type; float8 types through core/fp8.h. */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H

#include <math.h>
#include <stdint.h>

#include "core/fp8.h"

#ifdef __CUDACC__
#define KN_Q_FN static __host__ __device__ __forceinline__
#else
#define KN_Q_FN static inline
#endif

/* The range of an integer quantized type: int8, uint8, int16, uint16
 * (ONNX TensorProto codes 3, 2, 5, 4); 0 for any other. */
KN_Q_FN int kn_q_range(int dtype, double *lo, double *hi) {
    switch (dtype) {
    case 3: *lo = -128.0; *hi = 127.0; return 1;
    case 2: *lo = 0.0; *hi = 255.0; return 1;
    case 5: *lo = -32768.0; *hi = 32767.0; return 1;
    case 4: *lo = 0.0; *hi = 65535.0; return 1;
    default: return 0;
    }
}

/* The scale and zero point of element i: channels = the axis's length,
 * inner = the elements after it. Per tensor (channels <= 1, block 0): 0;
 * per axis (block 0): the axis index; blocked (block > 0): the scale has x's
 * shape with ceil(channels / block) along the axis, and element i takes the
 * entry of its block. */
KN_Q_FN int64_t kn_q_param_index(int64_t i, int64_t channels, int64_t inner, int64_t block) {
    if (block <= 0)
        return channels > 1 ? (i / inner) % channels : 0;
    int64_t blocks = (channels + block - 1) / block, outer = i / (inner * channels);
    int64_t j = (i / inner) % channels, k = i % inner;
    return (outer * blocks + j / block) * inner + k;
}

/* round(x / scale) + zero_point, saturated to [lo, hi]; a NaN x / scale
 * gives lo, as ONNX Runtime and the ONNX reference implementation do (it
 * arises from -inf / inf where quantize_static calibrated a -inf attention
 * mask into an infinite scale, and lo is then the mask's meaning). */
KN_Q_FN double kn_q_quantize(float x, float scale, double zp, double lo, double hi) {
    float v = x / scale;
    double q = (double)rintf(v);
    if (q != q)
        return lo;
    q += zp;
    return q < lo ? lo : q > hi ? hi : q;
}

/* kn_q_quantize in float arithmetic only, so that loops of it vectorize
 * (there is no vector rintf before SSE4.1): for |v| <= 2^22,
 * (v + 1.5 * 2^23) - 1.5 * 2^23 is v rounded in the current mode (half to
 * even), as rintf; a larger |v| is clamped to 2^22 first, which the final
 * clamp to an 8- or 16-bit range treats alike; NaN gives lo.
 * The same value as kn_q_quantize for every x (lo, hi, zp within 2^16). */
KN_Q_FN float kn_q_quantize_f(float x, float scale, float zp, float lo, float hi) {
    float v = x / scale;
    v = v == v ? v : -8388608.f;
    v = v > -4194304.f ? v : -4194304.f;
    v = v < 4194304.f ? v : 4194304.f;
    v = (v + 12582912.f) - 12582912.f;
    v += zp;
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
}

/* (x - zero_point) * scale, in float. */
KN_Q_FN float kn_q_dequantize(double x, double zp, float scale) {
    return (float)(x - zp) * scale;
}

/* x / scale in the float8 type `dtype` (core/fp8.h's rounding, saturating
 * or not). The zero point, which ONNX requires to be 0 for float8, is not
 * added: adding +0 would turn -0 into +0, and neither ONNX Runtime nor the
 * ONNX reference adds it. */
KN_Q_FN uint8_t kn_q_quantize_f8(float x, float scale, int dtype, int saturate) {
    return kn_f8_from_float(x / scale, dtype, saturate);
}

/* float8 code x of `dtype` times scale, in float (the zero point is 0). */
KN_Q_FN float kn_q_dequantize_f8(uint8_t x, int dtype, float scale) {
    return kn_f8_to_float(x, dtype) * scale;
}

/* DynamicQuantizeLinear's uint8 scale and zero point from the data's range
 * (widened to include 0). */
KN_Q_FN void kn_q_dynamic_params(float mn, float mx, float *scale, double *zp) {
    mx = mx > 0.f ? mx : 0.f;
    mn = mn < 0.f ? mn : 0.f;
    float s = (mx == mn ? 1.f : mx - mn) / 255.f;
    float z = 0.f - mn / s;
    z = z < 0.f ? 0.f : z > 255.f ? 255.f : z;
    *scale = s;
    *zp = (double)rintf(z);
}

/* ---- quantized layers: kiln::QConv and kiln::QMatMul (graph/qlayer.h) ----
 * The epilogue of one output element of channel c, after the exact integer
 * sum acc = sum (x - x_zp)(w - w_zp[c]) + B[c] (int32):
 *   f = (float)acc * s[c]            s[c] = x_scale * w_scale[c] (float)
 *   then each stage in order:
 *     QDQ   f = ((float)(q - zp)) * m, q = sat(rint(f / m) + zp)  (a Q->DQ
 *           pair of the source graph, kept so the rounding is the graph's)
 *     BIAS  f += C[c]                   (a float per-channel addend)
 *     ADD   f += z                      (the residual, dequantized: (float)
 *           (z_q - z_zp) * z_scale, or a float Z as it is)
 *     RELU  f = max(f, 0)
 *     CLIP  f = min(max(f, lo), hi)
 *   y = sat(rint(f / y_scale) + y_zp) for an 8-bit output, f for a float one.
 * rint rounds half to even (the default rounding mode), division and
 * products in float: what QuantizeLinear and DequantizeLinear compute, so
 * every kernel that runs this function on the same acc gives the same bits. */
enum { KN_QS_QDQ = 1, KN_QS_BIAS = 2, KN_QS_ADD = 3, KN_QS_RELU = 4, KN_QS_CLIP = 5 };
#define KN_QL_MAX_STAGES 8

typedef struct kn_qepi {
    int n_stages;
    int stage[KN_QL_MAX_STAGES];
    float mid_scale[KN_QL_MAX_STAGES];  /* per QDQ stage, in stage order */
    double mid_zp[KN_QL_MAX_STAGES], mid_lo[KN_QL_MAX_STAGES], mid_hi[KN_QL_MAX_STAGES];
    float clip_lo, clip_hi;
} kn_qepi;

/* f after the stages; bias_c is C[c] (0 without C), z the dequantized
 * residual (0 without Z). */
KN_Q_FN float kn_q_stages(const kn_qepi *e, float f, float bias_c, float z) {
    int m = 0;
    for (int i = 0; i < e->n_stages; i++) {
        switch (e->stage[i]) {
        case KN_QS_QDQ: {
            double q = kn_q_quantize(f, e->mid_scale[m], e->mid_zp[m], e->mid_lo[m], e->mid_hi[m]);
            f = kn_q_dequantize(q, e->mid_zp[m], e->mid_scale[m]);
            m++;
            break;
        }
        case KN_QS_BIAS: f = f + bias_c; break;
        case KN_QS_ADD: f = f + z; break;
        case KN_QS_RELU: f = f > 0.f ? f : 0.f; break;
        case KN_QS_CLIP: f = f < e->clip_lo ? e->clip_lo : f > e->clip_hi ? e->clip_hi : f; break;
        default: break;
        }
    }
    return f;
}

#endif
