/* qlayer.h - kiln's quantized layers, which the builder's Q/DQ pass
 * (builder/pass_qdq.c) makes from DequantizeLinear -> Conv / MatMul / Gemm
 * -> (Add, Relu, Q->DQ)... -> QuantizeLinear chains and from QLinearConv,
 * QLinearMatMul, ConvInteger and MatMulInteger.
 *
 * kiln::QConv, kiln::QMatMul (domain "kiln"), inputs:
 *   0 X (uint8/int8)        1 x_scale (float scalar)   2 x_zero_point?
 *   3 W (uint8/int8)        4 w_scale (scalar or one per output channel)
 *   5 w_zero_point? (like w_scale)
 *   6 y_scale? (float scalar; with "to" uint8/int8)   7 y_zero_point?
 *   8 B? (int32, one per output channel: added to the integer sum)
 *   9 Z? (the residual, Y's shape: uint8/int8 with 10 z_scale, 11
 *     z_zero_point?, or float)
 *   12 C? (float, one per output channel: the BIAS stage's addend)
 * Attributes: QConv those of ONNX Conv (2-D and 1-D data, NCHW);
 * QMatMul trans_b (int, 0: W [.., K, N]; 1: W [N, K], a Gemm's transB).
 *   to (int): Y's type: 2 uint8, 3 int8 (requantized), 1 float
 *      (dequantized), 6 int32 (the integer sum: ConvInteger, MatMulInteger;
 *      no scales, no stages).
 *   stages (ints, KN_QS_* of graph/quant.h), mid_scales (floats), mid_zps
 *   (ints), mid_types (ints: 2 or 3) for each QDQ stage, clip_min,
 *   clip_max (floats) for CLIP.
 * The arithmetic is graph/quant.h's kn_q_stages; output channels are W's
 * dim 0 (QConv), the last dim of Y (QMatMul).
 *
 * kiln::FP8Conv, kiln::FP8MatMul: the same inputs and attributes with X, W
 * (and an 8-bit Z) float8e4m3fn, no zero points (FP8's are 0), no B, no
 * QDQ stage; "to" 1 (float) or 17 (float8e4m3fn, quantized with y_scale,
 * saturating unless "saturate" is 0). The arithmetic (kn_f8_layer_acc's
 * order in graph/fp8layer.h): each output's sum of the exact FP32 products
 * of the E4M3 values, added in FP32 in ascending reduction index, then
 * f = acc * (x_scale * w_scale[c]) and kn_q_stages. */
#ifndef KILN_QLAYER_H
#define KILN_QLAYER_H

#include "graph.h"
#include "quant.h"

enum {
    KN_QL_X = 0, KN_QL_XS, KN_QL_XZ, KN_QL_W, KN_QL_WS, KN_QL_WZ, KN_QL_YS, KN_QL_YZ,
    KN_QL_B, KN_QL_Z, KN_QL_ZS, KN_QL_ZZ, KN_QL_C, KN_QL_N_IN
};

/* The epilogue of node n from its attributes; fails naming the node when
 * the attributes do not describe one. */
KN_HIDDEN kiln_status kn_qepi_parse(const kn_node *n, kn_qepi *e);
/* Whether the node is kiln::QConv or kiln::QMatMul. */
KN_HIDDEN bool kn_is_qlayer(const kn_node *n);
/* Whether the node is kiln::FP8Conv or kiln::FP8MatMul. */
KN_HIDDEN bool kn_is_fp8layer(const kn_node *n);
#endif
