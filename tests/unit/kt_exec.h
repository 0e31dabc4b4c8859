/* kt_exec.h - run a hand-built network through the executor on the CPU
 * (reference kernels unless nodes name a tactic), for op and pass tests. */
#ifndef KILN_KT_EXEC_H
#define KILN_KT_EXEC_H

#include <string.h>

#include "runtime/exec.h"

typedef struct kt_exec {
    kn_net *net;   /* borrowed */
    kx_program p;
    kx_ctx c;
    int ready;
} kt_exec;

/* Order the net, bind kernels, set the input shapes (graph inputs in order:
 * data[i] with rank[i]/dims[i]) and run once. Outputs: kt_exec_output. */
static inline kiln_status kt_exec_run(kt_exec *e, kiln_network *net, const void *const *data,
                                      const int *rank, const int64_t (*dims)[KILN_MAX_DIMS]) {
    memset(e, 0, sizeof *e);
    e->net = net;
    KN_TRY(kn_net_toposort(net));
    KN_TRY(kx_program_init(&e->p, net, 1));
    kiln_status st = kx_ctx_init(&e->c, &e->p);
    if (st != KILN_OK) {
        kx_program_fini(&e->p);
        return st;
    }
    e->ready = 1;
    for (int i = 0; i < net->n_inputs; i++) {
        KN_TRY(kx_ctx_set_input_shape(&e->c, i, rank[i], dims[i]));
        kx_ctx_bind(&e->c, net->inputs[i], (void *)data[i]);
    }
    return kx_ctx_run(&e->c);
}

/* Output k's data and info (shape for this run). */
static inline const void *kt_exec_output(kt_exec *e, int k, kn_tinfo *info) {
    int t = e->net->outputs[k];
    if (info)
        *info = e->c.ti[t];
    return e->c.addr[t];
}

static inline void kt_exec_free(kt_exec *e) {
    if (e->ready) {
        kx_ctx_fini(&e->c);
        kx_program_fini(&e->p);
    }
    memset(e, 0, sizeof *e);
}

#endif
