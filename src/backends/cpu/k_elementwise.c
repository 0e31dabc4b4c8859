/* k_elementwise.c - CPU reference kernels of the elementwise family: unary
 * math and activations, broadcasting binary ops, comparisons and logic,
 * variadic Max/Min/Sum/Mean, Where, Clip and Cast; and the family's kernel
 * table (reductions, softmax and the fused chain live in helper files). */
#include <float.h>
#include <string.h>
#include <tgmath.h>
#undef I /* complex.h's imaginary unit; not used here */

#include "core/fp8.h"
#include "k_elementwise.h"

/* ---------------- per-element loops ----------------
 * Each op gets one loop per compute type from one expression. In unary
 * expressions the element is `x` and the parameters `p`; in binary ones the
 * operands are `a` and `b`. `ct_t` is the compute type, so constants can be
 * written in it and <tgmath.h> picks the float or double libm function. */

/* Elementwise loops carry no dependence between iterations (in-place calls
 * read and write the same index only), so ask for vectors even where the
 * compiler's -O2 cost model would not try. */
#define KB_SIMD _Pragma("omp simd")

#define UN_LOOP(NAME, T, TO, EXPR)                                                \
    static void NAME(const void *vx, void *vy, int64_t n, const kb_uparam *p) {   \
        typedef T ct_t;                                                           \
        const ct_t *px = vx;                                                      \
        TO *py = vy;                                                              \
        (void)p;                                                                  \
        KB_SIMD                                                                   \
        for (int64_t i = 0; i < n; i++) {                                         \
            ct_t x = px[i];                                                       \
            py[i] = (TO)(EXPR);                                                   \
        }                                                                         \
    }
#define UN_F(OP, EXPR) UN_LOOP(OP##_f32, float, float, EXPR) UN_LOOP(OP##_f64, double, double, EXPR)
#define UN_FB(OP, EXPR) UN_LOOP(OP##_f32, float, uint8_t, EXPR) UN_LOOP(OP##_f64, double, uint8_t, EXPR)
#define C(v) ((ct_t)(v))

UN_F(abs, fabs(x))
UN_LOOP(abs_i64, int64_t, int64_t, x < 0 ? (int64_t)(0u - (uint64_t)x) : x)
UN_LOOP(abs_u64, uint64_t, uint64_t, x)
UN_F(neg, -x)
UN_LOOP(neg_i64, int64_t, int64_t, (int64_t)(0u - (uint64_t)x))
UN_LOOP(neg_u64, uint64_t, uint64_t, 0u - x)
UN_F(sign, x > 0 ? C(1) : (x < 0 ? C(-1) : x))
UN_LOOP(sign_i64, int64_t, int64_t, x > 0 ? 1 : (x < 0 ? -1 : 0))
UN_LOOP(sign_u64, uint64_t, uint64_t, x > 0)
UN_F(reciprocal, C(1) / x)
UN_F(floor, floor(x))
UN_F(ceil, ceil(x))
UN_F(round, nearbyint(x)) /* half to even in the default rounding mode */
UN_F(sqrt, sqrt(x))
UN_F(exp, exp(x))
UN_F(log, log(x))
UN_F(sin, sin(x))
UN_F(cos, cos(x))
UN_F(tan, tan(x))
UN_F(asin, asin(x))
UN_F(acos, acos(x))
UN_F(atan, atan(x))
UN_F(sinh, sinh(x))
UN_F(cosh, cosh(x))
UN_F(asinh, asinh(x))
UN_F(acosh, acosh(x))
UN_F(atanh, atanh(x))
UN_F(erf, erf(x))
UN_F(tanh, tanh(x))
UN_F(relu, x > 0 ? x : C(0))
UN_LOOP(relu_i64, int64_t, int64_t, x > 0 ? x : 0)
UN_LOOP(relu_u64, uint64_t, uint64_t, x)
UN_F(leaky_relu, x >= 0 ? x : C(p->alpha) * x)
UN_LOOP(leaky_relu_i64, int64_t, int64_t, x >= 0 ? x : (int64_t)(p->alpha * (double)x))
UN_F(elu, x >= 0 ? x : C(p->alpha) * expm1(x))
UN_F(selu, x > 0 ? C(p->gamma) * x : C(p->gamma) * (C(p->alpha) * exp(x) - C(p->alpha)))
UN_F(celu, fmax(C(0), x) + fmin(C(0), C(p->alpha) * expm1(x / C(p->alpha))))
UN_F(thresholded_relu, x > C(p->alpha) ? x : C(0))
UN_F(sigmoid, x >= 0 ? C(1) / (C(1) + exp(-x)) : exp(x) / (C(1) + exp(x)))
UN_F(silu, x >= 0 ? x / (C(1) + exp(-x)) : x * exp(x) / (C(1) + exp(x)))
UN_F(swish, C(p->alpha) * x >= 0 ? x / (C(1) + exp(-C(p->alpha) * x))
                                 : x * exp(C(p->alpha) * x) / (C(1) + exp(C(p->alpha) * x)))
UN_F(hard_sigmoid, fmax(C(0), fmin(C(1), C(p->alpha) * x + C(p->beta))))
UN_F(hard_swish, x * fmax(C(0), fmin(C(1), x * C(1.0 / 6.0) + C(0.5))))
UN_F(softplus, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)))
UN_F(softsign, x / (C(1) + fabs(x)))
UN_F(gelu, p->flag ? C(0.5) * x * (C(1) + tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x)))
                   : C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752))))
UN_F(gelu_tanh, C(0.5) * x * (C(1) + tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x))))
UN_F(mish, x * tanh(x > 0 ? x + log1p(exp(-x)) : log1p(exp(x))))
UN_F(shrink, x < -C(p->alpha) ? x + C(p->beta) : (x > C(p->alpha) ? x - C(p->beta) : C(0)))
UN_LOOP(shrink_i64, int64_t, int64_t,
        (double)x < -p->alpha ? x + (int64_t)p->beta : ((double)x > p->alpha ? x - (int64_t)p->beta : 0))
