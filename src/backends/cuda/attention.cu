/* attention.cu - fused multi-head attention (attention.cuh).
 *
 * Direct tensor-core kernel (every dim a multiple of 16, aligned rows): see
 * attn_direct_kernel below. Staged tensor-core kernel (float16 / bfloat16,
 * head dims multiples of 16 up to 128, up to 512 keys, any Sq and Sk): one
 * block per (query tile of up to 64 rows, head, batch),
 * four warps of 16 query rows. The block copies the head's K and V rows into
 * shared memory (zero rows pad the keys to a multiple of 16); each warp then
 * computes its 16 x Sk scores with WMMA (float accumulation), applies scale
 * and mask and an exact softmax in float in shared memory, and multiplies
 * the probabilities (rounded to the input type) by V with WMMA. Q, K, V and
 * Y are read and written in their [B, S, H, D] layout: no transposes, and
 * the [B, H, Sq, Sk] scores never reach memory.
 *
 * General kernel (any real type and head dims up to 256, any key count):
 * one warp per query row, one pass over the keys with a running max and sum
 * (online softmax), float arithmetic throughout. */
#include <cuda_pipeline.h>
#include <mma.h>

#include "attention.cuh"

/* The K/V head that query head h reads (grouped-query attention). */
__device__ __forceinline__ int64_t att_kvh(const kc_attn &a, int64_t h) {
    return a.group > 1 ? h / a.group : h;
}

/* Batch and head strides of Q, K, V (attention.cuh: 0 is the [B, S, H, D]
 * rows' own). */
__host__ __device__ __forceinline__ int64_t att_qb(const kc_attn &a) { return a.qbatch ? a.qbatch : a.sq * a.qrow; }
__host__ __device__ __forceinline__ int64_t att_kb(const kc_attn &a) { return a.kbatch ? a.kbatch : a.sk * a.krow; }
__host__ __device__ __forceinline__ int64_t att_vb(const kc_attn &a) { return a.vbatch ? a.vbatch : a.sk * a.vrow; }
__host__ __device__ __forceinline__ int64_t att_qh(const kc_attn &a) { return a.qhead ? a.qhead : a.d; }
__host__ __device__ __forceinline__ int64_t att_kh(const kc_attn &a) { return a.khead ? a.khead : a.d; }
__host__ __device__ __forceinline__ int64_t att_vh(const kc_attn &a) { return a.vhead ? a.vhead : a.dv; }

/* Whether every batch and head stride is a multiple of m elements (the
 * vector loads' alignment, as the row strides'). */
static bool att_strides_mult(const kc_attn *a, int64_t m) {
    return att_qb(*a) % m == 0 && att_kb(*a) % m == 0 && att_vb(*a) % m == 0 &&
           att_qh(*a) % m == 0 && att_kh(*a) % m == 0 && att_vh(*a) % m == 0;
}

/* Whether Q, K and V are [B, S, H, D] rows (any row stride), the layout
 * every kernel but the general one addresses. */
static bool att_rows_plain(const kc_attn *a) {
    return att_qb(*a) == a->sq * a->qrow && att_kb(*a) == a->sk * a->krow &&
           att_vb(*a) == a->sk * a->vrow && att_qh(*a) == a->d && att_kh(*a) == a->d &&
           att_vh(*a) == a->dv;
}
#include "kc_dev.cuh"

using namespace nvcuda;

#define ATT_WARPS 4
#define ATT_TC_MAX_SMEM (200 * 1024)

/* Shared memory of the tensor-core kernel, in bytes from the start. */
typedef struct att_layout {
    int skp, ldk, ldv, ldq, lds, ldp;
    size_t k_off, v_off, warp_off, warp_bytes, q_off, s_off, p_off, m_off, total;
} att_layout;

static __host__ __device__ size_t att_align(size_t v) { return (v + 31u) & ~(size_t)31u; }

static __host__ __device__ att_layout att_plan(int sk, int d, int dv) {
    att_layout L;
    L.skp = (sk + 15) / 16 * 16;
    L.ldk = d + 8;
    L.ldv = dv + 8;
    L.ldq = d + 8;
    L.lds = (L.skp > dv ? L.skp : dv) + 4; /* floats */
    L.ldp = L.skp + 8;
    L.k_off = 0;
    L.v_off = att_align(L.k_off + (size_t)L.skp * L.ldk * 2);
    L.warp_off = att_align(L.v_off + (size_t)L.skp * L.ldv * 2);
    L.q_off = 0;
    L.s_off = att_align(L.q_off + (size_t)16 * L.ldq * 2);
    L.p_off = att_align(L.s_off + (size_t)16 * L.lds * 4);
    L.m_off = att_align(L.p_off + (size_t)16 * L.ldp * 2);
    L.warp_bytes = att_align(L.m_off + (size_t)L.skp * 4);
    L.total = L.warp_off + ATT_WARPS * L.warp_bytes; /* at most ATT_WARPS warps a block */
    return L;
}

