/* k_fast.h - private helpers shared by the library-backed (oneDNN) CPU
 * tactics: the process-wide engine, activation post-ops, and a small "plan"
 * of primitives built in prepare and replayed by a generic run. */
#ifndef KILN_K_FAST_H
#define KILN_K_FAST_H

#include "backends/backend.h"
#include "backends/cpu/act.h"

#ifdef KILN_HAVE_DNNL
#include <dnnl.h>

/* Fail with a message naming the node when a oneDNN call failed. */
KN_HIDDEN kiln_status kf_check(const kn_node *n, dnnl_status_t s, const char *what);
#define KF_TRY(n, call) KN_TRY(kf_check((n), (call), #call))

/* The process-wide CPU engine, created on first use (thread-safe). */
KN_HIDDEN kiln_status kf_engine(const kn_node *n, dnnl_engine_t *out);

/* Activation of a fused op: name from "activation", parameters from
 * attributes alpha_name/beta_name with the defaults of the ONNX op it came
 * from. Returns KB_ACT_INVALID for an unknown name. */
KN_HIDDEN kb_act kf_act_from_node(const kn_node *n, const char *alpha_name, const char *beta_name,
                                  float *alpha, float *beta);
/* Append act as eltwise post-ops (all kb_act values have an exact form). */
KN_HIDDEN dnnl_status_t kf_append_act(dnnl_post_ops_t po, kb_act a, float alpha, float beta);

/* Where a memory object's data lives during a run. */
typedef enum kf_where {
    KF_IN = 0,   /* r->in[index].data */
    KF_OUT,      /* r->out[index].data */
    KF_WS,       /* r->workspace + offset */
    KF_OWNED     /* inst-owned buffer, fixed at prepare (packed weights) */
} kf_where;

#define KF_MAX_MEM 16
#define KF_MAX_PRIM 6
#define KF_MAX_ARGS 8

typedef struct kf_prim {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[KF_MAX_ARGS];
} kf_prim;

/* Before the primitives run: fill out[0] from an input. */
typedef enum kf_prefill {
    KF_PREFILL_NONE = 0,
    KF_PREFILL_BROADCAST2D  /* out[0] ([pm, pn]) = in[prefill_in] broadcast ([cm, cn]) */
} kf_prefill;

/* Per-context, per-shape objects of one node. */
typedef struct kf_inst {
    dnnl_stream_t stream;
    int n_mem;
    struct {
        dnnl_memory_t m;
        kf_where where;
        int index;
        size_t offset;
    } mem[KF_MAX_MEM];
    int n_prim;
    kf_prim prim[KF_MAX_PRIM];
    int n_owned;
    void *owned[4];          /* kn_aligned_alloc'd: packed constant weights */
    size_t ws;               /* workspace bytes a run needs */
    int nthr;                /* OpenMP threads when the primitives were made */
    kf_prefill prefill;
    int prefill_in;
    int64_t pm, pn, cm, cn;
    /* After the primitives: out[0] (post_n floats) = post_act(out[0]) with
     * kiln's vector loops (k_vec.h), for an activation whose oneDNN post-op
     * is slow on this CPU (GELU on AVX2's gemm:jit: see kf_defer_act). */
    kb_act post_act;
    int64_t post_n;
} kf_inst;

/* Whether act is left out of oneDNN's post-ops and applied by kf_run after
 * the primitives (GELU, both forms, where kiln's AVX2 loop runs). */
KN_HIDDEN bool kf_defer_act(kb_act act);

KN_HIDDEN kiln_status kf_inst_new(const kn_node *n, kf_inst **out);
KN_HIDDEN void kf_inst_free(void *inst);
/* Reserve bytes of workspace (64-byte aligned); returns the offset. */
KN_HIDDEN size_t kf_ws_reserve(kf_inst *in, size_t bytes);
/* A memory object for md whose data is found at run time per `where`. */
KN_HIDDEN kiln_status kf_mem(const kn_node *n, kf_inst *in, const dnnl_memory_desc_t *md,
                             kf_where where, int index, size_t offset, dnnl_memory_t *out);
/* Create the primitive of pd (attr must have asked for a user scratchpad),
 * reserving its scratchpad in the workspace. Takes ownership of pd. */
KN_HIDDEN kiln_status kf_prim_add(const kn_node *n, kf_inst *in, dnnl_primitive_desc_t pd,
                                  kf_prim **out);
KN_HIDDEN void kf_prim_arg(kf_prim *p, int arg, dnnl_memory_t m);
/* A reorder primitive src_md -> dst_md between two memories, appended to the plan. */
KN_HIDDEN kiln_status kf_reorder_add(const kn_node *n, kf_inst *in, const dnnl_memory_desc_t *src_md,
                                     dnnl_memory_t src, const dnnl_memory_desc_t *dst_md,
                                     dnnl_memory_t dst);
