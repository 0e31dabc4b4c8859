/* fp8.h - the four float8 formats of ONNX (FLOAT8E4M3FN, FLOAT8E4M3FNUZ,
 * FLOAT8E5M2, FLOAT8E5M2FNUZ): float to float8 rounded to nearest even,
 * saturating or not, and back. Plain C for the host and the device, integer
 * arithmetic on the float's bits, so the CPU and CUDA kernels of
 * QuantizeLinear and DequantizeLinear agree to the bit, and the CPU's Cast
 * (core's kn_float_to_fp8e4m3 & co.) rounds the same way. */
#ifndef KILN_FP8_H
#define KILN_FP8_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KN_F8_FN static __host__ __device__ __forceinline__
#else
#define KN_F8_FN static inline
#endif

/* ONNX TensorProto codes of the formats (kiln_dtype's values). */
enum { KN_F8_E4M3FN = 17, KN_F8_E4M3FNUZ = 18, KN_F8_E5M2 = 19, KN_F8_E5M2FNUZ = 20 };

KN_F8_FN int kn_f8_is(int dtype) { return dtype >= KN_F8_E4M3FN && dtype <= KN_F8_E5M2FNUZ; }

KN_F8_FN uint32_t kn_f8_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

KN_F8_FN float kn_f8_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* A format's mantissa bits, exponent bias and largest finite code (without
 * the sign). The "fnuz" formats have no infinity and no negative zero, and
 * 0x80 is their only NaN; E4M3FN has no infinity (0x7f, 0xff are NaN);
 * E5M2 is IEEE-like (0x7c infinity, 0x7d-0x7f NaN). */
KN_F8_FN int kn_f8_mant_bits(int dtype) { return dtype <= KN_F8_E4M3FNUZ ? 3 : 2; }
KN_F8_FN int kn_f8_bias(int dtype) {
    return dtype == KN_F8_E4M3FN ? 7 : dtype == KN_F8_E4M3FNUZ ? 8 : dtype == KN_F8_E5M2 ? 15 : 16;
}
KN_F8_FN uint32_t kn_f8_max_code(int dtype) {
    return dtype == KN_F8_E4M3FN ? 0x7eu : dtype == KN_F8_E5M2 ? 0x7bu : 0x7fu;
}
KN_F8_FN int kn_f8_uz(int dtype) { return dtype == KN_F8_E4M3FNUZ || dtype == KN_F8_E5M2FNUZ; }

/* The code of a NaN input: positive whatever the input's sign, since a NaN's
 * sign after arithmetic is not the same on the CPU and the GPU. */
KN_F8_FN uint8_t kn_f8_nan(int dtype) { return kn_f8_uz(dtype) ? 0x80u : 0x7fu; }

/* f in the float8 format `dtype`, rounded to nearest even as if the exponent
 * had no upper bound. A result past the largest finite value (infinities
 * included) is that value with `saturate`; without it, infinity in E5M2 and
 * NaN in the others (ONNX's Cast and QuantizeLinear table). A negative value
 * that rounds to zero is -0, except in the fnuz formats, which have none. */
KN_F8_FN uint8_t kn_f8_from_float(float f, int dtype, int saturate) {
    const int m = kn_f8_mant_bits(dtype), uz = kn_f8_uz(dtype);
    const uint32_t u = kn_f8_bits(f), a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
    const uint32_t max = kn_f8_max_code(dtype);
    if (a > 0x7f800000u)
        return kn_f8_nan(dtype);
    const uint32_t over = saturate ? sign | max : uz ? 0x80u : sign | (dtype == KN_F8_E5M2 ? 0x7cu : 0x7fu);
    if (a == 0x7f800000u)
        return (uint8_t)over;
    /* the significand with its implicit bit, and the float8 exponent field
       the value would have as a normal number */
    const int fexp = (int)(a >> 23);
    const uint32_t sig = (a & 0x7fffffu) | (fexp ? 0x800000u : 0u);
    const int e = (fexp ? fexp : 1) - 127 + kn_f8_bias(dtype);
    /* keep m fraction bits of a normal result, fewer of a subnormal one;
       past 25 bits shifted out, every significand rounds to 0 */
    int shift = 23 - m + (e < 1 ? 1 - e : 0);
    shift = shift > 25 ? 25 : shift;
    const uint32_t half = 1u << (shift - 1), rest = sig & ((1u << shift) - 1u);
    uint32_t q = sig >> shift;
    q += (rest > half || (rest == half && (q & 1u))) ? 1u : 0u;
    /* a normal result: q carries the implicit bit, so adding it to the
       exponent field minus one gives the code; a carry out of the mantissa
       moves into the exponent */
    const uint32_t mag = e < 1 ? q : ((uint32_t)(e - 1) << m) + q;
    if (mag > max)
        return (uint8_t)over;
    if (mag == 0 && uz)
        return 0;
    return (uint8_t)(sign | mag);
}

/* The float value of code v of `dtype` (exact: every float8 value is a
 * float). */
KN_F8_FN float kn_f8_to_float(uint8_t v, int dtype) {
    const int m = kn_f8_mant_bits(dtype);
    const uint32_t sign = (uint32_t)(v & 0x80u) << 24, mag = v & 0x7fu;
    if (kn_f8_uz(dtype)) {
        if (v == 0x80u) /* the one NaN, which has no sign */
            return kn_f8_float(0x7fc00000u);
    } else if (dtype == KN_F8_E4M3FN ? mag == 0x7fu : mag > 0x7cu) {
        return kn_f8_float(sign | 0x7fc00000u);
    }
    if (dtype == KN_F8_E5M2 && mag == 0x7cu)
        return kn_f8_float(sign | 0x7f800000u);
    const uint32_t ef = mag >> m, man = mag & ((1u << m) - 1u);
    if (ef == 0) { /* zero or subnormal: man units of 2^(1 - bias - m), a power of two apart */
        const int k = 1 - kn_f8_bias(dtype) - m; /* -9 .. -17: a normal float */
        const float unit = kn_f8_float((uint32_t)(127 + k) << 23);
        return kn_f8_float(sign | kn_f8_bits((float)man * unit));
    }
    return kn_f8_float(sign | ((ef + 127u - (uint32_t)kn_f8_bias(dtype)) << 23) | (man << (23 - m)));
}

#endif
