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
 * exec.c). A node whose bodies need the host is declined (ctl_supports)
 * and runs there as a whole. */
#include "kc_common.h"
#include "runtime/exec.h"

/* Whether a body of g's nodes (nested bodies included) needs the host: a
 * tensor of a type only the host holds (a string, a sequence, an
 * optional; declared, a constant, or a Cast to string), or a node that no
 * CUDA kernel runs. Such an If, Loop or Scan is not taken here, so the
 * builder places the whole node on the host (the CPU's kernel runs its
 * bodies there, src/builder/place.c), its values crossing by reformats. */
static bool host_type(kiln_dtype t) { return t == KILN_DTYPE_STRING || kn_dtype_is_handle((int)t); }

static bool body_needs_host(const kn_net *g, int depth) {
    if (!g || depth >= 64)
        return true;
    for (int t = 0; t < g->n_tensors; t++)
        if (host_type(g->tensors[t].dtype) ||
            ((g->tensors[t].flags & KN_T_CONST) && host_type(g->tensors[t].value.dtype)))
            return true;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        const kb_kernel *k[1];
        bool shape_only = !n->domain[0] && (strcmp(n->op_type, "Shape") == 0 ||
                                            strcmp(n->op_type, "Size") == 0);
        if (!shape_only && kb_cuda_backend.kernels_for(n->domain, n->op_type, k, 1) < 1)
            return true; /* Shape and Size run at shape time on every backend */
        if (!n->domain[0] && strcmp(n->op_type, "Cast") == 0 &&
            kn_attr_int(n, "to", 0) == KILN_DTYPE_STRING)
            return true;
        for (int a = 0; a < n->n_attr; a++)
            if (n->attrs[a].type == KN_ATTR_GRAPH && body_needs_host(n->attrs[a].graph, depth + 1))
                return true;
    }
    return false;
}

static bool ctl_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    for (int j = 0; j < n_in; j++)
        if (host_type(in[j].dtype))
            return false;
    for (int j = 0; j < n_out; j++)
        if (host_type(out[j].dtype))
            return false;
    for (int a = 0; a < node->n_attr; a++)
        if (node->attrs[a].type == KN_ATTR_GRAPH && body_needs_host(node->attrs[a].graph, 0))
            return false;
    return true;
}

static kiln_status ctl_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)out, (void)n_out;
    for (int a = 0; a < node->n_attr; a++)
        if (node->attrs[a].type == KN_ATTR_GRAPH && body_needs_host(node->attrs[a].graph, 0))
            return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                 "body '%s' holds a string, sequence or optional or a layer "
                                 "with no CUDA kernel: the layer belongs on the host (tactic "
                                 "host:ref), not on tactic cuda",
                                 node->attrs[a].name);
    return kx_ctl_prepare(&kb_cuda_backend, node, in, n_in, inst, workspace);
}

const kb_kernel kb_cuda_control[] = {
    {"If", "", "cuda", ctl_supports, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_if},
    {"Loop", "", "cuda", ctl_supports, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_loop},
    {"Scan", "", "cuda", ctl_supports, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_scan},
};
const size_t kb_cuda_control_count = KN_ARRAY_LEN(kb_cuda_control);