UN_LOOP(shrink_u64, uint64_t, uint64_t, (double)x > p->alpha ? x - (uint64_t)(int64_t)p->beta : 0)
/* the lower bound first, then the upper, so min > max gives max as ONNX says */
UN_F(clip, (x < C(p->alpha) ? C(p->alpha) : x) > C(p->beta) ? C(p->beta) : (x < C(p->alpha) ? C(p->alpha) : x))
UN_LOOP(clip_i64, int64_t, int64_t, (x < p->ilo ? p->ilo : x) > p->ihi ? p->ihi : (x < p->ilo ? p->ilo : x))
UN_LOOP(clip_u64, uint64_t, uint64_t, (x < p->ulo ? p->ulo : x) > p->uhi ? p->uhi : (x < p->ulo ? p->ulo : x))
UN_FB(isnan, x != x)
UN_FB(isinf, isinf(x) && (x < 0 ? (p->flag & 1) : (p->flag & 2)))
UN_LOOP(not_i64, int64_t, uint8_t, x == 0)
UN_LOOP(bitwise_not_i64, int64_t, int64_t, ~x)
UN_LOOP(bitwise_not_u64, uint64_t, uint64_t, ~x)

#define FF(OP) {OP##_f32, OP##_f64, NULL, NULL}
#define FI(OP) {OP##_f32, OP##_f64, OP##_i64, OP##_u64}

static const kb_unary_op unary_ops[] = {
    {"Abs", FI(abs), false}, {"Neg", FI(neg), false}, {"Sign", FI(sign), false},
    {"Reciprocal", FF(reciprocal), false}, {"Floor", FF(floor), false},
    {"Ceil", FF(ceil), false}, {"Round", FF(round), false}, {"Sqrt", FF(sqrt), false},
    {"Exp", FF(exp), false}, {"Log", FF(log), false}, {"Sin", FF(sin), false},
    {"Cos", FF(cos), false}, {"Tan", FF(tan), false}, {"Asin", FF(asin), false},
    {"Acos", FF(acos), false}, {"Atan", FF(atan), false}, {"Sinh", FF(sinh), false},
    {"Cosh", FF(cosh), false}, {"Asinh", FF(asinh), false}, {"Acosh", FF(acosh), false},
    {"Atanh", FF(atanh), false}, {"Erf", FF(erf), false}, {"Tanh", FF(tanh), false},
    {"Relu", FI(relu), false},
    {"LeakyRelu", {leaky_relu_f32, leaky_relu_f64, leaky_relu_i64, NULL}, false},
    {"Elu", FF(elu), false}, {"Selu", FF(selu), false}, {"Celu", FF(celu), false},
    {"ThresholdedRelu", FF(thresholded_relu), false}, {"Sigmoid", FF(sigmoid), false},
    {"HardSigmoid", FF(hard_sigmoid), false}, {"HardSwish", FF(hard_swish), false},
    {"Softplus", FF(softplus), false}, {"Softsign", FF(softsign), false},
    {"Gelu", FF(gelu), false}, {"Mish", FF(mish), false}, {"Swish", FF(swish), false},
    {"Clip", FI(clip), false}, {"Shrink", FI(shrink), false},
    {"IsNaN", FF(isnan), true}, {"IsInf", FF(isinf), true},
    {"Not", {NULL, NULL, not_i64, NULL}, true},
    {"BitwiseNot", {NULL, NULL, bitwise_not_i64, bitwise_not_u64}, false},
    /* chain-only names (kiln::ElementwiseChain, activation epilogues) */
    {"Silu", FF(silu), false}, {"GeluTanh", FF(gelu_tanh), false},
};

#define BIN_LOOP(NAME, T, TO, EXPR)                                                         \
    static void NAME(const void *va, int64_t sa, const void *vb, int64_t sb, void *vy,      \
                     int64_t n) {                                                           \
        typedef T ct_t;                                                                     \
        const ct_t *pa = va, *pb = vb;                                                      \
        TO *py = vy;                                                                        \
        if (sa && sb) {                                                                     \
            KB_SIMD                                                                         \
            for (int64_t i = 0; i < n; i++) {                                               \
                ct_t a = pa[i], b = pb[i];                                                  \
                py[i] = (TO)(EXPR);                                                         \
            }                                                                               \
        } else if (sa) {                                                                    \
            const ct_t b = pb[0];                                                           \
            KB_SIMD                                                                         \
            for (int64_t i = 0; i < n; i++) {                                               \
                ct_t a = pa[i];                                                             \
                py[i] = (TO)(EXPR);                                                         \
            }                                                                               \
        } else if (sb) {                                                                    \
            const ct_t a = pa[0];                                                           \
            KB_SIMD                                                                         \
            for (int64_t i = 0; i < n; i++) {                                               \
                ct_t b = pb[i];                                                             \
                py[i] = (TO)(EXPR);                                                         \
            }                                                                               \
        } else {                                                                            \
            const ct_t a = pa[0], b = pb[0];                                                \
            const TO v = (TO)(EXPR);                                                        \
            for (int64_t i = 0; i < n; i++)                                                 \
                py[i] = v;                                                                  \
        }                                                                                   \
    }