template <typename T> __device__ __forceinline__ T att_from(float v);
template <> __device__ __forceinline__ __half att_from<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 att_from<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* A warp's 16 score rows (float, row r at Ss + r * lds) into unnormalized
 * probabilities exp(s - max) in Ps (rounded to T, always in [0, 1]) and
 * each row's 1 / sum in rinv: two lanes a row, interleaved keys. Keys from
 * sk to skp get probability 0; rows past Sq get zeros. `mrow` is the mask
 * row in shared memory when the mask is the same for every head and query
 * (BERT's padding mask), else the mask is read per element. */
template <typename T>
__device__ __forceinline__ void att_softmax16(float *Ss, int lds, T *Ps, int ldp, int sk, int skp,
                                              float *rinv, const float *mrow, const void *mask,
                                              const kc_attn &a, int64_t b, int64_t h, int64_t r0,
                                              int lane) {
    const int r = lane / 2, half = lane % 2;
    const int64_t qi = r0 + r;
    const bool live = qi < a.sq;
    float *srow = Ss + r * lds;
    float mx = -INFINITY;
    if (mrow) {
#pragma unroll 4
        for (int j = half; j < sk; j += 2) {
            float s = srow[j] * a.scale + mrow[j];
            s = a.causal && j > qi + (a.sk - a.sq) ? -INFINITY : s;
            srow[j] = s;
            mx = fmaxf(mx, s);
        }
    } else if (mask && live) { /* rows past Sq have no mask row */
        const int64_t mbase = kc_attn_mask_b(a, b) + h * a.mstride[1] + qi * a.mstride[2];
#pragma unroll 4
        for (int j = half; j < sk; j += 2) {
            float s = srow[j] * a.scale + kc_ld_f(mask, a.mask_dt, mbase + j * a.mstride[3]);
            s = a.causal && j > qi + (a.sk - a.sq) ? -INFINITY : s;
            srow[j] = s;
            mx = fmaxf(mx, s);
        }
    } else {
#pragma unroll 4
        for (int j = half; j < sk; j += 2) {
            float s = srow[j] * a.scale;
            s = a.causal && j > qi + (a.sk - a.sq) ? -INFINITY : s;
            srow[j] = s;
            mx = fmaxf(mx, s);
        }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    if (mx == -INFINITY) /* every key masked: probabilities 0, the row 0 */
        mx = 0.f;
    float sum = 0.f;
#pragma unroll 4
    for (int j = half; j < skp; j += 2) {
        float e = j < sk && live ? __expf(srow[j] - mx) : 0.f;
        Ps[r * ldp + j] = att_from<T>(e);
        sum += e;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (half == 0) /* every key masked: a row of zeros, as the reference gives */
        rinv[r] = live && sum > 0.f ? 1.f / sum : 0.f;
}

/* O (16 x dv, float, into Os) = P (16 x keys, row-major, ld ldp) times V
 * (keys x dv, row-major, ld ldv; shared or global memory). */
template <typename T>
__device__ __forceinline__ void att_pv16(const T *Ps, int ldp, const T *V, unsigned ldv, int keys,
                                         int dv, float *Os, int lds) {
    for (int n0 = 0; n0 < dv; n0 += 16) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
        for (int k0 = 0; k0 < keys; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
            wmma::load_matrix_sync(fa, Ps + k0, ldp);
            wmma::load_matrix_sync(fb, V + (int64_t)k0 * ldv + n0, ldv);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(Os + n0, acc, lds, wmma::mem_row_major);
    }
}

/* The mask row of batch b in shared memory, when the mask is one row per
 * batch (strides 0 over heads and queries); NULL otherwise. */
__device__ __forceinline__ const float *att_mask_row(float *dst, const void *mask, const kc_attn &a,
                                                     int64_t b, int lane) {
    if (!mask || a.mstride[1] != 0 || a.mstride[2] != 0)
        return NULL;
    for (int j = lane; j < a.sk; j += 32)
        dst[j] = kc_ld_f(mask, a.mask_dt, kc_attn_mask_b(a, b) + j * a.mstride[3]);
    __syncwarp();
    return dst;
}

template <typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_tc_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                   const void *__restrict__ mask, T *__restrict__ y, const kc_attn a) {
    extern __shared__ __align__(32) unsigned char smem[];
    const att_layout L = att_plan((int)a.sk, (int)a.d, (int)a.dv);
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const int d = (int)a.d, dv = (int)a.dv, sk = (int)a.sk, H = (int)a.h;
    T *Ks = reinterpret_cast<T *>(smem + L.k_off);
    T *Vs = reinterpret_cast<T *>(smem + L.v_off);
    /* the head's K and V rows and each warp's Q rows, 16 bytes at a time
     * through asynchronous copies (every copy in flight at once; the loads'
     * latency is paid once, not per iteration); zero rows pad the keys and
     * the queries past Sq */
    const int kv8 = d / 8, vv8 = dv / 8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int idx = threadIdx.x; idx < L.skp * kv8; idx += blockDim.x) {
        int j = idx / kv8, c = idx % kv8;
        T *dst = Ks + j * L.ldk + c * 8;
        if (j < sk)
            __pipeline_memcpy_async(dst, k + b * att_kb(a) + j * a.krow + att_kvh(a, h) * att_kh(a) + c * 8, 16);
        else
            *reinterpret_cast<uint4 *>(dst) = zero;
    }
    for (int idx = threadIdx.x; idx < L.skp * vv8; idx += blockDim.x) {
        int j = idx / vv8, c = idx % vv8;
        T *dst = Vs + j * L.ldv + c * 8;
        if (j < sk)
            __pipeline_memcpy_async(dst, v + b * att_vb(a) + j * a.vrow + att_kvh(a, h) * att_vh(a) + c * 8, 16);
        else
            *reinterpret_cast<uint4 *>(dst) = zero;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t r0 = (int64_t)blockIdx.x * (blockDim.x / 2) + warp * 16; /* 16 rows a warp */
    unsigned char *wbase = smem + L.warp_off + (size_t)warp * L.warp_bytes;
    T *Qs = reinterpret_cast<T *>(wbase + L.q_off);
    float *Ss = reinterpret_cast<float *>(wbase + L.s_off);
    T *Ps = reinterpret_cast<T *>(wbase + L.p_off);
    if (r0 < a.sq)
        for (int idx = lane; idx < 16 * kv8; idx += 32) {
            int r = idx / kv8, c = idx % kv8;
            T *dst = Qs + r * L.ldq + c * 8;
            if (r0 + r < a.sq)
                __pipeline_memcpy_async(dst, q + b * att_qb(a) + (r0 + r) * a.qrow + h * att_qh(a) + c * 8, 16);
            else
                *reinterpret_cast<uint4 *>(dst) = zero;
        }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    if (r0 >= a.sq)
        return;
    /* S = Q K^T: K rows in shared memory are K^T's columns */
    for (int n0 = 0; n0 < L.skp; n0 += 16) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
        for (int k0 = 0; k0 < d; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
            wmma::load_matrix_sync(fa, Qs + k0, L.ldq);
            wmma::load_matrix_sync(fb, Ks + n0 * L.ldk + k0, L.ldk);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(Ss + n0, acc, L.lds, wmma::mem_row_major);
    }
    __syncwarp();
    /* scale, mask, softmax (unnormalized; 1/sum per row, in Q's place) */
    float *rinv = reinterpret_cast<float *>(Qs);
    const float *mrow = att_mask_row(reinterpret_cast<float *>(wbase + L.m_off), mask, a, b, lane);
    att_softmax16<T>(Ss, L.lds, Ps, L.ldp, sk, L.skp, rinv, mrow, mask, a, b, h, r0, lane);
    __syncwarp();
    /* O = P V, staged through the score rows (no longer needed) */
    att_pv16<T>(Ps, L.ldp, Vs, L.ldv, L.skp, dv, Ss, L.lds);
    __syncwarp();
    for (int idx = lane; idx < 16 * dv; idx += 32) {
        int r = idx / dv, c = idx % dv;
        if (r0 + r < a.sq)
            y[((b * a.sq + r0 + r) * H + h) * dv + c] = att_from<T>(Ss[r * L.lds + c] * rinv[r]);
    }
}

/* The direct variant: Q, K and V fragments load straight from global memory
 * (L1 serves the warps of a block that share a head), so shared memory holds
 * only each warp's scores and probabilities and many more warps fit on an SM.
 * Taken when every dim is a multiple of 16 and every row start is 32-byte
 * aligned (WMMA's rule for its pointers). Two warps a block, 16 rows each. */
#define ATT_DIRECT_WARPS 2

static __host__ __device__ size_t att_direct_warp_bytes(int sk, int dv) {
    int lds = (sk > dv ? sk : dv) + 4, ldp = sk + 8;
    /* scores, probabilities, the mask row, 1/sum per row */
    return att_align((size_t)16 * lds * 4) + att_align((size_t)16 * ldp * 2) +
           att_align((size_t)sk * 4) + att_align(16 * 4);
}

template <typename T>
__global__ void __launch_bounds__(ATT_DIRECT_WARPS * 32)
    attn_direct_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                       const void *__restrict__ mask, T *__restrict__ y, const kc_attn a) {
    extern __shared__ __align__(32) unsigned char smem[];
    const int sk = (int)a.sk, d = (int)a.d, dv = (int)a.dv;
    const int lds = (sk > dv ? sk : dv) + 4, ldp = sk + 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const int64_t r0 = (int64_t)blockIdx.x * (ATT_DIRECT_WARPS * 16) + warp * 16;
    if (r0 >= a.sq)
        return;
    unsigned char *wbase = smem + (size_t)warp * att_direct_warp_bytes(sk, dv);
    float *Ss = reinterpret_cast<float *>(wbase);
    T *Ps = reinterpret_cast<T *>(wbase + att_align((size_t)16 * lds * 4));
    float *Ms = reinterpret_cast<float *>((unsigned char *)Ps + att_align((size_t)16 * ldp * 2));
    float *rinv = reinterpret_cast<float *>((unsigned char *)Ms + att_align((size_t)sk * 4));
    const T *qb = q + b * att_qb(a) + r0 * a.qrow + h * att_qh(a);
    const T *kb = k + b * att_kb(a) + att_kvh(a, h) * att_kh(a);
    const T *vb = v + b * att_vb(a) + att_kvh(a, h) * att_vh(a);
    /* S = Q K^T; Q's fragments stay in registers (head dims up to 128) */
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fq[8];
#pragma unroll
    for (int t = 0; t < 8; t++)
        if (t * 16 < d)
            wmma::load_matrix_sync(fq[t], qb + t * 16, (unsigned)a.qrow);
    for (int n0 = 0; n0 < sk; n0 += 16) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int t = 0; t < 8; t++) {
            if (t * 16 < d) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fb, kb + (int64_t)n0 * a.krow + t * 16, (unsigned)a.krow);
                wmma::mma_sync(acc, fq[t], fb, acc);
            }
        }
        wmma::store_matrix_sync(Ss + n0, acc, lds, wmma::mem_row_major);
    }
    __syncwarp();
    const float *mrow = att_mask_row(Ms, mask, a, b, lane);
    att_softmax16<T>(Ss, lds, Ps, ldp, sk, sk, rinv, mrow, mask, a, b, h, r0, lane);
    __syncwarp();
    att_pv16<T>(Ps, ldp, vb, (unsigned)a.vrow, sk, dv, Ss, lds);
    __syncwarp();
    /* Y rows, 8 elements (16 bytes) a store */
    const int c8 = dv / 8;
    for (int idx = lane; idx < 16 * c8; idx += 32) {
        const int r = idx / c8, c = idx % c8;
        struct alignas(16) P8 { T v[8]; } o;
#pragma unroll
        for (int e = 0; e < 8; e++)
            o.v[e] = att_from<T>(Ss[r * lds + c * 8 + e] * rinv[r]);
        *reinterpret_cast<P8 *>(y + ((b * a.sq + r0 + r) * a.h + h) * dv + c * 8) = o;
    }
}

