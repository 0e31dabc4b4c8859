/* onnx_internal.h - state shared by the ONNX importer's files: the parse
 * context, message descriptors and the TensorProto decoder. */
#ifndef KILN_ONNX_INTERNAL_H
#define KILN_ONNX_INTERNAL_H

#include "graph/graph.h"
#include "onnx.h"
#include "pb.h"

/* A mapped file shared by the tensors that borrow from it. */
typedef struct kx_map_blob {
    kn_blob blob;
    kn_mapped map;
} kx_map_blob;

/* kn_blob release function of a kx_map_blob: unmaps and frees it. */
KN_HIDDEN void kx_map_blob_release(kn_blob *b);

/* An external data file opened during one parse. */
typedef struct kx_ext_file {
    char *location;      /* as written in the model */
    kx_map_blob *mb;     /* one reference held by the parse */
} kx_ext_file;

/* kx_onnx.flags, past the public parse flags: string tensors are read
 * (kx_onnx_read_tensor's test data), not refused. */
#define KX_ONNX_STRINGS (1u << 30)

typedef struct kx_onnx {
    kx_pb pb;
    kn_blob *blob;          /* owner of pb.buf when tensors may borrow from it, else NULL */
    const char *base_dir;   /* folder of external data, or NULL */
    unsigned flags;         /* KX_ONNX_* */
    kn_net *root;           /* the model's graph (holds the opset table) */
    kx_ext_file *ext;
    int n_ext, cap_ext;
} kx_onnx;

/* Message descriptors (field names for error paths), onnx_desc.c. */
extern const kx_pb_mdesc kx_d_model, kx_d_graph, kx_d_node, kx_d_attr, kx_d_tensor,
    kx_d_value_info, kx_d_type, kx_d_type_tensor, kx_d_type_seq, kx_d_type_opt, kx_d_shape, kx_d_dim, kx_d_opset,
    kx_d_entry, kx_d_sequence, kx_d_optional;

/* Decode the TensorProto message m into *out (owned, or borrowed from a
 * mapping when the context has one). *name receives the tensor's name slice
 * (may be NULL). On failure *out is untouched. */
KN_HIDDEN kiln_status kx_onnx_tensor(kx_onnx *cx, kx_pb_msg *m, kn_tdata *out, kx_str *name);
/* Drop the references the parse holds on external files. */
KN_HIDDEN void kx_onnx_ext_close(kx_onnx *cx);
/* "ai.onnx" for the default domain, else the domain. */
static inline const char *kx_domain_label(const char *d) { return d && *d ? d : "ai.onnx"; }

#endif
