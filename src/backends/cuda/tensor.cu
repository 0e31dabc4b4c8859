/* tensor.cu - CUDA kernels of the tensor family (see tensor.cuh): one
 * strided copy for every layout change, and Gather. */
#include <string.h>

#include "kc_dev.cuh"
#include "tensor.cuh"

struct kc_u128 {
    uint4 v;
};

/* I: the index type, 32-bit when every offset fits (a 64-bit division
 * costs several times a 32-bit one, and the copy is bound by them). */
template <typename T, typename I>
__global__ void strided_copy_kernel(T *dst, const T *src, const kc_copy c, I total) {
    /* the dim loop unrolled over KC_MAX_DIMS with constant indices, so the
     * dims and strides are read from the parameters, not copied to a
     * dynamically indexed (local memory) array */
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I so = (I)c.src_off, dof = (I)c.dst_off, rem = i;
#pragma unroll
        for (int d = KC_MAX_DIMS - 1; d > 0; d--) {
            if (d < c.rank) {
                const I n = (I)c.dims[d];
                I k = rem % n;
                rem /= n;
                so += k * (I)c.src_stride[d];
                dof += k * (I)c.dst_stride[d];
            }
        }
        so += rem * (I)c.src_stride[0];
        dof += rem * (I)c.dst_stride[0];
        dst[dof] = src[so];
    }
}

/* Merge neighbouring dims that are contiguous on both sides and drop dims
 * of size 1 (fewer divisions an element). */
static void kc_copy_coalesce(kc_copy *c) {
    int r = 0;
    for (int d = 0; d < c->rank; d++) {
        if (c->dims[d] == 1)
            continue;
        if (r > 0 && c->src_stride[r - 1] == c->src_stride[d] * c->dims[d] &&
            c->dst_stride[r - 1] == c->dst_stride[d] * c->dims[d]) {
            c->dims[r - 1] *= c->dims[d];
            c->src_stride[r - 1] = c->src_stride[d];
            c->dst_stride[r - 1] = c->dst_stride[d];
            continue;
        }
        c->dims[r] = c->dims[d];
        c->src_stride[r] = c->src_stride[d];
        c->dst_stride[r] = c->dst_stride[d];
        r++;
    }
    if (r == 0) {
        c->dims[0] = 1;
        c->src_stride[0] = c->dst_stride[0] = 0;
        r = 1;
    }
    c->rank = r;
}

/* Whether every element offset of the copy (and the count) fits in 31 bits. */
static bool kc_copy_small(const kc_copy *c, int64_t total) {
    int64_t se = c->src_off, de = c->dst_off;
    for (int d = 0; d < c->rank; d++) {
        if (c->src_stride[d] < 0 || c->dst_stride[d] < 0)
            return false;
        se += (c->dims[d] - 1) * c->src_stride[d];
        de += (c->dims[d] - 1) * c->dst_stride[d];
    }
    const int64_t lim = 0x7fffffffLL;
    return total < lim && se < lim && de < lim && c->src_off >= 0 && c->dst_off >= 0;
}

/* Fast path: when the innermost dim is contiguous on both sides, copy it in
 * the widest units (16, 8 or 4 bytes) that every stride, offset and pointer
 * allows, e.g. Transpose (0,2,1,3) of [b,s,h,64] float16 rows moves 16-byte
 * units, 8x fewer index computations and full-width loads and stores. */
static void kc_copy_widen(kc_copy *c, size_t *esize, const void *dst, const void *src) {
    const int l = c->rank - 1;
    if (l < 0 || c->src_stride[l] != 1 || c->dst_stride[l] != 1)
        return;
    for (size_t w = 16; w > *esize && w >= 4; w /= 2) {
        const int64_t f = (int64_t)(w / *esize);
        bool ok = c->dims[l] % f == 0 && c->src_off % f == 0 && c->dst_off % f == 0 &&
                  (uintptr_t)dst % w == 0 && (uintptr_t)src % w == 0;
        for (int d = 0; ok && d < l; d++)
            ok = c->src_stride[d] % f == 0 && c->dst_stride[d] % f == 0;
        if (!ok)
            continue;
        c->dims[l] /= f;
        for (int d = 0; d < l; d++) {
            c->src_stride[d] /= f;
            c->dst_stride[d] /= f;
        }
        c->src_off /= f;
        c->dst_off /= f;
        *esize = w;
        return;
    }
}

