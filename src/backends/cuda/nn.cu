/* nn.cu - CUDA kernels of the nn family that kiln writes itself (see
 * nn.cuh). Sums accumulate in float; reference: backends/cpu/k_nn_*.c and
 * k_elementwise_reduce.c. */
#include "kc_dev.cuh"
#include "nn.cuh"

/* ---------------- fast paths: rows along the last axis ----------------
 * A group of LPR lanes (a power of two, at most a warp) owns one row and
 * keeps it in registers: each lane loads NV packs of 16 bytes (V elements),
 * so the row is read from memory once and written once. Taken when the row
 * length is a multiple of V, fits in NV * LPR packs, and every pointer is
 * aligned to its pack; otherwise Softmax keeps the row in registers one
 * element at a time (kc_softmax_row) and the rest runs the generic kernels
 * below. */

template <typename T, int N> struct alignas(sizeof(T) * N) kc_pack {
    T v[N];
};

__device__ __forceinline__ float kc_tof(float v) { return v; }
__device__ __forceinline__ float kc_tof(__half v) { return __half2float(v); }
__device__ __forceinline__ float kc_tof(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T kc_fromf(float v);
template <> __device__ __forceinline__ float kc_fromf<float>(float v) { return v; }
template <> __device__ __forceinline__ __half kc_fromf<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 kc_fromf<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* Sum / max over the LPR lanes of a group; every lane of the warp calls it. */
template <int LPR> __device__ __forceinline__ float kc_group_sum(float v) {
    for (int o = LPR / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <int LPR> __device__ __forceinline__ float kc_group_max(float v) {
    for (int o = LPR / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#define KC_ROW_THREADS 128

/* A row's LayerNorm once each lane of its group holds its NV packs of V
 * elements, element e of pack j read as float by elem(j, e) (zeros past
 * the row). kc_ln_row_stats: the mean, and the variance from the centred
 * values (no second read of memory, no E[x^2] - mean^2 cancellation);
 * every lane of the warp calls it, dead groups included (they join the
 * shuffles). kc_ln_row_store: y = (x - mean) * inv * scale (+ bias), for
 * live groups only. */
template <int NV, int V, int LPR, typename E>
__device__ __forceinline__ void kc_ln_row_stats(const E &elem, bool live, int lane, int nvec, int inner,
                                                float eps, float &mean, float &inv) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++)
#pragma unroll
        for (int e = 0; e < V; e++)
            s += elem(j, e);
    mean = kc_group_sum<LPR>(s) / (float)inner;
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        if (live && lane + j * LPR < nvec) {
#pragma unroll
            for (int e = 0; e < V; e++) {
                float d = elem(j, e) - mean;
                q += d * d;
            }
        }
    }
    const float var = kc_group_sum<LPR>(q) / (float)inner;
    inv = 1.f / sqrtf(var + eps);
}

template <typename T, typename P, int NV, int LPR, typename E>
__device__ __forceinline__ void kc_ln_row_store(const E &elem, int lane, int nvec, int inner, int64_t row,
                                                T *__restrict__ y, const P *__restrict__ scale,
                                                const P *__restrict__ bias, float mean, float inv) {
    constexpr int V = 16 / sizeof(T);
    typedef kc_pack<T, V> TP;
    typedef kc_pack<P, V> PP;
    TP *yr = reinterpret_cast<TP *>(y + row * (int64_t)inner);
    const PP *sp = reinterpret_cast<const PP *>(scale);
    const PP *bp = reinterpret_cast<const PP *>(bias);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int c = lane + j * LPR;
        if (c < nvec) {
            PP sc = sp[c];
            PP bi;
            if (bias)
                bi = bp[c];
            TP o;
#pragma unroll
            for (int e = 0; e < V; e++) {
                float r = (elem(j, e) - mean) * inv * kc_tof(sc.v[e]);
                if (bias)
                    r += kc_tof(bi.v[e]);
                o.v[e] = kc_fromf<T>(r);
            }
            yr[c] = o;
        }
    }
}

/* One row per group of LPR lanes, NV packs of 16 bytes a lane. The row
 * stays in registers as loaded (packs of T, converted to float on each
 * use), which keeps a 768-wide half row at 12 registers a lane; short
 * rows are held to 40 registers, so that 12 blocks fit an SM (a BERT-sized
 * batch, 8192 rows, is 1.3 waves; two rows a group to make it one wave
 * measured slower, bench/results/2026-11-30-gpu-session5.md). */
template <typename T, typename P, int NV, int LPR>
__global__ void __launch_bounds__(KC_ROW_THREADS, NV <= 3 ? 12 : 1)
    layernorm_rows_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int inner,
                          const P *__restrict__ scale, const P *__restrict__ bias, float eps,
                          void *mean_out, void *inv_out, kiln_dtype st) {
    constexpr int V = 16 / sizeof(T);
    typedef kc_pack<T, V> TP;
    const int64_t row = (int64_t)blockIdx.x * (KC_ROW_THREADS / LPR) + threadIdx.x / LPR;
    const int lane = threadIdx.x % LPR;
    const bool live = row < rows; /* dead groups still join the shuffles */
    const int nvec = inner / V;
    const TP *xr = reinterpret_cast<const TP *>(x + (live ? row : 0) * (int64_t)inner);
    TP v[NV];
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int c = lane + j * LPR;
        if (live && c < nvec)
            v[j] = xr[c];
        else
#pragma unroll
            for (int e = 0; e < V; e++)
                v[j].v[e] = kc_fromf<T>(0.f);
    }
    auto elem = [&](int jj, int e) { return kc_tof(v[jj].v[e]); };
    float mean, inv;
    kc_ln_row_stats<NV, V, LPR>(elem, live, lane, nvec, inner, eps, mean, inv);
    if (!live)
        return;
    kc_ln_row_store<T, P, NV, LPR>(elem, lane, nvec, inner, row, y, scale, bias, mean, inv);
    if (lane == 0) {
        if (mean_out)
            kc_st_f(mean_out, st, row, mean);
        if (inv_out)
            kc_st_f(inv_out, st, row, inv);
    }
}

template <typename T, int NV, int LPR>
__global__ void __launch_bounds__(KC_ROW_THREADS)
    softmax_rows_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int n, int log) {
    constexpr int V = 16 / sizeof(T);
    typedef kc_pack<T, V> TP;
    const int64_t row = (int64_t)blockIdx.x * (KC_ROW_THREADS / LPR) + threadIdx.x / LPR;
    const int lane = threadIdx.x % LPR;
    const bool live = row < rows;
    const int nvec = n / V;
    const TP *xr = reinterpret_cast<const TP *>(x + (live ? row : 0) * (int64_t)n);
    float v[NV][V];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int c = lane + j * LPR;
        if (live && c < nvec) {
            TP p = xr[c];
#pragma unroll
            for (int e = 0; e < V; e++) {
                v[j][e] = kc_tof(p.v[e]);
                m = fmaxf(m, v[j][e]);
            }
        }
    }
    m = kc_group_max<LPR>(m);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        if (live && lane + j * LPR < nvec) {
#pragma unroll
            for (int e = 0; e < V; e++) {
                v[j][e] -= m;
                s += expf(v[j][e]);
            }
        }
    }
    s = kc_group_sum<LPR>(s);
    if (!live)
        return;
    const float ls = logf(s), inv = 1.f / s;
    TP *yr = reinterpret_cast<TP *>(y + row * (int64_t)n);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        int c = lane + j * LPR;
        if (c < nvec) {
            TP o;
#pragma unroll
            for (int e = 0; e < V; e++)
                o.v[e] = kc_fromf<T>(log ? v[j][e] - ls : expf(v[j][e]) * inv);
            yr[c] = o;
        }
    }
}

