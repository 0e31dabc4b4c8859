/* k_elementwise.c - the CUDA elementwise family's kb_kernel glue: unary and
 * binary ops (bitwise ops and BitShift included), variadic Max/Min/Sum/Mean,
 * Clip, kiln::ElementwiseChain, Where and Cast, all as programs for the one
 * kernel in elementwise.cu, computing in the CPU's compute type. Attributes
 * are read as the CPU reference reads them (its parameter helpers are
 * reused); nothing here touches device memory from the host. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_elementwise.h"
#include "core/fp8.h"
#include "elementwise.cuh"
#include "graph/fused.h"
#include "kc_common.h"

static const struct {
    const char *name;
    int op;
} op_names[] = {
    {"Abs", KC_ABS}, {"Neg", KC_NEG}, {"Sign", KC_SIGN}, {"Reciprocal", KC_RECIPROCAL},
    {"Floor", KC_FLOOR}, {"Ceil", KC_CEIL}, {"Round", KC_ROUND}, {"Sqrt", KC_SQRT},
    {"Exp", KC_EXP}, {"Log", KC_LOG}, {"Sin", KC_SIN}, {"Cos", KC_COS}, {"Tan", KC_TAN},
    {"Asin", KC_ASIN}, {"Acos", KC_ACOS}, {"Atan", KC_ATAN}, {"Sinh", KC_SINH},
    {"Cosh", KC_COSH}, {"Asinh", KC_ASINH}, {"Acosh", KC_ACOSH}, {"Atanh", KC_ATANH},
    {"Erf", KC_ERF}, {"Tanh", KC_TANH}, {"Relu", KC_RELU}, {"LeakyRelu", KC_LEAKY_RELU},
    {"Elu", KC_ELU}, {"Selu", KC_SELU}, {"Celu", KC_CELU}, {"ThresholdedRelu", KC_THRESHOLDED_RELU},
    {"Sigmoid", KC_SIGMOID}, {"HardSigmoid", KC_HARD_SIGMOID}, {"HardSwish", KC_HARD_SWISH},
    {"Softplus", KC_SOFTPLUS}, {"Softsign", KC_SOFTSIGN}, {"Gelu", KC_GELU},
    {"GeluTanh", KC_GELU_TANH}, {"Mish", KC_MISH}, {"Swish", KC_SWISH}, {"Silu", KC_SILU},
    {"Clip", KC_CLIP}, {"Shrink", KC_SHRINK}, {"IsNaN", KC_ISNAN}, {"IsInf", KC_ISINF},
    {"Not", KC_NOT}, {"Identity", KC_IDENTITY},
    {"Add", KC_ADD}, {"Sub", KC_SUB}, {"Mul", KC_MUL}, {"Div", KC_DIV}, {"Pow", KC_POW},
    {"Mod", KC_MOD}, {"Equal", KC_EQUAL}, {"Greater", KC_GREATER},
    {"GreaterOrEqual", KC_GREATER_EQUAL}, {"Less", KC_LESS}, {"LessOrEqual", KC_LESS_EQUAL},
    {"And", KC_AND}, {"Or", KC_OR}, {"Xor", KC_XOR}, {"PRelu", KC_PRELU}, {"Max", KC_MAX},
    {"Min", KC_MIN}, {"Sum", KC_ADD}, {"Mean", KC_ADD},
};

static int op_code(const char *name) {
    for (size_t i = 0; i < KN_ARRAY_LEN(op_names); i++)
        if (strcmp(op_names[i].name, name) == 0)
            return op_names[i].op;
    return -1;
}

static bool is_int_type(kiln_dtype t) {
    return t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64 || t == KILN_DTYPE_INT8 ||
           t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT16 || t == KILN_DTYPE_BOOL;
}

/* The CPU's compute type of a storage type (kb_ew_ctype), as a path; -1
 * where CUDA has no loads for it (float8). */
static int dtype_path(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16: return KC_PATH_F32;
    case KILN_DTYPE_DOUBLE: return KC_PATH_F64;
    case KILN_DTYPE_INT8: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32: case KILN_DTYPE_INT64:
    case KILN_DTYPE_BOOL:
        return KC_PATH_I64;
    case KILN_DTYPE_UINT8: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64:
        return KC_PATH_U64;
    default: return -1;
    }
}

static bool is_real_path(int path) { return path == KC_PATH_F32 || path == KC_PATH_F64; }

