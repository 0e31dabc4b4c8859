/* k_conv_graph.c - (being written) */
#include "kc_common.h"

const kb_kernel kb_cuda_conv_graph[] = {
    {"", "", "", NULL, NULL, NULL, NULL, NULL, NULL},
};
const size_t kb_cuda_conv_graph_count = 0;
