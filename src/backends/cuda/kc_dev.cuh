/* kc_dev.cuh - device helpers shared by the CUDA backend's kernels: element
 * loads and stores by kiln data type (computing in float or int64), the
 * activation epilogue, warp and block reductions, and the launch grid. */
#ifndef KILN_CUDA_KC_DEV_CUH
#define KILN_CUDA_KC_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kc_types.h"

#define KC_THREADS 256

/* Blocks for a grid-stride loop over n elements: enough to fill the chip
 * several times over, never more than the work. */
static inline unsigned kc_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > 132 * 32)
        b = 132 * 32;
    return b < 1 ? 1u : (unsigned)b;
}

/* The vectorised fast paths (LayerNorm, Softmax, elementwise, transpose) run
 * unless KILN_CUDA_GENERIC=1 asks for the generic kernels (for A/B timing
 * and as a way out should a fast path misbehave). */
static inline int kc_fast_paths(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KILN_CUDA_GENERIC");
        on = !(e && e[0] == '1');
    }
    return on;
}

__device__ __forceinline__ float kc_ld_f(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case KILN_DTYPE_DOUBLE: return (float)((const double *)p)[i];
    case KILN_DTYPE_INT32: return (float)((const int32_t *)p)[i];
    case KILN_DTYPE_INT64: return (float)((const int64_t *)p)[i];
    case KILN_DTYPE_INT8: return (float)((const int8_t *)p)[i];
    case KILN_DTYPE_UINT8: return (float)((const uint8_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0 ? 1.f : 0.f;
    default: return 0.f;
    }
}

/* Any integer element as int64 (uint64 keeps its bits, as the CPU loads it). */
__device__ __forceinline__ long long kc_ld_i(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64: return ((const long long *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

__device__ __forceinline__ void kc_st_f(void *p, kiln_dtype t, int64_t i, float v) {
    switch (t) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn(v); break;
    case KILN_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.f; break;
    default: break;
    }
}

/* An int64 into any integer type, truncated to its width (the bits for uint64). */
__device__ __forceinline__ void kc_st_i(void *p, kiln_dtype t, int64_t i, long long v) {
    switch (t) {
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64: ((long long *)p)[i] = v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

/* Any numeric element as double (int64 beyond 2^53 rounds, as the CPU's
 * comparison does). */
__device__ __forceinline__ double kc_ld_d(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_INT64: return (double)((const long long *)p)[i];
    case KILN_DTYPE_UINT64: return (double)((const unsigned long long *)p)[i];
    case KILN_DTYPE_INT32: return (double)((const int *)p)[i];
    case KILN_DTYPE_UINT32: return (double)((const unsigned *)p)[i];
    case KILN_DTYPE_INT16: return (double)((const short *)p)[i];
    case KILN_DTYPE_UINT16: return (double)((const unsigned short *)p)[i];
    default: return (double)kc_ld_f(p, t, i);
    }
}

/* Any numeric type from a double, integers truncated toward zero (the CPU's kb_st). */
__device__ __forceinline__ void kc_st_d(void *p, kiln_dtype t, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_BOOL:
        kc_st_f(p, t, i, (float)v);
        break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_UINT64: ((unsigned long long *)p)[i] = (unsigned long long)v; break;
    default: kc_st_i(p, t, i, (long long)v); break;
    }
}

/* Element i of a float, float16 or bfloat16 array as float, and a float
 * stored as one, rounded to nearest (the type known at compile time). */
template <typename T> struct kc_io;
template <> struct kc_io<float> {
    static __device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
    static __device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
};
template <> struct kc_io<__half> {
    static __device__ __forceinline__ float ld(const __half *p, int64_t i) { return __half2float(p[i]); }
    static __device__ __forceinline__ void st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }
};
template <> struct kc_io<__nv_bfloat16> {
    static __device__ __forceinline__ float ld(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
    static __device__ __forceinline__ void st(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
};

/* The CPU's kb_act_apply, term for term. */
__device__ __forceinline__ float kc_act_apply(int a, float x, float alpha, float beta) {
    switch (a) {
    case KC_ACT_RELU: return x > 0.f ? x : 0.f;
    case KC_ACT_LEAKY_RELU: return x >= 0.f ? x : alpha * x;
    case KC_ACT_SIGMOID: return 1.f / (1.f + expf(-x));
    case KC_ACT_TANH: return tanhf(x);
    case KC_ACT_CLIP: return x < alpha ? alpha : (x > beta ? beta : x);
    case KC_ACT_HARD_SIGMOID: { float y = alpha * x + beta; return y < 0.f ? 0.f : (y > 1.f ? 1.f : y); }
    case KC_ACT_HARD_SWISH: { float y = x / 6.f + 0.5f; return x * (y < 0.f ? 0.f : (y > 1.f ? 1.f : y)); }
    case KC_ACT_GELU: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case KC_ACT_GELU_TANH: return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case KC_ACT_SILU: return x / (1.f + expf(-x));
    case KC_ACT_ELU: return x >= 0.f ? x : alpha * (expf(x) - 1.f);
    case KC_ACT_SOFTPLUS: return x > 20.f ? x : log1pf(expf(x));
    case KC_ACT_SWISH: return x / (1.f + expf(-alpha * x));
    default: return x;
    }
}

__device__ __forceinline__ float kc_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float kc_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Two floats as one register of two T (float16 or bfloat16), the first in
 * the low half: a tensor-core A fragment from accumulators, or a packed store. */
template <typename T> __device__ __forceinline__ uint32_t kc_pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t kc_pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t kc_pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* The tensor-core accumulator layouts (mma.sync m16n8, wgmma m64nN) give a
 * lane quad (lanes 4g..4g+3) rows g and g + 8 of its warp's 16. The rows'
 * maxima over the quad, 0 for a row whose every score is -inf (all keys
 * masked), so that exp(s - max) stays 0 there instead of NaN: */
__device__ __forceinline__ void kc_quad_row_max(float mx[2]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        if (mx[i] == -INFINITY)
            mx[i] = 0.f;
    }
}

/* and the rows' sums over the quad */
__device__ __forceinline__ void kc_quad_row_sum(float l[2]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. `sh` holds 32 floats. */
__device__ __forceinline__ float kc_block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = kc_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.f;
    return kc_warp_sum(v);
}

__device__ __forceinline__ float kc_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = kc_warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return kc_warp_max(v);
}

#endif
