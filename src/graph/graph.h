/* graph.h - the network IR: named tensors and nodes with ONNX semantics,
 * attribute access, op schemas with shape inference, and graph utilities
 * (topological order, validation, cloning). */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "core/core.h"
#include "kiln/kiln_network.h"

/* Attribute types, numbered as ONNX AttributeProto.AttributeType. */
typedef enum kn_attr_type {
    KN_ATTR_UNDEFINED = 0,
    KN_ATTR_FLOAT = 1,
    KN_ATTR_INT = 2,
    KN_ATTR_STRING = 3,
    KN_ATTR_TENSOR = 4,
    KN_ATTR_GRAPH = 5,
    KN_ATTR_FLOATS = 6,
    KN_ATTR_INTS = 7,
    KN_ATTR_STRINGS = 8
} kn_attr_type;

/* Refcounted owner of bytes that tensors borrow (a mapped model file). */
typedef struct kn_blob {
    int refs;
    void (*release)(struct kn_blob *b);
} kn_blob;
KN_HIDDEN void kn_blob_ref(kn_blob *b);
KN_HIDDEN void kn_blob_unref(kn_blob *b);

/* A constant tensor's value: dtype, shape and bytes (row-major, contiguous).
 * data is owned (kn_aligned_alloc, 64-byte aligned) when blob is NULL;
 * otherwise it is borrowed from blob and MAY BE UNALIGNED: read it with
 * memcpy or take an aligned copy (kn_tdata_aligned). */
typedef struct kn_tdata {
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t nbytes;
    kn_blob *blob;
} kn_tdata;

typedef struct kn_attr {
    char *name;
    kn_attr_type type;
    float f;
    int64_t i;
    char *s;            /* NUL-terminated; s_len excludes the NUL (may hold bytes) */
    size_t s_len;
    size_t n;           /* element count of floats / ints / strings */
    float *floats;
    int64_t *ints;
    char **strings;
    kn_tdata *tensor;   /* KN_ATTR_TENSOR, owned */
    struct kiln_network *graph; /* KN_ATTR_GRAPH, owned */
} kn_attr;

typedef struct kn_node {
    char *name;
    char *op_type;
    char *domain;   /* "" for the default ONNX domain, "kiln" for kiln's fused ops */
    int opset;      /* version of `domain` the node follows */
    int n_in, n_out;
    int *in;        /* tensor indices; -1 marks an absent optional input */
    int *out;       /* tensor indices; -1 marks an unused optional output */
    int n_attr;
    kn_attr *attrs;
    char *tactic;   /* kernel tactic chosen by the builder (NULL before) */
    int dead;       /* marked for removal by a pass; kn_net_compact drops it */
} kn_node;

/* Tensor flags. */
enum {
    KN_T_INPUT = 1u << 0,
    KN_T_OUTPUT = 1u << 1,
    KN_T_CONST = 1u << 2,  /* has a value in `value` */
    KN_T_HOST = 1u << 3    /* its value is needed on the host for shape inference */
};

typedef struct kn_tensor {
    char *name;
    kiln_dtype dtype;   /* UNDEFINED until inferred */
    int rank;           /* -1 until inferred */
    int64_t dims[KILN_MAX_DIMS]; /* < 0: dynamic */
    char *dim_names[KILN_MAX_DIMS]; /* names of dynamic dims of inputs, or NULL */
    uint32_t flags;
    kn_tdata value;     /* when KN_T_CONST */
    int producer;       /* node index, -1 for inputs and constants */
} kn_tensor;

struct kiln_network {
    kn_tensor *tensors;
    int n_tensors, cap_tensors;
    kn_node *nodes;
    int n_nodes, cap_nodes;
    int *inputs;
    int n_inputs, cap_inputs;
    int *outputs;
    int n_outputs, cap_outputs;
    kn_strmap names;    /* tensor name -> index (keys borrowed from tensors) */
    int opset;          /* default-domain opset of the model (0 if unknown) */
    int n_opsets;
    char **opset_domains;
    int *opset_versions;
};

