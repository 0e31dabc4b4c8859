/* k_window.c - the window functions' reference CPU kernel
 * (graph/window.h), in double. */
#include "graph/window.h"
#include "k_nn.h"

kiln_status kb_window_run(const kb_run *r) {
    kb_tensor *y = &r->out[0];
    int64_t size = y->dims[0];
    int kind = kn_window_kind(r->node->op_type), periodic = kn_attr_int(r->node, "periodic", 1) != 0;
    for (int64_t n = 0; n < size; n++)
        kb_st(y->data, y->dtype, (size_t)n, kn_window_value(kind, n, size, periodic));
    return KILN_OK;
}
