/* int8.cu - direct CUDA kernels of kiln::QConv and kiln::QMatMul (see
 * int8.cuh): the arithmetic of the CPU's k_int8.c, operation for operation,
 * with __fmul_rn / __fadd_rn so that no multiply-add is contracted. */
#include "int8.cuh"

static __device__ __forceinline__ int32_t ld8(const void *p, kiln_dtype t, int64_t i) {
    return t == KILN_DTYPE_UINT8 ? (int32_t)((const uint8_t *)p)[i] : (int32_t)((const int8_t *)p)[i];
}

/* kn_q_quantize_f (graph/quant.h) with each operation rounded on its own. */
static __device__ __forceinline__ float q_round(float x, float scale, float zp, float lo, float hi) {
    float v = __fdiv_rn(x, scale);
    v = v == v ? v : 0.f;
    v = v > -4194304.f ? v : -4194304.f;
    v = v < 4194304.f ? v : 4194304.f;
    v = __fsub_rn(__fadd_rn(v, 12582912.f), 12582912.f);
    v = __fadd_rn(v, zp);
    v = v > lo ? v : lo;
    return v < hi ? v : hi;
}

/* The epilogue of element yi (channel ch, sum acc + B[ch] = a) into Y. */
static __device__ void epilogue_a(const kc_qlayer &q, int32_t a, int64_t ch, const void *z,
                                  void *y, int64_t yi) {
    if (q.y_dt == KILN_DTYPE_INT32) {
        ((int32_t *)y)[yi] = a;
        return;
    }
    float f = __fmul_rn((float)a, q.s[ch]);
    int mid = 0;
    for (int st = 0; st < q.e.n_stages; st++) {
        switch (q.e.stage[st]) {
        case KN_QS_QDQ: {
            float ms = q.e.mid_scale[mid], mz = (float)q.e.mid_zp[mid];
            f = __fmul_rn(__fsub_rn(q_round(f, ms, mz, (float)q.e.mid_lo[mid], (float)q.e.mid_hi[mid]), mz), ms);
            mid++;
            break;
        }
        case KN_QS_BIAS: f = __fadd_rn(f, q.c[ch]); break;
        case KN_QS_ADD: {
            float zv;
            if (q.z_dt == KILN_DTYPE_FLOAT)
                zv = ((const float *)z)[yi];
            else
                zv = __fmul_rn(__fsub_rn((float)ld8(z, q.z_dt, yi), q.zz), q.zs);
            f = __fadd_rn(f, zv);
            break;
        }
        case KN_QS_RELU: f = f > 0.f ? f : 0.f; break;
        case KN_QS_CLIP: f = f < q.e.clip_lo ? q.e.clip_lo : f > q.e.clip_hi ? q.e.clip_hi : f; break;
        default: break;
        }
    }
    if (q.y_dt == KILN_DTYPE_FLOAT) {
        ((float *)y)[yi] = f;
        return;
    }
    int32_t v = (int32_t)q_round(f, q.ys, q.yz, q.lo, q.hi);
    if (q.y_dt == KILN_DTYPE_UINT8)
        ((uint8_t *)y)[yi] = (uint8_t)v;
    else
        ((int8_t *)y)[yi] = (int8_t)v;
}

/* The epilogue of element yi (channel ch, sum acc) into Y. */
static __device__ __forceinline__ void epilogue(const kc_qlayer &q, int32_t acc, int64_t ch,
                                                const void *z, void *y, int64_t yi) {
    epilogue_a(q, acc + q.b[ch], ch, z, y, yi);
}

static __global__ void qconv_kernel(const void *x, const void *w, const void *z, void *y,
                                    const kc_qlayer q, int64_t total) {
    int64_t yi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (yi >= total)
        return;
    int64_t n, k, oy, ox, sp = q.oh * q.ow;
    if (q.cl) {
        k = yi % q.cout;
        int64_t r = yi / q.cout;
        ox = r % q.ow;
        oy = (r / q.ow) % q.oh;
        n = r / sp;
    } else {
        ox = yi % q.ow;
        oy = (yi / q.ow) % q.oh;
        k = (yi / sp) % q.cout;
        n = yi / (sp * q.cout);
    }
    int64_t cin_g = q.cin / q.group, g = k / (q.cout / q.group);
    int32_t wz = q.wz[k], acc = 0;
    for (int64_t ci = 0; ci < cin_g; ci++) {
        int64_t c = g * cin_g + ci;
        for (int64_t ky = 0; ky < q.kh; ky++) {
            int64_t iy = oy * q.sh - q.ph + ky * q.dh;
            if (iy < 0 || iy >= q.ih)
                continue;
            for (int64_t kx = 0; kx < q.kw; kx++) {
                int64_t ix = ox * q.sw - q.pw + kx * q.dw;
                if (ix < 0 || ix >= q.iw)
                    continue;
                int64_t xi = q.cl ? ((n * q.ih + iy) * q.iw + ix) * q.cin + c
                                  : ((n * q.cin + c) * q.ih + iy) * q.iw + ix;
                int32_t wv = ld8(w, q.w_dt, ((k * cin_g + ci) * q.kh + ky) * q.kw + kx) - wz;
                acc += (ld8(x, q.x_dt, xi) - q.xz) * wv;
            }
        }
    }
    epilogue(q, acc, k, z, y, yi);
}

