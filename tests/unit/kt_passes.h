/* kt_passes.h - the pass tests' common harness: build a small network
 * through the C API, optimize a copy at a dynamic batch range, find and
 * count fused ops, and compare both nets' outputs through the executor. */
#ifndef KILN_KT_PASSES_H
#define KILN_KT_PASSES_H

static int kt_skipped;

/* ---------------- building ---------------- */

#define IN(...) ((const char *const[]){__VA_ARGS__})
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static inline int node(kiln_network *net, const char *name, const char *op, int n_in,
                const char *const *in, const char *out) {
    int idx = -1;
    const char *outs[1] = {out};
    KT_OK(kiln_network_add_node(net, name, op, "", 20, n_in, in, 1, outs, &idx));
    return idx;
}

static uint32_t rng_state = 12345u;
static inline float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 65536.f * 2.f - 1.f;
}

/* A float constant with values in [lo, lo + span). */
static inline void fconst(kiln_network *net, const char *name, int rank, const int64_t *dims, float lo,
                   float span) {
    int64_t n = kn_numel(rank, dims);
    float *v = malloc((size_t)n * sizeof(float) + 1);
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + span * (frand() + 1.f) * 0.5f;
    KT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_FLOAT, rank, dims, v,
                                    (size_t)n * sizeof(float)));
    free(v);
}

static inline void iconst(kiln_network *net, const char *name, int rank, const int64_t *dims,
                   const int64_t *v) {
    int64_t n = kn_numel(rank, dims);
    KT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_INT64, rank, dims, v,
                                    (size_t)n * sizeof(int64_t)));
}

static inline void fscalar(kiln_network *net, const char *name, float v) {
    KT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_FLOAT, 0, NULL, &v, sizeof v));
}

/* ---------------- optimizing ---------------- */

/* Profile 0 of meta: min/opt/max from the inputs' static dims; a dynamic
 * dim takes dyn_min/dyn_opt/dyn_max. */
static inline kiln_status make_meta(const kn_net *net, kp_meta *meta, int64_t dyn_min, int64_t dyn_opt,
                             int64_t dyn_max) {
    memset(meta, 0, sizeof *meta);
    KN_TRY(kp_meta_alloc_profiles(meta, 1, net->n_inputs));
    kp_profile *pr = &meta->profiles[0];
    for (int k = 0; k < net->n_inputs; k++) {
        const kn_tensor *t = &net->tensors[net->inputs[k]];
        pr->rank[k] = t->rank;
        for (int d = 0; d < t->rank; d++) {
            bool dyn = t->dims[d] < 0;
            pr->min[k][d] = dyn ? dyn_min : t->dims[d];
            pr->opt[k][d] = dyn ? dyn_opt : t->dims[d];
            pr->max[k][d] = dyn ? dyn_max : t->dims[d];
        }
    }
    return KILN_OK;
}

static inline kiln_status optimize(kn_net *net, uint32_t flags, int64_t dmin, int64_t dopt, int64_t dmax) {
    kp_meta meta;
    KN_TRY(kn_net_toposort(net));
    KN_TRY(make_meta(net, &meta, dmin, dopt, dmax));
    kbld b = {.net = net, .flags = flags, .meta = &meta, .threads = 1};
    kiln_status st = kbld_optimize(&b);
    if (st == KILN_OK)
        st = kn_net_compact(net);
    if (st == KILN_OK)
        st = kn_net_toposort(net);
    kp_meta_free(&meta);
    return st;
}

/* ---------------- inspecting ---------------- */

static inline int count_op(const kn_net *net, const char *domain, const char *op) {
    int c = 0;
    for (int i = 0; i < net->n_nodes; i++)
        if (strcmp(net->nodes[i].op_type, op) == 0 && strcmp(net->nodes[i].domain, domain) == 0)
            c++;
    return c;
}

static inline const kn_node *find_op(const kn_net *net, const char *domain, const char *op) {
    for (int i = 0; i < net->n_nodes; i++)
        if (strcmp(net->nodes[i].op_type, op) == 0 && strcmp(net->nodes[i].domain, domain) == 0)
            return &net->nodes[i];
    return NULL;
}

static inline void dump(const kn_net *net) {
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        fprintf(stderr, "    [%d] %s%s%s '%s' (", i, n->domain, n->domain[0] ? "::" : "",
                n->op_type, n->name);
        for (int j = 0; j < n->n_in; j++)
            fprintf(stderr, "%s%s", j ? ", " : "", n->in[j] >= 0 ? net->tensors[n->in[j]].name : "-");
        fprintf(stderr, ") -> %s\n", n->n_out && n->out[0] >= 0 ? net->tensors[n->out[0]].name : "-");
    }
}

/* ---------------- comparing ---------------- */

typedef struct run_in {
    int n;
    const void *data[4];
    int rank[4];
    int64_t dims[4][KILN_MAX_DIMS];
} run_in;

