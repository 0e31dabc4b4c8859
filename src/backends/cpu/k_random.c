/* k_random.c - the reference CPU kernels of RandomUniform, RandomNormal,
 * their -Like forms, Bernoulli and Multinomial: graph/random.h's numbers,
 * element by element. A context's instance holds the key and counts its
 * runs, so each run draws new numbers. */
#include <math.h>

#include "graph/ops_tensor.h"
#include "graph/random.h"
#include "k_nn.h"

typedef struct random_inst {
    kn_random p;
    uint64_t key, run;
} random_inst;

kiln_status kb_random_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                              const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    random_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kn_random_decode(node, &s->p);
    if (st != KILN_OK) {
        kn_free(s);
        return st;
    }
    s->key = kn_random_key(&s->p);
    *inst = s;
    *workspace = 0;
    return KILN_OK;
}

void kb_random_release(void *inst) { kn_free(inst); }

/* Multinomial: for each row of x (unnormalized log-probabilities), each
 * sample takes the first class whose running sum of exp(x - max) passes
 * a uniform draw times the row's total. */
static void multinomial(const kb_tensor *x, kb_tensor *y, const random_inst *s) {
    int64_t rows = x->dims[0], classes = x->dims[1], samples = y->dims[1];
    for (int64_t r = 0; r < rows; r++) {
        size_t row = (size_t)(r * classes);
        double mx = -INFINITY, total = 0.0;
        for (int64_t c = 0; c < classes; c++) {
            double v = kb_ld(x->data, x->dtype, row + (size_t)c);
            mx = v > mx ? v : mx;
        }
        for (int64_t c = 0; c < classes; c++)
            total += exp(kb_ld(x->data, x->dtype, row + (size_t)c) - mx);
        for (int64_t k = 0; k < samples; k++) {
            double target = kn_rand_uniform(s->key, (uint64_t)(r * samples + k), s->run) * total, cum = 0.0;
            int64_t pick = classes - 1;
            for (int64_t c = 0; c < classes; c++) {
                cum += exp(kb_ld(x->data, x->dtype, row + (size_t)c) - mx);
                if (target < cum) {
                    pick = c;
                    break;
                }
            }
            kb_st(y->data, y->dtype, (size_t)(r * samples + k), (double)pick);
        }
    }
}

kiln_status kb_random_run(const kb_run *r) {
    random_inst *s = r->inst;
    kb_tensor *y = &r->out[0];
    if (s->p.kind == KN_RAND_MULTINOMIAL) {
        multinomial(&r->in[0], y, s);
    } else {
        int64_t n = kb_numel(y);
        for (int64_t i = 0; i < n; i++) {
            double v;
            if (s->p.kind == KN_RAND_UNIFORM)
                v = s->p.a + (s->p.b - s->p.a) * kn_rand_uniform(s->key, (uint64_t)i, s->run);
            else if (s->p.kind == KN_RAND_NORMAL)
                v = s->p.a + s->p.b * kn_rand_normal(s->key, (uint64_t)i, s->run);
            else
                v = kn_rand_uniform(s->key, (uint64_t)i, s->run) < kb_ld(r->in[0].data, r->in[0].dtype, (size_t)i);
            kb_st(y->data, y->dtype, (size_t)i, v);
        }
    }
    s->run++;
    return KILN_OK;
}
