/* pass_layernorm.c - sums feeding a LayerNormalization become one
 * kiln::LayerNorm (graph/fused.h): an Add, or an ElementwiseChain of Adds,
 * whose only reader is a LayerNormalization over the last axis, with every
 * term but one a suffix of the sum's shape (a residual, or a per-position
 * table); the full-shape term may itself be a Gather of rows from a
 * constant [V, H] table (an embedding lookup), which the fused op then does
 * itself. BERT's embeddings (word rows + position and token-type tables,
 * normalized) become one pass over the rows instead of three. A sum also
 * read elsewhere (x = x + h; y = LN(x); later x + ...: CLIP's and ViT's
 * embeddings before the first pre-norm block) is the fused op's second
 * output, as SkipLayerNormalization's. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

enum { LN_MAX_TERMS = 1 + KN_LN_MAX_ADD };

/* Whether r is a suffix of y's shape (kn_suffix_of) at every profile point. */
static bool suffix_everywhere(const kpass *p, int r, int y) {
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *a = kpass_shape(p, k, r), *b = kpass_shape(p, k, y);
        if (!a || !b || !kn_suffix_of(a, b))
            return false;
    }
    return true;
}

/* The terms the node sums, the running value first: an Add's two inputs,
 * or a chain of Adds' X0 then each step's operand. 0 when it is neither. */
static int sum_terms(const kn_node *n, int *terms) {
    if (kpass_is(n, "Add") && n->n_in == 2 && n->n_out == 1) {
        terms[0] = n->in[0];
        terms[1] = n->in[1];
        return 2;
    }
    if (!kpass_is_kiln(n, "ElementwiseChain") || n->n_in < 1)
        return 0;
    const kn_attr *ops = kn_attr_find(n, "ops");
    size_t n_opd = 0;
    const int64_t *opd = kn_attr_ints(n, "operand", &n_opd);
    if (!ops || ops->type != KN_ATTR_STRINGS || !opd || n_opd != (size_t)ops->n ||
        ops->n + 1 > (size_t)LN_MAX_TERMS)
        return 0;
    terms[0] = n->in[0];
    for (int i = 0; i < (int)ops->n; i++) {
        if (strcmp(ops->strings[i], "Add") != 0 || opd[i] < 0 || opd[i] >= n->n_in)
            return 0;
        terms[i + 1] = n->in[opd[i]];
    }
    return (int)ops->n + 1;
}

/* LayerNormalization node i normalizing its input's last axis, with H
 * values of Scale (and B), and no Mean / InvStdDev read. */
static bool plain_layernorm(const kpass *p, int i, int *h) {
    const kn_node *n = &p->net->nodes[i];
    if (!kpass_is(n, "LayerNormalization") || n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0)
        return false;
    for (int j = 1; j < n->n_out; j++)
        if (n->out[j] >= 0 && p->uses[n->out[j]] > 0)
            return false;
    int rank = kpass_rank(p, n->in[0]);
    int64_t axis = kn_attr_int(n, "axis", -1);
    if (rank < 1 || (axis != -1 && axis != rank - 1))
        return false;
    const kn_tinfo *x0 = kpass_shape(p, 0, n->in[0]);
    if (!x0)
        return false;
    int64_t hh = x0->dims[rank - 1];
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *xk = kpass_shape(p, k, n->in[0]);
        if (!xk || xk->dims[rank - 1] != hh)
            return false;
    }
    for (int j = 1; j < 3 && j < n->n_in; j++) {
        if (n->in[j] < 0)
            continue;
        const kn_tinfo *s = kpass_shape(p, 0, n->in[j]);
        if (!s || kn_numel(s->rank, s->dims) != hh || kpass_dtype(p, n->in[j]) != KILN_DTYPE_FLOAT)
            return false;
    }
    *h = (int)hh;
    return hh > 0 && kpass_dtype(p, n->in[0]) == KILN_DTYPE_FLOAT;
}

/* A Gather of rows (axis 0) from a constant float [V, H] table by integer
 * ids, read only by `reader`; -1 otherwise. */
