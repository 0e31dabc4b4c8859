/* kc_common.h - what the CUDA backend's kb_kernel glue files share: CUDA
 * error conversion naming the node, the per-thread library handles, shape
 * helpers for launchers, and the kernel tables. C only (never included by
 * .cu files, which see kc_types.h alone). */
#ifndef KILN_CUDA_KC_COMMON_H
#define KILN_CUDA_KC_COMMON_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backends/backend.h"
#include "kc_types.h"

/* A failed CUDA call or launch as a status naming the node (node may be
 * NULL): "node 'x' (Op): <what>: <CUDA's message>". Clears CUDA's sticky
 * last error so later calls do not report it again. */
KN_HIDDEN kiln_status kc_cuda_fail(const kn_node *node, cudaError_t e, const char *what);
KN_HIDDEN kiln_status kc_cublas_fail(const kn_node *node, cublasStatus_t s, const char *what);
KN_HIDDEN kiln_status kc_cudnn_fail(const kn_node *node, cudnnStatus_t s, const char *what);

/* One step of a captured plan (cuda_graph_step): the capture's leaf node
 * after it (NULL when there were several), and the part of the shared
 * workspace it was given (ws_bytes 0: none). */
typedef struct {
    cudaGraphNode_t leaf;
    const void *ws;
    size_t ws_bytes;
} kc_step_mark;

/* A captured graph's memset nodes of up to 1 MiB, with plain edges, as
 * kernel nodes writing the same bytes (cuda_backend.c; what a plan's graph
 * and the builder's timing graphs get before instantiation). With the
 * capture's steps (marks, n; NULL, 0 for none), a memset node that opens a
 * step and clears part of that step's workspace also moves off the chain:
 * it then follows the last earlier step that had a workspace (if there is
 * one), and runs beside the steps in between. A mark whose leaf was a
 * replaced memset is updated to the kernel node that replaced it. */
KN_HIDDEN kiln_status kc_graph_memsets_as_kernels(cudaGraph_t g, kc_step_mark *marks, size_t n);

