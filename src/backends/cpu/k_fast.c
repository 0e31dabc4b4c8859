/* k_fast.c - CPU kernels of the fast family. */
#include "backends/backend.h"

const kb_kernel kb_cpu_fast[] = {{"", "", "", NULL, NULL, NULL, NULL, NULL, NULL}};
const size_t kb_cpu_fast_count = 0;

const char *kb_cpu_library_versions(void) { return ""; }
