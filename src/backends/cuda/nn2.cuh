/* nn2.cuh - launchers of the second CUDA nn family (k_nn2.c is their glue):
 * the normalizations that reduce over groups of elements (Instance, Group,
 * RMS, Lp, MeanVariance), LRN, LpPool / GlobalLpPool, Einsum, and the crop
 * with bias that finishes a ConvTranspose computed by cuDNN. Semantics follow
 * the CPU references (backends/cpu/k_nn_norm.c, k_nn_pool.c, k_nn.c); sums
 * accumulate in float for real types (Einsum: int64 for integers, double for
 * float64). */
#ifndef KILN_CUDA_NN2_CUH
#define KILN_CUDA_NN2_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a group normalization writes. */
typedef enum kc_norm_mode {
    KC_NORM_MEANVAR = 0, /* (x - mean) / sqrt(var + eps) * scale + bias */
    KC_NORM_RMS,         /* x / sqrt(mean(x^2) + eps) * scale */
    KC_NORM_L1,          /* x / sum |x| (0 where the sum is 0) */
    KC_NORM_L2,          /* x / sqrt(sum x^2) (0 where the sum is 0) */
    KC_NORM_MVN          /* (x - mean) / (sqrt(var) + 1e-9) */
} kc_norm_mode;

/* The parameter index of element j of group g:
 * (g % rmod) * rmul + (j / jdiv) % jmod (all >= 1 but rmul). */
typedef struct kc_pidx {
    int64_t rmod, rmul, jdiv, jmod;
} kc_pidx;

/* Groups of x (kept dims) whose elements (reduced dims) are normalized
 * together; strides in elements; y has x's shape and layout. */
typedef struct kc_norm {
    int mode;
    int n_keep, n_red;
    int64_t keep_dims[KC_MAX_DIMS], keep_stride[KC_MAX_DIMS];
    int64_t red_dims[KC_MAX_DIMS], red_stride[KC_MAX_DIMS];
    int64_t groups, len;
    float eps;
    const void *scale, *bias; /* of pt; NULL where the mode has none */
    kiln_dtype pt;
    kc_pidx si, bi;
} kc_norm;
cudaError_t kc_norm_run(const void *x, void *y, kiln_dtype dt, const kc_norm *p,
                        cudaStream_t stream);

/* LRN over channels of [N, C, spatial] (sp elements per plane). */
cudaError_t kc_lrn(const void *x, void *y, kiln_dtype dt, int64_t n, int64_t c, int64_t sp,
                   int64_t size, float alpha, float beta, float bias, cudaStream_t stream);

/* LpPool over planes of 1-3 spatial dims (padded to 3, as kc_pool). */
typedef struct kc_lppool {
    int64_t planes;
    float p;
    int64_t in[3], out[3], kernel[3], stride[3], dil[3], pad0[3];
} kc_lppool;
cudaError_t kc_lppool_run(const void *x, void *y, kiln_dtype dt, const kc_lppool *p,
                          cudaStream_t stream);
/* GridSample on [N, C, H, W] at grid [N, Ho, Wo, 2] (graph/ops_nn.h's
 * codes for mode and padding; taps as graph/grid_sample.h). */
typedef struct kc_grid_sample {
    int mode, padding, align_corners;
    int64_t n, c, h, w, ho, wo;
} kc_grid_sample;
cudaError_t kc_grid_sample_run(const void *x, kiln_dtype xt, const void *grid, kiln_dtype gt, void *y,
                               const kc_grid_sample *p, cudaStream_t stream);

/* RoiAlign of [N, C, H, W] over rois [R, 4] (x's type) of images
 * batch_idx [R] (int64) into [R, C, oh, ow] (graph/roi_align.h); a batch
 * index outside [0, N) reads zeros. */
typedef struct kc_roi_align {
    int mode, half_pixel;
    int64_t oh, ow, sampling;
    double scale;
    int64_t n, c, h, w, rois;
} kc_roi_align;
cudaError_t kc_roi_align_run(const void *x, const void *rois, const int64_t *batch_idx, void *y,
                             kiln_dtype dt, const kc_roi_align *p, cudaStream_t stream);

/* QuantizeLinear (quantize 1: x of ft into y of qt) and DequantizeLinear
 * (0: x of qt into y of ft), per tensor (channels 1) or per axis (`inner`
 * elements per scale index); zp may be NULL, and is not read for a float8
 * qt; graph/quant.h's arithmetic. */
typedef struct kc_quant {
    int quantize;
    kiln_dtype qt, ft, st; /* quantized, float side, scale */
    int64_t n, channels, inner, block; /* graph/quant.h's kn_q_param_index */
    int saturate;          /* float8 qt: clamp overflow to the largest finite value */
} kc_quant;
cudaError_t kc_quant_run(const void *x, const void *scale, const void *zp, void *y, const kc_quant *p,
                         cudaStream_t stream);
/* DynamicQuantizeLinear of n floats: y uint8, *scale and *zp (device). */
cudaError_t kc_dynamic_quant(const float *x, int64_t n, uint8_t *y, float *scale, uint8_t *zp,
                             cudaStream_t stream);

/* A window function (graph/window.h's kind) of `size` values of dt. */
cudaError_t kc_window(void *y, kiln_dtype dt, int kind, int64_t size, int periodic, cudaStream_t stream);

/* y[pl] = (sum |x|^p over the plane's `size` elements)^(1/p). */
cudaError_t kc_global_lppool(const void *x, void *y, kiln_dtype dt, int64_t planes, int64_t size,
                             float p, cudaStream_t stream);

/* Einsum as one sum of products per output element. Labels of the output
 * and the summed labels, each with every input's element stride (0 where
 * that input lacks or broadcasts the label; repeated labels add strides). */
#define KC_EIN_MAX_IN 8
#define KC_EIN_MAX_SUM 16
typedef struct kc_einsum {
    int n_in, out_rank, n_sum;
    int64_t out_dims[KC_MAX_DIMS];
    int64_t out_stride[KC_EIN_MAX_IN][KC_MAX_DIMS];
    int64_t sum_dims[KC_EIN_MAX_SUM];
    int64_t sum_stride[KC_EIN_MAX_IN][KC_EIN_MAX_SUM];
    int64_t total, sum_count;
    const void *in[KC_EIN_MAX_IN];
    kiln_dtype in_dt[KC_EIN_MAX_IN];
} kc_einsum;
/* The accumulator: float (float32 / float16 / bfloat16 data), int64 (int32 /
 * int64) or double (float64). */
enum { KC_EIN_FLOAT = 0, KC_EIN_INT64 = 1, KC_EIN_DOUBLE = 2 };
cudaError_t kc_einsum_run(const kc_einsum *e, void *y, kiln_dtype yt, int acc,
                          cudaStream_t stream);

/* ConvTranspose's crop of the full (unpadded) result: for each output
 * spatial position h, y[n][c][h] = full[n][c][h + pad0] (0 outside full) +
 * bias[c]; spatial dims padded to 3 at the front. bias may be NULL. */
typedef struct kc_crop {
    int64_t planes, channels;
    int64_t out[3], full[3], pad0[3];
} kc_crop;
cudaError_t kc_convt_crop(const void *full, void *y, kiln_dtype dt, const void *bias,
                          const kc_crop *c, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
