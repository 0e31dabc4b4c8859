/* ops_nn.h - geometry shared by the nn family's shape inference and its
 * kernels: sliding windows (Conv, ConvTranspose, pooling) and Einsum
 * equations. One definition, so a schema and every tactic agree on shapes. */
#ifndef KILN_OPS_NN_H
#define KILN_OPS_NN_H

#include "graph.h"
#include "loss.h"

#define KN_WIN_MAX (KILN_MAX_DIMS - 2)

/* A sliding window over the spatial dims of an [N, C, spatial...] tensor. For
 * ConvTranspose, `in` is the input (the small side) and `out` the result. */
typedef struct kn_window {
    int nsp;                      /* number of spatial dims */
    int64_t in[KN_WIN_MAX];       /* input spatial dims */
    int64_t out[KN_WIN_MAX];      /* output spatial dims */
    int64_t kernel[KN_WIN_MAX];
    int64_t stride[KN_WIN_MAX];
    int64_t dil[KN_WIN_MAX];
    int64_t pad0[KN_WIN_MAX];     /* padding before each dim */
    int64_t pad1[KN_WIN_MAX];     /* padding after */
} kn_window;

/* Conv and pooling: output dims and pads from the node's attributes
 * (strides, dilations, pads, auto_pad) for the input spatial dims `in` and
 * the window `kernel`. ceil_mode rounds the output size up (pooling). */
KN_HIDDEN kiln_status kn_window_forward(const kn_node *n, int nsp, const int64_t *in,
                                        const int64_t *kernel, bool ceil_mode, kn_window *w);
/* ConvTranspose: also reads output_padding and output_shape. */
KN_HIDDEN kiln_status kn_window_transpose(const kn_node *n, int nsp, const int64_t *in,
                                          const int64_t *kernel, kn_window *w);

/* A parsed Einsum equation. Letters are labels 0..51; the dims an ellipsis
 * stands for are labels 52.. (right-aligned across inputs). */
#define KN_EINSUM_MAX_IN 8
#define KN_EINSUM_LABELS (52 + KILN_MAX_DIMS)
typedef struct kn_einsum {
    int n_in;
    int rank[KN_EINSUM_MAX_IN];
    int label[KN_EINSUM_MAX_IN][KILN_MAX_DIMS]; /* per input dim */
    int out_rank;
    int out_label[KILN_MAX_DIMS];
    int64_t size[KN_EINSUM_LABELS];             /* -1 for an unused label */
} kn_einsum;

/* Parse the node's equation for inputs of these ranks and dims. */
KN_HIDDEN kiln_status kn_einsum_parse(const kn_node *n, int n_in, const int *rank,
                                      const int64_t (*dims)[KILN_MAX_DIMS], kn_einsum *e);

/* RNN, GRU and LSTM: the geometry from X's and W's dims and the attributes,
 * shared by the backends. Activations are codes in this order (both
 * backends' kernels use it): Relu, Tanh, Sigmoid, Affine, LeakyRelu,
 * ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus. */
enum { KN_RNN = 0, KN_GRU = 1, KN_LSTM = 2 };
enum {
    KN_RNN_RELU = 0, KN_RNN_TANH, KN_RNN_SIGMOID, KN_RNN_AFFINE, KN_RNN_LEAKY, KN_RNN_THRESH,
    KN_RNN_SCALED_TANH, KN_RNN_HARD_SIGMOID, KN_RNN_ELU, KN_RNN_SOFTSIGN, KN_RNN_SOFTPLUS
};
typedef struct kn_rnn_fn {
    int act; /* KN_RNN_RELU.. */
    float alpha, beta;
} kn_rnn_fn;
typedef struct kn_rnn {
    int kind, gates, nact;    /* KN_RNN..; gates per step; activations per direction */
    int64_t seq, batch, input, hidden, dirs;
    bool reverse_only, layout1, linear_before_reset, input_forget;
    float clip;               /* <= 0: none */
    kn_rnn_fn f[2][3];        /* per direction: f, g, h */
} kn_rnn;

KN_HIDDEN kiln_status kn_rnn_setup(const kn_node *node, const int64_t *x_dims,
                                   const int64_t *w_dims, kn_rnn *g);

/* Attention (opset 23): sizes after the 3-D inputs are split into heads.
 * K and V are extended by the past cache: total = past + kv_seq. */
typedef struct kn_attention {
    bool rank3;                   /* Q, K, V are [batch, seq, heads * size] */
    int64_t batch, q_heads, kv_heads, q_seq, kv_seq, past, total, head, v_head;
    float scale, softcap;
    bool causal;
    int qk_mode;
} kn_attention;

/* Check the inputs (Q, K, V, attn_mask?, past_key?, past_value?) and fill a. */
KN_HIDDEN kiln_status kn_attention_geom(const kn_node *n, int n_in, const kn_tinfo *in,
                                        kn_attention *a);

/* GridSample (opsets 16, 20, 22) on 4-D inputs: X [N, C, H, W] sampled at
 * grid [N, Ho, Wo, 2] (x, y in [-1, 1]) into Y [N, C, Ho, Wo]. Mode and
 * padding as codes both backends' kernels use. */
enum { KN_GS_LINEAR = 0, KN_GS_NEAREST = 1, KN_GS_CUBIC = 2 };
enum { KN_GS_ZEROS = 0, KN_GS_BORDER = 1, KN_GS_REFLECTION = 2 };
typedef struct kn_grid_sample {
    int mode, padding;
    bool align_corners;
    int64_t n, c, h, w, ho, wo;
} kn_grid_sample;

/* QuantizeLinear and DequantizeLinear: a scale (and zero point) for the
 * whole tensor, or one per index of `axis`; `inner` elements follow that
 * axis. The quantized side's type is `qtype`, the float side's `ftype`. */
typedef struct kn_quant {
    int axis;              /* -1: one scale for the whole tensor */
    int64_t channels, inner;
    int64_t block;         /* block_size: 0, or blocks of this many along axis */
    kiln_dtype qtype, ftype;
    bool saturate;         /* float8 qtype: clamp overflow (attribute saturate, default 1) */
} kn_quant;
/* in: x, scale, zero point (n_in 2 or 3); quantize: x is the float side. */
KN_HIDDEN kiln_status kn_quant_geom(const kn_node *n, const kn_tinfo *in, int n_in, bool quantize,
                                    kn_quant *q);

/* RoiAlign: X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices
 * [R] into Y [R, C, output_height, output_width]. */
typedef struct kn_roi_align {
    int mode;                 /* 0 avg, 1 max */
    bool half_pixel;          /* coordinate_transformation_mode */
    int64_t oh, ow, sampling;
    double scale;
    int64_t n, c, h, w, rois;
} kn_roi_align;
/* NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss: attributes and shapes
 * (in: input, target, optional weight; dims may be -1 while inferring). */
KN_HIDDEN kiln_status kn_loss_geom(const kn_node *n, const kn_tinfo *in, int n_in, kn_loss *g);
KN_HIDDEN kiln_status kn_roi_align_geom(const kn_node *n, const kn_tinfo *x, const kn_tinfo *rois,
                                        const kn_tinfo *idx, kn_roi_align *g);

/* Check X's and grid's shapes and the attributes, and fill g. */
KN_HIDDEN kiln_status kn_grid_sample_geom(const kn_node *n, const kn_tinfo *x, const kn_tinfo *grid,
                                          kn_grid_sample *g);

#endif
