/* seq.cuh - launchers of the CUDA recurrent and integer families (k_seq.c is
 * their glue): the RNN / GRU / LSTM per-step gate kernels around cuBLASLt
 * products, and exact integer MatMulInteger / QLinearMatMul / ConvInteger /
 * QLinearConv. Arithmetic follows the CPU reference kernels (k_nn_rnn.c,
 * k_nn_qconv.c, k_nn.c) operation for operation. */
#ifndef KILN_CUDA_SEQ_CUH
#define KILN_CUDA_SEQ_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------- recurrent ops ---------------- */

/* Activations numbered as the CPU reference's rnn_act. */
typedef enum kc_rnn_fn {
    KC_RNN_RELU = 0, KC_RNN_TANH, KC_RNN_SIGMOID, KC_RNN_AFFINE, KC_RNN_LEAKY, KC_RNN_THRESH,
    KC_RNN_SCALED_TANH, KC_RNN_HARD_SIGMOID, KC_RNN_ELU, KC_RNN_SOFTSIGN, KC_RNN_SOFTPLUS
} kc_rnn_fn;

typedef struct kc_rnn_act {
    int fn;
    float alpha, beta;
} kc_rnn_act;

enum { KC_RNN_KIND_RNN = 0, KC_RNN_KIND_GRU = 1, KC_RNN_KIND_LSTM = 2 };

/* One recurrent node's geometry and the float buffers of its run, each
 * direction's part `*_dir` floats after the previous one's. State h, c, rh
 * and hr2 are [batch][hidden] a direction (st_dir apart); xp is
 * [rows][gates * hidden] with X's row order (t * batch + b, or b * seq + t
 * for layout 1); hr is [batch][hr_n] (h R^T of the gates that need it);
 * hr2 is the GRU candidate's (r * h) Rh^T when linear_before_reset is 0.
 * bias [dirs][2 * gates * hidden] (Wb then Rb), peep [dirs][3 * hidden],
 * lens [batch] and y may be NULL. */
typedef struct kc_rnn {
    int kind, gates, dirs;
    int reverse_only, layout1, lbr, input_forget;
    int64_t seq, batch, hidden;
    float clip;                    /* <= 0: none */
    kc_rnn_act f[2][3];            /* per direction: f, g, h */
    const float *xp;
    float *hr, *hr2, *h, *c, *rh;
    int64_t hr_n;
    int64_t xp_dir, hr_dir, st_dir;
    const void *bias, *peep, *lens;
    kiln_dtype bias_dt, peep_dt, lens_dt;
    void *y;
    kiln_dtype y_dt;
} kc_rnn;

/* dst[m * dst_stride + e] = (float)src[src_off + m * src_stride + e] for
 * m < mats, e < count. */
cudaError_t kc_seq_to_float(const void *src, kiln_dtype dt, int64_t src_off, int64_t src_stride,
                            float *dst, int64_t dst_stride, int64_t mats, int64_t count,
                            cudaStream_t stream);
/* State from initial_h / initial_c (either may be NULL: zeros), laid out as
 * Y_h ([dirs, batch, H], or [batch, dirs, H] for layout 1). */
cudaError_t kc_rnn_init(const kc_rnn *p, const void *h0, kiln_dtype h0_dt, const void *c0,
                        kiln_dtype c0_dt, cudaStream_t stream);
/* One time step of every direction once hr (and hr2) hold its products.
 * phase 0: the whole cell; GRU without linear_before_reset runs phase 1
 * (the reset gate: rh = r * h) before its second product, then phase 2. */
cudaError_t kc_rnn_step(const kc_rnn *p, int64_t step, int phase, cudaStream_t stream);
/* Y_h and Y_c (either may be NULL) from the final state. */
cudaError_t kc_rnn_finish(const kc_rnn *p, void *yh, kiln_dtype yh_dt, void *yc, kiln_dtype yc_dt,
                          cudaStream_t stream);

/* ---------------- integer products ---------------- */

/* Per-index parameters (zero points, scales): NULL, one value, or one per
 * row / column / channel. */
typedef struct kc_qparam {
    const void *p;
    kiln_dtype dt;
    int per;                       /* 0: one value (index 0), 1: indexed */
} kc_qparam;

/* Batched 8-bit products with numpy batch broadcasting: Y[bi] = (A[bi] -
 * za[row]) (B[bi] - zb[col]) summed exactly. a_bstride / b_bstride are the
 * element strides of each of Y's `br` batch dims into A and B (0 where
 * broadcast). requant 0: int32 Y (MatMulInteger); 1: QLinearMatMul's
 * 8-bit Y with scales as, bs, ys and zero point yz. */
typedef struct kc_qmm {
    int64_t m, n, k, batches;
    int br;
    int64_t ydims[KC_MAX_DIMS], a_bstride[KC_MAX_DIMS], b_bstride[KC_MAX_DIMS];
    kiln_dtype a_dt, b_dt, y_dt;
    kc_qparam za, zb;
    int requant;
    kc_qparam as, bs, ys, yz;
} kc_qmm;
cudaError_t kc_qmatmul(const void *a, const void *b, void *y, const kc_qmm *q,
                       cudaStream_t stream);

/* 8-bit convolution over 1-3 spatial dims (padded to 3 at the front),
 * int32 sums as the CPU's; requant as for kc_qmm with per-channel ws and
 * an int32 bias. */
typedef struct kc_qconv {
    int64_t batch, cin, cout, group;
    int64_t in[3], out[3], kernel[3], stride[3], dil[3], pad0[3];
    kiln_dtype x_dt, w_dt, y_dt;
    kc_qparam xz, wz;
    int requant;
    kc_qparam xs, ws, ys, yz, bias; /* bias: int32, may be absent (p NULL) */
} kc_qconv;
cudaError_t kc_qconv_run(const void *x, const void *w, void *y, const kc_qconv *q,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
