/* builder.c - the public builder: configuration and profiles, the build
 * pipeline (order, check, optimize, choose tactics, plan memory, serialize)
 * and the services passes share (shape inference at profile points,
 * folding a node into constants). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "builder.h"
#include "calib.h"
#include "graph/fused.h"
#include "kiln/kiln_builder.h"
#include "plugin/plugin.h"
#include "runtime/exec.h"
#include "timing_cache.h"

typedef struct cfg_shape {
    char *name;
    int rank;                 /* -1 when only values were given */
    int64_t min[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
    kiln_dtype vtype;         /* shape-tensor values, UNDEFINED when none */
    size_t vcount;
    void *values[3];          /* min, opt, max (kn_aligned_alloc) */
} cfg_shape;

typedef struct cfg_profile {
    int n, cap;
    cfg_shape *shapes;
} cfg_profile;

struct kiln_builder_config {
    char *timing_cache;       /* file path, or NULL */
    uint32_t flags;
    uint64_t workspace_limit;
    char backend[16];
    int threads;
    int opt_level;            /* 0..5, 3 by default */
    int n_profiles, cap_profiles;
    cfg_profile *profiles;
    /* per-layer precision constraints (pass_precision.c reads them) */
    int n_lprec, cap_lprec;
    char **lprec_names;
    kiln_dtype *lprec_types;
    /* I/O types (pass_io.c reads them) */
    int n_io, cap_io;
    kbld_io_type *io;
    struct kcal_cfg *calib;   /* INT8 calibration (calib.c), or NULL */
};

kcal_cfg **kbld_calib_slot(kiln_builder_config *cfg) { return &cfg->calib; }
const kcal_cfg *kbld_calib(const kiln_builder_config *cfg) { return cfg ? cfg->calib : NULL; }
uint32_t kbld_cfg_flags(const kiln_builder_config *cfg) { return cfg->flags; }
const char *kbld_cfg_backend(const kiln_builder_config *cfg) { return cfg->backend; }
int kbld_cfg_threads(const kiln_builder_config *cfg) { return cfg->threads; }

/* ---------------- configuration ---------------- */

KILN_API kiln_status kiln_builder_config_set_optimization_level(kiln_builder_config *cfg,
                                                               int level) {
    if (!cfg)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "builder config is NULL");
    if (level < 0 || level > 5)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "builder optimization level %d is outside 0 to 5", level);
    cfg->opt_level = level;
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_create(kiln_builder_config **out) {
    if (!out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_config_create: out is NULL");
    kiln_builder_config *c = kn_calloc(1, sizeof *c);
    if (!c)
        return KILN_ERR_OUT_OF_MEMORY;
    snprintf(c->backend, sizeof c->backend, "cpu");
    c->opt_level = 3;
    *out = c;
    return KILN_OK;
}

KILN_API void kiln_builder_config_destroy(kiln_builder_config *cfg) {
    if (!cfg)
        return;
    for (int p = 0; p < cfg->n_profiles; p++) {
        for (int i = 0; i < cfg->profiles[p].n; i++) {
            kn_free(cfg->profiles[p].shapes[i].name);
            for (int w = 0; w < 3; w++)
                kn_aligned_free(cfg->profiles[p].shapes[i].values[w]);
        }
        kn_free(cfg->profiles[p].shapes);
    }
    kn_free(cfg->profiles);
    kcal_cfg_free(cfg->calib);
    for (int i = 0; i < cfg->n_lprec; i++)
        kn_free(cfg->lprec_names[i]);
    kn_free(cfg->lprec_names);
    kn_free(cfg->lprec_types);
    kn_free(cfg->io);
    kn_free(cfg->timing_cache);
    kn_free(cfg);
}

KILN_API kiln_status kiln_builder_config_set_timing_cache(kiln_builder_config *cfg,
                                                         const char *path) {
    if (!cfg)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "builder config is NULL");
    char *p = NULL;
    if (path && *path && !(p = kn_strdup(path)))
        return KILN_ERR_OUT_OF_MEMORY;
    kn_free(cfg->timing_cache);
    cfg->timing_cache = p;
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_set_layer_precision(kiln_builder_config *cfg,
                                                             const char *layer_name,
                                                             kiln_dtype dtype) {
    if (!cfg || !layer_name)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "set_layer_precision: NULL argument");
    if (dtype != KILN_DTYPE_UNDEFINED && dtype != KILN_DTYPE_FLOAT &&
        dtype != KILN_DTYPE_FLOAT16 && dtype != KILN_DTYPE_BFLOAT16)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "layer '%s': precision %s is not one of float, float16, bfloat16",
                        layer_name, kiln_dtype_name(dtype));
    for (int i = 0; i < cfg->n_lprec; i++)
        if (strcmp(cfg->lprec_names[i], layer_name) == 0) {
            cfg->lprec_types[i] = dtype;
            return KILN_OK;
        }
    int cap = cfg->cap_lprec;
    KN_TRY(kn_grow((void **)&cfg->lprec_names, &cap, cfg->n_lprec + 1, sizeof(char *)));
    cap = cfg->cap_lprec;
    KN_TRY(kn_grow((void **)&cfg->lprec_types, &cap, cfg->n_lprec + 1, sizeof(kiln_dtype)));
    cfg->cap_lprec = cap;
    if (!(cfg->lprec_names[cfg->n_lprec] = kn_strdup(layer_name)))
        return KILN_ERR_OUT_OF_MEMORY;
    cfg->lprec_types[cfg->n_lprec++] = dtype;
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_set_io_type(kiln_builder_config *cfg, int is_output,
                                                    int index, kiln_dtype dtype) {
    if (!cfg)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "builder config is NULL");
    if (index < -1)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s type: index %d is not a position (or -1)",
                        is_output ? "output" : "input", index);
    if (dtype <= KILN_DTYPE_UNDEFINED || !kiln_dtype_name(dtype) || kiln_dtype_size(dtype) == 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s type: %d is not a tensor type",
                        is_output ? "output" : "input", (int)dtype);
    bool out = is_output != 0;
    if (index == -1) /* every one: earlier entries for this side are replaced */
        for (int i = 0; i < cfg->n_io; i++)
            if (cfg->io[i].output == out)
                cfg->io[i--] = cfg->io[--cfg->n_io];
    for (int i = 0; i < cfg->n_io; i++)
        if (cfg->io[i].output == out && cfg->io[i].index == index) {
            cfg->io[i].dtype = dtype;
            return KILN_OK;
        }
    KN_TRY(kn_grow((void **)&cfg->io, &cfg->cap_io, cfg->n_io + 1, sizeof *cfg->io));
    cfg->io[cfg->n_io++] = (kbld_io_type){.output = out, .index = index, .dtype = dtype};
    return KILN_OK;
}

const kbld_io_type *kbld_io_types(const kiln_builder_config *cfg, int *count) {
    *count = cfg ? cfg->n_io : 0;
    return cfg ? cfg->io : NULL;
}

kiln_dtype kbld_layer_precision(const kiln_builder_config *cfg, const char *name) {
    for (int i = 0; cfg && i < cfg->n_lprec; i++)
        if (strcmp(cfg->lprec_names[i], name) == 0)
            return cfg->lprec_types[i];
    return KILN_DTYPE_UNDEFINED;
}

int kbld_layer_precision_count(const kiln_builder_config *cfg) { return cfg ? cfg->n_lprec : 0; }

const char *kbld_layer_precision_name(const kiln_builder_config *cfg, int i) {
    return cfg && i >= 0 && i < cfg->n_lprec ? cfg->lprec_names[i] : NULL;
}

KILN_API void kiln_builder_config_set_flags(kiln_builder_config *cfg, uint32_t flags) {
    if (cfg)
        cfg->flags = flags;
}

KILN_API void kiln_builder_config_set_workspace_limit(kiln_builder_config *cfg, uint64_t bytes) {
    if (cfg)
        cfg->workspace_limit = bytes;
}

KILN_API void kiln_builder_config_set_threads(kiln_builder_config *cfg, int threads) {
    if (cfg)
        cfg->threads = threads < 0 ? 0 : threads;
}

KILN_API kiln_status kiln_builder_config_set_backend(kiln_builder_config *cfg, const char *backend) {
    if (!cfg || !backend)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "builder config or backend name is NULL");
    if (strcmp(backend, "cpu") != 0 && strcmp(backend, "cuda") != 0 &&
        !(kb_test_backend && strcmp(backend, kb_test_backend->name) == 0))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "unknown backend '%s' (expected cpu or cuda)",
                        backend);
    snprintf(cfg->backend, sizeof cfg->backend, "%s", backend);
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_add_profile(kiln_builder_config *cfg, int *index) {
    if (!cfg)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "builder config is NULL");
    KN_TRY(kn_grow((void **)&cfg->profiles, &cfg->cap_profiles, cfg->n_profiles + 1,
                   sizeof *cfg->profiles));
    memset(&cfg->profiles[cfg->n_profiles], 0, sizeof *cfg->profiles);
    if (index)
        *index = cfg->n_profiles;
    cfg->n_profiles++;
    return KILN_OK;
}

