/* shape.cu - the shape family's kernels (shape.cuh): one thread per output
 * element for the layout ops, per update for the scatters (reductions by
 * compare-and-swap on the element's aligned word), a block per slice for
 * short TopK slices (bitonic sort in shared memory) and CUB for long ones,
 * for the compaction scans of NonZero and Compress and for Unique's sort;
 * NonMaxSuppression settles its candidates from a bit matrix of overlaps. */
#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <limits.h>

#include "graph/nms.h"
#include "kc_dev.cuh"
#include "shape.cuh"

/* ---------------- element access, as the CPU's kbt_load / kbt_store ---------------- */

__device__ __forceinline__ bool sh_is_real(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_DOUBLE || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

__device__ __forceinline__ double sh_ld_real(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT: return ((const float *)p)[i];
    case KILN_DTYPE_DOUBLE: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return 0.0;
    }
}

/* Integers as int64 (uint64 reinterpreted), reals truncated and saturated. */
__device__ __forceinline__ long long sh_ld_i64(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_INT64: return ((const long long *)p)[i];
    case KILN_DTYPE_INT32: return ((const int *)p)[i];
    case KILN_DTYPE_INT16: return ((const short *)p)[i];
    case KILN_DTYPE_INT8: return ((const signed char *)p)[i];
    case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL: return ((const unsigned char *)p)[i];
    case KILN_DTYPE_UINT16: return ((const unsigned short *)p)[i];
    case KILN_DTYPE_UINT32: return ((const unsigned *)p)[i];
    case KILN_DTYPE_UINT64: return (long long)((const unsigned long long *)p)[i];
    default: {
        double v = sh_ld_real(p, t, i);
        return v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (long long)v;
    }
    }
}

__device__ __forceinline__ double sh_ld_d(const void *p, kiln_dtype t, int64_t i) {
    if (sh_is_real(t))
        return sh_ld_real(p, t, i);
    if (t == KILN_DTYPE_UINT64)
        return (double)((const unsigned long long *)p)[i];
    return (double)sh_ld_i64(p, t, i);
}

__device__ __forceinline__ void sh_st_i64(void *p, kiln_dtype t, int64_t i, long long v);

__device__ __forceinline__ double sh_clamp(double v, double lo, double hi) {
    return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

__device__ __forceinline__ void sh_st_d(void *p, kiln_dtype t, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT: ((float *)p)[i] = (float)v; return;
    case KILN_DTYPE_DOUBLE: ((double *)p)[i] = v; return;
    case KILN_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn((float)v); return;
    case KILN_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); return;
    case KILN_DTYPE_BOOL: ((unsigned char *)p)[i] = v != 0; return;
    case KILN_DTYPE_UINT64:
        ((unsigned long long *)p)[i] = (unsigned long long)sh_clamp(rint(v), 0, 1.8e19);
        return;
    default: break;
    }
    double r = rint(v);
    switch (t) {
    case KILN_DTYPE_INT8: r = sh_clamp(r, -128, 127); break;
    case KILN_DTYPE_UINT8: r = sh_clamp(r, 0, 255); break;
    case KILN_DTYPE_INT16: r = sh_clamp(r, -32768, 32767); break;
    case KILN_DTYPE_UINT16: r = sh_clamp(r, 0, 65535); break;
    case KILN_DTYPE_INT32: r = sh_clamp(r, -2147483648.0, 2147483647.0); break;
    case KILN_DTYPE_UINT32: r = sh_clamp(r, 0, 4294967295.0); break;
    default: r = sh_clamp(r, -9.2e18, 9.2e18); break;
    }
    sh_st_i64(p, t, i, (long long)r);
}

__device__ __forceinline__ void sh_st_i64(void *p, kiln_dtype t, int64_t i, long long v) {
    switch (t) {
    case KILN_DTYPE_INT64: ((long long *)p)[i] = v; return;
    case KILN_DTYPE_INT32: ((int *)p)[i] = (int)v; return;
    case KILN_DTYPE_INT16: ((short *)p)[i] = (short)v; return;
    case KILN_DTYPE_INT8: ((signed char *)p)[i] = (signed char)v; return;
    case KILN_DTYPE_UINT8: ((unsigned char *)p)[i] = (unsigned char)v; return;
    case KILN_DTYPE_BOOL: ((unsigned char *)p)[i] = v != 0; return;
    case KILN_DTYPE_UINT16: ((unsigned short *)p)[i] = (unsigned short)v; return;
    case KILN_DTYPE_UINT32: ((unsigned *)p)[i] = (unsigned)v; return;
    case KILN_DTYPE_UINT64: ((unsigned long long *)p)[i] = (unsigned long long)v; return;
    default: sh_st_d(p, t, i, (double)v); return;
    }
}

/* dst[di] = src[si], elements of es bytes (1, 2, 4 or 8). */
__device__ __forceinline__ void sh_copy(void *dst, int64_t di, const void *src, int64_t si,
                                        size_t es) {
    switch (es) {
    case 1: ((unsigned char *)dst)[di] = ((const unsigned char *)src)[si]; break;
    case 2: ((unsigned short *)dst)[di] = ((const unsigned short *)src)[si]; break;
    case 4: ((unsigned *)dst)[di] = ((const unsigned *)src)[si]; break;
    default: ((unsigned long long *)dst)[di] = ((const unsigned long long *)src)[si]; break;
    }
}

/* dst[di] = the low es bytes of bits. */
__device__ __forceinline__ void sh_put(void *dst, int64_t di, uint64_t bits, size_t es) {
    switch (es) {
    case 1: ((unsigned char *)dst)[di] = (unsigned char)bits; break;
    case 2: ((unsigned short *)dst)[di] = (unsigned short)bits; break;
    case 4: ((unsigned *)dst)[di] = (unsigned)bits; break;
    default: ((unsigned long long *)dst)[di] = bits; break;
    }
}

#define SH_LOOP(e, n) \
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n); \
         e += (int64_t)gridDim.x * blockDim.x)

/* ---------------- Resize ---------------- */

__global__ void resize_kernel(const void *x, void *y, const unsigned char *tab, const kc_resize p) {
    const int last = p.rank - 1;
    SH_LOOP(e, p.total) {
        int64_t c[KC_MAX_DIMS], rem = e;
        bool outside = false;
        for (int d = last; d >= 0; d--) {
            c[d] = rem % p.out_dims[d];
            rem /= p.out_dims[d];
            if (((const int64_t *)(tab + p.cnt_at[d]))[c[d]] <= 0)
                outside = true;
        }
        if (outside) {
            sh_put(y, e, p.extra, p.es);
            continue;
        }
        if (p.nearest) {
            int64_t off = 0;
            for (int d = 0; d <= last; d++)
                off += ((const int64_t *)(tab + p.idx_at[d]))[c[d] * p.cap[d]] * p.x_strides[d];
            sh_copy(y, e, x, off, p.es);
            continue;
        }
        /* the CPU's order: over the outer axes' tap combinations, each a
         * weighted sum over the last axis's taps; no fused multiply-adds,
         * so the sums round as the CPU's do (integer outputs round to
         * nearest afterwards, where a last-bit difference could show) */
        const int64_t n_last = ((const int64_t *)(tab + p.cnt_at[last]))[c[last]];
        const int64_t *li = (const int64_t *)(tab + p.idx_at[last]) + c[last] * p.cap[last];
        const double *lw = (const double *)(tab + p.w_at[last]) + c[last] * p.cap[last];
        int64_t t[KC_MAX_DIMS] = {0};
        double acc = 0;
        for (;;) {
            int64_t off = 0;
            double w = 1;
            for (int d = 0; d < last; d++) {
                int64_t at = c[d] * p.cap[d] + t[d];
                off += ((const int64_t *)(tab + p.idx_at[d]))[at] * p.x_strides[d];
                w = __dmul_rn(w, ((const double *)(tab + p.w_at[d]))[at]);
            }
            double a = 0;
            for (int64_t k = 0; k < n_last; k++)
                a = __dadd_rn(a, __dmul_rn(lw[k], sh_ld_d(x, p.dt, off + li[k])));
            acc = __dadd_rn(acc, __dmul_rn(w, a));
            int d = last - 1;
            while (d >= 0 && ++t[d] >= ((const int64_t *)(tab + p.cnt_at[d]))[c[d]]) {
                t[d] = 0;
                d--;
            }
            if (d < 0)
                break;
        }
        sh_st_d(y, p.dt, e, acc);
    }
}