#define ATT_SIMT_REGS 8 /* head dims up to 256 */

/* One warp a query row; keys in chunks of 32, one key a lane: each lane
 * computes its key's score, the chunk updates a running max and sum (online
 * softmax), and the chunk's probabilities are broadcast lane by lane to
 * accumulate V rows (lanes own the output dims lane, lane + 32, ...). */
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_simt_kernel(const void *__restrict__ q, const void *__restrict__ k,
                     const void *__restrict__ v, const void *__restrict__ mask, void *__restrict__ y,
                     const kc_attn a, int64_t rows) {
    __shared__ float qs[ATT_WARPS][32 * ATT_SIMT_REGS];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int64_t row = (int64_t)blockIdx.x * ATT_WARPS + w;
    if (row >= rows)
        return;
    const int64_t b = row / (a.h * a.sq), h = row / a.sq % a.h, i = row % a.sq;
    const int64_t kvh = att_kvh(a, h);
    for (int64_t dd = lane; dd < a.d; dd += 32)
        qs[w][dd] = kc_ld_f(q, a.dt, b * att_qb(a) + i * a.qrow + h * att_qh(a) + dd);
    __syncwarp();
    float o[ATT_SIMT_REGS];
#pragma unroll
    for (int t = 0; t < ATT_SIMT_REGS; t++)
        o[t] = 0.f;
    float m = -INFINITY, l = 0.f;
    const int64_t mrow = kc_attn_mask_b(a, b) + h * a.mstride[1] + i * a.mstride[2];
    for (int64_t j0 = 0; j0 < a.sk; j0 += 32) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < a.sk) {
            const int64_t kb = b * att_kb(a) + j * a.krow + kvh * att_kh(a);
            float dot = 0.f;
            for (int64_t dd = 0; dd < a.d; dd++)
                dot += qs[w][dd] * kc_ld_f(k, a.dt, kb + dd);
            s = dot * a.scale;
            if (a.softcap > 0.f)
                s = a.softcap * tanhf(s / a.softcap);
            if (mask)
                s += kc_ld_f(mask, a.mask_dt, mrow + j * a.mstride[3]);
            if (a.causal && j > i + (a.sk - a.sq)) /* key after the query */
                s = -INFINITY;
        }
        const float mn = fmaxf(m, kc_warp_max(s));
        if (mn == -INFINITY)
            continue; /* every key so far is masked out */
        const float corr = __expf(m - mn);
        const float p = j < a.sk ? __expf(s - mn) : 0.f;
        l = l * corr + kc_warp_sum(p);