/* The entry of `input` in profile `profile`, added when absent. */
static kiln_status cfg_entry(kiln_builder_config *cfg, int profile, const char *input,
                             cfg_shape **out) {
    cfg_profile *p = &cfg->profiles[profile];
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->shapes[i].name, input) == 0) {
            *out = &p->shapes[i];
            return KILN_OK;
        }
    KN_TRY(kn_grow((void **)&p->shapes, &p->cap, p->n + 1, sizeof *p->shapes));
    cfg_shape *s = &p->shapes[p->n];
    memset(s, 0, sizeof *s);
    s->rank = -1;
    if (!(s->name = kn_strdup(input)))
        return KILN_ERR_OUT_OF_MEMORY;
    p->n++;
    *out = s;
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_set_input_values(kiln_builder_config *cfg, int profile,
                                                          const char *input, kiln_dtype dtype,
                                                          size_t count, const void *min,
                                                          const void *opt, const void *max) {
    if (!cfg || !input || (count && (!min || !opt || !max)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "set_input_values: NULL argument");
    if (profile < 0 || profile >= cfg->n_profiles)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "profile %d does not exist (%d added)", profile,
                        cfg->n_profiles);
    size_t es = kiln_dtype_size(dtype), bytes;
    if (es == 0 || kn_mul_overflow(es, count, &bytes))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': bad value type or count", input);
    void *v[3] = {0};
    const void *src[3] = {min, opt, max};
    for (int w = 0; w < 3; w++) {
        if (!(v[w] = kn_aligned_alloc(bytes ? bytes : 1))) {
            for (int k = 0; k < w; k++)
                kn_aligned_free(v[k]);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        if (bytes)
            memcpy(v[w], src[w], bytes);
    }
    cfg_shape *s;
    kiln_status st = cfg_entry(cfg, profile, input, &s);
    if (st != KILN_OK) {
        for (int w = 0; w < 3; w++)
            kn_aligned_free(v[w]);
        return st;
    }
    for (int w = 0; w < 3; w++) {
        kn_aligned_free(s->values[w]);
        s->values[w] = v[w];
    }
    s->vtype = dtype;
    s->vcount = count;
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_set_shape(kiln_builder_config *cfg, int profile,
                                                   const char *input, int rank,
                                                   const int64_t *min, const int64_t *opt,
                                                   const int64_t *max) {
    if (!cfg || !input || !min || !opt || !max)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "set_shape: NULL argument");
    if (profile < 0 || profile >= cfg->n_profiles)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "profile %d does not exist (%d added)", profile,
                        cfg->n_profiles);
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': rank %d is outside 0..%d", input,
                        rank, KILN_MAX_DIMS);
    for (int i = 0; i < rank; i++)
        if (min[i] < 0 || min[i] > opt[i] || opt[i] > max[i])
            return kn_error(KILN_ERR_SHAPE,
                            "input '%s', dimension %d: need 0 <= min <= opt <= max, got %lld, "
                            "%lld, %lld",
                            input, i, (long long)min[i], (long long)opt[i], (long long)max[i]);
    cfg_shape *s;
    KN_TRY(cfg_entry(cfg, profile, input, &s));
    s->rank = rank;
    memcpy(s->min, min, (size_t)rank * sizeof(int64_t));
    memcpy(s->opt, opt, (size_t)rank * sizeof(int64_t));
    memcpy(s->max, max, (size_t)rank * sizeof(int64_t));
    return KILN_OK;
}

/* ---------------- profiles -> plan metadata ---------------- */

static void shape_text(int rank, const int64_t *d, char *buf, size_t cap) {
    kn_shape_str(rank, d, buf, cap);
}

static kiln_status make_profiles(const kn_net *net, const kiln_builder_config *cfg, kp_meta *meta) {
    int np = cfg->n_profiles > 0 ? cfg->n_profiles : 1;
    KN_TRY(kp_meta_alloc_profiles(meta, np, net->n_inputs));
    /* every name in the config must be a graph input */
    for (int p = 0; p < cfg->n_profiles; p++)
        for (int i = 0; i < cfg->profiles[p].n; i++) {
            int t = kn_net_find(net, cfg->profiles[p].shapes[i].name);
            if (t < 0 || !(net->tensors[t].flags & KN_T_INPUT))
                return kn_error(KILN_ERR_NOT_FOUND,
                                "profile %d gives a shape for '%s', which is not an input of the "
                                "network",
                                p, cfg->profiles[p].shapes[i].name);
        }
    for (int p = 0; p < np; p++) {
        kp_profile *pr = &meta->profiles[p];
        for (int k = 0; k < net->n_inputs; k++) {
            const kn_tensor *t = &net->tensors[net->inputs[k]];
            const cfg_shape *s = NULL;
            if (p < cfg->n_profiles)
                for (int i = 0; i < cfg->profiles[p].n; i++)
                    if (strcmp(cfg->profiles[p].shapes[i].name, t->name) == 0 &&
                        cfg->profiles[p].shapes[i].rank >= 0)
                        s = &cfg->profiles[p].shapes[i];
            pr->rank[k] = t->rank;
            if (s) {
                if (s->rank != t->rank)
                    return kn_error(KILN_ERR_SHAPE,
                                    "profile %d: input '%s' has rank %d but the shape given has "
                                    "rank %d",
                                    p, t->name, t->rank, s->rank);
                for (int d = 0; d < t->rank; d++) {
                    if (t->dims[d] >= 0 && (s->min[d] != t->dims[d] || s->max[d] != t->dims[d]))
                        return kn_error(KILN_ERR_SHAPE,
                                        "profile %d: input '%s' dimension %d is %lld in the "
                                        "network; the profile gives %lld..%lld",
                                        p, t->name, d, (long long)t->dims[d], (long long)s->min[d],
                                        (long long)s->max[d]);
                    pr->min[k][d] = s->min[d];
                    pr->opt[k][d] = s->opt[d];
                    pr->max[k][d] = s->max[d];
                }
                continue;
            }
            bool dynamic = false;
            for (int d = 0; d < t->rank; d++) {
                int64_t v = t->dims[d] >= 0 ? t->dims[d] : 1;
                dynamic |= t->dims[d] < 0;
                pr->min[k][d] = pr->opt[k][d] = pr->max[k][d] = v;
            }
            if (dynamic && cfg->n_profiles > 0)
                return kn_error(KILN_ERR_SHAPE,
                                "input '%s' has dynamic dimensions but profile %d gives no shape "
                                "for it",
                                t->name, p);
            if (dynamic) {
                char buf[128];
                shape_text(t->rank, pr->opt[k], buf, sizeof buf);
                kn_log(KILN_LOG_WARNING,
                       "input '%s' has dynamic dimensions and no profile was given: using %s",
                       t->name, buf);
            }
        }
    }
    return KILN_OK;
}

/* ---------------- shape inference at profile points ---------------- */

static const int64_t (*profile_dims(const kp_profile *pr, kbld_which w))[KILN_MAX_DIMS] {
    return w == KBLD_MIN ? (const int64_t (*)[KILN_MAX_DIMS])pr->min
           : w == KBLD_OPT ? (const int64_t (*)[KILN_MAX_DIMS])pr->opt
                           : (const int64_t (*)[KILN_MAX_DIMS])pr->max;
}

/* Value inputs whose values ops read but whose outputs' shapes do not
 * follow from: op, input index. */
static bool data_only_value(const kn_node *n, int j) {
    static const struct {
        const char *op;
        int in;
    } k[] = {{"CumSum", 1},        {"CumProd", 1},           {"Trilu", 1},
             {"NonMaxSuppression", 3}, {"NonMaxSuppression", 4}, {"Dropout", 1},
             {"Dropout", 2},       {"Resize", 1}};
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return false;
    for (size_t i = 0; i < KN_ARRAY_LEN(k); i++)
        if (k[i].in == j && strcmp(n->op_type, k[i].op) == 0)
            return true;
    return false;
}

