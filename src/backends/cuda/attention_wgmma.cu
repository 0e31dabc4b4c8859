/* attention_wgmma.cu - the Hopper attention kernel (tactic "wgmma"): the
 * single-pass structure of attn_mma1_kernel (attention.cu) on the
 * warpgroup-wide tensor-core instruction, for head dim 64 and at most 128
 * keys (BERT's and most encoders' heads).
 *
 * One block per (tile of 64 * WG query rows, head, batch), one warpgroup of
 * 128 threads per 64 query rows. One thread has the tensor memory
 * accelerator bring the block's Q rows and the head's K and V rows into
 * shared memory (three boxes of [B, S, H * 64] tensor maps encoded at launch),
 * each row of 64 elements (128 bytes) in the 128-byte swizzle that wgmma's
 * descriptors read (chunk c of row r at chunk c ^ (r % 8)); rows past Sq or
 * Sk arrive as zeros. Then, per warpgroup:
 *   S (64 x 128, float, registers) = Q K^T: four wgmma m64n128k16, both
 *     operands in shared memory, K-major;
 *   an exact softmax in base 2 over each row (a row lives in one lane quad,
 *     as in the mma.sync kernels), the row mask folded in once per block;
 *   O (64 x 64) = P V: eight wgmma m64n64k16 with P straight from registers
 *     (the accumulator layout of S is the register-A layout) and V from
 *     shared memory, N-major (V rows are keys); in the persistent kernel
 *     the row sums too, as P times a block of ones (eight m64n8k16), where
 *     the other kernels add on the lanes;
 *   O / row sum staged through the warp's own Q rows and stored 16 bytes a
 *     lane.
 * Only the mask that is one row per batch (or none) is taken, and the
 * causal mask (kc_attn.causal), applied by position: key j of query row i
 * is masked when j > i + Sk - Sq; kc_attention sends other masks to the mma.sync
 * kernel.
 *
 * wgmma exists only in the architecture-specific target sm_90a, so this
 * file is compiled for it alone (cmake/cuda.cmake); kc_attention launches
 * it only on a device of compute capability 9.0. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "attention.cuh"
#include "kc_dev.cuh"

#define WGA_KEYS 128  /* keys a block holds: Sk <= 128 */
#define WGA_HD 64     /* head dim: one 128-byte swizzled row */
#define WGA_LOG2E 1.4426950408889634f

/* dynamic shared memory: Q (64 * WG rows), K and V (128 rows each) of 128
 * bytes, the per-key mask, and slack for aligning the base to 1024 bytes
 * (the swizzle pattern repeats every 8 rows of 128 bytes: chunk c of 16
 * bytes of row r sits at chunk c ^ (r % 8), relative to a 1024-byte
 * boundary) */
static size_t wga_smem(int wg) { return (size_t)(64 * wg + 2 * WGA_KEYS) * 128 + WGA_KEYS * 4 + 1024; }

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGA_DEVICE 1
#endif

__device__ __forceinline__ uint32_t wga_saddr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* wgmma's shared-memory descriptor of a 128-byte-swizzled tile: 8-row
 * groups 1024 bytes apart (stride byte offset); the leading byte offset is
 * unused in this layout, for K-major and N-major operands alike */
