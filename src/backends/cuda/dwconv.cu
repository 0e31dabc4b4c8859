/* dwconv.cu - depthwise 2-D convolution (dwconv.cuh).
 *
 * A block takes a chunk of channels (at most 128) of one image and a run of
 * (output row, column group) items; its filter taps go to shared memory as
 * float [R*S][chunk] first. Each thread computes QT output columns of one
 * row for V channels (V = 2 when the tensors are channels-last with an even
 * channel count: two channels a load, consecutive threads on consecutive
 * channel pairs, so a warp reads whole pixels). For the common windows
 * (S = 3, 5, 7 with column stride 1 or 2 and no dilation) each input row's
 * span, (QT - 1) * stride + S columns, is loaded into registers once and
 * every tap reads it there, for PT output rows at a time (kc_dwconv.rows:
 * 2 halves the input rows a thread loads; -1 unrolls the R = S filter rows
 * of 3 and 5 wide windows, so that every row's loads can be in flight at
 * once). Other windows, odd channel counts and channels-first tensors load
 * each tap from the cache, one output row a thread. Sums are float; bias,
 * Z and the activation are applied before the one rounding to the output
 * type. */
#include "dwconv.cuh"
#include "kc_dev.cuh"

namespace {

constexpr int DW_THREADS = 256;
constexpr int DW_SMEM = 48 * 1024; /* the static shared-memory limit, no opt-in needed */
constexpr int DW_MAX_CH = 128;     /* channels a block takes at most */

struct dw_args {
    int n, c, h, w, p, q, r, s, sh, sw, ph, pw, dh, dw;
    int64_t xsn, ysn;             /* per-image strides (elements) */
    int xsc, xsh, xsw, ysc, ysh, ysw;
    int cbv;                      /* channel vectors a block takes */
    int groups;                   /* (row group, column group) items a block takes */
    int qg;                       /* column groups an output row has */
    int pg;                       /* row groups (PT output rows each) */
    int act;
    float alpha, beta;
};

/* Two consecutive elements (p aligned to two of them) as floats. */
template <typename T> __device__ __forceinline__ float2 ld2(const T *p);
template <> __device__ __forceinline__ float2 ld2<float>(const float *p) {
    return *reinterpret_cast<const float2 *>(p);
}
template <> __device__ __forceinline__ float2 ld2<__half>(const __half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}
template <> __device__ __forceinline__ float2 ld2<__nv_bfloat16>(const __nv_bfloat16 *p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}

/* Two floats into two consecutive elements (float16 and bfloat16 through
 * kc_pack2, rounded to nearest). */
template <typename T> __device__ __forceinline__ void st2(T *p, float a, float b) {
    *reinterpret_cast<uint32_t *>(p) = kc_pack2<T>(a, b);
}
template <> __device__ __forceinline__ void st2<float>(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}

template <typename T, int V> __device__ __forceinline__ void ldv(const T *p, float (&o)[V]) {
    if constexpr (V == 2) {
        float2 f = ld2<T>(p);
        o[0] = f.x;
        o[1] = f.y;
    } else {
        o[0] = kc_io<T>::ld(p, 0);
    }
}

template <typename T, int V> __device__ __forceinline__ void stv(T *p, const float (&v)[V]) {
    if constexpr (V == 2)
        st2<T>(p, v[0], v[1]);
    else
        kc_io<T>::st(p, 0, v[0]);
}

template <int V> __device__ __forceinline__ void ld_taps(const float *t, float (&o)[V]) {
    if constexpr (V == 2) {
        float2 f = *reinterpret_cast<const float2 *>(t);
        o[0] = f.x;
        o[1] = f.y;
    } else {
        o[0] = *t;
    }
}

/* One item: PT output rows from p0 = (item / qg) * PT and QT columns from
 * (item % qg) * QT, for channels c .. c + V - 1. */
template <typename T, int V, int S, int SW, int QT, int PT, bool UR>
__device__ __forceinline__ void dw_item(const T *__restrict__ x, const T *__restrict__ bias,
                                        const T *__restrict__ z, T *__restrict__ y,
                                        const dw_args &a, const float *taps, int cb, int cv, int c,
                                        int item) {
    const int ns = S > 0 ? S : a.s;
    const int pg = item / a.qg, q0 = (item - pg * a.qg) * QT;
    const int p0 = pg * PT;
    const int n = blockIdx.x;
    const int sw = SW > 0 ? SW : a.sw;
    float acc[PT][QT][V];
#pragma unroll
    for (int pi = 0; pi < PT; pi++)
#pragma unroll
        for (int qi = 0; qi < QT; qi++)
#pragma unroll
            for (int v = 0; v < V; v++)
                acc[pi][qi][v] = 0.f;
    const T *xn = x + (int64_t)n * a.xsn + (int64_t)c * a.xsc;
    const int wc0 = q0 * sw - a.pw;
    if constexpr (S > 0) {
        /* input row k feeds output row p0 + pi through filter row
         * k - pi * stride (no row dilation here) */
        constexpr int L = (QT - 1) * SW + S;
        auto input_row = [&](int k) {
            const int hh = p0 * a.sh - a.ph + k;
            if ((unsigned)hh >= (unsigned)a.h)
                return;
            const T *row = xn + (int64_t)hh * a.xsh;
            float xin[L][V];
#pragma unroll
            for (int j = 0; j < L; j++) {
                const int wc = wc0 + j;
                if ((unsigned)wc < (unsigned)a.w) {
                    ldv<T, V>(row + (int64_t)wc * a.xsw, xin[j]);
                } else {
#pragma unroll
                    for (int v = 0; v < V; v++)
                        xin[j][v] = 0.f;
                }
            }
#pragma unroll
            for (int pi = 0; pi < PT; pi++) {
                const int r = k - pi * a.sh;
                if (!UR && (r < 0 || r >= a.r))
                    continue;
                const float *tr = taps + r * S * cb + cv * V;
#pragma unroll
                for (int s = 0; s < S; s++) {
                    float wv[V];
                    ld_taps<V>(tr + s * cb, wv);
#pragma unroll
                    for (int qi = 0; qi < QT; qi++)
#pragma unroll
                        for (int v = 0; v < V; v++)
                            acc[pi][qi][v] = fmaf(xin[qi * SW + s][v], wv[v], acc[pi][qi][v]);
                }
            }
        };
        if constexpr (UR) { /* R = S rows, unrolled: every row's loads can go first */
#pragma unroll
            for (int k = 0; k < S; k++)
                input_row(k);
        } else {
            const int rows = (PT - 1) * a.sh + a.r;
            for (int k = 0; k < rows; k++)
                input_row(k);
        }
    } else {
        static_assert(S > 0 || PT == 1, "the generic window takes one output row a thread");
        for (int r = 0; r < a.r; r++) {
            const int hh = p0 * a.sh - a.ph + r * a.dh;
            if ((unsigned)hh >= (unsigned)a.h)
                continue;
            const T *row = xn + (int64_t)hh * a.xsh;
            const float *tr = taps + r * ns * cb + cv * V;
            for (int s = 0; s < ns; s++) {
                float wv[V];
                ld_taps<V>(tr + s * cb, wv);
                const int wcs = wc0 + s * a.dw;
#pragma unroll
                for (int qi = 0; qi < QT; qi++) {
                    const int wc = wcs + qi * sw;
                    if ((unsigned)wc < (unsigned)a.w) {
                        float xv[V];
                        ldv<T, V>(row + (int64_t)wc * a.xsw, xv);
#pragma unroll
                        for (int v = 0; v < V; v++)
                            acc[0][qi][v] = fmaf(xv[v], wv[v], acc[0][qi][v]);
                    }
                }
            }
        }
    }
    float b[V];
#pragma unroll
    for (int v = 0; v < V; v++)
        b[v] = 0.f;
    if (bias)
        ldv<T, V>(bias + c, b);
#pragma unroll
    for (int pi = 0; pi < PT; pi++) {
        const int p = p0 + pi;
        if (p >= a.p)
            break;
        const int64_t yo = (int64_t)n * a.ysn + (int64_t)c * a.ysc + (int64_t)p * a.ysh;
#pragma unroll
        for (int qi = 0; qi < QT; qi++) {
            const int q = q0 + qi;
            if (q >= a.q)
                break;
            const int64_t o = yo + (int64_t)q * a.ysw;
            float out[V];
#pragma unroll
            for (int v = 0; v < V; v++)
                out[v] = acc[pi][qi][v] + b[v];
            if (z) {
                float zv[V];
                ldv<T, V>(z + o, zv);
#pragma unroll
                for (int v = 0; v < V; v++)
                    out[v] += zv[v];
            }
#pragma unroll
            for (int v = 0; v < V; v++)
                out[v] = kc_act_apply(a.act, out[v], a.alpha, a.beta);
            stv<T, V>(y + o, out);
        }
    }
}

/* S > 0: a window of S columns with column stride SW and no column
 * dilation, the row's span held in registers; S = 0: any window. */
template <typename T, int V, int S, int SW, int QT, int PT, bool UR>
__global__ void __launch_bounds__(DW_THREADS)
    dw_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
              const T *__restrict__ z, T *__restrict__ y, dw_args a) {
    extern __shared__ float taps[]; /* [R * S][cb] */
    const int rs = a.r * (S > 0 ? S : a.s);
    const int cb = a.cbv * V;
    const int c0 = blockIdx.y * cb;
    const int cn = min(cb, a.c - c0);
#pragma unroll 4
    for (int i = threadIdx.x; i < cn * rs; i += DW_THREADS) {
        const int cl = i / rs, k = i - cl * rs;
        taps[k * cb + cl] = kc_io<T>::ld(w, (int64_t)(c0 + cl) * rs + k);
    }
    __syncthreads();
    const int cv = threadIdx.x % a.cbv, gi = threadIdx.x / a.cbv;
    const int c = c0 + cv * V;
    if (gi >= a.groups || c >= a.c)
        return;
    /* a grid-stride loop: the grid covers every item unless there are more
     * than 65535 runs of them */
    for (int item = blockIdx.z * a.groups + gi; item < a.pg * a.qg; item += gridDim.z * a.groups)
        dw_item<T, V, S, SW, QT, PT, UR>(x, bias, z, y, a, taps, cb, cv, c, item);
}