extern "C" cudaError_t kc_strided_copy(void *dst, const void *src, size_t esize, const kc_copy *c,
                                       cudaStream_t stream) {
    if (!c || c->rank < 0 || c->rank > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    int64_t total = 1;
    for (int d = 0; d < c->rank; d++)
        total *= c->dims[d];
    if (total <= 0)
        return cudaSuccess;
    if (!dst || !src)
        return cudaErrorInvalidValue;
    kc_copy cc = *c;
    if (cc.rank == 0) { /* a scalar */
        cc.rank = 1;
        cc.dims[0] = 1;
        cc.src_stride[0] = cc.dst_stride[0] = 0;
    }
    bool small = false;
    if (kc_fast_paths()) {
        kc_copy_coalesce(&cc);
        kc_copy_widen(&cc, &esize, dst, src);
        total = 1;
        for (int d = 0; d < cc.rank; d++)
            total *= cc.dims[d];
        small = kc_copy_small(&cc, total);
    }
    unsigned blocks = kc_blocks(total, KC_THREADS);
#define KC_COPY(T)                                                                              \
    do {                                                                                        \
        if (small)                                                                              \
            strided_copy_kernel<T, unsigned><<<blocks, KC_THREADS, 0, stream>>>(                \
                (T *)dst, (const T *)src, cc, (unsigned)total);                                 \
        else                                                                                    \
            strided_copy_kernel<T, int64_t><<<blocks, KC_THREADS, 0, stream>>>(                 \
                (T *)dst, (const T *)src, cc, total);                                           \
    } while (0)
    switch (esize) {
    case 1: KC_COPY(uint8_t); break;
    case 2: KC_COPY(uint16_t); break;
    case 4: KC_COPY(uint32_t); break;
    case 8: KC_COPY(uint64_t); break;
    case 16: KC_COPY(kc_u128); break;
    default: return cudaErrorInvalidValue;
    }
#undef KC_COPY
    return cudaGetLastError();
}

template <typename T>
__global__ void gather_kernel(const T *x, const void *idx, int idx64, T *out, int64_t dim,
                              int64_t n_idx, int64_t inner, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i % inner, j = (i / inner) % n_idx, o = i / (inner * n_idx);
        int64_t s = idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
        if (s < 0)
            s += dim;
        if (s < 0 || s >= dim) {
            T z;
            memset(&z, 0, sizeof z);
            out[i] = z;
        } else {
            out[i] = x[(o * dim + s) * inner + t];
        }
    }
}