__device__ __forceinline__ uint64_t wga_desc(const void *p) {
    uint64_t d = (uint64_t)((wga_saddr(p) & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

/* The descriptor of a block of ones without swizzle (core matrices 128
 * bytes apart both ways): whatever the layout wgmma reads it in, every
 * element it touches, within the first 384 bytes, is 1. */
__device__ __forceinline__ uint64_t wga_desc_ones(const void *p) {
    uint64_t d = (uint64_t)((wga_saddr(p) & 0x3FFFF) >> 4);
    d |= (uint64_t)(128 >> 4) << 16;
    d |= (uint64_t)(128 >> 4) << 32;
    return d;
}

/* a 64 x rows box of a [B, S, H * 64] tensor map at (c0 column, c1 token,
 * c2 batch) into shared memory, completing on the barrier */
__device__ __forceinline__ void wga_tma(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4, %5}], [%2];" ::"r"(wga_saddr(dst)),
                 "l"(map), "r"(wga_saddr(bar)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

/* until the barrier's phase of this parity has completed */
__device__ __forceinline__ void wga_wait(uint64_t *bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WGA_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WGA_WAIT;\n"
                 "}\n" ::"r"(wga_saddr(bar)),
                 "r"(parity)
                 : "memory");
}

/* keep the compiler from moving reads of an accumulator above the wait
 * that completes it */
__device__ __forceinline__ void wga_fence_reg(float &x) { asm volatile("" : "+f"(x)::"memory"); }

#ifdef WGA_DEVICE
#define WGA_D64                                                                                                       \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "   \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WGA_OUT64(d)                                                                                              \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),   \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),   \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),   \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),   \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define WGA_D32                                                                                                       \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31}"
#define WGA_OUT32(d)                                                                                              \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

/* d (64 x 128 per warpgroup) = or += A (64 x 16, shared) B (128 x 16,
 * shared)^T, and d (64 x 64) = or += A (64 x 16, registers) B (16 x 64,
 * shared, N-major); one definition per element type (PTX name PT) */
template <typename T> __device__ __forceinline__ void wga_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int acc);
template <typename T>
__device__ __forceinline__ void wga_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int acc);
template <typename T>
__device__ __forceinline__ void wga_rs_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t db, int acc);
#define WGA_MMA(T, PT)                                                                                            \
    template <>                                                                                                   \
    __device__ __forceinline__ void wga_ss_n128<T>(float (&d)[64], uint64_t da, uint64_t db, int acc) {           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." PT "." PT " " WGA_D64                         \
                     ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                            \
                     : WGA_OUT64(d)                                                                               \
                     : "l"(da), "l"(db), "r"(acc));                                                               \
    }                                                                                                             \
    template <>                                                                                                   \
    __device__ __forceinline__ void wga_rs_n64<T>(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int acc) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PT "." PT " " WGA_D32                          \
                     ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                              \
                     : WGA_OUT32(d)                                                                               \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));                            \
    }                                                                                                             \
    template <>                                                                                                   \
    __device__ __forceinline__ void wga_rs_n8<T>(float (&d)[4], const uint32_t (&a)[4], uint64_t db, int acc) {   \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"                                                 \
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32." PT "." PT " {%0, %1, %2, %3}"                   \
                     ", {%4, %5, %6, %7}, %8, p, 1, 1, 1;\n}\n"                                                   \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                             \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));                            \
    }
WGA_MMA(__half, "f16")
WGA_MMA(__nv_bfloat16, "bf16")
#undef WGA_MMA
#endif

/* Key j's additive mask in base 2: -inf past Sk, else the row mask of
 * batch b (0 without one). */
__device__ __forceinline__ float wga_mask_at(const void *mask, const kc_attn &a, int64_t b, int j) {
    return j >= (int)a.sk ? -INFINITY
                          : (mask ? kc_ld_f(mask, a.mask_dt, kc_attn_mask_b(a, b) + j * a.mstride[3]) * WGA_LOG2E : 0.f);
}

/* The barriers' first use, and the three boxes of one tile issued by one
 * thread: Q rows q0.. of head h and batch b, and the head's K and V rows;
 * bars[0] completes with Q and K, bars[1] with V. */