typedef struct kiln_network kn_net;

/* ---- construction ---- */
KN_HIDDEN kiln_status kn_net_new(kn_net **out);
KN_HIDDEN void kn_net_free(kn_net *net);
/* Index of a named tensor, or -1. */
KN_HIDDEN int kn_net_find(const kn_net *net, const char *name);
/* Index of a named tensor, created (unknown type and shape) when absent. */
KN_HIDDEN kiln_status kn_net_tensor(kn_net *net, const char *name, int *index);
/* A fresh tensor whose name starts with `hint` and is unique in the net. */
KN_HIDDEN kiln_status kn_net_new_tensor(kn_net *net, const char *hint, int *index);
/* Append a node. Input/output indices are copied (-1 allowed for absent).
 * Sets the outputs' producer. *index may be NULL. */
KN_HIDDEN kiln_status kn_net_add_node(kn_net *net, const char *name, const char *op_type,
                                      const char *domain, int opset, int n_in, const int *in,
                                      int n_out, const int *out, int *index);
/* Give tensor t a constant value; takes ownership of v's data/blob. */
KN_HIDDEN void kn_tensor_set_value(kn_tensor *t, kn_tdata *v);
KN_HIDDEN void kn_tdata_free(kn_tdata *v);
/* New owned, 64-byte aligned, zeroed value of the given type and shape. */
KN_HIDDEN kiln_status kn_tdata_alloc(kn_tdata *v, kiln_dtype dtype, int rank, const int64_t *dims);
/* Deep copy (owned, aligned). */
KN_HIDDEN kiln_status kn_tdata_copy(kn_tdata *dst, const kn_tdata *src);
/* Pointer to the value's bytes, aligned: the value itself when it is aligned,
 * else a fresh aligned copy placed in *tmp (free *tmp with kn_aligned_free). */
KN_HIDDEN const void *kn_tdata_aligned(const kn_tdata *v, void **tmp);
/* Deep copy of a whole network. */
KN_HIDDEN kiln_status kn_net_clone(const kn_net *src, kn_net **out);
/* Drop dead nodes and tensors nothing refers to; renumbers indices. */
KN_HIDDEN kiln_status kn_net_compact(kn_net *net);
/* Order nodes so every input is produced before use. Fails on a cycle or on
 * a tensor that is read but neither produced, an input, nor a constant. */
KN_HIDDEN kiln_status kn_net_toposort(kn_net *net);
/* For every tensor, the number of nodes reading it (graph outputs count 1). */
KN_HIDDEN kiln_status kn_net_use_counts(const kn_net *net, int **counts);

/* ---- attributes ---- */
KN_HIDDEN const kn_attr *kn_attr_find(const kn_node *n, const char *name);
KN_HIDDEN int64_t kn_attr_int(const kn_node *n, const char *name, int64_t dflt);
KN_HIDDEN float kn_attr_float(const kn_node *n, const char *name, float dflt);
KN_HIDDEN const char *kn_attr_string(const kn_node *n, const char *name, const char *dflt);
/* List attributes: returns the array (borrowed) and sets *count; NULL and 0
 * when absent. */
KN_HIDDEN const int64_t *kn_attr_ints(const kn_node *n, const char *name, size_t *count);
KN_HIDDEN const float *kn_attr_floats(const kn_node *n, const char *name, size_t *count);
/* Add or replace attributes (the builder's fused ops use these). */
KN_HIDDEN kiln_status kn_node_set_int(kn_node *n, const char *name, int64_t v);
KN_HIDDEN kiln_status kn_node_set_float(kn_node *n, const char *name, float v);
KN_HIDDEN kiln_status kn_node_set_string(kn_node *n, const char *name, const char *v);
KN_HIDDEN kiln_status kn_node_set_ints(kn_node *n, const char *name, const int64_t *v, size_t count);
KN_HIDDEN kiln_status kn_node_set_floats(kn_node *n, const char *name, const float *v, size_t count);
KN_HIDDEN void kn_attr_free(kn_attr *a);
KN_HIDDEN kiln_status kn_attr_copy(kn_attr *dst, const kn_attr *src);

