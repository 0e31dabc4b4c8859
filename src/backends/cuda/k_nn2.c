/* k_nn2.c - (being written) */
#include "kc_common.h"

const kb_kernel kb_cuda_nn2[] = {
    {"", "", "", NULL, NULL, NULL, NULL, NULL, NULL},
};
const size_t kb_cuda_nn2_count = 0;