__device__ __forceinline__ void wga_init_bars(uint64_t *bars, int n) {
    for (int i = 0; i < n; i++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(wga_saddr(&bars[i])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
template <int WG>
__device__ __forceinline__ void wga_issue(unsigned char *Qs, unsigned char *Ks, unsigned char *Vs, uint64_t *bars,
                                          const CUtensorMap *tq, const CUtensorMap *tk, const CUtensorMap *tv,
                                          int64_t b, int64_t h, int q0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(wga_saddr(&bars[0])),
                 "r"(64 * WG * 128 + WGA_KEYS * 128)
                 : "memory");
    wga_tma(Qs, tq, &bars[0], (int)h * WGA_HD, q0, (int)b);
    wga_tma(Ks, tk, &bars[0], (int)h * WGA_HD, 0, (int)b);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(wga_saddr(&bars[1])),
                 "r"(WGA_KEYS * 128)
                 : "memory");
    wga_tma(Vs, tv, &bars[1], (int)h * WGA_HD, 0, (int)b);
}

#ifdef WGA_DEVICE
/* One tile once its boxes are on their way and Ms holds its mask: wait for
 * them (barrier phase `parity`), S = Q K^T, the softmax, O = P V, and O out
 * through the warpgroup's own Q rows. The rows' sums: with MMA_SUM, P 1 (a
 * wgmma of n8 against `ones`, 1 KB of ones in shared memory, in the same
 * group as P V: 11% fewer instructions, which the persistent kernel's
 * tiles gain from); else adds on the lanes and quad shuffles, which keep the
 * wgmma chain of a lone tile (small batches) shorter. */
template <typename T, int WG, bool MMA_SUM>
__device__ __forceinline__ void wga_tile(unsigned char *Qs, const unsigned char *Ks, const unsigned char *Vs,
                                         const float *Ms, const void *ones, uint64_t *bars, uint32_t parity,
                                         T *__restrict__ y, const kc_attn &a, int64_t b, int64_t h, int q0) {
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int sq = (int)a.sq;
    wga_wait(&bars[0], parity);

    /* S = Q K^T */
    float s[64];
    const uint64_t dq = wga_desc(Qs + wg * 64 * 128), dk = wga_desc(Ks);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < WGA_HD / 16; kk++) /* 16 elements = 32 bytes along the swizzled row */
        wga_ss_n128<T>(s, dq + 2 * kk, dk + 2 * kk, kk);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 64; i++)
        wga_fence_reg(s[i]);

    /* scale and mask in base 2, then an exact softmax: lane (g, t) of warp
     * w holds rows 16w + g (s[4j], s[4j + 1]) and 16w + g + 8 (s[4j + 2],
     * s[4j + 3]), keys 8j + 2t and 8j + 2t + 1 */
    const float sl2 = a.scale * WGA_LOG2E;
    float mx[2] = {-INFINITY, -INFINITY};
    /* the lane's two query rows, for the causal mask (past any key when not) */
    const int qr = a.causal ? q0 + wg * 64 + warp * 16 + g + (int)(a.sk - a.sq) : WGA_KEYS;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float2 m2 = *reinterpret_cast<const float2 *>(Ms + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = fmaf(s[4 * j + e], sl2, (e & 1) ? m2.y : m2.x);
            if (8 * j + 2 * t + (e & 1) > qr + (e >> 1) * 8)
                x = -INFINITY;
            s[4 * j + e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    }
    kc_quad_row_max(mx); /* 0 where every key is masked */
    float sum[2] = {0.f, 0.f};
    /* P, rounded to T, in the register-A layout of P V: keys 16kk.. are
     * accumulators 8kk..8kk+7 */
    uint32_t p[WGA_KEYS / 16][4];
#pragma unroll
    for (int kk = 0; kk < WGA_KEYS / 16; kk++) {
        float e[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float y2;
            asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y2) : "f"(s[8 * kk + i] - mx[(i >> 1) & 1]));
            e[i] = y2;
        }
        if (!MMA_SUM) {
            sum[0] += e[0] + e[1] + e[4] + e[5];
            sum[1] += e[2] + e[3] + e[6] + e[7];
        }
        p[kk][0] = kc_pack2<T>(e[0], e[1]);
        p[kk][1] = kc_pack2<T>(e[2], e[3]);
        p[kk][2] = kc_pack2<T>(e[4], e[5]);
        p[kk][3] = kc_pack2<T>(e[6], e[7]);
    }

    wga_wait(&bars[1], parity); /* V */

    /* O = P V: 16 keys a step = two 8-row groups of V, 2048 bytes; and
     * l = P 1, each row's sum in every one of its 8 columns, from the
     * rounded P that O is made of (no adds and shuffles on the lanes) */
    float o[32], l[4];
