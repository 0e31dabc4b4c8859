/* k_nn.h - pieces of the nn family's reference CPU kernels that other CPU
 * kernels share: element access by dtype, float staging of other types, a
 * float GEMM, the convolution driver with its epilogue, Gemm / MatMul cores,
 * and the kernel entry points of k_nn_*.c. Window and Einsum geometry (shared
 * with shape inference) are in graph/ops_nn.h. */
#ifndef KILN_CPU_K_NN_H
#define KILN_CPU_K_NN_H

#include "act.h"
#include "backends/backend.h"
#include "graph/ops_nn.h"

/* ---- element access: any real or integer dtype, as double ---- */
static inline double kb_ld(const void *p, kiln_dtype t, size_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return kn_half_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return kn_bf16_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case KILN_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    default: return 0.0;
    }
}

static inline void kb_st(void *p, kiln_dtype t, size_t i, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = (float)v; break;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((uint16_t *)p)[i] = kn_float_to_half((float)v); break;
    case KILN_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = kn_float_to_bf16((float)v); break;
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case KILN_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: break;
    }
}

static inline bool kb_is_real(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

static inline int64_t kb_numel(const kb_tensor *t) { return kn_numel(t->rank, t->dims); }

/* ---- float staging (k_nn_stage.c): float-only reference paths serve the
 * other real types by converting up to KB_STAGE_MAX inputs and output 0
 * through workspace memory ---- */
#define KB_STAGE_MAX 4
typedef struct kb_staged {
    kb_tensor in[KB_STAGE_MAX]; /* float views (or the originals when float / absent) */
    kb_tensor out;
} kb_staged;
/* Workspace bytes the copies need (0 when everything is float). */
KN_HIDDEN size_t kb_stage_bytes(const kb_tensor *in, int n_in, const kb_tensor *out);
/* Whether every present input and the output are real types. */
KN_HIDDEN bool kb_stage_types_ok(const kb_tensor *in, int n_in, const kb_tensor *out);
/* Convert the inputs into mem (kb_stage_bytes of it) and point st at them. */
KN_HIDDEN void kb_stage_in(const kb_tensor *in, int n_in, const kb_tensor *out, void *mem,
                           kb_staged *st);
/* Convert st->out back into out (nothing when out is float). */
KN_HIDDEN void kb_stage_out(const kb_staged *st, kb_tensor *out);

/* ---- float GEMM (row-major): C = alpha * op(A) op(B) + beta * C, where
 * op(A) is m x k (A stored k x m when ta) and op(B) k x n (B stored n x k
 * when tb). beta == 0 ignores C's old contents (NaNs included). ---- */
KN_HIDDEN void kb_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc, int threads);

typedef void (*kb_gemm_fn)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                           float *c, int64_t ldc, int threads);

/* kiln::Attention on the CPU (k_fused.c): workspace, and the run with a
 * float GEMM of kb_sgemm's signature (the reference's or a library's). */
KN_HIDDEN size_t kb_attention_workspace(const kn_node *node, const kb_tensor *in, int n_in,
                                        const kb_tensor *out);
KN_HIDDEN kiln_status kb_attention_run(const kb_run *r, kb_gemm_fn gemm);

/* ---- what a fused kernel adds after the main op ---- */
typedef struct kb_epilogue {
    const float *bias;      /* per output channel (Conv) or broadcast (see users); may be NULL */
    const float *residual;  /* same shape as the output; may be NULL */
    kb_act act;
    float alpha, beta;      /* activation parameters */
} kb_epilogue;

/* Apply bias[ch] (if any), residual (if any) and the activation to rows of
 * `len` floats, row r having channel r % channels. */
KN_HIDDEN void kb_epilogue_rows(const kb_epilogue *ep, float *y, const float *res, int64_t rows,
                                int64_t len, int64_t channels, int threads);

/* ---- convolution (float) ---- */
typedef struct kb_conv {
    kn_window w;
    int64_t batch, cin, cout, group;
    int64_t in_size, out_size, kernel_size; /* products over the spatial dims */
    bool direct;                            /* 1x1, stride 1, no pads: no im2col */
    int slots;                              /* im2col buffers (groups run in parallel) */
    int64_t chunk;                          /* output positions per im2col pass */
} kb_conv;

/* Floats of one im2col buffer at most (larger convolutions go in chunks of
 * output positions). */
#define KB_CONV_COL_FLOATS ((int64_t)1 << 22)

/* Geometry of Conv node for input x and weights w. */
KN_HIDDEN kiln_status kb_conv_setup(const kn_node *node, const kb_tensor *x, const kb_tensor *w,
                                    kb_conv *cv);
/* Let kb_conv_forward run up to `threads` groups at once (grouped convs);
 * changes the workspace size. */
KN_HIDDEN void kb_conv_use_threads(kb_conv *cv, int threads);
/* Workspace bytes kb_conv_forward needs (an im2col matrix per slot). */
KN_HIDDEN size_t kb_conv_workspace(const kb_conv *cv);
/* y = epilogue(conv(x, w)); ep may be NULL; ws holds kb_conv_workspace bytes. */
KN_HIDDEN void kb_conv_forward(const kb_conv *cv, const float *x, const float *w, float *y,
                               const kb_epilogue *ep, float *ws, int threads);

