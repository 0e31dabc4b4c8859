/* k_loss.c - the reference CPU kernels of NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (graph/loss.h), in double. SoftmaxCrossEntropyLoss
 * is log-softmax over the class axis followed by the same loss. */
#include <math.h>
#include <string.h>

#include "graph/loss.h"
#include "k_nn.h"

static kiln_status loss_setup(const kb_run *r, kn_loss *g) {
    kn_tinfo ti[3];
    int n = r->n_in < 3 ? r->n_in : 3;
    kb_tinfo_of(r->in, n, ti);
    return kn_loss_geom(r->node, ti, n, g);
}

/* log-softmax over the class axis of x [n, classes, inner] into lp (double). */
static void log_softmax(const kb_tensor *x, const kn_loss *g, double *lp) {
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t d = 0; d < g->inner; d++) {
            size_t base = (size_t)(b * g->classes * g->inner + d);
            double mx = -INFINITY, sum = 0.0;
            for (int64_t c = 0; c < g->classes; c++) {
                double v = kb_ld(x->data, x->dtype, base + (size_t)(c * g->inner));
                mx = v > mx ? v : mx;
            }
            for (int64_t c = 0; c < g->classes; c++)
                sum += exp(kb_ld(x->data, x->dtype, base + (size_t)(c * g->inner)) - mx);
            double lse = mx + log(sum);
            for (int64_t c = 0; c < g->classes; c++) {
                size_t i = base + (size_t)(c * g->inner);
                lp[i] = kb_ld(x->data, x->dtype, i) - lse;
            }
        }
}

/* The loss from log-probabilities lp (double, or NULL to read x): each
 * sample's -lp[target] * weight[target], reduced as g says. */
static kiln_status nll(const kb_run *r, const kn_loss *g, const kb_tensor *x, const double *lp) {
    const kb_tensor *t = &r->in[1], *w = g->weighted ? &r->in[2] : NULL;
    kb_tensor *y = &r->out[0];
    double loss_sum = 0.0, weight_sum = 0.0;
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t d = 0; d < g->inner; d++) {
            size_t s = (size_t)(b * g->inner + d);
            int64_t c = (int64_t)kb_ld(t->data, t->dtype, s);
            double loss = 0.0, wt = 0.0;
            if (kn_loss_counts(g, c)) {
                size_t i = (size_t)((b * g->classes + c) * g->inner + d);
                wt = w ? kb_ld(w->data, w->dtype, (size_t)c) : 1.0;
                loss = -(lp ? lp[i] : kb_ld(x->data, x->dtype, i)) * wt;
            } else if (!(g->has_ignore && c == g->ignore)) {
                return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                     "target element %zu is %lld, not a class in [0, %lld) nor the "
                                     "ignore_index",
                                     s, (long long)c, (long long)g->classes);
            }
            if (g->reduction == KN_LOSS_NONE)
                kb_st(y->data, y->dtype, s, loss);
            loss_sum += loss;
            weight_sum += wt;
        }
    if (g->reduction != KN_LOSS_NONE)
        kb_st(y->data, y->dtype, 0, kn_loss_reduce(g, loss_sum, weight_sum));
    return KILN_OK;
}

kiln_status kb_nll_loss_run(const kb_run *r) {
    kn_loss g;
    KN_TRY(loss_setup(r, &g));
    return nll(r, &g, &r->in[0], NULL);
}

/* The workspace holds the log-probabilities in double. */
kiln_status kb_sce_loss_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                                const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    *workspace = (size_t)kb_numel(&in[0]) * sizeof(double);
    return KILN_OK;
}

kiln_status kb_sce_loss_run(const kb_run *r) {
    kn_loss g;
    KN_TRY(loss_setup(r, &g));
    const kb_tensor *x = &r->in[0];
    size_t count = (size_t)kb_numel(x);
    if (r->workspace_size < count * sizeof(double))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    double *lp = r->workspace;
    log_softmax(x, &g, lp);
    if (r->n_out > 1 && r->out[1].data)
        for (size_t i = 0; i < count; i++)
            kb_st(r->out[1].data, r->out[1].dtype, i, lp[i]);
    return nll(r, &g, x, lp);
}
