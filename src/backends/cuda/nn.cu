/* nn.cu - CUDA kernels of the nn family that kiln writes itself (see
 * nn.cuh). Sums accumulate in float; reference: backends/cpu/k_nn_*.c and
 * k_elementwise_reduce.c. */
#include "kc_dev.cuh"
#include "nn.cuh"

/* ---------------- Softmax ---------------- */

__global__ void softmax_kernel(const void *x, void *y, kiln_dtype dt, int64_t n, int64_t inner,
                               int log) {
    __shared__ float sh[32];
    int64_t row = blockIdx.x;
    int64_t o = row / inner, i = row % inner;
    int64_t base = o * n * inner + i;
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
        m = fmaxf(m, kc_ld_f(x, dt, base + k * inner));
    m = kc_block_max(m, sh);
    float s = 0.f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
        s += expf(kc_ld_f(x, dt, base + k * inner) - m);
    s = kc_block_sum(s, sh);
    float ls = logf(s), inv = 1.f / s;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        float v = kc_ld_f(x, dt, base + k * inner) - m;
        kc_st_f(y, dt, base + k * inner, log ? v - ls : expf(v) * inv);
    }
}

extern "C" cudaError_t kc_softmax(const void *x, void *y, kiln_dtype dt, int64_t outer, int64_t n,
                                  int64_t inner, int log, cudaStream_t stream) {
    int64_t rows = outer * inner;
    if (rows <= 0 || n <= 0)
        return cudaSuccess;
    if (!x || !y || rows > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    int threads = n >= 1024 ? 512 : (n >= 256 ? 256 : (n > 64 ? 128 : 32));
    softmax_kernel<<<(unsigned)rows, threads, 0, stream>>>(x, y, dt, n, inner, log);
    return cudaGetLastError();
}

/* ---------------- LayerNormalization ---------------- */

__global__ void layernorm_kernel(const void *x, void *y, kiln_dtype dt, int64_t inner,
                                 const void *scale, const void *bias, kiln_dtype pt, float eps,
                                 void *mean_out, void *inv_out, kiln_dtype st) {
    __shared__ float sh[32];
    int64_t base = blockIdx.x * inner;
    float s = 0.f;
    for (int64_t k = threadIdx.x; k < inner; k += blockDim.x)
        s += kc_ld_f(x, dt, base + k);
    float mean = kc_block_sum(s, sh) / (float)inner;
    float v = 0.f;
    for (int64_t k = threadIdx.x; k < inner; k += blockDim.x) {
        float d = kc_ld_f(x, dt, base + k) - mean;
        v += d * d;
    }
    float var = kc_block_sum(v, sh) / (float)inner;
    float inv = 1.f / sqrtf(var + eps);
    for (int64_t k = threadIdx.x; k < inner; k += blockDim.x) {
        float r = (kc_ld_f(x, dt, base + k) - mean) * inv * kc_ld_f(scale, pt, k);
        if (bias)
            r += kc_ld_f(bias, pt, k);
        kc_st_f(y, dt, base + k, r);
    }
    if (threadIdx.x == 0) {
        if (mean_out)
            kc_st_f(mean_out, st, blockIdx.x, mean);
        if (inv_out)
            kc_st_f(inv_out, st, blockIdx.x, inv);
    }
}

extern "C" cudaError_t kc_layernorm(const void *x, void *y, kiln_dtype dt, int64_t rows,
                                    int64_t inner, const void *scale, const void *bias,
                                    kiln_dtype pt, float eps, void *mean, void *inv_std,
                                    kiln_dtype st, cudaStream_t stream) {
    if (rows <= 0 || inner <= 0)
        return cudaSuccess;
    if (!x || !y || !scale || rows > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    int threads = inner >= 2048 ? 512 : (inner >= 512 ? 256 : 128);
    layernorm_kernel<<<(unsigned)rows, threads, 0, stream>>>(x, y, dt, inner, scale, bias, pt, eps,
                                                              mean, inv_std, st);
    return cudaGetLastError();
}

/* ---------------- reductions: one warp per output element ---------------- */

__global__ void reduce_kernel(const void *x, kiln_dtype xt, void *y, kiln_dtype yt,
                              const kc_reduce p) {
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= p.n_out)
        return;
    int64_t base = 0, rem = warp;
    for (int d = p.n_keep - 1; d >= 0; d--) {
        base += (rem % p.keep_dims[d]) * p.keep_stride[d];
        rem /= p.keep_dims[d];
    }
    const bool is_max = p.op == KC_RED_MAX, is_min = p.op == KC_RED_MIN,
               is_prod = p.op == KC_RED_PROD;
    float acc = is_max ? -INFINITY : (is_min ? INFINITY : (is_prod ? 1.f : 0.f));
    for (int64_t j = lane; j < p.n_red_total; j += 32) {
        int64_t off = base, r = j;
        for (int d = p.n_red - 1; d >= 0; d--) {
            off += (r % p.red_dims[d]) * p.red_stride[d];
            r /= p.red_dims[d];
        }
        float v = kc_ld_f(x, xt, off);
        switch (p.op) {
        case KC_RED_MAX: acc = (v > acc || v != v) ? v : acc; break;
        case KC_RED_MIN: acc = (v < acc || v != v) ? v : acc; break;
        case KC_RED_PROD: acc *= v; break;
        case KC_RED_SUM_SQUARE: case KC_RED_L2: acc += v * v; break;
        case KC_RED_L1: acc += fabsf(v); break;
        default: acc += v; break;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, acc, o);
        switch (p.op) {
        case KC_RED_MAX: acc = (w > acc || w != w) ? w : acc; break;
        case KC_RED_MIN: acc = (w < acc || w != w) ? w : acc; break;
        case KC_RED_PROD: acc *= w; break;
        default: acc += w; break;
        }
    }
    if (lane == 0) {
        if (p.op == KC_RED_MEAN)
            acc = p.n_red_total ? acc / (float)p.n_red_total : acc;
        else if (p.op == KC_RED_L2)
            acc = sqrtf(acc);
        else if (p.op == KC_RED_LOG_SUM)
            acc = logf(acc);
        kc_st_f(y, yt, warp, acc);
    }
}

extern "C" cudaError_t kc_reduce_run(const void *x, kiln_dtype xt, void *y, kiln_dtype yt,
                                     const kc_reduce *p, cudaStream_t stream) {
    if (!p || p->n_keep < 0 || p->n_keep > KC_MAX_DIMS || p->n_red < 0 || p->n_red > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    if (p->n_out <= 0)
        return cudaSuccess;
    if (!x || !y)
        return cudaErrorInvalidValue;
    int64_t threads = p->n_out * 32;
    int64_t blocks = (threads + 255) / 256;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    reduce_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, xt, y, yt, *p);
    return cudaGetLastError();
}

/* ---------------- pooling ---------------- */

__global__ void pool_kernel(const void *x, void *y, kiln_dtype dt, int64_t *indices,
                            const kc_pool p, int64_t total) {
    const int64_t in_size = p.in[0] * p.in[1] * p.in[2];
    const int64_t out_size = p.out[0] * p.out[1] * p.out[2];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t pl = i / out_size, o = i % out_size;
        int64_t oc[3];
        oc[2] = o % p.out[2];
        oc[1] = (o / p.out[2]) % p.out[1];
        oc[0] = o / (p.out[2] * p.out[1]);
        int64_t plane = pl * in_size;
        float acc = p.max ? -INFINITY : 0.f;
        int64_t count = 0, best = -1;
        for (int64_t k0 = 0; k0 < p.kernel[0]; k0++) {
            int64_t h0 = oc[0] * p.stride[0] - p.pad0[0] + k0 * p.dil[0];
            bool in0 = h0 >= 0 && h0 < p.in[0];
            bool pd0 = h0 >= -p.pad0[0] && h0 < p.in[0] + p.pad1[0];
            for (int64_t k1 = 0; k1 < p.kernel[1]; k1++) {
                int64_t h1 = oc[1] * p.stride[1] - p.pad0[1] + k1 * p.dil[1];
                bool in1 = h1 >= 0 && h1 < p.in[1];
                bool pd1 = h1 >= -p.pad0[1] && h1 < p.in[1] + p.pad1[1];
                for (int64_t k2 = 0; k2 < p.kernel[2]; k2++) {
                    int64_t h2 = oc[2] * p.stride[2] - p.pad0[2] + k2 * p.dil[2];
                    bool in2 = h2 >= 0 && h2 < p.in[2];
                    bool pd2 = h2 >= -p.pad0[2] && h2 < p.in[2] + p.pad1[2];
                    if (in0 && in1 && in2) {
                        int64_t off = (h0 * p.in[1] + h1) * p.in[2] + h2;
                        float v = kc_ld_f(x, dt, plane + off);
                        if (p.max) {
                            if (v > acc || best < 0) {
                                acc = v;
                                /* column-major offset over the true spatial dims */
                                best = p.col_major
                                           ? (p.nsp == 1 ? h2
                                              : p.nsp == 2 ? h1 + h2 * p.in[1]
                                                           : h0 + h1 * p.in[0] + h2 * p.in[0] * p.in[1])
                                           : off;
                            }
                        } else {
                            acc += v;
                        }
                        count++;
                    } else if (pd0 && pd1 && pd2 && p.include_pad) {
                        count++;
                    }
                }
            }
        }
        if (!p.max)
            acc = count ? acc / (float)count : 0.f;
        kc_st_f(y, dt, i, acc);
        if (indices)
            indices[i] = best < 0 ? plane : plane + best;
    }
}

