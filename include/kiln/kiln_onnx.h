/* kiln_onnx.h - reading ONNX models into a kiln network. */
#ifndef KILN_ONNX_H
#define KILN_ONNX_H

#include "kiln_network.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parse an ONNX model file. External data files are looked up relative to the
 * model's folder and may not leave it. The file is memory-mapped; weights are
 * read in place where possible. *out is set only on success. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_onnx_parse_file(const char *path, kiln_network **out);

/* Parse an ONNX model held in memory. The buffer is borrowed during the call
 * only (the network keeps copies of what it needs). base_dir is the folder
 * for external data, or NULL when the model has none. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_onnx_parse_memory(const void *data, size_t size,
                                                           const char *base_dir,
                                                           kiln_network **out);

/* Flags of the _ex parsers. */
typedef enum kiln_onnx_flag {
    /* A node whose op_type names a registered plugin (version and namespace
     * from its plugin_version / plugin_namespace attributes, defaults "1"
     * and "") runs as that plugin even when kiln has a built-in op of the
     * same name. Without it only ops kiln does not know are looked up as
     * plugins. Added in 0.1. */
    KILN_ONNX_PLUGINS_OVERRIDE_BUILTINS = 1u << 0
} kiln_onnx_flag;

/* kiln_onnx_parse_file / kiln_onnx_parse_memory with kiln_onnx_flag bits.
 * Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_onnx_parse_file_ex(const char *path, uint32_t flags,
                                                            kiln_network **out);
KILN_API KILN_NODISCARD kiln_status kiln_onnx_parse_memory_ex(const void *data, size_t size,
                                                              const char *base_dir, uint32_t flags,
                                                              kiln_network **out);

/* Write a network as an ONNX model file: nodes with their attributes
 * (subgraphs included), constants as initializers, inputs and outputs with
 * the types and dims the network knows (a tensor of unknown type is written
 * without one), opset imports. What kiln_onnx_parse_file reads back gives
 * the same network. String constants are not supported. Added in 0.1. */
KILN_API KILN_NODISCARD kiln_status kiln_onnx_write_file(const kiln_network *net,
                                                         const char *path);

#ifdef __cplusplus
}
#endif
#endif
