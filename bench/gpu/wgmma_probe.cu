/* wgmma_probe.cu - a Hopper GEMM on wgmma with TMA loads, measured against
 * cuBLAS on BERT-base's shapes at batch 64: the first step towards kiln's own
 * GEMM with LayerNorm in its epilogue (src/backends/cuda/README.md, "Next
 * steps for speed"). Not a tactic yet: this program checks the kernel against
 * cuBLAS and times both.
 *
 * C[M, N] (float16) = A[M, K] · B[N, K]ᵀ + bias, float accumulation. A CTA of
 * two warpgroups owns a 128 x 128 tile of C, each warpgroup 64 rows
 * (wgmma m64n128k16). Thread 0 streams 128 x 64 tiles of A and B into a ring
 * of STAGES shared-memory stages with the tensor memory accelerator (128-byte
 * swizzle, as wgmma's K-major layout reads it); a "full" barrier per stage
 * counts the bytes in, an "empty" one the two warpgroups' release.
 * M and N multiples of 128, K a multiple of 64.
 *
 * For N = 768 a third kernel puts the residual and LayerNorm in the
 * epilogue: a cluster of six CTAs spans the row and shares each row's sums
 * through distributed shared memory (the fused kernel the LayerNorm passes
 * of BERT-base's attention-output and FFN2 would go into).
 *
 * Build: sm_90a (wgmma needs the architecture-specific target). Usage:
 * wgmma_probe [reps]; prints PASSED when both variants agree with cuBLAS
 * within 1e-2 of the largest output, FAILED (exit 1) otherwise; exits 77
 * without a Hopper GPU.
 *
 * Session 13 added warp-specialized kernels (a producer warp of its own):
 * wgmma_ws (clusters along N, A multicast), wgmma_pws (persistent; the
 * LayerNorm's row sums through the cluster or through global memory) and
 * wgmma_pln (persistent, residual in and output out by TMA), and "the
 * pair" they replace: cuBLAS with the residual, then a LayerNorm pass.
 * WGMMA_SHAPE=M,K,N runs one shape (for a profiler).
 *
 * Status (sessions 6 and 13, bench/results/2026-11-30-gpu-session6.md and
 * 2026-12-01-gpu-session13.md): every variant agrees with cuBLAS; the
 * persistent plain GEMM is 1.13-1.19x slower than cuBLAS on BERT's N = 768
 * shapes; wgmma_pln (GEMM + residual + LayerNorm) is 5-10% faster than the
 * probe's pair timed a run at a time, but 1-6% slower back to back under
 * load (WGMMA_SUSTAIN_MS=ms times both that way). Nothing here is
 * wired into kiln; the attention kernel that reuses these mechanics
 * (swizzled descriptors, TMA, mbarriers) is src/backends/cuda/attention_wgmma.cu. */
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BM 128
#define BN 128
#define BK 64
#define STAGES 4
#define THREADS 256
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024)

namespace cg = cooperative_groups;

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void bar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}

/* the producer's arrival, announcing the bytes its copies will bring */
__device__ __forceinline__ void bar_expect(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}

/* until the barrier's phase of this parity has completed */
__device__ __forceinline__ void bar_wait(uint64_t *b, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(smem_addr(b)),
                 "r"(parity)
                 : "memory");
}

/* one box of the tensor map at (c0 inner, c1 outer) into shared memory */
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, uint64_t *bar, int c0,
                                         int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
                 "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
                 : "memory");
}

/* wgmma's shared-memory descriptor for a K-major operand in the 128-byte
 * swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart (the stride
 * byte offset); the leading byte offset is unused in this layout. */
__device__ __forceinline__ uint64_t desc_sw128(const void *p) {
    uint64_t d = (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

/* d (64 x 128 per warpgroup, float) += A (64 x 16) · B (128 x 16)ᵀ, or =
 * when scale_d is 0 */
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* The main loop: acc (this thread's part of its warpgroup's 64 x 128) =
 * A[m0.., :] · B[n0.., :]ᵀ. LAG 0: each k-tile's products finish before
 * its stage is released; LAG 1: one k-tile's products stay in flight while
 * the next is issued, and the stage before is released then. */
template <int LAG>
__device__ __forceinline__ void mainloop(const CUtensorMap *ta, const CUtensorMap *tb, unsigned char *raw,
                                         int m0, int n0, int k, float (&acc)[64]) {
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    __half *sa = (__half *)base;               /* STAGES x BM x BK */
    __half *sb = sa + STAGES * BM * BK;        /* STAGES x BN x BK */
    uint64_t *full = (uint64_t *)(sb + STAGES * BN * BK);
    uint64_t *empty = full + STAGES;
    const int tid = threadIdx.x, wg = tid / 128, kt_n = k / BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0)
        for (int s = 0; s < STAGES && s < kt_n; s++) {
            bar_expect(&full[s], STAGE_BYTES);
            tma_load(sa + s * BM * BK, ta, &full[s], s * BK, m0);
            tma_load(sb + s * BN * BK, tb, &full[s], s * BK, n0);
        }
    /* k-tile r's products are done: release its stage, and refill it with
     * k-tile r + STAGES */
    auto release = [&](int r) {
        const int s = r % STAGES;
        if (tid % 128 == 0)
            bar_arrive(&empty[s]);
        if (tid == 0 && r + STAGES < kt_n) {
            bar_wait(&empty[s], (r / STAGES) & 1);
            bar_expect(&full[s], STAGE_BYTES);
            tma_load(sa + s * BM * BK, ta, &full[s], (r + STAGES) * BK, m0);
            tma_load(sb + s * BN * BK, tb, &full[s], (r + STAGES) * BK, n0);
        }
    };
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = 0.f;
    for (int kt = 0; kt < kt_n; kt++) {
        const int s = kt % STAGES;
        bar_wait(&full[s], (kt / STAGES) & 1);
        const uint64_t da = desc_sw128(sa + s * BM * BK + wg * 64 * BK);
        const uint64_t db = desc_sw128(sb + s * BN * BK);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) /* 16 halves = 32 bytes along the row */
            wgmma_m64n128(acc, da + 2 * kk, db + 2 * kk, kt > 0 || kk > 0);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        if (LAG == 0) {
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            release(kt);
        } else {
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            if (kt > 0)
                release(kt - 1);
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

/* The accumulator layout: warp w of the warpgroup has rows 16w..16w+15 of
 * the warpgroup's 64; per 8 columns j, lane (g, t) holds (g, 8j+2t..+1) in
 * acc[4j], acc[4j+1] and (g+8, 8j+2t..+1) in acc[4j+2], acc[4j+3]. The
 * tile-local row of the lane's first row: */
__device__ __forceinline__ int acc_row(void) {
    const int tid = threadIdx.x;
    return (tid / 128) * 64 + ((tid % 128) / 32) * 16 + (tid % 32) / 4;
}

/* C = A · Bᵀ + bias */
template <int LAG>
__global__ void __launch_bounds__(THREADS, 1)
    wgmma_gemm(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
               __half *__restrict__ c, const __half *__restrict__ bias, int n, int k) {
    extern __shared__ unsigned char raw[];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[64];
    mainloop<LAG>(&ta, &tb, raw, m0, n0, k, acc);
    const int row = m0 + acc_row(), t = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int col = n0 + 8 * j + 2 * t;
        const float b0 = bias ? __half2float(bias[col]) : 0.f, b1 = bias ? __half2float(bias[col + 1]) : 0.f;
        *(__half2 *)(c + (size_t)row * n + col) = __floats2half2_rn(acc[4 * j] + b0, acc[4 * j + 1] + b1);
        *(__half2 *)(c + (size_t)(row + 8) * n + col) =
            __floats2half2_rn(acc[4 * j + 2] + b0, acc[4 * j + 3] + b1);
    }
}

/* C = LayerNorm(A · Bᵀ + bias + residual) · gamma + beta over rows of
 * N = LN_CTAS x 128 (BERT-base's 768): a cluster of LN_CTAS CTAs spans a
 * row block; each CTA sums its 128 columns of every row, and reads the
 * others' sums from their shared memory (distributed shared memory), once
 * for the mean and once for the variance about it. */
#define LN_CTAS 6

/* Row sums over the cluster: a and b, this lane's partial sums of tile rows
 * lr and lr + 8, become the sums over the lane quad (which shares those
 * rows) and over the cluster's CTAs, exchanged through `slot` (BM floats of
 * shared memory in every CTA). */
__device__ __forceinline__ void cluster_row_sums(cg::cluster_group &cluster, float *slot, int lr, float &a,
                                                 float &b) {
    a += __shfl_xor_sync(0xffffffffu, a, 1);
    a += __shfl_xor_sync(0xffffffffu, a, 2);
    b += __shfl_xor_sync(0xffffffffu, b, 1);
    b += __shfl_xor_sync(0xffffffffu, b, 2);
    if (threadIdx.x % 4 == 0) {
        slot[lr] = a;
        slot[lr + 8] = b;
    }
    cluster.sync();
    a = b = 0.f;
    for (int r = 0; r < LN_CTAS; r++) {
        const float *p = cluster.map_shared_rank(slot, r);
        a += p[lr];
        b += p[lr + 8];
    }
}

__global__ void __cluster_dims__(LN_CTAS, 1, 1) __launch_bounds__(THREADS, 1)
    wgmma_gemm_ln(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
                  __half *__restrict__ c, const __half *__restrict__ bias,
                  const __half *__restrict__ residual, const __half *__restrict__ gamma,
                  const __half *__restrict__ beta, float eps, int k) {
    extern __shared__ unsigned char raw[];
    __shared__ float part[2][BM]; /* this CTA's row sums: of x, then of (x - mean)^2 */
    constexpr int n = LN_CTAS * BN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    cg::cluster_group cluster = cg::this_cluster();
    float acc[64];
    mainloop<1>(&ta, &tb, raw, m0, n0, k, acc);
    const int lr = acc_row(), row = m0 + lr, t = threadIdx.x % 4;
    float s0 = 0.f, s1 = 0.f; /* rows lr and lr + 8 */
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int col = n0 + 8 * j + 2 * t;
        const float b0 = __half2float(bias[col]), b1 = __half2float(bias[col + 1]);
        const __half2 r0 = *(const __half2 *)(residual + (size_t)row * n + col);
        const __half2 r1 = *(const __half2 *)(residual + (size_t)(row + 8) * n + col);
        acc[4 * j] += b0 + __low2float(r0);
        acc[4 * j + 1] += b1 + __high2float(r0);
        acc[4 * j + 2] += b0 + __low2float(r1);
        acc[4 * j + 3] += b1 + __high2float(r1);
        s0 += acc[4 * j] + acc[4 * j + 1];
        s1 += acc[4 * j + 2] + acc[4 * j + 3];
    }
    cluster_row_sums(cluster, part[0], lr, s0, s1);
    const float mean0 = s0 / n, mean1 = s1 / n;
    float q0 = 0.f, q1 = 0.f;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float d0 = acc[4 * j] - mean0, d1 = acc[4 * j + 1] - mean0;
        const float d2 = acc[4 * j + 2] - mean1, d3 = acc[4 * j + 3] - mean1;
        q0 += d0 * d0 + d1 * d1;
        q1 += d2 * d2 + d3 * d3;
    }
    cluster_row_sums(cluster, part[1], lr, q0, q1);
    const float inv0 = rsqrtf(q0 / n + eps), inv1 = rsqrtf(q1 / n + eps);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int col = n0 + 8 * j + 2 * t;
        const float g0 = __half2float(gamma[col]), g1 = __half2float(gamma[col + 1]);
        const float e0 = __half2float(beta[col]), e1 = __half2float(beta[col + 1]);
        *(__half2 *)(c + (size_t)row * n + col) =
            __floats2half2_rn((acc[4 * j] - mean0) * inv0 * g0 + e0, (acc[4 * j + 1] - mean0) * inv0 * g1 + e1);
        *(__half2 *)(c + (size_t)(row + 8) * n + col) =
            __floats2half2_rn((acc[4 * j + 2] - mean1) * inv1 * g0 + e0, (acc[4 * j + 3] - mean1) * inv1 * g1 + e1);
    }
    cluster.sync(); /* no CTA leaves while another still reads its sums */
}