extern "C" cudaError_t kc_resize_run(const void *x, void *y, const void *tables, const kc_resize *p,
                                     cudaStream_t stream) {
    if (!p || p->total <= 0)
        return cudaSuccess;
    if (!x || !y || !tables || p->rank < 1 || p->rank > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    resize_kernel<<<kc_blocks(p->total, KC_THREADS), KC_THREADS, 0, stream>>>(
        x, y, (const unsigned char *)tables, *p);
    return cudaGetLastError();
}

/* ---------------- Range, EyeLike, OneHot ---------------- */

__global__ void range_kernel(void *y, kiln_dtype dt, int64_t n, double fs, double fd, long long is,
                             long long id) {
    const bool real = sh_is_real(dt);
    SH_LOOP(i, n) {
        if (real)
            sh_st_d(y, dt, i, __dadd_rn(fs, __dmul_rn((double)i, fd))); /* no FMA: as the CPU */
        else /* wraps as the CPU's int64 arithmetic does */
            sh_st_i64(y, dt, i,
                      (long long)((unsigned long long)is + (unsigned long long)i * (unsigned long long)id));
    }
}

extern "C" cudaError_t kc_range(void *y, kiln_dtype dt, int64_t n, double fs, double fd, int64_t is,
                                int64_t id, cudaStream_t stream) {
    if (n <= 0)
        return cudaSuccess;
    if (!y)
        return cudaErrorInvalidValue;
    range_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(y, dt, n, fs, fd, is, id);
    return cudaGetLastError();
}

__global__ void eyelike_kernel(void *y, size_t es, uint64_t one, int64_t rows, int64_t cols,
                               int64_t k) {
    SH_LOOP(i, rows) {
        int64_t j = i + k;
        if (j >= 0 && j < cols)
            sh_put(y, i * cols + j, one, es);
    }
}

extern "C" cudaError_t kc_eyelike(void *y, size_t es, uint64_t one, int64_t rows, int64_t cols,
                                  int64_t k, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0)
        return cudaSuccess;
    if (!y || !(es == 1 || es == 2 || es == 4 || es == 8))
        return cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(y, 0, (size_t)(rows * cols) * es, stream);
    if (e != cudaSuccess)
        return e;
    eyelike_kernel<<<kc_blocks(rows, KC_THREADS), KC_THREADS, 0, stream>>>(y, es, one, rows, cols, k);
    return cudaGetLastError();
}

__global__ void onehot_kernel(const void *ix, kiln_dtype idt, const void *vals, void *y, size_t es,
                              int64_t total, int64_t depth, int64_t inner) {
    SH_LOOP(e, total) {
        const int64_t b = e % inner, j = e / inner % depth, a = e / inner / depth;
        long long v = sh_ld_i64(ix, idt, a * inner + b);
        if (v < 0)
            v += depth;
        sh_copy(y, e, vals, v == j ? 1 : 0, es);
    }
}

extern "C" cudaError_t kc_onehot(const void *ix, kiln_dtype idt, const void *vals, void *y,
                                 size_t es, int64_t outer, int64_t depth, int64_t inner,
                                 cudaStream_t stream) {
    int64_t total = outer * depth * inner;
    if (total <= 0)
        return cudaSuccess;
    if (!ix || !vals || !y || !(es == 1 || es == 2 || es == 4 || es == 8))
        return cudaErrorInvalidValue;
    onehot_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(ix, idt, vals, y, es,
                                                                          total, depth, inner);
    return cudaGetLastError();
}

/* ---------------- GatherND, ScatterND, ScatterElements ---------------- */

/* Offset of tuple t's point, or -1 when an index is out of range. */
__device__ __forceinline__ int64_t nd_offset(const int64_t *ix, const kc_nd &p, int64_t t) {
    int64_t off = (p.per_batch ? t / p.per_batch : 0) * p.batch_stride;
    for (int j = 0; j < p.k; j++) {
        long long v = ix[t * p.k + j];
        const int64_t dim = p.dims[j];
        if (v < 0)
            v += dim;
        if (v < 0 || v >= dim)
            return -1;
        off += v * p.strides[j];
    }
    return off;
}

__global__ void gather_nd_kernel(const void *x, const int64_t *ix, void *y, size_t es,
                                 const kc_nd p) {
    SH_LOOP(e, p.tuples * p.slice) {
        const int64_t t = e / p.slice, s = e % p.slice, off = nd_offset(ix, p, t);
        if (off < 0)
            sh_put(y, e, 0, es);
        else
            sh_copy(y, e, x, off + s, es);
    }
}

extern "C" cudaError_t kc_gather_nd(const void *x, const int64_t *ix, void *y, size_t es,
                                    const kc_nd *p, cudaStream_t stream) {
    if (!p || p->tuples * p->slice <= 0)
        return cudaSuccess;
    if (!x || !ix || !y || p->k < 1 || p->k > KC_MAX_DIMS ||
        !(es == 1 || es == 2 || es == 4 || es == 8))
        return cudaErrorInvalidValue;
    gather_nd_kernel<<<kc_blocks(p->tuples * p->slice, KC_THREADS), KC_THREADS, 0, stream>>>(
        x, ix, y, es, *p);
    return cudaGetLastError();
}

/* old (red) b, on an element held in the low bytes of `bits`. */
__device__ __forceinline__ uint64_t red_bits(uint64_t bits, kiln_dtype dt, int red, double bd,
                                             long long bi) {
    union {
        uint64_t u;
        unsigned char b[8];
    } v;
    v.u = bits;
    if (sh_is_real(dt)) {
        double a = sh_ld_d(v.b, dt, 0), r;
        r = red == KC_RED_ADD ? a + bd : red == KC_RED_MUL ? a * bd
            : red == KC_RED_MAX ? (a > bd ? a : bd) : (a < bd ? a : bd);
        sh_st_d(v.b, dt, 0, r);
    } else {
        long long a = sh_ld_i64(v.b, dt, 0), r;
        r = red == KC_RED_ADD   ? (long long)((unsigned long long)a + (unsigned long long)bi)
            : red == KC_RED_MUL ? (long long)((unsigned long long)a * (unsigned long long)bi)
            : red == KC_RED_MAX ? (a > bi ? a : bi)
                                : (a < bi ? a : bi);
        sh_st_i64(v.b, dt, 0, r);
    }
    return v.u;
}

/* y[at] = y[at] (red) u[ue], atomically (compare-and-swap on the aligned
 * 4- or 8-byte word that holds the element). */
__device__ void scatter_apply(void *y, int64_t at, const void *u, int64_t ue, kiln_dtype dt,
                              size_t es, int red) {
    if (red == KC_RED_NONE) {
        sh_copy(y, at, u, ue, es);
        return;
    }
    const double bd = sh_ld_d(u, dt, ue);
    const long long bi = sh_ld_i64(u, dt, ue);
    if (es == 8) {
        unsigned long long *w = (unsigned long long *)y + at, old = *(volatile unsigned long long *)w,
                           assumed;
        do {
            assumed = old;
            old = atomicCAS(w, assumed, (unsigned long long)red_bits(assumed, dt, red, bd, bi));
        } while (old != assumed);
        return;
    }
    /* 1, 2 and 4 bytes: the 32-bit word around the element */
    uintptr_t addr = (uintptr_t)((unsigned char *)y + at * (int64_t)es);
    unsigned *w = (unsigned *)(addr & ~(uintptr_t)3);
    const unsigned shift = (unsigned)(addr & 3) * 8u;
    const unsigned mask = es == 4 ? 0xffffffffu : es == 2 ? 0xffffu : 0xffu;
    unsigned old = *(volatile unsigned *)w, assumed;
    do {
        assumed = old;
        unsigned el = (assumed >> shift) & mask;
        unsigned nv = (unsigned)red_bits(el, dt, red, bd, bi) & mask;
        old = atomicCAS(w, assumed, (assumed & ~(mask << shift)) | (nv << shift));
    } while (old != assumed);
}

__global__ void scatter_nd_kernel(void *y, const int64_t *ix, const void *u, kiln_dtype dt,
                                  size_t es, int red, const kc_nd p) {
    SH_LOOP(e, p.tuples * p.slice) {
        const int64_t t = e / p.slice, s = e % p.slice, off = nd_offset(ix, p, t);
        if (off >= 0)
            scatter_apply(y, off + s, u, e, dt, es, red);
    }
}

extern "C" cudaError_t kc_scatter_nd(void *y, const int64_t *ix, const void *u, kiln_dtype dt,
                                     int red, const kc_nd *p, cudaStream_t stream) {
    size_t es = kiln_dtype_size(dt);
    if (!p || p->tuples * p->slice <= 0)
        return cudaSuccess;
    if (!y || !ix || !u || p->k < 0 || p->k > KC_MAX_DIMS ||
        !(es == 1 || es == 2 || es == 4 || es == 8))
        return cudaErrorInvalidValue;
    scatter_nd_kernel<<<kc_blocks(p->tuples * p->slice, KC_THREADS), KC_THREADS, 0, stream>>>(
        y, ix, u, dt, es, red, *p);
    return cudaGetLastError();
}