bool kbld_decides_shape(const kn_net *net, int t) {
    if (t < 0 || t >= net->n_tensors)
        return false;
    bool *reached = kn_calloc((size_t)net->n_tensors + 1, sizeof(bool));
    if (!reached)
        return true; /* out of memory: the cautious answer */
    reached[t] = true;
    bool decides = false, changed = true;
    while (changed && !decides) {
        changed = false;
        for (int i = 0; i < net->n_nodes && !decides; i++) {
            const kn_node *n = &net->nodes[i];
            if (n->dead || (n->domain[0] == 0 && (strcmp(n->op_type, "Shape") == 0 ||
                                                  strcmp(n->op_type, "Size") == 0)))
                continue; /* they read only the shape */
            const kn_op_schema *sch = kn_op_find(n->domain, n->op_type);
            bool any = false;
            for (int j = 0; j < n->n_in; j++) {
                if (n->in[j] < 0 || !reached[n->in[j]])
                    continue;
                any = true;
                if (sch && j < 32 && (sch->value_inputs >> j & 1u) && !data_only_value(n, j))
                    decides = true;
            }
            for (int j = 0; any && j < n->n_out; j++)
                if (n->out[j] >= 0 && !reached[n->out[j]]) {
                    reached[n->out[j]] = true;
                    changed = true;
                }
        }
    }
    kn_free(reached);
    return decides;
}

KILN_API int kiln_builder_input_is_shape_tensor(const kiln_network *net, const char *input) {
    if (!net || !input)
        return -1;
    for (int k = 0; k < net->n_inputs; k++)
        if (strcmp(net->tensors[net->inputs[k]].name, input) == 0)
            return kbld_decides_shape(net, net->inputs[k]) ? 1 : 0;
    return -1;
}

/* Bind the configured values of graph input k when it is a shape tensor. */
static kiln_status bind_input_values(kbld *b, int profile, kbld_which which, int k, int rank,
                                     const int64_t *dims, kx_ctx *ctx) {
    const kn_tensor *t = &b->net->tensors[b->net->inputs[k]];
    if (!(t->flags & KN_T_HOST))
        return KILN_OK;
    const cfg_shape *s = NULL;
    if (b->cfg && profile < b->cfg->n_profiles)
        for (int i = 0; i < b->cfg->profiles[profile].n; i++)
            if (strcmp(b->cfg->profiles[profile].shapes[i].name, t->name) == 0 &&
                b->cfg->profiles[profile].shapes[i].vtype != KILN_DTYPE_UNDEFINED)
                s = &b->cfg->profiles[profile].shapes[i];
    if (!s && !kbld_decides_shape(b->net, b->net->inputs[k])) {
        /* read on the host but deciding no shape (a threshold, an axis): any
         * values infer the same shapes */
        int64_t cnt = kn_numel(rank, dims);
        size_t bytes = cnt > 0 ? (size_t)cnt * kiln_dtype_size(t->dtype) : 0;
        if (bytes + 64 > b->zeros_size) {
            kn_aligned_free(b->zeros);
            b->zeros_size = 0;
            if (!(b->zeros = kn_aligned_alloc(bytes + 64)))
                return KILN_ERR_OUT_OF_MEMORY;
            b->zeros_size = bytes + 64;
        }
        memset(b->zeros, 0, b->zeros_size);
        kx_ctx_bind(ctx, b->net->inputs[k], b->zeros);
        return KILN_OK;
    }
    if (!s)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "input '%s' is a shape tensor (its values decide other shapes): give its "
                        "values for profile %d with kiln_builder_config_set_input_values "
                        "(kiln exec: --shapes=%s:V1xV2..., or --minShapes/--optShapes/--maxShapes, "
                        "or --loadInputs)",
                        t->name, profile, t->name);
    int64_t n = kn_numel(rank, dims);
    if (s->vtype != t->dtype || n < 0 || (size_t)n != s->vcount)
        return kn_error(KILN_ERR_SHAPE,
                        "input '%s': %zu values of type %s were given for profile %d; the input "
                        "holds %lld values of type %s",
                        t->name, s->vcount, kiln_dtype_name(s->vtype), profile, (long long)n,
                        kiln_dtype_name(t->dtype));
    kx_ctx_bind(ctx, b->net->inputs[k], s->values[which]);
    return KILN_OK;
}

/* Run shape inference; on success the context holds shapes (caller finis). */
static kiln_status infer_ctx_on(kbld *b, int profile, kbld_which which, const kb_backend *be,
                                kx_program *prog, kx_ctx *ctx) {
    KN_TRY(kx_program_init_on(prog, b->net, 1, be ? be : &kb_cpu_backend));
    kiln_status st = kx_ctx_init(ctx, prog);
    if (st != KILN_OK) {
        kx_program_fini(prog);
        return st;
    }
    const kp_profile *pr = &b->meta->profiles[profile];
    const int64_t (*dims)[KILN_MAX_DIMS] = profile_dims(pr, which);
    for (int k = 0; k < b->net->n_inputs && st == KILN_OK; k++)
        st = kx_ctx_set_input_shape(ctx, k, pr->rank[k], dims[k]);
    for (int k = 0; k < b->net->n_inputs && st == KILN_OK; k++)
        st = bind_input_values(b, profile, which, k, pr->rank[k], dims[k], ctx);
    if (st == KILN_OK)
        st = kx_ctx_infer(ctx);
    if (st != KILN_OK) {
        kx_ctx_fini(ctx);
        kx_program_fini(prog);
    }
    return st;
}

static kiln_status infer_ctx(kbld *b, int profile, kbld_which which, kx_program *prog,
                             kx_ctx *ctx) {
    return infer_ctx_on(b, profile, which, NULL, prog, ctx);
}

kiln_status kbld_infer(kbld *b, int profile, kbld_which which, kn_tinfo **ti) {
    kx_program prog;
    kx_ctx ctx;
    KN_TRY(infer_ctx(b, profile, which, &prog, &ctx));
    kn_tinfo *out = kn_calloc((size_t)b->net->n_tensors + 1, sizeof *out);
    if (out) {
        memcpy(out, ctx.ti, (size_t)b->net->n_tensors * sizeof *out);
        for (int i = 0; i < b->net->n_tensors; i++)
            out[i].value = NULL;
    }
    kx_ctx_fini(&ctx);
    kx_program_fini(&prog);
    if (!out)
        return KILN_ERR_OUT_OF_MEMORY;
    *ti = out;
    return KILN_OK;
}

kiln_status kbld_static_shapes(kbld *b, bool **is_static, kn_tinfo **ti) {
    int nt = b->net->n_tensors;
    bool *st = kn_calloc((size_t)nt + 1, sizeof *st);
    kn_tinfo *base = NULL;
    if (!st)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status s = kbld_infer(b, 0, KBLD_OPT, &base);
    if (s != KILN_OK) {
        kn_free(st);
        return s;
    }
    for (int i = 0; i < nt; i++)
        st[i] = true;
    for (int p = 0; p < b->meta->n_profiles && s == KILN_OK; p++)
        for (int w = KBLD_MIN; w <= KBLD_MAX && s == KILN_OK; w++) {
            kn_tinfo *o = NULL;
            s = kbld_infer(b, p, (kbld_which)w, &o);
            for (int i = 0; s == KILN_OK && i < nt; i++)
                if (o[i].rank != base[i].rank || o[i].data_dependent || base[i].data_dependent ||
                    (base[i].rank > 0 &&
                     memcmp(o[i].dims, base[i].dims, (size_t)base[i].rank * sizeof(int64_t)) != 0))
                    st[i] = false;
            kn_free(o);
        }
    if (s != KILN_OK) {
        kn_free(st);
        kn_free(base);
        return s;
    }
    *is_static = st;
    *ti = base;
    return KILN_OK;
}

/* ---------------- running one node on constants ---------------- */

typedef struct node_io {
    kn_tinfo in[64], out[16];
    kb_tensor kin[64], kout[16];
    void *tmp[64];   /* aligned copies of unaligned constants */
} node_io;

static void node_io_free(node_io *io, int n_in, int n_out, bool free_out) {
    for (int j = 0; j < n_in; j++)
        kn_aligned_free(io->tmp[j]);
    if (free_out)
        for (int j = 0; j < n_out; j++)
            kn_aligned_free(io->kout[j].data);
}

