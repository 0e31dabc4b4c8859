/* k_tensor.c - CPU kernels of the tensor family. */
#include "backends/backend.h"

const kb_kernel kb_cpu_tensor[] = {{"", "", "", NULL, NULL, NULL, NULL, NULL, NULL}};
const size_t kb_cpu_tensor_count = 0;