/* The plan of a launch: vector width, columns a thread, the grid. */
struct dw_plan {
    int v, qt, pt, unrolled, fixed_s, fixed_sw;
    dim3 grid;
    size_t smem;
    dw_args a;
};

bool aligned(const void *p, size_t a) { return !p || (uintptr_t)p % a == 0; }

/* es: element size; ptrs: the tensors (NULL: whether the geometry is
 * taken, planned for the widest vectors). */
bool dw_make_plan(const kc_dwconv *g, size_t es, const void *const *ptrs, int n_ptrs, dw_plan *pl) {
    if (g->n < 1 || g->c < 1 || g->h < 1 || g->w < 1 || g->p < 1 || g->q < 1 || g->r < 1 ||
        g->s < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 || g->pw < 0)
        return false;
    if (g->n > 0x7fffffffLL || g->c * g->h * g->w > 0x7fffffffLL ||
        g->c * g->p * g->q > 0x7fffffffLL)
        return false;
    int v = 1;
    if (g->channels_last && g->c % 2 == 0) {
        v = 2;
        for (int i = 0; i < n_ptrs; i++)
            if (!aligned(ptrs[i], 2 * es))
                v = 1;
    }
    int64_t rs = (int64_t)g->r * g->s;
    int64_t maxch = DW_SMEM / (rs * (int64_t)sizeof(float));
    if (maxch > DW_MAX_CH)
        maxch = DW_MAX_CH;
    if (maxch < v)
        v = 1;
    if (maxch < 1)
        return false;
    int64_t cvec = (g->c + v - 1) / v, maxv = maxch / v;
    int64_t chunks = (cvec + maxv - 1) / maxv;
    int64_t cbv = (cvec + chunks - 1) / chunks;
    int fs = 0, fsw = 0;
    if (v == 2 && (g->s == 3 || g->s == 5 || g->s == 7) && g->dw == 1 && g->dh == 1 &&
        (g->sw == 1 || g->sw == 2))
        fs = g->s, fsw = g->sw;
    int qt = fs && fsw == 1 ? 8 : 4;
    /* two rows a thread, or one with its R = S filter rows unrolled (3 and
     * 5 wide): the register-held windows only; a launch whose pointers
     * force single elements runs the generic kernel */
    bool unroll = g->rows == -1;
    if ((g->rows == 2 || unroll) && (!fs || (unroll && (g->r != g->s || g->s == 7))) && !ptrs)
        return false;
    int pt = g->rows == 2 && fs ? 2 : 1;
    pl->unrolled = unroll && fs && g->r == g->s;
    int64_t qg = (g->q + qt - 1) / qt, pg = (g->p + pt - 1) / pt;
    int64_t groups = DW_THREADS / cbv;
    int64_t zb = (pg * qg + groups - 1) / groups;
    if (zb > 65535)
        zb = 65535;
    if (chunks > 65535)
        return false;
    dw_args &a = pl->a;
    a.n = (int)g->n, a.c = (int)g->c, a.h = (int)g->h, a.w = (int)g->w, a.p = (int)g->p,
    a.q = (int)g->q;
    a.r = g->r, a.s = g->s, a.sh = g->sh, a.sw = g->sw, a.ph = g->ph, a.pw = g->pw, a.dh = g->dh,
    a.dw = g->dw;
    if (g->channels_last) {
        a.xsc = 1, a.xsw = a.c, a.xsh = a.w * a.c;
        a.ysc = 1, a.ysw = a.c, a.ysh = a.q * a.c;
    } else {
        a.xsw = 1, a.xsh = a.w, a.xsc = a.h * a.w;
        a.ysw = 1, a.ysh = a.q, a.ysc = a.p * a.q;
    }
    a.xsn = (int64_t)a.c * a.h * a.w;
    a.ysn = (int64_t)a.c * a.p * a.q;
    a.cbv = (int)cbv, a.groups = (int)groups, a.qg = (int)qg, a.pg = (int)pg;
    a.act = g->act, a.alpha = g->alpha, a.beta = g->beta;
    pl->v = v, pl->qt = qt, pl->pt = pt, pl->fixed_s = fs, pl->fixed_sw = fsw;
    pl->grid = dim3((unsigned)g->n, (unsigned)chunks, (unsigned)zb);
    pl->smem = (size_t)rs * (size_t)(cbv * v) * sizeof(float);
    return true;
}

