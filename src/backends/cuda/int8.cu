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

/* One stage (KN_QS_* code) of the epilogue on f; mid: the QDQ stage's
 * index, cv: C[ch], zv: the dequantized residual. */
static __device__ __forceinline__ float q_stage(const kc_qlayer &q, uint32_t code, int mid, float f,
                                                float cv, float zv) {
    switch (code) {
    case KN_QS_QDQ: {
        float ms = q.e.mid_scale[mid], mz = (float)q.e.mid_zp[mid];
        return __fmul_rn(__fsub_rn(q_round(f, ms, mz, (float)q.e.mid_lo[mid], (float)q.e.mid_hi[mid]), mz), ms);
    }
    case KN_QS_BIAS: return __fadd_rn(f, cv);
    case KN_QS_ADD: return __fadd_rn(f, zv);
    case KN_QS_RELU: return f > 0.f ? f : 0.f;
    case KN_QS_CLIP: return f < q.e.clip_lo ? q.e.clip_lo : f > q.e.clip_hi ? q.e.clip_hi : f;
    default: return f;
    }
}

/* Z's element zi dequantized (the ADD stage's addend). */
static __device__ __forceinline__ float q_zval(const kc_qlayer &q, const void *z, int64_t zi) {
    if (q.z_dt == KILN_DTYPE_FLOAT)
        return ((const float *)z)[zi];
    return __fmul_rn(__fsub_rn((float)ld8(z, q.z_dt, zi), q.zz), q.zs);
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
        int code = q.e.stage[st];
        float zv = code == KN_QS_ADD ? q_zval(q, z, yi) : 0.f;
        float cv = code == KN_QS_BIAS ? q.c[ch] : 0.f;
        f = q_stage(q, (uint32_t)code, mid, f, cv, zv);
        mid += code == KN_QS_QDQ;
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

/* X as the GEMM's int8 [rows, kp] operand, the NCHW QConv's im2col: a
 * row per output pixel (columns (ky, kx, c), c fastest), uint8 values
 * shifted by -128, a padded pixel the shifted zero point, columns k..kp-1
 * 0. A byte a thread (NCHW gathers no contiguous runs). */
static __global__ void qgemm_pack_nchw_kernel(const void *x, int8_t *xp, const kc_qlayer q,
                                              const kc_qgemm g, int64_t total) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int64_t r = i / g.kp, kk = i % g.kp;
    int32_t v = 0;
    if (kk < g.k) {
        int64_t c = kk % q.cin, t = kk / q.cin, kx = t % q.kw, ky = t / q.kw;
        int64_t ox = r % q.ow, oy = (r / q.ow) % q.oh, n = r / (q.ow * q.oh);
        int64_t iy = oy * q.sh - q.ph + ky * q.dh, ix = ox * q.sw - q.pw + kx * q.dw;
        if (iy >= 0 && iy < q.ih && ix >= 0 && ix < q.iw)
            v = ld8(x, q.x_dt, ((n * q.cin + c) * q.ih + iy) * q.iw + ix) - (g.shift ? 128 : 0);
        else
            v = g.xzp;
    }
    xp[i] = (int8_t)v;
}

/* v bytes of X (v = 16, 4, 1) as one word, and the word's bytes XORed. */
template <int V> struct qchunk;
template <> struct qchunk<16> {
    typedef int4 t;
    static __device__ __forceinline__ t flip(t a, uint32_t m) {
        a.x ^= (int)m, a.y ^= (int)m, a.z ^= (int)m, a.w ^= (int)m;
        return a;
    }
    static __device__ __forceinline__ t fill(uint32_t m) { return make_int4((int)m, (int)m, (int)m, (int)m); }
};
template <> struct qchunk<4> {
    typedef uint32_t t;
    static __device__ __forceinline__ t flip(t a, uint32_t m) { return a ^ m; }
    static __device__ __forceinline__ t fill(uint32_t m) { return m; }
};
template <> struct qchunk<1> {
    typedef uint8_t t;
    static __device__ __forceinline__ t flip(t a, uint32_t m) { return (uint8_t)(a ^ (uint8_t)m); }
    static __device__ __forceinline__ t fill(uint32_t m) { return (uint8_t)m; }
};