#pragma unroll
        for (int t = 0; t < ATT_SIMT_REGS; t++)
            o[t] *= corr;
        const int n = a.sk - j0 < 32 ? (int)(a.sk - j0) : 32;
        for (int jj = 0; jj < n; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            const int64_t vb = b * att_vb(a) + (j0 + jj) * a.vrow + kvh * att_vh(a);
#pragma unroll
            for (int t = 0; t < ATT_SIMT_REGS; t++) {
                int64_t dd = lane + 32 * t;
                if (dd < a.dv)
                    o[t] += pj * kc_ld_f(v, a.dt, vb + dd);
            }
        }
        m = mn;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f; /* every key masked: zeros, as the reference */
#pragma unroll
    for (int t = 0; t < ATT_SIMT_REGS; t++) {
        int64_t dd = lane + 32 * t;
        if (dd < a.dv)
            kc_st_f(y, a.dt, ((b * a.sq + i) * a.h + h) * a.dv + dd, o[t] * inv);
    }
}

/* ---------------- the mma.sync kernel (tactic "mma") ----------------
 *
 * FlashAttention's structure on Hopper's warp-level tensor-core
 * instruction: one block per (tile of 16 * warps query rows, head, batch),
 * 16 query rows a warp. Keys go in chunks of 64: the block stages each
 * chunk's K and V rows in shared memory by asynchronous copies, double
 * buffered (chunk c + 1 loads while chunk c computes). A warp keeps its Q
 * fragments, its 16 x 64 scores and its 16 x D output accumulator in
 * registers: the scores' accumulator layout is exactly the A operand layout
 * of the next product, so P never leaves registers. Softmax is online
 * (running max and sum per row, in float, base 2); the probabilities are
 * rounded to the input type for P V, the sums are kept in float.
 * Head dims 32, 64 or 128 (d = dv), float16 or bfloat16, any Sq and Sk. */
#define MMA_KB 64 /* keys a chunk */
#define MMA_LOG2E 1.4426950408889634f

__device__ __forceinline__ void mma_ldsm_x4(uint32_t *r, const void *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void mma_ldsm_x4_t(uint32_t *r, const void *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* c += a (16 x 16, row) * b (16 x 8, col), float accumulation */
template <typename T>
__device__ __forceinline__ void mma_16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float *c, const uint32_t *a, uint32_t b0,
                                                  uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float *c, const uint32_t *a, uint32_t b0,
                                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The helpers below serve both mma.sync kernels: a warp's 16 query rows
 * against KEYS keys at a time (tiles past `limit` keys are skipped). */

/* The warp's Q fragments (16 x HD) from its rows at Qw in shared memory. */
template <int HD, typename T>
__device__ __forceinline__ void mma_load_q(uint32_t (*qf)[4], const T *Qw, int lane) {
    constexpr int LD = HD + 8;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        mma_ldsm_x4(qf[kk], Qw + (lane % 16) * LD + kk * 16 + (lane / 16) * 8);
}

/* s (16 x KEYS, zeroed first) = Q K^T for the key rows at Kc. */
template <typename T, int HD, int KEYS>
__device__ __forceinline__ void mma_scores(float (*s)[4], const uint32_t (*qf)[4], const T *Kc,
                                           int lane, int limit) {
    constexpr int LD = HD + 8;
#pragma unroll
    for (int i = 0; i < KEYS / 8; i++)
        s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
        for (int np = 0; np < KEYS / 16; np++)
            if (np * 16 < limit) {
                uint32_t bf[4];
                mma_ldsm_x4(bf, Kc + (np * 16 + (lane / 16) * 8 + lane % 8) * LD + kk * 16 +
                                    ((lane / 8) % 2) * 8);
                mma_16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                mma_16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
            }
}

/* o (16 x HD) += P V: the probabilities' accumulators of keys
 * 16kk..16kk+15 are the A fragment; V rows at Vc by transposing loads. */
template <typename T, int HD, int KEYS>
__device__ __forceinline__ void mma_context(float (*o)[4], const float (*s)[4], const T *Vc,
                                            int lane, int limit) {
    constexpr int LD = HD + 8, DT = HD / 8;
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; kk++)
        if (kk * 16 < limit) {
            uint32_t pa[4] = {kc_pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                              kc_pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              kc_pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              kc_pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < DT / 2; dp++) {
                uint32_t bf[4];
                mma_ldsm_x4_t(bf, Vc + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * LD + dp * 16 +
                                      (lane / 16) * 8);
                mma_16816<T>(o[2 * dp], pa, bf[0], bf[1]);
                mma_16816<T>(o[2 * dp + 1], pa, bf[2], bf[3]);
            }
        }
}

/* 2^x for x <= 0 (flushing results below 2^-126 to zero, which the
 * probabilities' rounding to T would do anyway) */
__device__ __forceinline__ float mma_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* s = 2^(s - base) for the lane's rows g (elements 0, 1) and g + 8 (2, 3),
 * each added to its row's partial sum in l; APPROX takes mma_exp2. */
template <int NT, bool APPROX>
__device__ __forceinline__ void mma_exp_rows(float (*s)[4], const float base[2], float l[2]) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[nt][e] = APPROX ? mma_exp2(s[nt][e] - base[e >> 1]) : exp2f(s[nt][e] - base[e >> 1]);
        l[0] += s[nt][0] + s[nt][1];
        l[1] += s[nt][2] + s[nt][3];
    }
}

/* The warp's output rows: o divided by each row's sum (lane quads hold
 * partial sums of rows g and g + 8; every key masked gives zeros, as the
 * reference), staged through Os (16 rows of the warp's own Q) and
 * stored 16 bytes at a time to the first `rows` rows at yw, `ystride`
 * elements apart. */
template <typename T, int HD>
__device__ __forceinline__ void mma_write_rows(const float (*o)[4], float l[2], T *Os, T *yw,
                                               int64_t ystride, int64_t rows, int lane) {
    constexpr int LD = HD + 8, C8 = HD / 8, DT = HD / 8;
    const int g = lane / 4, t = lane % 4;
    kc_quad_row_sum(l);
    const float inv[2] = {l[0] > 0.f ? 1.f / l[0] : 0.f, l[1] > 0.f ? 1.f / l[1] : 0.f};
#pragma unroll
    for (int i = 0; i < DT; i++) {
        *reinterpret_cast<uint32_t *>(Os + g * LD + i * 8 + 2 * t) =
            kc_pack2<T>(o[i][0] * inv[0], o[i][1] * inv[0]);
        *reinterpret_cast<uint32_t *>(Os + (g + 8) * LD + i * 8 + 2 * t) =
            kc_pack2<T>(o[i][2] * inv[1], o[i][3] * inv[1]);
    }
    __syncwarp();
    for (int idx = lane; idx < 16 * C8; idx += 32) {
        const int r = idx / C8, cc = idx % C8;
        if (r < rows)
            *reinterpret_cast<uint4 *>(yw + r * ystride + cc * 8) =
                *reinterpret_cast<const uint4 *>(Os + r * LD + cc * 8);
    }
}

