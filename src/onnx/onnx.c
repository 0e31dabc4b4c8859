/* onnx.c - ONNX model reader (placeholder until the reader lands). */
#include "graph/graph.h"
#include "kiln/kiln_onnx.h"

KILN_API kiln_status kiln_onnx_parse_file(const char *path, kiln_network **out) {
    (void)out;
    return kn_error(KILN_ERR_UNSUPPORTED, "cannot parse '%s': the ONNX reader is not built", path);
}

KILN_API kiln_status kiln_onnx_parse_memory(const void *data, size_t size, const char *base_dir,
                                            kiln_network **out) {
    (void)data; (void)size; (void)base_dir; (void)out;
    return kn_error(KILN_ERR_UNSUPPORTED, "the ONNX reader is not built");
}