static int row_gather(const kpass *p, int t, int reader) {
    int g = kpass_producer(p, t);
    if (g < 0 || kpass_sole_reader(p, t) != reader)
        return -1;
    const kn_node *n = &p->net->nodes[g];
    if (!kpass_is(n, "Gather") || n->n_in != 2 || n->n_out != 1 || kn_attr_int(n, "axis", 0) != 0)
        return -1;
    int table = n->in[0], ids = n->in[1];
    if (!kpass_is_const(p->net, table) || p->net->tensors[table].value.rank != 2 ||
        p->net->tensors[table].value.dtype != KILN_DTYPE_FLOAT)
        return -1;
    kiln_dtype it = kpass_dtype(p, ids);
    return it == KILN_DTYPE_INT64 || it == KILN_DTYPE_INT32 ? g : -1;
}

static kiln_status fuse(kpass *p, int ln, int sum, int gather, const int *terms, int n_terms,
                        int main_term, bool keep_sum) {
    kn_net *net = p->net;
    const kn_node *l = &net->nodes[ln];
    int in[4 + KN_LN_MAX_ADD], n_in = 4;
    in[0] = gather >= 0 ? net->nodes[gather].in[0] : terms[main_term];
    in[1] = l->in[1];
    in[2] = l->n_in > 2 ? l->in[2] : -1;
    in[3] = gather >= 0 ? net->nodes[gather].in[1] : -1;
    for (int k = 0; k < n_terms; k++)
        if (k != main_term)
            in[n_in++] = terms[k];
    char name[1024];
    snprintf(name, sizeof name, "%s%s%s + %s", gather >= 0 ? net->nodes[gather].name : "",
             gather >= 0 ? " + " : "", net->nodes[sum].name, l->name);
    int outs[2] = {l->out[0], l->in[0]}, gi;
    float eps = kn_attr_float(l, "epsilon", 1e-5f);
    kpass_kill(p, ln);
    kpass_kill(p, sum);
    if (gather >= 0)
        kpass_kill(p, gather);
    KN_TRY(kn_net_add_node(net, name, "LayerNorm", KN_DOMAIN_KILN, 1, n_in, in, keep_sum ? 2 : 1,
                           outs, &gi));
    kn_node *g = &net->nodes[gi];
    KN_TRY(kn_node_set_float(g, "epsilon", eps));
    KN_TRY(kn_node_set_int(g, "gather", gather >= 0));
    kn_log(KILN_LOG_VERBOSE, "layernorm: %d term(s)%s -> kiln::LayerNorm '%s'%s", n_terms,
           gather >= 0 ? " and a row gather" : "", name, keep_sum ? ", the sum kept as output 1" : "");
    return KILN_OK;
}

static bool is_layernorm(const kn_node *n) { return kpass_is(n, "LayerNormalization"); }

kiln_status kpass_layernorm(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_shapes_if(p, is_layernorm, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        int h = 0;
        if (!kpass_free(p, i) || !plain_layernorm(p, i, &h))
            continue;
        int x = net->nodes[i].in[0];
        int s = kpass_producer(p, x);
        if (s < 0)
            continue;
        /* a sum also read elsewhere (the residual stream) stays an output */
        bool keep_sum = kpass_sole_reader(p, x) != i;
        int terms[LN_MAX_TERMS];
        int n_terms = sum_terms(&net->nodes[s], terms);
        if (n_terms < 2)
            continue;
        /* one term of the sum's full shape (the rows); the others repeat
         * whole rows (suffixes); all float */
        int main_term = -1;
        bool ok = true;
        for (int k = 0; k < n_terms && ok; k++) {
            int t = terms[k];
            ok = t >= 0 && kpass_dtype(p, t) == KILN_DTYPE_FLOAT;
            if (ok && main_term < 0 && !kpass_is_const(net, t) && kpass_same_shape(p, t, x))
                main_term = k;
        }
        if (!ok || main_term < 0)
            continue;
        for (int k = 0; k < n_terms && ok; k++)
            ok = k == main_term || suffix_everywhere(p, terms[k], x);
        /* the rows may come from a table lookup that only this sum reads
         * (a term used twice is left as it is) */
        int gather = -1;
        if (ok) {
            int uses_in_sum = 0;
            for (int k = 0; k < n_terms; k++)
                uses_in_sum += terms[k] == terms[main_term];
            if (uses_in_sum == 1)
                gather = row_gather(p, terms[main_term], s);
        }
        if (!ok)
            continue;
        KN_TRY(fuse(p, i, s, gather, terms, n_terms, main_term, keep_sum));
        (*changed)++;
    }
    return KILN_OK;
}
