/* tensor.cuh - launchers of the CUDA tensor family: strided copies (which
 * carry Transpose, Slice, Expand, Concat and Split) and Gather. */
#ifndef KILN_CUDA_TENSOR_CUH
#define KILN_CUDA_TENSOR_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For every index c of dims[0..rank): dst[dst_off + sum c_d * dst_stride_d] =
 * src[src_off + sum c_d * src_stride_d], strides in elements (may be 0 or
 * negative), elements of esize bytes (1, 2, 4, 8 or 16). */
typedef struct kc_copy {
    int rank;
    int64_t dims[KC_MAX_DIMS];
    int64_t src_stride[KC_MAX_DIMS];
    int64_t dst_stride[KC_MAX_DIMS];
    int64_t src_off, dst_off;
} kc_copy;
cudaError_t kc_strided_copy(void *dst, const void *src, size_t esize, const kc_copy *c,
                            cudaStream_t stream);

/* Gather along one axis: out[o, j, i] = x[o, idx[j], i] for o < outer,
 * j < n_idx, i < inner (in elements of esize); idx int32 or int64, negative
 * values count from the end; an index outside [-dim, dim) gives zeros. */
cudaError_t kc_gather(const void *x, const void *idx, kiln_dtype idx_dt, void *out, size_t esize,
                      int64_t outer, int64_t dim, int64_t n_idx, int64_t inner,
                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