/* Lanes per row and packs per lane for a row of nvec packs: the smallest
 * power-of-two group (4..32) that gives every lane a pack, then as many
 * packs per lane (1, 2, 3, 4, 8, 16) as the row needs. 0: too long. */
static int kc_row_shape(int64_t nvec, int *lpr) {
    int l = 4;
    while (l < 32 && l < nvec)
        l *= 2;
    *lpr = l;
    int64_t per = (nvec + l - 1) / l;
    /* 3 fits rows of 768 halves (BERT-base, ViT-base) without an idle slot */
    return per <= 1 ? 1 : per <= 2 ? 2 : per <= 3 ? 3 : per <= 4 ? 4 : per <= 8 ? 8 : per <= 16 ? 16 : 0;
}

static bool kc_aligned16(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* The row shape kc_row_shape chose (nv packs a lane, lpr lanes a row) as
 * template arguments: f.template go<NV, LPR>(). Shapes above MAXNV packs a
 * lane are not instantiated; the caller keeps nv within it. */
template <int MAXNV, typename F> static cudaError_t kc_row_pick(int nv, int lpr, const F &f) {
    if (nv == 1) {
        if (lpr == 4)
            return f.template go<1, 4>();
        if (lpr == 8)
            return f.template go<1, 8>();
        if (lpr == 16)
            return f.template go<1, 16>();
        return f.template go<1, 32>();
    }
    if (nv == 2)
        return f.template go<2, 32>();
    if (nv == 3)
        return f.template go<3, 32>();
    if (nv == 4)
        return f.template go<4, 32>();
    if (nv == 8 || MAXNV <= 8)
        return f.template go<8, 32>();
    return f.template go<(MAXNV > 8 ? 16 : 8), 32>();
}

template <typename T, typename P, int NV, int LPR>
static cudaError_t ln_launch(const void *x, void *y, int64_t rows, int64_t inner, const void *scale,
                             const void *bias, float eps, void *mean, void *inv, kiln_dtype st,
                             cudaStream_t stream) {
    const int per_block = KC_ROW_THREADS / LPR;
    int64_t blocks = (rows + per_block - 1) / per_block;
    layernorm_rows_kernel<T, P, NV, LPR><<<(unsigned)blocks, KC_ROW_THREADS, 0, stream>>>(
        (const T *)x, (T *)y, rows, (int)inner, (const P *)scale, (const P *)bias, eps, mean, inv,
        st);
    return cudaGetLastError();
}

template <typename T, typename P> struct ln_go {
    const void *x;
    void *y;
    int64_t rows, inner;
    const void *scale, *bias;
    float eps;
    void *mean, *inv;
    kiln_dtype st;
    cudaStream_t s;
    template <int NV, int L> cudaError_t go() const {
        return ln_launch<T, P, NV, L>(x, y, rows, inner, scale, bias, eps, mean, inv, st, s);
    }
};

template <typename T, typename P>
static cudaError_t ln_pick(int nv, int lpr, const void *x, void *y, int64_t rows, int64_t inner,
                           const void *scale, const void *bias, float eps, void *mean, void *inv,
                           kiln_dtype st, cudaStream_t s) {
    return kc_row_pick<16>(nv, lpr, ln_go<T, P>{x, y, rows, inner, scale, bias, eps, mean, inv, st, s});
}

/* Whether a LayerNorm over rows of `inner` elements of dt, with scale and
 * bias of pt (dt or float), takes the rows fast path: the row shape (nv
 * packs a lane, lpr lanes a row), or 0. */
static int kc_ln_fast_shape(kiln_dtype dt, kiln_dtype pt, int64_t inner, const void *x, const void *y,
                            const void *scale, const void *bias, int *lpr) {
    size_t es = dt == KILN_DTYPE_FLOAT ? 4 : (dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16) ? 2 : 0;
    if (!es || (pt != dt && pt != KILN_DTYPE_FLOAT) || inner > 0x7fffffffLL)
        return 0;
    const int64_t V = 16 / (int64_t)es;
    size_t ps = pt == KILN_DTYPE_FLOAT ? 4 : 2;
    if (inner % V || !kc_aligned16(x, 16) || !kc_aligned16(y, 16) ||
        !kc_aligned16(scale, ps * (size_t)V) || (bias && !kc_aligned16(bias, ps * (size_t)V)))
        return 0;
    return kc_row_shape(inner / V, lpr);
}

template <typename T> struct kc_tag {
    typedef T type;
};

/* f(kc_tag<T>(), kc_tag<P>()) for the device types of dt (float, float16 or
 * bfloat16) and of pt (dt or float), as kc_ln_fast_shape admits them. */
template <typename F> static cudaError_t kc_ln_typed(kiln_dtype dt, kiln_dtype pt, const F &f) {
    if (dt == KILN_DTYPE_FLOAT)
        return f(kc_tag<float>(), kc_tag<float>());
    if (dt == KILN_DTYPE_FLOAT16)
        return pt == dt ? f(kc_tag<__half>(), kc_tag<__half>()) : f(kc_tag<__half>(), kc_tag<float>());
    return pt == dt ? f(kc_tag<__nv_bfloat16>(), kc_tag<__nv_bfloat16>())
                    : f(kc_tag<__nv_bfloat16>(), kc_tag<float>());
}

/* 1: launched (status in *err); 0: not covered, use the generic kernel. */
static int kc_layernorm_fast(const void *x, void *y, kiln_dtype dt, int64_t rows, int64_t inner,
                             const void *scale, const void *bias, kiln_dtype pt, float eps,
                             void *mean, void *inv, kiln_dtype st, cudaStream_t stream,
                             cudaError_t *err) {
    int lpr = 0, nv = kc_ln_fast_shape(dt, pt, inner, x, y, scale, bias, &lpr);
    if (!nv || (rows + KC_ROW_THREADS / lpr - 1) / (KC_ROW_THREADS / lpr) > 0x7fffffffLL)
        return 0;
    *err = kc_ln_typed(dt, pt, [&](auto t, auto p) {
        return ln_pick<typename decltype(t)::type, typename decltype(p)::type>(
            nv, lpr, x, y, rows, inner, scale, bias, eps, mean, inv, st, stream);
    });
    return 1;
}

template <typename T, int NV, int LPR>
static cudaError_t sm_launch(const void *x, void *y, int64_t rows, int64_t n, int log,
                             cudaStream_t stream) {
    const int per_block = KC_ROW_THREADS / LPR;
    int64_t blocks = (rows + per_block - 1) / per_block;
    softmax_rows_kernel<T, NV, LPR><<<(unsigned)blocks, KC_ROW_THREADS, 0, stream>>>(
        (const T *)x, (T *)y, rows, (int)n, log);
    return cudaGetLastError();
}

template <typename T> struct sm_go {
    const void *x;
    void *y;
    int64_t rows, n;
    int log;
    cudaStream_t s;
    template <int NV, int L> cudaError_t go() const { return sm_launch<T, NV, L>(x, y, rows, n, log, s); }
};

template <typename T>
static cudaError_t sm_pick(int nv, int lpr, const void *x, void *y, int64_t rows, int64_t n,
                           int log, cudaStream_t s) {
    return kc_row_pick<16>(nv, lpr, sm_go<T>{x, y, rows, n, log, s});
}

static int kc_softmax_fast(const void *x, void *y, kiln_dtype dt, int64_t rows, int64_t n, int log,
                           cudaStream_t stream, cudaError_t *err) {
    size_t es = dt == KILN_DTYPE_FLOAT ? 4 : (dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16) ? 2 : 0;
    if (!es || n > 0x7fffffffLL)
        return 0;
    const int64_t V = 16 / (int64_t)es;
    if (n % V || !kc_aligned16(x, 16) || !kc_aligned16(y, 16))
        return 0;
    int lpr = 0, nv = kc_row_shape(n / V, &lpr);
    if (!nv || (rows + KC_ROW_THREADS / lpr - 1) / (KC_ROW_THREADS / lpr) > 0x7fffffffLL)
        return 0;
    if (dt == KILN_DTYPE_FLOAT)
        *err = sm_pick<float>(nv, lpr, x, y, rows, n, log, stream);
    else if (dt == KILN_DTYPE_FLOAT16)
        *err = sm_pick<__half>(nv, lpr, x, y, rows, n, log, stream);
    else
        *err = sm_pick<__nv_bfloat16>(nv, lpr, x, y, rows, n, log, stream);
    return 1;
}

/* Rows of any length up to KC_SM_MAX_LEN (no pack multiple, no alignment
 * beyond the element's): a group of `width` lanes owns a row, each lane
 * NE elements of it at lane, lane + width, ... , as float in registers, so
 * every load and store of a group is one contiguous run and the row is
 * read once and written once. The arithmetic is softmax_rows_kernel's:
 * v = x - max, s = sum of expf(v), y = expf(v) * (1 / s) or v - logf(s);
 * expf(v) is kept from the sum instead of computed again (the same value).
 * gmax / gsum reduce over the group; every thread of the block calls them,
 * dead groups included. */
template <typename T, int NE, typename GMax, typename GSum>
__device__ __forceinline__ void kc_softmax_row(const T *__restrict__ x, T *__restrict__ y, int64_t row,
                                               bool live, int lane, int width, int n, int log,
                                               const GMax &gmax, const GSum &gsum) {
    const T *xr = x + (live ? row : 0) * (int64_t)n;
    /* Every load first, none behind a branch that waits on it. Whether a
     * step is wholly inside the row, partly, or wholly past it is the same
     * for every lane: whole steps load at fixed offsets from the lane's
     * first element, the partial one reads the row's last element for
     * slots past the end (they count as -inf), and the rest is skipped. */
    const T *xl = xr + lane;
    T raw[NE];
#pragma unroll
    for (int j = 0; j < NE; j++) {
        if ((j + 1) * width <= n)
            raw[j] = xl[j * width];
        else if (j * width < n)
            raw[j] = xr[min(lane + j * width, n - 1)];
    }
    float v[NE];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < NE; j++) {
        v[j] = live && lane + j * width < n ? kc_tof(raw[j]) : -INFINITY;
        m = fmaxf(m, v[j]);
    }
    m = gmax(m);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NE; j++) {
        if (j * width < n) { /* slots past the end add expf(-inf) = 0 */
            const float d = v[j] - m, e = expf(d);
            s += e;
            v[j] = log ? d : e;
        }
    }
    s = gsum(s);
    if (!live)
        return;
    const float ls = logf(s), inv = 1.f / s;
    T *yr = y + row * (int64_t)n;