#pragma unroll
    for (int i = 0; i < 32; i++)
        o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++)
        l[i] = 0.f;
    const uint64_t dv = wga_desc(Vs), d1 = MMA_SUM ? wga_desc_ones(ones) : 0;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < WGA_KEYS / 16; kk++) { /* keys past Sk: P and V rows are zeros */
        wga_rs_n64<T>(o, p[kk], dv + 128 * kk, kk);
        if (MMA_SUM)
            wga_rs_n8<T>(l, p[kk], d1, kk);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 32; i++)
        wga_fence_reg(o[i]);
#pragma unroll
    for (int i = 0; i < 4; i++)
        wga_fence_reg(l[i]);

    /* O / sum through the warp's own Q rows (its S products are complete),
     * then 16 bytes a lane out; l[0] is row g's sum, l[2] row g + 8's */
    if (MMA_SUM) {
        sum[0] = l[0];
        sum[1] = l[2];
    } else {
        kc_quad_row_sum(sum);
    }
    /* every key masked: zeros, as the reference */
    const float inv[2] = {sum[0] > 0.f ? 1.f / sum[0] : 0.f, sum[1] > 0.f ? 1.f / sum[1] : 0.f};
    unsigned char *Ow = Qs + (wg * 64 + warp * 16) * 128;
    const int rl = warp * 16 + g; /* within the warpgroup's 64 rows: the swizzle phase */
#pragma unroll
    for (int j = 0; j < 8; j++) {
        *reinterpret_cast<uint32_t *>(Ow + g * 128 + ((j ^ (rl & 7)) << 4) + 4 * t) =
            kc_pack2<T>(o[4 * j] * inv[0], o[4 * j + 1] * inv[0]);
        *reinterpret_cast<uint32_t *>(Ow + (g + 8) * 128 + ((j ^ ((rl + 8) & 7)) << 4) + 4 * t) =
            kc_pack2<T>(o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1]);
    }
    __syncwarp();
    const int row0 = q0 + wg * 64 + warp * 16;
    T *yw = y + ((b * a.sq + row0) * a.h + h) * WGA_HD;
#pragma unroll
    for (int it = 0; it < 4; it++) {
        const int idx = it * 32 + lane, r = idx / 8, c = idx % 8;
        if (row0 + r < sq)
            *reinterpret_cast<uint4 *>(yw + (int64_t)r * a.h * WGA_HD + c * 8) =
                *reinterpret_cast<const uint4 *>(Ow + r * 128 + ((c ^ ((warp * 16 + r) & 7)) << 4));
    }
}
#endif

#ifdef WGA_DEVICE
/* 1 KB of ones (of T) for the row-sum wgmma, written through the generic
 * proxy and made visible to wgmma's (async) proxy before the block's first
 * barrier. */
template <typename T> __device__ __forceinline__ void wga_init_ones(uint32_t *ones) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
        ones[i] = kc_pack2<T>(1.f, 1.f);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
#endif

/* A tile's place: query tile q, head h, batch b (tile = (b H + h) nq + q).
 * The persistent kernel decodes its first tile and its stride once and
 * then steps with carries: integer divisions by run-time values cost about
 * twenty instructions each, and it took four a tile per thread. */
struct wga_pos {
    int q, h, b;
};
__device__ __forceinline__ wga_pos wga_decode(int t, int nq, int H) { return {t % nq, t / nq % H, t / nq / H}; }
__device__ __forceinline__ void wga_advance(wga_pos &p, const wga_pos &g, int nq, int H) {
    p.q += g.q;
    int c = p.q >= nq;
    if (c)
        p.q -= nq;
    p.h += g.h + c;
    c = p.h >= H;
    if (c)
        p.h -= H;
    p.b += g.b + c;
}