#define BIN_F(OP, EXPR) BIN_LOOP(OP##_f32, float, float, EXPR) BIN_LOOP(OP##_f64, double, double, EXPR)
#define BIN_ALL(OP, T_OUT, EXPR)                                                            \
    BIN_LOOP(OP##_f32, float, T_OUT, EXPR) BIN_LOOP(OP##_f64, double, T_OUT, EXPR)          \
    BIN_LOOP(OP##_i64, int64_t, T_OUT, EXPR) BIN_LOOP(OP##_u64, uint64_t, T_OUT, EXPR)

static inline int64_t ipow64(int64_t b, int64_t e) {
    if (e < 0)
        return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1)
            r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}
static inline uint64_t upow64(uint64_t b, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1)
            r *= b;
        b *= b;
        e >>= 1;
    }
    return r;
}
/* Python-style remainder: the sign follows the divisor. */
static inline float pymodf(float a, float b) {
    float r = fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline double pymod(double a, double b) {
    double r = fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t pymod_i(int64_t a, int64_t b) {
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
#define WRAP(op, a, b) ((int64_t)((uint64_t)(a) op (uint64_t)(b)))

BIN_F(add, a + b)
BIN_LOOP(add_i64, int64_t, int64_t, WRAP(+, a, b))
BIN_LOOP(add_u64, uint64_t, uint64_t, a + b)
BIN_F(sub, a - b)
BIN_LOOP(sub_i64, int64_t, int64_t, WRAP(-, a, b))
BIN_LOOP(sub_u64, uint64_t, uint64_t, a - b)
BIN_F(mul, a * b)
BIN_LOOP(mul_i64, int64_t, int64_t, WRAP(*, a, b))
BIN_LOOP(mul_u64, uint64_t, uint64_t, a * b)
BIN_F(div, a / b)
BIN_LOOP(div_i64, int64_t, int64_t, b == 0 ? 0 : (b == -1 ? WRAP(-, 0, a) : a / b))
BIN_LOOP(div_u64, uint64_t, uint64_t, b == 0 ? 0 : a / b)
BIN_F(pow, pow(a, b))
BIN_LOOP(pow_i64, int64_t, int64_t, ipow64(a, b))
BIN_LOOP(pow_u64, uint64_t, uint64_t, upow64(a, b))
BIN_LOOP(mod_f32, float, float, pymodf(a, b))
BIN_LOOP(mod_f64, double, double, pymod(a, b))
BIN_LOOP(mod_i64, int64_t, int64_t, pymod_i(a, b))
BIN_LOOP(mod_u64, uint64_t, uint64_t, b == 0 ? 0 : a % b)
BIN_F(modc, fmod(a, b))
BIN_LOOP(modc_i64, int64_t, int64_t, (b == 0 || b == -1) ? 0 : a % b)
BIN_LOOP(modc_u64, uint64_t, uint64_t, b == 0 ? 0 : a % b)
/* Shifts by a negative count or past the width give 0 (or -1 for a right
 * shift of a negative value); left shifts wrap within the storage width when
 * the result is stored. */
BIN_LOOP(shl_u64, uint64_t, uint64_t, b >= 64 ? 0 : a << b)
BIN_LOOP(shr_u64, uint64_t, uint64_t, b >= 64 ? 0 : a >> b)
BIN_LOOP(shl_i64, int64_t, int64_t, (b < 0 || b >= 64) ? 0 : (int64_t)((uint64_t)a << b))
BIN_LOOP(shr_i64, int64_t, int64_t, (b < 0 || b >= 64) ? (a < 0 ? -1 : 0) : a >> b)
BIN_LOOP(band_i64, int64_t, int64_t, a & b)
BIN_LOOP(band_u64, uint64_t, uint64_t, a & b)
BIN_LOOP(bor_i64, int64_t, int64_t, a | b)
BIN_LOOP(bor_u64, uint64_t, uint64_t, a | b)
BIN_LOOP(bxor_i64, int64_t, int64_t, a ^ b)
BIN_LOOP(bxor_u64, uint64_t, uint64_t, a ^ b)
BIN_ALL(eq, uint8_t, a == b)
BIN_ALL(gt, uint8_t, a > b)
BIN_ALL(ge, uint8_t, a >= b)
BIN_ALL(lt, uint8_t, a < b)
BIN_ALL(le, uint8_t, a <= b)
BIN_LOOP(and_i64, int64_t, uint8_t, (a != 0) & (b != 0))
BIN_LOOP(or_i64, int64_t, uint8_t, (a != 0) | (b != 0))
BIN_LOOP(xor_i64, int64_t, uint8_t, (a != 0) ^ (b != 0))
BIN_F(prelu, a < 0 ? b * a : a)
BIN_LOOP(prelu_i64, int64_t, int64_t, a < 0 ? WRAP(*, b, a) : a)
BIN_LOOP(prelu_u64, uint64_t, uint64_t, b ? a : a)
/* NaN in either operand propagates */
BIN_F(max, (a > b || a != a) ? a : b)
BIN_LOOP(max_i64, int64_t, int64_t, a > b ? a : b)
BIN_LOOP(max_u64, uint64_t, uint64_t, a > b ? a : b)
BIN_F(min, (a < b || a != a) ? a : b)
BIN_LOOP(min_i64, int64_t, int64_t, a < b ? a : b)
BIN_LOOP(min_u64, uint64_t, uint64_t, a < b ? a : b)

static const kb_binary_op binary_ops[] = {
    {"Add", FI(add), false}, {"Sub", FI(sub), false}, {"Mul", FI(mul), false},
    {"Div", FI(div), false}, {"Pow", FI(pow), false}, {"Mod", FI(mod), false},
    {"ModC", FI(modc), false}, {"ShiftLeft", {NULL, NULL, shl_i64, shl_u64}, false},
    {"ShiftRight", {NULL, NULL, shr_i64, shr_u64}, false},
    {"BitwiseAnd", {NULL, NULL, band_i64, band_u64}, false},
    {"BitwiseOr", {NULL, NULL, bor_i64, bor_u64}, false},
    {"BitwiseXor", {NULL, NULL, bxor_i64, bxor_u64}, false},
    {"Equal", FI(eq), true}, {"Greater", FI(gt), true}, {"GreaterOrEqual", FI(ge), true},
    {"Less", FI(lt), true}, {"LessOrEqual", FI(le), true},
    {"And", {NULL, NULL, and_i64, NULL}, true}, {"Or", {NULL, NULL, or_i64, NULL}, true},
    {"Xor", {NULL, NULL, xor_i64, NULL}, true}, {"PRelu", FI(prelu), false},
    {"Max", FI(max), false}, {"Min", FI(min), false},
    {"Sum", FI(add), false}, {"Mean", FI(add), false},
};

const kb_unary_op *kb_ew_unary_find(const char *name) {
    for (size_t i = 0; i < KN_ARRAY_LEN(unary_ops); i++)
        if (strcmp(unary_ops[i].name, name) == 0)
            return &unary_ops[i];
    return NULL;
}

const kb_binary_op *kb_ew_binary_find(const char *name) {
    for (size_t i = 0; i < KN_ARRAY_LEN(binary_ops); i++)
        if (strcmp(binary_ops[i].name, name) == 0)
            return &binary_ops[i];
    return NULL;
}

/* ---------------- parameters ---------------- */

void kb_ew_uparam_defaults(const char *name, kb_ctype ct, kb_uparam *p) {
    memset(p, 0, sizeof *p);
    p->alpha = -INFINITY;
    p->beta = INFINITY;
    p->ilo = INT64_MIN;
    p->ihi = INT64_MAX;
    p->ulo = 0;
    p->uhi = UINT64_MAX;
    (void)ct;
    if (strcmp(name, "LeakyRelu") == 0)
        p->alpha = 0.01;
    else if (strcmp(name, "Elu") == 0 || strcmp(name, "Celu") == 0 ||
             strcmp(name, "Swish") == 0 || strcmp(name, "ThresholdedRelu") == 0)
        p->alpha = 1.0;
    else if (strcmp(name, "Selu") == 0) {
        p->alpha = 1.67326319217681884765625;
        p->gamma = 1.05070102214813232421875;
    } else if (strcmp(name, "HardSigmoid") == 0) {
        p->alpha = 0.2;
        p->beta = 0.5;
    } else if (strcmp(name, "IsInf") == 0) {
        p->flag = 3;
    } else if (strcmp(name, "Shrink") == 0) {
        p->alpha = 0.5; /* lambd */
        p->beta = 0;    /* bias */
    }
}

/* Set Clip's lower (which=0) or upper bound from a value of compute type ct. */
static void clip_bound(kb_uparam *p, int which, kb_ctype ct, const void *v) {
    switch (ct) {
    case KB_F32: if (which) p->beta = *(const float *)v; else p->alpha = *(const float *)v; break;
    case KB_F64: if (which) p->beta = *(const double *)v; else p->alpha = *(const double *)v; break;
    case KB_I64: if (which) p->ihi = *(const int64_t *)v; else p->ilo = *(const int64_t *)v; break;
    case KB_U64: if (which) p->uhi = *(const uint64_t *)v; else p->ulo = *(const uint64_t *)v; break;
    default: break;
    }
}

void kb_ew_uparam_from_node(const kn_node *node, const kb_tensor *in, int n_in, kb_ctype ct,
                            kb_uparam *p) {
    const char *op = node->op_type;
    kb_ew_uparam_defaults(op, ct, p);
    if (strcmp(op, "Selu") == 0) {
        p->alpha = kn_attr_float(node, "alpha", (float)p->alpha);
        p->gamma = kn_attr_float(node, "gamma", (float)p->gamma);
    } else if (strcmp(op, "HardSigmoid") == 0) {
        p->alpha = kn_attr_float(node, "alpha", (float)p->alpha);
        p->beta = kn_attr_float(node, "beta", (float)p->beta);
    } else if (strcmp(op, "LeakyRelu") == 0 || strcmp(op, "Elu") == 0 ||
               strcmp(op, "Celu") == 0 || strcmp(op, "ThresholdedRelu") == 0 ||
               strcmp(op, "Swish") == 0) {
        p->alpha = kn_attr_float(node, "alpha", (float)p->alpha);
    } else if (strcmp(op, "Shrink") == 0) {
        p->alpha = kn_attr_float(node, "lambd", (float)p->alpha);
        p->beta = kn_attr_float(node, "bias", (float)p->beta);
    } else if (strcmp(op, "Gelu") == 0) {
        p->flag = strcmp(kn_attr_string(node, "approximate", "none"), "tanh") == 0;
    } else if (strcmp(op, "IsInf") == 0) {
        p->flag = (kn_attr_int(node, "detect_negative", 1) ? 1 : 0) |
                  (kn_attr_int(node, "detect_positive", 1) ? 2 : 0);
    } else if (strcmp(op, "Clip") == 0) {
        if (node->opset < 11) {
            double lo = kn_attr_float(node, "min", -FLT_MAX), hi = kn_attr_float(node, "max", FLT_MAX);
            p->alpha = lo;
            p->beta = hi;
            /* Clip-6 is float only; keep the integer bounds in range anyway */
            p->ilo = lo <= -9.2e18 ? INT64_MIN : (int64_t)lo;
            p->ihi = hi >= 9.2e18 ? INT64_MAX : (int64_t)hi;
        }
        for (int k = 1; k <= 2 && in && k < n_in; k++) {
            if (!in[k].data || kn_numel(in[k].rank, in[k].dims) < 1)
                continue;
            uint64_t v;
            kb_ew_load(in[k].dtype, in[k].data, 1, ct, &v);
            clip_bound(p, k - 1, ct, &v);
        }
    }
}

/* ---------------- run helpers ---------------- */

static kiln_status bad_dtype(const kn_node *n, kiln_dtype dt) {
    return kn_node_error(n, KILN_ERR_UNSUPPORTED, "data type %s is not supported by %s",
                         kiln_dtype_name(dt), n->op_type);
}

static int64_t numel_of(const kb_tensor *t) { return kn_numel(t->rank, t->dims); }

typedef struct unary_chunks_ctx {
    const kb_uparam *p;
    const kb_tensor *x;
    kb_tensor *y;
    kb_ctype ct;
    int64_t n;
    size_t xs;
    size_t ys;
    bool xnat;
    bool ynat;
    kb_unary_fn fn;
} unary_chunks_ctx;

static void unary_chunks(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const unary_chunks_ctx *c_ = vc;
    const kb_uparam *p = c_->p;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    kb_ctype ct = c_->ct;
    int64_t n = c_->n;
    size_t xs = c_->xs;
    size_t ys = c_->ys;
    bool xnat = c_->xnat;
    bool ynat = c_->ynat;
    kb_unary_fn fn = c_->fn;
    (void)tid;
    for (int64_t c = lo_; c < hi_; c++) {
        uint64_t bx[KB_EW_CHUNK], by[KB_EW_CHUNK];
        int64_t i0 = c * KB_EW_CHUNK, m = n - i0 < KB_EW_CHUNK ? n - i0 : KB_EW_CHUNK;
        const uint8_t *src = (const uint8_t *)x->data + (size_t)i0 * xs;
        uint8_t *dst = (uint8_t *)y->data + (size_t)i0 * ys;
        const void *px = src;
        if (!xnat) {
            kb_ew_load(x->dtype, src, m, ct, bx);
            px = bx;
        }
        fn(px, ynat ? (void *)dst : (void *)by, m, p);
        if (!ynat)
            kb_ew_store(y->dtype, dst, m, ct, by);
    }
}

/* y = op(x) over n elements; x and y contiguous, y of x's dtype or bool. */
static void unary_apply(const kb_unary_op *op, kb_ctype ct, const kb_uparam *p, const kb_tensor *x,
                        kb_tensor *y, int threads) {
    int64_t n = numel_of(x);
    if (n <= 0)
        return;
    int64_t nchunks = n / KB_EW_CHUNK + (n % KB_EW_CHUNK != 0); /* no n + CHUNK overflow */
    size_t xs = kiln_dtype_size(x->dtype), ys = kiln_dtype_size(y->dtype);
    bool xnat = kb_ew_native(x->dtype, ct), ynat = op->bool_out || kb_ew_native(y->dtype, ct);
    kb_unary_fn fn = op->fn[ct];
    {
        unary_chunks_ctx c_ = {p, x, y, ct, n, xs, ys, xnat, ynat, fn};
        kn_parallel_for(n >= KB_EW_PAR_MIN ? threads : 1, nchunks, 0, unary_chunks, &c_);
    }
}

typedef struct binary_units_ctx {
    kb_binary_fn fn;
    kb_ctype ct;
    const kb_tensor *a;
    const kb_tensor *b;
    kb_tensor *y;
    kb_bcast bc;
    int64_t segs;
    size_t as;
    size_t bs;
    size_t ys;
    bool anat;
    bool bnat;
    bool ynat;
    int64_t sa;
    int64_t sb;
} binary_units_ctx;

static void binary_units(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const binary_units_ctx *c_ = vc;
    kb_binary_fn fn = c_->fn;
    kb_ctype ct = c_->ct;
    const kb_tensor *a = c_->a;
    const kb_tensor *b = c_->b;
    kb_tensor *y = c_->y;
    kb_bcast bc = c_->bc;
    int64_t segs = c_->segs;
    size_t as = c_->as;
    size_t bs = c_->bs;
    size_t ys = c_->ys;
    bool anat = c_->anat;
    bool bnat = c_->bnat;
    bool ynat = c_->ynat;
    int64_t sa = c_->sa;
    int64_t sb = c_->sb;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        uint64_t ba[KB_EW_CHUNK], bb[KB_EW_CHUNK], by[KB_EW_CHUNK];
        int64_t row = u / segs, i0 = (u % segs) * KB_EW_CHUNK;
        int64_t m = bc.inner - i0 < KB_EW_CHUNK ? bc.inner - i0 : KB_EW_CHUNK;
        int64_t off[2];
        kb_bcast_row(&bc, row, off);
        const uint8_t *srca = (const uint8_t *)a->data + (size_t)(off[0] + i0 * sa) * as;
        const uint8_t *srcb = (const uint8_t *)b->data + (size_t)(off[1] + i0 * sb) * bs;
        uint8_t *dst = (uint8_t *)y->data + (size_t)(row * bc.inner + i0) * ys;
        const void *pa = srca, *pb = srcb;
        if (!anat) {
            kb_ew_load(a->dtype, srca, sa ? m : 1, ct, ba);
            pa = ba;
        }
        if (!bnat) {
            kb_ew_load(b->dtype, srcb, sb ? m : 1, ct, bb);
            pb = bb;
        }
        fn(pa, sa, pb, sb, ynat ? (void *)dst : (void *)by, m);
        if (!ynat)
            kb_ew_store(y->dtype, dst, m, ct, by);
    }
}

/* b is one row of `inner` values repeated over every row of a (an NHWC
 * per-channel scale, SE's excite Mul): runs of whole rows go to fn at once
 * against b repeated to the run's length, with no broadcast arithmetic per
 * row of a few dozen elements. */
typedef struct rows_ctx {
    kb_binary_fn fn;
    const uint8_t *a;
    uint8_t *y;
    const void *brep;
    size_t es;
    int64_t run, total;
} rows_ctx;

static void binary_rows(void *vc, int64_t lo, int64_t hi, int tid) {
    const rows_ctx *c = vc;
    (void)tid;
    for (int64_t u = lo; u < hi; u++) {
        int64_t i0 = u * c->run, m = c->total - i0 < c->run ? c->total - i0 : c->run;
        c->fn(c->a + (size_t)i0 * c->es, 1, c->brep, 1, c->y + (size_t)i0 * c->es, m);
    }
}

static bool binary_repeated_row(kb_binary_fn fn, const kb_tensor *a, const kb_tensor *b,
                                kb_tensor *y, int threads) {
    int64_t total = numel_of(y), inner = numel_of(b);
    size_t es = kiln_dtype_size(y->dtype);
    if (a->rank != y->rank || memcmp(a->dims, y->dims, sizeof(int64_t) * (size_t)y->rank) != 0 ||
        inner < 1 || inner > KB_EW_CHUNK / 4 || es > sizeof(uint64_t) || total % inner != 0)
        return false;
    /* b's non-1 dims are y's trailing ones */
    for (int d = 1; d <= b->rank; d++) {
        int64_t bd = b->dims[b->rank - d], yd = y->rank - d >= 0 ? y->dims[y->rank - d] : 1;
        if (bd != 1 && bd != yd)
            return false;
    }
    int64_t prod = 1, d = y->rank - 1;
    for (; d >= 0 && prod < inner; d--)
        prod *= y->dims[d];
    if (prod != inner)
        return false;
    for (int k = 1; k <= b->rank && y->rank - k > d; k++)
        if (b->dims[b->rank - k] != y->dims[y->rank - k])
            return false;
    uint64_t rep[KB_EW_CHUNK];
    int64_t run = KB_EW_CHUNK / inner * inner;
    for (int64_t i = 0; i < run; i += inner)
        memcpy((uint8_t *)rep + (size_t)i * es, b->data, (size_t)inner * es);
    rows_ctx c = {fn, a->data, y->data, rep, es, run, total};
    kn_parallel_for(total >= KB_EW_PAR_MIN ? threads : 1, (total + run - 1) / run, 0, binary_rows,
                    &c);
    return true;
}

/* y = fn(a, b) with broadcasting, computing in ct; y has the output shape. y
 * may be a (same shape). */
static void binary_apply(kb_binary_fn fn, bool bool_out, kb_ctype ct, const kb_tensor *a,
                         const kb_tensor *b, kb_tensor *y, int threads) {
    kb_bcast bc;
    const kb_tensor *ins[2] = {a, b};
    kb_bcast_init(&bc, 2, ins, y);
    if (bc.total <= 0)
        return;
    int64_t segs = (bc.inner + KB_EW_CHUNK - 1) / KB_EW_CHUNK, units = bc.rows * segs;
    size_t as = kiln_dtype_size(a->dtype), bs = kiln_dtype_size(b->dtype),
           ys = kiln_dtype_size(y->dtype);
    bool anat = kb_ew_native(a->dtype, ct), bnat = kb_ew_native(b->dtype, ct),
         ynat = bool_out || kb_ew_native(y->dtype, ct);
    int64_t sa = bc.stride[0][bc.rank - 1], sb = bc.stride[1][bc.rank - 1];
    if (anat && bnat && ynat && !bool_out && a->dtype == y->dtype && b->dtype == y->dtype &&
        bc.rows > 1 && binary_repeated_row(fn, a, b, y, threads))
        return;
    {
        binary_units_ctx c_ = {fn, ct, a, b, y, bc, segs, as, bs, ys, anat, bnat, ynat, sa, sb};
        kn_parallel_for(bc.total >= KB_EW_PAR_MIN ? threads : 1, units, 0, binary_units, &c_);
    }
}

/* ---------------- unary kernels ---------------- */

static const kb_unary_op *unary_of(const kn_node *n) { return kb_ew_unary_find(n->op_type); }

static bool unary_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    const kb_unary_op *op = unary_of(node);
    int ct = n_in > 0 ? kb_ew_ctype(in[0].dtype) : -1;
    return op && ct >= 0 && op->fn[ct];
}

static kiln_status unary_run(const kb_run *r) {
    const kb_unary_op *op = unary_of(r->node);
    const kb_tensor *x = &r->in[0];
    int ct = kb_ew_ctype(x->dtype);
    if (!op)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no unary loop for this op");
    if (ct < 0 || !op->fn[ct])
        return bad_dtype(r->node, x->dtype);
    kb_uparam p;
    kb_ew_uparam_from_node(r->node, r->in, r->n_in, (kb_ctype)ct, &p);
    unary_apply(op, (kb_ctype)ct, &p, x, &r->out[0], r->threads);
    return KILN_OK;
}

/* ---------------- binary kernels ---------------- */

static const kb_binary_op *binary_of(const kn_node *n) {
    const char *name = n->op_type;
    if (strcmp(name, "Mod") == 0 && kn_attr_int(n, "fmod", 0))
        name = "ModC";
    else if (strcmp(name, "BitShift") == 0)
        name = strcmp(kn_attr_string(n, "direction", ""), "LEFT") == 0 ? "ShiftLeft" : "ShiftRight";
    return kb_ew_binary_find(name);
}

/* Compute type of a binary op on these input types; -1 when none. Pow may
 * mix types: an integer base with a float exponent computes in double. */
static int binary_ctype(const kn_node *n, kiln_dtype a, kiln_dtype b) {
    int ca = kb_ew_ctype(a), cb = kb_ew_ctype(b);
    if (ca < 0 || cb < 0)
        return -1;
    if (strcmp(n->op_type, "Pow") == 0 && (ca == KB_I64 || ca == KB_U64) &&
        (cb == KB_F32 || cb == KB_F64))
        return KB_F64;
    if (strcmp(n->op_type, "Pow") == 0 && ca == KB_F32 && cb == KB_F64)
        return KB_F64;
    return ca;
}

static bool binary_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                            int n_out) {
    const kb_binary_op *op = binary_of(node);
    if (!op || n_in < 2)
        return false;
    int ct = binary_ctype(node, in[0].dtype, in[1].dtype);
    return ct >= 0 && op->fn[ct];
}

