/* elementwise.cu - CUDA kernels of the elementwise family (see
 * elementwise.cuh). One program kernel serves every unary and binary op, the
 * variadic ops and kiln::ElementwiseChain: the ops are data, the broadcast is
 * a stride table, and the arithmetic follows the CPU reference loops in
 * backends/cpu/k_elementwise.c expression for expression, in the CPU's
 * compute type: float (float32/16, bfloat16), int64 (signed integers, bool),
 * uint64 (unsigned integers) or double (float64). */
#include <string.h>

#include "core/fp8.h"
#include "elementwise.cuh"
#include "kc_dev.cuh"

/* ---------------- real arithmetic: float (float32/16, bfloat16 data) and
 * double (float64 data; Pow of an integer base and a real exponent), one
 * expression for both through the math overloads ---------------- */

/* op is s.op, passed apart so that a caller with a constant op (the
 * vector kernel's dispatch) gets the switch folded away. */
template <typename R> __device__ __forceinline__ R un_real(int op, const kc_step &s, R x) {
    const R a = s.alpha, b = s.beta, g = s.gamma;
    switch (op) {
    case KC_ABS: return fabs(x);
    case KC_NEG: return -x;
    case KC_SIGN: return x > R(0) ? R(1) : (x < R(0) ? R(-1) : x);
    case KC_RECIPROCAL: return R(1) / x;
    case KC_FLOOR: return floor(x);
    case KC_CEIL: return ceil(x);
    case KC_ROUND: return rint(x);
    case KC_SQRT: return sqrt(x);
    case KC_EXP: return exp(x);
    case KC_LOG: return log(x);
    case KC_SIN: return sin(x);
    case KC_COS: return cos(x);
    case KC_TAN: return tan(x);
    case KC_ASIN: return asin(x);
    case KC_ACOS: return acos(x);
    case KC_ATAN: return atan(x);
    case KC_SINH: return sinh(x);
    case KC_COSH: return cosh(x);
    case KC_ASINH: return asinh(x);
    case KC_ACOSH: return acosh(x);
    case KC_ATANH: return atanh(x);
    case KC_ERF: return erf(x);
    case KC_TANH: return tanh(x);
    case KC_RELU: return x > R(0) ? x : R(0);
    case KC_LEAKY_RELU: return x >= R(0) ? x : a * x;
    case KC_ELU: return x >= R(0) ? x : a * expm1(x);
    case KC_SELU: return x > R(0) ? g * x : g * (a * exp(x) - a);
    case KC_CELU: return fmax(R(0), x) + fmin(R(0), a * expm1(x / a));
    case KC_THRESHOLDED_RELU: return x > a ? x : R(0);
    case KC_SIGMOID: return x >= R(0) ? R(1) / (R(1) + exp(-x)) : exp(x) / (R(1) + exp(x));
    case KC_HARD_SIGMOID: return fmax(R(0), fmin(R(1), a * x + b));
    case KC_HARD_SWISH: return x * fmax(R(0), fmin(R(1), x * (R(1) / R(6)) + R(0.5)));
    case KC_SOFTPLUS: return x > R(0) ? x + log1p(exp(-x)) : log1p(exp(x));
    case KC_SOFTSIGN: return x / (R(1) + fabs(x));
    case KC_GELU:
        if (s.flag)
            return R(0.5) * x * (R(1) + tanh(R(0.7978845608028654) * (x + R(0.044715) * x * x * x)));
        return R(0.5) * x * (R(1) + erf(x * R(0.70710678118654752)));
    case KC_GELU_TANH:
        return R(0.5) * x * (R(1) + tanh(R(0.7978845608028654) * (x + R(0.044715) * x * x * x)));
    case KC_MISH: return x * tanh(x > R(0) ? x + log1p(exp(-x)) : log1p(exp(x)));
    case KC_SWISH:
        return a * x >= R(0) ? x / (R(1) + exp(-a * x)) : x * exp(a * x) / (R(1) + exp(a * x));
    case KC_SILU: return x >= R(0) ? x / (R(1) + exp(-x)) : x * exp(x) / (R(1) + exp(x));
    case KC_CLIP: { R lo = x < a ? a : x; return lo > b ? b : lo; }
    case KC_SHRINK: return x < -a ? x + b : (x > a ? x - b : R(0));
    case KC_ISNAN: return x != x ? R(1) : R(0);
    case KC_ISINF: return isinf(x) && (x < R(0) ? (s.flag & 1) : (s.flag & 2)) ? R(1) : R(0);
    case KC_NOT: return x == R(0) ? R(1) : R(0);
    case KC_MUL_CONST: return x * a;
    default: return x;
    }
}

template <typename R> __device__ __forceinline__ R bin_real(int op, R a, R b) {
    switch (op) {
    case KC_ADD: return a + b;
    case KC_SUB: return a - b;
    case KC_MUL: return a * b;
    case KC_DIV: return a / b;
    case KC_POW:
        if (sizeof(R) == sizeof(double)) { /* CUDA's pow may land an ulp off an exact
                                            * integer result (pow(9, 0.5)); snap those,
                                            * as an integer output truncates */
            R r = pow(a, b), n = rint(r);
            return fabs(r - n) <= R(4 * 2.220446049250313e-16) * fabs(n) ? n : r;
        }
        return pow(a, b);
    case KC_MOD: { R r = fmod(a, b); return (r != R(0) && ((r < R(0)) != (b < R(0)))) ? r + b : r; }
    case KC_MODC: return fmod(a, b);
    case KC_EQUAL: return a == b;
    case KC_GREATER: return a > b;
    case KC_GREATER_EQUAL: return a >= b;
    case KC_LESS: return a < b;
    case KC_LESS_EQUAL: return a <= b;
    case KC_AND: return (a != R(0)) && (b != R(0));
    case KC_OR: return (a != R(0)) || (b != R(0));
    case KC_XOR: return (a != R(0)) != (b != R(0));
    case KC_PRELU: return a < R(0) ? b * a : a;
    case KC_MAX: return (a > b || a != a) ? a : b;
    case KC_MIN: return (a < b || a != a) ? a : b;
    default: return a;
    }
}

/* ---------------- int64 arithmetic (wrapping, as the CPU loops) ---------------- */

