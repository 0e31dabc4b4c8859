/* fused.h - kiln's own ops (domain "kiln") that the builder's fusion passes
 * create. Each is an ONNX op plus an epilogue, so a reference kernel is the
 * base op's reference followed by the epilogue.
 *
 * kiln::Conv    inputs X, W, B?, Z?   attributes: those of ONNX Conv, plus
 *               activation (string, "" = none), alpha, beta (floats).
 *               Y = act(conv(X, W) + B + Z); Z (a residual) has Y's shape.
 *               channels_last (int, default 0): 1 for 2-D..3-D convolutions on
 *               channels-last data: X [N, S..., C], W [K, S..., C/group],
 *               Z and Y [N, S..., K] (the builder's layout pass makes these).
 * kiln::MaxPool, kiln::AveragePool
 *               the ONNX pools (attributes as theirs, no Indices output) on
 *               channels-last X [N, S..., C] -> Y [N, S'..., C];
 *               channels_last must be 1.
 * kiln::Attention
 *               inputs Q [B, Sq, H, D], K [B, Sk, Hkv, D], V [B, Sk, Hkv, Dv],
 *               M? (additive, broadcastable to [B, H, Sq, Sk]); attribute
 *               scale (float, default 1).
 *               Y [B, Sq, H, Dv] = softmax(scale * Q K^T + M) V per batch and
 *               head (the builder's attention matcher makes it from
 *               softmax(Q K^T s + M) V in any exporter's spelling, and from
 *               the ONNX / com.microsoft attention ops). Hkv divides H
 *               (grouped-query attention): query head h reads K/V head
 *               h / (H / Hkv). A query row whose every key has M = -inf
 *               gives zeros (what SDPA's NaN guard after the softmax gives;
 *               masks made from booleans use -inf, exact in every float
 *               type). scale_pending (int): 1 while the builder has yet
 *               to set scale to 1/sqrt(D) (ignored by kernels).
 *               qkv_packed (int, default 0): 1 when input 0 is one
 *               [B, S, 3, H, D] tensor holding Q, K and V (inputs 1 and 2
 *               absent; the builder packs the three projections into one
 *               GEMM whose output the kernel reads in place).
 *               causal (int, default 0): 1 masks key j of query row i
 *               where j > i + Sk - Sq (by position, aligned to the last
 *               key as after a past cache; j > i when Sq = Sk), besides M
 *               (which then holds only the other terms, e.g. padding).
 *               softcap (float, default 0): > 0 turns the scaled scores s
 *               into softcap * tanh(s / softcap) before M is added (ONNX
 *               Attention's softcap; the CUDA general kernel alone).
 *               Operand views (ints of 3, Q K V; absent: every operand a
 *               whole [B, S, H, D] input): layouts 0 for an input
 *               [B, S, Hx, D], 1 for a heads-first [B, Hx, S, D] (a past
 *               cache's Concat read in place); head_offsets and heads: the
 *               operand is heads [off, off + heads) of the input's Hx
 *               (heads 0: all of them), so Q, K and V may be one packed
 *               [B, S, Hq + 2 Hkv, D] tensor read through three views
 *               (kn_attention_views; not with qkv_packed).
 *               mask_batch_mod (int, default 0): 1 lets M's batch dim be
 *               any divisor G of B: batch b reads mask batch b % G (Swin's
 *               shifted windows: B = images * G windows, one mask per
 *               window). Every kernel indexes the mask batch as b % G, so
 *               a mask of batch 1 or B reads the same either way.
 * kiln::Gemm    inputs A, B, C?       attributes: those of ONNX Gemm, plus
 *               activation, alpha_act, beta_act.
 *               Y = act(alpha * A' B' + beta * C)
 * kiln::MatMul  inputs A, B, bias?, Z?  attributes: activation, alpha, beta.
 *               Y = act(A @ B + bias + Z), bias broadcast to Y (usually [N]),
 *               Z (a residual) of Y's shape.
 * kiln::LayerNorm
 *               inputs X, Scale, B?, Ids?, R1..R4?; attributes epsilon
 *               (default 1e-5), gather (int, default 0).
 *               rows = X (gather 0) or X[Ids] (gather 1: X a [V, H] table,
 *               Ids int32/int64 of any shape, negative ids counting from V,
 *               Y [Ids..., H]); Y = LayerNormalization over the last dim of
 *               (rows + R1 + ... + Rk), with Scale and B (H values each).
 *               Each R is a suffix of Y's shape (leading ones, then Y's
 *               trailing dims, H included): a residual, or a per-position
 *               table such as BERT's position embeddings. The sum is kept
 *               in float (no rounding between the adds and the norm). The
 *               builder's layernorm pass makes it from Add chains (and a
 *               Gather of a constant table) feeding a LayerNormalization.
 *               Optional output 1, Sum: rows + R1 + ... + Rk in X's type
 *               (Y's shape), for a sum also read elsewhere (the residual
 *               stream of a pre-norm block, as SkipLayerNormalization's
 *               fourth output).
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
 *               Optional views (ints, 2 per input: offset, n): input k
 *               with n > 0 is columns [offset, offset + n) of its rows
 *               (its last dim; the other dims as they are), read in place:
 *               a part of a packed GEMM product (a gated MLP's gate/up).
 *
 * Activation names the epilogues accept (kb_act_parse in backends/cpu/act.h):
 * Relu, LeakyRelu(alpha), Sigmoid, Tanh, Clip(alpha=min, beta=max),
 * HardSigmoid(alpha, beta), HardSwish, Gelu (erf form), GeluTanh, Silu
 * (x * sigmoid(x)), Elu(alpha), Softplus. */
