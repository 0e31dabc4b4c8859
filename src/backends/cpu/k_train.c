/* k_train.c - reference CPU kernels of ai.onnx.preview.training's
 * optimizers (src/graph/ops_train.c): one update step per tensor group,
 * element by element in double, as ONNX defines them. */
#include <math.h>
#include <string.h>

#include "k_nn.h"

static double ld(const kb_tensor *t, int64_t i) { return kb_ld(t->data, t->dtype, (size_t)i); }
static void st(kb_tensor *t, int64_t i, double v) {
    if (t->data)
        kb_st(t->data, t->dtype, (size_t)i, v);
}

static kiln_status optimizer_run(const kb_run *r) {
    const kn_node *n = r->node;
    const char *op = n->op_type;
    bool adam = strcmp(op, "Adam") == 0, adagrad = strcmp(op, "Adagrad") == 0;
    int groups = adam ? 4 : 3, k = (r->n_in - 2) / groups;
    double rate = ld(&r->in[0], 0);
    int64_t step = ((const int64_t *)r->in[1].data)[0];
    double norm = kn_attr_float(n, "norm_coefficient", 0.f);
    for (int i = 0; i < k; i++) {
        const kb_tensor *x = &r->in[2 + i], *g = &r->in[2 + k + i], *s1 = &r->in[2 + 2 * k + i];
        kb_tensor *xo = &r->out[i], *s1o = &r->out[k + i];
        int64_t m = kb_numel(x);
        if (adagrad) {
            /* r = R / (1 + T * decay); H' = H + g^2; X' = X - r * g / (sqrt(H') + eps) */
            double decay = kn_attr_float(n, "decay_factor", 0.f);
            double eps = kn_attr_float(n, "epsilon", 1e-6f);
            double rr = rate / (1.0 + (double)step * decay);
            for (int64_t e = 0; e < m; e++) {
                double gr = norm * ld(x, e) + ld(g, e), h = ld(s1, e) + gr * gr;
                st(s1o, e, h);
                st(xo, e, ld(x, e) - rr * gr / (sqrt(h) + eps));
            }
        } else if (!adam) {
            /* V' = alpha * V + beta' * g (beta' = 1 at T = 0); standard:
             * X' = X - R * V'; nesterov: X' = X - R * (g + alpha * V') */
            double alpha = kn_attr_float(n, "alpha", 0.f), beta = kn_attr_float(n, "beta", 0.f);
            bool nesterov = strcmp(kn_attr_string(n, "mode", "standard"), "nesterov") == 0;
            double bb = step > 0 ? beta : 1.0;
            for (int64_t e = 0; e < m; e++) {
                double gr = norm * ld(x, e) + ld(g, e), v = alpha * ld(s1, e) + bb * gr;
                st(s1o, e, v);
                st(xo, e, ld(x, e) - rate * (nesterov ? gr + alpha * v : v));
            }
        } else {
            /* V' = alpha V + (1 - alpha) g; H' = beta H + (1 - beta) g^2;
             * R' = R sqrt(1 - beta^T) / (1 - alpha^T) for T > 0;
             * X' = (1 - norm_post) (X - R' V' / (sqrt(H') + eps)) */
            double alpha = kn_attr_float(n, "alpha", 0.9f), beta = kn_attr_float(n, "beta", 0.999f);
            double eps = kn_attr_float(n, "epsilon", 1e-6f);
            double post = kn_attr_float(n, "norm_coefficient_post", 0.f);
            double rr = step > 0 ? rate * sqrt(1.0 - pow(beta, (double)step)) /
                                       (1.0 - pow(alpha, (double)step))
                                 : rate;
            const kb_tensor *s2 = &r->in[2 + 3 * k + i];
            kb_tensor *s2o = &r->out[2 * k + i];
            for (int64_t e = 0; e < m; e++) {
                double gr = norm * ld(x, e) + ld(g, e);
                double v = alpha * ld(s1, e) + (1.0 - alpha) * gr;
                double h = beta * ld(s2, e) + (1.0 - beta) * gr * gr;
                st(s1o, e, v);
                st(s2o, e, h);
                st(xo, e, (1.0 - post) * (ld(x, e) - rr * v / (sqrt(h) + eps)));
            }
        }
    }
    return KILN_OK;
}

#define TRAIN_DOMAIN "ai.onnx.preview.training"

const kb_kernel kb_cpu_train[] = {
    {"Adagrad", TRAIN_DOMAIN, "ref", NULL, NULL, NULL, NULL, NULL, optimizer_run},
    {"Momentum", TRAIN_DOMAIN, "ref", NULL, NULL, NULL, NULL, NULL, optimizer_run},
    {"Adam", TRAIN_DOMAIN, "ref", NULL, NULL, NULL, NULL, NULL, optimizer_run},
};
const size_t kb_cpu_train_count = KN_ARRAY_LEN(kb_cpu_train);