#pragma unroll
    for (int j = 0; j < NE; j++) {
        int c = lane + j * width;
        if (c < n)
            yr[c] = kc_fromf<T>(log ? v[j] - ls : v[j] * inv);
    }
}

/* LPR lanes (4..32) a row, KC_ROW_THREADS / LPR rows a block. */
template <typename T, int NE, int LPR>
__global__ void __launch_bounds__(KC_ROW_THREADS)
    softmax_lanes_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int n, int log) {
    const int64_t row = (int64_t)blockIdx.x * (KC_ROW_THREADS / LPR) + threadIdx.x / LPR;
    kc_softmax_row<T, NE>(
        x, y, row, row < rows, threadIdx.x % LPR, LPR, n, log,
        [](float v) { return kc_group_max<LPR>(v); }, [](float v) { return kc_group_sum<LPR>(v); });
}

/* A block (a multiple of 32 threads, at most 1024) a row, for rows longer
 * than a warp holds. */
template <typename T, int NE>
__global__ void __launch_bounds__(1024)
    softmax_block_kernel(const T *__restrict__ x, T *__restrict__ y, int n, int log) {
    __shared__ float sh[32];
    kc_softmax_row<T, NE>(
        x, y, blockIdx.x, true, threadIdx.x, blockDim.x, n, log,
        [&](float v) { return kc_block_max(v, sh); }, [&](float v) { return kc_block_sum(v, sh); });
}

/* Elements a lane of a warp row, and of a block row (blocks of up to 1024
 * threads): rows up to 32 * 32 = 1024 elements take a group of lanes, up to
 * 1024 * 8 = 8192 a block; longer ones the generic kernel. */
#define KC_SM_BLOCK_NE 8
#define KC_SM_MAX_LEN (1024 * KC_SM_BLOCK_NE)

template <typename T, int NE, int LPR>
static cudaError_t sm_lanes_launch(const void *x, void *y, int64_t rows, int64_t n, int log,
                                   cudaStream_t stream) {
    const int per_block = KC_ROW_THREADS / LPR;
    const int64_t blocks = (rows + per_block - 1) / per_block;
    softmax_lanes_kernel<T, NE, LPR><<<(unsigned)blocks, KC_ROW_THREADS, 0, stream>>>(
        (const T *)x, (T *)y, rows, (int)n, log);
    return cudaGetLastError();
}

/* The row's shape: the smallest group of 4..32 lanes that holds the row at
 * 4 elements a lane (short rows: more rows a warp, fewer shuffles), then a
 * warp with 8, 16 or 32 elements a lane, then a block of 256..1024 threads
 * with 8 each. Slots past the row end are the same for every group of a
 * warp, so their loop steps are skipped whole. */
template <typename T>
static cudaError_t sm_scalar_pick(const void *x, void *y, int64_t rows, int64_t n, int log,
                                  cudaStream_t s) {
    if (n <= 16)
        return sm_lanes_launch<T, 4, 4>(x, y, rows, n, log, s);
    if (n <= 32)
        return sm_lanes_launch<T, 4, 8>(x, y, rows, n, log, s);
    if (n <= 64)
        return sm_lanes_launch<T, 4, 16>(x, y, rows, n, log, s);
    if (n <= 128)
        return sm_lanes_launch<T, 4, 32>(x, y, rows, n, log, s);
    if (n <= 256)
        return sm_lanes_launch<T, 8, 32>(x, y, rows, n, log, s);
    if (n <= 512)
        return sm_lanes_launch<T, 16, 32>(x, y, rows, n, log, s);
    if (n <= 1024)
        return sm_lanes_launch<T, 32, 32>(x, y, rows, n, log, s);
    int threads = 256;
    while (threads * KC_SM_BLOCK_NE < n)
        threads *= 2;
    softmax_block_kernel<T, KC_SM_BLOCK_NE><<<(unsigned)rows, threads, 0, s>>>((const T *)x, (T *)y,
                                                                             (int)n, log);
    return cudaGetLastError();
}