kiln_status kbld_fold_node(kbld *b, int node) {
    kn_net *net = b->net;
    kn_node *n = &net->nodes[node];
    if (n->n_in > 64 || n->n_out > 16)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs to fold");
    const kn_op_schema *sch = kn_op_find(n->domain, n->op_type);
    const kb_kernel *k = kb_cpu_kernel_find(n->domain, n->op_type, "ref");
    if (!sch || !k)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "cannot fold: no reference kernel");
    node_io *io = kn_calloc(1, sizeof *io);
    if (!io)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    for (int j = 0; j < n->n_in && st == KILN_OK; j++) {
        if (n->in[j] < 0)
            continue;
        const kn_tensor *t = &net->tensors[n->in[j]];
        if (!(t->flags & KN_T_CONST)) {
            st = kn_node_error(n, KILN_ERR_INTERNAL, "cannot fold: input '%s' is not constant",
                               t->name);
            break;
        }
        const void *p = kn_tdata_aligned(&t->value, &io->tmp[j]);
        if (!p && t->value.nbytes) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        io->in[j].dtype = t->value.dtype;
        io->in[j].rank = t->value.rank;
        memcpy(io->in[j].dims, t->value.dims, sizeof io->in[j].dims);
        io->in[j].value = p;
        io->kin[j].data = (void *)p;
        io->kin[j].dtype = t->value.dtype;
        io->kin[j].rank = t->value.rank;
        memcpy(io->kin[j].dims, t->value.dims, sizeof io->kin[j].dims);
    }
    if (st == KILN_OK) {
        for (int j = 0; j < n->n_out; j++)
            io->out[j].rank = -1;
        kn_infer ic = {n, n->n_in, io->in, n->n_out, io->out};
        st = sch->infer(&ic);
    }
    for (int j = 0; j < n->n_out && st == KILN_OK; j++) {
        if (n->out[j] < 0)
            continue;
        size_t bytes;
        st = kn_check_size(n, "folded output", io->out[j].dtype, io->out[j].rank,
                           io->out[j].dims, &bytes);
        if (st != KILN_OK)
            break;
        io->kout[j].data = kn_aligned_alloc(bytes ? bytes : 1);
        if (!io->kout[j].data) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        memset(io->kout[j].data, 0, bytes ? bytes : 1);
        io->kout[j].dtype = io->out[j].dtype;
        io->kout[j].rank = io->out[j].rank;
        memcpy(io->kout[j].dims, io->out[j].dims, sizeof io->kout[j].dims);
    }
    void *state = NULL, *inst = NULL, *ws = NULL;
    size_t wsz = 0;
    if (st == KILN_OK && k->init)
        st = k->init(n, &state);
    if (st == KILN_OK && k->prepare)
        st = k->prepare(state, n, io->kin, n->n_in, io->kout, n->n_out, &inst, &wsz);
    if (st == KILN_OK && wsz && !(ws = kn_aligned_alloc(wsz)))
        st = KILN_ERR_OUT_OF_MEMORY;
    if (st == KILN_OK) {
        kb_run r = {n, state, inst, n->n_in, io->kin, n->n_out, io->kout, ws, wsz, b->threads, NULL};
        st = k->run(&r);
    }
    kn_aligned_free(ws);
    if (inst && k->release)
        k->release(inst);
    if (state && k->fini)
        k->fini(state);
    if (st != KILN_OK) {
        node_io_free(io, n->n_in, n->n_out, true);
        kn_free(io);
        return st;
    }
    for (int j = 0; j < n->n_out; j++) {
        if (n->out[j] < 0)
            continue;
        kn_tdata v = {0};
        v.dtype = io->kout[j].dtype;
        v.rank = io->kout[j].rank;
        memcpy(v.dims, io->kout[j].dims, sizeof v.dims);
        v.data = io->kout[j].data;
        v.nbytes = (size_t)kn_numel(v.rank, v.dims) * kiln_dtype_size(v.dtype);
        io->kout[j].data = NULL;
        kn_tensor *t = &net->tensors[n->out[j]];
        kn_tensor_set_value(t, &v);
        t->producer = -1;
    }
    n->dead = 1;
    node_io_free(io, n->n_in, n->n_out, true);
    kn_free(io);
    return KILN_OK;
}

/* ---------------- tactic selection ---------------- */

/* A signature of a node's op, attributes and input shapes, so identical
 * layers are timed once per build. */
static uint64_t node_signature(const kn_net *net, const kn_node *n, const kn_tinfo *ti) {
    uint64_t h = kn_hash64(n->op_type, strlen(n->op_type), 1);
    h = kn_hash64(n->domain, strlen(n->domain), h);
    for (int j = 0; j < n->n_in; j++) {
        if (n->in[j] < 0) {
            h = kn_hash64("-", 1, h);
            continue;
        }
        const kn_tinfo *t = &ti[n->in[j]];
        h = kn_hash64(&t->dtype, sizeof t->dtype, h);
        h = kn_hash64(&t->rank, sizeof t->rank, h);
        h = kn_hash64(t->dims, sizeof(int64_t) * (size_t)(t->rank > 0 ? t->rank : 0), h);
        uint32_t c = net->tensors[n->in[j]].flags & KN_T_CONST;
        h = kn_hash64(&c, sizeof c, h);
    }
    for (int a = 0; a < n->n_attr; a++) {
        const kn_attr *at = &n->attrs[a];
        if (strncmp(at->name, "kiln_precision", 14) == 0)
            continue; /* the precision pass's record (times) */
        h = kn_hash64(at->name, strlen(at->name), h);
        h = kn_hash64(&at->i, sizeof at->i, h);
        h = kn_hash64(&at->f, sizeof at->f, h);
        if (at->s)
            h = kn_hash64(at->s, at->s_len, h);
        if (at->ints)
            h = kn_hash64(at->ints, at->n * sizeof(int64_t), h);
        if (at->floats)
            h = kn_hash64(at->floats, at->n * sizeof(float), h);
    }
    return h;
}

/* Inputs for timing a tactic: floats uniform in [-1, 1) in every float
 * type (matrix units run faster on zeros, and not by the same amount for
 * every kernel: timing on zeros picks the wrong GEMM); other types zeros,
 * which is a valid index, count or flag everywhere. The random values are
 * made once a build per type, as large as the largest input, and every
 * timed tactic copies from them (a ResNet-50 layer at batch 64 reads
 * 100 MB, and each of its tactics is timed on fresh buffers). */
typedef struct rand_pool {
    void *buf[4]; /* float, float16, bfloat16, double */
    size_t bytes[4];
} rand_pool;

enum { POOL_SKEW = 4096 }; /* elements: input j starts at its own offset below this */

static int pool_slot(kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: return 0;
    case KILN_DTYPE_FLOAT16: return 1;
    case KILN_DTYPE_BFLOAT16: return 2;
    case KILN_DTYPE_DOUBLE: return 3;
    default: return -1;
    }
}

static void pool_free(rand_pool *rp) {
    for (int i = 0; i < 4; i++)
        kn_aligned_free(rp->buf[i]);
    memset(rp, 0, sizeof *rp);
}

/* `bytes` of random values of float type dt for input j (NULL when out of memory). */
static const void *pool_get(rand_pool *rp, kiln_dtype dt, size_t bytes, int j) {
    int slot = pool_slot(dt);
    size_t es = kiln_dtype_size(dt), skew = (size_t)(j * 1031 % POOL_SKEW) * es;
    size_t need = bytes + (size_t)POOL_SKEW * es;
    if (rp->bytes[slot] < need) {
        size_t grow = rp->bytes[slot] * 2 > need ? rp->bytes[slot] * 2 : need;
        kn_aligned_free(rp->buf[slot]);
        rp->bytes[slot] = 0;
        if (!(rp->buf[slot] = kn_aligned_alloc(grow)))
            return NULL;
        rp->bytes[slot] = grow;
        uint64_t seed = 42;
        size_t n = grow / es;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            float v = (float)((double)(seed >> 40) / (double)(1ull << 24)) * 2.f - 1.f;
            if (slot == 0)
                ((float *)rp->buf[slot])[i] = v;
            else if (slot == 3)
                ((double *)rp->buf[slot])[i] = v;
            else if (slot == 1)
                ((uint16_t *)rp->buf[slot])[i] = kn_float_to_half(v);
            else
                ((uint16_t *)rp->buf[slot])[i] = kn_float_to_bf16(v);
        }
    }
    return (const unsigned char *)rp->buf[slot] + skew;
}

/* Time kernel k on node n with random inputs at the per-slot types and
 * shapes in[] / out[], on the build's backend; returns the median time in
 * *ms, or fails when the kernel cannot prepare or exceeds the workspace
 * limit. A constant input keeps its value when its type is unchanged. */