static __host__ __device__ size_t mma_smem(int warps, int hd) {
    return (size_t)(warps * 16 + 4 * MMA_KB) * (hd + 8) * 2 + 2 * MMA_KB * sizeof(float);
}

/* Chunk c of the head's keys into buffer buf: K and V rows by asynchronous
 * copies, zero rows past Sk; the chunk's mask values when the mask is one
 * row per batch. */
template <typename T, int HD>
__device__ __forceinline__ void mma_load_chunk(T *Ks, T *Vs, float *Ms, const T *k, const T *v,
                                               const void *mask, bool rowmask, const kc_attn &a,
                                               int64_t b, int64_t h, int c, int buf) {
    constexpr int LD = HD + 8, C8 = HD / 8;
    const int64_t j0 = (int64_t)c * MMA_KB;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int idx = threadIdx.x; idx < MMA_KB * C8; idx += blockDim.x) {
        const int r = idx / C8, cc = idx % C8;
        const int64_t j = j0 + r;
        T *kd = Ks + (buf * MMA_KB + r) * LD + cc * 8, *vd = Vs + (buf * MMA_KB + r) * LD + cc * 8;
        if (j < a.sk) {
            __pipeline_memcpy_async(kd, k + b * att_kb(a) + j * a.krow + att_kvh(a, h) * att_kh(a) + cc * 8, 16);
            __pipeline_memcpy_async(vd, v + b * att_vb(a) + j * a.vrow + att_kvh(a, h) * att_vh(a) + cc * 8, 16);
        } else {
            *reinterpret_cast<uint4 *>(kd) = zero;
            *reinterpret_cast<uint4 *>(vd) = zero;
        }
    }
    if (rowmask)
        for (int idx = threadIdx.x; idx < MMA_KB; idx += blockDim.x) {
            const int64_t j = j0 + idx;
            Ms[buf * MMA_KB + idx] =
                j < a.sk ? kc_ld_f(mask, a.mask_dt, kc_attn_mask_b(a, b) + j * a.mstride[3]) * MMA_LOG2E
                         : 0.f;
        }
}

#define MMA_MAX_WARPS 8 /* "mma_wide": 128 query rows a block share each K/V chunk */

template <typename T, int HD>
__global__ void __launch_bounds__(MMA_MAX_WARPS * 32)
    attn_mma_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                    const void *__restrict__ mask, T *__restrict__ y, const kc_attn a) {
    constexpr int LD = HD + 8, C8 = HD / 8, NT = MMA_KB / 8, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const int nw = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + nw * 16 * LD;
    T *Vs = Ks + 2 * MMA_KB * LD;
    float *Ms = reinterpret_cast<float *>(Vs + 2 * MMA_KB * LD);
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const int64_t q0 = (int64_t)blockIdx.x * nw * 16;
    const bool rowmask = mask && a.mstride[1] == 0 && a.mstride[2] == 0;
    const int nchunks = (int)((a.sk + MMA_KB - 1) / MMA_KB);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int idx = threadIdx.x; idx < nw * 16 * C8; idx += blockDim.x) {
        const int r = idx / C8, cc = idx % C8;
        T *dst = Qs + r * LD + cc * 8;
        if (q0 + r < a.sq)
            __pipeline_memcpy_async(dst, q + b * att_qb(a) + (q0 + r) * a.qrow + h * att_qh(a) + cc * 8, 16);
        else
            *reinterpret_cast<uint4 *>(dst) = zero;
    }
    mma_load_chunk<T, HD>(Ks, Vs, Ms, k, v, mask, rowmask, a, b, h, 0, 0);
    __pipeline_commit();

    uint32_t qf[HD / 16][4];
    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrun[2] = {-INFINITY, -INFINITY}, lrun[2] = {0.f, 0.f};
    const float sl2 = a.scale * MMA_LOG2E;
    const int64_t rlo = q0 + warp * 16 + g, rhi = rlo + 8;
    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        if (c + 1 < nchunks) {
            mma_load_chunk<T, HD>(Ks, Vs, Ms, k, v, mask, rowmask, a, b, h, c + 1, buf ^ 1);
            __pipeline_commit();
            __pipeline_wait_prior(1);
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();
        if (c == 0)
            mma_load_q<HD>(qf, Qs + warp * 16 * LD, lane);
        const T *Kc = Ks + buf * MMA_KB * LD, *Vc = Vs + buf * MMA_KB * LD;
        /* S = Q K^T, 16 x 64 */
        float s[NT][4];
        mma_scores<T, HD, MMA_KB>(s, qf, Kc, lane, MMA_KB);
        /* scale and mask in base 2; keys past Sk are -inf */
        const int64_t jc = (int64_t)c * MMA_KB;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = nt * 8 + 2 * t + (e & 1);
                const int64_t j = jc + col, row = e < 2 ? rlo : rhi;
                float x = s[nt][e] * sl2;
                if (j >= a.sk)
                    x = -INFINITY;
                else if (rowmask)
                    x += Ms[buf * MMA_KB + col];
                else if (mask && row < a.sq)
                    x += kc_ld_f(mask, a.mask_dt,
                                 kc_attn_mask_b(a, b) + h * a.mstride[1] + row * a.mstride[2] +
                                     j * a.mstride[3]) *
                         MMA_LOG2E;
                if (a.causal && j > row + (a.sk - a.sq)) /* key after the query */
                    x = -INFINITY;
                s[nt][e] = x;
            }
        /* online softmax: the quad of lanes g shares rows g and g + 8 */
        float mx[2] = {mrun[0], mrun[1]};
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
        }
        float base[2], corr[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            base[i] = mx[i] == -INFINITY ? 0.f : mx[i]; /* every key so far masked */
            corr[i] = exp2f(mrun[i] - base[i]);
            mrun[i] = mx[i];
            lrun[i] *= corr[i];
        }
        mma_exp_rows<NT, false>(s, base, lrun);
#pragma unroll
        for (int i = 0; i < DT; i++) {
            o[i][0] *= corr[0];
            o[i][1] *= corr[0];
            o[i][2] *= corr[1];
            o[i][3] *= corr[1];
        }
        /* O += P V */
        mma_context<T, HD, MMA_KB>(o, s, Vc, lane, MMA_KB);
        __syncthreads(); /* the next chunk's copies overwrite this buffer */
    }
    const int64_t row0 = q0 + warp * 16;
    mma_write_rows<T, HD>(o, lrun, Qs + warp * 16 * LD, y + ((b * a.sq + row0) * a.h + h) * HD,
                          a.h * HD, a.sq - row0, lane);
}

