/* k_shape.c - (being written) */
#include "kc_common.h"

const kb_kernel kb_cuda_shape[] = {
    {"", "", "", NULL, NULL, NULL, NULL, NULL, NULL},
};
const size_t kb_cuda_shape_count = 0;
