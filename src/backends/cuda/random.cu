/* random.cu - RandomUniform, RandomNormal, their -Like forms, Bernoulli and
 * Multinomial: one thread an element (a sample for Multinomial, after a
 * pass that sums each row once), drawing
 * graph/random.h's numbers for the run counter in device memory; a
 * one-thread kernel then advances the counter in stream order. */
#include <math.h>

#include "graph/random.h"
#include "kc_dev.cuh"
#include "random.cuh"

__global__ void random_fill_kernel(const void *x, void *y, const unsigned long long *run, kc_random p) {
    const unsigned long long r = *run;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.count;
         i += (long long)gridDim.x * blockDim.x) {
        double v;
        if (p.kind == KN_RAND_UNIFORM)
            v = p.a + (p.b - p.a) * kn_rand_uniform(p.key, (uint64_t)i, r);
        else if (p.kind == KN_RAND_NORMAL)
            v = p.a + p.b * kn_rand_normal(p.key, (uint64_t)i, r);
        else
            v = kn_rand_uniform(p.key, (uint64_t)i, r) < kc_ld_d(x, p.x_dt, i) ? 1.0 : 0.0;
        kc_st_d(y, p.y_dt, i, v);
    }
}

/* One thread a row: its maximum and its total of exp(x - max), summed in
 * the CPU reference's order, once for all of the row's samples. */
__global__ void multinomial_rows_kernel(const void *x, double *stats, kc_random p) {
    for (long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x; row < p.count;
         row += (long long)gridDim.x * blockDim.x) {
        const long long base = row * p.classes;
        double mx = -INFINITY, total = 0.0;
        for (long long c = 0; c < p.classes; c++)
            mx = fmax(mx, kc_ld_d(x, p.x_dt, base + c));
        for (long long c = 0; c < p.classes; c++)
            total += exp(kc_ld_d(x, p.x_dt, base + c) - mx);
        stats[2 * row] = mx;
        stats[2 * row + 1] = total;
    }
}

/* One thread a (row, sample): the CPU reference's walk over the classes. */
__global__ void multinomial_kernel(const void *x, void *y, const unsigned long long *run,
                                   const double *stats, kc_random p) {
    const unsigned long long r = *run;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < p.count * p.samples;
         e += (long long)gridDim.x * blockDim.x) {
        const long long row = e / p.samples, base = row * p.classes;
        const double mx = stats[2 * row];
        const double target = kn_rand_uniform(p.key, (uint64_t)e, r) * stats[2 * row + 1];
        double cum = 0.0;
        long long pick = p.classes - 1;
        for (long long c = 0; c < p.classes; c++) {
            cum += exp(kc_ld_d(x, p.x_dt, base + c) - mx);
            if (target < cum) {
                pick = c;
                break;
            }
        }
        kc_st_i(y, p.y_dt, e, pick);
    }
}

__global__ void random_advance_kernel(unsigned long long *run) { *run += 1; }

__global__ void dropout_kernel(const void *x, void *y, void *mask, const unsigned long long *run,
                               kc_dropout p) {
    const unsigned long long r = *run;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.count;
         i += (long long)gridDim.x * blockDim.x) {
        const bool keep = kn_rand_uniform(p.key, (uint64_t)i, r) >= p.ratio;
        kc_st_d(y, p.x_dt, i, keep ? kc_ld_d(x, p.x_dt, i) * p.scale : 0.0);
        if (mask)
            kc_st_d(mask, p.mask_dt, i, keep ? 1.0 : 0.0);
    }
}

extern "C" cudaError_t kc_dropout_run(const void *x, void *y, void *mask, unsigned long long *run,
                                      const kc_dropout *p, cudaStream_t stream) {
    if (!run || p->count < 0)
        return cudaErrorInvalidValue;
    if (p->count > 0) {
        dropout_kernel<<<kc_blocks(p->count, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, mask, run, *p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    random_advance_kernel<<<1, 1, 0, stream>>>(run);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_random_run(const void *x, void *y, unsigned long long *run, double *stats,
                                     const kc_random *p, cudaStream_t stream) {
    if (!run || p->count < 0 || (p->kind == KN_RAND_MULTINOMIAL && p->count > 0 && !stats))
        return cudaErrorInvalidValue;
    long long work = p->kind == KN_RAND_MULTINOMIAL ? p->count * p->samples : p->count;
    if (work > 0) {
        if (p->kind == KN_RAND_MULTINOMIAL) {
            multinomial_rows_kernel<<<kc_blocks(p->count, KC_THREADS), KC_THREADS, 0, stream>>>(x, stats, *p);
            multinomial_kernel<<<kc_blocks(work, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, run, stats, *p);
        } else
            random_fill_kernel<<<kc_blocks(work, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, run, *p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    random_advance_kernel<<<1, 1, 0, stream>>>(run);
    return cudaGetLastError();
}