static __global__ void qmatmul_kernel(const void *x, const void *w, const void *z, void *y,
                                      const kc_qlayer q, int64_t total) {
    int64_t yi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (yi >= total)
        return;
    int64_t j = yi % q.n, i = (yi / q.n) % q.m, b = yi / (q.n * q.m);
    int64_t wo = q.wb ? b * q.k * q.n : 0;
    int32_t wz = q.wz[j], acc = 0;
    for (int64_t p = 0; p < q.k; p++) {
        int64_t wi = wo + (q.tb ? j * q.k + p : p * q.n + j);
        acc += (ld8(x, q.x_dt, (b * q.m + i) * q.k + p) - q.xz) * (ld8(w, q.w_dt, wi) - wz);
    }
    epilogue(q, acc, j, z, y, yi);
}

extern "C" cudaError_t kc_qlayer_run(const void *x, const void *w, const void *z, void *y,
                                     const kc_qlayer *q, cudaStream_t stream) {
    int64_t total = q->conv ? q->batch * q->cout * q->oh * q->ow : q->batch * q->m * q->n;
    if (total <= 0)
        return cudaSuccess;
    int threads = 256;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    if (q->conv)
        qconv_kernel<<<blocks, threads, 0, stream>>>(x, w, z, y, *q, total);
    else
        qmatmul_kernel<<<blocks, threads, 0, stream>>>(x, w, z, y, *q, total);
    return cudaGetLastError();
}

/* ---------------- the GEMM tactics' kernels (kc_qgemm) ---------------- */

/* X as the GEMM's int8 [rows, kp] operand: an im2col row per output pixel
 * (columns (ky, kx, c), c fastest) or X's rows of a QMatMul; uint8 values
 * shifted by -128, a padded pixel the shifted zero point, columns k..kp-1 0. */
static __global__ void qgemm_pack_kernel(const void *x, int8_t *xp, const kc_qlayer q,
                                         const kc_qgemm g, int64_t total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int64_t r = i / g.kp, kk = i % g.kp;
    int32_t v = 0;
    if (kk < g.k) {
        int64_t xi = -1;
        if (q.conv) {
            int64_t c = kk % q.cin, t = kk / q.cin, kx = t % q.kw, ky = t / q.kw;
            int64_t ox = r % q.ow, oy = (r / q.ow) % q.oh, n = r / (q.ow * q.oh);
            int64_t iy = oy * q.sh - q.ph + ky * q.dh, ix = ox * q.sw - q.pw + kx * q.dw;
            if (iy >= 0 && iy < q.ih && ix >= 0 && ix < q.iw)
                xi = q.cl ? ((n * q.ih + iy) * q.iw + ix) * q.cin + c
                          : ((n * q.cin + c) * q.ih + iy) * q.iw + ix;
        } else {
            xi = r * g.k + kk;
        }
        v = xi < 0 ? g.xzp : ld8(x, q.x_dt, xi) - (g.shift ? 128 : 0);
    }
    xp[i] = (int8_t)v;
}

/* The sum of each row of the int8 [rows, kp] operand: one warp a row. */
static __global__ void qgemm_rowsum_kernel(const int8_t *xp, int32_t *rs, int64_t rows, int64_t kp) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    const int8_t *p = xp + r * kp;
    int32_t s = 0;
    for (int64_t k = lane; k < kp; k += 32)
        s += p[k];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0)
        rs[r] = s;
}

/* acc + B = D[r, c] - wz'[c] * rowsum[r] + corr[c] (wrapping int32, as the
 * reference's sums), then the direct kernel's epilogue. */
static __global__ void qgemm_epilogue_kernel(const int32_t *d, const int32_t *rs, const void *z,
                                             void *y, const kc_qlayer q, const kc_qgemm g,
                                             int64_t total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int64_t r = i / g.cols, c = i % g.cols;
    uint32_t a = (uint32_t)d[r * g.np + c] + (uint32_t)g.corr[c];
    if (g.wzp)
        a -= (uint32_t)g.wzp[c] * (uint32_t)rs[r];
    int64_t yi = i;
    if (q.conv && !q.cl) {
        int64_t sp = q.oh * q.ow;
        yi = ((r / sp) * g.cols + c) * sp + r % sp;
    }
    epilogue_a(q, (int32_t)a, c, z, y, yi);
}

static unsigned blocks_of(int64_t total, int threads) {
    return (unsigned)((total + threads - 1) / threads);
}

extern "C" cudaError_t kc_qgemm_pack(const void *x, int8_t *xp, const kc_qlayer *q,
                                     const kc_qgemm *g, cudaStream_t stream) {
    int64_t total = g->rows * g->kp;
    if (total <= 0)
        return cudaSuccess;
    qgemm_pack_kernel<<<blocks_of(total, 256), 256, 0, stream>>>(x, xp, *q, *g, total);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_qgemm_rowsum(const int8_t *xp, int32_t *rs, const kc_qgemm *g,
                                       cudaStream_t stream) {
    if (g->rows <= 0)
        return cudaSuccess;
    qgemm_rowsum_kernel<<<blocks_of(g->rows, 8), 256, 0, stream>>>(xp, rs, g->rows, g->kp);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_qgemm_epilogue(const int32_t *d, const int32_t *rs, const void *z,
                                         void *y, const kc_qlayer *q, const kc_qgemm *g,
                                         cudaStream_t stream) {
    int64_t total = g->rows * g->cols;
    if (total <= 0)
        return cudaSuccess;
    qgemm_epilogue_kernel<<<blocks_of(total, 256), 256, 0, stream>>>(d, rs, z, y, *q, *g, total);
    return cudaGetLastError();
}
