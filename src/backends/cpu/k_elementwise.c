/* k_elementwise.c - CPU kernels of the elementwise family. */
#include "backends/backend.h"

const kb_kernel kb_cpu_elementwise[] = {{"", "", "", NULL, NULL, NULL, NULL, NULL, NULL}};
const size_t kb_cpu_elementwise_count = 0;