/* Rows of float, float16 or bfloat16 up to KC_SM_MAX_LEN that the pack
 * kernel does not take (a length off the 16-byte packs, a pointer off
 * their alignment, or longer than 16 packs a lane). 1: launched (status in
 * *err); 0: not covered. */
static int kc_softmax_scalar(const void *x, void *y, kiln_dtype dt, int64_t rows, int64_t n, int log,
                             cudaStream_t stream, cudaError_t *err) {
    if (n > KC_SM_MAX_LEN)
        return 0;
    if (dt == KILN_DTYPE_FLOAT)
        *err = sm_scalar_pick<float>(x, y, rows, n, log, stream);
    else if (dt == KILN_DTYPE_FLOAT16)
        *err = sm_scalar_pick<__half>(x, y, rows, n, log, stream);
    else if (dt == KILN_DTYPE_BFLOAT16)
        *err = sm_scalar_pick<__nv_bfloat16>(x, y, rows, n, log, stream);
    else
        return 0;
    return 1;
}

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
    cudaError_t err = cudaSuccess;
    if (inner == 1 && kc_fast_paths() &&
        (kc_softmax_fast(x, y, dt, rows, n, log, stream, &err) ||
         kc_softmax_scalar(x, y, dt, rows, n, log, stream, &err)))
        return err;
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
    cudaError_t err = cudaSuccess;
    if (kc_fast_paths() && kc_layernorm_fast(x, y, dt, rows, inner, scale, bias, pt, eps, mean,
                                             inv_std, st, stream, &err))
        return err;
    int threads = inner >= 2048 ? 512 : (inner >= 512 ? 256 : 128);
    layernorm_kernel<<<(unsigned)rows, threads, 0, stream>>>(x, y, dt, inner, scale, bias, pt, eps,
                                                              mean, inv_std, st);
    return cudaGetLastError();
}

/* ---------------- kiln::LayerNorm: a sum, then the norm ---------------- */

/* The table row row r reads (ids), or r itself; -1 when the id is outside. */
__device__ __forceinline__ int64_t lns_src_row(const kc_ln_sum &s, int64_t r) {
    if (!s.ids)
        return r;
    int64_t id = s.ids_dt == KILN_DTYPE_INT64 ? ((const long long *)s.ids)[r]
                                               : (int64_t)((const int *)s.ids)[r];
    if (id < 0)
        id += s.table_rows;
    return id >= 0 && id < s.table_rows ? id : -1;
}

/* Generic: one block a row, the sum recomputed in each of three passes. */
__global__ void layernorm_sum_kernel(const void *x, const kc_ln_sum s, void *y, kiln_dtype dt,
                                     int64_t inner, const void *scale, const void *bias,
                                     kiln_dtype pt, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x, src = lns_src_row(s, r);
    int64_t aoff[KC_LN_MAX_ADD];
#pragma unroll
    for (int a = 0; a < KC_LN_MAX_ADD; a++)
        aoff[a] = a < s.n_add ? (r % s.add_rows[a]) * inner : 0;
    auto val = [&](int64_t k) {
        float v = src >= 0 ? kc_ld_f(x, dt, src * inner + k) : 0.f;
#pragma unroll
        for (int a = 0; a < KC_LN_MAX_ADD; a++)
            if (a < s.n_add)
                v += kc_ld_f(s.add[a], dt, aoff[a] + k);
        return v;
    };
    float acc = 0.f;
    for (int64_t k = threadIdx.x; k < inner; k += blockDim.x)
        acc += val(k);
    const float mean = kc_block_sum(acc, sh) / (float)inner;
    float q = 0.f;
    for (int64_t k = threadIdx.x; k < inner; k += blockDim.x) {
        float d = val(k) - mean;
        q += d * d;
    }
    const float inv = 1.f / sqrtf(kc_block_sum(q, sh) / (float)inner + eps);
    for (int64_t k = threadIdx.x; k < inner; k += blockDim.x) {
        const float sv = val(k);
        float o = (sv - mean) * inv * kc_ld_f(scale, pt, k);
        if (bias)
            o += kc_ld_f(bias, pt, k);
        kc_st_f(y, dt, r * inner + k, o);
        if (s.sum_out)
            kc_st_f(s.sum_out, dt, r * inner + k, sv);
    }
}

/* Fast path: the layout of layernorm_rows_kernel (LPR lanes a row, NV packs
 * a lane), the sum held in float registers. */
template <typename T, typename P, int NV, int LPR>
__global__ void __launch_bounds__(KC_ROW_THREADS)
    layernorm_sum_rows_kernel(const T *__restrict__ x, const kc_ln_sum s, T *__restrict__ y,
                              int64_t rows, int inner, const P *__restrict__ scale,
                              const P *__restrict__ bias, float eps) {
    constexpr int V = 16 / sizeof(T);
    typedef kc_pack<T, V> TP;
    const int64_t row = (int64_t)blockIdx.x * (KC_ROW_THREADS / LPR) + threadIdx.x / LPR;
    const int lane = threadIdx.x % LPR;
    const bool live = row < rows; /* dead groups still join the shuffles */
    const int nvec = inner / V;
    const int64_t src = live ? lns_src_row(s, row) : -1;
    /* each addend's row, found once (rows < 2^31, so 32-bit remainders) */
    const T *arow[KC_LN_MAX_ADD];
#pragma unroll
    for (int a = 0; a < KC_LN_MAX_ADD; a++)
        arow[a] = a < s.n_add ? (const T *)s.add[a] +
                                    (int64_t)((unsigned)row % (unsigned)s.add_rows[a]) * inner
                              : nullptr;
    float v[NV][V];
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int c = lane + j * LPR;
        const bool in = live && c < nvec;
        TP p;
        if (in && src >= 0)
            p = reinterpret_cast<const TP *>(x + src * (int64_t)inner)[c];
#pragma unroll
        for (int e = 0; e < V; e++)
            v[j][e] = in && src >= 0 ? kc_tof(p.v[e]) : 0.f;
#pragma unroll
        for (int a = 0; a < KC_LN_MAX_ADD; a++) {
            if (!in || a >= s.n_add)
                break;
            TP q = reinterpret_cast<const TP *>(arow[a])[c];
#pragma unroll
            for (int e = 0; e < V; e++)
                v[j][e] += kc_tof(q.v[e]);
        }
    }
    auto elem = [&](int jj, int e) { return v[jj][e]; };
    float mean, inv;
    kc_ln_row_stats<NV, V, LPR>(elem, live, lane, nvec, inner, eps, mean, inv);
    if (!live)
        return;
    kc_ln_row_store<T, P, NV, LPR>(elem, lane, nvec, inner, row, y, scale, bias, mean, inv);
    if (s.sum_out) { /* the sum itself, rounded to T */
        TP *sr = reinterpret_cast<TP *>((T *)s.sum_out + row * (int64_t)inner);
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int c = lane + j * LPR;
            if (c < nvec) {
                TP o;
#pragma unroll
                for (int e = 0; e < V; e++)
                    o.v[e] = kc_fromf<T>(v[j][e]);
                sr[c] = o;
            }
        }
    }
}

