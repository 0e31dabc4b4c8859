/* nn.cuh - launchers of the CUDA nn family's own kernels: Softmax and
 * LogSoftmax along an axis, LayerNormalization, axis reductions, pooling
 * (MaxPool / AveragePool over 1-3 spatial dims) and the global pools. */
#ifndef KILN_CUDA_NN_CUH
#define KILN_CUDA_NN_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x, y: [outer, n, inner] of dt; softmax (log_softmax when log) over n. */
cudaError_t kc_softmax(const void *x, void *y, kiln_dtype dt, int64_t outer, int64_t n,
                       int64_t inner, int log, cudaStream_t stream);

/* Rows of `inner` elements: y = (x - mean) / sqrt(var + eps) * scale + bias;
 * scale and bias (bias may be NULL) hold `inner` elements of pt; mean and
 * inv_std (may be NULL) get one value per row, of st. */
cudaError_t kc_layernorm(const void *x, void *y, kiln_dtype dt, int64_t rows, int64_t inner,
                         const void *scale, const void *bias, kiln_dtype pt, float eps,
                         void *mean, void *inv_std, kiln_dtype st, cudaStream_t stream);

/* kiln::LayerNorm's sum ahead of the norm (graph/fused.h): row r of the
 * input is x's row r, or, with ids, the [table_rows, inner] table x's row
 * ids[r] (negative ids count from the end; ids outside the table give a
 * row of zeros, as kc_gather does), plus each addend's row r % add_rows[k]. */
#define KC_LN_MAX_ADD 4
typedef struct kc_ln_sum {
    const void *ids;
    kiln_dtype ids_dt;
    int64_t table_rows;
    int n_add;
    const void *add[KC_LN_MAX_ADD];
    int64_t add_rows[KC_LN_MAX_ADD];
    void *sum_out; /* the sums themselves, [rows, inner] of dt; NULL: not kept */
} kc_ln_sum;
/* kc_layernorm over those sums (formed in float), without Mean / InvStdDev;
 * x and the addends are of dt. */
cudaError_t kc_layernorm_sum(const void *x, const kc_ln_sum *sum, void *y, kiln_dtype dt,
                             int64_t rows, int64_t inner, const void *scale, const void *bias,
                             kiln_dtype pt, float eps, cudaStream_t stream);

typedef enum kc_reduce_op {
    KC_RED_SUM = 0, KC_RED_MEAN, KC_RED_MAX, KC_RED_MIN, KC_RED_PROD, KC_RED_SUM_SQUARE,
    KC_RED_L1, KC_RED_L2, KC_RED_LOG_SUM, KC_RED_LOG_SUM_EXP
} kc_reduce_op;
/* The input's dims split into kept and reduced groups (each with its input
 * strides, in elements); the output is the kept dims, row-major. Real types
 * reduce in float (float64 in double); integer types (int8 to int64, uint8 to uint64, bool)
 * exactly in int64 where the op allows (L2, LogSum, LogSumExp in float),
 * with ilo / ihi the type's range (Max / Min of nothing). */
typedef struct kc_reduce {
    int op;
    int n_keep, n_red;
    int64_t keep_dims[KC_MAX_DIMS], keep_stride[KC_MAX_DIMS];
    int64_t red_dims[KC_MAX_DIMS], red_stride[KC_MAX_DIMS];
    int64_t n_out, n_red_total;
    int64_t ilo, ihi;
} kc_reduce;
/* ws (may be NULL): float partials for the split row reduction, at least
 * kc_reduce_workspace(n_out) bytes to split; with less it runs unsplit. */
cudaError_t kc_reduce_run(const void *x, kiln_dtype xt, void *y, kiln_dtype yt,
                          const kc_reduce *p, void *ws, size_t ws_size, cudaStream_t stream);
/* The workspace a reduction to n_out outputs may split into (0 when it
 * would not: outputs enough to fill the chip without splitting). */
size_t kc_reduce_workspace(int64_t n_out);

/* Pooling over planes of [N*C] spatial blocks, or channels-last
 * [N][spatial][C] when channels > 1; spatial dims padded to 3. */
typedef struct kc_pool {
    int max;               /* 1: MaxPool, 0: AveragePool */
    int include_pad;       /* AveragePool count_include_pad */
    int col_major;         /* MaxPool storage_order = 1 (Indices) */
    int nsp;               /* true spatial dims, 1..3 */
    int64_t planes;        /* channels-first: N*C; channels-last: N */
    int64_t channels;      /* channels-last: C (interleaved innermost), else 1 */
    int64_t in[3], out[3], kernel[3], stride[3], dil[3], pad0[3], pad1[3];
} kc_pool;
/* indices (int64, may be NULL) as ONNX MaxPool's second output. */
cudaError_t kc_pool_run(const void *x, void *y, kiln_dtype dt, int64_t *indices,
                        const kc_pool *p, cudaStream_t stream);
/* y[p] = mean (or max) of the `size` elements of plane p. */
cudaError_t kc_global_pool(const void *x, void *y, kiln_dtype dt, int64_t planes, int64_t size,
                           int max, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