/* ---- One-wave GEMM + LayerNorm for N = 768: a CTA owns 64 whole rows ----
 *
 * Three consumer warpgroups, each 64 rows x 256 columns (wgmma m64n256k16,
 * 128 accumulators a thread), so a CTA holds a complete 64 x 768 row block
 * and the LayerNorm needs no exchange beyond the CTA. 8192 rows are 128
 * CTAs: one wave on 132 SMs. Every CTA streams all of B: a cluster of CL
 * CTAs (consecutive row blocks) shares it, each CTA loading 1/CL of every
 * B tile and multicasting it to the others. RB: the bytes of a tile row
 * (BKR = RB / 2 elements of K a stage), 128 (128-byte swizzle) or 64
 * (64-byte swizzle); STG stages. */
#define RLN_N 768
#define RLN_THREADS 384
#define RLN_BOX 192 /* B rows a TMA box: 4 boxes a tile */

__device__ __forceinline__ uint64_t desc_sw(const void *p, int rb) {
    uint64_t d = (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;
    d |= (uint64_t)((8 * rb) >> 4) << 32;
    d |= (uint64_t)(rb == 128 ? 1 : 2) << 62;
    return d;
}

__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "%128, %129, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(scale_d));
}

__device__ __forceinline__ void tma_load_mc(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1,
                                            uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
                 "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask)
                 : "memory");
}

/* an arrival on the barrier at the same place in CTA `rank` of the cluster */
__device__ __forceinline__ void bar_arrive_remote(uint64_t *b, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(b)), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(r) : "memory");
}

__device__ __forceinline__ void bar_wait_cluster(uint64_t *b, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAITC:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAITC;\n"
                 "}\n" ::"r"(smem_addr(b)),
                 "r"(parity)
                 : "memory");
}

__device__ __forceinline__ void cluster_sync_all(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ uint32_t cluster_rank(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

static size_t rln_smem(int rb, int stg) { return (size_t)stg * (64 + RLN_N) * rb + 2 * stg * 8 + 1024; }

template <int CL, int RB, int STG>
__global__ void __launch_bounds__(RLN_THREADS, 1)
    wgmma_rows_ln(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
                  __half *__restrict__ c, const __half *__restrict__ bias, const __half *__restrict__ residual,
                  const __half *__restrict__ gamma, const __half *__restrict__ beta, float eps, int k) {
    constexpr int BKR = RB / 2, ABYTES = 64 * RB, BBYTES = RLN_N * RB;
    extern __shared__ unsigned char raw[];
    __shared__ float red[2][3][64];
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sa = base, *sb = base + STG * ABYTES;
    uint64_t *full = (uint64_t *)(sb + STG * BBYTES), *empty = full + STG;
    const int tid = threadIdx.x, wg = tid / 128, kt_n = k / BKR;
    const uint32_t rank = CL > 1 ? cluster_rank() : 0;
    const int m0 = blockIdx.x * 64;
    if (tid == 0) {
        for (int s = 0; s < STG; s++) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 3 * CL);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CL > 1)
        cluster_sync_all();
    else
        __syncthreads();
    /* k-tile r into stage r % STG: this CTA's A rows, and its share of B's
     * boxes sent to every CTA of the cluster */
    auto produce = [&](int r) {
        const int s = r % STG;
        bar_expect(&full[s], ABYTES + BBYTES);
        tma_load(sa + s * ABYTES, &ta, &full[s], r * BKR, m0);
        for (int i = rank; i < RLN_N / RLN_BOX; i += CL) {
            if (CL > 1)
                tma_load_mc(sb + s * BBYTES + i * RLN_BOX * RB, &tb, &full[s], r * BKR, i * RLN_BOX,
                            (uint16_t)((1u << CL) - 1));
            else
                tma_load(sb + s * BBYTES + i * RLN_BOX * RB, &tb, &full[s], r * BKR, i * RLN_BOX);
        }
    };
    if (tid == 0)
        for (int r = 0; r < STG && r < kt_n; r++)
            produce(r);
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++)
        acc[i] = 0.f;
    for (int kt = 0; kt < kt_n; kt++) {
        const int s = kt % STG;
        bar_wait(&full[s], (kt / STG) & 1);
        const uint64_t da = desc_sw(sa + s * ABYTES, RB), db = desc_sw(sb + s * BBYTES + wg * 256 * RB, RB);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BKR / 16; kk++)
            wgmma_m64n256(acc, da + 2 * kk, db + 2 * kk, 1);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        /* stage s is free here: tell every CTA that loads into it */
        if (tid % 128 == 0)
            for (int r = 0; r < CL; r++) {
                if (CL > 1)
                    bar_arrive_remote(&empty[s], r);
                else
                    bar_arrive(&empty[s]);
            }
        if (tid == 0 && kt + STG < kt_n) {
            if (CL > 1)
                bar_wait_cluster(&empty[s], (kt / STG) & 1);
            else
                bar_wait(&empty[s], (kt / STG) & 1);
            produce(kt + STG);
        }
    }
#pragma unroll
    for (int i = 0; i < 128; i++)
        asm volatile("" : "+f"(acc[i])::"memory");
    /* x = acc + bias + residual; lane (g, t) of warp w (of its warpgroup)
     * holds rows 16w + g (acc[4j], acc[4j + 1]) and 16w + g + 8 (acc[4j + 2],
     * acc[4j + 3]) at columns 256 wg + 8j + 2t, + 1 */
    const int lr = ((tid % 128) / 32) * 16 + (tid % 32) / 4, t = tid % 4, row = m0 + lr;
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const int col = wg * 256 + 8 * j + 2 * t;
        const __half2 bb = *(const __half2 *)(bias + col);
        const __half2 r0 = *(const __half2 *)(residual + (size_t)row * RLN_N + col);
        const __half2 r1 = *(const __half2 *)(residual + (size_t)(row + 8) * RLN_N + col);
        acc[4 * j] += __low2float(bb) + __low2float(r0);
        acc[4 * j + 1] += __high2float(bb) + __high2float(r0);
        acc[4 * j + 2] += __low2float(bb) + __low2float(r1);
        acc[4 * j + 3] += __high2float(bb) + __high2float(r1);
        s0 += acc[4 * j] + acc[4 * j + 1];
        s1 += acc[4 * j + 2] + acc[4 * j + 3];
    }
    /* row sums: the lane quad, then the three warpgroups through shared memory */
    auto row_sums = [&](float *slot, float &a, float &b) {
        a += __shfl_xor_sync(0xffffffffu, a, 1);
        a += __shfl_xor_sync(0xffffffffu, a, 2);
        b += __shfl_xor_sync(0xffffffffu, b, 1);
        b += __shfl_xor_sync(0xffffffffu, b, 2);
        if (t == 0) {
            slot[wg * 64 + lr] = a;
            slot[wg * 64 + lr + 8] = b;
        }
        __syncthreads();
        a = slot[lr] + slot[64 + lr] + slot[128 + lr];
        b = slot[lr + 8] + slot[64 + lr + 8] + slot[128 + lr + 8];
    };
    row_sums(&red[0][0][0], s0, s1);
    const float mean0 = s0 * (1.f / RLN_N), mean1 = s1 * (1.f / RLN_N);
    float q0 = 0.f, q1 = 0.f;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const float d0 = acc[4 * j] - mean0, d1 = acc[4 * j + 1] - mean0;
        const float d2 = acc[4 * j + 2] - mean1, d3 = acc[4 * j + 3] - mean1;
        q0 += d0 * d0 + d1 * d1;
        q1 += d2 * d2 + d3 * d3;
    }
    row_sums(&red[1][0][0], q0, q1);
    const float inv0 = rsqrtf(q0 * (1.f / RLN_N) + eps), inv1 = rsqrtf(q1 * (1.f / RLN_N) + eps);
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const int col = wg * 256 + 8 * j + 2 * t;
        const __half2 gg = *(const __half2 *)(gamma + col), ee = *(const __half2 *)(beta + col);
        const float g0 = __low2float(gg), g1 = __high2float(gg), e0 = __low2float(ee), e1 = __high2float(ee);
        *(__half2 *)(c + (size_t)row * RLN_N + col) =
            __floats2half2_rn((acc[4 * j] - mean0) * inv0 * g0 + e0, (acc[4 * j + 1] - mean0) * inv0 * g1 + e1);
        *(__half2 *)(c + (size_t)(row + 8) * RLN_N + col) =
            __floats2half2_rn((acc[4 * j + 2] - mean1) * inv1 * g0 + e0, (acc[4 * j + 3] - mean1) * inv1 * g1 + e1);
    }
    if (CL > 1)
        cluster_sync_all(); /* no CTA leaves while another may still signal its barriers */
}