/* Y = softmax(scale Q K^T + mask row) V for one tile of 64 * WG query rows
 * of one head; d = dv = 64, Sk <= 128, rows 16-byte aligned. */
template <typename T, int WG>
__global__ void __launch_bounds__(WG * 128, WG == 1 ? 4 : 2)
    attn_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                      const __grid_constant__ CUtensorMap tv, const void *__restrict__ mask, T *__restrict__ y,
                      const kc_attn a) {
#ifdef WGA_DEVICE
    extern __shared__ unsigned char wga_raw[];
    __shared__ __align__(8) uint64_t bars[2]; /* Q and K landed; V landed */
    unsigned char *base = (unsigned char *)(((uintptr_t)wga_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *Qs = base, *Ks = Qs + 64 * WG * 128, *Vs = Ks + WGA_KEYS * 128;
    float *Ms = reinterpret_cast<float *>(Vs + WGA_KEYS * 128);
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const int q0 = blockIdx.x * 64 * WG;
    /* one thread has the tensor memory accelerator bring the tiles: the
     * head's 64 columns of 64 * WG query rows and of all Sk key rows, in the
     * 128-byte swizzle, rows past the sequence zero-filled */
    if (threadIdx.x == 0) {
        wga_init_bars(bars, 2);
        wga_issue<WG>(Qs, Ks, Vs, bars, &tq, &tk, &tv, b, h, q0);
    }
    for (int j = threadIdx.x; j < WGA_KEYS; j += WG * 128)
        Ms[j] = wga_mask_at(mask, a, b, j);
    __syncthreads(); /* the mask, and the barriers' initialisation */
    wga_tile<T, WG, false>(Qs, Ks, Vs, Ms, nullptr, bars, 0, y, a, b, h, q0);
#else
    __trap(); /* not built for this architecture: kc_attention never launches it here */
#endif
}

/* The same for 128 query rows a tile (two warpgroups), persistent: a grid
 * of two blocks an SM walks the tiles (query tile fastest, then head, then
 * batch), each block with two stages of shared memory, so that one thread
 * issues the next tile's boxes before the block works on the current one
 * and every SM keeps loads in flight while it computes. The next tile's
 * mask is read into a register during the current tile and stored after. */
#define WGA_PIPE_STAGE ((128 + 2 * WGA_KEYS) * 128)
static size_t wga_pipe_smem(void) { return 2 * (size_t)WGA_PIPE_STAGE + 2 * WGA_KEYS * 4 + 1024; }

template <typename T>
__global__ void __launch_bounds__(256, 2)
    attn_wgmma_pipe_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                           const __grid_constant__ CUtensorMap tv, const void *__restrict__ mask, T *__restrict__ y,
                           const kc_attn a, int nq, int tiles) {
#ifdef WGA_DEVICE
    extern __shared__ unsigned char wga_raw[];
    __shared__ __align__(8) uint64_t bars[2][2]; /* per stage: Q and K landed; V landed */
    __shared__ __align__(128) uint32_t ones[256];
    unsigned char *base = (unsigned char *)(((uintptr_t)wga_raw + 1023) & ~(uintptr_t)1023);
    float *Ms = reinterpret_cast<float *>(base + 2 * WGA_PIPE_STAGE); /* two stages of WGA_KEYS */
    const int H = (int)a.h;
    const wga_pos g = wga_decode((int)gridDim.x, nq, H); /* the stride between a block's tiles */
    wga_pos cur = wga_decode((int)blockIdx.x, nq, H);
    if (threadIdx.x == 0) {
        wga_init_bars(&bars[0][0], 4);
        if ((int)blockIdx.x < tiles)
            wga_issue<2>(base, base + 128 * 128, base + (128 + WGA_KEYS) * 128, bars[0], &tq, &tk, &tv, cur.b,
                         cur.h, cur.q * 128);
    }
    if ((int)blockIdx.x < tiles && threadIdx.x < WGA_KEYS)
        Ms[threadIdx.x] = wga_mask_at(mask, a, cur.b, threadIdx.x);
    wga_init_ones<T>(ones);
    __syncthreads(); /* the barriers' initialisation, the first mask, the ones */
    int i = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, i++) {
        const int st = i & 1;
        const bool more = tile + (int)gridDim.x < tiles;
        wga_pos nxt = cur;
        wga_advance(nxt, g, nq, H);
        unsigned char *S = base + st * WGA_PIPE_STAGE;
        float mnext = 0.f;
        if (more) {
            if (threadIdx.x == 0) { /* the other stage was released at the end of the last tile */
                unsigned char *N = base + (st ^ 1) * WGA_PIPE_STAGE;
                wga_issue<2>(N, N + 128 * 128, N + (128 + WGA_KEYS) * 128, bars[st ^ 1], &tq, &tk, &tv, nxt.b,
                             nxt.h, nxt.q * 128);
            }
            if (threadIdx.x < WGA_KEYS)
                mnext = wga_mask_at(mask, a, nxt.b, threadIdx.x);
        }
        wga_tile<T, 2, true>(S, S + 128 * 128, S + (128 + WGA_KEYS) * 128, Ms + st * WGA_KEYS, ones, bars[st],
                       (uint32_t)(i >> 1) & 1u, y, a, cur.b, cur.h, cur.q * 128);
        if (more && threadIdx.x < WGA_KEYS)
            Ms[(st ^ 1) * WGA_KEYS + threadIdx.x] = mnext;
        /* this stage's Q rows held O: order those writes before the tensor
         * memory accelerator refills the stage, and release it */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        cur = nxt;
    }
#else
    __trap();
#endif
}

