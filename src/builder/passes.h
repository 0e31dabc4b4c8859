/* passes.h - what the optimization passes share: a per-pass view of the
 * network (readers of each tensor, shapes at every profile point) and small
 * helpers to read constants and rewrite nodes. passes.c implements them and
 * the pass manager; each pass lives in its own pass_*.c. */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "builder.h"
#include "graph/fused.h"

/* Shared state of one pass run. Node and tensor indices stay valid for the
 * whole run of a pass: rewrites mark nodes dead and append tensors, and the
 * pass manager compacts and reorders the network between passes. */
typedef struct kpass {
    kbld *b;
    kn_net *net;
    /* readers, built for the network as it was when the pass began */
    int n_tensors;        /* tensor count the tables below cover */
    int n_nodes;
    int *uses;            /* per tensor: readers, a graph output counting one */
    int *rd_start;        /* per tensor: first entry in rd_node (n_tensors + 1) */
    int *rd_node;         /* reader nodes, one entry per reading input slot */
    bool *is_output;      /* per tensor: a graph output */
    bool *touched;        /* per node: rewritten or killed during this pass */
    /* reads moved by kpass_replace_reads during this pass, so that each
     * replacement visits only the readers of the tensor it replaces */
    int n_moved_tensors;  /* tensors the two tables below cover */
    int *moved_head;      /* per tensor: first entry in moved, -1 for none */
    int *alias;           /* per tensor: what replaced it, -1 for nothing */
    struct kpass_moved { int node, next; } *moved; /* readers moved onto a tensor */
    int n_moved, cap_moved;
    /* shapes at every distinct profile point (computed on demand) */
    int shapes_state;     /* 0 not computed, 1 available, -1 inference failed */
    int shapes_tensors;   /* tensor count the shape tables cover */
    int n_points;
    kn_tinfo **pts;       /* n_points arrays of shapes_tensors entries */
    bool *dd;             /* per tensor: a data-dependent shape feeds it */
} kpass;

/* A pass: rewrites p->net and adds the number of rewrites to *changed. */
typedef kiln_status (*kpass_fn)(kpass *p, int *changed);

