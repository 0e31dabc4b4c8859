/* bev_pool_cuda.cu - BEVPool on the GPU. The output is zeroed on the stream
 * (cells no interval reaches stay 0), then one thread per (interval, channel)
 * sums depth[rd] * feat[rf * C + c] over the interval's points in float, in
 * the order of the CPU kernel, and stores the cell's value: each cell belongs
 * to one interval, so no atomics are needed. Neighbouring threads take
 * neighbouring channels of the same interval, so the feature reads coalesce.
 *
 * A GPU kernel cannot fail the call the way the CPU kernel does, so an
 * interval or rank outside its tensor is skipped (that cell, or that point)
 * rather than read out of bounds; the CPU kernel reports such inputs. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "bev_pool_cuda.h"

namespace {

__device__ __forceinline__ float load(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }

template <typename T>
__global__ void bev_pool_kernel(const T *__restrict__ depth, const T *__restrict__ feat,
                                const int32_t *__restrict__ rd, const int32_t *__restrict__ rf,
                                const int32_t *__restrict__ rb, const int32_t *__restrict__ st,
                                const int32_t *__restrict__ len, T *__restrict__ out, int64_t P,
                                int64_t K, int64_t C, int64_t cells, int64_t n_cells,
                                int64_t n_depth, int64_t n_pix) {
    int64_t total = K * C, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += step) {
        int64_t k = t / C, c = t - k * C;
        int64_t s = st[k], l = len[k];
        if (s < 0 || l <= 0 || s > P - l)
            continue;
        int64_t cell = rb[s];
        if (cell < 0 || cell >= n_cells)
            continue;
        float acc = 0.f;
        for (int64_t i = s; i < s + l; i++) {
            int64_t d = rd[i], f = rf[i];
            if (d < 0 || d >= n_depth || f < 0 || f >= n_pix)
                continue;
            /* no fused multiply-add: the same roundings as the CPU kernel */
            acc = __fadd_rn(acc, __fmul_rn(load(depth, d), load(feat, f * C + c)));
        }
        int64_t b = cell / cells, hw = cell - b * cells;
        store(out, (b * C + c) * cells + hw, acc);
    }
}

} // namespace

extern "C" int bev_pool_cuda(const bev_pool_cuda_args *a, void *stream, char *err,
                             size_t err_cap) {
    cudaStream_t s = (cudaStream_t)stream;
    size_t out_bytes = (size_t)(a->n_cells * a->channels) * (a->half ? 2 : 4);
    cudaError_t e = out_bytes ? cudaMemsetAsync(a->out, 0, out_bytes, s) : cudaSuccess;
    if (e != cudaSuccess) {
        snprintf(err, err_cap, "BEVPool: clearing the output failed: %s", cudaGetErrorString(e));
        return -1;
    }
    int64_t total = a->n_intervals * a->channels;
    if (total <= 0 || a->n_points <= 0)
        return 0;
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 16384) /* the grid-stride loop covers the rest */
        blocks = 16384;
    if (a->half)
        bev_pool_kernel<__half><<<(unsigned)blocks, threads, 0, s>>>(
            (const __half *)a->depth, (const __half *)a->feat, a->ranks_depth, a->ranks_feat,
            a->ranks_bev, a->starts, a->lengths, (__half *)a->out, a->n_points, a->n_intervals,
            a->channels, a->cells, a->n_cells, a->n_depth, a->n_pix);
    else
        bev_pool_kernel<float><<<(unsigned)blocks, threads, 0, s>>>(
            (const float *)a->depth, (const float *)a->feat, a->ranks_depth, a->ranks_feat,
            a->ranks_bev, a->starts, a->lengths, (float *)a->out, a->n_points, a->n_intervals,
            a->channels, a->cells, a->n_cells, a->n_depth, a->n_pix);
    e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(err, err_cap, "BEVPool: the CUDA kernel did not launch: %s",
                 cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
