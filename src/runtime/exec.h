/* exec.h - the executor shared by the builder and the runtime: a program
 * (nodes bound to kernels, immutable, shared by threads) and per-context
 * state (shapes for the current inputs, host values computed at shape time,
 * the activation arena, per-step kernel instances and pre-bound tensor views). */
#ifndef KILN_EXEC_H
#define KILN_EXEC_H

#include "backends/backend.h"

typedef struct kx_step {
    int node;                 /* index in the net */
    const kb_kernel *k;       /* kernel that runs it */
    void *state;              /* k->init's state */
    bool host;                /* computed on the host at shape time (its outputs'
                                 values are needed to infer shapes) */
    bool data_dependent;      /* may produce data-dependent output shapes */
    bool alias;               /* a reshape-like step whose output shares its input's
                                 memory: planned together, never run */
    bool on_host;             /* placed on the host at run time on a device backend
                                 (tactic KX_HOST_TACTIC "<cpu tactic>"): the CPU
                                 backend's kernel, on host memory, after a wait for
                                 the device work before it */
} kx_step;

/* A layer's tactic "host:<tactic>" places it on the host: on a device
 * backend it runs the CPU backend's kernel of that tactic on host memory
 * (strings, sequences and optionals live there; ops without a kernel of the
 * device go there), its device inputs and outputs crossing through
 * kiln::ToHost / kiln::ToDevice reformat layers that the builder inserts
 * (src/builder/place.c). On the CPU backend the prefix means nothing. */
#define KX_HOST_TACTIC "host:"
/* The CPU tactic of a host-placed tactic name, or NULL when it is not one. */
static inline const char *kx_host_tactic(const char *tactic) {
    size_t n = sizeof KX_HOST_TACTIC - 1;
    return tactic && strncmp(tactic, KX_HOST_TACTIC, n) == 0 ? tactic + n : NULL;
}
/* Whether node n is a reformat layer (kiln::ToHost / kiln::ToDevice): a
 * copy between device and host memory, bound by the executor to the
 * backend's copies. */
KN_HIDDEN bool kx_is_reformat(const kn_node *n);

typedef struct kx_program {
    const kn_net *net;        /* borrowed; nodes in topological order */
    const kb_backend *be;     /* where non-host steps run and activations live */
    int n_steps;
    kx_step *steps;
    int threads;
    void **dconst;            /* per tensor: device copy of a constant (GPU backends) */
    bool no_graphs;           /* a device step's kernel waits on the device (kx_ctl_syncs),
                                 or a step runs on the host: contexts never capture graphs */
    bool *on_host_t;          /* per tensor: lives in host memory at run time (outputs of
                                 host-placed steps and of kiln::ToHost, string, sequence
                                 and optional graph inputs); NULL on the CPU backend */
    int n_host_steps;         /* steps placed on the host at run time */
} kx_program;

/* Bind every node to a kernel on the CPU: the tactic named on the node
 * (node->tactic), else the reference kernel. Marks host-value tensors
 * (KN_T_HOST) in net. */
KN_HIDDEN kiln_status kx_program_init(kx_program *p, kn_net *net, int threads);
/* The same on backend `be`; host steps always run on the CPU. Constants are
 * copied to the device once here. */
KN_HIDDEN kiln_status kx_program_init_on(kx_program *p, kn_net *net, int threads,
                                         const kb_backend *be);
KN_HIDDEN void kx_program_fini(kx_program *p);
/* Check a program loaded from a plan at one point of a profile (one shape
 * per graph input), before any kernel is prepared: every node's shape
 * inference (its attributes against its inputs; every output held to the
 * sizes kiln plans) and, with `tactics`, that each step's kernel takes its
 * node there, as the builder required when it chose the tactic. Nodes that
 * depend on the values of shape-tensor inputs (unknown until a caller
 * binds them) are left to the context's own inference. */
KN_HIDDEN kiln_status kx_program_check(const kx_program *p, const int *rank,
                                       const int64_t (*dims)[KILN_MAX_DIMS], bool tactics);

typedef struct kx_alloc_info {
    size_t arena_bytes;       /* packed activation arena */
    size_t host_arena_bytes;  /* device backends: the host tensors' arena */
    size_t sum_bytes;         /* all activations side by side */
    size_t workspace_bytes;   /* largest per-step workspace */
} kx_alloc_info;