#ifndef KILN_FUSED_H
#define KILN_FUSED_H
#define KN_DOMAIN_KILN "kiln"

#include "core/core.h"
/* Addends a kiln::LayerNorm takes (inputs 4 .. 4 + KN_LN_MAX_ADD - 1). */
#define KN_LN_MAX_ADD 4
/* Element strides of a kiln::Attention mask (rank <= 4, row-major) over
 * [B, H, Sq, Sk], right-aligned; broadcast dims (size 1 or missing) get 0. */
KN_HIDDEN void kn_mask_strides(int rank, const int64_t *dims, int64_t strides[4]);
/* The batches of a kiln::Attention mask (its dim 0 at rank 4, else 1):
 * batch b of the attention reads mask batch b % this (b itself, or 0 under
 * a broadcast, unless mask_batch_mod). */
KN_HIDDEN int64_t kn_mask_batches(int rank, const int64_t *dims);
/* One kiln::Attention operand as the kernels read it: element (b, s, h, d)
 * of the [B, S, H, D] operand lies at off + b * sb + s * ss + h * sh + d of
 * its input tensor (d contiguous). */
typedef struct kn_att_view {
    int64_t b, s, h, d;
    int64_t off, sb, ss, sh;
} kn_att_view;
struct kn_node;
/* The Q, K and V views of kiln::Attention node n over its inputs' ranks
 * and dims (rank[i] -1: input i absent), from qkv_packed or the layouts /
 * head_offsets / heads attributes. Errors name the node. */
KN_HIDDEN kiln_status kn_attention_views(const struct kn_node *n, int n_in, const int *rank,
                                         const int64_t (*dims)[KILN_MAX_DIMS], kn_att_view v[3]);
/* Whether r broadcasts to y as a suffix: r's dims past its leading ones are
 * y's trailing dims, the last of them included (so r repeats whole rows of
 * y's last dim): what a kiln::LayerNorm addend must be. */
struct kn_tinfo;
KN_HIDDEN bool kn_suffix_of(const struct kn_tinfo *r, const struct kn_tinfo *y);
/* dims of [N, S..., C] as [N, C, S...] (to_first), or the reverse. */
KN_HIDDEN void kn_dims_channels(int rank, const int64_t *in, int64_t *out, bool to_first);
#endif
