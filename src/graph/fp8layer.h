/* fp8layer.h - the arithmetic of kiln's FP8 layers (kiln::FP8Conv,
 * kiln::FP8MatMul; graph/qlayer.h), plain C for the host and the device.
 *
 * One output element of channel c:
 *   acc = sum over the reduction index k = 0, 1, ..., K-1 in that order of
 *         e4m3(x_k) * e4m3(w_k)      (FP32, starting from +0; each product
 *         is exact in FP32: two 4-bit significands, exponents in 2^-18..2^17;
 *         so a fused multiply-add rounds the same as a multiply then an add)
 *         MatMul: k over X's last dim; Conv: k = (ci * KH + kh) * KW + kw
 *         within the group (1-D: ci * KW + kw), padding taps skipped
 *   f   = acc * s[c],  s[c] = x_scale * w_scale[c] (one FP32 product)
 *   f   = kn_q_stages(f, C[c], z)   (BIAS, ADD, RELU, CLIP; z = e4m3(Z) *
 *         z_scale or a float Z)
 *   y   = e4m3(f / y_scale) (saturating unless saturate = 0) or f.
 * The CPU reference computes exactly this; tensor-core kernels (cuBLASLt)
 * sum in another order and grouping, so they are checked within a
 * tolerance (tests/cuda: |y - ref| <= 2^-10 * s[c] * sum_k |x_k w_k| +
 * one E4M3 step of an FP8 output). */
#ifndef KILN_FP8LAYER_H
#define KILN_FP8LAYER_H

#include "quant.h"

/* The output of one element from its sum (see above). */
KN_Q_FN float kn_f8_layer_out(const kn_qepi *e, float acc, float s_c, float bias_c, float z) {
    return kn_q_stages(e, acc * s_c, bias_c, z);
}

#endif