extern "C" cudaError_t kc_gather(const void *x, const void *idx, kiln_dtype idx_dt, void *out,
                                 size_t esize, int64_t outer, int64_t dim, int64_t n_idx,
                                 int64_t inner, cudaStream_t stream) {
    if (idx_dt != KILN_DTYPE_INT64 && idx_dt != KILN_DTYPE_INT32)
        return cudaErrorInvalidValue;
    int64_t total = outer * n_idx * inner;
    if (total <= 0)
        return cudaSuccess;
    if (!x || !idx || !out)
        return cudaErrorInvalidValue;
    int i64 = idx_dt == KILN_DTYPE_INT64;
    /* rows of inner * esize bytes move in the widest unit that divides them
     * and both pointers' alignment (embedding rows: 16 bytes a thread) */
    if (kc_fast_paths())
        for (size_t w = 16; w > esize; w /= 2)
            if ((size_t)inner * esize % w == 0 && (uintptr_t)x % w == 0 && (uintptr_t)out % w == 0) {
                inner = (int64_t)((size_t)inner * esize / w);
                total = outer * n_idx * inner;
                esize = w;
                break;
            }
    unsigned blocks = kc_blocks(total, KC_THREADS);
    switch (esize) {
    case 1: gather_kernel<uint8_t><<<blocks, KC_THREADS, 0, stream>>>((const uint8_t *)x, idx, i64, (uint8_t *)out, dim, n_idx, inner, total); break;
    case 2: gather_kernel<uint16_t><<<blocks, KC_THREADS, 0, stream>>>((const uint16_t *)x, idx, i64, (uint16_t *)out, dim, n_idx, inner, total); break;
    case 4: gather_kernel<uint32_t><<<blocks, KC_THREADS, 0, stream>>>((const uint32_t *)x, idx, i64, (uint32_t *)out, dim, n_idx, inner, total); break;
    case 8: gather_kernel<uint64_t><<<blocks, KC_THREADS, 0, stream>>>((const uint64_t *)x, idx, i64, (uint64_t *)out, dim, n_idx, inner, total); break;
    case 16: gather_kernel<uint4><<<blocks, KC_THREADS, 0, stream>>>((const uint4 *)x, idx, i64, (uint4 *)out, dim, n_idx, inner, total); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---------------- fill ---------------- */

template <typename T>
__global__ void fill_kernel(T *dst, T v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

extern "C" cudaError_t kc_fill(void *dst, size_t esize, uint64_t pattern, int64_t n,
                               cudaStream_t stream) {
    if (n <= 0)
        return cudaSuccess;
    if (!dst)
        return cudaErrorInvalidValue;
    unsigned blocks = kc_blocks(n, KC_THREADS);
    switch (esize) {
    case 1: fill_kernel<uint8_t><<<blocks, KC_THREADS, 0, stream>>>((uint8_t *)dst, (uint8_t)pattern, n); break;
    case 2: fill_kernel<uint16_t><<<blocks, KC_THREADS, 0, stream>>>((uint16_t *)dst, (uint16_t)pattern, n); break;
    case 4: fill_kernel<uint32_t><<<blocks, KC_THREADS, 0, stream>>>((uint32_t *)dst, (uint32_t)pattern, n); break;
    case 8: fill_kernel<uint64_t><<<blocks, KC_THREADS, 0, stream>>>((uint64_t *)dst, pattern, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* A memset node of a captured graph as a kernel node (cuda_backend.c,
 * graph_memsets_as_kernels): rows of width elements of esize bytes, pitch
 * bytes apart, each element the low esize bytes of value. */
__global__ void memset_node_kernel(unsigned char *dst, size_t pitch, unsigned value, unsigned esize, size_t width,
                                   size_t height) {
    const size_t n = width * height;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned char *p = dst + (i / width) * pitch + (i % width) * esize;
        if (esize == 4)
            *reinterpret_cast<uint32_t *>(p) = value;
        else if (esize == 2)
            *reinterpret_cast<uint16_t *>(p) = (uint16_t)value;
        else
            *p = (unsigned char)value;
    }
}

extern "C" int kc_memset_node_params(kc_memset_node *m, const struct cudaMemsetParams *mp, struct cudaKernelNodeParams *kp) {
    if (mp->elementSize != 1 && mp->elementSize != 2 && mp->elementSize != 4)
        return 0;
    m->dst = (unsigned char *)mp->dst;
    m->pitch = mp->height > 1 ? mp->pitch : mp->width * mp->elementSize;
    m->value = mp->value;
    m->esize = mp->elementSize;
    m->width = mp->width;
    m->height = mp->height;
    m->args[0] = &m->dst;
    m->args[1] = &m->pitch;
    m->args[2] = &m->value;
    m->args[3] = &m->esize;
    m->args[4] = &m->width;
    m->args[5] = &m->height;
    *kp = cudaKernelNodeParams{};
    kp->func = (void *)memset_node_kernel;
    kp->gridDim = dim3(kc_blocks((int64_t)(m->width * m->height), KC_THREADS));
    kp->blockDim = dim3(KC_THREADS);
    kp->kernelParams = m->args;
    return 1;
}

/* ---------------- Pad ---------------- */

/* Source index of padded position i in a dim of n, or -1 for the constant
 * (as the CPU's pad_src). */
__device__ __forceinline__ int64_t pad_src(int mode, int64_t i, int64_t n) {
    if (i >= 0 && i < n)
        return i;
    switch (mode) {
    case 2: return i < 0 ? 0 : n - 1; /* edge */
    case 3: return ((i % n) + n) % n; /* wrap */
    case 1: {                          /* reflect */
        if (n == 1)
            return 0;
        int64_t period = 2 * (n - 1);
        int64_t m = ((i % period) + period) % period;
        return m < n ? m : period - m;
    }
    default: return -1;
    }
}

template <typename T>
__global__ void pad_kernel(const T *x, T *out, const T *cval, const kc_pad p, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, src = 0, mul = 1;
        bool fill = false;
        for (int d = p.rank - 1; d >= 0; d--) {
            int64_t o = rem % p.out_dims[d];
            rem /= p.out_dims[d];
            int64_t s = p.in_dims[d] ? pad_src(p.mode, o - p.begin[d], p.in_dims[d]) : -1;
            if (s < 0)
                fill = true;
            src += s * mul;
            mul *= p.in_dims[d];
        }
        if (fill) {
            if (cval) {
                out[i] = *cval;
            } else {
                T z;
                memset(&z, 0, sizeof z);
                out[i] = z;
            }
        } else {
            out[i] = x[src];
        }
    }
}

extern "C" cudaError_t kc_pad_run(const void *x, void *out, const void *cval, size_t esize,
                                  const kc_pad *p, cudaStream_t stream) {
    if (!p || p->rank < 1 || p->rank > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    int64_t total = 1;
    for (int d = 0; d < p->rank; d++)
        total *= p->out_dims[d];
    if (total <= 0)
        return cudaSuccess;
    if (!out)
        return cudaErrorInvalidValue;
    unsigned blocks = kc_blocks(total, KC_THREADS);
    switch (esize) {
    case 1: pad_kernel<uint8_t><<<blocks, KC_THREADS, 0, stream>>>((const uint8_t *)x, (uint8_t *)out, (const uint8_t *)cval, *p, total); break;
    case 2: pad_kernel<uint16_t><<<blocks, KC_THREADS, 0, stream>>>((const uint16_t *)x, (uint16_t *)out, (const uint16_t *)cval, *p, total); break;
    case 4: pad_kernel<uint32_t><<<blocks, KC_THREADS, 0, stream>>>((const uint32_t *)x, (uint32_t *)out, (const uint32_t *)cval, *p, total); break;
    case 8: pad_kernel<uint64_t><<<blocks, KC_THREADS, 0, stream>>>((const uint64_t *)x, (uint64_t *)out, (const uint64_t *)cval, *p, total); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
