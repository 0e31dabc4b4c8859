/* ops_nn.c - op schemas (shape and type inference) of the nn family. */
#include "graph.h"

const kn_op_schema kn_ops_nn[] = {{"", "", NULL, 0}};
const size_t kn_ops_nn_count = 0;