__device__ __forceinline__ long long un_i(const kc_step &s, long long x) {
    switch (s.op) {
    case KC_ABS: return x < 0 ? (long long)(0ull - (unsigned long long)x) : x;
    case KC_NEG: return (long long)(0ull - (unsigned long long)x);
    case KC_SIGN: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case KC_RELU: return x > 0 ? x : 0;
    case KC_NOT: return x == 0;
    case KC_BITWISE_NOT: return ~x;
    default: return x;
    }
}

__device__ __forceinline__ long long ipow(long long b, long long e) {
    if (e < 0)
        return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
    unsigned long long r = 1, x = (unsigned long long)b;
    while (e) {
        if (e & 1)
            r *= x;
        x *= x;
        e >>= 1;
    }
    return (long long)r;
}

__device__ __forceinline__ long long bin_i(int op, long long a, long long b) {
    typedef unsigned long long u;
    switch (op) {
    case KC_ADD: return (long long)((u)a + (u)b);
    case KC_SUB: return (long long)((u)a - (u)b);
    case KC_MUL: return (long long)((u)a * (u)b);
    case KC_DIV: return b == 0 ? 0 : (b == -1 ? (long long)(0ull - (u)a) : a / b);
    case KC_POW: return ipow(a, b);
    case KC_MOD: {
        if (b == 0 || b == -1)
            return 0;
        long long r = a % b;
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case KC_MODC: return (b == 0 || b == -1) ? 0 : a % b;
    case KC_EQUAL: return a == b;
    case KC_GREATER: return a > b;
    case KC_GREATER_EQUAL: return a >= b;
    case KC_LESS: return a < b;
    case KC_LESS_EQUAL: return a <= b;
    case KC_AND: return (a != 0) & (b != 0);
    case KC_OR: return (a != 0) | (b != 0);
    case KC_XOR: return (a != 0) ^ (b != 0);
    case KC_PRELU: return a < 0 ? (long long)((u)b * (u)a) : a;
    case KC_MAX: return a > b ? a : b;
    case KC_MIN: return a < b ? a : b;
    /* shifts by a negative count or past the width give 0 (-1 for a right
     * shift of a negative value); stores truncate to the storage width */
    case KC_SHL: return (b < 0 || b >= 64) ? 0 : (long long)((u)a << b);
    case KC_SHR: return (b < 0 || b >= 64) ? (a < 0 ? -1 : 0) : a >> b;
    case KC_BIT_AND: return a & b;
    case KC_BIT_OR: return a | b;
    case KC_BIT_XOR: return a ^ b;
    default: return a;
    }
}

/* ---------------- uint64 arithmetic (unsigned types, as the CPU's u64 loops) ---------------- */

__device__ __forceinline__ unsigned long long un_u(const kc_step &s, unsigned long long x) {
    switch (s.op) {
    case KC_NEG: return 0ull - x;
    case KC_SIGN: return x > 0;
    case KC_NOT: return x == 0;
    case KC_BITWISE_NOT: return ~x;
    default: return x; /* Abs, Relu, Identity */
    }
}

__device__ __forceinline__ unsigned long long upow(unsigned long long b, unsigned long long e) {
    unsigned long long r = 1;
    while (e) {
        if (e & 1)
            r *= b;
        b *= b;
        e >>= 1;
    }
    return r;
}

__device__ __forceinline__ unsigned long long bin_u(int op, unsigned long long a,
                                                    unsigned long long b) {
    switch (op) {
    case KC_ADD: return a + b;
    case KC_SUB: return a - b;
    case KC_MUL: return a * b;
    case KC_DIV: return b == 0 ? 0 : a / b;
    case KC_POW: return upow(a, b);
    case KC_MOD: case KC_MODC: return b == 0 ? 0 : a % b;
    case KC_EQUAL: return a == b;
    case KC_GREATER: return a > b;
    case KC_GREATER_EQUAL: return a >= b;
    case KC_LESS: return a < b;
    case KC_LESS_EQUAL: return a <= b;
    case KC_AND: return (a != 0) & (b != 0);
    case KC_OR: return (a != 0) | (b != 0);
    case KC_XOR: return (a != 0) ^ (b != 0);
    case KC_MAX: return a > b ? a : b;
    case KC_MIN: return a < b ? a : b;
    case KC_SHL: return b >= 64 ? 0 : a << b;
    case KC_SHR: return b >= 64 ? 0 : a >> b;
    case KC_BIT_AND: return a & b;
    case KC_BIT_OR: return a | b;
    case KC_BIT_XOR: return a ^ b;
    default: return a; /* PRelu of unsigned values is the value */
    }
}

/* ---------------- loads and stores of every integer and real type ---------------- */

__device__ __forceinline__ long long ew_ld_i(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64: return ((const long long *)p)[i];
    default: return kc_ld_i(p, t, i);
    }
}

__device__ __forceinline__ unsigned long long ew_ld_u(const void *p, kiln_dtype t, int64_t i) {
    return (unsigned long long)ew_ld_i(p, t, i);
}

__device__ __forceinline__ bool ew_is_int(kiln_dtype t) {
    return t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT16 ||
           t == KILN_DTYPE_UINT16 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_UINT32 ||
           t == KILN_DTYPE_INT64 || t == KILN_DTYPE_UINT64 || t == KILN_DTYPE_BOOL;
}

__device__ __forceinline__ double ew_ld_d(const void *p, kiln_dtype t, int64_t i) {
    if (t == KILN_DTYPE_DOUBLE)
        return ((const double *)p)[i];
    if (t == KILN_DTYPE_UINT64)
        return (double)((const unsigned long long *)p)[i];
    return ew_is_int(t) ? (double)ew_ld_i(p, t, i) : (double)kc_ld_f(p, t, i);
}

__device__ __forceinline__ float ew_ld_f(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_INT16: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32:
        return (float)ew_ld_i(p, t, i);
    case KILN_DTYPE_UINT64: return (float)((const unsigned long long *)p)[i];
    default: return kc_ld_f(p, t, i);
    }
}

__device__ __forceinline__ void ew_st_i(void *p, kiln_dtype t, int64_t i, long long v) {
    switch (t) {
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_UINT64: ((long long *)p)[i] = v; break;
    default: kc_st_i(p, t, i, v); break;
    }
}

/* A double into any type: integers truncate toward zero and saturate (NaN
 * gives 0), as the CPU's stores do. */