#define KC_CUDA(node, call)                                       \
    do {                                                          \
        cudaError_t kc_e_ = (call);                               \
        if (kc_e_ != cudaSuccess)                                 \
            return kc_cuda_fail((node), kc_e_, #call);            \
    } while (0)
#define KC_CUBLAS(node, call)                                     \
    do {                                                          \
        cublasStatus_t kc_s_ = (call);                            \
        if (kc_s_ != CUBLAS_STATUS_SUCCESS)                       \
            return kc_cublas_fail((node), kc_s_, #call);          \
    } while (0)
#define KC_CUDNN(node, call)                                      \
    do {                                                          \
        cudnnStatus_t kc_s_ = (call);                             \
        if (kc_s_ != CUDNN_STATUS_SUCCESS)                        \
            return kc_cudnn_fail((node), kc_s_, #call);           \
    } while (0)

/* Library handles, one per host thread, created on first use and destroyed
 * when the thread exits (see cuda_backend.c for why). prepare() calls these
 * so the handle exists before the first run on that thread. */
KN_HIDDEN kiln_status kc_cublaslt_handle(const kn_node *node, cublasLtHandle_t *out);
KN_HIDDEN kiln_status kc_cudnn_handle(const kn_node *node, cudaStream_t stream, cudnnHandle_t *out);

static inline cudaStream_t kc_stream(const kb_run *r) { return (cudaStream_t)r->stream; }
static inline int64_t kc_numel(const kb_tensor *t) { return kn_numel(t->rank, t->dims); }
static inline bool kc_present(const kb_tensor *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED && in[i].data;
}
static inline bool kc_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}
/* Axis `axis` of a rank-`rank` tensor, negative counting from the end. */
static inline kiln_status kc_norm_axis(const kn_node *n, int64_t axis, int rank, int *out) {
    if (axis < -rank || axis >= (rank ? rank : 1))
        return kn_node_error(n, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

/* Fill bc for n_in inputs broadcast into out's shape, merging dims where
 * every input allows. Fails when a shape does not broadcast or there are
 * too many inputs. */
KN_HIDDEN kiln_status kc_bcast_init(const kn_node *node, kc_bcast *bc, int n_in,
                                    const kb_tensor *const *in, const kb_tensor *out);
/* The same where input k (rows[k] > 0) is a column range of rows rows[k]
 * wide (its data at the range's first column, its dims the range's). */
KN_HIDDEN kiln_status kc_bcast_init_rows(const kn_node *node, kc_bcast *bc, int n_in,
                                         const kb_tensor *const *in, const kb_tensor *out,
                                         const int64_t *rows);
/* Row-major element strides. */
KN_HIDDEN void kc_strides(int rank, const int64_t *dims, int64_t *strides);

/* A strided batched cuBLASLt product (k_blas.c), row-major:
 * Y[i] = A[i] (m x k) @ B[i] (k x n) for i < batch, A[i] at a + i*stride_a
 * elements (0: shared), B[i] likewise, Y[i] at y + i*m*n. a, b, y may be
 * NULL at creation (they only hint at alignment). */
typedef struct kc_gemm kc_gemm;
KN_HIDDEN kiln_status kc_gemm_create(const kn_node *node, kiln_dtype dt, int64_t m, int64_t n,
                                     int64_t k, int64_t batch, int64_t stride_a, int64_t stride_b,
                                     const void *a, const void *b, const void *y, kc_gemm **out,
                                     size_t *workspace);
KN_HIDDEN kiln_status kc_gemm_run(const kn_node *node, const kc_gemm *g, const void *a,
                                  const void *b, void *y, void *ws, size_t wsz,
                                  cudaStream_t stream);
KN_HIDDEN void kc_gemm_destroy(kc_gemm *g);
/* The general form: B may be given transposed (n x k), a per-column bias
 * (n values), ReLU and a residual C of Y's shape ride the epilogue:
 * Y = relu?(A B + bias + C). */
typedef struct kc_gemm_spec {
    kiln_dtype dt;
    int64_t m, n, k, batch, stride_a, stride_b;
    bool tb, bias, relu, add_c;
    int index;                   /* cuBLASLt heuristic rank: 0 best, 1 second, ... */
    const void *a, *b, *y, *bias_ptr; /* alignment hints (may be NULL) */
} kc_gemm_spec;
KN_HIDDEN kiln_status kc_gemm_create_spec(const kn_node *node, const kc_gemm_spec *spec,
                                          kc_gemm **out, size_t *workspace);
/* bias and c as the spec said (NULL when it did not ask). */
KN_HIDDEN kiln_status kc_gemm_run_ex(const kn_node *node, const kc_gemm *g, const void *a,
                                     const void *b, void *y, const void *bias, const void *c,
                                     void *ws, size_t wsz, cudaStream_t stream);

/* Convolutions (k_conv.c, shared with k_conv_graph.c): the most workspace a
 * cuDNN tactic may ask for; the cuDNN type of a kiln real type (false for
 * others); the node's window for channels-first X dims xd and W dims wd of
 * rank `rank` (1 to 3 spatial dims, symmetric pads only, else a clear
 * KILN_ERR_UNSUPPORTED); whether a Conv / kiln::Conv is what cudnn_fused
 * takes (one real type throughout, Z of Y's shape, Relu or no activation,
 * symmetric pads, channels-last only in 2-D). */
#define KC_CUDNN_MAX_WS ((size_t)512 << 20)
KN_HIDDEN bool kc_dnn_type(kiln_dtype t, cudnnDataType_t *out);
/* [N, C, spatial...] as cuDNN's dims (at least 4: a 1-D case gets a spatial
 * dim of 1 in front); returns the count. */
KN_HIDDEN int kc_dnn_dims(int rank, const int64_t *d, int *out);
/* A packed NCHW-style tensor descriptor of those dims. */
KN_HIDDEN kiln_status kc_tensor_desc(const kn_node *node, cudnnTensorDescriptor_t *t,
                                     cudnnDataType_t dt, int rank, const int64_t *dims);
struct kn_window;
/* A pooling node's window over X [N, C, spatial...] (1 to 3 spatial dims,
 * kernel_shape, strides, pads, dilations, ceil_mode), with clear errors. */
KN_HIDDEN kiln_status kc_pool_window(const kn_node *node, const kb_tensor *x,
                                     struct kn_window *w);
/* A window's nsp spatial dims into 3 slots, the spatial dims last (leading
 * slots: size, kernel, stride and dilation 1, pads 0); pad1 may be NULL. */
KN_HIDDEN void kc_window3(const struct kn_window *w, int nsp, int64_t *in, int64_t *out,
                          int64_t *kernel, int64_t *stride, int64_t *dil, int64_t *pad0,
                          int64_t *pad1);
KN_HIDDEN kiln_status kc_conv_window(const kn_node *node, int rank, const int64_t *xd,
                                     const int64_t *wd, struct kn_window *w);
KN_HIDDEN bool kc_conv_supports_relu(const kn_node *node, const kn_tinfo *in, int n_in,
                                     const kn_tinfo *out, int n_out);

/* Kernel tables, one per op family. */
extern const kb_kernel kb_cuda_elementwise[];
extern const size_t kb_cuda_elementwise_count;
extern const kb_kernel kb_cuda_tensor[];
extern const size_t kb_cuda_tensor_count;
extern const kb_kernel kb_cuda_nn[];
extern const size_t kb_cuda_nn_count;
extern const kb_kernel kb_cuda_blas[];
extern const size_t kb_cuda_blas_count;
extern const kb_kernel kb_cuda_conv[];
extern const size_t kb_cuda_conv_count;
extern const kb_kernel kb_cuda_index[];
extern const size_t kb_cuda_index_count;
extern const kb_kernel kb_cuda_shape[]; /* k_shape.c */
extern const size_t kb_cuda_shape_count;
extern const kb_kernel kb_cuda_nn2[]; /* k_nn2.c */
extern const size_t kb_cuda_nn2_count;
extern const kb_kernel kb_cuda_conv_graph[]; /* k_conv_graph.c */
extern const size_t kb_cuda_conv_graph_count;
extern const kb_kernel kb_cuda_int8[]; /* k_int8.c */
extern const size_t kb_cuda_int8_count;
extern const kb_kernel kb_cuda_fp8[]; /* k_fp8.c: kiln::FP8Conv, kiln::FP8MatMul */
extern const size_t kb_cuda_fp8_count;
extern const kb_kernel kb_cuda_seq[]; /* k_seq.c */
extern const size_t kb_cuda_seq_count;
extern const kb_kernel kb_cuda_attn_onnx[]; /* k_attention_onnx.c */
extern const size_t kb_cuda_attn_onnx_count;
extern const kb_kernel kb_cuda_spectral[]; /* k_spectral.c */
extern const size_t kb_cuda_spectral_count;
extern const kb_kernel kb_cuda_rotary[]; /* k_rotary.c */
extern const size_t kb_cuda_rotary_count;
extern const kb_kernel kb_cuda_tfidf[]; /* k_tfidf.c */
extern const size_t kb_cuda_tfidf_count;
extern const kb_kernel kb_cuda_control[]; /* k_control.c: If, Loop, Scan */
extern const size_t kb_cuda_control_count;

/* All CUDA kernels for (domain, op_type), fills up to cap; returns the count. */
KN_HIDDEN int kb_cuda_kernels_for(const char *domain, const char *op_type, const kb_kernel **out,
                                  int cap);
KN_HIDDEN const kb_kernel *kb_cuda_kernel_find(const char *domain, const char *op_type,
                                               const char *tactic);

#endif