static kiln_status time_kernel_slots(kbld *b, const kb_kernel *k, const kn_node *n,
                                     const kn_tinfo *in, const kn_tinfo *out, uint64_t ws_limit,
                                     rand_pool *rp, double *ms) {
    const kn_net *net = b->net;
    const kb_backend *be = b->be ? b->be : &kb_cpu_backend;
    kb_tensor kin[64], kout[16];
    void *bufs[80] = {0};
    int nb = 0;
    kiln_status st = KILN_OK;
    memset(kin, 0, sizeof kin);
    memset(kout, 0, sizeof kout);
    for (int j = 0; j < n->n_in + n->n_out && st == KILN_OK; j++) {
        int t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
        kb_tensor *v = j < n->n_in ? &kin[j] : &kout[j - n->n_in];
        const kn_tinfo *ti = j < n->n_in ? &in[j] : &out[j - n->n_in];
        if (t < 0)
            continue;
        const kn_tensor *tt = t < net->n_tensors ? &net->tensors[t] : NULL;
        size_t bytes = (size_t)kn_numel(ti->rank, ti->dims) * kiln_dtype_size(ti->dtype);
        v->dtype = ti->dtype;
        v->rank = ti->rank;
        memcpy(v->dims, ti->dims, sizeof v->dims);
        void *p = NULL;
        if ((st = be->alloc(bytes ? bytes : 1, &p)) != KILN_OK)
            break;
        bufs[nb++] = p;
        v->data = p;
        if (j >= n->n_in || !bytes)
            continue;
        if (tt && (tt->flags & KN_T_CONST) && tt->value.dtype == ti->dtype) {
            v->host = tt->value.data;
            st = be->copy(p, tt->value.data, bytes < tt->value.nbytes ? bytes : tt->value.nbytes,
                          KB_COPY_H2D, NULL);
            continue;
        }
        if (pool_slot(ti->dtype) < 0) {
            st = be->memset_zero(p, bytes, NULL);
        } else {
            const void *src = pool_get(rp, ti->dtype, bytes, j);
            st = src ? be->copy(p, src, bytes, KB_COPY_H2D, NULL) : KILN_ERR_OUT_OF_MEMORY;
        }
        if (st == KILN_OK)
            st = be->sync(NULL);
    }
    void *state = NULL, *inst = NULL, *ws = NULL;
    size_t wsz = 0;
    if (st == KILN_OK && k->init)
        st = k->init(n, &state);
    if (st == KILN_OK && k->prepare) { /* with the build's thread count, as the runtime does */
        int omp_before = omp_get_max_threads();
        omp_set_num_threads(b->threads);
        st = k->prepare(state, n, kin, n->n_in, kout, n->n_out, &inst, &wsz);
        omp_set_num_threads(omp_before);
    }
    if (st == KILN_OK && ws_limit && wsz > ws_limit)
        st = kn_node_error(n, KILN_ERR_OUT_OF_MEMORY,
                           "tactic '%s' needs %zu bytes of workspace, over the limit of %llu",
                           k->tactic, wsz, (unsigned long long)ws_limit);
    if (st == KILN_OK && wsz)
        st = be->alloc(wsz, &ws);
    if (st == KILN_OK) {
        kb_run r = {n, state, inst, n->n_in, kin, n->n_out, kout, ws, wsz, b->threads, NULL};
        /* a few runs first; more only when they are quick (how many more:
         * the optimization level) */
        int level = b->cfg ? b->cfg->opt_level : 3;
        st = be->time_kernel(k, &r, 3, ms);
        if (st == KILN_OK && *ms < 10.0 && level >= 3)
            st = be->time_kernel(k, &r, level >= 4 ? 25 : 9, ms);
    }
    if (ws)
        be->free(ws);
    if (inst && k->release)
        k->release(inst);
    if (state && k->fini)
        k->fini(state);
    for (int i = 0; i < nb; i++)
        be->free(bufs[i]);
    return st;
}

/* time_kernel_slots with the per-tensor infos ti (indexed by tensor). */
static kiln_status time_kernel(kbld *b, const kb_kernel *k, const kn_node *n, const kn_tinfo *ti,
                               uint64_t ws_limit, rand_pool *rp, double *ms) {
    kn_tinfo in[64], out[16];
    if (n->n_in > 64 || n->n_out > 16)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs to time");
    for (int j = 0; j < n->n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        if (n->in[j] >= 0)
            in[j] = ti[n->in[j]];
    }
    for (int j = 0; j < n->n_out; j++) {
        memset(&out[j], 0, sizeof out[j]);
        if (n->out[j] >= 0)
            out[j] = ti[n->out[j]];
    }
    return time_kernel_slots(b, k, n, in, out, ws_limit, rp, ms);
}

kbld_time_fn kbld_time_hook = NULL;

bool kbld_no_timing(const kbld *b) {
    return (b->flags & (KILN_BUILDER_FLAG_NO_TIMING | KILN_BUILDER_FLAG_REF_TACTICS)) ||
           (b->cfg && b->cfg->opt_level == 0);
}

kiln_status kbld_time_layer(kbld *b, const kn_node *n, const kn_tinfo *in, const kn_tinfo *out,
                            double *ms) {
    if (kbld_time_hook)
        return kbld_time_hook(n, in, out, ms);
    if (n->n_in > 64 || n->n_out > 16)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs to time");
    const kb_backend *be = b->be ? b->be : &kb_cpu_backend;
    const kb_kernel *cand[KB_MAX_CANDIDATES];
    int nc = be->kernels_for(n->domain, n->op_type, cand, KB_MAX_CANDIDATES);
    if (kpl_is_node(n)) {
        cand[0] = &kpl_kernel;
        nc = 1;
    }
    if (nc > KB_MAX_CANDIDATES)
        nc = KB_MAX_CANDIDATES;
    if (!b->time_pool && !(b->time_pool = kn_calloc(1, sizeof(rand_pool))))
        return KILN_ERR_OUT_OF_MEMORY;
    /* supports() sees the values of constant inputs whose type is unchanged */
    kn_tinfo vin[64];
    void *tmp[64] = {0};
    for (int j = 0; j < n->n_in; j++) {
        vin[j] = in[j];
        vin[j].value = NULL;
        int t = n->in[j];
        if (t >= 0 && t < b->net->n_tensors && (b->net->tensors[t].flags & KN_T_CONST) &&
            b->net->tensors[t].value.dtype == in[j].dtype)
            vin[j].value = kn_tdata_aligned(&b->net->tensors[t].value, &tmp[j]);
    }
    uint64_t ws_limit = b->cfg ? b->cfg->workspace_limit : 0;
    double best = -1;
    kiln_status st = KILN_OK;
    for (int c = 0; c < nc; c++) {
        if (kpl_is_node(n) ? false
                           : cand[c]->supports && !cand[c]->supports(n, vin, n->n_in,
                                                                     (kn_tinfo *)out, n->n_out))
            continue;
        double t = 0;
        st = time_kernel_slots(b, cand[c], n, in, out, ws_limit, (rand_pool *)b->time_pool, &t);
        if (st != KILN_OK) {
            kn_error_clear();
            continue;
        }
        if (best < 0 || t < best)
            best = t;
        if (b->flags & KILN_BUILDER_FLAG_REF_TACTICS)
            break;
    }
    for (int j = 0; j < n->n_in; j++)
        kn_aligned_free(tmp[j]);
    if (best < 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "no tactic runs this layer in %s",
                             n->n_in > 0 ? kiln_dtype_name(in[0].dtype) : "these types");
    *ms = best;
    return KILN_OK;
}

kiln_status kbld_time_cast(kbld *b, const kn_tinfo *from, kiln_dtype to, double *ms) {
    /* a node of its own over a tensor that needs none: slot -> tensor 0 is
     * never read as a constant because its type is the slot's only when
     * from->dtype matches; give it an index past the tensors instead */
    int io[2] = {b->net->n_tensors, b->net->n_tensors};
    kn_attr a;
    memset(&a, 0, sizeof a);
    a.name = (char *)"to";
    a.type = KN_ATTR_INT;
    a.i = (int64_t)to;
    kn_node c;
    memset(&c, 0, sizeof c);
    c.name = (char *)"(precision cast)";
    c.op_type = (char *)"Cast";
    c.domain = (char *)"";
    c.opset = 19;
    c.n_in = c.n_out = 1;
    c.in = &io[0];
    c.out = &io[1];
    c.n_attr = 1;
    c.attrs = &a;
    kn_tinfo out = *from;
    out.value = NULL;
    out.dtype = to;
    kn_tinfo in = *from;
    in.value = NULL;
    return kbld_time_layer(b, &c, &in, &out, ms);
}

kbld_tactic_time_fn kbld_tactic_time_hook = NULL;