template <typename T, typename P> struct lns_go {
    const void *x;
    kc_ln_sum sum;
    void *y;
    int64_t rows, inner;
    const void *scale, *bias;
    float eps;
    cudaStream_t s;
    template <int NV, int L> cudaError_t go() const {
        const int64_t blocks = (rows + KC_ROW_THREADS / L - 1) / (KC_ROW_THREADS / L);
        layernorm_sum_rows_kernel<T, P, NV, L><<<(unsigned)blocks, KC_ROW_THREADS, 0, s>>>(
            (const T *)x, sum, (T *)y, rows, (int)inner, (const P *)scale, (const P *)bias, eps);
        return cudaGetLastError();
    }
};

/* rows of at most 8 packs a lane (the caller checks) */
template <typename T, typename P>
static cudaError_t lns_pick(int nv, int lpr, const void *x, const kc_ln_sum &s, void *y,
                            int64_t rows, int64_t inner, const void *scale, const void *bias,
                            float eps, cudaStream_t stream) {
    return kc_row_pick<8>(nv, lpr, lns_go<T, P>{x, s, y, rows, inner, scale, bias, eps, stream});
}

extern "C" cudaError_t kc_layernorm_sum(const void *x, const kc_ln_sum *sum, void *y, kiln_dtype dt,
                                        int64_t rows, int64_t inner, const void *scale,
                                        const void *bias, kiln_dtype pt, float eps,
                                        cudaStream_t stream) {
    if (rows <= 0 || inner <= 0)
        return cudaSuccess;
    if (!x || !sum || !y || !scale || rows > 0x7fffffffLL || sum->n_add < 0 ||
        sum->n_add > KC_LN_MAX_ADD || inner > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    for (int a = 0; a < sum->n_add; a++)
        if (!sum->add[a] || sum->add_rows[a] < 1)
            return cudaErrorInvalidValue;
    const kc_ln_sum s = *sum;
    bool fast = kc_fast_paths();
    for (int a = 0; a < s.n_add && fast; a++)
        fast = kc_aligned16(s.add[a], 16);
    fast = fast && (!s.sum_out || kc_aligned16(s.sum_out, 16));
    int lpr = 0, nv = fast ? kc_ln_fast_shape(dt, pt, inner, x, y, scale, bias, &lpr) : 0;
    if (nv && nv <= 8)
        return kc_ln_typed(dt, pt, [&](auto t, auto p) {
            return lns_pick<typename decltype(t)::type, typename decltype(p)::type>(
                nv, lpr, x, s, y, rows, inner, scale, bias, eps, stream);
        });
    int threads = inner >= 2048 ? 512 : (inner >= 512 ? 256 : 128);
    layernorm_sum_kernel<<<(unsigned)rows, threads, 0, stream>>>(x, s, y, dt, inner, scale, bias,
                                                                 pt, eps);
    return cudaGetLastError();
}

/* ---------------- reductions: one warp per output element ----------------
 * Real results accumulate in float (double for float64 data; integers
 * converted as the CPU converts them to double); the exact integer reductions (Sum, Mean,
 * Max, Min, Prod, L1, SumSquare of integers) in int64, wrapping as the CPU's
 * int64 loops do. ReduceLogSumExp subtracts the maximum first. */

__device__ __forceinline__ bool red_is_int(kiln_dtype t) {
    return t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT16 ||
           t == KILN_DTYPE_UINT16 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_UINT32 ||
           t == KILN_DTYPE_INT64 || t == KILN_DTYPE_UINT64 || t == KILN_DTYPE_BOOL;
}

__device__ __forceinline__ float red_ld_f(const void *p, kiln_dtype t, int64_t i) {
    if (t == KILN_DTYPE_UINT64)
        return (float)((const unsigned long long *)p)[i];
    return red_is_int(t) ? (float)kc_ld_i(p, t, i) : kc_ld_f(p, t, i);
}

/* A real result into any type: integers truncate toward zero and saturate
 * at the 64-bit range (NaN gives 0), as the CPU's stores do. */
__device__ __forceinline__ void red_st_f(void *p, kiln_dtype t, int64_t i, float v) {
    if (!red_is_int(t)) {
        kc_st_f(p, t, i, v);
        return;
    }
    if (t == KILN_DTYPE_BOOL) {
        ((uint8_t *)p)[i] = v != 0.f;
        return;
    }
    long long q = v != v ? 0 : v >= 9.2233720e18f ? 9223372036854775807LL
                           : v <= -9.2233720e18f ? (-9223372036854775807LL - 1)
                                                 : (long long)v;
    if (t == KILN_DTYPE_UINT64 && v >= 9.2233720e18f)
        q = (long long)(v >= 1.8446744e19f ? ~0ull : (unsigned long long)v);
    kc_st_i(p, t, i, q);
}

__device__ __forceinline__ int64_t red_base(const kc_reduce &p, int64_t o) {
    int64_t base = 0;
    for (int d = p.n_keep - 1; d >= 0; d--) {
        base += (o % p.keep_dims[d]) * p.keep_stride[d];
        o /= p.keep_dims[d];
    }
    return base;
}

__device__ __forceinline__ int64_t red_off(const kc_reduce &p, int64_t j) {
    int64_t off = 0;
    for (int d = p.n_red - 1; d >= 0; d--) {
        off += (j % p.red_dims[d]) * p.red_stride[d];
        j /= p.red_dims[d];
    }
    return off;
}

__device__ __forceinline__ double red_ld_d(const void *p, kiln_dtype t, int64_t i) {
    if (t == KILN_DTYPE_DOUBLE)
        return ((const double *)p)[i];
    if (t == KILN_DTYPE_UINT64)
        return (double)((const unsigned long long *)p)[i];
    return red_is_int(t) ? (double)kc_ld_i(p, t, i) : (double)kc_ld_f(p, t, i);
}

/* The real reduction in A: float, or double for float64 data. */
template <typename A> struct red_real;
template <> struct red_real<float> {
    static __device__ __forceinline__ float ld(const void *p, kiln_dtype t, int64_t i) { return red_ld_f(p, t, i); }
    static __device__ __forceinline__ void st(void *p, kiln_dtype t, int64_t i, float v) { red_st_f(p, t, i, v); }
    static __device__ __forceinline__ float exp_(float v) { return expf(v); }
    static __device__ __forceinline__ float log_(float v) { return logf(v); }
    static __device__ __forceinline__ float sqrt_(float v) { return sqrtf(v); }
};
template <> struct red_real<double> {
    static __device__ __forceinline__ double ld(const void *p, kiln_dtype t, int64_t i) { return red_ld_d(p, t, i); }
    static __device__ __forceinline__ void st(void *p, kiln_dtype t, int64_t i, double v) {
        if (t == KILN_DTYPE_DOUBLE)
            ((double *)p)[i] = v;
        else
            red_st_f(p, t, i, (float)v);
    }
    static __device__ __forceinline__ double exp_(double v) { return exp(v); }
    static __device__ __forceinline__ double log_(double v) { return log(v); }
    static __device__ __forceinline__ double sqrt_(double v) { return sqrt(v); }
};

/* One element into a real reduction's accumulator (m: LogSumExp's max). */
template <typename A> __device__ __forceinline__ A red_fold(int op, A acc, A v, A m) {
    switch (op) {
    case KC_RED_MAX: return (v > acc || v != v) ? v : acc;
    case KC_RED_MIN: return (v < acc || v != v) ? v : acc;
    case KC_RED_PROD: return acc * v;
    case KC_RED_SUM_SQUARE: case KC_RED_L2: return acc + v * v;
    case KC_RED_L1: return acc + (v < 0 ? -v : v);
    case KC_RED_LOG_SUM_EXP: return acc + red_real<A>::exp_(v - m);
    default: return acc + v;
    }
}

/* The output from the accumulator. */
template <typename A> __device__ __forceinline__ A red_finish(const kc_reduce &p, A acc, A m) {
    typedef red_real<A> R;
    if (p.op == KC_RED_MEAN)
        return p.n_red_total ? acc / (A)p.n_red_total : (A)NAN;
    if (p.op == KC_RED_L2)
        return R::sqrt_(acc);
    if (p.op == KC_RED_LOG_SUM)
        return R::log_(acc);
    if (p.op == KC_RED_LOG_SUM_EXP)
        return R::log_(acc) + m;
    return acc;
}

/* Two partial accumulators of a real reduction into one. */
template <typename A> __device__ __forceinline__ A red_join(int op, A a, A b) {
    switch (op) {
    case KC_RED_MAX: return (b > a || b != b) ? b : a;
    case KC_RED_MIN: return (b < a || b != b) ? b : a;
    case KC_RED_PROD: return a * b;
    default: return a + b;
    }
}

/* A real reduction's accumulator before any element. */
template <typename A> __device__ __forceinline__ A red_init(int op) {
    return op == KC_RED_MAX    ? (A)-INFINITY
           : op == KC_RED_MIN  ? (A)INFINITY
           : op == KC_RED_PROD ? (A)1
                               : (A)0;
}

template <typename A>
__global__ void reduce_kernel(const void *x, kiln_dtype xt, void *y, kiln_dtype yt,
                              const kc_reduce p) {
    typedef red_real<A> R;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= p.n_out)
        return;
    const int64_t base = red_base(p, warp);
    /* ReduceLogSumExp: the maximum first (all -inf, or nothing: 0) */
    A m = 0;
    if (p.op == KC_RED_LOG_SUM_EXP) {
        A mx = -INFINITY;
        for (int64_t j = lane; j < p.n_red_total; j += 32) {
            A v = R::ld(x, xt, base + red_off(p, j));
            mx = v > mx ? v : mx;
        }
        for (int o = 16; o > 0; o >>= 1) {
            A w = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = w > mx ? w : mx;
        }
        m = mx == -INFINITY ? 0 : mx;
    }
    A acc = red_init<A>(p.op);
    for (int64_t j = lane; j < p.n_red_total; j += 32)
        acc = red_fold<A>(p.op, acc, R::ld(x, xt, base + red_off(p, j)), m);
    for (int o = 16; o > 0; o >>= 1)
        acc = red_join<A>(p.op, acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if (lane == 0)
        R::st(y, yt, warp, red_finish<A>(p, acc, m));
}

/* One thread an output, when the input's last dim is kept: neighbouring
 * threads read neighbouring elements (the reduction over H, W of a
 * channels-last [N, H, W, C], where one warp an output reads 2 bytes a
 * 32-byte sector). */
template <typename A>
__global__ void reduce_cols_kernel(const void *x, kiln_dtype xt, void *y, kiln_dtype yt,
                                   const kc_reduce p) {
    typedef red_real<A> R;
    const int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (o >= p.n_out)
        return;
    const int64_t base = red_base(p, o);
    A m = 0;
    if (p.op == KC_RED_LOG_SUM_EXP) {
        A mx = -INFINITY;
        for (int64_t j = 0; j < p.n_red_total; j++) {
            A v = R::ld(x, xt, base + red_off(p, j));
            mx = v > mx ? v : mx;
        }
        m = mx == -INFINITY ? 0 : mx;
    }
    A acc = red_init<A>(p.op);
    for (int64_t j = 0; j < p.n_red_total; j++)
        acc = red_fold<A>(p.op, acc, R::ld(x, xt, base + red_off(p, j)), m);
    R::st(y, yt, o, red_finish<A>(p, acc, m));
}

/* When the last kept dim is contiguous but the outputs are too few for a
 * thread each to fill the chip (the squeeze-excitation pool over H, W of a
 * channels-last [N, H, W, C]: a few thousand outputs, each over thousands
 * of elements): a block takes 32 consecutive outputs, its 16 warps split
 * the reduced elements between them and lanes read neighbouring outputs,
 * then the 16 partials are joined. Not for LogSumExp (its maximum first). */
template <typename A>
__global__ void __launch_bounds__(512)
    reduce_strip_kernel(const void *x, kiln_dtype xt, void *y, kiln_dtype yt, const kc_reduce p) {
    typedef red_real<A> R;
    __shared__ A part[16][33];
    const int lane = threadIdx.x, wy = threadIdx.y;
    const int64_t o = blockIdx.x * (int64_t)32 + lane;
    const bool live = o < p.n_out;
    A acc = red_init<A>(p.op);
    if (live) {
        const int64_t base = red_base(p, o);
        if (p.n_red == 1) {
            const int64_t st = p.red_stride[0];
            for (int64_t j = wy; j < p.n_red_total; j += 16)
                acc = red_fold<A>(p.op, acc, R::ld(x, xt, base + j * st), 0);
        } else {
            for (int64_t j = wy; j < p.n_red_total; j += 16)
                acc = red_fold<A>(p.op, acc, R::ld(x, xt, base + red_off(p, j)), 0);
        }
    }
    part[wy][lane] = acc;
    __syncthreads();
    if (wy != 0 || !live)
        return;
    for (int k = 1; k < 16; k++)
        acc = red_join<A>(p.op, acc, part[k][lane]);
    R::st(y, yt, o, red_finish<A>(p, acc, (A)0));
}

/* x as [outer][R][C]: C kept and contiguous, R reduced with stride C (the
 * squeeze-excitation pool over H, W of a channels-last [N, H, W, C]).
 * Lanes take VEC channels (16 bytes) a load, the block's rows of lanes
 * split R; with more than one split (gridDim.y) each writes float partials
 * to ws and reduce_rows_join finishes. */
constexpr int RED_SPLIT_MAX = 32;
constexpr int RED_ROWS_THREADS = 256;

struct red_rows {
    int64_t outer, r, c;
    int lanes, chunks, rows_per_split;
};

template <typename T, int VEC>
__global__ void __launch_bounds__(RED_ROWS_THREADS)
    reduce_rows_kernel(const T *__restrict__ x, void *y, kiln_dtype yt, float *ws, const kc_reduce p,
                       const red_rows g) {
    struct alignas(VEC * sizeof(T)) pack { T v[VEC]; };
    __shared__ float part[RED_ROWS_THREADS][VEC + 1];
    const int tx = threadIdx.x % g.lanes, ty = threadIdx.x / g.lanes;
    const int nr = RED_ROWS_THREADS / g.lanes;
    const int64_t outer = blockIdx.x / g.chunks;
    const int64_t c = ((int64_t)(blockIdx.x % g.chunks) * g.lanes + tx) * VEC;
    const bool live = c < g.c && ty < nr;
    float acc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; v++)
        acc[v] = red_init<float>(p.op);
    if (live) {
        const int64_t r0 = (int64_t)blockIdx.y * g.rows_per_split;
        const int64_t r1 = min(g.r, r0 + g.rows_per_split);
        const T *base = x + outer * g.r * g.c + c;
#pragma unroll 4
        for (int64_t r = r0 + ty; r < r1; r += nr) {
            pack pk = *reinterpret_cast<const pack *>(base + r * g.c);
#pragma unroll
            for (int v = 0; v < VEC; v++)
                acc[v] = red_fold<float>(p.op, acc[v], kc_io<T>::ld(pk.v, v), 0.f);
        }
    }
#pragma unroll
    for (int v = 0; v < VEC; v++)
        part[threadIdx.x][v] = acc[v];
    __syncthreads();
    if (ty != 0 || !live)
        return;
    for (int k = 1; k < nr; k++)
#pragma unroll
        for (int v = 0; v < VEC; v++)
            acc[v] = red_join<float>(p.op, acc[v], part[k * g.lanes + tx][v]);
    const int64_t o = outer * g.c + c;
#pragma unroll
    for (int v = 0; v < VEC; v++) {
        if (c + v >= g.c)
            break;
        if (gridDim.y == 1)
            red_st_f(y, yt, o + v, red_finish<float>(p, acc[v], 0.f));
        else
            ws[(int64_t)blockIdx.y * p.n_out + o + v] = acc[v];
    }
}

