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
    /* the build's timing cache (NULL: none), shared by the precision pass
     * and tactic selection, and the random inputs timing copies from */
    struct kbld_tcache *cache;
    void *time_pool;
    /* zeros bound to host-value inputs that decide no shape and were given
     * no values (kbld_decides_shape), for shape inference */
    void *zeros;
    size_t zeros_size;
} kbld;

/* Whether the values of tensor t decide the shape of some tensor of net:
 * they reach, through any ops but Shape and Size, an input of an op whose
 * output shapes depend on that input's values (Reshape's shape, Resize's
 * scales, OneHot's depth, ...). Inputs whose values the ops read but whose
 * shapes do not follow from them (NonMaxSuppression's thresholds, CumSum's
 * axis, Dropout's ratio, Trilu's k, Resize's roi) do not count. */
KN_HIDDEN bool kbld_decides_shape(const kn_net *net, int t);

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

/* Time node n (of b->net) at the inputs and outputs in[] / out[] (per slot,
 * n->n_in and n->n_out entries; the types may differ from the tensors',
 * e.g. float16 for a layer the precision pass considers): the fastest
 * candidate tactic that supports them, in *ms. A constant input is read
 * from its value when its type is unchanged, else random. Fails when no
 * tactic supports or can run them. Through kbld_time_hook when set. */
KN_HIDDEN kiln_status kbld_time_layer(kbld *b, const kn_node *n, const kn_tinfo *in,
                                      const kn_tinfo *out, double *ms);
/* Time a Cast of a tensor of shape/type `from` to type `to` (the cast the
 * precision pass adds at a converted layer's edge). */
KN_HIDDEN kiln_status kbld_time_cast(kbld *b, const kn_tinfo *from, kiln_dtype to, double *ms);
/* Tests: replaces every timing of kbld_time_layer / kbld_time_cast (the cast
 * is a node named "(precision cast)" of op Cast) when set. NULL = measure. */
typedef kiln_status (*kbld_time_fn)(const kn_node *n, const kn_tinfo *in, const kn_tinfo *out,
                                    double *ms);
KN_HIDDEN extern kbld_time_fn kbld_time_hook;
/* Tactic choice that load cannot fool (builder.c). Candidates are timed in
 * KBLD_TACTIC_ROUNDS interleaved rounds (every candidate once a round, the
 * order reversed every other round); ms[r * n + c] is candidate c's time in
 * round r, < 0 when it could not run. `dflt` is the candidate the rule picks
 * without timing (the library tactic registered last; never the reference
 * kernel when a fast tactic supports the layer). A candidate other than
 * dflt is chosen only when it beats dflt by `margin` (a fraction) in EVERY
 * round; among those, the fastest by its slowest round. When dflt could not
 * run, the fastest that ran in every round. Returns the index, -1 when none
 * ran. */
#define KBLD_TACTIC_ROUNDS 2
#define KBLD_TACTIC_MARGIN 0.10
KN_HIDDEN int kbld_tactic_pick(int n, int rounds, const double *ms, int dflt, double margin);
/* Tests: replaces the timing of one candidate tactic in one round of the
 * tactic choice when set. NULL = measure. */
typedef kiln_status (*kbld_tactic_time_fn)(const kn_node *n, const char *tactic, int round,
                                           double *ms);
KN_HIDDEN extern kbld_tactic_time_fn kbld_tactic_time_hook;
/* Whether tactic timing is off for this build (NO_TIMING, REF_TACTICS or
 * optimization level 0). */
KN_HIDDEN bool kbld_no_timing(const kbld *b);

/* Run every optimization pass to a fixed point (passes.c). Skips fusion when
 * KILN_BUILDER_FLAG_NO_FUSION is set. Logs what each pass changed (verbose). */
KN_HIDDEN kiln_status kbld_optimize(kbld *b);

/* Placement on a device backend (place.c). The first input or output of
 * node n whose type only the host holds (a string, a sequence or an
 * optional; types from ti when given, else the net's), or -1: such a layer
 * runs on the host. */
KN_HIDDEN int kbld_host_only_tensor(const kn_net *net, const kn_node *n, const kn_tinfo *ti);
/* After the tactics are chosen: around every layer placed on the host
 * (tactic KX_HOST_TACTIC...), a kiln::ToHost for each input that lives on
 * the device and a kiln::ToDevice for each output that a device layer or
 * the caller reads (a graph output of a device type keeps its name). No-op
 * on the CPU backend. */
KN_HIDDEN kiln_status kbld_place_reformats(kbld *b);

#endif