/* Whether the current device runs this file's code (compute capability 9.0). */
extern "C" int kc_attn_wgmma_device(void) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError(); /* no device: clear the sticky-free error */
        return 0;
    }
    return major == 9 && minor == 0;
}

extern "C" int kc_attn_wgmma_shapes(const kc_attn *a) {
    if (a->dt != KILN_DTYPE_FLOAT16 && a->dt != KILN_DTYPE_BFLOAT16)
        return 0;
    if (a->d != WGA_HD || a->dv != WGA_HD || a->sk < 1 || a->sk > WGA_KEYS || a->sq < 1)
        return 0;
    return a->b <= 65535 && a->h <= 65535 && a->group <= 1; /* one head layout for Q, K, V */
}

template <typename T, int WG> static cudaError_t setup_kind(void) {
    cudaError_t e = cudaFuncSetAttribute(attn_wgmma_kernel<T, WG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)wga_smem(WG));
    if (e == cudaSuccess && WG == 2)
        e = cudaFuncSetAttribute(attn_wgmma_pipe_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)wga_pipe_smem());
    return e;
}

static int wga_sms; /* the device's multiprocessors, for the persistent grid (set up once) */

static PFN_cuTensorMapEncodeTiled_v12000 wga_encode;

extern "C" cudaError_t kc_attention_wgmma_setup(void) {
    if (!kc_attn_wgmma_device())
        return cudaSuccess;
    if (!wga_encode) { /* the driver's tensor-map encoder, through the runtime */
        cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            wga_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
        else /* an old driver: every launch declines, the mma.sync kernel runs */
            cudaGetLastError();
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&wga_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        wga_sms = 0;
    cudaError_t e = setup_kind<__half, 1>();
    if (e == cudaSuccess)
        e = setup_kind<__half, 2>();
    if (e == cudaSuccess)
        e = setup_kind<__nv_bfloat16, 1>();
    return e == cudaSuccess ? setup_kind<__nv_bfloat16, 2>() : e;
}

/* The [B, S, H * 64] view of Q, K or V (`row` elements between tokens),
 * read in boxes of 64 elements by `rows` tokens; false when the driver
 * refuses it. */
static bool wga_map(CUtensorMap *m, const void *p, int64_t b, int64_t s, int64_t h, int64_t row, int rows,
                    kiln_dtype dt) {
    cuuint64_t dims[3] = {(cuuint64_t)(h * WGA_HD), (cuuint64_t)s, (cuuint64_t)b};
    cuuint64_t strides[2] = {(cuuint64_t)row * 2, (cuuint64_t)(row * s) * 2};
    cuuint32_t box[3] = {WGA_HD, (cuuint32_t)rows, 1};
    cuuint32_t es[3] = {1, 1, 1};
    return wga_encode(m, dt == KILN_DTYPE_FLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                      3, (void *)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The three tensor maps of a launch: boxes of `qrows` query rows, and of
 * all WGA_KEYS key and value rows. */
static bool wga_maps(CUtensorMap *tq, CUtensorMap *tk, CUtensorMap *tv, const void *q, const void *k,
                     const void *v, const kc_attn *a, int qrows) {
    return wga_encode && wga_map(tq, q, a->b, a->sq, a->h, a->qrow, qrows, a->dt) &&
           wga_map(tk, k, a->b, a->sk, a->h, a->krow, WGA_KEYS, a->dt) &&
           wga_map(tv, v, a->b, a->sk, a->h, a->vrow, WGA_KEYS, a->dt);
}

template <typename T, int WG>
static cudaError_t launch(const void *q, const void *k, const void *v, const void *mask, void *y, const kc_attn *a,
                          cudaStream_t stream) {
    CUtensorMap tq, tk, tv;
    if (!wga_maps(&tq, &tk, &tv, q, k, v, a, 64 * WG))
        return cudaErrorNotSupported;
    dim3 grid((unsigned)((a->sq + 64 * WG - 1) / (64 * WG)), (unsigned)a->h, (unsigned)a->b);
    attn_wgmma_kernel<T, WG><<<grid, WG * 128, wga_smem(WG), stream>>>(tq, tk, tv, mask, (T *)y, *a);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t launch_pipe(const void *q, const void *k, const void *v, const void *mask, void *y,
                               const kc_attn *a, cudaStream_t stream) {
    CUtensorMap tq, tk, tv;
    const int64_t nq = (a->sq + 127) / 128, tiles = nq * a->h * a->b;
    if (wga_sms < 1 || tiles > 0x7fffffffLL || !wga_maps(&tq, &tk, &tv, q, k, v, a, 128))
        return cudaErrorNotSupported;
    const int64_t grid = tiles < 2 * (int64_t)wga_sms ? tiles : 2 * (int64_t)wga_sms;
    attn_wgmma_pipe_kernel<T><<<(unsigned)grid, 256, wga_pipe_smem(), stream>>>(tq, tk, tv, mask, (T *)y, *a,
                                                                                (int)nq, (int)tiles);
    return cudaGetLastError();
}

/* kind 0: one warpgroup (64 query rows) a block; 1: two (128 rows); 2: two,
 * persistent with two stages; cudaErrorNotSupported (nothing launched)
 * when the tensors cannot be described to the tensor memory accelerator */
extern "C" cudaError_t kc_attention_wgmma(const void *q, const void *k, const void *v, const void *mask, void *y,
                                          const kc_attn *a, int kind, cudaStream_t stream) {
    if (a->dt == KILN_DTYPE_FLOAT16)
        return kind == 2   ? launch_pipe<__half>(q, k, v, mask, y, a, stream)
               : kind == 1 ? launch<__half, 2>(q, k, v, mask, y, a, stream)
                           : launch<__half, 1>(q, k, v, mask, y, a, stream);
    return kind == 2   ? launch_pipe<__nv_bfloat16>(q, k, v, mask, y, a, stream)
           : kind == 1 ? launch<__nv_bfloat16, 2>(q, k, v, mask, y, a, stream)
                       : launch<__nv_bfloat16, 1>(q, k, v, mask, y, a, stream);
}
