/* dtype.c - element sizes and names, and conversions between float and the
 * 16- and 8-bit floating formats (round to nearest even). */
#include <math.h>
#include <string.h>

#include "core.h"
#include "fp8.h"

KILN_API size_t kiln_dtype_size(kiln_dtype t) {
    if (kn_dtype_is_handle((int)t))
        return sizeof(void *); /* a sequence or optional handle (host only) */
    switch (t) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32: return 4;
    case KILN_DTYPE_UINT8: case KILN_DTYPE_INT8: case KILN_DTYPE_BOOL:
    case KILN_DTYPE_FLOAT8E4M3FN: case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2: case KILN_DTYPE_FLOAT8E5M2FNUZ: return 1;
    case KILN_DTYPE_UINT16: case KILN_DTYPE_INT16: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: return 2;
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64: case KILN_DTYPE_DOUBLE:
    case KILN_DTYPE_COMPLEX64: return 8;
    case KILN_DTYPE_COMPLEX128: return 16;
    /* a string element is a pointer to NUL-terminated UTF-8 (host only) */
    case KILN_DTYPE_STRING: return sizeof(const char *);
    case KILN_DTYPE_UNDEFINED: return 0;
    }
    return 0;
}

KILN_API const char *kiln_dtype_name(kiln_dtype t) {
    if (kn_dtype_is_handle((int)t))
        return ((int)t & 0x300) == KN_DTYPE_SEQUENCE ? "sequence" : "optional";
    switch (t) {
    case KILN_DTYPE_UNDEFINED: return "undefined";
    case KILN_DTYPE_FLOAT: return "float";
    case KILN_DTYPE_UINT8: return "uint8";
    case KILN_DTYPE_INT8: return "int8";
    case KILN_DTYPE_UINT16: return "uint16";
    case KILN_DTYPE_INT16: return "int16";
    case KILN_DTYPE_INT32: return "int32";
    case KILN_DTYPE_INT64: return "int64";
    case KILN_DTYPE_STRING: return "string";
    case KILN_DTYPE_BOOL: return "bool";
    case KILN_DTYPE_FLOAT16: return "float16";
    case KILN_DTYPE_DOUBLE: return "double";
    case KILN_DTYPE_UINT32: return "uint32";
    case KILN_DTYPE_UINT64: return "uint64";
    case KILN_DTYPE_COMPLEX64: return "complex64";
    case KILN_DTYPE_COMPLEX128: return "complex128";
    case KILN_DTYPE_BFLOAT16: return "bfloat16";
    case KILN_DTYPE_FLOAT8E4M3FN: return "float8e4m3fn";
    case KILN_DTYPE_FLOAT8E4M3FNUZ: return "float8e4m3fnuz";
    case KILN_DTYPE_FLOAT8E5M2: return "float8e5m2";
    case KILN_DTYPE_FLOAT8E5M2FNUZ: return "float8e5m2fnuz";
    }
    return "?";
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float kn_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)
        return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * (1.0f / 16777216.0f); /* man * 2^-24 */
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t kn_float_to_half(float f) {
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* subnormal half or zero */
        float v = u2f(a) * 16777216.0f; /* scale by 2^24, round to nearest even */
        return (uint16_t)(sign | (uint16_t)nearbyintf(v));
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xfffu + mant_odd;
    return (uint16_t)(sign | (uint16_t)((a - 0x38000000u) >> 13));
}

float kn_bf16_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t kn_float_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The float8 formats: core/fp8.h, the rounding the kernels use. */
float kn_fp8e4m3_to_float(uint8_t v) { return kn_f8_to_float(v, KN_F8_E4M3FN); }

float kn_fp8e5m2_to_float(uint8_t v) { return kn_f8_to_float(v, KN_F8_E5M2); }

/* ONNX saturates by default: values past the largest finite one (448,
 * 57344), infinities included, clamp to it */
uint8_t kn_float_to_fp8e4m3(float f) { return kn_f8_from_float(f, KN_F8_E4M3FN, 1); }

uint8_t kn_float_to_fp8e5m2(float f) { return kn_f8_from_float(f, KN_F8_E5M2, 1); }

KILN_API float kiln_half_to_float(uint16_t bits) { return kn_half_to_float(bits); }
KILN_API uint16_t kiln_float_to_half(float value) { return kn_float_to_half(value); }
KILN_API float kiln_bfloat16_to_float(uint16_t bits) { return kn_bf16_to_float(bits); }
KILN_API uint16_t kiln_float_to_bfloat16(float value) { return kn_float_to_bf16(value); }