/* Every attribute of a default-domain node whose name has one type across
 * ONNX (axis INT, perm INTS, mode STRING, ...) has that type, and every flag
 * (transB, keepdims, ...) is 0 or 1; else KILN_ERR_PARSE naming the node
 * and attribute (attrs.c holds the table). kn_net_check_attrs checks every
 * node, in subgraphs too. */
KN_HIDDEN kiln_status kn_node_check_attrs(const kn_node *n);
KN_HIDDEN kiln_status kn_net_check_attrs(const kn_net *net);
KN_HIDDEN const char *kn_attr_type_name(kn_attr_type t);

/* Fail with a message naming the node: "node 'conv1' (Conv): <message>". */
KN_HIDDEN kiln_status kn_node_error(const kn_node *n, kiln_status st, const char *fmt, ...)
    KN_PRINTF(3, 4);

/* ---- shapes ---- */
/* Elements in a shape; -1 when any dim is negative; saturates at INT64_MAX. */
KN_HIDDEN int64_t kn_numel(int rank, const int64_t *dims);
/* "1x3x224x224" (dynamic dims as their name or '?'). */
KN_HIDDEN void kn_shape_str(int rank, const int64_t *dims, char *buf, size_t cap);

/* The largest tensor kiln plans: 2^48 elements and 2^48 bytes, past the
 * 48-bit virtual address space of today's hosts and GPUs. The element
 * bound counts a 0 dim as 1, so the strides of an empty tensor fit too.
 * Inside it, a product of a dim and an attribute or index of 32 bits
 * cannot overflow int64_t, and byte counts, offsets and arena sums of a
 * few thousand tensors cannot overflow size_t. Every inferred, input and
 * constant shape is held to it (kn_check_size) before memory is planned. */
#define KN_MAX_ELEMENTS ((int64_t)1 << 48)
#define KN_MAX_TENSOR_BYTES ((size_t)1 << 48)
/* The largest kernel, stride, dilation or pad a window op takes: what the
 * libraries behind the kernels (oneDNN, cuDNN: int) can hold. */
#define KN_MAX_WINDOW_ATTR ((int64_t)INT32_MAX)
/* Whether a tensor of type dt and this shape is within those bounds (every
 * dim >= 0); *bytes (may be NULL) gets its size when it is. */
KN_HIDDEN bool kn_shape_fits(kiln_dtype dt, int rank, const int64_t *dims, size_t *bytes);
/* kn_shape_fits or a KILN_ERR_SHAPE naming node n (NULL: none), the tensor
 * (`what`, e.g. "output 'y'") and its shape. */
KN_HIDDEN kiln_status kn_check_size(const kn_node *n, const char *what, kiln_dtype dt, int rank,
                                    const int64_t *dims, size_t *bytes);

/* ---- op schemas and shape inference ----
 * Inference runs with concrete shapes: at build time for each profile's
 * min/opt/max shapes, at run time for the shapes the caller set. */
typedef struct kn_tinfo {
    kiln_dtype dtype;       /* UNDEFINED for an absent optional input */
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    const void *value;      /* host value (aligned, row-major) when known, else NULL */
    bool data_dependent;    /* output only: dims are an upper bound; the kernel
                               writes the true dims when it runs */
    /* sequence and optional handles (kn_dtype_is_handle(dtype), rank 0;
     * src/graph/seq.h): what inference knows of the value held */
    bool elem_known;        /* elem_rank/elem_dims: the elements' largest shape */
    bool count_known;       /* count: a sequence's length, an optional's 0 or 1 */
    int elem_rank;
    int64_t elem_dims[KILN_MAX_DIMS];
    int64_t count;
} kn_tinfo;

