/* nn2.cu - kernels of the second CUDA nn family (see nn2.cuh): one block per
 * normalization group, one thread per output element for LRN, LpPool, Einsum
 * and the ConvTranspose crop, one per output position and eight channels for
 * GridSample, one per output value for RoiAlign. Values are read and written through kc_ld_f /
 * kc_st_f, so float, float16 and bfloat16 share one kernel each. */
#include "graph/grid_sample.h"
#include "graph/quant.h"
#include "graph/roi_align.h"
#include "graph/window.h"
#include "kc_dev.cuh"
#include "nn2.cuh"

/* ---------------- group normalizations ---------------- */

__device__ __forceinline__ int64_t nn2_offset(int n, const int64_t *dims, const int64_t *stride,
                                              int64_t idx) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (idx % dims[d]) * stride[d];
        idx /= dims[d];
    }
    return off;
}

__device__ __forceinline__ int64_t nn2_pidx(const kc_pidx &q, int64_t g, int64_t j) {
    return (g % q.rmod) * q.rmul + (j / q.jdiv) % q.jmod;
}

/* Three passes over the group (sum, centred sum of squares, write), reading
 * x again instead of holding it: groups can be whole images. */
__global__ void norm_kernel(const void *x, void *y, kiln_dtype dt, const kc_norm p) {
    __shared__ float sh[32];
    const float n = (float)p.len;
    for (int64_t g = blockIdx.x; g < p.groups; g += gridDim.x) {
        const int64_t base = nn2_offset(p.n_keep, p.keep_dims, p.keep_stride, g);
        float s = 0.f;
        for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x) {
            float v = kc_ld_f(x, dt, base + nn2_offset(p.n_red, p.red_dims, p.red_stride, j));
            s += p.mode == KC_NORM_L1 ? fabsf(v)
                 : (p.mode == KC_NORM_RMS || p.mode == KC_NORM_L2) ? v * v
                                                                   : v;
        }
        s = kc_block_sum(s, sh);
        float mean = 0.f, mul = 1.f, norm = 1.f;
        if (p.mode == KC_NORM_MEANVAR || p.mode == KC_NORM_MVN) {
            mean = s / n;
            float q = 0.f;
            for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x) {
                float d = kc_ld_f(x, dt, base + nn2_offset(p.n_red, p.red_dims, p.red_stride, j)) - mean;
                q += d * d;
            }
            float var = kc_block_sum(q, sh) / n;
            mul = p.mode == KC_NORM_MVN ? 1.f / (sqrtf(var) + 1e-9f) : 1.f / sqrtf(var + p.eps);
        } else if (p.mode == KC_NORM_RMS) {
            mul = 1.f / sqrtf(s / n + p.eps);
        } else {
            norm = p.mode == KC_NORM_L1 ? s : sqrtf(s);
        }
        for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x) {
            const int64_t off = base + nn2_offset(p.n_red, p.red_dims, p.red_stride, j);
            const float v = kc_ld_f(x, dt, off);
            float r;
            if (p.mode == KC_NORM_L1 || p.mode == KC_NORM_L2) {
                r = norm > 0.f ? v / norm : 0.f;
            } else {
                r = (v - mean) * mul;
                if (p.scale)
                    r *= kc_ld_f(p.scale, p.pt, nn2_pidx(p.si, g, j));
                if (p.bias)
                    r += kc_ld_f(p.bias, p.pt, nn2_pidx(p.bi, g, j));
            }
            kc_st_f(y, dt, off, r);
        }
    }
}

extern "C" cudaError_t kc_norm_run(const void *x, void *y, kiln_dtype dt, const kc_norm *p,
                                   cudaStream_t stream) {
    if (!p || p->n_keep < 0 || p->n_keep > KC_MAX_DIMS || p->n_red < 0 || p->n_red > KC_MAX_DIMS ||
        p->mode < KC_NORM_MEANVAR || p->mode > KC_NORM_MVN)
        return cudaErrorInvalidValue;
    if (p->groups <= 0 || p->len <= 0)
        return cudaSuccess;
    if (!x || !y || p->si.rmod < 1 || p->si.jdiv < 1 || p->si.jmod < 1 || p->bi.rmod < 1 ||
        p->bi.jdiv < 1 || p->bi.jmod < 1)
        return cudaErrorInvalidValue;
    int threads = p->len >= 4096 ? 512 : (p->len >= 512 ? 256 : 128);
    int64_t blocks = p->groups < (1 << 20) ? p->groups : (1 << 20);
    norm_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, y, dt, *p);
    return cudaGetLastError();
}