/* ---- Warp-specialized GEMM (+ LayerNorm), a cluster spanning N = 768 ----
 *
 * A cluster of WS_CL CTAs owns a 128-row block and WS_CL x 192 columns (for
 * BERT-base's N = 768 the whole row): each CTA 128 x 192, two consumer
 * warpgroups of wgmma m64n192k16 (96 accumulators a thread). A producer
 * warp of its own streams the k-tiles, so the consumers never wait on a
 * thread that is also computing: its CTA's quarter of the cluster's A tile,
 * multicast to every CTA (they share the rows), and its own 192 x 64 tile
 * of B. Each stage is written by every CTA of the cluster, so a consumer
 * warpgroup releases it to all of them. LN: bias, residual and LayerNorm
 * over the row in the epilogue, the row sums exchanged through distributed
 * shared memory (n must be WS_CL x 192); else bias only, any n that is a
 * multiple of WS_CL x 192. */
#define WS_CL 4
#define WS_BN 192
#define WS_THREADS 288
#define WS_STG 5
#define WS_ABYTES (BM * BK * 2)
#define WS_BBYTES (WS_BN * BK * 2)

static size_t ws_smem(void) { return (size_t)WS_STG * (WS_ABYTES + WS_BBYTES) + 2 * WS_STG * 8 + 1024; }

__device__ __forceinline__ void wgmma_m64n192(float (&d)[96], uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
                 "%96, %97, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* An arrival on the barrier at the same place in CTA `rank`, with the
 * default (CTA-scope) release: bar_arrive_remote's cluster-scope release
 * fences the thread at every arrival. */
__device__ __forceinline__ void bar_arrive_at(uint64_t *b, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(b)), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(r) : "memory");
}

/* CL: the cluster's CTAs along N (1, 2 or 4; LN needs CL x 192 = n). FAST:
 * a stage released to the cluster's CTAs by CL lanes at once with the
 * default release, and the producer waiting at CTA scope; else one lane
 * arriving at each CTA in turn with cluster-scope release and acquire. */
template <bool LN, int CL, bool FAST>
__global__ void __launch_bounds__(WS_THREADS, 1)
    wgmma_ws(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb, __half *__restrict__ c,
             const __half *__restrict__ bias, const __half *__restrict__ residual, const __half *__restrict__ gamma,
             const __half *__restrict__ beta, float eps, int n, int k) {
    extern __shared__ unsigned char raw[];
    __shared__ float part[2][BM]; /* this CTA's row sums: of x, then of (x - mean)^2 */
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sa = base, *sb = base + WS_STG * WS_ABYTES;
    uint64_t *full = (uint64_t *)(sb + WS_STG * WS_BBYTES), *empty = full + WS_STG;
    const int tid = threadIdx.x, wg = tid / 128, kt_n = k / BK;
    const uint32_t rank = cluster_rank();
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * WS_BN;
    if (tid == 0) {
        for (int s = 0; s < WS_STG; s++) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 2 * CL);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CL > 1)
        cluster_sync_all(); /* every CTA's barriers exist before any copy lands in it */
    else
        __syncthreads();
    float acc[96];
    if (wg == 2) { /* the producer warp */
        if (tid == 256) {
            constexpr int AROWS = BM / CL;
            for (int kt = 0; kt < kt_n; kt++) {
                const int s = kt % WS_STG;
                if (kt >= WS_STG) {
                    if (FAST || CL == 1)
                        bar_wait(&empty[s], (kt / WS_STG - 1) & 1);
                    else
                        bar_wait_cluster(&empty[s], (kt / WS_STG - 1) & 1);
                }
                bar_expect(&full[s], WS_ABYTES + WS_BBYTES);
                if (CL > 1)
                    tma_load_mc(sa + s * WS_ABYTES + rank * AROWS * BK * 2, &ta, &full[s], kt * BK,
                                m0 + rank * AROWS, (uint16_t)((1u << CL) - 1));
                else
                    tma_load(sa + s * WS_ABYTES, &ta, &full[s], kt * BK, m0);
                tma_load(sb + s * WS_BBYTES, &tb, &full[s], kt * BK, n0);
            }
        }
        __syncwarp();
    } else {
#pragma unroll
        for (int i = 0; i < 96; i++)
            acc[i] = 0.f;
        for (int kt = 0; kt < kt_n; kt++) {
            const int s = kt % WS_STG;
            bar_wait(&full[s], (kt / WS_STG) & 1);
            const uint64_t da = desc_sw128(sa + s * WS_ABYTES + wg * 64 * BK * 2), db = desc_sw128(sb + s * WS_BBYTES);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++)
                wgmma_m64n192(acc, da + 2 * kk, db + 2 * kk, kt > 0 || kk > 0);
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            /* k-tile kt - 1 is done: its stage is free in every CTA */
            if (kt > 0 && CL == 1 && tid % 128 == 0)
                bar_arrive(&empty[(kt - 1) % WS_STG]);
            else if (kt > 0 && FAST && tid % 128 < CL)
                bar_arrive_at(&empty[(kt - 1) % WS_STG], tid % 128);
            else if (kt > 0 && !FAST && tid % 128 == 0)
                for (int r = 0; r < CL; r++)
                    bar_arrive_remote(&empty[(kt - 1) % WS_STG], r);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
    const bool consumer = wg < 2;
    const int lr = acc_row(), row = m0 + lr, t = tid % 4;
    if (!LN) {
        if (consumer)
#pragma unroll
            for (int j = 0; j < 24; j++) {
                const int col = n0 + 8 * j + 2 * t;
                const __half2 bb = *(const __half2 *)(bias + col);
                *(__half2 *)(c + (size_t)row * n + col) =
                    __floats2half2_rn(acc[4 * j] + __low2float(bb), acc[4 * j + 1] + __high2float(bb));
                *(__half2 *)(c + (size_t)(row + 8) * n + col) =
                    __floats2half2_rn(acc[4 * j + 2] + __low2float(bb), acc[4 * j + 3] + __high2float(bb));
            }
        if (CL > 1)
            cluster_sync_all(); /* no CTA leaves while another may still signal its barriers */
        return;
    }
    cg::cluster_group cluster = cg::this_cluster();
    /* this lane's partial sums of rows lr and lr + 8 over the quad, then
     * over the cluster's CTAs through `slot` */
    auto row_sums = [&](float *slot, float &a, float &b) {
        a += __shfl_xor_sync(0xffffffffu, a, 1);
        a += __shfl_xor_sync(0xffffffffu, a, 2);
        b += __shfl_xor_sync(0xffffffffu, b, 1);
        b += __shfl_xor_sync(0xffffffffu, b, 2);
        if (consumer && t == 0) {
            slot[lr] = a;
            slot[lr + 8] = b;
        }
        cluster_sync_all();
        a = b = 0.f;
        if (consumer)
            for (int r = 0; r < CL; r++) {
                const float *p = cluster.map_shared_rank(slot, r);
                a += p[lr];
                b += p[lr + 8];
            }
    };
    float s0 = 0.f, s1 = 0.f;
    if (consumer)
#pragma unroll
        for (int j = 0; j < 24; j++) {
            const int col = n0 + 8 * j + 2 * t;
            const __half2 bb = *(const __half2 *)(bias + col);
            const __half2 r0 = *(const __half2 *)(residual + (size_t)row * n + col);
            const __half2 r1 = *(const __half2 *)(residual + (size_t)(row + 8) * n + col);
            acc[4 * j] += __low2float(bb) + __low2float(r0);
            acc[4 * j + 1] += __high2float(bb) + __high2float(r0);
            acc[4 * j + 2] += __low2float(bb) + __low2float(r1);
            acc[4 * j + 3] += __high2float(bb) + __high2float(r1);
            s0 += acc[4 * j] + acc[4 * j + 1];
            s1 += acc[4 * j + 2] + acc[4 * j + 3];
        }
    row_sums(part[0], s0, s1);
    const float rn = 1.f / (float)n, mean0 = s0 * rn, mean1 = s1 * rn;
    float q0 = 0.f, q1 = 0.f;
    if (consumer)
#pragma unroll
        for (int j = 0; j < 24; j++) {
            const float d0 = acc[4 * j] - mean0, d1 = acc[4 * j + 1] - mean0;
            const float d2 = acc[4 * j + 2] - mean1, d3 = acc[4 * j + 3] - mean1;
            q0 += d0 * d0 + d1 * d1;
            q1 += d2 * d2 + d3 * d3;
        }
    row_sums(part[1], q0, q1);
    const float inv0 = rsqrtf(q0 * rn + eps), inv1 = rsqrtf(q1 * rn + eps);
    if (consumer)
#pragma unroll
        for (int j = 0; j < 24; j++) {
            const int col = n0 + 8 * j + 2 * t;
            const __half2 gg = *(const __half2 *)(gamma + col), ee = *(const __half2 *)(beta + col);
            const float g0 = __low2float(gg), g1 = __high2float(gg), e0 = __low2float(ee), e1 = __high2float(ee);
            *(__half2 *)(c + (size_t)row * n + col) = __floats2half2_rn((acc[4 * j] - mean0) * inv0 * g0 + e0,
                                                                        (acc[4 * j + 1] - mean0) * inv0 * g1 + e1);
            *(__half2 *)(c + (size_t)(row + 8) * n + col) = __floats2half2_rn(
                (acc[4 * j + 2] - mean1) * inv1 * g0 + e0, (acc[4 * j + 3] - mean1) * inv1 * g1 + e1);
        }
    cluster_sync_all(); /* no CTA leaves while another still reads its sums */
}

/* ---- The same, persistent: tiles handed out in turn, and the LayerNorm's
 * row sums pushed to the cluster's CTAs with st.async ----
 *
 * A CTA (LN: a cluster of CL CTAs along N) loops over output tiles; the
 * producer warp streams k-tiles without a break between tiles, so the
 * stages fill for the next tile while the consumers run this one's
 * epilogue. No multicast: each CTA loads its own A and B tiles, and a
 * stage is released to its own producer only. LN: each CTA pushes its row
 * sums into every CTA's `xs` with st.async, which counts the bytes on that
 * CTA's `xbar` (two exchanges a tile, each on its own barrier; one cannot
 * run a whole exchange ahead of another CTA, so a slot is never written
 * before its reader is done with it). */