static kiln_status binary_run(const kb_run *r) {
    const kb_binary_op *op = binary_of(r->node);
    if (!op)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "unknown variant of %s",
                             r->node->op_type);
    int ct = binary_ctype(r->node, r->in[0].dtype, r->in[1].dtype);
    if (ct < 0 || !op->fn[ct])
        return bad_dtype(r->node, ct < 0 && kb_ew_ctype(r->in[0].dtype) >= 0 ? r->in[1].dtype
                                                                               : r->in[0].dtype);
    kb_tensor b = r->in[1];
    const kn_node *n = r->node;
    if (n->opset > 0 && n->opset < 7 && kn_attr_int(n, "broadcast", 0) && kn_attr_find(n, "axis")) {
        /* legacy broadcast: B lines up with A from axis on (checked by the schema) */
        int64_t axis = kn_attr_int(n, "axis", 0);
        int rank = (int)(r->in[0].rank - (axis < 0 ? axis + r->in[0].rank : axis));
        for (int d = b.rank; d < rank && d < KILN_MAX_DIMS; d++)
            b.dims[d] = 1;
        if (rank >= b.rank && rank <= KILN_MAX_DIMS)
            b.rank = rank;
    }
    binary_apply(op->fn[ct], op->bool_out, (kb_ctype)ct, &r->in[0], &b, &r->out[0], r->threads);
    return KILN_OK;
}

