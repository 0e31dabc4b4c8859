/* ops_elementwise.c - op schemas (shape and type inference) of the
 * elementwise family: unary math and activations, broadcasting binary ops,
 * comparisons and logic, variadic ops, Where, Clip, Cast, reductions,
 * ArgMax/ArgMin, Softmax-likes, CumSum and kiln::ElementwiseChain. */
#include <string.h>

#include "fused.h"
#include "graph.h"

/* ---------------- data type sets ---------------- */

#define T_BIT(t) (1u << (t))
#define T_FLOAT (T_BIT(KILN_DTYPE_FLOAT) | T_BIT(KILN_DTYPE_DOUBLE) | T_BIT(KILN_DTYPE_FLOAT16) | \
                 T_BIT(KILN_DTYPE_BFLOAT16))
#define T_SINT (T_BIT(KILN_DTYPE_INT8) | T_BIT(KILN_DTYPE_INT16) | T_BIT(KILN_DTYPE_INT32) | \
                T_BIT(KILN_DTYPE_INT64))
#define T_UINT (T_BIT(KILN_DTYPE_UINT8) | T_BIT(KILN_DTYPE_UINT16) | T_BIT(KILN_DTYPE_UINT32) | \
                T_BIT(KILN_DTYPE_UINT64))
#define T_BOOL T_BIT(KILN_DTYPE_BOOL)
#define T_NUM (T_FLOAT | T_SINT | T_UINT)
#define T_FP8 (T_BIT(KILN_DTYPE_FLOAT8E4M3FN) | T_BIT(KILN_DTYPE_FLOAT8E4M3FNUZ) | \
               T_BIT(KILN_DTYPE_FLOAT8E5M2) | T_BIT(KILN_DTYPE_FLOAT8E5M2FNUZ))
#define T_ANY (T_NUM | T_BOOL)

/* Types the first input of each op may have (the kernels compute in them). */
static const struct {
    const char *op;
    uint32_t types;
} op_types[] = {
    {"BitShift", T_SINT | T_UINT}, {"BitwiseAnd", T_SINT | T_UINT}, {"BitwiseOr", T_SINT | T_UINT},
    {"BitwiseXor", T_SINT | T_UINT}, {"BitwiseNot", T_SINT | T_UINT},
    {"And", T_BOOL}, {"Or", T_BOOL}, {"Xor", T_BOOL}, {"Not", T_BOOL},
    {"Equal", T_ANY}, {"Where", T_ANY}, {"Cast", T_ANY | T_FP8}, {"CastLike", T_ANY | T_FP8},
    {"ReduceMax", T_ANY}, {"ReduceMin", T_ANY},
    {"Abs", T_NUM}, {"Neg", T_FLOAT | T_SINT}, {"Sign", T_NUM}, {"Relu", T_FLOAT | T_SINT},
    {"Clip", T_NUM}, {"PRelu", T_NUM}, {"Max", T_NUM}, {"Min", T_NUM},
    {"Add", T_NUM}, {"Sub", T_NUM}, {"Mul", T_NUM}, {"Div", T_NUM}, {"Pow", T_NUM},
    {"Mod", T_NUM}, {"Greater", T_NUM}, {"GreaterOrEqual", T_NUM}, {"Less", T_NUM},
    {"LessOrEqual", T_NUM}, {"ReduceSum", T_NUM}, {"ReduceMean", T_NUM}, {"ReduceProd", T_NUM},
    {"ReduceL1", T_NUM}, {"ReduceL2", T_NUM}, {"ReduceLogSum", T_NUM},
    {"ReduceLogSumExp", T_NUM}, {"ReduceSumSquare", T_NUM}, {"ArgMax", T_NUM},
    {"ArgMin", T_NUM}, {"CumSum", T_NUM}, {"CumProd", T_NUM}, {"Shrink", T_NUM},
};

static uint32_t allowed_types(const kn_node *n) {
    for (size_t i = 0; i < KN_ARRAY_LEN(op_types); i++)
        if (strcmp(op_types[i].op, n->op_type) == 0)
            return op_types[i].types;
    return T_FLOAT; /* math, activations, Sum/Mean, softmax-likes, the chain */
}