__device__ __forceinline__ void st_async_f32(float *dst, float v, uint64_t *bar, uint32_t rank) {
    uint32_t d, b;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(smem_addr(dst)), "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(b) : "r"(smem_addr(bar)), "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(d), "f"(v), "r"(b)
                 : "memory");
}

/* One output tile's main loop in a persistent kernel, for a consumer
 * warpgroup `wg` (tid: the thread's index among the consumers): acc = its
 * 64 x 192 of A · Bᵀ over kt_n k-tiles, read from the STG-stage ring that
 * the producer fills; it counts k-tiles across tiles (stage and phase).
 * Each k-tile's products stay in flight while the next is issued; a stage
 * goes back to the producer once the products reading it are done, the
 * last one at the end. */
template <int STG>
__device__ __forceinline__ void consume_tile(float (&acc)[96], unsigned char *sa, unsigned char *sb, uint64_t *full,
                                             uint64_t *empty, int &it, int kt_n, int wg, int tid) {
#pragma unroll
    for (int i = 0; i < 96; i++)
        acc[i] = 0.f;
    for (int kt = 0; kt < kt_n; kt++, it++) {
        const int s = it % STG;
        bar_wait(&full[s], (it / STG) & 1);
        const uint64_t da = desc_sw128(sa + s * WS_ABYTES + wg * 64 * BK * 2), db = desc_sw128(sb + s * WS_BBYTES);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            wgmma_m64n192(acc, da + 2 * kk, db + 2 * kk, 1);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (kt > 0 && tid % 128 == 0)
            bar_arrive(&empty[(it - 1) % STG]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (tid % 128 == 0)
        bar_arrive(&empty[(it - 1) % STG]);
}

/* The LayerNorm's statistics of rows lr and lr + 8 of the tile at (m0, n0)
 * without a cluster: acc holds this thread's x (bias and residual added),
 * s0 and s1 its partial sums of the two rows. The quad's sums give this
 * part's mean, then its sum of squared deviations; each CTA of the row
 * block writes its part to global memory (gx), counts itself in on the
 * block's flag (gflag) and waits for the other parts, which combine
 * exactly (Chan's formula). The last reader resets the flags. For the 256
 * consumer threads (named barrier 1), tid their index. */
__device__ __forceinline__ void global_row_stats(const float (&acc)[96], float s0, float s1, int lr, int t, int tid,
                                                 int m0, int n0, int n, float eps, float2 *gx, int *gflag,
                                                 float &mean0, float &mean1, float &inv0, float &inv1) {
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    const float lm0 = s0 * (1.f / WS_BN), lm1 = s1 * (1.f / WS_BN);
    float q0 = 0.f, q1 = 0.f;
#pragma unroll
    for (int j = 0; j < 24; j++) {
        const float d0 = acc[4 * j] - lm0, d1 = acc[4 * j + 1] - lm0;
        const float d2 = acc[4 * j + 2] - lm1, d3 = acc[4 * j + 3] - lm1;
        q0 += d0 * d0 + d1 * d1;
        q1 += d2 * d2 + d3 * d3;
    }
    q0 += __shfl_xor_sync(0xffffffffu, q0, 1);
    q0 += __shfl_xor_sync(0xffffffffu, q0, 2);
    q1 += __shfl_xor_sync(0xffffffffu, q1, 1);
    q1 += __shfl_xor_sync(0xffffffffu, q1, 2);
    const int mb = m0 / BM, parts = n / WS_BN, part = n0 / WS_BN;
    float2 *blk = gx + (size_t)mb * parts * BM;
    if (t == 0) {
        blk[part * BM + lr] = make_float2(lm0, q0);
        blk[part * BM + lr + 8] = make_float2(lm1, q1);
        __threadfence();
    }
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (tid == 0) {
        atomicAdd(&gflag[2 * mb], 1);
        while (*(volatile int *)&gflag[2 * mb] < parts)
            ;
        __threadfence();
    }
    asm volatile("bar.sync 1, 256;" ::: "memory");
    float m20 = 0.f, m21 = 0.f;
    mean0 = mean1 = 0.f;
    for (int p = 0; p < parts; p++) {
        const float2 a = __ldcg(&blk[p * BM + lr]), b = __ldcg(&blk[p * BM + lr + 8]);
        mean0 += a.x;
        mean1 += b.x;
        m20 += a.y;
        m21 += b.y;
    }
    mean0 /= (float)parts;
    mean1 /= (float)parts;
    for (int p = 0; p < parts; p++) {
        const float2 a = __ldcg(&blk[p * BM + lr]), b = __ldcg(&blk[p * BM + lr + 8]);
        m20 += WS_BN * (a.x - mean0) * (a.x - mean0);
        m21 += WS_BN * (b.x - mean1) * (b.x - mean1);
    }
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (tid == 0 && atomicAdd(&gflag[2 * mb + 1], 1) == parts - 1) { /* every part has read */
        gflag[2 * mb] = 0;
        gflag[2 * mb + 1] = 0;
    }
    const float rn = 1.f / (float)n;
    inv0 = rsqrtf(m20 * rn + eps);
    inv1 = rsqrtf(m21 * rn + eps);
}

/* EPI 0: bias only; 1: LayerNorm, row sums exchanged in the cluster (CL
 * x 192 = n); 2: LayerNorm without a cluster (CL 1): each CTA of a row
 * block writes its part's mean and sum of squared deviations to global
 * memory (gx), counts itself in on the block's flag (gflag) and waits for
 * the other parts; the parts combine exactly (Chan's formula), so one
 * exchange does. The grid must be resident at once (a cooperative launch)
 * and a multiple of the parts a row, so that a row block's tiles fall in
 * one round of the tile loop. The last reader resets the block's flags. */
template <int EPI, int CL>
__global__ void __launch_bounds__(WS_THREADS, 1)
    wgmma_pws(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb, __half *__restrict__ c,
              const __half *__restrict__ bias, const __half *__restrict__ residual, const __half *__restrict__ gamma,
              const __half *__restrict__ beta, float eps, int m, int n, int k, float2 *gx, int *gflag) {
    constexpr bool LN = EPI != 0;
    extern __shared__ unsigned char raw[];
    __shared__ float xs[2][CL][BM];         /* the row sums of each CTA of the cluster: of x, of (x - mean)^2 */
    __shared__ __align__(8) uint64_t xbar[2]; /* their bytes in */
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sa = base, *sb = base + WS_STG * WS_ABYTES;
    uint64_t *full = (uint64_t *)(sb + WS_STG * WS_BBYTES), *empty = full + WS_STG;
    const int tid = threadIdx.x, wg = tid / 128, kt_n = k / BK;
    const uint32_t rank = CL > 1 ? cluster_rank() : 0;
    const int ngroups = n / (WS_BN * CL), tiles = (m / BM) * ngroups, cid = blockIdx.x / CL, ncl = gridDim.x / CL;
    if (tid == 0) {
        for (int s = 0; s < WS_STG; s++) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 2);
        }
        bar_init(&xbar[0], 1);
        bar_init(&xbar[1], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CL > 1)
        cluster_sync_all();
    else
        __syncthreads();
    if (wg == 2) { /* the producer warp */
        if (tid == 256) {
            int it = 0;
            for (int tile = cid; tile < tiles; tile += ncl) {
                const int m0 = tile / ngroups * BM, n0 = (tile % ngroups * CL + rank) * WS_BN;
                for (int kt = 0; kt < kt_n; kt++, it++) {
                    const int s = it % WS_STG;
                    if (it >= WS_STG)
                        bar_wait(&empty[s], (it / WS_STG - 1) & 1);
                    bar_expect(&full[s], WS_ABYTES + WS_BBYTES);
                    tma_load(sa + s * WS_ABYTES, &ta, &full[s], kt * BK, m0);
                    tma_load(sb + s * WS_BBYTES, &tb, &full[s], kt * BK, n0);
                }
            }
        }
        __syncwarp();
    } else {
        const int lr = acc_row(), t = tid % 4;
        float acc[96];
        int it = 0, ti = 0;
        for (int tile = cid; tile < tiles; tile += ncl, ti++) {
            const int m0 = tile / ngroups * BM, n0 = (tile % ngroups * CL + rank) * WS_BN, row = m0 + lr;
            consume_tile<WS_STG>(acc, sa, sb, full, empty, it, kt_n, wg, tid);
            if (!LN) {
#pragma unroll
                for (int j = 0; j < 24; j++) {
                    const int col = n0 + 8 * j + 2 * t;
                    const __half2 bb = *(const __half2 *)(bias + col);
                    *(__half2 *)(c + (size_t)row * n + col) =
                        __floats2half2_rn(acc[4 * j] + __low2float(bb), acc[4 * j + 1] + __high2float(bb));
                    *(__half2 *)(c + (size_t)(row + 8) * n + col) =
                        __floats2half2_rn(acc[4 * j + 2] + __low2float(bb), acc[4 * j + 3] + __high2float(bb));
                }
                continue;
            }
            if (EPI == 2) {
                float s0 = 0.f, s1 = 0.f;
#pragma unroll
                for (int j = 0; j < 24; j++) {
                    const int col = n0 + 8 * j + 2 * t;
                    const __half2 bb = *(const __half2 *)(bias + col);
                    const __half2 r0 = *(const __half2 *)(residual + (size_t)row * n + col);
                    const __half2 r1 = *(const __half2 *)(residual + (size_t)(row + 8) * n + col);
                    acc[4 * j] += __low2float(bb) + __low2float(r0);
                    acc[4 * j + 1] += __high2float(bb) + __high2float(r0);
                    acc[4 * j + 2] += __low2float(bb) + __low2float(r1);
                    acc[4 * j + 3] += __high2float(bb) + __high2float(r1);
                    s0 += acc[4 * j] + acc[4 * j + 1];
                    s1 += acc[4 * j + 2] + acc[4 * j + 3];
                }
                float mean0, mean1, inv0, inv1;
                global_row_stats(acc, s0, s1, lr, t, tid, m0, n0, n, eps, gx, gflag, mean0, mean1, inv0, inv1);
#pragma unroll
                for (int j = 0; j < 24; j++) {
                    const int col = n0 + 8 * j + 2 * t;
                    const __half2 gg = *(const __half2 *)(gamma + col), ee = *(const __half2 *)(beta + col);
                    const float g0 = __low2float(gg), g1 = __high2float(gg), e0 = __low2float(ee),
                                e1 = __high2float(ee);
                    *(__half2 *)(c + (size_t)row * n + col) = __floats2half2_rn(
                        (acc[4 * j] - mean0) * inv0 * g0 + e0, (acc[4 * j + 1] - mean0) * inv0 * g1 + e1);
                    *(__half2 *)(c + (size_t)(row + 8) * n + col) = __floats2half2_rn(
                        (acc[4 * j + 2] - mean1) * inv1 * g0 + e0, (acc[4 * j + 3] - mean1) * inv1 * g1 + e1);
                }
                continue;
            }
            /* rows lr and lr + 8: the quad's sums, pushed to every CTA of
             * the cluster; back, the sums over the whole row */
            auto exchange = [&](int e, float &a, float &b) {
                a += __shfl_xor_sync(0xffffffffu, a, 1);
                a += __shfl_xor_sync(0xffffffffu, a, 2);
                b += __shfl_xor_sync(0xffffffffu, b, 1);
                b += __shfl_xor_sync(0xffffffffu, b, 2);
                if (tid == 0)
                    bar_expect(&xbar[e], CL * BM * 4);
                if (t == 0)
                    for (int r = 0; r < CL; r++) {
                        st_async_f32(&xs[e][rank][lr], a, &xbar[e], r);
                        st_async_f32(&xs[e][rank][lr + 8], b, &xbar[e], r);
                    }
                bar_wait(&xbar[e], ti & 1);
                a = b = 0.f;
#pragma unroll
                for (int r = 0; r < CL; r++) {
                    a += xs[e][r][lr];
                    b += xs[e][r][lr + 8];
                }
            };
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int j = 0; j < 24; j++) {
                const int col = n0 + 8 * j + 2 * t;
                const __half2 bb = *(const __half2 *)(bias + col);
                const __half2 r0 = *(const __half2 *)(residual + (size_t)row * n + col);
                const __half2 r1 = *(const __half2 *)(residual + (size_t)(row + 8) * n + col);
                acc[4 * j] += __low2float(bb) + __low2float(r0);
                acc[4 * j + 1] += __high2float(bb) + __high2float(r0);
                acc[4 * j + 2] += __low2float(bb) + __low2float(r1);
                acc[4 * j + 3] += __high2float(bb) + __high2float(r1);
                s0 += acc[4 * j] + acc[4 * j + 1];
                s1 += acc[4 * j + 2] + acc[4 * j + 3];
            }
            exchange(0, s0, s1);
            const float rn = 1.f / (float)n, mean0 = s0 * rn, mean1 = s1 * rn;
            float q0 = 0.f, q1 = 0.f;
#pragma unroll
            for (int j = 0; j < 24; j++) {
                const float d0 = acc[4 * j] - mean0, d1 = acc[4 * j + 1] - mean0;
                const float d2 = acc[4 * j + 2] - mean1, d3 = acc[4 * j + 3] - mean1;
                q0 += d0 * d0 + d1 * d1;
                q1 += d2 * d2 + d3 * d3;
            }
            exchange(1, q0, q1);
            const float inv0 = rsqrtf(q0 * rn + eps), inv1 = rsqrtf(q1 * rn + eps);
#pragma unroll
            for (int j = 0; j < 24; j++) {
                const int col = n0 + 8 * j + 2 * t;
                const __half2 gg = *(const __half2 *)(gamma + col), ee = *(const __half2 *)(beta + col);
                const float g0 = __low2float(gg), g1 = __high2float(gg), e0 = __low2float(ee), e1 = __high2float(ee);
                *(__half2 *)(c + (size_t)row * n + col) = __floats2half2_rn(
                    (acc[4 * j] - mean0) * inv0 * g0 + e0, (acc[4 * j + 1] - mean0) * inv0 * g1 + e1);
                *(__half2 *)(c + (size_t)(row + 8) * n + col) = __floats2half2_rn(
                    (acc[4 * j + 2] - mean1) * inv1 * g0 + e0, (acc[4 * j + 3] - mean1) * inv1 * g1 + e1);
            }
        }
    }
    if (CL > 1)
        cluster_sync_all(); /* no CTA leaves while another may still push into it */
}

