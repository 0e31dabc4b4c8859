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

/* A node whose bodies need the host (kx_ctl_needs_host: a string,
 * sequence or optional, or a layer with no CUDA kernel) is not taken here,
 * so the builder places the whole node on the host (the CPU's kernel runs
 * its bodies there, src/builder/place.c), its values crossing by
 * reformats. */
static bool ctl_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return !kx_ctl_needs_host(&kb_cuda_backend, node, in, n_in, out, n_out);
}

static kiln_status ctl_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)out, (void)n_out;
    if (kx_ctl_needs_host(&kb_cuda_backend, node, NULL, 0, NULL, 0))
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "a body holds a string, sequence or optional or a layer with no "
                             "CUDA kernel: the layer belongs on the host (tactic host:ref), not "
                             "on tactic cuda");
    return kx_ctl_prepare(&kb_cuda_backend, node, in, n_in, inst, workspace);
}

const kb_kernel kb_cuda_control[] = {
    {"If", "", "cuda", ctl_supports, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_if},
    {"Loop", "", "cuda", ctl_supports, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_loop},
    {"Scan", "", "cuda", ctl_supports, NULL, NULL, ctl_prepare, kx_ctl_release, kx_ctl_run_scan},
};
const size_t kb_cuda_control_count = KN_ARRAY_LEN(kb_cuda_control);