/* ---------------- LRN ---------------- */

__global__ void lrn_kernel(const void *x, void *y, kiln_dtype dt, int64_t total, int64_t c,
                           int64_t sp, int64_t size, float alpha, float beta, float bias) {
    const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = i % sp, ch = (i / sp) % c, n = i / (sp * c);
        const int64_t c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi >= c ? c - 1 : ch + hi;
        float sq = 0.f;
        for (int64_t k = c0; k <= c1; k++) {
            float v = kc_ld_f(x, dt, (n * c + k) * sp + s);
            sq += v * v;
        }
        kc_st_f(y, dt, i, kc_ld_f(x, dt, i) / powf(bias + alpha / (float)size * sq, beta));
    }
}

extern "C" cudaError_t kc_lrn(const void *x, void *y, kiln_dtype dt, int64_t n, int64_t c,
                              int64_t sp, int64_t size, float alpha, float beta, float bias,
                              cudaStream_t stream) {
    int64_t total = n * c * sp;
    if (total <= 0)
        return cudaSuccess;
    if (!x || !y || size < 1)
        return cudaErrorInvalidValue;
    lrn_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, dt, total, c, sp,
                                                                         size, alpha, beta, bias);
    return cudaGetLastError();
}

/* ---------------- GridSample ---------------- */

/* Channels a thread samples at its output position: the taps are worked
 * out once for them all. */
#define GS_CHANNELS 8

__global__ void grid_sample_kernel(const void *x, kiln_dtype xt, const void *grid, kiln_dtype gt,
                                   void *y, const kc_grid_sample p, int64_t total) {
    const int64_t oplane = p.ho * p.wo, plane = p.h * p.w, groups = (p.c + GS_CHANNELS - 1) / GS_CHANNELS;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pos = i / groups, c0 = (i % groups) * GS_CHANNELS;
        const int64_t n = pos / oplane, o = pos % oplane;
        kn_gs_taps tx, ty;
        kn_gs_axis(kc_ld_f(grid, gt, 2 * pos), p.w, p.mode, p.padding, p.align_corners != 0, &tx);
        kn_gs_axis(kc_ld_f(grid, gt, 2 * pos + 1), p.h, p.mode, p.padding, p.align_corners != 0, &ty);
        float wx[4], wy[4];
        for (int k = 0; k < 4; k++) {
            wx[k] = (float)tx.w[k];
            wy[k] = (float)ty.w[k];
        }
        const int64_t c1 = c0 + GS_CHANNELS < p.c ? c0 + GS_CHANNELS : p.c;
        for (int64_t c = c0; c < c1; c++) {
            const int64_t base = (n * p.c + c) * plane;
            float acc = 0.f;
            for (int a = 0; a < ty.n; a++) {
                if (ty.idx[a] < 0)
                    continue;
                float row = 0.f;
                for (int b = 0; b < tx.n; b++)
                    if (tx.idx[b] >= 0)
                        row += wx[b] * kc_ld_f(x, xt, base + ty.idx[a] * p.w + tx.idx[b]);
                acc += wy[a] * row;
            }
            kc_st_f(y, xt, (n * p.c + c) * oplane + o, acc);
        }
    }
}

extern "C" cudaError_t kc_grid_sample_run(const void *x, kiln_dtype xt, const void *grid, kiln_dtype gt,
                                          void *y, const kc_grid_sample *p, cudaStream_t stream) {
    if (!p)
        return cudaErrorInvalidValue;
    const int64_t total = p->n * p->ho * p->wo * ((p->c + GS_CHANNELS - 1) / GS_CHANNELS);
    if (total <= 0)
        return cudaSuccess;
    if (!x || !grid || !y || p->h <= 0 || p->w <= 0)
        return cudaErrorInvalidValue;
    grid_sample_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, xt, grid, gt, y, *p,
                                                                              total);
    return cudaGetLastError();
}