/* Ops defined on the integer paths. */
static bool int_op(int op) {
    return op == KC_ABS || op == KC_NEG || op == KC_SIGN || op == KC_RELU || op == KC_NOT ||
           op == KC_IDENTITY || op == KC_BITWISE_NOT ||
           (op >= KC_ADD && op < KC_BINARY_END && op != KC_PRELU) ||
           (op > KC_BINARY_END && op <= KC_BIT_XOR);
}

static bool bitwise_op(int op) { return op == KC_BITWISE_NOT || op > KC_BINARY_END; }

/* The path computing a node with these input types, as the CPU picks its
 * compute type: the first input's, except that Pow of an integer (or
 * float32) base and a real (double) exponent computes in double; -1 when
 * the op is not defined there. Clip on integers runs as Max / Min steps
 * (opset 11 on). */
static int node_path(const kn_node *n, int op, int n_in, const kiln_dtype *t) {
    int path = n_in > 0 ? dtype_path(t[0]) : -1;
    if (path < 0)
        return -1;
    if (op == KC_POW && n_in > 1) {
        int p1 = dtype_path(t[1]);
        if (p1 < 0)
            return -1;
        if ((path == KC_PATH_I64 || path == KC_PATH_U64) && is_real_path(p1))
            path = KC_PATH_F64;
        else if (path == KC_PATH_F32 && p1 == KC_PATH_F64)
            path = KC_PATH_F64;
    }
    if (is_real_path(path))
        return bitwise_op(op) ? -1 : path;
    if (op == KC_CLIP && n->opset >= 11)
        return path;
    return int_op(op) ? path : -1;
}

static void step_params(kc_step *s, const kb_uparam *p) {
    s->alpha = (float)p->alpha;
    s->beta = (float)p->beta;
    s->gamma = (float)p->gamma;
    s->flag = p->flag;
}

/* ---------------- plain ops ---------------- */

static int node_op(const kn_node *n) {
    if (strcmp(n->op_type, "Mod") == 0 && kn_attr_int(n, "fmod", 0))
        return KC_MODC;
    if (strcmp(n->op_type, "BitShift") == 0)
        return strcmp(kn_attr_string(n, "direction", ""), "LEFT") == 0 ? KC_SHL : KC_SHR;
    if (strcmp(n->op_type, "BitwiseAnd") == 0)
        return KC_BIT_AND;
    if (strcmp(n->op_type, "BitwiseOr") == 0)
        return KC_BIT_OR;
    if (strcmp(n->op_type, "BitwiseXor") == 0)
        return KC_BIT_XOR;
    if (strcmp(n->op_type, "BitwiseNot") == 0)
        return KC_BITWISE_NOT;
    return op_code(n->op_type);
}

/* Output types a path stores: real paths real types and bool (double also
 * integers: Pow of an integer base), integer paths integers and bool. */
static bool out_ok(int path, kiln_dtype t) {
    int tp = dtype_path(t);
    if (tp < 0)
        return false;
    if (path == KC_PATH_F64 || t == KILN_DTYPE_BOOL)
        return true;
    if (path == KC_PATH_F32)
        return tp == KC_PATH_F32;
    return tp == KC_PATH_I64 || tp == KC_PATH_U64;
}

static bool ew_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    int op = node_op(node);
    if (op < 0 || n_in < 1 || n_out < 1 || n_in > KC_EW_MAX_IN)
        return false;
    if (node->opset > 0 && node->opset < 7 && kn_attr_int(node, "broadcast", 0))
        return false; /* legacy axis broadcast: the CPU kernel has it */
    kiln_dtype types[KC_EW_MAX_IN];
    for (int k = 0; k < n_in; k++)
        types[k] = in[k].dtype;
    int path = node_path(node, op, n_in, types);
    if (path < 0 || (!is_real_path(path) && strcmp(node->op_type, "Mean") == 0))
        return false; /* an integer Mean divides in double on the CPU */
    for (int k = 1; k < n_in; k++) {
        if (in[k].dtype == KILN_DTYPE_UNDEFINED)
            continue;
        int pk = dtype_path(in[k].dtype);
        if (pk < 0 || (!is_real_path(path) && is_real_path(pk)))
            return false;
    }
    return out_ok(path, out[0].dtype);
}