typedef struct kx_ctx {
    const kx_program *p;
    kn_tinfo *ti;             /* per tensor: type and shape for the current inputs */
    void **hostval;           /* per tensor: host value computed at shape time (owned) */
    void **addr;              /* per tensor: memory during a run */
    void **user;              /* per tensor: caller-bound address (I/O only) */
    size_t *offset;           /* per tensor: offset in the arena, SIZE_MAX if none */
    int64_t (*in_dims)[KILN_MAX_DIMS];  /* per graph input: shape set by the caller */
    int *in_rank;             /* per graph input: -1 until set */
    void **inst;              /* per step: kernel instance */
    size_t *ws;               /* per step: workspace size */
    kb_tensor *views;         /* per step: n_in + n_out pre-bound views */
    int *view_at;             /* per step: first view index */
    bool *inplace;            /* per step: a Concat whose inputs were planned as views
                                 of its output (written in place; the step does not run) */
    uint8_t *arena;
    size_t arena_cap;
    void *workspace;
    size_t workspace_cap;
    uint8_t *harena;          /* device backends: host memory of the tensors that live
                                 there (p->on_host_t), planned like the arena */
    size_t harena_cap;
    void *hworkspace;         /* host workspace of the host-placed steps */
    size_t hworkspace_cap;
    bool shapes_ok;           /* shapes inferred for the current inputs */
    bool prepared;            /* memory planned and kernels prepared */
    bool has_data_dependent;
    void *stream;             /* GPU backends: the caller's stream of the current run */
    void *own_stream;         /* GPU backends: used when the caller passes none */
    bool use_graphs;          /* capture and replay device graphs (default on) */
    int threads;              /* CPU threads for this context (0 = the program's) */
    void *graph;              /* captured graph for the current shapes and addresses */
    uint64_t graph_sig;
    bool dd_ran;              /* a run shrank data-dependent shapes: re-infer next run */
    void **saved;             /* per tensor: copy of a shape-tensor input's values at inference */
    void **dhost;             /* per tensor: device copy of a host value (GPU backends) */
    kx_alloc_info info;
    kn_tinfo *in_info;        /* per graph input: what is known of a sequence or optional
                                 input before a list is bound (kx_ctx_set_input_info) */
    /* profiling */
    bool profiling;
    double *step_ms;
    uint64_t runs;
} kx_ctx;

KN_HIDDEN kiln_status kx_ctx_init(kx_ctx *c, const kx_program *p);
KN_HIDDEN void kx_ctx_fini(kx_ctx *c);
/* Set the shape of graph input i (index into net->inputs). */
KN_HIDDEN kiln_status kx_ctx_set_input_shape(kx_ctx *c, int input, int rank, const int64_t *dims);
/* What is known of sequence or optional input i (a handle: dtype and the
 * seq fields of kn_tinfo) while no list is bound to it; NULL forgets it.
 * A bound list's own facts take precedence. */
KN_HIDDEN void kx_ctx_set_input_info(kx_ctx *c, int input, const kn_tinfo *info);
/* Infer every tensor's shape for the current input shapes, computing host
 * values on the way. Uses input values bound with kx_ctx_bind when an input
 * itself is a host-value tensor. */
KN_HIDDEN kiln_status kx_ctx_infer(kx_ctx *c);
/* Infer if needed, plan memory and prepare kernels (allocates; not on the
 * execution path when shapes do not change). */
KN_HIDDEN kiln_status kx_ctx_prepare(kx_ctx *c);
/* Bind caller memory to a tensor (graph inputs and outputs). */
KN_HIDDEN void kx_ctx_bind(kx_ctx *c, int tensor, void *data);
/* Run every step. Inputs must be bound. On GPU backends the steps are
 * captured into a graph once per shapes and addresses, then replayed. */
KN_HIDDEN kiln_status kx_ctx_run(kx_ctx *c);
/* Forget the captured graph (shapes or addresses changed). */
KN_HIDDEN void kx_ctx_drop_graph(kx_ctx *c);

/* If, Loop and Scan (control.c), written once for every backend: prepare
 * opens the node's bodies as programs and contexts bound to backend `be`
 * (its kernels run the bodies' steps on the node's stream); the run
 * functions read conditions and trip counts on the host (one copy and a
 * wait where only the device has them) and move every value through `be`.
 * A backend's kernel table wraps kx_ctl_prepare with its own backend. */
KN_HIDDEN kiln_status kx_ctl_prepare(const kb_backend *be, const kn_node *node,
                                     const kb_tensor *in, int n_in, void **inst,
                                     size_t *workspace);
KN_HIDDEN void kx_ctl_release(void *inst);
KN_HIDDEN kiln_status kx_ctl_run_if(const kb_run *r);
KN_HIDDEN kiln_status kx_ctl_run_loop(const kb_run *r);
KN_HIDDEN kiln_status kx_ctl_run_scan(const kb_run *r);
/* Whether If/Loop/Scan node `node` must run on the host on device backend
 * `be`: an input or output (in/out may be NULL) or a tensor of a body
 * (nested bodies included) of a type only the host holds (a string, a
 * sequence, an optional; declared, a constant or a Cast to string), or a
 * body node that `be` has no kernel for (Shape and Size aside). A device
 * backend's control kernels decline such a node, so the builder places it
 * on the host whole (src/builder/place.c). */
KN_HIDDEN bool kx_ctl_needs_host(const kb_backend *be, const kn_node *node, const kn_tinfo *in,
                                 int n_in, const kn_tinfo *out, int n_out);
/* Whether kernel k is one of these: it runs a body step by step and may
 * wait on the device, so a plan holding one never captures CUDA graphs. */
KN_HIDDEN bool kx_ctl_syncs(const kb_kernel *k);

#endif