static kiln_status check_type(const kn_infer *c, int i, uint32_t types) {
    kiln_dtype t = c->in[i].dtype;
    if ((unsigned)t < 32 && (types & T_BIT(t)))
        return KILN_OK;
    return kn_node_error(c->node, KILN_ERR_UNSUPPORTED,
                         "input %d has data type %s, which %s does not support", i,
                         kiln_dtype_name(t), c->node->op_type);
}

static kiln_status check_same_type(const kn_infer *c, int i, int j) {
    if (c->in[i].dtype == c->in[j].dtype)
        return KILN_OK;
    return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                         "inputs %d and %d must have the same data type, got %s and %s", i, j,
                         kiln_dtype_name(c->in[i].dtype), kiln_dtype_name(c->in[j].dtype));
}

static kiln_status need_inputs(const kn_infer *c, int n) {
    for (int i = 0; i < n; i++)
        if (!kn_has_in(c, i))
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "input %d is missing", i);
    return KILN_OK;
}

/* ---------------- unary ---------------- */

static kiln_status infer_unary(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    KN_TRY(check_type(c, 0, allowed_types(c->node)));
    kn_same_as(&c->out[0], &c->in[0]);
    return KILN_OK;
}

static kiln_status infer_unary_bool(kn_infer *c) {
    KN_TRY(infer_unary(c));
    c->out[0].dtype = KILN_DTYPE_BOOL;
    return KILN_OK;
}

static kiln_status infer_clip(kn_infer *c) {
    KN_TRY(infer_unary(c));
    for (int i = 1; i <= 2; i++) {
        if (!kn_has_in(c, i))
            continue;
        KN_TRY(check_same_type(c, 0, i));
        if (kn_numel(c->in[i].rank, c->in[i].dims) != 1)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "input %d (%s) must be a scalar", i,
                                 i == 1 ? "min" : "max");
    }
    return KILN_OK;
}

/* ---------------- binary and variadic ---------------- */

/* Before opset 7, broadcasting binary ops took attributes broadcast=1 and
 * axis: B's dims then line up with A's starting at axis. Rewrites b into the
 * numpy-style shape that means the same. */
static kiln_status legacy_broadcast(const kn_infer *c, kn_tinfo *b) {
    const kn_node *n = c->node;
    if (n->opset <= 0 || n->opset >= 7 || !kn_attr_int(n, "broadcast", 0) ||
        !kn_attr_find(n, "axis"))
        return KILN_OK;
    int ra = c->in[0].rank, axis;
    KN_TRY(kn_axis(c, kn_attr_int(n, "axis", 0), ra, &axis));
    int rank = ra - axis;
    if (b->rank > rank)
        return kn_node_error(n, KILN_ERR_SHAPE, "B has rank %d, more than A's rank %d past axis %d",
                             b->rank, ra, axis);
    for (int d = b->rank; d < rank; d++)
        b->dims[d] = 1;
    b->rank = rank;
    return KILN_OK;
}

static kiln_status infer_binary(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    uint32_t types = allowed_types(c->node);
    KN_TRY(check_type(c, 0, types));
    if (strcmp(c->node->op_type, "Pow") == 0)
        KN_TRY(check_type(c, 1, T_NUM));
    else
        KN_TRY(check_same_type(c, 0, 1));
    if (strcmp(c->node->op_type, "BitShift") == 0) {
        const char *dir = kn_attr_string(c->node, "direction", "");
        if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                                 "direction must be \"LEFT\" or \"RIGHT\", got \"%s\"", dir);
    }
    kn_tinfo b = c->in[1];
    KN_TRY(legacy_broadcast(c, &b));
    KN_TRY(kn_broadcast(c, &c->in[0], &b, &c->out[0]));
    c->out[0].dtype = c->in[0].dtype;
    return KILN_OK;
}

