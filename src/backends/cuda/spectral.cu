/* spectral.cu - DFT, STFT, MelWeightMatrix and Det kernels (launchers in
 * spectral.cuh), on graph/spectral.h's rules, so twiddle indices, mel bins
 * and pivots are the CPU reference's. */
#include "graph/spectral.h"
#include "kc_dev.cuh"
#include "spectral.cuh"

/* ---------------- element access ---------------- */

/* A real value as the accumulator type: double data in double, the others
 * through float. */
template <typename T> __device__ __forceinline__ T sp_ld(const void *p, kiln_dtype dt, int64_t i);
template <> __device__ __forceinline__ float sp_ld<float>(const void *p, kiln_dtype dt, int64_t i) {
    return kc_ld_f(p, dt, i);
}
template <> __device__ __forceinline__ double sp_ld<double>(const void *p, kiln_dtype dt, int64_t i) {
    return kc_ld_d(p, dt, i);
}

/* ---------------- twiddles ---------------- */

/* tw[m] = cos(2 pi m / n), tw[n + m] = sin(2 pi m / n), computed in double. */
template <typename T> __global__ void twiddle_kernel(T *tw, int64_t n) {
    for (int64_t m = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; m < n;
         m += (int64_t)gridDim.x * blockDim.x) {
        double c, s;
        kn_dft_twiddle(m, n, &c, &s);
        tw[m] = (T)c;
        tw[n + m] = (T)s;
    }
}

static bool sp_double(kiln_dtype dt) { return dt == KILN_DTYPE_DOUBLE; }

extern "C" size_t kc_twiddle_bytes(kiln_dtype dt, int64_t n) {
    return (size_t)(n > 0 ? n : 0) * 2 * (sp_double(dt) ? sizeof(double) : sizeof(float));
}

template <typename T> static cudaError_t twiddles(T *tw, int64_t n, cudaStream_t stream) {
    twiddle_kernel<T><<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(tw, n);
    return cudaGetLastError();
}

/* ---------------- DFT ---------------- */

/* A thread an output value (o, k, i): the sum over the input samples of
 * x * e^{-+2 pi i kt/n}, twiddle index m = k*t mod n stepped by k. */
template <typename T>
__global__ void dft_kernel(const void *x, void *y, kiln_dtype dt, const kn_dft g, const T *tw) {
    const int64_t total = g.outer * g.out_len * g.inner, taps = kn_dft_taps(&g);
    const int64_t stride = g.inner * g.cin;
    const T scale = g.inverse ? (T)1 / (T)g.n : (T)1;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = idx % g.inner, rest = idx / g.inner;
        const int64_t k = rest % g.out_len, o = rest / g.out_len;
        int64_t at = (o * g.len * g.inner + i) * g.cin, m = 0;
        T re = 0, im = 0;
        for (int64_t t = 0; t < taps; t++, at += stride) {
            const T xr = sp_ld<T>(x, dt, at);
            const T xi = g.cin == 2 ? sp_ld<T>(x, dt, at + 1) : (T)0;
            const T c = tw[m], s = tw[g.n + m];
            if (g.inverse) {
                re += xr * c - xi * s;
                im += xi * c + xr * s;
            } else {
                re += xr * c + xi * s;
                im += xi * c - xr * s;
            }
            m = kn_dft_step(m, k, g.n);
        }
        const int64_t to = ((o * g.out_len + k) * g.inner + i) * 2;
        kc_st_d(y, dt, to, (double)(re * scale));
        kc_st_d(y, dt, to + 1, (double)(im * scale));
    }
}

template <typename T>
static cudaError_t dft_launch(const void *x, void *y, kiln_dtype dt, const kn_dft *g, void *ws,
                              cudaStream_t stream) {
    T *tw = (T *)ws;
    cudaError_t e = twiddles<T>(tw, g->n, stream);
    if (e != cudaSuccess)
        return e;
    const int64_t total = g->outer * g->out_len * g->inner;
    dft_kernel<T><<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, dt, *g, tw);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_dft(const void *x, void *y, kiln_dtype dt, const kn_dft *g, void *ws,
                              cudaStream_t stream) {
    if (g->outer * g->out_len * g->inner <= 0)
        return cudaSuccess;
    if (!x || !y || !ws || g->n < 1 || g->out_len > g->n)
        return cudaErrorInvalidValue;
    return sp_double(dt) ? dft_launch<double>(x, y, dt, g, ws, stream)
                         : dft_launch<float>(x, y, dt, g, ws, stream);
}

/* ---------------- STFT ---------------- */

/* A thread an output value (b, f, k): frame f's windowed samples, those past
 * the signal's end being zeros, transformed at size n. */
template <typename T>
__global__ void stft_kernel(const void *x, const void *w, void *y, kiln_dtype dt, const kn_stft g,
                            const T *tw) {
    const int64_t total = g.batch * g.frames * g.bins, taps = kn_stft_taps(&g);
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = idx % g.bins, rest = idx / g.bins;
        const int64_t f = rest % g.frames, b = rest / g.frames;
        const int64_t start = f * g.step;
        int64_t m = 0;
        T re = 0, im = 0;
        for (int64_t t = 0; t < taps && start + t < g.len; t++) {
            const int64_t at = (b * g.len + start + t) * g.cin;
            const T wt = w ? sp_ld<T>(w, dt, t) : (T)1;
            const T xr = sp_ld<T>(x, dt, at) * wt;
            const T xi = g.cin == 2 ? sp_ld<T>(x, dt, at + 1) * wt : (T)0;
            const T c = tw[m], s = tw[g.n + m];
            re += xr * c + xi * s;
            im += xi * c - xr * s;
            m = kn_dft_step(m, k, g.n);
        }
        kc_st_d(y, dt, idx * 2, (double)re);
        kc_st_d(y, dt, idx * 2 + 1, (double)im);
    }
}

