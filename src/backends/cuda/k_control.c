/* k_control.c - If, Loop and Scan on the CUDA backend. The kernels are
 * control.c's, written once for every backend: prepare opens each body as a
 * program bound to this backend, so the body's layers run as CUDA kernels
 * on the node's stream (a nested If, Loop or Scan runs this same kernel).
 * Values stay on the device: loop-carried values and scan slices are copied
 * device to device, scan outputs are written into their place in the
 * output. If's condition and Loop's trip count are value inputs (known on
 * the host at shape time); Loop's condition after each iteration is read
 * back by one copy into page-locked memory and a stream wait, so a plan
 * holding one of these kernels never captures CUDA graphs (kx_ctl_syncs,
 * exec.c). */
#include "kc_common.h"
#include "runtime/exec.h"

/* A string tensor that a body of g's nodes declares or makes from a
 * constant, nested bodies included, or NULL. Strings are host pointers and
 * this backend runs no layer on the host at run time, so such a body is
 * refused here naming the tensor (the builder does the same for the main
 * graph). */
static const char *body_string(const kn_net *g, int depth) {
    for (int t = 0; g && depth < 64 && t < g->n_tensors; t++)
        if (g->tensors[t].dtype == KILN_DTYPE_STRING ||
            ((g->tensors[t].flags & KN_T_CONST) && g->tensors[t].value.dtype == KILN_DTYPE_STRING))
            return g->tensors[t].name;
    for (int i = 0; g && depth < 64 && i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attr; a++) {
            const kn_attr *at = &g->nodes[i].attrs[a];
            const char *s = at->type == KN_ATTR_GRAPH ? body_string(at->graph, depth + 1) : NULL;
            if (s)
                return s;
        }
    return NULL;
}

static kiln_status ctl_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)out, (void)n_out;
    for (int a = 0; a < node->n_attr; a++) {
        const kn_attr *at = &node->attrs[a];
        const char *s = at->type == KN_ATTR_GRAPH ? body_string(at->graph, 0) : NULL;
        if (s)
            return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                 "string tensor '%s' in body '%s': strings stay on the host and "
                                 "the cuda backend places no layer on the host at run time",
                                 s, at->name);
    }
    return kx_ctl_prepare(&kb_cuda_backend, node, in, n_in, inst, workspace);
}

const kb_kernel kb_cuda_control[] = {
    {"If", "", "cuda", NULL, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_if},
    {"Loop", "", "cuda", NULL, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_loop},
    {"Scan", "", "cuda", NULL, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_scan},
};
const size_t kb_cuda_control_count = KN_ARRAY_LEN(kb_cuda_control);
