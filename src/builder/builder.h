/* builder.h - what the builder's passes share: the network being optimized,
 * the profile shapes, and shape inference over them. */
#ifndef KILN_BUILDER_INTERNAL_H
#define KILN_BUILDER_INTERNAL_H

#include "graph/graph.h"
#include "plan/plan.h"

typedef struct kbld {
    kn_net *net;            /* the copy being optimized (toposorted) */
    uint32_t flags;         /* kiln_builder_flag */
    const kp_meta *meta;    /* profiles (inputs in net->inputs order) */
    int threads;
    /* values of shape-tensor inputs per profile point (may be NULL) */
    const struct kiln_builder_config *cfg;
    /* the backend tactics are chosen and timed on (NULL = CPU) */
    const struct kb_backend *be;
} kbld;

/* Which profile shapes to infer with. */
typedef enum kbld_which { KBLD_MIN = 0, KBLD_OPT = 1, KBLD_MAX = 2 } kbld_which;

/* Infer every tensor's type and shape at one profile point. *ti is an array
 * of net->n_tensors entries (kn_free it); values of constant and host-value
 * tensors are NOT kept (value is NULL on return). */
KN_HIDDEN kiln_status kbld_infer(kbld *b, int profile, kbld_which which, kn_tinfo **ti);

/* Whether tensor t has the same shape at every point of every profile;
 * fills *static_ti with it when so (value NULL). Used for shape folding. */
KN_HIDDEN kiln_status kbld_static_shapes(kbld *b, bool **is_static, kn_tinfo **ti);

/* Evaluate node `node` whose inputs are all constants with the reference
 * kernels, and turn its outputs into constants (the node becomes dead). */
KN_HIDDEN kiln_status kbld_fold_node(kbld *b, int node);

/* The precision constraint set for a layer name with
 * kiln_builder_config_set_layer_precision, or UNDEFINED. */
KN_HIDDEN kiln_dtype kbld_layer_precision(const struct kiln_builder_config *cfg, const char *name);
/* Number of layer-precision entries and entry i's name (for reporting). */
KN_HIDDEN int kbld_layer_precision_count(const struct kiln_builder_config *cfg);
KN_HIDDEN const char *kbld_layer_precision_name(const struct kiln_builder_config *cfg, int i);

/* One kiln_builder_config_set_io_type entry: input or output `index` (-1:
 * every one) takes `dtype`. */
typedef struct kbld_io_type {
    bool output;
    int index;
    kiln_dtype dtype;
} kbld_io_type;
/* The entries set on cfg (NULL cfg: none). */
KN_HIDDEN const kbld_io_type *kbld_io_types(const struct kiln_builder_config *cfg, int *count);

/* Run every optimization pass to a fixed point (passes.c). Skips fusion when
 * KILN_BUILDER_FLAG_NO_FUSION is set. Logs what each pass changed (verbose). */
KN_HIDDEN kiln_status kbld_optimize(kbld *b);

#endif