/* ---- GEMM + LayerNorm, persistent, residual in and output out by TMA ----
 *
 * wgmma_pws's epilogue 2 reads the residual and writes the output straight
 * from the accumulator layout, a few bytes a thread, and waits on DRAM for
 * each. Here the producer warp also loads the tile's residual into shared
 * memory (three 128 x 64 boxes in the 128-byte swizzle, so that the lane
 * quads' reads meet no bank conflict), once it has issued the tile's last
 * k-tile; the consumers read it there, write the normalized output over it
 * in place (each thread the bytes it read), and a store warp sends it out
 * with TMA while the consumers go on to the next tile. Four stages, so that
 * the 48 KB buffer fits. Barriers: rfull (residual in), ofull (output
 * written, the 8 consumer warps), rempty (the store has read the buffer). */
#define PLN_STG 4
#define PLN_THREADS 320
/* PWG: a producer warpgroup (warp 0 loads, warp 1 stores) before the two
 * consumer warpgroups, 384 threads, registers moved to the consumers with
 * setmaxnreg (40 for the producers, 232 for the consumers) */
#define PLN_THREADS_WG 384
#define PLN_RBYTES (BM * WS_BN * 2)

static size_t pln_smem(void) {
    return (size_t)PLN_STG * (WS_ABYTES + WS_BBYTES) + PLN_RBYTES + (2 * PLN_STG + 3) * 8 + 1024;
}

__device__ __forceinline__ void tma_store(const CUtensorMap *map, const void *src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

/* the byte of (row r, column col) of a 128 x 192 half tile held as three
 * 128 x 64 boxes in the 128-byte swizzle */
__device__ __forceinline__ int sw_off(int r, int col) {
    return (col >> 6) * (BM * 128) + r * 128 + ((((col & 63) >> 3) ^ (r & 7)) << 4) + (col & 7) * 2;
}

template <int PWG>
__global__ void __launch_bounds__(PWG ? PLN_THREADS_WG : PLN_THREADS, 1)
    wgmma_pln(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
              const __grid_constant__ CUtensorMap tr, const __grid_constant__ CUtensorMap tc,
              const __half *__restrict__ bias, const __half *__restrict__ gamma, const __half *__restrict__ beta,
              float eps, int m, int n, int k, float2 *gx, int *gflag) {
    extern __shared__ unsigned char raw[];
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sa = base, *sb = base + PLN_STG * WS_ABYTES, *sr = sb + PLN_STG * WS_BBYTES;
    uint64_t *full = (uint64_t *)(sr + PLN_RBYTES), *empty = full + PLN_STG, *rfull = empty + PLN_STG,
             *ofull = rfull + 1, *rempty = ofull + 1;
    /* roles: consumers are threads cb .. cb + 255, tid their index */
    constexpr int cb = PWG ? 128 : 0, producer = PWG ? 0 : 256, storer = PWG ? 32 : 288;
    const int tid = threadIdx.x - cb, wg = tid / 128, kt_n = k / BK;
    const int parts = n / WS_BN, tiles = (m / BM) * parts;
    if (threadIdx.x == 0) {
        for (int s = 0; s < PLN_STG; s++) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 2);
        }
        bar_init(rfull, 1);
        bar_init(ofull, 8);
        bar_init(rempty, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (PWG) {
        if (threadIdx.x < 128)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        else
            asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    }
    if ((int)threadIdx.x == producer) { /* the producer */
        int it = 0, ti = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ti++) {
            const int m0 = tile / parts * BM, n0 = tile % parts * WS_BN;
            for (int kt = 0; kt < kt_n; kt++, it++) {
                const int s = it % PLN_STG;
                if (it >= PLN_STG)
                    bar_wait(&empty[s], (it / PLN_STG - 1) & 1);
                bar_expect(&full[s], WS_ABYTES + WS_BBYTES);
                tma_load(sa + s * WS_ABYTES, &ta, &full[s], kt * BK, m0);
                tma_load(sb + s * WS_BBYTES, &tb, &full[s], kt * BK, n0);
            }
            if (ti > 0)
                bar_wait(rempty, (ti - 1) & 1);
            bar_expect(rfull, PLN_RBYTES);
            for (int i = 0; i < 3; i++)
                tma_load(sr + i * BM * 128, &tr, rfull, n0 + 64 * i, m0);
        }
    } else if ((int)threadIdx.x == storer) { /* the store */
        int ti = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ti++) {
            const int m0 = tile / parts * BM, n0 = tile % parts * WS_BN;
            bar_wait(ofull, ti & 1);
            for (int i = 0; i < 3; i++)
                tma_store(&tc, sr + i * BM * 128, n0 + 64 * i, m0);
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            bar_arrive(rempty);
        }
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    } else if (tid >= 0 && tid < 256) {
        const int lr = wg * 64 + ((tid % 128) / 32) * 16 + (tid % 32) / 4, t = tid % 4;
        float acc[96];
        int it = 0, ti = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ti++) {
            const int m0 = tile / parts * BM, part = tile % parts, n0 = part * WS_BN;
            consume_tile<PLN_STG>(acc, sa, sb, full, empty, it, kt_n, wg, tid);
            /* x = acc + bias + residual; this part's mean and squared deviations */
            bar_wait(rfull, ti & 1);
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int j = 0; j < 24; j++) {
                const int col = 8 * j + 2 * t;
                const __half2 bb = *(const __half2 *)(bias + n0 + col);
                const __half2 r0 = *(const __half2 *)(sr + sw_off(lr, col));
                const __half2 r1 = *(const __half2 *)(sr + sw_off(lr + 8, col));
                acc[4 * j] += __low2float(bb) + __low2float(r0);
                acc[4 * j + 1] += __high2float(bb) + __high2float(r0);
                acc[4 * j + 2] += __low2float(bb) + __low2float(r1);
                acc[4 * j + 3] += __high2float(bb) + __high2float(r1);
                s0 += acc[4 * j] + acc[4 * j + 1];
                s1 += acc[4 * j + 2] + acc[4 * j + 3];
            }
            float mean0, mean1, inv0, inv1;
            global_row_stats(acc, s0, s1, lr, t, tid, m0, n0, n, eps, gx, gflag, mean0, mean1, inv0, inv1);
            int lr2, t2; /* opaque copies: the read loop's addresses are recomputed, not kept live */
            asm volatile("mov.b32 %0, %1;" : "=r"(lr2) : "r"(lr));
            asm volatile("mov.b32 %0, %1;" : "=r"(t2) : "r"(t));