int kbld_tactic_pick(int n, int rounds, const double *ms, int dflt, double margin) {
    bool dflt_ran = dflt >= 0 && dflt < n;
    for (int r = 0; dflt_ran && r < rounds; r++)
        if (ms[r * n + dflt] < 0)
            dflt_ran = false;
    int best = dflt_ran ? dflt : -1;
    double best_worst = 0;
    if (dflt_ran)
        for (int r = 0; r < rounds; r++)
            if (ms[r * n + dflt] > best_worst)
                best_worst = ms[r * n + dflt];
    for (int c = 0; c < n; c++) {
        if (c == dflt)
            continue;
        bool ran = true, wins = true;
        double worst = 0;
        for (int r = 0; r < rounds; r++) {
            double t = ms[r * n + c];
            if (t < 0) {
                ran = false;
                break;
            }
            if (t > worst)
                worst = t;
            if (dflt_ran && !(t * (1.0 + margin) < ms[r * n + dflt]))
                wins = false;
        }
        if (!ran || !wins)
            continue;
        if (best < 0 || (best == dflt ? true : worst < best_worst)) {
            best = c;
            best_worst = worst;
        }
    }
    return best;
}

/* The CPU kernel that a layer placed on the host runs: by the CPU's rule
 * (the library tactic registered last; the reference with
 * KILN_BUILDER_FLAG_REF_TACTICS), among those that take it. NULL: none. */
static const kb_kernel *host_kernel(const kbld *b, const kn_node *n, const kn_tinfo *in,
                                    const kn_tinfo *out) {
    const kb_kernel *cand[KB_MAX_CANDIDATES];
    int nc = kb_cpu_backend.kernels_for(n->domain, n->op_type, cand, KB_MAX_CANDIDATES);
    if (nc > KB_MAX_CANDIDATES)
        nc = KB_MAX_CANDIDATES;
    int ok = 0;
    for (int c = 0; c < nc; c++)
        if (!cand[c]->supports || cand[c]->supports(n, in, n->n_in, out, n->n_out))
            cand[ok++] = cand[c];
    if (ok == 0)
        return NULL;
    return (b->flags & KILN_BUILDER_FLAG_REF_TACTICS) ? cand[0] : cand[ok - 1];
}

/* Pick each layer's tactic: the only candidate, the cached winner, or the
 * fastest when timed. `cache` holds winners by layer signature (loaded from
 * the timing-cache file when there is one). */
static kiln_status choose_tactics(kbld *b, uint64_t ws_limit, kbld_tcache *cache) {
    kn_net *net = b->net;
    kn_tinfo *ti = NULL;
    KN_TRY(kbld_infer(b, 0, KBLD_OPT, &ti));
    int timed = 0, hits = 0;
    rand_pool pool;
    memset(&pool, 0, sizeof pool);
    double t_start = kn_now_ms(), last_report = t_start;
    kiln_status st = KILN_OK;
    for (int i = 0; i < net->n_nodes && st == KILN_OK; i++) {
        kn_node *n = &net->nodes[i];
        const kb_kernel *cand[KB_MAX_CANDIDATES];
        const kb_backend *be = b->be ? b->be : &kb_cpu_backend;
        int nc = be->kernels_for(n->domain, n->op_type, cand, KB_MAX_CANDIDATES);
        if (kpl_is_node(n)) { /* a plugin has one implementation: its own */
            cand[0] = &kpl_kernel;
            nc = 1;
        }
        if (nc > KB_MAX_CANDIDATES)
            nc = KB_MAX_CANDIDATES;
        kn_tinfo in[64], out[16];
        if (n->n_in > 64 || n->n_out > 16)
            continue;
        bool host = false; /* shape-time steps run on the CPU reference kernels */
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && (net->tensors[n->out[j]].flags & KN_T_HOST))
                host = true;
        if (host) {
            kn_free(n->tactic);
            if (!(n->tactic = kn_strdup("ref"))) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            continue;
        }
        /* supports() sees the values of constant inputs (Pad's pads, ...) */
        void *tmp[64] = {0};
        for (int j = 0; j < n->n_in; j++) {
            memset(&in[j], 0, sizeof in[j]);
            if (n->in[j] >= 0) {
                in[j] = ti[n->in[j]];
                if (net->tensors[n->in[j]].flags & KN_T_CONST)
                    in[j].value = kn_tdata_aligned(&net->tensors[n->in[j]].value, &tmp[j]);
            }
        }
        for (int j = 0; j < n->n_out; j++) {
            memset(&out[j], 0, sizeof out[j]);
            if (n->out[j] >= 0)
                out[j] = ti[n->out[j]];
        }
        /* a layer on a value only the host holds (strings, sequences,
         * optionals) runs there; so does one no device kernel takes */
        int host_t = be != &kb_cpu_backend ? kbld_host_only_tensor(net, n, ti) : -1;
        int ok = 0;
        for (int c = 0; c < nc && host_t < 0; c++)
            if (!cand[c]->supports || cand[c]->supports(n, in, n->n_in, out, n->n_out))
                cand[ok++] = cand[c];
        const kb_kernel *on_host = NULL;
        if (ok == 0 && be != &kb_cpu_backend && !kpl_is_node(n))
            on_host = host_kernel(b, n, in, out);
        for (int j = 0; j < n->n_in; j++) {
            kn_aligned_free(tmp[j]);
            in[j].value = NULL; /* the copies are gone; later users see no value */
        }
        if (on_host) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", KX_HOST_TACTIC, on_host->tactic);
            kn_free(n->tactic);
            if (!(n->tactic = kn_strdup(name))) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            kn_log(KILN_LOG_VERBOSE, "layer '%s' (%s): on the host (%s), %s", n->name,
                   n->op_type, name,
                   host_t >= 0 ? "it reads or makes a value only the host holds"
                               : "no device kernel takes it");
            continue;
        }
        if (ok == 0 && host_t >= 0) {
            st = kn_node_error(n, KILN_ERR_UNSUPPORTED,
                               "tensor '%s' (%s) lives on the host and no CPU kernel takes "
                               "this layer",
                               net->tensors[host_t].name, kiln_dtype_name(ti[host_t].dtype));
            break;
        }
        if (ok == 0) {
            st = kn_node_error(n, KILN_ERR_UNSUPPORTED,
                               "no %s kernel supports this node with these input types",
                               be->name);
            break;
        }
        if (b->flags & KILN_BUILDER_FLAG_REF_TACTICS)
            ok = 1; /* the reference kernel is listed first */
        const kb_kernel *best = cand[0];
        double best_ms = -1;
        bool no_timing = (b->flags & KILN_BUILDER_FLAG_NO_TIMING) || (b->cfg && b->cfg->opt_level == 0);
        if (ok > 1 && !no_timing) {
            /* the candidates are part of the key: a cache written before a
             * tactic existed (or where one declined) times the layer again */
            uint64_t sig = node_signature(net, n, ti);
            for (int c = 0; c < ok; c++)
                sig = kn_hash64(cand[c]->tactic, strlen(cand[c]->tactic) + 1, sig);
            const char *hit = kbld_tcache_get(cache, sig, &best_ms);
            const kb_kernel *hk = NULL;
            for (int c = 0; hit && c < ok; c++)
                if (strcmp(cand[c]->tactic, hit) == 0)
                    hk = cand[c];
            if (hk) {
                best = hk;
                hits++;
            } else {
                /* interleaved rounds, the order reversed every other one, so
                 * a load that comes and goes hits every candidate alike */
                double tms[KBLD_TACTIC_ROUNDS * KB_MAX_CANDIDATES];
                for (int r = 0; r < KBLD_TACTIC_ROUNDS; r++)
                    for (int q = 0; q < ok; q++) {
                        int c = r % 2 ? ok - 1 - q : q;
                        double *ms = &tms[r * ok + c];
                        if (r > 0 && tms[c] < 0) { /* failed once: out */
                            *ms = -1;
                            continue;
                        }
                        kiln_status ts = kbld_tactic_time_hook
                                             ? kbld_tactic_time_hook(n, cand[c]->tactic, r, ms)
                                             : time_kernel(b, cand[c], n, ti, ws_limit, &pool, ms);
                        if (ts != KILN_OK) {
                            kn_log(KILN_LOG_VERBOSE, "layer '%s': tactic '%s' skipped: %s",
                                   n->name, cand[c]->tactic, kiln_last_error());
                            *ms = -1;
                            continue;
                        }
                        kn_log(KILN_LOG_VERBOSE, "layer '%s': tactic '%s' %.3f ms (round %d)",
                               n->name, cand[c]->tactic, *ms, r + 1);
                    }
                /* the margin guards the CPU's choices against load on shared
                 * cores; a GPU's timings are not shared that way, and there
                 * the faster tactic in every round is kept */
                double margin = be == &kb_cpu_backend ? KBLD_TACTIC_MARGIN : 0.0;
                int pick = kbld_tactic_pick(ok, KBLD_TACTIC_ROUNDS, tms, ok - 1, margin);
                best = pick >= 0 ? cand[pick] : NULL;
                if (best) {
                    best_ms = tms[pick];
                    for (int r = 1; r < KBLD_TACTIC_ROUNDS; r++)
                        if (tms[r * ok + pick] < best_ms)
                            best_ms = tms[r * ok + pick];
                    if (pick != ok - 1)
                        kn_log(KILN_LOG_VERBOSE,
                               "layer '%s': tactic '%s' beat '%s' by %.0f%% in every round",
                               n->name, best->tactic, cand[ok - 1]->tactic, margin * 100);
                }
                timed++;
                if (!best) {
                    st = kn_node_error(n, KILN_ERR_UNSUPPORTED,
                                       "no tactic could run this layer (last: %s)",
                                       kiln_last_error());
                    break;
                }
                if ((st = kbld_tcache_put(cache, sig, best->tactic, best_ms)) != KILN_OK)
                    break;
            }
        } else if (ok > 1) {
            best = cand[ok - 1]; /* by rule: the library tactic registered last */
        }
        kn_free(n->tactic);
        if (!(n->tactic = kn_strdup(best->tactic))) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        double now = kn_now_ms();
        if (now - last_report > 2000.0) {
            kn_log(KILN_LOG_INFO, "choosing tactics: %d/%d layers (%.1f s)", i + 1, net->n_nodes,
                   (now - t_start) / 1e3);
            last_report = now;
        }
    }
    if (st == KILN_OK)
        kn_log(KILN_LOG_INFO,
               "tactics chosen for %d layers (%d timed, %d from the timing cache) in %.1f ms",
               net->n_nodes, timed, hits, kn_now_ms() - t_start);
    pool_free(&pool);
    kn_free(ti);
    return st;
}