typedef struct kn_infer {
    const kn_node *node;
    int n_in;
    const kn_tinfo *in;
    int n_out;
    kn_tinfo *out;          /* zeroed by the caller; fill dtype, rank, dims */
} kn_infer;

typedef kiln_status (*kn_infer_fn)(kn_infer *c);

typedef struct kn_op_schema {
    const char *op_type;
    const char *domain;     /* "" = default ONNX domain */
    kn_infer_fn infer;
    uint32_t value_inputs;  /* bit i: inference needs input i's value on the host */
} kn_op_schema;

/* Find the schema of (domain, op_type); NULL when kiln does not know the op.
 * "ai.onnx" is treated as "". */
KN_HIDDEN const kn_op_schema *kn_op_find(const char *domain, const char *op_type);
/* The i-th built-in op schema (every table in turn); NULL past the last. */
KN_HIDDEN const kn_op_schema *kn_op_nth(size_t i);
/* Whether input i is present. */
static inline bool kn_has_in(const kn_infer *c, int i) {
    return i < c->n_in && c->in[i].dtype != KILN_DTYPE_UNDEFINED;
}
/* Whether output i is wanted by the graph. */
static inline bool kn_has_out(const kn_infer *c, int i) {
    return i < c->n_out && c->node->out[i] >= 0;
}
/* Read element k of a host value of integer type (int32/int64/...) as int64. */
KN_HIDDEN int64_t kn_value_int(const kn_tinfo *t, int64_t k);
KN_HIDDEN double kn_value_double(const kn_tinfo *t, int64_t k);
/* Normalise an axis in [-rank, rank) to [0, rank); fails naming the node. */
KN_HIDDEN kiln_status kn_axis(const kn_infer *c, int64_t axis, int rank, int *out);
/* Numpy-style broadcast of a and b into out; fails naming the node. */
KN_HIDDEN kiln_status kn_broadcast(const kn_infer *c, const kn_tinfo *a, const kn_tinfo *b,
                                   kn_tinfo *out);
/* out gets in's dtype and shape. */
KN_HIDDEN void kn_same_as(kn_tinfo *out, const kn_tinfo *in);

/* Schema tables, one per op family (src/graph/ops_*.c). */
extern const kn_op_schema kn_ops_elementwise[];
extern const size_t kn_ops_elementwise_count;
extern const kn_op_schema kn_ops_tensor[];
extern const size_t kn_ops_tensor_count;
extern const kn_op_schema kn_ops_nn[];
extern const size_t kn_ops_nn_count;
extern const kn_op_schema kn_ops_fused[];
extern const size_t kn_ops_fused_count;
extern const kn_op_schema kn_ops_quant[]; /* ops_quant.c: kiln::QConv, kiln::QMatMul */
extern const size_t kn_ops_quant_count;
extern const kn_op_schema kn_ops_spectral[]; /* ops_spectral.c */
extern const size_t kn_ops_spectral_count;
extern const kn_op_schema kn_ops_tfidf[]; /* ops_tfidf.c */
extern const size_t kn_ops_tfidf_count;
extern const kn_op_schema kn_ops_contrib[]; /* ops_contrib.c */
extern const size_t kn_ops_contrib_count;
extern const kn_op_schema kn_ops_control[]; /* ops_control.c: If, Loop, Scan */
extern const size_t kn_ops_control_count;
extern const kn_op_schema kn_ops_seq[]; /* ops_seq.c: sequences and optionals */
extern const size_t kn_ops_seq_count;
/* ops_string.c: fails naming the node when an op that does not handle
 * string tensors has one as input or output (after its inference). */
KN_HIDDEN kiln_status kn_check_strings(const kn_infer *c);

#endif