__global__ void reduce_rows_join(const float *__restrict__ ws, int splits, void *y, kiln_dtype yt,
                                 const kc_reduce p) {
    const int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (o >= p.n_out)
        return;
    float acc = ws[o];
    for (int k = 1; k < splits; k++)
        acc = red_join<float>(p.op, acc, ws[(int64_t)k * p.n_out + o]);
    red_st_f(y, yt, o, red_finish<float>(p, acc, 0.f));
}

/* Whether the reduction is the [outer][R][C] form; fills g's dims. */
static bool red_rows_form(const kc_reduce *p, red_rows *g) {
    if (p->n_red != 1 || p->n_keep < 1 || p->n_keep > 2 || p->keep_stride[p->n_keep - 1] != 1 ||
        p->op == KC_RED_LOG_SUM_EXP)
        return false;
    g->c = p->keep_dims[p->n_keep - 1];
    g->r = p->red_dims[0];
    g->outer = p->n_keep == 2 ? p->keep_dims[0] : 1;
    if (p->red_stride[0] != g->c || (p->n_keep == 2 && p->keep_stride[0] != g->r * g->c))
        return false;
    return g->c >= 8 && g->r >= 64 && p->n_out < 132 * 256;
}

template <typename T>
static cudaError_t red_rows_launch(const void *x, void *y, kiln_dtype yt, const kc_reduce *p,
                                   red_rows g, void *ws, size_t ws_size, cudaStream_t stream) {
    constexpr int VEC = 16 / sizeof(T);
    bool wide = g.c % VEC == 0 && (uintptr_t)x % 16 == 0;
    int64_t cv = wide ? g.c / VEC : g.c;
    g.lanes = (int)(cv < 32 ? cv : 32);
    g.chunks = (int)((cv + g.lanes - 1) / g.lanes);
    int nr = RED_ROWS_THREADS / g.lanes;
    int64_t blocks = g.outer * g.chunks;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    /* splits of R to fill the chip four times over, each of at least four
     * rounds of the block's rows, as the workspace allows */
    int64_t splits = (132 * 4 + blocks - 1) / blocks;
    int64_t most = g.r / ((int64_t)nr * 4);
    if (splits > most)
        splits = most;
    if (splits > RED_SPLIT_MAX)
        splits = RED_SPLIT_MAX;
    if (splits < 1 || !ws || ws_size < (size_t)splits * (size_t)p->n_out * sizeof(float))
        splits = 1;
    g.rows_per_split = (int)((g.r + splits - 1) / splits);
    dim3 grid((unsigned)blocks, (unsigned)splits);
    if (wide)
        reduce_rows_kernel<T, VEC><<<grid, RED_ROWS_THREADS, 0, stream>>>((const T *)x, y, yt, (float *)ws, *p, g);
    else
        reduce_rows_kernel<T, 1><<<grid, RED_ROWS_THREADS, 0, stream>>>((const T *)x, y, yt, (float *)ws, *p, g);
    if (splits > 1)
        reduce_rows_join<<<(unsigned)((p->n_out + 255) / 256), 256, 0, stream>>>((const float *)ws, (int)splits,
                                                                                y, yt, *p);
    return cudaGetLastError();
}