/* ---------------- memory report ---------------- */

static kiln_status memory_report(kbld *b, kp_meta *meta) {
    for (int p = 0; p < meta->n_profiles; p++) {
        kx_program prog;
        kx_ctx ctx;
        KN_TRY(infer_ctx_on(b, p, KBLD_MAX, b->be, &prog, &ctx));
        /* prepare plans the arena; kernel instances are released with ctx */
        kiln_status st = kx_ctx_prepare(&ctx);
        if (st == KILN_OK) {
            if (ctx.info.arena_bytes > meta->arena_bytes)
                meta->arena_bytes = ctx.info.arena_bytes;
            if (ctx.info.sum_bytes > meta->activation_sum_bytes)
                meta->activation_sum_bytes = ctx.info.sum_bytes;
            if (ctx.info.workspace_bytes > meta->workspace_bytes)
                meta->workspace_bytes = ctx.info.workspace_bytes;
        }
        kx_ctx_fini(&ctx);
        kx_program_fini(&prog);
        KN_TRY(st);
    }
    return KILN_OK;
}

/* Record every tensor's type and shape in the network the plan stores: a
 * dimension that differs between profile points is dynamic (-1). Graph
 * inputs keep their declared dims and names. */
static kiln_status record_shapes(kbld *b) {
    kn_net *net = b->net;
    kn_tinfo *base = NULL;
    KN_TRY(kbld_infer(b, 0, KBLD_OPT, &base));
    kiln_status st = KILN_OK;
    for (int p = 0; p < b->meta->n_profiles && st == KILN_OK; p++)
        for (int w = KBLD_MIN; w <= KBLD_MAX && st == KILN_OK; w++) {
            kn_tinfo *o = NULL;
            st = kbld_infer(b, p, (kbld_which)w, &o);
            for (int i = 0; st == KILN_OK && i < net->n_tensors; i++) {
                if (o[i].rank != base[i].rank || o[i].data_dependent) {
                    base[i].rank = -1;
                    continue;
                }
                for (int d = 0; d < base[i].rank; d++)
                    if (o[i].dims[d] != base[i].dims[d])
                        base[i].dims[d] = -1;
            }
            kn_free(o);
        }
    for (int i = 0; st == KILN_OK && i < net->n_tensors; i++) {
        kn_tensor *t = &net->tensors[i];
        if (t->flags & (KN_T_INPUT | KN_T_CONST))
            continue;
        if (base[i].dtype != KILN_DTYPE_UNDEFINED) /* else (behind a sequence input not
                                                       bound at build) the declared type */
            t->dtype = base[i].dtype;
        t->rank = base[i].rank;
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            t->dims[d] = d < base[i].rank ? base[i].dims[d] : 0;
    }
    kn_free(base);
    return st;
}

/* ---------------- the build ---------------- */

static kiln_status check_network(const kn_net *net) {
    if (net->n_outputs == 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "the network has no outputs");
    for (int k = 0; k < net->n_inputs; k++) {
        const kn_tensor *t = &net->tensors[net->inputs[k]];
        if (kiln_dtype_size(t->dtype) == 0)
            return kn_error(KILN_ERR_UNSUPPORTED, "input '%s' has unsupported type %s", t->name,
                            kiln_dtype_name(t->dtype));
    }
    for (int k = 0; k < net->n_outputs; k++) {
        const kn_tensor *t = &net->tensors[net->outputs[k]];
        if (t->producer < 0 && !(t->flags & (KN_T_INPUT | KN_T_CONST)))
            return kn_error(KILN_ERR_PARSE, "output '%s' is not produced by any node", t->name);
    }
    return kn_net_check_attrs(net); /* networks made through the API too */
}

/* Give every constant owned, aligned storage once, so shape inference and
 * kernels read weights in place instead of copying unaligned ones (borrowed
 * from a mapped ONNX file) on every inference. */
static kiln_status align_constants(kn_net *net) {
    for (int i = 0; i < net->n_tensors; i++) {
        kn_tensor *t = &net->tensors[i];
        if (!(t->flags & KN_T_CONST) || ((uintptr_t)t->value.data & 63u) == 0)
            continue;
        kn_tdata v;
        KN_TRY(kn_tdata_copy(&v, &t->value));
        kn_tensor_set_value(t, &v);
    }
    return KILN_OK;
}

/* Plugin layers: the fields round trip and format negotiation (reformat
 * layers where a plugin takes other types than its neighbours give). */
static kiln_status plugins_prepare(kbld *b) {
    bool any = false;
    for (int i = 0; i < b->net->n_nodes; i++)
        any |= kpl_is_node(&b->net->nodes[i]);
    if (!any)
        return KILN_OK;
    kn_tinfo *ti = NULL;
    KN_TRY(kbld_infer(b, 0, KBLD_OPT, &ti));
    kiln_status st = kpl_build_prepare(b->net, ti);
    kn_free(ti);
    if (st == KILN_OK)
        st = kn_net_toposort(b->net);
    return st;
}

/* KILN_BUILDER_FLAG_TF32: matrix layers in FP32 may use TF32 tensor cores
 * (attribute allow_tf32, on MatMul, Gemm and Conv);
 * KILN_BUILDER_FLAG_FP16_ACCUMULATION: float16 products may accumulate in
 * float16 (allow_fp16_accum, on MatMul and Gemm). A permission rides on the
 * layer as an attribute set to 1, so kernels see it at run time, plans keep
 * it, and the timing cache tells the builds apart. */
static kiln_status allow_on_matrix_layers(kn_net *net, const char *attr, bool conv) {
    for (int i = 0; i < net->n_nodes; i++) {
        kn_node *n = &net->nodes[i];
        bool mm = strcmp(n->op_type, "MatMul") == 0 || strcmp(n->op_type, "Gemm") == 0 ||
                  (conv && strcmp(n->op_type, "Conv") == 0);
        if (n->dead || !mm || (n->domain[0] && strcmp(n->domain, KN_DOMAIN_KILN) != 0) ||
            n->n_in < 1 || n->in[0] < 0)
            continue;
        KN_TRY(kn_node_set_int(n, attr, 1));
    }
    return KILN_OK;
}

/* KILN_BUILDER_FLAG_TF32 with TIMED_PRECISION: TF32 is allowed, not forced.
 * Each FP32 matrix layer is timed without and with allow_tf32 at the opt
 * shapes of profile 0 and keeps TF32 only when it is faster; the times ride
 * on the layer (kiln_precision_tf32_ms: without, with). */
