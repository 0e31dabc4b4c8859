/* index.cu - the index family's kernels (index.cuh). One thread per output
 * element (ArgMax / ArgMin, Trilu, GatherElements) or per scanned line
 * (CumSum / CumProd, sequential along the axis like the reference). */
#include "index.cuh"
#include "kc_dev.cuh"

__global__ void argext_kernel(const void *x, kiln_dtype dt, int64_t *y, int64_t outer, int64_t n,
                              int64_t inner, int max, int last) {
    const int64_t units = outer * inner;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = u / inner, i = u % inner, base = o * n * inner + i;
        double best = kc_ld_d(x, dt, base);
        int64_t bi = 0;
        for (int64_t j = 1; j < n; j++) {
            double a = kc_ld_d(x, dt, base + j * inner);
            bool take = max ? (last ? a >= best : a > best) : (last ? a <= best : a < best);
            if (take) {
                best = a;
                bi = j;
            }
        }
        y[u] = bi;
    }
}

extern "C" cudaError_t kc_argext(const void *x, kiln_dtype dt, int64_t *y, int64_t outer, int64_t n,
                                 int64_t inner, int max, int select_last, cudaStream_t stream) {
    int64_t units = outer * inner;
    if (units <= 0)
        return cudaSuccess;
    if (n <= 0 || !x || !y)
        return cudaErrorInvalidValue;
    argext_kernel<<<kc_blocks(units, KC_THREADS), KC_THREADS, 0, stream>>>(x, dt, y, outer, n, inner,
                                                                           max, select_last);
    return cudaGetLastError();
}

__global__ void cumulative_kernel(const void *x, void *y, kiln_dtype dt, int64_t outer, int64_t n,
                                  int64_t inner, int prod, int exclusive, int reverse) {
    const int64_t units = outer * inner;
    const bool wide = dt == KILN_DTYPE_INT64 || dt == KILN_DTYPE_UINT64;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = u / inner, i = u % inner;
        const int64_t first = o * n * inner + i + (reverse ? (n - 1) * inner : 0);
        const int64_t step = reverse ? -inner : inner;
        double dacc = prod ? 1 : 0;
        long long iacc = prod ? 1 : 0;
        for (int64_t j = 0; j < n; j++) {
            const int64_t at = first + j * step;
            if (wide) {
                long long t = ((const long long *)x)[at], next = prod ? iacc * t : iacc + t;
                ((long long *)y)[at] = exclusive ? iacc : next;
                iacc = next;
            } else {
                double t = kc_ld_d(x, dt, at), next = prod ? dacc * t : dacc + t;
                kc_st_d(y, dt, at, exclusive ? dacc : next);
                dacc = next;
            }
        }
    }
}

extern "C" cudaError_t kc_cumulative(const void *x, void *y, kiln_dtype dt, int64_t outer,
                                     int64_t n, int64_t inner, int prod, int exclusive, int reverse,
                                     cudaStream_t stream) {
    int64_t units = outer * inner;
    if (units <= 0 || n <= 0)
        return cudaSuccess;
    if (!x || !y)
        return cudaErrorInvalidValue;
    cumulative_kernel<<<kc_blocks(units, KC_THREADS), KC_THREADS, 0, stream>>>(
        x, y, dt, outer, n, inner, prod, exclusive, reverse);
    return cudaGetLastError();
}

__global__ void trilu_kernel(const unsigned char *x, unsigned char *y, size_t es, int64_t total,
                             int64_t rows, int64_t cols, int64_t k, int upper) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % cols, i = e / cols % rows;
        const bool keep = upper ? j - i >= k : j - i <= k;
        for (size_t b = 0; b < es; b++)
            y[e * es + b] = keep ? x[e * es + b] : 0;
    }
}

extern "C" cudaError_t kc_trilu(const void *x, void *y, size_t es, int64_t mats, int64_t rows,
                                int64_t cols, int64_t k, int upper, cudaStream_t stream) {
    int64_t total = mats * rows * cols;
    if (total <= 0)
        return cudaSuccess;
    if (!x || !y || es == 0)
        return cudaErrorInvalidValue;
    trilu_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(
        (const unsigned char *)x, (unsigned char *)y, es, total, rows, cols, k, upper);
    return cudaGetLastError();
}

__global__ void gather_elements_kernel(const unsigned char *x, unsigned char *y, size_t es,
                                       const void *idx, kiln_dtype idt, const kc_gather_el g) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < g.total;
         e += (int64_t)gridDim.x * blockDim.x) {
        long long v = idt == KILN_DTYPE_INT32 ? ((const int *)idx)[e] : ((const long long *)idx)[e];
        if (v < 0)
            v += g.axis_len;
        /* out of range reads nothing: zeros (the host checks known indices) */
        bool ok = v >= 0 && v < g.axis_len;
        int64_t rem = e, off = 0;
        for (int d = g.rank - 1; d >= 0; d--) {
            int64_t c = rem % g.idx_dims[d];
            rem /= g.idx_dims[d];
            off += (d == g.axis ? (int64_t)v : c) * g.x_strides[d];
        }
        for (size_t b = 0; b < es; b++)
            y[e * es + b] = ok ? x[off * es + b] : 0;
    }
}

extern "C" cudaError_t kc_gather_elements(const void *x, void *y, size_t es, const void *idx,
                                          kiln_dtype idt, const kc_gather_el *g,
                                          cudaStream_t stream) {
    if (!g || g->total <= 0)
        return cudaSuccess;
    if (!x || !y || !idx || es == 0)
        return cudaErrorInvalidValue;
    gather_elements_kernel<<<kc_blocks(g->total, KC_THREADS), KC_THREADS, 0, stream>>>(
        (const unsigned char *)x, (unsigned char *)y, es, idx, idt, *g);
    return cudaGetLastError();
}
