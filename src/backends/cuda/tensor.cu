/* tensor.cu - CUDA kernels of the tensor family (see tensor.cuh): one
 * strided copy for every layout change, and Gather. */
#include "kc_dev.cuh"
#include "tensor.cuh"

struct kc_u128 {
    uint4 v;
};

template <typename T>
__global__ void strided_copy_kernel(T *dst, const T *src, const kc_copy c, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t so = c.src_off, dof = c.dst_off, rem = i;
        for (int d = c.rank - 1; d >= 0; d--) {
            int64_t k = rem % c.dims[d];
            rem /= c.dims[d];
            so += k * c.src_stride[d];
            dof += k * c.dst_stride[d];
        }
        dst[dof] = src[so];
    }
}

extern "C" cudaError_t kc_strided_copy(void *dst, const void *src, size_t esize, const kc_copy *c,
                                       cudaStream_t stream) {
    if (!c || c->rank < 0 || c->rank > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    int64_t total = 1;
    for (int d = 0; d < c->rank; d++)
        total *= c->dims[d];
    if (total <= 0)
        return cudaSuccess;
    if (!dst || !src)
        return cudaErrorInvalidValue;
    kc_copy cc = *c;
    if (cc.rank == 0) { /* a scalar */
        cc.rank = 1;
        cc.dims[0] = 1;
        cc.src_stride[0] = cc.dst_stride[0] = 0;
    }
    unsigned blocks = kc_blocks(total, KC_THREADS);
    switch (esize) {
    case 1: strided_copy_kernel<uint8_t><<<blocks, KC_THREADS, 0, stream>>>((uint8_t *)dst, (const uint8_t *)src, cc, total); break;
    case 2: strided_copy_kernel<uint16_t><<<blocks, KC_THREADS, 0, stream>>>((uint16_t *)dst, (const uint16_t *)src, cc, total); break;
    case 4: strided_copy_kernel<uint32_t><<<blocks, KC_THREADS, 0, stream>>>((uint32_t *)dst, (const uint32_t *)src, cc, total); break;
    case 8: strided_copy_kernel<uint64_t><<<blocks, KC_THREADS, 0, stream>>>((uint64_t *)dst, (const uint64_t *)src, cc, total); break;
    case 16: strided_copy_kernel<kc_u128><<<blocks, KC_THREADS, 0, stream>>>((kc_u128 *)dst, (const kc_u128 *)src, cc, total); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename T>
__global__ void gather_kernel(const T *x, const void *idx, int idx64, T *out, int64_t dim,
                              int64_t n_idx, int64_t inner, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i % inner, j = (i / inner) % n_idx, o = i / (inner * n_idx);
        int64_t s = idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
        if (s < 0)
            s += dim;
        if (s < 0 || s >= dim) {
            T z;
            memset(&z, 0, sizeof z);
            out[i] = z;
        } else {
            out[i] = x[(o * dim + s) * inner + t];
        }
    }
}

extern "C" cudaError_t kc_gather(const void *x, const void *idx, kiln_dtype idx_dt, void *out,
                                 size_t esize, int64_t outer, int64_t dim, int64_t n_idx,
                                 int64_t inner, cudaStream_t stream) {
    if (idx_dt != KILN_DTYPE_INT64 && idx_dt != KILN_DTYPE_INT32)
        return cudaErrorInvalidValue;
    int64_t total = outer * n_idx * inner;
    if (total <= 0)
        return cudaSuccess;
    if (!x || !idx || !out)
        return cudaErrorInvalidValue;
    int i64 = idx_dt == KILN_DTYPE_INT64;
    unsigned blocks = kc_blocks(total, KC_THREADS);
    switch (esize) {
    case 1: gather_kernel<uint8_t><<<blocks, KC_THREADS, 0, stream>>>((const uint8_t *)x, idx, i64, (uint8_t *)out, dim, n_idx, inner, total); break;
    case 2: gather_kernel<uint16_t><<<blocks, KC_THREADS, 0, stream>>>((const uint16_t *)x, idx, i64, (uint16_t *)out, dim, n_idx, inner, total); break;
    case 4: gather_kernel<uint32_t><<<blocks, KC_THREADS, 0, stream>>>((const uint32_t *)x, idx, i64, (uint32_t *)out, dim, n_idx, inner, total); break;
    case 8: gather_kernel<uint64_t><<<blocks, KC_THREADS, 0, stream>>>((const uint64_t *)x, idx, i64, (uint64_t *)out, dim, n_idx, inner, total); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
