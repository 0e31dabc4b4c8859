/* k_elementwise_util.c - conversions between storage and compute types, and
 * the broadcast row iterator, for the CPU elementwise family. */
#include <math.h>
#include <string.h>

#include "core/fp8.h"
#include "k_elementwise.h"

int kb_ew_ctype(kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT8E4M3FN: case KILN_DTYPE_FLOAT8E4M3FNUZ: case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
        return KB_F32;
    case KILN_DTYPE_DOUBLE: return KB_F64;
    case KILN_DTYPE_INT8: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32: case KILN_DTYPE_INT64:
    case KILN_DTYPE_BOOL:
        return KB_I64;
    case KILN_DTYPE_UINT8: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64:
        return KB_U64;
    default: return -1;
    }
}

bool kb_ew_native(kiln_dtype dt, kb_ctype ct) {
    return (dt == KILN_DTYPE_FLOAT && ct == KB_F32) || (dt == KILN_DTYPE_DOUBLE && ct == KB_F64) ||
           (dt == KILN_DTYPE_INT64 && ct == KB_I64) || (dt == KILN_DTYPE_UINT64 && ct == KB_U64);
}

/* ---- float8 "fnuz" formats (no infinities, no negative zero; 0x80 is NaN),
 * which core.h does not export: core/fp8.h, saturating as ONNX's Cast does
 * by default ---- */
static float e4m3fnuz_to_float(uint8_t v) { return kn_f8_to_float(v, KN_F8_E4M3FNUZ); }
static float e5m2fnuz_to_float(uint8_t v) { return kn_f8_to_float(v, KN_F8_E5M2FNUZ); }

/* ---- inline half conversions: the same results as core's kn_half_to_float
 * and friends (exact, round to nearest even), written as selects so that the
 * conversion loops vectorise ---- */
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f2u32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t normal = (em << 13) + 0x38000000u;     /* rebias the exponent by 127 - 15 */
    uint32_t special = (em << 13) | 0x7f800000u;    /* infinity, NaN */
    uint32_t sub = f2u32((float)em * 5.9604644775390625e-08f); /* zero, subnormal: em * 2^-24 */
    uint32_t u = em >= 0x7c00u ? special : (em >= 0x0400u ? normal : sub);
    return u2f(u | sign);
}

