/* onnx.h - private entry points of the ONNX reader used by tests and tools
 * inside the project (the conformance runner reads TensorProto files). */
#ifndef KILN_ONNX_PRIVATE_H
#define KILN_ONNX_PRIVATE_H

#include "graph/graph.h"

/* Decode one serialized TensorProto (a .pb file of ONNX's test data) into an
 * owned, aligned value. The tensor's name, when present, is copied into
 * name (cap bytes, may be NULL). */
KN_HIDDEN kiln_status kx_onnx_read_tensor(const void *data, size_t size, kn_tdata *out, char *name,
                                          size_t cap);

/* A sequence or optional value of ONNX's test data (SequenceProto or
 * OptionalProto .pb files), flattened to its tensors: kiln holds sequences
 * of tensors and optionals of a tensor or of such a sequence only. */
enum { KX_VALUE_SEQUENCE = 1, KX_VALUE_OPTIONAL = 2 };
typedef struct kx_onnx_value {
    int kind;           /* KX_VALUE_SEQUENCE or KX_VALUE_OPTIONAL */
    int is_none;        /* optional: holds no element */
    int elem_is_seq;    /* optional: its element is a sequence (items are its tensors) */
    int n;              /* tensors held */
    kn_tdata *items;    /* n owned tensors */
    char name[64];
} kx_onnx_value;

/* Decode one serialized SequenceProto (kind KX_VALUE_SEQUENCE) or
 * OptionalProto (KX_VALUE_OPTIONAL). Sparse tensors, maps and nested
 * sequences or optionals are refused (KILN_ERR_UNSUPPORTED). On failure *out
 * holds nothing. Free with kx_onnx_value_free. */
KN_HIDDEN kiln_status kx_onnx_read_value(const void *data, size_t size, int kind,
                                         kx_onnx_value *out);
KN_HIDDEN void kx_onnx_value_free(kx_onnx_value *v);

/* Parse flags. */
enum {
    /* Skip the final check that kiln knows every node's (domain, op_type):
     * for inspecting models and for tests of the reader itself. */
    KX_ONNX_NO_OP_CHECK = 1u << 0,
    /* Nodes naming a registered plugin become plugin nodes even when a
     * built-in op has the same (domain, op_type). */
    KX_ONNX_PLUGINS_OVERRIDE = 1u << 1,
    /* Leave custom ops as they are (no plugin lookup). */
    KX_ONNX_NO_PLUGINS = 1u << 2
};

/* kiln_onnx_parse_memory / kiln_onnx_parse_file with flags. */
KN_HIDDEN kiln_status kx_onnx_parse_memory(const void *data, size_t size, const char *base_dir,
                                           unsigned flags, kn_net **out);
KN_HIDDEN kiln_status kx_onnx_parse_file(const char *path, unsigned flags, kn_net **out);

#endif