/* ---------------- variadic Max / Min / Sum / Mean ---------------- */

static bool variadic_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                              const kn_tinfo *out, int n_out) {
    const kb_binary_op *op = kb_ew_binary_find(node->op_type);
    int ct = n_in > 0 ? kb_ew_ctype(in[0].dtype) : -1;
    return op && ct >= 0 && op->fn[ct];
}

static kiln_status variadic_run(const kb_run *r) {
    const kb_binary_op *op = kb_ew_binary_find(r->node->op_type);
    kb_tensor *y = &r->out[0];
    int ct = kb_ew_ctype(y->dtype);
    if (!op)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no loop for this op");
    if (ct < 0 || !op->fn[ct])
        return bad_dtype(r->node, y->dtype);
    int n = 0;
    const kb_tensor *ins[64];
    for (int k = 0; k < r->n_in && n < 64; k++)
        if (r->in[k].dtype != KILN_DTYPE_UNDEFINED)
            ins[n++] = &r->in[k];
    if (n == 0)
        return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT, "needs at least one input");
    if (n == 1 && ins[0]->data != y->data && numel_of(y) > 0) /* y has the input's shape */
        memcpy(y->data, ins[0]->data, (size_t)numel_of(y) * kiln_dtype_size(y->dtype));
    for (int k = 1; k < n; k++)
        binary_apply(op->fn[ct], false, (kb_ctype)ct, k == 1 ? ins[0] : y, ins[k], y, r->threads);
    if (strcmp(r->node->op_type, "Mean") == 0 && n > 1) {
        /* y = y * (1/n), through the binary loop with a scalar operand */
        double inv = 1.0 / n;
        float invf = (float)inv;
        kb_tensor s = {ct == KB_F64 ? (void *)&inv : (void *)&invf,
                       ct == KB_F64 ? KILN_DTYPE_DOUBLE : KILN_DTYPE_FLOAT, 0, {0}, NULL};
        const kb_binary_op *mul = kb_ew_binary_find("Mul");
        int mct = ct == KB_F64 ? KB_F64 : KB_F32;
        binary_apply(mul->fn[mct], false, (kb_ctype)mct, y, &s, y, r->threads);
    }
    return KILN_OK;
}