__global__ void scatter_el_kernel(void *y, const void *ix, kiln_dtype idt, const void *u,
                                  kiln_dtype dt, size_t es, int red, const kc_scatter_el p) {
    SH_LOOP(e, p.total) {
        long long v = idt == KILN_DTYPE_INT32 ? ((const int *)ix)[e] : ((const long long *)ix)[e];
        if (v < 0)
            v += p.axis_len;
        if (v < 0 || v >= p.axis_len)
            continue;
        int64_t rem = e, off = 0;
        for (int d = p.rank - 1; d >= 0; d--) {
            int64_t c = rem % p.idx_dims[d];
            rem /= p.idx_dims[d];
            off += (d == p.axis ? (int64_t)v : c) * p.y_strides[d];
        }
        scatter_apply(y, off, u, e, dt, es, red);
    }
}

extern "C" cudaError_t kc_scatter_elements(void *y, const void *ix, kiln_dtype idt, const void *u,
                                           kiln_dtype dt, int red, const kc_scatter_el *p,
                                           cudaStream_t stream) {
    size_t es = kiln_dtype_size(dt);
    if (!p || p->total <= 0)
        return cudaSuccess;
    if (!y || !ix || !u || p->rank < 1 || p->rank > KC_MAX_DIMS ||
        !(es == 1 || es == 2 || es == 4 || es == 8))
        return cudaErrorInvalidValue;
    scatter_el_kernel<<<kc_blocks(p->total, KC_THREADS), KC_THREADS, 0, stream>>>(y, ix, idt, u, dt,
                                                                                 es, red, *p);
    return cudaGetLastError();
}

/* ---------------- ReverseSequence ---------------- */

__global__ void reverse_seq_kernel(const void *x, void *y, size_t es, const void *lens,
                                   kiln_dtype ldt, int64_t T, int64_t B, int64_t inner, int ba) {
    SH_LOOP(e, T * B * inner) {
        const int64_t i = e % inner, row = e / inner;
        const int64_t t = ba == 1 ? row / B : row % T, b = ba == 1 ? row % B : row / T;
        long long len = sh_ld_i64(lens, ldt, b);
        len = len < 0 ? 0 : len > T ? T : len;
        const int64_t s = t < len ? len - 1 - t : t;
        sh_copy(y, e, x, (ba == 1 ? s * B + b : b * T + s) * inner + i, es);
    }
}

extern "C" cudaError_t kc_reverse_sequence(const void *x, void *y, size_t es, const void *lens,
                                           kiln_dtype ldt, int64_t T, int64_t B, int64_t inner,
                                           int batch_axis, cudaStream_t stream) {
    int64_t total = T * B * inner;
    if (total <= 0)
        return cudaSuccess;
    if (!x || !y || !lens || !(es == 1 || es == 2 || es == 4 || es == 8))
        return cudaErrorInvalidValue;
    reverse_seq_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(
        x, y, es, lens, ldt, T, B, inner, batch_axis);
    return cudaGetLastError();
}

/* ---------------- TopK ---------------- */

#define TOPK_SMEM_N 2048

/* An unsigned key whose ascending order is the output order: values by
 * size (descending when largest), NaN above every number, -0 equal to 0. */
__device__ __forceinline__ unsigned long long topk_key(double v, int largest) {
    unsigned long long u;
    if (v != v) {
        u = ~0ull;
    } else {
        if (v == 0)
            v = 0.0;
        u = (unsigned long long)__double_as_longlong(v);
        u = (u >> 63) ? ~u : (u | 0x8000000000000000ull);
    }
    return largest ? ~u : u;
}

/* One block per slice: (key, index) pairs sorted in shared memory. */
__global__ void topk_small_kernel(const void *x, kiln_dtype dt, size_t es, void *vals,
                                  int64_t *idx, int64_t outer, int n, int64_t inner, int64_t k,
                                  int largest, int P) {
    __shared__ unsigned long long key[TOPK_SMEM_N];
    __shared__ int id[TOPK_SMEM_N];
    for (int64_t s = blockIdx.x; s < outer * inner; s += gridDim.x) {
        const int64_t o = s / inner, i = s % inner, base = o * n * inner + i;
        __syncthreads(); /* the previous slice is written out */
        for (int j = threadIdx.x; j < P; j += blockDim.x) {
            key[j] = j < n ? topk_key(sh_ld_d(x, dt, base + (int64_t)j * inner), largest) : ~0ull;
            id[j] = j < n ? j : INT_MAX;
        }
        for (int size = 2; size <= P; size <<= 1)
            for (int stride = size >> 1; stride > 0; stride >>= 1) {
                __syncthreads();
                for (int t = threadIdx.x; t < P / 2; t += blockDim.x) {
                    const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                    const bool up = (lo & size) == 0;
                    const bool hi_first = key[hi] < key[lo] || (key[hi] == key[lo] && id[hi] < id[lo]);
                    if (hi_first == up) {
                        unsigned long long tk = key[lo];
                        key[lo] = key[hi];
                        key[hi] = tk;
                        int ti = id[lo];
                        id[lo] = id[hi];
                        id[hi] = ti;
                    }
                }
            }
        __syncthreads();
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            const int64_t at = (o * k + j) * inner + i;
            if (vals)
                sh_copy(vals, at, x, base + (int64_t)id[j] * inner, es);
            if (idx)
                idx[at] = id[j];
        }
    }
}

/* The long-slice path: keys and indices laid out slice by slice for CUB. */
__global__ void topk_keys_kernel(const void *x, kiln_dtype dt, unsigned long long *keys, int *ids,
                                 int64_t outer, int64_t n, int64_t inner, int largest) {
    SH_LOOP(e, outer * n * inner) {
        const int64_t s = e / n, j = e % n, o = s / inner, i = s % inner;
        keys[e] = topk_key(sh_ld_d(x, dt, (o * n + j) * inner + i), largest);
        ids[e] = (int)j;
    }
}

__global__ void topk_offsets_kernel(int *offs, int64_t slices, int64_t n) {
    SH_LOOP(s, slices + 1)
        offs[s] = (int)(s * n);
}

__global__ void topk_out_kernel(const void *x, size_t es, const int *ids, void *vals, int64_t *idx,
                                int64_t outer, int64_t n, int64_t inner, int64_t k) {
    SH_LOOP(e, outer * k * inner) {
        const int64_t i = e % inner, j = e / inner % k, o = e / inner / k;
        const int id = ids[(o * inner + i) * n + j];
        if (vals)
            sh_copy(vals, e, x, (o * n + id) * inner + i, es);
        if (idx)
            idx[e] = id;
    }
}

static size_t al256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Workspace of the long path: keys in/out, ids in/out, offsets, then CUB's
 * own (whatever the workspace holds beyond the rest, so run() never asks
 * CUB for its size again). */
static size_t topk_fixed(int64_t slices, int64_t n) {
    const size_t N = (size_t)(slices * n);
    return 2 * al256(N * 8) + 2 * al256(N * 4) + al256((size_t)(slices + 1) * 4);
}

extern "C" cudaError_t kc_topk_workspace(int64_t outer, int64_t n, int64_t inner, size_t *bytes) {
    *bytes = 0;
    const int64_t slices = outer * inner;
    if (n <= TOPK_SMEM_N || slices <= 0)
        return cudaSuccess;
    if (slices * n > INT_MAX)
        return cudaErrorInvalidValue; /* CUB's segmented sort counts items in int */
    size_t cub_bytes = 0;
    cudaError_t e = cub::DeviceSegmentedRadixSort::SortPairs(
        NULL, cub_bytes, (const unsigned long long *)NULL, (unsigned long long *)NULL,
        (const int *)NULL, (int *)NULL, (int)(slices * n), (int)slices, (const int *)NULL,
        (const int *)NULL, 0, 64, (cudaStream_t)0);
    *bytes = topk_fixed(slices, n) + al256(cub_bytes);
    return e;
}

