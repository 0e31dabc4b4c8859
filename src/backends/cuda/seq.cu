/* seq.cu - the recurrent and integer families' kernels (seq.cuh). RNN / GRU /
 * LSTM: one thread per (direction, sequence, hidden unit) applies a step's
 * gates after cuBLASLt's products; integer products: a 16x16-tiled exact
 * integer matmul and a direct (implicit-GEMM) 8-bit convolution, one
 * thread an output. Requantization rounds as the CPU does: the scale
 * product and quotient in float, the scaled sum to nearest-even in double. */
#include "kc_dev.cuh"
#include "seq.cuh"

/* ---------------- recurrent ops ---------------- */

/* The CPU reference's act(), term for term. */
__device__ __forceinline__ float rnn_act(const kc_rnn_act &f, float x) {
    switch (f.fn) {
    case KC_RNN_RELU: return x > 0.f ? x : 0.f;
    case KC_RNN_TANH: return tanhf(x);
    case KC_RNN_SIGMOID: return 1.f / (1.f + expf(-x));
    case KC_RNN_AFFINE: return f.alpha * x + f.beta;
    case KC_RNN_LEAKY: return x >= 0.f ? x : f.alpha * x;
    case KC_RNN_THRESH: return x > f.alpha ? x : 0.f;
    case KC_RNN_SCALED_TANH: return f.alpha * tanhf(f.beta * x);
    case KC_RNN_HARD_SIGMOID: {
        float y = f.alpha * x + f.beta;
        return y < 0.f ? 0.f : (y > 1.f ? 1.f : y);
    }
    case KC_RNN_ELU: return x >= 0.f ? x : f.alpha * (expf(x) - 1.f);
    case KC_RNN_SOFTSIGN: return x / (1.f + fabsf(x));
    case KC_RNN_SOFTPLUS: return log1pf(expf(x));
    default: return x;
    }
}

__device__ __forceinline__ float rnn_clip(float clip, float v) {
    if (clip > 0.f)
        return v < -clip ? -clip : (v > clip ? clip : v);
    return v;
}

/* A sequence's length: sequence_lens[b] within [0, seq] (the whole
 * sequence without sequence_lens). */
__device__ __forceinline__ int64_t rnn_len(const kc_rnn &p, int64_t b) {
    if (!p.lens)
        return p.seq;
    long long len = kc_ld_i(p.lens, p.lens_dt, b);
    return len < 0 ? 0 : (len > p.seq ? p.seq : (int64_t)len);
}

/* Element offset of Y_h[dir, b, j] (Y_h [batch, dirs, H] for layout 1). */
__device__ __forceinline__ int64_t rnn_hoff(const kc_rnn &p, int64_t dir, int64_t b, int64_t j) {
    return (p.layout1 ? b * p.dirs + dir : dir * p.batch + b) * p.hidden + j;
}

__global__ void seq_to_float_kernel(const void *src, kiln_dtype dt, int64_t src_off,
                                    int64_t src_stride, float *dst, int64_t dst_stride,
                                    int64_t mats, int64_t count) {
    const int64_t total = mats * count;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = e / count, i = e % count;
        dst[m * dst_stride + i] = kc_ld_f(src, dt, src_off + m * src_stride + i);
    }
}

extern "C" cudaError_t kc_seq_to_float(const void *src, kiln_dtype dt, int64_t src_off,
                                       int64_t src_stride, float *dst, int64_t dst_stride,
                                       int64_t mats, int64_t count, cudaStream_t stream) {
    const int64_t total = mats * count;
    if (total <= 0)
        return cudaSuccess;
    if (!src || !dst)
        return cudaErrorInvalidValue;
    seq_to_float_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(
        src, dt, src_off, src_stride, dst, dst_stride, mats, count);
    return cudaGetLastError();
}

__global__ void rnn_init_kernel(const kc_rnn p, const void *h0, kiln_dtype h0_dt, const void *c0,
                                kiln_dtype c0_dt) {
    const int64_t H = p.hidden, total = p.dirs * p.batch * H;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % H, b = e / H % p.batch, dir = e / (H * p.batch);
        const int64_t src = rnn_hoff(p, dir, b, j), s = dir * p.st_dir + b * H + j;
        p.h[s] = h0 ? kc_ld_f(h0, h0_dt, src) : 0.f;
        if (p.c)
            p.c[s] = c0 ? kc_ld_f(c0, c0_dt, src) : 0.f;
    }
}

extern "C" cudaError_t kc_rnn_init(const kc_rnn *p, const void *h0, kiln_dtype h0_dt,
                                   const void *c0, kiln_dtype c0_dt, cudaStream_t stream) {
    const int64_t total = p->dirs * p->batch * p->hidden;
    if (total <= 0)
        return cudaSuccess;
    if (!p->h || (p->kind == KC_RNN_KIND_LSTM && !p->c))
        return cudaErrorInvalidValue;
    rnn_init_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(*p, h0, h0_dt, c0,
                                                                            c0_dt);
    return cudaGetLastError();
}