template <typename T, int V, int S, int SW, int QT, int PT, bool UR = false>
void dw_go(const dw_plan &pl, const T *x, const T *w, const T *b, const T *z, T *y, cudaStream_t st) {
    dw_kernel<T, V, S, SW, QT, PT, UR><<<pl.grid, DW_THREADS, pl.smem, st>>>(x, w, b, z, y, pl.a);
}

template <typename T, int V, int S, int SW, int QT>
void dw_rows(const dw_plan &pl, const T *x, const T *w, const T *b, const T *z, T *y, cudaStream_t st) {
    if (pl.pt == 2)
        dw_go<T, V, S, SW, QT, 2>(pl, x, w, b, z, y, st);
    else if (pl.unrolled && S < 7) /* 7 rows of 14 loads would not stay in registers */
        dw_go<T, V, S, SW, QT, 1, S < 7>(pl, x, w, b, z, y, st);
    else
        dw_go<T, V, S, SW, QT, 1>(pl, x, w, b, z, y, st);
}

template <typename T, int V>
void dw_pick(const dw_plan &pl, const T *x, const T *w, const T *b, const T *z, T *y, cudaStream_t st) {
    if constexpr (V == 1) { /* odd channel counts and channels-first: the generic window */
        dw_go<T, 1, 0, 0, 4, 1>(pl, x, w, b, z, y, st);
    } else {
        switch (pl.fixed_s * 10 + pl.fixed_sw) {
        case 31: dw_rows<T, V, 3, 1, 8>(pl, x, w, b, z, y, st); break;
        case 51: dw_rows<T, V, 5, 1, 8>(pl, x, w, b, z, y, st); break;
        case 71: dw_rows<T, V, 7, 1, 8>(pl, x, w, b, z, y, st); break;
        case 32: dw_rows<T, V, 3, 2, 4>(pl, x, w, b, z, y, st); break;
        case 52: dw_rows<T, V, 5, 2, 4>(pl, x, w, b, z, y, st); break;
        case 72: dw_rows<T, V, 7, 2, 4>(pl, x, w, b, z, y, st); break;
        default: dw_go<T, V, 0, 0, 4, 1>(pl, x, w, b, z, y, st); break;
        }
    }
}

