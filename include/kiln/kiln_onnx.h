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

#ifdef __cplusplus
}
#endif
#endif