template <typename T>
static cudaError_t stft_launch(const void *x, const void *w, void *y, kiln_dtype dt, const kn_stft *g,
                               void *ws, cudaStream_t stream) {
    T *tw = (T *)ws;
    cudaError_t e = twiddles<T>(tw, g->n, stream);
    if (e != cudaSuccess)
        return e;
    const int64_t total = g->batch * g->frames * g->bins;
    stft_kernel<T><<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, w, y, dt, *g, tw);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_stft(const void *x, const void *w, void *y, kiln_dtype dt, const kn_stft *g,
                               void *ws, cudaStream_t stream) {
    if (g->batch * g->frames * g->bins <= 0)
        return cudaSuccess;
    if (!x || !y || !ws || g->n < 1 || g->bins > g->n)
        return cudaErrorInvalidValue;
    return sp_double(dt) ? stft_launch<double>(x, w, y, dt, g, ws, stream)
                         : stft_launch<float>(x, w, y, dt, g, ws, stream);
}

/* ---------------- MelWeightMatrix ---------------- */

/* A thread an output value (j, i): triangle i's weight at bin j, from the
 * three frequency bins of graph/spectral.h (double, no FMA). */
__global__ void mel_kernel(void *y, kiln_dtype dt, const kn_mel g) {
    const int64_t total = g.nspec * g.nmel;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = idx % g.nmel, j = idx / g.nmel;
        const int64_t b0 = kn_mel_bin(&g, i), b1 = kn_mel_bin(&g, i + 1), b2 = kn_mel_bin(&g, i + 2);
        kc_st_d(y, dt, idx, kn_mel_weight(j, b0, b1, b2));
    }
}

extern "C" cudaError_t kc_mel(void *y, kiln_dtype dt, const kn_mel *g, cudaStream_t stream) {
    const int64_t total = g->nspec * g->nmel;
    if (total <= 0)
        return cudaSuccess;
    if (!y || g->sample_rate < 1)
        return cudaErrorInvalidValue;
    mel_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(y, dt, *g);
    return cudaGetLastError();
}

/* ---------------- Det ---------------- */

#define SP_DET_THREADS 128
#define SP_DET_MAX_BLOCKS 4096
#define SP_DET_MAX_WS ((int64_t)64 << 20)

extern "C" int64_t kc_det_blocks(int64_t batch, int64_t m) {
    if (batch <= 0)
        return 0;
    int64_t per = m * m * (int64_t)sizeof(double);
    int64_t b = per > 0 ? SP_DET_MAX_WS / per : SP_DET_MAX_BLOCKS;
    if (b < 1)
        b = 1;
    if (b > SP_DET_MAX_BLOCKS)
        b = SP_DET_MAX_BLOCKS;
    return b < batch ? b : batch;
}

extern "C" size_t kc_det_workspace(int64_t batch, int64_t m) {
    return (size_t)(kc_det_blocks(batch, m) * m * m) * sizeof(double);
}

/* A block a matrix (grid-stride over the batch), the matrix in double in
 * the block's part of the workspace: thread 0 picks the pivot
 * (kn_det_pivot), the block swaps rows and eliminates below it
 * (kn_det_update, element by element as the CPU does), and thread 0 takes
 * the product of the diagonal in the CPU's order. */
__global__ void __launch_bounds__(SP_DET_THREADS)
det_kernel(const void *x, void *y, kiln_dtype dt, int64_t batch, int64_t m, double *ws) {
    __shared__ int64_t piv;
    __shared__ int zero;
    __shared__ double sign;
    double *a = ws + (int64_t)blockIdx.x * m * m;
    const int64_t mm = m * m;
    for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
        for (int64_t e = threadIdx.x; e < mm; e += blockDim.x)
            a[e] = sp_ld<double>(x, dt, b * mm + e);
        if (threadIdx.x == 0) {
            sign = 1.0;
            zero = 0;
        }
        __syncthreads();
        for (int64_t k = 0; k < m; k++) {
            if (threadIdx.x == 0) {
                piv = kn_det_pivot(a, m, k);
                if (a[piv * m + k] == 0.0)
                    zero = 1;
                else if (piv != k)
                    sign = -sign;
            }
            __syncthreads();
            if (zero)
                break;
            const int64_t p = piv;
            if (p != k)
                for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
                    double t = a[k * m + j];
                    a[k * m + j] = a[p * m + j];
                    a[p * m + j] = t;
                }
            __syncthreads();
            const int64_t n = m - k - 1;
            for (int64_t e = threadIdx.x; e < n * n; e += blockDim.x)
                kn_det_update(a, m, k, k + 1 + e / n, k + 1 + e % n);
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            double det = sign;
            if (zero)
                det = 0.0;
            else
                for (int64_t k = 0; k < m; k++)
                    det *= a[k * m + k];
            kc_st_d(y, dt, b, det);
        }
        __syncthreads();
    }
}

extern "C" cudaError_t kc_det(const void *x, void *y, kiln_dtype dt, int64_t batch, int64_t m, void *ws,
                              cudaStream_t stream) {
    const int64_t blocks = kc_det_blocks(batch, m);
    if (blocks <= 0)
        return cudaSuccess;
    if (!y || m < 0 || (m > 0 && (!x || !ws)))
        return cudaErrorInvalidValue;
    det_kernel<<<(unsigned)blocks, SP_DET_THREADS, 0, stream>>>(x, y, dt, batch, m, (double *)ws);
    return cudaGetLastError();
}