template <typename T>
cudaError_t dw_launch(const kc_dwconv *g, const void *x, const void *w, const void *bias,
                      const void *z, void *y, cudaStream_t st) {
    const void *ptrs[4] = {x, bias, z, y};
    dw_plan pl;
    if (!dw_make_plan(g, sizeof(T), ptrs, 4, &pl))
        return cudaErrorInvalidConfiguration;
    const T *xt = (const T *)x, *wt = (const T *)w, *bt = (const T *)bias, *zt = (const T *)z;
    T *yt = (T *)y;
    if (pl.v == 2)
        dw_pick<T, 2>(pl, xt, wt, bt, zt, yt, st);
    else
        dw_pick<T, 1>(pl, xt, wt, bt, zt, yt, st);
    return cudaGetLastError();
}

} // namespace

extern "C" int kc_dwconv_supported(const kc_dwconv *g) {
    dw_plan pl;
    return dw_make_plan(g, 2, NULL, 0, &pl) ? 1 : 0;
}

extern "C" cudaError_t kc_dwconv_run(const kc_dwconv *g, kiln_dtype dt, const void *x,
                                     const void *w, const void *bias, const void *z, void *y,
                                     cudaStream_t stream) {
    if (!g || !x || !w || !y)
        return cudaErrorInvalidValue;
    switch (dt) {
    case KILN_DTYPE_FLOAT: return dw_launch<float>(g, x, w, bias, z, y, stream);
    case KILN_DTYPE_FLOAT16: return dw_launch<__half>(g, x, w, bias, z, y, stream);
    case KILN_DTYPE_BFLOAT16: return dw_launch<__nv_bfloat16>(g, x, w, bias, z, y, stream);
    default: return cudaErrorInvalidValue;
    }
}