static kiln_status tf32_by_time(kbld *b) {
    kn_net *net = b->net;
    if (!b->be || b->be == &kb_cpu_backend)
        return KILN_OK; /* the CPU has no TF32: nothing to time or allow */
    kn_tinfo *ti = NULL;
    KN_TRY(kbld_infer(b, 0, KBLD_OPT, &ti));
    kiln_status st = KILN_OK;
    int kept = 0, timed = 0;
    for (int i = 0; i < net->n_nodes && st == KILN_OK; i++) {
        kn_node *n = &net->nodes[i];
        bool mm = strcmp(n->op_type, "MatMul") == 0 || strcmp(n->op_type, "Gemm") == 0 ||
                  strcmp(n->op_type, "Conv") == 0;
        if (n->dead || !mm || (n->domain[0] && strcmp(n->domain, KN_DOMAIN_KILN) != 0) ||
            n->n_in < 1 || n->in[0] < 0 || ti[n->in[0]].dtype != KILN_DTYPE_FLOAT ||
            n->n_in > 64 || n->n_out > 16)
            continue;
        kn_tinfo in[64], out[16];
        for (int j = 0; j < n->n_in; j++) {
            memset(&in[j], 0, sizeof in[j]);
            if (n->in[j] >= 0)
                in[j] = ti[n->in[j]];
            in[j].value = NULL;
        }
        for (int j = 0; j < n->n_out; j++) {
            memset(&out[j], 0, sizeof out[j]);
            if (n->out[j] >= 0)
                out[j] = ti[n->out[j]];
            out[j].value = NULL;
        }
        double t[2] = {-1, -1};
        for (int w = 0; w < 2 && st == KILN_OK; w++) {
            if ((st = kn_node_set_int(n, "allow_tf32", w)) != KILN_OK)
                break;
            if (kbld_time_layer(b, n, in, out, &t[w]) != KILN_OK) {
                kn_error_clear();
                t[w] = -1;
            }
        }
        bool use = t[1] >= 0 && (t[0] < 0 || t[1] < t[0]);
        if (st == KILN_OK)
            st = kn_node_set_int(n, "allow_tf32", use ? 1 : 0);
        float f[2] = {(float)t[0], (float)t[1]};
        if (st == KILN_OK)
            st = kn_node_set_floats(n, "kiln_precision_tf32_ms", f, 2);
        timed++;
        kept += use;
    }
    kn_free(ti);
    if (st == KILN_OK && timed)
        kn_log(KILN_LOG_INFO, "precision: TF32 timed on %d matrix layer(s), kept where faster "
               "(%d)", timed, kept);
    return st;
}

static kiln_status build(const kn_net *src, const kiln_builder_config *cfg, void **plan,
                         size_t *size) {
    double t0 = kn_now_ms();
    const kb_backend *be = kb_backend_get(cfg->backend);
    if (!be)
        return kn_error(KILN_ERR_DEVICE, "backend '%s' is not available in this build of kiln",
                        cfg->backend);
    char target[64], libs[128];
    KN_TRY(be->describe(target, sizeof target, libs, sizeof libs));
    kn_net *net = NULL;
    kp_meta meta;
    memset(&meta, 0, sizeof meta);
    KN_TRY(kn_net_clone(src, &net));
    kiln_status st = align_constants(net);
    if (st == KILN_OK)
        st = kn_net_toposort(net);
    if (st == KILN_OK)
        st = check_network(net);
    if (st == KILN_OK)
        st = make_profiles(net, cfg, &meta);
    if (st == KILN_OK && (cfg->flags & KILN_BUILDER_FLAG_STRONGLY_TYPED) &&
        ((cfg->flags & (KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_BF16 | KILN_BUILDER_FLAG_TF32)) ||
         cfg->n_lprec > 0))
        st = kn_error(KILN_ERR_INVALID_ARGUMENT,
                      "a strongly typed build takes its precisions from the network's types; "
                      "FP16/BF16/TF32 flags and layer precision constraints are not allowed with it");
    kbld_tcache cache = {0};
    char key[256];
    snprintf(key, sizeof key, "%s|%s|%s", be->name, target, libs);
    snprintf(cache.key, sizeof cache.key, "%s", key);
    if (st == KILN_OK && cfg->timing_cache) /* before the passes: precision reads it too */
        st = kbld_tcache_load(&cache, cfg->timing_cache, key);
    kbld b = {net, cfg->flags, &meta, cfg->threads > 0 ? cfg->threads : kb_cpu_default_threads(),
              cfg, be, &cache, NULL, NULL, 0};
    int nodes_before = net->n_nodes;
    kn_log(KILN_LOG_INFO, "building: %d layers, %d inputs, %d outputs, %d profile(s)",
           net->n_nodes, net->n_inputs, net->n_outputs, meta.n_profiles);
    /* every profile point must infer before any work is done */
    for (int p = 0; st == KILN_OK && p < meta.n_profiles; p++)
        for (int w = KBLD_MIN; st == KILN_OK && w <= KBLD_MAX; w++) {
            kn_tinfo *ti = NULL;
            st = kbld_infer(&b, p, (kbld_which)w, &ti);
            kn_free(ti);
        }
    double t1 = kn_now_ms();
    if (st == KILN_OK)
        st = kbld_optimize(&b);
    if (st == KILN_OK)
        st = kn_net_compact(net);
    if (st == KILN_OK)
        st = kn_net_toposort(net);
    if (st == KILN_OK)
        kn_log(KILN_LOG_INFO, "optimized: %d layers -> %d in %.1f ms", nodes_before, net->n_nodes,
               kn_now_ms() - t1);
    if (st == KILN_OK && (cfg->flags & KILN_BUILDER_FLAG_TF32))
        st = (cfg->flags & KILN_BUILDER_FLAG_TIMED_PRECISION) && !kbld_no_timing(&b)
                 ? tf32_by_time(&b)
                 : allow_on_matrix_layers(net, "allow_tf32", true);
    if (st == KILN_OK && (cfg->flags & KILN_BUILDER_FLAG_FP16_ACCUMULATION))
        st = allow_on_matrix_layers(net, "allow_fp16_accum", false);
    if (st == KILN_OK)
        st = plugins_prepare(&b);
    if (st == KILN_OK)
        st = record_shapes(&b);
    if (st == KILN_OK)
        st = choose_tactics(&b, cfg->workspace_limit, &cache);
    if (st == KILN_OK)
        st = kbld_place_reformats(&b);
    if (st == KILN_OK && cfg->timing_cache) /* written even when nothing was timed */
        st = kbld_tcache_save(&cache, cfg->timing_cache);
    kbld_tcache_free(&cache);
    if (b.time_pool) {
        pool_free((rand_pool *)b.time_pool);
        kn_free(b.time_pool);
        b.time_pool = NULL;
    }
    if (st == KILN_OK)
        st = memory_report(&b, &meta);
    if (st == KILN_OK && cfg->workspace_limit && meta.workspace_bytes > cfg->workspace_limit)
        st = kn_error(KILN_ERR_OUT_OF_MEMORY,
                      "the chosen layers need %llu bytes of workspace, over the limit of %llu",
                      (unsigned long long)meta.workspace_bytes,
                      (unsigned long long)cfg->workspace_limit);
    if (st == KILN_OK) {
        snprintf(meta.backend, sizeof meta.backend, "%s", be->name);
        snprintf(meta.target, sizeof meta.target, "%s", target);
        snprintf(meta.libraries, sizeof meta.libraries, "%s", libs);
        meta.flags = cfg->flags;
        meta.build_ms = kn_now_ms() - t0;
        kn_buf plugins;
        memset(&plugins, 0, sizeof plugins);
        st = kpl_plan_section(net, &plugins);
        meta.plugin_section = plugins.data;
        meta.plugin_section_size = plugins.len;
        if (st == KILN_OK)
            st = kp_write(net, &meta, plan, size);
        kn_buf_free(&plugins);
        meta.plugin_section = NULL;
        meta.plugin_section_size = 0;
    }
    if (st == KILN_OK)
        kn_log(KILN_LOG_INFO,
               "build finished in %.1f ms: %d layers, activation arena %llu bytes (sum of "
               "activations %llu), workspace %llu bytes, plan %zu bytes",
               kn_now_ms() - t0, net->n_nodes, (unsigned long long)meta.arena_bytes,
               (unsigned long long)meta.activation_sum_bytes,
               (unsigned long long)meta.workspace_bytes, *size);
    kn_aligned_free(b.zeros);
    kp_meta_free(&meta);
    kn_net_free(net);
    return st;
}

KILN_API kiln_status kiln_build_serialized(const kiln_network *net, const kiln_builder_config *cfg,
                                           void **plan, size_t *size) {
    if (!net || !cfg || !plan || !size)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_serialized: NULL argument");
    void *p = NULL;
    size_t n = 0;
    kn_net *qnet = NULL; /* net with the Q/DQ calibration gives it */
    kiln_status st = kcal_apply(net, cfg, &qnet);
    if (st == KILN_OK)
        st = build(qnet ? qnet : net, cfg, &p, &n);
    kn_net_free(qnet);
    if (st != KILN_OK)
        return kn_error_wrap(st, "build failed");
    *plan = p;
    *size = n;
    return KILN_OK;
}