#pragma unroll
            for (int j = 0; j < 24; j++) {
                const int col = 8 * j + 2 * t2;
                const __half2 gg = *(const __half2 *)(gamma + n0 + col), ee = *(const __half2 *)(beta + n0 + col);
                const float g0 = __low2float(gg), g1 = __high2float(gg), e0 = __low2float(ee), e1 = __high2float(ee);
                *(__half2 *)(sr + sw_off(lr2, col)) = __floats2half2_rn((acc[4 * j] - mean0) * inv0 * g0 + e0,
                                                                      (acc[4 * j + 1] - mean0) * inv0 * g1 + e1);
                *(__half2 *)(sr + sw_off(lr2 + 8, col)) = __floats2half2_rn(
                    (acc[4 * j + 2] - mean1) * inv1 * g0 + e0, (acc[4 * j + 3] - mean1) * inv1 * g1 + e1);
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* visible to the TMA store */
            __syncwarp();
            if (tid % 32 == 0)
                bar_arrive(ofull);
        }
    }
}

/* The pair the fused kernel replaces: a LayerNorm pass over rows of 768
 * after the GEMM, a warp a row, three 8-half loads a lane. */
__global__ void ln_rows_768(const __half *__restrict__ x, __half *__restrict__ y, const __half *__restrict__ gamma,
                            const __half *__restrict__ beta, float eps, int m) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= m)
        return;
    float v[24], s = 0.f;
#pragma unroll
    for (int i = 0; i < 3; i++) {
        const uint4 u = *(const uint4 *)(x + (size_t)row * 768 + (i * 32 + lane) * 8);
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            v[i * 8 + 2 * e] = __low2float(h[e]);
            v[i * 8 + 2 * e + 1] = __high2float(h[e]);
            s += v[i * 8 + 2 * e] + v[i * 8 + 2 * e + 1];
        }
    }
    for (int o = 16; o; o /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s * (1.f / 768);
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < 24; i++)
        q += (v[i] - mean) * (v[i] - mean);
    for (int o = 16; o; o /= 2)
        q += __shfl_xor_sync(0xffffffffu, q, o);
    const float inv = rsqrtf(q * (1.f / 768) + eps);
#pragma unroll
    for (int i = 0; i < 3; i++) {
        const int col = (i * 32 + lane) * 8;
        const uint4 ug = *(const uint4 *)(gamma + col), ub = *(const uint4 *)(beta + col);
        const __half2 *g = (const __half2 *)&ug, *b = (const __half2 *)&ub;
        uint4 o;
        __half2 *oh = (__half2 *)&o;
#pragma unroll
        for (int e = 0; e < 4; e++)
            oh[e] = __floats2half2_rn((v[i * 8 + 2 * e] - mean) * inv * __low2float(g[e]) + __low2float(b[e]),
                                      (v[i * 8 + 2 * e + 1] - mean) * inv * __high2float(g[e]) + __high2float(b[e]));
        *(uint4 *)(y + (size_t)row * 768 + col) = o;
    }
}

static PFN_cuTensorMapEncodeTiled_v12000 encode;

/* rows x cols float16, row-major, read in boxes of box_rows x 64 */
static CUtensorMap tensor_map(const void *p, int rows, int cols, int box_rows, int box_cols = BK) {
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t es[2] = {1, 1};
    CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)p, dims, strides, box, es,
                        CU_TENSOR_MAP_INTERLEAVE_NONE,
                        box_cols == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed (%d) for %d x %d\n", (int)r, rows, cols);
        exit(1);
    }
    return m;
}

__global__ void fill(__half *p, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 13;
        x *= 0x5bd1e995u;
        x ^= x >> 15;
        p[i] = __float2half(((float)(x & 0xffff) / 32768.f - 1.f) * scale);
    }
}

static float ms_of(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* the median of reps timed runs of one launcher */
template <typename F> static float median_ms(F launch, int reps, cudaStream_t st) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 5; i++)
        launch();
    float *t = (float *)malloc(sizeof(float) * reps);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, st));
        launch();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        t[i] = ms_of(a, b);
    }
    qsort(t, reps, sizeof(float), cmp_float);
    float m = t[reps / 2];
    free(t);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return m;
}

/* Wait for the stream, at most `seconds`: a kernel whose barriers never
 * complete (a wrong byte count, a wrong parity) would otherwise hang the
 * probe without saying which one. */
static void finish(cudaStream_t st, const char *what, double seconds) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady) {
            fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
            exit(1);
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) > seconds) {
            printf("HUNG: %s did not finish in %.0f s\n", what, seconds);
            fflush(stdout);
            _exit(3);
        }
    }
}

/* wgmma_ws in a cluster of cl CTAs along N */
static void ws_launch(int cl, int fast, bool ln, dim3 grid, cudaStream_t st, const CUtensorMap &ta,
                      const CUtensorMap &tb, __half *c, const __half *bias, const __half *res, const __half *gam,
                      const __half *bet, int n, int k) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cl;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.gridDim = grid;
    cfg.blockDim = dim3(WS_THREADS);
    cfg.dynamicSmemBytes = ws_smem();
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
#define WS_GO(LN, CL, F)                                                                                         \
    if (ln == LN && cl == CL && (fast != 0) == F)                                                                \
        CK(cudaLaunchKernelEx(&cfg, wgmma_ws<LN, CL, F>, ta, tb, c, bias, res, gam, bet, 1e-5f, n, k));
    WS_GO(false, 1, true) WS_GO(false, 2, true) WS_GO(false, 4, true) WS_GO(false, 4, false)
    WS_GO(true, 4, true) WS_GO(true, 4, false)
#undef WS_GO
}

/* wgmma_pws, persistent: as many CTAs (clusters of cl along N) as fit at
 * once, at most one a tile; epi 2 as a cooperative launch, its grid a
 * multiple of the parts a row */
static void pws_launch(int cl, int epi, int m, cudaStream_t st, const CUtensorMap &ta, const CUtensorMap &tb,
                       __half *c, const __half *bias, const __half *res, const __half *gam, const __half *bet, int n,
                       int k, float2 *gx = nullptr, int *gflag = nullptr) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    if (epi == 2) {
        at[0].id = cudaLaunchAttributeCooperative;
        at[0].val.cooperative = 1;
    } else {
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = cl;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
    }
    const int tiles = (m / BM) * (n / (WS_BN * cl));
    cfg.blockDim = dim3(WS_THREADS);
    cfg.dynamicSmemBytes = ws_smem();
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cfg.gridDim = dim3(cl * tiles);
    int fit = 0;
#define PWS_GO(EPI, CL)                                                                                          \
    if (epi == EPI && cl == CL) {                                                                                \
        if (EPI == 2) {                                                                                          \
            int per_sm = 0, sms = 0;                                                                             \
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, wgmma_pws<EPI, CL>, WS_THREADS,            \
                                                             ws_smem()));                                        \
            CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));                                 \
            fit = per_sm * sms / (n / WS_BN) * (n / WS_BN);                                                      \
        } else                                                                                                   \
            CK(cudaOccupancyMaxActiveClusters(&fit, wgmma_pws<EPI, CL>, &cfg));                                  \
        cfg.gridDim = dim3(cl * (fit < tiles ? fit : tiles));                                                    \
        static int said;                                                                                         \
        if (!said++)                                                                                             \
            printf("  (persistent, epilogue %d, clusters of %d: %d fit at once)\n", EPI, CL, fit);                \
        CK(cudaLaunchKernelEx(&cfg, wgmma_pws<EPI, CL>, ta, tb, c, bias, res, gam, bet, 1e-5f, m, n, k, gx,      \
                              gflag));                                                                           \
    }
    PWS_GO(0, 1) PWS_GO(1, 4) PWS_GO(2, 1)
#undef PWS_GO
}

