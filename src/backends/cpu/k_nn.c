/* k_nn.c - CPU kernels of the nn family. */
#include "backends/backend.h"

const kb_kernel kb_cpu_nn[] = {{"", "", "", NULL, NULL, NULL, NULL, NULL, NULL}};
const size_t kb_cpu_nn_count = 0;