__device__ __forceinline__ void ew_st_d(void *p, kiln_dtype t, int64_t i, double v) {
    if (t == KILN_DTYPE_DOUBLE) {
        ((double *)p)[i] = v;
    } else if (t == KILN_DTYPE_BOOL) {
        ((uint8_t *)p)[i] = v != 0.0;
    } else if (t == KILN_DTYPE_UINT64) {
        unsigned long long u = v != v || v <= 0.0 ? (unsigned long long)(v < 0.0 && v > -9.2e18 ? (long long)v : 0)
                               : v >= 18446744073709551615.0 ? ~0ull
                                                             : (unsigned long long)v;
        ((unsigned long long *)p)[i] = u;
    } else if (ew_is_int(t)) {
        long long q = v != v ? 0 : v >= 9223372036854775807.0 ? 9223372036854775807LL
                               : v <= -9223372036854775808.0 ? (-9223372036854775807LL - 1)
                                                             : (long long)v;
        ew_st_i(p, t, i, q);
    } else {
        kc_st_f(p, t, i, (float)v);
    }
}

/* ---------------- the program kernel ---------------- */

template <typename C> struct ew_math;
template <> struct ew_math<float> {
    static __device__ __forceinline__ float ld(const void *p, kiln_dtype t, int64_t i) { return ew_ld_f(p, t, i); }
    static __device__ __forceinline__ void st(void *p, kiln_dtype t, int64_t i, float v) { kc_st_f(p, t, i, v); }
    static __device__ __forceinline__ float un(const kc_step &s, float x) { return un_real(s.op, s, x); }
    static __device__ __forceinline__ float bin(int op, float a, float b) { return bin_real(op, a, b); }
};
template <> struct ew_math<long long> {
    static __device__ __forceinline__ long long ld(const void *p, kiln_dtype t, int64_t i) { return ew_ld_i(p, t, i); }
    static __device__ __forceinline__ void st(void *p, kiln_dtype t, int64_t i, long long v) { ew_st_i(p, t, i, v); }
    static __device__ __forceinline__ long long un(const kc_step &s, long long x) { return un_i(s, x); }
    static __device__ __forceinline__ long long bin(int op, long long a, long long b) { return bin_i(op, a, b); }
};
template <> struct ew_math<unsigned long long> {
    typedef unsigned long long U;
    static __device__ __forceinline__ U ld(const void *p, kiln_dtype t, int64_t i) { return ew_ld_u(p, t, i); }
    static __device__ __forceinline__ void st(void *p, kiln_dtype t, int64_t i, U v) { ew_st_i(p, t, i, (long long)v); }
    static __device__ __forceinline__ U un(const kc_step &s, U x) { return un_u(s, x); }
    static __device__ __forceinline__ U bin(int op, U a, U b) { return bin_u(op, a, b); }
};
template <> struct ew_math<double> {
    static __device__ __forceinline__ double ld(const void *p, kiln_dtype t, int64_t i) { return ew_ld_d(p, t, i); }
    static __device__ __forceinline__ void st(void *p, kiln_dtype t, int64_t i, double v) { ew_st_d(p, t, i, v); }
    static __device__ __forceinline__ double un(const kc_step &s, double x) { return un_real(s.op, s, x); }
    static __device__ __forceinline__ double bin(int op, double a, double b) { return bin_real(op, a, b); }
};

template <typename C>
__global__ void ew_program_kernel(const kc_program p) {
    typedef ew_math<C> M;
    const int rank = p.bc.rank, n_in = p.bc.n_in;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.bc.total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[KC_EW_MAX_IN];
        for (int k = 0; k < n_in; k++)
            off[k] = 0;
        if (rank == 1) { /* collapsed: no division */
            for (int k = 0; k < n_in; k++)
                off[k] = i * p.bc.stride[k][0];
        } else {
            int64_t rem = i;
            for (int d = rank - 1; d >= 0; d--) {
                int64_t c = rem % p.bc.dims[d];
                rem /= p.bc.dims[d];
                for (int k = 0; k < n_in; k++)
                    off[k] += c * p.bc.stride[k][d];
            }
        }
        C acc = M::ld(p.in[0], p.in_dt[0], off[0]);
        for (int s = 0; s < p.n_steps; s++) {
            const kc_step &st = p.steps[s];
            if (st.op < KC_ADD) {
                acc = M::un(st, acc);
            } else {
                int k = st.operand;
                C v = M::ld(p.in[k], p.in_dt[k], off[k]);
                acc = st.swap ? M::bin(st.op, v, acc) : M::bin(st.op, acc, v);
            }
        }
        M::st(p.out, p.out_dt, i, acc);
    }
}

/* Fast path of the program kernel: a float program whose inputs and output
 * share one type T (float, float16, bfloat16), whose innermost dim is a
 * multiple of V = 16 / sizeof(T) and along which every input is either
 * contiguous (stride 1, loaded V at a time in one 16-byte pack) or
 * broadcast (stride 0, one value for the pack). Each thread handles whole
 * packs, so the index arithmetic is paid once per V elements; the
 * arithmetic is the generic kernel's, step for step. */
