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

/* The epilogue of element yi (channel ch, sum acc) into Y. */
static __device__ void epilogue(const kc_qlayer &q, int32_t acc, int64_t ch, const void *z,
                                void *y, int64_t yi) {
    int32_t a = acc + q.b[ch];
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
