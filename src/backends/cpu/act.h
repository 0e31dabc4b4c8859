/* act.h - activation epilogues shared by fused CPU kernels (see graph/fused.h). */
#ifndef KILN_CPU_ACT_H
#define KILN_CPU_ACT_H

#include <math.h>
#include <string.h>

typedef enum kb_act {
    KB_ACT_NONE = 0, KB_ACT_RELU, KB_ACT_LEAKY_RELU, KB_ACT_SIGMOID, KB_ACT_TANH, KB_ACT_CLIP,
    KB_ACT_HARD_SIGMOID, KB_ACT_HARD_SWISH, KB_ACT_GELU, KB_ACT_GELU_TANH, KB_ACT_SILU,
    KB_ACT_ELU, KB_ACT_SOFTPLUS, KB_ACT_SWISH, KB_ACT_INVALID
} kb_act;

/* "" or NULL is NONE; an unknown name gives KB_ACT_INVALID. */
static inline kb_act kb_act_parse(const char *name) {
    static const char *const names[] = {"", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip",
                                        "HardSigmoid", "HardSwish", "Gelu", "GeluTanh", "Silu",
                                        "Elu", "Softplus", "Swish"};
    if (!name)
        return KB_ACT_NONE;
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return (kb_act)i;
    return KB_ACT_INVALID;
}

static inline float kb_act_apply(kb_act a, float x, float alpha, float beta) {
    switch (a) {
    case KB_ACT_NONE: return x;
    case KB_ACT_RELU: return x > 0.f ? x : 0.f;
    case KB_ACT_LEAKY_RELU: return x >= 0.f ? x : alpha * x;
    case KB_ACT_SIGMOID: return 1.f / (1.f + expf(-x));
    case KB_ACT_TANH: return tanhf(x);
    case KB_ACT_CLIP: return x < alpha ? alpha : (x > beta ? beta : x);
    case KB_ACT_HARD_SIGMOID: { float y = alpha * x + beta; return y < 0.f ? 0.f : (y > 1.f ? 1.f : y); }
    case KB_ACT_HARD_SWISH: { float y = x / 6.f + 0.5f; return x * (y < 0.f ? 0.f : (y > 1.f ? 1.f : y)); }
    case KB_ACT_GELU: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case KB_ACT_GELU_TANH: return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case KB_ACT_SILU: return x / (1.f + expf(-x));
    case KB_ACT_ELU: return x >= 0.f ? x : alpha * (expf(x) - 1.f);
    case KB_ACT_SOFTPLUS: return x > 20.f ? x : log1pf(expf(x));
    case KB_ACT_SWISH: return x / (1.f + expf(-alpha * x)); /* QuickGELU: alpha 1.702 */
    case KB_ACT_INVALID: return x;
    }
    return x;
}

/* Apply in place over n floats. */
static inline void kb_act_apply_n(kb_act a, float *x, size_t n, float alpha, float beta) {
    if (a == KB_ACT_NONE)
        return;
    for (size_t i = 0; i < n; i++)
        x[i] = kb_act_apply(a, x[i], alpha, beta);
}
#endif
