/* kiln_network.h - the network: a graph of named tensors and nodes (ONNX
 * semantics), made by the ONNX parser or built by hand, then given to the
 * builder. */
#ifndef KILN_NETWORK_H
#define KILN_NETWORK_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_network kiln_network;

/* A dimension below 0 is dynamic: its size is set at run time within a profile. */
#define KILN_DIM_DYNAMIC (-1)

/* Make an empty network. *out is set only on success; free with
 * kiln_network_destroy. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_create(kiln_network **out);
/* Accepts NULL. Added in 0.1. */
KILN_API void kiln_network_destroy(kiln_network *net);

/* Add a graph input. dims[i] < 0 marks a dynamic dimension; dim_names may be
 * NULL, or give a name per dimension ("batch"; NULL entries allowed).
 * Strings are copied. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_add_input(kiln_network *net, const char *name,
                                                           kiln_dtype dtype, int rank,
                                                           const int64_t *dims,
                                                           const char *const *dim_names);

/* Add a constant (an initializer). The data is copied. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_add_constant(kiln_network *net, const char *name,
                                                              kiln_dtype dtype, int rank,
                                                              const int64_t *dims, const void *data,
                                                              size_t nbytes);

/* Add a node with ONNX semantics. Input names may be "" for an absent optional
 * input. domain "" or "ai.onnx" is the standard domain. opset is the version of
 * that domain the node follows. Returns the node's index in *index (may be
 * NULL). Tensors named as outputs are created. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_add_node(kiln_network *net, const char *name,
                                                          const char *op_type, const char *domain,
                                                          int opset, int n_inputs,
                                                          const char *const *inputs, int n_outputs,
                                                          const char *const *outputs, int *index);

/* Attributes of node `node` (an index from kiln_network_add_node). Values are
 * copied. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_set_attr_int(kiln_network *net, int node,
                                                              const char *name, int64_t value);
KILN_API KILN_NODISCARD kiln_status kiln_network_set_attr_float(kiln_network *net, int node,
                                                                const char *name, float value);
KILN_API KILN_NODISCARD kiln_status kiln_network_set_attr_string(kiln_network *net, int node,
                                                                 const char *name,
                                                                 const char *value);
KILN_API KILN_NODISCARD kiln_status kiln_network_set_attr_ints(kiln_network *net, int node,
                                                               const char *name,
                                                               const int64_t *values, size_t n);
KILN_API KILN_NODISCARD kiln_status kiln_network_set_attr_floats(kiln_network *net, int node,
                                                                 const char *name,
                                                                 const float *values, size_t n);

/* Mark an existing tensor as a graph output. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_mark_output(kiln_network *net, const char *name);

/* Inspection. Indices run from 0 to count-1; returned strings are borrowed
 * from the network. Added in 0.1. */
KILN_API int kiln_network_num_inputs(const kiln_network *net);
KILN_API int kiln_network_num_outputs(const kiln_network *net);
KILN_API int kiln_network_num_nodes(const kiln_network *net);
KILN_API const char *kiln_network_input_name(const kiln_network *net, int i);
KILN_API const char *kiln_network_output_name(const kiln_network *net, int i);
KILN_API const char *kiln_network_node_name(const kiln_network *net, int i);
KILN_API const char *kiln_network_node_op_type(const kiln_network *net, int i);
/* Inputs and outputs of node `node`: counts, and the tensor name of slot i
 * ("" for an absent optional input or unused output; NULL when out of
 * range). Borrowed from the network. Added in 0.1. */
KILN_API int kiln_network_node_num_inputs(const kiln_network *net, int node);
KILN_API int kiln_network_node_num_outputs(const kiln_network *net, int node);
KILN_API const char *kiln_network_node_input(const kiln_network *net, int node, int i);
KILN_API const char *kiln_network_node_output(const kiln_network *net, int node, int i);

/* A new network made of the nodes listed in `nodes` (indices into `net`,
 * kept in `net`'s order; attributes, constants and opsets copied). Tensors
 * those nodes read that none of them produces and that are not constants
 * become its inputs (type and shape as `net` knows them; rank -1 when
 * unknown: set them with kiln_network_set_tensor_info). Its outputs are the
 * tensors the nodes produce that are outputs of `net` or are read by a node
 * left out. *out is set only on success. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_extract(const kiln_network *net, int n_nodes,
                                                         const int *nodes, kiln_network **out);

/* Set the type and shape recorded for a tensor that is not a constant (an
 * input of an extracted network, or an output, so a writer can declare
 * them). dims < 0 are dynamic. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_set_tensor_info(kiln_network *net,
                                                                 const char *name,
                                                                 kiln_dtype dtype, int rank,
                                                                 const int64_t *dims);

/* Shape and type of a named tensor as currently known (dims < 0 are dynamic).
 * *rank is -1 when unknown. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_tensor_info(const kiln_network *net,
                                                             const char *name, kiln_dtype *dtype,
                                                             int *rank, int64_t *dims);

/* The name of dimension d of a named tensor: the ONNX dim_param of a dynamic
 * dimension of a network input, or one given by kiln_network_set_dim_name (TensorRT's
 * ITensor::getDimensionName). *dim_name is NULL when the dimension has no
 * name; the string lives as long as the network. KILN_ERR_NOT_FOUND for an
 * unknown tensor, KILN_ERR_INVALID_ARGUMENT for d outside 0..rank-1.
 * Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_tensor_dim_name(const kiln_network *net,
                                                                 const char *name, int d,
                                                                 const char **dim_name);

/* Name dimension d of a network input or output (TensorRT's
 * ITensor::setDimensionName); NULL or "" removes the name. Only tensors that
 * are network inputs or outputs keep names. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_network_set_dim_name(kiln_network *net, const char *name,
                                                              int d, const char *dim_name);

#ifdef __cplusplus
}
#endif
#endif