template <typename T> struct alignas(16) ew_pack {
    T v[16 / sizeof(T)];
};
__device__ __forceinline__ float ew_tof(float v) { return v; }
__device__ __forceinline__ float ew_tof(__half v) { return __half2float(v); }
__device__ __forceinline__ float ew_tof(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void ew_fromf(float &o, float v) { o = v; }
__device__ __forceinline__ void ew_fromf(__half &o, float v) { o = __float2half_rn(v); }
__device__ __forceinline__ void ew_fromf(__nv_bfloat16 &o, float v) { o = __float2bfloat16_rn(v); }

/* One step over a pack of V values, the op's switch taken once for the
 * pack: each case calls the scalar arithmetic with a constant op, so the
 * compiler folds that switch and unrolls the pack. */
#define EW_UN_OPS(X)                                                                           \
    X(KC_ABS) X(KC_NEG) X(KC_SIGN) X(KC_RECIPROCAL) X(KC_FLOOR) X(KC_CEIL) X(KC_ROUND)         \
    X(KC_SQRT) X(KC_EXP) X(KC_LOG) X(KC_SIN) X(KC_COS) X(KC_TAN) X(KC_ASIN) X(KC_ACOS)         \
    X(KC_ATAN) X(KC_SINH) X(KC_COSH) X(KC_ASINH) X(KC_ACOSH) X(KC_ATANH) X(KC_ERF) X(KC_TANH)  \
    X(KC_RELU) X(KC_LEAKY_RELU) X(KC_ELU) X(KC_SELU) X(KC_CELU) X(KC_THRESHOLDED_RELU)        \
    X(KC_SIGMOID) X(KC_HARD_SIGMOID) X(KC_HARD_SWISH) X(KC_SOFTPLUS) X(KC_SOFTSIGN) X(KC_GELU) \
    X(KC_GELU_TANH) X(KC_MISH) X(KC_SWISH) X(KC_SILU) X(KC_CLIP) X(KC_SHRINK) X(KC_ISNAN)      \
    X(KC_ISINF) X(KC_NOT) X(KC_MUL_CONST)
#define EW_BIN_OPS(X)                                                                          \
    X(KC_ADD) X(KC_SUB) X(KC_MUL) X(KC_DIV) X(KC_POW) X(KC_MOD) X(KC_MODC) X(KC_EQUAL)        \
    X(KC_GREATER) X(KC_GREATER_EQUAL) X(KC_LESS) X(KC_LESS_EQUAL) X(KC_AND) X(KC_OR) X(KC_XOR) \
    X(KC_PRELU) X(KC_MAX) X(KC_MIN)

template <int V> __device__ __forceinline__ void ew_un_pack(const kc_step &st, float (&acc)[V]) {
    switch (st.op) {
#define EW_UN_CASE(OPC)                                                                        \
    case OPC:                                                                                  \
        _Pragma("unroll") for (int e = 0; e < V; e++) acc[e] = un_real(OPC, st, acc[e]);       \
        break;
        EW_UN_OPS(EW_UN_CASE)
#undef EW_UN_CASE
    default: break; /* Identity */
    }
}

template <int V>
__device__ __forceinline__ void ew_bin_pack(int op, bool swap, float (&acc)[V], const float (&v)[V]) {
    switch (op) {
#define EW_BIN_CASE(OPC)                                                                       \
    case OPC:                                                                                  \
        if (swap) {                                                                            \
            _Pragma("unroll") for (int e = 0; e < V; e++) acc[e] = bin_real(OPC, v[e], acc[e]); \
        } else {                                                                               \
            _Pragma("unroll") for (int e = 0; e < V; e++) acc[e] = bin_real(OPC, acc[e], v[e]); \
        }                                                                                      \
        break;
        EW_BIN_OPS(EW_BIN_CASE)
#undef EW_BIN_CASE
    default: break;
    }
}

/* I: the index type, 32-bit when every element offset fits (the host
 * checks), which halves the index arithmetic's instructions. */
template <typename T, typename I>
__global__ void ew_vec_kernel(const kc_program p, unsigned bcast_inner) {
    constexpr int V = 16 / sizeof(T);
    const int rank = p.bc.rank, n_in = p.bc.n_in;
    const I inner = (I)p.bc.dims[rank - 1];
    const I npack = (I)(p.bc.total / V);
    for (I q = blockIdx.x * (I)blockDim.x + threadIdx.x; q < npack; q += (I)gridDim.x * blockDim.x) {
        const I i0 = q * V;
        I off[KC_EW_MAX_IN];
        I col = i0 % inner, rem = i0 / inner;
        for (int k = 0; k < n_in; k++)
            off[k] = col * (I)p.bc.stride[k][rank - 1];
        for (int d = rank - 2; d > 0; d--) {
            const I dim = (I)p.bc.dims[d];
            I c = rem % dim;
            rem /= dim;
            for (int k = 0; k < n_in; k++)
                off[k] += c * (I)p.bc.stride[k][d];
        }
        if (rank > 1) /* the outermost index is what remains: no division */
            for (int k = 0; k < n_in; k++)
                off[k] += rem * (I)p.bc.stride[k][0];
        float acc[V], v[V];
#define EW_LOAD(dst, k)                                                                        \
    do {                                                                                       \
        const T *src_ = (const T *)p.in[k] + off[k];                                           \
        if ((bcast_inner >> (k)) & 1u) {                                                       \
            float s_ = ew_tof(*src_);                                                          \
            _Pragma("unroll") for (int e = 0; e < V; e++) dst[e] = s_;                         \
        } else {                                                                               \
            ew_pack<T> pk_ = *(const ew_pack<T> *)src_;                                        \
            _Pragma("unroll") for (int e = 0; e < V; e++) dst[e] = ew_tof(pk_.v[e]);           \
        }                                                                                      \
    } while (0)
        EW_LOAD(acc, 0);
        for (int s = 0; s < p.n_steps; s++) {
            const kc_step &st = p.steps[s];
            if (st.op < KC_ADD) {
                ew_un_pack<V>(st, acc);
            } else {
                EW_LOAD(v, st.operand);
                ew_bin_pack<V>(st.op, st.swap != 0, acc, v);
            }
        }
#undef EW_LOAD
        ew_pack<T> o;
#pragma unroll
        for (int e = 0; e < V; e++)
            ew_fromf(o.v[e], acc[e]);
        *(ew_pack<T> *)((T *)p.out + i0) = o;
    }
}

template <typename T>
static void ew_vec_launch(const kc_program *p, unsigned blocks, unsigned bmask, bool narrow,
                          cudaStream_t stream) {
    if (narrow)
        ew_vec_kernel<T, int32_t><<<blocks, KC_THREADS, 0, stream>>>(*p, bmask);
    else
        ew_vec_kernel<T, int64_t><<<blocks, KC_THREADS, 0, stream>>>(*p, bmask);
}

/* The scalar fast path, for the typed programs the pack kernel does not
 * take (an innermost dim off the packs, an input strided along it, a
 * pointer off 16 bytes): the same program on one element at a time, typed
 * (no dtype switch), each thread U elements a block width apart (so a
 * warp's accesses are contiguous) whose loads of every input are all in
 * flight before the arithmetic, the op's switch taken once for the U. The
 * element's index splits into coordinates once for all its inputs; with
 * 32-bit indices each split is a multiply-high and a shift (ew_divs), not
 * a division. At most NIN inputs, held in registers and picked for a step
 * by NIN - 1 selects (ew_select), so nothing goes to local memory but the
 * trigonometric functions' reduction of huge arguments. In place is safe:
 * an input of the output's shape is read only at the element written. */

/* q = n / dim as (umulhi(n, m) + n) >> s, with s = ceil(log2(dim)) and
 * m = 2^32 (2^s - dim) / dim + 1 (Granlund and Montgomery; exact for n and
 * dim below 2^31, which the 32-bit path guarantees). */
typedef struct ew_divs {
    unsigned m[KC_MAX_DIMS], s[KC_MAX_DIMS];
} ew_divs;

/* One kernel parameter for both: a separate small one would be copied to
 * local memory to be indexed by dim. */
typedef struct ew_scalar_args {
    kc_program p;
    ew_divs dv;
} ew_scalar_args;

static void ew_divs_init(ew_divs *dv, const kc_bcast *bc) {
    memset(dv, 0, sizeof *dv);
    for (int d = 0; d < bc->rank; d++) {
        const uint64_t dim = (uint64_t)bc->dims[d];
        unsigned s = 0;
        while (s < 31 && (1ull << s) < dim)
            s++;
        dv->s[d] = s;
        dv->m[d] = (unsigned)(((1ull << 32) * ((1ull << s) - dim)) / dim + 1);
    }
}

template <typename I> struct ew_idx;
template <> struct ew_idx<unsigned> {
    static __device__ __forceinline__ unsigned div(unsigned n, const kc_program &p, const ew_divs &dv, int d) {
        return (__umulhi(n, dv.m[d]) + n) >> dv.s[d];
    }
};
template <> struct ew_idx<int64_t> {
    static __device__ __forceinline__ int64_t div(int64_t n, const kc_program &p, const ew_divs &dv, int d) {
        return n / p.bc.dims[d];
    }
};

/* c ? a : b, opaque to the compiler: as plain selects, a chain of them
 * over x[k] with k == operand is turned back into x[operand], an array
 * in local memory. */
__device__ __forceinline__ float ew_select(bool c, float a, float b) {
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, 0;\n\tselp.f32 %0, %2, %3, p;\n\t}"
        : "=f"(r)
        : "r"((unsigned)c), "f"(a), "f"(b));
    return r;
}