static kiln_status infer_compare(kn_infer *c) {
    KN_TRY(infer_binary(c));
    c->out[0].dtype = KILN_DTYPE_BOOL;
    return KILN_OK;
}

static kiln_status infer_prelu(kn_infer *c) {
    KN_TRY(infer_binary(c));
    /* the slope broadcasts into X; the output keeps X's shape */
    if (c->out[0].rank != c->in[0].rank ||
        memcmp(c->out[0].dims, c->in[0].dims, sizeof(int64_t) * (size_t)c->in[0].rank) != 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "slope does not broadcast to X's shape");
    return KILN_OK;
}

static kiln_status infer_variadic(kn_infer *c) {
    if (c->n_in < 1)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "needs at least one input");
    KN_TRY(need_inputs(c, c->n_in));
    KN_TRY(check_type(c, 0, allowed_types(c->node)));
    kn_tinfo acc = c->in[0];
    for (int i = 1; i < c->n_in; i++) {
        KN_TRY(check_same_type(c, 0, i));
        KN_TRY(kn_broadcast(c, &acc, &c->in[i], &acc));
    }
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].rank = acc.rank;
    memcpy(c->out[0].dims, acc.dims, sizeof acc.dims);
    return KILN_OK;
}

static kiln_status infer_where(kn_infer *c) {
    KN_TRY(need_inputs(c, 3));
    if (c->in[0].dtype != KILN_DTYPE_BOOL)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                             "condition must be bool, got %s", kiln_dtype_name(c->in[0].dtype));
    KN_TRY(check_type(c, 1, T_ANY));
    KN_TRY(check_same_type(c, 1, 2));
    kn_tinfo acc;
    KN_TRY(kn_broadcast(c, &c->in[0], &c->in[1], &acc));
    KN_TRY(kn_broadcast(c, &acc, &c->in[2], &c->out[0]));
    c->out[0].dtype = c->in[1].dtype;
    return KILN_OK;
}

/* ---------------- Cast ---------------- */

/* Cast to and from string (CPU, src/backends/cpu/k_string.c): numbers and
 * bool to text and back; float8 and bfloat16 stay out. */
#define T_STRING_PEER (T_NUM | T_BOOL)

static kiln_status infer_cast(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    KN_TRY(check_type(c, 0, T_ANY | T_FP8 | T_BIT(KILN_DTYPE_STRING)));
    kiln_dtype to;
    if (strcmp(c->node->op_type, "CastLike") == 0) {
        KN_TRY(need_inputs(c, 2));
        to = c->in[1].dtype;
    } else {
        const kn_attr *a = kn_attr_find(c->node, "to");
        if (!a)
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "attribute 'to' is missing");
        to = (kiln_dtype)a->i;
    }
    if ((unsigned)to >= 32 || !((T_ANY | T_FP8 | T_BIT(KILN_DTYPE_STRING)) & T_BIT(to)))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "cannot cast to %s (type %d)",
                             kiln_dtype_name(to), (int)to);
    kiln_dtype from = c->in[0].dtype;
    if ((from == KILN_DTYPE_STRING || to == KILN_DTYPE_STRING) && from != to &&
        !(T_STRING_PEER & T_BIT(from == KILN_DTYPE_STRING ? to : from)))
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "cannot cast %s to %s",
                             kiln_dtype_name(from), kiln_dtype_name(to));
    kn_same_as(&c->out[0], &c->in[0]);
    c->out[0].dtype = to;
    return KILN_OK;
}

static kiln_status infer_bitcast(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    const kn_attr *a = kn_attr_find(c->node, "to");
    if (!a)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "attribute 'to' is missing");
    kiln_dtype from = c->in[0].dtype, to = (kiln_dtype)a->i;
    size_t fs = kiln_dtype_size(from), ts = (unsigned)to < 32 ? kiln_dtype_size(to) : 0;
    if (fs == 0 || ts == 0 || to == KILN_DTYPE_STRING)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "cannot reinterpret %s as type %d",
                             kiln_dtype_name(from), (int)to);
    if (fs != ts)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                             "%s and %s differ in width (%zu and %zu bytes)", kiln_dtype_name(from),
                             kiln_dtype_name(to), fs, ts);
    kn_same_as(&c->out[0], &c->in[0]);
    c->out[0].dtype = to;
    return KILN_OK;
}