/* ---------------- RoiAlign ---------------- */

#define KC_RA_LD(plane, i) (double)kc_ld_f(x, dt, (plane) + (i))

/* One thread an output value: its region's geometry, then its bin's samples. */
__global__ void roi_align_kernel(const void *x, const void *rois, const int64_t *batch_idx, void *y,
                                 kiln_dtype dt, const kc_roi_align p, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pw = i % p.ow, ph = (i / p.ow) % p.oh, c = (i / (p.ow * p.oh)) % p.c,
                      k = i / (p.ow * p.oh * p.c);
        const int64_t b = batch_idx[k];
        double v = 0.0;
        if (b >= 0 && b < p.n) {
            double roi[4];
            for (int j = 0; j < 4; j++)
                roi[j] = kc_ld_f(rois, dt, k * 4 + j);
            kn_roi_box box;
            /* a region the CPU refuses (not finite, or a sample grid beyond
             * KN_ROI_MAX_GRID / KN_ROI_MAX_SAMPLES) gives NaN, not a loop */
            if (kn_roi_box_of(roi, p.scale, p.half_pixel != 0, p.oh, p.ow, p.sampling, &box))
                KN_ROI_BIN(KC_RA_LD, (b * p.c + c) * p.h * p.w, &box, ph, pw, p.h, p.w, p.mode, v);
            else
                v = (double)NAN;
        }
        kc_st_f(y, dt, i, (float)v);
    }
}

extern "C" cudaError_t kc_roi_align_run(const void *x, const void *rois, const int64_t *batch_idx, void *y,
                                        kiln_dtype dt, const kc_roi_align *p, cudaStream_t stream) {
    if (!p)
        return cudaErrorInvalidValue;
    const int64_t total = p->rois * p->c * p->oh * p->ow;
    if (total <= 0)
        return cudaSuccess;
    if (!x || !rois || !batch_idx || !y || p->h <= 0 || p->w <= 0)
        return cudaErrorInvalidValue;
    roi_align_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, rois, batch_idx, y, dt, *p,
                                                                            total);
    return cudaGetLastError();
}

/* ---------------- quantization ---------------- */

__global__ void quant_kernel(const void *x, const void *scale, const void *zp, void *y, const kc_quant p,
                             double lo, double hi) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = kn_q_param_index(i, p.channels, p.inner, p.block);
        const float s = kc_ld_f(scale, p.st, ch);
        const double z = zp ? (double)kc_ld_i(zp, p.qt, ch) : 0.0;
        if (p.quantize)
            kc_st_i(y, p.qt, i, (long long)kn_q_quantize(kc_ld_f(x, p.ft, i), s, z, lo, hi));
        else
            kc_st_f(y, p.ft, i, kn_q_dequantize((double)kc_ld_i(x, p.qt, i), z, s));
    }
}

/* Float8 (core/fp8.h through quant.h): the zero point is 0 and not read. */
__global__ void quant_f8_kernel(const void *x, const void *scale, void *y, const kc_quant p) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float s = kc_ld_f(scale, p.st, kn_q_param_index(i, p.channels, p.inner, p.block));
        if (p.quantize)
            ((uint8_t *)y)[i] = kn_q_quantize_f8(kc_ld_f(x, p.ft, i), s, (int)p.qt, p.saturate);
        else
            kc_st_f(y, p.ft, i, kn_q_dequantize_f8(((const uint8_t *)x)[i], (int)p.qt, s));
    }
}

extern "C" cudaError_t kc_quant_run(const void *x, const void *scale, const void *zp, void *y, const kc_quant *p,
                                    cudaStream_t stream) {
    if (!p)
        return cudaErrorInvalidValue;
    if (p->n <= 0)
        return cudaSuccess;
    const bool f8 = kn_f8_is((int)p->qt);
    double lo = 0, hi = 0;
    if (!x || !scale || !y || (p->quantize && !f8 && !kn_q_range((int)p->qt, &lo, &hi)) || p->inner <= 0)
        return cudaErrorInvalidValue;
    if (f8)
        quant_f8_kernel<<<kc_blocks(p->n, KC_THREADS), KC_THREADS, 0, stream>>>(x, scale, y, *p);
    else
        quant_kernel<<<kc_blocks(p->n, KC_THREADS), KC_THREADS, 0, stream>>>(x, scale, zp, y, *p, lo, hi);
    return cudaGetLastError();
}

