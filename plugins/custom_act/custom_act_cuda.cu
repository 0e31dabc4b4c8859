/* custom_act_cuda.cu - CustomAct on the GPU: one grid-stride elementwise
 * kernel per type, enqueued on the engine's stream; float arithmetic for
 * float16 too (as the CPU kernel), rounded to nearest at the store. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "custom_act_cuda.h"

namespace {

__device__ __forceinline__ float act(float v, float alpha) {
    return v * 0.5f * (1.0f + tanhf(alpha * (v + 0.044715f * v * v * v)));
}

__global__ void act_f32(const float *__restrict__ x, float *__restrict__ y, int64_t n,
                        float alpha) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = act(x[i], alpha);
}

__global__ void act_f16(const __half *__restrict__ x, __half *__restrict__ y, int64_t n,
                        float alpha) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = __float2half_rn(act(__half2float(x[i]), alpha));
}

} // namespace

extern "C" int custom_act_cuda(const void *x, void *y, int64_t n, int is_half,
                               float alpha, void *stream, char *err, size_t err_cap) {
    if (n <= 0)
        return 0;
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 8192) /* the grid-stride loop covers the rest */
        blocks = 8192;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_half)
        act_f16<<<(unsigned)blocks, threads, 0, s>>>((const __half *)x, (__half *)y, n, alpha);
    else
        act_f32<<<(unsigned)blocks, threads, 0, s>>>((const float *)x, (float *)y, n, alpha);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(err, err_cap, "CustomAct: the CUDA kernel did not launch: %s",
                 cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