/* ---------------- Where ---------------- */

static bool where_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    return n_in == 3 && in[0].dtype == KILN_DTYPE_BOOL && kiln_dtype_size(in[1].dtype) > 0 &&
           in[1].dtype == in[2].dtype;
}

typedef struct where_units_ctx {
    const kb_tensor *cnd;
    const kb_tensor *x;
    const kb_tensor *yv;
    kb_tensor *out;
    size_t es;
    kb_bcast bc;
    int64_t s0;
    int64_t s1;
    int64_t s2;
    int64_t segs;
} where_units_ctx;

static void where_units(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const where_units_ctx *c_ = vc;
    const kb_tensor *cnd = c_->cnd;
    const kb_tensor *x = c_->x;
    const kb_tensor *yv = c_->yv;
    kb_tensor *out = c_->out;
    size_t es = c_->es;
    kb_bcast bc = c_->bc;
    int64_t s0 = c_->s0;
    int64_t s1 = c_->s1;
    int64_t s2 = c_->s2;
    int64_t segs = c_->segs;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        int64_t row = u / segs, i0 = (u % segs) * KB_EW_CHUNK;
        int64_t m = bc.inner - i0 < KB_EW_CHUNK ? bc.inner - i0 : KB_EW_CHUNK;
        int64_t off[3];
        kb_bcast_row(&bc, row, off);
        const uint8_t *c = (const uint8_t *)cnd->data + off[0] + i0 * s0;
        const uint8_t *px = (const uint8_t *)x->data + (size_t)(off[1] + i0 * s1) * es;
        const uint8_t *py = (const uint8_t *)yv->data + (size_t)(off[2] + i0 * s2) * es;
        uint8_t *d = (uint8_t *)out->data + (size_t)(row * bc.inner + i0) * es;
#define WHERE_ROW(T)                                                               \
    {                                                                              \
        const T *xa = (const T *)px, *ya = (const T *)py;                          \
        T *da = (T *)d;                                                            \
        for (int64_t i = 0; i < m; i++)                                            \
            da[i] = c[i * s0] ? xa[i * s1] : ya[i * s2];                           \
    }
        switch (es) {
        case 1: WHERE_ROW(uint8_t) break;
        case 2: WHERE_ROW(uint16_t) break;
        case 4: WHERE_ROW(uint32_t) break;
        case 8: WHERE_ROW(uint64_t) break;
        default:
            for (int64_t i = 0; i < m; i++)
                memcpy(d + (size_t)i * es,
                       c[i * s0] ? px + (size_t)(i * s1) * es : py + (size_t)(i * s2) * es, es);
        }
#undef WHERE_ROW
    }
}