/* Whether the mma kernel takes these tensors: float16 / bfloat16, d = dv in
 * {32, 64, 128}, 16-byte aligned rows and head offsets. */
extern "C" int kc_attn_mma_shapes(const kc_attn *a) {
    if (a->dt != KILN_DTYPE_FLOAT16 && a->dt != KILN_DTYPE_BFLOAT16)
        return 0;
    if (a->d != a->dv || (a->d != 32 && a->d != 64 && a->d != 128) || a->sk < 1)
        return 0;
    return a->b <= 65535 && a->h <= 65535;
}

static bool mma_ok(const void *q, const void *k, const void *v, const void *y, const kc_attn *a) {
    if (!kc_attn_mma_shapes(a))
        return false;
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)y) % 16)
        return false;
    return a->qrow % 8 == 0 && a->krow % 8 == 0 && a->vrow % 8 == 0 && att_strides_mult(a, 8);
}

template <typename T, int HD>
static cudaError_t launch_mma_hd(const void *q, const void *k, const void *v, const void *mask,
                                 void *y, const kc_attn *a, int warps, cudaStream_t stream) {
    /* fewer warps a block when the grid would not fill the chip twice */
    while (warps > 1 && a->b * a->h * ((a->sq + warps * 16 - 1) / (warps * 16)) < 2 * 132)
        warps /= 2;
    dim3 grid((unsigned)((a->sq + warps * 16 - 1) / (warps * 16)), (unsigned)a->h, (unsigned)a->b);
    attn_mma_kernel<T, HD><<<grid, warps * 32, mma_smem(warps, HD), stream>>>(
        (const T *)q, (const T *)k, (const T *)v, mask, (T *)y, *a);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t launch_mma(const void *q, const void *k, const void *v, const void *mask,
                              void *y, const kc_attn *a, cudaStream_t stream) {
    int warps = a->kernel == KC_ATT_MMA_WIDE ? MMA_MAX_WARPS : ATT_WARPS;
    if (a->d == 32)
        return launch_mma_hd<T, 32>(q, k, v, mask, y, a, warps, stream);
    if (a->d == 64)
        return launch_mma_hd<T, 64>(q, k, v, mask, y, a, warps, stream);
    return launch_mma_hd<T, 128>(q, k, v, mask, y, a, warps, stream);
}

template <typename T> static cudaError_t setup_mma(void) {
    cudaError_t e = cudaFuncSetAttribute(attn_mma_kernel<T, 32>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)mma_smem(MMA_MAX_WARPS, 32));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_mma_kernel<T, 64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)mma_smem(MMA_MAX_WARPS, 64));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_mma_kernel<T, 128>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)mma_smem(MMA_MAX_WARPS, 128));
    return e;
}

/* Single-pass mma.sync kernel for short key sets (Sk <= 128, the encoders'
 * usual 128 tokens): the block stages Q with all of K first and V second
 * (two groups of asynchronous copies, so the scores start while V is still
 * in flight); each warp computes its 16 x 128 scores in registers at once,
 * takes an exact softmax over them (no running rescale), and multiplies by
 * V. NW warps of 16 query rows a block; head dims 32 or 64 (d = dv). */
#define MMA1_KEYS 128

static __host__ __device__ size_t mma1_smem(int warps, int hd) {
    return (size_t)(warps * 16 + 2 * MMA1_KEYS) * (hd + 8) * 2 + MMA1_KEYS * sizeof(float);
}

/* GENERAL: a mask that varies by head or query, read per score; otherwise
 * the mask is one row per batch (or absent), folded into Ms once. */