/* ---------------- reductions ---------------- */

/* Mark the reduced axes of a Reduce* node; *noop when it copies its input. */
static kiln_status reduce_mask(const kn_infer *c, uint32_t *mask, bool *noop) {
    int rank = c->in[0].rank;
    int64_t na = 0;
    const int64_t *attr = NULL;
    bool from_input = kn_has_in(c, 1);
    *mask = 0;
    *noop = false;
    if (from_input) {
        na = kn_numel(c->in[1].rank, c->in[1].dims);
        if (c->in[1].rank > 1)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "axes must be 1-D");
        if (na > 0 && !c->in[1].value)
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                                 "the axes input's value is not known at shape time");
    } else {
        size_t cnt;
        attr = kn_attr_ints(c->node, "axes", &cnt);
        na = (int64_t)cnt;
    }
    if (na == 0) {
        if (kn_attr_int(c->node, "noop_with_empty_axes", 0))
            *noop = true;
        else
            *mask = rank ? (uint32_t)((1u << rank) - 1u) : 0;
        return KILN_OK;
    }
    for (int64_t k = 0; k < na; k++) {
        int64_t a = from_input ? kn_value_int(&c->in[1], k) : attr[k];
        int ax = 0;
        KN_TRY(kn_axis(c, a, rank, &ax));
        if (*mask & (1u << ax))
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "axis %lld is repeated",
                                 (long long)a);
        *mask |= 1u << ax;
    }
    return KILN_OK;
}

static kiln_status infer_reduce(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    KN_TRY(check_type(c, 0, allowed_types(c->node)));
    uint32_t mask;
    bool noop;
    KN_TRY(reduce_mask(c, &mask, &noop));
    const kn_tinfo *x = &c->in[0];
    kn_tinfo *y = &c->out[0];
    y->dtype = x->dtype;
    if (noop) {
        kn_same_as(y, x);
        return KILN_OK;
    }
    bool keep = kn_attr_int(c->node, "keepdims", 1) != 0;
    y->rank = 0;
    for (int d = 0; d < x->rank; d++) {
        if (!(mask & (1u << d)))
            y->dims[y->rank++] = x->dims[d];
        else if (keep)
            y->dims[y->rank++] = 1;
    }
    return KILN_OK;
}

static kiln_status infer_argmax(kn_infer *c) {
    KN_TRY(need_inputs(c, 1));
    KN_TRY(check_type(c, 0, T_NUM));
    const kn_tinfo *x = &c->in[0];
    int axis = 0;
    KN_TRY(kn_axis(c, kn_attr_int(c->node, "axis", 0), x->rank, &axis));
    if (x->rank > 0 && x->dims[axis] == 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "axis %d has size 0", axis);
    bool keep = kn_attr_int(c->node, "keepdims", 1) != 0;
    kn_tinfo *y = &c->out[0];
    y->dtype = KILN_DTYPE_INT64;
    y->rank = 0;
    for (int d = 0; d < x->rank; d++) {
        if (d != axis)
            y->dims[y->rank++] = x->dims[d];
        else if (keep)
            y->dims[y->rank++] = 1;
    }
    return KILN_OK;
}

/* ---------------- axis ops ---------------- */

static kiln_status infer_softmax(kn_infer *c) {
    KN_TRY(infer_unary(c));
    bool legacy = c->node->opset > 0 && c->node->opset < 13;
    int axis = 0;
    KN_TRY(kn_axis(c, kn_attr_int(c->node, "axis", legacy ? 1 : -1), c->in[0].rank, &axis));
    return KILN_OK;
}

