/* backend.h - the private interface between kiln and its backends: kernels
 * (one per op and tactic) that the builder times and the runtime binds, and
 * the device description that binds a plan to its target. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include <string.h>

#include "graph/graph.h"

/* A tensor as a kernel sees it: contiguous, row-major. For an absent optional
 * input, data is NULL and dtype is UNDEFINED. */
typedef struct kb_tensor {
    void *data;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    const void *host;         /* the values in host memory when kiln knows them
                                 (constants, shape values), else NULL; GPU
                                 kernels read value inputs (Slice starts...) here */
} kb_tensor;

/* The type and shape of tensors as shape inference sees them, for the
 * geometry helpers kernels share with it (graph/ops_nn.h), in prepare():
 * it may see inputs before memory is assigned (data NULL: a graph input not
 * bound yet), so only an absent optional input (dtype UNDEFINED) is
 * UNDEFINED; values known on the host come along. */
static inline void kb_tinfo_types(const kb_tensor *t, int n, kn_tinfo *out) {
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].dtype = t[i].dtype;
        out[i].rank = t[i].rank;
        memcpy(out[i].dims, t[i].dims, sizeof out[i].dims);
        out[i].value = t[i].host;
    }
}

/* The same for run(), where every present tensor has data: an input
 * without data (an absent optional one) is UNDEFINED; no values. */
static inline void kb_tinfo_of(const kb_tensor *t, int n, kn_tinfo *out) {
    kb_tinfo_types(t, n, out);
    for (int i = 0; i < n; i++) {
        out[i].value = NULL;
        if (!t[i].data)
            out[i].dtype = KILN_DTYPE_UNDEFINED;
    }
}

/* One call of a kernel. */
typedef struct kb_run {
    const kn_node *node;      /* attributes: kn_attr_* */
    const void *state;        /* from init, may be NULL */
    void *inst;               /* from prepare, may be NULL */
    int n_in;
    const kb_tensor *in;
    int n_out;
    kb_tensor *out;           /* memory allocated with the inferred shapes; for a
                                 data-dependent output the kernel writes the true dims */
    void *workspace;          /* `workspace` bytes from prepare, 64-byte aligned */
    size_t workspace_size;
    int threads;              /* threads the kernel may use (>= 1) */
    void *stream;             /* GPU backends: the cudaStream_t to enqueue on */
} kb_run;

/* A kernel: one way (tactic) to run one op on one backend. */
typedef struct kb_kernel {
    const char *op_type;
    const char *domain;       /* "" for the default ONNX domain, "kiln" for fused ops */
    const char *tactic;       /* stable name stored in plans: "ref", "dnnl", "blas", ... */
    /* May be NULL (accepts every node the schema accepts): whether this kernel
     * handles the node with these input and output types and shapes. */
    bool (*supports)(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out);
    /* May be NULL: parse attributes once per engine into immutable state
     * shared by all contexts. */
    kiln_status (*init)(const kn_node *node, void **state);
    void (*fini)(void *state);
    /* May be NULL: per context, whenever shapes change: build per-shape
     * objects into *inst and say how much workspace a run needs. Never
     * called on the execution path. */
    kiln_status (*prepare)(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                           const kb_tensor *out, int n_out, void **inst, size_t *workspace);
    void (*release)(void *inst);
    /* Run. Must not allocate on a GPU backend; may on the CPU only through
     * the workspace. Returns a status with a message naming the node. */
    kiln_status (*run)(const kb_run *r);
} kb_kernel;

/* How a backend's memory is reached from the host. */
typedef enum kb_copy_kind {
    KB_COPY_H2D = 0,
    KB_COPY_D2H = 1,
    KB_COPY_D2D = 2
} kb_copy_kind;

/* The most candidate kernels one op has on a backend, which the builder,
 * the precision pass and the kernel tests ask kernels_for() for (CUDA's
 * MatMul has 16: eight cuBLASLt heuristics, each also with float16
 * accumulation). */
#define KB_MAX_CANDIDATES 32

/* A backend: its device, its memory and its kernels. The CPU backend's
 * memory is plain host memory. */