template <typename T, int HD, int NW, int MINB, bool GENERAL>
__global__ void __launch_bounds__(NW * 32, MINB)
    attn_mma1_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                     const void *__restrict__ mask, T *__restrict__ y, const kc_attn a) {
    constexpr int LD = HD + 8, C8 = HD / 8, NT = MMA1_KEYS / 8, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + NW * 16 * LD;
    T *Vs = Ks + MMA1_KEYS * LD;
    float *Ms = reinterpret_cast<float *>(Vs + MMA1_KEYS * LD);
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const int q0 = blockIdx.x * NW * 16;
    const int sq = (int)a.sq, sk = (int)a.sk;
    const int skp = (sk + 15) / 16 * 16; /* keys in whole 16-key tiles */
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const T *qb = q + b * att_qb(a) + q0 * a.qrow + h * att_qh(a);
    const T *kb = k + b * att_kb(a) + att_kvh(a, h) * att_kh(a);
    const T *vb = v + b * att_vb(a) + att_kvh(a, h) * att_vh(a);
    /* the key rows of K or V into shared memory; zero rows past Sk */
    auto load_keys = [&](T *dst0, const T *src, int64_t stride) {
        for (int idx = threadIdx.x; idx < skp * C8; idx += NW * 32) {
            const int j = idx / C8, cc = idx % C8;
            T *dst = dst0 + j * LD + cc * 8;
            if (j < sk)
                __pipeline_memcpy_async(dst, src + j * stride + cc * 8, 16);
            else
                *reinterpret_cast<uint4 *>(dst) = zero;
        }
    };
    for (int idx = threadIdx.x; idx < NW * 16 * C8; idx += NW * 32) {
        const int r = idx / C8, cc = idx % C8;
        T *dst = Qs + r * LD + cc * 8;
        if (q0 + r < sq)
            __pipeline_memcpy_async(dst, qb + r * a.qrow + cc * 8, 16);
        else
            *reinterpret_cast<uint4 *>(dst) = zero;
    }
    load_keys(Ks, kb, a.krow);
    __pipeline_commit();
    load_keys(Vs, vb, a.vrow);
    __pipeline_commit();
    /* per key: -inf past Sk, else the row mask in base 2 (0 without one) */
    for (int j = threadIdx.x; j < MMA1_KEYS; j += NW * 32)
        Ms[j] = j >= sk ? -INFINITY
                        : (!GENERAL && mask ? kc_ld_f(mask, a.mask_dt, kc_attn_mask_b(a, b) + j * a.mstride[3]) *
                                                  MMA_LOG2E
                                            : 0.f);
    __pipeline_wait_prior(1); /* Q and K */
    __syncthreads();
    uint32_t qf[HD / 16][4];
    mma_load_q<HD>(qf, Qs + warp * 16 * LD, lane);
    /* S = Q K^T, 16 x 128: tiles past the keys stay unused */
    float s[NT][4];
    mma_scores<T, HD, MMA1_KEYS>(s, qf, Ks, lane, skp);
    /* scale and mask in base 2, an exact softmax */
    const float sl2 = a.scale * MMA_LOG2E;
    const int rlo = q0 + warp * 16 + g, rhi = rlo + 8;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float2 m2 = *reinterpret_cast<const float2 *>(Ms + nt * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = fmaf(s[nt][e], sl2, (e & 1) ? m2.y : m2.x);
            if (a.causal && nt * 8 + 2 * t + (e & 1) > (e < 2 ? rlo : rhi) + (int)(a.sk - a.sq))
                x = -INFINITY; /* key after the query */
            if (GENERAL && mask) {
                const int col = nt * 8 + 2 * t + (e & 1), row = e < 2 ? rlo : rhi;
                if (row < sq && col < sk)
                    x += kc_ld_f(mask, a.mask_dt,
                                 kc_attn_mask_b(a, b) + h * a.mstride[1] + row * a.mstride[2] +
                                     col * a.mstride[3]) *
                         MMA_LOG2E;
            }
            s[nt][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    }
    float sum[2] = {0.f, 0.f};
    kc_quad_row_max(mx);
    mma_exp_rows<NT, true>(s, mx, sum);
    __pipeline_wait_prior(0); /* V */
    __syncthreads();
    /* O = P V */
    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    mma_context<T, HD, MMA1_KEYS>(o, s, Vs, lane, skp);
    const int row0 = q0 + warp * 16;
    mma_write_rows<T, HD>(o, sum, Qs + warp * 16 * LD, y + ((b * a.sq + row0) * a.h + h) * HD,
                          a.h * HD, sq - row0, lane);
}

/* Whether the single-pass kernel takes these shapes: as the mma kernel,
 * with d = dv in {32, 64} and at most 128 keys. */
extern "C" int kc_attn_mma1_shapes(const kc_attn *a) {
    return kc_attn_mma_shapes(a) && a->d <= 64 && a->sk <= MMA1_KEYS;
}

#define MMA1_KERNEL(T, HD, NW, GEN) attn_mma1_kernel<T, HD, NW, (NW == 4 ? 4 : 2), GEN>

template <typename T, int HD, int NW>
static cudaError_t launch_mma1_hd(const void *q, const void *k, const void *v, const void *mask,
                                  void *y, const kc_attn *a, cudaStream_t stream) {
    dim3 grid((unsigned)((a->sq + NW * 16 - 1) / (NW * 16)), (unsigned)a->h, (unsigned)a->b);
    if (mask && (a->mstride[1] != 0 || a->mstride[2] != 0))
        MMA1_KERNEL(T, HD, NW, true)<<<grid, NW * 32, mma1_smem(NW, HD), stream>>>(
            (const T *)q, (const T *)k, (const T *)v, mask, (T *)y, *a);
    else
        MMA1_KERNEL(T, HD, NW, false)<<<grid, NW * 32, mma1_smem(NW, HD), stream>>>(
            (const T *)q, (const T *)k, (const T *)v, mask, (T *)y, *a);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t launch_mma1(const void *q, const void *k, const void *v, const void *mask,
                               void *y, const kc_attn *a, cudaStream_t stream) {
    bool wide = a->kernel == KC_ATT_MMA1_WIDE;
    if (a->d == 32)
        return wide ? launch_mma1_hd<T, 32, 8>(q, k, v, mask, y, a, stream)
                    : launch_mma1_hd<T, 32, 4>(q, k, v, mask, y, a, stream);
    return wide ? launch_mma1_hd<T, 64, 8>(q, k, v, mask, y, a, stream)
                : launch_mma1_hd<T, 64, 4>(q, k, v, mask, y, a, stream);
}

template <typename T, int HD, bool GEN> static cudaError_t setup_mma1_kind(void) {
    cudaError_t e = cudaFuncSetAttribute(MMA1_KERNEL(T, HD, 4, GEN),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mma1_smem(4, HD));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(MMA1_KERNEL(T, HD, 8, GEN),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mma1_smem(8, HD));
    return e;
}

template <typename T, int HD> static cudaError_t setup_mma1_hd(void) {
    cudaError_t e = setup_mma1_kind<T, HD, false>();
    return e == cudaSuccess ? setup_mma1_kind<T, HD, true>() : e;
}

template <typename T> static cudaError_t setup_mma1(void) {
    cudaError_t e = setup_mma1_hd<T, 32>();
    return e == cudaSuccess ? setup_mma1_hd<T, 64>() : e;
}

extern "C" int kc_attn_uses_tensor_cores(const kc_attn *a) {
    if (a->dt != KILN_DTYPE_FLOAT16 && a->dt != KILN_DTYPE_BFLOAT16)
        return 0;
    if (a->d % 16 || a->dv % 16 || a->d > 128 || a->dv > 128 || a->sk > 512 || a->sk < 1)
        return 0;
    if (a->b > 65535 || a->h > 65535)
        return 0;
    return att_plan((int)a->sk, (int)a->d, (int)a->dv).total <= ATT_TC_MAX_SMEM;
}

template <typename T>
static cudaError_t launch_tc(const void *q, const void *k, const void *v, const void *mask, void *y,
                             const kc_attn *a, cudaStream_t stream) {
    att_layout L = att_plan((int)a->sk, (int)a->d, (int)a->dv);
    /* fewer warps a block (16 query rows each) when the grid would not
     * fill the chip twice over: small batches get more, shorter blocks */
    int warps = ATT_WARPS;
    while (warps > 1 && a->b * a->h * ((a->sq + warps * 16 - 1) / (warps * 16)) < 2 * 132)
        warps /= 2;
    size_t bytes = L.warp_off + (size_t)warps * L.warp_bytes;
    dim3 grid((unsigned)((a->sq + warps * 16 - 1) / (warps * 16)), (unsigned)a->h, (unsigned)a->b);
    attn_tc_kernel<T><<<grid, warps * 32, bytes, stream>>>((const T *)q, (const T *)k, (const T *)v,
                                                           mask, (T *)y, *a);
    return cudaGetLastError();
}

template <typename T> static cudaError_t setup_one(void) {
    cudaError_t e = cudaFuncSetAttribute(attn_tc_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_TC_MAX_SMEM);
    if (e == cudaSuccess) /* shared memory over L1: blocks are sized by it */
        e = cudaFuncSetAttribute(attn_tc_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 100);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_direct_kernel<T>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_TC_MAX_SMEM);
    if (e == cudaSuccess)
        e = setup_mma<T>();
    return e == cudaSuccess ? setup_mma1<T>() : e;
}

extern "C" cudaError_t kc_attention_setup(void) {
    cudaError_t e = setup_one<__half>();
    if (e == cudaSuccess)
        e = setup_one<__nv_bfloat16>();
    return e == cudaSuccess ? kc_attention_wgmma_setup() : e;
}

template <typename T>
static cudaError_t launch_direct(const void *q, const void *k, const void *v, const void *mask,
                                 void *y, const kc_attn *a, cudaStream_t stream) {
    size_t bytes = (size_t)ATT_DIRECT_WARPS * att_direct_warp_bytes((int)a->sk, (int)a->dv);
    dim3 grid((unsigned)(a->sq / (ATT_DIRECT_WARPS * 16) + (a->sq % (ATT_DIRECT_WARPS * 16) != 0)),
              (unsigned)a->h, (unsigned)a->b);
    attn_direct_kernel<T><<<grid, ATT_DIRECT_WARPS * 32, bytes, stream>>>(
        (const T *)q, (const T *)k, (const T *)v, mask, (T *)y, *a);
    return cudaGetLastError();
}

/* Whether the direct kernel takes these tensors (see attn_direct_kernel). */
static bool direct_ok(const void *q, const void *k, const void *v, const void *y, const kc_attn *a) {
    if (a->sq % 16 || a->sk % 16 || a->d % 16 || a->dv % 16 || a->d > 128 || a->dv > 128)
        return false;
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)y) % 32)
        return false;
    /* every row start (and head offset) a multiple of 16 elements = 32 bytes */
    if (a->qrow % 16 || a->krow % 16 || a->vrow % 16 || !att_strides_mult(a, 16))
        return false;
    return (size_t)ATT_DIRECT_WARPS * att_direct_warp_bytes((int)a->sk, (int)a->dv) <= ATT_TC_MAX_SMEM;
}