template <typename T, typename I, int NIN, int U>
__global__ void __launch_bounds__(KC_THREADS) ew_scalar_kernel(const ew_scalar_args a) {
    const kc_program &p = a.p;
    const ew_divs &dv = a.dv;
    const int rank = p.bc.rank, n_in = p.bc.n_in;
    const I total = (I)p.bc.total, width = (I)blockDim.x;
    for (I i0 = (I)blockIdx.x * width * U + threadIdx.x; i0 < total; i0 += (I)gridDim.x * width * U) {
        /* coordinates, innermost first; elements past the end reread the
         * last one (nothing waits on a branch) and are not stored */
        I rem[U], off[NIN][U];
#pragma unroll
        for (int e = 0; e < U; e++) {
            const I i = i0 + (I)e * width;
            rem[e] = i < total ? i : total - 1;
#pragma unroll
            for (int k = 0; k < NIN; k++)
                off[k][e] = 0;
        }
        for (int d = rank - 1; d > 0; d--) {
            const I dim = (I)p.bc.dims[d];
            I st[NIN];
#pragma unroll
            for (int k = 0; k < NIN; k++)
                st[k] = k < n_in ? (I)p.bc.stride[k][d] : 0;
#pragma unroll
            for (int e = 0; e < U; e++) {
                const I q = ew_idx<I>::div(rem[e], p, dv, d), c = rem[e] - q * dim;
                rem[e] = q;
#pragma unroll
                for (int k = 0; k < NIN; k++)
                    off[k][e] += c * st[k];
            }
        }
        T raw[NIN][U];
#pragma unroll
        for (int k = 0; k < NIN; k++) {
            if (k < n_in) { /* the same for every thread: no divergence */
                const I s0 = (I)p.bc.stride[k][0];
                const T *src = (const T *)p.in[k];
#pragma unroll
                for (int e = 0; e < U; e++)
                    raw[k][e] = src[off[k][e] + rem[e] * s0];
            }
        }
        float x[NIN][U];
#pragma unroll
        for (int k = 0; k < NIN; k++)
#pragma unroll
            for (int e = 0; e < U; e++)
                x[k][e] = k < n_in ? ew_tof(raw[k][e]) : 0.f;
        float acc[U];
#pragma unroll
        for (int e = 0; e < U; e++)
            acc[e] = x[0][e];
        for (int s = 0; s < p.n_steps; s++) {
            const kc_step &st = p.steps[s];
            if (st.op < KC_ADD) {
                ew_un_pack<U>(st, acc);
            } else {
                float v[U];
#pragma unroll
                for (int e = 0; e < U; e++) {
                    v[e] = x[0][e];
#pragma unroll
                    for (int k = 1; k < NIN; k++)
                        v[e] = ew_select(k == st.operand, x[k][e], v[e]);
                }
                ew_bin_pack<U>(st.op, st.swap != 0, acc, v);
            }
        }
#pragma unroll
        for (int e = 0; e < U; e++) {
            const I i = i0 + (I)e * width;
            if (i < total)
                ew_fromf(((T *)p.out)[i], acc[e]);
        }
    }
}

/* Elements a thread: NIN * U values stay at 8 registers. */
template <typename T>
static void ew_scalar_launch(const ew_scalar_args *a, bool narrow, cudaStream_t stream) {
    const int n_in = a->p.bc.n_in, u = !narrow ? 1 : n_in <= 2 ? 4 : n_in <= 4 ? 2 : 1;
    const unsigned blocks = kc_blocks((a->p.bc.total + u - 1) / u, KC_THREADS);
    if (!narrow)
        ew_scalar_kernel<T, int64_t, KC_EW_MAX_IN, 1><<<blocks, KC_THREADS, 0, stream>>>(*a);
    else if (n_in <= 2)
        ew_scalar_kernel<T, unsigned, 2, 4><<<blocks, KC_THREADS, 0, stream>>>(*a);
    else if (n_in <= 4)
        ew_scalar_kernel<T, unsigned, 4, 2><<<blocks, KC_THREADS, 0, stream>>>(*a);
    else
        ew_scalar_kernel<T, unsigned, KC_EW_MAX_IN, 1><<<blocks, KC_THREADS, 0, stream>>>(*a);
}

