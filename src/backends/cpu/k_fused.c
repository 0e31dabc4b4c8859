/* k_fused.c - CPU kernels of the fused family. */
#include "backends/backend.h"

const kb_kernel kb_cpu_fused[] = {{"", "", "", NULL, NULL, NULL, NULL, NULL, NULL}};
const size_t kb_cpu_fused_count = 0;