/* Gate pre-activations are xp (x W^T) + Wb + hr (h R^T) + Rb, as the CPU's
 * gate_inputs sums them (in another order). */
__global__ void rnn_step_kernel(const kc_rnn p, int64_t step, int phase) {
    const int64_t H = p.hidden, GH = p.gates * H;
    const int64_t total = p.dirs * p.batch * H;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % H, b = e / H % p.batch, dir = e / (H * p.batch);
        const int64_t len = rnn_len(p, b);
        if (step >= len)
            continue; /* this sequence is done: its state stays */
        const bool rev = p.reverse_only || dir == 1;
        const int64_t t = rev ? len - 1 - step : step;
        const int64_t row = p.layout1 ? b * p.seq + t : t * p.batch + b;
        const float *xp = p.xp + dir * p.xp_dir + row * GH;
        const float *hr = p.hr + dir * p.hr_dir + b * p.hr_n;
        const int64_t s = dir * p.st_dir + b * H + j; /* this unit's state */
        const int64_t bw = dir * 2 * GH, br = bw + GH;
        const kc_rnn_act *fa = p.f[dir];
#define WB(q) (p.bias ? kc_ld_f(p.bias, p.bias_dt, bw + (q) * H + j) : 0.f)
#define RB(q) (p.bias ? kc_ld_f(p.bias, p.bias_dt, br + (q) * H + j) : 0.f)
#define PRE(q) (xp[(q) * H + j] + WB(q) + (hr[(q) * H + j] + RB(q)))
        const float h = p.h[s];
        float hn;
        if (p.kind == KC_RNN_KIND_RNN) {
            hn = rnn_act(fa[0], rnn_clip(p.clip, PRE(0)));
        } else if (p.kind == KC_RNN_KIND_GRU) {
            if (phase == 1) { /* reset gate first: the candidate's product needs r * h */
                const float r = rnn_act(fa[0], rnn_clip(p.clip, PRE(1)));
                p.rh[s] = r * h;
                continue;
            }
            const float z = rnn_act(fa[0], rnn_clip(p.clip, PRE(0)));
            float sum;
            if (phase == 2) { /* (r * h) Rh^T + Rbh */
                sum = p.hr2[s] + RB(2);
            } else {          /* r * (h Rh^T + Rbh) */
                const float r = rnn_act(fa[0], rnn_clip(p.clip, PRE(1)));
                sum = (hr[2 * H + j] + RB(2)) * r;
            }
            const float ht = rnn_act(fa[1], rnn_clip(p.clip, xp[2 * H + j] + WB(2) + sum));
            hn = (1.f - z) * ht + z * h;
        } else { /* LSTM: gates i, o, f, c; peepholes i, o, f */
            const float c = p.c[s];
            const float pi = p.peep ? kc_ld_f(p.peep, p.peep_dt, dir * 3 * H + j) : 0.f;
            const float po = p.peep ? kc_ld_f(p.peep, p.peep_dt, dir * 3 * H + H + j) : 0.f;
            const float pf = p.peep ? kc_ld_f(p.peep, p.peep_dt, dir * 3 * H + 2 * H + j) : 0.f;
            const float it = rnn_act(fa[0], rnn_clip(p.clip, PRE(0) + pi * c));
            const float ft = p.input_forget ? 1.f - it
                                            : rnn_act(fa[0], rnn_clip(p.clip, PRE(2) + pf * c));
            const float ct = rnn_act(fa[1], rnn_clip(p.clip, PRE(3)));
            const float cn = ft * c + it * ct;
            const float ot = rnn_act(fa[0], rnn_clip(p.clip, PRE(1) + po * cn));
            p.c[s] = cn;
            hn = ot * rnn_act(fa[2], cn);
        }
#undef PRE
#undef RB
#undef WB
        p.h[s] = hn;
        if (p.y) {
            const int64_t yo = p.layout1 ? ((b * p.seq + t) * p.dirs + dir) * H + j
                                         : ((t * p.dirs + dir) * p.batch + b) * H + j;
            kc_st_f(p.y, p.y_dt, yo, hn);
        }
    }
}

extern "C" cudaError_t kc_rnn_step(const kc_rnn *p, int64_t step, int phase, cudaStream_t stream) {
    const int64_t total = p->dirs * p->batch * p->hidden;
    if (total <= 0)
        return cudaSuccess;
    if (!p->xp || !p->hr || !p->h || (p->kind == KC_RNN_KIND_LSTM && !p->c) ||
        (phase == 1 && !p->rh) || (phase == 2 && !p->hr2) || phase < 0 || phase > 2 ||
        (phase != 0 && p->kind != KC_RNN_KIND_GRU))
        return cudaErrorInvalidValue;
    rnn_step_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(*p, step, phase);
    return cudaGetLastError();
}