/* The pack kernel's condition: along the innermost dim every input is
 * contiguous (16-byte aligned, its outer strides pack multiples) or
 * broadcast (bit k of *bmask). */
static bool ew_vec_fits(const kc_program *p, int V, unsigned *bmask) {
    const int r = p->bc.rank;
    if (((uintptr_t)p->out & 15) || p->bc.dims[r - 1] % V)
        return false;
    *bmask = 0;
    for (int k = 0; k < p->bc.n_in; k++) {
        int64_t si = p->bc.stride[k][r - 1];
        if (si == 0) {
            *bmask |= 1u << k;
        } else if (si == 1) {
            if ((uintptr_t)p->in[k] & 15)
                return false;
            for (int d = 0; d < r - 1; d++)
                if (p->bc.stride[k][d] % V)
                    return false;
        } else {
            return false;
        }
    }
    return true;
}

/* Whether 32-bit indices serve a launch of `blocks` blocks that each step
 * over KC_THREADS * per elements: the index runs in range (the grid-stride
 * step included) and every input's largest offset fits. */
static bool ew_narrow(const kc_program *p, unsigned blocks, int per) {
    if (p->bc.total + (int64_t)blocks * KC_THREADS * per >= INT32_MAX)
        return false;
    for (int k = 0; k < p->bc.n_in; k++) {
        int64_t last = 0;
        for (int d = 0; d < p->bc.rank; d++)
            last += (p->bc.dims[d] - 1) * p->bc.stride[k][d];
        if (last + per >= INT32_MAX)
            return false;
    }
    return true;
}

/* A float program whose inputs and output share one real type T runs
 * typed: on 16-byte packs when ew_vec_fits, else an element at a time.
 * 1: launched (status in *err); 0: not covered. */
static int kc_ew_fast(const kc_program *p, cudaStream_t stream, cudaError_t *err) {
    const kiln_dtype t = p->out_dt;
    const int es = t == KILN_DTYPE_FLOAT ? 4 : (t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16) ? 2 : 0;
    if (p->integer || !es || !p->out)
        return 0;
    for (int k = 0; k < p->bc.n_in; k++)
        if (p->in_dt[k] != t || !p->in[k])
            return 0;
    const int V = 16 / es;
    unsigned bmask = 0;
    if (ew_vec_fits(p, V, &bmask)) {
        unsigned blocks = kc_blocks(p->bc.total / V, KC_THREADS);
        bool narrow = ew_narrow(p, blocks, V);
        if (t == KILN_DTYPE_FLOAT)
            ew_vec_launch<float>(p, blocks, bmask, narrow, stream);
        else if (t == KILN_DTYPE_FLOAT16)
            ew_vec_launch<__half>(p, blocks, bmask, narrow, stream);
        else
            ew_vec_launch<__nv_bfloat16>(p, blocks, bmask, narrow, stream);
    } else {
        /* ew_scalar_launch's elements a thread (4 at most) */
        bool narrow = ew_narrow(p, kc_blocks(p->bc.total, KC_THREADS), 4);
        ew_scalar_args a;
        a.p = *p;
        ew_divs_init(&a.dv, &p->bc);
        if (t == KILN_DTYPE_FLOAT)
            ew_scalar_launch<float>(&a, narrow, stream);
        else if (t == KILN_DTYPE_FLOAT16)
            ew_scalar_launch<__half>(&a, narrow, stream);
        else
            ew_scalar_launch<__nv_bfloat16>(&a, narrow, stream);
    }
    *err = cudaGetLastError();
    return 1;
}