static kiln_status where_run(const kb_run *r) {
    const kb_tensor *cnd = &r->in[0], *x = &r->in[1], *yv = &r->in[2];
    kb_tensor *out = &r->out[0];
    size_t es = kiln_dtype_size(out->dtype);
    if (cnd->dtype != KILN_DTYPE_BOOL)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "condition must be bool, not %s",
                             kiln_dtype_name(cnd->dtype));
    if (es == 0 || x->dtype != yv->dtype)
        return bad_dtype(r->node, x->dtype);
    kb_bcast bc;
    const kb_tensor *ins[3] = {cnd, x, yv};
    kb_bcast_init(&bc, 3, ins, out);
    if (bc.total <= 0)
        return KILN_OK;
    int64_t s0 = bc.stride[0][bc.rank - 1], s1 = bc.stride[1][bc.rank - 1],
            s2 = bc.stride[2][bc.rank - 1];
    int64_t segs = (bc.inner + KB_EW_CHUNK - 1) / KB_EW_CHUNK, units = bc.rows * segs;
    {
        where_units_ctx c_ = {cnd, x, yv, out, es, bc, s0, s1, s2, segs};
        kn_parallel_for(bc.total >= KB_EW_PAR_MIN ? r->threads : 1, units, 0, where_units, &c_);
    }
    return KILN_OK;
}

/* ---------------- Cast / CastLike ---------------- */

static bool cast_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    if (n_in >= 1 && n_out >= 1 &&
        (in[0].dtype == KILN_DTYPE_STRING || out[0].dtype == KILN_DTYPE_STRING))
        return true; /* kb_str_cast_run */
    return n_in >= 1 && n_out >= 1 && kb_ew_ctype(in[0].dtype) >= 0 &&
           kb_ew_ctype(out[0].dtype) >= 0;
}

typedef struct cast_chunks_ctx {
    const kb_tensor *x;
    kb_tensor *y;
    int ct;
    int64_t n;
    size_t xs;
    size_t ys;
    bool f8_nosat;
} cast_chunks_ctx;

static void cast_chunks(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const cast_chunks_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    int ct = c_->ct;
    int64_t n = c_->n;
    size_t xs = c_->xs;
    size_t ys = c_->ys;
    bool f8_nosat = c_->f8_nosat;
    (void)tid;
    for (int64_t c = lo_; c < hi_; c++) {
        uint64_t buf[KB_EW_CHUNK];
        int64_t i0 = c * KB_EW_CHUNK, m = n - i0 < KB_EW_CHUNK ? n - i0 : KB_EW_CHUNK;
        const uint8_t *src = (const uint8_t *)x->data + (size_t)i0 * xs;
        uint8_t *dst = (uint8_t *)y->data + (size_t)i0 * ys;
        kb_ew_load(x->dtype, src, m, (kb_ctype)ct, buf);
        kb_ew_store(y->dtype, dst, m, (kb_ctype)ct, buf);
        if (f8_nosat) {
            float *f = (float *)buf;
            kb_ew_load(x->dtype, src, m, KB_F32, f);
            for (int64_t i = 0; i < m; i++)
                dst[i] = kn_f8_from_float(f[i], (int)y->dtype, 0);
        }
    }
}

