/* k_seq.c - (being written) */
#include "kc_common.h"

const kb_kernel kb_cuda_seq[] = {
    {"", "", "", NULL, NULL, NULL, NULL, NULL, NULL},
};
const size_t kb_cuda_seq_count = 0;