static inline uint16_t f2h(float f) {
    uint32_t u = f2u32(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* subnormal results: adding 0.5 leaves a's value in units of 2^-24 in the
     * low bits, rounded to nearest even by the addition itself */
    uint32_t sub = f2u32(u2f(a) + 0.5f) - 0x3f000000u;
    uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
    uint32_t r = a > 0x7f800000u   ? 0x7e00u
                 : a >= 0x477ff000u ? 0x7c00u
                 : a < 0x38800000u  ? sub
                                    : normal;
    return (uint16_t)(r | sign);
}

static inline float bf2f(uint16_t h) { return u2f((uint32_t)h << 16); }

static inline uint16_t f2bf(float f) {
    uint32_t u = f2u32(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

/* ---- saturating float to integer conversions (C leaves overflow undefined) ---- */
static inline int64_t f2i(double v) {
    if (v != v)
        return 0;
    if (v >= 9223372036854775807.0)
        return INT64_MAX;
    if (v <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}
static inline uint64_t f2u(double v) {
    if (v != v)
        return 0;
    if (v >= 18446744073709551615.0)
        return UINT64_MAX;
    if (v < 0)
        return (uint64_t)f2i(v);
    return (uint64_t)v;
}

#define KB_ID(x) (x)

/* Load loop body for every storage type; FROMF converts a float/double value
 * to T, the integer cases use a plain cast. */
#define DEF_LOAD(NAME, T, FROMF)                                                              \
    static void NAME(kiln_dtype dt, const void *src, int64_t n, T *d) {                       \
        switch (dt) {                                                                         \
        case KILN_DTYPE_FLOAT: { const float *s = src;_Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = FROMF(s[i]); } break; \
        case KILN_DTYPE_DOUBLE: { const double *s = src; for (int64_t i = 0; i < n; i++) d[i] = FROMF(s[i]); } break; \
        case KILN_DTYPE_FLOAT16: { const uint16_t *s = src;_Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = FROMF(h2f(s[i])); } break; \
        case KILN_DTYPE_BFLOAT16: { const uint16_t *s = src;_Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = FROMF(bf2f(s[i])); } break; \
        case KILN_DTYPE_FLOAT8E4M3FN: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = FROMF(kn_fp8e4m3_to_float(s[i])); } break; \
        case KILN_DTYPE_FLOAT8E5M2: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = FROMF(kn_fp8e5m2_to_float(s[i])); } break; \
        case KILN_DTYPE_FLOAT8E4M3FNUZ: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = FROMF(e4m3fnuz_to_float(s[i])); } break; \
        case KILN_DTYPE_FLOAT8E5M2FNUZ: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = FROMF(e5m2fnuz_to_float(s[i])); } break; \
        case KILN_DTYPE_INT8: { const int8_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_INT16: { const int16_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_INT32: { const int32_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_INT64: { const int64_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_UINT8: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_UINT16: { const uint16_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_UINT32: { const uint32_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_UINT64: { const uint64_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)s[i]; } break; \
        case KILN_DTYPE_BOOL: { const uint8_t *s = src; for (int64_t i = 0; i < n; i++) d[i] = (T)(s[i] != 0); } break; \
        default: memset(d, 0, (size_t)n * sizeof(T)); break;                                  \
        }                                                                                     \
    }

#define TO_F32(x) ((float)(x))
#define TO_F64(x) ((double)(x))
DEF_LOAD(load_f32, float, TO_F32)
DEF_LOAD(load_f64, double, TO_F64)
DEF_LOAD(load_i64, int64_t, f2i)
DEF_LOAD(load_u64, uint64_t, f2u)

void kb_ew_load(kiln_dtype dt, const void *src, int64_t n, kb_ctype ct, void *dst) {
    switch (ct) {
    case KB_F32: load_f32(dt, src, n, dst); break;
    case KB_F64: load_f64(dt, src, n, dst); break;
    case KB_I64: load_i64(dt, src, n, dst); break;
    case KB_U64: load_u64(dt, src, n, dst); break;
    default: break;
    }
}

/* Store loop for every storage type. TOI/TOU convert T to int64/uint64
 * (integer storage types truncate from those, as C casts do on two's
 * complement machines). */
#define DEF_STORE(NAME, T, TOI, TOU)                                                          \
    static void NAME(kiln_dtype dt, void *dst, int64_t n, const T *s) {                       \
        switch (dt) {                                                                         \
        case KILN_DTYPE_FLOAT: { float *d = dst;_Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = (float)s[i]; } break; \
        case KILN_DTYPE_DOUBLE: { double *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (double)s[i]; } break; \
        case KILN_DTYPE_FLOAT16: { uint16_t *d = dst;_Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = f2h((float)s[i]); } break; \
        case KILN_DTYPE_BFLOAT16: { uint16_t *d = dst;_Pragma("omp simd") for (int64_t i = 0; i < n; i++) d[i] = f2bf((float)s[i]); } break; \
        case KILN_DTYPE_FLOAT8E4M3FN: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = kn_float_to_fp8e4m3((float)s[i]); } break; \
        case KILN_DTYPE_FLOAT8E5M2: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = kn_float_to_fp8e5m2((float)s[i]); } break; \
        case KILN_DTYPE_FLOAT8E4M3FNUZ: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = kn_f8_from_float((float)s[i], KN_F8_E4M3FNUZ, 1); } break; \
        case KILN_DTYPE_FLOAT8E5M2FNUZ: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = kn_f8_from_float((float)s[i], KN_F8_E5M2FNUZ, 1); } break; \
        case KILN_DTYPE_INT8: { int8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (int8_t)TOI(s[i]); } break; \
        case KILN_DTYPE_INT16: { int16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (int16_t)TOI(s[i]); } break; \
        case KILN_DTYPE_INT32: { int32_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (int32_t)TOI(s[i]); } break; \
        case KILN_DTYPE_INT64: { int64_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = TOI(s[i]); } break; \
        case KILN_DTYPE_UINT8: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (uint8_t)TOI(s[i]); } break; \
        case KILN_DTYPE_UINT16: { uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (uint16_t)TOI(s[i]); } break; \
        case KILN_DTYPE_UINT32: { uint32_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)TOI(s[i]); } break; \
        case KILN_DTYPE_UINT64: { uint64_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = TOU(s[i]); } break; \
        case KILN_DTYPE_BOOL: { uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = s[i] != 0; } break; \
        default: break;                                                                       \
        }                                                                                     \
    }

#define I_OF_I(x) ((int64_t)(x))
#define U_OF_I(x) ((uint64_t)(x))
DEF_STORE(store_f32, float, f2i, f2u)
DEF_STORE(store_f64, double, f2i, f2u)
DEF_STORE(store_i64, int64_t, I_OF_I, U_OF_I)
DEF_STORE(store_u64, uint64_t, I_OF_I, U_OF_I)

