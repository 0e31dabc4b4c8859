/* ops_tensor.c - op schemas (shape and type inference) of the tensor family. */
#include "graph.h"

const kn_op_schema kn_ops_tensor[] = {{"", "", NULL, 0}};
const size_t kn_ops_tensor_count = 0;