extern "C" cudaError_t kc_ew_run(const kc_program *p, cudaStream_t stream) {
    if (!p || p->bc.n_in < 1 || p->bc.n_in > KC_EW_MAX_IN || p->n_steps < 0 ||
        p->n_steps > KC_EW_MAX_STEPS || p->bc.rank < 1 || p->bc.rank > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    if (p->bc.total <= 0)
        return cudaSuccess;
    cudaError_t err = cudaSuccess;
    if (kc_fast_paths() && kc_ew_fast(p, stream, &err))
        return err;
    unsigned blocks = kc_blocks(p->bc.total, KC_THREADS);
    switch (p->integer) {
    case KC_PATH_F32: ew_program_kernel<float><<<blocks, KC_THREADS, 0, stream>>>(*p); break;
    case KC_PATH_I64: ew_program_kernel<long long><<<blocks, KC_THREADS, 0, stream>>>(*p); break;
    case KC_PATH_U64: ew_program_kernel<unsigned long long><<<blocks, KC_THREADS, 0, stream>>>(*p); break;
    case KC_PATH_F64: ew_program_kernel<double><<<blocks, KC_THREADS, 0, stream>>>(*p); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---------------- Where ---------------- */

template <typename T>
__global__ void where_kernel(const uint8_t *cond, const T *x, const T *y, T *out, const kc_bcast bc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < bc.total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o0 = 0, o1 = 0, o2 = 0, rem = i;
        for (int d = bc.rank - 1; d >= 0; d--) {
            int64_t c = rem % bc.dims[d];
            rem /= bc.dims[d];
            o0 += c * bc.stride[0][d];
            o1 += c * bc.stride[1][d];
            o2 += c * bc.stride[2][d];
        }
        out[i] = cond[o0] ? x[o1] : y[o2];
    }
}

extern "C" cudaError_t kc_where(const void *cond, const void *x, const void *y, void *out,
                                size_t esize, const kc_bcast *bc, cudaStream_t stream) {
    if (!bc || bc->n_in != 3 || bc->rank < 1 || bc->rank > KC_MAX_DIMS)
        return cudaErrorInvalidValue;
    if (bc->total <= 0)
        return cudaSuccess;
    unsigned blocks = kc_blocks(bc->total, KC_THREADS);
    const uint8_t *c = (const uint8_t *)cond;
    switch (esize) {
    case 1: where_kernel<uint8_t><<<blocks, KC_THREADS, 0, stream>>>(c, (const uint8_t *)x, (const uint8_t *)y, (uint8_t *)out, *bc); break;
    case 2: where_kernel<uint16_t><<<blocks, KC_THREADS, 0, stream>>>(c, (const uint16_t *)x, (const uint16_t *)y, (uint16_t *)out, *bc); break;
    case 4: where_kernel<uint32_t><<<blocks, KC_THREADS, 0, stream>>>(c, (const uint32_t *)x, (const uint32_t *)y, (uint32_t *)out, *bc); break;
    case 8: where_kernel<uint64_t><<<blocks, KC_THREADS, 0, stream>>>(c, (const uint64_t *)x, (const uint64_t *)y, (uint64_t *)out, *bc); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---------------- Cast ---------------- */

__device__ __forceinline__ bool is_int_type(kiln_dtype t) {
    return t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64 || t == KILN_DTYPE_INT8 ||
           t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT16 || t == KILN_DTYPE_BOOL;
}

__device__ __forceinline__ double cast_ld_d(const void *p, kiln_dtype t, int64_t i) {
    if (t == KILN_DTYPE_DOUBLE)
        return ((const double *)p)[i];
    if (is_int_type(t))
        return (double)kc_ld_i(p, t, i);
    return (double)kc_ld_f(p, t, i);
}

__device__ __forceinline__ long long sat_i64(double v) {
    if (v != v)
        return 0;
    if (v >= 9223372036854775807.0)
        return 9223372036854775807LL;
    if (v <= -9223372036854775808.0)
        return (-9223372036854775807LL - 1);
    return (long long)v;
}

/* Any source element as the float the CPU's Cast converts to a float type
 * (int64 and double through double, as below). */
__device__ __forceinline__ float cast_ld_f(const void *x, kiln_dtype xt, int64_t i) {
    if (kn_f8_is((int)xt))
        return kn_f8_to_float(((const uint8_t *)x)[i], (int)xt);
    if (xt == KILN_DTYPE_INT64 || xt == KILN_DTYPE_DOUBLE)
        return (float)cast_ld_d(x, xt, i);
    return is_int_type(xt) ? (float)kc_ld_i(x, xt, i) : kc_ld_f(x, xt, i);
}

/* saturate: float8 outputs clamp to their largest finite value (ONNX's
 * default), else overflow to NaN or infinity; core/fp8.h's rounding, the
 * CPU's. */
__global__ void cast_kernel(const void *x, kiln_dtype xt, void *y, kiln_dtype yt, int64_t n, int saturate) {
    const bool xi = is_int_type(xt), yi = is_int_type(yt) && yt != KILN_DTYPE_BOOL;
    const bool x8 = kn_f8_is((int)xt), y8 = kn_f8_is((int)yt);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (y8) {
            ((uint8_t *)y)[i] = kn_f8_from_float(cast_ld_f(x, xt, i), (int)yt, saturate);
        } else if (x8) {
            const float v = cast_ld_f(x, xt, i);
            if (yt == KILN_DTYPE_BOOL)
                ((uint8_t *)y)[i] = v != 0.f;
            else if (yi)
                kc_st_i(y, yt, i, sat_i64((double)v));
            else if (yt == KILN_DTYPE_DOUBLE)
                ((double *)y)[i] = v;
            else
                kc_st_f(y, yt, i, v);
        } else if (xi && (yi || yt == KILN_DTYPE_BOOL)) {
            kc_st_i(y, yt, i, kc_ld_i(x, xt, i));
        } else if (yt == KILN_DTYPE_BOOL) {
            ((uint8_t *)y)[i] = cast_ld_d(x, xt, i) != 0.0;
        } else if (yi) {
            kc_st_i(y, yt, i, sat_i64(cast_ld_d(x, xt, i)));
        } else if (yt == KILN_DTYPE_DOUBLE) {
            ((double *)y)[i] = cast_ld_d(x, xt, i);
        } else if (xt == KILN_DTYPE_INT64 || xt == KILN_DTYPE_DOUBLE) {
            kc_st_f(y, yt, i, (float)cast_ld_d(x, xt, i));
        } else {
            kc_st_f(y, yt, i, xi ? (float)kc_ld_i(x, xt, i) : kc_ld_f(x, xt, i));
        }
    }
}

extern "C" cudaError_t kc_cast(const void *x, kiln_dtype xt, void *y, kiln_dtype yt, int64_t n,
                               int saturate, cudaStream_t stream) {
    if (n <= 0)
        return cudaSuccess;
    if (!x || !y)
        return cudaErrorInvalidValue;
    cast_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(x, xt, y, yt, n, saturate);
    return cudaGetLastError();
}

/* ---------------- epilogue and BatchNormalization ---------------- */

/* I: the index type, 32-bit whenever the tensor allows (cheaper division). */
template <typename T, typename I>
__global__ void epilogue_kernel(T *y, I n, const T *bias, I channels, I inner, const T *z, int act,
                                float alpha, float beta) {
    typedef kc_io<T> IO;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        float v = IO::ld(y, i);
        if (bias)
            v += IO::ld(bias, (i / inner) % channels);
        if (z)
            v += IO::ld(z, i);
        IO::st(y, i, kc_act_apply(act, v, alpha, beta));
    }
}

/* The activation alone (what follows a cuBLASLt product whose epilogue took
 * the bias): 16-byte packs in place. */
template <typename T>
__global__ void act_packs_kernel(T *y, int64_t packs, int act, float alpha, float beta) {
    constexpr int V = 16 / sizeof(T);
    struct alignas(16) P { T v[V]; };
    typedef kc_io<T> IO;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < packs;
         i += (int64_t)gridDim.x * blockDim.x) {
        P p = reinterpret_cast<P *>(y)[i];
#pragma unroll
        for (int k = 0; k < V; k++)
            IO::st(p.v, k, kc_act_apply(act, IO::ld(p.v, k), alpha, beta));
        reinterpret_cast<P *>(y)[i] = p;
    }
}

template <typename T>
static void epilogue_launch(T *y, int64_t n, const T *bias, int64_t channels, int64_t inner,
                            const T *z, int act, float alpha, float beta, cudaStream_t stream) {
    constexpr int V = 16 / sizeof(T);
    if (!bias && !z && (uintptr_t)y % 16 == 0 && n % V == 0 && kc_fast_paths()) {
        act_packs_kernel<T><<<kc_blocks(n / V, KC_THREADS), KC_THREADS, 0, stream>>>(y, n / V, act,
                                                                                   alpha, beta);
        return;
    }
    unsigned blocks = kc_blocks(n, KC_THREADS);
    if (n < 0x7fffffffLL)
        epilogue_kernel<T, unsigned><<<blocks, KC_THREADS, 0, stream>>>(
            y, (unsigned)n, bias, (unsigned)channels, (unsigned)inner, z, act, alpha, beta);
    else
        epilogue_kernel<T, int64_t><<<blocks, KC_THREADS, 0, stream>>>(y, n, bias, channels, inner,
                                                                       z, act, alpha, beta);
}

extern "C" cudaError_t kc_epilogue(void *y, kiln_dtype dt, int64_t n, const void *bias,
                                   int64_t channels, int64_t inner, const void *z, int act,
                                   float alpha, float beta, cudaStream_t stream) {
    if (n <= 0)
        return cudaSuccess;
    if (!y || (bias && (channels < 1 || inner < 1)))
        return cudaErrorInvalidValue;
    switch (dt) {
    case KILN_DTYPE_FLOAT:
        epilogue_launch<float>((float *)y, n, (const float *)bias, channels, inner, (const float *)z, act, alpha, beta, stream);
        break;
    case KILN_DTYPE_FLOAT16:
        epilogue_launch<__half>((__half *)y, n, (const __half *)bias, channels, inner, (const __half *)z, act, alpha, beta, stream);
        break;
    case KILN_DTYPE_BFLOAT16:
        epilogue_launch<__nv_bfloat16>((__nv_bfloat16 *)y, n, (const __nv_bfloat16 *)bias, channels, inner, (const __nv_bfloat16 *)z, act, alpha, beta, stream);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename T>
__global__ void batchnorm_kernel(const T *x, T *y, int64_t n, int64_t channels, int64_t inner,
                                 const void *scale, const void *bias, const void *mean,
                                 const void *var, kiln_dtype pt, float eps) {
    typedef kc_io<T> IO;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (i / inner) % channels;
        /* the CPU reference's form: y = x * k + shift */
        float k = kc_ld_f(scale, pt, c) / sqrtf(kc_ld_f(var, pt, c) + eps);
        float shift = kc_ld_f(bias, pt, c) - kc_ld_f(mean, pt, c) * k;
        IO::st(y, i, IO::ld(x, i) * k + shift);
    }
}

extern "C" cudaError_t kc_batchnorm(const void *x, void *y, kiln_dtype dt, int64_t n,
                                    int64_t channels, int64_t inner, const void *scale,
                                    const void *bias, const void *mean, const void *var,
                                    kiln_dtype pt, float eps, cudaStream_t stream) {
    if (n <= 0)
        return cudaSuccess;
    if (!x || !y || !scale || !bias || !mean || !var || channels < 1 || inner < 1)
        return cudaErrorInvalidValue;
    unsigned blocks = kc_blocks(n, KC_THREADS);
    switch (dt) {
    case KILN_DTYPE_FLOAT:
        batchnorm_kernel<float><<<blocks, KC_THREADS, 0, stream>>>((const float *)x, (float *)y, n, channels, inner, scale, bias, mean, var, pt, eps);
        break;
    case KILN_DTYPE_FLOAT16:
        batchnorm_kernel<__half><<<blocks, KC_THREADS, 0, stream>>>((const __half *)x, (__half *)y, n, channels, inner, scale, bias, mean, var, pt, eps);
        break;
    case KILN_DTYPE_BFLOAT16:
        batchnorm_kernel<__nv_bfloat16><<<blocks, KC_THREADS, 0, stream>>>((const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, n, channels, inner, scale, bias, mean, var, pt, eps);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---------------- tiled transpose with epilogue ---------------- */

#define KC_TILE 32

template <typename T>
__global__ void transpose_epilogue_kernel(const T *src, T *dst, int64_t rows, int64_t cols,
                                          const T *bias, const T *z, int act, float alpha,
                                          float beta) {
    typedef kc_io<T> IO;
    __shared__ float tile[KC_TILE][KC_TILE + 1];
    const int64_t b = blockIdx.z;
    const int64_t r0 = (int64_t)blockIdx.y * KC_TILE, c0 = (int64_t)blockIdx.x * KC_TILE;
    const T *s = src + b * rows * cols;
    T *d = dst + b * rows * cols;
    for (int i = threadIdx.y; i < KC_TILE; i += blockDim.y) {
        int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols)
            tile[i][threadIdx.x] = IO::ld(s, r * cols + c);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < KC_TILE; i += blockDim.y) {
        int64_t c = c0 + i, r = r0 + threadIdx.x; /* dst row c, column r */
        if (r < rows && c < cols) {
            float v = tile[threadIdx.x][i];
            int64_t o = c * rows + r;
            if (bias)
                v += IO::ld(bias, c);
            if (z)
                v += IO::ld(z + b * rows * cols, o);
            IO::st(d, o, kc_act_apply(act, v, alpha, beta));
        }
    }
}

extern "C" cudaError_t kc_transpose_epilogue(const void *src, void *dst, kiln_dtype dt,
                                             int64_t batch, int64_t rows, int64_t cols,
                                             const void *bias, const void *z, int act, float alpha,
                                             float beta, cudaStream_t stream) {
    if (batch <= 0 || rows <= 0 || cols <= 0)
        return cudaSuccess;
    if (!src || !dst || src == dst || batch > 65535 || (rows + KC_TILE - 1) / KC_TILE > 65535 ||
        (cols + KC_TILE - 1) / KC_TILE > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)((cols + KC_TILE - 1) / KC_TILE), (unsigned)((rows + KC_TILE - 1) / KC_TILE),
              (unsigned)batch);
    dim3 block(KC_TILE, 8);
    switch (dt) {
    case KILN_DTYPE_FLOAT:
        transpose_epilogue_kernel<float><<<grid, block, 0, stream>>>((const float *)src, (float *)dst, rows, cols, (const float *)bias, (const float *)z, act, alpha, beta);
        break;
    case KILN_DTYPE_FLOAT16:
        transpose_epilogue_kernel<__half><<<grid, block, 0, stream>>>((const __half *)src, (__half *)dst, rows, cols, (const __half *)bias, (const __half *)z, act, alpha, beta);
        break;
    case KILN_DTYPE_BFLOAT16:
        transpose_epilogue_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>((const __nv_bfloat16 *)src, (__nv_bfloat16 *)dst, rows, cols, (const __nv_bfloat16 *)bias, (const __nv_bfloat16 *)z, act, alpha, beta);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
