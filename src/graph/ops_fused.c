/* ops_fused.c - op schemas (shape and type inference) of the fused family. */
#include "graph.h"

const kn_op_schema kn_ops_fused[] = {{"", "", NULL, 0}};
const size_t kn_ops_fused_count = 0;