static kiln_status ew_run(const kb_run *r) {
    const kn_node *n = r->node;
    int op = node_op(n);
    if (op < 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "no CUDA elementwise op for %s", n->op_type);
    kiln_dtype types[KC_EW_MAX_IN];
    for (int k = 0; k < r->n_in && k < KC_EW_MAX_IN; k++)
        types[k] = r->in[k].dtype;
    int path = node_path(n, op, r->n_in < KC_EW_MAX_IN ? r->n_in : KC_EW_MAX_IN, types);
    if (path < 0 || !out_ok(path, r->out[0].dtype))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "data type %s is not supported by CUDA %s",
                             kiln_dtype_name(r->in[0].dtype), n->op_type);
    kc_program p;
    memset(&p, 0, sizeof p);
    p.integer = path;
    const kb_tensor *ins[KC_EW_MAX_IN];
    int m = 0;
    bool variadic = strcmp(n->op_type, "Max") == 0 || strcmp(n->op_type, "Min") == 0 ||
                    strcmp(n->op_type, "Sum") == 0 || strcmp(n->op_type, "Mean") == 0;
    bool clip = op == KC_CLIP && n->opset >= 11;
    for (int k = 0; k < r->n_in; k++) {
        if (!kc_present(r->in, r->n_in, k))
            continue;
        if (m == KC_EW_MAX_IN)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "more than %d inputs", KC_EW_MAX_IN);
        ins[m] = &r->in[k];
        p.in[m] = r->in[k].data;
        p.in_dt[m] = r->in[k].dtype;
        if (m > 0) {
            kc_step *s = &p.steps[p.n_steps++];
            s->operand = m;
            if (clip)
                s->op = k == 1 ? KC_MAX : KC_MIN; /* Clip = min(max(x, lo), hi), NaN kept */
            else
                s->op = op;
        }
        m++;
    }
    if (m == 0)
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "needs at least one input");
    if (!kc_op_is_binary(op) && !clip) {
        if (m != 1 && op != KC_CLIP)
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "unary op with %d inputs", m);
        kb_uparam up;
        kb_ew_uparam_from_node(n, NULL, 0, KB_F32, &up);
        p.n_steps = 1;
        p.steps[0].op = op;
        step_params(&p.steps[0], &up);
        m = 1;
    } else if (!variadic && !clip && m != 2) {
        return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "binary op with %d inputs", m);
    }
    if (strcmp(n->op_type, "Mean") == 0 && m > 1 && !is_real_path(path))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "Mean of %s", kiln_dtype_name(r->in[0].dtype));
    if (strcmp(n->op_type, "Mean") == 0 && m > 1) {
        kc_step *s = &p.steps[p.n_steps++];
        s->op = KC_MUL_CONST;
        s->alpha = (float)(1.0 / m);
    }
    p.out = r->out[0].data;
    p.out_dt = r->out[0].dtype;
    KN_TRY(kc_bcast_init(n, &p.bc, m, ins, &r->out[0]));
    KC_CUDA(n, kc_ew_run(&p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- kiln::ElementwiseChain ---------------- */

typedef struct chain_state {
    int n;
    kc_step steps[KC_EW_MAX_STEPS];
} chain_state;

static kiln_status chain_init(const kn_node *node, void **state) {
    const kn_attr *ops = kn_attr_find(node, "ops");
    if (!ops || ops->type != KN_ATTR_STRINGS || ops->n == 0)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "attribute 'ops' (a non-empty list of strings) is missing");
    size_t n = ops->n, n_operand, n_swap, n_alpha, n_beta;
    const int64_t *operand = kn_attr_ints(node, "operand", &n_operand);
    const int64_t *swap = kn_attr_ints(node, "swap", &n_swap);
    const float *alphas = kn_attr_floats(node, "alphas", &n_alpha);
    const float *betas = kn_attr_floats(node, "betas", &n_beta);
    if (n_operand != n || (swap && n_swap != n) || (alphas && n_alpha != n) ||
        (betas && n_beta != n))
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "attributes operand/swap/alphas/betas must have one entry per op "
                             "(%zu ops)", n);
    if (n > KC_EW_MAX_STEPS)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%zu ops (the CUDA chain takes %d)", n,
                             KC_EW_MAX_STEPS);
    chain_state *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    s->n = (int)n;
    for (size_t i = 0; i < n; i++) {
        const char *name = ops->strings[i];
        kc_step *st = &s->steps[i];
        int op = strcmp(name, "Mod") == 0 ? KC_MOD : op_code(name);
        bool binary = operand[i] >= 0;
        if (op < 0 || op == KC_IDENTITY || kc_op_is_binary(op) != binary || bitwise_op(op) ||
            op == KC_ISNAN ||
            op == KC_ISINF || op == KC_NOT || op == KC_EQUAL || op == KC_GREATER ||
            op == KC_GREATER_EQUAL || op == KC_LESS || op == KC_LESS_EQUAL || op == KC_AND ||
            op == KC_OR || op == KC_XOR || (binary && operand[i] >= node->n_in)) {
            kn_free(s);
            return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                 "op %zu of the chain ('%s') is not supported", i, name);
        }
        st->op = op;
        st->operand = (int)operand[i];
        st->swap = swap && swap[i];
        kb_uparam p;
        kb_ew_uparam_defaults(name, KB_F32, &p);
        bool two = strcmp(name, "HardSigmoid") == 0 || strcmp(name, "Clip") == 0;
        bool one = two || strcmp(name, "LeakyRelu") == 0 || strcmp(name, "Elu") == 0 ||
                   strcmp(name, "Celu") == 0 || strcmp(name, "ThresholdedRelu") == 0 ||
                   strcmp(name, "Selu") == 0 || strcmp(name, "Swish") == 0;
        if (alphas && one)
            p.alpha = alphas[i];
        if (betas && two)
            p.beta = betas[i];
        if (betas && strcmp(name, "Selu") == 0)
            p.gamma = betas[i];
        step_params(st, &p);
        st->flag = 0; /* "Gelu" in a chain is the erf form */
    }
    *state = s;
    return KILN_OK;
}