void kb_ew_store(kiln_dtype dt, void *dst, int64_t n, kb_ctype ct, const void *src) {
    switch (ct) {
    case KB_F32: store_f32(dt, dst, n, src); break;
    case KB_F64: store_f64(dt, dst, n, src); break;
    case KB_I64: store_i64(dt, dst, n, src); break;
    case KB_U64: store_u64(dt, dst, n, src); break;
    default: break;
    }
}

/* ---- broadcast iterator ---- */

void kb_bcast_init(kb_bcast *b, int n_in, const kb_tensor *const *in, const kb_tensor *out) {
    kb_bcast_init_rows(b, n_in, in, out, NULL);
}

void kb_bcast_init_rows(kb_bcast *b, int n_in, const kb_tensor *const *in, const kb_tensor *out,
                        const int64_t *rows) {
    memset(b, 0, sizeof *b);
    b->n_in = n_in;
    int r = out->rank;
    int64_t full[KB_EW_MAX_IN][KILN_MAX_DIMS];
    for (int k = 0; k < n_in; k++) {
        int64_t s = 1;
        for (int d = r - 1; d >= 0; d--) {
            int id = d - (r - in[k]->rank);
            int64_t dim = id >= 0 ? in[k]->dims[id] : 1;
            full[k][d] = (dim == 1 && out->dims[d] != 1) ? 0 : s;
            /* a column range of wider rows: the row stride is the row's */
            s *= id == in[k]->rank - 1 && rows && rows[k] > 0 ? rows[k] : dim;
        }
    }
    int n = 0;
    b->total = 1;
    for (int d = 0; d < r; d++) {
        b->total *= out->dims[d];
        if (out->dims[d] == 1)
            continue;
        bool merge = n > 0;
        for (int k = 0; merge && k < n_in; k++)
            if (b->stride[k][n - 1] != full[k][d] * out->dims[d])
                merge = false;
        if (merge) {
            b->dims[n - 1] *= out->dims[d];
            for (int k = 0; k < n_in; k++)
                b->stride[k][n - 1] = full[k][d];
        } else {
            b->dims[n] = out->dims[d];
            for (int k = 0; k < n_in; k++)
                b->stride[k][n] = full[k][d];
            n++;
        }
    }
    if (n == 0) { /* a single element */
        b->dims[0] = 1;
        for (int k = 0; k < n_in; k++)
            b->stride[k][0] = 0;
        n = 1;
    }
    b->rank = n;
    b->inner = b->dims[n - 1];
    b->rows = b->inner ? b->total / b->inner : 0;
}

void kb_bcast_row(const kb_bcast *b, int64_t row, int64_t *off) {
    for (int k = 0; k < b->n_in; k++)
        off[k] = 0;
    for (int d = b->rank - 2; d >= 0 && row; d--) {
        int64_t i = row % b->dims[d];
        row /= b->dims[d];
        for (int k = 0; k < b->n_in; k++)
            off[k] += i * b->stride[k][d];
    }
}

void kb_ew_gather(const void *base, size_t esize, int64_t stride, int64_t n, void *dst) {
    if (stride == 1) {
        memcpy(dst, base, (size_t)n * esize);
        return;
    }
    switch (esize) {
    case 1: { const uint8_t *s = base; uint8_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = s[i * stride]; } break;
    case 2: { const uint16_t *s = base; uint16_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = s[i * stride]; } break;
    case 4: { const uint32_t *s = base; uint32_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = s[i * stride]; } break;
    case 8: { const uint64_t *s = base; uint64_t *d = dst; for (int64_t i = 0; i < n; i++) d[i] = s[i * stride]; } break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy((uint8_t *)dst + (size_t)i * esize, (const uint8_t *)base + i * stride * (int64_t)esize, esize);
    }
}

void kb_ew_scatter(void *base, size_t esize, int64_t stride, int64_t n, const void *src) {
    if (stride == 1) {
        memcpy(base, src, (size_t)n * esize);
        return;
    }
    switch (esize) {
    case 1: { uint8_t *d = base; const uint8_t *s = src; for (int64_t i = 0; i < n; i++) d[i * stride] = s[i]; } break;
    case 2: { uint16_t *d = base; const uint16_t *s = src; for (int64_t i = 0; i < n; i++) d[i * stride] = s[i]; } break;
    case 4: { uint32_t *d = base; const uint32_t *s = src; for (int64_t i = 0; i < n; i++) d[i * stride] = s[i]; } break;
    case 8: { uint64_t *d = base; const uint64_t *s = src; for (int64_t i = 0; i < n; i++) d[i * stride] = s[i]; } break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy((uint8_t *)base + i * stride * (int64_t)esize, (const uint8_t *)src + (size_t)i * esize, esize);
    }
}
