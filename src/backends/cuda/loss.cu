/* loss.cu - NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (the rules
 * of graph/loss.h; glue in k_nn2.c). One pass gives each sample its loss
 * and weight (and, for SoftmaxCrossEntropyLoss, the log-softmax over the
 * classes); a reduction keeps them in double and one block adds them in a
 * fixed order, so a run's result does not depend on scheduling. */
#include <math.h>

#include "graph/loss.h"
#include "kc_dev.cuh"
#include "loss.cuh"

__device__ __forceinline__ double warp_max(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sample s = b * inner + d of x [n, classes, inner]. With `lanes` = 32 a
 * warp shares a sample's classes (inner == 1: they are contiguous); with 1
 * a thread walks them (neighbouring threads read neighbouring d). */
template <int lanes>
__global__ void loss_sample_kernel(const void *x, const void *target, const void *weight, void *y,
                                   void *log_prob, double *acc, kc_loss p) {
    const kn_loss &g = p.g;
    const int64_t samples = g.n * g.inner;
    const int lane = lanes == 1 ? 0 : (int)(threadIdx.x & 31);
    int64_t first = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / lanes;
    int64_t step = (int64_t)gridDim.x * blockDim.x / lanes;
    for (int64_t s = first; s < samples; s += step) {
        const int64_t b = s / g.inner, d = s % g.inner;
        const int64_t base = b * g.classes * g.inner + d;
        double lse = 0.0;
        if (p.softmax) {
            double mx = -INFINITY, sum = 0.0;
            for (int64_t c = lane; c < g.classes; c += lanes)
                mx = fmax(mx, kc_ld_d(x, p.dt, base + c * g.inner));
            if (lanes > 1)
                mx = warp_max(mx);
            for (int64_t c = lane; c < g.classes; c += lanes)
                sum += exp(kc_ld_d(x, p.dt, base + c * g.inner) - mx);
            if (lanes > 1)
                sum = warp_sum(sum);
            lse = mx + log(sum);
            if (log_prob)
                for (int64_t c = lane; c < g.classes; c += lanes)
                    kc_st_d(log_prob, p.dt, base + c * g.inner, kc_ld_d(x, p.dt, base + c * g.inner) - lse);
        }
        if (lane != 0)
            continue;
        const long long t = kc_ld_i(target, p.target_dt, s);
        double loss = 0.0, wt = 0.0;
        if (kn_loss_counts(&g, t)) {
            wt = weight ? kc_ld_d(weight, p.dt, t) : 1.0;
            loss = -(kc_ld_d(x, p.dt, base + t * g.inner) - lse) * wt;
        }
        if (g.reduction == KN_LOSS_NONE) {
            kc_st_d(y, p.dt, s, loss);
        } else {
            acc[s] = loss;
            acc[samples + s] = wt;
        }
    }
}

/* One block: the sums of acc's two halves, then y[0]. */
__global__ void loss_reduce_kernel(const double *acc, void *y, kc_loss p) {
    __shared__ double sl[KC_THREADS], sw[KC_THREADS];
    const int64_t samples = p.g.n * p.g.inner;
    double l = 0.0, w = 0.0;
    for (int64_t i = threadIdx.x; i < samples; i += blockDim.x) {
        l += acc[i];
        w += acc[samples + i];
    }
    sl[threadIdx.x] = l;
    sw[threadIdx.x] = w;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
            sl[threadIdx.x] += sl[threadIdx.x + h];
            sw[threadIdx.x] += sw[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        kc_st_d(y, p.dt, 0, kn_loss_reduce(&p.g, sl[0], sw[0]));
}

extern "C" size_t kc_loss_workspace(const kc_loss *p) {
    return p->g.reduction == KN_LOSS_NONE ? 0 : (size_t)(2 * p->g.n * p->g.inner) * sizeof(double);
}

extern "C" cudaError_t kc_loss_run(const void *x, const void *target, const void *weight, void *y,
                                   void *log_prob, void *workspace, const kc_loss *p, cudaStream_t stream) {
    const int64_t samples = p->g.n * p->g.inner;
    if (p->g.n < 0 || p->g.inner < 0 || p->g.classes < 0)
        return cudaErrorInvalidValue;
    if (samples > 0) {
        if (p->softmax && p->g.inner == 1 && p->g.classes >= 64)
            loss_sample_kernel<32><<<kc_blocks(samples * 32, KC_THREADS), KC_THREADS, 0, stream>>>(
                x, target, weight, y, log_prob, (double *)workspace, *p);
        else
            loss_sample_kernel<1><<<kc_blocks(samples, KC_THREADS), KC_THREADS, 0, stream>>>(
                x, target, weight, y, log_prob, (double *)workspace, *p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    if (p->g.reduction == KN_LOSS_NONE)
        return cudaSuccess;
    loss_reduce_kernel<<<1, KC_THREADS, 0, stream>>>((const double *)workspace, y, *p);
    return cudaGetLastError();
}