typedef struct kb_backend {
    const char *name;         /* "cpu", "cuda" */
    /* The device's target ("x86_64", "sm_90") and library versions that bind
     * a plan; fails with a clear message when there is no usable device. */
    kiln_status (*describe)(char *target, size_t target_cap, char *libs, size_t libs_cap);
    /* All kernels for (domain, op_type), reference first; see kb_cpu_kernels_for. */
    int (*kernels_for)(const char *domain, const char *op_type, const kb_kernel **out, int cap);
    const kb_kernel *(*kernel_find)(const char *domain, const char *op_type, const char *tactic);
    /* Device memory, 256-byte aligned. */
    kiln_status (*alloc)(size_t bytes, void **out);
    void (*free)(void *p);
    kiln_status (*copy)(void *dst, const void *src, size_t bytes, kb_copy_kind kind, void *stream);
    kiln_status (*memset_zero)(void *dst, size_t bytes, void *stream);
    kiln_status (*sync)(void *stream);
    /* Time `run` on the device (ms per call, median of `reps` after a
     * warm-up), for tactic selection. */
    kiln_status (*time_kernel)(const kb_kernel *k, const kb_run *r, int reps, double *ms);
    /* May be NULL (CPU): a private stream for a context whose caller passes
     * none, and CUDA-graph capture of the work enqueued on a stream between
     * graph_begin and graph_end, replayed with graph_launch. */
    kiln_status (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
    kiln_status (*graph_begin)(void *stream);
    /* May be NULL: called after each step enqueued during a capture, with
     * the workspace the step was given (ws_bytes 0: none), so that
     * graph_end knows where one step's work ends and which steps touch
     * the shared workspace. */
    kiln_status (*graph_step)(void *stream, const void *ws, size_t ws_bytes);
    kiln_status (*graph_end)(void *stream, void **graph);
    kiln_status (*graph_launch)(void *graph, void *stream);
    void (*graph_destroy)(void *graph);
    /* May be NULL (host memory only): whether p is device memory, which the
     * host cannot read (shape-tensor inputs must be host memory). */
    bool (*is_device_ptr)(const void *p);
    /* May be NULL (plain host memory serves): page-locked host memory, which
     * the device copies to and from at full speed. */
    kiln_status (*host_alloc)(size_t bytes, void **out);
    void (*host_free)(void *p);
    /* May be NULL (the CPU, whose work is done when the call that enqueues
     * it returns; the runtime then stamps host time): device events that
     * mark a point in a stream, for timing and waiting. event_query sets
     * *done when the work before the event has finished; event_elapsed
     * gives the milliseconds from a to b, both recorded and done. */
    kiln_status (*event_create)(void **out);
    void (*event_destroy)(void *ev);
    kiln_status (*event_record)(void *ev, void *stream);
    kiln_status (*event_query)(void *ev, bool *done);
    kiln_status (*event_sync)(void *ev);
    kiln_status (*event_elapsed)(void *a, void *b, float *ms);
} kb_backend;

/* A backend's kernels, one table per op family. */
typedef struct kb_table {
    const kb_kernel *t;
    const size_t *n;
} kb_table;
/* All kernels for (domain, op_type) in `tables`, reference ("ref") first;
 * fills up to cap pointers and returns how many exist. */
KN_HIDDEN int kb_tables_kernels_for(const kb_table *tables, size_t n_tables, const char *domain,
                                    const char *op_type, const kb_kernel **out, int cap);
/* The kernel of (domain, op_type) with this tactic name, or NULL. */
KN_HIDDEN const kb_kernel *kb_tables_find(const kb_table *tables, size_t n_tables,
                                          const char *domain, const char *op_type,
                                          const char *tactic);

/* The backend of that name compiled into this build, or NULL. */
KN_HIDDEN const kb_backend *kb_backend_get(const char *name);
/* Tests: one more backend that kb_backend_get finds by its name (NULL:
 * none), so that a device backend's paths run without the device. */
KN_HIDDEN extern const kb_backend *kb_test_backend;
extern const kb_backend kb_cpu_backend;
#ifdef KILN_HAVE_CUDA
extern const kb_backend kb_cuda_backend;
#endif

/* Kernel tables of the CPU backend, one per op family. */
extern const kb_kernel kb_cpu_elementwise[];
extern const size_t kb_cpu_elementwise_count;
extern const kb_kernel kb_cpu_tensor[];
extern const size_t kb_cpu_tensor_count;
extern const kb_kernel kb_cpu_nn[];
extern const size_t kb_cpu_nn_count;
extern const kb_kernel kb_cpu_fast[];   /* library-backed tactics (oneDNN / BLAS) */
extern const size_t kb_cpu_fast_count;
extern const kb_kernel kb_cpu_fused[];
extern const size_t kb_cpu_fused_count;
extern const kb_kernel kb_cpu_spectral[]; /* k_spectral.c */
extern const size_t kb_cpu_spectral_count;
extern const kb_kernel kb_cpu_tfidf[]; /* k_tfidf.c */
extern const size_t kb_cpu_tfidf_count;

/* All CPU kernels for (domain, op_type), reference ("ref") first. Fills up to
 * cap pointers and returns how many exist. */
KN_HIDDEN int kb_cpu_kernels_for(const char *domain, const char *op_type, const kb_kernel **out,
                                 int cap);
/* The CPU kernel with this tactic name, or NULL. */
KN_HIDDEN const kb_kernel *kb_cpu_kernel_find(const char *domain, const char *op_type,
                                              const char *tactic);
/* What binds a CPU plan: architecture and library versions. */
KN_HIDDEN void kb_cpu_describe(char *target, size_t target_cap, char *libs, size_t libs_cap);
/* "dnnl=2.6;openblas=0.3.21"-style versions of the libraries the CPU kernels
 * use (defined by the fast-tactics file). */
KN_HIDDEN const char *kb_cpu_library_versions(void);
/* Threads to use when the caller asked for 0. */
KN_HIDDEN int kb_cpu_default_threads(void);

#endif
