/* ops_elementwise.c - op schemas (shape and type inference) of the elementwise family. */
#include "graph.h"

const kn_op_schema kn_ops_elementwise[] = {{"", "", NULL, 0}};
const size_t kn_ops_elementwise_count = 0;