extern "C" size_t kc_reduce_workspace(int64_t n_out) {
    if (n_out <= 0 || n_out >= 132 * 256)
        return 0;
    return (size_t)RED_SPLIT_MAX * (size_t)n_out * sizeof(float);
}

__device__ __forceinline__ long long red_fold_i(int op, long long a, long long v) {
    typedef unsigned long long u;
    switch (op) {
    case KC_RED_MAX: return v > a ? v : a;
    case KC_RED_MIN: return v < a ? v : a;
    case KC_RED_PROD: return (long long)((u)a * (u)v);
    default: return (long long)((u)a + (u)v);
    }
}

__global__ void reduce_int_kernel(const void *x, kiln_dtype xt, void *y, kiln_dtype yt,
                                  const kc_reduce p) {
    typedef unsigned long long u;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= p.n_out)
        return;
    const int64_t base = red_base(p, warp);
    long long acc = p.op == KC_RED_PROD ? 1 : p.op == KC_RED_MAX ? p.ilo : p.op == KC_RED_MIN ? p.ihi : 0;
    for (int64_t j = lane; j < p.n_red_total; j += 32) {
        long long v = kc_ld_i(x, xt, base + red_off(p, j));
        if (p.op == KC_RED_L1)
            v = v < 0 ? (long long)(0ull - (u)v) : v;
        else if (p.op == KC_RED_SUM_SQUARE)
            v = (long long)((u)v * (u)v);
        acc = red_fold_i(p.op, acc, v);
    }
    for (int o = 16; o > 0; o >>= 1)
        acc = red_fold_i(p.op, acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if (lane == 0) {
        if (p.op == KC_RED_MEAN && p.n_red_total > 0)
            acc /= p.n_red_total;
        kc_st_i(y, yt, warp, acc);
    }
}