kiln_status kb_ew_run_cast(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    if (x->dtype == KILN_DTYPE_STRING || y->dtype == KILN_DTYPE_STRING)
        return kb_str_cast_run(r); /* text, its strings in the instance's arena */
    int ct = kb_ew_ctype(x->dtype);
    if (ct < 0)
        return bad_dtype(r->node, x->dtype);
    if (kb_ew_ctype(y->dtype) < 0)
        return bad_dtype(r->node, y->dtype);
    int64_t n = numel_of(x);
    if (n <= 0)
        return KILN_OK;
    size_t xs = kiln_dtype_size(x->dtype), ys = kiln_dtype_size(y->dtype);
    if (x->dtype == y->dtype) {
        if (x->data != y->data)
            memcpy(y->data, x->data, (size_t)n * xs);
        return KILN_OK;
    }
    /* float8 without saturation: values that round past the largest finite
     * one become NaN (or infinity for float8e5m2) instead of clamping; the
     * rounding of core/fp8.h, as QuantizeLinear's */
    bool f8_nosat = kn_f8_is((int)y->dtype) && kn_attr_int(r->node, "saturate", 1) == 0;
    int64_t nchunks = (n + KB_EW_CHUNK - 1) / KB_EW_CHUNK;
    {
        cast_chunks_ctx c_ = {x, y, ct, n, xs, ys, f8_nosat};
        kn_parallel_for(n >= KB_EW_PAR_MIN ? r->threads : 1, nchunks, 0, cast_chunks, &c_);
    }
    return KILN_OK;
}

/* BitCast: the same bytes under another type of the same width. */
static kiln_status bitcast_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    size_t bytes = (size_t)numel_of(x) * kiln_dtype_size(x->dtype);
    if (kiln_dtype_size(x->dtype) != kiln_dtype_size(y->dtype))
        return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT, "types differ in width");
    if (bytes && x->data != y->data)
        memcpy(y->data, x->data, bytes);
    return KILN_OK;
}

/* ---------------- reductions and friends: type checks ---------------- */

static bool numeric_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                             const kn_tinfo *out, int n_out) {
    return n_in >= 1 && kb_ew_ctype(in[0].dtype) >= 0;
}

static bool float_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    int ct = n_in >= 1 ? kb_ew_ctype(in[0].dtype) : -1;
    return ct == KB_F32 || ct == KB_F64;
}

/* ---------------- the table ---------------- */

#define K_UN(name) {name, "", "ref", unary_supports, NULL, NULL, NULL, NULL, unary_run}
#define K_BIN(name) {name, "", "ref", binary_supports, NULL, NULL, NULL, NULL, binary_run}
#define K_VAR(name) {name, "", "ref", variadic_supports, NULL, NULL, NULL, NULL, variadic_run}
#define K_RED(name) {name, "", "ref", numeric_supports, NULL, NULL, NULL, NULL, kb_ew_run_reduce}
#define K_SM(name) {name, "", "ref", float_supports, NULL, NULL, NULL, NULL, kb_ew_run_softmax}

const kb_kernel kb_cpu_elementwise[] = {
    K_BIN("Add"), K_BIN("Sub"), K_BIN("Mul"), K_BIN("Div"), K_BIN("Pow"), K_BIN("Mod"),
    K_BIN("BitShift"), K_BIN("BitwiseAnd"), K_BIN("BitwiseOr"), K_BIN("BitwiseXor"),
    K_BIN("Equal"), K_BIN("Greater"), K_BIN("GreaterOrEqual"), K_BIN("Less"),
    K_BIN("LessOrEqual"), K_BIN("And"), K_BIN("Or"), K_BIN("Xor"), K_BIN("PRelu"),
    K_VAR("Max"), K_VAR("Min"), K_VAR("Sum"), K_VAR("Mean"),
    K_UN("Abs"), K_UN("Neg"), K_UN("Sign"), K_UN("Reciprocal"), K_UN("Floor"), K_UN("Ceil"),
    K_UN("Round"), K_UN("Sqrt"), K_UN("Exp"), K_UN("Log"), K_UN("Sin"), K_UN("Cos"),
    K_UN("Tan"), K_UN("Asin"), K_UN("Acos"), K_UN("Atan"), K_UN("Sinh"), K_UN("Cosh"),
    K_UN("Asinh"), K_UN("Acosh"), K_UN("Atanh"), K_UN("Erf"), K_UN("Tanh"), K_UN("Relu"),
    K_UN("LeakyRelu"), K_UN("Elu"), K_UN("Selu"), K_UN("Celu"), K_UN("ThresholdedRelu"),
    K_UN("Sigmoid"), K_UN("HardSigmoid"), K_UN("HardSwish"), K_UN("Softplus"),
    K_UN("Softsign"), K_UN("Gelu"), K_UN("Mish"), K_UN("Swish"), K_UN("Clip"), K_UN("IsNaN"),
    K_UN("IsInf"), K_UN("Shrink"),
    K_UN("Not"), K_UN("BitwiseNot"),
    {"Where", "", "ref", where_supports, NULL, NULL, NULL, NULL, where_run},
    {"Cast", "", "ref", cast_supports, NULL, NULL, kb_str_prepare, kb_str_release, kb_ew_run_cast},
    {"CastLike", "", "ref", cast_supports, NULL, NULL, kb_str_prepare, kb_str_release,
     kb_ew_run_cast},
    {"BitCast", "", "ref", NULL, NULL, NULL, NULL, NULL, bitcast_run},
    K_RED("ReduceSum"), K_RED("ReduceMean"), K_RED("ReduceMax"), K_RED("ReduceMin"),
    K_RED("ReduceProd"), K_RED("ReduceL1"), K_RED("ReduceL2"), K_RED("ReduceLogSum"),
    K_RED("ReduceLogSumExp"), K_RED("ReduceSumSquare"),
    {"ArgMax", "", "ref", numeric_supports, NULL, NULL, NULL, NULL, kb_ew_run_argmax},
    {"ArgMin", "", "ref", numeric_supports, NULL, NULL, NULL, NULL, kb_ew_run_argmax},
    K_SM("Softmax"), K_SM("LogSoftmax"), K_SM("Hardmax"),
    {"CumSum", "", "ref", numeric_supports, NULL, NULL, NULL, NULL, kb_ew_run_cumsum},
    {"CumProd", "", "ref", numeric_supports, NULL, NULL, NULL, NULL, kb_ew_run_cumsum},
    {"ElementwiseChain", "kiln", "ref", float_supports, kb_ew_init_chain, kb_ew_fini_chain, NULL,
     NULL, kb_ew_run_chain},
};
const size_t kb_cpu_elementwise_count = KN_ARRAY_LEN(kb_cpu_elementwise);
