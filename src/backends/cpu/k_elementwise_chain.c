/* k_elementwise_chain.c - reference kernel of kiln::ElementwiseChain (see
 * graph/fused.h): a run of elementwise ops applied to one accumulator row by
 * row, reusing the family's unary and binary loops, so intermediate values
 * never leave the stack buffers.
 *
 * Parameters: alphas[i]/betas[i] replace the op's ONNX attributes where the
 * op has them: LeakyRelu, Elu, Celu, ThresholdedRelu, Swish (alpha), HardSigmoid
 * (alpha, beta), Selu (alpha, gamma = beta), Clip (min = alpha, max = beta).
 * Ops without parameters ignore them; absent lists keep ONNX defaults.
 * "Gelu" is the erf form, "GeluTanh" the tanh form. */
#include <string.h>

#include "k_elementwise.h"

typedef struct chain_step {
    const kb_unary_op *un;    /* one of un / bin */
    const kb_binary_op *bin;
    int operand;              /* input index of the second operand, binary only */
    bool swap;                /* chain value is the second operand */
    kb_uparam p;
} chain_step;

typedef struct chain_state {
    int n;
    chain_step *steps;
} chain_state;

void kb_ew_fini_chain(void *state) {
    chain_state *s = state;
    if (!s)
        return;
    kn_free(s->steps);
    kn_free(s);
}

kiln_status kb_ew_init_chain(const kn_node *node, void **state) {
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
                             "(%zu ops)",
                             n);
    chain_state *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    s->steps = kn_calloc(n, sizeof *s->steps);
    if (!s->steps) {
        kn_free(s);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    s->n = (int)n;
    for (size_t i = 0; i < n; i++) {
        chain_step *st = &s->steps[i];
        const char *name = ops->strings[i];
        st->operand = (int)operand[i];
        st->swap = swap && swap[i];
        if (st->operand < 0) {
            st->un = kb_ew_unary_find(name);
            if (!st->un || st->un->bool_out || !st->un->fn[KB_F32]) {
                kb_ew_fini_chain(s);
                return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                     "op %zu of the chain ('%s') is not a supported unary op", i,
                                     name);
            }
        } else {
            st->bin = kb_ew_binary_find(name);
            if (!st->bin || st->bin->bool_out || !st->bin->fn[KB_F32] ||
                st->operand >= node->n_in) {
                kb_ew_fini_chain(s);
                return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                     "op %zu of the chain ('%s', operand %d) is not a supported "
                                     "binary op",
                                     i, name, st->operand);
            }
        }
        kb_ew_uparam_defaults(name, KB_F32, &st->p);
        bool two = strcmp(name, "HardSigmoid") == 0 || strcmp(name, "Clip") == 0;
        bool one = two || strcmp(name, "LeakyRelu") == 0 || strcmp(name, "Elu") == 0 ||
                   strcmp(name, "Celu") == 0 || strcmp(name, "ThresholdedRelu") == 0 ||
                   strcmp(name, "Selu") == 0 || strcmp(name, "Swish") == 0;
        if (alphas && one)
            st->p.alpha = alphas[i];
        if (betas && two)
            st->p.beta = betas[i];
        if (betas && strcmp(name, "Selu") == 0)
            st->p.gamma = betas[i];
    }
    *state = s;
    return KILN_OK;
}

typedef struct chain_units_ctx {
    const chain_state *s;
    kb_tensor *y;
    kb_ctype ct;
    const kb_tensor *const *ins;
    kb_bcast bc;
    int64_t segs;
    size_t ys;
    size_t cs;
} chain_units_ctx;