__global__ void rnn_finish_kernel(const kc_rnn p, void *yh, kiln_dtype yh_dt, void *yc,
                                  kiln_dtype yc_dt) {
    const int64_t H = p.hidden, total = p.dirs * p.batch * H;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % H, b = e / H % p.batch, dir = e / (H * p.batch);
        const int64_t dst = rnn_hoff(p, dir, b, j), s = dir * p.st_dir + b * H + j;
        if (yh)
            kc_st_f(yh, yh_dt, dst, p.h[s]);
        if (yc)
            kc_st_f(yc, yc_dt, dst, p.c[s]);
    }
}

extern "C" cudaError_t kc_rnn_finish(const kc_rnn *p, void *yh, kiln_dtype yh_dt, void *yc,
                                     kiln_dtype yc_dt, cudaStream_t stream) {
    const int64_t total = p->dirs * p->batch * p->hidden;
    if (total <= 0 || (!yh && !yc))
        return cudaSuccess;
    if (!p->h || (yc && !p->c))
        return cudaErrorInvalidValue;
    rnn_finish_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(*p, yh, yh_dt, yc,
                                                                              yc_dt);
    return cudaGetLastError();
}

/* ---------------- integer products ---------------- */

__device__ __forceinline__ int ld8(const void *p, kiln_dtype t, int64_t i) {
    return t == KILN_DTYPE_UINT8 ? (int)((const uint8_t *)p)[i] : (int)((const int8_t *)p)[i];
}

/* A zero point of index i (0 when absent), as the CPU's per_index. */
__device__ __forceinline__ long long q_int(const kc_qparam &q, int64_t i) {
    return q.p ? kc_ld_i(q.p, q.dt, q.per ? i : 0) : 0;
}

/* A scale of index i (1 when absent). */
__device__ __forceinline__ float q_float(const kc_qparam &q, int64_t i) {
    return q.p ? kc_ld_f(q.p, q.dt, q.per ? i : 0) : 1.f;
}

/* (float)acc * scale rounded to nearest-even in double, shifted by the zero
 * point and saturated to y's 8-bit range; no contraction into an FMA. */
__device__ __forceinline__ void q_store(void *y, kiln_dtype yt, int64_t at, float facc, float scale,
                                        double yzero) {
    double v = rint((double)__fmul_rn(facc, scale)) + yzero;
    const double lo = yt == KILN_DTYPE_UINT8 ? 0.0 : -128.0, hi = yt == KILN_DTYPE_UINT8 ? 255.0 : 127.0;
    v = v < lo ? lo : (v > hi ? hi : v);
    if (yt == KILN_DTYPE_UINT8)
        ((uint8_t *)y)[at] = (uint8_t)(int)v;
    else
        ((int8_t *)y)[at] = (int8_t)(int)v;
}

#define QT 16

