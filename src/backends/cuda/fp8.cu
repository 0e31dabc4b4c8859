/* fp8.cu - CUDA kernels of kiln::FP8Conv and kiln::FP8MatMul (fp8.cuh):
 * graph/fp8layer.h's arithmetic with __fmul_rn / __fadd_rn / __fdiv_rn, so
 * that nothing is contracted into a multiply-add and the direct kernel has
 * the CPU reference's bits. */
#include "core/fp8.h"
#include "fp8.cuh"

static __device__ __forceinline__ float f8v(uint8_t v) { return kn_f8_to_float(v, KN_F8_E4M3FN); }

/* Y element yi (channel ch) from its sum acc. */
static __device__ void f8_out(const kc_f8layer &q, float acc, int64_t ch, const void *z, void *y,
                              int64_t yi) {
    float f = __fmul_rn(acc, q.s[ch]);
    for (int st = 0; st < q.e.n_stages; st++) {
        switch (q.e.stage[st]) {
        case KN_QS_BIAS: f = __fadd_rn(f, q.c[ch]); break;
        case KN_QS_ADD: {
            float zv = q.z_dt == KILN_DTYPE_FLOAT ? ((const float *)z)[yi]
                                                  : __fmul_rn(f8v(((const uint8_t *)z)[yi]), q.zs);
            f = __fadd_rn(f, zv);
            break;
        }
        case KN_QS_RELU: f = f > 0.f ? f : 0.f; break;
        case KN_QS_CLIP: f = f < q.e.clip_lo ? q.e.clip_lo : f > q.e.clip_hi ? q.e.clip_hi : f; break;
        default: break; /* no QDQ stage in an FP8 layer (its schema refuses one) */
        }
    }
    if (q.y_dt == KILN_DTYPE_FLOAT8E4M3FN)
        ((uint8_t *)y)[yi] = kn_f8_from_float(__fdiv_rn(f, q.ys), KN_F8_E4M3FN, q.saturate);
    else
        ((float *)y)[yi] = f;
}

static __global__ void k_direct_mm(const uint8_t *x, const uint8_t *w, const void *z, void *y,
                                   kc_f8layer q, int64_t total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int64_t j = i % q.n, r = i / q.n, b = r / q.m;
    const uint8_t *xr = x + r * q.k;
    const uint8_t *wb = w + (q.wb ? b * q.k * q.n : 0);
    float acc = 0.f;
    for (int64_t p = 0; p < q.k; p++)
        acc = __fadd_rn(acc, __fmul_rn(f8v(xr[p]), f8v(wb[q.tb ? j * q.k + p : p * q.n + j])));
    f8_out(q, acc, j, z, y, i);
}

static __global__ void k_direct_conv(const uint8_t *x, const uint8_t *w, const void *z, void *y,
                                     kc_f8layer q, int64_t total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int64_t ox = i % q.ow, t = i / q.ow, oy = t % q.oh;
    t /= q.oh;
    int64_t co = t % q.cout, b = t / q.cout;
    int64_t cin_g = q.cin / q.group, g = co / (q.cout / q.group);
    const uint8_t *wc = w + co * cin_g * q.kh * q.kw;
    float acc = 0.f;
    for (int64_t ci = 0; ci < cin_g; ci++) {
        const uint8_t *xc = x + (b * q.cin + g * cin_g + ci) * q.ih * q.iw;
        for (int64_t ky = 0; ky < q.kh; ky++) {
            int64_t iy = oy * q.sh - q.ph + ky * q.dh;
            for (int64_t kx = 0; kx < q.kw; kx++) {
                int64_t ix = ox * q.sw - q.pw + kx * q.dw;
                if (iy < 0 || iy >= q.ih || ix < 0 || ix >= q.iw)
                    continue; /* a padding tap adds nothing (fp8layer.h) */
                acc = __fadd_rn(acc, __fmul_rn(f8v(xc[iy * q.iw + ix]), f8v(wc[(ci * q.kh + ky) * q.kw + kx])));
            }
        }
    }
    f8_out(q, acc, co, z, y, i);
}

static unsigned blocks(int64_t n, int t) { return (unsigned)((n + t - 1) / t); }

extern "C" cudaError_t kc_f8_direct(const uint8_t *x, const uint8_t *w, const void *z, void *y,
                                    const kc_f8layer *q, cudaStream_t stream) {
    int64_t total = q->conv ? q->batch * q->cout * q->oh * q->ow : q->batch * q->m * q->n;
    if (total <= 0)
        return cudaSuccess;
    if (q->conv)
        k_direct_conv<<<blocks(total, 256), 256, 0, stream>>>(x, w, z, y, *q, total);
    else
        k_direct_mm<<<blocks(total, 256), 256, 0, stream>>>(x, w, z, y, *q, total);
    return cudaGetLastError();
}

/* X' [rows, kp]: a matmul's rows padded, or a convolution's im2col with
 * column (ci * kh + ky) * kw + kx, the order of W' (k_fp8.c). */
static __global__ void k_pack(const uint8_t *x, uint8_t *xp, kc_f8layer q, kc_f8gemm g) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= g.rows * g.kp)
        return;
    int64_t col = i % g.kp, r = i / g.kp;
    uint8_t v = 0;
    if (col < g.k) {
        if (!q.conv) {
            v = x[r * g.k + col];
        } else {
            int64_t ox = r % q.ow, t = r / q.ow, oy = t % q.oh, b = t / q.oh;
            int64_t kx = col % q.kw, t2 = col / q.kw, ky = t2 % q.kh, ci = t2 / q.kh;
            int64_t iy = oy * q.sh - q.ph + ky * q.dh, ix = ox * q.sw - q.pw + kx * q.dw;
            if (iy >= 0 && iy < q.ih && ix >= 0 && ix < q.iw)
                v = x[((b * q.cin + ci) * q.ih + iy) * q.iw + ix];
        }
    }
    xp[i] = v;
}

extern "C" cudaError_t kc_f8_pack(const uint8_t *x, uint8_t *xp, const kc_f8layer *q,
                                  const kc_f8gemm *g, cudaStream_t stream) {
    int64_t total = g->rows * g->kp;
    if (total <= 0)
        return cudaSuccess;
    k_pack<<<blocks(total, 256), 256, 0, stream>>>(x, xp, *q, *g);
    return cudaGetLastError();
}

static __global__ void k_epilogue(const float *d, const void *z, void *y, kc_f8layer q, kc_f8gemm g) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= g.rows * g.cols)
        return;
    int64_t c = i % g.cols, r = i / g.cols, yi;
    if (q.conv) { /* r = (b, oy, ox): Y [N, K, oh, ow] */
        int64_t os = q.oh * q.ow, b = r / os, pos = r % os;
        yi = (b * q.cout + c) * os + pos;
    } else {
        yi = r * g.cols + c;
    }
    f8_out(q, d[r * g.np + c], c, z, y, yi);
}

extern "C" cudaError_t kc_f8_epilogue(const float *d, const void *z, void *y, const kc_f8layer *q,
                                      const kc_f8gemm *g, cudaStream_t stream) {
    int64_t total = g->rows * g->cols;
    if (total <= 0)
        return cudaSuccess;
    k_epilogue<<<blocks(total, 256), 256, 0, stream>>>(d, z, y, *q, *g);
    return cudaGetLastError();
}