extern "C" cudaError_t kc_topk(const void *x, kiln_dtype dt, void *vals, int64_t *idx,
                               int64_t outer, int64_t n, int64_t inner, int64_t k, int largest,
                               void *ws, size_t wsz, cudaStream_t stream) {
    const int64_t slices = outer * inner;
    if (slices <= 0 || k <= 0)
        return cudaSuccess;
    if (!x || k > n)
        return cudaErrorInvalidValue;
    if (n <= TOPK_SMEM_N) {
        int P = 1;
        while (P < n)
            P <<= 1;
        unsigned blocks = slices < 65535 ? (unsigned)slices : 65535u;
        topk_small_kernel<<<blocks, KC_THREADS, 0, stream>>>(x, dt, kiln_dtype_size(dt), vals, idx,
                                                             outer, (int)n, inner, k, largest, P);
        return cudaGetLastError();
    }
    if (slices * n > INT_MAX)
        return cudaErrorInvalidValue;
    const size_t fixed = topk_fixed(slices, n);
    if (!ws || wsz <= fixed)
        return cudaErrorInvalidValue;
    size_t cub_bytes = wsz - fixed;
    cudaError_t e;
    const int64_t N = slices * n;
    unsigned char *at = (unsigned char *)ws;
    unsigned long long *keys_in = (unsigned long long *)at;
    at += al256((size_t)N * 8);
    unsigned long long *keys_out = (unsigned long long *)at;
    at += al256((size_t)N * 8);
    int *ids_in = (int *)at;
    at += al256((size_t)N * 4);
    int *ids_out = (int *)at;
    at += al256((size_t)N * 4);
    int *offs = (int *)at;
    at += al256((size_t)(slices + 1) * 4);
    topk_keys_kernel<<<kc_blocks(N, KC_THREADS), KC_THREADS, 0, stream>>>(x, dt, keys_in, ids_in,
                                                                          outer, n, inner, largest);
    topk_offsets_kernel<<<kc_blocks(slices + 1, KC_THREADS), KC_THREADS, 0, stream>>>(offs, slices, n);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    /* radix sort is stable: equal keys keep index order, as the CPU's */
    e = cub::DeviceSegmentedRadixSort::SortPairs(at, cub_bytes, keys_in, keys_out, ids_in, ids_out,
                                                 (int)N, (int)slices, offs, offs + 1, 0, 64, stream);
    if (e != cudaSuccess)
        return e;
    topk_out_kernel<<<kc_blocks(slices * k, KC_THREADS), KC_THREADS, 0, stream>>>(
        x, kiln_dtype_size(dt), ids_out, vals, idx, outer, n, inner, k);
    return cudaGetLastError();
}

/* ---------------- NonMaxSuppression ----------------
 * A (batch, class) slice's scores are sorted by the TopK kernel (NaN first,
 * then falling, ties by box index), so its candidates are the sorted
 * positions [lo, lo + m): lo NaNs skipped under a score threshold, m scores
 * above it (every box without one). Their boxes are gathered in that order.
 *
 * For the first mm = min(m, nms_mask_cap(max_output_boxes_per_class))
 * candidates (4096 to 16384) a bit matrix records
 * which one suppresses which: row i, word w, bit j (1ull << j) is set when
 * candidate 64 w + j, later than i, overlaps i by more than the threshold,
 * tested as the CPU tests it, kn_nms_suppress(later, earlier). A row has
 * ceil(mm / 64) words, and only its words w >= i / 64 are written or read.
 * One block a slice then walks the candidates 64 at a time, keeping one when
 * no kept candidate has marked it and OR-ing the kept ones' rows into a
 * "removed" set, until max_output_boxes_per_class are kept. Candidates past
 * mm, and slices whose matrix finds no room (or all of them under
 * KILN_CUDA_GENERIC=1), are tested one at a time against the boxes kept so
 * far, as the CPU does.
 *
 * Memory bound: the matrices of all slices share one region of at most
 * NMS_MASK_BUDGET bytes (64 MiB), placed first-fit in slice order by their
 * actual candidate counts; one slice needs at most 16384 x 256 words
 * (32 MiB), so the region always holds the largest matrix on its own. */

#define NMS_MASK_MAX_N 16384
#define NMS_MASK_MIN_N 4096
#define NMS_MASK_MAX_WORDS (NMS_MASK_MAX_N / 64)

/* How many candidates a slice's matrix covers: enough for 64 candidates a
 * box to keep (at least NMS_MASK_MIN_N, at most NMS_MASK_MAX_N), so a small
 * max_output_boxes_per_class does not pay for a quadratic matrix it would
 * leave mostly unread; the serial walk goes on past it if needed. */
__host__ __device__ __forceinline__ int nms_mask_cap(long long max_out) {
    return max_out >= NMS_MASK_MAX_N / 64 ? NMS_MASK_MAX_N
           : max_out * 64 > NMS_MASK_MIN_N ? (int)(max_out * 64)
                                           : NMS_MASK_MIN_N;
}
#define NMS_MASK_BUDGET ((int64_t)64 << 20)
#define NMS_RANGE_THREADS 256
#define NMS_SELECT_THREADS 256
static_assert(NMS_SELECT_THREADS >= 64 && NMS_SELECT_THREADS % 32 == 0,
              "the walk's block settles 64 candidates a step, a thread each, in whole warps");

/* 64-bit words of the matrices' region: every slice's largest matrix when
 * they all fit in the budget, the budget otherwise. */
static int64_t nms_mask_words(int64_t slices, int64_t n) {
    const int64_t m = n < NMS_MASK_MAX_N ? n : NMS_MASK_MAX_N, per = m * ((m + 63) / 64);
    const int64_t cap = NMS_MASK_BUDGET / 8;
    if (slices <= 0 || per <= 0)
        return 0;
    return slices > cap / per ? cap : slices * per;
}

/* The most 64 x 64 tiles the matrices can have (the mask kernel's grid). */
static int64_t nms_mask_tiles(int64_t slices, int64_t n) {
    const int64_t m = n < NMS_MASK_MAX_N ? n : NMS_MASK_MAX_N, mb = (m + 63) / 64;
    return slices * (mb * (mb + 1) / 2);
}

/* Workspace: the sorted scores and their box indices ([B * C, N]), the
 * candidates' boxes in score order, the kept box indices, the counts and row
 * offsets of each (batch, class), the device's total, each slice's
 * candidate range, matrix offset and first tile (one more: the total), the
 * matrices, then TopK's own. */
static size_t nms_fixed(int64_t slices, int64_t n) {
    const size_t N = (size_t)(slices * n), S = (size_t)slices;
    return al256(N * 4) + al256(N * 8) + al256(N * 16) + al256(N * 4) + 2 * al256(S * 8) + al256(8) +
           2 * al256(S * 8) + al256((S + 1) * 8) + al256((size_t)nms_mask_words(slices, n) * 8);
}

extern "C" cudaError_t kc_nms_workspace(int64_t b, int64_t c, int64_t n, size_t *bytes) {
    size_t topk = 0;
    cudaError_t e = kc_topk_workspace(b * c, n, 1, &topk);
    *bytes = nms_fixed(b * c, n) + al256(topk);
    return e;
}

/* One block a slice: where its candidates lie among the sorted scores, and
 * their boxes in that order. */
__global__ void nms_range_kernel(const float *boxes, const float *vals, const int64_t *idx,
                                 const kc_nms_params p, int2 *range, float4 *sbox) {
    __shared__ int nan_n, above_n;
    const int64_t s = blockIdx.x, b = s / p.c, base = s * p.n;
    int lo = 0, m = (int)p.n;
    if (p.has_score) {
        if (threadIdx.x == 0)
            nan_n = above_n = 0;
        __syncthreads();
        int nn = 0, na = 0;
        for (int64_t k = threadIdx.x; k < p.n; k += blockDim.x) {
            const float v = vals[base + k];
            nn += v != v;
            na += v > p.score;
        }
        if (nn)
            atomicAdd(&nan_n, nn);
        if (na)
            atomicAdd(&above_n, na);
        __syncthreads();
        lo = nan_n;
        m = above_n;
    }
    for (int k = threadIdx.x; k < m; k += blockDim.x) {
        const float *bx = boxes + (b * p.n + idx[base + lo + k]) * 4;
        sbox[base + k] = make_float4(bx[0], bx[1], bx[2], bx[3]);
    }
    if (threadIdx.x == 0)
        range[s] = make_int2(lo, m);
}

/* One thread: each slice's matrix placed first-fit in the region of `words`
 * (moff -1: none), and its first tile in the mask kernel's numbering. */
__global__ void nms_plan_kernel(const int2 *range, int64_t slices, long long words, int cap, long long *moff,
                                long long *toff) {
    long long used = 0, tiles = 0;
    for (int64_t s = 0; s < slices; s++) {
        const long long m = range[s].y < cap ? range[s].y : cap, mb = (m + 63) / 64;
        moff[s] = -1;
        toff[s] = tiles;
        if (m > 0 && m * mb <= words - used) {
            moff[s] = used;
            used += m * mb;
            tiles += mb * (mb + 1) / 2;
        }
    }
    toff[slices] = tiles;
}

/* The matrices, one 64 x 64 tile a step: rows 64 r .., columns 64 c ..
 * with c >= r, numbered u = c (c + 1) / 2 + r within a slice; each thread
 * writes one row's word. The blocks stride over the tiles of every slice,
 * so a slice with many candidates spreads over the whole device. */