/* One block finds the range (min and max are exact in any order), then
 * computes the parameters; a grid quantizes with them. */
__global__ void dynamic_range_kernel(const float *x, int64_t n, float *scale, uint8_t *zp) {
    __shared__ float smn[32], smx[32];
    float mn = 0.f, mx = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    if ((threadIdx.x & 31) == 0) {
        smn[threadIdx.x >> 5] = mn;
        smx[threadIdx.x >> 5] = mx;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) {
            mn = fminf(mn, smn[w]);
            mx = fmaxf(mx, smx[w]);
        }
        mn = fminf(mn, smn[0]);
        mx = fmaxf(mx, smx[0]);
        double z;
        kn_q_dynamic_params(mn, mx, scale, &z);
        *zp = (uint8_t)z;
    }
}

__global__ void dynamic_quant_kernel(const float *x, int64_t n, uint8_t *y, const float *scale,
                                     const uint8_t *zp) {
    const float s = *scale;
    const double z = *zp;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (uint8_t)kn_q_quantize(x[i], s, z, 0.0, 255.0);
}

extern "C" cudaError_t kc_dynamic_quant(const float *x, int64_t n, uint8_t *y, float *scale, uint8_t *zp,
                                        cudaStream_t stream) {
    if (!scale || !zp || (n > 0 && (!x || !y)))
        return cudaErrorInvalidValue;
    dynamic_range_kernel<<<1, 1024, 0, stream>>>(x, n, scale, zp);
    if (n > 0)
        dynamic_quant_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(x, n, y, scale, zp);
    return cudaGetLastError();
}

/* ---------------- window functions ---------------- */

__global__ void window_kernel(void *y, kiln_dtype dt, int kind, int64_t size, int periodic) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < size; i += (int64_t)gridDim.x * blockDim.x) {
        const double v = kn_window_value(kind, i, size, periodic);
        if (dt == KILN_DTYPE_DOUBLE)
            ((double *)y)[i] = v;
        else
            kc_st_f(y, dt, i, (float)v);
    }
}

extern "C" cudaError_t kc_window(void *y, kiln_dtype dt, int kind, int64_t size, int periodic, cudaStream_t stream) {
    if (size <= 0)
        return cudaSuccess;
    if (!y)
        return cudaErrorInvalidValue;
    window_kernel<<<kc_blocks(size, KC_THREADS), KC_THREADS, 0, stream>>>(y, dt, kind, size, periodic);
    return cudaGetLastError();
}

/* ---------------- LpPool ---------------- */

__global__ void lppool_kernel(const void *x, void *y, kiln_dtype dt, const kc_lppool p,
                              int64_t total) {
    const int64_t in_size = p.in[0] * p.in[1] * p.in[2];
    const int64_t out_size = p.out[0] * p.out[1] * p.out[2];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pl = i / out_size, o = i % out_size;
        const int64_t o2 = o % p.out[2], o1 = (o / p.out[2]) % p.out[1], o0 = o / (p.out[2] * p.out[1]);
        float acc = 0.f;
        for (int64_t k0 = 0; k0 < p.kernel[0]; k0++) {
            const int64_t h0 = o0 * p.stride[0] - p.pad0[0] + k0 * p.dil[0];
            if (h0 < 0 || h0 >= p.in[0])
                continue;
            for (int64_t k1 = 0; k1 < p.kernel[1]; k1++) {
                const int64_t h1 = o1 * p.stride[1] - p.pad0[1] + k1 * p.dil[1];
                if (h1 < 0 || h1 >= p.in[1])
                    continue;
                for (int64_t k2 = 0; k2 < p.kernel[2]; k2++) {
                    const int64_t h2 = o2 * p.stride[2] - p.pad0[2] + k2 * p.dil[2];
                    if (h2 < 0 || h2 >= p.in[2])
                        continue;
                    float v = kc_ld_f(x, dt, pl * in_size + (h0 * p.in[1] + h1) * p.in[2] + h2);
                    acc += powf(fabsf(v), p.p);
                }
            }
        }
        kc_st_f(y, dt, i, powf(acc, 1.f / p.p));
    }
}