/* Weights (input `index`, layout user_md) in the layout md the primitive
 * wants; the memory is returned in *out. When their values are known at
 * prepare (`host`, the input's kb_tensor.host: constants) they are reordered
 * once into an inst-owned buffer; otherwise a reorder into the workspace is
 * appended to the plan and runs every time. */
KN_HIDDEN kiln_status kf_pack(const kn_node *n, kf_inst *in, const dnnl_memory_desc_t *user_md,
                              int index, const void *host, const dnnl_memory_desc_t *md,
                              dnnl_memory_t *out);
/* An attribute with a user scratchpad and optional post-ops (po may be NULL). */
KN_HIDDEN kiln_status kf_attr(const kn_node *n, dnnl_post_ops_t po, dnnl_primitive_attr_t *out);
/* A primitive descriptor for the op descriptor `desc` on kiln's engine, with
 * a user scratchpad and the post-ops `po` (may be NULL; destroyed here).
 * `what` names the primitive in the error. */
KN_HIDDEN kiln_status kf_make_pd(const kn_node *n, const void *desc, dnnl_post_ops_t po,
                                 const char *what, dnnl_primitive_desc_t *pd);
/* The run of every oneDNN tactic: bind memories, prefill, execute, wait. */
KN_HIDDEN kiln_status kf_run(const kb_run *r);
/* kiln::Attention with oneDNN's sgemm (k_fast_misc.c). */
KN_HIDDEN bool kf_attention_supports(const kn_node *n, const kn_tinfo *in, int n_in,
                                     const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_attention_prepare(const void *state, const kn_node *n, const kb_tensor *in,
                                           int n_in, const kb_tensor *out, int n_out, void **inst,
                                           size_t *workspace);
KN_HIDDEN kiln_status kf_attention_run(const kb_run *r);

#endif /* KILN_HAVE_DNNL */

/* Kernel entry points of the helper files, gathered into kb_cpu_fast by
 * k_fast.c. */
/* k_fast_conv.c: Conv and kiln::Conv. "dnnl" reorders NCHW to the layout the
 * primitive prefers and back; "dnnl_nchw" computes on NCHW directly. */
KN_HIDDEN bool kf_conv_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_conv_init_any(const kn_node *node, void **state);
KN_HIDDEN kiln_status kf_conv_init_nchw(const kn_node *node, void **state);
KN_HIDDEN void kf_conv_fini(void *state);
KN_HIDDEN kiln_status kf_conv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                      int n_in, const kb_tensor *out, int n_out, void **inst,
                                      size_t *workspace);
/* k_fast_matmul.c: MatMul, kiln::MatMul, Gemm, kiln::Gemm. "dnnl" takes B
 * as it comes; "dnnl_packed" puts B in the layout oneDNN prefers, once when B
 * is constant (kb_tensor.host at prepare), else on every run. */
KN_HIDDEN bool kf_matmul_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                  const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_matmul_prepare(const void *state, const kn_node *node,
                                        const kb_tensor *in, int n_in, const kb_tensor *out,
                                        int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kf_matmul_prepare_packed(const void *state, const kn_node *node,
                                               const kb_tensor *in, int n_in,
                                               const kb_tensor *out, int n_out, void **inst,
                                               size_t *workspace);
KN_HIDDEN bool kf_gemm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_gemm_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                      int n_in, const kb_tensor *out, int n_out, void **inst,
                                      size_t *workspace);
KN_HIDDEN kiln_status kf_gemm_prepare_packed(const void *state, const kn_node *node,
                                             const kb_tensor *in, int n_in, const kb_tensor *out,
                                             int n_out, void **inst, size_t *workspace);
/* k_fast_sgemm.c: MatMul, kiln::MatMul as one sgemm call and kiln's
 * epilogue ("sgemm": dnnl_sgemm; "blas": OpenBLAS). */
KN_HIDDEN bool kf_sgemm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                 const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_sgemm_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                       int n_in, const kb_tensor *out, int n_out, void **inst,
                                       size_t *workspace);
KN_HIDDEN kiln_status kf_blas_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                      int n_in, const kb_tensor *out, int n_out, void **inst,
                                      size_t *workspace);
KN_HIDDEN void kf_sgemm_release(void *inst);
KN_HIDDEN kiln_status kf_sgemm_run(const kb_run *r);
/* k_fast_misc.c: Softmax, LayerNormalization, MaxPool, AveragePool,
 * GlobalAveragePool, GlobalMaxPool on plain tensors ("dnnl"). */
KN_HIDDEN bool kf_softmax_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                   const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_softmax_prepare(const void *state, const kn_node *node,
                                         const kb_tensor *in, int n_in, const kb_tensor *out,
                                         int n_out, void **inst, size_t *workspace);
KN_HIDDEN bool kf_layernorm_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                     const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_layernorm_prepare(const void *state, const kn_node *node,
                                           const kb_tensor *in, int n_in, const kb_tensor *out,
                                           int n_out, void **inst, size_t *workspace);
KN_HIDDEN bool kf_pool_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kf_pool_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                      int n_in, const kb_tensor *out, int n_out, void **inst,
                                      size_t *workspace);

#endif