__global__ void __launch_bounds__(64) nms_mask_kernel(const float4 *sbox, const int2 *range,
                                                      const long long *moff, const long long *toff,
                                                      int64_t slices, int64_t n, int cap, int center,
                                                      float iou, unsigned long long *mask) {
    __shared__ float4 col[64];
    const int tid = threadIdx.x;
    const long long total = toff[slices];
    for (long long t = blockIdx.x; t < total; t += gridDim.x) {
        int64_t s = 0, hi = slices - 1; /* the last slice whose first tile is at or before t */
        while (s < hi) {
            const int64_t mid = (s + hi + 1) / 2;
            if (toff[mid] <= t)
                s = mid;
            else
                hi = mid - 1;
        }
        const int u = (int)(t - toff[s]);
        int c = (int)((sqrtf(8.f * (float)u + 1.f) - 1.f) * 0.5f);
        while (c > 0 && c * (c + 1) / 2 > u)
            c--;
        while ((c + 1) * (c + 2) / 2 <= u)
            c++;
        const int r = u - c * (c + 1) / 2;
        const int m = range[s].y < cap ? range[s].y : cap, mb = (m + 63) / 64;
        const int jn = min(64, m - c * 64), i = r * 64 + tid;
        const float4 *sb = sbox + s * n;
        __syncthreads(); /* the previous tile's columns are read */
        if (tid < jn)
            col[tid] = sb[c * 64 + tid];
        __syncthreads();
        if (i < m) {
            const float4 q = sb[i];
            const float earlier[4] = {q.x, q.y, q.z, q.w};
            unsigned long long word = 0;
            for (int j = r == c ? tid + 1 : 0; j < jn; j++) {
                const float4 o = col[j];
                const float later[4] = {o.x, o.y, o.z, o.w};
                if (kn_nms_suppress(later, earlier, center, iou))
                    word |= 1ull << j;
            }
            mask[moff[s] + (long long)i * mb + c] = word;
        }
    }
}

/* A slice's first mm candidates through its matrix, 64 at a time: thread 0
 * settles the 64 in order from their words of their own block (one is kept
 * unless removed; a kept one removes what its word marks), then the block
 * ORs the kept ones' later words into `removed` while the next block's own
 * words are loaded. Returns how many are kept (written to kept[]). */
__device__ long long nms_walk_mask(const unsigned long long *mask, int mm, const int64_t *cidx, int *kept,
                                   long long max_out) {
    __shared__ unsigned long long removed[NMS_MASK_MAX_WORDS];
    __shared__ unsigned long long diag[2][64];
    __shared__ int list[64];
    __shared__ int n_list;
    const int tid = threadIdx.x, mb = (mm + 63) / 64;
    for (int w = tid; w < mb; w += blockDim.x)
        removed[w] = 0;
    if (tid < 64)
        diag[0][tid] = tid < mm ? mask[(size_t)tid * mb] : 0;
    __syncthreads();
    long long cnt = 0;
    for (int cw = 0; cw < mb && cnt < max_out; cw++) {
        const unsigned long long *rows = mask + (size_t)cw * 64 * mb;
        if (tid == 0) {
            const int in_block = min(64, mm - cw * 64);
            const unsigned long long *d = diag[cw & 1];
            unsigned long long avail = (in_block == 64 ? ~0ull : (1ull << in_block) - 1) & ~removed[cw];
            int k = 0;
            while (avail && cnt + k < max_out) {
                const int t = __ffsll((long long)avail) - 1;
                list[k++] = t;
                avail &= ~(d[t] | (1ull << t));
            }
            n_list = k;
        }
        __syncthreads();
        const int k = n_list;
        if (tid < k)
            kept[cnt + tid] = (int)cidx[cw * 64 + list[tid]];
        if (cnt + k < max_out && cw + 1 < mb) {
            const int lane = tid & 31, group = tid >> 5, groups = (int)(blockDim.x >> 5);
            for (int w = cw + 1 + lane; w < mb; w += 32) {
                unsigned long long acc = 0;
                for (int q = group; q < k; q += groups)
                    acc |= rows[(size_t)list[q] * mb + w];
                if (acc)
                    atomicOr(&removed[w], acc);
            }
            if (tid < 64) {
                const int i = (cw + 1) * 64 + tid;
                diag[(cw + 1) & 1][tid] = i < mm ? mask[(size_t)i * mb + cw + 1] : 0;
            }
        }
        cnt += k;
        __syncthreads();
    }
    return cnt;
}

/* Candidates k0 .. m - 1 one at a time, each tested by the block against
 * every box kept so far (read through the kept box indices); thread 0
 * appends the ones kept. */
__device__ long long nms_walk_serial(const float *bb, const float4 *sb, const int64_t *cidx, int k0, int m,
                                     int *kept, long long kept0, const kc_nms_params p) {
    __shared__ long long cnt;
    if (threadIdx.x == 0)
        cnt = kept0;
    __syncthreads();
    for (int k = k0; k < m; k++) {
        const long long c = cnt;
        if (c >= p.max_out)
            break;
        const float4 q = sb[k];
        const float cand[4] = {q.x, q.y, q.z, q.w};
        int hit = 0;
        for (long long j = threadIdx.x; j < c && !hit; j += blockDim.x)
            hit = kn_nms_suppress(cand, bb + (int64_t)kept[j] * 4, p.center, p.iou);
        hit = __syncthreads_or(hit);
        if (!hit && threadIdx.x == 0) {
            kept[c] = (int)cidx[k];
            cnt = c + 1;
        }
        __syncthreads();
    }
    return cnt;
}

/* One block a slice: the matrix walk where the slice has a matrix, then the
 * serial walk over what it leaves. */
__global__ void nms_select_kernel(const float *boxes, const float4 *sbox, const int64_t *idx, const int2 *range,
                                  const long long *moff, const unsigned long long *mask, const kc_nms_params p,
                                  int *kept_idx, long long *counts) {
    const int64_t s = blockIdx.x, base = s * p.n;
    const int2 r = range[s];
    const int64_t *cidx = idx + base + r.x;
    int *kept = kept_idx + base;
    long long cnt = 0;
    int k0 = 0;
    if (moff[s] >= 0) {
        const int cap = nms_mask_cap(p.max_out);
        k0 = r.y < cap ? r.y : cap;
        cnt = nms_walk_mask(mask + moff[s], k0, cidx, kept, p.max_out);
    }
    if (k0 < r.y && cnt < p.max_out)
        cnt = nms_walk_serial(boxes + s / p.c * p.n * 4, sbox + base, cidx, k0, r.y, kept, cnt, p);
    if (threadIdx.x == 0)
        counts[s] = cnt;
}

/* Row offsets of each (batch, class) and the total: one thread (B x C is
 * small next to the selection). */
__global__ void nms_offsets_kernel(const long long *counts, long long *offs, int64_t slices,
                                   long long *total) {
    long long t = 0;
    for (int64_t s = 0; s < slices; s++) {
        offs[s] = t;
        t += counts[s];
    }
    *total = t;
}

__global__ void nms_rows_kernel(const int *kept_idx, const long long *counts, const long long *offs,
                                int64_t c, int64_t n, int64_t *y) {
    const int64_t s = blockIdx.x;
    for (long long j = threadIdx.x; j < counts[s]; j += blockDim.x) {
        int64_t *row = y + (offs[s] + j) * 3;
        row[0] = s / c;
        row[1] = s % c;
        row[2] = kept_idx[s * n + j];
    }
}

extern "C" cudaError_t kc_nms(const float *boxes, const float *scores, const kc_nms_params *p, int64_t *y,
                              void *ws, size_t wsz, int64_t *count, cudaStream_t stream) {
    if (!p || !count)
        return cudaErrorInvalidValue;
    const int64_t slices = p->b * p->c, N = slices * p->n;
    if (slices <= 0 || p->n <= 0 || p->max_out <= 0) {
        *count = 0;
        return cudaSuccess;
    }
    if (!boxes || !scores || !y || p->n > INT_MAX)
        return cudaErrorInvalidValue;
    const size_t fixed = nms_fixed(slices, p->n);
    if (!ws || wsz < fixed)
        return cudaErrorInvalidValue;
    const int64_t words = kc_fast_paths() ? nms_mask_words(slices, p->n) : 0;
    unsigned char *at = (unsigned char *)ws;
    float *vals = (float *)at;
    at += al256((size_t)N * 4);
    int64_t *idx = (int64_t *)at;
    at += al256((size_t)N * 8);
    float4 *sbox = (float4 *)at;
    at += al256((size_t)N * 16);
    int *kept_idx = (int *)at;
    at += al256((size_t)N * 4);
    long long *counts = (long long *)at;
    at += al256((size_t)slices * 8);
    long long *offs = (long long *)at;
    at += al256((size_t)slices * 8);
    long long *total = (long long *)at;
    at += al256(8);
    int2 *range = (int2 *)at;
    at += al256((size_t)slices * 8);
    long long *moff = (long long *)at;
    at += al256((size_t)slices * 8);
    long long *toff = (long long *)at;
    at += al256((size_t)(slices + 1) * 8);
    unsigned long long *mask = (unsigned long long *)at;
    at += al256((size_t)nms_mask_words(slices, p->n) * 8);
    cudaError_t e = kc_topk(scores, KILN_DTYPE_FLOAT, vals, idx, slices, p->n, 1, p->n, 1, at,
                            wsz - fixed, stream);
    if (e != cudaSuccess)
        return e;
    nms_range_kernel<<<(unsigned)slices, NMS_RANGE_THREADS, 0, stream>>>(boxes, vals, idx, *p, range, sbox);
    const int cap = nms_mask_cap(p->max_out);
    nms_plan_kernel<<<1, 1, 0, stream>>>(range, slices, words, cap, moff, toff);
    if (words > 0)
        nms_mask_kernel<<<kc_blocks(nms_mask_tiles(slices, p->n) * 64, 64), 64, 0, stream>>>(
            sbox, range, moff, toff, slices, p->n, cap, p->center, p->iou, mask);
    nms_select_kernel<<<(unsigned)slices, NMS_SELECT_THREADS, 0, stream>>>(boxes, sbox, idx, range, moff, mask,
                                                                          *p, kept_idx, counts);
    nms_offsets_kernel<<<1, 1, 0, stream>>>(counts, offs, slices, total);
    nms_rows_kernel<<<(unsigned)slices, 128, 0, stream>>>(kept_idx, counts, offs, p->c, p->n, y);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    return cudaMemcpyAsync(count, total, sizeof(int64_t), cudaMemcpyDeviceToHost, stream);
}