/* ---- Gemm (float): y = alpha * A' B' + beta * C per the node's attributes;
 * c may be NULL ---- */
KN_HIDDEN void kb_gemm_f32(const kn_node *node, const kb_tensor *a, const kb_tensor *b,
                           const kb_tensor *c, kb_tensor *y, int threads);

/* ---- MatMul with numpy broadcasting (float): y = a @ b ---- */
KN_HIDDEN void kb_matmul_f32(const kb_tensor *a, const kb_tensor *b, kb_tensor *y, int threads);

/* ---- kernel entry points (k_nn_*.c), gathered in k_nn.c's table ---- */
KN_HIDDEN kiln_status kb_nn_conv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                         int n_in, const kb_tensor *out, int n_out, void **inst,
                                         size_t *workspace);
KN_HIDDEN kiln_status kb_nn_conv_run(const kb_run *r); /* r->inst: the prepared kb_conv */
KN_HIDDEN void kb_nn_conv_release(void *inst);
KN_HIDDEN kiln_status kb_nn_convt_prepare(const void *state, const kn_node *node,
                                          const kb_tensor *in, int n_in, const kb_tensor *out,
                                          int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kb_nn_convt_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_convint_prepare(const void *state, const kn_node *node,
                                            const kb_tensor *in, int n_in, const kb_tensor *out,
                                            int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kb_nn_convint_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_qlinearconv_prepare(const void *state, const kn_node *node,
                                                const kb_tensor *in, int n_in,
                                                const kb_tensor *out, int n_out, void **inst,
                                                size_t *workspace);
KN_HIDDEN kiln_status kb_nn_qlinearconv_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_pool_run(const kb_run *r);

/* Channels-last references (k_layout.c): `base` runs on channels-first
 * copies of the inputs in `mask` (bit i: input i) and of output 0, made in
 * the workspace. mask 0 runs base as it is (a channels-first node). The
 * instance owns base's instance; release it with kb_cl_release. */
KN_HIDDEN kiln_status kb_cl_prepare(const kb_kernel *base, unsigned mask, const kn_node *node,
                                    const kb_tensor *in, int n_in, const kb_tensor *out,
                                    int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kb_cl_run(const kb_run *r);
KN_HIDDEN void kb_cl_release(void *inst);
KN_HIDDEN kiln_status kb_nn_max_unpool_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_grid_sample_run(const kb_run *r);
KN_HIDDEN kiln_status kb_window_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nll_loss_run(const kb_run *r);
KN_HIDDEN kiln_status kb_random_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                        int n_in, const kb_tensor *out, int n_out, void **inst,
                                        size_t *workspace);
KN_HIDDEN void kb_random_release(void *inst);
KN_HIDDEN kiln_status kb_random_run(const kb_run *r);
KN_HIDDEN kiln_status kb_sce_loss_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                          int n_in, const kb_tensor *out, int n_out, void **inst,
                                          size_t *workspace);
KN_HIDDEN kiln_status kb_sce_loss_run(const kb_run *r);
KN_HIDDEN kiln_status kb_quantize_run(const kb_run *r);
KN_HIDDEN kiln_status kb_dequantize_run(const kb_run *r);
KN_HIDDEN kiln_status kb_dynamic_quantize_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_roi_align_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_nms_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_global_pool_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_batchnorm_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_instancenorm_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_layernorm_run(const kb_run *r);
/* kiln::LayerNorm (graph/fused.h) */
KN_HIDDEN kiln_status kb_nn_layernorm_fused_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_groupnorm_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_rmsnorm_run(const kb_run *r);
/* k_nn_rotary.c: RotaryEmbedding (ONNX and com.microsoft). */
KN_HIDDEN kiln_status kb_nn_rotary_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_lpnorm_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_lrn_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_mvn_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                        int n_in, const kb_tensor *out, int n_out, void **inst,
                                        size_t *workspace);
KN_HIDDEN kiln_status kb_nn_mvn_run(const kb_run *r);
KN_HIDDEN kiln_status kb_nn_attention_prepare(const void *state, const kn_node *node,
                                              const kb_tensor *in, int n_in, const kb_tensor *out,
                                              int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kb_nn_attention_run(const kb_run *r);
/* com.microsoft MultiHeadAttention and Attention references (k_nn_attention.c). */
KN_HIDDEN kiln_status kb_ms_mha_run(const kb_run *r);
KN_HIDDEN kiln_status kb_ms_attention_run(const kb_run *r);
KN_HIDDEN kiln_status kb_ms_gqa_run(const kb_run *r);
/* Attention's geometry from kernel tensors (absent inputs have no data);
 * the CUDA backend's too. */
KN_HIDDEN kiln_status kb_nn_attention_geom(const kn_node *node, const kb_tensor *in, int n_in,
                                           kn_attention *a);
KN_HIDDEN kiln_status kb_nn_rnn_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                        int n_in, const kb_tensor *out, int n_out, void **inst,
                                        size_t *workspace);
KN_HIDDEN kiln_status kb_nn_rnn_run(const kb_run *r);

#endif