extern "C" cudaError_t kc_attention(const void *q, const void *k, const void *v, const void *mask,
                                    void *y, const kc_attn *a, cudaStream_t stream) {
    if (!a || a->d < 1 || a->dv < 1 || a->d > 32 * ATT_SIMT_REGS || a->dv > 32 * ATT_SIMT_REGS)
        return cudaErrorInvalidValue;
    int64_t rows = a->b * a->h * a->sq;
    if (rows <= 0)
        return cudaSuccess;
    bool aligned = ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)y) % 16 == 0;
    /* KILN_ATTENTION_GENERIC=1 / KILN_ATTENTION_STAGED=1 force a kernel (A/B timing) */
    static int simt = -1, staged = -1;
    if (simt < 0) {
        simt = getenv("KILN_ATTENTION_GENERIC") && atoi(getenv("KILN_ATTENTION_GENERIC")) == 1;
        staged = getenv("KILN_ATTENTION_STAGED") && atoi(getenv("KILN_ATTENTION_STAGED")) == 1;
    }
    bool general = simt || a->kernel == KC_ATT_GENERAL || a->softcap != 0.f; /* softcap: simt only */
    if (!general && !staged &&
        (a->kernel == KC_ATT_WGMMA || a->kernel == KC_ATT_WGMMA_WIDE || a->kernel == KC_ATT_WGMMA_PIPE)) {
        const bool causal = a->causal != 0;
        const bool rowmask = !mask || (a->mstride[1] == 0 && a->mstride[2] == 0);
        /* the wgmma kernels' tensor maps take one head layout for Q, K, V */
        if (rowmask && a->group <= 1 && att_rows_plain(a) && mma_ok(q, k, v, y, a) &&
            kc_attn_wgmma_shapes(a) && kc_attn_wgmma_device()) {
            const int kind = a->kernel == KC_ATT_WGMMA_PIPE ? 2 : a->kernel == KC_ATT_WGMMA_WIDE ? 1 : 0;
            kc_attn ca = *a; /* causal: by position, beside the row mask */
            ca.causal = causal;
            cudaError_t e = kc_attention_wgmma(q, k, v, mask, y, &ca, kind, stream);
            if (e != cudaErrorNotSupported)
                return e;
        }
        kc_attn fb = *a; /* another mask, shape, layout (heads-first K/V) or device: the
                            single-pass mma.sync kernel */
        fb.kernel = KC_ATT_MMA1_WIDE;
        return kc_attention(q, k, v, mask, y, &fb, stream);
    }
    if (!general && !staged &&
        (a->kernel == KC_ATT_MMA1 || a->kernel == KC_ATT_MMA1_WIDE) &&
        mma_ok(q, k, v, y, a) && kc_attn_mma1_shapes(a)) {
        if (a->dt == KILN_DTYPE_FLOAT16)
            return launch_mma1<__half>(q, k, v, mask, y, a, stream);
        return launch_mma1<__nv_bfloat16>(q, k, v, mask, y, a, stream);
    }
    if (!general && !staged &&
        (a->kernel == KC_ATT_MMA || a->kernel == KC_ATT_MMA_WIDE || a->kernel == KC_ATT_MMA1 ||
         a->kernel == KC_ATT_MMA1_WIDE) &&
        mma_ok(q, k, v, y, a)) {
        if (a->dt == KILN_DTYPE_FLOAT16)
            return launch_mma<__half>(q, k, v, mask, y, a, stream);
        return launch_mma<__nv_bfloat16>(q, k, v, mask, y, a, stream);
    }
    if (aligned && !general && a->kernel == KC_ATT_DIRECT && !staged &&
        kc_attn_uses_tensor_cores(a) && direct_ok(q, k, v, y, a)) {
        if (a->dt == KILN_DTYPE_FLOAT16)
            return launch_direct<__half>(q, k, v, mask, y, a, stream);
        return launch_direct<__nv_bfloat16>(q, k, v, mask, y, a, stream);
    }
    if (aligned && !general && kc_attn_uses_tensor_cores(a) && att_strides_mult(a, 8)) {
        if (a->dt == KILN_DTYPE_FLOAT16)
            return launch_tc<__half>(q, k, v, mask, y, a, stream);
        return launch_tc<__nv_bfloat16>(q, k, v, mask, y, a, stream);
    }
    int64_t blocks = (rows + ATT_WARPS - 1) / ATT_WARPS;
    if (blocks > 0x7fffffff)
        return cudaErrorInvalidValue;
    attn_simt_kernel<<<(unsigned)blocks, ATT_WARPS * 32, 0, stream>>>(q, k, v, mask, y, *a, rows);
    return cudaGetLastError();
}