/* wgmma_pln, cooperative: a CTA an SM (a multiple of the parts a row), at most one a tile */
static void pln_launch(int pwg, int m, cudaStream_t st, const CUtensorMap &ta, const CUtensorMap &tb, const CUtensorMap &tr,
                       const CUtensorMap &tc, const __half *bias, const __half *gam, const __half *bet, int n, int k,
                       float2 *gx, int *gflag) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    int per_sm = 0, sms = 0;
    const int threads = pwg ? PLN_THREADS_WG : PLN_THREADS;
    auto kern = pwg ? wgmma_pln<1> : wgmma_pln<0>;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, pln_smem()));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int parts = n / WS_BN, tiles = (m / BM) * parts, fit = per_sm * sms / parts * parts;
    if (fit == 0) {
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, kern));
        printf("wgmma_pln: no CTA fits on an SM (%zu bytes of shared memory; %d registers, at most %d threads, "
               "%zu static and at most %d dynamic bytes of shared memory)\n",
               pln_smem(), fa.numRegs, fa.maxThreadsPerBlock, fa.sharedSizeBytes, fa.maxDynamicSharedSizeBytes);
        exit(1);
    }
    cfg.gridDim = dim3(fit < tiles ? fit : tiles);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = pln_smem();
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kern, ta, tb, tr, tc, bias, gam, bet, 1e-5f, m, n, k, gx, gflag));
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines survive a kill by the caller's timeout */
    int reps = argc > 1 ? atoi(argv[1]) : 30;
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    if (prop.major != 9) {
        printf("skipped: %s is sm_%d%d; wgmma needs sm_90\n", prop.name, prop.major, prop.minor);
        return 77;
    }
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000,
                                         cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
        return 1;
    }
    CK(cudaFuncSetAttribute(wgmma_gemm<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
    CK(cudaFuncSetAttribute(wgmma_gemm<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
    CK(cudaFuncSetAttribute(wgmma_gemm_ln, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
#define RLN_ATTR(CL, RB, STG)                                                                                    \
    CK(cudaFuncSetAttribute(wgmma_rows_ln<CL, RB, STG>, cudaFuncAttributeMaxDynamicSharedMemorySize,             \
                            (int)rln_smem(RB, STG)));
    RLN_ATTR(1, 128, 2) RLN_ATTR(2, 128, 2) RLN_ATTR(4, 128, 2) RLN_ATTR(1, 64, 4) RLN_ATTR(2, 64, 4)
    RLN_ATTR(4, 64, 4)
#undef RLN_ATTR
#define WS_ATTR(LN, CL, F)                                                                                       \
    CK(cudaFuncSetAttribute(wgmma_ws<LN, CL, F>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws_smem()));
    WS_ATTR(false, 1, true) WS_ATTR(false, 2, true) WS_ATTR(false, 4, true) WS_ATTR(false, 4, false)
    WS_ATTR(true, 4, true) WS_ATTR(true, 4, false)
#undef WS_ATTR
    CK(cudaFuncSetAttribute(wgmma_pws<0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws_smem()));
    CK(cudaFuncSetAttribute(wgmma_pws<1, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws_smem()));
    CK(cudaFuncSetAttribute(wgmma_pws<2, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws_smem()));
    CK(cudaFuncSetAttribute(wgmma_pln<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pln_smem()));
    CK(cudaFuncSetAttribute(wgmma_pln<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pln_smem()));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return 1;
    cublasSetStream(h, st);
    printf("%s, float16 in and out, float accumulation, median of %d\n", prop.name, reps);
    printf("%-34s %10s %9s %10s %9s %10s\n", "M x K -> N (+ bias), variant", "wgmma ms", "TFLOP/s",
           "cuBLAS ms", "TFLOP/s", "max err");
    /* one CTA and one k-tile first, then several of each, so that a fault
     * in the mechanics shows apart from one in the pipeline; then BERT-base's
     * GEMMs at batch 64 */
    static const int shapes[][3] = {{128, 64, 128},   {128, 512, 128},  {512, 256, 384},
                                    {256, 128, 768},  {8192, 768, 2304}, {8192, 768, 768},
                                    {8192, 768, 3072}, {8192, 3072, 768}};
    int bad = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
        char tag[48]; /* WGMMA_SHAPE=M,K,N: that shape alone (for a profiler) */
        snprintf(tag, sizeof tag, "%d,%d,%d", m, k, n);
        if (getenv("WGMMA_SHAPE") && strcmp(getenv("WGMMA_SHAPE"), tag) != 0)
            continue;
        __half *a, *b, *bias, *c, *ref;
        CK(cudaMalloc(&a, (size_t)m * k * 2));
        CK(cudaMalloc(&b, (size_t)n * k * 2));
        CK(cudaMalloc(&bias, (size_t)n * 2));
        CK(cudaMalloc(&c, (size_t)m * n * 2));
        CK(cudaMalloc(&ref, (size_t)m * n * 2));
        fill<<<1024, 256, 0, st>>>(a, (size_t)m * k, 1u, 1.f);
        fill<<<1024, 256, 0, st>>>(b, (size_t)n * k, 2u, 0.05f);
        fill<<<16, 256, 0, st>>>(bias, (size_t)n, 3u, 1.f);
        CUtensorMap ta = tensor_map(a, m, k, BM), tb = tensor_map(b, n, k, BN);
        dim3 grid(n / BN, m / BM);
        auto mine0 = [&]() { wgmma_gemm<0><<<grid, THREADS, SMEM_BYTES, st>>>(ta, tb, c, bias, n, k); };
        auto mine1 = [&]() { wgmma_gemm<1><<<grid, THREADS, SMEM_BYTES, st>>>(ta, tb, c, bias, n, k); };
        /* cuBLAS, column-major: Cᵀ [N, M] = B [N, K] · Aᵀ, without the bias
         * (the check adds it to cuBLAS's result) */
        const float one = 1.f, zero = 0.f;
        auto theirs = [&]() {
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16F, k, a, CUDA_R_16F, k,
                         &zero, ref, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        };
        theirs();
        finish(st, "cuBLAS", 10.0);
        __half *hc = (__half *)malloc((size_t)m * n * 2), *hr = (__half *)malloc((size_t)m * n * 2),
               *hb = (__half *)malloc((size_t)n * 2);
        CK(cudaMemcpy(hr, ref, (size_t)m * n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hb, bias, (size_t)n * 2, cudaMemcpyDeviceToHost));
        const double fl = 2.0 * m * n * k;
        const float t_theirs = median_ms(theirs, reps, st);
        for (int lag = 0; lag < 2; lag++) {
            CK(cudaMemsetAsync(c, 0xff, (size_t)m * n * 2, st)); /* NaNs where nothing is written */
            if (lag)
                mine1();
            else
                mine0();
            CK(cudaGetLastError());
            finish(st, lag ? "wgmma lag 1" : "wgmma lag 0", 10.0);
            CK(cudaMemcpy(hc, c, (size_t)m * n * 2, cudaMemcpyDeviceToHost));
            double err = 0, mag = 0;
            for (size_t i = 0; i < (size_t)m * n; i++) {
                double want = (double)__half2float(hr[i]) + __half2float(hb[i % n]);
                double d = fabs((double)__half2float(hc[i]) - want);
                if (!(d <= err)) /* NaN counts */
                    err = d;
                if (fabs(want) > mag)
                    mag = fabs(want);
            }
            const double rel = err / (mag > 0 ? mag : 1);
            if (!(rel < 1e-2)) { /* where it goes wrong, for the layout's sake */
                size_t nbad = 0, first = 0;
                for (size_t i = 0; i < (size_t)m * n; i++) {
                    double want = (double)__half2float(hr[i]) + __half2float(hb[i % n]);
                    if (!(fabs((double)__half2float(hc[i]) - want) <= 1e-2 * (mag > 0 ? mag : 1)) && !nbad++)
                        first = i;
                }
                printf("  lag %d: %zu of %zu elements differ; the first at row %zu, column %zu: %g, want %g\n",
                       lag, nbad, (size_t)m * n, first / n, first % n, (double)__half2float(hc[first]),
                       (double)__half2float(hr[first]) + __half2float(hb[first % n]));
            }
            const float t_mine = lag ? median_ms(mine1, reps, st) : median_ms(mine0, reps, st);
            char label[64];
            snprintf(label, sizeof label, "%d x %d -> %d, lag %d", m, k, n, lag);
            printf("%-34s %10.4f %9.1f %10.4f %9.1f %10.2e%s\n", label, t_mine, fl / t_mine / 1e9,
                   t_theirs, fl / t_theirs / 1e9, rel, rel < 1e-2 ? "" : "  WRONG");
            bad |= !(rel < 1e-2);
        }
        /* the warp-specialized kernel: cluster size, fast release */
        CUtensorMap wa, wb; /* its boxes: 128 / 4 rows of A's tile (the LN variants'), B's 192 rows */
        const bool ws_ok = n % (WS_CL * WS_BN) == 0 && m % BM == 0 && k % BK == 0;
        if (ws_ok) {
            wa = tensor_map(a, m, k, BM / WS_CL);
            wb = tensor_map(b, n, k, WS_BN);
        }
        static const int ws_cfgs[][2] = {{1, 1}, {2, 1}, {4, 1}, {4, 0}, {1, 2}}; /* fast 2: persistent */
        for (size_t wi = 0; ws_ok && wi < sizeof ws_cfgs / sizeof ws_cfgs[0]; wi++) {
            const int cl = ws_cfgs[wi][0], fast = ws_cfgs[wi][1];
            const CUtensorMap wa_cl = tensor_map(a, m, k, BM / cl);
            auto ws = [&]() {
                if (fast == 2)
                    pws_launch(cl, 0, m, st, wa_cl, wb, c, bias, nullptr, nullptr, nullptr, n, k);
                else
                    ws_launch(cl, fast, false, dim3(n / WS_BN, m / BM), st, wa_cl, wb, c, bias, nullptr, nullptr,
                              nullptr, n, k);
            };
            CK(cudaMemsetAsync(c, 0xff, (size_t)m * n * 2, st));
            ws();
            CK(cudaGetLastError());
            finish(st, "wgmma ws", 10.0);
            CK(cudaMemcpy(hc, c, (size_t)m * n * 2, cudaMemcpyDeviceToHost));
            double err = 0, mag = 0;
            for (size_t i = 0; i < (size_t)m * n; i++) {
                double want = (double)__half2float(hr[i]) + __half2float(hb[i % n]);
                double d = fabs((double)__half2float(hc[i]) - want);
                if (!(d <= err))
                    err = d;
                if (fabs(want) > mag)
                    mag = fabs(want);
            }
            const double rel = err / (mag > 0 ? mag : 1);
            const float t_ws = median_ms(ws, reps, st);
            char label[64];
            snprintf(label, sizeof label, "%d x %d -> %d, ws cl%d%s", m, k, n, cl,
                     fast == 2 ? " persistent" : fast ? "" : " slow");
            printf("%-34s %10.4f %9.1f %10.4f %9.1f %10.2e%s\n", label, t_ws, fl / t_ws / 1e9, t_theirs,
                   fl / t_theirs / 1e9, rel, rel < 1e-2 ? "" : "  WRONG");
            bad |= !(rel < 1e-2);
        }
        if (n == LN_CTAS * BN) { /* the LayerNorm epilogue, as after attention-output and FFN2 */
            __half *res, *gam, *bet;
            CK(cudaMalloc(&res, (size_t)m * n * 2));
            CK(cudaMalloc(&gam, (size_t)n * 2));
            CK(cudaMalloc(&bet, (size_t)n * 2));
            fill<<<1024, 256, 0, st>>>(res, (size_t)m * n, 4u, 2.f);
            fill<<<16, 256, 0, st>>>(gam, (size_t)n, 5u, 1.f);
            fill<<<16, 256, 0, st>>>(bet, (size_t)n, 6u, 1.f);
            float2 *gx; /* the global exchange's row parts and flags */
            int *gflag;
            CK(cudaMalloc(&gx, sizeof(float2) * (size_t)m * (n / WS_BN)));
            CK(cudaMalloc(&gflag, sizeof(int) * 2 * (size_t)(m / BM)));
            CK(cudaMemsetAsync(gflag, 0, sizeof(int) * 2 * (size_t)(m / BM), st));
            /* the fused variants: the six-CTA cluster of 128 x 128 tiles, and
             * the one-wave 64-row blocks (cluster size, row bytes, stages) */
            struct variant {
                const char *name;
                int cl, rb;
            };
            static const variant vs[] = {{"cluster-6 tiles", 0, 0},     {"rows cl1 sw128 s2", 1, 128},
                                         {"rows cl2 sw128 s2", 2, 128}, {"rows cl4 sw128 s2", 4, 128},
                                         {"rows cl1 sw64 s4", 1, 64},   {"rows cl2 sw64 s4", 2, 64},
                                         {"rows cl4 sw64 s4", 4, 64},   {"ws cl4 128x192", -1, 1},
                                         {"ws cl4 128x192 slow", -1, 0}, {"pws cl4 persistent", -2, 0},
                                         {"pws global exchange", -3, 0},
                                         {"pln TMA residual, store", -4, 0},
                                         {"pln, producer warpgroup", -5, 0}};
            __half *hres = (__half *)malloc((size_t)m * n * 2), *hg = (__half *)malloc((size_t)n * 2),
                   *he = (__half *)malloc((size_t)n * 2);
            CK(cudaMemcpy(hres, res, (size_t)m * n * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hg, gam, (size_t)n * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(he, bet, (size_t)n * 2, cudaMemcpyDeviceToHost));
            double *want = (double *)malloc(sizeof(double) * (size_t)m * n), *x = (double *)malloc(sizeof(double) * n);
            for (int r = 0; r < m; r++) {
                double mean = 0, var = 0;
                for (int j = 0; j < n; j++) {
                    size_t i = (size_t)r * n + j;
                    x[j] = (double)__half2float(hr[i]) + __half2float(hb[j]) + __half2float(hres[i]);
                    mean += x[j];
                }
                mean /= n;
                for (int j = 0; j < n; j++)
                    var += (x[j] - mean) * (x[j] - mean);
                const double inv = 1.0 / sqrt(var / n + 1e-5);
                for (int j = 0; j < n; j++)
                    want[(size_t)r * n + j] = (x[j] - mean) * inv * __half2float(hg[j]) + __half2float(he[j]);
            }
            free(x);
            for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
                const variant V = vs[vi];
                if (V.cl > 0 && ((m / 64) % V.cl || k % (V.rb / 2)))
                    continue;
                if (V.cl < 0 && !ws_ok)
                    continue;
                const CUtensorMap wa_full = tensor_map(a, m, k, BM); /* the persistent kernel's A boxes */
                const CUtensorMap pr = tensor_map(res, m, n, BM), pc = tensor_map(c, m, n, BM); /* 128 x 64 */
                CUtensorMap ra, rb;
                if (V.cl > 0) {
                    ra = tensor_map(a, m, k, 64, V.rb / 2);
                    rb = tensor_map(b, n, k, RLN_BOX, V.rb / 2);
                }
                auto ln = [&]() {
                    if (V.cl == -2) {
                        pws_launch(4, 1, m, st, wa_full, wb, c, bias, res, gam, bet, n, k);
                        return;
                    }
                    if (V.cl == -5) {
                        pln_launch(1, m, st, wa_full, wb, pr, pc, bias, gam, bet, n, k, gx, gflag);
                        return;
                    }
                    if (V.cl == -4) {
                        pln_launch(0, m, st, wa_full, wb, pr, pc, bias, gam, bet, n, k, gx, gflag);
                        return;
                    }
                    if (V.cl == -3) {
                        pws_launch(1, 2, m, st, wa_full, wb, c, bias, res, gam, bet, n, k, gx, gflag);
                        return;
                    }
                    if (V.cl < 0) {
                        ws_launch(WS_CL, V.rb, true, dim3(n / WS_BN, m / BM), st, wa, wb, c, bias, res, gam, bet,
                                  n, k);
                        return;
                    }
                    if (!V.cl) {
                        wgmma_gemm_ln<<<dim3(LN_CTAS, m / BM), THREADS, SMEM_BYTES, st>>>(ta, tb, c, bias, res, gam,
                                                                                          bet, 1e-5f, k);
                        return;
                    }
                    cudaLaunchConfig_t cfg = {};
                    cudaLaunchAttribute at[1];
                    at[0].id = cudaLaunchAttributeClusterDimension;
                    at[0].val.clusterDim.x = V.cl;
                    at[0].val.clusterDim.y = 1;
                    at[0].val.clusterDim.z = 1;
                    cfg.gridDim = dim3(m / 64);
                    cfg.blockDim = dim3(RLN_THREADS);
                    cfg.dynamicSmemBytes = rln_smem(V.rb, V.rb == 128 ? 2 : 4);
                    cfg.stream = st;
                    cfg.attrs = at;
                    cfg.numAttrs = 1;
#define RLN_GO(CL, RB, STG)                                                                                       \
    if (V.cl == CL && V.rb == RB)                                                                                 \
        CK(cudaLaunchKernelEx(&cfg, wgmma_rows_ln<CL, RB, STG>, ra, rb, c, (const __half *)bias,                  \
                              (const __half *)res, (const __half *)gam, (const __half *)bet, 1e-5f, k));
                    RLN_GO(1, 128, 2) RLN_GO(2, 128, 2) RLN_GO(4, 128, 2) RLN_GO(1, 64, 4) RLN_GO(2, 64, 4)
                    RLN_GO(4, 64, 4)
#undef RLN_GO
                };
                CK(cudaMemsetAsync(c, 0xff, (size_t)m * n * 2, st));
                ln();
                CK(cudaGetLastError());
                finish(st, V.name, 10.0);
                CK(cudaMemcpy(hc, c, (size_t)m * n * 2, cudaMemcpyDeviceToHost));
                double err = 0, mag = 0;
                size_t first = 0, nbad = 0;
                for (size_t i = 0; i < (size_t)m * n; i++) {
                    double d = fabs((double)__half2float(hc[i]) - want[i]);
                    if (!(d <= 2e-2 * (1 + fabs(want[i]))) && !nbad++)
                        first = i;
                    if (!(d <= err))
                        err = d;
                    if (fabs(want[i]) > mag)
                        mag = fabs(want[i]);
                }
                const double rel = err / (mag > 0 ? mag : 1);
                if (nbad)
                    printf("  %s: %zu of %zu elements differ; the first at row %zu, column %zu: %g, want %g\n", V.name,
                           nbad, (size_t)m * n, first / n, first % n, (double)__half2float(hc[first]), want[first]);
                const float t_ln = median_ms(ln, reps, st);
                char label[80];
                snprintf(label, sizeof label, "%d x %d -> %d +LN, %s", m, k, n, V.name);
                printf("%-34s %10.4f %9.1f %10.4f %9.1f %10.2e%s\n", label, t_ln, fl / t_ln / 1e9, t_theirs,
                       fl / t_theirs / 1e9, rel, nbad ? "  WRONG" : "");
                bad |= nbad != 0;
            }
            { /* the pair the fused kernels replace: cuBLAS adding the residual (C = residual, beta 1), then a
               * LayerNorm pass (the bias left out: cuBLASLt's epilogue takes it at no measurable cost) */
                __half *tmp;
                CK(cudaMalloc(&tmp, (size_t)m * n * 2));
                const float one = 1.f;
                auto gemm_res = [&]() {
                    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16F, k, a, CUDA_R_16F, k, &one,
                                 tmp, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                };
                /* the LayerNorm reads the GEMM's output, as in a plan (where it is still in L2) */
                auto ln_pass = [&]() { ln_rows_768<<<m / 8, 256, 0, st>>>(tmp, c, gam, bet, 1e-5f, m); };
                auto pair = [&]() {
                    gemm_res();
                    ln_pass();
                };
                CK(cudaMemcpyAsync(tmp, res, (size_t)m * n * 2, cudaMemcpyDeviceToDevice, st));
                const float t_g = median_ms(gemm_res, reps, st), t_l = median_ms(ln_pass, reps, st),
                            t_p = median_ms(pair, reps, st);
                printf("%-34s %10.4f  (cuBLAS + residual %.4f, LayerNorm pass %.4f)\n", "  the pair: cuBLAS, LN pass",
                       t_p, t_g, t_l);
                const char *sus = getenv("WGMMA_SUSTAIN_MS");
                if (sus && ws_ok) { /* the pair and wgmma_pln under load: each round, SUSTAIN ms of a candidate's
                                     * own runs back to back, then 200 of them between two events */
                    const CUtensorMap fa = tensor_map(a, m, k, BM), fr = tensor_map(res, m, n, BM),
                                      fc = tensor_map(c, m, n, BM);
                    auto fused = [&]() { pln_launch(0, m, st, fa, wb, fr, fc, bias, gam, bet, n, k, gx, gflag); };
                    const double ms = atof(sus);
                    for (int round = 0; round < 3; round++)
                        for (int cand = 0; cand < 2; cand++) {
                            struct timespec t0, t1;
                            clock_gettime(CLOCK_MONOTONIC, &t0);
                            do {
                                for (int i = 0; i < 20; i++)
                                    cand ? fused() : pair();
                                CK(cudaStreamSynchronize(st));
                                clock_gettime(CLOCK_MONOTONIC, &t1);
                            } while ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6 < ms);
                            cudaEvent_t e0, e1;
                            CK(cudaEventCreate(&e0));
                            CK(cudaEventCreate(&e1));
                            CK(cudaEventRecord(e0, st));
                            for (int i = 0; i < 200; i++)
                                cand ? fused() : pair();
                            CK(cudaEventRecord(e1, st));
                            CK(cudaEventSynchronize(e1));
                            printf("  under load, round %d: %-22s %.4f ms a run\n", round,
                                   cand ? "wgmma_pln" : "the pair", ms_of(e0, e1) / 200);
                            CK(cudaEventDestroy(e0));
                            CK(cudaEventDestroy(e1));
                        }
                }
                cudaFree(tmp);
            }
            free(want);
            free(hres);
            free(hg);
            free(he);
            cudaFree(gx);
            cudaFree(gflag);
            cudaFree(res);
            cudaFree(gam);
            cudaFree(bet);
        }
        free(hc);
        free(hr);
        free(hb);
        cudaFree(a);
        cudaFree(b);
        cudaFree(bias);
        cudaFree(c);
        cudaFree(ref);
    }
    cublasDestroy(h);
    cudaStreamDestroy(st);
    printf(bad ? "FAILED: the wgmma kernel disagrees with cuBLAS\n" : "PASSED: the wgmma kernel agrees with cuBLAS\n");
    return bad;
}
