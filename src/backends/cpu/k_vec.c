/* k_vec.c - vectorized float loops (k_vec.h). The AVX2 functions carry a
 * target attribute, so the library is still built for baseline x86-64 and
 * picks them at run time.
 *
 * exp(x): x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 in
 * two parts, so r is exact to float), e^r by its Taylor series to r^7
 * (truncation < 6e-9 relative), times 2^n through the exponent bits. x
 * below -87.3 (the result under float's normal range) gives 0.
 *
 * erfc(z), z >= 0: the Chebyshev fit t exp(-z^2 + P(t)), t = 1 / (1 + z/2),
 * P of degree 9 (W. H. Press et al., Numerical Recipes, section 6.2;
 * fractional error < 1.2e-7 for every z >= 0). GELU(x) = x/2 erfc(-x/sqrt2)
 * written as x/2 (2 - erfc(z)) for x >= 0 and x/2 erfc(z) below, z =
 * |x|/sqrt 2, so the negative tail keeps its relative accuracy. */
#include "backends/cpu/k_vec.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define KV_X86 1
#include <immintrin.h>
#endif

static bool force_scalar;

void kv_force_scalar(bool on) { force_scalar = on; }

bool kv_have_avx2(void) {
#ifdef KV_X86
    static int have = -1; /* a benign race: every thread writes the same value */
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return have && !force_scalar;
#else
    return false;
#endif
}

#define KV_EXP_LO (-87.3f) /* below it the result is not a normal float */
#define KV_EXP_HI 88.7f

/* ------------------------------------------------------------ scalar */

static float s_exp(float x) { return x < KV_EXP_LO ? 0.f : expf(x); }

static float s_gelu(float x, bool tanh_form) {
    if (tanh_form)
        return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
}

/* ------------------------------------------------------------ AVX2 */
#ifdef KV_X86
#define KV_AVX2 __attribute__((target("avx2,fma")))

KV_AVX2 static inline __m256 v_exp(__m256 x) {
    const __m256 lo = _mm256_set1_ps(KV_EXP_LO);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ); /* also -inf; not NaN */
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(KV_EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.f / 5040.f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

/* erfc(z) for z >= 0 (the header's fit). */
KV_AVX2 static inline __m256 v_erfc_pos(__m256 z) {
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.f),
                             _mm256_fmadd_ps(z, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.f)));
    static const float c[10] = {-1.26551223f, 1.00002368f, 0.37409196f, 0.09678418f,
                                -0.18628806f, 0.27886807f, -1.13520398f, 1.48851587f,
                                -0.82215223f, 0.17087277f};
    __m256 p = _mm256_set1_ps(c[9]);
    for (int i = 8; i >= 0; i--)
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c[i]));
    __m256 arg = _mm256_fnmadd_ps(z, z, p); /* -z^2 + P(t) */
    return _mm256_mul_ps(t, v_exp(arg));
}

KV_AVX2 static inline __m256 v_gelu_erf(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 z = _mm256_mul_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(0.70710678118654752f));
    __m256 ec = v_erfc_pos(z);
    __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    __m256 f = _mm256_blendv_ps(ec, _mm256_sub_ps(_mm256_set1_ps(2.f), ec), pos);
    return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)), f);
}

/* tanh form: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)). */
KV_AVX2 static inline __m256 v_gelu_tanh(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u = _mm256_mul_ps(_mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x),
                             _mm256_set1_ps(0.7978845608028654f));
    /* exp(-2u) overflows to +inf for u < -44: then x / inf = -0, the limit */
    __m256 a = _mm256_mul_ps(u, _mm256_set1_ps(-2.f));
    __m256 big = _mm256_cmp_ps(a, _mm256_set1_ps(KV_EXP_HI), _CMP_GT_OQ);
    __m256 d = _mm256_add_ps(_mm256_set1_ps(1.f), v_exp(a));
    __m256 y = _mm256_div_ps(x, d);
    return _mm256_andnot_ps(big, y);
}

/* The mask of the first n (< 8) lanes. */
KV_AVX2 static inline __m256i v_tail(size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

KV_AVX2 static float a_exp_shift_sum(float *row, size_t n, float mx) {
    __m256 m = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 y = v_exp(_mm256_sub_ps(_mm256_loadu_ps(row + j), m));
        _mm256_storeu_ps(row + j, y);
        acc = _mm256_add_ps(acc, y);
    }
    if (j < n) {
        __m256i k = v_tail(n - j);
        __m256 y = v_exp(_mm256_sub_ps(_mm256_maskload_ps(row + j, k), m));
        y = _mm256_and_ps(y, _mm256_castsi256_ps(k));
        _mm256_maskstore_ps(row + j, k, y);
        acc = _mm256_add_ps(acc, y);
    }
    float l[8];
    _mm256_storeu_ps(l, acc);
    return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

KV_AVX2 static void a_scale(float *row, size_t n, float s) {
    __m256 v = _mm256_set1_ps(s);
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), v));
    for (; j < n; j++)
        row[j] *= s;
}

KV_AVX2 static float a_max(const float *row, size_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        m = _mm256_max_ps(m, _mm256_loadu_ps(row + j));
    float l[8], r = -INFINITY;
    _mm256_storeu_ps(l, m);
    for (int i = 0; i < 8; i++)
        r = l[i] > r ? l[i] : r;
    for (; j < n; j++)
        r = row[j] > r ? row[j] : r;
    return r;
}

KV_AVX2 static void a_gelu(float *x, size_t n, bool tanh_form) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        _mm256_storeu_ps(x + j, tanh_form ? v_gelu_tanh(v) : v_gelu_erf(v));
    }
    if (j < n) {
        __m256i k = v_tail(n - j);
        __m256 v = _mm256_maskload_ps(x + j, k);
        _mm256_maskstore_ps(x + j, k, tanh_form ? v_gelu_tanh(v) : v_gelu_erf(v));
    }
}
#endif /* KV_X86 */

/* ------------------------------------------------------------ entry points */

float kv_exp_shift_sum(float *row, size_t n, float mx) {
#ifdef KV_X86
    if (kv_have_avx2())
        return a_exp_shift_sum(row, n, mx);
#endif
    float sum = 0.f;
    for (size_t j = 0; j < n; j++) {
        row[j] = s_exp(row[j] - mx);
        sum += row[j];
    }
    return sum;
}

void kv_scale(float *row, size_t n, float s) {
#ifdef KV_X86
    if (kv_have_avx2()) {
        a_scale(row, n, s);
        return;
    }
#endif
    for (size_t j = 0; j < n; j++)
        row[j] *= s;
}

float kv_max(const float *row, size_t n) {
#ifdef KV_X86
    if (kv_have_avx2())
        return a_max(row, n);
#endif
    float r = -INFINITY;
    for (size_t j = 0; j < n; j++)
        r = row[j] > r ? row[j] : r;
    return r;
}

void kv_gelu(float *x, size_t n, bool tanh_form) {
#ifdef KV_X86
    if (kv_have_avx2()) {
        a_gelu(x, n, tanh_form);
        return;
    }
#endif
    for (size_t j = 0; j < n; j++)
        x[j] = s_gelu(x[j], tanh_form);
}
