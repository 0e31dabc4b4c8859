/* k_elementwise.h - shared machinery of the CPU elementwise family: compute
 * types with conversion from and to every storage type, the broadcast row
 * iterator, and the per-op loop tables that the fused chain kernel reuses. */
#ifndef KILN_CPU_K_ELEMENTWISE_H
#define KILN_CPU_K_ELEMENTWISE_H

#include "backends/backend.h"

/* Elements converted at a time through stack buffers. */
#define KB_EW_CHUNK 1024
/* Below this many elements a loop stays on one thread. */
#define KB_EW_PAR_MIN 65536
/* Inputs the broadcast iterator handles. */
#define KB_EW_MAX_IN 16

/* The types kernels compute in. float16/bfloat16/float8 compute in F32;
 * signed integers and bool in I64; unsigned integers in U64. */
typedef enum kb_ctype { KB_F32 = 0, KB_F64 = 1, KB_I64 = 2, KB_U64 = 3, KB_NCTYPE = 4 } kb_ctype;

/* Compute type of a storage type; -1 when kiln cannot compute in it. */
KN_HIDDEN int kb_ew_ctype(kiln_dtype dt);
/* Whether dt's elements are exactly the compute type ct (no conversion). */
KN_HIDDEN bool kb_ew_native(kiln_dtype dt, kb_ctype ct);
static inline size_t kb_ew_csize(kb_ctype ct) { return ct == KB_F32 ? 4 : 8; }
/* Convert n elements of storage type dt (src, contiguous) into compute type
 * ct (dst). Any storage type to any compute type. */
KN_HIDDEN void kb_ew_load(kiln_dtype dt, const void *src, int64_t n, kb_ctype ct, void *dst);
/* Convert n elements of compute type ct into storage type dt. Float to
 * integer truncates toward zero (saturating at the 64-bit range, NaN to 0),
 * anything to bool is "not zero". */
KN_HIDDEN void kb_ew_store(kiln_dtype dt, void *dst, int64_t n, kb_ctype ct, const void *src);

/* Row iterator over an output of `rank` dims with inputs broadcast into it.
 * Dims of size 1 are dropped and adjacent dims merged where every input
 * allows, so the innermost row is as long as possible. */
typedef struct kb_bcast {
    int n_in;
    int rank;                               /* after collapsing, >= 1 */
    int64_t dims[KILN_MAX_DIMS];
    int64_t stride[KB_EW_MAX_IN][KILN_MAX_DIMS]; /* element strides, 0 = broadcast */
    int64_t inner;                          /* dims[rank-1] */
    int64_t rows;                           /* product of the other dims */
    int64_t total;
} kb_bcast;
/* Shapes of the inputs are assumed to broadcast to out (the schema checked). */
KN_HIDDEN void kb_bcast_init(kb_bcast *b, int n_in, const kb_tensor *const *in,
                             const kb_tensor *out);
/* The same where input k (rows[k] > 0) is a column range of rows rows[k]
 * wide: its data points at the range's first column, its dims are the
 * range's (the last dim the range's width). */
KN_HIDDEN void kb_bcast_init_rows(kb_bcast *b, int n_in, const kb_tensor *const *in,
                                  const kb_tensor *out, const int64_t *rows);
/* Element offset of each input at the start of row `row`. */
KN_HIDDEN void kb_bcast_row(const kb_bcast *b, int64_t row, int64_t *off);

/* Parameters of unary ops (defaults as ONNX gives them: kb_ew_uparam_defaults). */
typedef struct kb_uparam {
    double alpha, beta, gamma;
    int64_t ilo, ihi;          /* Clip bounds for integer compute */
    uint64_t ulo, uhi;
    int flag;                  /* Gelu: 1 = tanh form; IsInf: bit0 neg, bit1 pos */
} kb_uparam;

/* y[i] = f(x[i]) over n contiguous compute-type elements. y may be x. */
typedef void (*kb_unary_fn)(const void *x, void *y, int64_t n, const kb_uparam *p);
/* y[i] = f(a[i*sa], b[i*sb]); sa, sb are 0 or 1. y may alias a or b when
 * that stride is 1. */
typedef void (*kb_binary_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *y,
                             int64_t n);

typedef struct kb_unary_op {
    const char *name;
    kb_unary_fn fn[KB_NCTYPE];  /* NULL: not defined for that compute type */
    bool bool_out;              /* y is uint8 (bool) instead of the compute type */
} kb_unary_op;

typedef struct kb_binary_op {
    const char *name;
    kb_binary_fn fn[KB_NCTYPE];
    bool bool_out;
} kb_binary_op;

/* Lookup by ONNX op name; internal variants: "ModC" (fmod=1), "ShiftLeft",
 * "ShiftRight". NULL when unknown. */
KN_HIDDEN const kb_unary_op *kb_ew_unary_find(const char *name);
KN_HIDDEN const kb_binary_op *kb_ew_binary_find(const char *name);
/* Read unary parameters from a node's attributes (and Clip's bound inputs
 * when `in` is not NULL) for computing in ct. */
KN_HIDDEN void kb_ew_uparam_defaults(const char *name, kb_ctype ct, kb_uparam *p);
KN_HIDDEN void kb_ew_uparam_from_node(const kn_node *node, const kb_tensor *in, int n_in,
                                      kb_ctype ct, kb_uparam *p);

/* Run functions living in the helper files. */
KN_HIDDEN kiln_status kb_ew_run_reduce(const kb_run *r);
KN_HIDDEN kiln_status kb_ew_run_argmax(const kb_run *r);
KN_HIDDEN kiln_status kb_ew_run_softmax(const kb_run *r);
KN_HIDDEN kiln_status kb_ew_run_cumsum(const kb_run *r);
KN_HIDDEN kiln_status kb_ew_run_chain(const kb_run *r);
KN_HIDDEN kiln_status kb_ew_init_chain(const kn_node *node, void **state);
KN_HIDDEN void kb_ew_fini_chain(void *state);

/* Strided element copies (stride in elements, may be negative) between a
 * tensor and a contiguous buffer, for any element size. */
KN_HIDDEN void kb_ew_gather(const void *base, size_t esize, int64_t stride, int64_t n, void *dst);
KN_HIDDEN void kb_ew_scatter(void *base, size_t esize, int64_t stride, int64_t n, const void *src);

/* k_string.c: Cast to and from string for the Cast kernel, with an
 * instance holding the strings it makes. */
KN_HIDDEN kiln_status kb_str_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                     int n_in, const kb_tensor *out, int n_out, void **inst,
                                     size_t *workspace);
KN_HIDDEN void kb_str_release(void *inst);
KN_HIDDEN kiln_status kb_str_cast_run(const kb_run *r);

#endif