/* ---------------- Hardmax ---------------- */

/* One warp per [outer, inner] unit. */
__global__ void hardmax_kernel(const void *x, void *y, kiln_dtype dt, int64_t outer, int64_t n,
                               int64_t inner) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t u = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; u < outer * inner;
         u += warps) {
        const int64_t o = u / inner, i = u % inner, base = o * n * inner + i;
        double best = 0;
        long long bi = -1;
        for (int64_t j = lane; j < n; j += 32) {
            double v = sh_ld_d(x, dt, base + j * inner);
            if (v == v && (bi < 0 || v > best)) {
                best = v;
                bi = j;
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
            double ob = __shfl_xor_sync(0xffffffffu, best, off);
            long long oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (oi >= 0 && (bi < 0 || ob > best || (ob == best && oi < bi))) {
                best = ob;
                bi = oi;
            }
        }
        /* the reference starts from the first element: a NaN there wins */
        double v0 = sh_ld_d(x, dt, base);
        if (v0 != v0 || bi < 0)
            bi = 0;
        for (int64_t j = lane; j < n; j += 32)
            sh_st_d(y, dt, base + j * inner, j == bi ? 1.0 : 0.0);
    }
}

extern "C" cudaError_t kc_hardmax(const void *x, void *y, kiln_dtype dt, int64_t outer, int64_t n,
                                  int64_t inner, cudaStream_t stream) {
    const int64_t units = outer * inner;
    if (units <= 0 || n <= 0)
        return cudaSuccess;
    if (!x || !y)
        return cudaErrorInvalidValue;
    hardmax_kernel<<<kc_blocks(units * 32, KC_THREADS), KC_THREADS, 0, stream>>>(x, y, dt, outer, n,
                                                                                inner);
    return cudaGetLastError();
}

/* ---------------- MaxUnpool ---------------- */

__global__ void max_unpool_kernel(const void *x, const void *idx, kiln_dtype idt, void *y,
                                  size_t es, const kc_unpool p) {
    SH_LOOP(i, p.n) {
        const long long k = idt == KILN_DTYPE_INT32 ? ((const int *)idx)[i] : ((const long long *)idx)[i];
        if (k < 0)
            continue;
        int64_t plane = k / p.orig_plane, rest = k % p.orig_plane, off = 0, mul = 1;
        bool inside = true;
        for (int d = p.nsp - 1; d >= 0; d--) {
            const int64_t c = rest % p.orig[d];
            rest /= p.orig[d];
            if (c >= p.out_sp[d])
                inside = false;
            off += c * mul;
            mul *= p.out_sp[d];
        }
        off += plane * p.out_plane;
        if (inside && off < p.total)
            sh_copy(y, off, x, i, es);
    }
}

extern "C" cudaError_t kc_max_unpool(const void *x, const void *idx, kiln_dtype idt, void *y,
                                     size_t es, const kc_unpool *p, cudaStream_t stream) {
    if (!p || p->total <= 0)
        return cudaSuccess;
    if (!y || !(es == 1 || es == 2 || es == 4 || es == 8) || p->nsp < 1 || p->nsp > KC_MAX_DIMS ||
        p->orig_plane <= 0)
        return cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(y, 0, (size_t)p->total * es, stream);
    if (e != cudaSuccess || p->n <= 0)
        return e;
    if (!x || !idx)
        return cudaErrorInvalidValue;
    max_unpool_kernel<<<kc_blocks(p->n, KC_THREADS), KC_THREADS, 0, stream>>>(x, idx, idt, y, es, *p);
    return cudaGetLastError();
}

/* ---------------- NonZero, Compress ---------------- */

__device__ __forceinline__ bool sh_nonzero(const void *p, int64_t i, kc_zero_test zt) {
    switch (zt.es) {
    case 1: return (((const unsigned char *)p)[i] & (zt.real ? 0x7fu : 0xffu)) != 0;
    case 2: return (((const unsigned short *)p)[i] & (zt.real ? 0x7fffu : 0xffffu)) != 0;
    case 4: return (((const unsigned *)p)[i] & (zt.real ? 0x7fffffffu : 0xffffffffu)) != 0;
    default:
        return (((const unsigned long long *)p)[i] &
                (zt.real ? 0x7fffffffffffffffull : ~0ull)) != 0;
    }
}

__global__ void flags_kernel(const void *x, kc_zero_test zt, int64_t n, long long *flags) {
    SH_LOOP(i, n)
        flags[i] = sh_nonzero(x, i, zt) ? 1 : 0;
}

/* count = pos[n - 1] + flags[n - 1]: the number of nonzeros. */
__global__ void count_kernel(const long long *flags, const long long *pos, int64_t n,
                             long long *count) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *count = pos[n - 1] + flags[n - 1];
}

typedef struct nz_dims {
    int rank;
    int64_t dims[KC_MAX_DIMS];
} nz_dims;

__global__ void nonzero_kernel(const long long *flags, const long long *pos,
                               const long long *count, int64_t n, nz_dims d, int64_t *y) {
    const long long nnz = *count;
    SH_LOOP(i, n) {
        if (!flags[i])
            continue;
        const long long k = pos[i];
        int64_t rem = i;
        for (int a = d.rank - 1; a >= 0; a--) {
            y[a * nnz + k] = rem % d.dims[a];
            rem /= d.dims[a];
        }
        if (d.rank == 0)
            y[k] = 0;
    }
}

/* Workspace of a compaction over n items: flags, positions, the count,
 * then CUB's own (the rest of the workspace, as for TopK). */
static size_t compact_fixed(int64_t n) { return 2 * al256((size_t)n * 8) + 256; }

static cudaError_t compact_layout(int64_t n, size_t *total) {
    size_t cub_bytes = 0;
    cudaError_t e = cub::DeviceScan::ExclusiveSum(NULL, cub_bytes, (const long long *)NULL,
                                                  (long long *)NULL, n, (cudaStream_t)0);
    *total = compact_fixed(n) + al256(cub_bytes);
    return e;
}

/* Flags and their exclusive sum in the workspace; the count in *dcount
 * (device) and, after a copy, in *count (host). */
static cudaError_t compact(const void *x, kc_zero_test zt, int64_t n, void *ws, size_t wsz,
                           long long **flags, long long **pos, long long **dcount, int64_t *count,
                           cudaStream_t stream) {
    const size_t fixed = compact_fixed(n);
    if (!ws || wsz <= fixed)
        return cudaErrorInvalidValue;
    size_t cub_bytes = wsz - fixed;
    cudaError_t e;
    unsigned char *at = (unsigned char *)ws;
    *flags = (long long *)at;
    at += al256((size_t)n * 8);
    *pos = (long long *)at;
    at += al256((size_t)n * 8);
    *dcount = (long long *)at;
    at += 256;
    flags_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(x, zt, n, *flags);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if ((e = cub::DeviceScan::ExclusiveSum(at, cub_bytes, *flags, *pos, n, stream)) != cudaSuccess)
        return e;
    count_kernel<<<1, 32, 0, stream>>>(*flags, *pos, n, *dcount);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    return cudaMemcpyAsync(count, *dcount, sizeof(int64_t), cudaMemcpyDeviceToHost, stream);
}

extern "C" cudaError_t kc_nonzero_workspace(int64_t n, size_t *bytes) {
    *bytes = 0;
    if (n <= 0)
        return cudaSuccess;
    return compact_layout(n, bytes);
}