static void chain_fini(void *state) { kn_free(state); }

static bool chain_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    if (n_in < 1 || n_in > KC_EW_MAX_IN || n_out < 1 || !kc_is_float(out[0].dtype))
        return false;
    for (int k = 0; k < n_in; k++)
        if (!kc_is_float(in[k].dtype))
            return false;
    return true;
}

static kiln_status chain_run(const kb_run *r) {
    const chain_state *s = r->state;
    kc_program p;
    memset(&p, 0, sizeof p);
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "chain state missing");
    if (r->n_in > KC_EW_MAX_IN)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "more than %d inputs", KC_EW_MAX_IN);
    const kb_tensor *ins[KC_EW_MAX_IN];
    kb_tensor vin[KC_EW_MAX_IN];
    int64_t rows[KC_EW_MAX_IN];
    size_t nv = 0;
    const int64_t *views = kn_attr_ints(r->node, "views", &nv);
    for (int k = 0; k < r->n_in; k++) {
        ins[k] = &r->in[k];
        p.in[k] = r->in[k].data;
        p.in_dt[k] = r->in[k].dtype;
        rows[k] = 0;
        if (!views || nv != 2 * (size_t)r->n_in || views[2 * k + 1] <= 0)
            continue;
        /* input k is columns [off, off + n) of its rows (graph/fused.h) */
        const kb_tensor *t = &r->in[k];
        int64_t off = views[2 * k], n = views[2 * k + 1];
        if (t->rank < 1 || off < 0 || off + n > t->dims[t->rank - 1])
            return kn_node_error(r->node, KILN_ERR_SHAPE, "input %d's view [%lld, %lld) is "
                                 "outside its rows", k, (long long)off, (long long)(off + n));
        vin[k] = *t;
        vin[k].data = (uint8_t *)t->data + (size_t)off * kiln_dtype_size(t->dtype);
        vin[k].dims[t->rank - 1] = n;
        rows[k] = t->dims[t->rank - 1];
        ins[k] = &vin[k];
        p.in[k] = vin[k].data;
    }
    p.n_steps = s->n;
    memcpy(p.steps, s->steps, sizeof p.steps);
    p.out = r->out[0].data;
    p.out_dt = r->out[0].dtype;
    KN_TRY(kc_bcast_init_rows(r->node, &p.bc, r->n_in, ins, &r->out[0], rows));
    KC_CUDA(r->node, kc_ew_run(&p, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- Where ---------------- */

static bool where_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    size_t es = n_in == 3 ? kiln_dtype_size(in[1].dtype) : 0;
    return n_in == 3 && in[0].dtype == KILN_DTYPE_BOOL && in[1].dtype == in[2].dtype &&
           (es == 1 || es == 2 || es == 4 || es == 8);
}

static kiln_status where_run(const kb_run *r) {
    const kb_tensor *ins[3] = {&r->in[0], &r->in[1], &r->in[2]};
    if (r->n_in != 3 || r->in[0].dtype != KILN_DTYPE_BOOL || r->in[1].dtype != r->in[2].dtype)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "needs a bool condition and two "
                                                            "values of one type");
    kc_bcast bc;
    KN_TRY(kc_bcast_init(r->node, &bc, 3, ins, &r->out[0]));
    KC_CUDA(r->node, kc_where(r->in[0].data, r->in[1].data, r->in[2].data, r->out[0].data,
                              kiln_dtype_size(r->out[0].dtype), &bc, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- Cast ---------------- */

static bool cast_type(kiln_dtype t) {
    return kc_is_float(t) || is_int_type(t) || t == KILN_DTYPE_DOUBLE || kn_f8_is((int)t);
}

static bool cast_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    return n_in >= 1 && n_out >= 1 && cast_type(in[0].dtype) && cast_type(out[0].dtype);
}

static kiln_status cast_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    if (!cast_type(x->dtype) || !cast_type(y->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "cast from %s to %s",
                             kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
    int64_t n = kc_numel(x);
    if (n <= 0)
        return KILN_OK;
    if (x->dtype == y->dtype) {
        if (x->data != y->data)
            KC_CUDA(r->node, cudaMemcpyAsync(y->data, x->data, (size_t)n * kiln_dtype_size(x->dtype),
                                             cudaMemcpyDeviceToDevice, kc_stream(r)));
        return KILN_OK;
    }
    KC_CUDA(r->node, kc_cast(x->data, x->dtype, y->data, y->dtype, n,
                             (int)kn_attr_int(r->node, "saturate", 1), kc_stream(r)));
    return KILN_OK;
}

/* ---------------- the table ---------------- */

#define K_EW(name) {name, "", "cuda", ew_supports, NULL, NULL, NULL, NULL, ew_run}

const kb_kernel kb_cuda_elementwise[] = {
    K_EW("Add"), K_EW("Sub"), K_EW("Mul"), K_EW("Div"), K_EW("Pow"), K_EW("Mod"),
    K_EW("Equal"), K_EW("Greater"), K_EW("GreaterOrEqual"), K_EW("Less"), K_EW("LessOrEqual"),
    K_EW("And"), K_EW("Or"), K_EW("Xor"), K_EW("PRelu"),
    K_EW("Max"), K_EW("Min"), K_EW("Sum"), K_EW("Mean"),
    K_EW("Abs"), K_EW("Neg"), K_EW("Sign"), K_EW("Reciprocal"), K_EW("Floor"), K_EW("Ceil"),
    K_EW("Round"), K_EW("Sqrt"), K_EW("Exp"), K_EW("Log"), K_EW("Sin"), K_EW("Cos"),
    K_EW("Tan"), K_EW("Asin"), K_EW("Acos"), K_EW("Atan"), K_EW("Sinh"), K_EW("Cosh"),
    K_EW("Asinh"), K_EW("Acosh"), K_EW("Atanh"), K_EW("Erf"), K_EW("Tanh"), K_EW("Relu"),
    K_EW("LeakyRelu"), K_EW("Elu"), K_EW("Selu"), K_EW("Celu"), K_EW("ThresholdedRelu"),
    K_EW("Sigmoid"), K_EW("HardSigmoid"), K_EW("HardSwish"), K_EW("Softplus"),
    K_EW("Softsign"), K_EW("Gelu"), K_EW("Mish"), K_EW("Swish"), K_EW("Clip"), K_EW("IsNaN"),
    K_EW("IsInf"), K_EW("Shrink"), K_EW("Not"),
    K_EW("BitShift"), K_EW("BitwiseAnd"), K_EW("BitwiseOr"), K_EW("BitwiseXor"),
    K_EW("BitwiseNot"),
    {"Where", "", "cuda", where_supports, NULL, NULL, NULL, NULL, where_run},
    {"Cast", "", "cuda", cast_supports, NULL, NULL, NULL, NULL, cast_run},
    {"CastLike", "", "cuda", cast_supports, NULL, NULL, NULL, NULL, cast_run},
    {"ElementwiseChain", KN_DOMAIN_KILN, "cuda", chain_supports, chain_init, chain_fini, NULL,
     NULL, chain_run},
};
const size_t kb_cuda_elementwise_count = KN_ARRAY_LEN(kb_cuda_elementwise);