extern "C" cudaError_t kc_lppool_run(const void *x, void *y, kiln_dtype dt, const kc_lppool *p,
                                     cudaStream_t stream) {
    if (!p)
        return cudaErrorInvalidValue;
    int64_t total = p->planes * p->out[0] * p->out[1] * p->out[2];
    if (total <= 0)
        return cudaSuccess;
    if (!x || !y || p->p == 0.f)
        return cudaErrorInvalidValue;
    lppool_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, dt, *p, total);
    return cudaGetLastError();
}

__global__ void global_lppool_kernel(const void *x, void *y, kiln_dtype dt, int64_t planes,
                                     int64_t size, float p) {
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= planes)
        return;
    float acc = 0.f;
    for (int64_t j = lane; j < size; j += 32)
        acc += powf(fabsf(kc_ld_f(x, dt, warp * size + j)), p);
    acc = kc_warp_sum(acc);
    if (lane == 0)
        kc_st_f(y, dt, warp, powf(acc, 1.f / p));
}

extern "C" cudaError_t kc_global_lppool(const void *x, void *y, kiln_dtype dt, int64_t planes,
                                        int64_t size, float p, cudaStream_t stream) {
    if (planes <= 0)
        return cudaSuccess;
    if (!x || !y || size < 0 || p == 0.f)
        return cudaErrorInvalidValue;
    int64_t blocks = (planes * 32 + 255) / 256;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    global_lppool_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, y, dt, planes, size, p);
    return cudaGetLastError();
}

/* ---------------- Einsum ---------------- */

template <typename A> __device__ __forceinline__ A ein_ld(const void *p, kiln_dtype t, int64_t i);
template <> __device__ __forceinline__ float ein_ld<float>(const void *p, kiln_dtype t, int64_t i) {
    return kc_ld_f(p, t, i);
}
template <> __device__ __forceinline__ long long ein_ld<long long>(const void *p, kiln_dtype t,
                                                                   int64_t i) {
    return kc_ld_i(p, t, i);
}
template <> __device__ __forceinline__ double ein_ld<double>(const void *p, kiln_dtype t, int64_t i) {
    return t == KILN_DTYPE_DOUBLE ? ((const double *)p)[i] : (double)kc_ld_f(p, t, i);
}
__device__ __forceinline__ void ein_st(void *p, kiln_dtype t, int64_t i, double v) {
    if (t == KILN_DTYPE_DOUBLE)
        ((double *)p)[i] = v;
    else
        kc_st_f(p, t, i, (float)v);
}
__device__ __forceinline__ void ein_st(void *p, kiln_dtype t, int64_t i, float v) { kc_st_f(p, t, i, v); }
__device__ __forceinline__ void ein_st(void *p, kiln_dtype t, int64_t i, long long v) { kc_st_i(p, t, i, v); }

/* Integer products wrap (as unsigned arithmetic), like the CPU's int64 loops. */
__device__ __forceinline__ float ein_mul(float a, float b) { return a * b; }
__device__ __forceinline__ double ein_mul(double a, double b) { return a * b; }
__device__ __forceinline__ double ein_add(double a, double b) { return a + b; }
__device__ __forceinline__ long long ein_mul(long long a, long long b) {
    return (long long)((unsigned long long)a * (unsigned long long)b);
}
__device__ __forceinline__ float ein_add(float a, float b) { return a + b; }
__device__ __forceinline__ long long ein_add(long long a, long long b) {
    return (long long)((unsigned long long)a + (unsigned long long)b);
}