/* Random float data for every input of `net`; a dynamic dim takes `dyn`. */
static inline void make_inputs(const kn_net *net, run_in *ri, float **bufs, int64_t dyn) {
    memset(ri, 0, sizeof *ri);
    ri->n = net->n_inputs;
    for (int k = 0; k < net->n_inputs; k++) {
        const kn_tensor *t = &net->tensors[net->inputs[k]];
        ri->rank[k] = t->rank;
        for (int d = 0; d < t->rank; d++)
            ri->dims[k][d] = t->dims[d] < 0 ? dyn : t->dims[d];
        int64_t n = kn_numel(t->rank, ri->dims[k]);
        size_t es = kiln_dtype_size(t->dtype);
        bufs[k] = malloc((size_t)n * (es > 4 ? es : 4) + 1);
        for (int64_t i = 0; i < n; i++) {
            if (t->dtype == KILN_DTYPE_FLOAT)
                bufs[k][i] = frand() * 2.f;
            else if (t->dtype == KILN_DTYPE_INT64) /* token ids, masks: small and valid */
                ((int64_t *)bufs[k])[i] = i % 2;
            else if (t->dtype == KILN_DTYPE_INT32)
                ((int32_t *)bufs[k])[i] = (int32_t)(i % 2);
            else
                memset((char *)bufs[k] + (size_t)i * es, 0, es);
        }
        ri->data[k] = bufs[k];
    }
}

/* Run both networks on the same inputs and compare every output with a
 * relative tolerance. When the reference cannot run (a kernel has not
 * landed), the numeric check is skipped and said so. */
static inline void compare(kn_net *ref, kn_net *opt, const char *what, int64_t dyn) {
    run_in ri;
    float *bufs[4] = {0};
    make_inputs(ref, &ri, bufs, dyn);
    kt_exec a, b;
    kiln_status sa = kt_exec_run(&a, ref, ri.data, ri.rank, (const int64_t (*)[KILN_MAX_DIMS])ri.dims);
    if (sa != KILN_OK) {
        kt_skipped++;
        fprintf(stderr, "  %s: numeric check skipped, reference run failed: %s\n", what,
                kiln_last_error());
        kt_exec_free(&a);
        for (int k = 0; k < 4; k++)
            free(bufs[k]);
        return;
    }
    kiln_status sb = kt_exec_run(&b, opt, ri.data, ri.rank, (const int64_t (*)[KILN_MAX_DIMS])ri.dims);
    if (sb != KILN_OK) {
        kt_fail++;
        fprintf(stderr, "  %s: optimized network failed to run: %s\n", what, kiln_last_error());
        dump(opt);
    } else {
        /* every arena activation starts on a 256-byte boundary (exec.c) */
        bool aligned = true;
        for (int t = 0; t < opt->n_tensors; t++)
            if (b.c.offset[t] != SIZE_MAX && b.c.offset[t] % 256 != 0)
                aligned = false;
        KT_CHECK(aligned);
        KT_CHECK(ref->n_outputs == opt->n_outputs);
        for (int k = 0; k < ref->n_outputs && k < opt->n_outputs; k++) {
            kn_tinfo ta, tb;
            if (a.c.ti[ref->outputs[k]].dtype != KILN_DTYPE_FLOAT)
                continue;
            const float *ya = kt_exec_output(&a, k, &ta), *yb = kt_exec_output(&b, k, &tb);
            KT_CHECK(strcmp(ref->tensors[ref->outputs[k]].name, opt->tensors[opt->outputs[k]].name) == 0);
            KT_CHECK(ta.rank == tb.rank && memcmp(ta.dims, tb.dims, sizeof(int64_t) * (size_t)ta.rank) == 0);
            int64_t n = kn_numel(ta.rank, ta.dims);
            double worst = 0;
            for (int64_t i = 0; i < n; i++) {
                double d = fabs((double)ya[i] - (double)yb[i]);
                double scale = fabs((double)ya[i]) > 1.0 ? fabs((double)ya[i]) : 1.0;
                if (d / scale > worst)
                    worst = d / scale;
            }
            if (worst > 1e-5) {
                kt_fail++;
                fprintf(stderr, "  %s: output %d differs by %g (relative)\n", what, k, worst);
            } else {
                kt_pass++;
            }
        }
    }
    kt_exec_free(&a);
    kt_exec_free(&b);
    for (int k = 0; k < 4; k++)
        free(bufs[k]);
}

/* Clone `net`, optimize the clone, return it (NULL on failure, reported). */
static inline kn_net *optimized(kn_net *net, uint32_t flags, int64_t dmin, int64_t dopt, int64_t dmax) {
    kn_net *o = NULL;
    KT_OK(kn_net_toposort(net));
    KT_OK(kn_net_clone(net, &o));
    if (!o)
        return NULL;
    kiln_status st = optimize(o, flags, dmin, dopt, dmax);
    KT_OK(st);
    if (st != KILN_OK) {
        kn_net_free(o);
        return NULL;
    }
    return o;
}

#define CHECK_OR_DUMP(cond, net)          \
    do {                                  \
        bool ok_ = (cond);                \
        KT_CHECK(ok_);                    \
        if (!ok_)                         \
            dump(net);                    \
    } while (0)

#endif
