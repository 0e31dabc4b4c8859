/* onnx_desc.c - names of the onnx.proto fields kiln reads, by field number,
 * so that parse errors can name the path to the damaged field. */
#include "onnx_internal.h"

#define KX_DESC(var, msg, ...)                                              \
    static const kx_pb_fdesc var##_f[] = {__VA_ARGS__};                     \
    const kx_pb_mdesc var = {msg, (unsigned)KN_ARRAY_LEN(var##_f), var##_f}

KX_DESC(kx_d_model, "ModelProto", [1] = {"ir_version", 0}, [2] = {"producer_name", 0},
        [3] = {"producer_version", 0}, [4] = {"domain", 0}, [5] = {"model_version", 0},
        [6] = {"doc_string", 0}, [7] = {"graph", 0}, [8] = {"opset_import", 1},
        [14] = {"metadata_props", 1}, [20] = {"training_info", 1}, [25] = {"functions", 1});

KX_DESC(kx_d_graph, "GraphProto", [1] = {"node", 1}, [2] = {"name", 0},
        [5] = {"initializer", 1}, [10] = {"doc_string", 0}, [11] = {"input", 1},
        [12] = {"output", 1}, [13] = {"value_info", 1}, [14] = {"quantization_annotation", 1},
        [15] = {"sparse_initializer", 1});

KX_DESC(kx_d_node, "NodeProto", [1] = {"input", 1}, [2] = {"output", 1}, [3] = {"name", 0},
        [4] = {"op_type", 0}, [5] = {"attribute", 1}, [6] = {"doc_string", 0},
        [7] = {"domain", 0});

KX_DESC(kx_d_attr, "AttributeProto", [1] = {"name", 0}, [2] = {"f", 0}, [3] = {"i", 0},
        [4] = {"s", 0}, [5] = {"t", 0}, [6] = {"g", 0}, [7] = {"floats", 1}, [8] = {"ints", 1},
        [9] = {"strings", 1}, [10] = {"tensors", 1}, [11] = {"graphs", 1},
        [13] = {"doc_string", 0}, [14] = {"tp", 0}, [15] = {"type_protos", 1},
        [20] = {"type", 0}, [21] = {"ref_attr_name", 0}, [22] = {"sparse_tensor", 0},
        [23] = {"sparse_tensors", 1});

KX_DESC(kx_d_tensor, "TensorProto", [1] = {"dims", 1}, [2] = {"data_type", 0},
        [3] = {"segment", 0}, [4] = {"float_data", 1}, [5] = {"int32_data", 1},
        [6] = {"string_data", 1}, [7] = {"int64_data", 1}, [8] = {"name", 0},
        [9] = {"raw_data", 0}, [10] = {"double_data", 1}, [11] = {"uint64_data", 1},
        [12] = {"doc_string", 0}, [13] = {"external_data", 1}, [14] = {"data_location", 0});

KX_DESC(kx_d_value_info, "ValueInfoProto", [1] = {"name", 0}, [2] = {"type", 0},
        [3] = {"doc_string", 0});

KX_DESC(kx_d_type, "TypeProto", [1] = {"tensor_type", 0}, [4] = {"sequence_type", 0},
        [5] = {"map_type", 0}, [6] = {"denotation", 0}, [8] = {"sparse_tensor_type", 0},
        [9] = {"optional_type", 0});

KX_DESC(kx_d_type_tensor, "TypeProto.Tensor", [1] = {"elem_type", 0}, [2] = {"shape", 0});

KX_DESC(kx_d_type_seq, "TypeProto.Sequence", [1] = {"elem_type", 0});

KX_DESC(kx_d_type_opt, "TypeProto.Optional", [1] = {"elem_type", 0});

KX_DESC(kx_d_shape, "TensorShapeProto", [1] = {"dim", 1});

KX_DESC(kx_d_dim, "TensorShapeProto.Dimension", [1] = {"dim_value", 0}, [2] = {"dim_param", 0},
        [3] = {"denotation", 0});

KX_DESC(kx_d_opset, "OperatorSetIdProto", [1] = {"domain", 0}, [2] = {"version", 0});

KX_DESC(kx_d_entry, "StringStringEntryProto", [1] = {"key", 0}, [2] = {"value", 0});

KX_DESC(kx_d_sequence, "SequenceProto", [1] = {"name", 0}, [2] = {"elem_type", 0},
        [3] = {"tensor_values", 1}, [4] = {"sparse_tensor_values", 1},
        [5] = {"sequence_values", 1}, [6] = {"map_values", 1}, [7] = {"optional_values", 1});

KX_DESC(kx_d_optional, "OptionalProto", [1] = {"name", 0}, [2] = {"elem_type", 0},
        [3] = {"tensor_value", 0}, [4] = {"sparse_tensor_value", 0}, [5] = {"sequence_value", 0},
        [6] = {"map_value", 0}, [7] = {"optional_value", 0});