static kiln_status infer_cumsum(kn_infer *c) {
    KN_TRY(need_inputs(c, 2));
    KN_TRY(check_type(c, 0, T_NUM));
    const kn_tinfo *a = &c->in[1];
    if (a->dtype != KILN_DTYPE_INT32 && a->dtype != KILN_DTYPE_INT64)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                             "axis must be int32 or int64, got %s", kiln_dtype_name(a->dtype));
    if (kn_numel(a->rank, a->dims) != 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "axis must be a scalar");
    if (a->value) {
        int axis = 0;
        KN_TRY(kn_axis(c, kn_value_int(a, 0), c->in[0].rank, &axis));
    }
    kn_same_as(&c->out[0], &c->in[0]);
    return KILN_OK;
}

/* ---------------- kiln::ElementwiseChain ---------------- */

#define KN_CHAIN_MAX_IN 16

static kiln_status infer_chain(kn_infer *c) {
    if (c->n_in < 1)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "needs at least one input");
    KN_TRY(need_inputs(c, c->n_in));
    KN_TRY(check_type(c, 0, T_FLOAT));
    const kn_attr *ops = kn_attr_find(c->node, "ops");
    size_t n_operand;
    const int64_t *operand = kn_attr_ints(c->node, "operand", &n_operand);
    if (!ops || ops->type != KN_ATTR_STRINGS || ops->n == 0 || n_operand != ops->n)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                             "needs attributes 'ops' (strings) and 'operand' (ints), one per op");
    for (size_t i = 0; i < n_operand; i++)
        if (operand[i] >= c->n_in || operand[i] < -1)
            return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                                 "op %zu names operand %lld but the node has %d inputs", i,
                                 (long long)operand[i], c->n_in);
    /* views: 2 per input, (offset, n): input i is columns [offset,
     * offset + n) of its rows (n 0: the whole input) */
    size_t nv = 0;
    const int64_t *views = kn_attr_ints(c->node, "views", &nv);
    if (views && nv != 2 * (size_t)c->n_in)
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT,
                             "'views' has %zu values, 2 per input (%d inputs)", nv, c->n_in);
    kn_tinfo lin[KN_CHAIN_MAX_IN];
    if (c->n_in > KN_CHAIN_MAX_IN && views)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "views on more than %d inputs",
                             KN_CHAIN_MAX_IN);
    for (int i = 0; views && i < c->n_in; i++) {
        lin[i] = c->in[i];
        if (views[2 * i + 1] <= 0)
            continue;
        int r = lin[i].rank;
        if (r < 1 || views[2 * i] < 0 ||
            (lin[i].dims[r - 1] >= 0 && views[2 * i] + views[2 * i + 1] > lin[i].dims[r - 1]))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "input %d's view [%lld, %lld) is outside its rows", i,
                                 (long long)views[2 * i], (long long)(views[2 * i] + views[2 * i + 1]));
        lin[i].dims[r - 1] = views[2 * i + 1];
    }
    const kn_tinfo *in = views ? lin : c->in;
    kn_tinfo acc = in[0];
    for (int i = 1; i < c->n_in; i++) {
        KN_TRY(check_type(c, i, T_NUM));
        KN_TRY(kn_broadcast(c, &acc, &in[i], &acc));
    }
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].rank = acc.rank;
    memcpy(c->out[0].dims, acc.dims, sizeof acc.dims);
    return KILN_OK;
}

/* ---------------- the table ---------------- */

#define AXES_INPUT (1u << 1)