extern "C" cudaError_t kc_nonzero(const void *x, kc_zero_test zt, int rank, const int64_t *dims,
                                  int64_t *y, void *ws, size_t wsz, int64_t *count,
                                  cudaStream_t stream) {
    if (!count || rank < 0 || rank > KC_MAX_DIMS || !(zt.es == 1 || zt.es == 2 || zt.es == 4 || zt.es == 8))
        return cudaErrorInvalidValue;
    nz_dims d;
    d.rank = rank;
    int64_t n = 1;
    for (int a = 0; a < rank; a++) {
        d.dims[a] = dims[a];
        n *= dims[a];
    }
    if (n <= 0) {
        *count = 0;
        return cudaSuccess;
    }
    if (!x || !y)
        return cudaErrorInvalidValue;
    long long *flags, *pos, *dcount;
    cudaError_t e = compact(x, zt, n, ws, wsz, &flags, &pos, &dcount, count, stream);
    if (e != cudaSuccess)
        return e;
    nonzero_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(flags, pos, dcount, n, d, y);
    return cudaGetLastError();
}

__global__ void compress_map_kernel(const long long *flags, const long long *pos, int64_t lim,
                                    long long *map) {
    SH_LOOP(j, lim)
        if (flags[j])
            map[pos[j]] = j;
}

__global__ void compress_kernel(const void *x, void *y, size_t es, const long long *map,
                                const long long *count, int64_t outer, int64_t lim, int64_t dim,
                                int64_t inner) {
    const long long sel = *count;
    SH_LOOP(e, outer * lim * inner) {
        const int64_t i = e % inner, w = e / inner % lim, o = e / inner / lim;
        if (w < sel)
            sh_copy(y, (o * sel + w) * inner + i, x, (o * dim + map[w]) * inner + i, es);
    }
}

extern "C" cudaError_t kc_compress_workspace(int64_t lim, size_t *bytes) {
    *bytes = 0;
    if (lim <= 0)
        return cudaSuccess;
    cudaError_t e = compact_layout(lim, bytes);
    *bytes += al256((size_t)lim * 8); /* the map of kept indices */
    return e;
}

extern "C" cudaError_t kc_compress(const void *x, void *y, size_t es, const void *cond,
                                   kc_zero_test zt, int64_t lim, int64_t outer, int64_t dim,
                                   int64_t inner, void *ws, size_t wsz, int64_t *count,
                                   cudaStream_t stream) {
    if (!count || !(es == 1 || es == 2 || es == 4 || es == 8) ||
        !(zt.es == 1 || zt.es == 2 || zt.es == 4 || zt.es == 8))
        return cudaErrorInvalidValue;
    if (lim <= 0) {
        *count = 0;
        return cudaSuccess;
    }
    if (!cond || !ws || wsz < al256((size_t)lim * 8))
        return cudaErrorInvalidValue;
    long long *map = (long long *)ws, *flags, *pos, *dcount;
    const size_t head = al256((size_t)lim * 8);
    cudaError_t e = compact(cond, zt, lim, (unsigned char *)ws + head, wsz - head, &flags, &pos,
                            &dcount, count, stream);
    if (e != cudaSuccess)
        return e;
    compress_map_kernel<<<kc_blocks(lim, KC_THREADS), KC_THREADS, 0, stream>>>(flags, pos, lim, map);
    if (outer * inner > 0) {
        if (!x || !y)
            return cudaErrorInvalidValue;
        compress_kernel<<<kc_blocks(outer * lim * inner, KC_THREADS), KC_THREADS, 0, stream>>>(
            x, y, es, map, dcount, outer, lim, dim, inner);
    }
    return cudaGetLastError();
}

/* ---------------- Unique ---------------- */

/* An unsigned key whose order is the CPU's comparison of two elements. */
__device__ __forceinline__ unsigned long long unique_key(const void *x, kiln_dtype dt, int64_t j) {
    if (sh_is_real(dt))
        return topk_key(sh_ld_d(x, dt, j), 0);
    if (dt == KILN_DTYPE_UINT64)
        return ((const unsigned long long *)x)[j];
    return (unsigned long long)sh_ld_i64(x, dt, j) ^ 0x8000000000000000ull;
}

__global__ void unique_keys_kernel(const void *x, kiln_dtype dt, int64_t n, unsigned long long *keys,
                                   long long *ids) {
    SH_LOOP(j, n) {
        keys[j] = unique_key(x, dt, j);
        ids[j] = j;
    }
}

/* After the sort: head[s] marks the first of each run of equal keys. */
__global__ void unique_heads_kernel(const unsigned long long *keys, int64_t n, long long *head) {
    SH_LOOP(s, n)
        head[s] = s == 0 || keys[s] != keys[s - 1];
}

/* gid[s] (inclusive sum of heads) - 1 is sorted position s's group: the
 * group's start, its first occurrence (the sort is stable), each element's
 * group and whether it is its group's first occurrence. */
__global__ void unique_groups_kernel(const long long *head, const long long *gid,
                                     const long long *ids, int64_t n, long long *gstart,
                                     long long *gfirst, long long *label, long long *isfirst,
                                     long long *nu) {
    SH_LOOP(s, n) {
        const long long g = gid[s] - 1, j = ids[s];
        label[j] = g;
        isfirst[j] = head[s];
        if (head[s]) {
            gstart[g] = s;
            gfirst[g] = j;
        }
        if (s == n - 1)
            *nu = gid[s];
    }
}

/* rank[g]: g itself when sorted, else how many groups occur first before it. */
__global__ void unique_out_kernel(const void *x, size_t es, int64_t n, int sorted,
                                  const long long *gstart, const long long *gfirst,
                                  const long long *fpos, const long long *nu, void *y,
                                  int64_t *first, int64_t *counts) {
    const long long groups = *nu;
    SH_LOOP(g, groups) {
        const long long r = sorted ? g : fpos[gfirst[g]];
        if (y)
            sh_copy(y, r, x, gfirst[g], es);
        if (first)
            first[r] = gfirst[g];
        if (counts)
            counts[r] = (g + 1 < groups ? gstart[g + 1] : n) - gstart[g];
    }
}

__global__ void unique_inverse_kernel(const long long *label, const long long *gfirst,
                                      const long long *fpos, int64_t n, int sorted,
                                      int64_t *inverse) {
    SH_LOOP(j, n)
        inverse[j] = sorted ? label[j] : fpos[gfirst[label[j]]];
}

/* keys in/out, ids in/out, head, gid, gstart, gfirst, label, isfirst, fpos
 * (n each), the group count, then CUB's own. */
static size_t unique_fixed(int64_t n) { return 11 * al256((size_t)n * 8) + 256; }

/* The workspace of both forms (the axis form leaves the keys unused). */
struct unique_ws {
    unsigned long long *keys_in, *keys_out;
    long long *ids_in, *ids_out, *head, *gid, *gstart, *gfirst, *label, *isfirst, *fpos, *nu;
    void *tmp;        /* CUB's temporary storage */
    size_t tmp_bytes;
};

static unique_ws unique_carve(void *ws, size_t wsz, int64_t n) {
    const size_t fixed = unique_fixed(n), step = al256((size_t)n * 8);
    unsigned char *at = (unsigned char *)ws;
    long long *l = (long long *)(void *)at; /* l + k * lstep: the k-th array */
    const size_t lstep = step / sizeof(long long);
    unique_ws w;
    w.keys_in = (unsigned long long *)at;
    w.keys_out = (unsigned long long *)(at + step);
    w.ids_in = l + 2 * lstep, w.ids_out = l + 3 * lstep;
    w.head = l + 4 * lstep, w.gid = l + 5 * lstep;
    w.gstart = l + 6 * lstep, w.gfirst = l + 7 * lstep;
    w.label = l + 8 * lstep, w.isfirst = l + 9 * lstep;
    w.fpos = l + 10 * lstep, w.nu = l + 11 * lstep;
    w.tmp = at + fixed;
    w.tmp_bytes = wsz - fixed;
    return w;
}

/* Workspace bytes: the fixed part and the larger of the sort's (sort_bytes,
 * queried by the caller with status e) and the scans' temporary storage. */
static cudaError_t unique_ws_bytes(int64_t n, size_t sort_bytes, cudaError_t e, size_t *bytes) {
    size_t scan_bytes = 0, scan2 = 0;
    if (e == cudaSuccess)
        e = cub::DeviceScan::InclusiveSum(NULL, scan_bytes, (const long long *)NULL,
                                          (long long *)NULL, n, (cudaStream_t)0);
    if (e == cudaSuccess)
        e = cub::DeviceScan::ExclusiveSum(NULL, scan2, (const long long *)NULL, (long long *)NULL,
                                          n, (cudaStream_t)0);
    if (scan2 > scan_bytes)
        scan_bytes = scan2;
    *bytes = unique_fixed(n) + al256(sort_bytes > scan_bytes ? sort_bytes : scan_bytes);
    return e;
}

