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

/* n elements of esize bytes (1, 2, 4 or 8), each the low esize bytes of pattern. */
cudaError_t kc_fill(void *dst, size_t esize, uint64_t pattern, int64_t n, cudaStream_t stream);

/* The parameters of a kernel node that does what the memset node with
 * parameters mp does (element sizes 1, 2 and 4; 0 for others): kp points
 * into m, which must outlive the node's creation. */
typedef struct kc_memset_node {
    unsigned char *dst;
    size_t pitch;
    unsigned value, esize;
    size_t width, height;
    void *args[6];
} kc_memset_node;
int kc_memset_node_params(kc_memset_node *m, const struct cudaMemsetParams *mp, struct cudaKernelNodeParams *kp);

/* Pad: out (dims out_dims) from x (dims in_dims), x's coordinate being the
 * output's minus begin[d], mapped by mode (0 constant, 1 reflect, 2 edge,
 * 3 wrap, numbered as kn_pad_plan); constant positions get *cval (device
 * memory, NULL for zero). */
typedef struct kc_pad {
    int rank, mode;
    int64_t in_dims[KC_MAX_DIMS], out_dims[KC_MAX_DIMS], begin[KC_MAX_DIMS];
} kc_pad;
cudaError_t kc_pad_run(const void *x, void *out, const void *cval, size_t esize, const kc_pad *p,
                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