const kn_op_schema kn_ops_elementwise[] = {
    {"Add", "", infer_binary, 0}, {"Sub", "", infer_binary, 0},
    {"Mul", "", infer_binary, 0}, {"Div", "", infer_binary, 0},
    {"Pow", "", infer_binary, 0}, {"Mod", "", infer_binary, 0},
    {"BitShift", "", infer_binary, 0}, {"BitwiseAnd", "", infer_binary, 0},
    {"BitwiseOr", "", infer_binary, 0}, {"BitwiseXor", "", infer_binary, 0},
    {"PRelu", "", infer_prelu, 0},
    {"Equal", "", infer_compare, 0}, {"Greater", "", infer_compare, 0},
    {"GreaterOrEqual", "", infer_compare, 0}, {"Less", "", infer_compare, 0},
    {"LessOrEqual", "", infer_compare, 0}, {"And", "", infer_compare, 0},
    {"Or", "", infer_compare, 0}, {"Xor", "", infer_compare, 0},
    {"Max", "", infer_variadic, 0}, {"Min", "", infer_variadic, 0},
    {"Sum", "", infer_variadic, 0}, {"Mean", "", infer_variadic, 0},
    {"Where", "", infer_where, 0},
    {"Abs", "", infer_unary, 0}, {"Neg", "", infer_unary, 0}, {"Sign", "", infer_unary, 0},
    {"Reciprocal", "", infer_unary, 0}, {"Floor", "", infer_unary, 0},
    {"Ceil", "", infer_unary, 0}, {"Round", "", infer_unary, 0}, {"Sqrt", "", infer_unary, 0},
    {"Exp", "", infer_unary, 0}, {"Log", "", infer_unary, 0}, {"Sin", "", infer_unary, 0},
    {"Cos", "", infer_unary, 0}, {"Tan", "", infer_unary, 0}, {"Asin", "", infer_unary, 0},
    {"Acos", "", infer_unary, 0}, {"Atan", "", infer_unary, 0}, {"Sinh", "", infer_unary, 0},
    {"Cosh", "", infer_unary, 0}, {"Asinh", "", infer_unary, 0},
    {"Acosh", "", infer_unary, 0}, {"Atanh", "", infer_unary, 0}, {"Erf", "", infer_unary, 0},
    {"Tanh", "", infer_unary, 0}, {"Relu", "", infer_unary, 0},
    {"LeakyRelu", "", infer_unary, 0}, {"Elu", "", infer_unary, 0},
    {"Selu", "", infer_unary, 0}, {"Celu", "", infer_unary, 0},
    {"ThresholdedRelu", "", infer_unary, 0}, {"Sigmoid", "", infer_unary, 0},
    {"HardSigmoid", "", infer_unary, 0}, {"HardSwish", "", infer_unary, 0},
    {"Softplus", "", infer_unary, 0}, {"Softsign", "", infer_unary, 0},
    {"Gelu", "", infer_unary, 0}, {"Mish", "", infer_unary, 0}, {"Swish", "", infer_unary, 0},
    {"Not", "", infer_unary, 0}, {"BitwiseNot", "", infer_unary, 0},
    {"IsNaN", "", infer_unary_bool, 0}, {"IsInf", "", infer_unary_bool, 0},
    {"Clip", "", infer_clip, 0},
    {"Cast", "", infer_cast, 0}, {"CastLike", "", infer_cast, 0},
    {"BitCast", "", infer_bitcast, 0},
    {"ReduceSum", "", infer_reduce, AXES_INPUT}, {"ReduceMean", "", infer_reduce, AXES_INPUT},
    {"ReduceMax", "", infer_reduce, AXES_INPUT}, {"ReduceMin", "", infer_reduce, AXES_INPUT},
    {"ReduceProd", "", infer_reduce, AXES_INPUT}, {"ReduceL1", "", infer_reduce, AXES_INPUT},
    {"ReduceL2", "", infer_reduce, AXES_INPUT},
    {"ReduceLogSum", "", infer_reduce, AXES_INPUT},
    {"ReduceLogSumExp", "", infer_reduce, AXES_INPUT},
    {"ReduceSumSquare", "", infer_reduce, AXES_INPUT},
    {"ArgMax", "", infer_argmax, 0}, {"ArgMin", "", infer_argmax, 0},
    {"Softmax", "", infer_softmax, 0}, {"LogSoftmax", "", infer_softmax, 0},
    {"Hardmax", "", infer_softmax, 0},
    {"CumSum", "", infer_cumsum, 1u << 1}, /* the axis: a host value at run time */
    {"CumProd", "", infer_cumsum, 1u << 1}, {"Shrink", "", infer_unary, 0},
    {"ElementwiseChain", KN_DOMAIN_KILN, infer_chain, 0},
};
const size_t kn_ops_elementwise_count = KN_ARRAY_LEN(kn_ops_elementwise);