KN_HIDDEN kiln_status kpass_canonicalize(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_fold(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_dead_code(kpass *p, int *changed);
/* If with a constant condition -> the nodes of its branch (pass_control.c). */
KN_HIDDEN kiln_status kpass_control(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_conv_bn(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_affine_conv(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_bn_split(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_pad_conv(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_gelu(kpass *p, int *changed);
/* com.microsoft contrib ops (Gelu, FastGelu, BiasGelu, QuickGelu, the
 * (Skip)(Simplified)LayerNormalizations) as ONNX ops (pass_contrib.c). */
KN_HIDDEN kiln_status kpass_contrib(kpass *p, int *changed);
/* Decomposed LayerNorm / RMSNorm -> LayerNormalization / RMSNormalization
 * (pass_norms.c). */
KN_HIDDEN kiln_status kpass_norms(kpass *p, int *changed);
/* x * cos + rotate_half(x) * sin spelled out -> RotaryEmbedding (pass_rotary.c). */
KN_HIDDEN kiln_status kpass_rotary(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_bias_act(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_qkv(kpass *p, int *changed);
/* Linear layers of one input with constant weights of equal K -> one GEMM
 * with concatenated weights and biases, split after (pass_hfuse.c). */
KN_HIDDEN kiln_status kpass_hfuse(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_gather_transpose(kpass *p, int *changed);
/* The score side of an attention pattern at Softmax node si (last axis,
 * rank 4): Softmax(fill(S * c + M + M2)) with each of the scale, the masks
 * and the fill optional, where S is a MatMul's output and fill a Where
 * replacing masked scores by a large negative constant; every intermediate
 * read once (pass_attention.c). On false, `why` says which check stopped it. */
typedef struct kpass_scores {
    int softmax, add, add2, scale_node, scores; /* nodes; -1 when absent */
    int mask, mask2;                            /* M, M2, or -1 */
    /* a batch-split view around some of the Adds: split Reshapes the
     * scores [B, H, Sq, Sk] to [B / G, G, H, Sq, Sk], merge back (both -1
     * when absent); a mask added inside it (mask_split, mask2_split) is
     * right-aligned to [B / G, G, H, Sq, Sk] and reads window b % G */
    int split, merge;
    bool mask_split, mask2_split;
    int fill, fill_cond;   /* the masked_fill Where and its condition, or -1 */
    bool fill_keep;        /* the condition keeps the score (else it masks it) */
    double fill_value;     /* what the fill writes */
    float scale;           /* c (1 / c for a Div), else 1 */
    const char *why;       /* on false: the reason (a static string) */
} kpass_scores;
KN_HIDDEN bool kpass_attn_scores(const kpass *p, int si, kpass_scores *s);
/* The one additive mask the scores of s add (M + M2, the fill as a Where
 * of 0 and its value), built from new nodes named after `name`; -1 when
 * there is none. */
KN_HIDDEN kiln_status kpass_scores_mask(kpass *p, const kpass_scores *s, const char *name,
                                        int *mask);
/* Node `node` becomes kiln::Attention(qkv[0], qkv[1], qkv[2], mask) with
 * `scale` (its own attributes dropped), named after the score MatMul, then
 * the Softmax; touched. */
KN_HIDDEN kiln_status kpass_to_attention(kpass *p, int node, int scores, int softmax,
                                         const int *qkv, int mask, float scale);
/* The one attention matcher (pass_mha.c): from each Softmax, attention in
 * any exporter's spelling; the ONNX and com.microsoft attention ops too. */
KN_HIDDEN kiln_status kpass_attention(kpass *p, int *changed);
/* ONNX Attention and com.microsoft MultiHeadAttention as kiln::Attention
 * where they compute no more than it (pass_attention.c; run by kpass_attention). */
KN_HIDDEN kiln_status kpass_attn_ops(kpass *p, int *changed);
/* A row-wise projection between layout ops whose row orders cancel reads
 * its rows in place (pass_mha.c). */
KN_HIDDEN kiln_status kpass_row_permutes(kpass *p, int *changed);
/* A chain of layout ops that keeps its input's element order is one
 * Reshape (pass_mha.c). */
KN_HIDDEN kiln_status kpass_view_chains(kpass *p, int *changed);
/* kiln::Attention with a constant causal mask gets causal=1 (pass_mha.c). */
KN_HIDDEN kiln_status kpass_attn_causal(kpass *p, int *changed);
/* kiln::Attention drops a mask whose every element is provably one finite
 * value (pass_range.c: value ranges through the ops that build masks). */
KN_HIDDEN kiln_status kpass_attn_uniform_mask(kpass *p, int *changed);
/* kiln::Attention whose mask is a run-time causal predicate And the
 * padding terms gets causal=1 and the padding terms alone (pass_causal.c). */
KN_HIDDEN kiln_status kpass_attn_causal_mask(kpass *p, int *changed);
/* kiln::Attention and RotaryEmbedding read a Split part or a heads-first
 * Transpose's input in place, through their operand views (pass_views.c). */
KN_HIDDEN kiln_status kpass_attn_views(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_chain_views(kpass *p, int *changed);
/* A Split with one part read -> a Slice of that part (pass_views.c). */
KN_HIDDEN kiln_status kpass_split_part(kpass *p, int *changed);
/* A patch-embedding Conv (kernel = stride) as a GEMM over the patches
 * (pass_patchify.c). */
KN_HIDDEN kiln_status kpass_patchify(kpass *p, int *changed);
/* Shape(t) reads the earliest tensor deciding its answer (pass_shape.c). */
KN_HIDDEN kiln_status kpass_shape_sink(kpass *p, int *changed);
KN_HIDDEN kiln_status kpass_chain(kpass *p, int *changed);
/* Sums (and a row gather) feeding a LayerNormalization (pass_layernorm.c):
 * after the chains are made. */
KN_HIDDEN kiln_status kpass_layernorm(kpass *p, int *changed);
/* 1 or 2 when op_type (default domain) is an elementwise op an
 * ElementwiseChain takes with that many operands, else 0. */
KN_HIDDEN int kpass_chain_op_arity(const char *op_type);
/* Explicit quantization (pass_qdq.c): Q/DQ chains and QLinear* / *Integer
 * ops as kiln::QConv / kiln::QMatMul; before constant folding. */
KN_HIDDEN kiln_status kpass_qdq(kpass *p, int *changed);
/* Reduced precision (pass_precision.c): runs late, once. */
KN_HIDDEN kiln_status kpass_precision(kpass *p, int *changed);
/* pass_cast.c: Cast(Cast(x)) -> Cast(x) where no value changes (after
 * precision and io-types, which add casts). */
KN_HIDDEN kiln_status kpass_cast_pairs(kpass *p, int *changed);
/* Whether Cast(Cast(x: t0, to t1), to t2) equals Cast(x, to t2) for every x. */
KN_HIDDEN bool kpass_cast_pair_exact(kiln_dtype t0, kiln_dtype t1, kiln_dtype t2);
/* pass_io.c: the types inputs and outputs have in the plan (after precision). */
KN_HIDDEN kiln_status kpass_io_types(kpass *p, int *changed);
/* Channels-last regions around convolutions (pass_layout.c): after precision. */
KN_HIDDEN kiln_status kpass_layout(kpass *p, int *changed);

/* ---- shapes ---- */
/* Infer shapes at every profile point if not done since the last rewrite.
 * Fails only on lack of memory; when inference itself fails, shapes are
 * reported unknown (and passes skip rewrites that need them). */
KN_HIDDEN kiln_status kpass_need_shapes(kpass *p);
/* Whether some live node satisfies `pred`. */
KN_HIDDEN bool kpass_any(const kpass *p, bool (*pred)(const kn_node *n));
/* Whether the pass has work: some live node satisfies `pred` and the
 * shapes at every profile point are known (inferred here when needed);
 * *ready says so. Fails only on lack of memory. */
KN_HIDDEN kiln_status kpass_shapes_if(kpass *p, bool (*pred)(const kn_node *n), bool *ready);
/* Shape of tensor t at profile point k, or NULL when unknown. */
KN_HIDDEN const kn_tinfo *kpass_shape(const kpass *p, int k, int t);
/* Whether a and b have the same known shape at every profile point. */
KN_HIDDEN bool kpass_same_shape(const kpass *p, int a, int b);
/* Whether tensor t's shape is known and identical at every profile point,
 * and no data-dependent shape feeds it; fills *out when so. */
KN_HIDDEN bool kpass_static_shape(const kpass *p, int t, kn_tinfo *out);
/* Element type of t when known (constant, input, or inferred), else UNDEFINED. */
KN_HIDDEN kiln_dtype kpass_dtype(const kpass *p, int t);
/* Rank of t when known at every profile point, else -1. */
KN_HIDDEN int kpass_rank(const kpass *p, int t);

/* ---- readers ---- */
/* The one node that reads t, when t has exactly one reader, is not a graph
 * output, and that reader is alive and untouched; else -1. */
KN_HIDDEN int kpass_sole_reader(const kpass *p, int t);
/* Live, untouched producer of t, or -1. */
KN_HIDDEN int kpass_producer(const kpass *p, int t);
/* Whether node i is alive and untouched in this pass. */
KN_HIDDEN bool kpass_free(const kpass *p, int i);
/* Mark node i rewritten (kill: also dead). */
KN_HIDDEN void kpass_touch(kpass *p, int i);
KN_HIDDEN void kpass_kill(kpass *p, int i);
/* Whether node n is (domain "", op). */
KN_HIDDEN bool kpass_is(const kn_node *n, const char *op);
/* Whether node n is (domain "kiln", op). */
KN_HIDDEN bool kpass_is_kiln(const kn_node *n, const char *op);

/* ---- constants ---- */
KN_HIDDEN bool kpass_is_const(const kn_net *net, int t);
/* Element count of a value. */
KN_HIDDEN int64_t kpass_numel(const kn_tdata *v);
/* Element k of a numeric value as double (reads unaligned data safely). */
KN_HIDDEN double kpass_value_at(const kn_tdata *v, int64_t k);
/* Element k of an integer value, exact (floats are truncated). */
KN_HIDDEN int64_t kpass_value_int(const kn_tdata *v, int64_t k);
/* Whether t is a constant holding one number; *out gets it. */
KN_HIDDEN bool kpass_const_scalar(const kn_net *net, int t, double *out);
/* Copy a FLOAT constant's values into a fresh kn_malloc'd array. */
KN_HIDDEN kiln_status kpass_const_floats(const kn_net *net, int t, float **out);
/* Make a new constant tensor named after hint; takes v's data. */
KN_HIDDEN kiln_status kpass_add_const(kn_net *net, const char *hint, kn_tdata *v, int *index);
/* A new constant int64 vector of n values (shapes, permutations, indices). */
KN_HIDDEN kiln_status kpass_add_i64(kn_net *net, const char *hint, const int64_t *v, int64_t n,
                                    int *index);
/* Whether t is a constant int32/int64 scalar of rank 0 (a Gather index);
 * *v gets it. */
KN_HIDDEN bool kpass_const_index(const kn_net *net, int t, int64_t *v);

/* ---- node rewriting ---- */
/* Change a node's op (strings copied). */
KN_HIDDEN kiln_status kpass_retype(kn_node *n, const char *op_type, const char *domain, int opset);
/* Append " + other" to the node's name. */
KN_HIDDEN kiln_status kpass_join_name(kn_node *n, const char *other);
/* Set input slot i, growing the input list with absent (-1) entries. */
KN_HIDDEN kiln_status kpass_set_input(kn_node *n, int i, int t);
/* Make node `node` produce tensor t as its output slot j. */
KN_HIDDEN void kpass_set_output(kn_net *net, int node, int j, int t);
/* A list-of-strings attribute (graph.h has no setter for those). */
KN_HIDDEN kiln_status kpass_set_strings(kn_node *n, const char *name, const char *const *v,
                                        size_t count);
/* Replace every read of tensor `from` by `to` in live nodes; returns count.
 * Visits only from's readers (the reader tables, the reads moved onto it in
 * this pass, the nodes added in this pass), so a pass replacing many
 * tensors stays linear; a read of `from` that a pass wrote into an older
 * node by hand is redirected when the pass ends (kpass_apply_aliases). */
KN_HIDDEN int kpass_replace_reads(kpass *p, int from, int to);
/* Redirect what kpass_replace_reads could not see (the pass manager calls
 * this when a pass ends). */
KN_HIDDEN void kpass_apply_aliases(kpass *p);
/* Node prod, the producer of tensor `from`, writes `to` instead, and every
 * live reader of `from` reads `to`. */
KN_HIDDEN void kpass_move_tensor(kpass *p, int prod, int from, int to);
/* Whether tensor t is a graph input, output or constant. */
KN_HIDDEN bool kpass_graph_io(const kn_net *net, int t);
/* Append a Cast of tensor `from` to `to_type`, writing `to`, named
 * "<what> <from's name> -> <type>". */
KN_HIDDEN kiln_status kpass_add_cast(kn_net *net, const char *what, int from, int to,
                                     kiln_dtype to_type);
/* MatMul or Gemm (plain or kiln::) of input 0 by a constant matrix, not
 * transposing input 0: output dims are input 0's but the last. */
KN_HIDDEN bool kpass_matrix_rows(const kn_net *net, const kn_node *n);
/* The activation that node n computes, when it is one an epilogue accepts:
 * name as kb_act_parse knows it, and its alpha/beta. */
KN_HIDDEN bool kpass_activation(const kn_net *net, const kn_node *n, const char **name,
                                float *alpha, float *beta);

#endif