static void chain_units(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const chain_units_ctx *c_ = vc;
    const chain_state *s = c_->s;
    kb_tensor *y = c_->y;
    kb_ctype ct = c_->ct;
    const kb_tensor *const *ins = c_->ins;
    kb_bcast bc = c_->bc;
    int64_t segs = c_->segs;
    size_t ys = c_->ys;
    size_t cs = c_->cs;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        uint64_t acc[KB_EW_CHUNK], tmp[KB_EW_CHUNK];
        int64_t row = u / segs, i0 = (u % segs) * KB_EW_CHUNK;
        int64_t m = bc.inner - i0 < KB_EW_CHUNK ? bc.inner - i0 : KB_EW_CHUNK;
        int64_t off[KB_EW_MAX_IN];
        kb_bcast_row(&bc, row, off);
        const kb_tensor *x0 = ins[0];
        int64_t s0 = bc.stride[0][bc.rank - 1];
        size_t x0s = kiln_dtype_size(x0->dtype);
        kb_ew_load(x0->dtype, (const uint8_t *)x0->data + (size_t)(off[0] + i0 * s0) * x0s,
                   s0 ? m : 1, ct, acc);
        if (!s0)
            for (int64_t k = 1; k < m; k++)
                memcpy((uint8_t *)acc + (size_t)k * cs, acc, cs);
        for (int i = 0; i < s->n; i++) {
            const chain_step *st = &s->steps[i];
            if (st->un) {
                st->un->fn[ct](acc, acc, m, &st->p);
                continue;
            }
            int k = st->operand;
            int64_t sk = bc.stride[k][bc.rank - 1];
            size_t xs = kiln_dtype_size(ins[k]->dtype);
            const uint8_t *src = (const uint8_t *)ins[k]->data + (size_t)(off[k] + i0 * sk) * xs;
            const void *px = src;
            if (!kb_ew_native(ins[k]->dtype, ct)) {
                kb_ew_load(ins[k]->dtype, src, sk ? m : 1, ct, tmp);
                px = tmp;
            }
            if (st->swap)
                st->bin->fn[ct](px, sk, acc, 1, acc, m);
            else
                st->bin->fn[ct](acc, 1, px, sk, acc, m);
        }
        uint8_t *dst = (uint8_t *)y->data + (size_t)(row * bc.inner + i0) * ys;
        if (kb_ew_native(y->dtype, ct))
            memcpy(dst, acc, (size_t)m * cs);
        else
            kb_ew_store(y->dtype, dst, m, ct, acc);
    }
}

kiln_status kb_ew_run_chain(const kb_run *r) {
    const chain_state *s = r->state;
    kb_tensor *y = &r->out[0];
    int yct = kb_ew_ctype(y->dtype);
    if (yct != KB_F32 && yct != KB_F64)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "data type %s is not supported",
                             kiln_dtype_name(y->dtype));
    if (r->n_in > KB_EW_MAX_IN)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "more than %d inputs", KB_EW_MAX_IN);
    kb_ctype ct = (kb_ctype)yct;
    for (int i = 0; i < s->n; i++)
        if ((s->steps[i].un && !s->steps[i].un->fn[ct]) ||
            (s->steps[i].bin && !s->steps[i].bin->fn[ct]))
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "op %d has no %s loop", i,
                                 kiln_dtype_name(y->dtype));
    const kb_tensor *ins[KB_EW_MAX_IN];
    kb_tensor vin[KB_EW_MAX_IN];
    int64_t rows[KB_EW_MAX_IN];
    size_t nv = 0;
    const int64_t *views = kn_attr_ints(r->node, "views", &nv);
    for (int k = 0; k < r->n_in; k++) {
        ins[k] = &r->in[k];
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
    }
    kb_bcast bc;
    kb_bcast_init_rows(&bc, r->n_in, ins, y, rows);
    if (bc.total <= 0)
        return KILN_OK;
    int64_t segs = (bc.inner + KB_EW_CHUNK - 1) / KB_EW_CHUNK, units = bc.rows * segs;
    size_t ys = kiln_dtype_size(y->dtype), cs = kb_ew_csize(ct);
    {
        chain_units_ctx c_ = {s, y, ct, ins, bc, segs, ys, cs};
        kn_parallel_for(bc.total >= KB_EW_PAR_MIN / 4 ? r->threads : 1, units, 0, chain_units, &c_);
    }
    return KILN_OK;
}