extern "C" cudaError_t kc_reduce_run(const void *x, kiln_dtype xt, void *y, kiln_dtype yt,
                                     const kc_reduce *p, void *ws, size_t ws_size,
                                     cudaStream_t stream) {
    if (!p || p->n_keep < 0 || p->n_keep > KC_MAX_DIMS || p->n_red < 0 || p->n_red > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    if (p->n_out <= 0)
        return cudaSuccess;
    if (!y || (!x && p->n_red_total > 0))
        return cudaErrorInvalidValue;
    int64_t threads = p->n_out * 32;
    int64_t blocks = (threads + 255) / 256;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    bool int_in = xt == KILN_DTYPE_INT8 || xt == KILN_DTYPE_UINT8 || xt == KILN_DTYPE_INT16 ||
                  xt == KILN_DTYPE_UINT16 || xt == KILN_DTYPE_INT32 || xt == KILN_DTYPE_UINT32 ||
                  xt == KILN_DTYPE_INT64 || xt == KILN_DTYPE_UINT64 || xt == KILN_DTYPE_BOOL;
    bool exact = p->op != KC_RED_L2 && p->op != KC_RED_LOG_SUM && p->op != KC_RED_LOG_SUM_EXP;
    /* the last dim kept and wide, outputs enough to fill the chip: a thread
     * an output reads coalesced */
    bool cols = p->n_keep > 0 && p->keep_stride[p->n_keep - 1] == 1 &&
                p->keep_dims[p->n_keep - 1] >= 16 && p->n_out >= 132 * 256 && kc_fast_paths();
    red_rows g;
    if (kc_fast_paths() && red_rows_form(p, &g)) {
        switch (xt) {
        case KILN_DTYPE_FLOAT: return red_rows_launch<float>(x, y, yt, p, g, ws, ws_size, stream);
        case KILN_DTYPE_FLOAT16: return red_rows_launch<__half>(x, y, yt, p, g, ws, ws_size, stream);
        case KILN_DTYPE_BFLOAT16:
            return red_rows_launch<__nv_bfloat16>(x, y, yt, p, g, ws, ws_size, stream);
        default: break;
        }
    }
    bool strip = p->n_keep > 0 && p->keep_stride[p->n_keep - 1] == 1 &&
                 p->keep_dims[p->n_keep - 1] >= 16 && !cols && p->n_red_total >= 256 &&
                 p->op != KC_RED_LOG_SUM_EXP && kc_fast_paths();
    if (strip && !(int_in && exact)) {
        unsigned b = (unsigned)((p->n_out + 31) / 32);
        if (xt == KILN_DTYPE_DOUBLE)
            reduce_strip_kernel<double><<<b, dim3(32, 16), 0, stream>>>(x, xt, y, yt, *p);
        else
            reduce_strip_kernel<float><<<b, dim3(32, 16), 0, stream>>>(x, xt, y, yt, *p);
    } else if (cols && !(int_in && exact)) {
        unsigned b = (unsigned)((p->n_out + 255) / 256);
        if (xt == KILN_DTYPE_DOUBLE)
            reduce_cols_kernel<double><<<b, 256, 0, stream>>>(x, xt, y, yt, *p);
        else
            reduce_cols_kernel<float><<<b, 256, 0, stream>>>(x, xt, y, yt, *p);
    } else if (int_in && exact)
        reduce_int_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, xt, y, yt, *p);
    else if (xt == KILN_DTYPE_DOUBLE)
        reduce_kernel<double><<<(unsigned)blocks, 256, 0, stream>>>(x, xt, y, yt, *p);
    else
        reduce_kernel<float><<<(unsigned)blocks, 256, 0, stream>>>(x, xt, y, yt, *p);
    return cudaGetLastError();
}

/* ---------------- pooling ---------------- */

__global__ void pool_kernel(const void *x, void *y, kiln_dtype dt, int64_t *indices,
                            const kc_pool p, int64_t total) {
    const int64_t in_size = p.in[0] * p.in[1] * p.in[2];
    const int64_t out_size = p.out[0] * p.out[1] * p.out[2];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        /* channels-last: i = (pl * out_size + o) * C + ch */
        const int64_t ch = i % p.channels, j = i / p.channels;
        int64_t pl = j / out_size, o = j % out_size;
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
                        float v = kc_ld_f(x, dt, (plane + off) * p.channels + ch);
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
        if (dt == KILN_DTYPE_INT8 || dt == KILN_DTYPE_UINT8) /* 8-bit MaxPool: acc is exact */
            kc_st_i(y, dt, i, best < 0 ? 0 : (long long)acc);
        else
            kc_st_f(y, dt, i, acc);
        if (indices)
            indices[i] = best < 0 ? plane : plane + best;
    }
}

/* Channels-last 2-D pooling on packs of 16 bytes: one thread owns V channels
 * of one output pixel, so every load and store is one coalesced vector. */
template <typename T>
__global__ void pool_nhwc_kernel(const T *__restrict__ x, T *__restrict__ y, const kc_pool p,
                                 int64_t total) {
    constexpr int V = 16 / sizeof(T);
    typedef kc_pack<T, V> TP;
    const int cv = (int)(p.channels / V);
    const int ih = (int)p.in[1], iw = (int)p.in[2], oh = (int)p.out[1], ow = (int)p.out[2];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % cv);
        int64_t pix = i / cv;
        const int q = (int)(pix % ow);
        pix /= ow;
        const int r = (int)(pix % oh);
        const int64_t n = pix / oh;
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; k++)
            acc[k] = p.max ? -INFINITY : 0.f;
        int count = 0;
        const int h0 = r * (int)p.stride[1] - (int)p.pad0[1];
        const int w0 = q * (int)p.stride[2] - (int)p.pad0[2];
        for (int kh = 0; kh < (int)p.kernel[1]; kh++) {
            const int h = h0 + kh * (int)p.dil[1];
            const bool hin = h >= 0 && h < ih;
            const bool hpad = h >= -(int)p.pad0[1] && h < ih + (int)p.pad1[1];
            for (int kw = 0; kw < (int)p.kernel[2]; kw++) {
                const int w = w0 + kw * (int)p.dil[2];
                if (hin && w >= 0 && w < iw) {
                    TP v = reinterpret_cast<const TP *>(x)[((n * ih + h) * iw + w) * cv + c];
#pragma unroll
                    for (int k = 0; k < V; k++)
                        acc[k] = p.max ? fmaxf(acc[k], kc_tof(v.v[k])) : acc[k] + kc_tof(v.v[k]);
                    count++;
                } else if (p.include_pad && hpad && w >= -(int)p.pad0[2] && w < iw + (int)p.pad1[2]) {
                    count++;
                }
            }
        }
        TP o;
#pragma unroll
        for (int k = 0; k < V; k++)
            o.v[k] = kc_fromf<T>(p.max ? acc[k] : (count ? acc[k] / (float)count : 0.f));
        reinterpret_cast<TP *>(y)[i] = o;
    }
}

template <typename T>
static cudaError_t pool_nhwc(const void *x, void *y, const kc_pool *p, cudaStream_t stream) {
    int64_t total = p->planes * p->out[1] * p->out[2] * (p->channels / (16 / (int64_t)sizeof(T)));
    pool_nhwc_kernel<T><<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(
        (const T *)x, (T *)y, *p, total);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_pool_run(const void *x, void *y, kiln_dtype dt, int64_t *indices,
                                   const kc_pool *p, cudaStream_t stream) {
    if (!p || p->nsp < 1 || p->nsp > 3)
        return cudaErrorInvalidValue;
    if (p->channels < 1 || (p->channels > 1 && indices))
        return cudaErrorInvalidValue;
    int64_t total = p->planes * p->out[0] * p->out[1] * p->out[2] * p->channels;
    if (total <= 0)
        return cudaSuccess;
    if (!x || !y)
        return cudaErrorInvalidValue;
    /* channels-last 2-D with whole 16-byte packs of channels and aligned rows */
    size_t es = kiln_dtype_size(dt);
    bool packs = p->channels > 1 && p->nsp == 2 && p->in[0] == 1 && !indices &&
                 ((uintptr_t)x % 16) == 0 && ((uintptr_t)y % 16) == 0 &&
                 (p->channels * (int64_t)es) % 16 == 0 && p->in[1] < (1 << 30) && p->in[2] < (1 << 30);
    if (packs && dt == KILN_DTYPE_FLOAT16)
        return pool_nhwc<__half>(x, y, p, stream);
    if (packs && dt == KILN_DTYPE_BFLOAT16)
        return pool_nhwc<__nv_bfloat16>(x, y, p, stream);
    if (packs && dt == KILN_DTYPE_FLOAT)
        return pool_nhwc<float>(x, y, p, stream);
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
