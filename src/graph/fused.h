/* fused.h - kiln's own ops (domain "kiln") that the builder's fusion passes
 * create. Each is an ONNX op plus an epilogue, so a reference kernel is the
 * base op's reference followed by the epilogue.
 *
 * kiln::Conv    inputs X, W, B?, Z?   attributes: those of ONNX Conv, plus
 *               activation (string, "" = none), alpha, beta (floats).
 *               Y = act(conv(X, W) + B + Z); Z (a residual) has Y's shape.
 * kiln::Gemm    inputs A, B, C?       attributes: those of ONNX Gemm, plus
 *               activation, alpha_act, beta_act.
 *               Y = act(alpha * A' B' + beta * C)
 * kiln::MatMul  inputs A, B, bias?    attributes: activation, alpha, beta.
 *               Y = act(A @ B + bias), bias broadcast to Y (usually [N]).
 * kiln::ElementwiseChain
 *               inputs X0..Xk (broadcastable to one output shape).
 *               attributes: ops (strings: op names as in ONNX, e.g. "Add",
 *               "Mul", "Relu", "Sigmoid", "Erf", "Div", "Sub", "Pow", "Sqrt",
 *               "Tanh", "Neg", "Abs", "Exp", "Log", "Clip", "LeakyRelu"...),
 *               operand (ints: input index of the second operand, -1 for a
 *               unary op), swap (ints: 1 when the chain value is the second
 *               operand, for Sub/Div/Pow), alphas, betas (floats per op).
 *               acc = X0; for each op i: acc = op_i(acc, X[operand[i]])
 *               (or op_i(X[operand[i]], acc) when swap[i]).
 *
 * Activation names the epilogues accept (kb_act_parse in backends/cpu/act.h):
 * Relu, LeakyRelu(alpha), Sigmoid, Tanh, Clip(alpha=min, beta=max),
 * HardSigmoid(alpha, beta), HardSwish, Gelu (erf form), GeluTanh, Silu
 * (x * sigmoid(x)), Elu(alpha), Softplus. */
#ifndef KILN_FUSED_H
#define KILN_FUSED_H
#define KN_DOMAIN_KILN "kiln"
#endif