/* The channels-last pack: chunk i of X' a thread (int8_geom.h), a run of
 * V channels of one tap read and written as one word; flip: 0x80 in every
 * byte for uint8 X (x - 128 = x ^ 0x80 as int8), padv: the shifted zero
 * point in every byte. */
template <int V>
static __global__ void qgemm_pack_kernel(const uint8_t *__restrict__ x, int8_t *__restrict__ xp,
                                         const kc_qpack_geom pg, uint32_t flip, uint32_t padv,
                                         uint32_t total) {
    typedef qchunk<V> C;
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    uint64_t src = 0;
    int k = kc_qpack_src(&pg, i, &src);
    typename C::t v = k > 0   ? C::flip(*(const typename C::t *)(x + src), flip)
                      : k == 0 ? C::fill(padv)
                               : C::fill(0);
    *(typename C::t *)(xp + (uint64_t)i * V) = v;
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
 * reference's sums), then the direct kernel's epilogue: V channels of a
 * row a thread (int8_geom.h's kc_qepi_index), the stage list PAT compiled
 * in (DYN: read from q.e at run time, any list). Every value rounds as
 * epilogue_a's. */
template <int V> struct qvec;
template <> struct qvec<4> {
    static __device__ __forceinline__ void ld_i32(const int32_t *p, int32_t *o) {
        int4 a = *(const int4 *)p;
        o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
    }
    static __device__ __forceinline__ void ld_f32(const float *p, float *o) {
        float4 a = *(const float4 *)p;
        o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
    }
    static __device__ __forceinline__ void ld_8(const void *p, bool u8, float *o) {
        uint32_t w = *(const uint32_t *)p;
        for (int j = 0; j < 4; j++) {
            uint32_t b = (w >> (8 * j)) & 0xffu;
            o[j] = u8 ? (float)(int32_t)b : (float)(int32_t)(int8_t)(uint8_t)b;
        }
    }
    static __device__ __forceinline__ void st_8(void *p, const int32_t *v) {
        uint32_t w = 0;
        for (int j = 0; j < 4; j++)
            w |= ((uint32_t)v[j] & 0xffu) << (8 * j);
        *(uint32_t *)p = w;
    }
    static __device__ __forceinline__ void st_f32(float *p, const float *v) {
        *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    }
    static __device__ __forceinline__ void st_i32(int32_t *p, const int32_t *v) {
        *(int4 *)p = make_int4(v[0], v[1], v[2], v[3]);
    }
};
template <> struct qvec<1> {
    static __device__ __forceinline__ void ld_i32(const int32_t *p, int32_t *o) { o[0] = *p; }
    static __device__ __forceinline__ void ld_f32(const float *p, float *o) { o[0] = *p; }
    static __device__ __forceinline__ void ld_8(const void *p, bool u8, float *o) {
        o[0] = u8 ? (float)*(const uint8_t *)p : (float)*(const int8_t *)p;
    }
    static __device__ __forceinline__ void st_8(void *p, const int32_t *v) { *(uint8_t *)p = (uint8_t)v[0]; }
    static __device__ __forceinline__ void st_f32(float *p, const float *v) { *p = v[0]; }
    static __device__ __forceinline__ void st_i32(int32_t *p, const int32_t *v) { *p = v[0]; }
};

static __device__ __forceinline__ bool pat_has(uint32_t pat, uint32_t code) {
    for (int st = 0; st < KN_QL_MAX_STAGES; st++)
        if (((pat >> (3 * st)) & 7u) == code)
            return true;
    return false;
}

template <int V, bool DYN, uint32_t PAT>
static __global__ void qgemm_epilogue_kernel(const int32_t *__restrict__ d,
                                             const int32_t *__restrict__ rs, const void *z, void *y,
                                             const kc_qlayer q, const kc_qgemm g,
                                             const kc_qepi_geom eg, uint32_t total) {
    typedef qvec<V> W;
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    uint32_t r, c;
    uint64_t di, yi;
    kc_qepi_index(&eg, i, &r, &c, &di, &yi);
    int32_t a[V], corr[V];
    W::ld_i32(d + di, a);
    W::ld_i32(g.corr + c, corr);
    int32_t rsum = g.wzp ? rs[r] : 0;
#pragma unroll
    for (int j = 0; j < V; j++) {
        uint32_t u = (uint32_t)a[j] + (uint32_t)corr[j];
        if (g.wzp)
            u -= (uint32_t)g.wzp[c + j] * (uint32_t)rsum;
        a[j] = (int32_t)u;
    }
    if (q.y_dt == KILN_DTYPE_INT32) {
        W::st_i32((int32_t *)y + yi, a);
        return;
    }
    uint32_t pat = DYN ? g.pat : PAT;
    float f[V], s[V], cv[V], zv[V];
    W::ld_f32(q.s + c, s);
#pragma unroll
    for (int j = 0; j < V; j++)
        f[j] = __fmul_rn((float)a[j], s[j]);
    if (DYN ? pat_has(pat, KN_QS_BIAS) : pat_has(PAT, KN_QS_BIAS))
        W::ld_f32(q.c + c, cv);
    else
        for (int j = 0; j < V; j++)
            cv[j] = 0.f;
    if ((DYN ? pat_has(pat, KN_QS_ADD) : pat_has(PAT, KN_QS_ADD)) && z) {
        if (q.z_dt == KILN_DTYPE_FLOAT) {
            W::ld_f32((const float *)z + yi, zv);
        } else {
            W::ld_8((const uint8_t *)z + yi, q.z_dt == KILN_DTYPE_UINT8, zv);
#pragma unroll
            for (int j = 0; j < V; j++)
                zv[j] = __fmul_rn(__fsub_rn(zv[j], q.zz), q.zs);
        }
    } else {
        for (int j = 0; j < V; j++)
            zv[j] = 0.f;
    }
    int mid = 0;
#pragma unroll
    for (int st = 0; st < KN_QL_MAX_STAGES; st++) {
        uint32_t code = (pat >> (3 * st)) & 7u;
        if (code == 0)
            break;
#pragma unroll
        for (int j = 0; j < V; j++)
            f[j] = q_stage(q, code, mid, f[j], cv[j], zv[j]);
        mid += code == KN_QS_QDQ;
    }
    if (q.y_dt == KILN_DTYPE_FLOAT) {
        W::st_f32((float *)y + yi, f);
        return;
    }
    int32_t o[V];
#pragma unroll
    for (int j = 0; j < V; j++)
        o[j] = (int32_t)q_round(f[j], q.ys, q.yz, q.lo, q.hi);
    W::st_8((uint8_t *)y + yi, o);
}

static unsigned blocks_of(int64_t total, int threads) {
    return (unsigned)((total + threads - 1) / threads);
}

static bool aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

extern "C" cudaError_t kc_qgemm_pack(const void *x, int8_t *xp, const kc_qlayer *q,
                                     const kc_qgemm *g, cudaStream_t stream) {
    if (g->rows <= 0 || g->kp <= 0)
        return cudaSuccess;
    uint32_t flip = g->shift ? 0x80808080u : 0u;
    uint32_t padv = ((uint32_t)(uint8_t)(int8_t)g->xzp) * 0x01010101u;
    const int vs[3] = {16, 4, 1};
    for (int w = 0; w < 3; w++) {
        const kc_qpack_geom *pg = &g->pg[w];
        if (!pg->v || !aligned(x, (uintptr_t)vs[w]))
            continue;
        uint32_t total = (uint32_t)g->rows * pg->kc;
        unsigned blocks = blocks_of(total, 256);
        const uint8_t *xb = (const uint8_t *)x;
        if (vs[w] == 16)
            qgemm_pack_kernel<16><<<blocks, 256, 0, stream>>>(xb, xp, *pg, flip, padv, total);
        else if (vs[w] == 4)
            qgemm_pack_kernel<4><<<blocks, 256, 0, stream>>>(xb, xp, *pg, flip, padv, total);
        else if (pg->kc % 16u == 0 && aligned(xp, 16) && total % 16u == 0)
            return kc_qgemm_pack_gather(x, xp, g, stream);
        else
            qgemm_pack_kernel<1><<<blocks, 256, 0, stream>>>(xb, xp, *pg, flip, padv, total);
        return cudaGetLastError();
    }
    int64_t total = g->rows * g->kp;
    qgemm_pack_nchw_kernel<<<blocks_of(total, 256), 256, 0, stream>>>(x, xp, *q, *g, total);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_qgemm_rowsum(const int8_t *xp, int32_t *rs, const kc_qgemm *g,
                                       cudaStream_t stream) {
    if (g->rows <= 0)
        return cudaSuccess;
    qgemm_rowsum_kernel<<<blocks_of(g->rows, 8), 256, 0, stream>>>(xp, rs, g->rows, g->kp);
    return cudaGetLastError();
}

/* The stage lists compiled on their own: those of ResNet-style and
 * MobileNet-style layers; any other runs the DYN kernel. */
#define QEPI_PATTERNS(X)                                                                    \
    X(0) X(KC_QP1(KN_QS_RELU)) X(KC_QP1(KN_QS_ADD)) X(KC_QP2(KN_QS_ADD, KN_QS_RELU))         \
    X(KC_QP1(KN_QS_QDQ)) X(KC_QP2(KN_QS_QDQ, KN_QS_RELU)) X(KC_QP2(KN_QS_QDQ, KN_QS_ADD))    \
    X(KC_QP3(KN_QS_QDQ, KN_QS_ADD, KN_QS_RELU)) X(KC_QP1(KN_QS_CLIP))                        \
    X(KC_QP2(KN_QS_BIAS, KN_QS_RELU)) X(KC_QP3(KN_QS_BIAS, KN_QS_ADD, KN_QS_RELU))

template <int V>
static void qgemm_epilogue_launch(const int32_t *d, const int32_t *rs, const void *z, void *y,
                                  const kc_qlayer *q, const kc_qgemm *g, const kc_qepi_geom *eg,
                                  uint32_t total, cudaStream_t stream) {
    unsigned blocks = blocks_of(total, 256);
    switch (g->pat) {
#define QEPI_CASE(P)                                                                          \
    case (P):                                                                                 \
        qgemm_epilogue_kernel<V, false, (P)><<<blocks, 256, 0, stream>>>(d, rs, z, y, *q, *g, *eg, \
                                                                         total);              \
        return;
        QEPI_PATTERNS(QEPI_CASE)
#undef QEPI_CASE
    default:
        qgemm_epilogue_kernel<V, true, 0><<<blocks, 256, 0, stream>>>(d, rs, z, y, *q, *g, *eg, total);
        return;
    }
}

extern "C" cudaError_t kc_qgemm_epilogue(const int32_t *d, const int32_t *rs, const void *z,
                                         void *y, const kc_qlayer *q, const kc_qgemm *g,
                                         cudaStream_t stream) {
    if (g->rows <= 0 || g->cols <= 0)
        return cudaSuccess;
    /* 4 channels a thread: Y (and Z) rows of 4-aligned groups */
    size_t ysz = q->y_dt == KILN_DTYPE_UINT8 || q->y_dt == KILN_DTYPE_INT8 ? 1 : 4;
    size_t zsz = q->z_dt == KILN_DTYPE_FLOAT ? 4 : 1;
    const kc_qepi_geom *e4 = &g->eg[0], *e1 = &g->eg[1];
    if (e4->v && !e4->sp && aligned(y, 4 * ysz) && (!z || aligned(z, 4 * zsz))) {
        qgemm_epilogue_launch<4>(d, rs, z, y, q, g, e4, (uint32_t)g->rows * e4->cv, stream);
        return cudaGetLastError();
    }
    if (!e1->v)
        return cudaErrorInvalidValue;
    qgemm_epilogue_launch<1>(d, rs, z, y, q, g, e1, (uint32_t)g->rows * e1->cv, stream);
    return cudaGetLastError();
}

/* ---------------- the gathered pack (any C: the stem's C = 3) ---------------- */

/* 16 bytes of X' a thread (int8_geom.h's kc_qpack_gather16 on the v = 1
 * geometry), gathered from X byte by byte (the taps' few input pixels stay
 * in L1) and written as one 16-byte store: the v = 1 pack wrote a byte a
 * thread with every index divided out again. */
static __global__ void qgemm_pack_gather_kernel(const uint8_t *__restrict__ x,
                                                int8_t *__restrict__ xp, const kc_qpack_geom pg,
                                                uint32_t flip, uint32_t padv, uint32_t total) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    uint64_t src[16];
    int kind[16];
    kc_qpack_gather16(&pg, i, src, kind);
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int b = 0; b < 16; b++) {
        uint32_t v = kind[b] > 0 ? (uint32_t)__ldg(x + src[b]) ^ (flip & 0xffu)
                     : kind[b] == 0 ? (padv & 0xffu)
                                    : 0u;
        w[b / 4] |= v << (8 * (b % 4));
    }
    *(int4 *)(xp + (uint64_t)i * 16u) = make_int4((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
}

extern "C" cudaError_t kc_qgemm_pack_gather(const void *x, int8_t *xp, const kc_qgemm *g,
                                            cudaStream_t stream) {
    const kc_qpack_geom *pg = &g->pg[2];
    if (g->rows <= 0 || g->kp <= 0)
        return cudaSuccess;
    if (!pg->v || pg->v != 1 || pg->kc % 16u || !aligned(xp, 16) ||
        (uint64_t)g->rows * (pg->kc / 16u) > UINT32_MAX)
        return cudaErrorInvalidValue;
    uint32_t flip = g->shift ? 0x80u : 0u;
    uint32_t padv = (uint32_t)(uint8_t)(int8_t)g->xzp;
    uint32_t total = (uint32_t)g->rows * (pg->kc / 16u);
    qgemm_pack_gather_kernel<<<blocks_of(total, 256), 256, 0, stream>>>((const uint8_t *)x, xp,
                                                                       *pg, flip, padv, total);
    return cudaGetLastError();
}

/* ---------------- 8-bit channels-last MaxPool ---------------- */

/* The bytewise max of V bytes (signed or unsigned) as words: 4 bytes at
 * once with the SIMD video instructions. */
template <int V, bool S> struct qmax;
template <bool S> struct qmax<16, S> {
    typedef uint4 t;
    static __device__ __forceinline__ t init() {
        uint32_t m = S ? 0x80808080u : 0u;
        return make_uint4(m, m, m, m);
    }
    static __device__ __forceinline__ uint32_t mx(uint32_t a, uint32_t b) {
        return S ? __vmaxs4(a, b) : __vmaxu4(a, b);
    }
    static __device__ __forceinline__ t max(t a, t b) {
        return make_uint4(mx(a.x, b.x), mx(a.y, b.y), mx(a.z, b.z), mx(a.w, b.w));
    }
};
template <bool S> struct qmax<4, S> {
    typedef uint32_t t;
    static __device__ __forceinline__ t init() { return S ? 0x80808080u : 0u; }
    static __device__ __forceinline__ t max(t a, t b) { return S ? __vmaxs4(a, b) : __vmaxu4(a, b); }
};
template <bool S> struct qmax<1, S> {
    typedef uint8_t t;
    static __device__ __forceinline__ t init() { return S ? (uint8_t)0x80u : (uint8_t)0u; }
    static __device__ __forceinline__ t max(t a, t b) {
        if (S)
            return (int8_t)a > (int8_t)b ? a : b;
        return a > b ? a : b;
    }
};

/* A thread a group of V channels of one output pixel (int8_geom.h's
 * kc_qpool_index): the window's pixels read as whole V-byte words (the
 * group is contiguous in NHWC), maxed bytewise, stored as one word. */
template <int V, bool S>
static __global__ void qpool_max_kernel(const uint8_t *__restrict__ x, uint8_t *__restrict__ y,
                                        const kc_qpool_geom g, uint32_t total) {
    typedef qmax<V, S> M;
    typedef typename M::t W;
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    uint64_t yo;
    uint32_t co, base;
    int32_t y0, x0;
    kc_qpool_index(&g, i, &yo, &co, &base, &y0, &x0);
    W acc = M::init();
    for (uint32_t ky = 0; ky < g.kh; ky++) {
        int32_t iy = y0 + (int32_t)ky * g.dh;
        if (iy < 0 || iy >= (int32_t)g.ih)
            continue;
        uint32_t row = base + (uint32_t)iy * g.iw;
        for (uint32_t kx = 0; kx < g.kw; kx++) {
            int32_t ix = x0 + (int32_t)kx * g.dw;
            if (ix < 0 || ix >= (int32_t)g.iw)
                continue;
            W v = __ldg((const W *)(x + (uint64_t)(row + (uint32_t)ix) * g.c + co));
            acc = M::max(acc, v);
        }
    }
    *(W *)(y + yo) = acc;
}

template <bool S>
static void qpool_launch(const uint8_t *x, uint8_t *y, const kc_qpool_geom *g, uint32_t total,
                         cudaStream_t stream) {
    unsigned blocks = blocks_of(total, 256);
    if (g->v == 16)
        qpool_max_kernel<16, S><<<blocks, 256, 0, stream>>>(x, y, *g, total);
    else if (g->v == 4)
        qpool_max_kernel<4, S><<<blocks, 256, 0, stream>>>(x, y, *g, total);
    else
        qpool_max_kernel<1, S><<<blocks, 256, 0, stream>>>(x, y, *g, total);
}

extern "C" cudaError_t kc_qpool_max(const void *x, void *y, int sgn, const kc_qpool_geom *g,
                                    int64_t batch, cudaStream_t stream) {
    if (!g->v || batch <= 0)
        return cudaErrorInvalidValue;
    if (!aligned(x, g->v) || !aligned(y, g->v))
        return cudaErrorMisalignedAddress;
    uint64_t total = (uint64_t)batch * g->oh * g->ow * g->cv;
    if (total > UINT32_MAX)
        return cudaErrorInvalidValue;
    if (sgn)
        qpool_launch<true>((const uint8_t *)x, (uint8_t *)y, g, (uint32_t)total, stream);
    else
        qpool_launch<false>((const uint8_t *)x, (uint8_t *)y, g, (uint32_t)total, stream);
    return cudaGetLastError();
}

/* ---------------- the fused GEMM (kc_qgemm_mma): epilogue in registers ----------------
 *
 * D = X' W'^T with mma.sync m16n8k32 (s8 x s8 -> s32) on 128 x BN tiles
 * (BN 64: 4 warps along M; 128: 4 x 2 warps), K in steps of 64 bytes
 * staged in shared memory by cp.async, two stages. Each warp owns 32 rows
 * x 64 columns: 2 x 8 fragments of 16 x 8 int32 sums in registers. Then
 * each sum goes through the epilogue of kc_qgemm_epilogue (the same
 * operations in the same order, so the same bits) and only Y is written:
 * no int32 D in memory. Rows of shared memory are padded by 16 bytes so
 * that a warp's fragment loads hit 32 distinct banks. */
#define QMMA_BM 128
#define QMMA_BK 64
#define QMMA_LD (QMMA_BK + 16)

static __device__ __forceinline__ void qmma_cp16(void *smem, const void *gmem, bool valid) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0; /* 0: the 16 bytes are zero-filled, nothing is read */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}

static __device__ __forceinline__ void qmma_s8(int32_t *c, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* One K step's tiles: A = X' rows m0.., B = W' rows n0.., 16-byte chunks,
 * the ones past rows / np / kp zero-filled. */
template <int BN, int NT>
static __device__ __forceinline__ void qmma_load(int8_t *as, int8_t *bs, const int8_t *xp,
                                                 const int8_t *wp, uint32_t m0, uint32_t n0,
                                                 uint32_t k0, uint32_t rows, uint32_t np,
                                                 uint32_t kp, int tid) {
#pragma unroll
    for (int it = 0; it < QMMA_BM * 4 / NT; it++) {
        int i = tid + it * NT;
        uint32_t r = (uint32_t)i >> 2, kc = ((uint32_t)i & 3u) * 16u;
        bool ok = m0 + r < rows && k0 + kc < kp;
        const int8_t *src = ok ? xp + (uint64_t)(m0 + r) * kp + k0 + kc : xp;
        qmma_cp16(as + r * QMMA_LD + kc, src, ok);
    }
#pragma unroll
    for (int it = 0; it < BN * 4 / NT; it++) {
        int i = tid + it * NT;
        uint32_t r = (uint32_t)i >> 2, kc = ((uint32_t)i & 3u) * 16u;
        bool ok = n0 + r < np && k0 + kc < kp;
        const int8_t *src = ok ? wp + (uint64_t)(n0 + r) * kp + k0 + kc : wp;
        qmma_cp16(bs + r * QMMA_LD + kc, src, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* The epilogue of one sum d of D[r, c] (rsum: X' row r's sum), as
 * qgemm_epilogue_kernel's lanes compute it, into row-major Y. */
template <bool DYN, uint32_t PAT>
static __device__ __forceinline__ void qmma_epi1(const kc_qlayer &q, const kc_qgemm &g, uint32_t r,
                                                 uint32_t c, int32_t d, int32_t rsum, const void *z,
                                                 void *y) {
    uint32_t u = (uint32_t)d + (uint32_t)g.corr[c];
    if (g.wzp)
        u -= (uint32_t)g.wzp[c] * (uint32_t)rsum;
    int32_t a = (int32_t)u;
    uint64_t yi = (uint64_t)r * (uint64_t)g.cols + c;
    if (q.y_dt == KILN_DTYPE_INT32) {
        ((int32_t *)y)[yi] = a;
        return;
    }
    uint32_t pat = DYN ? g.pat : PAT;
    float f = __fmul_rn((float)a, q.s[c]);
    float cv = (DYN ? pat_has(pat, KN_QS_BIAS) : pat_has(PAT, KN_QS_BIAS)) ? q.c[c] : 0.f;
    float zv = 0.f;
    if ((DYN ? pat_has(pat, KN_QS_ADD) : pat_has(PAT, KN_QS_ADD)) && z) {
        if (q.z_dt == KILN_DTYPE_FLOAT) {
            zv = ((const float *)z)[yi];
        } else {
            uint8_t b = ((const uint8_t *)z)[yi];
            zv = q.z_dt == KILN_DTYPE_UINT8 ? (float)(int32_t)b : (float)(int32_t)(int8_t)b;
            zv = __fmul_rn(__fsub_rn(zv, q.zz), q.zs);
        }
    }
    int mid = 0;
#pragma unroll
    for (int st = 0; st < KN_QL_MAX_STAGES; st++) {
        uint32_t code = (pat >> (3 * st)) & 7u;
        if (code == 0)
            break;
        f = q_stage(q, code, mid, f, cv, zv);
        mid += code == KN_QS_QDQ;
    }
    if (q.y_dt == KILN_DTYPE_FLOAT) {
        ((float *)y)[yi] = f;
        return;
    }
    int32_t o = (int32_t)q_round(f, q.ys, q.yz, q.lo, q.hi);
    ((uint8_t *)y)[yi] = (uint8_t)(uint32_t)o;
}

template <int BN, bool DYN, uint32_t PAT>
static __global__ void __launch_bounds__(BN * 2)
    qmma_kernel(const int8_t *__restrict__ xp, const int8_t *__restrict__ wp,
                const int32_t *__restrict__ rs, const void *z, void *y, const kc_qlayer q,
                const kc_qgemm g) {
    constexpr int NT = BN * 2, WN = BN / 64;
    __shared__ __align__(16) int8_t as[2][QMMA_BM * QMMA_LD];
    __shared__ __align__(16) int8_t bs[2][BN * QMMA_LD];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / WN, wn = warp % WN, gid = lane >> 2, t4 = lane & 3;
    const uint32_t m0 = blockIdx.x * QMMA_BM, n0 = blockIdx.y * BN;
    const uint32_t rows = (uint32_t)g.rows, kp = (uint32_t)g.kp, np = (uint32_t)g.np;
    int32_t acc[2][8][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0;
    const uint32_t nk = (kp + QMMA_BK - 1) / QMMA_BK;
    qmma_load<BN, NT>(as[0], bs[0], xp, wp, m0, n0, 0, rows, np, kp, tid);
    for (uint32_t kt = 0; kt < nk; kt++) {
        const int st = (int)(kt & 1u);
        if (kt + 1 < nk) {
            qmma_load<BN, NT>(as[st ^ 1], bs[st ^ 1], xp, wp, m0, n0, (kt + 1) * QMMA_BK, rows, np,
                              kp, tid);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const int8_t *a_s = as[st], *b_s = bs[st];
#pragma unroll
        for (int ks = 0; ks < QMMA_BK; ks += 32) {
            uint32_t af[2][4], bf[8][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int8_t *pa = a_s + (wm * 32 + mi * 16 + gid) * QMMA_LD + ks + t4 * 4;
                af[mi][0] = *(const uint32_t *)pa;
                af[mi][1] = *(const uint32_t *)(pa + 8 * QMMA_LD);
                af[mi][2] = *(const uint32_t *)(pa + 16);
                af[mi][3] = *(const uint32_t *)(pa + 8 * QMMA_LD + 16);
            }
#pragma unroll
            for (int ni = 0; ni < 8; ni++) {
                const int8_t *pb = b_s + (wn * 64 + ni * 8 + gid) * QMMA_LD + ks + t4 * 4;
                bf[ni][0] = *(const uint32_t *)pb;
                bf[ni][1] = *(const uint32_t *)(pb + 16);
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ni = 0; ni < 8; ni++)
                    qmma_s8(acc[mi][ni], af[mi], bf[ni]);
        }
        __syncthreads();
    }
    const uint32_t cols = (uint32_t)g.cols;
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t r = m0 + (uint32_t)(wm * 32 + mi * 16 + gid + h * 8);
            if (r >= rows)
                continue;
            int32_t rsum = g.wzp ? rs[r] : 0;
#pragma unroll
            for (int ni = 0; ni < 8; ni++) {
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    uint32_t c = n0 + (uint32_t)(wn * 64 + ni * 8 + t4 * 2 + j);
                    if (c < cols)
                        qmma_epi1<DYN, PAT>(q, g, r, c, acc[mi][ni][h * 2 + j], rsum, z, y);
                }
            }
        }
    }
}

template <int BN>
static void qmma_launch(const int8_t *xp, const int8_t *wp, const int32_t *rs, const void *z,
                        void *y, const kc_qlayer *q, const kc_qgemm *g, cudaStream_t stream) {
    dim3 grid((unsigned)((g->rows + QMMA_BM - 1) / QMMA_BM), (unsigned)((g->np + BN - 1) / BN));
    switch (g->pat) {
#define QMMA_CASE(P)                                                                           \
    case (P):                                                                                  \
        qmma_kernel<BN, false, (P)><<<grid, BN * 2, 0, stream>>>(xp, wp, rs, z, y, *q, *g);     \
        return;
        QEPI_PATTERNS(QMMA_CASE)
#undef QMMA_CASE
    default:
        qmma_kernel<BN, true, 0><<<grid, BN * 2, 0, stream>>>(xp, wp, rs, z, y, *q, *g);
        return;
    }
}

extern "C" cudaError_t kc_qgemm_mma(const int8_t *xp, const int8_t *wp, const int32_t *rs,
                                    const void *z, void *y, const kc_qlayer *q, const kc_qgemm *g,
                                    int bn, cudaStream_t stream) {
    if (g->rows <= 0 || g->cols <= 0)
        return cudaSuccess;
    if (g->kp % 16 || g->np % 16 || g->rows > INT32_MAX || g->np > INT32_MAX ||
        (g->rows + QMMA_BM - 1) / QMMA_BM > INT32_MAX || !aligned(xp, 16) || !aligned(wp, 16) ||
        (g->wzp && !rs) || (bn != 64 && bn != 128))
        return cudaErrorInvalidValue;
    if (bn == 64)
        qmma_launch<64>(xp, wp, rs, z, y, q, g, stream);
    else
        qmma_launch<128>(xp, wp, rs, z, y, q, g, stream);
    return cudaGetLastError();
}