/* After the sort (ids in sorted order, head flags set): group ids, each
 * group's start, first occurrence and label, and (unsorted output) the
 * groups' positions in order of first occurrence. */
static cudaError_t unique_groups(const unique_ws &w, const long long *ids, int64_t n, int sorted,
                                 cudaStream_t stream) {
    const unsigned blocks = kc_blocks(n, KC_THREADS);
    size_t tmp_bytes = w.tmp_bytes;
    cudaError_t e;
    if ((e = cub::DeviceScan::InclusiveSum(w.tmp, tmp_bytes, w.head, w.gid, n, stream)) !=
        cudaSuccess)
        return e;
    unique_groups_kernel<<<blocks, KC_THREADS, 0, stream>>>(w.head, w.gid, ids, n, w.gstart,
                                                           w.gfirst, w.label, w.isfirst, w.nu);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    tmp_bytes = w.tmp_bytes;
    if (!sorted &&
        (e = cub::DeviceScan::ExclusiveSum(w.tmp, tmp_bytes, w.isfirst, w.fpos, n, stream)) !=
            cudaSuccess)
        return e;
    return cudaSuccess;
}

/* The inverse indices (when asked for) and the group count into *count. */
static cudaError_t unique_finish(const unique_ws &w, int64_t n, int sorted, int64_t *inverse,
                                 int64_t *count, cudaStream_t stream) {
    if (inverse)
        unique_inverse_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(
            w.label, w.gfirst, w.fpos, n, sorted, inverse);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    return cudaMemcpyAsync(count, w.nu, sizeof(int64_t), cudaMemcpyDeviceToHost, stream);
}

extern "C" cudaError_t kc_unique_workspace(int64_t n, size_t *bytes) {
    *bytes = 0;
    if (n <= 0)
        return cudaSuccess;
    size_t sort_bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(
        NULL, sort_bytes, (const unsigned long long *)NULL, (unsigned long long *)NULL,
        (const long long *)NULL, (long long *)NULL, n, 0, 64, (cudaStream_t)0);
    if (e != cudaSuccess)
        return e;
    return unique_ws_bytes(n, sort_bytes, e, bytes);
}

extern "C" cudaError_t kc_unique(const void *x, kiln_dtype dt, int64_t n, int sorted, void *y,
                                 int64_t *first, int64_t *inverse, int64_t *counts, void *ws,
                                 size_t wsz, int64_t *count, cudaStream_t stream) {
    const size_t es = kiln_dtype_size(dt);
    if (!count || !(es == 1 || es == 2 || es == 4 || es == 8))
        return cudaErrorInvalidValue;
    if (n <= 0) {
        *count = 0;
        return cudaSuccess;
    }
    if (!x || !ws || wsz <= unique_fixed(n))
        return cudaErrorInvalidValue;
    const unique_ws w = unique_carve(ws, wsz, n);
    size_t tmp_bytes = w.tmp_bytes;
    const unsigned blocks = kc_blocks(n, KC_THREADS);
    cudaError_t e;
    unique_keys_kernel<<<blocks, KC_THREADS, 0, stream>>>(x, dt, n, w.keys_in, w.ids_in);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    /* stable: equal keys keep index order, so a group's first is its first occurrence */
    if ((e = cub::DeviceRadixSort::SortPairs(w.tmp, tmp_bytes, w.keys_in, w.keys_out, w.ids_in,
                                             w.ids_out, n, 0, 64, stream)) != cudaSuccess)
        return e;
    unique_heads_kernel<<<blocks, KC_THREADS, 0, stream>>>(w.keys_out, n, w.head);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if ((e = unique_groups(w, w.ids_out, n, sorted, stream)) != cudaSuccess)
        return e;
    unique_out_kernel<<<blocks, KC_THREADS, 0, stream>>>(x, es, n, sorted, w.gstart, w.gfirst,
                                                        w.fpos, w.nu, y, first, counts);
    return unique_finish(w, n, sorted, inverse, count, stream);
}

/* ---------------- Unique along an axis ----------------
 * Items are the slices x[o, j, i] (all o, i) of one j. A stable merge sort
 * of the item ids by their slices in lexicographic order (element keys as
 * unique_key, so values compare as in the flat form) puts each group's
 * first occurrence first; the flat form's group kernels take it from there. */

struct unique_slice_less {
    const void *x;
    kiln_dtype dt;
    int64_t outer, n, inner;
    __device__ __forceinline__ bool operator()(const long long &a, const long long &b) const {
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t base = o * n * inner + i;
                const unsigned long long ka = unique_key(x, dt, base + a * inner);
                const unsigned long long kb = unique_key(x, dt, base + b * inner);
                if (ka != kb)
                    return ka < kb;
            }
        return false;
    }
};

__global__ void unique_axis_ids_kernel(int64_t n, long long *ids) {
    SH_LOOP(j, n)
        ids[j] = j;
}

/* After the sort: head[s] marks the first of each run of equal slices. */
__global__ void unique_axis_heads_kernel(const unique_slice_less less, const long long *ids,
                                         int64_t n, long long *head) {
    SH_LOOP(s, n)
        head[s] = s == 0 || less(ids[s - 1], ids[s]);
}

/* y[o, rank(g), i] = x[o, first(g), i] for the groups g < *nu (y is
 * [outer, *nu, inner], compact). */
__global__ void unique_axis_slices_kernel(const void *x, void *y, size_t es, int64_t outer,
                                          int64_t n, int64_t inner, int sorted,
                                          const long long *gfirst, const long long *fpos,
                                          const long long *nu) {
    const long long groups = *nu;
    SH_LOOP(e, outer * n * inner) {
        const int64_t i = e % inner, g = e / inner % n, o = e / (inner * n);
        if (g >= groups)
            continue;
        const long long r = sorted ? g : fpos[gfirst[g]];
        sh_copy(y, (o * groups + r) * inner + i, x, (o * n + gfirst[g]) * inner + i, es);
    }
}

extern "C" cudaError_t kc_unique_axis_workspace(int64_t n, size_t *bytes) {
    *bytes = 0;
    if (n <= 0)
        return cudaSuccess;
    size_t sort_bytes = 0;
    unique_slice_less less = {NULL, KILN_DTYPE_FLOAT, 1, n, 1};
    cudaError_t e = cub::DeviceMergeSort::StableSortKeys(NULL, sort_bytes, (long long *)NULL, n,
                                                         less, (cudaStream_t)0);
    return unique_ws_bytes(n, sort_bytes, e, bytes);
}

extern "C" cudaError_t kc_unique_axis(const void *x, kiln_dtype dt, int64_t outer, int64_t n,
                                      int64_t inner, int sorted, void *y, int64_t *first,
                                      int64_t *inverse, int64_t *counts, void *ws, size_t wsz,
                                      int64_t *count, cudaStream_t stream) {
    const size_t es = kiln_dtype_size(dt);
    if (!count || !(es == 1 || es == 2 || es == 4 || es == 8) || outer < 0 || inner < 0)
        return cudaErrorInvalidValue;
    if (n <= 0) {
        *count = 0;
        return cudaSuccess;
    }
    if ((!x && outer * inner > 0) || !ws || wsz <= unique_fixed(n))
        return cudaErrorInvalidValue;
    /* the flat form's layout, keys unused: the item ids sort in place */
    const unique_ws w = unique_carve(ws, wsz, n);
    long long *ids = w.ids_in;
    size_t tmp_bytes = w.tmp_bytes;
    const unsigned blocks = kc_blocks(n, KC_THREADS);
    const unique_slice_less less = {x, dt, outer, n, inner};
    cudaError_t e;
    unique_axis_ids_kernel<<<blocks, KC_THREADS, 0, stream>>>(n, ids);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if ((e = cub::DeviceMergeSort::StableSortKeys(w.tmp, tmp_bytes, ids, n, less, stream)) !=
        cudaSuccess)
        return e;
    unique_axis_heads_kernel<<<blocks, KC_THREADS, 0, stream>>>(less, ids, n, w.head);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if ((e = unique_groups(w, ids, n, sorted, stream)) != cudaSuccess)
        return e;
    /* first and counts as the flat form writes them; the slices below */
    unique_out_kernel<<<blocks, KC_THREADS, 0, stream>>>(x, es, n, sorted, w.gstart, w.gfirst,
                                                        w.fpos, w.nu, NULL, first, counts);
    if (y && outer * inner > 0)
        unique_axis_slices_kernel<<<kc_blocks(outer * n * inner, KC_THREADS), KC_THREADS, 0,
                                    stream>>>(x, y, es, outer, n, inner, sorted, w.gfirst, w.fpos,
                                              w.nu);
    return unique_finish(w, n, sorted, inverse, count, stream);
}