extern "C" cudaError_t kc_pool_run(const void *x, void *y, kiln_dtype dt, int64_t *indices,
                                   const kc_pool *p, cudaStream_t stream) {
    if (!p || p->nsp < 1 || p->nsp > 3)
        return cudaErrorInvalidValue;
    int64_t total = p->planes * p->out[0] * p->out[1] * p->out[2];
    if (total <= 0)
        return cudaSuccess;
    if (!x || !y)
        return cudaErrorInvalidValue;
    pool_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, dt, indices, *p, total);
    return cudaGetLastError();
}

__global__ void global_pool_kernel(const void *x, void *y, kiln_dtype dt, int64_t planes,
                                   int64_t size, int max) {
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= planes)
        return;
    float acc = max ? -INFINITY : 0.f;
    for (int64_t j = lane; j < size; j += 32) {
        float v = kc_ld_f(x, dt, warp * size + j);
        acc = max ? fmaxf(acc, v) : acc + v;
    }
    acc = max ? kc_warp_max(acc) : kc_warp_sum(acc);
    if (lane == 0)
        kc_st_f(y, dt, warp, max ? acc : acc / (float)size);
}

extern "C" cudaError_t kc_global_pool(const void *x, void *y, kiln_dtype dt, int64_t planes,
                                      int64_t size, int max, cudaStream_t stream) {
    if (planes <= 0)
        return cudaSuccess;
    if (!x || !y || size <= 0)
        return cudaErrorInvalidValue;
    int64_t blocks = (planes * 32 + 255) / 256;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    global_pool_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, y, dt, planes, size, max);
    return cudaGetLastError();
}