template <typename A>
__global__ void einsum_kernel(const kc_einsum e, void *y, kiln_dtype yt) {
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < e.total;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[KC_EIN_MAX_IN], sc[KC_EIN_MAX_SUM];
        for (int i = 0; i < e.n_in; i++)
            off[i] = 0;
        int64_t rest = o;
        for (int q = e.out_rank - 1; q >= 0; q--) {
            const int64_t c = rest % e.out_dims[q];
            rest /= e.out_dims[q];
            for (int i = 0; i < e.n_in; i++)
                off[i] += c * e.out_stride[i][q];
        }
        for (int q = 0; q < e.n_sum; q++)
            sc[q] = 0;
        A acc = 0;
        for (int64_t t = 0; t < e.sum_count; t++) {
            A prod = 1;
            for (int i = 0; i < e.n_in; i++)
                prod = ein_mul(prod, ein_ld<A>(e.in[i], e.in_dt[i], off[i]));
            acc = ein_add(acc, prod);
            /* next summed position: an odometer over the summed labels */
            for (int q = e.n_sum - 1; q >= 0; q--) {
                for (int i = 0; i < e.n_in; i++)
                    off[i] += e.sum_stride[i][q];
                if (++sc[q] < e.sum_dims[q])
                    break;
                for (int i = 0; i < e.n_in; i++)
                    off[i] -= e.sum_dims[q] * e.sum_stride[i][q];
                sc[q] = 0;
            }
        }
        ein_st(y, yt, o, acc);
    }
}

extern "C" cudaError_t kc_einsum_run(const kc_einsum *e, void *y, kiln_dtype yt, int acc,
                                     cudaStream_t stream) {
    if (!e || e->n_in < 1 || e->n_in > KC_EIN_MAX_IN || e->out_rank < 0 ||
        e->out_rank > KC_MAX_DIMS || e->n_sum < 0 || e->n_sum > KC_EIN_MAX_SUM)
        return cudaErrorInvalidValue;
    if (e->total <= 0)
        return cudaSuccess;
    if (!y)
        return cudaErrorInvalidValue;
    for (int i = 0; i < e->n_in; i++)
        if (!e->in[i] && e->sum_count > 0)
            return cudaErrorInvalidValue;
    unsigned blocks = kc_blocks(e->total, KC_THREADS);
    switch (acc) {
    case KC_EIN_FLOAT: einsum_kernel<float><<<blocks, KC_THREADS, 0, stream>>>(*e, y, yt); break;
    case KC_EIN_INT64: einsum_kernel<long long><<<blocks, KC_THREADS, 0, stream>>>(*e, y, yt); break;
    case KC_EIN_DOUBLE: einsum_kernel<double><<<blocks, KC_THREADS, 0, stream>>>(*e, y, yt); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---------------- ConvTranspose crop and bias ---------------- */

__global__ void convt_crop_kernel(const void *full, void *y, kiln_dtype dt, const void *bias,
                                  const kc_crop c, int64_t total) {
    const int64_t out_size = c.out[0] * c.out[1] * c.out[2];
    const int64_t full_size = c.full[0] * c.full[1] * c.full[2];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pl = i / out_size, o = i % out_size;
        const int64_t h2 = o % c.out[2] + c.pad0[2], h1 = (o / c.out[2]) % c.out[1] + c.pad0[1],
                      h0 = o / (c.out[2] * c.out[1]) + c.pad0[0];
        float v = 0.f;
        if (h0 >= 0 && h0 < c.full[0] && h1 >= 0 && h1 < c.full[1] && h2 >= 0 && h2 < c.full[2])
            v = kc_ld_f(full, dt, pl * full_size + (h0 * c.full[1] + h1) * c.full[2] + h2);
        if (bias)
            v += kc_ld_f(bias, dt, pl % c.channels);
        kc_st_f(y, dt, i, v);
    }
}

extern "C" cudaError_t kc_convt_crop(const void *full, void *y, kiln_dtype dt, const void *bias,
                                     const kc_crop *c, cudaStream_t stream) {
    if (!c)
        return cudaErrorInvalidValue;
    int64_t total = c->planes * c->out[0] * c->out[1] * c->out[2];
    if (total <= 0)
        return cudaSuccess;
    if (!full || !y || full == y || c->channels < 1)
        return cudaErrorInvalidValue;
    convt_crop_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(full, y, dt, bias,
                                                                                *c, total);
    return cudaGetLastError();
}
