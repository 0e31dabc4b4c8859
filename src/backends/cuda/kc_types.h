/* kc_types.h - plain C types shared by the CUDA backend's kernel launchers
 * (*.cu, compiled as CUDA C++) and their kb_kernel glue (*.c): broadcast
 * descriptors, elementwise programs and op codes. No kiln internals here, so
 * the .cu files need nothing but kiln.h. */
#ifndef KILN_CUDA_KC_TYPES_H
#define KILN_CUDA_KC_TYPES_H

#include <stdint.h>

#include "kiln/kiln.h"

#define KC_MAX_DIMS 8
#define KC_EW_MAX_IN 8
#define KC_EW_MAX_STEPS 16

/* An output shape with each input's element strides into it (0 where the
 * input is broadcast). Dims are collapsed on the host where every input
 * allows, so most programs run with rank 1 or 2. */
typedef struct kc_bcast {
    int rank;
    int n_in;
    int64_t total;
    int64_t dims[KC_MAX_DIMS];
    int64_t stride[KC_EW_MAX_IN][KC_MAX_DIMS];
} kc_bcast;

/* Op codes of the elementwise programs. Unary ops read the accumulator,
 * binary ops the accumulator and one input. */
typedef enum kc_op {
    /* unary */
    KC_ABS = 0, KC_NEG, KC_SIGN, KC_RECIPROCAL, KC_FLOOR, KC_CEIL, KC_ROUND, KC_SQRT, KC_EXP,
    KC_LOG, KC_SIN, KC_COS, KC_TAN, KC_ASIN, KC_ACOS, KC_ATAN, KC_SINH, KC_COSH, KC_ASINH,
    KC_ACOSH, KC_ATANH, KC_ERF, KC_TANH, KC_RELU, KC_LEAKY_RELU, KC_ELU, KC_SELU, KC_CELU,
    KC_THRESHOLDED_RELU, KC_SIGMOID, KC_HARD_SIGMOID, KC_HARD_SWISH, KC_SOFTPLUS, KC_SOFTSIGN,
    KC_GELU, KC_GELU_TANH, KC_MISH, KC_SWISH, KC_SILU, KC_CLIP, KC_SHRINK, KC_ISNAN, KC_ISINF,
    KC_NOT, KC_MUL_CONST, KC_IDENTITY,
    KC_UNARY_END,
    /* binary */
    KC_ADD = 64, KC_SUB, KC_MUL, KC_DIV, KC_POW, KC_MOD, KC_MODC, KC_EQUAL, KC_GREATER,
    KC_GREATER_EQUAL, KC_LESS, KC_LESS_EQUAL, KC_AND, KC_OR, KC_XOR, KC_PRELU, KC_MAX, KC_MIN,
    KC_BINARY_END
} kc_op;

static inline int kc_op_is_binary(int op) { return op >= KC_ADD; }

/* One step: acc = op(acc) or op(acc, in[operand]) (op(in[operand], acc)
 * when swap). alpha/beta/gamma/flag as the CPU's kb_uparam. */
typedef struct kc_step {
    int op;
    int operand;
    int swap;
    int flag;
    float alpha, beta, gamma;
} kc_step;

/* acc = in[0]; steps...; out = acc, with broadcasting over bc. Computes in
 * float for real outputs (and bool outputs of real inputs), in int64 when
 * `integer` is set. */
typedef struct kc_program {
    int n_steps;
    int integer;
    kc_step steps[KC_EW_MAX_STEPS];
    kiln_dtype in_dt[KC_EW_MAX_IN];
    const void *in[KC_EW_MAX_IN];
    kiln_dtype out_dt;
    void *out;
    kc_bcast bc;
} kc_program;

/* Activations of fused epilogues, numbered as the CPU's kb_act (act.h). */
typedef enum kc_act {
    KC_ACT_NONE = 0, KC_ACT_RELU, KC_ACT_LEAKY_RELU, KC_ACT_SIGMOID, KC_ACT_TANH, KC_ACT_CLIP,
    KC_ACT_HARD_SIGMOID, KC_ACT_HARD_SWISH, KC_ACT_GELU, KC_ACT_GELU_TANH, KC_ACT_SILU,
    KC_ACT_ELU, KC_ACT_SOFTPLUS, KC_ACT_SWISH
} kc_act;

#endif