__global__ void qmm_kernel(const void *a, const void *b, void *y, const kc_qmm q) {
    __shared__ int sa[QT][QT + 1], sb[QT][QT + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t i = (int64_t)blockIdx.y * QT + ty, j = (int64_t)blockIdx.x * QT + tx;
    for (int64_t bi = blockIdx.z; bi < q.batches; bi += gridDim.z) {
        int64_t ao = 0, bo = 0, rem = bi;
        for (int d = q.br - 1; d >= 0; d--) {
            const int64_t c = rem % q.ydims[d];
            rem /= q.ydims[d];
            ao += c * q.a_bstride[d];
            bo += c * q.b_bstride[d];
        }
        const int za = i < q.m ? (int)q_int(q.za, i) : 0;
        const int zb = j < q.n ? (int)q_int(q.zb, j) : 0;
        long long acc = 0;
        for (int64_t k0 = 0; k0 < q.k; k0 += QT) {
            const int64_t ka = k0 + tx, kb = k0 + ty;
            sa[ty][tx] = i < q.m && ka < q.k ? ld8(a, q.a_dt, ao + i * q.k + ka) - za : 0;
            sb[ty][tx] = kb < q.k && j < q.n ? ld8(b, q.b_dt, bo + kb * q.n + j) - zb : 0;
            __syncthreads();
            int part = 0; /* 16 products of at most 255 * 255 fit in int32 */
#pragma unroll
            for (int t = 0; t < QT; t++)
                part += sa[ty][t] * sb[t][tx];
            acc += part;
            __syncthreads();
        }
        if (i < q.m && j < q.n) {
            const int64_t at = (bi * q.m + i) * q.n + j;
            if (!q.requant) {
                ((int32_t *)y)[at] = (int32_t)acc;
            } else {
                const float scale =
                    __fdiv_rn(__fmul_rn(q_float(q.as, i), q_float(q.bs, j)), q_float(q.ys, 0));
                q_store(y, q.y_dt, at, __ll2float_rn(acc), scale, (double)q_int(q.yz, 0));
            }
        }
    }
}

extern "C" cudaError_t kc_qmatmul(const void *a, const void *b, void *y, const kc_qmm *q,
                                  cudaStream_t stream) {
    if (q->m <= 0 || q->n <= 0 || q->batches <= 0)
        return cudaSuccess;
    if (!y || (q->k > 0 && (!a || !b)) || q->br < 0 || q->br > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    const int64_t gx = (q->n + QT - 1) / QT, gy = (q->m + QT - 1) / QT;
    if (gx > 0x7fffffff || gy > 65535)
        return cudaErrorInvalidConfiguration;
    const int64_t gz = q->batches < 65535 ? q->batches : 65535;
    qmm_kernel<<<dim3((unsigned)gx, (unsigned)gy, (unsigned)gz), dim3(QT, QT), 0, stream>>>(a, b, y,
                                                                                         *q);
    return cudaGetLastError();
}

/* One thread an output element (b, co, position): the sum over the group's
 * input channels and the window of (x - xz) (w - wz[co]), padding adding
 * nothing, in wrapping int32 as the CPU's int_gemm. */
__global__ void qconv_kernel(const void *x, const void *w, void *y, const kc_qconv q, int64_t total) {
    const int64_t out_size = q.out[0] * q.out[1] * q.out[2];
    const int64_t in_size = q.in[0] * q.in[1] * q.in[2];
    const int64_t ksize = q.kernel[0] * q.kernel[1] * q.kernel[2];
    const int64_t cin_g = q.cin / q.group, cout_g = q.cout / q.group;
    const int xz = (int)q_int(q.xz, 0);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = e % out_size, co = e / out_size % q.cout, bn = e / (out_size * q.cout);
        const int64_t g = co / cout_g;
        const int64_t o2 = o % q.out[2], o1 = o / q.out[2] % q.out[1], o0 = o / (q.out[2] * q.out[1]);
        const int wz = (int)q_int(q.wz, co);
        unsigned acc = 0; /* wraps as int32 does on the CPU */
        for (int64_t c = 0; c < cin_g; c++) {
            const int64_t xb = (bn * q.cin + g * cin_g + c) * in_size;
            const int64_t wb = (co * cin_g + c) * ksize;
            for (int64_t k0 = 0; k0 < q.kernel[0]; k0++) {
                const int64_t p0 = o0 * q.stride[0] - q.pad0[0] + k0 * q.dil[0];
                if (p0 < 0 || p0 >= q.in[0])
                    continue;
                for (int64_t k1 = 0; k1 < q.kernel[1]; k1++) {
                    const int64_t p1 = o1 * q.stride[1] - q.pad0[1] + k1 * q.dil[1];
                    if (p1 < 0 || p1 >= q.in[1])
                        continue;
                    for (int64_t k2 = 0; k2 < q.kernel[2]; k2++) {
                        const int64_t p2 = o2 * q.stride[2] - q.pad0[2] + k2 * q.dil[2];
                        if (p2 < 0 || p2 >= q.in[2])
                            continue;
                        const int xv = ld8(x, q.x_dt, xb + (p0 * q.in[1] + p1) * q.in[2] + p2) - xz;
                        const int wv =
                            ld8(w, q.w_dt, wb + (k0 * q.kernel[1] + k1) * q.kernel[2] + k2) - wz;
                        acc += (unsigned)(xv * wv);
                    }
                }
            }
        }
        if (!q.requant) {
            ((int32_t *)y)[e] = (int32_t)acc;
        } else {
            const int32_t sum = (int32_t)(acc + (unsigned)(int32_t)q_int(q.bias, co));
            const float scale =
                __fdiv_rn(__fmul_rn(q_float(q.xs, 0), q_float(q.ws, co)), q_float(q.ys, 0));
            q_store(y, q.y_dt, e, __int2float_rn(sum), scale, (double)q_int(q.yz, 0));
        }
    }
}

extern "C" cudaError_t kc_qconv_run(const void *x, const void *w, void *y, const kc_qconv *q,
                                    cudaStream_t stream) {
    const int64_t total = q->batch * q->cout * q->out[0] * q->out[1] * q->out[2];
    if (total <= 0)
        return cudaSuccess;
    if (!x || !w || !y || q->group < 1 || q->cin % q->group || q->cout % q->group)
        return cudaErrorInvalidValue;
    qconv_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(x, w, y, *q, total);
    return cudaGetLastError();
}
